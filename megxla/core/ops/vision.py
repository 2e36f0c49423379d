"""Vision primitives (``megengine.functional.vision``): resampling, ROI pooling, NMS, correlation, colour.

Images are NCHW unless a ``format``/``nhwc`` parameter says otherwise. Every resampling op goes through one
sampler (:func:`sample`), which follows OpenCV/megdnn: pixel centres at integer coordinates, bilinear weights
from the fractional part, and a border mode deciding what lies outside the image.
"""
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

from .._op import Primitive
from .elemwise import gather_wide

BORDER_MODES = ("replicate", "reflect", "reflect_101", "wrap", "constant")


# ---- the sampler -------------------------------------------------------------------------------------------------
def _gather(img, yi, xi, bidx=None):
    """``img[b, :, yi, xi]`` for integer maps ``yi, xi`` of shape (K, P); ``b`` is ``bidx`` (K,) or the row
    index (then K == batch). Returns (K, C, P). Gathers from an NHWC view so no per-row image copy is made."""
    n, c, h, w = img.shape
    flat = jnp.transpose(img, (0, 2, 3, 1)).reshape(n * h * w, c)
    b = jnp.arange(yi.shape[0]) if bidx is None else bidx
    idx = (b[:, None] * h + yi) * w + xi
    # (float16/bfloat16 through float32: a pixel's gradient, summed over every sample that reads it, in float32)
    return jnp.moveaxis(gather_wide(lambda t: t[idx], flat), -1, 1)


def _border(i, n, mode):
    """Map integer coordinates into ``[0, n)`` by OpenCV's border rule; also returns the in-range mask."""
    inside = (i >= 0) & (i < n)
    if mode in ("replicate", "constant"):
        return jnp.clip(i, 0, n - 1), inside
    if mode == "wrap":
        return jnp.mod(i, n), inside
    if mode == "reflect":  # fedcba|abcdef|fedcba
        i = jnp.mod(i, 2 * n)
        return jnp.where(i >= n, 2 * n - 1 - i, i), inside
    if n == 1:  # reflect_101: gfedcb|abcdefg|fedcba
        return jnp.zeros_like(i), inside
    i = jnp.mod(i, 2 * n - 2)
    return jnp.where(i >= n, 2 * n - 2 - i, i), inside


def _tap(img, yi, xi, bidx, mode, value):
    h, w = img.shape[2:]
    yy, my = _border(yi, h, mode)
    xx, mx = _border(xi, w, mode)
    v = _gather(img, yy, xx, bidx)
    if mode == "constant":
        v = jnp.where((my & mx)[:, None, :], v, jnp.asarray(value, v.dtype))
    return v


def sample(img, ys, xs, *, interp="linear", border_mode="replicate", border_val=0.0, bidx=None):
    """Sample ``img`` (N, C, H, W) at float coordinates ``ys, xs`` (K, P): returns (K, C, P)."""
    if interp == "nearest":
        yi = jnp.floor(ys + 0.5).astype(jnp.int32)
        xi = jnp.floor(xs + 0.5).astype(jnp.int32)
        return _tap(img, yi, xi, bidx, border_mode, border_val)
    y0, x0 = jnp.floor(ys), jnp.floor(xs)
    fy, fx = (ys - y0)[:, None, :], (xs - x0)[:, None, :]
    y0, x0 = y0.astype(jnp.int32), x0.astype(jnp.int32)
    t = lambda dy, dx: _tap(img, y0 + dy, x0 + dx, bidx, border_mode, border_val)  # noqa: E731
    return ((1 - fy) * ((1 - fx) * t(0, 0) + fx * t(0, 1)) + fy * ((1 - fx) * t(1, 0) + fx * t(1, 1))).astype(img.dtype)


def sample_bilinear_zero(img, ys, xs):
    """Bilinear sampling with zeros outside the image (deformable convolution's rule)."""
    return sample(img, ys, xs, border_mode="constant", border_val=0.0)


# ---- warps ----------------------------------------------------------------------------------------------------
def _grid(oh, ow, dtype):
    gy, gx = jnp.meshgrid(jnp.arange(oh, dtype=dtype), jnp.arange(ow, dtype=dtype), indexing="ij")
    return gy.reshape(1, -1), gx.reshape(1, -1)


