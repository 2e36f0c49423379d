"""Collective communication (``megengine.functional.distributed``).

Each collective is a megxla op (``dist_collective``) whose implementation is an XLA collective over the
devices of the group's processes (JAX's multi-process runtime: gloo between CPU processes, NCCL between GPUs;
see :mod:`megxla.distributed._collective`), so it runs eagerly (one small cached executable per collective),
inside ``jit.trace`` / ``xla_trace`` / ``partial_trace`` (part of the one compiled step) and under
``GradManager`` like any other op. The gradient of each collective is its mirror, as in MegEngine:
``all_reduce_sum`` <-> ``all_reduce_sum``, ``all_gather`` <-> ``reduce_scatter_sum``, ``broadcast`` <->
``reduce_sum``, ``scatter`` -> ``gather``, ``all_to_all`` with the axes swapped; ``all_reduce_max/min`` send
the summed gradient to the ranks holding the extreme value.

Notes:
    * Without ``init_process_group``, or in a group of one process, every collective returns its input.
    * Every process of a group must call the same collectives in the same order with the same shapes, and
      every process must back-propagate through a collective if any does (the gradient is itself a
      collective). A rank that fails makes the others' collectives fail with an error naming it.
    * ``broadcast``, ``scatter`` and ``remote_recv`` learn the sender's shape and dtype through the run's
      key-value store when the front end runs (eagerly, or while a trace records), never inside a compiled step.
    * One compiled step may hold the collectives of one group (its devices are the step's SPMD mesh).
    * ``reduce_sum`` and ``gather`` return None on non-root ranks (as MegEngine), so those ranks drop out of
      autodiff and only the root's input receives a gradient through them. For the same reason
      ``reduce_sum`` and ``gather`` are refused inside a traced step (a non-root's step would hold no
      collective): use ``all_reduce_sum`` / ``all_gather`` there. ``remote_send`` returns None too, but as
      MegEngine's, a sender's tracked input receives its gradient from the receiver's backward.
"""
from __future__ import annotations

import functools
from typing import Optional

import numpy as np

from ..core._tensor import Tensor, keep_qparams
from ..core._dispatch import AssertedOpError, OpError
from ..core._elemwise_front import as_tensor as _t
from ..core._dispatch import apply as _apply
from ..core.ops import shape as _S
from ..core import _dispatch
from ..distributed import _collective
from ..distributed.group import WORLD, Group, get_rank, is_distributed, _require

__all__ = ["all_gather", "all_reduce_max", "all_reduce_min", "all_reduce_sum", "all_to_all", "broadcast",
           "collective_comm", "gather", "reduce_scatter_sum", "reduce_sum", "remote_recv", "remote_send",
           "scatter"]


def _trivial(group, op):
    """True when ``op`` has nobody to talk to: not distributed, no group, or a group of one."""
    if group is None or not is_distributed():
        return True
    if not isinstance(group, Group):
        raise TypeError(f"{op}: group must be a megxla.distributed.Group, got {type(group).__name__}")
    return group.size == 1


def _input(op, inp):
    """``inp`` as a Tensor; None is an error, as MegEngine's ``collective_comm`` reads ``inp.dtype`` (an
    AttributeError there): a parameter's ``.grad`` before any backward, passed on by mistake, became an empty
    tensor and an XLA error with no text."""
    if inp is None:
        raise AttributeError(f"{op}: the input is None; a Tensor is required (a parameter's .grad is None until a "
                             f"backward gives it a gradient)")
    return _t(inp)


_COPY = _S.copy.bind()


def _alone(inp):
    """The collective's result with nobody else to talk to: a new Tensor equal to ``inp``, as MegEngine applies its
    op with one participant (``self.weight = scatter(self.weight)`` is a plain Tensor on one process as on two)."""
    return keep_qparams(_apply(_COPY, inp), inp)


def _axis(op, ndim, axis, name="axis"):
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise OpError(f"{op}: {name} must be an int, got {axis!r}")
    if ndim == 0 or not -ndim <= axis < ndim:
        raise OpError(f"{op}: {name} {axis} is out of range for a {ndim}-D input")
    return int(axis) % ndim


