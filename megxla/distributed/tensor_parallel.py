"""Tensor parallel (Megatron-LM style): ``parallelize(module, plan)`` with ``ColwiseParallel`` / ``RowwiseParallel``.

A column-split Linear holds ``out_features / N`` rows of the weight (and of the bias) and produces its part of the
output features; its replicated input enters through ``copy_to`` (identity forward, gradient summed over the
group). A row-split Linear holds ``in_features / N`` columns, takes the part of the features its column-split
predecessor produced, and sums the partial outputs with ``reduce_from`` (one all-reduce; identity gradient)
before adding its replicated bias. An MLP ``fc1 -> act -> fc2`` or an attention block ``q, k, v -> heads ->
out`` so split costs one all-reduce forward and one backward per block; the heads split with the columns of
``q``, ``k``, ``v`` (the model must reshape to ``(..., -1, head_dim)``, so that each rank sees its heads).
"""
from __future__ import annotations

import fnmatch

from ..module.linear import Linear
from ..module.module import Module
from . import _sharding
from ._sharding import ShardedModule, Split, copy_to, reduce_from, splits_of
from .group import Group

__all__ = ["ColwiseParallel", "RowwiseParallel", "parallelize"]

_STYLE = __import__("weakref").WeakKeyDictionary()  # Linear -> (style, group)


class _ParallelStyle:
    kind = None

    def __repr__(self):
        return f"{type(self).__name__}()"

    def _apply(self, linear, group, path):
        if not isinstance(linear, Linear):
            raise TypeError(f"parallelize: {type(self).__name__} applies to Linear layers, {path!r} is a "
                            f"{type(linear).__name__}")
        if linear in _STYLE or splits_of(linear):
            raise ValueError(f"parallelize: {path!r} is already sharded")
        n = group.size if not _sharding._trivial(group) else 1
        w = linear.weight
        axis = 0 if self.kind == "col" else 1
        if w.shape[axis] % n:
            raise ValueError(f"parallelize: {path!r} {type(self).__name__} splits weight axis {axis} of shape "
                             f"{tuple(w.shape)} over {n} ranks: not divisible")
        _sharding.split_parameter(linear, "weight", Split("tp", group, axis, w.shape[axis]))
        if self.kind == "col" and linear.bias is not None:
            _sharding.split_parameter(linear, "bias", Split("tp", group, 0, linear.bias.shape[0]))
        _STYLE[linear] = (self, group)
        _sharding.swap_class(linear, _TPLinear)


class ColwiseParallel(_ParallelStyle):
    r"""Split a Linear's output features (weight rows, bias) over the tensor-parallel group: the input is
    replicated, the output is this rank's part of the features (feed it to a :class:`RowwiseParallel` Linear,
    or to per-head attention).

    Example:
        >>> plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    """
    kind = "col"


class RowwiseParallel(_ParallelStyle):
    r"""Split a Linear's input features (weight columns) over the tensor-parallel group: the input is this
    rank's part of the features, the partial outputs are summed over the group (one all-reduce) and the
    replicated bias added.

    Example:
        >>> plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    """
    kind = "row"


class _TPLinear:
    _prefix = "TP"

    def forward(self, x):
        style, group = _STYLE[self]
        if style.kind == "col":
            return self.calc_linear(copy_to(x, group), self.weight, self.bias)
        y = reduce_from(self.calc_linear(x, self.weight, None), group)
        return y if self.bias is None else y + self.bias


def parallelize(module: Module, plan: dict, group: Group = None) -> Module:
    r"""Split the Linear layers named in ``plan`` over the ranks of ``group`` (tensor parallel, Megatron-LM).

    Every rank runs the whole model on the same batch; each holds its part of the split layers' weights. Call
    it before building the optimizer (the parameters are replaced by their parts). Composes with
    :func:`~megxla.distributed.fully_shard` (call that after, with another axis of a
    :class:`~megxla.distributed.DeviceMesh`): ``state_dict()`` then gathers both splits. Parameters must be
    equal on every rank before; gradients of split layers are exact per rank, replicated ones (LayerNorm,
    biases of row-split layers) come out equal on every rank, so no gradient all-reduce is needed over the
    tensor-parallel group.

    Args:
        module: the model (modified in place).
        plan: ``{sub-module name or fnmatch pattern: ColwiseParallel() | RowwiseParallel()}``; names as
            ``module.named_modules()`` gives them (``"blocks.0.mlp.fc1"``, ``"blocks.*.mlp.fc1"``).
        group: the tensor-parallel ranks, ``WORLD`` by default.

    Returns:
        ``module`` itself.

    Example:
        >>> import megxla.distributed as dist, megxla.module as M
        >>> mlp = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 4))
        >>> mlp = dist.parallelize(mlp, {"0": dist.ColwiseParallel(), "2": dist.RowwiseParallel()})
        >>> type(mlp[0]).__name__, [tuple(p.shape) for p in mlp.parameters()]   # one process: whole parts
        ('TPLinear', [(8,), (8, 4), (4,), (4, 8)])
    """
    if not isinstance(module, Module):
        raise TypeError(f"parallelize: expected a Module, got {type(module).__name__}")
    if not isinstance(plan, dict) or not all(isinstance(v, _ParallelStyle) for v in plan.values()):
        raise TypeError("parallelize: plan must be a dict {name or pattern: ColwiseParallel() | RowwiseParallel()}")
    group = _sharding._group(group, "parallelize")
    named = dict(module.named_modules())
    chosen = []
    for pattern, style in plan.items():
        hits = [k for k in named if fnmatch.fnmatchcase(k, pattern)]
        if not hits:
            raise ValueError(f"parallelize: no sub-module matches {pattern!r} (names: {sorted(named)[:12]}...)")
        chosen.extend((k, style) for k in hits)
    seen = set()
    for k, style in chosen:  # check everything before splitting anything
        if k in seen:
            raise ValueError(f"parallelize: {k!r} is matched by two entries of the plan")
        seen.add(k)
        m = named[k]
        if not isinstance(m, Linear):
            raise TypeError(f"parallelize: {type(style).__name__} applies to Linear layers, {k!r} is a "
                            f"{type(m).__name__}")
        n = group.size if not _sharding._trivial(group) else 1
        axis = 0 if style.kind == "col" else 1
        if m.weight.shape[axis] % n:
            raise ValueError(f"parallelize: {k!r} {type(style).__name__} splits weight axis {axis} of shape "
                             f"{tuple(m.weight.shape)} over {n} ranks: not divisible")
        if any(s.kind == "fsdp" for ss in splits_of(m).values() for s in ss):
            raise ValueError(f"parallelize: {k!r} is fully sharded already: call parallelize before fully_shard")
    for k, style in chosen:
        style._apply(named[k], group, k)
    _sharding.swap_class(module, ShardedModule)
    return module