def _warp(x, mat, idx, out_hw, border_mode, border_val, interp, nhwc, affine, cv):
    if nhwc:
        x = jnp.transpose(x, (0, 3, 1, 2))
    oh, ow = out_hw
    dtype = jnp.result_type(x.dtype, mat.dtype)
    gy, gx = _grid(oh, ow, dtype)
    m = mat.astype(dtype)[:, :, :, None]
    sx = m[:, 0, 0] * gx + m[:, 0, 1] * gy + m[:, 0, 2]
    sy = m[:, 1, 0] * gx + m[:, 1, 1] * gy + m[:, 1, 2]
    if affine and cv:
        sx, sy = _cv_affine_coords(m, gx, gy, sx, sy, interp == "nearest")
    if not affine:
        z = m[:, 2, 0] * gx + m[:, 2, 1] * gy + m[:, 2, 2]
        sx, sy = sx / z, sy / z
        if cv:
            sx, sy = (_cv_perspective_coord(s, z, interp == "nearest") for s in (sx, sy))
    bidx = idx[0].astype(jnp.int32) if idx else None
    out = sample(x.astype(dtype), sy, sx, interp=interp, border_mode=border_mode, border_val=border_val, bidx=bidx)
    out = out.reshape(out.shape[:2] + (oh, ow)).astype(x.dtype)
    return jnp.transpose(out, (0, 2, 3, 1)) if nhwc else out


# megdnn's WarpAffine on NHWC images of 1-3 channels (float32 or uint8, nearest or linear) is OpenCV's warpAffine: the
# source coordinates in fixed point, to 1/1024 per term, then rounded to 1/32 of a pixel (INTER_BITS = 5) for the
# bilinear weights, or to whole pixels for nearest -- MegEngine's documented results differ from exact coordinates
# by up to 1/64 of a pixel (its test_warp_affine). Its WarpPerspective on NHWC images of 1 or 3 channels (no
# mat_idx) is OpenCV's warpPerspective: each source coordinate rounded to 1/32 (whole pixels for nearest), 0 where
# the projective divisor is 0. Other layouts and dtypes go through megdnn's float kernels (exact coordinates), as
# MegEngine on CUDA does. Here the arithmetic is float32, not double: a coordinate within ~1e-7 relative of a
# rounding tie may land on the other step.
_AB_BITS, _INTER_BITS = 10, 5


def _cv_affine_coords(m, gx, gy, sx, sy, nearest):
    ab = float(1 << _AB_BITS)
    half = (1 << _AB_BITS) // 2 if nearest else (1 << (_AB_BITS - _INTER_BITS)) // 2  # OpenCV's round_delta
    fixed = lambda v: jnp.rint(jnp.clip(v * ab, -2.0 ** 31, 2.0 ** 31 - 128)).astype(jnp.int32)  # noqa: E731
    cx = fixed(m[:, 0, 1] * gy + m[:, 0, 2]) + half + fixed(m[:, 0, 0] * gx)
    cy = fixed(m[:, 1, 1] * gy + m[:, 1, 2]) + half + fixed(m[:, 1, 0] * gx)
    shift = _AB_BITS if nearest else _AB_BITS - _INTER_BITS
    unit = 1.0 if nearest else float(1 << _INTER_BITS)
    qx = (cx >> shift).astype(sx.dtype) / unit
    qy = (cy >> shift).astype(sy.dtype) / unit
    return _straight_through(sx, qx), _straight_through(sy, qy)


def _cv_perspective_coord(s, z, nearest):
    unit = 1.0 if nearest else float(1 << _INTER_BITS)
    rounded = jnp.rint(jnp.clip(s * unit, -2.0 ** 31, 2.0 ** 31)) / unit
    return _straight_through(s, jnp.where(z == 0, 0.0, rounded))


def _straight_through(exact, rounded):
    # the rounded coordinate's value, the exact one's gradient (the rounding is piecewise constant in the matrix)
    return exact + lax.stop_gradient(rounded - exact)


def _warp_perspective(x, mat, *idx, out_hw, border_mode, border_val, interp, nhwc, cv=False):
    # dst(y, x) = src((m00 x + m01 y + m02) / (m20 x + m21 y + m22), ...): ``mat`` maps dst to src. ``cv``: sample as
    # megdnn's OpenCV kernel (the functional layer decides where MegEngine's CPU does: see the note above)
    return _warp(x, mat, idx, out_hw, border_mode, border_val, interp, nhwc, affine=False, cv=cv)


