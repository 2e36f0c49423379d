"""Regressions found by running MegEngine 1.13's own unit tests on megxla (through the ``megengine`` alias).

Expected values are what real MegEngine 1.13 (CPU) returns for the same calls.
"""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla import Tensor
from megxla.core import _trace_option
from megxla.core._dispatch import OpError
from megxla.core._imperative_rt import core2


# ---- thin internal paths MegEngine code imports ------------------------------------------------------------------
def test_trace_option_static_shapes():
    assert _trace_option.use_symbolic_shape() is False
    assert _trace_option.set_symbolic_shape(False) is False
    # MegEngine code turns symbolic shapes on around eager code (test_activation's prelu): accepted, shapes stay
    # static tuples, and the previous request comes back for the restore
    assert _trace_option.set_symbolic_shape(True) is False
    assert _trace_option.use_symbolic_shape() is False
    assert mge.Tensor(np.zeros((2, 3))).shape == (2, 3)
    assert _trace_option.set_symbolic_shape(False) is True


def test_core2_sync_and_create_complex():
    y = Tensor([1.0, 2.0]) * 3
    assert core2.sync() is None
    c = core2.create_complex(Tensor([1.0, 2.0]), Tensor([3.0, 4.0]))
    assert c.dtype == np.complex64
    np.testing.assert_array_equal(c.numpy(), [1 + 3j, 2 + 4j])
    np.testing.assert_array_equal(y.numpy(), [3.0, 6.0])
    with pytest.raises(OpError, match="create_complex.*int32"):  # MegEngine: "unsupported dtype Int32"
        core2.create_complex(Tensor([1, 2]), Tensor([3, 4]))


# ---- functional bugs ---------------------------------------------------------------------------------------------
def test_eye_shape_forms():
    # MegEngine: eye((n,)) is square; the shape may be a 1-D Tensor (test_tensor.py::test_eye)
    np.testing.assert_array_equal(F.eye([3]).numpy(), np.eye(3, dtype="float32"))
    np.testing.assert_array_equal(F.eye(Tensor([2, 3])).numpy(), np.eye(2, 3, dtype="float32"))
    assert F.eye(Tensor([3]), dtype="bool").numpy().tolist() == np.eye(3, dtype=bool).tolist()
    with pytest.raises(OpError, match="eye"):
        F.eye([2, 3, 4])


@pytest.mark.parametrize("max_output", [None, 4])
def test_nms_no_boxes(max_output):
    out = F.vision.nms(Tensor(np.zeros((0, 4), "float32")), Tensor(np.zeros((0,), "float32")), iou_thresh=0.5,
                       max_output=max_output)
    assert out.shape == (0,) and out.dtype == np.int32


def test_roi_align_no_rois():
    x = Tensor(np.ones((1, 2, 8, 8), "float32"))
    out = F.vision.roi_align(x, Tensor(np.zeros((0, 5), "float32")), output_shape=(7, 7), mode="average",
                             spatial_scale=0.25, sample_points=2, aligned=True)
    assert out.shape == (0, 2, 7, 7) and out.dtype == np.float32


@pytest.mark.parametrize("dtype, expected", [("uint8", [5, 5, 10, 7, 6, 8, 9, 9, 6]),
                                             ("int8", [-3, -3, 2, -1, -2, 0, 1, 1, -2])])
def test_warp_perspective_8bit(dtype, expected):
    x = (np.arange(16).reshape(1, 1, 4, 4) * 7 % 17 - (0 if dtype == "uint8" else 8)).astype(dtype)
    M = Tensor(np.array([[[1.0, 0.3, 0.25], [0.1, 1, 0.5], [0, 0, 1]]], np.float32))
    out = F.vision.warp_perspective(Tensor(x), M, (3, 3), border_mode="constant", border_val=3.7)
    assert out.dtype == np.dtype(dtype)
    assert out.numpy().ravel().tolist() == expected  # MegEngine 1.13 CPU, bit for bit


