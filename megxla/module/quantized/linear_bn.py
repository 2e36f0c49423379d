"""MegEngine's ``megengine.module.quantized.linear_bn`` import path: the quantized ``LinearBn1d``, ``LinearBnRelu1d``
(defined in this package's other modules)."""
from . import LinearBn1d, LinearBnRelu1d

__all__ = ["LinearBn1d", "LinearBnRelu1d"]
