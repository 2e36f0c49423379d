"""The operations of an InternalGraph: each :class:`Expr` reads ``inputs`` nodes and writes ``outputs`` nodes.

Kinds (MegEngine's): :class:`Input` (a graph argument), :class:`GetAttr` (read a module attribute, a sub-module
or a tensor), :class:`CallMethod` (a method call: a module's ``__call__`` or a Tensor method such as
``__add__``), :class:`CallFunction` (a function such as ``F.relu``), :class:`Apply` (a primitive op dispatched
directly) and :class:`Constant` (a value captured while tracing).

A call's arguments are kept as a :class:`~.pytree.TreeDef` (``arg_def``) whose leaf positions are the tensor
inputs; ``expr.args`` / ``expr.kwargs`` show them with the nodes in place.
"""
from __future__ import annotations

import abc
import collections.abc
import importlib
import itertools

from .node import ModuleNode, Node, TensorNode, _Numbered
from .pytree import tree_flatten, tree_unflatten

__all__ = ["Expr", "Input", "GetAttr", "CallMethod", "CallFunction", "Apply", "Constant"]


def get_subattr(obj, target: str):
    """``obj.a.b.c`` for ``target="a.b.c"`` (an empty target is ``obj`` itself)."""
    for part in target.split(".") if target else ():
        obj = getattr(obj, part)
    return obj


def _is_node(x):
    return isinstance(x, Node)


