"""MegEngine's documentation examples (second run, traced_module and quantization guides included): the outputs
they print, checked against literal values printed by MegEngine 1.13 on the same programs."""
import numpy as np

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.traced_module as tm


class SimpleModule(M.Module):  # user-guide/model-development/traced_module/design.rst
    def __init__(self):
        super().__init__()
        self.linear = M.Linear(4, 5)
        self.param = mge.Parameter([1])

    def forward(self, x):
        x = x + mge.Tensor([1])
        x = F.relu(x)
        return self.linear(x + self.param)


class MyBn(M.Module):  # api-example.rst, plus two calls whose defaults MegEngine records
    def __init__(self):
        super().__init__()
        self.weight = mge.Parameter(F.ones([3]))
        self.bias = mge.Parameter(F.zeros([3]))

    def forward(self, x):
        x = F.batch_norm(x, weight=self.weight, bias=self.bias, training=True)
        x = F.avg_pool2d(x, 2)
        return F.concat([x, x], axis=1)


class Blk(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(2, 2, 1)
        self.bn = M.BatchNorm2d(2)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.layer = M.Sequential(Blk(), Blk())

    def forward(self, x):
        return self.layer(x).mean()


def _net():
    net = Net()
    for i, (_, p) in enumerate(sorted(net.named_parameters())):  # fixed weights: values comparable
        p._reset(mge.Tensor(np.linspace(-0.5, 0.7, p.size).reshape(p.shape).astype("float32") * (i % 3 + 1)))
    x = mge.Tensor(np.arange(16, dtype="float32").reshape(1, 2, 2, 4) / 10)
    return net, x


def test_graph_print_getattr_order_and_id_format():
    t = tm.trace_module(SimpleModule(), F.zeros(shape=[3, 4]))
    # MegEngine 1.13: getattr recorded where the code reads the attribute (linear before param), Constant()
    # with its name, functions by their MegEngine module ("nn.relu")
    assert str(t.graph) == (
        'SimpleModule.Graph (self, x) {\n\t%2:\tconst_tensor = Constant() -> (Tensor)\n'
        '\t%3:\tadd_out = x.__add__(const_tensor, )\n\t%4:\trelu_out = nn.relu(add_out, )\n'
        '\t%5:\tlinear = getattr(self, "linear") -> (Linear)\n\t%6:\tparam = getattr(self, "param") -> (Tensor)\n'
        '\t%7:\tadd_out_1 = relu_out.__add__(param, )\n\t%8:\tlinear_out = linear(add_out_1, )\n'
        '\treturn linear_out\n}')
    assert "{:i}".format(t.graph) == (
        'SimpleModule.Graph (%0_self, %1_x) {\n\t%2:\t%2_const_tensor = Constant() -> (Tensor)\n'
        '\t%3:\t%3_add_out = %1_x.__add__(%2_const_tensor, )\n\t%4:\t%4_relu_out = nn.relu(%3_add_out, )\n'
        '\t%5:\t%5_linear = getattr(%0_self, "linear") -> (Linear)\n'
        '\t%6:\t%6_param = getattr(%0_self, "param") -> (Tensor)\n'
        '\t%7:\t%7_add_out_1 = %4_relu_out.__add__(%6_param, )\n\t%8:\t%8_linear_out = %5_linear(%7_add_out_1, )\n'
        '\treturn %8_linear_out\n}')
    nodes = t.graph.nodes(recursive=False).as_list()
    assert ["{:i}".format(n) for n in nodes][:4] == ['%0_self', '%1_x', '%2_const_tensor', '%3_add_out']
    assert ["{:p}".format(n) for n in nodes][:3] == ['SimpleModule_self', 'SimpleModule_x',
                                                     'SimpleModule_const_tensor']
    assert str(t.graph) == str(t.graph)  # the id format does not stick


def test_function_calls_recorded_with_defaults():
    b = tm.trace_module(MyBn(), F.zeros(shape=[1, 3, 4, 4]))
    assert str(b.graph) == (
        'MyBn.Graph (self, x) {\n\t%2:\tweight = getattr(self, "weight") -> (Tensor)\n'
        '\t%3:\tbias = getattr(self, "bias") -> (Tensor)\n'
        '\t%4:\tbatch_norm_out = nn.batch_norm(x, None, None, weight, bias, eps=1e-05, inplace=True, '
        'momentum=0.9, training=True)\n'
        '\t%5:\tavg_pool2d_out = nn.avg_pool2d(batch_norm_out, 2, None, 0, average_count_exclude_padding, )\n'
        '\t%6:\tconcat_out = tensor.concat([avg_pool2d_out, avg_pool2d_out], 1, None, )\n'
        '\treturn concat_out\n}')


def test_sequential_graph_names_watch_end_points_and_eval():
    net, x = _net()
    tn = tm.trace_module(net, x)
    assert str(tn.layer.graph) == (
        'Net_layer.Graph (self, inp) {\n\t%6:\t_0 = getattr(self, "0") -> (Module)\n'
        '\t%7:\t_1 = getattr(self, "1") -> (Module)\n\t%8:\t_0_out = _0(inp, )\n'
        '\t%16:\t_1_out = _1(_0_out, )\n\treturn _1_out\n}')
    assert [g._name for m in (getattr(tn.layer, "0"), getattr(tn.layer, "1"))
            for g in m.argdef_graph_map.values()] == ['Net_layer_0', 'Net_layer_1']
    assert repr(tn.layer.graph.get_expr_by_id([15]).as_list()) == '[%15:\trelu_out = nn.relu(bn_out, )]'
    # watch values: the node's Tensor at the last forward (MegEngine), and the module stays walkable
    n0 = [n for n in tn.layer.graph.nodes().as_list() if n.name == "_0_out"][0]
    tn.set_watch_points([n0])
    tn(x)
    v = tn.watch_node_value[n0]
    assert isinstance(v, mge.Tensor) and v.shape == (1, 2, 2, 4)
    np.testing.assert_allclose(float(v.sum()), 9.85454, rtol=1e-5)  # MegEngine 1.13
    assert "layer.0.bn.bias" in tn.state_dict()
    # end points of the top graph: a list of their values
    top = [n for n in tn.graph.nodes(recursive=False).as_list() if n.name == "layer_out"][0]
    tn.set_end_points([top])
    r = tn(x)
    assert isinstance(r, list) and len(r) == 1 and r[0].shape == (1, 2, 2, 4)
    np.testing.assert_allclose(float(r[0].sum()), 15.732323, rtol=1e-5)  # MegEngine 1.13
    tn.clear_end_points()
    tn.clear_watch_points()
    # InternalGraph.eval: the graph run on its module, outputs flattened
    r3 = tn.layer.graph.eval(x)
    assert len(r3) == 1
    np.testing.assert_allclose(float(r3[0].sum()), float(r.pop().sum()), rtol=1e-6)


def test_optimize_folds_batchnorm_of_a_training_module():
    # api-example.rst calls optimize on a module never put in eval mode; MegEngine folds with running stats
    net, x = _net()
    tn = tm.trace_module(net, x)
    opt = tm.optimize(tn, enabled_pass="FuseConvBn")
    assert opt.flatten().graph.get_module_by_type(M.BatchNorm2d).as_count() == 0
    # MegEngine 1.13: trace_module's check run moves the statistics a second time
    np.testing.assert_allclose(net.layer[0].bn.running_mean.numpy().ravel(), [-0.3401, 0.5719], rtol=1e-5)
    np.testing.assert_allclose(float(opt(x)), 8.437823, rtol=1e-5)
    net.eval()
    np.testing.assert_allclose(float(net(x)), 8.437823, rtol=1e-5)
