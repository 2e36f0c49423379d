"""MegEngine's ``megengine.module.qat.conv_bn`` import path: the QAT ``ConvBn2d``, ``ConvBnRelu2d`` (defined in this
package's other modules)."""
from . import ConvBn2d, ConvBnRelu2d

__all__ = ["ConvBn2d", "ConvBnRelu2d"]

# MegEngine's base class of both (``isinstance(m, qat.conv_bn._ConvBnActivation2d)``)
from .fused_bn import _ConvBnQAT as _ConvBnActivation2d  # noqa: E402
