"""Session 83's fuzzer runs against MegEngine 1.13 (megengine_fuzz seeds 47-52, 250 cases each, and ``--ops api``
seeds 53-55; bad_call_fuzz seeds 19-22, 30 programs each) found no megxla fault (two fuzzer filters widened:
MegEngine's ``cross_entropy`` broadcast, an ill-conditioned ``matinv``'s rounding). These tests guard the two
behaviours the triage re-checked by hand, where megxla deliberately differs from MegEngine:

- ``F.vision.correlation``'s gradient w.r.t. ``data1`` is the forward's true derivative (central differences), not
  MegEngine's (docs/differences.md: "correlation gradient w.r.t. data1 -- wrong values"; seed 52 case 2's
  parameters: MegEngine's gradient is 6.8 off the finite differences, megxla's 1.7e-4);
- ``BatchNorm2d(2)`` given a 3-channel input inside a ``GradManager`` block raises an error naming the shapes and
  leaves the running statistics as they were (bad_call_fuzz seed 20 program 10: MegEngine 1.13 accepts it there,
  reading past its 2-element statistics; where it checks, it raises an AsyncError, a RuntimeError).
"""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
from megxla.autodiff import GradManager


def test_correlation_data1_gradient_is_the_forward_derivative():
    rs = np.random.RandomState(0)
    a = rs.randn(2, 1, 7, 3).astype("float32")
    b = rs.randn(2, 1, 7, 3).astype("float32")
    kw = dict(kernel_size=1, max_displacement=2, stride1=1, stride2=1, pad_size=1, is_multiply=True)
    ct = rs.randn(*F.vision.correlation(mge.tensor(a), mge.tensor(b), **kw).shape).astype("float32")
    x = mge.Parameter(a)
    gm = GradManager().attach([x])
    with gm:
        gm.backward((F.vision.correlation(x, mge.tensor(b), **kw) * mge.tensor(ct)).sum())
    # (is_multiply=True: the output is linear in data1, so central differences are exact up to rounding)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    fd = np.zeros_like(a64)
    eps = 1e-2
    for idx in np.ndindex(a.shape):
        d = np.zeros_like(a64)
        d[idx] = eps
        fp = (F.vision.correlation(mge.tensor((a64 + d).astype("float32")), mge.tensor(b), **kw).numpy() * ct).sum()
        fm = (F.vision.correlation(mge.tensor((a64 - d).astype("float32")), mge.tensor(b), **kw).numpy() * ct).sum()
        fd[idx] = (fp - fm) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-3, atol=1e-3)


def test_batchnorm_channel_mismatch_in_a_recording_raises_and_keeps_statistics():
    bn = M.BatchNorm2d(2)
    bn(F.ones((2, 2, 4, 4)) * 3)  # (a good training step first: running statistics 0.3 / 0.9)
    mean, var = bn.running_mean.numpy().copy(), bn.running_var.numpy().copy()
    gm = GradManager().attach(bn.parameters())
    with gm:
        with pytest.raises(ValueError, match=r"running_mean must have 3 elements .*\(1, 2, 1, 1\)"):
            bn(F.ones((2, 3, 4, 4)))
    np.testing.assert_array_equal(bn.running_mean.numpy(), mean)
    np.testing.assert_array_equal(bn.running_var.numpy(), var)
