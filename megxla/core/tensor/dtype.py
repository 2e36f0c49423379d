"""Dtype metadata with MegEngine's names (``megengine.core.tensor.dtype``).

Quantized dtypes are NumPy dtypes of their storage type carrying MegEngine's metadata
(``dtype.metadata["mgb_dtype"] = {"name", "scale", "zero_point"}``), exactly as MegEngine builds them, so
code that inspects ``get_scale(x.dtype)`` or pickles quantized dtypes sees the same objects. The arithmetic
on quantized values (observers, fake quantization) is built on top of this metadata by
``megxla.quantization``.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Optional, Union

import ml_dtypes  # JAX's NumPy extension types (a JAX dependency)
import numpy as np

# MegEngine's NumPy bfloat16 type (``np.array(x, dtype=bfloat16)``): ml_dtypes' is the NumPy dtype of JAX's (and so
# of megxla's) bfloat16 arrays
bfloat16 = ml_dtypes.bfloat16

__all__ = ["QuantDtypeMeta", "create_quantized_dtype", "get_dtype_bit", "get_scale", "get_zero_point",
           "bfloat16", "is_bfloat16", "is_differentible_dtype", "is_dtype_equal", "is_lowbit", "is_quantize",
           "qint32", "qint4", "qint8", "quint4", "quint8",
           "convert_to_qint8", "convert_from_qint8", "convert_to_quint8", "convert_from_quint8",
           "convert_to_qint32", "convert_from_qint32", "convert_to_qint4", "convert_from_qint4",
           "convert_to_quint4", "convert_from_quint4", "qint1", "convert_to_qint1", "convert_from_qint1"]


class QuantDtypeMeta(namedtuple("QuantDtypeMeta", ["name", "cname", "np_dtype_str", "qmin", "qmax", "is_unsigned"])):
    r"""Description of a quantized dtype: its name, MegBrain name, storage type and integer range.

    A namedtuple, as MegEngine's: immutable (the builtin metas are shared by every observer and tensor), compared
    and hashed as the tuple of its fields, and pickled as one (``cls.__new__(cls, *fields)``, which MegEngine's
    pickles of whole QAT models use).

    Args:
        name: user-facing name, e.g. ``"qint8"``.
        cname: MegBrain's name, e.g. ``"QuantizedS8"`` (None for dtypes MegBrain cannot dump).
        np_dtype_str: NumPy storage dtype, e.g. ``"int8"``.
        qmin: smallest quantized value.
        qmax: largest quantized value.
        is_unsigned: whether values are stored unsigned; derived from ``np_dtype_str`` when None.

    Example:
        >>> m = QuantDtypeMeta("qint8", "QuantizedS8", "int8", -128, 127)
        >>> m.is_unsigned, m == _builtin_quant_dtypes["qint8"], m._replace(qmin=-127).qmin
        (False, True, -127)
    """

    __slots__ = ()

    def __new__(cls, name: str, cname: str, np_dtype_str: str, qmin: int, qmax: int, is_unsigned: bool = None):
        assert isinstance(np_dtype_str, str)
        is_unsigned = np_dtype_str[0] == "u" if is_unsigned is None else is_unsigned
        return super().__new__(cls, name, cname, np_dtype_str, qmin, qmax, is_unsigned)

    def __copy__(self):  # (a meta is treated as a singleton, as MegEngine's FakeQuantize checks it with ``is``)
        return self

    def __deepcopy__(self, memo):
        return self


_builtin_quant_dtypes = {
    "quint8": QuantDtypeMeta("quint8", "Quantized8Asymm", "uint8", 0, 255),
    "qint8": QuantDtypeMeta("qint8", "QuantizedS8", "int8", -128, 127),
    "qint8_narrow": QuantDtypeMeta("qint8_narrow", "QuantizedS8", "int8", -127, 127),
    "quint4": QuantDtypeMeta("quint4", "Quantized4Asymm", "uint8", 0, 15),
    "qint4": QuantDtypeMeta("qint4", "QuantizedS4", "int8", -8, 7),
    # MegEngine's binary weights (values 0 and 1 times the scale), stored in int8
    "qint1": QuantDtypeMeta("qint1", "QuantizedS1", "int8", 0, 1),
    "qint32": QuantDtypeMeta("qint32", "QuantizedS32", "int32", -(2 ** 31), 2 ** 31 - 1),
    # NOTE: 2-bit types exist for quantization-aware training only (MegBrain cannot dump them).
    "quint2": QuantDtypeMeta("quint2", None, "uint8", 0, 3),
    "qint2": QuantDtypeMeta("qint2", None, "int8", -2, 1),
}
# MegBrain name -> meta (several metas may share a cname; the first registered wins, as in MegEngine)
_metadata_dict = {}
for _m in _builtin_quant_dtypes.values():
    _metadata_dict.setdefault(_m.cname, _m)
# name -> meta of the dtypes made from metas their MegBrain name does not give back (``_meta_of`` finds them)
_custom_metas = {}


def _meta(dtype_meta) -> QuantDtypeMeta:
    if isinstance(dtype_meta, QuantDtypeMeta):
        return dtype_meta
    if isinstance(dtype_meta, str) and dtype_meta in _builtin_quant_dtypes:
        return _builtin_quant_dtypes[dtype_meta]
    raise ValueError(f"unknown quantized dtype {dtype_meta!r}: expected a QuantDtypeMeta or one of "
                     f"{sorted(_builtin_quant_dtypes)}")


def create_quantized_dtype(dtype_meta: Union[str, QuantDtypeMeta], scale: float, zp: Optional[int]):
    r"""A NumPy dtype of ``dtype_meta``'s storage type carrying MegEngine's quantization metadata.

    Args:
        dtype_meta: a :class:`QuantDtypeMeta` or a builtin name (``"qint8"``, ``"quint8"``...).
        scale: the quantization step.
        zp: the zero point (None for symmetric types).

    Returns:
        ``np.dtype`` with MegEngine's ``metadata["mgb_dtype"]``: ``{"name": cname, "scale": s}``, and
        ``"zero_point"`` for an unsigned type.

    Example:
        >>> dt = create_quantized_dtype("quint8", 0.5, 3)
        >>> get_scale(dt), get_zero_point(dt), dt.name
        (0.5, 3, 'uint8')
    """
    meta = _meta(dtype_meta)
    if meta.cname is None:  # (MegEngine's message, its placeholder unfilled)
        raise ValueError("dtype {} without cname attr is not supported.")
    # (as MegEngine: an unsigned type needs an integer zero point in its range, a signed one takes none)
    if meta.is_unsigned:
        if zp is None or int(zp) != zp:
            raise ValueError("zero_point should be an integer")
        if not meta.qmin <= int(zp) <= meta.qmax:
            raise ValueError(f"zero_point should be within [{meta.qmin}, {meta.qmax}] for {meta.name}")
    elif zp is not None:
        raise ValueError(f"'{meta.name}' only supports symmetric quantization, zero_point should be None, "
                         f"but actually got '{zp}'")
    # MegEngine's metadata exactly (users print it; MegEngine's C++ reads it): the MegBrain name, the scale and,
    # unsigned, the zero point. A meta its MegBrain name does not give back (``qint8_narrow`` and other custom
    # metas sharing ``QuantizedS8``) is named too, so a tensor of that dtype keeps its meta's range
    info = {"name": meta.cname, "scale": float(scale)}
    if meta.is_unsigned:
        info["zero_point"] = int(zp)
    if _metadata_dict.get(meta.cname) != meta:
        info["meta_name"] = meta.name
        _custom_metas[meta.name] = meta
    return np.dtype(meta.np_dtype_str, metadata={"mgb_dtype": info})


class _QuantDtypeError(RuntimeError, ValueError):
    """A dtype that is not the quantized dtype asked for: MegEngine's C++ ``get_scale`` / ``get_zero_point`` raise
    RuntimeError; megxla's raised ValueError, which code written for it may catch."""


