"""MegEngine's ``megengine.module.quantized.conv_transpose_bn`` import path: the quantized ``ConvTransposeBn2d``,
``ConvTransposeBnRelu2d`` (defined in this package's other modules)."""
from . import ConvTransposeBn2d, ConvTransposeBnRelu2d

__all__ = ["ConvTransposeBn2d", "ConvTransposeBnRelu2d"]
