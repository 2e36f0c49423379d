"""MegEngine's own jit tests exercise these behaviours (dumped-graph tools, graph simplification, TraceError texts);
written here in our own words so CI guards them without the upstream files."""
import doctest
import io

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.autodiff import GradManager
from megxla.core.tensor import megbrain_graph as G
from megxla.jit import TraceError, load, trace
from megxla.utils import comp_graph_tools as cgtools
from megxla.utils.network import Network


def _dumped(f, *args, **dump_kwargs):
    f(*args)
    buf = io.BytesIO()
    info = f.dump(buf, **dump_kwargs)
    buf.seek(0)
    return info, buf


def test_dump_info_names_and_graph_view_of_an_addition():
    f = trace(lambda a, b: a + b, symbolic=True, capture_as_const=True)
    a, b = mge.Tensor([2.0, 3.0]), mge.Tensor([4.0, 5.0])
    info, buf = _dumped(f, a, b)
    assert (info.nr_opr, info.inputs, info.outputs) == (3, ["arg_0", "arg_1"], ["ADD"])
    (out,) = G.load_graph(buf).output_vars_list
    assert out.name == "ADD" and cgtools.get_owner_opr_type(out) == "Elemwise"
    assert [cgtools.get_owner_opr_type(v) for v in cgtools.get_owner_opr_inputs(out)] == ["Host2DeviceCopy"] * 2
    buf.seek(0)
    res = cgtools.GraphInference(buf).run(a, inp_dict={"arg_1": b.numpy()})
    assert list(res) == ["ADD"]
    np.testing.assert_array_equal(res["ADD"], [6.0, 8.0])


def test_captured_tensor_is_an_immutable_tensor_and_oprs_seq_skips_it():
    w = mge.Tensor([3.0])
    f = trace(lambda x: F.exp(x) * w, capture_as_const=True)
    info, buf = _dumped(f, mge.Tensor([0.0]), arg_names=["data"])
    assert info.inputs == ["data"] and info.params == []  # (MegEngine 1.13: the captured w is a constant, no param)
    (out,) = G.load_graph(buf).output_vars_list
    assert cgtools.get_owner_opr_type(cgtools.get_owner_opr_inputs(out)[1]) == "ImmutableTensor"
    assert [op.name for op in cgtools.get_oprs_seq([out])] == ["data", "EXP", "MUL"]
    assert len(cgtools.get_oprs_seq([out], prune_immtensor=False)) == 4
    buf.seek(0)
    np.testing.assert_allclose(list(cgtools.GraphInference(buf).run(np.zeros(1, "float32")).values())[0], [3.0])


def test_dump_of_a_step_with_backward_runs_like_eager():
    x0, x1 = mge.Tensor(np.arange(6.0).reshape(2, 3)), mge.Tensor(np.ones((2, 3)) * 2)
    gm = GradManager().attach(x0)

    @trace(symbolic=True, capture_as_const=True)
    def f(x0, x1):
        with gm:
            y = x0 * x1
            gm.backward(y, F.ones_like(y))
        return y, x0.grad

    y, dx0 = f(x0, x1)
    buf = io.BytesIO()
    f.dump(buf)
    buf.seek(0)
    got = list(cgtools.GraphInference(buf).run(x0, x1).values())
    np.testing.assert_allclose(got[0], y.numpy())
    np.testing.assert_allclose(got[1], dx0.numpy())


def test_dict_outputs_name_the_outputs_and_jit_load_runs_the_dump(tmp_path):
    f = trace(lambda x: {"double": x * 2, "neg": -x}, capture_as_const=True)
    f(mge.Tensor([1.0]))
    path = str(tmp_path / "f.mge")
    info = f.dump(path, input_data=["#rand(0, 1)"])
    assert sorted(info.outputs) == ["double", "neg"]
    graph = G.load_graph(path).graph
    case = graph.testcases[0]
    np.testing.assert_allclose(dict(zip(info.outputs, case["outputs"]))["double"], case["inputs"]["arg_0"] * 2)
    g = load(path)
    np.testing.assert_allclose(dict(zip(info.outputs, g(mge.Tensor([5.0]))))["neg"].numpy(), [-5.0])
    with pytest.raises(TypeError, match="output is already in dict format"):
        f.dump(io.BytesIO(), output_names=["a", "b"])


