"""``COCO``: images with COCO-format JSON annotations (boxes, categories, keypoints, polygons)."""
from __future__ import annotations

import json
import os
from collections import defaultdict

import numpy as np

from ..meta_dataset import VisionDataset
from .utils import imread

__all__ = ["COCO"]

_MIN_KEYPOINTS_PER_IMAGE = 10


def _count_visible_keypoints(anno):
    return sum(sum(1 for v in ann.get("keypoints", [])[2::3] if v > 0) for ann in anno)


def has_valid_annotation(anno, order):
    """MegEngine's rule for keeping an image when ``remove_images_without_annotations``, given its annotations
    without crowds and without boxes of zero width or height: at least one is left, and (when keypoints are asked
    for) they hold at least 10 visible keypoints. A box 1 pixel wide counts (maskrcnn-benchmark's rule, which
    drops it, is not MegEngine's)."""
    if len(anno) == 0:
        return False
    if "keypoints" in order:
        if "keypoints" not in anno[0] or _count_visible_keypoints(anno) < _MIN_KEYPOINTS_PER_IMAGE:
            return False
    return True


class COCO(VisionDataset):
    r"""A COCO-format detection dataset: images under ``root``, annotations in the JSON file ``ann_file``.

    A sample is a tuple laid out by ``order`` (default ``("image",)``), from:

    * ``"image"``: ``(H, W, 3)`` uint8 BGR;
    * ``"boxes"``: ``(N, 4)`` float32, ``x0, y0, x1, y1`` (converted from COCO's ``x, y, w, h``);
    * ``"boxes_category"``: ``(N,)`` int32, contiguous category ids starting at 1 (sorted JSON ids);
    * ``"keypoints"``: ``(N, K, 3)`` float32;
    * ``"polygons"``: per object, a list of ``(P, 2)`` float32 polygons;
    * ``"info"``: ``[height, width, file_name]``.

    Args:
        root: directory of the image files (``file_name`` of the JSON is relative to it).
        ann_file: the JSON annotation file.
        remove_images_without_annotations: drop images without a valid annotation (crowd and empty boxes
            removed; see :func:`has_valid_annotation`).
        order: the sample layout.

    Example:
        >>> import json, os, tempfile, cv2
        >>> from megxla.data.dataset import COCO
        >>> with tempfile.TemporaryDirectory() as root:
        ...     _ = cv2.imwrite(os.path.join(root, "1.jpg"), np.zeros((6, 8, 3), "uint8"))
        ...     ann = {"images": [{"id": 1, "file_name": "1.jpg", "height": 6, "width": 8}],
        ...            "annotations": [{"id": 1, "image_id": 1, "category_id": 18, "bbox": [1, 1, 3, 2],
        ...                             "iscrowd": 0}],
        ...            "categories": [{"id": 18, "name": "dog"}]}
        ...     with open(os.path.join(root, "ann.json"), "w") as f:
        ...         json.dump(ann, f)
        ...     ds = COCO(root, os.path.join(root, "ann.json"),
        ...             order=("image", "boxes", "boxes_category", "info"))
        ...     image, boxes, category, info = ds[0]
        >>> len(ds), image.shape, boxes, category, info
        (1, (6, 8, 3), array([[1., 1., 4., 3.]], dtype=float32), array([1], dtype=int32), [6, 8, '1.jpg'])
    """

    supported_order = ("image", "boxes", "boxes_category", "keypoints", "polygons", "info")

    class_names = (
        "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
        "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
        "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
        "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
        "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
        "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
        "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard",
        "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors",
        "teddy bear", "hair drier", "toothbrush",
    )
    # MegEngine's: each of ``class_names`` to its category id in the official COCO JSON (ids 1-90 with 10 gaps),
    # what a detector's results written back as COCO JSON need
    classes_originID = dict(zip(class_names, (
        *range(1, 12), *range(13, 26), 27, 28, *range(31, 45), *range(46, 66), 67, 70, *range(72, 83),
        *range(84, 91),
    )))
    keypoint_names = (
        "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder", "left_elbow",
        "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee", "right_knee",
        "left_ankle", "right_ankle",
    )

    def __init__(self, root, ann_file, remove_images_without_annotations=False, *, order=None):
        super().__init__(root, order=order, supported_order=self.supported_order)
        if not os.path.isfile(ann_file):
            raise FileNotFoundError(f"{type(self).__name__}: annotation file {ann_file!r} not found")
        with open(ann_file, "r") as f:
            dataset = json.load(f)
        self.imgs = {img["id"]: img for img in dataset["images"]}
        self.img_to_anns = defaultdict(list)
        for ann in dataset.get("annotations", []):
            self.img_to_anns[ann["image_id"]].append(ann)
        self.cats = {cat["id"]: cat for cat in dataset.get("categories", [])}
        self.ids = sorted(self.imgs)
        if remove_images_without_annotations:
            ids = []
            for img_id in self.ids:
                anno = [o for o in self.img_to_anns[img_id] if o.get("iscrowd", 0) == 0]
                anno = [o for o in anno if o["bbox"][2] > 0 and o["bbox"][3] > 0]
                if has_valid_annotation(anno, self.order):
                    ids.append(img_id)
                    self.img_to_anns[img_id] = anno
                else:
                    del self.imgs[img_id]
                    self.img_to_anns.pop(img_id, None)
            self.ids = ids
        self.json_category_id_to_contiguous_id = {v: i + 1 for i, v in enumerate(sorted(self.cats))}
        self.contiguous_category_id_to_json_id = {v: k for k, v in self.json_category_id_to_contiguous_id.items()}

    def __getitem__(self, index):
        img_id = self.ids[index]
        anno = self.img_to_anns[img_id]
        target = []
        for k in self.order:
            if k == "image":
                target.append(imread(os.path.join(self.root, self.imgs[img_id]["file_name"])))
            elif k == "boxes":
                boxes = np.array([obj["bbox"] for obj in anno], dtype=np.float32).reshape(-1, 4)
                boxes[:, 2:] += boxes[:, :2]  # xywh -> xyxy
                target.append(boxes)
            elif k == "boxes_category":
                cats = [self.json_category_id_to_contiguous_id[obj["category_id"]] for obj in anno]
                target.append(np.array(cats, dtype=np.int32))
            elif k == "keypoints":
                kps = [obj["keypoints"] for obj in anno]
                target.append(np.array(kps, dtype=np.float32).reshape(-1, len(self.keypoint_names), 3))
            elif k == "polygons":
                polys = [obj["segmentation"] for obj in anno]
                target.append([[np.array(p, dtype=np.float32).reshape(-1, 2) for p in ps] for ps in polys])
            elif k == "info":
                info = self.imgs[img_id]
                target.append([info["height"], info["width"], info["file_name"]])
        return tuple(target)

    def __len__(self):
        return len(self.ids)

    def get_img_info(self, index):
        """The JSON ``images`` entry of sample ``index`` (``height``, ``width``, ``file_name``...)."""
        return self.imgs[self.ids[index]]