def test_deformable_psroi_pooling_extra_trans_rows_unused():
    rng = np.random.RandomState(0)
    inp = Tensor(rng.rand(1, 8, 16, 16).astype("float32"))
    rois = Tensor(np.array([[0, 1, 1, 10, 10], [0, 2, 3, 12, 9]], "float32"))
    trans = rng.rand(5, 2, 7, 7).astype("float32")
    a = F.deformable_psroi_pooling(inp, rois, Tensor(trans), False, 7, 7, 7, 4, 1.0, 0.1)
    b = F.deformable_psroi_pooling(inp, rois, Tensor(trans[:2]), False, 7, 7, 7, 4, 1.0, 0.1)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(a.numpy().ravel()[:5], [0.5863, 0.5794, 0.6532, 0.6876, 0.4458], atol=1e-4)
    with pytest.raises(OpError, match="trans"):
        F.deformable_psroi_pooling(inp, rois, Tensor(trans[:1]), False, 7, 7, 7, 4, 1.0, 0.1)


# ---- data ------------------------------------------------------------------------------------------------------
def test_random_crop_pads_small_input_bottom_right():
    from megxla.data.transform import RandomCrop
    np.random.seed(0)
    img = (np.arange(4 * 5 * 3).reshape(4, 5, 3) % 251).astype(np.uint8)
    out = RandomCrop((9, 6), padding_size=1, padding_value=[1, 2, 3]).apply(img)
    assert out.shape == (9, 6, 3) and out.dtype == np.uint8
    assert out[..., 0].tolist() == [[1, 1, 1, 1, 1, 1], [1, 0, 3, 6, 9, 12], [1, 15, 18, 21, 24, 27],
                                    [1, 30, 33, 36, 39, 42], [1, 45, 48, 51, 54, 57]] + [[1] * 6] * 4
    assert out[..., 2].ravel()[-8:].tolist() == [3] * 8  # MegEngine 1.13's values
    assert RandomCrop((150, 120), padding_size=10).apply(np.zeros((100, 100, 3), np.uint8)).shape == (150, 120, 3)


# ---- functional internals MegEngine code calls -------------------------------------------------------------------
def test_assert_equal():
    x = F.ones((2, 3))
    assert F.utils._assert_equal(x, F.zeros((2, 3)) + 1.00001) is x  # returns expect, as MegEngine
    with pytest.raises(RuntimeError, match="maxerr"):
        F.utils._assert_equal(x, F.zeros((2, 3)) + 1.1)
    with pytest.raises(RuntimeError, match="shapes"):
        F.utils._assert_equal(x, F.ones((3, 2)))


def test_check_non_finite_scales_in_place():
    data = [np.array([1.0, 2.0], "float32"), np.array([3.0], "float32")]
    xs = [Tensor(d) for d in data]
    flag = F.math._check_non_finite(xs, 0.5)
    assert flag.dtype == np.int32 and flag.numpy().tolist() == [0]
    assert xs[0].numpy().tolist() == [0.5, 1.0] and xs[1].numpy().tolist() == [1.5]
    assert F.math._check_non_finite([Tensor([1.0]), Tensor([float("nan")])]).numpy().tolist() == [1]


# ---- core.tensor.utils.subgraph_fn (MegEngine's test_elemwise builds logsigmoid with it) -------------------------
def _logsigmoid_op(dtype, device):
    from megxla.core.tensor.utils import subgraph_fn

    @subgraph_fn("LogSigmoid", dtype=dtype, device=device, nr_inputs=1, jit_fusion=False, custom_grad=True)
    def logsigmoid(inputs, f, c):
        (inp,) = inputs[0:1]
        exp = f("exp", f("-", f("abs", inp)))
        oup1 = f("relu", f("-", inp))
        oup = f("-", f("+", f("log1p", exp), oup1))
        (oup_grad,) = yield (oup,)
        oup_grad = f("-", oup_grad)
        inp_grad_0 = f("-", f("switch_gt0", oup1, oup_grad))
        inp_grad_1 = f("-", f("*", f("/", oup_grad, f("+", exp, c(1))), exp))
        yield (f("+", inp_grad_0, f("abs_grad", inp, inp_grad_1)),)
    return logsigmoid


def test_subgraph_fn_custom_grad():
    x = Tensor(np.array([-3.0, -0.5, 0.0, 0.7, 2.0], "float32"))
    gm = mge.autodiff.GradManager().attach(x)
    with gm:
        (y,) = _logsigmoid_op(x.dtype, x.device)(x)
        gm.backward((y * Tensor([1.0, 2.0, 3.0, 4.0, 5.0])).sum())
    # MegEngine 1.13's values (its body's abs_grad gives -dy at 0, hence -1.5 there)
    np.testing.assert_allclose(y.numpy(), [-3.048587, -0.974077, -0.693147, -0.403186, -0.126928], rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), [0.952574, 1.244919, -1.5, 1.327249, 0.596015], rtol=1e-5)


