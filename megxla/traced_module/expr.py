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
import importlib
import itertools
import weakref

from .node import ModuleNode, Node, TensorNode
from .pytree import tree_flatten, tree_unflatten

__all__ = ["Expr", "Input", "GetAttr", "CallMethod", "CallFunction", "Apply", "Constant"]


def get_subattr(obj, target: str):
    """``obj.a.b.c`` for ``target="a.b.c"`` (an empty target is ``obj`` itself)."""
    for part in target.split(".") if target else ():
        obj = getattr(obj, part)
    return obj


def _is_node(x):
    return isinstance(x, Node)


class Expr(abc.ABC):
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

    @classmethod
    def _set_next_id(cls, i: int):
        cls._id_counter = itertools.count(i)

    @classmethod
    def _get_next_id(cls) -> int:
        i = next(cls._id_counter)
        cls._id_counter = itertools.count(i)
        return i

    @property
    def top_graph(self):
        """The graph holding this expr."""
        g = self._top_graph
        return g() if g is not None else None

    @top_graph.setter
    def top_graph(self, graph):
        self._top_graph = None if graph is None else weakref.ref(graph)

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
        args, kwargs = self._call_args()
        parts = [repr(a) if not isinstance(a, Node) else str(a) for a in args]
        parts += [f"{k}={v}" for k, v in kwargs.items()]
        return ", ".join(parts) + ", " if parts else ""

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_top_graph"] = None
        return d

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


class CallFunction(Expr):
    """``func(*args, **kwargs)`` for a functional API function or a :func:`~.wrap` ped user function."""

    def __init__(self, func):
        super().__init__()
        self.func = func

    @property
    def named_args(self):
        """The arguments by parameter name (``{"inp": node, "weight": node, ...}``), defaults filled in."""
        import inspect
        bound = inspect.signature(self.func).bind(*self.args, **self.kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def interpret(self, *values):
        from . import tracer
        args, kwargs = self.unflatten_args(values)
        return self._flatten_result(tracer.callable_for(self.func)(*args, **kwargs))

    def __repr__(self):
        mod, qual = _func_ref(self.func)
        short = f"F.{qual}" if mod == "megxla.functional" else f"{mod.rsplit('.', 1)[-1]}.{qual}" if mod else qual
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
        self.__dict__.update(state)


class Apply(Expr):
    """A primitive op (``opdef``) dispatched directly on tensors, outside any traced function or method."""

    def __init__(self, opdef):
        super().__init__()
        self.opdef = opdef

    def interpret(self, *values):
        from ..core._dispatch import apply
        out = apply(self.opdef, *values)
        return list(out) if isinstance(out, tuple) else [out]

    def __repr__(self):
        name = getattr(self.opdef, "name", type(self.opdef).__name__)
        return f"%{self._id}:\t{self._outs_str()} = {name}({', '.join(str(n) for n in self.inputs)})"


class Constant(Expr):
    """A value captured while tracing (a tensor created outside the traced code, a module not reachable as an
    attribute); interpreting it returns the value."""

    def __init__(self, value, name=None):
        super().__init__()
        self.value = value
        self.name = name

    def interpret(self):
        return (self.value,)

    def __repr__(self):
        v = self.value
        from ..core._tensor import Tensor
        if isinstance(v, Tensor):
            text = f"Tensor(shape={tuple(v.shape)}, dtype={v.dtype})"
        else:
            text = type(v).__name__
        return f"%{self._id}:\t{self._outs_str()} = Constant({text})"
