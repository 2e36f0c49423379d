"""A traced call either completes and writes all its state, or raises and leaves every parameter, buffer,
optimizer slot, ``.grad`` and RNG key exactly as before (issue 9, item 2); donation never deletes a buffer that
something else still holds."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import trace, xla_trace, TraceError
from megxla.jit import tracing


def _setup(seed=0):
    mge.random.seed(seed)
    model = M.Sequential(M.Linear(3, 4), M.BatchNorm1d(4), M.Dropout(0.25), M.Linear(4, 1))
    opt = optim.Adam(model.parameters(), lr=0.05)
    gm = GradManager().attach(model.parameters())
    return model, opt, gm


def _snapshot(model, opt, traced):
    """NumPy copies of every parameter, buffer, grad, optimizer slot and the step's RNG key."""
    snap = {}
    for name, t in model.named_tensors():
        snap[name] = np.array(t.numpy(), copy=True)
        if t.grad is not None:
            snap[name + ".grad"] = np.array(t.grad.numpy(), copy=True)
    for i, (p, st) in enumerate(opt._state.items()):
        for k, v in st.items():
            snap[f"slot{i}.{k}"] = np.array(v.numpy() if hasattr(v, "numpy") else v, copy=True)
    snap["rng"] = np.array(traced.random_seed.numpy(), copy=True)
    return snap


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype != object, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


X = mge.Tensor(np.random.RandomState(1).rand(8, 3).astype("float32"))


def _make_step(gm, fail):
    def step(model, opt, x):
        with gm:
            loss = (model(x) ** 2).mean()
            gm.backward(loss)
        opt.step()
        if fail[0] == "raise":
            raise RuntimeError("boom in the body")
        opt.clear_grad()
        if fail[0] == "other ops":  # a different op sequence than recorded: TraceError from trace with host
            loss = loss * 2
        return loss
    return step


@pytest.mark.parametrize("deco", [trace, trace(symbolic=True)], ids=["trace", "trace_symbolic"])
@pytest.mark.parametrize("failure", ["raise", "other ops"])
def test_failed_compiled_call_with_host_leaves_state_identical(deco, failure):
    model, opt, gm = _setup()
    # the twin is made before any call (a later megxla.random.seed would restart the traced steps' streams)
    twin, topt, tgm = _setup()
    fail = [None]
    step = deco(_make_step(gm, fail))
    tstep = deco(_make_step(tgm, [None]))
    tstep.random_seed = step.random_seed  # (each traced function has a stream of its own: the twin replays it)
    for _ in range(4):
        step(model, opt, X)
    before = _snapshot(model, opt, step)
    fail[0] = failure
    with pytest.raises(RuntimeError if failure == "raise" else TraceError):
        step(model, opt, X)
    _assert_same(_snapshot(model, opt, step), before)
    # and the next call works and continues exactly as if the failed call never happened
    for _ in range(5):
        ref = tstep(twin, topt, X)
    fail[0] = None
    got = step(model, opt, X)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6)
    _assert_same(_snapshot(model, opt, step), _snapshot(twin, topt, tstep))


def test_failed_recording_call_leaves_state_identical():
    model, opt, gm = _setup()
    fail = ["raise"]
    step = xla_trace(_make_step(gm, fail))
    before = _snapshot(model, opt, step)
    with pytest.raises(RuntimeError, match="boom"):
        step(model, opt, X)
    _assert_same(_snapshot(model, opt, step), before)


def _compiled(seed=0, n=1):
    """``n`` identical (model, optimizer, compiled step) triples after 3 calls each (all made before any call: a
    later megxla.random.seed would restart the traced steps' random streams)."""
    made = []
    for _ in range(n):
        model, opt, gm = _setup(seed)
        made.append((model, opt, gm))
    made = [(model, opt, xla_trace(_make_step(gm, [None]))) for model, opt, gm in made]
    for _, _, step in made[1:]:
        step.random_seed = made[0][2].random_seed  # (each traced function has a stream of its own)
    for model, opt, step in made:
        for _ in range(3):
            step(model, opt, X)
    return made[0] if n == 1 else made


def test_keyboard_interrupt_before_the_executable_returns_leaves_state_identical(monkeypatch):
    model, opt, step = _compiled()
    seg = step._last.segments[0]
    before = _snapshot(model, opt, step)

    def interrupted(*arrays):
        raise KeyboardInterrupt

    monkeypatch.setattr(seg, "executable", interrupted)
    with pytest.raises(KeyboardInterrupt):
        step(model, opt, X)
    _assert_same(_snapshot(model, opt, step), before)
    monkeypatch.undo()
    step(model, opt, X)  # the kept buffers are intact: the next call runs