def _divisible(op, shape, axis, size, name="axis"):
    if shape[axis] % size:  # (MegEngine asserts it: "current axis: ... can't devided by group size")
        raise AssertedOpError(f"{op}: input dimension {axis} ({name}) of shape {tuple(shape)} is not divisible by the "
                      f"group size {size}")


def _where(group):
    """The parameters naming ``group`` in a collective op: its ranks and platform (an axis of a DeviceMesh names the
    whole mesh and its axes: the same op on every rank of the mesh)."""
    where = group._op_params() if hasattr(group, "_op_params") else {"ranks": tuple(group.proc_ranks)}
    return dict(platform=_require().platform, **where)


def _coll(mode, inp, group, **kw):
    return _apply(_collective.collective.bind(mode=mode, **_where(group), **kw), inp)


def _not_compiled(op, instead):
    """reduce_sum / gather inside a traced step: refused on every rank alike. A non-root's result is None, so its
    compiled step would hold no collective at all (XLA drops unused work) while the root's waits for it."""
    from ..core._dispatch import current_interpreter
    interp = current_interpreter()
    if interp is not None and type(interp).__name__ != "Excluded":
        raise RuntimeError(f"{op} inside a traced step (xla_trace / trace / partial_trace): the other ranks' result is "
                           f"None, so their compiled step would not take part in the collective; use {instead} "
                           f"(every rank receives the result) or call {op} outside the step")


def _root_input(op, inp, group, axis=None):
    """The op input of broadcast/scatter on this rank, after learning the root's shape, dtype and whether it
    requires a gradient (non-roots may pass None)."""
    if group.rank == 0:
        if inp is None:
            raise ValueError(f"{op}: the root (group rank 0) must pass a tensor")
        inp = _t(inp)
        val = (tuple(inp.shape), inp.dtype.name, inp._recorded())
    else:
        val = None
    n = _collective.next_meta(("meta", group.key))
    shape, dtype, root_grad = _require().client.bcast_val(val, f"meta/{group.key}/{n}", group.size)
    shape, dtype = tuple(shape), np.dtype(dtype)
    if axis is not None:  # every rank sees the root's shape, so every rank raises alike
        axis = _axis(op, len(shape), axis)
        _divisible(op, shape, axis, group.size)
    if group.rank == 0:
        return inp, axis
    # A non-root's value is never read (as MegEngine). If its tensor matches, it is still the op's input, so
    # that a GradManager tracking it records the op and this rank joins the backward collective the root
    # will issue; otherwise a placeholder stands in.
    mine = _t(inp) if inp is not None else None
    if mine is None or mine.shape != shape or mine.dtype != dtype:
        from .tensor import zeros
        mine = zeros(shape, dtype=dtype)
    elif not root_grad and mine._recorded():
        # The root's input needs no gradient, so the root takes no part in a backward collective: this rank's
        # must not issue one either (its backward failed, waiting for the root). MegEngine's non-root input is
        # a fresh dummy, attached only where the root's is: this rank's own tensor gets no gradient from it.
        mine = mine.detach()
    if root_grad and not mine._recorded():
        # MegEngine: the root's gradient needs this rank's part of the backward collective, so this rank's
        # input is attached to the GradManagers recording here (until their backward), as MegEngine's
        # collectives do with their dummy input
        keepers = [r for r in _dispatch.recorders if hasattr(r, "_attach_transient")]
        if not keepers:
            raise ValueError(f"{op}: the root's input requires a gradient, so every rank must take part in the "
                             f"backward pass: call {op} inside a recording GradManager here too")
        for r in keepers:
            r._attach_transient(mine)
    return mine, axis


# ---- all-reduce ------------------------------------------------------------------------------------------------
def all_reduce_sum(inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None) -> Tensor:
    r"""Element-wise sum of ``inp`` over the processes of ``group``; every process receives it.

    Args:
        inp: this process's tensor; same shape and dtype on every process.
        group: the communication group, ``WORLD`` by default.
        device: accepted for MegEngine compatibility (the result stays on the input's device).

    Returns:
        the sum, on every process. Its gradient is the ``all_reduce_sum`` of the output gradients.

    Example:
        >>> # on rank 0 and rank 1
        >>> x = mge.Tensor([1.0, 2.0]) + dist.get_rank()  # doctest: +SKIP
        >>> F.distributed.all_reduce_sum(x)  # doctest: +SKIP
        Tensor([3. 5.], dtype=float32, device=cpu0)  # both ranks
    """
    inp = _input("all_reduce_sum", inp)
    if _trivial(group, "all_reduce_sum"):
        return _alone(inp)
    return _coll("all_reduce_sum", inp, group)


