"""``megengine.core.autodiff.grad.Grad`` (MegEngine's low-level recorder) on megxla's tape: gradients go to the
``wrt`` callbacks, ``.grad`` stays untouched, nested recorders give higher-order gradients (cases from
MegEngine's test_autodiff.py)."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.core.autodiff.grad import Grad


def _save_to(t):
    def callback(grad):
        t.grad = grad
    return callback


def test_grad_goes_to_the_callback_only():
    x_np = np.random.rand(10).astype("float32")
    x = mge.Tensor(x_np)
    seen = []
    with Grad() as grad:
        grad.wrt(x, callback=seen.append)
        y = F.cos(x)
        grad(y, mge.Tensor(np.ones_like(x_np)))
    np.testing.assert_allclose(seen[0].numpy(), -np.sin(x_np), rtol=1e-6)
    assert x.grad is None


def test_second_order_through_nested_recorders():
    x_np = np.random.rand(10).astype("float32")
    x = mge.Tensor(x_np)
    ones = mge.Tensor(np.ones_like(x_np))
    with Grad("grad2") as grad2:
        with Grad("grad") as grad:
            grad2.wrt(x, callback=_save_to(x))
            grad.wrt(x, callback=_save_to(x))
            y = F.cos(x)
            grad(y, ones)
            z = x.grad
            np.testing.assert_allclose(z.numpy(), -np.sin(x_np), rtol=1e-5)
        x.grad = None
        grad2(z, ones)
    np.testing.assert_allclose(x.grad.numpy(), -np.cos(x_np), rtol=1e-5)


def test_wrt_an_intermediate_value():
    x_np = np.random.rand(10).astype("float32")
    x = mge.Tensor(x_np)
    result = {}
    with Grad() as grad:
        grad.wrt(x, callback=lambda dx: result.setdefault("dx", dx))
        y = x * x
        grad.wrt(y, callback=lambda dy: result.setdefault("dy", dy))
        z = y * y
        grad(z, mge.Tensor(np.ones_like(x_np)))
    np.testing.assert_allclose(result["dx"].numpy(), 4 * x_np ** 3, rtol=1e-5)
    np.testing.assert_allclose(result["dy"].numpy(), 2 * x_np ** 2, rtol=1e-5)


def test_mismatched_outputs_and_gradients_raise():
    x = mge.Tensor([1.0])
    with Grad() as grad:
        grad.wrt(x)
        with pytest.raises(ValueError, match="1 outputs but 2"):
            grad(x * 2, [mge.Tensor([1.0]), mge.Tensor([1.0])])


def test_gradient_of_an_attached_tensor_updated_in_place_is_of_its_recorded_value():
    # MegEngine 1.13: the gradient of an attached tensor is the one of the value it had when the recording
    # started, through an in-place update made during it (w *= 2 -> d sum((2w)^2)/dw = 8w = [8, 16])
    from megxla.autodiff import GradManager
    w = mge.Parameter([1.0, 2.0])
    gm = GradManager().attach([w])
    with gm:
        w *= 2
        gm.backward((w * w).sum())
    np.testing.assert_array_equal(w.numpy(), [2, 4])
    np.testing.assert_allclose(w.grad.numpy(), [8, 16])
    x = mge.Tensor([1.0, 2.0, 3.0])
    gm = GradManager().attach([x])
    with gm:
        y = x * 3
        x[0] = 5.0
        gm.backward((x * x).sum() + y.sum())
    np.testing.assert_allclose(x.grad.numpy(), [3, 7, 9])  # MegEngine's value


def test_attached_intermediate_value_gets_its_gradient():
    # MegEngine 1.13: attaching y = x * x while recording gives y.grad = dz/dy as well as x.grad
    from megxla.autodiff import GradManager
    x = mge.Tensor([1.0, 2.0])
    gm = GradManager().attach([x])
    with gm:
        y = x * x
        gm.attach([y])
        gm.backward((y * y).sum())
    np.testing.assert_allclose(x.grad.numpy(), [4, 32])
    np.testing.assert_allclose(y.grad.numpy(), [2, 8])


def test_grad_manager_callbacks_are_checked_where_they_are_given_and_where_they_return():
    """A non-callable callback was accepted (the backward then failed: "'int' object is not callable"), and what a
    callback returned became ``.grad`` -- an ndarray, a tensor of another shape -- failing at ``opt.step()``
    or in the next accumulation, far from the callback (probe Y). Nothing is delivered when one fails. None is
    MegEngine's "no gradient" (its own ``test_attach_temporary`` returns nothing from a checking callback)."""
    import pytest
    from megxla.autodiff import GradManager
    w = mge.Parameter(np.ones((2, 3), "float32"))
    with pytest.raises(TypeError, match="callbacks must be callables"):
        GradManager().attach([w], callbacks=[3])
    for cb, got in [(lambda t, g: g.numpy(), "ndarray"), (lambda t, g: g.reshape(6), r"a Tensor of shape \(6,\)")]:
        gm = GradManager().attach([w], callbacks=[cb])
        with pytest.raises(TypeError, match=f"callback '.*lambda>' returned {got} for a gradient of shape"):
            with gm:
                gm.backward((w * 2).sum())
        assert w.grad is None
    gm = GradManager().attach([w], callbacks=[lambda t, g: g * 2])
    with gm:
        gm.backward((w * 2).sum())
    assert w.grad.numpy().tolist() == [[4.0] * 3] * 2


