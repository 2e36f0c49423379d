"""Same program, same numbers: each test is one place where megxla follows MegEngine 1.13's observable behaviour
(issues 11 and 20). Each is written as "MegEngine gives X", with the value MegEngine 1.13.0 (CPU) prints."""
import pickle
import warnings

import jax
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
from megxla import Tensor, Parameter
from megxla.autodiff import GradManager
from megxla.core._dispatch import OpError

NAN = float("nan")


# ---- repr and devices (issue 20) ------------------------------------------------------------------------------
def test_repr_omits_float32_and_shows_logical_device():
    # MegEngine gives: Tensor([1. 2. 3.], device=xpux:0)
    assert repr(Tensor([1.0, 2.0, 3.0])) == "Tensor([1. 2. 3.], device=xpux:0)"
    # MegEngine gives: Tensor([1 2 3], dtype=int32, device=xpux:0)
    assert repr(Tensor([1, 2, 3])) == "Tensor([1 2 3], dtype=int32, device=xpux:0)"
    # MegEngine prints arrays at 4 digits: Tensor([0.3333], device=xpux:0); a 0-d value as NumPy's scalar str
    assert repr(Tensor([1 / 3])) == "Tensor([0.3333], device=xpux:0)"
    assert repr(Tensor(2.5)) == "Tensor(2.5, device=xpux:0)"
    assert str(Tensor([True])) == "Tensor([ True], dtype=bool, device=xpux:0)"


def test_parameter_repr():
    # MegEngine gives: Parameter([0 0 1 1], dtype=int32, device=xpux:0)
    assert repr(Parameter([0, 0, 1, 1])) == "Parameter([0 0 1 1], dtype=int32, device=xpux:0)"


def test_device_is_a_compnode():
    x = Tensor([1.0])
    # MegEngine gives: CompNode("cpu0:0" from "xpux:0") on a CPU machine, "gpu0:0" from "xpux:0" with a GPU
    phys = "gpu0" if jax.default_backend() == "gpu" else "cpu0"
    assert repr(x.device) == f'CompNode("{phys}:0" from "xpux:0")'
    assert str(x.device) == "xpux:0"
    assert x.device.logical_name == "xpux:0" and x.device.physical_name == f"{phys}:0"
    # MegEngine compares logical names: on "xpux", not on "cpu0" (though xpux resolves to it)
    assert x.device == "xpux" and x.device == "xpux:0" and x.device != phys and x.device != f"{phys}:0"
    assert x.to(phys).device == phys and x.to(phys).device == f"{phys}:0" and x.to(phys).device != x.device
    assert x.device == Tensor([2]).device and hash(x.device) == hash(Tensor([2]).device)
    assert pickle.loads(pickle.dumps(x.device)) == x.device
    # a CompNode is accepted wherever a device name is
    assert Tensor([1.0], device=x.device).device == x.device


@pytest.mark.parametrize("name", ["xpux", "cpux", "cpu0", "cpu0:1", "xpu0", "cpu:default", "multithread2:0",
                                  "CPU0"])
def test_device_spellings_accepted(name):
    assert Tensor([1.0], device=name).numpy()[0] == 1.0


def test_bad_device_name_names_the_forms():
    with pytest.raises(ValueError, match="invalid device name"):
        Tensor([1.0], device="tpu7x")
    with pytest.raises(ValueError, match="does not exist"):
        Tensor([1.0], device="gpu9")  # (a cpuN always exists: MegEngine's logical CPU devices)


def test_default_device_naming():
    # MegEngine gives: 'xpux' until set_default_device names another
    assert mge.get_default_device() == "xpux"
    try:
        mge.set_default_device("cpux")
        assert mge.get_default_device() == "cpux"
        # MegEngine gives: CompNode("cpu0:0" from "cpux:0")
        assert repr(Tensor([1.0]).device) == 'CompNode("cpu0:0" from "cpux:0")'
        with pytest.raises(ValueError):
            mge.set_default_device("nonsense")
        assert mge.get_default_device() == "cpux"  # a bad name leaves the setting unchanged
    finally:
        mge.set_default_device()
    assert mge.get_default_device() == "xpux"


# ---- dtr (issue 20) --------------------------------------------------------------------------------------------
def test_dtr_api_units_and_jit_hook():
    dtr = mge.dtr
    old = dtr.eviction_threshold, dtr.evictee_minimum_size
    try:
        dtr.eviction_threshold = "2GB"
        assert dtr.eviction_threshold == 2 * 1024 ** 3  # MegEngine gives 2147483648
        dtr.evictee_minimum_size = "2MB"
        assert dtr.evictee_minimum_size == 2 * 1024 ** 2
        dtr.eviction_threshold = 12345
        assert dtr.eviction_threshold == 12345
        with pytest.raises(TypeError):
            dtr.eviction_threshold = 1.5
        with pytest.raises(ValueError, match="units"):
            dtr.eviction_threshold = "2 parsecs"
        assert dtr.eviction_threshold == 12345
        assert not dtr.is_enabled() and dtr.config() is None
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            dtr.enable()
            dtr.enable()
        assert dtr.is_enabled()
        assert sum("per-tensor eviction" in str(x.message) for x in w) <= 1
        assert dtr.config().eviction_threshold == 12345
        from megxla.jit import trace
        assert trace(lambda x: x * 2).remat  # compiled steps built now rematerialise
        dtr.disable()
        assert not trace(lambda x: x * 2).remat
    finally:
        dtr.disable()
        dtr.eviction_threshold, dtr.evictee_minimum_size = old


def test_dtr_enabled_trace_gives_same_numbers():
    from megxla.jit import trace
    w = Parameter(np.arange(6, dtype="float32").reshape(2, 3) / 10)
    gm = GradManager().attach([w])
    x = Tensor(np.ones((4, 2), "float32"))

    def step(x):
        with gm:
            loss = F.sum(F.sin(F.matmul(x, w)) ** 2)
            gm.backward(loss)
        return loss

    want = step(x).numpy(), w.grad.numpy()
    w.grad = None
    mge.dtr.enable()
    try:
        fn = trace(step, symbolic=True)
    finally:
        mge.dtr.disable()
    for _ in range(3):
        w.grad = None
        got = fn(x)
    np.testing.assert_allclose(got.numpy(), want[0], rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), want[1], rtol=1e-6)


# ---- state_dict, arange, topk, inplace (issue 20) --------------------------------------------------------------
def test_state_dict_arrays_are_read_only():
    bn = M.BatchNorm2d(2)
    sd = bn.state_dict()
    # MegEngine gives: ValueError: assignment destination is read-only
    with pytest.raises(ValueError, match="read-only"):
        sd["bias"][0] = 1
    lin = M.Linear(2, 3)
    with pytest.raises(ValueError, match="read-only"):
        lin.state_dict()["weight"][0, 0] = 1
    assert lin.state_dict()["weight"].shape == (3, 2)
    lin.load_state_dict({k: v.copy() for k, v in lin.state_dict().items()})


def test_arange_length_in_float32():
    # MegEngine gives 12 elements (float64 arithmetic would give 13)
    assert F.arange(7.8, 8.4, 0.05).shape == (12,)
    np.testing.assert_array_equal(F.arange(5).numpy(), [0, 1, 2, 3, 4])
    assert F.arange(1, 10, 3, dtype="int32").numpy().tolist() == [1, 4, 7]
    assert F.arange(10, 1, -3).numpy().tolist() == [10, 7, 4]
    assert F.arange(3, 1).shape == (0,)


def test_arange_float64_raises():
    # MegEngine raises: it has no float64 tensors
    with pytest.raises(OpError, match="float64"):
        F.arange(2, 10, dtype="float")


def test_topk_clamps_k():
    # MegEngine gives the whole (sorted) axis for k larger than it
    v, i = F.topk(Tensor([2.0, 5.0, 1.0]), 2000)
    assert v.numpy().tolist() == [5.0, 2.0, 1.0] and i.numpy().tolist() == [1, 0, 2]
    v, i = F.topk(Tensor([[4.0, 1.0, 3.0, 2.0]]), 9, descending=False)
    assert v.numpy().tolist() == [[1.0, 2.0, 3.0, 4.0]]
    with pytest.raises(OpError, match="at least 1"):
        F.topk(Tensor([1.0]), 0)


