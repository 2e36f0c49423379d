"""Memory / graph configuration objects with MegEngine's names, fields, defaults and checks. On XLA, passing either
memory config to a trace turns on rematerialisation: in the compiled step every gradient op recomputes its forward
under ``jax.checkpoint`` (CSE prevented) instead of keeping the forward's residuals; XLA schedules the rest."""
import os


class SublinearMemoryConfig:
    """Ask for sublinear memory (rematerialisation); the search parameters are MegEngine's and unused by XLA.

    Args:
        thresh_nr_try: samples of MegEngine's threshold search (>= 0). Default: 10.
        genetic_nr_iter: iterations of its genetic search (>= 0). Default: 0.
        genetic_pool_size: its genetic pool size (>= 0). Default: 20.
        lb_memory_mb: memory lower bound of the bottleneck, in MB. Default: 0.
        num_worker: search threads (>= 1). Default: half the CPU cores, at least 1 (MegEngine's).

    Example:
        >>> from megxla.jit import trace
        >>> step = trace(lambda x: x * 2, sublinear_memory_config=SublinearMemoryConfig())
    """

    def __init__(self, thresh_nr_try: int = 10, genetic_nr_iter: int = 0, genetic_pool_size: int = 20,
                 lb_memory_mb: int = 0, num_worker: int = max(1, (os.cpu_count() or 1) // 2)):
        # (MegEngine's default: half its CPU devices, one per core -- get_device_count("cpu"); jit imports only core)
        # MegEngine's checks (asserts, with its texts)
        assert thresh_nr_try >= 0, "thresh_nr_try must be greater or equal to zero"
        self.thresh_nr_try = thresh_nr_try
        assert genetic_nr_iter >= 0, "genetic_nr_iter must be greater or equal to zero"
        self.genetic_nr_iter = genetic_nr_iter
        assert genetic_pool_size >= 0, "genetic_pool_size must be greater or equal to zero"
        self.genetic_pool_size = genetic_pool_size
        self.lb_memory_mb = lb_memory_mb
        assert num_worker > 0, "num_worker must be greater or equal to one"
        self.num_worker = num_worker


class DTRConfig:
    """Ask for dynamic tensor rematerialisation; on XLA this is compile-time rematerialisation.

    Args:
        eviction_threshold: bytes above which MegEngine's DTR evicts (>= 0). Default: 0.
        evictee_minimum_size: bytes below which a tensor is never evicted (>= 0). Default: 1048576.
        recomp_memory_factor / recomp_time_factor: weights of its eviction heuristic (>= 0). Default: 1.

    Example:
        >>> from megxla.jit import trace
        >>> step = trace(lambda x: x * 2, dtr_config=DTRConfig(eviction_threshold=2 ** 30))
    """

    def __init__(self, eviction_threshold: int = 0, evictee_minimum_size: int = 1 << 20,
                 recomp_memory_factor: float = 1, recomp_time_factor: float = 1):
        # MegEngine asserts ``eviction_threshold > 0``, so its own default DTRConfig() fails; 0 stays valid here
        # (megxla.dtr.config() of DTR enabled without a threshold gives one)
        assert eviction_threshold >= 0, "eviction_threshold must be greater or equal to zero"
        self.eviction_threshold = eviction_threshold
        assert evictee_minimum_size >= 0, "evictee_minimum_size must be greater or equal to zero"
        self.evictee_minimum_size = evictee_minimum_size
        assert recomp_memory_factor >= 0, "recomp_memory_factor must be greater or equal to zero"
        self.recomp_memory_factor = recomp_memory_factor
        assert recomp_time_factor >= 0, "recomp_time_factor must be greater or equal to zero"
        self.recomp_time_factor = recomp_time_factor


class GraphOptimizationConfig:
    """Graph optimisation switches (MegEngine's fusion flags: None unset, False off, True on); XLA fuses on its
    own, so they are recorded only.

    Example:
        >>> cfg = GraphOptimizationConfig(); cfg.jit_fuse_dimshuffle = True; cfg
        GraphOptimizationConfig { jit_fuse_dimshuffle = ON, jit_fuse_reduce = UNSET }
    """

    def __init__(self):
        self.jit_fuse_dimshuffle = None
        self.jit_fuse_reduce = None

    def __repr__(self):
        val2str = {None: "UNSET", False: "OFF", True: "ON"}  # (MegEngine's text; another value is its KeyError)
        return (f"GraphOptimizationConfig {{ jit_fuse_dimshuffle = {val2str[self.jit_fuse_dimshuffle]}, "
                f"jit_fuse_reduce = {val2str[self.jit_fuse_reduce]} }}")