def test_grad_manager_callback_returning_none_gives_no_gradient():
    """MegEngine's chain passes what each callback returns to the next, and None becomes no gradient: its own
    ``test_attach_temporary`` attaches a checking callback that returns nothing (refused since the check above,
    session 22). Later callbacks see None; the tensor's ``.grad`` is left as it was; other tensors get theirs."""
    from megxla.autodiff import GradManager
    w = mge.Parameter(2.0)
    seen = []
    for trial in range(3):  # (the second and later backwards take the planned walk)
        x = mge.Tensor(float(trial))
        gm = GradManager().attach([w])
        gm.attach([x], callbacks=[lambda t, g: None, lambda t, g: seen.append(g)])
        with gm:
            gm.backward(x * w)
        assert x.grad is None
        assert float(w.grad) == float(trial)
        w.grad = None
    assert seen == [None] * 3


def test_the_recorder_frees_what_the_backward_does_not_need():
    # MegEngine's test_reshape / test_subtensor / test_AxisAddRemove (through core2.TensorWeakRef): an intermediate
    # whose value no gradient needs is freed while the recorder is open
    from megxla.core._imperative_rt.core2 import TensorWeakRef
    x = mge.Tensor(np.random.rand(2, 5).astype("float32"))
    with Grad() as grad:
        grad.wrt(x, callback=_save_to(x))
        refs = {}

        def f(x):
            x = x * 1
            y = F.expand_dims(x.reshape(5, 2)[1:], 0)
            refs["x"] = TensorWeakRef(x)
            return y

        y = f(x)
        assert refs["x"]() is None
        grad(y, F.ones_like(y))
    expected = np.ones((2, 5), np.float32)
    expected.reshape(5, 2)[0] = 0
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    with pytest.raises(TypeError, match="expected a Tensor"):
        TensorWeakRef(np.ones(2))


