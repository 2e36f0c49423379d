"""Differential probes of ``utils.profiler``, ``utils.network`` and ``utils.comp_graph_tools`` against MegEngine 1.13
(session 80). Every expected value below is what MegEngine 1.13.0 printed for the same script."""
import io
import json
import os

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.utils.comp_graph_tools as cgtools
import megxla.utils.network as NET
import megxla.utils.network_node as N
import megxla.utils.profiler as P
from megxla.jit import trace
from megxla.utils.network import Network, NodeFilter, as_oprnode


# ---- profiler ------------------------------------------------------------------------------------------------
def test_profiler_constructor_arguments_as_megengine(tmp_path):
    d = str(tmp_path)
    p = P.Profiler(path=d)
    # MegEngine: path "D/<PID>.chrome_timeline.json" before start, with_backtrace kept, options are ints
    assert p.path == os.path.join(d, "<PID>.chrome_timeline.json") and p._pid == "<PID>"
    assert p.with_backtrace is False
    assert P.Profiler(path=d, formats=[]).formats == ["chrome_timeline.json"]
    two = P.Profiler(path=d, formats=["chrome_timeline.json", "chrome_timeline.json"])
    assert two.path == os.path.join(d, "<PID>.{chrome_timeline.json,chrome_timeline.json}")
    # MegEngine ignores an unknown option and int()s the known ones
    assert P.Profiler(path=d, foo=1)._options == {"sample_rate": 0, "profile_device": 1, "num_tensor_watch": 10,
                                                  "enable_cupti": 0}
    assert P.Profiler(path=d, sample_rate="3")._options["sample_rate"] == 3
    assert P.Profiler(path=d, sample_rate=2.7)._options["sample_rate"] == 2
    with pytest.raises(ValueError, match="invalid literal"):
        P.Profiler(path=d, sample_rate="x")
    with pytest.raises(AssertionError, match="^formats excepts list, got str$"):
        P.Profiler(path=d, formats="chrome_timeline.json")
    with pytest.raises(AssertionError, match="^unsupported format foo.json$"):
        P.Profiler(path=d, format="foo.json")


def test_profiler_start_step_stop_dump_protocol(tmp_path):
    d = str(tmp_path)
    p = P.Profiler(path=d)
    assert not P.is_profiling()
    assert p.dump() is None  # MegEngine: nothing recorded, nothing written, no error
    for call in (p.stop, p.step):
        with pytest.raises(AssertionError):  # MegEngine: AssertionError
            call()
    assert p.start() is p and P.is_profiling()
    with pytest.raises(AssertionError):
        P.Profiler(path=d).start()
    assert p.step() is p
    (mge.Tensor(np.arange(6, dtype="float32")) * 2 + 1).numpy()
    p.stop()
    assert not P.is_profiling() and os.listdir(d) == []  # written at dump, not at stop
    with pytest.raises(AssertionError):
        p.stop()
    assert p.dump() is None and p.dump() is None
    assert sorted(os.listdir(d)) == [f"{os.getpid()}.chrome_timeline.json"]
    with open(p.path) as f:
        js = json.load(f)
    # MegEngine's top level: {"traceEvents": [...], "metadata": {"localTime": "<ns>"}}; every event is named
    assert {"traceEvents", "metadata"} <= set(js) and isinstance(js["metadata"]["localTime"], str)
    assert all("name" in e and "ph" in e for e in js["traceEvents"])


def test_profiler_with_then_dump_and_decorator(tmp_path):
    pr = P.Profiler(path=str(tmp_path / "a"))
    with pr:
        assert P.is_profiling()
        (mge.Tensor([1.0]) * 2).numpy()
    pr.dump()  # MegEngine's usual pattern: the dump after the with block (was a RuntimeError)
    assert os.listdir(tmp_path / "a") == [f"{os.getpid()}.chrome_timeline.json"]

    prof = P.Profiler(path=str(tmp_path / "b"))

    @prof
    def f(x):
        return (x * 3).numpy()
    np.testing.assert_equal(f(mge.Tensor([1.0])), [3.0])
    assert f.__profiler__ is prof and f.__name__ == "f"  # MegEngine: the decorator keeps its profiler there

    def nested():
        with P.Profiler(path=str(tmp_path / "e")):
            with P.Profiler(path=str(tmp_path / "f")):
                pass
    with pytest.raises(AssertionError):
        nested()
    assert not P.is_profiling()


