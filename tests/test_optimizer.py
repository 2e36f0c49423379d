"""Tests for megxla.optimizer: every optimizer against a NumPy re-implementation of MegEngine 1.13's formulas,
state handling (slot names, identity, state_dict), error cases, gradient clipping, MultiStepLR, and a tiny
end-to-end training run."""
import contextlib
import doctest
import importlib
import pickle

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.core._dispatch import eager_apply, pop_interpreter, push_interpreter

SHAPES = [(3, 4), (5,), ()]


# ---- NumPy references (MegEngine 1.13 formulas), float64 ----------------------------------------------------
def _zeros(st, name, p):
    return st.get(name, np.zeros_like(p))


def ref_sgd(p, g, st, hp, nesterov=False):
    g = g + hp["weight_decay"] * p
    if hp["momentum"] != 0:
        v = st["momentum_buffer"] = hp["momentum"] * _zeros(st, "momentum_buffer", p) + g
        g = g + hp["momentum"] * v if nesterov else v
    return p - hp["lr"] * g


def _adam_delta(p, g, st, hp):
    b0, b1 = hp["betas"]
    t = st["step"] = st.get("step", 0.0) + 1
    m = st["exp_avg"] = b0 * _zeros(st, "exp_avg", p) + (1 - b0) * g
    v = st["exp_avg_sq"] = b1 * _zeros(st, "exp_avg_sq", p) + (1 - b1) * g * g
    return (m / (1 - b0 ** t)) / (np.sqrt(v / (1 - b1 ** t)) + hp["eps"])


def ref_adam(p, g, st, hp):
    return p - hp["lr"] * _adam_delta(p, g + hp["weight_decay"] * p, st, hp)


def ref_adamw(p, g, st, hp):
    return p - hp["lr"] * (_adam_delta(p, g, st, hp) + hp["weight_decay"] * p)


def ref_adagrad(p, g, st, hp):
    t = st["step"] = st.get("step", 0.0) + 1
    g = g + hp["weight_decay"] * p
    s = st["square_avg"] = _zeros(st, "square_avg", p) + g ** 2
    clr = hp["lr"] / (1 + (t - 1) * hp["lr_decay"])
    return p - clr * g / np.sqrt(s + hp["eps"])


def ref_adadelta(p, g, st, hp):
    rho, eps = hp["rho"], hp["eps"]
    st["step"] = st.get("step", 0.0) + 1
    g = g + hp["weight_decay"] * p
    s = st["square_avg"] = rho * _zeros(st, "square_avg", p) + (1 - rho) * g ** 2
    acc = _zeros(st, "acc_delta", p)
    delta = np.sqrt(acc + eps) / np.sqrt(s + eps) * g
    st["acc_delta"] = rho * acc + (1 - rho) * delta ** 2
    return p - hp["lr"] * delta


def ref_lamb(p, g, st, hp, bias_correction=True, always_adapt=False):
    b0, b1 = hp["betas"]
    t = st["step"] = st.get("step", 0.0) + 1
    m = st["exp_avg"] = b0 * _zeros(st, "exp_avg", p) + (1 - b0) * g
    v = st["exp_avg_sq"] = b1 * _zeros(st, "exp_avg_sq", p) + (1 - b1) * g * g
    if bias_correction:
        u = (m / (1 - b0 ** t)) / (np.sqrt(v / (1 - b1 ** t)) + hp["eps"])
    else:
        u = m / (np.sqrt(v) + hp["eps"])
    u = u + hp["weight_decay"] * p
    ratio = 1.0
    if always_adapt or hp["weight_decay"] != 0:
        pn, un = np.linalg.norm(p), np.linalg.norm(u)
        ratio = pn / un if pn > 0 and un > 0 else 1.0
    return p - hp["lr"] * ratio * u


ADAM_SLOTS = {"exp_avg", "exp_avg_sq", "step"}
# (id, class, constructor kwargs, reference, slot names)
CASES = [
    ("sgd", optim.SGD, dict(lr=0.1), ref_sgd, set()),
    ("sgd_wd", optim.SGD, dict(lr=0.1, weight_decay=0.05), ref_sgd, set()),
    ("sgd_momentum", optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.05), ref_sgd, {"momentum_buffer"}),
    ("sgd_nesterov", optim.SGD, dict(lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.05), ref_sgd,
     {"momentum_buffer"}),
    ("adam", optim.Adam, dict(lr=0.01), ref_adam, ADAM_SLOTS),
    ("adam_wd", optim.Adam, dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), ref_adam, ADAM_SLOTS),
    ("adamw", optim.AdamW, dict(lr=0.01), ref_adamw, ADAM_SLOTS),
    ("adamw_wd", optim.AdamW, dict(lr=0.01, betas=(0.5, 0.9), weight_decay=0.3), ref_adamw, ADAM_SLOTS),
    ("adagrad", optim.Adagrad, dict(), ref_adagrad, {"square_avg", "step"}),
    ("adagrad_decay", optim.Adagrad, dict(lr=0.1, lr_decay=0.2, eps=1e-6, weight_decay=0.05), ref_adagrad,
     {"square_avg", "step"}),
    ("adadelta", optim.Adadelta, dict(), ref_adadelta, {"square_avg", "acc_delta", "step"}),
    ("adadelta_wd", optim.Adadelta, dict(lr=0.5, rho=0.7, eps=1e-4, weight_decay=0.1), ref_adadelta,
     {"square_avg", "acc_delta", "step"}),
    ("lamb", optim.LAMB, dict(lr=0.01), ref_lamb, ADAM_SLOTS),
    ("lamb_wd", optim.LAMB, dict(lr=0.01, weight_decay=0.1), ref_lamb, ADAM_SLOTS),
    ("lamb_adapt_nobc", optim.LAMB, dict(lr=0.01, bias_correction=False, always_adapt=True), ref_lamb,
     ADAM_SLOTS),
]
# constructor arguments that are optimizer attributes, not group hyper-parameters
OPTS = ("nesterov", "bias_correction", "always_adapt")


