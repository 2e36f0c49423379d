"""Adagrad (``megengine.optimizer.Adagrad``)."""
from __future__ import annotations

from typing import Iterable, Union

from .. import functional as F
from ..core._tensor import Parameter
from .optimizer import Optimizer, assign, hyper_tensor, uses

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    r"""Adagrad, from `"Adaptive Subgradient Methods for Online Learning and Stochastic Optimization"
    <http://jmlr.org/papers/v12/duchi11a.html>`_.

    With ``g = grad + weight_decay * param`` and a per-parameter ``step`` slot counting from 1, each step
    computes (MegEngine 1.13's formulas; note ``eps`` is added *inside* the square root)::

        square_avg = square_avg + g ** 2
        param      = param - lr / (1 + (step - 1) * lr_decay) * g / sqrt(square_avg + eps)

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: learning rate. Default: 0.01
        lr_decay: learning rate decay per step. Default: 0.0
        eps: term added to the denominator for numerical stability. Default: 1e-10
        weight_decay: weight decay (L2 penalty). Default: 0.0

    Returns:
        an optimizer whose :meth:`step` updates ``params`` in place; slots ``square_avg``, ``step``.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> w = mge.Parameter([1.0])
        >>> opt = optim.Adagrad([w], lr=0.5)
        >>> w.grad = mge.Tensor([2.0])
        >>> opt.step().clear_grad()
        >>> w.numpy().round(4)
        array([0.5], dtype=float32)
    """

    def __init__(self, params: Union[Iterable[Parameter], dict], lr: float = 1e-2, lr_decay: float = 0.0,
                 eps: float = 1e-10, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay))

    def _create_state(self, param_group):
        for param in param_group["params"]:
            self._add_state(param, "square_avg")
            self._add_state(param, "step", initializer=0.0)

    def _updates(self, param_group):
        params = self._params_with_grad(param_group)
        if not params:
            return
        lr = hyper_tensor(param_group, "lr")
        lr_decay = hyper_tensor(param_group, "lr_decay")
        eps = hyper_tensor(param_group, "eps")
        weight_decay = hyper_tensor(param_group, "weight_decay") if uses(param_group, "weight_decay") else None
        for param in params:
            states = self._state[param]
            step, square_avg = states["step"], states["square_avg"]
            assign(step, step + 1.0)
            grad = param.grad if weight_decay is None else param.grad + param * weight_decay
            assign(square_avg, square_avg + grad * grad)
            delta = grad / F.sqrt(square_avg + eps)
            clr = lr / (1.0 + (step - 1.0) * lr_decay)
            assign(param, param - clr * delta)
