"""The QAT and quantized modules and the conversion functions as MegEngine 1.13's (differential probes, s80).

Every expected value, name and message below was printed by MegEngine 1.13.0 (CPU) running the same code; MegEngine
is not needed here.
"""
import logging

import numpy as np
import pytest

import megxla as mge
import megxla.module as M
import megxla.module.qat as QAT
import megxla.module.quantized as Q
import megxla.quantization as qz
from megxla.core.tensor import dtype as D


def _linear_bn_relu_net():
    rng = np.random.RandomState(3)
    w = rng.uniform(-1, 1, (3, 4)).astype("float32")
    b = rng.uniform(-1, 1, (3,)).astype("float32")
    xs = rng.rand(4, 4).astype("float32"), (rng.rand(4, 4) * 3).astype("float32")
    net = M.Sequential(M.QuantStub(), M.LinearBnRelu1d(4, 3), M.DequantStub())
    net[1].linear.weight[...] = mge.tensor(w)
    net[1].linear.bias[...] = mge.tensor(b)
    return net, xs


def test_quantize_in_training_mode_folds_through_the_weight_observer():
    # MegEngine's quantize() converts in the modules' modes: a BN-fused layer in training folds its weight with the
    # running statistics through its weight observer, which takes that weight's range in. megxla evaluated the
    # model first, so its weight scale came from the last training step's fold (0.0078 where MegEngine has 0.0082)
    net, (x1, x2) = _linear_bn_relu_net()
    qz.quantize_qat(net)
    net(mge.tensor(x1))
    net(mge.tensor(x2))
    ob = net[1].weight_observer
    np.testing.assert_allclose([ob.min_val.numpy(), ob.max_val.numpy()], [-0.99054104, 0.8310486], rtol=1e-6)
    qz.quantize(net)
    # MegEngine: after -1.0371597 0.87195665, weight scale 0.00816661212593317
    np.testing.assert_allclose([ob.min_val.numpy(), ob.max_val.numpy()], [-1.0371597, 0.87195665], rtol=1e-6)
    assert np.isclose(D.get_scale(net[1].weight.dtype), 0.00816661212593317, rtol=1e-6)
    np.testing.assert_array_equal(net[1].weight.numpy(), [[14, 57, -57, 3], [106, 107, -101, -79],
                                                          [-121, -16, -127, -12]])
    out = net(mge.tensor(x1)).numpy()
    np.testing.assert_allclose(out[:, 0], [0.10122643, 0.13496858, 0.1799581, 0.06748429], rtol=1e-5)
    assert not net.training  # (megxla's documented difference: the converted model is in evaluation mode)


def test_quantize_in_eval_mode_keeps_the_observed_range():
    # MegEngine: net.eval() switches the observers off, so the fold at conversion leaves them as they were
    net, (x1, x2) = _linear_bn_relu_net()
    qz.quantize_qat(net)
    net(mge.tensor(x1))
    net(mge.tensor(x2))
    net.eval()
    ob = net[1].weight_observer
    qz.quantize(net)
    np.testing.assert_allclose([ob.min_val.numpy(), ob.max_val.numpy()], [-0.99054104, 0.8310486], rtol=1e-6)


def test_failed_quantize_puts_the_observed_ranges_back():
    net, (x1, _) = _linear_bn_relu_net()
    # a layer whose conversion fails, after the BN fold
    net = M.Sequential(net[0], net[1], net[2], M.Linear(3, 3))
    qz.quantize_qat(net)

    class Failing(Q.Linear):
        @classmethod
        def from_qat_module(cls, qat_module):
            raise ValueError("no")

    net[:3](mge.tensor(x1))
    ob = net[1].weight_observer
    before = ob.min_val.numpy().copy(), ob.max_val.numpy().copy()
    net[1].bn.running_var[...] = net[1].bn.running_var * 0.01  # a fold far outside the observed range
    with pytest.raises(ValueError, match="no"):
        qz.quantize(net, mapping={QAT.Linear: Failing})
    np.testing.assert_array_equal([ob.min_val.numpy(), ob.max_val.numpy()], before)
    assert type(net[1]) is QAT.LinearBnRelu1d


