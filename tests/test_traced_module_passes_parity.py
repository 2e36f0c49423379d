"""``traced_module.optimize`` passes against MegEngine 1.13's (``traced_module/_passes``): which exprs remain, the
folded constants, and outputs equal to the untransformed module's."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.traced_module as tm


def _exprs(module):
    """The graph's exprs as printed, without ids and inputs (``conv_out = conv(x, )``)."""
    return [str(e).split(":", 1)[1].strip() for e in module.graph.exprs(False) if type(e).__name__ != "Input"]


def _outputs(out):
    return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]


def _assert_same_outputs(a, b, x):
    for u, v in zip(_outputs(a(x)), _outputs(b(x))):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


class _Conv(M.Module):
    """A 1x1 conv with weight 3, bias ``bias``, then ``body(self, y, x)``."""

    def __init__(self, body, bias=0.0, bn=False, identity=False):
        super().__init__()
        self.conv = M.Conv2d(1, 1, 1)
        self.conv.weight = mge.Parameter(np.full((1, 1, 1, 1), 3.0, "float32"))
        self.conv.bias = mge.Parameter(np.full((1, 1, 1, 1), bias, "float32"))
        self.bn = M.BatchNorm2d(1) if bn else M.Identity() if identity else None
        self.body = body

    def forward(self, x):
        y = self.conv(x)
        if self.bn is not None:
            y = self.bn(y)
        return self.body(self, y, x)


def _traced(body, x, **kw):
    net = _Conv(body, **kw)
    net.eval()
    return net, tm.trace_module(net, x)


_X1 = mge.tensor(np.ones((1, 1, 1, 1), "float32"))
_X4 = mge.tensor(np.arange(4, dtype="float32").reshape(1, 1, 2, 2) - 1.5)


@pytest.mark.parametrize("body", [lambda s, y, x: y.flatten(), lambda s, y, x: y * 2.0, lambda s, y, x: y.mean(),
                                  lambda s, y, x: F.relu(y)])
def test_fuse_conv_bn_leaves_a_conv_without_batch_norm(body):
    # MegEngine fuses only BatchNorm2d(conv) / F.batch_norm(conv, consts...): any other only user of the conv
    # (a Tensor method taking no other tensor) leaves the graph as it is (megxla raised IndexError)
    net, t = _traced(body, _X4)
    o = tm.optimize(t)
    assert _exprs(o) == _exprs(t)
    _assert_same_outputs(o, net, _X4)


def test_backward_fold_scale_removes_the_folded_multiplication():
    # MegEngine: (relu(conv(x)) + 1) * 0.5 -> relu(conv'(x)) + 0.5 with conv' weight 3 * 0.5, the `* 0.5` removed
    # (megxla had scaled the conv and the add but kept the multiplication: output 1.0 instead of 2.0)
    net, t = _traced(lambda s, y, x: (F.relu(y) + 1.0) * 0.5, _X1)
    o = tm.optimize(t, enabled_pass=["FuseConvBn", "BackwardFoldScale"])
    assert _exprs(o) == ['conv = getattr(self, "conv") -> (Conv2d)', "conv_out = conv(x, )",
                         "relu_out = nn.relu(conv_out, )", "add_out = relu_out.__add__(0.5, )"]
    assert o.conv.weight.numpy().ravel().tolist() == [1.5]
    assert o(_X1).numpy().ravel().tolist() == [2.0] == net(_X1).numpy().ravel().tolist()


@pytest.mark.parametrize("passes", [["BackwardFoldScale"], ["FuseConvBn", "FuseAddMul", "BackwardFoldScale"]])
def test_backward_fold_scale_through_a_fused_batch_norm_and_not_an_identity(passes):
    # MegEngine (its dbg_fold probe): bn(conv(x)) * 2 + 1) * 0.5 -> conv'(x) + 0.5 (the BN fused first, scale 1
    # left for the conv); with an Identity module between conv and scale nothing is folded
    body = lambda s, y, x: (y * 2.0 + 1.0) * 0.5  # noqa: E731
    net, t = _traced(body, _X1, bn=True)
    o = tm.optimize(t, enabled_pass=list(passes))
    assert _exprs(o) == ['conv = getattr(self, "conv") -> (Conv2d)', "conv_out = conv(x, )",
                         "add_out = conv_out.__add__(0.5, )"]
    _assert_same_outputs(o, net, _X1)
    net, t = _traced(body, _X1, identity=True)
    o = tm.optimize(t, enabled_pass=list(passes))
    assert _exprs(o) == _exprs(t)
    assert o.conv.weight.numpy().ravel().tolist() == [3.0]
    _assert_same_outputs(o, net, _X1)


