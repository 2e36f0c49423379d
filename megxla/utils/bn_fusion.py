"""``megengine.utils.bn_fusion``: fold a BatchNorm into the convolution or linear layer before it.

``fuse_conv_bn_relu_module(conv, bn, relu)`` returns one fused module: in evaluation mode a plain
``Conv2d``/``ConvRelu2d`` whose weight and bias absorb the BatchNorm's statistics and affine transform (what
inference and deployment want), in training mode a ``ConvBn2d``/``ConvBnRelu2d`` holding a copy of the BatchNorm
(what quantization-aware training wants). ``fuse_linear_bn_relu_module`` does the same for ``Linear`` and
``BatchNorm1d``.
"""
from __future__ import annotations

from copy import deepcopy

from .. import functional as F
from ..core._tensor import Parameter
from ..module import (BatchNorm1d, BatchNorm2d, Conv2d, ConvBn2d, ConvBnRelu2d, ConvRelu2d, ConvTranspose2d,
                      ConvTransposeBn2d, ConvTransposeBnRelu2d, ConvTransposeRelu2d, Linear, LinearBn1d,
                      LinearBnRelu1d, LinearRelu, ReLU)

__all__ = ["fold_weight_bias", "fuse_conv_bn_relu_module", "fuse_linear_bn_relu_module"]

# (layer type, bn type, relu type, training) -> the fused module type (no bn: no training key)
_FUSED = {
    (Conv2d, BatchNorm2d, ReLU, False): ConvRelu2d, (Conv2d, BatchNorm2d, ReLU, True): ConvBnRelu2d,
    (Conv2d, BatchNorm2d, False): Conv2d, (Conv2d, BatchNorm2d, True): ConvBn2d, (Conv2d, ReLU): ConvRelu2d,
    (ConvTranspose2d, BatchNorm2d, ReLU, False): ConvTransposeRelu2d,
    (ConvTranspose2d, BatchNorm2d, ReLU, True): ConvTransposeBnRelu2d,
    (ConvTranspose2d, BatchNorm2d, False): ConvTranspose2d, (ConvTranspose2d, BatchNorm2d, True): ConvTransposeBn2d,
    (ConvTranspose2d, ReLU): ConvTransposeRelu2d,
    (Linear, BatchNorm1d, ReLU, False): LinearRelu, (Linear, BatchNorm1d, ReLU, True): LinearBnRelu1d,
    (Linear, BatchNorm1d, False): Linear, (Linear, BatchNorm1d, True): LinearBn1d, (Linear, ReLU): LinearRelu,
}


def fold_weight_bias(weight, bias, gamma, beta, bn_mean, bn_var, eps=1e-5, transpose=False):
    """Weight and bias of ``batch_norm(layer(x))`` (inference statistics) as one layer.

    Args:
        weight: the layer's weight: ``(O, I, kh, kw)``, grouped ``(G, O/G, I/G, kh, kw)``, transposed
            ``(I, O, kh, kw)`` (``transpose=True``) or linear ``(O, I)``.
        bias: its bias, or None.
        gamma, beta: the BatchNorm's scale and shift, or None (1 and 0).
        bn_mean, bn_var: its running statistics, or None (0 and 1).
        eps: its epsilon.
        transpose: ``weight`` is a transposed convolution's.

    Returns:
        ``(weight, bias)``: the weight in the layer's layout; the bias ``(1, O, 1, 1)`` for a convolution,
        ``(O,)`` for a linear layer.

    Example:
        >>> w, b = fold_weight_bias(F.ones((2, 3)), None, mge.Tensor([2., 4.]), mge.Tensor([1., 1.]),
        ...                         mge.Tensor([0.5, 0.5]), mge.Tensor([3., 15.]), eps=1.0)
        >>> w.numpy(), b.numpy()   # scale = gamma / sqrt(var + eps) = 1; bias = beta - mean * scale
        (array([[1., 1., 1.],
               [1., 1., 1.]], dtype=float32), array([0.5, 0.5], dtype=float32))
    """
    linear = weight.ndim == 2
    if linear:
        out = weight.shape[0]
    elif weight.ndim == 5:
        out = weight.shape[0] * (weight.shape[2] if transpose else weight.shape[1])
    else:
        out = weight.shape[1] if transpose else weight.shape[0]

    def vec(t, fill):
        return F.full((out,), fill, dtype="float32") if t is None else t.reshape(-1)

    # MegEngine's order of roundings: istd = 1 / sqrt(var + eps), scale = gamma * istd, bias = beta + gamma *
    # (bias - mean) * istd (the same bits as its fused layers)
    gamma = vec(gamma, 1.0)
    istd = 1.0 / F.sqrt(vec(bn_var, 1.0) + eps)
    scale = gamma * istd
    folded_bias = vec(beta, 0.0) + gamma * (vec(bias, 0.0) - vec(bn_mean, 0.0)) * istd
    if linear:
        return weight * scale.reshape(-1, 1), folded_bias
    if weight.ndim == 5:  # grouped: the output channel is (group, channel in group)
        g = weight.shape[0]
        s = scale.reshape(g, 1, -1, 1, 1) if transpose else scale.reshape(g, -1, 1, 1, 1)
    else:
        s = scale.reshape(1, -1, 1, 1) if transpose else scale.reshape(-1, 1, 1, 1)
    return weight * s, folded_bias.reshape(1, -1, 1, 1)


