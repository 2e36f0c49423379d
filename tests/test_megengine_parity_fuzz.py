"""Disagreements with MegEngine 1.13 found by scripts/megengine_fuzz.py (random calls run by both), fixed in megxla.

MegEngine's results are recorded here as constants (CI has no MegEngine); each test names the fuzzer's case."""
import numpy as np
import pytest

import megxla
import megxla.functional as F
from megxla.autodiff import GradManager

T = megxla.tensor


@pytest.mark.parametrize("fn, want", [(lambda x: F.softmax(x), 1.0), (lambda x: F.softmax(x, 0), 1.0),
                                      (lambda x: F.nn.logsoftmax(x, 0), 0.0), (lambda x: F.nn.logsoftmax(x, -1), 0.0)])
def test_softmax_of_a_0d_tensor_is_that_of_one_element(fn, want):
    # seed 0 case 290: MegEngine gives F.nn.logsoftmax(Tensor(2.0), 0) = [0.], F.softmax(Tensor(2.0)) = [1.] (its
    # kernel sees shape (1,); megxla keeps the 0-d shape, see docs/differences.md); megxla raised "axis 0 is out of
    # bounds for array of dimension 0".
    x = megxla.Parameter(np.float32(2.0))
    gm = GradManager().attach([x])
    with gm:
        y = fn(x)
        gm.backward(y * 3)
    assert y.shape == () and y.dtype == np.float32 and y.numpy() == want
    assert x.grad.numpy() == 0.0  # (MegEngine: 0, the softmax of one element does not depend on it)
    assert np.isnan(F.softmax(T(np.float32(np.inf))).numpy())  # MegEngine: [nan] (inf - inf)


def test_softmax_of_a_0d_tensor_checks_its_axis():
    with pytest.raises(megxla.core._dispatch.OpError, match="axis 1 is out of range"):
        F.softmax(T(np.float32(2.0)), 1)  # (MegEngine's process dies here)


def test_grouped_conv_gradient_where_every_tap_reads_padding():
    # seed 1 case 474: a 1x1 grouped kernel, stride 2, padding 1 on a width of 1 reads only padding columns; the
    # output is the bias and the gradients are zero (MegEngine: x.grad and w.grad all 0). megxla's backward raised
    # "Need at least one array to stack" (its taps-by-taps weight gradient had no tap).
    rs = np.random.RandomState(0)
    x = megxla.Parameter(rs.randn(2, 3, 6, 1).astype("float32"))
    w = megxla.Parameter(rs.randn(3, 1, 1, 1, 1).astype("float32"))
    b = T(rs.randn(1, 3, 1, 1).astype("float32"))
    gm = GradManager().attach([x, w])
    with gm:
        y = F.conv2d(x, w, b, stride=2, padding=1, dilation=2, groups=3)
        gm.backward((y * T(np.arange(y.size, dtype="float32").reshape(y.shape))).sum())
    assert y.shape == (2, 3, 4, 2)
    np.testing.assert_allclose(y.numpy(), np.broadcast_to(b.numpy(), (2, 3, 4, 2)))
    assert x.grad.shape == (2, 3, 6, 1) and not x.grad.numpy().any()
    assert w.grad.shape == (3, 1, 1, 1, 1) and not w.grad.numpy().any()


@pytest.mark.parametrize("fn", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [0, -1, [0]])
def test_arg_reductions_of_a_0d_tensor_with_an_axis_assert(fn, axis):
    # seed 2: MegEngine 1.13 asserts "axis 0 is out of bounds for tensor of dimension 0" (its sum / max / mean of a
    # 0-d tensor over axis 0 or -1 return the value: megxla too); megxla returned 0. Without an axis: 0, both.
    x = T(np.float32(3.0))
    with pytest.raises(AssertionError, match=f"axis {axis if isinstance(axis, int) else 0} is out of bounds for tensor "
                                             "of dimension 0"):
        getattr(F, fn)(x, axis=axis)
    assert getattr(F, fn)(x).numpy() == 0 and F.sum(x, axis=0).numpy() == 3.0


@pytest.mark.parametrize("call", [lambda x: F.nn.max_pool2d(x, (1, 1), stride=(2, 2), padding=(0, 1)),
                                  lambda x: F.nn.max_pool2d(x, 1, stride=(1, 2), padding=(0, 1)),
                                  lambda x: F.nn.avg_pool2d(x, (1, 1), stride=(2, 2), padding=(0, 1))])
