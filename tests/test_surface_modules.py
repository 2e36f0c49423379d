"""The thin MegEngine modules: core.ops.builtin + core2.apply, core.tensor.dtype/utils, utils.naming,
utils.module_stats, utils.profiler, logger, device, serialization."""
import io
import json
import logging
import os
import pickle

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
from megxla.autodiff import GradManager
from megxla.core._dispatch import OpError
from megxla.core._imperative_rt.core2 import apply
from megxla.core.ops import builtin
from megxla.core.tensor import dtype as D


def _np(t):
    return t.numpy()


# ---- builtin op table ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode,args,ref", [
    ("add", ([1.0, 2.0], [3.0, 4.0]), lambda a, b: a + b),
    ("TRUE_DIV", ([1.0, 2.0], [4.0, 8.0]), lambda a, b: a / b),
    ("leq", ([1.0, 5.0], [2.0, 2.0]), lambda a, b: a <= b),
    ("relu", ([-1.0, 2.0],), lambda a: np.maximum(a, 0)),
    ("EXP", ([0.0, 1.0],), np.exp),
    ("fuse_mul_add3", ([1.0, 2.0], [3.0, 4.0], [5.0, 6.0]), lambda a, b, c: a * b + c),
    ("switch_gt0", ([-1.0, 2.0], [7.0, 8.0]), lambda x, y: np.where(x > 0, y, 0)),
    ("tanh_grad", ([0.5, 0.1], [1.0, 2.0]), lambda y, dy: (1 - y * y) * dy),
])
def test_elemwise_modes(mode, args, ref):
    ins = [mge.Tensor(np.array(a, np.float32)) for a in args]
    outs = apply(builtin.Elemwise(mode=mode), *ins)
    assert isinstance(outs, tuple) and len(outs) == 1
    np.testing.assert_allclose(_np(outs[0]), ref(*[np.array(a, np.float32) for a in args]), rtol=1e-6)


def test_builtin_shape_ops():
    x = mge.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    (s,) = apply(builtin.GetVarShape(), x)
    assert s.dtype == np.int32 and _np(s).tolist() == [2, 3]
    assert _np(apply(builtin.GetVarShape(axis=1), x)[0]).tolist() == [3]
    (r,) = apply(builtin.Reshape(), x, mge.Tensor([3, -1]))
    assert r.shape == (3, 2)
    (b,) = apply(builtin.Broadcast(), mge.Tensor([1.0, 2.0, 3.0]), mge.Tensor([2, 3]))
    assert b.shape == (2, 3)
    (c,) = apply(builtin.Concat(axis=1), x, x)
    assert c.shape == (2, 6)
    (d,) = apply(builtin.Dimshuffle(pattern=(1, "x", 0)), x)
    assert d.shape == (3, 1, 2) and _np(d)[2, 0, 1] == 5
    (t,) = apply(builtin.TypeCvt(dtype="int32"), mge.Tensor([1.7, -2.2]))
    assert t.dtype == np.int32 and _np(t).tolist() == [1, -2]
    (m,) = apply(builtin.Reduce(mode="max", axis=0), x)
    assert m.shape == (1, 3) and _np(m).tolist() == [[3, 4, 5]]
    (q,) = apply(builtin.Reduce(mode="sum_sqr"), mge.Tensor([1.0, 2.0]))
    assert float(_np(q)) == 5.0
    assert builtin.Elemwise(mode="add") == builtin.Elemwise(mode="ADD")
    assert len({builtin.Reduce(mode="sum", axis=1), builtin.Reduce(mode="SUM", axis=1)}) == 1


def test_builtin_errors_name_op_and_shapes():
    with pytest.raises(ValueError, match="unknown mode 'nope'"):
        builtin.Elemwise(mode="nope")
    with pytest.raises(OpError, match="expected 2 input"):
        apply(builtin.Elemwise(mode="add"), mge.Tensor([1.0]))
    with pytest.raises(OpError, match="cannot reshape"):
        apply(builtin.Reshape(), mge.Tensor([1.0, 2.0, 3.0]), mge.Tensor([2, 2]))
    with pytest.raises(TypeError, match="builtin op descriptor"):
        apply("add", mge.Tensor([1.0]))


def test_builtin_ops_are_differentiable_through_dispatch():
    x = mge.Parameter([1.0, -2.0, 3.0])
    gm = GradManager().attach([x])
    with gm:
        (y,) = apply(builtin.Elemwise(mode="mul"), x, x)
        (s,) = apply(builtin.Reduce(mode="sum"), y)
        gm.backward(s)
    np.testing.assert_allclose(_np(x.grad), [2.0, -4.0, 6.0])


