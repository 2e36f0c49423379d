"""MegEngine's ``megengine.module.quantized.elemwise`` import path: the quantized ``Elemwise`` (defined in this
package's other modules)."""
from . import Elemwise

__all__ = ["Elemwise"]
