"""A network built by hand (``utils.network.Network``): variables made by ``make_const`` are Tensors the functional API
takes; every op on them is recorded in the network (MegEngine's ``is_varnode=True`` half of its unit tests)."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.autodiff import GradManager
from megxla.core._dispatch import OpError
from megxla.core.tensor import megbrain_graph as G
from megxla.utils import comp_graph_tools as cgtools
from megxla.utils.network import Network
from megxla.utils.network_node import OpNode, VarNode


def _value(var):
    # MegEngine's test helpers read a variable so (helpers/utils.py: get_var_value)
    o = G.OutputNode(var.var)
    o.graph.compile(o.outputs).execute()
    return o.get_value().numpy()


@pytest.mark.parametrize("fn, ref", [
    (lambda a, b: a * b + 1, lambda a, b: a * b + 1),
    (lambda a, b: F.concat([a, b], axis=0), lambda a, b: np.concatenate([a, b], 0)),
    (lambda a, b: F.exp(a).sum(axis=1, keepdims=True) - b.max(),
     lambda a, b: np.exp(a).sum(1, keepdims=True) - b.max()),
    (lambda a, b: F.matmul(a, b.T), lambda a, b: a @ b.T),
    (lambda a, b: F.reshape(a, (3, 2))[1:, ::-1], lambda a, b: a.reshape(3, 2)[1:, ::-1]),
])
def test_ops_on_variables_give_variables_with_numpy_values(fn, ref):
    rng = np.random.RandomState(0)
    a, b = rng.rand(2, 3).astype("float32"), rng.rand(2, 3).astype("float32")
    net = Network()
    out = fn(net.make_const(a), net.make_const(b))
    assert isinstance(out, VarNode) and isinstance(out, mge.Tensor) and out.network is net
    expect = ref(a, b)
    assert out.shape == expect.shape and out.dtype == expect.dtype
    np.testing.assert_allclose(out.numpy(), expect, rtol=1e-6)
    np.testing.assert_allclose(_value(out), expect, rtol=1e-6)


def test_graph_is_data_to_walk():
    net = Network()
    x = net.make_const(np.array([1.0, 2.0], "float32"), name="x")
    y = F.exp(x) * x
    assert isinstance(y.owner, OpNode) and y.owner.type == "Elemwise" and y.owner.params["mode"] == "MUL"
    exp_var, x_again = y.owner.inputs
    assert x_again is x and exp_var.owner.inputs == [x] and exp_var.owner.outputs == [exp_var]
    assert x.owner.type == "ImmutableTensor" and x.owner.inputs == [] and x.name == "x"
    assert [u.name for u in x.users] == ["EXP", "MUL"]
    assert net.all_oprs == []  # MegEngine's: the operators the outputs depend on, none before there are outputs
    net.add_output(y)
    assert [(op.type, op.name) for op in net.all_oprs] == [("ImmutableTensor", "x"), ("Elemwise", "EXP"),
                                                           ("Elemwise", "MUL")]
    assert [v.name for v in net.all_vars] == ["x", "EXP", "MUL"]
    assert net.get_var_by_name("EXP") is exp_var and net.get_var_receive_oprs(x) == [exp_var.owner, y.owner]
    assert [op.name for op in cgtools.get_oprs_seq([y])] == ["EXP", "MUL"]
    assert net.params_filter.as_count() == 1 and net.params_filter.as_unique().type == "ImmutableTensor"


def test_a_tensor_mixed_in_becomes_a_constant_of_the_network():
    net = Network()
    x = net.make_const(np.ones((2, 2), "float32"))
    t = mge.Tensor(np.full((2, 2), 3.0, "float32"))
    y = x + t
    z = 2 - y  # a Python number too
    assert type(t) is mge.Tensor  # the Tensor itself stays a Tensor
    np.testing.assert_allclose(z.numpy(), np.full((2, 2), -2.0))
    const = y.owner.inputs[1]
    assert isinstance(const, VarNode) and const.owner.type == "ImmutableTensor" and const.network is net
    np.testing.assert_allclose(const.numpy(), t.numpy())
    assert z.owner.inputs[1] is y and z.owner.inputs[0].owner.type == "ImmutableTensor"


def test_variables_of_two_networks_raise_and_change_nothing():
    n1, n2 = Network(), Network()
    a = n1.make_const(np.ones(3, "float32"))
    b = n2.make_const(np.ones(3, "float32"))
    with pytest.raises(OpError, match=r"add: inputs \(\(3,\):float32 of .*\) are variables of two different Networks"):
        a + b
    assert a.users == [] and b.users == []  # nothing recorded
    with pytest.raises(ValueError, match="variable of another Network"):
        a[...] = b
    assert a.owner.type == "ImmutableTensor" and a.numpy().tolist() == [1.0, 1.0, 1.0]
    n1.add_output(b)  # an output of another network splices its graph in (MegEngine's test_splice_network)
    assert n1.output_vars[0] is b and [op.type for op in n1.all_oprs] == ["ImmutableTensor"]
    with pytest.raises(TypeError, match="expected a VarNode"):
        n1.add_output(mge.Tensor([1.0]))


def test_rebinding_a_variable_keeps_the_recorded_graph():
    net = Network()
    x = net.make_const(np.array([1.0, 2.0, 3.0], "float32"), name="x")
    y = x * 2
    x[1:] = [5.0, 6.0]  # x is now the result of the assignment; y still reads the old x
    np.testing.assert_allclose(x.numpy(), [1.0, 5.0, 6.0])
    np.testing.assert_allclose(y.numpy(), [2.0, 4.0, 6.0])
    old_x = y.owner.inputs[0]
    assert old_x is not x and old_x.owner.type == "ImmutableTensor" and old_x.numpy().tolist() == [1.0, 2.0, 3.0]
    assert x.owner.inputs[0] is old_x  # the assignment read the old value
    y += x
    np.testing.assert_allclose(y.numpy(), [3.0, 9.0, 12.0])
    net.add_output(y)
    assert [op.type for op in net.all_oprs] == ["ImmutableTensor", "ImmutableTensor", "Elemwise",  # x, 2, MUL
                                                "ImmutableTensor", "SetSubtensor", "Elemwise"]  # [5, 6], x[1:]=, ADD
    np.testing.assert_allclose(_value(y), [3.0, 9.0, 12.0])


def test_variable_copy_and_gradients():
    net = Network()
    x = net.make_const(np.array([1.0, 2.0], "float32"))
    alias = VarNode(x.var)
    assert alias is not x and alias.id == x.id and alias.owner is x.owner and (alias + 1).owner.inputs[0] is alias
    with pytest.raises(TypeError, match="must be a variable of a Network"):
        VarNode(mge.Tensor([1.0]))
    import copy
    import pickle
    assert copy.copy(x).id == x.id and type(copy.deepcopy(x)) is mge.Tensor
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(x)
    gm = GradManager().attach([x])
    with gm:
        loss = (x * x).sum()
        gm.backward(loss)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_loaded_graph_nodes_are_varnodes_too():
    # a loaded graph is a network like a hand-built one (tests/test_network_edit.py): its variables are Tensors,
    # its inputs without a value
    import io
    from megxla.jit import trace
    f = trace(lambda x: x + 1, symbolic=True, capture_as_const=True)
    f(mge.Tensor([1.0]))
    buf = io.BytesIO()
    f.dump(buf)
    buf.seek(0)
    net = Network.load(buf)
    assert all(isinstance(v, VarNode) for v in net.all_vars) and all(isinstance(o, OpNode) for o in net.all_oprs)
    assert issubclass(VarNode, mge.Tensor) and isinstance(net.all_vars[0], mge.Tensor)
    with pytest.raises(RuntimeError, match="has no value"):
        net.all_vars[0].numpy()
    assert [op.type for op in net.all_oprs] == ["Host2DeviceCopy", "ImmutableTensor", "Elemwise"]


def test_results_a_function_would_compute_on_the_host_are_variables_too():
    from megxla.core.tensor.utils import astensor1d
    net = Network()
    mask = net.make_const(np.array([True, False, True]))
    x = net.make_const(np.array([1.0, 2.0, 3.0], "float32"))
    val, idx = F.cond_take(mask, x)
    assert val.numpy().tolist() == [1.0, 3.0] and idx.numpy().tolist() == [0, 2]
    assert isinstance(idx, VarNode) and any(v is mask for v in cgtools.get_dep_vars(idx))  # recorded from mask
    shape = astensor1d([2, 3], x)  # MegEngine's Const(..., reference): a constant of the reference's network
    assert isinstance(shape, VarNode) and shape.network is net and shape.owner.type == "ImmutableTensor"
    assert type(astensor1d([2, 3], mge.Tensor(1.0))) is mge.Tensor