def test_builtin_fake_quant_family():
    x = mge.Tensor([0.26, -1.0, 9.0])
    scale, zp = mge.Tensor([0.5]), mge.Tensor([0.0])
    (y,) = apply(builtin.FakeQuant(qmin=-8, qmax=7), x, scale, zp)
    np.testing.assert_allclose(_np(y), [0.5, -1.0, 3.5])
    (t,) = apply(builtin.TQT(qmin=-8, qmax=7), x, mge.Tensor([-1.0]))  # log2 scale
    np.testing.assert_allclose(_np(t), [0.5, -1.0, 3.5])
    (l,) = apply(builtin.LSQ(qmin=-8, qmax=7), x, scale, zp, mge.Tensor([1.0]))
    np.testing.assert_allclose(_np(l), [0.5, -1.0, 3.5])
    with pytest.raises(OpError, match="expected 3 input"):
        apply(builtin.FakeQuant(qmin=-8, qmax=7), x, scale)


def test_check_non_finite_eager_equals_xla_trace():
    from megxla.jit import xla_trace

    def check(inps, scale):
        return list(apply(builtin.CheckNonFinite(scale=scale), *inps))

    func = xla_trace(check, without_host=True)
    good = [mge.Tensor(np.random.RandomState(0).randn(2, 3).astype(np.float32)), mge.Tensor([1.0, 2.0])]
    bad = good + [mge.Tensor(np.array([1.5, np.inf], np.float32))]
    for inps, flag in ((good, 0), (bad, 1)):
        eager = check(inps, 0.5)
        for _ in range(2):
            compiled = func(inps, 0.5)
        assert eager[-1].dtype == np.int32 and eager[-1].numpy().tolist() == [flag]
        for a, b in zip(eager, compiled):
            np.testing.assert_allclose(a.numpy(), b.numpy())
        np.testing.assert_allclose(eager[0].numpy(), inps[0].numpy() * 0.5)
    mge._full_sync()


def test_core_config_private_names_view_megxla_config():
    import megxla
    from megxla.core import _config
    setattr(_config, "__compute_mode", "float32")  # what MegEngine's model zoo writes around float16 blocks
    try:
        assert megxla.config._compute_mode == "float32" and getattr(_config, "__compute_mode") == "float32"
    finally:
        setattr(_config, "__compute_mode", "default")
    with _config._override(async_level=1, conv_format="NHWC"):
        assert megxla.config.async_level == 1 and getattr(_config, "__conv_format") == "NHWC"
    assert megxla.config.async_level == 2 and megxla.config._conv_format == "default"
    assert _config._get_actual_op_param("NCHW", "default") == "NCHW"
    with pytest.raises(ValueError, match="_compute_mode"):
        setattr(_config, "__compute_mode", "half")


# ---- core.tensor.dtype -----------------------------------------------------------------------------------------
def test_quantized_dtype_metadata():
    q = D.quint8(0.25, 128)
    assert D.is_quantize(q) and not D.is_quantize(np.dtype("uint8"))
    assert q == np.dtype("uint8") and q.metadata["mgb_dtype"]["name"] == "Quantized8Asymm"
    assert D.get_scale(q) == 0.25 and D.get_zero_point(q) == 128
    with pytest.raises(ValueError, match="symmetric"):
        D.get_zero_point(D.qint8(1.0))
    assert D.get_dtype_bit("qint4") == 4 and D.get_dtype_bit("bfloat16") == 16
    assert D.is_lowbit(D.qint4(1.0)) and not D.is_lowbit(D.qint32(1.0))
    assert D.is_bfloat16("bfloat16") and not D.is_bfloat16(np.float32)
    q2 = pickle.loads(pickle.dumps(q))
    assert D.get_scale(q2) == 0.25
    meta = D._builtin_quant_dtypes["qint8_narrow"]
    assert (meta.qmin, meta.qmax) == (-127, 127) and D.create_quantized_dtype(meta, 1.0, None) == np.int8
    with pytest.raises(ValueError, match="unknown quantized dtype"):
        D.create_quantized_dtype("qint7", 1.0, 0)
    arr = D.convert_to_qint8(np.array([0.4, -200.0]), D.qint8(0.1))
    assert arr.tolist() == [4, -128] and D.convert_from_qint8(arr).tolist() == pytest.approx([0.4, -12.8])


# ---- utils -------------------------------------------------------------------------------------------------------
def test_naming_scopes():
    from megxla.utils.naming import AutoNaming, pop_scope, push_scope, record_scope
    AutoNaming.clear()
    push_scope("backbone")
    with record_scope("conv1"):
        assert AutoNaming.gen_name("out") == "backbone.conv1.out"
        assert AutoNaming.record_opnode(object(), "relu") == "backbone.conv1.relu"
        assert AutoNaming.record_opnode(object(), "relu") == "backbone.conv1.relu_1"
    with pytest.raises(RuntimeError, match="innermost open scope is 'backbone'"):
        pop_scope("head")
    pop_scope("backbone")
    assert AutoNaming.get_scope() == ""
    with pytest.raises(RuntimeError, match="no scope"):
        AutoNaming.pop_scope()


def test_module_scopes_name_outputs_and_restore():
    from megxla.utils.naming import AutoNaming, set_module_scopes

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.backbone = M.Sequential(M.Linear(2, 3), M.ReLU())
            self.head = M.Linear(3, 1)

        def forward(self, x):
            self.seen = self.backbone(x).name
            return self.head(self.backbone(x))

    net, x = Net(), mge.Tensor(np.ones((1, 2), np.float32))
    old = set_module_scopes(True)
    try:
        y = net(x)
    finally:
        set_module_scopes(old)
    assert y.name == "Net.head" and net.seen == "Net.backbone.1" and AutoNaming.get_scope() == ""
    assert net(x).name == ""  # scopes off: nothing named, nothing pushed (MegEngine's "" for no name)