def all_reduce_max(inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None) -> Tensor:
    r"""Element-wise maximum of ``inp`` over the processes of ``group``; every process receives it.

    Args:
        inp: this process's tensor; same shape and dtype on every process.
        group: the communication group, ``WORLD`` by default.
        device: accepted for MegEngine compatibility.

    Returns:
        the maximum, on every process. Its gradient (the sum of all output gradients) goes to the
        processes whose input holds the maximum.

    Example:
        >>> x = mge.Tensor([1.0, 5.0]) * (dist.get_rank() + 1)   # rank 0: [1, 5]; rank 1: [2, 10]  # doctest: +SKIP
        >>> F.distributed.all_reduce_max(x)  # doctest: +SKIP
        Tensor([ 2. 10.], dtype=float32, device=cpu0)  # both ranks
    """
    inp = _input("all_reduce_max", inp)
    if _trivial(group, "all_reduce_max"):
        return _alone(inp)
    return _coll("all_reduce_max", inp, group)


def all_reduce_min(inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None) -> Tensor:
    r"""Element-wise minimum of ``inp`` over the processes of ``group``; every process receives it.

    Args:
        inp: this process's tensor; same shape and dtype on every process.
        group: the communication group, ``WORLD`` by default.
        device: accepted for MegEngine compatibility.

    Returns:
        the minimum, on every process (gradient as :func:`all_reduce_max`).

    Example:
        >>> x = mge.Tensor([1.0, 5.0]) * (dist.get_rank() + 1)   # rank 0: [1, 5]; rank 1: [2, 10]  # doctest: +SKIP
        >>> F.distributed.all_reduce_min(x)  # doctest: +SKIP
        Tensor([1. 5.], dtype=float32, device=cpu0)  # both ranks
    """
    inp = _input("all_reduce_min", inp)
    if _trivial(group, "all_reduce_min"):
        return _alone(inp)
    return _coll("all_reduce_min", inp, group)


# ---- gather / scatter family -----------------------------------------------------------------------------------
def all_gather(inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None, axis=0) -> Tensor:
    r"""Concatenate the tensors of all processes along ``axis``, in group-rank order; everyone receives it.

    Args:
        inp: this process's tensor; same shape and dtype on every process.
        group: the communication group, ``WORLD`` by default.
        device: accepted for MegEngine compatibility.
        axis: the concatenation axis.

    Returns:
        the concatenation (``size`` times longer along ``axis``). Its gradient is
        :func:`reduce_scatter_sum` of the output gradients.

    Example:
        >>> x = mge.Tensor([dist.get_rank() + 1.0])  # doctest: +SKIP
        >>> F.distributed.all_gather(x)  # doctest: +SKIP
        Tensor([1. 2.], dtype=float32, device=cpu0)  # both ranks
    """
    inp = _input("all_gather", inp)
    ax = _axis("all_gather", inp.ndim, axis)
    if _trivial(group, "all_gather"):
        return _alone(inp)
    return _coll("all_gather", inp, group, axis=ax)


def reduce_scatter_sum(inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None,
                       axis=0) -> Tensor:
    r"""Sum over the processes, then split along ``axis``: group rank ``i`` receives the ``i``-th part.

    Args:
        inp: this process's tensor; same shape on every process, ``axis`` divisible by the group size.
        group: the communication group, ``WORLD`` by default.
        device: accepted for MegEngine compatibility.
        axis: the axis to split.

    Returns:
        this process's part of the sum. Its gradient is :func:`all_gather` of the output gradients.

    Example:
        >>> x = mge.Tensor([1.0, 2.0, 3.0, 4.0]) * (dist.get_rank() + 1)  # doctest: +SKIP
        >>> F.distributed.reduce_scatter_sum(x)  # doctest: +SKIP
        Tensor([3. 6.], dtype=float32, device=cpu0)  # rank 0
        Tensor([ 9. 12.], dtype=float32, device=cpu0)  # rank 1
    """
    inp = _input("reduce_scatter_sum", inp)
    ax = _axis("reduce_scatter_sum", inp.ndim, axis)
    if _trivial(group, "reduce_scatter_sum"):
        return _alone(inp)
    _divisible("reduce_scatter_sum", inp.shape, ax, group.size)
    return _coll("reduce_scatter_sum", inp, group, axis=ax)


