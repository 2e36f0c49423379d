"""Concatenation as a module (a quantizable stand-in for ``F.concat``)."""
from typing import Iterable

from ..core._tensor import Tensor
from ..functional.tensor import concat
from .module import Module

__all__ = ["Concat"]


class Concat(Module):
    r"""Concatenate a sequence of tensors along ``axis`` (``F.concat`` as a module, so it can be quantized).

    Example:
        >>> M.Concat()([mge.Tensor([1.0]), mge.Tensor([2.0])], axis=0).numpy()
        array([1., 2.], dtype=float32)
    """

    def forward(self, inps: Iterable[Tensor], axis: int = 0):
        """Concatenate ``inps`` along ``axis``."""
        return concat(inps, axis)
