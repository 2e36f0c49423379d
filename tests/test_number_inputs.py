"""Python numbers that change every step -- an annealed dropout rate, PPO's clip range, a leaky slope, a fill value --
are inputs of their ops (the cached 0-d tensors of those numbers, as ``x * 0.5``'s 0.5), not parameters: one kernel
serves every value. As parameters, each new value compiled an eager kernel and its gradient's (dropout: ~300 ms a
step) and, under auto-jit, made its clusters a new key every step."""
from __future__ import annotations

import jax
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import _autojit, auto_jit_stats


class _Compiles:
    """Counts XLA backend compilations through JAX's monitoring hook (registered once: JAX cannot unregister)."""
    n = 0
    on = False
    names: list = []

    @classmethod
    def event(cls, event, duration, **kwargs):
        if cls.on and event == "/jax/core/compile/backend_compile_duration":
            cls.n += 1
            cls.names.append(kwargs.get("fun_name"))


jax.monitoring.register_event_duration_secs_listener(_Compiles.event)


@pytest.fixture(params=["eager", "auto_jit"])
def mode(request, monkeypatch, fresh_auto_jit_state):
    monkeypatch.setattr(_autojit, "EARLY", False)  # (no early launch: one executable per cluster key)
    mge.config.auto_jit = request.param == "auto_jit"
    try:
        yield request.param
    finally:
        _Compiles.on = False


