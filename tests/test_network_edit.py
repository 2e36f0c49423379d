"""Editing a dumped graph (``utils.network.Network``): load a ``trace.dump``, rewire it (``replace_vars``,
``replace_oprs``, new inputs and outputs, another network spliced in) and dump it again -- MegEngine's
``unit/utils/test_network.py`` and ``test_network_node.py`` (each of whose 51 cases reloads a dump with new
input nodes and dumps it again)."""
import io

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.utils.network_node as N
from megxla.jit import trace
from megxla.utils.comp_graph_tools import GraphInference
from megxla.utils.network import Network, as_oprnode


def _dump(fn, *args, **kwargs):
    f = trace(fn, symbolic=True, capture_as_const=True)
    f(*args)
    buf = io.BytesIO()
    f.dump(buf, optimize_for_inference=False, **kwargs)
    buf.seek(0)
    return buf


def _run(net, *inputs, **named):
    buf = io.BytesIO()
    net.dump(buf)
    buf.seek(0)
    return GraphInference(buf).run(*inputs, inp_dict=named or None)


A, B = mge.Tensor([1, 2]), mge.Tensor([3, 4])


def _ab_net():
    return Network.load(_dump(lambda a, b: (a + b) * 2, A, B, arg_names=["a", "b"], output_names="o"))


def test_replace_vars_rewires_readers_and_dump_computes_the_edit():
    net = _ab_net()
    a, b = net.var_filter.name("a").as_unique(), net.var_filter.name("b").as_unique()
    new = F.relu(a * b)  # ops on a loaded network's variables are its operators too
    assert new.network is net and new.owner.inputs[0].owner.inputs == [a, b]
    (add,) = net.opr_filter.has_input(a)
    net.replace_vars({add.outputs[0]: new})
    assert net.get_var_receive_oprs(new)[0].type == "Elemwise"
    np.testing.assert_equal(_run(net, A, B)["o"], [6, 16])


def test_replace_oprs_makes_the_old_outputs_the_new_operators():
    net = _ab_net()
    a, b = net.var_filter.name("a").as_unique(), net.var_filter.name("b").as_unique()
    y = F.relu(a * b)
    y += 2
    y *= 3
    (y,) = net.add_dep_oprs(y)
    old = as_oprnode([net.opr_filter.has_input(a).as_unique()])
    net.replace_oprs({old: y.owner})
    assert all(v.owner is y.owner and y.owner.outputs[i] is v for i, v in enumerate(old.outputs))
    np.testing.assert_equal(_run(net, A, B)["o"], [30, 60])


def test_new_input_nodes_replace_the_old_ones_and_have_no_value():
    x = mge.Tensor(np.arange(6, dtype="float32").reshape(2, 3))
    net = Network.load(_dump(lambda x: F.softmax(x, axis=1) * 2, x, arg_names=["x"], output_names="y"))
    (old,) = net.input_vars
    new = net.make_input_node(old.shape, old.dtype, name=old.name)
    net.replace_vars({old: new})
    assert len(net.input_vars) == 1 and net.input_vars[0] is new and isinstance(new.owner, N.Host2DeviceCopy)
    with pytest.raises(RuntimeError, match="has no value"):
        new.numpy()
    with pytest.raises(RuntimeError, match="has no value"):
        net.output_vars[0].numpy()  # computed from the input
    np.testing.assert_allclose(_run(net, x)["y"], (F.softmax(x, axis=1) * 2).numpy(), rtol=1e-6)


def test_loaded_operators_keep_the_dumps_types_and_names_and_typed_classes_find_them():
    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.conv = M.Conv2d(3, 4, 3)
            self.fc = M.Linear(4, 2)

        def forward(self, x):
            return self.fc(F.flatten(F.adaptive_avg_pool2d(self.conv(x), 1), 1))

    model = Net()
    x = mge.Tensor(np.random.rand(1, 3, 8, 8).astype("float32"))
    buf = _dump(model, x, arg_names=["data"])
    view = [(o.type, o.name) for o in mge.utils.comp_graph_tools.get_oprs_seq(
        mge.core.tensor.megbrain_graph.load_graph(buf).output_vars_list, prune_immtensor=False)]
    buf.seek(0)
    net = Network.load(buf)
    assert [(o.type, o.name) for o in net.all_oprs] == view
    assert isinstance(net.get_opr_by_type(N.Host2DeviceCopy), N.Host2DeviceCopy)
    assert net.opr_filter.type(N.ConvolutionForward).as_count() == 1
    assert not isinstance(net.get_opr_by_type(N.ConvolutionForward), N.Host2DeviceCopy)
    # the fused Linear is MatrixMul + ADD in the view, and dumps again as such
    np.testing.assert_allclose(list(_run(net, x).values())[0], model(x).numpy(), rtol=1e-5)


