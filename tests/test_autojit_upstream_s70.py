"""Session 70: MegEngine 1.13's upstream unit tests run eagerly and under auto-jit, and the values MegEngine gives
for NaN / inf / out-of-range fill values on integer tensors and for PRELU at 0. Each test fails without its fix;
each runs eagerly and under auto-jit (three calls: collected, compiled, cached), which must agree."""
from __future__ import annotations

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.autodiff import GradManager
from megxla.jit import _autojit

NAN, INF = float("nan"), float("inf")
INT_MIN = -2 ** 31


@pytest.fixture(params=["eager", "auto_jit"])
def mode(request, fresh_auto_jit_state):
    mge.config.auto_jit = request.param == "auto_jit"
    yield request.param


def _thrice(fn):
    """``fn()``'s value (a list) in each of three calls, which must agree."""
    got = [fn() for _ in range(3)]
    assert all(np.array_equal(np.asarray(g), np.asarray(got[0]), equal_nan=True) for g in got), got
    return got[0]


# --- fill values on integer tensors: MegEngine's x86 cast (INT_MIN for NaN, inf and beyond int32), then wrapped ---
# (values printed by MegEngine 1.13.0; megxla raised "cannot convert float NaN to integer", wrapped 1e10, and
# saturated pad's value instead)
FILLS = [  # (dtype, value, the fill MegEngine gives)
    ("int32", NAN, INT_MIN), ("int32", INF, INT_MIN), ("int32", -INF, INT_MIN), ("int32", 1e10, INT_MIN),
    ("int32", -3e9, INT_MIN), ("int32", -2.5, -2), ("int32", -0.0, 0), ("int16", 1e10, 0), ("int16", NAN, 0),
    ("int16", 70000.5, 4464), ("int8", INF, 0), ("int8", 300.0, 44), ("uint8", NAN, 0), ("uint8", -1.0, 255),
]


@pytest.mark.parametrize("dtype, value, want", FILLS)
def test_full_and_full_like_of_an_integer_dtype_cast_the_value_as_megengine(mode, dtype, value, want):
    x = mge.Tensor(np.array([1, 0], dtype))
    assert _thrice(lambda: F.full_like(x, value).numpy().tolist()) == [want, want]
    got = F.full((2,), value, dtype=dtype)
    assert got.dtype == np.dtype(dtype) and got.numpy().tolist() == [want, want]


@pytest.mark.parametrize("dtype, value, want", FILLS)
def test_pad_of_an_integer_tensor_casts_its_constant_as_megengine(mode, dtype, value, want):
    x = mge.Tensor(np.array([1, 0], dtype))
    assert _thrice(lambda: F.nn.pad(x + 0, ((1, 0),), constant_value=value).numpy().tolist()) == [want, 1, 0]


# --- PRELU: x > 0 ? x : x * slope (0 * slope at 0), gradient x >= 0 ? 1 : slope --------------------------------
# (megxla's where(x >= 0, ...) gave 0 at 0 where MegEngine gives nan / -0.0, and nan gradients for a nan slope)

@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_leaky_relu_at_zero_is_zero_times_the_slope(mode, dtype):
    x = mge.Tensor(np.array([0, 1, -1], dtype))
    got = _thrice(lambda: F.leaky_relu(x * 1, NAN).numpy())
    np.testing.assert_array_equal(got, [NAN, 1, NAN])
    got = _thrice(lambda: F.leaky_relu(x * 1, -1.0).numpy())
    np.testing.assert_array_equal(got, [0, 1, 1])
    assert np.signbit(got[0])  # (-0.0, as MegEngine's 0 * -1)


