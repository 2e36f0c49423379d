"""File helpers shared by the vision datasets: image decoding in MegEngine's layout and the default root.

MegEngine decodes images with OpenCV: ``HWC`` ``uint8`` in **BGR** order (grayscale ``HW``). OpenCV is used
here when installed; otherwise Pillow decodes and the channels are reordered to BGR, so samples are the same
either way.
"""
from __future__ import annotations

import os

import numpy as np

IMG_EXT = (".jpg", ".png", ".jpeg", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def is_img(path: str) -> bool:
    """Whether ``path`` has an image file extension."""
    return str(path).lower().endswith(IMG_EXT)


def default_dataset_root() -> str:
    """``$XDG_CACHE_HOME/megengine`` (default ``~/.cache/megengine``): MegEngine's dataset directory, which holds
    one folder per dataset class (``MNIST``, ``CIFAR10``, ``ImageNet``), so files MegEngine downloaded are found."""
    return os.path.expanduser(os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "megengine"))


def imread(path: str, color: bool = True) -> np.ndarray:
    """Decode an image file: ``(H, W, 3)`` uint8 BGR when ``color``, else ``(H, W)`` uint8 grayscale.

    Raises:
        FileNotFoundError: the file does not exist.
        RuntimeError: no decoder (OpenCV or Pillow) is installed, or the file is not an image.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"image file not found: {path}")
    try:
        import cv2
    except ImportError:
        cv2 = None
    if cv2 is not None:
        img = cv2.imread(path, cv2.IMREAD_COLOR if color else cv2.IMREAD_GRAYSCALE)
        if img is None:
            raise RuntimeError(f"cannot decode image {path}")
        return img
    try:
        from PIL import Image
    except ImportError:
        raise RuntimeError(f"reading {path} needs an image decoder: `pip install pillow` (or opencv-python)") from None
    try:
        with Image.open(path) as im:
            if color:
                return np.ascontiguousarray(np.asarray(im.convert("RGB"), dtype=np.uint8)[:, :, ::-1])
            return np.asarray(im.convert("L"), dtype=np.uint8)
    except OSError as exc:
        raise RuntimeError(f"cannot decode image {path}: {exc}") from None


class DatasetFilesNotFoundError(FileNotFoundError, ValueError):
    """A dataset's files are not under its root (and ``download`` is off).

    Both a ``FileNotFoundError`` (what ImageNet raises in MegEngine) and a ``ValueError`` (what MegEngine's MNIST,
    CIFAR and PascalVOC raise: ``dir path/to/data/ does not exist``), so either ``except`` clause catches it.
    """


class DatasetRootNotFoundError(FileNotFoundError, RuntimeError):
    """A dataset's root directory does not exist: a ``FileNotFoundError``, and the ``RuntimeError`` MegEngine's
    PascalVOC and Cityscapes raise (``Dataset not found or corrupted.``), so either ``except`` clause catches it."""


def missing_files_error(name, root, files, hint=""):
    """The error a dataset raises when the files it reads are not under ``root``."""
    listed = ", ".join(files)
    return DatasetFilesNotFoundError(f"{name}: {listed} not found under {root!r}{'. ' + hint if hint else ''}")


def safe_extract(file_path: str, dst: str):
    """Extract the tar archive ``file_path`` into ``dst``; members that would land outside ``dst`` (absolute
    paths, ``..``, links) are refused, as Python's ``"data"`` extraction filter does."""
    import tarfile
    with tarfile.open(file_path) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dst, filter="data")
            return
        root = os.path.realpath(dst)
        for m in tar.getmembers():
            target = os.path.realpath(os.path.join(dst, m.name))
            if not (target == root or target.startswith(root + os.sep)) or m.issym() or m.islnk():
                raise RuntimeError(f"refusing to extract {m.name!r} from {file_path}: it leaves {dst}")
        tar.extractall(dst)
