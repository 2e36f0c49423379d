"""The launcher takes what MegEngine's takes, in real scripts run as subprocesses on 2 CPU processes: a decorated
module-level worker without a main guard (the XLA guide's script), a nested function, a closure, a lambda,
functools.partial, a bound method, ``python -c``; a raising rank fails the launcher with its traceback. Also
MGE_VERBOSE_XLA_IR and executables named after the traced function."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import megxla as mge
from megxla.jit import xla_trace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code, tmp_path, *extra):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(code))
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, str(path), *extra], capture_output=True, text=True, env=env, timeout=240,
                          cwd=str(tmp_path))


def test_guide_style_scripts(tmp_path):
    # One script, several launches: module-level decorated worker without a main guard, nested, closure, lambda,
    # partial and bound method.
    res = _run('''
        import functools
        import megxla as mge
        import megxla.distributed as dist
        import megxla.functional as F

        @dist.launcher(n_gpus=2, device_type="cpu")
        def worker():
            def runner():   # nested, as in the guide
                return F.distributed.all_reduce_sum(mge.Tensor([dist.get_rank() + 1.0])).numpy().tolist()
            return runner()

        print("decorated", worker())

        def outer(k):
            def inner():
                return dist.get_rank() * k    # closure
            return inner

        print("closure", dist.launcher(outer(10), n_gpus=2, device_type="cpu")())
        print("lambda", dist.launcher(lambda a: a + dist.get_rank(), n_gpus=2, device_type="cpu")(5))
        print("partial", dist.launcher(functools.partial(pow, 2), n_gpus=2, device_type="cpu")(3))

        class Job:
            def __init__(self, k):
                self.k = k
            def run(self):
                return self.k + dist.get_world_size()

        print("method", dist.launcher(Job(7).run, n_gpus=2, device_type="cpu")())
        import sys
        spawned = lambda: sys.argv[0] == "-c"   # a fresh interpreter's argv; a forked child keeps the script's
        print("forked", dist.launcher(spawned, n_gpus=2, device_type="cpu")())
        mge.Tensor([1.0]) + 1   # this process now runs an XLA backend: no more forking
        print("spawned", dist.launcher(spawned, n_gpus=2, device_type="cpu")(),
              dist.launcher(outer(3), n_gpus=2, device_type="cpu")(), worker())
    ''', tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "decorated [[3.0], [3.0]]" in out
    assert "closure [0, 10]" in out
    assert "lambda [5, 6]" in out
    assert "partial [8, 8]" in out
    assert "method [9, 9]" in out
    assert "forked [False, False]" in out
    assert "spawned [True, True] [0, 3] [[3.0], [3.0]]" in out


def test_python_dash_c_and_raising_rank(tmp_path):
    code = ("import megxla.distributed as dist\n"
            "def f():\n"
            "    if dist.get_rank() == 1:\n"
            "        raise KeyError('bad shard')\n"
            "    return 1\n"
            "print(dist.launcher(lambda: dist.get_rank(), n_gpus=2, device_type='cpu')())\n"
            "dist.launcher(f, n_gpus=2, device_type='cpu')()\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                         env=dict(os.environ, PYTHONPATH=ROOT), cwd=str(tmp_path))
    assert "[0, 1]" in res.stdout
    assert res.returncode != 0
    assert "rank 1 failed" in res.stderr and "KeyError: 'bad shard'" in res.stderr and "Traceback" in res.stderr


def test_verbose_xla_ir_levels(monkeypatch, capsys):
    x = mge.Tensor(np.ones((2, 3), "float32"))
    for level, marker in (("1", "input  %"), ("2", "stablehlo"), ("3", "HloModule jit_my_step")):
        monkeypatch.setenv("MGE_VERBOSE_XLA_IR", level)

        @xla_trace
        def my_step(x):
            return (x * 2).sum()

        for _ in range(3):  # record, compile (prints once), run
            my_step(x)
        err = capsys.readouterr().err
        assert err.count("jit_my_step") >= 1 and marker in err, (level, err[:500])
        assert err.count("megxla: ") == 1, level
    monkeypatch.setenv("MGE_VERBOSE_XLA_IR", "1")
    assert "mul" in err or "multiply" in err or "HloModule" in err


def test_executable_named_after_function(tmp_path):
    res = _run('''
        import numpy as np
        import megxla as mge
        from megxla.jit import xla_trace

        @xla_trace
        def train_step_one(x):
            return (x + 1).sum()

        x = mge.Tensor(np.ones(3, "float32"))
        for _ in range(3):
            train_step_one(x)
        print("HLO", "jit_train_step_one" in train_step_one.compiler_ir("hlo"))
    ''', tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "HLO True" in res.stdout
    env = dict(os.environ, PYTHONPATH=ROOT, XLA_FLAGS=f"--xla_dump_to={tmp_path / 'dump'}")
    subprocess.run([sys.executable, str(tmp_path / "script.py")], env=env, check=True, timeout=240,
                   capture_output=True, cwd=str(tmp_path))
    names = os.listdir(tmp_path / "dump")
    assert any("jit_train_step_one" in n for n in names), names[:20]
