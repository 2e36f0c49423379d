"""Inference-time graph rewrites of a TracedModule: ``optimize(module, enabled_pass)``.

* ``FuseConvBn``: a Conv2d module call whose only user is an eval-mode BatchNorm2d module call becomes one
  Conv2d call with the normalization folded into its weight and bias.
* ``FuseAddMul``: ``(x + a) + b`` -> ``x + (a + b)`` and ``(x * a) * b`` -> ``x * (a * b)`` for Python-number
  constants (Tensor methods and ``F.add`` / ``F.mul``).
"""
from __future__ import annotations

import copy
import numbers
from typing import List

import numpy as np

from .. import functional as F
from ..core._tensor import Parameter
from ..module.batchnorm import BatchNorm2d
from ..module.conv import Conv2d
from .expr import CallFunction, CallMethod, GetAttr, get_subattr
from .node import ModuleNode
from .pytree import tree_flatten
from .traced_module import TracedModule

__all__ = ["optimize"]


def _module_call_target(expr, cls):
    if isinstance(expr, CallMethod) and expr.method == "__call__" and isinstance(expr.inputs[0], ModuleNode):
        m = expr.inputs[0].owner
        if type(m) is cls or (isinstance(m, cls) and not isinstance(m, TracedModule)):
            return m
    return None


def _fold_conv_bn(conv: Conv2d, bn: BatchNorm2d) -> Conv2d:
    """A copy of ``conv`` computing ``bn(conv(x))`` (bn in inference mode)."""
    fused = copy.deepcopy(conv)
    w = conv.weight.numpy()
    out_ch = bn.running_mean.shape[1]
    mean = bn.running_mean.numpy().reshape(out_ch)
    var = bn.running_var.numpy().reshape(out_ch)
    gamma = bn.weight.numpy().reshape(out_ch) if bn.affine else np.ones(out_ch, np.float32)
    beta = bn.bias.numpy().reshape(out_ch) if bn.affine else np.zeros(out_ch, np.float32)
    scale = gamma / np.sqrt(var + bn.eps)
    if w.ndim == 5:  # grouped: (groups, out/groups, in/groups, kh, kw)
        s = scale.reshape(w.shape[0], w.shape[1], 1, 1, 1)
    else:
        s = scale.reshape(-1, *([1] * (w.ndim - 1)))
    b = conv.bias.numpy().reshape(out_ch) if conv.bias is not None else np.zeros(out_ch, np.float32)
    fused.weight = Parameter((w * s).astype(w.dtype))
    fused.bias = Parameter(((b - mean) * scale + beta).reshape(1, out_ch, 1, 1).astype(np.float32))
    return fused


def _graphs(module):
    """The graphs that run when ``module`` runs: its own and those its calls reach (a flattened module still
    holds the nested TracedModules as attributes, but their graphs no longer run and must not be rewritten)."""
    out, seen = [], set()
    stack = list(module.argdef_graph_map.values())
    while stack:
        g = stack.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        out.append(g)
        for e in g._exprs:
            if isinstance(e, CallMethod) and e.graph is not None:
                stack.append(e.graph)
    return out


def fuse_conv_bn(module: TracedModule) -> TracedModule:
    """Fold each eval-mode BatchNorm2d that only follows a Conv2d into that conv (in place)."""
    for g in _graphs(module):
        changed = False
        for e in list(g._exprs):
            conv = _module_call_target(e, Conv2d)
            if conv is None or len(e.outputs) != 1 or len(e.outputs[0].users) != 1:
                continue
            user = e.outputs[0].users[0]
            bn = _module_call_target(user, BatchNorm2d)
            if bn is None or bn.training or len(user.inputs) != 2 or len(user.outputs) != 1:
                continue
            conv_node = e.inputs[0]
            if not isinstance(conv_node.expr, GetAttr) or len(conv_node.users) != 1:
                continue  # a conv called elsewhere too keeps its own weights
            owner = conv_node.expr.inputs[0].owner
            *head, last = conv_node.expr.name.split(".")
            setattr(get_subattr(owner, ".".join(head)), last, _fold_conv_bn(conv, bn))
            g.replace_node({user.outputs[0]: e.outputs[0]})
            changed = True
        if changed:
            g.compile()
            module._update_ref()
    return module


