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
