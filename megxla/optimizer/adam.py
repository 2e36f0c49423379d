"""Adam (``megengine.optimizer.Adam``)."""
from __future__ import annotations

from typing import Iterable, Tuple, Union

import jax.numpy as jnp

from ..core._tensor import Parameter
from ..core._rounding import divide
from ..core.ops.elemwise import _pow
from ._group_update import kept
from .optimizer import Optimizer, hyper_tensor, uses

__all__ = ["Adam"]


def _moment_hypers(group, owner):
    """``(beta0, beta1, eps)`` of a group as tensors, made once per group and step."""
    return (hyper_tensor(group, "betas", 0, owner=owner), hyper_tensor(group, "betas", 1, owner=owner),
            hyper_tensor(group, "eps", owner=owner))


def _adam_moments(slots, grad, beta0, beta1, eps, one_minus=None):
    """Advance the ``exp_avg``, ``exp_avg_sq`` and ``step`` slot values by one gradient; returns the new slot
    values and the bias-corrected update direction ``m_hat / (sqrt(v_hat) + eps)`` (Adam and AdamW).
    ``one_minus``: ``(1 - beta0, 1 - beta1)`` when the caller computed them once for a whole group."""
    exp_avg, exp_avg_sq, step = slots
    omb0, omb1 = one_minus if one_minus is not None else (1.0 - beta0, 1.0 - beta1)
    step = step + 1.0
    # (each product kept apart from the sum reading it: MegEngine's separate ops round it -- see ``kept``)
    exp_avg = kept(exp_avg * beta0) + kept(grad * omb0)
    exp_avg_sq = kept(exp_avg_sq * beta1) + kept(omb1 * (grad * grad))
    # NOTE: ``step`` is a per-parameter slot (MegEngine's state layout), so the bias corrections stay per
    # parameter: the steps of a group's parameters may differ (a parameter that got no gradient for a while).
    # (IEEE divisions by the broadcast corrections, as MegEngine's kernels: XLA would multiply by reciprocals; the
    # first quotient kept, or XLA makes ``(a / b) / c`` one division by ``b * c``)
    m_hat = kept(divide(exp_avg, 1.0 - _pow(beta0, step)))
    delta = m_hat / (jnp.sqrt(divide(exp_avg_sq, 1.0 - _pow(beta1, step))) + eps)
    return (exp_avg, exp_avg_sq, step), delta


def _adam_prepare(flags, hypers):
    """Once per group: ``1 - beta0`` and ``1 - beta1`` appended to the hyper-parameters."""
    return (*hypers, 1.0 - hypers[1], 1.0 - hypers[2])


def _adam_rule(flags, hypers, p, g, slots):
    """Adam / AdamW on arrays: ``flags = (weight decay term, decoupled)``; hypers (after :func:`_adam_prepare`)
    ``lr, beta0, beta1, eps[, wd], 1 - beta0, 1 - beta1``."""
    use_wd, decoupled = flags
    lr, beta0, beta1, eps = hypers[:4]
    if use_wd and not decoupled:
        g = g + kept(p * hypers[4])
    new_slots, delta = _adam_moments(slots, g, beta0, beta1, eps, hypers[-2:])
    if use_wd and decoupled:
        delta = delta + kept(p * hypers[4])
    return p - kept(lr * delta), new_slots


_adam_rule.prepare = _adam_prepare


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
        # one step count for the group while its parameters step together (see _add_shared_state)
        self._add_shared_state(param_group["params"], "step")

    _decoupled = False  # AdamW: the weight decay is applied to the parameter, not added to the gradient

    def _rule_inputs(self, param_group, params):
        owner = type(self).__name__
        use_wd = uses(param_group, "weight_decay")
        hypers = [hyper_tensor(param_group, "lr", owner=owner), *_moment_hypers(param_group, owner)]
        if use_wd:
            hypers.append(hyper_tensor(param_group, "weight_decay", owner=owner))
        if len(params) < len(param_group["params"]):
            self._unshare(param_group, params, "step")
        slot_lists = [(st["exp_avg"], st["exp_avg_sq"], st["step"]) for st in map(self._state.__getitem__, params)]
        return (use_wd, self._decoupled), hypers, slot_lists


Adam._rule = staticmethod(_adam_rule)
