"""Optimizer-state sharding (ZeRO-1/2): ``shard_optimizer``.

The model stays whole on every rank; the optimizer holds, for each parameter, only this rank's block of its
first axis (padded to a multiple of the group size) and the slots of that block. ``step()`` reduce-scatters
each local gradient (the mean over the ranks: this rank receives its block, ZeRO-2), updates its blocks, and
all-gathers the updated blocks into the whole parameters. Slots take 1/N of the memory; the parameters and the
local gradients stay whole.
"""
from __future__ import annotations

import numpy as np

from ..core._tensor import Parameter
from ..optimizer.optimizer import Optimizer, assign
from . import _sharding
from ._sharding import Split
from .group import Group

__all__ = ["shard_optimizer", "ShardedOptimizer"]


class ShardedOptimizer:
    """Mixin of an optimizer made by :func:`shard_optimizer`: steps on blocks, keeps the whole parameters."""

    def step(self):
        pairs = [(full, block, split) for full, block, split in self._megxla_zero if full.grad is not None]
        for full, block, _ in pairs:  # check every gradient before anything communicates or changes
            if full.grad.shape != full.shape:
                raise ValueError(f"{type(self).__name__}: grad of a parameter has shape {full.grad.shape}, "
                                 f"parameter has {full.shape}")
        for full, block, split in pairs:
            block.grad = _block_of_mean(full.grad, split)
        super().step()
        for full, block, split in pairs:
            assign(full, _sharding.shard_gather(block.detach(), split.group, split.full).reshape(full.shape))
        return self

    def clear_grad(self):
        super().clear_grad()
        for full, _, _ in self._megxla_zero:
            full.grad = None

    def _get_params(self):
        # the whole parameters are written by step(): state of a compiled step, like the blocks
        return super()._get_params() + [full for full, _, _ in self._megxla_zero]


def _block_of_mean(grad, split):
    from ..functional.distributed import reduce_scatter_sum
    from .. import functional as F
    g = grad.reshape((1,)) if split.scalar else grad
    pad = split.block * split.n - split.full
    if pad:
        g = F.concat([g, F.zeros((pad,) + tuple(g.shape[1:]), dtype=g.dtype)], axis=0)
    if split.n == 1:
        return g
    return reduce_scatter_sum(g, split.group) / split.n


def shard_optimizer(opt: Optimizer, group: Group = None) -> Optimizer:
    r"""Shard the optimizer state of ``opt`` over the ranks of ``group`` (ZeRO-1/2), in place.

    For models that fit on one device but whose optimizer slots (Adam: two per parameter) do not. The
    model's parameters stay whole and equal on every rank; the optimizer keeps this rank's block of each
    (first axis, padded) with its slots. ``step()`` reduce-scatters each rank's local gradient (the MEAN over
    the group: attach the GradManager with no all-reduce callback), updates the blocks and all-gathers them
    into the parameters -- XLA collectives, eagerly or inside ``xla_trace``. Existing slot values are split
    too. Every rank must step with gradients for the same parameters.

    Args:
        opt: an optimizer over the model's (whole, replicated) parameters.
        group: the ranks sharing the state, ``WORLD`` by default.

    Returns:
        ``opt`` itself, now stepping on blocks.

    Example:
        >>> import megxla as mge, megxla.distributed as dist, megxla.optimizer as optim
        >>> w = mge.Parameter([1.0, 2.0, 3.0])
        >>> opt = dist.shard_optimizer(optim.Adam([w], lr=0.1))
        >>> w.grad = mge.Tensor([1.0, 1.0, 1.0]); opt.step().clear_grad(); w.numpy().round(3)
        array([0.9, 1.9, 2.9], dtype=float32)
    """
    if not isinstance(opt, Optimizer):
        raise TypeError(f"shard_optimizer: expected an Optimizer, got {type(opt).__name__}")
    if isinstance(opt, ShardedOptimizer):
        raise ValueError("shard_optimizer: the optimizer is sharded already")
    group = _sharding._group(group, "shard_optimizer")
    old_state = opt._state
    pairs = []
    new_groups = []
    for pg in opt.param_groups:
        blocks = []
        for p in pg["params"]:
            scalar = p.ndim == 0
            split = Split("zero", group, 0, 1 if scalar else p.shape[0], scalar)
            block = Parameter(split.local(np.asarray(p.numpy())), dtype=p.dtype)
            pairs.append((p, block, split))
            blocks.append(block)
        new_groups.append(blocks)
    opt._state = {}
    for pg, blocks in zip(opt.param_groups, new_groups):
        dict.__setitem__(pg, "params", blocks)
        opt._create_state(pg)
    for full, block, split in pairs:  # slots made before: each rank keeps its block
        for k, v in old_state.get(full, {}).items():
            mine = opt._state.get(block, {}).get(k)
            if mine is None:
                continue
            if tuple(v.shape) == tuple(full.shape):
                mine._reset(Parameter(split.local(np.asarray(v.numpy())), dtype=v.dtype))
            elif tuple(v.shape) == tuple(mine.shape):
                mine._reset(v)
    opt._megxla_zero = pairs
    opt.__class__ = _zero_class(type(opt))
    from ..core import _registry
    _registry.bump_epoch()
    return opt


_CLASSES = {}


def _zero_class(cls):
    new = _CLASSES.get(cls)
    if new is None:
        new = _CLASSES[cls] = type(f"Sharded{cls.__name__}", (ShardedOptimizer, cls), {"__module__": cls.__module__})
    return new