class Expr(_Numbered, abc.ABC):
    """Base class of the graph's operations.

    Attributes:
        inputs: the nodes read, in order.
        outputs: the nodes written, in order.
    """

    _id_counter = itertools.count(0)

    def __init__(self):
        self._id = next(Expr._id_counter)
        self.inputs = []
        self.outputs = []
        self.arg_def = None  # TreeDef of (args, kwargs) of a call; leaves are inputs[_first_arg:]
        self.out_def = None  # TreeDef of the call's result; leaves are outputs
        self._top_graph = None
        self._disable_remove = False

    _first_arg = 0

    def enable_remove(self):
        """Let ``graph.compile()`` / ``eliminate_dead_code()`` remove this expr when no output needs it (the
        default)."""
        self._disable_remove = False

    def disable_remove(self):
        """Keep this expr through ``graph.compile()`` / ``eliminate_dead_code()`` though no output needs it (a
        side effect the pass must not drop)."""
        self._disable_remove = True

    @property
    def const_val(self):
        """The call's non-tensor arguments as MegEngine lists them: ``[(index, value)]``, the index among all the
        leaves of ``(args, kwargs)`` (a CallMethod's object first)."""
        if self.arg_def is None:
            return []
        from .pytree import is_value  # (constants are leaves too)
        leaves, _ = tree_flatten((self.args, self.kwargs), is_leaf=is_value)
        return [(i, v) for i, v in enumerate(leaves) if not _is_node(v)]

    def replace_inputs(self, repl_dict):
        """Read ``new`` wherever this expr reads ``old``, for each ``{old: new}`` of ``repl_dict``.

        Args:
            repl_dict: ``{old_node: new_node}``; the new node must be computed before this expr.
        """
        for old, new in repl_dict.items():
            assert type(old) is type(new), f"cannot replace {type(old).__name__} {old} by {type(new).__name__}"
            if old not in self.inputs:
                continue
            self.inputs[:] = [new if n is old else n for n in self.inputs]
            while self in old.users:
                old.users.remove(self)
            new.users.append(self)

    def add_inputs(self, nodes):
        for n in nodes:
            self.inputs.append(n)
            n.users.append(self)

    def _call_args(self):
        """``(args, kwargs)`` of the call without the callee, nodes where tensors were passed."""
        if self.arg_def is None:
            return tuple(self.inputs[self._first_arg:]), {}
        return tree_unflatten(self.arg_def, self.inputs[self._first_arg:])

    @property
    def args(self):
        """The positional arguments, with nodes where tensors were passed (for a CallMethod the object the
        method is called on comes first, as MegEngine's)."""
        return tuple(self.inputs[:self._first_arg]) + tuple(self._call_args()[0])

    @property
    def kwargs(self):
        """The keyword arguments, with nodes where tensors were passed."""
        return self._call_args()[1]

    def _get_func(self):
        """The callable the expr runs (for argument names)."""
        return None

    @property
    def named_args(self):
        """The arguments by parameter name (``{"inp": node, "weight": node, ...}``), defaults filled in."""
        import inspect
        func = self._get_func()
        if func is None:
            raise TypeError(f"{type(self).__name__} exprs have no named arguments")
        bound = inspect.signature(func).bind(*self.args, **self.kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def set_args_kwargs(self, *args, **kwargs):
        """Replace the call's arguments (nodes or constants; a CallMethod's first argument is its object), e.g.
        ``expr.set_args_kwargs(node, "float16")`` for ``node.astype("float16")``."""
        from .tracer import convert_kwargs_to_args
        func = self._get_func()
        if func is not None:
            try:
                args, kwargs = convert_kwargs_to_args(func, args, kwargs)
            except TypeError:  # a builtin or C callable without a usable signature: keep what was given
                pass
        head = list(args[:self._first_arg])
        leaves, arg_def = tree_flatten((tuple(args[self._first_arg:]), dict(kwargs)), is_leaf=_is_node)
        for n in self.inputs:
            while self in n.users:
                n.users.remove(self)
        self.inputs = []
        self.add_inputs(head + leaves)
        self.arg_def = arg_def

    def set_arg(self, name, val):
        """Replace the argument called ``name`` (by the callee's signature) with ``val``."""
        import inspect
        func = self._get_func()
        args, kwargs = list(self.args), dict(self.kwargs)
        if name in kwargs:
            kwargs[name] = val
        else:
            spec = inspect.getfullargspec(inspect.unwrap(func))
            if name in spec.args:
                i = spec.args.index(name)
                if i < len(args):
                    args[i] = val
                else:
                    kwargs[name] = val
            elif name == spec.varargs:
                # the ``*args`` as a whole, as MegEngine's (``named_args`` lists them so: reshape's ``args``)
                args = args[:len(spec.args)] + list(val if isinstance(val, collections.abc.Sequence) else (val,))
            else:
                # MegEngine's assertion (and its words); a ``**kwargs`` function takes any keyword
                assert spec.varkw is not None, f"func {func} does't have argument named {name}"
                kwargs[name] = val
        self.set_args_kwargs(*args, **kwargs)

    @property
    def return_val(self):
        """The outputs in the structure the call returns; assign nodes (in any structure) to replace them."""
        if self.out_def is None:
            return tuple(self.outputs)
        return tree_unflatten(self.out_def, self.outputs)

    @return_val.setter
    def return_val(self, new_outputs):
        outs, out_def = tree_flatten(new_outputs, is_leaf=_is_node)
        assert all(isinstance(o, Node) for o in outs), "an expr's return values must be nodes"
        assert all(o.expr in (None, self) for o in outs), f"some nodes are produced by another expr than {self}"
        for o in outs:
            o.expr = self
        self.outputs = outs
        self.out_def = out_def

    def unflatten_args(self, values):
        """``(args, kwargs)`` of this call with ``values`` (one per input after the callee) at the leaves."""
        return tree_unflatten(self.arg_def, values)

    @abc.abstractmethod
    def interpret(self, *values):
        """Run the expr on input values (one per node of ``inputs``); returns the output values, in order."""

    def _flatten_result(self, result):
        leaves, _ = tree_flatten(result)
        return leaves

    def _outs_str(self):
        return ", ".join(str(n) for n in self.outputs)

    def _args_str(self):
        # MegEngine's spelling: ", ".join([args, kwargs]), values by str() ("x, 7, None, " / "x, eps=1e-05")
        args, kwargs = self._call_args()
        return ", ".join([", ".join(str(a) for a in args), ", ".join(f"{k}={v}" for k, v in kwargs.items())])

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_top_graph"] = None
        return d

    def __setstate__(self, state):
        from ._megengine_layout import expr_state, is_megengine_state
        if is_megengine_state(state):  # a TracedModule pickled by MegEngine
            state = expr_state(self, state)
        self.__dict__.update(state)

    def _copy_attrs(self, other):
        """Copy the kind-specific fields (not ids/nodes) of ``other`` (used by flatten and passes)."""
        for k, v in other.__dict__.items():
            if k not in ("_id", "inputs", "outputs", "_top_graph"):
                setattr(self, k, v)


class Input(Expr):
    """A graph argument; its output node is one of ``graph.inputs``."""

    def __init__(self, name=None):
        super().__init__()
        self.name = name

    def interpret(self, *values):
        raise RuntimeError("Input exprs are bound by the graph, not interpreted")

    def __repr__(self):
        return f"%{self._id}:\t{self._outs_str()} = Input()"


class GetAttr(Expr):
    """``getattr(module, name)`` where ``name`` may be dotted (``"block0.conv"``); the output is a ModuleNode
    for a sub-module, a TensorNode for a parameter or buffer."""

    def __init__(self, module_node, name):
        super().__init__()
        self.name = name
        self.add_inputs([module_node])

    def interpret(self, module):
        return (get_subattr(module, self.name),)

    def __repr__(self):
        out = self.outputs[0] if self.outputs else None
        kind = ""
        if isinstance(out, ModuleNode):
            from .tracer import BUILTIN_MODULES
            # MegEngine's spelling: a builtin layer by its class, a traced sub-module as "Module"
            kind = out.module_type.__name__ if out.module_type in BUILTIN_MODULES else "Module"
        elif isinstance(out, TensorNode):
            kind = "Tensor"
        return f'%{self._id}:\t{self._outs_str()} = getattr({self.inputs[0]}, "{self.name}") -> ({kind})'


class CallMethod(Expr):
    """``inputs[0].<method>(*args, **kwargs)``: a module call (``method == "__call__"``) or a Tensor method."""

    _first_arg = 1

    def __init__(self, obj_node, method="__call__"):
        super().__init__()
        self.method = method
        self.add_inputs([obj_node])

    def _get_func(self):
        obj = self.inputs[0]
        if self.method == "__call__" and isinstance(obj, ModuleNode):
            mt = obj.owner.__class__ if obj.owner is not None else obj.module_type
            from .traced_module import TracedModule
            if isinstance(mt, type) and issubclass(mt, TracedModule):
                return None  # (*args, **kwargs): nothing to normalize against
            return getattr(mt, "forward", None) if isinstance(mt, type) else None
        from ..core._tensor import Tensor
        return getattr(Tensor, self.method, None)

    @property
    def graph(self):
        """The sub-graph a call of a traced sub-module runs (None for builtin modules and tensor methods)."""
        if self.method != "__call__" or not isinstance(self.inputs[0], ModuleNode):
            return None
        owner = self.inputs[0].owner
        gmap = getattr(owner, "argdef_graph_map", None)
        return gmap.get(self.arg_def) if gmap else None

    def interpret(self, obj, *values):
        args, kwargs = self.unflatten_args(values)
        if self.method == "__call__":
            result = obj(*args, **kwargs)
        else:
            result = getattr(obj, self.method)(*args, **kwargs)
            if result is None:  # an in-place method (__setitem__): its output is the updated tensor
                result = obj
        return self._flatten_result(result)

    def __repr__(self):
        callee = str(self.inputs[0]) if self.method == "__call__" else f"{self.inputs[0]}.{self.method}"
        return f"%{self._id}:\t{self._outs_str()} = {callee}({self._args_str()})"


def _func_ref(func):
    from .tracer import func_ref
    return func_ref(func)


def _resolve_func(mod, name):
    obj = importlib.import_module(mod)
    for part in name.split("."):
        obj = getattr(obj, part)
    return getattr(obj, "_tm_original", obj)  # a wrap()ped or traced function: the expr holds the original


_NN = ("gelu hsigmoid hswish indexing_one_hot logsigmoid logsumexp relu relu6 sigmoid silu softplus").split()
_ELEMWISE = ("abs acos acosh add asin asinh atan atanh ceil cos cosh div equal exp expm1 floor floor_div greater "
             "greater_equal left_shift less less_equal log log1p logaddexp logical_and logical_not logical_or "
             "logical_xor maximum minimum mod mul neg not_equal pow right_shift round sin sinh sqrt square sub tan "
             "tanh").split()
# megengine.functional's function -> the module MegEngine defines it in, where megxla's differs
_MGE_FUNC_MODULE = {**{n: "nn" for n in _NN}, **{n: "elemwise" for n in _ELEMWISE},
                    "isinf": "math", "isnan": "math", "sign": "math", "topk_accuracy": "metric"}


class CallFunction(Expr):
    """``func(*args, **kwargs)`` for a functional API function or a :func:`~.wrap` ped user function."""

    def __init__(self, func):
        super().__init__()
        self.func = func

    def _get_func(self):
        return self.func

    def interpret(self, *values):
        from . import tracer
        args, kwargs = self.unflatten_args(values)
        return self._flatten_result(tracer.callable_for(self.func)(*args, **kwargs))

    def __repr__(self):
        mod, qual = _func_ref(self.func)
        if mod.startswith("megxla.functional"):
            # MegEngine prints the function's module (``nn.relu``, ``tensor.concat``): its own module names,
            # which differ from megxla's file layout for the functions below
            name = qual.rsplit(".", 1)[-1]
            own = getattr(self.func, "__module__", None) or mod
            short = f"{_MGE_FUNC_MODULE.get(name, own.rsplit('.', 1)[-1])}.{name}"
        else:
            short = f"{mod.rsplit('.', 1)[-1]}.{qual}" if mod else qual
        return f"%{self._id}:\t{self._outs_str()} = {short}({self._args_str()})"

    def __getstate__(self):
        d = super().__getstate__()
        mod, qual = _func_ref(self.func)
        try:
            if _resolve_func(mod, qual) is self.func:  # save by reference (wrapped functions included)
                d["func"] = ("__tm_func_ref__", mod, qual)
        except Exception:  # not importable by name: pickle the object itself (fails for lambdas, as it should)
            pass
        return d

    def __setstate__(self, state):
        f = state.get("func")
        if isinstance(f, tuple) and len(f) == 3 and f[0] == "__tm_func_ref__":
            state["func"] = _resolve_func(f[1], f[2])
        super().__setstate__(state)


def _opdef_name(op):
    """How an op is shown: an Elemwise-style descriptor by its mode (``ADD``), others by type, registry ops by
    name."""
    mode = getattr(op, "mode", None)
    if isinstance(mode, str) and hasattr(op, "_params"):
        return mode.upper()
    return getattr(op, "name", None) if not hasattr(op, "_params") else type(op).__name__


class Apply(Expr):
    """A primitive op (``opdef``) dispatched directly on tensors, outside any traced function or method."""

    def __init__(self, opdef):
        super().__init__()
        self.opdef = opdef

    def interpret(self, *values):
        from ..core._dispatch import apply
        from ..core.ops.builtin import OpDef
        if isinstance(self.opdef, OpDef):  # a builtin descriptor (``core2.apply(Elemwise(mode="add"), ...)``)
            return list(self.opdef._apply(tuple(values)))
        out = apply(self.opdef, *values)
        return list(out) if isinstance(out, tuple) else [out]

    @property
    def opdef_state(self):
        """A builtin descriptor's parameters plus ``"opdef_type"`` (edit it in a loader; see serialization)."""
        st = self.__dict__.get("_opdef_state")
        if st is None:
            op = self.opdef
            st = {k: getattr(op, k) for k in getattr(op, "_params", ())}
            st["opdef_type"] = type(op)
            self.__dict__["_opdef_state"] = st
        return st

    def __repr__(self):
        name = _opdef_name(self.opdef)
        return f"%{self._id}:\t{self._outs_str()} = {name}({', '.join(str(n) for n in self.inputs)})"


class Constant(Expr):
    """A value captured while tracing (a tensor created outside the traced code, a module not reachable as an
    attribute); interpreting it returns the value."""

    def __init__(self, value, name=None):
        super().__init__()
        self.value = value
        self.name = name
        from ..core._tensor import Tensor
        from ..module.module import Module
        # the output node exists from the start (MegEngine's constructor): graphs adopt and name it
        if isinstance(value, Module):
            ModuleNode(self, name, module_type=type(value))._attach_as_output()
            self.outputs[0].owner = value
        elif isinstance(value, Tensor):
            TensorNode(self, name, shape=tuple(value.shape), dtype=value.dtype,
                       qparams=getattr(value, "_qparams", None))._attach_as_output()

    def interpret(self):
        return (self.value,)

    def __repr__(self):
        # MegEngine's spelling: the constant's name (empty unless given) and its node's kind
        out = self.outputs[0] if self.outputs else None
        kind = "Module" if isinstance(out, ModuleNode) else "Tensor" if isinstance(out, TensorNode) \
            else type(self.value).__name__
        return f"%{self._id}:\t{self._outs_str()} = Constant({self.name or ''}) -> ({kind})"
