"""TracedModule files written by real MegEngine 1.13 (``megengine.save(trace_module(net, x), "model.tm")``)
load into megxla's TracedModule, run with MegEngine's outputs, train, can be inspected, edited, re-traced,
quantized and saved again.

The fixtures under tests/data/megengine_tm were written by MegEngine 1.13.0 (CPU) with
tests/data/megengine_tm/make_files.py: per model a ``.tm`` file and a ``.npz`` holding the input ``x``,
MegEngine's outputs ``y0``/``y1``, the gradient ``g`` of ``(out ** 2).sum()`` for the first parameter and the
graph as MegEngine prints it (``graph``).
"""
import io
import os
import pickle

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.quantization as Q
import megxla.traced_module as tm
from megxla.autodiff import GradManager
from megxla.core.ops.builtin import Elemwise
from megxla.optimizer import SGD
from megxla.traced_module.expr import Apply, CallFunction, CallMethod, Constant, GetAttr, Input
from megxla.traced_module.node import TensorNode
from megxla.traced_module.pytree import TreeDef

DATA = os.path.join(os.path.dirname(__file__), "data", "megengine_tm")
MODELS = ["mlp", "convnet", "funcs", "nested", "qat", "qat_traced"]


def _load(name):
    net = mge.load(os.path.join(DATA, name + ".tm"), weights_only=False)
    return net, dict(np.load(os.path.join(DATA, name + ".npz")))


def _saved(obj):
    buf = io.BytesIO()
    mge.save(obj, buf)
    return buf.getvalue()


def _outs(y):
    return list(y) if isinstance(y, (tuple, list)) else [y]


@pytest.mark.parametrize("name", MODELS)
def test_megengine_file_runs_and_differentiates_as_megengine(name):
    net, d = _load(name)
    assert type(net) is tm.TracedModule
    x = mge.Tensor(d["x"])
    ys = _outs(net(x))
    assert len(ys) == len([k for k in d if k.startswith("y")])
    for i, y in enumerate(ys):
        np.testing.assert_allclose(y.numpy(), d[f"y{i}"], rtol=1e-5, atol=1e-6)
    # the graph prints as MegEngine printed it (names, ids, arguments)
    assert str(net.graph) == str(d["graph"])
    params = list(net.parameters())
    gm = GradManager().attach(params)
    with gm:
        gm.backward((_outs(net(x))[0] ** 2).sum())
    np.testing.assert_allclose(params[0].grad.numpy(), d["g"], rtol=1e-4, atol=1e-6)


def test_weights_only_default_refuses_with_the_opt_in_named():
    with pytest.raises(pickle.UnpicklingError, match=r"weights_only=False"):
        mge.load(os.path.join(DATA, "mlp.tm"))


def test_loaded_graph_is_megxla_objects():
    net, _ = _load("funcs")
    g = net.graph
    kinds = [type(e).__name__ for e in g.exprs()]
    assert kinds[:2] == ["Input", "Input"] and kinds.count("CallFunction") == 4
    assert all(isinstance(e, (Input, GetAttr, CallMethod, CallFunction, Apply, Constant)) for e in g.exprs())
    # calls name megxla's functions; a builtin op Apply holds megxla's descriptor; the constant is a Tensor
    assert g.get_function_by_type(F.matmul).as_unique().named_args["transpose_b"] is False
    (apply_expr,) = [e for e in g.exprs() if isinstance(e, Apply)]
    assert apply_expr.opdef == Elemwise(mode="add")
    (const,) = [e for e in g.exprs() if isinstance(e, Constant)]
    np.testing.assert_array_equal(const.value.numpy(), [0.5, -1.0, 2.0])
    # argument structures are megxla's (without the called object), nodes keep shapes and dtypes
    reshape = g.get_method_by_type("reshape").as_list()[0]
    assert reshape.args[1:] == (-1, 3) and isinstance(reshape.arg_def, TreeDef)
    x = g.inputs[1]
    assert isinstance(x, TensorNode) and x.shape == (2, 3) and x.dtype == np.float32 and x.qualname == "Funcs.[x]"
    assert [n.name for n in g.outputs] == ["add_out_2", "astype_out"]
    assert g.get_node_by_name("Funcs_w").as_unique().expr.name == "w"


