"""Loaders that adapt the exprs of a TracedModule while it is unpickled (MegEngine's compatibility hooks).

A loader is registered for a functional function (``("megengine.functional.nn", "conv2d")``), a Tensor method
(``"__add__"``), a module class (``("megengine.module.conv", "Conv2d")``) or a builtin op descriptor class
(``Elemwise``); it is called with each matching expr of a loaded graph and may rewrite it (``set_arg``,
``set_args_kwargs``, new exprs feeding its inputs). Names under ``megengine`` mean megxla's.
After the loaders ran, exprs they created are placed before their users and the graph's ids are renumbered.
"""
from __future__ import annotations

from .expr import Apply, CallFunction, CallMethod, Input
from .node import ModuleNode, TensorNode

__all__ = ["register_opdef_loader", "register_functional_loader", "register_module_loader",
           "register_tensor_method_loader", "OPDEF_LOADER", "FUNCTIONAL_LOADER", "MODULE_LOADER",
           "TENSORMETHOD_LOADER"]

OPDEF_LOADER = {}
FUNCTIONAL_LOADER = {}
TENSORMETHOD_LOADER = {}
MODULE_LOADER = {}


def _ours(key):
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str) and \
            (key[0] == "megengine" or key[0].startswith("megengine.")):
        return ("megxla" + key[0][len("megengine"):], key[1])
    return key


def _register(table, keys):
    def callback(loader):
        for k in keys:
            k = _ours(k)
            assert k not in table, f"a loader for {k!r} is registered already"
            table[k] = loader
        return loader
    return callback


def register_opdef_loader(*opdefs):
    """Decorator: ``loader(expr)`` runs on each loaded Apply expr of these builtin descriptor classes; it may
    edit ``expr.opdef_state`` (the descriptor is rebuilt from it)."""
    return _register(OPDEF_LOADER, opdefs)


def register_functional_loader(*funcs):
    """Decorator: ``loader(expr)`` runs on each loaded CallFunction of these ``(module, name)`` functions."""
    return _register(FUNCTIONAL_LOADER, funcs)


def register_module_loader(*module_types):
    """Decorator: ``loader(expr)`` runs on each loaded call of modules of these ``(module, class name)``."""
    return _register(MODULE_LOADER, module_types)


def register_tensor_method_loader(*methods):
    """Decorator: ``loader(expr)`` runs on each loaded CallMethod of these Tensor method names."""
    return _register(TENSORMETHOD_LOADER, methods)


class _ModuleState:
    """How MegEngine's files hold a builtin (leaf) module of a TracedModule: its class as ``(module path, class
    name)`` and its ``__dict__``. :meth:`to_module` rebuilds it as megxla's module of that class, once (a module
    shared by several attributes stays one object)."""

    def __setstate__(self, state):
        self.module = tuple(state["module"])
        self.state = state["state"]
        self.version = state.get("version")
        self.obj = None

    def to_module(self):
        if self.obj is None:
            from ._megengine_layout import module_from_state
            self.obj = module_from_state(self.module, self.state)
        return self.obj


def _type_key(t):
    return (t.__module__, t.__qualname__) if isinstance(t, type) else t


def run_loaders(graph):
    """Apply the registered loaders to ``graph``'s exprs, then splice in the exprs they created."""
    if not (OPDEF_LOADER or FUNCTIONAL_LOADER or TENSORMETHOD_LOADER or MODULE_LOADER):
        return False
    changed = False
    for e in list(graph._exprs):
        if isinstance(e, CallFunction):
            loader = FUNCTIONAL_LOADER.get((getattr(e.func, "__module__", None), getattr(e.func, "__qualname__", None)))
            if loader is not None:
                loader(e)
                changed = True
        elif isinstance(e, CallMethod) and e.method == "__call__" and isinstance(e.inputs[0], ModuleNode):
            owner = e.inputs[0].owner
            loader = MODULE_LOADER.get(_type_key(type(owner) if owner is not None else e.inputs[0].module_type))
            if loader is not None:
                loader(e)
                changed = True
        elif isinstance(e, CallMethod):
            loader = TENSORMETHOD_LOADER.get(e.method)
            if loader is not None:
                loader(e)
                changed = True
        elif isinstance(e, Apply):
            loader = OPDEF_LOADER.get(type(e.opdef))
            if loader is not None:
                loader(e)
                state = dict(e.opdef_state)
                e.opdef = state.pop("opdef_type")(**state)
                e.__dict__.pop("_opdef_state", None)
                changed = True
    if changed:
        _splice(graph)
    return changed


def _splice(graph):
    i = 0
    while i < len(graph._exprs):  # a producer the graph does not hold yet goes right before its first user
        e = graph._exprs[i]
        new = [n.expr for n in e.inputs if n.expr is not None and not isinstance(n.expr, Input)
               and n.expr not in graph._exprs]
        if new:
            graph._exprs.insert(i, new[0])
            continue
        i += 1
    for e in graph._exprs:
        e.top_graph = graph
        for n in set(e.inputs):
            want = e.inputs.count(n)
            have = sum(1 for u in n.users if u is e)
            for _ in range(want - have):
                n.users.append(e)
            for _ in range(have - want):
                n.users.remove(e)
        for o in e.outputs:
            o.expr = e
            if o.top_graph is not graph or o._name is None:
                base = e.method.strip("_") if isinstance(e, CallMethod) else type(e).__name__.lower()
                graph._adopt_node(o, f"{base}_out" if isinstance(o, TensorNode) else base)
    for n in graph.nodes(False):
        n.users[:] = [u for u in n.users if n in u.inputs]
