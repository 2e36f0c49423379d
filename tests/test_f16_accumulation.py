"""float16/bfloat16 gradients that are sums -- a gather's scatter-add over repeated indices, a tile's or a sliding
window's sum over its copies -- accumulate in float32 and are rounded once: within half an ulp of the exact sum
(computed in float64 here), eagerly and under auto-jit alike, bit for bit. Before, JAX's transposes summed in the
narrow type (an embedding row used 128 times: 6-8 float16 ulps off, ~3 bfloat16 ulps). The forwards are unchanged:
they only move values. (Session 68's survey; the broadcasts' gradients are session 67's,
tests/test_autojit_probes_s67.py. Matmul, linear, batched matmul and convolution gradients were already within half
an ulp: XLA:CPU computes float16 dots and convolutions in float32.)"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.autodiff import GradManager
from megxla.jit import _autojit, reset_auto_jit_stats

_MANTISSA = {"float16": 11, "bfloat16": 8}
_NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _ulps(got, exact, dtype):
    """How many ulps of ``dtype`` (at ``exact``'s magnitude, all normal numbers here) ``got`` is from ``exact``."""
    ulp = 2.0 ** (np.floor(np.log2(np.abs(exact))) - (_MANTISSA[dtype] - 1))
    return float(np.max(np.abs(got.astype(np.float64) - exact) / ulp))


@pytest.fixture
def auto_jit(monkeypatch):
    saved = mge.config.auto_jit
    monkeypatch.setattr(_autojit, "STATIC_TIMER", False)  # (clusters, not a step timer's choice of eager)
    yield
    mge.config.auto_jit = saved


def _fresh_auto_jit():
    _autojit._sites.clear()
    _autojit._steps.clear()
    _autojit._early.clear()
    reset_auto_jit_stats()


_RNG = np.random.RandomState(0)
_ROWS = _RNG.randint(0, 8, 1024).astype("int32")  # 8 rows, each picked ~128 times
_COLS = _RNG.randint(0, 2, 1024).astype("int32")
_GATHER = _RNG.randint(0, 8, (1024, 16)).astype("int32")


def _scattered(index, dy, shape):
    g = np.zeros(shape)
    np.add.at(g, index, dy)
    return g


# op -> (the parameter's shape, the output from the parameter ``x``, the exact gradient from the output's gradient
# ``dy`` (float64), the forward in NumPy from the parameter's values): each a sum of ~128 terms or more
SUMS = {
    "gather": ((8, 16), lambda x: F.gather(x, 0, mge.Tensor(_GATHER)),
               lambda dy: _scattered((_GATHER, np.arange(16)), dy, (8, 16)), lambda x: np.take_along_axis(x, _GATHER, 0)),
    "getitem x[rows]": ((8, 16), lambda x: x[mge.Tensor(_ROWS)],
                        lambda dy: _scattered(_ROWS, dy, (8, 16)), lambda x: x[_ROWS]),
    "getitem x[rows, cols]": ((8, 16), lambda x: x[mge.Tensor(_ROWS), mge.Tensor(_COLS)],
                              lambda dy: _scattered((_ROWS, _COLS), dy, (8, 16)), lambda x: x[_ROWS, _COLS]),
    "getitem x[1:, rows]": ((4, 8, 16), lambda x: x[1:, mge.Tensor(_ROWS)],
                            lambda dy: np.pad(_scattered((slice(None), _ROWS), dy, (3, 8, 16)), ((1, 0), (0, 0), (0, 0))),
                            lambda x: x[1:, _ROWS]),
    "embedding": ((8, 16), lambda x: F.embedding(mge.Tensor(_ROWS.reshape(32, 32)), x),
                  lambda dy: _scattered(_ROWS, dy.reshape(1024, 16), (8, 16)), lambda x: x[_ROWS.reshape(32, 32)]),
}


def _step(name, dtype, auto):
    """The parameter's gradient and the op's output, after running the step (5 times under auto-jit: compiled)."""
    shape, fn, _, _ = SUMS[name]
    rng = np.random.RandomState(1)
    x = mge.Parameter(rng.standard_normal(shape).astype("float32").astype(_NP[dtype]))
    dy = None
    mge.config.auto_jit = auto
    if auto:
        _fresh_auto_jit()
    try:
        for _ in range(5 if auto else 1):
            with GradManager().attach([x]) as gm:
                out = fn(x)
                if dy is None:  # (positive: no cancellation, so float32's sum rounds to within half an ulp)
                    dy = rng.uniform(0.9, 1.1, out.shape).astype("float32").astype(_NP[dtype])
                gm.backward((out * 2 + 1) * 0.5 - 0.5, mge.Tensor(dy))  # (a few ops more: a cluster worth compiling)
            grad, x.grad = x.grad.numpy(), None
        if auto:
            assert _autojit._stats.compiled >= 1  # (the step ran compiled, not op by op)
        return grad, out.numpy(), x.numpy(), dy
    finally:
        mge.config.auto_jit = False


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(SUMS))
def test_narrow_sum_gradients_accumulate_in_float32(name, dtype, auto_jit):
    _, _, exact, forward = SUMS[name]
    eager, out, x, dy = _step(name, dtype, False)
    assert eager.dtype == _NP[dtype]
    np.testing.assert_array_equal(out, forward(x))  # (the forward only moves values: bit-equal)
    expected = exact(dy.astype(np.float64))
    touched = expected != 0
    assert _ulps(eager[touched], expected[touched], dtype) <= 0.5
    assert not eager[~touched].any()
    compiled, _, _, _ = _step(name, dtype, True)
    assert compiled.tobytes() == eager.tobytes()
