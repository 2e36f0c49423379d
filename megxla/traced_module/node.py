"""Graph values: :class:`TensorNode` (a tensor) and :class:`ModuleNode` (a module) of an InternalGraph.

A node is produced by exactly one expr (``node.expr``) and read by its ``users``. Inside
``graph.insert_exprs()`` nodes behave like the values they stand for: ``node + 1``, ``F.relu(node)``,
``self_node.conv(node)`` record new exprs instead of computing.
"""
from __future__ import annotations

import itertools
import weakref
from typing import List

__all__ = ["Node", "ModuleNode", "TensorNode"]


class _Numbered:
    """What nodes and exprs share: MegEngine's class-level id counter (graphs keep their own totals) and a weak
    reference to the graph holding the object."""

    _top_graph = None

    @property
    def top_graph(self):
        """The graph holding this node or expr (None when detached)."""
        g = self._top_graph
        return g() if g is not None else None

    @top_graph.setter
    def top_graph(self, graph):
        self._top_graph = None if graph is None else weakref.ref(graph)

    @classmethod
    def _set_next_id(cls, i: int):
        cls._id_counter = itertools.count(i)

    @classmethod
    def _get_next_id(cls) -> int:
        i = next(cls._id_counter)
        cls._id_counter = itertools.count(i)
        return i


class Node(_Numbered):
    """A value of an :class:`~.InternalGraph` (base of :class:`ModuleNode` and :class:`TensorNode`)."""

    _id_counter = itertools.count(0)

    def __init__(self, expr, name: str = None, qualname: str = None):
        self.expr = expr
        self.users: List = []
        self._id = next(Node._id_counter)
        self._name = name
        self._qualname = qualname
        self._top_graph = None
        self.actual_node = []  # MegEngine keeps the caller's nodes for a sub-graph node here; unused by megxla

    # ---- naming -------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The node's name, unique in its graph; assign to rename (a name in use raises AssertionError)."""
        return self._name

    @name.setter
    def name(self, new_name: str):
        graph = self.top_graph
        if graph is None:
            self._name = new_name
            return
        assert new_name not in graph._namespace.used_names or graph._namespace.used_names[new_name] is self, \
            f"The name({new_name}) is already in use. Please try a different one again."  # (MegEngine's words)
        graph._namespace.unassociate(self)
        self._name = graph._namespace.create_unique_name(new_name, self)

    @property
    def qualname(self) -> str:
        """Where the value comes from: ``Net.sub.conv.[out]`` for a tensor, ``Net.sub.conv`` for a module."""
        return self._qualname

    @qualname.setter
    def qualname(self, value):
        self._qualname = value

    def _attach_as_output(self):
        """Append this node to its expr's outputs (nodes made by hand, as MegEngine's loaders do)."""
        if self.expr is not None and self not in self.expr.outputs:
            self.expr.outputs.append(self)
        return self

    # the spec str()/repr() use; a graph printed with ``"{:i}".format(graph)`` sets it while it prints
    _format_spec = ""

    def __repr__(self):
        return self.__format__(Node._format_spec)

    __str__ = __repr__

    def __format__(self, spec):
        """MegEngine's node formats: ``"p"`` prefixes the graph name (``ResNet_conv1``), ``"i"`` the id
        (``%2_conv1``); both combine (``"ip"``)."""
        spec = spec or Node._format_spec
        if spec in ("i", "p", "ip", "pi"):
            name = self._name or ""
            if "p" in spec:
                graph = self.top_graph
                name = f"{graph._name}_{name}" if graph is not None else name
            if "i" in spec:
                name = f"%{self._id}_{name}"
            return name
        return self._name if self._name else f"%{self._id}"

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_top_graph"] = None  # weak references do not pickle; the graph sets them again on load
        return d

    def __setstate__(self, state):
        from ._megengine_layout import is_megengine_state, node_state
        if is_megengine_state(state):  # a TracedModule pickled by MegEngine
            state = node_state(self, state)
        self.__dict__.update(state)


class NodeMixin:
    """MegEngine's mix-in of traced values; its files list it among a module leaf's types (megxla keeps
    nodes apart from values, so nothing derives from it)."""


