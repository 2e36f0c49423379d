"""The lower-level quantization API as MegEngine 1.13's: ``core.tensor.dtype`` (``QuantDtypeMeta``, quantized
dtypes' metadata, ``get_scale`` / ``get_zero_point`` errors, the ``convert_*`` functions, ``is_dtype_equal``),
``quantization.utils`` (``QParams`` reprs, ``create_qparams``) and ``F.quantized.conv_transpose2d``'s bias.

The expected values were printed by MegEngine 1.13.0 (CPU, probes under /tmp/s79/quant); MegEngine is not needed
here.
"""
import copy
import pickle

import numpy as np
import pytest

import megxla as mge
import megxla.functional.quantized as FQ
from megxla.core.tensor import dtype as D
from megxla.quantization import utils as U


# ---- QuantDtypeMeta --------------------------------------------------------------------------------------------
def test_quant_dtype_meta_is_an_immutable_namedtuple():
    m = D._builtin_quant_dtypes["qint8"]
    # MegEngine: AttributeError "can't set attribute"; megxla's set it, changing every later qint8 dtype's range
    with pytest.raises(AttributeError):
        m.qmin = 3
    assert m.qmin == -128 and D._builtin_quant_dtypes["qint8"].qmin == -128
    # MegEngine's values: a tuple of its six fields
    assert isinstance(m, tuple) and len(m) == 6 and m[0] == "qint8"
    assert tuple(m) == ("qint8", "QuantizedS8", "int8", -128, 127, False)
    assert m == ("qint8", "QuantizedS8", "int8", -128, 127, False)
    assert m._fields == ("name", "cname", "np_dtype_str", "qmin", "qmax", "is_unsigned")
    assert dict(m._asdict())["qmax"] == 127
    assert repr(m._replace(name="x")) == ("QuantDtypeMeta(name='x', cname='QuantizedS8', np_dtype_str='int8', "
                                          "qmin=-128, qmax=127, is_unsigned=False)")
    assert copy.copy(m) is m and copy.deepcopy(m) is m and pickle.loads(pickle.dumps(m)) == m


def test_quant_dtype_meta_keeps_its_fields_as_given():
    # MegEngine: no range check, fields kept as given, a non-string storage type asserts
    assert repr(D.QuantDtypeMeta("a", "QuantizedS8", "int8", 5, 1)) == (
        "QuantDtypeMeta(name='a', cname='QuantizedS8', np_dtype_str='int8', qmin=5, qmax=1, is_unsigned=False)")
    assert D.QuantDtypeMeta("a", "QuantizedS8", "int8", -3, 3, 1).is_unsigned == 1
    with pytest.raises(AssertionError):
        D.QuantDtypeMeta("a", "QuantizedS8", 3, -3, 3)


# ---- quantized dtypes ------------------------------------------------------------------------------------------
def test_quantized_dtype_metadata_is_megengine_s():
    # MegEngine printed these metadata (megxla's also had zero_point None / qmin / qmax / meta_name)
    assert dict(D.qint8(0.1).metadata) == {"mgb_dtype": {"name": "QuantizedS8", "scale": 0.1}}
    assert dict(D.qint32(0.1).metadata) == {"mgb_dtype": {"name": "QuantizedS32", "scale": 0.1}}
    assert dict(D.qint4(0.1).metadata) == {"mgb_dtype": {"name": "QuantizedS4", "scale": 0.1}}
    assert dict(D.qint1(0.1).metadata) == {"mgb_dtype": {"name": "QuantizedS1", "scale": 0.1}}
    assert dict(D.quint8(0.1, 3).metadata) == {"mgb_dtype": {"name": "Quantized8Asymm", "scale": 0.1,
                                                             "zero_point": 3}}
    assert dict(D.quint4(0.1, 3.0).metadata) == {"mgb_dtype": {"name": "Quantized4Asymm", "scale": 0.1,
                                                               "zero_point": 3}}
    y = mge.Tensor(np.array([1.0, 2.0, -3.0], "float32")).astype(D.qint8(0.5))
    assert y.numpy().tolist() == [2, 4, -6]
    assert dict(y.dtype.metadata) == {"mgb_dtype": {"name": "QuantizedS8", "scale": 0.5}}
    assert dict(y.numpy().dtype.metadata) == {"mgb_dtype": {"name": "QuantizedS8", "scale": 0.5}}


