"""Sliding-window extraction (im2col) and its adjoint (col2im) as modules."""
from .module import Module

__all__ = ["SlidingWindow", "SlidingWindowTranspose"]


class SlidingWindow(Module):
    r"""Extract the sliding windows of a zero-padded NCHW input: output ``(N, C, OH, OW, kh, kw)``.

    Args:
        kernel_size: int or pair.
        padding: int or pair of zero padding.
        stride: int or pair.
        dilation: int or pair.

    Example:
        >>> m = M.SlidingWindow(2, stride=2)
        >>> m(mge.Tensor(np.ones((1, 1, 4, 4), "float32"))).shape
        (1, 1, 2, 2, 2, 2)
    """

    def __init__(self, kernel_size, padding=0, stride=1, dilation=1, **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = kernel_size
        self.padding = padding
        self.stride = stride
        self.dilation = dilation

    def forward(self, inp):
        """The windows of ``inp`` ``(N, C, H, W)``."""
        from .. import functional as F
        return F.nn.sliding_window(inp, self.kernel_size, self.padding, self.stride, self.dilation)


class SlidingWindowTranspose(Module):
    r"""Sum windows ``(N, C, OH, OW, kh, kw)`` back into an ``(N, C, *output_size)`` image (the adjoint of
    :class:`SlidingWindow`; overlapping contributions add up).

    Args:
        output_size: int or ``(H, W)`` of the image.
        kernel_size: int or pair.
        padding: int or pair.
        stride: int or pair.
        dilation: int or pair.

    Example:
        >>> m = M.SlidingWindowTranspose(4, 2, stride=2)
        >>> m(mge.Tensor(np.ones((1, 1, 2, 2, 2, 2), "float32"))).shape
        (1, 1, 4, 4)
    """

    def __init__(self, output_size, kernel_size, padding=0, stride=1, dilation=1, **kwargs):
        super().__init__(**kwargs)
        self.output_size = output_size
        self.kernel_size = kernel_size
        self.padding = padding
        self.stride = stride
        self.dilation = dilation

    def forward(self, inp):
        """The image assembled from the windows ``inp``."""
        from .. import functional as F
        return F.nn.sliding_window_transpose(inp, self.output_size, self.kernel_size, self.padding, self.stride,
                                             self.dilation)
