"""Boolean selections under auto-jit, collected at a fixed size (``jit/_padded.py``, ``core/ops/padded.py``):
``x[m]``, ``x[m, k]``, ``x[m, :4]``, ``y[m] = v[m]``, ``t[m, k[m]] = 1`` give eager's values, gradients, shapes and
errors for every count (0 and all rows included), and the clusters holding them do not change with the count."""
from __future__ import annotations

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.core._indexing import IndexOutOfRange
from megxla.jit import _autojit, _padded, auto_jit_stats, reset_auto_jit_stats

from test_autojit_programs import _same, fresh_auto_jit  # noqa: F401


def _detector_like(xa, ma, wa):
    """A detector loss's selections: every padded form, an op that needs the rows themselves (``sort``), and a
    gradient through each to a parameter and to a weight broadcast along the rows."""
    x, w = mge.Parameter(xa), mge.Parameter(wa)
    m = mge.Tensor(ma)
    gm = GradManager().attach([x, w])
    with gm:
        y = x[m]
        fg = y[:, 0] > 0
        lab = F.zeros(x.shape[0], dtype="int32")
        lab[m] = (y[:, 1] > 0).astype("int32") + 1
        t = F.zeros_like(x)
        t[m, lab[m] - 1] = 1
        focal = (F.log(1 + F.exp(-F.abs(y))) * w).sum() / max(int(fg.sum()), 1)
        l1 = F.abs(x[m, :2] - t[m][:, 1:]).mean() + (x[m, 2] * 2).sum()
        ranked = F.sort(y[:, 2])[0].sum()  # (not row by row: on the first count rows)
        loss = focal + l1 + ranked + (t * x).sum()
        gm.backward(loss)
    return [loss.numpy(), x.grad.numpy(), w.grad.numpy(), y.numpy(), tuple(y.shape), lab.numpy(), t.numpy(),
            x[m, 1].numpy()]


def _inputs(seed, count):
    r = np.random.RandomState(seed)
    xa = r.standard_normal((10, 3)).astype("float32")
    ma = np.zeros(10, bool)
    ma[r.permutation(10)[:count]] = True
    return xa, ma, np.array([0.5, 1.0, 2.0], "float32")


@pytest.mark.parametrize("counts", [(3, 5, 0, 10, 1, 3, 0, 7)])
def test_selections_agree_with_eager_for_every_count(fresh_auto_jit, counts):
    for step, count in enumerate(counts):
        args = _inputs(step, count)
        mge.config.auto_jit = False
        want = _detector_like(*args)
        mge.config.auto_jit = True
        got = _detector_like(*args)
        mge.config.auto_jit = False
        _same(want, got, f"step {step} (count {count})")


def test_an_empty_selection_gives_a_broadcast_weight_eagers_zero_gradient(fresh_auto_jit):
    # the padded rows copy an unselected row (there is no selected one) where log is -inf: eager's gradient of w is
    # a sum over no row, 0 -- not 0 * inf
    x = np.array([[0.0, 1.0], [2.0, 3.0]], "float32")
    for auto in (False, True):
        mge.config.auto_jit = auto
        xt, w = mge.Parameter(x), mge.Parameter(np.ones(2, "float32"))
        gm = GradManager().attach([xt, w])
        with gm:
            loss = (F.log(xt[mge.Tensor(np.zeros(2, bool))]) * w).sum()
            gm.backward(loss)
        assert float(loss.numpy()) == 0.0
        np.testing.assert_array_equal(w.grad.numpy(), [0.0, 0.0])
        np.testing.assert_array_equal(xt.grad.numpy(), np.zeros((2, 2)))
    mge.config.auto_jit = False


def test_a_selection_keeps_its_cluster_whatever_the_count(fresh_auto_jit):
    # the count is an input of the cluster: new counts reuse the executables (before: a new key per count)
    mge.config.auto_jit = True
    w = mge.Parameter(np.ones(3, "float32"))
    gm = GradManager().attach([w])
    opt = mge.optimizer.SGD([w], lr=0.1)

    def step(xa):
        x = mge.Tensor(xa)
        with gm:
            y = x[x[:, 0] > 0]
            loss = (F.exp(y * w) * 0.5 + y).sum() + (y * w).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return float(loss.item())

    r = np.random.RandomState(0)
    batches = [r.standard_normal((32, 3)).astype("float32") for _ in range(24)]
    for xa in batches[:6]:
        step(xa)
    before = auto_jit_stats()["compiled"]
    counts = set()
    for xa in batches[6:]:
        step(xa)
        counts.add(int((xa[:, 0] > 0).sum()))
    mge.config.auto_jit = False
    assert len(counts) > 4
    assert auto_jit_stats()["compiled"] == before


def test_a_selections_shape_and_errors_are_eagers(fresh_auto_jit):
    xa = np.arange(12, dtype="float32").reshape(4, 3)
    ma = np.array([True, False, True, True])
    for auto in (False, True):
        mge.config.auto_jit = auto
        x, m = mge.Tensor(xa), mge.Tensor(ma)
        y = x[m]
        assert tuple(y.shape) == (3, 3) and y.ndim == 2
        np.testing.assert_array_equal(y.numpy(), xa[ma])
        with pytest.raises(ValueError) as bad:
            x[m] + mge.Tensor(np.ones((4, 3), "float32"))
        t = F.zeros_like(x)
        with pytest.raises(IndexOutOfRange) as out:
            t[m, (x[m][:, 0] * 0 + 5).astype("int32")] = 1
        with pytest.raises(IndexError):
            x[m, 3]
        if not auto:
            eager = (str(bad.value), str(out.value))
    mge.config.auto_jit = False
    assert (str(bad.value), str(out.value)) == eager


def test_selections_are_indexed_as_ever_without_padding(fresh_auto_jit, monkeypatch):
    monkeypatch.setattr(_padded, "ON", False)
    mge.config.auto_jit = True
    x = mge.Tensor(np.arange(6, dtype="float32"))
    y = x[x > 2]
    assert type(y._data) is not _autojit.Lazy or y._data.pad is None
    np.testing.assert_array_equal(y.numpy(), [3.0, 4.0, 5.0])
    mge.config.auto_jit = False


def test_a_mask_written_after_its_selection_leaves_the_selection_as_it_was(fresh_auto_jit):
    xa = np.arange(8, dtype="float32").reshape(4, 2)
    for auto in (False, True):
        mge.config.auto_jit = auto
        x, m = mge.Tensor(xa), mge.Tensor(np.array([True, False, True, False]))
        y = x[m] * 2
        m[1] = True
        z = x[m].sum()
        np.testing.assert_array_equal(y.numpy(), [[0.0, 2.0], [8.0, 10.0]])
        assert float(z.numpy()) == 0 + 1 + 2 + 3 + 4 + 5
    mge.config.auto_jit = False


def _labels_then_targets(gt, best, classes=4):
    """A detector's labels (written through masks, classes from a float column), then one-hot targets indexed by
    them: the index check passes on the labels' known range, without reading them."""
    labels = F.zeros(best.shape[0], dtype="int32")
    labels[best >= 0.5] = 1
    labels[(best >= 0.4) & (best < 0.5)] = -1
    fg = labels == 1
    labels[fg] = gt[fg, 0].astype("int32")
    fgm = labels > 0
    t = F.zeros((best.shape[0], classes))
    t[fgm, labels[fgm] - 1] = 1
    return t.sum(axis=0).numpy(), labels.numpy()


def test_an_index_whose_range_is_known_is_checked_without_a_cut(fresh_auto_jit):
    r = np.random.RandomState(0)
    gt = mge.Tensor(r.randint(1, 5, (16, 1)).astype("float32"))
    best = mge.Tensor(r.uniform(0, 1, 16).astype("float32"))
    mge.config.auto_jit = False
    want = _labels_then_targets(gt, best)
    mge.config.auto_jit = True
    _autojit.reset_auto_jit_stats()
    got = _labels_then_targets(gt, best)
    cuts = auto_jit_stats()["cuts"]
    mge.config.auto_jit = False
    _same(want, got, "labels and targets")
    assert [c for c in cuts if "t[fgm" in c[2]] == [], cuts  # (only the reads of the results cut)


def test_an_index_out_of_the_known_range_still_raises_eagers_error(fresh_auto_jit):
    r = np.random.RandomState(0)
    gt = mge.Tensor(np.full((16, 1), 7, "float32"))  # (class 7 of 4)
    best = mge.Tensor(r.uniform(0, 1, 16).astype("float32"))
    errors = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        with pytest.raises(IndexOutOfRange) as e:
            _labels_then_targets(gt, best)
        errors.append(str(e.value))
    mge.config.auto_jit = False
    assert errors[0] == errors[1]


def _masked_labels(x, weight, scale):
    ids = F.ones(x.shape) if scale == 1.0 else F.full(x.shape, scale)
    label = ids * (x > 0.5)  # (class ids made as floats on the device: OMNet's labels)
    picked = weight[label.flatten().astype("int32")].reshape(label.shape)
    return float((F.exp(x) * picked).sum())


