"""Session 80: ``megengine.random`` / ``save`` / ``load`` API parity with MegEngine 1.13 (differential probes).

Expected shapes, dtypes, device names and exception types are what MegEngine 1.13.0 printed for the same programs
(the sampled values are JAX's on purpose, docs/differences.md, and are not compared).
"""
import io

import numpy as np
import pytest

import megxla as mge
import megxla.random as R
from megxla import Tensor


# ---- random ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [-1, 1.5, "a", 2 ** 64])
def test_rng_rejects_seeds_megengine_rejects(seed):
    # MegEngine: TypeError "new_rng_handle(): incompatible function arguments" (its handle takes a uint64); megxla
    # made a generator of -1, 1.5 and 2**64 and raised ValueError for "a"
    with pytest.raises(TypeError, match="seed"):
        R.RNG(seed)


@pytest.mark.parametrize("seed", [0, True, np.int64(3), 2 ** 63, 2 ** 64 - 1])
def test_rng_takes_seeds_megengine_takes(seed):
    # MegEngine: a (1,) float32 sample for each
    out = R.RNG(seed).uniform(size=(1,))
    assert out.shape == (1,) and out.dtype == np.float32


@pytest.mark.parametrize("shuffle", [R.shuffle, R.RNG(1).shuffle])
def test_shuffle_of_a_0d_tensor_gives_shape_1(shuffle):
    # MegEngine: shuffle(Tensor(5)) returns None and leaves the tensor as shape (1,) [5] int32; megxla raised
    x = Tensor(5)
    assert shuffle(x) is None
    assert x.shape == (1,) and x.dtype == np.int32
    np.testing.assert_array_equal(x.numpy(), [5])


def test_shuffle_keeps_parameter_and_returns_none():
    # MegEngine: None, the Parameter shuffled in place (same values, still a Parameter)
    p = mge.Parameter(np.arange(4, dtype="float32"))
    assert R.shuffle(p) is None
    assert type(p) is mge.Parameter and sorted(p.numpy().tolist()) == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("call, message", [
    (lambda: R.permutation(-1), "Permutation is not defined when n < 0"),
    (lambda: R.permutation(5.0), None),
    (lambda: R.permutation("5"), None),
    (lambda: R.permutation(Tensor(np.zeros((0, 2), "float32"))), "size needs to be greater than 0"),
    (lambda: R.shuffle(Tensor(np.zeros((0,), "float32"))), "size needs to be greater than 0"),
    (lambda: R.gamma(Tensor([1.0, 2.0]), Tensor([1.0, 2.0, 3.0])), "do not broadcast"),
    (lambda: R.beta(Tensor([1.0, 2.0]), Tensor([1.0, 2.0, 3.0])), "do not broadcast"),
])
def test_asserted_arguments_raise_assertion_error(call, message):
    # MegEngine asserts these: AssertionError ("Permutation is not defined when n < 0", a bare one for a non-int n,
    # "size needs to be greater than 0", "The size of inps[1] (3) must match the size (2) at dim 0"); megxla raised
    # an OpError, which is no AssertionError. It stays a ValueError too.
    with pytest.raises(AssertionError, match=message):
        call()
    with pytest.raises(ValueError):
        call()


@pytest.mark.parametrize("draw, shape", [
    (lambda h: R.gamma(h, Tensor([1.0, 1.0], dtype="float16")), (2,)),
    (lambda h: R.beta(h, Tensor([1.0, 1.0], dtype="float16")), (2,)),
    (lambda h: R.poisson(h), (2,)),
    (lambda h: R.poisson(h, size=(3,)), (3, 2)),
    (lambda h: R.RNG(1).gamma(h, Tensor([2.0, 2.0], dtype="float16"), size=2), (2, 2)),
])
def test_float16_parameters_give_float16_samples(draw, shape):
    # MegEngine: float16 samples of these shapes (its kernels sample in the parameters' dtype); megxla gave float32
    out = draw(Tensor([1.0, 2.0], dtype="float16"))
    assert out.dtype == np.float16 and out.shape == shape
    assert np.isfinite(out.numpy()).all()


def test_float32_parameters_keep_float32_samples():
    # MegEngine: float32
    assert R.gamma(Tensor([1.0, 2.0]), 2.0).dtype == np.float32
    assert R.poisson(3.0, size=(2,)).dtype == np.float32


# ---- save / load map_location -----------------------------------------------------------------------------------
def _checkpoint():
    buf = io.BytesIO()
    mge.save({"x": Tensor([1.0, 2.0]), "c": Tensor([1, 2], device="cpu0"), "p": mge.Parameter([3.0]),
              "c1": Tensor([1.5], device="cpu1:1")}, buf)
    return buf.getvalue()


def test_map_location_callable_sees_megengines_device_names():
    # MegEngine calls it with the names the file gives, stream included: 'xpux:0', 'cpu0:0', 'xpux:0', 'cpu1:1'
    # (megxla passed 'xpux', 'cpu0', 'xpux', 'cpu1'), and moves every tensor to what it returns
    seen = []
    out = mge.load(io.BytesIO(_checkpoint()), map_location=lambda d: (seen.append(d), "cpu2")[1])
    assert seen == ["xpux:0", "cpu0:0", "xpux:0", "cpu1:1"]
    assert {k: str(v.device) for k, v in out.items()} == {"x": "cpu2:0", "c": "cpu2:0", "p": "cpu2:0",
                                                           "c1": "cpu2:0"}
    assert type(out["p"]) is mge.Parameter
    # a callable that selects by the full name (MegEngine's: only "cpu0:0" moves)
    out = mge.load(io.BytesIO(_checkpoint()), map_location=lambda d: "cpu3" if d == "cpu0:0" else d)
    assert {k: str(v.device) for k, v in out.items()} == {"x": "xpux:0", "c": "cpu3:0", "p": "xpux:0",
                                                           "c1": "cpu1:1"}


def test_map_location_name_moves_a_tensor_of_another_stream():
    # MegEngine: map_location="cpu1" puts the "cpu1:1" tensor on cpu1:0 (megxla left it on cpu1:1)
    out = mge.load(io.BytesIO(_checkpoint()), map_location="cpu1")
    assert {k: str(v.device) for k, v in out.items()} == {"x": "cpu1:0", "c": "cpu1:0", "p": "cpu1:0",
                                                           "c1": "cpu1:0"}


def test_map_location_dict():
    # MegEngine: {"xpux": "cpu1", "cpu0": "cpu3"} maps by device name, leaving cpu1:1 where it is
    out = mge.load(io.BytesIO(_checkpoint()), map_location={"xpux": "cpu1", "cpu0": "cpu3"})
    assert {k: str(v.device) for k, v in out.items()} == {"x": "cpu1:0", "c": "cpu3:0", "p": "cpu1:0",
                                                           "c1": "cpu1:1"}


@pytest.mark.parametrize("mapping", [{"foo": "cpu0"}, {"xpux": "bar"}, {0: "cpu0"}])
def test_map_location_dict_of_non_devices_raises_assertion_error(mapping):
    # MegEngine: AssertionError "Invalid locator_map key value foo" (and "... bar"); megxla ignored the key "foo"
    with pytest.raises(AssertionError, match="invalid map_location key value"):
        mge.load(io.BytesIO(_checkpoint()), map_location=mapping)


def test_rocm_device_count_is_zero_without_rocm():
    # MegEngine 1.13 (CPU build): get_device_count("rocm") == 0; megxla answered the CPU cores
    from megxla._device import get_device_count
    assert get_device_count("rocm") == 0
