"""Neural-network functions (``megengine.functional.nn``)."""
import numpy as np

from ..core._tensor import Tensor
from ..core._dispatch import apply as _apply
from ..core._elemwise_front import as_tensor as _t
from ..core.ops import nn as _N, linalg as _L, elemwise as _E, random as _RP, shape as _S
from .elemwise import relu, sigmoid, gelu, silu, softplus, logsigmoid, relu6, hsigmoid, hswish  # noqa: F401
from . import tensor as _T
from .loss import cross_entropy, binary_cross_entropy, l1_loss, square_loss, hinge_loss  # noqa: F401

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d", "linear", "max_pool2d",
           "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "batch_norm", "layer_norm", "group_norm",
           "instance_norm", "dropout", "softmax", "logsoftmax", "log_softmax", "leaky_relu", "prelu", "one_hot",
           "embedding", "relu", "sigmoid", "gelu", "silu", "softplus", "logsigmoid", "relu6", "hsigmoid", "hswish",
           "cross_entropy", "binary_cross_entropy", "l1_loss", "square_loss", "hinge_loss", "pad"]


def _tuple(v, n, name, op):
    t = (int(v),) * n if isinstance(v, (int, np.integer)) else tuple(int(i) for i in v)
    if len(t) != n:
        raise ValueError(f"{op}: {name} must be an int or {n} ints, got {v!r}")
    return t


def _conv_nd(op, nd, inp, weight, bias, stride, padding, dilation, groups):
    inp, weight = _t(inp), _t(weight)
    if inp.ndim != nd + 2:
        raise ValueError(f"{op}: input must be {nd + 2}-D (N, C, ...), got shape {inp.shape}")
    if weight.ndim not in (nd + 2, nd + 3):
        raise ValueError(f"{op}: weight must be {nd + 2}-D (or {nd + 3}-D grouped), got shape {weight.shape}")
    cin = weight.shape[1] * (weight.shape[0] if weight.ndim == nd + 3 else groups)
    if weight.ndim == nd + 3:
        cin = weight.shape[2] * weight.shape[0]
    if inp.shape[1] != cin:
        raise ValueError(f"{op}: input has {inp.shape[1]} channels but weight {weight.shape} expects {cin}")
    params = dict(stride=_tuple(stride, nd, "stride", op), padding=_tuple(padding, nd, "padding", op),
                  dilation=_tuple(dilation, nd, "dilation", op), groups=int(groups), nd=nd)
    args = (inp, weight) if bias is None else (inp, weight, _T.flatten(_t(bias)))
    return _apply(_N.conv.bind(**params), *args)


def conv1d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, conv_mode="cross_correlation",
           compute_mode="default"):
    """1-D convolution over an ``(N, C, W)`` input with weight ``(O, C/groups, K)``.

    Example:
        >>> F.conv1d(F.ones((1, 2, 5)), F.ones((3, 2, 3))).shape  # (1, 3, 3)
    """
    return _conv_nd("conv1d", 1, inp, weight, bias, stride, padding, dilation, groups)


def conv2d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, conv_mode="cross_correlation",
           compute_mode="default"):
    """2-D convolution (cross-correlation) over NCHW input.

    Args:
        inp: input ``(N, C, H, W)``.
        weight: ``(O, C/groups, KH, KW)``, or MegEngine's grouped ``(groups, O/groups, C/groups, KH, KW)``.
        bias: optional ``(1, O, 1, 1)`` (any shape with O elements).
        stride, padding, dilation: int or pair.
        groups: number of channel groups.

    Returns:
        output ``(N, O, OH, OW)``.

    Example:
        >>> F.conv2d(F.ones((1, 3, 8, 8)), F.ones((4, 3, 3, 3)), padding=1).shape  # (1, 4, 8, 8)
    """
    return _conv_nd("conv2d", 2, inp, weight, bias, stride, padding, dilation, groups)


def conv3d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, conv_mode="cross_correlation"):
    """3-D convolution over NCDHW input.

    Example:
        >>> F.conv3d(F.ones((1, 2, 4, 4, 4)), F.ones((3, 2, 3, 3, 3))).shape  # (1, 3, 2, 2, 2)
    """
    return _conv_nd("conv3d", 3, inp, weight, bias, stride, padding, dilation, groups)


