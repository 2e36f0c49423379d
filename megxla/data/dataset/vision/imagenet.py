"""``ImageNet``: ILSVRC2012 classification, from extracted ``train`` / ``val`` folders or the raw archives."""
from __future__ import annotations

import os
import pickle
import shutil

from .folder import ImageFolder
from .utils import default_dataset_root, missing_files_error, safe_extract

__all__ = ["ImageNet"]


class ImageNet(ImageFolder):
    r"""ILSVRC2012 under ``root``: ``root/train/<wnid>/*.JPEG`` and ``root/val/<wnid>/*.JPEG``, read as an
    :class:`ImageFolder` (sample ``(image BGR uint8, label np.int32)``, labels in sorted-wnid order).

    If the split's folder is absent but the raw archives are in ``root`` (``ILSVRC2012_img_train.tar``,
    ``ILSVRC2012_img_val.tar``, ``ILSVRC2012_devkit_t12.tar.gz``), they are extracted first: the training
    archive holds one tar per class, the validation images are sorted into class folders using the devkit's
    ground truth (reading the devkit's ``meta.mat`` needs SciPy).

    Args:
        root: the ImageNet directory; default ``~/.cache/megengine/ImageNet`` (MegEngine's).
        train: the training split, else the validation split.
        kwargs: passed to :class:`ImageFolder` (``check_valid_func``, ``class_name``).

    Example:
        >>> import os, tempfile, cv2
        >>> from megxla.data.dataset import ImageNet
        >>> with tempfile.TemporaryDirectory() as root:
        ...     for wnid in ("n01440764", "n01443537"):  # one image per class
        ...         os.makedirs(os.path.join(root, "train", wnid))
        ...         _ = cv2.imwrite(os.path.join(root, "train", wnid, "a.JPEG"), np.zeros((4, 6, 3), "uint8"))
        ...     ds = ImageNet(root, train=True)
        ...     image, label = ds[1]
        >>> len(ds), image.shape, int(label)
        (2, (4, 6, 3), 1)
    """

    raw_file_meta = {
        "train": ("ILSVRC2012_img_train.tar", "1d675b47d978889d74fa0da5fadfb00e"),
        "val": ("ILSVRC2012_img_val.tar", "29b22e2961454d5413ddabcf34fc5622"),
        "devkit": ("ILSVRC2012_devkit_t12.tar.gz", "fa75699e90414af021442c21a62c3abf"),
    }
    default_train_dir = "train"
    default_val_dir = "val"
    default_devkit_dir = "ILSVRC2012_devkit_t12"

    def __init__(self, root: str = None, train: bool = True, **kwargs):
        root = os.path.expanduser(root) if root is not None else os.path.join(default_dataset_root(), "ImageNet")
        self.root = self._raw_root = root  # ImageFolder later sets root to the split folder
        # MegEngine extracts the devkit here, for either split; it is read only for the validation split's labels
        # and for ``meta``, so it is extracted when those need it
        self.devkit_dir = os.path.join(root, self.default_devkit_dir)
        self.train = train
        self.target_folder = os.path.join(root, self.default_train_dir if train else self.default_val_dir)
        if not os.path.isdir(self.target_folder):
            if not self.check_raw_file():
                needed = [self.raw_file_meta["train" if train else "val"][0]] + ([] if train else [
                    self.raw_file_meta["devkit"][0]])
                raise missing_files_error("ImageNet", root, [os.path.basename(self.target_folder) + "/"] + needed,
                                          "Give the extracted split folder or the raw archives")
            self._extract()
        super().__init__(self.target_folder, **kwargs)

    def check_raw_file(self) -> bool:
        """Whether the raw archives this split needs are in the ImageNet directory."""
        names = [self.raw_file_meta["train"][0]] if self.train else [self.raw_file_meta["val"][0],
                                                                      self.raw_file_meta["devkit"][0]]
        return all(os.path.isfile(os.path.join(self._raw_root, n)) for n in names)

    def _extract(self):
        tmp = self.target_folder + ".partial"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        if self.train:
            safe_extract(os.path.join(self._raw_root, self.raw_file_meta["train"][0]), tmp)
            for name in sorted(os.listdir(tmp)):
                if name.endswith(".tar"):
                    wnid = name[:-4]
                    safe_extract(os.path.join(tmp, name), os.path.join(tmp, wnid))
                    os.remove(os.path.join(tmp, name))
        else:
            safe_extract(os.path.join(self._raw_root, self.raw_file_meta["val"][0]), tmp)
            idx_to_wnid = self.meta[0]
            wnids = [idx_to_wnid[i] for i in self.valid_ground_truth]
            images = sorted(f for f in os.listdir(tmp) if os.path.isfile(os.path.join(tmp, f)))
            if len(images) != len(wnids):
                raise RuntimeError(f"ImageNet: {len(images)} validation images but {len(wnids)} ground-truth labels")
            for img, wnid in zip(images, wnids):
                os.makedirs(os.path.join(tmp, wnid), exist_ok=True)
                os.replace(os.path.join(tmp, img), os.path.join(tmp, wnid, img))
        os.replace(tmp, self.target_folder)  # the split appears only once complete

    def _devkit(self):
        if not os.path.isdir(self.devkit_dir):
            archive = os.path.join(self._raw_root, self.raw_file_meta["devkit"][0])
            if not os.path.isfile(archive):
                raise missing_files_error("ImageNet", self._raw_root, [self.default_devkit_dir, self.raw_file_meta[
                    "devkit"][0]])
            safe_extract(archive, self._raw_root)
        return self.devkit_dir

    @property
    def meta(self):
        """``(idx_to_wnid, wnid_to_classes)`` from the devkit's ``data/meta.mat`` (reading it needs SciPy), as
        MegEngine's: the 1,000 leaf synsets' ILSVRC2012 ids (1-1000) to their wnids, and the wnids to their class
        names. Cached in the devkit folder's ``meta.pkl``, which MegEngine reads and writes too."""
        cache = os.path.join(self._devkit(), "meta.pkl")
        if os.path.isfile(cache):
            with open(cache, "rb") as f:
                return pickle.load(f)
        try:
            import scipy.io as sio
        except ImportError:
            raise RuntimeError("ImageNet: reading the devkit's meta.mat needs SciPy (`pip install scipy`)") from None
        meta_path = os.path.join(self.devkit_dir, "data", "meta.mat")
        if not os.path.exists(meta_path):
            raise FileNotFoundError(f"meta file {meta_path} does not exist")
        synsets = sio.loadmat(meta_path, squeeze_me=True)["synsets"]
        leaves = [s for s in synsets if int(s["num_children"]) == 0]
        idx_to_wnid = {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in leaves}
        wnid_to_classes = {str(s["WNID"]): tuple(str(s["words"]).split(", ")) for s in leaves}
        with open(cache, "wb") as f:
            pickle.dump((idx_to_wnid, wnid_to_classes), f, protocol=4)
        return idx_to_wnid, wnid_to_classes

    @property
    def valid_ground_truth(self):
        """The ILSVRC2012 id (an int, a key of ``meta[0]``) of each validation image, in file-name order, from the
        devkit's ``data/ILSVRC2012_validation_ground_truth.txt``, as MegEngine's."""
        path = os.path.join(self._devkit(), "data", "ILSVRC2012_validation_ground_truth.txt")
        if not os.path.exists(path):
            raise FileNotFoundError(f"valid ground truth file {path} does not exist")
        with open(path) as f:
            return [int(line) for line in f if line.strip()]
