"""``Objects365``: the Objects365 detection data set (COCO-format annotations, 365 categories)."""
from __future__ import annotations

from .coco import COCO

__all__ = ["Objects365"]


class Objects365(COCO):
    r"""Objects365: images under ``root``, COCO-format annotations in ``ann_file``.

    Samples are laid out by ``order`` from ``"image"``, ``"boxes"``, ``"boxes_category"`` and ``"info"``, as
    in :class:`~megxla.data.dataset.COCO` (Objects365 has no keypoints or polygons). ``class_names`` are the
    annotation file's category names, in contiguous-id order.

    Args:
        root: directory of the image files.
        ann_file: the JSON annotation file.
        remove_images_without_annotations: drop images without a valid box.
        order: the sample layout.
    """

    supported_order = ("image", "boxes", "boxes_category", "info")

    def __init__(self, root, ann_file, remove_images_without_annotations=False, *, order=None):
        super().__init__(root, ann_file, remove_images_without_annotations, order=order)
        self.class_names = tuple(self.cats[k]["name"] for k in sorted(self.cats))
