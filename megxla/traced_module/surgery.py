"""Graph surgery: ``graph.insert_exprs()`` and the node operations it enables.

Inside the context a :class:`~.tracer._Tracer` records into a scratch graph whose frame maps the graph's nodes
to stand-in values (zero tensors of their recorded shapes, the modules they stand for); calls on nodes
(``F.relu(node)``, ``node + 1``, ``self_node.conv(node)``) run the usual recording and hand nodes back. On
exit the new exprs are spliced into the graph after the exprs producing their inputs.
"""
from __future__ import annotations

from ..core._tensor import Tensor
from ..module.module import Module
from . import tracer as _tr
from .expr import Expr, GetAttr
from .graph import InternalGraph
from .node import ModuleNode, Node, TensorNode

class InsertExprs:
    """The context of ``graph.insert_exprs()``: records calls on the graph's nodes into a scratch graph and
    splices the new exprs into the graph on exit."""

    def __init__(self, graph, expr=None):
        self.graph = graph
        self.expr = expr
        self.root = graph._root()
        self.tracer = None

    def __enter__(self):
        g = self.graph
        owner = g.owner
        if owner is None:
            raise RuntimeError(f"graph {g._name} has no module attached; use the TracedModule's graph")
        if self.root._total_ids is not None:
            Node._set_next_id(self.root._total_ids[0])
            Expr._set_next_id(self.root._total_ids[1])
        scope = InternalGraph(g._name, g._qualname)
        scope._namespace.merge(g._namespace)  # new names stay unique in the graph they are spliced into
        self.scope = scope
        tr = _tr._Tracer(insert=True)
        frame = _tr._Frame(scope, owner, g.inputs[0])
        frame.mnodes[id(owner)] = (owner, g.inputs[0])
        tr.frames.append(frame)
        tr.install()
        self.tracer = tr
        return self

    def __exit__(self, ty, va, tb):
        tr = self.tracer
        tr.uninstall()
        if va is not None:
            return False
        g, scope = self.graph, self.scope
        tr.finish()
        top = g.owner
        _replace_traced_children(self.root.owner or top, tr)
        produced = {n for e in scope._exprs for n in e.outputs}
        index = -1 if self.expr is None else g._exprs.index(self.expr)
        for e in scope._exprs:
            for n in e.inputs:
                if n not in produced and n.expr in g._exprs:
                    index = max(index, g._exprs.index(n.expr))
        index += 1
        for e in scope._exprs:
            e.top_graph = g
            for n in e.outputs:
                n.top_graph = g
            g._exprs.insert(index, e)
            index += 1
        g._namespace.used_names.update(scope._namespace.used_names)
        self.root._total_ids = (Node._get_next_id(), Expr._get_next_id())
        root_owner = self.root.owner
        if root_owner is not None:
            root_owner._update_ref()
        return False


def _replace_traced_children(root, tr):
    """Swap the modules traced during insert_exprs() for their TracedModules wherever they are attributes."""
    by_id = {i: shell for i, (m, shell) in tr.shells.items()}
    if not by_id:
        return
    seen = set()

    def visit(m):
        if id(m) in seen:
            return
        seen.add(id(m))
        for k, v in list(vars(m).items()):
            if isinstance(v, Module):
                if id(v) in by_id and by_id[id(v)] is not v:
                    setattr(m, k, by_id[id(v)])
                    v = by_id[id(v)]
                visit(v)

    visit(root)


def node_getattr(mnode, name):
    """``self_node.<name>`` inside insert_exprs(): a GetAttr expr for a sub-module or tensor attribute."""
    tr = _tr._active
    if tr is None or not tr.insert:
        raise AttributeError(f"'ModuleNode' object has no attribute {name!r} (a module's attributes are read "
                             "as graph exprs only inside graph.insert_exprs())")
    owner = mnode.owner
    value = getattr(owner, name)
    if not isinstance(value, (Module, Tensor)):
        return value
    frame = tr.frames[0]
    hit = (frame.mnodes if isinstance(value, Module) else frame.tmap).get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    g = frame.graph
    if mnode is frame.self_node:
        base, path = mnode, name
    elif isinstance(mnode.expr, GetAttr) and mnode.expr.inputs[0] is frame.self_node:
        base, path = frame.self_node, f"{mnode.expr.name}.{name}"
    else:
        base, path = mnode, name
    expr = GetAttr(base, path)
    g._add_expr(expr)
    qual = f"{mnode._qualname}.{name}"
    if isinstance(value, Module):
        node = g._new_node(ModuleNode, expr, path.replace(".", "_"), qual, module_type=type(value))
        node.owner = value
        frame.mnodes[id(value)] = (value, node)
    else:
        node = g._new_node(TensorNode, expr, path.replace(".", "_"), qual, **_tr._tensor_meta(value))
        frame.tmap[id(value)] = (value, node)
        tr.proxies[node] = value
    return node


def node_module_call(mnode, args, kwargs):
    """``module_node(*args)`` inside insert_exprs(): records the module call and returns its output nodes."""
    tr = _tr._active
    if tr is None or not tr.insert:
        raise RuntimeError(f"module node {mnode} can be called only inside graph.insert_exprs()")
    return tr._renode(tr.call_module(tr.value_for(mnode), args, kwargs))


def node_tensor_method(node, name, args, kwargs):
    tr = _tr._active
    if tr is None or not tr.insert:
        raise RuntimeError(f"{name} on TensorNode {node}: nodes compute only inside graph.insert_exprs()")
    obj = tr.value_for(node)
    return tr._renode(getattr(obj, name)(*args, **kwargs))