def _info(dtype, what):
    if not is_quantize(dtype):
        raise _QuantDtypeError(f"expect quantize dtype ({what}: {dtype!r} is not a quantized dtype)")
    return dtype.metadata["mgb_dtype"]


def is_quantize(dtype) -> bool:
    """Whether ``dtype`` (a NumPy dtype) carries quantization metadata.

    Example:
        >>> is_quantize(qint8(0.1)), is_quantize(np.dtype("int8"))
        (True, False)
    """
    dtype = getattr(dtype, "dtype", dtype)  # a Tensor or array is accepted too
    md = getattr(dtype, "metadata", None)
    return md is not None and "mgb_dtype" in md


def get_scale(dtype) -> float:
    """The scale of a quantized dtype.

    Example:
        >>> get_scale(qint8(0.25))
        0.25
    """
    return _info(getattr(dtype, "dtype", dtype), "get_scale")["scale"]


def get_zero_point(dtype) -> int:
    """The zero point of an asymmetric quantized dtype (``quint8`` / ``quint4``).

    Example:
        >>> get_zero_point(quint8(0.1, 128))
        128
    """
    info = _info(getattr(dtype, "dtype", dtype), "get_zero_point")
    if info.get("zero_point") is None:
        raise _QuantDtypeError(f'expect name to be "Quantized8Asymm" or "Quantized4Asymm", got {info["name"]} '
                               f"(get_zero_point: a symmetric dtype has no zero point)")
    return info["zero_point"]


