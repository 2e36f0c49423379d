"""MegEngine's ``megengine.module.quantized.batch_matmul_activation`` import path: the quantized
``BatchMatMulActivation`` (defined in this package's other modules)."""
from . import BatchMatMulActivation

__all__ = ["BatchMatMulActivation"]
