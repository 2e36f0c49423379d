"""Values a traced step reads on the host while recording are guards (issue 21): a compiled call whose value
differs is rolled back and recorded again (or raises in strict mode), never silently wrong; steps without host
reads never sync. Also the cache key (issue 9): NumPy arguments, scalar types, module number attributes,
GradManager attachments and ``.grad`` presence."""
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import trace, xla_trace, partial_trace, TraceError
from megxla.jit import tracing


# ---- a detection-style step: per-image ground truth sliced by a count read from a tensor -------------------
class _Head(M.Module):
    def __init__(self):
        super().__init__()
        self.fc = M.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


def _batches(counts, seed=0):
    rs = np.random.RandomState(seed)
    out = []
    for cnt in counts:
        boxes = np.zeros((2, 5, 4), "float32")
        for b, n in enumerate(cnt):
            boxes[b, :n] = rs.rand(n, 4)
        out.append((rs.rand(2, 4).astype("float32"), boxes, np.array(cnt, "int32")))
    return out


def _make_step(gm):
    def step(model, opt, x, boxes, num):
        with gm:
            pred = model(x)
            loss = 0
            for bid in range(2):
                gt = boxes[bid, :num[bid]]  # the count is read on the host: a guard
                loss = loss + ((pred[bid] - gt.mean(axis=0)) ** 2).sum()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss
    return step


def _train(deco, counts, **deco_kw):
    mge.random.seed(3)
    model = _Head()
    opt = optim.SGD(model.parameters(), lr=0.1)
    gm = GradManager().attach(model.parameters())
    step = _make_step(gm)
    if deco is not None:
        step = deco(step, **deco_kw)
    losses = [float(step(model, opt, mge.Tensor(x), mge.Tensor(b), mge.Tensor(n)).numpy())
              for x, b, n in _batches(counts)]
    return losses, [p.numpy() for p in model.parameters()], step


COUNTS = [(2, 3), (2, 3), (1, 4), (2, 3), (5, 1), (1, 4), (2, 3), (1, 4)]


@pytest.mark.parametrize("deco", [xla_trace, trace, trace(symbolic=True), partial_trace],
                         ids=["xla_trace", "trace_host", "trace_symbolic", "partial_trace"])
def test_slicing_by_a_count_matches_eager_by_recording_again(deco):
    ref_losses, ref_params, _ = _train(None, COUNTS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses, params, step = _train(deco, COUNTS)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for p, r in zip(params, ref_params):
        np.testing.assert_allclose(p, r, rtol=1e-5, atol=1e-6)
    if deco is not trace:  # trace with the host replays the Python body and reads the real values
        # (1, 4) and (5, 1) are new; (1, 4) recurs, so it is recorded once more and compiled for its third use
        assert step.num_rerecords == 3
        if deco in (xla_trace, partial_trace):  # one executable each for (2, 3) and (1, 4); (5, 1) stays a recording
            assert step.num_executables == 2
        msgs = [str(w.message) for w in caught if "data-dependent" in str(w.message)]
        assert msgs and "test_jit_guards.py" in msgs[0] and "num[bid]" in msgs[0]


def test_strict_mode_raises_naming_the_line_and_writes_nothing():
    mge.random.seed(3)
    model = _Head()
    opt = optim.SGD(model.parameters(), lr=0.1)
    gm = GradManager().attach(model.parameters())
    step = xla_trace(_make_step(gm), strict=True)
    data = _batches([(2, 3), (2, 3), (2, 3), (1, 4)])
    for x, b, n in data[:3]:
        step(model, opt, mge.Tensor(x), mge.Tensor(b), mge.Tensor(n))
    before = [p.numpy().copy() for p in model.parameters()]
    key = step.random_seed.numpy().copy()
    x, b, n = data[3]
    with pytest.raises(TraceError, match=r"test_jit_guards\.py:\d+.*num\[bid\]"):
        step(model, opt, mge.Tensor(x), mge.Tensor(b), mge.Tensor(n))
    for p, q in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), q)
    np.testing.assert_array_equal(step.random_seed.numpy(), key)


def test_trace_without_host_is_strict_by_default():
    @trace(without_host=True)
    def f(x, n):
        return x[:int(n)].sum()

    x = mge.Tensor(np.arange(6, dtype="float32"))
    assert float(f(x, mge.Tensor(2))) == 1.0
    assert float(f(x, mge.Tensor(2))) == 1.0
    with pytest.raises(TraceError, match="int\\(n\\)"):
        f(x, mge.Tensor(3))


