"""Memory / graph configuration objects with MegEngine's names. On XLA, passing either memory config to a
trace turns on rematerialisation: in the compiled step every gradient op recomputes its forward under
``jax.checkpoint`` (CSE prevented) instead of keeping the forward's residuals; XLA schedules the rest."""
from dataclasses import dataclass


@dataclass
class SublinearMemoryConfig:
    """Ask for sublinear memory (rematerialisation); the search parameters are MegEngine's and unused by XLA.

    Example:
        >>> from megxla.jit import trace
        >>> step = trace(lambda x: x * 2, sublinear_memory_config=SublinearMemoryConfig())
    """
    thresh_nr_try: int = 10
    genetic_nr_iter: int = 0
    genetic_pool_size: int = 20
    lb_memory_mb: int = 0
    num_worker: int = 1


@dataclass
class DTRConfig:
    """Ask for dynamic tensor rematerialisation; on XLA this is compile-time rematerialisation.

    Example:
        >>> from megxla.jit import trace
        >>> step = trace(lambda x: x * 2, dtr_config=DTRConfig(eviction_threshold=2 ** 30))
    """
    eviction_threshold: int = 0
    evictee_minimum_size: int = 1 << 20
    recomp_memory_factor: float = 1
    recomp_time_factor: float = 1


class GraphOptimizationConfig:
    """Graph optimisation switches (MegEngine's fusion flags); XLA fuses on its own, so they are recorded only.

    Example:
        >>> cfg = GraphOptimizationConfig(); cfg.jit_fuse_dimshuffle = True
    """

    def __init__(self):
        self.jit_fuse_dimshuffle = None
        self.jit_fuse_reduce = None

    def __repr__(self):
        return f"GraphOptimizationConfig({vars(self)})"
