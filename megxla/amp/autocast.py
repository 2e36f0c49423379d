"""``autocast``: a context manager / decorator switching the matmul, linear and conv family to low precision."""
from __future__ import annotations

import functools

import numpy as np

from .. import config as _config
from ..core import _autocast as _state

__all__ = ["autocast"]

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _float_name(dtype, what):
    try:
        name = np.dtype(dtype).name  # "bfloat16" resolves once JAX (ml_dtypes) is imported, as it is here
    except TypeError:
        name = None
    if name not in _FLOATS:
        raise ValueError(f"autocast: {what} must be a float dtype name such as 'float16', got {dtype!r}")
    return name


class autocast:
    r"""Automatic mixed precision: while active, matmul, linear and the convolution family compute in
    ``low_prec_dtype``.

    As in MegEngine, the float inputs (bias included) of :func:`~.functional.matmul`,
    :func:`~.functional.linear`, ``conv1d/2d/3d`` and ``conv_transpose2d/3d`` are cast to the low precision
    dtype and their result is low precision. Other ops follow the usual dtype promotion
    (``float16 + float32 -> float32``); reductions over float16 (softmax, batch norm statistics) accumulate
    in float32 as XLA does. Gradients flow back through the casts, so float32 parameters receive float32
    gradients. ``high_prec_dtype`` is recorded for MegEngine compatibility. The state is process-wide and
    nests: leaving a block restores what was active before it. As in MegEngine, an enabled block also sets
    ``megengine.config._compute_mode`` to ``"float32"`` (float16 products accumulate in float32, which XLA does
    anyway) and restores it on leaving.

    Args:
        enabled: whether autocast is on inside the block; ``False`` makes the block a no-op.
        low_prec_dtype: dtype name of the low precision ops, ``"float16"`` (default) or ``"bfloat16"``.
        high_prec_dtype: dtype name of the high precision ops, ``"float32"`` by default.

    Returns:
        usable as ``with autocast():`` or as a decorator ``@autocast()``.

    Example:
        >>> import megxla.functional as F
        >>> from megxla.amp import autocast
        >>> with autocast():
        ...     y = F.matmul(F.ones((2, 3)), F.ones((3, 4)))
        >>> y.dtype
        dtype('float16')
        >>> @autocast()
        ... def f(x, w):
        ...     return F.linear(x, w)
        >>> f(F.ones((2, 3)), F.ones((4, 3))).dtype
        dtype('float16')
    """

    def __init__(self, enabled: bool = True, low_prec_dtype: str = "float16", high_prec_dtype: str = "float32"):
        self.enabled = bool(enabled)
        self.low_prec_dtype = _float_name(low_prec_dtype, "low_prec_dtype")
        self.high_prec_dtype = _float_name(high_prec_dtype, "high_prec_dtype")
        self._saved = []  # a stack: the same autocast object may be entered re-entrantly (recursive decorated fn)

    def __enter__(self):
        if self.enabled:
            self._saved.append((_state.enabled, _state.low_prec_dtype, _state.high_prec_dtype,
                                _config._compute_mode))
            _state.low_prec_dtype = self.low_prec_dtype
            _state.high_prec_dtype = self.high_prec_dtype
            _state.enabled = True
            # MegEngine's autocast resets the execution config's compute mode to "float32" for the block (code
            # reading mge.config._compute_mode inside it sees "float32"); it restores the mode it found
            _config._compute_mode = "float32"
        return self

    def __exit__(self, *exc):
        if self.enabled:
            _state.enabled, _state.low_prec_dtype, _state.high_prec_dtype, mode = self._saved.pop()
            _config._compute_mode = mode
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if not self.enabled:
                return func(*args, **kwargs)
            with self:
                return func(*args, **kwargs)

        return wrapper
