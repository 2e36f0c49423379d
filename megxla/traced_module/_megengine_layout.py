"""Read TracedModules pickled by MegEngine 1.13 (``megengine.save(traced_module, "model.tm")``).

``megxla.load`` maps MegEngine's global names onto megxla's (``megengine.traced_module.expr.CallMethod`` is
megxla's ``CallMethod``), so a MegEngine file builds megxla's classes; but each object's pickled *state* is in
MegEngine's layout. The ``__setstate__`` of megxla's exprs, nodes, graphs, tree definitions and TracedModules
recognise that layout and call the converters here, which rewrite it into megxla's:

- a tree definition (``TreeDef`` / ``LeafDef``): MegEngine's leaves record the leaf's types and, for a
  constant, its value (``const_val``); megxla's TreeDef keeps constants in place and marks tensor / module
  positions with :data:`~.pytree.LEAF`;
- a call's argument structure: MegEngine's includes the called object (the module or the tensor a method is
  called on) as the first positional leaf, megxla's starts after it (``CallMethod._first_arg``); the keys of
  ``argdef_graph_map`` likewise include ``self`` in MegEngine's files;
- nodes: ``_shape`` / ``_dtype`` / ``_qparams`` become ``shape`` / ``dtype`` / ``qparams`` (the device is
  dropped: megxla places a graph's values where its inputs are); a module node's type is found again under
  megxla's package;
- builtin (leaf) modules are pickled by MegEngine as ``_ModuleState`` (class name + ``__dict__``): they are
  rebuilt as megxla modules of the same class (megxla's modules keep MegEngine's attribute names);
- an ``Apply`` holds an op descriptor's class and parameters: it becomes megxla's descriptor of that class.

A state is MegEngine's when it lacks the ``_top_graph`` field every megxla expr, node and graph pickles (a
TracedModule's when it carries MegEngine's ``dump_info``).
"""
from __future__ import annotations

import importlib
import pickle

import numpy as np

__all__ = ["is_megengine_state", "treedef_state", "expr_state", "node_state", "graph_state",
           "traced_module_state", "module_from_state", "drop_self"]


def is_megengine_state(state) -> bool:
    """Whether an expr / node / graph state dict was written by MegEngine (megxla always pickles
    ``_top_graph``)."""
    return isinstance(state, dict) and "_top_graph" not in state


def _resolve(module: str, name: str):
    """The object a file names ``module.name``: MegEngine's names (``megengine.module.linear``) are looked up
    under megxla (the nearest importable package decides, as in ``megxla.load``); others are imported as
    they are (a user's module class or a function passed to ``wrap``)."""
    if module == "megengine" or module.startswith("megengine."):
        from .._serialization import _megxla_global
        return _megxla_global("megxla" + module[len("megengine"):], name)
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


# ---- tree definitions ----------------------------------------------------------------------------------------
def treedef_state(state: dict) -> dict:
    """A MegEngine ``TreeDef`` / ``LeafDef`` state -> megxla's TreeDef slots."""
    from .node import Node
    from .pytree import LEAF, TreeDef
    if "children_defs" in state and "const_val" not in state:  # a container
        children = [c if isinstance(c, TreeDef) else TreeDef(None, value=c) for c in state["children_defs"]]
        typ = state["type"]
        if typ is not None and typ.__module__ == "collections" and typ.__name__ == "defaultdict":
            typ = dict  # (flattened like dict by both; megxla rebuilds a plain dict)
        aux = state.get("aux_data")
        if isinstance(aux, list):
            aux = tuple(aux)
        return {"type": typ, "aux": aux, "children": tuple(children), "value": None,
                "num_leaves": sum(c.num_leaves for c in children)}
    types = state.get("type") or ()
    types = types if isinstance(types, tuple) else (types,)
    # a tensor or module position: MegEngine lists the node classes among the leaf's types
    is_leaf = any(isinstance(t, type) and issubclass(t, Node) for t in types)
    value = LEAF if is_leaf else state.get("const_val")
    return {"type": None, "aux": None, "children": (), "value": value, "num_leaves": 1 if is_leaf else 0}