def test_module_stats_table_and_totals(capsys):
    from megxla.utils.module_stats import module_stats
    net = M.Sequential(M.Conv2d(3, 4, 3), M.BatchNorm2d(4), M.ReLU())
    bn = net[1]
    inp = np.random.RandomState(0).rand(1, 3, 6, 6).astype(np.float32) + 1
    total, details = module_stats(net, inputs=[inp], logging_to_stdout=False)
    assert total.param_dims == 4 * 3 * 3 * 3 + 4 + 4 + 4
    conv = details.flops[0]
    assert conv["class_name"] == "Conv2d" and conv["output_shapes"] == [(1, 4, 4, 4)]
    # MegEngine's formulas: conv = outputs * (Cin * Kh * Kw + bias), BN = 7 * inputs; ReLU is not counted
    assert conv["flops_num"] == 4 * 4 * 4 * 28 and details.flops[1]["flops_num"] == 7 * 64
    assert total.act_dims == 2 * 4 * 4 * 4 and total.act_size == 4 * total.act_dims
    assert total.flops == 4 * 4 * 4 * 28 + 7 * 64 and details.flops[-1]["name"] == "total"
    # the forward runs in eval mode (as MegEngine's): the statistics are untouched, the flags restored
    np.testing.assert_array_equal(_np(bn.running_mean), 0)
    assert bn.training


def test_profiler_writes_chrome_trace(tmp_path):
    from megxla.utils.naming import record_scope
    from megxla.utils.profiler import Profiler
    x = mge.Tensor(np.ones((4, 4), np.float32))
    fc = M.Linear(4, 4, name="my_fc")
    with Profiler(path=str(tmp_path), with_scopes=True) as prof:
        with record_scope("my_block"):
            (F.matmul(x, x) + 1).numpy()
        prof.step()
        fc(x).numpy()
    assert prof.path == os.path.join(str(tmp_path), f"{os.getpid()}.chrome_timeline.json")
    with open(prof.path) as f:
        events = json.load(f)["traceEvents"]
    names = {e.get("name") for e in events}
    assert {"my_block", "step 0", "my_fc"} <= names
    with pytest.raises(ValueError, match="unsupported format"):
        Profiler(format="memory_flow.svg")


def test_profiler_scope_is_a_slice_without_with_scopes(tmp_path):
    # MegEngine's test_profiler: ``with scope("my_scope")`` inside a recording (no with_scopes), eagerly and traced
    from megxla.jit import trace
    from megxla.utils.profiler import Profiler, scope

    def infer():
        with scope("my_scope"):
            return mge.Tensor([1.23]) * 2

    for fn in (infer, trace(symbolic=True)(infer)):
        d = tmp_path / fn.__class__.__name__
        with Profiler(path=str(d)) as prof:
            fn()
        with open(prof.path) as f:
            assert "my_scope" in {e.get("name") for e in json.load(f)["traceEvents"]}
    with scope("outside"):  # (no recording: nothing to annotate) and as a decorator
        pass
    assert scope("f")(lambda: 3)() == 3


def test_logger_formatting_and_levels():
    from megxla import logger as L
    stream = io.StringIO()
    log = L.get_logger("megxla.test_surface")
    L.set_log_file(stream)
    log.warning("careful")
    assert "careful" in stream.getvalue() and "WRN" in stream.getvalue()
    L.set_log_level("ERROR")
    log.warning("hidden")
    assert "hidden" not in stream.getvalue()
    L.set_log_level(logging.INFO)
    L.MegEngineLogFormatter.log_fout = None
    old = L.set_mgb_log_level("ERROR")
    assert logging.getLogger("jax").level == logging.ERROR
    with L.replace_mgb_log_level("DEBUG"):
        assert logging.getLogger("jax").level == logging.DEBUG
    assert logging.getLogger("jax").level == logging.ERROR
    L.set_mgb_log_level(old)


def test_set_log_file_reaches_loggers_made_after_it_in_megengines_format(tmp_path):
    # MegEngine's set_log_file sets MegEngineLogFormatter.log_fout, which every formatted record is written to: a
    # script's ``mge.set_log_file("log.txt")`` before ``logger = mge.get_logger(__name__)`` logs its training there
    # (tracyliang18/megengine-playgournd's mnist, ae, vae and transformer scripts); the file's line is
    # ``[date line@file:logger] level message``, the console's ``date level message``.
    import re
    from megxla import logger as L
    saved = L.MegEngineLogFormatter.log_fout
    path = tmp_path / "log.txt"
    try:
        before = L.get_logger("megxla.test_log_file.before")
        L.set_log_file(str(path), "w")
        after = L.get_logger("megxla.test_log_file.after")
        console = io.StringIO()
        after.handlers[0].setStream(console)
        before.info("from before")
        after.info("from after %d", 2)
        after.warning("careful")
        lines = path.read_text().splitlines()
    finally:
        if L.MegEngineLogFormatter.log_fout not in (None, saved):
            L.MegEngineLogFormatter.log_fout.close()
        L.MegEngineLogFormatter.log_fout = saved
    stamp = r"\d\d \d\d:\d\d:\d\d"
    assert len(lines) == 3, lines
    assert re.fullmatch(rf"\[{stamp} \d+@test_surface_modules.py:megxla.test_log_file.before\] from before", lines[0])
    assert re.fullmatch(rf"\[{stamp} \d+@test_surface_modules.py:megxla.test_log_file.after\] from after 2", lines[1])
    assert lines[2].endswith(":megxla.test_log_file.after] WRN careful")
    assert re.fullmatch(rf"{stamp} from after 2\n{stamp} WRN careful\n", console.getvalue())


