"""Padding as a module."""
from typing import Tuple

from ..functional.nn import pad
from .module import Module

__all__ = ["Pad"]


class Pad(Module):
    r"""Pad the input with ``pad_width = ((before, after), ...)``, one pair per axis.

    Args:
        pad_width: the per-axis padding amounts.
        mode: ``"constant"``, ``"reflect"`` or ``"replicate"`` (``"edge"``).
        constant_val: the fill value of ``"constant"`` mode.

    Example:
        >>> M.Pad(((1, 1),))(mge.Tensor([1.0, 2.0])).numpy()
        array([0., 1., 2., 0.], dtype=float32)
    """

    def __init__(self, pad_width: Tuple[Tuple[int, int], ...], mode: str = "constant", constant_val: float = 0.0):
        super().__init__()
        self.pad_width = pad_width
        self.mode = mode
        self.pad_val = constant_val

    def forward(self, src):
        """``src`` padded."""
        return pad(src, self.pad_width, self.mode, self.pad_val)