def test_subgraph_fn_plain_and_abs_grad_mode():
    from megxla.core.tensor.utils import subgraph_fn
    from megxla.core.ops.builtin import Elemwise

    @subgraph_fn("Fma", dtype="float32", device=None, nr_inputs=2)
    def fma(inputs, f, c):
        a, b = inputs
        return (f("+", f("*", a, b), c(1.0)), f("fma3", a, b, a)), (True, False)
    outs = fma(Tensor([2.0]), Tensor([3.0]))
    assert isinstance(outs, tuple) and [o.numpy().tolist() for o in outs] == [[7.0], [8.0]]
    with pytest.raises(TypeError, match="takes 2 inputs"):
        fma(Tensor([2.0]))
    (g,) = core2.apply(Elemwise(mode="abs_grad"), Tensor([-1.0, 0.0, 2.0]), Tensor([5.0, 5.0, 5.0]))
    assert g.numpy().tolist() == [-5.0, -5.0, 5.0]  # megdnn: x > 0 ? dy : -dy


def test_sigmoid_silu_of_int_tensor_are_float32():
    # MegEngine raises (float-only kernels); megxla gives the float32 result, as for gelu / hswish
    # (docs/differences.md). MegEngine's test_int32_input runs every functional.elemwise op on int32.
    x = Tensor(np.array([1, 2, -3], "int32"))
    y = F.sigmoid(x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), [0.7310586, 0.8807971, 0.0474259], rtol=1e-6)
    np.testing.assert_allclose(F.silu(x).numpy(), [0.7310586, 1.7615942, -0.1422776], rtol=1e-6)
    from megxla.functional.elemwise import Elemwise  # MegEngine's functional.elemwise exposes the descriptor
    assert Elemwise(mode="add") == Elemwise(mode=Elemwise.Mode.ADD)


def test_network_paths():
    # MegEngine's test helpers import these paths
    from megxla.utils.network import set_symbolic_shape
    from megxla.utils.network_node import VarNode, OpNode
    from megxla.core.tensor.megbrain_graph import VarNode as GV, OpNode as GO
    assert set_symbolic_shape(False) is False
    # a loaded graph's nodes count as network nodes (MegEngine's Network.load gives network_node's classes); a
    # hand-built network's variables are Tensors (tests/test_varnode_graph.py)
    assert issubclass(GV, VarNode) and issubclass(GO, OpNode) and issubclass(VarNode, mge.Tensor)


# ---- module pickles carry MegEngine's attribute set (test_module.py::test_module_compatible) ---------------------
def test_module_attributes_are_megengines():
    import pickle
    import megxla.module as M

    class Empty(M.Module):
        def forward(self):
            pass

    # MegEngine's test_module_compatible: exactly these; MegEngine's Module.__setattr__ reads `_name`, so a whole
    # megxla model unpickled by MegEngine needs it
    assert set(Empty().__dict__) == {"_modules", "name", "training", "quantize_disabled", "_forward_pre_hooks",
                                     "_forward_hooks", "_name", "_short_name"}
    net = M.Sequential(M.Linear(2, 2))
    back = pickle.loads(pickle.dumps(net))
    assert back._name is None and back[0]._short_name == "0"
    # files of MegEngine versions before `_short_name` hold the short name in `_name` (MegEngine moves it)
    old = Empty.__new__(Empty)
    old.__setstate__({"_modules": [], "name": None, "training": True, "quantize_disabled": False,
                      "_forward_pre_hooks": {}, "_forward_hooks": {}, "_name": "fc"})
    assert old._short_name == "fc" and old._name is None


# ---- megengine.core.set_option / get_option, mge._sync (test_converge, test_interpreter, test_functional) -------
def test_interpreter_options():
    from megxla.core import get_option, set_option
    # MegEngine 1.13's defaults
    assert (get_option("async_level"), get_option("enable_drop"), get_option("enable_host_compute"),
            get_option("dtr_evictee_minimum_size")) == (2, 0, 1, 1048576)
    set_option("enable_drop", True)
    try:
        assert get_option("enable_drop") == 1
    finally:
        set_option("enable_drop", 0)
    set_option("async_level", 1)  # one setting with megxla.config.async_level, as in MegEngine
    try:
        assert mge.config.async_level == 1 and get_option("async_level") == 1
    finally:
        mge.config.async_level = 2
    with pytest.raises(IndexError, match="unknown option 'nonexist'"):
        get_option("nonexist")
    with pytest.raises(TypeError, match="expected an int"):  # MegEngine's binding takes ints only
        set_option("max_recompute_time", 2.7)
    assert get_option("max_recompute_time") == 1
    y = Tensor([1.0]) * 2
    assert mge._sync() is None and y.numpy().tolist() == [2.0]


