"""MegEngine's ``megengine.module.quantized.linear`` import path: the quantized ``Linear``, ``LinearRelu`` (defined
in this package's other modules)."""
from . import Linear, LinearRelu

__all__ = ["Linear", "LinearRelu"]