# (name, the op with the step's number v in (0.1, 0.5), its NumPy reference or None)
CASES = {
    "clip": (lambda h, v: F.clip(h, -v, 2 * v), lambda h, v: np.where(h <= -v, -v, np.where(h <= 2 * v, h, 2 * v))),
    "clip_lower": (lambda h, v: F.clip(h, lower=v), lambda h, v: np.maximum(h, np.float32(v))),
    "clip_upper": (lambda h, v: F.clip(h, upper=v), lambda h, v: np.minimum(h, np.float32(v))),
    "leaky_relu": (lambda h, v: F.leaky_relu(h, v), lambda h, v: np.where(h >= 0, h, h * np.float32(v))),
    "dropout": (lambda h, v: F.dropout(h, v), None),
    # (a GAN's soft labels drawn every step)
    "full_like": (lambda h, v: h - F.full_like(h, v), lambda h, v: h - np.float32(v)),
    "pad": (lambda h, v: F.nn.pad(h, ((0, 0), (1, 2)), constant_value=v),
            lambda h, v: np.pad(h, ((0, 0), (1, 2)), constant_values=np.float32(v))),
    # (exploration or instance noise annealed every step: checked by its spread)
    "normal": (lambda h, v: h + mge.random.normal(0.5 * v, v, h.shape), None),
    "uniform": (lambda h, v: h + mge.random.uniform(-v, v, h.shape), None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_number_new_every_step_compiles_nothing_new(mode, case):
    op, reference = CASES[case]
    rng = np.random.RandomState(0)
    from megxla.core.ops import random as _random_ops
    for _ in range(_random_ops.SMALL_AFTER + 1):  # (eager draws of a small size get that size's kernel after
        mge.random.normal(size=(32, 16))          # SMALL_AFTER of them, counted per process: taken here, whatever
        mge.random.uniform(size=(32, 16))         # the tests before drew, not in the counted steps)
    mge.random.seed(0)
    net = M.Linear(8, 16)
    opt = optim.SGD(net.parameters(), lr=0.01)
    gm = GradManager().attach(net.parameters())
    x = mge.Tensor(rng.randn(32, 8).astype("float32"))
    for step in range(12):
        v = 0.1 + 0.4 * step / 12  # (annealed: a new Python float every step)
        if step == 4:  # (steps 0-3: the kernels, or the clusters after their key recurred, compiled)
            _Compiles.n, _Compiles.on, _Compiles.names = 0, True, []
        with gm:
            h = net(x)
            y = op(h, v)
            loss = (y * y).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        got, hv = y.numpy(), h.numpy()
        if reference is not None:  # (this step's number, not a stale one)
            np.testing.assert_allclose(got, reference(hv, v), rtol=1e-6, atol=1e-7)
        elif case == "normal":
            noise = got - hv
            assert abs(noise.mean() - 0.5 * v) < 0.2 * v and abs(noise.std() - v) < 0.15 * v, (v, noise.mean(),
                                                                                               noise.std())
        elif case == "uniform":
            noise = got - hv
            assert np.abs(noise).max() <= v * (1 + 1e-5) and noise.max() > 0.8 * v and noise.min() < -0.8 * v, v
        else:  # (dropout: the kept entries scaled by 1 / (1 - v), to an ulp: XLA may multiply by the reciprocal)
            kept = got != 0
            np.testing.assert_allclose(got[kept], hv[kept] / np.float32(1.0 - v), rtol=2.5e-7, atol=0)
            assert 0.5 * v < 1 - kept.mean() < 1.5 * v + 0.05, (v, kept.mean())
    _Compiles.on = False
    assert _Compiles.n == 0, f"{case} ({mode}): {_Compiles.n} compilations in 8 steps of new values: {_Compiles.names}"
    if mode == "auto_jit":  # (the same clusters every step: none split to run the changed op apart)
        s = auto_jit_stats()
        assert s["cache_hits"] >= 8 and s["split_clusters"] == 0 and s["eager_ops"] == 0 and not s["changes"], s


@pytest.mark.parametrize("dtype", ["int32", "uint8"])
def test_an_integer_pad_constant_new_every_step_compiles_nothing_new(mode, dtype):
    # (an integer tensor's pad constant was the op's parameter: a kernel -- under auto-jit a cluster -- per value)
    x = mge.Tensor(np.arange(6, dtype=dtype).reshape(2, 3))
    for step in range(12):
        if step == 4:
            _Compiles.n, _Compiles.on, _Compiles.names = 0, True, []
        y = F.nn.pad(x + 1, ((0, 0), (1, 2)), constant_value=7 + step)
        assert y.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(y.numpy(), np.pad(np.arange(6).reshape(2, 3) + 1, ((0, 0), (1, 2)),
                                                        constant_values=7 + step))
    _Compiles.on = False
    assert _Compiles.n == 0, f"{dtype} ({mode}): {_Compiles.n} compilations in 8 steps: {_Compiles.names}"


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
def test_number_inputs_keep_dtypes_and_values(dtype):
    # (the bounds and the slope take ``x``'s type as the parameters did: float16 stays float16, an integer tensor's
    # slope is float32, so its leaky_relu is float32; a float bound makes an integer tensor's clip float32)
    x = mge.Tensor(np.array([-3.0, -0.5, 0.0, 0.25, 2.0], "float32")).astype(dtype)
    xn = x.astype("float32").numpy()
    y = F.leaky_relu(x, 0.1)
    assert y.dtype == (np.float32 if dtype == "int32" else x.dtype)
    np.testing.assert_allclose(y.astype("float32").numpy(), np.where(xn >= 0, xn, xn * 0.1), rtol=1e-2)
    c = F.clip(x, -1, 1)
    assert c.dtype == x.dtype
    np.testing.assert_array_equal(c.astype("float32").numpy(), np.clip(xn, -1, 1))
    c = F.clip(x, -0.75, 0.5)
    assert c.dtype == (np.float32 if dtype == "int32" else x.dtype)
    if dtype != "int32":
        d = F.dropout(x, 0.5)
        assert d.dtype == x.dtype and set(np.unique(d.astype("float32").numpy() / np.where(xn == 0, 1, xn))) <= {0.0,
                                                                                                                 2.0}


@pytest.mark.parametrize("case", ["dropout", "normal", "uniform"])
def test_draws_with_numbers_new_every_step_are_eagers(case, monkeypatch):
    # (the draws under auto-jit, from clusters that keep their key as the number changes, are eager's numbers)
    monkeypatch.setattr(_autojit, "STATIC_TIMER", False)
    op = CASES[case][0]
    saved = mge.config.auto_jit
    runs = []
    try:
        for auto in (False, True):
            mge.config.auto_jit = auto
            mge.random.seed(3)
            h = mge.Tensor(np.random.RandomState(1).randn(16, 8).astype("float32"))
            runs.append([op(h * 1.0, 0.1 + 0.03 * step).numpy() for step in range(8)])
    finally:
        mge.config.auto_jit = saved
    np.testing.assert_array_equal(np.array(runs[0]), np.array(runs[1]))