def test_bad_index_is_index_error():
    # test_indexing_op.py::test_indexing_error (eager): MegEngine (and NumPy) raise IndexError
    a = Tensor(np.arange(9, dtype="float32").reshape(3, 3))
    b = Tensor(np.array([1, 2]))
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., ...]
    with pytest.raises(IndexError, match="too many indices"):
        a[b, b, b]
    with pytest.raises(ValueError):  # shape mismatch of an assignment
        a[:] = b
    assert a.numpy().tolist() == np.arange(9).reshape(3, 3).tolist()


def test_comp_node_at_imperative_rt_path():
    # test_imperative_rt.py::test_tensor_on_device
    from megxla.core._imperative_rt import CompNode
    x = mge.tensor(np.arange(3, dtype="float32"), device=CompNode("cpu0:1"))
    assert str(x.device) == "cpu0:1" and x.numpy().tolist() == [0.0, 1.0, 2.0]
    from megxla.device import CompNode as DeviceCompNode  # test_subgraph.py imports it from megengine.device
    assert DeviceCompNode is CompNode


# ---- optimizer/test_lamb.py: MegEngine's LAMBUpdate kernel checked against the test's own reference -------------
def test_lamb_step_matches_upstream_reference():
    # test_lamb applies the C++ op LAMBUpdate(0.9, 0.999, step=1, lr=1e-3, wd=0.4, eps=1e-8, bias_correction=True,
    # always_adapt=False) to random slots and compares with its own Python reference (atol 1e-2); megxla's
    # optimizer.LAMB follows that reference (MegEngine's CPU kernel skips the trust ratio: docs/differences.md)
    import megxla.optimizer as optim
    rng = np.random.RandomState(0)
    m, v, p = (rng.uniform(size=(16, 16)).astype("float32") for _ in range(3))
    g = rng.uniform(size=(16, 16)).astype("float16").astype("float32")
    w = mge.Parameter(p)
    opt = optim.LAMB([w], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.4)
    w.grad = Tensor(g)
    opt._state[w]["exp_avg"]._reset(Tensor(m))  # the slots exist after construction (MegEngine's layout)
    opt._state[w]["exp_avg_sq"]._reset(Tensor(v))
    opt.step()
    # the upstream test's lamb_update reference, in float64
    m1, v1 = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
    delta = (m1 / (1 - 0.9)) / (np.sqrt(v1 / (1 - 0.999)) + 1e-8) + 0.4 * p
    ratio = np.linalg.norm(p.astype("float64")) / np.linalg.norm(delta)
    np.testing.assert_allclose(opt._state[w]["exp_avg"].numpy(), m1, rtol=1e-6)
    np.testing.assert_allclose(opt._state[w]["exp_avg_sq"].numpy(), v1, rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), p - 1e-3 * ratio * delta, rtol=1e-5, atol=1e-6)


def test_bfloat16_numpy_type():
    # test_dtype_bfloat16.py: MegEngine's NumPy bfloat16 type at megengine.core.tensor.dtype
    import pickle
    from megxla.core.tensor.dtype import bfloat16
    a = np.array([0.5, 0.13425, 3.4687, -1.34976, -9.34673, 0.0], dtype=bfloat16)
    np.testing.assert_allclose(a.astype("float32"), [0.5, 0.133789, 3.46875, -1.351562, -9.375, 0.0], atol=1e-6)
    x = Tensor(np.array([-3.4, 1.394683], dtype=bfloat16), dtype=bfloat16)
    assert x.numpy().dtype == bfloat16 and x.numpy().tolist() == [-3.40625, 1.3984375]
    assert (x + x).dtype == bfloat16 and (x * 2).dtype == np.float32  # MegEngine 1.13's promotion
    assert pickle.loads(pickle.dumps(a)).dtype is a.dtype


def test_auto_format_convert_switch_at_megengine_path():
    # amp/test_convert_format.py imports it from core._config (MegEngine's optimizer and GradManager call it)
    from megxla.core._config import get_auto_format_convert, set_auto_format_convert
    assert get_auto_format_convert() is True  # MegEngine 1.13's default
    set_auto_format_convert(False)
    try:
        assert mge.config._auto_format_convert is False and get_auto_format_convert() is False
    finally:
        set_auto_format_convert(True)
    assert mge.config._auto_format_convert is True


