"""Boolean selections at a fixed size: what auto-jit collects for ``x[mask]`` so that its clusters keep their shapes
whatever the mask's count.

``x[mask]`` (a 1-d mask over ``x``'s first axis) has ``count`` rows, a number that changes with the data (a
detector's foreground anchors). Collected as it is, every op on it takes a new shape each step and so does every
cluster: nothing compiles. Auto-jit instead keeps it *in place*: ``pad_select`` gives all ``len(mask)`` rows of ``x``,
the selected ones where they are and, in place of each other row, a copy of the first selected one. Ops that work
row by row (elementwise, casts, slices and reductions of the other axes) run on every row; the rows the mask does
not select leave only through the ops here, each of which drops them:

* ``pad_reduce`` sums (or averages) the selected rows;
* ``pad_setitem`` writes the selected rows (``y[mask] = v``: a ``where``; ``t[mask, k] = 1``: a scatter);
* ``pad_rows`` gathers the selected rows, in order (``x[mask]`` itself: for an op that needs the rows as such);
* ``pad_fill`` puts the lowest (or highest) value in the unselected rows: ``max`` (``min``) over them follows;
* ``pad_arg`` finds ``argmax``/``argmin`` over the selected rows, numbered among them;
* ``pad_and`` gives the rows a mask of a selection's rows selects among the selection's (a selection of a
  selection);
* ``pad_position`` makes a position among a prefix's rows (``x[:n]``: the first ``n`` rows) non-negative, so that
  ``x[:n][i]`` gathers from every row.
* ``pad_sort`` sorts a 1-d selection's rows among themselves (``argsort(y)``): the k-th selected row gets the k-th
  value and its position among the selected rows;
* ``pad_locate`` makes positions among a selection's rows (``pad_sort``'s) rows of its padded value, so that
  ``y[argsort(y)]`` gathers from every row;
* ``pad_head`` gives the rows of a slice of a selection's rows (``y[:-4]``, ``y[2:]``): a mask, kept in place too.
* ``pad_compact`` gathers a selection's rows into the first rows of a shorter padded value (its count known): an op
  costly per row (``roi_align``) runs on those, not on every row of a mask that selects few.

Why copies of a selected row: an elementwise op on such a row computes what it computes on that selected row, so
it is finite wherever the selection's is, and its gradient there -- zero, since every way out drops the row -- times
a finite derivative is exactly zero. So a broadcast operand's gradient (a sum over all rows) is the sum over the
selected ones: eager's. (The unselected rows themselves could hold ``log(0)``, and ``0 * inf`` is ``nan``.) With no
row selected there is nothing to copy: a broadcast operand's gradient goes through ``pad_leak``, which gives eager's
zeros. Each op's gradient is ``jax.vjp`` of its function; ``where(mask, v, stop_gradient(v))`` keeps the unselected
rows' cotangents out of ``x``'s gradient.
"""
import jax
import jax.numpy as jnp
from jax import lax

from .._op import Primitive
from .indexing import _set_at, _Index, build_index
from .reduction import _mean, _sum


def _rows(mask, ndim):
    """``mask`` shaped to broadcast along the first of ``ndim`` axes."""
    return mask.reshape(mask.shape + (1,) * (ndim - 1))


def _live(v, mask):
    # the selected rows as they are, the others without a gradient
    return jnp.where(_rows(mask, v.ndim), v, lax.stop_gradient(v))


def _pad_select(x, mask):
    first = lax.stop_gradient(x[jnp.argmax(mask)])  # (row 0 where none is selected)
    return jnp.where(_rows(mask, x.ndim), x, first)


def _pad_rows(x, mask, *, count):
    # ``count`` is the mask's number of true values (read on the host): the selection itself, its rows in order
    return jnp.take(x, jnp.nonzero(mask, size=count)[0], axis=0)


def _pad_reduce(x, mask, *, mean, axis, keepdims):
    # the unselected rows count as zeros; a mean divides by the number of selected entries, in ``reduce_mean``'s
    # types (float32 for integers and float16 -- MegEngine's --, accumulated in float32 for bfloat16 as jnp.mean)
    if not mean:
        return _sum(jnp.where(_rows(mask, x.ndim), x, jnp.zeros((), x.dtype)), axis=axis, keepdims=keepdims)
    out = jax.eval_shape(lambda a: _mean(a, axis=None, keepdims=False), jax.ShapeDtypeStruct((1,), x.dtype)).dtype
    acc = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) and jnp.dtype(x.dtype).itemsize >= 4 else jnp.float32
    z = jnp.where(_rows(mask, x.ndim), x.astype(acc), jnp.zeros((), acc))
    n = jnp.count_nonzero(mask).astype(acc)
    for a in range(x.ndim) if axis is None else axis:
        if a != 0:
            n = n * x.shape[a]
    return (jnp.sum(z, axis=axis, keepdims=keepdims) / n).astype(out)


def _pad_setitem(x, value, mask, *index_tensors, spec):
    # ``spec`` as ``setitem``'s, the mask its first index tensor, the others as padded as ``value`` may be. The
    # value is broadcast to the written block (whose first axis is the mask's), so that the unselected rows'
    # cotangents stay out of its gradient, broadcast or not.
    if not index_tensors and all(s == ("s", None, None, None) for s in spec[1:]):
        from .elemwise import cast  # (MegEngine's conversion of the written values, as setitem's)
        v = cast(jnp.broadcast_to(value, x.shape), x.dtype)
        return jnp.where(_rows(mask, x.ndim), _live(v, mask), x)
    rows = jnp.where(mask, jnp.arange(mask.shape[0], dtype=jnp.int32), x.shape[0])  # (past the end: dropped)
    index = _Index(spec, build_index)
    block = jax.eval_shape(lambda x, t: x[index(t)], x, (rows,) + index_tensors).shape
    return _set_at(x, _live(jnp.broadcast_to(value, block), mask), (rows,) + index_tensors, index)


