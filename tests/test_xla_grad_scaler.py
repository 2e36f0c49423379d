"""amp.Xla_GradScaler: loss scaling for compiled steps (scale as a step argument, no host read inside the
step, roll-back of an overflowed step in update())."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
from megxla import amp
from megxla.autodiff import GradManager
from megxla.jit import xla_trace
from megxla.optimizer import SGD


def test_scaled_backward_unscales_inside_the_compiled_step():
    class Affine(M.Module):
        def forward(self, x, y):
            return 2 * (x + 2 * y) + 1

    model, gm = Affine(), GradManager()
    scaler = amp.Xla_GradScaler(model)
    x = mge.Tensor(np.random.randn(2, 3).astype("float32"))
    y = mge.Tensor(np.random.randn(2, 3).astype("float32"))

    @xla_trace(without_host=True)
    def step(model, a, b, scale_factor):
        gm.attach([a, b])
        with gm:
            scaler.backward(gm, scale_factor, model(a, b))
        ga, gb = a.grad, b.grad
        a.grad = b.grad = None
        return ga, gb, scale_factor

    for _ in range(3):
        ga, gb, s = step(model, x, y, scaler.scale_factor)
        np.testing.assert_array_equal(ga.numpy(), np.full((2, 3), 2.0, np.float32))
        np.testing.assert_array_equal(gb.numpy(), np.full((2, 3), 4.0, np.float32))
        assert float(s) == 16.0
    assert step.num_compiled >= 1


def _train(compiled, inputs, growth_interval=2):
    mge.random.seed(0)
    model = M.Linear(4, 2)
    gm = GradManager().attach(model.parameters())
    opt = SGD(model.parameters(), lr=0.1)
    scaler = amp.Xla_GradScaler(model, init_scale=4.0, growth_interval=growth_interval)

    def step(model, opt, x, scale_factor):
        with gm:
            loss = (model(x) ** 2).mean()
            scaler.backward(gm, scale_factor, loss)
        opt.step().clear_grad()
        return loss

    run = xla_trace(step) if compiled else step
    scales, weights = [], []
    for x in inputs:
        run(model, opt, mge.Tensor(x), scaler.scale_factor)
        scaler.update(model)
        scales.append(float(scaler.scale_factor))
        weights.append(model.weight.numpy().copy())
    return scales, weights


def test_overflow_rolls_back_and_backs_off_eager_and_compiled():
    rng = np.random.RandomState(0)
    inputs = [rng.randn(3, 4).astype("float32") for _ in range(6)]
    inputs[3] = inputs[3] * np.float32(1e30)  # the scaled loss overflows float32 in this step
    eager = _train(False, inputs)
    compiled = _train(True, inputs)
    assert eager[0] == compiled[0] == [4.0, 8.0, 8.0, 4.0, 4.0, 8.0]
    np.testing.assert_array_equal(eager[1][3], eager[1][2])  # the overflowed step left the weights as they were
    for we, wc in zip(eager[1], compiled[1]):
        assert np.all(np.isfinite(wc))
        np.testing.assert_allclose(wc, we, rtol=1e-5, atol=1e-6)


def test_new_scale_and_frozen_growth():
    model = M.Linear(2, 2)
    scaler = amp.Xla_GradScaler(model, growth_interval=0)
    scaler.update(model, new_scale=2.0)
    assert float(scaler.scale_factor) == 16.0  # growth_interval == 0: update does nothing (MegEngine)
    scaler = amp.Xla_GradScaler(model)
    scaler.update(model, new_scale=2.0)
    assert float(scaler.scale_factor) == 2.0
    with pytest.raises(ValueError):
        amp.Xla_GradScaler(model, init_scale=-1.0)


def test_grad_scaler_passed_to_xla_trace_is_state_and_skips_overflowed_steps_in_graph():
    from megxla.amp import GradScaler

    def run(compiled):
        mge.random.seed(0)
        m = M.Linear(3, 1)
        gm = GradManager().attach(m.parameters())
        opt = SGD(m.parameters(), lr=0.1)
        scaler = GradScaler(growth_interval=2)

        def step(m, opt, scaler, x):
            with gm:
                scaler.backward(gm, m(x).sum())
            opt.step().clear_grad()

        f = xla_trace(step) if compiled else step
        out = []
        for v in [1, 1, np.inf, 1, 1, 1]:
            f(m, opt, scaler, mge.Tensor(np.full((2, 3), v, "float32")))
            out.append((scaler.scale_factor, m.weight.numpy().copy()))
        return out

    eager, compiled = run(False), run(True)
    assert [s for s, _ in eager] == [s for s, _ in compiled] == [16.0, 32.0, 16.0, 16.0, 32.0, 32.0]
    for (_, we), (_, wc) in zip(eager, compiled):
        np.testing.assert_allclose(wc, we, rtol=1e-6)
    np.testing.assert_array_equal(eager[2][1], eager[1][1])  # the inf step left the weights unchanged
