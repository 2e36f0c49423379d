"""Tests for megxla.amp: dtypes under autocast, numerics against float32, gradients through the casts,
GradScaler growth/backoff/inf handling and state, format conversion, and a mixed precision training step."""
import doctest

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla import amp
from megxla.amp import GradScaler, autocast
from megxla.autodiff import GradManager

RNG = np.random.RandomState(0)


def _t(*shape):
    return mge.Tensor(RNG.randn(*shape).astype("float32"))


# ---- autocast: dtypes ----------------------------------------------------------------------------------------
LOW_OPS = {
    "matmul": lambda: F.matmul(_t(2, 3), _t(3, 4)),
    "matmul_batched": lambda: F.matmul(_t(5, 2, 3), _t(3, 4), transpose_a=False),
    "linear": lambda: F.linear(_t(2, 3), _t(4, 3), _t(4)),
    "linear_nobias": lambda: F.linear(_t(2, 3), _t(4, 3)),
    "conv1d": lambda: F.conv1d(_t(1, 2, 6), _t(3, 2, 3), _t(1, 3, 1)),
    "conv2d": lambda: F.conv2d(_t(1, 3, 6, 6), _t(4, 3, 3, 3), _t(1, 4, 1, 1), padding=1),
    "conv_transpose2d": lambda: F.conv_transpose2d(_t(1, 2, 4, 4), _t(2, 3, 3, 3), stride=2),
    "module_linear": lambda: M.Linear(3, 4)(_t(2, 3)),
    "module_conv2d": lambda: M.Conv2d(3, 4, 3)(_t(1, 3, 5, 5)),
}


def _h(*shape):
    return _t(*shape).astype("float16")


# MegEngine 1.13.0 under autocast (its dtype_promote.cpp rules; the dtypes were printed by MegEngine): these keep
# float32 / compute in float32, whatever the input precision
HIGH_OPS = {
    "conv3d": lambda: F.conv3d(_t(1, 2, 4, 4, 4), _t(3, 2, 3, 3, 3)),
    "conv_transpose3d": lambda: F.conv_transpose3d(_t(1, 2, 2, 2, 2), _t(2, 3, 2, 2, 2)),
    "exp": lambda: F.exp(_h(2)), "log": lambda: F.log(F.abs(_h(2))), "sqrt": lambda: F.sqrt(F.abs(_h(2))),
    "sin": lambda: F.sin(_h(2)), "pow": lambda: _h(2) ** 2, "true_div": lambda: _h(2) / _h(2),
    "logsumexp": lambda: F.logsumexp(_h(2, 3), axis=1),
    "layer_norm": lambda: F.nn.layer_norm(_h(2, 3), (3,), affine=False),
    "group_norm": lambda: F.nn.group_norm(_h(1, 2, 3, 3), 1, affine=False),
    "interpolate": lambda: F.nn.interpolate(_h(1, 1, 2, 2), scale_factor=2),
}
# ... and these keep the input's low precision (batch norm takes its input in float16, statistics in float32)
KEEP_LOW_OPS = {
    "softmax": lambda: F.softmax(_h(2, 3)), "tanh": lambda: F.tanh(_h(2)),
    "batch_norm": lambda: M.BatchNorm2d(3)(_t(2, 3, 4, 4)),
    "batch_norm_eval": lambda: M.BatchNorm2d(3, freeze=True)(_t(2, 3, 4, 4)),
    "batch_norm_f": lambda: F.nn.batch_norm(_t(2, 3, 4, 4), F.zeros((1, 3, 1, 1)), F.ones((1, 3, 1, 1))),
    "instance_norm": lambda: M.InstanceNorm(2)(_h(1, 2, 3, 3)),
    "conv_bn_relu": lambda: M.Sequential(M.Conv2d(3, 4, 3), M.BatchNorm2d(4), M.ReLU())(_t(2, 3, 5, 5)),
}


@pytest.mark.parametrize("name", sorted(HIGH_OPS))
def test_autocast_high_precision_ops_as_megengine(name):
    with autocast():
        assert HIGH_OPS[name]().dtype == np.float32


