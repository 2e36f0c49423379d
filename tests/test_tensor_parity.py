"""Tensor object semantics against MegEngine 1.13: each expected value below is what MegEngine 1.13 (CPU) printed
for the same program (differential probes, /tmp/h5core). Devices, pickling, copies, formatting, operand dtypes,
conversions and indexing forms."""
import copy
import pickle

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla import Parameter, Tensor
from megxla.core.dtypes import CompNode
from megxla.core.tensor import dtype as D


@pytest.fixture
def default_device():
    yield
    mge.set_default_device("xpux")


# ---- logical device names --------------------------------------------------------------------------------------
def test_logical_device_follows_to_and_ops():
    x = Tensor([1, 2, 3])
    c = x.to("cpu0")
    # MegEngine: Tensor([1 2 3], dtype=int32, device=cpu0:0); results of ops keep their inputs' comp node
    assert repr(c) == "Tensor([1 2 3], dtype=int32, device=cpu0:0)"
    assert c.device.logical_name == "cpu0:0" and repr(c.device) == 'CompNode("cpu0:0" from "cpu0:0")'
    for y in (c + 1, 1 + c, c.sum(), c[0], c.astype("float32"), c.reshape(1, 3), F.relu(c), c.detach(),
              F.zeros_like(c), Tensor(c), copy.copy(c), copy.deepcopy(c)):
        assert str(y.device) == "cpu0:0", y
    assert repr(x.to("cpux")) == "Tensor([1 2 3], dtype=int32, device=cpux:0)"
    assert repr(x.to("cpu1")) == "Tensor([1 2 3], dtype=int32, device=cpu1:0)"
    assert repr(Tensor([1.0], device="cpu0:1")) == "Tensor([1.], device=cpu0:1)"
    assert repr(Tensor([1.0], device="cpu1") + Tensor([1.0], device="cpu1")) == "Tensor([2.], device=cpu1:0)"
    assert str(x.device) == "xpux:0" and str(c.to("xpux").device) == "xpux:0"
    assert str(Tensor(c, device="xpux").device) == "xpux:0"


def test_logical_device_of_creation_functions():
    assert repr(F.copy(Tensor([1, 2, 3]), "cpu0")) == "Tensor([1 2 3], dtype=int32, device=cpu0:0)"
    assert repr(F.zeros(2, device="cpu0")) == "Tensor([0. 0.], device=cpu0:0)"
    assert repr(F.full((2,), 3, device="cpu0")) == "Tensor([3 3], dtype=int32, device=cpu0:0)"
    assert repr(F.concat([Tensor([1.]), Tensor([2.])], device="cpu0")) == "Tensor([1. 2.], device=cpu0:0)"
    assert repr(Parameter([1.0], device="cpu0") * 2) == "Tensor([2.], device=cpu0:0)"


def test_logical_device_in_place_and_gradients():
    y = Tensor([1.0, 2.0], device="cpu0")
    y[0] = 5.0
    assert repr(y) == "Tensor([5. 2.], device=cpu0:0)"
    y += 1
    assert str(y.device) == "cpu0:0"
    w = Parameter([1.0, 2.0], device="cpu0")
    gm = mge.autodiff.GradManager().attach([w])
    with gm:
        gm.backward((w * w).sum())
    assert repr(w.grad) == "Tensor([2. 4.], device=cpu0:0)"


def test_default_device_names(default_device):
    s = Tensor([1.0, 2.0], device="cpu0")
    mge.set_default_device("cpu0")
    assert repr(Tensor([1.0])) == "Tensor([1.], device=cpu0:0)"
    assert repr(F.ones(2)) == "Tensor([1. 1.], device=cpu0:0)"
    mge.set_default_device("xpux")
    assert repr(Tensor([1.0])) == "Tensor([1.], device=xpux:0)" and repr(s + 1) == "Tensor([2. 3.], device=cpu0:0)"
    mge.set_default_device("cpux")
    a = Tensor([3.0])
    mge.set_default_device("xpux")
    # a tensor keeps the device it was made on; new ones take the default again
    assert (repr(a), repr(a * 2), repr(F.ones(1))) == (
        "Tensor([3.], device=cpux:0)", "Tensor([6.], device=cpux:0)", "Tensor([1.], device=xpux:0)")


