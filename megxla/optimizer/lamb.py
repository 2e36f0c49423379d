"""LAMB and its float16 variant (``megengine.optimizer.LAMB``, ``megengine.optimizer.LAMBFp16``)."""
from __future__ import annotations

from typing import Iterable, Tuple, Union

import jax.numpy as jnp

from ..core._tensor import Parameter, Tensor
from ..core.ops.elemwise import _pow
from ._group_update import select
from .optimizer import Optimizer, host_scalar, hyper_tensor, uses

__all__ = ["LAMB", "LAMBFp16"]


class LAMB(Optimizer):
    r"""LAMB, from `"Large Batch Optimization for Deep Learning: Training BERT in 76 minutes"
    <https://arxiv.org/abs/1904.00962>`_.

    Per parameter, with a ``step`` slot counting from 1 (MegEngine 1.13's ``LAMBUpdate`` kernel)::

        exp_avg    = beta0 * exp_avg + (1 - beta0) * grad
        exp_avg_sq = beta1 * exp_avg_sq + (1 - beta1) * grad * grad
        update     = (exp_avg / (1 - beta0**step)) / (sqrt(exp_avg_sq / (1 - beta1**step)) + eps)
                     # without bias_correction: exp_avg / (sqrt(exp_avg_sq) + eps)
        update     = update + weight_decay * param
        ratio      = ||param|| / ||update|| if both norms > 0 else 1   # only if weight_decay > 0 or always_adapt
        param      = param - lr * ratio * update

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: learning rate.
        betas: coefficients for the running averages of the gradient and its square. Default: (0.9, 0.999)
        eps: term added to the denominator for numerical stability. Default: 1e-8
        bias_correction: divide the moments by ``1 - beta ** step``. Default: True
        weight_decay: weight decay, added to the update. Default: 0.0
        always_adapt: apply the trust ratio also to groups with zero weight decay. Default: False

    Returns:
        an optimizer whose :meth:`step` updates ``params`` in place; slots ``exp_avg``, ``exp_avg_sq``, ``step``.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> w = mge.Parameter([3.0, 4.0])
        >>> opt = optim.LAMB([w], lr=0.1, always_adapt=True)
        >>> w.grad = mge.Tensor([1.0, 1.0])
        >>> opt.step().clear_grad()   # update [1, 1] scaled to the parameter's norm 5
        >>> w.numpy().round(4)
        array([2.6464, 3.6464], dtype=float32)
    """

    def __init__(self, params: Union[Iterable[Parameter], dict], lr: float,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, bias_correction: bool = True,
                 weight_decay: float = 0.0, always_adapt: bool = False):
        # As in MegEngine these two are optimizer attributes, not group hyper-parameters (state_dict layout).
        self.bias_correction = bias_correction
        self.always_adapt = always_adapt
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))

    def _create_state(self, param_group):
        for param in param_group["params"]:
            self._add_state(param, "exp_avg")
            self._add_state(param, "exp_avg_sq")
            self._add_state(param, "step", initializer=0.0)

    _master = False  # LAMBFp16: the slot ``param_fp32`` is the float32 master copy that is updated

    def _rule_inputs(self, param_group, params):
        owner = type(self).__name__
        use_wd = uses(param_group, "weight_decay")
        hypers = [hyper_tensor(param_group, "lr", owner=owner), hyper_tensor(param_group, "betas", 0, owner=owner),
                  hyper_tensor(param_group, "betas", 1, owner=owner), hyper_tensor(param_group, "eps", owner=owner)]
        if use_wd:
            hypers.append(hyper_tensor(param_group, "weight_decay", owner=owner))
        # NOTE: bias_correction and always_adapt are optimizer attributes a user may change between calls: they
        # are inputs (selects in the rule), so a compiled step re-reads them instead of baking them in.
        hypers.append(host_scalar(lambda: float(bool(self.bias_correction)), "float32", (id(self), "bias_correction")))
        hypers.append(host_scalar(lambda: float(bool(self.always_adapt)), "float32", (id(self), "always_adapt")))
        names = ("exp_avg", "exp_avg_sq", "step") + (("param_fp32",) if self._master else ())
        slot_lists = [tuple(self._state[p][k] for k in names) for p in params]
        return (use_wd, self._master), hypers, slot_lists


