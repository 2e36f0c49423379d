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
           "get_oprs_seq", "replace_vars", "replace_oprs", "set_priority_to_id", "find_vars_by_name",
           "GraphInference", "load_graph"]

_PROVIDERS = ("ImmutableTensor", "Host2DeviceCopy")


def get_owner_opr_inputs(var: VarNode) -> List[VarNode]:
    """The input variables of the operator that produces ``var``."""
    return var.owner.inputs


def get_owner_opr_type(var: VarNode) -> str:
    """The type name of the operator that produces ``var`` (``"Elemwise"``, ``"Host2DeviceCopy"``...)."""
    return var.owner.type


def get_opr_type(opr: OpNode) -> str:
    """The type name of ``opr``."""
    assert isinstance(opr, OpNode), f"get_opr_type: expected an OpNode, got {type(opr).__name__}"
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
        ``(map_oprs, map_vars, var2oprs, opr2receivers, indegree2opr, opr2indegree)``, as MegEngine's: operators
        and variables by id, for each variable id the ``(operator id, input index)`` pairs that read it, for each
        operator id the ids of the operators that read its outputs, for each in-degree the operators of it (the
        operators for 0, their ids otherwise), and each operator id's in-degree.
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
    indegree2opr, opr2indegree = collections.defaultdict(set), {}
    for oid, opr in map_oprs.items():
        opr2indegree[oid] = len(opr.inputs)
        indegree2opr[len(opr.inputs)].add(opr if not opr.inputs else oid)
    return map_oprs, map_vars, var2oprs, opr2receivers, indegree2opr, opr2indegree


def get_oprs_seq(outputs: List[VarNode], prune_reshape=False, prune_immtensor=True) -> List[OpNode]:
    """The operators ``outputs`` depend on, in an execution order (each data provider placed right before its
    first reader, as MegEngine lists them).

    Args:
        outputs: the graph's output variables.
        prune_reshape: leave out operators that only compute the target shape of a ``Reshape``.
        prune_immtensor: leave out ``ImmutableTensor`` (constant) operators.
    """
    map_oprs, _, var2oprs, receivers, _, _ = graph_traversal(outputs)
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


def replace_vars(dst: List[VarNode], varmap: Dict[VarNode, VarNode]) -> List[VarNode]:
    r"""Replaces vars in the graph: the operators ``dst`` depend on that read a replaced variable (or one
    computed from it) are applied again to the replacements.

    Args:
        dst: target vars representing the graph (variables of a :class:`~megxla.utils.network.Network`).
        varmap: the map that specifies how to replace the vars (a dict, or ``(old, new)`` pairs).

    Returns:
        new vars that correspond to ``dst`` with all the dependencies replaced (a var nothing replaced
        reaches is itself).

    Example:
        >>> from megxla.utils.network import Network
        >>> net = Network()
        >>> a = net.make_const(np.array([1.0], "float32"), name="a")
        >>> b = net.make_const(np.array([5.0], "float32"), name="b")
        >>> (y,) = replace_vars([a * 2 + 1], {a: b})
        >>> y.numpy()
        array([11.], dtype=float32)
    """
    from ..core._dispatch import apply
    dst = list(dst)
    for v in dst:
        assert isinstance(v, VarNode)
    pairs = list(getattr(varmap, "items", lambda: varmap)())
    for old, new in pairs:
        assert isinstance(old, VarNode)
        assert isinstance(new, VarNode)
    new_of = {old.id: new for old, new in pairs}
    for opr in get_oprs_seq(dst, prune_immtensor=False):
        ins = [new_of.get(v.id, v) for v in opr.inputs]
        if all(a is b for a, b in zip(ins, opr.inputs)):
            continue
        op = getattr(opr, "op", None)
        if op is None:
            raise TypeError(f"replace_vars: operator {opr.name!r} ({opr.type}) cannot be applied again: variables "
                            f"of a graph loaded with load_graph hold no computation; load it with "
                            f"utils.network.Network.load to edit it")
        outs = apply(op, *ins)
        for old, new in zip(opr.outputs, list(outs) if op.multiple_results else [outs]):
            new_of.setdefault(old.id, new)
    return [new_of.get(v.id, v) for v in dst]


def replace_oprs(dst: List[VarNode], oprmap: Dict[OpNode, OpNode]) -> List[VarNode]:
    """Replaces operators in the graph: each output of an old operator is replaced by the same output of its
    new one (:func:`replace_vars`).

    Args:
        dst: target vars representing the graph.
        oprmap: the map that specifies how to replace the operators (a dict, or ``(old, new)`` pairs).

    Returns:
        new vars that correspond to ``dst`` with all the dependencies replaced.
    """
    dst = list(dst)
    for v in dst:
        assert isinstance(v, VarNode)
    varmap = []
    for old, new in getattr(oprmap, "items", lambda: oprmap)():
        assert isinstance(old, OpNode)
        assert isinstance(new, OpNode)
        assert len(old.outputs) == len(new.outputs), "can not replace {} with {}".format(old, new)
        varmap.extend(zip(old.outputs, new.outputs))
    return replace_vars(dst, varmap)


def set_priority_to_id(dest_vars: List[VarNode]):
    """Give every operator ``dest_vars`` depend on whose priority is 0 its id as priority, so an execution order
    (:func:`get_oprs_seq`) follows the order operators were made in (MegEngine's, before a dump).

    Args:
        dest_vars: target vars representing the graph.
    """
    for opr in get_oprs_seq(list(dest_vars), prune_immtensor=False):
        if opr.priority == 0:
            opr.priority = opr.id


def find_vars_by_name(dst: List[VarNode], names: List[str]) -> List[VarNode]:
    """The variables named ``names`` among those ``dst`` depend on, in the order of ``names``."""
    by_name = {}
    for v in get_dep_vars(dst) + list(dst):
        by_name.setdefault(v.name, v)
    missing = [n for n in names if n not in by_name]
    # (MegEngine asserts: an AssertionError, its text)
    assert not missing, "Can not find varnode {} in this model".format(missing)
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
            assert not missing, "Can not find varnode {} in this model".format(missing)  # (MegEngine's assert)
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
        # (MegEngine asserts: AssertionError, its texts)
        assert len(inp_args) <= len(self._inp_names), "This model expects {} inputs".format(len(self._inp_names))
        feed = dict(zip(self._inp_names, inp_args))
        feed.update(inp_dict or {})
        assert set(feed) == set(self._inp_names), "This model expects inputs {}, but gets inputs {}".format(
            list(self._inp_names), list(feed))
        outs = self._graph.run(*[feed[n] for n in self._inp_names])
        names = self._graph.output_names
        return collections.OrderedDict((names[i], outs[i]) for i in self._select)
