"""A training step with a Python number that changes every step -- an annealed dropout rate, PPO's clip range, a
leaky slope, a GAN's soft label drawn per step, a noise scale -- against the same step with the number fixed: ms/step eagerly and
under auto-jit (median of the second half of the steps, one process per cell). Where the number is a parameter of its
op, every new value compiles a kernel (and its gradient's) eagerly and makes a new cluster key under auto-jit; as an
input (the cached 0-d tensor of that number, as ``x * 0.5``'s 0.5) it costs nothing.

Usage: python benchmarks/changing_numbers.py [--steps 60]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np

OPS = {
    "dropout": lambda F, h, v: F.dropout(h, 0.1 + v),
    "clip": lambda F, h, v: F.clip(h, -1 - v, 1 + v),
    "leaky_relu": lambda F, h, v: F.leaky_relu(h, 0.01 + v),
    "full_like": lambda F, h, v: h - F.full_like(h, v),
    "normal": lambda F, h, v: h + _random().normal(0, 0.1 + v, h.shape),  # (exploration noise annealed)
    "mul": lambda F, h, v: h * (1 + v),  # (a binary op's number: an input all along, for comparison)
}


def _random():
    import megxla.random
    return megxla.random


def step_ms(op, changing, auto_jit, steps):
    """ms/step of a small MLP step (Linear 32-64, the op, ReLU, Linear 64-10, cross entropy, SGD, ``loss.item()``)."""
    import megxla as mge
    import megxla.functional as F
    import megxla.module as M
    import megxla.optimizer as optim
    from megxla.autodiff import GradManager
    mge.config.auto_jit = auto_jit
    mge.random.seed(0)
    net = M.Sequential(M.Linear(32, 64), M.ReLU(), M.Linear(64, 10))
    opt = optim.SGD(net.parameters(), lr=0.01)
    gm = GradManager().attach(net.parameters())
    rng = np.random.RandomState(0)
    x = mge.Tensor(rng.randn(16, 32).astype("float32"))
    y = mge.Tensor(rng.randint(0, 10, 16).astype("int32"))
    times = []
    for i in range(steps):
        v = (i * 1e-3) if changing else 0.0
        t0 = time.perf_counter()
        with gm:
            h = OPS[op](F, net[0](x), v)
            loss = F.nn.cross_entropy(net[2](F.relu(h)), y)
            gm.backward(loss)
        opt.step().clear_grad()
        loss.item()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[steps // 2:]) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--cell", nargs=3, help=argparse.SUPPRESS)  # (one cell, in its own process)
    args = ap.parse_args()
    if args.cell:
        op, changing, mode = args.cell
        print(step_ms(op, changing == "changing", mode == "auto_jit", args.steps))
        return

    def cell(op, changing, mode):
        out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--cell", op, changing, mode],
                             check=True, capture_output=True, text=True).stdout
        return float(out.split()[-1])
    print("| op | fixed eager | changing eager | fixed auto-jit | changing auto-jit |  (ms/step)")
    print("|---|---|---|---|---|")
    for op in OPS:
        row = [cell(op, c, m) for m in ("eager", "auto_jit") for c in ("fixed", "changing")]
        print(f"| {op} | " + " | ".join(f"{v:.2f}" for v in row) + " |", flush=True)


if __name__ == "__main__":
    main()