def test_pooling_window_wholly_in_the_padding_raises(call):
    # seed 5 case 239 (--ops api): MegEngine raises "The pooling window lies outside completely" (a RuntimeError) for
    # a max / average_count_exclude_padding window that holds only padding; megxla gave -inf / nan there.
    x = T(np.arange(12, dtype="float32").reshape(1, 1, 2, 6))
    with pytest.raises(RuntimeError, match="outside completely"):
        call(x)


def test_pooling_windows_that_reach_the_input_compute():
    x = T(np.arange(12, dtype="float32").reshape(1, 1, 2, 6))
    # MegEngine 1.13's values: mode="average" counts the padding's zeros, so an all-padding window is 0
    np.testing.assert_array_equal(F.nn.avg_pool2d(x, (1, 1), stride=(2, 2), padding=(0, 1), mode="average").numpy()
                                  .ravel(), [0, 1, 3, 5])
    np.testing.assert_array_equal(F.nn.max_pool2d(x, (1, 3), stride=(1, 3), padding=(0, 2)).numpy().ravel(),
                                  [0, 3, 5, 6, 9, 11])
    np.testing.assert_array_equal(F.nn.avg_pool2d(x, (1, 3), stride=(1, 3), padding=(0, 2)).numpy().ravel(),
                                  [0, 2, 4.5, 6, 8, 10.5])
    np.testing.assert_array_equal(F.nn.max_pool2d(x, (2, 2), stride=(2, 2), padding=(1, 1)).numpy().ravel(),
                                  [0, 2, 4, 5, 6, 8, 10, 11])


def test_adaptive_avg_pool2d_of_an_int_tensor_raises_as_avg_pool2d():
    # seed 6 case 68 (--ops api): MegEngine 1.13 raises for F.nn.adaptive_avg_pool2d of an int32 tensor (as for
    # avg_pool2d; megxla raised for avg_pool2d only and gave a float32 mean here). Max pooling of ints stays exact.
    x = T(np.arange(16, dtype="int32").reshape(2, 1, 4, 2))
    with pytest.raises(RuntimeError, match="must be a float tensor"):
        F.nn.adaptive_avg_pool2d(x, 2)
    with pytest.raises(RuntimeError, match="must be a float tensor"):
        F.nn.avg_pool2d(x, 2)
    np.testing.assert_array_equal(F.nn.adaptive_avg_pool2d(x.astype("float32"), 2).numpy().ravel(),
                                  [1, 2, 5, 6, 9, 10, 13, 14])
    assert F.nn.adaptive_max_pool2d(x, 2).dtype == np.int32


def test_a_0d_shape_meets_a_one_element_one_as_in_megengine():
    # seed 17 cases 385, 818: MegEngine takes a 0-d shape as (1,) here -- ``cond_take`` of a 0-d mask and a (1,)
    # tensor (or the other way round) selects from the one element, ``broadcast_to(x1, ())`` gives its element as a
    # 0-d tensor; megxla raised "mask shape () must equal x shape (1,)" and "cannot broadcast shape (1,) to ()"
    v, i = F.cond_take(T(np.array(True)), T(np.array([2.5], "float32")))
    assert (v.shape, v.numpy().tolist(), i.numpy().tolist(), i.dtype) == ((1,), [2.5], [0], np.int32)
    v, i = F.cond_take(T(np.array(False)), T(np.array([2.5], "float32")))
    assert (v.shape, i.shape) == ((0,), (0,))
    v, _ = F.cond_take(T(np.array([True])), T(np.array(2.5, "float32")))
    assert v.numpy().tolist() == [2.5]
    x = megxla.Parameter(np.array([2.5], "float32"))
    gm = GradManager().attach([x])
    with gm:
        y = F.broadcast_to(x, ())
        assert (y.shape, float(y)) == ((), 2.5)
        gm.backward(y * 3)
    assert x.grad.numpy().tolist() == [3.0]
    with pytest.raises(ValueError, match=r"cannot broadcast shape \(2,\) to \(\)"):
        F.broadcast_to(T(np.array([1.0, 2.0], "float32")), ())  # (two elements: MegEngine asserts too)
