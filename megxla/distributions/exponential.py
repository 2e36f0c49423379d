"""The exponential distribution (MegEngine 1.13.4's ``distributions.Exponential``)."""
from __future__ import annotations

from numbers import Number
from typing import Iterable, Optional, Union

from .. import functional as F
from ..core._tensor import Tensor
from ..random import exponential
from .distribution import Distribution

__all__ = ["Exponential"]


class Exponential(Distribution):
    r"""The exponential distribution with rate :math:`\lambda` (density :math:`\lambda e^{-\lambda x}`, mean
    :math:`1 / \lambda`).

    Args:
        rate: a positive float or Tensor, ``1 / scale``; a Tensor batches the distribution.

    Example:
        >>> from megxla.distributions import Exponential
        >>> m = Exponential(Tensor([[1.0, 2.0]]))
        >>> m.sample((3,)).shape, m.mean.numpy()
        ((3, 1, 2), array([[1. , 0.5]], dtype=float32))
        >>> float(Exponential(2.0).cdf(Tensor(0.0)))
        0.0
    """

    def __init__(self, rate: Union[Tensor, float]):
        self.rate = Tensor(rate, dtype="float32")
        super().__init__(batch_shape=() if isinstance(rate, Number) else tuple(rate.shape))

    @property
    def mean(self) -> Tensor:
        return 1.0 / self.rate

    @property
    def stddev(self) -> Tensor:
        return 1.0 / self.rate

    @property
    def variance(self) -> Tensor:
        return F.pow(self.rate, -2)

    def sample(self, sample_shape: Optional[Iterable[int]] = ()) -> Tensor:
        """Samples of shape ``sample_shape + rate.shape`` (``(1,)`` where both are empty, as MegEngine's)."""
        return exponential(self.rate, tuple(sample_shape))

    def log_prob(self, value):
        return F.log(self.rate) - self.rate * value

    def cdf(self, value):
        return 1.0 - F.exp(-self.rate * value)

    def icdf(self, value):
        return -F.log1p(-value) / self.rate

    @property
    def _natural_params(self):
        return (self.rate,)

    def _log_normalizer(self, x):
        return -F.log(-x)
