"""Neural-network functions (``megengine.functional.nn``).

Each function validates its arguments (raising :class:`OpError` naming the function, before anything is
computed or mutated), then applies one primitive of ``core/ops/nn.py``; composites (``pixel_shuffle``,
``multi_head_attention``, ``sync_batch_norm``) are plain Python over those primitives.
"""
import math

import numpy as np

from ..core._tensor import Tensor
from ..core.dtypes import is_float, c_int
from ..core._dispatch import apply as _apply, AssertedOpError, OpError
from ..core._elemwise_front import as_tensor as _t, quantized_params, _scalar
from ..core._tensor import QPARAMS_SEEN
from ..core._indexing import check_index_tensor
from ..core.ops import nn as _N, linalg as _L, elemwise as _E, random as _RP, shape as _S
from ..core import _autocast as _amp  # autocast state: the hook below costs one attribute read
from ..core import _interrupt, _lazy
from .elemwise import relu, sigmoid, gelu, silu, softplus, logsigmoid, relu6, hsigmoid, hswish  # noqa: F401
from . import tensor as _T
from .tensor import indexing_one_hot  # noqa: F401  (MegEngine exports it from .nn too)
from .tensor import keep_qparams, _through_float
from .math import logsumexp, normalize  # noqa: F401
from .loss import cross_entropy, binary_cross_entropy, l1_loss, square_loss, hinge_loss, ctc_loss  # noqa: F401
# MegEngine's functional/nn.py ends with `from .loss import *`, `from .metric import *`, `from .vision import *`:
# F.nn.interpolate, F.nn.nms, F.nn.topk_accuracy ... are reachable there, so they are here.
from .vision import (remap, warp_affine, warp_perspective, interpolate, roi_align, roi_pooling, nms,  # noqa: F401
                     correlation, cvt_color)
from .math import topk_accuracy  # noqa: F401

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d", "local_conv2d",
           "deformable_conv2d", "region_restricted_conv", "linear", "max_pool2d", "avg_pool2d",
           "adaptive_avg_pool2d", "adaptive_max_pool2d",
           "batch_norm", "sync_batch_norm", "layer_norm", "group_norm", "instance_norm", "general_norm",
           "local_response_norm", "dropout", "softmax", "logsoftmax", "leaky_relu", "prelu", "one_hot",
           "embedding", "pixel_shuffle", "sliding_window", "sliding_window_transpose", "multi_head_attention",
           "pad", "relu", "sigmoid", "gelu", "silu", "softplus", "logsigmoid", "relu6", "hsigmoid", "hswish",
           "indexing_one_hot", "logsumexp", "normalize", "cross_entropy", "binary_cross_entropy", "l1_loss",
           "square_loss", "hinge_loss", "ctc_loss", "remap", "warp_affine", "warp_perspective"]

_F32 = np.dtype(np.float32)


# ---- argument checks ---------------------------------------------------------------------------------------------
def _tuple(v, n, name, op):
    if isinstance(v, Tensor):
        v = v.tolist()
    try:
        # (a float truncated, as MegEngine's get_ndtuple: MaxPool2d(2.0), SlidingWindow(2.0))
        t = (int(v),) * n if isinstance(v, (int, np.integer, float, np.floating)) else tuple(int(i) for i in v)
    except TypeError:
        raise OpError(f"{op}: {name} must be an int or {n} ints, got {v!r}") from None
    if len(t) != n:
        raise OpError(f"{op}: {name} must be an int or {n} ints, got {v!r}")
    return t


def _positive(t, name, op, allow_zero=False):
    if any(v < (0 if allow_zero else 1) for v in t):
        raise OpError(f"{op}: {name} must be {'non-negative' if allow_zero else 'positive'}, got {t}")
    return t


def _float(x, op, what="input"):
    if not is_float(x.dtype):
        raise OpError(f"{op}: {what} must be a float tensor, got {x.dtype}")


def _ndim(x, n, op, what="input", layout=""):
    if x.ndim != n:
        raise OpError(f"{op}: {what} must be {n}-D{' ' + layout if layout else ''}, got shape {x.shape}")


def _promote(*ts):
    """Cast float tensors to their common dtype (MegEngine's dtype promotion of conv inputs)."""
    dt = np.result_type(*[t.dtype for t in ts])
    return tuple(t if t.dtype == dt else t.astype(dt) for t in ts)


def _conv_mode(conv_mode, op):
    name = getattr(conv_mode, "name", conv_mode)
    if str(name).lower() != "cross_correlation":
        # (MegEngine asserts it: ``assert conv_mode.lower() == "cross_correlation" or ...``)
        raise AssertedOpError(f"{op}: only conv_mode='cross_correlation' is supported, got {conv_mode!r}")


def _compute_mode(compute_mode, op, any_name=False):
    """MegEngine binds ``compute_mode`` to its ComputeMode enum, which takes ``"default"`` / ``"float32"`` in any
    case (or the enum); anything else raises ``RuntimeError("Unable to cast Python instance to C++ type")``.
    ``any_name``: MegEngine's matmul / linear take any string (they cast only a non-string)."""
    name = getattr(compute_mode, "name", compute_mode)
    if not isinstance(name, str) or not (any_name or name.lower() in ("default", "float32")):
        raise OpError(f"{op}: compute_mode must be 'default' or 'float32', got {compute_mode!r}")


def _out_size(size, k, s, p, d, op):
    out = tuple((i + 2 * pp - dd * (kk - 1) - 1) // ss + 1 for i, kk, ss, pp, dd in zip(size, k, s, p, d))
    if any(o <= 0 for o in out):
        raise OpError(f"{op}: kernel {k} (dilation {d}, padding {p}) does not fit the input size {size}")
    return out


def _bias(bias, n, op):
    if bias is None:
        return ()
    bias = _t(bias, op=op)
    if bias.size != n:
        raise OpError(f"{op}: bias must have {n} elements (one per output channel), got shape {bias.shape}")
    return (bias,)  # any shape with n elements: the op reshapes it, where XLA makes that free (no flatten op)


# ---- convolution ------------------------------------------------------------------------------------------------
def _conv_channels(op, inp, weight, groups, nd):
    """Check a convolution weight in MegEngine's plain ``(O, I/G, *k)`` or grouped ``(G, O/G, I/G, *k)`` layout
    against the input's channels; returns ``(groups, output channels)``."""
    groups = int(groups)
    if groups < 1:
        raise OpError(f"{op}: groups must be positive, got {groups}")
    if weight.ndim == nd + 3:
        if weight.shape[0] != groups:
            raise OpError(f"{op}: grouped weight {weight.shape} has {weight.shape[0]} groups, but groups={groups}")
        cin, cout = weight.shape[2] * groups, weight.shape[1] * groups
    elif weight.ndim == nd + 2:
        cin, cout = weight.shape[1] * groups, weight.shape[0]
        if cout % groups:
            raise OpError(f"{op}: {cout} output channels are not divisible into {groups} groups")
    else:
        raise OpError(f"{op}: weight must be {nd + 2}-D (O, I/groups, ...) or {nd + 3}-D (groups, O/groups, "
                      f"I/groups, ...), got shape {weight.shape}")
    if inp.shape[1] != cin:
        raise OpError(f"{op}: input {tuple(inp.shape)} has {inp.shape[1]} channels but weight {weight.shape} with "
                      f"groups={groups} expects {cin}")
    return groups, cout


def _geometry(op, stride, padding, dilation, nd):
    """Validated ``(stride, padding, dilation)`` tuples of a convolution."""
    return (_positive(_tuple(stride, nd, "stride", op), "stride", op),
            _positive(_tuple(padding, nd, "padding", op), "padding", op, allow_zero=True),
            _positive(_tuple(dilation, nd, "dilation", op), "dilation", op))


# Convolutions already validated, by everything their checks read -- the input, weight and bias shapes and dtypes
# and the geometry arguments -- to the bound op: a model calls the same few convolutions every step, and their
# checks (~10 us of Python, most of a conv call's host time) pass the same way each time. Only calls that ran
# without conversions (float inputs of one dtype, no autocast, a channel bias) are kept.
_CONV_PLANS: dict = {}


def _conv_nd(op, nd, inp, weight, bias, stride, padding, dilation, groups, conv_mode):
    key = None
    if not _amp.enabled and isinstance(inp, Tensor) and isinstance(weight, Tensor) \
            and (bias is None or isinstance(bias, Tensor)):
        di, dw = inp._data, weight._data
        key = (op, di.shape, di.dtype, dw.shape, dw.dtype,
               None if bias is None else (bias._data.shape, bias._data.dtype),
               stride, padding, dilation, groups, conv_mode)
        try:
            plan = _CONV_PLANS.get(key)
        except TypeError:  # (a list argument: checked every time)
            key = plan = None
        if plan is not None:
            return _apply(plan, inp, weight) if bias is None else _apply(plan, inp, weight, bias)
    given = (inp, weight)
    _conv_mode(conv_mode, op)
    inp, weight = _t(inp, op=op), _t(weight, op=op)
    _ndim(inp, nd + 2, op, layout="(N, C, " + ", ".join("DHW"[3 - nd:]) + ")")
    # MegEngine converts integer/bool inputs of a convolution to float32 (its Convolution has no int kernels
    # for plain int32 tensors); so do we.
    inp, weight = (_T.astype(t, "float32") if t.dtype.kind in "iub" else t for t in (inp, weight))
    _float(inp, op)
    _float(weight, op, "weight")
    inp, weight = _promote(inp, weight)
    if _amp.enabled and nd != 3:  # autocast: low precision, as MegEngine's amp (its Convolution3D is not cast)
        inp, weight, bias = _amp.low(inp, weight, bias)
    groups, cout = _conv_channels(op, inp, weight, groups, nd)
    s, p, d = _geometry(op, stride, padding, dilation, nd)
    _out_size(inp.shape[2:], weight.shape[-nd:], s, p, d, op)
    late_bias = bias is not None and not _channel_shaped(_t(bias, op=op), cout, nd + 2)
    args = (inp, weight) + (() if late_bias else _bias(bias, cout, op))
    conv = _N.conv.bind(stride=s, padding=p, dilation=d, groups=groups, nd=nd)
    out = _apply(conv, *args)
    if key is not None and not late_bias and given[0] is inp and given[1] is weight \
            and (bias is None or args[2] is bias):
        if len(_CONV_PLANS) > 4096:
            _CONV_PLANS.clear()
        _CONV_PLANS[key] = conv
    if late_bias:
        # MegEngine adds the bias with `output += bias`: NumPy broadcasting, so a (C,) bias lines up with the
        # last axis (W), not the channels. Anything not shaped (1, C, 1, 1)-like goes that way, as there.
        from .elemwise import add
        bias = _t(bias, op=op)
        try:
            out = add(out, bias)
        except OpError:
            raise OpError(f"{op}: bias of shape {bias.shape} does not broadcast against the output "
                          f"{out.shape} (MegEngine adds it as `output + bias`; give it shape (1, C, 1...))") from None
    return out


def _channel_shaped(bias, cout, ndim):
    """True if ``bias`` broadcasts onto an ``ndim``-D output as one value per channel (``(1, C, 1, 1)``,
    ``(C, 1, 1)``)."""
    shape = (1,) * (ndim - bias.ndim) + tuple(bias.shape) if bias.ndim <= ndim else None
    if shape is None:
        return False
    return all(n == 1 for i, n in enumerate(shape) if i != 1) and shape[1] == cout


def conv1d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, conv_mode="cross_correlation",
           compute_mode="default"):
    """1-D convolution (cross-correlation) over an ``(N, C, W)`` input.

    Args:
        inp: input ``(N, C, W)``.
        weight: ``(O, C/groups, K)`` (or grouped ``(groups, O/groups, C/groups, K)``).
        bias: optional, ``O`` elements (MegEngine's shape is ``(1, O, 1)``).
        stride, padding, dilation: ints.
        groups: number of channel groups.
        conv_mode: only ``"cross_correlation"``.
        compute_mode: ``"default"`` or ``"float32"``, checked as MegEngine checks it (XLA picks the accumulation).

    Returns:
        output ``(N, O, OW)``.

    Example:
        >>> F.conv1d(F.ones((1, 2, 5)), F.ones((3, 2, 3))).shape
        (1, 3, 3)
    """
    if compute_mode != "default":
        _compute_mode(compute_mode, "conv1d")
    return _conv_nd("conv1d", 1, inp, weight, bias, stride, padding, dilation, groups, conv_mode)


