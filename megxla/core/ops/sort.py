"""Sorting primitives (along the last axis; indices are int32). Ties as MegEngine orders them: ascending keeps
the original order, descending is the ascending order reversed (tied indices come last-first)."""
import jax.numpy as jnp

from .._op import Primitive


def _order(x, descending):
    # MegEngine's descending sort / argsort / topk reverse the stable ascending order: topk([2, 2, 1], 1) is
    # index 1, not 0 (checked against MegEngine 1.13).
    idx = jnp.argsort(x, axis=-1, stable=True).astype(jnp.int32)
    return jnp.flip(idx, axis=-1) if descending else idx


def _sort(x, *, descending):
    idx = _order(x, descending)
    return jnp.take_along_axis(x, idx, axis=-1), idx


def _topk(x, *, k, descending, kth_only):
    # NOTE: a full stable sort then a slice rather than lax.top_k: top_k only takes the largest, and negating
    # to get the smallest breaks for unsigned and minimum integers; the rows sorted here are short.
    idx = _order(x, descending)
    idx = idx[..., k - 1] if kth_only else idx[..., :k]
    if kth_only:
        return jnp.take_along_axis(x, idx[..., None], axis=-1)[..., 0], idx
    return jnp.take_along_axis(x, idx, axis=-1), idx


sort = Primitive("sort", _sort, multiple_results=True)
topk = Primitive("topk", _topk, multiple_results=True)
