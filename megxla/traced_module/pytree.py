"""Nested Python containers <-> a flat list of leaves plus a :class:`TreeDef` describing the structure.

TracedModule flattens the arguments and results of every recorded call: Tensors (or graph Nodes) become
leaves, everything else (ints, strings, None, dtypes, modules...) stays inside the TreeDef as a constant, so
two calls have the same TreeDef exactly when they differ only in tensor values. That is what keys a traced
graph (``TracedModule.argdef_graph_map``).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, List, Tuple

from ..core._tensor import Tensor

__all__ = ["register_supported_type", "tree_flatten", "tree_unflatten", "TreeDef", "LEAF"]

# type -> (flatten(obj) -> (children list, aux), unflatten(children list, aux) -> obj)
SUPPORTED_TYPES: dict = {}


def register_supported_type(type, flatten_fn: Callable[[Any], Tuple[List, Any]] = None,
                            unflatten_fn: Callable[[List, Any], Any] = None):
    r"""Teach TracedModule to look inside a container type when it flattens call arguments and results.

    Without registration an object of ``type`` is an opaque constant: Tensors inside it would be baked in.

    Args:
        type: the container class.
        flatten_fn: ``flatten_fn(obj) -> (children, aux)``; children may hold Tensors and nested containers,
            ``aux`` is any hashable, comparable description of the rest. Default: ``(list(obj), None)``.
        unflatten_fn: ``unflatten_fn(children, aux) -> obj``. Default: ``type(children)``.

    Example:
        >>> import megxla.traced_module as tm
        >>> class Pair(tuple):
        ...     pass
        >>> tm.register_supported_type(Pair, lambda p: (list(p), None), lambda c, aux: Pair(c))
    """
    if flatten_fn is None:
        flatten_fn = lambda obj: (list(obj), None)  # noqa: E731
    if unflatten_fn is None:
        unflatten_fn = lambda children, aux: type(children)  # noqa: E731
    SUPPORTED_TYPES[type] = (flatten_fn, unflatten_fn)


def _dict_flatten(d):
    try:
        keys = sorted(d.keys())  # MegEngine's order: keys sorted (outputs of a dict come sorted)
    except TypeError:  # keys of mixed types
        keys = sorted(d.keys(), key=repr)
    return [d[k] for k in keys], tuple(keys)


def _dict_unflatten(children, keys):
    return dict(zip(keys, children))


def _odict_flatten(d):
    return list(d.values()), tuple(d.keys())


def _odict_unflatten(children, keys):
    return OrderedDict(zip(keys, children))


register_supported_type(list, lambda x: (list(x), None), lambda c, aux: list(c))
register_supported_type(tuple, lambda x: (list(x), None), lambda c, aux: tuple(c))
register_supported_type(dict, _dict_flatten, _dict_unflatten)
register_supported_type(OrderedDict, _odict_flatten, _odict_unflatten)
register_supported_type(slice, lambda s: ([s.start, s.stop, s.step], None), lambda c, aux: slice(*c))


class _Leaf:
    """The marker of a leaf position in a TreeDef (a Tensor or Node stood there)."""

    def __repr__(self):
        return "Tensor"

    def __reduce__(self):
        return (_leaf, ())


def _leaf():
    return LEAF


LEAF = _Leaf()


class TreeDef:
    """The structure of a flattened object: a container type with aux data and children, a leaf marker, or a
    constant (any non-container, non-tensor value, kept as it is)."""

    __slots__ = ("type", "aux", "children", "value", "num_leaves")

    def __init__(self, type, aux=None, children=(), value=None):
        self.type = type  # None: a constant or the leaf marker (then ``value`` holds it)
        self.aux = aux
        self.children = tuple(children)
        self.value = value
        if type is None:
            self.num_leaves = 1 if value is LEAF else 0
        else:
            self.num_leaves = sum(c.num_leaves for c in self.children)

    def _key(self):
        if self.type is None:
            v = self.value
            if v is LEAF:
                return (LEAF,)
            try:
                hash(v)
            except TypeError:
                return ("id", id(v))
            return ("const", type(v), v)
        return (self.type, self.aux, self.children)

    def __eq__(self, other):
        if not isinstance(other, TreeDef):
            return NotImplemented
        try:
            return bool(self._key() == other._key())
        except Exception:  # a constant whose == is elementwise or raises: compare identity
            return self is other

    def __hash__(self):
        k = self._key()
        try:
            return hash(k)
        except TypeError:
            return hash(self.type)

    def unflatten(self, leaves):
        """Rebuild the object from ``leaves`` (MegEngine's ``TreeDef.unflatten``; :func:`tree_unflatten`).

        Raises:
            AssertionError: ``leaves`` is not ``num_leaves`` long (MegEngine asserts it).
        """
        assert len(leaves) == self.num_leaves, f"expected {self.num_leaves} leaves, got {len(leaves)}"
        return tree_unflatten(self, leaves)

    def __getstate__(self):
        return {s: getattr(self, s) for s in self.__slots__}

    def __setstate__(self, state):
        if "children_defs" in state or "const_val" in state:  # MegEngine's TreeDef / LeafDef
            from ._megengine_layout import treedef_state
            state = treedef_state(state)
        for k, v in state.items():
            object.__setattr__(self, k, v)

    def __repr__(self):
        # MegEngine's format: constants by str() (``nearest``, not ``'nearest'``), a 1-tuple without its comma
        if self.type is None:
            return repr(self.value) if self.value is LEAF else f"{self.value}"
        if self.type in (list, tuple):
            inner = ", ".join(repr(c) for c in self.children)
            return f"[{inner}]" if self.type is list else f"({inner})"
        if self.type in (dict, OrderedDict):
            return "{" + ", ".join(f"{k!r}:{c!r}" for k, c in zip(self.aux, self.children)) + "}"
        return f"{self.type.__name__}({', '.join(repr(c) for c in self.children)})"


# MegEngine's files name its leaf class ``megengine.traced_module.pytree.LeafDef``: megxla reads it as a TreeDef
# (one class for containers, constants and leaves; see ``TreeDef.__setstate__``)
LeafDef = TreeDef


class ArgsIndex:
    """MegEngine's marker type of a graph argument's position; its files list it among a leaf's types."""

    def __init__(self, index=0, name=""):
        self.index = index
        self.name = name

    def __repr__(self):
        return self.name


def _is_tensor(x):
    return isinstance(x, Tensor)


def is_value(x):
    """Whether ``x`` is a leaf of any kind to :func:`tree_flatten`: not a supported container (tensors, numbers,
    strings, None...)."""
    return type(x) not in SUPPORTED_TYPES and not (isinstance(x, tuple) and hasattr(x, "_fields"))


def tree_flatten(obj, is_leaf: Callable[[Any], bool] = _is_tensor, *, leaf_type: Callable = None,
                 is_const_leaf: Callable[[Any], bool] = None):
    """Flatten ``obj``: returns ``(leaves, treedef)`` where leaves are the objects ``is_leaf`` accepts.

    Args:
        obj: nested lists, tuples, dicts, slices, namedtuples and registered containers.
        is_leaf: which objects are leaves (default: Tensors; other non-containers stay in the TreeDef).
        leaf_type: MegEngine's keyword (the types a leaf's def accepts); accepted and unused.
        is_const_leaf: MegEngine's keyword. Given (as ``leaf_type``), every non-container object is a leaf, as
            in MegEngine's ``tree_flatten`` (projects map a function over all leaves and rebuild with
            ``treedef.unflatten``, e.g. MegEngine's Cambricon example's ``utils.tree_map``).

    Example:
        >>> leaves, td = tree_flatten((1, [None]), is_const_leaf=lambda x: True)
        >>> leaves, td.unflatten([2, "a"])
        ([1, None], (2, ['a']))
    """
    if leaf_type is not None or is_const_leaf is not None:
        is_leaf = is_value
    leaves = []

    def walk(o):
        if is_leaf(o):
            leaves.append(o)
            return TreeDef(None, value=LEAF)
        entry = SUPPORTED_TYPES.get(type(o))
        if entry is None and isinstance(o, tuple) and hasattr(o, "_fields"):  # namedtuple
            return TreeDef(type(o), None, [walk(c) for c in o])
        if entry is None:
            return TreeDef(None, value=o)
        children, aux = entry[0](o)
        return TreeDef(type(o), aux, [walk(c) for c in children])

    return leaves, walk(obj)


def tree_unflatten(treedef: TreeDef, leaves):
    """Rebuild the object ``treedef`` describes, taking its leaves in order from ``leaves``."""
    it = iter(leaves)

    def build(td):
        if td.type is None:
            return next(it) if td.value is LEAF else td.value
        children = [build(c) for c in td.children]
        entry = SUPPORTED_TYPES.get(td.type)
        if entry is None:  # namedtuple
            return td.type(*children)
        return entry[1](children, td.aux)

    return build(treedef)
