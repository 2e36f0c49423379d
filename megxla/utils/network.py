"""``megengine.utils.network``: a graph as a :class:`Network` -- built by hand, or loaded from a dump -- to walk.

A network built by hand starts empty: :meth:`Network.make_const` gives it variables
(:class:`~megxla.utils.network_node.VarNode`, Tensors), and every functional call or Tensor operator on them is
recorded as an operator of the network, whose results are its variables too. megxla computes each op as it is
applied (through the one dispatch point, ``apply``): the values are there as the graph is built, where MegEngine
computes them when the graph runs (docs/differences.md).

:meth:`Network.load` reads what ``trace.dump`` writes (see :mod:`megxla.core.tensor.megbrain_graph`) as such a
network: each operator of the dump is applied again to its variables (inputs: :meth:`Network.make_input_node`,
without a value). Edit it (:meth:`~Network.replace_vars`, :meth:`~Network.replace_oprs`, outputs, ops on its
variables) and :meth:`Network.dump` writes it again, through ``trace.dump``.

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

import collections
import fnmatch
import pickle
import re
from typing import List

import numpy as np

from ..core import _registry
from ..core._dispatch import OpError, apply
from ..core._tensor import Tensor
from ..core._trace_option import set_symbolic_shape  # noqa: F401  (MegEngine's network module exports it)
from ..core.tensor.megbrain_graph import Graph, load_blob
from ..jit._dump import opr_type
from ..logger import get_logger
from .comp_graph_tools import get_oprs_seq
from .network_node import NetworkNode, OpNode, VarNode, _alias, _new_var, _OprType, type_name

__all__ = ["Network", "NodeFilter", "as_oprnode", "as_varnode"]


def as_oprnode(obj) -> OpNode:
    """MegEngine's: ``obj`` as an :class:`OpNode`: an operator, a variable (its owner), or an iterable holding
    exactly one of them.

    Args:
        obj: an :class:`OpNode`, a :class:`VarNode`, or an iterable (a list, a :class:`NodeFilter`) of one.

    Returns:
        the operator.

    Example:
        >>> import megxla.functional as F
        >>> net = Network()
        >>> y = F.exp(net.make_const(np.array([1.0], "float32")))
        >>> as_oprnode([y.owner]) is y.owner, as_oprnode(y) is y.owner, as_oprnode(y.owner).type
        (True, True, 'Elemwise')
    """
    if type(obj) is VarNode:
        return obj.owner
    if isinstance(obj, OpNode):
        return obj
    # (MegEngine checks with assert: an AssertionError, its texts)
    assert isinstance(obj, collections.abc.Iterable), "{} is not compatible with OpNode".format(obj)
    val = list(obj)
    assert len(val) == 1, "can not convert sequence of length {} to OpNode({})".format(len(val), val)
    return as_oprnode(val[0])


def as_varnode(obj) -> VarNode:
    """MegEngine's: ``obj`` as a :class:`VarNode`: a variable, an operator with one output (that output), or an
    iterable holding exactly one of them.

    Args:
        obj: a :class:`VarNode`, an :class:`OpNode` of one output, or an iterable of one.

    Returns:
        the variable.

    Example:
        >>> import megxla.functional as F
        >>> net = Network()
        >>> y = F.exp(net.make_const(np.array([1.0], "float32")))
        >>> as_varnode(y.owner) is y, as_varnode([y]) is y
        (True, True)
    """
    if type(obj) is VarNode:
        return obj
    if isinstance(obj, OpNode):
        assert len(obj.outputs) == 1, ("operator {} must have one output to be converted to VarNode; "
                                       "got {} actually".format(obj, len(obj.outputs)))
        return obj.outputs[0]
    assert isinstance(obj, collections.abc.Iterable), "{} is not compatible with VarNode".format(obj)
    val = list(obj)
    assert len(val) == 1, "can not convert sequence of length {} to VarNode ({})".format(
        len(val), (lambda t: t if len(t) < 50 else t[:50] + " ...")(str(val)))
    return as_varnode(val[0])


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
            if var._novalue:
                raise RuntimeError(f"graph.compile(...).execute(): {var.name!r} is computed from an input variable "
                                   f"(make_input_node), which has no value here; dump the network and run it with "
                                   f"its inputs (utils.comp_graph_tools.GraphInference)")
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
    from a dump (:meth:`load`). See the module docstring.

    Example:
        >>> import megxla.functional as F
        >>> net = Network()
        >>> x = net.make_const(np.array([1.0, 2.0], "float32"), name="x")
        >>> y = F.exp(x) + x
        >>> net.add_output(y)
        >>> [op.type for op in net.all_oprs], [v.name for v in net.params_filter]
        (['ImmutableTensor', 'Elemwise', 'Elemwise'], ['x'])
    """

    def __init__(self):
        self.graph = _BuiltGraph(self)
        self.input_vars: List[VarNode] = []
        self.output_vars: List[VarNode] = []
        self._names = {}  # base name -> how many operators took it (unique names: "ADD", "ADD_1", ...)
        self._consts = {}  # value id of a Tensor an op read -> its ImmutableTensor variable

    @classmethod
    def load(cls, model_path, outspec: List[str] = None) -> "Network":
        """Load a graph written by ``trace.dump`` (or :meth:`dump`) as a network to walk, edit and dump again.

        Every operator of the dump is applied again (through ``apply``) to the network's variables: its inputs
        are input variables (:meth:`make_input_node`: no value; the variables computed from them have none
        either), its constants ``make_const`` variables. The loaded operators keep the dump's types and names.

        Args:
            model_path: a path or a binary file object.
            outspec: names of the variables to use as outputs (default: the dump's outputs).
        """
        meta = load_blob(model_path)
        if meta.get("graph") is None:
            raise ValueError("Network.load: this dump has no graph view (written by an older megxla)")
        g = Graph(meta["graph"], meta["exported"], meta.get("testcases", ()))
        net = cls()
        net._metadata = {"user_info": pickle.loads(meta["user_info"]) if meta.get("user_info") else None,
                         "graph_modified": bool(meta.get("graph_modified", False)),
                         "optimized_for_inference": bool(meta.get("optimize_for_inference", False))}
        net._metadata.update(meta.get("metadata", {}))
        made = {}  # the dump's variable id -> this network's variable
        for opr in sorted(g.oprs.values(), key=lambda o: o.id):  # (the view lists operators in execution order)
            if opr.type == "Host2DeviceCopy":
                (v,) = opr.outputs
                made[v.id] = net.make_input_node(v.shape, v.dtype, name=v.name)
                continue
            if opr.type == "ImmutableTensor":
                (v,) = opr.outputs
                made[v.id] = net.make_const(opr.params["value"], name=v.name)
                continue
            ins = [made[v.id] for v in opr.inputs]
            op = g.ops.get(opr.id)
            if op is None:  # (a dump of an op holding a function, or of float16 storage: walked, not computed)
                outs = [Tensor(np.zeros(v.shape, v.dtype)) for v in opr.outputs]
                net._applied(None, ins, outs)
            else:
                outs = apply(op, *ins)
                outs = list(outs) if op.multiple_results else [outs]
                if not ins:  # (apply recorded it where a variable of this network was an input)
                    net._applied(op, ins, outs)
            node = outs[0].owner
            node.type, node.name, node.params = opr.type, opr.name, dict(opr.params)
            net._names.setdefault(opr.name, 1)
            for o, v in zip(outs, opr.outputs):
                o._name = v.name
                made[v.id] = o
        net.output_vars = [made[v.id] for v in g.outputs]
        for var, name in zip(net.output_vars, g.output_names):
            if var.owner.type != "Host2DeviceCopy":  # (a constant output is reported under its output name too)
                var._name = name
        if outspec is not None:
            by_name = {v.name: v for v in made.values()}
            missing = [n for n in outspec if n not in by_name]
            assert not missing, "Can not find {} in this model".format(missing)  # (MegEngine's assert)
            net.output_vars = [by_name[n] for n in outspec]
        net.input_vars = [made[v.id] for v in g.inputs]  # (all: an input the outputs do not read was an argument)
        return net

    @property
    def metadata(self):
        """What the dump recorded about itself (``user_info``, ``graph_modified``, ``optimized_for_inference``),
        None for a network built by hand."""
        return getattr(self, "_metadata", None)

    def dump(self, file, *, optimize_for_inference=True, user_info=None, **kwargs):
        """Write the network (its outputs and what they depend on) as ``trace.dump`` does: the operators are
        applied again, in order, to the input variables' values inside a ``trace`` that is then dumped, so the
        file is what the same computation traced by hand would give. ``GraphInference`` and :meth:`load` read it.

        Args:
            file: a path or a binary file object.
            optimize_for_inference, user_info, **kwargs: as ``trace.dump``'s.

        Returns:
            ``trace.dump``'s :class:`~megxla.jit._dump.DumpInfo`.

        Example:
            >>> import io, numpy as np, megxla as mge
            >>> net = Network()
            >>> x = net.make_input_node((2,), "float32", name="x")
            >>> net.add_output(mge.functional.relu(x) * 3)
            >>> buf = io.BytesIO(); _ = net.dump(buf); _ = buf.seek(0)
            >>> from megxla.utils.comp_graph_tools import GraphInference
            >>> list(GraphInference(buf).run(np.array([-1.0, 2.0], "float32")).values())[0]
            array([0., 6.], dtype=float32)
        """
        from ..jit.tracing import trace
        if not self.output_vars:
            raise ValueError("Network.dump: the network has no outputs (add_output)")
        oprs = self.all_oprs
        for opr in oprs:
            if opr.op is None and opr.type not in ("Host2DeviceCopy", "ImmutableTensor"):
                raise ValueError(f"Network.dump: operator {opr.name!r} ({opr.type}) cannot be computed again: the "
                                 f"dump it was loaded from kept no op for it (an op holding a function or a "
                                 f"nested graph, or a dump with float16 storage)")
        # the network's inputs, then any other input its outputs read (an unused input stays an input, as in
        # trace.dump: it is part of the signature)
        inputs = [v for v in self.input_vars if v.owner.type == "Host2DeviceCopy"]
        for opr in oprs:
            if opr.type == "Host2DeviceCopy" and not any(v is opr.outputs[0] for v in inputs):
                inputs.append(opr.outputs[0])
        names = [v.name for v in inputs]
        if len(set(names)) != len(names):
            raise ValueError(f"Network.dump: input names {names} are not unique")
        outs = list(self.output_vars)

        def replay(*args):
            env = {v.id: a for v, a in zip(inputs, args)}
            for opr in oprs:
                if opr.type == "Host2DeviceCopy":
                    continue
                if opr.op is None:  # ImmutableTensor: its value, a constant of the trace
                    (v,) = opr.outputs
                    env[v.id] = Tensor(v.numpy(), dtype=v.dtype)
                    continue
                res = apply(opr.op, *[env[v.id] for v in opr.inputs])
                for v, r in zip(opr.outputs, res if opr.op.multiple_results else (res,)):
                    env[v.id] = r
            return tuple(env[v.id] for v in outs)

        f = trace(replay, symbolic=True, capture_as_const=True)
        f(*[Tensor(np.zeros(v.shape, v.dtype), dtype=v.dtype) for v in inputs])
        info = f.dump(file, arg_names=names, output_names=[v.name for v in outs],
                      optimize_for_inference=optimize_for_inference, user_info=user_info, **kwargs)
        return info

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

    def make_input_node(self, shape, dtype=np.float32, name="data", device=None) -> VarNode:
        """An input of the network: a ``Host2DeviceCopy`` operator and its variable, fed when the dumped network
        runs. It has no value here (reading one raises), and neither have the variables computed from it; shapes
        and dtypes are known.

        Args:
            shape: the input's shape.
            dtype: its dtype.
            name: its name (the dump's input name; kept as given).
            device: the device it is on.

        Example:
            >>> net = Network()
            >>> x = net.make_input_node((2, 3), "float32", name="x")
            >>> y = x.sum(axis=1)
            >>> x.owner.type, y.shape
            ('Host2DeviceCopy', (2,))
        """
        shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        dtype = np.dtype(dtype)
        opr = OpNode()
        opr.type, opr.name = "Host2DeviceCopy", name
        self._names.setdefault(name, 1)
        # NOTE: the placeholder zeros let ops be applied (and recorded) as on any variable; _novalue keeps them
        # from being read as the input's value
        var = _new_var(self, Tensor(np.zeros(shape, dtype), dtype=dtype, device=device), opr, name)
        var._novalue = True
        opr.outputs = [var]
        # (not added to ``input_vars`` here, as MegEngine's: code loops over that list making new inputs for it;
        # replace_vars puts the new input there, and dump finds the inputs its outputs read)
        if _registry.GRAPH_BUILDER[0] is None:
            _registry.register_graph_builder(_graph_of)
        return var

    def replace_vars(self, repl_dict):
        """Make the operators that read each key of ``repl_dict`` (a variable) read its value (a variable of the
        network) instead; outputs are replaced alike. The operators the new variables are computed from keep
        their inputs (a replacement computed from the variable it replaces reads the old one)."""
        repl = dict(repl_dict)
        for old, new in repl.items():
            self._check_var(old, "replace_vars", foreign=True)
            self._check_var(new, "replace_vars", foreign=True)
        by_id = {old.id: new for old, new in repl.items()}
        keep = {op.id for op in get_oprs_seq(list(repl.values()), prune_immtensor=False)}
        for opr in self._known_oprs():
            if opr.id in keep:
                continue
            ins = [by_id.get(v.id, v) for v in opr.inputs]
            if any(a is not b for a, b in zip(ins, opr.inputs)):
                for old, new in zip(opr.inputs, ins):
                    if old is not new:
                        old.users[:] = [u for u in old.users if u is not opr]
                        if not any(u is opr for u in new.users):
                            new.users.append(opr)
                opr.inputs = ins
        self.output_vars = [by_id.get(v.id, v) for v in self.output_vars]
        inputs = [v for v in self.input_vars if v.id not in by_id]
        for v in repl.values():  # (``is``: ``==`` of variables is elementwise)
            if v.owner.type == "Host2DeviceCopy" and not any(v is u for u in inputs):
                inputs.append(v)
        self.input_vars = inputs

    def replace_oprs(self, repl_dict):
        """Replace each key of ``repl_dict`` (an operator) by its value (an operator of the network with as many
        outputs): the old operator's output variables become the new one's outputs, so everything that read them
        reads the new operator's results."""
        for old, new in repl_dict.items():
            if len(old.outputs) != len(new.outputs):
                raise ValueError(f"Network.replace_oprs: {old!r} has {len(old.outputs)} outputs, {new!r} "
                                 f"{len(new.outputs)}")
        for old, new in repl_dict.items():
            for i, var in enumerate(old.outputs):
                src = new.outputs[i]
                users = [u for u in var.users]
                _alias(src, var)
                var._users = src.users
                for u in users:
                    if not any(x is u for x in var._users):
                        var._users.append(u)
                var._owner = new
                new.outputs[i] = var

    def reset_batch_size(self, batchsize, *, blacklist=()):
        """Give every input (but those named in ``blacklist``) the first dimension ``batchsize``: a new input
        variable replaces each (:meth:`replace_vars`); :meth:`dump` computes the graph for the new shapes."""
        blacklist = set(blacklist)
        repl, prev = {}, None
        for opr in self.opr_filter.type("Host2DeviceCopy"):
            (v,) = opr.outputs
            if v.name in blacklist:
                blacklist.remove(v.name)
                continue
            shp = list(v.shape)
            if prev is None:
                prev = shp[0]
            else:  # (MegEngine's checks are asserts: AssertionError, its texts)
                assert prev == shp[0], "batchsize mismatch: batchsize={} shape={} dp={}".format(prev, shp, v.name)
            repl[v] = self.make_input_node((int(batchsize),) + tuple(shp[1:]), v.dtype, name=v.name)
        assert prev is not None, "no data provider found"
        assert not blacklist, "unused items in blacklist: {}".format(blacklist)
        self.replace_vars(repl)

    def modify_opr_names(self, modifier):
        """Rename every operator: ``modifier`` a string (the new name is ``f"{modifier}.{name}"``) or a function
        of the old name. A variable named as its operator (an input, a one-result op) is renamed with it."""
        if isinstance(modifier, str):
            prefix = modifier
            modifier = lambda name: f"{prefix}.{name}"  # noqa: E731
        if not callable(modifier):
            raise TypeError(f"Network.modify_opr_names: expected a string or a function, got {modifier!r}")
        for opr in self.all_oprs:
            new = modifier(opr.name)
            if not isinstance(new, str):
                raise TypeError(f"Network.modify_opr_names: the modifier gave {new!r} for {opr.name!r}, not a str")
            for v in opr.outputs:
                if v.name == opr.name:
                    v._name = new
            opr.name = new

    def _known_oprs(self):
        """The operators the outputs, the inputs' readers and the constants' readers reach: every operator
        ``replace_vars`` may have to rewire."""
        seen, out = set(), []
        roots = list(self.output_vars)
        for v in self.input_vars + list(self._consts.values()):
            for u in v.users:
                roots.extend(u.outputs)
        for op in get_oprs_seq(roots, prune_immtensor=False):
            if op.id not in seen:
                seen.add(op.id)
                out.append(op)
        return out

    def _unique(self, base):
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def _applied(self, op, inputs, outputs):
        """Record ``op`` on ``inputs`` (some of them this network's variables) and make its ``outputs`` (the
        Tensors ``apply`` computed) variables of the network. Called by ``apply``."""
        ins = [t if type(t) is VarNode and t._net is self else self._constant(t) for t in inputs]
        opr = OpNode()
        opr.type, base = opr_type(op) if op is not None else ("Unknown", "Unknown")
        opr.name, opr.op = self._unique(base), op
        opr.params = dict(op.params) if op is not None and op.params else {}
        novalue = any(getattr(v, "_novalue", False) for v in ins)
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
            if novalue or op is None:
                o._novalue = True
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
        """Add variables to the network's outputs (each once). A variable of another network splices the
        operators it is computed from into this one's graph (MegEngine's ``net1.add_output(*net2.output_vars)``)."""
        for var in vars:
            self._check_var(var, "add_output", foreign=True)
        for var in vars:
            if not any(var is o for o in self.output_vars):  # (``is``: ``==`` of variables is elementwise)
                self.output_vars.append(var)

    def remove_output(self, *vars: VarNode):
        """Remove variables from the network's outputs (one that is not an output: a warning)."""
        for var in vars:
            if not any(var is o for o in self.output_vars):  # (MegEngine warns and goes on)
                get_logger(__name__).warning("Failed to remove {}({}). Please check whether this node is in the "
                                             "output list.".format(var.name, id(var)))
                continue
            self.output_vars = [o for o in self.output_vars if o is not var]

    def add_dep_oprs(self, *vars):
        """MegEngine's: add the operators ``vars`` (default: the outputs) depend on. A hand-built network records
        each operator as it is applied, so there is nothing left to add; returns ``vars``."""
        for var in vars:
            self._check_var(var, "add_dep_oprs")
        return list(vars) if vars else list(self.output_vars)

    def _check_var(self, var, what, foreign=False):
        if not isinstance(var, VarNode) or (foreign and type(var) is not VarNode):
            raise TypeError(f"Network.{what}: expected a VarNode, got {type(var).__name__}")
        if type(var) is VarNode and var._net is not self and not foreign:
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
        return collections.OrderedDict((op.id, op) for op in self.all_oprs)

    @property
    def all_vars_map(self):
        out = collections.OrderedDict()
        for op in self.all_oprs:
            for v in op.inputs + op.outputs:
                out.setdefault(v.id, v)
        return out

    @property
    def all_oprs_dict(self):
        return self.opr_filter.as_dict()

    @property
    def all_vars_dict(self):
        return self.var_filter.as_dict()

    @property
    def opr_filter(self) -> "NodeFilter":
        return NodeFilter(self.all_oprs)

    @property
    def var_filter(self) -> "NodeFilter":
        return NodeFilter(self.all_vars)

    @property
    def params_filter(self) -> "NodeFilter":
        """The constant operators (``ImmutableTensor``; ``opr.set_value(v)`` changes one), as MegEngine's."""
        return self.opr_filter.param_provider()

    @property
    def data_providers_filter(self) -> "NodeFilter":
        """The input operators (``Host2DeviceCopy``: ``opr.shape``, ``opr.dtype``, ``opr.name``), as MegEngine's."""
        return self.opr_filter.data_provider()

    def get_opr_by_type(self, oprcls, unique=True):
        """Operators of type ``oprcls``, a name or a class of ``network_node`` (the only one if ``unique``)."""
        return _the_one(self.opr_filter.type(oprcls).as_list(), oprcls, unique)

    def get_opr_by_name(self, name, unique=True):
        return _the_one(self.opr_filter.name(name).as_list(), name, unique)

    def get_var_by_name(self, name, unique=True):
        return _the_one(self.var_filter.name(name).as_list(), name, unique)

    def get_var_receive_oprs(self, var):
        """The operators that read ``var``."""
        return self.opr_filter.has_input(var).as_list()

    def get_dep_oprs(self, var):
        """The operators ``var`` (a variable or a list) depends on, in execution order."""
        return get_oprs_seq(var if isinstance(var, list) else [var], prune_immtensor=False)