@pytest.mark.parametrize("make, shape", [(lambda: M.Conv2d(4, 4, 3, padding=1, groups=2, bias=False), (1, 4, 5, 5)),
                                         (lambda: M.BatchMatMulActivation(2, 4, 3, bias=False), (2, 4, 3))])
def test_quantized_layer_of_a_biasless_qat_layer_holds_a_zero_bias_parameter(make, shape):
    # MegEngine: params [('bias', (1, 4, 1, 1), 'float32'), ('weight', (2, 2, 2, 3, 3), 'int8')], buffers [];
    # megxla held the zero bias as a plain Tensor (a buffer; parameters() left it out)
    net = M.Sequential(M.QuantStub(), make(), M.DequantStub())
    qz.quantize_qat(net)
    net(mge.tensor(np.random.RandomState(0).rand(*shape).astype("float32")))
    qz.quantize(net)
    params = dict(net[1].named_parameters())
    assert sorted(params) == ["bias", "weight"]
    assert isinstance(params["bias"], mge.Parameter)
    assert not np.any(params["bias"].numpy())
    assert "bias" not in dict(net[1].named_buffers())


def test_conversion_methods_take_megengine_keyword_names():
    # MegEngine's signatures: from_float_module(float_module), from_qat_module(qat_module)
    q = QAT.Linear.from_float_module(float_module=M.Linear(2, 3))
    assert type(q) is QAT.Linear
    q.set_qconfig(qz.min_max_fakequant_qconfig)
    q(mge.tensor(np.ones((1, 2), "float32")))
    assert type(Q.Linear.from_qat_module(qat_module=q)) is Q.Linear
    qc = QAT.ConvBn2d.from_float_module(float_module=M.ConvBn2d(2, 2, 1))
    qc.set_qconfig(qz.min_max_fakequant_qconfig)
    qc(mge.tensor(np.ones((2, 2, 2, 2), "float32")))
    assert type(Q.ConvBn2d.from_qat_module(qat_module=qc)) is Q.ConvBn2d


def test_base_classes_are_abstract_in_their_conversion_method():
    # MegEngine: "Can't instantiate abstract class QATModule with abstract methods forward, from_float_module"
    with pytest.raises(TypeError, match="from_float_module"):
        QAT.QATModule()
    with pytest.raises(TypeError, match="from_qat_module"):
        Q.QuantizedModule()

    class NoConversion(QAT.QATModule):
        def forward(self, x):
            return x

    with pytest.raises(TypeError, match="from_float_module"):
        NoConversion()


def _conv_bn():
    rng = np.random.RandomState(4)
    m = M.ConvBn2d(2, 4, 3, groups=2, bias=True)
    for _, p in sorted(m.named_parameters()):
        p[...] = mge.tensor(rng.uniform(-1, 1, p.shape).astype("float32"))
    m.bn.running_mean[...] = mge.tensor(rng.uniform(-1, 1, (1, 4, 1, 1)).astype("float32"))
    m.bn.running_var[...] = mge.tensor(rng.uniform(0.5, 2, (1, 4, 1, 1)).astype("float32"))
    q = QAT.ConvBn2d.from_float_module(m)
    q.set_qconfig(qz.min_max_fakequant_qconfig)
    return q, rng


