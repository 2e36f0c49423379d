"""Adversarial programs against the compiled paths (``trace``, ``xla_trace``, ``partial_trace``), round 3: each
test is a program whose compiled step was once silently wrong, lost state or refused a MegEngine program, found
by differential runs against eager megxla (and MegEngine 1.13's ``trace``)."""
import numpy as np
import pytest

import megxla as mge
import megxla.module as M
import megxla.optimizer as optim
import megxla.random as R
from megxla.autodiff import GradManager
from megxla.jit import exclude_from_trace, partial_trace, trace, xla_trace, TraceError

_MODES = {
    "xla_trace": xla_trace,
    "trace": trace,
    "trace_symbolic": lambda f: trace(f, symbolic=True),
    "trace_without_host": lambda f: trace(f, symbolic=True, without_host=True),
}


def _eager_and(mode, program):
    """``program(decorate)`` run eagerly and under ``mode``, from the same seed."""
    mge.random.seed(0)
    want = program(lambda f: f)
    mge.random.seed(0)
    return want, program(_MODES[mode])


class _Noisy(M.Module):
    def __init__(self):
        super().__init__()
        self.rng = R.RNG(seed=11)  # a generator of its own, as MegEngine modules hold one
        self.lin = M.Linear(3, 2)

    def forward(self, x):
        return self.lin(x) + self.rng.normal(size=(2,))


@pytest.mark.parametrize("mode", list(_MODES))
def test_an_rng_with_a_seed_passed_or_held_by_a_module_is_state(mode):
    # Its key was not state of the step: xla_trace / without_host raised "not reachable from its arguments"
    # for an RNG passed as an argument or held by a module argument (the message told to pass it, which it was).
    def program(deco):
        net, rng = _Noisy(), R.RNG(seed=3)
        f = deco(lambda net, rng, x: net(x) + rng.uniform(size=(2,)))
        x = mge.Tensor(np.ones((1, 3), "float32"))
        return [f(net, rng, x).numpy() for _ in range(4)], net.rng._state.numpy(), rng._state.numpy()

    (want, wk1, wk2), (got, gk1, gk2) = _eager_and(mode, program)
    np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-6)
    assert len({g.tobytes() for g in got}) == 4  # a new draw on every call
    np.testing.assert_array_equal(gk1, wk1)  # the generators advanced as eagerly
    np.testing.assert_array_equal(gk2, wk2)


@pytest.mark.parametrize("mode", ["xla_trace", "trace_without_host"])
def test_a_value_made_in_exclude_from_trace_without_the_host_is_refused(mode):
    # A compiled call without the host never runs the block: its value was baked in, so a counter bumped there
    # stayed 1 and the step returned the first call's numbers for ever. MegEngine's trace(without_host=True)
    # raises ("unknown input tensors"); capture_as_const=True asks for the baked value.
    seen = []

    def step(x, c):
        y = x * 2
        with exclude_from_trace():
            seen.append(float(y.sum()))  # host code that only reads: fine
            c += 1
        return y.sum() + c

    f = _MODES[mode](step)
    c, x = mge.Tensor(np.zeros((), "float32")), mge.Tensor(np.ones(2, "float32"))
    with pytest.raises(TraceError) as info:
        f(x, c)
    assert "exclude_from_trace" in str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert float(c) == 0.0  # nothing written

    def logs(x):
        y = x * 2
        with exclude_from_trace():
            seen.append(float(y.sum()))
        return y + 1

    g = _MODES[mode](logs)
    assert [float(g(x)[0]) for _ in range(3)] == [3.0] * 3


def test_partial_trace_backward_uses_the_callbacks_of_the_manager_of_this_call():
    # The callbacks recorded with the first GradManager were compiled into the backward, and applied for ever:
    # a later backward through a manager without callbacks (or with others) got gradients * 2.
    net = M.Linear(3, 2)
    fwd = partial_trace(lambda net, x: net(x), backend="xla")
    x = mge.Tensor(np.ones((4, 3), "float32"))

    def grads(gm):
        with gm:
            gm.backward(fwd(net, x).sum())
        out = np.concatenate([net.weight.grad.numpy().ravel(), net.bias.grad.numpy()])
        for p in net.parameters():
            p.grad = None
        return out

    plain = np.array([4.0] * 6 + [4.0, 4.0], "float32")  # d sum(x @ w.T + b): 4 rows of ones
    gm1 = GradManager().attach(net.parameters(), callbacks=[lambda p, g: g * 2])
    for _ in range(3):  # records (and runs the callbacks), compiles them in, runs them compiled
        got = grads(gm1)
        np.testing.assert_allclose(got, 2 * plain)
    gm2 = GradManager().attach(net.parameters())
    for _ in range(2):
        np.testing.assert_allclose(grads(gm2), plain)
    gm3 = GradManager().attach(net.parameters(), callbacks=[lambda p, g: g * 10])
    np.testing.assert_allclose(grads(gm3), 10 * plain)
    np.testing.assert_allclose(grads(gm1), 2 * plain)
    assert fwd.num_compiled == 1