def _rand(rng, shape):
    return np.asarray(rng.randn(*shape), "float32")  # randn() of shape () is a Python float


def _setup(cls, kwargs, seed=0):
    rng = np.random.RandomState(seed)
    init = [_rand(rng, s) for s in SHAPES]
    params = [mge.Parameter(a) for a in init]
    return rng, params, cls(params, **kwargs)


def _grads(rng, step):
    # parameter 1 has no gradient at step 1: it must be skipped (its slots and its step count stay put)
    return [None if (step == 1 and i == 1) else _rand(rng, s) for i, s in enumerate(SHAPES)]


def _slot_ids(opt):
    # the slot Tensor objects, but Adam's step counts: one Tensor shared by a group's parameters, split when a
    # parameter skips a step (or a loaded file gives them different counts); test_adam_step_count_is_shared
    return {id(t) for st in opt._state.values() for k, t in st.items() if k != "step"}


def _hyper(opt):
    return {k: v for k, v in opt.param_groups[0].items() if k != "params"}


def _check(opt, params, np_params, np_state, slots):
    for i, p in enumerate(params):
        np.testing.assert_allclose(p.numpy(), np_params[i], rtol=2e-5, atol=1e-6, err_msg=f"param {i}")
        if not slots:
            assert p not in opt._state
            continue
        assert set(opt._state[p]) == slots
        for k, v in np_state[i].items():
            np.testing.assert_allclose(opt._state[p][k].numpy(), v, rtol=2e-5, atol=1e-6, err_msg=f"{k} {i}")


@pytest.mark.parametrize("name,cls,kwargs,ref,slots", CASES, ids=[c[0] for c in CASES])
def test_matches_numpy_reference(name, cls, kwargs, ref, slots):
    rng, params, opt = _setup(cls, kwargs)
    opts = {k: v for k, v in kwargs.items() if k in OPTS}
    np_params = [p.numpy().astype(np.float64) for p in params]
    np_state = [{} for _ in params]
    slot_objects = _slot_ids(opt)
    for step in range(3):
        if step == 2:  # hyper-parameters are re-read from the group at every step
            opt.param_groups[0]["lr"] *= 0.5
            opt.param_groups[0]["weight_decay"] = opt.param_groups[0]["weight_decay"] * 2 + 0.01
        grads = _grads(rng, step)
        for p, g in zip(params, grads):
            p.grad = None if g is None else mge.Tensor(g)
        assert opt.step() is opt
        hp = _hyper(opt)
        for i, g in enumerate(grads):
            if g is not None:
                np_params[i] = ref(np_params[i], g.astype(np.float64), np_state[i], hp, **opts)
        _check(opt, params, np_params, np_state, slots)
    # the same Python objects hold the new values
    assert all(a is b for a, b in zip(opt.param_groups[0]["params"], params))
    assert _slot_ids(opt) == slot_objects
    assert all(p.dtype == np.float32 for p in params)


@pytest.mark.parametrize("name,cls,kwargs,ref,slots", CASES, ids=[c[0] for c in CASES])
def test_state_dict_round_trip(name, cls, kwargs, ref, slots):
    rng, params, opt = _setup(cls, kwargs, seed=1)
    for step in range(2):
        for p, g in zip(params, _grads(rng, step)):
            p.grad = None if g is None else mge.Tensor(g)
        opt.step()
    opt.param_groups[0]["lr"] = 0.003
    saved = pickle.loads(pickle.dumps(opt.state_dict()))
    assert saved["param_groups"][0]["params"] == [0, 1, 2]
    assert all(isinstance(v, np.ndarray) for st in saved["state"].values() for v in st.values())

    params2 = [mge.Parameter(p.numpy()) for p in params]
    other = dict(kwargs, lr=0.5)
    opt2 = cls(params2, **other)
    before = _slot_ids(opt2)
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["lr"] == 0.003
    assert _slot_ids(opt2) == before  # slots rebound in place
    grads = _grads(rng, 2)
    for ps in (params, params2):
        for p, g in zip(ps, grads):
            p.grad = mge.Tensor(g)
    opt.step()
    opt2.step()
    for p, q in zip(params, params2):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
        for k in opt._state.get(p, {}):
            np.testing.assert_array_equal(opt._state[p][k].numpy(), opt2._state[q][k].numpy())

    opt3 = cls([mge.Parameter(p.numpy()) for p in params], **kwargs)
    opt3.load_state_dict(opt.state_dict(keep_var=True))
    for p, q in zip(params, opt3.param_groups[0]["params"]):
        for k in opt._state.get(p, {}):
            np.testing.assert_array_equal(opt._state[p][k].numpy(), opt3._state[q][k].numpy())


