"""Loss functions (``megengine.functional.loss``): plain Python over primitives (``ctc_loss`` is one fused op)."""
import functools

import numpy as np

from ..core import _lazy
from ..core._dispatch import apply as _apply, AssertedOpError, OpError
from ..core.dtypes import is_float
from ..core._indexing import check_index_tensor
from ..core._elemwise_front import as_tensor as _t
from ..core.ops import nn as _N
from .elemwise import log, logsigmoid, maximum, relu
from .nn import logsumexp
from .tensor import _pick

__all__ = ["cross_entropy", "binary_cross_entropy", "l1_loss", "square_loss", "hinge_loss", "ctc_loss"]


def _reduce(loss, reduction, op):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise OpError(f"{op}: reduction must be 'none', 'sum' or 'mean', got {reduction!r}")


def _reduce_output(loss_fn):
    """MegEngine's wrapper giving a loss function the ``reduction`` argument (``"mean"``, ``"sum"`` or ``"none"``):
    projects write their own losses with it (OMNet's ``frequency_weighted_cross_entropy``).

    Example:
        >>> @_reduce_output
        ... def squared(pred, label):
        ...     return (pred - label) ** 2
        >>> x = Tensor([1.0, 3.0])
        >>> squared(x, 0.0).item(), squared(x, 0.0, reduction="sum").item(), squared(x, 0.0, reduction="none").shape
        (5.0, 10.0, (2,))
    """

    @functools.wraps(loss_fn)
    def reduced_loss_fn(*args, reduction="mean", **kwargs):
        loss = loss_fn(*args, **kwargs)
        if reduction == "none":
            return loss
        if reduction in ("mean", "sum"):
            return getattr(loss, reduction)()
        raise ValueError("{} is not a valid value for reduction".format(reduction))

    return reduced_loss_fn


def _check_reduction(reduction, op):
    if reduction not in ("none", "sum", "mean"):
        raise OpError(f"{op}: reduction must be 'none', 'sum' or 'mean', got {reduction!r}")


def _pair(pred, label, op, keep_int=False):
    pred = _t(pred, op=op)
    label = _t(label, pred, op=op)
    try:
        if not _lazy.same_shape(pred, label):  # (the same rows of one selection: no count read)
            np.broadcast_shapes(pred.shape, label.shape)
    except ValueError:
        raise OpError(f"{op}: pred shape {pred.shape} and label shape {label.shape} do not broadcast") from None
    if keep_int and pred.dtype.kind in "iu" and label.dtype.kind in "iu":
        pass  # MegEngine's l1_loss of ints is |pred - label| in integers (its mean is float32, as any mean)
    elif pred.dtype.kind in "iub":  # other integer losses compute in float32 (square_loss uses float ``**``)
        pred = pred.astype("float32")
    elif not is_float(pred.dtype):
        raise OpError(f"{op}: pred must be a float tensor, got {pred.dtype}")
    return pred, label


def l1_loss(pred, label, reduction="mean"):
    """Calculates the mean absolute error: ``mean(|pred - label|)``.

    Args:
        pred: predictions.
        label: targets (broadcastable to ``pred``).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
        the loss.

    Example:
        >>> F.nn.l1_loss(Tensor([3., 3., 3., 3.]), Tensor([2., 8., 6., 1.])).item()
        2.75
    """
    _check_reduction(reduction, "l1_loss")
    pred, label = _pair(pred, label, "l1_loss", keep_int=True)
    return _reduce(abs(pred - label), reduction, "l1_loss")


def square_loss(pred, label, reduction="mean"):
    """Calculates the mean squared error: ``mean((pred - label) ** 2)``.

    Args:
        pred: predictions.
        label: targets (broadcastable to ``pred``).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
        the loss.

    Example:
        >>> F.nn.square_loss(Tensor([3., 3., 3., 3.]), Tensor([2., 8., 6., 1.])).item()
        9.75
    """
    _check_reduction(reduction, "square_loss")
    pred, label = _pair(pred, label, "square_loss")
    d = pred - label
    return _reduce(d * d, reduction, "square_loss")


class _LabelRankError(OpError, AssertionError):
    """A label whose rank is not pred's minus one: MegEngine asserts it, so MegEngine code may catch an
    ``AssertionError``; an ``OpError`` as megxla's other argument errors."""


