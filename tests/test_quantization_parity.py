"""Quantization-aware training and conversion give MegEngine 1.13's numbers. The literal values below were printed
by MegEngine 1.13.0 (CPU) running the same program (weights drawn from the same NumPy seed)."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
import megxla.quantization as Q
from megxla.autodiff import GradManager


def _grad(fn, x):
    x = mge.Tensor(x)
    gm = GradManager().attach([x])
    with gm:
        gm.backward(fn(x).sum())
    return x.grad.numpy()


_TIES = np.array([[[[1., 1., 0., 2.], [1., 0., 2., 2.], [3, 3, 1, 1], [3, 3, 1, 1]]]], "float32")


@pytest.mark.parametrize("fn, expect", [
    (lambda x: F.max_pool2d(x, 2),
     [[1, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]),
    (lambda x: F.max_pool2d(x, 3, 1, 1),
     [[1, 1, 0, 3], [1, 0, 5, 4], [6, 9, 1, 1], [4, 6, 1, 1]]),
    (lambda x: F.adaptive_max_pool2d(x, (2, 2)),
     [[1, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]),
], ids=["2x2", "3x3_pad", "adaptive"])
def test_max_pool_gradient_reaches_every_tied_maximum(fn, expect):
    # MegEngine's pooling backward; XLA's select-and-scatter would give the whole gradient to one of the ties
    # (after a ReLU, or on the integer grid of quantization-aware training, ties are the rule)
    np.testing.assert_array_equal(_grad(fn, _TIES).reshape(4, 4), np.asarray(expect, "float32"))


def test_max_pool_gradient_without_ties_is_unchanged():
    x = np.random.RandomState(0).randn(2, 3, 9, 9).astype("float32")
    g = _grad(lambda t: F.max_pool2d(t, 3, 2, 1), x)
    # each output's gradient lands on exactly one input (its window's maximum)
    assert g.sum() == 2 * 3 * 5 * 5 and set(np.unique(g)) <= {0.0, 1.0, 2.0, 3.0, 4.0}


def _pool_grad_reference(x, g, k, s, p):
    """MegEngine's rule written out: each window's gradient to every input equal to the window's maximum."""
    xp = np.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])], constant_values=-np.inf)
    out = np.zeros_like(xp)
    for n, c, i, j in np.ndindex(*g.shape):
        w = xp[n, c, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]]
        out[n, c, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]] += g[n, c, i, j] * (w == w.max())
    return out[:, :, p[0]:p[0] + x.shape[2], p[1]:p[1] + x.shape[3]]


@pytest.mark.parametrize("k, s, p", [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)), ((3, 2), (1, 3), (1, 0)),
                                     ((5, 5), (1, 1), (2, 2)), ((13, 13), (1, 1), (6, 6)), ((4, 3), (3, 2), (2, 1))])
def test_max_pool_gradient_with_ties_for_any_window(k, s, p):
    # (computed one axis after the other -- YOLOX's SPP pools by 13 x 13 -- which must give the window's rule)
    r = np.random.RandomState(sum(k) + sum(s))
    x = r.randint(0, 3, (2, 2, 17, 15)).astype("float32")
    t = mge.Tensor(x)
    gm = GradManager().attach([t])
    with gm:
        y = F.max_pool2d(t, k, s, p)
        g = r.randint(1, 5, y.shape).astype("float32")
        gm.backward(y, mge.Tensor(g))
    np.testing.assert_array_equal(t.grad.numpy(), _pool_grad_reference(x, g, k, s, p))


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.conv = M.ConvBnRelu2d(3, 4, 3, padding=1)
        self.pool = M.MaxPool2d(2)
        self.fc = M.Linear(4 * 4 * 4, 5)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.pool(self.conv(self.quant(x)))
        return self.dequant(self.fc(F.flatten(x, 1)))


