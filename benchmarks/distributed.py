"""Data-parallel step time: the ConvNet step under ``xla_trace`` with the gradient all-reduce inside the
executable, on 1 process (batch B) vs 2 processes (batch B each, i.e. the same per-process work, twice the
global batch), plus the eager all_reduce_sum latency and bandwidth.

    .venv/bin/python benchmarks/distributed.py [--device gpu] [--batch 32] [--steps 30] [--mib 64]
    .venv/bin/python benchmarks/distributed.py --eager-loop convnet_b8,convnet_b64 [--steps 60]

``--eager-loop``: the data-parallel training loop as MegEngine's zoo writes it (``make_allreduce_cb("mean")``, no
decorator, ``loss.item()`` every step) on 2 processes, eagerly, under auto-jit and under ``xla_trace``: median ms
per step over the second half of ``--steps``, each mode run twice in turns (the workloads of ``models.py``).

On a CPU machine the 2 processes share the machine's cores, so their step time measures the collective's
overhead plus the contention, not a speed-up. With ``--device gpu`` each process drives one GPU (NCCL) and the
all_reduce_sum of a ``--mib`` MiB float32 tensor gives the collective bandwidth.
"""
import argparse
import json
import time

import numpy as np

import megxla as mge
import megxla.autodiff as ad
import megxla.distributed as dist
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.jit import xla_trace


class ConvNet(M.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = M.Conv2d(1, 16, 3, padding=1, bias=False), M.BatchNorm2d(16)
        self.conv2, self.bn2 = M.Conv2d(16, 32, 3, padding=1, bias=False), M.BatchNorm2d(32)
        self.fc = M.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(F.flatten(x, 1))


def _train_step(gm):
    """The training step as MegEngine's zoo writes it, its gradients through ``gm``."""
    def step(model, opt, x, y):
        with gm:
            loss = F.nn.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss
    return step


def bench(batch, steps, mib):
    model = ConvNet()
    if dist.is_distributed():
        dist.bcast_list_(list(model.parameters()))
    cbs = [dist.make_allreduce_cb("mean")] if dist.is_distributed() else []
    gm = ad.GradManager().attach(model.parameters(), callbacks=cbs)
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    step = xla_trace(_train_step(gm))
    rng = np.random.RandomState(dist.get_rank())
    x = mge.Tensor(rng.randn(batch, 1, 28, 28).astype("float32"))
    y = mge.Tensor(rng.randint(0, 10, batch).astype("int32"))
    for _ in range(5):
        step(model, opt, x, y).numpy()
    times = []
    for _ in range(steps):
        if dist.is_distributed():
            dist.group_barrier()  # start each timed step together
        t = time.perf_counter()
        step(model, opt, x, y).numpy()
        times.append(time.perf_counter() - t)
    out = {"step_ms": 1e3 * float(np.median(times))}
    if dist.is_distributed():
        small = mge.Tensor(np.ones(16, "float32"))
        big = mge.Tensor(np.ones(mib * 2 ** 18, "float32"))
        for name, t in (("small", small), ("big", big)):
            F.distributed.all_reduce_sum(t).numpy()
            ts = []
            for _ in range(10 if name == "big" else 50):
                dist.group_barrier()
                t0 = time.perf_counter()
                F.distributed.all_reduce_sum(t).numpy()
                ts.append(time.perf_counter() - t0)
            out[f"allreduce_{name}_ms"] = 1e3 * float(np.median(ts))
        n = dist.get_world_size()
        # bus bandwidth of a ring all-reduce: 2 (n-1)/n * bytes / time
        out["allreduce_busbw_GBps"] = 2 * (n - 1) / n * mib * 2 ** 20 / (out["allreduce_big_ms"] / 1e3) / 1e9
    return out


def eager_loop(names, steps):
    """{workload: {mode: [median ms/step of each of its 2 runs]}} of this process (see the module doc)."""
    import os
    import statistics
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (a rank process: models.py beside this file)
    import models
    from megxla.jit import auto_jit_stats, reset_auto_jit_stats
    out = {}
    for name in names:
        wl = models.WORKLOADS[name]
        rng = np.random.RandomState(dist.get_rank())
        data = [wl.inputs(rng) for _ in range(4)]
        res = out[name] = {}
        for mode in ("eager", "auto_jit", "xla_trace") * 2:
            mge.random.seed(0)
            model = wl.build()
            opt = wl.make_optimizer(model.parameters())
            gm = ad.GradManager().attach(model.parameters(), callbacks=[dist.make_allreduce_cb("mean")])
            step = _train_step(gm)
            run = xla_trace(step) if mode == "xla_trace" else step
            mge.config.auto_jit = mode == "auto_jit"
            reset_auto_jit_stats()
            times = []
            try:
                for i in range(steps):
                    x, y = data[i % len(data)]
                    t0 = time.perf_counter()
                    run(model, opt, mge.Tensor(x), mge.Tensor(y)).item()
                    times.append(time.perf_counter() - t0)
            finally:
                mge.config.auto_jit = False
            res.setdefault(mode, []).append(round(statistics.median(times[steps // 2:]) * 1e3, 2))
            if mode == "auto_jit":
                s = auto_jit_stats()
                res.setdefault("auto_jit_eager_steps", []).append(s["eager_steps"])
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--eager-loop", default=None, help="workloads of models.py (comma-separated): the data-"
                   "parallel loop eagerly, under auto-jit and under xla_trace, instead of the default benchmark")
    a = p.parse_args()
    if a.eager_loop:
        res = dist.launcher(eager_loop, n_gpus=2, device_type=a.device)(a.eager_loop.split(","), a.steps)
        print(json.dumps(res[0], indent=1))
        return
    one = dist.launcher(bench, n_gpus=1, device_type=a.device)(a.batch, a.steps, a.mib)[0]
    two = dist.launcher(bench, n_gpus=2, device_type=a.device)(a.batch, a.steps, a.mib)
    res = {"device": a.device, "batch_per_process": a.batch, "one_process_step_ms": one["step_ms"],
           "two_process_step_ms": [r["step_ms"] for r in two],
           "allreduce_16_floats_ms": two[0]["allreduce_small_ms"],
           f"allreduce_{a.mib}MiB_ms": two[0]["allreduce_big_ms"],
           "allreduce_busbw_GBps": two[0]["allreduce_busbw_GBps"]}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
