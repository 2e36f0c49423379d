"""Adagrad (``megengine.optimizer.Adagrad``)."""
from __future__ import annotations

from typing import Iterable, Union

import jax.numpy as jnp

from ..core._tensor import Parameter
from ._group_update import kept
from .optimizer import Optimizer, hyper_tensor, uses

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

    def _rule_inputs(self, param_group, params):
        owner = type(self).__name__
        use_wd = uses(param_group, "weight_decay")
        hypers = [hyper_tensor(param_group, k, owner=owner) for k in ("lr", "lr_decay", "eps")]
        if use_wd:
            hypers.append(hyper_tensor(param_group, "weight_decay", owner=owner))
        slot_lists = [(self._state[p]["square_avg"], self._state[p]["step"]) for p in params]
        return (use_wd,), hypers, slot_lists


def _adagrad_rule(flags, hypers, p, g, slots):
    """Adagrad on arrays: ``flags = (weight decay term,)``; hypers ``lr, lr_decay, eps[, wd]``."""
    lr, lr_decay, eps = hypers[:3]
    square_avg, step = slots
    step = step + 1.0
    if flags[0]:
        g = g + kept(p * hypers[3])
    square_avg = square_avg + kept(g * g)  # (products kept apart from their sums, as MegEngine's ops)
    delta = g / kept(jnp.sqrt(square_avg + eps))  # (kept: XLA would multiply by a reciprocal square root)
    clr = lr / (1.0 + kept((step - 1.0) * lr_decay))
    return p - kept(clr * delta), (square_avg, step)


Adagrad._rule = staticmethod(_adagrad_rule)
