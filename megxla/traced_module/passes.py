"""Inference-time graph rewrites of a TracedModule: ``optimize(module, enabled_pass)``.

* ``FuseConvBn``: a Conv2d module call whose only user is an eval-mode BatchNorm2d module call becomes one
  Conv2d call with the normalization folded into its weight and bias.
* ``FuseAddMul``: ``(x + a) + b`` -> ``x + (a + b)`` and ``(x * a) * b`` -> ``x * (a * b)`` for Python-number
  constants (Tensor methods and ``F.add`` / ``F.mul``).
"""
from __future__ import annotations

import copy
import inspect
import numbers
from typing import List

import numpy as np

from .. import functional as F
from ..core._tensor import Parameter
from ..module.batchnorm import BatchNorm2d
from ..module.conv import Conv2d
from .expr import CallFunction, CallMethod, GetAttr, get_subattr
from .node import ModuleNode, Node, TensorNode
from .pytree import tree_flatten
from .traced_module import TracedModule

__all__ = ["optimize"]


def _module_call_target(expr, cls):
    if isinstance(expr, CallMethod) and expr.method == "__call__" and isinstance(expr.inputs[0], ModuleNode):
        m = expr.inputs[0].owner
        if type(m) is cls or (isinstance(m, cls) and not isinstance(m, TracedModule)):
            return m
    return None


def _fold(w, b, mean, var, gamma, beta, eps):
    """Weight and bias (1, O, 1, 1) of ``batch_norm(conv(x, w, b))`` as one conv (NumPy arrays)."""
    out_ch = mean.size
    mean, var = mean.reshape(out_ch), var.reshape(out_ch)
    gamma = np.ones(out_ch, np.float32) if gamma is None else gamma.reshape(out_ch)
    beta = np.zeros(out_ch, np.float32) if beta is None else beta.reshape(out_ch)
    b = np.zeros(out_ch, np.float32) if b is None else b.reshape(out_ch)
    scale = gamma / np.sqrt(var + eps)
    if w.ndim == 5:  # grouped: (groups, out/groups, in/groups, kh, kw)
        s = scale.reshape(w.shape[0], w.shape[1], 1, 1, 1)
    else:
        s = scale.reshape(-1, *([1] * (w.ndim - 1)))
    return (w * s).astype(w.dtype), ((b - mean) * scale + beta).reshape(1, out_ch, 1, 1).astype(np.float32)


def _np(t):
    return None if t is None else t.numpy()


def _fold_conv_bn(conv: Conv2d, bn: BatchNorm2d) -> Conv2d:
    """A copy of ``conv`` computing ``bn(conv(x))`` (bn in inference mode)."""
    fused = copy.deepcopy(conv)
    w, b = _fold(conv.weight.numpy(), _np(conv.bias), bn.running_mean.numpy(), bn.running_var.numpy(),
                 _np(bn.weight) if bn.affine else None, _np(bn.bias) if bn.affine else None, bn.eps)
    fused.weight, fused.bias = Parameter(w), Parameter(b)
    return fused


def _bound(e, func):
    sig = inspect.signature(func)
    return sig.bind(*e.args, **e.kwargs)


def _attr_value(node):
    """(path, value) of a tensor node read by GetAttr from the graph's self, else None."""
    if isinstance(node, TensorNode) and isinstance(node.expr, GetAttr) and node.expr.inputs[0] is \
            node.top_graph.inputs[0]:
        return node.expr.name, get_subattr(node.expr.inputs[0].owner, node.expr.name)
    return None


def _set_attr(owner, path, value):
    *head, last = path.split(".")
    setattr(get_subattr(owner, ".".join(head)), last, value)


def _bn_params(e):
    """(mean, var, gamma, beta, eps) as arrays of an inference batch norm expr (module or F.batch_norm)."""
    bn = _module_call_target(e, BatchNorm2d)
    if bn is not None:
        # a BatchNorm2d layer folds with its running statistics whatever its mode, as MegEngine's pass does
        # (optimize() prepares inference; the docs call it on a module never put in eval mode)
        if len(e.inputs) != 2:
            return None
        aff = bn.affine
        return (bn.running_mean.numpy(), bn.running_var.numpy(), _np(bn.weight) if aff else None,
                _np(bn.bias) if aff else None, bn.eps)
    if isinstance(e, CallFunction) and e.func is F.batch_norm:
        a = _bound(e, F.batch_norm).arguments
        if a.get("training", False) or len(a) < 3:
            return None
        vals = []
        for k in ("running_mean", "running_var", "weight", "bias"):
            v = a.get(k)
            if v is None:
                vals.append(None)
                continue
            got = _attr_value(v)
            if got is None:
                return None
            vals.append(got[1].numpy())
        if vals[0] is None or vals[1] is None:
            return None
        return (*vals, a.get("eps", 1e-5))
    return None