@pytest.mark.parametrize("mode", list(_MODES))
def test_traced_functions_built_at_the_same_global_state_start_one_stream_as_megengine(mode):
    # MegEngine's contract (its upstream test_xla_trace_random_seed_update builds a step twice after one seed()
    # and expects equal draws): a traced function's key derives from the global key without advancing it, so
    # two built at the same global state start from the same key; an eager draw between the builds (or a
    # seed()) gives the second a stream of its own. The same seed and order give the same streams.
    x = mge.Tensor(np.ones((16,), "float32"))

    def streams(draw_between):
        mge.random.seed(5)
        f = _MODES[mode](lambda x: x + R.normal(size=(16,)))
        if draw_between:
            R.uniform(size=(1,))
        g = _MODES[mode](lambda x: x + R.normal(size=(16,)))
        return [f(x).numpy() for _ in range(2)], [g(x).numpy() for _ in range(2)]

    f1, g1 = streams(False)
    np.testing.assert_array_equal(np.stack(f1), np.stack(g1))
    assert not np.array_equal(f1[0], f1[1])  # the stream advances call by call
    f2, g2 = streams(True)
    np.testing.assert_array_equal(np.stack(f1), np.stack(f2))
    assert not np.array_equal(f2[0], g2[0])


@pytest.mark.parametrize("mode", list(_MODES) + ["partial_trace"])
def test_a_returned_dict_keeps_the_bodys_key_order(mode):
    # JAX's tree flattening sorts dict keys: compiled calls returned {"loss", "acc"} as {"acc", "loss"}, so
    # ``loss, acc = step(x).values()`` silently swapped the two (the eager recording call kept the order)
    deco = (lambda f: partial_trace(f, backend="xla")) if mode == "partial_trace" else _MODES[mode]
    f = deco(lambda x: {"loss": x.sum(), "acc": x.mean(), "all": [x, {"z": x * 2, "b": x * 3}]})
    x = mge.Tensor(np.ones(4, "float32"))
    for _ in range(3):
        out = f(x)
        assert list(out) == ["loss", "acc", "all"] and list(out["all"][1]) == ["z", "b"]
        loss, acc, _ = out.values()
        assert (float(loss), float(acc), float(out["all"][1]["b"][0])) == (4.0, 1.0, 3.0)


class _Cache(M.Module):
    def __init__(self):
        super().__init__()
        self.lin = M.Linear(3, 3)
        self.buf = mge.Tensor(np.zeros((2, 3), "float32"))

    def forward(self, x, clear):
        y = self.lin(x) + (0 if self.buf is None else self.buf)
        if clear == "none":
            self.buf = None
        elif clear == "del":
            del self.buf
            self.buf = None
        else:
            self.buf = y.detach()
        return y.sum()


@pytest.mark.parametrize("mode", list(_MODES))
def test_a_step_that_drops_module_state_drops_it_on_every_call(mode):
    # The body sets a Tensor attribute to None (or deletes it): an abstract recording was cached and its compiled
    # calls, which run no Python, left the module holding the tensor on every later call of that signature.
    def program(deco):
        net = _Cache()
        f = deco(lambda net, x, clear: net(x, clear))
        out = []
        for i, clear in enumerate(["keep", "none", "keep", "none", "keep", "del", "keep", "del"]):
            out.append(float(f(net, mge.Tensor(np.full((2, 3), i, "float32")), clear)))
            out.append(None if net.buf is None else net.buf.numpy().tolist())
        return out

    want, got = _eager_and(mode, program)
    assert [None if v is None else np.round(v, 4).tolist() for v in got] == \
        [None if v is None else np.round(v, 4).tolist() for v in want]


class _PingPong(M.Module):
    def __init__(self):
        super().__init__()
        self.front = mge.Tensor(np.zeros(3, "float32"))
        self.back = mge.Tensor(np.ones(3, "float32"))

    def forward(self, x):
        self.back[...] = self.front + x
        self.front, self.back = self.back, self.front  # double buffering: swap the two state tensors
        return self.front.sum()


