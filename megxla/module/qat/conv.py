"""MegEngine's ``megengine.module.qat.conv`` import path: the QAT ``Conv2d``, ``ConvRelu2d``, ``ConvTranspose2d``,
``ConvTransposeRelu2d`` (defined in this package's other modules)."""
from . import Conv2d, ConvRelu2d, ConvTranspose2d, ConvTransposeRelu2d

__all__ = ["Conv2d", "ConvRelu2d", "ConvTranspose2d", "ConvTransposeRelu2d"]
