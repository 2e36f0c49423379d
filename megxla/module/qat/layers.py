"""QAT versions of the float layers: the float computation with fake-quantized weights, bias and output.
Parameters are shared with the float module they come from (``from_float_module``)."""
from __future__ import annotations

from ... import functional as F
from .. import batch_matmul_activation as _bmm
from .. import concat as _concat
from .. import conv as _conv
from .. import elemwise as _elemwise
from .. import linear as _linear
from .. import quant_dequant as _qd
from .module import QATModule

__all__ = ["Conv2d", "ConvRelu2d", "ConvTranspose2d", "ConvTransposeRelu2d", "Linear", "LinearRelu", "Elemwise",
           "Concat", "QuantStub", "DequantStub", "BatchMatMulActivation"]


def _share(qat, float_module, *names):
    for n in names:
        setattr(qat, n, getattr(float_module, n))
    return qat


class Conv2d(_conv.Conv2d, QATModule):
    """QAT :class:`~megxla.module.Conv2d`."""

    def calc_conv_qat(self, inp):
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_conv(inp, w_qat, b_qat)

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_conv_qat(inp))

    @classmethod
    def from_float_module(cls, m):
        q = cls(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation, m.groups,
                m.bias is not None, m.conv_mode, m.compute_mode, m.padding_mode, name=m.name)
        return _share(q, m, "weight", "bias")


class ConvRelu2d(Conv2d):
    """QAT :class:`~megxla.module.ConvRelu2d`."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_conv_qat(inp)))


class ConvTranspose2d(_conv.ConvTranspose2d, QATModule):
    """QAT :class:`~megxla.module.ConvTranspose2d`."""

    def calc_conv_transpose2d_qat(self, inp):
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_conv_transpose2d(inp, w_qat, b_qat)

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_conv_transpose2d_qat(inp))

    @classmethod
    def from_float_module(cls, m):
        q = cls(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.output_padding, m.dilation,
                m.groups, m.bias is not None, m.conv_mode, m.compute_mode, name=m.name)
        return _share(q, m, "weight", "bias")


class ConvTransposeRelu2d(ConvTranspose2d):
    """QAT :class:`~megxla.module.ConvTransposeRelu2d`."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_conv_transpose2d_qat(inp)))


class Linear(_linear.Linear, QATModule):
    """QAT :class:`~megxla.module.Linear`."""

    def calc_linear_qat(self, inp):
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_linear(inp, w_qat, b_qat)

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_linear_qat(inp))

    @classmethod
    def from_float_module(cls, m):
        q = cls(m.in_features, m.out_features, m.bias is not None, m.compute_mode, name=m.name)
        return _share(q, m, "weight", "bias")


class LinearRelu(Linear):
    """QAT :class:`~megxla.module.LinearRelu`."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_linear_qat(inp)))


class Elemwise(_elemwise.Elemwise, QATModule):
    """QAT :class:`~megxla.module.Elemwise`: the output is fake-quantized."""

    with_weight = False

    def forward(self, *inps):
        return self.apply_quant_activation(super().forward(*inps))

    @classmethod
    def from_float_module(cls, m):
        return cls(m.method, name=m.name)


class Concat(_concat.Concat, QATModule):
    """QAT :class:`~megxla.module.Concat`: the output is fake-quantized.

    NOTE: it keeps QATModule's ``with_weight = True`` as MegEngine's does (only Elemwise and the stubs turn it
    off), so it holds a weight observer and fake-quantizer that nothing feeds: their state is in MegEngine's
    checkpoints (``cat.weight_observer.min_val``…, TQT's ``cat.weight_fake_quant.scale`` a parameter), which a
    strict ``load_state_dict`` must find here.
    """

    def forward(self, inps, axis: int = 0):
        return self.apply_quant_activation(super().forward(inps, axis))

    @classmethod
    def from_float_module(cls, m):
        return cls(name=m.name)


class QuantStub(_qd.QuantStub, QATModule):
    """Where quantization starts: fake-quantizes its input with the activation config."""

    with_weight = False

    def forward(self, inp):
        return self.apply_quant_activation(inp)

    @classmethod
    def from_float_module(cls, m):
        return cls(name=m.name)


class DequantStub(_qd.DequantStub, QATModule):
    """Where quantization ends: identity in QAT."""

    with_weight = False
    with_act = False

    def forward(self, inp):
        return inp

    @classmethod
    def from_float_module(cls, m):
        return cls(name=m.name)


class BatchMatMulActivation(_bmm.BatchMatMulActivation, QATModule):
    """QAT :class:`~megxla.module.BatchMatMulActivation`."""

    def forward(self, inp):
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.apply_quant_activation(self._calc_linear(inp, w_qat, b_qat))

    @classmethod
    def from_float_module(cls, m):
        q = cls(m.batch, m.in_features, m.out_features, m.bias is not None, m.nonlinear_mode, name=m.name)
        return _share(q, m, "weight", "bias")
