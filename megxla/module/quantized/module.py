"""``QuantizedModule`` and the representation of quantized tensors in inference.

A quantized tensor is a Tensor of the dtype's integer storage (int8, uint8, int32) whose ``qparams`` carry
the quantized dtype, scale and zero point; :func:`quantize_tensor` / :func:`dequantize_tensor` convert."""
from __future__ import annotations

import numpy as np

from ...core._dispatch import apply
from ...core._tensor import Tensor
from ...core.ops import quant as _q
from ...core.tensor.dtype import create_quantized_dtype
from ...quantization.utils import QuantMode, _meta, create_qparams
from ..module import Module

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
    # saturated to the storage type, as MegEngine's ``astype`` to a quantized dtype: a narrow range
    # (qint8_narrow) is the fake quantizer's clip in training, not the converted weight's (-128 stays -128)
    info = np.iinfo(meta.np_dtype_str)
    op = _q.quantize.bind(qmin=int(info.min), qmax=int(info.max), dtype=meta.np_dtype_str)
    out = apply(op, x, _f32(scale), _f32(zp))
    mode = QuantMode.SYMMERTIC if zero_point is None else QuantMode.ASYMMERTIC
    out.qparams.update(create_qparams(mode, meta, _f32(scale), None if zero_point is None else _f32(zero_point)))
    return out


def dequantize_tensor(q: Tensor) -> Tensor:
    """The float32 value ``(q - zp) * s`` of a quantized tensor (see :func:`quantize_tensor`)."""
    qp = q.qparams
    if qp is None or qp.scale is None:
        raise ValueError(f"dequantize: the tensor (dtype {q.dtype}) carries no quantization parameters")
    zp = qp.zero_point if qp.zero_point is not None else 0.0
    return apply(_q.dequantize.bind(), q, _f32(qp.scale), _f32(zp))


class QuantizedModule(Module):
    r"""Base class of quantized (inference) modules, made from QAT modules by
    :func:`megxla.quantization.quantize` through ``from_qat_module``."""

    def __repr__(self):
        return "Quantized." + super().__repr__()

    def __call__(self, *args, **kwargs):
        if self.training:
            raise ValueError("quantized modules are for inference: call .eval() first")
        return super().__call__(*args, **kwargs)

    @classmethod
    def from_qat_module(cls, qat_module):
        """The quantized module of a trained QAT module."""
        raise TypeError(f"{cls.__name__} does not define from_qat_module")


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

    def _quantize_output(self, x):
        return quantize_tensor(x, self.output_meta, self.output_scale, self.output_zero_point)

    def _requantize(self, acc, in_scale, relu=False):
        meta = self.output_meta
        zp = self.output_zero_point if self.output_zero_point is not None else Tensor(0.0)
        op = _q.requantize.bind(qmin=meta.qmin, qmax=meta.qmax, dtype=meta.np_dtype_str, relu=relu)
        out = apply(op, acc, in_scale, self.output_scale, zp)
        mode = QuantMode.SYMMERTIC if self.output_zero_point is None else QuantMode.ASYMMERTIC
        out.qparams.update(create_qparams(mode, meta, self.output_scale, self.output_zero_point))
        return out
