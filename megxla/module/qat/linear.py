"""MegEngine's ``megengine.module.qat.linear`` import path: the QAT ``Linear``, ``LinearRelu`` (defined in this
package's other modules)."""
from . import Linear, LinearRelu

__all__ = ["Linear", "LinearRelu"]
