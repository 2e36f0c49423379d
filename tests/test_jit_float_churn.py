"""An ``xla_trace`` step whose Python numbers change every call -- a module's temperature annealed per step, an
iteration counter, a float argument -- runs as auto-jit clusters after a few calls (the numbers are their inputs),
instead of recording and compiling the whole step for each value (megxla/jit/tracing.py: ``_numbers_churn``)."""
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import xla_trace


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.fc = M.Linear(4, 3)
        self.tau = 1.0  # (a softmax temperature, annealed by the training loop)
        self.repeats = 1

    def forward(self, x):
        y = self.fc(x)
        for _ in range(self.repeats):
            y = y * 0.9
        return F.softmax(y / self.tau, axis=1)


def _make():
    mge.random.seed(0)
    net = _Net()
    return net, optim.SGD(net.parameters(), lr=0.1, momentum=0.9), GradManager().attach(net.parameters())


def _body(net, opt, gm, x, weight=1.0):
    with gm:
        loss = (net(x) ** 2).mean() * weight
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


_XS = [np.random.RandomState(k).standard_normal((5, 4)).astype("float32") for k in range(16)]


def _train(step, net, opt, change):
    out = []
    for i, x in enumerate(_XS):
        out.append(step(net, opt, mge.Tensor(x), change(net, i)).item())
    return out


def _check(change, churns):
    net, opt, gm = _make()
    want = _train(lambda n, o, x, w: _body(n, o, gm, x, w), net, opt, change)
    net2, opt2, gm2 = _make()
    step = xla_trace(lambda n, o, x, w: _body(n, o, gm2, x, w))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _train(step, net2, opt2, change)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip(net.parameters(), net2.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)
    told = [w for w in caught if "new Python numbers" in str(w.message)]
    assert step._churning == churns and len(told) == int(churns), [str(w.message) for w in caught]
    if churns:
        assert told[0].filename == __file__  # (named at the user's call)
    return step


def _anneal_tau(net, i):
    net.tau = 1.0 + 0.1 * i
    return 1.0


def _float_argument(net, i):
    return 1.0 + 0.01 * i


@pytest.mark.parametrize("change", [_anneal_tau, _float_argument])
def test_a_float_changed_every_call_runs_as_clusters_after_a_few_calls(change):
    step = _check(change, churns=True)
    # (the first calls recorded and compiled the step, one per value; then the body ran, as clusters or eagerly)
    assert step.num_executables <= 5  # (the 5th recording decides)
    assert step.num_clustered_calls + step.num_eager_calls >= len(_XS) - 5


def test_a_float_of_a_module_the_step_closes_over_churns_too():
    net, opt, gm = _make()
    scale = M.Identity()  # (a module holding the loss weight, named from the step's closure)
    scale.value = 1.0
    want = []
    for i, x in enumerate(_XS):
        scale.value = 1.0 + 0.05 * i
        want.append(_body(net, opt, gm, mge.Tensor(x), scale.value).item())
    net2, opt2, gm2 = _make()
    scale.value = 1.0

    @xla_trace
    def step(net, opt, x):
        return _body(net, opt, gm2, x, scale.value)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = []
        for i, x in enumerate(_XS):
            scale.value = 1.0 + 0.05 * i
            got.append(step(net2, opt2, mge.Tensor(x)).item())
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert step._churning and step.num_executables <= 5


def test_a_float_changed_now_and_then_keeps_one_compiled_step_per_value():
    # (a rate set per epoch: each value records and compiles once, then runs compiled)
    step = _check(lambda net, i: 1.0 + 0.5 * (i // 6), churns=False)
    assert step.num_executables == 3 and step.num_clustered_calls == 0 and step.num_eager_calls == 0


def test_an_int_that_decides_what_is_recorded_keeps_a_compiled_step_per_value():
    # (a number of repeats cycling through 6 values: new on each of the first 6 calls, as a counter's are, but each
    # value records other ops -- recorded and compiled once per value, then run compiled)
    def change(net, i):
        net.repeats = 1 + i % 6
        return 1.0
    step = _check(change, churns=False)
    assert step.num_executables == 6


def test_a_size_argument_of_a_multi_scale_step_keeps_a_compiled_step_per_size():
    # (the image size a step resizes its batch to, an int argument drawn from 6 sizes: each records other shapes)
    def body(net, opt, gm, x, size):
        with gm:
            x = F.vision.interpolate(x.reshape(1, 1, 5, 4), size=(size, size)).reshape(-1, 4)
            loss = (net(x) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    sizes = [4, 8, 12, 16, 20, 24] * 2
    net, opt, gm = _make()
    want = [body(net, opt, gm, mge.Tensor(_XS[0]), s).item() for s in sizes]
    net2, opt2, gm2 = _make()
    step = xla_trace(lambda n, o, x, s: body(n, o, gm2, x, s))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [step(net2, opt2, mge.Tensor(_XS[0]), s).item() for s in sizes]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert not step._churning and step.num_executables == 6


def test_an_iteration_counter_a_module_advances_does_not_compile_every_call():
    # (``self.iters += 1`` in forward, a warmup factor from it: every call a new signature, each recorded and
    # compiled -- 30 executables in 30 calls -- until the step runs as clusters)
    class Warm(_Net):
        def __init__(self):
            super().__init__()
            self.iters = 0

        def forward(self, x):
            self.iters += 1
            return super().forward(x) * min(1.0, self.iters / 10)

    def run(step, net, opt):
        return [step(net, opt, mge.Tensor(x)).item() for x in _XS]

    mge.random.seed(0)
    net = Warm()
    gm = GradManager().attach(net.parameters())
    want = run(lambda n, o, x: _body(n, o, gm, x), net, optim.SGD(net.parameters(), lr=0.1))
    mge.random.seed(0)
    net2 = Warm()
    gm2 = GradManager().attach(net2.parameters())
    step = xla_trace(lambda n, o, x: _body(n, o, gm2, x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run(step, net2, optim.SGD(net2.parameters(), lr=0.1))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert net2.iters == net.iters == len(_XS)  # (the body ran, or its recording replayed the attribute's update)
    assert step._churning and step.num_executables <= 5