# ---- utils/test_dump_naming.py: operator names of a dumped graph are MegEngine's AutoNaming ----------------------
def _dumped_oprs(fn):
    import io
    import megxla.utils.comp_graph_tools as cgtools
    from megxla.core.tensor import megbrain_graph as G
    from megxla.jit import trace
    f = trace(fn, symbolic=True, capture_as_const=True)
    f(Tensor(np.ones((2, 3), "float32"))).numpy()
    buf = io.BytesIO()
    f.dump(buf, optimize_for_inference=False, arg_names=("x",), keep_opr_name=True, keep_var_name=2)
    buf.seek(0)
    return cgtools.get_oprs_seq(G.load_graph(buf).output_vars_list)


def test_dump_operator_names_follow_module_scopes():
    import megxla.module as M

    class Simple(M.Module):
        def __init__(self):
            super().__init__(name="simple")
            self.l0 = [M.Linear(3, 3) for _ in range(2)]
            self.named = M.Linear(3, 3, name="x")

        def forward(self, x):
            x = F.relu(F.relu(x))
            for _ in range(2):
                x = self.l0[1](x)
            x = self.named(x)
            x.name = "o_x"
            return x

    ops = _dumped_oprs(Simple())
    # MegEngine 1.13's names for the same program (its test_with_same_operators, test_with_submodule_in_container,
    # test_named_submodule, test_user_named_tensor)
    assert [op.name for op in ops] == ["x", "simple.RELU[0]", "simple.RELU[1]", "simple.l0.1.MatrixMul[0]",
                                       "simple.l0.1.ADD[0]", "simple.l0.1.MatrixMul[1]", "simple.l0.1.ADD[1]",
                                       "simple.x.MatrixMul", "simple.x.ADD"]
    assert ops[-1].outputs[0].name == "o_x"

    class Top(M.Module):  # an unnamed top-level module opens no scope (test_ignore_top_module)
        def forward(self, x):
            return x + x

    assert [op.name for op in _dumped_oprs(Top())] == ["x", "ADD"]

    class Param(M.Module):  # test_user_named_param: a parameter is named by its module path (its own name last)
        def __init__(self):
            super().__init__(name="simple")
            self.k = mge.Parameter(2.0, name="k")

        def forward(self, x):
            return self.k * x

    (_, mul) = _dumped_oprs(Param())
    assert [v.name for v in mul.inputs] == ["x", "simple.k"]  # MegEngine's graph: the constant operand last


def test_dump_input_named_by_its_tensor():
    # test_catch_input_name: without arg_names a named argument tensor names the graph input
    import io
    from megxla.jit import trace
    f = trace(lambda x: 2 * x, symbolic=True, capture_as_const=True)
    f(Tensor(np.ones((2, 3), "float32"), name="data"))
    assert f.dump(io.BytesIO()).inputs == ["data"]


def test_dump_names_of_a_quantized_module():
    # test_quantized_module_user_naming(_param): MegEngine 1.13's operator sequence and names; the bias cast
    # (constants only) is folded into a constant as MegEngine's trace does
    import megxla.module as M
    from megxla.quantization.quantize import quantize, quantize_qat

    class Simple(M.Module):
        def __init__(self):
            super().__init__(name="simple")
            self.quant = M.QuantStub()
            self.linear = M.Linear(3, 3, bias=True, name="user-linear")
            self.dequant = M.DequantStub()
            self.linear.weight.name = "user-weight"

        def forward(self, x):
            return self.dequant(self.linear(self.quant(x)))

    m = Simple()
    quantize_qat(m)
    quantize(m)
    m.eval()
    ops = _dumped_oprs(m)
    assert [op.name for op in ops] == ["x", "simple.quant.TypeCvt", "simple.user-linear.MatrixMul",
                                       "simple.user-linear.ADD", "simple.user-linear.TypeCvt",
                                       "simple.dequant.TypeCvt"]
    assert [v.name for v in ops[2].inputs] == ["simple.quant.TypeCvt", "simple.linear.user-weight"]


