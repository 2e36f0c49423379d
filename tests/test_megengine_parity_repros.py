"""Differences found by differential runs against real MegEngine 1.13.0, each reduced to a repro; the expected
values below are what MegEngine printed for the same program."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
from megxla.core.tensor.dtype import get_scale, is_quantize, qint8


# ---- a quantized (qint8) tensor through elementwise / joining ops keeps its quantized dtype ------------------------
def _q(values, scale=0.1):
    return mge.Tensor(np.array(values, "float32")).astype(qint8(scale))


def _check_q(y, raw, scale=0.1):
    assert is_quantize(y.dtype) and abs(get_scale(y.dtype) - scale) < 1e-7
    np.testing.assert_array_equal(y.numpy(), np.array(raw, "int8"))


def test_quantized_tensor_through_ops_keeps_dtype():
    x = _q([[-1.0, -0.3], [0.26, 1.7]])  # raw [[-10, -3], [3, 17]]
    _check_q(F.relu(x), [[0, 0], [3, 17]])
    _check_q(-x, [[10, 3], [-3, -17]])
    _check_q(F.maximum(x, x), [[-10, -3], [3, 17]])
    _check_q(F.concat([x, x]), [[-10, -3], [3, 17], [-10, -3], [3, 17]])
    _check_q(F.stack([x, x]), [[[-10, -3], [3, 17]], [[-10, -3], [3, 17]]])
    _check_q(F.clip(x, 0.0), [[0, 0], [3, 17]])
    _check_q(F.clip(x, None, 1.0), [[-10, -3], [3, 10]])
    _check_q(x + x, [[-20, -6], [6, 34]])
    _check_q(x - x, [[0, 0], [0, 0]])
    _check_q(x + 1.0, [[0, 7], [13, 27]])      # a float scalar is quantized
    _check_q(1.0 - x, [[20, 13], [7, -7]])
    _check_q(x + 1, [[-9, -2], [4, 18]])       # a Python int is the raw integer


def test_quantized_operand_conversion_and_wrapping():
    x = _q([[-12.8, -0.3], [10.0, 12.7]])  # raw [[-128, -3], [100, 127]]
    _check_q(x + x, [[0, -6], [-56, -2]])  # integer arithmetic wraps, as MegEngine's kernels
    _check_q(-x, [[-128, 3], [-100, -127]])
    _check_q(F.maximum(x, 1), [[1, 1], [100, 127]])
    _check_q(F.maximum(x, mge.Tensor(0.55)), [[6, 6], [100, 127]])  # halves round away from zero
    _check_q(F.maximum(x, mge.Tensor(1)), [[10, 10], [100, 127]])  # an int tensor by its value
    _check_q(x + mge.Tensor(np.ones((2, 2), "int32")), [[-118, 7], [110, -119]])
    _check_q(x + 0.25, [[-125, 0], [103, -126]])
    _check_q(F.clip(x, -1), [[-1, -1], [100, 127]])
    _check_q(F.concat([x, mge.Tensor(np.ones((2, 2), "float32"))]), [[-128, -3], [100, 127], [10, 10], [10, 10]])
    y = F.copy(x)
    _check_q(y, [[-128, -3], [100, 127]])
    y[0] = mge.Tensor([0.25, 0.35])
    _check_q(y, [[3, 4], [100, 127]])


def test_quantized_different_scales_raise():
    x, y = _q([1.0, 2.0], 0.1), _q([1.0, 2.0], 0.2)
    for f in (lambda: x + y, lambda: F.maximum(x, y), lambda: F.concat([x, y])):
        with pytest.raises(Exception, match="different quantized dtypes"):
            f()


def test_quantized_model_with_float_relu():
    import megxla.quantization as Q

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.q, self.c1, self.r = M.QuantStub(), M.Conv2d(1, 2, 3, padding=1), M.ReLU()
            self.c2, self.dq = M.Conv2d(2, 1, 3, padding=1), M.DequantStub()

        def forward(self, x):
            return self.dq(self.c2(self.r(self.c1(self.q(x)))))

    net = Net()
    rng = np.random.RandomState(0)
    net.load_state_dict({k: rng.uniform(-0.5, 0.5, v.shape).astype("float32") for k, v in net.state_dict().items()})
    x = mge.Tensor(rng.uniform(-1, 1, (1, 1, 4, 4)).astype("float32"))
    qat = Q.quantize_qat(net, inplace=False)
    qat(x)
    qat.eval()
    qnet = Q.quantize(qat, inplace=False)
    qnet.eval()
    y = qnet(x)
    expected = [0.4794, 0.5455, 0.4877, 0.5125, 1.0497, 0.7935, 0.6034, 0.6034, 0.1157, 0.3306, 1.0332, 0.4463,
                0.8017, 0.5042, 0.1653, 0.2645]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy().ravel(), expected, atol=1e-4)


# ---- pad with fewer pairs than axes (MegEngine's docstring example) ---------------------------------------------
def test_pad_short_pad_width_pads_leading_axes():
    inp = mge.Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    rows0 = [[0, 0, 0], [1, 2, 3], [4, 5, 6], [0, 0, 0]]
    np.testing.assert_array_equal(F.nn.pad(inp, pad_width=((1, 1),), mode="constant").numpy(), rows0)
    np.testing.assert_array_equal(F.nn.pad(inp, ((1, 1),), constant_value=9).numpy(),
                                  [[9, 9, 9], [1, 2, 3], [4, 5, 6], [9, 9, 9]])
    np.testing.assert_array_equal(M.Pad(pad_width=((1, 1),), mode="constant")(inp).numpy(), rows0)
    # (pairs beyond the tensor's axes are ignored, as MegEngine's Padding reads only the first ndim pairs)
    np.testing.assert_array_equal(F.nn.pad(inp, ((1, 1), (0, 0), (0, 0))).numpy(), rows0)


# ---- losses of integer tensors (MegEngine's docstring example) ------------------------------------------------
def test_losses_of_int_tensors():
    pred, label = mge.Tensor([3, 3, 3, 3]), mge.Tensor([2, 8, 6, 1])
    y = F.nn.l1_loss(pred, label, reduction="none")
    assert y.dtype == np.int32 and y.numpy().tolist() == [1, 5, 3, 2]
    y = F.nn.l1_loss(pred, label, reduction="sum")
    assert y.dtype == np.int32 and y.item() == 11
    y = F.nn.l1_loss(pred, label)
    assert y.dtype == np.float32 and y.item() == 2.75
    y = F.nn.square_loss(pred, label, reduction="none")
    assert y.dtype == np.float32 and y.numpy().tolist() == [1, 25, 9, 4]
    assert F.nn.square_loss(pred, label, reduction="sum").item() == 39.0
    assert F.nn.square_loss(pred, label).item() == 9.75


# ---- norm(int, ord=+-inf) keeps the integer dtype (MegEngine's docstring example) -------------------------------
def test_norm_inf_of_int_keeps_int32():
    x = mge.Tensor([1, 2, 3])
    for ord_, v in ((float("inf"), 3), (float("-inf"), 1)):
        y = F.norm(x, ord=ord_)
        assert y.dtype == np.int32 and y.item() == v
    y = F.norm(mge.Tensor([[1, -2, 3], [0, 4, -1]]), ord=0, axis=0)
    assert y.dtype == np.int32 and y.numpy().tolist() == [1, 2, 2]
    y = F.norm(x, ord=2)
    assert y.dtype == np.float32 and abs(y.item() - 3.7416575) < 1e-6


# ---- autodiff.Function.backward with fewer (or more) gradients than inputs -------------------------------------
def test_function_backward_fewer_or_more_grads():
    from megxla.autodiff import Function, GradManager

    class FirstOnly(Function):
        def forward(self, a, b):
            return a + b

        def backward(self, dy):
            return dy  # one gradient for two inputs: b gets none

    class Extra(FirstOnly):
        def backward(self, dy):
            return dy, dy, dy  # the third is dropped

    for fn, b_grad in ((FirstOnly, None), (Extra, [1.0])):
        a, b = mge.Tensor([1.0]), mge.Tensor([2.0])
        gm = GradManager().attach([a, b])
        with gm:
            gm.backward(fn()(a, b).sum())
        assert a.grad.numpy().tolist() == [1.0]
        assert (b.grad if b_grad is None else b.grad.numpy().tolist()) == b_grad


# ---- gm.attach inside a recording: the ops before the attach treat the tensor as a constant --------------------
def test_attach_while_recording_ignores_earlier_ops():
    from megxla.autodiff import GradManager
    w, v = mge.Parameter([1.0, 2.0]), mge.Parameter([3.0, 4.0])
    gm = GradManager().attach(w)
    with gm:
        y = w * v
        gm.attach(v)
        gm.backward((y * v).sum())
    assert w.grad.numpy().tolist() == [9.0, 16.0]
    assert v.grad.numpy().tolist() == [3.0, 8.0]
    # attached before the recording: every op counts
    w.grad = v.grad = None
    with gm:
        gm.backward((w * v * v).sum())
    assert v.grad.numpy().tolist() == [6.0, 16.0]


# ---- any logical cpuN exists (MegEngine's F.copy docstring) ---------------------------------------------------
def test_copy_to_any_logical_cpu():
    x = mge.Tensor([1, 2, 3], dtype="int32")
    for dev in ("cpu1", "cpu3"):
        y = F.copy(x, dev)
        assert (y + 1).numpy().tolist() == [2, 3, 4]
        assert F.copy(y, "xpux").numpy().tolist() == [1, 2, 3]
    assert mge.Tensor([1.0], device="cpu9").numpy().tolist() == [1.0]


# ---- roi_align of inverted / empty / sub-pixel boxes ------------------------------------------------------------
def test_roi_align_inverted_and_small_boxes():
    inp = mge.Tensor(np.sin(np.arange(36, dtype="float32")).reshape(1, 1, 6, 6))
    rois = mge.Tensor(np.array([[0, 0.9, 0.8, 0.2, 0.1], [0, 4.0, 1.0, 2.0, 3.5], [0, 1.5, 1.5, 1.5, 1.5],
                                [0, 0.2, 0.3, 0.7, 0.9]], "float32"))
    expected = {  # MegEngine 1.13: an inverted side has size 0 (aligned or not), no minimum size of 1
        True: [[0.2642] * 4, [-0.0346, -0.0346, 0.2685, 0.2685], [0.657] * 4, [-0.0029, 0.0558, -0.0576, -0.005]],
        False: [[0.6021] * 4, [-0.3839, -0.3839, -0.0437, -0.0437], [0.7643] * 4, [0.1616, 0.3827, 0.0871, 0.3152]],
    }
    for aligned, want in expected.items():
        y = F.vision.roi_align(inp, rois, (2, 2), aligned=aligned)
        np.testing.assert_allclose(y.numpy().reshape(4, 4), want, atol=1e-4)


def test_quantized_tensor_through_shape_ops_and_reductions():
    x = _q([[-12.8, -0.3], [10.0, 12.7]])  # raw [[-128, -3], [100, 127]]
    _check_q(F.sum(x, axis=0), [-28, 124])  # wraps, as MegEngine
    _check_q(F.max(x, 0), [100, 127])
    _check_q(F.min(x), -128)
    _check_q(F.split(x, 2)[1], [[100, 127]])
    _check_q(F.repeat(x, 2, 0), [[-128, -3], [-128, -3], [100, 127], [100, 127]])
    _check_q(F.tile(x, (2, 1)), [[-128, -3], [100, 127], [-128, -3], [100, 127]])
    _check_q(F.roll(x, 1, 0), [[100, 127], [-128, -3]])
    _check_q(F.nn.pad(x, ((1, 1), (0, 0))), [[0, 0], [-128, -3], [100, 127], [0, 0]])
    _check_q(F.nn.interpolate(x.reshape(1, 1, 2, 2), scale_factor=2),
             [[[[-128, -97, -34, -3], [-71, -46, 4, 30], [43, 56, 82, 95], [100, 107, 120, 127]]]])
    assert F.mean(x).dtype == np.float32 and abs(F.mean(x).item() - 2.4) < 1e-5