def cross_entropy(pred, label, axis=1, with_logits=True, label_smooth=0, reduction="mean"):
    """Computes the cross entropy of class scores ``pred`` against integer labels ``label``.

    With logits: ``logsumexp(pred, axis) - pred[label]``; with label smoothing ``ls`` the target is
    ``(1 - ls) * one_hot + ls / num_classes``.

    Args:
        pred: scores (logits if ``with_logits``, else probabilities), classes along ``axis``.
        label: integer labels, ``pred``'s shape without ``axis``.
        axis: the class axis.
        with_logits: ``pred`` holds logits (else probabilities).
        label_smooth: label smoothing factor (usually in ``[0, 1)``; None or 0: none).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
        the loss.

    Example:
        >>> F.nn.cross_entropy(Tensor([[0., 1.]]), Tensor([1])).item()  # log(1 + e^-1)
        0.3132617
    """
    op = "cross_entropy"
    _check_reduction(reduction, op)
    pred, label = _t(pred, op=op), _t(label, op=op)
    if pred.dtype.kind in "iub" and pred.ndim >= 1:
        # MegEngine computes integer scores in float32 (its logsumexp's exp casts integers to float32, and
        # the picked score is promoted to the result's dtype); so do we
        pred = pred.astype("float32")
    if pred.ndim < 1 or not is_float(pred.dtype):
        raise OpError(f"{op}: pred must be a float tensor with a class axis, got {pred.shape}:{pred.dtype}")
    if label.ndim != pred.ndim - 1:
        # MegEngine asserts this ("target ndim must be one less than input ndim")
        raise _LabelRankError(f"{op}: target ndim must be one less than input ndim; label shape {label.shape}, "
                              f"pred shape {pred.shape}")
    if axis is None:  # (MegEngine asserts it, in its logsumexp: "can not set axis=None and keepdims=True")
        raise AssertedOpError(f"{op}: axis must be given, got None")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):  # (MegEngine: "Unable to cast")
        raise OpError(f"{op}: axis must be an int, got {axis!r}")
    if not -pred.ndim <= axis < pred.ndim:
        raise OpError(f"{op}: axis {axis} is out of range for pred of shape {pred.shape}")
    axis = axis % pred.ndim
    if is_float(label.dtype):  # MegEngine takes class indices stored as floats (converted to int32)
        label = label.astype("int32")
    elif label.dtype.kind not in "iu":
        raise OpError(f"{op}: label must be class indices (integers), got {label.dtype}")
    if not _lazy.same_shape(label, pred, drop=axis):  # (``label[fg]`` against ``pred[fg]``: no count read)
        raise OpError(f"{op}: label shape {label.shape} does not match pred {pred.shape} without class axis "
                      f"{axis} (expected {pred.shape[:axis] + pred.shape[axis + 1:]})")
    if label_smooth is None:  # (MegEngine: no smoothing)
        label_smooth = 0
    elif isinstance(label_smooth, str):  # (MegEngine: a RuntimeError from its elementwise multiply)
        raise OpError(f"{op}: label_smooth must be a number, got {label_smooth!r}")
    # MegEngine raises for labels outside [0, C); JAX's gather would clamp them. Checked eagerly here; inside
    # a recording or compiled step labels are graph values and are clamped (see core/_indexing.py).
    check_index_tensor(op, label, _lazy.dim(pred, axis), axis, allow_negative=False, what="label")
    # MegEngine's formula term by term, so its float32 roundings (0.5797641, not 0.57976407) and signs (a certain
    # prediction gives 0 - log(1) = +0.0) are reproduced: logZ - pred[label] (logZ = 0 for probabilities)
    if with_logits:
        logz = logsumexp(pred, axis)
        primary = _pick(pred, label, axis)
    else:
        logz = 0.0
        primary = log(_pick(pred, label, axis))
    if not label_smooth:
        nll = logz - primary
    else:
        scores = pred if with_logits else log(pred)
        nll = logz - label_smooth * scores.mean(axis) - (1 - label_smooth) * primary
    return _reduce(nll, reduction, op)