# ---- MegEngine 1.13.4's test_math.py (found running it, session 23) ----------------------------------------------
def test_sort_along_dim_with_arguments_given_as_tensors():
    """``F.sort(inp, descending, dim)`` (MegEngine 1.13.2+): any axis of an N-d tensor; its upstream ``test_sort``
    passes every argument as a Tensor (``opr_test``), so ``dim`` may be a 0-d integer Tensor."""
    rng = np.random.RandomState(0)
    data = rng.randint(-100, 101, size=(3, 4, 5)).astype("int32")
    for dim in (0, 1, -1, -3):
        v, i = F.sort(Tensor(data), Tensor(False), Tensor(dim))
        np.testing.assert_array_equal(v.numpy(), np.sort(data, dim))
        np.testing.assert_array_equal(i.numpy(), np.argsort(data, dim, kind="stable"))
        assert i.dtype == np.int32
    with pytest.raises(OpError, match="sort: dim 3 out of range"):
        F.sort(Tensor(data), dim=3)


def test_reduction_axis_errors_are_assertion_errors():
    """MegEngine checks a reduction's axes with ``assert`` (its upstream ``test_sum_neg_axis`` expects an
    AssertionError for ``axis=(-1, 1)`` of a 2-d tensor); megxla's OpError is one too."""
    x = Tensor(np.ones((2, 3), "float32"))
    for axis, msg in [((-1, 1), "repeated axis"), (2, "out of range")]:
        with pytest.raises(AssertionError, match=msg):
            F.sum(x, axis=axis)
        with pytest.raises(OpError, match=msg):
            F.mean(x, axis=axis)


def test_non_zero_eager_traced_and_auto_jit():
    """``F.non_zero`` (MegEngine 1.13.2+; its upstream ``test_nonzero``): rows of indices, or a tuple per dimension
    (``np.nonzero``), int32; the same under ``trace`` (a new count records again) and under auto-jit."""
    from megxla.jit import trace
    rng = np.random.RandomState(0)
    conds = [rng.rand(3, 4) > 0.5 for _ in range(3)] + [np.zeros((2, 3), "float32"), np.array([0, 2, 0, -1.5])]
    traced = trace(lambda c: F.non_zero(c), symbolic=True)
    for c in conds:
        want = np.transpose(np.nonzero(c))
        for got in (F.non_zero(Tensor(c)), traced(Tensor(c))):
            assert got.dtype == np.int32 and got.shape == want.shape
            np.testing.assert_array_equal(got.numpy(), want)
        for got, w in zip(F.non_zero(Tensor(c), as_tuple=True), np.nonzero(c)):
            np.testing.assert_array_equal(got.numpy(), w)
        mge.config.auto_jit = True
        try:
            np.testing.assert_array_equal(F.non_zero(Tensor(c) * 1).numpy(), want)
        finally:
            mge.config.auto_jit = False
    with pytest.raises(TypeError, match="non_zero: input must be a tensor"):
        F.non_zero(np.ones(3))
    with pytest.raises(OpError, match="at least one dimension"):
        F.non_zero(Tensor(1.0))


def test_interpolate_rank_errors_are_assertion_errors():
    """MegEngine asserts interpolate's input rank per mode (its upstream ``test_interpolate``: a 4-D input in
    ``linear`` mode raises AssertionError); megxla's OpError is one too."""
    x4 = Tensor(np.arange(4, dtype="float32").reshape(1, 1, 2, 2))
    with pytest.raises(AssertionError, match="needs a 3-D input"):
        F.vision.interpolate(x4, scale_factor=2.0, mode="linear")
    with pytest.raises(OpError, match="needs a 5-D"):
        F.vision.interpolate(x4, scale_factor=2.0, mode="trilinear")


def test_expand_dims_with_a_repeated_axis_inserts_one_axis_per_entry():
    """MegEngine's AddAxis inserts the sorted axes one after another (its ``test_network_node.py::
    test_add_remove_axis``: ``F.expand_dims(data, [0, 0])``); megxla raised "repeated axis"."""
    x = Tensor(np.arange(6, dtype="float32").reshape(2, 3))
    assert F.expand_dims(x, [0, 0]).shape == (1, 1, 2, 3)
    assert F.expand_dims(x, [0, 2, 2]).shape == (1, 2, 1, 1, 3)
    np.testing.assert_array_equal(F.squeeze(F.expand_dims(x, [1, 1]), (1, 2)).numpy(), x.numpy())
    with pytest.raises(OpError, match="expand_dims: axis 3 is out of range"):
        F.expand_dims(x, [-1, -1])  # (two axes inserted at 3 of a 2-d tensor: MegBrain's AddAxis refuses too)