def test_functional_inplace_add():
    from megxla.functional.inplace import _inplace_add_
    d = Tensor([1.0, 2.0])
    same = _inplace_add_(d, Tensor([10.0, 10.0]), alpha=Tensor(0.5), beta=Tensor(2.0))
    assert same is d
    # MegEngine gives: alpha * dest + beta * delta
    assert d.numpy().tolist() == [20.5, 21.0]
    with pytest.raises(OpError, match="shape"):
        _inplace_add_(d, Tensor(np.ones((3, 2), "float32")), 1.0, 1.0)
    assert d.numpy().tolist() == [20.5, 21.0]


# ---- values and dtypes (issue 11) ------------------------------------------------------------------------------
def test_integer_mod_is_floor_mod():
    # MegEngine gives -7 % 3 == 2 and 7 % -3 == -2 for integers (Python semantics)
    assert (Tensor([-7, 7]) % 3).numpy().tolist() == [2, 1]
    assert F.mod(Tensor([7]), Tensor([-3])).numpy().tolist() == [-2]
    assert (10 % Tensor([-3])).numpy().tolist() == [-2]
    # float MOD stays C's fmod: MegEngine gives -1.0
    assert (Tensor([-7.0]) % 3).numpy().tolist() == [-1.0]


@pytest.mark.parametrize("fn", [lambda b: b + 1, lambda b: 1 + b, lambda b: b - 1, lambda b: 1 - b, lambda b: b * 2,
                                lambda b: 2 * b, lambda b: b // 1, lambda b: 3 // (b + True), lambda b: b % 2,
                                lambda b: 5 % (b + True)])
def test_bool_with_python_int_is_float32(fn):
    # MegEngine gives float32
    assert fn(Tensor([True, False])).dtype == np.float32


def test_mixed_dtype_promotion():
    # MegEngine gives float32 for int32 + float16
    assert (Tensor([1], dtype="int32") + Tensor([1.0], dtype="float16")).dtype == np.float32
    assert (Tensor([1.0], dtype="float16") * Tensor([True])).dtype == np.float32
    assert (Tensor([1.0], dtype="float16") + Tensor([1.0], dtype="float16")).dtype == np.float16
    assert (Tensor([1], dtype="int8") + Tensor([1], dtype="int16")).dtype == np.int16
    assert (Tensor([1], dtype="int8") + 1).dtype == np.int8
    # MegEngine raises for uint8 + int32; megxla gives the unambiguous int32 (docs/differences.md)
    assert (Tensor([1], dtype="uint8") + Tensor([1], dtype="int32")).dtype == np.int32


def test_clip_int_with_float_bounds_is_float32():
    # MegEngine gives Tensor([0.5 1.  2.5], device=xpux:0)
    out = F.clip(Tensor([0, 1, 3]), 0.5, 2.5)
    assert out.dtype == np.float32 and out.numpy().tolist() == [0.5, 1.0, 2.5]
    assert F.clip(Tensor([0, 1, 3]), 1, 2).dtype == np.int32


def test_mean_of_float16_is_float32():
    # MegEngine gives float32
    assert F.mean(Tensor([1.0, 2.0], dtype="float16")).dtype == np.float32
    assert Tensor([1.0, 2.0], dtype="float16").mean().dtype == np.float32


def test_size_of_0d_tensor():
    # MegEngine gives 1.0 (np.prod(()).item())
    s = Tensor(3.0).size
    assert s == 1 and isinstance(s, float)
    assert Tensor([[1, 2, 3]]).size == 3


def test_nan_in_relu_sign_maximum():
    # MegEngine gives relu(nan) == 0, sign(nan) == 0, maximum(1, nan) == 1
    assert F.relu(Tensor([NAN, -1.0, 2.0])).numpy().tolist() == [0.0, 0.0, 2.0]
    assert F.sign(Tensor([NAN, -2.0, 0.0])).numpy().tolist() == [0.0, -1.0, 0.0]
    assert F.maximum(Tensor([1.0]), Tensor([NAN])).numpy().tolist() == [1.0]
    assert F.minimum(Tensor([NAN]), Tensor([1.0])).numpy().tolist() == [1.0]


def test_conv2d_bias_broadcasts_as_megengine():
    x, w = F.ones((1, 2, 3, 3)), F.ones((3, 2, 2, 2))
    # MegEngine adds with `output += bias`: a (C,) bias lines up with the last axis (here W == 2)
    out = F.conv2d(x, w, Tensor([1.0, 2.0])).numpy()
    assert out.shape == (1, 3, 2, 2) and out[0, :, :, 0].tolist() == [[9.0] * 2] * 3 and out[0, 0, 0, 1] == 10
    # the (1, C, 1, 1) bias is per channel
    out = F.conv2d(x, w, Tensor(np.arange(3, dtype="float32").reshape(1, 3, 1, 1))).numpy()
    assert out[0, :, 0, 0].tolist() == [8.0, 9.0, 10.0]
    # MegEngine raises for a (C,) bias that does not broadcast against W
    with pytest.raises(OpError, match="broadcast"):
        F.conv2d(x, w, Tensor([1.0, 2.0, 3.0]))


def test_int_inputs_converted_for_conv_and_norm():
    # MegEngine gives float32 results
    out = F.conv2d(Tensor(np.ones((1, 1, 3, 3), "int32")), Tensor(np.ones((1, 1, 2, 2), "int32")))
    assert out.dtype == np.float32 and out.numpy().ravel().tolist() == [4.0] * 4
    n = F.norm(Tensor([3, 4]))
    assert n.dtype == np.float32 and n.item() == 5.0


# ---- gradients (issue 11) --------------------------------------------------------------------------------------
def test_max_min_ties_give_full_gradient():
    # MegEngine gives every tied maximum the whole gradient: [0, 1, 1, 0]
    x = Parameter([1.0, 3.0, 3.0, 2.0])
    gm = GradManager().attach(x)
    with gm:
        gm.backward(F.max(x))
    assert x.grad.numpy().tolist() == [0.0, 1.0, 1.0, 0.0]
    x = Parameter([[1.0, 3.0], [3.0, 3.0]])
    gm = GradManager().attach(x)
    with gm:
        gm.backward(F.sum(F.min(x, axis=1, keepdims=True) * Tensor([[1.0], [2.0]])))
    assert x.grad.numpy().tolist() == [[1.0, 0.0], [2.0, 2.0]]


# ---- tuples, F.nn aliases, accepted inputs (issue 11) ----------------------------------------------------------
def test_split_and_meshgrid_return_tuples():
    # MegEngine gives tuples
    parts = F.split(Tensor([1, 2, 3, 4]), 2)
    assert isinstance(parts, tuple) and [p.numpy().tolist() for p in parts] == [[1, 2], [3, 4]]
    grids = F.meshgrid(Tensor([1, 2]), Tensor([3, 4, 5]))
    assert isinstance(grids, tuple) and grids[0].shape == (3, 2)


def test_vision_functions_under_f_nn():
    # MegEngine's functional/nn.py re-exports vision, loss and metric functions
    for name in ("interpolate", "roi_align", "roi_pooling", "nms", "correlation", "cvt_color", "remap",
                 "warp_affine", "warp_perspective", "cross_entropy", "topk_accuracy"):
        assert callable(getattr(F.nn, name)), name
    assert F.nn.interpolate is F.vision.interpolate


