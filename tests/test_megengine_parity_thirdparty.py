"""What third-party MegEngine projects hit (issue 32), with the numbers real MegEngine 1.13 gives (computed with
MegEngine 1.13.0 on CPU, Python 3.10): the gradient through every Tensor-constructor and conversion path, the
shape-changing setitem, module paths real code imports, the recording call's results of ``xla_trace``."""
import copy

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla import Parameter, Tensor
from megxla.autodiff import GradManager
from megxla.jit import xla_trace


# ---- 1. constructors and conversions: MegEngine differentiates a copy, cuts detach / copy / host round trips ---
# x = Parameter([1., 2.]); with gm: y = fn(x); gm.backward(y.sum()) -> x.grad (None: no gradient reached x)
GRAD_CASES = {
    "mge.tensor(x * 2)": (lambda x: mge.tensor(x * 2), [2.0, 2.0]),
    "Tensor(x * 3)": (lambda x: Tensor(x * 3), [3.0, 3.0]),
    "mge.tensor(x * 2) + Tensor(x * 3)": (lambda x: mge.tensor(x * 2) + Tensor(x * 3), [5.0, 5.0]),
    "Tensor(x) * 3": (lambda x: Tensor(x) * 3, [3.0, 3.0]),
    "Tensor(x)": (lambda x: Tensor(x), [1.0, 1.0]),
    "Tensor(x * 2, dtype=float32)": (lambda x: Tensor(x * 2, dtype="float32"), [2.0, 2.0]),
    "mge.tensor(x * 2, device=xpux)": (lambda x: mge.tensor(x * 2, device="xpux"), [2.0, 2.0]),
    "Tensor(x * 2, name=, no_cache=, format=)": (
        lambda x: Tensor(x * 2, name="a", no_cache=True, format="default"), [2.0, 2.0]),
    "Parameter(x * 2)": (lambda x: Parameter(x * 2), [2.0, 2.0]),
    "Parameter(x) * 2": (lambda x: Parameter(x) * 2, [2.0, 2.0]),
    "Parameter(x * 2, dtype=float32)": (lambda x: Parameter(x * 2, dtype="float32"), [2.0, 2.0]),
    "Tensor(F.copy(x * 2))": (lambda x: Tensor(F.copy(x * 2)), [2.0, 2.0]),
    "astype(float16).astype(float32)": (lambda x: (x * 2).astype("float16").astype("float32"), [2.0, 2.0]),
    "astype(float32)": (lambda x: (x * 2).astype("float32"), [2.0, 2.0]),
    "astype(int32)": (lambda x: (x * 2).astype("int32").astype("float32"), None),
    "astype(bool) + x": (lambda x: (x * 2).astype("bool").astype("float32") + x, [1.0, 1.0]),
    "F.copy(x * 2)": (lambda x: F.copy(x * 2), [2.0, 2.0]),
    "F.copy(x * 2, cpu0)": (lambda x: F.copy(x * 2, "cpu0"), [2.0, 2.0]),
    "(x * 2).to(cpu0)": (lambda x: (x * 2).to("cpu0"), [2.0, 2.0]),
    "detach() + x": (lambda x: (x * 2).detach() + x, [1.0, 1.0]),
    "Tensor(numpy()) + x": (lambda x: Tensor((x * 2).numpy()) + x, [1.0, 1.0]),
    "Tensor(float(x[0])) + x": (lambda x: Tensor(float(x[0])) + x, [1.0, 1.0]),
    "Tensor([x[0] * 2, x[1]])": (lambda x: Tensor([x[0] * 2, x[1]]), None),
    "F.stack": (lambda x: F.stack([x[0] * 2, x[1]]), [2.0, 1.0]),
    "copy.deepcopy(x * 2)": (lambda x: copy.deepcopy(x * 2), None),
    "copy.copy(x * 2)": (lambda x: copy.copy(x * 2), None),
    "F.zeros_like(x) + x": (lambda x: F.zeros_like(x) + x, [1.0, 1.0]),
}


@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_the_gradient_through_a_constructor_is_megengines(case):
    fn, expected = GRAD_CASES[case]
    x = Parameter([1.0, 2.0])
    gm = GradManager().attach([x])
    with gm:
        gm.backward(fn(x).sum())
    if expected is None:
        assert x.grad is None
    else:
        np.testing.assert_array_equal(x.grad.numpy(), np.array(expected, np.float32))