def get_quant_meta(dtype) -> QuantDtypeMeta:
    """The :class:`QuantDtypeMeta` a quantized dtype was created from."""
    return _meta_of(_info(dtype, "get_quant_meta"))


def saturation_range(meta: QuantDtypeMeta):
    """``(qmin, qmax)`` a value converted to the quantized dtype ``meta`` saturates to, as MegEngine's ``astype``:
    its MegBrain dtype's range -- QuantizedS4 [-8, 7], Quantized4Asymm [0, 15], and for ``qint8_narrow`` (a
    QuantizedS8) [-128, 127]: the narrow range is the fake quantizer's clip in training, not the conversion's.

    Example:
        >>> saturation_range(_builtin_quant_dtypes["qint4"]), saturation_range(_builtin_quant_dtypes["qint8_narrow"])
        ((-8, 7), (-128, 127))
    """
    limits = _metadata_dict.get(meta.cname, meta) if meta.cname else meta
    return int(limits.qmin), int(limits.qmax)


def _meta_of(info) -> QuantDtypeMeta:
    # a dtype names its meta where the MegBrain name does not give it back (``create_quantized_dtype``); otherwise,
    # and in MegEngine's own dtypes (read from its files), the cname's first meta, as MegEngine resolves it
    name = info.get("meta_name")
    if name is not None:
        return _custom_metas.get(name) or _builtin_quant_dtypes[name]
    return _metadata_dict[info["name"]]


_BITS = {"bool": 1, "qint1": 1, "qint2": 2, "quint2": 2, "qint4": 4, "quint4": 4, "int4": 4, "uint4": 4,
         "qint8": 8, "quint8": 8, "qint8_narrow": 8, "qint32": 32}


def get_dtype_bit(dtype_name: str) -> int:
    """Bits per element of a dtype given by name (NumPy or quantized).

    Example:
        >>> get_dtype_bit("float16"), get_dtype_bit("quint4"), get_dtype_bit("int32")
        (16, 4, 32)
    """
    name = str(getattr(dtype_name, "name", dtype_name))
    if name in _BITS:
        return _BITS[name]
    try:
        return np.dtype(name).itemsize * 8
    except TypeError:
        pass
    if hasattr(ml_dtypes, name):  # bfloat16 & co. are registered with NumPy by ml_dtypes (a JAX dependency)
        return np.dtype(getattr(ml_dtypes, name)).itemsize * 8
    raise AssertionError("Unsupport dtype name with more than one number.")  # (MegEngine's, from its name parser)