class ModuleNode(Node):
    """A module of the graph (the ``self`` input, or a sub-module read by ``GetAttr``).

    Attributes:
        module_type: the class of the module.
        owner: the module object (resolved from the graph's top module; not pickled).
    """

    def __init__(self, expr, name=None, qualname=None, module_type=None):
        super().__init__(expr, name, qualname)
        self.module_type = module_type
        self._owner = None

    @property
    def owner(self):
        # NOTE: a sub-module read by GetAttr is looked up in its parent module now, so the owner is the layer
        # the module holds today: quantize_qat and `tm.fc = M.Linear(...)` swap layers after tracing, and the
        # weak reference to the traced layer is then dead (or a stale layer). The reference remains for the
        # `self` input, constants and an attribute the parent no longer holds as a Module.
        from ..module.module import Module
        from .expr import GetAttr, get_subattr  # (expr imports this module)
        expr = self.expr
        if isinstance(expr, GetAttr) and expr.inputs:
            parent = expr.inputs[0].owner
            try:
                live = get_subattr(parent, expr.name) if parent is not None else None
            except AttributeError:
                live = None
            if isinstance(live, Module):
                return live
        o = self._owner
        return o() if o is not None else None

    @owner.setter
    def owner(self, module):
        self._owner = None if module is None else weakref.ref(module)
        if module is not None and not isinstance(self.module_type, type):
            self.module_type = type(module)

    def __getstate__(self):
        d = super().__getstate__()
        d["_owner"] = None
        mt = self.module_type
        if isinstance(mt, type):  # by name: a class local to a function (a test's module) need not pickle
            d["module_type"] = (mt.__module__, mt.__qualname__)
        return d

    def __setstate__(self, state):
        super().__setstate__(state)
        mt = self.module_type
        if isinstance(mt, tuple):
            try:
                import importlib
                obj = importlib.import_module(mt[0])
                for part in mt[1].split("."):
                    obj = getattr(obj, part)
                self.module_type = obj
            except Exception:  # not importable (a local class): the type is set from the owner when attached
                pass

    def __getattr__(self, name):
        # only reached for attributes a node does not have: inside insert_exprs() it reads the module's
        # attribute as a GetAttr expr (a sub-module or a tensor), like ``self.conv`` in a forward
        if name.startswith("_"):
            raise AttributeError(name)
        from . import surgery
        return surgery.node_getattr(self, name)

    def __call__(self, *args, **kwargs):
        from . import surgery
        return surgery.node_module_call(self, args, kwargs)


class TensorNode(Node):
    """A tensor of the graph.

    Attributes:
        shape: the shape seen when it was traced (None when unknown).
        dtype: the dtype seen when it was traced (None when unknown).
        qparams: its quantization parameters when it was traced (None when not quantized).
        device: the device its tensor was on when it was traced (None when unknown).
    """

    device = None  # (nodes unpickled from files written before it was kept)

    def __init__(self, expr, name=None, qualname=None, shape=None, dtype=None, qparams=None, device=None):
        super().__init__(expr, name, qualname)
        self.shape = shape
        self.dtype = dtype
        self.qparams = qparams
        self.device = device
        self.value = None  # MegEngine's field; megxla never keeps traced values in the graph

    @property
    def ndim(self):
        return None if self.shape is None else len(self.shape)


def _node_method(name):
    def method(self, *args, **kwargs):
        from . import surgery
        return surgery.node_tensor_method(self, name, args, kwargs)

    method.__name__ = name
    return method


# Tensor methods a TensorNode forwards to the tracer inside insert_exprs() (the same set traced on Tensors)
NODE_METHODS = (
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__",
    "__neg__", "__pos__", "__abs__", "__invert__", "__and__", "__rand__", "__or__", "__ror__", "__xor__",
    "__rxor__", "__lshift__", "__rshift__", "__lt__", "__le__", "__gt__", "__ge__", "__getitem__",
    "astype", "reshape", "transpose", "flatten", "sum", "mean", "prod", "max", "min", "var", "_broadcast",
    "detach",
)
for _m in NODE_METHODS:
    setattr(TensorNode, _m, _node_method(_m))
