"""The prepared compiled call (jit/_fastpath.py): constant Python work per call, and every change a plan skips
re-walking is still detected (the call takes the full path: never a stale plan)."""
import sys
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
from megxla.autodiff import GradManager
from megxla.jit import xla_trace
from megxla.optimizer import SGD, Adam


class MLP(M.Module):
    def __init__(self, layers, width=4):
        super().__init__()
        self.layers = [M.Linear(width, width) for _ in range(layers)]
        self.scale = 1.0

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
        return x * self.scale


def _x(n=2, width=4, seed=0):
    return mge.Tensor(np.random.RandomState(seed).rand(n, width).astype("float32"))


def _train(layers=2, opt_cls=SGD, **opt_kw):
    mge.random.seed(0)
    model = MLP(layers)
    opt = opt_cls(model.parameters(), lr=0.1, **opt_kw)
    gm = GradManager().attach(model.parameters())

    def step(model, opt, x):
        with gm:
            loss = (model(x) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss
    return model, opt, gm, step


def _weights(model):
    return [t.numpy().copy() for t in model.parameters()]


def _twins(**kw):
    """The same training step compiled (prepared calls) and run eagerly, from the same initial state."""
    a, b = _train(**kw), _train(**kw)
    return a, b, xla_trace(a[3]), b[3]


def _agree(a, b, fast, eager, x):
    np.testing.assert_allclose(fast(a[0], a[1], x).numpy(), eager(b[0], b[1], x).numpy(), rtol=1e-5, atol=1e-6)
    for u, v in zip(_weights(a[0]), _weights(b[0])):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def _count_python_work(fn):
    """Python function calls and builtin calls made while running ``fn()`` (sys.setprofile events)."""
    counts = {"call": 0, "c_call": 0}

    def prof(frame, event, arg):
        if event in counts:
            counts[event] += 1
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return counts["call"] + counts["c_call"]


def test_python_work_per_compiled_call_is_constant_in_the_number_of_parameters():
    work = {}
    for layers in (2, 16):
        model, opt, _, step = _train(layers, Adam)
        f = xla_trace(step)
        x = _x()
        for _ in range(3):
            f(model, opt, x)
        fast = f.num_fast_calls
        work[layers] = _count_python_work(lambda: f(model, opt, x))
        assert f.num_fast_calls == fast + 1  # the prepared call ran
    # 4 vs 32 parameters (+ 8 vs 64 Adam slots): the same Python work, and little of it
    assert work[2] == work[16], work
    assert work[2] <= 60, work


def test_prepared_calls_match_eager_steps_and_numbers_attributes_are_seen():
    a, b, fast, eager = _twins()
    x = _x()
    for _ in range(4):
        _agree(a, b, fast, eager, x)
    assert fast.num_fast_calls >= 2
    a[0].scale = b[0].scale = 0.5  # a number attribute baked into the recording
    _agree(a, b, fast, eager, x)
    a[0].scale = b[0].scale = np.float32(2.0)
    _agree(a, b, fast, eager, x)


def test_module_structure_changes_are_seen():
    a, b, fast, eager = _twins()
    x = _x()
    for _ in range(3):
        _agree(a, b, fast, eager, x)
    # a list of sub-modules mutated in place (bypasses Module.__setattr__)
    for m in (a[0], b[0]):
        m.layers.append(M.Linear(4, 4))
        mge.random.seed(1)
        m.layers[-1].weight.set_value(np.full((4, 4), 0.1, "float32"))
    a[1].add_param_group({"params": list(a[0].layers[-1].parameters())})
    b[1].add_param_group({"params": list(b[0].layers[-1].parameters())})
    a[2].attach(a[0].layers[-1].parameters())
    b[2].attach(b[0].layers[-1].parameters())
    for _ in range(3):
        _agree(a, b, fast, eager, x)
    # an item replaced in place
    for m in (a[0], b[0]):
        m.layers[0] = m.layers[1]
    for _ in range(2):
        _agree(a, b, fast, eager, x)


def test_hyper_parameters_are_re_sent_when_they_change_and_validated():
    a, b, fast, eager = _twins(opt_cls=SGD, momentum=0.9)
    x = _x()
    for _ in range(3):
        _agree(a, b, fast, eager, x)
    for lr in (0.05, 0.2, 0.2):
        a[1].param_groups[0]["lr"] = b[1].param_groups[0]["lr"] = lr
        n = fast.num_fast_calls
        _agree(a, b, fast, eager, x)
        assert fast.num_fast_calls == n + 1  # a schedule does not leave the prepared call
    before = _weights(a[0])
    a[1].param_groups[0]["lr"] = -1.0
    with pytest.raises(ValueError):
        fast(a[0], a[1], x)
    for u, v in zip(before, _weights(a[0])):
        np.testing.assert_array_equal(u, v)  # nothing ran


def test_tensor_arguments_and_rebinding_to_a_new_shape():
    model, opt, _, step = _train()
    f = xla_trace(lambda m, x: m(x).sum())
    x = _x()
    for _ in range(3):
        f(model, x)
    x3 = _x(3, seed=1)
    np.testing.assert_allclose(f(model, x3).numpy(), model(x3).sum().numpy(), rtol=1e-5)
    # a parameter passed as an argument too (aliases module state)
    w = model.layers[0].weight
    g = xla_trace(lambda m, t: (m.layers[0].weight * t).sum())
    for _ in range(3):
        g(model, _x(4, seed=2))
    np.testing.assert_allclose(g(model, w).numpy(), (w * w).sum().numpy(), rtol=1e-5)
    # a module tensor rebound to a new shape: through set_value (bumps the epoch) and behind its back (_reset)
    h = xla_trace(lambda m: m.layers[0].bias * 2)
    for _ in range(3):
        h(model)
    b = model.layers[0].bias
    b.set_value(np.ones(4, "float32"))
    np.testing.assert_allclose(h(model).numpy(), np.full(4, 2.0))
    b._reset(mge.Tensor(np.ones(3, "float32")))  # no epoch bump: the executable's own check misses
    np.testing.assert_allclose(h(model).numpy(), np.full(3, 2.0))


def test_train_eval_scalar_arguments_grads_and_grad_manager_are_seen():
    mge.random.seed(0)
    model = M.Sequential(M.Linear(4, 4), M.Dropout(0.5))
    f = xla_trace(lambda m, x, k: m(x) * k)
    x = _x()
    for _ in range(3):
        f(model, x, 2)
    model.eval()
    np.testing.assert_allclose(f(model, x, 2).numpy(), (model(x) * 2).numpy(), rtol=1e-6)
    np.testing.assert_allclose(f(model, x, 3).numpy(), (model(x) * 3).numpy(), rtol=1e-6)
    # .grad presence: a step that back-propagates accumulates into an existing gradient
    a, b, fast, eager = _twins()
    for _ in range(3):
        _agree(a, b, fast, eager, x)
    for m in (a[0], b[0]):
        p = m.layers[0].weight
        p.grad = mge.Tensor(np.ones(p.shape, "float32"))
    _agree(a, b, fast, eager, x)
    # a GradManager that attached more since the recording
    for m, o, gm, _ in (a, b):
        mge.random.seed(5)
        m.extra = M.Linear(4, 4)
        gm.attach(m.extra.parameters())
    _agree(a, b, fast, eager, x)


def test_warns_once_after_many_signatures():
    f = xla_trace(lambda x: x * 2)
    f.warn_signatures = 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 6):
            f(mge.Tensor(np.ones(n, "float32")))
    hits = [w for w in caught if "distinct" in str(w.message)]
    assert len(hits) == 1 and "3 distinct input signatures" in str(hits[0].message)
    assert hits[0].filename == __file__


