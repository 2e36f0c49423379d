"""Quantization: fake-quant / LSQ / TQT primitives against NumPy references of MegEngine's kernels, observers,
QAT conversion, quantized inference, and a QAT training step compiled with xla_trace."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
from megxla import quantization as Q
from megxla.autodiff import GradManager
from megxla.jit import xla_trace
from megxla.module import qat as QAT
from megxla.module import quantized as QM
from megxla.optimizer import SGD


def np_round(x):  # std::round
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def np_fake_quant(x, s, zp, qmin, qmax):
    q = np.clip(np_round(x / s) + zp, qmin, qmax)
    return (q - zp) * s, ((np_round(x / s) + zp >= qmin) & (np_round(x / s) + zp <= qmax)).astype(np.float32)


def np_lsq(x, s, zp, gs, qmin, qmax):
    v = x / s + zp
    out = (np_round(np.clip(v, qmin, qmax)) - zp) * s
    small, big = v < qmin, v > qmax
    mid = ~(small | big)
    g_s = np.where(small, qmin, np.where(big, qmax, np_round(v) - v)) * gs
    return out, mid.astype(np.float32), g_s


def np_tqt(x, log2s, qmin, qmax):
    t = 2.0 ** log2s
    scaled = x / t
    r = np.clip(np_round(scaled), qmin, qmax)
    clip = (scaled < qmin - 0.5) | (scaled > qmax + 0.5)
    g_s = np.where(clip, r * t * np.log(2.0), (r - scaled) * t * np.log(2.0))
    return r * t, (~clip).astype(np.float32), g_s


X = np.array([-300.0, -2.6, -1.25, -0.75, -0.2, 0.0, 0.24, 0.25, 0.9, 1.75, 3.3, 64.0, 500.0], np.float32)


def _grads(fn, *tensors):
    gm = GradManager().attach(list(tensors))
    with gm:
        y = fn(*tensors)
        gm.backward((y * mge.Tensor(np.arange(1, y.size + 1, dtype=np.float32))).sum())
    return [t.grad.numpy() for t in tensors]


def test_fake_quant_forward_and_straight_through_grad():
    q = Q.create_qparams(Q.QuantMode.ASYMMERTIC, "quint8", mge.Tensor(0.5), mge.Tensor(10.0))
    ref, mask = np_fake_quant(X, 0.5, 10.0, 0, 255)
    np.testing.assert_allclose(Q.fake_quant_tensor(mge.Tensor(X), q).numpy(), ref)
    x = mge.Tensor(X)
    gx, = _grads(lambda t: Q.fake_quant_tensor(t, q), x)
    np.testing.assert_allclose(gx, mask * np.arange(1, X.size + 1))


def test_fake_quant_rounds_half_away_from_zero():
    q = Q.create_qparams(Q.QuantMode.SYMMERTIC, "qint8", mge.Tensor(1.0))
    np.testing.assert_array_equal(Q.fake_quant_tensor(mge.Tensor([0.5, -0.5, 1.5, 2.5]), q).numpy(),
                                  [1.0, -1.0, 2.0, 3.0])


def test_lsq_forward_and_learned_step_grad():
    ref, mask, g_s = np_lsq(X, 0.5, 0.0, 0.25, -128, 127)
    x, s = mge.Tensor(X), mge.Tensor([0.5])
    out = Q.utils.lsq_forward(-128, 127, x, s, None, mge.Tensor(0.25))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)
    gx, gs = _grads(lambda a, b: Q.utils.lsq_forward(-128, 127, a, b, None, mge.Tensor(0.25)), x, s)
    w = np.arange(1, X.size + 1)
    np.testing.assert_allclose(gx, mask * w)
    np.testing.assert_allclose(gs, [(g_s * w).sum()], rtol=1e-5)


def test_tqt_forward_and_log2_threshold_grad():
    ref, mask, g_s = np_tqt(X, -1.0, -128, 127)
    x, s = mge.Tensor(X), mge.Tensor(-1.0)
    np.testing.assert_allclose(Q.utils.tqt_forward(-128, 127, x, s).numpy(), ref)
    gx, gs = _grads(lambda a, b: Q.utils.tqt_forward(-128, 127, a, b), x, s)
    w = np.arange(1, X.size + 1)
    np.testing.assert_allclose(gx, mask * w)
    np.testing.assert_allclose(gs, (g_s * w).sum(), rtol=1e-5)


def test_tqt_step_grad_matches_numerical_difference_in_clip_region():
    # Where every value is clipped the output is qmax * 2**s: a smooth function of s, so the learned-threshold
    # gradient is the true derivative there.
    x, s = mge.Tensor(np.full(4, 1000.0, np.float32)), mge.Tensor(-1.0)
    _, gs = _grads(lambda a, b: Q.utils.tqt_forward(-128, 127, a, b), x, s)
    h = 1e-3
    f = lambda v: float((Q.utils.tqt_forward(-128, 127, x, mge.Tensor(v)) * mge.Tensor([1., 2, 3, 4])).sum())
    np.testing.assert_allclose(gs, (f(-1 + h) - f(-1 - h)) / (2 * h), rtol=1e-3)


@pytest.mark.parametrize("name", ["fake_quant", "lsq", "tqt"])
def test_quant_ops_eager_equals_xla_trace(name):
    x = mge.Tensor(X)
    q = Q.create_qparams(Q.QuantMode.SYMMERTIC, "qint8", mge.Tensor(0.5))
    fns = {"fake_quant": lambda t: Q.fake_quant_tensor(t, q),
           "lsq": lambda t: Q.utils.lsq_forward(-128, 127, t, mge.Tensor(0.5)),
           "tqt": lambda t: Q.utils.tqt_forward(-128, 127, t, mge.Tensor(-1.0))}
    step = xla_trace(fns[name], capture_as_const=True)
    eager = fns[name](x).numpy()
    for _ in range(3):
        np.testing.assert_array_equal(step(x).numpy(), eager)


def test_minmax_and_ema_observers():
    ob = Q.MinMaxObserver(dtype="qint8")
    ob(mge.Tensor([-1.0, 2.55])); ob(mge.Tensor([0.5, 1.0]))
    np.testing.assert_allclose(float(ob.get_qparams().scale), 2.55 / 127.5, rtol=1e-6)
    asym = Q.MinMaxObserver(mode=Q.QuantMode.ASYMMERTIC, dtype="quint8")
    asym(mge.Tensor([-1.0, 2.0]))
    qp = asym.get_qparams()
    np.testing.assert_allclose(float(qp.scale), 3.0 / 255, rtol=1e-6)
    assert float(qp.zero_point) == -np_round(-1.0 / (3.0 / 255))
    ema = Q.ExponentialMovingAverageObserver(momentum=0.9)
    ema(mge.Tensor([0.0, 2.0])); ema(mge.Tensor([-1.0, 4.0]))
    np.testing.assert_allclose([float(ema.min_val), float(ema.max_val)], [-0.1, 2.2], rtol=1e-6)
    ema.disable(); ema(mge.Tensor([100.0]))
    assert float(ema.max_val) == pytest.approx(2.2)


def _loop_quantization_error(hist, bin_width, start, end, bins, dst_nbins):
    # explicit-loop reference of the L2 error of MegEngine's (and PyTorch's) histogram search
    dst_w = bin_width * (end - start + 1) / dst_nbins
    norm = 0.0
    n3 = lambda a, b: (b ** 3 - a ** 3) / 3
    for src in range(bins):
        b0 = (src - start) * bin_width
        b1 = b0 + bin_width
        db = min(dst_nbins - 1, max(0.0, np.floor(b0 / dst_w)))
        de = min(dst_nbins - 1, max(0.0, np.floor(b1 / dst_w)))
        cb = db * dst_w + dst_w / 2
        dens = hist[src] / bin_width
        if db == de:
            norm += dens * n3(b0 - cb, b1 - cb)
        else:
            ce = de * dst_w + dst_w / 2
            norm += dens * (n3(b0 - cb, dst_w / 2) + (de - db - 1) * n3(-dst_w / 2, dst_w / 2)
                            + n3(-dst_w / 2, b1 - ce))
    return norm


def test_histogram_observer_search():
    rng = np.random.RandomState(0)
    ob = Q.HistogramObserver(bins=128, dtype="qint8")
    data = rng.laplace(size=8000).astype(np.float32)
    ob(mge.Tensor(data[:4000])); ob(mge.Tensor(data[4000:]))
    assert ob.histogram.numpy().sum() == pytest.approx(data.size, rel=1e-3)
    hist = ob.histogram.numpy().astype(np.float64)
    for start, end in [(0, 127), (10, 100), (40, 41)]:
        np.testing.assert_allclose(ob._quantization_error(hist, 0.1, start, end),
                                   _loop_quantization_error(hist, 0.1, start, end, 128, 256), rtol=1e-9)
    minmax_scale = np.abs(data).max() / 127.5
    assert 0.5 * minmax_scale < float(ob.get_qparams().scale) < minmax_scale  # heavy tails are clipped


def test_passive_observer_and_qconfig_rejects_instances():
    ob = Q.PassiveObserver("qint8")
    ob.set_qparams(Q.create_qparams(Q.QuantMode.SYMMERTIC, "qint8", mge.Tensor(0.1)))
    ob.scale = 0.2
    assert float(ob.get_qparams().scale) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        ob.scale = -1.0
    with pytest.raises(ValueError, match="instances"):
        Q.QConfig(Q.MinMaxObserver(), None, None, None)
    with pytest.raises(ValueError, match="unknown quantized dtype"):
        Q.FakeQuantize("qint7")


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.c1 = M.ConvBnRelu2d(1, 4, 3, padding=1)
        self.c2 = M.ConvBn2d(4, 4, 3, padding=1)
        self.add = M.Elemwise("fuse_add_relu")
        self.fc = M.Linear(4 * 6 * 6, 10)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.quant(x)
        y = self.c1(x)
        z = self.add(y, self.c2(y))
        return self.dequant(self.fc(F.flatten(z, 1)))


def _data(seed=0, n=4):
    rng = np.random.RandomState(seed)
    return mge.Tensor(rng.randn(n, 1, 6, 6).astype(np.float32)), mge.Tensor(rng.randint(0, 10, n).astype(np.int32))


def test_quantize_qat_converts_and_shares_parameters():
    net = _Net()
    w = net.c1.conv.weight
    Q.quantize_qat(net)
    assert type(net.c1) is QAT.ConvBnRelu2d and type(net.fc) is QAT.Linear and type(net.quant) is QAT.QuantStub
    assert net.c1.conv.weight is w
    assert isinstance(net.c1.act_observer, Q.ExponentialMovingAverageObserver)
    Q.disable_fake_quant(net)
    assert not net.fc.weight_fake_quant.enabled
    Q.enable_fake_quant(net); Q.disable_observer(net)
    assert net.fc.weight_fake_quant.enabled and not net.fc.act_observer.enabled
    frozen = _Net(); frozen.fc.disable_quantize()
    Q.quantize_qat(frozen)
    assert type(frozen.fc) is M.Linear


def test_quantized_model_matches_qat_within_one_step():
    mge.random.seed(1)
    net = _Net()
    Q.quantize_qat(net)
    for seed in range(3):
        net(_data(seed)[0])
    net.eval()
    x = _data(7)[0]
    qat_out = net(x).numpy()
    qnet = Q.quantize(net, inplace=False)
    assert type(qnet.c1) is QM.ConvBnRelu2d
    q_out = qnet(x)
    assert q_out.dtype == np.float32
    step = float(net.fc.get_activation_qparams().scale)
    assert np.abs(q_out.numpy() - qat_out).max() <= 1.01 * step
    # the quantized layers really hold integers
    assert qnet.c1.weight.dtype == np.int8
    assert qnet.quant(x).dtype == np.int8


def _qat_step_fn(gm):
    def step(net, opt, x, y):
        with gm:
            loss = F.nn.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss
    return step


def _state(net):
    return {k: v.copy() for k, v in net.state_dict().items() if isinstance(v, np.ndarray)}


def test_qat_training_step_eager_equals_xla_trace_with_observer_state():
    def build():
        mge.random.seed(3)
        net = Q.quantize_qat(_Net())
        opt = SGD(net.parameters(), lr=0.05, momentum=0.9)
        return net, opt, GradManager().attach(net.parameters())

    net_e, opt_e, gm_e = build()
    net_c, opt_c, gm_c = build()
    eager, compiled = _qat_step_fn(gm_e), xla_trace(_qat_step_fn(gm_c))
    for i in range(5):
        x, y = _data(i)
        le, lc = eager(net_e, opt_e, x, y), compiled(net_c, opt_c, x, y)
        np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-5, atol=1e-6)
    se, sc = _state(net_e), _state(net_c)
    assert se.keys() == sc.keys() and any("act_observer.max_val" in k for k in se)
    for k in se:
        np.testing.assert_allclose(sc[k], se[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_toggling_fake_quant_between_compiled_calls_is_not_stale():
    mge.random.seed(4)
    net = Q.quantize_qat(_Net())
    x = _data(0)[0]
    net(x); net(x)  # the observers see data
    net.eval()
    f = xla_trace(lambda m, x: m(x))
    f(net, x); f(net, x)
    # (each toggle is a new signature whose first call is compiled too: float32 agreement, not bit-identity;
    # a stale step would differ by the quantization error, ~1e-2)
    Q.disable_fake_quant(net)
    np.testing.assert_allclose(f(net, x).numpy(), net(x).numpy(), rtol=1e-5, atol=1e-6)
    Q.enable_fake_quant(net)
    np.testing.assert_allclose(f(net, x).numpy(), net(x).numpy(), rtol=1e-5, atol=1e-6)


def test_tqt_and_lsq_qconfigs_train():
    for qconfig in (Q.tqt_qconfig, Q.lsq_qconfig):
        mge.random.seed(5)
        net = Q.quantize_qat(_Net(), qconfig=qconfig)
        opt = SGD(net.parameters(), lr=0.01)
        gm = GradManager().attach(net.parameters())
        step = _qat_step_fn(gm)
        x, y = _data(0)
        before = {n: p.numpy().copy() for n, p in net.named_parameters()}
        step(net, opt, x, y)
        learned = [n for n in before if ("scale" in n or "step_size" in n)]
        assert learned and any(not np.array_equal(before[n], dict(net.named_parameters())[n].numpy())
                               for n in learned)


class _QBlock(M.Module):
    # the official zoo's quantizable BasicBlock: ConvBnRelu2d / ConvBn2d and a fused add-relu Elemwise
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv_bn_relu = M.ConvBnRelu2d(cin, cout, 3, stride, padding=1, bias=False)
        self.conv_bn = M.ConvBn2d(cout, cout, 3, 1, padding=1, bias=False)
        self.down = M.ConvBn2d(cin, cout, 1, stride, bias=False) if stride != 1 or cin != cout else M.Identity()
        self.add_relu = M.Elemwise("FUSE_ADD_RELU")

    def forward(self, x):
        return self.add_relu(self.conv_bn(self.conv_bn_relu(x)), self.down(x))


class _QResNet18(M.Module):
    def __init__(self, width=4, num_classes=10):
        super().__init__()
        self.quant, self.dequant = M.QuantStub(), M.DequantStub()
        self.stem = M.ConvBnRelu2d(3, width, 3, 1, padding=1, bias=False)
        blocks, cin = [], width
        for i, cout in enumerate([width, 2 * width, 4 * width, 8 * width]):
            blocks += [_QBlock(cin, cout, 1 if i == 0 else 2), _QBlock(cout, cout, 1)]
            cin = cout
        self.blocks = M.Sequential(*blocks)
        self.fc = M.Linear(cin, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(self.quant(x)))
        return self.dequant(self.fc(F.flatten(F.adaptive_avg_pool2d(x, 1), 1)))


def test_qat_resnet18_step_eager_equals_xla_trace_over_five_steps():
    def build():
        mge.random.seed(11)
        net = Q.quantize_qat(_QResNet18())
        opt = SGD(net.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
        return net, opt, GradManager().attach(net.parameters())

    (ne, oe, ge), (nc, oc, gc) = build(), build()
    # symbolic=False: the first call records eagerly. On every observer's first batch the largest activation
    # sits exactly on a rounding tie (x / scale = 127.5 with scale = max / 127.5): whether its straight-through
    # gradient passes depends on the last bit of that maximum, which a fused conv computes otherwise than the
    # eager kernels (and another CPU's eager kernels otherwise than this one's).
    eager, compiled = _qat_step_fn(ge), xla_trace(_qat_step_fn(gc), symbolic=False)
    rng = np.random.RandomState(0)
    for i in range(5):
        x = mge.Tensor(rng.randn(4, 3, 8, 8).astype(np.float32))
        y = mge.Tensor(rng.randint(0, 10, 4).astype(np.int32))
        np.testing.assert_allclose(compiled(nc, oc, x, y).numpy(), eager(ne, oe, x, y).numpy(), rtol=1e-4)
        se, sc = _state(ne), _state(nc)
        for k in se:
            np.testing.assert_allclose(sc[k], se[k], rtol=1e-3, atol=1e-4, err_msg=f"step {i}: {k}")
        # Each step starts from eager's state: fake quantization makes a free run chaotic. An observer's new
        # maximum sits on a rounding tie (x / scale = 127.5), and its last bit -- a fused conv's, or another CPU's
        # eager kernels' (Sapphire Rapids) -- decides the tie; the step after, the quantized levels differ and the
        # loss with them (0.3% at step 3, 18% by step 7, measured with symbolic=True here). From one state the
        # compiled step and eager's agree to float32 (within 5e-7 here).
        nc.load_state_dict(ne.state_dict())
        oc.load_state_dict(oe.state_dict())
    assert len([k for k in se if "observer" in k]) > 40


def test_shape_and_pooling_ops_keep_quantized_parameters():
    q = QM.quantize_tensor(mge.Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) * 0.3), "qint8", 0.25)
    for out in (F.flatten(q, 1), q.reshape(4, 4), F.max_pool2d(q, 2), F.transpose(q, (0, 1, 3, 2))):
        assert out.dtype == np.int8 and float(out.qparams.scale) == 0.25
    avg = F.avg_pool2d(q, 2)
    ref = np_round(F.avg_pool2d(QM.dequantize_tensor(q), 2).numpy() / 0.25)
    assert avg.dtype == np.int8
    np.testing.assert_array_equal(avg.numpy(), ref)
    np.testing.assert_allclose(QM.dequantize_tensor(F.adaptive_avg_pool2d(q, 1)).numpy(),
                               np_round(QM.dequantize_tensor(q).numpy().mean() / 0.25) * 0.25)
    with pytest.raises(ValueError, match="not a quantized tensor"):
        QM.layers._input_scale_zp(mge.Tensor(np.zeros((2, 3), np.int8)), "Linear")


def test_a_copy_of_a_quantized_tensor_keeps_its_quantized_dtype():
    """``Parameter(qweight)`` / ``Tensor(q)`` keep the quantized dtype (MegEngine's lives in the dtype: its own
    test_conv_transpose2d sets ``module.weight = Parameter(weight_int8)``); a quantized dtype given is taken."""
    from megxla.core.tensor import dtype as qd
    q = mge.Parameter(qd.convert_to_qint8(np.array([0.1, -0.2], "float32"), qd.qint8(0.05)), dtype=qd.qint8(0.05))
    for copy in (mge.Parameter(q), mge.Tensor(q), q.detach()):
        assert copy.dtype == np.int8 and qd.get_scale(copy.dtype) == pytest.approx(0.05)
    t = mge.Tensor(mge.Tensor([1, 2], dtype="int32"), dtype=qd.qint32(0.5))
    assert qd.get_scale(t.dtype) == 0.5
    assert mge.Tensor(mge.Tensor([1.0])).qparams.scale is None  # a float tensor's copy has none


def test_qparams_passed_to_a_compiled_step_are_state_not_constants():
    f = xla_trace(lambda x, q: Q.fake_quant_tensor(x, q))
    x = mge.Tensor(X)
    q = Q.create_qparams(Q.QuantMode.SYMMERTIC, "qint8", mge.Tensor(0.5))
    for scale in (0.5, 0.25, 2.0):
        q.scale[...] = mge.Tensor(scale)
        np.testing.assert_array_equal(f(x, q).numpy(), np_fake_quant(X, scale, 0.0, -128, 127)[0])
    q.dtype_meta = Q.utils._meta("qint4")  # changed in place: another executable, not a stale one
    np.testing.assert_array_equal(f(x, q).numpy(), np_fake_quant(X, 2.0, 0.0, -8, 7)[0])


def test_bn_fusion_folds_in_eval_and_keeps_bn_in_training():
    # megengine.utils.bn_fusion: eval -> one Conv/Linear with the BN folded in (same outputs); train -> ConvBn2d
    import megxla.module as M
    from megxla.utils.bn_fusion import fuse_conv_bn_relu_module, fuse_linear_bn_relu_module
    rng = np.random.RandomState(0)
    conv, bn, relu = M.Conv2d(3, 4, 3, padding=1, groups=1), M.BatchNorm2d(4), M.ReLU()
    bn.running_mean[...] = rng.rand(1, 4, 1, 1).astype("float32")
    bn.running_var[...] = rng.rand(1, 4, 1, 1).astype("float32") + 0.5
    bn.weight[...] = rng.rand(*bn.weight.shape).astype("float32")
    x = mge.tensor(rng.rand(2, 3, 5, 5).astype("float32"))
    for m in (conv, bn):
        m.eval()
    fused = fuse_conv_bn_relu_module(conv, bn, relu)
    assert type(fused) is M.ConvRelu2d
    np.testing.assert_allclose(fused(x).numpy(), relu(bn(conv(x))).numpy(), rtol=1e-5, atol=1e-6)
    lin, bn1 = M.Linear(3, 2), M.BatchNorm1d(2)
    lin.eval(); bn1.eval()
    bn1.running_var[...] = np.array([2.0, 3.0], "float32").reshape(bn1.running_var.shape)
    y = mge.tensor(rng.rand(4, 3).astype("float32"))
    np.testing.assert_allclose(fuse_linear_bn_relu_module(lin, bn1, None)(y).numpy(), bn1(lin(y)).numpy(), rtol=1e-5)
    conv.train(); bn.train()
    kept = fuse_conv_bn_relu_module(conv, bn, None)
    assert type(kept) is M.ConvBn2d and kept.bn is not bn
    np.testing.assert_array_equal(kept.conv.weight.numpy(), conv.weight.numpy())
    with pytest.raises(AssertionError, match="same mode"):
        bn.eval()
        fuse_conv_bn_relu_module(conv, bn, None)


def test_quantize_qat_with_a_qconfig_as_second_argument_converts_like_megengine():
    # MegEngine reads quantize_qat(net, qconfig) as inplace=<truthy> with the default qconfig
    import megxla.module as M
    net = M.Sequential(M.QuantStub(), M.Linear(4, 2), M.DequantStub())
    out = Q.quantize_qat(net, Q.min_max_fakequant_qconfig)
    assert out is net and type(net[1]).__module__ == "megxla.module.qat.layers"


class _HalfNet(M.Module):
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.c1 = M.ConvBnRelu2d(1, 4, 3, padding=1)
        self.fc = M.Linear(4 * 6 * 6, 10)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.c1(self.quant(x))
        return self.dequant(self.fc(F.flatten(x, 1)))


def _kinds(net):
    return {k: type(v).__module__.split(".")[-2] + "." + type(v).__name__ for k, v in net.named_children()}


def test_a_conversion_failing_part_way_leaves_the_model_as_it_was():
    """quantize / quantize_qat / reset_qconfig converted module after module and then raised: a model half
    quantized (and in eval mode), half QAT; every layer QAT with no observers; an observer swapped, its fake-quant
    gone (probe Z). A failing conversion is undone."""
    from functools import partial
    x = mge.Tensor(np.random.RandomState(0).randn(2, 1, 6, 6).astype("float32"))
    net = _HalfNet()
    Q.quantize_qat(net)
    net(x)
    Q.propagate_qconfig(net.fc, Q.passive_qconfig)  # fc's quantization parameters never set
    before = _kinds(net)
    with pytest.raises(ValueError, match="no weight quantization parameters"):
        Q.quantize(net)
    assert _kinds(net) == before and net.training and net.c1.training
    net = _HalfNet()
    observer = partial(Q.MinMaxObserver, dtype="qint7")  # fails when called, after conversion
    with pytest.raises(ValueError, match="unknown quantized dtype 'qint7'"):
        Q.quantize_qat(net, qconfig=Q.QConfig(observer, observer, None, None))
    assert all(kind.startswith("module.") for kind in _kinds(net).values())
    with pytest.raises(TypeError, match="QConfig: weight_observer must be None or a class"):
        Q.QConfig("minmax", None, None, None)
    with pytest.raises(TypeError, match="maps to <class 'int'>, which has no from_float_module"):
        Q.quantize_qat(net, mapping={M.Linear: int})
    with pytest.raises(TypeError, match="mapping must be a dict"):
        Q.quantize(net, mapping=[M.Linear])
    Q.quantize_qat(net)
    net(x)
    observers = (net.c1.weight_observer, net.c1.weight_fake_quant, net.c1.act_observer)
    bad = Q.QConfig(partial(Q.PassiveObserver, dtype="qint8_narrow"), partial(Q.PassiveObserver, dtype="qint4"),
                    None, None)  # the weight's parameters fit, the activation's dtype does not
    with pytest.raises(ValueError, match="is not the observer's qint4"):
        Q.reset_qconfig(net, bad)
    assert (net.c1.weight_observer, net.c1.weight_fake_quant, net.c1.act_observer) == observers
    with pytest.raises(TypeError, match="expected a Module, got NoneType"):
        Q.quantize(None)


def test_quantized_modules_built_by_hand_as_megengine():
    """MegEngine's quantized modules take the float layers' arguments and ``dtype`` (the output's quantized dtype);
    the weight is then set as a quantized Parameter (its scale in the dtype). From MegEngine's own
    test_conv_transpose2d: the result equals the float computation on the dequantized values, to one step."""
    from megxla.core.tensor import dtype as qd
    rng = np.random.RandomState(2021)
    s_in, s_w, s_out = np.float32(0.05), np.float32(0.04), np.float32(0.06)
    x = mge.Tensor(qd.convert_to_qint8(rng.uniform(-1, 1, (2, 4, 5, 5)).astype("float32"), qd.qint8(s_in)),
                   dtype=qd.qint8(s_in))
    for cls, wshape, ref in [(QM.ConvTranspose2d, (4, 8, 3, 3), F.conv_transpose2d),
                             (QM.Conv2d, (8, 4, 3, 3), F.conv2d)]:
        w = mge.Parameter(qd.convert_to_qint8(rng.uniform(-1, 1, wshape).astype("float32"), qd.qint8(s_w)),
                          dtype=qd.qint8(s_w))
        b = mge.Parameter(qd.convert_to_qint32(rng.uniform(-1, 1, (1, 8, 1, 1)).astype("float32"),
                                               qd.qint32(s_in * s_w)), dtype=qd.qint32(s_in * s_w))
        m = cls(4, 8, 3, stride=2, padding=1, dtype=qd.qint8(s_out))
        m.eval()
        with pytest.raises(ValueError, match="weight is not quantized"):
            m(x)  # (still its float weight, as MegEngine's before a quantized one is set)
        m.weight, m.bias = mge.Parameter(w), mge.Parameter(b)
        out = m(x).numpy()
        assert out.dtype == np.int8 and qd.get_scale(out.dtype) == pytest.approx(s_out)  # MegEngine's quantized dtype
        expected = ref(x.astype("float32"), w.astype("float32"), b.astype("float32"), stride=2, padding=1).numpy()
        expected = qd.convert_from_qint8(qd.convert_to_qint8(expected, qd.qint8(s_out)))
        np.testing.assert_allclose(qd.convert_from_qint8(out), expected, atol=s_out * 1.01)
    lin = QM.Linear(dtype=qd.qint8(s_out))
    assert lin.weight is None and lin.bias is None
    lin.weight = mge.Parameter(qd.convert_to_qint8(rng.uniform(-1, 1, (3, 4)).astype("float32"), qd.qint8(s_w)),
                               dtype=qd.qint8(s_w))
    lin.eval()
    xl = mge.Tensor(qd.convert_to_qint8(rng.uniform(-1, 1, (2, 4)).astype("float32"), qd.qint8(s_in)),
                    dtype=qd.qint8(s_in))
    exp = qd.convert_from_qint8(qd.convert_to_qint8(F.linear(xl.astype("float32"), lin.weight.astype("float32"))
                                                    .numpy(), qd.qint8(s_out)))
    np.testing.assert_allclose(qd.convert_from_qint8(lin(xl).numpy()), exp, atol=s_out * 1.01)
    stub = QM.QuantStub(dtype=qd.qint8(0.1))
    stub.eval()
    assert qd.get_scale(stub(mge.Tensor([0.3])).dtype) == pytest.approx(0.1)
    add = QM.Elemwise("add", dtype=qd.qint8(0.1))
    add.eval()
    np.testing.assert_allclose(qd.convert_from_qint8(add(xl, xl).numpy()),
                               np.round(xl.astype("float32").numpy() * 2 / 0.1) * 0.1, atol=1e-6)
    cat = QM.Concat(dtype=qd.qint8(0.1))
    cat.eval()
    assert cat([xl, xl], 1).shape == (2, 8)
    nodt = QM.QuantStub()
    nodt.eval()
    with pytest.raises(ValueError, match="no output dtype"):
        nodt(mge.Tensor([0.3]))
    with pytest.raises(TypeError, match="quantized dtype"):
        QM.Concat(dtype="float32")


def test_astype_to_a_low_bit_quantized_dtype_saturates_to_its_range():
    # MegEngine 1.13 (checked with its wheel): the MegBrain dtype's range, not the int8 / uint8 storage's
    from megxla.core.tensor import dtype as D
    x = mge.Tensor(np.array([-3.0, -0.3, 0.0, 0.3, 1.0, 9.0], np.float32))
    assert x.astype(D.quint4(0.1, 5)).numpy().tolist() == [0, 2, 5, 8, 15, 15]
    assert x.astype(D.qint4(0.1)).numpy().tolist() == [-8, -3, 0, 3, 7, 7]
    assert x.astype(D.qint1(0.1)).numpy().tolist() == [0, 0, 0, 1, 1, 1]
    np.testing.assert_allclose(x.astype(D.qint4(0.1)).astype("float32").numpy(), [-0.8, -0.3, 0, 0.3, 0.7, 0.7],
                               rtol=1e-6)
    assert x.astype(D.qint8(0.01)).numpy().tolist() == [-128, -30, 0, 30, 100, 127]


def test_quantized_dtype_zero_point_is_checked_as_megengine():
    from megxla.core.tensor import dtype as D
    for bad in [(0.05, 0.233), (0.02, 777), (0.02, -1)]:
        with pytest.raises(ValueError):
            D.quint8(*bad)
    with pytest.raises(ValueError):
        D.quint4(0.02, 18)
    with pytest.raises(ValueError):
        D.create_quantized_dtype("qint8", 0.1, 3)  # a symmetric type takes no zero point
    assert D.get_zero_point(D.quint4(0.01, 8)) == 8
    q = D.convert_to_qint1(np.array([-1.0, 0.2, 0.3]), D.qint1(0.25))
    assert q.dtype == np.int8 and q.tolist() == [0, 1, 1]
    assert not D._builtin_quant_dtypes["qint1"].is_unsigned  # (MegEngine: from the storage type's name)
