"""Random numbers (``megengine.random``): a global key state split per draw, so ``seed(n)`` makes whole runs
reproducible, and every draw is an op (traced and compiled like any other, its key a graph input/output)."""
from ._rng import RNG, seed, normal, uniform, gamma, beta, poisson, permutation, shuffle, exponential, \
    multinomial, get_rng_state, next_key

__all__ = ["RNG", "seed", "normal", "uniform", "gamma", "beta", "poisson", "permutation", "shuffle",
           "exponential", "multinomial"]
