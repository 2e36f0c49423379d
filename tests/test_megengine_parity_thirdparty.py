"""What third-party MegEngine projects hit (issue 32), with the numbers real MegEngine 1.13 gives (computed with
MegEngine 1.13.0 on CPU, Python 3.10): the gradient through every Tensor-constructor and conversion path, the
shape-changing setitem, module paths real code imports, the recording call's results of ``xla_trace``."""
import copy

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla import Parameter, Tensor
from megxla.autodiff import GradManager
from megxla.jit import xla_trace


# ---- 1. constructors and conversions: MegEngine differentiates a copy, cuts detach / copy / host round trips ---
# x = Parameter([1., 2.]); with gm: y = fn(x); gm.backward(y.sum()) -> x.grad (None: no gradient reached x)
GRAD_CASES = {
    "mge.tensor(x * 2)": (lambda x: mge.tensor(x * 2), [2.0, 2.0]),
    "Tensor(x * 3)": (lambda x: Tensor(x * 3), [3.0, 3.0]),
    "mge.tensor(x * 2) + Tensor(x * 3)": (lambda x: mge.tensor(x * 2) + Tensor(x * 3), [5.0, 5.0]),
    "Tensor(x) * 3": (lambda x: Tensor(x) * 3, [3.0, 3.0]),
    "Tensor(x)": (lambda x: Tensor(x), [1.0, 1.0]),
    "Tensor(x * 2, dtype=float32)": (lambda x: Tensor(x * 2, dtype="float32"), [2.0, 2.0]),
    "mge.tensor(x * 2, device=xpux)": (lambda x: mge.tensor(x * 2, device="xpux"), [2.0, 2.0]),
    "Tensor(x * 2, name=, no_cache=, format=)": (
        lambda x: Tensor(x * 2, name="a", no_cache=True, format="default"), [2.0, 2.0]),
    "Parameter(x * 2)": (lambda x: Parameter(x * 2), [2.0, 2.0]),
    "Parameter(x) * 2": (lambda x: Parameter(x) * 2, [2.0, 2.0]),
    "Parameter(x * 2, dtype=float32)": (lambda x: Parameter(x * 2, dtype="float32"), [2.0, 2.0]),
    "Tensor(F.copy(x * 2))": (lambda x: Tensor(F.copy(x * 2)), [2.0, 2.0]),
    "astype(float16).astype(float32)": (lambda x: (x * 2).astype("float16").astype("float32"), [2.0, 2.0]),
    "astype(float32)": (lambda x: (x * 2).astype("float32"), [2.0, 2.0]),
    "astype(int32)": (lambda x: (x * 2).astype("int32").astype("float32"), None),
    "astype(bool) + x": (lambda x: (x * 2).astype("bool").astype("float32") + x, [1.0, 1.0]),
    "F.copy(x * 2)": (lambda x: F.copy(x * 2), [2.0, 2.0]),
    "F.copy(x * 2, cpu0)": (lambda x: F.copy(x * 2, "cpu0"), [2.0, 2.0]),
    "(x * 2).to(cpu0)": (lambda x: (x * 2).to("cpu0"), [2.0, 2.0]),
    "detach() + x": (lambda x: (x * 2).detach() + x, [1.0, 1.0]),
    "Tensor(numpy()) + x": (lambda x: Tensor((x * 2).numpy()) + x, [1.0, 1.0]),
    "Tensor(float(x[0])) + x": (lambda x: Tensor(float(x[0])) + x, [1.0, 1.0]),
    "Tensor([x[0] * 2, x[1]])": (lambda x: Tensor([x[0] * 2, x[1]]), None),
    "F.stack": (lambda x: F.stack([x[0] * 2, x[1]]), [2.0, 1.0]),
    "copy.deepcopy(x * 2)": (lambda x: copy.deepcopy(x * 2), None),
    "copy.copy(x * 2)": (lambda x: copy.copy(x * 2), None),
    "F.zeros_like(x) + x": (lambda x: F.zeros_like(x) + x, [1.0, 1.0]),
}


