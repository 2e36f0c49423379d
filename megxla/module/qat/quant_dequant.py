"""MegEngine's ``megengine.module.qat.quant_dequant`` import path: the QAT ``QuantStub``, ``DequantStub`` (defined in
this package's other modules)."""
from . import QuantStub, DequantStub

__all__ = ["QuantStub", "DequantStub"]
