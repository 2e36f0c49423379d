"""Modules, optimizers and checkpoints against real MegEngine 1.13: each test holds what MegEngine printed (or a
small file MegEngine wrote, under tests/data) for a behaviour found to differ when the same programs ran on both.

tests/data/megengine_whole_qat_net.pkl was written by MegEngine 1.13.0 (CPU) with
``mge.save({"model": net, "act": F.relu, "x": x.numpy(), "y": net(x).numpy()}, f)`` where ``net`` is
``Sequential(quantize_qat(Sequential(QuantStub(), ConvBnRelu2d(2, 3, 3, padding=1), DequantStub())),
ConvTransposeBn2d(3, 2, 2, stride=2), AdaptiveAvgPool2d(2))`` after one training-mode call, in eval mode.
"""
import io
import os

import numpy as np

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.module import qat
from megxla.module.module import _HookDict

DATA = os.path.join(os.path.dirname(__file__), "data")


def _globals(data):
    """(module, name) of every global a pickle names, as an unpickler asks for them."""
    from megxla._serialization import _Unpickler
    names = set()

    class Recording(_Unpickler):
        def find_class(self, module, name):
            names.add((module, name))
            return super().find_class(module, name)

    Recording(io.BytesIO(data), weights_only=False).load()
    return names


def test_megengine_whole_model_pickle_loads_and_trains():
    # MegEngine's file names classes by MegEngine's file layout (module.conv_transpose_bn,
    # module.qat.quant_dequant, module.adaptive_pooling) and its QuantDtypeMeta is a namedtuple rebuilt by NEWOBJ
    d = mge.load(os.path.join(DATA, "megengine_whole_qat_net.pkl"), weights_only=False)
    net, x = d["model"], mge.tensor(d["x"])
    assert d["act"] is F.relu
    assert type(net[1]) is M.ConvTransposeBn2d and type(net[0][0]).__name__ == "QuantStub"
    np.testing.assert_allclose(net(x).numpy(), d["y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d["y"].ravel()[:4], [-0.3099091, -0.31002513, -0.30300915, -0.3034631], rtol=1e-6)
    # the module is a working megxla module: hooks, state_dict, a training step
    assert type(net._forward_hooks) is _HookDict
    seen = []
    handle = net[1].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    net(x)
    handle.remove()
    assert seen == [(2, 2, 6, 6)]
    net.train()
    opt = optim.SGD(net.parameters(), lr=0.1)
    gm = GradManager().attach(net.parameters())
    before = net[1].bn.weight.numpy().copy()
    with gm:
        gm.backward((net(x) ** 2).sum())
    opt.step()
    assert not np.array_equal(before, net[1].bn.weight.numpy())


class Holder(M.Module):  # a user's class: keeps its own name in the file
    def __init__(self):
        super().__init__()
        self.body = M.Sequential(M.Linear(3, 2), M.ReLU())
        self.q = qat.Linear.from_float_module(M.Linear(2, 2))
        self.act = F.relu  # a function attribute (megxla's is made by a factory, MegEngine's is plain)

    def forward(self, x):
        return self.act(self.q(self.body(x)))


def test_whole_model_pickle_names_megengine_classes():
    # MegEngine unpickles a whole megxla model only if the file names MegEngine's classes (checked by running
    # megengine.load on such files: every Module class of the API reference, resnet18, shufflenet, a QAT net)
    net = Holder()
    buf = io.BytesIO()
    mge.save(net, buf)
    names = _globals(buf.getvalue())
    assert ("megengine.module", "Sequential") in names
    assert ("megengine.module", "Linear") in names
    assert ("megengine.module.qat", "Linear") in names
    assert ("megengine.functional", "relu") in names
    assert ("collections", "OrderedDict") in names  # the hook tables, as MegEngine's
    assert not [n for n in names if n[0].startswith("megxla")], names
    back = mge.load(io.BytesIO(buf.getvalue()), weights_only=False)
    x = mge.tensor(np.arange(6, dtype="float32").reshape(2, 3))
    np.testing.assert_array_equal(back(x).numpy(), net(x).numpy())
    assert back.act is F.relu and type(back.body._forward_hooks) is _HookDict


def test_convolutions_hold_output_padding_as_megengine():
    # MegEngine's _ConvNd stores output_padding on every convolution (0 for the forward ones); MegEngine code
    # (and MegEngine unpickling a whole megxla model) reads it
    for m in (M.Conv1d(2, 2, 3), M.Conv2d(2, 2, 3), M.Conv3d(2, 2, 3), M.LocalConv2d(2, 2, 4, 4, 3),
              M.DeformableConv2d(2, 2, 3)):
        assert m.output_padding == 0
    assert M.ConvTranspose2d(2, 2, 3, output_padding=1, stride=2).output_padding == (1, 1)
    assert "output_padding" not in repr(M.Conv2d(2, 2, 3))


def test_multi_head_attention_init_is_megengine_xavier_with_zero_bias():
    # MegEngine 1.13: xavier_uniform_(io_weight_bias) as a (1, L) matrix, then its bias part zeroed; for
    # MultiHeadAttention(8, 2) it printed min/max -0.1435 / 0.1436 over the 288 entries (bound sqrt(6 / 289))
    mge.random.seed(3)
    m = M.MultiHeadAttention(8, 2)
    w = m.io_weight_bias.numpy()[0]
    bound = np.sqrt(6 / (288 + 1))
    assert w.shape == (288,)
    np.testing.assert_array_equal(w[256:], 0)
    assert np.abs(w[:256]).max() <= bound and np.abs(w[:256]).max() > 0.9 * bound
    assert abs(w[:256].std() - bound / np.sqrt(3)) < 0.15 * bound
    m2 = M.MultiHeadAttention(8, 2, bias=False, kdim=6, vdim=5)
    assert np.abs(m2.io_weight_bias.numpy()).max() <= np.sqrt(6 / (216 + 1))
    assert m.add_bias_kv is False and m.add_zero_attn is False  # MegEngine's attributes


def _adam_step(m, opt, x):
    gm = GradManager().attach(m.parameters())
    with gm:
        gm.backward((m(x) ** 2).sum())
    opt.step().clear_grad()


def test_whole_optimizer_pickle_round_trips_and_continues_as_megengine():
    # MegEngine 1.13 (mge.save({"model": m, "opt": opt}) after one Adam step, mge.load, two more steps) printed:
    ref_w = [[-0.01871104, 0.07137607, 0.14993306], [-0.16313973, -0.0704765, 0.02277844]]
    ref_b = [-0.10727262, -0.00957143]
    m = M.Linear(3, 2)
    m.load_state_dict({"weight": np.arange(6, dtype="float32").reshape(2, 3) * 0.1 - 0.2,
                       "bias": np.array([0.1, -0.1], "float32")})
    x = mge.tensor(np.arange(12, dtype="float32").reshape(4, 3) * 0.1 - 0.5)
    opt = optim.Adam(m.parameters(), lr=0.1)
    _adam_step(m, opt, x)
    buf = io.BytesIO()
    mge.save({"model": m, "opt": opt}, buf)
    # MegEngine's param groups are plain dicts and its Adam keeps one step count per parameter (its step()
    # advances each): the file holds them so, and MegEngine's optimizers carry _disable_type_convert
    names = _globals(buf.getvalue())
    assert ("builtins", "dict") in names and not [n for n in names if "ParamGroup" in n[1]]
    d = mge.load(io.BytesIO(buf.getvalue()), weights_only=False)
    m2, opt2 = d["model"], d["opt"]
    assert opt2._disable_type_convert is True
    assert [id(p) for p in opt2.param_groups[0]["params"]] == [id(p) for p in m2.parameters()]
    _adam_step(m2, opt2, x)
    _adam_step(m2, opt2, x)
    np.testing.assert_allclose(m2.weight.numpy(), ref_w, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(m2.bias.numpy(), ref_b, rtol=1e-5, atol=1e-7)
    assert {k: float(v["step"]) for k, v in opt2.state_dict()["state"].items()} == {0: 3.0, 1: 3.0}


def test_optimizer_pickles_and_deepcopies_with_live_param_groups():
    # a pickled / deep-copied optimizer failed (its groups notified an owner that did not exist yet)
    import copy
    import pickle
    w = mge.Parameter([1.0, 2.0])
    opt = optim.SGD([w], lr=0.1)
    for other in (pickle.loads(pickle.dumps(opt)), copy.deepcopy(opt)):
        group = other.param_groups[0]
        assert group._owner is other and group["lr"] == 0.1
        group["momentum"] = 0.9  # the group still tells its optimizer: the momentum slots appear
        assert list(other._state[group["params"][0]]) == ["momentum_buffer"]


def _quantized_net():
    from megxla.quantization import quantize, quantize_qat
    net = quantize_qat(M.Sequential(M.QuantStub(), M.ConvBnRelu2d(3, 4, 3, padding=1), M.Conv2d(4, 2, 1),
                                    M.DequantStub()))
    net(mge.tensor(np.linspace(-1, 1, 150, dtype="float32").reshape(2, 3, 5, 5)))  # calibrate the observers
    net.eval()
    z = quantize(net)
    z.eval()
    return z


def test_quantized_state_dict_is_megengine_layout():
    # MegEngine 1.13's quantized modules keep scales in dtypes: state_dict keys of
    # Sequential(QuantStub, ConvBnRelu2d, Conv2d, DequantStub) quantized are only these, and the int8 weight's
    # dtype metadata is {"mgb_dtype": {"name": "QuantizedS8", "scale": ...}} (which MegEngine needs to keep the
    # weight quantized when it loads the dict)
    z = _quantized_net()
    sd = z.state_dict()
    assert list(sd) == ["1.bias", "1.weight", "2.bias", "2.weight"]
    w = sd["1.weight"]
    assert w.dtype == np.int8
    mgb = w.dtype.metadata["mgb_dtype"]
    assert mgb["name"] == "QuantizedS8"
    np.testing.assert_allclose(mgb["scale"], float(z[1].weight_scale.numpy()), rtol=1e-7)
    # a dict in MegEngine's layout loads strict, the weight's scale included (as MegEngine takes it from the dtype)
    w2 = np.asarray(w).view(np.dtype("int8", metadata={"mgb_dtype": dict(mgb, scale=mgb["scale"] * 2)}))
    before = z[1].weight_scale.numpy().copy()
    z.load_state_dict(dict(sd, **{"1.weight": w2}), strict=True)
    np.testing.assert_allclose(z[1].weight_scale.numpy(), before * 2, rtol=1e-6)
    np.testing.assert_allclose(z[1].weight.qparams.scale.numpy(), before * 2, rtol=1e-6)
    buf = io.BytesIO()
    mge.save(z.state_dict(), buf)
    assert mge.load(io.BytesIO(buf.getvalue()))["1.weight"].dtype.metadata["mgb_dtype"]["name"] == "QuantizedS8"


def test_local_conv2d_of_an_int_input_is_computed_in_float32():
    # MegEngine 1.13 computes F.local_conv2d of an int32 input with a float weight (as F.conv2d): float32, the same
    # numbers as the float input's (megxla raised "input must be a float tensor"; found by a bad-call probe, s77)
    x = np.arange(32).reshape(1, 2, 4, 4)
    w = mge.tensor(np.random.RandomState(0).rand(1, 2, 2, 2, 3, 3, 5).astype("float32"))
    got = F.local_conv2d(mge.tensor(x.astype("int32")), w)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.numpy(), F.local_conv2d(mge.tensor(x.astype("float32")), w).numpy())
