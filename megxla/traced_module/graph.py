"""InternalGraph: the editable graph of a TracedModule (inputs, exprs in execution order, outputs).

Queries return filters (``as_list()``, ``as_dict()``, ``as_unique()``, ``as_count()``); surgery is
``insert_exprs()`` + ``replace_node()`` + ``compile()``; ``interpret`` runs the graph on values.
"""
from __future__ import annotations

import collections
import fnmatch
import re
import weakref
from typing import Callable, Dict, List, Optional, Sequence

from .expr import CallFunction, CallMethod, Constant, Expr, GetAttr, Input
from .node import ModuleNode, Node, TensorNode
from .pytree import is_value, tree_flatten, TreeDef

__all__ = ["InternalGraph", "NameSpace", "ExprFilter", "NodeFilter"]

_RESERVED = {"self"}


class NameSpace:
    """The names used in one graph: each node gets a unique, identifier-like name."""

    def __init__(self, name, qualname):
        self.name = name
        self.qualname = qualname
        self.used_names: Dict[str, Node] = {}

    def create_unique_name(self, name: str, node: Node = None) -> str:
        """Sanitize ``name`` and add ``_1``, ``_2``... until unused; associate it with ``node``."""
        assert isinstance(name, str), "The name must be a string"
        if name in self.used_names and self.used_names[name] is node:
            return name
        name = re.sub(r"[^0-9a-zA-Z_]+", "_", name) or "node"
        if name[0].isdigit():
            name = "_" + name
        base, n = name, 0
        while name in self.used_names:
            n += 1
            name = f"{base}_{n}"
        self.used_names[name] = node
        return name

    def unassociate(self, node: Node):
        if node._name in self.used_names and self.used_names[node._name] is node:
            del self.used_names[node._name]

    def merge(self, other: "NameSpace"):
        self.used_names.update(other.used_names)


class _Reiterable:
    """An iterable whose every ``iter()`` restarts ``gen()``: a filter can be read more than once
    (``f.as_list()`` then ``f.as_dict()``), as MegEngine's filters can."""

    def __init__(self, gen):
        self._gen = gen

    def __iter__(self):
        return self._gen()


class BaseFilter:
    """An iterable over nodes or exprs with converters to list/dict."""

    def __init__(self, it):
        self._iter = it

    def __iter__(self):
        return iter(self._iter)

    def _sub(self, keep):
        return type(self)(_Reiterable(lambda: (i for i in self if keep(i))))

    def as_list(self) -> list:
        """The elements as a list."""
        return list(self)

    def as_dict(self) -> "collections.OrderedDict":
        """An ordered dict ``{id: element}``."""
        return collections.OrderedDict((i._id, i) for i in self)

    def as_unique(self):
        """The only element (AssertionError when there are none or several)."""
        rst = self.as_list()
        assert len(rst) == 1, f"{len(rst)} elements found"
        return rst[0]

    def as_count(self) -> int:
        """The number of elements."""
        return sum(1 for _ in self)


class ExprFilter(BaseFilter):
    """Exprs, filterable further by ``call_function``, ``call_method``, ``expr_id``."""

    def call_function(self, func):
        return self._sub(lambda e: isinstance(e, CallFunction) and (func is None or e.func == func))

    def call_method(self, method):
        if isinstance(method, str):
            method = [method]
        return self._sub(lambda e: isinstance(e, CallMethod) and (method is None or e.method in method))

    def expr_id(self, expr_id):
        ids = expr_id if isinstance(expr_id, Sequence) else [expr_id]
        return self._sub(lambda e: e._id in ids)


class NodeFilter(BaseFilter):
    """Nodes, filterable further by ``type``, ``node_id``, ``name``."""

    def type(self, owner_type):
        # by the module the node stands for now (MegEngine's test): a layer swapped by quantize_qat matches its
        # new class
        return self._sub(lambda n: isinstance(n, ModuleNode) and isinstance(n.owner, owner_type))

    def node_id(self, node_id):
        ids = node_id if isinstance(node_id, Sequence) else [node_id]
        return self._sub(lambda n: n._id in ids)

    def name(self, name: str, ignorecase: bool = True):
        regex = re.compile(fnmatch.translate(name), re.IGNORECASE if ignorecase else 0)

        def match(n):
            g = n.top_graph
            full = f"{g._name}_{n._name}" if g is not None else n._name
            return full == name or regex.match(full)

        return self._sub(match)


