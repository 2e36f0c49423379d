"""``megengine.data.transform.vision.transform``: vision transforms on HWC NumPy images (re-exported by
``megengine.data.transform.vision``).

Images are ``H x W x C`` arrays (2-D ``H x W`` also works, where MegEngine's raise, except in ``ToMode``, which
reads axis 2 as MegEngine's) with channels in BGR order, as MegEngine reads them with OpenCV. Each transform
rewrites the elements of a sample named by ``order``: ``"image"``, ``"mask"``, ``"boxes"``
(``N x 4`` as x0, y0, x1, y1), ``"keypoints"`` (``... x 3`` as x, y,
visibility), ``"coords"`` (``N x 2`` as x, y) and ``"polygons"`` (a list of
instances, each a list of ``K x 2`` polygons); names ending in
``category`` or ``info`` pass through untouched.

Resizing, padding, grey conversion and the hue rotation call OpenCV (``cv2``), as MegEngine's transforms do,
so their outputs are MegEngine's to the bit (OpenCV's fixed-point uint8 arithmetic included) and every
``cv2.INTER_*`` interpolation works. Without OpenCV installed a NumPy fallback computes the same formulas in
floating point: ``interpolation`` is then limited to nearest (0) and bilinear (1), and uint8 results may differ
from OpenCV's by one grey level.

Random transforms draw from the global ``np.random`` stream, so
``np.random.seed`` makes them reproducible.
"""
import collections.abc
import math
import random
from typing import List, Sequence, Tuple

import numpy as np

from ..meta_transform import Transform

try:  # MegEngine's transforms are written on OpenCV; so are these when it is installed (it is a dependency)
    import cv2
except ImportError:  # pragma: no cover - the NumPy fallback below
    cv2 = None

# Where MegEngine's transform fails inside OpenCV (a resize to an empty size, a grey level of a one-channel image),
# these check first and raise this: a ValueError that is also OpenCV's ``cv2.error``, so that code catching either
# catches it (data fuzz: MegEngine's ``cv2.error`` against megxla's ValueError)
OpenCVError = type("error", (ValueError, cv2.error), {"__module__": __name__}) if cv2 is not None else ValueError

__all__ = [
    "TorchTransformCompose",
    "VisionTransform",
    "Compose",
    "ToMode",
    "Normalize",
    "GaussianNoise",
    "Pad",
    "Resize",
    "ShortestEdgeResize",
    "RandomResize",
    "RandomCrop",
    "RandomResizedCrop",
    "CenterCrop",
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
    "BrightnessTransform",
    "ContrastTransform",
    "SaturationTransform",
    "HueTransform",
    "ColorJitter",
    "Lighting",
]

# OpenCV's enum values, so code written for MegEngine (cv2.INTER_*) still works
_INTER_NEAREST = 0
_INTER_LINEAR = 1


class UnsupportedOrderError(ValueError, NotImplementedError):
    """A name in a transform's ``order`` (or a ``sample_style``) it cannot handle: a ``ValueError``, and the
    ``NotImplementedError`` MegEngine's transforms raise."""


class TransformArgumentError(ValueError, AssertionError):
    """A bad argument MegEngine's transforms ``assert`` (``ToMode``'s mode, ``RandomResizedCrop``'s ranges, a
    ``CenterCrop`` bigger than the image): a ``ValueError``, and MegEngine's ``AssertionError``."""


class ShuffleIndexError(ValueError, IndexError):
    """A ``Compose`` ``shuffle_indices`` entry that is no 1-based position in ``transforms``: a ``ValueError``, and
    the ``IndexError`` MegEngine's ``Compose`` raises (when it applies the chain) for one past the end."""


class MissingApplyError(NotImplementedError, TypeError):
    """A transform asked to rewrite an element it has no method for (``VisionTransform``'s own
    ``_apply_image`` / ``_apply_coords`` / ``_apply_mask``): MegEngine's ``NotImplementedError``, and a
    ``TypeError``."""


# ---------------------------------------------------------------------------
# NumPy image helpers (what MegEngine delegates to cv2)
# ---------------------------------------------------------------------------


def _cast_like(result, dtype):
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.floor(result + 0.5), info.min, info.max).astype(dtype)
    return result.astype(dtype, copy=False)


def _keepdims(out, like):
    # cv2 drops a trailing single channel; MegEngine's wrap_keepdims puts it back
    return out[:, :, None] if out.ndim == 2 and like.ndim == 3 else out


def _resize(image, size, interpolation):
    """Resize the first two axes of ``image`` to ``size = (th, tw)`` (``cv2.resize`` as MegEngine)."""
    # MegEngine: a random one of several modes, drawn before ``cv2.resize`` looks at the size -- a resize to an empty
    # size fails after the draw, so the program's ``random`` stream goes on as MegEngine's (megengine_data_fuzz seed 9)
    if len(size) != 2:  # (MegEngine's F.resize checks this before it draws the interpolation)
        raise ValueError("resize needs (h, w), but got {}".format(size))
    if isinstance(interpolation, collections.abc.Sequence):
        interpolation = random.choice(interpolation)
    th, tw = int(size[0]), int(size[1])
    if th <= 0 or tw <= 0:
        raise OpenCVError("output size should be positive, but got {}".format(size))
    image = np.asarray(image)
    if cv2 is not None and image.ndim in (2, 3):  # float64 too: MegEngine's cubic / area / Lanczos of it work
        return _keepdims(cv2.resize(image, (tw, th), interpolation=interpolation), image)
    h, w = image.shape[:2]
    if interpolation == _INTER_NEAREST:
        # cv2 INTER_NEAREST maps dst pixel d to floor(d * src / dst), no half-pixel shift
        ys = np.minimum((np.arange(th) * (h / th)).astype(np.int64), h - 1)
        xs = np.minimum((np.arange(tw) * (w / tw)).astype(np.int64), w - 1)
        return image[ys][:, xs]
    if interpolation != _INTER_LINEAR:
        raise ValueError(
            "interpolation={} is not supported; use 0 (nearest) or 1 (bilinear)".format(
                interpolation
            )
        )

    def taps(out_len, in_len):
        # cv2 INTER_LINEAR: half-pixel centres, edge taps clamped
        f = (np.arange(out_len) + 0.5) * (in_len / out_len) - 0.5
        i0 = np.floor(f).astype(np.int64)
        frac = f - i0
        frac[i0 < 0] = 0.0
        i0[i0 < 0] = 0
        last = i0 >= in_len - 1
        frac[last] = 0.0
        i0[last] = in_len - 1
        i1 = np.minimum(i0 + 1, in_len - 1)
        return i0, i1, frac

    y0, y1, fy = taps(th, h)
    x0, x1, fx = taps(tw, w)
    work = np.float64 if image.dtype == np.float64 else np.float32
    img = image.astype(work, copy=False)
    extra = (1,) * (image.ndim - 2)
    fy = fy.astype(work).reshape((th, 1) + extra)
    fx = fx.astype(work).reshape((1, tw) + extra)
    rows = img[y0] * (1 - fy) + img[y1] * fy
    out = rows[:, x0] * (1 - fx) + rows[:, x1] * fx
    return _cast_like(out, image.dtype)


