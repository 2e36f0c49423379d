"""Auto-jit (``megxla.config.auto_jit``): eager code compiled cluster by cluster, with eager's exact meaning.

The op table checks every op (forward and gradient) under auto-jit (``optable.check_auto_jit``); these tests check
whole programs: training loops, RNG identity, errors, compile bounds and composition with the explicit traces.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import types
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import auto_jit_stats, reset_auto_jit_stats, xla_trace, _autojit


@pytest.fixture
def auto_jit(monkeypatch):
    saved = mge.config.auto_jit
    # (these tests check how clusters are made and run: a small step is not timed against eager here --
    # test_a_small_static_step_runs_eagerly_where_that_is_clearly_faster checks that)
    monkeypatch.setattr(_autojit, "STATIC_TIMER", False)
    # (nor is a line's batch of a new size every step kept padded to a few sizes -- _padded.host_rows, tested in
    # test_autojit_selections.py --: here such batches make steps whose clusters keep changing)
    monkeypatch.setattr(_autojit._padded, "_VARYING", 10 ** 9)
    _autojit._sites.clear()
    _autojit._warned_lines.clear()
    _autojit._steps.clear()
    _autojit._local.cluster.guesses.clear()
    _autojit._early.clear()  # (early launches' executables: each test counts its own compiles)
    _autojit._reads.clear()
    _autojit._padded._ROW_SITES.clear()  # (which lines' host arrays are kept padded)
    # (a loop of reads run eagerly for its op budget, a read inside a GradManager: an earlier test's, not this one's)
    _autojit._local.read_pause = None
    _autojit._capped_starts.clear()  # (loops an earlier test's size cap cut)
    _autojit._device_checks._held.clear()  # (lines whose index checks held: an earlier test's are made in clusters)
    _autojit._local.mid_read = _autojit._local.after_mid_read = False
    reset_auto_jit_stats()
    mge.config.auto_jit = True
    try:
        yield _autojit
    finally:
        mge.config.auto_jit = saved


class Net(M.Module):
    def __init__(self):
        super().__init__()
        # (no bias before BatchNorm: its gradient is zero up to rounding, and Adam's normalised step turns that
        # rounding noise -- which XLA's fusion changes -- into updates of size lr)
        self.conv = M.Conv2d(1, 4, 3, padding=1, bias=False)
        self.bn = M.BatchNorm2d(4)
        self.drop = M.Dropout(0.3)
        self.fc = M.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        x = self.drop(F.relu(self.bn(self.conv(x))))
        return self.fc(F.flatten(x, 1))


def _train(steps, seed=0, read_every_step=True):
    mge.random.seed(seed)
    net = Net()
    opt = optim.Adam(net.parameters(), lr=1e-2)
    gm = GradManager().attach(net.parameters())
    rng = np.random.RandomState(1)
    losses = []
    for _ in range(steps):
        x = mge.Tensor(rng.standard_normal((6, 1, 8, 8)).astype("float32"))
        y = mge.Tensor(rng.randint(0, 10, 6).astype("int32"))
        with gm:
            loss = F.nn.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.item() if read_every_step else loss)
    losses = [float(l) for l in losses]
    state = {k: np.asarray(v) for k, v in net.state_dict().items()}
    slots = [v.numpy() for s in opt._state.values() for v in s.values()]
    return losses, state, slots, mge.random.uniform(size=(3,)).numpy()


@pytest.mark.parametrize("read_every_step", [True, False])
def test_training_loop_equals_eager(auto_jit, read_every_step):
    mge.config.auto_jit = False
    want = _train(6, read_every_step=read_every_step)
    mge.config.auto_jit = True
    got = _train(6, read_every_step=read_every_step)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for k in want[1]:
        np.testing.assert_allclose(got[1][k], want[1][k], rtol=1e-5, atol=1e-6, err_msg=k)
    for a, b in zip(got[2], want[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[3], want[3])  # the global RNG stream is where eager's is (Dropout drew)
    stats = auto_jit_stats()
    assert stats["cache_hits"] >= 4, stats  # (compiled here or by the other parametrisation: the same key)
    assert stats["cuts"][0][1] == "opt.step" and "opt.step()" in stats["cuts"][0][2], stats["cuts"]
    # the parameters' and slots' old buffers are donated (kept for a failure's restore, which must not count)
    donated = max(len(key[3]) for key, entry in auto_jit._cache.items() if entry.executable is not None)
    assert donated >= len(got[1]), donated


def _messy_loop(steps=24):
    # what zoo scripts do around their step: a per-step learning-rate schedule, autocast with GradScaler on some
    # steps, gradient clipping on others, opt.step() under a host condition, a weight written in place outside
    # the optimizer, an eval forward, an EMA copy updated through state_dict/load_state_dict, and an optimizer
    # state round trip
    import copy
    from megxla import amp
    mge.random.seed(0)
    net = Net()
    ema = copy.deepcopy(net)
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    gm = GradManager().attach(net.parameters())
    scaler = amp.GradScaler()
    rng = np.random.RandomState(0)
    out = []
    for i in range(steps):
        for g in opt.param_groups:
            g["lr"] = 0.1 * (1 - i / steps)
        net.train()
        x = mge.Tensor(rng.standard_normal((6, 1, 8, 8)).astype("float32"))
        y = mge.Tensor(rng.randint(0, 10, 6).astype("int32"))
        with gm:
            with amp.autocast(enabled=i % 3 == 0):
                logits = net(x)
            loss = F.nn.cross_entropy(logits.astype("float32"), y)
            if i % 3 == 0:
                scaler.backward(gm, loss)
            else:
                gm.backward(loss)
        if i % 5 == 0:
            optim.clip_grad_norm(net.parameters(), max_norm=0.5)
        if loss.item() < 100:
            opt.step()
        opt.clear_grad()
        if i % 7 == 0:
            net.conv.weight[0, 0, 0, 0] = 0.0
        sd, esd = net.state_dict(), ema.state_dict()
        ema.load_state_dict({k: esd[k] * 0.9 + sd[k] * 0.1 if np.asarray(sd[k]).dtype.kind == "f" else sd[k]
                             for k in sd})
        if i % 8 == 7:
            opt.load_state_dict(opt.state_dict())
            net.eval()
            ema.eval()
            out.append(float(net(x).mean()))
            out.append(float((ema(x) ** 2).mean()))
        out.append(loss.item())
    return out, mge.random.uniform(size=(3,)).numpy()


def test_a_zoo_style_loop_with_schedules_amp_clipping_and_ema_equals_eager(auto_jit):
    mge.config.auto_jit = False
    want = _messy_loop()
    mge.config.auto_jit = True
    got = _messy_loop()
    # (an autocast step rounds its activations to float16: a float32 difference of fusion's size, 1e-7, in the
    # weights can move one of them across a float16 rounding boundary -- one float16 ulp, 5e-4 of it -- and the loss
    # by ~5e-5 (seen on an AMD EPYC VM: step 12's loss 4.9e-5 apart, the weights 1e-7 apart before it, the float32
    # steps agreeing to 3e-6 with autocast off); the evaluation means near zero compare absolutely, at the scale of
    # the O(1) logits they average)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-4, atol=1e-5)
    np.testing.assert_array_equal(got[1], want[1])  # Dropout drew the same numbers
    stats = auto_jit_stats()
    assert stats["compiled"] >= 1 and stats["cache_hits"] >= 8 and not stats["megamorphic"], stats


def test_random_draws_identical_to_eager(auto_jit):
    def draws():
        mge.random.seed(7)
        out = []
        for _ in range(4):
            a, u = mge.random.normal(size=(5,)), mge.random.uniform(size=(5,))
            s = a * 2 + u  # (a cluster: XLA may fuse this into one rounding, eager rounds twice)
            b = F.dropout(mge.Tensor(np.ones(8, "float32")), 0.5)
            out.append(np.concatenate([a.numpy(), u.numpy(), b.numpy(), s.numpy()]))
        return np.stack(out)

    mge.config.auto_jit = False
    want = draws()
    mge.config.auto_jit = True
    got = draws()
    np.testing.assert_array_equal(got[:, :18], want[:, :18])  # the draws: bit for bit
    np.testing.assert_allclose(got[:, 18:], want[:, 18:], rtol=1e-6)


def test_bad_shape_raises_at_the_users_line_and_changes_nothing(auto_jit):
    w = mge.Parameter(np.ones((3, 4), "float32"))
    before = w.numpy().copy()
    w._reset(w * 2)  # pending in the cluster
    with pytest.raises(ValueError) as info:
        F.matmul(w, mge.Tensor(np.ones((5, 2), "float32")))  # (3,4) @ (5,2): the op raises where it is issued
    assert "matmul" in str(info.value) and "(3, 4)" in str(info.value)
    assert info.traceback[-1].name != "flush"  # raised when the op was issued, not when the cluster ran
    np.testing.assert_array_equal(w.numpy(), before * 2)  # the earlier ops of the cluster still give eager's values


def test_data_dependent_ops_run_between_clusters(auto_jit):
    x = mge.Tensor(np.array([[-1.0, 2.0], [3.0, -4.0]], "float32"))
    for _ in range(3):
        y = x * 2 + 1
        n = int((y > 0).sum())  # a host read: a cut
        vals, idx = F.cond_take(y > 0, y)  # output shape depends on values: runs eagerly
        z = vals.sum() * 3 - 1
        assert n == 2 and vals.shape == (2,)
        np.testing.assert_allclose(z.numpy(), (5 + 7) * 3 - 1)
    stats = auto_jit_stats()
    # cond_take reads its mask's count on the host (a cut), then takes with that count static: compiled
    assert sum(n for n, reason, _ in stats["cuts"] if reason == "host read") >= 6, stats["cuts"]


def test_changing_shapes_compile_a_bounded_number_and_warn_once(auto_jit):
    w = mge.Tensor(np.ones(4, "float32"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 30):  # a new shape every step
            x = mge.Tensor(np.ones(n, "float32"))
            y = (F.exp(x) * 2 + 1).sum() * w + (x * x).sum()
            y.numpy()
    stats = auto_jit_stats()
    assert stats["compiled"] <= 1, stats  # (new keys never recur: none compiled but a site's first)
    storm = [w for w in caught if "auto-jit" in str(w.message)]
    assert len(storm) == 1 and "test_autojit.py" in str(storm[0].message), [str(w.message) for w in caught]
    # (and raised at that line: warning filters by module or line match it)
    import linecache
    assert storm[0].filename == __file__ and linecache.getline(__file__, storm[0].lineno).strip() == "y.numpy()"
    assert stats["megamorphic"], stats
    # the warning says what changed, as PyTorch's TORCH_LOGS=recompiles names the failed guard
    assert "(`exp`): input 1 is float32[" in str(storm[0].message), str(storm[0].message)
    (line, change), = stats["changes"]
    assert "test_autojit.py" in line and "(`exp`): input 1 is float32[29], was float32[28] -- " in change, change


def _clip_op(t, u):
    """``clip(t, -u, u)`` with the bounds as parameters of the op (a new op for every ``u``)."""
    from megxla.core._dispatch import apply
    from megxla.core._op import PRIMITIVES
    return apply(PRIMITIVES["clip"].bind(lower=-u, upper=u), t)


@pytest.mark.parametrize("auto", [False, True], ids=["eager", "auto_jit"])
def test_an_op_bound_anew_every_step_keeps_a_bounded_number_of_eager_kernels(monkeypatch, request, auto):
    """A parameter new every step binds a new op every step, each compiling its own eager kernel: they were all kept
    (a dropout rate annealed so, before rates became inputs: ~1.2 MB a step, 350 MB in 300 steps, eager and auto-jit
    alike). Past MAX_KERNELS the kernels not asked for since the last sweep go; the hot ones stay (not compiled
    again). (``clip``'s parameter form, bound directly: ``F.clip`` gives its bounds as inputs.)"""
    from megxla.core import _op
    monkeypatch.setattr(_op, "MAX_KERNELS", 16, raising=False)
    monkeypatch.setattr(_op, "_kernels", [], raising=False)
    monkeypatch.setattr(_op, "_kernels_limit", [16], raising=False)
    if auto:
        request.getfixturevalue("auto_jit")
    x = mge.Tensor(np.arange(-3, 3, dtype="float32"))
    hot = _op.PRIMITIVES["clip"].bind(lower=-1.5, upper=1.5)
    first = None
    bounds = [1.0 + k / 1024 + (0.5 if auto else 0.25) for k in range(100)]  # (none bound before)
    for u in bounds:
        y = _clip_op(_clip_op(x, 1.5) * u, u)
        np.testing.assert_allclose(y.numpy(), np.clip(np.clip(np.arange(-3, 3), -1.5, 1.5) * u, -u, u), rtol=1e-6)
        first = first or hot._kernel
    kept = [u for u in bounds if _op.PRIMITIVES["clip"].bind(lower=-u, upper=u)._kernel is not None]
    assert len(kept) <= 16, len(kept)
    if not auto:  # (under auto-jit the hot clip runs inside clusters, its kernel traced into them)
        assert hot._kernel is first is not None


@pytest.mark.parametrize("auto", [False, True], ids=["eager", "auto_jit"])
def test_an_op_bound_anew_every_step_keeps_a_bounded_number_of_interned_ops(monkeypatch, request, auto):
    """A parameter new every step (a dropout rate annealed so, before rates became inputs) interned a new op per step,
    with its gradient's op and (auto-jit) its cluster's, and kept them for good (~20 KB a step). Past MAX_OPS a
    primitive's ops move to its weak table: those held elsewhere stay the one op of their parameters, the rest are
    freed. (``clip``'s parameter form, bound directly: ``F.clip`` gives its bounds as inputs.)"""
    import gc
    from megxla.core import _op
    monkeypatch.setattr(_op, "MAX_OPS", 16, raising=False)
    # (a kept eager kernel holds its op's parameters -- a gradient's kernel its forward op -- so the clock bounds
    # the retired ops still alive)
    monkeypatch.setattr(_op, "MAX_KERNELS", 16, raising=False)
    monkeypatch.setattr(_op, "_kernels", [], raising=False)
    monkeypatch.setattr(_op, "_kernels_limit", [16], raising=False)
    if auto:  # (auto-jit's tables of ops' types and texts hold ops too, and are bounded the same way)
        from megxla.jit import _kernels_ahead, _persist
        monkeypatch.setattr(_autojit, "SHAPES_KEPT", 16, raising=False)
        monkeypatch.setattr(_autojit, "CACHE_SIZE", 16)  # (clusters' plans and executables are keyed by ops)
        monkeypatch.setattr(_autojit, "SEQUENCE_TYPES_KEPT", 16, raising=False)
        monkeypatch.setattr(_kernels_ahead, "MET_KEPT", 16)
        monkeypatch.setattr(_persist, "OP_TEXTS_KEPT", 16, raising=False)
        request.getfixturevalue("auto_jit")
    # (eagerly no cluster binds a ``sequence`` op: its table holds what earlier tests in this process left, which a
    # new binding would bound -- whether any did depends on the order the tests ran in)
    names = ("clip", "vjp", "sequence") if auto else ("clip", "vjp")
    prims = [_op.PRIMITIVES[n] for n in names if n in _op.PRIMITIVES]
    x = mge.Parameter(np.arange(-3, 3, dtype="float32"))
    gm = GradManager().attach([x])
    held = _op.PRIMITIVES["clip"].bind(lower=-0.125, upper=0.125)
    bounds = [1.0 + k / 1024 + (0.625 if auto else 0.375) for k in range(100)]  # (none bound before)
    for u in bounds:
        with gm:
            y = _clip_op(x * 1.5, u)
            gm.backward(y.sum())
        np.testing.assert_allclose(x.grad.numpy(), np.where(np.abs(np.arange(-3, 3) * 1.5) <= u, 1.5, 0.0))
        x.grad = None
    gc.collect()
    assert all(len(prim._ops) <= 16 for prim in prims), [(prim, len(prim._ops)) for prim in prims]
    clips = _op.PRIMITIVES["clip"]
    alive = [op for op in list(clips._ops.values()) + list(clips._weak.values())
             if dict(op.params).get("upper") in bounds]
    assert len(alive) <= 32, len(alive)  # (strong, and retired ones still held: by kept kernels, cached clusters)
    assert _op.PRIMITIVES["clip"].bind(lower=-0.125, upper=0.125) is held  # (held: still the one op)


def test_what_changed_between_clusters_in_words():
    x, w = mge.Tensor(np.ones(3, "float32")), mge.Tensor(np.ones(3, "float32"))

    def cluster(fn):
        with _autojit.clustered():
            out = fn()
            cl = _autojit._local.cluster
            ops, avals = list(cl.ops), list(cl.avals)
            out.numpy()
        return ops, avals

    base = cluster(lambda: (x * w + 1).sum())
    assert _autojit._change(base, base).startswith("the same ops on inputs of the same types, with other values")
    assert _autojit._change(base, cluster(lambda: (x - w + 1).sum())).startswith(
        "op 1 of 3 is `sub` where the previous cluster had `mul`")
    longer = cluster(lambda: (x * w + 1).sum() * 2)
    assert _autojit._change(base, longer).startswith("4 ops where the previous cluster had 3, from op 4 (`mul")
    y = mge.Tensor(np.ones(5, "float32"))
    assert _autojit._change(base, cluster(lambda: (y * y + 1).sum())) == (
        "op 1 of 3 (`mul`): input 1 is float32[5], was float32[3]; input 2 is float32[5], was float32[3] "
        "-- 3 ops differ")


def test_a_cut_for_an_op_run_eagerly_is_reported_as_such_not_as_a_read(auto_jit, monkeypatch):
    # A step or loop paused (run eagerly: faster so) takes a value still pending in the cluster collected before the
    # pause: the cluster runs then, and the report named that cut a "host read" at a line that reads nothing
    # (``- self._weight_ent * ent_loss``: MegRL's A2C, DeFCN's ``quality[:, st:ed]``, found by probes).
    x = mge.Tensor(np.arange(6, dtype="float32"))
    y = F.exp(x * 2 + 1) - x / 3 + 2  # (pending: a cluster of 5 ops)
    monkeypatch.setattr(_autojit._local, "paused", True)
    z = y * 0.5  # (run eagerly, its input computed first)
    monkeypatch.setattr(_autojit._local, "paused", False)
    np.testing.assert_allclose(z.numpy(), (np.exp(np.arange(6) * 2 + 1) - np.arange(6) / 3 + 2) * 0.5, rtol=1e-6)
    cuts = auto_jit_stats()["cuts"]
    assert [reason for _, reason, _ in cuts] == ["eager op's input"], cuts
    assert "test_autojit.py" in cuts[0][2] and "z = y * 0.5" in cuts[0][2], cuts


def test_log_names_each_compilation_and_what_changed(auto_jit, monkeypatch, capsys):
    monkeypatch.setattr(_autojit, "LOG", True)
    w = mge.Tensor(np.ones(4, "float32"))
    # a first cluster, then new shapes compiled when they recur (ops no other test runs): 7's first sight comes before
    # 6's recurrence, and 6's compilation is told against 5's -- the site's latest compiled --, not as 7 against 6
    # (the latest two new ones: what every later compilation was told, ASR's bucketed lengths)
    for n in (3, 3, 5, 5, 6, 7, 6):
        x = mge.Tensor(np.ones(n, "float32"))
        ((F.exp(x) * 3 - 2).sum() * w - (x * x).sum()).numpy()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("megxla auto-jit: compiled")]
    assert len(lines) == 3, lines
    assert "a cluster of " in lines[0] and "test_autojit.py" in lines[0] and "changed" not in lines[0], lines[0]
    assert "changed since the site's cluster compiled before: op 1 of " in lines[1], lines[1]
    assert "(`exp`): input 1 is float32[5], was float32[3] -- " in lines[1], lines[1]
    assert "(`exp`): input 1 is float32[6], was float32[5] -- " in lines[2], lines[2]


def test_steps_that_turn_eager_warn_once_naming_the_change(auto_jit):
    net = M.Sequential(M.Linear(6, 16), M.ReLU(), M.Linear(16, 3))
    opt = optim.SGD(net.parameters(), lr=0.1)
    gm = GradManager().attach(net.parameters())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(40):  # the batch size changes every step: no cluster recurs
            x = mge.Tensor(np.ones((step + 2, 6), "float32"))
            with gm:
                loss = F.nn.cross_entropy(net(x), mge.Tensor(np.zeros(step + 2, "int32")))
                gm.backward(loss)
            opt.step().clear_grad()
            loss.item()
    stats = auto_jit_stats()
    mine = [str(w.message) for w in caught if "auto-jit" in str(w.message)]
    # One warning at the user's line naming the change. What it says happens depends on timing: its ModeTimer
    # may find whole eager steps faster, or the site split its clusters first (the changing ops run op by op,
    # the others compiled) and a split step then held its own against eager.
    assert len(mine) == 1 and "input 1 is float32[" in mine[0], mine
    if stats["eager_steps"] and "op by op" not in mine[0]:
        assert "eager steps took less time" in mine[0], mine
    else:
        assert "15 of their 17 ops run op by op, the others compiled" in mine[0], mine
    assert caught[[str(w.message) for w in caught].index(mine[0])].filename == __file__


def test_small_clusters_run_op_by_op(auto_jit):
    x = mge.Tensor(np.ones(3, "float32"))
    for _ in range(5):
        (x + 1).numpy()
    stats = auto_jit_stats()
    assert stats["compiled"] == 0 and stats["eager_clusters"] == 5, stats


def test_xla_trace_inside_an_auto_jit_program_runs_as_itself(auto_jit):
    mge.random.seed(0)
    net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 2))
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(net.parameters())

    @xla_trace
    def step(net, opt, x):
        with gm:
            loss = (net(x) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    x = mge.Tensor(np.ones((3, 4), "float32"))
    ref = [np.asarray(p.numpy()) for p in net.parameters()]
    for _ in range(3):
        pending = net[0].weight * 1  # an auto-jit cluster is pending when the traced call starts
        loss = step(net, opt, x * 1)
        assert np.isfinite(loss.item())
        assert pending.shape == (8, 4)
    assert step.num_compiled >= 1
    assert any(not np.allclose(p.numpy(), r) for p, r in zip(net.parameters(), ref))


def test_gradient_manager_semantics_second_order(auto_jit):
    x = mge.Parameter(np.array([0.5, -1.5], "float32"))
    gm1, gm2 = GradManager().attach([x]), GradManager().attach([x])
    for _ in range(3):
        with gm2:
            with gm1:
                y = (x ** 3).sum()
                gm1.backward(y)  # x.grad = 3x^2 (recorded by gm2)
            dx = x.grad
            x.grad = None
            gm2.backward(dx.sum())  # d/dx sum(3x^2) = 6x
        np.testing.assert_allclose(x.grad.numpy(), 6 * x.numpy(), rtol=1e-6)
        x.grad = None


def _grouped_training(steps=4, grouped=True, monkeypatch=None, function=False, callback=False):
    """A small training loop under auto-jit: (losses, parameters, Tensors made per step, the cluster keys)."""
    from megxla.autodiff import Function
    from megxla.autodiff.grad_manager import GradManager as GM
    from megxla.core import _dispatch

    class Scale(Function):  # an autodiff.Function: its backward is Python, run eagerly
        def forward(self, x):
            return x * 2

        def backward(self, dy):
            return dy * 2

    if not grouped:
        monkeypatch.setattr(GM, "_grouped", lambda self, *a: None)
    _autojit._cache.clear()
    _autojit._families.clear()
    mge.random.seed(0)
    net = M.Sequential(M.Linear(6, 16), M.ReLU(), M.Linear(16, 3))
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager()
    gm.attach(net.parameters(), callbacks=[lambda p, g: g * 0.5] if callback else None)
    rng = np.random.RandomState(0)
    losses, made = [], []
    for _ in range(steps):
        x = mge.Tensor(rng.standard_normal((5, 6)).astype("float32"))
        y = mge.Tensor(rng.randint(0, 3, 5).astype("int32"))
        v0 = next(_dispatch._vids)
        with gm:
            h = net(x)
            loss = F.nn.cross_entropy(Scale()(h) if function else h, y)
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.item())
        made.append(next(_dispatch._vids) - v0)
    return losses, [p.numpy() for p in net.parameters()], made[-1], set(_autojit._cache)


