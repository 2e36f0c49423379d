"""Session 79: the API around megxla's optimizers, schedulers and gradient clipping against MegEngine 1.13.0.

Every expected value, exception type and message below is what MegEngine 1.13.0 printed for the same script
(probes in /tmp/s79/opt, run with MegEngine's venv and with ``python -m megxla.run``).
"""
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.optimizer as optim
from megxla.optimizer import LRScheduler


def _p(*values):
    return mge.Parameter(np.array(values, dtype=np.float32))


def _lrs(opt):
    return [g["lr"] for g in opt.param_groups]


# ---- Optimizer base class: user subclasses ----------------------------------------------------------------------
def test_required_sentinel_of_a_user_optimizer():
    # `from megengine.optimizer.optimizer import required` (PyTorch's idiom) was an ImportError
    from megxla.optimizer.optimizer import required

    class Opt(optim.Optimizer):
        def __init__(self, params, lr=required):
            super().__init__(params, dict(lr=lr))

        def _create_state(self, group):
            pass

        def _updates(self, group):
            pass

    assert repr(required) == "<required parameter>"
    assert Opt([{"params": [_p(1)], "lr": 0.5}]).param_groups[0]["lr"] == 0.5
    with pytest.raises(ValueError, match="^parameter group didn't specify a value of required optimization "
                                         "parameter lr$"):
        Opt([_p(1)])


def test_an_optimizer_subclass_without_updates_cannot_be_created():
    # MegEngine: TypeError "Can't instantiate abstract class Opt with abstract method _updates" (megxla created it and
    # its step() raised)
    class Opt(optim.Optimizer):
        def _create_state(self, group):
            pass

    with pytest.raises(TypeError, match="abstract method _updates"):
        Opt([_p(1)], {"lr": 0.1})


def test_add_state_takes_the_initializers_dtype():
    # MegEngine's _add_state makes Tensor(initializer): an int initializer gives an int32 slot (megxla: float32)
    class Opt(optim.Optimizer):
        def __init__(self, params, lr):
            super().__init__(params, dict(lr=lr))

        def _create_state(self, group):
            for p in group["params"]:
                self._add_state(p, "a", initializer=np.ones(p.shape, np.float64) * 2)
                self._add_state(p, "c", initializer=3)

        def _updates(self, group):
            pass

    state = Opt([_p(1, 2)], lr=0.1).state_dict()["state"][0]
    assert state["a"].dtype == np.float32 and state["a"].tolist() == [2.0, 2.0]
    assert state["c"].dtype == np.int32 and state["c"].shape == () and int(state["c"]) == 3


# ---- construction errors: MegEngine's exception types -------------------------------------------------------------
def test_nesterov_without_momentum_is_an_assertion_error():
    # MegEngine: AssertionError "Nesterov momentum requires a momentum" (megxla: a ValueError only)
    with pytest.raises(AssertionError, match="^Nesterov momentum requires a momentum$"):
        optim.SGD([_p(1)], lr=0.1, nesterov=True)


def test_add_param_group_errors_have_megengines_types():
    opt = optim.SGD([_p(1)], lr=0.1)
    with pytest.raises(AssertionError, match="param group must be a dict"):  # MegEngine asserts it
        opt.add_param_group([_p(2)])
    with pytest.raises(KeyError):  # MegEngine: KeyError 'params'
        opt.add_param_group({"lr": 0.1})
    assert len(opt.param_groups) == 1


def test_adam_betas_as_a_numpy_pair():
    # MegEngine unpacks any pair; megxla raised "invalid betas array([0.5, 0.6])"
    w = _p(1, 2)
    opt = optim.Adam([w], lr=0.1, betas=np.array([0.5, 0.6]))
    for _ in range(2):
        w.grad = mge.Tensor([0.5, -1.0])
        opt.step()
    np.testing.assert_allclose(w.numpy(), [0.7999999523162842, 2.1999998092651367], rtol=1e-6)


# ---- step / zero_grad ---------------------------------------------------------------------------------------------
def test_step_with_a_set_of_parameters_assigned_later_raises():
    w = _p(1)
    opt = optim.SGD([w], lr=0.1)
    opt.param_groups[0]["params"] = {w}
    w.grad = mge.Tensor([1.0])
    with pytest.raises(TypeError, match="^optimized parameters need to be organized in ordered collections, but the "
                                        "ordering of parameters in sets will change between runs. Please use a list "
                                        "instead.$"):
        opt.step()
    assert w.numpy().tolist() == [1.0]


