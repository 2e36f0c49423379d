"""Behaviour of megxla.jit: record -> compile -> exec, state write-back, RNG, exclusion, errors, inspection."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.autodiff import GradManager
from megxla.jit import trace, xla_trace, partial_trace, exclude_from_trace, TraceError


def _x(*shape, seed=0):
    return mge.Tensor(np.random.RandomState(seed).randn(*shape).astype("float32"))


@pytest.mark.parametrize("deco", [trace, xla_trace, trace(symbolic=True), xla_trace(symbolic=True)],
                         ids=["trace", "xla_trace", "trace_symbolic", "xla_trace_symbolic"])
def test_record_then_compiled_matches_eager_and_marks_external(deco):
    calls = []

    def f(x, y):
        calls.append(1)
        return {"sum": x + y, "pair": (x * y, [F.exp(x), None])}

    g = deco(f)
    x, y = _x(3, 4), _x(3, 4, seed=1)
    ref = f(x, y)
    for i in range(3):
        out = g(x, y)
        assert set(out) == {"sum", "pair"} and out["pair"][1][1] is None
        np.testing.assert_allclose(out["sum"].numpy(), ref["sum"].numpy(), rtol=1e-6)
        np.testing.assert_allclose(out["pair"][0].numpy(), ref["pair"][0].numpy(), rtol=1e-6)
        np.testing.assert_allclose(out["pair"][1][0].numpy(), ref["pair"][1][0].numpy(), rtol=1e-6)
        # the recording call's results are not external values, even where it ran the compiled step (MegEngine's
        # recording call runs eagerly); later calls' are
        assert out["sum"]._is_external_value() == (i > 0)
    assert not ref["sum"]._is_external_value()
    assert g.num_executables >= 1


def test_xla_trace_runs_no_python_after_recording():
    calls = []

    @xla_trace
    def f(x):
        calls.append(1)
        return x * 2

    for _ in range(4):
        f(_x(2))
    assert len(calls) == 1


def test_trace_with_host_runs_python_each_call():
    calls = []

    @trace
    def f(x):
        calls.append(float(x.sum().numpy()))
        return x * 2

    x = _x(2)
    for _ in range(3):
        np.testing.assert_allclose(f(x).numpy(), x.numpy() * 2)
    assert len(calls) == 3 and calls[0] == calls[2]


def test_inplace_update_of_args_is_written_back_and_donated():
    w = mge.Parameter(np.ones((4, 4), "float32"))
    x = _x(2, 4)

    @xla_trace
    def step(x, w):
        w += F.matmul(x, w).mean()
        w[0, :] = 0.0
        return w.sum()

    w_ref = mge.Parameter(np.ones((4, 4), "float32"))
    for _ in range(3):
        s = step(x, w)
        w_ref += F.matmul(x, w_ref).mean()
        w_ref[0, :] = 0.0
        np.testing.assert_allclose(w.numpy(), w_ref.numpy(), rtol=1e-5)
        np.testing.assert_allclose(s.numpy(), w_ref.sum().numpy(), rtol=1e-5)
    assert w._is_external_value()
    assert "input_output_alias" in step.compiler_ir("hlo")  # the weight buffer is donated


def test_capture_as_const_and_error_without_it():
    outside = mge.Tensor([1.0, 2.0], name="bias")

    @xla_trace(capture_as_const=True)
    def f(x):
        return x + outside

    x = mge.Tensor([1.0, 1.0])
    f(x)
    outside._reset(mge.Tensor([10.0, 10.0]))  # constant keeps its record-time value
    np.testing.assert_allclose(f(x).numpy(), [2.0, 3.0])

    @xla_trace
    def g(x):
        return x + outside

    with pytest.raises(TraceError, match=r"named 'bias'.*shape \(2,\).*float32.*argument"):
        g(x)


def test_shape_change_retraces_with_its_own_executable():
    @xla_trace(cache_size=2)
    def f(x):
        return (x * x).sum(axis=0)

    for shape in [(2, 3), (4, 3), (2, 3), (4, 3), (5, 3)]:
        x = _x(*shape)
        f(x)
        np.testing.assert_allclose(f(x).numpy(), (x.numpy() ** 2).sum(0), rtol=1e-5)
    assert f.num_executables == 2  # LRU keeps the last two signatures


def test_dtype_change_retraces():
    @xla_trace
    def f(x):
        return x + 1

    assert f(mge.Tensor([1, 2])).dtype == np.int32
    assert f(mge.Tensor([1.5])).dtype == np.float32
    np.testing.assert_allclose(f(mge.Tensor([1.5])).numpy(), [2.5])


def test_rng_in_compiled_step():
    mge.random.seed(7)

    @xla_trace
    def f(x):
        return F.dropout(x, 0.5), F.dropout(x, 0.5)

    x = F.ones((64,))
    seeds, outs = [], []
    for _ in range(4):
        seeds.append(f.random_seed.numpy().copy())
        outs.append([o.numpy() for o in f(x)])
    assert not np.array_equal(outs[2][0], outs[2][1])  # two dropouts in one step differ
    assert not np.array_equal(outs[2][0], outs[3][0])  # consecutive calls differ
    assert not np.array_equal(seeds[2], seeds[3])  # the key is state of the step
    mge.random.seed(7)

    @xla_trace
    def f2(x):
        return F.dropout(x, 0.5), F.dropout(x, 0.5)

    again = [[o.numpy() for o in f2(x)] for _ in range(4)]
    for a, b in zip(outs, again):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_grad_manager_inside_trace_callbacks_compiled_in():
    w = mge.Parameter(np.full((3,), 2.0, "float32"))
    gm = GradManager()
    seen = []

    def cb(p, g):
        seen.append(1)
        return g * 10

    @xla_trace
    def step(x, w):
        gm.attach([w], callbacks=[cb])
        with gm:
            loss = (w * x).sum()
            gm.backward(loss)
        g = w.grad
        w.grad = None
        return loss, g

    x = mge.Tensor([1.0, 2.0, 3.0])
    for _ in range(3):
        loss, g = step(x, w)
        np.testing.assert_allclose(g.numpy(), x.numpy() * 10)
        assert w.grad is None
    assert len(seen) == 1  # Python callbacks ran while recording only


def test_exclude_from_trace_runs_every_call_and_reads_traced_values():
    log = []

    @trace
    def f(x):
        y = x * 2
        with exclude_from_trace():
            log.append(float(y.sum().numpy()))
        return y + 1

    for i in range(3):
        x = mge.Tensor([float(i), 1.0])
        np.testing.assert_allclose(f(x).numpy(), x.numpy() * 2 + 1)
    assert log == [2.0, 4.0, 6.0]


def test_exclude_from_trace_value_feeds_the_graph():
    @trace
    def f(x, k):
        y = x * 2
        with exclude_from_trace():
            z = y * float(k)
        return z + 1

    x = mge.Tensor([1.0, 2.0])
    for k in (1, 2, 3):
        np.testing.assert_allclose(f(x, k).numpy(), x.numpy() * 2 * k + 1)


def test_trace_mismatch_errors():
    x = mge.Tensor([1.0])
    flag = [True]  # closure state: not part of the signature, so the recording is replayed
    g = trace(lambda x: F.exp(x) if flag[0] else F.log(x))
    g(x)
    flag[0] = False
    with pytest.raises(TraceError, match="operator mismatch"):
        g(x)

    h_ops = [1]
    h = trace(lambda x: F.exp(F.exp(x)) if h_ops[0] == 2 else F.exp(x))
    h(x)
    h_ops[0] = 2
    with pytest.raises(TraceError, match="too many instructions"):
        h(x)

    k_ops = [2]
    k = trace(lambda x: F.exp(F.exp(x)) if k_ops[0] == 2 else F.exp(x))
    k(x)
    k_ops[0] = 1
    with pytest.raises(TraceError, match="mismature end"):
        k(x)

    c = [1.0]
    cc = trace(lambda x: x + mge.Tensor([c[0]]))
    cc(x)
    c[0] = 5.0
    with pytest.raises(TraceError, match="tensors not equals"):
        cc(x)


def test_reading_a_value_the_graph_does_not_keep():
    read = [False]

    @trace
    def f(x):
        y = F.exp(x)
        if read[0]:
            y.numpy()
        return y + 1

    x = mge.Tensor([1.0])
    f(x)
    read[0] = True
    with pytest.raises(TraceError, match="data unreadable"):
        f(x)


def test_symbolic_first_call_compiles_at_once():
    calls = []

    @trace(symbolic=True, without_host=True)
    def f(x):
        calls.append(1)
        return x * 3

    x = _x(3)
    np.testing.assert_allclose(f(x).numpy(), x.numpy() * 3, rtol=1e-6)
    assert f.num_executables == 1
    f(x)
    assert len(calls) == 1


def test_inspection():
    @xla_trace
    def f(x, w):
        return F.matmul(x, w)

    x, w = _x(8, 16), _x(16, 4, seed=1)
    f(x, w)
    f(x, w)
    assert "stablehlo.dot_general" in f.compiler_ir("stablehlo")
    assert "dot(" in f.compiler_ir("hlo") or "dot" in f.compiler_ir("hlo")
    cost = f.cost_analysis()
    assert cost["flops"] >= 2 * 8 * 16 * 4
    assert f.num_compiled == 1 and f.compile_time > 0


def test_partial_trace_is_one_op_with_compiled_backward():
    w = mge.Parameter(_x(4, 3).numpy())

    def forward(x, w):
        return F.relu(F.matmul(x, w)).sum(axis=1)

    pt = partial_trace(forward, backend="xla")
    gm = GradManager().attach([w])
    x = _x(5, 4, seed=2)
    grads = []
    for i in range(3):
        with gm:
            y = pt(x, w)
            gm.backward((y * y).sum())
        grads.append(w.grad.numpy())
        w.grad = None
    with gm:
        y = forward(x, w)
        gm.backward((y * y).sum())
    for g in grads:
        np.testing.assert_allclose(g, w.grad.numpy(), rtol=1e-5)
    # another signature runs eagerly, the traced one stays compiled
    np.testing.assert_allclose(pt(_x(2, 4), w).numpy(), forward(_x(2, 4), w).numpy(), rtol=1e-6)
    assert pt(x, w)._is_external_value()
    assert not pt(_x(2, 4), w)._is_external_value()


def test_trace_on_method_and_decorator_forms():
    class M:
        def __init__(self):
            self.k = 3

        @xla_trace
        def f(self, x):
            return x * 2

    m = M()
    x = _x(2)
    for _ in range(2):
        np.testing.assert_allclose(m.f(x).numpy(), x.numpy() * 2)
    g = xla_trace(lambda x: x + 1, capture_as_const=True)
    for _ in range(2):
        np.testing.assert_allclose(g(x).numpy(), x.numpy() + 1)


def test_upstream_style_attach_inside_and_return_grads():
    # The pattern of MegEngine's own xla tests: attach inputs inside, return the output and the inputs' grads.
    # Calls agree when the grads are cleared between them; without clearing, compiled calls accumulate into the
    # existing .grad as eager ones do (issue 9: MegEngine's compiled mode silently dropped the old gradient).
    gm = GradManager()

    @xla_trace(without_host=True)
    def func(inps, doup):
        gm.attach(inps)
        with gm:
            oup = F.tanh(inps[0] * inps[1])
            gm.backward(oup, doup)
            return [oup, *[inp.grad for inp in inps]]

    inps = [_x(3, 4), _x(3, 4, seed=1)]
    doup = _x(3, 4, seed=2)
    first = func(inps, doup)
    for inp in inps:
        inp.grad = None
    second = func(inps, doup)
    assert all(t._is_external_value() for t in second)
    for a, b in zip(first, second):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    for k in (2, 3, 4):  # not cleared: accumulate (records once more with the .grad as input, then compiled)
        out = func(inps, doup)
        for a, b in zip(first[1:], out[1:]):
            np.testing.assert_allclose(b.numpy(), k * a.numpy(), rtol=1e-5)
    assert all(t._is_external_value() for t in out)


def test_grads_accumulate_across_compiled_calls_when_not_cleared():
    w = mge.Parameter([1.0, 2.0])
    gm = GradManager().attach([w])
    w.grad = mge.Tensor([0.0, 0.0])

    @xla_trace
    def step(w):
        with gm:
            gm.backward((w * w).sum())

    for i in range(1, 4):
        step(w)
        np.testing.assert_allclose(w.grad.numpy(), [2.0 * i, 4.0 * i])


def test_sublinear_memory_config_rematerialises_and_keeps_numerics():
    from megxla.jit import SublinearMemoryConfig, DTRConfig
    w = mge.Parameter(_x(16, 16).numpy())
    gm = GradManager().attach([w])

    def step(x, w):
        with gm:
            h = x
            for _ in range(4):
                h = F.gelu(F.matmul(h, w))
            gm.backward(h.sum())
        g = w.grad
        w.grad = None
        return g

    x = _x(8, 16, seed=1)
    plain = xla_trace(step)
    remat = xla_trace(step, sublinear_memory_config=SublinearMemoryConfig())
    dtr = trace(step, dtr_config=DTRConfig(), without_host=True)
    for f in (plain, remat, dtr):
        f(x, w)
    ref = plain(x, w).numpy()
    np.testing.assert_allclose(remat(x, w).numpy(), ref, rtol=1e-5)
    np.testing.assert_allclose(dtr(x, w).numpy(), ref, rtol=1e-5)
    # the rematerialised step recomputes forward work: more flops than the plain one
    assert remat.cost_analysis()["flops"] > plain.cost_analysis()["flops"]


@pytest.mark.parametrize("symbolic", [False, True])
def test_trace_feeds_closure_tensors_as_external_inputs(symbolic):
    import megxla.optimizer as optim

    def make():
        w = mge.Parameter([1.0, -2.0, 0.5])
        return w, GradManager().attach([w]), optim.SGD([w], lr=0.1, momentum=0.9)

    w, gm, opt = make()

    @trace(symbolic=symbolic)
    def step(x):  # model, gm and optimizer come from the enclosing scope, as in MegEngine's own tests
        with gm:
            loss = (w * x).sum() ** 2
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    w2, gm2, opt2 = make()
    x = mge.Tensor([0.3, 0.2, -0.1])
    for i in range(5):
        if i == 3:
            opt.param_groups[0]["lr"] = opt2.param_groups[0]["lr"] = 0.05
        loss = step(x)
        with gm2:
            ref = (w2 * x).sum() ** 2
            gm2.backward(ref)
        opt2.step().clear_grad()
        np.testing.assert_allclose(loss.numpy(), ref.numpy(), rtol=1e-5)
        np.testing.assert_allclose(w.numpy(), w2.numpy(), rtol=1e-5)
    assert w._is_external_value()


def test_dump_writes_portable_stablehlo_that_loads_and_runs(tmp_path):
    from megxla.jit import load
    w = mge.Parameter(_x(4, 3).numpy())
    outside = mge.Tensor([1.0, 2.0, 3.0])

    @trace(symbolic=True, capture_as_const=True, without_host=True)
    def f(x, w):
        return F.softmax(F.matmul(x, w) + outside, axis=1)

    x = _x(2, 4, seed=5)
    ref = f(x, w)
    path = tmp_path / "f.stablehlo"
    info = f.dump(str(path), arg_names=["x", "w"])
    assert "stablehlo" in info.exported.mlir_module()
    g = load(str(path))
    assert g.arg_names == ["x", "w"]
    out = g(x, w)
    np.testing.assert_allclose(out[0].numpy(), ref.numpy(), rtol=1e-6)


def test_detach_inside_a_compiled_step_follows_its_input():
    f = xla_trace(lambda x: x.detach() * 2)
    for v in (1.0, 5.0, 7.0):
        np.testing.assert_allclose(f(mge.Tensor([v])).numpy(), [2 * v])
    w = mge.Parameter([3.0])
    gm = GradManager().attach([w])
    with gm:
        y = w * w.detach()
        gm.backward(y)
    np.testing.assert_allclose(w.grad.numpy(), [3.0])  # only the non-detached factor contributes


def test_tensor_of_a_traced_tensor_stays_connected():
    f = xla_trace(lambda x: mge.Tensor(x) + mge.Tensor(x, dtype="int32"))
    for v in (1.0, 5.0):
        np.testing.assert_allclose(f(mge.Tensor([v])).numpy(), [2 * v])


@pytest.mark.parametrize("module", ["megxla.jit.tracing", "megxla.jit.partial", "megxla.jit.config", "megxla.jit._autojit",
                                    "megxla.jit._mode_timer", "megxla.jit._tiers", "megxla.jit._kernels_ahead"])
def test_docstring_examples_run(module):
    import doctest
    import importlib
    res = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0


@pytest.mark.parametrize("symbolic", [False, True])
def test_trace_returns_a_parameter_the_step_updated(symbolic):
    # Returning the model's weight after opt.step() (or a BN running stat, an optimizer slot) is returning
    # state the step rebound: every replay gives that same Parameter object with its new value, as eager.
    import megxla.module as M
    import megxla.optimizer as optim
    from megxla.autodiff import GradManager

    def make():
        mge.random.seed(0)
        net = M.Linear(4, 2)
        return net, optim.SGD(net.parameters(), lr=0.1), GradManager().attach(net.parameters())

    def step(x, net, opt, gm):
        with gm:
            loss = net(x).sum()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss, net.weight

    net, opt, gm = make()
    traced = trace(step, symbolic=symbolic)
    twin, topt, tgm = make()
    x = mge.Tensor(np.ones((1, 4), "float32"))
    for _ in range(4):
        (loss, w), (rloss, rw) = traced(x, net, opt, gm), step(x, twin, topt, tgm)
        assert w is net.weight
        np.testing.assert_allclose(w.numpy(), rw.numpy(), rtol=1e-6)
        np.testing.assert_allclose(loss.numpy(), rloss.numpy(), rtol=1e-6)


def test_exclude_from_trace_may_change_what_the_step_returns():
    # MegEngine's trace guide (jit/trace.rst): host code in exclude_from_trace runs on every call and may leave
    # the body with another value than the recording call did; the step returns what the body returns now.
    calls = []

    @trace
    def f(x):
        x += 1
        with exclude_from_trace():
            if len(calls) % 2 == 0:
                x += 1
        calls.append(1)
        return x

    assert [int(f(mge.tensor([1])).numpy()[0]) for _ in range(4)] == [3, 2, 3, 2]


@pytest.mark.parametrize("symbolic", [False, True])
def test_tensor_kept_beyond_a_call_with_the_host_is_readable(symbolic):
    # A trace with the host whose body keeps a computed tensor (a spectral-norm style hook storing the derived
    # weight on a module captured from the enclosing scope; a list of logged values): after every call, eager
    # or compiled, the kept tensors hold this call's values.
    import megxla.module as M
    import megxla.optimizer as optim
    from megxla.autodiff import GradManager

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.weight_orig = mge.Parameter(np.ones((2, 2), "float32"))

        def forward(self, x):
            self.weight = self.weight_orig * 2.0
            return F.matmul(x, self.weight)

    net = Net()
    opt = optim.SGD([net.weight_orig], lr=0.1)
    gm = GradManager().attach([net.weight_orig])
    logged = []

    @trace(symbolic=symbolic)
    def step(x):
        with gm:
            loss = net(x).sum()
            gm.backward(loss)
        opt.step().clear_grad()
        logged.append(loss * 1.0)
        return loss

    x = mge.Tensor(np.ones((1, 2), "float32"))
    for i in range(4):
        loss = step(x)
        np.testing.assert_allclose(net.weight.numpy(), 2 * (1 - 0.2 * i) * np.ones((2, 2)), rtol=1e-6)
        np.testing.assert_allclose(logged[-1].numpy(), loss.numpy())
        assert list(net.state_dict()) == ["weight", "weight_orig"]


@pytest.mark.parametrize("symbolic", [False, True])
def test_in_place_result_with_the_host_is_the_final_value(symbolic):
    # ``result += c`` rebinds the tensor that held ``a + b``: that earlier value is not "kept beyond the call"
    # and must not overwrite the result (MegEngine's test_exception_in_trace shape, without the exception)
    kept = []

    @trace(symbolic=symbolic)
    def fn(a, b, c):
        result = a + b
        kept.append(result * 1)  # a kept value next to the in-place one
        result += c
        return result

    a, b, c = (mge.Tensor(np.array(v, "float32")) for v in ([1, 2], [5, 6], [9, 0]))
    for _ in range(4):
        np.testing.assert_array_equal(fn(a, b, c).numpy(), [15, 8])
        np.testing.assert_array_equal(kept[-1].numpy(), [6, 8])


@pytest.mark.parametrize("tracer", [lambda m: trace(m, symbolic=True, capture_as_const=True), trace, xla_trace])
def test_trace_of_a_module_instance(tracer):
    # MegEngine's dump-naming tests trace a Module object itself: it has no __name__, the executable is named
    # after its class
    class Doubler(mge.module.Module):
        def forward(self, x):
            return x + x

    f = tracer(Doubler())
    assert f.__name__ == "Doubler"
    for v in (1.0, 2.0, 3.0):
        np.testing.assert_array_equal(f(mge.Tensor([v])).numpy(), [2 * v])


def test_dump_refuses_a_training_mode_batchnorm():
    # MegEngine's test_dump_bn_train_mode: a dumped graph is for inference
    import io
    import megxla.module as M
    bn = M.BatchNorm2d(3)
    f = trace(lambda x: bn(x).sum(), symbolic=True, capture_as_const=True)
    x = mge.Tensor(np.random.rand(2, 3, 4, 4).astype("float32"))
    f(x)
    with pytest.raises(RuntimeError, match="BatchNorm in training mode"):
        f.dump(io.BytesIO())
    bn.eval()
    g = trace(lambda x: bn(x).sum(), symbolic=True, capture_as_const=True)
    g(x)
    assert g.dump(io.BytesIO()).outputs


@pytest.mark.parametrize("body", ["fake_quant", "lsq", "tqt", "max_ties"])
def test_partial_trace_gradient_keeps_ops_gradient_rules(body):
    # A compiled piece's backward is jax.vjp of its whole replay: an op whose gradient is a rule of its own (fake
    # quantization's straight-through estimator, where round's derivative is zero; max's gradient to every tied
    # maximum) must keep that rule there -- its compiled calls (the second on) gave QAT the zero gradient of round.
    from megxla.jit import partial_trace
    from megxla.quantization import utils as Q
    fns = {
        "fake_quant": lambda x, y: Q.fake_quant_tensor(
            x, Q.create_qparams(Q.QuantMode.SYMMERTIC, "qint8", scale=F.abs(y).max() / 127 + 0.01)) * y,
        "lsq": lambda x, y: Q.lsq_forward(-128, 127, x, F.abs(y).mean() * 0.05 + 0.01) * y,
        "tqt": lambda x, y: Q.tqt_forward(-128, 127, x, y.mean() * 0.1 - 5.0) * y,
        "max_ties": lambda x, y: F.max(x, axis=1) * y[:, 0],
    }
    fn = fns[body]
    rng = np.random.RandomState(0)
    xv, yv = (rng.standard_normal((3, 4)).astype("float32") for _ in range(2))
    xv[:, :2], xv[:, 2:] = 2.0, np.minimum(xv[:, 2:], 1.5)  # (two tied maxima per row)
    compiled = partial_trace(fn, backend="xla")
    results = []
    for f in (fn, compiled, compiled, compiled):
        x, y = mge.Parameter(xv), mge.Parameter(yv)
        gm = GradManager().attach([x, y])
        with gm:
            out = f(x, y)
            gm.backward((out * out).sum())
        results.append([out.numpy(), x.grad.numpy(), y.grad.numpy()])
    assert np.abs(results[0][1]).sum() > 0
    for got in results[1:]:
        for a, b in zip(results[0], got):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["trace", "symbolic", "xla_trace"])
def test_trace_replays_state_tensors_a_rebinding_made_share_one_value(kind):
    # ``a[...] = b`` makes a share b's value (MegEngine's rebinding), so from the second call on two state tensors
    # hold one value that the recording saw as two -- a QAT observer's ``runtime_momentum[...] = momentum`` after
    # its first batch, in a step running two forward passes: trace's replay rejected it ("input id mismatch")
    import megxla.module as M

    class Ema(M.Module):
        def __init__(self):
            super().__init__()
            self.avg, self.m, self.momentum = mge.Tensor(0.0), mge.Tensor(0.0), mge.Tensor(0.5)

        def forward(self, x):
            for _ in range(2):
                self.avg[...] = self.avg * self.m + (1 - self.m) * x.mean()
                self.m[...] = self.momentum
            return self.avg * 1

    def step(ema, x):
        return ema(x)

    fn = {"trace": trace(step), "symbolic": trace(step, symbolic=True), "xla_trace": xla_trace(step)}[kind]
    eager, traced = Ema(), Ema()
    for k in range(4):
        x = mge.Tensor(np.arange(3, dtype="float32") + k)
        np.testing.assert_allclose(fn(traced, x).numpy(), step(eager, x).numpy(), rtol=1e-6)
    np.testing.assert_allclose(traced.avg.numpy(), eager.avg.numpy(), rtol=1e-6)


@pytest.mark.parametrize("kind", ["partial_trace", "xla_trace", "symbolic"])
def test_compiled_graph_gives_no_gradient_where_its_ops_give_none(kind):
    # A compiled piece is one op of the surrounding autodiff, and jax.vjp of it gives every float input a gradient --
    # zeros where none flows. Taped op by op, a parameter reached only through detach() or only by a side output (a
    # statistic written back) gets none: .grad stays None, and an optimizer leaves it and its slots alone (Adagrad's
    # step counter counted on under partial_trace, found by tests/test_autojit_networks.py)
    import functools
    import megxla.module as M

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = M.Linear(3, 3), M.Linear(3, 3), M.Linear(3, 3)
            self.stat = mge.Tensor(np.zeros(3, "float32"))

        def forward(self, x):
            gate = F.sigmoid(self.b(x)).detach()  # b: detached
            self.stat[...] = self.stat * 0.9 + self.c(x).mean(0) * 0.1  # c: only in a side output
            return self.a(x) * gate

    net = Net()
    fwd = type(net).forward
    if kind == "partial_trace":
        net.forward = functools.partial(partial_trace(fwd, backend="xla"), net)
        run = net
    else:
        traced = xla_trace(fwd) if kind == "xla_trace" else trace(fwd, symbolic=True)
        run = functools.partial(traced, net)
    gm = GradManager().attach(net.parameters())
    x = mge.Tensor(np.ones((2, 3), "float32"))
    for _ in range(3):  # (recording, compiling, running the executable)
        with gm:
            gm.backward(run(x).sum())
        assert [n for n, p in net.named_parameters() if p.grad is not None] == ["a.bias", "a.weight"]
        for p in net.parameters():
            p.grad = None


@pytest.mark.parametrize("before", ["group_norm", "minus_mean"])
def test_max_pooling_gradient_compiled_equals_eager_after_a_fused_expression(before):
    # Max pooling's gradient (MegEngine's: every tie gets it) compared x with its window's maximum. In a compiled
    # step x is an expression XLA fuses into each consumer, rounded differently in each (a mean's division by 100
    # turned into a multiplication by 0.01 in one fusion only): the compare failed and most windows lost their
    # gradient -- a norm then max pooling trained wrongly under xla_trace, trace and auto-jit
    import megxla.module as M
    rng = np.random.RandomState(0)
    p = mge.Parameter(rng.standard_normal((4, 8, 10, 10)).astype("float32"))
    w = mge.Tensor(rng.standard_normal((4, 8, 5, 5)).astype("float32"))
    gn = M.GroupNorm(2, 8, affine=False)
    gm = GradManager().attach([p])

    def grad(p, w):
        with gm:
            x = gn(F.relu(p)) if before == "group_norm" else p - F.mean(p, axis=(2, 3), keepdims=True)
            gm.backward((F.max_pool2d(x, 2) * w).sum())
        g = p.grad * 1
        p.grad = None
        return g

    eager = grad(p, w).numpy()
    compiled = xla_trace(grad)
    for _ in range(2):
        np.testing.assert_allclose(compiled(p, w).numpy(), eager, rtol=1e-5, atol=1e-5)


_ROUTED_BY_COMPARE = {  # gradients that choose their elements by a comparison (of x with its result, or a threshold)
    "max": lambda y: F.max(y, axis=1),
    "min": lambda y: F.min(y, axis=1),
    "max_hw": lambda y: F.max(y, axis=(2, 3)),
    "norm_inf": lambda y: F.norm(y, ord=float("inf"), axis=1),
    "maximum": lambda y: F.maximum(y, y[:, :1] * 0.5),
    "minimum": lambda y: F.minimum(y, y[:, 1:2]),
    "clip": lambda y: F.clip(y, -0.1, 0.1),
    "relu": F.relu,
    "abs": F.abs,
    "where": lambda y: F.where(y > 0, y, y * y),
    "topk": lambda y: F.topk(F.reshape(y, (2, -1)), 3)[0],
    "max_pool": lambda y: F.max_pool2d(y, 2),
    "adaptive_max_pool": lambda y: F.adaptive_max_pool2d(y, (2, 2)),
}


@pytest.mark.parametrize("standardise", [False, True])
@pytest.mark.parametrize("op", sorted(_ROUTED_BY_COMPARE))
def test_gradients_routed_by_a_compare_compiled_equal_eager_after_a_normalisation(op, standardise):
    # A normalisation before the op is an elementwise expression XLA recomputes in each fusion that reads it, and
    # may round differently in each: a gradient that compares x with the op's result must still route as eagerly.
    # max / min / max pooling lost whole slices' gradients so before their position routing (max over the channels
    # of a convolution's output less its spatial mean: the weight's gradient 4.6 apart at a scale of 9.3 under
    # xla_trace, and under plain jax.jit(jax.grad(...)) too)
    import megxla.module as M
    mge.random.seed(0)
    conv = M.Conv2d(4, 8, 3, padding=1)
    rng = np.random.RandomState(0)
    x = mge.Tensor(rng.standard_normal((2, 4, 6, 6)).astype("float32"))
    gm = GradManager().attach(conv.parameters())
    fn = _ROUTED_BY_COMPARE[op]

    def grad(conv, x):
        with gm:
            y = conv(x)
            c = y - F.mean(y, axis=(2, 3), keepdims=True)
            out = fn(c / F.sqrt(F.mean(c * c, axis=(2, 3), keepdims=True) + 1e-5) if standardise else c)
            r = mge.Tensor(np.random.RandomState(7).standard_normal(out.shape).astype("float32"))
            gm.backward((out * r).sum())
        g = conv.weight.grad * 1
        conv.weight.grad = conv.bias.grad = None
        return g

    eager = grad(conv, x).numpy()
    compiled = xla_trace(grad)
    for _ in range(2):
        np.testing.assert_allclose(compiled(conv, x).numpy(), eager, rtol=1e-4, atol=1e-4 * np.abs(eager).max())


def test_max_gradient_goes_to_every_tie_and_to_a_maximum_in_each_slice():
    # MegEngine's gradient of max/min: the full cotangent to each element equal to the result, over any axes
    x = mge.Tensor(np.array([[[1., 3., 3.], [2., 0., 2.]], [[5., 5., 5.], [-1., 4., 0.]]], "float32"))
    for axis, want in [(1, [[[0, 1, 1], [1, 0, 0]], [[1, 1, 1], [0, 0, 0]]]),
                       ((0, 2), [[[0, 0, 0], [0, 0, 0]], [[1, 1, 1], [0, 1, 0]]]),
                       (None, [[[0, 0, 0], [0, 0, 0]], [[1, 1, 1], [0, 0, 0]]])]:
        gm = GradManager().attach([x])
        with gm:
            gm.backward(F.max(x, axis=axis).sum())
        np.testing.assert_array_equal(x.grad.numpy(), np.array(want, "float32"), err_msg=str(axis))
        x.grad = None
    gm = GradManager().attach([x])
    with gm:
        gm.backward(F.min(x, axis=2, keepdims=True).sum())
    np.testing.assert_array_equal(x.grad.numpy(), [[[1, 0, 0], [0, 1, 0]], [[1, 1, 1], [1, 0, 0]]])
    # a slice whose maximum is NaN: no element equals it, none gets a gradient (MegEngine's x == max compare)
    y = mge.Tensor(np.array([[1.0, np.nan, 3.0], [1.0, 5.0, 2.0]], "float32"))
    gm = GradManager().attach([y])
    with gm:
        gm.backward(F.max(y, axis=1).sum())
    np.testing.assert_array_equal(y.grad.numpy(), [[0, 0, 0], [0, 1, 0]])
