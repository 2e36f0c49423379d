"""Issue 18: building a model compiles (nearly) nothing, whatever its number of parameter shapes; the initialisers
draw the right distributions; the same seed gives the same parameters in two processes."""
import math
import os
import subprocess
import sys
import textwrap
import threading

import jax
import numpy as np
import pytest

import megxla
import megxla.module as M
import megxla.module.init as init
import megxla.random as R

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _CompileCounter:
    """Counts XLA backend compilations through JAX's monitoring hook (not timing), on the thread that entered it:
    a compile an earlier test left running on a worker thread (auto-jit's kernels compiled ahead, a tier-up) is not
    this block's (JAX calls the listener on the compiling thread)."""

    def __init__(self):
        self.n = 0
        self.names = []  # (each compile's function name, for the messages)
        self.on = False
        self.thread = None
        jax.monitoring.register_event_duration_secs_listener(self._event)

    def _event(self, event, duration, **kwargs):
        if self.on and event == "/jax/core/compile/backend_compile_duration" \
                and threading.get_ident() == self.thread:
            self.n += 1
            self.names.append(kwargs.get("fun_name"))

    def __enter__(self):
        self.n, self.names, self.on, self.thread = 0, [], True, threading.get_ident()
        return self

    def __exit__(self, *exc):
        self.on = False


_counter = _CompileCounter()