def _pad(image, size, value):
    """Constant-pad ``image`` by ``size = (top, bottom, left, right)``."""
    top, bottom, left, right = (int(s) for s in size)
    image = np.asarray(image)
    if np.array(value).dtype == float:  # MegEngine: a float fill value makes the image float32
        image = image.astype(np.float32)
    if cv2 is not None and image.ndim in (2, 3) and (image.ndim == 2 or image.shape[2] <= 4):
        fill = value if not isinstance(value, np.ndarray) else value.tolist()
        out = cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=fill)
        return _keepdims(out, image)
    h, w = image.shape[:2]
    out = np.empty((h + top + bottom, w + left + right) + image.shape[2:], image.dtype)
    if isinstance(value, collections.abc.Sequence) or isinstance(value, np.ndarray):
        value = np.asarray(value).reshape(-1)
        if image.ndim == 2:
            fill = value[0]
        else:
            # like cv2's Scalar: use the first C entries, missing ones are 0
            channels = image.shape[-1]
            fill = np.zeros(channels, dtype=np.float64)
            n = min(channels, value.size)
            fill[:n] = value[:n]
    else:
        fill = value
    out[...] = fill
    out[top : top + h, left : left + w] = image
    return out


def _to_gray(image):
    """BGR -> grey with cv2's weights, keeping a trailing channel axis (``cv2.cvtColor`` as MegEngine)."""
    image = np.asarray(image, dtype=np.float32)
    if image.ndim != 3 or image.shape[2] not in (3, 4):  # (OpenCV's BGR2GRAY: 3 or 4 channels)
        raise OpenCVError(f"a grey level needs an (H, W, 3) BGR image (or BGRA), but got shape {image.shape}")
    if cv2 is not None:
        return cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)[..., None]
    gray = image[..., 0] * 0.114 + image[..., 1] * 0.587 + image[..., 2] * 0.299
    return gray[..., None]


def _bgr_shift_hue(image, delta):
    """Rotate the hue of a BGR uint8 image by ``delta`` turns (1.0 = 360 deg)."""
    x = image.astype(np.float64) / 255.0
    b, g, r = x[..., 0], x[..., 1], x[..., 2]
    v = x[..., :3].max(axis=-1)
    c = v - x[..., :3].min(axis=-1)
    s = np.where(v > 0, c / np.where(v > 0, v, 1), 0.0)
    safe_c = np.where(c > 0, c, 1)
    h = np.where(
        v == r,
        ((g - b) / safe_c) % 6,
        np.where(v == g, (b - r) / safe_c + 2, (r - g) / safe_c + 4),
    )
    h = np.where(c > 0, h, 0.0)
    h = ((h / 6.0 + delta) % 1.0) * 6.0
    i = np.floor(h).astype(np.int64) % 6
    f = h - np.floor(h)
    p = v * (1 - s)
    q = v * (1 - s * f)
    t = v * (1 - s * (1 - f))
    r2 = np.choose(i, [v, q, p, p, t, v])
    g2 = np.choose(i, [t, v, v, q, p, p])
    b2 = np.choose(i, [p, p, t, v, v, q])
    out = np.stack([b2, g2, r2], axis=-1) * 255.0
    return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)


def _float_copy(coords):
    # coordinates get scaled and shifted in place; never touch the caller's
    # array and never truncate a scaled int coordinate
    arr = np.array(coords)
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float32)
    return arr


# ---------------------------------------------------------------------------
# Base class and composition
# ---------------------------------------------------------------------------


