"""Optimizer-state sharding (ZeRO-1/2): ``shard_optimizer``.

The model stays whole on every rank; the optimizer holds, for each parameter, only this rank's block of its
first axis (padded to a multiple of the group size) and the slots of that block. ``step()`` reduce-scatters
each local gradient (the mean over the ranks: this rank receives its block, ZeRO-2), updates its blocks, and
all-gathers the updated blocks into the whole parameters. Slots take 1/N of the memory; the parameters and the
local gradients stay whole.

The collectives go in buckets, as data parallel's ``make_allreduce_cb`` packs its all-reduces: the gradients of
about ``BUCKET_BYTES`` of parameters (of one dtype) are laid out rank-major -- every parameter's block for rank 0,
then rank 1's... -- and reduce-scattered as one array, and the updated blocks are gathered back the same way. A
collective has a fixed cost (~2 ms between two CPU processes over gloo, eagerly; XLA:CPU combines no all-gathers
or reduce-scatters inside a compiled step either), which one pair per parameter paid 52 times in a 4-block
Transformer's step. Each element is summed over the same ranks either way.
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
        for bucket in _buckets(pairs, lambda full, block: full.grad.dtype):
            for (full, block, split), g in zip(bucket, _blocks_of_mean([full.grad for full, _, _ in bucket],
                                                                       [split for _, _, split in bucket])):
                block.grad = g
        super().step()
        for bucket in _buckets(pairs, lambda full, block: block.dtype):
            wholes = _gathered([block.detach() for _, block, _ in bucket], [split for _, _, split in bucket])
            for (full, _, _), w in zip(bucket, wholes):
                assign(full, w.reshape(full.shape))
        return self

    def clear_grad(self):
        super().clear_grad()
        for full, _, _ in self._megxla_zero:
            full.grad = None

    def _get_params(self):
        # the whole parameters are written by step(): state of a compiled step, like the blocks
        return super()._get_params() + [full for full, _, _ in self._megxla_zero]


BUCKET_BYTES = 10 * 2 ** 20  # (make_allreduce_cb's bucket size)


def _buckets(pairs, dtype_of):
    """``pairs`` cut, in order, into runs of one dtype (``dtype_of(full, block)``) holding about
    :data:`BUCKET_BYTES` of blocks -- the same cut on every rank (the same parameters, shapes and dtypes)."""
    out, size, last = [], 0, None
    for full, block, split in pairs:
        dt = np.dtype(dtype_of(full, block))
        nbytes = int(np.prod(block.shape)) * dt.itemsize
        if not out or dt != last or (size and size + nbytes > BUCKET_BYTES):
            out.append([])
            size, last = 0, dt
        out[-1].append((full, block, split))
        size += nbytes
    return out


def _blocks_of_mean(grads, splits):
    """This rank's block of the mean over the group of each local gradient: one reduce-scatter of them all."""
    from ..functional.distributed import reduce_scatter_sum
    from .. import functional as F
    padded = []
    for grad, split in zip(grads, splits):
        g = grad.reshape((1,)) if split.scalar else grad
        pad = split.block * split.n - split.full
        if pad:
            g = F.concat([g, F.zeros((pad,) + tuple(g.shape[1:]), dtype=g.dtype)], axis=0)
        padded.append(g)
    n = splits[0].n
    if n == 1:
        return padded
    # rank-major: row k of (n, total) holds every gradient's block k, so rank k receives exactly its blocks
    rows = [g.reshape(n, int(np.prod(g.shape)) // n) for g in padded]  # (explicit: an empty one has no -1)
    packed = rows[0] if len(rows) == 1 else F.concat(rows, axis=1)
    mine = reduce_scatter_sum(packed.reshape(-1), splits[0].group) / n
    out, at = [], 0
    for g in padded:
        size = int(np.prod(g.shape)) // n
        out.append(mine[at:at + size].reshape((g.shape[0] // n,) + tuple(g.shape[1:])))
        at += size
    return out


def _gathered(blocks, splits):
    """Each whole parameter (its padding cut off) from the ranks' ``blocks``: one all-gather of them all."""
    from .. import functional as F
    group, n = splits[0].group, splits[0].n
    if n == 1:
        return [_sharding.shard_gather(b, group, sp.full) for b, sp in zip(blocks, splits)]
    flat = [b.reshape(-1) for b in blocks]
    packed = flat[0] if len(flat) == 1 else F.concat(flat, axis=0)
    every = _sharding.shard_gather(packed, group).reshape(n, packed.shape[0])  # row k: rank k's blocks
    out, at = [], 0
    for b, sp in zip(blocks, splits):
        size = int(np.prod(b.shape))
        whole = every[:, at:at + size].reshape((n * b.shape[0],) + tuple(b.shape[1:]))
        out.append(whole if n * b.shape[0] == sp.full else whole[:sp.full])
        at += size
    return out


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
