"""Boolean selections at a fixed size: what auto-jit collects for ``x[mask]`` so that its clusters keep their shapes
whatever the mask's count.

``x[mask]`` (a 1-d mask over ``x``'s first axis) has ``count`` rows, a number that changes with the data (a
detector's foreground anchors). Collected as it is, every op on it takes a new shape each step and so does every
cluster: nothing compiles. Auto-jit instead computes it *padded*: ``pad_select`` gives all ``P = len(mask)`` rows,
the selected ones first, then copies of the first selected one; ``count`` is an input (an int32 scalar), not part of
the program. Ops that work row by row (elementwise, casts, slices of the other axes) run on the padded rows as on
the others; the rows past ``count`` leave only through the ops here, each of which drops them:

* ``pad_reduce`` sums (or averages) only the first ``count`` rows;
* ``pad_setitem`` writes only the first ``count`` rows (``y[mask] = v``, ``t[mask, k] = 1``).

With no row selected (``count`` 0) the padded rows copy row 0 of ``x``, and a broadcast operand's gradient goes
through ``pad_leak``, which gives eager's zeros.

Why copies of a selected row: an elementwise op on a padded row computes what it computes on that real row, so
it is finite wherever the real row's is, and its gradient on a padded row -- zero, since every way out drops the
row -- times a finite derivative is exactly zero. So a broadcast operand's gradient (a sum over all ``P`` rows)
is the sum over the real rows: eager's. (A padded row filled with zeros would give ``log(0) * 0 = nan`` in it.)
Each op's gradient is ``jax.vjp`` of its function; ``where(valid, v, stop_gradient(v))`` keeps the padded rows'
cotangents out of ``x``'s gradient.
"""
import jax
import jax.numpy as jnp
from jax import lax

from .._op import Primitive
from .indexing import _set_at, _Index, build_index
from .reduction import _sum


def _valid(count, n, ndim):
    """``arange(n) < count``, shaped to broadcast along the first of ``ndim`` axes."""
    return (jnp.arange(n, dtype=jnp.int32) < count).reshape((n,) + (1,) * (ndim - 1))


def _live(v, count):
    # the first ``count`` rows as they are, the others without a gradient
    valid = _valid(count, v.shape[0], v.ndim)
    return jnp.where(valid, v, lax.stop_gradient(v))


def _rows(mask, count):
    """The selected positions of ``mask`` (1-d), then the first of them again up to ``len(mask)`` entries."""
    idx = jnp.nonzero(mask, size=mask.shape[0], fill_value=0)[0].astype(jnp.int32)
    return jnp.where(jnp.arange(mask.shape[0], dtype=jnp.int32) < count, idx, idx[0])


def _pad_select(x, mask, count):
    return _live(jnp.take(x, _rows(mask, count), axis=0), count)


def _pad_reduce(x, count, *, mean, axis, keepdims):
    # the rows past ``count`` count as zeros; a mean divides by the number of real entries
    z = jnp.where(_valid(count, x.shape[0], x.ndim), x, jnp.zeros((), x.dtype))
    s = _sum(z, axis=axis, keepdims=keepdims)
    if not mean:
        return s
    axes = range(x.ndim) if axis is None else axis
    n = count.astype(jnp.float32)
    for a in axes:
        if a != 0:
            n = n * x.shape[a]
    return (s / n.astype(s.dtype)).astype(s.dtype)


def _pad_setitem(x, value, mask, count, *index_tensors, spec):
    # the mask's rows (its first ``count`` selected positions; the others past the end: dropped), then the other
    # index tensors (padded alongside it) -- ``spec`` as ``setitem``'s, the mask its first index tensor. The
    # value is broadcast to the written block (whose first axis is the rows'), so that its padded rows' cotangents
    # (``setitem``'s gradient reads them at clamped positions) stay out of its gradient, broadcast or not.
    valid = jnp.arange(mask.shape[0], dtype=jnp.int32) < count
    rows = jnp.where(valid, jnp.nonzero(mask, size=mask.shape[0], fill_value=0)[0].astype(jnp.int32), x.shape[0])
    index = _Index(spec, build_index)
    block = jax.eval_shape(lambda x, t: x[index(t)], x, (rows,) + index_tensors).shape
    value = _live(jnp.broadcast_to(value, block), count)
    return _set_at(x, value, (rows,) + index_tensors, index)


pad_select = Primitive("pad_select", _pad_select)
pad_reduce = Primitive("pad_reduce", _pad_reduce)
pad_setitem = Primitive("pad_setitem", _pad_setitem)


def _pad_leak(g, count):
    # a gradient summed over padded rows broadcast from a value that is not (``log(x[m]) * w``'s, for ``w``): with
    # no row selected, eager's sum is over nothing -- zeros --, where the padded rows (copies of an unselected row,
    # there being no selected one) could give ``0 * inf``
    return jnp.where(count > 0, g, jnp.zeros((), g.dtype))


pad_leak = Primitive("pad_leak", _pad_leak)
