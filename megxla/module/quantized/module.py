"""``QuantizedModule`` and the representation of quantized tensors in inference.

A quantized tensor is a Tensor of the dtype's integer storage (int8, uint8, int32) whose ``qparams`` carry
the quantized dtype, scale and zero point; :func:`quantize_tensor` / :func:`dequantize_tensor` convert."""
from __future__ import annotations

import pickle
from abc import abstractmethod
from collections import OrderedDict

import numpy as np

from ...core._dispatch import apply
from ...core._tensor import Tensor
from ...core.ops import quant as _q
from ...core.tensor.dtype import create_quantized_dtype, saturation_range
from ...quantization.utils import QuantMode, _meta, create_qparams
from ..module import Module, _is_module, _is_tensor, _readonly

__all__ = ["QuantizedModule", "quantize_tensor", "dequantize_tensor"]


def _f32(x):
    return x if isinstance(x, Tensor) else Tensor(x, dtype="float32")


def quantize_tensor(x: Tensor, dtype_meta, scale, zero_point=None) -> Tensor:
    r"""Quantize a float tensor to the integer storage of ``dtype_meta`` (``clip(round(x / s) + zp)``).

    Args:
        x: the float tensor.
        dtype_meta: the quantized dtype (name or QuantDtypeMeta).
        scale: the step.
        zero_point: the zero point (None: symmetric).

    Returns:
        an integer Tensor whose ``qparams`` describe it.

    Example:
        >>> q = quantize_tensor(Tensor([0.26, -1.0]), "qint8", 0.5)
        >>> q.numpy(), dequantize_tensor(q).numpy()
        (array([ 1, -2], dtype=int8), array([ 0.5, -1. ], dtype=float32))
    """
    meta = _meta(dtype_meta)
    zp = 0.0 if zero_point is None else zero_point
    # saturated as MegEngine's ``astype`` to a quantized dtype does (``saturation_range``): a 4-bit one to [-8, 7] /
    # [0, 15], not its int8 / uint8 storage's (a QuantStub to qint4 gave 10 and -13 where MegEngine's gives 7 and
    # -8: megengine_quant_fuzz seed 4 case 34)
    qmin, qmax = saturation_range(meta)
    op = _q.quantize.bind(qmin=qmin, qmax=qmax, dtype=meta.np_dtype_str)
    out = apply(op, x, _f32(scale), _f32(zp))
    mode = QuantMode.SYMMERTIC if zero_point is None else QuantMode.ASYMMERTIC
    out.qparams.update(create_qparams(mode, meta, _f32(scale), None if zero_point is None else _f32(zero_point)))
    return out


def dequantize_tensor(q: Tensor) -> Tensor:
    """The float32 value ``(q - zp) * s`` of a quantized tensor (see :func:`quantize_tensor`).

    Args:
        q: a quantized tensor (integer storage whose ``qparams`` carry its scale and zero point).

    Returns:
        a float32 Tensor of the same shape.

    Example:
        >>> q = quantize_tensor(Tensor([0.3, 1.0]), "quint8", 0.1, zero_point=128)
        >>> q.numpy(), dequantize_tensor(q).numpy()
        (array([131, 138], dtype=uint8), array([0.3, 1. ], dtype=float32))
    """
    qp = q.qparams
    if qp is None or qp.scale is None:
        raise ValueError(f"dequantize: the tensor (dtype {q.dtype}) carries no quantization parameters")
    zp = qp.zero_point if qp.zero_point is not None else 0.0
    return apply(_q.dequantize.bind(), q, _f32(qp.scale), _f32(zp))


class QuantizedModule(Module):
    r"""Base class of quantized (inference) modules, made from QAT modules by
    :func:`megxla.quantization.quantize` through ``from_qat_module``. They run in evaluation mode only.

    Example:
        >>> from megxla.module import quantized
        >>> stub = quantized.DequantStub()
        >>> isinstance(stub, quantized.QuantizedModule), stub
        (True, Quantized.DequantStub())
        >>> stub(quantized.quantize_tensor(Tensor([1.0]), "qint8", 0.5))
        Traceback (most recent call last):
        ...
        ValueError: quantized modules are for inference: call .eval() first
    """

    # MegEngine's quantized modules hold their scales in dtypes, not tensors: state_dict has the weight as an int8
    # array whose dtype metadata carries its scale ({"mgb_dtype": {"name": "QuantizedS8", "scale": s}}) and no
    # scale entries. megxla's scale Tensors (read by the forward pass) are left out the same way and the weight
    # carries the same metadata, so quantized state dicts load strict in either library (MegEngine needs the
    # metadata to keep the weight quantized).
    _SCALE_ATTRS = ("weight_scale", "output_scale", "output_zero_point")

    def _state_dict(self, rst=None, prefix: str = "", keep_var: bool = False):
        if rst is None:
            rst = OrderedDict()
        for k, v in self._flatten(recursive=False, with_key=True, predicate=_is_tensor):
            if k in self._SCALE_ATTRS:
                continue
            rst[(type(self), prefix + k)] = v if keep_var else _readonly(_megengine_array(v))
        for k, submodule in self._flatten(recursive=False, with_key=True, predicate=_is_module):
            submodule._state_dict(rst, prefix + k + ".", keep_var)
        return rst

    def __repr__(self):
        return "Quantized." + super().__repr__()

    def __setstate__(self, state):
        # A whole quantized model pickled by MegEngine holds each module's __dict__: its output dtype, its weight and
        # bias (Parameters of quantized dtypes), its method or its float layer's settings -- none of megxla's
        # derived fields (output scale Tensors, the float function of an Elemwise...): derive what is missing.
        # megxla's own pickles hold those fields already: kept as they are.
        super().__setstate__(state)
        self._restore_derived()

    def _restore_derived(self):
        """Rebuild the fields megxla derives from MegEngine's attributes, where the unpickled state lacks them."""
        if isinstance(self, _OutputQuant) and "output_meta" not in self.__dict__:
            try:
                self._set_output_dtype(self.__dict__.get("output_dtype"))
            except TypeError as exc:
                raise pickle.UnpicklingError(f"load: quantized {exc}") from None

    def __call__(self, *args, **kwargs):
        if self.training:
            raise ValueError("quantized modules are for inference: call .eval() first")
        return super().__call__(*args, **kwargs)

    @classmethod
    @abstractmethod
    def from_qat_module(cls, qat_module):
        """The quantized module of a trained QAT module (abstract, as MegEngine's: a sub-class without it cannot be
        instantiated)."""


