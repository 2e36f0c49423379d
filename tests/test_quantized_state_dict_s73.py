"""Quantized modules' state dicts and the quantized ``BatchMatMulActivation`` as MegEngine 1.13's.

MegEngine's quantized ``BatchMatMulActivation`` holds an int8 ``weight`` ``(B, O, I, 1, 1)`` (its scale in the dtype
metadata) and a float ``bias`` ``(1, O, 1, 1)`` (zeros when the QAT layer has none), and runs
``F.quantized.batch_conv_bias_activation`` on them: the bias is added per output feature, the output is
``(B, O, K)``, and the int32 accumulator is requantized as its naive batched kernel does (the real value divided
by the output scale). megxla's had no state (it computed from the QAT layer's float weight). Every quantized
weight in a state dict carries exactly MegEngine's metadata, ``{"mgb_dtype": {"name", "scale"}}`` (megxla's had
``zero_point`` / ``qmin`` / ``qmax`` / ``meta_name`` too).

The expected values were observed running MegEngine 1.13.0 (CPU); MegEngine is not needed here.
"""
import base64
import io

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.module.quantized as Q
from megxla.core.tensor import dtype
from megxla.quantization import min_max_fakequant_qconfig, quantize, quantize_qat

f32 = np.float32


def _q(a, s):
    """An int8 array as a qint8 tensor of scale ``s`` (as MegEngine's tests build them: through the real value)."""
    return mge.tensor(dtype.convert_to_qint8(np.asarray(a).astype("float32") * f32(s), dtype.qint8(float(s))))


def _layout(sd):
    return {k: (tuple(np.asarray(v).shape), np.asarray(v).dtype.name,
                sorted((np.asarray(v).dtype.metadata or {}).get("mgb_dtype", {}))) for k, v in sd.items()}


# ---- BatchMatMulActivation converted by quantize() ----------------------------------------------------------------
W = np.array([[[0.5, -0.25, 0.75], [-1.0, 0.3, 0.2]], [[0.1, 0.9, -0.6], [0.4, -0.8, 0.05]]], "float32")
BIAS = np.array([0.2, -0.3], "float32")
X1 = np.array([[[0.3], [-0.7], [1.1]], [[-0.2], [0.5], [0.9]]], "float32")  # calibration
X2 = np.array([[[0.8], [0.1], [-0.4]], [[0.6], [-1.2], [0.25]]], "float32")
W_INT = [64, -32, 95, -127, 38, 25, 13, 114, -76, 51, -102, 6]
W_SCALE = 0.007874015718698502
IN_SCALE = 0.00862745102494955
# (bias, output scale, int8 output) as MegEngine gives them
MEGENGINE = {True: (0.010571392253041267, [[[27], [-109]], [[-83], [80]]]),
             False: (0.009002813138067722, [[[9], [-94]], [[-120], [127]]])}


class _Net(M.Module):
    def __init__(self, bias):
        super().__init__()
        self.q = M.QuantStub()
        self.b = M.BatchMatMulActivation(2, 3, 2, bias=bias)
        self.d = M.DequantStub()

    def forward(self, x):
        return self.d(self.b(self.q(x)))


def _converted(bias):
    net = _Net(bias)
    net.load_state_dict({"b.weight": W, **({"b.bias": BIAS} if bias else {})}, strict=False)
    quantize_qat(net, qconfig=min_max_fakequant_qconfig)
    net(mge.tensor(X1))
    net.eval()
    quantize(net)
    net.eval()
    return net


@pytest.mark.parametrize("bias", [True, False])
def test_converted_batch_matmul_holds_megengines_weight_and_bias(bias):
    net = _converted(bias)
    sd = net.state_dict()
    assert _layout(sd) == {"b.bias": ((1, 2, 1, 1), "float32", []),
                           "b.weight": ((2, 2, 3, 1, 1), "int8", ["name", "scale"])}
    assert sd["b.weight"].dtype.metadata == {"mgb_dtype": {"name": "QuantizedS8", "scale": W_SCALE}}
    assert sd["b.weight"].ravel().tolist() == W_INT
    np.testing.assert_array_equal(sd["b.bias"].ravel(), BIAS if bias else [0, 0])
    assert repr(net.b) == "Quantized.BatchMatMulActivation(batch=2, in_features=3, out_features=2, bias=True)"
    out_scale, want = MEGENGINE[bias]
    y = net.b(net.q(mge.tensor(X2)))
    assert y.shape == (2, 2, 1)  # (K = 1: the bias per output feature; the QAT layer's broadcast gives (2, 2, 2))
    np.testing.assert_array_equal(y.numpy(), want)
    assert dtype.get_scale(y.dtype) == pytest.approx(out_scale, rel=1e-7)


