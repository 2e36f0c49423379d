"""Adversarial checks of the compiled paths (``trace``, ``xla_trace``, ``partial_trace``) against eager: each test
is a case where a compiled step was once wrong, lost state or crashed (repros from differential probing)."""
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.module as M
from megxla.autodiff import GradManager
from megxla.jit import trace, xla_trace


class _Scale(M.Module):
    def __init__(self):
        super().__init__()
        self.w = mge.Parameter(np.ones((3,), "float32"))

    def forward(self, x):
        return x * self.w


def _x(i):
    return mge.Tensor(np.full((3,), i + 1.0, "float32"))


@pytest.mark.parametrize("symbolic", [False, True])
def test_closure_module_attribute_rebound_in_the_step(symbolic):
    # the body rebinds an attribute of a module from the enclosing scope: an abstract recording lost the old
    # tensor (TypeError) and left the module holding a tracer; an eager one replayed a stale recording
    net = _Scale()

    @trace(symbolic=symbolic)
    def step(x):
        y = net(x)
        net.w = net.w * 2
        return y

    got = [(float(step(_x(i))[0]), float(net.w[0])) for i in range(4)]
    assert got == [(1.0, 2.0), (4.0, 4.0), (12.0, 8.0), (32.0, 16.0)]


@pytest.mark.parametrize("deco", [xla_trace, lambda f: trace(f, symbolic=True)])
def test_rebound_attribute_then_host_read_or_raise_restores_the_module(deco):
    net = _Scale()

    def step(net, x, boom=False):
        y = net(x)
        net.w = net.w * 2
        if boom:
            raise ValueError("boom")
        return y * float(y.sum())  # a host read: the abstract recording falls back to an eager one

    f = deco(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert float(f(net, _x(0))[0]) == 3.0  # y = 1, sum 3
        assert float(net.w[0]) == 2.0
        w = net.w
        with pytest.raises(ValueError):
            f(net, _x(0), boom=True)
        assert net.w is w and float(net.w[0]) == 2.0  # the failed call left the attribute as it was
        assert float(f(net, _x(0))[0]) == 2.0 * 6.0
        assert float(net.w[0]) == 4.0


@pytest.mark.parametrize("symbolic", [False, True])
def test_trace_with_host_under_an_outer_grad_manager(symbolic):
    # the with-host replay taped placeholder values into a GradManager recording around the call
    net = M.Linear(4, 2)
    gm = GradManager().attach(net.parameters())
    fwd = trace(lambda net, x: (net(x) ** 2).sum(), symbolic=symbolic)
    for i in range(3):
        x = mge.Tensor(np.full((3, 4), i + 1.0, "float32"))
        with gm:
            loss = fwd(net, x)
            gm.backward(loss)
        y = net.weight.numpy() @ x.numpy().T + net.bias.numpy()[:, None]
        np.testing.assert_allclose(net.weight.grad.numpy(), 2 * y @ x.numpy(), rtol=1e-5)
        np.testing.assert_allclose(float(loss), (y ** 2).sum(), rtol=1e-5)
        for p in net.parameters():
            p.grad = None


class _Buffer(M.Module):
    def __init__(self):
        super().__init__()
        self.b = mge.Tensor(np.zeros((3,), "float32"))

    def forward(self, x):
        return x + self.b


@pytest.mark.parametrize("deco", [xla_trace, lambda f: trace(f, without_host=True)])
def test_results_are_the_objects_eager_returns(deco):
    # a result holding a written state's value is a Tensor of its own (it was the state Tensor: ``r += 100``
    # changed net.b); a result returned twice is one Tensor (the prepared call made two)
    net = _Buffer()

    def step(net, x):
        y = net.b + x
        net.b._reset(y)
        c = x * 2
        return y, c, [c], net.b

    f = deco(step)
    for i in range(4):
        y, c, (c2,), b = f(net, _x(0))
        assert y is not net.b and b is net.b and c is c2
        y += 100
        c += 1
        assert float(net.b[0]) == i + 1.0 and float(c2[0]) == 3.0


class _Lazy(M.Module):
    """A running sum kept in buffers created on the first forward."""

    def __init__(self):
        super().__init__()
        self.w = mge.Parameter(np.ones((3,), "float32"))

    def forward(self, x):
        if not hasattr(self, "acc"):
            self.acc = x * 0
            self.cnt = mge.Tensor(0.0)
        self.acc = self.acc + x * self.w
        self.cnt += 1
        return self.acc / self.cnt


@pytest.mark.parametrize("symbolic", [False, True])
def test_state_created_on_a_closure_module_by_the_first_call(symbolic):
    # the recording call created buffers on a module the step does not take as an argument: its recording was
    # replayed for the other branch (TraceError), or (abstract) left the buffers holding tracers (unreadable)
    net = _Lazy()
    step = trace(lambda x: net(x), symbolic=symbolic)
    for i in range(4):
        got = step(_x(i))
        total = sum(k + 1.0 for k in range(i + 1))
        assert float(got[0]) == total / (i + 1) and float(net.acc[0]) == total and float(net.cnt) == i + 1


@pytest.mark.parametrize("symbolic", [False, True])
def test_a_compiled_call_with_the_host_that_raises_puts_kept_attributes_back(symbolic):
    # the body stores a value on a closure module (``self.feat = y``), then raises on a compiled call: the
    # attribute was left holding a placeholder of the replay (UnreadableTensorError for ever)
    class Feat(M.Module):
        def __init__(self):
            super().__init__()
            self.w = mge.Parameter(np.ones((3,), "float32"))
            self.boom = False

        def forward(self, x):
            y = x * self.w
            self.feat = y * 2
            if self.__dict__["boom"]:  # (read directly: not a number attribute keying the recording)
                raise KeyError("boom")
            return y

    net = Feat()
    step = trace(lambda x: net(x), symbolic=symbolic)
    for i in range(3):
        step(_x(i))
    net.__dict__["boom"] = True
    with pytest.raises(KeyError):
        step(_x(3))
    assert float(net.feat[0]) == 6.0  # the value of the last call that completed (transactional)
    net.__dict__["boom"] = False
    assert float(step(_x(4))[0]) == 5.0 and float(net.feat[0]) == 10.0


@pytest.mark.parametrize("options", [dict(without_host=True), dict(without_host=True, symbolic=True),
                                     dict(symbolic=True)])
def test_a_step_writing_tensors_captured_as_constants(options):
    # an optimizer step on captured parameters: without the host the compiled calls silently kept the old
    # weights (loss 6, 6, 6...); an abstract recording left the weights holding tracers (unreadable)
    import megxla.optimizer as optim
    from megxla.jit import TraceError
    net = M.Linear(3, 1)
    net.weight._reset(mge.Tensor(np.ones((1, 3), "float32")))
    net.bias._reset(mge.Tensor(np.zeros((1,), "float32")))
    opt = optim.SGD(net.parameters(), lr=0.1)
    gm = GradManager().attach(net.parameters())

    @trace(capture_as_const=True, **options)
    def step(x):
        with gm:
            loss = net(x).sum()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    x = mge.Tensor(np.ones((2, 3), "float32"))
    if options.get("without_host"):
        with pytest.raises(TraceError, match="captured as a constant"):
            step(x)
        np.testing.assert_array_equal(net.weight.numpy(), np.ones((1, 3)))  # nothing written
        assert net.weight.grad is None
    else:  # with the host: MegEngine's behaviour (the first call runs, the next sees the constant changed)
        assert float(step(x)) == 6.0
        np.testing.assert_allclose(net.weight.numpy(), np.full((1, 3), 0.8), rtol=1e-6)
        with pytest.raises(TraceError, match="tensors not equals"):
            step(x)
        np.testing.assert_allclose(net.weight.numpy(), np.full((1, 3), 0.8), rtol=1e-6)


def test_partial_trace_reads_numpy_arguments_every_call():
    # partial_trace keyed a NumPy argument by id and baked its values in: a new array reusing a freed one's id
    # ran with the old values (0, 0, 0...)
    from megxla.jit import partial_trace
    f = partial_trace(lambda x: mge.Tensor(x) * 2, backend="xla")
    got = []
    for i in range(4):
        a = np.full((3,), float(i), "float32")
        got.append(float(f(a)[0]))
        del a
    assert got == [0.0, 2.0, 4.0, 6.0]


def test_a_new_function_attribute_reusing_a_freed_ones_id_records_again():
    # function attributes were keyed by id(): a lambda made after the recorded one was freed could get its id,
    # and the step ran the old lambda's recording (x * 1 for x * 6)
    import gc

    class Act(M.Module):
        def __init__(self):
            super().__init__()
            self.act = None

        def forward(self, x):
            return self.act(x)

    def make(k):
        return lambda x: x * k

    net = Act()
    step = xla_trace(lambda net, x: net(x))
    for k in range(1, 8):
        net.act = None
        gc.collect()
        net.act = make(k)
        assert [float(step(net, mge.Tensor([1.0]))[0]) for _ in range(2)] == [k, k]


def test_a_step_binding_new_tensors_to_a_module_every_call_warns_once():
    # ``self.feat = y`` on an argument's module: no recording can be reused, so xla_trace compiled every call,
    # silently; the values stay eager's, and a warning names the attribute
    class Feat(M.Module):
        def __init__(self):
            super().__init__()
            self.w = mge.Parameter(np.ones((3,), "float32"))

        def forward(self, x):
            y = x * self.w
            self.feat = y * 2
            return y

    net = Feat()
    step = xla_trace(lambda net, x: net(x))
    with pytest.warns(UserWarning, match=r"bound new Tensors to state \(Feat.feat\)") as record:
        for i in range(4):
            assert float(step(net, _x(i))[0]) == i + 1.0 and float(net.feat[0]) == 2 * (i + 1.0)
    assert sum("bound new Tensors" in str(w.message) for w in record) == 1


@pytest.mark.parametrize("symbolic", [False, True])
def test_trace_with_the_host_follows_a_model_swapped_in_the_enclosing_scope(symbolic):
    # ``net = new_model`` between calls while the old one stays alive: MegEngine's trace computes with the new
    # model; the replay raised "expect internal node, got external"
    def make(v):
        m = M.Linear(3, 1)
        m.weight._reset(mge.Tensor(np.full((1, 3), v, "float32")))
        m.bias._reset(mge.Tensor(np.zeros((1,), "float32")))
        return m

    models = [make(1.0), make(2.0)]
    holder = {"net": models[0]}
    step = trace(lambda x: holder["net"](x).sum(), symbolic=symbolic)
    x = mge.Tensor(np.ones((2, 3), "float32"))
    assert [float(step(x)) for _ in range(3)] == [6.0] * 3
    holder["net"] = models[1]
    assert [float(step(x)) for _ in range(3)] == [12.0] * 3
    holder["net"] = models[0]
    assert [float(step(x)) for _ in range(2)] == [6.0] * 2


def test_a_grad_of_another_dtype_set_between_calls_records_again():
    # the recording's ``.grad`` inputs were keyed by shape only: a float16 ``.grad`` set between calls reached the
    # executable and failed with JAX's TypeError (eager accumulates into it)
    def run(deco):
        net = M.Linear(4, 2)
        net.weight._reset(mge.Tensor(np.full((2, 4), 0.5, "float32")))
        net.bias._reset(mge.Tensor(np.zeros((2,), "float32")))
        gm = GradManager().attach(net.parameters())

        def step(net, x):
            with gm:
                loss = (net(x) ** 2).mean()
                gm.backward(loss)
            return loss

        f = deco(step)
        grads = []
        for i in range(4):
            if i == 2:
                net.weight.grad = mge.Tensor(np.ones((2, 4), "float16"))
            f(net, mge.Tensor(np.ones((3, 4), "float32")))
            grads.append((str(net.weight.grad.dtype), net.weight.grad.numpy().tolist()))
        return grads

    assert run(xla_trace) == run(lambda f: f)
