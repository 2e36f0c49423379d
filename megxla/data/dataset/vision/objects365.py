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

    Example:
        >>> import json, os, tempfile, cv2
        >>> from megxla.data.dataset import Objects365
        >>> with tempfile.TemporaryDirectory() as root:
        ...     _ = cv2.imwrite(os.path.join(root, "1.jpg"), np.zeros((6, 8, 3), "uint8"))
        ...     ann = {"images": [{"id": 1, "file_name": "1.jpg", "height": 6, "width": 8}],
        ...            "annotations": [{"id": 1, "image_id": 1, "category_id": 18, "bbox": [1, 1, 3, 2],
        ...                             "iscrowd": 0}],
        ...            "categories": [{"id": 18, "name": "dog"}]}
        ...     with open(os.path.join(root, "ann.json"), "w") as f:
        ...         json.dump(ann, f)
        ...     ds = Objects365(root, os.path.join(root, "ann.json"),
        ...             order=("image", "boxes", "boxes_category", "info"))
        ...     image, boxes, category, info = ds[0]
        >>> len(ds), image.shape, boxes, category, info
        (1, (6, 8, 3), array([[1., 1., 4., 3.]], dtype=float32), array([1], dtype=int32), [6, 8, '1.jpg'])
        >>> ds.class_names
        ('dog',)
    """

    supported_order = ("image", "boxes", "boxes_category", "info")

    def __init__(self, root, ann_file, remove_images_without_annotations=False, *, order=None):
        super().__init__(root, ann_file, remove_images_without_annotations, order=order)
        self.class_names = tuple(self.cats[k]["name"] for k in sorted(self.cats))
