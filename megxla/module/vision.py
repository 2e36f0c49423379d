"""Image layers of ``megengine.module.vision``: flips, 90-degree and free rotations, resizing -- and the
augmentation layers of ``_vision_augment`` (additive noise, emboss / sharpen, linear contrast), re-exported here.

They wrap the functions of ``megengine.functional.vision`` (``flip``, ``rot90``, ``rotate``, ``resize``).
``Flip``, ``Resize``, ``Rot90``, ``Rotate`` and the augmentation layers are also exported by ``megxla.module`` (as
by MegEngine's ``megengine.module``); ``RandomHorizontalFlip`` and ``RandomVerticalFlip`` only from here.
"""
import numpy as np

from ..core._dispatch import OpError
from ..core._tensor import Tensor
from ..functional.vision import flip, resize, rot90, rotate
from ._vision_augment import (  # noqa: F401  (megengine.module.vision's names)
    ActiveBlur, AdditiveElemwise, AdditiveGaussianNoise, AdditiveLaplaceNoise, AdditivePoissonNoise, Emboss,
    LinearContrast, Sharpen, _tensor_input)
from ._vision_augment import __all__ as _augment_all
from .module import Module

__all__ = ["Flip", "RandomHorizontalFlip", "RandomVerticalFlip", "Resize", "Rot90", "Rotate"] + _augment_all


class Flip(Module):
    r"""Flips NHWC images vertically and/or horizontally (``F.vision.flip``).

    Args:
        vertical: flip along H (default True).
        horizontal: flip along W (default True).

    Example:
        >>> x = Tensor(np.arange(0, 4, dtype=np.float32).reshape(1, 2, 2, 1))
        >>> M.Flip(vertical=True, horizontal=True)(x).numpy()[0, :, :, 0]
        array([[3., 2.],
               [1., 0.]], dtype=float32)
    """

    def __init__(self, vertical=True, horizontal=True):
        super().__init__()
        self.vertical = vertical
        self.horizontal = horizontal

    def forward(self, inp):
        """``inp`` (``(N, H, W, C)``, C = 1 or 3) flipped."""
        _tensor_input(inp, "Flip")
        return flip(inp, self.vertical, self.horizontal)


class _RandomFlip(Module):
    """The random flips' one draw: ``flip(inp, **_FLIP)`` with probability ``prob`` (NumPy's global generator,
    ``np.random.rand(1)``, as MegEngine's)."""

    _FLIP: dict = {}

    def __init__(self, prob=0.5):
        super().__init__()
        self.prob = prob

    def forward(self, inp):
        """``inp`` flipped with probability ``prob``, else ``inp`` itself."""
        if np.random.rand(1) < self.prob:
            return flip(inp, **self._FLIP)
        return inp


class RandomHorizontalFlip(_RandomFlip):
    r"""Flips NHWC images with probability ``prob``, drawn from NumPy's global generator (``np.random.rand(1)``,
    one draw per call, as MegEngine's).

    NOTE: MegEngine 1.13's forward calls ``flip(inp, horizontal=True)``, leaving ``vertical`` at its default True,
    so a flipped image is flipped along both H and W; this layer does the same, to give MegEngine's results.

    Args:
        prob: the probability of flipping (default 0.5).

    Example:
        >>> x = Tensor(np.arange(0, 4, dtype=np.float32).reshape(1, 2, 2, 1))
        >>> M.vision.RandomHorizontalFlip(prob=1.0)(x).numpy()[0, :, :, 0]
        array([[3., 2.],
               [1., 0.]], dtype=float32)
    """

    _FLIP = {"horizontal": True}


class RandomVerticalFlip(_RandomFlip):
    r"""Flips NHWC images with probability ``prob``, drawn from NumPy's global generator (``np.random.rand(1)``,
    one draw per call, as MegEngine's).

    NOTE: MegEngine 1.13's forward calls ``flip(inp, vertical=True)``, leaving ``horizontal`` at its default True,
    so a flipped image is flipped along both H and W; this layer does the same, to give MegEngine's results.

    Args:
        prob: the probability of flipping (default 0.5).

    Example:
        >>> x = Tensor(np.arange(0, 4, dtype=np.float32).reshape(1, 2, 2, 1))
        >>> M.vision.RandomVerticalFlip(prob=0.0)(x) is x
        True
    """

    _FLIP = {"vertical": True}


class Resize(Module):
    r"""Resizes ``(N, C, H, W)`` (or ``(N, H, W, C)``) images to ``size`` (``F.vision.resize``).

    Args:
        size: the output ``(OH, OW)`` (kept as a Tensor, as MegEngine's).
        format: ``"NCHW"`` or ``"NHWC"``.
        imode: ``"linear"`` (bilinear), ``"nearest"`` or ``"cubic"``.

    Example:
        >>> x = Tensor(np.arange(0, 16, dtype=np.float32).reshape(1, 1, 4, 4))
        >>> M.Resize(Tensor([2, 2]))(x).numpy()
        array([[[[ 2.5,  4.5],
                 [10.5, 12.5]]]], dtype=float32)
    """

    def __init__(self, size, format="NCHW", imode="linear"):
        super().__init__()
        self.size = Tensor(size)
        self.format = format
        self.imode = imode

    def forward(self, inp):
        """``inp`` resized to ``size``."""
        _tensor_input(inp, "Resize")
        if self.format not in ["NCHW", "NHWC"]:
            raise OpError(f"Resize: expect input Tensor format to be NCHW or NHWC, got format {self.format} "
                          f"(input shape {inp.shape}, {inp.dtype})")
        return resize(inp, self.size, self.format, self.imode)


class Rot90(Module):
    r"""Rotates NHWC images by 90 degrees (``F.vision.rot90``): ``(N, H, W, C)`` becomes ``(N, W, H, C)``.

    Args:
        clockwise: rotate clockwise (default) or counterclockwise.

    Example:
        >>> x = Tensor(np.arange(0, 4, dtype=np.float32).reshape(1, 2, 2, 1))
        >>> M.Rot90(clockwise=True)(x).numpy()[0, :, :, 0]
        array([[2., 0.],
               [3., 1.]], dtype=float32)
    """

    def __init__(self, clockwise=True):
        super().__init__()
        self.clockwise = clockwise

    def forward(self, inp):
        """``inp`` rotated by 90 degrees."""
        _tensor_input(inp, "Rot90")
        return rot90(inp, self.clockwise)


class Rotate(Module):
    r"""Rotates an image by ``angle`` degrees about its centre, keeping its size (``F.vision.rotate``).

    Args:
        angle: the rotation angle in degrees.
        format: ``"NCHW"`` (``"NHWC"`` needs ``interp_mode="area"``, which MegEngine 1.13 cannot run: an error).
        interp_mode: ``"bilinear"`` for NCHW.

    Example:
        >>> x = Tensor(np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3))
        >>> M.Rotate(angle=180.0)(x).numpy()[0, 0].round(4)
        array([[8., 7., 6.],
               [5., 4., 3.],
               [2., 1., 0.]], dtype=float32)
    """

    def __init__(self, angle=0.0, format="NCHW", interp_mode="bilinear"):
        super().__init__()
        self.angle = angle
        self.format = format
        self.interp_mode = interp_mode

    def forward(self, inp):
        """``inp`` rotated by ``angle`` degrees."""
        _tensor_input(inp, "Rotate")
        return rotate(inp, self.angle, self.format, self.interp_mode)
