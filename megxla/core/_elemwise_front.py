"""Front end of the elementwise primitives: Python scalars and arrays become tensors with MegEngine's
promotion rule (a Python scalar takes the tensor's dtype when it fits), then one ``apply``."""
from __future__ import annotations

import functools
import math
import weakref

import numpy as np

from . import _autocast, _interrupt
from ._tensor import Tensor, QPARAMS_SEEN
from ._dispatch import ConversionError, apply, wrap
from .ops import elemwise as P

# NOTE: scalar operands are cached per (value, dtype): a host->device copy per `x * 2` costs ~10 µs, the
# lookup ~0.2 µs. Their value ids are recorded so jit tracing treats them as constants: ``vid in SCALAR_VIDS``
# holds while the scalar tensor lives (a weak reference drops the id with it), so the bookkeeping stays as
# bounded as the cache itself instead of growing with every distinct scalar ever seen.
_SCALARS: dict = {}
SCALAR_VIDS: dict = {}  # vid -> weak reference to the scalar tensor


@_interrupt.ignores_exceptions
def _forget_vid(vid, _ref):
    SCALAR_VIDS.pop(vid, None)


def _scalar_key(value, dtype):
    t = type(value)
    # NOTE: 0.0 == -0.0 and both hash alike, so a key of the value alone made `x * -0.0` reuse a cached +0.0
    # tensor (and `1 / (x * -0.0)` +inf instead of -inf) whenever 0.0 had been seen first. The sign of a zero
    # is part of the key; the common non-zero float keeps the plain tuple (a hex() key costs ~0.3 us per op).
    if t is float:
        if value == 0.0:
            return (value, t, dtype, math.copysign(1.0, value))
    elif t is complex:
        return (value.real.hex(), value.imag.hex(), t, dtype)
    return (value, t, dtype)


def _scalar(value, dtype):
    key = _scalar_key(value, dtype)
    t = _SCALARS.get(key)
    if t is None:
        import jax
        import jax.numpy as jnp
        if len(_SCALARS) > 4096:
            _SCALARS.clear()
        if type(value) is int and dtype.kind in "iu":
            # MegEngine converts a Python int beyond the tensor's integer range with a C cast (it wraps:
            # int32 tensor + 2**32 adds 0) instead of raising; so do we.
            bits = dtype.itemsize * 8
            value = value % (1 << bits)
            if dtype.kind == "i" and value >= 1 << (bits - 1):
                value -= 1 << bits
        # (np.errstate: a float beyond float16's range becomes inf silently, as in MegEngine: float16 + 1e5)
        held = False
        try:
            # (JAX may compile the conversion: signals wait for it, as for an eager kernel -- core/_interrupt.py;
            # a watchdog's TimeoutError raised while JAX read its persistent cache was swallowed there)
            held = _interrupt.enter()
            with jax.ensure_compile_time_eval(), np.errstate(over="ignore"):  # concrete even while tracing
                t = _SCALARS[key] = wrap(jnp.asarray(value, dtype))
        finally:
            if held:
                _interrupt.leave()
        SCALAR_VIDS[t._vid] = weakref.ref(t, functools.partial(_forget_vid, t._vid))
    return t


def _scalar_dtype(value, like):
    # (bfloat16, NumPy kind "V", takes float32 beside a Python number: MegEngine 1.13's promotion, pinned by its
    # test_dtype_bfloat16.py -- float16 stays float16)
    kind = like.kind
    if isinstance(value, bool):
        return like  # uint8 + True stays uint8 (MegEngine); bool + True stays bool
    if isinstance(value, int):
        return like if kind in "iufc" else np.dtype(np.int32)
    if isinstance(value, float):
        return like if kind in "fc" else np.dtype(np.float32)
    return like if kind == "c" else np.dtype(np.complex64)


