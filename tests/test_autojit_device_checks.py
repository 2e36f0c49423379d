"""Auto-jit: an index range check that held at its line is computed inside the cluster (jit/_device_checks.py)."""
from __future__ import annotations

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.core._indexing import IndexOutOfRange
from megxla.jit import _autojit, _device_checks, auto_jit_stats, reset_auto_jit_stats

from test_autojit_programs import _same, fresh_auto_jit  # noqa: F401

C, N = 6, 40


@pytest.fixture
def checks(fresh_auto_jit):  # noqa: F811
    _autojit._local.read_pause = None
    reset_auto_jit_stats()
    yield
    _device_checks._held.clear()


def _targets(logits, anchors, classes):
    """DeFCN's one-hot targets: each anchor's class (1..C, C + 1 the background), set where it is foreground."""
    gt_classes = F.full((N,), C + 1, dtype="int32")
    gt_classes[anchors] = classes
    fg = gt_classes != C + 1
    t = F.zeros_like(logits)
    t[fg, gt_classes[fg] - 1] = 1  # (the line checked)
    return t


def _step(lin, gm, opt, feat, anchors, classes):
    with gm:
        logits = lin(feat)
        t = _targets(logits, mge.Tensor(anchors), mge.Tensor(classes))
        loss = F.nn.binary_cross_entropy(logits, t, with_logits=True)
        gm.backward(loss)
    opt.step().clear_grad()
    return float(loss)


def _model():
    mge.random.seed(0)
    lin = M.Linear(8, C)
    gm = GradManager().attach(lin.parameters())
    opt = optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    return lin, gm, opt