class _Block(M.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = M.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = M.BatchNorm2d(cout)
        self.conv2 = M.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(cout)
        self.down = M.Conv2d(cin, cout, 1, stride=stride) if stride != 1 or cin != cout else None

    def forward(self, x):  # only built here, never run
        y = self.bn2(self.conv2(self.bn1(self.conv1(x))))
        return y + (self.down(x) if self.down is not None else x)


def _resnet(widths, num_classes=10):
    """A ResNet-style stack with ``len(widths)`` stages: more stages, more distinct parameter shapes."""
    layers, cin = [M.Conv2d(3, widths[0], 7, stride=2, padding=3), M.BatchNorm2d(widths[0])], widths[0]
    for i, w in enumerate(widths):
        layers += [_Block(cin, w, 1 if i == 0 else 2), _Block(w, w, 1)]
        cin = w
    layers.append(M.Linear(cin, num_classes))
    return M.Sequential(*layers)


def _shapes(net):
    return {tuple(p.shape) for p in net.parameters()}


def test_building_a_resnet18_compiles_a_bounded_number_of_kernels():
    # Warm nothing on purpose: the bound covers a first build; a larger net must not need more.
    with _counter as small:
        net_small = _resnet((8, 16))
    with _counter as r18:
        net = _resnet((64, 128, 256, 512), num_classes=1000)  # ResNet-18's shapes
    with _counter as wide:
        net_wide = _resnet((24, 40, 72, 136, 264, 520))
    assert len(_shapes(net_wide)) > len(_shapes(net)) > len(_shapes(net_small)) + 5
    assert small.n <= 2 and r18.n <= 2 and wide.n <= 2, (small.n, r18.n, wide.n)
    assert sum(p.size for p in net.parameters()) > 11_000_000


def test_eager_random_draws_compile_once_per_distribution_not_per_shape():
    R.normal(size=(3,)), R.uniform(size=(3,))  # each distribution's executable
    with _counter as c:
        for n in range(1, 12):
            R.normal(0.5, 2.0, size=(n, 7))
            R.uniform(-1.0, float(n), size=(n, 3, 2))
            R.permutation(n * 5)
        R.normal(size=(70_000,))  # several chunks
    # The bits kernel of permutation may compile at its first use, and nothing per shape: no kernel compiles twice.
    # (Counted by name: twice in CI, 2 compiles against <= 1, which no run of this file alone or after the random
    # tests reproduced -- a compile of something else on this thread, such as a finalizer of an earlier test's object
    # run inside the block, does not make draws compile per shape; a draw's kernel compiled per shape repeats a name.)
    draws = [n for n in c.names if "rng" in str(n) or "random" in str(n) or "permutation" in str(n)]
    assert len(draws) <= 1 and len(set(c.names)) == len(c.names), c.names


_INITS = [
    ("normal_", lambda w: init.normal_(w, 0.5, 2.0), 0.5, 4.0),
    ("uniform_", lambda w: init.uniform_(w, -1.0, 3.0), 1.0, 16 / 12),
    ("xavier_uniform_", lambda w: init.xavier_uniform_(w, gain=2.0), 0.0, 4.0 * 2 / (600 + 400)),
    ("xavier_normal_", lambda w: init.xavier_normal_(w), 0.0, 2 / (600 + 400)),
    ("msra_uniform_", lambda w: init.msra_uniform_(w, a=math.sqrt(5)), 0.0, 2 / (1 + 5) / 400),
    ("msra_normal_", lambda w: init.msra_normal_(w, mode="fan_out", nonlinearity="relu"), 0.0, 2 / 600),
]


@pytest.mark.parametrize("name, fill, mean, var", _INITS, ids=[i[0] for i in _INITS])
def test_initialiser_moments(name, fill, mean, var):
    w = megxla.Parameter(np.zeros((600, 400), "float32"))
    fill(w)
    x = w.numpy().astype(np.float64).ravel()
    assert w.dtype == np.float32 and w.shape == (600, 400)
    assert abs(x.mean() - mean) < 5 * math.sqrt(var / x.size) + 1e-6, (x.mean(), mean)
    assert abs(x.var() / var - 1) < 0.01, (x.var(), var)
    skew = ((x - x.mean()) ** 3).mean() / x.std() ** 3
    assert abs(skew) < 0.02
    if "uniform" in name:
        half = math.sqrt(3 * var)
        assert x.min() >= mean - half - 1e-6 and x.max() <= mean + half + 1e-6
    else:  # normal: excess kurtosis 0
        assert abs(((x - x.mean()) ** 4).mean() / x.var() ** 2 - 3) < 0.05


def test_constant_initialisers_and_dtypes():
    w = megxla.Parameter(np.zeros((3, 4), "float16"))
    init.fill_(w, 2.5)
    assert w.dtype == np.float16 and (w.numpy() == 2.5).all()
    init.ones_(w)
    assert (w.numpy() == 1).all()
    init.zeros_(w)
    assert (w.numpy() == 0).all()
    init.normal_(w, 0.0, 0.1)
    assert w.dtype == np.float16 and 0 < float(np.abs(w.numpy()).max()) < 1


def test_initialiser_draws_advance_the_seeded_global_state():
    R.seed(11)
    a, b = megxla.Parameter(np.zeros((5, 5), "float32")), megxla.Parameter(np.zeros((5, 5), "float32"))
    init.normal_(a)
    init.normal_(b)
    assert not np.array_equal(a.numpy(), b.numpy())  # consecutive draws differ
    R.seed(11)
    c = megxla.Parameter(np.zeros((5, 5), "float32"))
    init.normal_(c)
    np.testing.assert_array_equal(a.numpy(), c.numpy())


def test_initialisers_inside_a_trace_are_recorded_ops():
    from megxla.jit import xla_trace
    lin = M.Linear(4, 3)

    @xla_trace
    def reinit(m):
        init.normal_(m.weight, 0.0, 1.0)
        init.uniform_(m.bias, 2.0, 3.0)
        return m.weight * 1

    outs = []
    for _ in range(3):
        outs.append(reinit(lin).numpy())
        np.testing.assert_array_equal(outs[-1], lin.weight.numpy())  # written back as state
        assert ((lin.bias.numpy() >= 2) & (lin.bias.numpy() < 3)).all()
    assert not np.array_equal(outs[1], outs[2])  # a fresh draw on every compiled call, not a baked constant


def test_bad_arguments_leave_the_tensor_unchanged():
    w = megxla.Parameter(np.ones((2, 2), "float32"))
    state = R.get_rng_state().numpy().copy()
    with pytest.raises(ValueError, match="std"):
        init.normal_(w, 0.0, -1.0)
    with pytest.raises(ValueError, match="a >= b"):
        init.uniform_(w, 1.0, 1.0)
    assert (w.numpy() == 1).all()
    np.testing.assert_array_equal(R.get_rng_state().numpy(), state)


_BUILD = textwrap.dedent("""
    import hashlib, sys
    import megxla, megxla.module as M
    megxla.random.seed(int(sys.argv[1]))
    net = M.Sequential(M.Conv2d(3, 8, 3), M.BatchNorm2d(8), M.Linear(8, 5), M.Embedding(7, 4))
    h = hashlib.sha256()
    for name, p in sorted(net.named_parameters()):
        h.update(name.encode()); h.update(p.numpy().tobytes())
    print(h.hexdigest())
""")


def _params_digest(seed):
    env = dict(os.environ, MEGXLA_COMPILATION_CACHE="0")
    out = subprocess.run([sys.executable, "-c", _BUILD, str(seed)], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_same_seed_same_parameters_in_two_processes():
    a, b, c = _params_digest(5), _params_digest(5), _params_digest(6)
    assert a == b
    assert a != c


def test_second_eager_step_compiles_nothing():
    # Initial values are placed like the tensors they replace (uncommitted on the default device): JAX compiles
    # separately for committed and uncommitted arguments, so committed initial parameters made the second
    # step of a fresh model recompile every kernel that reads a parameter or a running statistic.
    import megxla.functional as F
    import megxla.optimizer as optim
    from megxla.autodiff import GradManager
    net = M.Sequential(M.Conv2d(2, 3, 3), M.BatchNorm2d(3))
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(net.parameters())
    x = megxla.Tensor(np.random.RandomState(0).randn(2, 2, 5, 5).astype("float32"))
    counts = []
    for _ in range(3):
        with _counter as c:
            with gm:
                loss = F.relu(net(x)).mean() + R.normal(size=(3,)).sum() * 0
                gm.backward(loss)
            opt.step().clear_grad()
            loss.numpy()
        counts.append(c.n)
    # On an accelerator the first draws of a random op (per shape, counted in the process) are made on the host
    # (no compile on a cold start) and then the op's device kernel takes over (core/ops/random.py,
    # _EXACT_AFTER): one compile, once, in whichever step makes that draw.
    import jax
    allowed = 1 if jax.default_backend() != "cpu" else 0
    assert counts[1] + counts[2] <= allowed, counts
