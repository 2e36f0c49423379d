"""``BatchMatMulActivation``: a batch of independent linear maps, ``act(weight @ x + bias)``."""
import numpy as np

from ..core._dispatch import OpError
from ..core._tensor import Parameter, Tensor
from ..functional.math import matmul
from ..functional.nn import relu
from . import init
from .module import Module

__all__ = ["BatchMatMulActivation"]

_MODES = ("identity", "relu")


class BatchMatMulActivation(Module):
    r"""Batched matmul with an activation, no transpose anywhere: ``act(matmul(weight, x) + bias)``.

    ``weight`` is ``(batch, out_features, in_features)`` and ``x`` is ``(batch, in_features, K)``, so the
    product is ``(batch, out_features, K)``. As in MegEngine, the ``(out_features,)`` bias is added with
    ordinary broadcasting, i.e. along the LAST axis of the product: with ``bias=True`` the input must be
    ``(batch, in_features, out_features)`` (or ``K = 1``).

    Args:
        batch: number of independent matrices (the leading axis of ``weight`` and ``x``).
        in_features: contracted size.
        out_features: rows of each product.
        bias: learn a ``(out_features,)`` bias.
        nonlinear_mode: ``"identity"`` or ``"relu"`` (the modes MegEngine's float module applies).

    Attributes:
        weight: ``(batch, out_features, in_features)``, from N(0, 1 / in_features).
        bias: ``(out_features,)`` zeros, or None.

    Example:
        >>> m = M.BatchMatMulActivation(2, 3, 4, nonlinear_mode="relu")
        >>> y = m(mge.Tensor(np.ones((2, 3, 4), "float32")))
        >>> y.shape, bool((y.numpy() >= 0).all())
        ((2, 4, 4), True)
    """

    def __init__(self, batch: int, in_features: int, out_features: int, bias: bool = True,
                 nonlinear_mode="identity", **kwargs):
        super().__init__(**kwargs)
        for name, v in (("batch", batch), ("in_features", in_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise ValueError(f"BatchMatMulActivation: {name} must be a positive int, got {v!r}")
        mode = str(nonlinear_mode).lower()
        if mode not in _MODES:
            # MegEngine silently computes "identity" for any other mode; an error is less surprising.
            raise ValueError(f"BatchMatMulActivation: nonlinear_mode must be one of {_MODES}, got "
                             f"{nonlinear_mode!r}")
        self.batch = int(batch)
        self.out_features = int(out_features)
        self.in_features = int(in_features)
        self.weight = Parameter(np.zeros((self.batch, self.out_features, self.in_features), dtype=np.float32))
        self.bias = Parameter(np.zeros((self.out_features,), dtype=np.float32)) if bias else None
        self.nonlinear_mode = mode
        self.reset_parameters()

    def _get_fanin(self):
        return self.in_features

    def reset_parameters(self) -> None:
        """Re-initialise: weight from N(0, 1 / in_features), bias zeros (MegEngine's defaults).

        Example:
            >>> M.BatchMatMulActivation(2, 3, 4).reset_parameters()
        """
        init.normal_(self.weight, 0.0, float(np.sqrt(1 / self._get_fanin())))
        if self.bias is not None:
            init.zeros_(self.bias)

    def _calc_linear(self, x, weight, bias):
        res = matmul(weight, x)
        if bias is not None:
            res = res + bias
        if self.nonlinear_mode == "relu":
            res = relu(res)
        return res

    def forward(self, x):
        """``act(matmul(weight, x) + bias)`` for ``x`` ``(batch, in_features, K)``."""
        shape = tuple(getattr(x, "shape", np.shape(x)))
        # (OpError: a ValueError and the RuntimeError MegEngine's kernels raise for a bad shape)
        if len(shape) != 3 or shape[0] != self.batch or shape[1] != self.in_features:
            raise OpError(f"BatchMatMulActivation: input must be (batch={self.batch}, "
                          f"in_features={self.in_features}, K), got {shape}")
        if self.bias is not None and self.out_features != 1 and shape[2] not in (1, self.out_features):
            raise OpError(f"BatchMatMulActivation: the (out_features={self.out_features},) bias is added along "
                          f"the last axis (as in MegEngine), so K must be {self.out_features}, got input {shape}")
        return self._calc_linear(x if isinstance(x, Tensor) else Tensor(x), self.weight, self.bias)

    def _module_info_string(self) -> str:
        return (f"batch={self.batch}, in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
