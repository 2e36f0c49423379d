"""MegEngine's ``megengine.module.qat.elemwise`` import path: the QAT ``Elemwise`` (defined in this package's other
modules)."""
from . import Elemwise

__all__ = ["Elemwise"]
