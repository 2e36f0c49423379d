"""``megengine.core.tensor.array_method``: the reductions behind Tensor's methods, as MegEngine code imports them
(OMNet's losses: ``from megengine.core.tensor.array_method import _reduce``; ``_reduce("mean")(loss)``; invis's
operators: ``partial(_elwise, mode=Elemwise.Mode.ADD)``).

MegEngine defines Tensor's ``sum``/``mean``/``max``/``min``/``prod`` here; megxla's Tensor has its own, and this
module hands them out under MegEngine's names.
"""
from __future__ import annotations

from .._imperative_rt.core2 import apply
from .._tensor import Tensor
from ..ops.builtin import Elemwise

__all__ = []

# (MegEngine's reduce modes, as ``_reduce`` takes them, and the Tensor method computing each)
_METHODS = {"sum": "sum", "mean": "mean", "max": "max", "min": "min", "product": "prod", "prod": "prod"}


def _reduce(mode):
    """The reduction ``mode`` (``"sum"``, ``"mean"``, ``"max"``, ``"min"`` or ``"product"``) as a function of a
    tensor, ``axis`` and ``keepdims`` -- what Tensor's method of that name computes.

    Example:
        >>> _reduce("mean")(Tensor([1.0, 2.0, 6.0])).item()
        3.0
        >>> _reduce("product")(Tensor([[1.0, 2.0], [3.0, 4.0]]), axis=1).numpy()
        array([ 2., 12.], dtype=float32)
    """
    name = _METHODS.get(mode)
    if name is None:
        raise ValueError(f"_reduce: mode must be one of {sorted(_METHODS)}, got {mode!r}")

    def f(self, axis=None, keepdims: bool = False):
        if axis is None and keepdims:  # (MegEngine's assertion)
            raise AssertionError("can not set axis=None and keepdims=True")
        return getattr(self, name)(axis=axis, keepdims=keepdims)

    f.__name__ = name
    return f


def _elwise(*args, mode):
    """The builtin ``Elemwise(mode)`` applied to ``args`` (MegEngine's helper behind Tensor's operators): one
    Tensor, computed as ``apply(Elemwise(mode), *args)`` computes it.

    Example:
        >>> _elwise(Tensor([1.0, 2.0]), Tensor([3.0, 1.0]), mode=Elemwise.Mode.ADD).numpy()
        array([4., 3.], dtype=float32)
        >>> _elwise(Tensor([1.0, 2.0]), Tensor([3.0, 1.0]), mode=Elemwise.Mode.LT).numpy()  # (MegEngine's kernel)
        array([1., 0.], dtype=float32)
    """
    (result,) = apply(Elemwise(mode=mode), *args)
    return result


def _elwise_apply(args, mode):
    """:func:`_elwise` with the inputs as one sequence (MegEngine's name for the same helper)."""
    return _elwise(*args, mode=mode)
