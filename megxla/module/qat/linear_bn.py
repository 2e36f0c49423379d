"""MegEngine's ``megengine.module.qat.linear_bn`` import path: the QAT ``LinearBn1d``, ``LinearBnRelu1d`` (defined in
this package's other modules)."""
from . import LinearBn1d, LinearBnRelu1d

__all__ = ["LinearBn1d", "LinearBnRelu1d"]

# MegEngine's base class of both (``isinstance(m, qat.linear_bn._LinearBnActivation1d)``)
from .fused_bn import _LinearBnQAT as _LinearBnActivation1d  # noqa: E402
