"""Behaviours of ``functional`` / ``Tensor`` found by running the same programs on real MegEngine 1.13 and on
megxla (differential testing). Each expected value is what MegEngine 1.13.0 printed, written literally."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla import Tensor
from megxla.autodiff import GradManager


def _grads(fn, *arrays):
    ts = [Tensor(np.asarray(a, "float32")) for a in arrays]
    gm = GradManager().attach(ts)
    with gm:
        y = fn(*ts)
        gm.backward(y.sum())
    return [t.grad.numpy().tolist() for t in ts]


# --- maximum / minimum: NaN operands and ties -------------------------------------------------------------

def test_maximum_minimum_nan_follow_operand_order():
    a = Tensor(np.array([np.nan, 1.0], "float32"))
    b = Tensor(np.array([1.0, np.nan], "float32"))
    np.testing.assert_array_equal(F.maximum(a, b).numpy(), [np.nan, 1.0])
    np.testing.assert_array_equal(F.minimum(a, b).numpy(), [1.0, np.nan])


def test_maximum_minimum_tie_gradient_goes_to_first_operand():
    assert _grads(F.maximum, [1.0, 2, 3], [1.0, 1, 4]) == [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert _grads(F.minimum, [1.0, 2, 3], [1.0, 1, 4]) == [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]


# --- clipping activations: values at NaN and gradients on the bounds ------------------------------------------

def test_clip_gradient_passes_on_the_bounds():
    assert _grads(lambda x: F.clip(x, 0, 1), [0.0, 1, 0.5, -1, 2]) == [[1.0, 1.0, 1.0, 0.0, 0.0]]


def test_relu6_hsigmoid_hswish_edges():
    assert F.relu6(Tensor(np.array([np.nan], "float32"))).numpy().tolist() == [6.0]
    assert np.isnan(F.hsigmoid(Tensor(np.array([np.nan], "float32"))).numpy()[0])
    assert _grads(F.relu6, [0.0, 6, 3, -1, 7]) == [[0.0, 0.0, 1.0, 0.0, 0.0]]
    g = _grads(F.hsigmoid, [-3.0, 3, 0, -4, 4])[0]
    np.testing.assert_allclose(g, [0.0, 0.0, 1 / 6, 0.0, 0.0], rtol=1e-6)
    g = _grads(F.hswish, [-3.0, 3, 0, -4, 4])[0]
    np.testing.assert_allclose(g, [-0.5, 1.5, 0.5, 0.0, 1.0], rtol=1e-6)
    assert np.signbit(F.hswish(Tensor(np.array([-4.0], "float32"))).numpy()[0])  # -4 * 0 is -0.0


def test_abs_leaky_relu_prelu_gradient_at_zero():
    assert _grads(F.abs, [0.0, 1, -1]) == [[-1.0, 1.0, -1.0]]
    assert not np.signbit(F.abs(Tensor(np.array([0.0, -0.0], "float32"))).numpy()).any()
    g = _grads(lambda x: F.leaky_relu(x, 0.1), [0.0, 1, -1])[0]
    np.testing.assert_allclose(g, [1.0, 1.0, 0.1], rtol=1e-6)
    g = _grads(F.prelu, [0.0, 1, -1], [0.1, 0.2, 0.3])
    np.testing.assert_allclose(g[0], [1.0, 1.0, 0.3], rtol=1e-6)
    np.testing.assert_allclose(g[1], [0.0, 0.0, -1.0], rtol=1e-6)


# --- prelu: an elementwise op --------------------------------------------------------------------------------

def test_prelu_weight_broadcasts_elementwise():
    x = Tensor(np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, -6.0]], "float32"))
    w = Tensor(np.array([[0.5, 0.1, 2.0], [0.1, 1.0, 0.5]], "float32"))
    np.testing.assert_allclose(F.prelu(x, w).numpy(), [[-0.5, 2.0, -6.0], [4.0, -5.0, -3.0]])
    # (4, 3, 3) with a (3,) weight: the trailing axis, as any elementwise broadcast
    x = Tensor(-np.ones((4, 3, 3), "float32"))
    out = F.prelu(x, Tensor(np.array([1.0, 2.0, 3.0], "float32"))).numpy()
    np.testing.assert_allclose(out[0, 0], [-1.0, -2.0, -3.0])


def test_prelu_python_slope_keeps_float16():
    assert F.prelu(Tensor(np.array([1, -2, 3], "float16")), 2.5).dtype == np.float16


# --- dtype promotion of non-tensor operands ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["uint8", "int16"])
def test_python_bool_keeps_integer_dtype(dtype):
    t = Tensor(np.array([1, 2], dtype))
    assert (t + True).dtype == np.dtype(dtype)
    assert (True * t).dtype == np.dtype(dtype)


def test_numpy_and_list_operands_promote_as_megengine():
    f16 = Tensor(np.array([1, 2], "float16"))
    i32 = Tensor(np.array([1, 2], "int32"))
    u8 = Tensor(np.array([1, 2], "uint8"))
    assert (f16 + np.array([3, 4], "int32")).dtype == np.float16
    assert (f16 + [3.0, 4.0]).dtype == np.float16
    assert (f16 + np.array([3, 4], "float32")).dtype == np.float32
    assert (i32 * np.array([True, False])).dtype == np.int32
    assert (u8 + [3, 4]).dtype == np.uint8
    assert (Tensor(np.array([1, 2], "int16")) + np.array([3, 4], "int32")).dtype == np.int32
    assert (i32 + np.array([3.0, 4.0], "float32")).dtype == np.float32


def test_matmul_promotes_mixed_dtypes():
    i = Tensor(np.array([[3, -2], [7, 4]], "int32"))
    h = Tensor(np.array([[1.5, -2.0], [3.0, 4.0]], "float16"))
    b = Tensor(np.array([[True, False], [True, True]]))
    assert (i @ h).dtype == np.float32
    assert (b @ i).dtype == np.float32
    np.testing.assert_allclose((i @ h).numpy(), [[-1.5, -14.0], [22.5, 2.0]])


def test_clip_of_bool_is_float32():
    out = F.clip(Tensor([True, False]), 0, 1)
    assert out.dtype == np.float32 and out.numpy().tolist() == [1.0, 0.0]
