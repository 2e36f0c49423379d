"""Indexing primitives. The index *structure* is a static parameter; integer index tensors are inputs.

``spec`` is a tuple of items: ``("i", k)`` an int, ``("s", start, stop, step)`` a slice, ``("n",)`` None
(new axis), ``("e",)`` ellipsis, ``("t",)`` the next integer index tensor among the inputs, ``("b", v)`` a Python
bool (NumPy's new axis of length 1 for True, 0 for False).

A boolean mask's indices are computed on the device (``mask_nonzero``) with the number of true values as a static
parameter (``mask_count``, read on the host): a traced step depends on the count only, not on the mask's values.
"""
import functools

import jax
import jax.numpy as jnp

from .._op import Primitive
from .elemwise import cast, gather_wide


def _wide(index):
    """``index`` as int32 if its integer type is narrower: JAX wraps a negative index by adding the axis's length
    in the index's own type, which overflows for an int8 index into an axis of 300 (MegEngine accepts it)."""
    return index.astype(jnp.int32) if index.dtype.itemsize < 4 and index.dtype.kind in "iu" else index


def build_index(spec, tensors):
    it = iter(tensors)
    out = []
    for item in spec:
        kind = item[0]
        if kind == "i":
            out.append(item[1])
        elif kind == "s":
            out.append(slice(*item[1:]))
        elif kind == "n":
            out.append(None)
        elif kind == "e":
            out.append(Ellipsis)
        elif kind == "b":
            out.append(item[1])
        else:
            out.append(_wide(next(it)))
    return tuple(out)


def _getitem(x, *index_tensors, spec):
    index = build_index(spec, index_tensors)
    if index_tensors:  # (a gather: float16's gradient, a scatter-add over repeated indices, sums in float32)
        return gather_wide(lambda t: t[index], x)
    return x[index]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _set_at(x, value, indices, index):
    """``x`` with ``value`` written at ``index(indices)`` (last write wins); its gradient is MegEngine's: every
    written value gets the output's gradient at its position, an overwritten one too (``z[[0, 0]] = v``:
    ``v.grad == [1, 1]``, where JAX's vjp of the scatter gives only the winner's), and ``x`` the output's gradient
    where nothing was written."""
    from .elemwise import cast  # (MegEngine's conversion of the written values: -1.5 into uint8 is 255)
    return x.at[index(indices)].set(cast(value, x.dtype))


def _set_at_fwd(x, value, indices, index):
    return _set_at(x, value, indices, index), (value, indices)


def _set_at_bwd(index, res, g):
    value, indices = res
    if g.dtype == jax.dtypes.float0:  # (an integer tensor written: nothing to differentiate)
        return g, None, None
    where = index(indices)
    gx = g.at[where].set(0)
    if not jnp.issubdtype(value.dtype, jnp.inexact):
        return gx, None, None
    # (the written block's gradient, summed over the dimensions ``value`` was broadcast along)
    _, to_value = jax.vjp(lambda v: jnp.broadcast_to(v.astype(g.dtype), g[where].shape), value)
    return gx, to_value(g[where])[0], None


_set_at.defvjp(_set_at_fwd, _set_at_bwd)


class _Index:
    """A hashable ``spec`` -> index builder (custom_vjp's static argument)."""

    __slots__ = ("spec", "build")

    def __init__(self, spec, build):
        self.spec, self.build = spec, build

    def __call__(self, tensors):
        return self.build(self.spec, tensors)

    def __hash__(self):
        return hash((self.spec, self.build))

    def __eq__(self, other):
        return type(other) is _Index and other.spec == self.spec and other.build is self.build


def _setitem(x, value, *index_tensors, spec):
    return _set_at(x, value, index_tensors, _Index(spec, build_index))


def _incritem(x, value, *index_tensors, spec):
    # NOTE: a scatter-add, not setitem of ``x[index] + value``: an index repeated adds each of its values
    # (MegEngine's IndexingIncrMultiAxisVec: ``x[[1, 1]] += v`` adds ``v[0] + v[1]`` to row 1), where setitem's
    # last write wins. Its gradient is jax.vjp's: the output's gradient for ``x``, the gathered one for ``value``.
    return x.at[build_index(spec, index_tensors)].add(cast(value, x.dtype))


def _gather(x, index, *, axis):
    index = _wide(index)
    # The index may be smaller than x in the other dimensions (MegEngine accepts it): out takes index's shape,
    # out[i][j] = x[index[i][j]][j] for axis 0.
    # (float16 through float32: the gradient, a scatter-add over repeated indices, sums in float32)
    if index.shape == x.shape[:axis] + index.shape[axis:axis + 1] + x.shape[axis + 1:]:
        return gather_wide(lambda t: jnp.take_along_axis(t, index, axis=axis), x)
    idx = list(jnp.indices(index.shape, sparse=True))
    idx[axis] = index
    return gather_wide(lambda t: t[tuple(idx)], x)


def _scatter_index(axis, tensors):
    index = _wide(tensors[0])
    idx = list(jnp.indices(index.shape, sparse=True))
    idx[axis] = index
    return tuple(idx)


def _scatter(x, index, source, *, axis):
    # NOTE: MegEngine's scatter writes source into x along axis at index (last write wins); every source value
    # gets the gradient at its position, an overwritten one too (_set_at).
    # (C's conversion, as setitem's and astype's: -1.5 into uint8 is 255, not XLA's saturated 0)
    return _set_at(x, cast(source, x.dtype), (index,), _Index(axis, _scatter_index))


def _indexing_one_hot(x, index, *, axis, keepdims):
    out = jnp.take_along_axis(x, jnp.expand_dims(_wide(index), axis), axis=axis)
    return out if keepdims else jnp.squeeze(out, axis)


def _mask_count(mask):
    return jnp.count_nonzero(mask).astype(jnp.int32)


def _mask_nonzero(mask, *, count):
    # ``count`` is the mask's number of true values (read on the host): the static size that makes the result
    # shape known; one int32 index array per mask dimension, in NumPy's (row-major) order
    return tuple(i.astype(jnp.int32) for i in jnp.nonzero(mask, size=count))


getitem = Primitive("getitem", _getitem)
setitem = Primitive("setitem", _setitem)
incritem = Primitive("incritem", _incritem)
gather = Primitive("gather", _gather)
scatter = Primitive("scatter", _scatter)
indexing_one_hot = Primitive("indexing_one_hot", _indexing_one_hot)
mask_count = Primitive("mask_count", _mask_count)
mask_nonzero = Primitive("mask_nonzero", _mask_nonzero, multiple_results=True)