def _fuse_function_conv(g, e, params):
    """Fold BN ``params`` into the weight / bias attributes an ``F.conv2d`` expr reads; False if it cannot."""
    bound = _bound(e, F.conv2d)
    a = bound.arguments
    wa = _attr_value(a["weight"])
    bias = a.get("bias")
    ba = _attr_value(bias) if bias is not None else None
    if wa is None or len(a["weight"].users) != 1 or (bias is not None and (ba is None or len(bias.users) != 1)):
        return False
    w, b = _fold(wa[1].numpy(), None if ba is None else ba[1].numpy(), *params)
    self_node = g.inputs[0]
    _set_attr(self_node.owner, wa[0], Parameter(w))
    bias_path = ba[0] if ba is not None else wa[0].rsplit(".", 1)[0] + ".bias" if "." in wa[0] else "bias"
    _set_attr(self_node.owner, bias_path, Parameter(b))
    if ba is None:  # the conv had no bias: read the new one through a GetAttr placed before the conv
        ge = GetAttr(self_node, bias_path)
        ge.top_graph = g
        g._exprs.insert(g._exprs.index(e), ge)
        a["bias"] = g._new_node(TensorNode, ge, bias_path.replace(".", "_"), f"{g._qualname}.{bias_path}",
                                shape=b.shape, dtype=b.dtype)
        _set_call_args(e, bound.args, bound.kwargs)
    return True


def _set_call_args(e, args, kwargs):
    """Give a call expr new arguments (nodes at the leaves)."""
    for n in e.inputs[e._first_arg:]:
        if e in n.users:
            n.users.remove(e)
    del e.inputs[e._first_arg:]
    leaves, e.arg_def = tree_flatten((tuple(args), dict(kwargs)), is_leaf=lambda x: isinstance(x, Node))
    e.add_inputs(leaves)


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
    """Fold each inference batch norm (BatchNorm2d module or ``F.batch_norm``) that only follows a conv
    (Conv2d module or ``F.conv2d`` on attributes) into that conv (in place)."""
    for g in _graphs(module):
        changed = False
        for e in list(g._exprs):
            if e not in g._exprs or len(e.outputs) != 1 or len(e.outputs[0].users) != 1:
                continue
            conv = _module_call_target(e, Conv2d)
            is_fconv = isinstance(e, CallFunction) and e.func is F.conv2d
            if conv is None and not is_fconv:
                continue
            user = e.outputs[0].users[0]
            if not user.inputs or user.inputs[1 if isinstance(user, CallMethod) else 0] is not e.outputs[0]:
                continue
            params = _bn_params(user)
            if params is None or len(user.outputs) != 1:
                continue
            if conv is not None:
                conv_node = e.inputs[0]
                if not isinstance(conv_node.expr, GetAttr) or len(conv_node.users) != 1:
                    continue  # a conv called elsewhere too keeps its own weights
                fused = _fold_conv_bn(conv, _module_call_target(user, BatchNorm2d)) \
                    if _module_call_target(user, BatchNorm2d) is not None else _fold_module_with(conv, params)
                _set_attr(conv_node.expr.inputs[0].owner, conv_node.expr.name, fused)
            elif not _fuse_function_conv(g, e, params):
                continue
            g.replace_node({user.outputs[0]: e.outputs[0]})
            changed = True
        if changed:
            g.compile()
            module._update_ref()
    return module


def _fold_module_with(conv, params):
    fused = copy.deepcopy(conv)
    w, b = _fold(conv.weight.numpy(), _np(conv.bias), *params)
    fused.weight, fused.bias = Parameter(w), Parameter(b)
    return fused


_FOLD = {"__add__": ("__add__", lambda a, b: a + b), "__radd__": ("__add__", lambda a, b: a + b),
         "__mul__": ("__mul__", lambda a, b: a * b), "__rmul__": ("__mul__", lambda a, b: a * b)}


def _const_operand(e):
    """(op kind, tensor input node, Python constant) of ``x + c`` / ``x * c`` exprs, else None."""
    if isinstance(e, CallMethod) and e.method in _FOLD and len(e.inputs) == 1:
        args = e.args[1:]
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
        >>> class Net(M.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.conv, self.bn = M.Conv2d(3, 4, 3), M.BatchNorm2d(4)
        ...     def forward(self, x):
        ...         return self.bn(self.conv(x))
        >>> m = Net()
        >>> m.eval()
        >>> t = tm.trace_module(m, mge.Tensor(np.ones((1, 3, 5, 5), "float32")))
        >>> fused = tm.optimize(t, ["FuseConvBn"])
        >>> len(fused.graph.get_module_by_type(M.BatchNorm2d).as_list())
        0
    """
    if not isinstance(module, TracedModule):
        raise TypeError(f"optimize expects a TracedModule, got {type(module).__name__}")
    if isinstance(enabled_pass, str):
        enabled_pass = [enabled_pass]
    enabled_pass = list(enabled_pass)
    if "BackwardFoldScale" in enabled_pass and "FuseConvBn" not in enabled_pass:
        enabled_pass.append("FuseConvBn")  # (MegEngine too: the scale must reach the conv, not a BN)
    unknown = [p for p in enabled_pass if p not in _PASSES and p != "BackwardFoldScale"]
    if unknown:
        raise ValueError(f"optimize: unknown pass(es) {unknown}; megxla supports "
                         f"{sorted(_PASSES) + ['BackwardFoldScale']}")
    module = copy.deepcopy(module)
    from .fold_scale import backward_fold_scale
    passes = dict(_PASSES, BackwardFoldScale=backward_fold_scale)
    for name in ("FuseConvBn", "FuseAddMul", "BackwardFoldScale", "FuseAddMul"):  # MegEngine's order
        if name in enabled_pass:
            module = passes[name](module)
    return module
