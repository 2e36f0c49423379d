"""MegEngine's ``megengine.module.qat.batch_matmul_activation`` import path: the QAT ``BatchMatMulActivation``
(defined in this package's other modules)."""
from . import BatchMatMulActivation

__all__ = ["BatchMatMulActivation"]
