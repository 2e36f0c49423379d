"""Samplers: turn a dataset into a sequence of index batches.

Mirrors ``megengine.data.sampler``. Randomness comes from a private
``np.random.RandomState`` per sampler; when no ``seed`` is given (one rank) that
state is seeded from the global ``np.random`` state, without drawing from it
(so later draws are MegEngine's), and ``np.random.seed(s)`` before building the
sampler makes shuffling reproducible while successive epochs still differ.
(Two unseeded samplers built with no ``np.random`` draw between them shuffle
alike: give one a ``seed``.)
"""
import collections.abc
import itertools
import math
import sys
import zlib
from abc import ABC, abstractmethod
from typing import Any, Iterator, List

import numpy as np

__all__ = [
    "Sampler",
    "MapSampler",
    "StreamSampler",
    "SequentialSampler",
    "RandomSampler",
    "ReplacementSampler",
    "Infinite",
]


def _check_positive_int(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(
            "{} should be a positive integer value, but got {}={}".format(
                name, name, value
            )
        )


def _default_world():
    # NOTE: megxla.distributed is consulted only if the user already imported
    # it; importing it here would pull JAX into this NumPy-only package.
    dist = sys.modules.get("megxla.distributed")
    if dist is not None:
        try:
            if dist.is_distributed():
                return int(dist.get_world_size()), int(dist.get_rank())
        except Exception:  # a half-initialised backend means single process
            pass
    return 1, 0


def _seed_from_global_state():
    """A seed that is a function of the global ``np.random`` state, leaving it unchanged."""
    _, key, pos = np.random.get_state()[:3]
    return [zlib.crc32(np.ascontiguousarray(key).tobytes()), int(pos)]


class Sampler(ABC):
    r"""An abstract base class for all samplers.

    Examples:
        >>> issubclass(SequentialSampler, Sampler)
        True
    """

    @abstractmethod
    def __init__(self):
        pass


class MapSampler(Sampler):
    r"""Base class for samplers of map-style datasets.

    Subclasses implement :meth:`sample` returning the full index list of one
    epoch; :meth:`batch` splits it across ranks and into batches.

    Args:
        dataset: the map-style dataset to sample from.
        batch_size: number of samples per batch. Default: 1.
        drop_last: drop the final batch if it is smaller than ``batch_size``.
            Default: False.
        num_samples: number of samples per epoch over all ranks.
            Default: ``len(dataset)``.
        world_size: number of ranks sharing the dataset. Default: the
            distributed world size if ``megxla.distributed`` is initialised,
            else 1.
        rank: this process's rank. Default: as ``world_size``.
        seed: seed of the sampler's random state. Default: derived from the
            global ``np.random`` state, which is left as it was (0 when
            ``world_size > 1`` so all ranks agree).

    Returns:
        an iterable of index lists; ``len()`` is the number of batches.

    Examples:
        >>> class EvenSampler(MapSampler):
        ...     def sample(self):
        ...         return list(range(0, len(self.dataset), 2))
        >>> list(EvenSampler(list(range(10)), batch_size=2))
        [[0, 2], [4, 6], [8]]
    """

    def __init__(
        self,
        dataset,
        batch_size=1,
        drop_last=False,
        num_samples=None,
        world_size=None,
        rank=None,
        seed=None,
    ):
        _check_positive_int("batch_size", batch_size)
        if not isinstance(drop_last, bool):
            raise ValueError(
                "drop_last should be a boolean value, but got drop_last={}".format(
                    drop_last
                )
            )
        if num_samples is not None:
            _check_positive_int("num_samples", num_samples)

        self.batch_size = batch_size
        self.dataset = dataset
        self.drop_last = drop_last

        default_world, default_rank = _default_world()
        self.world_size = default_world if world_size is None else world_size
        self.rank = default_rank if rank is None else rank
        _check_positive_int("world_size", self.world_size)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(
                "rank should be in [0, world_size={}), but got rank={}".format(
                    self.world_size, self.rank
                )
            )

        if num_samples is None:
            num_samples = len(self.dataset)
        # per-rank count; the epoch is padded so every rank gets this many
        self.num_samples = int(math.ceil(num_samples / self.world_size))
        if self.num_samples < self.batch_size:  # (MegEngine's check and message)
            raise ValueError(
                "num_samples should be greater than batch_size , but got num_samples={} and batch_size={}".format(
                    self.num_samples, self.batch_size
                )
            )

        if seed is None:
            # ranks must shuffle identically or scatter() would overlap them; one rank: a seed derived from the
            # global np.random state without drawing from it, so np.random.seed makes the shuffle reproducible and
            # the draws after it (transforms, the program's own) stay MegEngine's (its seed comes from the OS)
            seed = 0 if self.world_size > 1 else _seed_from_global_state()
        self.seed = seed
        self.rng = np.random.RandomState(seed)

    def __iter__(self):
        return self.batch()

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        return int(math.ceil(self.num_samples / self.batch_size))

    def sample(self):
        r"""Return the indices of one epoch, over all ranks.

        Returns:
            a sequence of dataset indices.
        """
        # (MegEngine's NotImplementedError: code that probes for a sampler without its own sample() catches it)
        raise NotImplementedError(f"{type(self).__name__} does not define sample(); a subclass must")

    def _use_indices(self, indices):
        # MegEngine checks batch_size against the dataset's size (above), and counts its len() and pads each rank's
        # share from it even when `indices` walks fewer or more items (its len() then names batches that never come,
        # and scatter() asserts): megxla's epoch is the indices
        self.indices = indices
        if indices is not None:
            self.num_samples = int(math.ceil(len(indices) / self.world_size))

    def scatter(self, indices) -> List:
        r"""Pick this rank's share of an epoch's indices.

        The list is padded by wrapping around so that it divides evenly, then
        every ``world_size``-th index starting at ``rank`` is kept.

        Args:
            indices: the epoch's indices, identical on every rank.

        Returns:
            ``num_samples`` indices for this rank.
        """
        indices = list(indices)
        total_size = self.num_samples * self.world_size
        while len(indices) < total_size:
            indices += indices[: total_size - len(indices)]
        indices = indices[:total_size]
        indices = indices[self.rank : total_size : self.world_size]
        assert len(indices) == self.num_samples
        return indices

    def batch(self) -> Iterator[List[Any]]:
        r"""Split one epoch into batches of indices.

        Returns:
            an iterator over lists of at most ``batch_size`` indices.
        """
        indices = list(self.sample())
        # world_size may be passed without a distributed backend, so test it
        # directly rather than asking megxla.distributed
        if self.world_size > 1:
            indices = self.scatter(indices)
        step = self.batch_size
        batch_index = [indices[i : i + step] for i in range(0, len(indices), step)]
        if self.drop_last and batch_index and len(batch_index[-1]) < step:
            batch_index.pop()
        return iter(batch_index)


class StreamSampler(Sampler):
    r"""Sampler for stream datasets: it fixes how many samples form a batch (the ``DataLoader`` pulls that many
    from the stream per batch).

    As MegEngine's, iterating it yields, forever, the batches of the endless index stream ``sample()`` gives
    (``0, 1, 2, ...``): ``[0, 1, 2], [3, 4, 5], ...``; a subclass may override ``sample`` or ``batch``.

    Args:
        batch_size: number of samples per batch. Default: 1.

    Examples:
        >>> s = StreamSampler(batch_size=3)
        >>> it = iter(s); next(it), next(it)
        ([0, 1, 2], [3, 4, 5])
    """

    def __init__(self, batch_size=1):
        _check_positive_int("batch_size", batch_size)
        self.batch_size = batch_size

    def __iter__(self):
        return self.batch()

    def batch(self):
        r"""The batches: ``sample()``'s indices, ``batch_size`` at a time.

        Returns:
            a generator of lists of indices.
        """
        batch = []
        for idx in self.sample():
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []

    def sample(self):
        r"""The endless index stream.

        Returns:
            ``itertools.count(0)``.
        """
        return itertools.count(start=0)


def _check_indices(indices):
    if indices is not None and not isinstance(indices, collections.abc.Sequence):
        raise ValueError("indices should be None or a sequence, but got indices={}".format(indices))  # (MegEngine's)


class SequentialSampler(MapSampler):
    r"""Sample indices in order, ``0, 1, ..., len(dataset) - 1`` (or ``indices``).

    Args:
        dataset: the map-style dataset to sample from.
        batch_size: number of samples per batch. Default: 1.
        drop_last: drop the final short batch. Default: False.
        indices: explicit index sequence to walk instead of the whole dataset.
        world_size: number of ranks. Default: see :class:`MapSampler`.
        rank: this process's rank. Default: see :class:`MapSampler`.

    Returns:
        an iterable of index lists.

    Examples:
        >>> list(SequentialSampler(list(range(5)), batch_size=2))
        [[0, 1], [2, 3], [4]]
        >>> len(SequentialSampler(list(range(5)), batch_size=2, drop_last=True))
        2
    """

    def __init__(
        self,
        dataset,
        batch_size=1,
        drop_last=False,
        indices=None,
        world_size=None,
        rank=None,
    ):
        _check_indices(indices)
        super().__init__(dataset, batch_size, drop_last, None, world_size, rank, seed=0)
        self._use_indices(indices)

    def sample(self) -> Iterator[Any]:
        r"""Return the epoch's indices in order.

        Returns:
            ``range(len(dataset))`` or the given ``indices``.
        """
        if self.indices is None:
            return iter(range(len(self.dataset)))
        return self.indices


class RandomSampler(MapSampler):
    r"""Sample a fresh random permutation each epoch, without replacement.

    Args:
        dataset: the map-style dataset to sample from.
        batch_size: number of samples per batch. Default: 1.
        drop_last: drop the final short batch. Default: False.
        indices: explicit index sequence to permute instead of the dataset.
        world_size: number of ranks. Default: see :class:`MapSampler`.
        rank: this process's rank. Default: see :class:`MapSampler`.
        seed: seed of the permutation stream. Default: see :class:`MapSampler`.

    Returns:
        an iterable of index lists.

    Examples:
        >>> s = RandomSampler(list(range(6)), batch_size=3, seed=0)
        >>> sorted(i for b in s for i in b)
        [0, 1, 2, 3, 4, 5]
    """

    def __init__(
        self,
        dataset,
        batch_size=1,
        drop_last=False,
        indices=None,
        world_size=None,
        rank=None,
        seed=None,
    ):
        _check_indices(indices)
        super().__init__(dataset, batch_size, drop_last, None, world_size, rank, seed)
        self._use_indices(indices)

    def sample(self) -> List:
        r"""Return a new permutation of the epoch's indices.

        Returns:
            a shuffled list of indices.
        """
        if self.indices is None:
            return self.rng.permutation(len(self.dataset)).tolist()
        return self.rng.permutation(np.asarray(self.indices)).tolist()


class ReplacementSampler(MapSampler):
    r"""Sample indices with replacement, optionally weighted.

    Args:
        dataset: the map-style dataset to sample from.
        batch_size: number of samples per batch. Default: 1.
        drop_last: drop the final short batch. Default: False.
        num_samples: number of draws per epoch. Default: ``len(dataset)``.
        weights: per-sample weights (need not sum to 1). Default: uniform.
        world_size: number of ranks. Default: see :class:`MapSampler`.
        rank: this process's rank. Default: see :class:`MapSampler`.
        seed: seed of the draw stream. Default: see :class:`MapSampler`.

    Returns:
        an iterable of index lists.

    Examples:
        >>> s = ReplacementSampler(list(range(3)), batch_size=4, num_samples=8,
        ...                        weights=[0, 0, 1], seed=0)
        >>> list(s)
        [[2, 2, 2, 2], [2, 2, 2, 2]]
    """

    def __init__(
        self,
        dataset,
        batch_size=1,
        drop_last=False,
        num_samples=None,
        weights=None,
        world_size=None,
        rank=None,
        seed=None,
    ):
        super().__init__(
            dataset, batch_size, drop_last, num_samples, world_size, rank, seed
        )
        if weights is not None:
            if not isinstance(weights, (collections.abc.Sequence, np.ndarray)):
                raise ValueError(
                    "weights should be a sequence, but got {}".format(type(weights))
                )
            if len(weights) != len(dataset):
                raise ValueError(
                    "len(dataset)={} should be equal to len(weights)={}".format(
                        len(dataset), len(weights)
                    )
                )
            weights = np.asarray(weights, dtype=np.float64)
            if (weights < 0).any() or weights.sum() <= 0:
                raise ValueError("weights should be non-negative with a positive sum")
            weights = weights / weights.sum()
        self.weights = weights

    def sample(self) -> List:
        r"""Draw one epoch of indices with replacement.

        Returns:
            a list of ``num_samples * world_size`` indices.
        """
        n = len(self.dataset)
        # draw for all ranks at once so that scatter() splits one shared list
        size = self.num_samples * self.world_size
        if self.weights is None:
            return self.rng.randint(n, size=size).tolist()
        return self.rng.choice(n, size=size, replace=True, p=self.weights).tolist()


class Infinite(MapSampler):
    r"""Wrap a map sampler so that it never stops, restarting it each epoch.

    Args:
        sampler: the :class:`MapSampler` to repeat.

    Returns:
        an endless iterator of index lists; other attributes (``batch_size``,
        ``dataset``, ...) are read from the wrapped sampler.

    Examples:
        >>> it = iter(Infinite(SequentialSampler(list(range(3)), batch_size=2)))
        >>> [next(it) for _ in range(4)]
        [[0, 1], [2], [0, 1], [2]]
    """

    def __init__(self, sampler):
        # NOTE: MapSampler.__init__ is skipped on purpose: every attribute is
        # the wrapped sampler's, reached through __getattr__.
        self.sampler = sampler
        self.sampler_iter = iter(self.sampler)

    def __iter__(self):
        return self

    def __next__(self):
        try:
            index = next(self.sampler_iter)
        except StopIteration:
            self.sampler_iter = iter(self.sampler)
            index = next(self.sampler_iter)
        return index

    def __len__(self):
        return np.iinfo(np.int64).max

    def __getattr__(self, name):
        # guard: during unpickling `sampler` is not yet set
        if name in ("sampler", "sampler_iter"):
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def batch(self):
        r"""Return the endless batch iterator.

        Returns:
            this sampler.
        """
        return self

    def sample(self):
        r"""Return one epoch of indices from the wrapped sampler.

        Returns:
            the wrapped sampler's ``sample()``.
        """
        return self.sampler.sample()