def test_network_names_are_unique_and_filters_find_nodes():
    f = trace(lambda x: F.max(x, axis=1) + F.max(x, axis=0).sum(), capture_as_const=True)
    _, buf = _dumped(f, mge.Tensor(np.ones((2, 2), "float32")))
    net = Network.load(buf)
    names = [v.name for v in net.all_vars]
    assert len(names) == len(set(names))
    assert net.data_providers_filter.as_count() == 1
    assert net.opr_filter.type("Reduce").as_count() == 3
    assert net.get_var_by_name("arg_0") is net.input_vars[0]


def test_opt_level_simplifies_the_recording_before_compiling():
    def div(x):
        y = 2.0 * x
        return y / y

    def lse(x, y):
        return F.log(F.exp(x) + F.exp(y))

    zero, big = mge.Tensor(0.0), mge.Tensor(1.0e4)
    assert not np.isfinite(trace(div, symbolic=True, opt_level=0)(zero).numpy())
    assert trace(div, symbolic=True, opt_level=1)(zero).numpy() == 1.0
    assert not np.isfinite(trace(lse, symbolic=True, opt_level=0)(big, zero).numpy())
    np.testing.assert_allclose(trace(lse, symbolic=True, opt_level=1)(big, zero).numpy(), 1.0e4)

    def n_oprs(opt_level):
        f = trace(lambda x: F.log(F.exp(x)), capture_as_const=True, opt_level=opt_level)
        _, buf = _dumped(f, mge.Tensor(1.0))
        return len(cgtools.get_oprs_seq(G.load_graph(buf).output_vars_list))

    assert (n_oprs(0), n_oprs(1)) == (3, 1)


def test_io16xc32_stores_float16_between_operators():
    f = trace(lambda x: F.exp(x), capture_as_const=True)
    _, buf = _dumped(f, mge.Tensor([1.0, 2.0]), enable_io16xc32=True)
    res = G.load_graph(buf)
    (out,) = res.output_vars_list
    assert out.dtype == np.float16 and out.owner.inputs[0].dtype == np.float16
    assert out.owner.inputs[0].owner.type == "TypeCvt"
    np.testing.assert_allclose(res.graph.run(np.array([1.0, 2.0], "float32"))[0], np.exp([1.0, 2.0]), rtol=1e-3)


@pytest.mark.parametrize("normal, changed, reason", [
    (lambda a, b, c: a + b + c, lambda a, b, c: a + b - c, "operator mismatch"),
    (lambda a, b, c: a + b + 1, lambda a, b, c: a + b + 2, "tensors not equals"),
    (lambda a, b, c: a + b + c, lambda a, b, c: c + (a + b), "expect internal node, got external"),
    (lambda a, b, c: c + (a + b), lambda a, b, c: a + b + c, "expect external node, got internal"),
    (lambda a, b, c: a + b + c, lambda a, b, c: a + b + c + c, "too many instructions"),
    (lambda a, b, c: (a + b, b + c)[0] + c, lambda a, b, c: a + b, "mismature end"),
    (lambda a, b, c: (a + b, b + c)[1], lambda a, b, c: (a + b, b + c)[0], "data unreadable"),
])
def test_trace_error_text_is_megengine_s_and_details_are_a_note(normal, changed, reason):
    use = [normal]
    f = trace(lambda a, b, c: use[0](a, b, c))
    args = [mge.Tensor([1, 2]), mge.Tensor([3, 4]), mge.Tensor([5, 6])]
    f(*args)
    use[0] = changed
    with pytest.raises(TraceError) as info:
        f(*args)
    assert str(info.value) == f"trace error because {reason}"
    assert "differs from its recording" in "".join(info.value.__notes__)
    use[0] = normal  # the failed call changed nothing: the recording still runs
    np.testing.assert_array_equal(f(*args).numpy(), normal(*args).numpy())


