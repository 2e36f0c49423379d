"""Stochastic gradient descent (``megengine.optimizer.SGD``)."""
from __future__ import annotations

from typing import Iterable, Union

import jax.numpy as jnp

from ..core._tensor import Parameter
from ._group_update import select
from .optimizer import Optimizer, host_scalar, hyper_tensor, uses

__all__ = ["SGD"]


class SGD(Optimizer):
    r"""Stochastic gradient descent, optionally with (Nesterov) momentum and L2 weight decay.

    With ``g = grad + weight_decay * param``, each step computes (MegEngine 1.13's formulas)::

        v = momentum * v + g                      # slot "momentum_buffer", only if momentum != 0
        g = g + momentum * v if nesterov else v
        param = param - lr * g

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: learning rate.
        momentum: momentum factor. Default: 0.0
        nesterov: enables Nesterov momentum (requires ``momentum > 0``). Default: False
        weight_decay: weight decay (L2 penalty). Default: 0.0

    Returns:
        an optimizer whose :meth:`step` updates ``params`` in place.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> w = mge.Parameter([1.0, 2.0])
        >>> opt = optim.SGD([w], lr=0.1, momentum=0.9)
        >>> w.grad = mge.Tensor([1.0, 1.0])
        >>> opt.step().clear_grad()
        >>> w.numpy()
        array([0.9, 1.9], dtype=float32)
    """

    def __init__(self, params: Union[Iterable[Parameter], dict], lr: float, momentum: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0):
        if nesterov and not momentum > 0.0:
            raise ValueError("SGD: Nesterov momentum requires a momentum > 0")
        # As in MegEngine, nesterov is an optimizer attribute, not a group hyper-parameter (state_dict layout).
        self.nesterov = nesterov
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    def _create_state(self, param_group):
        if param_group["momentum"] != 0.0:
            for param in param_group["params"]:
                self._add_state(param, "momentum_buffer")

    def _hyper_changed(self, param_group, key):
        # momentum 0 -> non-zero: the slots MegEngine's layout has for a momentum group exist from now on, so
        # a compiled step sees a new state structure (it records again) instead of ignoring momentum.
        if key == "momentum" and _nonzero(param_group["momentum"]):
            for param in param_group["params"]:
                if "momentum_buffer" not in self._state.get(param, {}):
                    self._add_state(param, "momentum_buffer")

    def _rule_inputs(self, param_group, params):
        owner = type(self).__name__
        use_wd = uses(param_group, "weight_decay")
        hypers = [hyper_tensor(param_group, "lr", owner=owner)]
        if use_wd:
            hypers.append(hyper_tensor(param_group, "weight_decay", owner=owner))
        if _nonzero(param_group["momentum"]):
            for param in params:  # momentum was 0 when the group was created and changed without assignment
                if "momentum_buffer" not in self._state.get(param, {}):
                    self._add_state(param, "momentum_buffer")
        # NOTE: with the slot present, momentum and nesterov are inputs (a compiled step re-reads them) and the
        # rule selects on momentum != 0, as MegEngine's ``if momentum != 0`` does eagerly.
        has_slot = all("momentum_buffer" in self._state.get(p, {}) for p in params)
        slot_lists = [(self._state[p]["momentum_buffer"],) if has_slot else () for p in params]
        if has_slot:
            hypers.append(hyper_tensor(param_group, "momentum", owner=owner))
            hypers.append(host_scalar(lambda: float(bool(self.nesterov)), "float32", (id(self), "nesterov")))
        return (use_wd, has_slot), hypers, slot_lists


def _nonzero(value):
    return float(value) != 0.0


def _sgd_prepare(flags, hypers):
    """Once per group: ``momentum != 0`` and ``nesterov != 0`` as 0-d predicates (the rule selects on them)."""
    if not flags[1]:
        return hypers
    i = 2 if flags[0] else 1
    momentum, nesterov = hypers[i], hypers[i + 1]
    return (*hypers[:i], momentum, momentum != 0.0, nesterov != 0.0)


def _sgd_rule(flags, hypers, p, g, slots):
    """SGD on arrays: ``flags = (weight decay term, momentum slot)``; hypers (after :func:`_sgd_prepare`)
    ``lr[, wd][, momentum, momentum != 0, nesterov != 0]``."""
    use_wd, has_slot = flags
    lr = hypers[0]
    i = 1
    if use_wd:
        g = g + p * hypers[1]
        i = 2
    if not has_slot:
        return p - lr * g, ()
    momentum, on, nesterov = hypers[i:i + 3]
    v = slots[0]
    # NOTE: momentum broadcast once, used twice (JAX's lowering does not share the broadcasts of ``v * m`` and
    # ``new_v * m``); same values, one op less per parameter.
    m = jnp.broadcast_to(momentum, v.shape)
    new_v = select(on, v * m + g, v)
    d = select(on, select(nesterov, g + new_v * m, new_v), g)
    return p - lr * d, (new_v,)


_sgd_rule.prepare = _sgd_prepare
SGD._rule = staticmethod(_sgd_rule)
