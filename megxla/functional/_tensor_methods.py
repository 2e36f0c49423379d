"""The Tensor methods that are functional's front ends, installed on ``core.Tensor`` when functional loads.

``core`` imports nothing above itself (layers only look down); these methods validate and build op
parameters exactly as ``F.<name>`` does, so they belong here, and ``Tensor`` gets them at import time.
"""
from __future__ import annotations

from ..core._elemwise_front import as_tensor
from ..core._tensor import Tensor
from . import math as _math, tensor as _tensor

__all__ = ["install"]


def astype(self, dtype):
    """A copy of this tensor converted to ``dtype`` (``F.astype``).

    Example:
        >>> import megxla as mge
        >>> mge.Tensor([1.5]).astype("int32").numpy()
        array([1], dtype=int32)
    """
    return _tensor.astype(self, dtype)


def reshape(self, *args):
    """This tensor with a new shape (``F.reshape``); the shape may be given as one tuple or as ints (``*args``,
    MegEngine's parameter name).

    Example:
        >>> import megxla as mge
        >>> mge.Tensor([1, 2, 3, 4]).reshape(2, 2).shape
        (2, 2)
    """
    return _tensor.reshape(self, args[0] if len(args) == 1 else args)


def transpose(self, *args):
    """This tensor with permuted axes (``F.transpose``): the pattern as ints or one sequence (``*args``, MegEngine's
    parameter name); no pattern reverses the axes.

    Example:
        >>> import megxla as mge
        >>> mge.Tensor([[1, 2, 3]]).transpose().shape
        (3, 1)
    """
    pattern = args
    if not pattern:
        pattern = tuple(reversed(range(self.ndim)))
    elif len(pattern) == 1 and not isinstance(pattern[0], int):
        pattern = pattern[0]
    return _tensor.transpose(self, pattern)


def _T(self):
    """The tensor with its axes reversed."""
    return self.transpose()  # (a method call, as MegEngine: a TracedModule records `x.transpose()`)


def flatten(self, start_axis=0, end_axis=-1):
    """This tensor with the axes ``start_axis..end_axis`` merged (``F.flatten``; by default 1-D).

    Example:
        >>> import megxla as mge
        >>> mge.Tensor([[1, 2], [3, 4]]).flatten().shape
        (4,)
        >>> mge.Tensor([[[1, 2]], [[3, 4]]]).flatten(1).shape
        (2, 2)
    """
    return _tensor.flatten(self, start_axis, end_axis)


def _broadcast(self, *args):
    """This tensor broadcast to ``shape`` (``F.broadcast_to``): MegEngine's internal spelling, which model code
    uses; the shape may be one tuple, a shape Tensor, or ints.

    Example:
        >>> import megxla as mge
        >>> mge.Tensor([1.0])._broadcast(mge.Tensor([2, 3], dtype="int32")).shape
        (2, 3)
    """
    return _tensor.broadcast_to(self, args[0] if len(args) == 1 else args)


def _reduction(f, name):
    def method(self, axis=None, keepdims=False):
        return f(self, axis, keepdims)

    method.__name__ = name
    method.__doc__ = f"``F.{name}(self, axis, keepdims)``."
    return method


def _matmul(x, y):
    return _math.matmul(as_tensor(x), as_tensor(y))


def install():
    """Install the methods on :class:`~megxla.core.Tensor` (called once, when ``megxla.functional`` loads).

    Example:
        >>> import megxla as mge
        >>> (mge.Tensor([[1.0, 2.0]]) @ mge.Tensor([[1.0], [1.0]])).numpy()
        array([[3.]], dtype=float32)
    """
    Tensor.astype = astype
    Tensor.reshape = reshape
    Tensor.transpose = transpose
    Tensor.T = property(_T)
    Tensor.flatten = flatten
    Tensor._broadcast = _broadcast
    for name in ("sum", "mean", "prod", "max", "min", "var"):
        setattr(Tensor, name, _reduction(getattr(_math, name), name))
    Tensor.__matmul__ = lambda self, other: _matmul(self, other)
    Tensor.__rmatmul__ = lambda self, other: _matmul(other, self)
    Tensor.__imatmul__ = lambda self, other: self._reset(_matmul(self, other))
