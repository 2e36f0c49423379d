#!/usr/bin/env python
"""Host CPU time of a step's pieces warm (back to back) against cold (after the CPU's caches were evicted).

Inside a real training step the calling thread's Python runs right after XLA's compute has filled the cores'
caches with its own data, or after the thread slept while that compute ran. Back-to-back microbenchmarks (the
per-op tables of ``eager_loop.py``) measure the same code warm, so they understate what a step's host work costs.
This script times each piece ``--reps`` times, each preceded by one of:

* ``warm``: nothing (the piece ran just before);
* ``evicted``: a sum over a 16 MB array on the calling thread (its caches refilled with other data);
* ``slept``: a 3 ms sleep (the thread idle, as while a cluster computes; on a shared VM the core runs others).

Pieces: two ``Tensor``s from NumPy batches (every step's first host work), the same two arrays through JAX's
transfer alone, a compiled call of a 42-input executable (a small model's state), and the whole step of the tiny
ConvNet (batch 1, 8x8 pixels: its compute is negligible) eagerly, under auto-jit and as an ``xla_trace`` call,
each ending in ``loss.item()``. Reported: the median calling-thread CPU time in us and cold / warm.

    python benchmarks/cold_host.py               # ~1 min
    python benchmarks/cold_host.py --reps 200
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402


def _pieces():
    """``{name: callable}``: the host work timed."""
    import jax
    import megxla as mge
    import megxla.functional as F
    import megxla.module as M
    import megxla.optimizer as optim
    from megxla.autodiff import GradManager
    from megxla.jit import xla_trace

    class _TinyConvNet(M.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn, self.pool, self.fc = M.Conv2d(1, 4, 3, padding=1), M.BatchNorm2d(4), M.AvgPool2d(2), \
                M.Linear(64, 10)

        def forward(self, x):
            return self.fc(F.flatten(self.pool(F.relu(self.bn(self.conv(x)))), 1))

    rng = np.random.RandomState(0)
    xs, ys = rng.rand(8, 1, 28, 28).astype("float32"), rng.randint(0, 10, (8,)).astype("int32")
    state = [jax.device_put(rng.rand(64, 64).astype("float32")) for _ in range(40)]
    call = jax.jit(lambda x, y, *w: (x.sum() + y.sum(),) + tuple(v * 0.5 for v in w)).lower(xs, ys, *state).compile()
    xd, yd = jax.device_put(xs), jax.device_put(ys)

    def tiny_step(mode):
        mge.random.seed(0)
        model = _TinyConvNet()
        opt = optim.Adam(model.parameters(), lr=1e-3)
        gm = GradManager().attach(model.parameters())
        bx, by = rng.rand(1, 1, 8, 8).astype("float32"), np.array([3], "int32")

        def step(x, y, model, opt):
            with gm:
                loss = F.nn.cross_entropy(model(x), y)
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

        fn = xla_trace(step) if mode == "xla_trace" else step

        def run():
            mge.config.auto_jit = mode == "auto_jit"
            try:
                return fn(mge.Tensor(bx), mge.Tensor(by), model, opt).item()
            finally:
                mge.config.auto_jit = False
        return run

    return {
        "two Tensors from NumPy": lambda: (mge.Tensor(xs), mge.Tensor(ys)),
        "two jax.device_put": lambda: (jax.device_put(xs), jax.device_put(ys)),
        "a compiled call, 42 inputs": lambda: call(xd, yd, *state),
        "tiny ConvNet step, eager": tiny_step("eager"),
        "tiny ConvNet step, auto-jit": tiny_step("auto_jit"),
        "tiny ConvNet step, xla_trace": tiny_step("xla_trace"),
    }


def measure(piece, before, reps, warmup=30):
    """Median calling-thread CPU seconds of ``piece()``, each run preceded by ``before()``."""
    for _ in range(warmup):
        before()
        piece()
    out = []
    for _ in range(reps):
        before()
        t = time.thread_time()
        piece()
        out.append(time.thread_time() - t)
    return statistics.median(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=120)
    args = ap.parse_args(argv)
    big = np.random.RandomState(1).rand(4_000_000).astype("float32")
    befores = {"warm": lambda: None, "evicted": lambda: big.sum(), "slept": lambda: time.sleep(0.003)}
    print("| piece | " + " | ".join(f"{k} us" for k in befores) + " | evicted / warm | slept / warm |")
    print("|---|" + "---|" * (len(befores) + 2))
    for name, piece in _pieces().items():
        us = {k: 1e6 * measure(piece, b, args.reps) for k, b in befores.items()}
        print(f"| {name} | " + " | ".join(f"{v:.0f}" for v in us.values())
              + f" | {us['evicted'] / us['warm']:.1f}x | {us['slept'] / us['warm']:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
