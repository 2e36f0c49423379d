"""The one piece of mutable autocast state that the functional front ends consult.

``megxla.functional`` reads :data:`enabled` (a single module attribute) before matmul / linear / conv;
everything else happens only when it is True, so autocast costs nothing on the eager hot path when off.
It lives in core (``megxla.amp.autocast`` sets it): functional must not import amp, a layer above it.
"""
from __future__ import annotations

import numpy as np

from . import _registry
from ._tensor import Tensor

enabled = False
low_prec_dtype = "float16"
high_prec_dtype = "float32"


def _cast(dtype, ts):
    out = []
    for t in ts:
        if t is not None:
            if not isinstance(t, Tensor):
                t = Tensor(t)
            # Every operand, integers too: MegEngine's ``cast_tensors`` (matmul / linear / conv rules) casts each
            # one (``F.matmul(int32, int32)`` is float16 under autocast). The callers pass data operands only.
            if t.dtype != dtype:
                t = t.astype(dtype)
        out.append(t)
    return tuple(out)


def low(*ts):
    """``ts`` cast to the autocast low precision dtype (None entries stay None)."""
    return _cast(np.dtype(low_prec_dtype), ts)


def high(*ts):
    """``ts`` cast to the autocast high precision dtype (None entries stay None)."""
    return _cast(np.dtype(high_prec_dtype), ts)


def up(*ts):
    """``ts`` with every tensor of a low-precision float dtype (float16, bfloat16) cast to the high precision
    dtype; float32 / float64 tensors stay as they are (MegEngine's rule for the ops autocast computes in high
    precision: exp, log, true division, layer_norm, ...)."""
    high_dt = np.dtype(high_prec_dtype)
    out = []
    for t in ts:
        if isinstance(t, Tensor) and t.dtype.kind in "fV" and t.dtype.itemsize < high_dt.itemsize:
            t = t.astype(high_dt)
        out.append(t)
    return tuple(out)


# A traced step records the casts autocast inserts: its recordings are keyed by the autocast state.
_registry.register_context("autocast", lambda: (enabled, low_prec_dtype, high_prec_dtype) if enabled else None)
