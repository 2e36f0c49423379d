"""Session 80: GradManager / autodiff.Function API parity with MegEngine 1.13 (differential probes).

Expected values and exception types are what MegEngine 1.13.0 printed for the same programs.
"""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla import Parameter, Tensor
from megxla.autodiff import Function, GradManager


class _Double(Function):
    def forward(self, a):
        return a * 2, a * 3

    def backward(self, d2, d3):
        return (0 if d2 is None else d2 * 2) + (0 if d3 is None else d3 * 3)


class _DoubleList(_Double):
    def forward(self, a):
        return [a * 2, a * 3]


def test_function_without_forward_or_backward_raises_not_implemented():
    # MegEngine: Function.forward / backward raise NotImplementedError (megxla raised a TypeError)
    class Plain(Function):
        pass

    class OnlyForward(Function):
        def forward(self, a):
            return a * 2

    x = Parameter([1.0, 2.0])
    with pytest.raises(NotImplementedError):
        Plain()(x)  # not recorded
    gm = GradManager().attach(x)
    with pytest.raises(NotImplementedError):
        with gm:
            Plain()(x)
    with pytest.raises(NotImplementedError):
        with gm:
            gm.backward(OnlyForward()(x).sum())
    assert not gm._recording and x.grad is None  # MegEngine: recording ended, no gradient


def test_function_recorded_outputs_are_a_list():
    # MegEngine's set_grad returns the outputs of a recorded Function as a list, whether forward returned a tuple
    # or a list (a 1-tuple too); a call that no GradManager records returns forward's own result
    for cls in (_Double, _DoubleList):
        a = Parameter([1.0, 2.0])
        gm = GradManager().attach(a)
        with gm:
            out = cls()(a)
            assert type(out) is list and len(out) == 2
            gm.backward(out[1].sum())
        np.testing.assert_array_equal(a.grad.numpy(), [3.0, 3.0])  # MegEngine: [3. 3.]

    class One(Function):
        def forward(self, a):
            return (a * 2,)

        def backward(self, dy):
            return (dy * 2,)

    a = Parameter([1.0, 2.0])
    gm = GradManager().attach(a)
    with gm:
        out = One()(a)
        assert type(out) is list and len(out) == 1
        gm.backward(out[0].sum())
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 2.0])
    assert type(_Double()(Tensor([1.0]))) is tuple and type(_DoubleList()(Tensor([1.0]))) is list


def test_function_forward_returning_none_is_named():
    class NoneForward(Function):
        def forward(self, a):
            return None

        def backward(self, dy):
            return dy

    a = Parameter([1.0, 2.0])
    assert NoneForward()(a) is None  # not recorded: forward's result, as MegEngine
    gm = GradManager().attach(a)
    with gm:
        # MegEngine: a TypeError (set_grad's incompatible arguments); megxla's said "'NoneType' object is not iterable"
        with pytest.raises(TypeError, match="NoneForward.forward must return a Tensor"):
            NoneForward()(a)
        assert gm._recording
        gm.backward((a * a).sum())
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 4.0])


def test_backward_none_among_ys():
    # MegEngine: gm.backward([y, None]) raises a TypeError (ones_like(None)) and keeps recording; with dys, its
    # grad key's RuntimeError. megxla raised an AttributeError from the walk and ended the recording.
    w = Parameter([1.0, 2.0])
    gm = GradManager().attach(w)
    with gm:
        y = (w * w).sum()
        with pytest.raises(TypeError, match=r"y\[1\] is None"):
            gm.backward([y, None])
        with pytest.raises(RuntimeError, match=r"y\[1\] is None"):
            gm.backward([y, None], [Tensor(1.0), Tensor(1.0)])
        assert gm._recording and w.grad is None
        gm.backward([y])
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0])


def test_backward_none_dy_is_a_runtime_error():
    # MegEngine: gm.backward([y], [None]) raises a RuntimeError ("assertion `tw' failed"); megxla a TypeError only
    w = Parameter([1.0, 2.0])
    gm = GradManager().attach(w)
    with gm:
        y = (w * w).sum()
        with pytest.raises(RuntimeError, match=r"dy\[0\] is None"):
            gm.backward([y], [None])
        with pytest.raises(TypeError, match=r"dy\[0\] is None"):
            gm.backward([y], [None])


def test_backward_dy_without_y_raises():
    # MegEngine: gm.backward(None, dy) / gm.backward(dy=dy) raise a RuntimeError (its grad key asserts one dy per
    # y); megxla ignored the dy and ended the recording with no gradient
    w = Parameter([1.0, 2.0])
    gm = GradManager().attach(w)
    with gm:
        y = (w * 2).sum()
        with pytest.raises(RuntimeError, match="0 tensors in y but 1 in dy"):
            gm.backward(dy=Tensor(2.0))
        with pytest.raises(RuntimeError, match="0 tensors in y but 1 in dy"):
            gm.backward(None, [Tensor(2.0)])
        gm.backward(y, Tensor(2.0))  # the recording was kept: the corrected call differentiates it
    np.testing.assert_array_equal(w.grad.numpy(), [4.0, 4.0])
    with gm:
        gm.backward(None, [])  # MegEngine: no ys, no dys -- nothing to do
        assert not gm._recording


def test_backward_outside_a_recording_says_no_computation_history():
    # MegEngine: RuntimeError("no computation history. did you forget record() or call a method that clears the
    # history?") -- before any recording, after `with gm:` and after a backward
    w = Parameter([1.0, 2.0])
    gm = GradManager().attach(w)
    with pytest.raises(RuntimeError, match="no computation history"):
        gm.backward((w * w).sum())
    with gm:
        gm.backward((w * w).sum())
    with pytest.raises(RuntimeError, match="no computation history"):
        gm.backward((w * w).sum())


def test_second_order_through_a_function():
    # MegEngine raises a TypeError ("the operand is None") in the outer backward -- a MegEngine bug: the gradient
    # is well defined. x.grad = 2x from the inner backward, then d/dx sum((2x)^2) = 8x accumulated onto it.
    class Square(Function):
        def forward(self, x):
            self.x = x
            return x * x

        def backward(self, dy):
            return 2 * self.x * dy

    x = Parameter([1.0, 2.0])
    gm, gm2 = GradManager().attach(x), GradManager().attach(x)
    with gm:
        with gm2:
            gm2.backward(Square()(x).sum())
            g = x.grad
            np.testing.assert_array_equal(g.numpy(), [2.0, 4.0])  # MegEngine: [2. 4.]
            gm.backward((g * g).sum())
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 20.0])