def test_compnode_compares_logical_names():
    x = Tensor([1.0])
    c = x.to("cpu0")
    # MegEngine: True, True, False, False / True, True, False, False, False
    assert (x.device == "xpux", x.device == "xpux:0", x.device == "cpu0", x.device == "cpux") == (
        True, True, False, False)
    assert (c.device == "cpu0", c.device == "cpu0:0", c.device == "xpux", c.device == "cpux",
            c.device == x.device) == (True, True, False, False, False)
    assert x.to("cpux").device == "cpux" and x.to("cpux").device != "cpu0"
    assert CompNode("cpu0") == CompNode("cpu0:0") and CompNode("cpu0") != CompNode("xpux")
    assert hash(CompNode("cpu0")) == hash(CompNode("cpu0:0"))
    assert x.device == Tensor([2.0]).device and x.device != 1


# ---- pickling and copies ---------------------------------------------------------------------------------------
def test_getnewargs_and_getstate():
    args = Tensor([1]).__getnewargs__()
    assert len(args) == 7 and isinstance(args[0], np.ndarray) and args[1] == np.int32 and args[2] == "xpux:0"
    assert args[3:] == (False, False, None, "default")  # (MegEngine 1.13.4's upstream test_serialization)
    assert Tensor([1], device="cpu0").__getnewargs__()[2] == "cpu0:0"
    assert Tensor([1]).__getstate__() == {}
    t = Tensor([1.0])
    t.qparams  # noqa: B018  (MegEngine: reading qparams makes them, and then they are pickled)
    assert list(t.__getstate__()) == ["qparams"]


@pytest.mark.parametrize("proto", [2, 3, 4, 5])
def test_pickle_protocols(proto):
    r = pickle.loads(pickle.dumps(Tensor([1, 2], device="cpu0"), protocol=proto))
    assert repr(r) == "Tensor([1 2], dtype=int32, device=cpu0:0)" and r.device.logical_name == "cpu0:0"
    assert type(pickle.loads(pickle.dumps(Parameter([1.0, 2.0]), protocol=proto))) is Parameter
    assert pickle.loads(pickle.dumps(Tensor([1.0, 2.0], dtype="float16"), protocol=proto)).dtype == np.float16
    assert pickle.loads(pickle.dumps(Tensor([1, 2], dtype="uint8"), protocol=proto)).dtype == np.uint8
    q = Tensor([1.0, 2.5]).astype(D.qint8(0.1))
    r = pickle.loads(pickle.dumps(q, protocol=proto))
    # MegEngine: Tensor([10 25], dtype=qint8(0.1), device=xpux:0); as float: [1. 2.5]
    assert repr(r) == repr(q) and str(r.dtype) == str(q.dtype)
    np.testing.assert_allclose(r.astype("float32").numpy(), [1.0, 2.5], rtol=1e-6)


def test_copies_keep_device_and_quantized_dtype():
    c = Tensor([1.0, 2.0], device="cpu0")
    assert str(copy.copy(c).device) == "cpu0:0" and str(copy.deepcopy(c).device) == "cpu0:0"
    assert type(copy.deepcopy(Parameter([1.0]))) is Parameter and type(copy.copy(Parameter([1.0]))) is Parameter
    q = Tensor([1.0, 2.5]).astype(D.qint8(0.1))
    assert str(copy.copy(q).dtype) == str(q.dtype) == str(copy.deepcopy(q).dtype)
    x = Tensor([1.0, 2.0])
    x.grad = Tensor([3.0, 4.0])
    assert copy.deepcopy(x).grad is None and copy.copy(x).grad is None and pickle.loads(pickle.dumps(x)).grad is None


