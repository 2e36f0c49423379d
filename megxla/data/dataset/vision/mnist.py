"""``MNIST``: handwritten digits from the four IDX files of the original distribution."""
from __future__ import annotations

import gzip
import hashlib
import os
import struct

import numpy as np

from ..meta_dataset import VisionDataset
from .utils import default_dataset_root, missing_files_error

__all__ = ["MNIST"]


def _open(path):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def parse_idx3(path):
    """Images of an IDX3 file: ``(meta, (N, rows, cols, 1) uint8)``."""
    with _open(path) as f:
        magic, size, rows, cols = struct.unpack(">iiii", f.read(16))
        if magic != 2051:
            raise ValueError(f"MNIST: {path} is not an IDX3 image file (magic {magic})")
        images = np.frombuffer(f.read(), dtype=np.uint8)
    if images.size != size * rows * cols:
        raise ValueError(f"MNIST: {path} is truncated ({images.size} of {size * rows * cols} bytes)")
    return {"magic": magic, "imgs": size, "height": rows, "width": cols}, images.reshape(size, rows, cols, 1)


def parse_idx1(path):
    """Labels of an IDX1 file: ``(meta, (N,) uint8)``."""
    with _open(path) as f:
        magic, size = struct.unpack(">ii", f.read(8))
        if magic != 2049:
            raise ValueError(f"MNIST: {path} is not an IDX1 label file (magic {magic})")
        labels = np.frombuffer(f.read(), dtype=np.uint8)
    if labels.size != size:
        raise ValueError(f"MNIST: {path} is truncated ({labels.size} of {size} labels)")
    return {"magic": magic, "imgs": size}, labels


class MNIST(VisionDataset):
    r"""MNIST read from ``root``: ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
    ``t10k-images-idx3-ubyte.gz``, ``t10k-labels-idx1-ubyte.gz`` (uncompressed copies, without ``.gz``, work
    too). Sample: ``(image (28, 28, 1) uint8, label np.int32)``.

    Args:
        root: directory of the files; default ``~/.cache/megengine/MNIST`` (MegEngine's).
        train: the 60,000 training images, else the 10,000 test images.
        download: fetch missing files from ``url_path`` (MD5-checked); a failed download names the URL and the
            target path. With ``False``, missing files raise ``FileNotFoundError``.

    Example:
        >>> import gzip, os, struct, tempfile
        >>> from megxla.data.dataset import MNIST
        >>> def idx(path, magic, a):  # MNIST's IDX format: a magic number, the dimensions, the bytes
        ...     with gzip.open(path, "wb") as f:
        ...         f.write(struct.pack(">i", magic) + b"".join(struct.pack(">i", d) for d in a.shape) + a.tobytes())
        >>> with tempfile.TemporaryDirectory() as root:
        ...     idx(os.path.join(root, "t10k-images-idx3-ubyte.gz"), 2051, np.zeros((3, 28, 28), "uint8"))
        ...     idx(os.path.join(root, "t10k-labels-idx1-ubyte.gz"), 2049, np.array([7, 2, 1], "uint8"))
        ...     ds = MNIST(root, train=False, download=False)
        ...     image, label = ds[1]
        >>> len(ds), image.shape, int(label)
        (3, (28, 28, 1), 2)
        >>> MNIST("/no/such/dir", download=False)
        Traceback (most recent call last):
        ...
        megxla.data.dataset.vision.utils.DatasetFilesNotFoundError: MNIST: ... not found under '/no/such/dir'...
    """

    url_path = "https://megengine.oss-cn-hangzhou.aliyuncs.com/dataset/mnist/"
    raw_file_name = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                     "t10k-labels-idx1-ubyte.gz"]
    raw_file_md5 = ["f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
                    "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c"]

    def __init__(self, root: str = None, train: bool = True, download: bool = True):
        super().__init__(root, order=("image", "image_category"))
        default = os.path.join(default_dataset_root(), type(self).__name__)  # MegEngine's ~/.cache/megengine/MNIST
        self.root = os.path.expanduser(root) if root is not None else default
        self.train = train
        if self._missing():
            if not download:
                raise missing_files_error("MNIST", self.root, self._missing(),
                                          "Put the four MNIST IDX files there or pass download=True")
            self.download()
        self.process(train)

    def _path(self, name):
        for cand in (name, name[:-3]):  # .gz or already uncompressed
            p = os.path.join(self.root, cand)
            if os.path.isfile(p):
                return p
        return None

    def _missing(self):
        names = self.raw_file_name[:2] if self.train else self.raw_file_name[2:]
        return [n for n in names if self._path(n) is None]

    @property
    def meta(self):
        """The IDX headers of the loaded files."""
        return self.meta_data

    def download(self):
        """Download the missing files into :attr:`root` and check their MD5."""
        from ....hub.fetcher import download_from_url
        os.makedirs(self.root, exist_ok=True)
        for name, md5 in zip(self.raw_file_name, self.raw_file_md5):
            if self._path(name) is not None:
                continue
            dst = os.path.join(self.root, name)
            download_from_url(self.url_path + name, dst)
            with open(dst, "rb") as f:
                digest = hashlib.md5(f.read()).hexdigest()
            if digest != md5:
                os.remove(dst)
                raise RuntimeError(f"MNIST: {dst} downloaded from {self.url_path + name} has MD5 {digest}, "
                                   f"expected {md5}; removed")

    def process(self, train):
        """Parse the IDX files of the training (``train``) or test split into :attr:`arrays`."""
        names = self.raw_file_name[:2] if train else self.raw_file_name[2:]
        meta_images, images = parse_idx3(self._path(names[0]))
        meta_labels, labels = parse_idx1(self._path(names[1]))
        if len(images) != len(labels):
            raise ValueError(f"MNIST: {len(images)} images but {len(labels)} labels under {self.root}")
        self.meta_data = {"images": meta_images, "labels": meta_labels}
        self.arrays = (images, labels.astype(np.int32))

    def __getitem__(self, index):
        return tuple(array[index] for array in self.arrays)

    def __len__(self):
        return len(self.arrays[0])