@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_class_ids_made_as_ones_times_a_mask_are_checked_without_a_cut(fresh_auto_jit, scale):
    # ``weight[(F.ones(shape) * mask).astype("int32")]`` (OMNet's class weights): the index check read the ids,
    # a cut in the middle of the loss at every step. Their range is known: the ones' value, or 0. With 2 for the
    # value the ids run past the weights' 2 entries, and the check raises eager's error.
    r = np.random.RandomState(0)
    xs = [mge.Tensor(r.rand(4, 16).astype("float32")) for _ in range(3)]
    weight = mge.Tensor([0.7, 0.3])
    results = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        _autojit.reset_auto_jit_stats()
        try:
            results.append([_masked_labels(x, weight, scale) for x in xs])
        except IndexOutOfRange as e:
            results.append(str(e))
    cuts = auto_jit_stats()["cuts"]
    mge.config.auto_jit = False
    assert results[0] == pytest.approx(results[1], rel=1e-5) if scale == 1.0 else results[0] == results[1], results
    if scale == 1.0:
        assert [c for c in cuts if "picked = " in c[2]] == [], cuts  # (only the loss's read cuts)
    else:
        assert "out of range" in results[0]


def test_a_nan_among_float_classes_reads_the_index_as_eager_does(fresh_auto_jit):
    r = np.random.RandomState(1)
    g = r.randint(1, 5, (16, 1)).astype("float32")
    g[3] = np.nan
    gt, best = mge.Tensor(g), mge.Tensor(r.uniform(0, 1, 16).astype("float32"))
    got = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        try:
            got.append(_labels_then_targets(gt, best))
        except IndexError as e:
            got.append(type(e).__name__ + str(e))
    mge.config.auto_jit = False
    _same(got[0], got[1], "with a nan class")


def test_a_backward_after_auto_jit_is_switched_off_still_agrees(fresh_auto_jit):
    xa, ma, wa = _inputs(3, 4)
    got = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        x, w = mge.Parameter(xa), mge.Parameter(wa)
        gm = GradManager().attach([x, w])
        with gm:
            y = x[mge.Tensor(ma)]
            loss = (F.exp(y) * w).sum() + y.mean()
            mge.config.auto_jit = False
            gm.backward(loss)
        got.append([loss.numpy(), x.grad.numpy(), w.grad.numpy(), y.numpy()])
    _same(got[0], got[1], "backward with auto-jit off")


_UNARY = ["exp", "log", "sqrt", "abs", "relu", "sigmoid", "tanh", "neg"]


def _random_selection_program(seed, auto):
    """A random chain of ops on selections of a parameter (row by row, reductions over any axis, broadcast weights,
    ops that need the selection itself, reads, writes back through the mask), its loss differentiated: the values
    and gradients a program gets, for comparison between eager and auto-jit."""
    r = np.random.RandomState(seed)
    rows, cols = r.randint(1, 9), r.randint(1, 5)
    xa = r.standard_normal((rows, cols)).astype("float32")
    xa[r.rand(rows, cols) < 0.2] = 0.0  # (log and sqrt of 0 on the rows not selected)
    count = r.choice([0, rows, r.randint(0, rows + 1)])
    ma = np.zeros(rows, bool)
    ma[r.permutation(rows)[:count]] = True
    # (or the first rows, ``x[:n]`` with ``n`` a Tensor -- a data set's boxes cut to their count --, Python's slice)
    stop = r.choice([-rows - 1, -1, 0, rows + 2, r.randint(0, rows + 1)]) if r.rand() < 0.4 else None
    if stop is not None:
        ma = np.arange(rows) < len(range(rows)[:stop])
        count = int(ma.sum())
    mge.config.auto_jit = auto
    x, w = mge.Parameter(xa), mge.Parameter(r.uniform(0.5, 1.5, cols).astype("float32"))
    m = mge.Tensor(ma)
    gm = GradManager().attach([x, w])
    log = []
    how = r.randint(8)
    with gm:
        y = x[m] if stop is None else x[:mge.Tensor(stop, dtype=["int32", "int16"][r.randint(2)])]
        if stop is None and how == 0:
            y = x[ma]  # (a host mask: its count known)
        elif stop is None and how == 1:
            y = y[y[:, 0] > 0]  # (a selection of a selection: the rows both select)
        elif stop is None and how == 2:
            y = F.expand_dims(x[F.stack([m] * cols, 1) & (x > 0)], 1)  # (a mask of two axes: its elements)
        loss = 0.0
        try:
            _random_steps(r, x, w, m, y, log, rows, cols, count)
        except Exception as e:  # (the program's own error: eager's, at the same op)
            log.append(f"{type(e).__name__}: {e}")
            loss = x.sum() * 0
        else:
            loss = log.pop()
        gm.backward(loss)
    log += [loss.numpy(), x.grad.numpy(), w.grad.numpy() if w.grad is not None else None]
    mge.config.auto_jit = False
    return [v for v in log if v is not None]


def _random_steps(r, x, w, m, y, log, rows, cols, count):
    if True:
        loss = 0.0
        for _ in range(r.randint(3, 9)):
            k = r.randint(18)
            if k < 3:
                name = _UNARY[r.randint(len(_UNARY))]
                v = getattr(F, name)(F.abs(y) + 0.5 if name in ("log", "sqrt") else y) if name != "neg" else -y
                y = v if r.rand() < 0.7 else y
                loss = loss + (v * w).sum() if v.ndim == 2 else loss + v.sum()
            elif k == 3:
                axis = [None, 0, 1][r.randint(3)] if y.ndim == 2 else None
                red = [F.sum, F.mean, F.max, F.min][r.randint(4)]
                if axis is not None or red in (F.sum, F.mean) or count:
                    loss = loss + red(y, axis=axis).sum()
            elif k == 4 and y.ndim == 2:
                j = r.randint(y.shape[1])
                y = [y[:, j], y[:, :max(1, cols - 1)], y[..., j], y[..., 1:]][r.randint(4)]
            elif k == 5:
                loss = loss + F.sort(y.reshape(-1))[0].sum() * 0.1  # (not row by row: on the selection itself)
            elif k == 6:
                log.append(tuple(y.shape))
                log.append(y.numpy())
            elif k == 7 and y.ndim == 2 and y.shape[1] == cols:
                z = F.zeros_like(x)
                z[m] = y * 2
                loss = loss + (z * x).sum()
            elif k == 9 and y.ndim == 2 and count:
                a = (F.argmax if r.rand() < 0.5 else F.argmin)(y, axis=0)
                log.append(a.numpy())
                g = y[a - count if r.rand() < 0.5 else a]  # (rows gathered by position: negative ones too)
                loss = loss + (g * 2).sum()
            elif k == 8 and y.ndim == 2:
                t = F.zeros((rows, y.shape[1]))
                t[m, (F.abs(y[:, 0]) * 0).astype("int32")] = 1
                loss = loss + (t * F.expand_dims(x[:, 0], 1)).sum()
            elif k == 11 and y.ndim == 2:  # (along the other axis: row by row)
                v = (F.softmax if r.rand() < 0.5 else F.logsumexp if r.rand() < 0.5 else F.logsoftmax)(y, 1)
                loss = loss + (v * 0.5).sum()
                y = v if v.ndim == 2 and r.rand() < 0.5 else y
            elif k == 12 and y.ndim == 2 and y.shape[1] == cols:
                y = F.matmul(y, F.stack([w, w * 2], 1))  # (a weight's gradient: a sum over the selected rows)
                loss = loss + y.sum() * 0.3
            elif k == 13 and y.ndim == 2:  # (labels of the same rows)
                lab = (F.abs(y[:, 0]) * 10).astype("int32") % y.shape[1]
                log.append(F.argmax(y, axis=1).numpy())
                ce = F.nn.cross_entropy(y, lab) if r.rand() < 0.5 else F.nn.indexing_one_hot(y, lab, 1).sum()
                loss = loss + ce
            elif k == 14:
                loss = loss + (F.ones_like(y) * y + F.zeros_like(y)).sum()
            elif k == 15 and y.ndim == 2:
                loss = loss + (F.cumsum(y, 1) * F.sort(y)[0]).sum() * 0.1 + F.topk(y, 1)[0].sum()
            elif k == 16 and y.ndim == 2:  # (along the other axis, their inputs' other axes read without a count)
                idx = (F.abs(y[:, :1]) * 10).astype("int32") % cols
                v = [F.var(y, axis=1), F.repeat(y, 2, axis=1), F.split(y, 2, axis=1)[-1], F.gather(y, 1, idx),
                     F.concat([y, y * 2], axis=1), F.topk(y, 1)[0], F.flatten(F.expand_dims(y, 1), 1),
                     y.reshape(y.shape[0], 1, -1).sum(axis=1) * 2, F.reshape(y, (-1, 1, 1))[..., 0]][r.randint(9)]
                loss = loss + (v * 0.5).sum()
            elif k == 17:  # (the rows reordered, sliced and concatenated: in place, their count not read)
                key = y if y.ndim == 1 else y[:, 0]
                g = y[F.argsort(key, descending=r.rand() < 0.5)]
                a, b = [(None, -1), (1, None), (-2, None), (None, 2), (1, -1), (0, rows + 3)][r.randint(6)]
                h = g[a:b]
                c = F.concat([h, y]) if r.rand() < 0.5 else F.concat([y, g[:1], h])
                log.append(tuple(c.shape))
                loss = loss + (c * 0.5).sum() + (F.sort(key)[0] * 0.3).sum() \
                    + F.topk(key, 1 + r.randint(3), descending=r.rand() < 0.5)[0].sum()
                y = c if r.rand() < 0.3 else y
            else:
                loss = loss + (y * 0.5 + 1).mean() if count else loss
                loss = loss + F.max(y, axis=0).sum() if count and y.ndim == 2 and k == 10 else loss
        if isinstance(loss, float):
            loss = x.sum() * 0
        log.append(loss)