def _setup():
    net = _Net()
    r = np.random.RandomState(0)
    sd = {k: (r.randn(*v.shape) * 0.3).astype("float32") for k, v in net.state_dict().items()}
    for k in sd:
        if "running_var" in k:
            sd[k] = np.abs(sd[k]) + 0.5
    xs = [r.randn(2, 3, 8, 8).astype("float32") for _ in range(4)]
    return sd, xs


# MegEngine 1.13.0: losses of three SGD steps, then the first outputs of the evaluation-mode QAT network and of
# the quantized (int8) network
_ME = {
    "ema": ([1.9278843402862549, 1.4726777076721191, 1.0636084079742432],
            [-0.27635055780410767, 0.4974310100078583, -1.3449060916900635, -1.197519063949585, -0.6079712510108948]),
    "minmax": ([1.9278843402862549, 1.460705280303955, 1.061147928237915],
               [-0.29009097814559937, 0.5028243660926819, -1.3537579774856567, -1.1797033548355103,
                -0.5995213985443115]),
    "tqt": ([2.200000047683716, 1809.1380615234375, 12403.9638671875], [0.0, 0.0, 0.0, 0.0, 0.0]),
}
_QCONFIGS = {"ema": Q.ema_fakequant_qconfig, "minmax": Q.min_max_fakequant_qconfig, "tqt": Q.tqt_qconfig}


@pytest.mark.parametrize("name", sorted(_ME))
def test_qat_training_and_quantized_inference_give_megengine_numbers(name):
    sd, xs = _setup()
    net = _Net()
    net.load_state_dict(sd)
    Q.quantize_qat(net, qconfig=_QCONFIGS[name])
    opt = optim.SGD(net.parameters(), lr=0.01)
    gm = GradManager().attach(net.parameters())
    net.train()
    losses = []
    for x in xs[:3]:
        with gm:
            loss = (net(mge.Tensor(x)) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(float(loss))
    want_losses, want_eval = _ME[name]
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4)
    net.eval()
    qat_out = net(mge.Tensor(xs[3])).numpy()
    np.testing.assert_allclose(qat_out.ravel()[:5], want_eval, rtol=1e-4, atol=1e-5)
    Q.quantize(net)
    net.eval()
    np.testing.assert_allclose(net(mge.Tensor(xs[3])).numpy(), qat_out, rtol=1e-4, atol=1e-5)
    # converted as MegEngine: the conv bias in its (1, C, 1, 1) layout, int8 weights
    assert net.conv.bias.shape == (1, 4, 1, 1) and net.fc.bias.shape == (5,)


def test_qparams_of_a_qat_activation_stay_on_the_fake_quantizers_output():
    # MegEngine keeps ``qparams`` on the tensor object the fake quantizer returned: pooled or flattened, the
    # activation has none, so the next layer's bias is not fake-quantized
    q = M.Sequential(M.QuantStub())
    Q.quantize_qat(q, qconfig=Q.tqt_qconfig)
    y = q(mge.Tensor(np.ones((1, 1, 4, 4), "float32")))
    assert y.qparams.scale is not None
    assert F.max_pool2d(y, 2).qparams.scale is None and F.flatten(y, 1).qparams.scale is None


def test_converted_weights_saturate_to_int8_as_megengine():
    # a narrow range (qint8_narrow) is the fake quantizer's clip in training; a plain Linear's weight is
    # converted by a saturating cast (-128 possible), a BN-folded conv's weight is fake-quantized first (-127)
    lin = M.Sequential(M.QuantStub(), M.Linear(4, 2, bias=False), M.DequantStub())
    Q.quantize_qat(lin, qconfig=Q.tqt_qconfig)  # TQT scale 2**0 = 1: weights of +-200 saturate
    lin[1].weight[...] = mge.Tensor(np.array([[-200., 3.4, 0.6, 200.], [-1., 1., 127.6, -127.6]], "float32"))
    lin.eval()
    Q.quantize(lin)
    np.testing.assert_array_equal(lin[1].weight.numpy(), [[-128, 3, 1, 127], [-1, 1, 127, -128]])


