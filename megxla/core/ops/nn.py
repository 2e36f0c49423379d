"""Neural-network primitives (NCHW layouts, MegEngine's weight layouts)."""
import functools
import itertools

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

from .._op import Primitive
from .._rounding import divide
from .elemwise import broadcast_wide as _broadcast_wide, gather_wide as _gather_wide
from .reduction import low_precision as _low_precision


def _spatial_dims(nd):
    s = "DHW"[-nd:] if nd <= 3 else None
    return ("NC" + s, "OI" + s, "NC" + s)


def _pointwise(x, w):
    """A 1x1 convolution (stride 1, no padding, one group) as the matmul it is: ``w (O, C) @ x (N, C, spatial)``.

    XLA:CPU computes such a convolution as a dot of transposed copies (NC... layouts put the channels in the
    middle) and transposes the result back; a whole step fuses those transposes into the producers and consumers
    around it, strided loops slower than the convolution (OMNet's Conv1d + BatchNorm stack: 20% slower compiled than
    eager). The matmul over the channels needs none: a 1x1 convolution's forward and gradient in plain JAX on 2
    cores, MobileNet- and ResNet-shaped, 1.5-3.1x faster (2112 -> 1024 channels over 192 points: 1.05x)."""
    n, c = x.shape[:2]
    y = jnp.matmul(w.reshape(w.shape[0], c), x.reshape(n, c, -1))
    return y.reshape((n, w.shape[0]) + x.shape[2:])


# A grouped convolution's kernels of at most this many taps are computed tap by tap on the CPU (``_grouped_taps``).
# 5x5 kernels would gain most (MobileNetV3's step at batch 8, 64 px: eager 305 -> 73 ms, auto-jit 224 -> 90), but a
# whole step's compile grows with their 25-term sums (MobileNetV3's cold first step under auto-jit: 16.3 -> 22.1 s);
# 3x3 ones compiled as fast as XLA's convolution when measured (16.3 s, warm 3.1 against 3.3), but no longer: with
# the clusters' FMA barriers since, XLA fuses each 9-tap sum into every reader, and MobileNetV3's 404-op cluster
# compiles in 21.6-23.2 s against 17.1 with none tap by tap (session 74, benchmarks/results/eager_loop.md). Kept
# for their run time (a 240-channel 3x3 depthwise layer's forward: 1.4 ms against XLA's 28)
_MAX_TAPS = 9


def _live_taps(k, dilation, stride, out, real):
    """The taps whose window reads a value of the input: ``real`` holds, per spatial axis, which of its rows are
    the input's (not padding, not a stride's inserted zeros). A tap reading only zeros adds nothing (a 5x5 kernel
    on a 2x2 map: 9 of its 25 taps read values)."""
    live = [[t for t in range(kk) if any(r[t * d + j * st] for j in range(m))]
            for kk, d, st, m, r in zip(k, dilation, stride, out, real)]
    return list(itertools.product(*live))


def _real_rows(size, lo, step, count):
    """(``_live_taps``) Rows ``lo, lo + step, ...`` (``count`` of them) of an axis of ``size`` rows are values."""
    rows = np.zeros(size, bool)
    at = lo + step * np.arange(count)
    rows[at[(at >= 0) & (at < size)]] = True
    return rows


