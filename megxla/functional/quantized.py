"""``F.quantized``: MegEngine's inference-only convolutions of quantized tensors (``conv_bias_activation``,
``batch_conv_bias_activation``, ``conv_transpose2d``).

The convolutions accumulate the integers exactly in int32 (the ``qconv2d`` primitive: XLA has no quantized
convolution kernels), add the qint32 bias and requantize once to the output dtype, as MegEngine's ConvBias
kernels do; the output's scale (and zero point) are its dtype's."""
from __future__ import annotations

from typing import Tuple, Union

import numpy as np

from ..core._dispatch import OpError, apply
from ..core._tensor import QPARAMS_FACTORY, QPARAMS_SEEN, Tensor
from ..core.ops import elemwise as _E, quant as _q
from ..core.tensor.dtype import _builtin_quant_dtypes, get_quant_meta
from .tensor import _is_quantized_dtype, _quantized_source, astype, concat, reshape
from .elemwise import hswish, relu, round as round_, sigmoid
from .nn import conv_transpose2d as _float_conv_transpose2d

__all__ = ["conv_bias_activation", "batch_conv_bias_activation", "conv_transpose2d"]

_MODES = ("identity", "relu", "h_swish", "sigmoid")


def _pair(v, who, what, nonzero=False):
    t = tuple(int(i) for i in v) if isinstance(v, (tuple, list)) else (int(v), int(v))
    if len(t) != 2 or (nonzero and min(t) <= 0) or min(t) < 0:
        raise OpError(f"{who}: {what} must be {'a positive' if nonzero else 'a non-negative'} int or a pair of "
                      f"them, got {v!r}")
    return t