def _warp_affine(x, mat, *, out_hw, border_mode, border_val, interp, nhwc, cv=False):
    return _warp(x, mat, (), out_hw, border_mode, border_val, interp, nhwc, affine=True, cv=cv)


def _remap(x, map_xy, *, border_mode, border_val, interp):
    n, oh, ow, _ = map_xy.shape
    m = map_xy.astype(jnp.result_type(x.dtype, map_xy.dtype)).reshape(n, oh * ow, 2)
    out = sample(x.astype(m.dtype), m[..., 1], m[..., 0], interp=interp, border_mode=border_mode,
                 border_val=border_val)
    return out.reshape(out.shape[:2] + (oh, ow)).astype(x.dtype)


# ---- resize ---------------------------------------------------------------------------------------------------
def interp_matrix(n_in, n_out, mode, align_corners):
    """The (n_out, n_in) matrix of 1-D resampling weights (megdnn Resize / OpenCV rules), as NumPy float64."""
    rows = np.arange(n_out)
    d = rows.astype(np.float64)
    a = np.zeros((n_out, n_in))
    scale = n_in / n_out
    # NOTE: source coordinates in float32 arithmetic, as megdnn computes them (``(dst + 0.5f) / scale - 0.5f``
    # with ``scale = out / in`` in float; align_corners goes through warp_perspective with a float32 matrix), so
    # the sampled positions match MegEngine's bit for bit rather than to float32 rounding.
    f32 = np.float32
    d32 = rows.astype(f32)
    if mode == "nearest":
        a[rows, np.minimum(np.floor(d32 / (f32(n_out) / f32(n_in))).astype(np.int64), n_in - 1)] = 1
    elif mode == "linear":
        if align_corners:
            src = d32 * f32((n_in - 1.0) / (n_out - 1.0)) if n_out > 1 else np.zeros(n_out, f32)
        else:
            src = np.maximum((d32 + f32(0.5)) / (f32(n_out) / f32(n_in)) - f32(0.5), f32(0))
        i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        lam = (src - i0.astype(f32)).astype(np.float64)
        np.add.at(a, (rows, i0), 1 - lam)
        np.add.at(a, (rows, np.minimum(i0 + 1, n_in - 1)), lam)
    else:  # cubic, A = -0.75, border replicate
        src = (d + 0.5) * scale - 0.5
        i0 = np.floor(src).astype(np.int64)
        t = src - i0
        aa = -0.75
        w0 = ((aa * (t + 1) - 5 * aa) * (t + 1) + 8 * aa) * (t + 1) - 4 * aa
        w1 = ((aa + 2) * t - (aa + 3)) * t * t + 1
        w2 = ((aa + 2) * (1 - t) - (aa + 3)) * (1 - t) * (1 - t) + 1
        w3 = 1 - w0 - w1 - w2
        for k, wk in zip((-1, 0, 1, 2), (w0, w1, w2, w3)):
            np.add.at(a, (rows, np.clip(i0 + k, 0, n_in - 1)), wk)
    return a


def trilinear_matrix(n_in, n_out, align_corners):
    """The (n_out, n_in) 1-D weights of megdnn's Resize3D: ``src = scale * (dst + 0.5) - 0.5`` clamped at 0
    (``scale * dst`` with align_corners), in float32; the last source index repeats at the upper border."""
    f32 = np.float32
    d = np.arange(n_out).astype(f32)
    if align_corners:
        scale = f32((n_in - 1.0) / (n_out - 1.0)) if n_out > 1 else f32(0)
        src = scale * d
    else:
        src = np.maximum(f32(n_in / n_out) * (d + f32(0.5)) - f32(0.5), f32(0))
    i0 = src.astype(np.int64)
    lam = (src - i0.astype(f32)).astype(np.float64)
    a = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    np.add.at(a, (rows, i0), 1 - lam)
    np.add.at(a, (rows, np.where(i0 < n_in - 1, i0 + 1, i0)), lam)
    return a


