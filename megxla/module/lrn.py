"""``megengine.module.lrn`` (thin: MegEngine's module path for
:class:`~megxla.module.normalization.LocalResponseNorm`).

Example:
    >>> import megxla as mge, numpy as np
    >>> LocalResponseNorm(kernel_size=3)(mge.Tensor(np.ones((1, 4, 2, 2), "float32"))).shape
    (1, 4, 2, 2)
"""
from .normalization import LocalResponseNorm  # noqa: F401

__all__ = ["LocalResponseNorm"]
