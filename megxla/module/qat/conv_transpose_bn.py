"""MegEngine's ``megengine.module.qat.conv_transpose_bn`` import path: the QAT ``ConvTransposeBn2d``,
``ConvTransposeBnRelu2d`` (defined in this package's other modules)."""
from . import ConvTransposeBn2d, ConvTransposeBnRelu2d

__all__ = ["ConvTransposeBn2d", "ConvTransposeBnRelu2d"]

# MegEngine's base class of both (``isinstance(m, qat.conv_transpose_bn._ConvTransposeBnActivation2d)``)
from .fused_bn import _ConvTransposeBnQAT as _ConvTransposeBnActivation2d  # noqa: E402
