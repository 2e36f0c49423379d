"""QAT versions of the Conv/ConvTranspose/Linear + BatchNorm (+ ReLU) modules: the BatchNorm is folded into
the weight before fake quantization, so training sees the quantization error of the fused inference layer.

In training (MegEngine's default "approximate" folding) the weight is folded with the *running* variance,
the layer runs without bias, and the folding is undone on the output before the real BatchNorm (which
updates the running statistics); in evaluation weight and bias are folded with the running statistics.
"""
from __future__ import annotations

from ... import functional as F
from .. import conv_bn as _conv_bn
from .. import linear_bn as _linear_bn
from .module import QATModule

__all__ = ["ConvBn2d", "ConvBnRelu2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d", "LinearBn1d",
           "LinearBnRelu1d"]


class _FoldedBn(QATModule):
    # Sub-classes name their layer attribute and how its weight's output-channel axis is laid out.
    _layer_attr = None

    def _layer(self):
        return getattr(self, self._layer_attr)

    def _weight_scale_shape(self, layer):
        raise TypeError

    def _run_layer(self, layer, inp, weight, bias):
        raise TypeError

    def _fused_qat(self, inp):
        layer, bn = self._layer(), self.bn
        n = bn.num_features
        gamma = bn.weight if bn.weight is not None else F.ones((n,), dtype="float32")
        beta = bn.bias if bn.bias is not None else F.zeros((n,), dtype="float32")
        mean, var = bn.running_mean.reshape(-1), bn.running_var.reshape(-1)
        gamma, beta = gamma.reshape(-1), beta.reshape(-1)
        layer_bias = layer.bias.reshape(-1) if layer.bias is not None else F.zeros((n,), dtype="float32")
        # NOTE: MegEngine's expressions term for term (1 / sqrt, then a product; not gamma / sqrt): the folded
        # weight is fake-quantized, so a 1-ulp difference here moves values across rounding boundaries
        bn_istd = 1.0 / F.sqrt(var + bn.eps)
        scale_factor = gamma * bn_istd
        w_fold = layer.weight * scale_factor.reshape(self._weight_scale_shape(layer))
        out_shape = (1, -1) + (1,) * (inp.ndim - 2)
        approx_training = self.training
        b_fold = None if approx_training else (beta + gamma * (layer_bias - mean) * bn_istd).reshape(out_shape)
        w_qat = self.apply_quant_weight(w_fold)
        b_qat = self.apply_quant_bias(b_fold, inp, w_qat)
        out = self._run_layer(layer, inp, w_qat, b_qat)
        if not approx_training:
            return out
        out = out / scale_factor.reshape(out_shape)
        if layer.bias is not None:
            out = out + layer_bias.reshape(out_shape)
        return bn(out)


class _ConvBnQAT(_FoldedBn):
    _layer_attr = "conv"

    def _weight_scale_shape(self, conv):
        return (-1, 1, 1, 1) if conv.groups == 1 else (conv.groups, -1, 1, 1, 1)

    def _run_layer(self, conv, inp, weight, bias):
        return conv.calc_conv(inp, weight, bias)

    @classmethod
    def from_float_module(cls, m):
        c = m.conv
        q = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding, c.dilation, c.groups,
                c.bias is not None, c.conv_mode, c.compute_mode, padding_mode=c.padding_mode, name=m.name)
        q.conv.weight, q.conv.bias, q.bn = c.weight, c.bias, m.bn
        return q


class ConvBn2d(_ConvBnQAT, _conv_bn.ConvBn2d):
    """QAT :class:`~megxla.module.ConvBn2d`: the BatchNorm folded into the fake-quantized weight.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, conv_mode, compute_mode,
        eps, momentum, affine, track_running_stats: as :class:`~megxla.module.ConvBn2d`; usually built by
        :meth:`from_float_module` (sharing the float module's parameters and BatchNorm) or
        :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.ConvBn2d.from_float_module(M.ConvBn2d(2, 3, 3, padding=1))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(2, 2, 4, 4).astype("float32")))
        >>> y.shape
        (2, 3, 4, 4)
    """

    def forward(self, inp):
        return self.apply_quant_activation(self._fused_qat(inp))


class ConvBnRelu2d(_ConvBnQAT, _conv_bn.ConvBnRelu2d):
    """QAT :class:`~megxla.module.ConvBnRelu2d`: :class:`ConvBn2d` followed by ReLU, the output fake-quantized.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, conv_mode, compute_mode,
        eps, momentum, affine, track_running_stats: as :class:`~megxla.module.ConvBn2d`; usually built by
        :meth:`from_float_module` (sharing the float module's parameters and BatchNorm) or
        :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.ConvBnRelu2d.from_float_module(M.ConvBnRelu2d(2, 3, 3, padding=1))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(2, 2, 4, 4).astype("float32")))
        >>> y.shape, bool((y.numpy() >= 0).all())
        ((2, 3, 4, 4), True)
    """

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self._fused_qat(inp)))


