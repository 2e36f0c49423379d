"""``megengine.jit.dtr_config`` (thin: MegEngine's module path for :class:`~megxla.jit.DTRConfig`).

Example:
    >>> type(DTRConfig()).__name__
    'DTRConfig'
"""
from .config import DTRConfig  # noqa: F401

__all__ = ["DTRConfig"]