def test_grad_manager_callback_may_return_a_future_set_after_the_backward():
    """MegEngine's protocol for deferred gradients (its ``AllreduceCallback`` packs gradients into buckets): a
    callback returns a ``Future`` and registers ``gm._register_after_backward_callback``; that runs once per
    backward, after every callback, and sets the Futures; then the gradients are delivered. Under auto-jit and
    eagerly, the first backward and the planned walk of the next ones. The callbacks after it in the chain get
    the value it is set to. A Future nobody set, or one set to a tensor of another shape, is a clear error and
    delivers nothing."""
    import pytest
    from megxla.autodiff import GradManager
    from megxla.autodiff.grad_manager import get_backwarding_grad_manager
    from megxla.utils.future import Future

    class Doubler:  # (defers every gradient to the end of the backward, as a packed all-reduce does)
        def __init__(self, value=lambda g: g * 2):
            self.pending, self.flushes, self.marked, self.value = [], 0, set(), value

        def __call__(self, t, g):
            gm = get_backwarding_grad_manager()
            if id(gm) not in self.marked:
                gm._register_after_backward_callback(self.flush)
                self.marked.add(id(gm))
            f = Future(ack=False)
            self.pending.append((f, g))
            return f

        def flush(self):
            self.flushes += 1
            for f, g in self.pending:
                f.set(self.value(g))
            self.pending = []

    assert get_backwarding_grad_manager() is None
    for auto in (False, True):
        mge.config.auto_jit = auto
        try:
            w, b = mge.Parameter(np.ones((2, 3), "float32")), mge.Parameter(np.zeros(3, "float32"))
            cb = Doubler()
            gm = GradManager().attach([w, b], callbacks=[cb])
            for step in range(3):
                with gm:
                    gm.backward(((mge.Tensor(np.ones((4, 2), "float32")) @ w + b) * (step + 1)).sum())
                assert cb.flushes == step + 1 and cb.pending == []
            np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 3), 2 * 4 * 6.0))
            np.testing.assert_array_equal(b.grad.numpy(), np.full(3, 2 * 4 * 6.0))
            # the callbacks after a deferring one get the gradient its Future holds (MegEngine's got the Future)
            w.grad = None
            gm = GradManager().attach([w], callbacks=[Doubler(), lambda t, g: g + 1])
            with gm:
                gm.backward((w * 3).sum())
            np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 3), 7.0))
            for bad, err, match in [(Doubler(lambda g: None), None, None),
                                    (Doubler(lambda g: g.reshape(-1)), TypeError, r"a callback's Future returned a "
                                     r"Tensor of shape \(6,\) for a gradient of shape \(2, 3\)"),
                                    (None, RuntimeError, "returned a Future .* that no after-backward callback set")]:
                w.grad = None
                if bad is None:  # (a Future returned, no flush registered)
                    gm = GradManager().attach([w], callbacks=[lambda t, g: Future(ack=False)])
                else:
                    gm = GradManager().attach([w], callbacks=[bad])
                if err is None:  # (a Future set to None: no gradient, as a callback returning None)
                    with gm:
                        gm.backward((w * 2).sum())
                else:
                    with pytest.raises(err, match=match):
                        with gm:
                            gm.backward((w * 2).sum())
                assert w.grad is None
        finally:
            mge.config.auto_jit = False


def test_make_backward_graph_says_what_megxla_backward_keeps_and_which_inputs_get_gradients():
    from megxla.core._imperative_rt import TensorAttr
    from megxla.core._imperative_rt.imperative import make_backward_graph
    from megxla.core.ops.builtin import Elemwise
    a = TensorAttr()
    a.dtype, a.comp_node = "float32", "xpux"
    # megxla differentiates an op at its inputs: the inputs and output gradients are kept, the outputs never
    _, mask, has_grad = make_backward_graph(Elemwise(Elemwise.Mode.RELU), [a], [True], [True])
    assert (mask, has_grad) == ([True, False, True], [True])
    _, mask, has_grad = make_backward_graph(Elemwise("MUL"), [a, a], [False, True], [True])
    assert (mask, has_grad) == ([True, True, False, True], [False, True])
    i = TensorAttr(shape=(2,), dtype="int32")
    _, _, has_grad = make_backward_graph(Elemwise("ADD"), [i, i], [True, True], [True])
    assert has_grad == [False, False]  # integers have no gradient