class _ConvTransposeBnQAT(_FoldedBn):
    _layer_attr = "conv_transpose2d"

    def _weight_scale_shape(self, conv):
        # weight (C_in, C_out, kh, kw), grouped (G, C_in/G, C_out/G, kh, kw): output channels on axis -3
        return (1, -1, 1, 1) if conv.groups == 1 else (conv.groups, 1, -1, 1, 1)

    def _run_layer(self, conv, inp, weight, bias):
        return conv.calc_conv_transpose2d(inp, weight, bias)

    @classmethod
    def from_float_module(cls, m):
        c = m.conv_transpose2d
        q = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding, c.output_padding, c.dilation,
                c.groups, c.bias is not None, c.conv_mode, c.compute_mode, name=m.name)
        q.conv_transpose2d.weight, q.conv_transpose2d.bias, q.bn = c.weight, c.bias, m.bn
        return q


class ConvTransposeBn2d(_ConvTransposeBnQAT, _conv_bn.ConvTransposeBn2d):
    """QAT :class:`~megxla.module.ConvTransposeBn2d`: the BatchNorm folded into the fake-quantized weight.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation, groups, bias,
        conv_mode, compute_mode, eps, momentum, affine, track_running_stats: as
        :class:`~megxla.module.ConvTransposeBn2d`; usually built by :meth:`from_float_module` (sharing the float
        module's parameters and BatchNorm) or :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.ConvTransposeBn2d.from_float_module(M.ConvTransposeBn2d(2, 3, 2, stride=2))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(2, 2, 4, 4).astype("float32")))
        >>> y.shape
        (2, 3, 8, 8)
    """

    def forward(self, inp):
        return self.apply_quant_activation(self._fused_qat(inp))


class ConvTransposeBnRelu2d(_ConvTransposeBnQAT, _conv_bn.ConvTransposeBnRelu2d):
    """QAT :class:`~megxla.module.ConvTransposeBnRelu2d`: :class:`ConvTransposeBn2d` followed by ReLU.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation, groups, bias,
        conv_mode, compute_mode, eps, momentum, affine, track_running_stats: as
        :class:`~megxla.module.ConvTransposeBn2d`; usually built by :meth:`from_float_module` (sharing the float
        module's parameters and BatchNorm) or :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.ConvTransposeBnRelu2d.from_float_module(M.ConvTransposeBnRelu2d(2, 3, 2, stride=2))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(2, 2, 4, 4).astype("float32")))
        >>> y.shape, bool((y.numpy() >= 0).all())
        ((2, 3, 8, 8), True)
    """

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self._fused_qat(inp)))


class _LinearBnQAT(_FoldedBn):
    _layer_attr = "linear"

    def _weight_scale_shape(self, linear):
        return (-1, 1)

    def _run_layer(self, linear, inp, weight, bias):
        return linear.calc_linear(inp, weight, None if bias is None else bias.reshape(-1))

    @classmethod
    def from_float_module(cls, m):
        l, bn = m.linear, m.bn
        q = cls(l.in_features, l.out_features, l.bias is not None, l.compute_mode, bn.eps, bn.momentum, bn.affine,
                bn.track_running_stats, name=m.name)
        q.linear.weight, q.linear.bias, q.bn = l.weight, l.bias, bn
        return q


class LinearBn1d(_LinearBnQAT, _linear_bn.LinearBn1d):
    """QAT :class:`~megxla.module.LinearBn1d`: the BatchNorm folded into the fake-quantized weight.

    Args:
        in_features, out_features, bias, compute_mode, eps, momentum, affine, track_running_stats: as
        :class:`~megxla.module.LinearBn1d`; usually built by :meth:`from_float_module` (sharing the float module's
        parameters and BatchNorm) or :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.LinearBn1d.from_float_module(M.LinearBn1d(4, 3))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(5, 4).astype("float32")))
        >>> y.shape
        (5, 3)
    """

    def forward(self, inp):
        return self.apply_quant_activation(self._fused_qat(inp))


class LinearBnRelu1d(_LinearBnQAT, _linear_bn.LinearBnRelu1d):
    """QAT :class:`~megxla.module.LinearBnRelu1d`: :class:`LinearBn1d` followed by ReLU.

    Args:
        in_features, out_features, bias, compute_mode, eps, momentum, affine, track_running_stats: as
        :class:`~megxla.module.LinearBn1d`; usually built by :meth:`from_float_module` (sharing the float module's
        parameters and BatchNorm) or :func:`~megxla.quantization.quantize_qat`.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import ema_fakequant_qconfig
        >>> m = qat.LinearBnRelu1d.from_float_module(M.LinearBnRelu1d(4, 3))
        >>> m.set_qconfig(ema_fakequant_qconfig)
        >>> y = m(mge.Tensor(np.random.rand(5, 4).astype("float32")))
        >>> y.shape, bool((y.numpy() >= 0).all())
        ((5, 3), True)
    """

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self._fused_qat(inp)))
