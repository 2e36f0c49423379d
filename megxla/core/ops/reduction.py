"""Reductions: ``axis`` (tuple or None) and ``keepdims`` are static parameters."""
import jax
import jax.numpy as jnp

from .._op import Primitive


def _sum(x, *, axis, keepdims):
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.int32)
    return jnp.sum(x, axis=axis, keepdims=keepdims)


def _var(x, *, axis, keepdims, ddof):
    return jnp.var(x, axis=axis, keepdims=keepdims, ddof=ddof)


def _argreduce(fn):
    def impl(x, *, axis, keepdims):
        if axis is None:
            out = fn(x.reshape(-1), axis=0)
            return out.reshape((1,) * x.ndim).astype(jnp.int32) if keepdims else out.astype(jnp.int32)
        return fn(x, axis=axis, keepdims=keepdims).astype(jnp.int32)
    return impl


def _cumsum(x, *, axis):
    return jnp.cumsum(x, axis=axis)


def _logsumexp(x, *, axis, keepdims):
    return jax.scipy.special.logsumexp(x, axis=axis, keepdims=keepdims)


def _norm(x, *, ord, axis, keepdims):
    if ord == 0:  # MegEngine: the count of non-zeros, as int32
        return jnp.sum(x != 0, axis=axis, keepdims=keepdims, dtype=jnp.int32)
    if ord == float("inf"):
        return jnp.max(jnp.abs(x), axis=axis, keepdims=keepdims)
    if ord == float("-inf"):
        return jnp.min(jnp.abs(x), axis=axis, keepdims=keepdims)
    if ord == 2:
        return jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims))
    if ord == 1:
        return jnp.sum(jnp.abs(x), axis=axis, keepdims=keepdims)
    return jnp.sum(jnp.abs(x) ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)


sum = Primitive("reduce_sum", _sum)
mean = Primitive("reduce_mean", lambda x, *, axis, keepdims: jnp.mean(x, axis=axis, keepdims=keepdims))
prod = Primitive("reduce_prod", lambda x, *, axis, keepdims: jnp.prod(x, axis=axis, keepdims=keepdims))
max = Primitive("reduce_max", lambda x, *, axis, keepdims: jnp.max(x, axis=axis, keepdims=keepdims))
min = Primitive("reduce_min", lambda x, *, axis, keepdims: jnp.min(x, axis=axis, keepdims=keepdims))
var = Primitive("reduce_var", _var)
argmax = Primitive("argmax", _argreduce(jnp.argmax))
argmin = Primitive("argmin", _argreduce(jnp.argmin))
cumsum = Primitive("cumsum", _cumsum)
logsumexp = Primitive("logsumexp", _logsumexp)
norm = Primitive("norm", _norm)
