"""Linear + BatchNorm1d (+ ReLU) fused-pattern modules (float versions; quantization fuses them)."""
import numpy as np

from ..core._tensor import Parameter
from ..functional.elemwise import relu
from .batchnorm import BatchNorm1d
from .linear import Linear
from .module import Module

__all__ = ["LinearBn1d", "LinearBnRelu1d"]


class _LinearBnActivation1d(Module):
    def __init__(self, in_features, out_features, bias=True, compute_mode="default", eps=1e-5, momentum=0.9,
                 affine=True, track_running_stats=True, **kwargs):
        super().__init__(**kwargs)
        self.out_features = out_features
        self.in_features = in_features
        # NOTE: MegEngine 1.13 has this top-level zero `bias` (used when quantization fuses the pattern, not by
        # the float forward, which uses linear.bias); kept so state_dict keys match MegEngine's checkpoints.
        self.bias = None
        if bias:
            self.bias = Parameter(np.zeros((out_features,), dtype=np.float32))
        self.linear = Linear(in_features, out_features, bias, compute_mode, **kwargs)
        self.bn = BatchNorm1d(out_features, eps, momentum, affine, track_running_stats)


class LinearBn1d(_LinearBnActivation1d):
    r"""``bn(linear(x))`` with sub-modules ``linear`` (:class:`Linear`) and ``bn`` (:class:`BatchNorm1d`), plus
    MegEngine's top-level ``bias`` Parameter (zeros, ``(out_features,)``, with ``bias=True``; unused by ``forward``).

    Args:
        in_features, out_features, bias, compute_mode: as :class:`Linear`.
        eps, momentum, affine, track_running_stats: as :class:`BatchNorm1d`.

    Example:
        >>> m = M.LinearBn1d(4, 3)
        >>> m(mge.Tensor(np.random.randn(5, 4).astype("float32"))).shape
        (5, 3)
        >>> sorted(m.state_dict())[:3]
        ['bias', 'bn.bias', 'bn.running_mean']
    """

    def forward(self, inp):
        """``bn(linear(inp))``."""
        return self.bn(self.linear(inp))


class LinearBnRelu1d(_LinearBnActivation1d):
    r"""``relu(bn(linear(x)))`` with sub-modules ``linear`` and ``bn``.

    Args:
        as :class:`LinearBn1d`.

    Example:
        >>> m = M.LinearBnRelu1d(4, 3)
        >>> m(mge.Tensor(np.random.randn(5, 4).astype("float32"))).shape
        (5, 3)
    """

    def forward(self, inp):
        """``relu(bn(linear(inp)))``."""
        return relu(self.bn(self.linear(inp)))
