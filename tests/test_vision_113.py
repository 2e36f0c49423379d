"""MegEngine 1.13.4's ``F.vision.flip`` / ``rot90`` / ``rotate`` and the layers of ``megengine.module.vision``
(``Flip``, ``RandomHorizontalFlip``, ``RandomVerticalFlip``, ``Resize``, ``Rot90``, ``Rotate``).

Forward vs NumPy, gradients and eager vs compiled of the functions are in the op table (``tests/test_optable_nn.py``,
``functional.vision.flip`` / ``rot90`` / ``rotate``); here: MegEngine's upstream tests, dtypes, errors and layers.
"""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.module.vision as MV
from megxla import tensor
from megxla.autodiff import GradManager
from megxla.core._dispatch import AssertedOpError, OpError


def np_rotate_nchw(x, angle):
    """Bilinear rotation about the image centre with a zero border, one pixel at a time (float64)."""
    a = np.deg2rad(angle)
    c, s = np.cos(a), np.sin(a)
    n, ch, h, w = x.shape
    cx, cy = (w - 1) / 2, (h - 1) / 2
    out = np.zeros(x.shape)

    def tap(b, yy, xx):
        return x[b, :, yy, xx] if 0 <= yy < h and 0 <= xx < w else np.zeros(ch)

    for b, i, j in np.ndindex(n, h, w):
        sx = c * (j - cx) - s * (i - cy) + cx
        sy = s * (j - cx) + c * (i - cy) + cy
        y0, x0 = int(np.floor(sy)), int(np.floor(sx))
        fy, fx = sy - y0, sx - x0
        out[b, :, i, j] = ((1 - fy) * (1 - fx) * tap(b, y0, x0) + (1 - fy) * fx * tap(b, y0, x0 + 1)
                           + fy * (1 - fx) * tap(b, y0 + 1, x0) + fy * fx * tap(b, y0 + 1, x0 + 1))
    return out


# ---- MegEngine's upstream tests (imperative/python/test/unit/functional/test_functional.py, v1.13.4) -------------
def test_flip():
    inp_shape = (1, 4, 4, 1)
    inp = np.arange(16, dtype=np.float32).reshape(inp_shape)
    x = tensor(inp)
    y = F.vision.flip(x, True, True)
    out = np.flip(inp, axis=(1, 2))
    np.testing.assert_allclose(y.numpy(), out, atol=1e-5)


@pytest.mark.parametrize("clockwise", [True, False])
def test_rot90(clockwise):
    inp_shape = (1, 4, 4, 1)
    inp = np.arange(16, dtype=np.float32).reshape(inp_shape)
    x = tensor(inp)
    y = F.vision.rot90(x, clockwise=clockwise)
    if clockwise:
        out = np.rot90(inp, 3, (1, 2,),)
    else:
        out = np.rot90(inp, 1, (1, 2,),)
    np.testing.assert_allclose(y.numpy(), out, atol=1e-5)


# ---- flip / rot90 ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int8", "uint8"])
@pytest.mark.parametrize("vertical, horizontal", [(True, True), (True, False), (False, True), (False, False)])
def test_flip_flags_and_dtypes(dtype, vertical, horizontal):
    x = np.random.default_rng(0).integers(0, 100, (2, 3, 5, 3)).astype(dtype)
    y = F.vision.flip(tensor(x), vertical, horizontal)
    axes = ((1,) if vertical else ()) + ((2,) if horizontal else ())
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y.numpy(), np.flip(x, axes))


def test_flip_without_flags_is_a_new_tensor():
    x = tensor(np.ones((1, 2, 2, 1), np.float32))
    y = F.vision.flip(x, False, False)
    assert y is not x
    np.testing.assert_array_equal(y.numpy(), x.numpy())


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8"])
@pytest.mark.parametrize("clockwise", [True, False])
def test_rot90_shapes_and_dtypes(dtype, clockwise):
    x = np.random.default_rng(1).integers(0, 100, (2, 3, 5, 1)).astype(dtype)
    y = F.vision.rot90(tensor(x), clockwise)
    assert y.shape == (2, 5, 3, 1) and y.dtype == x.dtype
    np.testing.assert_array_equal(y.numpy(), np.rot90(x, 3 if clockwise else 1, (1, 2)))
    # the two directions undo each other; four quarter turns are the identity
    back = F.vision.rot90(y, not clockwise)
    np.testing.assert_array_equal(back.numpy(), x)
    z = tensor(x)
    for _ in range(4):
        z = F.vision.rot90(z, clockwise)
    np.testing.assert_array_equal(z.numpy(), x)


