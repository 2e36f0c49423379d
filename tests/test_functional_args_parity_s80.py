"""Argument validation of ``megengine.functional`` against MegEngine 1.13 (session 80 differential probes).

Each expected exception type or value is what MegEngine 1.13.0 raised / printed for the same call (the probes live
in /tmp/s80/fargs). Where MegEngine asserts, megxla raises an ``AssertedOpError`` (an ``AssertionError`` too);
where its parameter binding fails ("Unable to cast Python instance to C++ type"), an ``OpError`` (a RuntimeError).
"""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M


def _t(shape, seed=0):
    return mge.tensor(np.random.RandomState(seed).randn(*shape).astype("float32"))


# ---- None where a tensor is required --------------------------------------------------------------------------
# MegEngine: TypeError ("py_apply expects tensor as inputs", "the operand is None ...") or an AttributeError of its
# Python code; megxla computed on an empty (0,) tensor (F.sum(None) was 0.0, F.nn.pad(None, ((1, 1),)) [0, 0]).
@pytest.mark.parametrize("call", [
    lambda v: F.sum(None), lambda v: F.mean(None), lambda v: F.norm(None), lambda v: F.softmax(None),
    lambda v: F.cumsum(None, 0), lambda v: F.nn.pad(None, ((1, 1),)), lambda v: F.nn.dropout(None, 0.5),
    lambda v: F.zeros_like(None), lambda v: F.full_like(None, 1), lambda v: F.clip(None, 0, 1),
    lambda v: F.copy(None), lambda v: F.flatten(None), lambda v: F.expand_dims(None, 0),
    lambda v: F.sort(None), lambda v: F.topk(None, 1), lambda v: F.logsumexp(None, 0),
    lambda v: F.conv2d(None, _t((3, 2, 3, 3))), lambda v: F.nn.linear(v, None), lambda v: F.matmul(None, v),
    lambda v: F.nn.layer_norm(None, (3,), False), lambda v: F.nn.max_pool2d(None, 2),
    lambda v: F.concat([None, v]), lambda v: F.reshape(None, (6,)), lambda v: F.where(v > 0, None, v),
    lambda v: F.nn.l1_loss(None, v), lambda v: F.nn.cross_entropy(v, None),
    lambda v: F.vision.roi_align(None, _t((1, 5)), 2), lambda v: F.vision.remap(_t((1, 2, 4, 4)), None),
])
def test_none_operand_raises_type_error(call):
    with pytest.raises(TypeError):
        call(_t((2, 3)))


# ---- compute_mode / conv_mode ---------------------------------------------------------------------------------
def test_conv_compute_mode_names():
    x, w = _t((1, 2, 5, 5)), _t((3, 2, 3, 3), 1)
    ref = F.conv2d(x, w).numpy()
    # MegEngine binds "default" / "float32" in any case
    for mode in ("default", "DEFAULT", "float32", "Float32"):
        np.testing.assert_allclose(F.conv2d(x, w, compute_mode=mode).numpy(), ref, rtol=1e-6)
    # MegEngine: RuntimeError("Unable to cast Python instance to C++ type") for anything else (megxla ran them)
    for mode in ("foo", None, 0):
        with pytest.raises(RuntimeError):
            F.conv2d(x, w, compute_mode=mode)
        with pytest.raises(RuntimeError):
            F.conv_transpose2d(x, _t((2, 3, 3, 3)), compute_mode=mode)
    with pytest.raises(RuntimeError):  # the layer passes it on: MegEngine raises at the forward
        M.Conv2d(2, 3, 3, compute_mode="foo")(x)


def test_matmul_compute_mode_takes_any_string_only():
    a, b = _t((2, 4)), _t((4, 3), 1)
    ref = F.matmul(a, b).numpy()
    # MegEngine 1.13 runs matmul / linear with any string (compute_mode="foo" gives the product) ...
    np.testing.assert_allclose(F.matmul(a, b, compute_mode="foo").numpy(), ref, rtol=1e-6)
    # ... and raises RuntimeError ("Unable to cast") for a non-string
    for mode in (None, 0, 1):
        with pytest.raises(RuntimeError):
            F.matmul(a, b, compute_mode=mode)
        with pytest.raises(RuntimeError):
            F.nn.linear(a, _t((3, 4), 1), compute_mode=mode)


