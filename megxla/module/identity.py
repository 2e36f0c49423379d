"""The identity layer."""
from .module import Module

__all__ = ["Identity"]


class Identity(Module):
    r"""Returns its input unchanged (a placeholder, e.g. to remove a layer from a model).

    Example:
        >>> M.Identity()(mge.Tensor([1.0])).numpy()
        array([1.], dtype=float32)
    """

    def forward(self, x):
        """``x`` itself."""
        return x
