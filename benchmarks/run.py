#!/usr/bin/env python
"""megxla training-step benchmark suite: one entry point, sequential, fixed thread counts.

For every workload of ``benchmarks/models.py`` (MLP, ConvNet b8/b64, ResNet-18, Transformer) it times one training
step (forward + loss + backward + optimizer update, float32, random data) in these columns:

    eager          megxla eager (GradManager + optimizer, no jit)
    auto_jit       the same eager step with ``megxla.config.auto_jit = True`` (clusters, no decorator)
    trace          megxla ``trace(symbolic=True, without_host=True)`` of the whole step
    trace_host     (opt-in) megxla ``trace(symbolic=True)`` with MegEngine's default ``without_host=False`` (the Python body
                   runs every call, checked against the recording, values from the compiled executable)
    xla_trace      megxla ``xla_trace`` (defaults: record on the first call, compile on the second, no host)
    partial_trace  megxla eager step whose ``model.forward`` is ``partial_trace(type(model).forward, backend="xla")``
    jax_jit        hand-written pure JAX step (params/buffers/optimizer state as dicts, ``jax.jit`` with
                   ``donate_argnums``, the same initial weights and MegEngine's optimizer formulas): "the limit"
    torch          PyTorch eager (if ``import torch`` works)
    torch_compile  PyTorch with ``torch.compile(model)`` (forward+backward compiled by inductor; optimizer eager)

Each cell: build the model fresh (same seed), call 1 and call 2 are timed separately (they hold recording /
compilation), then ``--warmup`` more calls, then ``--steps`` timed calls (each blocks on the loss and on every
tensor the step wrote); the table reports the median (and min / max) ms/step, and each column as a ratio to
``jax_jit``. The megxla / JAX columns of a workload are timed in interleaved rounds, PyTorch's after them.

Run:
    python benchmarks/run.py                  # full suite (~6 min on an idle 2-core machine), writes benchmarks/results/
    python benchmarks/run.py --quick          # smoke run (< 2 min): small workloads, few steps
    python benchmarks/run.py --only mlp,resnet18 --steps 50 --columns xla_trace,jax_jit
    python benchmarks/run.py --device gpu     # on a CUDA machine: JAX and PyTorch on the GPU, the GPU-sized
                                              # workloads (ResNet-18 b256, Transformer b64, ResNet-50 224px b64,
                                              # each also under amp autocast)

Outputs (``--out``, default ``benchmarks/results``; ``--quick`` defaults to ``benchmarks/results/quick``):
``results.md`` (the printed tables), ``results.json`` (every number, with the run's metadata) and ``results.png``.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import os
import platform
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

ALL_COLUMNS = ["eager", "auto_jit", "trace", "trace_host", "xla_trace", "partial_trace", "jax_jit", "torch", "torch_compile"]
MEGXLA_COLUMNS = ["eager", "auto_jit", "trace", "trace_host", "xla_trace", "partial_trace"]
COLUMN_TITLES = {
    "eager": "megxla eager", "auto_jit": "megxla auto-jit", "trace": "megxla trace", "trace_host": "megxla trace (host)",
    "xla_trace": "megxla xla_trace", "partial_trace": "megxla partial_trace", "jax_jit": "jax.jit (limit)",
    "torch": "PyTorch eager", "torch_compile": "torch.compile",
}
TORCH_COLUMNS = {"torch", "torch_compile"}
# trace_host (MegEngine's default without_host=False) is opt-in: --columns ...,trace_host
DEFAULT_COLUMNS = [c for c in ALL_COLUMNS if c != "trace_host"]


# ---------------------------------------------------------------------------------------------------------
# threads: fixed before jax / torch are imported
# ---------------------------------------------------------------------------------------------------------
def set_threads(n, device="cpu"):
    flags = os.environ.get("XLA_FLAGS", "")
    if "intra_op_parallelism_threads" not in flags:
        flags = f"{flags} --xla_cpu_multi_thread_eigen={'true' if n > 1 else 'false'} " \
                f"intra_op_parallelism_threads={n}".strip()
    os.environ["XLA_FLAGS"] = flags
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)
    # PyTorch's OpenMP workers busy-wait at barriers by default; on a machine with more runnable threads than
    # cores (a shared VM, other jobs) a descheduled worker then stalls every parallel region: measured here,
    # a 2-thread PyTorch MLP step took 380 ms median with the default policy and 8 ms with PASSIVE.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("JAX_PLATFORMS", "cuda" if device == "gpu" else "cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Compile times are cold ones: megxla's persistent compilation cache (on by default) stays off unless asked.
    os.environ.setdefault("MEGXLA_COMPILATION_CACHE", "0")


DEVICE = {"name": "cpu"}  # --device: where JAX and PyTorch run
# auto_jit_stats() counts reported for the auto-jit column (over all its calls)
AUTO_JIT_COUNTS = ("clusters", "compiled", "early_compiled", "early_launches", "early_misses", "eager_clusters",
                   "eager_steps", "split_clusters")


def _torch_device():
    return "cuda" if DEVICE["name"] == "gpu" else "cpu"


def _sync_torch(torch):
    if DEVICE["name"] == "gpu":
        torch.cuda.synchronize()


def _torch():
    try:
        import torch
    except ImportError:
        return None
    if DEVICE["name"] == "gpu":
        # Same arithmetic in every column: megxla and the jax.jit step compute float32 convolutions and matmuls in
        # full float32 (megxla.config.matmul_precision "highest"); PyTorch's default lets cuDNN convolutions use
        # TF32 (torch.backends.cudnn.allow_tf32), which alone would halve its conv-net times on an H100.
        torch.backends.cudnn.allow_tf32 = DEVICE.get("tf32", False)
        torch.backends.cuda.matmul.allow_tf32 = DEVICE.get("tf32", False)
    return torch


def environment(threads):
    import jax
    import numpy as np
    info = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
        "numpy": np.__version__,
        "git": _git_state(),
    }
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
        info["torch"] = torch.__version__
        if DEVICE["name"] == "gpu":
            info["torch_tf32"] = bool(torch.backends.cudnn.allow_tf32)
        info["torch_threads"] = torch.get_num_threads()
    else:
        info["torch"] = None
    return info


def _loadavg():
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _git_state():
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "megxla"], cwd=REPO, capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return head + (" (megxla/ has uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# ---------------------------------------------------------------------------------------------------------
# one step per column: each maker returns (step, info); step() runs one training step and blocks on the loss
# and returns it as a float-convertible array; info() returns compile statistics.
# ---------------------------------------------------------------------------------------------------------
def _seed():
    import numpy as np
    import megxla as mge
    np.random.seed(0)
    mge.random.seed(0)


def _data(wl):
    import numpy as np
    return wl.inputs(np.random.RandomState(123))


def _megxla_model(wl):
    _seed()
    model = wl.build()
    model.train()
    return model


def initial_arrays(wl):
    """``{name: np.ndarray}`` of the parameters and buffers of a fresh megxla model (the shared initial weights)."""
    model = _megxla_model(wl)
    params = {n: t.numpy() for n, t in model.named_parameters()}
    buffers = {n: t.numpy() for n, t in model.named_buffers()}
    return params, buffers


def make_megxla(wl, column):
    import jax
    import megxla as mge
    import megxla.functional as F
    from megxla.autodiff import GradManager
    from megxla.jit import trace, xla_trace, partial_trace

    model = _megxla_model(wl)
    opt = wl.make_optimizer(model.parameters())
    gm = GradManager().attach(model.parameters())
    x_np, y_np = _data(wl)
    x, y = mge.Tensor(x_np), mge.Tensor(y_np)

    if wl.amp:
        from megxla import amp

        def train_step(data, label, model, opt):
            with gm:
                with amp.autocast():
                    loss = F.nn.cross_entropy(model(data), label)
                gm.backward(loss)
            opt.step().clear_grad()
            return loss
    else:
        def train_step(data, label, model, opt):
            with gm:
                loss = F.nn.cross_entropy(model(data), label)
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

    traced = None
    fn = train_step
    if column == "trace":
        fn = traced = trace(train_step, symbolic=True, without_host=True)
    elif column == "trace_host":
        fn = traced = trace(train_step, symbolic=True)
    elif column == "xla_trace":
        fn = traced = xla_trace(train_step)
    elif column == "partial_trace":
        traced = partial_trace(type(model).forward, backend="xla")
        model.forward = functools.partial(traced, model)
    elif column == "auto_jit":
        def fn(data, label, model, opt):
            # (on for this step only: the interleaved columns run eagerly; switching it off runs the cluster)
            mge.config.auto_jit = True
            try:
                return train_step(data, label, model, opt)
            finally:
                mge.config.auto_jit = False
    elif column != "eager":
        raise ValueError(column)

    if column == "auto_jit":
        from megxla.jit import auto_jit_stats
        aj_start = auto_jit_stats()

    written = []  # the Tensor objects a step rebinds (filled after the first call, once optimizer slots exist)

    def step():
        loss = fn(x, y, model, opt)
        # Block on everything the step wrote, not only the loss: eager optimizer updates are dispatched
        # asynchronously and would otherwise run on into the next measured step (another column's, when
        # interleaved). The Tensor objects are stable (updates rebind their ``_data``), so they are listed once.
        if not written:
            written.extend(model.tensors())
            written.extend(v for st in opt._state.values() for v in st.values() if hasattr(v, "_data"))
        jax.block_until_ready([loss._data] + [t._data for t in written])
        return loss._data

    def info():
        if column == "auto_jit":
            # (what the column's steps did: a slow auto-jit cell is compiles, op-by-op clusters or no early launch)
            from megxla.jit import auto_jit_stats
            now = auto_jit_stats()
            return {"auto_jit": {k: now[k] - aj_start[k] for k in AUTO_JIT_COUNTS}}
        if traced is None:
            return {}
        return {"compile_time_s": traced.compile_time, "num_compiled": traced.num_compiled}

    step.traced = traced
    return step, info


def make_jax(wl):
    import jax
    import jax.numpy as jnp
    from models import j_cross_entropy

    p_np, b_np = initial_arrays(wl)
    params = {k: jnp.asarray(v) for k, v in p_np.items()}
    buffers = {k: jnp.asarray(v) for k, v in b_np.items()}
    opt_init, opt_update = wl.jax_optimizer()
    x_np, y_np = _data(wl)
    x, y = jnp.asarray(x_np), jnp.asarray(y_np)

    def loss_fn(p, b, x, y):
        logits, nb = wl.jax_forward(p, b, x)
        return j_cross_entropy(logits, y), nb

    def train(p, b, o, x, y):
        (loss, nb), g = jax.value_and_grad(loss_fn, has_aux=True)(p, b, x, y)
        p, o = opt_update(p, g, o)
        return p, nb, o, loss

    jitted = jax.jit(train, donate_argnums=(0, 1, 2))
    state = {"args": (params, buffers, opt_init(params)), "compiled": None, "compile_time_s": 0.0}

    def step():
        if state["compiled"] is None:
            lowered = jitted.lower(*state["args"], x, y)
            t0 = time.perf_counter()
            state["compiled"] = lowered.compile()
            state["compile_time_s"] = time.perf_counter() - t0
        p, b, o, loss = state["compiled"](*state["args"], x, y)
        state["args"] = (p, b, o)
        jax.block_until_ready((p, b, o, loss))
        return loss

    def info():
        return {"compile_time_s": state["compile_time_s"], "num_compiled": 1 if state["compiled"] else 0}

    step.jitted, step.state, step.xy = jitted, state, (x, y)
    return step, info


def make_torch(wl, compile_):
    torch = _torch()
    if torch is None:
        raise RuntimeError("PyTorch is not installed")
    import torch.nn.functional as tF
    from models import torch_models, load_into_torch

    p_np, b_np = initial_arrays(wl)
    torch.manual_seed(0)
    dev = _torch_device()
    model = torch_models()[wl.kind]()
    load_into_torch(model, {**p_np, **b_np})
    model.to(dev).train()
    opt = wl.torch_optimizer(torch, model.parameters())
    x_np, y_np = _data(wl)
    x, y = torch.from_numpy(x_np).to(dev), torch.from_numpy(y_np).long().to(dev)
    if x.dtype == torch.int32:
        x = x.long()
    fwd = torch.compile(model) if compile_ else model
    autocast = (lambda: torch.autocast(dev, dtype=torch.float16 if dev == "cuda" else torch.bfloat16)) \
        if wl.amp else __import__("contextlib").nullcontext

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = tF.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        _sync_torch(torch)  # GPU kernels run asynchronously: a step ends when they are done
        return loss.detach()

    return step, lambda: {}


def make_step(wl, column):
    if column in MEGXLA_COLUMNS:
        return make_megxla(wl, column)
    if column == "jax_jit":
        return make_jax(wl)
    if column in ("torch", "torch_compile"):
        return make_torch(wl, column == "torch_compile")
    raise ValueError(f"unknown column {column!r}")


# ---------------------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------------------
def _float(v):
    try:
        return float(v)
    except Exception:  # noqa: BLE001
        return float("nan")


class _Cell:
    """One (workload, column): its step function and what was measured so far."""

    def __init__(self, wl, column, steps):
        self.wl, self.column, self.steps = wl, column, steps
        self.step = self.info = None
        self.res = {}
        self.losses = []
        self.times = []

    def start(self, warmup):
        """Build, time calls 1 and 2 (recording / compilation), run ``warmup`` more calls."""
        gc.collect()
        t0 = time.perf_counter()
        self.step, self.info = make_step(self.wl, self.column)
        self.res["build_s"] = time.perf_counter() - t0
        for key in ("first_call_ms", "second_call_ms"):
            t0 = time.perf_counter()
            self.losses.append(_float(self.step()))
            self.res[key] = (time.perf_counter() - t0) * 1e3
        for _ in range(warmup):
            self.losses.append(_float(self.step()))
        self.res["warmup"] = warmup

    def tick(self):
        t0 = time.perf_counter()
        self.step()
        self.times.append(time.perf_counter() - t0)

    def finish(self):
        ms = [t * 1e3 for t in self.times]
        self.res.update({"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms),
                         "mean_ms": statistics.fmean(ms), "steps": len(ms), "losses": self.losses[:3]})
        self.res.update(self.info())
        self.step = self.info = None
        return self.res


def _error(exc):
    text = str(exc).strip()
    return {"error": f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}",
            "traceback": traceback.format_exc(limit=8)}


def bench_workload(wl, columns, steps_of, warmup, interleave=True, on_cell=None):
    """Measure every column of one workload; returns ``{column: result}``.

    With ``interleave`` (the default) all columns are built and warmed up first, then timed in rounds: each
    round runs one step of every column (the starting column rotates), so a change in background load (this
    machine may be shared) hits all columns alike and the ratios stay meaningful. Otherwise each column is
    timed to completion before the next is built.
    """
    out = {}
    cells = []
    # JAX-based columns first (interleaved among themselves), PyTorch columns last and one at a time: PyTorch's
    # OpenMP workers and XLA's thread pool spin-wait after their work, so alternating steps between the two
    # runtimes slows both.
    ordered = [c for c in columns if c not in TORCH_COLUMNS] + [c for c in columns if c in TORCH_COLUMNS]
    for c in ordered:
        if c in TORCH_COLUMNS and cells:
            _time_rounds(cells, out, wl, on_cell)
            cells = []
        cell = _Cell(wl, c, steps_of(c))
        try:
            cell.start(warmup)
            if not interleave or c in TORCH_COLUMNS:
                for _ in range(cell.steps):
                    cell.tick()
                out[c] = cell.finish()
                if on_cell:
                    on_cell(wl, c, out[c])
                continue
            cells.append(cell)
        except Exception as exc:  # noqa: BLE001 -- a broken column must not stop the suite
            out[c] = _error(exc)
            if on_cell:
                on_cell(wl, c, out[c])
    _time_rounds(cells, out, wl, on_cell)
    gc.collect()
    return {c: out[c] for c in columns if c in out}


def _time_rounds(cells, out, wl=None, on_cell=None):
    """Time ``cells`` in rounds of one step each (rotating the start); store their results in ``out``."""
    rounds = max((cell.steps for cell in cells), default=0)
    for i in range(rounds):
        k = i % max(len(cells), 1)
        for cell in cells[k:] + cells[:k]:
            if cell.column in out or len(cell.times) >= cell.steps:
                continue
            try:
                cell.tick()
            except Exception as exc:  # noqa: BLE001
                out[cell.column] = _error(exc)
    for cell in cells:
        if cell.column not in out:
            out[cell.column] = cell.finish()
        if on_cell:
            on_cell(cell.wl, cell.column, out[cell.column])


def per_op_overhead(repeats=3):
    """``eager_overhead.measure()`` run ``repeats`` times; the minimum per entry (robust to background load)."""
    from eager_overhead import measure
    best = {}
    for _ in range(repeats):
        for name, us in measure().items():
            best[name] = min(us, best.get(name, float("inf")))
    return best


# ---------------------------------------------------------------------------------------------------------
# reporting
# ---------------------------------------------------------------------------------------------------------
def _fmt_ms(v):
    if v is None:
        return "–"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _cell(results, wname, col):
    return results.get(wname, {}).get(col)


def ratio(results, wname, col, ref="jax_jit"):
    c, r = _cell(results, wname, col), _cell(results, wname, ref)
    if not c or not r or "median_ms" not in c or "median_ms" not in r:
        return None
    return c["median_ms"] / r["median_ms"]


def time_to_first_step(column, cell):
    """Seconds from building the model to the end of its first compiled (or, eagerly, first) step."""
    calls = cell["first_call_ms"] + (cell["second_call_ms"] if column in ("xla_trace", "partial_trace") else 0.0)
    return cell.get("build_s", 0.0) + calls / 1e3


def render(meta, workloads, columns, results, overhead, targets):
    L = []
    L.append("# megxla training-step benchmarks\n")
    L.append(f"- date: {meta['date']}; git: {meta['git']}")
    L.append(f"- machine: {meta['processor']}, {meta['cpu_count']} CPUs, {meta['platform']}, Python {meta['python']}")
    L.append(f"- threads: {meta['threads']} (XLA_FLAGS=`{meta['XLA_FLAGS']}`, OMP_NUM_THREADS={meta['OMP_NUM_THREADS']}, "
             f"OMP_WAIT_POLICY={meta['OMP_WAIT_POLICY']}"
             + (f", torch.set_num_threads({meta.get('torch_threads')})" if meta.get("torch") else "") + ")")
    L.append(f"- device: {meta.get('device', 'cpu')}" + (f" ({meta['gpu']})" if meta.get("gpu") else ""))
    L.append(f"- jax {meta['jax']} ({meta['jax_backend']}), numpy {meta['numpy']}, torch {meta.get('torch') or 'not installed'}")
    if "torch_tf32" in meta:
        L.append(f"- float32 arithmetic: full float32 in the megxla and jax.jit columns; PyTorch TF32 "
                 f"(cudnn/cuda allow_tf32): {meta['torch_tf32']} (PyTorch's own default lets cuDNN convolutions use TF32)")
    L.append(f"- steps: {meta['steps_note']}; "
             + ("columns timed one after another" if meta.get("sequential") else
                "the megxla / JAX columns of a workload timed in interleaved rounds (one step of each per "
                "round), the PyTorch columns after them, one at a time"))
    L.append(f"- load average (1/5/15 min) at start {meta.get('load_avg_start')}, at end {meta.get('load_avg_end')}"
             " (other processes on the machine inflate every column; ratios are more robust than ms)")
    L.append("- `trace` = `trace(symbolic=True, without_host=True)`; `trace (host)` = `trace(symbolic=True)` "
             "(without_host=False); `xla_trace` = defaults; `partial_trace` = `model.forward` compiled with "
             "`partial_trace(backend=\"xla\")`, loss/backward/optimizer eager; `jax.jit (limit)` = hand-written "
             "pure JAX step with donated buffers; `torch.compile` = `torch.compile(model)`, optimizer eager, "
             f"inductor cache: {meta.get('torch_compile_cache')}.\n")

    L.append("## Steady-state ms/step (median; × = ratio to the jax.jit limit) · time to the first step\n")
    L.append("Time to the first step (`1st`): from building the model to the end of the first call, plus the second "
             "call where that is the first compiled one (`xla_trace`, `partial_trace`).\n")
    hdr = ["workload"] + [COLUMN_TITLES[c] for c in columns]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))
    for w in workloads:
        row = [w.name]
        for c in columns:
            cell = _cell(results, w.name, c)
            if cell is None:
                row.append("–")
            elif "error" in cell:
                row.append("error")
            else:
                r = ratio(results, w.name, c)
                row.append(_fmt_ms(cell["median_ms"]) + (f" ({r:.2f}×)" if r is not None and c != "jax_jit" else "")
                           + f" · 1st {time_to_first_step(c, cell):.1f} s")
        L.append("| " + " | ".join(row) + " |")

    L.append("\n## min / max ms/step, and steps timed\n")
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))
    for w in workloads:
        row = [w.name]
        for c in columns:
            cell = _cell(results, w.name, c)
            row.append("–" if not cell or "error" in cell else
                       f"{_fmt_ms(cell['min_ms'])} / {_fmt_ms(cell['max_ms'])} (n={cell['steps']})")
        L.append("| " + " | ".join(row) + " |")

    L.append("\n## Compilation: first call / second call ms; compile_time s (num_compiled)\n")
    L.append("First call of `xla_trace` records eagerly and the second compiles; `trace(symbolic=True)` and "
             "`jax.jit` compile on the first call; `partial_trace` records on the first, compiles on the second; "
             "eager's first call compiles one small kernel per op; torch.compile compiles on the first call.\n")
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))
    for w in workloads:
        row = [w.name]
        for c in columns:
            cell = _cell(results, w.name, c)
            if not cell or "error" in cell:
                row.append("–")
                continue
            s = f"{cell['first_call_ms']:.0f} / {cell['second_call_ms']:.0f}"
            if "compile_time_s" in cell:
                s += f"; {cell['compile_time_s']:.2f}s ({cell.get('num_compiled', '?')})"
            row.append(s)
        L.append("| " + " | ".join(row) + " |")

    errors = [(w.name, c, results[w.name][c]["error"]) for w in workloads for c in columns
              if _cell(results, w.name, c) and "error" in results[w.name][c]]
    if errors:
        L.append("\n## Errors\n")
        for w, c, e in errors:
            L.append(f"- {w} / {COLUMN_TITLES[c]}: `{e}`")

    L.append("\n## Sanity: loss after the first call (all columns start from the same weights and data)\n")
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))
    for w in workloads:
        row = [w.name]
        for c in columns:
            cell = _cell(results, w.name, c)
            row.append("–" if not cell or "error" in cell else " → ".join(f"{v:.4f}" for v in cell["losses"]))
        L.append("| " + " | ".join(row) + " |")

    if overhead:
        raw = overhead.get("raw cached jax.jit call")
        L.append("\n## Per-op eager overhead (add of two 32×32 float32; `benchmarks/eager_overhead.py`, "
                 f"best of its `measure()` run {meta.get('overhead_repeats', 1)} times)\n")
        L.append("| what | µs/op | × raw jax.jit call |")
        L.append("|---|---|---|")
        for name, us in overhead.items():
            L.append(f"| {name} | {us:.2f} | {us / raw:.2f} |" if raw else f"| {name} | {us:.2f} | – |")

    if targets:
        L.append("\n## Targets\n")
        for t in targets:
            L.append(f"- {'PASS' if t['ok'] else ('FAIL' if t['ok'] is False else 'n/a')}: {t['what']} — {t['detail']}")
    return "\n".join(L) + "\n"


def check_targets(workloads, results, overhead):
    out = []
    for w in workloads:
        r = ratio(results, w.name, "xla_trace")
        out.append({"what": f"{w.name}: xla_trace ≤ 1.05× jax.jit", "ok": None if r is None else r <= 1.05,
                    "detail": "no data" if r is None else f"{r:.2f}×"})
    for w in workloads:
        r = ratio(results, w.name, "xla_trace", ref="torch")
        out.append({"what": f"{w.name}: xla_trace faster than PyTorch eager", "ok": None if r is None else r < 1.0,
                    "detail": "no data" if r is None else f"{r:.2f}× PyTorch eager's time"})
    if overhead and "raw cached jax.jit call" in overhead:
        r = overhead["megxla eager (x + y)"] / overhead["raw cached jax.jit call"]
        out.append({"what": "megxla eager per-op overhead ≤ 2× a raw cached jax.jit call", "ok": r <= 2.0,
                    "detail": f"{r:.2f}×"})
    return out


def plot(path, workloads, columns, results, overhead):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw={"width_ratios": [3, 1]})
    ax = axes[0]
    cols = [c for c in columns if c != "jax_jit"]
    width = 0.8 / max(len(cols), 1)
    xs = np.arange(len(workloads))
    for i, c in enumerate(cols):
        vals = [ratio(results, w.name, c) for w in workloads]
        bars = ax.bar(xs + (i - (len(cols) - 1) / 2) * width, [v if v else 0 for v in vals], width,
                      label=COLUMN_TITLES[c])
        for b, v in zip(bars, vals):
            if v:
                ax.text(b.get_x() + b.get_width() / 2, v * 1.03, f"{v:.2g}", ha="center", va="bottom", fontsize=6,
                        rotation=90)
    ax.axhline(1.0, color="k", lw=1, ls="--")
    ax.axhline(1.05, color="r", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_xticks(xs)
    labels = []
    for w in workloads:
        ref = _cell(results, w.name, "jax_jit")
        labels.append(w.name + (f"\n(jax.jit {ref['median_ms']:.1f} ms)" if ref and "median_ms" in ref else ""))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("median step time / jax.jit step time (log)")
    ax.set_title("training step, ratio to the hand-written jax.jit step (dashed = 1, dotted = 1.05)")
    ax.legend(fontsize=7, ncol=2)
    ax = axes[1]
    if overhead:
        names = list(overhead)
        ax.barh(range(len(names)), [overhead[n] for n in names], color="tab:gray")
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names, fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("µs per op (log)")
        ax.set_title("eager per-op overhead (32×32 add)")
        ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: small workloads, few steps (< 2 min)")
    ap.add_argument("--only", default=None, help="comma-separated workload names (see --list)")
    ap.add_argument("--columns", default=None, help=f"comma-separated columns out of {','.join(ALL_COLUMNS)} (default: all but trace_host)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per cell (default 30; --quick 10)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed calls after the first two (default 5; quick 2)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for XLA / OpenMP / torch")
    ap.add_argument("--out", default=None, help="output directory (default benchmarks/results[/quick])")
    ap.add_argument("--no-overhead", action="store_true", help="skip the per-op eager overhead measurement")
    ap.add_argument("--sequential", action="store_true",
                    help="time each column to completion before building the next (default: interleaved rounds)")
    ap.add_argument("--torch-cache", action="store_true",
                    help="let torch.compile use inductor's on-disk cache (default: a fresh cache, i.e. cold compiles)")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                    help="where JAX and PyTorch run; gpu adds the GPU-sized workloads (default: only those)")
    ap.add_argument("--list", action="store_true", help="list workloads and columns, then exit")
    args = ap.parse_args(argv)

    DEVICE["name"] = args.device
    set_threads(args.threads, args.device)
    inductor_dir = None
    if not args.torch_cache and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        # torch.compile caches compiled graphs on disk; a fresh directory makes its compile time a cold one,
        # comparable with XLA's (megxla and jax do not use a persistent compilation cache here).
        inductor_dir = tempfile.mkdtemp(prefix="megxla_bench_inductor_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_dir
    sys.path.insert(0, HERE)
    from models import WORKLOADS
    if args.list:
        for w in WORKLOADS.values():
            print(f"{w.name:14s} {w.notes}")
        print("columns:", ", ".join(ALL_COLUMNS))
        return 0
    from tqdm import tqdm

    steps = args.steps or (10 if args.quick else 30)
    warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in WORKLOADS]
        if unknown:
            ap.error(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
        workloads = [WORKLOADS[n] for n in names]
    else:
        workloads = [w for w in WORKLOADS.values() if (w.small or not args.quick) and w.gpu == (args.device == "gpu")]
    columns = [c.strip() for c in args.columns.split(",")] if args.columns else list(DEFAULT_COLUMNS)
    bad = [c for c in columns if c not in ALL_COLUMNS]
    if bad:
        ap.error(f"unknown column(s) {bad}; choose from {ALL_COLUMNS}")
    if _torch() is None:
        columns = [c for c in columns if c not in ("torch", "torch_compile")]
    if args.quick and not args.columns:
        columns = [c for c in columns if c != "torch_compile"]  # inductor's C++ compile alone exceeds the budget

    meta = environment(args.threads)
    meta["device"] = args.device
    if args.device == "gpu":
        torch = _torch()
        if meta["jax_backend"] != "gpu":
            ap.error(f"--device gpu: JAX sees no GPU (backend {meta['jax_backend']!r}); pip install -e '.[cuda]'")
        if torch is not None and not torch.cuda.is_available():
            ap.error("--device gpu: PyTorch sees no GPU (a CPU build of torch is installed)")
        meta["gpu"] = meta["jax_devices"][0]
    notes = []

    def plan(w):
        """(timed steps, warm-up calls) of workload ``w``: the defaults are capped for slow workloads."""
        n = args.steps or min(steps, w.max_steps or steps)
        k = warmup if args.warmup is not None else min(warmup, w.max_warmup if w.max_warmup is not None else warmup)
        return n, k

    for w in workloads:
        if plan(w) != (steps, warmup):
            notes.append(f"{w.name}: {plan(w)[0]} timed steps after 2 + {plan(w)[1]} untimed calls (a slow workload)")
    meta["steps_note"] = f"{steps} timed steps after 2 + {warmup} untimed calls" + (
        "; " + "; ".join(notes) if notes else "")
    meta["columns"] = columns
    meta["sequential"] = args.sequential
    meta["torch_compile_cache"] = "inductor on-disk cache" if args.torch_cache else "fresh (cold compiles)"
    meta["workloads"] = {w.name: w.notes for w in workloads}

    print(f"megxla benchmarks: jax {meta['jax']} ({meta['jax_backend']}), torch {meta.get('torch')}, "
          f"{meta['cpu_count']} CPUs ({meta['processor']}), {meta['platform']}")
    print(f"threads {args.threads}: XLA_FLAGS={meta['XLA_FLAGS']!r} OMP_NUM_THREADS={meta['OMP_NUM_THREADS']} "
          f"OMP_WAIT_POLICY={meta['OMP_WAIT_POLICY']}"
          + (f" torch.get_num_threads()={meta.get('torch_threads')}" if meta.get("torch") else ""))
    print(f"steps: {meta['steps_note']}")
    print(f"workloads: {', '.join(w.name for w in workloads)}; columns: {', '.join(columns)}", flush=True)

    out_dir = args.out or os.path.join(HERE, "results", "quick" if args.quick else "")
    os.makedirs(out_dir, exist_ok=True)
    results = {}
    t_start = time.perf_counter()
    meta["load_avg_start"] = _loadavg()
    bar = tqdm(total=len(workloads) * len(columns), desc="benchmarks", unit="cell", file=sys.stderr,
               dynamic_ncols=True)

    def on_cell(w, c, res):
        bar.update(1)
        msg = (f"{w.name:12s} {COLUMN_TITLES[c]:22s} " +
               (f"ERROR {res['error']}" if "error" in res else
                f"median {res['median_ms']:9.2f} ms  min {res['min_ms']:9.2f}  max {res['max_ms']:9.2f}  "
                f"(n={res['steps']})  first {res['first_call_ms']:8.0f} ms  second {res['second_call_ms']:8.0f} ms"
                + (f"  compile {res['compile_time_s']:.2f}s" if "compile_time_s" in res else "")
                + ("  auto-jit " + " ".join(f"{k} {v}" for k, v in res["auto_jit"].items() if v)
                   if "auto_jit" in res else "")))
        tqdm.write(msg, file=sys.stdout)
        sys.stdout.flush()

    for w in workloads:
        bar.set_postfix_str(w.name)

        n_steps, n_warmup = plan(w)
        results[w.name] = bench_workload(w, [c for c in columns if c not in w.skip], lambda c: n_steps, n_warmup,
                                         interleave=not args.sequential, on_cell=on_cell)
    bar.close()
    meta["load_avg_end"] = _loadavg()
    overhead = None
    if not args.no_overhead:
        meta["overhead_repeats"] = 1 if args.quick else 3
        overhead = per_op_overhead(meta["overhead_repeats"])
    meta["wall_s"] = time.perf_counter() - t_start
    targets = check_targets(workloads, results, overhead)
    md = render(meta, workloads, columns, results, overhead, targets)
    md += f"\nTotal wall time: {meta['wall_s']:.0f} s.\n"
    print()
    print(md)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": results, "per_op_overhead_us": overhead, "targets": targets,
                   "ratios_to_jax_jit": {w.name: {c: ratio(results, w.name, c) for c in columns} for w in workloads}},
                  f, indent=1, default=str)
    try:
        plot(os.path.join(out_dir, "results.png"), workloads, columns, results, overhead)
    except Exception as exc:  # noqa: BLE001
        print(f"plot failed: {exc}")
    print(f"wrote {out_dir}/results.md, results.json, results.png")
    if inductor_dir:
        shutil.rmtree(inductor_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