def broadcast(inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None) -> Tensor:
    r"""Send the root's (group rank 0's) tensor to every process of ``group``.

    Args:
        inp: the tensor on the root. Elsewhere its value is not read and it may be None; but when the root's
            input requires a gradient, every rank must pass a tensor of the root's shape tracked by its
            GradManager (e.g. the same attached parameter), so that every rank runs the backward collective.
        group: the communication group, ``WORLD`` by default.
        device: accepted for MegEngine compatibility.

    Returns:
        the root's tensor, on every process. Its gradient is :func:`reduce_sum` of the output gradients,
        received by the root (the other ranks' inputs get zeros).

    Example:
        >>> x = mge.Tensor([1.0, 2.0]) if dist.get_rank() == 0 else None  # doctest: +SKIP
        >>> F.distributed.broadcast(x)  # doctest: +SKIP
        Tensor([1. 2.], dtype=float32, device=cpu0)  # both ranks
    """
    if _trivial(group, "broadcast"):
        if inp is None:
            raise ValueError("broadcast: the root (group rank 0) must pass a tensor")
        return _alone(_t(inp))
    inp, _ = _root_input("broadcast", inp, group)
    return _coll("broadcast", inp, group)


def reduce_sum(inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None) -> Tensor:
    r"""Element-wise sum over the processes of ``group``, received by the root (group rank 0) only.

    Args:
        inp: this process's tensor; same shape and dtype on every process.
        group: the communication group, ``WORLD`` by default.
        device: accepted for MegEngine compatibility.

    Returns:
        the sum on the root, None on the other processes (which therefore take no part in autodiff through
        it: only the root's input receives a gradient).

    Example:
        >>> x = mge.Tensor([1.0]) + dist.get_rank()  # doctest: +SKIP
        >>> F.distributed.reduce_sum(x)  # doctest: +SKIP
        Tensor([3.], dtype=float32, device=cpu0)  # rank 0
        None  # rank 1
    """
    inp = _input("reduce_sum", inp)
    if _trivial(group, "reduce_sum"):
        return _alone(inp)
    _not_compiled("reduce_sum", "all_reduce_sum")
    out = _coll("reduce_sum", inp.detach(), group)
    # Only the root holds the result; its own input receives the output gradient through a local op, so that
    # no rank runs a backward collective the others do not (see _collective.root_link).
    return _apply(_collective.root_link.bind(axis=None), out, inp) if group.rank == 0 else None


def gather(inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None, axis=0) -> Tensor:
    r"""Concatenate the tensors of all processes along ``axis`` on the root (group rank 0) only.

    Args:
        inp: this process's tensor; same shape and dtype on every process.
        group: the communication group, ``WORLD`` by default.
        device: accepted for MegEngine compatibility.
        axis: the concatenation axis.

    Returns:
        the concatenation on the root, None on the other processes (only the root's input receives a
        gradient through it).

    Example:
        >>> x = mge.Tensor([dist.get_rank() + 1.0])  # doctest: +SKIP
        >>> F.distributed.gather(x)  # doctest: +SKIP
        Tensor([1. 2.], dtype=float32, device=cpu0)  # rank 0
        None  # rank 1
    """
    inp = _input("gather", inp)
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and axis >= inp.ndim:
        # MegEngine asserts ``axis < inp.ndim`` ("your concat_axis exceeds the dim of the tensor")
        raise AssertedOpError(f"gather: axis {axis} is out of range for a {inp.ndim}-D input (your concat_axis "
                              f"exceeds the dim of the tensor, the tensor shape is {tuple(inp.shape)})")
    ax = _axis("gather", inp.ndim, axis)
    if _trivial(group, "gather"):
        return _alone(inp)
    _not_compiled("gather", "all_gather")
    out = _coll("gather", inp.detach(), group, axis=ax)
    return _apply(_collective.root_link.bind(axis=ax), out, inp) if group.rank == 0 else None


