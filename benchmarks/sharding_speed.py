"""Step time of sharded training vs data parallel: the Transformer of ``sharding_memory.py`` trained with Adam
under ``xla_trace`` (collectives inside the one executable) on 2 and 4 CPU processes, per-rank batch fixed;
then the collectives in the optimized HLO of the fully sharded step.

    .venv/bin/python benchmarks/sharding_speed.py [--ranks 2,4] [--dim 128] [--blocks 4] [--steps 20] [--hlo]
    .venv/bin/python benchmarks/sharding_speed.py --ranks 2 --runs eager,auto_jit,xla_trace   # the step as eager code
    .venv/bin/python benchmarks/sharding_speed.py --ranks 2 --modes fsdp,fsdp_kept --runs eager   # some of it

Modes: ``dp`` (whole model per rank, gradient all-reduce callbacks), ``zero`` (``shard_optimizer``), ``fsdp``
(``fully_shard``; ``fsdp_kept``: ``reshard_after_forward=False``), ``tp`` (``parallelize``: the MLPs split, every
rank on the same batch).
On a CPU machine the processes share its cores: the times measure the collectives' overhead plus contention,
not a speed-up. Prints some collective instructions of the fsdp step's optimized HLO (``--hlo``: all of them).
``--runs`` also times the same step written eagerly (``eager``) and under auto-jit (``auto_jit``), where each
cross-process collective cuts the pending cluster and runs as its own SPMD program (docs/design.md, "Collectives
stay between clusters"); the auto-jit column gives its clusters per step.
"""
import argparse
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import megxla as mge  # noqa: E402
import megxla.distributed as dist  # noqa: E402
import megxla.functional as F  # noqa: E402
import megxla.optimizer as optim  # noqa: E402
from megxla.autodiff import GradManager  # noqa: E402
from megxla.jit import auto_jit_stats, reset_auto_jit_stats, xla_trace  # noqa: E402
from sharding_memory import Transformer  # noqa: E402

# the MLPs (the attention's fused q|k|v Linear stays whole: split by columns it would give each rank parts of
# all three projections instead of whole heads; tests/test_fsdp.py splits separate q, k, v, o by heads)
PLAN = {"blocks.*.fc1": dist.ColwiseParallel(), "blocks.*.fc2": dist.RowwiseParallel()}


def bench(mode, dim, blocks, steps, batch=8, seq=16, run="xla_trace"):
    mge.random.seed(0)
    model = Transformer(dim, blocks)
    if mode in ("fsdp", "fsdp_kept"):
        dist.fully_shard(model, reshard_after_forward=mode == "fsdp")
    if mode == "tp":
        dist.parallelize(model, PLAN)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    if mode == "zero":
        opt = dist.shard_optimizer(opt)
    cbs = [dist.make_allreduce_cb("mean")] if mode == "dp" else []
    gm = GradManager().attach(model.parameters(), callbacks=cbs)

    def step(model, opt, x, y):
        with gm:
            loss = F.nn.cross_entropy(model(x).reshape(-1, 10), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    if run == "xla_trace":
        step = xla_trace(step)
    mge.config.auto_jit = run == "auto_jit"

    rng = np.random.RandomState(0 if mode == "tp" else dist.get_rank())
    x = mge.Tensor(rng.randn(batch, seq, dim).astype("float32"))
    y = mge.Tensor(rng.randint(0, 10, (batch * seq,)).astype("int32"))
    for _ in range(4):
        step(model, opt, x, y).numpy()
    dist.group_barrier()
    reset_auto_jit_stats()
    times = []
    try:
        for _ in range(steps):
            t0 = time.perf_counter()
            step(model, opt, x, y).numpy()
            times.append(time.perf_counter() - t0)
    finally:
        mge.config.auto_jit = False
    clusters = auto_jit_stats()["clusters"] / steps
    if run != "xla_trace":
        return (float(np.median(times)) * 1e3, float(np.min(times)) * 1e3), {"clusters a step": clusters}, []
    hlo = step.compiler_ir("hlo")
    colls = {}
    for op in ("all-gather", "reduce-scatter", "all-reduce"):  # instructions (a combined one: a tuple result)
        n = len(re.findall(rf"\s{op}(?:-start)?\(", hlo))
        if n:
            colls[op] = n
    lines = [ln.strip() for ln in hlo.splitlines()
             if re.search(r"\s(all-gather|reduce-scatter|all-reduce)(-start)?\(", ln)]
    return (float(np.median(times)) * 1e3, float(np.min(times)) * 1e3), colls, lines


def _worker(modes, dim, blocks, steps, runs):
    return {(m, r): bench(m, dim, blocks, steps, run=r) for m in modes for r in runs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--hlo", action="store_true")
    ap.add_argument("--runs", default="xla_trace", help="comma-separated: eager, auto_jit, xla_trace")
    ap.add_argument("--modes", default="dp,zero,fsdp,fsdp_kept,tp", help="comma-separated, of the default")
    args = ap.parse_args()
    modes = tuple(args.modes.split(","))
    runs = tuple(args.runs.split(","))
    print(f"Transformer d={args.dim}, {args.blocks} blocks, batch 8 x seq 16 per rank, Adam, {', '.join(runs)}; ms "
          f"per step of rank 0 over {args.steps} steps")
    print("| ranks | mode | run | median ms | min ms | collectives in the step's HLO (auto-jit: clusters a step) |")
    print("|---|---|---|---|---|---|")
    fsdp_lines = None
    for n in [int(r) for r in args.ranks.split(",")]:
        res = dist.launcher(_worker, n_gpus=n, device_type="cpu")(modes, args.dim, args.blocks, args.steps, runs)[0]
        for m in modes:
            for r in runs:
                (ms, best), colls, lines = res[(m, r)]
                what = ", ".join(f"{k} x{v}" for k, v in colls.items()) if r == "xla_trace" else \
                    (f"{colls['clusters a step']:.0f}" if r == "auto_jit" else "")
                print(f"| {n} | {m} | {r} | {ms:.1f} | {best:.1f} | {what} |", flush=True)
                if m == "fsdp" and r == "xla_trace":
                    fsdp_lines = lines
    if fsdp_lines:
        shown = fsdp_lines if args.hlo else [ln for ln in fsdp_lines if "all-gather" in ln][:3] + \
            [ln for ln in fsdp_lines if "reduce-scatter" in ln][:3]
        print(f"\ncollectives of the fully sharded step (optimized HLO, {len(shown)} of {len(fsdp_lines)}; --hlo: all):")
        for ln in shown:
            print("  " + ln[:160])


if __name__ == "__main__":
    main()
