"""``megengine.jit.graph_opt_config`` (thin: MegEngine's module path for :class:`~megxla.jit.GraphOptimizationConfig`).

Example:
    >>> type(GraphOptimizationConfig()).__name__
    'GraphOptimizationConfig'
"""
from .config import GraphOptimizationConfig  # noqa: F401

__all__ = ["GraphOptimizationConfig"]
