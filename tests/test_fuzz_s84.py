"""Session 84's fuzz runs against MegEngine 1.13 (scripts/megengine_fuzz.py seeds 56-58 and ``--ops api`` 59-60,
250 cases each; probes under /tmp/s84/f1).

megengine_fuzz seed 57 case 231, ``F.nn.instance_norm`` of a (1, 2, 1, 1) tensor: one value an instance, so the
normalised output is the bias whatever x, and the input gradient is 0 -- exactly 0 in megxla, rounding noise over
sqrt(eps) in MegEngine (6.1e-5; up to 1.2e-4 by hand, for ``group_norm`` with one value a group too). The fuzzer's
filter was taught it: these tests keep megxla's gradient exactly 0 and the filter telling those cases apart -- and
only those. The texts are what the fuzzer printed (the first side MegEngine's). MegEngine is not needed here.

megengine_quant_fuzz seeds 43-46 (60 cases each) flagged two cases, both rounding, now told apart: seed 44 case 37,
the weight fake quant's scale gradient of a ConvBn2d(1, 2, 1) (0 in exact arithmetic: a training BatchNorm undoes the
1x1 conv's affine map of one channel), and seed 46 case 27, a LinearRelu's pre-activation exactly 0 on the
quantization grids -- 0.0 in MegEngine's dot product, 3.6e-9 in megxla's -- so the ReLU stops its gradient in one
and passes it in the other (not filtered: a filter on a ReLU layer's every value would hide real faults; megxla's
relu'(0) = 0, as MegEngine's, is guarded below).
"""
import os
import sys

import numpy as np

import megxla as mge
import megxla.functional as F
from megxla.autodiff import GradManager

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import megengine_fuzz as mf  # noqa: E402
import megengine_quant_fuzz as qf  # noqa: E402

_I = "[np.int64(0), np.int64(0), np.int64(0), np.int64(0)]"


def _grad(norm, shape, eps):
    rs = np.random.RandomState(0)
    x = mge.Parameter(rs.randn(*shape).astype("float32"))
    w, b = mge.tensor(rs.randn(shape[1]).astype("float32")), mge.tensor(rs.randn(shape[1]).astype("float32"))
    ct = mge.tensor(rs.randn(*shape).astype("float32"))
    gm = GradManager().attach([x])
    with gm:
        if norm == "instance":
            y = F.nn.instance_norm(x, True, w, b, eps=eps)
        else:
            y = F.nn.group_norm(x, shape[1], True, w, b, eps=eps)
        gm.backward((y * ct).sum())
    return y.numpy(), x.grad.numpy(), b.numpy()


def test_norm_over_one_value_has_a_zero_input_gradient():
    for norm in ("instance", "group"):
        for eps in (1e-5, 0.1):
            y, g, b = _grad(norm, (2, 3, 1, 1), eps)
            # (x - mean is exactly 0 for one value: the output is the bias, the gradient through it exactly 0)
            np.testing.assert_array_equal(y, np.broadcast_to(b.reshape(1, 3, 1, 1), (2, 3, 1, 1)))
            np.testing.assert_array_equal(g, np.zeros((2, 3, 1, 1), "float32"))


def test_filter_tells_apart_a_norm_over_one_value():
    text = f"grad: at {_I} np.float64(6.103515625e-05) | np.float64(0.0) (2 of 2)"
    code = "out = F.nn.instance_norm(t('a'), True, t('b'), t('c'), eps=1e-05)"
    ins = "a=float32[1, 2, 1, 1], b=float32[2], c=float32[2]"
    assert mf.known(code, ins, "VALUE", text) is not None  # seed 57 case 231
    assert mf.known("out = F.nn.group_norm(t('a'), 3, False, eps=1e-05)", "a=float32[2, 3, 1, 1]", "VALUE",
                    text) is not None
    # two values an instance are a real normalisation, not noise; nor is a forward value, nor a large gradient
    assert mf.known(code, ins.replace("[1, 2, 1, 1]", "[1, 2, 2, 1]"), "VALUE", text) is None
    assert mf.known(code, ins, "VALUE", text.replace("grad:", "forward:")) is None
    assert mf.known(code, ins, "VALUE", text.replace("6.103515625e-05", "0.5")) is None
    assert mf.known("out = F.nn.group_norm(t('a'), 1, False, eps=1e-05)", "a=float32[2, 3, 1, 1]", "VALUE",
                    text) is None


def test_relu_gradient_at_exactly_zero_is_zero():
    # (MegEngine's relu'(0) = 0: seed 46 case 27's element, pre-activation 0.0, got no gradient there)
    x = mge.Parameter(np.array([0.0, -0.0, 1.0, -1.0], "float32"))
    gm = GradManager().attach([x])
    with gm:
        gm.backward(F.relu(x).sum())
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 1.0, 0.0])


_CONVBN = ("self.l0 = M.ConvBn2d(1, 2, 1, stride=2, padding=0, groups=1, bias=True)\n"
           "self.fc = M.Linear(8, 3)\nQ.quantize_qat(net, qconfig=Q.tqt_qconfig)\n")
_LINRELU = ("self.l0 = M.LinearRelu(5, 5, bias=False)\nself.l1 = M.Linear(5, 1, bias=True)\n"
            "Q.quantize_qat(net, qconfig=Q.passive_qconfig)\n")


def test_quant_filters_tell_apart_the_s84_cases():
    scale = ("out.grads[2].l0.weight_fake_quant.scale: at [] np.float64(1.625191725906916e-05) | "
             "np.float64(2.0886898255412234e-06) (1 of 1) [step max 4.66]")
    assert qf.known(_CONVBN, "VALUE", scale) is not None  # seed 44 case 37
    # not beside a small step's largest gradient, nor without a BatchNorm
    assert qf.known(_CONVBN, "VALUE", scale.replace("4.66", "0.01")) is None
    assert qf.known(_CONVBN.replace("ConvBn2d", "Conv2d"), "VALUE", scale) is None
    row = ("out.grads[0].l0.weight: at [np.int64(1), np.int64(0)] np.float64(0.0) | "
           "np.float64(-0.04050000384449959) (9 of 25) [step max 1.2]")
    assert qf.known(_LINRELU, "VALUE", row) is None  # seed 46 case 27: reported, not filtered