def _conv_transpose_nd(op, nd, inp, weight, bias, stride, padding, output_padding, dilation, groups):
    inp, weight = _t(inp), _t(weight)
    if inp.ndim != nd + 2:
        raise ValueError(f"{op}: input must be {nd + 2}-D, got shape {inp.shape}")
    cin = weight.shape[0] * (weight.shape[1] if weight.ndim == nd + 3 else 1)
    if inp.shape[1] != cin:
        raise ValueError(f"{op}: input has {inp.shape[1]} channels but weight {weight.shape} expects {cin}")
    params = dict(stride=_tuple(stride, nd, "stride", op), padding=_tuple(padding, nd, "padding", op),
                  output_padding=_tuple(output_padding, nd, "output_padding", op),
                  dilation=_tuple(dilation, nd, "dilation", op), groups=int(groups), nd=nd)
    args = (inp, weight) if bias is None else (inp, weight, _T.flatten(_t(bias)))
    return _apply(_N.conv_transpose.bind(**params), *args)


def conv_transpose2d(inp, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                     conv_mode="cross_correlation", compute_mode="default"):
    """2-D transposed convolution; weight ``(C, O/groups, KH, KW)``.

    Example:
        >>> F.conv_transpose2d(F.ones((1, 2, 4, 4)), F.ones((2, 3, 3, 3)), stride=2).shape  # (1, 3, 9, 9)
    """
    return _conv_transpose_nd("conv_transpose2d", 2, inp, weight, bias, stride, padding, output_padding,
                              dilation, groups)


