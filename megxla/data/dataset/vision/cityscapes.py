"""``Cityscapes``: semantic segmentation in the Cityscapes layout (leftImg8bit + gtFine / gtCoarse)."""
from __future__ import annotations

import os

import numpy as np

from ..meta_dataset import VisionDataset
from .utils import DatasetRootNotFoundError, imread

__all__ = ["Cityscapes"]


class Cityscapes(VisionDataset):
    r"""Cityscapes samples: ``root/leftImg8bit/<image_set>/<city>/*_leftImg8bit.png`` and their label maps
    ``root/<mode>/<image_set>/<city>/*_<mode>_labelIds.png``.

    A sample is a tuple laid out by ``order`` from ``"image"`` (``(H, W, 3)`` uint8 BGR), ``"mask"``
    (``(H, W, 1)`` uint8 train id 0..18 per pixel, 255 for ignored labels) and ``"info"`` (``[height, width,
    image path]``).

    Args:
        root: the Cityscapes directory.
        image_set: ``"train"``, ``"val"`` or ``"test"`` (``"train_extra"`` with ``gtCoarse``).
        mode: ``"gtFine"`` or ``"gtCoarse"``.
        order: the sample layout.

    Example:
        >>> import os, tempfile, cv2
        >>> from megxla.data.dataset import Cityscapes
        >>> with tempfile.TemporaryDirectory() as root:
        ...     image_dir, label_dir = (os.path.join(root, d, "train", "aachen") for d in ("leftImg8bit", "gtFine"))
        ...     os.makedirs(image_dir); os.makedirs(label_dir)
        ...     _ = cv2.imwrite(os.path.join(image_dir, "aachen_000000_000019_leftImg8bit.png"),
        ...                     np.zeros((3, 4, 3), "uint8"))
        ...     _ = cv2.imwrite(os.path.join(label_dir, "aachen_000000_000019_gtFine_labelIds.png"),
        ...                     np.full((3, 4), 26, "uint8"))  # label id 26: car
        ...     ds = Cityscapes(root, "train", "gtFine", order=("image", "mask"))
        ...     image, mask = ds[0]
        >>> len(ds), image.shape, mask.shape, int(mask[0, 0, 0]), ds.class_names[13]
        (1, (3, 4, 3), (3, 4, 1), 13, 'car')
    """

    supported_order = ("image", "mask", "info")
    class_names = ("road", "sidewalk", "building", "wall", "fence", "pole", "traffic light", "traffic sign",
                   "vegetation", "terrain", "sky", "person", "rider", "car", "truck", "bus", "train", "motorcycle",
                   "bicycle")
    # label ids of the 19 evaluated classes, in train-id order
    trans_labels = (7, 8, 11, 12, 13, 17, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 31, 32, 33)

    def __init__(self, root, image_set, mode, *, order=None):
        super().__init__(root, order=order, supported_order=self.supported_order)
        valid_modes = ("train", "test", "val") if mode == "gtFine" else ("train", "train_extra", "val")
        if mode not in ("gtFine", "gtCoarse"):
            raise ValueError(f"Cityscapes: mode must be 'gtFine' or 'gtCoarse', got {mode!r}")
        if image_set not in valid_modes:
            raise ValueError(f"Cityscapes: image_set {image_set!r} is not valid for mode {mode!r}: {valid_modes}")
        self.image_set, self.mode = image_set, mode
        self.images_dir = os.path.join(self.root, "leftImg8bit", image_set)
        self.masks_dir = os.path.join(self.root, mode, image_set)
        if not os.path.isdir(self.images_dir):
            raise DatasetRootNotFoundError(f"Cityscapes: directory {self.images_dir!r} does not exist (expected "
                                           f"<root>/leftImg8bit/<image_set>/<city>/*_leftImg8bit.png)")
        self.images, self.masks = [], []
        for city in sorted(os.listdir(self.images_dir)):
            img_dir = os.path.join(self.images_dir, city)
            for file_name in sorted(os.listdir(img_dir)):
                mask_name = f"{file_name.split('_leftImg8bit')[0]}_{self._get_target_suffix(mode, 'semantic')}"
                self.images.append(os.path.join(img_dir, file_name))
                self.masks.append(os.path.join(self.masks_dir, city, mask_name))

    def __getitem__(self, index):
        target = []
        image = None
        for k in self.order:
            if k == "image":
                image = imread(self.images[index])
                target.append(image)
            elif k == "mask":
                target.append(self._trans_mask(imread(self.masks[index], color=False))[:, :, np.newaxis])
            elif k == "info":
                if image is None:
                    image = imread(self.images[index])
                target.append([image.shape[0], image.shape[1], self.images[index]])
        return tuple(target)

    def __len__(self):
        return len(self.images)

    def _trans_mask(self, mask):
        label = np.full(mask.shape, 255, dtype=np.uint8)
        for i, tl in enumerate(self.trans_labels):
            label[mask == tl] = i
        return label

    @staticmethod
    def _get_target_suffix(mode, target_type):
        if target_type == "instance":
            return f"{mode}_instanceIds.png"
        if target_type == "semantic":
            return f"{mode}_labelIds.png"
        if target_type == "color":
            return f"{mode}_color.png"
        return f"{mode}_polygons.json"