def is_lowbit(dtype) -> bool:
    """Whether ``dtype`` is a quantized type of fewer than 8 bits (``qint4``, ``quint4``...).

    Example:
        >>> is_lowbit(quint4(1.0, 2)), is_lowbit(qint8(1.0))
        (True, False)
    """
    if is_quantize(dtype):
        meta = _meta_of(dtype.metadata["mgb_dtype"])
        return meta.qmax - meta.qmin < 255
    return get_dtype_bit(dtype) < 8 if isinstance(dtype, str) and dtype != "bool" else False


def is_bfloat16(dtype) -> bool:
    """Whether ``dtype`` is bfloat16.

    Example:
        >>> import jax.numpy as jnp
        >>> is_bfloat16(jnp.bfloat16), is_bfloat16("float32")
        (True, False)
    """
    try:
        return np.dtype(dtype).name == "bfloat16"
    except TypeError:
        return False


def is_differentible_dtype(dtype) -> bool:
    """Whether gradients flow through values of ``dtype`` (float32, float16, bfloat16), MegEngine's test (its
    spelling): NumPy types and dtypes, not names.

    Example:
        >>> is_differentible_dtype(np.float32), is_differentible_dtype(np.int32)
        (True, False)
    """
    return dtype == np.float32 or dtype == np.float16 or is_bfloat16(dtype)


def is_dtype_equal(lhs, rhs) -> bool:
    """Whether two dtypes are the same, quantization parameters included (MegEngine's ``is_dtype_equal``: the
    storage type, and for quantized dtypes the scale and zero point).

    Example:
        >>> is_dtype_equal(qint8(0.1), qint8(0.1)), is_dtype_equal(qint8(0.1), qint8(0.2))
        (True, False)
        >>> is_dtype_equal(qint8(0.1), np.int8), is_dtype_equal(np.float32, "float32")
        (False, True)
    """
    if lhs is None or rhs is None:
        raise ValueError("can not convert null PyObject to numpy dtype")
    a, b = np.dtype(lhs), np.dtype(rhs)
    if a != b or is_quantize(a) != is_quantize(b):
        return False
    if not is_quantize(a):
        return True
    ia, ib = a.metadata["mgb_dtype"], b.metadata["mgb_dtype"]
    return ia["scale"] == ib["scale"] and ia.get("zero_point") == ib.get("zero_point")


def qint8(scale):
    """Symmetric signed 8-bit quantized dtype with ``scale`` (``megengine.core.tensor.dtype.qint8``)."""
    return create_quantized_dtype("qint8", scale, None)


def quint8(scale, zero_point):
    """Asymmetric unsigned 8-bit quantized dtype with ``scale`` and ``zero_point``."""
    return create_quantized_dtype("quint8", scale, zero_point)


def qint32(scale):
    """Symmetric signed 32-bit quantized dtype (biases of quantized layers)."""
    return create_quantized_dtype("qint32", scale, None)


def qint4(scale):
    """Symmetric signed 4-bit quantized dtype (stored in int8)."""
    return create_quantized_dtype("qint4", scale, None)


def qint1(scale):
    """Binary quantized dtype (values 0 and 1 times ``scale``, stored in int8), MegEngine's ``qint1``.

    Example:
        >>> q = convert_to_qint1(np.array([0.0, 0.3, -1.0]), qint1(0.5))
        >>> q.tolist(), convert_from_qint1(q).tolist()
        ([0, 1, 0], [0.0, 0.5, 0.0])
    """
    return create_quantized_dtype("qint1", scale, None)


def quint4(scale, zero_point):
    """Asymmetric unsigned 4-bit quantized dtype (stored in uint8)."""
    return create_quantized_dtype("quint4", scale, zero_point)


