"""Quantized inference layers. Conv2d and Linear run in integer arithmetic (int32 accumulation, exact);
the other layers dequantize, compute in float32 and quantize their output."""
from __future__ import annotations

import numpy as np

from ... import functional as F
from ...core._dispatch import apply
from ...core._tensor import Tensor
from ...core.ops import quant as _q
from ...quantization.utils import QuantMode
from .module import QuantizedModule, _OutputQuant, dequantize_tensor, quantize_tensor

__all__ = ["Conv2d", "ConvRelu2d", "ConvTranspose2d", "ConvTransposeRelu2d", "ConvBn2d", "ConvBnRelu2d",
           "ConvTransposeBn2d", "ConvTransposeBnRelu2d", "Linear", "LinearRelu", "LinearBn1d",
           "LinearBnRelu1d", "Elemwise", "Concat", "QuantStub", "DequantStub", "BatchMatMulActivation"]


def _input_scale_zp(inp, who):
    qp = getattr(inp, "qparams", None)
    if qp is None or qp.scale is None or qp.dtype_meta is None:
        raise ValueError(f"{who}: the input is not a quantized tensor (put a QuantStub before the first "
                         f"quantized layer); got dtype {inp.dtype}")
    zp = qp.zero_point if qp.mode == QuantMode.ASYMMERTIC and qp.zero_point is not None else Tensor(0.0)
    return qp.scale, zp


class _WeightLayer(QuantizedModule, _OutputQuant):
    """Holds the quantized weight (symmetric, int storage) and the float bias of a QAT layer."""

    _relu = False
    _bias_shape = (-1,)  # as MegEngine's state_dict: (C,) for Linear, (1, C, 1, 1) for Conv2d

    def _take(self, qat, weight, bias):
        qp = qat.get_weight_qparams()
        if qp is None or qp.scale is None:
            raise ValueError(f"quantize: {type(qat).__name__} has no weight quantization parameters")
        if qp.mode != QuantMode.SYMMERTIC:
            raise ValueError("quantize: quantized layers need symmetric weight quantization")
        self.weight_scale = Tensor(np.asarray(qp.scale.numpy(), np.float32).reshape(()))
        self.weight = quantize_tensor(weight.detach(), qp.dtype_meta, self.weight_scale)
        self.bias = None if bias is None else Tensor(bias.numpy().reshape(self._bias_shape), dtype="float32")
        # the parameters keep the names the user gave them, as MegEngine's from_qat_module (dumped graphs show them)
        self.weight.name = weight.name
        if bias is not None:
            self.bias.name = bias.name
        self._set_output(qat)

    def _int_bias(self, in_scale, n):
        if self.bias is None:
            return Tensor(np.zeros((n,), np.int32))
        return quantize_tensor(self.bias.reshape(-1), "qint32", in_scale * self.weight_scale)


class Conv2d(_WeightLayer):
    r"""Quantized 2-D convolution: ``requantize(conv(x - zp_x, w_q) + b_q)`` in int32."""

    _bias_shape = (1, -1, 1, 1)

    def __init__(self, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, **kwargs):
        super().__init__(**kwargs)
        self.stride, self.padding, self.dilation, self.groups = tuple(stride), tuple(padding), tuple(dilation), groups

    @classmethod
    def from_qat_module(cls, qat, weight=None, bias=None):
        conv = getattr(qat, "conv", qat)
        q = cls(conv.stride, conv.padding, conv.dilation, conv.groups, name=qat.name)
        q.padding_mode = getattr(conv, "padding_mode", "zeros")
        # MegEngine's repr: "Quantized.Conv2d(3, 3, kernel_size=...)", never "bias=False" (its quantized
        # convolution always holds a bias, zeros when the QAT one has none)
        q._conv_info = conv._module_info_string().replace(", bias=False", "")
        q._take(qat, qat.weight if weight is None else weight, qat.bias if weight is None else bias)
        return q

    padding_mode = "zeros"
    _conv_info = ""

    def _module_info_string(self):
        return self._conv_info

    def forward(self, inp):
        in_scale, zp = _input_scale_zp(inp, type(self).__name__)
        n = self.weight.shape[0] * (self.weight.shape[1] if self.weight.ndim == 5 else 1)
        padding = self.padding
        if self.padding_mode != "zeros":  # reflected / replicated quantized values stay on the input's grid
            ph, pw = padding
            inp = F.nn.pad(inp, ((0, 0), (0, 0), (ph, ph), (pw, pw)), mode=self.padding_mode)
            padding = (0, 0)
        op = _q.qconv2d.bind(stride=self.stride, padding=padding, dilation=self.dilation, groups=self.groups)
        acc = apply(op, inp, self.weight, self._int_bias(in_scale, n), zp)
        return self._requantize(acc, in_scale * self.weight_scale, relu=self._relu)


