"""``CIFAR10`` / ``CIFAR100``: the Python-pickle distribution of the CIFAR data sets."""
from __future__ import annotations

import hashlib
import os
import pickle

import numpy as np

from ..meta_dataset import VisionDataset
from .utils import default_dataset_root, missing_files_error, safe_extract

__all__ = ["CIFAR10", "CIFAR100"]


class CIFAR10(VisionDataset):
    r"""CIFAR-10 read from ``root``: the extracted ``cifar-10-batches-py`` directory, or the archive
    ``cifar-10-python.tar.gz`` (extracted on first use). Sample: ``(image (32, 32, 3) uint8 BGR, label
    np.int32)`` — BGR like every image MegEngine decodes with OpenCV.

    Args:
        root: directory of the files; default ``~/.cache/megengine/CIFAR10`` (``CIFAR100``), MegEngine's.
        train: the 50,000 training images, else the 10,000 test images.
        download: fetch the archive from ``url_path`` when absent (MD5-checked); with ``False`` a missing
            archive raises ``FileNotFoundError``.
        timeout: download timeout in seconds.

    Example:
        >>> import os, pickle, tempfile
        >>> from megxla.data.dataset import CIFAR10
        >>> with tempfile.TemporaryDirectory() as root:
        ...     os.makedirs(os.path.join(root, "cifar-10-batches-py"))
        ...     for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        ...         with open(os.path.join(root, "cifar-10-batches-py", name), "wb") as f:  # rows: R, G, B planes
        ...             pickle.dump({b"data": np.zeros((2, 3 * 32 * 32), "uint8"), b"labels": [3, 8]}, f)
        ...     ds = CIFAR10(root, train=True, download=False)
        ...     image, label = ds[1]
        >>> len(ds), image.shape, int(label)
        (10, (32, 32, 3), 8)
    """

    url_path = "http://www.cs.utoronto.ca/~kriz/"
    raw_file_name = "cifar-10-python.tar.gz"
    raw_file_md5 = "c58f30108f718f92721af3b95e74349a"
    raw_file_dir = "cifar-10-batches-py"
    train_batch = ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"]
    test_batch = ["test_batch"]
    meta_info = {"name": "batches.meta"}

    def __init__(self, root: str = None, train: bool = True, download: bool = True, timeout: int = 500):
        super().__init__(root, order=("image", "image_category"))
        name = type(self).__name__  # MegEngine's folder: ~/.cache/megengine/CIFAR10
        self.root = os.path.expanduser(root) if root is not None else os.path.join(default_dataset_root(), name)
        self.train = train
        self.timeout = timeout
        if not os.path.isdir(os.path.join(self.root, self.raw_file_dir)):
            archive = os.path.join(self.root, self.raw_file_name)
            if not os.path.isfile(archive):
                if not download:
                    raise missing_files_error(type(self).__name__, self.root, [self.raw_file_dir, self.raw_file_name],
                                              "Put the extracted directory or the archive there or pass "
                                              "download=True")
                self.download()
            self.untar(archive, self.root)
        self.arrays = self.process()

    @property
    def meta(self):
        """The data set's ``batches.meta`` (``label_names`` ...)."""
        with open(os.path.join(self.root, self.raw_file_dir, self.meta_info["name"]), "rb") as f:
            return pickle.load(f, encoding="bytes")

    def download(self):
        """Download the archive into :attr:`root` and check its MD5."""
        from ....hub.fetcher import download_from_url
        os.makedirs(self.root, exist_ok=True)
        dst = os.path.join(self.root, self.raw_file_name)
        download_from_url(self.url_path + self.raw_file_name, dst, timeout=self.timeout)
        with open(dst, "rb") as f:
            digest = hashlib.md5(f.read()).hexdigest()
        if digest != self.raw_file_md5:
            os.remove(dst)
            raise RuntimeError(f"{type(self).__name__}: {dst} has MD5 {digest}, expected {self.raw_file_md5}; removed")

    def untar(self, file_path, dirs):
        """Extract the archive ``file_path`` into the directory ``dirs`` (members may not leave it)."""
        safe_extract(file_path, dirs)

    def _batch_files(self):
        files = self.train_batch if self.train else self.test_batch
        missing = [f for f in files if not os.path.isfile(os.path.join(self.root, self.raw_file_dir, f))]
        if missing:
            raise missing_files_error(type(self).__name__, os.path.join(self.root, self.raw_file_dir), missing)
        return files

    def _load(self, filename):
        with open(os.path.join(self.root, self.raw_file_dir, filename), "rb") as fo:
            return pickle.load(fo, encoding="bytes")

    @staticmethod
    def _images(dic):
        # rows are 3x32x32 planes in RGB order: -> HWC, BGR
        return np.ascontiguousarray(np.asarray(dic[b"data"], np.uint8).reshape(-1, 3, 32, 32)
                                    .transpose(0, 2, 3, 1)[..., ::-1])

    def bytes2array(self, filenames):
        """``(images, labels)`` of the given batch files."""
        data, label = [], []
        for filename in filenames:
            dic = self._load(filename)
            data.append(self._images(dic))
            label.extend(dic[b"labels"])
        return np.concatenate(data), np.array(label, dtype=np.int32)

    def process(self):
        """The arrays of the selected split."""
        return self.bytes2array(self._batch_files())

    def __getitem__(self, index):
        return tuple(array[index] for array in self.arrays)

    def __len__(self):
        return len(self.arrays[0])


class CIFAR100(CIFAR10):
    r"""CIFAR-100 read from ``root`` (``cifar-100-python`` or ``cifar-100-python.tar.gz``). Sample: ``(image
    (32, 32, 3) uint8 BGR, fine label np.int32, coarse label np.int32)``.

    Args:
        root, train, download, timeout: as :class:`CIFAR10` (default root ``~/.cache/megengine/CIFAR100``).

    Example:
        >>> import os, pickle, tempfile
        >>> from megxla.data.dataset import CIFAR100
        >>> with tempfile.TemporaryDirectory() as root:
        ...     os.makedirs(os.path.join(root, "cifar-100-python"))
        ...     with open(os.path.join(root, "cifar-100-python", "train"), "wb") as f:
        ...         pickle.dump({b"data": np.zeros((2, 3 * 32 * 32), "uint8"), b"fine_labels": [5, 6],
        ...                      b"coarse_labels": [1, 2]}, f)
        ...     ds = CIFAR100(root, train=True, download=False)
        ...     image, fine, coarse = ds[1]
        >>> len(ds), image.shape, int(fine), int(coarse)
        (2, (32, 32, 3), 6, 2)
    """

    raw_file_name = "cifar-100-python.tar.gz"
    raw_file_md5 = "eb9058c3a382ffc7106e4002c42a8d85"
    raw_file_dir = "cifar-100-python"
    train_batch = ["train"]
    test_batch = ["test"]
    meta_info = {"name": "meta"}

    def __init__(self, root: str = None, train: bool = True, download: bool = True, timeout: int = 500):
        super().__init__(root, train, download, timeout)
        self.order = ("image", "image_category", "image_category")

    def bytes2array(self, filenames):
        """``(images, fine labels, coarse labels)`` of the given files."""
        data, fine, coarse = [], [], []
        for filename in filenames:
            dic = self._load(filename)
            data.append(self._images(dic))
            fine.extend(dic[b"fine_labels"])
            coarse.extend(dic[b"coarse_labels"])
        return np.concatenate(data), np.array(fine, dtype=np.int32), np.array(coarse, dtype=np.int32)
