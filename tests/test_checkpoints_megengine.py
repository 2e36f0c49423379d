"""Checkpoints in MegEngine 1.13's format: files written as ``megengine.save`` writes them load into megxla models
with ``strict=True`` (with and without the ``megengine`` alias), and megxla's ``save`` writes files whose pickles
MegEngine's classes read.

MegEngine is not installed here, so the fixtures are written the way MegEngine writes them: its ``Tensor`` /
``Parameter`` live in ``megengine.tensor`` and pickle through ``__getnewargs__`` = ``(numpy(), dtype,
device.logical_name, False, False, None, format)`` plus ``__getstate__`` = ``{}`` (or ``{"qparams": ...}``), i.e. a
NEWOBJ opcode followed by BUILD (MegEngine 1.13, ``imperative/python/megengine/tensor.py``); its NumPy (1.x) names
``numpy.core.multiarray._reconstruct``; ``Module.state_dict()`` holds NumPy arrays (normalisation layers' flattened
to 1-D) and ``Optimizer.state_dict()`` is ``{"param_groups": [...], "state": {index: {slot: ndarray}}}``.
"""
import collections
import io
import pickle
import sys
import types

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim

RNG = np.random.default_rng(0)


# ---- a stand-in for MegEngine's pickling (only its pickle-visible behaviour) ---------------------------------------
class _MegEngineTensor:
    """Pickles exactly as MegEngine 1.13's ``megengine.tensor.Tensor`` (object.__reduce_ex__ with its
    ``__getnewargs__`` / ``__getstate__``)."""

    def __init__(self, data, dtype=None, device="xpux:0", qparams=None):
        self._data = np.asarray(data, dtype=dtype)
        self._device = device
        self._qparams = qparams

    def __getnewargs__(self):
        return (self._data, self._data.dtype, self._device, False, False, None, "default")

    def __getstate__(self):
        state = {}
        if self._qparams is not None:
            state["qparams"] = self._qparams
        return state


class _MegEngineParameter(_MegEngineTensor):
    pass


class _NumPy1Pickler(pickle._Pickler):
    """Writes NumPy's array reconstructor under NumPy 1.x's module name, as MegEngine's environment does."""

    def save_global(self, obj, name=None):
        if getattr(obj, "__module__", "").startswith("numpy._core") and self.proto >= 4:
            self.save(obj.__module__.replace("numpy._core", "numpy.core"))
            self.save(name or obj.__name__)
            self.write(pickle.STACK_GLOBAL)
            self.memoize(obj)
            return
        super().save_global(obj, name)


def megengine_save(obj):
    """``megengine.save(obj, f)`` (pickle protocol 4, MegEngine's default on Python 3.8-3.13) as bytes."""
    mod_tensor = types.ModuleType("megengine.tensor")
    saved = {k: sys.modules.get(k) for k in ("megengine", "megengine.tensor")}
    for cls, name in ((_MegEngineTensor, "Tensor"), (_MegEngineParameter, "Parameter")):
        cls.__module__, cls.__qualname__, cls.__name__ = "megengine.tensor", name, name
        setattr(mod_tensor, name, cls)
    pkg = types.ModuleType("megengine")
    pkg.tensor = mod_tensor
    sys.modules.update({"megengine": pkg, "megengine.tensor": mod_tensor})
    try:
        buf = io.BytesIO()
        _NumPy1Pickler(buf, protocol=4).dump(obj)
        return buf.getvalue()
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def test_fixture_is_what_megengine_writes():
    data = megengine_save({"w": _MegEngineParameter(np.ones(2, "float32"))})
    import pickletools
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(data)]
    names = [a for o, a in ops if o == "SHORT_BINUNICODE"]
    assert names[:3] == ["w", "megengine.tensor", "Parameter"]
    assert "numpy.core.multiarray" in names and "_reconstruct" in names
    assert any(o == "NEWOBJ" for o, _ in ops) and any(o == "BUILD" for o, _ in ops)
    assert "xpux:0" in names and "default" in names


# ---- a model covering the layouts that differ between frameworks -------------------------------------------------
class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(3, 4, 3, padding=1)
        self.bn = M.BatchNorm2d(4)
        self.fc = M.LinearBn1d(4, 5)
        self.rnn = M.LSTM(5, 3, num_layers=2, bidirectional=True)
        self.gru_like = M.RNN(5, 2)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x))).mean(axis=(2, 3))
        z = self.fc(y)
        out, (h, c) = self.rnn(F.expand_dims(z, 0))
        out2, _ = self.gru_like(F.expand_dims(z, 0))
        return out, out2


