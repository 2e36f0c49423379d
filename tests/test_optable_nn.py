"""The op table of ``megengine.functional.nn`` / ``.loss`` / ``.vision``: every case against an explicit-loop
NumPy reference (forward), central differences (grad) and eager == compiled; then bad-input checks per family
(each error names the op and is raised before anything is mutated)."""
import itertools

import numpy as np
import pytest

import megxla
import megxla.functional as F
from megxla.core._dispatch import OpError
from optable import OpCase, check_forward, check_grad, check_compiled, check_auto_jit, params, f32, i32, positive

T = megxla.Tensor
CASES = []
EXCLUDED = {
    "deformable_psroi_pooling": "not implemented: R-FCN deformable position-sensitive ROI pooling",
}


def add(*cases):
    CASES.extend(cases)


def const(value, dtype=None):
    return lambda rng: np.asarray(value, dtype)


def _t(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


# ---- convolution references (explicit loops) ---------------------------------------------------------------------
def np_conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    nd = x.ndim - 2
    s, p, d = _t(stride, nd), _t(padding, nd), _t(dilation, nd)
    if w.ndim == nd + 3:
        w = w.reshape((-1,) + w.shape[2:])
    xp = np.pad(x, [(0, 0), (0, 0)] + [(q, q) for q in p])
    n, c = x.shape[:2]
    o, k = w.shape[0], w.shape[2:]
    out = [(xp.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    y = np.zeros((n, o) + tuple(out), np.float64)
    cg, og = c // groups, o // groups
    for oc in range(o):
        g = oc // og
        for pos in np.ndindex(*out):
            for kp in np.ndindex(*k):
                idx = tuple(pos[i] * s[i] + kp[i] * d[i] for i in range(nd))
                patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + idx]
                y[(slice(None), oc) + pos] += patch @ w[(oc, slice(None)) + kp]
    if b is not None:
        y += b.reshape((1, -1) + (1,) * nd)
    return y.astype(np.result_type(x, w))


def np_conv_transpose(x, w, b=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    # The scatter definition: every input pixel adds ``x * w`` into a window of the output.
    nd = x.ndim - 2
    s, p, op, d = _t(stride, nd), _t(padding, nd), _t(output_padding, nd), _t(dilation, nd)
    if w.ndim == nd + 3:
        w = w.reshape((-1,) + w.shape[2:])
    n, ci = x.shape[:2]
    og, k = w.shape[1], w.shape[2:]
    ig = ci // groups
    full = [(x.shape[2 + i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 + op[i] for i in range(nd)]
    y = np.zeros((n, og * groups) + tuple(full), np.float64)
    for i in range(ci):
        g = i // ig
        for pos in np.ndindex(*x.shape[2:]):
            for kp in np.ndindex(*k):
                opos = tuple(pos[j] * s[j] + kp[j] * d[j] for j in range(nd))
                y[(slice(None), slice(g * og, (g + 1) * og)) + opos] += np.outer(x[(slice(None), i) + pos],
                                                                                 w[(i, slice(None)) + kp])
    out = [full[i] - 2 * p[i] for i in range(nd)]
    y = y[(slice(None), slice(None)) + tuple(slice(p[i], p[i] + out[i]) for i in range(nd))]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nd)
    return y.astype(x.dtype)


def np_local_conv(x, w, stride=1, padding=0, dilation=1):
    if w.ndim == 6:
        w = w[None]
    s, p, d = _t(stride, 2), _t(padding, 2), _t(dilation, 2)
    g, oh, ow, icg, kh, kw, ocg = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])])
    y = np.zeros((x.shape[0], g * ocg, oh, ow))
    for gi, i, j, c, a, b, o in itertools.product(range(g), range(oh), range(ow), range(icg), range(kh), range(kw),
                                                  range(ocg)):
        pix = xp[:, gi * icg + c, i * s[0] + a * d[0], j * s[1] + b * d[1]]
        y[:, gi * ocg + o, i, j] += pix * w[gi, i, j, c, a, b, o]
    return y.astype(x.dtype)


def _bilinear_zero(img, y, x):
    h, w = img.shape[-2:]
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    ly, lx = y - y0, x - x0
    v = 0.0
    for yy, wy in ((y0, 1 - ly), (y0 + 1, ly)):
        for xx, wx in ((x0, 1 - lx), (x0 + 1, lx)):
            if 0 <= yy < h and 0 <= xx < w:
                v = v + wy * wx * img[..., yy, xx]
    return v


def np_deformable_conv(x, w, offset, mask, b=None, stride=1, padding=0, dilation=1, groups=1):
    s, p, d = _t(stride, 2), _t(padding, 2), _t(dilation, 2)
    n, c, h, wd = x.shape
    o, icg, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    kk = kh * kw
    dg = offset.shape[1] // (2 * kk)
    cdg = c // dg
    cols = np.zeros((n, c, kk, oh, ow))
    for ni, ch, k, i, j in itertools.product(range(n), range(c), range(kk), range(oh), range(ow)):
        g = ch // cdg
        a, bb = divmod(k, kw)
        yy = i * s[0] - p[0] + a * d[0] + offset[ni, g * 2 * kk + 2 * k, i, j]
        xx = j * s[1] - p[1] + bb * d[1] + offset[ni, g * 2 * kk + 2 * k + 1, i, j]
        cols[ni, ch, k, i, j] = _bilinear_zero(x[ni, ch], yy, xx) * mask[ni, g * kk + k, i, j]
    y = np.zeros((n, o, oh, ow))
    og, cg = o // groups, c // groups
    for oc in range(o):
        g = oc // og
        y[:, oc] = np.einsum("nckhw,ck->nhw", cols[:, g * cg:(g + 1) * cg], w[oc].reshape(icg, kk))
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y.astype(x.dtype)


def np_region_conv(x, w, rin, rout, b=None, stride=1, padding=0, dilation=1, groups=1):
    s, p, d = _t(stride, 2), _t(padding, 2), _t(dilation, 2)
    if w.ndim == 5:
        w = w.reshape((-1,) + w.shape[2:])
    n, c, h, wd = x.shape
    o, icg, kh, kw = w.shape
    oh, ow = rout.shape[1:]
    og = o // groups
    y = np.zeros((n, o, oh, ow))
    for ni, oc, i, j, a, bb in itertools.product(range(n), range(o), range(oh), range(ow), range(kh), range(kw)):
        ih, iw = i * s[0] - p[0] + a * d[0], j * s[1] - p[1] + bb * d[1]
        if 0 <= ih < h and 0 <= iw < wd and rin[ni, ih, iw] == rout[ni, i, j]:
            g = oc // og
            y[ni, oc, i, j] += x[ni, g * icg:(g + 1) * icg, ih, iw] @ w[oc, :, a, bb]
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y.astype(x.dtype)


def W(*shape):  # weights: small values so float32 sums stay accurate
    return f32(*shape, lo=-1, hi=1)