def test_megengine_error_texts_of_capture_as_const_and_dump():
    f = trace(lambda a: a * 2, capture_as_const=True)
    with pytest.raises(TypeError, match="^Only support tensor type args when capture_as_const is enabled$"):
        f(1)
    g = trace(lambda x: None, capture_as_const=True)
    g(mge.Tensor([1.0]))
    with pytest.raises(ValueError, match="without return values cannot be dumped"):
        g.dump(io.BytesIO())


def test_external_convert_is_always_on():
    from megxla.core._imperative_rt.core2 import is_external_convert, set_external_convert_hook
    assert is_external_convert()
    with pytest.raises(TypeError):
        set_external_convert_hook(None)


@pytest.mark.parametrize("module", ["megxla.core.tensor.megbrain_graph", "megxla.utils.comp_graph_tools",
                                    "megxla.utils.network", "megxla.utils.network_node"])
def test_docstring_examples_run(module):
    import importlib
    mod = importlib.import_module(module)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0


def test_get_profile_reports_compiled_executables():
    f = trace(lambda x: -x, profiling=True)
    x = mge.Tensor([1.0])
    f(x)
    f(x)
    exe = f.get_profile()["profiler"]["executables"][0]
    assert exe["oprs"] == [{"type": "Elemwise", "name": "NEGATE"}] and "flops" in exe["cost"]
    with pytest.raises(RuntimeError, match="profiling=True"):
        trace(lambda x: -x).get_profile()


def test_megengine_spellings_model_code_uses():
    # Tensor._broadcast with a shape Tensor, F.repeat with a Tensor count, float class labels, RuntimeError
    np.testing.assert_array_equal(mge.Tensor([1.0])._broadcast(mge.Tensor([2, 2], dtype="int32")).numpy(),
                                  np.ones((2, 2)))
    np.testing.assert_array_equal(F.repeat(mge.Tensor([1, 2]), mge.Tensor(2)).numpy(), [1, 1, 2, 2])
    pred, label = mge.Tensor([[0.0, 1.0]]), mge.Tensor([1.0])
    assert F.nn.cross_entropy(pred, label).item() == pytest.approx(F.nn.cross_entropy(pred, mge.Tensor([1])).item())
    with pytest.raises(RuntimeError, match="add"):
        mge.Tensor([1, 2]) + mge.Tensor([1, 2, 3])


def test_nms_inside_exclude_from_trace_runs_eagerly():
    from megxla.jit import exclude_from_trace
    boxes = mge.Tensor([[0, 0, 10, 10], [1, 1, 10, 10], [50, 50, 60, 60]], dtype="float32")
    scores = mge.Tensor([0.9, 0.8, 0.7])
    seen = []

    @trace
    def f(boxes, scores):
        keep = F.vision.nms(boxes, scores, iou_thresh=0.5, max_output=3)
        with exclude_from_trace():
            seen.append(F.vision.nms(boxes, scores, iou_thresh=0.5).numpy())  # no max_output: cut to the count
        return keep

    for _ in range(2):
        np.testing.assert_array_equal(f(boxes, scores).numpy(), [0, 2])
    np.testing.assert_array_equal(seen[-1], [0, 2])


@pytest.mark.parametrize("symbolic", [False, True])
def test_exclude_from_trace_block_may_read_and_replace_values_on_later_calls(symbolic):
    # The recording call's block does nothing; later calls' blocks read a traced value and hand the graph a
    # tensor made on the host in its place. Each call must equal the eager computation.
    from megxla.jit import exclude_from_trace
    flip = [False]

    @trace(symbolic=symbolic)
    def f(x):
        y = x * 2
        with exclude_from_trace():
            if flip[0]:
                seen.append(y.numpy().tolist())
                y = y + 100
        return y - 1

    x = mge.Tensor([1.0, 2.0])
    for i in range(4):
        seen = []
        flip[0] = i % 2 == 1
        out = f(x).numpy()
        want = x.numpy() * 2 + (100 if flip[0] else 0) - 1
        np.testing.assert_allclose(out, want)
        assert seen == ([[2.0, 4.0]] if flip[0] else [])