def _the_one(found, what, unique):
    if not unique:
        return found
    # (MegEngine asserts: an AssertionError, its text)
    assert len(found) == 1, "{} operators of type {} found".format(len(found), what)
    return found[0]


class NodeFilter:
    """A lazily filtered sequence of operators or variables; filters chain (``net.opr_filter.type("Elemwise")``).

    Args:
        nodes: the operators or variables to filter.
        pred: ``f(node) -> bool`` keeping a node (default: all).

    Example:
        >>> import megxla.functional as F
        >>> net = Network()
        >>> x = net.make_const(np.array([1.0, 2.0], "float32"), name="x")
        >>> net.add_output(F.exp(x) + x)
        >>> elemwise = net.opr_filter.type("Elemwise")
        >>> isinstance(elemwise, NodeFilter), elemwise.as_count(), [op.name for op in elemwise]
        (True, 2, ['EXP', 'ADD'])
        >>> net.var_filter.name("X").as_unique().numpy()  # a glob, case-insensitive by default
        array([1., 2.], dtype=float32)
    """

    def __init__(self, nodes, pred=None):
        if type(nodes) is VarNode:  # (MegEngine's: the operators it depends on, but its own)
            nodes = get_oprs_seq([nodes], prune_immtensor=False)[:-1]
        elif isinstance(nodes, OpNode):
            nodes = get_oprs_seq(nodes.inputs, prune_immtensor=False)
        assert isinstance(nodes, collections.abc.Iterable)
        self._nodes, self._pred = nodes, pred or (lambda n: True)

    @classmethod
    def make_all_deps(cls, *dest_vars):
        """A filter of the operators ``dest_vars`` depend on (theirs included)."""
        return cls(list(get_oprs_seq(list(dest_vars), prune_immtensor=False)))

    def __iter__(self):
        return (n for n in self._nodes if self._pred(n))

    def _and(self, pred):
        return NodeFilter(self._nodes, lambda n, p=self._pred: p(n) and pred(n))

    @staticmethod
    def _type(n):
        return n.type if isinstance(n, OpNode) else n.owner.type

    @classmethod
    def _is(cls, node_type):
        """``f(node)``: whether a node is of ``node_type`` (an operator type name or class of ``network_node``,
        or ``OpNode`` / ``VarNode`` / ``NetworkNode``)."""
        if isinstance(node_type, type) and not isinstance(node_type, _OprType):
            assert issubclass(node_type, NetworkNode), "bad opr type: {}".format(node_type)
            return lambda n: isinstance(n, node_type)
        name = type_name(node_type)
        return lambda n: cls._type(n) == name

    def type(self, node_type):
        """Nodes of type ``node_type``, a name or a class of ``network_node`` (``N.ConvolutionForward``); for
        variables, their owner's type."""
        return self._and(self._is(node_type))

    def not_type(self, node_type):
        """Nodes not of type ``node_type``."""
        match = self._is(node_type)
        return self._and(lambda n: not match(n))

    def param_provider(self):
        return self.type("ImmutableTensor")

    def data_provider(self):
        return self.type("Host2DeviceCopy")

    def check_type(self, node_type):
        """The same nodes, raising ``TypeError`` (when iterated) at one that is not of type ``node_type``."""
        match = self._is(node_type)

        def check(n):
            if not match(n):
                raise TypeError("all nodes should be {}; got {!r}".format(node_type, n))
            return True
        return self._and(check)

    def name(self, pattern, ignorecase=True):
        """Nodes named ``pattern`` or whose name matches it as a glob (``?``, ``*``)."""
        assert isinstance(pattern, str), "bad pattern: {!r}".format(pattern)
        assert isinstance(ignorecase, bool)
        rx = re.compile(fnmatch.translate(pattern), re.IGNORECASE if ignorecase else 0)
        return self._and(lambda n: n.name == pattern or rx.match(n.name) is not None)

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
        """An ordered dict from the nodes' names to the nodes."""
        return collections.OrderedDict((n.name, n) for n in self)

    def as_count(self):
        return sum(1 for _ in self)

