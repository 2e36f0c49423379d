"""Inference-time graph rewrites of a TracedModule: ``optimize(module, enabled_pass)``.

* ``FuseConvBn``: a Conv2d module call whose only user is an eval-mode BatchNorm2d module call becomes one
  Conv2d call with the normalization folded into its weight and bias.
* ``FuseAddMul``: sub / div normalized to add / mul (``x - 1`` -> ``x + (-1)``, ``3 - x`` -> ``F.neg(x) + 3``),
  then ``(x + a) + b`` -> ``x + (a + b)``, ``(x * a) * b`` -> ``x * (a * b)`` for scalar constants.
* ``BackwardFoldScale`` (fold_scale.py): constant scalings moved back into conv weights.
"""
from __future__ import annotations

import copy
import inspect
import numbers
from typing import List

import numpy as np

from .. import functional as F
from .. import logger as _logger_mod
from ..core._tensor import Parameter, Tensor
from ..module.batchnorm import BatchNorm2d
from ..module.conv import Conv2d
from .expr import Apply, CallFunction, CallMethod, Constant, GetAttr, get_subattr
from .node import ModuleNode, Node, TensorNode
from .pytree import tree_flatten
from .traced_module import TracedModule

__all__ = ["optimize"]

logger = _logger_mod.get_logger(__name__)


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
            # MegEngine's patterns: ``BatchNorm2d(conv)`` / ``F.batch_norm(conv, ...)``; any other user (a Tensor
            # method such as ``conv(x).flatten()``, a non-BN call) leaves the conv alone
            params = _bn_params(user)
            if params is None or len(user.outputs) != 1:
                continue
            data = user.inputs[1] if isinstance(user.inputs[0], ModuleNode) else user.inputs[0]
            if data is not e.outputs[0]:
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


_INNER_PASSES = ("AttrToConstant", "FixInputShape", "FlodConstant", "NormElemWise")  # (MegEngine's registry)
_ADD_OPS = ("__add__", "__iadd__", "__radd__")
_SUB_OPS = ("__sub__", "__isub__", "__rsub__")
_MUL_OPS = ("__mul__", "__imul__", "__rmul__")
_DIV_OPS = ("__truediv__", "__itruediv__", "__rtruediv__")
_NOT_FOUND = object()


def _is_const_node(node):
    """Whether ``node`` holds a value fixed at inference time: a Constant, a tensor attribute read from self, or
    a result computed from those alone (``self.k[1]``): MegEngine's passes first make all of them Constants (its
    ``AttrToConstant`` and ``FlodConstant``)."""
    if not isinstance(node, TensorNode):
        return False
    e = node.expr
    if isinstance(e, Constant) or _attr_value(node) is not None:
        return True
    return isinstance(e, (CallMethod, CallFunction, Apply)) and len(e.outputs) == 1 and bool(e.inputs) and \
        not isinstance(e.inputs[0], ModuleNode) and all(_is_const_node(n) for n in e.inputs)


def _const_node_value(node):
    """The value of a node ``_is_const_node`` accepts."""
    e = node.expr
    if isinstance(e, Constant):
        return e.value
    got = _attr_value(node)
    if got is not None:
        return got[1]
    return e.interpret(*[_const_node_value(n) for n in e.inputs])[0]


def _first_const_arg(e):
    """The first argument of ``e`` that is not a node (MegEngine's ``expr.const_val[0][-1]``)."""
    try:
        values = e.named_args.values()
    except (TypeError, ValueError):
        return _NOT_FOUND
    return next((v for v in values if not isinstance(v, Node)), _NOT_FOUND)


def _is_tensor_method(e, methods):
    return isinstance(e, CallMethod) and not isinstance(e.inputs[0], ModuleNode) and e.method in methods


def _elemwise_target(e):
    """The method name or function of an add / sub / mul / div expr (those NormElemWise rewrites), else None."""
    if _is_tensor_method(e, _ADD_OPS + _SUB_OPS + _MUL_OPS + _DIV_OPS):
        return e.method
    if isinstance(e, CallFunction) and e.func in (F.add, F.sub, F.mul, F.div):
        return e.func
    return None


def _norm_elemwise_expr(g, e) -> bool:
    """MegEngine's ``NormElemWise`` on one expr: sub / div / reflected and in-place forms / ``F.add`` & co become
    ``__add__`` / ``__mul__`` with the constant (if any) on the right: ``x - c`` -> ``x + (-c)``, ``x / c`` ->
    ``x * (1 / c)``, ``c - x`` -> ``F.neg(x) + c``, ``c / x`` -> ``F.pow(x, -1) * c``, ``x - y`` -> ``x + F.neg(y)``,
    ``x / y`` -> ``x * F.pow(y, -1)``. True when ``e`` was replaced."""
    target = _elemwise_target(e)
    if target is None or len(e.outputs) != 1:
        return False
    sign, left, right = 1, None, None
    if len(e.inputs) == 1 and target not in ("__add__", "__mul__"):
        left, right = e.inputs[0], _first_const_arg(e)
        if target in ("__rsub__", "__rtruediv__") or (target in (F.sub, F.div) and left is not e.named_args["x"]):
            sign = -1
    elif len(e.inputs) == 2 and (target not in ("__add__", "__mul__") or _is_const_node(e.inputs[0])):
        if all(_is_const_node(n) for n in e.inputs):
            return False  # (MegEngine's FlodConstant computes these beforehand; nothing to normalize)
        left, right = e.inputs
        if target in ("__rsub__", "__rtruediv__") or (target in (F.sub, F.div) and left is not e.named_args["x"]):
            left, right = right, left
        if _is_const_node(left):
            left, right, sign = right, left, -1
    if left is None or not isinstance(right, (numbers.Number, TensorNode)) or isinstance(right, bool):
        return False  # (a non-numeric operand, e.g. a list: left as it is)
    if isinstance(right, TensorNode) and _is_const_node(right):
        right = _const_node_value(right)
    is_node = isinstance(right, TensorNode)
    if target in _SUB_OPS + (F.sub,) and sign == 1 and not is_node:
        right = -1 * right
    if target in _DIV_OPS + (F.div,) and sign == 1 and not is_node:
        if isinstance(right, numbers.Number) and right == 0:
            return False  # (``1 / 0`` raises in MegEngine's pass; the division stays)
        right = 1 / right
    with g.insert_exprs():
        if target in _MUL_OPS + (F.mul,):
            out = left * right
        elif target in _ADD_OPS + (F.add,):
            out = left + right
        elif target in _SUB_OPS + (F.sub,):
            out = F.neg(left) + right if sign == -1 else left + (F.neg(right) if is_node else right)
        else:
            out = F.pow(left, -1) * right if sign == -1 else left * (F.pow(right, -1) if is_node else right)
    g.replace_node({e.outputs[0]: out})
    g.compile()
    return True


