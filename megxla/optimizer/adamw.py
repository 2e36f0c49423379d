"""AdamW: Adam with decoupled weight decay (``megengine.optimizer.AdamW``)."""
from __future__ import annotations

from typing import Iterable, Tuple, Union

from ..core._tensor import Parameter
from .adam import Adam

__all__ = ["AdamW"]


class AdamW(Adam):
    r"""AdamW, from `"Decoupled Weight Decay Regularization" <https://arxiv.org/abs/1711.05101>`_.

    The moments are Adam's, computed from the raw gradient; the weight decay is applied to the parameter
    directly, scaled by the learning rate (MegEngine 1.13's formulas)::

        exp_avg    = beta0 * exp_avg + (1 - beta0) * grad
        exp_avg_sq = beta1 * exp_avg_sq + (1 - beta1) * grad * grad
        delta      = (exp_avg / (1 - beta0**step)) / (sqrt(exp_avg_sq / (1 - beta1**step)) + eps)
        param      = param - lr * (delta + weight_decay * param)

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: learning rate.
        betas: coefficients for the running averages of the gradient and its square. Default: (0.9, 0.999)
        eps: term added to the denominator for numerical stability. Default: 1e-8
        weight_decay: decoupled weight decay factor. Default: 0.01

    Returns:
        an optimizer whose :meth:`step` updates ``params`` in place; slots ``exp_avg``, ``exp_avg_sq``, ``step``.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> w = mge.Parameter([1.0])
        >>> opt = optim.AdamW([w], lr=0.1, weight_decay=0.5)
        >>> w.grad = mge.Tensor([5.0])
        >>> opt.step().clear_grad()
        >>> w.numpy().round(4)  # 1 - 0.1 * (1 + 0.5 * 1)
        array([0.85], dtype=float32)
    """

    def __init__(self, params: Union[Iterable[Parameter], dict], lr: float,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2):
        # Same slots as Adam (its _create_state); only the update differs: decoupled weight decay.
        super().__init__(params, lr, betas, eps, weight_decay)

    _decoupled = True