def test_a_backward_is_collected_as_the_ops_of_its_gradients(auto_jit, monkeypatch):
    # Under auto-jit a GradManager's backward is ONE op (``sequence``: every vjp and gradient sum of its walk) --
    # collected once, not once per forward op --, whose steps the cluster takes as if applied one by one: the same
    # cluster keys (the same executables), the same bits, far fewer Tensors made on the host
    grouped = _grouped_training()
    with monkeypatch.context() as m:
        one_by_one = _grouped_training(grouped=False, monkeypatch=m)
    assert grouped[0] == one_by_one[0]
    for a, b in zip(grouped[1], one_by_one[1]):
        np.testing.assert_array_equal(a, b)
    assert grouped[3] == one_by_one[3] and grouped[3]
    assert grouped[2] <= one_by_one[2] - 8, (grouped[2], one_by_one[2])  # (the walk's gradients: no Tensors)
    mge.config.auto_jit = False
    eager = _grouped_training()
    np.testing.assert_allclose(grouped[0], eager[0], rtol=1e-5)


@pytest.mark.parametrize("what", ["function", "callback"])
def test_a_backward_through_a_function_or_with_callbacks_under_auto_jit_is_eagers(auto_jit, what):
    # an autodiff.Function's backward is Python (the walk applies its gradient ops one by one); attach()'s callbacks
    # run on the grouped gradients as on eager ones
    got = _grouped_training(**{what: True})
    mge.config.auto_jit = False
    want = _grouped_training(**{what: True})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_backward_whose_gradient_ops_cannot_all_be_collected_applies_them_one_by_one(auto_jit, monkeypatch):
    # (a step that cannot be part of a cluster -- a collective's gradient --: the sequence's steps are applied
    # one by one, each collected or run eagerly on its own)
    want = _grouped_training()
    infer = _autojit._infer
    monkeypatch.setattr(_autojit, "_SHAPES", {})
    monkeypatch.setattr(_autojit, "_SEQUENCE_TYPES", {})
    monkeypatch.setattr(_autojit, "_infer", lambda op, key, inputs: None if op.prim is _autojit._VJP else
                        infer(op, key, inputs))
    got = _grouped_training()  # (the gradient ops run eagerly: same values up to XLA's fusion reordering)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert got[2] > want[2]  # (the steps' results were Tensors: applied one by one)
    monkeypatch.setattr(_autojit, "_infer", infer)
    monkeypatch.setattr(_autojit, "MAX_OPS", 12)  # (a backward that would take its cluster past the size cap)
    capped = _grouped_training()
    np.testing.assert_allclose(capped[0], want[0], rtol=1e-5)
    assert capped[2] > want[2]


def _walked_training(extra_every=0, batches=(5,), attach_x=False):
    """Six SGD steps of a small net (an extra op in the forward every ``extra_every`` steps, batch sizes cycling
    through ``batches``, the input attached too where ``attach_x``): losses, parameters, the input's last gradient."""
    mge.random.seed(0)
    net = M.Sequential(M.Linear(6, 8), M.ReLU(), M.Linear(8, 3))
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(net.parameters())
    rng = np.random.RandomState(0)
    losses, xgrad = [], None
    for i in range(6):
        n = batches[i % len(batches)]
        x = mge.Tensor(rng.standard_normal((n, 6)).astype("float32"))
        y = mge.Tensor(rng.randint(0, 3, n).astype("int32"))
        with gm:
            if attach_x:
                gm.attach([x])
            h = net(x)
            if extra_every and i % extra_every == 0:
                h = h * 2 + x[:, :3]
            loss = F.nn.cross_entropy(h, y)
            gm.backward(loss)
        xgrad = x.grad.numpy() if attach_x else None
        opt.step().clear_grad()
        losses.append(loss.item())
    return losses, [p.numpy() for p in net.parameters()], xgrad


@pytest.mark.parametrize("case", [{}, {"extra_every": 2}, {"batches": (5, 7, 2)}, {"attach_x": True}])
def test_a_backward_walk_is_planned_once_per_tape_and_gives_eagers_gradients(auto_jit, monkeypatch, case):
    # Under auto-jit the grouped walk is kept under the tape's signature (ops, which values they read and make,
    # float inputs, where the walk starts and delivers): a step with the same tape reuses it -- whatever the shapes
    # --, a different tape (an extra op every other step, a tensor attached inside the recording) plans its own
    from megxla.autodiff.grad_manager import GradManager as GM
    planned = []
    grouped = GM._grouped
    monkeypatch.setattr(GM, "_grouped", lambda self, *a: planned.append(1) or grouped(self, *a))
    got = _walked_training(**case)
    assert len(planned) == (2 if case.get("extra_every") else 1), len(planned)
    mge.config.auto_jit = False
    want = _walked_training(**case)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    if case.get("attach_x"):
        np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-7)


def test_stats_report_cuts_by_line(auto_jit):
    x = mge.Tensor(np.ones((4, 4), "float32"))
    for _ in range(3):
        y = F.relu(x @ x + 1) * 2 - 1
        y.sum().item()
    stats = auto_jit_stats()
    assert stats["clusters"] == 3 and stats["ops"] >= 15
    (n, reason, where), = stats["cuts"]
    assert n == 3 and reason == "host read" and "y.sum().item()" in where