add(
    OpCase("functional.conv1d", lambda x, w: F.conv1d(x, w), np_conv, [f32(2, 3, 7), W(4, 3, 3)], label="basic"),
    OpCase("functional.conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2),
           lambda x, w, b: np_conv(x, w, b, 2, 1, 2), [f32(1, 2, 9), W(3, 2, 3), W(1, 3, 1)], label="s2p1d2+bias"),
    # (1x1, stride 1, no padding: a matmul over the channels on the CPU -- ops/nn._pointwise)
    OpCase("functional.conv1d", lambda x, w, b: F.conv1d(x, w, b), lambda x, w, b: np_conv(x, w, b),
           [f32(2, 5, 7), W(3, 5, 1), W(1, 3, 1)], label="1x1+bias"),
    OpCase("functional.conv2d", lambda x, w: F.conv2d(x, w, dilation=2), lambda x, w: np_conv(x, w),
           [f32(2, 4, 3, 5), W(6, 4, 1, 1)], label="1x1"),
    OpCase("functional.conv3d", lambda x, w: F.conv3d(x, w), np_conv, [f32(1, 3, 2, 3, 2), W(2, 3, 1, 1, 1)],
           label="1x1x1"),
    OpCase("functional.conv2d", lambda x, w: F.conv2d(x, w, padding=1), lambda x, w: np_conv(x, w, padding=1),
           [f32(2, 3, 5, 5), W(4, 3, 3, 3)], label="pad1"),
    OpCase("functional.conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
           lambda x, w, b: np_conv(x, w, b, (2, 1), (1, 0), (1, 2)), [f32(1, 2, 6, 7), W(3, 2, 3, 2), W(1, 3, 1, 1)],
           label="asym+bias"),
    OpCase("functional.conv2d", lambda x, w: F.conv2d(x, w, groups=2), lambda x, w: np_conv(x, w, groups=2),
           [f32(1, 4, 4, 4), W(2, 3, 2, 2, 2)], label="groups5d"),
    OpCase("functional.conv2d", lambda x, w: F.conv2d(x, w, groups=2), lambda x, w: np_conv(x, w, groups=2),
           [f32(1, 4, 4, 4), W(6, 2, 2, 2)], label="groups4d"),
    # (grouped, at most 9 taps: tap by tap on the CPU -- ops/nn._grouped_taps; 5x5, 7x7: one convolution)
    OpCase("functional.conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=3),
           lambda x, w, b: np_conv(x, w, b, 2, 1, groups=3), [f32(2, 3, 7, 6), W(3, 1, 1, 3, 3), W(1, 3, 1, 1)],
           label="depthwise s2p1+bias"),
    OpCase("functional.conv2d", lambda x, w: F.conv2d(x, w, padding=2, dilation=(2, 1), groups=2),
           lambda x, w: np_conv(x, w, padding=2, dilation=(2, 1), groups=2), [f32(1, 4, 6, 5), W(2, 3, 2, 3, 3)],
           label="groups dil+pad"),
    OpCase("functional.conv2d", lambda x, w: F.conv2d(x, w, padding=2, groups=2),
           lambda x, w: np_conv(x, w, padding=2, groups=2), [f32(1, 2, 6, 5), W(2, 2, 1, 5, 5)],
           label="depthwise x2 5x5"),
    OpCase("functional.conv2d", lambda x, w: F.conv2d(x, w, padding=3, groups=2),
           lambda x, w: np_conv(x, w, padding=3, groups=2), [f32(1, 2, 7, 7), W(2, 1, 1, 7, 7)],
           label="depthwise 7x7"),
    # (taps whose window is padding only add nothing: left out -- here all but the middle one)
    OpCase("functional.conv2d", lambda x, w: F.conv2d(x, w, padding=2, dilation=2, groups=3),
           lambda x, w: np_conv(x, w, padding=2, dilation=2, groups=3), [f32(2, 3, 2, 2), W(3, 1, 3, 3)],
           label="depthwise dil2 on 2x2"),
    OpCase("functional.conv2d", lambda x, w: F.conv2d(x, w, stride=2, padding=3, dilation=3, groups=2),
           lambda x, w: np_conv(x, w, stride=2, padding=3, dilation=3, groups=2), [f32(1, 4, 2, 3), W(4, 2, 3, 3)],
           label="groups dil3 on 2x3"),
    OpCase("functional.conv1d", lambda x, w: F.conv1d(x, w, stride=2, padding=1, groups=4),
           lambda x, w: np_conv(x, w, stride=2, padding=1, groups=4), [f32(2, 4, 9), W(8, 1, 3)],
           label="depthwise x2"),
    OpCase("functional.conv2d", lambda x, w: F.conv2d(x, w, stride=2), lambda x, w: np_conv(x, w, stride=2),
           [f32(1, 2, 5, 5, dtype=np.float16), W(2, 2, 3, 3, )], grad=False, rtol=2e-2, atol=2e-2,
           label="f16-input"),
    OpCase("functional.conv3d", lambda x, w, b: F.conv3d(x, w, b, padding=1, stride=(1, 2, 1)),
           lambda x, w, b: np_conv(x, w, b, (1, 2, 1), 1), [f32(1, 2, 3, 4, 3), W(2, 2, 2, 2, 2), W(1, 2, 1, 1, 1)], label="basic"),
    OpCase("functional.conv3d", lambda x, w: F.conv3d(x, w, groups=2, dilation=(1, 1, 2)),
           lambda x, w: np_conv(x, w, dilation=(1, 1, 2), groups=2), [f32(1, 4, 3, 3, 5), W(4, 2, 2, 2, 2)],
           label="groups+dil"),
    OpCase("functional.conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w), np_conv_transpose,
           [f32(1, 2, 3, 3), W(2, 3, 2, 2)], label="basic"),
    OpCase("functional.conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1,
                                                                            output_padding=1),
           lambda x, w, b: np_conv_transpose(x, w, b, 2, 1, 1), [f32(2, 2, 3, 3), W(2, 3, 3, 3), W(1, 3, 1, 1)],
           label="s2p1op1+bias"),
    OpCase("functional.conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, stride=(2, 1), dilation=(1, 2),
                                                                         padding=(0, 1)),
           lambda x, w: np_conv_transpose(x, w, stride=(2, 1), dilation=(1, 2), padding=(0, 1)),
           [f32(1, 2, 3, 4), W(2, 2, 2, 3)], label="dilated"),
    OpCase("functional.conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, stride=2, groups=2),
           lambda x, w: np_conv_transpose(x, w, stride=2, groups=2), [f32(1, 4, 2, 3), W(2, 2, 3, 2, 2)],
           label="groups5d"),
    OpCase("functional.conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, groups=2),
           lambda x, w: np_conv_transpose(x, w, groups=2), [f32(1, 4, 2, 2), W(4, 1, 3, 2)], label="groups4d"),
    OpCase("functional.conv_transpose3d", lambda x, w: F.conv_transpose3d(x, w, stride=2, padding=(0, 1, 0)),
           lambda x, w: np_conv_transpose(x, w, stride=2, padding=(0, 1, 0)), [f32(1, 2, 2, 2, 2), W(2, 2, 2, 3, 2)],
           label="s2"),
    OpCase("functional.conv_transpose3d", lambda x, w, b: F.conv_transpose3d(x, w, b, output_padding=(1, 0, 0),
                                                                            stride=(2, 1, 1)),
           lambda x, w, b: np_conv_transpose(x, w, b, (2, 1, 1), 0, (1, 0, 0)), [f32(1, 1, 2, 2, 2), W(1, 2, 2, 2, 2),
                                                                               W(2)], label="outpad+bias"),
    OpCase("functional.local_conv2d", lambda x, w: F.local_conv2d(x, w), np_local_conv,
           [f32(2, 2, 4, 4), W(1, 2, 2, 2, 3, 3, 3)], label="7d"),
    OpCase("functional.local_conv2d", lambda x, w: F.local_conv2d(x, w, stride=2, padding=1),
           lambda x, w: np_local_conv(x, w, 2, 1), [f32(1, 2, 4, 4), W(3, 3, 2, 2, 2, 2)], label="6d-s2p1"),
    OpCase("functional.local_conv2d", lambda x, w, b: F.local_conv2d(x, w, b, dilation=2),
           lambda x, w, b: np_local_conv(x, w, dilation=2) + b,
           [f32(1, 4, 4, 4), W(2, 2, 2, 2, 2, 2, 1), W(1, 2, 1, 1)],
           label="groups+bias"),
    OpCase("functional.deformable_conv2d", lambda x, w, o, m: F.deformable_conv2d(x, w, o, m, padding=1),
           lambda x, w, o, m: np_deformable_conv(x, w, o, m, padding=1),
           [f32(1, 2, 4, 4), W(3, 2, 2, 2), f32(1, 8, 5, 5, lo=-1.3, hi=1.3), f32(1, 4, 5, 5, lo=0, hi=1)],
           grad_rtol=2e-3, grad_atol=1e-4, label="basic"),
    OpCase("functional.deformable_conv2d",
           lambda x, w, o, m, b: F.deformable_conv2d(x, w, o, m, b, stride=2, dilation=(1, 2), groups=2),
           lambda x, w, o, m, b: np_deformable_conv(x, w, o, m, b, 2, 0, (1, 2), 2),
           [f32(1, 4, 5, 6), W(4, 2, 2, 2), f32(1, 16, 2, 2, lo=-2, hi=2), f32(1, 8, 2, 2, lo=0, hi=1), W(4)],
           grad_rtol=2e-3, grad_atol=1e-4, label="dg2+groups"),
    OpCase("functional.region_restricted_conv", lambda x, w, ri, ro: F.region_restricted_conv(x, w, ri, ro, groups=2),
           lambda x, w, ri, ro: np_region_conv(x, w, ri, ro, groups=2),
           [f32(2, 2, 4, 4), W(2, 1, 1, 3, 3), i32(2, 4, 4, lo=0, hi=3), i32(2, 2, 2, lo=0, hi=3)], label="depthwise"),
    OpCase("functional.region_restricted_conv",
           lambda x, w, ri, ro, b: F.region_restricted_conv(x, w, ri, ro, b, stride=2, padding=1),
           lambda x, w, ri, ro, b: np_region_conv(x, w, ri, ro, b, 2, 1),
           [f32(1, 2, 5, 5), W(3, 2, 2, 2), i32(1, 5, 5, lo=0, hi=2, dtype=np.uint8),
            i32(1, 3, 3, lo=0, hi=2, dtype=np.uint8), W(3)], label="dense+bias+u8"),
    OpCase("functional.linear", F.linear, lambda x, w, b: x @ w.T + b, [f32(3, 4), W(5, 4), W(5)], label="bias"),
    OpCase("functional.linear", F.linear, lambda x, w: x @ w.T, [f32(2, 3, 4), W(2, 4)], label="3d"),
)


# ---- pooling ----------------------------------------------------------------------------------------------------
def np_pool(x, k, s=None, p=0, mode="max"):
    k = _t(k, 2)
    s = k if s is None else _t(s, 2)
    p = _t(p, 2)
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p[0] - k[0]) // s[0] + 1, (w + 2 * p[1] - k[1]) // s[1] + 1
    y = np.zeros((n, c, oh, ow), x.dtype)
    for i, j in np.ndindex(oh, ow):
        r0, c0 = i * s[0] - p[0], j * s[1] - p[1]
        win = x[:, :, max(r0, 0):min(r0 + k[0], h), max(c0, 0):min(c0 + k[1], w)]
        if mode == "max":
            y[:, :, i, j] = win.max(axis=(2, 3))
        elif mode == "average":
            y[:, :, i, j] = win.sum(axis=(2, 3)) / (k[0] * k[1])
        else:
            y[:, :, i, j] = win.mean(axis=(2, 3))
    return y


def np_adaptive(x, oshp, mode):
    oh, ow = _t(oshp, 2)
    h, w = x.shape[2:]
    sh, sw = h // oh, w // ow
    return np_pool(x, (h - (oh - 1) * sh, w - (ow - 1) * sw), (sh, sw), 0, mode)


add(
    OpCase("functional.max_pool2d", lambda x: F.max_pool2d(x, 2), lambda x: np_pool(x, 2), [f32(2, 3, 4, 6)],
           label="k2"),
    OpCase("functional.max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: np_pool(x, 3, 2, 1),
           [f32(1, 2, 5, 6)], label="k3s2p1"),
    OpCase("functional.max_pool2d", lambda x: F.max_pool2d(x, (2, 3), (1, 2)), lambda x: np_pool(x, (2, 3), (1, 2)),
           [i32(1, 2, 4, 7)], label="int"),
    OpCase("functional.avg_pool2d", lambda x: F.avg_pool2d(x, 2), lambda x: np_pool(x, 2, mode="excl"),
           [f32(2, 3, 4, 4)], label="k2"),
    OpCase("functional.avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1), lambda x: np_pool(x, 3, 2, 1, "excl"),
           [f32(1, 2, 5, 6)], label="exclude-padding"),
    OpCase("functional.avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1, mode="average"),
           lambda x: np_pool(x, 3, 2, 1, "average"), [f32(1, 2, 5, 6)], label="average"),
    OpCase("functional.adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (2, 3)),
           lambda x: np_adaptive(x, (2, 3), "excl"), [f32(1, 2, 5, 7)], label="2x3"),
    OpCase("functional.adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, 1),
           lambda x: x.mean(axis=(2, 3), keepdims=True), [f32(2, 3, 4, 4)], label="global"),
    OpCase("functional.adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (3, 2)),
           lambda x: np_adaptive(x, (3, 2), "max"), [f32(1, 2, 7, 5)], label="3x2"),
)


# ---- normalisation ----------------------------------------------------------------------------------------------
def np_norm(x, axes, eps=1e-5):
    m = x.mean(axis=axes, keepdims=True)
    v = x.var(axis=axes, keepdims=True)
    return (x - m) / np.sqrt(v + eps)