class VisionTransform(Transform):
    r"""Base class of vision transforms, dispatching on the sample's ``order``.

    ``apply`` walks the sample alongside ``order`` and calls
    ``_apply_image``, ``_apply_mask``, ``_apply_boxes``, ``_apply_keypoints``,
    ``_apply_polygons`` or ``_apply_coords`` for the element of that name; subclasses override
    those. Elements beyond ``len(order)`` pass through.

    Args:
        order: names of the sample's elements, e.g.
            ``("image", "boxes", "boxes_category")``. Default: ``("image",)``.

    Examples:
        >>> import numpy as np
        >>> class Invert(VisionTransform):
        ...     def _apply_image(self, image):
        ...         return 255 - image
        >>> img = np.zeros((1, 1, 3), np.uint8)
        >>> out, label = Invert(order=("image", "image_category")).apply((img, 3))
        >>> out.ravel().tolist(), label
        ([255, 255, 255], 3)
    """

    def __init__(self, order=None):
        super().__init__()
        if order is None:
            order = ("image",)
        elif not isinstance(order, collections.abc.Sequence):
            raise ValueError(
                "order should be a sequence, but got order={}".format(order)
            )
        elif isinstance(order, str) and order:
            # MegEngine takes a string as a sequence of one-letter names and refuses its first letter
            raise UnsupportedOrderError(
                "{} is unsupported data type (order should be a sequence of names, "
                "but got order={!r})".format(order[0], order)
            )
        for k in order:
            if k in ("batch",):
                raise ValueError("{} is invalid data type".format(k))
            if k.endswith("category") or k.endswith("info"):
                # labels and metadata are carried along untouched
                continue
            if self._get_apply(k) is None:
                raise UnsupportedOrderError("{} is unsupported data type".format(k))
        self.order = order

    def apply_batch(self, inputs: Sequence[Tuple]):
        r"""Apply the transform to every sample of a batch.

        Args:
            inputs: a sequence of samples.

        Returns:
            a tuple of transformed samples.
        """
        return tuple(self.apply(input) for input in inputs)

    def apply(self, input: Tuple):
        r"""Apply the transform to one sample laid out as ``order``.

        Args:
            input: a tuple of elements, or a bare image when ``order`` has one
                element.

        Returns:
            the transformed sample (a bare element if the sample has one).
        """
        if not isinstance(input, tuple):
            input = (input,)
        output = []
        for i in range(min(len(input), len(self.order))):
            key = self.order[i]
            apply_func = self._get_apply(key)
            if apply_func is None:
                output.append(input[i])
            elif key == "coords":
                output.append(apply_func(_float_copy(input[i])))
            else:
                output.append(apply_func(input[i]))
        if len(input) > len(self.order):
            output.extend(input[len(self.order) :])
        if len(output) == 1:
            return output[0]
        return tuple(output)

    def _get_apply(self, key):
        if key.endswith("category") or key.endswith("info"):
            return None
        return getattr(self, "_apply_{}".format(key), None)

    def _get_image(self, input: Tuple):
        if not isinstance(input, tuple):
            input = (input,)
        return input[self.order.index("image")]

    def _apply_image(self, image):
        raise MissingApplyError(f"{type(self).__name__} does not define this method; a subclass must")

    def _apply_coords(self, coords):
        raise MissingApplyError(f"{type(self).__name__} does not define this method; a subclass must")

    def _apply_boxes(self, boxes):
        # transform the four corners and take their bounding box, which keeps
        # boxes axis-aligned under flips and crops
        idxs = np.array([(0, 1), (2, 1), (0, 3), (2, 3)]).flatten()
        coords = _float_copy(np.asarray(boxes).reshape(-1, 4)[:, idxs].reshape(-1, 2))
        coords = self._apply_coords(coords).reshape((-1, 4, 2))
        minxy = coords.min(axis=1)
        maxxy = coords.max(axis=1)
        return np.concatenate((minxy, maxxy), axis=1)

    def _apply_mask(self, mask):
        raise MissingApplyError(f"{type(self).__name__} does not define this method; a subclass must")

    def _apply_keypoints(self, keypoints):
        keypoints = _float_copy(keypoints)
        coords, visibility = keypoints[..., :2], keypoints[..., 2:]
        trans_coords = [self._apply_coords(p) for p in coords]
        return np.concatenate((trans_coords, visibility), axis=-1)

    def _apply_polygons(self, polygons):
        # a sequence of instances, each a sequence of (K, 2) polygons: every polygon's points move as coordinates
        return [[self._apply_coords(_float_copy(p)) for p in instance] for instance in polygons]


_NO_TRANSFORMS = []  # Compose's default, never modified (its signature shows MegEngine's ``[]``)


class Compose(VisionTransform):
    r"""Chain several vision transforms, optionally in a random order.

    Args:
        transforms: the transforms to apply in turn. Their ``order`` is
            overwritten with this ``Compose``'s.
        batch_compose: apply each transform to the whole batch before the
            next (``apply_batch``) instead of the whole chain per sample.
            Default: False.
        shuffle_indices: groups of 1-based positions in ``transforms`` whose
            relative order is re-drawn for every sample, e.g. ``[(1, 3)]``.
            Not allowed with ``batch_compose``. Default: None.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform.

    Examples:
        >>> import numpy as np
        >>> t = Compose([CenterCrop(2), ToMode("CHW")])
        >>> t.apply(np.zeros((4, 4, 3), np.uint8)).shape
        (3, 2, 2)
    """

    def __init__(
        self,
        transforms: List[VisionTransform] = _NO_TRANSFORMS,
        batch_compose: bool = False,
        shuffle_indices: List[Tuple] = None,
        *,
        order=None
    ):
        super().__init__(order)
        # MegEngine keeps the caller's list (appending to it later adds a step); a one-shot iterable is read once,
        # and each default-built Compose gets its own list (MegEngine's share the default ``[]``)
        if transforms is _NO_TRANSFORMS:
            transforms = []
        elif not isinstance(transforms, collections.abc.Sequence):
            transforms = list(transforms)
        self.transforms = transforms
        self._set_order()
        if batch_compose and shuffle_indices is not None:
            raise ValueError(
                "Do not support shuffle when apply transforms along the whole batch"
            )
        self.batch_compose = batch_compose
        if shuffle_indices is not None:
            shuffle_indices = [tuple(x - 1 for x in idx) for idx in shuffle_indices]
            for idx in shuffle_indices:
                for x in idx:
                    if not 0 <= x < len(self.transforms):
                        raise ShuffleIndexError(
                            "shuffle_indices are 1-based positions in transforms, "
                            "got {}".format(x + 1)
                        )
        self.shuffle_indices = shuffle_indices

    def _set_order(self):
        for t in self.transforms:
            t.order = self.order
            if isinstance(t, Compose):
                t._set_order()

    def apply_batch(self, inputs: Sequence[Tuple]):
        r"""Apply the chain to a batch.

        Args:
            inputs: a sequence of samples.

        Returns:
            a tuple of transformed samples.
        """
        if self.batch_compose:
            for t in self.transforms:
                inputs = t.apply_batch(inputs)
            return inputs
        return super().apply_batch(inputs)

    def apply(self, input: Tuple):
        r"""Apply the chain to one sample.

        Args:
            input: one sample.

        Returns:
            the transformed sample.
        """
        for t in self._shuffle():
            input = t.apply(input)
        return input

    def _shuffle(self):
        if self.shuffle_indices is None:
            return self.transforms
        source_idx = list(range(len(self.transforms)))
        for idx in self.shuffle_indices:
            shuffled = np.random.permutation(idx).tolist()
            for src, dst in zip(idx, shuffled):
                source_idx[src] = dst
        return [self.transforms[i] for i in source_idx]


