"""Session 81's module / optimizer and quantization fuzz runs against MegEngine 1.13 (scripts/megengine_module_fuzz.py
seeds 26, 27; scripts/megengine_quant_fuzz.py seeds 20, 21): no megxla fault; the disagreements were MegEngine's or
rounding, and the quantization fuzzer's filters were taught them. These tests keep the filters telling those cases
apart -- and only those: the texts are what the fuzzer printed (the first side MegEngine's)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import megengine_quant_fuzz as qf  # noqa: E402

_CONVBN = "self.l0 = M.ConvBnRelu2d(3, 4, 1, stride=1, padding=0, groups=1, bias=True)\nQ.tqt_qconfig\n"
_CONVT_BN = "self.l2 = M.ConvTransposeBn2d(2, 2, 3, stride=1, padding=0, bias=True)\nQ.passive_qconfig\n"


def _grads(mge_step, mxl_step):
    """The fuzzer's comparison of one step's gradients (dicts of float32 arrays)."""
    def res(d):
        return ("dict", {"grads": ("list", [("dict", {k: ("tensor", np.asarray(v, "float32"))
                                                      for k, v in d.items()})])})
    return qf._diff(res(mge_step), res(mxl_step), "out")


def test_gradient_before_a_batchnorm_of_constant_output_gradient_is_told_apart_only_when_tiny():
    # seed 20 case 36: MegEngine's conv bias gradient -1.15e-4 (rounding noise), megxla's exact 0
    lines = _grads({"l0.conv.bias": [0, -1.1513550e-4, 0, 0], "l0.bn.bias": [0, 0.9999996, 0, 0]},
                   {"l0.conv.bias": [0, 0, 0, 0], "l0.bn.bias": [0, 1.0, 0, 0]})
    assert [k for k, _ in lines] == ["VALUE-ALLZERO"]
    assert qf.known(_CONVBN, *lines[0]) is not None
    # a real gradient lost (0.3) is not rounding
    lines = _grads({"l0.conv.bias": [0, 0.3, 0, 0]}, {"l0.conv.bias": [0, 0, 0, 0]})
    assert qf.known(_CONVBN, *lines[0]) is None
    # nor is a layer without a BatchNorm
    assert qf.known(_CONVBN.replace("ConvBnRelu2d", "ConvRelu2d"),
                    *_grads({"l0.conv.bias": [0, -1e-4, 0, 0]}, {"l0.conv.bias": [0, 0, 0, 0]})[0]) is None


def test_conv_bias_of_a_training_bn_layer_is_compared_to_the_steps_largest_gradient():
    # seed 20 case 76 (megxla eager | auto-jit): -9.5e-4 | -4.9e-4 where the step's weight gradients reach 7.5e4
    big = {"l2.conv_transpose2d.weight": [75296.52, -48048.484]}
    lines = _grads({**big, "l2.conv_transpose2d.bias": [-0.00095176697, -0.0002394]},
                   {**big, "l2.conv_transpose2d.bias": [-0.00048828125, -0.0001984]})
    assert [k for k, _ in lines] == ["VALUE"] and "[step max 7.53e+04]" in lines[0][1]
    assert qf.known(_CONVT_BN, "VALUE(jit)", lines[0][1]) is not None
    # the same bias gradients beside gradients of 1 are not rounding
    small = {"l2.conv_transpose2d.weight": [1.0, -0.5]}
    lines = _grads({**small, "l2.conv_transpose2d.bias": [-0.00095176697, -0.0002394]},
                   {**small, "l2.conv_transpose2d.bias": [-0.00048828125, -0.0001984]})
    assert qf.known(_CONVT_BN, "VALUE(jit)", lines[0][1]) is None


def test_megengines_4_bit_quantized_conv_transpose2d_is_told_apart():
    # seed 20 case 69, seed 21 case 76: MegEngine's quantized ConvTranspose2d under ema_lowbit_fakequant_qconfig
    text = ("out: error ('RuntimeError', 'runtime does not support input / diff DType: QuantizedS4 x QuantizedS4now "
            "support case list: FLOAT x FLOAT', ['RuntimeError', 'Exception', 'BaseException', 'object']) | dict ")
    code = "self.l1 = M.ConvTranspose2d(4, 3, 1, stride=1, padding=0, bias=False)\nQ.ema_lowbit_fakequant_qconfig"
    assert qf.known(code, "STATUS", text) is not None
    assert qf.known(code.replace("ConvTranspose2d", "Conv2d"), "STATUS", text) is None


def test_nudges_reach_two_millionths():
    # seed 19 case 47's straight-through tie moves to megxla's side at 1 - 2e-6 only
    assert 1 - 2e-6 in qf.NUDGES and 1 + 1e-6 in qf.NUDGES


def test_an_empty_gradient_compares_without_error():
    # (seed 23: a parameter of no elements -- the "[max X]" of an all-zero side must not reduce an empty array)
    assert _grads({"l0.weight": np.zeros((0, 3))}, {"l0.weight": np.zeros((0, 3))}) == []


def test_the_steps_after_batchnorms_over_x_minus_x_are_told_apart_but_not_the_first_loss():
    # seed 23 case 36: Elemwise('sub')(x, x) before a ConvBnRelu2d and a LinearBnRelu1d, min_max_fakequant_qconfig
    code = "self.l0 = M.Elemwise('sub')\nself.fc = M.LinearBnRelu1d(48, 2)\nx = self.l0(x, x)\n"
    later = "out.losses[1]: at [] np.float64(0.6525856256484985) | np.float64(0.6584053039550781) (1 of 1)"
    assert qf.known(code, "VALUE", later) is not None
    assert qf.known(code, "VALUE", "out.qat_sd.fc.bn.bias: at [np.int64(0)] np.float64(0.8384) | "
                                   "np.float64(0.8640) (1 of 2)") is not None
    assert qf.known(code, "VALUE", later.replace("losses[1]", "losses[0]")) is None