def conv2d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, conv_mode="cross_correlation",
           compute_mode="default"):
    """2-D convolution (cross-correlation) over an NCHW input.

    Args:
        inp: input ``(N, C, H, W)``.
        weight: ``(O, C/groups, KH, KW)``, or MegEngine's grouped ``(groups, O/groups, C/groups, KH, KW)``.
        bias: optional, ``O`` elements (MegEngine's shape is ``(1, O, 1, 1)``).
        stride, padding, dilation: int or pair.
        groups: number of channel groups.
        conv_mode: only ``"cross_correlation"``.
        compute_mode: ``"default"`` or ``"float32"``, checked as MegEngine checks it (XLA picks the accumulation).

    Returns:
        output ``(N, O, OH, OW)`` with ``OH = (H + 2*PH - DH*(KH-1) - 1) // SH + 1``.

    Example:
        >>> F.conv2d(F.ones((1, 3, 8, 8)), F.ones((4, 3, 3, 3)), padding=1).shape
        (1, 4, 8, 8)
    """
    if compute_mode != "default":
        _compute_mode(compute_mode, "conv2d")
    return _conv_nd("conv2d", 2, inp, weight, bias, stride, padding, dilation, groups, conv_mode)


def conv3d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, conv_mode="cross_correlation"):
    """3-D convolution (cross-correlation) over an NCDHW input.

    Args:
        inp: input ``(N, C, D, H, W)``.
        weight: ``(O, C/groups, KD, KH, KW)`` (or grouped with a leading groups axis).
        bias: optional, ``O`` elements.
        stride, padding, dilation: int or triple.
        groups: number of channel groups.
        conv_mode: only ``"cross_correlation"``.

    Returns:
        output ``(N, O, OD, OH, OW)``.

    Example:
        >>> F.conv3d(F.ones((1, 2, 4, 4, 4)), F.ones((3, 2, 3, 3, 3))).shape
        (1, 3, 2, 2, 2)
    """
    return _conv_nd("conv3d", 3, inp, weight, bias, stride, padding, dilation, groups, conv_mode)


def _conv_transpose_nd(op, nd, inp, weight, bias, stride, padding, output_padding, dilation, groups, conv_mode):
    _conv_mode(conv_mode, op)
    inp, weight = _t(inp, op=op), _t(weight, op=op)
    _ndim(inp, nd + 2, op)
    _float(inp, op)
    _float(weight, op, "weight")
    inp, weight = _promote(inp, weight)
    if _amp.enabled and nd != 3:  # autocast: low precision, as MegEngine's amp (not its 3-D deconvolution)
        inp, weight, bias = _amp.low(inp, weight, bias)
    groups = int(groups)
    if groups < 1:
        raise OpError(f"{op}: groups must be positive, got {groups}")
    if weight.ndim == nd + 3:  # (G, I/G, O/G, *k)
        if weight.shape[0] != groups:
            raise OpError(f"{op}: grouped weight {weight.shape} has {weight.shape[0]} groups, but groups={groups}")
        cin, cout = weight.shape[0] * weight.shape[1], weight.shape[2] * groups
    elif weight.ndim == nd + 2:  # (I, O/G, *k)
        cin, cout = weight.shape[0], weight.shape[1] * groups
        if cin % groups:
            raise OpError(f"{op}: {cin} input channels are not divisible into {groups} groups")
    else:
        raise OpError(f"{op}: weight must be {nd + 2}-D (I, O/groups, ...) or {nd + 3}-D, got shape {weight.shape}")
    if inp.shape[1] != cin:
        raise OpError(f"{op}: input {tuple(inp.shape)} has {inp.shape[1]} channels but weight {weight.shape} "
                      f"expects {cin}")
    s = _positive(_tuple(stride, nd, "stride", op), "stride", op)
    p = _positive(_tuple(padding, nd, "padding", op), "padding", op, allow_zero=True)
    op_ = _positive(_tuple(output_padding, nd, "output_padding", op), "output_padding", op, allow_zero=True)
    d = _positive(_tuple(dilation, nd, "dilation", op), "dilation", op)
    if any(o >= max(ss, dd) for o, ss, dd in zip(op_, s, d)):
        raise OpError(f"{op}: output_padding {op_} must be smaller than stride {s} or dilation {d}")
    k = weight.shape[-nd:]
    out = [(i - 1) * ss - 2 * pp + dd * (kk - 1) + 1 + oo
           for i, ss, pp, dd, kk, oo in zip(inp.shape[2:], s, p, d, k, op_)]
    if any(o <= 0 for o in out):
        raise OpError(f"{op}: padding {p} leaves an empty output (size {tuple(out)})")
    args = (inp, weight) + _bias(bias, cout, op)
    return _apply(_N.conv_transpose.bind(stride=s, padding=p, output_padding=op_, dilation=d, groups=groups, nd=nd),
                  *args)


def conv_transpose2d(inp, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                     conv_mode="cross_correlation", compute_mode="default"):
    """2-D transposed convolution (the gradient of ``conv2d`` with respect to its input).

    Args:
        inp: input ``(N, C, H, W)``.
        weight: ``(C, O/groups, KH, KW)``, or grouped ``(groups, C/groups, O/groups, KH, KW)``.
        bias: optional, ``O`` elements.
        stride, padding, output_padding, dilation: int or pair.
        groups: number of channel groups.
        conv_mode: only ``"cross_correlation"``.
        compute_mode: ``"default"`` or ``"float32"``, checked as MegEngine checks it (XLA picks the accumulation).

    Returns:
        output ``(N, O, OH, OW)`` with ``OH = (H-1)*SH - 2*PH + DH*(KH-1) + 1 + output_padding``.

    Example:
        >>> F.conv_transpose2d(F.ones((1, 2, 4, 4)), F.ones((2, 3, 3, 3)), stride=2).shape
        (1, 3, 9, 9)
    """
    output_padding = _megengine_output_padding_2d(output_padding, "conv_transpose2d")
    if compute_mode != "default":
        _compute_mode(compute_mode, "conv_transpose2d")
    return _conv_transpose_nd("conv_transpose2d", 2, inp, weight, bias, stride, padding, output_padding,
                              dilation, groups, conv_mode)


def _megengine_output_padding_2d(output_padding, op):
    """MegEngine 1.13's 2-D transposed convolutions (functional/nn.py conv_transpose2d and
    functional/quantized.py conv_transpose2d) test ``if output_pad_h != 0 or output_pad_h != 0:`` (sic) before
    passing the padded output shape, so a width-only ``output_padding=(0, w)`` is dropped (and not checked against
    the stride): (0, 1) gives the shape and values of (0, 0). Matched, so a MegEngine model's layer sizes hold.
    ``conv_transpose3d`` tests all three and has no such quirk."""
    t = _tuple(output_padding, 2, "output_padding", op)
    return (0, 0) if t[0] == 0 else t