_FOLD = {"__add__": ("__add__", lambda a, b: a + b), "__radd__": ("__add__", lambda a, b: a + b),
         "__mul__": ("__mul__", lambda a, b: a * b), "__rmul__": ("__mul__", lambda a, b: a * b)}


def _const_operand(e):
    """(op kind, tensor input node, Python constant) of ``x + c`` / ``x * c`` exprs, else None."""
    if isinstance(e, CallMethod) and e.method in _FOLD and len(e.inputs) == 1:
        args = e.args
        if len(args) == 1 and isinstance(args[0], numbers.Number) and not e.kwargs:
            return _FOLD[e.method][0], e.inputs[0], args[0]
    if isinstance(e, CallFunction) and e.func in (F.add, F.mul) and len(e.inputs) == 1:
        args = list(e.args) + list(e.kwargs.values())
        consts = [a for a in args if isinstance(a, numbers.Number)]
        if len(args) == 2 and len(consts) == 1:
            return ("__add__" if e.func is F.add else "__mul__"), e.inputs[0], consts[0]
    return None


def fuse_add_mul(module: TracedModule) -> TracedModule:
    """Merge chains of constant additions / multiplications into one op (in place)."""
    for g in _graphs(module):
        changed = True
        while changed:
            changed = False
            for e2 in list(g._exprs):
                second = _const_operand(e2)
                if second is None:
                    continue
                src = second[1].expr
                first = _const_operand(src) if src in g._exprs else None
                if first is None or first[0] != second[0] or len(src.outputs[0].users) != 1:
                    continue
                combined = _FOLD[second[0]][1](first[2], second[2])
                x = first[1]
                # e2 becomes ``x <op> combined``: a Tensor method on x with one constant argument
                old = e2.inputs[0]
                old.users.remove(e2)
                new = CallMethod(x, second[0])
                new.arg_def = tree_flatten(((combined,), {}))[1]
                new.out_def = e2.out_def
                new.outputs = e2.outputs
                for n in new.outputs:
                    n.expr = new
                new.top_graph = g
                g._exprs[g._exprs.index(e2)] = new
                changed = True
                break
        g.compile()
    return module


_PASSES = {"FuseConvBn": fuse_conv_bn, "FuseAddMul": fuse_add_mul}


def optimize(module: TracedModule, enabled_pass: List[str] = ["FuseConvBn"]) -> TracedModule:  # noqa: B006
    r"""Apply inference optimizations to a copy of a :class:`TracedModule`.

    Supported passes: ``"FuseConvBn"`` (fold eval-mode BatchNorm2d into the preceding Conv2d) and
    ``"FuseAddMul"`` (merge chains of constant ``+`` / ``*``).

    Args:
        module: the TracedModule (left unchanged).
        enabled_pass: a pass name or a list of them. Default: ``["FuseConvBn"]``.

    Returns:
        the optimized copy.

    Example:
        >>> import numpy as np, megxla as mge, megxla.module as M, megxla.traced_module as tm
        >>> net = M.Sequential(M.Conv2d(3, 4, 3), M.BatchNorm2d(4))
        >>> class Net(M.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.conv, self.bn = M.Conv2d(3, 4, 3), M.BatchNorm2d(4)
        ...     def forward(self, x):
        ...         return self.bn(self.conv(x))
        >>> m = Net().eval()
        >>> t = tm.trace_module(m, mge.Tensor(np.ones((1, 3, 5, 5), "float32")))
        >>> fused = tm.optimize(t, ["FuseConvBn"])
        >>> len(fused.graph.get_module_by_type(M.BatchNorm2d).as_list())
        0
    """
    if not isinstance(module, TracedModule):
        raise TypeError(f"optimize expects a TracedModule, got {type(module).__name__}")
    if isinstance(enabled_pass, str):
        enabled_pass = [enabled_pass]
    unknown = [p for p in enabled_pass if p not in _PASSES]
    if unknown:
        raise ValueError(f"optimize: unknown pass(es) {unknown}; megxla supports {sorted(_PASSES)}")
    module = copy.deepcopy(module)
    for name in ("FuseConvBn", "FuseAddMul"):  # MegEngine's order
        if name in enabled_pass:
            module = _PASSES[name](module)
    return module