# ---- printing ------------------------------------------------------------------------------------------------
def test_format_without_spec_is_str():
    # MegEngine: "{}".format(Tensor(1.5)) == 'Tensor(1.5, device=xpux:0)'
    assert "{}".format(Tensor(1.5)) == "Tensor(1.5, device=xpux:0)"
    assert f"{Tensor([1.5, 2])}" == "Tensor([1.5 2. ], device=xpux:0)"
    assert f"{Tensor(1.5):.2f}" == "1.50"  # (MegEngine raises for a spec; the number's format is kept)


# ---- operand dtypes and conversions ------------------------------------------------------------------------------
def test_list_operand_takes_the_tensor_dtype():
    # MegEngine converts a list operand to the tensor's dtype
    for dt in ("uint8", "int8", "int32"):
        x = Tensor([1, 0], dtype=dt)
        r = x + [1.5, 2]
        assert r.dtype == np.dtype(dt) and r.numpy().tolist() == [2, 2]
        assert ([1.5, 2] * x).numpy().tolist() == [1, 0]
        assert (x < [1.5, 2]).numpy().tolist() == [False, True]
        assert F.maximum(x, [[1.5], [2.5]]).numpy().tolist() == [[1, 1], [2, 2]]
    assert (Tensor([1, 2]) + [1.5, 2]).numpy().tolist() == [2, 4]
    b = Tensor([1, 0], dtype="bool")
    assert (b < [1.5, 2]).numpy().tolist() == [False, True] and (b < [300, -1]).numpy().tolist() == [False, True]
    assert (Tensor([1.0, 2.0]) + [1, 2]).dtype == np.float32


def test_float16_division_is_correctly_rounded():
    r = Tensor([-1.5, 2.25, 3.0], dtype="float16") / 2.5
    # MegEngine: [-0.6 0.9 1.2] (float16 -0.6001, 0.9, 1.2)
    assert r.dtype == np.float16
    np.testing.assert_array_equal(r.numpy(), np.array([-0.6, 0.9, 1.2], np.float16))


def test_float_to_narrow_int_wraps_as_megengine():
    assert Tensor([-1.5, 300.7, 255.5]).astype("uint8").numpy().tolist() == [255, 44, 255]
    assert Tensor([-1.5, 300.7, 127.5, -128.7]).astype("int8").numpy().tolist() == [-1, 44, 127, -128]
    assert Tensor([-7.5, 5.25, 2.0]).astype("uint8").numpy().tolist() == [249, 5, 2]
    assert Tensor([-1.5, 2.25, 3.0], dtype="float16").astype("uint8").numpy().tolist() == [255, 2, 3]
    y = Tensor(np.zeros((2, 2), "uint8"))
    y[0] = -1.5
    assert y.numpy().tolist() == [[255, 255], [0, 0]]


# ---- indexing --------------------------------------------------------------------------------------------------
def _x():
    return Tensor(np.arange(60, dtype="float32").reshape(3, 4, 5))


def test_list_with_non_int_items_is_a_tuple_of_indices():
    x = _x()
    # MegEngine (NumPy < 1.23's rule): shapes (2, 5), (5,), (4, 5), (2, 5), (3, 5), (1, 4, 5), (2,)
    assert x[[[0, 1], [1, 2]]].numpy().tolist() == [list(range(5, 10)), list(range(30, 35))]
    assert x[[Tensor(0), Tensor(2)]].numpy().tolist() == list(range(10, 15))
    assert x[[Tensor(1)]].shape == (4, 5) and x[[np.array([0, 1]), np.array([1, 2])]].shape == (2, 5)
    assert x[[slice(None), 0]].shape == (3, 5) and x[[0, None]].shape == (1, 4, 5)
    assert x[[[0, 1], [1, 2], [0, 0]]].numpy().tolist() == [5.0, 30.0]
    # a list of Python ints (or bools) stays an array index
    assert x[[0]].shape == (1, 4, 5) and x[[True, False, True]].shape == (2, 4, 5)