def _fuse(layer, bn, relu, kind_args):
    key = tuple(type(m) for m in (layer, bn, relu) if m is not None)
    if bn is not None:
        if layer.training != bn.training:
            raise AssertionError(f"{type(layer).__name__} and BN both must be in the same mode (train or eval)")
        key += (layer.training,)
    fused_type = _FUSED.get(key)
    if fused_type is None:
        raise TypeError(f"bn_fusion: no fused module for {' + '.join(t.__name__ for t in key if isinstance(t, type))}")
    return fused_type(**kind_args), key


def _fill(module, target, weight, bias, kept_bn, training):
    # the fused module's layer (``target``) gets the (folded) weight and bias; a training-mode fusion keeps a
    # copy of the BatchNorm
    target.weight = Parameter(weight)
    if bias is not None:
        target.bias = Parameter(bias)
    if kept_bn is not None:
        module.bn = deepcopy(kept_bn)
    target.training = training
    return module


def fuse_conv_bn_relu_module(conv, bn, relu):
    """One module computing ``relu(bn(conv(x)))`` (``bn`` / ``relu`` may be None).

    In evaluation mode the BatchNorm is folded into the convolution's weight and bias; in training mode the
    fused module keeps a copy of it (``ConvBn2d``, ``ConvBnRelu2d``), for quantization-aware training.

    Args:
        conv: a ``Conv2d`` or ``ConvTranspose2d``.
        bn: a ``BatchNorm2d`` over its output channels, or None.
        relu: a ``ReLU``, or None.

    Returns:
        the fused module, with copies of the parameters.

    Example:
        >>> conv, bn = M.Conv2d(3, 4, 3), M.BatchNorm2d(4)
        >>> conv.eval(); bn.eval()
        >>> fused = fuse_conv_bn_relu_module(conv, bn, M.ReLU())
        >>> type(fused).__name__
        'ConvRelu2d'
    """
    if bn is not None and bn.num_features != conv.out_channels:
        raise AssertionError(f"Output channel of {type(conv).__name__} ({conv.out_channels}) must match "
                             f"num_features of BatchNorm2d ({bn.num_features})")
    transpose = isinstance(conv, ConvTranspose2d)
    args = dict(in_channels=conv.in_channels, out_channels=conv.out_channels, kernel_size=conv.kernel_size,
                stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=conv.groups,
                bias=conv.bias is not None, conv_mode=conv.conv_mode, compute_mode=conv.compute_mode,
                name=conv.name)
    if transpose:
        args["output_padding"] = conv.output_padding
    module, _ = _fuse(conv, bn, relu, args)
    keeps_bn = bn is not None and conv.training
    target = (module.conv_transpose2d if transpose else module.conv) if keeps_bn else module
    weight, bias = conv.weight, conv.bias
    if bn is not None and not conv.training:
        weight, bias = fold_weight_bias(weight, bias, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                        bn.eps, transpose=transpose)
    return _fill(module, target, weight, bias, bn if keeps_bn else None, conv.training)


def fuse_linear_bn_relu_module(linear, bn, relu):
    """One module computing ``relu(bn(linear(x)))`` (``bn`` / ``relu`` may be None); see
    :func:`fuse_conv_bn_relu_module`.

    Args:
        linear: a ``Linear``.
        bn: a ``BatchNorm1d`` over its output features, or None.
        relu: a ``ReLU``, or None.

    Returns:
        the fused module.

    Example:
        >>> lin, bn = M.Linear(3, 2), M.BatchNorm1d(2)
        >>> type(fuse_linear_bn_relu_module(lin, bn, None)).__name__
        'LinearBn1d'
    """
    if bn is not None and bn.num_features != linear.out_features:
        raise AssertionError(f"Output channel of Linear ({linear.out_features}) must match num_features of "
                             f"BatchNorm1d ({bn.num_features})")
    args = dict(in_features=linear.in_features, out_features=linear.out_features, bias=linear.bias is not None,
                compute_mode=linear.compute_mode, name=linear.name)
    module, _ = _fuse(linear, bn, relu, args)
    keeps_bn = bn is not None and linear.training
    target = module.linear if keeps_bn else module
    weight, bias = linear.weight, linear.bias
    if bn is not None and not linear.training:
        weight, bias = fold_weight_bias(weight, bias, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.eps)
    return _fill(module, target, weight, bias, bn if keeps_bn else None, linear.training)