@pytest.mark.parametrize("seed", range(24))
def test_random_selection_programs_agree_with_eager(fresh_auto_jit, seed):
    eager = _random_selection_program(seed, False)
    auto = _random_selection_program(seed, True)
    _same(eager, auto, f"selection program {seed}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "bool"])
def test_a_selections_sum_and_mean_keep_eagers_types(fresh_auto_jit, dtype):
    r = np.random.RandomState(0)
    xa = (r.standard_normal((6, 2)) * 3).astype("float32")
    ma = np.array([True, False, True, True, False, True])
    got = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        x = mge.Tensor(xa).astype(dtype) if dtype != "bool" else mge.Tensor(xa > 0)
        y = x[mge.Tensor(ma)]
        outs = [y.sum(), y.mean(), y.sum(axis=0), y.mean(axis=0, keepdims=True)]
        got.append([(o.numpy().astype("float64"), str(o.dtype)) for o in outs])
    mge.config.auto_jit = False
    _same(got[0], got[1], dtype, rtol=1e-2 if "16" in dtype else 1e-5)


def _cond_take_and_non_zero(xa, wa):
    """``cond_take`` (values and indices) and ``non_zero`` (both layouts) of a 2-d mask, a gradient through the taken
    values."""
    x, w = mge.Tensor(xa), mge.Parameter(wa)
    gm = GradManager().attach([w])
    with gm:
        y = x * w
        v, i = F.cond_take(y > 0, y)
        loss = (F.exp(v) * 0.5).sum() + v.mean() + (i.astype("float32") * v).sum()
        gm.backward(loss)
    nz, (r, c) = F.non_zero(y > 0.5), F.non_zero(y > 0.5, as_tuple=True)
    return [loss.numpy(), w.grad.numpy(), v.numpy(), i.numpy(), tuple(v.shape), str(i.dtype), nz.numpy(),
            tuple(nz.shape), r.numpy(), c.numpy(), str(nz.dtype), (nz + 1).numpy()]


def test_cond_take_and_non_zero_agree_with_eager_and_keep_their_clusters(fresh_auto_jit):
    # the host-read step takes ``cond_take`` of the positive logits: kept in place, the step's cluster does not
    # change (or cut) with their number -- zero and every element included
    r = np.random.RandomState(3)
    wa = np.ones((4, 5), "float32")
    batches = [r.standard_normal((4, 5)).astype("float32") for _ in range(10)]
    batches += [-np.abs(batches[0]), np.abs(batches[1]) + 1]  # (none selected; all)
    compiled = None
    for step, xa in enumerate(batches):
        mge.config.auto_jit = False
        want = _cond_take_and_non_zero(xa, wa)
        mge.config.auto_jit = True
        got = _cond_take_and_non_zero(xa, wa)
        mge.config.auto_jit = False
        _same(want, got, f"step {step}")
        if step == 3:
            compiled = auto_jit_stats()["compiled"]
    assert auto_jit_stats()["compiled"] == compiled
    cuts = [c for c in auto_jit_stats()["cuts"] if "cond_take" in c[2] or "non_zero" in c[2]]
    assert not cuts, cuts


def _zoo_detector_losses(batches, auto):
    """The zoo's detector step (``test_megengine_parity_zoo2``: boxes padded per image, cut to ``info[i, 4]``)."""
    import test_megengine_parity_zoo2 as zoo
    mge.config.auto_jit = auto
    net = zoo._init(zoo._Det(), 1)
    opt = mge.optimizer.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    gm = GradManager().attach(net.parameters())
    losses = []
    for b in batches:
        with gm:
            loss = net(*[mge.tensor(a) for a in b])
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.item())
    mge.config.auto_jit = False
    return losses, [p.numpy() for p in net.parameters()]


def _padded_boxes(r, steps, most=6):
    batches = []
    for _ in range(steps):
        gt, info = np.zeros((2, most, 5), "float32"), np.zeros((2, 5), "float32")
        for b, c in enumerate(r.randint(1, most + 1, 2)):
            xy = r.uniform(0, 9, size=(c, 2))
            gt[b, :c, :2], gt[b, :c, 2:4] = xy, xy + r.uniform(4, 8, size=(c, 2))
            gt[b, :c, 4] = r.randint(1, 4, size=c)
            info[b] = [16, 16, 16, 16, c]
        batches.append((r.rand(2, 3, 16, 16).astype("float32"), info, gt))
    return batches


def test_a_data_sets_boxes_cut_to_their_count_keep_the_detectors_clusters(fresh_auto_jit):
    # ``gt_boxes[i, :info[i, 4]]``: the count is read without cutting the cluster (a few exact ops from an input), the
    # boxes kept in place -- IoU, max/argmax over them, a gather by the matched positions --, so that one set of
    # executables serves every count (before: a cut at each image, and clusters changing with each image's count)
    batches = _padded_boxes(np.random.RandomState(5), 24)
    want, want_params = _zoo_detector_losses(batches, False)
    got, got_params = _zoo_detector_losses(batches[:8], True)
    compiled = auto_jit_stats()["compiled"]
    _autojit.reset_auto_jit_stats()
    more, got_params = _zoo_detector_losses(batches, True)
    _same(want, more, "losses", rtol=1e-5)
    _same(want_params, got_params, "parameters", rtol=1e-4)
    stats = auto_jit_stats()
    assert stats["compiled"] == 0 and compiled > 0
    assert stats["peeks"] >= 2 * len(batches)
    assert not [c for c in stats["cuts"] if "gt_boxes[bid" in c[2] or "argmax" in c[2]], stats["cuts"]


def test_an_empty_prefixs_maximum_raises_eagers_error(fresh_auto_jit):
    errors = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        x, n = mge.Tensor(np.ones((4, 3), "float32")), mge.Tensor(np.array([0, 2], "int32"))
        y = (x * 2)[:n[0]]
        with pytest.raises(Exception) as info:
            F.argmax(y, axis=0)
        errors.append((type(info.value), str(info.value)))
        assert y.shape == (0, 3)
    mge.config.auto_jit = False
    assert errors[0] == errors[1]


@pytest.mark.parametrize("case", ["ties", "nan", "-inf", "int"])
def test_extremes_over_a_selections_rows_are_eagers(fresh_auto_jit, case):
    # max/min over the rows run on every row, the unselected ones filled so they never win; argmax/argmin number the
    # selected rows -- ties (the first), a NaN (NumPy's: the first NaN), every selected value -inf
    xa = {"ties": [[1, 5], [3, 5], [3, 2], [9, 9], [3, 0]], "nan": [[1, np.nan], [np.nan, 2], [3, 2], [9, 9], [0, 1]],
          "-inf": [[-np.inf, 1], [9, 9], [-np.inf, -np.inf], [9, 9], [-np.inf, 0]],
          "int": [[1, -7], [3, 5], [3, -7], [9, 9], [-2, 0]]}[case]
    ma = np.array([True, True, True, False, True])
    got = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        x = mge.Parameter(np.array(xa, "float32"))
        gm = GradManager().attach([x])
        with gm:
            y = x[mge.Tensor(ma)] if case != "int" else x.astype("int32")[mge.Tensor(ma)]
            outs = [F.max(y, axis=0), F.min(y, axis=0, keepdims=True), F.max(y), F.argmax(y, axis=0),
                    F.argmin(y, axis=0, keepdims=True)]
            if case != "int":
                gm.backward((outs[0] * 2).sum() + outs[1].sum() + outs[2])
        got.append([o.numpy() for o in outs] + [str(o.dtype) for o in outs]
                   + ([x.grad.numpy()] if case != "int" else []))
    mge.config.auto_jit = False
    _same(got[0], got[1], case)


def test_a_read_a_few_exact_ops_compute_from_inputs_does_not_cut(fresh_auto_jit):
    mge.config.auto_jit = True
    info = mge.Tensor(np.array([[16, 16, 3]], "float32"))
    x = mge.Tensor(np.arange(12, dtype="float32").reshape(4, 3))
    y = F.exp(x) * 2
    before = auto_jit_stats()["peeks"]
    n = int(info[0, 2].astype("int32"))  # (getitem, astype: computed by themselves)
    assert n == 3 and auto_jit_stats()["peeks"] == before + 1
    assert y._data.value is None  # (the cluster still pending)
    s = float((info[0, 0] * 0.5 + x[0, 0]).item())  # (float arithmetic: peeked too, its ops pinned to what was read)
    assert s == 8.0 and auto_jit_stats()["peeks"] == before + 2
    assert y._data.value is None
    mge.config.auto_jit = False
    np.testing.assert_allclose(y.numpy(), np.exp(np.arange(12).reshape(4, 3)) * 2, rtol=1e-6)