def _batches(steps, bad_at=None):
    r = np.random.RandomState(0)
    out = []
    for s in range(steps):
        n = r.randint(2, 9)
        classes = r.randint(1, C + 1, n).astype("int32")
        if s == bad_at:
            classes[n // 2] = C + 2  # (one class past the last: an index C + 1 of C)
        out.append((r.choice(N, n, replace=False), classes))
    return out


def _state(lin, opt):
    return [p.numpy() for p in lin.parameters()] + [s.numpy() for g in opt._state.values() for s in g.values()]


def test_a_check_that_held_at_its_line_is_made_in_the_cluster_without_a_cut(checks):
    feat = mge.Tensor(np.random.RandomState(1).standard_normal((N, 8)).astype("float32"))
    results = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        reset_auto_jit_stats()
        lin, gm, opt = _model()
        results.append(([_step(lin, gm, opt, feat, a, c) for a, c in _batches(12)], _state(lin, opt)))
        stats = auto_jit_stats()
    mge.config.auto_jit = False
    _same(results[0], results[1], "losses and state")
    at_line = [c for c in stats["cuts"] if "t[fg," in c[2]]
    # (the first HELD_BEFORE steps read the index on the host, as eagerly; the others check it in the cluster)
    assert at_line == [(_device_checks.HELD_BEFORE, "host read", at_line[0][2])], stats["cuts"]
    assert stats["device_checks"] == 12 - _device_checks.HELD_BEFORE, stats


def test_an_index_out_of_range_after_its_checks_held_fails_the_cluster_as_eagerly(checks):
    # A step whose class is out of range after 6 good ones: eager raises at the line, auto-jit where the cluster
    # runs (the loss's read) -- the same error, a note naming the line -- and the step's update is undone: the
    # parameters and momentum are those eager leaves. The line is read on the host from then on: at its line again.
    feat = mge.Tensor(np.random.RandomState(1).standard_normal((N, 8)).astype("float32"))
    batches = _batches(8, bad_at=6)
    got = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        lin, gm, opt = _model()
        losses = [_step(lin, gm, opt, feat, a, c) for a, c in batches[:6]]
        with pytest.raises(IndexOutOfRange) as e:
            _step(lin, gm, opt, feat, *batches[6])
        got.append((losses, _state(lin, opt), str(e.value), getattr(e.value, "__notes__", [])))
        with pytest.raises(IndexOutOfRange) as again:
            with gm:
                _targets(lin(feat), mge.Tensor(batches[6][0]), mge.Tensor(batches[6][1]))
        assert any(entry.frame.code.name == "_targets" for entry in again.traceback)  # (_targets reads nothing)
        got[-1] += (_step(lin, gm, opt, feat, *batches[7]), _state(lin, opt))
    mge.config.auto_jit = False
    (l0, s0, e0, n0, m0, t0), (l1, s1, e1, n1, m1, t1) = got
    assert e0 == e1 and "out of range" in e0, (e0, e1)
    assert n0 == [] and len(n1) == 1 and "t[fg, gt_classes[fg] - 1] = 1" in n1[0], n1
    _same((l0, s0, m0, t0), (l1, s1, m1, t1), "before and after the error")


def _label_loss(net, x, u):
    # CrowdDet's softmax_loss: labels made on the device, -1 (ignored) masked to 0 before indexing_one_hot
    label = (u > 0.5).astype("float32") - (u < 0.1).astype("float32")
    pred = net(x)
    mask = 1 - F.equal(label, -1)
    vlabel = label * mask.astype("float32")
    logp = F.logsoftmax(pred, axis=1)
    loss = -(F.nn.indexing_one_hot(logp, vlabel.astype("int32"), 1).flatten() * mask)
    return loss.sum() / F.maximum(mask.sum(), 1)


def test_labels_made_on_the_device_are_checked_in_the_training_steps_cluster(checks):
    r = np.random.RandomState(0)
    x = mge.Tensor(r.standard_normal((64, 8)).astype("float32"))
    us = [mge.Tensor(r.uniform(0, 1, 64).astype("float32")) for _ in range(10)]
    results = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        reset_auto_jit_stats()
        mge.random.seed(0)
        net = M.Linear(8, 2)
        gm = GradManager().attach(net.parameters())
        opt = optim.SGD(net.parameters(), lr=0.1)
        losses = []
        for u in us:
            with gm:
                loss = _label_loss(net, x, u)
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(loss.numpy())
        results.append((losses, [p.numpy() for p in net.parameters()]))
        stats = auto_jit_stats()
    mge.config.auto_jit = False
    _same(results[0], results[1], "losses and parameters")
    # (the first check's read computes the labels by themselves -- a few ops of the step's inputs, peeked --: no cut)
    assert sum(c[0] for c in stats["cuts"] if c[1] == "host read") == 0, stats["cuts"]
    assert stats["device_checks"] == 10 - _device_checks.HELD_BEFORE


def test_a_value_made_after_a_check_is_not_peeked_past_it(checks):
    # a small value read while its cluster holds a failing check is not computed alone (a peek): the check's
    # error comes first, as eagerly
    x = mge.Tensor(np.arange(6, dtype="float32").reshape(2, 3))
    mge.config.auto_jit = True
    for shift in [0] * _device_checks.HELD_BEFORE + [1]:
        k = F.abs(F.argmax(x, axis=1)) + shift
        y = x[:, k]
        n = (k * 0).sum()  # (a small value of the cluster's inputs' exact ops: peekable)
        if shift:
            with pytest.raises(IndexOutOfRange):
                int(n)
        else:
            assert int(n) == 0 and y.numpy().shape == (2, 2)
    mge.config.auto_jit = False


def test_the_clusters_a_held_check_cuts_are_not_compiled(checks):
    # GFLv2's ATSS labels: the first step's check reads the index on the host and cuts the step in two; once the
    # check is inside the cluster, the step is one cluster of another key -- so the first step's parts are not
    # compiled at first sight (their keys end there), and the whole step compiles once
    r = np.random.RandomState(0)
    xs = [mge.Tensor(r.standard_normal((2, 3, 8, 8)).astype("float32")) for _ in range(6)]
    gs = [mge.Tensor(r.uniform(0, 4, (2, 1, 8, 8)).astype("float32")) for _ in range(6)]
    results = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        _autojit._sites.clear()
        mge.random.seed(0)
        net = M.Sequential(M.Conv2d(3, 8, 3, padding=1), M.BatchNorm2d(8), M.ReLU(), M.Conv2d(8, 5, 1))
        gm = GradManager().attach(net.parameters())
        opt = optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        losses = []
        for x, g in zip(xs, gs):
            with gm:
                logits = F.transpose(net(x), (0, 2, 3, 1)).reshape(-1, 5)
                label = F.floor(F.clip(g + F.tanh(logits[:, :1]).reshape(2, 1, 8, 8) * 0, 0, 3.9)).reshape(-1)
                lse = F.logsumexp(logits, axis=1)
                loss = (lse - F.nn.indexing_one_hot(logits, label.astype("int32").detach(), 1)).mean()  # (checked)
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(float(loss))
        results.append((losses, [p.numpy() for p in net.parameters()]))
    mge.config.auto_jit = False
    _same(results[0], results[1], "losses and parameters")
    compiled_at = {site[1]: st[2] for site, st in _autojit._sites.items() if st[2]}
    check_line = [s[1] for s in _autojit._sites if "indexing_one_hot" in s[2]]
    assert check_line and not any(compiled_at.get(line) for line in check_line), (compiled_at, check_line)
    assert sum(compiled_at.values()) == 1, compiled_at



@pytest.mark.parametrize("cleared_before_the_error", [False, True])
def test_a_failed_cluster_puts_back_the_gradients_cleared_after_its_error(checks, cleared_before_the_error):
    # Gradient accumulation: an update every second step. The step that fails (a class out of range, checked in the
    # cluster) also holds the update and its ``opt.clear_grad()``: eagerly the error came first, so the gradients
    # accumulated by the step before are still there -- under auto-jit too, not dropped by a ``clear_grad()``
    # collected after the failing op. One collected before it (the variant) dropped them eagerly too.
    feat = mge.Tensor(np.random.RandomState(1).standard_normal((N, 8)).astype("float32"))
    batches = _batches(8, bad_at=6)
    got = []
    for auto in (False, True):
        mge.config.auto_jit = auto
        lin, gm, opt = _model()
        for s, (a, c) in enumerate(batches[:7]):
            try:
                with gm:
                    logits = lin(feat)
                    if s == 6 and cleared_before_the_error:
                        opt.clear_grad()
                    t = _targets(logits, mge.Tensor(a), mge.Tensor(c))
                    loss = F.nn.binary_cross_entropy(logits, t, with_logits=True)
                    gm.backward(loss)
                if s % 2 == 0:
                    opt.step().clear_grad()
                float(loss)
            except IndexOutOfRange:
                assert s == 6
        grads = [None if p.grad is None else p.grad.numpy() for p in lin.parameters()]
        got.append((grads, _state(lin, opt)))
    mge.config.auto_jit = False
    assert all((g is None) == cleared_before_the_error for g in got[0][0]), got[0][0]
    _same(got[0], got[1], "gradients and state after the error")
