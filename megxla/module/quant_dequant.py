"""Quantization boundary markers; in a float model they are identities."""
from .module import Module

__all__ = ["QuantStub", "DequantStub"]


class QuantStub(Module):
    r"""Marks where a quantized model converts float input to quantized values; identity in float models.

    Example:
        >>> M.QuantStub()(mge.Tensor([1.0])).numpy()
        array([1.], dtype=float32)
    """

    def forward(self, inp):
        """``inp`` itself."""
        return inp


class DequantStub(Module):
    r"""Marks where a quantized model converts back to float; identity in float models.

    Example:
        >>> M.DequantStub()(mge.Tensor([1.0])).numpy()
        array([1.], dtype=float32)
    """

    def forward(self, inp):
        """``inp`` itself."""
        return inp