def test_megxla_run_auto_jit_flag(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import megengine as mge, megengine.functional as F, megengine.module as M, megengine.optimizer as optim
        from megengine.autodiff import GradManager
        net = M.Linear(4, 2); opt = optim.SGD(net.parameters(), lr=0.1); gm = GradManager().attach(net.parameters())
        for _ in range(4):
            with gm:
                loss = (net(mge.tensor(np.ones((2, 4), "float32"))) ** 2).mean()
                gm.backward(loss)
            opt.step().clear_grad()
            loss.item()
        from megxla.jit import auto_jit_stats
        print("AUTO", mge.config.auto_jit, auto_jit_stats()["cache_hits"])
    """))
    env = dict(os.environ)
    env.pop("MEGXLA_AUTO_JIT", None)
    out = subprocess.run([sys.executable, "-m", "megxla.run", "--auto-jit", str(script)], capture_output=True,
                         text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stderr
    assert "AUTO True" in out.stdout and not out.stdout.strip().endswith(" 0"), out.stdout


@pytest.mark.parametrize("mode", ["auto_jit", "xla_trace"])
def test_a_users_warning_is_shown_once_as_eagerly(tmp_path, mode):
    # Compiling used to change the warning filters (to hide JAX's note on donated buffers it cannot reuse), which
    # makes Python forget the warnings it has shown: a warning shown once eagerly came back after each compilation.
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(f"""
        import warnings
        import numpy as np
        try:  # (JAX imports SciPy at its first call of a kept program, and SciPy's import changes the filters)
            import scipy.linalg  # noqa: F401
        except ImportError:
            pass
        import megxla as mge, megxla.functional as F, megxla.module as M, megxla.optimizer as optim
        from megxla.autodiff import GradManager
        from megxla.jit import xla_trace, auto_jit_stats
        mge.config.auto_jit = {mode == "auto_jit"}
        net = M.Sequential(M.Linear(8, 16), M.ReLU(), M.Linear(16, 4))
        opt = optim.Adam(net.parameters(), lr=0.01)
        gm = GradManager().attach(net.parameters())

        def step(net, opt, x, y):
            with gm:
                loss = F.nn.cross_entropy(net(x), y)
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

        if {mode == "xla_trace"}:
            step = xla_trace(step)
        rng = np.random.RandomState(0)
        for i in range(12):
            warnings.warn("the user's warning")
            for n in (4, 2) if i % 2 else (4,):  # (a second shape: a second compilation)
                step(net, opt, mge.tensor(rng.randn(n, 8).astype("float32")),
                     mge.tensor(rng.randint(0, 4, n).astype("int32")))
        print("COMPILED", auto_jit_stats()["compiled"] if {mode == "auto_jit"} else step.num_compiled)
    """))
    env = dict(os.environ)
    env.pop("MEGXLA_AUTO_JIT", None)
    out = subprocess.run([sys.executable, "-W", "default", str(script)], capture_output=True, text=True, env=env,
                         timeout=240)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split("COMPILED")[1]) >= 2, out.stdout
    assert out.stderr.count("UserWarning: the user's warning") == 1, out.stderr
    assert "donated" not in out.stderr, out.stderr


def test_xla_trace_whose_reads_keep_missing_runs_as_clusters():
    def make():
        mge.random.seed(0)
        net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 3))
        return net, optim.SGD(net.parameters(), lr=0.1), GradManager().attach(net.parameters())

    def body(net, opt, gm, x):
        with gm:
            y = net(x)
            n = int((y > 0).sum())  # changes from call to call
            pos, _ = F.cond_take(y > 0, y)
            loss = (y ** 2).mean() + pos.sum() / max(n, 1)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    rng = np.random.RandomState(0)
    xs = [rng.standard_normal((5, 4)).astype("float32") for _ in range(14)]
    net, opt, gm = make()
    want = [body(net, opt, gm, mge.Tensor(x)).item() for x in xs]
    net2, opt2, gm2 = make()
    step = xla_trace(lambda net, opt, x: body(net, opt, gm2, x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [step(net2, opt2, mge.Tensor(x)).item() for x in xs]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert step.num_clustered_calls >= 5, (step.num_rerecords, step.num_calls)
    for p, q in zip(net.parameters(), net2.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)
    # every call runs the body now: the signature (flattening the modules and the optimizer) is not computed
    from megxla.jit import _state
    calls = step.num_calls
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mp.setattr(_state, "collect", lambda *a, **k: pytest.fail("signature computed"))
        x = mge.Tensor(xs[0])
        np.testing.assert_allclose(step(net2, opt2, x).item(), body(net, opt, gm, x).item(), rtol=1e-5)
    assert step.num_calls == calls + 1


def test_xla_trace_whose_input_counts_and_reads_change_churns_early():
    # a detector's ground-truth boxes: their count is an input shape (a new signature, recorded) and, through the
    # matching, a value read on the host (a guard miss where a signature recurs): most calls record, so the
    # step runs churning after a few calls instead of recording (and compiling) on every new count
    def make():
        mge.random.seed(0)
        net = M.Linear(4, 3)
        return net, optim.SGD(net.parameters(), lr=0.1), GradManager().attach(net.parameters())

    def body(net, opt, gm, x, boxes):
        with gm:
            y = net(x)
            hit = (y.sum(axis=1, keepdims=True) > boxes.mean(axis=1)).astype("float32")  # (5, k)
            n = int(hit.sum())
            loss = (y ** 2).mean() + (hit.sum(axis=0) * boxes.sum(axis=1)).sum() / max(n, 1)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    rng = np.random.RandomState(0)
    data = [(rng.standard_normal((5, 4)).astype("float32"),
             rng.standard_normal((k, 4)).astype("float32")) for k in (1, 2, 3, 1, 4, 2, 3, 5, 1, 2, 4, 3, 5, 2)]
    net, opt, gm = make()
    want = [body(net, opt, gm, mge.Tensor(x), mge.Tensor(b)).item() for x, b in data]
    net2, opt2, gm2 = make()
    step = xla_trace(lambda net, opt, x, b: body(net, opt, gm2, x, b))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [step(net2, opt2, mge.Tensor(x), mge.Tensor(b)).item() for x, b in data]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip(net.parameters(), net2.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)
    assert step.num_rerecords <= 2, step.num_rerecords  # (new counts at calls 1-3, a read that changed at 4-7)
    assert step.num_clustered_calls + step.num_eager_calls >= len(data) - 7
    churned = [w for w in caught if "recorded again on" in str(w.message)]
    assert len(churned) == 1 and "signatures" in str(churned[0].message), [str(w.message) for w in churned]
    assert churned[0].filename == __file__  # (named at the user's call)


def test_xla_trace_of_a_multi_scale_step_whose_read_rarely_changes_stays_compiled():
    # eight input shapes (multi-scale training), a value read on the host that is the same at every scale and
    # changes once: each scale records and compiles once, the change records once more -- not "most calls record"
    def make():
        mge.random.seed(0)
        net = M.Linear(4, 3)
        net.scale = mge.Tensor(1.0)
        return net, optim.SGD(net.parameters(), lr=0.1), GradManager().attach(net.parameters())

    def body(net, opt, gm, x):
        with gm:
            k = float(net.scale)  # a host read
            loss = (net(x) ** 2).mean() * k
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    rng = np.random.RandomState(0)
    rows = [2, 3, 4, 5, 6, 7, 8, 9] * 4
    xs = [rng.standard_normal((r, 4)).astype("float32") for r in rows]

    def run(step, net, opt):
        out = []
        for i, x in enumerate(xs):
            if i == 20:
                net.scale._reset(mge.Tensor(2.0))
            out.append(step(net, opt, mge.Tensor(x)).item())
        return out

    net, opt, gm = make()
    want = run(lambda net, opt, x: body(net, opt, gm, x), net, opt)
    net2, opt2, gm2 = make()
    step = xla_trace(lambda net, opt, x: body(net, opt, gm2, x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run(step, net2, opt2)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert step.num_rerecords >= 1 and not step._churning
    assert step.num_clustered_calls == 0 and step.num_eager_calls == 0


def test_another_thread_reading_a_pending_value_loses_no_update(auto_jit):
    # another thread forcing this thread's cluster (reading the shared global RNG key) must not write an older
    # value back over the newer one this thread has just bound (the draws would repeat)
    import threading
    from megxla.random import _rng
    mge.config.auto_jit = False
    mge.random.seed(5)
    want = [mge.random.uniform(size=(3,)).numpy() for _ in range(150)]
    mge.config.auto_jit = True
    stop, errors = threading.Event(), []

    def reader():
        try:
            while not stop.is_set():
                _rng._global._state.numpy()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    th = threading.Thread(target=reader)
    th.start()
    try:
        mge.random.seed(5)
        got = [mge.random.uniform(size=(3,)).numpy() for _ in range(150)]
    finally:
        stop.set()
        th.join()
        sys.setswitchinterval(interval)
    assert not errors, errors
    np.testing.assert_array_equal(np.stack(got), np.stack(want))


def _worker_dp_auto_jit():
    import test_distributed as td
    import megxla.distributed as dist
    mge.config.auto_jit = True
    state = td._train(False, True, (dist.get_rank(), dist.get_world_size()))[0]
    return state, auto_jit_stats()["clusters"]


def test_two_process_data_parallel_under_auto_jit():
    import megxla.distributed as dist
    import test_distributed as td
    mge.random.seed(1234)
    ref = td._train(False, False)[0]
    results = dist.launcher(_worker_dp_auto_jit, n_gpus=2, device_type="cpu")()
    for r, (state, clusters) in enumerate(results):
        assert clusters > 0
        for k, v in ref.items():
            np.testing.assert_allclose(state[k], v, rtol=1e-5, atol=1e-5, err_msg=f"{k} rank {r}")


class _SquaresDataset:
    def __len__(self):
        return 8

    def __getitem__(self, i):
        x = mge.Tensor(np.full((2,), i, "float32"))
        return (F.exp(x * 0) * x * x + 1).numpy(), np.int32(i)  # megxla ops inside the worker


def test_dataloader_workers_under_auto_jit(auto_jit):
    from megxla.data import DataLoader, SequentialSampler
    ds = _SquaresDataset()
    loader = DataLoader(ds, sampler=SequentialSampler(ds, batch_size=4), num_workers=2)
    w = mge.Tensor(np.ones(2, "float32"))
    total = []
    for xb, yb in loader:
        total.append(float(((mge.Tensor(xb) * w).sum(axis=1) * 2).sum().item()))
    want = [sum(2 * 2 * (i * i + 1) for i in range(4 * b, 4 * b + 4)) for b in range(2)]
    np.testing.assert_allclose(total, want)


def test_a_failing_cluster_keeps_what_eager_would_have_kept(auto_jit, monkeypatch):
    from megxla.core import _op
    import jax
    if jax.default_backend() != "cpu":
        pytest.skip("XLA:CPU refuses the allocation at dispatch")
    from megxla.core._dispatch import OutOfMemoryError
    monkeypatch.setitem(_op._MEMORY_LIMIT, jax.default_backend(), 1 << 62)  # let the output reach XLA
    w = mge.Tensor(np.ones(3, "float32"))
    mge.random.seed(3)
    mge.config.auto_jit = False
    want_draw = mge.random.normal(size=(3,)).numpy()
    mge.random.seed(3)
    mge.config.auto_jit = True
    before = w.numpy()
    w += 1  # pending, before the failing op: takes effect, as in eager
    huge = F.zeros((2 ** 23, 2 ** 23))  # 256 TiB: XLA refuses it when the cluster runs
    v = mge.Tensor(np.ones(3, "float32"))
    v += huge[0, :3]  # rebound to a value after the failure: goes back to its value before
    with pytest.raises(OutOfMemoryError):
        (w * 2 + v).numpy()
    np.testing.assert_array_equal(w.numpy(), before + 1)
    np.testing.assert_array_equal(v.numpy(), np.ones(3, "float32"))
    np.testing.assert_array_equal(mge.random.normal(size=(3,)).numpy(), want_draw)  # the RNG still works


def _lift_size_check(monkeypatch):
    from megxla.core import _op
    import jax
    if jax.default_backend() != "cpu":
        pytest.skip("XLA:CPU refuses the allocation at dispatch")
    monkeypatch.setitem(_op._MEMORY_LIMIT, jax.default_backend(), 1 << 62)  # let the output reach XLA


def test_a_failing_cluster_gives_back_an_in_place_chain_to_its_last_computed_value(auto_jit, monkeypatch):
    from megxla.core._dispatch import OutOfMemoryError
    _lift_size_check(monkeypatch)
    w = mge.Tensor(np.ones(3, "float32"))
    w += 1  # its value: held only by the record of the next update (not a result of the cluster)
    huge = F.zeros((2 ** 23, 2 ** 23))  # 256 TiB: XLA refuses it when the cluster runs
    w += huge[0, :3]
    with pytest.raises(OutOfMemoryError):  # eager's type, not ClusterFailed
        (w * 2).numpy()
    np.testing.assert_array_equal(w.numpy(), [2, 2, 2])  # eager: the first update stands


def test_a_compiled_cluster_that_would_not_fit_runs_op_by_op_and_keeps_its_donated_inputs(auto_jit, monkeypatch):
    from megxla.core._dispatch import OutOfMemoryError
    _lift_size_check(monkeypatch)
    monkeypatch.setattr(_autojit, "MIN_OPS", 1)
    monkeypatch.setattr(_autojit, "FIRST_SIGHT_OPS", 1)  # compiled at first sight
    w = mge.Tensor(np.ones(3, "float32"))
    y = F.sqrt(w * 4)  # (not peeked: its read runs the cluster)
    w -= 1  # w's old array: held by the cluster alone, so donated to its executable
    big = F.zeros((2 ** 23, 2 ** 23)) + 1  # the executable would allocate 256 TiB
    with pytest.raises(OutOfMemoryError):
        y.numpy()
    assert auto_jit_stats()["compiled"] == 1
    np.testing.assert_array_equal(y.numpy(), [2, 2, 2])
    np.testing.assert_array_equal(w.numpy(), [0, 0, 0])


def test_an_executable_failing_after_consuming_its_donated_inputs_raises_eagers_error(auto_jit, monkeypatch):
    # (the memory check above off: an allocation failing although the free memory looked enough)
    from megxla.core._dispatch import OutOfMemoryError
    from megxla.core._lazy import ClusterFailed
    _lift_size_check(monkeypatch)
    monkeypatch.setattr(_autojit, "MIN_OPS", 1)
    monkeypatch.setattr(_autojit, "FIRST_SIGHT_OPS", 1)
    monkeypatch.setattr(_autojit, "BIG_FRACTION", float("inf"))
    w = mge.Tensor(np.ones(3, "float32"))
    y = w * 2
    w -= 1
    c = mge.Tensor(np.full(3, 5, "float32"))
    z = F.sqrt(c * c) * 3  # not computed from a donated input (c holds its array): computed op by op (not peeked)
    # (a result: computed; from an array -- made from Python numbers alone, it would be a kept constant, computed
    # op by op before the executable: jit/_kept_constants.py)
    big = F.zeros((2 ** 23, 2 ** 23)) + c[:1]  # noqa: F841
    with pytest.raises(OutOfMemoryError):
        z.numpy()
    np.testing.assert_array_equal(z.numpy(), [15, 15, 15])
    with pytest.raises(ClusterFailed):  # XLA deleted w's old buffer: what came from it says so, not "deleted"
        y.numpy()


def test_changing_the_matmul_precision_runs_the_ops_collected_before(auto_jit):
    a = mge.Tensor(np.eye(4, dtype="float32"))
    y = F.relu(F.matmul(a, a) * 2 + 1) - 1
    assert _autojit._local.cluster.ops
    mge.config.matmul_precision = "default"
    try:
        assert not _autojit._local.cluster.ops  # (lowered under "highest", where they were issued)
    finally:
        mge.config.matmul_precision = "highest"
    np.testing.assert_array_equal(y.numpy(), np.eye(4) * 2)


def test_a_loop_that_never_reads_is_cut_by_the_caps(auto_jit, monkeypatch):
    monkeypatch.setattr(_autojit, "MAX_INPUT_BYTES", 4096)
    w = mge.Tensor(np.ones((16, 16), "float32"))
    outs = []
    for i in range(40):  # an inference loop that appends its outputs and reads none of them
        x = mge.Tensor(np.full((16, 16), i, "float32"))
        outs.append(F.relu(x @ w - 1))
    assert len(_autojit._local.cluster.inputs) < 10  # cut by the input cap: batches are not all held
    assert any(reason == "size cap" for _, reason, _ in auto_jit_stats()["cuts"])
    np.testing.assert_allclose(outs[7].numpy(), np.maximum(7 * 16 - 1, 0) * np.ones((16, 16)))


def test_clusters_a_size_cap_cuts_start_where_the_first_did_and_recur(auto_jit, monkeypatch):
    # an evaluation loop keeping its outputs: cut where the cap fell, each cluster started at another point of the
    # loop's body (a new key every time: compiled ones did not recur, the others ran op by op)
    monkeypatch.setattr(_autojit, "MAX_OPS", 64)
    w = mge.Tensor(np.full((8, 8), 0.1, "float32"))
    outs = []
    for i in range(200):  # 5 ops per step: 64 is no multiple of it
        x = mge.Tensor(np.full((4, 8), i % 7, "float32"))
        outs.append(F.sigmoid(F.relu(x @ w - 1) * 2 + 1))
    got = np.stack([o.numpy() for o in outs])
    stats = auto_jit_stats()
    assert stats["compiled"] <= 2 and stats["cache_hits"] >= 10, stats
    x = np.stack([np.full((4, 8), i % 7, "float32") for i in range(200)])
    want = 1 / (1 + np.exp(-(np.maximum(x @ np.full((8, 8), 0.1, "float32") - 1, 0) * 2 + 1)))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_cluster_run_op_by_op_frees_what_it_no_longer_reads(auto_jit, monkeypatch):
    # as eager frees a value nothing holds: a 4096-op cluster of an evaluation loop run op by op held every
    # activation of its ~24 forwards (3.4 GB for a ResNet-18 at batch 16)
    import jax
    from megxla.core import _dispatch
    monkeypatch.setattr(_autojit, "MAX_OPS", 200)
    real, most = _dispatch.run_kernel, [0]

    def counting(*args):
        most[0] = max(most[0], len(jax.live_arrays()))
        return real(*args)

    monkeypatch.setattr(_dispatch, "run_kernel", counting)
    w = mge.Tensor(np.full((64, 64), 0.01, "float32"))
    base = len(jax.live_arrays())
    outs = []
    for i in range(40):  # 5 ops a step, the first cluster (200 ops) run op by op: its first sight
        x = mge.Tensor(np.full((64, 64), float(i), "float32"))
        outs.append(F.relu(F.exp(x @ w * 0.001) - 1).sum())
    got = [o.numpy() for o in outs]
    assert auto_jit_stats()["eager_clusters"] >= 1, auto_jit_stats()
    assert most[0] - base < 2 * 40 + 15, (most[0], base)  # (the steps' inputs and results, not their 200 values)
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, np.maximum(np.exp(i * 0.64 * 0.001) - 1, 0) * 64 * 64, rtol=1e-4)


def test_a_cluster_run_op_by_op_compiles_its_new_kernels_ahead_on_worker_threads(auto_jit, monkeypatch):
    # A new key runs op by op with eager's kernels; on new shapes each kernel compiled as its op came, one after
    # another (a 24-op focal loss on a new count: ~570 ms). Its kernels not met before now compile on worker threads
    # ahead of the ops (~330 ms on 2 cores), each op waiting for its own: the same kernels, eager's numbers.
    import threading
    from megxla.jit import _kernels_ahead
    monkeypatch.setattr(_kernels_ahead, "THREADS", 2)
    real, compiled = _kernels_ahead._compile, []

    def recording(op, types):
        compiled.append((op.name, {t[0] for t in types}, threading.current_thread().name))
        return real(op, types)

    monkeypatch.setattr(_kernels_ahead, "_compile", recording)

    def loss(lg, tg):  # (8 ops: a cluster worth a launch, below FIRST_SIGHT_OPS: its first sight runs op by op)
        p = F.sigmoid(lg)
        return ((F.log(1 + F.exp(-F.abs(lg))) - lg * tg) * (1 - p)).sum()

    rng = np.random.RandomState(0)
    for n in (29, 31, 37):  # (a new count each time: a new key, run op by op)
        lg, tg = (mge.Tensor(rng.standard_normal((n, 4)).astype("float32")) for _ in range(2))
        before = len(compiled)
        got = loss(lg, tg).numpy()
        mge.config.auto_jit = False
        want = loss(lg, tg).numpy()
        mge.config.auto_jit = True
        assert got == want  # (eager's kernels: to the bit)
        new = compiled[before:]
        assert len(new) >= 6 and all((n, 4) in shapes for _, shapes, _ in new), new
        assert all(name.startswith("megxla-kernels") for _, _, name in new), new
    assert auto_jit_stats()["eager_clusters"] >= 3, auto_jit_stats()


def test_float16_results_are_rounded_in_clusters_as_eagerly(auto_jit):
    # XLA fuses a cluster's ops and keeps their float32 intermediates: exp's result, rounded to float16 eagerly,
    # was not in the compiled cluster (446.5 against eager's 446.25). (Eager's exp, not NumPy's, is the reference:
    # on CPUs with AVX512-FP16 NumPy's float16 exp is its own, an ulp from float32's rounded: 3.893 for 3.895.)
    x = mge.Tensor(np.array([0.1, 0.37, 0.61, 0.93, 1.7, 2.3], "float16"))

    def step():
        y = F.exp((x + 0.5) + 0.25)
        return (y * y).numpy()

    got = [step() for _ in range(4)]
    assert auto_jit_stats()["cache_hits"] >= 1
    mge.config.auto_jit = False
    want = step()
    assert want[-1] == np.float16(446.25)
    for g in got:
        np.testing.assert_array_equal(g, want)


def test_float16_selections_between_rounded_ops_stay_exact(auto_jit):
    # relu, max_pool, reshape, getitem (and relu's gradient) are not rounded again in a cluster: their results are
    # entries of their (rounded) inputs; the arithmetic around them is, so every value is eager's. (No product
    # feeds a sum here, forward or backward: on CPUs with float16 arithmetic, AVX512-FP16, XLA:CPU fuses those
    # into one FMA in a cluster, as it does float32's everywhere -- docs/design.md, "What stays different".)
    from megxla.autodiff import GradManager
    rng = np.random.RandomState(0)
    xs = rng.standard_normal((2, 3, 6, 6)).astype("float16")

    def step():
        x = mge.Parameter(xs)
        with GradManager().attach([x]) as gm:
            a = F.exp(x * 0.7) - 1.3
            b = F.max_pool2d(F.relu(a), 2).reshape(2, -1)[:, 1:] * 1.7
            loss = F.sigmoid(b).sum()
            gm.backward(loss)
        return b.numpy(), x.grad.numpy()

    got = [step() for _ in range(3)]
    assert auto_jit_stats()["compiled"] >= 1
    mge.config.auto_jit = False
    want = step()
    for g in got:
        for u, v in zip(g, want):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("what", ["read", "ops"])
def test_a_del_run_by_the_garbage_collector_may_use_tensors(auto_jit, what):
    # the collector runs ``__del__`` wherever an object is allocated: inside the collection of an op, or in a flush
    # (the cluster's lists half-built or emptied: IndexError/KeyError, and the op lost)
    import gc
    total = [mge.Tensor(np.zeros((), "float32"))]

    class Holder:  # (a reference cycle: freed by the collector)
        def __init__(self, t):
            self.t, self.me = t, self

        def __del__(self):
            if what == "read":
                float(self.t.sum())
            else:
                total[0] = total[0] + self.t.sum()

    saved = gc.get_threshold()
    gc.set_threshold(29, 1, 1)
    try:
        x = mge.Tensor(np.zeros(4, "float32"))
        for _ in range(300):
            x = x + 1
            Holder(x * 2)
        gc.collect()
        assert x.numpy().tolist() == [300.0] * 4
        if what == "ops":
            assert float(total[0]) == sum(8.0 * k for k in range(1, 301))
    finally:
        gc.set_threshold(*saved)
        Holder.__del__ = lambda self: None


def test_a_del_using_tensors_in_threads_collecting_at_once(auto_jit):
    # the collector is off while any thread changes a cluster: with one on/off per thread, the first thread out
    # switched it back on while another was inside, and a ``__del__`` run there broke that one's cluster
    import gc
    import sys
    import threading
    errors = []

    class Holder:  # (a reference cycle: freed by the collector, in whichever thread allocates)
        def __init__(self, t):
            self.t, self.me = t, self

        def __del__(self):
            float(self.t.sum())

    def work():
        try:
            x = mge.Tensor(np.zeros(4, "float32"))
            for i in range(600):
                x = x + 1
                Holder(x * 2)
                if i % 50 == 0:
                    x.numpy()
            assert x.numpy().tolist() == [600.0] * 4
        except Exception as e:  # (the thread's error, for the assertion below)
            errors.append(repr(e))

    saved, interval = gc.get_threshold(), sys.getswitchinterval()
    gc.set_threshold(17, 1, 1)
    sys.setswitchinterval(1e-6)  # (threads switch often: inside each other's collections)
    try:
        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        gc.collect()
    finally:
        gc.set_threshold(*saved)
        sys.setswitchinterval(interval)
        Holder.__del__ = lambda self: None
    assert not errors, errors[:3]
    assert gc.isenabled()


def test_the_collector_stays_off_until_the_last_thread_inside_leaves(auto_jit):
    # (the protocol the test above relies on, made deterministic: two threads inside at once)
    import gc
    import threading
    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def second():
        first_in.wait()
        auto_jit._gc_pause()
        second_in.set()
        first_out.wait()
        seen["while the second is inside"] = gc.isenabled()
        auto_jit._gc_resume()

    th = threading.Thread(target=second)
    th.start()
    auto_jit._gc_pause()
    first_in.set()
    second_in.wait()
    auto_jit._gc_resume()
    first_out.set()
    th.join()
    assert seen == {"while the second is inside": False}
    assert gc.isenabled()
    gc.disable()  # (a program's own choice is kept)
    try:
        auto_jit._gc_pause()
        auto_jit._gc_resume()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_python_number_equal_to_another_constant_of_the_cluster_makes_no_new_key(auto_jit):
    # Python numbers become cached tensors, one per value: a loss weight reaching 0.5, also a literal of the step,
    # shared that tensor -- one input fewer, a new key, its cluster run op by op (a first-steps cost of ~1.5 s)
    x = mge.Tensor(np.arange(8, dtype="float32"))
    got = []
    for w in (0.1, 0.2, 0.3, 0.5, 0.6):
        got.append(float((F.exp(x * 0.5) * w + x * 0.5).sum()))
    want = [float((np.exp(np.arange(8) * 0.5) * w + np.arange(8) * 0.5).sum()) for w in (0.1, 0.2, 0.3, 0.5, 0.6)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    stats = auto_jit_stats()
    assert stats["compiled"] == 1 and stats["eager_clusters"] == 1, stats


def test_an_epoch_long_repetitive_cluster_runs_in_chunks_of_its_body(auto_jit):
    # an evaluation loop reading its metric once an epoch: one cluster of 400 batches x 9 ops. Compiled whole when
    # it recurred, XLA:CPU took 20-30 s over its 400 convolutions (the epoch: 0.3 s eagerly); in chunks of whole
    # bodies it compiles one 135-op chunk (and the shorter last one), ~0.6 s each
    rng = np.random.RandomState(0)
    conv, fc = M.Conv2d(1, 4, 3, padding=1), M.Linear(4, 3)
    xs = [mge.Tensor(rng.randn(2, 1, 5, 5).astype("float32")) for _ in range(100)]
    ys = [mge.Tensor(rng.randint(0, 3, (2,)).astype("int32")) for _ in range(100)]

    def epoch():
        correct = mge.Tensor(0)
        for x, y in zip(xs, ys):
            out = fc(F.flatten(F.adaptive_avg_pool2d(F.relu(conv(x)), 1), 1))
            correct = correct + (F.argmax(out, 1) == y).sum()
        return correct.item()

    got = [epoch() for _ in range(4)]
    s = auto_jit_stats()
    assert s["chunked_clusters"] == 3 and s["compiled"] <= 2, s  # (epochs 2-4; one chunk key, then the last one's)
    mge.config.auto_jit = False
    assert got == [epoch()] * 4
    assert _autojit._chunk_size(*_loop_records(100)) == 135 and _autojit._chunk_size(*_loop_records(30)) == 0


def test_a_recurrent_language_models_training_step_runs_in_chunks_of_its_cell(auto_jit):
    # M.LSTM's time steps are taken apart by one split, so every step's ops are the same records (one getitem per
    # step made each a record of its own): the training step is a loop to auto-jit, and runs in chunks of its cell's
    # forward and gradient, compiled once each -- compiled whole, a 100-step language model's 3,051-op step took
    # 136 s of XLA:CPU's time, twice (its first step, and its second with Adam's first step in it)
    def steps(n):
        mge.random.seed(0)
        emb, rnn, out = M.Embedding(50, 8), M.LSTM(8, 16, batch_first=True), M.Linear(16, 50)
        params = list(emb.parameters()) + list(rnn.parameters()) + list(out.parameters())
        gm, opt = GradManager().attach(params), optim.Adam(params, lr=1e-2)
        rng = np.random.RandomState(1)
        losses = []
        for _ in range(n):
            d = rng.randint(0, 50, size=(4, 41)).astype("int32")
            x, y = mge.Tensor(d[:, :-1]), mge.Tensor(d[:, 1:])
            with gm:
                h, _ = rnn(emb(x))
                loss = F.nn.cross_entropy(out(h).reshape(-1, 50), y.reshape(-1))
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(loss.item())
        return losses, [p.numpy() for p in params]

    got, got_params = steps(5)
    s = auto_jit_stats()
    mge.config.auto_jit = False
    want, want_params = steps(5)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(got_params, want_params):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert s["chunked_clusters"] >= 2, s
    mge.config.auto_jit = True
    rnn = M.LSTM(8, 16)
    rnn(mge.Tensor(np.ones((30, 2, 8), "float32")))
    cl = _autojit._local.cluster
    assert len(cl.ops) > 300 and _autojit._repetitive(cl.ops, cl.avals)
    _autojit.flush()


def _loop_records(n):
    """The op records of an ``n``-iteration loop of a 9-op body after a 3-op prelude."""
    a = ((2,), np.dtype("float32"), False)
    body = [(f"op{k}", (0,), (1,)) for k in range(9)]
    return [("pre", (0,), (1,))] * 3 + body * n, [a, a]


def test_a_cluster_repeating_a_few_ops_many_times_waits_for_its_key_to_recur(auto_jit):
    # an unrolled recurrent cell: run op by op, its first sight compiles 3 eager kernels; compiled, 120 ops (a
    # 60-step LSTMCell loop's 3,500: 8-10 s cold, against 1.8-7 s op by op)
    w, b = mge.Tensor(np.full(4, 0.5, "float32")), mge.Tensor(np.full(4, 0.1, "float32"))

    def run():
        h = mge.Tensor(np.ones(4, "float32"))
        for _ in range(40):
            h = F.tanh(h * w + b)
        return h.numpy()

    first = run()
    assert auto_jit_stats()["compiled"] == 0 and auto_jit_stats()["eager_clusters"] == 1, auto_jit_stats()
    second = run()
    assert auto_jit_stats()["compiled"] == 1, auto_jit_stats()  # (recurred)
    mge.config.auto_jit = False
    want = run()
    np.testing.assert_allclose(first, want, rtol=1e-6)
    np.testing.assert_allclose(second, want, rtol=1e-6)


def test_the_rest_of_a_step_after_a_read_inside_the_gradient_manager_waits_for_its_key_to_recur(auto_jit):
    # YOLOX's SimOTA reads its number of matched anchors in the middle of the step and shapes its losses' rows by
    # it: the backward and update after the read compiled at first sight (22 s), a key that never recurred
    w = mge.Parameter(np.linspace(0.5, 1.5, 16).astype("float32"))
    gm = GradManager().attach([w])
    opt = mge.optimizer.SGD([w], lr=0.01)

    def chain(v):
        for _ in range(6):
            v = F.tanh(v * 1.01 + 0.1)
        return v

    def step(x, shift):
        with gm:
            h = chain(mge.Tensor(x) * w)
            n = int((h > shift).sum())  # (a count read mid-step)
            loss = (chain(F.zeros((n, 2)) + h.mean()) ** 2).sum() + (h ** 2).sum()
            gm.backward(loss)
        opt.step().clear_grad()
        return n, float(loss.item())

    x = np.linspace(-1, 1, 16).astype("float32")
    shifts = [0.3, 0.1, 0.1, 0.1]
    got, compiled = [], []
    for s in shifts:
        got.append(step(x, s))
        compiled.append(auto_jit_stats()["compiled"])
    assert len({n for n, _ in got[:2]}) == 2, got
    # the forward compiles at first sight; the rest after the read when its key recurs (the third step)
    assert compiled == [1, 1, 2, 2], (compiled, auto_jit_stats())
    mge.config.auto_jit = False
    w2 = mge.Parameter(np.linspace(0.5, 1.5, 16).astype("float32"))
    w._reset(w2)
    gm, opt = GradManager().attach([w]), mge.optimizer.SGD([w], lr=0.01)
    want = [step(x, s) for s in shifts]
    np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-5)
    assert [n for n, _ in got] == [n for n, _ in want]


def test_a_second_cluster_with_an_input_shape_the_first_lacked_waits_for_its_key_to_recur(auto_jit):
    # a site's second large cluster compiles at first sight (a program's first step often differs: an EMA after
    # opt.step joins the next step's cluster) -- but not where it takes a new input shape: a sequence model's
    # lengths would make it one of many compilations, each barely used
    w = mge.Tensor(np.ones(4, "float32"))

    def step(length, ema):
        h = F.zeros((4,))
        x = mge.Tensor(np.ones((length, 4), "float32"))
        for t in range(length):
            h = F.tanh(x[t] * w + h)
        if ema:
            h = h * 0.9 + 0.1
        return float(h.sum())

    step(2, False)  # (``x[t]``'s ints change: index tensors from here on, core/_indexing._changing_ints)
    reset_auto_jit_stats()
    _autojit._sites.clear()
    step(6, False)
    assert auto_jit_stats()["compiled"] == 1  # (its first sight)
    step(7, False)
    assert auto_jit_stats()["compiled"] == 1, auto_jit_stats()  # a new length: op by op
    step(7, False)
    assert auto_jit_stats()["compiled"] == 2  # recurred
    reset_auto_jit_stats()
    _autojit._sites.clear()
    step(6, False)
    step(6, True)  # the same inputs, two ops more: compiled at first sight
    assert auto_jit_stats()["compiled"] == 1 and auto_jit_stats()["eager_clusters"] == 0, auto_jit_stats()
    reset_auto_jit_stats()
    _autojit._sites.clear()
    total = 0
    for k in range(2):  # a metric accumulated in a tensor from the second step on (a new scalar input)
        total = step(5, False) + total * mge.Tensor(np.float32(1.0))
    assert auto_jit_stats()["compiled"] == 2 and auto_jit_stats()["eager_clusters"] == 0, auto_jit_stats()


def _vit_like_steps(n):
    """A model initialised on the device (a ViT project's ``trunc_normal_``: uniform, erfinv, clip), attached, then
    trained: the losses."""
    mge.random.seed(0)

    def trunc_normal_(t, std=0.02):
        M.init.uniform_(t, -1 + 1e-6, 1 - 1e-6)
        t._reset(F.clip(F.erfinv(t) * std * np.sqrt(2.0), -2 * std, 2 * std))

    a, b = M.Linear(16, 32), M.Linear(32, 4)
    for m in (a, b):
        trunc_normal_(m.weight)
    params = list(a.parameters()) + list(b.parameters())
    gm = GradManager().attach(params)
    opt = optim.AdamW(params, lr=1e-2)
    rs = np.random.RandomState(0)
    losses = []
    for _ in range(n):
        x = mge.Tensor(rs.randn(8, 16).astype("float32"))
        with gm:
            loss = (b(F.gelu(a(x))) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.item())
    return losses


def test_a_models_initialisation_on_the_device_is_not_part_of_its_first_step(auto_jit):
    # Pending at the first step, the initialisation joined its cluster: a key that never recurs, and the second
    # step compiled the step again (swin-transformer: 7 s). Attaching the parameters ends the setup.
    mge.config.auto_jit = False
    want = _vit_like_steps(5)
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    got = _vit_like_steps(5)
    s = auto_jit_stats()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert s["compiled"] == 1, s
    assert any(reason == "parameters attached" for _, reason, _ in s["cuts"]), s["cuts"]


def _seq_ce_step(net, opt, gm, x, y):
    with gm:
        logits = net(x)
        loss = sum(F.nn.cross_entropy(logits[:, t], y[:, t]) for t in range(y.shape[1]))
        loss = loss + F.nn.cross_entropy(logits[:, 0], F.argmax(logits[:, 1], axis=1))  # (labels from argmax)
        picked = logits[:, 0][F.topk(logits[:, 2, 0], 2)[1]]  # (indices from topk)
        loss = loss + picked.sum() + F.gather(logits[:, 0], 1, y[:, :2]).sum()
        gm.backward(loss)
    opt.step().clear_grad()
    return loss.item()


def test_index_checks_on_selected_labels_do_not_cut_the_cluster(auto_jit):
    # cross_entropy(logits[:, t], y[:, t]) checks its labels: y[:, t] is pending, and reading it cut the cluster at
    # each time step (a sequence model: 1.5x eager's step). Its entries come from y (concrete): y's range serves
    import megxla.module as M
    import megxla.optimizer as optim
    from megxla.autodiff import GradManager
    rng = np.random.RandomState(0)
    xs = rng.standard_normal((4, 6, 8)).astype("float32")
    ys = rng.randint(0, 5, (4, 6)).astype("int32")

    def run():
        mge.random.seed(0)
        net = M.Linear(8, 5)
        opt = optim.SGD(net.parameters(), lr=0.1)
        gm = GradManager().attach(net.parameters())
        return [_seq_ce_step(net, opt, gm, mge.Tensor(xs), mge.Tensor(ys)) for _ in range(4)]

    got = run()
    cuts = {c[1] for c in auto_jit_stats()["cuts"]}
    assert cuts == {"opt.step"}, auto_jit_stats()["cuts"]
    mge.config.auto_jit = False
    np.testing.assert_allclose(got, run(), rtol=1e-5)


def test_a_selected_label_out_of_range_raises_at_its_line_as_eagerly(auto_jit):
    # a known range that does not prove the labels valid falls back to reading them: eager's error, at its line,
    # and a range that is too wide (a -1 elsewhere in y) reads them and raises nothing
    y = mge.Tensor(np.array([[0, 1, -1], [2, 7, -1]], "int32"))
    logits = mge.Tensor(np.zeros((2, 3, 5), "float32")) * 2
    loss = F.nn.cross_entropy(logits[:, 0], y[:, 0])  # (entries 0 and 2: valid, though y holds -1 and 7)
    np.testing.assert_allclose(float(loss), np.log(5), rtol=1e-6)
    with pytest.raises(IndexError) as info:
        F.nn.cross_entropy(logits[:, 1], y[:, 1])
    mge.config.auto_jit = False
    with pytest.raises(IndexError) as want:
        F.nn.cross_entropy(mge.Tensor(np.zeros((2, 5), "float32")), mge.Tensor(np.array([1, 7], "int32")))
    assert str(info.value) == str(want.value)


def test_shapes_that_take_a_few_values_are_each_compiled_once(auto_jit):
    # a detector's ground-truth counts: a dozen values, each recurring; every one is compiled once, then hit
    rng = np.random.RandomState(0)
    w = mge.Tensor(np.ones(4, "float32"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no megamorphic warning
        for _ in range(120):
            n = int(rng.randint(1, 13))
            x = mge.Tensor(np.ones(n, "float32"))
            ((F.exp(x) * 2 + 1).sum() * w + (x * x).sum()).numpy()
    stats = auto_jit_stats()
    assert not stats["megamorphic"] and stats["compiled"] <= 13, stats
    assert stats["cache_hits"] >= 60, stats  # (the rarer values need more sightings once 4 are compiled)


def test_mode_timer_runs_whichever_of_clusters_and_eager_is_faster(monkeypatch):
    # a churning xla_trace step (and an auto-jit step whose clusters keep running op by op) must not stay slower
    # than eager: it times both ways (step start to step start) and keeps the faster, probing the other
    from megxla.jit import _autojit

    clock = [0.0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: clock[0]))
    monkeypatch.setattr(_autojit.ModeTimer, "compile_clock", staticmethod(lambda: 0.0))
    timer = _autojit.ModeTimer()
    cost = {True: 10.0, False: 1.0}  # clusters slower than eager
    modes = []
    w, p, e, f = timer.warmup, timer.PROBE, timer.EVERY, timer.FIRST_EVERY
    # where eager is chosen, clusters are tried again FIRST_EVERY steps later, then twice as long while the choice
    # stands, at most EVERY -- but a probe costing more than PROBE_BUDGET of the steps between comes later: these
    # cost 5 x (10 - 1) eager steps, so every 900 (w + f, then 900 steps later twice: the third now faster)
    late = math.ceil(p * (10.0 - 1.0) / (timer.PROBE_BUDGET * 1.0))
    assert late > min(2 * f, e)
    probes = [w + f, w + f + late, w + f + 2 * late]
    # and where clusters are chosen (here: a change of choice), eager is tried again as soon and as rarely
    back = [probes[2] + f, probes[2] + 3 * f, probes[2] + 3 * f + min(4 * f, e)]
    for k in range(back[2] + 2 * p):
        if k == probes[2]:
            cost[True] = 0.5  # (the clusters' compilations have settled: now they are faster)
        mode = timer.next_mode()
        modes.append(mode)
        clock[0] += cost[mode]
    assert all(modes[:w]) and not any(modes[w:w + p])  # clusters while they compile, then eager tried
    ran = [k for k in range(w + p, len(modes)) if modes[k]]
    # eager was faster: eager from then on, but for the probes of the clusters, PROBE steps each ...
    assert ran[:2 * p] == list(range(probes[0], probes[0] + p)) + list(range(probes[1], probes[1] + p))
    # ... until they are faster: kept from the third probe on, eager tried again FIRST_EVERY steps later, then
    # twice as late each time
    assert all(modes[probes[2]:back[0]])
    for a, b in zip(back, back[1:] + [len(modes)]):
        assert not any(modes[a:a + p]) and all(modes[a + p:b]), (a, b)


def _timed_modes(monkeypatch, eager_compiles, steps, cost):
    """The modes a churning step's ModeTimer chooses over ``steps`` steps on a fake clock, where ``cost(mode, modes)``
    gives a step's (seconds, of them compiling)."""
    from megxla.jit import _autojit

    clock, compiled = [0.0], [0.0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: clock[0]))
    monkeypatch.setattr(_autojit.ModeTimer, "compile_clock", staticmethod(lambda: compiled[0]))
    timer = _autojit.ModeTimer(warmup=_autojit.ModeTimer.PROBE, eager_compiles=eager_compiles)
    modes = []
    for _ in range(steps):
        modes.append(timer.next_mode())
        seconds, compiling = cost(modes[-1], modes)
        clock[0] += seconds
        compiled[0] += compiling
    return modes


@pytest.mark.parametrize("eager_compiles", [False, True])
def test_mode_timer_counts_eager_compilations_where_they_recur(monkeypatch, eager_compiles):
    # A churning xla_trace step (a count read on the host, then cond_take): every call's new count compiles eager
    # kernels for its new shapes, as it would new clusters -- 40-50 ms eager calls, 11-13 without their
    # compilations, against 7-9 ms clusters compiling nothing (a loaded machine; here eager's own time is the
    # faster). Subtracted as one-time costs, eager was chosen for 50 calls; its timer (``eager_compiles``) counts
    # them as it counts the clusters'.
    p = _autojit.ModeTimer.PROBE
    # (clusters: 8 ms; eager: 6 ms of its own, 35 compiling the kernels of a new shape)
    modes = _timed_modes(monkeypatch, eager_compiles, 2 * p + 20, lambda m, _: (8.0, 0.0) if m else (41.0, 35.0))
    after = modes[2 * p:]
    assert all(after) if eager_compiles else not any(after), modes
    # (the churning xla_trace step's timer is such a one)
    step = xla_trace(lambda x: x * 2)
    step._churning = step._run_body = True  # (churning, its body run: as _check_churn leaves it)
    step(mge.Tensor([1.0]))
    assert step._churn is not None and step._churn.eager_compiles


@pytest.mark.parametrize("eager_compiles", [False, True])
def test_mode_timer_waits_for_the_clusters_compilations(monkeypatch, eager_compiles):
    # The churning step's first cluster calls compile (the host-read step: 121, 128, 16, 11, 40 ms against 8-10 once
    # compiled): timed then, the clusters lost to eager. Its timer's warmup lasts while they compile.
    def cost(mode, modes):  # (the clusters' first three calls compile)
        return (108.0, 100.0) if mode and sum(modes) <= 3 else (8.0 if mode else 10.0, 0.0)
    modes = _timed_modes(monkeypatch, eager_compiles, 40, cost)
    eager = [k for k, m in enumerate(modes) if not m]
    p = _autojit.ModeTimer.PROBE
    if eager_compiles:  # (one probe of eager, after 6 calls in a row compiled nothing; clusters after it)
        assert eager == list(range(9, 9 + p)), modes
    else:  # (the probe at the warmup's end, then eager: the clusters timed while compiling)
        assert eager == list(range(5, 40)), modes


def test_mode_timer_leaves_out_steps_that_ran_a_schedule_being_timed(monkeypatch):
    # ResNeXt-IBN under auto-jit: its clusters' steps amid the schedule choice's probe (the other schedule compiling
    # beside them, then the two alternating) took 226 against 133 ms, and the step timer chose eager for 50 steps.
    # A step during which such a run happened (_tiers.disturbed moved) is not timed.
    from megxla.jit import _autojit, _tiers

    clock = [0.0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: clock[0]))
    monkeypatch.setattr(_autojit.ModeTimer, "compile_clock", staticmethod(lambda: 0.0))
    monkeypatch.setattr(_tiers, "disturbed", [0])
    timer = _autojit.ModeTimer()
    w, p = timer.warmup, timer.PROBE
    modes = []
    for k in range(w + p + 2):
        mode = timer.next_mode()
        modes.append(mode)
        if mode and k >= w - p:  # the clusters' latest steps before the eager probe, each disturbed and slow
            _tiers.disturbed[0] += 1
            clock[0] += 3.0
        else:
            clock[0] += 1.0 if mode else 2.0
    assert not any(modes[w:w + p]) and all(modes[w + p:]), modes  # clusters kept: 1.0 against eager's 2.0
    assert timer.times[True] == [1.0] * (w - p)


