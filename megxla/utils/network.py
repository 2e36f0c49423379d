"""``megengine.utils.network``: a graph as a :class:`Network` -- built by hand, or loaded from a dump -- to walk.

A network built by hand starts empty: :meth:`Network.make_const` gives it variables
(:class:`~megxla.utils.network_node.VarNode`, Tensors), and every functional call or Tensor operator on them is
recorded as an operator of the network, whose results are its variables too. megxla computes each op as it is
applied (through the one dispatch point, ``apply``): the values are there as the graph is built, where MegEngine
computes them when the graph runs (docs/differences.md).

:meth:`Network.load` reads what ``trace.dump`` writes (see :mod:`megxla.core.tensor.megbrain_graph`); a loaded
network is read-only: megxla's dump is a compiled XLA module, so editing operators and dumping again is done by
editing the traced function and tracing it again.

Example:
    >>> import io, numpy as np, megxla as mge
    >>> net = Network()
    >>> x = net.make_const(np.array([1.0, 2.0], "float32"), name="x")
    >>> y = mge.functional.exp(x) + x
    >>> net.add_output(y)
    >>> [op.type for op in net.all_oprs], y.numpy().round(3)
    (['ImmutableTensor', 'Elemwise', 'Elemwise'], array([3.718, 9.389], dtype=float32))

    >>> from megxla.jit import trace
    >>> f = trace(lambda x: x * 2 + 1, symbolic=True, capture_as_const=True)
    >>> _ = f(mge.Tensor([1.0]))
    >>> buf = io.BytesIO(); _ = f.dump(buf); _ = buf.seek(0)
    >>> net = Network.load(buf)
    >>> [op.type for op in net.all_oprs]
    ['Host2DeviceCopy', 'ImmutableTensor', 'Elemwise', 'ImmutableTensor', 'Elemwise']
    >>> net.data_providers_filter.as_count()
    1
"""
from __future__ import annotations

import fnmatch
import re
from typing import List

from ..core import _registry
from ..core._dispatch import OpError
from ..core._tensor import Tensor
from ..core._trace_option import set_symbolic_shape  # noqa: F401  (MegEngine's network module exports it)
from ..core.tensor.megbrain_graph import load_graph
from ..jit._dump import opr_type
from .comp_graph_tools import get_oprs_seq
from .network_node import OpNode, VarNode, _alias, _new_var

__all__ = ["Network", "NodeFilter"]


def _graph_of(op, inputs):
    """The hand-built Network whose variables are among ``inputs`` (``apply`` asks before computing ``op``; ``op``
    may be a function's name, see ``core._registry.graph_of``)."""
    net = None
    for t in inputs:
        if type(t) is VarNode:
            n = t._net
            if n is not net and n is not None:
                if net is not None:
                    desc = ", ".join(f"{tuple(x.shape)}:{x.dtype}" + (f" of {x._net!r}" if type(x) is VarNode
                                                                       else "") for x in inputs)
                    what = op if isinstance(op, str) else repr(op)
                    raise OpError(f"{what}: inputs ({desc}) are variables of two different Networks; an operator's "
                                  f"inputs must be variables of one network (or Tensors, which become its constants)")
                net = n
    return net


class _Compiled:
    """``graph.compile(outputs)``: ``execute()`` gives the OutputNodes of ``outputs`` their variables' values."""

    def __init__(self, graph, outputs):
        self._graph, self._outputs = graph, outputs

    def execute(self):
        for var in self._outputs:
            for node in self._graph._output_nodes.get(var.id, ()):
                node._value = var._value()
        return self


class _BuiltGraph:
    """The graph of a hand-built :class:`Network` (``net.graph``, ``var.graph``), MegEngine's ComputingGraph for
    reading values: ``o = OutputNode(var); var.graph.compile(o.outputs).execute(); o.get_value()``. The values are
    computed already (as the network was built); executing hands them to the output nodes."""

    def __init__(self, network):
        self.network = network
        self._output_nodes = {}  # var id -> the OutputNodes reading it (megbrain_graph.OutputNode fills it)

    def compile(self, outputs):
        outputs = list(outputs)
        for v in outputs:
            if type(v) is not VarNode or v._net is not self.network:
                raise TypeError(f"graph.compile: {v!r} is not a variable of this network")
        return _Compiled(self, outputs)