def test_a_static_index_means_one_op_per_shape_and_a_bad_one_raises_every_time():
    # getitem / setitem keep the parsed op of an index of ints, slices, None and ... by (index, shape): the same
    # index on another shape is another op, and an index out of range is parsed -- and raises -- every time
    for n in (3, 5, 3):
        x = Tensor(np.arange(n, dtype="float32"))
        assert x[-1].item() == n - 1 and x[1:].shape == (n - 1,) and x[None, ..., ::2].shape == (1, (n + 1) // 2)
        y = Tensor(np.zeros((n, 2), "float32"))
        y[-1, :] = 1.0
        y[0] = Tensor([2.0, 3.0])
        assert y.numpy().tolist() == [[2.0, 3.0]] + [[0.0, 0.0]] * (n - 2) + [[1.0, 1.0]]
    for _ in range(2):
        with pytest.raises(ValueError, match="getitem: index 3 is out of range for axis 0 of size 3"):
            Tensor(np.zeros(3, "float32"))[3]
        t = Tensor(np.zeros(3, "float32"))
        with pytest.raises(ValueError, match="setitem: index -4 is out of range for axis 0 of size 3"):
            t[-4] = 1.0
        assert t.numpy().tolist() == [0.0, 0.0, 0.0]
    # a bool is an index of its own (a new axis), not the int it equals
    assert Tensor(np.zeros(3, "float32"))[True].shape == (1, 3)
    assert Tensor(np.zeros(3, "float32"))[1].shape == ()


def test_gather_with_smaller_index():
    x = Tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    # MegEngine gives [[1 2] [6 6]]: the index's shape, leading part of the other dimensions
    assert F.gather(x, 1, Tensor([[0, 1], [2, 2]])).numpy().tolist() == [[1, 2], [6, 6]]
    assert F.gather(x, 0, Tensor([[2], [1]])).numpy().tolist() == [[7], [4]]
    with pytest.raises(OpError, match="larger than input"):
        F.gather(x, 1, Tensor([[0], [0], [0], [0]]))


def test_gather_smaller_index_gradient():
    x = Parameter(np.arange(6, dtype="float32").reshape(2, 3))
    gm = GradManager().attach(x)
    with gm:
        gm.backward(F.sum(F.gather(x, 1, Tensor([[2, 2]]))))
    assert x.grad.numpy().tolist() == [[0, 0, 2], [0, 0, 0]]


def test_big_python_int_with_int32_tensor():
    # MegEngine converts the Python int with a C cast (it wraps) instead of raising
    assert (Tensor([1, 2]) + 2 ** 32 + 5).numpy().tolist() == [6, 7]
    assert (Tensor([1, 2]) + 2 ** 40).numpy().tolist() == [1, 2]
    assert (Tensor([1.0]) + 2 ** 40).numpy().tolist() == [2.0 ** 40]  # a float tensor takes it exactly


def _megdnn_resize_linear(x, oh, ow):
    """megdnn's naive Resize (NCHW, INTER_LINEAR, resize.cpp) transcribed, in float32 arithmetic."""
    f32 = np.float32
    n, c, ih, iw = x.shape
    out = np.zeros((n, c, oh, ow), f32)

    def coord(scale, size, idx):
        if size == 1:
            return f32(1), 0, f32(0), 0
        alpha = (f32(idx) + f32(0.5)) / scale - f32(0.5)
        o = int(np.floor(alpha))
        alpha = f32(alpha - f32(o))
        if o < 0:
            o, alpha = 0, f32(0)
        elif o + 1 >= size:
            o, alpha = size - 2, f32(1)
        return f32(1) - alpha, o, alpha, o + 1

    for i in range(oh):
        a0, i0, a1, i1 = coord(f32(oh) / f32(ih), ih, i)
        for j in range(ow):
            b0, j0, b1, j1 = coord(f32(ow) / f32(iw), iw, j)
            out[:, :, i, j] = (x[:, :, i0, j0] * a0 * b0 + x[:, :, i0, j1] * a0 * b1 + x[:, :, i1, j0] * a1 * b0
                               + x[:, :, i1, j1] * a1 * b1)
    return out


@pytest.mark.parametrize("shape", [(8, 8, 32, 32), (1, 1, 5, 7), (7, 5, 3, 2), (33, 17, 129, 65), (5, 9, 12, 4)])
def test_interpolate_bilinear_is_megdnn_resize(shape):
    # MegEngine gives megdnn's Resize: source positions in float32, border rows repeat
    ih, iw, oh, ow = shape
    x = np.random.RandomState(0).randn(2, 3, ih, iw).astype(np.float32)
    got = F.nn.interpolate(Tensor(x), (oh, ow)).numpy()
    np.testing.assert_allclose(got, _megdnn_resize_linear(x, oh, ow), rtol=0, atol=1e-6)


def test_interpolate_trilinear():
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 2, 2)
    y = F.nn.interpolate(Tensor(x), (4, 4, 4), mode="trilinear")
    # MegEngine (Resize3D) gives [0, 1, 3, 4] along D and [0, .25, .75, 1] along W
    assert y.shape == (1, 1, 4, 4, 4)
    np.testing.assert_allclose(y.numpy()[0, 0, :, 0, 0], [0, 1, 3, 4])
    np.testing.assert_allclose(y.numpy()[0, 0, 0, 0, :], [0, 0.25, 0.75, 1])
    y = F.nn.interpolate(Tensor(x), scale_factor=2, mode="trilinear", align_corners=True)
    np.testing.assert_allclose(y.numpy()[0, 0, 0, 0, :], [0, 1 / 3, 2 / 3, 1], rtol=1e-6)
    with pytest.raises(OpError, match="5-D"):
        F.nn.interpolate(F.ones((1, 1, 2, 2)), (4, 4, 4), mode="trilinear")


