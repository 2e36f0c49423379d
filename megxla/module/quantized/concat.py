"""MegEngine's ``megengine.module.quantized.concat`` import path: the quantized ``Concat`` (defined in this package's
other modules)."""
from . import Concat

__all__ = ["Concat"]