def test_megbrain_lines_are_tagged_after_the_date_and_tracebacks_indented_as_megengines():
    # (printed by MegEngine 1.13.0, colours aside: ``06 16:47:34[mgb] WRN hello``; a logged exception's traceback
    # indented by two spaces. megxla prefixed ``(mgb) `` and left the traceback as Python prints it)
    import re
    from megxla import logger as L
    stamp = r"\d\d \d\d:\d\d:\d\d"
    brain = L.get_logger("megxla.test_brain_line", L.MegBrainLogFormatter)
    plain = L.get_logger("megxla.test_brain_line.exc")
    console = io.StringIO()
    for lg in (brain, plain):
        lg.handlers[0].setStream(console)
    brain.warning("hello")
    try:
        1 / 0
    except ZeroDivisionError:
        plain.exception("boom")
    lines = console.getvalue().splitlines()
    assert re.fullmatch(rf"{stamp}\[mgb\] WRN hello", lines[0]), lines
    assert re.fullmatch(rf"{stamp} ERR boom", lines[1]) and lines[2] == "  Traceback (most recent call last):"
    assert lines[-1] == "  ZeroDivisionError: division by zero" and all(ln.startswith("  ") for ln in lines[2:])


def test_get_logger_without_a_name_is_the_root_logger_as_megengines():
    # MegEngine's logger.py: ``logging.getLogger(name)`` -- None is the root logger, set up with MegEngine's handler
    # and default level, so a script's ``logging = get_logger()`` prints other libraries' INFO lines (ConvNeXt's
    # test.py)
    from megxla import logger as L
    root = logging.getLogger()
    saved = (root.level, root.handlers[:], root.propagate, root.__dict__.pop("_megxla_init_done", None))
    try:
        log = L.get_logger()
        assert log is root and log.level == L._default_level
        stream = io.StringIO()
        log.handlers[0].setStream(stream)
        logging.getLogger("a_third_party_library").info("shown")
        assert "shown" in stream.getvalue()
        old = L.set_log_level("ERROR")
        assert L.set_log_level(old) == logging.ERROR
    finally:
        L._all_loggers[:] = [lg for lg in L._all_loggers if lg is not root]
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
        root.propagate = saved[2]
        root.__dict__.pop("_megxla_init_done", None)
        if saved[3] is not None:
            root._megxla_init_done = saved[3]


def test_device_and_serialization_modules(tmp_path):
    import megxla.device as device
    import megxla.serialization as ser
    assert device.get_device_count("cpu") >= 1 and isinstance(device.is_cuda_available(), bool)
    assert device.get_default_device() == mge.get_default_device()
    p = tmp_path / "t.pkl"
    ser.save({"w": mge.Tensor([1.0, 2.0])}, str(p))
    assert _np(ser.load(str(p))["w"]).tolist() == [1.0, 2.0]
    with ser.max_recursion_limit():
        pass


@pytest.mark.parametrize("kind", ["abs", "sin", "sub", "mul", "fuse_add_tanh", "fuse_add_relu"])
def test_elemwise_multi_type_quantized_modes_as_megengine(kind):
    # MegEngine's quantization/test_op.py::test_elemwise: a "q" mode on int8 inputs is the float mode on their real
    # values, quantized to the output dtype
    from megxla.functional.elemwise import _elemwise_multi_type, _elwise
    rng = np.random.RandomState(3)

    def fake_quant(x, s):
        return F.clip(F.round(x / s), -128, 127) * s

    s1, s2, so = np.float32(1.3), np.float32(1.7), np.float32(1.1)
    x1 = fake_quant(mge.Tensor(rng.normal(size=(3, 3)).astype("float32")), s1)
    x2 = fake_quant(mge.Tensor(rng.normal(size=(3, 3)).astype("float32")), s2)
    q1, q2 = x1.astype(D.qint8(s1)), x2.astype(D.qint8(s2))
    args, qargs = ((x1,), (q1,)) if kind in ("abs", "sin") else ((x1, x2), (q1, q2))
    want = fake_quant(_elwise(*args, mode=kind), so).numpy()
    got = _elemwise_multi_type(*qargs, mode="q" + kind, dtype=D.qint8(so))
    assert got.dtype == np.int8
    np.testing.assert_allclose(got.numpy() * so, want)
    # a plain mode converts its result (MegEngine's comparisons: dtype bool); a float input to a q mode raises
    np.testing.assert_array_equal(_elemwise_multi_type(x1, x2, mode="lt", dtype="bool").numpy(),
                                  x1.numpy() < x2.numpy())
    with pytest.raises(OpError, match="must be quantized"):
        _elemwise_multi_type(x1, x2, mode="qadd", dtype=D.qint8(so))
    with pytest.raises(ValueError, match="unknown mode"):
        builtin.ElemwiseMultiType(mode="qnope", dtype="bool")


