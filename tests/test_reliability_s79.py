"""Session 79, reliability: a bad argument to a state-changing API raises MegEngine 1.13's exception type and leaves
every parameter, buffer, ``.grad`` and recording as it was. Exception types here are the ones MegEngine 1.13 raised
for the same calls (probes in /tmp/s79/rel, run with MegEngine 1.13.0 and megxla)."""
import numpy as np
import pytest

import megxla as mge
import megxla.module as M
from megxla.autodiff import GradManager
from megxla.jit import xla_trace


def _net():
    np.random.seed(0)
    net = M.Sequential(M.Linear(3, 4), M.BatchNorm1d(4), M.Linear(4, 2))
    for p in net.parameters():
        p._reset(mge.Tensor(np.random.rand(*p.shape).astype("float32")))
    return net


# ---- replace_param: MegEngine asserts each replacement's shape (AssertionError), replacing those before it;
# megxla checks them all first ---------------------------------------------------------------------------------
def test_replace_param_with_a_later_wrong_shape_replaces_nothing():
    net = _net()
    params = list(net.parameters())
    before = {k: np.array(v) for k, v in net.state_dict().items()}
    good, bad = mge.Parameter(np.zeros(params[0].shape, "float32")), mge.Parameter(np.zeros((9,), "float32"))
    with pytest.raises(AssertionError, match=r"replace_param: parameter 3 \(weight\) has shape \(1, 4, 1, 1\), "
                                             r"replacement has \(9,\)") as e:
        net.replace_param({0: good, 3: bad}, 0)
    assert isinstance(e.value, ValueError)  # (megxla's type before)
    assert all(a is b for a, b in zip(net.parameters(), params))  # (the first one was replaced before)
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    assert net.replace_param({0: good}, 0) == 6 and list(net.parameters())[0] is good


def test_replace_param_is_seen_by_a_compiled_step():
    # replace_param writes the attribute dict directly (as MegEngine): a prepared xla_trace call kept computing with
    # the replaced parameters
    net = M.Linear(3, 2)
    x = mge.Tensor(np.ones((1, 3), "float32"))
    f = xla_trace(lambda net, x: net(x))
    for _ in range(4):
        f(net, x)
    net.replace_param({0: mge.Parameter(np.zeros((2,), "float32")), 1: mge.Parameter(np.zeros((2, 3), "float32"))}, 0)
    assert f(net, x).numpy().tolist() == [[0.0, 0.0]]


# ---- GradManager.backward with a dy that is no numbers: the recording is kept for the corrected call, as for a
# dy of the wrong shape (MegEngine raises a RuntimeError, "expect Tensor"; it ends its recording either way) ---------
@pytest.mark.parametrize("dy", ["abc", ["abc"], np.array(["x", "y", "z"])])
def test_backward_with_a_dy_of_no_numbers_keeps_the_recording(dy):
    w = mge.Parameter(np.array([1.0, 2.0, 3.0], "float32"))
    gm = GradManager().attach([w])
    w.grad = mge.Tensor(np.full((3,), 10.0, "float32"))
    with gm:
        y = w * w
        with pytest.raises(RuntimeError, match="cannot be made a tensor"):
            gm.backward(y, dy)
        np.testing.assert_array_equal(w.grad.numpy(), [10.0, 10.0, 10.0])
        gm.backward(y, np.ones((3,), "float32"))  # (a NumPy dy is still converted)
    np.testing.assert_array_equal(w.grad.numpy(), [12.0, 14.0, 16.0])


# ---- quantize_qat reads ``inplace`` by its truth, as MegEngine (0, 1, None, NumPy bools were a TypeError); a qconfig
# that is no QConfig is MegEngine's AttributeError ('str' object has no attribute 'act_observer') ----------------------
@pytest.mark.parametrize("inplace, same", [(0, False), (1, True), (None, False), (np.bool_(False), False),
                                           (np.bool_(True), True)])
def test_quantize_qat_inplace_by_truth(inplace, same):
    from megxla.module.qat import Linear as QATLinear
    from megxla.quantization import quantize_qat
    net = M.Sequential(M.QuantStub(), M.Linear(4, 2), M.DequantStub())
    out = quantize_qat(net, inplace=inplace)
    assert (out is net) == same and isinstance(out[1], QATLinear)
    assert isinstance(net[1], QATLinear) == same


@pytest.mark.parametrize("call", ["quantize_qat", "reset_qconfig", "propagate_qconfig"])
def test_a_qconfig_of_another_type_is_an_attribute_error(call):
    import megxla.quantization as Q
    net = M.Sequential(M.QuantStub(), M.Linear(4, 2), M.DequantStub())
    if call != "quantize_qat":
        Q.quantize_qat(net)
    kinds = [type(m).__name__ for m in net.modules()]
    with pytest.raises(AttributeError, match=f"{call}: qconfig must be a QConfig, got 'abc'") as e:
        getattr(Q, call)(net, qconfig="abc")
    assert isinstance(e.value, TypeError)  # (megxla's type before)
    assert [type(m).__name__ for m in net.modules()] == kinds


# ---- GradScaler settings that are no numbers: MegEngine's ``float(value)`` raises ValueError -------------------------
def test_grad_scaler_non_number_is_a_value_error():
    from megxla.amp import GradScaler
    with pytest.raises(ValueError, match="init_scale must be a number, got 'a'") as e:
        GradScaler(init_scale="a")
    assert isinstance(e.value, TypeError)
    s = GradScaler(init_scale=8.0)
    with pytest.raises(ValueError, match="the scale factor must be a number, got 'x'"):
        s.update("x")
    assert s.scale_factor == 8.0


def test_a_submodule_assigned_under_another_name_keeps_its_name_with_megengines_warning(caplog):
    # (RepLKNet's convert_to_deploy: MegEngine logs one per fused layer; megxla was silent. MegEngine 1.13 printed
    # "WRN try setting the submodule `conv` to `<class '...A'>`'s new attribute `other`, its name `conv` will
    # remain unchanged", again when the same assignment is repeated)
    import logging

    import megxla.module as M

    class A(M.Module):
        def __init__(self):
            super().__init__()
            self.conv = M.Conv2d(1, 1, 1)

        def forward(self, x):
            return x

    a, b = A(), A()
    with caplog.at_level(logging.WARNING):
        b.other = a.conv
        b.other = a.conv
    assert (b.other._name, b.other._short_name) == ("conv", "conv")
    said = [r.getMessage() for r in caplog.records if "will remain unchanged" in r.getMessage()]
    assert said == [f"try setting the submodule `conv` to `{A}`'s new attribute `other`, its name `conv` will "
                    "remain unchanged"] * 2


def test_replace_param_warns_as_megengines_deprecated_method():
    # (MegEngine 1.13 printed [('DeprecationWarning', 'Call to deprecated method replace_param. -- Deprecated since
    # version 1.0.')] for the same call)
    import warnings

    import megxla.module as M

    lin = M.Linear(2, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lin.replace_param({0: mge.Parameter(np.zeros((2,), "float32"))}, 0)
    assert [(w.category, str(w.message)) for w in caught] == [
        (DeprecationWarning, "Call to deprecated method replace_param. -- Deprecated since version 1.0.")]