def _source(x, who, what):
    src = _quantized_source(x) if isinstance(x, Tensor) else None
    if src is None:
        raise OpError(f"{who}: {what} must be a quantized tensor (e.g. astype(dtype.qint8(scale))), got "
                      f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    return src


def _out(value, meta, scale, zero_point):
    value._qparams = QPARAMS_FACTORY[0](meta, scale, zero_point)
    QPARAMS_SEEN[0] = True
    return value


def _int_bias(bias, acc_scale, n, who):
    """The bias as int32 integers on the accumulator's scale (a qint32 bias of that scale is taken as is)."""
    if bias is None:
        return Tensor(np.zeros((n,), np.int32))
    if bias.size != n:
        raise OpError(f"{who}: bias has {bias.size} elements {bias.shape}, the output has {n} channels")
    src = _quantized_source(bias)
    if src is not None and bias._qparams.dtype_meta.name == "qint32":
        same = np.allclose(np.asarray(src[0].numpy(), np.float64), np.asarray(acc_scale.numpy(), np.float64),
                           rtol=1e-5)
        if same:
            return astype(reshape(bias, (-1,)), "int32") if bias.dtype != np.int32 else reshape(bias, (-1,))
    real = bias.astype("float32") if src is not None else bias
    q = apply(_q.quantize.bind(qmin=-2 ** 31, qmax=2 ** 31 - 1, dtype="int32"), reshape(real, (-1,)), acc_scale,
              Tensor(np.float32(0)))
    return q


def _finish(acc, acc_scale, dtype, nonlinear_mode, who, via_real=False, bias=None):
    """Requantize the int32 accumulator (scale ``acc_scale``) to ``dtype`` through ``nonlinear_mode``
    (``via_real``: as MegEngine's batched convolution, the real value divided by the output scale; ``bias``: the
    int32 bias ``(1, C, 1, 1)`` not yet in ``acc``, added as MegEngine's ConvBias adds it, in real values)."""
    mode = str(getattr(nonlinear_mode, "name", nonlinear_mode)).lower()
    if mode not in _MODES:
        raise OpError(f"{who}: nonlinear_mode must be one of {_MODES}, got {nonlinear_mode!r}")
    if dtype is None:  # MegEngine: the qint32 accumulator itself
        dtype = _builtin_quant_dtypes["qint32"]
        out_meta, out_scale, out_zp = dtype, acc_scale, None
        if mode == "identity":
            return _out(acc, out_meta, out_scale, None)
    elif _is_quantized_dtype(dtype):
        info = dtype.metadata["mgb_dtype"]
        out_meta = get_quant_meta(dtype)
        out_scale = Tensor(np.float32(info["scale"]))
        out_zp = None if info.get("zero_point") is None else Tensor(np.float32(info["zero_point"]))
    else:  # a float output: the real value
        real = apply(_q.dequantize.bind(), acc, acc_scale, Tensor(np.float32(0)))
        real = {"identity": lambda v: v, "relu": relu, "h_swish": hswish, "sigmoid": sigmoid}[mode](real)
        return real if np.dtype(dtype) == np.float32 else astype(real, dtype)
    if mode in ("identity", "relu"):
        limits = np.iinfo(out_meta.np_dtype_str)
        qmin, qmax = max(out_meta.qmin, int(limits.min)), min(out_meta.qmax, int(limits.max))
        zp = out_zp if out_zp is not None else Tensor(np.float32(0))
        if bias is not None:
            op = _q.requantize_add.bind(qmin=qmin, qmax=qmax, dtype=out_meta.np_dtype_str, relu=mode == "relu")
            return _out(apply(op, acc, bias, acc_scale, out_scale, zp), out_meta, out_scale, out_zp)
        op = _q.requantize.bind(qmin=qmin, qmax=qmax, dtype=out_meta.np_dtype_str, relu=mode == "relu",
                                via_real=via_real)
        return _out(apply(op, acc, acc_scale, out_scale, zp), out_meta, out_scale, out_zp)
    # h_swish / sigmoid: of the real value, then quantized to the output dtype (MegEngine's QFUSE_ADD_H_SWISH: the
    # convolution's and the bias's real values summed in float32)
    real = apply(_q.dequantize.bind(), acc, acc_scale, Tensor(np.float32(0)))
    if bias is not None:
        real = real + apply(_q.dequantize.bind(), bias, acc_scale, Tensor(np.float32(0)))
    real = hswish(real) if mode == "h_swish" else sigmoid(real)
    return astype(real, dtype)


def _check_conv(who, inp, weight, groups, batch=False):
    if inp.ndim != 4:
        raise OpError(f"{who}: input must be NCHW (4-D), got shape {inp.shape} {inp.dtype}")
    want = 5 if (groups != 1 or batch) else 4
    if weight.ndim != want:
        layout = ("(N, OC, IC, kh, kw)" if batch else
                  "(groups, OC / groups, IC / groups, kh, kw)" if groups != 1 else "(OC, IC, kh, kw)")
        raise OpError(f"{who}: weight must be {layout}, got shape {weight.shape} (input {inp.shape}, "
                      f"groups={groups})")
    cin = weight.shape[-3] * (groups if not batch else 1)
    if cin != inp.shape[1] or (batch and weight.shape[0] != inp.shape[0]):
        raise OpError(f"{who}: input {inp.shape} does not match weight {weight.shape} (groups={groups})")


def _conv_args(who, inp, weight, stride, padding, dilation, conv_mode):
    """The geometry of a quantized convolution as pairs, the weight flipped for a true convolution, the input's
    (scale, zero point) and the weight's scale."""
    stride, dilation = _pair(stride, who, "stride", True), _pair(dilation, who, "dilation", True)
    padding = _pair(padding, who, "padding")
    (s_in, zp_in), (s_w, _) = _source(inp, who, "inp"), _source(weight, who, "weight")
    mode = str(getattr(conv_mode, "name", conv_mode)).lower()
    if mode not in ("cross_correlation", "convolution"):
        raise OpError(f"{who}: conv_mode must be 'cross_correlation' or 'convolution', got {conv_mode!r}")
    if mode == "convolution":
        weight = weight[..., ::-1, ::-1]
    return stride, padding, dilation, weight, (s_in, zp_in), s_w


def conv_bias_activation(inp: Tensor, weight: Tensor, bias: Tensor, dtype=None,
                         stride: Union[int, Tuple[int, int]] = 1, padding: Union[int, Tuple[int, int]] = 0,
                         dilation: Union[int, Tuple[int, int]] = 1, groups: int = 1, nonlinear_mode="identity",
                         conv_mode="cross_correlation", compute_mode="default") -> Tensor:
    r"""Quantized convolution plus bias and activation, for inference: ``act(conv(x, w) + b)`` accumulated in
    int32 and requantized to ``dtype``.

    Args:
        inp: the quantized NCHW input (``qint8``, or ``quint8`` with its zero point).
        weight: the ``qint8`` kernel, ``(OC, IC, kh, kw)``; grouped: ``(groups, OC / groups, IC / groups, kh,
            kw)``.
        bias: ``qint32`` with scale ``scale(inp) * scale(weight)``, ``(1, OC, 1, 1)`` (None: no bias).
        dtype: the output dtype (``dtype.qint8(scale)``...); None gives the qint32 accumulator.
        stride, padding, dilation: per spatial axis (an int or a pair); zero padding.
        groups: grouped convolution.
        nonlinear_mode: ``"identity"``, ``"relu"``, ``"h_swish"`` or ``"sigmoid"``.
        conv_mode: ``"cross_correlation"`` or ``"convolution"`` (the kernel flipped).
        compute_mode: accepted (the accumulation is exact).

    Returns:
        the output tensor of ``dtype``.

    Example:
        >>> from megxla.core.tensor import dtype
        >>> x = Tensor(np.ones((1, 1, 3, 3), "float32")).astype(dtype.qint8(0.5))
        >>> w = Tensor(np.ones((1, 1, 3, 3), "float32")).astype(dtype.qint8(0.25))
        >>> y = conv_bias_activation(x, w, None, dtype=dtype.qint8(1.0), padding=1)
        >>> y.numpy()[0, 0]
        array([[4, 6, 4],
               [6, 9, 6],
               [4, 6, 4]], dtype=int8)
    """
    who = "conv_bias_activation"
    groups = int(groups)
    _check_conv(who, inp, weight, groups)
    stride, padding, dilation, weight, (s_in, zp_in), s_w = _conv_args(who, inp, weight, stride, padding,
                                                                         dilation, conv_mode)
    acc_scale = s_in * s_w
    oc = weight.shape[0] * (weight.shape[1] if weight.ndim == 5 else 1)
    op = _q.qconv2d.bind(stride=stride, padding=padding, dilation=dilation, groups=groups)
    b = _int_bias(bias, acc_scale, oc, who)
    mode = str(getattr(nonlinear_mode, "name", nonlinear_mode)).lower()
    if _bias_in_real(dtype, mode):  # (MegEngine's QADD of the qint32 convolution and bias: _finish adds it)
        acc = apply(op, inp, weight, Tensor(np.zeros((oc,), np.int32)), zp_in)
        return _finish(acc, acc_scale, dtype, nonlinear_mode, who, bias=reshape(b, (1, oc, 1, 1)))
    acc = apply(op, inp, weight, b, zp_in)  # (a qint32 or float output: the exact integer sum)
    return _finish(acc, acc_scale, dtype, nonlinear_mode, who)


def _bias_in_real(dtype, mode):
    """Whether MegEngine's ConvBias adds the bias to an 8-bit output in real values (QADD / QFUSE_ADD_RELU /
    QFUSE_ADD_H_SWISH), rather than in the int32 accumulator."""
    return (dtype is not None and _is_quantized_dtype(dtype) and mode in ("identity", "relu", "h_swish")
            and dtype.metadata["mgb_dtype"]["name"] in ("QuantizedS8", "Quantized8Asymm"))


def batch_conv_bias_activation(inp: Tensor, weight: Tensor, bias: Tensor, dtype=None,
                               stride: Union[int, Tuple[int, int]] = 1, padding: Union[int, Tuple[int, int]] = 0,
                               dilation: Union[int, Tuple[int, int]] = 1, groups: int = 1,
                               nonlinear_mode="identity", conv_mode="cross_correlation",
                               compute_mode="default") -> Tensor:
    r""":func:`conv_bias_activation` with a kernel per sample: sample ``n`` of ``inp`` is convolved with
    ``weight[n]``.

    Args:
        inp: the quantized NCHW input.
        weight: ``qint8`` kernels ``(N, OC, IC, kh, kw)``.
        bias: ``qint32`` ``(1, OC, 1, 1)`` with scale ``scale(inp) * scale(weight)``, shared by the samples.
        dtype, stride, padding, dilation, nonlinear_mode, conv_mode, compute_mode: as
            :func:`conv_bias_activation`.
        groups: must be 1.

    Returns:
        the output tensor of ``dtype``.

    Example:
        >>> from megxla.core.tensor import dtype
        >>> x = Tensor(np.ones((2, 1, 1, 1), "float32")).astype(dtype.qint8(1.0))
        >>> w = Tensor(np.array([1., 2.]).reshape(2, 1, 1, 1, 1)).astype(dtype.qint8(1.0))
        >>> batch_conv_bias_activation(x, w, None, dtype=dtype.qint8(1.0)).numpy().ravel()
        array([1, 2], dtype=int8)
    """
    who = "batch_conv_bias_activation"
    if int(groups) != 1:
        raise OpError(f"{who}: groups must be 1 (one kernel per sample), got {groups}")
    _check_conv(who, inp, weight, 1, batch=True)
    stride, padding, dilation, weight, (s_in, zp_in), s_w = _conv_args(who, inp, weight, stride, padding,
                                                                         dilation, conv_mode)
    n, c, h, w = inp.shape
    oc = weight.shape[1]
    acc_scale = s_in * s_w
    b = _int_bias(bias, acc_scale, oc, who)
    # the samples as the groups of one grouped convolution: (1, N*C, H, W) with N groups of OC kernels
    op = _q.qconv2d.bind(stride=stride, padding=padding, dilation=dilation, groups=n)
    acc = apply(op, reshape(inp, (1, n * c, h, w)), weight, concat([b] * n), zp_in)
    acc = reshape(acc, (n, oc) + tuple(acc.shape[2:]))
    return _finish(acc, acc_scale, dtype, nonlinear_mode, who, via_real=True)


def conv_transpose2d(inp: Tensor, weight: Tensor, bias: Tensor = None, dtype=None,
                     stride: Union[int, Tuple[int, int]] = 1, padding: Union[int, Tuple[int, int]] = 0,
                     output_padding: Union[int, Tuple[int, int]] = 0, dilation: Union[int, Tuple[int, int]] = 1,
                     groups: int = 1, conv_mode="cross_correlation", compute_mode="default") -> Tensor:
    r"""Quantized transposed convolution, for inference: the transposed convolution of the integers (int8
    products summed exactly in float32), plus the qint32 bias, requantized to ``dtype``.

    Args:
        inp: the quantized NCHW input.
        weight: the ``qint8`` kernel ``(IC, OC, kh, kw)``.
        bias: ``qint32`` ``(1, OC, 1, 1)`` with scale ``scale(inp) * scale(weight)``, or None.
        dtype: the output dtype; None gives the qint32 accumulator.
        stride, padding, output_padding, dilation: per spatial axis.
        groups: grouped transposed convolution.
        conv_mode: ``"cross_correlation"`` only, as MegEngine's.
        compute_mode: accepted.

    Returns:
        the output tensor of ``dtype``.

    Example:
        >>> from megxla.core.tensor import dtype
        >>> x = Tensor(np.ones((1, 1, 2, 2), "float32")).astype(dtype.qint8(1.0))
        >>> w = Tensor(np.ones((1, 1, 2, 2), "float32")).astype(dtype.qint8(1.0))
        >>> conv_transpose2d(x, w, dtype=dtype.qint8(1.0)).numpy()[0, 0]
        array([[1, 2, 1],
               [2, 4, 2],
               [1, 2, 1]], dtype=int8)
    """
    who = "conv_transpose2d (quantized)"
    if str(getattr(conv_mode, "name", conv_mode)).lower() != "cross_correlation":
        raise OpError(f"{who}: conv_mode must be 'cross_correlation', got {conv_mode!r}")
    stride, dilation = _pair(stride, who, "stride", True), _pair(dilation, who, "dilation", True)
    padding, output_padding = _pair(padding, who, "padding"), _pair(output_padding, who, "output_padding")
    if output_padding[0] == 0:  # MegEngine 1.13 tests `output_pad_h != 0 or output_pad_h != 0` (sic): a width-only
        output_padding = (0, 0)  # output_padding is dropped, as in F.conv_transpose2d (nn._megengine_output_padding_2d)
    if output_padding[0] >= stride[0] or output_padding[1] >= stride[1]:
        raise OpError(f"{who}: output_padding {output_padding} must be less than stride {stride}")
    if weight.ndim != 4 or inp.ndim != 4 or weight.shape[0] != inp.shape[1]:
        raise OpError(f"{who}: input (N, IC, H, W) and weight (IC, OC / groups, kh, kw) do not match: "
                      f"{inp.shape} and {weight.shape}")
    # the integers' transposed convolution in float32: exact while C * kh * kw * 128 * 128 < 2**24
    (s_in, zp_in), (s_w, _) = _source(inp, who, "inp"), _source(weight, who, "weight")
    x_int = apply(_q.dequantize.bind(), inp, Tensor(np.float32(1)), zp_in)
    w_int = apply(_q.dequantize.bind(), weight, Tensor(np.float32(1)), Tensor(np.float32(0)))
    acc = _float_conv_transpose2d(x_int, w_int, None, stride=stride, padding=padding,
                                  output_padding=output_padding, dilation=dilation, groups=groups)
    acc = astype(round_(acc), "int32")
    oc = acc.shape[1]
    acc_scale = s_in * s_w
    if bias is not None:
        # the bias's int32 storage as a plain tensor: a qint32 tensor added to the int32 accumulator would be a
        # quantized addition, reading the accumulator's integers as real values (2000 times the sum at scale 5e-4)
        b = apply(_E.astype.bind(dtype="int32"), _int_bias(bias, acc_scale, oc, who))
        acc = acc + reshape(b, (1, oc, 1, 1))
    return _finish(acc, acc_scale, dtype, "identity", who)
