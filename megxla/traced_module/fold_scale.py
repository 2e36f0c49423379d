"""The ``BackwardFoldScale`` pass: constant scalings moved backwards into conv weights, as MegEngine's.

``y = (relu(conv(x)) + 1) * 3`` becomes ``y = relu(conv'(x)) + 3`` with conv' = conv with weight and bias times 3.
After MegEngine's ``NormElemWise`` (``x - c`` -> ``x + (-c)``, ``x / c`` -> ``x * (1 / c)``, ...), each expr gets,
from the graph's end towards its start, the scale its users ask of it (MegEngine's ``scale_message``):

* a multiplication by a constant (``x * c``, ``F.neg``) asks its input for ``c`` times what its users ask, and is
  removed;
* ``+`` (``x + c`` gets its constant scaled), relu / leaky relu (positive scales), ``reshape`` / ``F.transpose`` /
  ``F.expand_dims`` / ``F.concat`` / ``[]``, min / max and pooling pass the request on to their inputs;
* a conv (a Conv2d module, or ``F.conv2d`` on constant weights) takes it into its weight and bias (a module called
  more than once gets a scaled copy ``<name>_1``);
* a value whose users ask for different scales, and any other op (``Tensor.flatten``, ``Tensor.transpose``, an
  Identity module, ...), stops the folding there.

Where MegEngine's pass would change the module's outputs, this one refuses: a value the graph also returns, a
scaled op reading a value that cannot be scaled (a graph input, a constant concatenated), a conv whose output
also has another user, a negative scale through max / min / max pooling, a branch of an ``+`` whose other branch
stopped the folding.
"""
from __future__ import annotations

import copy
import numbers
from collections import defaultdict

from .. import functional as F
from .. import logger as _logger_mod
from .. import module as M
from ..core._tensor import Parameter, Tensor
from .expr import CallFunction, CallMethod, Constant, GetAttr
from .node import ModuleNode, TensorNode
from .passes import (_const_node_value, _first_const_arg, _graphs, _is_const_node, _is_tensor_method,
                     _NOT_FOUND, _norm_elemwise, _set_attr)
from .traced_module import TracedModule

__all__ = ["backward_fold_scale"]

logger = _logger_mod.get_logger(__name__)

_MUL, _ADD_CONST, _CONV, _CONV_POSITIVE, _POSITIVE, _PASS = "mul", "add_const", "conv", "conv+", "positive", "pass"

# MegEngine's list; its "tranpose" (sic) leaves Tensor.transpose out, and flatten is not there
_PASS_FUNCS = (F.reshape, F.transpose, F.expand_dims, F.concat, F.avg_pool2d, F.adaptive_avg_pool2d)
_PASS_METHODS = ("__add__", "reshape", "__getitem__")
_PASS_MODULES = (M.AvgPool2d, M.AdaptiveAvgPool2d)
# these commute with positive scales only (MegEngine's pass checks the sign for relu alone)
_POSITIVE_FUNCS = (F.relu, F.leaky_relu, F.min, F.max, F.max_pool2d, F.adaptive_max_pool2d)
_POSITIVE_METHODS = ("min", "max")
_POSITIVE_MODULES = (M.ReLU, M.LeakyReLU, M.MaxPool2d, M.AdaptiveMaxPool2d)


def _scalar(c):
    """A one-value constant as a Python number, None for anything else (MegEngine: scalars only)."""
    if isinstance(c, Tensor):
        return c.numpy().reshape(()).item() if tuple(c.shape) in ((1,), ()) else None
    return c if isinstance(c, numbers.Number) and not isinstance(c, bool) else None


def _conv_module(e):
    """The Conv2d of a module call expr that the pass can rewrite, else None."""
    if not (isinstance(e, CallMethod) and e.method == "__call__" and isinstance(e.inputs[0], ModuleNode)):
        return None
    m = e.inputs[0].owner
    # a plain conv (ConvRelu2d: positive scales); quantized / QAT convs are left alone, their weights are rounded
    if type(m) not in (M.Conv2d, M.ConvRelu2d) or not isinstance(e.inputs[0].expr, GetAttr):
        return None
    return m


