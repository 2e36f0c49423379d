"""MegEngine behaviours megxla matches (issue 10, item 4, non-jit parts): GradManager.backward's dy
broadcasting, topk's clamping and return types, F.vision.resize, distributed.helper's packing functions."""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.autodiff import GradManager
from megxla.distributed import WORLD
from megxla.distributed.helper import get_offsets, pack_allreduce_split, param_pack_concat, param_pack_split
from megxla.jit import xla_trace


def test_backward_dy_of_shape_1_for_scalar_loss():
    x = mge.Parameter([1.0, 2.0])
    gm = GradManager().attach([x])
    with gm:
        loss = (x * x).sum()
        assert loss.shape == ()
        gm.backward(loss, mge.Tensor([3.0]))  # MegEngine code passes dy=Tensor([1.]) style values
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 12.0])


def test_backward_dy_broadcast_and_bad_shape():
    x = mge.Parameter(np.ones((2, 3), np.float32))
    gm = GradManager().attach([x])
    with gm:
        gm.backward(x * 2, mge.Tensor([1.0, 2.0, 3.0]))  # (3,) broadcasts to (2, 3)
    np.testing.assert_allclose(x.grad.numpy(), [[2, 4, 6], [2, 4, 6]])
    x.grad = None
    with gm:
        gm.backward(x * 2, 0.5)  # a Python scalar
    np.testing.assert_allclose(x.grad.numpy(), np.ones((2, 3)))
    x.grad = None
    with pytest.raises(ValueError, match=r"dy of shape \(4,\) cannot be broadcast to y's shape \(2, 3\)"):
        with gm:
            gm.backward(x * 2, mge.Tensor([1.0, 2.0, 3.0, 4.0]))
    assert x.grad is None


def test_backward_with_a_bad_dy_keeps_the_recording():
    # bad_call_fuzz seed 5 program 51: the error consumed the recording, so the corrected call raised
    # NotRecordingError and the step's gradients were lost
    x = mge.Parameter(np.ones((2, 3), np.float32))
    gm = GradManager().attach([x])
    with gm:
        y = x * 2
        with pytest.raises(ValueError, match=r"dy of shape \(4, 4\) cannot be broadcast"):
            gm.backward(y, mge.Tensor(np.ones((4, 4), np.float32)))
        assert x.grad is None
        gm.backward(y.sum())
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 2.0))


def test_backward_dy_shape_1_inside_xla_trace():
    x = mge.Parameter([1.0, -1.0])
    gm = GradManager().attach([x])

    @xla_trace(capture_as_const=True)
    def step(inp, dy):
        with gm:
            gm.backward((inp * x).sum(), dy)
        return x.grad

    for _ in range(3):
        x.grad = None
        g = step(mge.Tensor([2.0, 3.0]), mge.Tensor([2.0]))
    np.testing.assert_allclose(g.numpy(), [4.0, 6.0])


def test_topk_clamps_k_and_returns_tuple():
    x = mge.Tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    out = F.topk(x, 10)
    assert isinstance(out, tuple) and len(out) == 2
    v, i = out
    assert v.shape == (2, 3) and i.dtype == np.int32
    np.testing.assert_array_equal(v.numpy(), [[3, 2, 1], [5, 4, 0]])
    v, i = F.topk(x, 2, descending=False)
    np.testing.assert_array_equal(i.numpy(), [[1, 2], [0, 2]])
    kth, idx = F.topk(x, 5, kth_only=True)
    np.testing.assert_array_equal(kth.numpy(), [1, 0])
    with pytest.raises(ValueError, match="topk"):
        F.topk(x, 0)


def test_vision_resize_matches_interpolate_and_formats():
    x = mge.Tensor(np.random.RandomState(0).rand(2, 3, 5, 7).astype(np.float32))
    y = F.vision.resize(x, (4, 9))
    np.testing.assert_allclose(y.numpy(), F.vision.interpolate(x, size=(4, 9), align_corners=False).numpy())
    n = F.vision.resize(x, (10, 14), "NCHW", "nearest")
    np.testing.assert_array_equal(n.numpy()[:, :, ::2, ::2], x.numpy())
    xh = mge.Tensor(x.numpy().transpose(0, 2, 3, 1))
    yh = F.vision.resize(xh, (4, 9), "NHWC")
    np.testing.assert_allclose(yh.numpy().transpose(0, 3, 1, 2), y.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="imode"):
        F.vision.resize(x, (4, 4), "NCHW", "area")
    # gradient flows (MegEngine's xla test backprops through resize)
    p = mge.Parameter(np.ones((1, 1, 2, 2), np.float32))
    gm = GradManager().attach([p])
    with gm:
        gm.backward(F.vision.resize(p, (4, 4)).sum())
    np.testing.assert_allclose(p.grad.numpy(), np.full((1, 1, 2, 2), 4.0))


