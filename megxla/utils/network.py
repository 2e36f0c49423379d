"""``megengine.utils.network``: a dumped graph as a :class:`Network` to inspect (operators, variables, filters).

Loads what ``trace.dump`` writes (see :mod:`megxla.core.tensor.megbrain_graph`); the network is read-only:
megxla's dump is a compiled XLA module, so editing operators and dumping again is done by editing the traced
function and tracing it again.

Example:
    >>> import io, megxla as mge
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

from ..core._trace_option import set_symbolic_shape  # noqa: F401  (MegEngine's network module exports it)
from ..core.tensor.megbrain_graph import OpNode, VarNode, load_graph
from .comp_graph_tools import get_oprs_seq

__all__ = ["Network", "NodeFilter"]


class Network:
    """The operators and variables of a loaded graph (see module docstring)."""

    def __init__(self):
        self.graph = None
        self.input_vars: List[VarNode] = []
        self.output_vars: List[VarNode] = []
        self.all_oprs_map = {}
        self.all_vars_map = {}

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
        for op in get_oprs_seq(outs, prune_immtensor=False):
            net.all_oprs_map[op.id] = op
            for v in op.inputs + op.outputs:
                net.all_vars_map.setdefault(v.id, v)
        net.input_vars = [v for v in res.graph.inputs if v.owner.id in net.all_oprs_map]
        return net

    @property
    def dest_vars(self):
        return self.output_vars

    @property
    def all_oprs(self) -> List[OpNode]:
        return list(self.all_oprs_map.values())

    @property
    def all_vars(self) -> List[VarNode]:
        return list(self.all_vars_map.values())

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