@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_the_gradient_through_a_constructor_is_megengines(case):
    fn, expected = GRAD_CASES[case]
    x = Parameter([1.0, 2.0])
    gm = GradManager().attach([x])
    with gm:
        gm.backward(fn(x).sum())
    if expected is None:
        assert x.grad is None
    else:
        np.testing.assert_array_equal(x.grad.numpy(), np.array(expected, np.float32))


def test_a_converting_constructor_differentiates_as_astype():
    # MegEngine refuses Tensor(t, dtype=other) ("dtype mismatch"); megxla converts (docs/differences.md), and the
    # conversion is differentiable exactly when astype is
    x = Parameter([1.0, 2.0])
    gm = GradManager().attach([x])
    with gm:
        y = Tensor(x * 2, dtype="float16").astype("float32") + Tensor(x * 3, dtype="int32").astype("float32")
        gm.backward(y.sum())
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_the_gradient_through_a_constructor_in_a_compiled_step():
    # the CLIP-style step: token embeddings rebuilt with mge.tensor(...) inside the recorded forward
    w = Parameter(np.arange(6, dtype="float32").reshape(3, 2))
    gm = GradManager().attach([w])

    @xla_trace
    def step(w, idx):
        with gm:
            emb = mge.tensor(w[idx]) * 2 + Tensor(w[idx], dtype="float32")
            loss = (emb ** 2).sum()
            gm.backward(loss)
        g = w.grad
        w.grad = None
        return loss, g

    idx = Tensor([0, 2])
    for _ in range(3):  # recording call, then compiled calls
        loss, g = step(w, idx)
        # d/dw sum((3 w[idx])^2) = 18 w[idx] on the picked rows
        np.testing.assert_allclose(g.numpy(), [[0, 18], [0, 0], [72, 90]])
        assert float(loss) == pytest.approx(9 * (0 + 1 + 16 + 25))


# ---- 2. ``x[...] = v`` rebinds x to v (MegEngine's Tensor.__setitem__: index ``is Ellipsis`` -> ``_reset(v)``) ---
def test_setitem_ellipsis_takes_the_values_shape():
    t = Tensor(0.0)
    t[...] = Tensor(np.arange(1, 7, dtype="float32").reshape(1, 2, 3))
    assert t.shape == (1, 2, 3)
    np.testing.assert_array_equal(t.numpy().ravel(), [1, 2, 3, 4, 5, 6])
    t = Tensor(np.zeros((2, 3), "float32"))
    t[...] = Tensor([[1.0], [2.0]])  # (2, 1): MegEngine does not broadcast either
    assert t.shape == (2, 1)


def test_setitem_ellipsis_takes_the_values_dtype_and_a_scalar_becomes_0d():
    # MegEngine 1.13: int32 (2,) [...] = float32 (3,) of 1.5 -> float32 [1.5 1.5 1.5]; (2, 3) [...] = 5 -> 0-d 5.0;
    # int32 [...] = 5.7 -> int32 5; [...] = np.arange(4) -> (4,) in t's dtype; a tuple (...,) writes into t
    t = Tensor(np.zeros((2,), "int32"))
    t[...] = Tensor(np.full((3,), 1.5, "float32"))
    assert t.dtype == np.float32 and t.numpy().tolist() == [1.5, 1.5, 1.5]
    t = Tensor(np.zeros((2, 3), "float32"))
    t[...] = 5
    assert t.shape == () and t.dtype == np.float32 and float(t) == 5.0
    t = Tensor(np.zeros((2, 3), "int32"))
    t[...] = 5.7
    assert t.shape == () and t.dtype == np.int32 and int(t) == 5
    t = Tensor(np.zeros((2, 3), "float32"))
    t[...] = np.arange(4)
    assert t.shape == (4,) and t.dtype == np.float32
    t = Tensor(np.zeros((2, 3), "float32"))
    t[(Ellipsis,)] = Tensor([1.0, 2.0, 3.0])
    assert t.shape == (2, 3) and t.numpy().tolist() == [[1, 2, 3], [1, 2, 3]]
    with pytest.raises(ValueError):
        t[:] = Tensor(np.zeros((4, 5), "float32"))  # any other index writes into t's shape


