"""Stochastic gradient descent (``megengine.optimizer.SGD``)."""
from __future__ import annotations

from typing import Iterable, Union

import jax.numpy as jnp

from ..core._tensor import Parameter, Tensor
from ._group_update import kept
from .optimizer import HyperParameterError, Optimizer, host_fact, hyper_tensor, uses

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
            # (MegEngine asserts it: an AssertionError, and a ValueError)
            raise HyperParameterError("Nesterov momentum requires a momentum")
        # As in MegEngine, nesterov is an optimizer attribute, not a group hyper-parameter (state_dict layout).
        self.nesterov = nesterov
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    _OPTIONAL_SLOTS = ("momentum_buffer",)

    def _create_state(self, param_group):
        if _nonzero(dict.__getitem__(param_group, "momentum")):
            for param in param_group["params"]:
                self._add_state(param, "momentum_buffer")

    def _hyper_changed(self, param_group, key):
        # momentum 0 -> non-zero: the slots MegEngine's layout has for a momentum group exist from now on, so
        # a compiled step sees a new state structure (it records again) instead of ignoring momentum.
        if key == "momentum" and _nonzero(dict.__getitem__(param_group, "momentum")):
            for param in param_group["params"]:
                if "momentum_buffer" not in self._state.get(param, {}):
                    self._add_state(param, "momentum_buffer")

    def _rule_inputs(self, param_group, params):
        owner = type(self).__name__
        use_wd = uses(param_group, "weight_decay")
        hypers = [hyper_tensor(param_group, "lr", owner=owner)]
        if use_wd:
            hypers.append(hyper_tensor(param_group, "weight_decay", owner=owner))
        if _nonzero(dict.__getitem__(param_group, "momentum")):
            for param in params:  # momentum was 0 when the group was created and changed without assignment
                if "momentum_buffer" not in self._state.get(param, {}):
                    self._add_state(param, "momentum_buffer")
        # MegEngine's ``if momentum != 0`` (the buffer is left as it is at momentum 0) and ``if nesterov``: facts
        # a compiled step depends on (it records again when one changes); the momentum value is a graph input.
        has_slot = all("momentum_buffer" in self._state.get(p, {}) for p in params)
        on = has_slot and uses(param_group, "momentum")
        nesterov = on and host_fact(lambda: bool(self.nesterov))
        slot_lists = [(self._state[p]["momentum_buffer"],) if on else () for p in params]
        if on:
            hypers.append(hyper_tensor(param_group, "momentum", owner=owner))
        return (use_wd, on, nesterov), hypers, slot_lists


def _nonzero(value):
    # a Tensor momentum counts as non-zero without reading it (no host sync in a traced step): with the slot,
    # a zero momentum updates as plain SGD does (buf = 0 * buf + grad)
    return isinstance(value, Tensor) or float(value) != 0.0


def _sgd_rule(flags, hypers, p, g, slots):
    """SGD on arrays: ``flags = (weight decay term, momentum, nesterov)``; hypers ``lr[, wd][, momentum]``."""
    use_wd, on, nesterov = flags
    lr = hypers[0]
    # (each product kept apart from the sum reading it: MegEngine's separate ops round it -- see ``kept``)
    if use_wd:
        g = g + kept(p * hypers[1])
    if not on:
        return p - kept(lr * g), ()
    momentum = hypers[-1]
    # NOTE: momentum broadcast once, used twice (JAX's lowering does not share the broadcasts of ``v * m`` and
    # ``new_v * m``); same values, one op less per parameter.
    m = jnp.broadcast_to(momentum, slots[0].shape)
    new_v = kept(slots[0] * m) + g
    d = g + kept(new_v * m) if nesterov else new_v
    return p - kept(lr * d), (new_v,)


SGD._rule = staticmethod(_sgd_rule)
