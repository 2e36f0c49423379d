"""``megengine.utils.network_node``: the variables (:class:`VarNode`) and operators (:class:`OpNode`) of a network.

A network built by hand (:class:`~megxla.utils.network.Network`: ``make_const``, then functional calls and Tensor
operators on its variables) has variables that are Tensors. Every op ``apply`` computes on them is recorded in the
network as an :class:`OpNode` -- MegEngine's operator type and name, the op's parameters, its input and output
variables -- and its results are variables of the same network: the graph is data a program can walk
(``var.owner.inputs``, ``net.all_oprs``). Values are computed as the graph is built (MegEngine computes them when
the graph is compiled and executed), so ``var.numpy()`` reads one at once.

A loaded graph's variables and operators (:mod:`megxla.core.tensor.megbrain_graph`, read from a ``trace.dump``)
hold no values; they count as ``VarNode`` / ``OpNode`` here too (``isinstance``), as MegEngine's ``Network.load``
gives this module's classes.

Example:
    >>> import numpy as np
    >>> from megxla.utils.network import Network
    >>> net = Network()
    >>> x = net.make_const(np.array([1.0, 2.0], "float32"), name="x")
    >>> y = x * 2 + 1
    >>> isinstance(y, VarNode), y.numpy()
    (True, array([3., 5.], dtype=float32))
    >>> y.owner.type, [v.owner.type for v in y.owner.inputs]
    ('Elemwise', ['Elemwise', 'ImmutableTensor'])
"""
from __future__ import annotations

import abc
import itertools

from ..core._lazy import Lazy
from ..core._tensor import Tensor
from ..core.tensor import megbrain_graph as _G
from ..jit._dump import _TYPES

# MegEngine's operator classes of this module (``N.Host2DeviceCopy``...): the type names a graph here has
_OPR_TYPES = sorted(set(_TYPES.values()) | {"Elemwise", "Reduce", "Host2DeviceCopy", "ImmutableTensor"})

__all__ = ["NetworkNode", "VarNode", "OpNode", "type_name"] + sorted(_OPR_TYPES)

_ids = itertools.count(1)  # variables' and operators' ids: unique in the process, as MegBrain's are in a graph
_new = object.__new__


class NetworkNode:
    """Base of :class:`VarNode` and :class:`OpNode`, as MegEngine's."""

    __slots__ = ()


class VarNode(NetworkNode, Tensor, metaclass=abc.ABCMeta):
    """A variable of a :class:`~megxla.utils.network.Network`: a Tensor holding its value, with the operator that
    produced it (``owner``), the operators that read it (``users``), a ``name`` unique in the network and an
    ``id``. ``VarNode(var)`` is another Python object for the same variable (MegEngine's test helpers copy
    variables so).

    The functional API takes a VarNode wherever it takes a Tensor; an op on variables of one network gives
    variables of that network (a Tensor among the inputs becomes an ``ImmutableTensor`` operator of it), on
    variables of two networks it raises. Rebinding a variable in place (``y += x``, ``x[i] = v``,
    ``x.set_value(v)``) makes it the new result; the graph keeps the old value where it was read.

    Example:
        >>> import numpy as np
        >>> from megxla.utils.network import Network
        >>> net = Network()
        >>> a = net.make_const(np.arange(3, dtype="float32"), name="a")
        >>> b = a.sum()
        >>> b.name, b.owner.type, b.owner.inputs[0] is a, b.numpy()
        ('REDUCE_SUM', 'Reduce', True, array(3., dtype=float32))
    """

    __slots__ = ()  # (a Tensor's layout: an op's result Tensor becomes a VarNode in place, see Network._applied)
    # graph facts, kept in the instance ``__dict__`` Tensor has; the class defaults are those of no network
    _net = None  # the Network
    _owner = None  # the OpNode producing the value
    _var_id = None  # the variable's id: objects for one variable (``VarNode(var)``, a rebound one) share it
    _users = None  # the OpNodes reading the variable (one list for all its objects)
    _novalue = False  # an input's (make_input_node) or computed from one: its placeholder value is no value

    def numpy(self):
        if self._novalue:
            raise RuntimeError(f"{self!r} has no value: it is an input of its Network (make_input_node) or computed "
                               f"from one (or from a constant set_value changed since); dump the network and run it "
                               f"with its inputs (GraphInference)")
        return super().numpy()

    def __init__(self, var, *, owner_opr=None, name=None):
        if type(var) is not VarNode or var._net is None:
            raise TypeError(f"VarNode(var): var must be a variable of a Network (its .var), got {type(var).__name__}; "
                            f"make variables with Network.make_const")
        _alias(var, self)
        if owner_opr is not None:
            self._owner = owner_opr
        if name is not None:
            self._name = name

    @property
    def var(self):
        """The graph variable (MegEngine's MegBrain variable): here the variable itself."""
        return self

    @property
    def network(self):
        return self._net

    @property
    def graph(self):
        """The network's graph: ``OutputNode(var)`` and ``var.graph.compile(outputs).execute()`` read values."""
        return None if self._net is None else self._net.graph

    @property
    def owner(self):
        """The :class:`OpNode` that produces this variable."""
        return self._owner

    @owner.setter
    def owner(self, opr):
        self._owner = opr

    def set_owner_opr(self, owner_opr):
        self._owner = owner_opr

    @property
    def users(self):
        """The :class:`OpNode` s that read this variable."""
        if self._users is None:
            self._users = []
        return self._users

    @property
    def id(self):
        if self._var_id is None:
            self._var_id = next(_ids)
        return self._var_id

    def _reset(self, other):
        # NOTE: ``+=``, ``x[i] = v`` and ``set_value`` rebind the Tensor object; the graph must keep what it recorded,
        # so its places for this object take a copy holding the old value first (Network._rebinding)
        net = self._net
        if net is None:
            return super()._reset(other)
        return net._rebinding(self, other, super()._reset)

    def __repr__(self):
        return "VarNode:" + self.name

    def __str__(self):  # (MegEngine prints a variable as its repr, by name: not a Tensor's value)
        return self.__repr__()

    @property
    def partial_shape(self):
        """The variable's inferred shape, a tuple (MegEngine's)."""
        return tuple(self.shape)

    def __copy__(self):
        return VarNode(self)

    def __reduce_ex__(self, protocol):
        raise TypeError(f"{self!r}: a Network's variable cannot be pickled (its graph is not); pickle its value, "
                        f"var.numpy() or Tensor(var)")

    def __deepcopy__(self, memo):  # (a copy of the value, not a variable: a graph is not copied with one variable)
        return Tensor(self.numpy(), dtype=self.dtype, device=getattr(self, "_lnode", None))