def _norm_elemwise(g) -> bool:
    """Normalize every add / sub / mul / div expr of ``g`` (see ``_norm_elemwise_expr``); True when one changed."""
    changed = False
    for e in reversed(list(g._exprs)):  # (from the outputs back, as MegEngine's backward pass)
        if e in g._exprs and _norm_elemwise_expr(g, e):
            changed = True
    return changed


def _fold_operand(e, kind):
    """``(input node, constant)`` of ``e`` when it is a FuseAddMul operand of ``kind``: ``x + c`` ("add"),
    ``x * c`` or ``F.neg(x)`` ("mul"), ``F.pow(x, c)`` ("pow"), with ``c`` a number or a constant tensor node
    holding one value and ``x`` not constant; else None."""
    if kind == "mul" and isinstance(e, CallFunction) and e.func is F.neg:
        return (e.inputs[0], -1) if len(e.inputs) == 1 and not _is_const_node(e.inputs[0]) else None
    if kind == "pow":
        if not (isinstance(e, CallFunction) and e.func is F.pow):
            return None
    elif not _is_tensor_method(e, ("__add__",) if kind == "add" else ("__mul__",)):
        return None
    if len(e.outputs) != 1 or not e.inputs or _is_const_node(e.inputs[0]):
        return None
    if len(e.inputs) == 1:
        c = _first_const_arg(e)
    elif len(e.inputs) == 2 and _is_const_node(e.inputs[1]):
        c = _const_node_value(e.inputs[1])
    else:
        return None
    if isinstance(c, Tensor):
        return (e.inputs[0], c) if tuple(c.shape) in ((1,), ()) else None  # (MegEngine: scalars only)
    return (e.inputs[0], c) if isinstance(c, numbers.Number) and not isinstance(c, bool) else None


def _const_equals(c, v):
    return bool(np.all(np.asarray(c.numpy() if isinstance(c, Tensor) else c) == v))


def _is_integral(c):
    return _const_equals(np.round(c.numpy() if isinstance(c, Tensor) else c), c.numpy() if isinstance(
        c, Tensor) else c)


def _fuse_add_mul_once(g) -> bool:
    """Merge one pair of adjacent constant ops; True when one was merged."""
    for e in reversed(list(g._exprs)):
        for kind in ("add", "pow", "mul"):
            outer = _fold_operand(e, kind)
            if outer is None:
                continue
            src = outer[0].expr
            inner = _fold_operand(src, kind) if src in g._exprs else None
            if inner is None or len(outer[0].users) != 1:
                break  # (the first op's result is needed elsewhere too: both stay, as in MegEngine)
            if kind == "pow" and not (_is_integral(inner[1]) and _is_integral(outer[1])):
                break  # (x ** a) ** b is x ** (a * b) for integer exponents only (x < 0): not merged, unlike MegEngine
            x = inner[0]
            const = outer[1] + inner[1] if kind == "add" else outer[1] * inner[1]
            if _const_equals(const, 0 if kind == "add" else 1):
                g.replace_node({e.outputs[0]: x})
            else:
                with g.insert_exprs():
                    out = x + const if kind == "add" else x * const if kind == "mul" else F.pow(x, const)
                g.replace_node({e.outputs[0]: out})
            g.compile()
            return True
    return False


def fuse_add_mul(module: TracedModule) -> TracedModule:
    """MegEngine's ``FuseAddMul`` (in place): normalize add / sub / mul / div (``x - 1`` -> ``x + (-1)``, ...,
    its ``NormElemWise``), then merge adjacent constant ops: ``(x + a) + b`` -> ``x + (a + b)``, ``(x * a) * b``
    and ``F.neg`` chains -> ``x * (a * b)``, ``F.pow(F.pow(x, a), b)`` -> ``F.pow(x, a * b)``; a product 1 or a
    sum 0 removes the op. The first op of a pair must have no other user."""
    for g in _graphs(module):
        for _ in range(100):
            if not _norm_elemwise(g):
                break
        for _ in range(100):
            if not _fuse_add_mul_once(g):
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
        logger.warning("Since BackwardFoldScale requires FuseConvBn, FuseConvBn will be enabled.")
        enabled_pass.append("FuseConvBn")  # (MegEngine too: the scale must reach the conv, not a BN)
    # MegEngine's optimize() runs only these three and ignores its other registered passes' names (helpers of
    # theirs, run inside them here): accepted and ignored alike; any other name is a typo, and raises
    unknown = [p for p in enabled_pass if p not in _PASSES and p != "BackwardFoldScale" and p not in _INNER_PASSES]
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