def test_values_of_prepared_calls_are_external():
    model, opt, _, step = _train()
    f = xla_trace(step)
    x = _x()
    for _ in range(4):
        loss = f(model, opt, x)
    assert f.num_fast_calls >= 1
    w = model.layers[0].weight
    assert loss._is_external_value() and w._is_external_value()
    assert not x._is_external_value() and not (w + 1)._is_external_value()
    w._reset(mge.Tensor(np.zeros(w.shape, "float32")))  # rebound eagerly: internal again
    assert not w._is_external_value()


def test_numpy_arguments_take_the_prepared_call_and_are_read_every_call():
    a, b, fast, eager = _twins()
    buf = np.random.RandomState(0).rand(2, 4).astype("float32")
    for i in range(5):
        buf[:] = i * 0.1  # refilled in place: read at every call, never keyed by id
        np.testing.assert_allclose(fast(a[0], a[1], buf).numpy(), eager(b[0], b[1], mge.Tensor(buf)).numpy(),
                                   rtol=1e-5, atol=1e-6)
    assert fast.num_fast_calls >= 2
    n = fast.num_fast_calls
    x64 = np.ones((2, 4), "float64")  # another dtype: the full path (narrowed to float32 there, as MegEngine)
    np.testing.assert_allclose(fast(a[0], a[1], x64).numpy(), eager(b[0], b[1], mge.Tensor(x64)).numpy(),
                               rtol=1e-5, atol=1e-6)
    assert fast.num_fast_calls == n
    wide = np.ones((3, 4), "float32")
    np.testing.assert_allclose(fast(a[0], a[1], wide).numpy(), eager(b[0], b[1], mge.Tensor(wide)).numpy(),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("without_host", [True, False], ids=["xla_trace", "trace"])
def test_returned_state_is_the_state_tensor_on_every_call(without_host):
    # Eagerly a step that returns the parameter it updated returns that Parameter; compiled calls (prepared or
    # not) do the same, so a result kept by the caller follows later training, and nothing blocks donation.
    import megxla.module as M
    import megxla.optimizer as optim
    from megxla.autodiff import GradManager
    from megxla.jit import trace, xla_trace
    net = M.Linear(3, 3)
    opt = optim.SGD(net.parameters(), lr=0.1)
    gm = GradManager().attach(net.parameters())
    x = mge.Tensor(np.ones((2, 3), "float32"))

    def step(x, net, opt):
        with gm:
            gm.backward((net(x) ** 2).mean())
        opt.step().clear_grad()
        return net.weight

    f = xla_trace(step) if without_host else trace(step, symbolic=True)
    held = [f(x, net, opt) for _ in range(6)]
    assert all(h is net.weight for h in held)
    if without_host:
        assert f.num_fast_calls >= 4 and f.num_undonated == 0
