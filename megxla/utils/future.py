"""``megengine.utils.future`` (thin: MegEngine's module path): a one-shot value handed between threads.

The class lives in core (:mod:`megxla.core._future`): a GradManager callback may return one (the gradient all-reduce
of ``make_allreduce_cb`` packs gradients and sets them after the backward pass), and autodiff resolves it.

Example:
    >>> from megxla.core._future import Future as CoreFuture
    >>> Future is CoreFuture
    True
"""
from ..core._future import Future

__all__ = ["Future"]