def test_a_step_that_swaps_two_state_tensors_swaps_them_on_every_call():
    # the same state, bound the other way round: an abstract recording was cached and its compiled calls never
    # swapped the attributes (the step then wrote into the wrong buffer)
    def program(deco):
        net = _PingPong()
        f = deco(lambda net, x: net(x))
        return [(float(f(net, mge.Tensor(np.full(3, i, "float32")))), net.front.numpy().tolist(),
                 net.back.numpy().tolist()) for i in range(5)]

    want, got = _eager_and("xla_trace", program)
    assert got == want


_DROP = M.Dropout(0.5)  # a module from the enclosing scope that holds no tensor


@pytest.mark.parametrize("mode", list(_MODES))
def test_modes_and_numbers_of_modules_from_the_enclosing_scope_key_the_step(mode):
    # drop.eval() / act.negative_slope = ... between calls changed nothing the signature saw (the modules hold
    # no tensors and are no arguments): compiled calls kept dropping in eval mode, with the old slope.
    act = M.LeakyReLU(0.1)

    def step(lin, x):
        return _DROP(act(lin(x)))

    def program(deco):
        lin = M.Linear(4, 8)
        f = deco(step)
        x = mge.Tensor(np.linspace(-1, 1, 32, dtype="float32").reshape(8, 4))
        out = []
        for i in range(6):
            _DROP.train() if i % 2 == 0 else _DROP.eval()
            act.negative_slope = 0.1 if i < 3 else 0.5
            y = f(lin, x).numpy()
            out.append(y if i % 2 else (y == 0).mean() > 0.2)
        _DROP.train()
        return out

    want, got = _eager_and(mode, program)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("mode", list(_MODES))
def test_modes_of_modules_bound_by_functools_partial_key_the_step(mode):
    # trace(functools.partial(step, drop)): the bound Dropout's eval() between calls went unseen, as a closure's
    import functools

    def program(deco):
        drop = M.Dropout(0.5)
        f = deco(functools.partial(lambda d, x: d(x * 2), drop))
        x = mge.Tensor(np.ones((8, 8), "float32"))
        out = []
        for i in range(4):
            drop.train() if i % 2 == 0 else drop.eval()
            y = f(x).numpy()
            out.append(y if i % 2 else (y == 0).mean() > 0.2)
        return out

    want, got = _eager_and(mode, program)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w)


_GM = None  # the GradManager the step below names from its globals


def _global_gm_step(net, opt, x):
    with _GM:
        loss = (net(x) ** 2).mean()
        _GM.backward(loss)
    opt.step().clear_grad()
    return loss


@pytest.mark.parametrize("mode", ["xla_trace", "trace_without_host"])
def test_a_grad_manager_rebound_in_the_enclosing_scope_records_again(mode):
    # Fine-tuning's second phase rebinds the global ``gm`` to a manager of the head's parameters only: compiled
    # calls kept back-propagating to (and training) every parameter of the first manager.
    global _GM

    def program(deco):
        global _GM
        net = M.Linear(4, 2)
        opt = optim.SGD(net.parameters(), lr=0.1)
        full, head = GradManager().attach(net.parameters()), GradManager().attach([net.bias])
        f = deco(_global_gm_step)
        out = []
        for i in range(6):
            _GM = full if i < 3 or i == 5 else head
            f(net, opt, mge.Tensor(np.full((5, 4), 0.1 * (i + 1), "float32")))
            out.append(np.concatenate([net.weight.numpy().ravel(), net.bias.numpy()]))
        return out

    try:
        want, got = _eager_and(mode, program)
    finally:
        _GM = None
    np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-5, atol=1e-6)


_OPT = None  # the optimizer the step below names from its globals


def _global_opt_step(net, gm, x):
    with gm:
        gm.backward((net(x) ** 2).mean())
    _OPT.step().clear_grad()


