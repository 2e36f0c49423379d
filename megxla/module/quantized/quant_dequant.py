"""MegEngine's ``megengine.module.quantized.quant_dequant`` import path: the quantized ``QuantStub``, ``DequantStub``
(defined in this package's other modules)."""
from . import QuantStub, DequantStub

__all__ = ["QuantStub", "DequantStub"]
