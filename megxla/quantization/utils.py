"""Quantization parameters (:class:`QParams`) and the fake-quantization functions built on the ``fake_quant``,
``lsq`` and ``tqt`` primitives (``megxla/core/ops/quant.py``)."""
from __future__ import annotations

import abc
from enum import Enum
from functools import partial, update_wrapper, wraps
from typing import Union

import numpy as np

from ..core import _registry, _tensor
from ..core._dispatch import apply
from ..core.ops import quant as _q
from ..core.tensor.dtype import QuantDtypeMeta, _builtin_quant_dtypes, create_quantized_dtype
from ..core._tensor import Tensor

__all__ = ["register_method_to_class", "QuantMode", "QParams", "LSQParams", "QParamsModuleMixin", "create_qparams",
           "fake_quant_tensor", "fake_quant_bias", "tqt_forward", "lsq_forward", "get_qparam_dict"]


class QuantMode(Enum):
    """Quantization mode: symmetric (zero point 0) or asymmetric. (MegEngine's spelling, kept for
    compatibility.)

    Example:
        >>> from megxla.quantization import MinMaxObserver
        >>> ob = MinMaxObserver(mode=QuantMode.ASYMMERTIC, dtype="quint8")
        >>> _ = ob(Tensor([-1.0, 3.0]))
        >>> qp = ob.get_qparams(); qp.mode, round(float(qp.scale), 4), float(qp.zero_point)
        (<QuantMode.ASYMMERTIC: 2>, 0.0157, 64.0)
    """

    SYMMERTIC = 1
    ASYMMERTIC = 2


