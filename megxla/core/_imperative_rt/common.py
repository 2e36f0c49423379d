"""``megengine.core._imperative_rt.common``: where MegEngine's pickled files find ``CompNode`` (a device)."""
from __future__ import annotations

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