def test_narrow_dtype_still_knows_its_meta():
    # a qint8_narrow or custom dtype shares QuantizedS8, so megxla's names its meta for the tensor's qparams (its
    # metadata's one key MegEngine's has not); MegEngine printed [0.25, -0.75] for the custom one (megxla's raised
    # KeyError: it looked the name up among the builtin metas)
    narrow = D._builtin_quant_dtypes["qint8_narrow"]
    dt = D.create_quantized_dtype(narrow, 0.5, None)
    assert dt.metadata["mgb_dtype"]["name"] == "QuantizedS8" and D.get_scale(dt) == 0.5
    assert mge.Tensor(np.array([1, -3]), dtype=dt).qparams.dtype_meta is narrow
    custom = D.QuantDtypeMeta("my_s79", "QuantizedS8", "int8", -10, 10)
    t = mge.Tensor(np.array([1, -3]), dtype=D.create_quantized_dtype(custom, 0.25, None))
    assert t.qparams.dtype_meta == custom and t.astype("float32").numpy().tolist() == [0.25, -0.75]


def test_create_quantized_dtype_errors():
    # MegEngine's messages
    with pytest.raises(ValueError, match="without cname attr is not supported"):
        D.create_quantized_dtype(D._builtin_quant_dtypes["quint2"], 0.1, 1)
    with pytest.raises(ValueError, match="without cname attr is not supported"):
        D.create_quantized_dtype(D._builtin_quant_dtypes["qint2"], 0.1, None)
    with pytest.raises(ValueError, match=r"^zero_point should be an integer$"):
        D.quint8(0.1, 3.5)
    with pytest.raises(ValueError, match=r"^zero_point should be within \[0, 255\] for quint8$"):
        D.quint8(0.1, 256)


def test_get_scale_and_zero_point_raise_runtime_error():
    # MegEngine's C++ raises RuntimeError ("expect quantize dtype", 'expect name to be "Quantized8Asymm" or
    # "Quantized4Asymm", got QuantizedS8'); megxla's raised ValueError (still caught as one)
    with pytest.raises(RuntimeError, match="expect quantize dtype"):
        D.get_scale(np.dtype("int8"))
    with pytest.raises(RuntimeError, match="expect quantize dtype"):
        D.get_zero_point("int8")
    with pytest.raises(RuntimeError, match='expect name to be "Quantized8Asymm" or "Quantized4Asymm", got '
                                           'QuantizedS8'):
        D.get_zero_point(D.qint8(0.1))
    with pytest.raises(ValueError):
        D.get_zero_point(D.qint32(0.1))


def test_is_dtype_equal_and_is_differentible_dtype():
    # MegEngine printed: True False False False True True True False True False True False True True
    pairs = [(D.qint8(0.1), D.qint8(0.1)), (D.qint8(0.1), D.qint8(0.2)), (D.qint8(0.1), np.int8),
             (np.int8, D.qint8(0.1)), (np.dtype("int8"), np.int8), (np.float32, "float32"), ("float32", "float32"),
             (np.float32, np.float16), (D.quint8(0.1, 3), D.quint8(0.1, 3)), (D.quint8(0.1, 3), D.quint8(0.1, 4)),
             (D.qint8(0.1), D.qint4(0.1)), (D.qint8(np.float32(0.1)), D.qint8(0.1)),
             (D.create_quantized_dtype(D._builtin_quant_dtypes["qint8_narrow"], 0.1, None), D.qint8(0.1)),
             (D.bfloat16, D.bfloat16)]
    assert [D.is_dtype_equal(a, b) for a, b in pairs] == [True, False, False, False, True, True, True, False, True,
                                                          False, True, False, True, True]
    with pytest.raises(ValueError, match="null PyObject"):
        D.is_dtype_equal(np.float32, None)
    # MegEngine printed: True True False True False True False False
    kinds = [np.float32, np.float16, np.int32, D.bfloat16, "float32", np.dtype("float32"), D.qint8(0.1), np.float64]
    assert [D.is_differentible_dtype(k) for k in kinds] == [True, True, False, True, False, True, False, False]


def test_get_dtype_bit_of_an_unknown_name_asserts():
    with pytest.raises(AssertionError, match="Unsupport dtype name"):  # MegEngine's message
        D.get_dtype_bit("abc")
    assert D.get_dtype_bit("bfloat16") == 16 and D.get_dtype_bit("qint8_narrow") == 8


# ---- convert_to_* / convert_from_* -----------------------------------------------------------------------------
_X = np.array([-300.0, -64.3, -1.25, -0.75, -0.25, 0.0, 0.25, 0.26, 0.75, 1.25, 2.5, 63.6, 300.0], "float32")


def test_convert_functions_check_the_megbrain_name():
    u8 = D.convert_to_quint8(_X, D.quint8(0.5, 1))
    # MegEngine: ValueError; megxla's dequantized the quint8 array as a qint8 one
    with pytest.raises(ValueError, match=r"^arr's dtype should be a QuantDtypeMeta\(name='qint8', "):
        D.convert_from_qint8(u8)
    with pytest.raises(ValueError, match=r"^dtype parameter should be a QuantDtypeMeta\(name='qint8', "):
        D.convert_to_qint8(_X, D.quint8(0.5, 1))
    with pytest.raises(ValueError, match=r"^dtype parameter should be a QuantDtypeMeta\(name='qint8', "):
        D.convert_to_qint8(_X, np.dtype("int8"))
    with pytest.raises(ValueError, match=r"^arr's dtype should be a QuantDtypeMeta\(name='quint4', "):
        D.convert_from_quint4(np.array([1, 2], "int8"))