def _pad_leak(g, mask):
    # a gradient summed over every row, broadcast from a value that is not padded (``log(x[m]) * w``'s, for ``w``):
    # with no row selected, eager's sum is over nothing -- zeros --, where the rows (copies of an unselected row,
    # there being no selected one) could give ``0 * inf``
    return jnp.where(jnp.any(mask), g, jnp.zeros((), g.dtype))


def _fill_of(dtype, low):
    """What the unselected rows hold for a maximum (``low``) or a minimum: a value no selected one exceeds."""
    if jnp.issubdtype(dtype, jnp.floating):
        return -jnp.inf if low else jnp.inf
    if dtype == jnp.bool_:
        return not low
    info = jnp.iinfo(dtype)
    return info.min if low else info.max


def _pad_fill(x, mask, *, low):
    # the rows for ``max``/``min`` over them (``reduce_max`` then runs on this, its gradient MegEngine's): the
    # unselected ones lowest (``low``) or highest, their cotangents dropped by the ``where``
    return jnp.where(_rows(mask, x.ndim), x, jnp.asarray(_fill_of(x.dtype, low), x.dtype))


def _pad_arg(x, mask, *, low, keepdims):
    # ``argmax``/``argmin`` over the rows (``low``: argmax): the first selected row holding the maximum (a NaN first,
    # as NumPy's), numbered among the selected rows
    filled = _pad_fill(x, mask, low=low)
    best = (jnp.max if low else jnp.min)(filled, axis=0, keepdims=True)
    hit = _rows(mask, x.ndim) & ((x == best) | (jnp.isnan(x) & jnp.isnan(best)) if jnp.issubdtype(
        x.dtype, jnp.inexact) else x == best)
    row = jnp.argmax(hit, axis=0, keepdims=keepdims)
    return jnp.take(jnp.cumsum(mask.astype(jnp.int32)) - 1, row).astype(jnp.int32)


def _pad_position(i, count):
    # positions among a prefix's rows (``x[:n][i]``: the first ``count`` rows, where they are) made non-negative: the
    # row they name in every row
    return jnp.where(i < 0, i + count.astype(i.dtype), i)


def _compacted(mask):
    # each row's position among the selected rows (a selected row's own; 0 before the first selected one)
    return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32)) - 1, 0)


def _pad_sort(x, mask, *, descending):
    # the sort of the selected rows (``sort``'s: stable ascending, descending its reverse), the k-th of them put in
    # the k-th selected row, the others given the first's; positions numbered among the selected rows
    n = mask.shape[0]
    iota = jnp.arange(n, dtype=jnp.int32)
    order = lax.sort((~mask, x, iota), num_keys=2, is_stable=True)[2]  # (the selected rows first, ascending)
    k = _compacted(mask)
    if descending:
        k = jnp.maximum(jnp.count_nonzero(mask).astype(jnp.int32) - 1 - k, 0)
    k = jnp.where(mask, k, k[jnp.argmax(mask)])
    row = order[k]
    return x[row], _compacted(mask)[row]


def _pad_locate(i, mask):
    # positions among the selected rows (negative ones counted from their end) made rows of the padded value
    n = mask.shape[0]
    rows = jnp.nonzero(mask, size=n, fill_value=0)[0].astype(i.dtype)
    i = jnp.where(i < 0, i + jnp.count_nonzero(mask).astype(i.dtype), i)
    return rows[jnp.clip(i, 0, n - 1)]


def _pad_head(mask, *, start, stop):
    # the selected rows whose position among them is in ``start:stop`` (Python's slice of the selection itself)
    c = jnp.cumsum(mask.astype(jnp.int32))  # (1 + a selected row's position)
    n = c[-1]

    def at(v, default):
        if v is None:
            return default
        return jnp.clip(n + v if v < 0 else jnp.int32(v), 0, n)

    return mask & (c > at(start, 0)) & (c <= at(stop, n))


def _pad_compact(x, mask, *, rows):
    # the selected rows in order, then copies of the first (``rows``: at least their count)
    first = jnp.argmax(mask)
    return x[jnp.nonzero(mask, size=rows, fill_value=first)[0]]


pad_select = Primitive("pad_select", _pad_select)
pad_rows = Primitive("pad_rows", _pad_rows)
pad_reduce = Primitive("pad_reduce", _pad_reduce)
pad_setitem = Primitive("pad_setitem", _pad_setitem)
pad_leak = Primitive("pad_leak", _pad_leak)
pad_fill = Primitive("pad_fill", _pad_fill)
pad_arg = Primitive("pad_arg", _pad_arg)
pad_position = Primitive("pad_position", _pad_position)
# a mask of a selection's rows (``y[:, 0] > 0``, ``y = x[m]``) and the selection's mask: the rows both select (the
# unselected rows' copies dropped), for ``y[y[:, 0] > 0]`` in place
pad_and = Primitive("pad_and", lambda m, mask: m & mask)
pad_sort = Primitive("pad_sort", _pad_sort, multiple_results=True)
pad_locate = Primitive("pad_locate", _pad_locate)
pad_head = Primitive("pad_head", _pad_head)
pad_compact = Primitive("pad_compact", _pad_compact)
