"""Helpers for data-parallel training: gradient all-reduce callbacks, parameter broadcast, barriers."""
from __future__ import annotations

import collections
import functools
import warnings
import weakref
from typing import Callable

import numpy as np

from ..autodiff.grad_manager import get_backwarding_grad_manager
from ..core._future import Future
from ..core._tensor import Tensor
from ..core.ops.builtin import ParamPackConcat, ParamPackSplit
from .group import WORLD, Group, group_barrier, is_distributed

__all__ = ["AllreduceCallback", "make_allreduce_cb", "bcast_list_", "synchronized", "get_offsets", "param_pack_split",
           "param_pack_concat", "pack_allreduce_split", "get_device_count_by_fork"]


def _trivial(group):
    return group is None or not is_distributed() or group.size == 1


class AllreduceCallback:
    r"""A GradManager callback that all-reduces every gradient over ``group`` ("sum" or "mean").

    Attach it with ``GradManager().attach(params, callbacks=[make_allreduce_cb("mean")])``: after
    ``gm.backward`` every process holds the same gradient, the sum or the mean of the processes'
    gradients. Every process must run ``backward`` with the same attached tensors.

    As MegEngine's, it packs the gradients of each dtype into buckets of about 10 MB (``_param_pack_thd`` bytes,
    in the order the callbacks come) and all-reduces each bucket as ONE collective (:func:`pack_allreduce_split`):
    it returns a :class:`~megxla.utils.future.Future` per gradient, which the GradManager takes after the backward
    pass, once the last, partly filled buckets are reduced. One collective per bucket instead of one per
    gradient: eagerly each is an SPMD program of its own, under auto-jit each one cuts the step's clusters, and
    an ``xla_trace`` step's one all-reduce holds one flat buffer (not XLA's tuple of the gradients). Called outside a
    GradManager's backward (or recorded into a ``partial_trace``'s compiled backward), it reduces the gradient at
    once.

    Args:
        reduce_method: ``"sum"`` or ``"mean"``.
        group: the communication group, ``WORLD`` by default.
        backend: accepted for MegEngine compatibility (XLA picks the transport: gloo on CPU, NCCL on GPU).

    Returns:
        the callable ``cb(param, grad) -> reduced grad`` (or a Future of it).

    Example:
        >>> import megxla as mge
        >>> cb = AllreduceCallback("mean")
        >>> g = mge.Tensor([1.0, 2.0]); cb(g, g) is g  # (a single process: nothing to reduce)
        True
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
        self._param_pack_thd = 10 * 1024 * 1024
        self._marked_gm = weakref.WeakSet()  # the GradManagers it registered its flush with
        self._backward = None  # (weak reference to the GradManager, its backward count) of the pending gradients
        self._reset()

    def __getstate__(self):  # (a worker sent to the ranks by value may hold one: the pending state stays here)
        state = dict(self.__dict__)
        for key in ("_marked_gm", "_backward", "_futures", "_packing_list", "_packing_size"):
            state.pop(key)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._marked_gm, self._backward = weakref.WeakSet(), None
        self._reset()

    def _reset(self):
        self._futures = []  # (Future, gradient) in the order the callbacks came
        self._packing_list = collections.defaultdict(list)  # dtype -> indices into _futures of the open bucket
        self._packing_size = collections.defaultdict(int)  # dtype -> its bytes

    def __call__(self, param, grad):
        from ._sharding import param_splits
        if any(s.kind == "fsdp" for s in param_splits(param)):
            # its gradient is this rank's block of the average already: summing the ranks' different blocks
            # would give wrong values of the right shape
            raise ValueError("make_allreduce_cb: a parameter of fully_shard is attached with an all-reduce "
                             "callback; its gradient is reduce-scattered (averaged) already: attach it without one")
        if _trivial(self._group):
            return grad
        gm = get_backwarding_grad_manager()
        if gm is None:  # (called outside a backward, or by partial_trace recording callbacks to compile them)
            return self._reduced([grad])[0]
        if gm not in self._marked_gm:
            gm._register_after_backward_callback(self._flush)
            self._marked_gm.add(gm)
        now = (weakref.ref(gm), gm._backwards)
        if self._backward != now:  # (what an earlier backward left pending had failed before its flush)
            self._reset()
            self._backward = now
        future = Future(ack=False)
        dtype = np.dtype(grad.dtype)
        self._packing_list[dtype.str].append(len(self._futures))
        self._futures.append((future, grad))
        self._packing_size[dtype.str] += int(np.prod(grad.shape, dtype=np.int64)) * dtype.itemsize
        if self._packing_size[dtype.str] > self._param_pack_thd:
            self._pack(dtype.str)
        return future

    def _reduced(self, grads):
        """``grads`` (one dtype) all-reduced as one collective, each in its own dtype."""
        if len(grads) == 1:
            from ..functional.distributed import all_reduce_sum
            out = [all_reduce_sum(grads[0], self._group)]
            if self._reduce_method == "mean":
                out = [out[0] / self._group.size]
        else:
            out = pack_allreduce_split(grads, [g.shape for g in grads], self._group, self._reduce_method)
            # (a scalar's piece comes back as (1,): its gradient keeps the parameter's shape, as MegEngine's
            # GradManager makes it)
            out = [o.reshape(g.shape) if o.shape != g.shape else o for o, g in zip(out, grads)]
        return [o.astype(g.dtype) if o.dtype != g.dtype else o for o, g in zip(out, grads)]

    def _pack(self, dtype):
        bucket = self._packing_list.pop(dtype, [])
        self._packing_size.pop(dtype, None)
        if bucket:
            for i, g in zip(bucket, self._reduced([self._futures[i][1] for i in bucket])):
                self._futures[i] = (self._futures[i][0], g)

    def _flush(self):
        """After the backward pass: reduce the open buckets, then hand every gradient to its Future."""
        gm = get_backwarding_grad_manager()
        if self._backward is None or gm is None or self._backward != (weakref.ref(gm), gm._backwards):
            return  # (nothing pending from this manager's backward: another manager's, or none)
        try:
            for dtype in sorted(self._packing_list):
                self._pack(dtype)
            for future, g in self._futures:
                future.set(g)
        finally:
            self._backward = None
            self._reset()


make_allreduce_cb = AllreduceCallback


def get_device_count_by_fork(device_type: str):
    r"""Number of devices of ``device_type`` (deprecated since MegEngine 1.5: use
    :func:`megxla.device.get_device_count`, which this calls after a ``DeprecationWarning``, as MegEngine's).

    Args:
        device_type: ``"xpu"``, ``"gpu"`` / ``"cuda"`` or ``"cpu"``.

    Returns:
        the count.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     get_device_count_by_fork("cpu") > 0
        True
    """
    from .._device import get_device_count
    warnings.warn("Call to deprecated function get_device_count. (use megengine.device.get_device_count instead) "
                  "-- Deprecated since version 1.5.", category=DeprecationWarning, stacklevel=2)
    return get_device_count(device_type)


def bcast_list_(inps: list, group: Group = WORLD):
    r"""Broadcast, in place, each tensor of ``inps`` from the root (group rank 0) to every process.

    Typical use: make the freshly initialised parameters of every process equal to rank 0's.

    Args:
        inps: a list of tensors (e.g. ``model.parameters()``), the same structure on every process.
        group: the communication group, ``WORLD`` by default.

    Returns:
        None; each tensor now holds the root's value.

    Example:
        >>> dist.bcast_list_(list(model.parameters()))  # doctest: +SKIP
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
        >>> @dist.synchronized  # doctest: +SKIP
        ... def prepare():
        ...     return 1
        >>> prepare()  # doctest: +SKIP
        1
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        ret = func(*args, **kwargs)
        if is_distributed():
            group_barrier()
        return ret

    return wrapper


# ---- gradient packing (MegEngine's ParamPackSplit / ParamPackConcat) ----------------------------------------------
def get_offsets(shapes):
    r"""``[start0, end0, start1, end1, ...]`` of tensors of ``shapes`` laid end to end in one flat buffer.

    Example:
        >>> get_offsets([(2, 3), (), (4,)])
        [0, 6, 6, 7, 7, 11]
    """
    offsets, offset = [], 0
    for shape in shapes:
        offsets.append(offset)
        offset += int(np.prod(shape, dtype=np.int64))  # a scalar () takes one element
        offsets.append(offset)
    return offsets


def _check_offsets(op, offsets, n):
    if len(offsets) != 2 * n:
        raise ValueError(f"{op}: {len(offsets)} offsets for {n} tensors (expected start/end pairs, see get_offsets)")


def param_pack_split(inp, offsets: list, shapes: list):
    r"""Split the flat tensor ``inp`` into tensors of ``shapes`` at ``offsets`` (the inverse of
    :func:`param_pack_concat`); differentiable.

    Args:
        inp: 1-D tensor holding the packed values.
        offsets: ``get_offsets(shapes)``.
        shapes: the shapes of the pieces (``()`` for a scalar, whose piece has the shape ``(1,)``, as MegEngine's).

    Returns:
        list of tensors.

    Example:
        >>> import megxla as mge
        >>> a, b = param_pack_split(mge.Tensor([1., 2., 3.]), [0, 2, 2, 3], [(2,), ()])
        >>> a.shape, b.shape
        ((2,), (1,))
    """
    _check_offsets("param_pack_split", offsets, len(shapes))
    if inp.ndim != 1 or inp.shape[0] < offsets[-1]:
        raise ValueError(f"param_pack_split: expected a 1-D tensor of at least {offsets[-1]} elements, got shape "
                         f"{inp.shape}")
    # (MegEngine's helper gives a scalar's piece the shape (1,): its operator refuses empty shapes)
    shapes = [tuple(s) or (1,) for s in shapes]
    return list(ParamPackSplit(offsets=offsets, shapes=shapes)._apply((inp,)))


def param_pack_concat(inps: list, offsets, offsets_val: list):
    r"""Pack ``inps`` into one flat tensor, each at its ``offsets_val`` range (gaps are zero); differentiable.

    Args:
        inps: the tensors.
        offsets: the offsets as a Tensor (MegEngine passes both forms; ``offsets_val`` is what is used).
        offsets_val: ``get_offsets([t.shape for t in inps])`` or a layout with gaps.

    Returns:
        1-D tensor of ``offsets_val[-1]`` elements.

    Example:
        >>> import megxla as mge
        >>> xs = [mge.Tensor([[1., 2.]]), mge.Tensor(3.)]
        >>> param_pack_concat(xs, None, get_offsets([x.shape for x in xs])).numpy()
        array([1., 2., 3.], dtype=float32)
    """
    _check_offsets("param_pack_concat", offsets_val, len(inps))
    # (the builtin op's inputs end with the offsets tensor, which it does not read: its ``offsets`` are used)
    (out,) = ParamPackConcat(offsets=offsets_val)._apply((*inps, Tensor(list(offsets_val), dtype="int32")))
    return out


def pack_allreduce_split(pack_list, shapes, group, reduce_method):
    r"""All-reduce several tensors as ONE collective: pack, all-reduce (``"sum"`` or ``"mean"``), split back.

    Args:
        pack_list: the tensors (e.g. gradients of one bucket), same dtype.
        shapes: their shapes.
        group: the communication group.
        reduce_method: ``"sum"`` or ``"mean"``.

    Returns:
        list of reduced tensors of ``shapes`` (the inputs unchanged when not distributed).
    """
    if reduce_method not in ("sum", "mean"):
        raise ValueError(f"pack_allreduce_split: reduce_method must be 'sum' or 'mean', got {reduce_method!r}")
    offsets_val = get_offsets(shapes)
    packed = param_pack_concat(pack_list, None, offsets_val)
    if not _trivial(group):
        from ..functional.distributed import all_reduce_sum
        packed = all_reduce_sum(packed, group)
        if reduce_method == "mean":
            packed = packed / group.size
    return param_pack_split(packed, offsets_val, shapes)
