"""``megengine.core._imperative_rt.core2``: :func:`apply` of a builtin op descriptor, and ``Tensor``.

Example:
    >>> import megxla as mge
    >>> from megxla.core.ops import builtin
    >>> (y,) = apply(builtin.Elemwise(mode="mul"), mge.Tensor([2.0]), mge.Tensor([3.0]))
    >>> float(y.item())
    6.0
"""
from __future__ import annotations

from .._tensor import Tensor
from .._dispatch import OpError
from ..ops.builtin import OpDef

__all__ = ["apply", "Tensor"]


def apply(op: OpDef, *args):
    """Run the builtin op descriptor ``op`` on tensors; always returns a tuple of Tensors (as MegEngine).

    Args:
        op: an :class:`~megxla.core.ops.builtin.OpDef` (``Elemwise(mode="add")``, ``Reduce(...)``...).
        args: the input tensors (NumPy arrays and Python scalars are converted).

    Returns:
        tuple of output Tensors.
    """
    if not isinstance(op, OpDef):
        raise TypeError(f"apply: expected a builtin op descriptor (megxla.core.ops.builtin), got {op!r}")
    inputs = tuple(a if isinstance(a, Tensor) else Tensor(a) for a in args)
    return tuple(op._apply(inputs))


__all__ += ["OpError"]