def test_conv_mode_is_asserted():
    # MegEngine asserts conv_mode (conv3d: AssertionError; conv2d's assert fails on its ``.name`` fallback)
    with pytest.raises(AssertionError):
        F.conv3d(_t((1, 2, 4, 4, 4)), _t((3, 2, 2, 2, 2), 1), conv_mode="convolution")
    with pytest.raises(AssertionError):
        F.conv2d(_t((1, 2, 5, 5)), _t((3, 2, 3, 3), 1), conv_mode="foo")


# ---- mode names -----------------------------------------------------------------------------------------------
def test_pad_mode_and_value():
    v = _t((2, 3))
    for mode in ("foo", "symmetric", "wrap"):  # MegEngine: AssertionError
        with pytest.raises(AssertionError):
            F.nn.pad(v, ((1, 1), (1, 2)), mode=mode)
    for value in ("a", None):  # MegEngine: RuntimeError ("Unable to cast"); megxla: ValueError / TypeError
        with pytest.raises(RuntimeError):
            F.nn.pad(v, ((1, 1), (1, 1)), constant_value=value)


def test_roi_and_cvt_color_modes_are_asserted():
    x = _t((1, 2, 4, 4))
    rois = mge.tensor(np.array([[0, 0.5, 0.5, 3, 3]], np.float32))
    for fn in (F.vision.roi_pooling, F.vision.roi_align):  # "only max/average mode is supported"
        with pytest.raises(AssertionError):
            fn(x, rois, 2, mode="avg")
    img = mge.tensor(np.zeros((1, 3, 3, 3), np.uint8))
    for mode in ("foo", "", "RGB2YUV_NV21"):  # "unspport mode for cvt_color"
        with pytest.raises(AssertionError):
            F.vision.cvt_color(img, mode)


# ---- losses ---------------------------------------------------------------------------------------------------
def test_loss_asserted_arguments():
    with pytest.raises(AssertionError):  # "norm must be L1 or L2"
        F.nn.hinge_loss(_t((4, 3)), F.sign(_t((4, 3), 1)), norm="foo")
    pr = F.nn.logsoftmax(_t((5, 2, 4)), axis=-1)
    pl, ll = mge.tensor([5, 4], dtype="int32"), mge.tensor([2, 1], dtype="int32")
    cl = mge.tensor([[1, 2], [3, 0]], dtype="int32")
    for blank in (5, -1):  # "blank must be in label range [0, 4), but got 5"
        with pytest.raises(AssertionError):
            F.nn.ctc_loss(pr, pl, cl, ll, blank=blank)
    p, lab = _t((4, 3)), mge.tensor([0, 2, 1, 1], dtype="int32")
    with pytest.raises(AssertionError):  # "can not set axis=None and keepdims=True"
        F.nn.cross_entropy(p, lab, axis=None)
    for axis in (1.0, (1,)):  # "Unable to cast" (megxla: a bare TypeError from its range check)
        with pytest.raises(RuntimeError):
            F.nn.cross_entropy(p, lab, axis=axis)


def test_cross_entropy_label_smooth_any_number():
    # MegEngine computes ``logZ - ls * mean(pred) - (1 - ls) * pred[label]`` for any number and takes None for
    # no smoothing; megxla refused outside [0, 1) and raised TypeError for None. Values printed by MegEngine 1.13.
    p = mge.tensor(np.random.RandomState(0).randn(4, 3).astype("float32"))
    lab = mge.tensor([0, 2, 1, 1], dtype="int32")
    for ls, want in ((1.5, 1.0993868), (-0.1, 1.9847422), (None, 1.9294075), (0.1, 1.8740728)):
        np.testing.assert_allclose(F.nn.cross_entropy(p, lab, label_smooth=ls).numpy(), want, rtol=1e-6)


