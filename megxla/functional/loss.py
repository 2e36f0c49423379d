"""Loss functions (``megengine.functional.loss``): plain Python over primitives."""
from ..core._elemwise_front import as_tensor as _t

__all__ = ["cross_entropy", "binary_cross_entropy", "l1_loss", "square_loss", "hinge_loss"]


def _reduce(loss, reduction, op):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{op}: reduction must be 'none', 'sum' or 'mean', got {reduction!r}")


def _same_shape(pred, label, op):
    if pred.shape != label.shape:
        raise ValueError(f"{op}: pred shape {pred.shape} and label shape {label.shape} differ")


def l1_loss(pred, label, reduction="mean"):
    """Mean absolute error.

    Example:
        >>> F.nn.l1_loss(Tensor([1., 2.]), Tensor([0., 0.]))  # 1.5
    """
    pred, label = _t(pred), _t(label)
    _same_shape(pred, label, "l1_loss")
    return _reduce(abs(pred - label), reduction, "l1_loss")


def square_loss(pred, label, reduction="mean"):
    """Mean squared error.

    Example:
        >>> F.nn.square_loss(Tensor([1., 2.]), Tensor([0., 0.]))  # 2.5
    """
    pred, label = _t(pred), _t(label)
    _same_shape(pred, label, "square_loss")
    d = pred - label
    return _reduce(d * d, reduction, "square_loss")


def cross_entropy(pred, label, axis=1, with_logits=True, label_smooth=0, reduction="mean"):
    """Cross entropy of class scores ``pred`` against integer labels ``label``.

    Args:
        pred: scores (logits if ``with_logits``, else probabilities), classes along ``axis``.
        label: int labels, ``pred``'s shape without ``axis``.
        axis: the class axis.
        with_logits: ``pred`` holds logits (a log-softmax is applied).
        label_smooth: label smoothing factor in [0, 1).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
        the loss.

    Example:
        >>> F.nn.cross_entropy(Tensor([[0., 0.]]), Tensor([1]))  # log(2)
    """
    from .nn import logsoftmax
    from .tensor import indexing_one_hot
    from .elemwise import log
    pred, label = _t(pred), _t(label)
    axis = axis % pred.ndim
    if label.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: label must be integers, got {label.dtype}")
    expected = pred.shape[:axis] + pred.shape[axis + 1:]
    if label.shape != expected:
        raise ValueError(f"cross_entropy: label shape {label.shape} does not match pred {pred.shape} "
                         f"without class axis {axis} (expected {expected})")
    logp = logsoftmax(pred, axis) if with_logits else log(pred)
    nll = -indexing_one_hot(logp, label, axis)
    if label_smooth:
        nll = nll * (1 - label_smooth) - logp.mean(axis) * label_smooth
    return _reduce(nll, reduction, "cross_entropy")


def binary_cross_entropy(pred, label, with_logits=True, reduction="mean"):
    """Binary cross entropy of ``pred`` (logits if ``with_logits``, else probabilities) against 0/1 labels.

    Example:
        >>> F.nn.binary_cross_entropy(Tensor([0.]), Tensor([1.]))  # log(2)
    """
    from .elemwise import logsigmoid, log
    pred, label = _t(pred), _t(label)
    _same_shape(pred, label, "binary_cross_entropy")
    if with_logits:
        loss = -(label * logsigmoid(pred) + (1 - label) * logsigmoid(-pred))
    else:
        loss = -(label * log(pred) + (1 - label) * log(1 - pred))
    return _reduce(loss, reduction, "binary_cross_entropy")


def hinge_loss(pred, label, norm="L1", reduction="mean"):
    """Hinge loss for labels in {-1, 1}: ``max(0, 1 - pred * label)`` summed (L1) or squared (L2) per sample.

    Example:
        >>> F.nn.hinge_loss(Tensor([[0.5]]), Tensor([[1.]]))  # 0.5
    """
    from .elemwise import relu
    pred, label = _t(pred), _t(label)
    _same_shape(pred, label, "hinge_loss")
    m = relu(1 - pred * label)
    if norm == "L2":
        m = m * m
    elif norm != "L1":
        raise ValueError(f"hinge_loss: norm must be 'L1' or 'L2', got {norm!r}")
    return _reduce(m.sum(axis=1), reduction, "hinge_loss")