@pytest.mark.parametrize("mode", ["xla_trace", "trace_without_host"])
def test_an_optimizer_rebound_in_the_enclosing_scope_records_again(mode):
    # an SGD without momentum holds no tensor, so nothing refused it from the enclosing scope; rebinding the
    # global to a new one (another learning rate) went on reading the old one's
    def program(deco):
        global _OPT
        net = M.Linear(4, 2)
        gm = GradManager().attach(net.parameters())
        f = deco(_global_opt_step)
        out = []
        for i in range(5):
            if i in (0, 3):
                _OPT = optim.SGD(net.parameters(), lr=0.1 if i == 0 else 0.001)
            f(net, gm, mge.Tensor(np.full((5, 4), 0.1 * (i + 1), "float32")))
            out.append(np.concatenate([net.weight.numpy().ravel(), net.bias.numpy()]))
        return out

    global _OPT
    try:
        want, got = _eager_and(mode, program)
    finally:
        _OPT = None
    np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-5, atol=1e-6)


class _PhasedSGD(optim.Optimizer):
    """A MegEngine-style custom optimizer whose Python attributes drive its update: a warmup step counter and a
    phase flag that alternates (its step's Python effects must happen on every compiled call)."""

    def __init__(self, params, lr):
        super().__init__(params, dict(lr=lr))
        self.n, self.phase = 0, 0

    def _create_state(self, param_group):
        pass

    def _updates(self, param_group):
        self.n += 1
        self.phase = 1 - self.phase
        k = min(1.0, self.n / 3) * (1.0 if self.phase else 0.5)
        for p in param_group["params"]:
            if p.grad is not None:
                p._reset(p - param_group["lr"] * k * p.grad)


@pytest.mark.parametrize("mode", ["xla_trace", "trace_without_host", "trace"])
def test_python_numbers_of_an_optimizer_key_the_step_and_are_advanced_by_every_call(mode):
    # the counter and phase were baked in at recording and never advanced by compiled calls
    def program(deco):
        net = M.Linear(4, 2)
        gm, opt = GradManager().attach(net.parameters()), _PhasedSGD(net.parameters(), 0.1)

        def step(net, gm, opt, x):
            with gm:
                gm.backward((net(x) ** 2).mean())
            opt.step().clear_grad()

        f = deco(step)
        out = []
        for i in range(7):
            if i == 5:
                opt.n = 0  # set between calls: the next step warms up again
            f(net, gm, opt, mge.Tensor(np.full((5, 4), 0.1 * (i + 1), "float32")))
            out.append(np.concatenate([net.weight.numpy().ravel(), net.bias.numpy(), [opt.n, opt.phase]]))
        return out

    want, got = _eager_and(mode, program)
    np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-5, atol=1e-6)


class _Phase(M.Module):
    def __init__(self):
        super().__init__()
        self.phase = 0

    def forward(self, x):
        self.phase = 1 - self.phase  # alternates: the step of one phase value recurs every other call
        return x * (2.0 if self.phase else 3.0)


_PHASE = _Phase()


@pytest.mark.parametrize("mode", ["xla_trace", "trace_without_host"])
def test_number_writes_to_a_module_from_the_enclosing_scope_happen_on_every_call(mode):
    # the recording of phase 0 was reused by compiled calls that never flipped the phase: it stayed 1
    def program(deco):
        _PHASE.phase = 0
        f = deco(lambda x: _PHASE(x))
        return [(float(f(mge.Tensor([1.0]))), _PHASE.phase) for _ in range(6)]

    want, got = _eager_and(mode, program)
    assert got == want


class _Trainer(M.Module):
    """A module holding its model, optimizer, GradManager and GradScaler: one argument for the whole step."""

    def __init__(self):
        super().__init__()
        from megxla.amp import GradScaler
        self.net = M.Sequential(M.Linear(4, 4), M.BatchNorm1d(4), M.Linear(4, 2))
        self.opt = optim.Adam(self.net.parameters(), lr=0.01)
        self.gm = GradManager().attach(self.net.parameters())
        self.scaler = GradScaler(init_scale=4.0, growth_interval=2)

    def forward(self, x):
        with self.gm:
            self.scaler.backward(self.gm, ((self.net(x) - 1) ** 2).mean())
        self.opt.step().clear_grad()


def test_optimizer_and_grad_scaler_held_by_a_module_argument_are_state():
    # their slots / scale were not walked as state of a module argument: xla_trace raised "not reachable"
    def program(deco):
        t = _Trainer()
        f = deco(lambda t, x: t(x))
        out = []
        for i in range(4):
            f(t, mge.Tensor(np.random.RandomState(i).randn(6, 4).astype("float32")))
            out.append(np.concatenate([t.net[2].weight.numpy().ravel(), [float(t.scaler.scale_factor)]]))
        return out

    want, got = _eager_and("xla_trace", program)
    np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-4, atol=1e-5)