def test_bool_scalar_indices():
    x = _x()
    # MegEngine: (1, 3, 4, 5), (0, 4, 5), (3, 4, 5, 1); a NumPy bool or 0-d bool tensor indexes as the int
    assert x[True].shape == (1, 3, 4, 5) and x[0, False].shape == (0, 4, 5) and x[..., True].shape == (3, 4, 5, 1)
    assert x[np.bool_(True)].numpy().tolist() == x[1].numpy().tolist()
    assert x[Tensor(True)].numpy().tolist() == x[1].numpy().tolist()


def test_bad_index_expressions_raise_index_error():
    x = _x()
    for bad in (1.5, "a", {}, (0, 0, 0, 0), (..., ...), [0.5], slice(1.0, 2), slice(None, None, 0),
                np.array([False, False, False, True]), Tensor([1.0, 0.0])):
        with pytest.raises(IndexError):
            x[bad]
        with pytest.raises(RuntimeError):  # (MegEngine raises RuntimeError for most of them)
            x[bad]
    with pytest.raises(IndexError, match="out of range"):
        x[3]
    with pytest.raises(IndexError):
        x["a"] = 1.0
    assert x.numpy().tolist() == _x().numpy().tolist()  # a failed write changes nothing


def test_advanced_index_values():
    x = _x()
    # literal MegEngine values
    assert x[[0, 1], :, [1, 2]].numpy().tolist() == [[1, 6, 11, 16], [22, 27, 32, 37]]
    assert x[:, [0, 1], [1, 2]].numpy().tolist() == [[1, 7], [21, 27], [41, 47]]
    assert x[[0, 1], None, [1, 2]].shape == (2, 1, 5)
    assert x[..., Tensor([True, False, True, False, True])].shape == (3, 4, 3)
    assert x[Tensor([2, -1], dtype="int16"), 0].numpy().tolist() == [[40, 41, 42, 43, 44]] * 2
    assert x[::-2, 0, 0].numpy().tolist() == [40.0, 0.0]
    y = _x()
    y[[0, 1], :, [1, 2]] = Tensor([9.0, 8.0, 7.0, 6.0])
    assert y[0, :, 1].numpy().tolist() == [9, 8, 7, 6] and y[1, :, 2].numpy().tolist() == [9, 8, 7, 6]
    z = Tensor(np.zeros((3, 4, 5), "int32"))
    z[0] = Tensor(np.full((4, 5), 2.7, "float32"))
    assert z[0].numpy().max() == 2 and z.dtype == np.int32


# ---- megengine.core.tensor.utils ---------------------------------------------------------------------------------
def test_convert_inputs_and_promotion_helpers():
    from megxla.core.tensor.utils import convert_inputs, dtype_promotion, get_device, result_type
    # MegEngine: every input converted to the common dtype, on the first tensor's device
    a, b = convert_inputs(Tensor([1, 2]), 1.5)
    assert (a.dtype, b.dtype, b.numpy().item()) == (np.float32, np.float32, 1.5)
    a, b = convert_inputs(Tensor([1], dtype="int8"), np.array([1, 2], "int32"))
    assert a.dtype == b.dtype == np.int32
    a, b = convert_inputs(Tensor([1], device="cpu0"), 3)
    assert repr(b) == "Tensor(3, dtype=int32, device=cpu0:0)"
    assert [dtype_promotion(i) for i in ([Tensor([1]), 1.5], [Tensor([1], dtype="int8"), 1], [1, 2.5])] == [
        np.float32, np.int8, np.float32]
    assert str(get_device([1, Tensor([1], device="cpu0")])) == "cpu0:0" and str(get_device([1, 2])) == "xpux:0"
    assert result_type(Tensor([1]), np.float32) == np.float64 and result_type(Tensor([1]), 1.5) == np.int32


