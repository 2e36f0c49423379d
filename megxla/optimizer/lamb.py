"""LAMB and its float16 variant (``megengine.optimizer.LAMB``, ``megengine.optimizer.LAMBFp16``)."""
from __future__ import annotations

from typing import Iterable, Tuple, Union

from .. import functional as F
from ..core._tensor import Parameter, Tensor
from .optimizer import Optimizer, assign, hyper_tensor, uses

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

    @staticmethod
    def _hypers(group):
        """The group's hyper-parameters as tensors, made once per group and step."""
        weight_decay = hyper_tensor(group, "weight_decay") if uses(group, "weight_decay") else None
        return (hyper_tensor(group, "lr"), weight_decay, hyper_tensor(group, "betas", 0),
                hyper_tensor(group, "betas", 1), hyper_tensor(group, "eps"))

    def _lamb(self, hypers, states, param, grad):
        """Advance the slots by one gradient and return the new value of ``param`` (float32)."""
        lr, weight_decay, beta0, beta1, eps = hypers
        step, exp_avg, exp_avg_sq = states["step"], states["exp_avg"], states["exp_avg_sq"]
        assign(step, step + 1.0)
        assign(exp_avg, exp_avg * beta0 + grad * (1.0 - beta0))
        assign(exp_avg_sq, exp_avg_sq * beta1 + (1.0 - beta1) * (grad * grad))
        if self.bias_correction:
            update = (exp_avg / (1.0 - beta0 ** step)) / (F.sqrt(exp_avg_sq / (1.0 - beta1 ** step)) + eps)
        else:
            update = exp_avg / (F.sqrt(exp_avg_sq) + eps)
        if weight_decay is not None:
            update = update + param * weight_decay
        elif not self.always_adapt:
            return param - lr * update  # no weight decay, no trust ratio (MegEngine)
        param_norm, update_norm = F.norm(param), F.norm(update)
        ratio = F.where(param_norm > 0.0, F.where(update_norm > 0.0, param_norm / update_norm, 1.0), 1.0)
        if not self.always_adapt:
            # NOTE: a select on the weight_decay tensor, not a Python `if`: traced, weight_decay may be 0 now
            # and change later without a new trace.
            ratio = F.where(weight_decay > 0.0, ratio, 1.0)
        return param - lr * ratio * update

    def _updates(self, param_group):
        params = self._params_with_grad(param_group)
        if not params:
            return
        hypers = self._hypers(param_group)
        for param in params:
            assign(param, self._lamb(hypers, self._state[param], param, param.grad))


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

    def _updates(self, param_group):
        params = self._params_with_grad(param_group)
        if not params:
            return
        hypers = self._hypers(param_group)
        for param in params:
            states = self._state[param]
            master = states["param_fp32"]
            new = self._lamb(hypers, states, master, param.grad.astype("float32"))
            assign(master, new)
            assign(param, new)