def _yuv_reference(src, rgb, planar, u_first, bt601=True):
    """megdnn's cvt_BT601_yuv_transform / cvt_yuv_transform (naive) transcribed pixel by pixel."""
    h32, w = src.shape
    h = h32 * 2 // 3
    flat = src.astype(np.int64).ravel()
    out = np.zeros((h, w, 3), np.uint8)
    sat = lambda v: np.uint8(min(max(v, 0), 255))  # noqa: E731
    for i in range(h):
        for j in range(w):
            if planar:
                q = (h // 2) * (w // 2)
                k = (i // 2) * (w // 2) + j // 2
                first, second = flat[h * w + k], flat[h * w + q + k]
                u, v = (first, second) if u_first else (second, first)
            else:
                base = (h + i // 2) * w + (j // 2) * 2
                u, v = (flat[base], flat[base + 1]) if u_first else (flat[base + 1], flat[base])
            y = int(flat[i * w + j])
            if bt601:
                y1 = (y * 0x0101 * 18997) >> 16
                b = sat((-(u * -128) + y1 + (-128 * 128 - 1160)) >> 6)
                g = sat((-(u * 25 + v * 52) + y1 + (25 * 128 + 52 * 128 - 1160)) >> 6)
                r = sat((-(v * -102) + y1 + (-102 * 128 - 1160)) >> 6)
            else:
                r = sat(y + ((359 * (v - 128)) >> 8))
                g = sat(y - ((88 * (u - 128) + 183 * (v - 128)) >> 8))
                b = sat(y + ((454 * (u - 128)) >> 8))
            out[i, j] = (r, g, b) if rgb else (b, g, r)
    return out


@pytest.mark.parametrize("layout,planar,u_first", [("NV21", False, False), ("NV12", False, True),
                                                   ("YV12", True, False), ("YU12", True, True)])
def test_cvt_color_yuv420(layout, planar, u_first):
    src = np.random.RandomState(1).randint(0, 256, (6, 4)).astype(np.uint8)
    x = Tensor(src[None, :, :, None], dtype="uint8")
    for c in ("RGB", "BGR"):
        # MegEngine gives megdnn's fixed point: libyuv's BT.601 for BT601_*, the JPEG (YCrCb) one otherwise
        got = F.vision.cvt_color(x, f"BT601_YUV2{c}_{layout}")
        np.testing.assert_array_equal(got.numpy()[0], _yuv_reference(src, c == "RGB", planar, u_first))
        got = F.vision.cvt_color(x, f"YUV2{c}_{layout}")
        np.testing.assert_array_equal(got.numpy()[0], _yuv_reference(src, c == "RGB", planar, u_first, False))
    gray = F.vision.cvt_color(x, f"YUV2GRAY_{layout}")
    np.testing.assert_array_equal(gray.numpy()[0, :, :, 0], src[:4])


def test_cvt_color_rgb_yuv():
    x = np.array([[[[10, 200, 30], [255, 0, 128]]]], np.uint8)
    # MegEngine (megdnn's fixed point) gives [[128 70 42] [67 220 181]] and back [[10 201 30] [254 0 127]]
    yuv = F.vision.cvt_color(Tensor(x, dtype="uint8"), "RGB2YUV")
    assert yuv.numpy().tolist() == [[[[128, 70, 42], [67, 220, 181]]]]
    assert F.vision.cvt_color(yuv, "YUV2RGB").numpy().tolist() == [[[[10, 201, 30], [254, 0, 127]]]]
    xf = x.astype(np.float32) / 255
    back = F.vision.cvt_color(F.vision.cvt_color(Tensor(xf), "RGB2YUV"), "YUV2RGB").numpy()
    np.testing.assert_allclose(back, xf, atol=2e-4)
    with pytest.raises(OpError, match="4:2:0"):
        F.vision.cvt_color(Tensor(np.zeros((1, 5, 4, 1), np.uint8), dtype="uint8"), "BT601_YUV2RGB_NV21")


# ---- gradients through ops without a derivative (issue 11) ----------------------------------------------------
@pytest.mark.parametrize("name,fn", [
    ("floor", lambda w: F.floor(w) * 3), ("ceil", F.ceil), ("round", F.round), ("sign", F.sign),
    ("floor_div", lambda w: w // 2), ("mod divisor", lambda w: Tensor([3.0, 3.0]) % w),
    ("zeros_like", F.zeros_like), ("ones_like", F.ones_like), ("full_like", lambda w: F.full_like(w, 2.0)),
])
def test_no_derivative_leaves_grad_none(name, fn):
    # MegEngine gives w.grad None when w's only path to the loss goes through the op
    w = Parameter([7.5, -5.0])
    gm = GradManager().attach(w)
    with gm:
        gm.backward(F.sum(fn(w)))
    assert w.grad is None, name


def test_no_derivative_beside_another_path():
    w = Parameter([7.5, -5.0])
    gm = GradManager().attach(w)
    with gm:
        gm.backward(F.sum(F.floor(w) + w * 2 + w % 3))
    # MegEngine gives [3. 3.]: floor contributes nothing, % passes the dividend's gradient
    assert w.grad.numpy().tolist() == [3.0, 3.0]


def test_optimizer_skips_parameters_without_grad():
    import megxla.optimizer as optim
    a, b = Parameter([1.0, 2.0]), Parameter([3.0, 4.0])
    opt = optim.SGD([a, b], lr=0.1, momentum=0.9, weight_decay=0.1)
    gm = GradManager().attach([a, b])
    with gm:
        gm.backward(F.sum(F.round(a)) + F.sum(b * b))
    assert a.grad is None
    opt.step()
    # MegEngine gives a unchanged (no weight decay, no momentum), b moved
    assert a.numpy().tolist() == [1.0, 2.0]
    np.testing.assert_allclose(b.numpy(), [3 - 0.1 * (6 + 0.3), 4 - 0.1 * (8 + 0.4)], rtol=1e-6)


def test_batchnorm_running_stats_are_detached():
    bn = M.BatchNorm2d(2)
    x = Parameter(np.random.RandomState(0).randn(2, 2, 3, 3).astype("float32"))
    gm = GradManager().attach(x)
    with gm:
        bn(x)  # training: the running statistics are updated from x
        bn.eval()
        y = bn(F.ones((1, 2, 3, 3)))  # evaluation: normalised with the running statistics only
        gm.backward(F.sum(y))
    # MegEngine gives None: the running statistics carry no gradient
    assert x.grad is None
    rm = Tensor(np.zeros((1, 2, 1, 1), "float32"))
    rv = Tensor(np.ones((1, 2, 1, 1), "float32"))
    x.grad = None
    with gm:
        F.batch_norm(x, rm, rv, training=True)
        gm.backward(F.sum(rm * 1.0 + rv))
    assert x.grad is None


# ---- autodiff.Function (issue 11) ------------------------------------------------------------------------------
class _Sigmoid(mge.autodiff.Function):
    def forward(self, x):
        self.y = 1 / (1 + F.exp(-x))
        return self.y

    def backward(self, dy):
        return dy * self.y * (1 - self.y)


class _TwoOut(mge.autodiff.Function):
    """Two outputs, a custom (deliberately not the true) gradient, None for the unused output."""

    def forward(self, a, b):
        return a * b, a + b

    def backward(self, d_prod, d_sum):
        self.seen = (d_prod, d_sum)
        da = None if d_prod is None else d_prod * 10
        db = None if d_sum is None else d_sum * 100
        return da, db


def test_function_single_output():
    x = Parameter([0.0, 2.0])
    gm = GradManager().attach(x)
    with gm:
        y = _Sigmoid()(x)
        gm.backward(F.sum(y))
    s = 1 / (1 + np.exp(-np.array([0.0, 2.0], np.float32)))
    np.testing.assert_allclose(x.grad.numpy(), s * (1 - s), rtol=1e-6)
    # no recording: the forward alone
    np.testing.assert_allclose(_Sigmoid()(Tensor([0.0])).numpy(), [0.5])


def test_function_several_outputs_and_none_grads():
    a, b = Parameter([1.0, 2.0]), Parameter([3.0, 4.0])
    gm = GradManager().attach([a, b])
    f = _TwoOut()
    with gm:
        p, s = f(a, b)
        gm.backward(F.sum(s * 2))
    # MegEngine gives backward (None, 2s) and the user's gradients: a None, b 200
    assert f.seen[0] is None and f.seen[1].numpy().tolist() == [2.0, 2.0]
    assert a.grad is None and b.grad.numpy().tolist() == [200.0, 200.0]
    np.testing.assert_allclose(p.numpy(), [3.0, 8.0])
    a.grad = b.grad = None
    with gm:
        p, s = _TwoOut()(a, b)
        gm.backward(F.sum(p) + F.sum(s))
    assert a.grad.numpy().tolist() == [10.0, 10.0] and b.grad.numpy().tolist() == [100.0, 100.0]


def test_function_bad_backward_is_named():
    class Bad(mge.autodiff.Function):
        def forward(self, x):
            return x * 2

        def backward(self, dy):
            return F.ones((5,))

    x = Parameter([1.0, 2.0])
    gm = GradManager().attach(x)
    with pytest.raises(OpError, match="Bad.backward"):
        with gm:
            gm.backward(F.sum(Bad()(x)))
    with pytest.raises(TypeError, match="expect type Tensor"):
        _Sigmoid()(1.0)


def test_function_under_trace():
    from megxla.jit import trace
    x = Parameter([0.0, 2.0])
    gm = GradManager().attach(x)

    @trace(symbolic=True)
    def step(inp):
        with gm:
            y = _Sigmoid()(x * inp)
            gm.backward(F.sum(y))
        return y

    s = 1 / (1 + np.exp(-np.array([0.0, 2.0], np.float32)))
    for _ in range(3):
        x.grad = None
        step(Tensor([1.0, 1.0]))
        np.testing.assert_allclose(x.grad.numpy(), s * (1 - s), rtol=1e-6)


def test_inf_norm_gradient_goes_to_every_tied_maximum_of_abs():
    # MegEngine's inf / -inf norms are max / min of abs(x), and its max / min give every tie the full gradient
    # (jnp.max's gradient splits it: 0.5 each)
    for ord, want in [(float("inf"), [1.0, -1.0, 0.0, 0.0]), (float("-inf"), [0.0, 0.0, 1.0, -1.0])]:
        x = Parameter([3.0, -3.0, 1.0, -1.0])
        gm = GradManager().attach([x])
        with gm:
            gm.backward(F.norm(x, ord=ord))
        assert x.grad.numpy().tolist() == want


# ---- documented differences (docs/differences.md) -------------------------------------------------------------
def test_where_megengine_is_wrong_megxla_keeps_the_correct_result():
    # MegEngine gives (2, 1); megxla (2,) as NumPy
    assert F.stack([Tensor(1.0), Tensor(2.0)]).shape == (2,)
    # MegEngine ignores axis for ord=inf; megxla gives the per-row max of abs
    x = Tensor([[3.0, -4.0], [1.0, 2.0]])
    assert F.norm(x, ord=float("inf"), axis=1).numpy().tolist() == [4.0, 2.0]
    # squeeze over several axes and where with a broadcast operand: gradients of the operands' shapes
    w = Parameter(np.ones((1, 3, 1), "float32"))
    a, b = Parameter([1.0, 2.0, 3.0]), Parameter([5.0])
    gm = GradManager().attach([w, a, b])
    with gm:
        gm.backward(F.sum(F.squeeze(w, (0, 2)) * Tensor([1.0, 2.0, 3.0]))
                    + F.sum(F.where(Tensor([True, False, False]), a, b)))
    assert w.grad.shape == (1, 3, 1) and w.grad.numpy().ravel().tolist() == [1.0, 2.0, 3.0]
    assert a.grad.numpy().tolist() == [1.0, 0.0, 0.0] and b.grad.numpy().tolist() == [2.0]
    # MegEngine's LAMB raises on a step; megxla's steps
    import megxla.optimizer as optim
    p = Parameter([1.0, 2.0])
    p.grad = Tensor([1.0, 1.0])
    optim.LAMB([p], lr=0.1).step()
    assert np.all(p.numpy() < [1.0, 2.0])
    # MegEngine's svd raises for full_matrices=True
    u, s, v = F.svd(Tensor(np.arange(6, dtype="float32").reshape(3, 2)), full_matrices=True)
    assert (u.shape, s.shape, v.shape) == ((3, 3), (2,), (2, 2))


def test_where_megxla_accepts_what_megengine_rejects():
    # MegEngine raises for each; the result here is unambiguous (docs/differences.md)
    np.testing.assert_allclose(F.gelu(Tensor([1, 2])).numpy(), F.gelu(Tensor([1.0, 2.0])).numpy())
    assert F.hswish(Tensor([1, 2])).dtype == np.float32
    assert F.logical_not(Tensor([1, 0])).numpy().tolist() == [False, True]
    assert F.max_pool2d(Tensor(np.arange(4, dtype="int32").reshape(1, 1, 2, 2)), 2).numpy().ravel().tolist() == [3]
    assert F.matmul(Tensor([[1, 2]]), Tensor([[3], [4]])).numpy().tolist() == [[11]]


def test_no_derivative_cut_under_trace():
    import megxla.optimizer as optim
    from megxla.jit import trace
    a, b = Parameter([1.5, 2.5]), Parameter([1.0, 2.0])
    gm = GradManager().attach([a, b])
    opt = optim.SGD([a, b], lr=0.1, momentum=0.9, weight_decay=0.1)

    @trace(symbolic=True)
    def step(x):
        with gm:
            gm.backward(F.sum(F.floor(a) * x) + F.sum(b * x))
        opt.step().clear_grad()

    for _ in range(3):
        step(Tensor([1.0, 1.0]))
    # MegEngine gives a unchanged: its only path is through floor, so it has no grad and SGD skips it
    assert a.numpy().tolist() == [1.5, 2.5]
    assert np.all(b.numpy() < [1.0, 2.0])


def test_grad_manager_group_records_siblings_not_higher_order():
    # MegEngine's higher-order-grad guide: `with gm | gm2:` records the forward for both managers, and neither
    # records the other's backward (each adds the first-order gradient); nesting takes higher-order ones.
    from megxla.autodiff import GradManager, GradManagerGroup
    x = mge.Tensor([1.0])
    gm, gm2, gm3 = (GradManager().attach([x]) for _ in range(3))
    group = gm | gm2 | gm3
    assert isinstance(group, GradManagerGroup)
    with group:
        y = F.cos(x)
        gm.backward(y)
        gm2.backward(y)
        gm3.backward(y)
    np.testing.assert_allclose(x.grad.numpy(), [-3 * np.sin(1.0)], rtol=1e-6)
    assert not any(g._recording for g in (gm, gm2, gm3))
    x.grad = None
    with gm2:
        with gm:
            y = F.cos(x)
            gm.backward(y)
        gm2.backward(x.grad)
    np.testing.assert_allclose(x.grad.numpy(), [-np.sin(1.0) - np.cos(1.0)], rtol=1e-6)


# ---- float16 elementwise formulas (session 7) ------------------------------------------------------------------
def test_float16_elementwise_formulas_round_once():
    # MegEngine gives float16 sigmoid [0.8174 0.07587 0.01201 0.9526 0.003765] and hswish [1.125 -0.2084 -0. 3. -0.]:
    # each mode computed in float32 and rounded once (float16 steps gave sigmoid(1.5) 0.8179, hswish(-2.5) -0.2083)
    x = np.array([1.5, -2.5, -4.41015625, 3.0, -5.58], "float16")
    x64 = x.astype(np.float64)
    t = Tensor(x)
    assert F.sigmoid(t).dtype == np.float16
    np.testing.assert_array_equal(F.sigmoid(t).numpy(), (1 / (1 + np.exp(-x64))).astype("float16"))
    np.testing.assert_array_equal(F.hswish(t).numpy(), (x64 * np.clip(x64 + 3, 0, 6) / 6).astype("float16"))
    np.testing.assert_array_equal(F.exp(t).numpy(), np.exp(x64).astype("float16"))


def test_clip_with_lower_above_upper_and_its_gradient():
    # MegEngine gives clip([nan, 0, 3, 5, 10], 5, 2) == [2, 5, 5, 5, 2] with no gradient anywhere, and
    # clip(x, 0, 1) passes the gradient on both bounds (x <= lower ? lower : (x <= upper ? x : upper))
    x = Parameter(np.array([NAN, 0.0, 3.0, 5.0, 10.0], "float32"))
    gm = GradManager().attach([x])
    with gm:
        y = F.clip(x, 5.0, 2.0)
        gm.backward(y.sum())
    assert y.numpy().tolist() == [2.0, 5.0, 5.0, 5.0, 2.0]
    assert x.grad.numpy().tolist() == [0.0] * 5
    assert F.clip(Tensor([0, 3, 10], dtype="int32"), 5, 2).numpy().tolist() == [5, 5, 2]
    x = Parameter(np.array([NAN, -1.0, 0.0, 0.5, 1.0, 2.0], "float32"))
    with gm.attach([x]):
        y = F.clip(x, 0.0, 1.0)
        gm.backward((y * Tensor(np.arange(1, 7, dtype="float32"))).sum())
    assert y.numpy().tolist() == [1.0, 0.0, 0.0, 0.5, 1.0, 1.0]
    assert x.grad.numpy().tolist() == [0.0, 0.0, 3.0, 4.0, 5.0, 0.0]


def test_an_overwritten_value_still_gets_its_gradient():
    # MegEngine gives z[[0, 0], [1, 1]] = v (v = [10, 20]): z[0, 1] == 20 and v.grad == [1, 1]; F.scatter of
    # [[1, 2, 3]] at [[0, 0, 2]]: [[2, 0, 3, 0]] and the source's grad [[1, 1, 1]] (each written value gets the
    # gradient at its position; JAX's scatter vjp gives only the last write's)
    x = Parameter(np.zeros((2, 3), "float32"))
    v = Parameter(np.array([10.0, 20.0], "float32"))
    gm = GradManager().attach([x, v])
    with gm:
        z = x * 1
        z[[0, 0], [1, 1]] = v
        gm.backward((z * Tensor(np.arange(6, dtype="float32").reshape(2, 3))).sum())
    assert z.numpy().tolist() == [[0.0, 20.0, 0.0], [0.0, 0.0, 0.0]]
    assert v.grad.numpy().tolist() == [1.0, 1.0]
    assert x.grad.numpy().tolist() == [[0.0, 0.0, 2.0], [3.0, 4.0, 5.0]]
    s = Parameter(np.array([[1.0, 2.0, 3.0]], "float32"))
    with gm.attach([s]):
        out = F.scatter(F.zeros((1, 4)), 1, Tensor([[0, 0, 2]], dtype="int32"), s)
        gm.backward(out.sum())
    assert out.numpy().tolist() == [[2.0, 0.0, 3.0, 0.0]]
    assert s.grad.numpy().tolist() == [[1.0, 1.0, 1.0]]
    # a broadcast value's gradient sums over its positions
    w = Parameter(np.array(2.0, "float32"))
    with gm.attach([w]):
        z = F.zeros((3,))
        z[[0, 2]] = w * w
        gm.backward(z.sum())
    assert float(w.grad) == 8.0


@pytest.mark.parametrize("auto_jit", [False, True])
def test_batch_norm_of_one_value_per_channel_gives_a_nan_running_variance(auto_jit):
    # MegEngine gives: train output [0, 0], running_mean [0.15, -0.2], running_var [nan, nan] (the unbiased batch
    # variance divides by n - 1 == 0), so the eval output is nan
    saved = mge.config.auto_jit
    mge.config.auto_jit = auto_jit
    try:
        bn = M.BatchNorm2d(2)
        y = bn(Tensor(np.array([[[[1.5]], [[-2.0]]]], "float32")))
        assert y.numpy().ravel().tolist() == [0.0, 0.0]
        np.testing.assert_allclose(bn.running_mean.numpy().ravel(), [0.15, -0.2], rtol=1e-6)
        assert np.isnan(bn.running_var.numpy()).all()
        y = F.batch_norm(Tensor(np.ones((1, 2, 1, 1), "float32")), F.zeros((1, 2, 1, 1)), F.ones((1, 2, 1, 1)),
                         training=True, inplace=False)[2]
        assert np.isnan(y.numpy()).all()
    finally:
        mge.config.auto_jit = saved


def test_conv_transpose2d_drops_a_width_only_output_padding():
    # MegEngine 1.13's conv_transpose2d tests `output_pad_h != 0 or output_pad_h != 0` (sic): stride 2, padding 1 on
    # a 3x3 input gives (1, 3, 6, 6) for output_padding (1, 1), (1, 3, 6, 5) for (1, 0), and (1, 3, 5, 5) for (0, 1)
    # (the width padding dropped, unchecked: (0, 5) gives (1, 3, 5, 5) too); conv_transpose3d has no such quirk
    rng = np.random.RandomState(0)
    x, w = Tensor(rng.randn(1, 2, 3, 3).astype("float32")), Tensor(rng.randn(2, 3, 3, 3).astype("float32"))
    shapes = {op: F.conv_transpose2d(x, w, stride=(2, 2), padding=(1, 1), output_padding=op).shape
              for op in [(1, 1), (1, 0), (0, 1), (0, 5)]}
    assert shapes == {(1, 1): (1, 3, 6, 6), (1, 0): (1, 3, 6, 5), (0, 1): (1, 3, 5, 5), (0, 5): (1, 3, 5, 5)}
    np.testing.assert_array_equal(F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=(0, 1)).numpy(),
                                  F.conv_transpose2d(x, w, stride=2, padding=1).numpy())
    # MegEngine gives out[0, 0, 0] [1.4376, -1.6478, 0.3153, -2.1333, 0.5367] for (0, 1)
    np.testing.assert_allclose(F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=(0, 1)).numpy()[0, 0, 0],
                               [1.4376, -1.6478, 0.3153, -2.1333, 0.5367], atol=1e-4)
    m = M.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=(0, 1))
    assert m(x).shape == (1, 3, 5, 5)
    assert M.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=(1, 0))(x).shape == (1, 3, 6, 5)
    # MegEngine gives (1, 3, 5, 5, 6) for conv_transpose3d output_padding (0, 0, 1)
    x3, w3 = F.ones((1, 2, 3, 3, 3)), F.ones((2, 3, 3, 3, 3))
    assert F.conv_transpose3d(x3, w3, stride=2, padding=1, output_padding=(0, 0, 1)).shape == (1, 3, 5, 5, 6)