def conv_transpose3d(inp, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    """3-D transposed convolution.

    Args:
        inp: input ``(N, C, D, H, W)``.
        weight: ``(C, O/groups, KD, KH, KW)`` (or grouped with a leading groups axis).
        bias: optional, ``O`` elements.
        stride, padding, output_padding, dilation: int or triple.
        groups: number of channel groups.

    Returns:
        output ``(N, O, OD, OH, OW)``.

    Example:
        >>> F.conv_transpose3d(F.ones((1, 2, 2, 2, 2)), F.ones((2, 3, 2, 2, 2))).shape
        (1, 3, 3, 3, 3)
    """
    return _conv_transpose_nd("conv_transpose3d", 3, inp, weight, bias, stride, padding, output_padding,
                              dilation, groups, "cross_correlation")


def local_conv2d(inp, weight, bias=None, stride=1, padding=0, dilation=1, conv_mode="cross_correlation"):
    """Locally connected 2-D layer: a convolution whose kernel differs at each output position.

    Args:
        inp: input ``(N, C, H, W)``.
        weight: ``(groups, OH, OW, C/groups, KH, KW, O/groups)`` (MegEngine's LocalConv2d layout), or 6-D
            ``(OH, OW, C, KH, KW, O)``.
        bias: optional, added with broadcasting (e.g. ``(1, O, 1, 1)``).
        stride, padding, dilation: int or pair.
        conv_mode: only ``"cross_correlation"``.

    Returns:
        output ``(N, O, OH, OW)``.

    Example:
        >>> F.local_conv2d(F.ones((1, 2, 4, 4)), F.ones((1, 2, 2, 2, 3, 3, 5))).shape
        (1, 5, 2, 2)
    """
    op = "local_conv2d"
    _conv_mode(conv_mode, op)
    inp, weight = _t(inp, op=op), _t(weight, op=op)
    _ndim(inp, 4, op, layout="(N, C, H, W)")
    # (integer / bool operands become float32, as a convolution's: MegEngine 1.13 computes local_conv2d of an int32
    # input with a float weight)
    inp, weight = (_T.astype(t, "float32") if t.dtype.kind in "iub" else t for t in (inp, weight))
    _float(inp, op)
    if weight.ndim not in (6, 7):
        raise OpError(f"{op}: weight must be 7-D (groups, OH, OW, C/groups, KH, KW, O/groups) or 6-D, "
                      f"got shape {weight.shape}")
    _float(weight, op, "weight")
    inp, weight = _promote(inp, weight)
    w7 = weight.shape if weight.ndim == 7 else (1,) + weight.shape
    s, p, d = (_positive(_tuple(stride, 2, "stride", op), "stride", op),
               _positive(_tuple(padding, 2, "padding", op), "padding", op, True),
               _positive(_tuple(dilation, 2, "dilation", op), "dilation", op))
    if inp.shape[1] != w7[0] * w7[3]:
        raise OpError(f"{op}: input {tuple(inp.shape)} has {inp.shape[1]} channels but weight {weight.shape} "
                      f"expects {w7[0] * w7[3]}")
    out = _out_size(inp.shape[2:], w7[4:6], s, p, d, op)
    if out != w7[1:3]:
        raise OpError(f"{op}: weight {weight.shape} is for a {w7[1:3]} output, but the input gives {out}")
    y = _apply(_N.local_conv.bind(stride=s, padding=p, dilation=d), inp, weight)
    return y if bias is None else y + _t(bias, op=op)


def deformable_conv2d(inp, weight, offset, mask, bias=None, stride=1, padding=0, dilation=1, groups=1,
                      conv_mode="cross_correlation", compute_mode="default"):
    """Modulated deformable 2-D convolution (DCNv2).

    Each kernel tap samples the input bilinearly at its regular position plus a learned offset (zero outside
    the image), scaled by a mask value.

    Args:
        inp: input ``(N, C, H, W)``.
        weight: ``(O, C/groups, KH, KW)`` (or grouped 5-D).
        offset: ``(N, 2*DG*KH*KW, OH, OW)``: ``(dy, dx)`` for each deformable group and kernel tap (row-major),
            the channel order being ``[group][tap][dy, dx]``.
        mask: ``(N, DG*KH*KW, OH, OW)`` modulation scalars.
        bias: optional, ``O`` elements.
        stride, padding, dilation: int or pair.
        groups: number of channel groups.
        conv_mode: only ``"cross_correlation"``.
        compute_mode: ``"default"`` or ``"float32"``, checked as MegEngine checks it (XLA picks the accumulation).

    Returns:
        output ``(N, O, OH, OW)``.

    Example:
        >>> x, w = F.ones((1, 2, 4, 4)), F.ones((3, 2, 3, 3))
        >>> off, m = F.zeros((1, 18, 2, 2)), F.ones((1, 9, 2, 2))
        >>> F.deformable_conv2d(x, w, off, m).shape  # == conv2d(x, w) when offsets are 0 and masks 1
        (1, 3, 2, 2)
    """
    op = "deformable_conv2d"
    _conv_mode(conv_mode, op)
    if compute_mode != "default":
        _compute_mode(compute_mode, op)
    inp, weight, offset, mask = _t(inp, op=op), _t(weight, op=op), _t(offset, op=op), _t(mask, op=op)
    _ndim(inp, 4, op, layout="(N, C, H, W)")
    for x, what in ((inp, "input"), (weight, "weight"), (offset, "offset"), (mask, "mask")):
        _float(x, op, what)
    inp, weight, offset, mask = _promote(inp, weight, offset, mask)
    groups, cout = _conv_channels(op, inp, weight, groups, 2)
    s, p, d = _geometry(op, stride, padding, dilation, 2)
    kk = weight.shape[-2] * weight.shape[-1]
    out = _out_size(inp.shape[2:], weight.shape[-2:], s, p, d, op)
    n = inp.shape[0]
    if offset.ndim != 4 or offset.shape[0] != n or offset.shape[2:] != out or offset.shape[1] % (2 * kk):
        raise OpError(f"{op}: offset must be (N, 2*DG*{kk}, {out[0]}, {out[1]}) for input {inp.shape}, got "
                      f"shape {offset.shape}")
    dg = offset.shape[1] // (2 * kk)
    if inp.shape[1] % dg:
        raise OpError(f"{op}: {inp.shape[1]} channels are not divisible into {dg} deformable groups")
    if mask.shape != (n, dg * kk) + out:
        raise OpError(f"{op}: mask must have shape {(n, dg * kk) + out}, got {mask.shape}")
    args = (inp, weight, offset, mask) + _bias(bias, cout, op)
    return _apply(_N.deformable_conv.bind(stride=s, padding=p, dilation=d, groups=groups), *args)


def region_restricted_conv(inp, weight, rin, rout, bias=None, stride=1, padding=0, dilation=1, groups=1,
                           conv_mode="cross_correlation", compute_mode="default"):
    """Region-restricted 2-D convolution: output pixel ``(oh, ow)`` only sums input pixels of its own region.

    An input pixel ``(ih, iw)`` under the kernel contributes only if ``rin[n, ih, iw] == rout[n, oh, ow]``
    (zero padding contributes nothing).

    Args:
        inp: input ``(N, C, H, W)``.
        weight: ``(O, C/groups, KH, KW)`` or MegEngine's grouped ``(groups, O/groups, C/groups, KH, KW)``.
        rin: integer region ids of the input pixels ``(N, H, W)``.
        rout: integer region ids of the output pixels ``(N, OH, OW)``.
        bias: optional, ``O`` elements.
        stride, padding, dilation: int or pair.
        groups: number of channel groups.
        conv_mode: only ``"cross_correlation"``.
        compute_mode: ``"default"`` or ``"float32"``, checked as MegEngine checks it (XLA picks the accumulation).

    Returns:
        output ``(N, O, OH, OW)``.

    Example:
        >>> x, w = F.ones((1, 1, 3, 3)), F.ones((1, 1, 1, 3, 3))
        >>> rin = Tensor([[[0, 0, 1], [0, 0, 1], [1, 1, 1]]])
        >>> F.region_restricted_conv(x, w, rin, Tensor([[[0]]]), groups=1).numpy().ravel()  # 4 pixels of region 0
        array([4.], dtype=float32)
    """
    op = "region_restricted_conv"
    _conv_mode(conv_mode, op)
    inp, weight, rin, rout = _t(inp, op=op), _t(weight, op=op), _t(rin, op=op), _t(rout, op=op)
    _ndim(inp, 4, op, layout="(N, C, H, W)")
    _float(inp, op)
    _float(weight, op, "weight")
    inp, weight = _promote(inp, weight)
    groups, cout = _conv_channels(op, inp, weight, groups, 2)
    s, p, d = _geometry(op, stride, padding, dilation, 2)
    out = _out_size(inp.shape[2:], weight.shape[-2:], s, p, d, op)
    n = inp.shape[0]
    for r, what, shape in ((rin, "rin", (n,) + inp.shape[2:]), (rout, "rout", (n,) + out)):
        if r.dtype.kind not in "iu":
            raise OpError(f"{op}: {what} must hold integer region ids, got {r.dtype}")
        if r.shape != shape:
            raise OpError(f"{op}: {what} must have shape {shape}, got {r.shape}")
    args = (inp, weight, rin, rout) + _bias(bias, cout, op)
    return _apply(_N.region_restricted_conv.bind(stride=s, padding=p, dilation=d, groups=groups), *args)


def linear(inp, weight, bias=None, compute_mode="default"):
    """Applies a linear transformation: ``inp @ weight.T + bias``.

    Args:
        inp: input ``(..., in_features)``.
        weight: ``(out_features, in_features)``.
        bias: optional ``(out_features,)``.
        compute_mode: ``"default"`` or ``"float32"``, checked as MegEngine checks it (XLA picks the accumulation).

    Returns:
        output ``(..., out_features)``.

    Example:
        >>> F.linear(F.ones((2, 3)), F.ones((4, 3))).shape
        (2, 4)
    """
    if compute_mode != "default":
        _compute_mode(compute_mode, "linear", any_name=True)
    inp, weight = _t(inp, op="linear"), _t(weight, op="linear")
    if _amp.enabled:  # autocast: compute in low precision, as MegEngine's amp
        inp, weight, bias = _amp.low(inp, weight, bias)
    if weight.ndim != 2 or inp.ndim < 1 or _lazy.dim(inp, -1) != weight.shape[1]:  # (``f[fg]``: no count read)
        raise OpError(f"linear: input {inp.shape} does not match weight {weight.shape} (expects (out, in))")
    if QPARAMS_SEEN[0] and (quantized_params(inp) or quantized_params(weight)):
        # MegEngine's linear is matmul + bias: on quantized operands a qint32 product (see matmul)
        from .math import matmul
        out = matmul(inp, weight, transpose_b=True)
        return out if bias is None else out + bias
    args = (inp, weight) if bias is None else (inp, weight, _t(bias, op="linear"))
    return _apply(_L.linear.bind(), *args)


# ---- pooling ----------------------------------------------------------------------------------------------------
def _pool_args(op, inp, kernel_size, stride, padding, padding_counts=False):
    inp = _t(inp, op=op)
    _ndim(inp, 4, op, layout="NCHW")
    k = _positive(_tuple(kernel_size, 2, "kernel_size", op), "kernel_size", op)
    s = k if stride is None else _positive(_tuple(stride, 2, "stride", op), "stride", op)
    p = _positive(_tuple(padding, 2, "padding", op), "padding", op, allow_zero=True)
    out = _out_size(inp.shape[2:], k, s, p, (1, 1), op)
    if not padding_counts:
        # a window wholly in the padding has no element to take the max / mean of (-inf / nan): MegEngine raises
        # "The pooling window lies outside completely"; only avg_pool2d(mode="average") counts the padding's zeros
        for n, o, kk, ss, pp in zip(inp.shape[2:], out, k, s, p):
            # (windows start further right one by one: only the first or the last can lie wholly in the padding)
            if kk - pp <= 0 or (o - 1) * ss - pp >= n:
                raise OpError(f"{op}: a pooling window lies wholly in the padding (kernel {k}, stride {s}, padding "
                              f"{p}, input size {inp.shape[2:]}): the pooling window lies outside completely")
    return inp, k, s, p


def max_pool2d(inp, kernel_size, stride=None, padding=0):
    """2-D max pooling over an NCHW input (padding never wins the max).

    Args:
        inp: input ``(N, C, H, W)``.
        kernel_size: int or pair.
        stride: int or pair; default ``kernel_size``.
        padding: int or pair.

    Returns:
        output ``(N, C, OH, OW)``, ``OH = (H + 2*PH - KH) // SH + 1``.

    Example:
        >>> F.max_pool2d(F.arange(16).reshape(1, 1, 4, 4), 2).numpy().ravel()
        array([ 5.,  7., 13., 15.], dtype=float32)
    """
    inp, k, s, p = _pool_args("max_pool2d", inp, kernel_size, stride, padding)
    return keep_qparams(_apply(_N.max_pool.bind(kernel=k, stride=s, padding=p), inp), inp)


def avg_pool2d(inp, kernel_size, stride=None, padding=0, mode="average_count_exclude_padding"):
    """2-D average pooling over an NCHW input.

    Args:
        inp: input ``(N, C, H, W)``.
        kernel_size: int or pair.
        stride: int or pair; default ``kernel_size``.
        padding: int or pair.
        mode: ``"average_count_exclude_padding"`` (divide by the number of real elements in the window) or
            ``"average"`` (divide by the window size, padding counted as zeros).

    Returns:
        output ``(N, C, OH, OW)``.

    Example:
        >>> F.avg_pool2d(F.ones((1, 1, 4, 4)), 2, padding=1, mode="average").numpy()[0, 0]
        array([[0.25, 0.5 , 0.25],
               [0.5 , 1.  , 0.5 ],
               [0.25, 0.5 , 0.25]], dtype=float32)
    """
    mode = str(getattr(mode, "name", mode)).lower()
    if mode not in ("average_count_exclude_padding", "average"):
        raise OpError(f"avg_pool2d: mode must be 'average' or 'average_count_exclude_padding', got {mode!r}")
    inp, k, s, p = _pool_args("avg_pool2d", inp, kernel_size, stride, padding, padding_counts=mode == "average")
    q = _through_float(inp, lambda x: avg_pool2d(x, kernel_size, stride, padding, mode))
    if q is not None:
        return q
    _float(inp, "avg_pool2d")
    return _apply(_N.avg_pool.bind(kernel=k, stride=s, padding=p, mode=mode), inp)


def _adaptive(op, inp, oshp, kind):
    inp = _t(inp, op=op)
    _ndim(inp, 4, op, layout="NCHW")
    oshp = _positive(_tuple(oshp, 2, "oshp", op), "oshp", op)
    if oshp[0] > inp.shape[2] or oshp[1] > inp.shape[3]:
        raise OpError(f"{op}: output size {oshp} is larger than the input size {inp.shape[2:]}")
    if kind == "avg":
        q = _through_float(inp, lambda x: _adaptive(op, x, oshp, kind))
        if q is not None:
            return q
        _float(inp, op)  # (as avg_pool2d; MegEngine has no integer kernel for either)
    return keep_qparams(_apply(_N.adaptive_pool.bind(oshp=oshp, op=kind), inp), inp)


def adaptive_avg_pool2d(inp, oshp):
    """Average pooling to the output size ``oshp``.

    MegEngine's window rule: ``stride = in // out`` and ``kernel = in - (out - 1) * stride`` per axis.

    Args:
        inp: input ``(N, C, H, W)``.
        oshp: int, pair, or a 1-D Tensor: ``(OH, OW)``.

    Returns:
        output ``(N, C, OH, OW)``.

    Example:
        >>> F.adaptive_avg_pool2d(F.arange(16).reshape(1, 1, 4, 4), 2).numpy().ravel()
        array([ 2.5,  4.5, 10.5, 12.5], dtype=float32)
    """
    return _adaptive("adaptive_avg_pool2d", inp, oshp, "avg")


def adaptive_max_pool2d(inp, oshp):
    """Max pooling to the output size ``oshp`` (window rule as :func:`adaptive_avg_pool2d`).

    Args:
        inp: input ``(N, C, H, W)``.
        oshp: int, pair, or a 1-D Tensor: ``(OH, OW)``.

    Returns:
        output ``(N, C, OH, OW)``.

    Example:
        >>> F.adaptive_max_pool2d(F.arange(16).reshape(1, 1, 4, 4), 2).numpy().ravel()
        array([ 5.,  7., 13., 15.], dtype=float32)
    """
    return _adaptive("adaptive_max_pool2d", inp, oshp, "max")


# ---- softmax --------------------------------------------------------------------------------------------------
def _softmax_axis(op, inp, axis):
    if axis is None:
        # MegEngine's rule (``_get_softmax_axis``): axis 0 for 0-, 1- and 3-D inputs, else 1.
        return 0 if inp.ndim in (0, 1, 3) else 1
    try:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    except TypeError:
        axes = (axis,)
    nd = max(inp.ndim, 1)
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):  # (MegEngine: "Unable to cast")
            raise OpError(f"{op}: axis must be an int, got {axis!r}")
        if not -nd <= int(a) < nd:
            raise OpError(f"{op}: axis {a} is out of range for a tensor of shape {inp.shape}")
    axes = tuple(sorted(int(a) % nd for a in axes))
    return axes[0] if len(axes) == 1 else axes


