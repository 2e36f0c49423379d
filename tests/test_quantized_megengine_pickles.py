"""Whole quantized models pickled by real MegEngine 1.13: loaded into megxla, they run and give MegEngine's outputs.

MegEngine's quantized modules pickle their ``__dict__``: the output dtype (a NumPy dtype whose metadata holds the
scale), the weight and bias (Parameters of quantized dtypes), Elemwise's ``method``, the float layer's settings --
none of the fields megxla derives from them (output scale Tensors, the float function of an Elemwise or a Concat,
a convolution's repr); unpickling derives them.

The fixtures were written by MegEngine 1.13.0 (CPU) with a script (not kept here, for the fixtures' size) that takes
the models of tests/data/megengine_qmodels.py (ConvNet: QuantStub, Conv2d, ConvRelu2d, ConvBn2d, ConvBnRelu2d,
ConvTranspose2d and its Bn / Relu variants, DequantStub; LinearNet: Linear, LinearRelu, LinearBn1d, LinearBnRelu1d;
OpsNet: Elemwise of 24 methods, Concat, BatchMatMulActivation) through ``quantize_qat``, four training-mode calls
(calibration), ``eval``, ``quantize``, ``eval``; saved together as ``{"conv": ..., "linear": ..., "ops": ...}``:

* megengine_quantized_models.pkl: ``mge.save(models, f)`` (the same bytes as ``pickle.dump(models, f)``: protocol 4);
* megengine_quantized_models_p2.pkl: ``pickle.dump(models, f, protocol=2)`` (other opcodes: copyreg.__newobj__);
* megengine_quantized_models.npz: the inputs (``<model>/x<i>``), every output of MegEngine's forward
  (``<model>/out/<key>``: the int8 storage of quantized ones) and MegEngine's repr of every module.

MegEngine 1.13's quantized transposed convolutions cannot run with a bias (NotImplementedError) or ReLU (an
assertion): their reference outputs are MegEngine's int32 accumulation (``conv_transpose2d`` to qint32), plus the
bias cast as MegEngine casts it, requantized by MegEngine's ``astype`` (then ReLU on the int8 values).
"""
import copy
import io
import os
import pickle

import numpy as np
import pytest

import megxla as mge
import megxla.module as M
import megxla.module.quantized as Q
from megxla.core.tensor import dtype
from megxla.quantization import quantize, quantize_qat

DATA = os.path.join(os.path.dirname(__file__), "data")
FILES = {"save": "megengine_quantized_models.pkl", "protocol2": "megengine_quantized_models_p2.pkl"}
with np.load(os.path.join(DATA, "megengine_quantized_models.npz")) as _f:
    REF = dict(_f)


@pytest.fixture
def models_path(monkeypatch):
    # the files name the models' classes by their module, megengine_qmodels: importable from tests/data
    monkeypatch.syspath_prepend(DATA)
    return lambda which: os.path.join(DATA, FILES[which])


def _load(path, how):
    if how == "megxla.load":
        return mge.load(path, weights_only=False)
    # plain pickle, with the ``megengine`` alias resolving MegEngine's classes to megxla's
    import megxla._alias as alias
    alias.install(force=True)
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    finally:
        alias.uninstall()


def _inputs(name):
    return [mge.Tensor(REF[f"{name}/x{i}"]) for i in range(2) if f"{name}/x{i}" in REF]


def _check_outputs(name, net):
    outs = net(*_inputs(name))
    expected = sorted(k[len(name) + 5:] for k in REF if k.startswith(name + "/out/"))
    assert sorted(outs) == expected
    for k, v in outs.items():
        ref = REF[f"{name}/out/{k}"]
        got = v.numpy()
        assert got.dtype == ref.dtype, k
        # int8 outputs: MegEngine's values exactly (no rounding tie came out differently here, not even in the
        # layers megxla computes in float32: the transposed convolutions, Elemwise, Concat)
        np.testing.assert_array_equal(got, ref, err_msg=f"{name}: {k}")
    return outs


@pytest.mark.parametrize("how", ["megxla.load", "pickle.load"])
@pytest.mark.parametrize("which", ["save", "protocol2"])
def test_megengine_quantized_models_run_as_megengine(models_path, which, how):
    models = _load(models_path(which), how)
    assert sorted(models) == ["conv", "linear", "ops"]
    for name, net in models.items():
        assert not net.training
        _check_outputs(name, net)
    conv, ops = models["conv"], models["ops"]
    assert type(conv.conv_bn_relu) is Q.ConvBnRelu2d and type(ops.e_add) is Q.Elemwise
    # the quantized dtypes' metadata became megxla's fields: the QuantStub's output scale, the weight's scale
    dt = conv.q.output_dtype
    assert float(conv.q.output_scale.numpy()) == np.float32(dt.metadata["mgb_dtype"]["scale"])
    assert conv.q.output_meta.name == "qint8" and conv.q.output_zero_point is None
    assert float(conv.conv.weight_scale.numpy()) == float(conv.conv.weight.qparams.scale.numpy())
    # MegEngine's attributes are kept as MegEngine wrote them
    assert ops.e_fuse_add_relu.method == "qfuse_add_relu" and ops.bmm.nonlinear_mode == "identity"


