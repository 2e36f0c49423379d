"""Session 72: fixes found triaging the 39 upstream MegEngine 1.13 unit tests that failed eagerly under megxla.
Each test fails without its fix; the expected values were printed by MegEngine 1.13.0 (CPU)."""
from __future__ import annotations

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla import jit
from megxla.core._imperative_rt.core2 import apply
from megxla.core.ops.builtin import TypeCvt
from megxla.core.tensor.dtype import get_scale, get_zero_point, qint8, quint4

DATA = np.array([-1.0, 0.013, 0.5, 2.0], np.float32)


# --- the low-level TypeCvt descriptor to and from quantized dtypes (upstream test_dtype_quant.py::test_qint_typecvt,
# there through a MegBrain graph): megxla cast the storage only, dropping the scale -- qint8 gave [-1, 0, 0, 2] with no
# quantization metadata, and back to float32 the raw integers --
def test_typecvt_to_qint8_quantizes_and_back():
    (y,) = apply(TypeCvt(dtype=qint8(0.01)), mge.Tensor(DATA))
    np.testing.assert_array_equal(y.numpy(), np.array([-100, 1, 50, 127], np.int8))
    assert y.dtype.metadata["mgb_dtype"]["name"] == "QuantizedS8"
    np.testing.assert_allclose(get_scale(y.dtype), 0.01)
    (z,) = apply(TypeCvt(dtype=np.float32), y)
    assert z.dtype == np.float32
    np.testing.assert_allclose(z.numpy(), [-1.0, 0.01, 0.5, 1.27], rtol=1e-6)


def test_typecvt_to_quint4_keeps_zero_point_and_range():
    (y,) = apply(TypeCvt(dtype=quint4(0.1, 5)), mge.Tensor(DATA))
    np.testing.assert_array_equal(y.numpy(), np.array([0, 5, 10, 15], np.uint8))  # saturated to [0, 15]
    assert y.dtype.metadata["mgb_dtype"]["name"] == "Quantized4Asymm"
    assert get_zero_point(y.dtype) == 5
    (z,) = apply(TypeCvt(dtype="float32"), y)
    np.testing.assert_allclose(z.numpy(), [-0.5, 0.0, 0.5, 1.0], rtol=1e-6)


def test_typecvt_descriptors_compare_by_quantization():
    # MegEngine: False, False, True (megxla compared the storage dtype only: True, True, True)
    assert TypeCvt(dtype=qint8(0.01)) != TypeCvt(dtype=np.int8)
    assert TypeCvt(dtype=qint8(0.01)) != TypeCvt(dtype=qint8(0.02))
    assert TypeCvt(dtype=qint8(0.01)) == TypeCvt(dtype=qint8(0.01))
    assert hash(TypeCvt(dtype=qint8(0.01))) == hash(TypeCvt(dtype=qint8(0.01)))


def test_typecvt_plain_dtypes_unchanged():
    (y,) = apply(TypeCvt(dtype="int32"), mge.Tensor([1.7, -1.2]))
    np.testing.assert_array_equal(y.numpy(), np.array([1, -1], np.int32))
    assert y.dtype.metadata is None


# --- trace.dump of a step that returns only a shape entry (upstream test_indexing_op.py::
# test_subtensor_when_shape_invalid): MegEngine's symbolic shapes make it a Tensor; megxla's are ints, and the dump
# said only "without return values" of a function that did return one --
def test_dump_of_only_python_values_says_why(tmp_path):
    @jit.trace(symbolic=True, capture_as_const=True)
    def fun(inp):
        return F.arange(4, inp.shape[-1] * 8 + 4, 8).shape[0]

    assert fun(mge.Tensor(np.zeros((1, 3, 4, 4), np.float32))) == 4
    with pytest.raises(ValueError, match=r"without return values cannot be dumped.*Python values \(4\).*mge.tensor"):
        fun.dump(str(tmp_path / "f.mge"), arg_names=["data"])
