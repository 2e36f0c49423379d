"""``megengine.traced_module.tm_config`` (thin: MegEngine's module path): whether a module is being traced by
:func:`~megxla.traced_module.trace_module` (a ``forward`` may branch on it), and the checker switches.

Example:
    >>> is_tracing_module()
    False
"""
from . import tracer as _tracer
from .checker import disable_default_checker, enable_expr_checker  # noqa: F401

__all__ = ["is_tracing_module", "enable_expr_checker", "disable_default_checker"]


def is_tracing_module() -> bool:
    """Whether ``trace_module`` is tracing a module now (in this call's ``forward``).

    Example:
        >>> import megxla.module as M, megxla as mge
        >>> from megxla.traced_module import trace_module
        >>> class Net(M.Module):
        ...     def forward(self, x):
        ...         self.seen = is_tracing_module()
        ...         return x
        >>> net = Net(); _ = trace_module(net, mge.Tensor([1.0])); net.seen
        True
    """
    return _tracer._active is not None
