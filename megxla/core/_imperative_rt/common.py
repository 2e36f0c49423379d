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
