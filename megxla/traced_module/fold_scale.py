"""The ``BackwardFoldScale`` pass: constant scalings moved backwards into conv weights.

``y = relu(conv(x)) * 3`` becomes ``y = relu(conv'(x))`` with conv' = conv with weight and bias times 3. The
scale a node would need is propagated from the graph's end towards its start through ops that commute with a
positive scaling (relu, reshape, pooling, indexing, ``+`` of two scaled values, ``+ const`` with the const
scaled); a conv absorbs it, a constant multiplication disappears (or keeps the remaining factor). Where two
users want different scales, or a value cannot be rescaled (a graph input, an op that does not commute), the
value keeps scale 1 and so does everything that depends on it through commuting ops.
"""
from __future__ import annotations

import copy
import numbers

import numpy as np

from .. import functional as F
from .. import module as M
from ..core._tensor import Parameter, Tensor
from .expr import Apply, CallFunction, CallMethod, Constant, GetAttr
from .node import ModuleNode, TensorNode
from .passes import _attr_value, _bound, _graphs, _module_call_target, _set_attr
from .pytree import tree_flatten

__all__ = ["backward_fold_scale"]

_MUL = {"__mul__", "__rmul__"}
_ADD = {"__add__", "__radd__"}
_SHAPE_METHODS = {"reshape", "transpose", "flatten", "__getitem__"}
_SHAPE_FUNCS = {F.reshape, F.transpose, F.flatten, F.expand_dims, F.squeeze}
_POS_FUNCS = {F.relu, F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d, F.adaptive_max_pool2d}
_POS_MODULES = (M.ReLU, M.MaxPool2d, M.AvgPool2d, M.AdaptiveAvgPool2d, M.AdaptiveMaxPool2d)


class _Consts:
    """Values of nodes computable from attributes and constants alone (``self.scale[0]``)."""

    def __init__(self):
        self.memo = {}

    def value(self, node):
        if node in self.memo:
            return self.memo[node]
        v = None
        e = node.expr
        if isinstance(node, TensorNode):
            if isinstance(e, Constant) and isinstance(e.value, Tensor):
                v = e.value
            elif isinstance(e, GetAttr):
                got = _attr_value(node)
                v = got[1] if got is not None else None
            elif isinstance(e, (CallMethod, CallFunction, Apply)) and len(e.outputs) == 1 and e.inputs and \
                    not isinstance(e.inputs[0], ModuleNode):
                vals = [self.value(n) for n in e.inputs]
                if all(x is not None for x in vals):
                    v = e.interpret(*vals)[0]
        self.memo[node] = v
        return v

    def scalar(self, node):
        v = self.value(node)
        if v is None or int(np.prod(v.shape)) != 1:
            return None
        return v.numpy().reshape(()).item()


def _classify(e, consts):
    """(kind, tensor input nodes, constant) of an expr; kinds: conv, mul, add_const, add, pass, pos, other."""
    if len(e.outputs) != 1 or not isinstance(e.outputs[0], TensorNode):
        return "other", [], None
    if _module_call_target(e, M.Conv2d) is not None and len(e.inputs) == 2:
        node = e.inputs[0]
        if isinstance(node.expr, GetAttr) and len(node.users) == 1:
            return "conv", [], None
        return "other", [], None
    if isinstance(e, CallFunction) and e.func is F.conv2d:
        a = _bound(e, F.conv2d).arguments
        w, b = a["weight"], a.get("bias")
        if _attr_value(w) is not None and len(w.users) == 1 and \
                (b is None or (_attr_value(b) is not None and len(b.users) == 1)):
            return "conv", [], None
        return "other", [], None
    binary = None
    if isinstance(e, CallMethod) and (e.method in _MUL or e.method in _ADD):
        args = list(e.args)  # (the object the method is called on first)
        binary = ("mul" if e.method in _MUL else "add", args) if len(args) == 2 and not e.kwargs else None
    elif isinstance(e, CallFunction) and e.func in (F.mul, F.add):
        args = list(e.args) + list(e.kwargs.values())
        binary = ("mul" if e.func is F.mul else "add", args) if len(args) == 2 else None
    elif isinstance(e, CallFunction) and e.func is F.neg and len(e.inputs) == 1:
        return "mul", [e.inputs[0]], -1
    if binary is not None:
        op, (a, b) = binary
        ca = a if isinstance(a, numbers.Number) else consts.scalar(a)
        cb = b if isinstance(b, numbers.Number) else consts.scalar(b)
        if ca is not None and cb is None and isinstance(b, TensorNode):
            return ("mul" if op == "mul" else "add_const"), [b], ca
        if cb is not None and ca is None and isinstance(a, TensorNode):
            return ("mul" if op == "mul" else "add_const"), [a], cb
        if op == "add" and ca is None and cb is None and isinstance(a, TensorNode) and isinstance(b, TensorNode):
            return "add", [a, b], None
        return "other", [], None
    if isinstance(e, CallMethod) and e.method in _SHAPE_METHODS and len(e.inputs) == 1:
        return "pass", [e.inputs[0]], None
    if isinstance(e, CallFunction) and e.func in _SHAPE_FUNCS and len(e.inputs) == 1:
        return "pass", [e.inputs[0]], None
    if isinstance(e, CallFunction) and e.func in _POS_FUNCS and len(e.inputs) == 1:
        return "pos", [e.inputs[0]], None
    if isinstance(e, CallMethod) and e.method == "__call__" and isinstance(e.inputs[0], ModuleNode) \
            and isinstance(e.inputs[0].owner, _POS_MODULES) and len(e.inputs) == 2:
        return "pos", [e.inputs[1]], None
    return "other", [], None