def as_tensor(x, like=None, compare=False, op=None):
    """``x`` as a Tensor; Python scalars follow ``like``'s dtype where it fits (MegEngine promotion).
    ``compare``: the operand of a comparison (a list beside a bool tensor is converted to bool, as MegEngine's).
    ``op``: the op's name, for the error raised where ``x`` is no array of numbers."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float, complex)):
        if like is None:
            return Tensor(x)
        return _scalar(x, _scalar_dtype(x, like.dtype))
    if op is not None and x is None:  # (Tensor(None) is an empty tensor, as MegEngine's; an operand None is not)
        raise ConversionError(f"{op}: the operand is None and is not supported")
    try:
        if like is not None and isinstance(x, (list, tuple, np.ndarray, np.generic)):
            dt = _array_dtype(x, like.dtype, compare)
            if dt is not None:
                return Tensor(x, dtype=dt)
        return Tensor(x)
    except ConversionError as exc:
        if op is None:
            raise
        raise ConversionError(f"{op}: operand {str(exc).removeprefix('Tensor: ')}") from None  # (names the op)


_RANK = {"b": 0, "i": 1, "u": 1, "f": 2}


def _array_dtype(x, like, compare=False):
    """The dtype MegEngine gives a NumPy array / list operand beside a tensor of dtype ``like``, where that
    differs from the array's own: an array of a lower kind (bool < integer < float) takes the tensor's dtype
    (float16 tensor * int array stays float16, int32 tensor * bool mask stays int32), and a list or tuple of
    numbers always does, as MegEngine converts it to the tensor's dtype (uint8 tensor + [1, 2] stays uint8;
    int32 tensor + [1.5, 2] is int32 [1, 2] + tensor, and int32 tensor < [1.5] compares with 1). None: convert
    as usual."""
    like = np.dtype(like)
    if like.kind not in _RANK:
        return None
    if isinstance(x, (list, tuple)):
        try:
            kind = np.asarray(x).dtype.kind
        except (ValueError, TypeError):
            return None
        if kind in _RANK and (like.kind != "b" or _RANK[kind] == 0 or compare):
            return like
        # (a bool tensor beside a list of numbers: MegEngine has no bool arithmetic, it raises; megxla computes
        # in the list's type, as for an array)
        return None
    kind = x.dtype.kind
    if kind not in _RANK or _RANK[kind] > _RANK[like.kind]:
        return None
    if _RANK[kind] < _RANK[like.kind]:
        return like
    return None


_COMPARISONS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})

# MegEngine's autocast computes these in the high precision dtype (float16 inputs are cast to float32: its
# dtype_promote.cpp); every other elementwise op keeps its inputs' dtype
AUTOCAST_HIGH = frozenset({"truediv", "exp", "pow", "log", "expm1", "log1p", "acos", "asin", "atan2", "cos", "sin",
                           "tan", "asinh", "acosh", "atanh", "sinh", "cosh", "softplus", "hsigmoid",
                           "logsigmoid", "sqrt"})


# MegEngine computes these on a quantized tensor's integer storage (its qint8 elementwise kernels) and keeps the
# quantized dtype, so a converted model's float ReLU / residual add between quantized layers stays quantized
QUANT_KEEP = frozenset({"add", "sub", "maximum", "minimum", "neg", "relu"})


def quantized_params(x):
    """The QParams of a symmetric quantized tensor (integer storage with a scale, no zero point), else None.
    (MegEngine has no elementwise kernels for asymmetric ones: there the integers would not be the values.)"""
    if x._data.dtype.kind not in "iu":  # (first: a float tensor's unset slot would cost an exception)
        return None
    try:
        q = x._qparams
    except AttributeError:
        return None
    if q is None or q.scale is None or q.dtype_meta is None or q.zero_point is not None:
        return None
    return q


def reject_quantized(op, *operands):
    """Raise where an operand is a quantized tensor and ``op`` has no quantized kernel (MegEngine's qint8
    elementwise kernels are add/sub/neg/relu/max/min): computing on the raw integers would give values silently
    off by the scale, and MegEngine refuses these ops too."""
    from ._dispatch import OpError
    for x in operands:
        q = quantized_params(x) if isinstance(x, Tensor) else None
        if q is not None:
            raise OpError(f"{op}: no kernel for the quantized dtype {q.dtype_meta.name}({_scale_value(q)}) "
                          f"(shape {tuple(x.shape)}); dequantize first with .astype('float32') (MegEngine "
                          f"computes only add/sub/neg/relu/maximum/minimum on quantized tensors)")


def _scale_value(q):
    """The scale of QParams ``q`` as a float, None where it is not a concrete value (inside a trace)."""
    import jax
    v = getattr(q.scale, "_data", q.scale)
    if isinstance(v, jax.core.Tracer):
        return None
    return float(np.asarray(v).reshape(-1)[0])


def to_quantized(x, q, op):
    """Operand ``x`` in the quantized dtype of QParams ``q``, as MegEngine converts the operands of an op on a
    quantized tensor: a tensor of that dtype as it is (another scale raises, as MegEngine's dtype promotion),
    a Python int as the raw integer, any other tensor or number quantized from its value (rounding half away
    from zero, saturating)."""
    from .ops import quant as Q
    from ._dispatch import OpError
    storage = np.dtype(q.dtype_meta.np_dtype_str)
    qx = quantized_params(x) if isinstance(x, Tensor) else None
    if qx is not None:
        if qx is not q:
            a, b = _scale_value(qx), _scale_value(q)
            if qx.dtype_meta.name != q.dtype_meta.name or (a is not None and b is not None and abs(a - b) >= 1e-6):
                raise OpError(f"{op}: operands of different quantized dtypes ({qx.dtype_meta.name}, scale {a}) and "
                              f"({q.dtype_meta.name}, scale {b}); requantize one first (astype)")
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return _scalar(int(x), storage)
    if not isinstance(x, Tensor):
        x = Tensor(x, dtype="float32")
    if x.dtype != np.float32:
        x = apply(P.astype.bind(dtype="float32"), x)
    scale = q.scale if isinstance(q.scale, Tensor) else Tensor(q.scale, dtype="float32")
    zp = q.zero_point if q.zero_point is not None else 0.0
    zp = zp if isinstance(zp, Tensor) else Tensor(zp, dtype="float32")
    return apply(Q.quantize.bind(qmin=q.dtype_meta.qmin, qmax=q.dtype_meta.qmax, dtype=storage.name), x, scale, zp)


def _quantized_binary(op, name, x, y, q):
    out = apply(op, to_quantized(x, q, name), to_quantized(y, q, name))
    out._qparams = q
    return out


def binary(prim, name=None):
    op = prim.bind()
    high = name in AUTOCAST_HIGH
    keep = name in QUANT_KEEP
    compare = name in _COMPARISONS

    def fn(x, y):
        if QPARAMS_SEEN[0]:
            q = quantized_params(x) if isinstance(x, Tensor) else None
            q = q or (quantized_params(y) if isinstance(y, Tensor) else None)
            if q is not None:
                if not keep:
                    reject_quantized(name or prim.name, x, y)
                return _quantized_binary(op, name, x, y, q)
        if type(x) is not Tensor and not isinstance(x, Tensor):
            if x is None:
                raise TypeError("the operand is None and is not supported.")  # (MegEngine's words)
            x = as_tensor(x, y if isinstance(y, Tensor) else None, compare, name or prim.name)
        if type(y) is not Tensor and not isinstance(y, Tensor):
            if y is None:  # (it would become an empty array and broadcast to an empty result)
                raise TypeError("the operand is None and is not supported.")
            y = as_tensor(y, x, compare, name or prim.name)
        if high and _autocast.enabled:
            x, y = _autocast.up(x, y)
        return apply(op, x, y)

    fn.__name__ = prim.name
    return fn


def unary(prim, name=None):
    op = prim.bind()
    high = name in AUTOCAST_HIGH
    keep = name in QUANT_KEEP

    def fn(x):
        x = x if isinstance(x, Tensor) else as_tensor(x, op=name or prim.name)
        if not keep and QPARAMS_SEEN[0]:
            reject_quantized(name or prim.name, x)
        if high and _autocast.enabled:
            x, = _autocast.up(x)
        out = apply(op, x)
        if keep and QPARAMS_SEEN[0]:
            q = quantized_params(x)
            if q is not None:
                out._qparams = q
        return out

    fn.__name__ = prim.name
    return fn


BINARY = {name: binary(p, name) for name, p in P.BINARY.items()}
UNARY = {name: unary(p, name) for name, p in P.UNARY.items()}

# NOTE: ``@`` (matmul) is installed on Tensor by megxla.functional, whose ``matmul`` front end it is.
