"""Sorting primitives (along the last axis; indices are int32, ties keep their original order)."""
import jax.numpy as jnp

from .._op import Primitive


def _sort(x, *, descending):
    idx = jnp.argsort(x, axis=-1, stable=True, descending=descending).astype(jnp.int32)
    return jnp.take_along_axis(x, idx, axis=-1), idx


def _topk(x, *, k, descending, kth_only):
    # NOTE: a full stable sort then a slice rather than lax.top_k: top_k only takes the largest, and negating
    # to get the smallest breaks for unsigned and minimum integers; the rows sorted here are short.
    idx = jnp.argsort(x, axis=-1, stable=True, descending=descending).astype(jnp.int32)
    idx = idx[..., k - 1] if kth_only else idx[..., :k]
    if kth_only:
        return jnp.take_along_axis(x, idx[..., None], axis=-1)[..., 0], idx
    return jnp.take_along_axis(x, idx, axis=-1), idx


sort = Primitive("sort", _sort, multiple_results=True)
topk = Primitive("topk", _topk, multiple_results=True)