def test_zero_dim_repr_is_numpy1_scalar_str():
    # MegEngine (NumPy 1.23) prints a 0-d tensor with its scalar's str
    assert repr(Tensor(2000.0, dtype="float16")) == "Tensor(2000.0, dtype=float16, device=xpux:0)"
    assert repr(Tensor(65504.0, dtype="float16")) == "Tensor(65500.0, dtype=float16, device=xpux:0)"
    assert repr(Tensor(1e8)) == "Tensor(100000000.0, device=xpux:0)"
    assert repr(Tensor(1e17)) == "Tensor(1e+17, device=xpux:0)" and repr(Tensor(1e-5)) == "Tensor(1e-05, device=xpux:0)"
    assert repr(Tensor(1 / 3)) == "Tensor(0.33333334, device=xpux:0)" and repr(Tensor(-0.0)) == "Tensor(-0.0, device=xpux:0)"
    assert repr(Tensor(True)) == "Tensor(True, dtype=bool, device=xpux:0)" and repr(Tensor(7)) == \
        "Tensor(7, dtype=int32, device=xpux:0)"
    assert repr(Tensor([2000.0, 1.0], dtype="float16")) == "Tensor([2.e+03 1.e+00], dtype=float16, device=xpux:0)"


def test_compnode_memory_queries_are_properties():
    c = Tensor([1.0]).device
    # MegEngine's CPU: get_mem_status_bytes == (total, free) host bytes; allocator counters 0
    total, free = c.get_mem_status_bytes
    assert total >= free > 0
    assert isinstance(c.get_used_memory, int) and isinstance(c.get_max_reserved_memory, int)
    assert CompNode._get_default_device() == "xpux" and CompNode._sync_all() is None


def test_setitem_reads_lists_and_bools_as_megengine_setitem():
    # MegEngine's setitem reads any list as an array of indices and a Python bool as the int (its getitem
    # differs: see test_list_with_non_int_items_is_a_tuple_of_indices)
    def written(idx):
        z = Tensor(np.zeros((3, 3), "float32"))
        z[idx] = 1.0
        return z.numpy().tolist()
    assert written([[0, 1], [1, 2]]) == [[1.0] * 3] * 3
    assert written([Tensor(0), Tensor(2)]) == [[1.0] * 3, [0.0] * 3, [1.0] * 3]
    assert written([np.int64(0), np.int64(2)]) == [[1.0] * 3, [0.0] * 3, [1.0] * 3]
    assert written(True) == [[0.0] * 3, [1.0] * 3, [0.0] * 3] and written(False) == [[1.0] * 3, [0.0] * 3, [0.0] * 3]
    with pytest.raises(RuntimeError):  # (MegEngine: RuntimeError)
        written([slice(None), 0])


def test_tensor_copies_numpy_data():
    # MegEngine's Tensor copies its data: writing the source array afterwards does not change it (JAX's CPU
    # client can alias a suitably aligned NumPy buffer, so several arrays are tried)
    # (200: past the count after which a shape made again and again takes the jitted path, core/dtypes.py)
    for dtype in ("float32", "int32", "float16", "bool", "uint8"):
        for i in range(200 if dtype == "float32" else 80):
            a = np.ones(1024, dtype)
            x = Tensor(a)
            a[0] = 0
            assert x.numpy()[0] == 1 and x.dtype == np.dtype(dtype) and x.shape == (1024,)
    # a Tensor made inside a trace from host data of a hot shape is that data, at every call
    from megxla.jit import trace
    @trace(symbolic=True)
    def f(x):
        return x + Tensor(np.full(1024, 2.0, np.float32))
    for _ in range(3):
        assert f(Tensor(np.ones(1024, np.float32))).numpy().tolist() == [3.0] * 1024


