"""Boolean-mask indexing inside a traced step guards the mask's *count* only (issue 21): masks that change
with a repeated count reuse the compiled step; a new count records again; eager results equal NumPy's."""
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import xla_trace


def _masks(counts, seed=2):
    rs = np.random.RandomState(seed)
    out = []
    for n in counts:
        m = np.zeros((5, 3), bool)
        m.flat[rs.permutation(15)[:n]] = True
        out.append(m)
    return out


def _train(traced, masks):
    mge.random.seed(0)
    model = M.Linear(4, 3)
    opt = optim.SGD(model.parameters(), lr=0.1)
    gm = GradManager().attach(model.parameters())

    def step(model, opt, x, t, m):
        with gm:
            pred = model(x)
            loss = F.abs(pred[m] - t[m]).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    if traced:
        step = xla_trace(step)
    rs = np.random.RandomState(1)
    losses = []
    for m in masks:
        x = mge.Tensor(rs.rand(5, 4).astype("float32"))
        t = mge.Tensor(rs.rand(5, 3).astype("float32"))
        losses.append(float(step(model, opt, x, t, mge.Tensor(m))))
    return losses, [p.numpy() for p in model.parameters()], step


@pytest.mark.parametrize("counts, rerecords", [((7, 7, 7, 7), 0), ((5, 6, 5, 6), None)])
def test_masked_loss_step_guards_the_count(counts, rerecords):
    masks = _masks(counts)
    assert len({m.tobytes() for m in masks}) == len(masks)  # every mask differs
    le, pe, _ = _train(False, masks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lt, pt, step = _train(True, masks)
    np.testing.assert_allclose(lt, le, rtol=1e-6, atol=1e-6)
    for a, b in zip(pt, pe):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    if rerecords is not None:
        assert step.num_rerecords == rerecords  # equal counts: one recording, whatever the masks hold
    else:
        assert 1 <= step.num_rerecords <= 2  # a new count records again; then both recordings are reused


def test_mask_setitem_and_cond_take_traced_reuse():
    def body(x, y, m):
        z = x * 1
        z[m] = y[m] * 2
        v, i = F.cond_take(m, y)
        return z, v, i

    f = xla_trace(body)
    rs = np.random.RandomState(0)
    for m in _masks((6, 6, 6)):
        x, y = rs.rand(5, 3).astype("float32"), rs.rand(5, 3).astype("float32")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the first call records eagerly (it reads counts on the host)
            z, v, i = f(mge.Tensor(x), mge.Tensor(y), mge.Tensor(m))
        ez = x.copy()
        ez[m] = y[m] * 2
        np.testing.assert_allclose(z.numpy(), ez, rtol=1e-6)
        np.testing.assert_allclose(v.numpy(), y[m])
        np.testing.assert_array_equal(i.numpy(), np.flatnonzero(m))
    assert f.num_rerecords == 0


@pytest.mark.parametrize("shape, mshape, lead", [((4, 3), (4, 3), ()), ((4, 3, 2), (4,), ()),
                                                 ((2, 4, 3), (4, 3), (1,)), ((3, 0), (3, 0), ())])
def test_eager_mask_indexing_equals_numpy(shape, mshape, lead):
    rs = np.random.RandomState(0)
    x = rs.rand(*shape).astype("float32")
    m = rs.rand(*mshape) > 0.5
    idx = tuple(slice(None) for _ in lead) + (m,)
    np.testing.assert_array_equal(mge.Tensor(x)[tuple(mge.Tensor(i) if isinstance(i, np.ndarray) else i
                                                      for i in idx)].numpy(), x[idx])
    t = mge.Tensor(x)
    y = rs.rand(*shape).astype("float32")
    t[tuple(mge.Tensor(i) if isinstance(i, np.ndarray) else i for i in idx)] = mge.Tensor(y)[idx]
    e = x.copy()
    e[idx] = y[idx]
    np.testing.assert_array_equal(t.numpy(), e)


def test_traced_mask_of_wrong_shape_names_op_and_shapes():
    f = xla_trace(lambda x, m: x[m])
    with pytest.raises(Exception, match=r"getitem.*\(4,\)"):
        f(mge.Tensor(np.zeros((3, 2), "float32")), mge.Tensor(np.ones(4, bool)))


@pytest.mark.parametrize("index", ["..., m", "m, ...", ":, m", ":, m, :", "..., m, :", ":, ..., m"])
def test_one_value_under_a_mask_among_full_slices_is_a_select(index):
    # ``scores[..., mask] = min_value`` (the ASR Transformer's attention, mask over trailing (batch, time) axes):
    # a select over the mask broadcast to x, as a leading mask's -- no host read of the mask, so a traced step
    # whose masks change keeps one executable and an auto-jit cluster is not cut there (probe M: 26 compiles in
    # 10 steps of that model). Values and gradients equal NumPy's setitem.
    rs = np.random.RandomState(0)
    x = rs.rand(2, 3, 4).astype("float32")
    shape = {"..., m": (3, 4), "m, ...": (2, 3), ":, m": (3, 4), ":, m, :": (3,), "..., m, :": (3,),
             ":, ..., m": (4,)}[index]

    def idx(m):
        return tuple({"...": Ellipsis, ":": slice(None), "m": m}[k.strip()] for k in index.split(","))

    masks = [rs.rand(*shape) > 0.5 for _ in range(4)]
    for m in masks:
        e = x.copy()
        e[idx(m)] = -7.0
        t = mge.Tensor(x)
        t[idx(mge.Tensor(m))] = -7.0
        np.testing.assert_array_equal(t.numpy(), e)

    def body(x, m, v):
        y = x * 1
        y[idx(m)] = v
        return y

    f = xla_trace(body)
    for m in masks:
        e = x.copy()
        e[idx(m)] = 0.5
        np.testing.assert_array_equal(f(mge.Tensor(x), mge.Tensor(m), mge.Tensor(0.5)).numpy(), e)
    assert f.num_rerecords == 0  # (masks of other counts: no host read, one recording)
    w = mge.Parameter(x)
    v = mge.Parameter(0.5)
    gm = GradManager().attach([w, v])
    with gm:
        y = w * 1
        y[idx(mge.Tensor(masks[0]))] = v
        gm.backward((y * y).sum())
    e = x.copy()
    e[idx(masks[0])] = 0.5
    np.testing.assert_allclose(w.grad.numpy(), np.where(e == 0.5, 0, 2 * x), rtol=1e-6)
    np.testing.assert_allclose(v.grad.numpy(), 2 * 0.5 * masks[0].sum() * (2 * 3 * 4 // masks[0].size), rtol=1e-6)


def test_one_value_under_a_shorter_1d_mask_is_a_select_of_its_positions():
    # ``kl[..., ignore] = 0`` (the ASR Transformer's label smoothing: kl (rows, vocab), a mask over the rows): MegEngine
    # writes the mask's true positions, the first entries of the axis; as a select over the mask padded with False,
    # a traced step keeps one recording whatever the mask holds (its count read on the host made a new one per count)
    x = np.arange(24, dtype="float32").reshape(2, 12)

    def body(x, m):
        y = x * 1
        y[..., m] = 0
        return y

    f = xla_trace(body)
    for m in ([1, 0, 1, 0, 0], [0, 1, 1, 1, 0], [1, 1, 1, 1, 1]):
        e = x.copy()
        e[:, np.flatnonzero(m)] = 0
        m = mge.Tensor(np.array(m, bool))
        np.testing.assert_array_equal(body(mge.Tensor(x), m).numpy(), e)
        np.testing.assert_array_equal(f(mge.Tensor(x), m).numpy(), e)
    assert f.num_rerecords == 0
