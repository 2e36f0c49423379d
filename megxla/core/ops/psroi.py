"""Deformable position-sensitive RoI pooling (MegEngine's ``DeformablePSROIPooling``), vectorised in JAX.

Per RoI ``r``, channel ``c`` and bin ``(ph, pw)``: the bin (offset by ``trans * trans_std * roi size`` unless
``no_trans``) is sampled on a ``sample_per_part``² grid; samples outside ``[-0.5, size - 0.5]`` are skipped,
the others clamped into the image and bilinearly interpolated; the output is their mean (0 if none). RoI
corners are rounded and scaled by ``spatial_scale`` with megdnn's -0.5 pixel convention; the offset of bin
``(ph, pw)`` for channel ``c`` is ``trans[r, 2*cls, part_h, part_w]`` (x) and ``[..., 2*cls+1, ...]`` (y) with
``cls = c // (C // num_classes)`` and ``part = floor(p / pooled * part_size)``, read as megdnn reads it: at flat
position ``((r * num_classes + cls) * 2 + xy) * part_size**2 + part_h * part_size + part_w`` of ``trans`` whatever
its shape (MegEngine's check asks for ``(R, 2, pooled_h, pooled_w)``, its kernel reads ``part_size`` strides: the
same where ``part_size`` is the pooled size). The gradient (``jax.vjp``) flows to the features and to ``trans``;
RoIs get none (their corners are rounded), as in megdnn.
"""
import jax.numpy as jnp
import numpy as np

from .._op import Primitive


def _deformable_psroi_pooling(data, rois, trans, *, no_trans, part_size, pooled_h, pooled_w, sample_per_part,
                              spatial_scale, trans_std):
    n_img, channels, height, width = data.shape
    s = sample_per_part
    rois = rois.astype(jnp.float32)
    batch = rois[:, 0].astype(jnp.int32)
    x_l = jnp.round(rois[:, 1]) * spatial_scale - 0.5
    y_l = jnp.round(rois[:, 2]) * spatial_scale - 0.5
    x_r = (jnp.round(rois[:, 3]) + 1.0) * spatial_scale - 0.5
    y_r = (jnp.round(rois[:, 4]) + 1.0) * spatial_scale - 0.5
    roi_w = jnp.maximum(x_r - x_l, 0.1)[:, None, None, None]  # (R, 1, 1, 1)
    roi_h = jnp.maximum(y_r - y_l, 0.1)[:, None, None, None]
    bin_w, bin_h = roi_w / pooled_w, roi_h / pooled_h
    pw = jnp.arange(pooled_w, dtype=jnp.float32)[None, None, None, :]
    ph = jnp.arange(pooled_h, dtype=jnp.float32)[None, None, :, None]
    wstart = pw * bin_w + x_l[:, None, None, None]  # (R, 1, 1, PW)
    hstart = ph * bin_h + y_l[:, None, None, None]  # (R, 1, PH, 1)
    if not no_trans:
        num_cls = trans.shape[1] // 2
        cls = np.arange(channels) // (channels // num_cls)
        # (megdnn's float32 arithmetic: floor(float(p) / pooled * part_size))
        part_h = np.floor(np.arange(pooled_h, dtype=np.float32) / np.float32(pooled_h) * np.float32(part_size))
        part_w = np.floor(np.arange(pooled_w, dtype=np.float32) / np.float32(pooled_w) * np.float32(part_size))
        r = np.arange(rois.shape[0])[:, None, None, None]
        at = ((r * num_cls + cls[None, :, None, None]) * 2 * part_size * part_size
              + part_h.astype(np.int64)[None, None, :, None] * part_size + part_w.astype(np.int64)[None, None, None, :])
        flat = trans.astype(jnp.float32).reshape(-1)
        tx = flat[at] * trans_std  # (R, C, PH, PW)
        ty = flat[at + part_size * part_size] * trans_std
        wstart = wstart + tx * roi_w
        hstart = hstart + ty * roi_h
    wstart = jnp.broadcast_to(wstart, (rois.shape[0], channels, pooled_h, pooled_w))
    hstart = jnp.broadcast_to(hstart, wstart.shape)
    step = jnp.arange(s, dtype=jnp.float32)
    w = wstart[..., None, None] + step[None, :] * (bin_w / s)[..., None, None]  # (R, C, PH, PW, S(h), S(w))
    h = hstart[..., None, None] + step[:, None] * (bin_h / s)[..., None, None]
    w, h = jnp.broadcast_arrays(w, h)
    valid = (w >= -0.5) & (w <= width - 0.5) & (h >= -0.5) & (h <= height - 0.5)
    w = jnp.clip(w, 0.0, width - 1.0)
    h = jnp.clip(h, 0.0, height - 1.0)
    w1, h1 = jnp.floor(w), jnp.floor(h)
    w2, h2 = jnp.ceil(w), jnp.ceil(h)
    dw, dh = w - w1, h - h1
    feat = data.astype(jnp.float32)[batch].reshape(rois.shape[0], channels, height * width)

    def at(hh, ww):
        idx = (hh.astype(jnp.int32) * width + ww.astype(jnp.int32)).reshape(rois.shape[0], channels, -1)
        return jnp.take_along_axis(feat, idx, axis=2).reshape(hh.shape)

    val = ((1 - dw) * (1 - dh) * at(h1, w1) + (1 - dw) * dh * at(h2, w1) + dw * (1 - dh) * at(h1, w2)
           + dw * dh * at(h2, w2))
    total = jnp.sum(jnp.where(valid, val, 0.0), axis=(-2, -1))
    count = jnp.sum(valid, axis=(-2, -1))
    out = jnp.where(count > 0, total / jnp.maximum(count, 1), 0.0)
    return out.astype(data.dtype)


# (with ``no_trans`` the offsets are not read: MegEngine gives them no gradient, ``trans.grad`` stays None)
deformable_psroi_pooling = Primitive("deformable_psroi_pooling", _deformable_psroi_pooling,
                                     nondiff_inputs=lambda params, given: {1, 2} if params["no_trans"] else {1})