def test_rot90_matches_megdnn_index_rule():
    # megdnn's naive kernel, transcribed: clockwise ow = IH - ih - 1, oh = iw; else ow = ih, oh = IW - iw - 1
    x = np.arange(2 * 3 * 4 * 3, dtype=np.float32).reshape(2, 3, 4, 3)
    for clockwise in (True, False):
        want = np.zeros((2, 4, 3, 3), np.float32)
        for n, ih, iw in np.ndindex(2, 3, 4):
            ow = 3 - ih - 1 if clockwise else ih
            oh = iw if clockwise else 4 - iw - 1
            want[n, oh, ow] = x[n, ih, iw]
        np.testing.assert_array_equal(F.vision.rot90(tensor(x), clockwise).numpy(), want)


@pytest.mark.parametrize("fn", [F.vision.flip, F.vision.rot90])
@pytest.mark.parametrize("shape", [(2, 2, 3), (1, 2, 2, 2), (1, 2, 2, 4), (1, 1, 2, 2, 1)])
def test_flip_rot90_need_nhwc_with_1_or_3_channels(fn, shape):
    with pytest.raises(OpError, match=rf"{fn.__name__}: .*{shape}"):
        fn(F.ones(shape))


@pytest.mark.parametrize("fn", [F.vision.flip, F.vision.rot90])
def test_flip_rot90_reject_bool(fn):
    with pytest.raises(OpError, match=rf"{fn.__name__}: .*bool"):
        fn(tensor(np.ones((1, 2, 2, 1), bool)))


def test_flip_rot90_gradients_move_back():
    x = tensor(np.arange(12, dtype=np.float32).reshape(1, 2, 2, 3))
    w = np.random.default_rng(2).normal(size=(1, 2, 2, 3)).astype(np.float32)
    gm = GradManager().attach([x])
    with gm:
        loss = ((F.vision.flip(x, True, False) * tensor(w)).sum()
                + (F.vision.rot90(x) * tensor(np.rot90(w, 3, (1, 2)))).sum())
        gm.backward(loss)
    np.testing.assert_allclose(x.grad.numpy(), np.flip(w, 1) + w, rtol=1e-6)


# ---- rotate -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("angle", [0.0, 30.0, -45.0, 90, 137.5, 180.0, 400.0])
def test_rotate_vs_numpy(angle):
    x = np.random.default_rng(3).normal(size=(1, 2, 5, 6)).astype(np.float32)
    y = F.vision.rotate(tensor(x), angle)
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), np_rotate_nchw(x, angle), rtol=1e-4, atol=2e-5)


