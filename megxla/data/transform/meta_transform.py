"""Base classes of all data transforms (mirrors ``megengine.data.transform.meta_transform``)."""
from abc import ABC, abstractmethod
from typing import Sequence, Tuple

__all__ = ["Transform", "PseudoTransform", "CudaTransform"]


class Transform(ABC):
    r"""Rewrite a sample; the base class of all data transforms.

    Subclasses implement :meth:`apply` for one sample; :meth:`apply_batch`
    maps it over a batch of samples (the ``DataLoader`` calls
    ``apply_batch`` once per batch, before collation).

    Examples:
        >>> class AddOne(Transform):
        ...     def apply(self, input):
        ...         return tuple(x + 1 for x in input)
        >>> AddOne().apply_batch([(1, 2), (3, 4)])
        ((2, 3), (4, 5))
    """

    def apply_batch(self, inputs: Sequence[Tuple]):
        r"""Apply the transform to every sample of a batch.

        Args:
            inputs: a sequence of samples.

        Returns:
            a tuple of transformed samples.
        """
        return tuple(self.apply(input) for input in inputs)

    @abstractmethod
    def apply(self, input: Tuple):
        r"""Apply the transform to one sample.

        Args:
            input: one sample, usually a tuple laid out as ``order``.

        Returns:
            the transformed sample.
        """

    def __repr__(self):
        return self.__class__.__name__


class PseudoTransform(Transform):
    r"""The identity transform; the ``DataLoader``'s default.

    Examples:
        >>> PseudoTransform().apply((1, "a"))
        (1, 'a')
    """

    def apply(self, input: Tuple):
        r"""Return the sample unchanged.

        Args:
            input: one sample.

        Returns:
            ``input`` itself.
        """
        return input


class CudaTransform(Transform):
    r"""A transform of whole batches on the device (MegEngine 1.13.2+): a ``DataLoader`` with workers skips it in
    the workers and applies ``apply`` to each collated batch in the main process, where device ops run (so
    ``apply`` converts its input to Tensors itself). Without workers it is applied to each sample, as any
    transform -- MegEngine's loader does the same. This class is the identity; subclasses override ``apply``.

    Examples:
        >>> CudaTransform().apply((1, "a"))
        (1, 'a')
    """

    def apply(self, input: Tuple):
        r"""Return the input unchanged.

        Args:
            input: a collated batch (with workers) or a sample (without).

        Returns:
            the input.
        """
        return input
