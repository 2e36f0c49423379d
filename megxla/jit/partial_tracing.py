"""``megengine.jit.partial_tracing`` (thin: MegEngine's module path for :func:`~megxla.jit.partial_trace`).

Example:
    >>> callable(partial_trace)
    True
"""
from .partial import partial_trace  # noqa: F401

__all__ = ["partial_trace"]
