"""Eager kernels of library-call primitives (convolutions) compile with XLA's older loop emitters on the CPU
(``core/_op.py``, ``LIBRARY_KERNEL_OPTIONS``); a compiled program holding such an op traces the op's function,
since JAX refuses compiler options on a nested ``jax.jit``."""
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax import lax

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.core import _op
from megxla.core._op import LIBRARY_KERNEL_OPTIONS, PRIMITIVES, VJP, known_options
from megxla.jit import partial_trace, trace, xla_trace

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="the options are XLA:CPU's")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_convolutions_and_their_gradients_have_the_options_other_ops_none():
    conv = PRIMITIVES["conv"].bind(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1, nd=2)
    assert LIBRARY_KERNEL_OPTIONS == {"xla_cpu_use_fusion_emitters": False}
    used = known_options(LIBRARY_KERNEL_OPTIONS)  # (None with an XLA that has no older emitters: jax 0.11)
    assert conv.kernel_options == used
    grad = VJP.bind(op=conv, nin=2, wrt=(0, 1), given=(True,))
    assert grad.kernel_options == used
    assert VJP.bind(op=grad, nin=3, wrt=(0,), given=(True, True)).kernel_options == used
    assert PRIMITIVES["conv_transpose"].library_kernel
    assert PRIMITIVES["add"].bind().kernel_options is None
    # inside another trace, a kernel without options (JAX refuses a nested jit with them); the eager kernel's own
    # elsewhere
    add = PRIMITIVES["add"].bind()
    assert (conv.nested_kernel is not conv.kernel) == (used is not None) and add.nested_kernel is add.kernel
    x, w = jax.numpy.ones((1, 2, 4, 4)), jax.numpy.ones((3, 2, 3, 3))
    np.testing.assert_array_equal(jax.jit(lambda a, b: conv.nested_kernel(a, b) * 2)(x, w), conv.kernel(x, w) * 2)
    assert VJP.bind(op=PRIMITIVES["add"].bind(), nin=2, wrt=(0,), given=(True,)).kernel_options is None


def test_an_xla_that_does_not_know_the_options_compiles_with_its_defaults(monkeypatch):
    # jax 0.11's XLA:CPU (what pip installs on Python 3.12+) has no older emitters and refuses to compile with
    # their switch: every eager convolution raised "No such compile option: 'xla_cpu_use_fusion_emitters'"
    monkeypatch.setattr(_op, "LIBRARY_KERNEL_OPTIONS", {"xla_cpu_no_such_emitters_megxla": False})
    # (parameters no other test binds: the op, interned, keeps the options it was first asked for)
    conv = PRIMITIVES["conv"].bind(stride=(1, 1), padding=(3, 2), dilation=(2, 1), groups=1, nd=2)
    assert conv.kernel_options is None
    x, w = jax.numpy.ones((1, 2, 5, 5)), jax.numpy.ones((3, 2, 3, 3))
    want = lax.conv_general_dilated(x, w, (1, 1), [(3, 3), (2, 2)], rhs_dilation=(2, 1),
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))
    np.testing.assert_allclose(conv.kernel(x, w), want, rtol=1e-6)


