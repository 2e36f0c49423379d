"""Quantization differences from MegEngine 1.13 found by scripts/megengine_quant_fuzz.py, fixed; the expected values
are MegEngine 1.13.0's, hard-coded (the tests need no MegEngine)."""
import numpy as np
import pytest

import megxla as mge
import megxla.core.tensor.dtype as D
import megxla.module as M
import megxla.quantization as Q


def test_astype_to_8_and_32_bit_quantized_dtypes_multiplies_by_the_inverse_scale():
    # MegEngine quantizes to its 8- and 32-bit dtypes as round(x * (1 / scale)) in float32 (megdnn keeps
    # inv_scale = 1.f / scale), to its 4-bit ones as round(x / scale): at a tie the two are an ulp apart, and the
    # rounding goes the other way (-11.15 at qint32(0.1): -111.5 times, -111.49999 divided)
    x = np.array([-11.15, 11.15, 0.45, -3.85, 12.75], "float32")
    assert mge.tensor(x).astype(D.qint32(0.1)).numpy().tolist() == [-112, 112, 5, -39, 128]
    assert mge.tensor(x).astype(D.qint8(0.1)).numpy().tolist() == [-112, 112, 5, -39, 127]
    assert mge.tensor(x).astype(D.quint8(0.1, 128)).numpy().tolist() == [16, 240, 133, 89, 255]
    x4 = np.array([-0.45, 0.45, 0.15, -0.75, 0.35], "float32")
    assert mge.tensor(x4).astype(D.qint4(0.1)).numpy().tolist() == [-5, 5, 2, -8, 4]
    assert mge.tensor(x4).astype(D.quint4(0.1, 8)).numpy().tolist() == [3, 13, 10, 0, 12]
    # (NumPy's convert_to_* divide, in MegEngine too)
    assert D.convert_to_qint8(x, D.qint8(0.1)).astype("int64").tolist() == [-111, 111, 4, -38, 127]


def test_quantized_convolution_of_a_qat_one_without_bias_holds_a_zero_bias():
    # MegEngine 1.13.0: Quantized.Conv2d / ConvRelu2d.from_qat_module give a QAT convolution without a bias a
    # zero float32 bias of shape (1, C, 1, 1), in its state_dict; Linear keeps none (state_dict keys below)
    net = M.Sequential(M.QuantStub(), M.ConvRelu2d(2, 3, 3, bias=False), M.Conv2d(3, 4, 1, bias=False),
                       M.Linear(1, 2, bias=False), M.DequantStub())
    Q.quantize_qat(net, qconfig=Q.ema_fakequant_qconfig)
    net(mge.tensor(np.random.RandomState(0).randn(2, 2, 3, 3).astype("float32")))
    Q.quantize(net)
    sd = net.state_dict()
    assert sorted(sd) == ["1.bias", "1.weight", "2.bias", "2.weight", "3.weight"]
    assert sd["1.bias"].dtype == np.float32 and sd["1.bias"].shape == (1, 3, 1, 1) and not sd["1.bias"].any()
    assert sd["2.bias"].shape == (1, 4, 1, 1)


def test_histogram_observer_after_a_batch_of_equal_values_counts_them_in_the_new_grid():
    # (MegEngine 1.13.0 raises "cannot convert float NaN to integer": its re-gridding divides by the old range's
    # zero width; megxla raised ZeroDivisionError. docs/differences.md) The two batches give the histogram of
    # their values seen at once.
    a, b = np.zeros((4,), "float32"), np.array([-1, 0.5, 2], "float32")
    ob, both = Q.HistogramObserver(bins=64, upsample_rate=16), Q.HistogramObserver(bins=64, upsample_rate=16)
    ob(mge.tensor(a))
    ob(mge.tensor(b))
    both(mge.tensor(np.concatenate([a, b])))
    np.testing.assert_array_equal(ob.histogram.numpy(), both.histogram.numpy())
    assert (float(ob.min_val), float(ob.max_val)) == (-1.0, 2.0)
    np.testing.assert_allclose(ob.get_qparams().scale.numpy(), both.get_qparams().scale.numpy(), rtol=1e-6)


def test_convert_to_qint8_divides_a_float32_array_in_float32():
    # MegEngine 1.13.0's convert_to_qint8 / convert_to_quint8 are np.round(arr / scale): float32 for a float32
    # array, where 0.183582 / 0.007812 is 23.5 exactly (float64: 23.49999..., which gave 23)
    a = np.array([0.8632259964942932, 0.18358199298381805, 0.1132740005850792, 0.30466800928115845], "float32")
    assert D.convert_to_qint8(a, D.qint8(0.007812)).astype(int).tolist() == [110, 24, 14, 39]
    assert D.convert_to_quint8(a, D.quint8(0.007812, 128)).astype(int).tolist() == [238, 152, 142, 167]


