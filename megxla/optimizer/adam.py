"""Adam (``megengine.optimizer.Adam``)."""
from __future__ import annotations

from typing import Iterable, Tuple, Union

from .. import functional as F
from ..core._tensor import Parameter
from .optimizer import Optimizer, assign, hyper_tensor, uses

__all__ = ["Adam"]


def _moment_hypers(group):
    """``(beta0, beta1, eps)`` of a group as tensors, made once per group and step."""
    return hyper_tensor(group, "betas", 0), hyper_tensor(group, "betas", 1), hyper_tensor(group, "eps")


def _adam_moments(states, grad, beta0, beta1, eps):
    """Advance the ``step``, ``exp_avg`` and ``exp_avg_sq`` slots by one gradient and return the bias-corrected
    update direction ``m_hat / (sqrt(v_hat) + eps)`` (shared by Adam and AdamW)."""
    step, exp_avg, exp_avg_sq = states["step"], states["exp_avg"], states["exp_avg_sq"]
    assign(step, step + 1.0)
    assign(exp_avg, exp_avg * beta0 + grad * (1.0 - beta0))
    assign(exp_avg_sq, exp_avg_sq * beta1 + (1.0 - beta1) * (grad * grad))
    return (exp_avg / (1.0 - beta0 ** step)) / (F.sqrt(exp_avg_sq / (1.0 - beta1 ** step)) + eps)


class Adam(Optimizer):
    r"""Adam, from `"Adam: A Method for Stochastic Optimization" <https://arxiv.org/abs/1412.6980>`_.

    With ``g = grad + weight_decay * param`` (L2 penalty added to the gradient) and a per-parameter ``step``
    slot counting from 1, each step computes (MegEngine 1.13's formulas)::

        exp_avg    = beta0 * exp_avg + (1 - beta0) * g
        exp_avg_sq = beta1 * exp_avg_sq + (1 - beta1) * g * g
        param      = param - lr * (exp_avg / (1 - beta0**step)) / (sqrt(exp_avg_sq / (1 - beta1**step)) + eps)

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: learning rate.
        betas: coefficients for the running averages of the gradient and its square. Default: (0.9, 0.999)
        eps: term added to the denominator for numerical stability. Default: 1e-8
        weight_decay: weight decay (L2 penalty). Default: 0.0

    Returns:
        an optimizer whose :meth:`step` updates ``params`` in place; slots ``exp_avg``, ``exp_avg_sq``, ``step``.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> w = mge.Parameter([1.0])
        >>> opt = optim.Adam([w], lr=0.1)
        >>> w.grad = mge.Tensor([5.0])
        >>> opt.step().clear_grad()
        >>> w.numpy().round(4)
        array([0.9], dtype=float32)
    """

    def __init__(self, params: Union[Iterable[Parameter], dict], lr: float,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))

    def _create_state(self, param_group):
        for param in param_group["params"]:
            self._add_state(param, "exp_avg")
            self._add_state(param, "exp_avg_sq")
            self._add_state(param, "step", initializer=0.0)

    def _updates(self, param_group):
        params = self._params_with_grad(param_group)
        if not params:
            return
        lr = hyper_tensor(param_group, "lr")
        weight_decay = hyper_tensor(param_group, "weight_decay") if uses(param_group, "weight_decay") else None
        moments = _moment_hypers(param_group)
        for param in params:
            grad = param.grad if weight_decay is None else param.grad + param * weight_decay
            delta = _adam_moments(self._state[param], grad, *moments)
            assign(param, param - lr * delta)