class _Spy:
    """A minimal interpreter: runs ops eagerly, records them and the hyper-parameter tensors announced."""

    def __init__(self):
        self.ops, self.hyper = [], {}

    def apply(self, op, inputs):
        self.ops.append(op)
        return eager_apply(op, inputs)

    def read(self, t):
        return t._data

    def host_input(self, t, getter):
        self.hyper[t._vid] = getter


def _spy_step(opt):
    spy = _Spy()
    push_interpreter(spy)
    try:
        opt.step()
    finally:
        pop_interpreter()
    return spy


@pytest.mark.parametrize("name,cls,kwargs,ref,slots", CASES, ids=[c[0] for c in CASES])
def test_hyper_parameters_are_tensor_inputs(name, cls, kwargs, ref, slots):
    rng, params, opt = _setup(cls, dict(kwargs, lr=0.0123))
    for p in params:
        p.grad = mge.Tensor(_rand(rng, p.shape))
    first = _spy_step(opt)
    assert 0.0123 in [g() for g in first.hyper.values()]
    assert not any("0.0123" in repr(op) for op in first.ops)  # never folded into an op's static parameters
    opt.param_groups[0]["lr"] = 0.5
    opt.param_groups[0]["weight_decay"] = 0.25  # also from/to zero: the graph must not change
    assert 0.5 in [g() for g in first.hyper.values()]  # getters read the live group
    second = _spy_step(opt)
    assert [op for op in first.ops] == [op for op in second.ops]


def test_lamb_fp16_keeps_float32_master():
    rng = np.random.RandomState(3)
    init = rng.randn(4, 3).astype("float32")
    w = mge.Parameter(init, dtype="float16")
    opt = optim.LAMBFp16([w], lr=0.05, weight_decay=0.1)
    assert set(opt._state[w]) == ADAM_SLOTS | {"param_fp32"}
    master, st = w.numpy().astype(np.float64), {}
    for _ in range(3):
        g = rng.randn(4, 3).astype("float16")
        w.grad = mge.Tensor(g, dtype="float16")
        opt.step()
        master = ref_lamb(master, g.astype(np.float64), st, _hyper(opt))
    assert w.dtype == np.float16 and opt._state[w]["param_fp32"].dtype == np.float32
    np.testing.assert_allclose(opt._state[w]["param_fp32"].numpy(), master, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.numpy(), master.astype(np.float16), rtol=1e-3)


def test_sgd_param_groups_momentum_enabled_later_and_added_group():
    w, b = mge.Parameter([1.0, 2.0]), mge.Parameter([3.0])
    opt = optim.SGD([{"params": [w]}, {"params": b, "lr": 0.5}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5] and opt._state == {}
    w.grad, b.grad = mge.Tensor([1.0, 1.0]), mge.Tensor([2.0])
    opt.step()
    np.testing.assert_allclose(w.numpy(), [0.9, 1.9], rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), [2.0], rtol=1e-6)
    opt.param_groups[0]["momentum"] = 0.5  # the slot is created at the first step that needs it
    opt.step()
    np.testing.assert_allclose(w.numpy(), [0.8, 1.8], rtol=1e-6)
    np.testing.assert_allclose(opt._state[w]["momentum_buffer"].numpy(), [1.0, 1.0])
    c = mge.Parameter([0.0, 0.0, 0.0])
    opt2 = optim.Adam([w], lr=0.1)
    opt2.add_param_group({"params": [c], "lr": 0.2})
    assert set(opt2._state[c]) == ADAM_SLOTS and opt2.param_groups[1]["betas"] == (0.9, 0.999)
    c.grad = mge.Tensor([1.0, -1.0, 0.0])
    opt2.step()
    np.testing.assert_allclose(c.numpy(), [-0.2, 0.2, 0.0], rtol=1e-5, atol=1e-7)


def test_clear_grad_and_zero_grad():
    w = mge.Parameter([1.0, 2.0])
    opt = optim.SGD([w], lr=0.1)
    g = w.grad = mge.Tensor([3.0, 4.0])
    with pytest.warns(DeprecationWarning):
        opt.zero_grad()
    assert w.grad is g and np.all(g.numpy() == 0)  # zeroed in place, as MegEngine
    opt.clear_grad()
    assert w.grad is None
    opt.step()  # no gradient: nothing to do
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])



