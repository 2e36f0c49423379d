"""Lowered programs and inferred op types kept across processes (``jit/_persist.py``): a warm start of an auto-jit
program neither traces its ops for their types nor lowers its clusters, and computes what a cold start computes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from megxla.core._op import Primitive
from megxla.jit import _persist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PROGRAM = textwrap.dedent("""
    import json, sys
    import numpy as np
    import megxla as mge, megxla.functional as F, megxla.module as M, megxla.optimizer as optim
    from megxla.autodiff import GradManager
    from megxla.jit import _persist

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.body = M.Sequential(M.Conv2d(1, 4, 3, padding=1, bias=False), M.BatchNorm2d(4), M.ReLU(),
                                     M.Dropout(0.3))
            self.fc = M.Linear(4 * 8 * 8, 10)

        def forward(self, x):
            # (``-x`` and ``detach``: primitives whose implementation is JAX's own function -- jnp.negative,
            # lax.stop_gradient -- are kept too)
            h = self.body(-x)
            return self.fc(F.flatten(-h + h.detach() * 0.5, 1))

    def train(auto):
        mge.config.auto_jit = auto
        mge.random.seed(0)
        net = Net()
        opt = optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        gm = GradManager().attach(net.parameters())
        rng = np.random.RandomState(1)
        losses = []
        for _ in range(4):
            x = mge.Tensor(rng.standard_normal((4, 1, 8, 8)).astype("float32"))
            y = mge.Tensor(rng.randint(0, 10, 4).astype("int32"))
            with gm:
                loss = F.nn.cross_entropy(net(x), y)
                gm.backward(loss)
            opt.step().clear_grad()
            # (the dtype a value of a cluster promotes to, as eager gives it)
            half = (loss * 0.5 + mge.Tensor(np.zeros((), "float16"))).dtype
            losses.append(float(loss.item()))
        return losses, str(half), [p.numpy().tolist() for p in net.parameters()]

    auto = train(True)
    mge.config.auto_jit = False
    eager = train(False)
    print("RESULT " + json.dumps({"auto": auto, "eager": eager, "stats": _persist.stats}))
