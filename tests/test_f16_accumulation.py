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


def _windows(x, k):
    """NumPy's sliding_window of ``x`` (N, C, H, W), k x k windows, stride 1, padding k // 2 (zeros)."""
    h, w = x.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
    return np.stack([np.stack([xp[:, :, i:i + h, j:j + w] for j in range(k)], -1) for i in range(k)], -2)


def _windows_transposed(dy, k):
    """The adjoint of ``_windows``: every window's values summed back into place (float64)."""
    n, c, h, w = dy.shape[:4]
    g = np.zeros((n, c, h + k - 1, w + k - 1))
    for i in range(k):
        for j in range(k):
            g[:, :, i:i + h, j:j + w] += dy[..., i, j]
    return g[:, :, k // 2:k // 2 + h, k // 2:k // 2 + w]


def _max_pool_grad(x, dy, k):
    """MegEngine's max pooling gradient (k x k, stride 1, padding k // 2): each window's gradient to every input
    equal to its maximum."""
    h, w = x.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)), constant_values=-np.inf)
    g = np.zeros(xp.shape)
    for i in range(h):
        for j in range(w):
            win = xp[:, :, i:i + k, j:j + k]
            top = win.max((2, 3), keepdims=True)
            g[:, :, i:i + k, j:j + k] += (win == top) * dy[:, :, i, j, None, None]
    return g[:, :, k // 2:k // 2 + h, k // 2:k // 2 + w]


# (quarters: exact in float16 and bfloat16, none at a half, so every output's nearest pixel is plain)
_QUARTERS = (np.arange(32) % 14) / 4 - 0.25
_MAP = np.stack(np.meshgrid(_QUARTERS, _QUARTERS[::-1]), -1)[None].astype("float32")
_MAP_YX = np.floor(_MAP[0, ..., ::-1] + 0.5).astype(int)  # (nearest: the pixel each output reads)


# op -> (the parameter's shape, the output from the parameter ``x``, the exact gradient from the output's gradient
# ``dy`` (float64), the forward in NumPy from the parameter's values): each a sum of ~128 terms or more
SUMS = {
    "gather": ((8, 16), lambda x: F.gather(x, 0, mge.Tensor(_GATHER)),
               lambda dy: _scattered((_GATHER, np.arange(16)), dy, (8, 16)),
               lambda x: np.take_along_axis(x, _GATHER, 0)),
    "getitem x[rows]": ((8, 16), lambda x: x[mge.Tensor(_ROWS)],
                        lambda dy: _scattered(_ROWS, dy, (8, 16)), lambda x: x[_ROWS]),
    "getitem x[rows, cols]": ((8, 16), lambda x: x[mge.Tensor(_ROWS), mge.Tensor(_COLS)],
                              lambda dy: _scattered((_ROWS, _COLS), dy, (8, 16)), lambda x: x[_ROWS, _COLS]),
    "getitem x[1:, rows]": ((4, 8, 16), lambda x: x[1:, mge.Tensor(_ROWS)],
                            lambda dy: np.pad(_scattered((slice(None), _ROWS), dy, (3, 8, 16)),
                                              ((1, 0), (0, 0), (0, 0))),
                            lambda x: x[1:, _ROWS]),
    "embedding": ((8, 16), lambda x: F.embedding(mge.Tensor(_ROWS.reshape(32, 32)), x),
                  lambda dy: _scattered(_ROWS, dy.reshape(1024, 16), (8, 16)), lambda x: x[_ROWS.reshape(32, 32)]),
    "tile": ((1, 16), lambda x: F.tile(x, (1024, 1)), lambda dy: dy.sum(0, keepdims=True),
             lambda x: np.tile(x, (1024, 1))),
    "repeat": ((16,), lambda x: F.repeat(x, 64, axis=0), lambda dy: dy.reshape(16, 64).sum(1),
               lambda x: np.repeat(x, 64, axis=0)),
    "sliding_window": ((1, 1, 12, 12), lambda x: F.sliding_window(x, 11, padding=5),
                       lambda dy: _windows_transposed(dy, 11), lambda x: _windows(x, 11)),
    # (a map in the image's type: a float32 map sampled in float32 already)
    "remap nearest": ((1, 2, 4, 4),
                      lambda x: F.vision.remap(x, mge.Tensor(_MAP).astype(x.dtype), interp_mode="nearest"),
                      lambda dy: _scattered((slice(None), slice(None), _MAP_YX[..., 0], _MAP_YX[..., 1]),
                                            dy, (1, 2, 4, 4)),
                      lambda x: x[:, :, _MAP_YX[..., 0], _MAP_YX[..., 1]]),
}
# (the gradients whose exact value needs the parameter: max pooling's routes by it)
_MAX_POOL = (lambda x: F.max_pool2d(x, 15, stride=1, padding=7), _max_pool_grad)


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


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_narrow_max_pool_gradient_accumulates_in_float32(dtype, auto_jit):
    # (overlapping 15 x 15 windows: a maximum collects up to 225 windows' gradients; summed in float16, 1.6 ulps off)
    pool, grad = _MAX_POOL
    SUMS["max_pool2d"] = ((1, 2, 16, 16), pool, None, None)
    try:
        eager, out, x, dy = _step("max_pool2d", dtype, False)
        compiled, _, _, _ = _step("max_pool2d", dtype, True)
    finally:
        del SUMS["max_pool2d"]
    assert eager.dtype == _NP[dtype]
    np.testing.assert_array_equal(out, _windows(x, 15).max((-2, -1)))
    expected = grad(x, dy.astype(np.float64), 15)
    touched = expected != 0
    assert _ulps(eager[touched], expected[touched], dtype) <= 0.5
    assert not eager[~touched].any()
    assert compiled.tobytes() == eager.tobytes()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_narrow_sliding_window_transpose_sums_in_float32(dtype):
    # sliding_window's adjoint is a sum of the overlapping windows: it sums them in float32 now, as ``sum`` does
    # (in float16, 15 x 15 windows were 10 ulps off the exact sum)
    cols = np.random.RandomState(2).uniform(0.9, 1.1, (1, 2, 16, 16, 15, 15)).astype("float32").astype(_NP[dtype])
    got = F.sliding_window_transpose(mge.Tensor(cols), (16, 16), 15, padding=7).numpy()
    assert got.dtype == _NP[dtype]
    assert _ulps(got, _windows_transposed(cols.astype(np.float64), 15), dtype) <= 0.5