# ---------------------------------------------------------------------------
# Layout and value transforms
# ---------------------------------------------------------------------------


class ToMode(VisionTransform):
    r"""Change the image layout from HWC to CHW.

    Args:
        mode: target layout; only ``"CHW"`` is supported. Default: ``"CHW"``.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform producing contiguous CHW images and masks.

    Examples:
        >>> import numpy as np
        >>> ToMode().apply(np.zeros((4, 5, 3))).shape
        (3, 4, 5)
    """

    def __init__(self, mode="CHW", *, order=None):
        super().__init__(order)
        if mode not in ("CHW",):
            raise TransformArgumentError("unsupported mode: {}".format(mode))
        self.mode = mode

    def _apply_image(self, image):
        if self.mode == "CHW":
            # MegEngine's axis 2 (an (H, W) image raises NumPy's AxisError rather than coming back transposed)
            return np.ascontiguousarray(np.rollaxis(image, 2))
        return image

    def _apply_coords(self, coords):
        return coords

    def _apply_mask(self, mask):
        if self.mode == "CHW":
            return np.ascontiguousarray(np.rollaxis(mask, 2))
        return mask


def _legacy_operand(image, value):
    # MegEngine runs on NumPy 1, whose value-based casting keeps a float16 image float16 against a 0-d float32
    # operand whose value fits float16 (cast to float16 first); NumPy 2 promotes such an image to float32
    if image.dtype == np.float16 and value.ndim == 0 and np.min_scalar_type(value) == np.float16:
        return value.astype(np.float16)
    return value


class Normalize(VisionTransform):
    r"""Normalize an image per channel: ``(image - mean) / std``.

    Args:
        mean: per-channel mean (scalar or sequence). Default: 0.0.
        std: per-channel standard deviation (scalar or sequence). Default: 1.0.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform computing in NumPy's types with float32 ``mean`` and ``std``, as MegEngine's: float32 images from
        uint8 ones, float64 from float64.

    Examples:
        >>> import numpy as np
        >>> img = np.full((1, 1, 3), 10, np.uint8)
        >>> Normalize(mean=[2, 4, 6], std=2).apply(img).ravel().tolist()
        [4.0, 3.0, 2.0]
    """

    def __init__(self, mean=0.0, std=1.0, *, order=None):
        super().__init__(order)
        self.mean = np.array(mean, dtype=np.float32)
        self.std = np.array(std, dtype=np.float32)

    def _apply_image(self, image):
        if getattr(image, "dtype", None) == np.float16:
            image = image - _legacy_operand(image, self.mean)
            return image / _legacy_operand(image, self.std)
        return (image - self.mean) / self.std

    def _apply_coords(self, coords):
        return coords

    def _apply_mask(self, mask):
        return mask


class GaussianNoise(VisionTransform):
    r"""Add Gaussian noise, in units of 255, to an image and clip to [0, 255].

    The noise is ``np.random.normal(mean, std, image.shape) * 255``.

    Args:
        mean: mean of the noise. Default: 0.0.
        std: standard deviation of the noise. Default: 1.0.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform keeping the image dtype.

    Examples:
        >>> import numpy as np
        >>> int(GaussianNoise(std=0.0).apply(np.full((2, 2, 3), 7, np.uint8)).max())
        7
    """

    def __init__(self, mean=0.0, std=1.0, *, order=None):
        super().__init__(order)
        self.mean = np.array(mean, dtype=np.float32)
        self.std = np.array(std, dtype=np.float32)

    def _apply_image(self, image):
        dtype = image.dtype
        noise = np.random.normal(self.mean, self.std, image.shape) * 255
        image = image + noise.astype(np.float32)
        return np.clip(image, 0, 255).astype(dtype)

    def _apply_coords(self, coords):
        return coords

    def _apply_mask(self, mask):
        return mask


class Pad(VisionTransform):
    r"""Pad an image and its mask with a constant border.

    Args:
        size: border width; an int for all sides, ``(bottom, right)`` (only
            the bottom and right sides, as MegEngine) or ``(top, bottom, left,
            right)``. Default: 0.
        value: fill of the image, a scalar or one value per channel.
            Default: 0.
        mask_value: fill of the mask. Default: 0.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform; boxes and coordinates are shifted by ``(left, top)``.

    Examples:
        >>> import numpy as np
        >>> Pad((1, 0, 2, 0), value=9).apply(np.zeros((1, 1, 1), np.uint8))[..., 0].tolist()
        [[9, 9, 9], [9, 9, 0]]
    """

    def __init__(self, size=0, value=0, mask_value=0, *, order=None):
        super().__init__(order)
        if isinstance(size, int):
            size = (size, size, size, size)
        elif isinstance(size, collections.abc.Sequence) and len(size) == 2:
            size = (0, size[0], 0, size[1])  # MegEngine: two sizes pad the bottom and the right
        elif not (isinstance(size, collections.abc.Sequence) and len(size) == 4):
            raise ValueError(
                "size should be a list/tuple which contains "
                "(top, down, left, right) four pad sizes."
            )
        self.size = size
        self.value = value
        if not isinstance(mask_value, int):
            raise ValueError(
                "mask_value should be a positive integer, "
                "but got mask_value={}".format(mask_value)
            )
        self.mask_value = mask_value

    def _apply_image(self, image):
        return _pad(image, self.size, self.value)

    def _apply_coords(self, coords):
        coords[:, 0] += self.size[2]
        coords[:, 1] += self.size[0]
        return coords

    def _apply_mask(self, mask):
        return _pad(mask, self.size, self.mask_value)


# ---------------------------------------------------------------------------
# Geometric transforms
# ---------------------------------------------------------------------------