def _check_ndarray(arr):
    # as MegEngine: a list, a Python number or a NumPy scalar is refused (convert_to_* of a 0-d array gives a NumPy
    # scalar, which convert_from_* refuses; megengine_quant_fuzz.py seed 24 case 3)
    if not isinstance(arr, np.ndarray):
        raise ValueError("arr parameter should be instance of np.ndarray")


def _convert_to(arr, dtype, name):
    # as MegEngine: any dtype of the target's MegBrain name (a ``qint8_narrow`` one for ``convert_to_qint8``),
    # clipped to the named builtin type's range
    meta = _builtin_quant_dtypes[name]
    _check_ndarray(arr)
    if not is_quantize(dtype) or dtype.metadata["mgb_dtype"]["name"] != meta.cname:
        raise ValueError("dtype parameter should be a {} dtype".format(meta))
    info = dtype.metadata["mgb_dtype"]
    zp = info.get("zero_point") or 0
    # in the array's own precision, as MegEngine's ``np.round(arr / scale)``: a float32 array divided in float64
    # rounds 0.183582 / 0.007812 (23.50000 in float32) to 23, MegEngine to 24 (found by megengine_quant_fuzz.py)
    arr = np.asarray(arr)
    q = np.round(arr / np.asarray(info["scale"], arr.dtype if arr.dtype.kind == "f" else np.float64)) + zp
    return np.clip(q, meta.qmin, meta.qmax).astype(dtype)


def _convert_from(arr, name):
    meta = _builtin_quant_dtypes[name]
    _check_ndarray(arr)
    if not is_quantize(arr.dtype) or arr.dtype.metadata["mgb_dtype"]["name"] != meta.cname:
        raise ValueError("arr's dtype should be a {} dtype".format(meta))
    info = arr.dtype.metadata["mgb_dtype"]
    zp = info.get("zero_point") or 0
    return ((arr.astype(np.float32) - zp) * np.float32(info["scale"])).astype(np.float32)


def convert_to_qint8(arr, q):
    """Quantize a float array to the ``qint8`` dtype ``q`` (round, clip, store int8 with metadata)."""
    return _convert_to(arr, q, "qint8")


def convert_from_qint8(arr):
    """Dequantize a ``qint8`` array to float32."""
    return _convert_from(arr, "qint8")


def convert_to_quint8(arr, q):
    """Quantize a float array to the ``quint8`` dtype ``q``.

    Example:
        >>> q = convert_to_quint8(np.array([0.0, 1.0]), quint8(0.5, 10))
        >>> q.tolist(), convert_from_quint8(q).tolist()
        ([10, 12], [0.0, 1.0])
    """
    return _convert_to(arr, q, "quint8")


def convert_from_quint8(arr):
    """Dequantize a ``quint8`` array to float32."""
    return _convert_from(arr, "quint8")


def convert_to_qint32(arr, q):
    """Quantize a float array to the ``qint32`` dtype ``q``."""
    return _convert_to(arr, q, "qint32")


def convert_from_qint32(arr):
    """Dequantize a ``qint32`` array to float32."""
    return _convert_from(arr, "qint32")


def convert_to_qint4(arr, q):
    """Quantize a float array to the ``qint4`` dtype ``q`` (stored in int8)."""
    return _convert_to(arr, q, "qint4")


def convert_from_qint4(arr):
    """Dequantize a ``qint4`` array to float32."""
    return _convert_from(arr, "qint4")


def convert_to_quint4(arr, q):
    """Quantize a float array to the ``quint4`` dtype ``q`` (stored in uint8)."""
    return _convert_to(arr, q, "quint4")


def convert_from_quint4(arr):
    """Dequantize a ``quint4`` array to float32."""
    return _convert_from(arr, "quint4")


def convert_to_qint1(arr, q):
    """Quantize a float array to the ``qint1`` dtype ``q`` (round, clip to {0, 1}, stored in int8)."""
    return _convert_to(arr, q, "qint1")


def convert_from_qint1(arr):
    """Dequantize a ``qint1`` array to float32."""
    return _convert_from(arr, "qint1")