def scatter(inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None, axis=0) -> Tensor:
    r"""Split the root's tensor along ``axis`` and send the ``i``-th part to group rank ``i``.

    Args:
        inp: the tensor on the root (``axis`` divisible by the group size). Elsewhere as in :func:`broadcast`:
            not read, may be None unless the root's input requires a gradient.
        group: the communication group, ``WORLD`` by default.
        device: accepted for MegEngine compatibility.
        axis: the axis to split.

    Returns:
        this process's part. Its gradient is :func:`gather` of the output gradients, received by the root
        (the other ranks' inputs get zeros).

    Example:
        >>> x = mge.Tensor([1.0, 2.0]) if dist.get_rank() == 0 else None  # doctest: +SKIP
        >>> F.distributed.scatter(x)  # doctest: +SKIP
        Tensor([1.], dtype=float32, device=cpu0)  # rank 0
        Tensor([2.], dtype=float32, device=cpu0)  # rank 1
    """
    if _trivial(group, "scatter"):
        if inp is None:
            raise ValueError("scatter: the root (group rank 0) must pass a tensor")
        inp = _t(inp)
        _axis("scatter", inp.ndim, axis)
        return _alone(inp)
    inp, ax = _root_input("scatter", inp, group, axis)
    return _coll("scatter", inp, group, axis=ax)


def all_to_all(inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None, split_axis: int = 0,
               concat_axis: int = 0) -> Tensor:
    r"""Each process splits its tensor along ``split_axis`` into ``size`` parts and sends part ``j`` to group
    rank ``j``; the parts received are concatenated along ``concat_axis`` in rank order.

    Args:
        inp: this process's tensor; same shape on every process, ``split_axis`` divisible by the group size.
        group: the communication group, ``WORLD`` by default.
        device: accepted for MegEngine compatibility.
        split_axis: the axis to split.
        concat_axis: the axis to concatenate the received parts along.

    Returns:
        the concatenation. Its gradient is ``all_to_all`` of the output gradients with the two axes swapped.

    Example:
        >>> x = mge.Tensor([1.0, 2.0]) + 2 * dist.get_rank()   # rank 0: [1, 2]; rank 1: [3, 4]  # doctest: +SKIP
        >>> F.distributed.all_to_all(x)  # doctest: +SKIP
        Tensor([1. 3.], dtype=float32, device=cpu0)  # rank 0
        Tensor([2. 4.], dtype=float32, device=cpu0)  # rank 1
    """
    inp = _input("all_to_all", inp)
    sa = _axis("all_to_all", inp.ndim, split_axis, "split_axis")
    ca = _axis("all_to_all", inp.ndim, concat_axis, "concat_axis")
    if _trivial(group, "all_to_all"):
        return _alone(inp)
    _divisible("all_to_all", inp.shape, sa, group.size, "split_axis")
    return _coll("all_to_all", inp, group, split_axis=sa, concat_axis=ca)


_MODE_NAMES = {"ALL_REDUCE_SUM": "all_reduce_sum", "ALL_REDUCE_MAX": "all_reduce_max",
               "ALL_REDUCE_MIN": "all_reduce_min", "ALL_REDUCE_PROD": "all_reduce_prod",
               "ALL_GATHER": "all_gather", "REDUCE_SCATTER_SUM": "reduce_scatter_sum", "BROADCAST": "broadcast",
               "REDUCE_SUM": "reduce_sum", "GATHER": "gather", "SCATTER": "scatter", "ALL_TO_ALL": "all_to_all"}


def collective_comm(inp, mode, group, device):
    r"""Run the collective ``mode`` (MegEngine's ``CollectiveComm.Mode``) on ``inp``.

    Args:
        inp: the input tensor (None allowed on non-roots of ``BROADCAST`` / ``SCATTER``).
        mode: a mode name such as ``"ALL_REDUCE_SUM"`` (any case) or an enum member with that ``name``;
            ``ALL_REDUCE_PROD`` is available here only.
        group: the communication group (None: return the input).
        device: accepted for MegEngine compatibility.

    Returns:
        as the functional collective of that mode, with axis 0 where it takes one.

    Example:
        >>> y = F.distributed.collective_comm(x, "ALL_REDUCE_SUM", dist.WORLD, None)  # doctest: +SKIP
    """
    name = str(getattr(mode, "name", mode)).upper()
    if name not in _MODE_NAMES:
        raise ValueError(f"collective_comm: unknown mode {mode!r}; expected one of {sorted(_MODE_NAMES)}")
    m = _MODE_NAMES[name]
    if m == "all_reduce_prod":
        inp = _input("collective_comm", inp)
        if _trivial(group, "collective_comm"):
            return inp if group is None else _alone(inp)
        return _coll("all_reduce_prod", inp, group)
    return globals()[m](inp, group, device)