def test_trace_without_host_over_a_closure_tensor_raises_megengine_s_text():
    # without the host there is nothing to feed a tensor from the enclosing scope on later calls
    outside = mge.Tensor([8.0])
    f = trace(lambda a: a * 2 + outside, symbolic=False, without_host=True)
    with pytest.raises(TraceError) as info:
        f(mge.Tensor([1.0]))
    assert str(info.value) == ("have some unknown input tensors in trace result, maybe you can set "
                               "`capture_as_const=True` when trace")
    assert "not reachable from its arguments" in "".join(info.value.__notes__)
    g = trace(lambda a: a * 2 + outside, without_host=True, capture_as_const=True)
    np.testing.assert_allclose(g(mge.Tensor([1.0])).numpy(), [10.0])


def test_every_docstring_example_of_the_package_runs():
    # `pytest --doctest-modules megxla` in its own process (importing every module, the megengine alias
    # included, must not leak into this session); names the examples share come from the repo's conftest.py
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--doctest-modules",
                        "megxla"], cwd=root, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_shape_numpy_inside_symbolic_trace():
    # MegEngine's shapes are Tensors inside trace(symbolic=True): `y.shape.numpy()` there is common upstream
    # test code. Ours are tuples that also convert; they compare, hash and pickle as plain tuples.
    import pickle
    from megxla.jit import trace
    import megxla.functional as F
    x = mge.Tensor([5, 2, 7, 1, 0, 3, 2])
    seen = []

    @trace(symbolic=True)
    def f(x):
        y = F.topk(x, 3)
        seen.append(y[0].shape.numpy())
        return y

    for _ in range(3):
        f(x)
    assert seen and all(s.dtype == np.int32 and s.tolist() == [3] for s in seen)
    shape = x.shape
    assert shape == (7,) and hash(shape) == hash((7,)) and type(pickle.loads(pickle.dumps(shape))) is tuple


def test_megengine_test_suites_conftest_reads_its_settings():
    # MegEngine 1.13's imperative/python/test/conftest.py imports these and compares them before and after every
    # test: without them, every upstream test errored before it ran
    from megxla.core import _config as config, _trace_option as trace_option, get_option
    from megxla.core._imperative_rt.core2 import (_get_amp_dtype_autocast, _get_amp_high_prec_dtype,
                                                  _get_amp_low_prec_dtype, _get_convert_inputs, _set_convert_inputs)
    from megxla.core.tensor import amp
    from megxla.device import get_device_count

    def settings():
        return (trace_option.use_symbolic_shape(), get_option("async_level"), get_option("enable_drop"),
                get_option("dtr_eviction_threshold"), config.benchmark_kernel, config.deterministic_kernel,
                config._compute_mode, amp.enabled, _get_convert_inputs(), _get_amp_dtype_autocast(),
                _get_amp_high_prec_dtype(), _get_amp_low_prec_dtype())
    before = settings()
    assert before[4:] == (False, False, "default", False, True, False, "float32", "float16")
    with mge.amp.autocast():
        assert amp.enabled and _get_amp_dtype_autocast()
    config._compute_mode = "float32"
    assert mge.config._compute_mode == "float32"
    config._compute_mode = "default"
    assert _set_convert_inputs(False) is True and _set_convert_inputs(True) is False
    assert settings() == before and get_device_count("cpu") >= 1