@pytest.mark.parametrize("name", sorted(KEEP_LOW_OPS))
def test_autocast_ops_that_stay_low_precision_as_megengine(name):
    with autocast():
        assert KEEP_LOW_OPS[name]().dtype == np.float16


def test_autocast_batch_norm_statistics_follow_the_float16_input():
    # MegEngine: the running mean comes from the float16-cast input (0.01669098, not float32's 0.01669464)
    bn = M.BatchNorm2d(3)
    x = mge.Tensor(np.random.RandomState(0).randn(2, 3, 4, 4).astype("float32"))
    assert bn(x.astype("float16")).dtype == np.float16  # a float16 input gives float16 without autocast too
    with autocast():
        y = bn(x)
    np.testing.assert_allclose(bn.running_mean.numpy().ravel(), [0.01669098, -0.00171685, 0.00674564], rtol=1e-5)
    np.testing.assert_allclose(y.numpy().ravel()[:3], [1.796, 0.3345, 0.954], rtol=2e-3)


@pytest.mark.parametrize("name", sorted(LOW_OPS))
def test_autocast_low_precision_ops(name):
    assert LOW_OPS[name]().dtype == np.float32
    with autocast():
        assert LOW_OPS[name]().dtype == np.float16
    assert LOW_OPS[name]().dtype == np.float32


def test_autocast_other_ops_promote_and_matmul_casts_ints():
    with autocast():
        y = F.matmul(_t(2, 3), _t(3, 4))
        assert (y + _t(2, 4)).dtype == np.float32  # elementwise: ordinary promotion
        assert F.relu(y).dtype == np.float16
        assert F.softmax(y, axis=1).dtype == np.float16
        i = F.matmul(mge.Tensor([[1, 2]], dtype="int32"), mge.Tensor([[3], [4]], dtype="int32"))
        assert i.dtype == np.float16 and i.numpy()[0, 0] == 11  # (MegEngine casts int operands too: session 79)


def test_autocast_decorator_nesting_and_disable():
    @autocast()
    def f():
        return F.matmul(_t(2, 2), _t(2, 2)).dtype

    assert f() == np.float16
    assert F.matmul(_t(2, 2), _t(2, 2)).dtype == np.float32
    with autocast():
        with autocast(enabled=False):  # a disabled block changes nothing: the outer one stays active
            assert F.matmul(_t(2, 2), _t(2, 2)).dtype == np.float16
        with autocast(low_prec_dtype="bfloat16"):
            assert F.matmul(_t(2, 2), _t(2, 2)).dtype.name == "bfloat16"
        assert F.matmul(_t(2, 2), _t(2, 2)).dtype == np.float16
    assert autocast(enabled=False)(lambda: F.matmul(_t(2, 2), _t(2, 2)).dtype)() == np.float32


def test_autocast_restores_state_on_exception():
    with pytest.raises(ZeroDivisionError):
        with autocast():
            1 / 0
    assert F.matmul(_t(2, 2), _t(2, 2)).dtype == np.float32
    ac = autocast()

    @ac
    def rec(n):  # the same autocast object entered re-entrantly
        return rec(n - 1) if n else F.matmul(_t(2, 2), _t(2, 2)).dtype

    assert rec(3) == np.float16
    assert F.matmul(_t(2, 2), _t(2, 2)).dtype == np.float32


def test_autocast_bad_dtype():
    with pytest.raises(ValueError, match="low_prec_dtype"):
        autocast(low_prec_dtype="int8")
    with pytest.raises(ValueError, match="high_prec_dtype"):
        autocast(high_prec_dtype="nope")


# ---- autocast: numerics and gradients ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["matmul", "linear", "conv2d", "conv_transpose2d"])
def test_autocast_numerics_close_to_float32(name):
    state = RNG.get_state()
    ref = LOW_OPS[name]().numpy()
    RNG.set_state(state)  # same inputs again
    with autocast():
        low = LOW_OPS[name]().numpy()
    assert low.dtype == np.float16
    # fp16 has a 2**-11 relative precision per rounding; sums of O(10) products stay within ~1e-2.
    np.testing.assert_allclose(low.astype("float32"), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())


