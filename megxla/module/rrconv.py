"""``RegionRestrictedConv``: a 2-D convolution in which each output pixel only sees input pixels of its own
region (over ``F.nn.region_restricted_conv``)."""
from typing import Tuple, Union

import numpy as np

from ..functional.nn import region_restricted_conv
from ._errors import LayerArgumentError
from .conv import _ConvNd, _ntuple

__all__ = ["RegionRestrictedConv"]


class RegionRestrictedConv(_ConvNd):
    r"""Region-restricted 2-D convolution over an NCHW input.

    Every input pixel carries an integer region id (``rin``, ``(N, H, W)``) and so does every output pixel
    (``rout``, ``(N, OH, OW)``); an input pixel under the kernel contributes to an output pixel only if their
    ids are equal (zero padding contributes nothing)::

        out[n, o, oh, ow] = bias[o] + sum_{c, kh, kw} w[o, c, kh, kw] * x[n, c, ih, iw]
                                                      * (rin[n, ih, iw] == rout[n, oh, ow])

    Args:
        in_channels: input channels C.
        out_channels: output channels O.
        kernel_size: int or ``(kh, kw)``.
        groups: channel groups; the weight is ``(groups, O/groups, C/groups, kh, kw)``, for ``groups == 1``
            too, as MegEngine's (which uses it depthwise: ``groups == in_channels == out_channels``).
        bias: learn a ``(1, O, 1, 1)`` bias.
        stride: int or pair.
        padding: int or pair of zero padding.
        dilation: int or pair.
        conv_mode: ``"cross_correlation"``.
        compute_mode: ``"default"``.
        padding_mode: only ``"zeros"`` (the region maps describe the unpadded input).

    Attributes:
        weight: ``(groups, O/groups, C/groups, kh, kw)``, from N(0, 1 / (C * kh * kw)).
        bias: zeros, or None.

    Example:
        >>> m = M.RegionRestrictedConv(2, 2, 3, groups=2, padding=1)
        >>> x = mge.Tensor(np.ones((1, 2, 4, 4), "float32"))
        >>> rin = mge.Tensor(np.zeros((1, 4, 4), "int32")); rout = mge.Tensor(np.zeros((1, 4, 4), "int32"))
        >>> m(x, rin, rout).shape
        (1, 2, 4, 4)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Union[int, Tuple[int, int]],
                 groups: int = 1, bias: bool = True, stride: Union[int, Tuple[int, int]] = 1,
                 padding: Union[int, Tuple[int, int]] = 0, dilation: Union[int, Tuple[int, int]] = 1,
                 conv_mode: str = "cross_correlation", compute_mode: str = "default", padding_mode: str = "zeros",
                 **kwargs):
        if padding_mode != "zeros":
            # Reflect / replicate padding would need padded region maps too; MegEngine ignores the mode (and
            # asserts an unknown one at the first call: an AssertionError here too).
            raise LayerArgumentError(f"RegionRestrictedConv: padding_mode must be 'zeros', got {padding_mode!r}")
        if conv_mode != "cross_correlation":
            raise ValueError(f"RegionRestrictedConv: conv_mode must be 'cross_correlation', got {conv_mode!r}")
        self.conv_mode = conv_mode
        self.compute_mode = compute_mode
        self.padding_mode = padding_mode
        super().__init__(in_channels, out_channels, _ntuple(kernel_size, 2, "kernel_size", False),
                         _ntuple(stride, 2, "stride", False), _ntuple(padding, 2, "padding"),
                         _ntuple(dilation, 2, "dilation", False), groups, bias, **kwargs)

    def _get_fanin(self):
        kh, kw = self.kernel_size
        return kh * kw * self.in_channels

    def _infer_weight_shape(self):
        # MegEngine's: the group axis even for groups == 1 (unlike Conv2d's), so its checkpoints load here
        # (_ConvNd checked that groups divides both channel counts)
        g = self.groups
        return (g, self.out_channels // g, self.in_channels // g) + self._kernel()

    def get_pad_width(self):
        """Pad widths ``((0, 0), (0, 0), (ph, ph), (pw, pw))`` of the input.

        Example:
            >>> M.RegionRestrictedConv(2, 2, 3, groups=2, padding=1).get_pad_width()
            ((0, 0), (0, 0), (1, 1), (1, 1))
        """
        ph, pw = self.padding
        return ((0, 0), (0, 0), (ph, ph), (pw, pw))

    def calc_conv(self, inp, weight, rin, rout, bias):
        """Region-restricted convolution of ``inp`` with the given weight, region maps and bias.

        Example:
            >>> m = M.RegionRestrictedConv(1, 1, 3)
            >>> x, r = mge.Tensor(np.ones((1, 1, 3, 3), "float32")), mge.Tensor(np.zeros((1, 3, 3), "int32"))
            >>> m.calc_conv(x, m.weight, r, r[:, :1, :1], m.bias).shape
            (1, 1, 1, 1)
        """
        return region_restricted_conv(inp, weight, rin, rout, bias, self.stride, self.padding, self.dilation,
                                      self.groups, self.conv_mode, self.compute_mode)

    def forward(self, inp, rin, rout):
        """The convolution of ``inp`` ``(N, C, H, W)`` with input regions ``rin`` ``(N, H, W)`` and output
        regions ``rout`` ``(N, OH, OW)``."""
        shape = tuple(getattr(inp, "shape", np.shape(inp)))
        if len(shape) != 4 or shape[1] != self.in_channels:
            raise ValueError(f"RegionRestrictedConv: input must be (N, in_channels={self.in_channels}, H, W), "
                             f"got {shape}")
        return self.calc_conv(inp, self.weight, rin, rout, self.bias)