@pytest.mark.parametrize("weight_decay,always_adapt", [(0.0, False), (0.4, False), (0.0, True)])
def test_lamb_update_op_takes_the_optimizers_step(weight_decay, always_adapt):
    # (MegEngine's test_lamb imports the fused ``LAMBUpdate`` for its reference: one step of it equals one step of
    # optimizer.LAMB -- trust ratio included, as the LAMB paper's)
    import megxla.optimizer as optim
    from megxla.core._imperative_rt.core2 import apply
    from megxla.core.ops.builtin import LAMBUpdate
    rng = np.random.RandomState(0)
    p0, g = rng.uniform(size=(8, 8)).astype("float32"), rng.uniform(size=(8, 8)).astype("float32")
    w = mge.Parameter(p0)
    opt = optim.LAMB([w], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay,
                     always_adapt=always_adapt)
    w.grad = mge.Tensor(g)
    opt.step()
    op = LAMBUpdate(0.9, 0.999, 1, 1e-2, weight_decay, 1e-8, True, always_adapt)
    m, v, p = apply(op, mge.Tensor(np.zeros_like(p0)), mge.Tensor(np.zeros_like(p0)), mge.Tensor(p0),
                    mge.Tensor(g.astype("float16")))
    np.testing.assert_allclose(p.numpy(), w.numpy(), rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(m.numpy(), 0.1 * g.astype("float16").astype("float32"), rtol=1e-6)


def test_output_node_reads_a_loaded_graphs_output():
    # (MegEngine's test helpers -- helpers/utils.py, imported by test_functional / test_math / test_tensor --
    # import OutputNode: ``o = OutputNode(var); o.graph.compile(o.outputs).execute(); o.get_value()``)
    f = trace(lambda: mge.Tensor([1.0, 2.0]) * 3, symbolic=True, capture_as_const=True)
    f()
    buf = io.BytesIO()
    f.dump(buf)
    buf.seek(0)
    o = G.OutputNode(G.load_graph(buf).output_vars_list[0])
    with pytest.raises(RuntimeError):
        o.get_value()  # (not executed yet)
    o.graph.compile(o.outputs).execute()
    assert o.get_value().numpy().tolist() == [3.0, 6.0]
    g = trace(lambda a: a * 2, symbolic=True, capture_as_const=True)
    _, buf = _dumped(g, mge.Tensor([1.0]))
    o = G.OutputNode(G.load_graph(buf).output_vars_list[0])
    with pytest.raises(RuntimeError, match="inputs"):
        o.graph.compile(o.outputs).execute()  # (a graph with inputs: run it with them)


def test_cond_take_and_nms_keep_op_descriptors():
    # (MegEngine's test_functional compares these descriptors by their parameters; applied, they compute
    # F.cond_take's and F.vision.nms's results)
    from megxla.core._imperative_rt.core2 import apply
    from megxla.core.ops import builtin
    assert builtin.CondTake() == builtin.CondTake()
    assert builtin.NMSKeep(0.7, 100) == builtin.NMSKeep(0.7, 100) != builtin.NMSKeep(0.8, 100)
    assert builtin.NMSKeep(0.7, 100) != builtin.NMSKeep(0.7, 200)
    x = mge.Tensor(np.arange(6, dtype="float32").reshape(2, 3))
    v, i = apply(builtin.CondTake(), x, x > 2)
    want_v, want_i = F.cond_take(x > 2, x)
    assert v.numpy().tolist() == want_v.numpy().tolist() and i.numpy().tolist() == want_i.numpy().tolist()
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30], [21, 21, 30, 30]], "float32")
    keep, count = apply(builtin.NMSKeep(0.5, 3), mge.Tensor(np.stack([boxes, boxes[::-1]])))
    assert count.numpy().tolist() == [2, 2]
    assert keep.numpy().tolist() == [[0, 2, -1], [0, 2, -1]]
    ref = F.vision.nms(mge.Tensor(boxes), mge.Tensor(np.array([4, 3, 2, 1], "float32")), 0.5)
    assert ref.numpy().tolist() == [0, 2]
