"""``megengine.core._imperative_rt.common``: where MegEngine's pickled files find ``CompNode`` (a device), and the
plain records MegEngine's runtime describes tensors and operators with (``TensorAttr``, ``OperatorNodeConfig``)."""
from __future__ import annotations

import numpy as np

from ..dtypes import CompNode as _CompNode

__all__ = ["CompNode"]


class CompNode(_CompNode):
    """megxla's :class:`~megxla.core.dtypes.CompNode`, built also the way MegEngine unpickles one: created empty,
    then given its device name as the state. A device this machine lacks (``gpu0`` in a file written on a GPU
    machine) becomes the default device ``xpux``, where megxla's loaded tensors live too.

    Example:
        >>> import pickle
        >>> c = CompNode.__new__(CompNode)
        >>> c.__setstate__("xpux:0")
        >>> str(c)
        'xpux:0'
    """

    __slots__ = ()

    def __setstate__(self, name):
        try:
            _CompNode.__init__(self, name)
        except ValueError:
            _CompNode.__init__(self, "xpux")


class TensorAttr:
    """What MegEngine's runtime knows of a tensor before it has a value: ``shape`` (a tuple, ``()`` while
    unknown), ``dtype`` and ``comp_node`` (its device). :func:`megxla.core._imperative_rt.imperative.
    make_backward_graph` takes one per input.

    Example:
        >>> a = TensorAttr(); a.dtype = "float32"; a.comp_node = "xpux"
        >>> a
        TensorAttr(shape=(), dtype=float32, comp_node=xpux)
    """

    __slots__ = ("shape", "dtype", "comp_node")

    def __init__(self, shape=(), dtype=None, comp_node=None):
        self.shape, self.dtype, self.comp_node = tuple(shape), dtype, comp_node

    def __repr__(self):
        return f"TensorAttr(shape={self.shape}, dtype={self.dtype}, comp_node={self.comp_node})"


__all__ += ["TensorAttr"]


class OperatorNodeConfig:
    """What MegEngine's graph builders give an operator besides its inputs: a ``name``, an output ``dtype`` and
    the devices it runs on (``comp_node_arr``; ``comp_node`` reads or sets the one device, a ValueError when
    there is not exactly one). A record only: megxla's ops take their device from their inputs.

    Example:
        >>> c = OperatorNodeConfig(); c.dtype = "float32"; c.comp_node_arr = ["xpux"]
        >>> c.dtype, str(c.comp_node)
        (dtype('float32'), 'xpux:0')
        >>> c.comp_node_arr = ["xpux", "xpux:1"]; c.comp_node
        Traceback (most recent call last):
        ...
        ValueError: invalid number of comp_node
    """

    __slots__ = ("name", "_dtype", "_comp_nodes")

    def __init__(self):
        self.name, self._dtype, self._comp_nodes = None, None, ()

    @property
    def dtype(self):
        return self._dtype

    @dtype.setter
    def dtype(self, value):
        self._dtype = None if value is None else np.dtype(value)

    @property
    def comp_node_arr(self):
        return self._comp_nodes

    @comp_node_arr.setter
    def comp_node_arr(self, names):
        self._comp_nodes = tuple(_CompNode(n) for n in names)

    @property
    def comp_node(self):
        if len(self._comp_nodes) != 1:
            raise ValueError("invalid number of comp_node")  # (MegEngine's text)
        return self._comp_nodes[0]

    @comp_node.setter
    def comp_node(self, name):
        self._comp_nodes = (_CompNode(name),)


__all__ += ["OperatorNodeConfig"]