def test_another_networks_variables_splice_in():
    net1 = Network.load(_dump(lambda a, b: (a + b) * 2, A, B, arg_names=["i0", "i1"], output_names="o1"))
    net2 = Network.load(_dump(lambda a: a * 2 - 1, A, arg_names=["j0"], output_names="o2"))
    net1.add_output(*net2.output_vars)
    net1.replace_vars({net1.var_filter.name("i0").as_unique(): net2.var_filter.name("o2").as_unique()})
    names = [v.name for v in net1.all_vars]
    assert "i0" not in names and "j0" in names
    out = _run(net1, i1=B.numpy(), j0=A.numpy())
    np.testing.assert_equal(out["o1"], [(1 * 2 - 1 + 3) * 2, (2 * 2 - 1 + 4) * 2])
    np.testing.assert_equal(out["o2"], [1, 3])


def test_a_network_built_with_inputs_dumps():
    net = Network()
    x = net.make_input_node((3,), "float32", name="x")
    w = net.make_const(np.array([1.0, -2.0, 3.0], "float32"), name="w")
    net.add_output(F.relu(x * w).sum())
    out = _run(net, np.array([1.0, 1.0, 1.0], "float32"))
    np.testing.assert_allclose(list(out.values())[0], 4.0)


def test_an_operator_the_dump_kept_no_op_for_raises_at_dump():
    buf = io.BytesIO()
    f = trace(lambda x: x * 2 + 1, symbolic=True, capture_as_const=True)
    f(mge.Tensor([1.0]))
    f.dump(buf, enable_io16xc32=True)  # float16 storage between operators: the view is not the ops
    buf.seek(0)
    net = Network.load(buf)
    assert [o.type for o in net.all_oprs][0] == "Host2DeviceCopy"
    with pytest.raises(ValueError, match="cannot be computed again"):
        net.dump(io.BytesIO())


def test_device_wrapper():
    from megxla.core._wrap import Device, as_device
    d = Device("xpux")
    assert as_device(d) is d and d == Device(d.to_c()) and str(d) == "xpux:0"
    np.testing.assert_allclose(F.linspace(3, 10, 3, device=d.to_c()).numpy(), [3.0, 6.5, 10.0])


def test_reset_batch_size_and_modify_opr_names():
    x = mge.Tensor(np.random.rand(3, 2).astype("float32"))
    net = Network.load(_dump(lambda x: F.exp(x), x, arg_names=["a"]))
    net.reset_batch_size(1)
    net.modify_opr_names("net")
    net.modify_opr_names(lambda n: "net1." + n)
    buf = io.BytesIO()
    net.dump(buf)
    buf.seek(0)
    back = Network.load(buf)
    (inp,) = back.data_providers_filter
    assert inp.shape == (1, 2) and inp.name == "net1.net.a"
    buf.seek(0)
    np.testing.assert_allclose(list(GraphInference(buf).run(x[:1]).values())[0], np.exp(x[:1].numpy()), rtol=1e-6)


def test_an_input_the_outputs_do_not_read_stays_an_input():
    x = mge.Tensor(np.ones((1, 2, 3), "float32"))
    net = Network.load(_dump(lambda x: F.ones(x.shape[1]), x, arg_names=["x"], output_names="y"))
    (old,) = net.input_vars
    net.replace_vars({old: net.make_input_node(old.shape, old.dtype, name="x")})
    out = _run(net, x)  # the dump takes the input it was given, as the traced function's did
    np.testing.assert_equal(out["y"], [1.0, 1.0])


def test_a_constant_output_keeps_its_output_name():
    x = mge.Tensor(np.ones((1, 2, 3), "float32"))
    net = Network.load(_dump(lambda x: mge.Tensor(x.shape), x, arg_names=["x"], output_names="y"))
    assert net.output_vars[0].owner.type == "ImmutableTensor" and net.output_vars[0].name == "y"
    out = _run(net, x)
    assert list(out) == ["y"] and out["y"].tolist() == [1, 2, 3]


def test_filters_give_operators_and_a_constants_set_value_changes_the_graph():
    net = _ab_net()
    (inp_a, inp_b) = net.data_providers_filter
    assert (inp_a.name, inp_a.shape, inp_a.dtype) == ("a", (2,), np.int32) and inp_b.name == "b"
    const = net.params_filter.as_unique()
    assert isinstance(const, N.ImmutableTensor) and const.numpy().tolist() == 2
    const.set_value(3)  # the graph's constant changes, as MegEngine's: (a + b) * 3
    assert const.numpy().tolist() == 3
    np.testing.assert_equal(_run(net, A, B)["o"], [12, 18])
    built = Network()
    c = built.make_const(np.array([1.0, 2.0], "float32"))
    y = c * 2
    c.owner.set_value(np.array([5.0, 5.0]))
    with pytest.raises(RuntimeError, match="set_value changed"):
        y.numpy()  # computed from the old value
    with pytest.raises(TypeError, match="only a constant"):
        y.owner.set_value(1)


def test_a_copy_to_a_device_is_computed_again():
    x = mge.Tensor([1.0, 2.0])
    net = Network.load(_dump(lambda x: F.copy(x * 2, "xpux") + 1, x, arg_names=["x"], output_names="y"))
    assert "Copy" in [o.type for o in net.all_oprs]
    np.testing.assert_allclose(_run(net, x)["y"], [3.0, 5.0])
