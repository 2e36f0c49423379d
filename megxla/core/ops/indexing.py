"""Indexing primitives. The index *structure* is a static parameter; integer index tensors are inputs.

``spec`` is a tuple of items: ``("i", k)`` an int, ``("s", start, stop, step)`` a slice, ``("n",)`` None
(new axis), ``("e",)`` ellipsis, ``("t",)`` the next integer index tensor among the inputs.
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
        else:
            out.append(next(it))
    return tuple(out)


def _getitem(x, *index_tensors, spec):
    return x[build_index(spec, index_tensors)]


def _setitem(x, value, *index_tensors, spec):
    return x.at[build_index(spec, index_tensors)].set(value.astype(x.dtype))


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


getitem = Primitive("getitem", _getitem)
setitem = Primitive("setitem", _setitem)
gather = Primitive("gather", _gather)
scatter = Primitive("scatter", _scatter)
indexing_one_hot = Primitive("indexing_one_hot", _indexing_one_hot)