def test_astype_to_and_from_a_quantized_dtype_goes_through_the_real_value():
    from megxla.core.tensor import dtype
    x = mge.Tensor(np.array([0.5, -1.3, 2.0, 100.0], "float32"))
    q = x.astype(dtype.qint8(0.1))
    # MegEngine 1.13.0's values: quantize (round, saturate), dequantize on the way out (int32 truncates it)
    np.testing.assert_array_equal(q.numpy(), np.array([5, -13, 20, 127], "int8"))
    assert dtype.get_scale(q.dtype) == pytest.approx(0.1)
    np.testing.assert_array_equal(q.astype("int32").numpy(), [0, -1, 2, 12])
    np.testing.assert_allclose(q.astype("float32").numpy(), [0.5, -1.3, 2.0, 12.7], rtol=1e-6)
    q2 = q.astype(dtype.quint8(0.05, 128))  # requantized through the real value
    np.testing.assert_array_equal(q2.numpy(), np.array([138, 102, 168, 255], "uint8"))
    assert (dtype.get_scale(q2.dtype), dtype.get_zero_point(q2.dtype)) == (pytest.approx(0.05), 128)
    # shape ops and indexing keep the quantized dtype
    for view in (q.reshape(2, 2), q[1:], F.expand_dims(q, 0), F.transpose(q.reshape(2, 2), (1, 0))):
        assert dtype.get_scale(view.dtype) == pytest.approx(0.1)


@pytest.mark.parametrize("padding_mode", ["reflect", "replicate"])
def test_quantized_conv_pads_like_the_float_conv(padding_mode):
    import megxla.module.qat as QAT
    import megxla.module.quantized as QM
    from megxla.core.tensor import dtype
    conv = QAT.Conv2d(2, 3, 3, padding=1, padding_mode=padding_mode)
    conv.eval()
    Q.propagate_qconfig(conv, Q.min_max_fakequant_qconfig)
    Q.disable_observer(conv)
    conv.weight_observer.min_val[...] = mge.Tensor(-1.0)
    conv.weight_observer.max_val[...] = mge.Tensor(1.0)
    conv.act_observer.min_val[...] = mge.Tensor(-8.0)
    conv.act_observer.max_val[...] = mge.Tensor(8.0)
    x = mge.Tensor(np.random.RandomState(0).randn(1, 2, 5, 5).astype("float32"))
    xq = x.astype(dtype.qint8(0.05))
    x.qparams.update(xq.qparams)
    expect = conv(xq.astype("float32"))
    qconv = QM.Conv2d.from_qat_module(conv)
    qconv.eval()
    out = qconv(xq)
    np.testing.assert_allclose(out.astype("float32").numpy(), expect.numpy(), atol=float(dtype.get_scale(out.dtype)))


def test_quantized_conv_repr_is_megengines():
    net = M.Sequential(M.ConvBnRelu2d(3, 3, 3), M.Linear(3, 3))
    Q.quantize_qat(net)
    Q.quantize(net)
    assert repr(net[0]) == "Quantized.ConvBnRelu2d(3, 3, kernel_size=(3, 3))"
    assert repr(net[1]) == "Quantized.Linear()"


def _q(values, scale):
    from megxla.core.tensor import dtype
    return mge.tensor(np.array(values, "float32")).astype(dtype.qint8(scale))


@pytest.mark.parametrize("fn", [lambda x: x * 2, lambda x: x * x, F.abs, lambda x: x < 1, F.exp, lambda x: x / 2,
                                lambda x: x ** 2, F.sqrt, F.floor, F.sigmoid, lambda x: F.dot(x, x)])
def test_ops_without_a_quantized_kernel_raise_and_leave_the_tensor(fn):
    # MegEngine refuses these on a qint8 tensor; computing on the raw integers would be off by the scale
    x = _q([-1.0, 0.5, 2.0], 0.1)
    with pytest.raises(mge.core._dispatch.OpError, match=r"qint8\(0\.1"):
        fn(x)
    np.testing.assert_array_equal(x.numpy(), [-10, 5, 20])