def test_mode_timer_probes_that_compile_a_lot_come_late_enough_to_cost_a_twentieth(monkeypatch):
    # The zoo detector's eager probes met new kernels for every new count: 200-600 ms steps against 5 ms clusters.
    # Eager's time is judged without its compilations (clusters still chosen), but a probe's wall time is paid:
    # probed every 50-200 steps, such probes cost more than the steps between. After the first re-check, the next
    # probe comes when the last one's cost is PROBE_BUDGET of the steps since.
    from megxla.jit import _autojit

    clock, compiled = [0.0], [0.0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: clock[0]))
    monkeypatch.setattr(_autojit.ModeTimer, "compile_clock", staticmethod(lambda: compiled[0]))
    timer = _autojit.ModeTimer()
    w, p, f = timer.warmup, timer.PROBE, timer.FIRST_EVERY
    modes = []
    for k in range(w + f + 4500):
        mode = timer.next_mode()
        modes.append(mode)
        clock[0] += 1.0 if mode else 40.0
        if not mode:
            compiled[0] += 38.0  # (an eager step: 2 units of work, 38 of compiling its new kernels)
    eager = [k for k, m in enumerate(modes) if not m]
    late = math.ceil(p * (40.0 - 1.0) / (timer.PROBE_BUDGET * 1.0))
    assert late == 3900 <= timer.MAX_EVERY
    # the first probe and the first choice's re-check as ever, then 3900 steps later (not 100)
    starts = [w, w + f, w + f + late]
    assert eager == [s + i for s in starts for i in range(p)], eager[:20]


def test_mode_timer_does_not_count_an_eager_steps_one_time_compilations(monkeypatch):
    # An eager probe that meets its kernels' compilations first (the clusters came warm from the kept lowered
    # programs) must not look slower than eager runs: the seconds JAX spent compiling are not counted for eager
    # steps. A cluster step's compilations are (its keys keep changing where shapes follow the data).
    from megxla.jit import _autojit

    clock, compiled = [0.0], [0.0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: clock[0]))
    monkeypatch.setattr(_autojit.ModeTimer, "compile_clock", staticmethod(lambda: compiled[0]))
    timer = _autojit.ModeTimer()
    modes = []
    for k in range(timer.warmup + 2 * timer.PROBE):
        mode = timer.next_mode()
        modes.append(mode)
        if mode:
            clock[0] += 3.0  # clusters: 3 s, of which 2 s compiling
            compiled[0] += 2.0
        else:
            clock[0] += 10.0  # eager: 1 s of work and 9 s compiling its kernels
            compiled[0] += 9.0
    w, p = timer.warmup, timer.PROBE
    assert not any(modes[w:w + p]) and not any(modes[w + p:])  # eager (1 s) beat the clusters (3 s)
    # the compile clock is JAX's: it counts the seconds of its compile events
    before = _autojit._COMPILE_SECS[0]
    import jax
    jax.jit(lambda a: a * 3 + 1).lower(np.ones(3, np.float32)).compile()
    assert _autojit._COMPILE_SECS[0] > before


def test_mode_timer_does_not_count_the_eager_kernels_a_cluster_step_compiled_either(monkeypatch):
    # A cluster step that ran new keys op by op (a detector's counts, new every step early on) compiled their eager
    # kernels: the same one-time costs an eager step meets, and does not count. Counted for the clusters only, they
    # chose eager at 66 ms against 464 -- of which 385 were kernels. Their own compilations do count.
    from megxla.jit import _autojit

    clock, compiled, kernels = [0.0], [0.0], [0.0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: clock[0]))
    monkeypatch.setattr(_autojit.ModeTimer, "compile_clock", staticmethod(lambda: compiled[0]))
    monkeypatch.setattr(_autojit.ModeTimer, "kernel_clock", staticmethod(lambda: kernels[0]))

    def choice(cluster_compile):
        timer = _autojit.ModeTimer()
        modes = []
        for k in range(timer.warmup + 3 * timer.PROBE):
            mode = timer.next_mode()
            modes.append(mode)
            if mode:  # clusters: 1 s of work, 6 s compiling eager kernels, and their own compilations
                clock[0] += 7.0 + cluster_compile
                compiled[0] += 6.0 + cluster_compile
                kernels[0] += 6.0
            else:  # eager: 2 s of work and 6 s compiling its kernels
                clock[0] += 8.0
                compiled[0] += 6.0
        w, p = timer.warmup, timer.PROBE
        assert not any(modes[w:w + p])  # (the probe)
        return all(modes[w + p:])

    assert choice(0.0)  # 1 s against 2 s: clusters
    assert not choice(2.0)  # 3 s against 2 s: eager
    # the kernel clock counts the compilations of eager kernels met running a cluster op by op (a cluster too
    # small to launch, here, on a shape no other test uses)
    monkeypatch.undo()
    before, compiled_before = _autojit._KERNEL_SECS[0], _autojit._COMPILE_SECS[0]
    x = mge.Tensor(np.full((3, 37), 0.5, "float32"))
    with _autojit.clustered():
        y = F.exp(x) * 3
    np.testing.assert_allclose(y.numpy(), np.exp(0.5) * 3, rtol=1e-6)
    assert _autojit._KERNEL_SECS[0] > before
    assert _autojit._KERNEL_SECS[0] - before <= _autojit._COMPILE_SECS[0] - compiled_before


def test_mode_timer_waits_for_the_eager_work_an_eager_run_left_before_timing_it(monkeypatch):
    # An eager step ends when its ops are issued: their compute runs on into the next step, so its interval is short
    # and the next one long. Timed by their median, eager steps issued in 4 s looked faster than clusters of 6 s;
    # with a drain the work left at the switch back (10 s here) is waited for and counted.
    from megxla.jit import _autojit

    clock = [0.0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: clock[0]))
    monkeypatch.setattr(_autojit.ModeTimer, "compile_clock", staticmethod(lambda: 0.0))
    drained = []

    def drain():  # the eager run's work left, waited for
        drained.append(len(modes))
        clock[0] += 10.0

    for with_drain, eager_wins in ((False, True), (True, False)):
        timer = _autojit.ModeTimer(warmup=4, drain=drain if with_drain else None)
        modes, drained[:] = [], []
        for k in range(4 + 2 * timer.PROBE):
            mode = timer.next_mode()
            modes.append(mode)
            # clusters: 6 s, all waited for; eager: 4 s issuing, the first also 30 s of one-time costs
            clock[0] += 6.0 if mode else 4.0 + (30.0 if k == 4 else 0.0)
        p = timer.PROBE
        assert all(modes[:4]) and not any(modes[4:4 + p])
        # (drained: 4 s steps and 10 s left at the end, the first step not counted: 6.5 s a step against the
        # clusters' 6 s; undrained, the median 4 s won)
        timer_best = modes[4 + p:]
        assert all(not m for m in timer_best) == eager_wins and all(timer_best) != eager_wins
        # drained after the eager run's first step (one-time costs, not timed) and at the switch back to clusters
        assert drained == ([5, 4 + p] if with_drain else [])


def test_mode_timer_is_not_swung_by_one_slow_eager_step_in_its_probe(monkeypatch):
    # A drained eager run is timed by the mean of its steps (alternating short and long steps, the last one carrying
    # the work left). One slow step in the middle -- a new shape's kernels, 20-30 ms outside JAX's compile events
    # among the detector's 5 ms steps -- swung that mean past its 9 ms clusters, which then ran 50 steps. Steps
    # between the first and the last are capped at twice the median; alternation and the drained work still count.
    from megxla.jit import _autojit

    clock = [0.0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: clock[0]))
    monkeypatch.setattr(_autojit.ModeTimer, "compile_clock", staticmethod(lambda: 0.0))

    def drain():
        clock[0] += left[0]

    def choice(eager_steps, clusters, work_left):
        timer = _autojit.ModeTimer(warmup=4, drain=drain)
        left[0], modes, probe = work_left, [], list(eager_steps)
        for k in range(4 + 3 * timer.PROBE):
            mode = timer.next_mode()
            modes.append(mode)
            clock[0] += clusters if mode else (probe.pop(0) if probe else eager_steps[-1])
        p = timer.PROBE
        assert all(modes[:4]) and not any(modes[4:4 + p])
        return "clusters" if all(modes[4 + p:]) else "eager" if not any(modes[4 + p:]) else modes

    left = [0.0]
    # a slow middle step: eager (4 s steps, 1 s left) beats 6 s clusters; the mean (10.75 s) chose the clusters
    assert choice([30.0, 4.0, 30.0, 4.0, 4.0], 6.0, 1.0) == "eager"
    # alternating steps: their mean (8 s), not their median's low side, against 7 s clusters
    assert choice([30.0, 3.0, 13.0, 3.0, 13.0], 7.0, 0.0) == "clusters"
    # the work left at the end counts in full: 4 s steps and 12 s left (7 s a step) against 6 s clusters
    assert choice([30.0, 4.0, 4.0, 4.0, 4.0], 6.0, 12.0) == "clusters"

def _fake_clock(auto_jit, monkeypatch, clusters, eager):
    """ModeTimers read a clock on which a step (or an iteration) takes ``clusters`` collected, ``eager`` paused."""
    clock = [0.0]

    def fake_clock():
        clock[0] += eager if auto_jit._local.paused else clusters
        return clock[0]

    monkeypatch.setattr(auto_jit.ModeTimer, "clock", staticmethod(fake_clock))
    monkeypatch.setattr(auto_jit.ModeTimer, "compile_clock", staticmethod(lambda: 0.0))


def test_steps_whose_clusters_keep_running_op_by_op_run_eagerly_when_that_is_faster(auto_jit, monkeypatch):
    # shapes that change every step (clusters that never recur) pay collection on top of eager execution: once a
    # step site has had such steps, auto-jit times its steps both ways and runs the faster -- here eager
    monkeypatch.setattr(auto_jit, "WARMUP_STEPS", 2)
    monkeypatch.setattr(auto_jit, "TROUBLED_STEPS", 2)
    _fake_clock(auto_jit, monkeypatch, clusters=10.0, eager=1.0)  # (a step as clusters takes 10, eagerly 1)

    def run(n_steps):
        mge.random.seed(0)
        net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 3))
        opt, gm = optim.SGD(net.parameters(), lr=0.1), GradManager().attach(net.parameters())
        rng = np.random.RandomState(0)
        losses = []
        for k in range(n_steps):
            x = mge.Tensor(rng.standard_normal((k + 1, 4)).astype("float32"))  # a new batch size every step
            with gm:
                loss = (net(x) ** 2).mean() + F.relu(net(x)).sum() * 0.01
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(loss.item())
        return losses, [p.numpy() for p in net.parameters()]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, params = run(20)
    assert auto_jit_stats()["eager_steps"] >= 5, auto_jit_stats()
    mge.config.auto_jit = False
    want, want_params = run(20)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip(params, want_params):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)


def test_the_warning_that_steps_run_eagerly_names_their_own_changing_clusters(auto_jit, monkeypatch):
    # two loops whose shapes change every step, taking turns (a detector's training step and a second model's):
    # the warning for one must name the clusters of its own step, not the other loop's latest change (it named
    # the other step's `opt.step()` line when the latest change seen anywhere was the other loop's)
    monkeypatch.setattr(auto_jit, "WARMUP_STEPS", 2)
    monkeypatch.setattr(auto_jit, "TROUBLED_STEPS", 2)
    _fake_clock(auto_jit, monkeypatch, clusters=10.0, eager=1.0)
    rng = np.random.RandomState(0)
    nets = [M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 3)) for _ in range(2)]
    runs = [(net, optim.SGD(net.parameters(), lr=0.1), GradManager().attach(net.parameters())) for net in nets]

    def step_a(net, opt, gm, x):
        with gm:
            gm.backward((net(x) ** 2).mean())
        opt.step().clear_grad()  # step A's end

    def step_b(net, opt, gm, x):
        with gm:
            gm.backward(F.relu(net(x)).sum() * 0.1)
        opt.step().clear_grad()  # step B's end

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(30):
            for step, (net, opt, gm) in zip((step_a, step_b), runs):
                x = mge.Tensor(rng.standard_normal((k + 1, 4)).astype("float32"))
                step(net, opt, gm, x)
                net[0].weight.numpy()
    told = [str(w.message) for w in caught if "run eagerly" in str(w.message)]
    assert len(told) == 2, told
    for message in told:
        ending = message.split("the steps ending at ")[1].split(" run eagerly")[0]
        cut = message.split("the clusters cut at ")[1].split(" keep changing")[0]
        assert ending == cut and "step " in ending, message


@pytest.mark.parametrize("clusters, eager_kept", [(0.95, True), (0.8, False)])
def test_steps_whose_clusters_keep_changing_run_as_clusters_only_where_clearly_faster(auto_jit, monkeypatch,
                                                                                        clusters, eager_kept):
    # such steps' times are noisy (new keys compile, new shapes meet new kernels): a close call went to clusters
    # that then ran 50 steps slower than eager. Clusters are chosen only where they take at most 0.9x eager's time
    monkeypatch.setattr(auto_jit, "WARMUP_STEPS", 2)
    monkeypatch.setattr(auto_jit, "TROUBLED_STEPS", 2)
    _fake_clock(auto_jit, monkeypatch, clusters=clusters, eager=1.0)
    monkeypatch.setattr(auto_jit.ModeTimer, "kernel_clock", staticmethod(lambda: 0.0))  # (kernels compiled: none)
    mge.random.seed(0)
    net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 3))
    opt, gm = optim.SGD(net.parameters(), lr=0.1), GradManager().attach(net.parameters())
    rng = np.random.RandomState(0)
    n_steps = 40
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(n_steps):
            x = mge.Tensor(rng.standard_normal((k + 1, 4)).astype("float32"))  # a new batch size every step
            with gm:
                gm.backward((net(x) ** 2).mean())
            opt.step().clear_grad()
    eager_steps = auto_jit_stats()["eager_steps"]
    # (timer from the 4th step: 5 steps as clusters, a 5-step eager probe, then the choice until the next probe)
    assert (eager_steps >= 20) if eager_kept else (eager_steps <= 10), eager_steps


def test_steps_cut_small_by_host_reads_run_eagerly_with_no_warning_about_changing_clusters(auto_jit, monkeypatch):
    # a fixed step whose gradient norms are logged per parameter on the host: the reads cut it into clusters too
    # small to launch, so its ops run op by op and eager may be faster -- but nothing changes shape: the warning
    # that tells the user to pad shapes is for steps whose clusters keep changing (probe D, r3_warn.py)
    monkeypatch.setattr(auto_jit, "WARMUP_STEPS", 2)
    monkeypatch.setattr(auto_jit, "TROUBLED_STEPS", 2)
    _fake_clock(auto_jit, monkeypatch, clusters=10.0, eager=1.0)  # (a step as clusters takes 10, eagerly 1)

    def run(n_steps):
        mge.random.seed(0)
        net = M.Sequential(M.Linear(4, 8), M.Linear(8, 8), M.Linear(8, 3))
        opt, gm = optim.SGD(net.parameters(), lr=0.1), GradManager().attach(net.parameters())
        x = mge.Tensor(np.random.RandomState(0).standard_normal((5, 4)).astype("float32"))
        norms = []
        for _ in range(n_steps):
            with gm:
                gm.backward((net(x) ** 2).mean())
            norms.append([float(F.norm(p.grad)) for p in net.parameters()])
            opt.step().clear_grad()
        return norms

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = run(30)
    assert auto_jit_stats()["eager_steps"] >= 5, auto_jit_stats()  # (the timer chose eager: it is faster here)
    assert not [str(w.message) for w in caught if "auto-jit" in str(w.message)]
    mge.config.auto_jit = False
    np.testing.assert_allclose(got, run(30), rtol=1e-5)


def _solver(A, b, iters):
    """Gradient descent on ``A w = b``, reading the residual's norm on the host every iteration."""
    w = F.zeros((8, 1))
    r = F.matmul(A, w) - b
    for _ in range(iters):
        if F.sum(r * r).item() < 0:
            break
        w = w - 0.2 * r
        r = F.matmul(A, w) - b
    return w.numpy()


@pytest.mark.parametrize("eager_faster", [True, False])
def test_a_loop_reading_every_few_ops_runs_its_iterations_eagerly_where_that_is_faster(auto_jit, monkeypatch,
                                                                                        eager_faster):
    # no opt.step() in the loop: no step timer. Its read line gets a timer of its own (iterations read to read);
    # eager iterations collect nothing, and the pause ends at the loop's end (no read there for a while)
    monkeypatch.setattr(auto_jit, "STATIC_TIMER", True)
    # (an iteration as a cluster takes 10, eagerly 1 -- or the other way round)
    _fake_clock(auto_jit, monkeypatch, clusters=10.0 if eager_faster else 1.0, eager=1.0 if eager_faster else 10.0)
    rng = np.random.RandomState(0)
    a = rng.standard_normal((8, 8)).astype("float32")
    A = mge.Tensor(a @ a.T / 8 + np.eye(8, dtype="float32"))
    b = mge.Tensor(rng.standard_normal((8, 1)).astype("float32"))
    got = [_solver(A, b, 12) for _ in range(12)]
    stats = auto_jit_stats()
    if eager_faster:
        assert stats["eager_reads"] > 60, stats
    else:
        assert stats["eager_reads"] <= 2 * auto_jit.READ_PROBE, stats  # (its probe only)
    # after the loop, work with no read at that line is collected again
    x = mge.Tensor(np.ones((4, 4), "float32"))
    for _ in range(200):
        x = x * 1.0001
    assert not auto_jit._local.paused and auto_jit._local.cluster.ops
    np.testing.assert_allclose(x.numpy(), np.full((4, 4), 1.0001 ** 200, "float32"), rtol=1e-5)
    mge.config.auto_jit = False
    want = _solver(A, b, 12)
    for g in got:
        np.testing.assert_allclose(g, want, rtol=1e-5)