def test_setitem_ellipsis_does_not_alias_later_writes():
    v = Tensor([1.0, 2.0])
    t = Tensor(0.0)
    t[...] = v
    v[0] = 7.0
    t2 = Tensor(0.0)
    t2[...] = v
    t2[1] = 9.0
    assert t.numpy().tolist() == [1.0, 2.0] and v.numpy().tolist() == [7.0, 2.0]
    assert t2.numpy().tolist() == [7.0, 9.0]


def test_setitem_ellipsis_is_differentiable():
    # MegEngine 1.13: x.grad = 8 everywhere; y (overwritten) gets no gradient
    x = Parameter(np.ones((3,), "float32"))
    y = Parameter(np.ones((2,), "float32"))
    gm = GradManager().attach([x, y])
    with gm:
        t = y * 1
        t[...] = x * 2
        gm.backward((t * t).sum())
    np.testing.assert_array_equal(x.grad.numpy(), [8.0, 8.0, 8.0])
    assert y.grad is None


def test_setitem_ellipsis_in_a_compiled_step():
    import megxla.module as M

    class PosEnc(M.Module):  # the ASR Transformer's pattern: a buffer grown to the table's shape on first use
        def __init__(self):
            super().__init__()
            self.pe = Tensor(0.0)

        def forward(self, x):
            if self.pe.ndim < 2 or self.pe.shape[1] < x.shape[1]:
                self.pe[...] = F.broadcast_to(F.arange(x.shape[1]).reshape(1, -1), (1, x.shape[1]))
            return x + self.pe[:, :x.shape[1]]

    m = PosEnc()

    @xla_trace
    def f(m, x):
        return m(x)

    x = Tensor(np.ones((2, 4), "float32"))
    for _ in range(3):
        np.testing.assert_array_equal(f(m, x).numpy(), [[1, 2, 3, 4]] * 2)
    assert m.pe.shape == (1, 4)


# ---- 4. the zoo's QAT recipe: MobileNetV2's blocks + quantize_qat(ema_fakequant_qconfig), training mode --------
import megxla.module as M  # noqa: E402
import megxla.quantization as Q  # noqa: E402
from megxla.quantization.quantize import quantize_qat  # noqa: E402


class _InvertedResidual(M.Module):
    # official/quantization/models/mobilenet_v2.py's block: 1x1 ConvBnRelu (expansion), depthwise 3x3
    # ConvBnRelu, 1x1 ConvBn, a quantized add when the shapes allow a residual
    def __init__(self, inp, oup, stride, t):
        super().__init__()
        hid = int(round(inp * t))
        self.res = stride == 1 and inp == oup
        layers = [M.ConvBnRelu2d(inp, hid, kernel_size=1, bias=False)] if t != 1 else []
        layers += [M.ConvBnRelu2d(hid, hid, 3, padding=1, stride=stride, groups=hid, bias=False),
                   M.ConvBn2d(hid, oup, 1, bias=False)]
        self.conv = M.Sequential(*layers)
        self.add = M.Elemwise("ADD")

    def forward(self, x):
        return self.add(x, self.conv(x)) if self.res else self.conv(x)


class _MobileNetV2(M.Module):
    # the zoo's MobileNetV2 with a reduced block list: QuantStub -> blocks -> avg_pool2d(7) -> DequantStub ->
    # float classifier (disable_quantize)
    def __init__(self, setting, nc=5, last=32):
        super().__init__()
        c = 16
        feats = [M.ConvBnRelu2d(3, c, 3, padding=1, stride=2, bias=False)]
        for t, o, n, s in setting:
            for i in range(n):
                feats.append(_InvertedResidual(c, o, s if i == 0 else 1, t))
                c = o
        feats.append(M.ConvBnRelu2d(c, last, 1, bias=False))
        self.features = M.Sequential(*feats)
        self.classifier = M.Sequential(M.Dropout(0.0), M.Linear(last, nc))
        self.classifier.disable_quantize()
        self.quant, self.dequant = M.QuantStub(), M.DequantStub()

    def forward(self, x):
        x = self.features(self.quant(x))
        x = F.flatten(F.avg_pool2d(x, 7), 1)
        return self.classifier(self.dequant(x))


