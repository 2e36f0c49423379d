"""XLA:CPU's two instruction schedules on megxla's compiled training steps: run time and temporary memory of each.

XLA:CPU orders a program's instructions breadth-first by default ("concurrency-optimized": independent instructions
side by side, for its thunk executor to run at once, keeping more buffers live) or depth-first
(``xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED``). megxla times both on a program whose runs are long
and keeps the faster (``megxla/jit/_schedules.py``); this measures what that choice is between.

Each workload runs in a fresh process: its step under ``xla_trace`` for ``--warmup`` steps (XLA's default schedule,
the choice off), then its one executable compiled both ways from the same lowered program, and ``--runs`` runs of
each, alternating (each twice in turn), each timed from its inputs being ready to its results being ready; the
medians, their ratio, and each executable's temporary buffers (``memory_analysis``). Then, in another process, the
step as megxla runs it (the choice on) for ``--steps`` steps: which schedule it kept.

    python benchmarks/xla_cpu_scheduler.py                       # ~5 min on 2 cores
    python benchmarks/xla_cpu_scheduler.py --only mlp,resnet18 --runs 6
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = ("mlp", "convnet_b8", "convnet_b64", "transformer", "resnet18")
ZOO = ("bert_tiny", "dcgan", "mobilenetv3", "efficientnet_b0", "regnetx_200mf")
OTHERS = ("resnext_ibn",)


def _resnext_ibn():
    """IBN-Net's ResNeXt-IBN-a as its MegEngine port writes it (``Bottleneck_IBN``: a 1x1 convolution, then half its
    channels instance-normalized and half batch-normalized, a grouped 3x3 convolution, a 1x1 one; ``ResNeXt_IBN``:
    a 7x7 stem, max-pooling, four stages, 7x7 average pooling), one block a stage, cardinality 8, base width 4, 10
    classes: the step that ran slower under ``xla_trace`` than eagerly with XLA's default schedule."""
    import megxla.functional as F
    import megxla.module as M

    class IBN(M.Module):
        def __init__(self, planes):
            super().__init__()
            self.half = planes // 2
            self.IN = M.InstanceNorm(self.half)
            self.BN = M.BatchNorm2d(planes - self.half)

        def forward(self, x):
            a, b = F.split(x, [self.half], 1)
            return F.concat([self.IN(a), self.BN(b)], 1)

    class Block(M.Module):
        def __init__(self, inplanes, planes, stride, ibn):
            super().__init__()
            width = (planes * 4 // 64) * 8
            self.conv1 = M.Conv2d(inplanes, width, 1, bias=False)
            self.bn1 = IBN(width) if ibn else M.BatchNorm2d(width)
            self.conv2 = M.Conv2d(width, width, 3, stride, 1, groups=8, bias=False)
            self.bn2 = M.BatchNorm2d(width)
            self.conv3 = M.Conv2d(width, planes * 4, 1, bias=False)
            self.bn3 = M.BatchNorm2d(planes * 4)
            self.down = M.Sequential(M.Conv2d(inplanes, planes * 4, 1, stride, bias=False),
                                     M.BatchNorm2d(planes * 4))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = F.relu(self.bn2(self.conv2(out)))
            return F.relu(self.bn3(self.conv3(out)) + self.down(x))

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.stem = M.Sequential(M.Conv2d(3, 64, 7, 2, 3, bias=False), M.BatchNorm2d(64), M.ReLU(),
                                     M.MaxPool2d(3, 2, 1))
            self.stages = M.Sequential(Block(64, 64, 1, True), Block(256, 128, 2, True), Block(512, 256, 2, True),
                                       Block(1024, 512, 2, False))
            self.pool = M.AvgPool2d(7)
            self.fc = M.Linear(2048, 10)

        def forward(self, x):
            return self.fc(F.flatten(self.pool(self.stages(self.stem(x))), 1))
    return Net()


def _stepper(name):
    """``(run(i), traced)``: step ``i`` of the workload under ``xla_trace``, and the traced function."""
    import megxla as mge
    from megxla.jit import xla_trace

    if name in LOOP:
        import eager_loop
        wl, step_fn = eager_loop._workload(name)
        model, opt, gm = eager_loop._setup(wl)
        traced = xla_trace(lambda m, o, x, y: step_fn(m, o, gm, x, y))
        batches = eager_loop._batches(wl, 4)

        def run(i):
            x, y = batches[i % len(batches)]
            return traced(model, opt, mge.Tensor(x), mge.Tensor(y))
        return run, traced
    if name == "resnext_ibn":
        import megxla.functional as F
        import megxla.optimizer as optim
        from megxla.autodiff import GradManager

        mge.random.seed(0)
        net = _resnext_ibn()
        gm = GradManager().attach(net.parameters())
        opt = optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        rng = np.random.RandomState(1)
        batches = [(rng.randn(1, 3, 224, 224).astype("float32"), rng.randint(0, 10, 1).astype("int32"))
                   for _ in range(4)]

        def step(net, opt, x, y):
            with gm:
                loss = F.nn.cross_entropy(net(x), y)
                gm.backward(loss)
            opt.step().clear_grad()
            return loss
        traced = xla_trace(step)
        return (lambda i: traced(net, opt, *[mge.Tensor(a) for a in batches[i % 4]])), traced
    import zoo_loop
    (models_, opts, gms), step, data = zoo_loop.setup(name, batches=4)
    traced = xla_trace(lambda m, o, *xs: step(m, o, gms, *xs))
    return (lambda i: traced(models_, opts, *[mge.Tensor(a) for a in data[i % len(data)]])), traced


def _compare(name, warmup, runs):
    """(A fresh process, the choice off) the step's executable compiled with each schedule, alternating."""
    import jax
    from megxla.jit import _schedules

    run, traced = _stepper(name)
    for i in range(warmup):
        run(i).item()
    seg = traced._entry().segments[0]
    exes = [seg.lowered.compile(), seg.lowered.compile(compiler_options=_schedules.OTHER["cpu"])]
    times, pick = ([], []), [0]

    def alternate(*args):
        k = pick[0]
        jax.block_until_ready(args)
        t0 = time.perf_counter()
        outs = exes[k](*args)
        jax.block_until_ready(outs)
        times[k].append(time.perf_counter() - t0)
        return outs
    seg.executable = alternate  # (a prepared call reads the segment's executable at every call)
    for i in range(2 * runs + 2):
        pick[0] = [1, 0, 0, 1][i % 4] if i >= 2 else i % 2  # (each once untimed first, then in turn)
        if i == 2:
            times[0].clear(), times[1].clear()
        run(warmup + i).item()
    temps = [getattr(e.memory_analysis(), "temp_size_in_bytes", None) for e in exes]
    return {"ms": [statistics.median(t) * 1e3 for t in times], "temp": temps}


def _chosen(name, steps):
    """(A fresh process, the choice on) ``steps`` steps; which schedule the step's executable kept."""
    from megxla.jit import _schedules

    run, traced = _stepper(name)
    t0 = time.perf_counter()
    for i in range(steps):
        run(i).item()
    return {"stats": dict(_schedules.stats), "seconds": time.perf_counter() - t0}


def _child(kind, name, a, b):
    if kind == "compare":
        os.environ["MEGXLA_SCHEDULE_CHOICE"] = "0"
    sys.path.insert(0, os.path.dirname(HERE))
    sys.path.insert(0, HERE)
    out = _compare(name, int(a), int(b)) if kind == "compare" else _chosen(name, int(a))
    print("RESULT " + json.dumps(out), flush=True)


def _run(*args):
    out = subprocess.run([sys.executable, __file__, "--child", *map(str, args)], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{args} failed:\n{out.stderr[-2000:]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(LOOP + ZOO + OTHERS))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--runs", type=int, default=8, help="timed runs of each executable")
    ap.add_argument("--steps", type=int, default=60, help="steps of the run with the choice on (0: none)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(*args.child)
    print(f"xla_trace steps, their executable compiled with each schedule: ms a run (median of {args.runs}, "
          f"alternating in one process), temporary buffers (MB); and what megxla kept over {args.steps} steps\n")
    print("| workload | breadth-first (XLA's default) ms | depth-first ms | depth-first / default | temp MB default / "
          "depth-first | megxla kept |")
    print("|---|---|---|---|---|---|")
    for name in args.only.split(","):
        few = name in ("resnet18", "transformer", "efficientnet_b0", "mobilenetv3")
        r = _run("compare", name, 2 if few else args.warmup, max(4, args.runs // 2) if few else args.runs)
        a, b = r["ms"]
        mb = " / ".join("-" if t is None else f"{t / 2**20:.1f}" for t in r["temp"])
        kept = "-"
        if args.steps:
            st = _run("chosen", name, min(args.steps, 20) if few else args.steps, 0)["stats"]
            kept = "not tried (short runs)" if not st["probed"] else ("depth-first" if st["other"] else "default")
        print(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.2f} | {mb} | {kept} |", flush=True)


if __name__ == "__main__":
    main()