def _megengine_array(t):
    """``t.numpy()``; for a quantized tensor with MegEngine's dtype metadata (MegEngine's quantized dtypes are
    NumPy dtypes whose metadata names the MegBrain dtype and its scale / zero point)."""
    a = t.numpy()
    qp = getattr(t, "qparams", None)
    meta = getattr(qp, "dtype_meta", None)
    scale = getattr(qp, "scale", None)
    if meta is None or scale is None or not getattr(meta, "cname", None):
        return a
    mgb = {"name": meta.cname, "scale": float(np.asarray(scale.numpy() if isinstance(scale, Tensor) else scale))}
    zp = getattr(qp, "zero_point", None)
    if zp is not None:
        mgb["zero_point"] = int(np.asarray(zp.numpy() if isinstance(zp, Tensor) else zp))
    # (from the plain storage type: NumPy merges new metadata into a dtype's own, whose keys win, and a quantized
    # tensor's numpy() already has its dtype, whose metadata may name a custom meta -- meta_name -- MegEngine's not)
    return a.view(np.dtype(a.dtype.name, metadata={"mgb_dtype": mgb}))


class _OutputQuant:
    """Mixin: the module's output is quantized with its QAT module's activation parameters."""

    def _set_output(self, qat_module):
        qp = qat_module.get_activation_qparams()
        if qp is None or qp.scale is None:
            raise ValueError(f"quantize: {type(qat_module).__name__} {qat_module.name or ''} has no activation "
                             f"quantization parameters (no act observer / fake quant, or it never saw data)")
        self.output_meta = _meta(qp.dtype_meta)
        self.output_scale = Tensor(qp.scale.numpy().reshape(()), dtype="float32")
        zp = qp.zero_point if qp.mode == QuantMode.ASYMMERTIC else None
        self.output_zero_point = None if zp is None else Tensor(zp.numpy().reshape(()), dtype="float32")
        self.output_dtype = create_quantized_dtype(
            self.output_meta, float(self.output_scale.numpy()),
            None if zp is None else int(self.output_zero_point.numpy()))

    def _set_output_dtype(self, dt):
        """The output's quantized dtype given directly -- MegEngine's ``dtype=`` argument of a quantized module built
        by hand (``Conv2d(..., dtype=dtype.qint8(0.05))``): its scale and zero point. None: none yet."""
        from ...core.tensor.dtype import get_quant_meta, get_scale, get_zero_point, is_quantize
        if dt is None:
            self.output_dtype = None
            return
        if not is_quantize(dt):
            raise TypeError(f"{type(self).__name__}: dtype must be a quantized dtype (dtype.qint8(scale), "
                            f"dtype.quint8(scale, zero_point)...), got {dt!r}")
        meta = get_quant_meta(dt)
        self.output_meta = meta
        self.output_scale = Tensor(np.float32(get_scale(dt)))
        zp = get_zero_point(dt) if meta.is_unsigned else None
        self.output_zero_point = None if zp is None else Tensor(np.float32(zp))
        self.output_dtype = dt

    def _output_check(self):
        if getattr(self, "output_meta", None) is None:
            raise ValueError(f"{type(self).__name__}: no output dtype -- build it with dtype=dtype.qint8(scale) "
                             f"(or from a QAT module with quantize())")

    def _quantize_output(self, x):
        self._output_check()
        return quantize_tensor(x, self.output_meta, self.output_scale, self.output_zero_point)

    def _requantize(self, acc, in_scale, relu=False, bias=None):
        """``acc`` (int32, scale ``in_scale``) to the output dtype; ``bias``: an int32 bias not yet in ``acc``,
        added in real values as MegEngine's ConvBias adds it."""
        self._output_check()
        meta = self.output_meta
        zp = self.output_zero_point if self.output_zero_point is not None else Tensor(0.0)
        if bias is not None:
            op = _q.requantize_add.bind(qmin=meta.qmin, qmax=meta.qmax, dtype=meta.np_dtype_str, relu=relu)
            out = apply(op, acc, bias, in_scale, self.output_scale, zp)
        else:
            op = _q.requantize.bind(qmin=meta.qmin, qmax=meta.qmax, dtype=meta.np_dtype_str, relu=relu)
            out = apply(op, acc, in_scale, self.output_scale, zp)
        mode = QuantMode.SYMMERTIC if self.output_zero_point is None else QuantMode.ASYMMERTIC
        out.qparams.update(create_qparams(mode, meta, self.output_scale, self.output_zero_point))
        return out
