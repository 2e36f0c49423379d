"""Stochastic gradient descent (``megengine.optimizer.SGD``)."""
from __future__ import annotations

from typing import Iterable, Union

from ..core._tensor import Parameter
from .optimizer import Optimizer, assign, hyper_tensor, uses

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

    def _updates(self, param_group):
        params = self._params_with_grad(param_group)
        if not params:
            return
        lr = hyper_tensor(param_group, "lr")
        weight_decay = hyper_tensor(param_group, "weight_decay") if uses(param_group, "weight_decay") else None
        # NOTE: whether momentum is used decides whether the momentum_buffer slot exists (MegEngine's state
        # layout), so this one branch depends on a hyper-parameter value.
        use_momentum = param_group["momentum"] != 0.0
        momentum = hyper_tensor(param_group, "momentum") if use_momentum else None
        for param in params:
            grad = param.grad if weight_decay is None else param.grad + param * weight_decay
            if use_momentum:
                state = self._state.setdefault(param, {})
                if "momentum_buffer" not in state:  # momentum was 0 when the group was created
                    self._add_state(param, "momentum_buffer")
                v = state["momentum_buffer"]
                assign(v, v * momentum + grad)
                grad = grad + v * momentum if self.nesterov else v
            assign(param, param - lr * grad)
