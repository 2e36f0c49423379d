"""``megengine.dtr.dtr`` (thin: MegEngine's module path): the settings and switches of :mod:`megxla.dtr`, the
same state under a second name (``megengine.dtr.dtr.eviction_threshold = "2GB"`` sets ``megengine.dtr``'s).

Example:
    >>> import megxla.dtr.dtr as dtr_module, megxla as mge
    >>> dtr_module.evictee_minimum_size = "1MB"
    >>> mge.dtr.evictee_minimum_size
    1048576
"""
import sys

from . import _DTRModule, _str2bytes, config, disable, enable, is_enabled  # noqa: F401

__all__ = ["enable", "disable", "is_enabled", "config"]

sys.modules[__name__].__class__ = _DTRModule
