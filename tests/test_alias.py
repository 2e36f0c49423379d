"""The opt-in ``megengine`` alias: ``import megxla.as_megengine`` and ``python -m megxla.run``.

A small multi-file MegEngine-style project (a package importing ``megengine.module as M`` in several modules, a
training script with ``megengine.data`` + ``DataLoader(num_workers=2)``, ``megengine.jit.trace``,
``mge.save``/``mge.load``, a spawned child process) is written by the test, run unmodified through both forms,
and its results compared with the same code written against megxla directly.
"""
import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

import megxla
import megxla._alias as alias

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LAYERS = '''
import megengine.module as M
import megengine.functional as F


class Block(M.Module):
    def __init__(self, i, o):
        super().__init__()
        self.fc = M.Linear(i, o)
        self.bn = M.BatchNorm1d(o)

    def forward(self, x):
        return F.relu(self.bn(self.fc(x)))
'''

MODEL = '''
import megengine.module as M
from megengine.module import Linear

from .layers import Block


class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.body = M.Sequential(Block(4, 8), Block(8, 8))
        self.head = Linear(8, 3)

    def forward(self, x):
        return self.head(self.body(x))
'''

TRAIN = '''
import json
import multiprocessing as mp
import os
import subprocess
import sys

import numpy as np

import megengine as mge
import megengine.functional as F
import megengine.optimizer as optim
from megengine.autodiff import GradManager
from megengine.data import DataLoader, RandomSampler
from megengine.data.dataset import ArrayDataset
from megengine.jit import trace

from mynet.model import Net


def child(q):
    import megengine
    q.put(megengine.__name__ + ":" + type(megengine.Tensor([1.0])).__module__)


def main():
    out = sys.argv[1]
    mge.random.seed(0)
    np.random.seed(0)
    x = np.random.RandomState(0).randn(32, 4).astype("float32")
    y = (np.arange(32) % 3).astype("int32")
    loader = DataLoader(ArrayDataset(x, y), sampler=RandomSampler(ArrayDataset(x, y), batch_size=8, seed=1),
                        num_workers=2)
    net = Net()
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(net.parameters())

    @trace(symbolic=True)
    def step(data, label):
        with gm:
            loss = F.nn.cross_entropy(net(data), label)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    losses = []
    for _ in range(2):
        for data, label in loader:
            losses.append(float(step(mge.tensor(data), mge.tensor(label)).numpy()))
    ckpt = os.path.join(os.path.dirname(out), "ckpt.pkl")
    mge.save({"state_dict": net.state_dict(), "opt": opt.state_dict(), "epoch": 2}, ckpt)
    loaded = mge.load(ckpt)
    fresh = Net()
    fresh.load_state_dict(loaded["state_dict"], strict=True)
    net.eval(); fresh.eval()
    same = bool(np.array_equal(net(mge.tensor(x)).numpy(), fresh(mge.tensor(x)).numpy()))
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    spawned = q.get(timeout=120)
    p.join()
    sub = subprocess.run([sys.executable, "-c", "import megengine; print(megengine.__version__)"],
                         capture_output=True, text=True).stdout.strip()
    json.dump({"losses": losses, "same": same, "epoch": loaded["epoch"], "version": mge.__version__,
               "argv0": os.path.basename(sys.argv[0]), "main": __name__, "spawned": spawned, "sub": sub,
               "path0": os.path.realpath(sys.path[0])}, open(out, "w"))


if __name__ == "__main__":
    main()
'''


def _write_project(root, module_name="megengine"):
    def fix(src):
        return src.replace("megengine", module_name)
    os.makedirs(os.path.join(root, "mynet"), exist_ok=True)
    for rel, src in (("mynet/__init__.py", ""), ("mynet/layers.py", LAYERS), ("mynet/model.py", MODEL),
                     ("train.py", TRAIN)):
        with open(os.path.join(root, rel), "w") as f:
            f.write(fix(src))
    return root


