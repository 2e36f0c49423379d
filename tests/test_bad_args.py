"""Issue 31 (B2, B3): MegEngine's argument checks, raised before any state is touched, and IEEE signed zeros
through Python scalar operands."""
import math

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F


# ---------------------------------------------------------------------------
# signed zero: a scalar operand keeps its sign whatever scalar was seen before
# ---------------------------------------------------------------------------


def _sign(t):
    return np.signbit(t.numpy()).tolist()


def test_signed_zero_scalar_operands():
    x = mge.Tensor([1.0, 2.0])
    # +0.0 is seen first: it must not stand in for -0.0 (0.0 == -0.0 and they hash alike)
    assert _sign(x * 0.0) == [False, False]
    assert _sign(x * -0.0) == [True, True]
    np.testing.assert_array_equal((1 / (x * -0.0)).numpy(), [-np.inf, -np.inf])
    np.testing.assert_array_equal((1 / (-0.0 * x)).numpy(), [-np.inf, -np.inf])
    nz = x * -0.0
    assert _sign(nz + 0.0) == [False, False]  # IEEE: -0 + +0 = +0
    assert _sign(nz + -0.0) == [True, True]
    assert _sign(nz - 0.0) == [True, True]
    assert _sign(nz - -0.0) == [False, False]
    assert _sign((x * 0.0) / -1.0) == [True, True]
    assert _sign(x / -np.inf) == [True, True]
    assert _sign(F.minimum(x * 0.0 + 1.0, -0.0)) == [True, True]
    assert _sign(F.full((2,), -0.0)) == [True, True]
    assert _sign(F.full((2,), 0.0)) == [False, False]
    # and the other way round: -0.0 seen first must not stand in for +0.0
    y = mge.Tensor([3.0], dtype="float16")
    assert _sign(y * -0.0) == [True]
    assert _sign(y * 0.0) == [False]


def test_ops_with_signed_zero_parameters_are_interned_apart_and_found_again():
    # a float zero given as a parameter (F.zeros' value) takes bind's fast table with its sign in the key: +0.0 and
    # -0.0 stay two ops, however often and in whichever order they are bound; a zero inside a value, and zeros
    # given in another order than sorted, take the slow path, which tells them apart too
    from megxla.core.ops.shape import full
    from megxla.core._op import PRIMITIVES, Primitive

    def prim(name):  # (registered once per process)
        return PRIMITIVES.get(name) or Primitive(name, lambda **params: 0)

    for first in (0.0, -0.0):
        ops = {}
        for v in (first, -first, first, -first):
            op = full.bind(shape=(3,), value=v, dtype="float32")
            assert ops.setdefault(math.copysign(1.0, v), op) is op
        assert ops[1.0] is not ops[-1.0]
    two = prim("test_two_zeros")
    got = {(sa, sb): two.bind(b=sb * 0.0, a=sa * 0.0) for _ in range(2) for sa in (1, -1) for sb in (1, -1)}
    assert len({id(op) for op in got.values()}) == 4
    for (sa, sb), op in got.items():
        assert [math.copysign(1.0, v) for _, v in op.params] == [sa, sb]
    nested = [prim("test_nested_zero").bind(p=(1.0, z)) for z in (0.0, -0.0, 0.0, -0.0)]
    assert nested[0] is nested[2] and nested[1] is nested[3] and nested[0] is not nested[1]


def test_signed_zero_in_compiled_step():
    from megxla.jit import xla_trace

    x = mge.Tensor([1.0, 2.0])
    _ = x * 0.0  # cache +0.0 first

    @xla_trace
    def f(x, s):
        return 1 / (x * s)

    for s, want in [(0.0, np.inf), (0.0, np.inf), (-0.0, -np.inf), (-0.0, -np.inf), (-0.0, -np.inf)]:
        np.testing.assert_array_equal(f(x, s).numpy(), [want, want])


# ---------------------------------------------------------------------------
# argument checks: MegEngine raises, and nothing is touched before the check
# ---------------------------------------------------------------------------


def test_topk_k_beyond_axis_is_clamped_as_megengine():
    # megdnn's TopK::exec clamps |k| to the axis length (detection heads ask for more boxes than exist)
    x = mge.Tensor([[3.0, 1.0, 2.0]])
    v, i = F.topk(x, 5, descending=True)
    assert v.numpy().tolist() == [[3.0, 2.0, 1.0]] and i.numpy().tolist() == [[0, 2, 1]]
    with pytest.raises(ValueError, match="k=0"):
        F.topk(x, 0)


