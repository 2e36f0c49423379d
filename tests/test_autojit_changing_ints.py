"""Python ints that change at one indexing line under auto-jit (``logp[0, action]`` with an action read on the host,
``x[t]`` and ``outs[t] = h`` over an RNN's time steps) are index tensors there (``core/_indexing._changing_ints``),
so the clusters holding them recur; Python numbers repeated in a step do not change the grouped backward's inputs;
a loop's read-site timer lasts over the training steps between its reads. Values, gradients and errors are eager's."""
from __future__ import annotations

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.core import _indexing
from megxla.core._indexing import IndexOutOfRange
from megxla.jit import _autojit, auto_jit_stats, reset_auto_jit_stats

from test_autojit_programs import fresh_auto_jit  # noqa: F401

_INDEXES = [(0, 1), (1, 2), (-1, -3), (0, slice(None), 2), (Ellipsis, -1), (1, None, 2), (slice(1, None), 0, -1),
            1, -2, (0, 2, 3), (np.int32(1), slice(None, None, -1))]


def _index_all(seq):
    """Each index of ``seq`` at ONE line, three times: value, shape and gradient of ``x[index]``."""
    x = mge.Parameter(np.arange(24, dtype="float32").reshape(2, 3, 4))
    gm = GradManager().attach([x])
    got = []
    for index in seq:
        for _ in range(3):
            with gm:
                y = x[index] * 2
                gm.backward((y * y).sum())
            got.append((y.numpy(), x.grad.numpy()))
            x.grad = None
    return got


def test_a_line_indexing_with_changing_ints_gives_eagers_values_and_gradients(fresh_auto_jit):
    mge.config.auto_jit = True
    got = _index_all(_INDEXES)
    # (the line's ints are index tensors: all of them, or -- one step, the ints changing between its clusters --
    # all but the first)
    assert any(v is None or type(v) is _indexing._Loop for v in _indexing._INT_SITES.values())
    mge.config.auto_jit = False
    want = _index_all(_INDEXES)
    base = np.arange(24, dtype="float32").reshape(2, 3, 4)
    for k, ((gy, gg), (wy, wg)) in enumerate(zip(got, want)):
        index = _INDEXES[k // 3]
        np.testing.assert_array_equal(wy, base[index] * 2)
        assert gy.shape == wy.shape, index
        np.testing.assert_array_equal(gy, wy)
        np.testing.assert_array_equal(gg, wg)


def test_an_int_out_of_range_at_a_changing_line_raises_eagers_error(fresh_auto_jit):
    x = mge.Tensor(np.arange(8, dtype="float32").reshape(2, 4))

    def row(i):
        return x[i, 1]

    def errors():
        out = []
        for i in [0, 1, -2, 2, -3, 1, 7]:
            try:
                out.append(float(row(i)))
            except IndexOutOfRange as e:
                out.append(str(e))
        return out

    mge.config.auto_jit = True
    got = errors()
    mge.config.auto_jit = False
    assert got == errors() == [1.0, 5.0, 1.0, "getitem: index 2 is out of range for axis 0 of size 2",
                               "getitem: index -3 is out of range for axis 0 of size 2", 5.0,
                               "getitem: index 7 is out of range for axis 0 of size 2"]


def _policy_gradient(episodes, steps=16, seen=None):
    """REINFORCE as written for MegEngine: actions read on the host (``int(argmax)``), their log-probabilities
    picked with them, returns as Python floats (equal ones repeat within an episode)."""
    mge.random.seed(0)
    rs = np.random.RandomState(0)
    net = M.Sequential(M.Linear(8, 32), M.ReLU(), M.Linear(32, 4))
    opt = optim.Adam(net.parameters(), lr=1e-2)
    gm = GradManager().attach(net.parameters())
    losses = []
    for _ in range(episodes):
        obs = rs.randn(8).astype("float32")
        with gm:
            logps, rewards = [], []
            for t in range(steps):
                logp = F.logsoftmax(net(mge.Tensor(obs[None])), axis=1)
                a = int(F.argmax(logp, axis=1))
                logps.append(logp[0, a])
                rewards.append(float(a == t % 4))
                obs = np.roll(obs, 1) + 0.1 * a
            ret = np.cumsum(rewards[::-1])[::-1].copy()
            loss = -sum(lp * float(r) for lp, r in zip(logps, ret)) / steps
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.item())
        if seen is not None:
            seen.append({id(st[1]) for st in _autojit._reads.values() if st[1] is not None})
    return losses, [p.numpy() for p in net.parameters()]