def test_a_loop_with_a_step_in_its_body_leaves_its_reads_to_the_step_timer(auto_jit, monkeypatch):
    monkeypatch.setattr(auto_jit, "STATIC_TIMER", True)
    monkeypatch.setattr(auto_jit, "_choose_mode", lambda loc, site: None)  # (the step timer apart: reads only)
    _fake_clock(auto_jit, monkeypatch, clusters=10.0, eager=1.0)  # (eager would be faster)
    net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 3))
    opt, gm = optim.SGD(net.parameters(), lr=0.1), GradManager().attach(net.parameters())
    x = mge.Tensor(np.random.RandomState(0).standard_normal((5, 4)).astype("float32"))
    for _ in range(40):
        with gm:
            loss = (net(x) ** 2).mean()
            gm.backward(loss)
        loss.item()
        opt.step().clear_grad()
    assert auto_jit_stats()["eager_reads"] == 0, auto_jit_stats()
    assert auto_jit._reads and all(st[1] is None for st in auto_jit._reads.values())


def test_gradient_ops_are_typed_without_tracing_them(auto_jit, monkeypatch):
    # a gradient op's outputs have its differentiated inputs' types: collecting it does not trace (linearize) the
    # forward a second time. Checked here against the trace on a step with convolutions, batch norm, weak-typed
    # Python scalars, integer labels and a reduction
    monkeypatch.setattr(auto_jit, "_CHECK_VJP", True)
    auto_jit._SHAPES.clear()
    mge.random.seed(0)
    net = M.Sequential(M.Conv2d(2, 4, 3, padding=1), M.BatchNorm2d(4), M.ReLU(), M.AvgPool2d(2))
    head = M.Linear(16, 3)
    params = list(net.parameters()) + list(head.parameters())
    gm = GradManager().attach(params)
    x = mge.Tensor(np.random.RandomState(0).standard_normal((2, 2, 4, 4)).astype("float32"))
    with gm:
        h = F.flatten(net(x), 1) * 0.5 + 1
        loss = F.nn.cross_entropy(head(h), mge.Tensor([0, 2], dtype="int32")) + (h ** 2).mean() / 3
        gm.backward(loss)
    grads = [p.grad.numpy() for p in params]
    assert all(np.isfinite(g).all() for g in grads)
    assert any(dict(op.params).get("op") is not None for op, _ in auto_jit._SHAPES), "no gradient op collected"


def test_the_backward_cut_switch_keeps_eager_results(auto_jit, monkeypatch):
    # CUT_AT_BACKWARD (off by default; the GPU experiment): the forward runs at gm.backward, the rest at the read
    monkeypatch.setattr(auto_jit, "CUT_AT_BACKWARD", True)

    def run():
        mge.random.seed(0)
        net = M.Sequential(M.Linear(4, 8), M.BatchNorm1d(8), M.ReLU(), M.Dropout(0.2), M.Linear(8, 3))
        opt, gm = optim.Adam(net.parameters(), lr=0.01), GradManager().attach(net.parameters())
        rng = np.random.RandomState(0)
        losses = []
        for _ in range(6):
            x = mge.Tensor(rng.standard_normal((5, 4)).astype("float32"))
            with gm:
                loss = F.nn.cross_entropy(net(x), mge.Tensor(rng.randint(0, 3, 5).astype("int32")))
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(loss.item())
        return losses, [p.numpy() for p in net.parameters()]

    got, params = run()
    assert any(reason == "gm.backward" for _, reason, _ in auto_jit_stats()["cuts"]), auto_jit_stats()["cuts"]
    mge.config.auto_jit = False
    want, want_params = run()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip(params, want_params):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)


def _tuned_init(net):
    """Gives ``net``'s Linear layers the initial weights megxla drew before session 79 (NumPy generators seeded by
    a key split off the global generator): the count-reading tests below are tuned on the counts they give.
    (Since then the initialisers draw MegEngine's numbers, whose counts of seed 0 shrink to 0-2 by the 30th
    step, where the count's part is too small to split.)"""
    for m in net.modules():
        if isinstance(m, M.Linear):
            key = mge.random.next_key().numpy().tolist()
            z = np.random.default_rng(key + [0]).standard_normal(m.weight.shape, dtype=np.float32)
            m.weight._reset(mge.Tensor(z * np.float32(np.sqrt(1 / m.in_features))))


def _count_read_training(steps, momentum=0.9, longer_every=0, before_step=None):
    """A step that reads a count on the host and then works on that many elements (cond_take): its clusters
    change every step in the few ops touching the count. ``longer_every``: every so many steps, two ops more;
    ``before_step(i)``: called at each step's start."""
    mge.random.seed(0)
    net = M.Sequential(M.Linear(6, 16), M.ReLU(), M.Linear(16, 5))
    _tuned_init(net)
    opt = optim.SGD(net.parameters(), lr=0.05, momentum=momentum)
    gm = GradManager().attach(net.parameters())
    rng = np.random.RandomState(0)
    losses, counts = [], []
    for i in range(steps):
        if before_step is not None:
            before_step(i)
        x = mge.Tensor(rng.standard_normal((8, 6)).astype("float32"))
        y = mge.Tensor(rng.randint(0, 5, 8).astype("int32"))
        with gm:
            logits = net(x)
            n = int((logits > 0).sum())
            pos, _ = F.cond_take(logits > 0, logits)
            loss = F.nn.cross_entropy(logits, y) + 0.1 * (pos * pos).sum() / max(n, 1)
            if longer_every and i % longer_every == longer_every - 1:
                loss = loss + 0.01 * F.abs(pos).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.item())
        counts.append(n)
    slots = [v.numpy() for s in opt._state.values() for v in s.values()]
    return losses, counts, [p.numpy() for p in net.parameters()], slots


@pytest.fixture
def unpadded(monkeypatch):
    """cond_take's elements indexed as they are (their clusters changing with the count), as without
    ``MEGXLA_AUTO_JIT_PAD_SELECTIONS``: the clusters of a site that change in some ops, run in parts."""
    from megxla.jit import _padded
    monkeypatch.setattr(_padded, "ON", False)
    _padded.install(True)
    yield
    monkeypatch.undo()
    _padded.install(mge.config.auto_jit)


def _same_as_eager(steps, got, counts, params, slots):
    """``_count_read_training(steps)``'s losses, counts, parameters and slots under auto-jit are eager's."""
    mge.config.auto_jit = False
    want, want_counts, want_params, want_slots = _count_read_training(steps)
    assert counts == want_counts
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip(params + slots, want_params + want_slots):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)


def test_a_count_read_on_the_host_keeps_the_rest_of_the_step_one_executable(auto_jit):
    # cond_take's elements kept in place: the clusters do not change with their count -- none runs in parts
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, counts, params, slots = _count_read_training(24)
    stats = auto_jit_stats()
    assert len(set(counts)) >= 10, counts
    assert stats["split_clusters"] == 0 and stats["compiled"] <= 4, stats
    _same_as_eager(24, got, counts, params, slots)


def test_a_count_read_on_the_host_runs_the_rest_of_the_step_compiled(auto_jit, unpadded):
    # the clusters after the read change every step only in the ops on the `n` selected elements: they run in
    # parts, and the backward of the network with the optimizer compiles once for all counts
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no compile storm, no megamorphic warning
        got, counts, params, slots = _count_read_training(24)
    stats = auto_jit_stats()
    assert len(set(counts)) >= 10, counts  # (the count does change)
    assert stats["split_clusters"] >= 18, stats
    assert not stats["megamorphic"], stats
    # the forward, the first cluster after the read, the unchanging parts (3: the loss, the backward to the selected
    # elements' gradient, the rest), and the changing part for the counts that recurred -- not one per count
    assert stats["compiled"] <= 12 < len(set(counts)) + 4, stats
    assert stats["cache_hits"] >= 2 * 18, stats  # the forward and the unchanging parts, every step
    _same_as_eager(24, got, counts, params, slots)


def test_a_large_unchanging_part_compiles_beside_its_runs_op_by_op(auto_jit, unpadded, monkeypatch):
    # (YOLOX's backward and update, 2,211 ops, compiled inside its third step: 17-45 s against eager's 7 s steps)
    # the part runs op by op while its executable compiles on a background thread, and from its 3rd run on from it
    monkeypatch.setattr(_autojit, "BACKGROUND_OPS", 10)  # (its parts: 5, 6 and 12 ops)
    monkeypatch.setattr(_autojit._persist, "kept_optimized", lambda key: False)  # (as on a cold cache)
    monkeypatch.setattr(_autojit, "_cache", type(_autojit._cache)())  # (not the executables the tests before made)
    from megxla.jit import _tiers
    waits = []
    monkeypatch.setattr(_tiers._Tiered, "_switch", lambda self, orig=_tiers._Tiered._switch: (
        waits.append(self.runs), orig(self))[1])
    got, counts, params, slots = _count_read_training(24)
    stats = auto_jit_stats()
    assert stats["split_clusters"] >= 18 and stats["tiered"] >= 1 and stats["tier_ups"] == stats["tiered"], stats
    assert waits and min(waits) == _tiers.SWITCH_RUN, waits  # (it takes over at a fixed run, not when ready)
    _same_as_eager(24, got, counts, params, slots)
    _tiers._wait_for_tier_ups()
    assert _tiers.in_flight[0] == 0  # (no step timer is left waiting)


def test_a_cluster_of_another_length_now_and_then_leaves_the_sites_parts_as_they_were(auto_jit, unpadded):
    # every 6th step takes a branch of two more ops (the zoo's segmentation: a batch without ignored pixels): its
    # cluster has another length. The site's usual clusters go on running in parts -- the changes seen so far are
    # kept per length -- instead of starting over, whole and op by op, until their positions changed twice again
    stats = {}

    def at_12th(i):
        if i == 12:
            stats.setdefault("before", auto_jit_stats())

    got, _, params, _ = _count_read_training(36, longer_every=6, before_step=at_12th)
    before, after = stats["before"], auto_jit_stats()
    assert after["split_clusters"] - before["split_clusters"] == 24, (before, after)  # every step from the 12th
    mge.config.auto_jit = False
    want, _, want_params, _ = _count_read_training(36, longer_every=6)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip(params, want_params):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)


def test_changing_ops_whose_shapes_recur_are_compiled_per_shape(auto_jit, unpadded):
    # a count taking four values: the changing part (16 ops and more: a smaller one runs op by op) recurs, and is
    # compiled for each (no op-by-op steps left; the first two counts' whole clusters were compiled at first sight)
    w = mge.Tensor(np.ones(3, "float32"))

    def chain(v):
        for _ in range(8):
            v = v * 1.01 + 0.1
        return v

    def step(k):
        x = mge.Tensor(np.arange(12, dtype="float32").reshape(3, 4) - (k % 4))
        h = F.exp(x * 0.1) @ F.ones((4, 3)) + w
        sel, _ = F.cond_take(x > 4, x)
        out = chain(chain(h * 2)).sum() + chain(sel).sum() + h.mean()  # (most of its ops do not change)
        xn = x.numpy()
        hn, sn = np.exp(xn * 0.1) @ np.ones((4, 3)) + 1, xn[xn > 4]
        np.testing.assert_allclose(out.numpy(), chain(chain(hn * 2)).sum() + chain(sn).sum() + hn.mean(), rtol=1e-5)

    for k in range(30):
        step(k)
    assert auto_jit_stats()["megamorphic"] == [], auto_jit_stats()
    reset_auto_jit_stats()
    for k in range(4):
        step(k)
    stats = auto_jit_stats()
    assert stats["compiled"] == 0 and stats["eager_clusters"] == 0 and stats["split_clusters"] >= 2, stats


def test_a_program_alternating_between_two_shapes_compiles_each_whole(auto_jit):
    w = mge.Tensor(np.ones(4, "float32"))
    for k in range(12):
        x = mge.Tensor(np.ones((4 + 2 * (k % 2), 4), "float32"))
        (F.exp(x @ F.ones((4, 4))) * w + 1).sum().numpy()
    stats = auto_jit_stats()
    assert stats["split_clusters"] == 0 and stats["compiled"] == 2, stats
    assert stats["cache_hits"] == 8, stats  # (each compiled at its second sighting)


def test_a_part_that_fails_continues_op_by_op_from_where_it_failed(auto_jit, unpadded, monkeypatch):
    # a part's executable fails (after the parts before it took effect and consumed their donated inputs): the ops
    # not run yet run op by op from there, and the step computes what eager computes
    real = auto_jit._run_keyed
    failed = []

    def flaky(ops, avals, inputs, in_ids, out_ids, donate, reason, site, whole, *rest, **named):
        if not whole and len(failed) < 6 and "[part" in site[2] and not site[2].endswith("[part 1]"):
            failed.append(site)
            raise RuntimeError("an executable failed")
        return real(ops, avals, inputs, in_ids, out_ids, donate, reason, site, whole, *rest, **named)

    monkeypatch.setattr(auto_jit, "_run_keyed", flaky)
    got, counts, params, slots = _count_read_training(16)
    assert len(failed) == 6 and auto_jit_stats()["split_clusters"] >= 6, (failed, auto_jit_stats())
    mge.config.auto_jit = False
    want, want_counts, want_params, want_slots = _count_read_training(16)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip(params + slots, want_params + want_slots):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)


def test_a_cluster_compiled_under_one_matmul_precision_is_not_run_under_another(auto_jit):
    # JAX reads the float32 matmul precision when it lowers a cluster: an executable lowered under "highest" would
    # run float32 matmuls at full precision after the program asked for "default" (bfloat16 passes on GPUs)
    a = mge.Tensor(np.random.RandomState(0).randn(16, 16).astype("float32"))
    saved = mge.config.matmul_precision
    try:
        for prec in ("highest", "default", "highest"):
            mge.config.matmul_precision = prec
            for _ in range(3):
                (F.matmul(a, a) * 2 + 1).sum().numpy()
    finally:
        mge.config.matmul_precision = saved
    stats = auto_jit_stats()
    assert stats["compiled"] == 2 and stats["cache_hits"] >= 3, stats  # (one per precision, the third reused)


def _read_every_4th(steps):
    mge.random.seed(0)
    net = M.Sequential(M.Linear(8, 32), M.ReLU(), M.Linear(32, 4))
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(net.parameters())
    rng = np.random.RandomState(0)
    read = []

    def train_step(i, x, y):  # the loss dies with the function's locals, except on the steps that read it
        with gm:
            loss = F.nn.cross_entropy(net(mge.Tensor(x)), mge.Tensor(y))
            gm.backward(loss)
        opt.step().clear_grad()
        if i % 4 == 3:
            read.append(loss.item())

    for i in range(steps):
        train_step(i, rng.standard_normal((16, 8)).astype("float32"), rng.randint(0, 4, 16).astype("int32"))
    return read, [p.numpy() for p in net.parameters()]


def test_a_step_whose_results_change_with_a_periodic_read_is_not_run_op_by_op(auto_jit):
    # a step function reading its loss every 4th step: the loss is a result of those steps' clusters only. The
    # cluster compiled first serves the others, or one with both results compiles at once (the ops recur), instead
    # of a key of its own run op by op first (cold eager kernels: ~1.5 s for a small ConvNet)
    _read_every_4th(1)  # (the model's construction and its first step)
    before = auto_jit_stats()
    got, params = _read_every_4th(16)
    stats = auto_jit_stats()
    assert stats["eager_clusters"] - before["eager_clusters"] <= 2, (before, stats)  # (the constructions' ops)
    assert stats["compiled"] - before["compiled"] <= 1 and stats["cache_hits"] >= 14, stats
    mge.config.auto_jit = False
    want, want_params = _read_every_4th(16)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for p, q in zip(params, want_params):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)


def test_division_by_a_square_root_is_eagers_to_the_bit():
    # XLA rewrites ``a / sqrt(b)`` into ``a * rsqrt(b)``: a third of float32 values an ulp apart, which a QAT
    # layer's BatchNorm folding (``1 / sqrt(var + eps)``, then fake quantization) turns into other weight levels
    from optable import auto_jit_compiling_everything
    rng = np.random.RandomState(0)
    a_np, b_np = rng.rand(4096).astype("float32") + 0.5, rng.randn(4096).astype("float32")

    def run(grad):
        a, b = mge.Tensor(a_np), mge.Tensor(b_np)
        gm = GradManager().attach([a, b] if grad else [])
        with gm:
            y = 1.0 / F.sqrt(a) + b / F.sqrt(a + 1e-5)
            gm.backward((y * y).sum())
        return [y.numpy()] + ([a.grad.numpy(), b.grad.numpy()] if grad else [])

    for grad in (False, True):
        want = run(grad)
        with auto_jit_compiling_everything() as aj:
            got = run(grad)
            assert aj.auto_jit_stats()["compiled"] + aj.auto_jit_stats()["cache_hits"] >= 1
        assert np.array_equal(got[0], want[0]), int((got[0] != want[0]).sum())
        for g, w in zip(got[1:], want[1:]):  # (gradients: XLA's fusion order; the two terms of a.grad cancel)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)


def _tier_loop(steps):
    mge.random.seed(0)
    w = mge.Parameter(np.linspace(-1, 1, 64, dtype="float32").reshape(8, 8))
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    gm = GradManager().attach([w])
    x = mge.Tensor(np.random.RandomState(0).randn(4, 8).astype("float32"))
    losses = []
    for _ in range(steps):
        with gm:
            h = x
            for _ in range(4):
                h = F.tanh(F.matmul(h, w)) * 0.9 + 0.05
            loss = (h * h).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("part_ops", [None, 16])
def test_a_large_cluster_runs_quickly_compiled_then_optimized_at_a_fixed_run(auto_jit, monkeypatch, part_ops):
    from megxla.jit import _tiers
    import jax
    if _tiers.fast_options() is None:
        pytest.skip("tiered compilation is the CPU's (where its XLA knows the quick options)")
    mge.config.auto_jit = False
    want = _tier_loop(12)
    mge.config.auto_jit = True
    monkeypatch.setattr(_tiers, "ENABLED", True)  # (off by default: MEGXLA_TIERED=1)
    monkeypatch.setattr(_tiers, "MIN_OPS", 8)  # (the loop's step cluster: ~60 ops)
    # (16: the quick tier in 3 parts, the forward's residuals not shared with gradient ops in later parts)
    monkeypatch.setattr(_tiers, "PART_OPS", part_ops or 10**6)
    monkeypatch.setattr(_tiers, "MAX_PARTS", 3)
    monkeypatch.setattr(_tiers, "SWITCH_WAIT", 600.0)  # (a loaded machine's compile still switches at that run)
    parts = _tiers.stats["parts"]
    # (not through the kept programs: an earlier run may have marked them optimized, which skips the quick tier)
    monkeypatch.setattr(_autojit._persist, "compile_cached", lambda *a, **k: None)
    _autojit._cache.clear()
    _autojit._families.clear()
    got = _tier_loop(12)
    s = auto_jit_stats()
    assert s["tiered"] >= 1 and s["tier_ups"] >= 1
    np.testing.assert_allclose(got, want, rtol=1e-5)
    exes = [e.executable for e in _autojit._cache.values() if e.executable is not None]
    # (a cluster's executable is called with the zero its program takes last: ``_with_zero`` holds the tiered one)
    tiered = [e for e in (getattr(e, "executable", e) for e in exes) if isinstance(e, _tiers._Tiered)]
    assert not _tiers._threads  # (every tier-up finished: none left running)
    assert any(t.optimize is None and t.runs == _tiers.SWITCH_RUN for t in tiered)  # (switched at that run)
    assert (_tiers.stats["parts"] - parts >= 2) == bool(part_ops)


def test_the_switch_to_the_optimized_tier_waits_a_bounded_time_then_comes_when_it_is_ready(monkeypatch):
    # an optimized compile that outlasts the switch run's wait (a 3,500-op unrolled LSTM step's: 47 s, its 8th
    # step waited 46 s) leaves the quick executable running; the optimized one takes over once it exists
    import threading
    from megxla.jit import _tiers
    monkeypatch.setattr(_tiers, "SWITCH_WAIT", 0.05)
    monkeypatch.setattr(_tiers, "SWITCH_STEPS", 0)
    release = threading.Event()

    def optimize():  # (the background compile, held until released)
        release.wait(60)
        return lambda x: ("optimized", x)

    exe = _tiers.tiered(optimize, lambda x: ("quick", x), 1000)
    got = [exe(k)[0] for k in range(_tiers.SWITCH_RUN + 2)]
    assert got == ["quick"] * (_tiers.SWITCH_RUN + 2) and exe.optimize is not None  # (no wait past the bound)
    release.set()
    exe.thread.join(60)
    assert exe(0) == ("optimized", 0) and exe.optimize is None and exe.runs == _tiers.SWITCH_RUN + 3


def _overflow_loop(steps):
    """Expressions XLA's algebraic simplifier rewrites across a result (``log(exp(a))`` to ``a``, ``exp(a) *
    exp(b)`` to ``exp(a + b)``, ``log(a ** k)`` to ``k * log|a|``, ``(a / b) / c`` to ``a / (b * c)``, a division by a
    square root to a reciprocal square root, ``sqrt(a * a)`` to ``|a|``, ``a * mask`` to a select, a division by a
    broadcast value to a product with its reciprocal), on values where
    eager's stored results overflow or round, or are nan: each step's values and gradient."""
    x = mge.Parameter(np.array([100.0, -100.0, 0.5, 3.0], "float32"))
    q = mge.Tensor(np.array([1e30, 1e-30, 3.0, 0.7], "float32"))
    v = mge.Tensor(np.linspace(0.1, 3.0, 64, dtype="float32"))
    gm = GradManager().attach(x)
    out = []
    for _ in range(steps):
        with gm:
            a = F.log(F.exp(x))
            b = F.exp(x) * F.exp(-x)
            c = F.exp(x) / F.exp(x * 2)
            d = F.log((x * 1e8) ** 4)
            e = (q / q) / q
            f = q / (q / q)
            g = 1 / F.sqrt(q * 3 + x)
            h = F.sqrt(q * q) + 1 / F.sqrt(q * q)  # (eager: the square of 1e30 is inf, its root inf, 1 / it 0)
            m = F.exp(x) * (x < 50).astype("float32")  # (eager: inf * 0 is nan)
            n = v / F.broadcast_to(x[3], v.shape)  # (eager divides by the whole array, not by a reciprocal)
            gm.backward((F.where(F.isinf(a), 0, a) + F.where(F.isnan(b), 0, b) + g).sum())
        out.append([t.numpy() for t in (a, b, c, d, e, f, g, h, m, n, x.grad)])
        x.grad = None
    return out


