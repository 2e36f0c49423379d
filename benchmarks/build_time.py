"""Model construction time: first build in a fresh process, megxla vs PyTorch (issue 18).

Every measurement runs in its own subprocess (nothing compiled or cached in memory before it) with megxla's
persistent compilation cache off, so it is what a user meets on a first run. A build is timed from the first
line of the model's constructor until every parameter and buffer is materialised (megxla: the arrays are
ready on the device); the import of the framework is timed apart. For megxla the number of XLA compilations
during the build is counted through JAX's monitoring hook. ``--forward`` adds the first eager forward pass
(batch 2; compiles and seconds), the other place where a first run pays per-shape compiles.

Usage::

    .venv/bin/python benchmarks/build_time.py                      # resnet18, resnet50, transformer
    .venv/bin/python benchmarks/build_time.py --forward --repeats 3 --models resnet18
    .venv/bin/python benchmarks/build_time.py --first-step     # cold vs warm persistent compilation cache
    .venv/bin/python benchmarks/build_time.py --eager-first-step mobilenetv2   # eager vs auto-jit first step

MegEngine 1.13 on the same 2-core CPU builds the ResNet-18 in 0.19 s (figure from issue 18).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("resnet18", "resnet50", "transformer")
# input of the first eager forward, batch 2
_INPUTS = {"resnet18": ("image", (2, 3, 32, 32)), "resnet50": ("image", (2, 3, 224, 224)),
           "transformer": ("tokens", (2, 128))}
MEGENGINE_S = {"resnet18": 0.19}  # issue 18's MegEngine 1.13 figure, same machine kind


def _child(framework, model, forward):
    import time
    t0 = time.perf_counter()
    sys.path.insert(0, HERE)
    if framework == "megxla":
        import jax
        counts = {"build": 0, "forward": 0}
        phase = ["import"]

        def on_duration(event, duration, **kw):
            if event == "/jax/core/compile/backend_compile_duration" and phase[0] in counts:
                counts[phase[0]] += 1

        jax.monitoring.register_event_duration_secs_listener(on_duration)
        import numpy as np
        import megxla
        import models
        cls = {"resnet18": models.ResNet18, "resnet50": models.ResNet50, "transformer": models.Transformer}[model]
        megxla.random.seed(0)
        t1 = time.perf_counter()
        phase[0] = "build"
        net = cls()
        jax.block_until_ready([t._data for t in list(net.parameters()) + list(net.buffers())])
        t2 = time.perf_counter()
        out = {"import_s": t1 - t0, "build_s": t2 - t1, "compiles": counts["build"],
               "params": int(sum(p.size for p in net.parameters()))}
        if forward:
            kind, shape = _INPUTS[model]
            rng = np.random.RandomState(0)
            x = rng.randint(0, 1000, shape).astype("int32") if kind == "tokens" else \
                rng.standard_normal(shape).astype("float32")
            x = megxla.Tensor(x)
            phase[0] = "forward"
            t3 = time.perf_counter()
            net(x).numpy()
            out.update(forward_s=time.perf_counter() - t3, forward_compiles=counts["forward"])
    else:
        import torch
        import models
        torch.manual_seed(0)
        cls = models.torch_models()[model]
        t1 = time.perf_counter()
        net = cls()
        t2 = time.perf_counter()
        out = {"import_s": t1 - t0, "build_s": t2 - t1, "params": int(sum(p.numel() for p in net.parameters()))}
        if forward:
            kind, shape = _INPUTS[model]
            x = torch.randint(0, 1000, shape) if kind == "tokens" else torch.randn(shape)
            t3 = time.perf_counter()
            with torch.no_grad():
                net(x)
            out.update(forward_s=time.perf_counter() - t3)
    print("RESULT " + json.dumps(out))


def _first_step_workload(models, model):
    import dataclasses
    wl = models.WORKLOADS.get(model) or models.WORKLOADS[model + "_b64"]
    if wl.kind != "transformer":
        c, h, w = (3, 224, 224) if wl.kind == "resnet50" else (3, 32, 32)
        wl = dataclasses.replace(wl, inputs=models._images((8, c, h, w), 1000 if wl.kind == "resnet50" else 10))
    else:
        wl = dataclasses.replace(wl, inputs=models._tokens(8, 128, 1000))
    return wl


def _child_first_step(model, framework="megxla"):
    """Seconds from process start (import and model build included) to the end of the first compiled
    training step (batch 8): megxla's ``xla_trace`` step, or the hand-written ``jax.jit`` step (``framework``
    "jax"; its initial weights come from a megxla model, and the time that takes is not counted)."""
    import time
    t0 = time.perf_counter()
    sys.path.insert(0, HERE)
    if framework in ("eager", "auto_jit", "megengine"):
        return _child_eager_step(model, framework)
    if framework == "jax":
        from megxla import config  # noqa: F401  (sets up JAX's persistent cache from the same variables)
    import run
    import models
    wl = _first_step_workload(models, model)
    if framework == "jax":
        made = run.initial_arrays
        spent = []

        def initial_arrays(w):
            t = time.perf_counter()
            out = made(w)
            spent.append(time.perf_counter() - t)
            return out

        run.initial_arrays = initial_arrays
        step, info = run.make_jax(wl)
        t0 += sum(spent)
        t1 = time.perf_counter()
        step()
        t2 = time.perf_counter()
        print("RESULT " + json.dumps({"first_step_s": t2 - t0, "calls_s": t2 - t1, "calls": 1}))
        return
    step, info = run.make_megxla(wl, "xla_trace")
    t1 = time.perf_counter()
    calls = 0
    while not step.traced.num_compiled:  # until the call that compiled the step (and ran it) has finished
        step()
        calls += 1
    t2 = time.perf_counter()
    print("RESULT " + json.dumps({"first_step_s": t2 - t0, "calls_s": t2 - t1, "calls": calls}))


def _child_eager_step(model, framework):
    """Seconds from process start to the end of the first EAGER training step (forward, cross-entropy,
    backward, SGD update) of ``model`` at batch 2 (``mobilenetv2``, ``mobilenetv3``, ``efficientnet_b0``: 224 px;
    ``resnet18``: 32 px), written as the
    model zoo's train.py writes it; ``framework`` "auto_jit" switches ``megxla.config.auto_jit`` on first."""
    import time
    t0 = time.perf_counter()
    sys.path.insert(0, HERE)
    import numpy as np
    if framework == "megengine":
        # MegEngine 1.13 itself (its own Python: it needs <= 3.10), running the same models.py: megxla's module
        # names are MegEngine's
        import megengine
        import megengine.functional
        import megengine.module
        import megengine.optimizer
        import megengine.autodiff
        for name in ("", ".functional", ".module", ".optimizer", ".autodiff"):
            sys.modules["megxla" + name] = sys.modules["megengine" + name]
    import megxla as mge
    import megxla.functional as F
    import megxla.optimizer as optim
    from megxla.autodiff import GradManager
    import models
    if framework != "megengine":
        mge.config.auto_jit = framework == "auto_jit"
    zoo = {"mobilenetv2": models.MobileNetV2, "mobilenetv3": models.MobileNetV3Large,
           "efficientnet_b0": models.EfficientNetB0}
    net = zoo[model]() if model in zoo else models.ResNet18()
    size, classes = (224, 1000) if model in zoo else (32, 10)
    opt = optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    gm = GradManager().attach(net.parameters())
    rng = np.random.RandomState(0)
    x = mge.tensor(rng.standard_normal((2, 3, size, size)).astype("float32"))
    y = mge.tensor(rng.randint(0, classes, 2).astype("int32"))
    t1 = time.perf_counter()
    with gm:
        loss = F.nn.cross_entropy(net(x), y)
        gm.backward(loss)
    opt.step().clear_grad()
    loss.item()
    t2 = time.perf_counter()
    print("RESULT " + json.dumps({"first_step_s": t2 - t0, "calls_s": t2 - t1, "calls": 1}), flush=True)
    # (untimed) nine more steps, as a training run makes: what they leave in the compilation cache is what a
    # warm start finds -- under auto-jit the optimized executable, compiled beside the quick one from the second
    # step on (jit/_tiers.py)
    for _ in range(9):
        with gm:
            loss = F.nn.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        loss.item()


