"""Reductions: ``axis`` (tuple or None) and ``keepdims`` are static parameters."""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._op import Primitive
from .._rounding import divide, mean_of_sum
from .elemwise import _abs  # (MegEngine's abs: its gradient at 0 is -1)


def low_precision(x):
    """Whether ``x`` is float16 or bfloat16 (accumulated and normalised in float32 by the ops that sum it)."""
    return jnp.issubdtype(x.dtype, jnp.floating) and jnp.dtype(x.dtype).itemsize < 4


def _sum(x, *, axis, keepdims):
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.int32)
    if low_precision(x):  # float16 / bfloat16: accumulated in float32, the result in the input's type (a bfloat16
        # sum of 100000 x 0.1 accumulated in bfloat16 was 9600, against 10009.8)
        return jnp.sum(x.astype(jnp.float32), axis=axis, keepdims=keepdims).astype(x.dtype)
    # dtype=x.dtype: MegEngine's integer sums keep the input's type (uint8 wraps); jnp widens to (u)int32.
    return jnp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _prod(x, *, axis, keepdims):
    return jnp.prod(x, axis=axis, keepdims=keepdims, dtype=None if x.dtype == jnp.bool_ else x.dtype)


def _var(x, *, axis, keepdims, ddof):
    if x.dtype == jnp.float16:  # a mean inside: float32, as MegEngine's mean of float16
        x = x.astype(jnp.float32)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.var(x, axis=axis, keepdims=keepdims, ddof=ddof)
    # MegEngine's F.var: mean((x - mean(x)) ** 2) of its own ops (_mean's rounding)
    v = x - _mean(x, axis=axis, keepdims=True)
    if ddof == 0:
        return _mean(v * v, axis=axis, keepdims=keepdims)
    return divide(jnp.sum(v * v, axis=axis, keepdims=keepdims), np.asarray(_count(x, axis) - ddof, x.dtype))


def _argreduce(fn):
    def impl(x, *, axis, keepdims):
        if axis is None:
            out = fn(x.reshape(-1), axis=0)
            return out.reshape((1,) * x.ndim).astype(jnp.int32) if keepdims else out.astype(jnp.int32)
        return fn(x, axis=axis, keepdims=keepdims).astype(jnp.int32)
    return impl


def _cumsum(x, *, axis):
    if low_precision(x):  # (accumulated in float32, as _sum)
        return jnp.cumsum(x.astype(jnp.float32), axis=axis).astype(x.dtype)
    return jnp.cumsum(x, axis=axis)


def _logsumexp(x, *, axis, keepdims):
    return jax.scipy.special.logsumexp(x, axis=axis, keepdims=keepdims)


def _norm(x, *, ord, axis, keepdims):
    if ord == 0:  # MegEngine: the count of non-zeros, as int32
        return jnp.sum(x != 0, axis=axis, keepdims=keepdims, dtype=jnp.int32)
    # (MegEngine's norm is ``sum(abs(x) ** ord) ** (1 / ord)`` of its own ops: an L1 penalty's gradient at a weight
    # of exactly 0 is -1, as its abs's, where jnp.abs gives +1 -- a zero-initialised bias moved the other way)
    # (inf / -inf: MegEngine's max / min of abs, with their gradient -- the full cotangent to every tie, and to a
    # maximum of each slice however a compiled step rounds; jnp.max's splits it among ties)
    if ord == float("inf"):
        return max.bind(axis=axis, keepdims=keepdims).fn(_abs(x))
    if ord == float("-inf"):
        return min.bind(axis=axis, keepdims=keepdims).fn(_abs(x))
    if ord == 2:
        return jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims))
    if ord == 1:
        return jnp.sum(_abs(x), axis=axis, keepdims=keepdims)
    return jnp.sum(_abs(x) ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)


def _mean(x, *, axis, keepdims):
    if x.dtype == jnp.float16:  # MegEngine's mean of float16 is float32
        x = x.astype(jnp.float32)
    if not jnp.issubdtype(x.dtype, jnp.floating) or x.size == 0:
        return jnp.mean(x, axis=axis, keepdims=keepdims)
    if axis is None:
        return _mean_along(x.reshape(-1), 0, False).reshape((1,) * x.ndim if keepdims else ())
    if isinstance(axis, (tuple, list)):
        # MegEngine's mean over several axes is one mean after another, the last axis first, each rounded
        for a in sorted((a % x.ndim for a in axis), reverse=True):
            x = _mean_along(x, a, True)
        return x if keepdims else jnp.squeeze(x, tuple(a % x.ndim for a in axis))
    return _mean_along(x, axis % x.ndim, keepdims)


