"""``megengine.module.adaptive_pooling`` (thin: MegEngine's module path for the classes of
:mod:`megxla.module.pooling`).

Example:
    >>> import megxla as mge, numpy as np
    >>> AdaptiveAvgPool2d((1, 1))(mge.Tensor(np.ones((1, 2, 4, 4), "float32"))).shape
    (1, 2, 1, 1)
"""
from .pooling import AdaptiveAvgPool2d, AdaptiveMaxPool2d  # noqa: F401

__all__ = ["AdaptiveAvgPool2d", "AdaptiveMaxPool2d"]