def _solve(g, info):
    """The scale k of every expr output (new value = old value * k), as a dict expr -> k."""
    blocked = set()
    while True:
        k = {}
        restart = False
        for e in reversed(g._exprs):
            kind, ins, c = info[e]
            if len(e.outputs) != 1:
                continue
            o = e.outputs[0]
            fixed, prefs = set(), []
            for u in o.users:
                ukind, uins, uc = info[u]
                if ukind == "mul" and uins and uins[0] is o:
                    prefs.append(uc * k.get(u, 1))
                elif ukind in ("pass", "pos", "add", "add_const") and o in uins:
                    fixed.add(k.get(u, 1))
                else:
                    fixed.add(1)
            if o in g.outputs:
                fixed.add(1)
            if o in blocked or len(fixed) > 1:
                want = 1
            elif fixed:
                want = fixed.pop()
            else:
                want = prefs[0] if prefs else 1
            # a value only a commuting op or a conv produces can be rescaled; relu & co only by k > 0
            want_ok = want == 1 or not (kind == "other" or (kind == "pos" and want < 0))
            if not want_ok:
                blocked.add(o)
                restart = True
                break
            k[e] = want
        if restart:
            continue
        # every commuting user must get exactly the scale it passes on
        for e in g._exprs:
            kind, ins, c = info[e]
            if kind in ("pass", "pos", "add", "add_const"):
                for n in ins:
                    have = k.get(n.expr, 1)  # (graph inputs and attributes: 1)
                    if have != k.get(e, 1) and e.outputs[0] not in blocked:
                        blocked.add(e.outputs[0])
                        restart = True
        if not restart:
            return k


def _rewrite(g, e, x, method, const):
    """Replace ``e`` by ``x.<method>(const)`` keeping its output node."""
    new = CallMethod(x, method)
    new.arg_def = tree_flatten(((const,), {}))[1]
    new.out_def = e.out_def
    for n in e.inputs:
        if e in n.users:
            n.users.remove(e)
    new.outputs = e.outputs
    for n in new.outputs:
        n.expr = new
    new.top_graph = g
    g._exprs[g._exprs.index(e)] = new


def _scale_conv(g, e, s):
    conv = _module_call_target(e, M.Conv2d)
    if conv is not None:
        node = e.inputs[0]
        new = copy.deepcopy(conv)
        new.weight = Parameter(conv.weight.numpy() * np.float32(s))
        if conv.bias is not None:
            new.bias = Parameter(conv.bias.numpy() * np.float32(s))
        _set_attr(node.expr.inputs[0].owner, node.expr.name, new)
        return
    a = _bound(e, F.conv2d).arguments
    for key in ("weight", "bias"):
        n = a.get(key)
        if n is not None:
            path, v = _attr_value(n)
            _set_attr(g.inputs[0].owner, path, Parameter(v.numpy() * np.float32(s)))


def backward_fold_scale(module):
    """Fold constant scalings backwards into conv weights (in place); see the module docstring."""
    for g in _graphs(module):
        consts = _Consts()
        info = {e: _classify(e, consts) for e in g._exprs}
        k = _solve(g, info)
        removed = {}  # output of a removed multiplication -> the node now standing for it

        def cur(n):
            while n in removed:
                n = removed[n]
            return n

        for e in list(g._exprs):
            kind, orig, c = info[e]
            ins = [cur(n) for n in orig]  # wired to what stands for the inputs now
            ke = k.get(e, 1)
            if kind == "conv" and ke != 1:
                _scale_conv(g, e, ke)
            elif kind == "mul":
                x = ins[0]
                kx = k.get(orig[0].expr, 1)  # the scale of the original input's value (1: graph inputs)
                factor = c * ke / kx
                if factor == 1:
                    g.replace_node({e.outputs[0]: x})
                    removed[e.outputs[0]] = x
                elif factor != c or x is not orig[0]:  # (unchanged otherwise: keeps an int multiplier int)
                    _rewrite(g, e, x, "__mul__", factor)
            elif kind == "add_const" and ke != 1:
                _rewrite(g, e, ins[0], "__add__", c * ke)
            elif kind == "add_const" and not (isinstance(e, CallMethod) and e.inputs[0] is ins[0]):
                _rewrite(g, e, ins[0], "__add__", c)  # ``const + x`` with a const node: x + number
        g.compile()
    module._update_ref()
    return module
