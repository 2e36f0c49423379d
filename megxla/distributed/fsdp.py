"""Sharded data parallel (ZeRO-3 / FSDP): ``fully_shard`` and a ``clip_grad_norm`` that sees all shards.

Every module that holds parameters is a unit. Each of its parameters is replaced by this rank's block of its
first axis (padded with zeros up to a multiple of the group size): ``model.parameters()``, the GradManager, the
optimizer and its slots then see blocks only. Calling a unit gathers its blocks into full tensors (one
``all_gather`` for all of them, an XLA collective: a Linear's weight and bias travel together), runs the unit, and
puts the blocks back; the gather's gradient is one MEAN ``reduce_scatter`` over the group, so after
``gm.backward`` each rank's ``param.grad`` is its block of the data-parallel averaged gradient and the optimizer
steps on blocks. Eagerly each gather / scatter is a small
SPMD executable; under ``xla_trace`` they are collectives of the one compiled step (``all-gather`` and
``reduce-scatter`` in its HLO), which XLA schedules with the compute.

Memory per rank: parameters, gradients and optimizer slots are 1/N of the model's. The gather is a
rematerialized op (``Primitive.remat``): a GradManager's tape does not keep the full tensors, its backward
pass gathers a unit's parameters again where it needs them, so eagerly only one unit's full parameters are
alive at a time (``reshard_after_forward=False``, as PyTorch FSDP2's: the tape keeps them instead, and the backward
pass gathers nothing). In a compiled step both gathers are in the program and XLA decides: XLA:CPU merges the second
gather into the first (keeping the full parameters from forward to backward: less communication, more memory).
"""
from __future__ import annotations

import numbers
import weakref
from typing import Iterable, Union

from ..core._tensor import Tensor
from ..module.module import Module
from . import _sharding
from ._sharding import ShardedModule, Split, shard_gather_many, splits_of
from .group import Group

__all__ = ["fully_shard", "FSDPModule", "clip_grad_norm"]


class FSDPModule:
    """Mixin of a unit of :func:`fully_shard`: its call runs on its parameters gathered into full tensors."""

    _prefix = "FSDP"

    def __call__(self, *inputs, **kwargs):
        d = self.__dict__
        splits = {name: s[-1] for name, s in splits_of(self).items() if s[-1].kind == "fsdp"}
        held = {name: d[name] for name in splits}
        kept = self in _KEPT
        try:
            d.update(_gathered_unit(held, splits, kept))
            return super().__call__(*inputs, **kwargs)
        finally:
            # the blocks are the module's parameters again (the full tensors stay only where autodiff needs them)
            d.update(held)


def _gathered_unit(held, splits, kept):
    """The unit's full parameters ``{name: tensor}`` from its blocks ``held``: one gather for the blocks of each
    dtype and group (a Linear's weight and bias in one collective each way, not two)."""
    packs = {}
    for name, block in held.items():
        packs.setdefault((block.dtype, id(splits[name].group)), []).append(name)
    full = {}
    for names in packs.values():
        group = splits[names[0]].group
        gathered = shard_gather_many([held[k] for k in names], group, [splits[k].full for k in names], kept=kept)
        for k, x in zip(names, gathered):
            full[k] = x.reshape(()) if splits[k].scalar else x
    return full


# units of ``fully_shard(..., reshard_after_forward=False)``: their gathered parameters are kept for the backward
_KEPT = weakref.WeakSet()


