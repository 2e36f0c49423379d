"""More of what third-party MegEngine projects hit, with the numbers MegEngine 1.13.0 gives (CPU wheel,
``MEGENGINE_INTERP_ASYNC_LEVEL=0`` where its asynchronous mode is wrong, said where it is).

megvii-research/basedet: its ``Boxes(Tensor)`` never calls ``Tensor.__init__`` and its box ops are
``core.tensor.utils.subgraph`` operators; Feynman1999/MGE-NGP: ``F.gather`` of a broadcast view."""
import numpy as np

import megxla as mge
import megxla.functional as F
from megxla import Tensor
from megxla.autodiff import GradManager
from megxla.core._imperative_rt.core2 import apply
from megxla.core.ops import builtin


# ---- a Tensor subclass whose __init__ does not call Tensor.__init__ (basedet's structures/boxes.py) -------------
class _Boxes(Tensor):
    def __init__(self, boxes):
        assert isinstance(boxes, Tensor)
        self.__dict__ = boxes.__dict__

    @property
    def width(self):
        return self[:, 2] - self[:, 0]


def test_tensor_subclass_takes_its_value_from_the_constructor_arguments():
    # MegEngine's C++ __new__ takes the value from the arguments; Python's __init__ only names the tensor
    x = mge.tensor(np.array([[0., 1., 4., 3.], [1., 1., 2., 5.]], "float32"))
    gm = GradManager().attach([x])
    with gm:
        b = _Boxes(x * 2)
        assert type(b) is _Boxes and b.shape == (2, 4)
        np.testing.assert_array_equal(b.width.numpy(), [8., 2.])
        assert F.expand_dims(b, 1).shape == (2, 1, 4)
        gm.backward((b.width * mge.tensor([1., 3.])).sum())
    # MegEngine 1.13.0: the value is a differentiable copy of x * 2
    np.testing.assert_array_equal(x.grad.numpy(), [[-2., 0., 2., 0.], [-6., 0., 6., 0.]])


def test_tensor_subclass_calling_super_init_keeps_its_attributes():
    class Tagged(Tensor):
        def __init__(self, data, dtype=None):
            super().__init__(data, dtype=dtype)
            self.tag = "t"

    t = Tagged([1, 2], dtype="float32")
    assert t.tag == "t" and t.dtype == np.float32
    np.testing.assert_array_equal((t + 1).numpy(), [2., 3.])

    class Extra(Tensor):  # (arguments that are not a tensor's: its own __init__ makes the value, as before)
        def __init__(self, data, extra):
            super().__init__(data)
            self.extra = extra

    e = Extra([1.0, 2.0], "tag")
    assert e.extra == "tag" and e.dtype == np.float32
    np.testing.assert_array_equal((e * 2).numpy(), [2., 4.])


# ---- core.tensor.utils.subgraph (basedet's structures/op_patch.py: IoU from Subtensor / Elemwise descriptors) ---
def _iou_op():
    from megxla.core.tensor.utils import subgraph
    def sub(f, src, axis, idx):
        return f(builtin.Subtensor(items=[[axis, False, False, False, True]]), src, idx)

    @subgraph("IOU", "float32", None, 2, gopt_level=2)
    def iou(inputs, f, c):
        b1, b2 = inputs
        b1 = f(builtin.AddAxis(axis=[1]), b1)
        b2 = f(builtin.AddAxis(axis=[0]), b2)
        p = [sub(f, b1, 2, c(i, dtype="int32")) for i in range(4)]
        q = [sub(f, b2, 2, c(i, dtype="int32")) for i in range(4)]
        iw = f("max", f(builtin.Elemwise(mode="sub"), f("min", p[2], q[2]), f("max", p[0], q[0])),
               c(0, dtype="float32"))
        ih = f("max", f("-", f("min", p[3], q[3]), f("max", p[1], q[1])), c(0, dtype="float32"))
        inter = f("*", iw, ih)

        def area(b):
            return f("*", f("-", b[2], b[0]), f("-", b[3], b[1]))
        return [f("/", inter, f("-", f("+", area(p), area(q)), inter)), inter], [False, True]

    return iou


def test_subgraph_op_applied_with_core2_apply():
    a = mge.tensor(np.array([[0., 0., 4., 4.], [1., 2., 3., 6.]], "float32"))
    b = mge.tensor(np.array([[2., 2., 6., 5.], [0., 0., 1., 1.], [1., 1., 3., 3.]], "float32"))
    op = _iou_op()
    gm = GradManager().attach([a])
    with gm:
        iou, inter = apply(op(), a, b)
        gm.backward((inter * mge.tensor(np.arange(6, dtype="float32").reshape(2, 3))).sum())
    # MegEngine 1.13.0
    np.testing.assert_allclose(iou.numpy(), [[0.166667, 0.0625, 0.25], [0.176471, 0.0, 0.2]], rtol=1e-5)
    np.testing.assert_array_equal(inter.numpy(), [[4., 1., 4.], [3., 0., 2.]])
    np.testing.assert_array_equal(a.grad.numpy(), [[-1., -1., 0., 0.], [-5., -13., 14., 0.]])


def test_subgraph_output_without_grad_is_cut_and_inputs_are_counted():
    op = _iou_op()
    a = mge.tensor(np.array([[0., 0., 2., 2.]], "float32"))
    gm = GradManager().attach([a])
    with gm:
        iou, _ = apply(op(), a, a)
        gm.backward(iou.sum() + (a * 0).sum())
    np.testing.assert_array_equal(a.grad.numpy(), [[0., 0., 0., 0.]])  # iou's outputs_has_grad is False
    try:
        apply(op(), a)
    except Exception as e:  # MegEngine asserts the input count too
        assert "2" in str(e)
    else:
        raise AssertionError("a subgraph op of 2 inputs applied to 1")


def test_subgraph_custom_grad_is_a_function_class():
    from megxla.core.tensor.utils import subgraph

    @subgraph("Square", "float32", None, 1, custom_grad=True)
    def square(inputs, f, c):
        (x,) = inputs
        (dy,) = yield (f("*", x, x),)
        yield (f("*", f("*", dy, x), c(3.0)),)  # a deliberately wrong gradient: the body's, not autodiff's

    x = mge.tensor([1., 2.])
    gm = GradManager().attach([x])
    with gm:
        (y,) = square()(x)
        gm.backward(y.sum())
    np.testing.assert_array_equal(y.numpy(), [1., 4.])
    np.testing.assert_array_equal(x.grad.numpy(), [3., 6.])


# ---- F.gather of a broadcast view (MGE-NGP's sample_pdf) ------------------------------------------------------
def test_gather_of_broadcast_view():
    # MegEngine 1.13.0's default asynchronous mode reads the second row's values as zeros (wrong in most runs; its
    # synchronous mode gives these): megxla keeps the correct values (docs/differences.md)
    x = np.arange(10, dtype="float32").reshape(2, 5)
    idx = np.array([[[0, 1], [3, 4], [4, 4]], [[0, 0], [2, 3], [1, 4]]], dtype="int32")
    got = F.gather(F.broadcast_to(F.expand_dims(mge.tensor(x), axis=1), (2, 3, 5)), 2, mge.tensor(idx))
    np.testing.assert_array_equal(got.numpy(), [[[0., 1.], [3., 4.], [4., 4.]], [[5., 5.], [7., 8.], [6., 9.]]])
