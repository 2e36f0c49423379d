"""``ImageFolder``: images sorted into one sub-directory per class."""
from __future__ import annotations

import os
from typing import Dict, List, Tuple

import numpy as np

from ..meta_dataset import VisionDataset
from .utils import imread, is_img

__all__ = ["ImageFolder"]


class ImageFolder(VisionDataset):
    r"""Images in ``root/<class name>/**/<file>``; the class index is the rank of the class directory name.

    Sample: ``(image, label)`` — ``image`` is ``(H, W, 3)`` uint8 BGR, ``label`` an ``np.int32`` (or, with
    ``class_name=True``, the class directory name). Files are walked in sorted order, following links.

    Args:
        root: the directory of class directories.
        check_valid_func: ``f(path) -> bool`` selecting the files to use; default: image file extensions.
        class_name: give the class name instead of its index.

    Example:
        >>> import os, tempfile, cv2
        >>> from megxla.data.dataset import ImageFolder
        >>> with tempfile.TemporaryDirectory() as root:
        ...     for cls, n in (("daisy", 2), ("tulip", 1)):
        ...         os.makedirs(os.path.join(root, cls))
        ...         for i in range(n):
        ...             _ = cv2.imwrite(os.path.join(root, cls, f"{i}.png"), np.zeros((4, 6, 3), "uint8"))
        ...     ds = ImageFolder(root)
        ...     image, label = ds[2]
        >>> len(ds), {name: int(i) for name, i in ds.class_dict.items()}, image.shape, int(label)
        (3, {'daisy': 0, 'tulip': 1}, (4, 6, 3), 1)
    """

    def __init__(self, root: str, check_valid_func=None, class_name: bool = False):
        super().__init__(root, order=("image", "image_category"))
        self.root = os.path.expanduser(root)
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"ImageFolder: directory {self.root!r} does not exist")
        self.check_valid = check_valid_func if check_valid_func is not None else is_img
        self.class_name = class_name
        self.class_dict = self.collect_class()
        self.samples = self.collect_samples()

    def collect_class(self) -> Dict:
        """``{class directory name: np.int32 index}``, indices in sorted name order."""
        classes = sorted(d.name for d in os.scandir(self.root) if d.is_dir())
        return {c: np.int32(i) for i, c in enumerate(classes)}

    def collect_samples(self) -> List:
        """``[(path, label or class name)]`` of every valid file: classes in sorted order, in each the folders in
        the sorted order of their paths (MegEngine's ``sorted(os.walk(d))``: ``c/sub-2`` before ``c/sub/deep``),
        in each folder the files sorted."""
        samples = []
        for key in sorted(self.class_dict):
            walk = os.walk(os.path.join(self.root, key), followlinks=True)
            for dirpath, _, files in sorted(walk, key=lambda entry: entry[0]):
                for name in sorted(files):
                    path = os.path.join(dirpath, name)
                    if self.check_valid(path):
                        samples.append((path, key if self.class_name else self.class_dict[key]))
        return samples

    def __getitem__(self, index: int) -> Tuple:
        path, label = self.samples[index]
        return imread(path), label

    def __len__(self) -> int:
        return len(self.samples)
