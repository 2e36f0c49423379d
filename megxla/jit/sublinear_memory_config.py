"""``megengine.jit.sublinear_memory_config`` (thin: MegEngine's module path for :class:`~megxla.jit.SublinearMemoryConfig`).

Example:
    >>> type(SublinearMemoryConfig()).__name__
    'SublinearMemoryConfig'
"""
from .config import SublinearMemoryConfig  # noqa: F401

__all__ = ["SublinearMemoryConfig"]
