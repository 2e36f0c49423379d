"""``megxla.save`` / ``megxla.load``: loading never runs code from a file by default; checkpoints round-trip.

Malicious pickles (os.system, subprocess, eval/exec, getattr tricks, a NumPy object array, nested in a state dict)
are refused by default, naming the class and the opt-in; with ``weights_only=False`` or ``MEGXLA_LOAD_UNSAFE=1``
they run (the harmless side effect: a file created in ``tmp_path``).
"""
import collections
import copy
import io
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import megxla as mge
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager


def _bytes(obj):
    return pickle.dumps(obj, protocol=4)


class _OsSystem:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


class _Subprocess:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return subprocess.check_call, (["touch", str(self.path)],)


class _Exec:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return exec, (f"open({str(self.path)!r}, 'w').close()",)


class _Open:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):  # a builtin that is not a constructor of data
        return open, (str(self.path), "w")


def _getattr_trick(path):
    """``getattr(__import__('os'), 'system')('touch path')`` written with raw opcodes (no class needed)."""
    return (b"\x80\x04cbuiltins\ngetattr\n(cbuiltins\n__import__\n(Vos\ntRVsystem\ntR(V"
            + f"touch {path}".encode() + b"\ntR.")


def _payloads(path):
    return {
        "os.system": _bytes(_OsSystem(path)),
        "subprocess": _bytes(_Subprocess(path)),
        "exec": _bytes(_Exec(path)),
        "open": _bytes(_Open(path)),
        "getattr-import": _getattr_trick(path),
        "nested-in-state-dict": _bytes({"state_dict": collections.OrderedDict(w=np.ones(2), evil=[_OsSystem(path)]),
                                        "epoch": 1}),
        "numpy-object-array": _bytes({"a": np.array([_OsSystem(path), 1], dtype=object)}),
        "in-tuple-value": _bytes({("k", 1): (1, _Exec(path))}),
    }


PAYLOAD_NAMES = list(_payloads("x"))


@pytest.mark.parametrize("kind", PAYLOAD_NAMES)
def test_malicious_pickle_refused_by_default(tmp_path, kind, monkeypatch):
    monkeypatch.delenv("MEGXLA_LOAD_UNSAFE", raising=False)
    target = tmp_path / "pwned"
    data = _payloads(target)[kind]
    with pytest.raises(pickle.UnpicklingError, match=r"refusing to load .*weights_only=False.*MEGXLA_LOAD_UNSAFE=1"):
        mge.load(io.BytesIO(data))
    f = tmp_path / "evil.pkl"
    f.write_bytes(data)
    with pytest.raises(pickle.UnpicklingError, match="refusing to load"):
        mge.load(str(f))
    assert not target.exists()


@pytest.mark.parametrize("kind", ["os.system", "subprocess", "getattr-import", "nested-in-state-dict"])
@pytest.mark.parametrize("opt_in", ["argument", "environment"])
def test_malicious_pickle_runs_only_with_opt_in(tmp_path, kind, opt_in, monkeypatch):
    target = tmp_path / "pwned"
    f = tmp_path / "evil.pkl"
    f.write_bytes(_payloads(target)[kind])
    if opt_in == "argument":
        mge.load(str(f), weights_only=False)
    else:
        monkeypatch.setenv("MEGXLA_LOAD_UNSAFE", "1")
        mge.load(str(f))
    assert target.exists()


def test_error_names_the_class():
    with pytest.raises(pickle.UnpicklingError, match=r"posix\.system|os\.system"):
        mge.load(io.BytesIO(_bytes(_OsSystem("/nonexistent/x"))))
    with pytest.raises(pickle.UnpicklingError, match=r"megxla\.module\.linear\.Linear"):
        mge.load(io.BytesIO(_bytes(M.Linear(2, 3))))  # a whole Module is not data


def test_custom_pickle_module_needs_opt_in():
    with pytest.raises(ValueError, match="weights_only=False"):
        mge.load(io.BytesIO(_bytes(1)), pickle_module=types_pickle_module())
    assert mge.load(io.BytesIO(_bytes(1)), pickle_module=types_pickle_module(), weights_only=False) == 1