def test_quantized_ops_megengine_computes_keep_working():
    x = _q([-1.0, 0.5, 2.0], 0.1)
    np.testing.assert_array_equal((x + x).numpy(), [-20, 10, 40])
    np.testing.assert_array_equal((-x).numpy(), [10, -5, -20])
    np.testing.assert_array_equal(F.relu(x).numpy(), [0, 5, 20])
    np.testing.assert_array_equal(F.maximum(x, x).numpy(), [-10, 5, 20])


def test_quantized_matmul_is_qint32_with_the_product_scale():
    # MegEngine 1.13: qint8(0.1) [[-1, .5, 2]] @ qint8(0.2) [[1], [.5], [2]] -> QuantizedS32 scale 0.02, [[165]]
    x = _q([[-1.0, 0.5, 2.0]], 0.1)
    y = _q([[1.0], [0.5], [2.0]], 0.2)
    for out in (F.matmul(x, y), x @ y, F.nn.linear(x, y.reshape(1, 3))):
        assert out.dtype.metadata["mgb_dtype"]["name"] == "QuantizedS32"
        np.testing.assert_allclose(out.dtype.metadata["mgb_dtype"]["scale"], 0.02, rtol=1e-6)
        np.testing.assert_array_equal(out.numpy(), [[165]])
        np.testing.assert_allclose(out.astype("float32").numpy(), [[3.3]], rtol=1e-6)
    with pytest.raises(mge.core._dispatch.OpError, match="quantized and the other is not"):
        F.matmul(x, y.astype("float32"))


def test_fills_detach_and_gather_keep_the_quantized_dtype():
    # MegEngine 1.13 keeps qint8(0.1) through zeros_like/detach (and fills ones_like/full_like with 0, a bug we
    # do not copy: the fill value is quantized instead)
    x = _q([-1.0, 0.5, 2.0], 0.1)
    for out, raw in ((F.zeros_like(x), [0, 0, 0]), (F.ones_like(x), [10, 10, 10]), (F.full_like(x, 3), [30] * 3),
                     (x.detach(), [-10, 5, 20]), (F.gather(x, 0, mge.tensor([0, 2])), [-10, 20])):
        assert out.dtype.metadata["mgb_dtype"]["name"] == "QuantizedS8"
        np.testing.assert_allclose(out.dtype.metadata["mgb_dtype"]["scale"], 0.1, rtol=1e-6)
        np.testing.assert_array_equal(out.numpy(), raw)


def test_fake_quant_gradient_is_zero_on_the_observers_tie_in_a_vector():
    # MegEngine 1.13.0: scale = max / 127.5 puts the maximum exactly on 127.5, which rounds to 128 (outside
    # qint8), so its straight-through gradient is 0. XLA's x * (1 / s) gives 127.49999 for a vector.
    z = np.array([-0.5103587508201599, 0.10674557089805603, 0.7319696545600891, 1.876662015914917], "float32")
    s = np.float32(z[3]) / np.float32(127.5)
    q = Q.create_qparams(Q.QuantMode.SYMMERTIC, "qint8", mge.Tensor(s))
    g = _grad(lambda x: Q.fake_quant_tensor(x, q), z)
    np.testing.assert_array_equal(g, [1.0, 1.0, 1.0, 0.0])
    y = Q.fake_quant_tensor(mge.Tensor(z), q).numpy()
    np.testing.assert_allclose(y[3], 1.8693026, rtol=1e-6)