@pytest.mark.parametrize("call", [
    lambda x: F.indexing_one_hot(x, mge.Tensor([1, 7]), 1),
    lambda x: F.indexing_one_hot(x, mge.Tensor([1, -1]), 1),  # MegEngine's IndexingOneHot: [0, size) only
    lambda x: F.nn.indexing_one_hot(x, mge.Tensor([[1, 5]]).reshape(2), axis=1),
    lambda x: F.one_hot(mge.Tensor([1, 5]), 5),
    lambda x: F.one_hot(mge.Tensor([-1, 0]), 5),
    lambda x: F.embedding(mge.Tensor([[0, 2]]), x),  # x is a (2, 5) table
    lambda x: F.embedding(mge.Tensor([-3]), x),
])
def test_out_of_range_indices_raise(call):
    from megxla.core._indexing import IndexOutOfRange

    x = mge.Tensor(np.arange(10, dtype="float32").reshape(2, 5))
    with pytest.raises(IndexOutOfRange, match="out of range"):
        call(x)
    with pytest.raises(IndexError):  # what MegEngine code catches
        call(x)


def test_in_range_indices_unchanged():
    x = mge.Tensor(np.arange(10, dtype="float32").reshape(2, 5))
    assert F.indexing_one_hot(x, mge.Tensor([4, 0]), 1).numpy().tolist() == [4.0, 5.0]
    assert F.one_hot(mge.Tensor([4, 0]), 5).numpy().tolist() == [[0, 0, 0, 0, 1], [1, 0, 0, 0, 0]]
    assert F.embedding(mge.Tensor([-1, 0]), x).numpy().tolist() == [[5, 6, 7, 8, 9], [0, 1, 2, 3, 4]]


def test_out_of_range_index_in_compiled_step_is_clamped_unless_checked():
    from megxla.jit import xla_trace

    @xla_trace
    def pick(x, i):
        return F.indexing_one_hot(x, i, 1)

    x = mge.Tensor(np.arange(10, dtype="float32").reshape(2, 5))
    for _ in range(3):  # record, compile, run: the in-range path works compiled
        assert pick(x, mge.Tensor([4, 0])).numpy().tolist() == [4.0, 5.0]


@pytest.mark.parametrize("draw, match", [
    (lambda R: R.normal(0, -1, (2,)), "std must be >= 0"),
    (lambda R: R.uniform(1, 0, (2,)), "low >= high"),
    (lambda R: R.gamma(0.0, 1.0, (2,)), "shape <= 0"),
    (lambda R: R.gamma(mge.Tensor([1.0, 0.0]), 1.0, (2,)), "shape <= 0"),
    (lambda R: R.gamma(mge.Tensor([1.0]), mge.Tensor([-1.0]), (2,)), "scale <= 0"),
    (lambda R: R.beta(mge.Tensor([-1.0]), 1.0, (2,)), "alpha <= 0"),
    (lambda R: R.beta(1.0, 0, (2,)), "beta <= 0"),
    (lambda R: R.poisson(mge.Tensor([2.0, -1.0]), (2,)), "lam <= 0"),
    (lambda R: R.poisson(0.0, (2,)), "lam <= 0"),
])
def test_rng_parameters_outside_their_domain_raise_before_drawing(draw, match):
    import megxla.random as R

    R.seed(7)
    before = R.get_rng_state().numpy().copy() if hasattr(R, "get_rng_state") else None
    with pytest.raises(AssertionError, match=match):  # MegEngine asserts these
        draw(R)
    with pytest.raises(ValueError, match=match):
        draw(R)
    if before is not None:
        np.testing.assert_array_equal(R.get_rng_state().numpy(), before)  # no key was consumed
    R.seed(7)
    a = R.normal(0, 1, (3,)).numpy()
    R.seed(7)
    with pytest.raises(AssertionError):
        draw(R)
    np.testing.assert_array_equal(R.normal(0, 1, (3,)).numpy(), a)


def test_backward_needs_one_dy_per_y():
    from megxla.autodiff import GradManager

    w = mge.Parameter([1.0])
    gm = GradManager().attach([w])
    with gm:
        y1, y2 = w * 2, w * 3
        with pytest.raises(RuntimeError, match="2 tensors in y but 1 in dy"):
            gm.backward([y1, y2], dy=[mge.Tensor([1.0])])
        assert w.grad is None  # nothing was touched
        gm.backward([y1, y2], dy=[mge.Tensor([1.0]), mge.Tensor([1.0])])  # the recording is still usable
    assert w.grad.numpy().tolist() == [5.0]
    with gm:
        with pytest.raises(ValueError, match="1 tensors in y but 2 in dy"):
            gm.backward(w * 2, dy=[1.0, 1.0])