def test_megengine_quantized_reprs(models_path):
    models = _load(models_path("save"), "megxla.load")
    reprs = dict(zip(REF["repr_keys"], REF["repr_values"]))
    assert reprs["conv/conv"] == "Quantized.Conv2d(2, 4, kernel_size=(3, 3), padding=(1, 1))"
    for key, expected in reprs.items():
        name, _, path = key.partition("/")
        module = models[name] if not path else dict(models[name].named_modules())[path]
        assert repr(module) == expected, key  # ("conv/": the whole model's, with every child)


@pytest.mark.parametrize("how", ["deepcopy", "megxla.save"])
def test_loaded_models_pickle_again_in_megxla(models_path, how):
    # a loaded model is a working megxla one: deep copies and megxla's own pickles of it (Concat's and the fused
    # Elemwise modes' float functions are lambdas: never pickled, derived again) give the same outputs
    models = _load(models_path("save"), "megxla.load")
    if how == "deepcopy":
        back = copy.deepcopy(models)
    else:
        buf = io.BytesIO()
        mge.save(models, buf)
        back = mge.load(io.BytesIO(buf.getvalue()), weights_only=False)
    for name, net in back.items():
        _check_outputs(name, net)
        assert repr(net) == repr(models[name])


class _AddNet(M.Module):  # a model of megxla's (a class this file defines: pickled by name)
    def __init__(self):
        super().__init__()
        self.q, self.conv, self.add = M.QuantStub(), M.Conv2d(2, 3, 3, padding=1), M.Elemwise("fuse_add_relu")

    def forward(self, x):
        y = self.conv(self.q(x))
        return self.add(y, y)


def test_megxla_quantized_pickles_keep_their_fields():
    # a model quantized by megxla pickles its derived fields: loaded back as they were, not derived again
    net = quantize_qat(_AddNet())
    x = mge.Tensor(np.random.RandomState(0).standard_normal((1, 2, 4, 4)).astype("float32"))
    net(x)
    net.eval()
    qnet = quantize(net)
    qnet.eval()
    # (fields megxla pickles: kept, not derived again from the settings or the output dtype)
    qnet.conv._conv_info = "shown as set"
    qnet.conv.output_scale = mge.Tensor(np.float32(0.5))
    buf = io.BytesIO()
    mge.save(qnet, buf)
    back = mge.load(io.BytesIO(buf.getvalue()), weights_only=False)
    assert repr(back.conv) == "Quantized.Conv2d(shown as set)"
    assert float(back.conv.output_scale.numpy()) == 0.5 != dtype.get_scale(back.conv.output_dtype)
    np.testing.assert_array_equal(back(x).numpy(), qnet(x).numpy())
    # a file of megxla's holding the float function (as before it was left out) keeps it
    add = Q.Elemwise.__new__(Q.Elemwise)
    state = dict(Q.Elemwise("add", dtype.qint8(0.1)).__dict__)
    marker = state["_float_forward"] = lambda x, y: x - y
    add.__setstate__(state)
    assert add._float_forward is marker


def test_megengine_quantized_state_with_unknown_method_or_dtype_fails_to_load():
    state = dict(Q.Elemwise("add", dtype.qint8(0.1)).__dict__)
    for k in ("_float_forward", "output_meta", "output_scale", "output_zero_point"):
        del state[k]
    add = Q.Elemwise.__new__(Q.Elemwise)
    add.__setstate__(dict(state))  # MegEngine's state: derived
    assert add._float_forward is not None and float(add.output_scale.numpy()) == np.float32(0.1)
    with pytest.raises(pickle.UnpicklingError, match="unknown method 'qsigmoid_grad'"):
        Q.Elemwise.__new__(Q.Elemwise).__setstate__(dict(state, method="qsigmoid_grad"))
    with pytest.raises(pickle.UnpicklingError, match="dtype must be a quantized dtype"):
        Q.Elemwise.__new__(Q.Elemwise).__setstate__(dict(state, output_dtype=np.dtype("float32")))