# ---- axis / keepdims ------------------------------------------------------------------------------------------
def test_keepdims_must_be_bool_like():
    v = _t((2, 3))
    for fn in (F.sum, F.mean, F.max, F.prod, F.var, F.std, F.norm, F.logsumexp):
        # MegEngine's binding: RuntimeError for a string (megxla took any truthy value)
        with pytest.raises(RuntimeError):
            fn(v, axis=1, keepdims="yes")
        # ... and takes ints, NumPy bools and None
        assert fn(v, axis=1, keepdims=1).shape == (2, 1)
        assert fn(v, axis=1, keepdims=np.bool_(True)).shape == (2, 1)
        assert fn(v, axis=1, keepdims=None).shape == (2,)
    # argmax / argmin apply keepdims in MegEngine's Python code: any truthy value keeps the axis
    assert F.argmax(v, axis=1, keepdims="yes").shape == (2, 1)


def test_float_axis_raises_runtime_error():
    v = _t((2, 3))
    for fn in (F.sum, F.mean, F.max, F.var, F.norm, F.logsumexp, F.softmax, F.nn.logsoftmax):
        with pytest.raises(RuntimeError):  # MegEngine: "Unable to cast"; megxla: TypeError "not iterable"
            fn(v, axis=1.0)


def test_softmax_axis_types():
    v = _t((2, 3))
    with pytest.raises(RuntimeError):  # MegEngine: "Unable to cast"; megxla took '1' as axis 1
        F.softmax(v, "1")
    with pytest.raises(AssertionError):  # MegEngine asserts in its logsumexp
        F.nn.logsoftmax(v, None)
    with pytest.raises(AssertionError):  # "At least one of 'lower' or 'upper' must not be None"
        F.clip(v, None, None)


# ---- warp_perspective -----------------------------------------------------------------------------------------
_MATS = np.array([[[1, 0.1, 0.2], [0.05, 1, 0.3], [0.001, 0.002, 1]],
                  [[0.9, -0.1, 0.5], [0.1, 1.1, -0.3], [0.0, 0.003, 1]]], np.float32)


def test_warp_perspective_mat_idx_list_out_of_range():
    x = _t((1, 2, 4, 4))
    with pytest.raises(RuntimeError):  # MegEngine asserts ``idx < N_SRC`` in its kernel; megxla clamped
        F.vision.warp_perspective(x, mge.tensor(_MATS[:1]), (3, 3), mat_idx=[1])


def test_warp_perspective_nhwc_two_channels_as_megengine():
    # MegEngine's NHWC kernel (OpenCV's, coordinates rounded to 1/32 pixel) also takes 2-channel images; megxla
    # sampled those exactly. Expected values printed by MegEngine 1.13.
    x = mge.tensor(np.arange(80, dtype=np.float32).reshape(2, 4, 5, 2) / 7)
    want = np.array([[[[0.5, 0.64285713], [0.83035713, 0.97321427], [1.2053572, 1.3482143]],
                      [[1.9642856, 2.107143], [2.2857141, 2.4285712], [2.6607141, 2.8035712]]],
                     [[[5.857143, 6.0], [6.116071, 6.2589283], [6.375, 6.517857]],
                      [[6.9910717, 7.1339283], [7.375, 7.5178576], [7.767857, 7.9107146]]]], np.float32)
    got = F.vision.warp_perspective(x, mge.tensor(_MATS), (2, 3), format="NHWC").numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_warp_perspective_uint8_nearest():
    # MegEngine warps a uint8 NHWC image with interp_mode="nearest"; megxla refused ("must be a float tensor")
    xu = mge.tensor((np.arange(120) * 7 % 251).astype(np.uint8).reshape(2, 4, 5, 3))
    got = F.vision.warp_perspective(xu, mge.tensor(_MATS), (2, 3), format="NHWC", interp_mode="nearest",
                                    border_mode="constant", border_val=9).numpy()
    want = np.array([[[[0, 7, 14], [21, 28, 35], [42, 49, 56]], [[105, 112, 119], [126, 133, 140], [147, 154, 161]]],
                     [[[169, 176, 183], [190, 197, 204], [211, 218, 225]], [[23, 30, 37], [44, 51, 58], [65, 72, 79]]]],
                    np.uint8)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, want)
