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


# --- reductions ----------------------------------------------------------------------------------------------

def test_integer_sum_and_prod_keep_the_input_dtype():
    u8 = Tensor(np.array([200, 100, 3], "uint8"))
    s = F.sum(u8)
    assert s.dtype == np.uint8 and s.item() == 47  # 303 wraps, as MegEngine's uint8 sum
    assert F.prod(Tensor(np.array([3, 4], "int16"))).dtype == np.int16
    assert F.sum(Tensor(np.array([2**30] * 3, "int32"))).item() == -1073741824


def test_var_std_of_float16_are_float32():
    x = Tensor(np.array([1.0, 2.0, 4.0], "float16"))
    assert F.var(x).dtype == np.float32 and F.std(x, axis=0).dtype == np.float32
    np.testing.assert_allclose(F.var(x).item(), 1.5555556, rtol=1e-6)


# --- losses and vision ---------------------------------------------------------------------------------------

def test_l1_loss_of_integers_is_float32():
    out = F.nn.l1_loss(Tensor(np.array([1, 2], "int32")), Tensor(np.array([3, 1], "int32")))
    assert out.dtype == np.float32 and out.item() == 1.5


def test_roi_align_samples_zeros_outside_the_image():
    # an aligned roi at the image corner samples at y, x = -0.125: megdnn mixes in zeros there (no clamp)
    img = np.arange(36, dtype="float32").reshape(1, 1, 6, 6)
    rois = Tensor(np.array([[0, 0, 0, 3, 3]], "float32"))
    out = F.vision.roi_align(Tensor(img), rois, (2, 2), spatial_scale=1.0, sample_points=2, aligned=True)

    def tap(y, x):  # zero-padded bilinear
        y0, x0 = int(np.floor(y)), int(np.floor(x))
        g = lambda i, j: img[0, 0, i, j] if 0 <= i < 6 and 0 <= j < 6 else 0.0  # noqa: E731
        top = g(y0, x0) + (g(y0, x0 + 1) - g(y0, x0)) * (x - x0)
        bot = g(y0 + 1, x0) + (g(y0 + 1, x0 + 1) - g(y0 + 1, x0)) * (x - x0)
        return top + (bot - top) * (y - y0)

    pts = [-0.5 + (p + (s + 0.5) / 2) * 1.5 for p in range(2) for s in range(2)]
    ref = np.array([[np.mean([tap(y, x) for y in pts[2 * py:2 * py + 2] for x in pts[2 * px:2 * px + 2]])
                     for px in range(2)] for py in range(2)])
    np.testing.assert_allclose(out.numpy()[0, 0], ref, rtol=1e-5)
    np.testing.assert_allclose(out.numpy()[0, 0], [[2.05078125, 3.515625], [10.15625, 12.25]])  # MegEngine's


# --- sorting ties and NumPy interop --------------------------------------------------------------------------

def test_descending_sort_orders_ties_last_index_first():
    t = Tensor(np.array([[2, 2, 1], [1, 3, 3]], "float32"))
    assert F.topk(t, 2)[1].numpy().tolist() == [[1, 0], [2, 1]]
    assert F.argsort(t, descending=True).numpy().tolist() == [[1, 0, 2], [2, 1, 0]]
    assert F.sort(t, descending=True)[1].numpy().tolist() == [[1, 0, 2], [2, 1, 0]]
    assert F.topk(t, 2, descending=False)[1].numpy().tolist() == [[2, 0], [0, 1]]  # ascending: stable


def test_numpy_ufunc_of_a_tensor_is_a_tensor():
    t = Tensor(np.array([1.0, 4.0], "float32"))
    r = np.sqrt(t)
    assert isinstance(r, Tensor) and r.dtype == np.float32
    np.testing.assert_allclose(r.numpy(), [1.0, 2.0])
    assert isinstance(np.add(t, 1), Tensor)
    assert isinstance(np.asarray(t), np.ndarray)


def test_concat_and_stack_promote_mixed_dtypes():
    h = Tensor(np.array([1.5], "float16"))
    i = Tensor(np.array([2], "int32"))
    b = Tensor(np.array([True]))
    assert F.concat([h, i]).dtype == np.float32
    assert F.concat([b, i]).dtype == np.float32
    assert F.concat([Tensor(np.array([1], "int16")), i]).dtype == np.int32
    assert F.stack([b, Tensor(np.array([2.0], "float32"))]).dtype == np.float32
    np.testing.assert_array_equal(F.concat([h, i]).numpy(), [1.5, 2.0])


def test_broadcast_to_none_keeps_the_input_axis():
    x = Tensor(np.arange(3, dtype="float32").reshape(1, 3, 1))
    assert F.broadcast_to(x, (2, None, 4)).shape == (2, 3, 4)
    assert F.broadcast_to(x, (None, 3, 2)).shape == (1, 3, 2)
    with pytest.raises(ValueError):
        F.broadcast_to(x, (None, 2, 3, 4))  # no input axis under the leading None


def test_atan_of_float16_is_float32():
    out = F.atan(Tensor(np.array([0.5, -1.0], "float16")))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), np.arctan(np.array([0.5, -1.0])), rtol=1e-6)