def test_autocast_gradients_are_float32_and_close():
    x, w, b = _t(8, 5), mge.Parameter(RNG.randn(3, 5).astype("float32")), mge.Parameter(np.zeros(3, "float32"))
    grads = {}
    for mode in ("fp32", "amp"):
        gm = GradManager().attach([w, b])
        with gm:
            if mode == "amp":
                with autocast():
                    y = F.linear(x, w, b)
                assert y.dtype == np.float16
            else:
                y = F.linear(x, w, b)
            gm.backward((y.astype("float32") ** 2).mean())
        assert w.grad.dtype == np.float32 and b.grad.dtype == np.float32
        grads[mode] = (w.grad.numpy(), b.grad.numpy())
        w.grad = b.grad = None
    for g_amp, g_ref in zip(grads["amp"], grads["fp32"]):
        np.testing.assert_allclose(g_amp, g_ref, rtol=2e-2, atol=2e-2 * np.abs(g_ref).max())


# ---- GradScaler ----------------------------------------------------------------------------------------------
def _scaled_step(scaler, w, x, **kw):
    gm = GradManager().attach([w])
    with gm:
        loss = (w * x).sum()
        scaler.backward(gm, loss, **kw)
    return gm


def test_grad_scaler_defaults_and_unscaled_grads():
    s = GradScaler()
    assert (s.scale_factor, s.growth_factor, s.backoff_factor, s.growth_interval) == (16.0, 2.0, 0.5, 2000)
    w = mge.Parameter([1.0, 2.0])
    _scaled_step(s, w, mge.Tensor([3.0, 4.0]))
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 4.0])  # scaled by 16 then unscaled
    assert s.scale_factor == 16.0 and s.state_dict()["_growth_tracker"] == 1


def test_grad_scaler_growth_and_backoff():
    s = GradScaler(init_scale=4.0, growth_factor=2.0, backoff_factor=0.25, growth_interval=3)
    w = mge.Parameter([1.0])
    scales = []
    for x in [1.0, 1.0, 1.0, 1.0, np.inf, 1.0, np.nan, 1.0, 1.0, 1.0]:
        w.grad = None
        _scaled_step(s, w, mge.Tensor([x]))
        if np.isfinite(x):
            np.testing.assert_allclose(w.grad.numpy(), [x])
        else:
            assert w.grad is None  # non-finite: gradients dropped, the optimizer skips the step
        scales.append(s.scale_factor)
    assert scales == [4.0, 4.0, 8.0, 8.0, 2.0, 2.0, 0.5, 0.5, 0.5, 1.0]


def test_grad_scaler_overflow_in_scaled_fp16_backward():
    # A float16 gradient that overflows only because of the scale: the step is skipped and the scale backs off.
    s = GradScaler(init_scale=2.0 ** 14)
    w = mge.Parameter(np.ones(4, "float16"))
    _scaled_step(s, w, mge.Tensor(np.full(4, 8.0, "float16")))  # 8 * 2**14 > 65504, float16's max
    assert w.grad is None and s.scale_factor == 2.0 ** 13
    _scaled_step(s, w, mge.Tensor(np.full(4, 0.5, "float16")))
    assert w.grad.dtype == np.float16
    np.testing.assert_allclose(w.grad.numpy(), 0.5)


def test_grad_scaler_manual_unscale_update_and_dy():
    s = GradScaler(init_scale=8.0)
    w = mge.Parameter([1.0, 1.0])
    _scaled_step(s, w, mge.Tensor([1.0, 2.0]), unscale_grad=False)
    np.testing.assert_allclose(w.grad.numpy(), [8.0, 16.0])
    assert s.state_dict()["_growth_tracker"] == 0  # no update without unscale
    s.unscale([w]).update()
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 2.0])
    assert s.state_dict()["_growth_tracker"] == 1
    s.update(new_scale=3.0)
    assert s.scale_factor == 3.0
    # explicit dy is multiplied by the scale, and update_scale=False leaves the scale alone
    w.grad = None
    gm = GradManager().attach([w])
    with gm:
        y = w * 2.0
        s.backward(gm, y, mge.Tensor([1.0, 10.0]), update_scale=False)
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 20.0])
    assert s.state_dict()["_growth_tracker"] == 1
    # tensors without grads are skipped; y=None only ends the recording
    v = mge.Parameter([1.0])
    assert s.unscale([v, None]) is s
    gm = GradManager().attach([v])
    with gm:
        s.backward(gm)
    assert v.grad is None