def test_cross_entropy_int_scores_and_label_rank_as_megengine():
    label = mge.Tensor([1, 0])
    got = F.nn.cross_entropy(mge.Tensor([[1, 2], [3, 4]]), label)  # MegEngine: float32 loss
    want = F.nn.cross_entropy(mge.Tensor([[1.0, 2.0], [3.0, 4.0]]), label)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    x = mge.Tensor(np.zeros((2, 5), "float32"))
    with pytest.raises(AssertionError, match="one less than input ndim"):  # MegEngine asserts the rank
        F.nn.cross_entropy(x, mge.Tensor([[1], [2]]))
    with pytest.raises(ValueError, match="does not match"):
        F.nn.cross_entropy(x, mge.Tensor([1, 2, 3]))


@pytest.mark.parametrize("direct", [True, False])
def test_small_integer_tensors_from_host_data_are_range_checked_on_their_host_copy(monkeypatch, direct):
    # an index check (cross_entropy's labels) reads the labels' host copy: read from the device they wait for
    # their transfer, queued behind the work issued before it (an eager step: the previous step's backward)
    import gc
    from megxla.core import dtypes
    from megxla.core._indexing import IndexOutOfRange

    if not direct:  # (a JAX without the direct transfer: jnp.asarray)
        monkeypatch.setattr(dtypes, "_batched_put", None)
    labels = np.array([2, 0, 1], "int32")
    t = mge.Tensor(labels)
    labels[0] = 7  # the caller's array changes: the Tensor and its host copy do not
    host = dtypes.host_copy(t._data)
    assert host.tolist() == [2, 0, 1] and not host.flags.writeable
    assert dtypes.host_copy(mge.Tensor(np.array([0.5], "float32"))._data) is None  # (integers only)
    logits = mge.Tensor(np.zeros((3, 3), "float32"))
    assert F.nn.cross_entropy(logits, t).item() == pytest.approx(np.log(3))
    t[0] = 5  # written in place: a new device array, which has no host copy -- the check reads it
    assert dtypes.host_copy(t._data) is None
    with pytest.raises(IndexOutOfRange, match="label 5 is out of range"):
        F.nn.cross_entropy(logits, t)
    u = mge.Tensor(np.array([1, 9], "int32"))
    with pytest.raises(IndexOutOfRange, match="label 9 is out of range"):
        F.nn.cross_entropy(logits[:2], u)
    key = id(u._data)
    del u
    gc.collect()
    assert key not in dtypes._host_copies  # (the copy goes with its array)


def test_a_tensor_copies_host_data_given_by_any_array_like():
    # MegEngine's Tensor copies its data: an object handing out its own memory through ``__array__`` (a reused
    # loader buffer, another framework's tensor) must not change the Tensor afterwards (it did until 2026-11-29:
    # a float32 object's memory reached the device array uncopied)
    class Buffer:
        def __init__(self):
            self.data = np.zeros(4, "float32")

        def __array__(self, dtype=None, copy=None):
            return self.data

    buf = Buffer()
    t = mge.Tensor(buf)
    buf.data[0] = 5
    assert t.numpy().tolist() == [0, 0, 0, 0]
    assert mge.Tensor(0.5).dtype == np.float32 and mge.Tensor([1, 2]).dtype == np.int32
    with pytest.warns(RuntimeWarning, match="narrowed"):
        from megxla.core import dtypes
        dtypes._NARROW_WARNED.clear()
        assert mge.Tensor(1e39).item() == float("inf")  # (a Python number beyond float32's range)
    with pytest.raises(TypeError, match="dtype"):
        mge.Tensor(np.array(["x"]))


def test_clip_to_a_string_bound_is_a_type_error_and_a_float_index_is_named():
    # bad_call_fuzz seed 5: MegEngine raises a TypeError for ``F.clip(x, 'a', 1.0)`` (megxla raised a ValueError), and
    # its message for ``x[0.5]`` names the float
    x = mge.tensor(np.ones((2, 2), "float32"))
    with pytest.raises(TypeError, match="clip: bounds must be numbers or tensors"):
        F.clip(x, "a", 1.0)
    with pytest.raises(IndexError, match="invalid index 0.5 of type float"):
        x[0.5]