def test_fake_quant_gradient_at_a_min_max_observers_own_maximum_as_megengine():
    # quant fuzz seed 3 case 29: x / scale at the observer's maximum is 127.5 up to the last bit; MegEngine 1.13's
    # straight-through gradient (observed on these values) passes 127.49999 and stops 127.5 -- so does megxla's
    from megxla.autodiff import GradManager
    from megxla.quantization.utils import fake_quant_tensor
    for value, top, grad in [(0.009763002395629883, None, 1.0), (0.00976291298866272, None, 0.0), (1.0, None, 1.0),
                             (127.51 / 127.5, 1.0, 0.0), (127.49 / 127.5, 1.0, 1.0)]:
        obs = Q.MinMaxObserver(dtype="qint8")
        obs(mge.tensor(np.array([value if top is None else top, 0.0], "float32")))
        x = mge.tensor(np.array([value], "float32"))
        gm = GradManager().attach([x])
        with gm:
            gm.backward(fake_quant_tensor(x, obs.get_qparams()).sum())
        assert x.grad.numpy().tolist() == [grad], value


def test_quant_stub_to_a_4_bit_dtype_saturates_to_its_range():
    # quant fuzz seed 4 case 34: a quantized QuantStub to qint4 saturated to int8 (10, -13), MegEngine to [-8, 7],
    # so the quantized ConvBnRelu2d after it gave other outputs than MegEngine's (equal to its QAT ones)
    from megxla.module.quantized import QuantStub
    x = mge.tensor(np.array([3.9, -4.8, 2.0, 0.2, -0.3], "float32"))
    for dt, expected in [(D.qint4(0.36561), [7, -8, 5, 1, -1]), (D.quint4(0.25, 3), [15, 0, 11, 4, 2])]:
        stub = QuantStub(dt)
        stub.eval()
        assert stub(x).numpy().tolist() == expected  # (MegEngine 1.13's values)


@pytest.mark.parametrize("auto_jit", [False, True])
def test_lsq_and_tqt_input_gradient_outside_the_range_is_the_cotangent_times_zero(auto_jit):
    # quant fuzz seed 5 case 2: MegEngine's LSQ / TQT kernels multiply the cotangent by their mask (-0.0 for a
    # negative one, NaN for an infinite one; values observed running MegEngine 1.13), its FakeQuant selects a 0
    from megxla.autodiff import GradManager
    ct = mge.tensor(np.array([-0.5, np.inf, -np.inf, np.nan, 0.3, -0.3], "float32"))
    xs = np.array([-9.0, -9.0, 9.0, 9.0, 0.1, 0.1], "float32")
    masked = {"FakeQuantize": [0.0, 0.0, 0.0, 0.0], "LSQ": [-0.0, np.nan, np.nan, np.nan],
              "TQT": [-0.0, np.nan, np.nan, np.nan]}
    mge.config.auto_jit = auto_jit
    try:
        for _ in range(3 if auto_jit else 1):  # (auto-jit: the step's cluster compiled when it recurs)
            for name, want in masked.items():
                ob = Q.MinMaxObserver(dtype="qint8")
                ob(mge.tensor(np.array([-1.0, 1.0], "float32")))
                fq = getattr(Q, name)(dtype="qint8")
                if hasattr(fq, "set_qparams"):
                    fq.set_qparams(ob.get_qparams())
                x = mge.Parameter(xs)
                gm = GradManager().attach([x] + list(fq.parameters()))
                with gm:
                    gm.backward((fq(x, ob.get_qparams()) * ct).sum())
                g = x.grad.numpy()
                np.testing.assert_array_equal(g, np.array(want + [0.3, -0.3], "float32"), err_msg=name)
                zeros = ~np.isnan(np.array(want))
                assert np.signbit(g[:4][zeros]).tolist() == np.signbit(np.array(want)[zeros]).tolist(), name
    finally:
        mge.config.auto_jit = False


@pytest.mark.parametrize("auto_jit", [False, True])
def test_tqt_scale_gradient_multiplies_the_cotangent_by_its_masks_as_megengine(auto_jit):
    # quant fuzz seed 7 case 72: an infinite cotangent at a clipped element gave megxla's scale gradient inf where
    # MegEngine's is NaN (its kernel multiplies the cotangent by each mask and sums both terms), and a product past
    # float32's range, the cotangent times the level first, overflows there (values observed running MegEngine 1.13)
    from megxla.autodiff import GradManager
    from megxla.quantization.utils import tqt_forward
    cases = [([0.5, 100.0], [1.0, np.inf], np.nan), ([0.5, 100.0], [np.inf, 1.0], np.nan),
             ([0.5, 0.3], [1.0, 1.0], 0.13862942), ([0.5, 100.0], [1e30, 1e30], 2.4260152e30),
             ([0.5, -100.0], [-1e38, 1e38], -np.inf)]
    mge.config.auto_jit = auto_jit
    try:
        for _ in range(3 if auto_jit else 1):  # (auto-jit: the step's cluster compiled when it recurs)
            for xs, ct, want in cases:
                x, log2_scale = mge.Parameter(np.array(xs, "float32")), mge.Parameter(np.float32(-1.0))
                gm = GradManager().attach([x, log2_scale])
                with gm:
                    gm.backward((tqt_forward(-8, 7, x, log2_scale) * mge.tensor(np.array(ct, "float32"))).sum())
                np.testing.assert_allclose(log2_scale.grad.numpy(), np.float32(want), rtol=1e-6, err_msg=str(xs))
    finally:
        mge.config.auto_jit = False