# MegEngine's file: megengine.save(net.state_dict()) of _converted(True)
MEGENGINE_FILE = (
    "gASVXgEAAAAAAACMC2NvbGxlY3Rpb25zlIwLT3JkZXJlZERpY3SUk5QpUpQojAZiLmJpYXOUjBVudW1weS5jb3JlLm11bHRpYXJyYXmUjAxfcmVj"
    "b25zdHJ1Y3SUk5SMBW51bXB5lIwHbmRhcnJheZSTlEsAhZRDAWKUh5RSlChLAShLAUsCSwFLAXSUaAiMBWR0eXBllJOUjAJmNJSJiIeUUpQoSwOM"
    "ATyUTk5OSv////9K/////0sAdJRiiUMIzcxMPpqZmb6UdJRijAhiLndlaWdodJRoB2gKSwCFlGgMh5RSlChLAShLAksCSwNLAUsBdJRoEYwCaTGU"
    "iYiHlFKUKEsEjAF8lE5OTkr/////Sv////9LAH2UjAltZ2JfZHR5cGWUfZQojARuYW1llIwLUXVhbnRpemVkUziUjAVzY2FsZZRHP4AgQIAAAAB1"
    "c3SUYolDDEDgX4EmGQ1ytDOaBpR0lGJ1Lg==")


def test_megengine_checkpoint_loads_strict_and_gives_megengines_output():
    sd = mge.load(io.BytesIO(base64.b64decode(MEGENGINE_FILE)))
    out_scale, want = MEGENGINE[True]
    net = M.Sequential()
    # built by hand with another weight scale: the file's dtype metadata gives the weight its scale
    net.b = Q.BatchMatMulActivation(2, 3, 2, dtype=dtype.qint8(out_scale))
    net.b.weight = mge.Parameter(np.zeros((2, 2, 3, 1, 1), "int8"), dtype=dtype.qint8(1.0))
    net.b.bias = mge.Parameter(np.ones((1, 2, 1, 1), "float32"))
    net.load_state_dict(sd, strict=True)
    net.eval()
    x = Q.QuantStub(dtype.qint8(IN_SCALE))
    x.eval()
    np.testing.assert_array_equal(net.b(x(mge.tensor(X2))).numpy(), want)
    # and megxla's converted module takes it too
    conv = _converted(True)
    conv.load_state_dict(sd, strict=True)
    np.testing.assert_array_equal(conv.b(conv.q(mge.tensor(X2))).numpy(), want)


def test_batch_matmul_adds_its_bias_per_output_feature():
    # K = O = 4, so the bias axis shows; the scales put accumulators on rounding ties
    w = [[[46, -36, -57], [-4, 12, -60], [-39, -41, 14], [47, -19, -50]],
         [[-39, 59, -22], [36, -40, -16], [33, -21, -46], [60, -34, 21]]]
    x = [[[40, -28, 16, -48], [13, 10, -49, 1], [40, 19, 47, -21]],
         [[-26, 12, -43, -7], [-17, 29, -2, -13], [-30, 44, -1, -29]]]
    want = [[[-20, -75, 2, -24], [-76, -31, -108, 40], [-44, 30, 63, 48], [-11, -74, -20, -37]],
            [[27, 15, 55, 11], [3, -47, -47, 18], [28, -66, -38, 43], [-48, 20, -76, -18]]]
    m = Q.BatchMatMulActivation(2, 3, 4, dtype=dtype.qint8(0.07))
    m.eval()
    m.weight = mge.Parameter(_q(np.array(w).reshape(2, 4, 3, 1, 1), 0.03))
    m.bias = mge.Parameter(np.array([0.5, -0.25, 0.105, 0.0], "float32").reshape(1, 4, 1, 1))
    y = m(_q(x, 0.07))
    np.testing.assert_array_equal(y.numpy(), want)
    assert y.dtype == np.int8 and dtype.get_scale(y.dtype) == pytest.approx(0.07)