def conv_transpose3d(inp, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    """3-D transposed convolution; weight ``(C, O/groups, KD, KH, KW)``.

    Example:
        >>> F.conv_transpose3d(F.ones((1, 2, 2, 2, 2)), F.ones((2, 3, 2, 2, 2))).shape  # (1, 3, 3, 3, 3)
    """
    return _conv_transpose_nd("conv_transpose3d", 3, inp, weight, bias, stride, padding, output_padding,
                              dilation, groups)


def linear(inp, weight, bias=None, compute_mode="default"):
    """``inp @ weight.T + bias``.

    Example:
        >>> F.linear(F.ones((2, 3)), F.ones((4, 3))).shape  # (2, 4)
    """
    inp, weight = _t(inp), _t(weight)
    if weight.ndim != 2 or inp.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: input {inp.shape} does not match weight {weight.shape} (expects (out, {inp.shape[-1]}))")
    args = (inp, weight) if bias is None else (inp, weight, _t(bias))
    return _apply(_L.linear.bind(), *args)


def _pool_args(op, inp, kernel_size, stride, padding):
    inp = _t(inp)
    if inp.ndim != 4:
        raise ValueError(f"{op}: input must be 4-D NCHW, got shape {inp.shape}")
    k = _tuple(kernel_size, 2, "kernel_size", op)
    s = k if stride is None else _tuple(stride, 2, "stride", op)
    return inp, k, s, _tuple(padding, 2, "padding", op)


def max_pool2d(inp, kernel_size, stride=None, padding=0):
    """2-D max pooling over NCHW input.

    Example:
        >>> F.max_pool2d(F.ones((1, 1, 4, 4)), 2).shape  # (1, 1, 2, 2)
    """
    inp, k, s, p = _pool_args("max_pool2d", inp, kernel_size, stride, padding)
    return _apply(_N.max_pool.bind(kernel=k, stride=s, padding=p), inp)


def avg_pool2d(inp, kernel_size, stride=None, padding=0, mode="average_count_exclude_padding"):
    """2-D average pooling; ``mode`` is ``"average_count_exclude_padding"`` (default) or ``"average"``.

    Example:
        >>> F.avg_pool2d(F.ones((1, 1, 4, 4)), 2).shape  # (1, 1, 2, 2)
    """
    inp, k, s, p = _pool_args("avg_pool2d", inp, kernel_size, stride, padding)
    if mode not in ("average_count_exclude_padding", "average"):
        raise ValueError(f"avg_pool2d: unknown mode {mode!r}")
    return _apply(_N.avg_pool.bind(kernel=k, stride=s, padding=p, mode=mode), inp)


def _adaptive(op, inp, oshp, kind):
    inp = _t(inp)
    if isinstance(oshp, Tensor):
        oshp = oshp.tolist()
    oshp = _tuple(oshp, 2, "oshp", op)
    if inp.ndim != 4:
        raise ValueError(f"{op}: input must be 4-D NCHW, got shape {inp.shape}")
    return _apply(_N.adaptive_pool.bind(oshp=oshp, op=kind), inp)


def adaptive_avg_pool2d(inp, oshp):
    """Average pooling to output size ``oshp`` (MegEngine's window rule).

    Example:
        >>> F.adaptive_avg_pool2d(F.ones((1, 1, 4, 4)), 1).shape  # (1, 1, 1, 1)
    """
    return _adaptive("adaptive_avg_pool2d", inp, oshp, "avg")


def adaptive_max_pool2d(inp, oshp):
    """Max pooling to output size ``oshp``.

    Example:
        >>> F.adaptive_max_pool2d(F.ones((1, 1, 4, 4)), 2).shape  # (1, 1, 2, 2)
    """
    return _adaptive("adaptive_max_pool2d", inp, oshp, "max")


def _default_axis(ndim):
    # MegEngine's rule (functional/nn.py `_get_softmax_axis`): axis 0 for 0-, 1- and 3-D inputs, else 1.
    return 0 if ndim in (0, 1, 3) else 1


def softmax(inp, axis=None):
    """``exp(x) / sum(exp(x))`` along ``axis`` (default: MegEngine's rule), computed stably.

    Example:
        >>> F.softmax(Tensor([[1., 1.]]))  # [[0.5, 0.5]]
    """
    inp = _t(inp)
    axis = _default_axis(inp.ndim) if axis is None else axis % inp.ndim
    return _apply(_N.softmax.bind(axis=axis), inp)


def logsoftmax(inp, axis):
    """``log(softmax(x))`` along ``axis``, computed stably.

    Example:
        >>> F.logsoftmax(Tensor([[1., 1.]]), 1)
    """
    inp = _t(inp)
    return _apply(_N.log_softmax.bind(axis=axis % inp.ndim), inp)


log_softmax = logsoftmax


def leaky_relu(inp, negative_slope=0.01):
    """``x if x > 0 else negative_slope * x``.

    Example:
        >>> F.leaky_relu(Tensor([-1., 1.]), 0.1)  # [-0.1, 1.]
    """
    return _apply(_E.leaky_relu.bind(negative_slope=float(negative_slope)), _t(inp))


def prelu(inp, weight):
    """``x if x > 0 else weight * x`` with a learnable (per-channel) weight.

    Example:
        >>> F.prelu(Tensor([-1., 1.]), Tensor([0.25]))  # [-0.25, 1.]
    """
    inp, weight = _t(inp), _t(weight)
    if weight.size > 1 and inp.ndim > 1:
        weight = _T.reshape(weight, (1, -1) + (1,) * (inp.ndim - 2))
    return _apply(_E.prelu.bind(), inp, weight)


def one_hot(inp, num_classes, dtype="float32"):
    """One-hot encode integer labels.

    Example:
        >>> F.one_hot(Tensor([0, 2]), 3)  # [[1, 0, 0], [0, 0, 1]]
    """
    inp = _t(inp)
    if inp.dtype.kind not in "iu":
        raise TypeError(f"one_hot: labels must be integers, got {inp.dtype}")
    return _apply(_S.one_hot.bind(num_classes=int(num_classes), dtype=np.dtype(dtype).name), inp)


def embedding(inp, weight, padding_idx=None, max_norm=None, norm_type=None):
    """Rows of ``weight`` at the integer indices ``inp``.

    Example:
        >>> F.embedding(Tensor([1]), F.eye(3)).shape  # (1, 3)
    """
    inp, weight = _t(inp), _t(weight)
    if inp.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got {inp.dtype}")
    return _apply(_N.embedding.bind(), inp, weight)


def _stat_shape(inp, op):
    if inp.ndim < 2:
        raise ValueError(f"{op}: input must be at least 2-D (N, C, ...), got shape {inp.shape}")
    return (1, inp.shape[1]) + (1,) * (inp.ndim - 2)


def batch_norm(inp, running_mean=None, running_var=None, weight=None, bias=None, *, training=False,
               momentum=0.9, eps=1e-5, inplace=True):
    """Batch normalisation over all axes but the channel axis 1.

    In training, batch statistics normalise the input and, when running buffers are given, update them
    in place: ``running = momentum * running + (1 - momentum) * batch_stat`` (variance unbiased), as MegEngine.

    Args:
        inp: input ``(N, C, ...)``.
        running_mean, running_var: ``(1, C, 1, ...)`` buffers, or None.
        weight, bias: affine parameters shaped like the buffers, or None.
        training: use batch statistics.
        momentum: weight of the old running value.
        eps: added to the variance.
        inplace: update the buffers in place (else return them).

    Returns:
        the normalised tensor (and the new running mean and var when ``inplace`` is False).

    Example:
        >>> F.batch_norm(F.ones((2, 3, 4, 4)), training=True).shape  # (2, 3, 4, 4)
    """
    inp = _t(inp)
    shape = _stat_shape(inp, "batch_norm")
    affine = () if weight is None else (_T.reshape(weight, shape), _T.reshape(bias, shape))
    if training or running_mean is None:
        axes = (0,) + tuple(range(2, inp.ndim))
        out, mean, var = _apply(_N.batch_norm_train.bind(axes=axes, eps=float(eps)), inp, *affine)
        if running_mean is not None and training:
            n = inp.size // inp.shape[1]
            new_mean = running_mean * momentum + _T.reshape(mean, running_mean.shape) * (1 - momentum)
            new_var = running_var * momentum + _T.reshape(var, running_var.shape) * ((1 - momentum) * n / max(n - 1, 1))
            if not inplace:
                return out, new_mean, new_var
            running_mean._reset(new_mean)
            running_var._reset(new_var)
        return out if inplace or running_mean is None else (out, running_mean, running_var)
    out = _apply(_N.batch_norm_infer.bind(eps=float(eps)), inp, _T.reshape(running_mean, shape),
                 _T.reshape(running_var, shape), *affine)
    return out if inplace else (out, running_mean, running_var)


def layer_norm(inp, normalized_shape, affine=True, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing ``normalized_shape`` axes.

    Example:
        >>> F.layer_norm(F.ones((2, 4)), (4,), affine=False).shape  # (2, 4)
    """
    inp = _t(inp)
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if inp.shape[inp.ndim - len(ns):] != ns:
        raise ValueError(f"layer_norm: normalized_shape {ns} does not match the trailing dims of {inp.shape}")
    args = (inp, _t(weight), _t(bias)) if affine and weight is not None else (inp,)
    return _apply(_N.layer_norm.bind(ndim=len(ns), eps=float(eps)), *args)


def group_norm(inp, num_groups, affine=True, weight=None, bias=None, eps=1e-5):
    """Normalise over channel groups.

    Example:
        >>> F.group_norm(F.ones((2, 4, 3, 3)), 2, affine=False).shape
    """
    inp = _t(inp)
    if inp.shape[1] % num_groups:
        raise ValueError(f"group_norm: {inp.shape[1]} channels are not divisible into {num_groups} groups")
    args = (inp, _T.flatten(_t(weight)), _T.flatten(_t(bias))) if affine and weight is not None else (inp,)
    return _apply(_N.group_norm.bind(groups=int(num_groups), eps=float(eps)), *args)


def instance_norm(inp, affine=True, weight=None, bias=None, eps=1e-5):
    """Normalise each channel of each sample over its spatial axes.

    Example:
        >>> F.instance_norm(F.ones((2, 4, 3, 3)), affine=False).shape
    """
    inp = _t(inp)
    return group_norm(inp, inp.shape[1], affine, weight, bias, eps)


def dropout(inp, drop_prob, training=True):
    """Zero each element with probability ``drop_prob`` and scale the rest by ``1 / (1 - drop_prob)``.

    Example:
        >>> F.dropout(F.ones((4,)), 0.5).shape  # (4,)
    """
    from ..random import next_key
    if not 0 <= drop_prob < 1:
        raise ValueError(f"dropout: drop_prob must be in [0, 1), got {drop_prob}")
    inp = _t(inp)
    if not training or drop_prob == 0:
        return inp
    return _apply(_RP.dropout.bind(drop_prob=float(drop_prob)), inp, next_key())


def pad(src, pad_width, mode="constant", constant_value=0.0):
    """Pad ``src`` with ``pad_width`` = ((before, after), ...) per axis; modes constant/reflect/replicate.

    Example:
        >>> F.nn.pad(Tensor([1., 2.]), ((1, 1),))  # [0., 1., 2., 0.]
    """
    src = _t(src)
    pw = tuple((int(a), int(b)) for a, b in pad_width)
    if len(pw) != src.ndim:
        raise ValueError(f"pad: pad_width has {len(pw)} entries for a {src.ndim}-D tensor")
    if mode not in ("constant", "reflect", "replicate", "edge"):
        raise ValueError(f"pad: unknown mode {mode!r}")
    return _apply(_S.pad.bind(pad_width=pw, mode=mode, constant_value=float(constant_value)), src)
