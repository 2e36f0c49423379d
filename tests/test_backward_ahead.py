"""A GradManager's eager backward walk compiles its gradient ops' kernels ahead on worker threads
(``GradManager._compile_ahead`` through ``core._registry`` to ``jit._kernels_ahead.compile_kernels``): the walk is
predicted from the tape, and the prediction must be the walk that runs."""
import time

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
from megxla.autodiff import GradManager, grad_manager as gmod
from megxla.core._op import VJP
from megxla.jit import _kernels_ahead

pytestmark = pytest.mark.skipif(_kernels_ahead.THREADS < 2, reason="needs two worker threads")


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(3, 5, 3, padding=1)
        self.bn = M.BatchNorm2d(5)
        self.fc = M.Linear(5 * 7 * 9, 4)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        z = y + y * 0.5  # (a value read twice: its gradients are summed)
        return self.fc(F.flatten(z, 1)), y.detach().sum()


def _setup(seed, batch):
    """A fresh network (of its own input shapes: its kernels are new to this process), its manager and a batch."""
    mge.random.seed(seed)
    net = _Net()
    x = mge.tensor(np.random.RandomState(seed).standard_normal((batch, 3, 7, 9)).astype("float32"))
    return net, GradManager().attach(net.parameters()), x


def _types(arrays):
    return tuple((tuple(a.shape), np.dtype(a.dtype), bool(a.weak_type)) for a in arrays)


def test_the_predicted_walk_is_the_walk_that_runs_and_its_kernels_compile_ahead(monkeypatch):
    net, gm, x = _setup(0, 3)
    y = mge.tensor(np.array([0, 3, 1], "int32"))
    ran, predicted = [], []
    real_apply = gmod.apply

    def apply(op, *inputs):
        if op.prim is VJP:
            ran.append((op, _types([t._data for t in inputs])))
        return real_apply(op, *inputs)
    monkeypatch.setattr(gmod, "apply", apply)
    real_compile = _kernels_ahead.compile_kernels

    def compile_kernels(jobs, guessed=False):
        predicted.append([(op, tuple((tuple(s), np.dtype(d), bool(w)) for s, d, w in types)) for op, types in jobs])
        return real_compile(jobs, guessed)
    monkeypatch.setattr(gmod._registry, "_KERNEL_COMPILER", [compile_kernels])
    started = len(_kernels_ahead._met_grads)
    with gm:
        logits, _ = net(x)
        loss = F.nn.cross_entropy(logits, y)
        gm.backward(loss)
    # the walk's prediction (the last call) is the walk: the same gradient ops, in its order, on the same types
    assert len(ran) >= 6 and predicted[-1] == ran
    # the gradient kernels guessed while the forward was recorded (the calls before) are the walk's
    guessed = [job for call in predicted[:-1] for job in call]
    assert len(guessed) >= 4 and set(guessed) <= set(ran)
    assert len(_kernels_ahead._met_grads) > started  # (new shapes: their kernels were submitted to the workers)
    grads = [p.grad.numpy() for p in net.parameters()]

    # the same step with nothing compiled ahead gives the same gradients
    monkeypatch.setattr(gmod._registry, "_KERNEL_COMPILER", [None])
    for p in net.parameters():
        p.grad = None
    with gm:
        logits, _ = net(x)
        gm.backward(F.nn.cross_entropy(logits, y))
    for g, p in zip(grads, net.parameters()):
        np.testing.assert_array_equal(g, p.grad.numpy())


def test_a_steady_loop_stops_predicting_its_walks():
    net, gm, x = _setup(1, 2)
    calls, guessing = [], []
    real = gm._compile_ahead
    gm._compile_ahead = lambda *a: calls.append(1) or real(*a)
    for _ in range(6):
        with gm:
            guessing.append(gm._guess is not None)
            logits, _ = net(x)
            gm.backward(logits.sum())
    # the first step compiles its kernels; the next two find nothing new; after them no step guesses or predicts
    assert len(calls) == 1 + gmod._AHEAD_QUIET and gm._ahead_walks == gmod._AHEAD_QUIET
    assert guessing == [True] * (1 + gmod._AHEAD_QUIET) + [False] * (5 - gmod._AHEAD_QUIET)


def test_a_walk_that_raises_leaves_no_compile_waiting(monkeypatch):
    net, gm, x = _setup(2, 4)
    futures = []
    real_compile = _kernels_ahead.compile_kernels

    def compile_kernels(jobs, guessed=False):
        out = real_compile(jobs, guessed)
        futures.extend(f for f in out or () if f is not None)
        return out
    monkeypatch.setattr(gmod._registry, "_KERNEL_COMPILER", [compile_kernels])
    monkeypatch.setattr(gmod, "_GUESS_BATCH", 1 << 20)  # (nothing handed over while recording: the walk does it)
    # Each compile takes 0.3 s at least: some are still queued when the walk raises. (On a warm compilation cache the
    # workers had loaded every kernel before it did -- nothing left to drop: failed once on Python 3.13)
    real_one = _kernels_ahead._compile
    monkeypatch.setattr(_kernels_ahead, "_compile", lambda op, types: (time.sleep(0.3), real_one(op, types))[1])
    real_apply = gmod.apply
    seen = []

    def apply(op, *inputs):
        if op.prim is VJP:
            seen.append(op)
            if len(seen) == 2:
                raise KeyboardInterrupt
        return real_apply(op, *inputs)
    monkeypatch.setattr(gmod, "apply", apply)
    with pytest.raises(KeyboardInterrupt):
        with gm:
            logits, _ = net(x)
            gm.backward(logits.sum())
    # the compiles not started were dropped (a worker may still finish the ones it runs)
    assert futures and any(f.cancelled() for f in futures)
    assert all(f.cancelled() or f.running() or f.done() for f in futures)
    for f in futures:
        assert f.cancelled() or f.result(timeout=120) is None


def test_a_forked_child_forgets_the_compiles_its_parent_had_under_way():
    import concurrent.futures
    import multiprocessing as mp
    key = ("a compile under way", ())
    _kernels_ahead._met_grads[key] = concurrent.futures.Future()  # (never finished: no thread of the child would)
    try:
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=lambda: q.put(key in _kernels_ahead._met_grads))
        p.start()
        assert q.get(timeout=60) is False
        p.join(60)
    finally:
        _kernels_ahead._met_grads.pop(key, None)
