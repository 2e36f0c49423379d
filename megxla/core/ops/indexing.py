"""Indexing primitives. The index *structure* is a static parameter; integer index tensors are inputs.

``spec`` is a tuple of items: ``("i", k)`` an int, ``("s", start, stop, step)`` a slice, ``("n",)`` None
(new axis), ``("e",)`` ellipsis, ``("t",)`` the next integer index tensor among the inputs, ``("b", v)`` a Python
bool (NumPy's new axis of length 1 for True, 0 for False).

A boolean mask's indices are computed on the device (``mask_nonzero``) with the number of true values as a static
parameter (``mask_count``, read on the host): a traced step depends on the count only, not on the mask's values.
"""
import jax.numpy as jnp

from .._op import Primitive


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
            out.append(next(it))
    return tuple(out)


def _getitem(x, *index_tensors, spec):
    return x[build_index(spec, index_tensors)]


def _setitem(x, value, *index_tensors, spec):
    from .elemwise import cast  # (MegEngine's conversion of the written values: -1.5 into uint8 is 255)
    return x.at[build_index(spec, index_tensors)].set(cast(value, x.dtype))


def _gather(x, index, *, axis):
    # The index may be smaller than x in the other dimensions (MegEngine accepts it): out takes index's shape,
    # out[i][j] = x[index[i][j]][j] for axis 0.
    if index.shape == x.shape[:axis] + index.shape[axis:axis + 1] + x.shape[axis + 1:]:
        return jnp.take_along_axis(x, index, axis=axis)
    idx = list(jnp.indices(index.shape, sparse=True))
    idx[axis] = index
    return x[tuple(idx)]


def _scatter(x, index, source, *, axis):
    # NOTE: MegEngine's scatter writes source into x along axis at index (last write wins).
    idx = list(jnp.indices(index.shape, sparse=True))
    idx[axis] = index
    return x.at[tuple(idx)].set(source.astype(x.dtype))


def _indexing_one_hot(x, index, *, axis, keepdims):
    out = jnp.take_along_axis(x, jnp.expand_dims(index, axis), axis=axis)
    return out if keepdims else jnp.squeeze(out, axis)


def _mask_count(mask):
    return jnp.count_nonzero(mask).astype(jnp.int32)


def _mask_nonzero(mask, *, count):
    # ``count`` is the mask's number of true values (read on the host): the static size that makes the result
    # shape known; one int32 index array per mask dimension, in NumPy's (row-major) order
    return tuple(i.astype(jnp.int32) for i in jnp.nonzero(mask, size=count))


getitem = Primitive("getitem", _getitem)
setitem = Primitive("setitem", _setitem)
gather = Primitive("gather", _gather)
scatter = Primitive("scatter", _scatter)
indexing_one_hot = Primitive("indexing_one_hot", _indexing_one_hot)
mask_count = Primitive("mask_count", _mask_count)
mask_nonzero = Primitive("mask_nonzero", _mask_nonzero, multiple_results=True)