def test_fused_qat_modules_have_megengines_fold_methods():
    q, rng = _conv_bn()
    w, b = q.fold_weight_bias(q.bn.running_mean, q.bn.running_var)
    # MegEngine: fold w (2, 2, 1, 3, 3) [0.2351481 0.31744996 -0.217512 ...] b (1, 4, 1, 1) [...]
    assert w.shape == (2, 2, 1, 3, 3) and b.shape == (1, 4, 1, 1)
    np.testing.assert_allclose(w.numpy().ravel()[:6], [0.2351481, 0.31744996, -0.217512, 0.06466573, -0.32332864,
                                                       -0.07642314], rtol=1e-5)
    np.testing.assert_allclose(b.numpy().ravel(), [0.7362911, 0.33783978, 0.74724495, 0.8005104], rtol=1e-6)
    # the fold passed the weight observer (MegEngine: observer -0.66850996 0.74659526)
    np.testing.assert_allclose([q.weight_observer.min_val.numpy(), q.weight_observer.max_val.numpy()],
                               [-0.66850996, 0.74659526], rtol=1e-6)
    _, b0 = q.fold_weight_bias(None, None)
    np.testing.assert_allclose(b0.numpy().ravel(), [0.7386906, 0.16851759, 1.4776177, 1.0267248], rtol=1e-6)
    rng.rand(2, 2, 5, 5)  # (the probe's draw order)
    mean, var = q.get_batch_mean_var(mge.tensor(rng.rand(2, 4, 3, 3).astype("float32")))
    assert mean.shape == (1, 4, 1, 1)
    np.testing.assert_allclose(mean.numpy().ravel(), [0.5425905, 0.50557667, 0.43946826, 0.71865356], rtol=1e-6)
    np.testing.assert_allclose(var.numpy().ravel(), [0.07330164, 0.09787062, 0.09883613, 0.03894854], rtol=1e-5)
    q.update_running_mean_and_running_var(mge.tensor(np.array([0.5, 1.0, -1., 2.], "float32").reshape(1, 4, 1, 1)),
                                          mge.tensor(np.full((1, 4, 1, 1), 3.0, "float32")), 10)
    np.testing.assert_allclose(q.bn.running_mean.numpy().ravel(), [0.14853355, 0.3248755, 0.61190206, -0.04686354],
                               rtol=1e-6)
    np.testing.assert_allclose(q.bn.running_var.numpy().ravel(), [1.6440355, 1.041786, 1.4553554, 1.0296346],
                               rtol=1e-6)


def test_fused_qat_exact_folding_uses_and_updates_batch_statistics():
    # the probe's input: the draw after the parameters and statistics of _conv_bn
    q2, rng2 = _conv_bn()
    q2.fold_weight_bias(q2.bn.running_mean, q2.bn.running_var)  # (the weight observer saw these two folds)
    q2.fold_weight_bias(None, None)
    x = mge.tensor(rng2.rand(2, 2, 5, 5).astype("float32"))
    q2.get_batch_mean_var(mge.tensor(rng2.rand(2, 4, 3, 3).astype("float32")))
    q2.update_running_mean_and_running_var(mge.tensor(np.array([0.5, 1.0, -1., 2.], "float32").reshape(1, 4, 1, 1)),
                                           mge.tensor(np.full((1, 4, 1, 1), 3.0, "float32")), 10)
    y = q2.calc_conv_bn_qat(x, approx=False)
    # MegEngine: exact (2, 4, 3, 3) [0.7476896 1.4155152 0.3722663 0.8113847 0.78409183 0.8779584] and the running
    # statistics [0.07197522 0.31262597 0.59652495 -0.11681742] [1.5140817 0.9643823 1.322567 0.9385659]
    assert y.shape == (2, 4, 3, 3)
    np.testing.assert_allclose(y.numpy().ravel()[:6], [0.7476896, 1.4155152, 0.3722663, 0.8113847, 0.78409183,
                                                       0.8779584], rtol=1e-5)
    np.testing.assert_allclose(q2.bn.running_mean.numpy().ravel(), [0.07197522, 0.31262597, 0.59652495, -0.11681742],
                               rtol=1e-5)
    np.testing.assert_allclose(q2.bn.running_var.numpy().ravel(), [1.5140817, 0.9643823, 1.322567, 0.9385659],
                               rtol=1e-5)
    q2.eval()
    np.testing.assert_allclose(q2.calc_conv_bn_qat(x).numpy().ravel()[:6],
                               [0.6257574, 0.9330204, 0.45103842, 0.6657174, 0.65289515, 0.6862808], rtol=1e-5)
    assert callable(QAT.ConvTransposeBn2d.calc_conv_transpose2d_bn_qat)
    lq = QAT.LinearBn1d.from_float_module(M.LinearBn1d(4, 3))
    lq.set_qconfig(qz.min_max_fakequant_qconfig)
    w, b = lq.fold_weight_bias(lq.bn.running_mean, lq.bn.running_var)
    assert w.shape == (3, 4) and b.shape == (3,)  # MegEngine: lin fold (3, 4) (3,)
    assert callable(lq.calc_linear_bn_qat)