def test_backward_fold_scale_follows_megengine_op_list():
    # MegEngine folds through `+`, F.neg, sub / div (normalized first), reshape, and copies a conv module called
    # twice (`conv_1`); Tensor.flatten / Tensor.transpose are not in its list ("tranpose", sic): no folding
    net, t = _traced(lambda s, y, x: (y - 1.0) / 2.0, _X4, bias=0.25)
    o = tm.optimize(t, enabled_pass=["BackwardFoldScale"])
    assert _exprs(o)[1:] == ["conv_out = conv(x, )", "add_out = conv_out.__add__(-0.5, )"]
    assert o.conv.weight.numpy().ravel().tolist() == [1.5] and o.conv.bias.numpy().ravel().tolist() == [0.125]
    _assert_same_outputs(o, net, _X4)
    for body in (lambda s, y, x: y.flatten() * 2.0, lambda s, y, x: y.transpose(0, 1, 2, 3) * 2.0):
        net, t = _traced(body, _X4)
        o = tm.optimize(t, enabled_pass=["BackwardFoldScale"])
        assert _exprs(o) == _exprs(t)
    net, t = _traced(lambda s, y, x: y * 2.0 + s.conv(x), _X4)
    o = tm.optimize(t, enabled_pass=["BackwardFoldScale"])
    assert [k for k, _ in o.named_children()].count("conv_1") == 1
    assert o.conv_1.weight.numpy().ravel().tolist() == [6.0] and o.conv.weight.numpy().ravel().tolist() == [3.0]
    assert not any("__mul__" in s for s in _exprs(o))
    _assert_same_outputs(o, net, _X4)


@pytest.mark.parametrize("body", [
    lambda s, y, x: (y * 2.0, y * 3.0),  # a conv with two users asking different scales
    lambda s, y, x: (F.relu(y), F.relu(y) * 2.0),  # a value both returned and scaled
    lambda s, y, x: (y + x) * 2.0,  # `+` of a graph input
    lambda s, y, x: F.max_pool2d(y, 2) * -1.0,  # a negative scale through max pooling
    lambda s, y, x: F.concat([y, mge.tensor(np.ones((1, 1, 2, 2), "float32"))], 1) * 2.0,  # a constant concatenated
    lambda s, y, x: (y * 2.0, F.exp(y)),  # a conv's other user not scalable
])
def test_backward_fold_scale_refuses_what_would_change_the_outputs(body):
    # MegEngine's pass gives wrong numbers on each of these (it ignores graph outputs, graph inputs and constants
    # reached, and the sign for pooling); megxla keeps the multiplication there instead
    net, t = _traced(body, _X4, bias=0.25)
    o = tm.optimize(t, enabled_pass=["BackwardFoldScale"])
    _assert_same_outputs(o, net, _X4)
    assert any("__mul__" in s for s in _exprs(o))


def test_backward_fold_scale_refuses_a_graph_input_multiplied():
    class In(M.Module):
        def forward(self, x):
            return x * 2.0, (F.relu(x) + 1.0) * 0.5

    t = tm.trace_module(In(), _X4)
    o = tm.optimize(t, enabled_pass=["BackwardFoldScale"])
    assert _exprs(o) == _exprs(t)  # (MegEngine returns x itself for x * 2)
    _assert_same_outputs(o, In(), _X4)


class _Chains(M.Module):
    def forward(self, x):
        a = x - 1.0 - 2.0
        b = x / 2.0 / 4.0
        c = -(-x * 3.0)
        d = (x ** 2) ** 3
        e = 1.0 + x + 2.0
        f = 3.0 - x
        return a, b, c, d, e, f


def test_fuse_add_mul_normalizes_sub_and_div():
    # MegEngine's FuseAddMul runs NormElemWise first: x - 1 - 2 -> x + (-3.0), x / 2 / 4 -> x * 0.125, 3 - x ->
    # F.neg(x) + 3; `__neg__` and `__pow__` are not its patterns (F.neg / F.pow are) and stay
    x = mge.tensor(np.array([1.0, 2.0], "float32"))
    t = tm.trace_module(_Chains(), x)
    o = tm.optimize(t, enabled_pass=["FuseAddMul"])
    assert _exprs(o) == [
        "add_out = x.__add__(-3.0, )", "mul_out_3 = x.__mul__(0.125, )", "add_out_5 = x.__add__(3.0, )",
        "neg_out_2 = elemwise.neg(x, )", "add_out_1 = neg_out_2.__add__(3.0, )", "neg_out = x.__neg__(, )",
        "mul_out = neg_out.__mul__(3.0, )", "neg_out_1 = mul_out.__neg__(, )", "pow_out = x.__pow__(2, )",
        "pow_out_1 = pow_out.__pow__(3, )"]
    _assert_same_outputs(o, _Chains(), x)


def test_fuse_add_mul_lets_the_scale_fold_reach_the_conv():
    # MegEngine (its p5_opt probe): conv * 2 + 1) * 0.5 - 3 -> conv' + (-2.5) with all three passes;
    # BackwardFoldScale alone (NormElemWise inside) leaves conv' + 0.5 + (-3.0)
    body = lambda s, y, x: (y * 2.0 + 1.0) * 0.5 - 3.0  # noqa: E731
    net, t = _traced(body, _X4, bias=0.25)
    o = tm.optimize(t, enabled_pass=["FuseConvBn", "FuseAddMul", "BackwardFoldScale"])
    assert _exprs(o)[1:] == ["conv_out = conv(x, )", "add_out_2 = conv_out.__add__(-2.5, )"]
    _assert_same_outputs(o, net, _X4)
    o = tm.optimize(t, enabled_pass=["BackwardFoldScale"])
    assert _exprs(o)[1:] == ["conv_out = conv(x, )", "add_out = conv_out.__add__(0.5, )",
                             "add_out_1 = add_out.__add__(-3.0, )"]
    _assert_same_outputs(o, net, _X4)