@pytest.mark.parametrize("tier", ["optimized", "quick"])
def test_compiled_clusters_keep_eagers_overflows_and_roundings(auto_jit, monkeypatch, tier):
    # Eager's ops read each other's stored results; a compiled cluster's results are behind a barrier and a
    # rounding to their own precision, which XLA's simplifier does not rewrite through -- in the optimizing
    # pipeline and in the quick tier's (older loop emitters: a barrier alone lost there, log(exp(100)) was 100)
    from megxla.jit import _tiers
    mge.config.auto_jit = False
    want = _overflow_loop(6)
    mge.config.auto_jit = True
    monkeypatch.setattr(_autojit._persist, "compile_cached", lambda *a, **k: None)
    if tier == "quick":
        monkeypatch.setattr(_tiers, "ENABLED", True)
        monkeypatch.setattr(_tiers, "MIN_OPS", 8)
        monkeypatch.setattr(_tiers, "START_RUN", 10**6)  # (the quick executable runs every step)
    else:
        monkeypatch.setattr(_tiers, "ENABLED", False)
    _autojit._cache.clear()
    _autojit._families.clear()
    got = _overflow_loop(6)
    assert auto_jit_stats()["cache_hits"] >= 3
    if tier == "quick":
        assert auto_jit_stats()["tiered"] >= 1
    for step_got, step_want in zip(got, want):
        for g, w in zip(step_got[:-1], step_want[:-1]):
            np.testing.assert_array_equal(g, w)
        # (gradients: XLA's fusion order -- a product and a sum fused into one FMA -- within an ulp; the same
        # infinities and NaNs)
        np.testing.assert_allclose(step_got[-1], step_want[-1], rtol=1e-6)


def test_a_quick_tier_in_parts_is_optimized_under_the_matmul_precision_of_its_key(auto_jit, monkeypatch):
    # The tier-up lowers the whole program later, on another thread: a program that has changed
    # config.matmul_precision since must not get an optimized executable of the other precision.
    from megxla.jit import _tiers
    import jax
    if _tiers.fast_options() is None:
        pytest.skip("tiered compilation is the CPU's (where its XLA knows the quick options)")
    for name, value in (("ENABLED", True), ("MIN_OPS", 8), ("PART_OPS", 16), ("MAX_PARTS", 3), ("START_RUN", 10**6)):
        monkeypatch.setattr(_tiers, name, value)
    monkeypatch.setattr(_autojit._persist, "compile_cached", lambda *a, **k: None)
    _autojit._cache.clear()
    _autojit._families.clear()
    parts = _tiers.stats["parts"]
    _tier_loop(2)
    assert _tiers.stats["parts"] - parts >= 2
    tiered = [e.executable for e in _autojit._cache.values() if isinstance(e.executable, _tiers._Tiered)]
    assert tiered
    saved = mge.config.matmul_precision
    mge.config.matmul_precision = "bfloat16"
    try:
        texts = [t.optimize().as_text() for t in tiered]
    finally:
        mge.config.matmul_precision = saved
    assert all("operand_precision={highest,highest}" in t for t in texts if " dot(" in t)
    assert any(" dot(" in t for t in texts)


@pytest.mark.parametrize("part_ops", [10**6, 16])
def test_a_warm_start_loads_the_optimized_executable_at_once(tmp_path, part_ops):
    # The first process runs the quick executable (16: in parts), then the optimized one, which JAX's cache keeps;
    # a warm start loads the optimized one at once (no quick tier: ~0.3-0.8 s of a zoo model's first step), and
    # warm starts compute the same bits as each other.
    script = textwrap.dedent("""
        import sys, numpy as np
        sys.path.insert(0, %r)
        import megxla as mge
        from megxla.jit import _tiers, auto_jit_stats
        import test_autojit as T
        _tiers.ENABLED, _tiers.MIN_OPS, _tiers.PART_OPS, _tiers.MAX_PARTS = True, 8, %d, 3
        mge.config.auto_jit = True
        print("LOSSES", repr(T._tier_loop(10)))
        print("TIERS", auto_jit_stats()["tiered"], auto_jit_stats()["tier_ups"], _tiers.stats["parts"])
    """) % (os.path.dirname(os.path.abspath(__file__)), part_ops)
    env = dict(os.environ, MEGXLA_COMPILATION_CACHE="1", MEGXLA_COMPILATION_CACHE_DIR=str(tmp_path))
    runs = []
    for _ in range(3):
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
        out = dict(x.split(" ", 1) for x in p.stdout.splitlines() if x.startswith(("LOSSES", "TIERS")))
        assert "TIERS" in out, p.stderr[-3000:]
        runs.append((eval(out["LOSSES"]), [int(v) for v in out["TIERS"].split()]))
    (cold, cold_tiers), (warm, warm_tiers), (warm2, _) = runs
    assert cold_tiers[0] >= 1 and cold_tiers[1] >= 1  # tiered, and switched to the optimized executable
    assert (cold_tiers[2] >= 2) == (part_ops == 16)
    assert warm_tiers[0] < cold_tiers[0]  # the step's cluster: optimized at once
    assert warm == warm2
    np.testing.assert_allclose(warm, cold, rtol=1e-5)


_REGNET_FIRST_STEP = """
import numpy as np
import jax
import megxla as mge, megxla.functional as F, megxla.module as M
from megxla.autodiff import GradManager
from megxla.jit import _tiers, auto_jit_stats

options = []
compile_ = jax.stages.Lowered.compile
def spy(self, compiler_options=None, **kw):
    options.append(compiler_options)
    return compile_(self, compiler_options=compiler_options, **kw)
jax.stages.Lowered.compile = spy

class Block(M.Module):  # RegNetX's: 1x1, 3x3 group convolution, 1x1, BatchNorm after each (GELU: no kinks)
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = M.Sequential(M.Conv2d(cin, cout, 1, bias=False), M.BatchNorm2d(cout), M.GELU(),
                                 M.Conv2d(cout, cout, 3, stride, 1, groups=cout // 8, bias=False),
                                 M.BatchNorm2d(cout), M.GELU(), M.Conv2d(cout, cout, 1, bias=False),
                                 M.BatchNorm2d(cout))
        self.proj = M.Sequential(M.Conv2d(cin, cout, 1, stride, bias=False), M.BatchNorm2d(cout)) \\
            if stride != 1 or cin != cout else None

    def forward(self, x):
        return F.gelu(self.body(x) + (x if self.proj is None else self.proj(x)))

def net():
    mge.random.seed(0)
    layers, cin = [M.Conv2d(3, 32, 3, 2, 1, bias=False), M.BatchNorm2d(32), M.GELU()], 32
    for width, depth in ((24, 1), (56, 1), (152, 4), (368, 7)):  # RegNetX-200MF's stages
        for i in range(depth):
            layers.append(Block(cin, width, 2 if i == 0 else 1))
            cin = width
    return M.Sequential(*layers), M.Linear(cin, 100)

rng = np.random.RandomState(1)
x = mge.tensor(rng.randn(8, 3, 64, 64).astype("float32"))
y = mge.tensor(rng.randint(0, 100, 8).astype("int32"))
grads = []
for auto in (False, True):
    mge.config.auto_jit = auto
    del options[:]
    body, fc = net()
    params = list(body.parameters()) + list(fc.parameters())
    gm = GradManager().attach(params)
    with gm:
        loss = F.nn.cross_entropy(fc(F.mean(body(x), axis=(2, 3))), y)
        gm.backward(loss)
    loss.item()
    grads.append([p.grad.numpy() for p in params])
scale = max(np.abs(g).max() for g in grads[0])
quick = _tiers.fast_options()
print("ERR", max(np.abs(a - b).max() for a, b in zip(*grads)) / scale)
print("QUICK", sum(1 for o in options if quick and o == quick), auto_jit_stats()["tiered"], auto_jit_stats()["ops"])
"""


def test_a_cold_first_step_is_compiled_optimized_and_keeps_eagers_numbers(tmp_path):
    # A zoo network's cold first step (one cluster of ~300 ops) is compiled optimized at once, and its gradients are
    # eager's. The quick tier (XLA:CPU at -O0 / its older emitters, jit/_tiers.py) rounded 3x further from eager (this
    # smooth network: 3.5e-5 against 1.2e-5 of the largest gradient) -- with ReLUs, enough to flip activations near
    # zero in the first steps (the same network with ReLUs: 4% of the largest gradient, 37% of a layer's) -- so it is
    # off unless asked for
    env = {k: v for k, v in os.environ.items() if k != "MEGXLA_TIERED"}
    env.update(MEGXLA_COMPILATION_CACHE="1", MEGXLA_COMPILATION_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", _REGNET_FIRST_STEP], capture_output=True, text=True, env=env,
                       timeout=600)
    out = dict(line.split(" ", 1) for line in p.stdout.splitlines() if line.startswith(("ERR ", "QUICK ")))
    assert "QUICK" in out, p.stderr[-3000:]
    quick, tiered, ops = (int(v) for v in out["QUICK"].split())
    assert ops >= 256 and quick == 0 and tiered == 0  # (large enough to be tiered, were tiering on)
    assert float(out["ERR"]) < 1e-4


@pytest.mark.parametrize("part_ops", [10**6, 16])
def test_an_xla_without_the_quick_options_compiles_optimized_at_once(auto_jit, monkeypatch, part_ops):
    from megxla.jit import _tiers
    import jax
    monkeypatch.setitem(_tiers.FAST_OPTIONS, jax.default_backend(), {"xla_no_such_option_megxla": True})
    monkeypatch.setattr(_tiers, "ENABLED", True)
    monkeypatch.setattr(_tiers, "MIN_OPS", 8)
    monkeypatch.setattr(_tiers, "PART_OPS", part_ops)
    monkeypatch.setattr(_autojit._persist, "compile_cached", lambda *a, **k: None)
    _autojit._cache.clear()  # (the test before compiled the same clusters)
    _autojit._families.clear()
    mge.config.auto_jit = False
    want = _tier_loop(3)
    mge.config.auto_jit = True
    np.testing.assert_allclose(_tier_loop(3), want, rtol=1e-5)
    assert auto_jit_stats()["tiered"] == 0 and _tiers.fast_options() is None


def test_a_step_timer_waits_for_tiered_clusters_to_run_optimized():
    # a step timer that timed the quick executables' runs would find the clusters slower than they run from the
    # 8th on (and run eagerly for its next 200 steps)
    from megxla.jit import _tiers
    saved = _tiers.in_flight[0]
    _tiers.in_flight[0] = 1
    try:
        t = _autojit.ModeTimer(warmup=5)
        modes = [t.next_mode() for _ in range(9)]
    finally:
        _tiers.in_flight[0] = saved
    assert all(modes)  # (past its warmup: tiered clusters still in flight)
    modes = [t.next_mode() for _ in range(_autojit.ModeTimer.PROBE)]
    assert all(modes)  # PROBE steps with every cluster optimized: the ones the comparison reads
    assert t.next_mode() is False  # then the eager probe
    t2 = _autojit.ModeTimer(warmup=5)  # nothing tiered: probes after its warmup
    assert [t2.next_mode() for _ in range(6)] == [True] * 5 + [False]


def _timed_small_steps(monkeypatch):
    """``run(steps, cluster_ms, eager_ms) -> (losses, modes)``: a small static training step, its timer on, timed by a
    clock that makes each step run as clusters ``cluster_ms`` long and each eager one ``eager_ms``."""
    monkeypatch.setattr(_autojit, "STATIC_TIMER", True)
    now = [0.0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: now[0]))

    def run(steps, cluster_ms, eager_ms):
        _autojit._steps.clear()
        _autojit._local.paused = False
        mge.random.seed(0)
        net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 3))
        opt, gm = optim.SGD(net.parameters(), lr=0.1), GradManager().attach(net.parameters())
        x = mge.Tensor(np.random.RandomState(0).randn(5, 4).astype("float32"))
        y = mge.Tensor(np.arange(5, dtype="int32") % 3)
        losses, modes = [], []
        for _ in range(steps):
            modes.append(not _autojit._local.paused)
            now[0] += (cluster_ms if modes[-1] else eager_ms) / 1e3
            with gm:
                loss = F.nn.cross_entropy(net(x), y)
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(loss.item())
        return losses, modes
    return run


def test_a_small_static_step_runs_eagerly_where_that_is_clearly_faster(auto_jit, monkeypatch):
    # a small step whose compute is as long as its Python: eager overlaps the two, a cluster cannot (the digits
    # demo: 0.95 ms eager, 1.5 ms auto-jit). Timed with a clock that makes cluster steps 2 ms and eager steps 1 ms.
    run = _timed_small_steps(monkeypatch)
    # (timed from its 5th step: 10 steps as clusters, 5 eager, then the faster)
    losses, modes = run(30, 2.0, 1.0)
    assert modes[:15] == [True] * 15 and not any(modes[-10:]), modes  # (eager after its probe)
    assert auto_jit_stats()["eager_steps"] >= 10
    _, modes = run(30, 1.1, 1.0)  # eager faster by less than STATIC_MARGIN: clusters stay
    assert all(modes[-10:]), modes
    mge.config.auto_jit = False
    want, _ = run(30, 1.0, 1.0)
    np.testing.assert_allclose(losses, want, rtol=1e-5)


def test_a_step_timers_first_eager_step_finds_its_kernels_compiled_ahead(auto_jit, monkeypatch):
    # Its clusters ran compiled, so the step's eager kernels were never compiled: the first eager step compiled them
    # one after another (a one-time 0.35-1.3 s step among 20-130 ms ones). At the switch, the step's ops -- every
    # cluster since the last step end and the pending one -- go to the kernel workers, and are waited for.
    monkeypatch.setattr(_autojit, "STATIC_TIMER", True)
    now = [0.0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: now[0]))
    warmed, in_warm = [], [False]
    real_ahead, real_warm = _autojit._kernels_ahead.compile_ahead, _autojit._warm_eager_kernels

    def compile_ahead(ops, env, shapes, input_type):
        if in_warm[0]:
            warmed.append([op for op, _, _ in ops])
        return real_ahead(ops, env, shapes, input_type)

    def warm(loc):
        in_warm[0] = True
        try:
            real_warm(loc)
        finally:
            in_warm[0] = False

    monkeypatch.setattr(_autojit._kernels_ahead, "compile_ahead", compile_ahead)
    monkeypatch.setattr(_autojit, "_warm_eager_kernels", warm)
    ran = []
    real_run = _autojit._dispatch.run_kernel
    monkeypatch.setattr(_autojit._dispatch, "run_kernel", lambda op, *a: (ran.append(op), real_run(op, *a))[1])
    mge.random.seed(0)
    net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 3))
    opt, gm = optim.SGD(net.parameters(), lr=0.1, momentum=0.9), GradManager().attach(net.parameters())
    x = mge.Tensor(np.random.RandomState(0).randn(5, 4).astype("float32"))
    y = mge.Tensor(np.arange(5, dtype="int32") % 3)
    first_eager = None
    for step in range(20):
        eager = _autojit._local.paused
        now[0] += 1e-3 if eager else 2e-3
        ran.clear()
        with gm:
            loss = F.nn.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        loss.item()
        if eager and first_eager is None:
            first_eager = set(ran)
    assert first_eager, "the timer ran no step eagerly"
    assert len(warmed) >= 1 and auto_jit_stats()["eager_steps"] >= 5
    given = {op for ops in warmed for op in ops}
    assert {op for op in first_eager if not op.transient and op.prim.eager_kernel is None} <= given
    n = len(warmed)
    for _ in range(60):  # (once per step line: later probes find the kernels there)
        with gm:
            gm.backward(F.nn.cross_entropy(net(x), y))
        opt.step().clear_grad()
    assert len(warmed) == n


def test_early_launch_executables_are_kept_by_the_clusters_key(auto_jit):
    # Two clusters with the same first op (a loop's body reading a value every iteration, and the cluster joining
    # its last iteration to the next call's start) take each other's guess: each call made the body's guess again
    # and compiled its executable again -- one compile per call without end, 5-8x slower than eager (probe G). And
    # each new thread's cluster planned its own guess: one compile per thread.
    import threading
    rng = np.random.RandomState(0)
    a = rng.standard_normal((8, 8)).astype("float32")
    A = mge.Tensor(a @ a.T / 8 + np.eye(8, dtype="float32"))
    b = mge.Tensor(rng.standard_normal((8, 1)).astype("float32"))

    def solve(iters):
        return _solver(A, b, iters)

    got = [solve(12) for _ in range(30)]
    stats = auto_jit_stats()
    assert stats["early_launches"] > 0 and stats["early_compiled"] <= 2, stats

    def work(out):
        out.append([solve(12) for _ in range(4)])

    for _ in range(4):  # (a new thread each time: its own cluster and guesses)
        out = []
        t = threading.Thread(target=work, args=(out,))
        t.start()
        t.join()
        got += out[0]
    assert auto_jit_stats()["early_compiled"] == stats["early_compiled"], auto_jit_stats()
    mge.config.auto_jit = False
    want = solve(12)
    for g in got:
        np.testing.assert_allclose(g, want, rtol=1e-5)


def _guessed_loop(event, steps=16, at=9):
    """A step reading a fresh input first and a state Tensor later (after the early launch), updated in place;
    at step ``at`` the program does ``event`` between the launch and that read."""
    s = mge.Tensor(np.ones(4, "float32"))
    other = mge.Tensor(np.full(4, 2.0, "float32"))
    outs = []
    for step in range(steps):
        a = mge.Tensor(np.arange(4, dtype="float32") + step)
        y = (a * 2 + 1).sum() * 0.5 - 1
        if step == at:
            if event == "new value":  # (host-side: no op)
                s._reset(mge.Tensor(np.full(4, 7.0, "float32")))
            elif event == "in-place op":
                s += 1
            elif event == "another tensor":
                s, other = other, s
            elif event == "host read":
                float(y)
        z = F.exp((y + s * 3) * 0.01).sum()
        if step == at and event == "one more op":
            z = z * 2
        s -= 0.1 * z / 100
        outs.append(z.item())
    return outs, s.numpy(), other.numpy()


@pytest.mark.parametrize("event", [None, "new value", "in-place op", "another tensor", "one more op", "host read"])
@pytest.mark.parametrize("rent", ["paid", "unpaid"])
def test_an_early_launch_is_used_only_where_the_cluster_is_the_guessed_one(auto_jit, monkeypatch, event, rent):
    # A recurring cluster runs before its last op is collected, on the values its inputs hold at that moment: a
    # program that then changes one of them, or issues other ops, gets its own values (the launched run is dropped)
    monkeypatch.setattr(_autojit._Guess, "early", lambda self: True)  # (not timed: launched whenever it can be)
    if rent == "unpaid":
        # (no second executable: the cluster's own one donates copies, so a dropped run leaves each input as it was)
        monkeypatch.setattr(_autojit, "EARLY_BUY_NOW", 0.0)
        monkeypatch.setattr(_autojit, "EARLY_RENT", float("inf"))  # (never paid here: copies throughout)
        monkeypatch.setattr(_autojit._persist, "kept", lambda key: False)
    mge.config.auto_jit = False
    want = _guessed_loop(event)
    mge.config.auto_jit = True
    got = _guessed_loop(event)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    stats = auto_jit_stats()
    assert stats["early_launches"] >= 8, stats  # (from the 5th step: 3 cache hits to learn, then every step)
    # (one launched run dropped where the program did something else; the rest of the step cut off by the host read,
    # ``(y + s * 3)...`` -- whose first op is the same record as the step's ``a * 2`` --, is not launched: ``3`` is not
    # the Tensor read there before)
    assert stats["early_misses"] == (0 if event is None else 1), stats
    assert stats["early_compiled"] == (rent == "paid") and stats["compiled"] <= 2, stats


def test_training_with_early_launches_equals_eager(auto_jit, monkeypatch):
    monkeypatch.setattr(_autojit._Guess, "early", lambda self: True)
    # (every compile counts as short: on a loaded machine one took over EARLY_BUY_NOW, and its early launch then
    # waited for a rent these 12 steps never paid -- no early launch to compare)
    monkeypatch.setattr(_autojit, "EARLY_BUY_NOW", float("inf"))
    mge.config.auto_jit = False
    want = _train(12)
    mge.config.auto_jit = True
    got = _train(12)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for k in want[1]:
        np.testing.assert_allclose(got[1][k], want[1][k], rtol=1e-5, atol=1e-6, err_msg=k)
    for a, b in zip(got[2], want[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[3], want[3])  # (Dropout's draws: the RNG key is read early, as a value)
    stats = auto_jit_stats()
    assert stats["early_launches"] >= 5 and stats["early_misses"] == 0, stats
    # the step's site counts the runs taken from early launches as hits (the megamorphic rule reads them)
    assert max(st[1] for st in auto_jit._sites.values()) >= stats["cache_hits"] - 1, (auto_jit._sites, stats)


@pytest.mark.parametrize("early_faster", [True, False])
def test_a_new_key_at_a_site_that_launches_early_compiles_one_executable_for_both_runs(auto_jit, monkeypatch,
                                                                                       early_faster):
    # a bucketed length (here a batch size) at a step that launches early: the new key's cluster launches early
    # too, and one executable, not donating, serves its launches and its own runs (a second one doubled what a cold
    # start compiles: 8 lengths of a small language model, 8 x 0.8 s) -- until its timer finds collecting the whole
    # cluster first faster: then its runs, all late, donate again (from an executable compiled then)
    now, before = [0.0], [0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: now[0]))
    _autojit._cache.clear()  # (each case compiles its own)
    _autojit._families.clear()

    def run(batches):
        mge.random.seed(0)
        net = M.Sequential(M.Linear(4, 16), M.ReLU(), M.Linear(16, 3))
        opt = optim.Adam(net.parameters(), lr=0.01)
        gm = GradManager().attach(net.parameters())
        rng = np.random.RandomState(0)
        losses = []
        for n in batches:
            x = mge.Tensor(rng.standard_normal((n, 4)).astype("float32"))
            y = mge.Tensor(rng.randint(0, 3, n).astype("int32"))
            with gm:
                loss = F.nn.cross_entropy(net(x), y)
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(loss.item())
            launched = _autojit._stats.launched > before[0]
            before[0] = _autojit._stats.launched
            now[0] += 1e-3 if launched == early_faster else 2e-3  # (a step launched early: 1 ms where faster)
        return losses, [p.numpy() for p in net.parameters()]

    batches = [8] * 24 + [5] * 24 + [8, 5] * 3
    got = run(batches)
    stats = auto_jit_stats()
    # (the first size: compiled, then its early executable; the second: one executable -- and where its launches
    # lost, a donating one compiled once that was found)
    assert stats["early_compiled"] == 1, stats
    assert stats["compiled"] == (2 if early_faster else 3), stats
    assert stats["early_misses"] == 0, stats
    assert (stats["early_launches"] > 30) is early_faster, stats
    mge.config.auto_jit = False
    want = run(batches)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("early_ms, late_ms, launched", [(2.0, 1.0, False), (1.0, 2.0, True)])
def test_early_launches_are_timed_against_collecting_the_whole_cluster(auto_jit, monkeypatch, early_ms, late_ms,
                                                                        launched):
    # On a CPU the launched run shares the cores with the Python collecting the rest of the step: where that is
    # slower, the guess stops launching after its probe (a clock making such steps 2 ms, the others 1 ms)
    now = [0.0]
    monkeypatch.setattr(_autojit.ModeTimer, "clock", staticmethod(lambda: now[0]))
    before = [0]

    def tick():
        n = _autojit._stats.launched
        now[0] += (early_ms if n > before[0] else late_ms) / 1e3
        before[0] = n

    x = mge.Tensor(np.ones(4, "float32"))
    state = mge.Tensor(np.zeros(4, "float32"))
    per_step = []
    for step in range(30):
        a = mge.Tensor(np.full(4, float(step), "float32"))
        state += F.tanh(a * x + state) * 0.1
        (state * 2).sum().item()
        per_step.append(_autojit._stats.launched)
        tick()
    late = per_step[-8:]
    assert (late[-1] > late[0]) is launched, per_step