def binary_cross_entropy(pred, label, with_logits=True, reduction="mean"):
    """Computes the binary cross entropy of ``pred`` against targets in ``[0, 1]``.

    Args:
        pred: logits if ``with_logits`` (computed stably via ``logsigmoid``), else probabilities.
        label: targets, broadcastable to ``pred``.
        with_logits: whether ``pred`` holds logits.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
        the loss.

    Example:
        >>> F.nn.binary_cross_entropy(Tensor([0.]), Tensor([1.])).item()  # log(2)
        0.6931472
    """
    op = "binary_cross_entropy"
    _check_reduction(reduction, op)
    pred, label = _pair(pred, label, op)
    if with_logits:
        loss = -(label * logsigmoid(pred) + (1 - label) * logsigmoid(-pred))
    else:
        loss = -(label * log(pred) + (1 - label) * log(1 - pred))
    return _reduce(loss, reduction, op)


def hinge_loss(pred, label, norm="L1", reduction="mean"):
    """Calculates the hinge loss for labels in {-1, 1}, summed over axis 1 per sample.

    ``sum(max(0, 1 - pred * label))`` (``norm="L1"``) or the sum of its squares (``"L2"``).

    Args:
        pred: scores ``(N, C)``.
        label: labels in {-1, 1}, like ``pred``.
        norm: ``"L1"`` or ``"L2"`` (case-insensitive).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
        the loss.

    Example:
        >>> F.nn.hinge_loss(Tensor([[0.5, -2.]]), Tensor([[1., -1.]])).item()
        0.5
    """
    op = "hinge_loss"
    _check_reduction(reduction, op)
    norm = str(norm).upper()
    if norm not in ("L1", "L2"):
        raise AssertedOpError(f"{op}: norm must be 'L1' or 'L2', got {norm!r}")  # (MegEngine asserts it)
    pred, label = _pair(pred, label, op)
    if pred.ndim < 2:
        raise OpError(f"{op}: pred must be at least 2-D (N, C), got shape {pred.shape}")
    m = relu(1 - pred * label)
    if norm == "L2":
        m = m * m
    return _reduce(m.sum(axis=1), reduction, op)


def ctc_loss(pred, pred_lengths, label, label_lengths, blank=0, reduction="mean"):
    """The Connectionist Temporal Classification loss.

    Args:
        pred: probabilities (not logits) of shape ``(T, N, C)``, blank included among the C classes.
        pred_lengths: ``(N,)`` number of valid time steps of each sequence.
        label: ``(N, S)`` padded labels, or ``(sum(label_lengths),)`` concatenated ones; no blanks.
        label_lengths: ``(N,)`` label length of each sequence.
        blank: the blank class.
        reduction: ``"none"`` (per sequence), ``"sum"``, or ``"mean"`` (of the losses divided by their label
            lengths).

    Returns:
        the loss.

    Example:
        >>> pred = Tensor([[[0.0614, 0.9386], [0.8812, 0.1188]], [[0.699, 0.301], [0.2572, 0.7428]]])
        >>> F.nn.ctc_loss(pred, Tensor([2, 2]), Tensor([1, 1]), Tensor([1, 1])).item()
        0.1504417
    """
    op = "ctc_loss"
    _check_reduction(reduction, op)
    pred, pred_lengths = _t(pred, op=op), _t(pred_lengths, op=op)
    label, label_lengths = _t(label, op=op), _t(label_lengths, op=op)
    if pred.ndim != 3 or not is_float(pred.dtype):
        raise OpError(f"{op}: pred must be a float (T, N, C) tensor, got {pred.shape}:{pred.dtype}")
    t, n, c = pred.shape
    for x, what in ((pred_lengths, "pred_lengths"), (label_lengths, "label_lengths"), (label, "label")):
        if x.dtype.kind not in "iu":
            raise OpError(f"{op}: {what} must be integers, got {x.dtype}")
    if pred_lengths.shape != (n,) or label_lengths.shape != (n,):
        raise OpError(f"{op}: pred_lengths {pred_lengths.shape} and label_lengths {label_lengths.shape} must be "
                      f"({n},)")
    if label.ndim not in (1, 2) or (label.ndim == 2 and label.shape[0] != n):
        raise OpError(f"{op}: label must be (N, S) = ({n}, S) or 1-D concatenated, got {label.shape}")
    if not 0 <= int(blank) < c:
        raise AssertedOpError(f"{op}: blank {blank} is not a class index in [0, {c})")  # (MegEngine asserts it)
    loss = _apply(_N.ctc_loss.bind(blank=int(blank)), pred, pred_lengths, label, label_lengths)
    if reduction == "mean":
        return (loss / maximum(label_lengths, 1).astype(loss.dtype)).mean()
    return _reduce(loss, reduction, op)