# ---- builtin MatrixMul / BatchedMatrixMul / Linspace / IndexingMultiAxisVec ---------------------------------------
def test_builtin_matrix_mul_forward_matches_numpy():
    rs = np.random.RandomState(0)
    a, b = rs.randn(3, 4).astype("float32"), rs.randn(5, 4).astype("float32")
    (c,) = apply(builtin.MatrixMul(transposeB=True), mge.Tensor(a), mge.Tensor(b))
    np.testing.assert_allclose(_np(c), a @ b.T, rtol=1e-5)
    x = rs.randn(2, 3, 4).astype("float32")  # (..., K) @ (K, N), as F.matmul sends an unbatched right operand
    (c,) = apply(builtin.MatrixMul(dimA=3, dimB=2), mge.Tensor(x), mge.Tensor(b.T.copy()))
    np.testing.assert_allclose(_np(c), x @ b.T, rtol=1e-5)
    dy = rs.randn(2, 3, 6).astype("float32")  # dimA == dimB >= 3: both flattened to 2-D (MegEngine's weight grad)
    (g,) = apply(builtin.MatrixMul(transposeA=True, dimA=3, dimB=3), mge.Tensor(x), mge.Tensor(dy))
    np.testing.assert_allclose(_np(g), x.reshape(6, 4).T @ dy.reshape(6, 6), rtol=1e-5)
    (h,) = apply(builtin.MatrixMul(compute_mode="FLOAT32"), mge.Tensor(a.astype("float16")),
                 mge.Tensor(b.T.astype("float16")))
    assert h.dtype == np.float16
    np.testing.assert_allclose(_np(h).astype("float32"), a @ b.T, atol=2e-2)
    assert builtin.MatrixMul() == builtin.MatrixMul(compute_mode=builtin.MatrixMul.ComputeMode.DEFAULT)
    assert builtin.MatrixMul(transposeA=True) != builtin.MatrixMul()
    with pytest.raises(OpError, match="contracted dimensions differ"):
        apply(builtin.MatrixMul(), mge.Tensor(a), mge.Tensor(b))
    with pytest.raises(OpError, match="second operand must be 2-D"):
        apply(builtin.MatrixMul(), mge.Tensor(a), mge.Tensor(x))
    with pytest.raises(OpError, match="format=MK4"):
        apply(builtin.MatrixMul(format="MK4"), mge.Tensor(a), mge.Tensor(b.T.copy()))


def test_builtin_batched_matrix_mul_transposes_and_broadcasts_as_megengine():
    rs = np.random.RandomState(1)
    a, b = rs.randn(2, 3, 4).astype("float32"), rs.randn(2, 5, 4).astype("float32")
    for ta, tb in ((False, True), (True, False), (True, True)):
        x = a.transpose(0, 2, 1).copy() if ta else a
        y = b if tb else b.transpose(0, 2, 1).copy()
        (c,) = apply(builtin.BatchedMatrixMul(transposeA=ta, transposeB=tb), mge.Tensor(x), mge.Tensor(y))
        np.testing.assert_allclose(_np(c), a @ b.transpose(0, 2, 1), rtol=1e-5)
    # the lower-rank operand is broadcast to the other's batch axes
    a4, w = rs.randn(2, 3, 4, 5).astype("float32"), rs.randn(3, 5, 6).astype("float32")
    (c,) = apply(builtin.BatchedMatrixMul(), mge.Tensor(a4), mge.Tensor(w))
    np.testing.assert_allclose(_np(c), np.matmul(a4, w), rtol=1e-5)
    (c,) = apply(builtin.BatchedMatrixMul(transposeA=True), mge.Tensor(rs.randn(4, 3).astype("float32")),
                 mge.Tensor(a4))
    assert c.shape == (2, 3, 3, 5)
    # equal ranks: equal batch axes (megdnn asserts A[0] == B[0]); the higher rank's batch is not broadcast
    with pytest.raises(OpError, match="equal batch axes"):
        apply(builtin.BatchedMatrixMul(), mge.Tensor(np.ones((1, 3, 4), "float32")),
              mge.Tensor(np.ones((2, 4, 5), "float32")))
    with pytest.raises(OpError, match="cannot broadcast"):
        apply(builtin.BatchedMatrixMul(), mge.Tensor(np.ones((2, 1, 3, 4), "float32")),
              mge.Tensor(np.ones((5, 4, 6), "float32")))