def _resize(x, *, size, mode, align_corners):
    # NOTE: separable resampling as small matmuls with constant weight matrices: exact for nearest,
    # linear and cubic, differentiable, and one fused XLA computation.
    if mode == "trilinear":  # (N, C, D, H, W)
        ad, ah, aw = (jnp.asarray(trilinear_matrix(n, o, align_corners), x.dtype) for n, o in zip(x.shape[2:], size))
        return jnp.einsum("od,ncdhw,ph,qw->ncopq", ad, x, ah, aw)
    ah = jnp.asarray(interp_matrix(x.shape[2], size[0], mode, align_corners), x.dtype)
    aw = jnp.asarray(interp_matrix(x.shape[3], size[1], mode, align_corners), x.dtype)
    return jnp.einsum("oh,nchw,pw->ncop", ah, x, aw)


# ---- ROI ops --------------------------------------------------------------------------------------------------
def _roi_align(x, rois, *, out_hw, mode, scale, samples, aligned):
    # ROIAlign as in megdnn: rois (K, 5) = (batch, x0, y0, x1, y1); ``samples`` points per bin axis.
    # rois get no gradient (as in MegEngine).
    n, c, h, w = x.shape
    rois = lax.stop_gradient(rois).astype(x.dtype)
    ph, pw = out_hw
    sh, sw = samples
    off = 0.5 if aligned else 0.0
    x0, y0 = rois[:, 1] * scale - off, rois[:, 2] * scale - off
    rw, rh = rois[:, 3] * scale - off - x0, rois[:, 4] * scale - off - y0
    # megdnn clamps an inverted roi to size 0 (every sample at its start corner), aligned or not; there is no
    # Detectron-style minimum size of 1 for aligned=False (checked against MegEngine 1.13)
    rw, rh = jnp.maximum(rw, 0.0), jnp.maximum(rh, 0.0)
    fy = (np.arange(ph)[:, None] + (np.arange(sh)[None, :] + 0.5) / sh).reshape(-1)  # in bins
    fx = (np.arange(pw)[:, None] + (np.arange(sw)[None, :] + 0.5) / sw).reshape(-1)
    ys = y0[:, None] + jnp.asarray(fy, x.dtype)[None] * (rh / ph)[:, None]  # (K, PH*SH)
    xs = x0[:, None] + jnp.asarray(fx, x.dtype)[None] * (rw / pw)[:, None]  # (K, PW*SW)
    k = rois.shape[0]
    ys = jnp.broadcast_to(ys[:, :, None], (k, ph * sh, pw * sw)).reshape(k, -1)
    xs = jnp.broadcast_to(xs[:, None, :], (k, ph * sh, pw * sw)).reshape(k, -1)
    # NOTE: megdnn's ROIAlign interpolates with zeros outside the image (a sample at y = -0.25 mixes row 0 with
    # a zero row), not Detectron's clamp to the border; aligned rois at the image edge sample there.
    v = sample(x, ys, xs, border_mode="constant", border_val=0.0, bidx=rois[:, 0].astype(jnp.int32))
    v = v.reshape(k, c, ph, sh, pw, sw)
    if mode != "max":
        return v.mean(axis=(3, 5))
    # NOTE: max as "take at argmax": the gradient goes to one sample, as megdnn's. jnp.max's own gradient
    # re-tests ``operand == max``, which fails under jit when XLA recomputes the interpolation differently.
    v = jnp.transpose(v, (0, 1, 2, 4, 3, 5)).reshape(k, c, ph, pw, sh * sw)
    return jnp.take_along_axis(v, jnp.argmax(v, axis=-1)[..., None], axis=-1)[..., 0]