""")


def _run(cache_dir, extra_env=None):
    # (no timed choices -- an early launch's cut, a small step run eagerly -- so that both processes make the same
    # clusters: under a loaded CI one warm run stored a program its cold run had not made)
    env = dict(os.environ, MEGXLA_COMPILATION_CACHE="1", MEGXLA_COMPILATION_CACHE_DIR=cache_dir,
               PYTHONPATH=ROOT, MEGXLA_AUTO_JIT="0", MEGXLA_AUTO_JIT_EARLY="0", MEGXLA_AUTO_JIT_STATIC_TIMER="0",
               **(extra_env or {}))
    out = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_warm_start_uses_kept_programs_and_computes_the_same(tmp_path):
    cold = _run(str(tmp_path))
    warm = _run(str(tmp_path))
    assert cold["stats"]["stored"] >= 1 and cold["stats"]["hits"] == 0
    assert warm["stats"]["hits"] >= 1 and warm["stats"]["stored"] == 0 and warm["stats"]["failed"] == 0
    assert cold["stats"]["skipped"] == warm["stats"]["skipped"] == 0  # every cluster has a key
    assert warm["stats"]["shapes_known"] > 0  # the ops were not traced for their types
    # same numbers as the cold start (the same executable) and as eager, and the same dtypes
    assert warm["auto"] == cold["auto"]
    np.testing.assert_allclose(warm["auto"][0], warm["eager"][0], rtol=1e-5)
    assert warm["auto"][1] == warm["eager"][1]
    for a, e in zip(warm["auto"][2], warm["eager"][2]):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-6)
    # switched off: nothing kept, nothing read
    off = _run(str(tmp_path / "off"), {"MEGXLA_LOWERED_CACHE": "0"})
    assert off["stats"]["hits"] == off["stats"]["stored"] == 0
    assert not os.path.exists(tmp_path / "off" / _persist.SUBDIR)


@pytest.fixture
def cache_dir(tmp_path):
    saved = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    try:
        yield tmp_path
    finally:
        jax.config.update("jax_compilation_cache_dir", saved)


def test_weak_types_of_outputs_survive_the_stored_program(cache_dir):
    structs = [jax.ShapeDtypeStruct((), jnp.float32, weak_type=True), jax.ShapeDtypeStruct((3,), jnp.float32)]

    def replay(a, b):
        return a * 2, b + 1

    key = "0" * 64
    first = _persist.compile_cached(replay, structs, (1,), "t", key)
    assert os.path.exists(os.path.join(str(cache_dir), _persist.SUBDIR, key + ".exported"))
    hits = _persist.stats["hits"]
    second = _persist.compile_cached(replay, structs, (1,), "t", key)  # read back from the file
    assert _persist.stats["hits"] == hits + 1
    for exe in (first, second):
        a, b = exe(jnp.asarray(3.0), jnp.ones(3))
        assert a.weak_type and not b.weak_type
        # not committed, as the results of the program lowered from Python (eager dispatch keys on it)
        assert not a.committed and not b.committed
        assert float(a) == 6.0 and b.tolist() == [2.0, 2.0, 2.0]


def test_a_damaged_file_is_lowered_again_and_replaced(cache_dir):
    structs = [jax.ShapeDtypeStruct((2,), jnp.float32)]
    key = "1" * 64
    path = os.path.join(str(cache_dir), _persist.SUBDIR, key + ".exported")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"\x05\x00\x00\x00{bad}garbage")
    exe = _persist.compile_cached(lambda x: (x - 1,), structs, (), "t", key)
    assert exe(jnp.ones(2))[0].tolist() == [0.0, 0.0]
    head, _ = _persist._read(path)  # a valid program now
    assert head["format"] == 1


def _user_impl(x):
    return x * 3


def test_programs_with_a_users_primitive_or_function_parameter_have_no_key():
    from megxla.core._op import PRIMITIVES
    add = PRIMITIVES["add"].bind()
    f32 = [((2,), np.dtype("float32"), False)] * 2
    k = _persist.fingerprint([(add, (0, 1), (2,))], [0, 1], f32, (2,), ())
    assert k is not None
    # the same program under other value ids is the same key
    assert k == _persist.fingerprint([(add, (5, 3), (9,))], [5, 3], f32, (9,), ())
    # a different op order, input type, output set, donation or replay is a different key
    assert k != _persist.fingerprint([(add, (1, 0), (2,))], [0, 1], f32, (2,), ())
    assert k != _persist.fingerprint([(add, (0, 1), (2,))], [0, 1], [((2,), np.dtype("float16"), False)] * 2, (2,), ())
    assert k != _persist.fingerprint([(add, (0, 1), (2,))], [0, 1], [((2,), np.dtype("float32"), True)] * 2, (2,), ())
    assert k != _persist.fingerprint([(add, (0, 1), (2,))], [0, 1], f32, (2,), (0,))
    assert k != _persist.fingerprint([(add, (0, 1), (2,))], [0, 1], f32, (2, 0), ())
    assert k != _persist.fingerprint([(add, (0, 1), (2,))], [0, 1], f32, (2,), (), "other replay")
    # a setting JAX lowers differently under is part of the key, read at every key (a program may change it)
    saved = jax.config.jax_default_matmul_precision
    try:
        jax.config.update("jax_default_matmul_precision", "bfloat16")
        assert k != _persist.fingerprint([(add, (0, 1), (2,))], [0, 1], f32, (2,), ())
    finally:
        jax.config.update("jax_default_matmul_precision", saved)
    assert k == _persist.fingerprint([(add, (0, 1), (2,))], [0, 1], f32, (2,), ())
    mine = PRIMITIVES.get("test_lowered_cache_triple") or Primitive("test_lowered_cache_triple", _user_impl)
    assert _persist.fingerprint([(mine.bind(), (0,), (1,))], [0], f32[:1], (1,), ()) is None
    # every primitive of megxla's registry has a key, those whose implementation is JAX's own function too
    # (``neg`` is jnp.negative); such a function is named in the key: a user's primitive of jnp.sin in one process
    # is not the same program as one of jnp.cos under that name in another
    # (in a process of its own: other tests register primitives of their own in this one)
    code = ("import sys; sys.path.insert(0, %r); import megxla, megxla.functional, megxla.random, megxla.module;"
            "from megxla.core._op import PRIMITIVES; from megxla.jit import _persist\n"
            "def keyed(p):\n"
            "    try:\n"
            "        _persist._prim(p, [])\n"
            "        return True\n"
            "    except _persist._Unstable:\n"
            "        return False\n"
            "print(len(PRIMITIVES), [n for n, p in PRIMITIVES.items() if not keyed(p)])" % ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    count, unkeyed = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(count) > 150 and unkeyed == "[]"
    text = []
    _persist._prim(PRIMITIVES["neg"], text)
    assert text == ["impl:jax.numpy.negative;"]
    sin = PRIMITIVES.get("test_lowered_cache_sin") or Primitive("test_lowered_cache_sin", jnp.sin)
    assert "impl:jax.numpy.sin;" in _persist._text(sin.bind())
    assert _persist.fingerprint([(sin.bind(), (0,), (1,))], [0], f32[:1], (1,), ()) is not None
    # an op parameter that is a user's function (or a closure) means nothing in another process
    k2 = lambda x: x  # noqa: E731
    assert _persist._op_text(PRIMITIVES["add"].bind()) is not None
    with pytest.raises(_persist._Unstable):
        _persist._text(k2)
    with pytest.raises(_persist._Unstable):
        _persist._text(_user_impl)
    # -0.0 and 0.0 are different parameters
    assert _persist._text(-0.0) != _persist._text(0.0)


def test_xla_trace_steps_compile_from_kept_programs_and_can_still_show_their_stablehlo(cache_dir):
    import megxla as mge
    import megxla.functional as F
    import megxla.module as M
    import megxla.optimizer as optim
    from megxla.autodiff import GradManager
    from megxla.jit import xla_trace

    def run():
        mge.random.seed(3)
        net = M.Linear(4, 3)
        opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        gm = GradManager().attach(net.parameters())

        @xla_trace
        def step(net, opt, x):
            with gm:
                loss = F.relu(net(x)).mean()
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

        x = mge.Tensor(np.arange(8, dtype="float32").reshape(2, 4) / 8)
        losses = [float(step(net, opt, x).item()) for _ in range(3)]
        return losses, net.weight.numpy(), step

    hits = _persist.stats["hits"]
    first, w1, _ = run()
    second, w2, step = run()  # a new trace of the same step: its program is read back, not lowered
    assert _persist.stats["hits"] > hits
    assert first == second
    np.testing.assert_array_equal(w1, w2)
    assert "dot_general" in step.compiler_ir("stablehlo")


def test_a_directory_that_cannot_be_written_compiles_all_the_same(cache_dir):
    blocker = os.path.join(str(cache_dir), _persist.SUBDIR)
    with open(blocker, "w") as fh:  # a file where the directory should be: nothing can be kept
        fh.write("x")
    failed = _persist.stats["failed"]
    exe = _persist.compile_cached(lambda x: (x * 4,), [jax.ShapeDtypeStruct((2,), jnp.float32)], (), "t", "2" * 64)
    assert exe is not None and exe(jnp.ones(2))[0].tolist() == [4.0, 4.0]
    assert _persist.stats["failed"] == failed + 1


@pytest.mark.parametrize("ending", ["raise ValueError('step 0')", "sys.exit(3)", "pass"])
def test_a_program_ending_right_after_switching_auto_jit_on_exits_as_itself(tmp_path, ending):
    # (the background load still running as the program ends: the interpreter waits for it. As a daemon thread it
    # aborted the process at finalization -- SIGABRT, "Fatal Python error" -- instead of the traceback and status)
    program = f"import sys\nimport megxla as mge\nmge.config.auto_jit = True\n{ending}\n"
    env = dict(os.environ, PYTHONPATH=ROOT, MEGXLA_AUTO_JIT="0", MEGXLA_COMPILATION_CACHE_DIR=str(tmp_path),
               MEGXLA_COMPILATION_CACHE="1")
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == {"pass": 0, "sys.exit(3)": 3}.get(ending, 1), out.stderr[-3000:]
    assert "Fatal Python error" not in out.stderr
    if ending.startswith("raise"):
        assert out.stderr.rstrip().endswith("ValueError: step 0"), out.stderr[-3000:]


def test_switching_auto_jit_on_loads_what_a_kept_program_needs_in_the_background(tmp_path):
    # jax.export registers XLA:CPU's LAPACK handlers (importing SciPy, ~0.25 s) before it lowers the first kept
    # program: auto-jit switched on, or a trace made, starts that on a thread, off the first step's path
    program = textwrap.dedent("""
        import sys, threading, time
        import megxla as mge
        from megxla.jit import _persist
        assert "scipy.linalg" not in sys.modules
        mge.config.auto_jit = True
        if _persist._prewarm_started[0]:
            deadline = time.time() + 120
            while "scipy.linalg" not in sys.modules and time.time() < deadline:
                time.sleep(0.01)
            for t in threading.enumerate():
                if t.name == "megxla-prewarm":
                    t.join()
            print("PREWARMED", "scipy.linalg" in sys.modules)
        mge.config.auto_jit = False
    """)
    for cache, expected in ((True, "PREWARMED True"), (False, "")):
        env = dict(os.environ, PYTHONPATH=ROOT, MEGXLA_AUTO_JIT="0", MEGXLA_COMPILATION_CACHE_DIR=str(tmp_path),
                   MEGXLA_COMPILATION_CACHE="1" if cache else "0")
        out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.strip() == expected  # (no kept programs without JAX's cache: no thread)


def test_a_process_forked_while_the_prewarm_thread_runs_compiles_its_kept_programs(tmp_path):
    # dist.launcher (and a DataLoader worker) fork: forked while the prewarm thread imported SciPy, the child
    # inherited the locks it held, and its first kept program hung for ever in initialize_lapack (rank 0 of a
    # launcher under auto-jit, on the second run: the first stored the programs)
    program = textwrap.dedent("""
        import os, signal, sys, time
        import numpy as np
        import megxla as mge, megxla.functional as F
        mge.config.auto_jit = True  # (starts the prewarm thread)
        pid = os.fork()
        if pid == 0:
            x = mge.Tensor(np.ones((4, 4), "float32"))
            total = 0.0
            for _ in range(4):
                total += float((F.exp(x) * 2 + 1).sum())
            print("CHILD", total, flush=True)
            os._exit(0)
        deadline = time.time() + 120
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                print("STATUS", status)
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            print("HUNG")
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, MEGXLA_AUTO_JIT="0", MEGXLA_COMPILATION_CACHE_DIR=str(tmp_path),
               MEGXLA_COMPILATION_CACHE="1")
    for run in ("stores", "loads"):
        out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "STATUS 0" in out.stdout and "CHILD 411.94" in out.stdout, (run, out.stdout, out.stderr[-3000:])
