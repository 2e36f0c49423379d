"""Results in narrow dtypes -- float16, bfloat16, uint8 -- against NumPy in float64: no silently wrong values
(an adversarial sweep over ~200 functions in 8 dtypes, 2026-11-30, found each case below), eagerly and in clusters."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla import Tensor


@pytest.fixture(params=[False, True], ids=["eager", "auto_jit"])
def mode(request):
    mge.config.auto_jit = request.param
    yield request.param
    mge.config.auto_jit = False


def _f32(t):
    return t.numpy().astype("float32")


def test_round_is_half_away_from_zero_without_rounding_the_half_up(mode):
    # floor(|x| + 0.5) rounded its sum: round(0.49999997) was 1, float32 round(8388609) 8388610
    assert F.round(Tensor(np.array([0.49999997, 8388609.0, -8388609.0, 2.5, -2.5], "float32"))).numpy().tolist() \
        == [0.0, 8388609.0, -8388609.0, 3.0, -3.0]
    assert F.round(Tensor(np.array([0.49976, 1025.0, 2047.0], "float16"))).numpy().tolist() == [0.0, 1025.0, 2047.0]
    assert _f32(F.round(Tensor(np.array([0.498046875, 129.0, 255.0]), dtype="bfloat16"))).tolist() == [0, 129, 255]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_sums_and_averages_accumulate_in_float32(mode, dtype):
    ones = Tensor(np.ones((1, 1, 64, 64)), dtype=dtype)
    assert _f32(F.avg_pool2d(ones, 64)).ravel().tolist() == [1.0]  # (was 2 in float16, 0.0625 in bfloat16)
    assert _f32(F.adaptive_avg_pool2d(ones, 1)).ravel().tolist() == [1.0]
    tenth = Tensor(np.full((1, 1, 16, 16), 0.1), dtype=dtype)
    want = float(tenth.numpy().astype("float64").mean())
    np.testing.assert_allclose(_f32(F.avg_pool2d(tenth, 16)).ravel(), [want], rtol=1e-2)  # (bfloat16: 0.115)
    x = Tensor(np.full(3000, 0.1), dtype=dtype)
    exact = x.numpy().astype("float64")
    np.testing.assert_allclose(float(_f32(F.sum(x))), exact.sum(), rtol=1e-2)  # (bfloat16 100000 x 0.1: 9600)
    np.testing.assert_allclose(_f32(F.cumsum(x, 0)), np.cumsum(exact), rtol=1e-2)
    assert F.sum(x).dtype == x.dtype and F.cumsum(x, 0).dtype == x.dtype


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layer_norm_of_low_precision_input_normalises_in_float32(mode, dtype):
    base = {"float16": 1000.0, "bfloat16": 100.0}[dtype]
    v = base + np.array([[0.0, 0.5, 1.0, 1.5]])  # (exact in the dtype)
    want = (v - v.mean()) / np.sqrt(v.var() + 1e-5)  # [-1.34, -0.45, 0.45, 1.34]
    for out in (F.layer_norm(Tensor(v, dtype=dtype), (4,), False),
                F.nn.general_norm(Tensor(v, dtype=dtype), (1,), False)):
        assert out.dtype == np.dtype(Tensor(v, dtype=dtype).dtype)
        np.testing.assert_allclose(_f32(out), want, rtol=1e-2, atol=1e-2)  # (was [-1.63, -0.82, 0, 0.82])


def test_where_takes_the_float_operands_type_as_megengine(mode):
    # MegEngine 1.13's where is not its elementwise promotion (checked against MegEngine 1.13.0 on the CPU): a float
    # operand's type wins over an integer or bool one -- float16 with int32 is float16 (inf for 70000), where
    # ``a + b`` is float32 --, an integer's over bool, two floats or two integers promote as ever
    m = Tensor(np.array([False, False, True]))
    a, b = Tensor(np.array([1.5, 1.5, 1.5], "float16")), Tensor(np.array([70000, 2000, 0], "int32"))
    out = F.where(m, a, b)
    assert out.dtype == np.float16 and (a + b).dtype == np.float32
    assert out.numpy().tolist() == [float("inf"), 2000.0, 1.5]
    cases = {("int8", "float16"): "float16", ("int32", "bool"): "int32", ("int8", "bool"): "int8",
             ("bool", "float16"): "float16", ("uint8", "float16"): "float16", ("float16", "float32"): "float32",
             ("bool", "float32"): "float32", ("int8", "int32"): "int32"}
    m = Tensor(np.array([True, False]))
    for (dx, dy), want in cases.items():
        x, y = Tensor(np.array([3, 4]).astype(dx)), Tensor(np.array([1, 0]).astype(dy))
        assert F.where(m, x, y).dtype == np.dtype(want), (dx, dy)
        assert F.where(m, y, x).dtype == np.dtype(want), (dy, dx)


def test_hard_and_log_sigmoids_of_uint8_compute_as_of_int32(mode):
    # -3 and the negation wrapped in uint8: hswish([0, 3, 200]) was [0, 0, 0]
    u, i = Tensor(np.array([0, 3, 200], "uint8")), Tensor(np.array([0, 3, 200], "int32"))
    for f in (F.hswish, F.hsigmoid, F.logsigmoid):
        np.testing.assert_allclose(f(u).numpy(), f(i).numpy(), rtol=1e-6, err_msg=f.__name__)
    np.testing.assert_allclose(F.hsigmoid(u).numpy(), [0.5, 1.0, 1.0])
    np.testing.assert_allclose(F.logsigmoid(u).numpy(), -np.log1p(np.exp(-np.array([0.0, 3.0, 200.0]))), rtol=1e-6,
                               atol=1e-30)


def test_scatter_converts_its_source_as_setitem_does(mode):
    # C's conversion (MegEngine's): -1.5 into uint8 is 255, where XLA's saturating convert gave 0
    x = Tensor(np.zeros((1, 2), "uint8"))
    out = F.scatter(x, 1, Tensor(np.array([[0]], "int32")), Tensor(np.array([[-1.5]], "float32")))
    y = Tensor(np.zeros((1, 2), "uint8"))
    y[0, 0] = Tensor(np.array(-1.5, "float32"))
    assert out.numpy().tolist() == y.numpy().tolist() == [[255, 0]]


def test_clip_bounds_past_an_integer_dtypes_range_clip_at_its_ends(mode):
    # (the kernel converted -1 into uint8 and raised NumPy's OverflowError)
    u = Tensor(np.array([0, 3, 200], "uint8"))
    assert F.clip(u, -1, 2).numpy().tolist() == [0, 2, 2]
    assert F.clip(u, 1, 300).numpy().tolist() == [1, 3, 200]
    assert F.clip(Tensor(np.array([-100, 5, 100], "int8")), -1000, 50).numpy().tolist() == [-100, 5, 50]
    assert F.clip(u, -1, 2).dtype == np.uint8


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_a_narrow_index_into_an_axis_longer_than_its_type_holds(mode, dtype):
    # JAX wraps a negative index by adding the axis's length in the index's type: 300 overflowed int8 (OverflowError)
    x = Tensor(np.arange(600, dtype="float32").reshape(2, 300))
    i = Tensor(np.array([1, -1, 5], dtype))
    assert x[1, i].numpy().tolist() == [301.0, 599.0, 305.0]
    assert F.gather(x, 1, F.broadcast_to(i, (2, 3))).numpy().tolist() == [[1, 299, 5], [301, 599, 305]]
    assert F.indexing_one_hot(x, Tensor(np.array([7, 2], dtype)), 1).numpy().tolist() == [7.0, 302.0]
    y = x + 0
    y[1, i] = 0.0
    assert np.count_nonzero(y.numpy() == 0) == 4 and y.numpy()[1, 299] == 0
    z = F.scatter(x + 0, 1, F.broadcast_to(i, (2, 3)), F.zeros((2, 3)))
    assert z.numpy()[:, [1, 299, 5]].tolist() == [[0, 0, 0], [0, 0, 0]]


def test_indexing_one_hot_takes_class_ids_kept_as_floats_or_bools_as_megengine_does(mode):
    # MegEngine converts the index with ``convert_single_value(index, dtype="int32")``: OMNet's loss picks with
    # labels made as ``F.ones(shape) * mask`` (float32). megxla raised "index must be an integer tensor".
    x = Tensor(np.arange(12, dtype="float32").reshape(2, 3, 2))
    labels = F.ones((2, 2)) * (Tensor(np.array([[0.2, 0.9], [0.7, 0.1]], "float32")) > 0.5)
    assert labels.dtype == np.float32
    assert F.nn.indexing_one_hot(x, labels, 1).numpy().tolist() == [[0.0, 3.0], [8.0, 7.0]]
    assert F.indexing_one_hot(x, Tensor(np.array([[2.0, 1.0], [0.0, 2.0]], "float32")), 1).numpy().tolist() == \
        [[4.0, 3.0], [6.0, 11.0]]
    assert F.indexing_one_hot(x, Tensor(np.array([[True, False], [False, True]])), 1).numpy().tolist() == \
        [[2.0, 1.0], [6.0, 9.0]]


def test_64_bit_dtypes_asked_for_are_their_32_bit_ones_without_jaxs_warning(mode):
    # MegEngine has no 64-bit tensors; code written for it (or ported from PyTorch) asks for int64 labels and
    # indices. Each such cast printed JAX's "will be truncated" warning, every time.
    import warnings
    x = Tensor([1.5, 2.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        made = [x.astype("int64"), F.astype(x, np.float64), Tensor(np.arange(2), dtype="int64"),
                mge.tensor([1, 2], dtype=np.int64), F.zeros((2,), dtype="int64"), F.full((2,), 3, dtype="int64"),
                F.arange(2, dtype="int64"), F.eye(2, dtype="int64"), F.linspace(0, 1, 2, dtype="float64")]
        values = [t.numpy() for t in made]
    assert [str(t.dtype) for t in made] == ["int32", "float32"] + ["int32"] * 6 + ["float32"]
    assert values[0].tolist() == [1, 2] and x.astype("int32").astype("int64").dtype == np.int32