def _roi_pooling(x, rois, *, out_hw, mode, scale):
    # Fast R-CNN ROI pooling as in megdnn: integer-rounded roi, bins [floor(i*b), ceil((i+1)*b)), empty bins 0.
    n, c, h, w = x.shape
    rois = lax.stop_gradient(rois).astype(jnp.float32)
    ph, pw = out_hw
    rnd = lambda v: jnp.sign(v) * jnp.floor(jnp.abs(v) + 0.5)  # noqa: E731  (C's round: half away from 0)
    sx, sy, ex, ey = (rnd(rois[:, i] * scale) for i in (1, 2, 3, 4))
    bh = jnp.maximum(ey - sy + 1, 1) / ph
    bw = jnp.maximum(ex - sx + 1, 1) / pw

    def bins(start, size, p, n_):
        i = jnp.arange(p, dtype=jnp.float32)[None]
        lo = jnp.clip(jnp.floor(i * size[:, None]) + start[:, None], 0, n_)
        hi = jnp.clip(jnp.ceil((i + 1) * size[:, None]) + start[:, None], 0, n_)
        pos = jnp.arange(n_, dtype=jnp.float32)[None, None]
        return (pos >= lo[..., None]) & (pos < hi[..., None]), hi - lo  # (K, P, n), (K, P)

    rmask, rcount = bins(sy, bh, ph, h)
    cmask, ccount = bins(sx, bw, pw, w)
    img = x[rois[:, 0].astype(jnp.int32)]  # (K, C, H, W)
    empty = (rcount[:, :, None] <= 0) | (ccount[:, None, :] <= 0)  # (K, PH, PW)
    zero = jnp.zeros((), x.dtype)
    if mode == "max":
        low = jnp.asarray(-jnp.inf, x.dtype)
        t = jnp.where(cmask[:, None, None], img[:, :, :, None, :], low).max(-1)  # (K, C, H, PW)
        out = jnp.where(rmask[:, None, :, :, None], t[:, :, None], low).max(3)  # (K, C, PH, PW)
    else:
        t = jnp.einsum("kchw,kpw->kchp", img, cmask.astype(x.dtype))
        out = jnp.einsum("kchp,kqh->kcqp", t, rmask.astype(x.dtype))
        out = out / jnp.maximum(rcount[:, :, None] * ccount[:, None, :], 1).astype(x.dtype)[:, None]
    return jnp.where(empty[:, None], zero, out)


# ---- NMS, correlation, colour -------------------------------------------------------------------------------
def _nms(boxes, scores, *, iou_thresh, max_output):
    # Greedy NMS in score order. Returns (kept indices padded with -1 to max_output, count).
    # MegEngine visits the boxes in its argsort(descending=True) order, the stable ascending order reversed: of
    # two tied scores the later box comes first (two identical boxes scored alike: the later one is kept).
    n = boxes.shape[0]
    order = jnp.flip(jnp.argsort(scores, stable=True))
    b = boxes[order]
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    iw = jnp.clip(jnp.minimum(b[:, None, 2], b[None, :, 2]) - jnp.maximum(b[:, None, 0], b[None, :, 0]), 0)
    ih = jnp.clip(jnp.minimum(b[:, None, 3], b[None, :, 3]) - jnp.maximum(b[:, None, 1], b[None, :, 1]), 0)
    inter = iw * ih
    iou = inter / jnp.maximum(area[:, None] + area[None, :] - inter, jnp.finfo(inter.dtype).tiny)
    over = iou > iou_thresh
    earlier = jnp.arange(n)

    def body(i, keep):
        return keep.at[i].set(~jnp.any(keep & over[i] & (earlier < i)))

    keep = lax.fori_loop(0, n, body, jnp.zeros((n,), bool))
    pos = jnp.cumsum(keep) - 1
    slot = jnp.where(keep & (pos < max_output), pos, max_output)
    out = jnp.full((max_output,), -1, jnp.int32).at[slot].set(order.astype(jnp.int32), mode="drop")
    return out, jnp.minimum(keep.sum(), max_output).astype(jnp.int32)


