"""MegEngine's ``megengine.module.quantized.conv`` import path: the quantized ``Conv2d``, ``ConvRelu2d``,
``ConvTranspose2d``, ``ConvTransposeRelu2d`` (defined in this package's other modules)."""
from . import Conv2d, ConvRelu2d, ConvTranspose2d, ConvTransposeRelu2d

__all__ = ["Conv2d", "ConvRelu2d", "ConvTranspose2d", "ConvTransposeRelu2d"]