class ConvRelu2d(Conv2d):
    """Quantized :class:`Conv2d` followed by ReLU."""

    _relu = True


def _folded(qat):
    """The BN-folded weight and bias of a QAT Conv/Linear-BN module (evaluation-mode folding)."""
    layer = qat._layer()
    bn = qat.bn
    n = bn.num_features
    gamma = bn.weight.reshape(-1) if bn.weight is not None else F.ones((n,))
    beta = bn.bias.reshape(-1) if bn.bias is not None else F.zeros((n,))
    scale = gamma / F.sqrt(bn.running_var.reshape(-1) + bn.eps)
    # fake-quantized as in training (MegEngine's fold_weight_bias): a narrow weight range clips here
    w = qat.apply_quant_weight(layer.weight * scale.reshape(qat._weight_scale_shape(layer)))
    lb = layer.bias.reshape(-1) if layer.bias is not None else F.zeros((n,))
    b = beta + (lb - bn.running_mean.reshape(-1)) * scale
    return w.detach(), b.detach()


class _FoldsBn:
    """Mixin: built from a QAT layer-BN module with the BatchNorm folded into the weight and bias."""

    @classmethod
    def from_qat_module(cls, qat):
        w, b = _folded(qat)
        return super().from_qat_module(qat, w, b)


class ConvBn2d(_FoldsBn, Conv2d):
    """Quantized ConvBn2d: the BatchNorm folded into the convolution."""


class ConvBnRelu2d(ConvBn2d):
    """Quantized ConvBnRelu2d."""

    _relu = True


class Linear(_WeightLayer):
    r"""Quantized linear layer in int32 arithmetic."""

    @classmethod
    def from_qat_module(cls, qat, weight=None, bias=None):
        q = cls(name=qat.name)
        q._take(qat, qat.weight if weight is None else weight, qat.bias if weight is None else bias)
        return q

    def forward(self, inp):
        in_scale, zp = _input_scale_zp(inp, type(self).__name__)
        acc = apply(_q.qlinear.bind(), inp, self.weight, self._int_bias(in_scale, self.weight.shape[0]), zp)
        return self._requantize(acc, in_scale * self.weight_scale, relu=self._relu)


class LinearRelu(Linear):
    """Quantized Linear followed by ReLU."""

    _relu = True


class LinearBn1d(_FoldsBn, Linear):
    """Quantized LinearBn1d (BatchNorm folded)."""


class LinearBnRelu1d(LinearBn1d):
    """Quantized LinearBnRelu1d."""

    _relu = True


class _FloatCompute(QuantizedModule, _OutputQuant):
    """Layers without integer kernels here: dequantize the inputs, run the float layer, quantize the output."""

    def __init__(self, float_forward, **kwargs):
        super().__init__(**kwargs)
        self._float_forward = float_forward

    _info = ""

    def _module_info_string(self):
        return self._info  # the float layer's, as MegEngine's quantized modules (subclasses of the float ones)

    @classmethod
    def _info_of(cls, qat):
        return ""

    def forward(self, *inps, **kwargs):
        # (non-tensor arguments, such as Concat's axis given positionally, pass through)
        args = [dequantize_tensor(x) if isinstance(x, Tensor) else
                [dequantize_tensor(t) for t in x] if isinstance(x, (list, tuple)) else x for x in inps]
        return self._quantize_output(self._float_forward(*args, **kwargs))

    @classmethod
    def from_qat_module(cls, qat):
        q = cls(cls._float_of(qat), name=qat.name)
        q._info = cls._info_of(qat)
        q._set_output(qat)
        return q


