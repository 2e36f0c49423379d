"""``megengine.core.tensor.megbrain_graph``: load a graph written by ``trace.dump`` and look at it.

MegEngine's dump writes a MegBrain graph; megxla's writes what XLA consumes (a portable StableHLO module, run
by XLA when the graph is executed) plus a *graph view*: the traced ops as operators and variables named and typed
as MegEngine names them (``Host2DeviceCopy`` for inputs, ``ImmutableTensor`` for constants, ``Elemwise`` with
its mode for arithmetic...), so tools that walk a dumped graph (``utils.comp_graph_tools``,
``utils.network``) work on it. The view is data; executing it always runs the StableHLO module.

Example:
    >>> import io, megxla as mge
    >>> from megxla.jit import trace
    >>> f = trace(lambda a, b: a + b, symbolic=True, capture_as_const=True)
    >>> _ = f(mge.Tensor([1.0]), mge.Tensor([2.0]))
    >>> buf = io.BytesIO(); _ = f.dump(buf); _ = buf.seek(0)
    >>> res = load_graph(buf)
    >>> (out,) = res.output_vars_list
    >>> out.owner.type, [v.owner.type for v in out.owner.inputs]
    ('Elemwise', ['Host2DeviceCopy', 'Host2DeviceCopy'])
"""
from __future__ import annotations

import collections
import pickle

import numpy as np

__all__ = ["VarNode", "OpNode", "Graph", "OutputNode", "load_graph", "CompGraphLoadResult", "FORMAT"]

FORMAT = "megxla-stablehlo-1"  # the dump's container: a pickled dict (StableHLO bytes, names, graph view)

CompGraphLoadResult = collections.namedtuple("CompGraphLoadResult", ["graph", "output_vars_dict",
                                                                     "output_vars_list"])


class VarNode:
    """A variable of a loaded graph: ``name``, ``shape``, ``dtype`` and the operator that produces it (``owner``)."""

    def __init__(self, graph, id, name, shape, dtype):
        self.graph, self.id, self.name = graph, id, name
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.owner = None

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return f"VarNode({self.name!r}, shape={self.shape}, dtype={self.dtype})"


class OpNode:
    """An operator of a loaded graph: its MegEngine type name (``type``), unique ``name``, ``params`` (a dict),
    input and output :class:`VarNode` lists."""

    def __init__(self, graph, id, type, name, params):
        self.graph, self.id, self.type, self.name, self.params = graph, id, type, name, dict(params)
        self.inputs, self.outputs = [], []
        self.priority = 0

    def __repr__(self):
        return f"OpNode({self.type}, {self.name!r})"


class Graph:
    """A dumped graph: its operators and variables (the view) and the XLA executable that computes it.

    Attributes:
        inputs: input :class:`VarNode` list, in the traced function's argument order.
        outputs: output :class:`VarNode` list.
        output_names: the names outputs are reported under (``run`` returns a dict keyed by them).
        testcases: ``[{"inputs": {name: array}, "outputs": [array]}]`` written by ``dump(input_data=...)``.
    """

    def __init__(self, view, exported_bytes, testcases=()):
        self._exported_bytes = exported_bytes
        self._exported = None
        self.testcases = list(testcases)
        self.vars = {}
        for vid, name, shape, dtype in view["vars"]:
            self.vars[vid] = VarNode(self, vid, name, shape, dtype)
        self.oprs = {}
        for oid, type_, name, params, ins, outs in view["oprs"]:
            op = OpNode(self, oid, type_, name, params)
            op.inputs = [self.vars[v] for v in ins]
            op.outputs = [self.vars[v] for v in outs]
            for v in op.outputs:
                v.owner = op
            self.oprs[oid] = op
        self.inputs = [self.vars[v] for v in view["inputs"]]
        self.outputs = [self.vars[v] for v in view["outputs"]]
        self.output_names = list(view["output_names"])
        # operator id -> the op computing it, where the dump could keep one (``utils.network.Network.load``
        # rebuilds an editable network from them)
        self.ops = dict(view.get("ops", {}))
        self._output_nodes = {}  # var id -> the OutputNodes reading it (``compile(...).execute()`` fills them)

    def compile(self, outputs):
        """MegEngine's compile of the graph for ``outputs`` (variables, each read by an :class:`OutputNode`): an
        object whose ``execute()`` runs the graph -- by XLA, as :meth:`run` -- and gives each such node its value.
        The graph must need no inputs fed (a graph of constants: MegEngine's tests read values so)."""
        graph = self

        class _Compiled:
            def execute(self):
                missing = [v.name for v in outputs if v not in graph.outputs]
                if graph.inputs or missing:
                    why = f"it takes inputs {[v.name for v in graph.inputs]}" if graph.inputs else \
                        f"{missing} are not its outputs"
                    raise RuntimeError(f"Graph.compile(...).execute(): cannot compute this graph alone: {why}; "
                                       "run it with its inputs (Graph.run, utils.comp_graph_tools.GraphInference)")
                values = graph.run()
                for var, value in zip(graph.outputs, values):
                    for node in graph._output_nodes.get(var.id, ()):
                        node._value = value
                return self
        return _Compiled()

    @property
    def exported(self):
        """The ``jax.export.Exported`` module computing the outputs from the inputs."""
        if self._exported is None:
            import jax
            self._exported = jax.export.deserialize(bytearray(self._exported_bytes))
        return self._exported

    def run(self, *inputs):
        """Compute the outputs (NumPy arrays, in output order) from ``inputs`` (arrays or Tensors), with XLA.

        Raises:
            TypeError: wrong number of inputs; ValueError: an input's shape differs from the graph's.
        """
        if len(inputs) != len(self.inputs):
            raise TypeError(f"Graph.run: the graph takes {len(self.inputs)} inputs "
                            f"({[v.name for v in self.inputs]}), got {len(inputs)}")
        arrays = []
        for var, x in zip(self.inputs, inputs):
            a = np.asarray(x.numpy() if hasattr(x, "numpy") else x)
            if a.shape != var.shape and a.size == int(np.prod(var.shape, dtype=np.int64)):
                a = a.reshape(var.shape)  # MegEngine feeds a scalar input as shape (1,) and vice versa
            if a.shape != var.shape:
                raise ValueError(f"Graph.run: input {var.name!r} has shape {var.shape}, got {a.shape}")
            arrays.append(a.astype(var.dtype, copy=False))
        return [np.asarray(o) for o in self.exported.call(*arrays)]


