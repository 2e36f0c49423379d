"""``megengine.core.tensor.array_method``: the reductions behind Tensor's methods, as MegEngine code imports them
(OMNet's losses: ``from megengine.core.tensor.array_method import _reduce``; ``_reduce("mean")(loss)``).

MegEngine defines Tensor's ``sum``/``mean``/``max``/``min``/``prod`` here; megxla's Tensor has its own, and this
module hands them out under MegEngine's names.
"""
from __future__ import annotations

from .._tensor import Tensor

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