def test_np_array_of_a_tensor_is_a_writable_copy():
    # MegEngine: np.array(t) is a copy the program may write; np.asarray(t) and t.numpy() the read-only view
    x = Tensor(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    a = np.array(x)
    a[0, 0] = 9.0
    assert a.flags.writeable and x.numpy()[0, 0] == 1.0
    assert not np.asarray(x).flags.writeable
    assert np.array(x, dtype="int32").tolist() == [[1, 2], [3, 4]]


def test_save_load_keeps_quantization_parameters():
    import io
    # MegEngine: mge.save / mge.load keep a tensor's qparams (its pickled state) and a quantized dtype's scale
    a = Tensor(0)
    a.qparams.scale = Tensor(1.0)
    buf = io.BytesIO()
    mge.save({"a": a, "q": Tensor([1.0, 2.5]).astype(D.qint8(0.1))}, buf)
    r = mge.load(io.BytesIO(buf.getvalue()))  # (the default weights_only load accepts the QParams data)
    assert isinstance(r["a"].qparams.scale, Tensor) and float(r["a"].qparams.scale) == 1.0
    assert repr(r["q"]) == "Tensor([10 25], dtype=int8, device=xpux:0)"
    assert abs(D.get_scale(r["q"].dtype) - 0.1) < 1e-7


def test_a_1d_bool_index_of_another_length_is_its_true_positions():
    # MegEngine 1.13 checks only masks of 2+ dimensions against the shape; a 1-d mask is its true positions (CondTake
    # indices), so a shorter mask indexes the first entries -- computed with MegEngine 1.13.0: x[[True, False]] has
    # shape (1, 4, 5), and the ASR Transformer's ``kl[..., ignore] = 0`` (kl (6, 10), a mask of 6) zeroes columns
    # 1, 4, 5. A true position past the axis is an IndexError (MegEngine aborts the process there).
    x = _x()
    for mask in (np.array([True, False]), Tensor([True, False])):
        assert x[mask].numpy().tolist() == x[[0]].numpy().tolist()
    assert x[:, Tensor([False, True, True])].numpy().tolist() == x[:, [1, 2]].numpy().tolist()
    kl = Tensor(np.arange(60, dtype="float32").reshape(6, 10))
    kl[..., Tensor(np.array([0, 1, 0, 0, 1, 1], bool))] = 0
    want = np.arange(60, dtype="float32").reshape(6, 10)
    want[:, [1, 4, 5]] = 0
    assert kl.numpy().tolist() == want.tolist()
    with pytest.raises(IndexError):
        x[np.array([False, False, False, True])]


def test_a_tensor_takes_python_attributes_as_megengines():
    # (probe M) MegEngine's Tensor has no __slots__: ppgan's gradient tests set ``ws.stop_gradient = False`` on
    # an input, other code tags activations
    for t in (Tensor([1.0, 2.0]), Tensor([1.0]) * 2, mge.Parameter([1.0])):
        t.stop_gradient = False
        t.tag = "x"
        assert t.stop_gradient is False and t.tag == "x"
    assert not hasattr(Tensor([1.0]), "tag")


def test_requires_grad_is_reserved_as_in_megengine():
    # MegEngine 1.13's Tensor.requires_grad raises "requires_grad is reserved for future use" on reading, setting
    # and deleting. megxla answered whether a recording GradManager tracked the tensor: MAML code filtering its
    # parameters on ``requires_grad == True`` got an empty list outside ``with gm:`` (an optimizer's error later).
    from megxla.autodiff import GradManager
    w = Parameter(np.ones(3, "float32"))
    gm = GradManager().attach([w])
    for t in (Tensor([1.0]), w):
        with gm:
            with pytest.raises(AttributeError, match="reserved for future use"):
                t.requires_grad
        with pytest.raises(AttributeError, match="reserved for future use"):
            t.requires_grad = True
        with pytest.raises(AttributeError, match="reserved for future use"):
            del t.requires_grad
        assert not hasattr(t, "requires_grad") and getattr(t, "requires_grad", None) is None