def test_histogram_observer_observes_in_evaluation_mode_and_when_disabled():
    # MegEngine's calibration observer has no ``enabled`` check (calibration runs the network in eval mode)
    o = Q.HistogramObserver(bins=64)
    o.eval()
    o(mge.Tensor(np.array([-1.0, 0.5, 2.0, 3.0], "float32")))
    assert (float(o.min_val), float(o.max_val), float(o.histogram.sum())) == (-1.0, 3.0, 4.0)
    np.testing.assert_allclose(o.get_qparams().scale.numpy(), 0.02303922, rtol=1e-6)
    o.disable()
    o(mge.Tensor(np.array([-4.0, 4.0], "float32")))
    assert (float(o.min_val), float(o.max_val), float(o.histogram.sum())) == (-4.0, 4.0, 6.0)
    np.testing.assert_allclose(o.get_qparams().scale.numpy(), 0.03137255, rtol=1e-6)


def test_qat_network_with_grouped_conv_bn_elemwise_concat_trains_as_megengine():
    # MegEngine 1.13.0, min_max_fakequant_qconfig: the loss of two SGD steps (momentum 0.9) of a network with
    # ConvBnRelu2d, grouped ConvBn2d, ConvRelu2d, Elemwise FUSE_ADD_RELU, Concat, LinearRelu, Linear
    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.quant = M.QuantStub()
            self.cbr = M.ConvBnRelu2d(3, 4, 3, padding=1)
            self.cb = M.ConvBn2d(4, 4, 3, padding=1, groups=2)
            self.c = M.ConvRelu2d(4, 4, 1)
            self.add = M.Elemwise("FUSE_ADD_RELU")
            self.cat = M.Concat()
            self.lin = M.LinearRelu(8 * 2 * 2, 6)
            self.lin2 = M.Linear(6, 3)
            self.dequant = M.DequantStub()

        def forward(self, x):
            a = self.cbr(self.quant(x))
            b = self.cb(a)
            z = self.cat([self.add(a, self.c(b)), b], axis=1)
            return self.dequant(self.lin2(self.lin(F.flatten(F.avg_pool2d(z, 2), 1))))

    r = np.random.RandomState(1)
    net = Net()
    sd = {}
    for k, v in net.state_dict().items():
        a = (r.randn(*v.shape) * 0.3).astype(v.dtype) if v.dtype == np.float32 else v.numpy()
        sd[k] = np.abs(a) + 0.5 if "var" in k else a
    net.load_state_dict(sd)
    xs = [r.randn(3, 3, 4, 4).astype("float32") for _ in range(3)]
    Q.quantize_qat(net, qconfig=Q.min_max_fakequant_qconfig)
    opt = optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    gm = GradManager().attach(net.parameters())
    losses = []
    for x in xs:
        with gm:
            loss = (net(mge.Tensor(x)) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(float(loss))
    np.testing.assert_allclose(losses, [0.18048609793186188, 0.16395007073879242, 0.22031347453594208], rtol=1e-5)


def test_a_tensor_made_with_a_quantized_dtype_is_quantized():
    # MegEngine 1.13.0: the scale lives in the dtype, given or carried by the NumPy array (convert_to_qint8);
    # Tensor(floats, dtype=qint8) casts without quantizing, astype("float32") dequantizes, matmul is qint32
    from megxla.core.tensor import dtype
    z = mge.tensor(dtype.convert_to_qint8(np.array([0.1, 0.25, -2.0]), dtype.qint8(0.05)))
    np.testing.assert_array_equal(z.numpy(), [2, 5, -40])
    np.testing.assert_allclose(z.astype("float32").numpy(), [0.1, 0.25, -2.0], rtol=1e-6)
    u = mge.tensor(np.array([1.0, 2.0]), dtype=dtype.quint8(0.5, 10))
    np.testing.assert_array_equal(u.numpy(), [1, 2])
    np.testing.assert_allclose(u.astype("float32").numpy(), [-4.5, -4.0])
    w = mge.Parameter(dtype.convert_to_qint8(np.ones((5, 12)), dtype.qint8(0.7)))
    x = mge.tensor(dtype.convert_to_qint8(np.ones((3, 12)), dtype.qint8(0.3)))
    res = F.matmul(x, w, transpose_b=True)
    assert res.dtype.metadata["mgb_dtype"]["name"] == "QuantizedS32"
    np.testing.assert_allclose(dtype.get_scale(res.dtype), 0.21, rtol=1e-6)
    np.testing.assert_array_equal(res.numpy()[0], [12 * 3 * 1] * 5)


def test_quantized_functional_convolutions_give_megengines_integers():
    # MegEngine 1.13.0 (F.quantized): shape, sum of |int| and the first integers of each output
    from megxla.core.tensor import dtype
    r = np.random.RandomState(0)
    si, sw, so = np.float32(0.05), np.float32(0.02), np.float32(0.03)
    x = mge.tensor(dtype.convert_to_qint8(r.uniform(-1, 1, (2, 4, 5, 5)), dtype.qint8(si)))
    w = mge.Parameter(dtype.convert_to_qint8(r.uniform(-1, 1, (6, 4, 3, 3)), dtype.qint8(sw)))
    b = mge.Parameter(dtype.convert_to_qint32(r.uniform(-1, 1, (1, 6, 1, 1)), dtype.qint32(si * sw)))
    wg = mge.Parameter(dtype.convert_to_qint8(r.uniform(-1, 1, (2, 3, 2, 3, 3)), dtype.qint8(sw)))
    wb = mge.Parameter(dtype.convert_to_qint8(r.uniform(-1, 1, (2, 6, 4, 3, 3)), dtype.qint8(sw)))
    wt = mge.Parameter(dtype.convert_to_qint8(r.uniform(-1, 1, (4, 3, 3, 3)), dtype.qint8(sw)))
    Qf, o8 = F.quantized, dtype.qint8(so)
    outs = [Qf.conv_bias_activation(x, w, b, dtype=o8, padding=1),
            Qf.conv_bias_activation(x, w, b, dtype=o8, padding=1, nonlinear_mode="relu"),
            Qf.conv_bias_activation(x, w, b, dtype=o8, padding=1, nonlinear_mode="h_swish"),
            Qf.conv_bias_activation(x, w, b, dtype=o8, stride=2, dilation=1),
            Qf.conv_bias_activation(x, w, b, dtype=o8, dilation=2, padding=2),
            Qf.conv_bias_activation(x, w, b, dtype=o8, conv_mode="convolution"),
            Qf.conv_bias_activation(x, w, b),
            Qf.conv_bias_activation(x, wg, b, dtype=o8, groups=2, padding=1),
            Qf.batch_conv_bias_activation(x, wb, b, dtype=o8, padding=1),
            Qf.conv_transpose2d(x, wt, dtype=o8, stride=2, padding=1)]
    want = [((2, 6, 5, 5), 15934, [-21, 15, -74, 60]), ((2, 6, 5, 5), 8348, [0, 15, 0, 60]),
            ((2, 6, 5, 5), 8345, [-8, 8, -10, 48]), ((2, 6, 2, 2), 2901, [-96, -81, -22, -50]),
            ((2, 6, 5, 5), 14061, [-44, -81, 14, -39]), ((2, 6, 3, 3), 6185, [-29, 1, -76, 34]),
            ((2, 6, 3, 3), 199570, [-2872, -405, -2415, -1535]), ((2, 6, 5, 5), 12033, [-50, -1, -66, -2]),
            ((2, 6, 5, 5), 15208, [-33, -48, -5, -81]), ((2, 3, 9, 9), 12470, [-24, 10, -10, -14])]
    got = [(tuple(o.shape), int(np.abs(o.numpy().astype("int64")).sum()), o.numpy().ravel()[:4].tolist())
           for o in outs]
    assert got == want
    assert dtype.get_scale(outs[0].dtype) == pytest.approx(so) and outs[0].numpy().dtype == np.int8
    # dtype=None: the qint32 accumulator, scale = scale(x) * scale(w)
    assert dtype.get_scale(outs[6].dtype) == pytest.approx(0.001) and outs[6].numpy().dtype == np.int32
    with pytest.raises(mge.core._dispatch.OpError, match="inp must be a quantized tensor"):
        Qf.conv_bias_activation(x.astype("float32"), w, b, dtype=o8)


def test_quantized_average_pooling_rounds_the_integer_mean_as_megengine():
    # MegEngine 1.13.0: a window of integers summing to 38 averages to 9.5 -> 10 (half away from zero), whatever
    # the scale (through the real values, 38 * s / 4 / s is 9.4999 for this s)
    from megxla.core.tensor import dtype
    s = np.float32(0.015165437012910843)
    v = np.array([[0, 20, 0, -20, 10, 0, -10, 0], [0, 18, 0, -18, 7, 13, -7, -13]], "int8").reshape(1, 1, 2, 8)
    x = mge.tensor(dtype.convert_to_qint8(v.astype("float32") * s, dtype.qint8(s)))
    np.testing.assert_array_equal(x.numpy(), v)
    for out in (F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, (1, 4))):
        np.testing.assert_array_equal(out.numpy().ravel(), [10, -10, 8, -8])
        assert dtype.get_scale(out.dtype) == pytest.approx(s)


