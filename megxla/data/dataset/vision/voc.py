"""``PascalVOC``: the PASCAL VOC layout (JPEGImages, Annotations, SegmentationClass, ImageSets)."""
from __future__ import annotations

import collections
import os
import xml.etree.ElementTree as ET

import numpy as np

from ..meta_dataset import VisionDataset
from .utils import DatasetRootNotFoundError, imread, missing_files_error

__all__ = ["PascalVOC"]


class PascalVOC(VisionDataset):
    r"""PASCAL VOC detection or segmentation samples under ``root`` (a ``VOC2012``-style directory).

    ``image_set`` names the split file ``ImageSets/Main/<image_set>.txt`` (boxes) or
    ``ImageSets/Segmentation/<image_set>.txt`` (mask). A sample is a tuple laid out by ``order`` from:

    * ``"image"``: ``(H, W, 3)`` uint8 BGR from ``JPEGImages/<id>.jpg``;
    * ``"boxes"``: ``(N, 4)`` float32 ``xmin, ymin, xmax, ymax`` from ``Annotations/<id>.xml``;
    * ``"boxes_category"``: ``(N,)`` int32, index in :attr:`class_names` + 1;
    * ``"mask"``: ``(H, W, 1)`` uint8 class index per pixel (0 background, 255 void), decoded from the colour
      PNG ``SegmentationClass/<id>.png`` (``SegmentationClass_aug``, already indices, for ``*aug*`` sets);
    * ``"info"``: ``[height, width, id]``.

    Boxes and mask cannot be asked for together (they come from different splits).

    Args:
        root: the ``VOC2012``-style directory (``JPEGImages``, ``Annotations``, ``ImageSets``...).
        image_set: the split's name (``"train"``, ``"val"``, ``"trainval"``, ``"train_aug"``...).
        order: the sample layout.

    Example:
        >>> import os, tempfile, cv2
        >>> from megxla.data.dataset import PascalVOC
        >>> xml = ("<annotation><size><width>6</width><height>4</height></size><object><name>dog</name>"
        ...        "<difficult>0</difficult><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>3</xmax><ymax>3</ymax>"
        ...        "</bndbox></object></annotation>")
        >>> with tempfile.TemporaryDirectory() as root:
        ...     for d in ("JPEGImages", "Annotations", "ImageSets/Main"):
        ...         os.makedirs(os.path.join(root, d))
        ...     _ = cv2.imwrite(os.path.join(root, "JPEGImages", "a.jpg"), np.zeros((4, 6, 3), "uint8"))
        ...     _ = open(os.path.join(root, "Annotations", "a.xml"), "w").write(xml)
        ...     _ = open(os.path.join(root, "ImageSets", "Main", "train.txt"), "w").write("a\n")
        ...     ds = PascalVOC(root, "train", order=("image", "boxes", "boxes_category", "info"))
        ...     image, boxes, category, info = ds[0]
        >>> len(ds), image.shape, boxes, category, info
        (1, (4, 6, 3), array([[1., 1., 3., 3.]], dtype=float32), array([12], dtype=int32), [4, 6, 'a'])
    """

    supported_order = ("image", "boxes", "boxes_category", "mask", "info")
    class_names = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
                   "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
                   "tvmonitor")
    # BGR colour of each label in SegmentationClass PNGs: 0 is the background, then class_names in order.
    class_colors = [
        [0, 0, 0], [0, 0, 128], [0, 128, 0], [0, 128, 128], [128, 0, 0], [128, 0, 128], [128, 128, 0],
        [128, 128, 128], [0, 0, 64], [0, 0, 192], [0, 128, 64], [0, 128, 192], [128, 0, 64], [128, 0, 192],
        [128, 128, 64], [128, 128, 192], [0, 64, 0], [0, 64, 128], [0, 192, 0], [0, 192, 128], [128, 64, 0],
    ]

    def __init__(self, root, image_set, *, order=None):
        order = ("image",) if order is None else order
        if ("boxes" in order or "boxes_category" in order) and "mask" in order:
            raise ValueError("PascalVOC only supports boxes & boxes_category or mask, not both.")
        super().__init__(root, order=order, supported_order=self.supported_order)
        if not os.path.isdir(self.root):
            raise DatasetRootNotFoundError(f"PascalVOC: directory {root!r} does not exist")
        self.image_set = image_set
        image_dir = os.path.join(self.root, "JPEGImages")
        seg = "mask" in order
        split_f = os.path.join(self.root, "ImageSets", "Segmentation" if seg else "Main", image_set + ".txt")
        if not os.path.isfile(split_f):
            raise missing_files_error("PascalVOC", self.root, [os.path.relpath(split_f, self.root)])
        with open(split_f) as f:
            self.file_names = [x.strip() for x in f if x.strip()]
        self.images = [os.path.join(image_dir, x + ".jpg") for x in self.file_names]
        if seg:
            mask_dir = os.path.join(self.root, "SegmentationClass_aug" if "aug" in image_set else "SegmentationClass")
            self.masks = [os.path.join(mask_dir, x + ".png") for x in self.file_names]
        else:
            self.annotations = [os.path.join(self.root, "Annotations", x + ".xml") for x in self.file_names]
        self.img_infos = {}

    def _objects(self, index):
        anno = self.parse_voc_xml(ET.parse(self.annotations[index]).getroot())
        return anno["annotation"].get("object", [])

    def __getitem__(self, index):
        target = []
        image = None
        for k in self.order:
            if k == "image":
                image = imread(self.images[index])
                target.append(image)
            elif k == "boxes":
                boxes = [obj["bndbox"] for obj in self._objects(index)]
                boxes = [(bb["xmin"], bb["ymin"], bb["xmax"], bb["ymax"]) for bb in boxes]
                target.append(np.array(boxes, dtype=np.float32).reshape(-1, 4))
            elif k == "boxes_category":
                cats = [self.class_names.index(obj["name"]) + 1 for obj in self._objects(index)]
                target.append(np.array(cats, dtype=np.int32))
            elif k == "mask":
                if "aug" in self.image_set:
                    mask = imread(self.masks[index], color=False)
                else:
                    mask = self._trans_mask(imread(self.masks[index]))
                target.append(mask[:, :, np.newaxis])
            elif k == "info":
                info = self.get_img_info(index, image)
                target.append([info["height"], info["width"], info["file_name"]])
        return tuple(target)

    def __len__(self):
        return len(self.images)

    def _trans_mask(self, mask):
        label = np.full(mask.shape[:2], 255, dtype=np.uint8)
        for i, (b, g, r) in enumerate(self.class_colors):
            label[(mask[:, :, 0] == b) & (mask[:, :, 1] == g) & (mask[:, :, 2] == r)] = i
        return label

    def get_img_info(self, index, image=None):
        """``{"height", "width", "file_name"}`` of sample ``index`` (decodes the image once if not given)."""
        if index not in self.img_infos:
            if image is None:
                image = imread(self.images[index])
            self.img_infos[index] = dict(height=image.shape[0], width=image.shape[1],
                                         file_name=self.file_names[index])
        return self.img_infos[index]

    def parse_voc_xml(self, node):
        """A VOC annotation XML element as nested dicts; ``annotation.object`` is always a list."""
        voc_dict = {}
        children = list(node)
        if children:
            def_dic = collections.defaultdict(list)
            for dc in map(self.parse_voc_xml, children):
                for ind, v in dc.items():
                    def_dic[ind].append(v)
            if node.tag == "annotation":
                def_dic["object"] = [def_dic["object"]]
            voc_dict = {node.tag: {ind: v[0] if len(v) == 1 else v for ind, v in def_dic.items()}}
        if node.text:
            text = node.text.strip()
            if not children:
                voc_dict[node.tag] = text
        return voc_dict
