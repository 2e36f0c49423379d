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

    # the shape of a per-channel value broadcast against the layer's output: (1, C, 1, 1), a Linear's (C,)
    _channel_shape = (1, -1, 1, 1)

    def get_batch_mean_var(self, inp):
        r"""The batch mean and (biased) variance of each channel (axis 1) of ``inp``, with its rank kept: MegEngine's
        ``(sum(x ** 2) - sum(x) ** 2 / n) / n``, summed one axis after the other."""
        axes = [a for a in range(inp.ndim) if a != 1]
        sum1, sum2 = inp, inp ** 2
        for a in axes:
            sum1 = F.sum(sum1, axis=a, keepdims=True)
            sum2 = F.sum(sum2, axis=a, keepdims=True)
        reduce_size = inp.size / inp.shape[1]
        batch_mean = sum1 / reduce_size
        batch_var = (sum2 - sum1 ** 2 / reduce_size) / reduce_size
        return batch_mean, batch_var

    def fold_weight_bias(self, bn_mean, bn_var):
        r"""The layer's weight with the BatchNorm folded in, fake-quantized (through the weight observer, which
        observes it when enabled), and the folded bias, for the statistics ``bn_mean`` / ``bn_var`` (None: zeros /
        ones); as MegEngine's, term for term."""
        layer, bn = self._layer(), self.bn
        n, cs = bn.num_features, self._channel_shape
        gamma = (bn.weight if bn.weight is not None else F.ones((n,), dtype="float32")).reshape(cs)
        beta = (bn.bias if bn.bias is not None else F.zeros((n,), dtype="float32")).reshape(cs)
        bn_mean = (bn_mean if bn_mean is not None else F.zeros((n,), dtype="float32")).reshape(cs)
        bn_var = (bn_var if bn_var is not None else F.ones((n,), dtype="float32")).reshape(cs)
        layer_bias = (layer.bias if layer.bias is not None else F.zeros((n,), dtype="float32")).reshape(cs)
        bn_istd = 1.0 / F.sqrt(bn_var + bn.eps)
        scale_factor = gamma * bn_istd
        w_fold = self.apply_quant_weight(layer.weight * scale_factor.reshape(self._weight_scale_shape(layer)))
        b_fold = beta + gamma * (layer_bias - bn_mean) * bn_istd
        return w_fold, b_fold

    def update_running_mean_and_running_var(self, bn_mean, bn_var, num_elements_per_channel):
        r"""Move the BatchNorm's running statistics towards a batch's (its variance made unbiased), without
        gradient, as MegEngine's."""
        bn = self.bn
        bn_mean = bn_mean.detach().reshape(bn.running_mean.shape)
        bn_var = (bn_var.detach() * num_elements_per_channel / (num_elements_per_channel - 1)).reshape(
            bn.running_var.shape)
        exponential_average_factor = 1 - bn.momentum
        bn.running_mean *= bn.momentum
        bn.running_mean += exponential_average_factor * bn_mean
        bn.running_var *= bn.momentum
        bn.running_var += exponential_average_factor * bn_var

    def _fused_qat(self, inp, approx=True):
        layer, bn = self._layer(), self.bn
        if self.training and not approx:
            # (MegEngine's exact folding: the batch statistics of the float layer's output, which also update the
            # running ones; forward() never asks for it)
            out = self._run_layer(layer, inp, layer.weight, layer.bias)
            bn_mean, bn_var = self.get_batch_mean_var(out)
            self.update_running_mean_and_running_var(bn_mean, bn_var, out.size / out.shape[1])
        else:
            bn_mean, bn_var = bn.running_mean, bn.running_var
        n = bn.num_features
        gamma = bn.weight if bn.weight is not None else F.ones((n,), dtype="float32")
        beta = bn.bias if bn.bias is not None else F.zeros((n,), dtype="float32")
        mean, var = bn_mean.reshape(-1), bn_var.reshape(-1)
        gamma, beta = gamma.reshape(-1), beta.reshape(-1)
        layer_bias = layer.bias.reshape(-1) if layer.bias is not None else F.zeros((n,), dtype="float32")
        # NOTE: MegEngine's expressions term for term (1 / sqrt, then a product; not gamma / sqrt): the folded
        # weight is fake-quantized, so a 1-ulp difference here moves values across rounding boundaries
        bn_istd = 1.0 / F.sqrt(var + bn.eps)
        scale_factor = gamma * bn_istd
        w_fold = layer.weight * scale_factor.reshape(self._weight_scale_shape(layer))
        out_shape = (1, -1) + (1,) * (inp.ndim - 2)
        approx_training = self.training and approx
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

    def calc_conv_bn_qat(self, inp, approx=True):
        r"""The fused convolution and BatchNorm with the fake-quantized folded weight (``approx``: in training, fold
        with the running variance and undo the folding before the real BatchNorm), before the activation."""
        return self._fused_qat(inp, approx)

    @classmethod
    def from_float_module(cls, float_module):
        c = float_module.conv
        q = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding, c.dilation, c.groups,
                c.bias is not None, c.conv_mode, c.compute_mode, padding_mode=c.padding_mode, name=float_module.name)
        q.conv.weight, q.conv.bias, q.bn = c.weight, c.bias, float_module.bn
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

    def calc_conv_transpose2d_bn_qat(self, inp, approx=True):
        r"""The fused transposed convolution and BatchNorm with the fake-quantized folded weight (``approx``: in
        training, fold with the running variance and undo the folding before the real BatchNorm)."""
        return self._fused_qat(inp, approx)

    @classmethod
    def from_float_module(cls, float_module):
        c = float_module.conv_transpose2d
        q = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding, c.output_padding, c.dilation,
                c.groups, c.bias is not None, c.conv_mode, c.compute_mode, name=float_module.name)
        q.conv_transpose2d.weight, q.conv_transpose2d.bias, q.bn = c.weight, c.bias, float_module.bn
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

    _channel_shape = (-1,)

    def _run_layer(self, linear, inp, weight, bias):
        return linear.calc_linear(inp, weight, None if bias is None else bias.reshape(-1))

    def calc_linear_bn_qat(self, inp, approx=True):
        r"""The fused linear layer and BatchNorm with the fake-quantized folded weight (``approx``: in training,
        fold with the running variance and undo the folding before the real BatchNorm)."""
        return self._fused_qat(inp, approx)

    @classmethod
    def from_float_module(cls, float_module):
        l, bn = float_module.linear, float_module.bn
        q = cls(l.in_features, l.out_features, l.bias is not None, l.compute_mode, bn.eps, bn.momentum, bn.affine,
                bn.track_running_stats, name=float_module.name)
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
