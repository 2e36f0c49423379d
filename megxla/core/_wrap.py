"""``megengine.core._wrap``: a thin front at MegEngine's internal path -- ``Device``, a device name wrapped with
its :class:`~megxla.core.dtypes.CompNode` (``to_c()``), and ``as_device``. The engine does not use it.

Example:
    >>> import megxla.functional as F
    >>> F.eye(2, device=Device("xpux").to_c()).numpy()
    array([[1., 0.],
           [0., 1.]], dtype=float32)
"""
from __future__ import annotations

from .dtypes import CompNode

__all__ = ["Device", "as_device"]


class Device:
    """A device (MegEngine's wrapper of a ``CompNode``): ``Device()`` the default one, ``Device("cpu0")``,
    ``Device(compnode)`` or ``Device(device)``; ``to_c()`` gives its CompNode, which every ``device=`` takes."""

    __slots__ = ("_cn",)

    def __init__(self, device=None):
        if isinstance(device, Device):
            device = device._cn
        self._cn = CompNode("xpux" if device is None else device)

    def to_c(self) -> CompNode:
        return self._cn

    @property
    def logical_name(self) -> str:
        return str(self._cn)

    def __repr__(self):
        return repr(self._cn)

    def __str__(self):
        return str(self._cn)

    def __eq__(self, other):
        return self._cn == (other._cn if isinstance(other, Device) else other)

    def __hash__(self):
        return hash(str(self._cn))


def as_device(obj) -> Device:
    """``obj`` (a Device, CompNode or device name) as a :class:`Device`."""
    return obj if isinstance(obj, Device) else Device(obj)
