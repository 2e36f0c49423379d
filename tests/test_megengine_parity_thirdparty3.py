"""What MegEngine/invis (a PyTorch-style layer that wraps MegEngine's Tensor, functional and modules) relies on,
with the values MegEngine 1.13.0 gives (CPU wheel).

invis subclasses Tensor with its own ``__new__``, builds its operators from ``core.tensor.array_method._elwise``,
re-exports every function in ``dir(megengine.functional)`` and loads weights through Module's
``_load_state_dict_with_closure``."""
import inspect

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
from megxla.core._imperative_rt.core2 import apply
from megxla.core.ops.builtin import Elemwise
from megxla.core.tensor.array_method import _elwise, _elwise_apply


# ---- a Tensor subclass whose __new__ rewrites the arguments (invis maps device "cuda" to "gpu0" there) ---------
class _Rewriting(mge.Tensor):
    def __new__(cls, *args, **kwargs):
        if "device" in kwargs:
            kwargs["device"] = "cpu0"
        args = (np.asarray(args[0], "float32") * 2,) + args[1:]
        return mge.Tensor.__new__(cls, *args, **kwargs)


class _OwnInit(mge.Tensor):
    def __new__(cls, data, tag):
        return mge.Tensor.__new__(cls, data)

    def __init__(self, data, tag):
        super().__init__(data, name="s")
        self.tag = tag


class _PassThrough(mge.Tensor):
    def __new__(cls, *args, **kwargs):
        return super().__new__(cls, *args, **kwargs)


def test_tensor_subclass_new_takes_the_value_from_the_arguments_it_passes():
    # MegEngine's C++ __new__ takes the value; the __init__ that follows (with the caller's arguments) only names it
    t = _Rewriting([1.0, 2.0], device="no-such-device", name="t0")
    assert type(t) is _Rewriting and t.dtype == np.float32 and t.name == "t0"
    np.testing.assert_array_equal(t.numpy(), [2.0, 4.0])  # MegEngine 1.13.0: [2. 4.], on cpu0:0
    assert str(t.device) == "cpu0:0"
    u = _Rewriting(mge.tensor([3.0]))
    np.testing.assert_array_equal(u.numpy(), [6.0])
    assert type(u + 1) is mge.Tensor
    s = _OwnInit([5, 6], "x")
    assert s.numpy().tolist() == [5, 6] and s.dtype == np.int32 and s.tag == "x" and s.name == "s"
    v = _PassThrough([1, 2], dtype="float16")
    assert v.dtype == np.float16 and v.numpy().tolist() == [1.0, 2.0]
    # a plain Tensor still takes its value in __init__; bad input still raises
    assert mge.Tensor([1, 2]).numpy().tolist() == [1, 2]
    with pytest.raises(TypeError):
        mge.Tensor()


# ---- _elwise and the Elemwise descriptor's comparisons -------------------------------------------------------
def test_elwise_helper_applies_the_elemwise_descriptor():
    a, b = mge.tensor([1.5, -2.0, 3.0]), mge.tensor([2.0, 2.0, -1.0])
    i, j = mge.tensor([3, -7, 4]), mge.tensor([2, 2, 3])
    add = _elwise(a, b, mode=Elemwise.Mode.ADD)
    assert type(add) is mge.Tensor and add.numpy().tolist() == [3.5, 0.0, 2.0]
    assert _elwise(i, j, mode=Elemwise.Mode.FLOOR_DIV).numpy().tolist() == [1, -4, 1]
    assert _elwise(i, j, mode=Elemwise.Mode.MOD).numpy().tolist() == [1, 1, 1]
    assert _elwise(a, mode=Elemwise.Mode.RELU).numpy().tolist() == [1.5, 0.0, 3.0]
    assert _elwise(a, i, mode="add").numpy().tolist() == [4.5, -9.0, 7.0]
    assert _elwise_apply((a, b), Elemwise.Mode.MUL).numpy().tolist() == [3.0, -4.0, -3.0]
    r = _elwise(a.astype("bool"), b.astype("bool"), mode=Elemwise.Mode.XOR)
    assert r.dtype == np.bool_ and r.numpy().tolist() == [False, False, False]


