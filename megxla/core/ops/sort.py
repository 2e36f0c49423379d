"""Sorting primitives (last axis)."""
import jax.numpy as jnp

from .._op import Primitive


def _sort(x, *, descending):
    key = -x if descending else x
    idx = jnp.argsort(key, axis=-1, stable=True).astype(jnp.int32)
    return jnp.take_along_axis(x, idx, axis=-1), idx


sort = Primitive("sort", _sort, multiple_results=True)