class Network:
    """A graph's operators and variables: built by hand (:meth:`make_const`, then ops on its variables) or loaded
    from a dump (:meth:`load`). See the module docstring."""

    def __init__(self):
        self.graph = _BuiltGraph(self)
        self.input_vars: List[VarNode] = []
        self.output_vars: List[VarNode] = []
        self._names = {}  # base name -> how many operators took it (unique names: "ADD", "ADD_1", ...)
        self._consts = {}  # value id of a Tensor an op read -> its ImmutableTensor variable

    @classmethod
    def load(cls, model_path, outspec: List[str] = None) -> "Network":
        """Load a graph written by ``trace.dump``.

        Args:
            model_path: a path or a binary file object.
            outspec: names of the variables to use as outputs (default: the dump's outputs).
        """
        res = load_graph(model_path)
        net = cls()
        net.graph = res.graph
        outs = res.output_vars_list
        if outspec is not None:
            by_name = {v.name: v for v in res.graph.vars.values()}
            missing = [n for n in outspec if n not in by_name]
            if missing:
                raise ValueError(f"Network.load: no variable named {missing} in this graph")
            outs = [by_name[n] for n in outspec]
        net.output_vars = list(outs)
        used = {op.id for op in net.all_oprs}
        net.input_vars = [v for v in res.graph.inputs if v.owner.id in used]
        return net

    # ---- building -------------------------------------------------------------------------------------------
    def make_const(self, data, name=None, device=None) -> VarNode:
        """A constant of the network: an ``ImmutableTensor`` operator and its output variable.

        Args:
            data: the value (what ``Tensor`` takes; float64 becomes float32, int64 int32, as MegEngine's).
            name: the variable's name (default ``"ImmutableTensor"``, made unique in the network).
            device: the device it is on.

        Example:
            >>> import numpy as np
            >>> net = Network()
            >>> c = net.make_const([1.0, 2.0], name="c")
            >>> c.name, c.owner.type, (c * c).numpy()
            ('c', 'ImmutableTensor', array([1., 4.], dtype=float32))
        """
        if isinstance(data, Tensor):  # (its value: a Tensor's copy would be an operator of another graph)
            data = data.numpy()
        return self._constant(Tensor(data, device=device), name)

    def _constant(self, tensor, name=None):
        """The ImmutableTensor variable holding ``tensor``'s value (one per value an op of the network read)."""
        c = self._consts.get(tensor._vid)
        if c is not None and c._vid == tensor._vid and name is None:
            return c
        opr = OpNode()
        opr.type, opr.name = "ImmutableTensor", self._unique(name or "ImmutableTensor")
        var = _new_var(self, tensor, opr, opr.name)
        opr.outputs = [var]
        if name is None:
            self._consts[tensor._vid] = var
        if _registry.GRAPH_BUILDER[0] is None:  # (the first variable of any network: apply starts asking)
            _registry.register_graph_builder(_graph_of)
        return var

    def _unique(self, base):
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def _applied(self, op, inputs, outputs):
        """Record ``op`` on ``inputs`` (some of them this network's variables) and make its ``outputs`` (the
        Tensors ``apply`` computed) variables of the network. Called by ``apply``."""
        ins = [t if type(t) is VarNode and t._net is self else self._constant(t) for t in inputs]
        opr = OpNode()
        opr.type, base = opr_type(op)
        opr.name, opr.op = self._unique(base), op
        opr.params = dict(op.params) if op.params else {}
        if opr.type == "Elemwise":
            opr.params.setdefault("mode", base)
        opr.inputs = ins
        for v in ins:
            if not any(u is opr for u in v.users):
                v.users.append(opr)
        for i, o in enumerate(outputs):
            # NOTE: the result object itself becomes the variable (its class, not a copy): a GradManager's tape
            # and an auto-jit cluster's pending value already refer to it
            o.__class__ = VarNode
            o._net, o._owner, o._users = self, opr, []
            o._var_id = None
            o._name = opr.name if len(outputs) == 1 else f"{opr.name}:{i}"
        opr.outputs = list(outputs)

    def _rebinding(self, var, other, reset):
        """Rebind ``var`` (a variable of this network) to ``other``'s value: ``var`` becomes another object for
        ``other``'s variable; where the graph held ``var``, a new object keeps its old value."""
        if not isinstance(other, Tensor):
            other = Tensor(other, dtype=var.dtype, device=getattr(var, "_lnode", None))
        if type(other) is VarNode and other._net is not None and other._net is not self:
            raise ValueError(f"{var!r}: cannot be rebound to {other!r}, a variable of another Network")
        if type(other) is not VarNode or other._net is not self:
            other = self._constant(other)
        old = _alias(var, object.__new__(VarNode))
        owner = var._owner
        if owner is not None:
            owner.outputs = [old if o is var else o for o in owner.outputs]
        for user in var.users:
            user.inputs = [old if i is var else i for i in user.inputs]
        for vid, c in self._consts.items():
            if c is var:
                self._consts[vid] = old
        reset(other)
        var._owner, var._var_id, var._users = other._owner, other.id, other.users
        return var

    def add_output(self, *vars: VarNode):
        """Add variables to the network's outputs (each once)."""
        for var in vars:
            self._check_var(var, "add_output")
        for var in vars:
            if not any(var is o for o in self.output_vars):  # (``is``: ``==`` of variables is elementwise)
                self.output_vars.append(var)

    def remove_output(self, *vars: VarNode):
        """Remove variables from the network's outputs."""
        for var in vars:
            if not any(var is o for o in self.output_vars):
                raise ValueError(f"Network.remove_output: {var!r} is not an output of this network")
            self.output_vars = [o for o in self.output_vars if o is not var]

    def add_dep_oprs(self, *vars):
        """MegEngine's: add the operators ``vars`` (default: the outputs) depend on. A hand-built network records
        each operator as it is applied, so there is nothing left to add; returns ``vars``."""
        for var in vars:
            self._check_var(var, "add_dep_oprs")
        return list(vars) if vars else list(self.output_vars)

    def _check_var(self, var, what):
        if not isinstance(var, VarNode):
            raise TypeError(f"Network.{what}: expected a VarNode, got {type(var).__name__}")
        if type(var) is VarNode and var._net is not self:
            raise ValueError(f"Network.{what}: {var!r} is a variable of another Network")

    # ---- walking --------------------------------------------------------------------------------------------
    @property
    def dest_vars(self):
        return self.output_vars

    @property
    def all_oprs(self) -> List[OpNode]:
        """The operators the outputs depend on, in an execution order (MegEngine's: none before outputs are
        added to a network built by hand)."""
        return get_oprs_seq(self.output_vars, prune_immtensor=False)

    @property
    def all_vars(self) -> List[VarNode]:
        """The variables of :attr:`all_oprs` (inputs and outputs), each once."""
        return list(self.all_vars_map.values())

    @property
    def all_oprs_map(self):
        return {op.id: op for op in self.all_oprs}

    @property
    def all_vars_map(self):
        out = {}
        for op in self.all_oprs:
            for v in op.inputs + op.outputs:
                out.setdefault(v.id, v)
        return out

    @property
    def all_oprs_dict(self):
        return {op.name: op for op in self.all_oprs}

    @property
    def all_vars_dict(self):
        return {v.name: v for v in self.all_vars}

    @property
    def opr_filter(self) -> "NodeFilter":
        return NodeFilter(self.all_oprs)

    @property
    def var_filter(self) -> "NodeFilter":
        return NodeFilter(self.all_vars)

    @property
    def params_filter(self) -> "NodeFilter":
        """The constant (``ImmutableTensor``) variables."""
        return self.var_filter.param_provider()

    @property
    def data_providers_filter(self) -> "NodeFilter":
        """The input (``Host2DeviceCopy``) variables."""
        return self.var_filter.data_provider()

    def get_opr_by_type(self, oprcls, unique=True):
        """Operators of type name ``oprcls`` (the only one if ``unique``)."""
        f = self.opr_filter.type(oprcls)
        return f.as_unique() if unique else f.as_list()

    def get_opr_by_name(self, name, unique=True):
        f = self.opr_filter.name(name)
        return f.as_unique() if unique else f.as_list()

    def get_var_by_name(self, name, unique=True):
        f = self.var_filter.name(name)
        return f.as_unique() if unique else f.as_list()

    def get_var_receive_oprs(self, var):
        """The operators that read ``var``."""
        return self.opr_filter.has_input(var).as_list()

    def get_dep_oprs(self, var):
        """The operators ``var`` (a variable or a list) depends on, in execution order."""
        return get_oprs_seq(var if isinstance(var, list) else [var], prune_immtensor=False)