def test_grad_scaler_state_dict_roundtrip_and_validation():
    s = GradScaler(init_scale=32.0, growth_interval=5)
    w = mge.Parameter([1.0])
    _scaled_step(s, w, mge.Tensor([1.0]))
    st = s.state_dict()
    t = GradScaler()
    t.load_state_dict(st)
    assert t.state_dict() == st == {"scale_factor": 32.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                    "growth_interval": 5, "_growth_tracker": 1}
    for kw in ({"init_scale": 0}, {"growth_factor": 0.5}, {"backoff_factor": 2.0}, {"growth_interval": -1}):  # 0 is static (MegEngine)
        with pytest.raises(ValueError):
            GradScaler(**kw)


# ---- format conversion ---------------------------------------------------------------------------------------
def test_convert_format_is_identity():
    x = _t(1, 3, 4, 4)
    assert amp.convert_tensor_format(x) is x and x.format == "default"
    y = amp.convert_tensor_format(x, inplace=False)  # (MegEngine: a new Tensor of x's values, off the graph)
    assert y is not x and type(y) is mge.Tensor and np.array_equal(y.numpy(), x.numpy())
    m = M.Sequential(M.Conv2d(3, 4, 3), M.BatchNorm2d(4))
    before = m(x).numpy()
    assert amp.convert_module_format(m) is m
    m2 = amp.convert_module_format(m, inplace=False)
    assert m2 is not m
    np.testing.assert_allclose(m2(x).numpy(), before, rtol=1e-6)
    with pytest.raises(TypeError):
        amp.convert_tensor_format(np.ones(3))
    with pytest.raises(TypeError):
        amp.convert_module_format(x)


# ---- an amp training step of a tiny model --------------------------------------------------------------------
class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(1, 4, 3, padding=1)
        self.fc = M.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        x = F.relu(self.conv(x))
        return self.fc(F.flatten(x, 1))


def _train(use_amp, steps=4):
    mge.random.seed(3)
    net = _Net()
    data = np.random.RandomState(1)
    x = mge.Tensor(data.randn(8, 1, 6, 6).astype("float32"))
    label = mge.Tensor(data.randint(0, 3, size=8).astype("int32"))
    gm = GradManager().attach(net.parameters())
    opt = optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    scaler = GradScaler(init_scale=1024.0, growth_interval=2)
    losses = []
    for _ in range(steps):
        with gm:
            with autocast(enabled=use_amp):
                logits = net(x)
            assert logits.dtype == (np.float16 if use_amp else np.float32)
            loss = F.nn.cross_entropy(logits.astype("float32"), label)
            if use_amp:
                scaler.backward(gm, loss)
            else:
                gm.backward(loss)
        for p in net.parameters():
            assert p.dtype == np.float32 and p.grad.dtype == np.float32
        opt.step().clear_grad()
        losses.append(loss.item())
    return losses, [p.numpy() for p in net.parameters()], scaler


def test_amp_training_step_matches_float32():
    ref_losses, ref_params, _ = _train(False)
    amp_losses, amp_params, scaler = _train(True)
    assert amp_losses[-1] < amp_losses[0]
    np.testing.assert_allclose(amp_losses, ref_losses, rtol=2e-2, atol=2e-3)
    for a, r in zip(amp_params, ref_params):
        np.testing.assert_allclose(a, r, rtol=5e-2, atol=5e-3)
    assert scaler.scale_factor == 1024.0 * 2 ** 2  # 4 finite steps, growth every 2


