"""An ``xla_trace`` step whose Python floats change every call -- a module's temperature annealed per step, a float
argument -- runs as auto-jit clusters after a few calls (the floats are their inputs), instead of recording and
compiling the whole step for each value (megxla/jit/tracing.py: ``_floats_churn``)."""
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
    told = [w for w in caught if "new Python float" in str(w.message)]
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
    assert step.num_executables <= 4
    assert step.num_clustered_calls + step.num_eager_calls >= len(_XS) - 4


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
    assert step._churning and step.num_executables <= 4


def test_a_float_changed_now_and_then_keeps_one_compiled_step_per_value():
    # (a rate set per epoch: each value records and compiles once, then runs compiled)
    step = _check(lambda net, i: 1.0 + 0.5 * (i // 6), churns=False)
    assert step.num_executables == 3 and step.num_clustered_calls == 0 and step.num_eager_calls == 0


def test_an_int_changed_every_call_is_no_float_churn():
    # (an integer attribute may decide the program's structure -- a number of repeats: it keys the signature,
    # each value recorded, compiled and kept as before)
    def change(net, i):
        net.repeats = 1 + i % 4
        return 1.0
    step = _check(change, churns=False)
    assert step.num_executables == 4
