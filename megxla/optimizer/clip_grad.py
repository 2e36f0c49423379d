"""Gradient clipping (``megengine.optimizer.clip_grad_norm`` / ``clip_grad_value``)."""
from __future__ import annotations

import numbers
from typing import Iterable, Union

from .. import functional as F
from ..core._tensor import Tensor
from .optimizer import assign

__all__ = ["clip_grad_norm", "clip_grad_value"]


def _with_grad(tensors):
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    return [t for t in tensors if t.grad is not None]


def clip_grad_norm(tensors: Union[Tensor, Iterable[Tensor]], max_norm: float, ord: float = 2.0):
    r"""Clip the gradients of ``tensors`` in place so that their total norm is at most ``max_norm``.

    The total norm is the ``ord``-norm of all gradients together, as if concatenated into one vector; every
    gradient is multiplied by ``min(max_norm / (total_norm + 1e-6), 1)``. Tensors without a gradient are
    skipped.

    Args:
        tensors: a tensor or an iterable of tensors whose ``.grad`` is clipped.
        max_norm: maximum total norm of the gradients.
        ord: order of the norm (``inf`` for the max-norm). Default: 2.0

    Returns:
        the total norm of the gradients before clipping, a 0-d Tensor.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> w = mge.Parameter([0.0, 0.0]); w.grad = mge.Tensor([3.0, 4.0])
        >>> float(optim.clip_grad_norm(w, max_norm=1.0))
        5.0
        >>> w.grad.numpy().round(4)
        array([0.6, 0.8], dtype=float32)
    """
    if isinstance(max_norm, Tensor):  # (MegEngine takes a 0-d Tensor; its value stays on the device)
        if max_norm.ndim != 0:
            raise ValueError(f"clip_grad_norm: max_norm must be a number or a 0-d Tensor, got shape {max_norm.shape}")
    elif not isinstance(max_norm, numbers.Real) or not max_norm >= 0:
        raise ValueError(f"clip_grad_norm: max_norm must be a number >= 0, got {max_norm!r}")
    tensors = _with_grad(tensors)
    if not tensors:
        return Tensor(0.0)
    norms = [F.norm(t.grad, ord=ord) for t in tensors]
    total = F.norm(F.stack(norms), ord=ord) if len(norms) > 1 else norms[0]
    scale = F.minimum(max_norm / (total + 1e-6), 1.0)
    for t in tensors:
        assign(t.grad, t.grad * scale)
    return total


def clip_grad_value(tensors: Union[Tensor, Iterable[Tensor]], lower: float, upper: float):
    r"""Clamp the gradients of ``tensors`` in place into ``[lower, upper]``; tensors without a gradient are
    skipped.

    Args:
        tensors: a tensor or an iterable of tensors whose ``.grad`` is clipped.
        lower: lower bound.
        upper: upper bound.

    Returns:
        None.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> w = mge.Parameter([0.0, 0.0]); w.grad = mge.Tensor([-3.0, 0.5])
        >>> optim.clip_grad_value(w, lower=-1.0, upper=1.0)
        >>> w.grad.numpy()
        array([-1. ,  0.5], dtype=float32)
    """
    if lower is not None and upper is not None and not lower <= upper:  # (None: no bound, as in F.clip)
        raise ValueError(f"clip_grad_value: lower ({lower!r}) must not exceed upper ({upper!r})")
    for t in _with_grad(tensors):
        assign(t.grad, F.clip(t.grad, lower, upper))