def test_rnn_proj_size_is_accepted_and_ignored():
    # MegEngine 1.13 stores proj_size, checks 0 <= proj_size < hidden_size, and otherwise ignores it (its LSTM kernel
    # has no projection): M.LSTM(4, 6, proj_size=3) has the state_dict of M.LSTM(4, 6) and gives output (5, 2, 6),
    # h (1, 2, 6), c (1, 2, 6); M.RNN takes proj_size too
    m = M.LSTM(4, 6, proj_size=3)
    assert m.proj_size == 3
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == {
        "_flatten_weights": (24, 12), "cells.0.0.bias_hh": (24,), "cells.0.0.bias_ih": (24,),
        "cells.0.0.weight_hh": (24, 6), "cells.0.0.weight_ih": (24, 4)}
    out, (h, c) = m(Tensor(np.ones((5, 2, 4), "float32")))
    assert (out.shape, h.shape, c.shape) == ((5, 2, 6), (1, 2, 6), (1, 2, 6))
    r = M.RNN(4, 6, proj_size=3)
    assert r.proj_size == 3 and r(Tensor(np.ones((5, 2, 4), "float32")))[0].shape == (5, 2, 6)
    for bad in (-1, 6):
        with pytest.raises(ValueError, match="proj_size"):
            M.LSTM(4, 6, proj_size=bad)
    # MegEngine gives, for these weights, out[-1] [[-0.2727, -0.357, -0.2837], [-0.2581, -0.263, -0.2095]] and
    # c [[-0.5549, -0.5867, -0.4225], [-0.6369, -0.53, -0.3549]]
    m = M.LSTM(2, 3, proj_size=1)
    m.load_state_dict({k: (np.sin(np.arange(np.prod(v.shape)) * 0.37).reshape(v.shape) * 0.5).astype("float32")
                       for k, v in m.state_dict().items()})
    out, (h, c) = m(Tensor(np.cos(np.arange(12) * 0.7).reshape(3, 2, 2).astype("float32")))
    np.testing.assert_allclose(out.numpy()[-1], [[-0.2727, -0.357, -0.2837], [-0.2581, -0.263, -0.2095]], atol=1e-4)
    np.testing.assert_allclose(c.numpy()[0], [[-0.5549, -0.5867, -0.4225], [-0.6369, -0.53, -0.3549]], atol=1e-4)