def _reduced_qat_model(rng):
    net = _MobileNetV2([[1, 8, 1, 1], [6, 12, 2, 1]])
    sd = {}
    for k, v in sorted(net.state_dict().items()):  # (MegEngine's state_dict order, the same draws)
        shape = np.asarray(v).shape
        if k.endswith("running_var"):
            sd[k] = (rng.rand(*shape) + 0.5).astype("float32")
        elif k.endswith("running_mean"):
            sd[k] = (rng.randn(*shape) * 0.1).astype("float32")
        elif k.endswith("bn.weight"):
            sd[k] = (rng.rand(*shape) + 0.5).astype("float32")
        else:
            sd[k] = (rng.randn(*shape) * 0.3).astype("float32")
    net.load_state_dict(sd)
    quantize_qat(net, qconfig=Q.ema_fakequant_qconfig)
    return net


# MegEngine 1.13.0: two SGD(lr=0.01) steps in training mode, then eval, then a fresh QAT model loading the state
_QAT_WANT = {
    "out0": [[1.3139638900756836, -1.7997573614120483, 1.5359357595443726, 1.9644927978515625, 0.8695492744445801],
             [1.3286412954330444, -1.6360121965408325, 1.2884299755096436, 2.038773536682129, 0.7818576097488403]],
    "loss": [2.757122039794922, 2.6942968368530273],
    "g0_first_conv": [0.0038074704352766275, 0.01518324390053749, 0.06662962585687637, 0.08569684624671936],
    "g0_dw": [0.02432626113295555, 0.07390255481004715, 0.026593314483761787, 0.0024478158447891474],
    "g0_fc": [0.12660087645053864, 0.049227915704250336, 0.1500130295753479, 0.013774368911981583],
    "g0_bn": [0.010661772452294827, 0.01765681803226471, -0.1354151964187622, 0.0219600610435009],
    "g1_first_conv": [0.04633735492825508, 0.03566120192408562, 0.02680874429643154, 0.05222652480006218],
    "g1_dw": [0.002274695783853531, 0.05752034857869148, 0.03503754734992981, -0.016269927844405174],
    "g1_bn": [0.017601950094103813, 0.009135921485722065, -0.057554375380277634, -0.004555852152407169],
    "out1": [[1.2739369869232178, -1.7150471210479736, 1.5041062831878662, 1.9401652812957764, 0.8232396841049194],
             [1.3083460330963135, -1.6157255172729492, 1.2849687337875366, 2.053602457046509, 0.8092087507247925]],
    "act_max": 6.3281636238098145, "w_min": -0.955843985080719, "w_max": 1.204548716545105,
    "eval": [[1.6860982179641724, -3.8137001991271973, 1.7995374202728271, 1.613513469696045, 0.8390588760375977],
             [1.8011760711669922, -4.104325294494629, 1.7747371196746826, 1.6433656215667725, 0.9446280598640442]],
    "train_loaded": [[1.2399113178253174, -1.6569297313690186, 1.4983328580856323, 1.8967397212982178,
                      0.8385660648345947],
                     [1.315722942352295, -1.6007938385009766, 1.2469028234481812, 2.11452317237854,
                      0.7714296579360962]],
}