def _builtin_collective(op, inp):
    # MegEngine's ``apply(CollectiveComm(mode=..., key=...), x)``: the group is the one whose key (its ranks,
    # comma separated) the descriptor names, the world when it names none
    key = str(op.key or "")
    group = WORLD if not key or not is_distributed() else Group([int(r) for r in key.split(",")])
    return collective_comm(inp, op.mode, group, None)


def _register_builtin():
    from ..core.ops import builtin
    for name in _MODE_NAMES:
        builtin.COLLECTIVES[name] = _builtin_collective


_register_builtin()


# ---- point to point --------------------------------------------------------------------------------------------
def _peer(op, rank, what):
    sd = _require()
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < sd.world_size:
        raise ValueError(f"{op}: {what} must be a rank in [0, {sd.world_size}), got {rank!r}")
    if rank == sd.proc_rank:
        raise ValueError(f"{op}: {what} {rank} is this process itself")
    return int(rank)


def _p2p_meta_key(src, dst, channel="p2p"):
    # one numbered key per message: the n-th send from src to dst on a channel meets the n-th receive
    return f"{channel}meta/{src}->{dst}/{_collective.next_meta((channel, src, dst))}"


def remote_send(inp: Tensor, dest_rank: int):
    r"""Send ``inp`` to the process of global rank ``dest_rank`` (which calls :func:`remote_recv`).

    Both processes run one two-process XLA program (a ``ppermute``); the call returns when it is issued.

    Args:
        inp: the tensor to send.
        dest_rank: the receiver's global rank.

    Returns:
        None, as MegEngine. Where a recording GradManager tracks ``inp`` (pipeline parallelism), its backward
        (``gm.backward([])`` on the first stage) receives ``inp``'s gradient from the receiver's backward.

    Example:
        >>> if dist.get_rank() == 0:  # doctest: +SKIP
        ...     F.distributed.remote_send(mge.Tensor([1.0, 2.0]), 1)
        ... else:
        ...     y = F.distributed.remote_recv(0)   # Tensor([1. 2.])
    """
    dst = _peer("remote_send", dest_rank, "dest_rank")
    inp = _t(inp)
    # As MegEngine's: when a recording GradManager tracks ``inp``, its backward (``gm.backward()`` or
    # ``gm.backward([])`` on a pipeline's first stage) receives ``inp``'s gradient from the receiver, which
    # sends it from its own backward. The receiver learns that a gradient is wanted from the metadata.
    manager = _gradient_recorder(inp)
    _p2p_send(inp, dst, "p2p", wants_grad=manager is not None)
    if manager is not None:
        manager._note_send(inp, functools.partial(_p2p_recv_grad, dst))
    return None


def remote_recv(src_rank: int, device: Optional[str] = None, inp=None) -> Tensor:
    r"""Receive the tensor that the process of global rank ``src_rank`` sends with :func:`remote_send`.

    Shape and dtype come from the sender (through the key-value store; waits up to ``MEGXLA_DIST_TIMEOUT``).

    Args:
        src_rank: the sender's global rank.
        device: accepted for MegEngine compatibility.
        inp: optional dummy input tensor (MegEngine uses it to place the result); not read.

    Returns:
        the received tensor. Where the sender wants its gradient (its GradManager tracks what it sent) and a
        GradManager records here, that manager's backward sends the gradient back.

    Example:
        >>> y = F.distributed.remote_recv(0)   # on rank 1, after rank 0 called remote_send(x, 1)  # doctest: +SKIP
    """
    src = _peer("remote_recv", src_rank, "src_rank")
    out, wants_grad = _p2p_recv(src, "p2p")
    if wants_grad:
        # the innermost recording GradManager tracks the received tensor and, in its backward, sends the
        # tensor's gradient (or "none") back to the sender, whose backward waits for it
        managers = [r for r in _dispatch.recorders if hasattr(r, "_note_recv")]
        if managers:
            managers[-1]._note_recv(out, functools.partial(_p2p_send_grad, dst=src))
        else:
            _p2p_send_grad(None, src)  # nothing records here: the sender's backward gets no gradient
    return out