def test_megengine_0x_backward_and_bcast_param_raise_as_in_megengine_1_13():
    # MegEngine 1.13's Optimizer keeps 0.x's `backward(loss)` and `bcast_param()` only to raise
    # NotImplementedError("use autodiff.GradManager instead") / ("use distributed.bcast_list_ instead"): a 0.x
    # training loop (tracyliang18/megengine-playgournd: `optimizer.backward(loss)`) is told what to use instead of
    # getting an AttributeError; nothing changes.
    w = mge.Parameter([1.0, 2.0])
    opt = optim.SGD([w], lr=0.1)
    w.grad = mge.Tensor([3.0, 4.0])
    with pytest.raises(NotImplementedError, match="use autodiff.GradManager instead"):
        opt.backward((w * 2).sum())
    with pytest.raises(NotImplementedError, match="use distributed.bcast_list_ instead"):
        opt.bcast_param()
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])

# ---- errors: raised before anything changes ------------------------------------------------------------------
def _snapshot(opt):
    return [(p.numpy().copy(), {k: v.numpy().copy() for k, v in opt._state.get(p, {}).items()})
            for p in opt._get_params()]


def _assert_unchanged(opt, snap):
    for (pv, st), p in zip(snap, opt._get_params()):
        np.testing.assert_array_equal(p.numpy(), pv)
        for k, v in st.items():
            np.testing.assert_array_equal(opt._state[p][k].numpy(), v)


@pytest.mark.parametrize("cls", [optim.SGD, optim.Adam, optim.AdamW, optim.Adagrad, optim.Adadelta, optim.LAMB])
def test_bad_step_leaves_everything_unchanged(cls):
    a, b = mge.Parameter(np.ones((2, 3), "float32")), mge.Parameter(np.ones(3, "float32"))
    opt = cls([{"params": [a]}, {"params": [b]}], lr=0.1)
    a.grad, b.grad = mge.Tensor(np.ones((2, 3), "float32")), mge.Tensor(np.ones(3, "float32"))
    opt.step()
    snap = _snapshot(opt)
    b.grad = mge.Tensor(np.ones(4, "float32"))  # wrong shape in the *second* group
    with pytest.raises(ValueError, match=r"shape \(4,\).*\(3,\)"):
        opt.step()
    _assert_unchanged(opt, snap)
    b.grad = mge.Tensor(np.ones(3, "float32"))
    opt.param_groups[1]["lr"] = -1.0
    with pytest.raises(ValueError, match="lr"):
        opt.step()
    _assert_unchanged(opt, snap)
    # (a value valid once is not checked again: each new value still is)
    for bad in (float("nan"), float("inf"), True, "0.1", (0.1,)):
        opt.param_groups[1]["lr"] = bad
        with pytest.raises(ValueError, match="lr"):
            opt.step()
        _assert_unchanged(opt, snap)
    opt.param_groups[1]["lr"] = 0.1
    b.grad = mge.Tensor(np.ones(3, "int32"))
    with pytest.raises(TypeError, match="float"):
        opt.step()
    _assert_unchanged(opt, snap)


@pytest.mark.parametrize("make", [
    lambda p: optim.SGD([p], lr=-0.1),
    lambda p: optim.SGD([p], lr=0.1, momentum=-1.0),
    lambda p: optim.SGD([p], lr=0.1, nesterov=True),
    lambda p: optim.SGD([p], lr=0.1, weight_decay=-1e-4),
    lambda p: optim.Adam([p], lr=0.1, betas=(1.0, 0.999)),
    lambda p: optim.AdamW([p], lr=0.1, betas=(0.9,)),
    lambda p: optim.Adagrad([p], lr_decay=-1.0),
    lambda p: optim.Adadelta([p], rho=1.5),
    lambda p: optim.LAMB([p], lr=0.1, eps=-1.0),
    lambda p: optim.SGD([], lr=0.1),
    lambda p: optim.SGD([p, p], lr=0.1),
    lambda p: optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1),
    lambda p: optim.SGD([{"params": [p], "lr": -1.0}], lr=0.1),
], ids=["lr", "momentum", "nesterov", "weight_decay", "betas", "betas_len", "lr_decay", "rho", "eps", "empty",
        "duplicate", "duplicate_groups", "group_lr"])
def test_constructor_errors(make):
    with pytest.raises(ValueError):
        make(mge.Parameter([1.0]))


def test_constructor_type_errors():
    with pytest.raises(TypeError, match="Parameter"):
        optim.SGD([mge.Tensor([1.0])], lr=0.1)
    with pytest.raises(TypeError, match="ordered"):
        optim.SGD([{"params": {mge.Parameter([1.0])}}], lr=0.1)
    with pytest.raises(TypeError):
        optim.SGD(3, lr=0.1)