@pytest.mark.parametrize("slope, value, grad", [
    (0.1, [0.0, -0.0, 1.0, -0.1], [1.0, 1.0, 1.0, 0.1]),
    (NAN, [NAN, NAN, 1.0, NAN], [1.0, 1.0, 1.0, NAN]),
    (-1.0, [-0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, -1.0]),
])
@pytest.mark.parametrize("fn", ["leaky_relu", "prelu"])
def test_prelu_values_and_gradients_at_zero_and_for_a_nan_slope_are_megengines(mode, fn, slope, value, grad):
    def step():
        x = mge.Parameter(np.array([0.0, -0.0, 1.0, -1.0], "float32"))
        w = mge.Parameter(np.array([slope], "float32"))
        gm = GradManager().attach([x, w])
        with gm:
            y = F.leaky_relu(x, slope) if fn == "leaky_relu" else F.prelu(x, w)
            gm.backward(y.sum())
        out = [y.numpy(), x.grad.numpy()]
        if fn == "prelu":
            out.append(w.grad.numpy())
        return out

    for _ in range(3):
        got = step()
        np.testing.assert_array_equal(got[0], np.float32(value))
        np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(value))
        np.testing.assert_array_equal(got[1], np.float32(grad))
        if fn == "prelu":
            np.testing.assert_array_equal(got[2], [-1.0])  # (only x = -1 reaches the slope: x at 0 gives 0)


# --- bool inputs (session 71; printed by MegEngine 1.13.0): Padding has no bool kernel ("unsupported Bool dtype for
# forward padding opr", a RuntimeError), and PRELU of a bool is float32 with ``0 * slope`` for False -- megxla padded
# bools, and XLA folded ``convert(x) * slope`` into a select with +0.0 ---

@pytest.mark.parametrize("how", ["constant", "reflect", "replicate"])
def test_pad_of_a_bool_tensor_raises_as_megengine(mode, how):
    x = mge.Tensor(np.array([[True, False], [False, True]]))
    for _ in range(3):
        with pytest.raises(RuntimeError, match="pad: unsupported dtype bool"):
            F.nn.pad(x, ((1, 1), (1, 1)), mode=how)
    assert F.nn.pad(x.astype("int32"), ((1, 1), (0, 0))).numpy().tolist() == [[0, 0], [1, 0], [0, 1], [0, 0]]


@pytest.mark.parametrize("slope, want", [(0.1, [1.0, 0.0]), (-0.1, [1.0, -0.0]), (NAN, [1.0, NAN])])
def test_leaky_relu_and_prelu_of_bools_give_zero_times_the_slope_for_false(mode, slope, want):
    x = mge.Tensor(np.array([True, False]))
    for got in (_thrice(lambda: F.leaky_relu(x, slope).numpy()),
                _thrice(lambda: F.prelu(x, mge.Tensor([slope], "float32")).numpy())):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


# --- upstream functional/test_tensor.py::test_condtake[True]: a hand-built graph's cond_take under auto-jit --------
# (with auto-jit on but a step run eagerly -- its timer's choice -- cond_take and non_zero took auto-jit's
# kept-in-place branch, whose indices come from an ``arange`` outside the graph: idx a plain Tensor, not a graph
# variable, and ``get_var_value(idx)`` failed on ``idx.var``, Tensor.var the variance)

def _graph_value(v):
    from megxla.core.tensor.megbrain_graph import OutputNode
    o = OutputNode(v.var)
    o.graph.compile(o.outputs).execute()
    return o.get_value().numpy()


@pytest.mark.parametrize("paused", [False, True])
def test_cond_take_and_non_zero_of_graph_variables_stay_in_the_graph(mode, paused, monkeypatch):
    from megxla.utils.network import Network
    from megxla.utils.network_node import VarNode
    if paused:
        monkeypatch.setattr(_autojit._local, "paused", True)  # (auto-jit on, this step eager)
    x = np.array([[1, 2, 3], [4, 5, 6]], "float32")
    y = np.array([[True, False, True], [False, True, True]])
    network = Network()
    val, idx = F.cond_take(network.make_const(y), network.make_const(x))
    (nz,) = F.non_zero(network.make_const(y.reshape(-1)), as_tuple=True)
    assert isinstance(val, VarNode) and isinstance(idx, VarNode) and isinstance(nz, VarNode)
    np.testing.assert_equal(_graph_value(val), x[y])
    np.testing.assert_equal(_graph_value(idx), np.flatnonzero(y))
    np.testing.assert_equal(_graph_value(nz), np.flatnonzero(y))