def np_bn_train(x, rm, rv, w, b, momentum=0.9, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    n = x.size // x.shape[1]
    m = x.mean(axis=axes, keepdims=True)
    v = x.var(axis=axes, keepdims=True)
    y = (x - m) / np.sqrt(v + eps) * w + b
    return y, momentum * rm + (1 - momentum) * m, momentum * rv + (1 - momentum) * v * n / (n - 1)


def np_lrn(x, k_size=5, k=2.0, alpha=1e-4, beta=0.75):
    half = k_size // 2
    c = x.shape[1]
    y = np.empty_like(x)
    for ch in range(c):
        s = (x[:, max(ch - half, 0):min(ch + half + 1, c)] ** 2).sum(axis=1)
        y[:, ch] = x[:, ch] / (k + alpha * s) ** beta
    return y


def np_group_norm(x, g, w=None, b=None, eps=1e-5):
    n, c = x.shape[:2]
    y = np_norm(x.reshape(n, g, -1), 2, eps).reshape(x.shape)
    if w is not None:
        shape = (1, c) + (1,) * (x.ndim - 2)
        y = y * w.reshape(shape) + b.reshape(shape)
    return y


S4 = (1, 3, 1, 1)
add(
    # MegEngine's running statistics carry no gradient: the gradient check covers the normalised output only
    OpCase("functional.batch_norm",
           lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b, training=True, inplace=False),
           np_bn_train, [f32(4, 3, 2, 2), f32(*S4), positive(*S4), positive(*S4), f32(*S4)], label="train",
           grad=False),
    OpCase("functional.batch_norm",
           lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b, training=True, inplace=False)[0],
           lambda *a: np_bn_train(*a)[0], [f32(4, 3, 2, 2), f32(*S4), positive(*S4), positive(*S4), f32(*S4)],
           label="train-output"),
    OpCase("functional.batch_norm",
           lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.5, eps=1e-3,
                                                inplace=False),
           lambda x, rm, rv, w, b: np_bn_train(x, rm.reshape(1, 3), rv.reshape(1, 3), w.reshape(1, 3),
                                               b.reshape(1, 3), 0.5, 1e-3),
           [f32(5, 3), f32(1, 3), positive(1, 3), positive(3), f32(3)], label="train-2d", grad=False),
    OpCase("functional.batch_norm", lambda x: F.batch_norm(x, training=True),
           lambda x: np_norm(x, (0, 2, 3, 4)), [f32(2, 2, 2, 2, 3)], label="train-nostats-5d"),
    OpCase("functional.batch_norm", lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b),
           lambda x, rm, rv, w, b: (x - rm) / np.sqrt(rv + 1e-5) * w + b,
           [f32(2, 3, 2, 2), f32(*S4), positive(*S4), positive(*S4), f32(*S4)], label="inference"),
    OpCase("functional.sync_batch_norm",
           lambda x, rm, rv: F.sync_batch_norm(x, rm + 0, rv + 0, training=True, eps_mode="max", eps=0.5),
           lambda x, rm, rv: (x - x.mean((0, 2, 3), keepdims=True)) / np.sqrt(
               np.maximum(x.var((0, 2, 3), keepdims=True), 0.5)),
           [f32(3, 3, 2, 2, lo=-1, hi=1), f32(*S4), positive(*S4)], label="train-max-eps"),
    OpCase("functional.sync_batch_norm", lambda x, rm, rv, w, b: F.sync_batch_norm(x, rm, rv, w, b),
           lambda x, rm, rv, w, b: (x - rm) / np.sqrt(rv + 1e-5) * w + b,
           [f32(2, 3, 2, 2), f32(*S4), positive(*S4), positive(*S4), f32(*S4)], label="inference"),
    OpCase("functional.layer_norm", lambda x, w, b: F.layer_norm(x, (3, 4), True, w, b),
           lambda x, w, b: np_norm(x, (1, 2)) * w + b, [f32(2, 3, 4), positive(3, 4), f32(3, 4)], label="affine"),
    OpCase("functional.layer_norm", lambda x: F.layer_norm(x, 5, False, eps=1e-3),
           lambda x: np_norm(x, -1, 1e-3), [f32(3, 5)], label="plain"),
    OpCase("functional.group_norm", lambda x, w, b: F.group_norm(x, 2, True, w, b),
           lambda x, w, b: np_group_norm(x, 2, w, b), [f32(2, 4, 3, 2), positive(4), f32(4)], label="affine"),
    OpCase("functional.group_norm", lambda x: F.group_norm(x, 3, False), lambda x: np_group_norm(x, 3),
           [f32(2, 6, 4)], label="3d"),
    OpCase("functional.instance_norm", lambda x, w, b: F.instance_norm(x, True, w, b),
           lambda x, w, b: np_group_norm(x, 3, w, b), [f32(2, 3, 2, 3), positive(3), f32(3)], label="affine"),
    OpCase("functional.instance_norm", lambda x: F.instance_norm(x, False), lambda x: np_norm(x, (2, 3)),
           [f32(1, 2, 3, 3)], label="plain"),
    OpCase("functional.general_norm", lambda x, w, b: F.general_norm(x, (0, 2), True, w, b),
           lambda x, w, b: np_norm(x, (0, 2)) * w[:, None, :] + b[:, None, :],
           [f32(2, 3, 4), positive(2, 4), f32(2, 4)], label="axes02"),
    OpCase("functional.general_norm", lambda x: F.general_norm(x, -1, False), lambda x: np_norm(x, -1),
           [f32(3, 5)], label="last"),
    OpCase("functional.local_response_norm", lambda x: F.local_response_norm(x, 3, k=1.0, alpha=0.5, beta=0.75),
           lambda x: np_lrn(x, 3, 1.0, 0.5, 0.75), [f32(2, 5, 2, 2)], label="k3"),
    OpCase("functional.local_response_norm", F.local_response_norm, np_lrn, [f32(1, 7, 3, 2, lo=-20, hi=20)],
           label="defaults"),
)