def fully_shard(module: Module, group: Group = None, reshard_after_forward: bool = True) -> Module:
    r"""Shard every parameter of ``module`` (ZeRO-3 / FSDP) along its first axis over the ranks of ``group``.

    Each sub-module holding parameters becomes a unit whose call gathers its parameters (``all_gather``) just
    before running and lets them go after; each parameter becomes this rank's block (padded where the first
    axis does not divide), so gradients (the mean over the ranks, reduce-scattered), optimizer slots and the
    parameters themselves take 1/N of the memory. Build the optimizer and the GradManager on
    ``module.parameters()`` *after* this call and attach no all-reduce callback: the averaging is part of the
    gather's gradient. Parameters must be equal on every rank before (the same seed, or ``bcast_list_``); each
    rank keeps its block. Buffers (BatchNorm statistics) stay whole on every rank and are updated from the
    local batch, as in data-parallel training (use ``SyncBatchNorm`` for global statistics).
    ``state_dict()`` gathers full tensors (an ordinary checkpoint), ``load_state_dict`` takes one,
    ``sharded_state_dict()`` / ``load_sharded_state_dict`` save and load this rank's blocks. Composes with
    :func:`~megxla.distributed.parallelize` (call that first) on the axes of a
    :class:`~megxla.distributed.DeviceMesh`. Works eagerly and inside ``xla_trace`` (the collectives are part of
    the compiled step). Every rank must call the units in the same order.

    Args:
        module: the model (modified in place).
        group: the ranks sharing the parameters, ``WORLD`` by default (a :class:`Group` or a ``DeviceMesh``
            axis group).
        reshard_after_forward: as PyTorch FSDP2's: True (default) lets a unit's gathered parameters go after
            its forward, and the backward pass gathers them again (one unit's full parameters alive at a time);
            False keeps them from the forward to the backward pass (no second all-gather: a third fewer
            collectives a step eagerly and under auto-jit, for the memory of the full parameters). A compiled
            step (``xla_trace``) computes the same either way: XLA decides there.

    Returns:
        ``module`` itself, now sharded.

    Example:
        >>> import megxla.distributed as dist, megxla.module as M, megxla.optimizer as optim
        >>> from megxla.autodiff import GradManager
        >>> model = dist.fully_shard(M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 2)))
        >>> [tuple(p.shape) for p in model.parameters()]   # one process: its block is everything
        [(8,), (8, 4), (2,), (2, 8)]
        >>> opt = optim.Adam(model.parameters(), lr=1e-3)
        >>> gm = GradManager().attach(model.parameters())
    """
    if not isinstance(module, Module):
        raise TypeError(f"fully_shard: expected a Module, got {type(module).__name__}")
    if not isinstance(reshard_after_forward, bool):  # (FSDP2's int -- resharding to a smaller group -- is not offered)
        raise TypeError(f"fully_shard: reshard_after_forward must be True or False, got {reshard_after_forward!r}")
    group = _sharding._group(group, "fully_shard")
    units = []
    for _, m in module.named_modules():
        own = _sharding.own_parameters(m, "fully_shard")
        done = splits_of(m)
        for name, _p in own:
            if done.get(name) and done[name][-1].kind == "fsdp":
                raise ValueError(f"fully_shard: {type(m).__name__}.{name} is already fully sharded")
        if own:
            units.append((m, own))
    for m, own in units:
        for name, p in own:
            scalar = p.ndim == 0
            full = 1 if scalar else p.shape[0]
            _sharding.split_parameter(m, name, Split("fsdp", group, 0, full, scalar))
        _sharding.swap_class(m, FSDPModule)
        if not reshard_after_forward:
            _KEPT.add(m)
    _sharding.swap_class(module, ShardedModule)
    return module


def clip_grad_norm(tensors: Union[Tensor, Iterable[Tensor]], max_norm: float, ord: float = 2.0) -> Tensor:
    r"""Clip gradients in place so that the norm of the WHOLE model's gradient is at most ``max_norm``, where
    parameters may be sharded (:func:`fully_shard`, :func:`parallelize`): the norm of each sharded gradient is
    reduced over the groups it is split over (its padding is zero and does not count), replicated gradients
    count once. ``megxla.optimizer.clip_grad_norm`` on blocks would clip each rank by its own blocks' norm.
    A collective: every rank calls it with its blocks, in the same order.

    Args:
        tensors: a tensor or an iterable of tensors whose ``.grad`` is clipped (e.g. ``model.parameters()``).
        max_norm: maximum total norm.
        ord: order of the norm (``inf`` for the max-norm). Default: 2.0

    Returns:
        the total norm before clipping, a 0-d Tensor (the same on every rank).

    Example:
        >>> import megxla as mge, megxla.distributed as dist
        >>> w = mge.Parameter([0.0, 0.0]); w.grad = mge.Tensor([3.0, 4.0])
        >>> float(dist.clip_grad_norm([w], max_norm=1.0))   # one process: as optimizer.clip_grad_norm
        5.0
    """
    from .. import functional as F
    from ..functional.distributed import all_reduce_max, all_reduce_sum
    from ..optimizer.optimizer import assign
    if not isinstance(max_norm, numbers.Real) or not max_norm >= 0:
        raise ValueError(f"clip_grad_norm: max_norm must be a number >= 0, got {max_norm!r}")
    if not isinstance(ord, numbers.Real) or not ord > 0:
        raise ValueError(f"clip_grad_norm: ord must be a positive number or inf, got {ord!r}")
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    tensors = [t for t in tensors if t.grad is not None]
    if not tensors:
        return Tensor(0.0)
    inf = ord == float("inf")
    # one partial sum (or max) per combination of groups, reduced over each of them
    parts = {}
    for t in tensors:
        groups = tuple(s.group for s in _sharding.param_splits(t) if not _sharding._trivial(s.group))
        g = F.abs(t.grad.astype("float32"))
        v = g.max() if inf else (g ** ord).sum()
        key = tuple(id(x) for x in groups)
        prev = parts.get(key)
        parts[key] = (groups, v if prev is None else (F.maximum(prev[1], v) if inf else prev[1] + v))
    total = None
    for groups, v in parts.values():  # in order of first use: the same on every rank (same model)
        for grp in groups:
            v = all_reduce_max(v, grp) if inf else all_reduce_sum(v, grp)
        total = v if total is None else (F.maximum(total, v) if inf else total + v)
    if not inf:
        total = total ** (1.0 / ord)
    scale = F.minimum(max_norm / (total + 1e-6), 1.0)
    for t in tensors:
        assign(t.grad, t.grad * scale)
    return total
