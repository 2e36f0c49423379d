"""The structure of eager execution (issue 12): how many ops an eager training step dispatches, and the device
transfer as an op (``Tensor.to``, ``Tensor(t, device=)``, ``F.copy(x, device)``) that traces follow."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.core import _dispatch
from megxla.jit import trace, xla_trace


# ---- op calls per eager training step -------------------------------------------------------------------------
class _MLP(M.Module):  # benchmarks/models.py's MLP, smaller
    def __init__(self):
        super().__init__()
        self.fc0, self.fc1, self.fc2 = M.Linear(16, 32), M.Linear(32, 32), M.Linear(32, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(F.relu(self.fc0(x)))))


class _ConvNet(M.Module):  # benchmarks/models.py's ConvNet (2 x Conv-BN-ReLU-AvgPool + 3 Linear), smaller
    def __init__(self):
        super().__init__()
        self.conv0, self.bn0 = M.Conv2d(1, 4, 3, padding=1), M.BatchNorm2d(4)
        self.conv1, self.bn1 = M.Conv2d(4, 8, 3, padding=1), M.BatchNorm2d(8)
        self.pool = M.AvgPool2d(2)
        self.fc0, self.fc1, self.fc2 = M.Linear(8 * 2 * 2, 16), M.Linear(16, 16), M.Linear(16, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn0(self.conv0(x))))
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = F.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(F.relu(self.fc0(x)))))


def _ops_per_step(model, x, y, make_opt=lambda ps: optim.Adam(ps, lr=1e-3)):
    opt = make_opt(model.parameters())
    gm = GradManager().attach(model.parameters())

    def step():
        with gm:
            loss = F.nn.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step().clear_grad()

    step()  # the first step creates nothing new, but warms caches (hyper-parameter tensors)
    ops = []
    # NOTE: every eager computation of the dispatch point goes through ``_compute`` (both ``apply``'s inlined
    # fast path and ``eager_apply``); count there.
    orig = _dispatch._compute

    def counting(op, inputs):
        ops.append(op.name)
        return orig(op, inputs)

    _dispatch._compute = counting
    try:
        step()
    finally:
        _dispatch._compute = orig
    assert ops, "no op was counted: the dispatch point's compute hook moved"
    return ops


def test_mlp_adam_eager_step_op_calls():
    x = mge.Tensor(np.random.RandomState(0).randn(4, 16).astype("float32"))
    ops = _ops_per_step(_MLP(), x, mge.Tensor([1, 2, 3, 4]))
    assert len(ops) <= 25, ops  # was 145 (21 optimizer ops per parameter)
    assert ops.count("optimizer_update") == 1  # the whole update of the one param group is one op


def test_convnet_bn_adam_eager_step_op_calls():
    x = mge.Tensor(np.random.RandomState(0).randn(2, 1, 8, 8).astype("float32"))
    ops = _ops_per_step(_ConvNet(), x, mge.Tensor([1, 2]))
    assert len(ops) <= 50, ops  # was 267 (+ 9 per BatchNorm, + a bias flatten per conv)
    assert ops.count("optimizer_update") == 1
    assert ops.count("batch_norm_train_update") == 2  # BN forward + running statistics: one op per layer
    assert ops.count("reshape") == 1  # the model's own flatten; no no-op reshapes (conv bias, BN affine)


def test_every_optimizer_steps_a_group_in_one_op():
    for make in (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-4),
                 lambda ps: optim.AdamW(ps, lr=1e-3), lambda ps: optim.Adagrad(ps),
                 lambda ps: optim.Adadelta(ps), lambda ps: optim.LAMB(ps, lr=1e-3, weight_decay=0.01)):
        x = mge.Tensor(np.ones((2, 16), "float32"))
        ops = _ops_per_step(_MLP(), x, mge.Tensor([0, 1]), make)
        assert ops.count("optimizer_update") == 1 and len(ops) <= 25, ops


def test_batchnorm_one_op_matches_the_functional_path():
    rng = np.random.RandomState(1)
    x = mge.Tensor(rng.randn(4, 3, 5, 5).astype("float32"))
    bn = M.BatchNorm2d(3, momentum=0.8)
    bn.weight._reset(mge.Tensor(rng.rand(1, 3, 1, 1).astype("float32")))
    rm, rv = mge.Tensor(bn.running_mean.numpy()), mge.Tensor(bn.running_var.numpy())
    for _ in range(2):
        y = bn(x)
        ref = F.batch_norm(x, rm, rv, bn.weight, bn.bias, training=True, momentum=0.8)
        np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(bn.running_mean.numpy(), rm.numpy(), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(bn.running_var.numpy(), rv.numpy(), rtol=1e-6, atol=1e-7)
    # gradients through the fused op equal the functional path's
    gm = GradManager().attach([bn.weight, bn.bias, x])
    with gm:
        gm.backward((bn(x) * x).sum())
    g1 = [t.grad.numpy() for t in (bn.weight, bn.bias, x)]
    for t in (bn.weight, bn.bias, x):
        t.grad = None
    with gm:
        y = F.batch_norm(x, None, None, bn.weight, bn.bias, training=True)
        gm.backward((y * x).sum())
    for a, t in zip(g1, (bn.weight, bn.bias, x)):
        np.testing.assert_allclose(a, t.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_primitive_bind_is_cached_by_keywords_as_given():
    from megxla.core.ops import reduction as R
    a = R.sum.bind(axis=(1,), keepdims=False)
    assert R.sum.bind(keepdims=False, axis=(1,)) is a  # another keyword order: the same interned op
    assert R.sum.bind(axis=[1], keepdims=False) is a  # unhashable values take the slow path, same op
    assert R.sum.bind(axis=(0,), keepdims=False) is not a


# ---- device transfer is an op -----------------------------------------------------------------------------------
@pytest.mark.parametrize("tracer", [xla_trace, trace, trace(without_host=True)],
                         ids=["xla_trace", "trace", "trace_without_host"])
@pytest.mark.parametrize("how", ["to", "tensor", "copy"])
def test_device_transfer_inside_a_trace_follows_its_input(tracer, how):
    move = {"to": lambda x: x.to("cpu0"), "tensor": lambda x: mge.Tensor(x, device="cpu0"),
            "copy": lambda x: F.copy(x, "cpu0")}[how]

    @tracer
    def f(x):
        return move(x) * 2

    for v in (1.0, 5.0, 7.0, -2.0):  # record, compile, run: every call sees its own input
        np.testing.assert_array_equal(f(mge.Tensor([v])).numpy(), [2 * v])


def test_device_transfer_is_a_real_copy_and_keeps_the_class():
    w = mge.Parameter([1.0, 2.0])
    for c in (w.to("cpu0"), mge.Tensor(w), mge.Tensor(w, device="cpu0"), F.copy(w, "cpu0")):
        assert c._data is not w._data
        assert c._data.unsafe_buffer_pointer() != w._data.unsafe_buffer_pointer()
        np.testing.assert_array_equal(c.numpy(), [1.0, 2.0])
    assert type(w.to("cpu0")) is mge.Parameter and type(mge.Tensor(w)) is mge.Tensor
    assert mge.Tensor(w, dtype="int32").dtype == np.int32
    assert w.to("cpu0").device == "cpu0"


def test_tensor_copy_and_to_are_differentiable():
    # MegEngine: Tensor(w) of a recorded tensor is a differentiable copy (issue 32), as is w.to(device)
    w = mge.Parameter([3.0])
    gm = GradManager().attach([w])
    with gm:
        gm.backward((w.to("cpu0") * mge.Tensor(w)).sum())  # d/dw (w * w) = 2 w
    np.testing.assert_allclose(w.grad.numpy(), [6.0])


def test_a_convolution_validated_once_is_still_checked_for_new_shapes_and_modes():
    # (the front end keeps validated convolutions by shapes, dtypes and geometry: see functional/nn.py)
    import megxla.amp as amp
    from megxla.core._dispatch import OpError
    x = mge.Tensor(np.arange(50, dtype="float32").reshape(1, 2, 5, 5))
    w = mge.Tensor(np.ones((3, 2, 3, 3), "float32"))
    b = mge.Tensor(np.ones((1, 3, 1, 1), "float32"))
    first = F.conv2d(x, w, b, padding=1).numpy()
    np.testing.assert_array_equal(F.conv2d(x, w, b, padding=1).numpy(), first)  # (the kept op)
    with pytest.raises(OpError, match="channels"):
        F.conv2d(mge.Tensor(np.ones((1, 4, 5, 5), "float32")), w, b, padding=1)
    with pytest.raises(OpError, match="bias"):
        F.conv2d(x, w, mge.Tensor(np.ones((1, 4, 1, 1), "float32")), padding=1)
    np.testing.assert_array_equal(F.conv2d(x, w, b, padding=[1, 1]).numpy(), first)  # (a list: checked each call)
    with amp.autocast():
        assert F.conv2d(x, w, b, padding=1).dtype == np.float16
    assert F.conv2d(x.astype("int32"), w, b, padding=1).dtype == np.float32  # (converted: not the kept op's path)
