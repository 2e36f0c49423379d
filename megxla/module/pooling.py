"""Pooling layers over NCHW inputs."""
from ..functional.nn import adaptive_avg_pool2d, adaptive_max_pool2d, avg_pool2d, max_pool2d
from .module import Module

__all__ = ["MaxPool2d", "AvgPool2d", "AdaptiveMaxPool2d", "AdaptiveAvgPool2d"]


class _PoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = kernel_size
        self.stride = stride or kernel_size
        self.padding = padding

    def _module_info_string(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool2d(_PoolNd):
    r"""2-D max pooling: the maximum of each ``kernel_size`` window, moved by ``stride``.

    Args:
        kernel_size: int or ``(kh, kw)``.
        stride: int or pair; defaults to ``kernel_size``.
        padding: int or pair of implicit ``-inf`` padding.

    Example:
        >>> m = M.MaxPool2d(2)
        >>> m(mge.Tensor(np.arange(16, dtype="float32").reshape(1, 1, 4, 4))).numpy().ravel()
        array([ 5.,  7., 13., 15.], dtype=float32)
    """

    def forward(self, inp):
        """Max-pool ``inp`` ``(N, C, H, W)``."""
        return max_pool2d(inp, self.kernel_size, self.stride, self.padding)


class AvgPool2d(_PoolNd):
    r"""2-D average pooling over ``kernel_size`` windows moved by ``stride``.

    Args:
        kernel_size: int or ``(kh, kw)``.
        stride: int or pair; defaults to ``kernel_size``.
        padding: int or pair of implicit zero padding.
        mode: ``"average_count_exclude_padding"`` (padding not counted in the divisor) or ``"average"``.

    Example:
        >>> m = M.AvgPool2d(2)
        >>> m(mge.Tensor(np.arange(16, dtype="float32").reshape(1, 1, 4, 4))).numpy().ravel()
        array([ 2.5,  4.5, 10.5, 12.5], dtype=float32)
    """

    def __init__(self, kernel_size, stride=None, padding=0, mode: str = "average_count_exclude_padding",
                 **kwargs):
        super().__init__(kernel_size, stride, padding, **kwargs)
        self.mode = mode

    def forward(self, inp):
        """Average-pool ``inp`` ``(N, C, H, W)``."""
        return avg_pool2d(inp, self.kernel_size, self.stride, self.padding, self.mode)

    def _module_info_string(self) -> str:
        return super()._module_info_string() + f", mode={self.mode}"


class _AdaptivePoolNd(Module):
    def __init__(self, oshp, **kwargs):
        super().__init__(**kwargs)
        self.oshp = oshp


class AdaptiveMaxPool2d(_AdaptivePoolNd):
    r"""2-D max pooling to a fixed output size ``oshp`` (window and stride derived from the input size).

    Args:
        oshp: int or ``(oh, ow)``.

    Example:
        >>> m = M.AdaptiveMaxPool2d((2, 2))
        >>> m(mge.Tensor(np.arange(16, dtype="float32").reshape(1, 1, 4, 4))).numpy().ravel()
        array([ 5.,  7., 13., 15.], dtype=float32)
    """

    def forward(self, inp):
        """Max-pool ``inp`` ``(N, C, H, W)`` to ``(N, C, *oshp)``."""
        return adaptive_max_pool2d(inp, self.oshp)


class AdaptiveAvgPool2d(_AdaptivePoolNd):
    r"""2-D average pooling to a fixed output size ``oshp`` (window and stride derived from the input size).

    Args:
        oshp: int or ``(oh, ow)``.

    Example:
        >>> m = M.AdaptiveAvgPool2d(1)
        >>> m(mge.Tensor(np.ones((1, 3, 4, 4), "float32"))).shape
        (1, 3, 1, 1)
    """

    def forward(self, inp):
        """Average-pool ``inp`` ``(N, C, H, W)`` to ``(N, C, *oshp)``."""
        return adaptive_avg_pool2d(inp, self.oshp)
