"""Eager training steps: op calls dispatched per step and ms per step, per workload of ``models.WORKLOADS``.

    python benchmarks/eager_step.py                       # every workload but resnet18
    python benchmarks/eager_step.py --only mlp,convnet_b64 --steps 20

Op calls are counted at the one dispatch point (``core._dispatch._compute``) during one step after warm-up;
ms/step is the median (and min) of ``--steps`` steps, each blocked on every tensor it wrote. With ``--adam`` every
workload uses Adam (lr 1e-3), the optimizer of issue 12's op-count targets (MLP <= 25, ConvNet+BN <= 50).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import megxla as mge  # noqa: E402
import megxla.functional as F  # noqa: E402
import megxla.optimizer as optim  # noqa: E402
from megxla.autodiff import GradManager  # noqa: E402
from megxla.core import _dispatch  # noqa: E402

import models  # noqa: E402


def measure(wl, steps, adam):
    """``(op calls per step, median ms, min ms)`` of ``wl``'s eager training step."""
    model = wl.build()
    opt = optim.Adam(model.parameters(), lr=1e-3) if adam else wl.make_optimizer(model.parameters())
    xs, ys = wl.inputs(np.random.RandomState(0))
    x, y = mge.Tensor(xs), mge.Tensor(ys)
    gm = GradManager().attach(model.parameters())

    def step():
        with gm:
            loss = F.nn.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    def written():
        return list(model.tensors()) + [v for s in opt._state.values() for v in s.values()]

    for _ in range(3):
        step()
    calls = [0]
    # every eager computation of the dispatch point goes through _compute (older versions: eager_apply)
    hook = "_compute" if hasattr(_dispatch, "_compute") else "eager_apply"
    orig = getattr(_dispatch, hook)

    def counting(op, inputs):
        calls[0] += 1
        return orig(op, inputs)

    setattr(_dispatch, hook, counting)
    try:
        step()
    finally:
        setattr(_dispatch, hook, orig)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        for t in written() + [loss]:
            t._data.block_until_ready()
        times.append(time.perf_counter() - t0)
    return calls[0], statistics.median(times) * 1e3, min(times) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="comma-separated workload names")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--adam", action="store_true", help="use Adam for every workload")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else [n for n in models.WORKLOADS if n != "resnet18"]
    print(f"{'workload':<14} {'ops/step':>8} {'median ms':>10} {'min ms':>8}")
    for name in names:
        calls, med, mn = measure(models.WORKLOADS[name], args.steps, args.adam)
        print(f"{name:<14} {calls:>8} {med:>10.2f} {mn:>8.2f}")


if __name__ == "__main__":
    main()