def test_profiler_dump_to_a_file_path_warns(tmp_path, capfd, caplog):
    path = tmp_path / "file"
    path.write_text("")
    pp = P.Profiler(path=str(path))
    pp.start()
    pp.stop()
    assert pp.dump() is None  # MegEngine: a warning "... is not a directory, cannot write profiling results"
    assert "is not a directory" in capfd.readouterr().err + caplog.text  # (whichever the logger writes to)
    pp._path = str(tmp_path / "ok")  # (written at last, not at exit)
    pp.dump()


def test_merge_trace_events(tmp_path):
    d = str(tmp_path)
    pr = P.Profiler(path=d)
    with pr:
        (mge.Tensor([1.0]) * 2).numpy()
    P.merge_trace_events(d)  # (MegEngine's raises AssertionError on its own files: a MegEngine bug)
    with open(os.path.join(d, "merge.chrome_timeline.json")) as f:
        assert sorted(json.load(f)) == ["traceEvents"]


# ---- network -------------------------------------------------------------------------------------------------
def _dumped():
    @trace(symbolic=True, capture_as_const=True)
    def fwd(a, b):
        return (a + b) * 2
    fwd(mge.Tensor([1.0, 2.0, 3.0]), mge.Tensor([4.0, 5.0, 6.0]))
    buf = io.BytesIO()
    fwd.dump(buf, arg_names=["a", "b"], output_names="o", optimize_for_inference=False)
    return buf.getvalue()


def test_network_var_str_partial_shape_and_dicts():
    g = Network.load(io.BytesIO(_dumped()))
    a = g.var_filter.name("a").as_unique()
    assert str(a) == "VarNode:a" and repr(a) == "VarNode:a"  # MegEngine: str is the repr
    assert a.partial_shape == (3,)
    assert type(g.all_vars_dict).__name__ == "OrderedDict" and type(g.all_oprs_dict).__name__ == "OrderedDict"
    assert type(g.all_oprs_map).__name__ == "OrderedDict"


def test_network_remove_output_of_a_non_output_warns(capfd, caplog):
    g = Network.load(io.BytesIO(_dumped()))
    assert g.remove_output(g.input_vars[0]) is None  # MegEngine: "WRN Failed to remove a(...)", no error
    assert "Failed to remove a(" in capfd.readouterr().err + caplog.text  # (whichever the logger writes to)
    assert [v.name for v in g.output_vars] == ["o"]


def test_network_lookups_assert_as_megengine():
    g = Network.load(io.BytesIO(_dumped()))
    with pytest.raises(AssertionError, match="^0 operators of type nope found$"):
        g.get_var_by_name("nope")
    with pytest.raises(AssertionError, match="^0 operators of type nope found$"):
        g.get_opr_by_name("nope")
    with pytest.raises(AssertionError, match="^2 operators of type .*Host2DeviceCopy'> found$"):
        g.get_opr_by_type(N.Host2DeviceCopy)
    assert g.get_var_by_name("nope", unique=False) == []
    with pytest.raises(AssertionError, match="^bad opr type"):
        list(g.opr_filter.type(int))
    with pytest.raises(AssertionError, match="^bad pattern: 3$"):
        g.opr_filter.name(3)
    with pytest.raises(AssertionError, match=r"^Can not find \['nope'\] in this model$"):
        Network.load(io.BytesIO(_dumped()), outspec=["nope"])


