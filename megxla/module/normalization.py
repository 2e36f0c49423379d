"""Layer, group and instance normalisation."""
import numpy as np

from ..core._tensor import Parameter
from ..functional.nn import group_norm, instance_norm, layer_norm
from . import init
from ._errors import LayerArgumentError
from .module import Module

__all__ = ["LayerNorm", "GroupNorm", "InstanceNorm", "GeneralNorm", "LocalResponseNorm"]


class _AffineNorm(Module):
    def _make_affine(self, shape):
        if self.affine:
            self.weight = Parameter(np.ones(shape, dtype=np.float32))
            self.bias = Parameter(np.zeros(shape, dtype=np.float32))
        else:
            self.weight = None
            self.bias = None
        self.reset_parameters()

    def reset_parameters(self):
        """Reset the affine parameters: weight ones, bias zeros.

        Example:
            >>> ln = M.LayerNorm(4); ln.reset_parameters(); ln.weight.numpy()
            array([1., 1., 1., 1.], dtype=float32)
        """
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)


class LayerNorm(_AffineNorm):
    r"""Layer normalisation over the trailing ``normalized_shape`` axes of the input.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias`` with mean and (biased) variance over those axes.

    Args:
        normalized_shape: int or tuple, the trailing shape to normalise over.
        eps: added to the variance.
        affine: learn ``weight`` (ones) and ``bias`` (zeros) of shape ``normalized_shape``.

    Example:
        >>> ln = M.LayerNorm(4)
        >>> ln(mge.Tensor(np.random.randn(2, 4).astype("float32"))).shape
        (2, 4)
    """

    def __init__(self, normalized_shape, eps=1e-05, affine=True, **kwargs):
        super().__init__(**kwargs)
        if isinstance(normalized_shape, (int, np.integer)):
            normalized_shape = (int(normalized_shape),)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.affine = affine
        self._make_affine(self.normalized_shape)

    def forward(self, x):
        """Normalise ``x`` over its trailing ``normalized_shape`` axes."""
        return layer_norm(x, self.normalized_shape, self.affine, self.weight, self.bias, self.eps)

    def _module_info_string(self) -> str:
        return f"normalized_shape={self.normalized_shape}, eps={self.eps}, affine={self.affine}"


class GroupNorm(_AffineNorm):
    r"""Group normalisation: channels are split into ``num_groups`` groups, each normalised per sample.

    Args:
        num_groups: the number of groups; must divide ``num_channels``.
        num_channels: the number of channels C (axis 1).
        eps: added to the variance.
        affine: learn per-channel ``weight`` (ones) and ``bias`` (zeros) of shape ``(C,)``.

    Example:
        >>> gn = M.GroupNorm(2, 4)
        >>> gn(mge.Tensor(np.random.randn(2, 4, 3, 3).astype("float32"))).shape
        (2, 4, 3, 3)
    """

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, **kwargs):
        super().__init__(**kwargs)
        if num_channels % num_groups != 0:
            raise LayerArgumentError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        self._make_affine((num_channels,))

    def forward(self, x):
        """Normalise ``x`` ``(N, C, ...)`` per sample and channel group."""
        return group_norm(x, self.num_groups, self.affine, self.weight, self.bias, self.eps)

    def _module_info_string(self) -> str:
        return f"groups={self.num_groups}, channels={self.num_channels}, eps={self.eps}, affine={self.affine}"


class InstanceNorm(_AffineNorm):
    r"""Instance normalisation: each channel of each sample is normalised over its spatial axes.

    Args:
        num_channels: the number of channels C (axis 1).
        eps: added to the variance.
        affine: learn per-channel ``weight`` (ones) and ``bias`` (zeros) of shape ``(C,)``.

    Example:
        >>> m = M.InstanceNorm(4)
        >>> m(mge.Tensor(np.random.randn(2, 4, 3, 3).astype("float32"))).shape
        (2, 4, 3, 3)
    """

    def __init__(self, num_channels, eps=1e-05, affine=True, **kwargs):
        super().__init__(**kwargs)
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        self._make_affine((num_channels,))

    def forward(self, x):
        """Normalise ``x`` ``(N, C, ...)`` per sample and channel."""
        return instance_norm(x, self.affine, self.weight, self.bias, self.eps)

    def _module_info_string(self) -> str:
        return f"channels={self.num_channels}, eps={self.eps}, affine={self.affine}"