def test_switched_off_by_the_environment():
    code = ("from megxla.core._op import PRIMITIVES, LIBRARY_KERNEL_OPTIONS\n"
            "import megxla.functional\n"
            "conv = PRIMITIVES['conv'].bind(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, nd=2)\n"
            "print(LIBRARY_KERNEL_OPTIONS, conv.kernel_options)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env=dict(os.environ, MEGXLA_LIBRARY_KERNEL_OPTIONS="0", PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["None", "None"]


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(3, 4, 3, padding=1)
        self.up = M.ConvTranspose2d(4, 2, 3, stride=2)

    def forward(self, x):
        return self.up(F.relu(self.conv(x)))


def _reference(params, x):
    """The same network in plain JAX, compiled with XLA's default options: (loss, gradients of the weights)."""
    def loss(p):
        y = lax.conv_general_dilated(x, p[0], (1, 1), [(1, 1), (1, 1)], dimension_numbers=("NCHW", "OIHW", "NCHW"))
        y = jax.nn.relu(y + p[1])
        # MegEngine's ConvTranspose2d weight is (in, out, kh, kw): the transposed convolution is the gradient of a
        # convolution, i.e. a dilated convolution with the flipped kernel
        w = p[2].transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
        z = lax.conv_general_dilated(y, w, (1, 1), [(2, 2), (2, 2)], lhs_dilation=(2, 2),
                                     dimension_numbers=("NCHW", "OIHW", "NCHW")) + p[3]
        return (z * z).sum()
    return jax.jit(jax.value_and_grad(loss))(params)


def test_convolutions_give_the_same_numbers_eager_and_in_every_compiled_mode():
    x_np = np.random.RandomState(0).standard_normal((2, 3, 6, 6)).astype("float32")
    results = {}
    for mode in ("eager", "trace", "xla_trace", "auto_jit"):
        mge.random.seed(0)
        net = _Net()
        params = [p.numpy() for p in net.parameters()]
        gm = GradManager().attach(net.parameters())

        def run(net, x):
            with gm:
                y = net(x)
                loss = (y * y).sum()
                gm.backward(loss)
            return loss
        step = {"trace": trace(run, symbolic=True), "xla_trace": xla_trace(run)}.get(mode, run)
        mge.config.auto_jit = mode == "auto_jit"
        try:
            for _ in range(3):  # (the compiled modes: recorded, then compiled calls)
                for p in net.parameters():
                    p.grad = None
                loss = float(step(net, mge.tensor(x_np)).item())
        finally:
            mge.config.auto_jit = False
        results[mode] = loss, [p.grad.numpy() for p in net.parameters()]
    names = [n for n, _ in _Net().named_parameters()]
    order = {n: k for k, n in enumerate(names)}
    p = [params[order[n]] for n in ("conv.weight", "conv.bias", "up.weight", "up.bias")]
    ref_loss, ref_grads = _reference([jax.numpy.asarray(a) for a in p], jax.numpy.asarray(x_np))
    ref = dict(zip(("conv.weight", "conv.bias", "up.weight", "up.bias"), ref_grads))
    for mode, (loss, grads) in results.items():
        np.testing.assert_allclose(loss, float(ref_loss), rtol=1e-5, err_msg=mode)
        for n, g in zip(names, grads):
            np.testing.assert_allclose(g, np.asarray(ref[n]).reshape(g.shape), rtol=1e-4, atol=1e-4,
                                       err_msg=f"{mode} {n}")


def test_second_order_gradient_through_a_convolution_and_a_partial_trace():
    x = mge.tensor(np.random.RandomState(1).standard_normal((1, 2, 5, 5)).astype("float32"))
    w = mge.Parameter(np.random.RandomState(2).standard_normal((3, 2, 3, 3)).astype("float32"))
    outer, inner = GradManager().attach([w]), GradManager().attach([w])
    with outer:
        with inner:
            y = F.conv2d(x, w)
            inner.backward((y * y).sum())
        g = w.grad
        w.grad = None
        outer.backward((g * g).sum())
    second = w.grad.numpy()

    def f(wv):
        y = lax.conv_general_dilated(x.numpy(), wv, (1, 1), [(0, 0), (0, 0)],
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return (y * y).sum()
    want = jax.grad(lambda wv: (jax.grad(f)(wv) ** 2).sum())(w.numpy())
    np.testing.assert_allclose(second, np.asarray(want), rtol=1e-4, atol=1e-3)

    conv = partial_trace(lambda a, b: F.conv2d(a, b), backend="xla")
    gm = GradManager().attach([w])
    for _ in range(3):  # (recorded eagerly, then compiled: one op of the eager program)
        w.grad = None
        with gm:
            loss = (conv(x, w) ** 2).sum()
            gm.backward(loss)
        np.testing.assert_allclose(w.grad.numpy(), np.asarray(jax.grad(f)(w.numpy())), rtol=1e-4, atol=1e-3)


def test_a_training_loop_with_convolutions_learns_the_same_under_auto_jit():
    x = mge.tensor(np.random.RandomState(3).standard_normal((4, 3, 6, 6)).astype("float32"))
    losses = {}
    for auto in (False, True):
        mge.random.seed(1)
        net = _Net()
        opt = optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
        gm = GradManager().attach(net.parameters())
        mge.config.auto_jit = auto
        try:
            out = []
            for _ in range(6):
                with gm:
                    loss = (net(x) ** 2).mean()
                    gm.backward(loss)
                opt.step().clear_grad()
                out.append(loss.item())
        finally:
            mge.config.auto_jit = False
        losses[auto] = out
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-5)