def _random_step_program(seed):
    """A step of 3-12 random ops on a fresh input and three state Tensors, and 0-3 events (a host read, a state
    Tensor reset or rebound, another op, an in-place update) at random points of random steps."""
    import random
    r = random.Random(seed)
    body = [(r.choice(["mulc", "adds", "inplace", "exp", "subc", "muls", "maxs"]), r.randrange(3),
             r.choice([0.5, 2.0, 3.0, 0.1])) for _ in range(r.randint(3, 12))]
    events = {(r.randrange(4, 20), r.randrange(len(body))): (r.choice(["read", "reset", "swap", "extra", "inplace"]),
                                                             r.randrange(3)) for _ in range(r.randint(0, 3))}
    state = [mge.Tensor(np.full(4, float(i + 1), "float32")) for i in range(3)]
    outs = []
    for step in range(22):
        t = mge.Tensor(np.arange(4, dtype="float32") * 0.1 + step * 0.01)
        for k, (kind, i, c) in enumerate(body):
            event, j = events.get((step, k), (None, 0))
            if event == "read":
                float(t.sum())
            elif event == "reset":
                state[j]._reset(mge.Tensor(np.full(4, 0.5 + j, "float32")))
            elif event == "swap":
                state[j], state[(j + 1) % 3] = state[(j + 1) % 3], state[j]
            elif event == "extra":
                t = t * 1.5
            elif event == "inplace":
                state[j] += 0.25
            if kind == "mulc":
                t = t * c
            elif kind == "adds":
                t = t + state[i]
            elif kind == "inplace":
                state[i] -= t * 0.01
            elif kind == "exp":
                t = F.exp(t * 0.01)
            elif kind == "subc":
                t = t - c
            elif kind == "muls":
                t = t * state[i] * 0.1
            else:
                t = F.maximum(t, state[i] * c)
        outs.append(t.sum().item())
    return outs, [s.numpy() for s in state]


def test_early_launches_in_random_programs_with_random_events_equal_eager(auto_jit, monkeypatch):
    # (300 such programs: 4657 runs taken from early launches, 340 dropped, none wrong)
    monkeypatch.setattr(_autojit._Guess, "early", lambda self: True)
    taken = dropped = 0
    for seed in range(40):
        _autojit._sites.clear()
        _autojit._local.cluster.guesses.clear()
        reset_auto_jit_stats()
        mge.config.auto_jit = False
        want = _random_step_program(seed)
        mge.config.auto_jit = True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (programs whose events make new clusters: a megamorphic warning)
            got = _random_step_program(seed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6, err_msg=str(seed))
        for a, b in zip(got[1], want[1]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=str(seed))
        taken += auto_jit_stats()["early_launches"]
        dropped += auto_jit_stats()["early_misses"]
    assert taken >= 400 and dropped >= 10, (taken, dropped)


def _batch_loop(event, steps=16, at=9):
    """A step whose first op reads one host-made Tensor and whose later ops read another, made just before it (a
    batch and its labels); at step ``at`` the program makes another Tensor after the labels, or the two in the
    other order."""
    w = mge.Tensor(np.full((4,), 0.5, "float32"))
    outs = []
    for step in range(steps):
        if step == at and event == "other order":
            labels = mge.Tensor(np.arange(4, dtype="float32") - step)
            x = mge.Tensor(np.arange(4, dtype="float32") + step)
        else:
            x = mge.Tensor(np.arange(4, dtype="float32") + step)
            labels = mge.Tensor(np.arange(4, dtype="float32") - step)
        if step == at and event == "one more tensor":
            extra = mge.Tensor(np.ones(4, "float32") * 9)  # noqa: F841  (made last: not the labels)
        h = F.tanh(x * w) * 2
        loss = ((h - labels) ** 2).mean()
        w -= 0.01 * h
        outs.append(loss.item())
    return outs, w.numpy()


@pytest.mark.parametrize("event", [None, "one more tensor", "other order"])
def test_an_early_launch_at_the_first_op_takes_the_latest_host_made_tensors_only_where_they_are_read(
        auto_jit, monkeypatch, event):
    # The labels, read late in the step, were the latest Tensor made from host data both times: the cluster is
    # launched after its first op, on them; where the program made the Tensors otherwise, the run is dropped
    monkeypatch.setattr(_autojit._Guess, "early", lambda self: True)
    mge.config.auto_jit = False
    want = _batch_loop(event)
    mge.config.auto_jit = True
    got = _batch_loop(event)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    stats = auto_jit_stats()
    assert stats["early_launches"] >= 8, stats
    assert stats["early_misses"] == (0 if event is None else 1), stats
    (g,) = [g for g in _autojit._local.cluster.guesses.values() if g.executable is not None]
    # (after a miss it launches once the labels are read)
    assert (g.launch_at == 1) is (event is None), (g.launch_at, g.late)


def test_reading_a_pending_tensors_device_does_not_cut_its_cluster(auto_jit):
    # ``F.zeros(shape, device=x.device)`` (anchor and head code) asked the device of a pending result: that ran its
    # cluster at every step (probe H, 2026-11-29: 16 of 20 steps cut there, 26 of 44 clusters op by op)
    def run():
        x = mge.Tensor(np.ones((8, 8), "float32"))
        out, devices = [], []
        for i in range(20):
            h = (x * 2 + 1) @ (x * 0.5)
            devices.append(str(h.device))
            z = F.zeros((8, 8), device=h.device)
            moved = (h * 3).to("cpu0")  # (where it is already: a plain copy, named as ``to`` names it)
            devices.append(str(moved.device))
            h = F.relu(h + z) * 0.01 + moved.mean()
            out.append(h.sum() + i)
        return [float(v) for v in out], devices

    mge.config.auto_jit = False
    expected = run()
    mge.config.auto_jit = True
    assert run() == expected
    cuts = auto_jit_stats()["cuts"]
    assert not any("device=h.device" in where or "h.device))" in where for _, _, where in cuts), cuts
    # (nor does a move to the device the value is on: OMNet's ``F.copy(x, device=x.device)`` cut its step there)
    assert not any("moved = " in where for _, _, where in cuts), cuts
    assert auto_jit_stats()["clusters"] == 1, auto_jit_stats()  # (the loop's 20 iterations: one cluster)


def test_the_device_of_values_made_from_numbers_alone_is_known_before_they_run(auto_jit):
    # a grid made from ``F.arange`` (a cluster with no input yet): ``F.stack``'s check of its inputs' devices, once
    # a logical device name was in use, ran the cluster to ask (known where the process has one device)
    if _autojit._default_devices() is None:
        pytest.skip("several devices: a committed input joining the cluster could move it")
    xv = F.broadcast_to(F.arange(6.0), (6, 6))
    yv = F.broadcast_to(F.arange(6.0).reshape(-1, 1), (6, 6))
    assert str(xv.device) == str(mge.Tensor([1.0]).device)
    assert xv._data.value is None  # (still pending)
    from megxla.core import dtypes
    saved = dtypes.LOGICAL[0]
    dtypes.LOGICAL[0] = True
    try:
        g = F.stack((xv, yv), 0)
    finally:
        dtypes.LOGICAL[0] = saved
    assert xv._data.value is None and auto_jit_stats()["peeks"] == 0
    mge.config.auto_jit = False
    np.testing.assert_array_equal(g.numpy()[1], np.broadcast_to(np.arange(6.0).reshape(-1, 1), (6, 6)))


def test_a_tensor_copied_in_the_step_does_not_make_its_devices_unknown(auto_jit):
    # ``Tensor(t)`` is a copy op with ``device=None``: it counted as placing a value, and RIFE's step (``imgs =
    # mge.Tensor(imgs)``, then ``str(flow.device)`` in its warp) was cut there at every step
    x = mge.Tensor(np.ones((2, 3), "float32"))
    reset_auto_jit_stats()
    for _ in range(3):
        y = mge.Tensor(x * 2)
        z = F.exp(y) + 1
        assert str(z.device) == "xpux:0"
        float(z.sum())
    assert not any("z.device" in where for _, _, where in auto_jit_stats()["cuts"]), auto_jit_stats()["cuts"]


def test_an_op_whose_lowering_rejects_its_input_fails_at_its_own_line_as_eagerly(auto_jit):
    # LAPACK on the CPU has no float16 LU: JAX says so when it lowers matinv, not when it traces it. Collected, the
    # error came at the next host read (probe H, 2026-11-29): past the user's ``try``, after side effects.
    def run():
        m = mge.Tensor((np.eye(3) * 2).astype("float16"))
        events, inv = [], None
        for _ in range(3):
            try:
                inv = F.matinv(m * 1)
                events.append("inverted")
            except Exception as exc:  # noqa: BLE001  (whatever eager raises)
                events.append(type(exc).__name__)
                inv = F.matinv((m * 1).astype("float32")).astype("float16")
        return events, inv.numpy().tolist()

    mge.config.auto_jit = False
    expected = run()
    mge.config.auto_jit = True
    assert run() == expected


def test_auto_jit_raises_the_collectors_first_threshold_while_on_and_gives_the_programs_back():
    # (a step's placeholders passed the default 700 every step: a young-generation pass a step, a full one every
    # 100 -- 6-7% of the Transformer's host time)
    import gc
    saved = gc.get_threshold()
    was = mge.config.auto_jit
    try:
        mge.config.auto_jit = False
        gc.set_threshold(700, *saved[1:])
        mge.config.auto_jit = True
        assert gc.get_threshold()[0] == _autojit.GC_YOUNG
        mge.config.auto_jit = False
        assert gc.get_threshold()[0] == 700
        gc.set_threshold(50000, *saved[1:])  # a program's own higher threshold stays
        mge.config.auto_jit = True
        assert gc.get_threshold()[0] == 50000
        mge.config.auto_jit = False
        assert gc.get_threshold()[0] == 50000
        gc.set_threshold(700, *saved[1:])
        mge.config.auto_jit = True
        gc.set_threshold(3000, *saved[1:])  # changed by the program meanwhile: not undone
        mge.config.auto_jit = False
        assert gc.get_threshold()[0] == 3000
    finally:
        mge.config.auto_jit = was
        gc.set_threshold(*saved)


def test_gradients_keep_the_logical_device_as_eager(auto_jit):
    # (probe O) the grouped backward re-wraps each dy: without the dy's logical device, w.grad of a "cpu0"
    # parameter printed device=xpux:0 under auto-jit (cpu0:0 eagerly), the default dy, a reused walk and a given dy
    def run():
        out = []
        w = mge.Parameter([1.0, 2.0], device="cpu0")
        gm = GradManager().attach([w])
        for _ in range(2):
            with gm:
                gm.backward((w * w).sum())
            out.append((repr(w.grad), w.grad.device))
            w.grad = None
        with gm:
            y = w * 3
            gm.backward(y, F.ones_like(y))
        out.append((repr(w.grad), w.grad.device))
        return out

    mge.config.auto_jit = False
    eager = run()
    mge.config.auto_jit = True
    assert run() == eager
    assert "cpu0" in eager[0][0]


@pytest.mark.parametrize("env", ["0", "1"])
def test_importing_megxla_starts_no_jax_backend(env):
    # ``dist.launcher`` sets the devices up in each rank before JAX's backend starts: an array made at import (the
    # collector's ``type(jnp.zeros(()))``) started it first, and rank 1's default device was named cpu1, not xpu1
    code = ("import megxla, megxla.jit, megxla.distributed, megxla.functional, megxla.module, megxla.optimizer\n"
            "from jax._src import xla_bridge\n"
            "print('started', xla_bridge.backends_are_initialized())\n")
    env_vars = dict(os.environ, MEGXLA_AUTO_JIT=env)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env_vars,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "started False"


def test_a_cluster_of_many_scalar_inputs_compiles_quick_only(auto_jit, monkeypatch):
    """Each Python number of a loop body is an input of its own; XLA:CPU's optimizing compile grows steeply with
    them (a read-free `sin(x) * 1.01 + 0.001` loop cut at the size cap, 2,048 scalars: minutes -- probe AA -- against
    0.9 s with the quick options). Such a cluster gets only its quick executable: no optimized compile in the
    foreground nor on a tier-up thread; its results are eager's."""
    import jax
    from jax._src import stages
    from megxla.jit import _tiers
    monkeypatch.setattr(auto_jit, "QUICK_SCALARS", 64)
    options = []
    real_compile = stages.Lowered.compile

    def spy(self, compiler_options=None, **kw):
        import threading
        if not threading.current_thread().name.startswith("megxla-kernels") \
                and "auto_jit_cluster" in self.as_text()[:200]:
            # (the workers compiling the eager kernels of a cluster run op by op -- a new key before it recurs --
            # compile those with the kernels' own options: only when the process has not met the ops before; and
            # the zeros the clusters' programs take are made by jax.numpy at the first cluster, with JAX's options)
            options.append(compiler_options)
        return real_compile(self, compiler_options=compiler_options, **kw)
    monkeypatch.setattr(stages.Lowered, "compile", spy)

    def loop():
        x = mge.Tensor(np.linspace(0.1, 1, 5).astype("float32"))
        acc = mge.Tensor(np.zeros(5, "float32"))
        for _ in range(50):  # (200 ops, 100 scalar inputs)
            x = F.sin(x) * 1.01 + 0.001
            acc = acc + x
        return acc.numpy()

    got = [loop() for _ in range(4)]
    mge.config.auto_jit = False
    want = loop()
    for g in got:
        np.testing.assert_allclose(g, want, rtol=1e-5)
    stats = auto_jit_stats()
    assert stats["compiled"] >= 1 and stats["quick_only"] == stats["compiled"] and stats["tiered"] == 0
    if _tiers.fast_options() is not None:
        assert options and all(o == _tiers.fast_options() for o in options), options


def test_a_threads_state_is_readable_while_its_first_init_runs(auto_jit, monkeypatch):
    # A finalizer run by a garbage collection inside a fresh thread's first ``_Local.__init__`` (while it builds
    # the thread's cluster) reads the thread's state: it must be there (it raised AttributeError 'paused',
    # printed as an ignored exception).
    import threading
    seen, errors = [], []
    real = _autojit._Cluster

    def cluster_reading_state():
        try:
            seen.append((_autojit._local.paused, _autojit._local.forced, _autojit._local.read_pause))
        except AttributeError as exc:
            errors.append(exc)
        return real()

    monkeypatch.setattr(_autojit, "_Cluster", cluster_reading_state)
    out = []
    th = threading.Thread(target=lambda: out.append((mge.Tensor([1.0, 2.0]) * 3).numpy().tolist()))
    th.start()
    th.join()
    assert not errors and seen == [(False, 0, None)]
    assert out == [[3.0, 6.0]]


def test_full_sync_and_a_profilers_window_run_the_pending_cluster(auto_jit, tmp_path):
    # MegEngine's benchmarks time steps with ``_full_sync()``: under auto-jit it returned with the work still
    # collected (it ran at the next read), and a Profiler's window around inference recorded none of it (a probe)
    from megxla.utils.profiler import Profiler
    x = mge.Tensor(np.ones((4, 4), "float32"))
    y = F.tanh(x @ x) * 2 + 1
    assert auto_jit._local.cluster.ops
    mge._full_sync()
    assert not auto_jit._local.cluster.ops and type(y._data) is not auto_jit.Lazy
    with Profiler(path=str(tmp_path)):
        z = F.relu(y - 3) + y
        assert auto_jit._local.cluster.ops
    assert not auto_jit._local.cluster.ops
    np.testing.assert_allclose(z.numpy(), np.maximum(np.tanh(4.0) * 2 - 2, 0) + np.tanh(4.0) * 2 + 1, rtol=1e-6)



def _fit_step(model, opt, gm, x, y, extra=0):
    with gm:
        loss = F.nn.cross_entropy(model(x), y)
        for _ in range(extra):
            loss = loss * 1.0
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


def _fit(model, steps, xs, ys, extra_ops=lambda i: 0):
    """``steps`` steps of ``model`` through :func:`_fit_step` (one site), the ``i``-th with ``extra_ops(i)`` more
    ops: the losses and, per step, the clusters compiled and run op by op since the model was built."""
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(model.parameters())  # (ends the model's setup: its initialisation runs)
    s = auto_jit_stats()
    start = (s["compiled"], s["eager_clusters"])
    losses, counts = [], []
    for i in range(steps):
        losses.append(_fit_step(model, opt, gm, mge.Tensor(xs), mge.Tensor(ys), extra_ops(i)).item())
        s = auto_jit_stats()
        counts.append((s["compiled"] - start[0], s["eager_clusters"] - start[1]))
    return losses, counts


def _two_models():
    mge.random.seed(0)
    return (M.Sequential(M.Linear(8, 16), M.ReLU(), M.Linear(16, 3)),
            M.Sequential(M.Linear(8, 6), M.Sigmoid(), M.Linear(6, 6), M.SiLU(), M.Linear(6, 3)))


def test_a_second_model_through_a_settled_step_function_compiles_its_step_at_first_sight(auto_jit):
    # The site (the step function's cut) had settled on the first model's key; the second model's first step ran
    # op by op on cold kernels and compiled at its second (ConvNet b64 after an MLP: 3.0 + 2.9 s on 2 cores, and
    # 7.4 s more on an H200). A settled site's new key compiles at first sight, as a site's first one does.
    rng = np.random.RandomState(0)
    xs, ys = rng.standard_normal((16, 8)).astype("float32"), rng.randint(0, 3, 16).astype("int32")
    mge.config.auto_jit = False
    want = [_fit(m, 12 if i == 0 else 3, xs, ys)[0] for i, m in enumerate(_two_models())]
    mge.config.auto_jit = True
    first, second = _two_models()
    got_first, counts = _fit(first, 12, xs, ys)
    assert counts[-1] == (1, 0), counts
    got_second, counts = _fit(second, 3, xs, ys)
    assert counts == [(1, 0)] * 3, counts  # compiled at its first step; nothing run op by op
    np.testing.assert_allclose(got_first + got_second, want[0] + want[1], rtol=1e-5)


def test_keys_that_change_every_step_after_a_settled_stretch_compile_at_first_sight_once(auto_jit):
    # A step whose op count follows the data (a Python loop over a batch's boxes) makes a new key every step: only
    # the first after the settled stretch compiles at first sight; the others run op by op, as before.
    rng = np.random.RandomState(0)  # (a batch of 12: no executable of the test above serves it)
    xs, ys = rng.standard_normal((12, 8)).astype("float32"), rng.randint(0, 3, 12).astype("int32")
    _, counts = _fit(_two_models()[0], 16, xs, ys, extra_ops=lambda i: 0 if i < 10 else i)
    assert counts[9] == (1, 0), counts
    assert counts[10:] == [(2, 0)] + [(2, k) for k in range(1, 6)], counts


def test_an_early_launch_is_compiled_only_where_collecting_a_cluster_is_a_share_of_its_step(auto_jit, monkeypatch):
    # The early launch's executable is a second compilation of the cluster; it can gain no more than the time spent
    # collecting the cluster's ops after the launch. A compute-bound step (a Transformer b64 on 2 cores: 0.1% of
    # its 3 s) paid 6.9 s for it; a host-bound one (the tiny MLP below: most of its step) still gets it.
    monkeypatch.setattr(_autojit, "EARLY_BUY_NOW", float("inf"))  # (not the rent: a loaded machine's compiles)
    # (the share asked for, 0.2 here, sits far from both models' own -- the MLP's collection is most of its step, the
    # wide model's under 1% -- so that a pause of the collecting thread (the suite's other worker, a full GC of a
    # large heap) does not decide: under the whole suite the default 5% was crossed twice in a row, 1 run in ~4)
    monkeypatch.setattr(_autojit, "EARLY_MIN_SHARE", 0.2)
    rng = np.random.RandomState(0)
    # (the compute-bound model first: once a site launches early, its new keys compile one executable for both)
    # (the wide model's compute is a square 2048 x 2048 layer, its input small: a 512 x 1024 batch made its step's
    # collection 0.7-3.3 ms of a 27 ms step, with the share's 5% crossed twice in a row now and then)
    for width, batch, want in ((2048, 512, 0), (16, 16, 1)):
        xs = rng.standard_normal((batch, 8 if width == 16 else 64)).astype("float32")
        ys = rng.randint(0, 3, batch).astype("int32")
        mge.random.seed(0)
        middle = [M.Linear(width, width), M.ReLU()] if width > 16 else []
        model = M.Sequential(M.Linear(xs.shape[1], width), M.ReLU(), *middle, M.Linear(width, 3))
        before = auto_jit_stats()["early_compiled"]
        _fit(model, 8, xs, ys)
        assert auto_jit_stats()["early_compiled"] - before == want, (width, auto_jit_stats())


@pytest.mark.parametrize("kept", [False, True])
def test_an_early_launch_of_a_long_compile_waits_until_its_runs_paid_the_rent(auto_jit, monkeypatch, kept):
    # (a small ConvNeXt's step: its early launch's executable, a second compile as long as the first -- 4.5 s cold --,
    # stalled its fifth step; a short script never gains that back. Compiled once the cluster's runs have taken
    # EARLY_RENT times as long as its compile -- or at once where megxla keeps that program: JAX's cache has it)
    monkeypatch.setattr(_autojit, "EARLY_BUY_NOW", 0.0)  # (every compile counts as long)
    monkeypatch.setattr(_autojit._persist, "kept", lambda key: kept)
    rng = np.random.RandomState(0)
    xs, ys = rng.standard_normal((16, 8)).astype("float32"), rng.randint(0, 3, 16).astype("int32")
    mge.random.seed(0)
    model = M.Sequential(M.Linear(8, 16), M.ReLU(), M.Linear(16, 3))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(model.parameters())
    monkeypatch.setattr(_autojit._Guess, "early", lambda self: True)  # (not timed: launched whenever it can be)
    before = auto_jit_stats()["early_compiled"]
    for _ in range(8):
        _fit_step(model, opt, gm, mge.Tensor(xs), mge.Tensor(ys)).item()
    assert auto_jit_stats()["early_compiled"] - before == (1 if kept else 0), auto_jit_stats()
    # (until then its launches run the cluster's own donating executable on copies of the state it donates)
    assert auto_jit_stats()["early_launches"] >= 3, auto_jit_stats()
    if not kept:
        monkeypatch.setattr(_autojit, "EARLY_RENT", 0.0)  # (the rent paid: its own executable, compiled once)
        for _ in range(3):
            _fit_step(model, opt, gm, mge.Tensor(xs), mge.Tensor(ys)).item()
        assert auto_jit_stats()["early_compiled"] - before == 1, auto_jit_stats()
        assert not any(type(g.executable) is _autojit._OnCopies for g in _autojit._local.cluster.guesses.values())