class _ResizeBase(VisionTransform):
    """Shared body of the resize family: subclasses pick ``_get_shape``."""

    def apply(self, input: Tuple):
        self._shape_info = self._get_shape(self._get_image(input))
        return super().apply(input)

    def _apply_image(self, image):
        h, w, th, tw = self._shape_info
        if h == th and w == tw:
            return image
        return _resize(image, (th, tw), self.interpolation)

    def _apply_coords(self, coords):
        h, w, th, tw = self._shape_info
        if h == th and w == tw:
            return coords
        coords[:, 0] = coords[:, 0] * (tw / w)
        coords[:, 1] = coords[:, 1] * (th / h)
        return coords

    def _apply_mask(self, mask):
        h, w, th, tw = self._shape_info
        if h == th and w == tw:
            return mask
        # masks hold labels: interpolating would invent classes
        return _resize(mask, (th, tw), _INTER_NEAREST)

    def _get_shape(self, image):
        raise TypeError(f"{type(self).__name__} does not define this method; a subclass must")


class Resize(_ResizeBase):
    r"""Resize an image to a fixed size, or its shorter edge to a length.

    Args:
        output_size: ``(height, width)``, or an int giving the length of the
            shorter edge (the other edge keeps the aspect ratio, truncated).
        interpolation: 0 for nearest, 1 for bilinear (OpenCV's
            ``INTER_NEAREST`` / ``INTER_LINEAR``). Default: 1.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform; masks always use nearest interpolation.

    Examples:
        >>> import numpy as np
        >>> Resize((4, 6)).apply(np.zeros((2, 3, 3), np.uint8)).shape
        (4, 6, 3)
        >>> Resize(4).apply(np.zeros((2, 3, 3), np.uint8)).shape
        (4, 6, 3)
    """

    def __init__(self, output_size, interpolation=1, *, order=None):
        super().__init__(order)
        self.output_size = output_size
        self.interpolation = interpolation

    def _get_shape(self, image):
        h, w = image.shape[:2]
        if isinstance(self.output_size, int):
            if min(h, w) == self.output_size:
                return h, w, h, w
            if h < w:
                th = self.output_size
                tw = int(self.output_size * w / h)
            else:
                tw = self.output_size
                th = int(self.output_size * h / w)
            return h, w, th, tw
        th, tw = self.output_size
        return h, w, th, tw


class ShortestEdgeResize(_ResizeBase):
    r"""Resize so the shorter edge has a random length, capping the longer edge.

    Args:
        min_size: candidate shorter-edge lengths: ``(lo, hi)`` range or a
            sequence to choose from (see ``sample_style``); an int fixes it.
        max_size: upper bound of the longer edge after resizing.
        sample_style: ``"range"`` draws uniformly from ``[lo, hi]``;
            ``"choice"`` picks one of ``min_size``. Default: ``"range"``.
        interpolation: 0 nearest or 1 bilinear. Default: 1.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform.

    Examples:
        >>> import numpy as np
        >>> ShortestEdgeResize(4, 6).apply(np.zeros((2, 4, 3), np.uint8)).shape
        (3, 6, 3)
    """

    def __init__(
        self, min_size, max_size, sample_style="range", interpolation=1, *, order=None
    ):
        super().__init__(order)
        if sample_style not in ("range", "choice"):
            raise UnsupportedOrderError(
                "{} is unsupported sample style".format(sample_style)
            )
        self.sample_style = sample_style
        if isinstance(min_size, int):
            min_size = (min_size, min_size)
        self.min_size = min_size
        self.max_size = max_size
        self.interpolation = interpolation

    def _get_shape(self, image):
        h, w = image.shape[:2]
        if self.sample_style == "range":
            size = np.random.randint(self.min_size[0], self.min_size[1] + 1)
        else:
            size = np.random.choice(self.min_size)
        scale = size / min(h, w)
        if h < w:
            th, tw = size, scale * w
        else:
            th, tw = scale * h, size
        if max(th, tw) > self.max_size:
            scale = self.max_size / max(th, tw)
            th = th * scale
            tw = tw * scale
        return h, w, int(round(th)), int(round(tw))


class RandomResize(_ResizeBase):
    r"""Resize by a random factor drawn uniformly from ``scale_range``.

    Args:
        scale_range: ``(low, high)`` of the scale factor.
        interpolation: 0 nearest or 1 bilinear. Default: 1.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform.

    Examples:
        >>> import numpy as np
        >>> RandomResize((2.0, 2.0)).apply(np.zeros((2, 3, 3), np.uint8)).shape
        (4, 6, 3)
    """

    def __init__(self, scale_range, interpolation=1, *, order=None):
        super().__init__(order)
        self.scale_range = scale_range
        self.interpolation = interpolation

    def _get_shape(self, image):
        h, w = image.shape[:2]
        scale = np.random.uniform(*self.scale_range)
        return h, w, int(round(h * scale)), int(round(w * scale))


class RandomCrop(VisionTransform):
    r"""Pad, then crop a random window of ``output_size``.

    The window's left edge is drawn first, then its top edge, each with
    ``np.random.randint``. An image still smaller than ``output_size``
    after the padding is padded at the bottom / right with
    ``padding_value`` (``padding_maskvalue`` for masks), as MegEngine does.

    Args:
        output_size: ``(height, width)`` of the crop, or an int for a square.
        padding_size: padding applied first, as :class:`Pad`'s ``size``.
            Default: 0.
        padding_value: image fill of the padding. Default: ``[0, 0, 0]``.
        padding_maskvalue: mask fill of the padding. Default: 0.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform.

    Examples:
        >>> import numpy as np
        >>> RandomCrop(2, padding_size=1).apply(np.zeros((3, 3, 3), np.uint8)).shape
        (2, 2, 3)
    """

    def __init__(
        self,
        output_size,
        padding_size=0,
        padding_value=[0, 0, 0],
        padding_maskvalue=0,
        *,
        order=None
    ):
        super().__init__(order)
        if isinstance(output_size, int):
            self.output_size = (output_size, output_size)
        else:
            self.output_size = output_size  # as given (a list stays a list), as MegEngine
        self.pad = Pad(
            padding_size, padding_value, padding_maskvalue, order=self.order
        )
        self.padding_value = padding_value
        self.padding_maskvalue = padding_maskvalue

    def apply(self, input):
        # Compose may have replaced self.order after construction
        self.pad.order = self.order
        input = self.pad.apply(input)
        self._h, self._w = self._get_image(input).shape[:2]
        # (unpacked before the draws, as MegEngine: a bad output_size fails with the random stream untouched)
        self._th, self._tw = self.output_size
        self._x = np.random.randint(0, max(0, self._w - self._tw) + 1)
        self._y = np.random.randint(0, max(0, self._h - self._th) + 1)
        return super().apply(input)

    def _fit(self, image, value):
        # an input still smaller than the crop after padding is padded at the bottom / right (MegEngine)
        th, tw = self._th, self._tw
        if th > self._h:
            image = _pad(image, (0, th - self._h, 0, 0), value)
        if tw > self._w:
            image = _pad(image, (0, 0, 0, tw - self._w), value)
        return image[self._y : self._y + th, self._x : self._x + tw]

    def _apply_image(self, image):
        return self._fit(image, self.padding_value)

    def _apply_coords(self, coords):
        coords[:, 0] -= self._x
        coords[:, 1] -= self._y
        return coords

    def _apply_mask(self, mask):
        return self._fit(mask, self.padding_maskvalue)


