"""Abstract recording (issue 13): the recording call of ``xla_trace`` / ``trace(symbolic=True)`` evaluates shapes
only, compiles the whole step once and runs it; it must equal an eager recording call in results, state and RNG."""
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import trace, xla_trace


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.fc = M.Linear(4, 3)
        self.bn = M.BatchNorm1d(3)
        self.drop = M.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.bn(self.fc(x)))


def _run(make_trace, steps=3):
    mge.random.seed(1)
    net = _Net()
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(net.parameters())

    def step(x, net, opt):
        with gm:
            loss = (net(x) ** 2).mean() + mge.random.normal(size=(2,)).sum()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    f = make_trace(step)
    xs = np.random.RandomState(0).randn(steps, 8, 4).astype("float32")
    losses = [f(mge.Tensor(x), net, opt) for x in xs]
    state = [t.numpy() for t in net.tensors()] + [v.numpy() for s in opt._state.values() for v in s.values()]
    # the stream after the steps: the traced object's key, and a draw from the global generator
    return f, losses, state, np.asarray(f.random_seed._data), mge.random.normal(size=(3,)).numpy()


@pytest.mark.parametrize("abstract, eager_rec", [
    (xla_trace, lambda s: xla_trace(s, symbolic=False)),
    (lambda s: trace(s, symbolic=True, without_host=True), lambda s: trace(s, without_host=True)),
    (lambda s: trace(s, symbolic=True), trace),
], ids=["xla_trace", "trace_symbolic_without_host", "trace_symbolic"])
def test_abstract_recording_equals_eager_recording(abstract, eager_rec):
    fa, la, sa, ka, ga = _run(abstract)
    fe, le, se, ke, ge = _run(eager_rec)
    # the first call ran the whole-step executable, and the step compiled exactly once (no second recording, no
    # per-op kernels in between); as a recording call's results, MegEngine's contract, they are not external values
    assert not la[0]._is_external_value() and not le[0]._is_external_value() and la[1]._is_external_value()
    assert fa.num_compiled == 1 and fe.num_compiled == 1
    for a, e in zip(la, le):
        np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
    for a, e in zip(sa, se):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ka, ke)  # same RNG stream consumed
    np.testing.assert_array_equal(ga, ge)


def test_host_read_falls_back_to_eager_recording_and_warns_once_naming_the_line():
    def f(x):
        n = int(x.sum() > 0)  # a host read: no value exists while recording abstractly
        return x * (n + 1)

    g = xla_trace(f)
    x = mge.Tensor(np.ones((2, 2), "float32"))
    with pytest.warns(UserWarning, match=r"reads a value on the host at .*test_jit_abstract\.py:\d+ \(`n = int"):
        out = g(x)
    np.testing.assert_array_equal(out.numpy(), 2 * np.ones((2, 2)))
    assert not out._is_external_value() and g.num_compiled == 0  # recorded eagerly
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: a new signature records eagerly without a warning
        g(x)
        np.testing.assert_array_equal(g(mge.Tensor(-np.ones((3,), "float32"))).numpy(), -np.ones(3))
    assert g.num_compiled == 1


