"""Convolution layers with MegEngine's weight layouts.

Weights are ``(O, I, *k)``, or ``(groups, O/groups, I/groups, *k)`` for grouped convolutions; transposed
convolutions swap the channel axes: ``(I, O, *k)`` / ``(groups, I/groups, O/groups, *k)``. Biases are
broadcast-shaped ``(1, O, 1, ...)``.
"""
import collections.abc
from abc import abstractmethod

import numpy as np

from ..core._tensor import Parameter
from ..functional.nn import conv1d, conv2d, conv3d, conv_transpose2d, conv_transpose3d, pad, relu
from . import init
from ._errors import LayerArgumentError
from .module import Module

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "ConvTranspose3d", "ConvRelu2d",
           "ConvTransposeRelu2d", "LocalConv2d", "DeformableConv2d"]


def _ntuple(v, n, name, allow_zero=True):
    # MegEngine's get_ndtuple: a number is truncated with int() (so `padding=(k - 1) / 2`, a float, works), a
    # sequence must hold n entries, and every entry must be >= 0 (>= 1 where zero is not allowed); its asserts'
    # texts come first in the messages
    if not isinstance(v, collections.abc.Iterable):
        t = (int(v),) * n
    else:
        t = tuple(v)
        if len(t) != n:
            raise LayerArgumentError(f"tuple len is not equal to n: {v} ({name} must be an int or a tuple of {n} "
                                     f"ints)")
        t = tuple(int(i) for i in t)
    if min(t) < (0 if allow_zero else 1):
        need = "non-negative" if allow_zero else "positive"
        raise LayerArgumentError(f"invalid value: {t} ({name} must be {need})")
    return t


