"""Convolution + BatchNorm (+ ReLU) fused-pattern modules (float versions; quantization fuses them)."""
from ..functional.elemwise import relu
from .batchnorm import BatchNorm2d
from .conv import Conv2d, ConvTranspose2d
from .module import Module

__all__ = ["ConvBn2d", "ConvBnRelu2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d"]


class _ConvBnActivation2d(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, conv_mode="cross_correlation", compute_mode="default", eps=1e-5, momentum=0.9,
                 affine=True, track_running_stats=True, padding_mode="zeros", **kwargs):
        super().__init__(**kwargs)
        self.conv = Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                           conv_mode, compute_mode, padding_mode, **kwargs)
        self.bn = BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats)


class ConvBn2d(_ConvBnActivation2d):
    r"""``bn(conv(x))``: a :class:`Conv2d` (attribute ``conv``) followed by a :class:`BatchNorm2d` (``bn``).

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, conv_mode,
        compute_mode, padding_mode: as :class:`Conv2d`.
        eps, momentum, affine, track_running_stats: as :class:`BatchNorm2d`.

    Example:
        >>> m = M.ConvBn2d(3, 4, 3, padding=1)
        >>> m(mge.Tensor(np.ones((2, 3, 5, 5), "float32"))).shape
        (2, 4, 5, 5)
    """

    def forward(self, inp):
        """``bn(conv(inp))``."""
        return self.bn(self.conv(inp))


class ConvBnRelu2d(_ConvBnActivation2d):
    r"""``relu(bn(conv(x)))`` with sub-modules ``conv`` (:class:`Conv2d`) and ``bn`` (:class:`BatchNorm2d`).

    Args:
        as :class:`ConvBn2d`.

    Example:
        >>> m = M.ConvBnRelu2d(3, 4, 3, padding=1)
        >>> m(mge.Tensor(np.ones((2, 3, 5, 5), "float32"))).shape
        (2, 4, 5, 5)
    """

    def forward(self, inp):
        """``relu(bn(conv(inp)))``."""
        return relu(self.bn(self.conv(inp)))


class _ConvTransposeBnActivation2d(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, dilation=1,
                 groups=1, bias=True, conv_mode="cross_correlation", compute_mode="default", eps=1e-5,
                 momentum=0.9, affine=True, track_running_stats=True, **kwargs):
        super().__init__(**kwargs)
        self.conv_transpose2d = ConvTranspose2d(in_channels, out_channels, kernel_size, stride, padding,
                                                output_padding, dilation, groups, bias, conv_mode, compute_mode,
                                                **kwargs)
        self.bn = BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats)


class ConvTransposeBn2d(_ConvTransposeBnActivation2d):
    r"""``bn(conv_transpose2d(x))`` with sub-modules ``conv_transpose2d`` and ``bn``.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation, groups, bias,
        conv_mode, compute_mode: as :class:`ConvTranspose2d`.
        eps, momentum, affine, track_running_stats: as :class:`BatchNorm2d`.

    Example:
        >>> m = M.ConvTransposeBn2d(2, 3, 3)
        >>> m(mge.Tensor(np.ones((2, 2, 4, 4), "float32"))).shape
        (2, 3, 6, 6)
    """

    def forward(self, inp):
        """``bn(conv_transpose2d(inp))``."""
        return self.bn(self.conv_transpose2d(inp))


class ConvTransposeBnRelu2d(_ConvTransposeBnActivation2d):
    r"""``relu(bn(conv_transpose2d(x)))`` with sub-modules ``conv_transpose2d`` and ``bn``.

    Args:
        as :class:`ConvTransposeBn2d`.

    Example:
        >>> m = M.ConvTransposeBnRelu2d(2, 3, 3)
        >>> m(mge.Tensor(np.ones((2, 2, 4, 4), "float32"))).shape
        (2, 3, 6, 6)
    """

    def forward(self, inp):
        """``relu(bn(conv_transpose2d(inp)))``."""
        return relu(self.bn(self.conv_transpose2d(inp)))