def test_keyboard_interrupt_while_writing_back_completes_the_writes(monkeypatch):
    (model, opt, step), (twin, topt, tstep) = _compiled(n=2)
    tstep(twin, topt, X)
    real = tracing.mark_external
    calls = []

    def interrupt_once(t):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(t)

    monkeypatch.setattr(tracing, "mark_external", interrupt_once)
    # a prepared call (jit/_fastpath.py) marks what it wrote in one call: interrupt that one
    from megxla.jit import _fastpath
    real_all = _fastpath.mark_external_vids

    def interrupt_all(lo, hi):
        if not calls:
            calls.extend([1, 1])
            raise KeyboardInterrupt
        real_all(lo, hi)

    monkeypatch.setattr(_fastpath, "mark_external_vids", interrupt_all)
    with pytest.raises(KeyboardInterrupt):
        step(model, opt, X)
    monkeypatch.undo()
    # the donated inputs are gone once the executable ran: all writes were completed, none half-done
    _assert_same(_snapshot(model, opt, step), _snapshot(twin, topt, tstep))


def test_donation_never_deletes_a_buffer_held_elsewhere():
    model, opt, step = _compiled()
    w = model[0].weight
    alias = mge.Tensor(np.zeros(w.shape, "float32"))
    alias.set_value(w)  # shares w's buffer
    old = w.numpy().copy()
    step(model, opt, X)
    np.testing.assert_array_equal(alias.numpy(), old)
    assert not np.array_equal(w.numpy(), old)
    assert step.num_undonated == 1
    # two state tensors holding one buffer: kept for the call that has them shared, both updated
    bn = model[1]
    bn.bias.set_value(bn.weight)
    shared = bn.weight.numpy().copy()
    step(model, opt, X)
    assert step.num_undonated == 2
    assert not np.array_equal(bn.weight.numpy(), shared)
    assert not np.array_equal(bn.bias.numpy(), shared)
    # the common case still donates (the old buffers are given to the executable)
    step(model, opt, X)
    assert step.num_undonated == 2



def test_failure_compiling_the_recording_call_leaves_state_identical(monkeypatch):
    # The first call of an xla_trace step records abstractly, creates Adam's slots as outputs of its
    # executable, compiles and runs it. When XLA's compiler fails there, the call raises, no slot is left
    # holding a tracer, and training then goes on exactly as a twin's that never failed.
    from megxla.core import _spmd
    model, opt, gm = _setup()
    step = xla_trace(_make_step(gm, [None]))
    before = _snapshot(model, opt, step)
    real_jit = _spmd.jit

    class Failing:
        def __init__(self, jitted):
            self.jitted = jitted

        def lower(self, *avals):
            self.jitted.lower(*avals)

            class Lowered:
                def compile(self):
                    raise RuntimeError("XLA compile failed")
            return Lowered()

    monkeypatch.setattr(tracing._spmd, "jit", lambda f, **kw: Failing(real_jit(f, **kw)))
    # (a lowered step kept by an earlier run would compile without _spmd.jit; a failure there falls back to it)
    monkeypatch.setattr(tracing._persist, "compile_cached", lambda *args, **kwargs: None)
    with pytest.raises(RuntimeError, match="XLA compile failed"):
        step(model, opt, X)
    _assert_same(_snapshot(model, opt, step), before)
    monkeypatch.undo()
    twin, topt, tgm = _setup()
    tstep = xla_trace(_make_step(tgm, [None]))
    step.random_seed = tstep.random_seed  # (each traced function has a stream of its own: replay the twin's)
    for _ in range(4):
        ref, got = tstep(twin, topt, X), step(model, opt, X)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6)
    _assert_same(_snapshot(model, opt, step), _snapshot(twin, topt, tstep))


@pytest.mark.parametrize("deco", ["xla_trace", "without_host"])
def test_state_rebound_to_another_state_value_survives_donation(deco):
    # A teacher takes the student's weight from before the student's update (EMA / distillation code):
    # the written value is an input of the step whose buffer is donated to the student's new weight. The
    # executable returns the teacher's value as a buffer of its own: no deleted array, same numbers as eager.
    def make():
        mge.random.seed(0)
        s, t = M.Linear(3, 2), M.Linear(3, 2)
        return s, t, optim.SGD(s.parameters(), lr=0.1), GradManager().attach(s.parameters())

    def step(x, s, t, opt, gm):
        t.weight._reset(s.weight)
        with gm:
            loss = s(x).sum()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    wrap = xla_trace if deco == "xla_trace" else (lambda f: trace(f, symbolic=True, without_host=True))
    compiled, eager = make(), make()
    f = wrap(step)
    for _ in range(4):
        f(X, *compiled)
        step(X, *eager)
        for a, b in zip(compiled[:2], eager[:2]):
            np.testing.assert_allclose(a.weight.numpy(), b.weight.numpy(), rtol=1e-6)
