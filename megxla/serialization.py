"""``megengine.serialization``: :func:`save` / :func:`load` with MegEngine's module path.

The implementation lives in :mod:`megxla._serialization`; this module only gives it MegEngine's import path
(``from megengine.serialization import load``). Helpers that module defines later (``dmap``) are re-exported
from it on first access.
"""
import contextlib
import sys

from . import _serialization as _impl
from ._serialization import save, load
from .core._tensor import Tensor
from .core.dtypes import get_default_device

__all__ = ["save", "load", "Tensor", "get_default_device", "max_recursion_limit"]


@contextlib.contextmanager
def max_recursion_limit():
    """Raise Python's recursion limit while (un)pickling deeply nested objects (MegEngine's helper).

    Example:
        >>> with max_recursion_limit():
        ...     pass
    """
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 100_000))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def __getattr__(name):
    if not name.startswith("__") and hasattr(_impl, name):
        return getattr(_impl, name)
    raise AttributeError(f"module 'megxla.serialization' has no attribute {name!r}")