def softmax(inp, axis=None):
    """Applies ``exp(x) / sum(exp(x))`` along ``axis``, computed stably.

    Args:
        inp: input tensor.
        axis: int or ints; default follows MegEngine: 0 for 0-, 1- and 3-D inputs, else 1.

    Returns:
        a tensor like ``inp`` summing to 1 along ``axis``.

    Example:
        >>> F.softmax(Tensor([[1., 1.], [0., 0.]])).numpy()
        array([[0.5, 0.5],
               [0.5, 0.5]], dtype=float32)
    """
    inp = _t(inp, op="softmax")
    _float(inp, "softmax")
    axis = _softmax_axis("softmax", inp, axis)
    if inp.ndim == 0:  # MegEngine's softmax of a 0-d tensor is that of one element (its kernel sees shape (1,))
        return _T.reshape(_apply(_N.softmax.bind(axis=0), _T.reshape(inp, (1,))), ())
    return _apply(_N.softmax.bind(axis=axis), inp)


def logsoftmax(inp, axis):
    """Applies ``log(softmax(x))`` along ``axis``, computed stably as ``x - logsumexp(x, axis)``.

    Args:
        inp: input tensor.
        axis: int or ints.

    Returns:
        a tensor like ``inp``.

    Example:
        >>> F.logsoftmax(Tensor([[0., 0.]]), 1).numpy()  # log(1/2)
        array([[-0.6931472, -0.6931472]], dtype=float32)
    """
    inp = _t(inp, op="logsoftmax")
    _float(inp, "logsoftmax")
    if axis is None:
        raise AssertedOpError("logsoftmax: axis is required")  # (MegEngine asserts it, in its logsumexp)
    if _amp.enabled:  # autocast: float32, as MegEngine's ``x - logsumexp(x)`` (its logsumexp computes in float32)
        inp, = _amp.up(inp)
    axis = _softmax_axis("logsoftmax", inp, axis)
    if inp.ndim == 0:  # (as softmax's)
        return _T.reshape(_apply(_N.log_softmax.bind(axis=0), _T.reshape(inp, (1,))), ())
    return _apply(_N.log_softmax.bind(axis=axis), inp)


log_softmax = logsoftmax


# ---- activations with parameters, one-hot, embedding ------------------------------------------------------------
def leaky_relu(inp, negative_slope=0.01):
    """Applies ``x if x > 0 else negative_slope * x`` elementwise.

    Args:
        inp: input tensor.
        negative_slope: slope for negative inputs.

    Returns:
        a tensor like ``inp``.

    Example:
        >>> F.leaky_relu(Tensor([-1., 1.]), 0.1).numpy()
        array([-0.1,  1. ], dtype=float32)
    """
    inp = _t(inp, op="leaky_relu")  # (the slope an input: one kernel for every value -- core/ops/elemwise.py)
    slope = float(negative_slope)
    return _apply(_E.leaky_relu.bind(), inp, _scalar(slope, inp.dtype if is_float(inp.dtype) else _F32))