def test_load_state_dict_errors_leave_state_unchanged():
    w, b = mge.Parameter([1.0, 2.0]), mge.Parameter([3.0])
    opt = optim.Adam([w, b], lr=0.1)
    w.grad, b.grad = mge.Tensor([1.0, 1.0]), mge.Tensor([1.0])
    opt.step()
    snap, good = _snapshot(opt), opt.state_dict()
    bad_groups = dict(good, param_groups=good["param_groups"] * 2)
    bad_size = {"param_groups": [dict(good["param_groups"][0], params=[0])], "state": good["state"]}
    bad_keys = {"param_groups": [dict(good["param_groups"][0], momentum=0.9)], "state": good["state"]}
    bad_lr = {"param_groups": [dict(good["param_groups"][0], lr=-1.0)], "state": good["state"]}
    bad_shape = {"param_groups": good["param_groups"],
                 "state": {0: dict(good["state"][0], exp_avg=np.zeros(5, "float32")), 1: good["state"][1]}}
    bad_index = {"param_groups": good["param_groups"], "state": {**good["state"], 7: {}}}
    for bad in (bad_groups, bad_size, bad_keys, bad_lr, bad_shape, bad_index):
        with pytest.raises(ValueError):
            opt.load_state_dict(bad)
        _assert_unchanged(opt, snap)
        assert opt.param_groups[0]["lr"] == 0.1


# ---- gradient clipping ---------------------------------------------------------------------------------------
def test_clip_grad_norm():
    rng = np.random.RandomState(5)
    grads = [rng.randn(3, 4).astype("float32"), rng.randn(5).astype("float32")]
    params = [mge.Parameter(np.zeros(g.shape, "float32")) for g in grads] + [mge.Parameter([0.0])]
    for p, g in zip(params, grads):
        p.grad = mge.Tensor(g)
    total = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads))
    norm = optim.clip_grad_norm(params, max_norm=1.0)
    assert isinstance(norm, mge.Tensor) and params[2].grad is None
    np.testing.assert_allclose(norm.numpy(), total, rtol=1e-5)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad.numpy(), g * (1.0 / (total + 1e-6)), rtol=1e-5)
    # below the limit: unchanged; ord=inf is the largest magnitude
    big = [p.grad.numpy() for p in params[:2]]
    np.testing.assert_allclose(optim.clip_grad_norm(params, max_norm=10.0).numpy(), 1.0, rtol=1e-5)
    for p, g in zip(params, big):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-6)
    inf = optim.clip_grad_norm(params, max_norm=100.0, ord=float("inf"))
    np.testing.assert_allclose(inf.numpy(), max(np.abs(g).max() for g in big), rtol=1e-6)
    assert optim.clip_grad_norm([mge.Parameter([1.0])], 1.0).numpy() == 0.0
    with pytest.raises(ValueError, match="max_norm"):
        optim.clip_grad_norm(params, max_norm=-1.0)


def test_clip_grad_value():
    w = mge.Parameter(np.zeros(4, "float32"))
    w.grad = mge.Tensor([-3.0, -0.5, 0.5, 3.0])
    g = w.grad
    optim.clip_grad_value([w, mge.Parameter([1.0])], lower=-1.0, upper=2.0)
    assert w.grad is g  # modified in place
    np.testing.assert_array_equal(w.grad.numpy(), [-1.0, -0.5, 0.5, 2.0])
    with pytest.raises(ValueError, match="lower"):
        optim.clip_grad_value(w, lower=1.0, upper=0.0)
    np.testing.assert_array_equal(w.grad.numpy(), [-1.0, -0.5, 0.5, 2.0])


# ---- learning-rate schedule ----------------------------------------------------------------------------------
def test_multi_step_lr():
    w, b = mge.Parameter([1.0]), mge.Parameter([1.0])
    opt = optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.2}], lr=1.0)
    sched = optim.MultiStepLR(opt, milestones=[2, 5], gamma=0.1)
    seen = []
    for _ in range(7):
        seen.append([g["lr"] for g in opt.param_groups])
        sched.step()
    expected = [[1.0 * f, 0.2 * f] for f in (1, 1, 0.1, 0.1, 0.1, 0.01, 0.01)]
    np.testing.assert_allclose(seen, expected, rtol=1e-12)
    assert [g["initial_lr"] for g in opt.param_groups] == [1.0, 0.2]
    state = sched.state_dict()
    assert state == {"milestones": [2, 5], "gamma": 0.1, "current_epoch": 7}

    # resuming: initial_lr is taken from the groups, the position from current_epoch
    resumed = optim.MultiStepLR(opt, milestones=[2, 5], gamma=0.1, current_epoch=3)
    np.testing.assert_allclose([g["lr"] for g in opt.param_groups], [0.1, 0.02], rtol=1e-12)  # epoch 4
    resumed.load_state_dict(state)
    assert resumed.current_epoch == 7
    resumed.step(epoch=1)
    assert [g["lr"] for g in opt.param_groups] == [1.0, 0.2]
    with pytest.raises(KeyError):
        resumed.load_state_dict({"gamma": 0.5})
    assert resumed.gamma == 0.1
    with pytest.raises(KeyError, match="initial_lr"):
        optim.MultiStepLR(optim.SGD([mge.Parameter([1.0])], lr=1.0), [1], current_epoch=2)
    with pytest.raises(ValueError, match="increasing"):
        optim.MultiStepLR(opt, milestones=[5, 2])
    with pytest.raises(TypeError):
        optim.MultiStepLR(object(), milestones=[1])