def test_builtin_batched_matrix_mul_gradient():
    rs = np.random.RandomState(2)
    a, w = rs.randn(2, 3, 4).astype("float32"), rs.randn(5, 4).astype("float32")
    pa, pw = mge.Parameter(a), mge.Parameter(w)
    dy = rs.randn(2, 3, 5).astype("float32")
    gm = GradManager().attach([pa, pw])
    with gm:
        (y,) = apply(builtin.BatchedMatrixMul(transposeB=True), pa, pw)  # w broadcast over the batch
        gm.backward(y, mge.Tensor(dy))
    np.testing.assert_allclose(_np(pa.grad), dy @ w, rtol=1e-5)
    np.testing.assert_allclose(_np(pw.grad), np.einsum("bmn,bmk->nk", dy, a), rtol=1e-5)
    pm = mge.Parameter(rs.randn(3, 4).astype("float32"))
    gm = GradManager().attach([pm])
    with gm:
        (y,) = apply(builtin.MatrixMul(), pm, mge.Tensor(w.T.copy()))
        gm.backward(y.sum())
    np.testing.assert_allclose(_np(pm.grad), np.broadcast_to(w.sum(0), (3, 4)), rtol=1e-5)


def test_builtin_batched_matrix_mul_sam_style_einsum():
    # SAM's decomposed relative position: einsum("bhwc,hkc->bhwk", r_q, Rh) written with builtin ops in a
    # subgraph, as its einsum fallback and MegEngine's own functional/einsum.py subgraph do
    from megxla.core.tensor.utils import subgraph_fn
    rs = np.random.RandomState(3)
    r_q, rh = rs.randn(2, 3, 4, 8).astype("float32"), rs.randn(3, 5, 8).astype("float32")

    @subgraph_fn("Einsum", dtype="float32", device=None, nr_inputs=2)
    def rel_h(inputs, f, c):
        q, r = inputs
        q = f(builtin.Dimshuffle([1, 0, 2, 3]), q)  # (h, b, w, c)
        q = f(builtin.Reshape(), q, c([3, 8, 8], dtype="int32"))  # (h, b*w, c)
        y = f(builtin.BatchedMatrixMul(transposeB=True), q, r)  # (h, b*w, k)
        y = f(builtin.Reshape(), y, c([3, 2, 4, 5], dtype="int32"))
        return (f(builtin.Dimshuffle([1, 0, 2, 3]), y),), (True,)

    (y,) = rel_h(mge.Tensor(r_q), mge.Tensor(rh))
    np.testing.assert_allclose(_np(y), np.einsum("bhwc,hkc->bhwk", r_q, rh), rtol=1e-5, atol=1e-5)
    pq = mge.Parameter(r_q)
    gm = GradManager().attach([pq])
    with gm:
        (y,) = rel_h(pq, mge.Tensor(rh))
        gm.backward(y.sum())
    np.testing.assert_allclose(_np(pq.grad), np.broadcast_to(rh.sum(1)[None, :, None, :], r_q.shape), rtol=1e-5)


def test_builtin_linspace_and_indexing_multi_axis_vec():
    (y,) = apply(builtin.Linspace(), mge.Tensor(1.0), mge.Tensor([3.0]), mge.Tensor([5]))
    np.testing.assert_allclose(_np(y), np.linspace(1, 3, 5))
    assert y.dtype == np.float32
    (y,) = apply(builtin.Linspace(endpoint=False), mge.Tensor(0), mge.Tensor(1), mge.Tensor(4))
    np.testing.assert_allclose(_np(y), [0, 0.25, 0.5, 0.75])
    # MegEngine's Linspace gradient: dot(dy, linspace(1, 0, num)) for start, dot(dy, linspace(0, 1, num)) for stop
    s0, s1 = mge.Parameter(1.0), mge.Parameter(3.0)
    gm = GradManager().attach([s0, s1])
    dy = np.array([1.0, 2, 3, 4, 5], "float32")
    with gm:
        (y,) = apply(builtin.Linspace(), s0, s1, mge.Tensor(5))
        gm.backward(y, mge.Tensor(dy))
    np.testing.assert_allclose([float(_np(s0.grad)), float(_np(s1.grad))],
                               [dy @ np.linspace(1, 0, 5), dy @ np.linspace(0, 1, 5)], rtol=1e-6)

    x = np.arange(60, dtype="float32").reshape(3, 4, 5)
    vec = lambda axis: (axis, False, False, False, True)  # noqa: E731
    (y,) = apply(builtin.IndexingMultiAxisVec([vec(0), vec(2)]), mge.Tensor(x), mge.Tensor([0, 2]),
                 mge.Tensor([1, 3]))
    np.testing.assert_array_equal(_np(y), x[[0, 2], :, [1, 3]])  # separated vectors: their axis comes first
    (y,) = apply(builtin.IndexingMultiAxisVec([(1, True, True, True, False), vec(2)]), mge.Tensor(x),
                 mge.Tensor(3), mge.Tensor(0), mge.Tensor(-1), mge.Tensor([[1], [3]]))
    np.testing.assert_array_equal(_np(y), x[:, 3:0:-1, [[1], [3]]])
    (y,) = apply(builtin.IndexingMultiAxisVec([(0, True, False, False, False), vec(1)]), mge.Tensor(x),
                 mge.Tensor(1), mge.Tensor([3, 0, 3]))
    np.testing.assert_array_equal(_np(y), x[1:, [3, 0, 3]])
    # MegEngine's test_autodiff.py test_IndexingMultiAxisVec: repeated indices accumulate
    p = mge.Parameter(np.ones((3, 3), "float32"))
    gm = GradManager().attach([p])
    with gm:
        (y,) = apply(builtin.IndexingMultiAxisVec([vec(0), vec(1)]), p, mge.Tensor([0, 0, 2, 1]),
                     mge.Tensor([2, 2, 1, 0]))
        gm.backward(y.sum())
    np.testing.assert_array_equal(_np(p.grad), [[0, 0, 2], [1, 0, 0], [0, 1, 0]])
    with pytest.raises(OpError, match="no begin, end, step or index"):
        apply(builtin.IndexingMultiAxisVec([(0, False, False, False, False)]), mge.Tensor(x))
    with pytest.raises(OpError, match="must be integers"):
        apply(builtin.IndexingMultiAxisVec([vec(0)]), mge.Tensor(x), mge.Tensor([0.0]))