def test_convert_to_qint8_of_a_narrow_dtype_clips_to_qint8():
    # MegEngine: any QuantizedS8 dtype, clipped to qint8's [-128, 127] (megxla's clipped to the narrow -127)
    narrow = D.create_quantized_dtype(D._builtin_quant_dtypes["qint8_narrow"], 0.5, None)
    q = D.convert_to_qint8(_X, narrow)
    assert q.tolist() == [-128, -128, -2, -2, 0, 0, 0, 1, 2, 2, 5, 127, 127]
    assert dict(q.dtype.metadata)["mgb_dtype"]["name"] == "QuantizedS8"
    assert D.convert_from_qint8(q)[:3].tolist() == [-64.0, -64.0, -1.0]


# ---- quantization.utils ----------------------------------------------------------------------------------------
def test_qparams_subclass_repr_says_qparams():
    meta = D._builtin_quant_dtypes["qint8"]
    p = U.LSQParams(U.QuantMode.SYMMERTIC, meta, mge.Tensor(0.5), None, mge.Tensor(0.1))
    # MegEngine printed (its repr names QParams whatever the class)
    assert repr(p) == ("QParams(mode=QuantMode.SYMMERTIC, dtype_meta=QuantDtypeMeta(name='qint8', "
                       "cname='QuantizedS8', np_dtype_str='int8', qmin=-128, qmax=127, is_unsigned=False), "
                       "scale=Tensor(0.5, device=xpux:0), zero_point=None, grad_scale=Tensor(0.1, device=xpux:0))")


def test_create_qparams_errors():
    with pytest.raises(KeyError, match="qint9"):  # MegEngine: KeyError 'qint9'
        U.create_qparams(U.QuantMode.SYMMERTIC, "qint9")
    with pytest.raises(AssertionError):  # MegEngine: assert isinstance(mode, QuantMode)
        U.create_qparams(1, "qint8")
    assert U.create_qparams(None, "qint8").mode is None


def test_get_quantized_dtype_of_per_channel_parameters_raises():
    class Holder(U.QParamsModuleMixin):
        def __init__(self, q):
            self.q = q

        def get_qparams(self):
            return self.q

    # MegEngine: TypeError "only size-1 arrays can be converted to Python scalars"; megxla's took the first scale
    with pytest.raises(TypeError, match="only size-1 arrays"):
        Holder(U.create_qparams(U.QuantMode.SYMMERTIC, "qint8", mge.Tensor([0.5, 0.25]))).get_quantized_dtype()
    dt = Holder(U.create_qparams(U.QuantMode.ASYMMERTIC, "quint8", mge.Tensor([0.5]), mge.Tensor([3.4])))
    # MegEngine printed {'mgb_dtype': {'name': 'Quantized8Asymm', 'scale': 0.5, 'zero_point': 3}}
    assert dict(dt.get_quantized_dtype().metadata) == {"mgb_dtype": {"name": "Quantized8Asymm", "scale": 0.5,
                                                                     "zero_point": 3}}


# ---- F.quantized -----------------------------------------------------------------------------------------------
def test_quantized_conv_transpose2d_adds_the_bias_integers():
    # (MegEngine raises NotImplementedError for a bias; megxla adds it to the int32 accumulator -- its qint32 bias
    # was added as a quantized tensor, reading the accumulator's integers as real values: 2000 times the sum)
    rng = np.random.RandomState(1)
    x = mge.Tensor(rng.randn(1, 2, 3, 3).astype("float32")).astype(D.qint8(0.05))
    w = mge.Tensor((rng.randn(2, 3, 2, 2) * 0.3).astype("float32")).astype(D.qint8(0.01))
    acc = FQ.conv_transpose2d(x, w, dtype=None).numpy()
    b = np.array([0.01, -0.02, 0.5], "float32").reshape(1, 3, 1, 1)
    for bias in (mge.Tensor(b).astype(D.qint32(0.0005)), mge.Tensor(b)):
        out = FQ.conv_transpose2d(x, w, bias, dtype=None)
        assert D.get_scale(out.dtype) == pytest.approx(0.0005)
        np.testing.assert_array_equal(out.numpy() - acc, np.broadcast_to(np.array([20, -40, 1000]).reshape(1, 3, 1, 1),
                                                                         acc.shape))
    zero = mge.Tensor(np.zeros((1, 3, 1, 1), "float32")).astype(D.qint32(0.0005))
    np.testing.assert_array_equal(FQ.conv_transpose2d(x, w, zero, dtype=D.qint8(0.1)).numpy(),
                                  FQ.conv_transpose2d(x, w, dtype=D.qint8(0.1)).numpy())
