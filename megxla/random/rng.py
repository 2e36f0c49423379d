"""``megengine.random.rng`` (thin: MegEngine's module path for :mod:`megxla.random`'s generator and draws).

Example:
    >>> RNG(seed=1).uniform(size=(2,)).shape
    (2,)
"""
from ._rng import RNG, beta, gamma, normal, permutation, poisson, seed, shuffle, uniform  # noqa: F401

__all__ = ["RNG", "seed", "uniform", "normal", "gamma", "beta", "poisson", "permutation", "shuffle"]