def prelu(x, y):
    """Applies ``max(x, 0) + y * min(x, 0)`` elementwise (``y`` broadcasts as in any elementwise op). The
    parameters are named ``x`` and ``y``, as MegEngine's (``F.prelu(x=..., y=...)``).

    Args:
        x: input tensor.
        y: slopes broadcastable to ``x`` (``M.PReLU`` passes ``(1, C, 1, 1)``), or a scalar; a 1-D weight with one
            slope per channel that does not broadcast is applied along axis 1.

    Returns:
        a tensor like ``x``.

    Example:
        >>> F.prelu(Tensor([-1., 1.]), Tensor([0.25])).numpy()
        array([-0.25,  1.  ], dtype=float32)
    """
    inp = _t(x, op="prelu")
    weight = _t(y, inp, op="prelu")  # a Python slope takes the input's dtype (float16 stays float16), as MegEngine's
    try:
        np.broadcast_shapes(inp.shape, weight.shape)
        broadcasts = True
    except ValueError:
        broadcasts = False
    if not broadcasts and weight.size > 1 and inp.ndim > 1:
        if weight.size != inp.shape[1]:
            raise OpError(f"prelu: weight has {weight.size} elements but the input has {inp.shape[1]} channels")
        weight = _T.reshape(weight, (1, -1) + (1,) * (inp.ndim - 2))
    return _apply(_E.prelu.bind(), inp, weight)


def one_hot(inp, num_classes, dtype=None):
    """One-hot encode integer labels along a new last axis.

    Args:
        inp: integer labels of any shape.
        num_classes: number of classes (the new axis' size).
        dtype: output dtype; default the labels' dtype (int32), as MegEngine.

    Returns:
        a tensor of shape ``inp.shape + (num_classes,)``.

    Example:
        >>> F.one_hot(Tensor([1, 2]), 3).numpy()
        array([[0, 1, 0],
               [0, 0, 1]], dtype=int32)
    """
    inp = _t(inp, op="one_hot")
    if inp.dtype.kind not in "iu":
        raise OpError(f"one_hot: labels must be integers, got {inp.dtype}")
    if int(num_classes) < 1:
        raise OpError(f"one_hot: num_classes must be positive, got {num_classes}")
    dtype = inp.dtype if dtype is None else np.dtype(dtype)
    # MegEngine's IndexingSetOneHot raises for a label outside [0, num_classes); here it was an all-zero row
    check_index_tensor("one_hot", inp, int(num_classes), inp.ndim, allow_negative=False, what="label")
    return _apply(_S.one_hot.bind(num_classes=int(num_classes), dtype=dtype.name), inp)


def embedding(inp, weight, padding_idx=None, max_norm=None, norm_type=None):
    """Looks up rows of ``weight`` at the integer indices ``inp``.

    Args:
        inp: integer indices of any shape.
        weight: the embedding table ``(num_embeddings, dim)``.
        padding_idx, max_norm, norm_type: unsupported (must be None), as in MegEngine.

    Returns:
        a tensor of shape ``inp.shape + (dim,)``.

    Example:
        >>> F.embedding(Tensor([[1, 0]]), F.eye(3)).numpy()
        array([[[0., 1., 0.],
                [1., 0., 0.]]], dtype=float32)
    """
    if padding_idx is not None:
        raise OpError("embedding: padding_idx is not supported (as in MegEngine)")
    if max_norm is not None or norm_type is not None:
        raise OpError("embedding: weight normalisation (max_norm, norm_type) is not supported (as in MegEngine)")
    inp, weight = _t(inp, op="embedding"), _t(weight, op="embedding")
    if inp.dtype.kind not in "iu":
        raise OpError(f"embedding: indices must be integers, got {inp.dtype}")
    _ndim(weight, 2, "embedding", "weight", "(num_embeddings, dim)")
    # MegEngine indexes `weight[inp]` (range-checked, negative indices count from the end); here an index
    # past the table gave a row of NaN
    check_index_tensor("embedding", inp, weight.shape[0], 0)
    return _apply(_N.embedding.bind(), inp, weight)


# ---- normalisation ----------------------------------------------------------------------------------------------
def _stat_shape(inp, op):
    if inp.ndim < 2:
        raise OpError(f"{op}: input must be at least 2-D (N, C, ...), got shape {inp.shape}")
    return (1, inp.shape[1]) + (1,) * (inp.ndim - 2)


def _shaped(t, shape):
    # (a module's statistics and affine parameters are stored (1, C, 1, 1) already: no reshape op for them --
    # four per layer and call, most of an evaluation BatchNorm's host time)
    t = _t(t)
    return t if t.shape == shape else _T.reshape(t, shape)


def _bn(op, inp, running_mean, running_var, weight, bias, training, momentum, eps, eps_mode, inplace):
    inp = _t(inp, op=op)
    if _amp.enabled and is_float(inp.dtype):
        # autocast (MegEngine's rule): the input in low precision, the statistics and affine parameters in
        # high precision; the primitive computes in float32 and returns the input's dtype (conv -> BN -> ReLU
        # stays float16)
        inp, = _amp.low(inp)
        weight, bias = _amp.high(weight, bias)
    shape = _stat_shape(inp, op)
    _float(inp, op)
    c = inp.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and _t(t, op=op).size != c:
            raise OpError(f"{op}: {name} must have {c} elements (shape {shape}), got shape {_t(t, op=op).shape}")
    if eps_mode not in ("additive", "max"):
        raise OpError(f"{op}: eps_mode must be 'additive' or 'max', got {eps_mode!r}")
    if not training and (running_mean is None or running_var is None):
        raise OpError(f"{op}: running_mean and running_var are required when training=False")
    if training and inplace:
        for name, t in (("running_mean", running_mean), ("running_var", running_var)):
            if t is not None and not isinstance(t, Tensor):
                raise OpError(f"{op}: {name} must be a Tensor to be updated in place")
    affine = ()
    if weight is not None or bias is not None:
        w = _T.ones(shape, dtype=inp.dtype) if weight is None else _shaped(weight, shape)
        b = _T.zeros(shape, dtype=inp.dtype) if bias is None else _shaped(bias, shape)
        affine = (w, b)
    if not training:
        return _apply(_N.batch_norm_infer.bind(eps=float(eps), eps_mode=eps_mode), inp,
                      _shaped(running_mean, shape), _shaped(running_var, shape), *affine)
    axes = (0,) + tuple(range(2, inp.ndim))
    out, mean, var = _apply(_N.batch_norm_train.bind(axes=axes, eps=float(eps), eps_mode=eps_mode), inp, *affine)
    if running_mean is None and running_var is None:
        return out
    # MegEngine's rule: running = momentum * running + (1 - momentum) * batch statistic, the variance unbiased.
    # The running statistics are not differentiable (MegEngine's BatchNorm outputs them without a gradient):
    # a later use of them must not send gradients back into this batch.
    mean, var = mean.detach(), var.detach()
    n = inp.size // c
    new_mean = new_var = None
    if running_mean is not None:
        rm = _t(running_mean, op=op)
        new_mean = rm * momentum + _T.reshape(mean, rm.shape).astype(rm.dtype) * (1 - momentum)
    if running_var is not None:
        rv = _t(running_var, op=op)
        new_var = rv * momentum + _T.reshape(var, rv.shape).astype(rv.dtype) * _N.unbiased_factor(momentum, n)
    if not inplace:
        return out, new_mean, new_var
    _interrupt.rebind([(t, v) for t, v in ((running_mean, new_mean), (running_var, new_var)) if v is not None])
    return out


def batch_norm(inp, running_mean=None, running_var=None, weight=None, bias=None, *, training=False,
               momentum=0.9, eps=1e-5, inplace=True):
    """Applies batch normalisation over all axes but the channel axis 1.

    In training, batch statistics normalise the input and the running buffers (when given) are updated:
    ``running = momentum * running + (1 - momentum) * batch_stat``, with the unbiased batch variance. In
    inference the running buffers (required) normalise the input.

    Args:
        inp: input ``(N, C, ...)``.
        running_mean, running_var: ``(1, C, 1, ...)`` buffers (any shape with C elements), or None.
        weight, bias: affine parameters with C elements, or None (1 and 0).
        training: use (and record) batch statistics.
        momentum: weight of the old running value.
        eps: added to the variance.
        inplace: update the buffers in place and return the output; else return
            ``(output, new_running_mean, new_running_var)`` (training only).

    Returns:
        the normalised tensor (see ``inplace``).

    Example:
        >>> x = Tensor(np.arange(8, dtype="float32").reshape(2, 2, 2, 1))
        >>> rm, rv = F.zeros((1, 2, 1, 1)), F.ones((1, 2, 1, 1))
        >>> y = F.batch_norm(x, rm, rv, training=True)
        >>> rm.numpy().ravel().round(4)  # 0.9 * 0 + 0.1 * batch mean
        array([0.25, 0.45], dtype=float32)
    """
    return _bn("batch_norm", inp, running_mean, running_var, weight, bias, training, momentum, eps, "additive",
               inplace)


def sync_batch_norm(inp, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.9,
                    eps=1e-5, eps_mode="additive", group=None):
    """Batch normalisation with statistics synchronised over a process group.

    In training, when distributed, the mean and variance are those of the batches of all processes of
    ``group`` (per-channel sums all-reduced; the gradient flows through the mirrored all-reduce), and the
    running buffers are updated in place with them. Otherwise (evaluation, a single process) it is exactly
    :func:`batch_norm`.

    Args:
        inp: input ``(N, C, ...)``.
        running_mean, running_var: ``(1, C, 1, ...)`` buffers, or None.
        weight, bias: affine parameters with C elements, or None.
        training: use batch statistics.
        momentum: weight of the old running value.
        eps: the epsilon.
        eps_mode: ``"additive"`` (``var + eps``) or ``"max"`` (``max(var, eps)``).
        group: the communication group (None: ``WORLD``).

    Returns:
        the normalised tensor.

    Example:
        >>> x = Tensor(np.arange(8, dtype="float32").reshape(2, 2, 2, 1))
        >>> F.sync_batch_norm(x, F.zeros((1, 2, 1, 1)), F.ones((1, 2, 1, 1)), training=True).shape
        (2, 2, 2, 1)
    """
    if training:
        from .distributed import _sync_needed, _sync_batch_norm_train
        if _sync_needed(group):  # statistics of the whole group's batch (megxla.functional.distributed)
            _bn("sync_batch_norm", inp, None, None, weight, bias, True, momentum, eps, eps_mode, True)  # validates
            return _sync_batch_norm_train(inp, running_mean, running_var, weight, bias, momentum, eps, eps_mode,
                                          group)
    return _bn("sync_batch_norm", inp, running_mean, running_var, weight, bias, training, momentum, eps,
               eps_mode, True)