def _lamb_prepare(flags, hypers):
    """Once per group: ``bias_correction`` and the trust-ratio switch as 0-d predicates, ``1 - beta0`` and
    ``1 - beta1``; hypers become ``lr, beta0, beta1, eps[, wd], bias_correction, adapt, 1 - beta0, 1 - beta1``."""
    use_wd = flags[0]
    weight_decay = hypers[4] if use_wd else None
    bias_correction, always_adapt = hypers[-2] != 0.0, hypers[-1] != 0.0
    # MegEngine: the trust ratio applies with weight decay > 0 or always_adapt; otherwise param - lr * update.
    # NOTE: selects on values, not Python `if`s: traced, weight_decay may be 0 now and change later.
    adapt = always_adapt if weight_decay is None else always_adapt | (weight_decay > 0.0)
    return (*hypers[:-2], bias_correction, adapt, 1.0 - hypers[1], 1.0 - hypers[2])


def _lamb_rule(flags, hypers, p, g, slots):
    """LAMB on arrays: ``flags = (weight decay term, float32 master slot)``; hypers (after :func:`_lamb_prepare`)
    ``lr, beta0, beta1, eps[, wd], bias_correction, adapt, 1 - beta0, 1 - beta1``."""
    use_wd, master = flags
    lr, beta0, beta1, eps = hypers[:4]
    weight_decay = hypers[4] if use_wd else None
    bias_correction, adapt, omb0, omb1 = hypers[-4:]
    exp_avg, exp_avg_sq, step = slots[:3]
    x = slots[3] if master else p
    if master:
        g = g.astype(jnp.float32)
    step = step + 1.0
    exp_avg = exp_avg * beta0 + g * omb0
    exp_avg_sq = exp_avg_sq * beta1 + omb1 * (g * g)
    corrected = (exp_avg / (1.0 - _pow(beta0, step))) / (jnp.sqrt(exp_avg_sq / (1.0 - _pow(beta1, step))) + eps)
    update = select(bias_correction, corrected, exp_avg / (jnp.sqrt(exp_avg_sq) + eps))
    if use_wd:
        update = update + x * weight_decay
    x_norm, u_norm = jnp.sqrt(jnp.sum(x * x)), jnp.sqrt(jnp.sum(update * update))
    one = jnp.ones((), x_norm.dtype)
    ratio = jnp.where(x_norm > 0.0, jnp.where(u_norm > 0.0, x_norm / u_norm, one), one)
    ratio = jnp.where(adapt, ratio, one)
    new = x - lr * ratio * update
    new_slots = (exp_avg, exp_avg_sq, step) + ((new,) if master else ())
    return new, new_slots


_lamb_rule.prepare = _lamb_prepare


LAMB._rule = staticmethod(_lamb_rule)


class LAMBFp16(LAMB):
    r"""LAMB for float16 parameters: the moments and a float32 master copy of each parameter (slot
    ``param_fp32``) are kept in float32; the float16 parameter is the rounded master copy after every step.

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: learning rate.
        betas: coefficients for the running averages of the gradient and its square. Default: (0.9, 0.999)
        eps: term added to the denominator for numerical stability. Default: 1e-8
        bias_correction: divide the moments by ``1 - beta ** step``. Default: True
        weight_decay: weight decay, added to the update. Default: 0.0
        always_adapt: apply the trust ratio also to groups with zero weight decay. Default: False

    Returns:
        an optimizer whose :meth:`step` updates ``params`` in place; slots ``exp_avg``, ``exp_avg_sq``,
        ``step``, ``param_fp32``.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> w = mge.Parameter([3.0, 4.0], dtype="float16")
        >>> opt = optim.LAMBFp16([w], lr=0.1, always_adapt=True)
        >>> w.grad = mge.Tensor([1.0, 1.0], dtype="float16")
        >>> opt.step().clear_grad()
        >>> w.dtype, opt._state[w]["param_fp32"].dtype
        (dtype('float16'), dtype('float32'))
    """

    def _create_state(self, param_group):
        super()._create_state(param_group)
        for param in param_group["params"]:
            # a new Tensor even for a float32 parameter: the master copy must not alias the parameter
            self._state[param]["param_fp32"] = Tensor(param, dtype="float32")

    _master = True