def test_nested_modules_and_lists_of_modules():
    net, d = _load("nested")
    assert isinstance(net.blocks, tm.TracedModule) and isinstance(getattr(net.blocks, "0"), tm.TracedModule)
    calls = net.graph.get_method_by_type("__call__", recursive=False).as_list()
    assert [c.inputs[0].name for c in calls] == ["stem", "blocks_0", "blocks_1", "blocks_0", "head"]
    assert calls[1].graph is getattr(net.blocks, "0").graph  # the shared block's call runs its graph
    assert type(net.head.graph.inputs[0].owner) is tm.TracedModule
    fcs = net.graph.get_module_by_type(M.Linear).as_list()
    assert {n.owner for n in fcs} >= {net.stem, getattr(net.blocks, "0").fc, getattr(net.blocks, "1").fc}
    # flattening inlines the nested graphs: same function
    flat = net.flatten()
    np.testing.assert_allclose(flat(mge.Tensor(d["x"])).numpy(), d["y0"], rtol=1e-5, atol=1e-6)
    assert not any(isinstance(e.inputs[0].owner, tm.TracedModule)
                   for e in flat.graph.get_method_by_type("__call__"))


def test_loaded_module_trains():
    net, d = _load("convnet")
    net.train()
    x = mge.Tensor(d["x"])
    opt = SGD(net.parameters(), lr=0.05)
    gm = GradManager().attach(net.parameters())
    losses = []
    for _ in range(3):
        with gm:
            loss = (net(x) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(float(loss.numpy()))
    assert losses[-1] < losses[0]
    assert net.bn.running_mean.numpy().shape == (1, 4, 1, 1)


def test_optimize_a_loaded_graph():
    net, d = _load("convnet")
    fused = tm.optimize(net, enabled_pass=["FuseConvBn"])
    assert not fused.graph.get_module_by_type(M.BatchNorm2d).as_list()
    np.testing.assert_allclose(fused(mge.Tensor(d["x"])).numpy(), d["y0"], rtol=1e-5, atol=1e-6)


def test_surgery_on_a_loaded_graph():
    net, d = _load("mlp")
    g = net.graph
    act_out = g.get_node_by_name("MLP_act_out").as_unique()
    with g.insert_exprs():
        neg = F.neg(act_out)
    g.replace_node({act_out: neg})
    g.compile()
    x = d["x"]
    h = np.maximum(x @ net.fc1.weight.numpy().T + net.fc1.bias.numpy(), 0)
    want = -h @ net.fc2.weight.numpy().T + net.fc2.bias.numpy()
    np.testing.assert_allclose(net(mge.Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)
    # renaming; an edit inside a nested graph (a shared block: both its calls change)
    neg.name = "negated"
    assert g.get_node_by_name("MLP_negated").as_unique() is neg
    nested, dn = _load("nested")
    block = getattr(nested.blocks, "0").graph
    relu_out = block.get_function_by_type(F.relu).as_unique().outputs[0]
    with block.insert_exprs():
        sig = F.sigmoid(relu_out)
    block.replace_node({relu_out: sig})
    block.compile()
    y = nested(mge.Tensor(dn["x"])).numpy()
    assert np.abs(y - dn["y0"]).max() > 1e-3
    back = mge.load(io.BytesIO(_saved(nested)), weights_only=False)
    np.testing.assert_array_equal(back(mge.Tensor(dn["x"])).numpy(), y)


def test_retrace_and_resave_a_loaded_module():
    net, d = _load("funcs")
    x = mge.Tensor(d["x"])
    again = tm.trace_module(net, x)
    for y, k in zip(_outs(again(x)), ("y0", "y1")):
        np.testing.assert_allclose(y.numpy(), d[k], rtol=1e-5, atol=1e-6)
    buf = io.BytesIO()
    mge.save(net, buf)
    back = mge.load(io.BytesIO(buf.getvalue()), weights_only=False)
    assert str(back.graph) == str(net.graph)
    for y, k in zip(_outs(back(x)), ("y0", "y1")):
        np.testing.assert_allclose(y.numpy(), d[k], rtol=1e-5, atol=1e-6)


def test_quantize_a_loaded_float_and_qat_module():
    net, d = _load("mlp")
    qat = Q.quantize_qat(net)
    assert isinstance(qat.fc1, M.qat.Linear)
    assert qat(mge.Tensor(d["x"])).shape == d["y0"].shape
    # MegEngine's QAT file (observers trained there) quantizes here into MegEngine's quantized model: its values
    qnet, dq = _load("qat")
    assert isinstance(qnet.body, M.qat.ConvBnRelu2d) and isinstance(qnet.q, M.qat.QuantStub)
    quantized = Q.quantize(qnet)
    got = quantized(mge.Tensor(dq["x"])).numpy()
    np.testing.assert_array_equal(got, np.load(os.path.join(DATA, "quantized.npz"))["y0"])


def test_shapes_indexing_kwargs_dict_outputs_and_user_code(monkeypatch):
    # the file names a user's wrap()ped function and builtin-registered module (tm_user_ops): importable here
    monkeypatch.syspath_prepend(DATA)
    net, d = _load("misc")
    assert str(net.graph) == str(d["graph"])
    y = net(mge.Tensor(d["x"]), mge.Tensor(d["idx"]), scale=2.0)
    assert sorted(y) == ["e", "max", "stack", "v", "w"]
    for k, v in y.items():
        np.testing.assert_allclose(v.numpy(), d[k], rtol=1e-5, atol=1e-5)
    import tm_user_ops
    assert net.graph.get_function_by_type(tm_user_ops.my_scale).as_count() == 1  # wrap() returns the function
    assert type(net.act) is tm_user_ops.Act
    # x.shape read while tracing is MegEngine's GetVarShape Apply: megxla's descriptor, the whole shape
    (shape_expr,) = [e for e in net.graph.exprs() if isinstance(e, Apply)]
    assert type(shape_expr.opdef).__name__ == "GetVarShape" and shape_expr.opdef.axis is None
    with pytest.raises(TypeError, match="structure"):
        net(mge.Tensor(d["x"]), mge.Tensor(d["idx"]), scale=3.0)  # non-tensor arguments are traced constants


def test_megengine_quantized_file_runs():
    # MegEngine's quantized modules hold their scales in quantized dtypes; megxla's in scale Tensors
    net, d = _load("quantized")
    assert str(net.graph) == str(d["graph"])
    assert type(net.body) is M.quantized.ConvBnRelu2d and type(net.fc) is M.quantized.Linear
    assert repr(net.body) == "Quantized.ConvBnRelu2d(3, 4, kernel_size=(3, 3), padding=(1, 1))"
    assert net.body.weight.dtype == np.int8 and float(net.body.weight_scale.numpy()) > 0
    x = mge.Tensor(d["x"])
    got = net(x).numpy()
    np.testing.assert_array_equal(got, d["y0"])  # MegEngine's int8 arithmetic: the same values
    body = net.graph.get_node_by_name("QNet_body_out").as_unique()
    net.set_end_points([body])
    (b,) = net(x)
    net.clear_end_points()
    assert b.dtype == np.int8 and b.qparams.scale is not None
    buf = io.BytesIO()
    mge.save(net, buf)
    back = mge.load(io.BytesIO(buf.getvalue()), weights_only=False)
    np.testing.assert_array_equal(back(x).numpy(), got)


def test_megengine_quantized_elemwise_and_concat():
    net, d = _load("quantized_ops")
    assert str(net.graph) == str(d["graph"])
    assert type(net.add) is M.quantized.Elemwise and type(net.cat) is M.quantized.Concat
    np.testing.assert_array_equal(net(mge.Tensor(d["x"])).numpy(), d["y0"])


def test_megengine_quantized_transposed_conv():
    # megxla computes quantized transposed convolutions in float32 between dequantize and quantize (MegEngine in
    # integers): one quantization step apart where the float result sits on a rounding tie
    net, d = _load("quantized_transpose")
    assert type(net.conv) is M.quantized.ConvTranspose2d
    got = net(mge.Tensor(d["x"])).numpy()
    step = np.abs(np.diff(np.unique(d["y0"]))).min()
    assert np.abs(got - d["y0"]).max() <= 1.01 * step and (got == d["y0"]).mean() > 0.9


def test_end_and_watch_points_on_a_loaded_graph():
    net, d = _load("convnet")
    x = mge.Tensor(d["x"])
    g = net.graph
    inp, bn_out = g.inputs[1], g.get_node_by_name("ConvNet_bn_out").as_unique()
    net.set_end_points([inp])  # an input is an end point too (MegEngine returns it)
    (got,) = net(x)
    np.testing.assert_array_equal(got.numpy(), d["x"])
    net.clear_end_points()
    net.set_watch_points([inp, bn_out])
    np.testing.assert_allclose(net(x).numpy(), d["y0"], rtol=1e-5, atol=1e-6)
    assert set(net.watch_node_value) == {inp, bn_out} and net.watch_node_value[bn_out].shape == (2, 4, 8, 8)
    net.clear_watch_points()


def test_megengine_quantized_batch_matmul_activation():
    net, d = _load("quantized_bmm")
    assert type(net.bmm) is M.quantized.BatchMatMulActivation
    np.testing.assert_array_equal(net(mge.Tensor(d["x"])).numpy(), d["y0"])