def _affine_args(op, affine, weight, bias, shape):
    if not affine:
        return ()
    if weight is None or bias is None:
        raise OpError(f"{op}: affine=True needs both weight and bias")
    weight, bias = _t(weight, op=op), _t(bias, op=op)
    for name, t in (("weight", weight), ("bias", bias)):
        if t.size != math.prod(shape):  # (Python ints: ~15x cheaper than np.prod, on every layer_norm)
            raise OpError(f"{op}: {name} must have shape {tuple(shape)}, got {t.shape}")
    return (weight, bias)


def layer_norm(inp, normalized_shape, affine, weight=None, bias=None, eps=1e-5):
    """Applies layer normalisation over the trailing ``normalized_shape`` axes.

    Args:
        inp: input tensor.
        normalized_shape: int or tuple: the trailing shape to normalise over.
        affine: apply ``weight`` and ``bias`` (both required then, shaped ``normalized_shape``).
        weight, bias: the affine parameters.
        eps: added to the variance.

    Returns:
        a tensor like ``inp``.

    Example:
        >>> F.layer_norm(Tensor([[1., 3.]]), 2, affine=False).numpy()
        array([[-0.999995,  0.999995]], dtype=float32)
    """
    inp = _t(inp, op="layer_norm")
    ns = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) else tuple(
        int(s) for s in normalized_shape)
    if not ns or inp.shape[inp.ndim - len(ns):] != ns or len(ns) > inp.ndim:
        raise OpError(f"layer_norm: normalized_shape {ns} does not match the trailing dims of {inp.shape}")
    _float(inp, "layer_norm")
    args = (inp,) + _affine_args("layer_norm", affine, weight, bias, ns)
    if _amp.enabled:  # autocast: normalisations compute in float32, as MegEngine's amp
        args = _amp.up(*args)
    return _apply(_N.layer_norm.bind(ndim=len(ns), eps=float(eps)), *args)


def group_norm(inp, num_groups, affine, weight=None, bias=None, eps=1e-5):
    """Applies group normalisation: statistics over each group of channels (and the spatial axes).

    Args:
        inp: input ``(N, C, ...)``.
        num_groups: number of channel groups (divides C).
        affine: apply per-channel ``weight`` and ``bias`` (both required then, C elements).
        weight, bias: the affine parameters.
        eps: added to the variance.

    Returns:
        a tensor like ``inp``.

    Example:
        >>> F.group_norm(F.ones((2, 4, 3, 3)), 2, affine=False).shape
        (2, 4, 3, 3)
    """
    return _group_norm(inp, num_groups, affine, weight, bias, eps, "group_norm")


def _group_norm(inp, num_groups, affine, weight, bias, eps, op):
    inp = _t(inp, op=op)
    _stat_shape(inp, op)
    _float(inp, op)
    num_groups = int(num_groups)
    if num_groups < 1 or inp.shape[1] % num_groups:
        raise OpError(f"{op}: {inp.shape[1]} channels are not divisible into {num_groups} groups")
    args = _affine_args(op, affine, weight, bias, (inp.shape[1],))
    args = (inp,) + tuple(_T.flatten(a) for a in args)
    if _amp.enabled and op == "group_norm":
        # autocast: GroupNorm computes in float32, as MegEngine's amp (its instance_norm keeps the dtype)
        args = _amp.up(*args)
    return _apply(_N.group_norm.bind(groups=num_groups, eps=float(eps)), *args)


def instance_norm(inp, affine, weight=None, bias=None, eps=1e-5):
    """Applies instance normalisation: each channel of each sample over its spatial axes.

    Args:
        inp: input ``(N, C, ...)``.
        affine: apply per-channel ``weight`` and ``bias`` (both required then).
        weight, bias: the affine parameters (C elements).
        eps: added to the variance.

    Returns:
        a tensor like ``inp``.

    Example:
        >>> F.instance_norm(F.ones((2, 4, 3, 3)), affine=False).shape
        (2, 4, 3, 3)
    """
    inp = _t(inp, op="instance_norm")
    _stat_shape(inp, "instance_norm")
    return _group_norm(inp, inp.shape[1], affine, weight, bias, eps, "instance_norm")


def general_norm(inp, normalized_axis, affine=True, weight=None, bias=None, eps=1e-5):
    """Normalises over the axes ``normalized_axis`` (layer norm generalised to any axes).

    Args:
        inp: input tensor.
        normalized_axis: int or ints: the axes to compute mean and variance over.
        affine: apply ``weight`` and ``bias``, shaped as ``inp`` at ``normalized_axis``.
        weight, bias: the affine parameters.
        eps: added to the variance.

    Returns:
        a tensor like ``inp``.

    Example:
        >>> x = F.arange(24).reshape(2, 3, 4)
        >>> F.general_norm(x, (0, 2), True, F.ones((2, 4)), F.zeros((2, 4))).shape
        (2, 3, 4)
    """
    inp = _t(inp, op="general_norm")
    axes = (normalized_axis,) if isinstance(normalized_axis, (int, np.integer)) else tuple(normalized_axis)
    if not axes or any(not -inp.ndim <= int(a) < inp.ndim for a in axes):
        raise OpError(f"general_norm: bad normalized_axis {normalized_axis!r} for a tensor of shape {inp.shape}")
    axes = tuple(sorted({int(a) % inp.ndim for a in axes}))
    _float(inp, "general_norm")
    args = (inp,) + _affine_args("general_norm", affine, weight, bias, tuple(inp.shape[a] for a in axes))
    return _apply(_N.general_norm.bind(axes=axes, eps=float(eps)), *args)


def local_response_norm(inp, kernel_size=5, k=2.0, alpha=1e-4, beta=0.75):
    """Applies local response normalisation across channels.

    ``y = x / (k + alpha * sum(x[c']^2 for c' in a window of kernel_size channels around c)) ** beta``
    (megdnn's rule: ``alpha`` is not divided by ``kernel_size``).

    Args:
        inp: input ``(N, C, ...)``.
        kernel_size: the (odd) number of channels in a window.
        k, alpha, beta: the formula's constants.

    Returns:
        a tensor like ``inp``.

    Example:
        >>> F.local_response_norm(Tensor([[[[1.]]]]), 3, k=1.0).numpy()  # 1 / (1 + 1e-4) ** 0.75
        array([[[[0.999925]]]], dtype=float32)
    """
    inp = _t(inp, op="local_response_norm")
    _stat_shape(inp, "local_response_norm")
    _float(inp, "local_response_norm")
    kernel_size = int(kernel_size)
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise OpError(f"local_response_norm: kernel_size must be a positive odd int, got {kernel_size}")
    return _apply(_N.local_response_norm.bind(kernel_size=kernel_size, k=float(k), alpha=float(alpha),
                                              beta=float(beta)), inp)


# ---- dropout, pixel shuffle, sliding windows --------------------------------------------------------------------
def dropout(inp, drop_prob, training=True):
    """Zeroes each element with probability ``drop_prob`` and scales the rest by ``1 / (1 - drop_prob)``.

    The draw uses a key split from the global generator (``megxla.random.seed`` makes it reproducible).

    Args:
        inp: input tensor.
        drop_prob: probability in ``[0, 1)``.
        training: apply dropout; when False the input is returned unchanged.

    Returns:
        a tensor like ``inp``.

    Example:
        >>> y = F.dropout(F.ones((1000,)), 0.5)
        >>> sorted(set(y.numpy().tolist()))
        [0.0, 2.0]
    """
    from ..random import next_key
    if not 0 <= drop_prob < 1:
        # (MegEngine asserts it: an AssertionError too)
        raise AssertedOpError(f"dropout: drop_prob must be in [0, 1), got {drop_prob}")
    inp = _t(inp, op="dropout")
    if not training or drop_prob == 0:
        return inp
    _float(inp, "dropout")
    keep = 1.0 - float(drop_prob)  # (inputs, not parameters: one kernel for every rate -- core/ops/random.py)
    return _apply(_RP.dropout.bind(), inp, next_key(), _scalar(keep, _F32), _scalar(keep, inp.dtype))


