"""Dataset containers: the map-style and stream-style bases plus simple wrappers.

Mirrors ``megengine.data.dataset.meta_dataset``; the datasets that read image
files (ImageFolder, COCO, MNIST, ...) are in :mod:`megxla.data.dataset.vision`.
"""
import bisect
import collections.abc
import os
from abc import ABC, abstractmethod
from typing import Tuple

__all__ = [
    "Dataset",
    "StreamDataset",
    "ArrayDataset",
    "ConcatDataset",
    "VisionDataset",
]


class DatasetArgumentError(ValueError, AssertionError):
    """A bad argument to a dataset: a ``ValueError``, and the ``AssertionError`` MegEngine's ``ConcatDataset``
    raises."""


class UnsupportedOrderError(ValueError, NotImplementedError):
    """A name in ``order`` that a vision dataset cannot produce: a ``ValueError``, and the ``NotImplementedError``
    MegEngine's ``VisionDataset`` raises."""


class Dataset(ABC):
    r"""An abstract base class for all map-style datasets.

    A map-style dataset implements ``__getitem__(index)`` returning one sample
    and ``__len__()`` returning the number of samples.

    Examples:
        >>> class Squares(Dataset):
        ...     def __init__(self):
        ...         super().__init__()
        ...     def __getitem__(self, idx):
        ...         return (idx * idx,)
        ...     def __len__(self):
        ...         return 4
        >>> Squares()[3]
        (9,)
    """

    @abstractmethod
    def __init__(self):
        pass

    @abstractmethod
    def __getitem__(self, index):
        pass

    @abstractmethod
    def __len__(self):
        pass


class StreamDataset(Dataset):
    r"""An abstract base class for stream-style datasets.

    A stream dataset implements ``__iter__`` yielding one sample at a time; it
    has neither indexing nor a length. Use it with a
    :class:`~megxla.data.StreamSampler`. Inside a ``DataLoader`` worker with
    ``parallel_stream=True`` every worker iterates its own copy, so the dataset
    should shard itself using ``megxla.data.dataloader.get_worker_info()``.

    Examples:
        >>> import numpy as np
        >>> class Counter(StreamDataset):
        ...     def __init__(self, n):
        ...         self.n = n
        ...     def __iter__(self):
        ...         for i in range(self.n):
        ...             yield (np.array([i]),)
        >>> [int(s[0][0]) for s in Counter(3)]
        [0, 1, 2]
    """

    @abstractmethod
    def __init__(self):
        pass

    @abstractmethod
    def __iter__(self):
        pass

    def __getitem__(self, idx):
        raise AssertionError("can not get item from StreamDataset by index")

    def __len__(self):
        raise AssertionError("StreamDataset does not have length")


class ArrayDataset(Dataset):
    r"""A map-style dataset over one or more arrays of equal length.

    Sample ``i`` is the tuple ``(arrays[0][i], arrays[1][i], ...)``.

    Args:
        *arrays: arrays (or any indexable sequences) sharing the first
            dimension.

    Returns:
        a dataset of ``len(arrays[0])`` tuples.

    Examples:
        >>> import numpy as np
        >>> ds = ArrayDataset(np.arange(6).reshape(3, 2), np.array([0, 1, 0]))
        >>> len(ds), ds[1][0].tolist(), int(ds[1][1])
        (3, [2, 3], 1)
    """

    def __init__(self, *arrays):
        super().__init__()
        if len(arrays) == 0:
            raise ValueError("ArrayDataset needs at least one array")
        if not all(len(arrays[0]) == len(array) for array in arrays):
            raise ValueError(
                "lengths of input arrays are inconsistent: {}".format(
                    [len(a) for a in arrays]
                )
            )
        self.arrays = arrays

    def __getitem__(self, index: int) -> Tuple:
        return tuple(array[index] for array in self.arrays)

    def __len__(self) -> int:
        return len(self.arrays[0])


class ConcatDataset(Dataset):
    r"""A map-style dataset that chains several map-style datasets.

    Args:
        datasets: a non-empty sequence of map-style datasets.

    Returns:
        a dataset whose index ``i`` walks through ``datasets[0]``, then
        ``datasets[1]``, and so on.

    Examples:
        >>> import numpy as np
        >>> a = ArrayDataset(np.arange(2))
        >>> b = ArrayDataset(np.arange(10, 13))
        >>> ds = ConcatDataset([a, b])
        >>> len(ds), int(ds[3][0]), int(ds[-1][0])
        (5, 11, 12)
    """

    def __init__(self, datasets):
        super().__init__()
        self.datasets = list(datasets)
        if len(self.datasets) == 0:
            raise DatasetArgumentError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, StreamDataset):
                raise DatasetArgumentError("ConcatDataset does not support StreamDataset")
        self.cumulative_sizes = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError(
                    "absolute value of index should not exceed dataset length"
                )
            idx = len(self) + idx
        if idx >= len(self):
            raise IndexError(
                "index {} is out of range for ConcatDataset of length {}".format(
                    idx, len(self)
                )
            )
        dataset_idx = bisect.bisect_right(self.cumulative_sizes, idx)
        if dataset_idx == 0:
            sample_idx = idx
        else:
            sample_idx = idx - self.cumulative_sizes[dataset_idx - 1]
        return self.datasets[dataset_idx][sample_idx]

    def __len__(self):
        return self.cumulative_sizes[-1]


class VisionDataset(Dataset):
    r"""An abstract base class for vision datasets whose samples follow ``order``.

    Subclasses return tuples laid out as ``order`` names them, e.g.
    ``("image", "image_category")``; vision transforms use the same ``order`` to
    know which element is the image, the boxes, the mask, ...

    Args:
        root: root directory of the data (kept as an attribute, ``~`` expanded).
        order: names of the sample's elements. Default: ``("image",)``.
        supported_order: names a subclass can produce; any name in ``order``
            outside it raises ``ValueError``.

    Examples:
        >>> import numpy as np
        >>> class Tiny(VisionDataset):
        ...     def __init__(self):
        ...         super().__init__(None, order=("image", "image_category"),
        ...                          supported_order=("image", "image_category"))
        ...     def __getitem__(self, i):
        ...         return np.zeros((2, 2, 3), np.uint8), i
        ...     def __len__(self):
        ...         return 1
        >>> Tiny().order
        ('image', 'image_category')
    """

    @abstractmethod
    def __init__(self, root, *, order=None, supported_order=None):
        if order is None:
            order = ("image",)
        if not isinstance(order, collections.abc.Sequence) or isinstance(order, str):
            raise ValueError(
                "order should be a sequence, but got order={}".format(order)
            )
        if supported_order is not None:
            if not isinstance(supported_order, collections.abc.Sequence):
                raise ValueError(
                    "supported_order should be a sequence, but got {}".format(
                        supported_order
                    )
                )
            for k in order:
                if k not in supported_order:
                    raise UnsupportedOrderError("{} is unsupported data type".format(k))
        self.root = os.path.expanduser(root) if isinstance(root, (str, bytes)) else root  # "~/coco", as MegEngine
        self.order = order

    @abstractmethod
    def __getitem__(self, index):
        pass

    @abstractmethod
    def __len__(self):
        pass
