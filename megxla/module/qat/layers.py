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
    """QAT :class:`~megxla.module.Conv2d`: the convolution with a fake-quantized weight, bias and output.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, conv_mode, compute_mode,
        padding_mode: as :class:`~megxla.module.Conv2d`; usually built by :meth:`from_float_module` (sharing the
        float module's parameters) or :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.Conv2d.from_float_module(M.Conv2d(2, 3, 3, padding=1))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(1, 2, 4, 4).astype("float32")))
        >>> y.shape
        (1, 3, 4, 4)
    """

    def calc_conv_qat(self, inp):
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_conv(inp, w_qat, b_qat)

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_conv_qat(inp))

    @classmethod
    def from_float_module(cls, float_module):
        m = float_module
        q = cls(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation, m.groups,
                m.bias is not None, m.conv_mode, m.compute_mode, m.padding_mode, name=m.name)
        return _share(q, m, "weight", "bias")


class ConvRelu2d(Conv2d):
    """QAT :class:`~megxla.module.ConvRelu2d`: :class:`Conv2d` followed by ReLU, the output fake-quantized.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, conv_mode, compute_mode,
        padding_mode: as :class:`~megxla.module.Conv2d`; usually built by :meth:`from_float_module` (sharing the
        float module's parameters) or :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.ConvRelu2d.from_float_module(M.ConvRelu2d(2, 3, 1))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(1, 2, 4, 4).astype("float32")))
        >>> y.shape, bool((y.numpy() >= 0).all())
        ((1, 3, 4, 4), True)
    """

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_conv_qat(inp)))


class ConvTranspose2d(_conv.ConvTranspose2d, QATModule):
    """QAT :class:`~megxla.module.ConvTranspose2d`: the transposed convolution with a fake-quantized weight,
    bias and output.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation, groups, bias, conv_mode,
        compute_mode: as :class:`~megxla.module.ConvTranspose2d`; usually built by :meth:`from_float_module`
        (sharing the float module's parameters) or :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.ConvTranspose2d.from_float_module(M.ConvTranspose2d(2, 3, 2, stride=2))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(1, 2, 4, 4).astype("float32")))
        >>> y.shape
        (1, 3, 8, 8)
    """

    def calc_conv_transpose2d_qat(self, inp):
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_conv_transpose2d(inp, w_qat, b_qat)

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_conv_transpose2d_qat(inp))

    @classmethod
    def from_float_module(cls, float_module):
        m = float_module
        q = cls(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.output_padding, m.dilation,
                m.groups, m.bias is not None, m.conv_mode, m.compute_mode, name=m.name)
        return _share(q, m, "weight", "bias")


class ConvTransposeRelu2d(ConvTranspose2d):
    """QAT :class:`~megxla.module.ConvTransposeRelu2d`: :class:`ConvTranspose2d` followed by ReLU.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation, groups, bias, conv_mode,
        compute_mode: as :class:`~megxla.module.ConvTranspose2d`; usually built by :meth:`from_float_module`
        (sharing the float module's parameters) or :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.ConvTransposeRelu2d.from_float_module(M.ConvTransposeRelu2d(2, 3, 2, stride=2))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(1, 2, 4, 4).astype("float32")))
        >>> y.shape, bool((y.numpy() >= 0).all())
        ((1, 3, 8, 8), True)
    """

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_conv_transpose2d_qat(inp)))


class Linear(_linear.Linear, QATModule):
    """QAT :class:`~megxla.module.Linear`: the linear layer with a fake-quantized weight, bias and output.

    Args:
        in_features, out_features, bias, compute_mode: as :class:`~megxla.module.Linear`; usually built by
        :meth:`from_float_module` (sharing the float module's parameters) or
        :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.Linear.from_float_module(M.Linear(4, 3))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(2, 4).astype("float32")))
        >>> y.shape
        (2, 3)
    """

    def calc_linear_qat(self, inp):
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_linear(inp, w_qat, b_qat)

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_linear_qat(inp))

    @classmethod
    def from_float_module(cls, float_module):
        m = float_module
        q = cls(m.in_features, m.out_features, m.bias is not None, m.compute_mode, name=m.name)
        return _share(q, m, "weight", "bias")