def _taps(x, w, stride, dilation, groups, real):
    """(``_grouped_taps``) The correlation of ``x`` (padded already; ``real``: which rows are values, per spatial
    axis) with grouped weights ``w`` (O, I/G, *k), tap by tap: the shifted window of ``x`` each tap reads, times that
    tap's weights -- a product where each group has one input channel (depthwise), a dot over each group's channels
    otherwise."""
    n, c = x.shape[:2]
    o, k = w.shape[0], w.shape[2:]
    cg = c // groups
    out = tuple((size - d * (kk - 1) - 1) // st + 1 for size, kk, d, st in zip(x.shape[2:], k, dilation, stride))
    xg = x.reshape((n, groups, cg) + x.shape[2:])
    wg = w.reshape((groups, o // groups, cg) + k)
    live = _live_taps(k, dilation, stride, out, real)
    if not live:
        return jnp.zeros((n, o) + out, jnp.result_type(x, w))
    windows = [xg[(slice(None),) * 3 + tuple(slice(t * d, t * d + (m - 1) * st + 1, st)
                                             for t, d, st, m in zip(tap, dilation, stride, out))] for tap in live]
    y = None
    for tap, window in zip(live, windows):
        wt = wg[(slice(None),) * 3 + tap]  # (G, O/G, I/G)
        if cg == 1:  # (depthwise: a product, no dot of one term; a chain of sums -- as one reduction over the taps
            # it ran 8-16x slower)
            term = window * wt.reshape((1, groups, o // groups) + (1,) * len(k))
        else:
            term = jnp.einsum("ngi...,goi->ngo...", window, wt)
        y = term if y is None else y + term
    return y.reshape((n, o) + out)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5))
def _grouped_taps(x, w, stride, padding, dilation, groups):
    """A grouped convolution as the sum over its kernel's taps of a shifted window of ``x`` times that tap's weights
    (:func:`_taps`), and its gradient the same way.

    XLA:CPU has no fast kernel for a grouped convolution: it loops over the groups' elements naively, and worst in
    the weight gradient (a convolution with ``batch_group_count``). One convolution's forward / input gradient /
    weight gradient in ms, as one XLA convolution against tap by tap (2 cores, megxla's XLA flags): RegNet's 3x3, 56
    channels in groups of 8, 8x8, batch 8: 0.47 / 0.84 / 84 against 0.34 / 0.57 / 0.52; a 3x3 depthwise, 240
    channels at 28x28, batch 2: 55 / 124 / 130 against 0.33 / 20 / 8; MobileNet's stride-2 depthwise on 112x112,
    96 channels: 215 / 658 / 292 against 1.4 / 22 / 22.

    The gradient is written out (a ``jax.custom_vjp``), not left to ``jax.vjp`` of the forward: the transpose of a
    window is a pad, and XLA fuses a backward's sums of pads through one convolution into the next -- four 3x3
    depthwise layers' gradient ran 20x slower than four times one layer's, 5x5 ones 200x. Written as what it is -- the
    correlation of the stride-dilated output gradient with the flipped kernel (:func:`_taps` again), and per tap a
    product of the output gradient with the window summed over the batch and positions --, the backward reads
    windows as the forward does. It is differentiable JAX in turn (a second order's gradient)."""
    return _taps(_padded(x, padding), w, stride, dilation, groups, _input_rows(x, padding))


def _padded(x, padding):
    return jnp.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding]) if any(padding) else x


def _input_rows(x, padding):
    """(``_live_taps``) Which rows of ``x`` padded by ``padding`` are ``x``'s, per spatial axis."""
    return [_real_rows(size + 2 * p, p, 1, size) for size, p in zip(x.shape[2:], padding)]


def _grouped_taps_fwd(x, w, stride, padding, dilation, groups):
    return _grouped_taps(x, w, stride, padding, dilation, groups), (x, w)


def _grouped_taps_bwd(stride, padding, dilation, groups, res, dy):
    x, w = res
    n, c = x.shape[:2]
    o, k = w.shape[0], w.shape[2:]
    cg, og = c // groups, o // groups
    # dx: dy dilated by the stride, padded so that a stride-1 correlation with the flipped kernel (its in and out
    # channels swapped within each group) has x's size
    config = [(0, 0, 0), (0, 0, 0)] + [
        (d * (kk - 1) - p, size + p - ((m - 1) * st + 1), st - 1)
        for size, m, kk, d, st, p in zip(x.shape[2:], dy.shape[2:], k, dilation, stride, padding)]
    dyd = lax.pad(dy, jnp.zeros((), dy.dtype), config)
    wt = jnp.flip(w.reshape((groups, og, cg) + k), axis=tuple(range(3, 3 + len(k))))
    wt = jnp.swapaxes(wt, 1, 2).reshape((c, og) + k)
    real = [_real_rows(size, lo, st, m) for size, (lo, _, _), st, m in
            zip(dyd.shape[2:], config[2:], stride, dy.shape[2:])]
    dx = _taps(dyd, wt, (1,) * len(k), dilation, groups, real)
    # dw: per tap, the output gradient times the window it read, summed over the batch and the positions
    xp = _padded(x, padding)
    xg = xp.reshape((n, groups, cg) + xp.shape[2:])
    dyg = dy.reshape((n, groups, og) + dy.shape[2:])
    axes = tuple(range(3, 3 + len(k)))
    live = _live_taps(k, dilation, stride, dy.shape[2:], _input_rows(x, padding))
    windows = [xg[(slice(None),) * 3 + tuple(slice(t * d, t * d + (m - 1) * st + 1, st)
                                             for t, d, st, m in zip(tap, dilation, stride, dy.shape[2:]))]
               for tap in live]
    if not live:  # (every tap reads only padding -- a 1x1 kernel, stride 2, padding 1 on a width of 1 --: zero)
        return dx.astype(x.dtype), jnp.zeros(w.shape, w.dtype)
    if cg == 1:  # (one reduction for all taps: a kernel a tap compiled 9-25 kernels a layer)
        dwl = (dyg[:, :, :, None] * jnp.stack(windows, 3)).sum(axis=(0,) + tuple(a + 1 for a in axes))  # (G, O/G, T)
    else:
        dwl = jnp.stack([jnp.einsum("ngo...,ngi...->goi", dyg, wnd) for wnd in windows], -1)  # (G, O/G, I/G, T)
    dwl = dwl.reshape((o, cg, len(live)))
    if len(live) == int(np.prod(k)):
        dw = dwl.reshape((o, cg) + k)
    else:  # (the taps whose window is padding: no gradient)
        at = {tap: j for j, tap in enumerate(live)}
        zero = jnp.zeros((o, cg), dy.dtype)
        dw = jnp.stack([dwl[:, :, at[tap]] if tap in at else zero for tap in np.ndindex(*k)], -1).reshape((o, cg) + k)
    return dx.astype(x.dtype), dw.astype(w.dtype)


_grouped_taps.defvjp(_grouped_taps_fwd, _grouped_taps_bwd)


def _swapper_axes(k, stride, dilation, padding):
    """Per spatial axis of a convolution: whether its input gradient (JAX: the output gradient dilated by the
    stride under the flipped kernel, padded ``k - 1 - padding`` before) has a window XLA's ConvOperandSwapper takes
    for a group dimension -- 2 taps, undilated, base dilation 2, no padding before."""
    return [kk == 2 and s == 2 and d == 1 and p == 1 for kk, s, d, p in zip(k, stride, dilation, padding)]


def _conv(x, w, *bias, stride, padding, dilation, groups, nd):
    if w.ndim == nd + 3:  # MegEngine's grouped layout (G, O/G, I/G, *k)
        w = w.reshape((w.shape[0] * w.shape[1],) + w.shape[2:])
    cpu_f32 = x.dtype == jnp.float32 and w.dtype == jnp.float32 and jax.default_backend() == "cpu"
    if groups == 1 and cpu_f32 and not any(k != 1 for k in w.shape[2:]) and not any(s != 1 for s in stride) \
            and not any(padding):
        y = _pointwise(x, w)  # (on the CPU only: GPUs' convolution libraries take NCHW 1x1 as it is)
    elif groups > 1 and cpu_f32 and int(np.prod(w.shape[2:])) <= _MAX_TAPS:
        y = _grouped_taps(x, w, tuple(stride), tuple(padding), tuple(dilation), groups)  # (GPUs': grouped kernels)
    elif any(_swapper_axes(w.shape[2:], stride, dilation, padding)):
        # NOTE: the input gradient of a stride-2 axis under a 2-tap kernel with padding 1 is a convolution XLA's
        # ConvOperandSwapper mistakes for a grouped one (see _conv_transpose); it aborted the process (Conv2d(k=(2,
        # 3), stride=(2, 1), padding=(1, 0)) of a 4x4 input, megengine_module_fuzz). Computed at stride 1 and
        # subsampled on such an axis, the gradient interleaves zeros by a pad instead of dilating by the window.
        sub = _swapper_axes(w.shape[2:], stride, dilation, padding)
        y = lax.conv_general_dilated(x, w, tuple(1 if s_ else s for s, s_ in zip(stride, sub)),
                                     [(p, p) for p in padding], rhs_dilation=dilation,
                                     dimension_numbers=_spatial_dims(nd), feature_group_count=groups)
        y = y[(slice(None),) * 2 + tuple(slice(None, None, 2) if s_ else slice(None) for s_ in sub)]
    else:
        y = lax.conv_general_dilated(x, w, stride, [(p, p) for p in padding], rhs_dilation=dilation,
                                     dimension_numbers=_spatial_dims(nd), feature_group_count=groups)
    if bias:
        y = y + _broadcast_wide(bias[0].reshape((1, -1) + (1,) * nd), y.shape)  # (float16: grad sums in float32)
    return y


def _conv_transpose(x, w, *bias, stride, padding, output_padding, dilation, groups, nd):
    # Weight layout (I, O/G, *k) as in MegEngine; computed as the gradient of a convolution, i.e. a
    # convolution of the stride-dilated input with the flipped, in/out-swapped kernel.
    if w.ndim == nd + 3:
        w = w.reshape((w.shape[0] * w.shape[1],) + w.shape[2:])
    cin = w.shape[0]
    k = w.shape[2:]
    w = w.reshape((groups, cin // groups) + w.shape[1:])
    w = jnp.swapaxes(w, 1, 2).reshape((-1, cin // groups) + k)  # (O, I/G, *k)
    w = jnp.flip(w, axis=tuple(range(2, 2 + nd)))
    pads = [(d * (kk - 1) - p, d * (kk - 1) - p + op) for kk, p, d, op in zip(k, padding, dilation, output_padding)]
    # NOTE: an axis dilated by 2 under a 2-tap, undilated, unpadded window (stride 2, kernel 2, padding 1) is what
    # XLA's ConvOperandSwapper takes for a "group" dimension: when it swaps the operands (a kernel larger than the
    # input on the other axes) it keeps that axis's window as it was, and the compiler's check then aborts the
    # process ("Window dimensions do not match RHS shape"; found by megengine_module_fuzz). Such an axis is
    # dilated by an interior pad instead: the same values, and no window of that shape.
    own = [s == kk == 2 and d == 1 and lo == hi == 0 for s, kk, d, (lo, hi) in zip(stride, k, dilation, pads)]
    if any(own):
        x = lax.pad(x, jnp.zeros((), x.dtype), [(0, 0, 0)] * 2 + [(0, 0, s - 1 if o else 0)
                                                                   for s, o in zip(stride, own)])
        stride = tuple(1 if o else s for s, o in zip(stride, own))
    y = lax.conv_general_dilated(x, w, (1,) * nd, pads, lhs_dilation=stride, rhs_dilation=dilation,
                                 dimension_numbers=_spatial_dims(nd), feature_group_count=groups)
    if bias:
        y = y + _broadcast_wide(bias[0].reshape((1, -1) + (1,) * nd), y.shape)  # (float16: grad sums in float32)
    return y


def _max_pool_value(x, kernel, stride, padding):
    init = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    return lax.reduce_window(x, np.asarray(init, x.dtype), lax.max, (1, 1) + kernel, (1, 1) + stride,
                             [(0, 0), (0, 0)] + [(p, p) for p in padding])


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _max_pool_ties(x, kernel, stride, padding):
    return _max_pool_value(x, kernel, stride, padding)


def _max_pool_ties_fwd(x, kernel, stride, padding):
    return _max_pool_value(x, kernel, stride, padding), x


def _max_pool_ties_bwd(kernel, stride, padding, x, g):
    # MegEngine's pooling gradient: every input equal to its window's maximum receives the window's gradient
    # (XLA's select-and-scatter picks one). Ties are common where it matters: integer-valued activations of
    # quantization-aware training, zeros after a ReLU.
    # A window is a product of one window per axis, so pooling is too: pool along the first axis, then the result
    # along the second... Backward, each axis in turn hands a window's gradient to the inputs of that axis's window
    # equal to its maximum. That is exactly the gradient above: an input of a window receives it through one path,
    # the entry of its own row (column) that the next axis pools, and it equals the window's maximum exactly when it
    # equals that entry and that entry equals the maximum. Per axis: k taps where the whole window takes k x k. YOLOX's
    # SPP pools by 5, 9 and 13 at stride 1: 275 taps, each a compare, pad and add fused with the pooled input's
    # producer, made a backward part compile for 40 s on 2 cores (16 s with 2 x 27 taps).
    dtype = g.dtype
    if _low_precision(g):  # (float16/bfloat16: overlapping windows' gradients sum in float32, rounded once)
        g = g.astype(jnp.float32)
    ys = [x]
    for j in range(len(kernel) - 1):
        window, strides, pads = [1] * x.ndim, [1] * x.ndim, [(0, 0)] * x.ndim
        window[2 + j], strides[2 + j], pads[2 + j] = kernel[j], stride[j], (padding[j], padding[j])
        ys.append(lax.reduce_window(ys[-1], np.asarray(-np.inf, x.dtype), lax.max, window, strides, pads))
    for j in reversed(range(len(kernel))):
        g = _max_pool_axis_bwd(ys[j], g, 2 + j, kernel[j], stride[j], padding[j])
    return (g.astype(dtype),)


def _max_pool_axis_bwd(x, g, axis, k, s, p):
    """Max pooling along ``axis`` alone (kernel ``k``, stride ``s``, padding ``p``), backward: ``g`` (pooled) to the
    inputs equal to their window's maximum."""
    # NOTE: each window's first maximum is found by a running compare over the kernel's offsets (a strict >, so the
    # first wins) and gets the gradient by its offset's index; the equal values only add the ties. A compare of x
    # with its window's maximum alone lost most gradients in a compiled step: there x is often an expression XLA
    # fuses into each consumer and rounds differently in each (a mean's division by 100 became a multiplication by
    # 0.01 in one fusion, not the other), so x == max(x) failed -- a norm followed by max pooling trained wrongly
    # under xla_trace, trace and auto-jit (found by tests/test_autojit_networks.py). Routed by index, every window's
    # gradient reaches one of its maxima however XLA rounds; a rounding difference can only miss an exact tie. (On
    # XLA CPU, for an (8, 64, 56, 56) input, 3x3 windows, stride 2, the whole window's taps: 5.4-5.6 ms; a variadic
    # reduce-window of (value, position) pairs, which did the same, 9.5; the value compare alone 3.3; XLA's own
    # select-and-scatter 22.7. By axes, an (8, 64, 32, 32) input, stride 1: 3x3 2.0 ms against the window's 7.8,
    # 9x9 12.2 against 20.5.)
    nd, n = x.ndim, g.shape[axis]
    pads = [(0, 0)] * nd
    pads[axis] = (p, p)
    xp = jnp.pad(x, pads, constant_values=-jnp.inf)

    def along(index):
        return tuple(index if a == axis else slice(None) for a in range(nd))

    xs = [xp[along(slice(o, o + (n - 1) * s + 1, s))] for o in range(k)]
    top, first = xs[0], jnp.zeros(g.shape, jnp.int32)
    for o in range(1, k):
        larger = xs[o] > top
        top, first = jnp.where(larger, xs[o], top), jnp.where(larger, jnp.int32(o), first)
    total = None
    zero = jnp.zeros((), g.dtype)
    for o in range(k):
        part = jnp.where((first == o) | (xs[o] == top), g, zero)
        part = lax.pad(part, zero, [(o, xp.shape[a] - o - (n - 1) * s - 1, s - 1) if a == axis else (0, 0, 0)
                                    for a in range(nd)])
        total = part if total is None else total + part
    return total[along(slice(p, p + x.shape[axis]))]


_max_pool_ties.defvjp(_max_pool_ties_fwd, _max_pool_ties_bwd)


def _max_pool(x, *, kernel, stride, padding):
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return _max_pool_value(x, kernel, stride, padding)
    return _max_pool_ties(x, kernel, stride, padding)


def _avg_pool(x, *, kernel, stride, padding, mode):
    if _low_precision(x):  # float16 / bfloat16: summed in float32 (a bfloat16 64x64 window of ones averaged to
        # 0.0625, its count and sum rounded), the result in the input's type
        return _avg_pool(x.astype(jnp.float32), kernel=kernel, stride=stride, padding=padding,
                         mode=mode).astype(x.dtype)
    window, strides = (1, 1) + kernel, (1, 1) + stride
    pads = [(0, 0), (0, 0)] + [(p, p) for p in padding]
    total = lax.reduce_window(x, np.zeros((), x.dtype), lax.add, window, strides, pads)
    if mode == "average_count_exclude_padding":
        ones = jnp.ones(x.shape[2:], x.dtype)[None, None]
        count = lax.reduce_window(ones, np.zeros((), x.dtype), lax.add, window, strides, pads)
        return divide(total, count)
    size = 1
    for k in kernel:
        size *= k
    # (an IEEE division forward and backward, as MegEngine's pooling kernels: XLA would multiply by 1 / size)
    return divide(total, np.asarray(size, x.dtype))


def _adaptive_pool(x, *, oshp, op):
    # MegEngine: stride = in // out, kernel = in - (out - 1) * stride.
    ih, iw = x.shape[2:]
    oh, ow = oshp
    sh, sw = ih // oh, iw // ow
    kh, kw = ih - (oh - 1) * sh, iw - (ow - 1) * sw
    if op == "max":
        return _max_pool(x, kernel=(kh, kw), stride=(sh, sw), padding=(0, 0))
    return _avg_pool(x, kernel=(kh, kw), stride=(sh, sw), padding=(0, 0), mode="average")


def _rsqrt_eps(var, eps, eps_mode="additive"):
    return lax.rsqrt(jnp.maximum(var, eps) if eps_mode == "max" else var + eps)


def _bn_train(x, *affine, axes, eps, eps_mode="additive"):
    # NOTE: fused (one primitive for statistics + normalisation) for eager speed: 1 dispatch instead of ~8.
    # A float16 input (autocast) is normalised in float32 and the result returned in float16, statistics in
    # float32, as MegEngine's BatchNorm kernel.
    low = _low_precision(x)
    xc = x.astype(jnp.float32) if low else x
    mean = jnp.mean(xc, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(xc - mean), axis=axes, keepdims=True)
    y = (xc - mean) * _rsqrt_eps(var, eps, eps_mode)
    if affine:
        y = y * affine[0] + affine[1]
    return (y.astype(x.dtype) if low else y), mean, var


def _bn_infer(x, mean, var, *affine, eps, eps_mode="additive"):
    low = _low_precision(x)
    xc = x.astype(jnp.float32) if low else x
    y = (xc - mean) * _rsqrt_eps(var, eps, eps_mode)
    if affine:
        y = y * affine[0] + affine[1]
    return y.astype(x.dtype) if low else y


def _general_norm(x, *affine, axes, eps):
    # Statistics over ``axes``; weight/bias have the shape of ``x`` at ``axes`` (broadcast over the rest). A
    # float16 / bfloat16 input is normalised in float32 and returned in its type, as batch and group norm do
    # (bfloat16 [100, 100.5, 101, 101.5] normalised to [-1.63, -0.82, 0, 0.82] in bfloat16).
    low = _low_precision(x)
    xc = x.astype(jnp.float32) if low else x
    mean = jnp.mean(xc, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(xc - mean), axis=axes, keepdims=True)
    y = (xc - mean) * lax.rsqrt(var + eps)
    if affine:
        shape = tuple(x.shape[i] if i in axes else 1 for i in range(x.ndim))
        y = y * affine[0].reshape(shape) + affine[1].reshape(shape)
    return y.astype(x.dtype) if low else y


def _layer_norm(x, *affine, ndim, eps):
    return _general_norm(x, *affine, axes=tuple(range(x.ndim - ndim, x.ndim)), eps=eps)


def _group_norm(x, *affine, groups, eps):
    # a float16 input is normalised in float32 and returned in float16 (MegEngine's instance norm under autocast)
    low = _low_precision(x)
    xc = x.astype(jnp.float32) if low else x
    n, c = x.shape[:2]
    g = xc.reshape((n, groups, -1))
    mean = jnp.mean(g, axis=2, keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=2, keepdims=True)
    y = ((g - mean) * lax.rsqrt(var + eps)).reshape(x.shape)
    if affine:
        shape = (1, c) + (1,) * (x.ndim - 2)
        y = y * affine[0].reshape(shape) + affine[1].reshape(shape)
    return y.astype(x.dtype) if low else y


conv = Primitive("conv", _conv, library_kernel=True)
conv_transpose = Primitive("conv_transpose", _conv_transpose, library_kernel=True)
max_pool = Primitive("max_pool", _max_pool)
avg_pool = Primitive("avg_pool", _avg_pool)
adaptive_pool = Primitive("adaptive_pool", _adaptive_pool)
softmax = Primitive("softmax", lambda x, *, axis: jax.nn.softmax(x, axis=axis))  # axis: int or tuple
# (MegEngine's logsoftmax is ``x - logsumexp(x)`` of its own ops, rounded so: jax.nn.log_softmax's ``(x - max) -
# log(sum)`` rounds otherwise -- 41% of a (2000, 10) batch's values an ulp or more from MegEngine's, 18% so)
log_softmax = Primitive("log_softmax", lambda x, *, axis: x - jax.scipy.special.logsumexp(x, axis=axis, keepdims=True))
batch_norm_train = Primitive("batch_norm_train", _bn_train, multiple_results=True)
batch_norm_infer = Primitive("batch_norm_infer", _bn_infer)
layer_norm = Primitive("layer_norm", _layer_norm)
group_norm = Primitive("group_norm", _group_norm)
# (float16 rows through float32: a row's gradient, summed over its every use, accumulates in float32)
embedding = Primitive("embedding", lambda idx, w: _gather_wide(lambda t: jnp.take(t, idx, axis=0), w))


def _lrn(x, *, kernel_size, k, alpha, beta):
    # megdnn's LRN: x / (k + alpha * sum of x^2 over a window of ``kernel_size`` channels) ** beta (alpha is
    # not divided by the window size, unlike Caffe/PyTorch).
    half = kernel_size // 2
    window = (1, kernel_size) + (1,) * (x.ndim - 2)
    pads = [(0, 0), (half, kernel_size - 1 - half)] + [(0, 0)] * (x.ndim - 2)
    xs = x.astype(jnp.float32) if _low_precision(x) else x  # (the window's sum in float32, as _avg_pool's)
    s = lax.reduce_window(jnp.square(xs), np.zeros((), xs.dtype), lax.add, window, (1,) * x.ndim, pads)
    return (xs * jnp.power(k + alpha * s, -beta)).astype(x.dtype)


def _sliding_window(x, *, kernel, padding, stride, dilation):
    """(N, C, H, W) -> (N, C, OH, OW, KH, KW): the zero-padded window at each output position (im2col)."""
    # (float16/bfloat16 through float32: the gradient -- and sliding_window_transpose, its transpose -- sums the
    # overlapping windows in float32; a 15x15 window's float16 gradient summed in float16 was 11 ulps off)
    return _gather_wide(lambda t: _windows(t, kernel, padding, stride, dilation), x)


def _windows(x, kernel, padding, stride, dilation):
    n, c, h, w = x.shape
    (kh, kw), (ph, pw), (sh, sw), (dh, dw) = kernel, padding, stride, dilation
    xp = jnp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"window {kernel} (dilation {dilation}) is larger than the padded input {xp.shape[2:]}")
    if oh * ow < kh * kw:
        # (fewer positions than taps -- CREStereo's correlation takes windows as large as its feature map, 3x3 or
        # 1x9 of them: a slice per position; per tap, 512 slices and as many pads in the gradient compiled 17 s)
        rows = []
        for i in range(oh):
            cols = [lax.slice(xp, (0, 0, i * sh, j * sw), (n, c, i * sh + dh * (kh - 1) + 1, j * sw + dw * (kw - 1) + 1),
                              (1, 1, dh, dw)) for j in range(ow)]
            rows.append(jnp.stack(cols, 2))
        return jnp.stack(rows, 2)
    rows = []
    for i in range(kh):
        cols = [lax.slice(xp, (0, 0, i * dh, j * dw), (n, c, i * dh + (oh - 1) * sh + 1, j * dw + (ow - 1) * sw + 1),
                          (1, 1, sh, sw)) for j in range(kw)]
        rows.append(jnp.stack(cols, -1))
    return jnp.stack(rows, -2)


def _sliding_window_transpose(y, *, output_size, kernel, padding, stride, dilation):
    # The adjoint of sliding_window (col2im): overlapping windows are summed back into place.
    n, c = y.shape[:2]
    fn = functools.partial(_sliding_window, kernel=kernel, padding=padding, stride=stride, dilation=dilation)
    (x,) = jax.linear_transpose(fn, jax.ShapeDtypeStruct((n, c) + tuple(output_size), y.dtype))(y)
    return x


def _local_conv(x, w, *, stride, padding, dilation):
    # Weight (G, OH, OW, I/G, KH, KW, O/G), or 6-D without the group axis: one kernel per output position.
    if w.ndim == 6:
        w = w[None]
    g, oh, ow, icg, kh, kw, ocg = w.shape
    p = _sliding_window(x, kernel=(kh, kw), padding=padding, stride=stride, dilation=dilation)
    n = x.shape[0]
    p = p.reshape(n, g, icg, oh, ow, kh, kw)
    y = jnp.einsum("ngchwij,ghwcijo->ngohw", p, w)
    return y.reshape(n, g * ocg, oh, ow)


def _deformable_conv(x, w, offset, mask, *bias, stride, padding, dilation, groups):
    # Modulated deformable convolution (DCNv2). offset (N, 2*DG*KH*KW, OH, OW) holds (dy, dx) pairs per
    # deformable group and kernel position; mask (N, DG*KH*KW, OH, OW). Samples outside the image are 0.
    from .vision import sample_bilinear_zero
    if w.ndim == 5:
        w = w.reshape((w.shape[0] * w.shape[1],) + w.shape[2:])
    n, c, h, wd = x.shape
    o, icg, kh, kw = w.shape
    kk = kh * kw
    oh, ow = offset.shape[2:]
    dg = offset.shape[1] // (2 * kk)
    off = offset.reshape(n, dg, kk, 2, oh, ow)
    ky, kx = jnp.divmod(jnp.arange(kk), kw)
    by = (jnp.arange(oh) * stride[0] - padding[0])[None, :, None] + (ky * dilation[0])[:, None, None]
    bx = (jnp.arange(ow) * stride[1] - padding[1])[None, None, :] + (kx * dilation[1])[:, None, None]
    ys = by.astype(x.dtype) + off[:, :, :, 0]  # (N, DG, K, OH, OW)
    xs = bx.astype(x.dtype) + off[:, :, :, 1]
    img = x.reshape(n * dg, c // dg, h, wd)
    cols = sample_bilinear_zero(img, ys.reshape(n * dg, -1), xs.reshape(n * dg, -1))  # (N*DG, C/DG, K*OH*OW)
    cols = cols.reshape(n, dg, c // dg, kk, oh, ow) * mask.reshape(n, dg, 1, kk, oh, ow)
    cols = cols.reshape(n, groups, c // groups, kk, oh, ow)
    y = jnp.einsum("ngckhw,gock->ngohw", cols, w.reshape(groups, o // groups, icg, kk)).reshape(n, o, oh, ow)
    if bias:
        y = y + _broadcast_wide(bias[0].reshape(1, -1, 1, 1), y.shape)
    return y


def _region_restricted_conv(x, w, rin, rout, *bias, stride, padding, dilation, groups):
    # A convolution where output pixel (oh, ow) only sums input pixels whose region id rin[n, ih, iw] equals
    # rout[n, oh, ow] (megdnn's RegionRestrictedConvolution); padded pixels are zeros.
    if w.ndim == 5:
        w = w.reshape((w.shape[0] * w.shape[1],) + w.shape[2:])
    o, icg, kh, kw = w.shape
    win = dict(kernel=(kh, kw), padding=padding, stride=stride, dilation=dilation)
    p = _sliding_window(x, **win)  # (N, C, OH, OW, KH, KW)
    r = _sliding_window(rin[:, None].astype(jnp.int32), **win)[:, 0]  # (N, OH, OW, KH, KW)
    mask = (r == rout.astype(jnp.int32)[..., None, None]).astype(x.dtype)
    n, c, oh, ow = p.shape[:4]
    p = (p * mask[:, None]).reshape(n, groups, c // groups, oh, ow, kh, kw)
    y = jnp.einsum("ngchwij,gocij->ngohw", p, w.reshape(groups, o // groups, icg, kh, kw))
    y = y.reshape(n, o, oh, ow)
    if bias:
        y = y + _broadcast_wide(bias[0].reshape(1, -1, 1, 1), y.shape)
    return y


def _ctc_loss(pred, pred_lengths, label, label_lengths, *, blank):
    # NOTE: fused (the CTC forward recursion as one lax.scan) -- as composite ops it would be ~10 dispatches per
    # time step eagerly. pred holds probabilities (T, N, C) as in MegEngine; label is (N, S) padded, or the
    # concatenation of all label sequences (1-D). Returns the per-sample negative log likelihood (N,).
    t_max, n, _ = pred.shape
    # MegEngine's kernel (and its reference) takes logs of probabilities floored at the dtype's smallest normal
    # number, and starts unreachable states there too: an alignment that is impossible (a label longer than
    # its time steps allow) costs a large finite loss, not an astronomically large one
    tiny = jnp.finfo(pred.dtype).tiny
    logp = jnp.log(jnp.maximum(pred, tiny))
    floor = jnp.log(jnp.asarray(tiny, pred.dtype))
    label_lengths = label_lengths.astype(jnp.int32)
    pred_lengths = pred_lengths.astype(jnp.int32)
    if label.ndim == 1:  # concatenated labels -> padded (N, total)
        total = label.shape[0]
        starts = jnp.cumsum(label_lengths) - label_lengths
        idx = jnp.clip(starts[:, None] + jnp.arange(total)[None], 0, max(total - 1, 0))
        label = label[idx] if total else jnp.zeros((n, 0), label.dtype)
    s = label.shape[1]
    ell = 2 * s + 1
    ext = jnp.full((n, ell), blank, jnp.int32).at[:, 1::2].set(label.astype(jnp.int32))
    prev2 = jnp.concatenate([jnp.full((n, 2), -1, jnp.int32), ext[:, :-2]], axis=1)
    # a state may be entered from two back when its symbol differs from that one's (MegEngine's rule: a label
    # equal to the blank index is still a label here)
    can_skip = ext != prev2
    neg = jnp.asarray(-1e30, logp.dtype)  # finite "log 0": keeps gradients of unreachable states 0, not NaN
    first = jnp.take_along_axis(logp[0], ext, axis=1)
    alpha0 = jnp.where(jnp.arange(ell)[None] < 2, first, floor)

    def step(alpha, xs):
        lp, t = xs
        a1 = jnp.concatenate([jnp.full((n, 1), neg), alpha[:, :-1]], axis=1)
        a2 = jnp.concatenate([jnp.full((n, 2), neg), alpha[:, :-2]], axis=1)
        a2 = jnp.where(can_skip, a2, neg)
        m = jnp.maximum(jnp.maximum(alpha, a1), a2)
        lse = m + jnp.log(jnp.exp(alpha - m) + jnp.exp(a1 - m) + jnp.exp(a2 - m))
        new = lse + jnp.take_along_axis(lp, ext, axis=1)
        return jnp.where((t < pred_lengths)[:, None], new, alpha), None

    if t_max > 1:
        alpha, _ = lax.scan(step, alpha0, (logp[1:], jnp.arange(1, t_max)))
    else:
        alpha = alpha0
    last = jnp.take_along_axis(alpha, (2 * label_lengths)[:, None], axis=1)[:, 0]
    before = jnp.take_along_axis(alpha, jnp.maximum(2 * label_lengths - 1, 0)[:, None], axis=1)[:, 0]
    before = jnp.where(label_lengths > 0, before, neg)
    m = jnp.maximum(last, before)
    return -(m + jnp.log(jnp.exp(last - m) + jnp.exp(before - m)))


general_norm = Primitive("general_norm", _general_norm)
local_response_norm = Primitive("local_response_norm", _lrn)
sliding_window = Primitive("sliding_window", _sliding_window)
sliding_window_transpose = Primitive("sliding_window_transpose", _sliding_window_transpose)
local_conv = Primitive("local_conv", _local_conv)
deformable_conv = Primitive("deformable_conv", _deformable_conv)
ctc_loss = Primitive("ctc_loss", _ctc_loss)
region_restricted_conv = Primitive("region_restricted_conv", _region_restricted_conv)


def unbiased_factor(momentum, n):
    """The factor of the batch variance in the running variance's update: ``(1 - momentum) * n / (n - 1)``; one
    value per channel (n == 1) gives MegEngine's ``0 * inf``, a NaN running variance (it divides by n - 1 in C)."""
    return (1 - momentum) * n / (n - 1) if n > 1 else (float("inf") if n == 1 else 1 - momentum)


def _bn_train_update(x, running_mean, running_var, *affine, axes, eps, eps_mode, momentum):
    """Training BatchNorm and its running-statistics update as ONE primitive (one dispatch instead of ~9).

    ``affine`` (weight, bias) and the running buffers have any shape with C elements (MegEngine stores them
    ``(1, C, 1, 1)``); they are reshaped here, inside the op, where XLA makes the reshape free. The update is
    MegEngine's: ``running = momentum * running + (1 - momentum) * batch_stat``, the variance unbiased.
    """
    shape = tuple(x.shape[i] if i == 1 else 1 for i in range(x.ndim))
    if affine:
        affine = (affine[0].reshape(shape), affine[1].reshape(shape))
    y, mean, var = _bn_train(x, *affine, axes=axes, eps=eps, eps_mode=eps_mode)
    n = x.size // x.shape[1]
    # The running statistics are buffers, updated out of autodiff's sight as MegEngine's are: no gradient flows
    # back through their update -- through it, a batch of one value per channel (factor inf) turned the zero
    # cotangent of the running variance into NaN input and weight gradients (megengine_module_fuzz seed 8 case 176;
    # MegEngine's are 0)
    mean, var = lax.stop_gradient(mean), lax.stop_gradient(var)
    # NOTE: the factors are Python doubles rounded once to the buffer dtype, exactly as the op-by-op version
    # (``rm * momentum + mean * (1 - momentum)``) computed them.
    new_mean = (running_mean * jnp.asarray(momentum, running_mean.dtype)
                + mean.reshape(running_mean.shape).astype(running_mean.dtype)
                * jnp.asarray(1 - momentum, running_mean.dtype))
    new_var = (running_var * jnp.asarray(momentum, running_var.dtype)
               + var.reshape(running_var.shape).astype(running_var.dtype)
               * jnp.asarray(unbiased_factor(momentum, n), running_var.dtype))
    return y, new_mean, new_var


batch_norm_train_update = Primitive("batch_norm_train_update", _bn_train_update, multiple_results=True)