def test_zero_grad_warns_with_megengines_message():
    w = _p(1)
    opt = optim.SGD([w], lr=0.1)
    w.grad = mge.Tensor([3.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.zero_grad()
    messages = [str(x.message) for x in caught if x.category is DeprecationWarning]
    assert "Call to deprecated method zero_grad. (use clear_grad instead) -- Deprecated since version 1.0." in messages
    assert w.grad.numpy().tolist() == [0.0]


# ---- load_state_dict ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [optim.Adam, optim.Adagrad])
def test_load_state_dict_without_a_parameters_state_raises_key_error(cls):
    # MegEngine raises KeyError(1); megxla dropped the parameter's slots and every later step raised KeyError
    ps = [_p(1, 2), _p(3)]
    sd = cls(ps, lr=0.1).state_dict()
    del sd["state"][1]
    opt = cls(ps, lr=0.3)
    with pytest.raises(KeyError):
        opt.load_state_dict(sd)
    assert opt.param_groups[0]["lr"] == 0.3 and sorted(opt.state_dict()["state"]) == [0, 1]
    for i, p in enumerate(ps):
        p.grad = mge.Tensor(np.full(p.shape, i + 1.0, np.float32))
    opt.step()  # MegEngine's values after the same step
    np.testing.assert_allclose(ps[0].numpy(), [0.699999988079071, 1.7000000476837158], rtol=1e-6)
    np.testing.assert_allclose(ps[1].numpy(), [2.700000047683716], rtol=1e-6)


def test_load_state_dict_of_another_optimizer_type_keeps_megengines_message():
    ps = [_p(1, 2), _p(3)]
    opt = optim.Adam(ps, lr=0.2)
    with pytest.raises(ValueError, match="^loaded state dict contains a parameter group that doesn't match the keys "
                                         "of optimizer's group"):
        opt.load_state_dict(optim.SGD(ps, lr=0.1, momentum=0.9).state_dict())
    assert sorted(opt._state[ps[0]]) == ["exp_avg", "exp_avg_sq", "step"]


# ---- LRScheduler subclassed by users ------------------------------------------------------------------------------
def test_a_scheduler_overriding_step_only_can_be_created():
    # MegEngine's get_lr is not abstract: a poly schedule writing the rates in step() was a TypeError in megxla
    class Poly(LRScheduler):
        def __init__(self, optimizer, max_iter):
            self.max_iter = max_iter
            super().__init__(optimizer)

        def step(self, epoch=None):
            self.current_epoch += 1
            for g, b in zip(self.optimizer.param_groups, self.base_lrs):
                g["lr"] = b * (1 - self.current_epoch / self.max_iter) ** 0.9

    opt = optim.SGD([{"params": [_p(1)]}, {"params": [_p(2)], "lr": 1.0}], lr=0.1)
    sched = Poly(opt, 10)
    sched.step()
    assert _lrs(opt) == [0.09095325760829623, 0.9095325760829622] and sched.current_epoch == 1


def test_a_scheduler_without_get_lr_raises_not_implemented_error():
    class S(LRScheduler):
        pass

    opt = optim.SGD([_p(1)], lr=0.1)
    with pytest.raises(NotImplementedError):
        S(opt)
    with pytest.raises(NotImplementedError):
        LRScheduler(opt)


# ---- gradient clipping --------------------------------------------------------------------------------------------
def _two():
    a, b = _p(3, 4), _p(0, 12)
    a.grad, b.grad = mge.Tensor([3.0, 4.0]), mge.Tensor([0.0, 12.0])
    return a, b


def test_clip_grad_norm_with_a_tensor_max_norm():
    a, b = _two()
    total = optim.clip_grad_norm([a, b], mge.Tensor(1.0))
    assert float(total) == 13.0
    np.testing.assert_allclose(a.grad.numpy(), [0.23076921701431274, 0.307692289352417], rtol=1e-6)


def test_clip_grad_value_with_a_none_bound():
    a, b = _two()
    assert optim.clip_grad_value([a, b], None, 1.0) is None
    assert a.grad.numpy().tolist() == [1.0, 1.0] and b.grad.numpy().tolist() == [0.0, 1.0]
