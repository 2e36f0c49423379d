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
from .autocast import autocast
from .grad_scaler import GradScaler, Xla_GradScaler
from .convert_format import convert_module_format, convert_tensor_format

__all__ = ["autocast", "GradScaler", "Xla_GradScaler", "convert_module_format", "convert_tensor_format"]
