"""``megengine.data.transform.vision.functional``: the image functions of MegEngine's vision transforms on
``(H, W, C)`` NumPy images (OpenCV when installed, as MegEngine; else the NumPy fallback of :mod:`.transform`).

Example:
    >>> import numpy as np
    >>> img = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    >>> flip(img, 1)[0, 0].tolist(), pad(img, 1, 0).shape, to_gray(img).shape
    ([3, 4, 5], (4, 4, 3), (2, 2, 1))
"""
import collections.abc
import functools

import numpy as np

from .transform import _INTER_LINEAR, _cast_like, _pad, _resize, _to_gray, cv2

__all__ = ["wrap_keepdims", "to_gray", "to_bgr", "pad", "flip", "resize"]


def wrap_keepdims(func):
    """Decorator: the function takes a 3-d ``(H, W, C)`` image and a 2-d result gets its channel axis back.

    Example:
        >>> f = wrap_keepdims(lambda im: im[..., 0])
        >>> f(np.zeros((2, 2, 3))).shape
        (2, 2, 1)
    """
    @functools.wraps(func)
    def wrapper(image, *args, **kwargs):
        if len(image.shape) != 3:
            raise ValueError(f"{func.__name__}: image must have 3 dims (H, W, C), but got {len(image.shape)} dims")
        ret = func(image, *args, **kwargs)
        return ret[:, :, np.newaxis] if len(ret.shape) == 2 else ret

    return wrapper


@wrap_keepdims
def to_gray(image):
    """BGR -> grey, shape ``(H, W, 1)``, in the image's dtype (OpenCV's rounding for uint8, as MegEngine).

    Example:
        >>> to_gray(np.full((1, 1, 3), 10, np.uint8))[..., 0].tolist()
        [[10]]
    """
    if cv2 is not None and image.shape[-1] in (3, 4) and image.dtype in (np.uint8, np.uint16, np.float32):
        return cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    return _to_gray(image).astype(image.dtype) if np.issubdtype(image.dtype, np.floating) else _cast_like(
        _to_gray(image)[..., 0], image.dtype)


@wrap_keepdims
def to_bgr(image):
    """Grey ``(H, W, 1)`` -> BGR ``(H, W, 3)`` (the grey value in each channel).

    Example:
        >>> to_bgr(np.full((1, 1, 1), 7, np.uint8))[0, 0].tolist()
        [7, 7, 7]
    """
    if cv2 is not None:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    return np.repeat(image[..., :1], 3, axis=2)


@wrap_keepdims
def pad(input, size, value):
    """Constant-pad: ``size`` an int (all four sides), ``(bottom, right)``, or ``(top, bottom, left, right)``; a
    float ``value`` makes the image float32.

    Example:
        >>> pad(np.ones((1, 1, 1), np.uint8), (1, 2), 0)[..., 0].tolist()
        [[1, 0, 0], [0, 0, 0]]
    """
    if isinstance(size, int):
        size = (size, size, size, size)
    elif isinstance(size, collections.abc.Sequence) and len(size) == 2:
        size = (0, size[0], 0, size[1])
    return _pad(input, size, value)


@wrap_keepdims
def flip(image, flipCode):
    """Flip: ``1`` horizontally, ``0`` vertically, ``-1`` both.

    Example:
        >>> flip(np.arange(2).reshape(1, 2, 1), 1)[..., 0].tolist()
        [[1, 0]]
    """
    if flipCode not in (-1, 0, 1):
        flipCode = 1 if flipCode > 0 else -1  # (OpenCV: any positive code flips horizontally, negative both)
    if flipCode == 1:
        return image[:, ::-1].copy()
    if flipCode == 0:
        return image[::-1].copy()
    return image[::-1, ::-1].copy()


@wrap_keepdims
def resize(input, size, interpolation=_INTER_LINEAR):
    """Resize to ``size = (height, width)``; ``interpolation`` an OpenCV code, or a sequence to pick one from at
    random.

    Example:
        >>> resize(np.zeros((2, 2, 3), np.uint8), (4, 6)).shape
        (4, 6, 3)
    """
    if len(size) != 2:
        raise ValueError(f"resize needs (h, w), but got {size}")
    return _resize(input, size, interpolation)