def _ctc_reference(pred, label, blank):
    # MegEngine's reference (its test_loss.py): logs floored at float32's smallest normal, unreachable states
    # start there, a state is entered from two back when its symbol differs from that one's
    tiny = np.finfo(np.float32).tiny
    ex = np.full(2 * len(label) + 1, blank, np.int32)
    ex[1::2] = label
    prob = np.full(len(ex), np.log(tiny), np.float32)
    prob[:2] = np.log(np.maximum(pred[0][ex[:2]], tiny))
    skip = ex[2:] != ex[:-2]
    lse = lambda a, b: np.maximum(a, b) + np.log1p(np.exp(np.minimum(a, b) - np.maximum(a, b)))
    for t in range(1, len(pred)):
        new = prob.copy()
        new[1:] = lse(new[1:], prob[:-1])
        new[2:] = np.where(skip, lse(new[2:], prob[:-2]), new[2:])
        prob = new + np.log(np.maximum(pred[t, ex], tiny))
    return -lse(prob[-1], prob[-2])


def test_ctc_loss_of_long_and_impossible_labels_and_labels_equal_to_blank():
    rs = np.random.RandomState(3)
    t, n, c = 12, 6, 5
    pred = F.softmax(mge.Tensor(rs.randn(t, n, c).astype("float32")), axis=-1).numpy()
    lengths = np.array([1, 5, 9, 12, 8, 3], np.int32)  # 12 and 9 with repeats: impossible alignments
    label = rs.randint(1, c, size=int(lengths.sum())).astype(np.int32)
    blank = 2  # also a label value
    got = F.nn.ctc_loss(mge.Tensor(pred), mge.Tensor(np.full(n, t, np.int32)), mge.Tensor(label),
                        mge.Tensor(lengths), blank=blank, reduction="none").numpy()
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    ref = [_ctc_reference(pred[:, i], label[s:s + k], blank) for i, (s, k) in enumerate(zip(starts, lengths))]
    np.testing.assert_allclose(got, ref, rtol=1e-5)


# --- pad: pad_width pairs beyond the tensor's axes ---------------------------------------------------------------
# MegEngine 1.13's F.nn.pad fills a 14-slot offset list from pad_width and its Padding kernel
# (dnn/src/common/padding.cpp deduce_layout_impl) reads only the first src.ndim pairs.

def test_pad_ignores_pairs_beyond_the_axes_zero_or_not():
    x = Tensor(np.arange(6, dtype="float32").reshape(1, 2, 3))
    y = F.nn.pad(x, ((0, 0), (0, 0), (0, 0), (0, 0)))  # SAM's Sam.preprocess on a 3-D image
    assert y.shape == (1, 2, 3)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    y = F.nn.pad(x, ((0, 0), (1, 0), (0, 2), (4, 5), (1, 1)), mode="reflect")  # non-zero extra pairs too
    np.testing.assert_array_equal(y.numpy(), np.pad(x.numpy(), ((0, 0), (1, 0), (0, 2)), mode="reflect"))
    assert _grads(lambda t: F.nn.pad(t, ((1, 1), (2, 2))), [1.0, 2.0]) == [[1.0, 1.0]]


def test_pad_errors_where_megengine_does():
    x = F.ones((2,))
    with pytest.raises(Exception, match="at most 7"):  # MegEngine: 7 offset pairs, an IndexError beyond
        F.nn.pad(x, ((0, 0),) * 8)
    with pytest.raises(Exception, match="non-negative"):  # offsets are unsigned, an ignored pair's too
        F.nn.pad(x, ((0, 0), (0, -1)))
    with pytest.raises(Exception, match="0-d"):  # megdnn: invalid tensor ndim 0
        F.nn.pad(Tensor(1.0), ((1, 1),))


@pytest.mark.parametrize("start, stop, num, dtype", [
    (0, 1, 32, "float32"), (0.1, 0.7, 13, "float32"), (-3.3, 5.1, 101, "float32"), (0.3, -0.9, 257, "float32"),
    (1e-3, 1e3, 77, "float32"), (-3.3, 5.1, 101, "int32"), (0.1, 0.7, 13, "float16"), (0, 1, 1, "float32"),
    (5, 5, 3, "float32"), (0, 1, 0, "float32")])
def test_linspace_values_are_megengines_computed_in_double(start, stop, num, dtype):
    # megdnn's Linspace: start + i * step in double, cast to float32, then ``astype(dtype)``; start and stop are
    # float32 Tensors first. (Each case gave these bits under MegEngine 1.13.0; jnp.linspace's float32 arithmetic
    # was an ulp off at 4 of linspace(0, 1, 32)'s values.)
    a, b = (np.float64(np.float32(v)) for v in (start, stop))
    expect = (a + np.arange(num) * ((b - a) / max(num - 1, 1))).astype("float32").astype(dtype)
    got = F.linspace(start, stop, num, dtype=dtype).numpy()
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.view(np.uint8), expect.view(np.uint8))


def test_a_linspace_grid_scaled_back_is_integers_so_remap_gradients_match_megengine():
    # DMVFN's warp: ``linspace(0, 1, W) * (W - 1)`` is an integer grid under MegEngine; one ulp below an integer,
    # remap's gradient takes the other one-sided difference (first-step gradients 1.5e-3 from MegEngine's)
    w = 32
    np.testing.assert_array_equal((F.linspace(0, 1.0, w) * (w - 1)).numpy(), np.arange(w, dtype="float32"))
    x = np.arange(w, dtype="float32") ** 2
    flow = mge.Parameter(np.zeros((1, 1, w, 1), "float32"))
    gm = GradManager().attach([flow])
    with gm:
        grid = F.concat([F.linspace(0, 1.0, w).reshape(1, 1, w, 1) * (w - 1) + flow, F.zeros((1, 1, w, 1))], axis=3)
        gm.backward(F.nn.remap(mge.Tensor(x.reshape(1, 1, 1, w)), grid).sum())
    np.testing.assert_array_equal(flow.grad.numpy().reshape(-1), np.append(x[1:], x[-1]) - x)