def pixel_shuffle(inp, upscale_factor):
    """Rearranges ``(..., C * r * r, H, W)`` into ``(..., C, H * r, W * r)`` (sub-pixel convolution).

    Args:
        inp: input with at least 3 dims.
        upscale_factor: ``r``.

    Returns:
        the rearranged tensor.

    Example:
        >>> F.pixel_shuffle(F.arange(8).reshape(1, 4, 1, 2), 2).numpy()[0, 0]
        array([[0., 2., 1., 3.],
               [4., 6., 5., 7.]], dtype=float32)
    """
    inp = _t(inp, op="pixel_shuffle")
    r = int(upscale_factor)
    if inp.ndim < 3:
        raise OpError(f"pixel_shuffle: input must be at least 3-D (..., C, H, W), got shape {inp.shape}")
    if r < 1 or inp.shape[-3] % (r * r):
        raise OpError(f"pixel_shuffle: {inp.shape[-3]} channels are not divisible by upscale_factor^2 = {r * r}")
    *lead, c, h, w = inp.shape
    nl = len(lead)
    x = _T.reshape(inp, tuple(lead) + (c // (r * r), r, r, h, w))
    x = _T.transpose(x, tuple(range(nl)) + tuple(nl + i for i in (0, 3, 1, 4, 2)))
    return _T.reshape(x, tuple(lead) + (c // (r * r), h * r, w * r))


def _window_args(op, kernel_size, padding, stride, dilation):
    return (_positive(_tuple(kernel_size, 2, "kernel_size", op), "kernel_size", op),
            _positive(_tuple(padding, 2, "padding", op), "padding", op, True),
            _positive(_tuple(stride, 2, "stride", op), "stride", op),
            _positive(_tuple(dilation, 2, "dilation", op), "dilation", op))


def sliding_window(inp, kernel_size, padding=0, stride=1, dilation=1):
    """Extracts the sliding windows of a zero-padded NCHW input (im2col).

    Args:
        inp: input ``(N, C, H, W)``.
        kernel_size, padding, stride, dilation: int or pair.

    Returns:
        ``(N, C, OH, OW, KH, KW)``: the window at each output position.

    Example:
        >>> F.sliding_window(F.arange(16).reshape(1, 1, 4, 4), 2, stride=2).shape
        (1, 1, 2, 2, 2, 2)
    """
    op = "sliding_window"
    inp = _t(inp, op=op)
    _ndim(inp, 4, op, layout="(N, C, H, W)")
    k, p, s, d = _window_args(op, kernel_size, padding, stride, dilation)
    _out_size(inp.shape[2:], k, s, p, d, op)
    return _apply(_N.sliding_window.bind(kernel=k, padding=p, stride=s, dilation=d), inp)


def sliding_window_transpose(inp, output_size, kernel_size, padding=0, stride=1, dilation=1):
    """Sums sliding windows back into an image: the adjoint of :func:`sliding_window` (col2im).

    Args:
        inp: windows ``(N, C, OH, OW, KH, KW)``.
        output_size: the image size ``(H, W)``.
        kernel_size, padding, stride, dilation: int or pair, as given to :func:`sliding_window`.

    Returns:
        ``(N, C, H, W)``.

    Example:
        >>> F.sliding_window_transpose(F.ones((1, 1, 3, 3, 2, 2)), 4, 2).numpy()[0, 0, 1]  # overlap counts
        array([2., 4., 4., 2.], dtype=float32)
    """
    op = "sliding_window_transpose"
    inp = _t(inp, op=op)
    _ndim(inp, 6, op, layout="(N, C, OH, OW, KH, KW)")
    size = _positive(_tuple(output_size, 2, "output_size", op), "output_size", op)
    k, p, s, d = _window_args(op, kernel_size, padding, stride, dilation)
    out = _out_size(size, k, s, p, d, op)
    if inp.shape[2:] != out + k:
        raise OpError(f"{op}: windows {inp.shape} do not match output_size {size} with kernel {k}, "
                      f"padding {p}, stride {s}, dilation {d} (expects (..., {out[0]}, {out[1]}, {k[0]}, {k[1]}))")
    return _apply(_N.sliding_window_transpose.bind(output_size=size, kernel=k, padding=p, stride=s, dilation=d),
                  inp)


def pad(src, pad_width, mode="constant", constant_value=0.0):
    """Pads ``src`` with ``pad_width = ((before, after), ...)``, one pair per axis.

    Args:
        src: input tensor (1-D or more).
        pad_width: up to 7 pairs, the first for axis 0; axes without a pair are not padded, and pairs beyond
            ``src.ndim`` are ignored (MegEngine's 7 offset slots, of which only the first ``src.ndim`` are read).
        mode: ``"constant"``, ``"edge"``/``"replicate"`` or ``"reflect"``.
        constant_value: the fill value of ``"constant"``.

    Returns:
        the padded tensor.

    Example:
        >>> F.nn.pad(Tensor([1., 2.]), ((1, 1),)).numpy()
        array([0., 1., 2., 0.], dtype=float32)
        >>> F.nn.pad(Tensor([1., 2.]), ((1, 0), (5, 5))).numpy()  # a pair beyond the axes: ignored
        array([0., 1., 2.], dtype=float32)
    """
    src = _t(src, op="pad")
    try:
        pw = tuple((int(a), int(b)) for a, b in pad_width)
    except (TypeError, ValueError):
        raise OpError(f"pad: pad_width must be ((before, after), ...), got {pad_width!r}") from None
    # MegEngine fills a 14-slot offset list (7 pairs; more fail there) and its Padding kernel reads only the
    # first src.ndim pairs: extra pairs, zero or not, are ignored. A pair is two unsigned offsets, so a negative
    # one fails even where it would be ignored, and a 0-d tensor cannot be padded.
    if len(pw) > 7:
        raise OpError(f"pad: pad_width has {len(pw)} pairs; MegEngine's Padding takes at most 7")
    if any(a < 0 or b < 0 for a, b in pw):
        raise OpError(f"pad: pad_width must be non-negative, got {pw}")
    if src.ndim == 0:
        raise OpError("pad: cannot pad a 0-d tensor")
    if src.dtype == np.bool_:  # (MegEngine's Padding kernel asserts on bool: "unsupported Bool dtype")
        raise OpError(f"pad: unsupported dtype bool of a tensor of shape {tuple(src.shape)} (MegEngine's Padding "
                      "has no bool kernel; pad ``x.astype('int32')`` and compare)")
    pw = pw[:src.ndim] + ((0, 0),) * (src.ndim - len(pw))  # the pairs given pad the leading axes, the rest none
    mode = str(mode).lower()
    if mode not in ("constant", "reflect", "replicate", "edge"):
        raise AssertedOpError(f"pad: unknown mode {mode!r}")  # (MegEngine asserts the mode)
    try:
        value = float(constant_value)
    except (TypeError, ValueError):  # (MegEngine's parameter binding: RuntimeError, "Unable to cast")
        raise OpError(f"pad: constant_value must be a number, got {constant_value!r}") from None
    if mode != "constant":  # (the value unused: one op whatever it is)
        out = _apply(_S.pad.bind(pad_width=pw, mode=mode, constant_value=0.0), src)
    elif is_float(src.dtype) or src.dtype.kind in "iu":
        # (the value an input: a fill value new every step compiles nothing -- core/ops; for integers MegEngine's
        # float32 ``padding_val`` cast as its kernel casts it, NaN to INT_MIN)
        if src.dtype.kind in "iu":
            value = c_int(np.float32(value), src.dtype)
        out = _apply(_S.pad.bind(pad_width=pw, mode=mode), src, _scalar(value, src.dtype))
    else:
        out = _apply(_S.pad.bind(pad_width=pw, mode=mode, constant_value=value), src)
    return keep_qparams(out, src)


# ---- attention --------------------------------------------------------------------------------------------------
def multi_head_attention(query, key, value, embed_dim, num_heads, attn_drop, out_drop, io_weight_bias,
                         qproj_size=None, kproj_size=None, vproj_size=None, oproj_size=None, qbias=False,
                         kbias=False, vbias=False, obias=False, bias_k=None, bias_v=None, add_zero_attn=False,
                         key_padding_mask=None, attn_mask=None, need_weights=False, average_attn_weights=False,
                         is_causal=False, maybe_cudnn_style_mask=False, reslink=False, training=True):
    """Multi-head attention (`Attention Is All You Need`), MegEngine's all-in-one signature.

    ``io_weight_bias`` packs, flattened and in this order, the projection weights ``Wq (Eq, qproj_size)``,
    ``Wk (Ek, kproj_size)``, ``Wv (Ev, vproj_size)``, ``Wo (vproj_size or Ev, oproj_size)`` (``Y = X @ W + B``,
    not ``X @ W.T``) and then the biases ``bq, bk, bv, bo``; a projection whose size is 0 is absent (identity),
    and a bias is present only if its flag is set and its projection exists.

    Args:
        query: ``(N, L, Eq)`` (or unbatched ``(L, Eq)``).
        key, value: ``(N, S, Ek)``, ``(N, S, Ev)``.
        embed_dim: model dimension; ``head_dim = embed_dim // num_heads`` and scores are scaled by
            ``head_dim ** -0.5``.
        num_heads: number of heads (divides the projection sizes).
        attn_drop: dropout probability on the attention weights (training only).
        out_drop: dropout probability on the output (training only).
        io_weight_bias: the packed parameters (any shape), or None when every projection size is 0.
        qproj_size, kproj_size, vproj_size, oproj_size: projection sizes (default ``embed_dim``; 0 = none).
        qbias, kbias, vbias, obias: whether the matching bias is in ``io_weight_bias``.
        bias_k, bias_v: optional ``(1, 1, D)`` rows appended to the projected keys/values.
        add_zero_attn: append a zero row to the projected keys/values.
        key_padding_mask: ``(N, S)``; bool True (or nonzero) = ignore that key, or float (added to scores).
        attn_mask: ``(L, S)`` or ``(N * num_heads, L, S)``; bool True = masked, or float (added to scores).
        need_weights: also return the attention weights.
        average_attn_weights: average the returned weights over heads (``(N, L, S)``) instead of
            ``(N * num_heads, L, S)``.
        is_causal: mask keys after the query position (``attn_mask`` may then be None).
        maybe_cudnn_style_mask: accepted; masks here are always the general kind.
        reslink: add ``query`` to the output (output size must equal ``Eq``).
        training: apply the dropouts.

    Returns:
        ``(attn_output, attn_weights)``: output ``(N, L, oproj_size)``; weights or None (``need_weights``).

    Example:
        >>> q = F.ones((2, 3, 4))
        >>> w = F.zeros((4 * 4 * 4,))  # Wq, Wk, Wv, Wo of 4x4, no biases
        >>> out, _ = F.nn.multi_head_attention(q, q, q, 4, 2, 0.0, 0.0, w)
        >>> out.shape
        (2, 3, 4)
    """
    from .math import matmul
    from .tensor import concat, zeros, broadcast_to, expand_dims, squeeze
    op = "multi_head_attention"
    query, key, value = _t(query, op=op), _t(key, op=op), _t(value, op=op)
    unbatched = query.ndim == 2
    if unbatched:
        query, key, value = (expand_dims(t, 0) for t in (query, key, value))
    for t, what in ((query, "query"), (key, "key"), (value, "value")):
        _ndim(t, 3, op, what, "(N, L, E)")
        _float(t, op, what)
    n, lq, eq = query.shape
    if key.shape[:2] != value.shape[:2] or key.shape[0] != n:
        raise OpError(f"{op}: key {key.shape} and value {value.shape} must share (N, S) with query {query.shape}")
    s_len, ek, ev = key.shape[1], key.shape[2], value.shape[2]
    h = int(num_heads)
    qp = embed_dim if qproj_size is None else int(qproj_size)
    kp = embed_dim if kproj_size is None else int(kproj_size)
    vp = embed_dim if vproj_size is None else int(vproj_size)
    opj = embed_dim if oproj_size is None else int(oproj_size)
    qd, kd, vd = qp or eq, kp or ek, vp or ev
    if h < 1 or qd % h or kd % h or vd % h or qd != kd:
        raise OpError(f"{op}: query/key sizes ({qd}, {kd}) must be equal and, like the value size {vd}, "
                      f"divisible by num_heads={h}")
    sizes = [("wq", (eq, qp), qp > 0), ("wk", (ek, kp), kp > 0), ("wv", (ev, vp), vp > 0),
             ("wo", (vd, opj), opj > 0), ("bq", (qp,), qp > 0 and qbias), ("bk", (kp,), kp > 0 and kbias),
             ("bv", (vp,), vp > 0 and vbias), ("bo", (opj,), opj > 0 and obias)]
    total = sum(int(np.prod(shp)) for _, shp, on in sizes if on)
    params = {}
    if total:
        if io_weight_bias is None:
            raise OpError(f"{op}: io_weight_bias is required ({total} parameters)")
        flat = _T.flatten(_t(io_weight_bias, op=op))
        if flat.size != total:
            raise OpError(f"{op}: io_weight_bias has {flat.size} elements, expected {total} for the given "
                          f"projection sizes and bias flags")
        pos = 0
        for name, shp, on in sizes:
            if on:
                k = int(np.prod(shp))
                params[name] = _T.reshape(flat[pos:pos + k], shp)
                pos += k
    dropout_ok = 0 <= attn_drop < 1 and 0 <= out_drop < 1
    if not dropout_ok:
        raise OpError(f"{op}: attn_drop and out_drop must be in [0, 1), got {attn_drop}, {out_drop}")

    def proj(x, w, b):
        if w not in params:
            return x
        y = matmul(x, params[w])
        return y + params[b] if b in params else y

    q, k, v = proj(query, "wq", "bq"), proj(key, "wk", "bk"), proj(value, "wv", "bv")
    extra = 0
    if bias_k is not None or bias_v is not None:
        if bias_k is None or bias_v is None:
            raise OpError(f"{op}: bias_k and bias_v must be given together")
        k = concat([k, broadcast_to(_T.reshape(_t(bias_k, op=op), (1, 1, kd)), (n, 1, kd))], axis=1)
        v = concat([v, broadcast_to(_T.reshape(_t(bias_v, op=op), (1, 1, vd)), (n, 1, vd))], axis=1)
        extra += 1
    if add_zero_attn:
        k = concat([k, zeros((n, 1, kd), dtype=k.dtype)], axis=1)
        v = concat([v, zeros((n, 1, vd), dtype=v.dtype)], axis=1)
        extra += 1
    sk = s_len + extra

    def heads(x, d):  # (N, T, D) -> (N*H, T, D/H)
        t = x.shape[1]
        return _T.reshape(_T.transpose(_T.reshape(x, (n, t, h, d // h)), (0, 2, 1, 3)), (n * h, t, d // h))

    qh, kh, vh = heads(q, qd), heads(k, kd), heads(v, vd)
    scores = matmul(qh, kh, transpose_b=True) * float((embed_dim // h) ** -0.5)  # (N*H, L, S')
    neg = -1e30  # finite "-inf": a fully masked row gives uniform weights rather than NaN

    def additive(mask, what, ndims):
        """A float mask to add to the scores, its key axis padded for bias_k/zero-attention columns."""
        mask = _t(mask, op=op)
        if mask.ndim not in ndims or mask.shape[-1] != s_len:
            raise OpError(f"{op}: {what} of shape {mask.shape} does not fit {ndims}-D masks over {s_len} keys")
        m = mask.astype(scores.dtype) * neg if mask.dtype.kind in "biu" else mask.astype(scores.dtype)
        if mask.dtype.kind in "iu":
            m = (mask != 0).astype(scores.dtype) * neg
        if extra:
            m = pad(m, [(0, 0)] * (m.ndim - 1) + [(0, extra)])
        return m

    if is_causal:
        scores = scores + additive(Tensor(np.triu(np.ones((lq, s_len), bool), k=1)), "causal mask", (2,))
    if attn_mask is not None:
        am = additive(attn_mask, "attn_mask", (2, 3))
        if am.ndim == 3 and am.shape[0] not in (1, n * h) or am.shape[-2] != lq:
            raise OpError(f"{op}: attn_mask must be (L, S) or (N*num_heads, L, S), got {_t(attn_mask, op=op).shape}")
        scores = scores + am
    if key_padding_mask is not None:
        km = additive(key_padding_mask, "key_padding_mask", (1, 2) if unbatched else (2,))
        if km.ndim == 1:
            km = expand_dims(km, 0)
        if km.shape[0] != n:
            raise OpError(f"{op}: key_padding_mask must be (N, S) = ({n}, {s_len}), got {km.shape}")
        scores = _T.reshape(_T.reshape(scores, (n, h, lq, sk)) + _T.reshape(km, (n, 1, 1, sk)), (n * h, lq, sk))
    weights = softmax(scores, axis=-1)
    attn = dropout(weights, attn_drop, training) if training and attn_drop > 0 else weights
    out = matmul(attn, vh)  # (N*H, L, D/H)
    out = _T.reshape(_T.transpose(_T.reshape(out, (n, h, lq, vd // h)), (0, 2, 1, 3)), (n, lq, vd))
    out = proj(out, "wo", "bo")
    if training and out_drop > 0:
        out = dropout(out, out_drop, training)
    if reslink:
        if out.shape != query.shape:
            raise OpError(f"{op}: reslink needs the output size {out.shape[-1]} to equal the query size {eq}")
        out = out + query
    if unbatched:
        out = squeeze(out, 0)
    if not need_weights:
        return out, None
    if average_attn_weights:
        weights = _T.reshape(weights, (n, h, lq, sk)).mean(axis=1)
        if unbatched:
            weights = squeeze(weights, 0)
    return out, weights


def deformable_psroi_pooling(inp, rois, trans, no_trans, part_size, pooled_h, pooled_w, sample_per_part,
                             spatial_scale, trans_std=0.1):
    """Deformable position-sensitive RoI pooling (Deformable ConvNets / R-FCN; MegEngine's op).

    Args:
        inp: ``(N, C, H, W)`` features.
        rois: ``(R, 5)`` boxes ``(batch index, x0, y0, x1, y1)`` in input-image coordinates.
        trans: ``(R, 2, pooled_h, pooled_w)`` normalised bin offsets (x, y), as MegEngine checks; 4-D and
            otherwise ignored with ``no_trans``. Bin ``(ph, pw)`` reads the offsets of part
            ``floor(p / pooled * part_size)`` with MegEngine's ``part_size`` strides.
        no_trans: pool without offsets.
        part_size: the offset grid size.
        pooled_h: output bins per RoI, vertically.
        pooled_w: output bins per RoI, horizontally.
        sample_per_part: samples per bin side (``sample_per_part``² bilinear samples are averaged).
        spatial_scale: scale from image to feature coordinates (e.g. ``1 / 16``).
        trans_std: scale of the offsets.

    Returns:
        ``(R, C, pooled_h, pooled_w)``; differentiable w.r.t. ``inp`` and ``trans``.

    Example:
        >>> x = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
        >>> rois = Tensor([[0, 0, 0, 3, 3]], dtype="float32")
        >>> F.deformable_psroi_pooling(x, rois, Tensor(np.zeros((1, 2, 1, 1), np.float32)), True, 1, 2, 2, 1,
        ...                            1.0).numpy().ravel()
        array([0. , 1.5, 6. , 7.5], dtype=float32)
    """
    from ..core.ops import psroi as _P
    op = "deformable_psroi_pooling"
    inp, rois, trans = _t(inp, op=op), _t(rois, op=op), _t(trans, op=op)
    if inp.ndim != 4 or not is_float(inp.dtype):
        raise OpError(f"{op}: expected float (N, C, H, W) features, got {inp.shape} {inp.dtype}")
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise OpError(f"{op}: rois must be (R, 5) (batch index, x0, y0, x1, y1), got {rois.shape}")
    ints = dict(part_size=part_size, pooled_h=pooled_h, pooled_w=pooled_w, sample_per_part=sample_per_part)
    for name, v in ints.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise OpError(f"{op}: {name} must be a positive int, got {v!r}")
    if trans.ndim != 4:
        raise OpError(f"{op}: trans must be 4-D, got shape {trans.shape}")
    if not no_trans:
        # MegEngine's check: one class's x and y offsets per pooled bin. Its kernel then reads them with part_size
        # strides (the core op's docstring): the same offsets where part_size is the pooled size; elsewhere another
        # place of trans, as long as that is inside it -- past its end megdnn reads other memory, here an error
        if trans.shape[1:] != (2, pooled_h, pooled_w):
            raise OpError(f"{op}: trans must be (R, 2, pooled_h, pooled_w) = (R, 2, {pooled_h}, {pooled_w}), got "
                          f"{trans.shape}")
        need = 2 * rois.shape[0] * part_size * part_size
        if need > int(np.prod(trans.shape)):
            raise OpError(f"{op}: {rois.shape[0]} rois with part_size {part_size} read {need} offsets, trans "
                          f"{trans.shape} holds {int(np.prod(trans.shape))}")
    return _apply(_P.deformable_psroi_pooling.bind(
        no_trans=bool(no_trans), part_size=int(part_size), pooled_h=int(pooled_h), pooled_w=int(pooled_w),
        sample_per_part=int(sample_per_part), spatial_scale=float(spatial_scale), trans_std=float(trans_std)),
        inp, rois, trans)


__all__ += ["deformable_psroi_pooling"]