def _alias(src, dst):
    """Make ``dst`` (a VarNode object) another object for ``src``'s variable: its value and graph facts."""
    dst._data, dst._vid, dst._grad, dst._name = src._data, src._vid, None, src._name
    for slot in ("_lnode", "_qparams"):
        v = getattr(src, slot, None)
        if v is not None:
            setattr(dst, slot, v)
    if type(dst._data) is Lazy:  # (an auto-jit cluster's pending value: this object gets it too)
        dst._data.hold(dst)
    dst._net, dst._owner, dst._var_id, dst._users = src._net, src._owner, src.id, src.users
    dst._novalue = src._novalue
    return dst


def _new_var(net, tensor, owner, name):
    """A new VarNode object for ``tensor``'s value, produced by ``owner`` in ``net``."""
    v = _new(VarNode)
    v._data, v._vid, v._grad, v._name = tensor._data, tensor._vid, None, name
    for slot in ("_lnode", "_qparams"):
        x = getattr(tensor, slot, None)
        if x is not None:
            setattr(v, slot, x)
    if type(v._data) is Lazy:
        v._data.hold(v)
    v._net, v._owner, v._var_id, v._users = net, owner, next(_ids), []
    return v


class OpNode(NetworkNode, metaclass=abc.ABCMeta):
    """An operator of a network: MegEngine's operator ``type`` (``"Elemwise"``, ``"Reduce"``,
    ``"ImmutableTensor"``...), a ``name`` unique in the network, the op's ``params`` (a dict), and its
    ``inputs`` and ``outputs`` (:class:`VarNode` lists). ``op`` is megxla's op that computed it (None for a
    constant)."""

    type = None

    def __init__(self):
        self.inputs, self.outputs, self.params = [], [], {}
        self.name = None
        self.op = None
        self.id = next(_ids)

    priority = 0  # (comp_graph_tools orders operators by (priority, id), as a loaded graph's)

    # MegEngine's Host2DeviceCopy and ImmutableTensor operators describe their one output
    _PROVIDERS = ("Host2DeviceCopy", "ImmutableTensor")

    def _provided(self, what):
        if self.type not in self._PROVIDERS or len(self.outputs) != 1:
            raise AttributeError(f"{self!r}: only an input or constant operator has .{what}")
        return self.outputs[0]

    @property
    def shape(self):
        return self._provided("shape").shape

    @property
    def dtype(self):
        return self._provided("dtype").dtype

    @property
    def device(self):
        return self._provided("device").device

    def numpy(self):
        """A constant operator's value."""
        if self.type != "ImmutableTensor":
            raise AttributeError(f"{self!r}: only a constant (ImmutableTensor) operator has a value")
        return self.outputs[0].numpy()

    def set_value(self, data, device=None):
        """Give a constant (``ImmutableTensor``) operator a new value, as MegEngine's: everything reading it
        reads the new value (float64 becomes float32, int64 int32). The variables computed from it so far held
        the old value; they read as having no value until the network is dumped and run again."""
        if self.type != "ImmutableTensor":
            raise TypeError(f"{self!r}.set_value: only a constant (ImmutableTensor) operator has a value to set")
        (var,) = self.outputs
        t = Tensor(data, device=device if device is not None else getattr(var, "_lnode", None))
        var._data, var._vid = t._data, t._vid
        seen, queue = set(), list(var.users)
        while queue:  # NOTE: values are computed as the graph is built; those from the old value are now stale
            op = queue.pop()
            if op.id in seen:
                continue
            seen.add(op.id)
            for o in op.outputs:
                o._novalue = True
                queue.extend(o.users)

    def add_inp_var(self, x):
        self.inputs.append(x)

    def add_out_var(self, x):
        self.outputs.append(x)

    def __repr__(self):
        return "%s{%s}" % (self.name, self.type)


# a loaded graph's nodes (no values) are this module's kinds too: code walking a Network checks isinstance so
VarNode.register(_G.VarNode)
OpNode.register(_G.OpNode)


class _OprType(abc.ABCMeta):
    # NOTE: operators here are OpNodes whose ``type`` is a name (a loaded graph's and a hand-built one's alike), so
    # ``isinstance(opr, Host2DeviceCopy)`` compares that name rather than Python classes
    def __instancecheck__(cls, obj):
        return isinstance(obj, OpNode) and obj.type == cls.type


def type_name(node_type):
    """The operator type name of ``node_type``: a name, or one of this module's operator classes."""
    return node_type.type if isinstance(node_type, _OprType) else node_type


for _name in _OPR_TYPES:
    globals()[_name] = _OprType(_name, (OpNode,), {
        "type": _name, "__module__": __name__,
        "__doc__": f"MegEngine's ``{_name}`` operators (``isinstance`` compares an OpNode's ``type``)."})
del _name
