"""MegEngine's ``megengine.module.qat.conv_transpose_bn`` import path: the QAT ``ConvTransposeBn2d``,
``ConvTransposeBnRelu2d`` (defined in this package's other modules)."""
from . import ConvTransposeBn2d, ConvTransposeBnRelu2d

__all__ = ["ConvTransposeBn2d", "ConvTransposeBnRelu2d"]
