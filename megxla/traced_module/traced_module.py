"""TracedModule: a Module whose forward interprets the graph ``trace_module`` recorded."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Sequence, Type

import numpy as np

from .. import logger as _logger_mod
from ..core import _registry
from ..core._tensor import Parameter
from ..module.module import Module
from . import tracer
from .expr import CallMethod, Constant, Expr, GetAttr, Input, get_subattr
from .graph import InternalGraph, NameSpace, _EndReached  # noqa: F401 (MegEngine's files name it here)
from .node import ModuleNode, Node, TensorNode
from .pytree import tree_flatten, tree_unflatten

__all__ = ["TracedModule", "trace_module", "wrap", "register_as_builtin"]

logger = _logger_mod.get_logger(__name__)

_CHECKS = {"expr": False, "default": True}

# attributes a TracedModule owns itself; never copied from the traced module
_OWN = ("argdef_graph_map", "argdef_outdef_map", "_is_top", "is_qat", "argspec", "watch_points",
        "watch_node_value", "_watch_values", "end_points", "_modules", "_forward_pre_hooks", "_forward_hooks")


class _NodeValues:
    """The watch values (node -> tensor). Not a dict on purpose: Module's attribute walk (``state_dict``,
    ``named_children``, ``optimize``) descends dicts and would reject Node keys."""

    __slots__ = ("values",)

    def __init__(self):
        self.values = {}


class TracedModule(Module):
    r"""A Module made by :func:`trace_module`: its forward runs the recorded graph.

    Sub-modules that are builtin (megxla's layers, or classes passed to :func:`register_as_builtin`) are kept
    as they are; other sub-modules became nested TracedModules with their own graphs. Parameters and buffers
    are the traced module's own objects, so ``state_dict``, optimizers, ``GradManager``, ``jit.trace`` and
    quantization work on a TracedModule as on any Module.

    Args:
        is_top: whether this is the module ``trace_module`` returned (not a nested one).
        argdef_graph_map: argument structure (a TreeDef of ``(args, kwargs)``) -> its graph.
        argdef_outdef_map: argument structure -> the TreeDef of the result.
        is_qat: whether the module is a QAT module.

    Example:
        >>> from megxla.traced_module import trace_module
        >>> net = M.Sequential(M.Linear(4, 3), M.ReLU())
        >>> x = mge.Tensor(np.ones((2, 4), "float32"))
        >>> tm = trace_module(net, x)
        >>> type(tm).__name__, tm(x).shape, bool(np.allclose(tm(x).numpy(), net(x).numpy()))
        ('TracedModule', (2, 3), True)
        >>> print(tm.graph)
        Sequential.Graph (self, inp) {
            %2: _0 = getattr(self, "0") -> (Linear)
            %3: _1 = getattr(self, "1") -> (ReLU)
            %4: _0_out = _0(inp, )
            %5: _1_out = _1(_0_out, )
            return _1_out
        }
    """

    def __init__(self, is_top: bool, argdef_graph_map: Dict, argdef_outdef_map: Dict, is_qat: bool = False):
        super().__init__()
        self.argdef_graph_map = argdef_graph_map
        self.argdef_outdef_map = argdef_outdef_map
        self._is_top = is_top
        self.is_qat = is_qat
        self.argspec = None
        self.watch_points = []
        self._watch_values = _NodeValues()
        self.end_points = []

    @property
    def watch_node_value(self) -> Dict:
        """``{node: value}`` of the watch points at the last forward (MegEngine's attribute)."""
        holder = self.__dict__.get("_watch_values")
        if holder is None:  # a module pickled before the holder existed
            holder = self.__dict__["_watch_values"] = _NodeValues()
        return holder.values

    @watch_node_value.setter
    def watch_node_value(self, values):
        d = self.watch_node_value  # updated in place: the graphs' sinks hold this dict
        d.clear()
        d.update(values)

    @property
    def graph(self) -> InternalGraph:
        """The graph (a module traced with one argument structure has exactly one)."""
        graphs = list(self.argdef_graph_map.values())
        if not graphs:
            return None
        assert len(graphs) == 1, f"{len(graphs)} graphs were traced for different argument structures; " \
                                 "use argdef_graph_map"
        return graphs[0]

    def forward(self, *args, **kwargs):
        """Run the graph traced for the structure of ``(args, kwargs)``."""
        if self.argspec is not None:
            args, kwargs = tracer.convert_kwargs_to_args(self.argspec, args, kwargs, is_bounded=True)
        leaves, argdef = tree_flatten((args, kwargs))
        graph = self.argdef_graph_map.get(argdef)
        if graph is None:
            raise TypeError(f"TracedModule: no graph was traced for arguments of structure {argdef!r}; traced: "
                            f"{list(self.argdef_graph_map)} (non-tensor arguments must equal the traced ones)")
        if len(leaves) != len(graph.inputs) - 1:
            raise TypeError(f"TracedModule: graph {graph._name} takes {len(graph.inputs) - 1} tensor inputs, "
                            f"got {len(leaves)}")
        if self._is_top and (self.watch_points or self.end_points):
            self.watch_node_value.clear()
            end = graph._sinks[1] if graph._sinks else {}
            end.clear()
            try:
                outs = graph.interpret(self, *leaves)
            except _EndReached:
                return [end[n] for n in self.end_points]
        else:
            outs = graph.interpret(self, *leaves)
        return tree_unflatten(self.argdef_outdef_map[argdef], outs)

    # ---- watch / end points ---------------------------------------------------------------------------
    def _all_graphs(self):
        seen, out = set(), []

        def visit(m):
            if id(m) in seen:
                return
            seen.add(id(m))
            for g in getattr(m, "argdef_graph_map", {}).values():
                out.append(g)
            for _, c in m.named_children():
                visit(c)

        visit(self)
        return out

    def _set_sinks(self):
        want = list(self.end_points)  # ordered: eval() returns the values in this order
        sinks = ((set(self.watch_points), self.watch_node_value), {}, want) \
            if (self.watch_points or self.end_points) else None
        for g in self._all_graphs():
            g._sinks = sinks

    def set_watch_points(self, nodes):
        r"""Record the values of ``nodes`` at every forward: ``self.watch_node_value[node]`` is the node's value
        at the last forward (a Tensor, as MegEngine's).

        Args:
            nodes: a TensorNode or a list of them (of any graph of this module).
        """
        if not isinstance(nodes, Sequence):
            nodes = [nodes]
        self.watch_points = list(nodes)
        self.watch_node_value = {}
        self._set_sinks()

    def clear_watch_points(self):
        r"""Stop recording watch points."""
        self.watch_points = []
        self.watch_node_value = {}
        self._set_sinks()

    def set_end_points(self, nodes: Sequence[Node]):
        r"""Stop the forward as soon as ``nodes`` are computed and return their values (a list).

        Args:
            nodes: a TensorNode or a list of them.
        """
        if not isinstance(nodes, Sequence):
            nodes = [nodes]
        self.end_points = list(nodes)
        self._set_sinks()

    def clear_end_points(self):
        r"""Run the whole graph again."""
        self.end_points = []
        self._set_sinks()

    # ---- references / pickling ------------------------------------------------------------------------
    def _update_ref(self, parent_graph=None, _seen=None):
        """Re-attach graphs to modules: node owners, graph parents (after tracing, surgery or loading)."""
        _seen = set() if _seen is None else _seen
        if id(self) in _seen:
            return
        _seen.add(id(self))
        for g in self.argdef_graph_map.values():
            g.top_graph = parent_graph
            g.inputs[0].owner = self
            for n in g.inputs:
                n.top_graph = g
                n.expr.top_graph = g
            for e in g._exprs:
                e.top_graph = g
                for n in e.outputs:
                    n.top_graph = g
                if isinstance(e, GetAttr) and isinstance(e.outputs[0], ModuleNode):
                    base = e.inputs[0].owner
                    try:
                        e.outputs[0].owner = get_subattr(base, e.name)
                    except AttributeError:
                        e.outputs[0].owner = None
                elif isinstance(e, Constant) and isinstance(e.value, Module):
                    e.outputs[0].owner = e.value
            for e in g._exprs:
                if isinstance(e, CallMethod) and e.method == "__call__" and isinstance(e.inputs[0], ModuleNode):
                    sub = e.inputs[0].owner
                    if isinstance(sub, TracedModule):
                        sub._update_ref(g, _seen)
        for _, c in self.named_children():  # containers and modules not called in any graph
            if isinstance(c, TracedModule):
                c._update_ref(None if not c.argdef_graph_map else
                              next(iter(c.argdef_graph_map.values())).top_graph, _seen)

    def __setstate__(self, state):
        if "dump_info" in state:  # pickled by MegEngine
            from ._megengine_layout import traced_module_state
            state = traced_module_state(state)
        super().__setstate__(state)
        from .serialization import run_loaders
        self._update_ref()  # (this module's own graphs; the top module re-attaches the whole tree below)
        changed = [run_loaders(g) for g in self.argdef_graph_map.values()]
        if self.__dict__.get("_is_top"):
            self._update_ref()
            if any(changed):
                for g in self.argdef_graph_map.values():
                    g._reset_ids()
            self._set_sinks()

    # ---- flatten --------------------------------------------------------------------------------------
    def flatten(self) -> "TracedModule":
        r"""A new TracedModule with one graph: the graphs of nested TracedModules inlined into the top one.

        Attributes (modules, tensors) are shared with this module.

        Returns:
            the flattened :class:`TracedModule`.
        """
        new = TracedModule(True, {}, {}, self.is_qat)
        for k, v in self.__dict__.items():
            if k in _OWN:
                continue
            _set_attr_quietly(new, k, v)
        new.argspec = self.argspec
        for argdef, g in self.argdef_graph_map.items():
            ng = _Flattener(new, g).run()
            new.argdef_graph_map[argdef] = ng
            new.argdef_outdef_map[argdef] = self.argdef_outdef_map[argdef]
        new._update_ref()
        for g in new.argdef_graph_map.values():
            g._reset_ids()
        return new


def clone_expr(expr, inputs, graph, names=None):
    """A copy of ``expr`` reading ``inputs``, appended to ``graph`` with fresh output nodes."""
    e = object.__new__(type(expr))
    Expr.__init__(e)
    e._copy_attrs(expr)
    e.add_inputs(inputs)
    graph._add_expr(e)
    for i, o in enumerate(expr.outputs):
        name = names[i] if names else o._name
        if isinstance(o, ModuleNode):
            graph._new_node(ModuleNode, e, name, o._qualname, module_type=o.module_type)
        else:
            graph._new_node(TensorNode, e, name, o._qualname, shape=o.shape, dtype=o.dtype, qparams=o.qparams)
    return e


class _Flattener:
    """Inline every call of a nested TracedModule into one graph (names prefixed with the call's module)."""

    def __init__(self, top, graph):
        self.top = top
        self.src = graph
        self.g = InternalGraph(graph._name, graph._qualname)

    def run(self):
        g, src = self.g, self.src
        env = {}
        for n in src.inputs:
            e = Input(n.expr.name)
            e.top_graph = g
            cls = type(n)
            kw = {"module_type": n.module_type} if cls is ModuleNode else \
                {"shape": n.shape, "dtype": n.dtype, "qparams": n.qparams}
            nn = g._new_node(cls, e, n._name, n._qualname, **kw)
            g._inputs.append(nn)
            env[n] = nn
        self.self_node = g._inputs[0]
        env[src.inputs[0]] = ("path", "")
        self.inline(src, "", env)
        g._outputs = [env[n] for n in src.outputs]
        return g

    def _is_sub(self, path):
        m = get_subattr(self.top, path) if path else self.top
        # a QAT module traced into a graph stays one call: quantize() converts it as a unit
        return isinstance(m, TracedModule) and m.argdef_graph_map and not m.is_qat and path

    def inline(self, src, prefix, env):
        g = self.g
        for e in src._exprs:
            if isinstance(e, GetAttr) and isinstance(env.get(e.inputs[0]), tuple):
                path = f"{env[e.inputs[0]][1]}.{e.name}".lstrip(".")
                if isinstance(e.outputs[0], ModuleNode) and self._is_sub(path):
                    env[e.outputs[0]] = ("path", path)
                    continue
                ne = GetAttr(self.self_node, path)
                g._add_expr(ne)
                o = e.outputs[0]
                if isinstance(o, ModuleNode):
                    nn = g._new_node(ModuleNode, ne, prefix + o._name, o._qualname, module_type=o.module_type)
                else:
                    nn = g._new_node(TensorNode, ne, prefix + o._name, o._qualname, shape=o.shape, dtype=o.dtype,
                                     qparams=o.qparams)
                env[o] = nn
            elif isinstance(e, CallMethod) and e.method == "__call__" and isinstance(env.get(e.inputs[0]), tuple):
                path = env[e.inputs[0]][1]
                sub = get_subattr(self.top, path)
                sg = sub.argdef_graph_map[e.arg_def]
                sub_env = {sg.inputs[0]: ("path", path)}
                for sn, n in zip(sg.inputs[1:], e.inputs[1:]):
                    sub_env[sn] = env[n]
                mark = len(g._exprs)
                self.inline(sg, prefix + e.inputs[0]._name + "_", sub_env)
                made = {n for x in g._exprs[mark:] for n in x.outputs}
                for o, so in zip(e.outputs, sg.outputs):
                    v = sub_env[so]
                    env[o] = v
                    if v in made:  # the sub-graph's result takes the caller's name (``sub_out``)
                        g._namespace.unassociate(v)
                        v._name = g._namespace.create_unique_name(prefix + o._name, v)
                        made.discard(v)
            else:
                ins = [env[n] for n in e.inputs]
                if any(isinstance(i, tuple) for i in ins):  # a traced sub-module used as a value: read it
                    ins = [self._materialize(i) if isinstance(i, tuple) else i for i in ins]
                ne = clone_expr(e, ins, g, [prefix + o._name for o in e.outputs])
                for o, no in zip(e.outputs, ne.outputs):
                    env[o] = no

    def _materialize(self, entry):
        ne = GetAttr(self.self_node, entry[1])
        self.g._add_expr(ne)
        m = get_subattr(self.top, entry[1])
        return self.g._new_node(ModuleNode, ne, entry[1].replace(".", "_"), entry[1], module_type=type(m))


def _contains_module(v):
    if isinstance(v, Module):
        return True
    if isinstance(v, (list, tuple)):
        return any(_contains_module(x) for x in v)
    if isinstance(v, dict):
        return any(_contains_module(x) for x in v.values())
    return False


def _convert_attr(v, tr):
    if isinstance(v, Module):
        hit = tr.shells.get(id(v))
        return hit[1] if hit is not None and hit[0] is v else v
    if isinstance(v, (list, tuple, dict)) and _contains_module(v):
        # a container of modules becomes a TracedModule whose attributes are the entries ("lst.0")
        c = TracedModule(False, {}, {})
        items = v.items() if isinstance(v, dict) else enumerate(v)
        for k, x in items:
            x = _convert_attr(x, tr)
            if isinstance(x, Module):
                # named again as the container's entry: MegEngine's module containers clear the old short name
                # ("layers.0") first, so Module.__setattr__ does not warn that it stays
                x.__dict__["_short_name"] = None
            setattr(c, str(k), x)
        return c
    return v


def _set_attr_quietly(parent, key, value):
    """``setattr(parent, key, value)`` without Module's warning for a module already named elsewhere (one sub-module
    under two attribute names, ``self.b = self.a``): its name stays, as it would with the warning, which MegEngine's
    ``trace_module`` and ``flatten`` do not log."""
    if isinstance(value, Module) and value.__dict__.get("_short_name") not in (None, key) \
            and parent.__dict__.get("_modules") is not None:
        if key not in parent._modules:
            parent._modules.append(key)
        object.__setattr__(parent, key, value)
        _registry.bump_epoch()  # (as Module.__setattr__)
        return
    setattr(parent, key, value)


def _fill_attributes(shell, mod, tr):
    if shell.__dict__.get("_tm_filled"):
        return
    for k, v in list(mod.__dict__.items()):
        if k in _OWN or k == "_tm_filled":
            continue
        _set_attr_quietly(shell, k, _convert_attr(v, tr))
    if isinstance(mod, TracedModule):
        shell.is_qat = mod.is_qat
    else:
        from ..module.qat.module import QATModule
        shell.is_qat = isinstance(mod, QATModule)
    shell.__dict__["_tm_filled"] = True


def register_as_builtin(mod_cls: Type[Module]) -> None:
    r"""Keep modules of class ``mod_cls`` as single calls (leaves) in traced graphs instead of tracing into
    their forward.

    Args:
        mod_cls: a Module subclass.

    Example:
        >>> import megxla.module as M, megxla.traced_module as tm
        >>> class MyAct(M.Module):
        ...     def forward(self, x):
        ...         return x * 2
        >>> tm.register_as_builtin(MyAct)
    """
    if not (isinstance(mod_cls, type) and issubclass(mod_cls, Module)):
        raise TypeError(f"register_as_builtin expects a Module subclass, got {mod_cls!r}")
    tracer.BUILTIN_MODULES.add(mod_cls)


def _register_all_builtin_module():
    import megxla.module as M
    import megxla.module.qat as QM
    import megxla.module.quantized as QQ
    for ns in (M, QM, QQ):
        for v in vars(ns).values():
            # (Sequential is a container: traced into, as MegEngine does, so its layers are graph nodes)
            if isinstance(v, type) and issubclass(v, Module) and v not in (Module, TracedModule, M.Sequential):
                tracer.BUILTIN_MODULES.add(v)


def wrap(func: Callable):
    r"""Make calls of the user function ``func`` one CallFunction expr in traced graphs (its body is not
    traced). Call it at the top level of a module, as MegEngine asks (``tm.wrap(my_func)`` or as a decorator):
    it returns ``func`` itself, and while a trace runs the module's global of that name calls the recording
    wrapper, so ``graph.get_function_by_type(my_func)`` finds the exprs and saved TracedModules find the function
    again. Called elsewhere (inside a function; MegEngine asserts), it returns the recording wrapper instead.

    Args:
        func: the function.

    Returns:
        ``func`` (at a module's top level), else the wrapper; outside tracing either behaves exactly like ``func``.

    Example:
        >>> import megxla.traced_module as tm
        >>> @tm.wrap
        ... def my_op(x):
        ...     return x * 2 + 1
        >>> my_op.__name__, my_op(3)
        ('my_op', 7)
    """
    if not callable(func) or not hasattr(func, "__code__"):
        raise TypeError(f"wrap expects a Python function, got {type(func).__name__}")
    wrapped = tracer.WRAPPED.get(func)
    if wrapped is None:
        @functools.wraps(func)
        def wrapped(*args, **kwargs):
            tr = tracer._active
            if tr is None or tr.suppress or not tr.frames:
                return func(*args, **kwargs)
            return tr.call_function(func, args, kwargs)

        wrapped._tm_original = func
        tracer.WRAPPED[func] = wrapped
    caller = inspect.currentframe().f_back
    if caller is None or caller.f_code.co_name != "<module>":
        return wrapped
    tracer.WRAPPED_GLOBALS.append((caller.f_globals, func.__code__.co_name, func))
    return func


def _check_consts(tm):
    for g in tm._all_graphs():
        for e in g._exprs:
            if isinstance(e, Constant) and isinstance(e.value, Parameter):
                logger.warning(f"{g._qualname}: a Parameter was captured as a constant ({e!r}); it is not an "
                               "attribute of the traced module, so it will not be trained or saved with it")


def trace_module(mod: Module, *args: Any, **kwargs: Any) -> TracedModule:
    r"""Trace ``mod``'s forward on example inputs into a :class:`TracedModule`.

    The forward runs once for real; then (the default checker, as MegEngine) the traced module runs once on
    the same inputs and its outputs must equal the module's (AssertionError otherwise). Calls of builtin modules, ``megxla.functional`` functions, Tensor
    methods and :func:`wrap` ped functions are recorded as exprs; other sub-modules get their own graphs.
    Non-tensor arguments are part of the traced structure: calling the result with different ones raises.

    Args:
        mod: the module to trace.
        args: example positional arguments.
        kwargs: example keyword arguments.

    Returns:
        the :class:`TracedModule`.

    Example:
        >>> import numpy as np, megxla as mge, megxla.module as M, megxla.functional as F
        >>> import megxla.traced_module as tm
        >>> class Net(M.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = M.Linear(3, 2)
        ...     def forward(self, x):
        ...         return F.relu(self.fc(x)) + 1
        >>> net = tm.trace_module(Net(), mge.Tensor(np.ones((1, 3), "float32")))
        >>> [type(e).__name__ for e in net.graph._exprs]
        ['GetAttr', 'CallMethod', 'CallFunction', 'CallMethod']
    """
    if not isinstance(mod, Module):
        raise TypeError(f"trace_module expects a Module, got {type(mod).__name__}")
    spec = tracer.argspec_of(mod)
    if spec is not None:
        args, kwargs = tracer.convert_kwargs_to_args(spec, args, kwargs, is_bounded=True)
    tr = tracer._Tracer()
    Node._set_next_id(0)
    Expr._set_next_id(0)
    tr.install()
    try:
        result = tr.trace_forward(mod, None, args, kwargs, None)
        tr.finish()
    finally:
        tr.uninstall()
    for _, shell in tr.shells.values():
        # as MegEngine's builder: each graph compiled, so what no output needs (an unused value, the test of a
        # Python branch on a tensor) is not run by the traced module
        for g in shell.argdef_graph_map.values():
            g.compile()
    top = tr.shells[id(mod)][1]
    top._is_top = True
    top.argspec = spec
    top._update_ref()
    top.graph._reset_ids()  # ids in graph order (a call's outputs before its sub-graph's nodes), as MegEngine's
    Node._set_next_id(top.graph._total_ids[0])
    Expr._set_next_id(top.graph._total_ids[1])
    if _CHECKS["default"]:
        _check_consts(top)
    if _CHECKS["default"] or _CHECKS["expr"]:
        # MegEngine's default check: the traced module runs once on the example inputs and must give the
        # module's outputs (so, as in MegEngine, a training-mode BatchNorm's statistics move twice)
        _check_outputs(top, args, kwargs, result)
    return top


def _check_outputs(top, args, kwargs, expected):
    got = tree_flatten(top(*args, **kwargs))[0]
    want = tree_flatten(expected)[0]
    assert len(got) == len(want), f"traced module returns {len(got)} tensors, the module {len(want)}"
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5,
                                   err_msg=f"output {i} of the traced module differs from the module's")
