"""``megengine.module.conv_transpose_bn`` (thin: MegEngine's module path for the transposed-convolution +
BatchNorm classes of :mod:`megxla.module.conv_bn`).

Example:
    >>> m = ConvTransposeBn2d(2, 3, 3)
    >>> type(m.bn).__name__
    'BatchNorm2d'
"""
from .conv_bn import ConvTransposeBn2d, ConvTransposeBnRelu2d  # noqa: F401

__all__ = ["ConvTransposeBn2d", "ConvTransposeBnRelu2d"]
