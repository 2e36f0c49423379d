"""traced_module against MegEngine 1.13's behaviour (a differential probe of both on the same scripts): graphs,
names, queries and editing that user passes rely on."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.traced_module as tm


def add_twice(x, y):
    return x + y + y


assert tm.wrap(add_twice) is add_twice  # MegEngine's wrap returns the function itself (at a module's top level)


class _CallsWrapped(M.Module):
    def forward(self, x):
        return add_twice(x, x) * 2


def test_top_level_wrap_returns_the_function_and_queries_find_it():
    t = tm.trace_module(_CallsWrapped(), mge.Tensor([1.0]))
    (expr,) = t.graph.get_function_by_type(add_twice).as_list()
    assert expr.func is add_twice
    assert add_twice(1, 2) == 5  # outside a trace: the function itself
    np.testing.assert_array_equal(t(mge.Tensor([2.0])).numpy(), [12.0])


class _PlusOne(M.Module):
    def forward(self, x):
        return x + 1


def test_add_output_node_nests_the_result_as_megengines():
    # InternalGraph.add_output_node's docstring example: two nodes added to one output give ((add_out, x), add_out)
    t = tm.trace_module(_PlusOne(), mge.Tensor([0.0]))
    g = t.graph
    g.add_output_node(g.inputs[1])
    g.add_output_node(g.outputs[0])
    (first, x), again = t(mge.Tensor([0.0]))
    assert first.numpy().tolist() == [1.0] and x.numpy().tolist() == [0.0] and again.numpy().tolist() == [1.0]


class _Shared(M.Module):
    def __init__(self):
        super().__init__()
        self.lin = M.Linear(2, 2)
        self.a = M.Sequential(self.lin)  # the same Linear as lin and as a[0]

    def forward(self, x):
        return self.a(x) + self.lin(x)


class _Zero(M.Module):
    def forward(self, x):
        return x * 0


def test_a_shared_module_is_read_by_the_attribute_the_code_names():
    # MegEngine records getattr(self, "lin") where the forward reads self.lin (megxla took the first path, "a.0")
    t = tm.trace_module(_Shared(), mge.Tensor([[1.0, 2.0]]))
    assert [e.name for e in t.graph.exprs(recursive=False) if type(e).__name__ == "GetAttr"] == ["a", "lin"]
    t.lin = _Zero()
    x = mge.Tensor([[1.0, 2.0]])
    np.testing.assert_array_equal((t(x) - t.a(x)).numpy(), [[0.0, 0.0]])


class _Branchy(M.Module):
    def forward(self, x):
        unused = F.exp(x) * 3  # noqa: F841
        if x.sum() > 0:  # a Python branch on a value: its test is not part of the traced module
            x = x + 1
        return x * 2


def test_trace_module_compiles_away_what_no_output_needs():
    t = tm.trace_module(_Branchy(), mge.Tensor([1.0, 2.0]))
    exprs = t.graph.exprs().as_list()  # (self's and x's Input exprs first)
    assert [getattr(e, "method", None) for e in exprs] == [None, None, "__add__", "__mul__"]
    assert [e._id for e in exprs] == [0, 1, 2, 3]


def test_get_dep_exprs_walks_back_as_megengines():
    class Net(M.Module):
        def forward(self, x):
            return F.relu(x * 2)

    t = tm.trace_module(Net(), mge.Tensor([1.0]))
    deps = t.graph.get_dep_exprs(t.graph.outputs[0])
    assert [type(e).__name__ for e in deps] == ["CallFunction", "CallMethod", "Input"]


def test_tensor_method_calls_are_recorded_with_their_defaults_as_megengines():
    class Net(M.Module):
        def forward(self, x):
            return x.mean(axis=1, keepdims=True), x.sum(), x.flatten()

    t = tm.trace_module(Net(), mge.Tensor([[1.0, 2.0]]))
    mean, total, flat = (t.graph.get_method_by_type(m).as_unique() for m in ("mean", "sum", "flatten"))
    assert mean.args[1:] == (1, True) and mean.kwargs == {}
    assert total.args[1:] == (None, False) and flat.args[1:] == (0, -1)
    assert str(mean).endswith("mean_out = x.mean(1, True, )")


def test_expr_disable_remove_const_val_and_node_device():
    class Net(M.Module):
        def forward(self, x):
            return F.clip(x.mean(1, True) * 3, lower=0.5)

    t = tm.trace_module(Net(), mge.Tensor([[1.0, 2.0]]))
    g = t.graph
    mean = g.get_method_by_type("mean").as_unique()
    clip = g.get_function_by_type(F.clip).as_unique()
    assert mean.const_val == [(1, 1), (2, True)] and clip.const_val == [(1, 0.5), (2, None)]  # MegEngine's
    assert g.outputs[0].device == mge.Tensor([1.0]).device
    with g.insert_exprs():
        side = F.exp(g.inputs[1])  # no output needs it
    side.expr.disable_remove()
    g.compile()
    assert g.get_function_by_type(F.exp).as_count() == 1
    side.expr.enable_remove()
    g.compile()
    assert g.get_function_by_type(F.exp).as_count() == 0


@pytest.mark.parametrize("value", [3, None, np.float32(1.0)])
def test_a_forward_returning_a_non_tensor_is_refused_as_megengine_does(value):
    class Returns(M.Module):
        def forward(self, x):
            return (x + 1, value) if value is None else value

    with pytest.raises(AssertionError, match="in return values, MUST use Tensor"):
        tm.trace_module(Returns(), mge.Tensor([1.0]))


def test_a_module_called_twice_names_its_outputs_as_megengine():
    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.l = M.Linear(1, 1)

        def forward(self, x):
            return self.l(x) + self.l(x * 2)

    g = tm.trace_module(Net(), mge.Tensor([[1.0]])).graph
    assert [n.name for n in g.nodes(False)] == ["self", "x", "l", "l_out", "mul_out", "l_1_out", "add_out"]


def test_graph_format_p_prints_the_graph_with_prefixed_names():
    # InternalGraph.get_node_by_name's docstring: "{:p}".format(graph) is the whole graph, names prefixed
    class Mod(M.Module):
        def forward(self, x):
            return F.relu(x + 1)

    g = tm.trace_module(Mod(), mge.Tensor([1.0, -2.0])).graph
    assert "{:p}".format(g) == ("Mod.Graph (Mod_self, Mod_x) {\n\t%2:\tMod_add_out = Mod_x.__add__(1, )\n"
                                "\t%3:\tMod_relu_out = nn.relu(Mod_add_out, )\n\treturn Mod_relu_out\n}")


def test_tensor_method_argument_names_are_megengines():
    # a user pass reads / sets arguments by name: Tensor.__add__(self, value), reshape(self, *args)
    class Net(M.Module):
        def forward(self, x):
            return (x + 1).reshape(-1)

    g = tm.trace_module(Net(), mge.Tensor([[1.0, 2.0]])).graph
    add = g.get_method_by_type("__add__").as_unique()
    assert list(add.named_args) == ["self", "value"]
    add.set_arg("value", 5)
    assert list(g.get_method_by_type("reshape").as_unique().named_args) == ["self", "args"]