# ---- softmax, activations, embedding, one-hot, dropout, pad, pixel shuffle, sliding windows -----------------
def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_pixel_shuffle(x, r):
    *lead, c, h, w = x.shape
    y = np.zeros(tuple(lead) + (c // (r * r), h * r, w * r), x.dtype)
    for ch, i, j in np.ndindex(c, h, w):
        oc, rem = divmod(ch, r * r)
        a, b = divmod(rem, r)
        y[..., oc, i * r + a, j * r + b] = x[..., ch, i, j]
    return y


def np_sliding(x, k, p=0, s=1, d=1):
    k, p, s, d = _t(k, 2), _t(p, 2), _t(s, 2), _t(d, 2)
    xp = np.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])])
    oh = (xp.shape[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (xp.shape[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    y = np.zeros(x.shape[:2] + (oh, ow) + k, x.dtype)
    for i, j, a, b in np.ndindex(oh, ow, *k):
        y[:, :, i, j, a, b] = xp[:, :, i * s[0] + a * d[0], j * s[1] + b * d[1]]
    return y


def np_sliding_t(y, size, k, p=0, s=1, d=1):
    k, p, s, d = _t(k, 2), _t(p, 2), _t(s, 2), _t(d, 2)
    h, w = _t(size, 2)
    xp = np.zeros(y.shape[:2] + (h + 2 * p[0], w + 2 * p[1]), y.dtype)
    for i, j, a, b in np.ndindex(*y.shape[2:]):
        xp[:, :, i * s[0] + a * d[0], j * s[1] + b * d[1]] += y[:, :, i, j, a, b]
    return xp[:, :, p[0]:p[0] + h, p[1]:p[1] + w]


add(
    OpCase("functional.softmax", F.softmax, lambda x: np_softmax(x, 1), [f32(2, 3, 4, 5)], label="default-4d"),
    OpCase("functional.softmax", F.softmax, lambda x: np_softmax(x, 0), [f32(3, 4, 2)], label="default-3d"),
    OpCase("functional.softmax", F.softmax, lambda x: np_softmax(x, 0), [f32(5)], label="default-1d"),
    OpCase("functional.softmax", lambda x: F.softmax(x, -1), lambda x: np_softmax(x, -1), [f32(2, 6, lo=-50, hi=50)],
           label="axis-1-large"),
    OpCase("functional.softmax", lambda x: F.softmax(x, (1, 2)), lambda x: np_softmax(x, (1, 2)), [f32(2, 3, 2)],
           label="tuple-axis"),
    OpCase("functional.logsoftmax", lambda x: F.logsoftmax(x, 1), lambda x: np.log(np_softmax(x, 1)),
           [f32(3, 4)], label="axis1"),
    OpCase("functional.logsoftmax", lambda x: F.logsoftmax(x, -1),
           lambda x: x - x.max(-1, keepdims=True) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
           [f32(2, 2, 5, lo=-80, hi=80)], rtol=1e-4, label="large"),
    OpCase("functional.leaky_relu", lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x),
           [f32(3, 4)], label="0.2"),
    OpCase("functional.leaky_relu", F.leaky_relu, lambda x: np.where(x > 0, x, 0.01 * x), [f32(5)], label="default"),
    OpCase("functional.prelu", F.prelu, lambda x, w: np.where(x > 0, x, w.reshape(1, -1, 1) * x),
           [f32(2, 3, 4), positive(3)], label="per-channel"),
    OpCase("functional.prelu", F.prelu, lambda x, w: np.where(x > 0, x, w * x), [f32(2, 3), positive(1)],
           label="shared"),
    OpCase("functional.embedding", F.embedding, lambda i, w: w[i], [i32(2, 3, lo=0, hi=5), f32(5, 4)], label="2d"),
    OpCase("functional.embedding", F.embedding, lambda i, w: w[i], [i32(4, lo=0, hi=3), f32(3, 2)], label="1d"),
    OpCase("functional.one_hot", lambda x: F.one_hot(x, 4), lambda x: np.eye(4, dtype=np.int32)[x],
           [i32(2, 3, lo=0, hi=4)], label="2d"),
    OpCase("functional.one_hot", lambda x: F.one_hot(x, 3), lambda x: np.eye(3, dtype=np.int32)[x],
           [i32(5, lo=0, hi=3)], label="1d"),
    OpCase("functional.dropout", lambda x: F.dropout(x, 0.5, training=False), lambda x: x, [f32(3, 4)],
           label="eval"),
    OpCase("functional.dropout", lambda x: F.dropout(x, 0.0), lambda x: x, [f32(3)], label="p0"),
    OpCase("functional.pad", lambda x: F.nn.pad(x, ((1, 2), (0, 1)), constant_value=3.0),
           lambda x: np.pad(x, ((1, 2), (0, 1)), constant_values=3.0), [f32(2, 3)], label="constant"),
    OpCase("functional.pad", lambda x: F.nn.pad(x, ((0, 0), (2, 1)), mode="reflect"),
           lambda x: np.pad(x, ((0, 0), (2, 1)), mode="reflect"), [f32(2, 4)], label="reflect"),
    OpCase("functional.pad", lambda x: F.nn.pad(x, ((1, 1), (0, 2)), mode="replicate"),
           lambda x: np.pad(x, ((1, 1), (0, 2)), mode="edge"), [f32(2, 3)], label="replicate"),
    OpCase("functional.pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), lambda x: np_pixel_shuffle(x, 2),
           [f32(2, 8, 2, 3)], label="r2"),
    OpCase("functional.pixel_shuffle", lambda x: F.pixel_shuffle(x, 3), lambda x: np_pixel_shuffle(x, 3),
           [f32(2, 1, 9, 1, 2)], label="r3-5d"),
    OpCase("functional.sliding_window", lambda x: F.sliding_window(x, 2), lambda x: np_sliding(x, 2),
           [f32(1, 2, 3, 4)], label="k2"),
    OpCase("functional.sliding_window", lambda x: F.sliding_window(x, (2, 3), 1, (2, 1), (1, 2)),
           lambda x: np_sliding(x, (2, 3), 1, (2, 1), (1, 2)), [f32(2, 1, 4, 5)], label="all-args"),
    # (fewer positions than taps -- CREStereo's correlation: a slice per position, not per tap)
    OpCase("functional.sliding_window", lambda x: F.sliding_window(x, (4, 5), 1, (2, 1), (1, 1)),
           lambda x: np_sliding(x, (4, 5), 1, (2, 1), (1, 1)), [f32(1, 2, 7, 6)], label="large window"),
    OpCase("functional.sliding_window_transpose", lambda y: F.sliding_window_transpose(y, (5, 6), (4, 5), 0, (1, 1)),
           lambda y: np_sliding_t(y, (5, 6), (4, 5), 0, (1, 1)), [f32(1, 2, 2, 2, 4, 5)], label="large window"),
    OpCase("functional.sliding_window_transpose", lambda y: F.sliding_window_transpose(y, (3, 4), 2),
           lambda y: np_sliding_t(y, (3, 4), 2), [f32(1, 2, 2, 3, 2, 2)], label="k2"),
    OpCase("functional.sliding_window_transpose",
           lambda y: F.sliding_window_transpose(y, (4, 5), (2, 3), 1, (2, 1), (1, 2)),
           lambda y: np_sliding_t(y, (4, 5), (2, 3), 1, (2, 1), (1, 2)), [f32(1, 1, 3, 3, 2, 3)], label="all-args"),
)


# ---- multi-head attention ---------------------------------------------------------------------------------------
def np_mha(q, k, v, wb, e, h, qbias=False, kbias=False, vbias=False, obias=False, attn_mask=None, kpm=None,
           is_causal=False, need_weights=False, average=False, reslink=False):
    eq, ek, ev = q.shape[-1], k.shape[-1], v.shape[-1]
    shapes = [(eq, e), (ek, e), (ev, e), (e, e)]
    pos, ws = 0, []
    for shp in shapes:
        ws.append(wb[pos:pos + shp[0] * shp[1]].reshape(shp))
        pos += shp[0] * shp[1]
    bs = []
    for flag in (qbias, kbias, vbias, obias):
        bs.append(wb[pos:pos + e] if flag else np.zeros(e))
        pos += e if flag else 0
    Q, K, V = q @ ws[0] + bs[0], k @ ws[1] + bs[1], v @ ws[2] + bs[2]
    n, lq, s = q.shape[0], q.shape[1], k.shape[1]
    d = e // h
    out = np.zeros((n, lq, e))
    weights = np.zeros((n, h, lq, s))
    for b in range(n):
        for hd in range(h):
            sl = slice(hd * d, (hd + 1) * d)
            sc = Q[b, :, sl] @ K[b, :, sl].T / np.sqrt(d)
            if is_causal:
                sc = np.where(np.triu(np.ones((lq, s), bool), 1), -1e30, sc)
            if attn_mask is not None:
                m = attn_mask if attn_mask.ndim == 2 else attn_mask[b * h + hd]
                sc = np.where(m, -1e30, sc) if m.dtype == bool else sc + m
            if kpm is not None:
                sc = np.where(kpm[b][None], -1e30, sc)
            wgt = np_softmax(sc, -1)
            weights[b, hd] = wgt
            out[b, :, sl] = wgt @ V[b, :, sl]
    out = out @ ws[3] + bs[3]
    if reslink:
        out = out + q
    if not need_weights:
        return out
    return out, (weights.mean(1) if average else weights.reshape(n * h, lq, s))


def mha(**kw):
    def fn(q, k, v, wb, *masks):
        kws = dict(kw)
        if kws.pop("attn_mask", None):
            kws["attn_mask"] = masks[0]
        out, wts = F.nn.multi_head_attention(q, k, v, 4, 2, 0.0, 0.0, wb, **kws)
        return (out, wts) if kws.get("need_weights") else out
    return fn


def _wb(eq=4, ek=4, ev=4, nb=0):
    return W(eq * 4 + ek * 4 + ev * 4 + 16 + 4 * nb)


bool_mask = lambda *s: lambda rng: rng.random(s) < 0.3  # noqa: E731
add(
    OpCase("functional.multi_head_attention", mha(), lambda q, k, v, wb: np_mha(q, k, v, wb, 4, 2),
           [f32(1, 3, 4), f32(1, 2, 4), f32(1, 2, 4), _wb()], label="self-proj"),
    OpCase("functional.multi_head_attention", mha(qbias=True, kbias=True, vbias=True, obias=True, need_weights=True,
                                                   is_causal=True),
           lambda q, k, v, wb: np_mha(q, k, v, wb, 4, 2, True, True, True, True, is_causal=True, need_weights=True),
           [f32(1, 4, 4), f32(1, 4, 3), f32(1, 4, 5), _wb(4, 3, 5, 4)], label="bias+causal+weights"),
    OpCase("functional.multi_head_attention", mha(attn_mask=True, need_weights=True, average_attn_weights=True,
                                                   reslink=True),
           lambda q, k, v, wb, m: np_mha(q, k, v, wb, 4, 2, attn_mask=m, need_weights=True, average=True,
                                         reslink=True),
           [f32(2, 3, 4), f32(2, 2, 4), f32(2, 2, 4), _wb(), f32(3, 2)], grad=False, label="float-mask+avg+reslink"),
    OpCase("functional.multi_head_attention", mha(attn_mask=True),
           lambda q, k, v, wb, m: np_mha(q, k, v, wb, 4, 2, attn_mask=m), [f32(2, 3, 4), f32(2, 4, 4),
                                                                            f32(2, 4, 4), _wb(), bool_mask(4, 3, 4)],
           grad=False, label="bool-3d-mask"),
)


# ---- losses ---------------------------------------------------------------------------------------------------
def np_ce(x, y, axis=1, with_logits=True, ls=0.0, reduction="mean"):
    logp = np.log(np_softmax(x, axis)) if with_logits else np.log(x)
    logp = np.moveaxis(logp, axis, -1)
    nll = -np.take_along_axis(logp, y[..., None], -1)[..., 0]
    if ls:
        nll = (1 - ls) * nll - ls * logp.mean(-1)
    return {"mean": nll.mean(), "sum": nll.sum(), "none": nll}[reduction]


def np_ctc(pred, plen, label, llen, blank=0, reduction="mean"):
    # Brute force: sum the probabilities of all paths that collapse to the label.
    t, n, c = pred.shape
    losses = []
    for b in range(n):
        lab = list(label[b][:llen[b]]) if label.ndim == 2 else list(label[sum(llen[:b]):sum(llen[:b + 1])])
        total = 0.0
        for path in itertools.product(range(c), repeat=int(plen[b])):
            col = [k for i, k in enumerate(path) if k != blank and (i == 0 or k != path[i - 1])]
            if col == lab:
                total += np.prod([pred[i, b, k] for i, k in enumerate(path)])
        losses.append(-np.log(total))
    losses = np.asarray(losses, pred.dtype)
    return {"mean": (losses / np.maximum(llen, 1)).mean(), "sum": losses.sum(), "none": losses}[reduction]


def probs(*shape):
    def gen(rng):
        p = rng.uniform(0.1, 1.0, shape)
        return (p / p.sum(-1, keepdims=True)).astype(np.float32)
    return gen


add(
    OpCase("functional.nn.cross_entropy", F.nn.cross_entropy, np_ce, [f32(4, 5), i32(4, lo=0, hi=5)], label="basic"),
    OpCase("functional.nn.cross_entropy", lambda x, y: F.nn.cross_entropy(x, y, axis=-1, reduction="none"),
           lambda x, y: np_ce(x, y, -1, reduction="none"), [f32(2, 3, 4), i32(2, 3, lo=0, hi=4)], label="axis-1"),
    OpCase("functional.nn.cross_entropy", lambda x, y: F.nn.cross_entropy(x, y, label_smooth=0.1, reduction="sum"),
           lambda x, y: np_ce(x, y, ls=0.1, reduction="sum"), [f32(3, 4, 2), i32(3, 2, lo=0, hi=4)], label="smooth"),
    OpCase("functional.nn.cross_entropy", lambda x, y: F.nn.cross_entropy(x, y, with_logits=False),
           lambda x, y: np_ce(x, y, with_logits=False), [probs(3, 4), i32(3, lo=0, hi=4)], label="probs"),
    OpCase("functional.nn.binary_cross_entropy", F.nn.binary_cross_entropy,
           lambda x, y: np.mean(np.logaddexp(0, -x) * y + np.logaddexp(0, x) * (1 - y)),
           [f32(3, 4, lo=-30, hi=30), f32(3, 4, lo=0, hi=1)], label="logits"),
    OpCase("functional.nn.binary_cross_entropy",
           lambda x, y: F.nn.binary_cross_entropy(x, y, with_logits=False, reduction="none"),
           lambda x, y: -(y * np.log(x) + (1 - y) * np.log(1 - x)), [f32(5, lo=0.1, hi=0.9), f32(5, lo=0, hi=1)],
           label="probs"),
    OpCase("functional.nn.hinge_loss", F.nn.hinge_loss, lambda x, y: np.maximum(1 - x * y, 0).sum(1).mean(),
           [f32(3, 4), lambda rng: rng.choice([-1.0, 1.0], (3, 4)).astype(np.float32)], label="L1"),
    OpCase("functional.nn.hinge_loss", lambda x, y: F.nn.hinge_loss(x, y, "l2", "none"),
           lambda x, y: (np.maximum(1 - x * y, 0) ** 2).sum(1),
           [f32(2, 5), lambda rng: rng.choice([-1.0, 1.0], (2, 5)).astype(np.float32)], label="L2"),
    OpCase("functional.nn.l1_loss", F.nn.l1_loss, lambda x, y: np.abs(x - y).mean(), [f32(3, 4), f32(3, 4)],
           label="mean"),
    OpCase("functional.nn.l1_loss", lambda x, y: F.nn.l1_loss(x, y, "sum"), lambda x, y: np.abs(x - y).sum(),
           [f32(3, 4), f32(4)], label="broadcast-sum"),
    OpCase("functional.nn.square_loss", F.nn.square_loss, lambda x, y: ((x - y) ** 2).mean(), [f32(2, 3), f32(2, 3)],
           label="mean"),
    OpCase("functional.nn.square_loss", lambda x, y: F.nn.square_loss(x, y, "none"), lambda x, y: (x - y) ** 2,
           [f32(5), f32(5)], label="none"),
    OpCase("functional.nn.ctc_loss", F.nn.ctc_loss, np_ctc,
           [probs(4, 2, 3), const([4, 3], np.int32), const([[1, 2], [2, 0]], np.int32), const([2, 1], np.int32)],
           rtol=1e-4, label="padded"),
    OpCase("functional.nn.ctc_loss", lambda p, pl, l, ll: F.nn.ctc_loss(p, pl, l, ll, blank=2, reduction="none"),
           lambda p, pl, l, ll: np_ctc(p, pl, l, ll, 2, "none"),
           [probs(5, 3, 3), const([5, 4, 3], np.int32), const([1, 1, 0, 1, 0], np.int32), const([2, 2, 1], np.int32)],
           rtol=1e-4, label="concat-repeats"),
    OpCase("functional.nn.ctc_loss", lambda p, pl, l, ll: F.nn.ctc_loss(p, pl, l, ll, reduction="sum"),
           lambda p, pl, l, ll: np_ctc(p, pl, l, ll, 0, "sum"),
           [probs(3, 2, 2), const([3, 3], np.int32), const([[1, 1], [1, 0]], np.int32), const([2, 0], np.int32)],
           rtol=1e-4, grad=False, label="empty-label"),
)


# ---- vision references ------------------------------------------------------------------------------------------
def _border_idx(i, n, mode):
    if 0 <= i < n:
        return i
    if mode == "constant":
        return None
    if mode == "replicate":
        return min(max(i, 0), n - 1)
    if mode == "wrap":
        return i % n
    if mode == "reflect":
        while not 0 <= i < n:
            i = -i - 1 if i < 0 else 2 * n - 1 - i
        return i
    if n == 1:
        return 0
    while not 0 <= i < n:  # reflect_101
        i = -i if i < 0 else 2 * n - 2 - i
    return i


def _sample_px(img, y, x, mode, val, interp):
    """img (C, H, W) at float (y, x) by the border rule, one pixel at a time."""
    h, w = img.shape[1:]

    def tap(yy, xx):
        a, b = _border_idx(yy, h, mode), _border_idx(xx, w, mode)
        return np.full(img.shape[0], val) if a is None or b is None else img[:, a, b]

    if interp == "nearest":
        return tap(int(np.floor(y + 0.5)), int(np.floor(x + 0.5)))
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    fy, fx = y - y0, x - x0
    return ((1 - fy) * (1 - fx) * tap(y0, x0) + (1 - fy) * fx * tap(y0, x0 + 1) + fy * (1 - fx) * tap(y0 + 1, x0)
            + fy * fx * tap(y0 + 1, x0 + 1))


def np_warp_perspective(x, m, out, idx=None, border="replicate", val=0.0, fmt="NCHW", interp="linear"):
    if fmt == "NHWC":
        x = x.transpose(0, 3, 1, 2)
    oh, ow = out
    y = np.zeros((m.shape[0], x.shape[1], oh, ow))
    for b, i, j in np.ndindex(m.shape[0], oh, ow):
        mm = m[b].astype(np.float64)
        X, Y, Z = mm @ np.array([j, i, 1.0])
        y[b, :, i, j] = _sample_px(x[b if idx is None else idx[b]], Y / Z, X / Z, border, val, interp)
    y = y.astype(x.dtype)
    return y.transpose(0, 2, 3, 1) if fmt == "NHWC" else y


def np_warp_affine(x, m, out, border="replicate", val=0.0, fmt="NHWC", interp="linear"):
    m3 = np.concatenate([m, np.tile(np.array([[[0.0, 0.0, 1.0]]], m.dtype), (m.shape[0], 1, 1))], 1)
    return np_warp_perspective(x, m3, out, None, border, val, fmt, interp)


def np_warp_affine_cv(x, m, out, border="replicate", val=0.0, interp="linear"):
    """megdnn's WarpAffine of an NHWC image of 1-3 channels (float32, linear or nearest): OpenCV's warpAffine, the
    source coordinates in fixed point (each term rounded to 1/1024, the sum to 1/32 of a pixel, whole pixels for
    nearest), in double as megdnn computes them."""
    x = x.transpose(0, 3, 1, 2)
    oh, ow = out
    y = np.zeros((m.shape[0], x.shape[1], oh, ow))
    nearest = interp == "nearest"
    shift, delta = (10, 512) if nearest else (5, 16)
    for b, i, j in np.ndindex(m.shape[0], oh, ow):
        mm = m[b].astype(np.float64)
        cx = int(np.rint((mm[0, 1] * i + mm[0, 2]) * 1024)) + delta + int(np.rint(mm[0, 0] * j * 1024))
        cy = int(np.rint((mm[1, 1] * i + mm[1, 2]) * 1024)) + delta + int(np.rint(mm[1, 0] * j * 1024))
        unit = 1 if nearest else 32
        y[b, :, i, j] = _sample_px(x[b], (cy >> shift) / unit, (cx >> shift) / unit, border, val, interp)
    return y.astype(x.dtype).transpose(0, 2, 3, 1)


def np_warp_perspective_cv(x, m, out, border="replicate", val=0.0, interp="linear"):
    """megdnn's WarpPerspective of an NHWC image of 1 or 3 channels (float32, no mat_idx): OpenCV's warpPerspective,
    each source coordinate rounded to 1/32 of a pixel (whole pixels for nearest)."""
    x = x.transpose(0, 3, 1, 2)
    oh, ow = out
    y = np.zeros((m.shape[0], x.shape[1], oh, ow))
    unit = 1.0 if interp == "nearest" else 32.0
    for b, i, j in np.ndindex(m.shape[0], oh, ow):
        X, Y, Z = m[b].astype(np.float64) @ np.array([j, i, 1.0])
        qx, qy = (0.0, 0.0) if Z == 0 else (np.rint(X / Z * unit) / unit, np.rint(Y / Z * unit) / unit)
        y[b, :, i, j] = _sample_px(x[b], qy, qx, border, val, interp)
    return y.astype(x.dtype).transpose(0, 2, 3, 1)


def np_remap(x, mxy, border="replicate", val=0.0, interp="linear"):
    n, oh, ow, _ = mxy.shape
    y = np.zeros((n, x.shape[1], oh, ow))
    for b, i, j in np.ndindex(n, oh, ow):
        y[b, :, i, j] = _sample_px(x[b], mxy[b, i, j, 1], mxy[b, i, j, 0], border, val, interp)
    return y.astype(x.dtype)


def _cubic_w(t):
    a = -0.75
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return 0.0


def np_interpolate(x, size, mode="bilinear", align_corners=False):
    linear = mode == "linear"
    if linear:
        x = x[..., None]
    oh, ow = (size, 1) if linear else size
    n, c, h, w = x.shape
    y = np.zeros((n, c, oh, ow))

    def src(dst, n_in, n_out):
        if align_corners:
            return dst * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        return (dst + 0.5) * n_in / n_out - 0.5

    for i, j in np.ndindex(oh, ow):
        if mode == "nearest":
            y[:, :, i, j] = x[:, :, min(int(np.floor(i * h / oh)), h - 1), min(int(np.floor(j * w / ow)), w - 1)]
        elif mode == "bicubic":
            sy, sx = src(i, h, oh), src(j, w, ow)
            fy, fx = int(np.floor(sy)), int(np.floor(sx))
            for a in range(fy - 1, fy + 3):
                for b in range(fx - 1, fx + 3):
                    y[:, :, i, j] += _cubic_w(sy - a) * _cubic_w(sx - b) * x[:, :, min(max(a, 0), h - 1),
                                                                             min(max(b, 0), w - 1)]
        else:
            sy, sx = max(src(i, h, oh), 0), max(src(j, w, ow), 0)
            y[:, :, i, j] = np.moveaxis(np.array([_sample_px(x[b], sy, sx, "replicate", 0, "linear")
                                                  for b in range(n)]), 0, 0)
    y = y.astype(x.dtype)
    return y[..., 0] if linear else y


def np_roi_align(x, rois, out, mode="average", scale=1.0, samples=2, aligned=True):
    ph, pw = _t(out, 2)
    sh, sw = _t(samples, 2)
    h, w = x.shape[2:]
    y = np.zeros((rois.shape[0], x.shape[1], ph, pw))
    off = 0.5 if aligned else 0.0
    for k, r in enumerate(rois.astype(np.float64)):
        b = int(r[0])
        x0, y0, x1, y1 = r[1] * scale - off, r[2] * scale - off, r[3] * scale - off, r[4] * scale - off
        rw, rh = max(x1 - x0, 0.0), max(y1 - y0, 0.0)  # megdnn: inverted sides are 0, no minimum of 1
        bh, bw = rh / ph, rw / pw
        for i, j in np.ndindex(ph, pw):
            vals = []
            for a, c in np.ndindex(sh, sw):
                yy = y0 + i * bh + (a + 0.5) * bh / sh
                xx = x0 + j * bw + (c + 0.5) * bw / sw
                # megdnn interpolates with zeros outside the image (checked against MegEngine 1.13)
                vals.append(_sample_px(x[b], yy, xx, "constant", 0, "linear"))
            y[k, :, i, j] = np.max(vals, 0) if mode == "max" else np.mean(vals, 0)
    return y.astype(x.dtype)


def np_roi_pooling(x, rois, out, mode="max", scale=1.0):
    ph, pw = _t(out, 2)
    h, w = x.shape[2:]
    y = np.zeros((rois.shape[0], x.shape[1], ph, pw))
    rnd = lambda v: int(np.sign(v) * np.floor(abs(v) + 0.5))  # noqa: E731
    for k, r in enumerate(rois):
        b = int(r[0])
        sx, sy, ex, ey = (rnd(float(np.float32(r[i]) * np.float32(scale))) for i in (1, 2, 3, 4))
        bh, bw = max(ey - sy + 1, 1) / ph, max(ex - sx + 1, 1) / pw
        for i, j in np.ndindex(ph, pw):
            hs = min(max(int(np.floor(i * bh)) + sy, 0), h)
            he = min(max(int(np.ceil((i + 1) * bh)) + sy, 0), h)
            ws = min(max(int(np.floor(j * bw)) + sx, 0), w)
            we = min(max(int(np.ceil((j + 1) * bw)) + sx, 0), w)
            if he <= hs or we <= ws:
                continue
            win = x[b, :, hs:he, ws:we]
            y[k, :, i, j] = win.max((1, 2)) if mode == "max" else win.mean((1, 2))
    return y.astype(x.dtype)


def np_nms(boxes, scores, thresh, max_output=None):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    keep = []
    for i in order:
        ok = True
        for j in keep:
            bi, bj = boxes[i], boxes[j]
            iw = max(min(bi[2], bj[2]) - max(bi[0], bj[0]), 0)
            ih = max(min(bi[3], bj[3]) - max(bi[1], bj[1]), 0)
            inter = iw * ih
            union = (bi[2] - bi[0]) * (bi[3] - bi[1]) + (bj[2] - bj[0]) * (bj[3] - bj[1]) - inter
            if inter / union > thresh:
                ok = False
                break
        if ok:
            keep.append(i)
    return np.asarray(keep[:max_output], np.int32)


def np_correlation(d1, d2, k=1, md=1, s1=1, s2=1, pad=0, mul=True):
    # megdnn's naive kernel: out(c, i, j) = mean over the k x k patch and channels at the centre
    # (i*s1 + md + kr - pad, j*s1 + md + kr - pad) in unpadded coordinates; outside pixels are 0.
    n, c, h, w = d1.shape
    kr = (k - 1) // 2
    border = md + kr
    oh = int(np.ceil((h + 2 * pad - 2 * border) / s1))
    ow = int(np.ceil((w + 2 * pad - 2 * border) / s1))
    r = md // s2
    gw = 2 * r + 1
    y = np.zeros((n, gw * gw, oh, ow))

    def px(d, b, yy, xx):
        return d[b, :, yy, xx] if 0 <= yy < h and 0 <= xx < w else np.zeros(c)

    for b, tc, i, j in np.ndindex(n, gw * gw, oh, ow):
        x1, y1 = j * s1 + md + kr - pad, i * s1 + md + kr - pad
        dx, dy = (tc % gw - r) * s2, (tc // gw - r) * s2
        acc = 0.0
        for a, bb in np.ndindex(k, k):
            p1 = px(d1, b, y1 + a - kr, x1 + bb - kr)
            p2 = px(d2, b, y1 + dy + a - kr, x1 + dx + bb - kr)
            acc += (p1 * p2).sum() if mul else np.abs(p1 - p2).sum()
        y[b, tc, i, j] = acc / (k * k * c)
    return y.astype(d1.dtype)


def np_cvt(x, mode):
    if mode in ("RGB2GRAY", "BGR2GRAY"):
        cf = np.array([0.299, 0.587, 0.114] if mode == "RGB2GRAY" else [0.114, 0.587, 0.299])
        y = (x.astype(np.float64) * cf).sum(-1, keepdims=True)
    elif mode in ("RGB2BGR", "BGR2RGB"):
        y = x[..., ::-1]
    else:
        y = np.repeat(x, 3, -1)
    if x.dtype.kind in "iu":
        return np.floor(y + 0.5).astype(x.dtype)
    return y.astype(x.dtype)


def persp(n, jitter=0.05):
    def gen(rng):
        m = np.tile(np.array([[0.8, 0.1, 0.7], [-0.1, 0.9, 0.4], [0.0, 0.0, 1.0]]), (n, 1, 1))
        m[:, 2, :2] = rng.uniform(-0.02, 0.02, (n, 2))
        return (m + rng.uniform(-jitter, jitter, m.shape) * (np.arange(3) < 2)[:, None]).astype(np.float32)
    return gen


def affine(n, span=1.0):
    def gen(rng):
        m = np.tile(np.array([[1.1, 0.2, -0.6], [-0.15, 0.9, 0.3]]), (n, 1, 1)) * span
        return (m + rng.uniform(-0.05, 0.05, m.shape)).astype(np.float32)
    return gen


def rois_gen(k, n, h, w):
    def gen(rng):
        r = np.zeros((k, 5), np.float32)
        r[:, 0] = rng.integers(0, n, k)
        x0, y0 = rng.uniform(-0.7, w * 0.6, k), rng.uniform(-0.7, h * 0.6, k)
        r[:, 1], r[:, 2] = x0, y0
        r[:, 3], r[:, 4] = x0 + rng.uniform(0.6, w * 0.8, k), y0 + rng.uniform(0.6, h * 0.8, k)
        return r
    return gen


def mapxy(n, oh, ow, h, w):
    return lambda rng: np.stack([rng.uniform(-1.5, w + 0.5, (n, oh, ow)), rng.uniform(-1.5, h + 0.5, (n, oh, ow))],
                                -1).astype(np.float32)


FIXED_ROIS = np.array([[0, 0.3, 0.2, 3.1, 2.6], [1, 1.2, -0.4, 4.6, 3.3], [0, 2.0, 1.0, 2.2, 1.1]], np.float32)
BOXES = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 5, 10], [21, 19, 31, 29],
                  [2, 2, 8, 8]], np.float32)

add(
    OpCase("functional.vision.interpolate", lambda x: F.vision.interpolate(x, (5, 7)),
           lambda x: np_interpolate(x, (5, 7)), [f32(2, 2, 3, 4)], label="bilinear-up"),
    OpCase("functional.vision.interpolate", lambda x: F.vision.interpolate(x, scale_factor=0.5),
           lambda x: np_interpolate(x, (3, 2)), [f32(1, 2, 6, 5)], label="bilinear-down-scale"),
    OpCase("functional.vision.interpolate", lambda x: F.vision.interpolate(x, (4, 3), align_corners=True),
           lambda x: np_interpolate(x, (4, 3), align_corners=True), [f32(1, 1, 3, 5)], label="align-corners"),
    OpCase("functional.vision.interpolate", lambda x: F.vision.interpolate(x, (5, 3), mode="nearest"),
           lambda x: np_interpolate(x, (5, 3), "nearest"), [f32(1, 2, 3, 4)], label="nearest"),
    OpCase("functional.vision.interpolate", lambda x: F.vision.interpolate(x, scale_factor=(2.0, 1.5), mode="bicubic"),
           lambda x: np_interpolate(x, (6, 6), "bicubic"), [f32(1, 1, 3, 4)], label="bicubic"),
    OpCase("functional.vision.interpolate", lambda x: F.vision.interpolate(x, 7, mode="linear"),
           lambda x: np_interpolate(x, 7, "linear"), [f32(2, 2, 4)], label="linear"),
    OpCase("functional.vision.interpolate", lambda x: F.vision.interpolate(x, 5, mode="linear", align_corners=True),
           lambda x: np_interpolate(x, 5, "linear", True), [f32(1, 2, 3)], label="linear-align"),
    OpCase("functional.warp_perspective", lambda x, m: F.warp_perspective(x, m, (3, 4)),
           lambda x, m: np_warp_perspective(x, m, (3, 4)), [f32(2, 2, 4, 5), persp(2)], grad_rtol=1e-3,
           label="replicate"),
    OpCase("functional.warp_perspective", lambda x, m: F.warp_perspective(x, m, (4, 3), border_mode="constant",
                                                                          border_val=1.5),
           lambda x, m: np_warp_perspective(x, m, (4, 3), border="constant", val=1.5),
           [f32(1, 1, 3, 3), persp(1, 0.3)], grad_rtol=1e-3, label="constant"),
    OpCase("functional.warp_perspective", lambda x, m: F.warp_perspective(x, m, (3, 3), mat_idx=[1, 0, 1],
                                                                          border_mode="reflect", format="NHWC"),
           lambda x, m: np_warp_perspective(x, m, (3, 3), [1, 0, 1], "reflect", fmt="NHWC"),
           [f32(2, 3, 3, 2), persp(3, 0.3)], grad_rtol=1e-3, label="mat_idx+reflect+nhwc"),
    # (1 or 3 channels, NHWC, no mat_idx: megdnn's OpenCV kernel, coordinates rounded; no numerical gradient)
    OpCase("functional.warp_perspective", lambda x, m: F.warp_perspective(x, m, (4, 3), border_mode="reflect",
                                                                          format="NHWC"),
           lambda x, m: np_warp_perspective_cv(x, m, (4, 3), "reflect"), [f32(2, 3, 4, 3), persp(2, 0.3)],
           grad=False, label="nhwc-opencv"),
    OpCase("functional.warp_perspective", lambda x, m: F.warp_perspective(x, m, (4, 3), format="NHWC",
                                                                          interp_mode="nearest"),
           lambda x, m: np_warp_perspective_cv(x, m, (4, 3), interp="nearest"), [f32(2, 3, 4, 1), persp(2, 0.3)],
           grad=False, label="nhwc-opencv-nearest"),
    OpCase("functional.warp_perspective", lambda x, m: F.warp_perspective(x, m, (3, 3), border_mode="wrap",
                                                                          interp_mode="nearest"),
           lambda x, m: np_warp_perspective(x, m, (3, 3), border="wrap", interp="nearest"),
           [f32(1, 2, 3, 4), const([[[1.0, 0.0, 2.6], [0.0, 1.0, -1.7], [0.0, 0.0, 1.0]]], np.float32)],
           label="wrap+nearest"),
    # (4 channels: megdnn's float kernel, exact coordinates; 1-3 channels go through its OpenCV kernel, below)
    OpCase("functional.warp_affine", lambda x, m: F.warp_affine(x, m, (3, 4)),
           lambda x, m: np_warp_affine(x, m, (3, 4)), [f32(2, 4, 4, 4), affine(2)], grad_rtol=1e-3, label="nhwc"),
    # (rounded coordinates: piecewise constant in the matrix, no numerical gradient; see test_vision_113)
    OpCase("functional.warp_affine", lambda x, m: F.warp_affine(x, m, (3, 4), border_mode="wrap"),
           lambda x, m: np_warp_affine_cv(x, m, (3, 4), border="wrap"), [f32(2, 4, 4, 3), affine(2, 3.7)],
           grad=False, label="nhwc-opencv"),
    OpCase("functional.warp_affine", lambda x, m: F.warp_affine(x, m, (3, 4), interp_mode="nearest"),
           lambda x, m: np_warp_affine_cv(x, m, (3, 4), interp="nearest"), [f32(2, 5, 4, 1), affine(2, 1.9)],
           grad=False, label="nhwc-opencv-nearest"),
    OpCase("functional.warp_affine", lambda x, m: F.warp_affine(x, m, (3, 3), border_mode="reflect_101",
                                                                format="NCHW"),
           lambda x, m: np_warp_affine(x, m, (3, 3), "reflect_101", fmt="NCHW"), [f32(1, 2, 3, 4), affine(1, 2.5)],
           grad_rtol=1e-3, label="reflect101-nchw"),
    OpCase("functional.remap", lambda x, m: F.remap(x, m), np_remap, [f32(2, 2, 3, 4), mapxy(2, 2, 3, 3, 4)],
           grad_rtol=1e-3, label="replicate"),
    OpCase("functional.remap", lambda x, m: F.remap(x, m, border_mode="constant", scalar=-1.0),
           lambda x, m: np_remap(x, m, "constant", -1.0), [f32(1, 1, 4, 4), mapxy(1, 3, 3, 4, 4)], grad_rtol=1e-3,
           label="constant"),
    OpCase("functional.remap", lambda x, m: F.remap(x, m, interp_mode="nearest"),
           lambda x, m: np_remap(x, m, interp="nearest"),
           [f32(1, 1, 3, 3), const([[[[0.2, 1.7], [2.4, -0.3]], [[5.0, 1.1], [1.0, 1.0]]]], np.float32)],
           label="nearest"),
    OpCase("functional.vision.roi_align", lambda x: F.vision.roi_align(x, T(FIXED_ROIS), (2, 3)),
           lambda x: np_roi_align(x, FIXED_ROIS, (2, 3)), [f32(2, 2, 4, 5)], label="average"),
    OpCase("functional.vision.roi_align",
           lambda x: F.vision.roi_align(x, T(FIXED_ROIS), 2, "max", 0.8, (1, 3), aligned=False),
           lambda x: np_roi_align(x, FIXED_ROIS, 2, "max", 0.8, (1, 3), False), [f32(2, 1, 5, 5)],
           label="max-unaligned"),
    OpCase("functional.vision.roi_align", lambda x, r: F.vision.roi_align(x, r, 3, sample_points=1),
           lambda x, r: np_roi_align(x, r, 3, samples=1), [f32(2, 2, 5, 6), rois_gen(4, 2, 5, 6)], grad=False,
           label="random-rois"),
    OpCase("functional.vision.roi_pooling", lambda x: F.vision.roi_pooling(x, T(FIXED_ROIS), (2, 2)),
           lambda x: np_roi_pooling(x, FIXED_ROIS, (2, 2)), [f32(2, 2, 4, 5)], label="max"),
    OpCase("functional.vision.roi_pooling", lambda x: F.vision.roi_pooling(x, T(FIXED_ROIS), (3, 2), "average", 0.7),
           lambda x: np_roi_pooling(x, FIXED_ROIS, (3, 2), "average", 0.7), [f32(2, 1, 4, 4)], label="average"),
    OpCase("functional.vision.roi_pooling", lambda x, r: F.vision.roi_pooling(x, r, 2, scale=0.5),
           lambda x, r: np_roi_pooling(x, r, 2, scale=0.5), [f32(2, 2, 6, 6), rois_gen(5, 2, 12, 12)], grad=False,
           label="random-rois"),
    OpCase("functional.vision.nms", lambda b, s: F.vision.nms(b, s, 0.5), lambda b, s: np_nms(b, s, 0.5),
           [const(BOXES), f32(6, lo=0, hi=1)], grad=False, label="basic"),
    OpCase("functional.vision.nms", lambda b, s: F.vision.nms(b, s, 0.1, max_output=2),
           lambda b, s: np_nms(b, s, 0.1, 2), [const(BOXES), f32(6, lo=0, hi=1)], grad=False, label="max_output"),
    OpCase("functional.vision.correlation", lambda a, b: F.vision.correlation(a, b, 1, 1, 1, 1, 1),
           lambda a, b: np_correlation(a, b, 1, 1, 1, 1, 1), [f32(1, 2, 3, 4), f32(1, 2, 3, 4)], label="k1d1p1"),
    OpCase("functional.vision.correlation", lambda a, b: F.vision.correlation(a, b, 3, 2, 2, 2, 2, False),
           lambda a, b: np_correlation(a, b, 3, 2, 2, 2, 2, False), [f32(1, 2, 5, 5), f32(1, 2, 5, 5)],
           label="k3-abs-strides"),
    OpCase("functional.vision.correlation", lambda a, b: F.vision.correlation(a, b, 3, 1, 1, 1, 0),
           lambda a, b: np_correlation(a, b, 3, 1, 1, 1, 0), [f32(2, 1, 5, 6), f32(2, 1, 5, 6)], label="k3-nopad"),
    OpCase("functional.vision.cvt_color", lambda x: F.vision.cvt_color(x, "RGB2GRAY"), lambda x: np_cvt(x, "RGB2GRAY"),
           [f32(2, 3, 2, 3)], label="rgb2gray"),
    OpCase("functional.vision.cvt_color", lambda x: F.vision.cvt_color(x, "bgr2gray"), lambda x: np_cvt(x, "BGR2GRAY"),
           [i32(1, 2, 2, 3, lo=0, hi=256, dtype=np.uint8)], label="bgr2gray-u8"),
    OpCase("functional.vision.cvt_color", lambda x: F.vision.cvt_color(x, "RGB2BGR"), lambda x: np_cvt(x, "RGB2BGR"),
           [f32(1, 2, 2, 3)], label="rgb2bgr"),
    OpCase("functional.vision.cvt_color", lambda x: F.vision.cvt_color(x, "GRAY2RGB"), lambda x: np_cvt(x, "GRAY2RGB"),
           [f32(1, 2, 2, 1)], label="gray2rgb"),
)



# ---- F.vision.flip / rot90 / rotate (MegEngine 1.13.4's NHWC Flip and Rotate ops, and its rotate) ---------------
def np_rotate(x, angle):
    """MegEngine's rotate of an NCHW image: its float32 matrix, warp_affine with a zero constant border."""
    a = np.float32(angle / 180.0 * np.pi)
    c, s = np.cos(a), np.sin(a)
    cx, cy = np.float32((x.shape[3] - 1) / 2), np.float32((x.shape[2] - 1) / 2)
    m = np.array([[[c, -s, (1 - c) * cx + s * cy], [s, c, -s * cx + (1 - c) * cy]]], np.float32)
    return np_warp_affine(x, m, x.shape[2:], "constant", fmt="NCHW")


add(
    OpCase("functional.vision.flip", lambda x: F.vision.flip(x), lambda x: np.flip(x, (1, 2)), [f32(2, 3, 4, 1)],
           exact=True, label="both"),
    OpCase("functional.vision.flip", lambda x: F.vision.flip(x, True, False), lambda x: np.flip(x, 1),
           [f32(1, 3, 4, 3)], exact=True, label="vertical"),
    OpCase("functional.vision.flip", lambda x: F.vision.flip(x, vertical=False), lambda x: np.flip(x, 2),
           [f32(2, 2, 5, 3)], exact=True, label="horizontal"),
    OpCase("functional.vision.rot90", lambda x: F.vision.rot90(x), lambda x: np.rot90(x, 3, (1, 2)),
           [f32(2, 3, 4, 3)], exact=True, label="clockwise"),
    OpCase("functional.vision.rot90", lambda x: F.vision.rot90(x, clockwise=False), lambda x: np.rot90(x, 1, (1, 2)),
           [f32(1, 4, 2, 1)], exact=True, label="counterclockwise"),
    OpCase("functional.vision.rotate", lambda x: F.vision.rotate(x, 30.0), lambda x: np_rotate(x, 30.0),
           [f32(1, 2, 4, 5)], rtol=1e-4, atol=1e-5, grad_rtol=1e-3, label="30deg"),
    OpCase("functional.vision.rotate", lambda x: F.vision.rotate(x, -117.5, "NCHW", "bilinear"),
           lambda x: np_rotate(x, -117.5), [f32(1, 1, 5, 3)], rtol=1e-4, atol=1e-5, grad_rtol=1e-3,
           label="-117.5deg"),
)

# ---- the table's tests ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", params(CASES))
def test_forward(case):
    check_forward(case)


@pytest.mark.parametrize("case", params([c for c in CASES if c.grad]))
def test_grad(case):
    check_grad(case)


@pytest.mark.parametrize("case", params([c for c in CASES if c.name != "functional.vision.nms"]))
def test_compiled(case):
    check_compiled(case)  # nms has a data-dependent shape eagerly: see test_nms_under_trace


@pytest.mark.parametrize("case", params(CASES))
def test_auto_jit(case):
    check_auto_jit(case)  # eager == auto-jit (compiled clusters), forward and gradients


# ---- semantics beyond the table -----------------------------------------------------------------------------------
def test_batch_norm_updates_running_stats_in_place():
    x = np.random.default_rng(0).normal(size=(4, 3, 2, 2)).astype(np.float32)
    rm, rv = F.zeros((1, 3, 1, 1)), F.ones((1, 3, 1, 1))
    ids = (id(rm), id(rv))
    y = F.batch_norm(T(x), rm, rv, training=True, momentum=0.8)
    _, want_m, want_v = np_bn_train(x, np.zeros((1, 3, 1, 1)), np.ones((1, 3, 1, 1)), 1.0, 0.0, 0.8)
    assert (id(rm), id(rv)) == ids and y.shape == x.shape
    np.testing.assert_allclose(rm.numpy(), want_m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv.numpy(), want_v, rtol=1e-5)
    # sync_batch_norm (one process) updates exactly like batch_norm
    rm2, rv2 = F.zeros((1, 3, 1, 1)), F.ones((1, 3, 1, 1))
    y2 = F.sync_batch_norm(T(x), rm2, rv2, training=True, momentum=0.8)
    np.testing.assert_allclose(y2.numpy(), y.numpy(), rtol=1e-6)
    np.testing.assert_allclose(rm2.numpy(), rm.numpy(), rtol=1e-6)
    np.testing.assert_allclose(rv2.numpy(), rv.numpy(), rtol=1e-6)
    # only a running mean: the variance buffer is optional
    rm3 = F.zeros((3,))
    F.batch_norm(T(x), rm3, None, training=True)
    np.testing.assert_allclose(rm3.numpy(), 0.1 * x.mean((0, 2, 3)), rtol=1e-5, atol=1e-7)
    # inference leaves the buffers alone and returns only the output
    before = rm.numpy().copy()
    out = F.batch_norm(T(x), rm, rv, inplace=False)
    assert isinstance(out, megxla.Tensor)
    np.testing.assert_array_equal(rm.numpy(), before)


def test_multi_head_attention_dropout_and_shapes():
    q = T(np.random.default_rng(1).normal(size=(2, 3, 4)).astype(np.float32))
    wb = T(np.random.default_rng(2).normal(size=(80,)).astype(np.float32) * 0.3)
    out, w = F.nn.multi_head_attention(q, q, q, 4, 2, 0.0, 0.0, wb, qbias=True, kbias=True, vbias=True,
                                       obias=True, need_weights=True)
    assert out.shape == (2, 3, 4) and w.shape == (4, 3, 3)
    np.testing.assert_allclose(w.numpy().sum(-1), 1, rtol=1e-5)
    # unbatched query
    o1, _ = F.nn.multi_head_attention(q[0], q[0], q[0], 4, 2, 0.0, 0.0, wb, qbias=True, kbias=True, vbias=True,
                                      obias=True)
    np.testing.assert_allclose(o1.numpy(), out.numpy()[0], rtol=1e-5, atol=1e-6)
    # dropout only in training; bias_k/bias_v and zero attention add key columns
    megxla.random.seed(0)
    od, _ = F.nn.multi_head_attention(q, q, q, 4, 2, 0.5, 0.5, wb, qbias=True, kbias=True, vbias=True, obias=True)
    assert not np.allclose(od.numpy(), out.numpy())
    oe, _ = F.nn.multi_head_attention(q, q, q, 4, 2, 0.5, 0.5, wb, qbias=True, kbias=True, vbias=True, obias=True,
                                      training=False)
    np.testing.assert_allclose(oe.numpy(), out.numpy(), rtol=1e-6)
    _, wz = F.nn.multi_head_attention(q, q, q, 4, 2, 0.0, 0.0, wb, qbias=True, kbias=True, vbias=True, obias=True,
                                      bias_k=F.zeros((1, 1, 4)), bias_v=F.zeros((1, 1, 4)), add_zero_attn=True,
                                      key_padding_mask=T(np.array([[False, False, True], [False] * 3])),
                                      need_weights=True)
    assert wz.shape == (4, 3, 5)
    assert np.all(wz.numpy()[:2, :, 2] < 1e-6)  # padded key of batch 0 gets no weight


def test_nms_matches_megengine_docstring_example():
    x = np.zeros((100, 4))
    np.random.seed(42)
    x[:, :2] = np.random.rand(100, 2) * 20
    x[:, 2:] = np.random.rand(100, 2) * 20 + 100
    scores = T(np.random.rand(100))
    np.testing.assert_array_equal(F.vision.nms(T(x), scores, iou_thresh=0.7).numpy(), [75, 69])


@pytest.mark.parametrize("deco", ["xla_trace", "trace", "symbolic"])
def test_nms_under_trace_gives_eager_indices(deco):
    """Under tracing nms returns what it returns eagerly (the kept count is a guarded host read), so that
    `boxes[keep]` (Faster R-CNN's RPN) selects the same boxes; max_output stays required, as in MegEngine."""
    import warnings
    from megxla import jit
    wrap = {"xla_trace": jit.xla_trace, "trace": jit.trace, "symbolic": lambda f: jit.trace(f, symbolic=True)}[deco]
    f = wrap(lambda b, s: b[F.vision.nms(b, s, 0.1, max_output=4)])
    rng = np.random.default_rng(0)
    cases = []
    for _ in range(3):
        xy = rng.uniform(0, 8, size=(6, 2)).astype(np.float32)
        cases.append((np.concatenate([xy, xy + rng.uniform(2, 6, size=(6, 2)).astype(np.float32)], 1),
                      rng.uniform(size=6).astype(np.float32)))
    counts = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b, s in cases + cases + cases:
            want = np_nms(b, s, 0.1, 4)
            counts.add(len(want))
            np.testing.assert_array_equal(f(T(b), T(s)).numpy(), b[want])
    boxes = T(BOXES)
    assert len(counts) > 1  # the kept count changed between calls
    with pytest.raises(OpError, match="nms"):
        wrap(lambda b, s: F.vision.nms(b, s, 0.5))(boxes, T(s))


def test_ctc_loss_matches_megengine_docstring_example():
    pred = T([[[0.0614, 0.9386], [0.8812, 0.1188]], [[0.699, 0.301], [0.2572, 0.7428]]])
    loss = F.nn.ctc_loss(pred, T([2, 2]), T([1, 1]), T([1, 1]))
    np.testing.assert_allclose(loss.item(), 0.1504417, rtol=1e-5)


def test_interpolate_equivalences():
    x = T(np.random.default_rng(3).normal(size=(1, 2, 3, 4)).astype(np.float32))
    np.testing.assert_allclose(F.vision.interpolate(x, (3, 4)).numpy(), x.numpy(), rtol=1e-6)  # identity
    up = F.vision.interpolate(x, scale_factor=2, mode="nearest").numpy()
    np.testing.assert_array_equal(up, x.numpy().repeat(2, 2).repeat(2, 3))


ONES4 = lambda *s: F.ones(s)  # noqa: E731
BAD = [
    ("conv2d", lambda: F.conv2d(F.ones((1, 3, 5)), F.ones((4, 3, 3, 3)))),
    ("conv2d", lambda: F.conv2d(F.ones((1, 2, 5, 5)), F.ones((4, 3, 3, 3)))),
    ("conv2d", lambda: F.conv2d(F.ones((1, 3, 5, 5)), T(np.ones((4, 3, 3), np.int32)))),
    ("conv2d", lambda: F.conv2d(F.ones((1, 3, 5, 5)), F.ones((4, 3, 3, 3)), conv_mode="convolution")),
    ("conv2d", lambda: F.conv2d(F.ones((1, 3, 2, 2)), F.ones((4, 3, 3, 3)))),
    ("conv2d", lambda: F.conv2d(F.ones((1, 4, 5, 5)), F.ones((2, 2, 2, 3, 3)), groups=3)),
    ("conv2d", lambda: F.conv2d(F.ones((1, 3, 5, 5)), F.ones((4, 3, 3, 3)), F.ones((5,)))),
    ("conv1d", lambda: F.conv1d(F.ones((1, 3, 5)), F.ones((4, 3, 3)), stride=(1, 2))),
    ("conv3d", lambda: F.conv3d(F.ones((1, 3, 5, 5)), F.ones((4, 3, 3, 3, 3)))),
    ("conv_transpose2d", lambda: F.conv_transpose2d(F.ones((1, 2, 3, 3)), F.ones((2, 3, 3, 3)), output_padding=1)),
    ("conv_transpose2d", lambda: F.conv_transpose2d(F.ones((1, 3, 3, 3)), F.ones((2, 3, 3, 3)))),
    ("conv_transpose3d", lambda: F.conv_transpose3d(F.ones((1, 2, 3, 3)), F.ones((2, 3, 3, 3, 3)))),
    ("local_conv2d", lambda: F.local_conv2d(F.ones((1, 2, 4, 4)), F.ones((1, 3, 3, 2, 3, 3, 5)))),
    ("deformable_conv2d", lambda: F.deformable_conv2d(F.ones((1, 2, 4, 4)), F.ones((3, 2, 3, 3)),
                                                      F.zeros((1, 17, 2, 2)), F.ones((1, 9, 2, 2)))),
    ("deformable_conv2d", lambda: F.deformable_conv2d(F.ones((1, 2, 4, 4)), F.ones((3, 2, 3, 3)),
                                                      F.zeros((1, 18, 2, 2)), F.ones((1, 8, 2, 2)))),
    ("region_restricted_conv", lambda: F.region_restricted_conv(F.ones((1, 1, 3, 3)), F.ones((1, 1, 2, 2)),
                                                                T(np.zeros((1, 3, 3), np.int32)),
                                                                T(np.zeros((1, 3, 3), np.int32)))),
    ("region_restricted_conv", lambda: F.region_restricted_conv(F.ones((1, 1, 3, 3)), F.ones((1, 1, 2, 2)),
                                                                F.zeros((1, 3, 3)), F.zeros((1, 2, 2)))),
    ("linear", lambda: F.linear(F.ones((2, 3)), F.ones((4, 2)))),
    ("max_pool2d", lambda: F.max_pool2d(F.ones((1, 4, 4)), 2)),
    ("max_pool2d", lambda: F.max_pool2d(F.ones((1, 1, 2, 2)), 3)),
    ("avg_pool2d", lambda: F.avg_pool2d(F.ones((1, 1, 4, 4)), 2, mode="median")),
    ("adaptive_avg_pool2d", lambda: F.adaptive_avg_pool2d(F.ones((1, 1, 2, 2)), 3)),
    ("adaptive_max_pool2d", lambda: F.adaptive_max_pool2d(F.ones((1, 1, 4, 4)), (1, 2, 3))),
    ("batch_norm", lambda: F.batch_norm(F.ones((2, 3, 2, 2)))),
    ("batch_norm", lambda: F.batch_norm(F.ones((3,)), training=True)),
    ("batch_norm", lambda: F.batch_norm(T(np.ones((2, 3), np.int32)), training=True)),
    ("sync_batch_norm", lambda: F.sync_batch_norm(F.ones((2, 3)), F.zeros((3,)), F.ones((3,)), eps_mode="mul")),
    ("layer_norm", lambda: F.layer_norm(F.ones((2, 3)), (2,), False)),
    ("layer_norm", lambda: F.layer_norm(F.ones((2, 3)), 3, True)),
    ("group_norm", lambda: F.group_norm(F.ones((2, 3, 2)), 2, False)),
    ("instance_norm", lambda: F.instance_norm(F.ones((3,)), False)),
    ("general_norm", lambda: F.general_norm(F.ones((2, 3)), (0, 2), False)),
    ("general_norm", lambda: F.general_norm(F.ones((2, 3)), 1, True, F.ones((2,)), F.zeros((2,)))),
    ("local_response_norm", lambda: F.local_response_norm(F.ones((1, 4, 2, 2)), 4)),
    ("softmax", lambda: F.softmax(F.ones((2, 3)), 2)),
    ("softmax", lambda: F.softmax(T([1, 2]))),
    ("logsoftmax", lambda: F.logsoftmax(F.ones((2, 3)), -3)),
    ("embedding", lambda: F.embedding(F.ones((2,)), F.ones((3, 2)))),
    ("embedding", lambda: F.embedding(T([0]), F.ones((3, 2)), padding_idx=0)),
    ("embedding", lambda: F.embedding(T([0]), F.ones((3,)))),
    ("one_hot", lambda: F.one_hot(F.ones((2,)), 3)),
    ("prelu", lambda: F.prelu(F.ones((2, 3)), F.ones((2,)))),
    ("pixel_shuffle", lambda: F.pixel_shuffle(F.ones((1, 3, 2, 2)), 2)),
    ("pixel_shuffle", lambda: F.pixel_shuffle(F.ones((4, 2)), 2)),
    ("sliding_window", lambda: F.sliding_window(F.ones((1, 2, 2)), 2)),
    ("sliding_window_transpose", lambda: F.sliding_window_transpose(F.ones((1, 1, 3, 3, 2, 2)), 5, 2)),
    ("pad", lambda: F.nn.pad(F.ones((2,)), ((1, 1),) * 8)),  # (pairs beyond ndim are ignored, but at most 7)
    ("pad", lambda: F.nn.pad(F.ones((2,)), ((1, 1),), mode="circular")),
    ("multi_head_attention", lambda: F.nn.multi_head_attention(F.ones((1, 2, 4)), F.ones((1, 2, 4)),
                                                               F.ones((1, 2, 4)), 4, 2, 0.0, 0.0, F.ones((10,)))),
    ("multi_head_attention", lambda: F.nn.multi_head_attention(F.ones((1, 2, 4)), F.ones((1, 3, 4)),
                                                               F.ones((1, 2, 4)), 4, 2, 0.0, 0.0, F.ones((64,)))),
    ("multi_head_attention", lambda: F.nn.multi_head_attention(F.ones((1, 2, 4)), F.ones((1, 2, 4)),
                                                               F.ones((1, 2, 4)), 4, 3, 0.0, 0.0, F.ones((64,)))),
    ("cross_entropy", lambda: F.nn.cross_entropy(F.ones((2, 3)), F.ones((2,)) > 0)),  # float labels are indices
    ("cross_entropy", lambda: F.nn.cross_entropy(F.ones((2, 3)), T([0, 1, 2]))),
    ("cross_entropy", lambda: F.nn.cross_entropy(F.ones((2, 3)), T([0, 1]), axis=2)),
    ("cross_entropy", lambda: F.nn.cross_entropy(F.ones((2, 3)), T([0, 1]), reduction="avg")),
    ("binary_cross_entropy", lambda: F.nn.binary_cross_entropy(F.ones((2, 3)), F.ones((2, 2)))),
    ("hinge_loss", lambda: F.nn.hinge_loss(F.ones((2, 3)), F.ones((2, 3)), norm="L3")),
    ("l1_loss", lambda: F.nn.l1_loss(F.ones((3,)), F.ones((2,)))),
    ("square_loss", lambda: F.nn.square_loss(F.ones((3,)), F.ones((2,)))),  # int pred is fine (MegEngine: float32)
    ("ctc_loss", lambda: F.nn.ctc_loss(F.ones((3, 2, 4)), T([3, 3]), T([[1], [1]]), T([1, 1]), blank=4)),
    ("ctc_loss", lambda: F.nn.ctc_loss(F.ones((3, 2, 4)), T([3]), T([[1], [1]]), T([1, 1]))),
    ("ctc_loss", lambda: F.nn.ctc_loss(F.ones((3, 2)), T([3, 3]), T([[1], [1]]), T([1, 1]))),
    ("interpolate", lambda: F.vision.interpolate(F.ones((1, 2, 3)), 4)),
    ("interpolate", lambda: F.vision.interpolate(F.ones((1, 1, 2, 2)), 4, 2.0)),
    ("interpolate", lambda: F.vision.interpolate(F.ones((1, 1, 2, 2)), 4, mode="nearest", align_corners=True)),
    ("interpolate", lambda: F.vision.interpolate(F.ones((1, 1, 2, 2)), 4, mode="area")),
    ("warp_perspective", lambda: F.warp_perspective(F.ones((1, 1, 3, 3)), F.ones((1, 2, 3)), (2, 2))),
    ("warp_perspective", lambda: F.warp_perspective(F.ones((2, 1, 3, 3)), F.ones((1, 3, 3)), (2, 2))),
    ("warp_affine", lambda: F.warp_affine(F.ones((1, 3, 3, 1)), F.ones((1, 2, 3)), (2, 2), border_mode="mirror")),
    ("remap", lambda: F.remap(F.ones((1, 1, 3, 3)), F.ones((1, 2, 2, 3)))),
    ("roi_align", lambda: F.vision.roi_align(F.ones((1, 1, 3, 3)), F.ones((2, 4)), 2)),
    ("roi_pooling", lambda: F.vision.roi_pooling(F.ones((1, 1, 3, 3)), F.ones((2, 5)), 2, mode="min")),
    ("nms", lambda: F.vision.nms(F.ones((3, 4)), F.ones((2,)), 0.5)),
    ("correlation", lambda: F.vision.correlation(F.ones((1, 1, 5, 5)), F.ones((1, 1, 5, 5)), kernel_size=2)),
    ("cvt_color", lambda: F.vision.cvt_color(F.ones((1, 2, 2, 3)), "RGB2HSV")),
    ("cvt_color", lambda: F.vision.cvt_color(F.ones((1, 2, 2, 1)), "RGB2GRAY")),
    ("flip", lambda: F.vision.flip(F.ones((1, 2, 2, 2)))),
    ("rot90", lambda: F.vision.rot90(F.ones((2, 2, 3)))),
    ("rotate", lambda: F.vision.rotate(F.ones((2, 1, 3, 3)), 10.0)),
    ("rotate", lambda: F.vision.rotate(F.ones((1, 1, 3, 3)), 10.0, format="NDHW")),
]


@pytest.mark.parametrize("name, call", BAD, ids=[f"{n}#{i}" for i, (n, _) in enumerate(BAD)])
def test_bad_input_names_the_op(name, call):
    with pytest.raises((OpError, ValueError, TypeError), match=name):
        call()


@pytest.mark.parametrize("kwargs", [dict(weight=F.ones((4,))), dict(bias=F.ones((1, 2, 1, 1))),
                                    dict(running_var=F.ones((2,)))], ids=["weight", "bias", "running_var"])
def test_bad_batch_norm_leaves_running_stats_untouched(kwargs):
    rm, rv = F.zeros((1, 3, 1, 1)), F.ones((1, 3, 1, 1))
    args = {"running_mean": rm, "running_var": rv, **kwargs}  # the bad one replaces a good one
    state = [(t._vid, t.numpy().copy()) for t in (rm, rv)]
    for fn in (F.batch_norm, F.sync_batch_norm):
        with pytest.raises(OpError, match=fn.__name__):
            fn(F.ones((2, 3, 2, 2)), training=True, **args)
    for t, (vid, val) in zip((rm, rv), state):
        assert t._vid == vid
        np.testing.assert_array_equal(t.numpy(), val)


def test_public_functions_have_docstrings():
    import megxla.functional.nn as NN
    import megxla.functional.loss as L
    import megxla.functional.vision as V
    import megxla.random as RR
    bad = []
    for mod, names in ((NN, NN.__all__), (L, L.__all__), (V, V.__all__), (RR, RR.__all__)):
        for name in names:
            obj = getattr(mod, name)
            doc = obj.__doc__ or ""
            if not ("Args:" in doc and ("Example" in doc) and ("Returns:" in doc or isinstance(obj, type))):
                bad.append(f"{mod.__name__}.{name}")
    assert not bad, bad
