"""``megengine.dtr``: dynamic tensor rematerialisation, MegEngine's API mapped onto XLA's rematerialisation (the
same settings are ``megengine.dtr.dtr``, MegEngine's module path).

MegEngine's DTR evicts tensors at run time when device memory passes ``eviction_threshold`` and recomputes them
when they are needed again. XLA has no per-tensor eviction in eager mode: an eager op's output lives until
Python drops it. What XLA does have is compile-time rematerialisation, so:

- in compiled steps (``jit.trace`` / ``xla_trace``) built while DTR is enabled, every gradient op recomputes its
  forward instead of keeping the forward's residuals (the same switch as ``trace(dtr_config=DTRConfig())``);
  :func:`config` gives the thresholds as a :class:`~megxla.jit.DTRConfig`;
- in eager mode nothing is evicted; :func:`enable` says so once in a ``UserWarning``.

The thresholds are validated and kept with MegEngine's units (``"2GB"``, ``"500MB"``, ints in bytes).

Example:
    >>> import megxla as mge
    >>> mge.dtr.eviction_threshold = "2GB"
    >>> mge.dtr.eviction_threshold
    2147483648
    >>> mge.dtr.evictee_minimum_size = "2MB"
    >>> mge.dtr.evictee_minimum_size
    2097152
"""
from __future__ import annotations

import re
import sys
import types
import warnings
from typing import Union

__all__ = ["enable", "disable", "is_enabled", "config", "eviction_threshold", "evictee_minimum_size",
           "enable_sqrt_sampling"]

_state = {"enabled": False, "eviction_threshold": 0, "evictee_minimum_size": 1024 ** 2,
          "enable_sqrt_sampling": False, "warned": False}


def _str2bytes(text: str) -> int:
    """``"2GB"`` -> bytes (units B, KB, MB, GB, case-insensitive; powers of 1024 as MegEngine)."""
    found = re.findall(r"(\d+(?:\.\d+)?)\s*([kmg]?b)", text, re.IGNORECASE)
    if len(found) != 1:
        raise ValueError("Formatting of `value` only supports bytes(B), kilobyte(KB), megabyte(MB) and "
                         "gigabyte(GB) units")
    number, unit = found[0]
    return int(float(number) * 1024 ** ["b", "kb", "mb", "gb"].index(unit.lower()))


def _to_bytes(value) -> int:
    if isinstance(value, str):
        return _str2bytes(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError("`value` should be a str or an int")


def enable():
    """Turn DTR on: compiled steps built from now on rematerialise (see the module docstring).

    Eager execution cannot evict single tensors on XLA; a warning says so once per process.

    Example:
        >>> import megxla as mge
        >>> mge.dtr.enable()  # doctest: +SKIP
        >>> mge.dtr.disable()
    """
    _state["enabled"] = True
    if not _state["warned"]:
        _state["warned"] = True
        warnings.warn("megxla.dtr: XLA gives no per-tensor eviction in eager mode, so eager tensors are not "
                      "evicted; compiled steps (jit.trace / xla_trace) built while DTR is enabled rematerialise "
                      "instead (gradient ops recompute their forward)", UserWarning, stacklevel=2)


def disable():
    """Turn DTR off: compiled steps built from now on keep residuals (no rematerialisation).

    Example:
        >>> import megxla as mge
        >>> mge.dtr.disable()
        >>> mge.dtr.is_enabled()
        False
    """
    _state["enabled"] = False


def is_enabled() -> bool:
    """Whether :func:`enable` is in force: what ``jit`` reads to choose rematerialisation.

    Example:
        >>> import megxla as mge
        >>> mge.dtr.is_enabled()
        False
    """
    return _state["enabled"]


def config():
    """The current settings as a :class:`~megxla.jit.DTRConfig` (None while DTR is disabled).

    Example:
        >>> import megxla as mge
        >>> mge.dtr.config() is None
        True
    """
    if not _state["enabled"]:
        return None
    from ..jit.config import DTRConfig  # NOTE: imported here: dtr sits below jit, which reads it
    return DTRConfig(eviction_threshold=_state["eviction_threshold"],
                     evictee_minimum_size=_state["evictee_minimum_size"])


class _DTRModule(types.ModuleType):
    """Module type giving ``megxla.dtr`` MegEngine's settable module attributes (validated on assignment)."""

    @property
    def eviction_threshold(self) -> int:
        """Memory (bytes) above which MegEngine starts evicting; set as an int or ``"2GB"``-style string."""
        return _state["eviction_threshold"]

    @eviction_threshold.setter
    def eviction_threshold(self, value: Union[int, str]):
        _state["eviction_threshold"] = _to_bytes(value)

    @property
    def evictee_minimum_size(self) -> int:
        """Only tensors larger than this (bytes) are eviction candidates; int or ``"2MB"``-style string."""
        return _state["evictee_minimum_size"]

    @evictee_minimum_size.setter
    def evictee_minimum_size(self, value: Union[int, str]):
        _state["evictee_minimum_size"] = _to_bytes(value)

    @property
    def enable_sqrt_sampling(self) -> bool:
        """MegEngine's candidate-sampling switch; kept for compatibility (XLA's remat does not sample)."""
        return _state["enable_sqrt_sampling"]

    @enable_sqrt_sampling.setter
    def enable_sqrt_sampling(self, value: bool):
        _state["enable_sqrt_sampling"] = bool(value)


sys.modules[__name__].__class__ = _DTRModule