def test_a_policy_gradient_step_with_actions_read_on_the_host_is_compiled(fresh_auto_jit, monkeypatch):
    # Its backward's cluster changed every episode: each action was a getitem parameter of its own, and the grouped
    # backward took each return once per value (which returns repeat is random): auto-jit gave up on it.
    monkeypatch.setattr(_autojit, "STATIC_TIMER", True)  # (the read-site timers: the step has 400+ ops, untimed)
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    timers = []
    got, got_params = _policy_gradient(16, seen=timers)
    s, sites = auto_jit_stats(), list(_autojit._sites.values())
    mge.config.auto_jit = False
    want, want_params = _policy_gradient(16)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(got_params, want_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # (the update's cluster: one key, not a new one every episode -- a few while the timers choose)
    assert not s["megamorphic"] and max(st[0] for st in sites) <= 4, (s, sites)
    assert s["compiled"] <= 8 and s["cache_hits"] >= 6, s  # (the update's cluster recurs)
    # (the action's line is read 16 times a step: its read-site timer lasts over the updates, from the first on)
    assert timers[0] and all(t == timers[0] for t in timers), timers


def _hand_written_rnn(steps, T=40, write=False):
    mge.random.seed(0)
    ih, hh, out = M.Linear(6, 16), M.Linear(16, 16), M.Linear(16, 5)
    params = list(ih.parameters()) + list(hh.parameters()) + list(out.parameters())
    gm, opt = GradManager().attach(params), optim.SGD(params, lr=0.1)
    rs = np.random.RandomState(0)
    x = mge.Tensor(rs.randn(T, 4, 6).astype("float32"))
    y = mge.Tensor(rs.randint(0, 5, (T * 4,)).astype("int32"))
    losses = []
    for _ in range(steps):
        with gm:
            h, outs = F.zeros((4, 16)), F.zeros((T, 4, 5)) if write else []
            for t in range(T):
                h = F.tanh(ih(x[t]) + hh(h))
                if write:
                    outs[t] = out(h)  # (a setitem at a changing int: index tensors too)
                else:
                    outs.append(out(h))
            loss = F.nn.cross_entropy((outs if write else F.stack(outs)).reshape(-1, 5), y)
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.item())
    return losses, [p.numpy() for p in params]


