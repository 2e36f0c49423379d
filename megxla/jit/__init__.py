"""``megxla.jit``: MegEngine's tracing API, compiled by XLA."""
from ._recording import TraceError
from .tracing import trace, xla_trace, exclude_from_trace, load
from .partial import partial_trace
from ._autojit import auto_jit_stats, reset_auto_jit_stats
from ._report import auto_jit_report
from .config import SublinearMemoryConfig, DTRConfig, GraphOptimizationConfig

__all__ = ["trace", "xla_trace", "partial_trace", "exclude_from_trace", "TraceError", "load", "SublinearMemoryConfig",
           "DTRConfig", "GraphOptimizationConfig", "auto_jit_stats", "reset_auto_jit_stats",
           "auto_jit_report"]
