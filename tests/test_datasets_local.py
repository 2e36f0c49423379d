"""Vision datasets on tiny fixture trees written by the tests (no network, no real data sets)."""
import gzip
import json
import os
import pickle
import struct
import tarfile

import numpy as np
import pytest

PIL = pytest.importorskip("PIL.Image")

from megxla.data import DataLoader, SequentialSampler  # noqa: E402
from megxla.data.dataset import (CIFAR10, CIFAR100, COCO, MNIST, Cityscapes, ImageFolder, ImageNet,  # noqa: E402
                                 Objects365, PascalVOC)


def _png(path, rgb):
    """Write an RGB (H, W, 3) or gray (H, W) uint8 array as a lossless PNG."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    PIL.fromarray(np.asarray(rgb, np.uint8)).save(path, format="PNG")


def _solid(h, w, rgb):
    return np.broadcast_to(np.array(rgb, np.uint8), (h, w, 3)).copy()


def test_image_folder_layout_and_bgr(tmp_path):
    _png(str(tmp_path / "cat" / "a.png"), _solid(4, 5, (255, 0, 0)))
    _png(str(tmp_path / "cat" / "sub" / "b.png"), _solid(4, 5, (0, 255, 0)))
    _png(str(tmp_path / "dog" / "c.png"), _solid(3, 3, (0, 0, 255)))
    (tmp_path / "dog" / "notes.txt").write_text("not an image")
    ds = ImageFolder(str(tmp_path))
    assert ds.class_dict == {"cat": 0, "dog": 1} and len(ds) == 3
    img, label = ds[0]
    assert img.shape == (4, 5, 3) and img.dtype == np.uint8 and isinstance(label, np.int32) and label == 0
    assert img[0, 0].tolist() == [0, 0, 255]  # red in BGR, as cv2.imread gives
    assert ds[2][1] == 1 and ds[2][0].shape == (3, 3, 3)
    assert ImageFolder(str(tmp_path), class_name=True)[2][1] == "dog"
    only_a = ImageFolder(str(tmp_path), check_valid_func=lambda p: p.endswith("a.png"))
    assert len(only_a) == 1
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ImageFolder(str(tmp_path / "missing"))


def test_image_folder_orders_folders_by_path_as_megengine(tmp_path):
    # MegEngine walks each class with sorted(os.walk(d)): folders in the order of their paths, so "sub-2" and
    # "sub.x" ("-" and "." sort before "/") come before "sub/deep"
    for rel in ("c/sub/b.png", "c/sub/deep/c.png", "c/sub-2/d.png", "c/sub.x/e.png"):
        _png(str(tmp_path / rel), _solid(2, 2, (0, 0, 0)))
    ds = ImageFolder(str(tmp_path))
    assert [os.path.relpath(p, tmp_path) for p, _ in ds.samples] == [
        "c/sub/b.png", "c/sub-2/d.png", "c/sub.x/e.png", "c/sub/deep/c.png"]


def test_image_folder_through_dataloader(tmp_path):
    for i in range(4):
        _png(str(tmp_path / f"c{i % 2}" / f"{i}.png"), _solid(2, 2, (i, i, i)))
    loader = DataLoader(ImageFolder(str(tmp_path)), sampler=SequentialSampler(ImageFolder(str(tmp_path)),
                                                                              batch_size=2))
    images, labels = next(iter(loader))
    assert images.shape == (2, 2, 2, 3) and labels.tolist() == [0, 0]


def test_imagenet_extracted_and_raw(tmp_path):
    _png(str(tmp_path / "train" / "n01" / "x.JPEG.png"), _solid(2, 2, (1, 2, 3)))
    _png(str(tmp_path / "train" / "n02" / "y.png"), _solid(2, 2, (1, 2, 3)))
    ds = ImageNet(str(tmp_path), train=True)
    assert len(ds) == 2 and ds[1][1] == 1
    # raw archive: one tar per class inside the training tar
    raw = tmp_path / "raw"
    raw.mkdir()
    _png(str(tmp_path / "stage" / "z.png"), _solid(2, 2, (9, 9, 9)))
    with tarfile.open(raw / "n05.tar", "w") as t:
        t.add(tmp_path / "stage" / "z.png", arcname="z.png")
    with tarfile.open(raw / "ILSVRC2012_img_train.tar", "w") as t:
        t.add(raw / "n05.tar", arcname="n05.tar")
    os.remove(raw / "n05.tar")
    ds = ImageNet(str(raw), train=True)
    assert len(ds) == 1 and ds.class_dict == {"n05": 0} and os.path.isdir(raw / "train" / "n05")
    with pytest.raises(FileNotFoundError, match="ILSVRC2012_img_val.tar"):
        ImageNet(str(raw), train=False)


def test_imagenet_val_from_raw_archives_and_devkit(tmp_path):
    sio = pytest.importorskip("scipy.io")
    root = tmp_path / "inet"
    stage = tmp_path / "stage"
    for i, rgb in enumerate([(1, 1, 1), (2, 2, 2), (3, 3, 3)], start=1):
        _png(str(stage / "val" / f"ILSVRC2012_val_{i:08d}.JPEG"), _solid(2, 2, rgb))
    root.mkdir()
    with tarfile.open(root / "ILSVRC2012_img_val.tar", "w") as t:
        for f in sorted(os.listdir(stage / "val")):
            t.add(stage / "val" / f, arcname=f)
    data = stage / "ILSVRC2012_devkit_t12" / "data"
    data.mkdir(parents=True)
    fields = [("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("gloss", "O"), ("num_children", "O")]
    synsets = np.array([(1, "n01", "tench, Tinca tinca", "", 0), (2, "n02", "goldfish", "", 0),
                        (3, "n99", "fish", "", 2)], dtype=fields)
    sio.savemat(str(data / "meta.mat"), {"synsets": synsets})
    (data / "ILSVRC2012_validation_ground_truth.txt").write_text("2\n1\n2\n")
    with tarfile.open(root / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as t:
        t.add(stage / "ILSVRC2012_devkit_t12", arcname="ILSVRC2012_devkit_t12")
    ds = ImageNet(str(root), train=False)
    # MegEngine's: the ground truth as ILSVRC ids, meta (idx_to_wnid, wnid_to_classes) cached in the devkit folder
    assert ds.valid_ground_truth == [2, 1, 2]
    assert ds.meta == ({1: "n01", 2: "n02"}, {"n01": ("tench", "Tinca tinca"), "n02": ("goldfish",)})
    assert ds.devkit_dir == str(root / "ILSVRC2012_devkit_t12") and os.path.isfile(root / "ILSVRC2012_devkit_t12"
                                                                                    / "meta.pkl")
    assert len(ds) == 3 and ds.class_dict == {"n01": 0, "n02": 1}
    assert [int(label) for _, label in ds] == [0, 1, 1] and ds[0][0][0, 0].tolist() == [2, 2, 2]
    assert sorted(os.listdir(root / "val" / "n02")) == ["ILSVRC2012_val_00000001.JPEG", "ILSVRC2012_val_00000003.JPEG"]


def _coco_tree(tmp_path):
    _png(str(tmp_path / "img" / "1.png"), _solid(6, 8, (10, 20, 30)))
    _png(str(tmp_path / "img" / "2.png"), _solid(5, 5, (0, 0, 0)))
    ann = {
        "images": [{"id": 1, "file_name": "1.png", "height": 6, "width": 8},
                   {"id": 2, "file_name": "2.png", "height": 5, "width": 5}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 18, "bbox": [1, 1, 3, 2], "iscrowd": 0,
             "segmentation": [[1, 1, 4, 1, 4, 3]], "keypoints": [1, 1, 2] * 17},
            {"id": 2, "image_id": 1, "category_id": 5, "bbox": [0, 0, 2, 2], "iscrowd": 0,
             "segmentation": [[0, 0, 2, 0, 2, 2]], "keypoints": [0, 0, 0] * 17},
            {"id": 3, "image_id": 2, "category_id": 5, "bbox": [0, 0, 1, 1], "iscrowd": 1,
             "segmentation": [[0, 0, 1, 0, 1, 1]], "keypoints": [0, 0, 0] * 17},
        ],
        "categories": [{"id": 5, "name": "airplane"}, {"id": 18, "name": "dog"}],
    }
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(ann))
    return str(tmp_path / "img"), str(path)


def test_coco_sample_layout(tmp_path):
    root, ann = _coco_tree(tmp_path)
    ds = COCO(root, ann, order=("image", "boxes", "boxes_category", "keypoints", "polygons", "info"))
    assert len(ds) == 2
    image, boxes, cats, kps, polys, info = ds[0]
    assert image.shape == (6, 8, 3) and image[0, 0].tolist() == [30, 20, 10]
    np.testing.assert_array_equal(boxes, np.array([[1, 1, 4, 3], [0, 0, 2, 2]], np.float32))  # xyxy
    assert boxes.dtype == np.float32 and cats.dtype == np.int32 and cats.tolist() == [2, 1]
    assert kps.shape == (2, 17, 3) and polys[0][0].shape == (3, 2)
    assert info == [6, 8, "1.png"] and ds.get_img_info(1)["file_name"] == "2.png"
    # the crowd-only image is dropped; keypoints ask for >= 10 visible ones
    assert len(COCO(root, ann, remove_images_without_annotations=True, order=("image", "boxes"))) == 1
    with pytest.raises(ValueError, match="unsupported"):
        COCO(root, ann, order=("image", "mask"))


@pytest.mark.parametrize("cls", [COCO, Objects365])
def test_images_kept_with_boxes_a_pixel_wide_and_root_with_a_tilde(tmp_path, monkeypatch, cls):
    # MegEngine drops only crowds and boxes of zero width or height before asking for one box left (not
    # maskrcnn-benchmark's "every side > 1"); VisionDataset expands "~" in root
    _png(str(tmp_path / "img" / "1.png"), _solid(6, 8, (1, 2, 3)))
    _png(str(tmp_path / "img" / "2.png"), _solid(6, 8, (1, 2, 3)))
    ann = {"images": [{"id": i, "file_name": f"{i}.png", "height": 6, "width": 8} for i in (1, 2)],
           "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 1, 5], "iscrowd": 0},
                           {"id": 2, "image_id": 2, "category_id": 1, "bbox": [2, 2, 0.5, 0.5], "iscrowd": 0}],
           "categories": [{"id": 1, "name": "person"}]}
    (tmp_path / "ann.json").write_text(json.dumps(ann))
    monkeypatch.setenv("HOME", str(tmp_path))
    ds = cls("~/img", str(tmp_path / "ann.json"), remove_images_without_annotations=True,
             order=("image", "boxes", "boxes_category"))
    assert ds.root == str(tmp_path / "img") and ds.ids == [1, 2]
    assert ds[1][0].shape == (6, 8, 3) and ds[1][1].tolist() == [[2, 2, 2.5, 2.5]]


def test_objects365(tmp_path):
    root, ann = _coco_tree(tmp_path)
    ds = Objects365(root, ann, order=("image", "boxes", "boxes_category", "info"))
    assert ds[0][2].tolist() == [2, 1]
    # MegEngine's class attribute: Objects365's own 365 names, whatever categories the file lists
    assert ds.class_names is Objects365.class_names and len(ds.class_names) == 365
    assert ds.class_names[:3] == ("person", "sneakers", "chair")
    with pytest.raises(ValueError, match="unsupported"):
        Objects365(root, ann, order=("image", "keypoints"))


_VOC_XML = """<annotation><filename>{id}.jpg</filename>
<size><width>6</width><height>4</height><depth>3</depth></size>
{objects}</annotation>"""
_VOC_OBJ = ("<object><name>{name}</name><difficult>0</difficult><bndbox><xmin>{b[0]}</xmin><ymin>{b[1]}</ymin>"
            "<xmax>{b[2]}</xmax><ymax>{b[3]}</ymax></bndbox></object>")


def test_pascal_voc_boxes_and_masks(tmp_path):
    for name in ("a", "b"):
        img = _solid(4, 6, (5, 6, 7))
        os.makedirs(tmp_path / "JPEGImages", exist_ok=True)
        PIL.fromarray(img).save(tmp_path / "JPEGImages" / f"{name}.jpg", format="PNG")  # lossless, any name
    os.makedirs(tmp_path / "Annotations")
    (tmp_path / "Annotations" / "a.xml").write_text(_VOC_XML.format(id="a", objects="".join([
        _VOC_OBJ.format(name="dog", b=(1, 1, 3, 3)), _VOC_OBJ.format(name="aeroplane", b=(0, 0, 5, 2))])))
    (tmp_path / "Annotations" / "b.xml").write_text(_VOC_XML.format(id="b", objects=_VOC_OBJ.format(
        name="tvmonitor", b=(2, 0, 4, 4))))
    for split in ("Main", "Segmentation"):
        os.makedirs(tmp_path / "ImageSets" / split)
        (tmp_path / "ImageSets" / split / "train.txt").write_text("a\nb\n")
    mask = np.zeros((4, 6, 3), np.uint8)
    mask[0, 0] = (128, 0, 0)      # aeroplane (RGB palette colour) -> 1
    mask[1, 1] = (224, 224, 192)  # void boundary -> 255
    for name in ("a", "b"):
        _png(str(tmp_path / "SegmentationClass" / f"{name}.png"), mask)
    det = PascalVOC(str(tmp_path), "train", order=("image", "boxes", "boxes_category", "info"))
    image, boxes, cats, info = det[0]
    assert image[0, 0].tolist() == [7, 6, 5] and info == [4, 6, "a"]
    np.testing.assert_array_equal(boxes, [[1, 1, 3, 3], [0, 0, 5, 2]])
    assert cats.tolist() == [12, 1] and det[1][2].tolist() == [20] and det[1][1].shape == (1, 4)
    seg = PascalVOC(str(tmp_path), "train", order=("image", "mask"))
    m = seg[0][1]
    assert m.shape == (4, 6, 1) and m.dtype == np.uint8
    assert m[0, 0, 0] == 1 and m[1, 1, 0] == 255 and m[2, 2, 0] == 0
    with pytest.raises(ValueError, match="not both"):
        PascalVOC(str(tmp_path), "train", order=("image", "boxes", "mask"))
    with pytest.raises(FileNotFoundError, match="val.txt"):
        PascalVOC(str(tmp_path), "val", order=("image", "boxes"))


def test_cityscapes(tmp_path):
    _png(str(tmp_path / "leftImg8bit" / "train" / "aachen" / "aachen_000000_000019_leftImg8bit.png"),
         _solid(3, 4, (1, 2, 3)))
    label_ids = np.array([[7, 8, 0, 33], [26, 26, 1, 24], [7, 7, 7, 7]], np.uint8)
    _png(str(tmp_path / "gtFine" / "train" / "aachen" / "aachen_000000_000019_gtFine_labelIds.png"), label_ids)
    ds = Cityscapes(str(tmp_path), "train", "gtFine", order=("image", "mask", "info"))
    assert len(ds) == 1
    image, mask, info = ds[0]
    assert image.shape == (3, 4, 3) and mask.shape == (3, 4, 1) and info[:2] == [3, 4]
    assert mask[..., 0].tolist() == [[0, 1, 255, 18], [13, 13, 255, 11], [0, 0, 0, 0]]
    with pytest.raises(ValueError, match="image_set"):
        Cityscapes(str(tmp_path), "train_extra", "gtFine")


def _idx(path, magic, arr):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">i", magic) + b"".join(struct.pack(">i", d) for d in arr.shape) + arr.tobytes())


def test_mnist_reads_local_files_and_says_when_absent(tmp_path):
    imgs = np.arange(3 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(3, 28, 28)
    _idx(tmp_path / "t10k-images-idx3-ubyte.gz", 2051, imgs)
    _idx(tmp_path / "t10k-labels-idx1-ubyte.gz", 2049, np.array([7, 2, 1], np.uint8))
    ds = MNIST(str(tmp_path), train=False, download=False)
    assert len(ds) == 3
    img, label = ds[1]
    assert img.shape == (28, 28, 1) and img.dtype == np.uint8 and label == 2 and label.dtype == np.int32
    np.testing.assert_array_equal(img[..., 0], imgs[1])
    assert ds.meta["images"] == {"magic": 2051, "imgs": 3, "height": 28, "width": 28}  # MegEngine's keys
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte.gz"):
        MNIST(str(tmp_path), train=True, download=False)


def test_mnist_download_failure_names_url_and_path(tmp_path, monkeypatch):
    monkeypatch.setattr(MNIST, "url_path", "http://127.0.0.1:9/")  # discard port: refused at once
    with pytest.raises(OSError, match=r"127\.0\.0\.1:9/train-images.*" + str(tmp_path).replace("\\", "/")):
        MNIST(str(tmp_path), train=True, download=True)


def _cifar_batch(path, n, extra):
    data = np.zeros((n, 3 * 32 * 32), np.uint8)
    data[:, :1024] = 200  # red plane
    with open(path, "wb") as f:
        pickle.dump({b"data": data, **extra}, f)


def test_cifar10_from_archive_and_cifar100(tmp_path):
    d = tmp_path / "stage" / "cifar-10-batches-py"
    d.mkdir(parents=True)
    for i in range(1, 6):
        _cifar_batch(d / f"data_batch_{i}", 2, {b"labels": [i, 0]})
    _cifar_batch(d / "test_batch", 1, {b"labels": [3]})
    with open(d / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [b"airplane"]}, f)
    root = tmp_path / "c10"
    root.mkdir()
    with tarfile.open(root / "cifar-10-python.tar.gz", "w:gz") as t:
        t.add(d, arcname="cifar-10-batches-py")
    ds = CIFAR10(str(root), train=True, download=False)
    assert len(ds) == 10 and ds[2][1] == 2
    img = ds[0][0]
    assert img.shape == (32, 32, 3) and img[0, 0].tolist() == [0, 0, 200]  # BGR
    assert len(CIFAR10(str(root), train=False, download=False)) == 1
    assert ds.meta[b"label_names"] == [b"airplane"]
    with pytest.raises(FileNotFoundError, match="cifar-10-python.tar.gz"):
        CIFAR10(str(tmp_path / "nothing"), download=False)

    d100 = tmp_path / "c100" / "cifar-100-python"
    d100.mkdir(parents=True)
    _cifar_batch(d100 / "train", 2, {b"fine_labels": [5, 6], b"coarse_labels": [1, 2]})
    ds100 = CIFAR100(str(tmp_path / "c100"), train=True, download=False)
    assert len(ds100) == 2 and ds100[1][1:] == (6, 2)


def test_torch_transform_compose_on_dataset_samples(tmp_path):
    from megxla.data.transform import Compose, TorchTransformCompose, ToMode
    _png(str(tmp_path / "a" / "x.png"), _solid(4, 6, (255, 0, 0)))
    image, label = ImageFolder(str(tmp_path))[0]
    t = Compose([TorchTransformCompose([lambda im: im.resize((3, 2)), lambda im: im.convert("RGB")]),
                 ToMode("CHW")], order=("image", "image_category"))
    out, out_label = t.apply((image, label))
    assert out.shape == (3, 2, 3) and out[:, 0, 0].tolist() == [0, 0, 255] and out_label == label
    gray = TorchTransformCompose([lambda im: im.convert("L")]).apply(image)
    assert gray.shape == (4, 6, 1)