def test_a_converting_constructor_differentiates_as_astype():
    # MegEngine refuses Tensor(t, dtype=other) ("dtype mismatch"); megxla converts (docs/differences.md), and the
    # conversion is differentiable exactly when astype is
    x = Parameter([1.0, 2.0])
    gm = GradManager().attach([x])
    with gm:
        y = Tensor(x * 2, dtype="float16").astype("float32") + Tensor(x * 3, dtype="int32").astype("float32")
        gm.backward(y.sum())
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_the_gradient_through_a_constructor_in_a_compiled_step():
    # the CLIP-style step: token embeddings rebuilt with mge.tensor(...) inside the recorded forward
    w = Parameter(np.arange(6, dtype="float32").reshape(3, 2))
    gm = GradManager().attach([w])

    @xla_trace
    def step(w, idx):
        with gm:
            emb = mge.tensor(w[idx]) * 2 + Tensor(w[idx], dtype="float32")
            loss = (emb ** 2).sum()
            gm.backward(loss)
        g = w.grad
        w.grad = None
        return loss, g

    idx = Tensor([0, 2])
    for _ in range(3):  # recording call, then compiled calls
        loss, g = step(w, idx)
        # d/dw sum((3 w[idx])^2) = 18 w[idx] on the picked rows
        np.testing.assert_allclose(g.numpy(), [[0, 18], [0, 0], [72, 90]])
        assert float(loss) == pytest.approx(9 * (0 + 1 + 16 + 25))


# ---- 2. ``x[...] = v`` rebinds x to v (MegEngine's Tensor.__setitem__: index ``is Ellipsis`` -> ``_reset(v)``) ---
def test_setitem_ellipsis_takes_the_values_shape():
    t = Tensor(0.0)
    t[...] = Tensor(np.arange(1, 7, dtype="float32").reshape(1, 2, 3))
    assert t.shape == (1, 2, 3)
    np.testing.assert_array_equal(t.numpy().ravel(), [1, 2, 3, 4, 5, 6])
    t = Tensor(np.zeros((2, 3), "float32"))
    t[...] = Tensor([[1.0], [2.0]])  # (2, 1): MegEngine does not broadcast either
    assert t.shape == (2, 1)


def test_setitem_ellipsis_takes_the_values_dtype_and_a_scalar_becomes_0d():
    # MegEngine 1.13: int32 (2,) [...] = float32 (3,) of 1.5 -> float32 [1.5 1.5 1.5]; (2, 3) [...] = 5 -> 0-d 5.0;
    # int32 [...] = 5.7 -> int32 5; [...] = np.arange(4) -> (4,) in t's dtype; a tuple (...,) writes into t
    t = Tensor(np.zeros((2,), "int32"))
    t[...] = Tensor(np.full((3,), 1.5, "float32"))
    assert t.dtype == np.float32 and t.numpy().tolist() == [1.5, 1.5, 1.5]
    t = Tensor(np.zeros((2, 3), "float32"))
    t[...] = 5
    assert t.shape == () and t.dtype == np.float32 and float(t) == 5.0
    t = Tensor(np.zeros((2, 3), "int32"))
    t[...] = 5.7
    assert t.shape == () and t.dtype == np.int32 and int(t) == 5
    t = Tensor(np.zeros((2, 3), "float32"))
    t[...] = np.arange(4)
    assert t.shape == (4,) and t.dtype == np.float32
    t = Tensor(np.zeros((2, 3), "float32"))
    t[(Ellipsis,)] = Tensor([1.0, 2.0, 3.0])
    assert t.shape == (2, 3) and t.numpy().tolist() == [[1, 2, 3], [1, 2, 3]]
    with pytest.raises(ValueError):
        t[:] = Tensor(np.zeros((4, 5), "float32"))  # any other index writes into t's shape


def test_setitem_ellipsis_does_not_alias_later_writes():
    v = Tensor([1.0, 2.0])
    t = Tensor(0.0)
    t[...] = v
    v[0] = 7.0
    t2 = Tensor(0.0)
    t2[...] = v
    t2[1] = 9.0
    assert t.numpy().tolist() == [1.0, 2.0] and v.numpy().tolist() == [7.0, 2.0]
    assert t2.numpy().tolist() == [7.0, 9.0]


def test_setitem_ellipsis_is_differentiable():
    # MegEngine 1.13: x.grad = 8 everywhere; y (overwritten) gets no gradient
    x = Parameter(np.ones((3,), "float32"))
    y = Parameter(np.ones((2,), "float32"))
    gm = GradManager().attach([x, y])
    with gm:
        t = y * 1
        t[...] = x * 2
        gm.backward((t * t).sum())
    np.testing.assert_array_equal(x.grad.numpy(), [8.0, 8.0, 8.0])
    assert y.grad is None


def test_setitem_ellipsis_in_a_compiled_step():
    import megxla.module as M

    class PosEnc(M.Module):  # the ASR Transformer's pattern: a buffer grown to the table's shape on first use
        def __init__(self):
            super().__init__()
            self.pe = Tensor(0.0)

        def forward(self, x):
            if self.pe.ndim < 2 or self.pe.shape[1] < x.shape[1]:
                self.pe[...] = F.broadcast_to(F.arange(x.shape[1]).reshape(1, -1), (1, x.shape[1]))
            return x + self.pe[:, :x.shape[1]]

    m = PosEnc()

    @xla_trace
    def f(m, x):
        return m(x)

    x = Tensor(np.ones((2, 4), "float32"))
    for _ in range(3):
        np.testing.assert_array_equal(f(m, x).numpy(), [[1, 2, 3, 4]] * 2)
    assert m.pe.shape == (1, 4)
