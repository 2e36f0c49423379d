"""Adadelta (``megengine.optimizer.Adadelta``)."""
from __future__ import annotations

from typing import Iterable, Union

import jax.numpy as jnp

from ..core._tensor import Parameter
from ._group_update import kept
from .optimizer import Optimizer, hyper_tensor, uses

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    r"""Adadelta, from `"ADADELTA: An Adaptive Learning Rate Method" <https://arxiv.org/abs/1212.5701>`_.

    With ``g = grad + weight_decay * param``, each step computes (MegEngine 1.13's formulas)::

        square_avg = rho * square_avg + (1 - rho) * g ** 2
        delta      = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
        param      = param - lr * delta
        acc_delta  = rho * acc_delta + (1 - rho) * delta ** 2

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: coefficient that scales delta before it is applied to the parameters. Default: 1.0
        rho: coefficient for the running averages of the squared gradient and update. Default: 0.9
        eps: term added to the denominator for numerical stability. Default: 1e-6
        weight_decay: weight decay (L2 penalty). Default: 0.0

    Returns:
        an optimizer whose :meth:`step` updates ``params`` in place; slots ``square_avg``, ``acc_delta``,
        ``step``.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> w = mge.Parameter([1.0])
        >>> opt = optim.Adadelta([w])
        >>> w.grad = mge.Tensor([2.0])
        >>> opt.step().clear_grad()   # 1 - sqrt(1e-6) / sqrt(0.1 * 4 + 1e-6) * 2
        >>> w.numpy().round(4)
        array([0.9968], dtype=float32)
    """

    def __init__(self, params: Union[Iterable[Parameter], dict], lr: float = 1.0, rho: float = 0.9,
                 eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay))

    def _create_state(self, param_group):
        for param in param_group["params"]:
            self._add_state(param, "square_avg")
            self._add_state(param, "acc_delta")
            self._add_state(param, "step", initializer=0.0)

    def _rule_inputs(self, param_group, params):
        owner = type(self).__name__
        use_wd = uses(param_group, "weight_decay")
        hypers = [hyper_tensor(param_group, k, owner=owner) for k in ("lr", "rho", "eps")]
        if use_wd:
            hypers.append(hyper_tensor(param_group, "weight_decay", owner=owner))
        slot_lists = [tuple(self._state[p][k] for k in ("square_avg", "acc_delta", "step")) for p in params]
        return (use_wd,), hypers, slot_lists


def _adadelta_prepare(flags, hypers):
    """Once per group: ``1 - rho`` appended to the hyper-parameters."""
    return (*hypers, 1.0 - hypers[1])


def _adadelta_rule(flags, hypers, p, g, slots):
    """Adadelta on arrays: ``flags = (weight decay term,)``; hypers (after :func:`_adadelta_prepare`)
    ``lr, rho, eps[, wd], 1 - rho``."""
    lr, rho, eps = hypers[:3]
    one_minus_rho = hypers[-1]
    square_avg, acc_delta, step = slots
    step = step + 1.0
    if flags[0]:
        g = g + kept(p * hypers[3])
    # (products kept apart from their sums, as MegEngine's separate ops round them -- see ``kept``)
    square_avg = kept(rho * square_avg) + kept(one_minus_rho * (g * g))
    delta = jnp.sqrt(acc_delta + eps) / kept(jnp.sqrt(square_avg + eps)) * g  # (kept: not a reciprocal square root)
    new_p = p - kept(lr * delta)
    acc_delta = kept(rho * acc_delta) + kept(one_minus_rho * (delta * delta))
    return new_p, (square_avg, acc_delta, step)


_adadelta_rule.prepare = _adadelta_prepare


Adadelta._rule = staticmethod(_adadelta_rule)