def _env():
    env = {k: v for k, v in os.environ.items() if k not in (alias.ALIAS_ENV, alias.SHADOW_ENV)}
    # children must get the alias from megxla.run / as_megengine, not from a parent's alias directory
    env["PYTHONPATH"] = os.pathsep.join(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                        if p and p != alias.ALIAS_PATH)
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def _run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return r


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same project written against megxla directly, run with plain python."""
    root = _write_project(str(tmp_path_factory.mktemp("ref")), "megxla")
    out = os.path.join(root, "out.json")
    _run([PY, "train.py", out], root)
    return json.load(open(out))


@pytest.mark.parametrize("form", ["run_script", "run_module"])
def test_project_runs_unmodified_through_launcher(tmp_path, reference, form):
    root = _write_project(str(tmp_path / "proj"))
    out = str(tmp_path / "proj" / "out.json")
    if form == "run_script":
        # from another directory: the script's own directory must be what lets `import mynet` work
        _run([PY, "-m", "megxla.run", os.path.join(root, "train.py"), out], str(tmp_path))
    else:
        _run([PY, "-m", "megxla.run", "-m", "train", out], root)
    got = json.load(open(out))
    assert got["losses"] == reference["losses"]  # bit-identical to megxla run directly
    assert len(got["losses"]) == 8 and got["same"] is True and got["epoch"] == 2
    assert got["main"] == "__main__"
    assert got["argv0"] == "train.py"
    assert got["path0"] == os.path.realpath(root)
    assert got["version"] == megxla.__version__ and "megxla" in got["version"]
    # spawned multiprocessing child and a plain `python -c` subprocess both got the alias
    assert got["spawned"] == "megxla:megxla.core._tensor"
    assert got["sub"] == megxla.__version__


def test_project_runs_with_one_line_entry(tmp_path, reference):
    root = _write_project(str(tmp_path / "proj"))
    src = open(os.path.join(root, "train.py")).read()
    with open(os.path.join(root, "train.py"), "w") as f:
        f.write("import megxla.as_megengine  # the one added line\n" + src)
    out = os.path.join(root, "out.json")
    _run([PY, "train.py", out], root)
    got = json.load(open(out))
    assert got["losses"] == reference["losses"] and got["same"] is True
    assert got["spawned"] == "megxla:megxla.core._tensor"


def test_launcher_argv_and_exit_code(tmp_path):
    (tmp_path / "s.py").write_text(textwrap.dedent("""
        import sys, megengine
        print(repr(sys.argv), megengine.__name__)
        sys.exit(3)
    """))
    r = subprocess.run([PY, "-m", "megxla.run", str(tmp_path / "s.py"), "--lr", "0.1", "-m", "x"],
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert r.stdout.strip() == repr([str(tmp_path / "s.py"), "--lr", "0.1", "-m", "x"]) + " megxla"
    r = subprocess.run([PY, "-m", "megxla.run", str(tmp_path / "missing.py")], env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "missing.py" in r.stderr


@pytest.fixture
def installed():
    alias.install()
    yield
    alias.uninstall()


def test_same_module_objects_and_classes(installed):
    import megengine
    import megengine.functional as F
    import megengine.module as M
    from megengine.jit import xla_trace
    from megengine.module import Conv2d

    assert megengine is megxla and F is megxla.functional and M is megxla.module
    assert Conv2d is megxla.module.Conv2d and xla_trace is megxla.jit.xla_trace
    assert sys.modules["megengine.module"] is sys.modules["megxla.module"]
    # megxla's own module identity is untouched (multiprocessing and pickle read __spec__.name)
    assert megxla.functional.__spec__.name == "megxla.functional"
    assert isinstance(megengine.Tensor([1.0]), megxla.Tensor)
    assert megengine.__version__.startswith("1.13.0+megxla.")


def test_missing_path_names_it(installed):
    with pytest.raises(ImportError, match=r"megengine\.no_such_thing.*megxla answers"):
        import megengine.no_such_thing  # noqa: F401
    with pytest.raises(ImportError, match="megxla"):
        from megengine.module import no_such_module  # noqa: F401


def test_uninstall_restores(installed):
    import megengine  # noqa: F401
    assert os.environ[alias.ALIAS_ENV] == "1" and alias.ALIAS_PATH in os.environ["PYTHONPATH"]
    alias.uninstall()
    assert "megengine" not in sys.modules and not alias.is_installed()
    assert alias.ALIAS_PATH not in sys.path and alias.ALIAS_ENV not in os.environ
    with pytest.raises(ImportError):
        importlib.import_module("megengine")
    alias.install()  # the fixture uninstalls again


def test_real_megengine_is_not_shadowed(tmp_path, monkeypatch):
    fake = tmp_path / "site" / "megengine"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delenv(alias.SHADOW_ENV, raising=False)
    with pytest.raises(ImportError, match="real MegEngine is installed.*MEGXLA_SHADOW_MEGENGINE"):
        alias.install()
    assert not alias.is_installed() and alias.ALIAS_ENV not in os.environ
    alias.install(force=True)
    try:
        import megengine
        assert megengine is megxla
    finally:
        alias.uninstall()
    # and the launcher refuses too, unless --shadow
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path / "site"), env["PYTHONPATH"]) if p)
    (tmp_path / "s.py").write_text("import megengine; print(getattr(megengine, 'REAL', False))\n")
    r = subprocess.run([PY, "-m", "megxla.run", str(tmp_path / "s.py")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "real MegEngine" in r.stderr
    r = subprocess.run([PY, "-m", "megxla.run", "--shadow", str(tmp_path / "s.py")], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


def test_docstring_examples():
    import doctest
    import megxla.as_megengine
    for mod in (alias, megxla.as_megengine):
        res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
        assert res.failed == 0 and res.attempted > 0, mod.__name__
    assert not alias.is_installed()


def test_dist_launcher_ranks_inherit_the_alias(tmp_path):
    (tmp_path / "d.py").write_text(textwrap.dedent("""
        import megengine as mge
        import megengine.distributed as dist
        import megengine.functional as F


        def worker():
            import megengine
            y = F.distributed.all_reduce_sum(mge.Tensor([float(dist.get_rank() + 1)]))
            return megengine.__name__, float(y.numpy()[0])


        if __name__ == "__main__":
            print(dist.launcher(worker, n_gpus=2, device_type="cpu")())
    """))
    r = _run([PY, "-m", "megxla.run", str(tmp_path / "d.py")], str(tmp_path))
    assert r.stdout.strip().splitlines()[-1] == "[('megxla', 3.0), ('megxla', 3.0)]"


def test_importing_a_submodule_by_its_megengine_name_keeps_the_packages_names(tmp_path):
    # ``import megengine.distributed.launcher`` must not rebind ``dist.launcher`` (the class) to the module of
    # the same name, as Python's import does for a submodule it loads (the same for autocast and quantize)
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import megengine.distributed.launcher, megengine.amp.autocast, megengine.quantization.quantize
        import megengine.distributed as dist, megengine.amp as amp
        from megengine.quantization import quantize
        print(type(dist.launcher).__name__, type(amp.autocast).__name__, type(quantize).__name__)
    """))
    r = _run([sys.executable, "-m", "megxla.run", str(script)], str(tmp_path))
    assert r.stdout.split() == ["type", "type", "function"]


def test_entering_the_aliases_survives_an_import_meanwhile(monkeypatch):
    # a module imported while the aliases are entered (another thread's import, a finalizer run by a garbage
    # collection): iterating over the live dict raised "dictionary changed size during iteration" in a zoo script
    class ImportingMeanwhile(dict):
        def items(self):
            live = super().items()

            def walk():
                for item in live:
                    self.setdefault("_megxla_imported_meanwhile", None)
                    yield item
            return walk()

    modules = ImportingMeanwhile(sys.modules)
    monkeypatch.setattr(sys, "modules", modules)
    alias._register_loaded()
    assert modules["megengine.functional"] is megxla.functional
