"""Adversarial programs around a churning ``xla_trace`` step (Python floats new on most calls: the body runs as
auto-jit clusters, ``trace._numbers_changed``), checked against eager."""
import io
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import exclude_from_trace, trace, xla_trace


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.fc = M.Linear(4, 3)
        self.tau = 1.0  # (a softmax temperature)

    def forward(self, x):
        return F.softmax(self.fc(x) / self.tau, axis=1)


_X = np.random.RandomState(0).standard_normal((2, 4)).astype("float32")


@pytest.mark.parametrize("make", [lambda f: xla_trace(f, capture_as_const=True),
                                  lambda f: trace(f, symbolic=True, capture_as_const=True, without_host=True)])
def test_a_step_traced_to_be_dumped_dumps_its_last_call_whatever_its_floats(make):
    # (an inference function whose temperature changed every call, then dumped: it kept no recording to dump)
    net = _Net()
    net.eval()
    f = make(lambda x: net(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(8):
            net.tau = 1.0 + i
            want = f(mge.Tensor(_X)).numpy()
    buf = io.BytesIO()
    f.dump(buf, arg_names=["x"])
    buf.seek(0)
    from megxla.jit import load
    np.testing.assert_allclose(load(buf)(mge.Tensor(_X))[0].numpy(), want, rtol=1e-6)  # (the last temperature)


def test_dumping_a_churning_step_says_why_there_is_no_recording():
    net = _Net()
    net.eval()
    f = xla_trace(lambda net, x: net(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(8):
            net.tau = 1.0 + i
            f(net, mge.Tensor(_X))
    assert f._churning
    with pytest.raises(RuntimeError, match="auto-jit clusters"):
        f.dump(io.BytesIO())


def test_an_eagerly_recorded_step_counts_its_recording_calls():
    # (a step with an exclude_from_trace block records eagerly; its new signatures' recording calls were not
    # counted, so a rate changed every other call looked like most calls: it churned, and the warning said "on 4
    # of 5 calls" at the ninth)
    net = _Net()
    gm = GradManager().attach(net.parameters())
    opt = optim.SGD(net.parameters(), lr=0.1)
    seen = []

    @xla_trace
    def step(net, opt, x, w):
        with gm:
            loss = (net(x) ** 2).mean() * w
            gm.backward(loss)
        with exclude_from_trace():
            seen.append(w)
        opt.step().clear_grad()
        return loss

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(12):
            step(net, opt, mge.Tensor(_X), 1.0 + 0.1 * (i // 2))
    assert not step._churning, [str(w.message) for w in caught]
    assert seen == [1.0 + 0.1 * k for k in range(6)]  # (the block runs while recording: once per value)


def _train(step, net, opt, steps=16):
    out = []
    for i in range(steps):
        net.tau = 1.0 + 0.1 * i
        x = mge.Tensor(np.random.RandomState(i).standard_normal((5, 4)).astype("float32"))
        out.append(step(net, opt, x, 1.0 + 0.01 * i).item())
    return out


@pytest.mark.parametrize("symbolic", [True, False])
def test_a_trace_with_the_host_whose_floats_change_every_call_churns_too(symbolic):
    # (MegEngine's usual ``@trace(symbolic=True)`` training step, with the host: each new temperature recorded and
    # compiled the step, 16 executables in 16 calls; now a few, then auto-jit clusters, as xla_trace)
    def make():
        mge.random.seed(0)
        net = _Net()
        return net, optim.SGD(net.parameters(), lr=0.1, momentum=0.9), GradManager().attach(net.parameters())

    host = []

    def body(gm, net, opt, x, w):
        with gm:
            loss = (net(x) ** 2).mean() * w
            gm.backward(loss)
        with exclude_from_trace():
            host.append(w)  # (host code: runs on every call of a trace with the host)
        opt.step().clear_grad()
        return loss

    net, opt, gm = make()
    want = _train(lambda *a: body(gm, *a), net, opt)
    net2, opt2, gm2 = make()
    step = trace(lambda *a: body(gm2, *a), symbolic=symbolic)
    host.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _train(step, net2, opt2)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip(net.parameters(), net2.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)
    assert step._churning and step.num_executables <= 5  # (the 5th recording decides)
    assert host == [1.0 + 0.01 * i for i in range(16)]


class _EMA(M.Module):
    """An EMA of a model's weights whose decay follows a Python step counter the step advances (as diffusion
    models' EMAs do)."""

    def __init__(self, net):
        super().__init__()
        self.shadow = [mge.Tensor(p.numpy()) for p in net.parameters()]
        self.num_updates = 0
        self.decay = 0.0

    def forward(self, net):
        self.num_updates += 1
        self.decay = min(0.999, (1 + self.num_updates) / (10 + self.num_updates))
        for s, p in zip(self.shadow, net.parameters()):
            s._reset(s * self.decay + p.detach() * (1 - self.decay))


def test_a_step_advancing_an_int_counter_churns_instead_of_compiling_every_call():
    # (the counter is a new int every call: each recorded and compiled the step, 20 executables in 20 calls)
    def make():
        mge.random.seed(0)
        net = _Net()
        return (net, optim.SGD(net.parameters(), lr=0.1, momentum=0.9), GradManager().attach(net.parameters()),
                _EMA(net))

    def body(gm, net, opt, ema, x, it):
        with gm:
            loss = (net(x) ** 2).mean() * (1.0 + 0.01 * it)  # (an iteration index argument, too)
            gm.backward(loss)
        opt.step().clear_grad()
        ema(net)
        return loss

    def train(step, net, opt, ema):
        return [step(net, opt, ema, mge.Tensor(np.random.RandomState(i).standard_normal((5, 4)).astype("float32")),
                     i).item() for i in range(20)]

    net, opt, gm, ema = make()
    want = train(lambda *a: body(gm, *a), net, opt, ema)
    net2, opt2, gm2, ema2 = make()
    step = xla_trace(lambda *a: body(gm2, *a))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = train(step, net2, opt2, ema2)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip([*net.parameters(), *ema.shadow], [*net2.parameters(), *ema2.shadow]):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)
    assert (ema2.num_updates, ema2.decay) == (ema.num_updates, ema.decay) == (20, 21 / 30)
    assert step._churning and step.num_executables <= 5  # (the 5th recording decides)
    told = [w for w in caught if "new Python numbers" in str(w.message)]
    assert len(told) == 1 and told[0].filename == __file__


def _annealed(schedule, steps):
    """Losses and parameters of eager training and of an xla_trace step, ``net.tau = schedule(i)`` every step."""
    def make():
        mge.random.seed(0)
        net = _Net()
        return net, optim.SGD(net.parameters(), lr=0.1, momentum=0.9), GradManager().attach(net.parameters())

    def body(gm, net, opt, x):
        with gm:
            loss = (net(x) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    def train(step, net, opt):
        out = []
        for i in range(steps):
            net.tau = schedule(i)
            out.append(step(net, opt, mge.Tensor(np.random.RandomState(i % 7).standard_normal((5, 4))
                                                 .astype("float32"))).item())
        return out

    net, opt, gm = make()
    want = train(lambda *a: body(gm, *a), net, opt)
    net2, opt2, gm2 = make()
    step = xla_trace(lambda *a: body(gm2, *a))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = train(step, net2, opt2)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip(net.parameters(), net2.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)
    return step


def test_a_temperature_that_reaches_its_floor_runs_compiled_again():
    # (annealed for 20 steps, then fixed: the step churned for the rest of training -- 45 of 60 calls eager here,
    # never the compiled step again; and assigning the same float every step sent each call down the slow path)
    step = _annealed(lambda i: max(0.5, 2.5 - 0.1 * i), 100)
    assert not step._churning and step.num_executables <= 6
    assert step.num_fast_calls >= 40  # (the prepared compiled call)


def test_values_in_turn_get_their_executables_after_churning_a_while():
    # (8 values in turn: the first 4 new ones churned the step; a probe then sees a value again and it leaves,
    # compiling the other 4 once, instead of running clusters for good)
    step = _annealed(lambda i: 1.0 + 0.25 * (i % 8), 64)
    assert not step._churning and step.num_executables == 8


def test_numbers_that_change_again_churn_again():
    # (a temperature annealed, fixed, then annealed again: it leaves churning, and churns again -- once 8 new
    # values came, as it left once)
    step = _annealed(lambda i: 1.0 + 0.1 * i if i < 20 or i >= 60 else 3.0, 100)
    assert step._churning and step.num_executables <= 5 + 1 + 8


def test_setting_a_module_number_to_an_equal_value_keeps_the_prepared_call():
    from megxla.core import _registry
    net = _Net()
    before = _registry.epoch()
    net.tau = float("1.0")
    net.fc.in_features = int("4")
    assert _registry.epoch() == before
    net.tau = -0.0 if False else 2.0
    assert _registry.epoch() != before
    before = _registry.epoch()
    net.tau = 2  # (an int is not the float: another signature)
    assert _registry.epoch() != before
