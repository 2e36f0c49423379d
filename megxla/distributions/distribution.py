"""The base class of distributions, as MegEngine's: shapes, and the interface subclasses implement."""
from __future__ import annotations

from typing import Iterable, Optional

from ..core._tensor import Tensor

__all__ = ["Distribution"]


class Distribution:
    r"""The base class of probability distributions (MegEngine marks the module experimental).

    A subclass defines ``mean``, ``variance``, ``sample``, ``log_prob``, ``cdf`` and ``icdf``; the base class
    holds the batch and event shapes.

    Args:
        batch_shape: the shape over which the parameters are batched.
        event_shape: the shape of one sample.

    Example:
        >>> from megxla.distributions import Distribution
        >>> Distribution(batch_shape=(3,))._extended_shape((2,))
        (2, 3)
    """

    def __init__(self, batch_shape: Optional[Iterable[int]] = (), event_shape: Optional[Iterable[int]] = ()):
        self._batch_shape = tuple(batch_shape)
        self._event_shape = tuple(event_shape)

    def _missing(self, what):
        # (MegEngine's base class raises NotImplementedError for what a subclass must define)
        raise NotImplementedError(f"{type(self).__name__} does not define {what}")

    def expand(self, batch_shape: Optional[Iterable[int]], _instance=None):
        """A new instance with its batch dimensions expanded to ``batch_shape`` (defined by subclasses)."""
        self._missing("expand")

    @property
    def batch_shape(self):
        """The shape over which the parameters are batched."""
        return self._batch_shape

    @property
    def event_shape(self):
        """The shape of a single sample (without batching)."""
        return self._event_shape

    @property
    def mean(self) -> Tensor:
        """The mean of the distribution."""
        self._missing("mean")

    @property
    def variance(self) -> Tensor:
        """The variance of the distribution."""
        self._missing("variance")

    @property
    def stddev(self) -> Tensor:
        """The standard deviation (the variance's square root)."""
        return self.variance ** 0.5

    def sample(self, sample_shape: Optional[Iterable[int]] = ()) -> Tensor:
        """A sample of shape ``sample_shape + batch_shape + event_shape``."""
        self._missing("sample")

    def log_prob(self, value: Tensor) -> Tensor:
        """The log of the density (or mass) at ``value``."""
        self._missing("log_prob")

    def cdf(self, value: Tensor) -> Tensor:
        """The cumulative distribution function at ``value``."""
        self._missing("cdf")

    def icdf(self, value: Tensor) -> Tensor:
        """The inverse cumulative distribution function at ``value``."""
        self._missing("icdf")

    def _extended_shape(self, sample_shape: Optional[Iterable[int]] = None):
        """The shape of a sample drawn with ``sample_shape``."""
        return tuple(sample_shape or ()) + self._batch_shape + self._event_shape