class OutputNode:
    """MegEngine's output node of a graph variable: ``o = OutputNode(var)``, then ``o.graph.compile(o.outputs)
    .execute()`` and ``o.get_value()`` -- here for a variable of a graph :func:`load_graph` loaded (see
    :meth:`Graph.compile`).

    Example:
        >>> import io, megxla as mge
        >>> from megxla.jit import trace
        >>> f = trace(lambda: mge.Tensor([1.0, 2.0]) * 3, symbolic=True, capture_as_const=True)
        >>> _ = f(); buf = io.BytesIO(); _ = f.dump(buf); _ = buf.seek(0)
        >>> o = OutputNode(load_graph(buf).output_vars_list[0])
        >>> _ = o.graph.compile(o.outputs).execute()
        >>> o.get_value().numpy()
        array([3., 6.], dtype=float32)
    """

    def __init__(self, var):
        self.var, self.graph, self.outputs = var, var.graph, [var]
        self._value = None
        var.graph._output_nodes.setdefault(var.id, []).append(self)

    def get_value(self):
        """The variable's value (a Tensor) once the graph has been executed; RuntimeError before."""
        if self._value is None:
            raise RuntimeError(f"OutputNode.get_value: {self.var.name!r} has no value: execute the graph first "
                               "(graph.compile(node.outputs).execute())")
        from .._tensor import Tensor
        return Tensor(self._value)


def _read(file):
    if hasattr(file, "read"):
        return file.read()
    with open(file, "rb") as fh:
        return fh.read()


def load_blob(file) -> dict:
    """The dict a dump wrote (``format``, ``exported``, names, ``graph`` view); raises ValueError otherwise."""
    blob = _read(file)
    try:
        meta = pickle.loads(blob)
    except Exception as exc:
        raise ValueError(f"load_graph: not a graph written by megxla's trace.dump ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError("load_graph: not a graph written by megxla's trace.dump")
    return meta


def load_graph(fpath) -> CompGraphLoadResult:
    """Load a graph written by ``trace.dump``.

    Args:
        fpath: a path or a binary file object.

    Returns:
        ``CompGraphLoadResult(graph, output_vars_dict, output_vars_list)``: the :class:`Graph`, its output
        :class:`VarNode` s by name and in order.
    """
    meta = load_blob(fpath)
    if meta.get("graph") is None:
        raise ValueError("load_graph: this dump has no graph view (written by an older megxla)")
    graph = Graph(meta["graph"], meta["exported"], meta.get("testcases", ()))
    outs = dict(zip(graph.output_names, graph.outputs))
    return CompGraphLoadResult(graph, outs, list(graph.outputs))
