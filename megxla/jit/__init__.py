"""``megxla.jit``: MegEngine's tracing API, compiled by XLA."""
from ._recording import TraceError
from .tracing import trace, xla_trace, exclude_from_trace, load
from .partial import partial_trace
from ._autojit import auto_jit_stats, reset_auto_jit_stats
from ._report import auto_jit_report
from .config import SublinearMemoryConfig, DTRConfig, GraphOptimizationConfig
# MegEngine's jit package imports these modules, so ``megengine.jit.dtr_config`` (and the others) resolve as
# attributes after ``import megengine.jit``
from . import dtr_config, graph_opt_config, partial_tracing, sublinear_memory_config, xla_backend  # noqa: F401

__all__ = ["trace", "xla_trace", "partial_trace", "exclude_from_trace", "TraceError", "load", "SublinearMemoryConfig",
           "DTRConfig", "GraphOptimizationConfig", "auto_jit_stats", "reset_auto_jit_stats",
           "auto_jit_report"]