def test_param_pack_roundtrip_and_gradients():
    shapes = [(2, 3), (), (4,)]
    assert get_offsets(shapes) == [0, 6, 6, 7, 7, 11]
    ps = [mge.Parameter(np.asarray(np.random.RandomState(i).rand(*s), np.float32)) for i, s in enumerate(shapes)]
    gm = GradManager().attach(ps)
    with gm:
        flat = param_pack_concat(ps, mge.Tensor(get_offsets(shapes)), get_offsets(shapes))
        assert flat.shape == (11,)
        outs = param_pack_split(flat * 3, get_offsets(shapes), shapes)
        assert [o.shape for o in outs] == [(2, 3), (1,), (4,)]  # (MegEngine's helper: a scalar's piece is (1,))
        gm.backward(sum((o * o).sum() for o in outs))
    for p in ps:
        np.testing.assert_allclose(p.grad.numpy(), 18 * p.numpy(), rtol=1e-5)
    gapped = param_pack_concat([mge.Tensor([1.0]), mge.Tensor([2.0])], None, [0, 1, 3, 4])
    np.testing.assert_array_equal(gapped.numpy(), [1, 0, 0, 2])
    with pytest.raises(ValueError, match="does not fit offsets"):
        param_pack_concat([mge.Tensor([1.0, 2.0])], None, [0, 3])


def test_pack_allreduce_split_single_process():
    a, b = mge.Tensor([[1.0, 2.0]]), mge.Tensor(3.0)
    ra, rb = pack_allreduce_split([a, b], [a.shape, b.shape], WORLD, "mean")
    assert ra.shape == (1, 2) and rb.shape == (1,)  # (MegEngine: param_pack_split gives a scalar (1,))
    np.testing.assert_array_equal(ra.numpy(), a.numpy())
    with pytest.raises(ValueError, match="reduce_method"):
        pack_allreduce_split([a], [a.shape], WORLD, "max")


def test_tuple_shape_is_a_plain_tuple():
    # MegEngine's own optimizer tests assert ``param._tuple_shape is ()`` for a scalar parameter
    assert type(mge.Parameter(1.0)._tuple_shape) is tuple and mge.Parameter(1.0)._tuple_shape == ()
    assert mge.Tensor(np.zeros((2, 3)))._tuple_shape == (2, 3)


def test_dlpack_both_ways():
    # megengine.utils.dlpack: capsules and __dlpack__ objects in, capsules and the protocol out
    from megxla.utils.dlpack import from_dlpack, to_dlpack
    x = mge.Tensor(np.arange(6, dtype="float32").reshape(2, 3))
    np.testing.assert_array_equal(np.from_dlpack(x), x.numpy())
    np.testing.assert_array_equal(from_dlpack(to_dlpack(x)).numpy(), x.numpy())
    y = from_dlpack(np.arange(4, dtype="int32"))
    assert y.dtype == np.int32 and (y + 1).numpy().tolist() == [1, 2, 3, 4]
    with pytest.raises(TypeError, match="DLPack capsule"):
        from_dlpack([1, 2])


@pytest.mark.parametrize("fn", [lambda a: a + None, lambda a: None * a, lambda a: a == None,  # noqa: E711
                                lambda a: F.maximum(a, None)])
def test_elementwise_with_none_raises_megengines_type_error(fn):
    # (None used to become an empty array: ``a + None`` gave an empty tensor)
    with pytest.raises(TypeError, match="the operand is None and is not supported."):
        fn(mge.Tensor(1.0))


def test_copy_and_deepcopy_keep_quantization_parameters():
    # MegEngine's test_tensor_wrapper.test_qparams: a shallow copy shares the QParams, a deep copy copies them;
    # a quantized tensor keeps its dtype (and scale) through both
    import copy
    from megxla.core.tensor import dtype
    t = mge.Tensor(1)
    t.qparams.scale = mge.Tensor(1.0)
    assert copy.copy(t).qparams is t.qparams
    deep = copy.deepcopy(t)
    assert deep.qparams is not t.qparams and float(deep.qparams.scale) == 1.0
    q = mge.tensor(np.array([-1.0, 0.5, 2.0], "float32")).astype(dtype.qint8(0.1))
    for c in (copy.copy(q), copy.deepcopy(q)):
        assert c is not q and c.dtype.metadata["mgb_dtype"]["name"] == "QuantizedS8"
        np.testing.assert_array_equal(c.numpy(), [-10, 5, 20])
    p = mge.Parameter([1.0, 2.0], name="w")
    c = copy.deepcopy(p)
    assert type(c) is mge.Parameter and c.name == "w" and c.numpy().tolist() == [1.0, 2.0]


def test_format_tag_accepted_and_ignored():
    # MegEngine's test_tensor_wrapper.py test_format sets ``x.format = "nhwc"``; megxla has no memory formats (XLA
    # picks layouts): the tag is taken and ignored, as ``Tensor(x, format="nhwc")`` (docs/differences.md), and a name
    # MegEngine refuses is refused
    x = mge.Tensor(np.ones((1, 2, 3, 4), "float32"), format="nhwc")
    x.format = "nhwc"
    assert x.format == "default"
    with pytest.raises(ValueError, match="invalid format 'NHWC'"):
        x.format = "NHWC"
    with pytest.raises(ValueError, match="invalid format 'abc'"):
        mge.Tensor([1.0], format="abc")
