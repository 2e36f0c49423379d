"""A training step with a Python number that changes every step -- an annealed dropout rate, PPO's clip range, a
leaky slope, a GAN's soft label drawn per step, a noise scale -- against the same step with the number fixed: ms/step
eagerly and under auto-jit (median of the second half of the steps, one process per cell). Where the number is a parameter of its
op, every new value compiles a kernel (and its gradient's) eagerly and makes a new cluster key under auto-jit; as an
input (the cached 0-d tensor of that number, as ``x * 0.5``'s 0.5) it costs nothing.

``--xla-trace``: the same steps under ``xla_trace``, the number a module attribute (``net.value``, set before each
call): each new value is a new signature (the recording baked the number in); most calls bringing one, the step runs
as auto-jit clusters after a few calls instead of recording and compiling per value.

Usage: python benchmarks/changing_numbers.py [--steps 60] [--xla-trace]
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


def step_ms(op, changing, mode, steps):
    """ms/step of a small MLP step (Linear 32-64, the op, ReLU, Linear 64-10, cross entropy, SGD, ``loss.item()``)
    eagerly, under auto-jit or under ``xla_trace`` (``mode``)."""
    import megxla as mge
    import megxla.functional as F
    import megxla.module as M
    import megxla.optimizer as optim
    from megxla.autodiff import GradManager
    from megxla.jit import xla_trace
    mge.config.auto_jit = mode == "auto_jit"
    mge.random.seed(0)
    net = M.Sequential(M.Linear(32, 64), M.ReLU(), M.Linear(64, 10))
    opt = optim.SGD(net.parameters(), lr=0.01)
    gm = GradManager().attach(net.parameters())
    rng = np.random.RandomState(0)
    x = mge.Tensor(rng.randn(16, 32).astype("float32"))
    y = mge.Tensor(rng.randint(0, 10, 16).astype("int32"))
    def body(net, opt, x, y):
        with gm:
            h = OPS[op](F, net[0](x), net.value)
            loss = F.nn.cross_entropy(net[2](F.relu(h)), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    run = xla_trace(body) if mode == "xla_trace" else body
    times = []
    for i in range(steps):
        net.value = (i * 1e-3) if changing else 0.0
        t0 = time.perf_counter()
        run(net, opt, x, y).item()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[steps // 2:]) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--xla-trace", action="store_true", help="the steps under xla_trace, the number a module attribute")
    ap.add_argument("--cell", nargs=3, help=argparse.SUPPRESS)  # (one cell, in its own process)
    args = ap.parse_args()
    if args.cell:
        op, changing, mode = args.cell
        print(step_ms(op, changing == "changing", mode, args.steps))
        return

    def cell(op, changing, mode):
        out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--cell", op, changing, mode],
                             check=True, capture_output=True, text=True).stdout
        return float(out.split()[-1])
    modes = ("xla_trace",) if args.xla_trace else ("eager", "auto_jit")
    names = {"eager": "eager", "auto_jit": "auto-jit", "xla_trace": "xla_trace"}
    print("| op | " + " | ".join(f"{c} {names[m]}" for m in modes for c in ("fixed", "changing")) + " |  (ms/step)")
    print("|---|" + "---|" * 2 * len(modes))
    for op in OPS:
        row = [cell(op, c, m) for m in modes for c in ("fixed", "changing")]
        print(f"| {op} | " + " | ".join(f"{v:.2f}" for v in row) + " |", flush=True)


if __name__ == "__main__":
    main()