class _ConvNd(Module):
    """Shared construction of convolution modules: channel checks, parameters, default init."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias=True,
                 **kwargs):
        super().__init__(**kwargs)
        if in_channels % groups != 0:
            raise ValueError(f"in_channels ({in_channels}) must be divisible by groups ({groups})")
        if out_channels % groups != 0:
            raise ValueError(f"out_channels ({out_channels}) must be divisible by groups ({groups})")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.groups = groups
        # MegEngine's convolutions all hold one (0 for the forward ones); the transposed ones set theirs
        self.output_padding = 0
        self.weight = Parameter(np.zeros(self._infer_weight_shape(), dtype=np.float32))
        self.bias = Parameter(np.zeros(self._infer_bias_shape(), dtype=np.float32)) if bias else None
        self.reset_parameters()

    @abstractmethod
    def _get_fanin(self):
        """Fan-in used by the default init."""

    @abstractmethod
    def _infer_weight_shape(self):
        """The weight shape for this configuration."""

    def _infer_bias_shape(self):
        nd = len(self._kernel())
        return (1, self.out_channels) + (1,) * nd

    def _kernel(self):
        k = self.kernel_size
        return (k,) if isinstance(k, (int, np.integer)) else tuple(k)

    def _conv_weight_shape(self, first, second):
        # MegEngine's layout: a leading group axis only when groups > 1.
        g = self.groups
        if g == 1:
            return (first, second) + self._kernel()
        return (g, first // g, second // g) + self._kernel()

    def reset_parameters(self) -> None:
        """Re-initialise: weight from N(0, 1 / fan_in), bias zeros (MegEngine's defaults).

        Example:
            >>> conv = M.Conv2d(2, 3, 3); conv.reset_parameters(); float(abs(conv.bias).sum())
            0.0
        """
        std = np.sqrt(1 / self._get_fanin())
        init.normal_(self.weight, 0.0, std)
        if self.bias is not None:
            init.zeros_(self.bias)

    def _module_info_string(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}"
        for name, default in (("stride", 1), ("padding", 0), ("dilation", 1)):
            v = getattr(self, name)
            vt = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
            if vt != (default,) * len(vt):
                s += f", {name}={v}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


_PADDING_MODES = ("zeros", "reflect", "replicate")


class _PaddedConv(_ConvNd):
    """Convolutions with ``padding_mode``: non-zero modes pad explicitly and convolve unpadded."""

    def _check_padding_mode(self, padding_mode):
        if padding_mode not in _PADDING_MODES:
            # MegEngine asserts this at the first call; refused here when built (an AssertionError too)
            raise LayerArgumentError(f"padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}")

    def get_pad_witdth(self):
        """Pad widths ``((0, 0), (0, 0), (p, p), ...)`` for an explicit ``F.nn.pad`` (MegEngine's spelling).

        Example:
            >>> M.Conv2d(1, 1, 3, padding=1).get_pad_witdth()
            ((0, 0), (0, 0), (1, 1), (1, 1))
        """
        p = self.padding
        pads = (p,) if isinstance(p, (int, np.integer)) else tuple(p)
        return ((0, 0), (0, 0)) + tuple((int(i), int(i)) for i in pads)

    def _padded(self, inp):
        if self.padding_mode == "zeros":
            return inp, self.padding
        zero = 0 if isinstance(self.padding, (int, np.integer)) else (0,) * len(self.padding)
        return pad(inp, self.get_pad_witdth(), self.padding_mode), zero


class Conv1d(_PaddedConv):
    r"""1-D convolution over an ``(N, C, L)`` input.

    Args:
        in_channels: input channels C.
        out_channels: output channels.
        kernel_size: kernel length.
        stride: stride.
        padding: zero (or ``padding_mode``) padding on both sides.
        dilation: kernel dilation.
        groups: channel groups; weight becomes ``(groups, O/groups, I/groups, K)``.
        bias: learn a ``(1, O, 1)`` bias.
        conv_mode: ``"cross_correlation"``.
        compute_mode: ``"default"``.
        padding_mode: ``"zeros"``, ``"reflect"`` or ``"replicate"``.

    Example:
        >>> m = M.Conv1d(2, 3, 3)
        >>> m(mge.Tensor(np.ones((1, 2, 5), "float32"))).shape
        (1, 3, 3)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 dilation: int = 1, groups: int = 1, bias: bool = True, conv_mode: str = "cross_correlation",
                 compute_mode: str = "default", padding_mode: str = "zeros", **kwargs):
        self._check_padding_mode(padding_mode)
        if isinstance(kernel_size, collections.abc.Iterable) and len(kernel_size) != 1:
            # MegEngine keeps the arguments as given and fails building the weight (np.zeros of a nested shape)
            raise TypeError(f"Conv1d: kernel_size must be an int, got {kernel_size!r}")
        self.conv_mode = conv_mode
        self.compute_mode = compute_mode
        self.padding_mode = padding_mode
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         **kwargs)

    def _get_fanin(self):
        return self._kernel()[0] * self.in_channels

    def _infer_weight_shape(self):
        return self._conv_weight_shape(self.out_channels, self.in_channels)

    def calc_conv(self, inp, weight, bias):
        """Convolve ``inp`` with the given weight and bias (hook for quantized sub-classes).

        Example:
            >>> m = M.Conv1d(2, 3, 3); x = mge.Tensor(np.ones((1, 2, 5), "float32"))
            >>> m.calc_conv(x, m.weight, m.bias).shape
            (1, 3, 3)
        """
        inp, padding = self._padded(inp)
        return conv1d(inp, weight, bias, self.stride, padding, self.dilation, self.groups, self.conv_mode,
                      self.compute_mode)

    def forward(self, inp):
        """The convolution of ``inp`` ``(N, C, L)``."""
        return self.calc_conv(inp, self.weight, self.bias)