def drop_self(argdef):
    """MegEngine's ``((self, *args), kwargs)`` structure -> megxla's ``(args, kwargs)``."""
    from .pytree import TreeDef
    if argdef is None or argdef.type is not tuple or len(argdef.children) != 2:
        raise pickle.UnpicklingError(f"load: unexpected MegEngine call structure {argdef!r} (expected "
                                     "(args, kwargs))")
    args, kwargs = argdef.children
    if not args.children or args.children[0].num_leaves != 1:
        raise pickle.UnpicklingError(f"load: MegEngine call structure {argdef!r} does not start with the "
                                     "called object")
    return TreeDef(tuple, None, [TreeDef(args.type, args.aux, args.children[1:]), kwargs])


# ---- exprs ---------------------------------------------------------------------------------------------------
def expr_state(expr, state: dict) -> dict:
    """A MegEngine expr state -> megxla's (for ``type(expr)``); ``expr`` is the object being built."""
    from .expr import Apply, CallFunction, CallMethod, Constant
    from .serialization import _ModuleState
    st = {"_id": state.get("_id", 0), "inputs": list(state.get("inputs") or []),
          "outputs": list(state.get("outputs") or []), "arg_def": state.get("arg_def"),
          "out_def": state.get("out_def"), "_top_graph": None,
          "_disable_remove": bool(state.get("_disable_remove", False))}
    if "name" in state:
        st["name"] = state["name"]
    if isinstance(expr, CallMethod):
        st["method"] = state["method"]
        # the called object is inputs[0] in both layouts; MegEngine's structure lists it too
        st["arg_def"] = drop_self(st["arg_def"])
    elif isinstance(expr, CallFunction):
        func = state["func"]
        if isinstance(func, tuple):
            try:
                func = _resolve(*func)
            except (ImportError, AttributeError, pickle.UnpicklingError) as exc:
                raise pickle.UnpicklingError(f"load: the TracedModule file calls {func[0]}.{func[1]}, which "
                                             f"cannot be found ({exc})") from None
        st["func"] = getattr(func, "_tm_original", func)  # a wrap()ped function: the expr holds the original
    elif isinstance(expr, Apply):
        st["opdef"] = _opdef(state)
        st["arg_def"] = st["out_def"] = None
    elif isinstance(expr, Constant):
        value = state.get("value")
        st["value"] = value.to_module() if isinstance(value, _ModuleState) else value
    if st["arg_def"] is not None and st["arg_def"].num_leaves != len(st["inputs"]) - expr._first_arg:
        raise pickle.UnpicklingError(f"load: a MegEngine {type(expr).__name__} expr has {len(st['inputs'])} "
                                     f"inputs for the argument structure {st['arg_def']!r}")
    return st


# MegEngine's descriptors spell "not given" as out-of-range values (MEGDNN_MAX_NDIM for an axis, INT_MAX for a
# reduction axis); megxla's use None
_UNSET = {"GetVarShape": {"axis": 7}, "Reshape": {"axis": 7},
          "Reduce": {"axis": 2 ** 31 - 1, "data_type": "DEFAULT"}}


def _opdef(state):
    """megxla's builtin op descriptor for MegEngine's ``opdef_state`` (its class and parameters)."""
    if "opdef_state" in state:
        params = dict(state["opdef_state"])
    else:  # MegEngine 1.6's layout: {"opdef": {"type": cls, **params}}
        params = dict(state.get("opdef") or {})
        params["opdef_type"] = params.pop("type", None)
    cls = params.pop("opdef_type", None)
    for key, unset in _UNSET.get(getattr(cls, "__name__", None), {}).items():
        if key in params and params[key] == unset:
            params[key] = None
    from ..core.ops.builtin import OpDef
    if not (isinstance(cls, type) and issubclass(cls, OpDef)):
        raise pickle.UnpicklingError(f"load: the TracedModule file applies the op {cls!r}, which megxla does "
                                     "not have as a builtin op descriptor (megxla.core.ops.builtin)")
    try:
        return cls(**params)
    except (TypeError, ValueError) as exc:
        raise pickle.UnpicklingError(f"load: cannot rebuild the op {cls.__name__}({params}) of a MegEngine "
                                     f"TracedModule file: {exc}") from None


