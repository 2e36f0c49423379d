"""Front end of ``Tensor.__getitem__`` / ``__setitem__``: splits an index into its static structure (an op
parameter) and its integer index tensors (op inputs). Boolean masks become integer indices first."""
from __future__ import annotations

import numpy as np

from ._tensor import Tensor
from ._dispatch import apply, OpError
from .ops import indexing as P


def _check_int(k, dim, axis):
    if not -dim <= k < dim:
        raise OpError(f"getitem: index {k} is out of range for axis {axis} of size {dim}")


def parse(x, index):
    """Return (spec, index tensors) for indexing ``x`` with ``index``."""
    if not isinstance(index, tuple):
        index = (index,)
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis
                 and not (isinstance(i, (Tensor, np.ndarray)) and np.dtype(i.dtype) == np.bool_))
    n_real += sum(np.ndim(i) for i in index if isinstance(i, (Tensor, np.ndarray)) and np.dtype(i.dtype) == np.bool_)
    if n_real > x.ndim:
        raise OpError(f"getitem: too many indices ({n_real}) for a tensor of shape {x.shape}")
    spec, tensors, axis = [], [], 0
    for item in index:
        if item is None:
            spec.append(("n",))
        elif item is Ellipsis:
            spec.append(("e",))
            axis = x.ndim - (n_real - axis)
        elif isinstance(item, slice):
            spec.append(("s", _int(item.start), _int(item.stop), _int(item.step)))
            axis += 1
        elif isinstance(item, (bool, np.bool_)):
            raise OpError("getitem: a Python bool is not a valid index")
        elif isinstance(item, (int, np.integer)):
            _check_int(int(item), x.shape[axis], axis)
            spec.append(("i", int(item)))
            axis += 1
        else:
            arr = item if isinstance(item, Tensor) else Tensor(np.asarray(item))
            if arr.dtype == np.bool_:
                # NOTE: a mask's result shape depends on its values; it is converted to integer indices on
                # the host (as MegEngine does), so a traced step bakes the mask's count in.
                mask = arr.numpy()
                if mask.shape != x.shape[axis:axis + mask.ndim]:
                    raise OpError(f"getitem: boolean mask of shape {mask.shape} does not match tensor "
                                  f"dimensions {x.shape[axis:axis + mask.ndim]}")
                for idx in np.nonzero(mask):
                    spec.append(("t",))
                    tensors.append(Tensor(idx.astype(np.int32)))
                axis += mask.ndim
            elif arr.dtype.kind not in "iu":
                raise OpError(f"getitem: index tensors must be integer or bool, got {arr.dtype}")
            else:
                spec.append(("t",))
                tensors.append(arr)
                axis += 1
    return tuple(spec), tensors


def _int(v):
    return None if v is None else int(v)


def getitem(x, index):
    spec, tensors = parse(x, index)
    return apply(P.getitem.bind(spec=spec), x, *tensors)


def setitem(x, index, value):
    from ._elemwise_front import as_tensor
    spec, tensors = parse(x, index)
    return apply(P.setitem.bind(spec=spec), x, as_tensor(value, x), *tensors)