class Conv2d(_PaddedConv):
    r"""2-D convolution over an NCHW input.

    Args:
        in_channels: input channels C.
        out_channels: output channels O.
        kernel_size: int or ``(kh, kw)``.
        stride: int or pair.
        padding: int or pair of zero (or ``padding_mode``) padding.
        dilation: int or pair.
        groups: channel groups; the weight becomes ``(groups, O/groups, C/groups, kh, kw)``.
        bias: learn a ``(1, O, 1, 1)`` bias.
        conv_mode: ``"cross_correlation"``.
        compute_mode: ``"default"``.
        padding_mode: ``"zeros"``, ``"reflect"`` or ``"replicate"``.

    Attributes:
        weight: ``(O, C, kh, kw)`` (or grouped as above), from N(0, 1 / (C * kh * kw)).
        bias: zeros, or None.

    Example:
        >>> m = M.Conv2d(3, 4, 3, padding=1)
        >>> m(mge.Tensor(np.ones((1, 3, 8, 8), "float32"))).shape
        (1, 4, 8, 8)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, conv_mode: str = "cross_correlation",
                 compute_mode: str = "default", padding_mode: str = "zeros", **kwargs):
        self._check_padding_mode(padding_mode)
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
        return self._conv_weight_shape(self.out_channels, self.in_channels)

    def calc_conv(self, inp, weight, bias):
        """Convolve ``inp`` with the given weight and bias (hook for quantized sub-classes).

        Example:
            >>> m = M.Conv2d(2, 3, 3); x = mge.Tensor(np.ones((1, 2, 5, 5), "float32"))
            >>> m.calc_conv(x, m.weight, m.bias).shape
            (1, 3, 3, 3)
        """
        inp, padding = self._padded(inp)
        return conv2d(inp, weight, bias, self.stride, padding, self.dilation, self.groups, self.conv_mode,
                      self.compute_mode)

    def forward(self, inp):
        """The convolution of ``inp`` ``(N, C, H, W)``."""
        return self.calc_conv(inp, self.weight, self.bias)


class Conv3d(_ConvNd):
    r"""3-D convolution over an NCDHW input.

    Args:
        in_channels: input channels C.
        out_channels: output channels O.
        kernel_size: int or ``(kd, kh, kw)``.
        stride: int or triple.
        padding: int or triple.
        dilation: int or triple.
        groups: channel groups; the weight becomes ``(groups, O/groups, C/groups, kd, kh, kw)``.
        bias: learn a ``(1, O, 1, 1, 1)`` bias.
        conv_mode: ``"cross_correlation"``.

    Example:
        >>> m = M.Conv3d(2, 3, 3)
        >>> m(mge.Tensor(np.ones((1, 2, 4, 4, 4), "float32"))).shape
        (1, 3, 2, 2, 2)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, conv_mode: str = "cross_correlation"):
        self.conv_mode = conv_mode
        super().__init__(in_channels, out_channels, _ntuple(kernel_size, 3, "kernel_size", False),
                         _ntuple(stride, 3, "stride", False), _ntuple(padding, 3, "padding"),
                         _ntuple(dilation, 3, "dilation", False), groups, bias)

    def _get_fanin(self):
        kt, kh, kw = self.kernel_size
        return kt * kh * kw * self.in_channels

    def _infer_weight_shape(self):
        return self._conv_weight_shape(self.out_channels, self.in_channels)

    def calc_conv(self, inp, weight, bias):
        """Convolve ``inp`` with the given weight and bias.

        Example:
            >>> m = M.Conv3d(2, 3, 3); x = mge.Tensor(np.ones((1, 2, 4, 4, 4), "float32"))
            >>> m.calc_conv(x, m.weight, m.bias).shape
            (1, 3, 2, 2, 2)
        """
        return conv3d(inp, weight, bias, self.stride, self.padding, self.dilation, self.groups, self.conv_mode)

    def forward(self, inp):
        """The convolution of ``inp`` ``(N, C, D, H, W)``."""
        return self.calc_conv(inp, self.weight, self.bias)


