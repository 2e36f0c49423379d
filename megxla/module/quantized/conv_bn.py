"""MegEngine's ``megengine.module.quantized.conv_bn`` import path: the quantized ``ConvBn2d``, ``ConvBnRelu2d``
(defined in this package's other modules)."""
from . import ConvBn2d, ConvBnRelu2d

__all__ = ["ConvBn2d", "ConvBnRelu2d"]