class QParams:
    r"""Quantization parameters shared by observers, fake-quant modules and tensors.

    Args:
        mode: a :class:`QuantMode`.
        dtype_meta: the quantized dtype (:class:`~megxla.core.tensor.dtype.QuantDtypeMeta`).
        scale: the step, a Tensor (or None before observation).
        zero_point: the zero point, a Tensor (asymmetric mode) or None.

    Example:
        >>> q = create_qparams(QuantMode.SYMMERTIC, "qint8", Tensor(0.5))
        >>> q.dtype_meta.name, float(q.scale)
        ('qint8', 0.5)
    """

    __slots__ = ("mode", "dtype_meta", "scale", "zero_point")

    def __init__(self, mode: QuantMode, dtype_meta: QuantDtypeMeta, scale: Tensor, zero_point: Tensor):
        self.mode = mode
        self.dtype_meta = dtype_meta
        self.scale = scale
        self.zero_point = zero_point

    def update(self, qparams: "QParams"):
        """Copy every field of ``qparams`` into this object."""
        for key in self.__slots__:
            setattr(self, key, getattr(qparams, key))

    def __eq__(self, other):
        if not isinstance(other, QParams) or self.__slots__ != other.__slots__:
            return False
        for key in self.__slots__:
            a, b = getattr(self, key), getattr(other, key)
            if isinstance(a, Tensor) or isinstance(b, Tensor):
                if a is None or b is None or not np.array_equal(np.asarray(a), np.asarray(b)):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None

    def __repr__(self):
        # "QParams(...)" for subclasses too (LSQParams, custom qparams with extra slots), as MegEngine prints them
        return "QParams({})".format(", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__))


class LSQParams(QParams):
    """:class:`QParams` with LSQ's gradient scale of the step size.

    Args:
        mode, dtype_meta, scale, zero_point: as :class:`QParams`.
        grad_scale: the factor applied to the step size's gradient.

    Example:
        >>> p = LSQParams(QuantMode.SYMMERTIC, "qint8", Tensor(0.5), None, Tensor(0.1))
        >>> float(p.scale), float(p.grad_scale)
        (0.5, 0.1...)
    """

    __slots__ = ("mode", "dtype_meta", "scale", "zero_point", "grad_scale")

    def __init__(self, mode, dtype_meta, scale, zero_point, grad_scale):
        super().__init__(mode, dtype_meta, scale, zero_point)
        self.grad_scale = grad_scale


class QParamsModuleMixin(abc.ABC):
    """Modules that hold quantization parameters: ``get_qparams`` and the quantized dtype they imply.

    Example:
        >>> from megxla.quantization import MinMaxObserver
        >>> ob = MinMaxObserver(); isinstance(ob, QParamsModuleMixin)
        True
        >>> _ = ob(Tensor([-1.0, 2.54])); ob.get_quantized_dtype()
        dtype('int8')
    """

    def get_quantized_dtype(self):
        """The NumPy quantized dtype (with scale / zero point metadata) of :meth:`get_qparams`."""
        q = self.get_qparams()
        scale = _one_number(q.scale) if q.scale is not None else None
        zp = int(_one_number(q.zero_point)) if q.zero_point is not None else None
        return create_quantized_dtype(q.dtype_meta, scale, zp)

    @abc.abstractmethod
    def get_qparams(self) -> QParams:
        """The current quantization parameters."""


def _one_number(v):
    # a dtype holds one scale: per-channel parameters are an error, as MegEngine's ``float(scale.numpy())`` makes
    # them (megxla's took the first channel's)
    a = np.asarray(v)
    if a.size != 1:
        raise TypeError("only size-1 arrays can be converted to Python scalars")
    return float(a.reshape(-1)[0])


def _meta(dtype_meta):
    if isinstance(dtype_meta, str):
        if dtype_meta not in _builtin_quant_dtypes:
            raise ValueError(f"unknown quantized dtype {dtype_meta!r}, expected one of {sorted(_builtin_quant_dtypes)}")
        return _builtin_quant_dtypes[dtype_meta]
    return dtype_meta


def register_method_to_class(cls):
    r"""Decorator: attach the decorated function to ``cls`` as a method of the same name (the function itself
    is returned unchanged).

    Example:
        >>> class A: pass
        >>> @register_method_to_class(A)
        ... def hello(self):
        ...     return "hi"
        >>> A().hello()
        'hi'
    """
    def decorator(func):
        @wraps(func)
        def wrapper(self, *args, **kwargs):
            return func(self, *args, **kwargs)

        if isinstance(func, partial):
            update_wrapper(func, func.func)
        setattr(cls, func.__name__, wrapper)
        return func

    return decorator


def create_qparams(mode: QuantMode = QuantMode.SYMMERTIC, dtype_meta: Union[str, QuantDtypeMeta] = None,
                   scale: Tensor = None, zero_point: Tensor = None):
    r"""Make a :class:`QParams`.

    Args:
        mode: symmetric or asymmetric (None keeps it unset).
        dtype_meta: a QuantDtypeMeta or a builtin name such as ``"qint8"``.
        scale: the step.
        zero_point: the zero point (asymmetric mode).

    Returns:
        the QParams.

    Example:
        >>> create_qparams(QuantMode.ASYMMERTIC, "quint8", Tensor(0.1), Tensor(128.0)).mode
        <QuantMode.ASYMMERTIC: 2>
    """
    if isinstance(dtype_meta, str):  # (MegEngine looks the name up: a KeyError for an unknown one)
        dtype_meta = _builtin_quant_dtypes[dtype_meta]
    if mode is not None and not isinstance(mode, QuantMode):
        raise AssertionError(f"create_qparams: mode must be a QuantMode, got {mode!r}")
    return QParams(mode, dtype_meta, scale, zero_point)


def get_qparam_dict(mode: QuantMode):
    """MegEngine < 1.4's dict form of the parameters of ``mode`` (kept for old code)."""
    d = {"mode": mode, "scale": None}
    if mode == QuantMode.ASYMMERTIC:
        d["zero_point"] = None
    return d


def _as_tensor(x):
    return x if isinstance(x, Tensor) else Tensor(x, dtype="float32")


def fake_quant_tensor(inp: Tensor, qparams: QParams) -> Tensor:
    r"""Quantize and dequantize ``inp`` with ``qparams``: ``(clip(round(x / s) + zp) - zp) * s``; the
    gradient passes straight through inside the range and is zero outside.

    Args:
        inp: the float tensor.
        qparams: mode, dtype (its qmin / qmax), scale and zero point.

    Returns:
        the fake-quantized tensor (same shape and dtype).

    Example:
        >>> q = create_qparams(QuantMode.SYMMERTIC, "qint8", Tensor(0.5))
        >>> fake_quant_tensor(Tensor([0.3, 1.0, 100.0]), q).numpy()
        array([ 0.5,  1. , 63.5], dtype=float32)
    """
    if qparams.scale is None:
        raise ValueError("fake_quant_tensor: qparams has no scale (the observer has not seen data yet)")
    zp = qparams.zero_point if qparams.mode == QuantMode.ASYMMERTIC and qparams.zero_point is not None else 0.0
    meta = _meta(qparams.dtype_meta)
    op = _q.fake_quant.bind(qmin=meta.qmin, qmax=meta.qmax)
    return apply(op, inp, _as_tensor(qparams.scale), _as_tensor(zp))


def tqt_forward(qmin, qmax, inp, scale):
    """TQT fake quantization with a learned ``log2`` step ``scale``: ``clip(round(x / 2**s)) * 2**s``.

    Example:
        >>> tqt_forward(-128, 127, Tensor([0.3, 1.0]), Tensor(-1.0)).numpy()
        array([0.5, 1. ], dtype=float32)
    """
    return apply(_q.tqt.bind(qmin=int(qmin), qmax=int(qmax)), inp, _as_tensor(scale))


def lsq_forward(qmin, qmax, inp, step_size, zero_point=None, scale_grad=None):
    """LSQ fake quantization with a learned step size; ``scale_grad`` scales the step's gradient.

    Example:
        >>> lsq_forward(-128, 127, Tensor([0.3, 1.0]), Tensor(0.5)).numpy()
        array([0.5, 1. ], dtype=float32)
    """
    zero_point = 0.0 if zero_point is None else zero_point
    scale_grad = 1.0 if scale_grad is None else scale_grad
    return apply(_q.lsq.bind(qmin=int(qmin), qmax=int(qmax)), inp, _as_tensor(step_size), _as_tensor(zero_point),
                 _as_tensor(scale_grad))


def fake_quant_bias(bias: Tensor, inp: Tensor, w_qat: Tensor) -> Tensor:
    r"""Fake-quantize a bias to qint32 with scale ``input scale * weight scale`` (symmetric int8 input and
    weight only, as MegEngine; otherwise the bias is returned unchanged).

    Args:
        bias: the bias.
        inp: the input tensor, carrying its ``qparams``.
        w_qat: the fake-quantized weight, carrying its ``qparams``.

    Returns:
        the fake-quantized bias.

    Example:
        >>> inp, w = Tensor([1.0]), Tensor([1.0])
        >>> inp.qparams.update(create_qparams(QuantMode.SYMMERTIC, "qint8", Tensor(0.5)))
        >>> w.qparams.update(create_qparams(QuantMode.SYMMERTIC, "qint8", Tensor(0.25)))
        >>> b = fake_quant_bias(Tensor([0.3, 1.01]), inp, w)  # rounded to multiples of 0.5 * 0.25
        >>> b.numpy(), b.qparams.dtype_meta.name
        (array([0.25, 1.  ], dtype=float32), 'qint32')
    """
    if bias is None:
        return bias
    ip, wp = getattr(inp, "qparams", None), getattr(w_qat, "qparams", None)
    if ip is None or wp is None or ip.scale is None or wp.scale is None:
        return bias
    if ip.mode != QuantMode.SYMMERTIC or wp.mode != ip.mode:
        return bias
    if ip.dtype_meta is None or wp.dtype_meta is None:
        return bias
    if ip.dtype_meta.np_dtype_str != "int8" or wp.dtype_meta.np_dtype_str != "int8":
        return bias
    b_param = create_qparams(wp.mode, "qint32", scale=ip.scale * wp.scale)
    out = fake_quant_tensor(bias, b_param)
    out.qparams.update(b_param)
    return out


def _default_qparams(dtype_meta=None, scale=None, zero_point=None):
    # (core and functional make the QParams of a quantized tensor through this registry: they sit below us)
    if dtype_meta is None:
        return create_qparams()
    mode = QuantMode.SYMMERTIC if zero_point is None else QuantMode.ASYMMERTIC
    return create_qparams(mode, dtype_meta, scale, zero_point)


_tensor.QPARAMS_FACTORY[0] = _default_qparams


def _walk_qparams(q):
    # QParams passed to a traced step: its tensors are state; mode and dtype are in the names, so a QParams
    # changed in place (another mode / dtype) keys another executable.
    tag = f"{getattr(q.mode, 'name', q.mode)}:{getattr(q.dtype_meta, 'name', q.dtype_meta)}"
    return [(f"{n}@{tag}", getattr(q, n)) for n in q.__slots__ if isinstance(getattr(q, n, None), Tensor)]


_registry.register_state_walker(QParams, _walk_qparams)