class RandomResizedCrop(VisionTransform):
    r"""Crop a random area and aspect ratio, then resize to ``output_size``.

    Up to 10 attempts draw an area fraction from ``scale_range`` and a
    log-uniform aspect ratio from ``ratio_range``; if none fits, the central
    crop with the closest allowed ratio is used.

    Args:
        output_size: ``(height, width)`` of the result, or an int.
        scale_range: range of the crop's area relative to the image.
            Default: ``(0.08, 1.0)``.
        ratio_range: range of the crop's width / height.
            Default: ``(3/4, 4/3)``.
        interpolation: 0 nearest or 1 bilinear. Default: 1.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform.

    Examples:
        >>> import numpy as np
        >>> RandomResizedCrop(4).apply(np.zeros((8, 8, 3), np.uint8)).shape
        (4, 4, 3)
    """

    def __init__(
        self,
        output_size,
        scale_range=(0.08, 1.0),
        ratio_range=(3.0 / 4, 4.0 / 3),
        interpolation=1,
        *,
        order=None
    ):
        super().__init__(order)
        if isinstance(output_size, int):
            self.output_size = (output_size, output_size)
        else:
            self.output_size = output_size  # as given (a list stays a list), as MegEngine
        if not scale_range[0] <= scale_range[1]:
            raise TransformArgumentError("scale_range should be of kind (min, max)")
        if not ratio_range[0] <= ratio_range[1]:
            raise TransformArgumentError("ratio_range should be of kind (min, max)")
        self.scale_range = scale_range
        self.ratio_range = ratio_range
        self.interpolation = interpolation

    def apply(self, input: Tuple):
        self._coord_info = self._get_coord(self._get_image(input))
        return super().apply(input)

    def _apply_image(self, image):
        x, y, w, h = self._coord_info
        cropped = image[y : y + h, x : x + w]
        return _resize(cropped, self.output_size, self.interpolation)

    def _apply_coords(self, coords):
        x, y, w, h = self._coord_info
        coords[:, 0] = (coords[:, 0] - x) * self.output_size[1] / w
        coords[:, 1] = (coords[:, 1] - y) * self.output_size[0] / h
        return coords

    def _apply_mask(self, mask):
        x, y, w, h = self._coord_info
        cropped = mask[y : y + h, x : x + w]
        return _resize(cropped, self.output_size, _INTER_NEAREST)

    def _get_coord(self, image, attempts=10):
        height, width = image.shape[:2]
        area = height * width
        for _ in range(attempts):
            target_area = np.random.uniform(*self.scale_range) * area
            # (after the first draw, as MegEngine: a ratio <= 0 fails with the random stream one draw on)
            log_ratio = tuple(math.log(x) for x in self.ratio_range)
            aspect_ratio = math.exp(np.random.uniform(*log_ratio))
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                x = np.random.randint(0, width - w + 1)
                y = np.random.randint(0, height - h + 1)
                return x, y, w, h
        in_ratio = float(width) / float(height)
        if in_ratio < min(self.ratio_range):
            w = width
            h = int(round(w / min(self.ratio_range)))
        elif in_ratio > max(self.ratio_range):
            h = height
            w = int(round(h * max(self.ratio_range)))
        else:
            w, h = width, height
        return (width - w) // 2, (height - h) // 2, w, h


class CenterCrop(VisionTransform):
    r"""Crop the central window of ``output_size``.

    Args:
        output_size: ``(height, width)`` of the crop, or an int for a square.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform.

    Examples:
        >>> import numpy as np
        >>> img = np.arange(16).reshape(4, 4, 1)
        >>> CenterCrop(2).apply(img)[..., 0].tolist()
        [[5, 6], [9, 10]]
    """

    def __init__(self, output_size, *, order=None):
        super().__init__(order)
        if isinstance(output_size, int):
            self.output_size = (output_size, output_size)
        else:
            self.output_size = output_size  # as given (a list stays a list), as MegEngine

    def apply(self, input: Tuple):
        self._coord_info = self._get_coord(self._get_image(input))
        return super().apply(input)

    def _apply_image(self, image):
        x, y = self._coord_info
        th, tw = self.output_size
        return image[y : y + th, x : x + tw]

    def _apply_coords(self, coords):
        x, y = self._coord_info
        coords[:, 0] -= x
        coords[:, 1] -= y
        return coords

    def _apply_mask(self, mask):
        x, y = self._coord_info
        th, tw = self.output_size
        return mask[y : y + th, x : x + tw]

    def _get_coord(self, image):
        th, tw = self.output_size
        h, w = image.shape[:2]
        if th > h or tw > w:
            raise TransformArgumentError(
                "output size {} is bigger than image size {}".format(
                    self.output_size, (h, w)
                )
            )
        x = int(round((w - tw) / 2.0))
        y = int(round((h - th) / 2.0))
        return x, y