class ConvTranspose2d(_ConvNd):
    r"""2-D transposed convolution (the gradient of :class:`Conv2d` w.r.t. its input) over NCHW input.

    Output size per spatial axis: ``(in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1``.

    Args:
        in_channels: input channels C.
        out_channels: output channels O.
        kernel_size: int or pair.
        stride: int or pair.
        padding: int or pair.
        output_padding: extra size added to one side of the output.
        dilation: int or pair.
        groups: channel groups; the weight becomes ``(groups, C/groups, O/groups, kh, kw)``.
        bias: learn a ``(1, O, 1, 1)`` bias.
        conv_mode: ``"cross_correlation"``.
        compute_mode: ``"default"``.

    Attributes:
        weight: ``(C, O, kh, kw)``, from N(0, 1 / (O * kh * kw)).

    Example:
        >>> m = M.ConvTranspose2d(2, 3, 3, stride=2)
        >>> m(mge.Tensor(np.ones((1, 2, 4, 4), "float32"))).shape
        (1, 3, 9, 9)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, conv_mode: str = "cross_correlation",
                 compute_mode: str = "default", **kwargs):
        self.conv_mode = conv_mode
        self.compute_mode = compute_mode
        super().__init__(in_channels, out_channels, _ntuple(kernel_size, 2, "kernel_size", False),
                         _ntuple(stride, 2, "stride", False), _ntuple(padding, 2, "padding"),
                         _ntuple(dilation, 2, "dilation", False), groups, bias, **kwargs)
        self.output_padding = _ntuple(output_padding, 2, "output_padding")

    def _get_fanin(self):
        # Each output pixel sums over out_channels-sized kernel slices of the (C, O, kh, kw) weight.
        kh, kw = self.kernel_size
        return kh * kw * self.out_channels

    def _infer_weight_shape(self):
        return self._conv_weight_shape(self.in_channels, self.out_channels)

    def calc_conv_transpose2d(self, inp, weight, bias):
        """Transposed-convolve ``inp`` with the given weight and bias.

        Example:
            >>> m = M.ConvTranspose2d(2, 3, 3); x = mge.Tensor(np.ones((1, 2, 4, 4), "float32"))
            >>> m.calc_conv_transpose2d(x, m.weight, m.bias).shape
            (1, 3, 6, 6)
        """
        return conv_transpose2d(inp, weight, bias, self.stride, self.padding, self.output_padding,
                                self.dilation, self.groups, self.conv_mode, self.compute_mode)

    def forward(self, inp):
        """The transposed convolution of ``inp`` ``(N, C, H, W)``."""
        return self.calc_conv_transpose2d(inp, self.weight, self.bias)


class ConvTranspose3d(_ConvNd):
    r"""3-D transposed convolution over NCDHW input.

    Args:
        in_channels: input channels C.
        out_channels: output channels O.
        kernel_size: int or triple.
        stride: int or triple.
        padding: int or triple.
        output_padding: extra size added to one side of the output.
        dilation: int or triple.
        groups: channel groups; the weight becomes ``(groups, C/groups, O/groups, kd, kh, kw)``.
        bias: learn a ``(1, O, 1, 1, 1)`` bias.

    Attributes:
        weight: ``(C, O, kd, kh, kw)``, from N(0, 1 / (O * kd * kh * kw)).

    Example:
        >>> m = M.ConvTranspose3d(2, 3, 2)
        >>> m(mge.Tensor(np.ones((1, 2, 2, 2, 2), "float32"))).shape
        (1, 3, 3, 3, 3)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 dilation=1, groups: int = 1, bias: bool = True):
        super().__init__(in_channels, out_channels, _ntuple(kernel_size, 3, "kernel_size", False),
                         _ntuple(stride, 3, "stride", False), _ntuple(padding, 3, "padding"),
                         _ntuple(dilation, 3, "dilation", False), groups, bias)
        # MegEngine keeps this one as given (its forward normalises it), so `output_padding` reads back unchanged
        self.output_padding = output_padding

    def _get_fanin(self):
        kt, kh, kw = self.kernel_size
        return kt * kh * kw * self.out_channels

    def _infer_weight_shape(self):
        return self._conv_weight_shape(self.in_channels, self.out_channels)

    def forward(self, inp):
        """The transposed convolution of ``inp`` ``(N, C, D, H, W)``."""
        return conv_transpose3d(inp, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                self.dilation, self.groups)


class ConvRelu2d(Conv2d):
    r"""A :class:`Conv2d` followed by ReLU (the float counterpart of the quantized fused module).

    Args:
        as :class:`Conv2d`.

    Example:
        >>> m = M.ConvRelu2d(3, 4, 3)
        >>> bool((m(mge.Tensor(np.random.randn(1, 3, 5, 5).astype("float32"))).numpy() >= 0).all())
        True
    """

    def forward(self, inp):
        """``relu(conv2d(inp))``."""
        return relu(self.calc_conv(inp, self.weight, self.bias))


class ConvTransposeRelu2d(ConvTranspose2d):
    r"""A :class:`ConvTranspose2d` followed by ReLU.

    Args:
        as :class:`ConvTranspose2d`.

    Example:
        >>> m = M.ConvTransposeRelu2d(2, 3, 3)
        >>> m(mge.Tensor(np.ones((1, 2, 4, 4), "float32"))).shape
        (1, 3, 6, 6)
    """

    def forward(self, inp):
        """``relu(conv_transpose2d(inp))``."""
        return relu(self.calc_conv_transpose2d(inp, self.weight, self.bias))