def test_zoo_mobilenet_v2_qat_training_matches_megengine():
    rng = np.random.RandomState(0)
    net = _reduced_qat_model(rng)
    x = mge.tensor(rng.randn(2, 3, 14, 14).astype("float32"))
    label = mge.tensor([1, 3], dtype="int32")
    gm = GradManager().attach(net.parameters())
    opt = mge.optimizer.SGD(net.parameters(), lr=0.01)
    net.train()
    want = _QAT_WANT
    picks = {"first_conv": lambda: net.features[0].conv.weight, "dw": lambda: net.features[2].conv[1].conv.weight,
             "fc": lambda: net.classifier[1].weight, "bn": lambda: net.features[1].conv[1].bn.weight}
    for step in range(2):
        with gm:
            out = net(x)
            loss = F.nn.cross_entropy(out, label)
            gm.backward(loss)
        np.testing.assert_allclose(out.numpy(), want[f"out{step}"], rtol=1e-5, atol=1e-6)
        assert float(loss) == pytest.approx(want["loss"][step], rel=1e-6)
        for name, param in picks.items():
            if f"g{step}_{name}" in want:
                np.testing.assert_allclose(param().grad.numpy().ravel()[:4], want[f"g{step}_{name}"], rtol=1e-4,
                                           atol=1e-7)
        opt.step().clear_grad()
    blk = net.features[2].conv[1]
    assert float(blk.act_observer.max_val) == pytest.approx(want["act_max"], rel=1e-6)
    assert float(blk.act_observer.runtime_momentum) == pytest.approx(0.9)
    assert float(blk.weight_observer.min_val) == pytest.approx(want["w_min"], rel=1e-6)
    assert float(blk.weight_observer.max_val) == pytest.approx(want["w_max"], rel=1e-6)
    net.eval()
    np.testing.assert_allclose(net(x).numpy(), want["eval"], rtol=1e-5, atol=1e-6)
    # observer state travels with load_state_dict into a fresh QAT model (eval and the next training call)
    net2 = _MobileNetV2([[1, 8, 1, 1], [6, 12, 2, 1]])
    quantize_qat(net2, qconfig=Q.ema_fakequant_qconfig)
    net2.load_state_dict(net.state_dict())
    net2.eval()
    np.testing.assert_allclose(net2(x).numpy(), want["eval"], rtol=1e-5, atol=1e-6)
    net2.train()
    np.testing.assert_allclose(net2(x).numpy(), want["train_loaded"], rtol=1e-5, atol=1e-6)


def test_qat_folded_weight_is_megengines_to_the_bit():
    # the BN-folded weight is fake-quantized, so an ulp moves values across rounding boundaries; MegEngine folds
    # with gamma * (1 / sqrt(var + eps)). Checksum of the float32 bits MegEngine 1.13 feeds its weight observer.
    rng = np.random.RandomState(3)
    net = M.Sequential(M.ConvBn2d(3, 16, 3, bias=False))
    net.load_state_dict({"0.conv.weight": rng.randn(16, 3, 3, 3).astype("float32") * 0.3,
                         "0.bn.weight": (rng.rand(16) + 0.5).astype("float32"),
                         "0.bn.bias": rng.randn(16).astype("float32"),
                         "0.bn.running_mean": (rng.randn(1, 16, 1, 1) * 0.1).astype("float32"),
                         "0.bn.running_var": (rng.rand(1, 16, 1, 1) + 0.5).astype("float32")})
    quantize_qat(net, qconfig=Q.ema_fakequant_qconfig)
    seen = {}
    net[0].weight_observer.register_forward_hook(lambda m, i, o: seen.update(w=i[0].numpy()))
    net.train()
    net(mge.tensor(rng.randn(1, 3, 5, 5).astype("float32")))
    assert int(seen["w"].view(np.uint32).astype(np.uint64).sum()) == 922579989652


# ---- 5. NumPy's removed aliases: MegEngine pins NumPy < 1.24, its users write np.float / np.int / np.object ----
_MAE_SCRIPT = """
import numpy as np
import megengine as mge
def pos_embed_1d(dim, pos):  # an MAE repository's positional embedding, as written for MegEngine
    omega = np.arange(dim // 2, dtype=np.float)
    omega = 1.0 / 10000 ** (omega / (dim / 2.0))
    out = np.einsum("m,d->md", pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)
emb = pos_embed_1d(4, np.arange(2, dtype=np.int))
mask = np.zeros(2, dtype=np.bool); objs = np.empty(1, dtype=np.object)
t = mge.tensor(emb)
print(emb.dtype, t.dtype, mask.dtype, objs.dtype, float(t[1, 0].item()), np.NaN != np.NaN, np.float_ is np.float64)
"""