@pytest.mark.parametrize("deco", [xla_trace, trace], ids=["xla_trace", "trace_host"])
def test_python_branch_on_a_loss_follows_the_value(deco):
    def make():
        w = mge.Parameter([1.0, -2.0])
        opt = optim.SGD([w], lr=0.1)
        gm = GradManager().attach([w])

        def step(w, opt, x, threshold):
            with gm:
                loss = (w * x).sum() ** 2
                if loss > threshold:  # a Python branch on a tensor: a guard on the comparison's value
                    loss = loss * 0.5
                gm.backward(loss)
            opt.step().clear_grad()
            return loss
        return w, opt, step

    xs = [[1.0, 1.0], [3.0, 0.5], [0.1, 0.2], [2.0, -1.0], [0.5, 0.5]]
    w_e, opt_e, step_e = make()
    ref = [float(step_e(w_e, opt_e, mge.Tensor(x), 1.0)) for x in xs]
    w_c, opt_c, step_c = make()
    traced = deco(step_c)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [float(traced(w_c, opt_c, mge.Tensor(x), 1.0)) for x in xs]
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    np.testing.assert_allclose(w_c.numpy(), w_e.numpy(), rtol=1e-6)


def test_int_of_a_tensor_as_a_loop_bound():
    def f(x, n):
        for _ in range(int(n)):
            x = x * 2
        return x

    g = xla_trace(f)
    x = mge.Tensor([1.0, 3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in [1, 1, 3, 3, 0, 1, 3]:
            np.testing.assert_allclose(g(x, mge.Tensor(n)).numpy(), f(x, mge.Tensor(n)).numpy())
    # n=3 recurs and is compiled (its value was seen by a compiled call); n=0 occurs once and stays a recording
    assert g.num_rerecords == 2 and g.num_executables == 2


def test_a_step_without_host_reads_never_syncs_and_a_guarded_one_once(monkeypatch):
    syncs = []
    real = tracing._fetch_guards
    monkeypatch.setattr(tracing, "_fetch_guards", lambda arrays: syncs.append(len(arrays)) or real(arrays))

    @xla_trace
    def plain(x):
        return (x * 2).sum()

    @xla_trace
    def guarded(x, n):
        return x[:int(n)].sum()

    x = mge.Tensor(np.arange(6, dtype="float32"))
    for _ in range(4):
        plain(x)
    assert syncs == []
    for _ in range(4):
        guarded(x, mge.Tensor(2))
    assert syncs == [1, 1, 1]  # the recording call runs eagerly; each of the 3 compiled calls syncs once


def test_reads_of_shape_only_values_are_no_guards(monkeypatch):
    syncs = []
    real = tracing._fetch_guards
    monkeypatch.setattr(tracing, "_fetch_guards", lambda arrays: syncs.append(1) or real(arrays))

    @xla_trace
    def f(x):
        n = F.ones((3,)).sum()  # computed from constants only: the same on every call
        m = F.zeros_like(x).sum() + 2  # and from a shape: the same too
        return x[:int(n)].sum() + x[:int(m)].sum()

    for i in range(3):
        assert float(f(mge.Tensor(np.arange(6, dtype="float32") + i))) == 3.0 + 3 * i + 1.0 + 2 * i
    assert syncs == []


def test_recordings_are_bounded_per_signature():
    @xla_trace
    def f(x, n):
        return x[:int(n)].sum()

    x = mge.Tensor(np.arange(20, dtype="float32"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(12):
            assert float(f(x, mge.Tensor(n))) == sum(range(n))
    assert len(next(iter(f._cache.values()))) <= f.max_variants
    assert any("recorded again on" in str(w.message) and "Pad" in str(w.message) for w in caught)


# ---- the cache key (issue 9, item 1) ------------------------------------------------------------------------
def _sgd_model(seed=0):
    mge.random.seed(seed)
    model = M.Linear(3, 1)
    opt = optim.SGD(model.parameters(), lr=0.1)
    gm = GradManager().attach(model.parameters())

    def step(model, opt, x, y):
        with gm:
            loss = ((model(x).flatten() - y) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss
    return model, opt, step


def test_numpy_arguments_are_inputs_not_keyed_by_id():
    rs = np.random.RandomState(0)
    data = [(rs.rand(4, 3).astype("float32") * (i + 1), rs.rand(4).astype("float32") * 10 * i) for i in range(5)]
    model, opt, step = _sgd_model()
    ref = [float(step(model, opt, x, y)) for x, y in data]
    # a buffer refilled in place
    model, opt, step = _sgd_model()
    traced = xla_trace(step)
    bx, by = np.empty((4, 3), "float32"), np.empty(4, "float32")
    got = []
    for x, y in data:
        bx[...], by[...] = x, y
        got.append(float(traced(model, opt, bx, by)))
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    # fresh arrays (a freed array's id is typically reused)
    model, opt, step = _sgd_model()
    traced = xla_trace(step)
    got = [float(traced(model, opt, x.copy(), y.copy())) for x, y in data]
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_python_scalar_types_key_the_cache():
    @xla_trace
    def f(x, s):
        return x * s

    x = mge.Tensor([1, 2], dtype="int32")
    for _ in range(2):
        assert f(x, 2).dtype == np.int32
    assert f(x, 2.0).dtype == np.float32
    np.testing.assert_allclose(f(x, 2.5).numpy(), [2.5, 5.0])

    @xla_trace
    def g(x, flag):
        return x + flag

    assert g(x, True).dtype == g(x, True).dtype
    out = g(x, 1)
    np.testing.assert_array_equal(out.numpy(), (x + 1).numpy())
    assert out.dtype == (x + 1).dtype


def test_module_number_attributes_key_the_cache():
    class Scaled(M.Module):
        def __init__(self):
            super().__init__()
            self.scale = 1
            self.bn = M.BatchNorm1d(2)
            self.drop = M.Dropout(0.0)

        def forward(self, x):
            return self.drop(self.bn(x)) * self.scale

    def run(m, x):
        return m(x)

    m_e, m_c = Scaled(), Scaled()
    f = xla_trace(run)
    x = mge.Tensor(np.random.RandomState(0).rand(8, 2).astype("float32"))
    for scale, momentum in [(1, 0.9), (1, 0.9), (100, 0.9), (100, 0.5), (100, 0.5)]:
        for m in (m_e, m_c):
            m.scale, m.bn.momentum = scale, momentum
        np.testing.assert_allclose(f(m_c, x).numpy(), run(m_e, x).numpy(), rtol=1e-5)
        np.testing.assert_allclose(m_c.bn.running_mean.numpy(), m_e.bn.running_mean.numpy(), rtol=1e-5)
    m_c.scale = m_e.scale = np.float32(3.0)  # NumPy numbers too
    np.testing.assert_allclose(f(m_c, x).numpy(), run(m_e, x).numpy(), rtol=1e-5)
    m_c.drop.drop_prob = 0.5
    zeros = [(f(m_c, x).numpy() == 0).sum() for _ in range(3)]
    assert min(zeros) > 0  # dropout now drops


def test_grad_manager_attach_after_compile_retraces():
    mge.random.seed(0)
    a, b = M.Linear(2, 2), M.Linear(2, 1)
    opt = optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.1)
    gm = GradManager().attach(a.parameters())

    @xla_trace
    def step(a, b, opt, x):
        with gm:
            loss = b(a(x)).sum()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    x = mge.Tensor([[1.0, 2.0]])
    for _ in range(3):
        step(a, b, opt, x)
    w = b.weight.numpy().copy()
    gm.attach(b.parameters())
    step(a, b, opt, x)
    assert not np.allclose(b.weight.numpy(), w)


def test_gradient_accumulation_across_compiled_calls():
    def run(deco):
        w = mge.Parameter([1.0, 2.0])
        gm = GradManager().attach([w])

        def step(w):
            with gm:
                gm.backward((w * w).sum())
        s = deco(step) if deco else step
        for _ in range(4):
            s(w)
        return w.grad.numpy()

    np.testing.assert_allclose(run(None), [8.0, 16.0])
    np.testing.assert_allclose(run(xla_trace), [8.0, 16.0])
    np.testing.assert_allclose(run(trace), [8.0, 16.0])


def test_dump_of_a_guarded_step_is_refused(tmp_path):
    @xla_trace
    def f(x, n):
        return x[:int(n)].sum()

    x = mge.Tensor(np.arange(6, dtype="float32"))
    f(x, mge.Tensor(2))
    f(x, mge.Tensor(2))
    with pytest.raises(TraceError, match="int\\(n\\)"):
        f.dump(str(tmp_path / "f.stablehlo"))


@pytest.mark.parametrize("tracer", [xla_trace, lambda f: trace(f, symbolic=True)])
def test_autocast_and_matmul_precision_key_the_recording(tracer):
    # amp.autocast and config.matmul_precision decide what the body records without being arguments: a call
    # under another setting records again (the compiled float16 matmul was returned outside autocast)
    from megxla import amp
    f = tracer(lambda x, w: F.matmul(x, w))
    x = mge.Tensor(np.random.RandomState(0).randn(4, 4).astype("float32"))
    w = mge.Tensor(np.random.RandomState(1).randn(4, 4).astype("float32"))
    with amp.autocast():
        assert [f(x, w).dtype for _ in range(2)] == [np.float16, np.float16]
    assert [f(x, w).dtype for _ in range(2)] == [np.float32, np.float32]
    with amp.autocast():
        assert f(x, w).dtype == np.float16
    old = mge.config.matmul_precision
    try:
        mge.config.matmul_precision = "default"
        f(x, w)
        f(x, w)
    finally:
        mge.config.matmul_precision = old
    np.testing.assert_allclose(f(x, w).numpy(), x.numpy() @ w.numpy(), rtol=1e-6)
    if tracer is xla_trace:
        assert f.num_compiled == 3  # autocast, float32 "highest", float32 "default"


def test_swapping_a_function_attribute_of_a_module_records_again():
    # ``self.act = F.relu`` decides what forward records; a compiled step kept computing relu after the swap
    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.act = F.relu

        def forward(self, x):
            return self.act(x)

    net, x = Net(), mge.Tensor([-1.0, 1.0])
    f = xla_trace(lambda net, x: net(x))
    assert [f(net, x).numpy().tolist() for _ in range(2)] == [[0.0, 1.0]] * 2
    net.act = F.sigmoid
    np.testing.assert_allclose(f(net, x).numpy(), 1 / (1 + np.exp([1.0, -1.0])), rtol=1e-6)


@pytest.mark.parametrize("deco", ["xla_trace", "without_host"])
def test_forward_hooks_registered_or_removed_after_compiling_record_again(deco):
    # Hooks run inside the module call the step records: a hook added (or removed) after the step was
    # compiled changes what it computes, as it changes eager's result.
    import megxla.module as M
    from megxla import jit
    mge.random.seed(0)
    net = M.Linear(3, 2)
    wrap = jit.xla_trace if deco == "xla_trace" else (lambda f: jit.trace(f, symbolic=True, without_host=True))
    f = wrap(lambda x, net: net(x))
    x = mge.Tensor(np.ones((1, 3), "float32"))
    for _ in range(2):
        f(x, net)
    handle = net.register_forward_hook(lambda m, inputs, out: out * 10)
    pre = net.register_forward_pre_hook(lambda m, inputs: tuple(i + 1 for i in inputs))
    for _ in range(3):
        np.testing.assert_allclose(f(x, net).numpy(), net(x).numpy(), rtol=1e-6)
    handle.remove()
    for _ in range(3):
        np.testing.assert_allclose(f(x, net).numpy(), net(x).numpy(), rtol=1e-6)
    pre.remove()
    np.testing.assert_allclose(f(x, net).numpy(), net(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("deco", ["xla_trace", "without_host", "trace"])
def test_module_mode_set_inside_a_compiled_step_stays_set(deco):
    # `net.eval()` inside a compiled evaluation step (and `net.train()` inside the training step): after every
    # call the module is in the mode the body left it in, as when the body runs, so later eager use of the
    # model (BatchNorm statistics, Dropout) is right.
    from megxla import jit
    wrap = {"xla_trace": jit.xla_trace, "trace": jit.trace,
            "without_host": lambda f: jit.trace(f, symbolic=True, without_host=True)}[deco]
    mge.random.seed(0)
    net = M.Sequential(M.Linear(4, 8), M.BatchNorm1d(8))

    def evaluate(x, net):
        net.eval()
        return net(x)

    def train(x, net):
        net.train()
        return net(x).sum()

    evaluate, train = wrap(evaluate), wrap(train)
    x = mge.Tensor(np.random.RandomState(0).randn(6, 4).astype("float32"))
    for _ in range(3):
        train(x, net)
        assert net.training and net[1].training
        evaluate(x, net)
        assert not net.training and not net[1].training
    before = net[1].running_mean.numpy().copy()
    net(x)  # eval mode: running statistics unchanged
    np.testing.assert_array_equal(net[1].running_mean.numpy(), before)


@pytest.mark.parametrize("deco", ["xla_trace", "trace", "symbolic"])
def test_a_tensor_escaping_the_body_says_why_it_is_unreadable(deco):
    # A tensor that leaves a compiled step without the host other than as a result (appended to a list) has no
    # value outside it: reading it says so, instead of a JAX tracer error or a placeholder's TypeError. With the
    # host the body runs on every call and such a tensor holds this call's value (test_jit.py).
    from megxla import jit
    from megxla.core._tensor import UnreadableTensorError
    wrap = {"xla_trace": jit.xla_trace, "trace": jit.trace, "symbolic": lambda f: jit.trace(f, symbolic=True)}[deco]
    hist = []

    @wrap
    def f(x):
        y = x * 2
        hist.append(y)
        return y + 1

    for _ in range(3):
        np.testing.assert_allclose(f(mge.Tensor([1.0])).numpy(), [3.0])
    if deco != "xla_trace":
        np.testing.assert_allclose([h.numpy() for h in hist], [[2.0]] * 3)
        return
    with pytest.raises(UnreadableTensorError, match="left the function other than as its return value"):
        hist[-1].numpy()
