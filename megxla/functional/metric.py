"""``megengine.functional.metric`` (thin: MegEngine's module path for :func:`~megxla.functional.topk_accuracy`).

Example:
    >>> import megxla as mge
    >>> float(topk_accuracy(mge.Tensor([[0.1, 0.9], [0.8, 0.2]]), mge.Tensor([1, 1])))
    0.5
"""
from .math import topk_accuracy  # noqa: F401

__all__ = ["topk_accuracy"]