def test_docstring_examples():
    import sys
    globs = {"mge": mge, "F": F, "np": np}
    for name in ("megxla.amp", "megxla.amp.autocast", "megxla.amp.convert_format"):
        res = doctest.testmod(sys.modules[name], extraglobs=globs, optionflags=doctest.ELLIPSIS)
        assert res.failed == 0 and res.attempted > 0, name
    for obj in (GradScaler, GradScaler.state_dict, GradScaler.load_state_dict):
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        for test in doctest.DocTestFinder(recurse=False).find(obj, globs={"GradScaler": GradScaler, **globs}):
            runner.run(test)
        assert runner.failures == 0 and runner.tries > 0, obj


def _scaled_steps(mode, pattern, inputs):
    """Weights, ``.grad is None`` flags and scales after each call of a GradScaler step compiled by ``mode``
    (or eager), with the optimizer stepping outside it (``pattern``: "step outside" every call, or
    "accumulate": update_scale=False and scaler.update() + opt.step() every second call)."""
    from megxla import jit
    from megxla.optimizer import SGD
    mge.random.seed(0)
    net = M.Linear(4, 2)
    opt = SGD(net.parameters(), lr=0.1)
    gm = GradManager().attach(net.parameters())
    scaler = GradScaler(init_scale=1024.0)

    def fb(x, net, gm, scaler):
        with gm:
            loss = net(x).sum()
            scaler.backward(gm, loss, update_scale=pattern != "accumulate")
        return loss

    if mode != "eager":
        fb = {"xla_trace": jit.xla_trace, "trace": jit.trace,
              "symbolic": lambda f: jit.trace(f, symbolic=True)}[mode](fb)
    seen = []
    for i, x in enumerate(inputs):
        fb(mge.Tensor(x), net, gm, scaler)
        none = net.weight.grad is None
        if pattern == "accumulate":
            if i % 2 == 1:
                scaler.update()
                opt.step().clear_grad()
        else:
            opt.step().clear_grad()
        seen.append((net.weight.numpy().copy(), none, scaler.scale_factor))
    return seen


@pytest.mark.parametrize("mode", ["xla_trace", "trace", "symbolic"])
@pytest.mark.parametrize("pattern", ["step outside", "accumulate"])
def test_grad_scaler_in_a_compiled_step_hands_eager_gradients_out(mode, pattern):
    # Only backward + unscale are compiled; the optimizer steps eagerly. On an overflow eager unscale leaves
    # every .grad None (the eager step then skips): a compiled step must hand out the same, not the non-finite
    # gradients with an in-graph flag no eager optimizer sees. update_scale=False keeps the flag in the scaler
    # (state) for an eager update() later.
    inputs = [np.ones((2, 4), "float32") for _ in range(6)]
    inputs[2] = inputs[2].copy()
    inputs[2][0, 0] = np.inf
    if pattern == "accumulate":
        inputs[5] = inputs[2]
    want = _scaled_steps("eager", pattern, inputs)
    got = _scaled_steps(mode, pattern, inputs)
    for i, ((w1, n1, s1), (w2, n2, s2)) in enumerate(zip(want, got)):
        assert (n1, s1) == (n2, s2), i
        np.testing.assert_allclose(w2, w1, rtol=1e-6, err_msg=str(i))
    assert any(n for _, n, _ in want)


def test_amp_module_properties_switch_autocast_globally():
    # MegEngine's `mge.amp.enabled = True` (the amp guide) turns autocast on for everything that follows;
    # low/high_prec_dtype are module properties too. A compiled step follows the switch (it keys recordings).
    from megxla import jit
    assert (mge.amp.enabled, mge.amp.low_prec_dtype, mge.amp.high_prec_dtype) == (False, "float16", "float32")
    f = jit.xla_trace(lambda x, w: F.linear(x, w))
    x, w = F.ones((2, 3)), F.ones((4, 3))
    try:
        mge.amp.enabled = True
        assert F.linear(x, w).dtype == np.float16
        assert all(f(x, w).dtype == np.float16 for _ in range(3))
        mge.amp.low_prec_dtype = "bfloat16"
        assert F.matmul(x, w.T).dtype.name == "bfloat16"
        with pytest.raises(ValueError, match="low_prec_dtype"):
            mge.amp.low_prec_dtype = "int8"
    finally:
        mge.amp.enabled = False
        mge.amp.low_prec_dtype = "float16"
    assert F.linear(x, w).dtype == np.float32
    assert all(f(x, w).dtype == np.float32 for _ in range(3))