def _mean_along(x, axis, keepdims):
    """The mean over one axis as MegEngine's CPU Reduce(MEAN) kernel rounds it: over the last axis (no elements
    after it) of at least 4 values the sum divided by the count, otherwise multiplied by the count's reciprocal
    (what XLA would make of every division by a constant); the gradient the cotangent times the reciprocal in
    both (``mean_of_sum``). Probed on MegEngine 1.13 with integer-valued data, whose sums are exact: (64, 7) over
    axis 1 divides, (7, 64) over axis 0 and (3,) multiply."""
    n = x.shape[axis]
    total = jnp.sum(x, axis=axis, keepdims=keepdims)
    if n >= 4 and axis == x.ndim - 1:
        return mean_of_sum(total, n)
    return total * (np.asarray(1, x.dtype) / np.asarray(n, x.dtype))


def _count(x, axis):
    """The number of elements a reduction over ``axis`` (None, an int or a tuple) of ``x`` sums."""
    if axis is None:
        return x.size
    n = 1
    for a in (axis if isinstance(axis, (tuple, list)) else (axis,)):
        n *= x.shape[a]
    return n


def _chosen(x, out, axes, arg):
    """Boolean mask of ``x``'s shape: the elements equal to ``out`` (``x``'s max / min over ``axes``, kept dims), and
    in every slice reduced over ``axes`` at least one of its maxima / minima.

    NOTE: compared by value alone, a compiled step lost gradients: there x is often an expression XLA fuses into
    each consumer and rounds differently in each (a convolution's output less its spatial mean: the reduction's
    fusion and the compare's disagreed in the last bit), so ``x == max(x)`` failed in whole slices -- max over
    channels after a centring trained wrongly under ``xla_trace``, ``trace``, auto-jit and plain
    ``jax.jit(jax.grad(...))`` alike (max pooling had the same flaw: ops/nn.py). So each slice's gradient also goes
    to one position: the last one a reduction of the compare found -- computed once, so every reader of the mask
    agrees --, or where that compare too found none, ``argmax``'s (a variadic reduction over a transposed copy: only
    run, behind a ``cond``, when a slice needs it). Eagerly the compare is exact and the position one of the ties:
    the same mask as the compare's. A rounding difference can only miss an exact tie. (The price: one more pass over
    x -- a PointNet step with its max over 1024 points, 507 -> 533-543 ms on a 2-core CPU.)"""
    nd = x.ndim
    flat = None  # each element's position within its slice, the reduced axes flattened in order
    stride = 1
    for a in reversed(axes):
        term = lax.broadcasted_iota(jnp.int32, tuple(x.shape[d] if d == a else 1 for d in range(nd)), a) * stride
        flat = term if flat is None else flat + term
        stride *= x.shape[a]
    if flat is None:  # (a 0-d x: its one element)
        return jnp.ones(x.shape, bool)
    if not x.size:  # (no element: nothing to route a gradient to -- an empty selection's max over its rows' axis)
        return jnp.zeros(x.shape, bool)
    equal = x == out
    pos = jnp.max(jnp.where(equal, flat, -1), axis=axes, keepdims=True)
    # (a slice whose result is NaN has no maximum to route to: as MegEngine's x == max compare, it gets no gradient)
    missed = (pos < 0) & ~jnp.isnan(out)

    def by_arg(pos):
        kept = [d for d in range(nd) if d not in axes]
        xt = jnp.transpose(x, kept + list(axes)).reshape(tuple(x.shape[d] for d in kept) + (-1,))
        found = arg(xt, axis=-1).astype(jnp.int32).reshape(pos.shape)
        return jnp.where(missed, found, pos)

    pos = lax.cond(jnp.any(missed), by_arg, lambda pos: pos, pos)
    return equal | (flat == pos)


def _chooser_grad(reduce, arg):
    """Gradient of max/min as MegEngine's: the full cotangent to *every* element equal to the result (JAX
    splits it among ties) -- and, however a compiled step rounds, to a maximum of each slice (``_chosen``)."""

    def grad(params, primals, ct):
        (x,) = primals
        axis, keepdims = params["axis"], params["keepdims"]
        out = reduce(x, axis=axis, keepdims=True)
        if not keepdims:
            ct = jnp.reshape(ct, out.shape)
        axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
        hit = _chosen(x, out, tuple(sorted(a % x.ndim for a in axes)) if x.ndim else (), arg)
        return (jnp.where(hit, ct, jnp.zeros((), ct.dtype)).astype(x.dtype),)

    return grad


sum = Primitive("reduce_sum", _sum)
mean = Primitive("reduce_mean", _mean)
prod = Primitive("reduce_prod", _prod)
max = Primitive("reduce_max", lambda x, *, axis, keepdims: jnp.max(x, axis=axis, keepdims=keepdims),
                grad=_chooser_grad(jnp.max, jnp.argmax))
min = Primitive("reduce_min", lambda x, *, axis, keepdims: jnp.min(x, axis=axis, keepdims=keepdims),
                grad=_chooser_grad(jnp.min, jnp.argmin))
var = Primitive("reduce_var", _var)
argmax = Primitive("argmax", _argreduce(jnp.argmax))
argmin = Primitive("argmin", _argreduce(jnp.argmin))
cumsum = Primitive("cumsum", _cumsum)
logsumexp = Primitive("logsumexp", _logsumexp)
norm = Primitive("norm", _norm)