def test_multi_step_lr_drives_sgd():
    w = mge.Parameter([0.0])
    opt = optim.SGD([w], lr=1.0)
    sched = optim.MultiStepLR(opt, milestones=[1], gamma=0.5)
    for _ in range(3):
        w.grad = mge.Tensor([1.0])
        opt.step()
        sched.step()
    np.testing.assert_allclose(w.numpy(), [-2.0])  # 1 + 0.5 + 0.5


# ---- end to end ----------------------------------------------------------------------------------------------
def test_mlp_trains_with_grad_manager_and_sgd():
    rng = np.random.RandomState(0)
    xs = rng.randn(32, 4).astype("float32")
    x, y = mge.Tensor(xs), mge.Tensor(np.abs(xs @ rng.randn(4, 1)).astype("float32"))
    w1 = mge.Parameter((rng.randn(16, 4) * 0.5).astype("float32"))
    b1 = mge.Parameter(np.zeros(16, "float32"))
    w2 = mge.Parameter((rng.randn(1, 16) * 0.25).astype("float32"))
    b2 = mge.Parameter(np.zeros(1, "float32"))
    params = [w1, b1, w2, b2]
    gm = GradManager().attach(params)
    opt = optim.SGD(params, lr=0.05, momentum=0.9)
    losses = []
    for _ in range(20):
        with gm:
            out = F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)
            loss = ((out - y) ** 2).mean()
            gm.backward(loss)
        optim.clip_grad_norm(params, max_norm=10.0)
        opt.step().clear_grad()
        losses.append(float(loss))
    assert all(p.grad is None for p in params)
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize("make", [
    lambda p: optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    lambda p: optim.Adam(p, lr=0.01),
    lambda p: optim.LAMB(p, lr=0.01),
], ids=["sgd_nesterov", "adam", "lamb"])
def test_xla_trace_step_matches_eager_across_hyper_parameter_changes(make):
    from megxla.jit import xla_trace
    rng = np.random.RandomState(0)
    batches = [(mge.Tensor(_rand(rng, (8, 4))), mge.Tensor(_rand(rng, (8, 1)))) for _ in range(5)]
    init = [_rand(rng, (3, 4)), _rand(rng, (3,)), _rand(rng, (1, 3))]

    def train(compiled):
        w1, b1, w2 = params = [mge.Parameter(a) for a in init]
        gm, opt = GradManager().attach(params), make(params)

        def step(w1, b1, w2, opt, x, y):
            with gm:
                loss = ((F.linear(F.relu(F.linear(x, w1, b1)), w2) - y) ** 2).mean()
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

        step = xla_trace(step) if compiled else step
        for i, (x, y) in enumerate(batches):
            if i == 3:  # new lr, and weight decay from 0 to non-zero: same executable
                opt.param_groups[0].update(lr=opt.param_groups[0]["lr"] * 0.3, weight_decay=0.05)
            step(w1, b1, w2, opt, x, y)
        return [p.numpy() for p in params], getattr(step, "num_compiled", 0)

    (eager, _), (traced, num_compiled) = train(False), train(True)
    assert num_compiled == 1
    for a, b in zip(eager, traced):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6)


def test_docstring_examples_run():
    names = ["optimizer", "sgd", "adam", "adamw", "adagrad", "adadelta", "lamb", "clip_grad", "lr_scheduler"]
    for name in names + [None]:
        mod = importlib.import_module("megxla.optimizer" + (f".{name}" if name else ""))
        with pytest.warns(DeprecationWarning) if name == "optimizer" else contextlib.nullcontext():
            result = doctest.testmod(mod)
        assert result.failed == 0, name