def _weight_forward(qat, method, fold=False, relu=False):
    """A float forward with the fake-quantized (final) weight of ``qat`` frozen in."""
    if fold:
        w, b = _folded(qat)
        layer = qat._layer()
    else:
        w, b, layer = qat.weight.detach(), (None if qat.bias is None else qat.bias.detach()), qat
    # (a folded weight is fake-quantized already, by _folded)
    wq = qat.apply_quant_weight(w).detach() if qat.weight_fake_quant is not None and not fold else w
    if fold and b is not None:
        b = b.reshape(1, -1, 1, 1)
    run = getattr(layer, method)

    def fwd(x):
        y = run(x, wq, b)
        return F.relu(y) if relu else y
    return fwd


class ConvTranspose2d(_FloatCompute):
    """Quantized ConvTranspose2d (float compute between dequantize and quantize)."""

    _relu = False

    @classmethod
    def _float_of(cls, qat):
        return _weight_forward(qat, "calc_conv_transpose2d", relu=cls._relu)

    @classmethod
    def _info_of(cls, qat):  # MegEngine: "Quantized.ConvTranspose2d(3, 4, kernel_size=(3, 3))"
        return getattr(qat, "conv_transpose2d", qat)._module_info_string()


class ConvTransposeRelu2d(ConvTranspose2d):
    """Quantized ConvTransposeRelu2d."""

    _relu = True


class ConvTransposeBn2d(_FloatCompute):
    """Quantized ConvTransposeBn2d."""

    _relu = False

    @classmethod
    def _float_of(cls, qat):
        return _weight_forward(qat, "calc_conv_transpose2d", fold=True, relu=cls._relu)

    @classmethod
    def _info_of(cls, qat):  # the folded BatchNorm gives MegEngine's quantized layer a bias: no "bias=False"
        return ConvTranspose2d._info_of(qat).replace(", bias=False", "")


class ConvTransposeBnRelu2d(ConvTransposeBn2d):
    """Quantized ConvTransposeBnRelu2d."""

    _relu = True


class BatchMatMulActivation(_FloatCompute):
    """Quantized BatchMatMulActivation."""

    @classmethod
    def _float_of(cls, qat):
        w = qat.apply_quant_weight(qat.weight.detach()).detach()
        b = None if qat.bias is None else qat.bias.detach()
        return lambda x: qat._calc_linear(x, w, b)

    @classmethod
    def _info_of(cls, qat):  # MegEngine: "Quantized.BatchMatMulActivation(batch=2, ..., bias=True)"
        # MegEngine's quantized layer always has a bias (zeros when the QAT one has none): "bias=True"
        return qat._module_info_string().replace("bias=False", "bias=True")


class Elemwise(_FloatCompute):
    """Quantized Elemwise."""

    @classmethod
    def _float_of(cls, qat):
        from ..elemwise import _MODES
        return _MODES[str(qat.method).upper()]


class Concat(_FloatCompute):
    """Quantized Concat (inputs may have different scales)."""

    @classmethod
    def _float_of(cls, qat):
        return lambda inps, axis=0: F.concat(inps, axis)


class QuantStub(QuantizedModule, _OutputQuant):
    """Quantizes a float input with the parameters its QAT module learned."""

    def forward(self, inp):
        return self._quantize_output(inp)

    @classmethod
    def from_qat_module(cls, qat):
        q = cls(name=qat.name)
        q._set_output(qat)
        return q


class DequantStub(QuantizedModule):
    """Converts a quantized tensor back to float32."""

    def forward(self, inp):
        return dequantize_tensor(inp)

    @classmethod
    def from_qat_module(cls, qat):
        return cls(name=qat.name)