def megengine_state_dict():
    """The keys and shapes MegEngine 1.13's ``Net().state_dict()`` has (NumPy arrays), with random values."""
    def r(*shape):
        return RNG.standard_normal(shape).astype("float32") * 0.5
    sd = collections.OrderedDict()
    sd["bn.bias"], sd["bn.running_mean"], sd["bn.running_var"], sd["bn.weight"] = r(4), r(4), np.abs(r(4)) + 1, r(4)
    sd["conv.bias"], sd["conv.weight"] = r(1, 4, 1, 1), r(4, 3, 3, 3)
    sd["fc.bias"] = np.zeros(5, "float32")  # MegEngine's unused top-level bias of LinearBn1d
    sd["fc.bn.bias"], sd["fc.bn.running_mean"], sd["fc.bn.running_var"], sd["fc.bn.weight"] = (
        r(5), r(5), np.abs(r(5)) + 1, r(5))
    sd["fc.linear.bias"], sd["fc.linear.weight"] = r(5), r(5, 4)
    # LSTM(5, 3, 2 layers, bidirectional): G = 12, S = (5+3)*2 + (6+3)*2 + 2*2*2 = 42
    sd["gru_like._flatten_weights"] = r(2, 5 + 2 + 2)
    sd["gru_like.cells.0.0.bias_hh"], sd["gru_like.cells.0.0.bias_ih"] = r(2), r(2)
    sd["gru_like.cells.0.0.weight_hh"], sd["gru_like.cells.0.0.weight_ih"] = r(2, 2), r(2, 5)
    sd["rnn._flatten_weights"] = r(12, 42)
    for k in range(2):
        for d in range(2):
            p = f"rnn.cells.{k}.{d}."
            sd[p + "bias_hh"], sd[p + "bias_ih"] = r(12), r(12)
            sd[p + "weight_hh"], sd[p + "weight_ih"] = r(12, 3), r(12, 5 if k == 0 else 6)
    return sd


