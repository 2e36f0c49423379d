"""Disagreements with MegEngine 1.13 found by scripts/megengine_module_fuzz.py (random modules, optimizers and LR
schedulers run by both), fixed in megxla.

MegEngine's results are recorded here as constants (CI has no MegEngine); each test names the fuzzer's case."""
import os
import subprocess
import sys
import textwrap

import numpy as np

import megxla

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(megxla.__file__)))  # (the megxla this session imports)


def _run(code):
    """Run ``code`` in a fresh process (what is tested could abort the process) and return its exit status and
    output."""
    env = dict(os.environ, PYTHONPATH=_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                       timeout=600)
    return p.returncode, p.stdout + p.stderr[-3000:]


def test_conv_transpose_with_a_stride_2_kernel_2_padding_1_axis_does_not_abort():
    # seed 3 case 34: M.ConvTranspose3d(2, 1, (3, 2, 3), stride=2, padding=(0, 1, 1), dilation=(2, 1, 1)) of a
    # (2, 2, 3, 3, 2) input killed the process: XLA's ConvOperandSwapper took the kernel-2, stride-2, padding-1 axis
    # for a "group" dimension and its HLO check aborted ("Window dimensions do not match RHS shape"). The values
    # below are MegEngine's.
    rc, out = _run("""
        import numpy as np, megxla as mge, megxla.functional as F
        from megxla.autodiff import GradManager
        x = mge.Parameter(np.arange(6, dtype="float32").reshape(1, 1, 3, 2))
        w = mge.Parameter(np.arange(6, dtype="float32").reshape(1, 1, 2, 3))
        gm = GradManager().attach([x, w])
        with gm:
            y = F.conv_transpose2d(x, w, stride=(2, 1), padding=(1, 0))
            gm.backward((y * mge.tensor(np.arange(y.size, dtype="float32").reshape(y.shape))).sum())
        np.testing.assert_array_equal(y.numpy()[0, 0], [[0, 3, 4, 5], [0, 2, 7, 6], [6, 17, 22, 15], [0, 4, 13, 10]])
        np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[14, 26], [127, 142], [41, 44]])
        np.testing.assert_array_equal(w.grad.numpy()[0, 0], [[136, 150, 164], [44, 50, 56]])
        x = mge.tensor(np.arange(12, dtype="float32").reshape(1, 1, 3, 2, 2))
        w = mge.tensor(np.arange(12, dtype="float32").reshape(1, 1, 2, 2, 3))
        y = F.conv_transpose3d(x, w, stride=(2, 1, 1), padding=(1, 0, 0)).numpy()
        np.testing.assert_array_equal(y[0, 0, :, 1], [[12, 41, 47, 35], [12, 37, 59, 39], [72, 169, 191, 111],
                                                      [24, 69, 107, 67]])
        print("ok")
    """)
    assert rc == 0 and out.startswith("ok"), out


def test_conv_gradient_of_a_stride_2_kernel_2_padding_1_axis_does_not_abort():
    # found next to seed 3 case 34: the input gradient of conv2d(kernel (2, 3), stride (2, 1), padding (1, 0)) of a
    # 4x4 input is a convolution of the same shape XLA's operand swapper broke (the process aborted in backward).
    # The values below are MegEngine's.
    rc, out = _run("""
        import numpy as np, megxla as mge, megxla.functional as F
        from megxla.autodiff import GradManager
        x = mge.Parameter(np.arange(16, dtype="float32").reshape(1, 1, 4, 4))
        w = mge.Parameter(np.arange(6, dtype="float32").reshape(1, 1, 2, 3))
        gm = GradManager().attach([x, w])
        with gm:
            y = F.conv2d(x, w, stride=(2, 1), padding=(1, 0))
            gm.backward((y * mge.tensor(np.arange(y.size, dtype="float32").reshape(y.shape))).sum())
        np.testing.assert_array_equal(y.numpy()[0, 0], [[14, 26], [127, 142], [41, 44]])
        np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[0, 3, 4, 5], [0, 2, 7, 6], [6, 17, 22, 15],
                                                             [0, 4, 13, 10]])
        np.testing.assert_array_equal(w.grad.numpy()[0, 0], [[136, 150, 164], [44, 50, 56]])
        print("ok")
    """)
    assert rc == 0 and out.startswith("ok"), out


def test_batch_matmul_activation_with_one_output_feature_broadcasts_its_bias():
    # seed 5 case 39: BatchMatMulActivation(2, 2, 1, bias=True) of a (2, 2, 2) input: MegEngine adds the (1,) bias
    # along the last axis, which broadcasts for any K; megxla raised ("K must be 1"). MegEngine's values.
    import megxla.module as M
    m = M.BatchMatMulActivation(2, 2, 1, bias=True, nonlinear_mode="relu")
    m.load_state_dict({"weight": np.array([[[1., 2.]], [[-1., 3.]]], "float32"), "bias": np.array([0.5], "float32")})
    y = m(megxla.tensor(np.arange(8, dtype="float32").reshape(2, 2, 2) - 3))
    np.testing.assert_array_equal(y.numpy(), [[[0, 0]], [[8.5, 10.5]]])


def test_batch_norm_of_one_value_per_channel_has_zero_gradients_as_megengine():
    # module fuzz seed 8 case 176: a training BatchNorm over a batch of 1 (one value per channel) has a NaN running
    # variance (MegEngine's too: n / (n - 1)); megxla's gradients went through that update and came out NaN too,
    # where MegEngine's are 0 (its output is the bias: x - mean is 0 whatever x)
    import megxla as mge
    import megxla.module as M
    from megxla.autodiff import GradManager
    m = M.LinearBnRelu1d(5, 2, bias=False)
    m.train()
    x = mge.Parameter(np.array([[-1.43, -0.50, -0.74, 0.61, -0.28]], "float32"))
    gm = GradManager().attach([x] + list(m.parameters()))
    for _ in range(2):
        with gm:
            y = m(x)
            gm.backward((y * mge.tensor(np.array([[0.3, -0.7]], "float32"))).sum())
    assert np.isnan(m.bn.running_var.numpy()).all()  # (as MegEngine's)
    assert np.array_equal(x.grad.numpy(), np.zeros((1, 5), "float32"))
    assert not np.isnan(m.linear.weight.grad.numpy()).any() and not np.abs(m.linear.weight.grad.numpy()).any()
