"""``megengine.jit.xla_backend`` (thin: MegEngine's module path for :class:`~megxla.jit.xla_trace`; every
compiled step of megxla is XLA's).

Example:
    >>> xla_trace.__name__
    'xla_trace'
"""
from .tracing import xla_trace  # noqa: F401

__all__ = ["xla_trace"]