def first_step_cold_warm(model, cache_dir, framework="megxla", python=sys.executable):
    """Results (cold, warm) of two fresh processes sharing a new persistent cache: seconds to the first compiled
    step from process start (``first_step_s``) and from the built model (``calls_s``). ``python``: the
    interpreter (MegEngine's, for ``framework`` "megengine")."""
    env = dict(os.environ, MEGXLA_COMPILATION_CACHE="1", MEGXLA_COMPILATION_CACHE_DIR=cache_dir,
               OMP_WAIT_POLICY="PASSIVE")
    # A user's Python keeps bytecode caches (pip writes them at install): with PYTHONDONTWRITEBYTECODE set (as
    # in some sandboxes) every process would compile megxla's sources again, ~0.15 s that no user pays.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = []
    for _ in range(2):
        proc = subprocess.run([python, os.path.abspath(__file__), "--child-step", model, framework],
                              capture_output=True, text=True, env=env, timeout=1800)
        res = [json.loads(x[7:]) for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        out.append(res[0] if res else {"first_step_s": float("nan"), "calls_s": float("nan")})
        if not res:
            print(proc.stderr[-2000:], file=sys.stderr)
    return tuple(out)


def measure(framework, model, forward=False, threads=None):
    """One first build in a fresh subprocess; returns its result dict (or ``{"error": ...}``)."""
    env = dict(os.environ, MEGXLA_COMPILATION_CACHE="0", OMP_WAIT_POLICY="PASSIVE")
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", framework, model] + (["--forward"] if forward else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}


def _median(runs, key):
    vals = [r[key] for r in runs if key in r]
    return statistics.median(vals) if vals else None


def _fmt(v, unit="s"):
    return "-" if v is None else f"{v:.2f} {unit}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, out of {','.join(MODELS)}")
    ap.add_argument("--repeats", type=int, default=1, help="fresh processes per cell (median reported)")
    ap.add_argument("--forward", action="store_true", help="also time the first eager forward (batch 2)")
    ap.add_argument("--no-torch", action="store_true", help="megxla only")
    ap.add_argument("--json", default=None, help="write the raw results to this file")
    ap.add_argument("--first-step", action="store_true",
                    help="instead: time to the first compiled xla_trace step (batch 8), cold then warm cache")
    ap.add_argument("--eager-first-step", default=None, metavar="MODELS",
                    help="instead: time to the end of the first eager training step (batch 2) of these models "
                         "(mobilenetv2, mobilenetv3, efficientnet_b0, resnet18), eager vs auto-jit, cold then "
                         "warm cache")
    ap.add_argument("--modes", default="eager,auto_jit", help="with --eager-first-step: eager, auto_jit")
    ap.add_argument("--megengine", default=None, metavar="PYTHON",
                    help="with --eager-first-step: also MegEngine 1.13's first step, run by this interpreter (one "
                         "with megengine==1.13 installed), on the same models.py model")
    ap.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "MODEL"), help=argparse.SUPPRESS)
    ap.add_argument("--child-step", nargs=2, metavar=("MODEL", "FRAMEWORK"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(*args.child, args.forward)
    if args.child_step:
        return _child_first_step(*args.child_step)
    if args.eager_first_step:
        import tempfile
        print("First eager training step (batch 2) of a fresh process, from process start (import and build "
              "included) and from the built model, with a new (cold) and then a warm persistent compilation cache\n")
        print("| model | mode | cold cache | warm cache | calls only: cold | warm |\n|---|---|---:|---:|---:|---:|")
        for m in args.eager_first_step.split(","):
            modes = [(fw, sys.executable) for fw in args.modes.split(",")]
            for fw, python in modes + ([("megengine", args.megengine)] if args.megengine else []):
                with tempfile.TemporaryDirectory(prefix="megxla_cache_") as d:
                    cold, warm = first_step_cold_warm(m, d, fw, python)
                print(f"| {m} | {fw} | {cold['first_step_s']:.2f} s | {warm['first_step_s']:.2f} s | "
                      f"{cold['calls_s']:.2f} s | {warm['calls_s']:.2f} s |", flush=True)
        return None
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(models) - set(MODELS)
    if unknown:
        ap.error(f"unknown models {sorted(unknown)}; choose from {MODELS}")
    if args.first_step:
        import tempfile
        print("First compiled training step (batch 8) of a fresh process, megxla's xla_trace step and the "
              "hand-written jax.jit step: from process start (import, build included) and from the built model "
              "(the calls), with a new (cold) and then a warm persistent compilation cache\n")
        print("| model | step | cold cache | warm cache | speed-up | calls only: cold | warm | speed-up |\n"
              "|---|---|---:|---:|---:|---:|---:|---:|")
        for m in models:
            for fw, label in (("megxla", "xla_trace"), ("jax", "jax.jit")):
                with tempfile.TemporaryDirectory(prefix="megxla_cache_") as d:
                    cold, warm = first_step_cold_warm(m, d, fw)
                a, b = cold["first_step_s"], warm["first_step_s"]
                c, e = cold["calls_s"], warm["calls_s"]
                print(f"| {m} | {label} | {a:.2f} s | {b:.2f} s | {a / b:.1f}x | {c:.2f} s | {e:.2f} s | "
                      f"{c / e:.1f}x |", flush=True)
        return None
    frameworks = ["megxla"]
    if not args.no_torch:
        try:
            import torch  # noqa: F401
            frameworks.append("torch")
        except ImportError:
            print("PyTorch not installed: megxla only (pip install torch==2.13.0)", file=sys.stderr)
    results = {}
    for m in models:
        for fw in frameworks:
            results[(m, fw)] = [measure(fw, m, args.forward) for _ in range(args.repeats)]
    head = "| model | params | megxla build | compiles | PyTorch build | megxla / PyTorch | MegEngine 1.13 |"
    sep = "|---|---:|---:|---:|---:|---:|---:|"
    if args.forward:
        head += " megxla 1st forward | its compiles | PyTorch 1st forward |"
        sep += "---:|---:|---:|"
    lines = [f"First model build in a fresh process (median of {args.repeats}; persistent cache off)", "", head, sep]
    for m in models:
        mx, th = results[(m, "megxla")], results.get((m, "torch"), [])
        if any("error" in r for r in mx + th):
            lines.append(f"| {m} | error: {[r['error'] for r in mx + th if 'error' in r][0]} |")
            continue
        b, tb = _median(mx, "build_s"), _median(th, "build_s")
        row = (f"| {m} | {mx[0]['params'] / 1e6:.1f} M | {_fmt(b)} | {_median(mx, 'compiles'):.0f} | {_fmt(tb)} | "
               f"{'-' if not tb else f'{b / tb:.1f}x'} | {_fmt(MEGENGINE_S.get(m))} |")
        if args.forward:
            row += (f" {_fmt(_median(mx, 'forward_s'))} | {_median(mx, 'forward_compiles'):.0f} | "
                    f"{_fmt(_median(th, 'forward_s'))} |")
        lines.append(row)
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{m}/{fw}": r for (m, fw), r in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