@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW])
def test_adam_step_count_is_shared_until_a_parameter_skips_a_step(cls):
    # One step Tensor per group (one buffer for a compiled step, not one per parameter), MegEngine's layout in
    # state_dict; a parameter without a gradient keeps its count (its own Tensor from then on), and a file with
    # different counts per parameter loads as such.
    ws = [mge.Parameter(np.ones(3, "float32")) for _ in range(3)]
    opt = cls(ws, lr=0.1)
    steps = [opt._state[w]["step"] for w in ws]
    assert steps[0] is steps[1] is steps[2]
    for w in ws:
        w.grad = mge.Tensor(np.ones(3, "float32"))
    opt.step().clear_grad()
    ws[0].grad = mge.Tensor(np.ones(3, "float32"))
    ws[2].grad = mge.Tensor(np.ones(3, "float32"))
    opt.step().clear_grad()
    counts = [float(opt._state[w]["step"].numpy()) for w in ws]
    assert counts == [2.0, 1.0, 2.0]
    assert opt._state[ws[0]]["step"] is opt._state[ws[2]]["step"] is not opt._state[ws[1]]["step"]
    sd = opt.state_dict()
    assert [float(sd["state"][i]["step"]) for i in range(3)] == [2.0, 1.0, 2.0]
    fresh = cls([mge.Parameter(np.ones(3, "float32")) for _ in range(3)], lr=0.1)
    fresh.load_state_dict(sd)
    got = [float(fresh._state[w]["step"].numpy()) for w in fresh.param_groups[0]["params"]]
    assert got == [2.0, 1.0, 2.0]
    same = cls([mge.Parameter(np.ones(3, "float32")) for _ in range(3)], lr=0.1)
    sd_equal = {**sd, "state": {i: dict(st, step=np.float32(5)) for i, st in sd["state"].items()}}
    same.load_state_dict(sd_equal)
    ps = same.param_groups[0]["params"]
    assert same._state[ps[0]]["step"] is same._state[ps[1]]["step"] is same._state[ps[2]]["step"]
    assert float(same._state[ps[1]]["step"].numpy()) == 5.0


def test_load_state_dict_with_a_slot_missing_raises_and_changes_nothing():
    """Accepted, a checkpoint missing one of Adam's slots made every later step raise KeyError."""
    w = mge.Parameter(np.ones(3, "float32"))
    opt = optim.Adam([w], lr=0.1)
    w.grad = mge.Tensor(np.ones(3, "float32"))
    opt.step()
    sd = opt.state_dict()
    before = {k: np.array(v) for k, v in opt._state[w].items()}
    del sd["state"][0]["exp_avg"]
    with pytest.raises(ValueError, match=r"missing \['exp_avg'\]"):
        opt.load_state_dict(sd)
    sd["state"][0]["exp_avg"], sd["state"][0]["bogus"] = np.zeros(3, "float32"), np.zeros(3, "float32")
    with pytest.raises(ValueError, match=r"unknown \['bogus'\]"):
        opt.load_state_dict(sd)
    assert {k: np.array(v) for k, v in opt._state[w].items()}.keys() == before.keys()
    for k, v in opt._state[w].items():
        np.testing.assert_array_equal(np.array(v), before[k])
    opt.step()  # (training goes on)


def test_load_state_dict_into_a_parameter_with_no_slot_checks_the_slots_it_may_have():
    """SGD without momentum keeps no slot: any loaded slot was accepted, and the step after momentum was turned on
    failed deep in the update (``OpError: optimizer_update[...]: invalid inputs``), probe Y."""
    w = mge.Parameter(np.ones(5, "float32"))
    opt = optim.SGD([w], lr=0.1)
    sd = opt.state_dict()
    with pytest.raises(ValueError, match=r"unknown \['junk'\]"):
        opt.load_state_dict({**sd, "state": {0: {"momentum_buffer": np.zeros(5), "junk": np.zeros(7)}}})
    with pytest.raises(ValueError, match=r"'momentum_buffer' of parameter 0 has shape \(7,\), expected \(5,\)"):
        opt.load_state_dict({**sd, "state": {0: {"momentum_buffer": np.zeros(7)}}})
    assert opt._state.get(w, {}) == {}
    opt.load_state_dict({**sd, "state": {0: {"momentum_buffer": np.full(5, 2.0, "float32")}}})
    opt.param_groups[0]["momentum"] = 0.9
    w.grad = mge.Tensor(np.ones(5, "float32"))
    opt.step()  # v = 0.9 * 2 + 1
    np.testing.assert_allclose(w.numpy(), 1 - 0.1 * 2.8, rtol=1e-6)


def test_lr_scheduler_bad_arguments_raise_before_anything_changes():
    """``step("3")`` kept the string as the epoch (every later step() failed); a string gamma raised after the
    groups got ``initial_lr``; a negative gamma wrote a negative rate that only opt.step() rejected; a state with
    unsorted milestones loaded; the state dict's milestones were the scheduler's own list (probe Y)."""
    opt = optim.SGD([mge.Parameter([1.0])], lr=1.0)
    with pytest.raises(TypeError, match="gamma must be a number"):
        optim.MultiStepLR(opt, [1], gamma="x")
    assert "initial_lr" not in opt.param_groups[0]
    with pytest.raises(ValueError, match="gamma must be a finite number >= 0"):
        optim.MultiStepLR(opt, [1], gamma=-0.5)
    with pytest.raises(TypeError, match="Milestones should be a list of increasing integers"):
        optim.MultiStepLR(opt, [1, "2"])
    sched = optim.MultiStepLR(opt, [1, 3])
    with pytest.raises(TypeError, match="MultiStepLR: epoch must be a number"):
        sched.step("3")
    with pytest.raises(ValueError, match="increasing"):
        sched.load_state_dict({"milestones": [3, 1], "gamma": 0.1, "current_epoch": 2})
    sched.gamma = -1.0  # (set by hand: the rate it gives is rejected at the scheduler's step, the epoch kept)
    with pytest.raises(ValueError, match="MultiStepLR: invalid lr -1.0"):
        sched.step()
    sched.gamma = 0.1
    assert sched.current_epoch == 0 and opt.param_groups[0]["lr"] == 1.0
    sched.step()
    assert sched.current_epoch == 1 and opt.param_groups[0]["lr"] == pytest.approx(0.1)
    sched.state_dict()["milestones"].append(9)
    assert sched.milestones == [1, 3]
    sched.step(2.5)  # (an epoch counted in fractions still works)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)