@pytest.mark.parametrize("make", [xla_trace, lambda f: trace(f, symbolic=True)], ids=["xla_trace", "symbolic"])
def test_a_host_read_the_body_catches_still_records_eagerly(make):
    # A body that catches every error around a read (a fallback value, a logging call guarded against anything)
    # caught the abstract recording's NeedsHost: the recording went on with the except branch and the compiled
    # step computed ``x * 2 + 0`` on every call, the first included, where eager reads the count
    from megxla.jit import exclude_from_trace
    seen = []

    def f(x):
        y = x * 2
        try:
            n = int((x > 0).sum())
        except Exception:  # noqa: BLE001
            n = 0
        try:
            with exclude_from_trace():
                seen.append(1)
        except Exception:  # noqa: BLE001
            pass
        return y + n

    g = make(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in (1, 1, 1, -1):
            x = np.array([1.0, -1.0, 2.0], "float32") * k
            np.testing.assert_array_equal(g(mge.Tensor(x)).numpy(), x * 2 + (x > 0).sum())


def test_printing_a_tensor_in_the_step_still_compiles_from_the_abstract_recording(capsys):
    # (Tensor.__repr__ catches the read it cannot do there and shows <abstract>, on purpose: no eager recording)
    def f(x):
        y = (x * 2).sum()
        print("y is", y, f"{y}")
        return y

    g = xla_trace(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(3):
            assert g(mge.Tensor(np.full(3, k, "float32"))).item() == 6.0 * k
    assert g.num_compiled == 1
    assert capsys.readouterr().out.count("<abstract>") == 2  # printed once, while recording


def test_state_created_by_the_abstract_call_gets_its_value_from_the_executable():
    class Acc(M.Module):
        def forward(self, x):
            if not hasattr(self, "total"):  # a buffer made lazily by the first call
                self.total = mge.Tensor(np.zeros(x.shape, "float32"))
            self.total[...] = self.total + x
            return self.total * 2

    m, ref = Acc(), Acc()
    g = xla_trace(lambda m, x: m(x))
    for i in range(3):
        x = mge.Tensor(np.full((2,), i + 1, "float32"))
        np.testing.assert_array_equal(g(m, x).numpy(), ref(x).numpy())
        np.testing.assert_array_equal(m.total.numpy(), ref.total.numpy())


def test_errors_of_an_abstract_recording_leave_state_unchanged():
    net = _Net()
    before = [t.numpy() for t in net.tensors()]
    g = xla_trace(lambda net, x: net(x))
    with pytest.raises(Exception, match=r"linear: input \(2, 5\)"):
        g(net, mge.Tensor(np.ones((2, 5), "float32")))  # wrong feature count
    for t, b in zip(net.tensors(), before):
        np.testing.assert_array_equal(t.numpy(), b)
    out = g(net, mge.Tensor(np.ones((8, 4), "float32")))
    assert out.shape == (8, 3) and g.num_compiled == 1 and not out._is_external_value()  # (a recording call's)


@pytest.mark.parametrize("make", [xla_trace, lambda s: trace(s, symbolic=True, without_host=True),
                                  lambda s: trace(s, symbolic=True)],
                         ids=["xla_trace", "trace_symbolic_without_host", "trace_symbolic"])
def test_a_value_computed_from_constants_is_read_without_eager_recording(make):
    # BERT's pattern: a shape turned into a Tensor and read back (reshape by it, int() of it). It depends on the
    # signature only, so the abstract recording evaluates it and compiles the step at once.
    def step(x):
        shp = mge.tensor(x.shape)
        y = x.reshape(shp[0], -1) * int(shp[1])
        return y.sum(axis=1) + F.ones((int(shp[0] * 2),))[: x.shape[0]]

    g = make(step)
    for i, shape in enumerate([(2, 3), (2, 3), (4, 5), (4, 5)]):
        x = mge.Tensor(np.arange(np.prod(shape), dtype="float32").reshape(shape))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback to an eager recording
            out = g(x)
        ref = np.arange(np.prod(shape), dtype="float32").reshape(shape).sum(1) * shape[1] + 1
        np.testing.assert_allclose(out.numpy(), ref)
        assert out._is_external_value() == (i % 2 == 1)  # (a recording call's results are not external)
    assert g.num_compiled == 2


def test_a_read_of_a_value_computed_from_an_argument_still_records_eagerly():
    def step(x):
        s = mge.tensor(x.shape) + x.sum().astype("int32") * 0  # depends on the argument's data
        return x * int(s[0])

    g = xla_trace(step)
    with pytest.warns(UserWarning, match="reads a value on the host"):
        out = g(mge.Tensor(np.ones((2, 2), "float32")))
    np.testing.assert_array_equal(out.numpy(), 2 * np.ones((2, 2)))
