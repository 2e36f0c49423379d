"""Fully connected layers."""
import numpy as np

from ..core._tensor import Parameter
from ..functional.nn import linear, relu
from . import init
from .module import Module

__all__ = ["Linear", "LinearRelu"]


class Linear(Module):
    r"""Applies a linear transformation ``y = x @ weight.T + bias``.

    Args:
        in_features: size of each input sample (the last axis).
        out_features: size of each output sample.
        bias: learn an additive bias.
        compute_mode: ``"default"`` or ``"float32"`` (accepted for MegEngine compatibility).

    Attributes:
        weight: ``(out_features, in_features)``, initialised from N(0, 1 / in_features).
        bias: ``(out_features,)``, initialised to zeros (None without bias).

    Example:
        >>> m = M.Linear(4, 3)
        >>> m(mge.Tensor(np.ones((2, 4), "float32"))).shape
        (2, 3)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, compute_mode: str = "default",
                 **kwargs):
        super().__init__(**kwargs)
        self.out_features = out_features
        self.in_features = in_features
        self.compute_mode = compute_mode
        self.weight = Parameter(np.zeros((out_features, in_features), dtype=np.float32))
        self.bias = Parameter(np.zeros((out_features,), dtype=np.float32)) if bias else None
        self.reset_parameters()

    def _get_fanin(self):
        return self.in_features

    def reset_parameters(self) -> None:
        """Re-initialise: weight from N(0, 1 / fan_in), bias zeros (MegEngine's defaults).

        Example:
            >>> m = M.Linear(4, 3); m.reset_parameters(); float(abs(m.bias).sum())
            0.0
        """
        std = np.sqrt(1 / self._get_fanin())
        init.normal_(self.weight, 0.0, std)
        if self.bias is not None:
            init.zeros_(self.bias)

    def calc_linear(self, x, weight, bias):
        """The linear transform of ``x`` with the given weight and bias (hook for quantized sub-classes).

        Example:
            >>> m = M.Linear(4, 3); x = mge.Tensor(np.ones((2, 4), "float32"))
            >>> m.calc_linear(x, m.weight, m.bias).shape
            (2, 3)
        """
        return linear(x, weight, bias, compute_mode=self.compute_mode)

    def forward(self, x):
        """``x @ weight.T + bias`` over the last axis of ``x``."""
        return self.calc_linear(x, self.weight, self.bias)

    def _module_info_string(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class LinearRelu(Linear):
    r"""A :class:`Linear` followed by ReLU (the float counterpart of the quantized fused module).

    Args:
        in_features, out_features, bias, compute_mode: as :class:`Linear`.

    Example:
        >>> m = M.LinearRelu(4, 3)
        >>> bool((m(mge.Tensor(np.ones((2, 4), "float32"))).numpy() >= 0).all())
        True
    """

    def forward(self, inp):
        """``relu(inp @ weight.T + bias)``."""
        return relu(self.calc_linear(inp, self.weight, self.bias))