@pytest.mark.parametrize("write", [False, True], ids=["stacked", "written"])
def test_a_hand_written_rnn_over_x_t_runs_in_chunks(fresh_auto_jit, write):
    # ``x[t]`` (and ``outs[t] = ...``) made each time step's records differ: the step was no loop to auto-jit and
    # compiled whole (a 150-step one: 11.8 s of compile, against 2.6 s in chunks)
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    got, got_params = _hand_written_rnn(6, write=write)
    s = auto_jit_stats()
    mge.config.auto_jit = False
    want, want_params = _hand_written_rnn(6, write=write)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(got_params, want_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert s["chunked_clusters"] >= 1, s


@pytest.mark.parametrize("index", [(0, 1), 1])
def test_a_trace_keeps_its_ints(fresh_auto_jit, index):
    # (inside a trace the ints stay parameters: a trace records constants, and retraces on its own guards)
    mge.config.auto_jit = True
    x = mge.Tensor(np.arange(12, dtype="float32").reshape(3, 4))

    @mge.jit.trace(symbolic=True)
    def f(x):
        return x[index] * 2

    for i in range(3):
        np.testing.assert_array_equal(f(x).numpy(), np.arange(12, dtype="float32").reshape(3, 4)[index] * 2)
        x[index]
        x[i]  # (this line's ints change: index tensors here, outside the trace)


def _train_linear(xs, step_losses):
    """A seeded ``Linear`` on the batch ``xs`` (its width: the batch's), SGD, one step per function of
    ``step_losses`` (the model's output -> the loss), eagerly and then under auto-jit from fresh statistics: (eager's
    losses, auto-jit's)."""

    def run():
        mge.random.seed(0)
        net = M.Linear(xs.shape[1], xs.shape[1])
        opt, gm = optim.SGD(net.parameters(), lr=0.1), GradManager().attach(net.parameters())
        losses = []
        for loss_of in step_losses:
            with gm:
                loss = loss_of(net(mge.Tensor(xs)))
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(loss.item())
        return losses

    mge.config.auto_jit = False
    want = run()
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    return want, run()


def test_two_subscripts_with_their_own_constant_ints_on_one_line_stay_static(fresh_auto_jit):
    # ``bounds[..., 0], bounds[..., 1]`` on one line: a site per line saw its ints change within the first step and
    # lifted them from the second subscript on, so the first step's cluster never recurred (NeRF compiled its step
    # twice). A site is the subscript itself: each keeps its int, and the step compiles once.
    xs = np.random.RandomState(0).standard_normal((8, 2)).astype("float32")

    def loss_of(y):
        near, far = y[:, 0], y[:, 1]
        return ((far - near) ** 2).mean() + (y[..., 1] * y[..., 0]).mean()

    want, got = _train_linear(xs, [loss_of] * 4)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert auto_jit_stats()["compiled"] == 1, auto_jit_stats()["changes"]


def test_a_loop_over_ints_within_the_step_keeps_its_first_int_and_the_step_compiles_once(fresh_auto_jit):
    # NeRF's cumprod (``for i in range(n): c *= x[i]; x[i] = c``) inside the step: its ints changed within the first
    # step, which lifted them from the second use on -- that step's cluster, static ``x[0]``, never recurred, and the
    # step compiled twice (first sight, then its second step's). The loop's first int stays static at every step.
    xs = np.random.RandomState(0).standard_normal((8, 4)).astype("float32")

    def loss_of(y):
        y = F.sigmoid(y).transpose(1, 0)
        c = F.ones(y[0].shape)
        for i in range(y.shape[0]):
            c = c * y[i]
            y[i] = c
        return (y.transpose(1, 0) ** 2).mean()

    want, got = _train_linear(xs, [loss_of] * 4)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert auto_jit_stats()["compiled"] == 1, auto_jit_stats()["changes"]
    assert any(type(v) is _indexing._Loop for v in _indexing._INT_SITES.values())


def test_ints_drawn_at_random_within_the_step_are_all_index_tensors(fresh_auto_jit):
    # (a loop over ints drawn anew each step starts at another int: keeping its first one static would make which
    # draw equals it part of the key -- a new key at most steps. It is no loop from its first ints: all lifted.)
    rng = np.random.RandomState(0)
    draws = [rng.randint(0, 6, 5).tolist() for _ in range(10)]
    xs = rng.standard_normal((6, 3)).astype("float32")
    want, got = _train_linear(xs, [lambda y, picks=picks: sum((y[k] ** 2).sum() for k in picks) for picks in draws])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    s = auto_jit_stats()
    assert s["compiled"] <= 2 and s["cache_hits"] >= 6, s


def _per_image_step(net, gm, opt, x, labels):
    with gm:
        pred = net(x)
        nlabel = (F.sigmoid(labels * 10 - 5) > 0.5).sum(axis=1)  # (each image's box count, made on the device)
        loss = 0
        for b in range(labels.shape[0]):
            n = int(nlabel[b])  # (read image by image: a read at a changing int, in a cluster of its own each)
            loss = loss + ((pred[b, :n] - labels[b, :n]) ** 2).sum()
        gm.backward(loss)
    opt.step().clear_grad()
    return loss.item()


def test_ints_of_a_loop_over_images_with_a_read_each_keep_the_forwards_cluster(fresh_auto_jit):
    # YOLOX's ``int(nlabel[batch_idx])``: the ints change between the clusters of one step (a read after each), so
    # from the second use on they were index tensors -- but the first step's forward ended with a static
    # ``nlabel[0]`` and the next steps' with a lifted one: the forward compiled at first sight, then again. Each
    # step's first use keeps its first int.
    r = np.random.RandomState(0)
    x = mge.Tensor(r.standard_normal((3, 8)).astype("float32"))
    labels = mge.Tensor(np.array([[1, 2, 0, 0, 0, 0, 0, 0], [3, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]],
                                 "float32"))

    def run():
        mge.random.seed(0)
        net = M.Sequential(M.Linear(8, 16), M.ReLU(), M.Linear(16, 16), M.LayerNorm(16), M.ReLU(), M.Linear(16, 16),
                           M.ReLU(), M.Linear(16, 16), M.ReLU(), M.Linear(16, 8))  # (a forward compiled at first sight)
        opt, gm = optim.SGD(net.parameters(), lr=0.01), GradManager().attach(net.parameters())
        return [_per_image_step(net, gm, opt, x, labels) for _ in range(5)]

    mge.config.auto_jit = False
    want = run()
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    got = run()
    s = auto_jit_stats()
    mge.config.auto_jit = False
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert s["compiled"] == 2 and not s["changes"], (s["compiled"], s["changes"])  # (the forward, the backward)
