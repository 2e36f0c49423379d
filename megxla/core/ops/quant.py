"""Quantization primitives: fake quantization (straight-through), LSQ and TQT (learned scales), and the
integer quantize / dequantize used by quantized inference modules.

Forward and gradient formulas are MegEngine's (its ``FakeQuant``, ``LSQ`` and ``TQT`` kernels): rounding is
half away from zero (``std::round``), and the gradients are the straight-through / learned-step estimators,
not the derivative of ``round`` (which is zero almost everywhere). They are given as ``grad`` rules because
``jax.vjp`` of the forward would give exactly that useless zero.
"""
import functools
import math

import jax
import jax.numpy as jnp

from .._op import Primitive
from .._rounding import divide


def _round(x):
    # std::round: half away from zero (jnp.round rounds half to even). NOTE: as MegEngine's x86 SIMD converters
    # (QConverter: trunc(x + 0.5) with the sum in float32), not std::round exactly: 0.49999997 + 0.5 rounds to 1.0
    # in float32, so 0.49999997 rounds to 1, as MegEngine's vectorized kernels give it (its scalar loop tails give
    # 0: docs/differences.md)
    return jnp.sign(x) * jnp.floor(jnp.abs(x) + 0.5)


def _sum_to(g, shape):
    """Reduce a broadcast gradient ``g`` back to an operand of ``shape`` (scale / zero point tensors)."""
    if g.shape == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead))) if lead > 0 else g
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape) if axes else g.reshape(shape)


# ---- FakeQuant: round(x / s) + zp, clipped to [qmin, qmax], back to (q - zp) * s -----------------------------
# NOTE: every division by a scale is ``divide``'s IEEE one, as MegEngine's kernels compute it: observers put the
# largest value exactly on a rounding tie (scale = max / 127.5, so x / scale = 127.5), and XLA's multiply by
# ``1 / s`` (127.49999) flips that element's straight-through gradient.
def _fake_quant(x, scale, zero_point, *, qmin, qmax):
    q = jnp.clip(_round(divide(x, scale)) + zero_point, qmin, qmax)
    return ((q - zero_point) * scale).astype(x.dtype)


def _fake_quant_grad(params, primals, ct):
    x, scale, zero_point = primals
    q = _round(divide(x, scale)) + zero_point
    inside = (q >= params["qmin"]) & (q <= params["qmax"])
    gx = jnp.where(inside, ct, jnp.zeros_like(ct)).astype(x.dtype)
    # MegEngine's FakeQuant passes no gradient to its scale / zero point (they come from observers)
    return gx, jnp.zeros_like(scale), jnp.zeros_like(zero_point)


fake_quant = Primitive("fake_quant", _fake_quant, grad=_fake_quant_grad)


# ---- LSQ (learned step size): clip(x / s + zp) rounded, gradient to s scaled by grad_scale -------------------
def _lsq(x, scale, zero_point, grad_scale, *, qmin, qmax):
    q = _round(jnp.clip(divide(x, scale) + zero_point, qmin, qmax))
    return ((q - zero_point) * scale).astype(x.dtype)


def _lsq_grad(params, primals, ct):
    x, scale, zero_point, grad_scale = primals
    qmin, qmax = params["qmin"], params["qmax"]
    v = divide(x, scale) + zero_point
    small, big = v < qmin, v > qmax
    middle = ~(small | big)
    gs = jnp.where(small, qmin, jnp.where(big, qmax, _round(v) - v)) * grad_scale * ct
    # (outside: the cotangent times 0, as MegEngine's LSQ kernel multiplies by its mask -- -0.0 for a negative
    # cotangent, NaN for an infinite one --, where its FakeQuant selects a 0)
    gx = jnp.where(middle, ct, ct * 0).astype(x.dtype)
    return (gx, _sum_to(gs, scale.shape).astype(scale.dtype), jnp.zeros_like(zero_point),
            jnp.zeros_like(grad_scale))


lsq = Primitive("lsq", _lsq, grad=_lsq_grad)


# ---- TQT (trained quantization thresholds): the scale is log2 of the step ---------------------------------------
def _step(log2_scale):
    # MegEngine's TQT kernel takes powf(2, scale), correctly rounded; XLA's exp2 is an ulp off for most scales (72%
    # of float32 values on CPU), which moves the rounding of values near a level's edge. XLA's pow(2, s) is
    # correctly rounded in all but 0.07%.
    return jnp.power(jnp.asarray(2, log2_scale.dtype), log2_scale)


