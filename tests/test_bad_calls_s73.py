"""Session 73, scripts/bad_call_fuzz.py: bad calls raise MegEngine 1.13's exception type (hard-coded here, as
MegEngine raised it), with a message naming the op and what was wrong, and leave the state as it was."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager


def _model():
    net = M.Linear(3, 2)
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(net.parameters())
    with gm:
        gm.backward(net(mge.tensor(np.ones((4, 3), "float32"))).sum())
    opt.step()
    opt.clear_grad()
    return net, opt, gm


def _state(net, opt):
    sd = opt.state_dict()
    return ([p.numpy().copy() for p in net.parameters()],
            [(k, {s: np.array(v) for s, v in d.items()}) for k, d in sorted(sd["state"].items())])


def _same(a, b):
    (pa, sa), (pb, sb) = a, b
    assert all(np.array_equal(x, y) for x, y in zip(pa, pb))
    assert [k for k, _ in sa] == [k for k, _ in sb]
    for (_, da), (_, db) in zip(sa, sb):
        assert all(np.array_equal(da[s], db[s]) for s in da)


# ---- data that is no array of numbers: MegEngine's RuntimeError (Tensor, set_value, x + "a"), ValueError (an op's
# operand: "invalid input, no dtype avaliable"); megxla's message names the op and what was given -------------
@pytest.mark.parametrize("make, words", [
    (lambda: mge.tensor("abc"), ["Tensor", "str", "'abc'"]),
    (lambda: mge.Tensor(object()), ["Tensor", "object"]),
    (lambda: mge.tensor([[1.0], [2.0, 3.0]]), ["Tensor", "list", "[[1.0], [2.0, 3.0]]"]),
])
def test_tensor_of_no_numbers_is_megengines_runtime_error(make, words):
    with pytest.raises(RuntimeError) as e:  # (megxla before: TypeError / ValueError, JAX's "JAX only supports...")
        make()
    assert isinstance(e.value, (TypeError, ValueError))
    assert all(w in str(e.value) for w in words), str(e.value)


@pytest.mark.parametrize("call", [lambda p: p.set_value("abc"), lambda p: p._reset(object()),
                                  lambda p: p.set_value([[1.0], [2.0, 3.0]])])
def test_set_value_of_no_numbers_leaves_the_parameter(call):
    net, opt, _ = _model()
    before = _state(net, opt)
    with pytest.raises(RuntimeError, match="cannot be made a tensor"):
        call(net.bias)
    _same(before, _state(net, opt))


@pytest.mark.parametrize("call, op, mge_type", [
    (lambda x: F.relu("abc"), "relu", ValueError),
    (lambda x: F.exp(None), "exp", ValueError),  # (megxla before: an empty tensor, silently)
    (lambda x: x + "a", "add", RuntimeError),
    (lambda x: F.maximum(x, "a"), "maximum", RuntimeError),
])
def test_operand_of_no_numbers_names_the_op(call, op, mge_type):
    x = mge.tensor([1.0, 2.0])
    with pytest.raises(mge_type) as e:
        call(x)
    assert str(e.value).startswith(f"{op}: "), str(e.value)
    assert x.numpy().tolist() == [1.0, 2.0]


def test_tensor_of_none_is_still_empty_as_megengine():
    assert mge.tensor(None).shape == (0,)


def test_tensors_of_ml_dtypes_arrays_are_still_numbers():
    # (bfloat16 / float8 arrays have NumPy kind "V": the check for "no numbers" must not take them for records)
    import ml_dtypes
    for dt in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        assert mge.tensor(np.ones(3, dt)).numpy().astype(np.float32).tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(TypeError):
        mge.tensor(np.zeros(2, dtype=[("a", "f4")]))


# ---- optimizer arguments: MegEngine's SGD / Adagrad / Adadelta assert (AssertionError; a non-number lr: the
# comparison's TypeError); Adam / AdamW / LAMB raise ValueError; groups sharing a parameter: AssertionError -----
@pytest.mark.parametrize("make, mge_type", [
    (lambda ps: optim.SGD(ps, lr=-0.1), AssertionError),
    (lambda ps: optim.SGD(ps, lr=0.1, momentum=-0.5), AssertionError),
    (lambda ps: optim.SGD(ps, lr=0.1, weight_decay=-1.0), AssertionError),
    (lambda ps: optim.Adagrad(ps, lr=-1.0), AssertionError),
    (lambda ps: optim.Adadelta(ps, rho=1.5), AssertionError),
    (lambda ps: optim.SGD(ps, lr="a"), TypeError),
    (lambda ps: optim.Adam(ps, lr=-0.1), ValueError),
    (lambda ps: optim.Adam(ps, lr=0.1, betas=(1.5, 0.9)), ValueError),
    (lambda ps: optim.SGD([{"params": ps}, {"params": ps[:1]}], lr=0.1), AssertionError),
])
def test_bad_optimizer_arguments_raise_megengines_type(make, mge_type):
    net, opt, _ = _model()
    before = _state(net, opt)
    with pytest.raises(mge_type) as e:
        make(list(net.parameters()))
    assert isinstance(e.value, ValueError)  # (megxla's own type, as before)
    _same(before, _state(net, opt))


# ---- GradManager.attach of no tensor: MegEngine's AssertionError ("Object to be attached should be Tensor") -----
@pytest.mark.parametrize("what", [[1.0], "w", [None]])
def test_attach_of_no_tensor_is_an_assertion_error(what):
    net, opt, gm = _model()
    with pytest.raises(AssertionError, match="GradManager.attach: expected Tensors"):
        gm.attach(what)
    with pytest.raises(TypeError):
        gm.attach(what)
    x = mge.tensor(np.ones((4, 3), "float32"))
    with gm:  # still attached to the parameters, and nothing else
        gm.backward(net(x).sum())
    assert all(p.grad is not None for p in net.parameters())


# ---- dropout's probability: MegEngine asserts ``0 <= drop_prob < 1``; nothing drawn ------------------------------
@pytest.mark.parametrize("prob", [1.5, -0.2])
def test_dropout_probability_is_an_assertion_error(prob):
    mge.random.seed(3)
    want = mge.random.normal(size=(3,)).numpy()
    mge.random.seed(3)
    with pytest.raises(AssertionError, match="dropout: drop_prob"):
        F.nn.dropout(mge.tensor(np.ones((2, 3), "float32")), prob)
    np.testing.assert_array_equal(mge.random.normal(size=(3,)).numpy(), want)


# ---- a 1-d boolean mask longer than its axis (MegEngine: an assertion in its indexing kernel) ---------------------
def test_too_long_mask_is_named_in_the_message():
    x = mge.tensor(np.ones((3, 2), "float32"))
    with pytest.raises(IndexError, match=r"boolean mask of shape \(4,\) is true at 3, out of range for axis 0 of "
                                         r"size 3"):
        x[mge.tensor([True] * 4)]
    assert x[mge.tensor([True, False])].shape == (1, 2)  # (a shorter one indexes the first rows, as MegEngine)


# ---- a convolution's channel mismatch names the input's shape (it named the weight's only) -------------------------
def test_conv_channel_mismatch_names_the_input_shape():
    conv = M.Conv2d(2, 4, 3, padding=1)
    w = conv.weight.numpy().copy()
    with pytest.raises(RuntimeError, match=r"conv2d: input \(4, 3, 5, 5\) has 3 channels but weight \(4, 2, 3, 3\)"):
        conv(mge.tensor(np.ones((4, 3, 5, 5), "float32")))
    np.testing.assert_array_equal(conv.weight.numpy(), w)


# ---- opt.step() with a hand-assigned grad of the wrong shape: MegEngine's RuntimeError ("bad input shape for
# polyadic operator"), raised before any parameter or slot is updated ------------------------------------------
@pytest.mark.parametrize("make", [lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), lambda ps: optim.Adam(ps, lr=0.1)])
def test_step_with_a_wrong_shape_grad_is_a_runtime_error_and_updates_nothing(make):
    net = M.Linear(3, 2)
    opt = make(list(net.parameters()))
    gm = GradManager().attach(net.parameters())
    with gm:
        gm.backward(net(mge.tensor(np.ones((4, 3), "float32"))).sum())
    opt.step()
    with gm:
        gm.backward(net(mge.tensor(np.ones((4, 3), "float32"))).sum())
    before = _state(net, opt)
    net.weight.grad = F.ones((3, 3))  # (the bias, updated first, has a good grad)
    with pytest.raises(RuntimeError, match=r"grad of parameter \d has shape \(3, 3\), parameter has \(2, 3\)"):
        opt.step()
    _same(before, _state(net, opt))


# ---- opt.step() with an integer grad: MegEngine's RuntimeError (its elemwise asserts the dtypes; bad_call_fuzz
# seed 2), still a TypeError; nothing updated -----------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), lambda ps: optim.Adam(ps, lr=0.1)])
def test_step_with_an_integer_grad_is_a_runtime_error_and_updates_nothing(make):
    net = M.Linear(3, 2)
    opt = make(list(net.parameters()))
    gm = GradManager().attach(net.parameters())
    with gm:
        gm.backward(net(mge.tensor(np.ones((4, 3), "float32"))).sum())
    before = _state(net, opt)
    net.bias.grad = F.ones((2,), dtype="int32")
    with pytest.raises(RuntimeError, match=r"grad of parameter \d has dtype int32, expected a float dtype") as e:
        opt.step()
    assert isinstance(e.value, TypeError)
    _same(before, _state(net, opt))


def test_reshape_error_names_the_input_shape():
    x = mge.tensor(np.ones((4, 5), "float32"))
    for shape in [(21,), (-1, 3), (3, 3)]:
        with pytest.raises(ValueError, match=r"reshape: cannot reshape a tensor of shape \(4, 5\) \(20 elements\)"):
            x.reshape(*shape)


def test_backward_outside_the_block_is_megengines_type_error():
    _, _, gm = _model()
    with pytest.raises(TypeError, match="GradManager.backward: no recording"):  # (MegEngine: py_apply's TypeError)
        gm.backward(F.ones(()) * 1.0)
    with pytest.raises(RuntimeError):  # (megxla's type before)
        gm.backward(F.ones(()) * 1.0)