class NodeFilter:
    """A lazily filtered sequence of operators or variables; filters chain (``net.opr_filter.type("Elemwise")``)."""

    def __init__(self, nodes, pred=None):
        self._nodes, self._pred = nodes, pred or (lambda n: True)

    def __iter__(self):
        return (n for n in self._nodes if self._pred(n))

    def _and(self, pred):
        return NodeFilter(self._nodes, lambda n, p=self._pred: p(n) and pred(n))

    @staticmethod
    def _type(n):
        return n.type if isinstance(n, OpNode) else n.owner.type

    def type(self, node_type):
        """Nodes of type name ``node_type`` (for variables: their owner's type)."""
        return self._and(lambda n: self._type(n) == node_type)

    def not_type(self, node_type):
        return self._and(lambda n: self._type(n) != node_type)

    def param_provider(self):
        return self.type("ImmutableTensor")

    def data_provider(self):
        return self.type("Host2DeviceCopy")

    def name(self, pattern, ignorecase=True):
        """Nodes whose name matches the glob ``pattern``."""
        rx = re.compile(fnmatch.translate(pattern), re.IGNORECASE if ignorecase else 0)
        return self._and(lambda n: rx.match(n.name) is not None)

    def has_input(self, var):
        """Operators that read ``var``."""
        return self._and(lambda n: isinstance(n, OpNode) and any(v is var for v in n.inputs))

    def as_list(self):
        return list(self)

    def as_unique(self):
        items = self.as_list()
        if len(items) != 1:
            raise ValueError(f"NodeFilter.as_unique: {len(items)} nodes match, expected exactly one")
        return items[0]

    def as_dict(self):
        return {n.name: n for n in self}

    def as_count(self):
        return sum(1 for _ in self)