# ---- bfloat16 ----------------------------------------------------------------------------------------------------
class _Bf16Net(M.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.fc = M.Conv2d(1, 2, 3), M.BatchNorm2d(2), M.Linear(2 * 4 * 4, 3)

    def forward(self, x):
        return self.fc(F.flatten(F.relu(self.bn(self.conv(x))), 1))


def _bf16_net():
    mge.random.seed(3)
    return _Bf16Net()


@pytest.mark.parametrize("auto_jit", [False, True])
def test_autocast_bfloat16_gives_every_parameter_its_gradient_close_to_float32s(auto_jit):
    # bfloat16 is NumPy kind "V": the gradient tape took its values for non-floats and gave no parameter a
    # gradient under autocast(low_prec_dtype="bfloat16") -- training silently did nothing
    x = mge.Tensor(np.random.RandomState(1).randn(4, 1, 6, 6).astype("float32"))
    y = mge.Tensor(np.array([0, 2, 1, 2], "int32"))
    grads = {}
    for low in ("bfloat16", None):
        net = _bf16_net()
        gm = GradManager().attach(net.parameters())
        mge.config.auto_jit = auto_jit
        try:
            with gm:
                with autocast(enabled=low is not None, low_prec_dtype=low or "float16"):
                    out = net(x)
                gm.backward(F.nn.cross_entropy(out.astype("float32"), y))
            grads[low] = [p.grad.numpy().astype("float32") for p in net.parameters()]
        finally:
            mge.config.auto_jit = False
        if low:
            assert out.dtype.name == "bfloat16"
    scale = max(np.abs(g).max() for g in grads[None])  # (the conv's bias before BatchNorm: a gradient of ~0)
    # (bfloat16's 8 bits through conv, BatchNorm and the loss: up to 2.6% of the largest gradient apart with
    # MegEngine's initial parameters of seed 3; the fault this guards gave zeros)
    for g16, g32 in zip(grads["bfloat16"], grads[None]):
        np.testing.assert_allclose(g16, g32, rtol=0.1, atol=0.05 * scale)


def test_a_bfloat16_model_trains_as_floats_do():
    # the float-only front ends (conv, pooling, norms, losses) and the optimizer's gradient check took bfloat16
    # for a non-float ("conv2d: input must be a float tensor, got bfloat16")
    net = _bf16_net()
    for t in list(net.parameters()) + list(net.buffers()):
        t._reset(t.astype("bfloat16"))
    gm = GradManager().attach(net.parameters())
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x = mge.Tensor(np.random.RandomState(2).randn(4, 1, 6, 6), dtype="bfloat16")
    y = mge.Tensor(np.array([0, 2, 1, 2], "int32"))
    losses = []
    for _ in range(5):
        with gm:
            loss = F.nn.cross_entropy(F.max_pool2d(net(x).reshape(4, 3, 1, 1), 1).reshape(4, 3), y)
            gm.backward(loss)
        assert all(p.grad is not None and p.grad.dtype.name == "bfloat16" for p in net.parameters())
        opt.step().clear_grad()
        losses.append(loss.item())
    assert all(p.dtype.name == "bfloat16" for p in net.parameters())
    assert losses[-1] < losses[0]
    with pytest.raises(mge.core._dispatch.OpError, match="matinv: input must be a float16, float32 or float64"):
        F.matinv(mge.Tensor(np.eye(2), dtype="bfloat16"))


def test_bfloat16_values_are_not_taken_for_integers():
    # bfloat16 (NumPy kind "V") was not a float to clip's bounds, full's fill value and load_state_dict:
    # clip(x, 0.5, 1.5) clipped to [0, 1], full(..., 0.5) filled 0, a bfloat16 checkpoint was refused
    x = mge.Tensor(np.array([0.2, 1.0, 2.0]), dtype="bfloat16")
    f32 = lambda t: t.numpy().astype("float32").tolist()
    assert f32(F.clip(x, 0.5, 1.5)) == [0.5, 1.0, 1.5]
    assert f32(F.full((2,), 0.5, dtype="bfloat16")) == [0.5, 0.5]
    assert f32(F.full_like(x, 0.25)) == [0.25] * 3
    m = M.Linear(2, 2)
    sd = {k: v.astype("bfloat16") for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    assert m.weight.dtype.name == "bfloat16"
    np.testing.assert_array_equal(m.weight.numpy(), sd["weight"])


def test_grad_scaler_flags_gradients_that_overflow_when_unscaled():
    # At a scale below 1 the scaled gradient can be finite where the true one is not (float32 max 3.4e38): the check
    # was on the scaled values, so `w.grad` came back inf and the SGD step made `w` NaN (probe Y)
    from megxla.amp import GradScaler
    w = mge.Parameter(np.ones(3, "float32"))
    gm, scaler = GradManager().attach([w]), GradScaler(init_scale=1.0)
    scaler.update(0.25)
    with gm:
        scaler.backward(gm, (w * 2e38).sum() * 2)  # true gradient 4e38: 1e38 scaled
    assert w.grad is None and scaler.scale_factor == 0.125
    optim.SGD([w], lr=0.1).step()
    assert np.array_equal(w.numpy(), np.ones(3, "float32"))


def test_grad_scaler_scale_backs_off_to_the_smallest_normal_float_not_zero():
    # ~150 overflowing steps took the float32 scale to 0, after which every step divided by it: NaN weights
    from megxla.amp import GradScaler
    w = mge.Parameter(np.ones(3, "float32"))
    gm, scaler = GradManager().attach([w]), GradScaler(init_scale=2.0 ** 16)
    for _ in range(200):
        with gm:
            scaler.backward(gm, (w * np.inf).sum())
    assert scaler.scale_factor == np.finfo(np.float32).tiny
    with gm:
        scaler.backward(gm, (w * 2).sum())
    assert w.grad is None or np.isfinite(w.grad.numpy()).all()
    optim.SGD([w], lr=0.1).step()
    assert np.isfinite(w.numpy()).all()


def test_grad_scaler_rejects_bad_settings_and_loads_a_state_all_or_nothing():
    from megxla.amp import GradScaler
    for kwargs, error in [(dict(init_scale="x"), TypeError), (dict(init_scale=float("inf")), ValueError),
                          (dict(init_scale=0), ValueError), (dict(growth_interval=2.5), ValueError),
                          (dict(backoff_factor=5), ValueError), (dict(growth_factor="2"), TypeError)]:
        with pytest.raises(error, match="GradScaler: " + next(iter(kwargs))):
            GradScaler(**kwargs)
    s = GradScaler()
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive and finite"):
            s.update(bad)
    assert s.scale_factor == 16.0
    before = s.state_dict()
    with pytest.raises(KeyError, match="growth_factor"):
        s.load_state_dict({"scale_factor": 1024.0})  # (it set the scale, then raised)
    for bad in ({**before, "scale_factor": -8.0}, {**before, "backoff_factor": 5.0}, {**before, "_growth_tracker": -1}):
        with pytest.raises(ValueError):
            s.load_state_dict(bad)
    assert s.state_dict() == before


def test_grad_scaler_unscales_a_single_tensor_given_alone():
    # `unscale(w)` iterated the tensor's rows (no gradient): nothing unscaled, the next step scale times too large
    from megxla.amp import GradScaler
    w = mge.Parameter(np.ones(3, "float32"))
    gm, scaler = GradManager().attach([w]), GradScaler()
    with gm:
        scaler.backward(gm, (w * 2).sum(), unscale_grad=False)
    assert w.grad.numpy().tolist() == [32.0] * 3
    scaler.unscale(w)
    assert w.grad.numpy().tolist() == [2.0] * 3