def test_a_quantized_dtype_with_a_nan_scale_raises_as_megengine():
    # (met analysing quant fuzz seed 5 case 13) MegEngine 1.13 asserts ``!std::isnan(scale)`` (a RuntimeError)
    # casting to a quantized dtype of NaN scale; megxla cast silently, to zeros
    with pytest.raises(RuntimeError, match="NaN scale"):
        mge.tensor(np.array([1.0], "float32")).astype(D.qint8(float("nan")))


def test_quantize_of_a_layer_whose_weight_observer_saw_a_nan_raises_as_megengine():
    # quant fuzz seed 5 case 13, seed 3 case 38: MegEngine 1.13's quantize() asserts ``!std::isnan(scale)`` (a
    # RuntimeError) casting a weight whose observer saw a NaN (observed on this network); megxla converted it
    net = M.Sequential(M.QuantStub(), M.Linear(4, 2), M.DequantStub())
    w = net[1].weight.numpy().copy()
    w[0, 0] = np.nan
    net[1].weight.set_value(w)
    Q.quantize_qat(net, qconfig=Q.ema_fakequant_qconfig)
    net.train()
    net(mge.tensor(np.array([[0.5, -1.0, 2.0, 0.1]], "float32")))
    net.eval()
    with pytest.raises(RuntimeError, match="NaN weight scale"):
        Q.quantize(net)


def test_a_4_bit_tensor_of_values_outside_its_range_is_an_error():
    # megengine_quant_fuzz seed 10 cases 47, 131: ``Tensor(values, dtype=quint4(s, zp))`` keeps the values as they
    # are (truncated to the 8-bit storage), and MegEngine asserts each lies in the type's range; megxla stored -1 as
    # 255, and dequantized it to 42.16
    from megxla.core._dispatch import OpError
    with pytest.raises(RuntimeError, match=r"quint4.*outside \[0, 15\]") as info:
        mge.Tensor(np.array([2.125, -1.53], "float32"), dtype=D.quint4(0.17, 7))
    assert isinstance(info.value, OpError)
    with pytest.raises(RuntimeError, match=r"qint4.*stored value 8 .*outside \[-8, 7\]"):
        mge.Tensor(np.array([3.0, 8.0], "float32"), dtype=D.qint4(0.17))
    # in range: the values as they are (truncated), as in MegEngine; 8-bit types keep a C cast's wrap there too
    assert mge.Tensor(np.array([0.5, 1.0, 15.9], "float32"), dtype=D.quint4(0.17, 7)).numpy().tolist() == [0, 1, 15]
    assert mge.Tensor(np.array([-8.5, 7.0], "float32"), dtype=D.qint4(0.17)).numpy().tolist() == [-8, 7]
    assert mge.Tensor(np.array([-1.2, 0.3], "float32"), dtype=D.quint8(0.17, 7)).numpy().tolist() == [255, 0]


def test_astype_to_quantized_converts_what_int32_cannot_hold_as_megengine():
    # megengine_quant_fuzz seed 11 case 64: a quantized ConvBnRelu2d's weight folded with a NaN running variance
    # (a BatchNorm over one value per channel) is all -128 in MegEngine's quantize(), 0 in megxla's. Its kernels
    # convert to int32 the x86 way (NaN and out-of-range values become INT_MIN), then saturate to the type; XLA
    # converts NaN to 0 and saturates infinities
    x = mge.tensor(np.array([np.nan, 1.0, np.inf, -np.inf], "float32"))
    assert x.astype(D.qint8(0.1)).numpy().tolist() == [-128, 10, 127, -128]
    assert x.astype(D.quint8(0.1, 128)).numpy().tolist() == [0, 138, 255, 0]
    assert x.astype(D.qint4(0.1)).numpy().tolist() == [-8, 7, 7, -8]
    assert x.astype(D.quint4(0.1, 8)).numpy().tolist() == [0, 15, 15, 0]
    assert x.astype(D.qint32(0.1)).numpy().tolist() == [-2 ** 31, 10, -2 ** 31, -2 ** 31]
    big = mge.tensor(np.array([3e8, -3e8, 2e8], "float32"))  # (x 10: past int32's range, and inside it)
    assert big.astype(D.qint32(0.1)).numpy().tolist() == [-2 ** 31, -2 ** 31, 2000000000]