def test_a_models_host_drawn_initialisation_does_not_run_on_into_its_first_step(auto_jit, monkeypatch):
    # A conv's initialisation draws on the host, a read per parameter: a loop whose read-site timer chose to run
    # its iterations eagerly. That pause ran on into a varying number of the first step's ops, so the first step's
    # cluster started at another op than the next ones': a key that never recurs (PMRID: its step compiled twice,
    # 10.1 + 9.0 s for the first two steps, now 9.9 + 0.5). A GradManager starting to record ends such a pause.
    monkeypatch.setattr(_autojit, "STATIC_TIMER", True)  # (the read-site timers: off in the fixture)
    rng = np.random.RandomState(0)
    xs, ys = rng.standard_normal((2, 2, 6, 6)).astype("float32"), rng.randint(0, 3, 2).astype("int32")

    class Deep(M.Module):
        def __init__(self):
            super().__init__()
            self.convs = M.Sequential(*[M.Conv2d(2, 2, 1) for _ in range(40)])
            self.fc = M.Linear(72, 3)

        def forward(self, x):
            return self.fc(F.flatten(self.convs(x), 1))

    def build():
        mge.random.seed(0)
        return Deep()

    mge.config.auto_jit = False
    want, _ = _fit(build(), 4, xs, ys)
    mge.config.auto_jit = True
    got, counts = _fit(build(), 4, xs, ys)
    # (the initialisation draws MegEngine's streams on the host and reads nothing: no pause to run on; before
    # session 79 it read a split key per parameter, and this test checked that those reads' pause ended)
    assert auto_jit_stats()["eager_reads"] == 0
    assert counts[-1][0] == 1, (counts, auto_jit_stats()["changes"])
    np.testing.assert_allclose(got, want, rtol=1e-5)


def _compilations_after_each_step(build, batches, lr):
    """Trains ``build()``'s parameters on the loss it gives for each batch (SGD with momentum), eagerly and then
    under auto-jit; checks that both give the same losses and parameters, and returns the compilations counted after
    each auto-jit step."""
    def run():
        mge.random.seed(0)
        params, loss_of = build()
        opt, gm = optim.SGD(params, lr=lr, momentum=0.9), GradManager().attach(params)
        losses, counts = [], []
        for batch in batches:
            with gm:
                loss = loss_of(batch)
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(loss.item())
            counts.append(auto_jit_stats()["compiled"])
        return losses, [p.numpy() for p in params], counts

    mge.config.auto_jit = False
    want, want_params, _ = run()
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    got, got_params, counts = run()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(got_params, want_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    return counts


def test_a_constant_made_at_the_first_step_and_kept_by_the_project_does_not_compile_the_step_twice(auto_jit):
    # RIFE's warp keeps the grid it makes at the first step in a dict: the first step's cluster computes it, every
    # later step's takes it as an input -- so the first never recurred, and the step (compiled at its first sight)
    # was compiled again at the second (19 s each on 2 cores). The grid's ops are taken out of the first cluster and
    # run op by op before it; the rest is the program every later step runs.
    rng = np.random.RandomState(0)
    xs, ys = rng.standard_normal((4, 2, 6, 6)).astype("float32"), rng.randint(0, 3, 4).astype("int32")
    grids = {}

    def grid(x):
        key = tuple(x.shape)
        if key not in grids:  # (made once, from Python numbers only, and kept)
            h = F.broadcast_to(F.linspace(0, 1.0, x.shape[3]).reshape(1, 1, 1, x.shape[3]), x.shape) * 2.0
            grids[key] = F.concat([h, h * 0.5], 1)
        return grids[key]

    def build():
        grids.clear()
        conv, fc = M.Conv2d(4, 4, 3, padding=1), M.Linear(144, 3)

        def loss_of(_):
            x = mge.Tensor(xs)
            h = F.relu(conv(F.concat([x, x * 0.5], 1) + grid(x)))
            return F.nn.cross_entropy(fc(F.flatten(h, 1)), mge.Tensor(ys))

        return list(conv.parameters()) + list(fc.parameters()), loss_of

    counts = _compilations_after_each_step(build, range(5), lr=0.1)
    assert counts == [1] * 5, (counts, auto_jit_stats()["changes"])
    assert auto_jit_stats()["cache_hits"] >= 4, auto_jit_stats()


def test_a_models_device_made_constants_and_a_step_prepared_before_with_gm_compile_the_step_once(auto_jit, monkeypatch):
    # RIFE: its loss modules make kernels on the device in ``__init__`` (``mge.tensor(k) / 256``, tiled), left
    # pending; its loop prepares the batch before ``with gm:`` (``data / 255.``, slices) and reads three losses
    # after each step. The kernels joined the first step's cluster, and from the second step on the read-site timer
    # ran the preparation eagerly (the reads: a loop of them): the first step's cluster never recurred, and the
    # step compiled twice (19 s on 2 cores). Attaching parameters ends the setup, and ``with gm:`` starts a step.
    monkeypatch.setattr(_autojit, "STATIC_TIMER", True)  # (the read-site timers: off in the fixture)
    rng = np.random.RandomState(0)
    raws = rng.randint(0, 256, (6, 2, 3, 6, 6)).astype("float32")

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = M.Conv2d(2, 4, 3, padding=1), M.Linear(144, 3)
            k = mge.tensor([[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]) / 16.0
            self.blur = F.tile(k.reshape(1, 1, 3, 3), (2, 2, 1, 1))  # (a constant made on the device)

        def forward(self, x):
            return self.fc(F.flatten(F.relu(self.conv(F.conv2d(x, self.blur, padding=1))), 1))

    def run():
        mge.random.seed(0)
        net = Net()
        opt = optim.Adam(net.parameters(), lr=1e-3)
        gm = GradManager().attach(net.parameters())
        losses = []
        for raw in raws:
            data = mge.Tensor(raw) / 255.0
            x, y = data[:, :2], data[:, 2:].mean(axis=(1, 2, 3))
            with gm:
                out = net(x)
                l1 = F.abs(out.mean(1) - y).mean()
                l2 = (out ** 2).mean()
                loss = l1 + 0.1 * l2
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append((float(loss), float(l1), float(l2)))
        return losses

    mge.config.auto_jit = False
    want = run()
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    got = run()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # (one executable for the step; the preparation's ops are a cluster of their own, compiled once too)
    assert not auto_jit_stats()["changes"] and max(st[2] for st in _autojit._sites.values()) == 1, \
        (auto_jit_stats()["changes"], list(_autojit._sites.values()))


def test_a_table_made_at_the_first_step_from_a_modules_buffer_does_not_compile_the_step_twice(auto_jit):
    # Rotary position embeddings: the module keeps ``inv_freq`` (a buffer made in ``__init__``) and, at the first
    # forward of each length, a cos/sin table made from it and kept. The first step's cluster made the table, every
    # later one takes it as an input, so the step compiled twice. Ops made from Python numbers and the setup's
    # unchanged arrays only are a kept constant's: run op by op before the first executable, not compiled in it.
    rng = np.random.RandomState(0)
    xs = rng.standard_normal((5, 2, 8, 16)).astype("float32")

    class Rope(M.Module):
        def __init__(self, d):
            super().__init__()
            self.inv_freq = mge.tensor(1.0 / 10000 ** (np.arange(0, d, 2, dtype="float32") / d))
            self.tables = {}

        def forward(self, x):
            n = x.shape[1]
            if n not in self.tables:
                f = F.arange(n, dtype="float32").reshape(-1, 1) * self.inv_freq.reshape(1, -1)
                f = F.concat([f, f], axis=-1)
                self.tables[n] = (F.cos(f), F.sin(f))
            cos, sin = self.tables[n]
            h = x.shape[-1] // 2
            return x * cos + F.concat([-x[..., h:], x[..., :h]], axis=-1) * sin

    def build():
        rope, fc1, fc2 = Rope(16), M.Linear(16, 16), M.Linear(16, 1)
        return list(fc1.parameters()) + list(fc2.parameters()), \
            lambda x: (fc2(F.relu(rope(fc1(mge.Tensor(x))))) ** 2).mean()

    # (a model built after earlier tests' training, as in a notebook: its parameters' first attach ends its setup)
    counts = _compilations_after_each_step(build, xs, lr=0.01)
    assert counts == [1] * 5, (counts, auto_jit_stats()["changes"])


def test_a_table_made_at_every_step_and_held_by_the_tape_is_not_taken_out_of_the_step(auto_jit, monkeypatch):
    # The same table made at every forward (not kept), the loss read inside ``with gm:``: the tape holds the table
    # for the backward, so it outlives the forward's cluster -- but is no kept constant. Taken out of the first
    # executable, its ops would run op by op at every step; they stay compiled in it.
    rng = np.random.RandomState(0)
    xs = rng.standard_normal((4, 2, 8, 16)).astype("float32")
    inv_freq = mge.tensor(1.0 / 10000 ** (np.arange(0, 16, 2, dtype="float32") / 16))
    taken_out = []
    real = _autojit._kept_constants.constant_ops

    def spied(*args):
        found = real(*args)
        taken_out.extend(found)
        return found

    def run():
        mge.random.seed(0)
        fc = M.Linear(16, 1)
        opt, gm = optim.SGD(fc.parameters(), lr=0.01), GradManager().attach(fc.parameters())
        losses = []
        for x in xs:
            with gm:
                f = F.arange(8, dtype="float32").reshape(-1, 1) * inv_freq.reshape(1, -1)
                f = F.concat([f, f], axis=-1)
                h = mge.Tensor(x) * F.cos(f) + mge.Tensor(x)[..., ::-1] * F.sin(f)
                loss = (fc(h) ** 2).mean()
                losses.append(loss.item())  # (a read inside ``with gm:``)
                gm.backward(loss)
            opt.step().clear_grad()
        return losses

    mge.config.auto_jit = False
    want = run()
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    monkeypatch.setattr(_autojit._kept_constants, "constant_ops", spied)
    monkeypatch.setattr(_autojit, "FIRST_SIGHT_OPS", 8)  # (the forward's cluster compiles at its first sight)
    got = run()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert taken_out == [] and auto_jit_stats()["cache_hits"] >= 3, (taken_out, auto_jit_stats())


def test_values_derived_from_a_kept_constant_and_read_after_a_cut_do_not_compile_the_step_twice(auto_jit, monkeypatch):
    # YOLOX's head keeps the grid it makes at the first step (``self.grids[k]``) and derives from it, at every
    # step, the anchors' shifts its SimOTA assignment uses after a host read (the count of boxes): at the first
    # step the grid and the shifts are taken out of the cluster cut at the read (kept constants), at the second
    # the grid is an input and only the shifts were -- another program, and the forward (411 ops) compiled again.
    # Ops made from the first step's kept constants are a kept constant's too.
    monkeypatch.setattr(_autojit, "FIRST_SIGHT_OPS", 8)  # (the forward's cluster compiles at its first sight)
    rng = np.random.RandomState(0)
    xs = rng.standard_normal((5, 2, 4, 6, 6)).astype("float32")
    grids = []

    def build():
        grids.clear()
        conv, fc = M.Conv2d(4, 4, 3, padding=1), M.Linear(144, 3)

        def loss_of(k):
            x = mge.Tensor(xs[k])
            if not grids:  # (made once, from Python numbers only, and kept)
                xv = F.broadcast_to(F.arange(6.0), (6, 6))
                yv = F.broadcast_to(F.arange(6.0).reshape(-1, 1), (6, 6))
                grids.append(F.stack((xv, yv), 0).reshape(1, 2, 6, 6))
            g = grids[0].reshape(1, 2, 36)
            shift = g[:, 0] * 0.5 + g[:, 1]  # (derived from the grid at every step, used after the read)
            h = F.relu(conv(x + grids[0].mean()))
            n = int((F.abs(x) > 100).sum()) + 2  # (a count read inside ``with gm:``: the forward's cluster ends)
            out = fc(F.flatten(h, 1))
            return (out ** 2).mean() + (h.reshape(2, 4, 36)[:, :n] * shift).mean()

        return list(conv.parameters()) + list(fc.parameters()), loss_of

    counts = _compilations_after_each_step(build, range(5), lr=0.1)
    # (the forward once -- at its first sight --, the rest of the step once, when its key recurs)
    assert counts[-1] == 2, (counts, auto_jit_stats()["changes"])


def test_an_unused_parameter_does_not_make_the_first_steps_cluster_another(auto_jit, monkeypatch):
    # Adam's step counts are one Tensor shared by the parameters updated together; one without a gradient (a layer
    # the forward never calls: the ASR Transformer's ``Conv2dSubsampling.linear``) gets its own count at the first
    # update. That copy was an op only the first step's cluster had: its executable, compiled at first sight, never
    # ran again, and the step compiled twice (the ASR step: 1,166 ops, 12-27 s on 2 cores; found by a probe).
    monkeypatch.setattr(_autojit, "FIRST_SIGHT_OPS", 8)
    rng = np.random.RandomState(0)
    xs = rng.standard_normal((5, 4, 16)).astype("float32")

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.unused = M.Linear(16, 16), M.Linear(16, 4), M.Linear(16, 16)

        def forward(self, x):
            return self.b(F.relu(self.a(x)))

    def run():
        mge.random.seed(0)
        net = Net()
        gm = GradManager().attach(net.parameters())
        opt = optim.Adam(net.parameters(), lr=1e-2)
        losses, counts = [], []
        for x in xs:
            with gm:
                loss = (net(mge.Tensor(x)) ** 2).mean()
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(loss.item())
            counts.append(auto_jit_stats()["compiled"])
        return losses, [p.numpy() for p in net.parameters()], counts, opt

    mge.config.auto_jit = False
    want, want_params, _, _ = run()
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    got, got_params, counts, opt = run()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(got_params, want_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert counts == [1] * 5, (counts, auto_jit_stats()["changes"])
    # (the unused parameter's count stayed at 0, the others' moved on)
    net_counts = {int(opt._state[p]["step"].numpy()) for g in opt.param_groups for p in g["params"]}
    assert net_counts == {0, 5}, net_counts


def test_a_loops_full_of_its_counter_keeps_its_clusters_key(auto_jit):
    # A diffusion model's sampling, ``x = p_sample(x, F.full((B,), t))`` for each timestep: ``full``'s value was a
    # parameter of the op, so every cluster of the loop was a new key (MegDiffusion: 12 compiles, its first calls
    # 3-15x slower than eager -- which compiled a kernel for every value). As MegEngine's ``full`` broadcasts a
    # ``Const``, the value is an input: the cached 0-d tensor of that number, as ``x * 0.5``'s 0.5.
    rng = np.random.RandomState(0)
    table, w = mge.Tensor(rng.rand(12, 4).astype("float32")), mge.Tensor(rng.randn(4, 4).astype("float32") * 0.5)

    def sample():
        x = mge.Tensor(np.ones((2, 4), "float32"))
        out = []
        for i in reversed(range(12)):
            t = F.full((2,), i)
            x = F.tanh(F.matmul(x, w) + table[t]) * 0.9 + F.full((2, 4), i * 0.01)
            out.append(float(x.sum()))  # (a read each iteration: a cluster each)
        return out

    mge.config.auto_jit = False
    want = sample()
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    got = [sample() for _ in range(2)]
    np.testing.assert_allclose(got, [want, want], rtol=1e-5, atol=1e-6)
    s = auto_jit_stats()
    # (one executable, the whole iteration: the clusters did not change -- they had, in ``full``'s value, and ran
    # in parts, those ops apart)
    assert s["compiled"] == 1 and s["cache_hits"] >= 20 and s["split_clusters"] == 0 and not s["changes"], s
    assert F.full((2, 3), 7).numpy().dtype == np.int32 and F.full((), 2.5).shape == ()


def test_a_loop_without_reads_called_again_starts_with_its_capped_clusters(auto_jit, monkeypatch):
    # A loop with no read (a sampling over the timesteps), its result read after it: the size cap cuts the loop,
    # and the clusters after a capped one are capped at LOOP_MAX_OPS -- but each call's first cluster started after
    # a read and was capped at MAX_OPS: a cluster of its own, compiled again at the next call (MegDiffusion's:
    # 4,325 ops, 22 s). A cluster that starts as one the cap cut is capped at LOOP_MAX_OPS from the start.
    monkeypatch.setattr(_autojit, "MAX_OPS", 64)
    monkeypatch.setattr(_autojit, "LOOP_MAX_OPS", 16)
    w = mge.Tensor(np.eye(4, dtype="float32") * 0.5)

    def sample():
        x = mge.Tensor(np.ones((2, 4), "float32"))
        for i in range(60):
            x = F.tanh(F.matmul(x, w) + 0.1) * 0.9  # (4 ops an iteration)
        return x.numpy()

    mge.config.auto_jit = False
    want = sample()
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    counts = []
    for _ in range(4):
        np.testing.assert_allclose(sample(), want, rtol=1e-6)
        counts.append(auto_jit_stats()["compiled"])
    # (the 16-op body compiled in the first call, then nothing more: the capped 64-op cluster each call started
    # with compiled too, at the second)
    assert counts == [1] * 4, (counts, auto_jit_stats()["changes"])


def test_reset_stats_forgets_the_changes_seen_before(auto_jit):
    # ``changes`` was read from the sites' state, which a reset keeps (their compiled keys): a change seen before
    # the reset -- a calibration pass over other shapes -- was still reported after it (found by a probe)
    def run(n):
        x = mge.Tensor(np.ones(n, "float32"))
        ((F.exp(x) * 3 - 2).sum() - (x * x).sum() + x.mean()).numpy()

    run(3), run(5)
    assert auto_jit_stats()["changes"], auto_jit_stats()
    reset_auto_jit_stats()
    assert auto_jit_stats()["changes"] == []
    run(7)
    assert len(auto_jit_stats()["changes"]) == 1, auto_jit_stats()["changes"]


def test_a_value_read_only_as_a_matrix_products_factor_is_not_kept_apart():
    # No multiply-add in a dot or a convolution has its operand as the addend, so no FMA can join it to the op that
    # made it: no barrier there (each one kept apart was a memory pass of its own in ResNeXt-IBN's step). A value
    # a sum also reads keeps its barrier; so does a cotangent a linear layer's bias gradient sums.
    import jax
    from megxla.core._op import VJP
    from megxla.core.ops import elemwise, linalg, reduction
    from megxla.jit._recording import make_replay
    mul = elemwise.BINARY["mul"].bind()
    matmul = linalg.matmul.bind(transpose_a=False, transpose_b=False)
    total = reduction.sum.bind(axis=None, keepdims=False)
    linear = linalg.linear.bind()
    a = jax.ShapeDtypeStruct((4, 4), np.float32)

    def xors(ops, n_in, outs):
        replay = make_replay(ops, list(range(n_in)), outs, rounded=True, apart=True)
        return str(jax.make_jaxpr(replay)(*[a] * n_in, jax.ShapeDtypeStruct((), np.int32))).count(" xor ")

    assert xors([(mul, (0, 1), (3,)), (matmul, (3, 2), (4,))], 3, [4]) == 0
    assert xors([(mul, (0, 1), (3,)), (linear, (3, 2), (4,))], 3, [4]) == 0
    assert xors([(mul, (0, 1), (3,)), (matmul, (3, 2), (4,)), (total, (3,), (5,))], 3, [4, 5]) == 1
    # gradients: of a bias-free linear layer, the cotangent is a factor; with a bias, its gradient sums it
    grad2 = VJP.bind(op=linear, nin=2, wrt=(0, 1), given=(True,))
    assert xors([(mul, (0, 1), (3,)), (grad2, (0, 2, 3), (4, 5))], 3, [4, 5]) == 0
    bias = jax.ShapeDtypeStruct((4,), np.float32)
    grad3 = VJP.bind(op=linear, nin=3, wrt=(0, 1, 2), given=(True,))
    replay = make_replay([(mul, (0, 1), (4,)), (grad3, (0, 2, 3, 4), (5, 6, 7))], [0, 1, 2, 3], [5, 6, 7],
                         rounded=True, apart=True)
    assert str(jax.make_jaxpr(replay)(a, a, a, bias, jax.ShapeDtypeStruct((), np.int32))).count(" xor ") == 1


def test_a_deep_copy_of_a_pending_value_is_an_op_of_its_cluster(auto_jit):
    # ``copy.deepcopy`` of a Tensor computed in the step forced its cluster to run -- a "host read" cut every step,
    # reported at copy.py's line (CV51GO/OTA_Megengine's shift generator deep-copies its shifts each step). The copy is
    # now collected; as eagerly, it is a new tensor of the same value with no gradient path to the original.
    import copy

    def run():
        mge.random.seed(0)
        w = mge.Parameter(np.linspace(-1, 1, 16).reshape(4, 4).astype("float32"))
        gm = GradManager().attach([w])
        opt = optim.SGD([w], lr=0.01)
        out = []
        for _ in range(4):
            with gm:
                x = F.arange(16, dtype="float32").reshape(4, 4) * 0.1 + w
                y = copy.deepcopy([x])[0]
                assert y is not x and y._vid != x._vid
                loss = ((y @ w) ** 2).sum() + (x * 0.5).sum()
                gm.backward(loss)
            opt.step().clear_grad()
            out.append(float(loss.item()))
        return out, w.numpy()

    mge.config.auto_jit = False
    want = run()
    mge.config.auto_jit = True
    reset_auto_jit_stats()
    got = run()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5)
    assert not [c for c in auto_jit_stats()["cuts"] if "copy" in c[2]], auto_jit_stats()["cuts"]


def _iou(boxes1, boxes2):
    # MegEngine Models' layers/det/box_utils.py get_iou (ICD, RetinaNet, FCOS, ATSS, Faster R-CNN)
    b1, b2 = F.expand_dims(boxes1, axis=1), F.expand_dims(boxes2, axis=0)
    iw = F.minimum(b1[:, :, 2], b2[:, :, 2]) - F.maximum(b1[:, :, 0], b2[:, :, 0])
    ih = F.minimum(b1[:, :, 3], b2[:, :, 3]) - F.maximum(b1[:, :, 1], b2[:, :, 1])
    inter = F.maximum(iw, 0) * F.maximum(ih, 0)
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    union = F.expand_dims(area1, axis=1) + F.expand_dims(area2, axis=0) - inter
    return F.maximum(inter / union, 0)


def test_products_read_by_sums_round_as_eagers_so_a_matchers_ties_hold(auto_jit):
    # Inside a cluster XLA:CPU let LLVM contract a product and the sum reading it into one FMA (one rounding where
    # eager's two kernels round twice): three anchors an IoU apart by nothing eagerly were an ulp apart, and the
    # matcher's ``iou == iou.max(1)`` (allow_low_quality_matches) kept two of them (ICD's RetinaNet: box loss 3.5% off
    # eager's in half its steps, found by a probe). Each op's float results are now kept apart from the next op's
    # arithmetic: the same bits as eager.
    anchors = np.array([[12.0, -4.0, 44.0, 28.0], [4.0, -4.0, 36.0, 28.0],
                        [16.686290740966797, -18.627416610717773, 39.3137092590332, 26.627416610717773]], "float32")
    gt = np.array([[17.073328018188477, 1.9955860376358032, 34.41423034667969, 22.302505493164062]], "float32")
    r = np.random.RandomState(0)
    a, b, c = (r.randn(4096).astype("float32") for _ in range(3))

    def run():
        m = _iou(mge.Tensor(gt), mge.Tensor(anchors))
        ties = (m == F.max(m, axis=1, keepdims=True)).sum()
        x, y, z = mge.Tensor(a), mge.Tensor(b), mge.Tensor(c)
        fused = (x * y + z) * (y - x * z) - z * z
        return m.numpy(), int(ties.numpy()), fused.numpy()

    mge.config.auto_jit = False
    want = run()
    mge.config.auto_jit = True
    for _ in range(3):  # (op by op, then compiled, then cached)
        got = run()
        assert got[1] == want[1] == 3
        np.testing.assert_array_equal(got[0].view(np.uint32), want[0].view(np.uint32))
        np.testing.assert_array_equal(got[2].view(np.uint32), want[2].view(np.uint32))
    assert auto_jit_stats()["compiled"] >= 1