class RandomHorizontalFlip(VisionTransform):
    r"""Mirror the image left-right with probability ``prob``.

    The decision is ``np.random.random() < prob``, drawn once per sample.

    Args:
        prob: probability of flipping. Default: 0.5.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform; x coordinates become ``width - x``.

    Examples:
        >>> import numpy as np
        >>> img = np.arange(3).reshape(1, 3, 1)
        >>> RandomHorizontalFlip(prob=1.0).apply(img).ravel().tolist()
        [2, 1, 0]
    """

    def __init__(self, prob: float = 0.5, *, order=None):
        super().__init__(order)
        self.prob = prob

    def apply(self, input: Tuple):
        self._flipped = np.random.random() < self.prob
        self._w = self._get_image(input).shape[1]
        return super().apply(input)

    def _apply_image(self, image):
        if self._flipped:
            return np.ascontiguousarray(image[:, ::-1])
        return image

    def _apply_coords(self, coords):
        if self._flipped:
            coords[:, 0] = self._w - coords[:, 0]
        return coords

    def _apply_mask(self, mask):
        if self._flipped:
            return np.ascontiguousarray(mask[:, ::-1])
        return mask


class RandomVerticalFlip(VisionTransform):
    r"""Mirror the image top-bottom with probability ``prob``.

    The decision is ``np.random.random() < prob``, drawn once per sample.

    Args:
        prob: probability of flipping. Default: 0.5.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform; y coordinates become ``height - y``.

    Examples:
        >>> import numpy as np
        >>> img = np.arange(3).reshape(3, 1, 1)
        >>> RandomVerticalFlip(prob=1.0).apply(img).ravel().tolist()
        [2, 1, 0]
    """

    def __init__(self, prob: float = 0.5, *, order=None):
        super().__init__(order)
        self.prob = prob

    def apply(self, input: Tuple):
        self._flipped = np.random.random() < self.prob
        self._h = self._get_image(input).shape[0]
        return super().apply(input)

    def _apply_image(self, image):
        if self._flipped:
            return np.ascontiguousarray(image[::-1])
        return image

    def _apply_coords(self, coords):
        if self._flipped:
            coords[:, 1] = self._h - coords[:, 1]
        return coords

    def _apply_mask(self, mask):
        if self._flipped:
            return np.ascontiguousarray(mask[::-1])
        return mask


# ---------------------------------------------------------------------------
# Colour transforms (BGR images with values in [0, 255])
# ---------------------------------------------------------------------------


class _ColorBase(VisionTransform):
    """Colour transforms leave geometry alone."""

    def _apply_coords(self, coords):
        return coords

    def _apply_mask(self, mask):
        return mask


def _check_nonneg(name, value):
    if value < 0:
        raise ValueError("{} value should be non-negative".format(name))


class BrightnessTransform(_ColorBase):
    r"""Scale brightness by ``alpha ~ U(max(0, 1 - value), 1 + value)``.

    Args:
        value: strength of the jitter, non-negative; 0 disables it.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform computing ``clip(image * alpha, 0, 255)`` in the image's
        dtype.

    Examples:
        >>> import numpy as np
        >>> BrightnessTransform(0).apply(np.full((1, 1, 3), 5, np.uint8)).ravel().tolist()
        [5, 5, 5]
    """

    def __init__(self, value, *, order=None):
        super().__init__(order)
        _check_nonneg("brightness", value)
        self.value = value

    def _apply_image(self, image):
        if self.value == 0:
            return image
        dtype = image.dtype
        image = image.astype(np.float32)
        alpha = np.random.uniform(max(0, 1 - self.value), 1 + self.value)
        image = image * alpha
        return image.clip(0, 255).astype(dtype)


class ContrastTransform(_ColorBase):
    r"""Blend the image with its mean grey level.

    ``alpha ~ U(max(0, 1 - value), 1 + value)`` and the result is
    ``clip(image * alpha + mean(gray(image)) * (1 - alpha), 0, 255)``.

    Args:
        value: strength of the jitter, non-negative; 0 disables it.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform keeping the image dtype.

    Examples:
        >>> import numpy as np
        >>> ContrastTransform(0).apply(np.full((1, 1, 3), 5, np.uint8)).ravel().tolist()
        [5, 5, 5]
    """

    def __init__(self, value, *, order=None):
        super().__init__(order)
        _check_nonneg("contrast", value)
        self.value = value

    def _apply_image(self, image):
        if self.value == 0:
            return image
        dtype = image.dtype
        image = image.astype(np.float32)
        alpha = np.random.uniform(max(0, 1 - self.value), 1 + self.value)
        image = image * alpha + _to_gray(image).mean() * (1 - alpha)
        return image.clip(0, 255).astype(dtype)


class SaturationTransform(_ColorBase):
    r"""Blend each pixel with its own grey level.

    ``alpha ~ U(max(0, 1 - value), 1 + value)`` and the result is
    ``clip(image * alpha + gray(image) * (1 - alpha), 0, 255)``.

    Args:
        value: strength of the jitter, non-negative; 0 disables it.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform keeping the image dtype.

    Examples:
        >>> import numpy as np
        >>> SaturationTransform(0).apply(np.full((1, 1, 3), 5, np.uint8)).ravel().tolist()
        [5, 5, 5]
    """

    def __init__(self, value, *, order=None):
        super().__init__(order)
        _check_nonneg("saturation", value)
        self.value = value

    def _apply_image(self, image):
        if self.value == 0:
            return image
        dtype = image.dtype
        image = image.astype(np.float32)
        alpha = np.random.uniform(max(0, 1 - self.value), 1 + self.value)
        image = image * alpha + _to_gray(image) * (1 - alpha)
        return image.clip(0, 255).astype(dtype)


class HueTransform(_ColorBase):
    r"""Rotate the hue by ``alpha ~ U(-value, value)`` turns.

    The image is read as BGR uint8, converted to HSV, its hue shifted by
    ``alpha * 360`` degrees (wrapping around) and converted back.

    Args:
        value: strength of the jitter, in ``[0, 0.5]``; 0 disables it.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform keeping the image dtype.

    Examples:
        >>> import numpy as np
        >>> HueTransform(0).apply(np.full((1, 1, 3), 5, np.uint8)).ravel().tolist()
        [5, 5, 5]
    """

    def __init__(self, value, *, order=None):
        super().__init__(order)
        if value < 0 or value > 0.5:
            raise ValueError("hue value should be in [0.0, 0.5]")
        self.value = value

    def _apply_image(self, image):
        if self.value == 0:
            return image
        dtype = image.dtype
        if cv2 is not None:
            # MegEngine's algorithm: OpenCV's 8-bit full-range HSV, the hue byte shifted with uint8 wrap-around
            hsv = cv2.cvtColor(image.astype(np.uint8), cv2.COLOR_BGR2HSV_FULL)
            alpha = np.random.uniform(-self.value, self.value)
            with np.errstate(over="ignore"):
                hsv[..., 0] += np.uint8(int(alpha * 255) % 256)  # NumPy 1's C cast of a negative shift
            return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR_FULL).astype(dtype)
        alpha = np.random.uniform(-self.value, self.value)
        image = np.clip(image, 0, 255).astype(np.uint8)
        return _bgr_shift_hue(image, alpha).astype(dtype)


