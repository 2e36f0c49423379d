"""``megengine.utils.comp_graph_tools``: walk and run a graph written by ``trace.dump``.

The graph is the view :func:`megxla.core.tensor.megbrain_graph.load_graph` returns (operators with MegEngine's
type names); :class:`GraphInference` runs the dumped StableHLO module with XLA.

Example:
    >>> import io, megxla as mge
    >>> from megxla.jit import trace
    >>> f = trace(lambda x: mge.functional.exp(x) * 2, symbolic=True, capture_as_const=True)
    >>> _ = f(mge.Tensor([0.0]))
    >>> buf = io.BytesIO(); _ = f.dump(buf); _ = buf.seek(0)
    >>> outs = load_graph(buf).output_vars_list
    >>> [o.name for o in get_oprs_seq(outs)]
    ['arg_0', 'EXP', 'MUL']
    >>> _ = buf.seek(0); list(GraphInference(buf).run(mge.Tensor([0.0])).values())[0]
    array([2.], dtype=float32)
"""
from __future__ import annotations

import collections
import heapq
from typing import Dict, List, Union

import numpy as np

from ..core.tensor.megbrain_graph import load_graph
from .network_node import OpNode, VarNode  # (a loaded graph's nodes and a hand-built network's)

__all__ = ["get_dep_vars", "get_owner_opr_inputs", "get_owner_opr_type", "get_opr_type", "graph_traversal",
           "get_oprs_seq", "find_vars_by_name", "GraphInference", "load_graph"]

_PROVIDERS = ("ImmutableTensor", "Host2DeviceCopy")


def get_owner_opr_inputs(var: VarNode) -> List[VarNode]:
    """The input variables of the operator that produces ``var``."""
    return var.owner.inputs


def get_owner_opr_type(var: VarNode) -> str:
    """The type name of the operator that produces ``var`` (``"Elemwise"``, ``"Host2DeviceCopy"``...)."""
    return var.owner.type


def get_opr_type(opr: OpNode) -> str:
    """The type name of ``opr``."""
    if not isinstance(opr, OpNode):
        raise TypeError(f"get_opr_type: expected an OpNode, got {type(opr).__name__}")
    return opr.type


def get_dep_vars(var: Union[VarNode, List[VarNode]], var_type: Union[str, List[str]] = None) -> List[VarNode]:
    """The variables ``var`` depends on (itself included), breadth first; only those whose owner's type is in
    ``var_type`` when given."""
    queue = [var] if isinstance(var, VarNode) else list(var)
    types = [var_type] if isinstance(var_type, str) else var_type
    seen, out = set(), []
    while queue:
        v = queue.pop(0)
        if v.id in seen:
            continue
        seen.add(v.id)
        queue.extend(get_owner_opr_inputs(v))
        if types is None or get_owner_opr_type(v) in types:
            out.append(v)
    return out


def graph_traversal(outputs: List[VarNode]):
    """Index the operators the ``outputs`` depend on.

    Returns:
        ``(map_oprs, map_vars, var2oprs, opr2receivers)``: operators and variables by id, for each variable id
        the ``(operator id, input index)`` pairs that read it, and for each operator id the ids of the
        operators that read its outputs.
    """
    map_oprs, map_vars = {}, {}
    var2oprs = collections.defaultdict(list)
    opr2receivers = collections.defaultdict(list)
    queue = list(dict.fromkeys(v.owner for v in outputs))
    for opr in queue:  # grows while iterating: breadth first over producers
        map_oprs[opr.id] = opr
        for i, v in enumerate(opr.inputs):
            map_vars[v.id] = v
            var2oprs[v.id].append((opr.id, i))
            opr2receivers[v.owner.id].append(opr.id)
            if v.owner.id not in map_oprs and v.owner not in queue:
                queue.append(v.owner)
    return map_oprs, map_vars, var2oprs, opr2receivers