def test_elemwise_comparison_modes_give_the_operands_dtype():
    # MegEngine 1.13.0: Elemwise(LT/LEQ/EQ) writes 1 / 0 in the operands' (promoted) dtype; bool only for bools
    f, g = mge.tensor([1.5, np.nan, np.inf]), mge.tensor([2.0, 2.0, 2.0])
    i, j = mge.tensor([3, -7, 4]), mge.tensor([2, 2, 4])
    bt, bf = mge.tensor([True, False, True]), mge.tensor([False, False, True])
    cases = {("LT", "f"): [1.0, 0.0, 0.0], ("LT", "i"): [0, 1, 0], ("LEQ", "f"): [1.0, 0.0, 0.0],
             ("LEQ", "i"): [0, 1, 1], ("EQ", "f"): [0.0, 0.0, 0.0], ("EQ", "i"): [0, 0, 1]}
    for (mode, kind), want in cases.items():
        x, y = (f, g) if kind == "f" else (i, j)
        (r,) = apply(Elemwise(mode=mode), x, y)
        assert r.dtype == x.dtype and r.numpy().tolist() == want, (mode, kind)
    (r,) = apply(Elemwise(mode="LT"), bt, bf)
    assert r.dtype == np.bool_ and r.numpy().tolist() == [False, False, False]
    # mixed dtypes: the promoted one, as Elemwise(ADD) gives
    (r,) = apply(Elemwise(mode="LT"), mge.tensor([1.5, 2.0]), mge.tensor([3, 2]))
    assert r.dtype == np.float32 and r.numpy().tolist() == [1.0, 0.0]
    (r,) = apply(Elemwise(mode="LT"), mge.tensor([1.0, 2.0], dtype="float16"), mge.tensor([1.5, 2.0]))
    assert r.dtype == np.float32 and r.numpy().tolist() == [1.0, 0.0]
    # the module applies the descriptor too; the operators and F.less still give bool
    assert M.Elemwise("LT")(mge.tensor([1.5, 2.0]), mge.tensor([2.0, 1.0])).numpy().tolist() == [1.0, 0.0]
    r = M.Elemwise("EQ")(mge.tensor([3, 2]), mge.tensor([3, 1]))
    assert r.dtype == np.int32 and r.numpy().tolist() == [1, 0]
    assert (f < g).dtype == np.bool_ and F.less(i, j).dtype == np.bool_


# ---- functional's namespace, as a wrapping library reads it ---------------------------------------------------
def test_functional_namespace_holds_no_private_names():
    # MegEngine 1.13.0: dir(megengine.functional) has no name with a leading underscore (dunders aside). invis
    # re-exports every non-dunder function of dir(F) from a module that did `from megengine.functional import *`:
    # a private function left in F is missing there and `import invis` fails.
    private = [n for n in dir(F) if n.startswith("_") and not n.endswith("__")]
    assert private == []
    ns = {}
    exec("from megxla.functional import *", ns)
    functions = [n for n in dir(F) if not n.startswith("__") and inspect.isfunction(getattr(F, n, None))]
    assert [n for n in functions if n not in ns] == []


# ---- Module._load_state_dict_with_closure ----------------------------------------------------------------------
class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.fc = M.Linear(2, 3)
        self.bn = M.BatchNorm1d(3)

    def forward(self, x):
        return self.bn(self.fc(x))


def test_load_state_dict_with_closure_returns_loaded_and_skipped_keys():
    net = _Net()
    w = np.arange(6, dtype="float32").reshape(3, 2)
    loaded, skipped = net._load_state_dict_with_closure(lambda k, v: w if k == "fc.weight" else None)
    # MegEngine 1.13.0: these sets, and the weight loaded
    assert loaded == {"fc.weight"}
    assert skipped == {"bn.bias", "bn.running_mean", "bn.running_var", "bn.weight", "fc.bias"}
    np.testing.assert_array_equal(net.fc.weight.numpy(), w)
    before = net.fc.weight.numpy().copy()
    with pytest.raises(ValueError, match="shape mismatch"):
        net._load_state_dict_with_closure(
            lambda k, v: np.zeros(5, "float32") if k == "fc.bias" else np.ones((3, 2), "float32"))
    np.testing.assert_array_equal(net.fc.weight.numpy(), before)  # nothing assigned by the failing call
    with pytest.raises(TypeError, match="callable"):
        net._load_state_dict_with_closure({"fc.weight": w})