def test_module_reprs_as_megengine():
    # MegEngine 1.13 prints these reprs (modules without a _module_info_string print a bare name)
    import megxla.quantization as quant
    import megxla.module.qat as Q
    cases = {
        "GroupNorm(groups=2, channels=4, eps=1e-05, affine=True)": M.GroupNorm(2, 4),
        "GroupNorm(groups=2, channels=4, eps=0.001, affine=False)": M.GroupNorm(2, 4, eps=1e-3, affine=False),
        "InstanceNorm(channels=4, eps=1e-05, affine=True)": M.InstanceNorm(4),
        "GeneralNorm(normalized_shape=(4,), normalized_axis=[1], eps=1e-05, affine=True)": M.GeneralNorm((4,), 1),
        "Embedding()": M.Embedding(3, 4), "LeakyReLU()": M.LeakyReLU(0.2), "PReLU()": M.PReLU(3),
        "PixelShuffle()": M.PixelShuffle(2), "AdaptiveAvgPool2d()": M.AdaptiveAvgPool2d(2),
        "AdaptiveMaxPool2d()": M.AdaptiveMaxPool2d((2, 3)), "LocalResponseNorm()": M.LocalResponseNorm(3),
        "Elemwise()": M.Elemwise("add"), "LSTMCell()": M.LSTMCell(2, 3), "RNNCell()": M.RNNCell(2, 3, bias=False),
        "DeformablePSROIPooling()": M.DeformablePSROIPooling(False, 2, 3, 3, 4, 0.5),
        "RNN(\n  (cells.0.0): RNNCell()\n)": M.RNN(2, 3),
        "LSTM(\n  (cells.0.0): LSTMCell()\n  (cells.0.1): LSTMCell()\n)": M.LSTM(2, 3, bidirectional=True),
        "ConvTranspose2d(3, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))":
            M.ConvTranspose2d(3, 8, 3, 2, 1, output_padding=1),
        "ConvTranspose3d(3, 8, kernel_size=(3, 3, 3), stride=(2, 2, 2), padding=(1, 1, 1), bias=False)":
            M.ConvTranspose3d(3, 8, 3, 2, 1, output_padding=1, bias=False),
        "QAT.ConvTranspose2d(3, 4, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))":
            Q.ConvTranspose2d(3, 4, 3, 2, 1, output_padding=1),
        "QAT.Elemwise()": Q.Elemwise("add"),
    }
    for want, m in cases.items():
        assert repr(m) == want
    g = M.GeneralNorm((2, 4), (-2, -1))
    assert repr(g) == "GeneralNorm(normalized_shape=(2, 4), normalized_axis=(-2, -1), eps=1e-05, affine=True)"
    g(F.ones((3, 2, 4)))  # MegEngine's forward stores the non-negative axes
    assert repr(g) == "GeneralNorm(normalized_shape=(2, 4), normalized_axis=[1, 2], eps=1e-05, affine=True)"
    q = quant.quantize(quant.quantize_qat(M.Sequential(
        M.QuantStub(), M.ConvBn2d(3, 4, 3, bias=False), M.Conv2d(3, 4, 3, bias=False),
        M.ConvTransposeBn2d(3, 4, 3, 2, 1, output_padding=1, bias=False), M.ConvTranspose2d(3, 4, 3, bias=False),
        M.ConvTransposeRelu2d(3, 4, 3), M.BatchMatMulActivation(2, 3, 4, bias=False), M.Elemwise("add"),
        M.DequantStub())))
    assert repr(q) == """Sequential(
  (0): Quantized.QuantStub()
  (1): Quantized.ConvBn2d(3, 4, kernel_size=(3, 3))
  (2): Quantized.Conv2d(3, 4, kernel_size=(3, 3))
  (3): Quantized.ConvTransposeBn2d(3, 4, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))
  (4): Quantized.ConvTranspose2d(3, 4, kernel_size=(3, 3), bias=False)
  (5): Quantized.ConvTransposeRelu2d(3, 4, kernel_size=(3, 3))
  (6): Quantized.BatchMatMulActivation(batch=2, in_features=3, out_features=4, bias=True)
  (7): Quantized.Elemwise()
  (8): Quantized.DequantStub()
)"""
    # MegEngine's disable_quantize returns None
    m = M.Sequential(M.Linear(2, 2))
    assert m.disable_quantize() is None and m[0].quantize_disabled


def test_scalar_conversion_of_a_multi_element_tensor_is_an_assertion_error():
    # MegEngine gives AssertionError (empty message) for item(), bool(), float(), int() and __index__ of a tensor of
    # other than one element (two, or none); megxla's error is also a ValueError, with a message
    x = Tensor([1.0, 2.0])
    for fn in (x.item, lambda: bool(x), lambda: float(x), lambda: int(x), lambda: [0, 1, 2][Tensor([1, 2])],
               lambda: Tensor(np.zeros((0,), "float32")).item(), lambda: 1 if x else 0):
        with pytest.raises(AssertionError, match="exactly one element"):
            fn()
        with pytest.raises(ValueError):
            fn()
    # MegEngine gives: x.item(1) 2.0 (item(*index) is self[index].item()); [[3.]] item 3.0; bool([[0.]]) False
    assert x.item(1) == 2.0 and Tensor([[3.0]]).item() == 3.0 and bool(Tensor([[0.0]])) is False


