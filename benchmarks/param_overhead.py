#!/usr/bin/env python
"""Host time per training step as the number of parameters grows: eager, auto-jit and ``xla_trace``.

A model of many small layers (MobileNet's hundreds of small tensors, a Transformer's per-layer norms and biases) pays
for each parameter on the host every step: the forward's ops, the gradient delivered to ``.grad``, the optimizer's
update rebinding the parameter and its slots, ``clear_grad``. Under ``xla_trace`` the call passes the state to one
executable; eagerly and under auto-jit the program's Python runs every step. This measures the calling thread's CPU
time (``time.thread_time``) per step of a deep, narrow MLP (``depth`` Linear layers of width 8, ReLUs between, batch
4: the compute is negligible) trained with SGD (momentum) and with Adam, and the slope between two depths: host
microseconds per parameter tensor per step.

Run:
    python benchmarks/param_overhead.py                       # depths 8 and 64, SGD and Adam
    python benchmarks/param_overhead.py --depths 8,32,128 --optimizers adam

Each (mode, optimizer, depth) runs in one process, the modes taking turns over interleaved blocks; the first blocks
(compilation, auto-jit's timers) are left out and the median step is reported.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import megxla as mge  # noqa: E402
import megxla.functional as F  # noqa: E402
import megxla.module as M  # noqa: E402
from megxla.autodiff import GradManager  # noqa: E402
from megxla.jit import xla_trace  # noqa: E402

MODES = ("eager", "auto_jit", "xla_trace")


def _model(depth, width=8):
    return M.Sequential(*[m for _ in range(depth) for m in (M.Linear(width, width), M.ReLU())])


def _optimizer(name, params):
    if name == "sgd":
        return mge.optimizer.SGD(params, lr=0.01, momentum=0.9)
    return mge.optimizer.Adam(params, lr=0.001)


def _step(model, opt, gm, x, y):
    with gm:
        loss = F.nn.cross_entropy(model(x), y)
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


def measure(depth, optimizer, blocks=8, steps=15, skip=3):
    """Median thread-CPU ms per step of each mode (``{mode: ms}``) for a ``depth``-layer model."""
    rng = np.random.RandomState(0)
    data = [(rng.standard_normal((4, 8)).astype("float32"), rng.randint(0, 8, 4).astype("int32")) for _ in range(4)]
    runs = {}
    for mode in MODES:
        mge.random.seed(0)
        model = _model(depth)
        opt = _optimizer(optimizer, model.parameters())
        gm = GradManager().attach(model.parameters())
        if mode == "xla_trace":
            traced = xla_trace(lambda x, y, model, opt, gm=gm: _step(model, opt, gm, x, y))
            runs[mode] = (lambda x, y, model=model, opt=opt, traced=traced: traced(x, y, model, opt))
        else:
            runs[mode] = (lambda x, y, model=model, opt=opt, gm=gm: _step(model, opt, gm, x, y))
    times = {mode: [] for mode in MODES}
    try:
        for b in range(blocks):
            for mode in MODES:
                mge.config.auto_jit = mode == "auto_jit"
                for i in range(steps):
                    x, y = data[i % 4]
                    t0 = time.thread_time()
                    runs[mode](mge.Tensor(x), mge.Tensor(y)).item()
                    if b >= skip:
                        times[mode].append(time.thread_time() - t0)
                mge.config.auto_jit = False
    finally:
        mge.config.auto_jit = False
    return {mode: statistics.median(v) * 1e3 for mode, v in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", default="8,64")
    ap.add_argument("--optimizers", default="sgd,adam")
    args = ap.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    print(f"host thread CPU ms per step (parameter tensors = 2 x depth); last column: us per parameter tensor "
          f"between depths {depths[0]} and {depths[-1]}")
    print(f"{'optimizer':10s} {'mode':10s} " + " ".join(f"{'d=' + str(d):>9s}" for d in depths) + f" {'us/param':>9s}")
    for name in args.optimizers.split(","):
        rows = {d: measure(d, name) for d in depths}
        for mode in MODES:
            ms = [rows[d][mode] for d in depths]
            slope = (ms[-1] - ms[0]) * 1e3 / (2 * (depths[-1] - depths[0])) if len(depths) > 1 else float("nan")
            print(f"{name:10s} {mode:10s} " + " ".join(f"{v:9.3f}" for v in ms) + f" {slope:9.2f}")


if __name__ == "__main__":
    main()