class ColorJitter(VisionTransform):
    r"""Randomly jitter brightness, contrast, saturation and hue, in random order.

    Args:
        brightness: see :class:`BrightnessTransform`. Default: 0.
        contrast: see :class:`ContrastTransform`. Default: 0.
        saturation: see :class:`SaturationTransform`. Default: 0.
        hue: see :class:`HueTransform`. Default: 0.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform.

    Examples:
        >>> import numpy as np
        >>> img = np.full((2, 2, 3), 100, np.uint8)
        >>> ColorJitter(brightness=0.2, contrast=0.2).apply(img).shape
        (2, 2, 3)
    """

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0, *, order=None):
        super().__init__(order)
        transforms = []
        if brightness != 0:
            transforms.append(BrightnessTransform(brightness))
        if contrast != 0:
            transforms.append(ContrastTransform(contrast))
        if saturation != 0:
            transforms.append(SaturationTransform(saturation))
        if hue != 0:
            transforms.append(HueTransform(hue))
        self.transforms = Compose(
            transforms,
            shuffle_indices=[tuple(range(1, len(transforms) + 1))],
            order=order,
        )

    def apply(self, input):
        r"""Apply the jitters, in a random order, to one sample.

        Args:
            input: one sample.

        Returns:
            the transformed sample.
        """
        # an enclosing Compose may have re-set self.order after construction
        self.transforms.order = self.order
        self.transforms._set_order()
        return self.transforms.apply(input)


class Lighting(_ColorBase):
    r"""AlexNet-style PCA lighting noise.

    Adds ``eigvec @ (alpha * eigval)`` with ``alpha ~ N(0, scale * 255)``
    (three draws) to every pixel, using ImageNet's BGR eigenvectors.

    Args:
        scale: standard deviation of ``alpha``, non-negative; 0 disables it.
        order: names of the sample's elements. Default: ``("image",)``.

    Returns:
        a transform keeping the image dtype, clipped to [0, 255].

    Examples:
        >>> import numpy as np
        >>> Lighting(0).apply(np.full((1, 1, 3), 5, np.uint8)).ravel().tolist()
        [5, 5, 5]
    """

    def __init__(self, scale, *, order=None):
        super().__init__(order)
        if scale < 0:
            raise ValueError("lighting scale should be non-negative")
        self.scale = scale
        # ImageNet RGB eigenvectors with rows reversed for BGR images
        self.eigvec = np.array(
            [
                [-0.5836, -0.6948, 0.4203],
                [-0.5808, -0.0045, -0.8140],
                [-0.5675, 0.7192, 0.4009],
            ]
        )
        self.eigval = np.array([0.2175, 0.0188, 0.0045])

    def _apply_image(self, image):
        if self.scale == 0:
            return image
        dtype = image.dtype
        image = image.astype(np.float32)
        alpha = np.random.normal(scale=self.scale * 255, size=3)
        image = image + self.eigvec.dot(alpha * self.eigval)
        return image.clip(0, 255).astype(dtype)


class TorchTransformCompose(VisionTransform):
    r"""Apply transforms written for PIL images (torchvision's ``Resize``, ``ColorJitter``, ``RandomAffine``...)
    to the image of a sample.

    The image (``HWC`` BGR, as MegEngine datasets give; cast to uint8, as MegEngine does) becomes an RGB PIL
    image, goes through ``transforms`` in order, and comes back as an ``HWC`` uint8 BGR array. Tensor-producing
    torchvision transforms (``ToTensor``, ``Normalize``) do not apply: use :class:`Normalize` / :class:`ToMode` after
    this.
    Needs Pillow (``pip install pillow``); torchvision only if its transforms are used.

    Args:
        transforms: callables ``PIL.Image -> PIL.Image``.
        order: the sample layout, as :class:`VisionTransform`.

    Example:
        >>> import numpy as np
        >>> from PIL import ImageOps
        >>> t = TorchTransformCompose([ImageOps.mirror])
        >>> img = np.arange(6, dtype=np.uint8).reshape(1, 2, 3)
        >>> t.apply(img)[0, 0].tolist()
        [3, 4, 5]
    """

    def __init__(self, transforms, *, order=None):
        super().__init__(order)
        # (the caller's list itself, as MegEngine; a one-shot iterable read once)
        self.transforms = transforms if isinstance(transforms, collections.abc.Sequence) else list(transforms)
        try:
            from PIL import Image
        except ImportError:
            raise ImportError("TorchTransformCompose needs Pillow: pip install pillow") from None
        self._from_array = Image.fromarray

    def _apply_image(self, image):
        # MegEngine casts the image to uint8 first (PIL holds 8-bit images): a float image is truncated, not refused
        image = np.asarray(image).astype(np.uint8)
        gray = image.ndim == 2 or image.shape[-1] == 1
        # MegEngine images are BGR (OpenCV); PIL transforms expect RGB. Only a 3-channel image is swapped, as
        # MegEngine swaps it: a 2- or 4-channel one goes to PIL as it is (its first channel PIL's first band)
        if gray:
            image = image.reshape(image.shape[:2])
        elif image.shape[-1] == 3:
            image = image[:, :, ::-1]
        pil = self._from_array(np.ascontiguousarray(image))
        for t in self.transforms:
            pil = t(pil)
        out = np.asarray(pil)
        if out.ndim == 2:
            return out[:, :, np.newaxis]
        return np.ascontiguousarray(out[:, :, ::-1] if out.shape[-1] == 3 else out)