def _correlation(d1, d2, *, kernel_size, max_displacement, stride1, stride2, pad_size, is_multiply):
    # FlowNet's correlation layer (megdnn Correlation): channel (p, o) of the output compares each
    # kernel_size^2 patch of d1 with the patch of d2 displaced by ((p - r) * stride2, (o - r) * stride2).
    n, c, h, w = d1.shape
    kr = (kernel_size - 1) // 2
    border = max_displacement + kr
    hp, wp = h + 2 * pad_size, w + 2 * pad_size
    oh = -(-(hp - 2 * border) // stride1)
    ow = -(-(wp - 2 * border) // stride1)
    r = max_displacement // stride2
    pad = ((0, 0), (0, 0), (pad_size, pad_size), (pad_size, pad_size))
    p1 = jnp.pad(d1, pad)
    md = max_displacement
    p2 = jnp.pad(d2, ((0, 0), (0, 0), (pad_size + md, pad_size + md), (pad_size + md, pad_size + md)))
    outs = []
    for p in range(2 * r + 1):
        for o in range(2 * r + 1):
            dy, dx = (p - r) * stride2, (o - r) * stride2
            s = lax.dynamic_slice(p2, (0, 0, md + dy, md + dx), (n, c, hp, wp))
            m = (p1 * s) if is_multiply else jnp.abs(p1 - s)
            m = m.sum(axis=1)  # (N, HP, WP)
            box = lax.reduce_window(m, np.zeros((), m.dtype), lax.add, (1, kernel_size, kernel_size), (1, 1, 1),
                                    "VALID")
            outs.append(lax.slice(box, (0, md, md), (n, md + (oh - 1) * stride1 + 1, md + (ow - 1) * stride1 + 1),
                                  (1, stride1, stride1)))
    return jnp.stack(outs, axis=1) / (kernel_size * kernel_size * c)


_GRAY = {"RGB2GRAY": (0.299, 0.587, 0.114), "BGR2GRAY": (0.114, 0.587, 0.299)}


def _descale(v, n):
    return jnp.right_shift(v + (1 << (n - 1)), n)  # arithmetic shift: floor, as megdnn's descale on int


def _sat_u8(v):
    return jnp.clip(v, 0, 255).astype(jnp.uint8)


def _rgb2yuv(x):
    # megdnn's reference (naive) RGB2YUV, whose Y weights channel 0 by 0.114 and channel 2 by 0.299.
    if x.dtype == jnp.uint8:
        v = x.astype(jnp.int32)
        y = _descale(v[..., 0] * 1868 + v[..., 1] * 9617 + v[..., 2] * 4899, 14)
        cr = _descale((v[..., 0] - y) * 8061 + (128 << 14), 14)
        cb = _descale((v[..., 2] - y) * 14369 + (128 << 14), 14)
        return _sat_u8(jnp.stack([y, cr, cb], -1))
    xf = x.astype(jnp.float32)
    y = xf[..., 0] * 0.114 + xf[..., 1] * 0.587 + xf[..., 2] * 0.299
    return jnp.stack([y, (xf[..., 0] - y) * 0.492 + 0.5, (xf[..., 2] - y) * 0.877 + 0.5], -1).astype(x.dtype)


def _yuv2rgb(x):
    if x.dtype == jnp.uint8:
        v = x.astype(jnp.int32)
        y, cr, cb = v[..., 0], v[..., 1] - 128, v[..., 2] - 128
        r = y + _descale(cr * 33292, 14)
        g = y + _descale(cb * -9519 + cr * -6472, 14)
        b = y + _descale(cb * 18678, 14)
        return _sat_u8(jnp.stack([r, g, b], -1))
    xf = x.astype(jnp.float32)
    y, cr, cb = xf[..., 0], xf[..., 1] - 0.5, xf[..., 2] - 0.5
    return jnp.stack([y + cr * 2.032, y + cb * -0.581 + cr * -0.395, y + cb * 1.140], -1).astype(x.dtype)


# BT.601 YUV 4:2:0 (input (N, H*3/2, W, 1) uint8) -> RGB/BGR, libyuv's fixed point as megdnn: layout -> (planar, U first)
_YUV420 = {"NV21": (False, False), "NV12": (False, True), "YV12": (True, False), "YU12": (True, True)}


def _yuv420(x, *, layout, out, bt601):
    """YUV 4:2:0 (``(N, H*3/2, W, 1)`` uint8) to ``out`` in RGB/BGR/GRAY, as megdnn's naive kernels: the JPEG
    (YCrCb) fixed point, or libyuv's BT.601 one. One chroma sample per 2x2 block."""
    planar, u_first = _YUV420[layout]
    n, h32, w, _ = x.shape
    h = h32 * 2 // 3
    v = x[..., 0].astype(jnp.int32)
    yy = v[:, :h]
    if out == "GRAY":
        return yy[..., None].astype(jnp.uint8)
    chroma = v[:, h:].reshape(n, -1)  # h/2 rows of w (semi-planar) or two (h/2)*(w/2) planes (planar)
    if planar:
        q = (h // 2) * (w // 2)
        first, second = chroma[:, :q], chroma[:, q:2 * q]
        uu, vv = (first, second) if u_first else (second, first)
        uu, vv = uu.reshape(n, h // 2, w // 2), vv.reshape(n, h // 2, w // 2)
    else:
        inter = chroma.reshape(n, h // 2, w // 2, 2)
        uu, vv = (inter[..., 0], inter[..., 1]) if u_first else (inter[..., 1], inter[..., 0])
    up = lambda c: jnp.repeat(jnp.repeat(c, 2, axis=1), 2, axis=2)  # noqa: E731
    uu, vv = up(uu), up(vv)
    sh = jnp.right_shift
    if bt601:
        y1 = sh(yy * 0x0101 * 18997, 16)
        ygb, ub, ug, vg, vr = -1160, -128, 25, 52, -102
        b = _sat_u8(sh(-(uu * ub) + y1 + (ub * 128 + ygb), 6))
        g = _sat_u8(sh(-(uu * ug + vv * vg) + y1 + (ug * 128 + vg * 128 + ygb), 6))
        r = _sat_u8(sh(-(vv * vr) + y1 + (vr * 128 + ygb), 6))
    else:
        r = _sat_u8(yy + sh(359 * (vv - 128), 8))
        g = _sat_u8(yy - sh(88 * (uu - 128) + 183 * (vv - 128), 8))
        b = _sat_u8(yy + sh(454 * (uu - 128), 8))
    return jnp.stack([r, g, b] if out == "RGB" else [b, g, r], -1)


def _cvt_color(x, *, mode):
    # NHWC images. Integer images are rounded back to their dtype, as OpenCV does.
    if mode == "RGB2YUV":
        return _rgb2yuv(x)
    if mode == "YUV2RGB":
        return _yuv2rgb(x)
    if mode.startswith(("BT601_YUV2", "YUV2")) and mode[-4:] in _YUV420:
        body = mode[len("BT601_"):] if mode.startswith("BT601_") else mode
        return _yuv420(x, layout=mode[-4:], out=body[4:-5], bt601=mode.startswith("BT601_"))
    if mode in _GRAY and x.dtype == jnp.uint8:
        # MegEngine's uint8 gray is OpenCV's fixed point, (4899 R + 9617 G + 1868 B + 2**13) >> 14 exactly: the
        # float formula below rounded 0.24% of pixels a level apart (211, 40, 245 -> 114.499: 114, MegEngine 115)
        r, b = (0, 2) if mode == "RGB2GRAY" else (2, 0)
        xi = x.astype(jnp.int32)
        return ((xi[..., r:r + 1] * 4899 + xi[..., 1:2] * 9617 + xi[..., b:b + 1] * 1868 + 8192) >> 14).astype(x.dtype)
    xf = x.astype(jnp.float32) if not jnp.issubdtype(x.dtype, jnp.floating) else x
    if mode in _GRAY:
        # megdnn's order of operations, R * 0.299 + (G * 0.587 + B * 0.114): a reduction over the channel axis
        # rounds differently (0.865552 where MegEngine's docstring prints 0.86555195). XLA may still fuse a
        # product into a multiply-add, so single elements can differ from MegEngine in the last bit.
        r, b = (0, 2) if mode == "RGB2GRAY" else (2, 0)
        y = xf[..., r:r + 1] * 0.299 + (xf[..., 1:2] * 0.587 + xf[..., b:b + 1] * 0.114)
    elif mode in ("RGB2BGR", "BGR2RGB"):
        y = jnp.flip(xf, -1)
    else:  # GRAY2RGB / GRAY2BGR
        y = jnp.repeat(xf, 3, axis=-1)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        info = jnp.iinfo(x.dtype)
        y = jnp.clip(jnp.floor(y + 0.5), info.min, info.max).astype(x.dtype)
    return y


CVT_COLOR_MODES = tuple(_GRAY) + ("RGB2BGR", "BGR2RGB", "GRAY2RGB", "GRAY2BGR", "RGB2YUV", "YUV2RGB") + tuple(
    f"BT601_YUV2{c}_{layout}" for layout in _YUV420 for c in ("RGB", "BGR")) + tuple(
    f"YUV2{c}_{layout}" for layout in _YUV420 for c in ("RGB", "BGR", "GRAY"))

resize = Primitive("resize", _resize)
warp_perspective = Primitive("warp_perspective", _warp_perspective)
warp_affine = Primitive("warp_affine", _warp_affine)
remap = Primitive("remap", _remap)
roi_align = Primitive("roi_align", _roi_align)
roi_pooling = Primitive("roi_pooling", _roi_pooling)
nms = Primitive("nms", _nms, multiple_results=True)
correlation = Primitive("correlation", _correlation)
cvt_color = Primitive("cvt_color", _cvt_color)