def get_oprs_seq(outputs: List[VarNode], prune_reshape=False, prune_immtensor=True) -> List[OpNode]:
    """The operators ``outputs`` depend on, in an execution order (each data provider placed right before its
    first reader, as MegEngine lists them).

    Args:
        outputs: the graph's output variables.
        prune_reshape: leave out operators that only compute the target shape of a ``Reshape``.
        prune_immtensor: leave out ``ImmutableTensor`` (constant) operators.
    """
    map_oprs, _, var2oprs, receivers = graph_traversal(outputs)
    indegree = {oid: len(op.inputs) for oid, op in map_oprs.items()}
    ready = [(op.priority, oid) for oid, op in map_oprs.items() if indegree[oid] == 0]
    heapq.heapify(ready)
    order = []
    while ready:  # Kahn's algorithm; ties broken by (priority, id), i.e. by dump order
        _, oid = heapq.heappop(ready)
        order.append(map_oprs[oid])
        for r in receivers[oid]:
            indegree[r] -= 1
            if indegree[r] == 0:
                heapq.heappush(ready, (map_oprs[r].priority, r))
    if len(order) != len(map_oprs):
        raise RuntimeError(f"get_oprs_seq: {len(map_oprs) - len(order)} operators remain: the graph has a cycle")
    if prune_immtensor:
        order = [op for op in order if op.type != "ImmutableTensor"]
    # providers next to their first reader
    providers = [op for op in order if op.type in _PROVIDERS]
    placed, seq = set(), []
    for op in order:
        if op.type in _PROVIDERS:
            continue
        for v in op.inputs:
            if v.owner.type in _PROVIDERS and v.owner.id not in placed and v.owner in providers:
                placed.add(v.owner.id)
                seq.append(v.owner)
        seq.append(op)
    seq += [op for op in providers if op.id not in placed]
    if prune_reshape:
        seq = _prune_reshape_inputs(seq, outputs)
    return seq


def _prune_reshape_inputs(seq, outputs):
    # the target-shape input of a Reshape is known at inference time: drop operators only it needs
    needed = set()
    stack = [v.owner for v in outputs]
    while stack:
        op = stack.pop()
        if op.id in needed:
            continue
        needed.add(op.id)
        ins = op.inputs[:1] if op.type == "Reshape" else op.inputs
        stack.extend(v.owner for v in ins)
    return [op for op in seq if op.id in needed]


def find_vars_by_name(dst: List[VarNode], names: List[str]) -> List[VarNode]:
    """The variables named ``names`` among those ``dst`` depend on, in the order of ``names``."""
    by_name = {}
    for v in get_dep_vars(dst) + list(dst):
        by_name.setdefault(v.name, v)
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(f"find_vars_by_name: no variable named {missing} in this graph")
    return [by_name[n] for n in names]


class GraphInference:
    """Load a graph written by ``trace.dump`` and run it.

    Args:
        file: a path or a binary file object.
        outputs: names of the outputs to return (default: all the dump's outputs).
        profiling, optimize_for_inference: accepted for MegEngine compatibility (XLA optimises the module).

    Example:
        >>> infer = GraphInference("model.mge")  # doctest: +SKIP
        >>> infer.run(x)                          # doctest: +SKIP
        OrderedDict([('ADD', array(...))])
    """

    def __init__(self, file, outputs: List[str] = None, profiling: bool = False,
                 optimize_for_inference: bool = False, **kwargs):
        res = load_graph(file)
        self._graph = res.graph
        names = self._graph.output_names
        self._select = list(range(len(names)))
        if outputs is not None:
            missing = [n for n in outputs if n not in names]
            if missing:
                raise ValueError(f"GraphInference: the graph has no output named {missing} (outputs: {names})")
            self._select = [names.index(n) for n in outputs]
        self._inp_names = [v.name for v in self._graph.inputs]

    @property
    def input_names(self):
        return list(self._inp_names)

    def run(self, *inp_args, inp_dict: Dict[str, np.ndarray] = None) -> Dict[str, np.ndarray]:
        """Run the graph.

        Args:
            inp_args: input values in the traced function's argument order.
            inp_dict: input values by name (``arg_0``... or the dump's ``arg_names``).

        Returns:
            an ordered dict ``{output name: NumPy array}``.
        """
        if len(inp_args) > len(self._inp_names):
            raise TypeError(f"GraphInference.run: this model expects {len(self._inp_names)} inputs, "
                            f"got {len(inp_args)}")
        feed = dict(zip(self._inp_names, inp_args))
        feed.update(inp_dict or {})
        if set(feed) != set(self._inp_names):
            raise ValueError(f"GraphInference.run: this model expects inputs {self._inp_names}, "
                             f"got {sorted(feed)}")
        outs = self._graph.run(*[feed[n] for n in self._inp_names])
        names = self._graph.output_names
        return collections.OrderedDict((names[i], outs[i]) for i in self._select)