def test_quantized_layers_have_megengines_calc_methods():
    net = M.Sequential(M.QuantStub(), M.Conv2d(2, 3, 1), M.Linear(3, 2), M.DequantStub())
    qz.quantize_qat(net)
    x = mge.tensor(np.random.RandomState(1).uniform(-1, 1, (2, 2, 1, 1)).astype("float32"))

    def run(x):
        return net[2](net[1](net[0](x)).reshape(2, 3))

    run(x)
    qz.quantize(net)
    xq = net[0](x)
    conv = net[1]
    np.testing.assert_array_equal(conv.calc_conv_quantized(xq).numpy(), conv(xq).numpy())
    relu = conv.calc_conv_quantized(xq, nonlinear_mode="relu").numpy()
    np.testing.assert_array_equal(relu, np.maximum(conv(xq).numpy(), 0))
    h = conv(xq).reshape(2, 3)
    np.testing.assert_array_equal(net[2].calc_linear_quantized(h).numpy(), net[2](h).numpy())
    net[2].training = True
    # MegEngine: ValueError: quantized module only support inference.
    with pytest.raises(ValueError, match="quantized module only support inference."):
        net[2].calc_linear_quantized(h)
    assert callable(Q.ConvTranspose2d.calc_conv_transpose2d_quantized)
    assert callable(Q.BatchMatMulActivation.calc_bmm_quantized)


def test_mapping_as_pairs_and_misuse_errors():
    # MegEngine merges ``mapping`` with dict.update: a list of (class, class) pairs works
    net = M.Sequential(M.Linear(2, 2))

    class MyQATLinear(QAT.Linear):
        pass

    qz.quantize_qat(net, mapping=[(M.Linear, MyQATLinear)])
    assert type(net[0]) is MyQATLinear
    # MegEngine: AttributeError: type object 'int' has no attribute 'from_float_module' / 'list' object has no
    # attribute '_flatten'
    with pytest.raises(AttributeError):
        qz.quantize_qat(M.Sequential(M.Linear(2, 2)), mapping={M.Linear: int})
    with pytest.raises(AttributeError):
        qz.quantize_qat([M.Linear(2, 2)])
    with pytest.raises(AttributeError):
        qz.quantize(3)


def test_easy_quant_warns_in_megengines_words():
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    net = qz.quantize_qat(M.Sequential(M.QuantStub(), M.Linear(3, 3), M.DequantStub()))
    x = mge.tensor(np.random.RandomState(1).rand(2, 3).astype("float32"))
    net(x)
    qz.reset_qconfig(net, qz.passive_qconfig)
    log = logging.getLogger(qz.quantize.__module__)
    handler = Keep()
    log.addHandler(handler)
    try:
        qz.apply_easy_quant(net, x, 1.0, 1.0, 1)  # one candidate, the current scale: never better than 0
        qz.apply_easy_quant(net, x * 0, 0.9, 1.1, 3)
    finally:
        log.removeHandler(handler)
    assert records and set(records) == {"EasyQuant finds no better scale"}


def test_packages_expose_megengines_submodules():
    # MegEngine: ``import megengine.module.qat as QAT`` gives QAT.conv, QAT.conv_bn... and the fused base classes
    for pkg in (QAT, Q):
        for name in ("batch_matmul_activation", "concat", "conv", "conv_bn", "conv_transpose_bn", "elemwise",
                     "linear", "linear_bn", "quant_dequant", "module"):
            assert hasattr(pkg, name), (pkg.__name__, name)
    assert issubclass(QAT.ConvBnRelu2d, QAT.conv_bn._ConvBnActivation2d)
    assert issubclass(QAT.LinearBn1d, QAT.linear_bn._LinearBnActivation1d)
    assert issubclass(QAT.ConvTransposeBn2d, QAT.conv_transpose_bn._ConvTransposeBnActivation2d)