def np_lstm_from_megengine(flat, x, input_size, hidden, layers, bidirectional):
    """MegEngine's kernel semantics, from its flat weight layout (NumPy, one time step per row of x)."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    g, dirs = 4 * hidden, 2 if bidirectional else 1
    buf, pos = flat.astype(np.float64).ravel(), 0
    inp = x.astype(np.float64)
    for k in range(layers):
        outs = []
        in_k = input_size if k == 0 else dirs * hidden
        for d in range(dirs):
            w_ih = buf[pos:pos + g * in_k].reshape(g, in_k); pos += g * in_k  # noqa: E702
            w_hh = buf[pos:pos + g * hidden].reshape(g, hidden); pos += g * hidden  # noqa: E702
            b_ih, b_hh = buf[pos:pos + g], buf[pos + g:pos + 2 * g]; pos += 2 * g  # noqa: E702
            h = np.zeros((inp.shape[1], hidden)); c = np.zeros_like(h)  # noqa: E702
            ys = [None] * inp.shape[0]
            for t in (range(inp.shape[0] - 1, -1, -1) if d else range(inp.shape[0])):
                i, f, gg, o = np.split(inp[t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=-1)
                c = sig(f) * c + sig(i) * np.tanh(gg)
                h = sig(o) * np.tanh(c)
                ys[t] = h
            outs.append(np.stack(ys))
        inp = np.concatenate(outs, -1)
    assert pos == buf.size
    return inp


@pytest.fixture(params=["plain", "alias"])
def alias_mode(request):
    if request.param == "alias":
        import megxla._alias as alias
        alias.install(force=True)
        yield "alias"
        alias.uninstall()
    else:
        yield "plain"


@pytest.mark.parametrize("as_tensors", [False, True], ids=["numpy", "tensors"])
def test_megengine_state_dict_loads_strict(alias_mode, as_tensors):
    sd = megengine_state_dict()
    written = collections.OrderedDict(
        (k, (_MegEngineParameter(v) if as_tensors else v)) for k, v in sd.items())
    loaded = mge.load(io.BytesIO(megengine_save({"state_dict": written, "epoch": 3})))
    assert loaded["epoch"] == 3
    if as_tensors:
        assert all(type(v) is mge.Parameter for v in loaded["state_dict"].values())
    net = Net()
    assert set(net.state_dict()) == set(sd)  # same keys as MegEngine's Net
    net.load_state_dict(loaded["state_dict"], strict=True)
    got = net.state_dict()
    for k, v in sd.items():
        np.testing.assert_array_equal(got[k].reshape(v.shape), v, err_msg=k)
    # the flat LSTM weight means what it means in MegEngine: compare the LSTM against MegEngine's kernel semantics
    x = RNG.standard_normal((4, 2, 5)).astype("float32")
    net.eval()
    out, _ = net.rnn(mge.Tensor(x))
    ref = np_lstm_from_megengine(sd["rnn._flatten_weights"], x, 5, 3, 2, True)
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-5, rtol=1e-4)


def test_megengine_optimizer_state_loads(alias_mode):
    """SGD and Adam states in MegEngine's layout (NumPy slots, Tensor slots) drive megxla's next step."""
    w0 = RNG.standard_normal((3,)).astype("float32")
    buf0 = RNG.standard_normal((3,)).astype("float32")
    sgd_state = {"param_groups": [{"lr": 0.1, "momentum": 0.9, "weight_decay": 0.0, "params": [0]}],
                 "state": {0: {"momentum_buffer": _MegEngineTensor(buf0)}}}
    p = mge.Parameter(w0)
    opt = optim.SGD([p], lr=0.5, momentum=0.9)
    opt.load_state_dict(mge.load(io.BytesIO(megengine_save(sgd_state))))
    p.grad = mge.Tensor(np.ones(3, "float32"))
    opt.step()
    np.testing.assert_allclose(p.numpy(), w0 - 0.1 * (0.9 * buf0 + 1), rtol=1e-6)

    m, v = np.full(3, 0.1, "float32"), np.full(3, 0.2, "float32")
    adam_state = {"param_groups": [{"lr": 0.01, "weight_decay": 0.0, "betas": (0.9, 0.999), "eps": 1e-8,
                                    "params": [0]}],
                  "state": {0: {"exp_avg": m, "exp_avg_sq": v, "step": np.array(2.0, "float32")}}}
    q = mge.Parameter(w0)
    opt = optim.Adam([q], lr=1.0)
    opt.load_state_dict(mge.load(io.BytesIO(megengine_save(adam_state))))
    q.grad = mge.Tensor(np.ones(3, "float32"))
    opt.step()
    m1, v1 = 0.9 * m + 0.1, 0.999 * v + 0.001
    ref = w0 - 0.01 * (m1 / (1 - 0.9 ** 3)) / (np.sqrt(v1 / (1 - 0.999 ** 3)) + 1e-8)
    np.testing.assert_allclose(q.numpy(), ref, rtol=1e-5)
    assert opt.param_groups[0]["lr"] == 0.01


def test_megengine_tensor_kinds_and_dtypes():
    obj = {"f16": _MegEngineTensor(np.arange(3), "float16", device="gpu0:0"),
           "i32": _MegEngineTensor(np.arange(3), "int32", device="cpu0:0"),
           "u8": _MegEngineParameter(np.arange(3), "uint8"), "b": _MegEngineTensor([True, False]),
           "q": _MegEngineTensor([1.0], "float32", qparams=None), "scalar": _MegEngineTensor(np.float32(2.5))}
    got = mge.load(io.BytesIO(megengine_save(obj)))
    assert got["f16"].dtype == np.float16 and type(got["f16"]) is mge.Tensor
    assert got["i32"].dtype == np.int32 and got["u8"].dtype == np.uint8 and type(got["u8"]) is mge.Parameter
    assert got["b"].dtype == np.bool_ and got["scalar"].shape == () and float(got["scalar"].numpy()) == 2.5
    np.testing.assert_array_equal(got["i32"].numpy(), [0, 1, 2])
    # map_location sees the device names the file gives (MegEngine's semantics), here gpu0:0 / cpu0:0 / xpux:0
    asked = []
    moved = mge.load(io.BytesIO(megengine_save(obj)), map_location=lambda dev: asked.append(dev) or "cpu0")
    assert sorted(asked) == sorted(["gpu0:0", "cpu0:0", "xpux:0", "xpux:0", "xpux:0", "xpux:0"])
    assert "cpu0" in repr(moved["f16"].device) and moved["f16"].dtype == np.float16
    moved = mge.load(io.BytesIO(megengine_save(obj)), map_location={"gpu0": "cpu0"})
    assert type(moved["u8"]) is mge.Parameter


def test_megengine_tensor_with_qparams_state_loads_other_classes_are_refused():
    # a tensor's quantization parameters (MegEngine's QParams: plain fields) are data and load by default, as
    # MegEngine's own test_tensor_serialization expects; any other class in a tensor's state is still refused
    class QParams:  # stands for megengine.quantization.utils.QParams (slotted, as MegEngine's)
        __slots__ = ("mode", "dtype_meta", "scale", "zero_point")

        def __init__(self):
            self.mode = self.dtype_meta = self.scale = self.zero_point = None

    class Other:
        pass
    QParams.__module__, QParams.__qualname__ = "megengine.quantization.utils", "QParams"
    Other.__module__, Other.__qualname__ = "megengine.quantization.utils", "Other"
    mod = types.ModuleType("megengine.quantization.utils")
    mod.QParams, mod.Other = QParams, Other
    sys.modules["megengine.quantization.utils"] = mod
    try:
        data = megengine_save(_MegEngineTensor([1.0], "float32", qparams=QParams()))
        refused = megengine_save(_MegEngineTensor([1.0], "float32", qparams=Other()))
    finally:
        del sys.modules["megengine.quantization.utils"]
    t = mge.load(io.BytesIO(data))
    assert t.numpy().tolist() == [1.0] and type(t.qparams).__name__ == "QParams" and t.qparams.scale is None
    with pytest.raises(pickle.UnpicklingError, match="megengine.quantization.utils.Other"):
        mge.load(io.BytesIO(refused))


# ---- what megxla writes, MegEngine reads ----------------------------------------------------------------------------
class _MegEngineReaderTensor:
    """What MegEngine's classes do with a pickle: ``Tensor(data, dtype, device, is_const, no_cache, name, format)``
    (its C++ constructor's argument order), then ``__setstate__(state)``."""

    def __init__(self, data, dtype=None, device=None, is_const=False, no_cache=False, name=None, format="default"):
        assert isinstance(data, np.ndarray) and isinstance(dtype, np.dtype) and isinstance(device, str)
        assert (is_const, no_cache, name, format) == (False, False, None, "default")
        self.data, self.dtype, self.device = data.astype(dtype), dtype, device

    def __setstate__(self, state):
        assert state == {}


class _MegEngineReaderParameter(_MegEngineReaderTensor):
    pass


def megengine_load(data):
    mod = types.ModuleType("megengine.tensor")
    mod.Tensor, mod.Parameter = _MegEngineReaderTensor, _MegEngineReaderParameter
    saved = {k: sys.modules.get(k) for k in ("megengine", "megengine.tensor")}
    sys.modules.update({"megengine": types.ModuleType("megengine"), "megengine.tensor": mod})
    try:
        return pickle.loads(data)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def test_megxla_save_is_readable_by_megengine_classes():
    net = Net()
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    ckpt = {"state_dict": net.state_dict(), "vars": net.state_dict(keep_var=True), "opt": opt.state_dict(),
            "t": mge.Tensor([1, 2], dtype="int32"), "epoch": 1, "np_scalar": np.float32(1.5)}
    buf = io.BytesIO()
    mge.save(ckpt, buf)
    data = buf.getvalue()
    assert b"megxla" not in data  # nothing MegEngine could not import
    assert b"numpy.core.multiarray" in data and b"numpy._core" not in data  # NumPy 1.x (MegEngine's) names
    got = megengine_load(data)
    w = got["vars"]["rnn._flatten_weights"]
    assert isinstance(w, _MegEngineReaderParameter) and w.dtype == np.float32 and w.device == "xpux:0"
    np.testing.assert_array_equal(w.data, net.rnn._flatten_weights.numpy())
    assert isinstance(got["t"], _MegEngineReaderTensor) and got["t"].dtype == np.int32
    assert got["epoch"] == 1 and got["np_scalar"] == np.float32(1.5)
    np.testing.assert_array_equal(got["state_dict"]["conv.weight"], net.conv.weight.numpy())
    # and megxla reads its own file back, strict
    back = mge.load(io.BytesIO(data))
    fresh = Net()
    fresh.load_state_dict(back["vars"], strict=True)
    np.testing.assert_array_equal(fresh.rnn._flatten_weights.numpy(), net.rnn._flatten_weights.numpy())
    assert type(back["vars"]["conv.weight"]) is mge.Parameter and type(back["t"]) is mge.Tensor


def test_a_tensor_file_of_megengine_1_1_loads():
    # MegEngine 1.1-1.2 pickled a tensor as NEWOBJ without arguments plus a state dict holding the data (the
    # file is MegEngine's own test data, imperative/python/test/unit/core/tensor_v1_1.mge)
    import os
    t = mge.load(os.path.join(os.path.dirname(__file__), "data", "megengine_tensor_v1_1.mge"))
    assert isinstance(t, mge.Tensor) and t.dtype == np.int8
    np.testing.assert_array_equal(t.numpy(), [1, 2, 3])
