"""Sub-pixel upsampling."""
from .module import Module

__all__ = ["PixelShuffle"]


class PixelShuffle(Module):
    r"""Rearrange ``(..., C * r * r, H, W)`` into ``(..., C, H * r, W * r)`` (sub-pixel convolution upsampling).

    Args:
        upscale_factor: the factor ``r``.

    Example:
        >>> m = M.PixelShuffle(2)
        >>> m(mge.Tensor(np.ones((1, 8, 3, 3), "float32"))).shape
        (1, 2, 6, 6)
    """

    def __init__(self, upscale_factor: int, **kwargs):
        super().__init__(**kwargs)
        self.upscale_factor = upscale_factor

    def forward(self, x):
        """``x`` with channel blocks moved into space."""
        from .. import functional as F
        return F.nn.pixel_shuffle(x, self.upscale_factor)