def test_batch_conv_bias_activation_requantizes_as_megengines_batched_kernel():
    # accumulator * 0.0021 / 0.07: -250 gives -7.4999995 (-7), where * 0.03 gives -7.5 (-8)
    x = np.array([-125, -25, 25, 75, 125, 17, -17, 83]).reshape(1, 8, 1, 1)
    w = (2 * np.eye(8)).reshape(1, 8, 8, 1, 1)
    b = mge.tensor(np.zeros((1, 8, 1, 1), "float32")).astype(dtype.qint32(float(f32(0.07) * f32(0.03))))
    y = F.quantized.batch_conv_bias_activation(_q(x, 0.07), _q(w, 0.03), b, dtype=dtype.qint8(0.07))
    assert y.numpy().ravel().tolist() == [-7, -2, 2, 5, 7, 1, -1, 5]


def test_batch_matmul_by_hand_has_the_float_layers_parameters_until_set():
    # (MegEngine's quantized layer is its float one)
    assert _layout(Q.BatchMatMulActivation(2, 3, 4, dtype=dtype.qint8(0.1)).state_dict()) == {
        "bias": ((4,), "float32", []), "weight": ((2, 4, 3), "float32", [])}
    m = Q.BatchMatMulActivation(2, 3, 4, bias=False, dtype=dtype.qint8(0.1))
    assert list(m.state_dict()) == ["weight"]
    assert repr(m) == "Quantized.BatchMatMulActivation(batch=2, in_features=3, out_features=4, bias=False)"
    m.eval()
    with pytest.raises(ValueError, match="weight is not quantized"):
        m(_q(np.ones((2, 3, 1)), 0.1))
    m.weight = mge.Parameter(np.ones((2, 4, 3, 1, 1), "int8"), dtype=dtype.qint8(0.5))
    with pytest.raises(ValueError, match=r"input must be \(batch=2, in_features=3, K\)"):
        m(_q(np.ones((2, 4, 1)), 0.1))
    with pytest.raises(ValueError, match="not a quantized tensor"):
        m(mge.tensor(np.ones((2, 3, 1), "float32")))


# ---- the other quantized modules ----------------------------------------------------------------------------------
class _Layers(M.Module):
    def __init__(self, bias):
        super().__init__()
        self.q = M.QuantStub()
        self.c1 = M.Conv2d(2, 3, 3, padding=1, bias=bias)
        self.cb = M.ConvBn2d(3, 4, 1, bias=bias)
        self.cr = M.ConvRelu2d(4, 4, 1, bias=bias)
        self.ct = M.ConvTranspose2d(4, 3, 2, stride=2, bias=False)  # (MegEngine's quantized one has no bias)
        self.cat = M.Concat()
        self.add = M.Elemwise("add")
        self.fc = M.Linear(6 * 2 * 2, 5, bias=bias)
        self.fcr = M.LinearRelu(5, 5, bias=bias)
        self.lb = M.LinearBn1d(5, 3, bias=True)  # (MegEngine's quantize() of one without a bias raises)
        self.d = M.DequantStub()

    def forward(self, x):
        y = self.cr(self.cb(self.c1(self.q(x))))
        z = F.avg_pool2d(self.ct(y), 2)
        z = self.add(*[self.cat([z, z], 1)] * 2)
        return self.d(self.lb(self.fcr(self.fc(F.flatten(z, 1)))))


@pytest.mark.parametrize("bias", [True, False])
def test_quantized_layers_state_dict_as_megengines(bias):
    rs = np.random.RandomState(0)
    net = _Layers(bias)
    quantize_qat(net, qconfig=min_max_fakequant_qconfig)
    net(mge.tensor(rs.randn(2, 2, 2, 2).astype("float32")))
    net.eval()
    quantize(net)
    sd = net.state_dict()
    q8 = ["name", "scale"]
    want = {"c1.bias": ((1, 3, 1, 1), "float32", []), "c1.weight": ((3, 2, 3, 3), "int8", q8),
            "cb.bias": ((1, 4, 1, 1), "float32", []), "cb.weight": ((4, 3, 1, 1), "int8", q8),
            "cr.bias": ((1, 4, 1, 1), "float32", []), "cr.weight": ((4, 4, 1, 1), "int8", q8),
            "ct.weight": ((4, 3, 2, 2), "int8", q8), "fc.bias": ((5,), "float32", []),
            "fc.weight": ((5, 24), "int8", q8), "fcr.bias": ((5,), "float32", []),
            "fcr.weight": ((5, 5), "int8", q8), "lb.bias": ((3,), "float32", []), "lb.weight": ((3, 5), "int8", q8)}
    if not bias:
        del want["fc.bias"], want["fcr.bias"]
    assert _layout(sd) == want
    assert list(sd) == list(want)
    for k in want:
        if want[k][2]:
            assert sd[k].dtype.metadata["mgb_dtype"]["name"] == "QuantizedS8"