def test_a_count_of_input_labels_read_mid_step_does_not_cut_the_step(fresh_auto_jit):
    # ``int((y != 0).sum())`` -- the tokens or labels a loss is normalised by, read on the host between the forward
    # and the loss -- is an integer reduction of an input: computed by itself, the step stays one cluster (before: the
    # forward ran as a cluster of its own, its values the backward reads its outputs)
    r = np.random.RandomState(3)
    batches = [(r.standard_normal((8, 6)).astype("float32"), r.randint(0, 4, 8).astype("int32")) for _ in range(8)]
    got = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        reset_auto_jit_stats()
        mge.random.seed(0)
        net = M.Sequential(M.Linear(6, 8), M.ReLU(), M.Linear(8, 4))
        gm, opt = GradManager().attach(net.parameters()), optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        losses, counts = [], []
        for xa, ya in batches:
            x, y = mge.Tensor(xa), mge.Tensor(ya)
            with gm:
                logits = net(x)
                valid = y != 0
                n = int(valid.sum())
                top = int(F.argmax(y, axis=0)) + int((y * 2).max()) + int(F.cumsum(y, axis=0)[-1])
                loss = (F.nn.cross_entropy(logits, y, reduction="none") * valid.astype("float32")).sum() / max(n, 1)
                gm.backward(loss)
            opt.step().clear_grad()
            counts.append((n, top))
            losses.append(loss.item())
        got.append((losses, counts, [p.numpy() for p in net.parameters()]))
        if auto:
            stats = auto_jit_stats()
    mge.config.auto_jit = False
    assert got[0][1] == got[1][1]
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-5)
    for a, b in zip(got[0][2], got[1][2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert stats["peeks"] >= 4 * len(batches), stats
    assert not [c for c in stats["cuts"] if c[1] == "host read"], stats["cuts"]


def _retinanet_targets(anchors, batched_gt_boxes, batched_num_gts, thresholds=(0.4, 0.5), labels=(0, -1, 1)):
    """The zoo's RetinaNet ``get_ground_truth`` with its ``Matcher`` (allow_low_quality_matches) and ``get_iou``, as
    written there: each image's boxes cut to its count, IoU, max/argmax over the boxes, the matched boxes gathered."""
    labels_list, offsets_list = [], []
    ths = [-float("inf")] + list(thresholds) + [float("inf")]
    for bid in range(batched_gt_boxes.shape[0]):
        gt_boxes = batched_gt_boxes[bid, :batched_num_gts[bid]]
        b1, b2 = F.expand_dims(gt_boxes[:, :4], axis=1), F.expand_dims(anchors, axis=0)
        iw = F.minimum(b1[:, :, 2], b2[:, :, 2]) - F.maximum(b1[:, :, 0], b2[:, :, 0])
        ih = F.minimum(b1[:, :, 3], b2[:, :, 3]) - F.maximum(b1[:, :, 1], b2[:, :, 1])
        inter = F.maximum(iw, 0) * F.maximum(ih, 0)
        area1 = (gt_boxes[:, 2] - gt_boxes[:, 0]) * (gt_boxes[:, 3] - gt_boxes[:, 1])
        area2 = (anchors[:, 2] - anchors[:, 0]) * (anchors[:, 3] - anchors[:, 1])
        matrix = F.maximum(inter / (F.expand_dims(area1, axis=1) + F.expand_dims(area2, axis=0) - inter), 0)
        max_scores = matrix.max(axis=0)
        match_indices = F.argmax(matrix, axis=0)
        lab = F.full_like(match_indices, -1)
        for label, low, high in zip(labels, ths[:-1], ths[1:]):
            lab[(max_scores >= low) & (max_scores < high)] = label
        lab[(matrix == F.max(matrix, axis=1, keepdims=True)).sum(axis=0) > 0] = 1
        matched = gt_boxes[match_indices]
        fg_mask = lab == 1
        lab[fg_mask] = matched[fg_mask, 4].astype(np.int32)
        wa, ha = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
        wg, hg = matched[:, 2] - matched[:, 0], matched[:, 3] - matched[:, 1]
        offsets = F.stack([(matched[:, 0] - anchors[:, 0]) / wa, (matched[:, 1] - anchors[:, 1]) / ha,
                           F.log(wg / wa), F.log(hg / ha)], axis=1)
        labels_list.append(lab)
        offsets_list.append(offsets)
    return F.stack(labels_list, axis=0).detach(), F.stack(offsets_list, axis=0).detach()


def test_the_zoos_retinanet_targets_run_in_one_cluster_for_every_count(fresh_auto_jit):
    # as the zoo writes them (the count a Tensor: ``batched_num_gts[bid]``): no cut, the same executable every count
    r = np.random.RandomState(7)
    g = (np.arange(6, dtype="float32") + 0.5) * 4
    cx, cy = np.meshgrid(g, g)
    anchors = np.stack([cx - 3, cy - 3, cx + 3, cy + 3], -1).reshape(-1, 4)
    batches = []
    for _ in range(12):
        gt, num = np.zeros((2, 7, 5), "float32"), r.randint(1, 8, 2).astype("int32")
        for b, c in enumerate(num):
            xy = r.uniform(0, 18, size=(c, 2))
            gt[b, :c, :2], gt[b, :c, 2:4], gt[b, :c, 4] = xy, xy + r.uniform(3, 9, size=(c, 2)), r.randint(1, 5, c)
        batches.append((gt, num))
    want = []
    for gt, num in batches:
        want.append([v.numpy() for v in _retinanet_targets(mge.Tensor(anchors), mge.Tensor(gt), mge.Tensor(num))])
    mge.config.auto_jit = True
    got, compiled = [], None
    for step, (gt, num) in enumerate(batches):
        out = _retinanet_targets(mge.Tensor(anchors), mge.Tensor(gt), mge.Tensor(num))
        got.append([v.numpy() for v in out])
        if step == 3:
            compiled, cuts = auto_jit_stats()["compiled"], sum(c[0] for c in auto_jit_stats()["cuts"])
    stats = auto_jit_stats()
    mge.config.auto_jit = False
    _same(want, got, "targets", rtol=1e-5)
    assert stats["compiled"] == compiled, stats
    assert sum(c[0] for c in stats["cuts"]) - cuts == len(batches) - 4, stats["cuts"]  # (the read of the results)


def _head_losses(xa, la, ha, w, gm):
    """A detection head's losses on its foreground rows, as third-party MegEngine code writes them: a projection,
    softmax cross-entropy, argmax, softmax and logsumexp along the classes, ``zeros_like``, a selection of the
    selection, a mask of two axes and a host mask."""
    x, lab = mge.Tensor(xa), mge.Tensor(la)
    with gm:
        fg = F.exp(x[:, 0]) > 1  # (a float op: its count is not peeked)
        p = F.linear(x[fg], w)
        ce = F.nn.cross_entropy(p, lab[fg])
        hits = (F.argmax(p, axis=1) == lab[fg]).astype("float32").sum()
        soft = (F.softmax(p, axis=1) * (F.zeros_like(p) + 2) - F.logsumexp(p, axis=1, keepdims=True)).mean()
        pos = p[p[:, 1] > 0]
        both = x[(x > 0.5) & F.expand_dims(fg, 1)]
        loss = ce + soft + (pos ** 2).sum() * 0.1 + both.sum() * 0.1 + F.matmul(x[ha], w).mean() + hits * 0
        gm.backward(loss)
    out = [float(loss.item()), w.grad.numpy(), tuple(pos.shape), both.numpy()]
    w.grad = None
    return out


def test_a_heads_losses_on_selections_keep_their_clusters_whatever_the_count(fresh_auto_jit):
    # ops along the classes (cross_entropy, softmax, argmax, logsumexp), x[fg] @ w, zeros_like, a selection of a
    # selection, 2-d and host masks: row by row on the padded rows, one set of executables for every count (before:
    # each on the selection itself, its cluster keyed by the count)
    r = np.random.RandomState(4)
    batches = [(r.standard_normal((32, 4)).astype("float32"), r.randint(0, 4, 32).astype("int32"),
                r.rand(32) < r.rand()) for _ in range(20)]
    results = {}
    for auto in (False, True):
        mge.config.auto_jit = auto
        w = mge.Parameter(r.standard_normal((4, 4)).astype("float32") if not auto else results["w"])
        results.setdefault("w", w.numpy())
        gm = GradManager().attach([w])
        results[auto] = [_head_losses(*b, w, gm) for b in batches[:6]]
        before = auto_jit_stats()["compiled"]
        _autojit.reset_auto_jit_stats()
        results[auto] += [_head_losses(*b, w, gm) for b in batches[6:]]
        if auto:
            stats = auto_jit_stats()
            assert stats["compiled"] == 0
            # (one cluster a step, cut where the loss is read: no count read for a shape check -- linear's last axis,
            # cross_entropy's labels against its logits)
            assert [(n, "float(loss.item())" in where) for n, _, where in stats["cuts"]] == [(14, True)]
    mge.config.auto_jit = False
    _same(results[False], results[True], "head losses")
    assert len({int((b[0][:, 0] > 0).sum()) for b in batches[6:]}) > 4


def _reordered(xa, ma, descending):
    """A selection's rows sorted, gathered by their order, sliced and concatenated along the rows (an FPN pooler's
    ``concat(pooled)[argsort(concat(inds))][:-4]``, OHEM's ``topk(loss[m], k)``), with a gradient through each."""
    x = mge.Parameter(xa)
    gm = GradManager().attach([x])
    with gm:
        y = x[mge.Tensor(ma)] * 2
        s, i = F.sort(y[:, 0], descending=descending)
        g = y[F.argsort(y[:, 1])]
        c = F.concat([g[:-1], y[1:], y[:2]])
        t, ti = F.topk(y[:, 2], 2, descending=descending)
        loss = (s[:3] * s[:3]).sum() + (g[1:] * c[:1].sum()).sum() + (c * 0.5).sum() + (g[-2:] ** 2).sum() \
            + (t * 3).sum()
        gm.backward(loss)
    return [loss.numpy(), x.grad.numpy(), s.numpy(), i.numpy(), g.numpy(), c.numpy(), tuple(c.shape), t.numpy(),
            ti.numpy()]


@pytest.mark.parametrize("descending", [False, True])
def test_a_selections_rows_sorted_gathered_sliced_and_concatenated_keep_their_clusters(fresh_auto_jit, descending):
    # sorted, gathered by their order, sliced and concatenated in place (``_padded._in_place``): eager's values and
    # gradients for every count (none, one, all, ties), and no read of the count -- one cluster a step, compiled once
    counts = [3, 5, 0, 6, 1, 4, 2, 6, 3]
    compiled = None
    for step, count in enumerate(counts):
        xa, ma, _ = _inputs(step, count)
        xa[:, 0] = np.round(xa[:, 0])  # (ties among the sorted values)
        mge.config.auto_jit = False
        want = _reordered(xa, ma, descending)
        mge.config.auto_jit = True
        got = _reordered(xa, ma, descending)
        _autojit.step_boundary()
        mge.config.auto_jit = False
        _same(want, got, f"step {step}, count {count}")
        if step == 4:
            compiled = auto_jit_stats()["compiled"]
    assert auto_jit_stats()["compiled"] == compiled
    assert not [c for c in auto_jit_stats()["cuts"] if any(w in c[2] for w in ("sort", "concat", "topk"))], \
        auto_jit_stats()["cuts"]


def _fpn_pooler(fms, rois, gm):
    """Faster R-CNN's pooler as the zoo writes it (``test_megengine_parity_zoo``): each RoI pooled at the level its
    size selects, the rows put back in RoI order, the placeholders' rows dropped; a loss on them, its gradient."""
    from test_megengine_parity_zoo import fpn_pool
    with gm:
        out = fpn_pool(fms, rois, [4, 8, 16, 32], (3, 3))
        loss = (F.flatten(out, 1) * F.arange(out.shape[1] * 9, dtype="float32") / 100).sum()
        gm.backward(loss)
    out = [loss.numpy(), out.numpy()] + [f.grad.numpy() for f in fms]
    for f in fms:
        f.grad = None
    return out


def _levels(rois):
    area = (rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2])
    return np.clip(np.floor(4 + np.log2(np.sqrt(area) / 224)), 2, 5).astype(int) - 2


def test_an_fpn_poolers_rows_are_pooled_in_place_once_their_counts_are_read(fresh_auto_jit):
    # each level's rois gathered into a bucket of their count (``pad_compact``: roi_align costs per row), the pooled
    # rows concatenated, put back in order and sliced in place: eager's values and gradients, the level counts read
    # once a step (a cut: the rest of the step one cluster), its executables one per combination of buckets
    r = np.random.RandomState(0)
    fms = [mge.Parameter(r.standard_normal((1, 2, 128 // s, 128 // s)).astype("float32")) for s in [4, 8, 16, 32]]
    gm = GradManager().attach(fms)
    steps = []
    for _ in range(5):
        xy, wh = r.uniform(0, 100, (24, 2)), np.exp(r.uniform(np.log(8), np.log(700), (24, 2)))
        steps.append(np.concatenate([np.zeros((24, 1)), xy, xy + wh], 1).astype("float32"))
    steps *= 3  # (a key compiles when it recurs: by the third pass, every one has)
    want = [_fpn_pooler(fms, mge.tensor(rois), gm) for rois in steps]
    mge.config.auto_jit = True
    got = [_fpn_pooler(fms, mge.tensor(rois), gm) for rois in steps[:10]]
    compiled, clusters = auto_jit_stats()["compiled"], auto_jit_stats()["clusters"]
    got += [_fpn_pooler(fms, mge.tensor(rois), gm) for rois in steps[10:]]
    stats = auto_jit_stats()
    mge.config.auto_jit = False
    _same(want, got, "pooler", rtol=1e-5)
    assert len({tuple(np.bincount(_levels(rois), minlength=4)) for rois in steps}) > 3  # (the level counts change)
    assert stats["compiled"] == compiled, stats
    assert stats["clusters"] - clusters <= 2 * 5, stats  # (the counts' read, the loss's)
    kinds = {o[0].name for key in _autojit._cache for o in key[0]}
    assert {"pad_compact", "pad_sort", "pad_locate", "pad_head"} <= kinds, kinds


def test_a_concatenation_of_selections_raises_eagers_error(fresh_auto_jit):
    xa, ma, _ = _inputs(0, 4)

    def bad():
        x = mge.Tensor(xa)
        y = x[mge.Tensor(ma)]
        return F.concat([y, y[:, :2]])

    mge.config.auto_jit = False
    with pytest.raises(Exception) as eager:
        bad()
    mge.config.auto_jit = True
    with pytest.raises(Exception) as auto:
        bad()
    mge.config.auto_jit = False
    assert type(auto.value) is type(eager.value) and str(auto.value) == str(eager.value)


def test_too_many_ints_raise_eagers_error_under_auto_jit(fresh_auto_jit):
    # (the prefix finder looked at an axis past the last: a bare "tuple index out of range")
    x = np.zeros((2, 3, 4), "float32")
    errors = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        with pytest.raises(IndexError) as bad:
            mge.Tensor(x)[0, 0, 0, 0]
        errors.append((type(bad.value), str(bad.value)))
    mge.config.auto_jit = False
    assert errors[0] == errors[1]


def _per_image_boxes_step(boxes, anchors, w, gm, opt):
    """A detector's targets from each image's boxes, given as an array of their own count (a data loader's list),
    made Tensors every step at one line: IoU with the anchors, the best box per anchor and its class."""
    a = mge.Tensor(anchors)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    with gm:
        total = 0
        for i, b in enumerate(boxes):
            gt = mge.Tensor(b)
            lo = F.maximum(F.expand_dims(gt[:, :2], 1), a[:, :2])
            hi = F.minimum(F.expand_dims(gt[:, 2:4], 1), a[:, 2:])
            inter = F.prod(F.maximum(hi - lo, 0), axis=2)
            iou = inter / (F.prod(gt[:, 2:4] - gt[:, :2], axis=1, keepdims=True) + area_a - inter)
            best, match = F.max(iou, axis=0), F.argmax(iou, axis=0)
            cls = gt[match][:, 4]
            total = total + ((best * w) ** 2).sum() + (cls * best * w).mean() + (gt[:, :4] * w[i]).sum()
        gm.backward(total)
    padded = type(gt._data) is _autojit.Lazy and gt._data.pad is not None and gt._data.raw_shape[0] == 8
    out = [float(total.item()), w.grad.numpy(), tuple(gt.shape), gt.numpy(), match.numpy()]
    opt.step().clear_grad()
    return out, padded


def _boxes(r, count):
    xy = r.uniform(0, 12, (count, 2))
    return np.concatenate([xy, xy + r.uniform(2, 8, (count, 2)), r.randint(1, 4, (count, 1))], 1).astype("float32")


def test_per_image_box_arrays_of_changing_counts_are_kept_padded(fresh_auto_jit):
    # ``Tensor(boxes_of_image_i)``, a new count each time: after its line has made 3 counts in 3 steps, its arrays
    # are the first rows of 8 (16, ...) -- so the clusters keep their shapes (before: one per pair of counts)
    r = np.random.RandomState(2)
    anchors = _boxes(r, 20)[:, :4]
    batches = [[_boxes(r, r.randint(1, 8)) for _ in range(2)] for _ in range(30)]
    results = {}
    for auto in (False, True):
        mge.config.auto_jit = auto
        w = mge.Parameter(np.linspace(0.5, 1.5, 20).astype("float32"))
        gm, opt = GradManager().attach([w]), mge.optimizer.SGD([w], lr=1e-3)
        results[auto] = [_per_image_boxes_step(b, anchors, w, gm, opt)[0] for b in batches[:14]]
        _autojit.reset_auto_jit_stats()
        for b in batches[14:]:
            out, padded = _per_image_boxes_step(b, anchors, w, gm, opt)
            results[auto].append(out)
            assert padded == auto
        if auto:
            assert auto_jit_stats()["compiled"] <= 1, auto_jit_stats()["changes"]
    mge.config.auto_jit = False
    _same(results[False], results[True], "per-image boxes")
    assert len({len(b[0]) for b in batches[14:]}) > 4


def test_arrays_of_the_same_counts_each_step_are_not_padded(fresh_auto_jit):
    # (an FPN level's anchors, made at one line every step, or a model's buffers: not a data set's changing counts)
    mge.config.auto_jit = True
    r = np.random.RandomState(0)
    for step in range(6):
        same = [mge.Tensor(np.ones((n, 2), "float32")) for n in (3, 5, 7, 9)]
        counts = r.randint(1, 6, 3)
        changing = [mge.Tensor(np.full((n, 2), n, "float32")) for n in counts]
        assert all(type(t._data) is not _autojit.Lazy for t in same)
        _autojit.step_boundary()
    mge.config.auto_jit = False
    # (the line whose counts change from step to step: padded by now, and read as eager's)
    assert any(type(t._data) is _autojit.Lazy for t in changing)
    for n, t in zip(counts, changing):
        assert tuple(t.shape) == (n, 2) and t.numpy().tolist() == [[n, n]] * n
        with pytest.raises(IndexError):
            t[n]


@pytest.mark.parametrize("case", ["uint8 - int", "full uint8 -1", "int8 + 1", "arange int8", "cross_entropy int8",
                                  "int8 + 1 then int32", "uint32 - 1", "setitem full uint8 -1"])
def test_an_index_that_wrapped_in_its_narrow_type_raises_eagers_error(fresh_auto_jit, case):
    # A pending index's known range is Python arithmetic on its source's: where the index's type cannot hold that
    # range its values wrapped (uint8 5 - 10 is 251), and the check must read them -- it once passed on the
    # unwrapped range and gave a clamped row, a dropped write, a finite loss
    make = {
        "uint8 - int": lambda x: x[mge.Tensor([5], dtype="uint8") - 10],
        "full uint8 -1": lambda x: x[F.full((1,), -1, dtype="uint8")],
        "int8 + 1": lambda x: F.one_hot(mge.Tensor([127], dtype="int8") + 1, 200),
        "arange int8": lambda x: F.one_hot(F.arange(126, 130, dtype="int8"), 200),
        "cross_entropy int8": lambda x: F.nn.cross_entropy(F.zeros((2, 200)), mge.Tensor([127, 3], dtype="int8") + 1),
        "int8 + 1 then int32": lambda x: F.one_hot((mge.Tensor([127], dtype="int8") + 1).astype("int32"), 200),
        "uint32 - 1": lambda x: x[mge.Tensor([0, 3], dtype="uint32") - 1],
        "setitem full uint8 -1": lambda x: x.__setitem__(F.full((1,), -1, dtype="uint8"), 5.0),
    }[case]
    errors, after = [], []
    for auto in (False, True, True, True):  # (again and again: the compiled path too)
        mge.config.auto_jit = auto
        x = mge.Tensor(np.arange(10, dtype="float32")) * 1.0
        with pytest.raises(IndexOutOfRange) as e:
            make(x)
        errors.append(str(e.value))
        after.append(x.numpy())
    mge.config.auto_jit = False
    assert len(set(errors)) == 1, errors
    for a in after:
        np.testing.assert_array_equal(a, np.arange(10, dtype="float32"))


def _zoo_labels(gt, score, column=4, classes=4):
    """FCOS's and ATSS's targets: each point's matched box (``gt[match]``, a pending gather), its class from the
    box's label column -- the other columns are coordinates, up to 63 --, one-hot targets indexed by it."""
    match = F.argmax(score, axis=0)
    labels = gt[match][:, column].astype("int32")
    labels[F.max(score, axis=0) < 1] = 0
    fg = labels > 0
    t = F.zeros((score.shape[1], classes))
    t[fg, labels[fg] - 1] = 1
    return t.sum(axis=0).numpy(), labels.numpy()


def _zoo_boxes(seed, label=None):
    r = np.random.RandomState(seed)
    gt = np.concatenate([r.uniform(0, 63, (3, 4)), r.randint(1, 5, (3, 1))], 1).astype("float32")
    if label is not None:
        gt[1, 4] = label
    return mge.Tensor(gt), mge.Tensor(r.standard_normal((3, 40)).astype("float32")) * 2


def test_a_label_column_of_matched_boxes_is_checked_by_its_own_range(fresh_auto_jit):
    # ``gt[match][:, 4]``: rows of the boxes, then their label column -- its range, 1..4, not the coordinates' too
    # (which cut the cluster at ``t[fg, labels[fg] - 1] = 1`` at every step of the zoo's FCOS and ATSS)
    mge.config.auto_jit = True
    for step in range(4):
        gt, score = _zoo_boxes(step)
        mge.config.auto_jit = False
        want = _zoo_labels(gt, score)
        mge.config.auto_jit = True
        _autojit.reset_auto_jit_stats()
        got = _zoo_labels(gt, score)
        cuts = auto_jit_stats()["cuts"]
        _same(want, got, f"step {step}")
        assert [c for c in cuts if "t[fg" in c[2]] == [], cuts
    mge.config.auto_jit = False


@pytest.mark.parametrize("column, label", [(4, 7), (3, None), (2, None)])
def test_a_label_column_out_of_range_still_raises_eagers_error(fresh_auto_jit, column, label):
    # a label past the classes in the label column, or a coordinate column taken as labels: eager's error
    errors = []
    for auto in (False, True, True):
        mge.config.auto_jit = auto
        gt, score = _zoo_boxes(0, label)
        with pytest.raises(IndexOutOfRange) as e:
            _zoo_labels(gt, score * 9, column)  # (every point a foreground one)
        errors.append(str(e.value))
    mge.config.auto_jit = False
    assert len(set(errors)) == 1, errors


def _pairs(w, shift=0):
    """FreeAnchor's (box, anchor) pairs: ``cond_take``'s positions in a (boxes, anchors) matrix split by ``//`` and
    ``%``, then each pair's entry (and its gradient)."""
    gm = GradManager().attach([w])
    with gm:
        p = F.relu(F.broadcast_to(w.reshape(1, 20), (3, 20)) * F.arange(1, 4).reshape(3, 1) - 0.5)
        _, nz = F.cond_take(p != 0, p)
        picked = p[nz // 20 + shift, nz % 20]
        loss = (picked * picked).sum()
        gm.backward(loss)
    return loss.numpy(), w.grad.numpy(), picked.numpy()


def test_positions_split_by_floor_div_and_mod_index_without_a_cut(fresh_auto_jit):
    r = np.random.RandomState(0)
    for step in range(4):
        wa = r.standard_normal(20).astype("float32")
        mge.config.auto_jit = False
        want = _pairs(mge.Parameter(wa))
        mge.config.auto_jit = True
        _autojit.reset_auto_jit_stats()
        got = _pairs(mge.Parameter(wa))
        cuts = auto_jit_stats()["cuts"]
        _same(want, got, f"step {step}")
        assert [c for c in cuts if "picked = p[" in c[2]] == [], cuts
    errors = []
    for auto in (False, True):  # (rows 1..3 of 3: the known range says so, the values are read, eager's error)
        mge.config.auto_jit = auto
        with pytest.raises(IndexOutOfRange) as e:
            _pairs(mge.Parameter(np.ones(20, "float32")), shift=1)
        errors.append(str(e.value))
    mge.config.auto_jit = False
    assert errors[0] == errors[1]


def test_a_count_made_many_ops_before_its_shape_is_asked_is_peeked(fresh_auto_jit):
    # ATSS asks ``ious.shape`` of an image's boxes ``gt[b, :num[b]]`` after the head's levels: hundreds of ops after
    # the count was made (past the 256 ops peek once looked back)
    info = np.array([[64, 64, 3], [64, 64, 5]], "float32")
    boxes = np.random.RandomState(0).uniform(0, 63, (2, 5, 4)).astype("float32")

    def step():
        nums = mge.Tensor(info)[:, 2].astype("int32")
        x = mge.Tensor(np.linspace(0, 1, 8, dtype="float32"))
        for _ in range(300):
            x = x * 1.0001
        gt = mge.Tensor(boxes)[1, :nums[1]]
        ious = F.expand_dims(gt[:, 0], 1) * F.expand_dims(x, 0)
        total = (F.zeros(ious.shape) + ious).sum()
        return total.numpy()
    mge.config.auto_jit = False
    want = step()
    mge.config.auto_jit = True
    for _ in range(3):
        _autojit.reset_auto_jit_stats()
        _same(want, step(), "sum")
        assert [c for c in auto_jit_stats()["cuts"] if "F.zeros(ious.shape)" in c[2]] == []
    mge.config.auto_jit = False


def _bag_scores(info, boxes, scores):
    """FreeAnchor's bags: an image's boxes cut to its count (``gt[b, :info[b, 4]]``: the rows after it are a data
    set's zero padding), their classes -- column 4, minus 1 -- picked from each box's scores."""
    out = []
    for b in range(2):
        gt = boxes[b, :info[b, 4].astype("int32")]
        labels = gt[:, 4].astype("int32") - 1
        n = gt.shape[0]
        idx = F.broadcast_to(labels.reshape(-1, 1), (n, 3))
        src = F.broadcast_to(F.expand_dims(scores[b], 0), (n, 3, 4)) * F.expand_dims(gt[:, 0:1], 2)
        out.append(F.indexing_one_hot(src, idx, axis=2).sum())
    return F.stack(out).numpy()


def _bag_boxes(seed, bad=None):
    r = np.random.RandomState(seed)
    counts = r.randint(1, 5, 2)
    boxes = np.zeros((2, 5, 5), "float32")  # (zero rows after each image's count: label 0, index -1)
    for b, n in enumerate(counts):
        boxes[b, :n, :4] = r.uniform(0, 63, (n, 4))
        boxes[b, :n, 4] = r.randint(1, 5, n)
    if bad is not None:
        boxes[0, bad, 4] = 0
    info = np.concatenate([np.full((2, 4), 64.0), counts[:, None]], 1).astype("float32")
    return mge.Tensor(info), mge.Tensor(boxes), mge.Tensor(r.standard_normal((2, 3, 4)).astype("float32"))


def test_labels_of_boxes_cut_to_their_count_are_checked_by_the_counted_rows(fresh_auto_jit):
    for step in range(4):
        args = _bag_boxes(step)
        mge.config.auto_jit = False
        want = _bag_scores(*args)
        mge.config.auto_jit = True
        _autojit.reset_auto_jit_stats()
        got = _bag_scores(*args)
        cuts = auto_jit_stats()["cuts"]
        _same(want, got, f"step {step}")
        assert [c for c in cuts if "indexing_one_hot" in c[2]] == [], cuts
    errors = []
    for auto in (False, True, True):  # (a counted box labelled 0: eager's error)
        mge.config.auto_jit = auto
        with pytest.raises(IndexOutOfRange) as e:
            _bag_scores(*_bag_boxes(0, bad=0))
        errors.append(str(e.value))
    mge.config.auto_jit = False
    assert len(set(errors)) == 1, errors


_T, _I32 = mge.Tensor, lambda v: mge.Tensor(np.int32(v))
# each gives [99] (or a row holding 99) where its known range, read wrongly, would say otherwise
_NOT_THE_FIRST_ROWS = {
    "a[1:][:n]": lambda: _T(np.array([0, 99, 0], np.int32))[1:][:_I32(1)],
    "a[::-1][:n]": lambda: _T(np.array([0, 0, 99], np.int32))[::-1][:_I32(1)],
    "a[idx][:n]": lambda: _T(np.array([0, 99, 0], np.int32))[_T(np.array([1, 0], np.int32))][:_I32(1)],
    "sort(a)[:n]": lambda: F.sort(_T(np.array([[0, 99]], np.int32))[0], descending=True)[0][:_I32(1)],
    "a[mask][0]": lambda: _T(np.array([[0, 1], [99, 1], [0, 1]], np.int32))[_T(np.array([False, True, False]))][0][:1],
    "a[:n][-1]": lambda: _T(np.array([[0, 1], [99, 1], [0, 1]], np.int32))[:_I32(2)][-1][:1],
    "sort(a[idx])[:, 0]": lambda: F.sort(_T(np.array([[0, 99], [1, 2]], np.int32))[_T(np.array([0, 1], np.int32))],
                                         descending=True)[0][:, 0],
    "topk(a[idx])[:, 0]": lambda: F.topk(_T(np.array([[0, 99], [1, 2]], np.int32))[_T(np.array([0, 1], np.int32))],
                                         1, descending=True)[0][:, 0],
}


@pytest.mark.parametrize("case", sorted(_NOT_THE_FIRST_ROWS))
def test_rows_that_are_not_the_arrays_first_rows_are_not_bounded_as_if(fresh_auto_jit, case):
    # ``Columns`` bounds a value by rows of an array; only a value whose row i is the array's row i may take a
    # prefix's head, and a sort reorders each row's entries (found by an adversarial probe: auto-jit gave 0. or an
    # all-zero one-hot where eager raised)
    errors = []
    for auto in (False, True, True, True):
        mge.config.auto_jit = auto
        with pytest.raises(IndexOutOfRange) as e:
            _T(np.zeros(10, np.float32))[_NOT_THE_FIRST_ROWS[case]()].numpy()
        errors.append(str(e.value))
    mge.config.auto_jit = False
    assert len(set(errors)) == 1, errors


@pytest.mark.parametrize("case", ["a[t0:t2]", "a[:t2:t1]", "a[mask][:t2]", "a[:t3][:t2]"])
def test_slices_with_tensor_bounds_index_under_auto_jit(fresh_auto_jit, case):
    # (``slice == slice`` compares bounds with ``==``: a Tensor bound made an elementwise op, then a TypeError)
    got = []
    for auto in (False, True, True, True):
        mge.config.auto_jit = auto
        a = _T(np.arange(12, dtype=np.int32).reshape(6, 2))
        got.append({"a[t0:t2]": lambda: a[_I32(0):_I32(2)], "a[:t2:t1]": lambda: a[:_I32(2):_I32(1)],
                    "a[mask][:t2]": lambda: a[_T(np.arange(6) > 2)][:_I32(2)],
                    "a[:t3][:t2]": lambda: a[:_I32(3)][:_I32(2)]}[case]().numpy().tolist())
    mge.config.auto_jit = False
    assert all(g == got[0] for g in got), got


def test_a_selections_rows_sliced_past_int32_give_eagers_rows(fresh_auto_jit):
    # (the slice's bounds reached the padded op as int32: ``y[:2**31]`` raised OverflowError under auto-jit)
    got = []
    for auto in (False, True, True):
        mge.config.auto_jit = auto
        x = _T(np.arange(10, dtype=np.float32).reshape(5, 2))
        m = _T(np.array([True, False, True, True, False]))
        got.append([x[m][:2 ** 31].numpy().tolist(), x[m][-2 ** 40:].numpy().tolist(),
                    x[:_I32(4)][1:2 ** 32 + 1].numpy().tolist()])
    mge.config.auto_jit = False
    assert got[1] == got[0] and got[2] == got[0], got


def test_a_batch_and_its_labels_made_on_one_line_are_kept_padded(fresh_auto_jit):
    # ``x, y = Tensor(a), Tensor(b)``: the line's two arrays (float rows of 6, int labels) were one site, each resetting
    # the other's counts, so neither was ever padded and every batch size was a new cluster (found by a probe)
    r = np.random.RandomState(4)
    batches = [(r.randn(n, 6).astype("float32"), r.randint(0, 3, n).astype("int32"))
               for n in r.randint(3, 30, 24)]
    results = {}
    for auto in (False, True):
        mge.config.auto_jit = auto
        mge.random.seed(0)
        model = mge.module.Linear(6, 3)
        gm = GradManager().attach(model.parameters())
        opt = mge.optimizer.SGD(model.parameters(), lr=0.1)
        results[auto], padded = [], []
        for a, b in batches:
            x, y = mge.Tensor(a), mge.Tensor(b)
            padded.append(all(type(t._data) is _autojit.Lazy and t._data.pad is not None for t in (x, y)))
            with gm:
                loss = F.nn.cross_entropy(model(x), y)
                gm.backward(loss)
            opt.step().clear_grad()
            results[auto].append(float(loss.item()))
        results[auto].append(model.weight.numpy())
        assert all(padded[12:]) == auto
    mge.config.auto_jit = False
    _same(results[False], results[True], "one line's batch and labels")


def test_a_line_making_training_and_evaluation_batches_keeps_the_training_batch_as_it_is(fresh_auto_jit):
    # basecls' Preprocess makes the training batches (8 rows) and, between epochs, the evaluation's (25, 25, 5) at one
    # line: with short epochs the line counted as a data set's changing counts, and its training batch became the
    # first 8 rows of 32 -- a new first op in the training step's cluster, compiled again (found by a probe)
    def tensors(n):
        return [mge.Tensor(a) for a in (r.randn(n, 6).astype("float32"), r.randint(0, 3, n).astype("int32"))]

    results = {}
    for auto in (False, True):
        mge.config.auto_jit = auto
        mge.random.seed(0)
        r = np.random.RandomState(5)
        model = mge.module.Linear(6, 3)
        gm = GradManager().attach(model.parameters())
        opt = mge.optimizer.SGD(model.parameters(), lr=0.1)
        results[auto], padded, compiled = [], [], []
        for epoch in range(6):
            for _ in range(3):
                x, y = tensors(8)
                padded.append(type(x._data) is _autojit.Lazy and x._data.pad is not None)
                with gm:
                    loss = F.nn.cross_entropy(model(x), y)
                    gm.backward(loss)
                opt.step().clear_grad()
                results[auto].append(float(loss.item()))
            for n in (25, 25, 5):
                x, y = tensors(n)
                results[auto].append(float((F.argmax(model(x), axis=1) == y).astype("float32").mean().item()))
            compiled.append(auto_jit_stats()["compiled"])
        results[auto].append(model.weight.numpy())
        assert not any(padded)
        if auto:
            assert compiled[-1] == compiled[2], compiled
    mge.config.auto_jit = False
    _same(results[False], results[True], "training and evaluation batches made at one line")


@pytest.mark.parametrize("kind", ["xla_trace", "trace", "symbolic"])
def test_a_selection_passed_to_a_trace_is_its_rows(fresh_auto_jit, kind):
    # a boolean selection computed under auto-jit keeps its padded Lazy (a later cluster takes its rows): a trace
    # given it failed with JAX's "Triggering __jax_array__() during abstractification" (also the random programs'
    # traced steps under MEGXLA_AUTO_JIT=1)
    from megxla.jit import trace, xla_trace
    mge.config.auto_jit = True
    x = mge.Tensor(np.arange(32, dtype="float32").reshape(8, 4)) * 1
    sel = x[mge.Tensor(np.array([1, 0, 1, 1, 0, 0, 1, 0], bool))]
    assert sel.numpy().shape == (4, 4)
    deco = {"xla_trace": xla_trace, "trace": trace, "symbolic": lambda f: trace(f, symbolic=True)}[kind]
    f = deco(lambda a: (a * 2).sum())
    got = [float(f(sel)) for _ in range(3)]
    mge.config.auto_jit = False
    assert got == [400.0] * 3


def test_an_index_made_from_a_padded_batch_is_checked_without_a_read(fresh_auto_jit):
    # A policy gradient's actions, a batch whose rows change every step (an episode's transitions) kept padded:
    # ``F.gather(logp, -1, actions)``'s index check found no range for the padded array's entries and read them on
    # the host -- a cut of the step at every call (MegRL's A2C, found by a probe). The padded array's entries are the
    # batch's, its extra rows repeating the first.
    r = np.random.RandomState(4)
    batches = [(r.randn(n, 4).astype("float32"), r.randint(0, 2, n).astype("int32"), r.randn(n).astype("float32"))
               for n in r.randint(20, 40, 24)]
    results = {}
    for auto in (False, True):
        mge.config.auto_jit = auto
        reset_auto_jit_stats()
        mge.random.seed(0)
        model = mge.module.Linear(4, 2)
        gm = GradManager().attach(model.parameters())
        opt = mge.optimizer.Adam(model.parameters(), lr=0.01)
        results[auto] = []
        for obs, act, adv in batches:
            with gm:
                logp = F.logsoftmax(model(mge.Tensor(obs)), axis=1)
                a = F.expand_dims(mge.Tensor(act), axis=-1)  # (as MegRL's Categorical.log_prob)
                a = F.broadcast_to(a, (a.shape[0], logp.shape[1]))[..., :1]
                loss = -(F.squeeze(F.gather(logp, -1, a), axis=-1) * mge.Tensor(adv)).mean()
                gm.backward(loss)
            opt.step().clear_grad()
            results[auto].append(float(loss.item()))
        results[auto].append(model.weight.numpy())
    reads = [c for c in auto_jit_stats()["cuts"] if c[1] == "host read"]
    mge.config.auto_jit = False
    _same(results[False], results[True], "a gather by a padded batch's actions")
    assert not reads, reads


def _adaptive_pool(x, o):
    """PSPNet's torch-style adaptive average pooling: window bounds from a float ``arange`` (pooling.py), read on
    the host as slice bounds."""
    n = x.shape[-1]
    s = (F.arange(o, dtype="float32") * (n / o)).astype("int32")
    e = F.ceil((F.arange(o, dtype="float32") + 1) * (n / o)).astype("int32")
    return F.stack([F.mean(x[:, s[i]:e[i]], axis=1) for i in range(o)], -1)


def test_float_arithmetic_read_on_the_host_is_peeked_and_pinned(fresh_auto_jit):
    # a value of rounded float ops (a division XLA may make a multiplication by the reciprocal) read on the host is
    # computed by its eager kernels without cutting the cluster, and the cluster then takes the value read: the
    # host, the Tensor and the ops on it see one number, eager's
    r = np.random.RandomState(0)
    x = mge.Tensor(r.standard_normal((3, 14)).astype("float32"))

    def step():
        y = F.relu(x * 1.5 - 0.25)
        q = (F.arange(7, dtype="float32") + 0.1) / 3.0
        read = [float(q[k]) for k in range(7)]  # (each peeked: rounded float ops on constants)
        # (the cluster's arange, add and division are now copies of the values read, inputs of the cluster)
        pinned = sum(rec[0] is _autojit._PINNED for rec in _autojit._local.cluster.ops)
        out = _adaptive_pool(y, 3) * q[:3]
        return read, q.numpy(), out.numpy(), pinned
    mge.config.auto_jit = False
    want = step()
    mge.config.auto_jit = True
    for _ in range(3):
        _autojit.reset_auto_jit_stats()
        got = step()
        # (eager's numbers to the bit: the division the host read is pinned, the same array in the cluster's ops)
        assert got[0] == want[0] and np.array_equal(got[1], want[1]), (got[:2], want[:2])
        _same(want[2], got[2], "pooled")
        assert got[3] == 3, got[3]
        stats = auto_jit_stats()
        assert [c for c in stats["cuts"] if c[1] == "host read" and "q[k]" in c[2] or "s[i]" in c[2]] == [], stats
        assert stats["peeks"] >= 7 + 6, stats
    mge.config.auto_jit = False


@pytest.mark.parametrize("negative", [False, True])
def test_a_padded_batchs_rows_gathered_by_a_selection_are_collected_without_a_count(fresh_auto_jit, negative):
    # OTA's per-image assignment (CV51GO/OTA_Megengine with the official OTA loss, found by a probe): each image's
    # 1-6 boxes' classes, a host array kept padded to a few sizes, gathered by the matched box of each foreground
    # anchor -- ``gt_cls[matched[fg]]`` -- read the foreground count at every step: a cut, and a cluster whose key held
    # the count. Now gathered on the padded rows, negative positions counted from the batch's own rows, as eagerly.
    r = np.random.RandomState(5)
    batches = []
    for n in r.randint(1, 7, 24):
        cls, boxes = r.randint(0, 80, n).astype("int32"), r.rand(n, 8, 4).astype("float32")
        batches.append((cls, boxes, r.randint(0, n + 1, 8).astype("int32")))
    results = {}
    for auto in (False, True):
        mge.config.auto_jit = auto
        reset_auto_jit_stats()
        w = mge.Parameter(np.linspace(-1, 1, 32).reshape(8, 4).astype("float32"))
        gm = GradManager().attach([w])
        opt = optim.SGD([w], lr=0.01)
        results[auto] = []
        for cls, boxes, match in batches:
            n = len(cls)
            with gm:
                gt_cls, gt_box = mge.Tensor(cls), mge.Tensor(boxes)
                matched = mge.Tensor(match) + (w.sum(1) * 0).astype("int32")  # (made on the device)
                fg = matched != n
                at = matched[fg] - n if negative else matched[fg]  # (n - 1 .. 0, or -1 .. -n)
                labels = F.ones(8, dtype="int32") * 80
                labels[fg] = gt_cls[at]
                target = F.zeros((8, 4))
                target[fg] = gt_box[at, F.arange(8, dtype="int32")[fg]]
                m = labels != 80
                loss = ((w[m] - target[m]) ** 2).sum() + labels.astype("float32").sum() * 1e-3
                gm.backward(loss)
            opt.step().clear_grad()
            results[auto].append(float(loss.item()))
        results[auto].append(w.numpy())
    reads = [c for c in auto_jit_stats()["cuts"] if c[1] == "host read" and "gt_cls[at]" in c[2]]
    mge.config.auto_jit = False
    _same(results[False], results[True], "a padded batch's rows gathered by a selection")
    assert sum(n for n, _, _ in reads) <= 1, reads  # (the line's first index check, read on the host as eagerly)


def _copied_boxes_step(boxes, anchors, w, gm, opt):
    """basedet's ``Boxes(gt_boxes[:, :4]).iou(...)``: each image's boxes (a data set's changing count) and a selection
    of its anchors copied into new Tensors (``Tensor(t)``, ``F.copy``, ``detach``) before their IoU and losses."""
    a = mge.Tensor(anchors)
    with gm:
        total = 0
        for i, b in enumerate(boxes):
            gt = mge.Tensor(mge.Tensor(b)[:, :4])
            lo = F.maximum(F.expand_dims(gt[:, :2], 1), a[:, :2])
            hi = F.minimum(F.expand_dims(gt[:, 2:], 1), a[:, 2:])
            inter = F.prod(F.maximum(hi - lo, 0), axis=2) * w
            fg = F.copy(mge.Tensor(inter.max(axis=0)[inter.max(axis=0) > 0.5]))
            total = total + (inter ** 2).sum() + (fg * 2).sum() + F.copy(gt * w[i]).sum() + (gt.detach() * w[i]).sum()
        gm.backward(total)
    out = [float(total.item()), w.grad.numpy(), tuple(gt.shape), tuple(fg.shape)]
    opt.step().clear_grad()
    return out


def _boxes_steps_both_ways(step, seed):
    """{auto-jit on?: results of ``step`` over 24 batches of 2 images with 1-7 boxes each}, eagerly and under
    auto-jit; under auto-jit its last 12 steps compile at most once, every cluster from the cache after that."""
    r = np.random.RandomState(seed)
    anchors = _boxes(r, 20)[:, :4]
    batches = [[_boxes(r, r.randint(1, 8)) for _ in range(2)] for _ in range(24)]
    results = {}
    for auto in (False, True):
        mge.config.auto_jit = auto
        w = mge.Parameter(np.linspace(0.5, 1.5, 20).astype("float32"))
        gm, opt = GradManager().attach([w]), mge.optimizer.SGD([w], lr=1e-3)
        results[auto] = [step(b, anchors, w, gm, opt) for b in batches[:12]]
        _autojit.reset_auto_jit_stats()
        results[auto] += [step(b, anchors, w, gm, opt) for b in batches[12:]]
        if auto:
            stats = auto_jit_stats()
            assert stats["compiled"] <= 1 and not stats["changes"] and stats["cache_hits"] >= 12, stats["changes"]
    mge.config.auto_jit = False
    return results


def test_copies_of_selections_and_box_arrays_keep_their_clusters(fresh_auto_jit):
    # ``Tensor(x)`` / ``F.copy(x)`` / ``x.detach()`` of padded rows is row by row: before, the copy ran on the
    # selection itself, its count read and its cluster keyed by it -- basedet's RetinaNet compiled its step again for
    # every box count
    results = _boxes_steps_both_ways(_copied_boxes_step, 3)
    _same(results[False], results[True], "copied boxes")
    assert len({out[3] for out in results[False][12:]}) > 3


def _tensor_indexed_boxes_step(boxes, anchors, w, gm, opt):
    """basedet's IoU subgraph: each image's boxes (a data set's changing count) indexed along their columns by index
    tensors (``Subtensor`` with a 0-d ``idx``: ``b[:, :, c(0)]``; ``b[:, 0, ks]``), then their IoU with the anchors."""
    a = mge.Tensor(anchors)
    cols = [mge.tensor(k, dtype="int32") for k in range(4)]
    with gm:
        total = 0
        for i, b in enumerate(boxes):
            gt = F.expand_dims(mge.Tensor(b) * w[i], 1)
            x0, y0, x1, y1 = [gt[:, :, c] for c in cols]
            iw = F.maximum(F.minimum(x1, a[:, 2]) - F.maximum(x0, a[:, 0]), 0)
            ih = F.maximum(F.minimum(y1, a[:, 3]) - F.maximum(y0, a[:, 1]), 0)
            wh = gt[:, 0, mge.tensor([2, 3])] - gt[:, 0, mge.tensor([0, 1])]
            total = total + (iw * ih * w).sum() + (wh ** 2).sum()
        gm.backward(total)
    out = [float(total.item()), w.grad.numpy(), tuple(x0.shape), tuple(wh.shape)]
    opt.step().clear_grad()
    return out


def test_box_columns_taken_by_index_tensors_keep_their_clusters(fresh_auto_jit):
    # ``x[:, :, t]`` on padded rows, ``t`` an index tensor of another axis, is row by row: before, it ran on the rows
    # themselves, their count read and the cluster keyed by it -- basedet's RetinaNet compiled its step again for
    # every box count
    results = _boxes_steps_both_ways(_tensor_indexed_boxes_step, 4)
    _same(results[False], results[True], "tensor-indexed boxes")
    assert len({out[2] for out in results[False][12:]}) > 3
