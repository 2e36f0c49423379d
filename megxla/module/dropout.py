"""Dropout."""
from ..functional.nn import dropout
from .module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    r"""In training, zero each element with probability ``drop_prob`` and scale the rest by
    ``1 / (1 - drop_prob)``; in evaluation, the identity.

    Masks are drawn from the global ``megxla.random`` generator (``megxla.random.seed`` makes them
    reproducible).

    Args:
        drop_prob: the probability of dropping an element, in ``[0, 1)``.

    Example:
        >>> m = M.Dropout(0.5); m.eval()
        >>> m(mge.Tensor([1.0, 2.0])).numpy()
        array([1., 2.], dtype=float32)
    """

    def __init__(self, drop_prob=0.0, **kwargs):
        super().__init__(**kwargs)
        self.drop_prob = drop_prob

    def forward(self, inputs):
        """Dropout in training mode, identity otherwise."""
        if self.training:
            return dropout(inputs, self.drop_prob, training=True)
        return inputs

    def _module_info_string(self) -> str:
        return f"drop_prob={self.drop_prob}"
