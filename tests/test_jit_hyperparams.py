"""Optimizer hyper-parameters and compiled steps: a step that reads ``group["lr"]`` itself, one that sets it inside
the body, and hyper-parameters held as Tensors (as MegEngine allows) give, call after call, the eager results."""
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import trace, xla_trace

MODES = {
    "eager": lambda f: f,
    "trace": trace,
    "trace_symbolic": lambda f: trace(f, symbolic=True),
    "trace_without_host": lambda f: trace(f, symbolic=True, without_host=True),
    "xla_trace": xla_trace,
}


def _scheduled_step_run(mode):
    # The body logs the learning rate and scales a decoupled weight decay by it; a scheduler changes it between
    # calls. A compiled step must not keep the value it was recorded with.
    w = mge.Parameter(np.ones((1,), "float32"))
    opt = optim.SGD([w], lr=1.0)
    sched = optim.MultiStepLR(opt, milestones=[1, 2], gamma=0.1)
    gm = GradManager().attach([w])

    @MODES[mode]
    def step(w, opt):
        lr = opt.param_groups[0]["lr"]
        with gm:
            gm.backward((w * 0.5).sum())
        opt.step().clear_grad()
        w._reset(w - lr * 0.5 * w)
        return mge.Tensor(lr)

    out = []
    for _ in range(5):
        lr = step(w, opt)
        out.append((float(lr), float(w)))
        sched.step()
    return out


@pytest.mark.parametrize("mode", [m for m in MODES if m != "eager"])
def test_body_reading_the_learning_rate_follows_the_scheduler(mode):
    np.testing.assert_allclose(_scheduled_step_run(mode), _scheduled_step_run("eager"), rtol=1e-6)


def _warmup_inside_run(mode):
    # The body itself sets the learning rate before opt.step() (a warm-up written in the step): a step that runs
    # the body on every call (trace with the host) must use this call's value, not the one of the call before.
    w = mge.Parameter(np.ones((1,), "float32"))
    opt = optim.SGD([w], lr=1.0, momentum=0.5)
    gm = GradManager().attach([w])
    calls = [0]

    @MODES[mode]
    def step(w, opt):
        calls[0] += 1
        opt.param_groups[0]["lr"] = 0.1 * calls[0]
        with gm:
            gm.backward((w * 1.0).sum())
        opt.step().clear_grad()

    out = []
    for _ in range(4):
        step(w, opt)
        out.append(float(w))
    return out


@pytest.mark.parametrize("mode", ["trace", "trace_symbolic"])
def test_learning_rate_set_inside_a_step_with_the_host(mode):
    np.testing.assert_allclose(_warmup_inside_run(mode), _warmup_inside_run("eager"), rtol=1e-6, atol=1e-7)


def _tensor_hyper_run(mode, make_opt):
    mge.random.seed(3)
    net = M.Linear(3, 2)
    opt = make_opt(net.parameters())
    gm = GradManager().attach(net.parameters())
    x = mge.Tensor(np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3))

    @MODES[mode]
    def step(x, net, opt):
        with gm:
            loss = (net(x) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    out = []
    for i in range(5):
        if i == 2:  # the Tensor changes in place: the next compiled call reads the new value
            opt.param_groups[0]["lr"]._reset(mge.Tensor(0.02))
        if i == 4:  # and is replaced by another Tensor
            opt.param_groups[0]["lr"] = mge.Tensor(0.3)
        loss = step(x, net, opt)
        out.append([float(loss)] + [p.numpy().ravel() for p in net.parameters()])
    return out


@pytest.mark.parametrize("mode", [m for m in MODES if m != "eager"])
@pytest.mark.parametrize("make_opt", [
    lambda ps: optim.SGD(ps, lr=mge.Tensor(0.1), momentum=mge.Tensor(0.9)),
    lambda ps: optim.Adam(ps, lr=mge.Tensor(0.1), betas=(mge.Tensor(0.8), 0.99)),
], ids=["sgd", "adam"])
def test_tensor_hyperparameters(mode, make_opt):
    got, want = _tensor_hyper_run(mode, make_opt), _tensor_hyper_run("eager", make_opt)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g[0], w[0], rtol=1e-5)
        for a, b in zip(g[1:], w[1:]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_learning_rate_set_inside_xla_trace_warns():
    with pytest.warns(UserWarning, match="does not run its body again") as got:
        _warmup_inside_run("xla_trace")
    [w] = [w for w in got if "does not run its body again" in str(w.message)]
    assert w.filename == __file__ and 'opt.param_groups[0]["lr"] = 0.1 * calls[0]' in open(__file__).readlines()[
        w.lineno - 1]  # (at the assignment)


def _lr_from_argument_run(mode):
    # The learning rate computed in the step from a Python number argument new every call (the iteration): each
    # call records again until the numbers churn, and then runs the body as auto-jit clusters -- the assignment
    # happens on every call, as eagerly.
    w = mge.Parameter(np.ones((1,), "float32"))
    opt = optim.SGD([w], lr=1.0, momentum=0.5)
    gm = GradManager().attach([w])

    def step(i, w, opt):
        opt.param_groups[0]["lr"] = 0.1 / (i + 1)
        with gm:
            gm.backward((w * w).sum())
        opt.step().clear_grad()

    step = step if mode == "eager" else MODES[mode](step)
    out = []
    for i in range(10):
        step(i, w, opt)
        out.append((float(w), opt.param_groups[0]["lr"]))
    return out


def test_learning_rate_set_inside_a_churning_xla_trace_step_is_set_every_call_and_not_warned():
    # (the warning said "the assignment happens once" at the first recording, though every call assigned)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        traced = _lr_from_argument_run("xla_trace")
    assert not [w for w in got if "param_groups" in str(w.message)], [str(w.message) for w in got]
    np.testing.assert_allclose(traced, _lr_from_argument_run("eager"), rtol=1e-6)