def test_a_float_tensor_is_no_index():
    # MegEngine 1.13: an int / bool tensor indexes a list or range (operator.index 1), a float one raises (an
    # AttributeError from its float); megxla returned 20 for [10, 20][Tensor(1.0)]: now a TypeError, as Python's
    import operator
    for t in (Tensor(1), Tensor(True), Tensor(np.int8(1)), Tensor([1])):
        assert operator.index(t) == 1 and [10, 20][t] == 20 and range(5)[t] == 1
    with pytest.raises(TypeError, match="float32 tensor cannot be used as an index"):
        [10, 20][Tensor(1.0)]


@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid_gives_every_input_a_gradient_when_any_output_reaches_the_loss(indexing):
    # MegEngine's meshgrid is one op: when only the first output reaches the loss, the second input's gradient is
    # zeros (not None); x = [1, 2, 3], y = [10, 20]
    def grads(loss_of):
        x, y = Parameter(np.arange(1, 4, dtype="float32")), Parameter(np.array([10.0, 20.0], "float32"))
        gm = GradManager().attach([x, y])
        with gm:
            gm.backward(loss_of(F.meshgrid(x, y, indexing=indexing), x))
        return [None if t.grad is None else t.grad.numpy().tolist() for t in (x, y)]
    # MegEngine gives [2, 2, 2] and [0, 0]; [0, 0, 0] and [3, 3]; [30, 30, 30] and [6, 6]
    assert grads(lambda o, x: o[0].sum()) == [[2.0, 2.0, 2.0], [0.0, 0.0]]
    assert grads(lambda o, x: o[1].sum()) == [[0.0, 0.0, 0.0], [3.0, 3.0]]
    assert grads(lambda o, x: (o[0] * o[1]).sum()) == [[30.0, 30.0, 30.0], [6.0, 6.0]]
    # no output in the loss: MegEngine gives [1, 1, 1] and None
    assert grads(lambda o, x: x.sum()) == [[1.0, 1.0, 1.0], None]
    # three inputs, the middle output in the loss: MegEngine gives [0, 0], [8, 8, 8], [0, 0, 0, 0]
    ps = [Parameter(np.ones(n, "float32")) for n in (2, 3, 4)]
    gm = GradManager().attach(ps)
    with gm:
        gm.backward(F.meshgrid(*ps, indexing=indexing)[1].sum())
    assert [p.grad.numpy().tolist() for p in ps] == [[0.0, 0.0], [8.0, 8.0, 8.0], [0.0] * 4]


def test_resampling_ops_return_float32_for_a_float16_image():
    # MegEngine's interpolate (every mode, align_corners too), warp_perspective and roi_align convert a float16
    # input to float32 and return float32; x = arange(16) as float16 (1, 1, 4, 4)
    x = Tensor(np.arange(16).reshape(1, 1, 4, 4), dtype="float16")
    # MegEngine gives float32 [[0.8333 2.1667 3.5] [6.1667 7.5 8.8333] [11.5 12.8333 14.1667]]
    y = F.vision.interpolate(x, size=(3, 3), mode="bilinear")
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy()[0, 0], [[0.8333, 2.1667, 3.5], [6.1667, 7.5, 8.8333],
                                                  [11.5, 12.8333, 14.1667]], atol=1e-4)
    for kw in (dict(mode="nearest"), dict(mode="bicubic"), dict(mode="bilinear", align_corners=True)):
        assert F.vision.interpolate(x, size=(3, 3), **kw).dtype == np.float32
    # MegEngine gives float32 [[[0. 0.7 1.5 2.3 3.] ...]]
    y = F.vision.interpolate(x[0], size=5, mode="linear")
    assert y.dtype == np.float32 and y.numpy()[0, 0].tolist() == pytest.approx([0, 0.7, 1.5, 2.3, 3], abs=1e-5)
    assert F.vision.warp_perspective(x, Tensor(np.eye(3, dtype="float32")[None]), (2, 2)).dtype == np.float32
    # MegEngine gives float32 [[0.5469 1.375] [3.625 5.]]
    y = F.vision.roi_align(x, Tensor([[0, 0, 0, 2, 2]], dtype="float32"), (2, 2))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy()[0, 0], [[0.546875, 1.375], [3.625, 5.0]], atol=1e-4)


def test_nms_visits_tied_scores_last_index_first():
    # MegEngine's nms orders boxes by argsort(scores, descending=True), which puts the later of two tied scores
    # first; boxes 0 and 3 are the same box, both scored 0.9
    boxes = Tensor(np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10], [2, 2, 9, 9]],
                            "float32"))
    scores = Tensor([0.9, 0.8, 0.7, 0.9, 0.95])
    # MegEngine gives [4 3 2], [4 3] with max_output=2, [4 3 0 1 2] with iou_thresh=1
    assert F.vision.nms(boxes, scores, 0.5).numpy().tolist() == [4, 3, 2]
    assert F.vision.nms(boxes, scores, 0.5, max_output=2).numpy().tolist() == [4, 3]
    assert F.vision.nms(boxes, scores, 1.0).numpy().tolist() == [4, 3, 0, 1, 2]
    # MegEngine gives [2 1 0] for three disjoint boxes scored alike
    disjoint = Tensor(np.array([[0, 0, 1, 1], [5, 5, 6, 6], [10, 10, 11, 11]], "float32"))
    assert F.vision.nms(disjoint, Tensor([0.5, 0.5, 0.5]), 0.5).numpy().tolist() == [2, 1, 0]


def test_load_state_dict_takes_the_loaded_dtype():
    # MegEngine replaces each tensor by the loaded array, dtype included: a float16 checkpoint gives float16
    # parameters (int32, uint8, bool likewise); the forward pass of Linear then promotes to float32
    m = M.Linear(2, 2)
    m.load_state_dict({k: v.astype("float16") for k, v in m.state_dict().items()})
    # MegEngine gives float16 float16, Parameter; the output float32
    assert m.weight.dtype == np.float16 and m.bias.dtype == np.float16 and isinstance(m.weight, Parameter)
    assert m(Tensor(np.ones((1, 2), "float32"))).dtype == np.float32
    bn = M.BatchNorm2d(2)
    with pytest.warns(UserWarning) as caught:
        bn.load_state_dict({k: v.astype("int32") for k, v in bn.state_dict().items()})
    # MegEngine gives int32 for bias, running_mean, running_var, weight
    assert {str(v.dtype) for v in bn.state_dict().values()} == {"int32"}
    # ... and such a parameter gets no gradient: each float parameter turned integer is named (a training loop went on
    # with its weights frozen, no error -- probe X); the buffers (running statistics) are not
    assert sorted(str(w.message).split("`")[1] for w in caught) == ["bias", "weight"]
    assert all("gets no gradient" in str(w.message) and w.filename == __file__ for w in caught)
    # MegEngine prints the unused / missing keys as a set: unused={'extra'}
    with pytest.raises(KeyError, match=r"unused=\{'extra'\}"):
        M.Linear(2, 2).load_state_dict(dict(M.Linear(2, 2).state_dict(), extra=np.zeros(1)))


def test_scatter_writes_into_its_input_and_returns_it():
    # MegEngine's F.scatter is ``inp[idx] = source; return inp``: x itself changes
    x = Parameter(np.arange(6, dtype="float32").reshape(2, 3))
    src = Parameter(np.array([[10.0, 20.0]], "float32"))
    gm = GradManager().attach([x, src])
    with gm:
        y = F.scatter(x, 1, Tensor([[2, 0]]), src)
        # MegEngine gives: y is x True, x [[20, 1, 10], [3, 4, 5]]
        assert y is x and x.numpy().tolist() == [[20.0, 1.0, 10.0], [3.0, 4.0, 5.0]]
        gm.backward((y * Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])).sum())
    # MegEngine gives x.grad [[0, 2, 0], [4, 5, 6]] (the original x's), src.grad [[3, 1]]
    assert x.grad.numpy().tolist() == [[0.0, 2.0, 0.0], [4.0, 5.0, 6.0]]
    assert src.grad.numpy().tolist() == [[3.0, 1.0]]
    # MegEngine gives int32 [[2 2 3]] for both the result and the input (the source converted to int32)
    xi = Tensor([[1, 2, 3]])
    F.scatter(xi, 1, Tensor([[0]]), Tensor([[2.7]]))
    assert xi.dtype == np.int32 and xi.numpy().tolist() == [[2, 2, 3]]


