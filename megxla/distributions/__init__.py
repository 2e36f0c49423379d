"""Probability distributions (MegEngine 1.13.4's experimental ``megengine.distributions``)."""
from .distribution import Distribution
from .exponential import Exponential

__all__ = ["Distribution", "Exponential"]
