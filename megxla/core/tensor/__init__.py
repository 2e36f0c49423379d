"""``megengine.core.tensor``: public helpers on tensors (:mod:`.utils`) and dtypes (:mod:`.dtype`).

MegEngine code imports these paths directly (``from megengine.core.tensor.utils import astensor1d``,
``from megengine.core.tensor import dtype``); the Tensor class itself lives in :mod:`megxla.core._tensor`.
"""
from . import amp, array_method, dtype, utils  # noqa: F401

__all__ = ["amp", "array_method", "dtype", "utils"]
