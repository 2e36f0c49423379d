"""Automatic mixed precision (``megengine.amp``).

Example:
    >>> import megxla as mge
    >>> import megxla.functional as F
    >>> from megxla import amp
    >>> with amp.autocast():
    ...     y = F.linear(F.ones((2, 3)), F.ones((4, 3)))
    >>> y.dtype
    dtype('float16')
"""
import sys as _sys
import types as _types

from ..core import _autocast as _state
from .autocast import autocast, _float_name
from .grad_scaler import GradScaler, Xla_GradScaler
from .convert_format import convert_module_format, convert_tensor_format

__all__ = ["autocast", "GradScaler", "Xla_GradScaler", "convert_module_format", "convert_tensor_format",
           "enabled", "high_prec_dtype", "low_prec_dtype"]


def _dtype_property(name, doc):
    """A module property reading and (validated) setting the autocast dtype ``name`` of core._autocast."""
    def get(self):
        return getattr(_state, name)

    def set(self, dtype):
        setattr(_state, name, _float_name(dtype, name))
    return property(get, set, doc=doc)


class _Amp(_types.ModuleType):
    """The ``megxla.amp`` module: MegEngine's module properties ``amp.enabled``, ``amp.low_prec_dtype`` and
    ``amp.high_prec_dtype`` are the process-wide autocast switch (what ``autocast()`` sets for a block)."""

    @property
    def enabled(self) -> bool:
        """Whether autocast is on outside any ``autocast`` block (``amp.enabled = True``: every matmul, linear
        and convolution computes in ``low_prec_dtype`` from now on). Default: False."""
        return _state.enabled

    @enabled.setter
    def enabled(self, value):
        _state.enabled = bool(value)

    low_prec_dtype = _dtype_property(
        "low_prec_dtype", 'The low precision dtype name of autocast, ``"float16"`` by default (or ``"bfloat16"``).')
    high_prec_dtype = _dtype_property(
        "high_prec_dtype", 'The high precision dtype name of autocast, ``"float32"`` by default.')

    def __dir__(self):
        # the module properties live on the class, not in the module's __dict__: list them as MegEngine's
        # dir(megengine.amp) does (tab completion)
        return sorted(set(super().__dir__()) | {"enabled", "low_prec_dtype", "high_prec_dtype"})


_sys.modules[__name__].__class__ = _Amp