def test_qat_and_quantized_modules_at_megengines_import_paths():
    # MegEngine's own tests import e.g. megengine.module.quantized.conv.ConvTranspose2d
    import importlib
    for pkg in ("qat", "quantized"):
        for mod, name in (("conv", "ConvTranspose2d"), ("conv_bn", "ConvBnRelu2d"), ("linear", "LinearRelu"),
                          ("linear_bn", "LinearBn1d"), ("conv_transpose_bn", "ConvTransposeBn2d"),
                          ("elemwise", "Elemwise"), ("concat", "Concat"), ("quant_dequant", "DequantStub"),
                          ("batch_matmul_activation", "BatchMatMulActivation")):
            m = importlib.import_module(f"megxla.module.{pkg}.{mod}")
            assert getattr(m, name) is getattr(importlib.import_module(f"megxla.module.{pkg}"), name)


def test_quantization_api_as_megengines():
    # (a probe of both frameworks' quantization API) quantize()'s weights and biases are Parameters; observers and
    # fake quantizers drop keywords they do not take; a histogram observer that saw nothing raises ValueError
    from functools import partial
    net = M.Sequential(M.QuantStub(), M.Linear(3, 2), M.DequantStub())
    qat = Q.quantize_qat(net)
    qat(mge.Tensor(np.random.RandomState(0).rand(4, 3).astype("float32")))
    q = Q.quantize(qat)
    assert type(q[1].weight).__name__ == type(q[1].bias).__name__ == "Parameter"
    assert sorted(n for n, _ in q.named_parameters()) == ["1.bias", "1.weight"]
    for make in (partial(Q.MinMaxObserver, dtype="qint8", reduce_range=True), partial(Q.FakeQuantize, "qint8", foo=1),
                 partial(Q.TQT, "qint8", foo=1), partial(Q.ExponentialMovingAverageObserver, dtype="qint8", foo=1)):
        make()
    with pytest.raises(ValueError, match="seen no data"):
        Q.HistogramObserver(dtype="qint8").get_qparams()


def test_quantized_concat_takes_megengines_keywords():
    # MegEngine's quantized Concat.forward(inps, axis=0): a keyword ``inps`` was passed through undequantized
    from megxla.core.tensor import dtype
    from megxla.module import quantized
    a = quantized.quantize_tensor(mge.Tensor([1.0]), "qint8", 0.5)
    b = quantized.quantize_tensor(mge.Tensor([0.3]), "qint8", 0.1)
    cat = quantized.Concat(dtype.qint8(0.1))
    cat.eval()
    assert cat(inps=[a, b], axis=0).numpy().tolist() == [10, 3]
