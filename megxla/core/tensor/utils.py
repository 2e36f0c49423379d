"""Public tensor helpers of ``megengine.core.tensor.utils``: converting shapes and scalars to tensors.

They sit in ``core`` and so use only core primitives through the one dispatch point.
"""
from __future__ import annotations

import collections.abc

import numpy as np

from .._tensor import Tensor
from .._dispatch import apply
from ..ops import shape as _S, elemwise as _E
from .dtype import is_quantize

__all__ = ["isscalar", "astensor1d", "convert_single_value", "make_shape_tuple"]


def isscalar(x) -> bool:
    """Whether ``x`` is a scalar: a 0-d Tensor, or a NumPy/Python scalar.

    Example:
        >>> isscalar(Tensor(1.0)), isscalar(Tensor([1.0])), isscalar(3)
        (True, False, True)
    """
    if isinstance(x, Tensor):
        return x.ndim == 0
    return bool(np.isscalar(x))


def _const(x, dtype, device):
    return Tensor(x, dtype=dtype, device=device)


def _astype(t, dtype):
    if dtype is None or np.dtype(dtype) == t.dtype:
        return t
    return apply(_E.astype.bind(dtype=np.dtype(dtype).name), t)


def astensor1d(x, *reference, dtype=None, device=None):
    """Convert a shape-like value to a 1-D tensor (MegEngine's rule).

    Accepts a sequence of Python scalars and/or tensors (concatenated), a NumPy array (0-d or 1-d), or a
    Tensor (returned as is, regardless of dtype and device).

    Args:
        x: the value.
        reference: tensors whose device the result follows (accepted for MegEngine compatibility).
        dtype: dtype of the result when it is built here.
        device: device of the result when it is built here.

    Returns:
        a 1-D (or, for a 0-d Tensor/array input, 0-d) Tensor.

    Example:
        >>> astensor1d([2, Tensor(3)], dtype="int32").numpy()
        array([2, 3], dtype=int32)
    """
    ndim = getattr(x, "ndim", None)
    if ndim is not None:
        if ndim not in (0, 1):
            raise ValueError(f"astensor1d: expected a 0-d or 1-d value, got ndim={ndim} (shape {tuple(x.shape)})")
        return x if isinstance(x, Tensor) else _const(x, dtype, device)
    if not isinstance(x, collections.abc.Sequence) or isinstance(x, str):
        raise TypeError(f"astensor1d: expected a sequence, array or Tensor, got {type(x).__name__}")
    if any(isinstance(i, Tensor) for i in x):
        parts = []
        for i in x:
            t = i if isinstance(i, Tensor) else _const(i, dtype, device)
            if t.ndim != 0 and t.ndim != 1:
                raise ValueError(f"astensor1d: element of shape {t.shape} is not a scalar or 1-d")
            parts.append(apply(_S.reshape.bind(shape=(-1,)), t) if t.ndim == 0 else t)
        if len(parts) > 1:
            dt = np.result_type(*[p.dtype for p in parts])
            parts = [_astype(p, dt) for p in parts]
            out = apply(_S.concat.bind(axis=0), *parts)
        else:
            out = parts[0]
        return _astype(out, dtype)
    return _const(x, dtype, device)


def convert_single_value(v, *, dtype=None, device=None):
    """``v`` as a Tensor of ``dtype``: a Tensor is cast (quantized tensors are kept), anything else becomes a
    constant.

    Example:
        >>> convert_single_value(2, dtype="float32").dtype
        dtype('float32')
    """
    if isinstance(v, Tensor):
        return v if is_quantize(v.dtype) else _astype(v, dtype)
    return _const(v, dtype, device)


def make_shape_tuple(shape) -> tuple:
    """A shape (tuple, list, NumPy array or Tensor; elements may be Tensors) as a tuple of Python ints.

    Example:
        >>> make_shape_tuple(Tensor([2, 3]))
        (2, 3)
    """
    if isinstance(shape, Tensor) or isinstance(shape, np.ndarray):
        return tuple(int(i) for i in np.asarray(shape.numpy() if isinstance(shape, Tensor) else shape).reshape(-1))
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    out = []
    for i in shape:
        if isinstance(i, Tensor):
            out.append(int(i.item()))
        else:
            out.append(int(i))
    return tuple(out)