class _EndReached(Exception):
    """Raised inside interpretation once every end point has a value (see ``TracedModule.set_end_points``)."""


class InternalGraph:
    """The graph of one traced ``forward``: ``inputs`` (the module node ``self`` first), ``exprs`` and
    ``outputs``.

    Args:
        name: the graph's name (the module's class name for a top graph).
        qualname: the module path it was traced at (``Net.block0``).

    Example:
        >>> import numpy as np, megxla as mge, megxla.module as M, megxla.functional as F
        >>> import megxla.traced_module as tm
        >>> class Net(M.Module):
        ...     def forward(self, x):
        ...         return F.relu(x) + 1
        >>> net = tm.trace_module(Net(), mge.Tensor([-1.0, 2.0]))
        >>> graph = net.graph
        >>> relu_out = graph.get_function_by_type(F.relu).as_unique().outputs[0]
        >>> with graph.insert_exprs():
        ...     neg = F.neg(relu_out)
        >>> graph.replace_node({relu_out: neg})
        >>> graph.compile()
        >>> [type(e).__name__ for e in graph.exprs()]
        ['Input', 'Input', 'CallFunction', 'CallFunction', 'CallMethod']
        >>> net(mge.Tensor([-1.0, 2.0])).numpy()
        array([ 1., -1.], dtype=float32)
    """

    def __init__(self, name: str, qualname: str):
        self._exprs: List[Expr] = []
        self._inputs: List[Node] = []
        self._outputs: List[Node] = []
        self._name = name
        self._qualname = qualname
        self._namespace = NameSpace(name, qualname)
        self._top_graph = None  # the enclosing graph (None for the top graph)
        self._total_ids = None  # (next node id, next expr id) of a top graph
        self._watch_point: List[Node] = []
        self._end_point: List[Node] = []
        self._sinks = None  # (watch values dict, end values dict) shared with the top module while set

    # ---- properties ---------------------------------------------------------------------------------------
    @property
    def inputs(self) -> List[Node]:
        """The graph's input nodes (``inputs[0]`` is the module itself)."""
        return self._inputs

    @property
    def outputs(self) -> List[Node]:
        """The graph's output nodes, flattened."""
        return self._outputs

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, value: str):
        self._name = value
        self._namespace.name = value

    @property
    def qualname(self) -> str:
        return self._qualname

    @property
    def top_graph(self) -> Optional["InternalGraph"]:
        """The graph that calls this one (None for a top graph)."""
        g = self._top_graph
        return g() if g is not None else None

    @top_graph.setter
    def top_graph(self, graph):
        self._top_graph = None if graph is None else weakref.ref(graph)

    def _root(self) -> "InternalGraph":
        g = self
        while g.top_graph is not None:
            g = g.top_graph
        return g

    @property
    def owner(self):
        """The module this graph belongs to (the owner of its ``self`` input)."""
        return self._inputs[0].owner if self._inputs else None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_top_graph"] = None
        d["_sinks"] = None
        return d

    def __setstate__(self, state):
        from ._megengine_layout import graph_state, is_megengine_state
        if is_megengine_state(state):  # a TracedModule pickled by MegEngine
            state = graph_state(state)
        self.__dict__.update(state)

    # ---- adding (tracer) ----------------------------------------------------------------------------------
    def _add_expr(self, expr: Expr):
        expr.top_graph = self
        self._exprs.append(expr)

    def _new_node(self, cls, expr, name, qualname, **kw):
        if isinstance(expr, Constant) and expr.outputs:  # made with its expr: adopt it
            return self._adopt_node(expr.outputs[0], name, qualname)
        node = cls(expr, None, qualname, **kw)
        node.top_graph = self
        node._name = self._namespace.create_unique_name(name, node)
        expr.outputs.append(node)
        return node

    def _adopt_node(self, node, name=None, qualname=None):
        """Make ``node`` (made outside the graph) one of this graph's, with a unique name."""
        node.top_graph = self
        if qualname is not None and node._qualname is None:
            node._qualname = qualname
        node._name = self._namespace.create_unique_name(node._name or name or "node", node)
        return node

    # ---- queries ------------------------------------------------------------------------------------------
    def _iter_exprs(self, recursive, _seen=None):
        # a sub-graph run by several calls (a shared module) is listed once, after its first call
        _seen = {id(self)} if _seen is None else _seen
        for n in self._inputs:
            yield n.expr
        for e in self._exprs:
            yield e
            if recursive and isinstance(e, CallMethod):
                sub = e.graph
                if sub is not None and id(sub) not in _seen:
                    _seen.add(id(sub))
                    yield from sub._iter_exprs(True, _seen)

    def exprs(self, recursive: bool = True) -> ExprFilter:
        """All exprs (the Inputs first), those of sub-graphs after the call that runs them when ``recursive``.

        Returns:
            an :class:`ExprFilter`.
        """
        return ExprFilter(_Reiterable(lambda: self._iter_exprs(recursive)))

    def nodes(self, recursive: bool = True) -> NodeFilter:
        """All nodes (inputs first), those of sub-graphs too when ``recursive``.

        Returns:
            a :class:`NodeFilter`.
        """
        def gen():
            for e in self._iter_exprs(recursive):
                yield from e.outputs
        return NodeFilter(_Reiterable(gen))

    def get_function_by_type(self, func: Callable = None, recursive: bool = True) -> ExprFilter:
        """The CallFunction exprs calling ``func`` (all CallFunctions when None); see the class example."""
        return self.exprs(recursive).call_function(func)

    def get_method_by_type(self, method: str = None, recursive: bool = True) -> ExprFilter:
        """The CallMethod exprs of ``method`` (e.g. ``"__add__"``; ``"__call__"`` for module calls)."""
        return self.exprs(recursive).call_method(method)

    def get_expr_by_id(self, expr_id: List[int] = None, recursive: bool = True) -> ExprFilter:
        """The exprs whose ``_id`` is in ``expr_id`` (one id or a list)."""
        return self.exprs(recursive).expr_id(expr_id)

    def get_module_by_type(self, module_cls, recursive: bool = True) -> NodeFilter:
        """The ModuleNodes of modules of type ``module_cls`` (subclasses included)."""
        return self.nodes(recursive).type(module_cls)

    def get_node_by_id(self, node_id: List[int] = None, recursive: bool = True) -> NodeFilter:
        """The nodes whose ``_id`` is in ``node_id`` (one id or a list)."""
        return self.nodes(recursive).node_id(node_id)

    def get_node_by_name(self, name: str = None, ignorecase: bool = True, recursive: bool = True) -> NodeFilter:
        """The nodes whose full name ``"<graph name>_<node name>"`` matches the glob ``name``
        (``graph.get_node_by_name("Net_conv1")``)."""
        return self.nodes(recursive).name(name, ignorecase)

    def get_dep_exprs(self, nodes) -> List[Expr]:
        """The exprs ``nodes`` depend on, ``Input`` exprs included, in MegEngine's order: a depth-first walk from
        the last node given back to the inputs (the nodes' own exprs first).

        Args:
            nodes: a :class:`Node` or a sequence of them.

        Returns:
            a list of :class:`Expr`.
        """
        if not isinstance(nodes, Sequence):
            nodes = (nodes,)
        ret, queue = [], list(nodes)
        in_ret, in_queue, visited = set(), {id(n) for n in queue}, set()  # (ids: linear in the graph's size)
        while queue:
            node = queue.pop()
            in_queue.discard(id(node))
            visited.add(id(node))
            expr = node.expr
            if id(expr) not in in_ret:
                in_ret.add(id(expr))
                ret.append(expr)
            for i in expr.inputs:
                if id(i) not in in_queue and id(i) not in visited:
                    queue.append(i)
                    in_queue.add(id(i))
        return ret

    # ---- surgery ------------------------------------------------------------------------------------------
    def insert_exprs(self, expr: Optional[Expr] = None):
        """A context in which calls on this graph's nodes record new exprs.

        Inside ``with graph.insert_exprs():`` functional calls, Tensor methods on TensorNodes and calls of
        ``self_node.<submodule>`` record exprs and return new nodes. On exit the exprs are inserted after
        ``expr`` (or right after the last expr producing one of their inputs, when later).

        Args:
            expr: the expr after which to insert; None: place them after their inputs are available.

        See the class example.
        """
        from .surgery import InsertExprs
        if expr is not None:
            assert expr.top_graph is self, "Expr to insert after is not in graph."
        return InsertExprs(self, expr)

    def replace_node(self, repl_dict: Dict[Node, Node]):
        """Make the users of each key node (after the replacement's producer) read the value node instead;
        graph outputs are replaced too.

        Args:
            repl_dict: ``{old_node: new_node}``.
        """
        for node, repl in list(repl_dict.items()):
            assert type(node) == type(repl), \
                f"The type of {node}({type(node).__name__}) and {repl}({type(repl).__name__}) are not the same"
            assert repl.top_graph is self, f"{repl} is not a node of graph {self._name}"
            for i, n in enumerate(self._outputs):
                if n is node:
                    self._outputs[i] = repl
            index = -1 if isinstance(repl.expr, Input) else self._exprs.index(repl.expr)
            deps = set(self.get_dep_exprs(repl))
            for user in list(node.users):
                if user in self._exprs and self._exprs.index(user) <= index:
                    continue
                if user in deps:  # would create a loop
                    continue
                node.users.remove(user)
                repl.users.append(user)
                user.inputs[:] = [repl if x is node else x for x in user.inputs]

    def _merge_getattr_expr(self):
        seen = {}
        for e in [e for e in self._exprs if isinstance(e, GetAttr)]:
            key = (id(e.inputs[0]), e.name)
            if key in seen:
                keep = seen[key]
                dup = e.outputs[0]
                for user in list(dup.users):
                    user.inputs[:] = [keep if x is dup else x for x in user.inputs]
                    keep.users.append(user)
                dup.users.clear()
            else:
                seen[key] = e.outputs[0]

    def eliminate_dead_code(self):
        """Remove the exprs whose results no output depends on."""
        kept = [e for e in self._exprs if e._disable_remove]  # (in-place updates of module state)
        live = set(self.get_dep_exprs(list(self._outputs) + [n for e in kept for n in e.inputs])) | set(kept)
        for e in list(self._exprs):
            if e in live or e._disable_remove:
                continue
            for n in e.inputs:
                if e in n.users:
                    n.users.remove(e)
            self._exprs.remove(e)
            for n in e.outputs:
                self._namespace.unassociate(n)

    def compile(self):
        """Merge duplicate GetAttr exprs and delete the exprs no output needs (after surgery)."""
        self._merge_getattr_expr()
        self.eliminate_dead_code()

    def _owner_key(self):
        owner = self.owner
        gmap = getattr(owner, "argdef_graph_map", None) or {}
        for k, g in gmap.items():
            if g is self:
                return owner, k
        return owner, None

    def _rekey(self, new_key=None, new_outdef=None):
        owner, key = self._owner_key()
        if owner is None or key is None:
            return
        out = owner.argdef_outdef_map.pop(key)
        del owner.argdef_graph_map[key]
        key = new_key if new_key is not None else key
        owner.argdef_graph_map[key] = self
        owner.argdef_outdef_map[key] = new_outdef if new_outdef is not None else out

    def add_input_node(self, shape, dtype="float32", name: str = "args") -> TensorNode:
        """Append a tensor input to the graph (a new last positional argument of the module).

        Args:
            shape: the input's shape.
            dtype: its dtype. Default: float32.
            name: its name. Default: "args".

        Returns:
            the new input :class:`TensorNode`.
        """
        import numpy as np
        expr = Input(name)
        expr.top_graph = self
        node = self._new_node(TensorNode, expr, name, f"{self._qualname}.[{name}]", shape=tuple(shape),
                              dtype=np.dtype(dtype))
        self._inputs.append(node)
        owner, key = self._owner_key()
        if key is not None:
            args_def, kwargs_def = key.children
            new_args = TreeDef(tuple, None, list(args_def.children) + [_leaf_def()])
            new_key = TreeDef(key.type, key.aux, [new_args, kwargs_def])
            self._rekey(new_key)
            spec = getattr(owner, "argspec", None)
            if spec is not None:
                owner.argspec = spec._replace(args=list(spec.args) + [node._name])
        return node

    def reset_inputs(self, *args, **kwargs) -> List[TensorNode]:
        """Give the (top) graph new tensor inputs, one per tensor of ``(args, kwargs)``, with their shapes and
        dtypes: the module is then called with arguments of that structure. The exprs still read the old input
        nodes until :meth:`replace_node` swaps them for the new ones.

        Args:
            args: example tensors (or lists / tuples / dicts of them) of the new positional arguments.
            kwargs: example tensors of the new keyword arguments.

        Returns:
            the new input :class:`TensorNode` s, in the order of the flattened ``(args, kwargs)``.

        Examples:
            >>> import megxla as mge, megxla.functional as F, megxla.module as M
            >>> from megxla.traced_module import trace_module
            >>> class Scale(M.Module):
            ...     def forward(self, x):
            ...         return x * 2
            >>> t = trace_module(Scale(), mge.Tensor([1.0]))
            >>> g = t.graph
            >>> old = g.inputs[1]
            >>> a, b = g.reset_inputs(mge.Tensor([0.0]), b=mge.Tensor([0.0]))
            >>> with g.insert_exprs():
            ...     s = a + b
            >>> g.replace_node({old: s})
            >>> g.compile()
            >>> t(mge.Tensor([1.0]), b=mge.Tensor([2.0])).numpy()
            array([6.], dtype=float32)
        """
        import inspect
        import numpy as np
        from ..core._tensor import Tensor
        owner, key = self._owner_key()
        if owner is None or key is None or not getattr(owner, "_is_top", False):
            raise ValueError(f"reset_inputs: graph {self._name} is not the top graph of a TracedModule")
        leaves, argdef = tree_flatten((tuple(args), dict(kwargs)), is_leaf=lambda x: isinstance(x, Tensor))
        bad = [type(v).__name__ for v in tree_flatten((args, kwargs), is_leaf=lambda x: not isinstance(
            x, (list, tuple, dict)))[0] if not isinstance(v, Tensor)]
        if bad:
            raise TypeError(f"reset_inputs: every argument must be a Tensor (or a list / tuple / dict of them), "
                            f"got {', '.join(bad)}")
        # positional tensors are named "args" (MegEngine's name), keyword ones by their keyword
        names = ["args"] * len(tree_flatten(tuple(args), is_leaf=lambda x: isinstance(x, Tensor))[0])
        for k, v in kwargs.items():
            names += [k] * len(tree_flatten(v, is_leaf=lambda x: isinstance(x, Tensor))[0])
        nodes = []
        for v, name in zip(leaves, names):
            expr = Input(name)
            expr.top_graph = self
            node = self._new_node(TensorNode, expr, name, None, shape=tuple(v.shape), dtype=np.dtype(v.dtype))
            node._qualname = f"{self._qualname}.[{node._name}]"
            nodes.append(node)
        self._inputs[1:] = nodes
        self._rekey(argdef)
        # a call now passes the tensors positionally and these keywords (MegEngine kept the traced forward's spec,
        # so keyword arguments it did not have could not be given)
        owner.argspec = inspect.FullArgSpec(args=["self"], varargs="args", varkw=None, defaults=None,
                                            kwonlyargs=list(kwargs), kwonlydefaults=None, annotations={})
        return nodes

    def add_output_node(self, node: TensorNode):
        """Add ``node`` as an output: the result becomes the pair ``(the result before, node)``, as MegEngine's (so
        adding two nodes to a single output ``y`` gives ``((y, a), b)``).

        Args:
            node: a node of this graph.
        """
        owner, key = self._owner_key()
        self._outputs.append(node)
        if key is not None:
            self._rekey(new_outdef=TreeDef(tuple, None, [owner.argdef_outdef_map[key], _leaf_def()]))

    def reset_outputs(self, outputs):
        """Make ``outputs`` (nodes in any nest of list/tuple/dict) the graph's result.

        Args:
            outputs: the new result structure, with nodes at the leaves.
        """
        leaves, outdef = tree_flatten(outputs, is_leaf=is_value)
        for leaf in leaves:
            # MegEngine's words: only TensorNodes in list / tuple / dict nests (a number or None left the graph
            # returning nothing)
            assert isinstance(leaf, TensorNode), (
                f"doesn't support {leaf} type, MUST use \"register_supported_type\" method to register "
                "self-defined type")
        self._outputs[:] = leaves
        self._rekey(new_outdef=outdef)

    def _reset_ids(self):
        """Number the exprs and nodes (sub-graphs included) 0, 1, ... in graph order."""
        exprs = self.exprs().as_list()
        for i, e in enumerate(exprs):
            e._id = i
        nodes = self.nodes().as_list()
        for i, n in enumerate(nodes):
            n._id = i
        self._total_ids = (len(nodes), len(exprs))

    # ---- running ------------------------------------------------------------------------------------------
    def eval(self, *inputs):
        r"""Run the graph on its owner module (MegEngine's ``InternalGraph.eval``).

        Args:
            inputs: the tensors for ``graph.inputs[1:]``.

        Returns:
            the output values, flattened (a list); the end points' values in their order while the top module
            has end points set.
        """
        if len(inputs) != len(self._inputs) - 1:  # (an AssertionError, as MegEngine's)
            raise AssertionError(f"InternalGraph.eval: graph {self._name} takes {len(self._inputs) - 1} inputs, "
                                 f"got {len(inputs)}")
        owner = self._inputs[0].owner
        if owner is None:
            raise RuntimeError(f"InternalGraph.eval: graph {self._name} has no module attached")
        if self._sinks:
            self._sinks[1].clear()
        try:
            return self.interpret(owner, *inputs)
        except _EndReached:
            _, end, want = self._sinks
            return [end[n] for n in want]

    def interpret(self, *inputs):
        """Run the graph on input values (the module first); returns the output values, flattened."""
        env = {}
        for n, v in zip(self._inputs, inputs):
            env[n] = v
        sinks = self._sinks
        if sinks is not None:  # a graph input may be a watch or end point too
            _collect(self._inputs[1:], env, sinks)
        for expr in self._exprs:
            try:
                vals = [env[n] for n in expr.inputs]
            except KeyError as exc:
                raise RuntimeError(f"graph {self._name}: {expr!r} reads node {exc.args[0]} before it is "
                                   "computed (re-order the exprs or compile the graph)") from None
            outs = expr.interpret(*vals)
            for n, v in zip(expr.outputs, outs):
                env[n] = v
            if sinks is not None:
                _collect(expr.outputs, env, sinks)
        try:
            return [env[n] for n in self._outputs]
        except KeyError as exc:
            raise RuntimeError(f"graph {self._name}: output node {exc.args[0]} is never computed") from None

    # ---- printing -----------------------------------------------------------------------------------------
    def __format__(self, spec=""):
        # MegEngine's: the whole graph, every node printed in the spec's node format ("{:i}" with its id, "{:p}"
        # prefixed by its graph's name)
        saved, Node._format_spec = Node._format_spec, spec
        try:
            args = ", ".join(str(n) for n in self._inputs)
            body = "".join(f"\t{e!r}\n" for e in self._exprs)
            outs = ", ".join(str(n) for n in self._outputs)
        finally:
            Node._format_spec = saved
        return f"{self._name}.Graph ({args}) {{\n{body}\treturn {outs}\n}}"

    def __repr__(self):
        return self.__format__()


def _leaf_def():
    from .pytree import LEAF
    return TreeDef(None, value=LEAF)


def _collect(nodes, env, sinks):
    (watch, values), end, want = sinks
    for n in nodes:
        if n in watch:
            values[n] = env[n]
        if want and n in want:
            end[n] = env[n]
            if len(end) == len(want):
                raise _EndReached()