class GeneralNorm(_AffineNorm):
    r"""Normalisation over arbitrary axes: mean and (biased) variance over ``normalized_axis``, then an
    optional affine transform with parameters shaped like the normalised axes.

    Args:
        normalized_shape: int or tuple: the sizes of the normalised axes (required when ``affine``), in axis
            order.
        normalized_axis: int or tuple: the axes (ascending; negative values count from the end).
        eps: added to the variance.
        affine: learn ``weight`` (ones) and ``bias`` (zeros) of shape ``normalized_shape``.

    Example:
        >>> m = M.GeneralNorm((2, 3), (0, 1))
        >>> m(mge.Tensor(np.random.randn(2, 3, 4).astype("float32"))).shape
        (2, 3, 4)
    """

    def __init__(self, normalized_shape=None, normalized_axis=0, eps=1e-05, affine=True, **kwargs):
        super().__init__(**kwargs)
        # MegEngine keeps normalized_axis / normalized_shape as given (an int axis becomes a one-element list) and
        # its forward stores the axes made non-negative, as a list: its repr shows them so
        if isinstance(normalized_axis, (int, np.integer)):
            normalized_axis = [int(normalized_axis)]
        if isinstance(normalized_shape, (int, np.integer)):
            normalized_shape = (int(normalized_shape),)
        self.normalized_axis = normalized_axis
        axes = tuple(normalized_axis)
        if len(set(axes)) != len(axes):
            raise LayerArgumentError(f"GeneralNorm: duplicate axes in normalized_axis {self.normalized_axis}")
        if affine:
            if normalized_shape is None:
                raise LayerArgumentError("GeneralNorm: normalized_shape must be specified when affine is True")
            if len(normalized_shape) != len(axes):
                raise LayerArgumentError(f"GeneralNorm: normalized_shape {tuple(normalized_shape)} and "
                                         f"normalized_axis {self.normalized_axis} have different lengths")
        self.normalized_shape = normalized_shape
        self.eps = eps
        self.affine = affine
        self._make_affine(None if normalized_shape is None else tuple(normalized_shape))

    def forward(self, x):
        """Normalise ``x`` over ``normalized_axis``."""
        from .. import functional as F
        axes = [a + x.ndim if a < 0 else a for a in self.normalized_axis]
        if axes != sorted(axes):
            # The affine parameters are laid out in axis order; unsorted axes would silently misalign them.
            raise LayerArgumentError(f"GeneralNorm: normalized_axis {self.normalized_axis} must be ascending")
        self.normalized_axis = axes  # as MegEngine's forward
        return F.nn.general_norm(x, tuple(axes), self.affine, self.weight, self.bias, self.eps)

    def _module_info_string(self) -> str:
        return (f"normalized_shape={self.normalized_shape}, normalized_axis={self.normalized_axis}, "
                f"eps={self.eps}, affine={self.affine}")


class LocalResponseNorm(Module):
    r"""Local response normalisation across channels:
    ``y = x / (k + alpha * sum(x[c']^2 over a window of kernel_size channels around c)) ** beta``.

    Args:
        kernel_size: the (odd) channel window size.
        k: additive constant.
        alpha: scale of the squared sum.
        beta: exponent.

    Example:
        >>> m = M.LocalResponseNorm(3)
        >>> m(mge.Tensor(np.ones((1, 4, 2, 2), "float32"))).shape
        (1, 4, 2, 2)
    """

    def __init__(self, kernel_size: int = 5, k: float = 2.0, alpha: float = 1e-4, beta: float = 0.75, **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = kernel_size
        self.k = k
        self.alpha = alpha
        self.beta = beta

    def forward(self, inp):
        """``inp`` ``(N, C, ...)`` normalised across neighbouring channels."""
        from .. import functional as F
        return F.nn.local_response_norm(inp, self.kernel_size, self.k, self.alpha, self.beta)