class LocalConv2d(Conv2d):
    r"""Locally connected 2-D layer: like :class:`Conv2d` but with a separate kernel at every output position
    (no weight sharing), so the input size is fixed at construction.

    Args:
        in_channels: input channels C.
        out_channels: output channels O.
        input_height: input height H.
        input_width: input width W.
        kernel_size: int or pair.
        stride: int or pair.
        padding: int or pair.
        dilation: int or pair.
        groups: channel groups.
        conv_mode: ``"cross_correlation"``.

    Attributes:
        weight: ``(groups, OH, OW, C/groups, kh, kw, O/groups)`` (MegEngine's layout); there is no bias.

    Example:
        >>> m = M.LocalConv2d(2, 4, 5, 5, 3)
        >>> m(mge.Tensor(np.ones((1, 2, 5, 5), "float32"))).shape
        (1, 4, 3, 3)
    """

    def __init__(self, in_channels: int, out_channels: int, input_height: int, input_width: int, kernel_size,
                 stride=1, padding=0, dilation=1, groups: int = 1, conv_mode: str = "cross_correlation", **kwargs):
        self.input_height = input_height
        self.input_width = input_width
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias=False,
                         conv_mode=conv_mode, **kwargs)

    def _infer_weight_shape(self):
        g = self.groups
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel_size, self.stride, self.padding, self.dilation
        oh = (self.input_height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        ow = (self.input_width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        return (g, oh, ow, self.in_channels // g, kh, kw, self.out_channels // g)

    def forward(self, inp):
        """The locally connected transform of ``inp`` ``(N, C, input_height, input_width)``."""
        from .. import functional as F
        return F.nn.local_conv2d(inp, self.weight, None, self.stride, self.padding, self.dilation, self.conv_mode)


class DeformableConv2d(_ConvNd):
    r"""Modulated deformable 2-D convolution (DCNv2): each kernel tap samples the input at its regular
    position plus a per-position learned offset, scaled by a mask.

    Args:
        in_channels: input channels C.
        out_channels: output channels O.
        kernel_size: int or pair.
        stride: int or pair.
        padding: int or pair.
        dilation: int or pair.
        groups: channel groups (weight layout as :class:`Conv2d`).
        bias: learn a ``(1, O, 1, 1)`` bias.
        conv_mode: ``"cross_correlation"``.
        compute_mode: ``"default"``.

    Example:
        >>> m = M.DeformableConv2d(2, 3, 3)
        >>> x = mge.Tensor(np.ones((1, 2, 4, 4), "float32"))
        >>> off, mask = F.zeros((1, 18, 2, 2)), F.ones((1, 9, 2, 2))
        >>> m(x, off, mask).shape  # zero offsets and unit masks: an ordinary convolution
        (1, 3, 2, 2)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, conv_mode: str = "cross_correlation",
                 compute_mode: str = "default", **kwargs):
        self.conv_mode = conv_mode
        self.compute_mode = compute_mode
        super().__init__(in_channels, out_channels, _ntuple(kernel_size, 2, "kernel_size", False),
                         _ntuple(stride, 2, "stride", False), _ntuple(padding, 2, "padding"),
                         _ntuple(dilation, 2, "dilation", False), groups, bias, **kwargs)

    def _get_fanin(self):
        kh, kw = self.kernel_size
        return kh * kw * self.in_channels

    def _infer_weight_shape(self):
        return self._conv_weight_shape(self.out_channels, self.in_channels)

    def calc_conv(self, inp, weight, offset, mask, bias):
        """Deformable-convolve ``inp`` with the given weight, offsets, masks and bias.

        Example:
            >>> m = M.DeformableConv2d(2, 3, 3); x = mge.Tensor(np.ones((1, 2, 5, 5), "float32"))
            >>> off = mge.Tensor(np.zeros((1, 18, 3, 3), "float32")); mask = mge.Tensor(np.ones((1, 9, 3, 3), "float32"))
            >>> m.calc_conv(x, m.weight, off, mask, m.bias).shape
            (1, 3, 3, 3)
        """
        from .. import functional as F
        return F.nn.deformable_conv2d(inp, weight, offset, mask, bias, self.stride, self.padding, self.dilation,
                                      self.groups, self.conv_mode, self.compute_mode)

    def forward(self, inp, offset, mask):
        """The deformable convolution of ``inp`` with ``offset`` ``(N, 2*DG*kh*kw, OH, OW)`` and ``mask``
        ``(N, DG*kh*kw, OH, OW)``."""
        return self.calc_conv(inp, self.weight, offset, mask, self.bias)