def _tqt(x, log2_scale, *, qmin, qmax):
    t = _step(log2_scale)
    return (jnp.clip(_round(divide(x, t)), qmin, qmax) * t).astype(x.dtype)


def _tqt_grad(params, primals, ct):
    x, log2_scale = primals
    qmin, qmax = params["qmin"], params["qmax"]
    t = _step(log2_scale)
    scaled = divide(x, t)
    rounded = jnp.clip(_round(scaled), qmin, qmax)
    clip = (scaled < qmin - 0.5) | (scaled > qmax + 0.5)
    gx = jnp.where(clip, ct * 0, ct).astype(x.dtype)  # (as LSQ's: MegEngine's TQT kernel multiplies by its mask)
    ln2 = math.log(2.0)
    # (MegEngine's TQT kernel: the cotangent times each mask, then the factors, left to right, and the two summed --
    # an infinite cotangent gives NaN, a product past float32's range inf, as there). (A product by the mask
    # converted to float XLA turns into a select: ``ct * 0`` is written out.)
    gs = (jnp.where(clip, ct, ct * 0) * rounded * t * ln2 + jnp.where(clip, ct * 0, ct) * (rounded - scaled) * t * ln2)
    return gx, _sum_to(gs, log2_scale.shape).astype(log2_scale.dtype)


tqt = Primitive("tqt", _tqt, grad=_tqt_grad)


# ---- integer storage of quantized tensors (inference) -------------------------------------------------------------
def _quantize(x, scale, zero_point, *, qmin, qmax, dtype):
    # NOTE: MegEngine's 8- and 32-bit quantized dtypes quantize as round(x * (1 / scale)) (megdnn's DTypeParam keeps
    # inv_scale = 1.f / scale), its 4-bit ones as round(x / scale): at a tie the two are an ulp apart and round
    # apart (-11.15 to qint32(0.1): -111.5 times the inverse, -111.49999 divided; found by megengine_quant_fuzz.py).
    # The barriers keep XLA from folding 1 / (max / c) into c / max inside a compiled step.
    if qmax - qmin > 15:
        inv = 1.0 / jax.lax.optimization_barrier(scale)
        shape = jnp.broadcast_shapes(jnp.shape(x), jnp.shape(scale))
        real = x * jax.lax.optimization_barrier(jnp.broadcast_to(inv, shape))
    else:
        real = divide(x, scale)
    q = _round(jax.lax.optimization_barrier(real)) + zero_point
    # A value an x86 conversion to int32 cannot represent -- NaN, and for qint32 (no clamp before it) anything past
    # its range, infinities included -- becomes INT_MIN in MegEngine's kernels, then the type's saturation: qint8's
    # NaN is -128, quint8's 0, qint32's inf INT_MIN (XLA converts NaN to 0 and saturates; megengine_quant_fuzz seed 11:
    # a quantized layer's weight folded with a NaN running variance, -128 in MegEngine, 0 here)
    if jnp.dtype(dtype).itemsize >= 4:
        bad = jnp.isnan(q) | (q >= 2.0 ** 31) | (q < -(2.0 ** 31))
        return jnp.where(bad, -(2 ** 31), jnp.clip(q, qmin, qmax)).astype(dtype)
    q = jnp.clip(q, qmin, qmax)
    return jnp.where(jnp.isnan(q), qmin, q).astype(dtype)


def _dequantize(q, scale, zero_point):
    return (q.astype(jnp.float32) - zero_point) * scale


quantize = Primitive("quantize", _quantize)
dequantize = Primitive("dequantize", _dequantize)


# ---- integer arithmetic of quantized inference layers ---------------------------------------------------------
# XLA has no quantized conv/matmul kernels, so quantized layers are simulated exactly in integers: int32
# accumulation of (x - zero point) * w, plus the int32 bias, then one float requantization to the output dtype.
def _qconv2d(x, w, b, x_zp, *, stride, padding, dilation, groups):
    import jax
    xi = x.astype(jnp.int32) - x_zp.astype(jnp.int32)
    wi = w.astype(jnp.int32)
    if wi.ndim == 5:  # (G, O/G, C/G, kh, kw) -> (O, C/G, kh, kw)
        wi = wi.reshape((-1,) + wi.shape[2:])
    conv = functools.partial(jax.lax.conv_general_dilated, window_strides=stride,
                             padding=[(p, p) for p in padding], rhs_dilation=dilation, feature_group_count=groups,
                             dimension_numbers=("NCHW", "OIHW", "NCHW"))
    if jax.default_backend() == "cpu":
        acc = conv(xi, wi, preferred_element_type=jnp.int32)
    else:
        acc = _exact_int_conv(conv, xi, wi)
    return acc + b.astype(jnp.int32).reshape(1, -1, 1, 1)