class LinearRelu(Linear):
    """QAT :class:`~megxla.module.LinearRelu`: :class:`Linear` followed by ReLU, the output fake-quantized.

    Args:
        in_features, out_features, bias, compute_mode: as :class:`~megxla.module.Linear`; usually built by
        :meth:`from_float_module` (sharing the float module's parameters) or
        :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.LinearRelu.from_float_module(M.LinearRelu(4, 3))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(2, 4).astype("float32")))
        >>> y.shape, bool((y.numpy() >= 0).all())
        ((2, 3), True)
    """

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_linear_qat(inp)))


class Elemwise(_elemwise.Elemwise, QATModule):
    """QAT :class:`~megxla.module.Elemwise`: the float element-wise operation, its output fake-quantized.

    Args:
        method: the element-wise mode, as :class:`~megxla.module.Elemwise` (``"add"``, ``"fuse_add_relu"``...).

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.Elemwise.from_float_module(M.Elemwise("add"))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> x = mge.Tensor([[0.5, -1.0]])
        >>> m(x, x).numpy()
        array([[ 1.0039216, -1.992157 ]], dtype=float32)
        >>> m.get_activation_qparams().dtype_meta.name
        'qint8'
    """

    with_weight = False

    def forward(self, *inps):
        return self.apply_quant_activation(super().forward(*inps))

    @classmethod
    def from_float_module(cls, float_module):
        return cls(float_module.method, name=float_module.name)


class Concat(_concat.Concat, QATModule):
    """QAT :class:`~megxla.module.Concat`: the float concatenation, its output fake-quantized.

    NOTE: it keeps QATModule's ``with_weight = True`` as MegEngine's does (only Elemwise and the stubs turn it
    off), so it holds a weight observer and fake-quantizer that nothing feeds: their state is in MegEngine's
    checkpoints (``cat.weight_observer.min_val``…, TQT's ``cat.weight_fake_quant.scale`` a parameter), which a
    strict ``load_state_dict`` must find here.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.Concat.from_float_module(M.Concat())
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> m([mge.Tensor(np.ones((2, 3), "float32")), mge.Tensor(np.zeros((2, 1), "float32"))], axis=1).shape
        (2, 4)
    """

    def forward(self, inps, axis: int = 0):
        return self.apply_quant_activation(super().forward(inps, axis))

    @classmethod
    def from_float_module(cls, float_module):
        return cls(name=float_module.name)


class QuantStub(_qd.QuantStub, QATModule):
    """Where quantization starts: fake-quantizes its input with the activation config (its observer learns
    the input's range).

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.QuantStub(); m.set_qconfig(ema_fakequant_qconfig)
        >>> m(mge.Tensor([0.26, -1.0])).numpy()
        array([ 0.25882354, -0.9960785 ], dtype=float32)
        >>> m.get_activation_qparams().scale.item()
        0.0078431...
    """

    with_weight = False

    def forward(self, inp):
        return self.apply_quant_activation(inp)

    @classmethod
    def from_float_module(cls, float_module):
        return cls(name=float_module.name)


class DequantStub(_qd.DequantStub, QATModule):
    """Where quantization ends: identity in QAT (the quantized model dequantizes here).

    Example:
        >>> from megxla.module import qat
        >>> qat.DequantStub.from_float_module(M.DequantStub())(mge.Tensor([0.5, -1.0])).numpy()
        array([ 0.5, -1. ], dtype=float32)
    """

    with_weight = False
    with_act = False

    def forward(self, inp):
        return inp

    @classmethod
    def from_float_module(cls, float_module):
        return cls(name=float_module.name)


class BatchMatMulActivation(_bmm.BatchMatMulActivation, QATModule):
    """QAT :class:`~megxla.module.BatchMatMulActivation`: the batched linear layer with a fake-quantized weight,
    bias and output.

    Args:
        batch, in_features, out_features, bias, nonlinear_mode: as :class:`~megxla.module.BatchMatMulActivation`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.BatchMatMulActivation.from_float_module(M.BatchMatMulActivation(2, 3, 4))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> m(mge.Tensor(np.ones((2, 3, 4), "float32"))).shape
        (2, 4, 4)
    """

    def forward(self, inp):
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.apply_quant_activation(self._calc_linear(inp, w_qat, b_qat))

    @classmethod
    def from_float_module(cls, float_module):
        m = float_module
        q = cls(m.batch, m.in_features, m.out_features, m.bias is not None, m.nonlinear_mode, name=m.name)
        return _share(q, m, "weight", "bias")