def test_rotate_quarter_turn_and_identity():
    x = np.random.default_rng(4).normal(size=(1, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(F.vision.rotate(tensor(x)).numpy(), x, rtol=1e-6)  # angle 0 (the default)
    # a positive angle turns the image counterclockwise on screen: np.rot90(k=1) of a square image
    np.testing.assert_allclose(F.vision.rotate(tensor(x), 90.0).numpy(), np.rot90(x, 1, (2, 3)), atol=1e-5)
    np.testing.assert_allclose(F.vision.rotate(tensor(x), -90.0).numpy(), np.rot90(x, 3, (2, 3)), atol=1e-5)


def test_rotate_dtypes():
    x = np.random.default_rng(5).integers(0, 256, (1, 1, 4, 5)).astype(np.uint8)
    y = F.vision.rotate(tensor(x), 25.0)
    assert y.dtype == np.uint8  # 8-bit images: sampled in float32, rounded and saturated back (warp_affine's rule)
    want = np.clip(np.round(np_rotate_nchw(x.astype(np.float32), 25.0)), 0, 255)
    assert np.abs(y.numpy().astype(int) - want).max() <= 1
    h = F.vision.rotate(tensor(x.astype(np.float16)), 25.0)
    assert h.dtype == np.float16
    np.testing.assert_allclose(h.numpy().astype(np.float32), np_rotate_nchw(x.astype(np.float32), 25.0),
                               rtol=2e-2, atol=0.5)


def test_rotate_angle_tensor_and_its_gradient():
    x = tensor(np.random.default_rng(6).normal(size=(1, 1, 5, 5)).astype(np.float32))
    a = tensor(23.7)
    np.testing.assert_allclose(F.vision.rotate(x, a).numpy(), F.vision.rotate(x, 23.7).numpy(), rtol=1e-5,
                               atol=1e-6)  # (a Tensor angle is converted to radians in float32)
    gm = GradManager().attach([a])
    with gm:
        gm.backward(F.vision.rotate(x, a).sum())
    # (an angle whose samples miss the pixel grid: at 30 degrees, sin = 1/2 puts whole columns of samples on
    # integer coordinates, the kinks of bilinear interpolation, where the derivative is one-sided)
    eps = 0.01
    num = (np_rotate_nchw(x.numpy(), 23.7 + eps).sum() - np_rotate_nchw(x.numpy(), 23.7 - eps).sum()) / (2 * eps)
    np.testing.assert_allclose(a.grad.numpy(), num, rtol=1e-2, atol=1e-4)


def test_rotate_bad_arguments():
    x = F.ones((1, 1, 3, 3))
    # MegEngine asserts the interpolation mode of each format
    with pytest.raises(AssertionError, match="rotate: .*bilinear"):
        F.vision.rotate(x, 10.0, "NCHW", "linear")
    with pytest.raises(AssertedOpError, match="rotate: .*area"):
        F.vision.rotate(F.ones((1, 3, 3, 1)), 10.0, "NHWC", "bilinear")
    # NHWC + area: MegEngine 1.13's WarpAffine rejects AREA for NHWC (a MegBrainError, a RuntimeError)
    with pytest.raises(RuntimeError, match="rotate: .*NHWC"):
        F.vision.rotate(F.ones((1, 3, 3, 1)), 10.0, "NHWC", "area")
    with pytest.raises(OpError, match="rotate: format"):
        F.vision.rotate(x, 10.0, "nchw")
    with pytest.raises(OpError, match=r"rotate: .*\(2, 1, 3, 3\)"):  # one matrix: a single image
        F.vision.rotate(F.ones((2, 1, 3, 3)), 10.0)
    with pytest.raises(OpError, match=r"rotate: .*\(1, 3, 3\)"):
        F.vision.rotate(F.ones((1, 3, 3)), 10.0)
    with pytest.raises(OpError, match="rotate: .*int32"):
        F.vision.rotate(tensor(np.ones((1, 1, 3, 3), np.int32)), 10.0)


# ---- layers -------------------------------------------------------------------------------------------------------
def test_exports_match_megengine():
    # megengine.module exports Flip, Resize, Rot90 and Rotate; the random flips live in megengine.module.vision
    for name in ("Flip", "Resize", "Rot90", "Rotate"):
        assert getattr(M, name) is getattr(MV, name) and name in M.__all__
    for name in ("RandomHorizontalFlip", "RandomVerticalFlip"):
        assert not hasattr(M, name) and name in MV.__all__
    for name in MV.__all__:
        assert issubclass(getattr(MV, name), M.Module)
    for name in ("flip", "rot90", "rotate"):
        assert name in F.vision.__all__
    assert F.flip is not F.vision.flip  # F.flip stays the n-d tensor flip


def test_deterministic_layers_match_functions():
    x = tensor(np.random.default_rng(7).normal(size=(2, 3, 4, 3)).astype(np.float32))
    for v, h in ((True, True), (False, True), (True, False)):
        m = M.Flip(vertical=v, horizontal=h)
        assert (m.vertical, m.horizontal) == (v, h)
        np.testing.assert_array_equal(m(x).numpy(), F.vision.flip(x, v, h).numpy())
    assert M.Flip().vertical and M.Flip().horizontal
    for cw in (True, False):
        np.testing.assert_array_equal(M.Rot90(cw)(x).numpy(), F.vision.rot90(x, cw).numpy())
    assert M.Rot90().clockwise is True
    img = tensor(np.random.default_rng(8).normal(size=(1, 2, 5, 4)).astype(np.float32))
    r = M.Rotate(33.0)
    assert (r.angle, r.format, r.interp_mode) == (33.0, "NCHW", "bilinear")
    np.testing.assert_array_equal(r(img).numpy(), F.vision.rotate(img, 33.0).numpy())
    np.testing.assert_array_equal(M.Rotate()(img).numpy(), F.vision.rotate(img).numpy())


def test_resize_layer():
    x = tensor(np.arange(0, 16, dtype=np.float32).reshape(1, 1, 4, 4))
    m = M.Resize(tensor([2, 2]))
    assert isinstance(m.size, mge.Tensor) and (m.format, m.imode) == ("NCHW", "linear")
    np.testing.assert_allclose(m(x).numpy(), [[[[2.5, 4.5], [10.5, 12.5]]]])  # MegEngine's docstring example
    np.testing.assert_array_equal(M.Resize((3, 5), imode="nearest")(x).numpy(),
                                  F.vision.resize(x, (3, 5), imode="nearest").numpy())
    xh = tensor(np.random.default_rng(9).normal(size=(2, 4, 6, 3)).astype(np.float32))
    y = M.Resize([3, 2], format="NHWC")(xh)
    assert y.shape == (2, 3, 2, 3)
    np.testing.assert_allclose(y.numpy(), F.vision.resize(xh, (3, 2), "NHWC").numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError, match="Resize: .*NCWH"):
        M.Resize((2, 2), format="NCWH")(x)


@pytest.mark.parametrize("layer", [M.Flip(), M.Rot90(), M.Rotate(), M.Resize((2, 2))])
def test_layers_assert_a_tensor_input(layer):
    with pytest.raises(AssertionError, match="expected input is megengine.Tensor"):
        layer(np.ones((1, 1, 3, 3), np.float32))


@pytest.mark.parametrize("cls", [MV.RandomHorizontalFlip, MV.RandomVerticalFlip])
def test_random_flips_draw_as_megengine(cls):
    x = tensor(np.arange(2 * 3 * 4 * 3, dtype=np.float32).reshape(2, 3, 4, 3))
    m = cls(prob=0.3)
    assert cls().prob == 0.5
    np.random.seed(123)
    outs = [m(x) for _ in range(20)]
    np.random.seed(123)
    decisions = [bool(np.random.rand(1) < 0.3) for _ in range(20)]  # MegEngine: one np.random.rand(1) per call
    assert 0 < sum(decisions) < 20
    # MegEngine 1.13's forward leaves the other flag at flip's default True: a flipped image is flipped both ways
    flipped = np.flip(x.numpy(), (1, 2))
    for out, d in zip(outs, decisions):
        if d:
            np.testing.assert_array_equal(out.numpy(), flipped)
        else:
            assert out is x
    assert cls(prob=0.0)(x) is x
    np.testing.assert_array_equal(cls(prob=1.0)(x).numpy(), flipped)


def test_resize_takes_megengine_1_13_4s_arguments():
    from megxla import Tensor
    """``F.vision.resize(inp, size, format, imode="bilinear", max_size=None)`` (MegEngine 1.13.4): its mode names
    (``bilinear`` / ``bicubic``, and the op's ``linear`` / ``cubic``), a size Tensor, and ``max_size`` clamping
    each side, as MegEngine does."""
    x = Tensor(np.arange(0, 16, dtype=np.float32).reshape(1, 1, 4, 4))
    want = np.array([[[[2.5, 4.5], [10.5, 12.5]]]], "float32")
    for imode in ("bilinear", "linear"):
        np.testing.assert_allclose(F.vision.resize(x, Tensor([2, 2]), imode=imode).numpy(), want)
    np.testing.assert_allclose(F.vision.resize(x, (3, 5), imode="bicubic").numpy(),
                               F.vision.resize(x, (3, 5), imode="cubic").numpy())
    assert F.vision.resize(x, (6, 3), max_size=5).shape == (1, 1, 5, 3)
    assert F.vision.resize(x.transpose(0, 2, 3, 1), 3, format="NHWC").shape == (1, 3, 3, 1)


def test_warp_affine_of_a_1_to_3_channel_nhwc_image_rounds_its_coordinates_as_megdnns_opencv_kernel():
    # MegEngine's own test_warp_affine (its CPU numbers): the source coordinates rounded to 1/32 of a pixel
    x = mge.Tensor(np.arange(27, dtype=np.float32).reshape(1, 3, 3, 3))
    weightv = [[[1.26666667, 0.6, -83.33333333], [-0.33333333, 1, 66.66666667]]]
    out = F.vision.warp_affine(x, mge.Tensor(weightv), (2, 2), border_mode="wrap")
    want = np.array([[[[7.875, 8.875, 9.875], [8.90625, 9.90625, 10.90625]],
                      [[18.75, 19.75, 20.75], [14.90625, 15.90625, 16.90625]]]], np.float32)
    np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=1e-5)
    # four channels go through megdnn's float kernel: exact coordinates (8.0 where three channels give 7.875)
    x4 = mge.Tensor(np.arange(36, dtype=np.float32).reshape(1, 3, 3, 4) / 4 * 3)
    assert abs(float(F.vision.warp_affine(x4, mge.Tensor(weightv), (2, 2), border_mode="wrap")[0, 0, 0, 0]) - 8.0) < 1e-4
    # the gradient wrt the image is that of the rounded sampling (the op is linear in it)
    img = mge.Parameter(np.random.RandomState(0).rand(1, 4, 5, 3).astype("float32"))
    mat = mge.Parameter(np.array([[[0.83, 0.31, 0.4], [-0.27, 1.13, 0.2]]], np.float32))
    dy = np.random.RandomState(1).rand(1, 3, 3, 3).astype("float32")
    gm = GradManager().attach([img, mat])
    with gm:
        gm.backward(F.vision.warp_affine(img, mat, (3, 3)), mge.Tensor(dy))
    base = img.numpy()
    numeric = np.zeros_like(base)
    for idx in np.ndindex(base.shape):
        e = np.zeros_like(base)
        e[idx] = 1.0
        numeric[idx] = (F.vision.warp_affine(mge.Tensor(e), mat, (3, 3)).numpy() * dy).sum()
    np.testing.assert_allclose(img.grad.numpy(), numeric, rtol=1e-5, atol=1e-6)
    assert np.isfinite(mat.grad.numpy()).all() and np.abs(mat.grad.numpy()).sum() > 0


def test_an_int8_nhwc_image_warps_at_exact_coordinates_as_megdnns_float_kernel():
    # megdnn's OpenCV kernel takes float32 and uint8 images only: an int8 one is sampled at exact coordinates
    weightv = mge.Tensor([[[1.26666667, 0.6, -83.33333333], [-0.33333333, 1, 66.66666667]]])
    img = np.arange(27).reshape(1, 3, 3, 3) * 4
    i8 = F.vision.warp_affine(mge.Tensor(img.astype("int8")), weightv, (2, 2), border_mode="wrap")
    u8 = F.vision.warp_affine(mge.Tensor(img.astype("uint8")), weightv, (2, 2), border_mode="wrap")
    assert i8.dtype == np.int8 and u8.dtype == np.uint8
    # at output (0, 1): 35.2 at the exact coordinates, 35.625 at the rounded ones
    assert i8.numpy()[0, 0, 1, 0] == 35 and u8.numpy()[0, 0, 1, 0] == 36
    f32 = F.vision.warp_affine(mge.Tensor((img // 4).astype("float32")), weightv, (2, 2), border_mode="wrap").numpy()
    f16 = F.vision.warp_perspective(mge.Tensor((img // 4).astype("float16")), F.concat(
        [weightv, mge.Tensor([[[0.0, 0.0, 1.0]]])], 1), (2, 2), border_mode="wrap", format="NHWC").numpy()
    assert f32[0, 0, 0, 0] == 7.875 and abs(float(f16[0, 0, 0, 0]) - 7.875) < 1e-3
