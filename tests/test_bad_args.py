"""Issue 31 (B2, B3): MegEngine's argument checks, raised before any state is touched, and IEEE signed zeros
through Python scalar operands."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F


# ---------------------------------------------------------------------------
# signed zero: a scalar operand keeps its sign whatever scalar was seen before
# ---------------------------------------------------------------------------


def _sign(t):
    return np.signbit(t.numpy()).tolist()


def test_signed_zero_scalar_operands():
    x = mge.Tensor([1.0, 2.0])
    # +0.0 is seen first: it must not stand in for -0.0 (0.0 == -0.0 and they hash alike)
    assert _sign(x * 0.0) == [False, False]
    assert _sign(x * -0.0) == [True, True]
    np.testing.assert_array_equal((1 / (x * -0.0)).numpy(), [-np.inf, -np.inf])
    np.testing.assert_array_equal((1 / (-0.0 * x)).numpy(), [-np.inf, -np.inf])
    nz = x * -0.0
    assert _sign(nz + 0.0) == [False, False]  # IEEE: -0 + +0 = +0
    assert _sign(nz + -0.0) == [True, True]
    assert _sign(nz - 0.0) == [True, True]
    assert _sign(nz - -0.0) == [False, False]
    assert _sign((x * 0.0) / -1.0) == [True, True]
    assert _sign(x / -np.inf) == [True, True]
    assert _sign(F.minimum(x * 0.0 + 1.0, -0.0)) == [True, True]
    assert _sign(F.full((2,), -0.0)) == [True, True]
    assert _sign(F.full((2,), 0.0)) == [False, False]
    # and the other way round: -0.0 seen first must not stand in for +0.0
    y = mge.Tensor([3.0], dtype="float16")
    assert _sign(y * -0.0) == [True]
    assert _sign(y * 0.0) == [False]


def test_signed_zero_in_compiled_step():
    from megxla.jit import xla_trace

    x = mge.Tensor([1.0, 2.0])
    _ = x * 0.0  # cache +0.0 first

    @xla_trace
    def f(x, s):
        return 1 / (x * s)

    for s, want in [(0.0, np.inf), (0.0, np.inf), (-0.0, -np.inf), (-0.0, -np.inf), (-0.0, -np.inf)]:
        np.testing.assert_array_equal(f(x, s).numpy(), [want, want])