def test_node_filter_check_type_make_all_deps_and_exact_names():
    g = Network.load(io.BytesIO(_dumped()))
    with pytest.raises(TypeError, match="all nodes should be"):  # MegEngine: TypeError, raised when iterated
        list(g.opr_filter.check_type(N.Elemwise))
    assert len(list(g.opr_filter.check_type(N.OpNode))) == 5
    deps = NodeFilter.make_all_deps(g.output_vars[0])
    assert sorted(o.type for o in deps) == ["Elemwise", "Elemwise", "Host2DeviceCopy", "Host2DeviceCopy",
                                            "ImmutableTensor"]
    net = Network()
    x = net.make_const(np.ones(2, "float32"), name="x[1]")
    net.add_output(x * 2)
    assert [v.name for v in net.var_filter.name("x[1]")] == ["x[1]"]  # MegEngine: the exact name matches too


def test_as_oprnode_and_as_varnode():
    g = Network.load(io.BytesIO(_dumped()))
    a = g.var_filter.name("a").as_unique()
    assert as_oprnode(a) is a.owner and as_oprnode(a).type == "Host2DeviceCopy"  # MegEngine: a var's owner
    assert NET.as_varnode([a.owner]) is a
    with pytest.raises(AssertionError, match="can not convert sequence of length 2"):
        as_oprnode([1, 2])
    with pytest.raises(AssertionError, match="is not compatible with OpNode"):
        as_oprnode(3)


def test_reset_batch_size_checks():
    g = Network.load(io.BytesIO(_dumped()))
    with pytest.raises(AssertionError, match=r"^unused items in blacklist: \{'zz'\}$"):
        g.reset_batch_size(5, blacklist=["zz"])
    g.reset_batch_size(5)
    assert [tuple(v.shape) for v in g.data_providers_filter.as_list()[0].outputs] == [(5,)]


def test_cgtools_surface_and_asserts():
    for name in ("replace_vars", "replace_oprs", "set_priority_to_id"):  # in MegEngine's __all__
        assert name in cgtools.__all__
    raw = _dumped()
    from megxla.core.tensor import megbrain_graph as G
    outs = G.load_graph(io.BytesIO(raw)).output_vars_list
    assert len(cgtools.graph_traversal(outs)) == 6  # MegEngine's 6-tuple
    with pytest.raises(AssertionError, match=r"^Can not find varnode \['nope'\] in this model$"):
        cgtools.find_vars_by_name(outs, ["nope"])
    with pytest.raises(AssertionError):
        cgtools.get_opr_type(outs[0])
    gi = cgtools.GraphInference(io.BytesIO(raw))
    z = np.zeros(3, "float32")
    with pytest.raises(AssertionError, match="^This model expects 2 inputs$"):
        gi.run(z, z, z)
    with pytest.raises(AssertionError, match=r"^This model expects inputs \['a', 'b'\], but gets inputs \['a'\]$"):
        gi.run(z)
    with pytest.raises(AssertionError, match=r"^Can not find varnode \['nope'\] in this model$"):
        cgtools.GraphInference(io.BytesIO(raw), outputs=["nope"])


def test_cgtools_replace_vars_and_oprs_on_network_variables():
    net = Network()
    a = net.make_const(np.array([1.0], "float32"), name="a")
    b = net.make_const(np.array([5.0], "float32"), name="b")
    y = a * 2 + 1
    (y2,) = cgtools.replace_vars([y], {a: b})
    np.testing.assert_equal(y2.numpy(), [11.0])
    np.testing.assert_equal(y.numpy(), [3.0])  # the original graph is unchanged, as MegEngine's copy
    c = F.exp(b)
    (y3,) = cgtools.replace_oprs([y], {a.owner: b.owner})
    np.testing.assert_equal(y3.numpy(), [11.0])
    assert cgtools.replace_vars([c], {}) == [c]
    cgtools.set_priority_to_id([y])
    assert all(o.priority == o.id for o in cgtools.get_oprs_seq([y], prune_immtensor=False))
