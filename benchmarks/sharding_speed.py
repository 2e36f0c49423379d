"""Step time of sharded training vs data parallel: the Transformer of ``sharding_memory.py`` trained with Adam
under ``xla_trace`` (collectives inside the one executable) on 2 and 4 CPU processes, per-rank batch fixed;
then the collectives in the optimized HLO of the fully sharded step.

    .venv/bin/python benchmarks/sharding_speed.py [--ranks 2,4] [--dim 128] [--blocks 4] [--steps 20] [--hlo]

Modes: ``dp`` (whole model per rank, gradient all-reduce callbacks), ``zero`` (``shard_optimizer``), ``fsdp``
(``fully_shard``), ``tp`` (``parallelize``: the MLPs split, every rank on the same batch).
On a CPU machine the processes share its cores: the times measure the collectives' overhead plus contention,
not a speed-up. Prints some collective instructions of the fsdp step's optimized HLO (``--hlo``: all of them).
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
from megxla.jit import xla_trace  # noqa: E402
from sharding_memory import Transformer  # noqa: E402

# the MLPs (the attention's fused q|k|v Linear stays whole: split by columns it would give each rank parts of
# all three projections instead of whole heads; tests/test_fsdp.py splits separate q, k, v, o by heads)
PLAN = {"blocks.*.fc1": dist.ColwiseParallel(), "blocks.*.fc2": dist.RowwiseParallel()}


def bench(mode, dim, blocks, steps, batch=8, seq=16):
    mge.random.seed(0)
    model = Transformer(dim, blocks)
    if mode == "fsdp":
        dist.fully_shard(model)
    if mode == "tp":
        dist.parallelize(model, PLAN)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    if mode == "zero":
        opt = dist.shard_optimizer(opt)
    cbs = [dist.make_allreduce_cb("mean")] if mode == "dp" else []
    gm = GradManager().attach(model.parameters(), callbacks=cbs)

    @xla_trace
    def step(model, opt, x, y):
        with gm:
            loss = F.nn.cross_entropy(model(x).reshape(-1, 10), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    rng = np.random.RandomState(0 if mode == "tp" else dist.get_rank())
    x = mge.Tensor(rng.randn(batch, seq, dim).astype("float32"))
    y = mge.Tensor(rng.randint(0, 10, (batch * seq,)).astype("int32"))
    for _ in range(4):
        step(model, opt, x, y).numpy()
    dist.group_barrier()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step(model, opt, x, y).numpy()
        times.append(time.perf_counter() - t0)
    hlo = step.compiler_ir("hlo")
    colls = {}
    for op in ("all-gather", "reduce-scatter", "all-reduce"):  # instructions (a combined one: a tuple result)
        n = len(re.findall(rf"\s{op}(?:-start)?\(", hlo))
        if n:
            colls[op] = n
    lines = [ln.strip() for ln in hlo.splitlines()
             if re.search(r"\s(all-gather|reduce-scatter|all-reduce)(-start)?\(", ln)]
    return (float(np.median(times)) * 1e3, float(np.min(times)) * 1e3), colls, lines


def _worker(modes, dim, blocks, steps):
    return {m: bench(m, dim, blocks, steps) for m in modes}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--hlo", action="store_true")
    args = ap.parse_args()
    modes = ("dp", "zero", "fsdp", "tp")
    print(f"Transformer d={args.dim}, {args.blocks} blocks, batch 8 x seq 16 per rank, Adam, xla_trace; ms per step "
          f"of rank 0 over {args.steps} steps")
    print("| ranks | mode | median ms | min ms | collectives in the step's HLO |")
    print("|---|---|---|---|---|")
    fsdp_lines = None
    for n in [int(r) for r in args.ranks.split(",")]:
        res = dist.launcher(_worker, n_gpus=n, device_type="cpu")(modes, args.dim, args.blocks, args.steps)[0]
        for m in modes:
            (ms, best), colls, lines = res[m]
            print(f"| {n} | {m} | {ms:.1f} | {best:.1f} | {', '.join(f'{k} x{v}' for k, v in colls.items())} |",
                  flush=True)
            if m == "fsdp":
                fsdp_lines = lines
    if fsdp_lines:
        shown = fsdp_lines if args.hlo else [ln for ln in fsdp_lines if "all-gather" in ln][:3] + \
            [ln for ln in fsdp_lines if "reduce-scatter" in ln][:3]
        print(f"\ncollectives of the fully sharded step (optimized HLO, {len(shown)} of {len(fsdp_lines)}; --hlo: all):")
        for ln in shown:
            print("  " + ln[:160])


if __name__ == "__main__":
    main()