def test_float16_plus_a_python_float_beyond_its_range_is_inf_without_a_warning():
    # MegEngine gives float16 [inf inf] for Tensor([1., 60000.], dtype="float16") + 1e5, and prints nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = Tensor([1.0, 60000.0], dtype="float16") + 1e5
    assert y.dtype == np.float16 and np.isinf(y.numpy()).all()


def test_submodules_are_package_attributes():
    # MegEngine's packages import these submodules: after ``import megengine.module as M`` code reads M.qat.Linear
    import megxla.module as Mod
    import megxla.optimizer as O
    assert Mod.qat.Linear is not None and Mod.quantized.Linear is not None
    assert Mod.lrn.LocalResponseNorm is M.LocalResponseNorm
    assert F.metric.topk_accuracy is not None and F.debug_param.set_execution_strategy is not None
    assert O.multi_step_lr.MultiStepLR is O.MultiStepLR
    assert mge.traced_module.trace_module is not None and mge.version.__version__
    with pytest.raises(AttributeError):
        Mod.no_such_submodule


def test_autocast_norm_and_logsoftmax_compute_in_float32():
    # MegEngine's norm is sum(abs(x) ** ord) ** (1 / ord) and logsoftmax x - logsumexp(x): under autocast the
    # pow / logsumexp compute in float32, so a float16 input (a linear's output) gives float32
    from megxla import amp
    x = Tensor(np.linspace(-1, 1, 16).reshape(4, 4).astype("float32"))
    with amp.autocast():
        h = F.linear(x, x)
        assert h.dtype == np.float16
        # MegEngine gives float32, float32; inf norm (max of abs) float16; 0 "norm" int32
        assert F.norm(h, axis=1).dtype == np.float32 and F.nn.logsoftmax(h, axis=1).dtype == np.float32
        assert F.norm(h, ord=float("inf"), axis=1).dtype == np.float16 and F.norm(h, ord=0, axis=1).dtype == np.int32


def test_split_and_expand_dims_read_a_tensor_argument():
    # MegEngine reads a 0-d tensor given as split's count or expand_dims' axis as its value
    x = Tensor(np.arange(6, dtype="float32").reshape(2, 3))
    # MegEngine gives three (2, 1) parts [[0], [3]], [[1], [4]], [[2], [5]]
    parts = F.split(x, Tensor(3), axis=1)
    assert [p.numpy().tolist() for p in parts] == [[[0.0], [3.0]], [[1.0], [4.0]], [[2.0], [5.0]]]
    # MegEngine gives shape (1, 2, 3)
    assert F.expand_dims(x, Tensor(0)).shape == (1, 2, 3)


def test_an_int_interpolate_size_is_the_height_with_width_one():
    # MegEngine 1.13's interpolate: ``if isinstance(size, int): size = (size, 1)`` (as a 3-D one's (size, 1, 1))
    x = Tensor(np.arange(8, dtype="float32").reshape(1, 1, 2, 4))
    y = F.nn.interpolate(x, size=3)
    assert y.shape == (1, 1, 3, 1)
    np.testing.assert_allclose(y.numpy().ravel(), [1.5, 3.5, 5.5])  # MegEngine's numbers
    for mode in ("nearest", "bicubic"):
        assert F.nn.interpolate(x, size=3, mode=mode).shape == (1, 1, 3, 1)


def test_8_bit_images_are_resampled_keeping_their_dtype():
    # MegEngine resizes, remaps and warps uint8 images (in float32, rounded back); megxla refused them
    u8 = Tensor((np.arange(24) * 10 + 3).reshape(1, 1, 4, 6).astype("uint8"))
    y = F.nn.interpolate(u8, size=(3, 4), mode="nearest")
    assert y.dtype == np.uint8 and y.numpy()[0, 0].tolist() == [[3, 13, 33, 43], [63, 73, 93, 103],
                                                                [123, 133, 153, 163]]
    y = F.nn.interpolate(u8, size=(3, 4))
    # MegEngine: [[16 31 46 61] [96 111 126 141] [175 191 205 221]] -- its float32 sums fall on the other side of
    # x.5 in the last row's halves (175.49998 where megxla's is 175.5)
    assert y.dtype == np.uint8
    np.testing.assert_allclose(y.numpy()[0, 0], [[16, 31, 46, 61], [96, 111, 126, 141], [175, 191, 205, 221]],
                               atol=1)
    m = Tensor(np.array([[[[0.5, 0.25], [2.3, 1.7]], [[4.9, 2.5], [1.2, 0.6]]]], "float32"))
    y = F.vision.remap(u8, m)
    assert y.dtype == np.uint8 and y.numpy()[0, 0].tolist() == [[23, 128], [202, 51]]
    a = Tensor(np.array([[[0.9, 0.13, 0.5], [-0.11, 1.05, 0.25]]], "float32"))
    y = F.vision.warp_affine(u8, a, (3, 4), format="NCHW")
    assert y.dtype == np.uint8 and y.numpy()[0, 0].tolist() == [[23, 25, 28, 35], [87, 90, 92, 95],
                                                                [152, 154, 156, 159]]
    # saturated, not wrapped: an int8 image upsampled stays in range
    i8 = Tensor(np.array([[[[-128, 127], [127, -128]]]], "int8"))
    y = F.nn.interpolate(i8, size=(3, 3), mode="bicubic")
    assert y.dtype == np.int8 and y.numpy().min() >= -128 and y.numpy().max() <= 127


def test_round_takes_no_ndigits():
    # MegEngine's Tensor.__round__ takes none: round(x, 2) is a TypeError, not a silent round(x)
    x = Tensor([1.234, 5.678])
    with pytest.raises(TypeError):
        round(x, 2)
    assert round(x).numpy().tolist() == [1.0, 6.0] and round(x, None).numpy().tolist() == [1.0, 6.0]


def test_an_l1_norms_gradient_at_zero_is_abss():
    # MegEngine's norm is sum(abs(x) ** ord) ** (1 / ord) of its own ops: at an element of exactly 0 the gradient of
    # norm(x, ord=1) is its abs's, -1 (MegEngine 1.13: [-1, -1, 1]); jnp.abs's +1 moved a zero bias the other way
    x = Parameter(np.array([0.0, -1.0, 2.0], "float32"))
    gm = GradManager().attach([x])
    with gm:
        gm.backward(F.norm(x, ord=1))
    assert x.grad.numpy().tolist() == [-1.0, -1.0, 1.0]
    assert F.abs(Tensor([0.0])).numpy().tolist() == [0.0]


def test_one_element_written_from_a_one_element_vector():
    # MegEngine 1.13.0 takes ``y[0, 0] = Tensor([9.])`` (a (1,) value into one element); a (1, 1) value or a slot of
    # more elements it refuses, as here
    y = Tensor(np.zeros((2, 3), "float32"))
    y[0, 0] = Tensor([9.0])
    y[1, -1] = np.array([7.0], "float32")
    assert y.numpy().tolist() == [[9.0, 0.0, 0.0], [0.0, 0.0, 7.0]]
    for index, value in (((0, 0), [[9.0]]), ((0,), [[1.0, 2.0, 3.0]]), ((0, 0), [9.0, 8.0])):
        with pytest.raises(RuntimeError):
            y[index] = Tensor(value)
    w = Parameter(np.ones(3, "float32"))
    v = Parameter([2.0])
    gm = GradManager().attach([w, v])
    with gm:
        z = w * 1.0
        z[1] = v * 3.0
        gm.backward(z.sum())
    assert w.grad.numpy().tolist() == [1.0, 0.0, 1.0] and v.grad.numpy().tolist() == [3.0]


def test_sign_of_negative_zero_and_cumsum_of_a_scalar_as_megengine():
    # (MegEngine 1.13.0 on the CPU: SIGN is ``(x > 0) - (x < 0)`` -- +0.0 for -0.0, 0 for nan --; the cumsum of a 0-d
    # tensor is its value as shape (1,), NumPy's too)
    s = F.sign(Tensor([-0.0, 0.0, 2.0, -3.0, float("nan")])).numpy()
    assert s.tolist() == [0.0, 0.0, 1.0, -1.0, 0.0] and not np.signbit(s[0])
    for axis in (0, -1):
        c = F.cumsum(Tensor(3.0), axis)
        assert c.shape == (1,) and c.numpy().tolist() == [3.0]
    with pytest.raises(Exception):
        F.cumsum(Tensor(3.0), 1)