# ---- builtin Subtensor / Set / Incr, the MultiAxisVec writes, MeshIndexing, IndexingOneHot (values: MegEngine 1.13) --
def _vec(axis):
    return (axis, False, False, False, True)


def test_builtin_subtensor_family_matches_megengine():
    x = np.arange(20, dtype="float32").reshape(4, 5)
    X = mge.Tensor(x)
    # (MegEngine 1.13.0's answers: 0:4:2 from inputs, 1:4:2 from slice_items, a 0-d index removing its axis)
    (y,) = apply(builtin.Subtensor([(0, True, True, True, False), _vec(1)]), X, mge.Tensor(0), mge.Tensor(4),
                 mge.Tensor(2), mge.Tensor(3))
    np.testing.assert_array_equal(_np(y), x[0:4:2, 3])
    (y,) = apply(builtin.Subtensor([(0, True, True, True, False)], slice_items=[(1, 4, 2, -1)]), X)
    np.testing.assert_array_equal(_np(y)[:, 0], [5, 15])
    (y,) = apply(builtin.SetSubtensor([_vec(1)]), X, mge.Tensor([1.0, 2, 3, 4]), mge.Tensor(1))
    want = x.copy()
    want[:, 1] = [1, 2, 3, 4]
    np.testing.assert_array_equal(_np(y), want)
    (y,) = apply(builtin.IncrSubtensor([(0, True, True, True, False), _vec(1)]), X, mge.Tensor([10.0, 20.0]),
                 mge.Tensor(0), mge.Tensor(4), mge.Tensor(2), mge.Tensor(3))
    want = x.copy()
    want[0:4:2, 3] += [10, 20]
    np.testing.assert_array_equal(_np(y), want)
    np.testing.assert_array_equal(X.numpy(), x)  # (a new tensor; the input is unchanged)
    with pytest.raises(IndexError, match="out of range"):
        apply(builtin.Subtensor([_vec(1)]), X, mge.Tensor(7))
    with pytest.raises(OpError, match="one integer"):
        apply(builtin.Subtensor([_vec(1)]), X, mge.Tensor([1, 2]))


def test_builtin_multi_axis_vec_and_mesh_writes_match_megengine():
    x = np.zeros((4, 3), "float32")
    d = np.ones((3, 3), "float32")
    # an index repeated: Incr adds each value, Set keeps the last (MegEngine 1.13.0: rows [0, 2, 1, 0], [0, 2, 3, 0])
    (y,) = apply(builtin.IndexingIncrMultiAxisVec([_vec(0)]), mge.Tensor(x), mge.Tensor(d), mge.Tensor([1, 1, 2]))
    np.testing.assert_array_equal(_np(y)[:, 0], [0, 2, 1, 0])
    (y,) = apply(builtin.IndexingSetMultiAxisVec([_vec(0)]), mge.Tensor(x), mge.Tensor(d * [[1], [2], [3]]),
                 mge.Tensor([1, 1, 2]))
    np.testing.assert_array_equal(_np(y)[:, 0], [0, 2, 3, 0])
    (y,) = apply(builtin.IncrMeshIndexing([_vec(0)]), mge.Tensor(x), mge.Tensor(d), mge.Tensor([1, 1, 2]))
    np.testing.assert_array_equal(_np(y)[:, 0], [0, 2, 1, 0])
    a = np.arange(20, dtype="float32").reshape(4, 5)
    (y,) = apply(builtin.MeshIndexing([(0, True, False, True, False), _vec(1)]), mge.Tensor(a), mge.Tensor(1),
                 mge.Tensor(2), mge.Tensor([4, 0]))
    np.testing.assert_array_equal(_np(y), [[9, 5], [19, 15]])
    b = np.arange(24, dtype="int32").reshape(2, 3, 4)
    (y,) = apply(builtin.BatchedMeshIndexing([_vec(1), (2, True, True, False, False)]), mge.Tensor(b),
                 mge.Tensor([[0, 2], [1, 1]]), mge.Tensor(1), mge.Tensor(3))
    np.testing.assert_array_equal(_np(y), [[[1, 2], [9, 10]], [[17, 18], [17, 18]]])
    with pytest.raises(OpError, match="batch axis"):
        apply(builtin.BatchedMeshIndexing([_vec(0)]), mge.Tensor(b), mge.Tensor([[0], [1]]))
    # the added value's gradient is the output's gradient gathered at its positions; x's passes through
    p, v = mge.Parameter(np.zeros((4, 3), "float32")), mge.Parameter(np.ones((2, 3), "float32"))
    gm = GradManager().attach([p, v])
    with gm:
        (y,) = apply(builtin.IndexingIncrMultiAxisVec([_vec(0)]), p, v, mge.Tensor([1, 1]))
        gm.backward((y * mge.Tensor(np.arange(12, dtype="float32").reshape(4, 3))).sum())
    np.testing.assert_array_equal(_np(p.grad), np.arange(12).reshape(4, 3))
    np.testing.assert_array_equal(_np(v.grad), [[3, 4, 5], [3, 4, 5]])


