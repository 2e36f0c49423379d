"""Helpers for data-parallel training: gradient all-reduce callbacks, parameter broadcast, barriers."""
from __future__ import annotations

import functools
from typing import Callable

from .group import WORLD, Group, group_barrier, is_distributed

__all__ = ["AllreduceCallback", "make_allreduce_cb", "bcast_list_", "synchronized"]


def _trivial(group):
    return group is None or not is_distributed() or group.size == 1


class AllreduceCallback:
    r"""A GradManager callback that all-reduces every gradient over ``group`` ("sum" or "mean").

    Attach it with ``GradManager().attach(params, callbacks=[make_allreduce_cb("mean")])``: after
    ``gm.backward`` every process holds the same gradient, the sum or the mean of the processes'
    gradients. Every process must run ``backward`` with the same attached tensors.

    MegEngine packs gradients into 10 MB buckets before reducing; megxla's GradManager calls callbacks one
    tensor at a time and expects the gradient back, so here each gradient is one collective.

    Args:
        reduce_method: ``"sum"`` or ``"mean"``.
        group: the communication group, ``WORLD`` by default.
        backend: accepted for MegEngine compatibility (the host store carries every collective).

    Returns:
        the callable ``cb(param, grad) -> reduced grad``.

    Example:
        >>> import megxla.distributed as dist
        >>> from megxla.autodiff import GradManager
        >>> gm = GradManager().attach(model.parameters(), callbacks=[dist.make_allreduce_cb("mean")])
    """

    def __init__(self, reduce_method: str, group: Group = WORLD, backend: str = None):
        method = str(reduce_method).lower()
        if method not in ("sum", "mean"):
            raise ValueError(f"make_allreduce_cb: reduce_method must be 'sum' or 'mean', got {reduce_method!r}")
        if group is not None and not isinstance(group, Group):
            raise TypeError(f"make_allreduce_cb: group must be a Group, got {type(group).__name__}")
        self._reduce_method = method
        self._group = group
        self._backend = backend

    def __call__(self, param, grad):
        if _trivial(self._group):
            return grad
        from ..functional.distributed import all_reduce_sum
        g = all_reduce_sum(grad, self._group)
        if self._reduce_method == "mean":
            g = g / self._group.size
        return g.astype(grad.dtype) if g.dtype != grad.dtype else g


make_allreduce_cb = AllreduceCallback


def bcast_list_(inps: list, group: Group = WORLD):
    r"""Broadcast, in place, each tensor of ``inps`` from the root (group rank 0) to every process.

    Typical use: make the freshly initialised parameters of every process equal to rank 0's.

    Args:
        inps: a list of tensors (e.g. ``model.parameters()``), the same structure on every process.
        group: the communication group, ``WORLD`` by default.

    Returns:
        None; each tensor now holds the root's value.

    Example:
        >>> dist.bcast_list_(list(model.parameters()))
    """
    if _trivial(group):
        return
    from ..functional.distributed import broadcast
    for t in inps:
        t._reset(broadcast(t, group))


def synchronized(func: Callable):
    r"""Decorator: after ``func`` returns, wait until every process of ``WORLD`` has finished it too.

    Used to keep processes from racing on shared files (e.g. one rank downloading weights). A no-op when
    not distributed.

    Args:
        func: the function.

    Returns:
        the wrapped function.

    Example:
        >>> @dist.synchronized
        ... def prepare():
        ...     return 1
        >>> prepare()
        1
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        ret = func(*args, **kwargs)
        if is_distributed():
            group_barrier()
        return ret

    return wrapper