def _match(e):
    """``(kind, constant, value inputs)`` of an expr the pass knows, else None (the folding stops there)."""
    if len(e.outputs) != 1 or not isinstance(e.outputs[0], TensorNode) or not e.inputs:
        return None
    if isinstance(e, CallMethod) and isinstance(e.inputs[0], ModuleNode):
        m = e.inputs[0].owner
        if _conv_module(e) is not None:
            return (_CONV_POSITIVE if type(m) is M.ConvRelu2d else _CONV), None, []
        if len(e.inputs) != 2 or isinstance(m, TracedModule):
            return None
        if isinstance(m, _POSITIVE_MODULES):
            return _POSITIVE, None, [e.inputs[1]]
        if isinstance(m, _PASS_MODULES):
            return _PASS, None, [e.inputs[1]]
        return None
    if _is_const_node(e.inputs[0]):
        return None
    if isinstance(e, CallFunction):
        if e.func is F.neg:
            return _MUL, -1, [e.inputs[0]]
        if e.func is F.conv2d:
            ok = len(e.inputs) in (2, 3) and all(_is_const_node(n) for n in e.inputs[1:])
            return (_CONV, None, []) if ok else None
        if e.func in _POSITIVE_FUNCS:
            return _POSITIVE, None, [e.inputs[0]]
        if e.func in _PASS_FUNCS:
            return _PASS, None, list(e.inputs) if e.func is F.concat else [e.inputs[0]]
        return None
    if _is_tensor_method(e, ("__mul__", "__add__")):
        if len(e.inputs) == 1:
            c = _first_const_arg(e)
        elif len(e.inputs) == 2 and _is_const_node(e.inputs[1]):
            c = _const_node_value(e.inputs[1])
        elif e.method == "__add__":
            return _PASS, None, list(e.inputs)  # ``x + y``: both scaled
        else:
            return None
        if e.method == "__add__":
            return (_ADD_CONST, c, [e.inputs[0]]) if c is not _NOT_FOUND else None
        c = _scalar(c)
        return (_MUL, c, [e.inputs[0]]) if c is not None else None
    if _is_tensor_method(e, _POSITIVE_METHODS):
        return _POSITIVE, None, [e.inputs[0]]
    if _is_tensor_method(e, _PASS_METHODS):
        return _PASS, None, [e.inputs[0]]
    return None


def _skip_exprs(g):
    """Exprs computing from attributes and constants alone (MegEngine's ``init_skip_exprs``): not scaled."""
    skip = set()
    for e in g._exprs:
        if isinstance(e, (GetAttr, Constant)) or all(n.expr in skip for n in e.inputs):
            skip.add(e)
    return skip


def _scale_messages(g, info, skip, forced):
    """MegEngine's ``before_visit_graph``: ``(msg, out, conv_msg)``; ``msg[e]`` the scale ``e``'s value inputs get
    (None: ``e`` stays as it is), ``out[e]`` the scale of its result, ``conv_msg[conv]`` what a conv absorbs.
    ``forced`` exprs are treated as unknown ops."""
    msg, out, conv_msg = {}, {}, {}

    def reset(start):
        # ``start`` and what it feeds stay as they are; past a conv the values are the conv's again (MegEngine
        # stops at every conv, ``start`` included, which leaves the users of a conv with two users scaled)
        stack, seen = [start], set()
        while stack:
            x = stack.pop()
            if x in skip or x in seen:
                continue
            seen.add(x)
            msg[x], out[x] = None, 1
            if x is not start and info[x] is not None and info[x][0] in (_CONV, _CONV_POSITIVE):
                continue
            stack.extend(u for o in x.outputs for u in o.users if u in msg)

    for e in reversed(g._exprs):
        if e in skip:
            continue
        if info[e] is None or e in forced:
            reset(e)
            continue
        kind, const, _ = info[e]
        own = const if kind == _MUL else None
        o = e.outputs[0]
        # what each user asks of this value: its scale if it scales this input, else 1 (None); a graph output
        # must keep its value (MegEngine's pass ignores that use)
        asks = [msg.get(u) if info.get(u) is not None and o in info[u][2] else None for u in o.users if u not in skip]
        if o in g.outputs:
            asks.append(None)
        if not asks:
            msg[e], out[e] = own, 1
            continue
        if any(a is None or a != asks[0] for a in asks):
            reset(e)
            msg[e], out[e] = own, 1
            continue
        total = asks[0] * (1 if own is None else own)
        if kind in (_POSITIVE, _CONV_POSITIVE) and total < 0:
            reset(e)
            continue
        if kind in (_CONV, _CONV_POSITIVE):
            msg[e], out[e] = None, 1  # (its inputs keep their values; the conv's result is scaled)
            conv_msg[e] = total
            continue
        msg[e], out[e] = total, asks[0]
    return msg, out, conv_msg