def _run_py(args, cwd, env_extra=None):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("MEGXLA_ALIAS", "MEGXLA_SHADOW_MEGENGINE",
                                                               "MEGXLA_NUMPY_ALIASES")}
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_numpy_removed_aliases_under_megxla_run(tmp_path):
    (tmp_path / "mae.py").write_text(_MAE_SCRIPT)
    r = _run_py(["-m", "megxla.run", "mae.py"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    # NumPy 1.23 (MegEngine's): np.float is float -> float64 arrays; mge.tensor narrows to float32
    # (the line MegEngine 1.13 with NumPy 1.23 prints)
    assert r.stdout.split() == ["float64", "float32", "bool", "object", "0.8414709568023682", "True", "True"]
    assert r.stderr.count("UserWarning") == 1 and "np.int" in r.stderr  # warned once, for all the names
    off = _run_py(["-m", "megxla.run", "--no-numpy-aliases", "mae.py"], tmp_path)
    assert off.returncode != 0 and "AttributeError" in off.stderr
    env_off = _run_py(["-m", "megxla.run", "mae.py"], tmp_path, {"MEGXLA_NUMPY_ALIASES": "0"})
    assert env_off.returncode != 0 and "AttributeError" in env_off.stderr


def test_numpy_removed_aliases_with_as_megengine(tmp_path):
    (tmp_path / "mae.py").write_text("import megxla.as_megengine\nimport warnings\n"
                                     "warnings.simplefilter('error')\n"  # (the one warning must be a warning)
                                     "import numpy as np\ntry:\n    np.int\nexcept UserWarning as w:\n"
                                     "    print('warned')\nwarnings.simplefilter('default')\n" + _MAE_SCRIPT)
    r = _run_py(["mae.py"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[0] == "warned" and r.stdout.split()[1:3] == ["float64", "float32"]
    import numpy as np
    assert not hasattr(np, "float")  # (this test process: nothing installed)



def test_numpy_2_removals_answer_as_numpy_1_23():
    """NumPy 2.0 moved its exceptions to ``np.exceptions`` and removed ``asfarray``, ``in1d``, ``msort``, ``NZERO``...:
    MegEngine's own tests catch ``np.AxisError`` (1.13's test_expand_dims_for_scalar), which failed with an
    AttributeError under the alias. Restored, each answers as NumPy 1.23's did; removed again, none is there."""
    import warnings
    import numpy as np
    from megxla import _numpy_aliases
    assert not _numpy_aliases.is_restored()
    _numpy_aliases.restore()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(np.AxisError):
                np.expand_dims(np.zeros(()), 2)
            assert np.VisibleDeprecationWarning is np.exceptions.VisibleDeprecationWarning
            assert np.asfarray([1, 2]).dtype == np.float64 and np.asfarray([1], "float32").dtype == np.float32
            assert np.asfarray([1], "int32").dtype == np.float64
            assert np.in1d([[1, 2], [3, 4]], [2, 3]).tolist() == [False, True, True, False]
            assert np.msort(np.array([[3, 1], [1, 2]])).tolist() == [[1, 1], [3, 2]]
            assert str(np.NZERO) == "-0.0" and np.PZERO == 0.0 and np.trapz([1, 2, 3]) == 4.0
            assert np.issubclass_(np.float32, np.floating) and not np.issubclass_(1, int)
    finally:
        _numpy_aliases.remove()
    assert not hasattr(np, "AxisError") and not hasattr(np, "asfarray")

# ---- 6. the recording call's results are not external values; later (compiled) calls' are ----------------------
def test_recording_call_results_are_not_external():
    # MegEngine's contract (its test_xla_inp_shape_mismatch / test_xla_trace_shape_change): the first call of a
    # signature records (eagerly, in MegEngine), the next ones run the executable
    w = Parameter(np.ones((2,), "float32"))

    @xla_trace
    def step(x, w):
        w += x.sum()
        return x * 2

    a, b = Tensor(np.ones((2, 2), "float32")), Tensor(np.ones((3,), "float32"))
    r0 = step(a, w)
    assert not r0._is_external_value() and not w._is_external_value()
    r1 = step(a, w)
    assert r1._is_external_value() and w._is_external_value()
    r2 = step(b, w)  # a new signature: its recording call again
    assert not r2._is_external_value() and not w._is_external_value()
    r3 = step(b, w)
    assert r3._is_external_value()
    np.testing.assert_array_equal(r0.numpy(), r1.numpy())
    np.testing.assert_array_equal(w.numpy(), [15.0, 15.0])  # 1 + 4 + 4 + 3 + 3


def test_maximum_with_nan_does_not_depend_on_the_element_count():
    # MegEngine 1.13 (CPU): F.maximum(1e-10, all-nan x) is nan for 4 or 15 elements and 1e-10 for 16 or 20 (its
    # vectorised kernel); megxla keeps one rule at every size (docs/differences.md)
    for n in (4, 15, 16, 20):
        x = Tensor(np.full((n,), np.nan, "float32"))
        np.testing.assert_array_equal(F.maximum(1e-10, x).numpy(), np.full((n,), 1e-10, "float32"))
        assert np.isnan(F.maximum(x, 1e-10).numpy()).all()
    # two tensors (NeRF's disp_map: F.maximum(1e-10 * F.ones_like(d), d / w.sum(-1)) with w summing to 0):
    # MegEngine gives 1e-10 below 16 elements and nan from 16 on
    for n in (4, 64):
        x = Tensor(np.full((n,), np.nan, "float32"))
        np.testing.assert_array_equal(F.maximum(1e-10 * F.ones_like(x), x).numpy(), np.full((n,), 1e-10, "float32"))
        assert np.isnan(F.maximum(x, 1e-10 * F.ones_like(x)).numpy()).all()


# ---- 7. inputs MegEngine 1.13 rejects and megxla computes (crowddet-megengine, PMRID; docs/differences.md) --------
def test_bool_arithmetic_is_numpys():
    # MegEngine 1.13: "unsupport mode MUL for bool" (crowddet's samplers: (uniform_rng >= p) * mask)
    a, b = Tensor([True, False, True, False]), Tensor([True, True, False, False])
    for r, dtype, want in ((a * b, "bool", [1, 0, 0, 0]), (a + b, "bool", [1, 1, 1, 0]),
                           (F.maximum(a, b), "bool", [1, 1, 1, 0]), (F.minimum(a, b), "bool", [1, 0, 0, 0]),
                           (a * True, "bool", [1, 0, 1, 0]), (a ** b, "float32", [1, 0, 1, 1])):
        assert r.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(r.numpy().astype("float32"), want)
    with pytest.raises(Exception, match=r"sub.*bool"):
        a - b


def test_float64_numpy_operands_are_float32():
    # MegEngine 1.13: "unsupported numpy dtype <class 'numpy.float64'>" (crowddet's F.log(s) / np.log(2))
    x = Tensor([1.0, 4.0])
    for r in (F.log(x) / np.log(2), x * np.float64(2), np.float64(2) * x, x + np.array([0.5, 0.5])):
        assert isinstance(r, Tensor) and r.dtype == np.float32
    np.testing.assert_allclose((F.log(x) / np.log(2)).numpy(), [0.0, 2.0], rtol=1e-6)


def test_numpy_array_into_conv_and_modules():
    # MegEngine 1.13: "py_apply expects tensor as inputs" (PMRID's Denoiser.run calls its net on a NumPy array)
    import megxla.module as M
    x = np.ones((1, 2, 4, 4), "float32")
    conv = M.Conv2d(2, 3, 1)
    np.testing.assert_allclose(conv(x).numpy(), conv(Tensor(x)).numpy())
    assert F.matmul(x[0, 0], x[0, 0]).shape == (4, 4) and F.concat([x, x]).shape == (2, 2, 4, 4)


def test_linspace_keeps_its_own_values_after_a_later_call():
    # MegEngine 1.13 (asynchronous CPU mode) gives a the later call's start and stop: [1, 1.2, ..., 2] (NeRF)
    a = F.linspace(5, 10, 6)
    F.linspace(1, 2, 3)
    np.testing.assert_array_equal(a.numpy(), [5, 6, 7, 8, 9, 10])
    freqs = [f for f in 2.0 ** F.linspace(0.0, 3, 4)]
    F.linspace(0.0, 1, 4)
    np.testing.assert_array_equal([float(f) for f in freqs], [1, 2, 4, 8])
    # GFLv2's anchor shifts: MegEngine's arange is a linspace, its x shifts came out 8 * 15 / 19 apart
    shift_x = F.arange(0, 20) * 8
    shift_y = F.arange(0, 16) * 8
    np.testing.assert_array_equal(shift_x.numpy(), np.arange(20) * 8)
    np.testing.assert_array_equal(shift_y.numpy(), np.arange(16) * 8)