@pytest.mark.parametrize("auto", [False, True], ids=["eager", "auto_jit"])
def test_a_zero_dim_numpy_array_is_a_hyper_parameter_as_in_megengine(auto):
    # a schedule computed with NumPy on arrays (``np.cos(np.array(t))``) gives 0-d arrays: MegEngine makes a Tensor
    # of it; megxla raised "invalid lr array(0.05)"
    mge.config.auto_jit = auto
    try:
        w = mge.Parameter([1.0, 2.0])
        opt = optim.SGD([w], lr=np.array(0.5), momentum=np.float32(0.0), weight_decay=np.array(0, "int64"))
        for lr in (np.array(0.5), np.array(0.25, "float32")):
            opt.param_groups[0]["lr"] = lr
            w.grad = mge.Tensor([2.0, 4.0])
            opt.step()
        np.testing.assert_allclose(w.numpy(), [1.0 - 1.0 - 0.5, 2.0 - 2.0 - 1.0])
        with pytest.raises(ValueError, match="invalid lr"):
            opt.param_groups[0]["lr"] = np.array([0.1])  # (not a scalar)
            opt.step()
    finally:
        mge.config.auto_jit = False


def _megengine_sgd(p, grads, lr, momentum, weight_decay, nesterov):
    """MegEngine 1.13's SGD as it runs: one float32 op after another, each result rounded (checked bit for bit
    against MegEngine 1.13's own updates)."""
    f = np.float32
    v = np.zeros_like(p)
    for g in grads:
        if weight_decay:
            g = g + p * f(weight_decay)
        if momentum:
            v = v * f(momentum)
            v = v + g
            g = g + v * f(momentum) if nesterov else v
        p = p - f(lr) * g
    return p


def _megengine_adam(p, grads, lr, weight_decay, decoupled, betas=(0.9, 0.999), eps=1e-8):
    f = np.float32
    m, v, step = np.zeros_like(p), np.zeros_like(p), f(0)
    b0, b1 = f(betas[0]), f(betas[1])
    for g in grads:
        if weight_decay and not decoupled:
            g = g + p * f(weight_decay)
        step = step + f(1)
        m = m * b0
        m = m + g * (f(1) - b0)
        v = v * b1
        v = v + (f(1) - b1) * (g * g)
        delta = (m / (f(1) - np.power(b0, step, dtype=f))) / (
            np.sqrt(v / (f(1) - np.power(b1, step, dtype=f))) + f(eps))
        if weight_decay and decoupled:
            delta = delta + p * f(weight_decay)
        p = p - f(lr) * delta
    return p


@pytest.mark.parametrize("auto_jit", [False, True])
def test_updates_round_as_megengines_op_by_op_arithmetic(auto_jit, fresh_auto_jit_state):
    # One compiled update per group: LLVM contracted ``g + p * wd`` (and every other product read by a sum) into one
    # fused multiply-add, and XLA divided by reciprocals: after three steps 24-42% of SGD's float32 parameters and
    # 5-7% of Adam's were an ulp or more from MegEngine 1.13's (module fuzz seed 10 case 24). Bit for bit now.
    rng = np.random.RandomState(0)
    p0 = rng.randn(4000).astype("float32")
    grads = [rng.randn(4000).astype("float32") for _ in range(3)]
    cases = [
        (lambda P: optim.SGD(P, lr=0.1352, momentum=0.9, weight_decay=0.1),
         _megengine_sgd(p0, grads, 0.1352, 0.9, 0.1, False)),
        (lambda P: optim.SGD(P, lr=0.1352, momentum=0.9, nesterov=True),
         _megengine_sgd(p0, grads, 0.1352, 0.9, 0, True)),
        (lambda P: optim.SGD(P, lr=0.1352), _megengine_sgd(p0, grads, 0.1352, 0, 0, False)),
        (lambda P: optim.Adam(P, lr=0.01, weight_decay=0.1), _megengine_adam(p0, grads, 0.01, 0.1, False)),
        (lambda P: optim.AdamW(P, lr=0.01, weight_decay=0.1), _megengine_adam(p0, grads, 0.01, 0.1, True)),
    ]
    mge.config.auto_jit = auto_jit
    for make, want in cases:
        p = mge.Parameter(p0)
        opt = make([p])
        for g in grads:
            p.grad = mge.tensor(g)
            opt.step()
        np.testing.assert_array_equal(p.numpy(), want)