def _gradient_recorder(t):
    """The innermost recording GradManager that tracks ``t`` (its gradient is wanted), or None."""
    for r in reversed(list(_dispatch.recorders)):
        if hasattr(r, "_note_send") and r._tracks(t):
            return r
    return None


def _p2p_send(inp, dst, channel, wants_grad=False):
    src = get_rank()
    meta = (tuple(inp.shape), inp.dtype.name, wants_grad)
    _require().client.user_set(_p2p_meta_key(src, dst, channel), meta)
    _apply(_collective.p2p.bind(src=src, dst=dst, platform=_require().platform), inp)


def _p2p_recv(src, channel):
    """(the tensor ``src`` sends on ``channel``, whether the sender wants its gradient back); (None, False)
    where the sender sent "no tensor" (a gradient that does not exist)."""
    dst = get_rank()
    meta = _require().client.user_pop(_p2p_meta_key(src, dst, channel))
    if meta is None:
        return None, False
    shape, dtype, wants_grad = meta
    from .tensor import zeros
    placeholder = zeros(tuple(shape), dtype=np.dtype(dtype))
    return _apply(_collective.p2p.bind(src=src, dst=dst, platform=_require().platform), placeholder), wants_grad


def _p2p_send_grad(grad, dst):
    """Send the gradient of a tensor received from ``dst`` back to it (None: there is none)."""
    if grad is None:
        _require().client.user_set(_p2p_meta_key(get_rank(), dst, "p2pgrad"), None)
    else:
        _p2p_send(grad, dst, "p2pgrad")


def _p2p_recv_grad(src):
    """The gradient that ``src`` sends back for a tensor sent to it (None: it has none)."""
    return _p2p_recv(src, "p2pgrad")[0]


# ---- synchronised batch normalisation ----------------------------------------------------------------------------
def _sync_needed(group):
    """True when batch statistics must be reduced over ``group`` (None means WORLD)."""
    return not _trivial(WORLD if group is None else group, "sync_batch_norm")


def _sync_batch_norm_train(inp, running_mean, running_var, weight, bias, momentum, eps, eps_mode, group):
    """Training-mode batch normalisation with the statistics of the whole group's batch: the per-channel sums
    are all-reduced (so the gradient, through the mirrored all-reduce, is that of the global batch)."""
    from .elemwise import maximum
    group = WORLD if group is None else group
    inp = _t(inp)
    c = inp.shape[1]
    axes = (0,) + tuple(range(2, inp.ndim))
    shape = (1, c) + (1,) * (inp.ndim - 2)
    from .tensor import concat
    # The element counts (the ranks' batches may differ) travel in the sums' all-reduce: one collective fewer per
    # layer, each an SPMD program of its own eagerly and a cut of auto-jit's clusters
    local = concat([inp.sum(axis=axes, keepdims=True), Tensor(np.full(shape, inp.size // c, dtype=inp.dtype))], 1)
    both = all_reduce_sum(local, group)
    count = both[:, c:]
    mean = both[:, :c] / count
    d = inp - mean
    var = all_reduce_sum((d * d).sum(axis=axes, keepdims=True), group) / count  # two passes: exact as batch_norm
    if eps_mode == "additive":
        inv = (var + eps) ** -0.5
    else:
        inv = maximum(var, eps) ** -0.5
    out = d * inv
    if weight is not None:
        out = out * _t(weight).reshape(shape)
    if bias is not None:
        out = out + _t(bias).reshape(shape)
    m, v = mean.detach(), var.detach()
    n = count.detach()
    if running_mean is not None:
        running_mean._reset(running_mean * momentum + m.reshape(running_mean.shape) * (1 - momentum))
    if running_var is not None:
        unbiased = v * n / maximum(n - 1, 1)
        running_var._reset(running_var * momentum + unbiased.reshape(running_var.shape) * (1 - momentum))
    return out
