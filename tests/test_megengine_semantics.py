"""Same program, same numbers: each test is one place where megxla follows MegEngine 1.13's observable behaviour
(issues 11 and 20). Each is written as "MegEngine gives X", with the value MegEngine 1.13.0 (CPU) prints."""
import pickle
import warnings

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
    # MegEngine gives: CompNode("cpu0:0" from "xpux:0")
    assert repr(x.device) == 'CompNode("cpu0:0" from "xpux:0")'
    assert str(x.device) == "xpux:0"
    assert x.device.logical_name == "xpux:0" and x.device.physical_name == "cpu0:0"
    assert x.device == "cpu0" and x.device == "xpux" and x.device == "cpu0:0" and x.device != "cpu0:1"
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
        Tensor([1.0], device="cpu9")


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
