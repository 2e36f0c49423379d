"""traced_module's graph API against MegEngine 1.13 (differential probes of both on the same scripts): filters,
input names, argument-structure reprs, output resets, misuse errors and the warnings tracing logs. Expected values
are what MegEngine 1.13 printed for the same code."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.traced_module as tm


class _Lin(M.Module):
    def __init__(self):
        super().__init__()
        self.lin = M.Linear(3, 3)

    def forward(self, x):
        return F.relu(self.lin(x)) * 2 + x


def _traced():
    return tm.trace_module(_Lin(), mge.Tensor(np.ones((2, 3), "float32")))


def test_a_filter_can_be_read_more_than_once():
    # MegEngine: nodes = g.nodes(); nodes.as_list(); nodes.as_dict() -> the same entries both times (megxla's
    # second read found the generator spent: an empty dict)
    t = _traced()
    g = t.graph
    nodes = g.nodes()
    assert len(nodes.as_list()) == len(nodes.as_dict()) == nodes.as_count() == 7
    relu = g.get_function_by_type(F.relu)
    assert relu.as_count() == 1 and len(relu.as_list()) == 1 and relu.as_unique() is relu.as_list()[0]
    lin = g.get_module_by_type(M.Linear)
    assert [n.name for n in lin] == [n.name for n in lin] == ["lin"]


class _Containers(M.Module):
    def __init__(self):
        super().__init__()
        self.layers = [M.Linear(2, 2), M.ReLU()]
        self.d = {"a": M.Linear(2, 2)}
        self.sub = _Lin2()
        self.alias = self.sub  # one sub-module under two names

    def forward(self, x):
        for m in self.layers:
            x = m(x)
        return self.d["a"](x) + self.sub(x) + self.alias(x)


class _Lin2(M.Module):
    def __init__(self):
        super().__init__()
        self.lin = M.Linear(2, 2)

    def forward(self, x):
        return self.lin(x)


def test_tracing_containers_and_shared_modules_logs_no_rename_warning(caplog):
    # MegEngine's trace_module and flatten log nothing here; megxla logged "try setting the submodule `layers.0` to
    # TracedModule's new attribute `0` ..." twice per container entry, and one for `alias` at trace and at flatten
    net = _Containers()  # (logs the warning once, as MegEngine does when `alias` is set)
    caplog.clear()
    with caplog.at_level("WARNING"):
        t = tm.trace_module(net, mge.Tensor(np.ones((1, 2), "float32")))
        f = t.flatten()
    assert "remain unchanged" not in caplog.text
    assert {"layers", "layers.0", "layers.1", "d", "d.a"} <= {k for k, _ in t.named_modules()}
    x = mge.Tensor(np.arange(2, dtype="float32").reshape(1, 2))
    np.testing.assert_allclose(f(x).numpy(), net(x).numpy(), rtol=1e-6)
    # the names MegEngine gives the entries: the key in the container, the path from the top
    assert t.layers.__dict__["0"]._short_name == "0" and t.layers.__dict__["0"]._name == "layers.0"


class _VarArgs(M.Module):
    def forward(self, x, *args, **kw):
        s = x
        for v in args:
            s = s + (v if isinstance(v, mge.Tensor) else v[0] * v[-1])
        for k in sorted(kw):
            s = s + (kw[k] if isinstance(kw[k], mge.Tensor) else kw[k][0])
        return s


class _Pair(M.Module):
    def forward(self, x, y=None):
        return x[0] + x[-1]


def test_graph_input_names_are_megengines():
    # MegEngine 1.13 names: the extra positional arguments form one structure (args_0, args_1, args_2 for
    # `a, (b, c), b`), the extra keywords too (kw_0, kw_1 by the ** parameter's name), and a structure holding one
    # tensor still numbers it (x_0); megxla gave args_0_0, args_0_1, args_1 / y, z / x
    a, b, c = (mge.Tensor([float(i)]) for i in range(3))

    def names(net, *args, **kwargs):
        return [n.name for n in tm.trace_module(net, *args, **kwargs).graph.inputs]

    assert names(_VarArgs(), a, (b, c), b) == ["self", "x", "args_0", "args_1", "args_2"]
    assert names(_VarArgs(), a, b, z=c, y=b) == ["self", "x", "args_0", "kw_0", "kw_1"]
    assert names(_VarArgs(), a, b, z=[c, 3], y=(b,)) == ["self", "x", "args_0", "kw_0", "kw_1"]
    assert names(_Pair(), [a, 5]) == ["self", "x_0"]
    assert names(_Pair(), (a, b)) == ["self", "x_0", "x_1"]
    qual = [n.qualname for n in tm.trace_module(_VarArgs(), a, (b, c), b).graph.inputs]
    assert qual == ["_VarArgs", "_VarArgs.[x]", "_VarArgs.[args_0]", "_VarArgs.[args_1]", "_VarArgs.[args_2]"]
    t = tm.trace_module(_VarArgs(), a, (b, c), y=mge.Tensor([5.0]))  # (each input a tensor of its own)
    np.testing.assert_allclose(t(a, (b, c), y=c).numpy(), [0 + 1 * 2 + 2])


class _Interp(M.Module):
    def forward(self, x, mode="bilinear"):
        y = F.vision.interpolate(x, scale_factor=2.0, mode=mode)
        return [y.mean(), (y,)]


def test_argument_structure_reprs_are_megengines():
    # MegEngine prints a 1-tuple as "(Tensor)" and constants by str(): ([Tensor, (Tensor)]), "nearest" unquoted
    t = tm.trace_module(_Interp(), mge.Tensor(np.ones((1, 1, 2, 2), "float32")), mode="nearest")
    (outdef,) = t.argdef_outdef_map.values()
    assert repr(outdef) == "[Tensor, (Tensor)]"
    interp = t.graph.get_function_by_type(F.vision.interpolate).as_unique()
    assert repr(interp.arg_def) == "((Tensor, None, 2.0, nearest, None), {})"
    (argdef,) = t.argdef_graph_map
    assert "nearest" in repr(argdef) and "'nearest'" not in repr(argdef)


def test_reset_outputs_refuses_what_is_not_a_tensor_node():
    # MegEngine: AssertionError "doesn't support 3 type, MUST use ..." (megxla accepted both and the graph then
    # returned nothing)
    t = _traced()
    g = t.graph
    for bad, text in ((3, "3"), (None, "None"), ((g.outputs[0], 2.5), "2.5")):
        with pytest.raises(AssertionError, match=f"doesn't support {text} type, MUST use \"register_supported_type\""):
            g.reset_outputs(bad)
    assert len(g.outputs) == 1
    g.reset_outputs({"a": g.outputs[0], "b": [g.inputs[1]]})
    out = t(mge.Tensor(np.zeros((2, 3), "float32")))
    assert sorted(out) == ["a", "b"] and out["b"][0].numpy().tolist() == [[0.0] * 3] * 2


def test_eval_with_the_wrong_number_of_inputs_and_renaming_errors_are_megengines():
    t = _traced()
    g = t.graph
    with pytest.raises(AssertionError):  # (MegEngine: a bare assert)
        g.eval()
    with pytest.raises(AssertionError):
        g.eval(mge.Tensor([1.0]), mge.Tensor([1.0]))
    relu_out = g.get_function_by_type(F.relu).as_unique().outputs[0]
    with pytest.raises(AssertionError, match=r"^The name\(lin_out\) is already in use\. Please try a different one "
                                             r"again\.$"):
        relu_out.name = "lin_out"


class _Reshapes(M.Module):
    def forward(self, x):
        return x.reshape(-1) + F.concat([x.reshape(-1), x.reshape(-1)], axis=0).sum()


def test_set_arg_sets_the_star_args_and_refuses_unknown_names_as_megengine():
    # MegEngine: named_args of x.reshape(-1) is {'self': x, 'args': (-1,)}; set_arg("args", (1, 4)) gives
    # x.reshape(1, 4, ); a name the function does not have: AssertionError "func ... does't have argument named ..."
    # (megxla raised TypeError for both)
    x = mge.Tensor([[1.0, -2.0], [0.5, 0.25]])
    t = tm.trace_module(_Reshapes(), x)
    rs = t.graph.get_method_by_type("reshape").as_list()[0]
    assert rs.named_args["args"] == (-1,)
    rs.set_arg("args", (1, 4))
    assert rs.args[1:] == (1, 4) and "reshape(1, 4, )" in repr(rs)
    assert t(x).shape == (1, 4)
    rs.set_arg("args", -1)
    assert rs.args[1:] == (-1,)
    np.testing.assert_allclose(t(x).numpy(), [0.5, -2.5, 0.0, -0.25])  # (MegEngine's values)
    with pytest.raises(AssertionError, match="does't have argument named shape"):
        rs.set_arg("shape", 1)
    concat = t.graph.get_function_by_type(F.concat).as_unique()
    with pytest.raises(AssertionError, match="does't have argument named nope"):
        concat.set_arg("nope", -1)


def test_tensor_T_is_recorded_as_the_transpose_method():
    # MegEngine 1.13 records ``x.T`` as the method call ``x.transpose()`` (its graph prints ``x.transpose(, )``);
    # megxla recorded the function ``tensor.transpose(x, (1, 0))``
    import megxla as mge
    import megxla.module as M
    import megxla.traced_module as tm

    class _Net(M.Module):
        def forward(self, x):
            return x.T * 2

    traced = tm.trace_module(_Net(), mge.Tensor(np.ones((2, 3), "float32")))
    methods = [e for e in traced.graph.exprs() if type(e).__name__ == "CallMethod" and e.method == "transpose"]
    assert len(methods) == 1, str(traced.graph)
    np.testing.assert_array_equal(traced(mge.Tensor(np.ones((2, 3), "float32"))).numpy(), np.full((3, 2), 2.0))
