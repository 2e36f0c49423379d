"""Cold eager kernels of a cluster run op by op, compiled ahead on worker threads (:func:`compile_ahead`).

Why: auto-jit runs a cluster op by op, with each op's eager kernel, where it has not recurred yet (a new key, the
last short batch of an epoch) and for the changing ops of a site run in parts. Where the shapes are new, each kernel
is compiled as its op comes, one after another, on one core: XLA:CPU takes ~35 ms for a single small op, so a 24-op
focal loss on a new count took ~570 ms, eager's cost too. The cluster's ops and their input types are all known
before the first runs, so the kernels not met before are lowered and compiled by ``THREADS`` workers meanwhile
(XLA's compile releases the GIL), in program order, and each op runs once its own kernel is ready (JAX's jit cache
holds what a worker compiled): 535-650 -> 314-475 ms on 2 cores. The kernels are the ones eager runs, so the numbers are
eager's: only *when* they compile changes.

A worker's compile time is none of a step's (``_tiers.background``); the caller counts the time it waited instead.
``MEGXLA_KERNELS_AHEAD=0`` turns it off.
"""
from __future__ import annotations

import concurrent.futures
import os
import time

import jax

from ..core import _registry
from ..core._spmd import SpmdFunction
from . import _tiers

__all__ = ["compile_ahead", "compile_kernels", "wait", "cancel", "THREADS"]


def _cores():
    try:
        return len(os.sched_getaffinity(0))  # (the cores this process may use: a container's, not the machine's)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


THREADS = 0 if os.environ.get("MEGXLA_KERNELS_AHEAD", "1") == "0" else min(_cores(), 8)
MET_KEPT = 1 << 14
_met: dict = {}  # (op, input types) whose kernel a cluster run op by op has met here -> its output types
_pool = [None]
_spare_pool = [None]  # (compile_kernels' guesses, made while the calling thread compiles the forward's kernels)
# (a forked child -- a DataLoader worker -- has none of the parent's worker threads: a pool it inherited would take
# its compiles and never run them, and the op waiting for one would wait for ever)
os.register_at_fork(after_in_child=lambda: (_pool.__setitem__(0, None), _spare_pool.__setitem__(0, None)))


def _compile(op, types):
    """(a worker) ``op``'s eager kernel for inputs of ``types``, compiled into JAX's jit cache."""
    try:
        kernel = op.kernel
        if type(kernel) is SpmdFunction:
            # NOTE: a cross-process program (a collective, or its gradient, once run) is compiled where its op runs:
            # every rank numbers its compiles of a program to check that the ranks agree (``same_program``), so one
            # compiled here too, when a worker got to it after its op had run, was numbered on this rank only --
            # the ranks then waited for each other's programs (a fully sharded step, reshard_after_forward=False:
            # 2 runs in 3 stopped after 600 s)
            return
        kernel.lower(*[jax.ShapeDtypeStruct(s, d, weak_type=w) for s, d, w in types]).compile()
    except Exception:  # (the op's own run raises, at its turn, as eagerly)
        pass


def compile_ahead(ops, env, shapes, input_type):
    """Start compiling the eager kernels of ``ops`` (cluster records ``(op, input ids, output ids)``, about to run op
    by op on ``env``: id -> array) not met before; returns a list with each op's future (None where nothing is
    compiled ahead for it), or None where nothing is. ``shapes``: (op, input types) -> output types, as the collector
    inferred them; ``input_type(array)``: ``((shape, dtype, weak_type), bytes)``.

    Example:
        >>> compile_ahead([], {}, {}, None) is None
        True
    """
    if THREADS < 2 or len(ops) < 2:
        return None
    types = {}
    jobs = []
    met = _met
    if len(met) > MET_KEPT:
        met.clear()
    for k, (op, ins, outs) in enumerate(ops):
        tin = []
        for i in ins:
            t = types.get(i)
            if t is None:  # (an input of the cluster, first read here)
                a = env.get(i)
                if a is None or not hasattr(a, "dtype"):
                    return _start(ops, jobs)  # (a value of no known type: what follows is not looked at)
                t = types[i] = input_type(a)[0]
            tin.append(t)
        key = (op, tuple(tin))
        res = met.get(key)  # (one lookup where the kernel was met: the output types kept with it)
        if res is None:
            res = shapes.get(key)
            if res is None:
                break  # (the collector's types are gone: its cache was cleared)
            met[key] = res
            if not op.transient and op.prim.eager_kernel is None and hasattr(op.kernel, "lower"):
                jobs.append((k, key))
        types.update(zip(outs, res))
    return _start(ops, jobs)