def _violations(g, info, skip, msg, out, conv_msg):
    """Exprs whose inputs do not get the scale the exprs were planned with (the producer stopped the folding after
    the plan was made, or cannot scale: a graph input, a constant), and producers of graph outputs not kept."""
    def factor(n):
        e = n.expr
        if e not in g._exprs or e in skip:
            return 1
        return conv_msg.get(e, 1) if e in conv_msg else out.get(e, 1)

    bad = set()
    for e in g._exprs:
        if e in skip:
            continue
        scaled = info[e][2] if info[e] is not None and msg.get(e) is not None else []
        for n in e.inputs:
            if isinstance(n, TensorNode) and factor(n) != (msg[e] if n in scaled else 1):
                bad.add(e)
    for n in g.outputs:
        if isinstance(n, TensorNode) and factor(n) != 1:
            bad.add(n.expr)
    return bad


def _scaled_copy(conv, s):
    new = copy.deepcopy(conv)
    new.weight = Parameter((conv.weight.numpy() * s).astype(conv.weight.dtype))
    if conv.bias is not None:
        new.bias = Parameter((conv.bias.numpy() * s).astype(conv.bias.dtype))
    return new


def _fold_conv(g, e, s, used_names):
    """MegEngine's ``fold_conv_mul``: the conv of ``e`` computes ``s`` times its old result."""
    conv = _conv_module(e)
    if conv is None:  # F.conv2d: a new call on scaled constants
        named = dict(e.named_args)
        for key in ("weight", "bias"):
            v = named.get(key)
            if v is not None:
                v = _const_node_value(v).numpy()
                named[key] = Tensor((v * s).astype(v.dtype))
        name = e.outputs[0].name
        with g.insert_exprs():
            new = F.conv2d(**named)
        g.replace_node({e.outputs[0]: new})
        g.compile()
        new.name = name
        return
    mnode = e.inputs[0]
    self_node, attr = mnode.expr.inputs[0], mnode.expr.name
    if len(mnode.users) == 1:
        _set_attr(self_node.owner, attr, _scaled_copy(conv, s))
        return
    # the module is called elsewhere too: this call gets a scaled copy under a new name (as MegEngine's)
    used_names[mnode.qualname] += 1
    new_attr = f"{attr}_{used_names[mnode.qualname]}"
    logger.warning(f"{mnode.qualname} is used {len(mnode.users)} times and its name will be reset to "
                   f"{g.qualname}.{new_attr}")
    _set_attr(self_node.owner, new_attr, _scaled_copy(conv, s))
    with g.insert_exprs(mnode.expr):
        new_node = self_node
        for part in new_attr.split("."):
            new_node = getattr(new_node, part)
    e.replace_inputs({mnode: new_node})


def _apply(g, info, msg, conv_msg, used_names):
    """MegEngine's ``run_transform``: convs scaled, constant multiplications removed, added constants scaled."""
    for e in reversed(list(g._exprs)):
        if e not in g._exprs or info.get(e) is None:
            continue
        kind, const, _ = info[e]
        if e in conv_msg:
            _fold_conv(g, e, conv_msg[e], used_names)
        elif msg.get(e) is None:
            continue
        elif kind == _MUL:
            g.replace_node({e.outputs[0]: e.inputs[0]})
            g.compile()
        elif kind == _ADD_CONST:
            name = e.outputs[0].name
            with g.insert_exprs():
                new = e.inputs[0] + const * msg[e]
            g.replace_node({e.outputs[0]: new})
            g.compile()
            new.name = name


def backward_fold_scale(module):
    """Fold constant scalings backwards into conv weights (in place); see the module docstring.

    Args:
        module: a TracedModule (its graphs and conv attributes are rewritten).

    Returns:
        ``module``.
    """
    used_names = defaultdict(int)
    for g in _graphs(module):
        for _ in range(100):
            if not _norm_elemwise(g):
                break
        skip = _skip_exprs(g)
        info = {e: (None if e in skip else _match(e)) for e in g._exprs}
        forced = set()
        while True:
            msg, out, conv_msg = _scale_messages(g, info, skip, forced)
            bad = _violations(g, info, skip, msg, out, conv_msg) - forced
            if not bad:  # (a forced expr stays as it is, so its inputs are no longer asked to scale)
                break
            forced |= bad
        _apply(g, info, msg, conv_msg, used_names)
        g.compile()
    module._update_ref()
    return module
