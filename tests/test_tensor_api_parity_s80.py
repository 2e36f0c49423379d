"""Tensor-facing API against MegEngine 1.13 (session 80's differential probes, /tmp/s80/tensor): every expected value
below is what MegEngine 1.13.0 (CPU) printed for the same call."""
import numpy as np
import pytest

from megxla import Tensor
from megxla.core.tensor.utils import convert_inputs, dtype_promotion, get_device


def _t(dtype):
    return Tensor([1], dtype=dtype)


def test_dtype_promotion_ranks_kinds_as_megengine():
    # MegEngine's dtype_promotion ranks float > integer > bool: the highest rank present decides -- the Python scalars'
    # type where they outrank every tensor, else NumPy's promotion of the tensors of that rank alone. megxla applied
    # the elementwise operators' promotion (bool with int and int with float16 give float32) to all of them.
    assert dtype_promotion([_t("bool"), 1]) == np.int32
    assert dtype_promotion([_t("bool"), _t("int8")]) == np.int8
    assert dtype_promotion([_t("bool"), _t("uint8")]) == np.uint8
    assert dtype_promotion([_t("bool"), _t("float16")]) == np.float16
    assert dtype_promotion([_t("int32"), _t("float16")]) == np.float16
    assert dtype_promotion([_t("int8"), _t("float16"), 1.5]) == np.float16
    assert dtype_promotion([np.float16(1), np.int8(1)]) == np.float16
    assert dtype_promotion([np.bool_(True), 1]) == np.int32 and dtype_promotion([np.bool_(True), _t("int8")]) == np.int8
    assert dtype_promotion([True, 1]) == np.int32
    assert dtype_promotion([[1.5], 1]) == np.int32  # (a list is skipped)
    assert dtype_promotion([None, _t("int8")]) == np.int8
    # unchanged ones (MegEngine): the tensor's type where a scalar does not outrank it, NumPy's int16 for int8 + uint8
    assert dtype_promotion([_t("int8"), 300]) == np.int8 and dtype_promotion([_t("uint8"), -1]) == np.uint8
    assert dtype_promotion([_t("int8"), 1.5]) == np.float32 and dtype_promotion([_t("float16"), 1.5]) == np.float16
    assert dtype_promotion([_t("int8"), _t("uint8")]) == np.int16 and dtype_promotion([_t("bool"), True]) == np.bool_
    # one input that is not a list: itself (MegEngine: float32 for 1.5, int8 for an int8 tensor)
    assert dtype_promotion(1.5) == np.float32 and dtype_promotion(Tensor([1, 2], dtype="int8")) == np.int8
    for bad in ([None], []):  # MegEngine: ValueError("invalid input, no dtype avaliable")
        with pytest.raises(ValueError, match="no dtype avaliable"):
            dtype_promotion(bad)


def test_convert_inputs_as_megengine():
    # MegEngine: (Tensor([1, 0], int32), Tensor(1, int32)); (Tensor([1.], float16), Tensor([1.], float16)); None kept
    a, b = convert_inputs(Tensor([True, False]), 1)
    assert (a.dtype, b.dtype, a.numpy().tolist(), b.numpy().item()) == (np.int32, np.int32, [1, 0], 1)
    a, b = convert_inputs(_t("int32"), _t("float16"))
    assert a.dtype == b.dtype == np.float16
    none, c = convert_inputs(None, Tensor([1]))
    assert none is None and c.dtype == np.int32 and c.numpy().tolist() == [1]


def test_get_device_of_tensors_on_two_devices_is_ambiguous():
    # MegEngine: ValueError("ambiguous device: ...") for cpu0 and cpu1, and for xpux and cpu0; cpu0 with cpu0:0 is one
    for devices in (("cpu0", "cpu1"), ("xpux", "cpu0")):
        with pytest.raises(ValueError, match="ambiguous device"):
            get_device([Tensor([1.0], device=devices[0]), Tensor([1.0], device=devices[1])])
    with pytest.raises(ValueError, match="ambiguous device"):
        convert_inputs(Tensor([1.0], device="cpu0"), Tensor([1.0], device="cpu1"))
    assert str(get_device([Tensor([1.0], device="cpu0"), Tensor([1.0], device="cpu0:0")])) == "cpu0:0"
    assert str(get_device(Tensor([1.0], device="cpu0"))) == "cpu0:0" and str(get_device([])) == "xpux:0"


def test_pos_is_the_tensor_itself_and_grad_deletes_and_len_of_0d_says_ndim():
    # MegEngine 1.13: ``+x is x`` (a Parameter stays itself), ``del x.grad`` leaves None, len() of a 0-d tensor raises
    # TypeError("ndim is 0")
    import pytest
    import megxla as mge
    x = mge.Tensor([1.0, 2.0])
    p = mge.Parameter([1.0])
    assert (+x) is x and (+p) is p
    p.grad = mge.Tensor([3.0])
    del p.grad
    assert p.grad is None
    with pytest.raises(TypeError, match="ndim is 0"):
        len(mge.Tensor(1.0))