def test_builtin_indexing_one_hot_matches_megengine():
    x = np.arange(20, dtype="float32").reshape(4, 5)
    (y,) = apply(builtin.IndexingOneHot(axis=1, ndim=2), mge.Tensor(x), mge.Tensor([0, 1, 2, 3]))
    np.testing.assert_array_equal(_np(y), [[0], [6], [12], [18]])
    (y,) = apply(builtin.IndexingSetOneHot(axis=1, ndim=2), mge.Tensor(x), mge.Tensor([0, 1, 2, 3]),
                 mge.Tensor(np.zeros((4, 1), "float32")))
    want = x.copy()
    want[range(4), range(4)] = 0
    np.testing.assert_array_equal(_np(y), want)
    with pytest.raises(OpError, match=r"value must have shape \(4, 1\)"):  # (MegEngine raises too)
        apply(builtin.IndexingSetOneHot(axis=1, ndim=2), mge.Tensor(x), mge.Tensor([0, 1, 2, 3]),
              mge.Tensor(np.zeros((4,), "float32")))
    with pytest.raises(IndexError, match="out of range"):
        apply(builtin.IndexingOneHot(axis=1, ndim=2), mge.Tensor(x), mge.Tensor([0, 1, 2, 5]))


def test_operator_node_config_record():
    # MegEngine's test_imperative_rt.py test_basic_interface
    from megxla.core._imperative_rt import OperatorNodeConfig
    cf = OperatorNodeConfig()
    cf.name, cf.dtype, cf.comp_node_arr = "megengine.core", "float32", ["xpux"]
    assert cf.dtype == np.float32 and cf.comp_node == "xpux"
    cf.comp_node_arr = ["xpux", "xpux:1"]
    with pytest.raises(ValueError, match="invalid number of comp_node"):
        cf.comp_node


def test_builtin_diag_plane_subgraph_of_megengine_einsum():
    # MegEngine 1.13's functional/einsum.py diag_plane_subgraph: Linspace -> TypeCvt -> IndexingMultiAxisVec
    from megxla.core.tensor.utils import subgraph_fn

    @subgraph_fn("Diag", dtype="float32", device=None, nr_inputs=1)
    def diag(inputs, f, c):
        (inp,) = inputs
        n = f(builtin.GetVarShape(axis=0), inp)
        index = f(builtin.TypeCvt("int32"), f(builtin.Linspace(), c(0), f(builtin.Elemwise("SUB"), n, c(1)), n))
        items = [(0, False, False, False, True), (1, False, False, False, True)]
        return (f(builtin.IndexingMultiAxisVec(items), inp, index, index),), (True,)

    m = np.arange(16, dtype="float32").reshape(4, 4)
    np.testing.assert_array_equal(_np(diag(mge.Tensor(m))[0]), np.diag(m))


def test_builtin_batched_matrix_mul_under_xla_trace():
    from megxla.jit import xla_trace

    @xla_trace
    def f(a, b):
        return apply(builtin.BatchedMatrixMul(transposeA=True), a, b)[0]

    rs = np.random.RandomState(4)
    a, b = rs.randn(2, 4, 3).astype("float32"), rs.randn(4, 5).astype("float32")
    for _ in range(2):
        np.testing.assert_allclose(_np(f(mge.Tensor(a), mge.Tensor(b))), a.transpose(0, 2, 1) @ b, rtol=1e-5)


def test_formatter_dates_as_megengines():
    # MegEngine's MegEngineLogFormatter() dates records as logging.Formatter does ("2026-12-07 09:32:20,862");
    # its get_logger passes datefmt="%d %H:%M:%S" to the formatter class it is given, any logging.Formatter too
    import re

    from megxla import logger as L
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} hello$", L.MegEngineLogFormatter(color=False).format(record))
    plain = L.get_logger("megxla.test_formatter_dates", logging.Formatter)
    formatter = plain.handlers[0].formatter
    assert formatter.datefmt == "%d %H:%M:%S"
    assert re.match(r"\d\d \d\d:\d\d:\d\d$", formatter.formatTime(record, formatter.datefmt))
