"""GradManager behaviours MegEngine 1.13's own tests pin (test_grad_manager.py): what a manager keeps alive,
which backward passes a manager sees, and which tensors can be attached."""
import gc
import weakref

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.autodiff import GradManager


def test_a_temporary_attached_inside_the_block_is_not_kept_alive():
    w = mge.Parameter(2.0)
    gm = GradManager().attach(w)
    for i in range(3):
        with gm:
            x = mge.Tensor(float(i))
            gm.attach(x, callbacks=lambda t, g: g)
            ref = weakref.ref(x)
            gm.backward(x * w)
        assert float(x.grad) == 2.0 and float(w.grad) == sum(range(i + 1))
        del x
        gc.collect()
        assert ref() is None
    assert gm.attached_tensors() == [w]


def test_a_manager_entered_later_does_not_see_an_earlier_ones_backward():
    x_np = np.random.RandomState(0).rand(10).astype("float32")
    x = mge.Tensor(x_np)
    gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
    with gm2:
        with gm:
            y = F.cos(x)
            gm2.backward(y)
            np.testing.assert_allclose(x.grad.numpy(), -np.sin(x_np), rtol=1e-6)
            gm.backward(x.grad)  # x.grad is a constant for gm (gm2's backward ran outside its view)
    np.testing.assert_allclose(x.grad.numpy(), -np.sin(x_np), rtol=1e-6)


def test_an_outer_manager_differentiates_an_inner_ones_backward():
    x = mge.Tensor([0.5])
    gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
    with gm:
        with gm2:
            y = F.sin(x)
            gm2.backward(y)  # x.grad = cos(x), recorded by the outer gm
        g = x.grad
        x.grad = None
        gm.backward(g)
    np.testing.assert_allclose(x.grad.numpy(), -np.sin([0.5]), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32", "bool"])
def test_attaching_a_tensor_without_gradients_raises_and_attaches_nothing(dtype):
    gm = GradManager()
    ok = mge.Tensor([1.0])
    with pytest.raises(AssertionError, match=f"dtype {dtype}"):
        gm.attach([ok, mge.Tensor(np.array([1]).astype(dtype))])
    assert gm.attached_tensors() == []


def test_attaching_and_differentiating_leave_no_reference_cycles():
    # MegEngine's test_release: with the cyclic collector off, a Grad / GradManager step leaves nothing behind
    # for it (each attach made entry -> weakref -> callback closure -> entry, 9 objects per call)
    from megxla.core.autodiff.grad import Grad
    x = mge.Tensor([0.0])
    dy = mge.Tensor([1.0])
    w = mge.Parameter([1.0, 2.0])
    gm = GradManager().attach([w])

    def low_level():
        with Grad() as g:
            g.wrt(x)
            g(x * x, dy)

    def manager():
        with gm:
            gm.backward((w * w).sum())
        gm.attach([mge.Tensor([3.0])])  # (a temporary attached and freed)

    for fn in (low_level, manager):
        fn()
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(3):
                fn()
            found = gc.collect()
            garbage = [type(o).__name__ for o in gc.garbage]
        finally:
            gc.garbage.clear()
            gc.set_debug(0)
            gc.enable()
        assert found == 0, (fn.__name__, garbage[:12])


def test_backward_of_a_python_number_is_a_type_error_and_keeps_the_recording():
    # (MegEngine 1.13.0: ``gm.backward(3.0)`` raises TypeError; here it was an AttributeError from inside the walk)
    w = mge.Parameter([1.0, 2.0])
    gm = GradManager().attach([w])
    with gm:
        y = (w * 3).sum()
        with pytest.raises(TypeError, match="Tensor"):
            gm.backward(3.0)
        with pytest.raises(TypeError):
            gm.backward([y, 2.0])
        gm.backward(y)  # (still recording: the bad call changed nothing)
    assert w.grad.numpy().tolist() == [3.0, 3.0]


def test_a_none_among_the_dys_is_a_type_error_naming_it_and_keeps_the_recording():
    # (MegEngine 1.13.0 asserts every dy is a Tensor; here the None was taken as an empty array: "dy of shape (0,)")
    w = mge.Parameter([1.0, 2.0])
    gm = GradManager().attach([w])
    with gm:
        out = w * 2
        loss = (out * out).sum()
        with pytest.raises(TypeError, match=r"dy\[0\] is None"):
            gm.backward([loss, out], dy=[None, mge.Tensor([1.0, 1.0])])
        gm.backward([loss, out], dy=[mge.Tensor(1.0), mge.Tensor([1.0, 1.0])])
    assert w.grad.numpy().tolist() == [10.0, 18.0]  # (8w from the loss, 2 from out)