def _start(ops, jobs, spare=False):
    """The futures of ``jobs`` ((position, (op, input types))) submitted to the workers, or None: fewer than two.
    ``spare``: to the workers of the cores the calling thread leaves (one fewer: it goes on compiling its own)."""
    if len(jobs) < 2:
        return None
    slot = _spare_pool if spare else _pool
    pool = slot[0]
    if pool is None:
        # (a worker's compile time is no step's: the thread waiting for it counts its wait)
        pool = slot[0] = concurrent.futures.ThreadPoolExecutor(THREADS - 1 if spare else THREADS,
                                                               "megxla-kernels", _tiers.mark_background)
    ahead = [None] * len(ops)
    for k, (op, tin) in jobs:
        ahead[k] = pool.submit(_compile, op, tin)
    return ahead


_met_grads: dict = {}  # (op, input types) of gradient kernels submitted here (compile_kernels) -> its future


def compile_kernels(jobs, guessed=False):
    """Start compiling the eager kernels ``jobs`` ``[(op, input types)]`` (a GradManager's gradient kernels, in the
    order its walk will run them) that were not submitted here before; returns each job's future where its
    compile is under way (started now or before), else None there -- or None where no job has one. ``guessed``:
    guessed while the forward runs, compiled by one worker fewer (the forward's thread compiles on a core too).

    Why: a backward walk is known before it runs -- its gradient ops and their input types follow from the tape --
    so with a cold cache the workers compile its kernels while the walk runs the first ones (a MobileNetV3 step's
    backward compiled ~280 kernels one after another: 8.6 s of its 16.7 s first step).

    Example:
        >>> compile_kernels([]) is None
        True
    """
    if THREADS < 2 or not jobs:
        return None
    met = _met_grads
    if len(met) > MET_KEPT:
        met.clear()
    out = [None] * len(jobs)
    todo = []
    for k, (op, tin) in enumerate(jobs):
        key = (op, tuple(tin))
        f = met.get(key, _NO_FUTURE)
        if f is not _NO_FUTURE:
            if f is not None and not f.done():
                out[k] = f  # (submitted by an earlier call, still compiling: the walk waits for it)
            continue
        if op.transient or op.prim.eager_kernel is not None:
            continue
        todo.append((k, key))
    started = _start(jobs, todo, spare=guessed)
    if started is not None:
        for k, key in todo:
            out[k] = met[key] = started[k]
    return out if any(f is not None for f in out) else None


_NO_FUTURE = object()
# (a forked child inherits the futures of compiles its parent had under way, which no thread of its own will
# finish: a walk waiting for one would wait for ever)
os.register_at_fork(after_in_child=_met_grads.clear)


_registry.register_kernel_compiler(compile_kernels)


def wait(future):
    """Wait for ``future`` (its kernel compiled); returns the seconds waited.

    Example:
        >>> done = concurrent.futures.Future(); done.set_result(None)
        >>> wait(done)
        0.0
    """
    if future.done():
        return 0.0
    t0 = time.perf_counter()
    future.result()
    return time.perf_counter() - t0


def cancel(ahead):
    """Drop the compiles of ``ahead`` not started (the run stopped early: an op raised, or Ctrl-C).

    Example:
        >>> pending = concurrent.futures.Future(); cancel([None, pending]); pending.cancelled()
        True
    """
    for f in ahead:
        if f is not None:
            f.cancel()
