"""``megengine.core.tensor.amp``: MegEngine's low-level autocast state, read from megxla's one copy of it
(``megxla.core._autocast``): read-only here, ``megxla.amp`` (``amp.autocast``, ``amp.enabled = True``) sets it.

Example:
    >>> from megxla.core.tensor import amp as origin_amp
    >>> with mge.amp.autocast():
    ...     origin_amp._enabled, origin_amp._get_amp_low_prec_dtype()
    (True, 'float16')
    >>> origin_amp._enabled
    False
"""
from __future__ import annotations

from .. import _autocast

__all__ = []


def _get_amp_enabled() -> bool:
    """Whether autocast is on."""
    return _autocast.enabled


def _get_amp_low_prec_dtype() -> str:
    """The name of autocast's low precision dtype (``"float16"`` by default)."""
    return _autocast.low_prec_dtype


def _get_amp_high_prec_dtype() -> str:
    """The name of autocast's high precision dtype (``"float32"`` by default)."""
    return _autocast.high_prec_dtype


def __getattr__(name):
    # MegEngine's module globals ``_enabled``, ``_low_prec_dtype``, ``_high_prec_dtype``: live views of the state
    if name in ("_enabled", "enabled"):  # (``enabled`` and the dtypes: MegEngine's module-level properties)
        return _autocast.enabled
    if name in ("low_prec_dtype", "high_prec_dtype"):
        return getattr(_autocast, name)
    if name in ("_low_prec_dtype", "_high_prec_dtype"):
        return getattr(_autocast, name[1:])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