# ---- nodes ---------------------------------------------------------------------------------------------------
def node_state(node, state: dict) -> dict:
    """A MegEngine ``TensorNode`` / ``ModuleNode`` state -> megxla's."""
    from .node import ModuleNode
    st = {"expr": state.get("expr"), "users": list(state.get("users") or []), "_id": state.get("_id", 0),
          "_name": state.get("_name"), "_qualname": state.get("_qualname", state.get("_orig_name")),
          "_top_graph": None, "actual_node": []}
    if isinstance(node, ModuleNode):
        mt = state.get("module_type")
        if isinstance(mt, tuple):
            try:
                mt = _resolve(*mt)
            except Exception:  # a class that is not importable here: set from the owner once attached
                pass
        st["module_type"] = mt
        st["_owner"] = None
    else:
        shape = state.get("_shape")
        st["shape"] = tuple(int(s) for s in shape) if shape is not None else None
        dtype = state.get("_dtype")
        st["dtype"] = np.dtype(dtype) if dtype is not None and not hasattr(dtype, "_quant_type") else dtype
        st["qparams"] = state.get("_qparams")
        st["value"] = None
    return st


# ---- graphs --------------------------------------------------------------------------------------------------
def graph_state(state: dict) -> dict:
    """A MegEngine ``InternalGraph`` state -> megxla's."""
    from .graph import NameSpace
    name, qualname = state.get("_name"), state.get("_qualname")
    ns = NameSpace(name, qualname)
    old = state.get("_namespace")
    used = getattr(old, "_used_names", None) or getattr(old, "used_names", None) or {}
    # names MegEngine reserved for qualnames (``func_matmul``) have no node: megxla's namespace holds nodes
    ns.used_names = {k: v for k, v in used.items() if v is not None}
    total = state.get("_total_ids")
    return {"_exprs": list(state.get("_exprs") or []), "_inputs": list(state.get("_inputs") or []),
            "_outputs": list(state.get("_outputs") or []), "_name": name, "_qualname": qualname,
            "_namespace": ns, "_top_graph": None, "_total_ids": tuple(total) if total else None,
            "_watch_point": [], "_end_point": [], "_sinks": None}


def _complete_namespace(graph):
    for n in graph.nodes(False):
        if n._name is not None and n._name not in graph._namespace.used_names:
            graph._namespace.used_names[n._name] = n


# ---- modules -------------------------------------------------------------------------------------------------
def module_from_state(module_ref, state: dict):
    """A megxla module of MegEngine's class ``module_ref`` (``(module path, class name)``) with MegEngine's
    ``__dict__`` ``state``."""
    from ..module.module import Module
    try:
        cls = _resolve(*module_ref)
    except (ImportError, AttributeError, pickle.UnpicklingError) as exc:
        raise pickle.UnpicklingError(f"load: the TracedModule file holds a {module_ref[0]}.{module_ref[1]}, "
                                     f"which megxla does not have ({exc})") from None
    if not (isinstance(cls, type) and issubclass(cls, Module)):
        raise pickle.UnpicklingError(f"load: {module_ref[0]}.{module_ref[1]} is not a Module class")
    obj = cls.__new__(cls)
    # (a quantized module's __setstate__ derives megxla's fields -- scale Tensors, an Elemwise's float function,
    # a convolution's repr -- from MegEngine's dtypes and attributes, as for a whole pickled model)
    obj.__setstate__(dict(state))
    return obj


def traced_module_state(state: dict) -> dict:
    """A MegEngine ``TracedModule`` ``__dict__`` -> megxla's: builtin sub-modules rebuilt, graph keys without
    ``self``, MegEngine's bookkeeping fields dropped."""
    from .serialization import _ModuleState
    st = {}
    for k, v in state.items():
        if k in ("dump_info", "watch_node_value", "_m_dump_modulestate"):
            continue
        st[k] = v.to_module() if isinstance(v, _ModuleState) else v
    gmap, omap = st.get("argdef_graph_map") or {}, st.get("argdef_outdef_map") or {}
    st["argdef_graph_map"] = {drop_self(k): g for k, g in gmap.items()}
    st["argdef_outdef_map"] = {drop_self(k): o for k, o in omap.items()}
    for g in st["argdef_graph_map"].values():
        _complete_namespace(g)
    st.setdefault("_is_top", False)
    st.setdefault("is_qat", False)
    st.setdefault("argspec", None)
    st["watch_points"], st["end_points"] = [], []
    mods = st.get("_modules")
    if isinstance(mods, list):
        st["_modules"] = [m for m in mods if m != "watch_node_value"]
    return st
