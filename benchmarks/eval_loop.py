"""An evaluation loop that keeps its outputs and reads none until the end, eager vs auto-jit.

``outs = [model(x) for x in batches]``, then each to the host: nothing cuts the clusters but auto-jit's size caps. Each
(model, mode) runs in a fresh process; reported: seconds for the loop and the read, compilations, cache hits and
the process's peak resident memory.

Usage::

    .venv/bin/python benchmarks/eval_loop.py                  # small conv net x 20000, ResNet-18 (b16, 32 px) x 300
    .venv/bin/python benchmarks/eval_loop.py --only convnet --steps 8000
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = {"convnet": 20000, "resnet18": 300}


def _child(name, mode, steps):
    import time
    sys.path.insert(0, HERE)
    import numpy as np
    import megxla as mge
    import megxla.module as M
    from megxla.jit import auto_jit_stats
    mge.config.auto_jit = mode == "auto_jit"
    mge.random.seed(0)
    if name == "convnet":
        net = M.Sequential(M.Conv2d(3, 8, 3, padding=1), M.BatchNorm2d(8), M.ReLU(), M.Conv2d(8, 8, 3, padding=1),
                           M.BatchNorm2d(8), M.ReLU(), M.AdaptiveAvgPool2d(1))
        xs = np.random.RandomState(0).randn(16, 4, 3, 16, 16).astype("float32")
    else:
        import models
        net = models.ResNet18()
        xs = np.random.RandomState(0).randn(8, 16, 3, 32, 32).astype("float32")
    net.eval()
    t = time.perf_counter()
    outs = [net(mge.tensor(xs[i % len(xs)])) for i in range(steps)]
    total = float(np.concatenate([o.numpy().ravel() for o in outs]).sum())  # (the predictions, to the host)
    secs = time.perf_counter() - t
    with open("/proc/self/status") as fh:
        peak = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM")) / 1024
    st = auto_jit_stats()
    print("RESULT " + json.dumps({"s": secs, "peak_mb": peak, "compiled": st["compiled"], "hits": st["cache_hits"],
                                  "total": total}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="convnet,resnet18")
    ap.add_argument("--steps", type=int, default=0, help="steps per model (default: 20000 conv net, 300 ResNet-18)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args.child[0], args.child[1], int(args.child[2]))
    print("| model | steps | mode | seconds | compilations | cache hits | peak memory |\n|---|---:|---|---:|---:|---:|---:|")
    for name in args.only.split(","):
        steps = args.steps or STEPS[name]
        totals = []
        for mode in ("eager", "auto_jit"):
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name, mode, str(steps)],
                                  capture_output=True, text=True, timeout=3600)
            res = [json.loads(x[7:]) for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if not res:
                print(proc.stderr[-2000:], file=sys.stderr)
                continue
            r = res[0]
            totals.append(r["total"])
            print(f"| {name} | {steps} | {mode} | {r['s']:.1f} | {r['compiled']} | {r['hits']} | "
                  f"{r['peak_mb']:.0f} MB |", flush=True)
        if len(totals) == 2 and abs(totals[0] - totals[1]) > 1e-4 * max(1.0, abs(totals[0])):
            print(f"  {name}: outputs differ: {totals}", file=sys.stderr)


if __name__ == "__main__":
    main()
