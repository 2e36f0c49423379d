"""MegEngine's ``megengine.module.qat.concat`` import path: the QAT ``Concat`` (defined in this package's other
modules)."""
from . import Concat

__all__ = ["Concat"]
