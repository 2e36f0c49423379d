"""Activation layers."""
import numpy as np

from ..core._tensor import Parameter
from ..functional.elemwise import gelu, relu, sigmoid, silu
from ..functional.nn import leaky_relu, prelu, softmax
from .module import Module

__all__ = ["Softmax", "Sigmoid", "ReLU", "PReLU", "LeakyReLU", "SiLU", "GELU"]


class Softmax(Module):
    r"""``softmax(x) = exp(x) / sum(exp(x))`` along ``axis``.

    Args:
        axis: the axis; None uses MegEngine's default (0 for 0-, 1- and 3-D inputs, else 1).

    Example:
        >>> M.Softmax(axis=1)(mge.Tensor([[1.0, 1.0]])).numpy()
        array([[0.5, 0.5]], dtype=float32)
    """

    def __init__(self, axis=None, **kwargs):
        super().__init__(**kwargs)
        self.axis = axis

    def forward(self, inputs):
        """Softmax of ``inputs`` along ``axis``."""
        return softmax(inputs, self.axis)

    def _module_info_string(self) -> str:
        return f"axis={self.axis}"


class Sigmoid(Module):
    r"""``sigmoid(x) = 1 / (1 + exp(-x))``, elementwise.

    Example:
        >>> M.Sigmoid()(mge.Tensor([0.0])).numpy()
        array([0.5], dtype=float32)
    """

    def forward(self, inputs):
        """Elementwise sigmoid."""
        return sigmoid(inputs)


class SiLU(Module):
    r"""``silu(x) = x * sigmoid(x)``, elementwise.

    Example:
        >>> M.SiLU()(mge.Tensor([0.0])).numpy()
        array([0.], dtype=float32)
    """

    def forward(self, inputs):
        """Elementwise SiLU."""
        return silu(inputs)


class GELU(Module):
    r"""``gelu(x) = x * Phi(x)`` with Phi the standard normal CDF, elementwise.

    Example:
        >>> M.GELU()(mge.Tensor([0.0])).numpy()
        array([0.], dtype=float32)
    """

    def forward(self, inputs):
        """Elementwise GELU."""
        return gelu(inputs)


class ReLU(Module):
    r"""``relu(x) = max(x, 0)``, elementwise.

    Example:
        >>> M.ReLU()(mge.Tensor([-1.0, 2.0])).numpy()
        array([0., 2.], dtype=float32)
    """

    def forward(self, x):
        """Elementwise ReLU."""
        return relu(x)


class PReLU(Module):
    r"""``prelu(x) = max(0, x) + weight * min(0, x)`` with a learnable slope.

    Args:
        num_parameters: 1 (one shared slope, weight shape ``(1,)``) or the number of channels C
            (per-channel slopes, weight shape ``(1, C, 1, 1)``).
        init: the initial slope.

    Example:
        >>> M.PReLU()(mge.Tensor([-1.0, 2.0])).numpy()
        array([-0.25,  2.  ], dtype=float32)
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25, **kwargs):
        super().__init__(**kwargs)
        self.num_parameters = num_parameters
        if num_parameters > 1:
            # Per-channel slopes in the NCHW broadcast layout, as MegEngine.
            self.weight = Parameter(np.full((1, num_parameters, 1, 1), init, dtype=np.float32))
        else:
            self.weight = Parameter(np.array([init], dtype=np.float32))

    def forward(self, inputs):
        """Elementwise PReLU."""
        return prelu(inputs, self.weight)


class LeakyReLU(Module):
    r"""``leaky_relu(x) = x if x > 0 else negative_slope * x``, elementwise.

    Args:
        negative_slope: slope for negative inputs.

    Example:
        >>> M.LeakyReLU(0.1)(mge.Tensor([-1.0, 2.0])).numpy()
        array([-0.1,  2. ], dtype=float32)
    """

    def __init__(self, negative_slope: float = 0.01, **kwargs):
        super().__init__(**kwargs)
        self.negative_slope = negative_slope

    def forward(self, inputs):
        """Elementwise leaky ReLU."""
        return leaky_relu(inputs, self.negative_slope)