def _exact_int_conv(conv, xi, wi):
    """The integer convolution of ``xi`` (|x| < 2**9) and ``wi`` (|w| < 2**8) from float32 convolutions, where
    XLA cannot lower integer ones (GPU: cuDNN has none). Each operand is split into 4-bit digits
    (``v = 16 * hi + lo``, lo in [0, 16)), so every product of digits is below 2**8 in magnitude and every sum of
    up to 2**16 of them (C * kh * kw) is exact in float32; the four digit products come from two convolutions
    (both activation digits stacked on the batch axis) and are combined exactly in int32."""
    n = xi.shape[0]
    xs = jnp.concatenate([xi >> 4, xi & 15]).astype(jnp.float32)
    w_hi, w_lo = (wi >> 4).astype(jnp.float32), (wi & 15).astype(jnp.float32)
    by_hi = jnp.round(conv(xs, w_hi, precision=jax.lax.Precision.HIGHEST)).astype(jnp.int32)
    by_lo = jnp.round(conv(xs, w_lo, precision=jax.lax.Precision.HIGHEST)).astype(jnp.int32)
    return (by_hi[:n] * 256 + (by_hi[n:] + by_lo[:n]) * 16) + by_lo[n:]


def _qlinear(x, w, b, x_zp):
    xi = x.astype(jnp.int32) - x_zp.astype(jnp.int32)
    acc = jnp.matmul(xi, w.astype(jnp.int32).T, preferred_element_type=jnp.int32)
    return acc + b.astype(jnp.int32)


def _requantize(acc, in_scale, out_scale, out_zp, *, qmin, qmax, dtype, relu, via_real=False):
    if relu:
        acc = jnp.maximum(acc, 0)
    if via_real:
        # MegEngine's batched convolution (BatchConvBias, a naive kernel) requantizes through its naive TypeCvt:
        # the accumulator's real value in float32, then divided by the output scale. At a tie this rounds apart
        # from acc * (s_acc / s_out) (acc * 0.0021 / 0.07 = -7.4999995 where acc * 0.03 = -7.5)
        real = divide(acc.astype(jnp.float32) * in_scale, out_scale)
    else:
        # MegEngine's quantized Linear: its qint32 -> qint8 TypeCvt multiplies by the ratio of the scales
        real = acc.astype(jnp.float32) * jax.lax.optimization_barrier(in_scale / out_scale)
    return jnp.clip(_round(jax.lax.optimization_barrier(real)) + out_zp, qmin, qmax).astype(dtype)


def _unfused(p):
    # a select on the product that LLVM cannot fold away: XLA CPU contracts a product feeding an add into one fma
    # (one rounding instead of two) even across optimization barriers, which its fusion removes
    return jnp.where(jnp.isnan(p), jnp.zeros_like(p), p)


def _requantize_add(acc, bias, in_scale, out_scale, out_zp, *, qmin, qmax, dtype, relu):
    # NOTE: MegEngine's ConvBias adds its qint32 bias by a quantized elementwise QADD / QFUSE_ADD_RELU
    # (x86 BinaryQuantizationOp<qint32, qint8>): both operands' real values in float32, summed, times the
    # inverse of the output scale -- (conv * s + b * s) * (1 / s_out), three roundings that the integer sum
    # (conv + b) * (s / s_out) does not reproduce at ties (found comparing with MegEngine 1.13, s73).
    shape = jnp.broadcast_shapes(jnp.shape(acc), jnp.shape(bias))
    s = jax.lax.optimization_barrier(jnp.broadcast_to(jnp.asarray(in_scale, jnp.float32), shape))
    inv = 1.0 / jax.lax.optimization_barrier(out_scale)
    real = (_unfused(acc.astype(jnp.float32) * s)
            + _unfused(jnp.broadcast_to(bias, shape).astype(jnp.float32) * s))
    if relu:
        real = jnp.maximum(real, 0.0)
    real = _unfused(real * jax.lax.optimization_barrier(jnp.broadcast_to(inv, shape)))
    return jnp.clip(_round(real) + out_zp, qmin, qmax).astype(dtype)


qconv2d = Primitive("qconv2d", _qconv2d)
qlinear = Primitive("qlinear", _qlinear)
requantize = Primitive("requantize", _requantize)
requantize_add = Primitive("requantize_add", _requantize_add)