def types_pickle_module():
    import types
    m = types.ModuleType("mypickle")
    m.load, m.dump = pickle.load, pickle.dump
    return m


# ---- round trips under the default -----------------------------------------------------------------------------------
class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(1, 2, 3)
        self.bn = M.BatchNorm2d(2)
        self.fc = M.Linear(2, 3)

    def forward(self, x):
        return self.fc(self.bn(self.conv(x)).mean(axis=(2, 3)))


def _trained():
    mge.random.seed(0)
    net = Net()
    opts = [optim.SGD(net.parameters(), lr=0.1, momentum=0.9), optim.Adam(net.parameters(), lr=0.01)]
    gm = GradManager().attach(net.parameters())
    x = mge.Tensor(np.random.default_rng(0).standard_normal((2, 1, 5, 5)).astype("float32"))
    for opt in opts:
        with gm:
            gm.backward((net(x) ** 2).mean())
        opt.step().clear_grad()
    return net, opts, x


def _equal(a, b):
    if isinstance(a, mge.Tensor):
        assert type(a) is type(b) and a.dtype == b.dtype
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b)
        for k in a:
            _equal(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _equal(x, y)
    else:
        assert a == b and type(a) is type(b)


def test_checkpoint_dicts_round_trip(tmp_path):
    net, (sgd, adam), x = _trained()
    ckpt = {"epoch": 3, "state_dict": net.state_dict(), "vars": net.state_dict(keep_var=True),
            "sgd": sgd.state_dict(), "adam": adam.state_dict(), "adam_vars": adam.state_dict(keep_var=True),
            "lr": 0.1, "name": "resnet", "shape": (1, 2), "tags": {"a", "b"}, "frozen": frozenset([1]), "none": None,
            "flag": True, "np_int": np.int64(7), "np_f": np.float32(0.5), "c": 1 + 2j, "raw": b"\x00\x01",
            "dd": collections.defaultdict(list, {"k": [1]}),
            "tensors": [mge.Tensor([1, 2], dtype="int32"), mge.Tensor([True]), mge.Tensor([1.5], dtype="float16"),
                        mge.Tensor(np.arange(4, dtype="uint8").reshape(2, 2)), mge.Tensor([1.5], dtype="bfloat16")]}
    path = tmp_path / "ckpt.pkl"
    mge.save(ckpt, path)
    back = mge.load(path)
    _equal(ckpt, back)
    fresh = Net()
    fresh.load_state_dict(back["state_dict"], strict=True)
    net.eval(); fresh.eval()  # noqa: E702
    np.testing.assert_array_equal(net(x).numpy(), fresh(x).numpy())
    opt2 = optim.Adam(fresh.parameters(), lr=0.5)
    opt2.load_state_dict(back["adam"])
    assert opt2.param_groups[0]["lr"] == 0.01
    # file objects and protocol 2 (bytes via codecs.encode) too
    for proto in (2, 4, 5):
        buf = io.BytesIO()
        mge.save(ckpt["sgd"], buf, pickle_protocol=proto)
        _equal(ckpt["sgd"], mge.load(io.BytesIO(buf.getvalue())))


def test_files_of_plain_pickle_and_earlier_megxla_load():
    t = mge.Parameter(np.arange(3, dtype="float32"))
    back = mge.load(io.BytesIO(pickle.dumps({"w": t, "a": np.ones((2, 2), "float32")}, protocol=5)))
    assert type(back["w"]) is mge.Parameter
    np.testing.assert_array_equal(back["w"].numpy(), t.numpy())


def test_map_location_and_save_errors(tmp_path):
    buf = io.BytesIO()
    mge.save({"w": mge.Tensor([1.0])}, buf)
    asked = []
    for loc in ("cpu0", {"xpux": "cpu0"}, lambda dev: asked.append(dev) or "cpu0"):
        got = mge.load(io.BytesIO(buf.getvalue()), map_location=loc)
        assert "cpu0" in repr(got["w"].device) and type(got["w"]) is mge.Tensor
        np.testing.assert_array_equal(got["w"].numpy(), [1.0])
    assert asked == ["xpux:0"]  # the callable gets the device name the file names (with its stream, as MegEngine)
    with pytest.raises(TypeError, match="map_location"):
        mge.load(io.BytesIO(buf.getvalue()), map_location=3)
    with pytest.raises(TypeError, match="binary file object"):
        mge.save({}, 3)
    path = tmp_path / "bad.pkl"
    with pytest.raises(Exception):
        mge.save({"ok": 1, "bad": lambda: 0}, path)  # unpicklable
    assert not path.exists()  # nothing half-written (the file is made only once pickled in full)


def test_deepcopy_and_save_keep_64_bit_dtypes():
    """Issue 9.7: with JAX's x64 mode on, int64 / float64 tensors keep their dtype through save/load and
    deepcopy (run in a subprocess: x64 is process-global)."""
    code = textwrap.dedent("""
        import copy, io, numpy as np, megxla as mge
        t = mge.Tensor(np.array([2**40, -3]), dtype="int64")
        f = mge.Parameter(np.array([1e-300, 0.1]), dtype="float64")
        assert t.dtype == np.int64 and f.dtype == np.float64
        buf = io.BytesIO(); mge.save({"t": t, "f": f}, buf)
        back = mge.load(io.BytesIO(buf.getvalue()))
        for a, b in ((t, back["t"]), (f, back["f"]), (t, copy.deepcopy(t)), (f, copy.deepcopy(f)),
                     (t, pickle_rt(t))):
            assert a.dtype == b.dtype and type(a) is type(b), (a.dtype, b.dtype)
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        print("ok", back["t"].numpy()[0])
    """).replace("pickle_rt(t)", "__import__('pickle').loads(__import__('pickle').dumps(t))")
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["ok", str(2 ** 40)]


def test_deepcopy_keeps_dtype_and_values():
    t = mge.Tensor(np.array([1, 2], dtype="int16"))
    c = copy.deepcopy(t)
    assert c.dtype == np.int16 and c is not t
    np.testing.assert_array_equal(c.numpy(), t.numpy())


def test_docstring_examples():
    import doctest
    import megxla._serialization as ser
    res = doctest.testmod(ser, extraglobs={"mge": mge}, optionflags=doctest.ELLIPSIS)
    assert res.failed == 0 and res.attempted >= 5


def test_a_save_that_fails_leaves_the_checkpoint_there_whole(tmp_path, monkeypatch):
    """``open(path, "wb")`` truncated the last good checkpoint before pickling: an unpicklable object (or Ctrl-C,
    or a full disk) left 0 bytes where it was. The new file is written beside it and moved there."""
    path = tmp_path / "ckpt.pkl"
    model = M.Linear(4, 3)
    mge.save(model.state_dict(), path)
    os.chmod(path, 0o640)
    good = path.read_bytes()
    link = tmp_path / "latest.pkl"
    os.symlink(path, link)
    with pytest.raises(Exception):
        mge.save({"w": model.weight, "bad": lambda: None}, str(link))  # (a lambda does not pickle)
    assert path.read_bytes() == good and os.path.islink(link)
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pkl", "latest.pkl"]  # (no temporary file left)
    model.weight._reset(mge.Tensor(np.ones((3, 4), "float32")))
    mge.save(model.state_dict(), link)  # (through the link: the checkpoint is replaced, the link kept)
    assert os.path.islink(link) and oct(os.stat(path).st_mode & 0o777) == oct(0o640)
    np.testing.assert_array_equal(mge.load(str(path))["weight"], np.ones((3, 4), "float32"))
    mge.save(model.state_dict(), os.devnull)  # (not a regular file: written in place)
    new = tmp_path / "new.pkl"
    mge.save(model.state_dict(), os.fsencode(new))  # (a bytes path; the umask's mode, as open() gives)
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(new).st_mode & 0o777 == 0o666 & ~umask
