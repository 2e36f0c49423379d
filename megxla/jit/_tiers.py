"""Tiered compilation: a large cluster first runs from a quickly compiled executable, then from XLA's optimized one.

Why: the first eager training step of a zoo model under auto-jit is one cluster of several hundred ops, and XLA:CPU
spends most of that step compiling it with full optimization (MobileNetV3-Large, batch 2: 7.5-12 s of compilation
in a 9.4-14 s first step, against MegEngine's 1.6-2.2 s). Compiled with LLVM at -O0 and XLA's older loop emitters
(`FAST_OPTIONS`), the same program compiles in 2.5 s and runs 1.4x slower (EfficientNet-B0: 2.75 s against 8 s,
1.6x slower): the first step lands in 4.5 s. The optimized executable is then compiled from the same lowered program
on a background thread, as the JVM's tiered compiler and V8 do, while the quick one keeps the steps going.

When it takes over is fixed: at the quick executable's ``SWITCH_RUN``-th run, waiting for the background compile if
it is not done. The two executables may round differently in the last bits (fusion and vectorization differ), so a
switch "when ready" would make a run's numbers depend on the machine's load; at a fixed run, the same program gives
the same numbers in every process in the same cache state. The wait is bounded, though: by ``SWITCH_WAIT`` seconds
or ``SWITCH_STEPS`` intervals between the quick executable's runs, whichever is longer. A compile that takes longer
-- a 3,500-op unrolled LSTM step's took 47 s cold on 2 cores, and its switch step waited 46 s where eager steps
take 0.1 s -- leaves the quick executable running, and the optimized one takes over at the first run after it is
ready: there only, the run it switches at depends on the load -- not in a run of several processes, where the
switch waits for it however long it takes (replicas of a data-parallel group switch at the same run). Once the
optimized executable exists (in JAX's persistent cache), ``on_optimized`` lets ``_persist`` mark the kept program: a
warm start compiles -- loads -- the optimized executable at once, with no quick tier. The quick executable is kept
in JAX's cache too (~0.4 s of a cold first step): a program that stops before its cluster's optimized compile -- a
script under development failing after its first step -- loads it on its next start instead of compiling it again
(~2 s).

Compiled cold, the quick tier is up to ``MAX_PARTS`` executables of consecutive slices of the cluster's ops
(``compile_parts``): XLA:CPU's quick compile runs on one core, so each part compiles on a thread of its own while the
next is lowered (MobileNetV3's first step, cold: 12.6-15 -> 8-9 s). The optimized tier is then the whole program,
lowered and compiled on the tier-up thread (``tiered``: any ``optimize`` callable).

Only clusters of at least ``MIN_OPS`` ops are tiered: a small cluster compiles in well under a second, and -O0 runs a
small convolutional step 2-4x slower (ConvNet b64: 39 ms against 10.4). Only on the CPU for now: a GPU's fast tier
(autotuning off) has not been measured.

**Off unless asked for** (``MEGXLA_TIERED=1``; 2026-12-03): the quick executable rounds further from eager than
auto-jit promises (1e-5 a step). A RegNetX-200MF's first step (64 px, batch 8, GELU): its gradients 3.5e-5 of the
largest from eager's, the optimized executable's 1.2e-5. With ReLUs, that is enough to flip activations whose
pre-activation is near zero, so the first two steps' gradients moved by percents: 4% of the network's largest
gradient, 37% of a layer's (RegNetX), 3% (MobileNetV3-Large). That happens with either quick option alone
(``xla_cpu_use_fusion_emitters`` off, or ``xla_backend_optimization_level`` 0), not without them. Options that kept
eager's numbers (``xla_backend_optimization_level`` 1, ``xla_llvm_disable_expensive_passes``) compiled no faster
than XLA's defaults: MobileNetV3's cold first step took 17.6-17.9 s against 18.1, where the quick options took 6.7.
So there is no quick tier by default. ``quick`` (programs XLA cannot optimize in bounded time) still uses the quick
options: there the alternative is no compiled run at all.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time

import jax

from ..core import _interrupt, _lazy
from ..core._op import known_options

__all__ = ["compile", "compile_parts", "quick", "tiered", "parts_for", "stats", "interruptible", "interrupting",
           "Interrupted", "foreground", "FAST_OPTIONS", "MIN_OPS", "START_RUN", "SWITCH_RUN", "SWITCH_WAIT",
           "SWITCH_STEPS"]

FAST_OPTIONS = {"cpu": {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 0}}
MIN_OPS = 256
START_RUN = 2  # the optimized compile starts at the quick executable's second run (the cluster recurs)...
# ... and replaces it at its third, waiting for it there. On 2 cores the quick executable's runs beside the
# background compile took 4x an optimized run's time (MobileNetV3 2.3-2.7 s against 0.62), so an 8th-run switch cost
# more than the wait: the first 12 steps of a cold process took 22.7 against 25.7 s (MobileNetV3), 21.1 against 24.2
# (MobileNetV2), 30.9 against 38.0 (EfficientNet-B0), the first step the same
SWITCH_RUN = 3
SWITCH_WAIT, SWITCH_STEPS = 2.0, 10  # ... waiting at most that long, or 10 of its runs' intervals, for it
# A cluster compiled cold runs its quick tier in parts of at least PART_OPS ops, at most MAX_PARTS: each part is
# compiled on a thread of its own as soon as it is lowered (XLA:CPU's quick compile keeps one core busy; the next
# part's lowering, Python, runs on another meanwhile). ``MEGXLA_TIER_PARTS=1``: one quick executable, as before.
PART_OPS = 128
MAX_PARTS = int(os.environ.get("MEGXLA_TIER_PARTS", "3"))
# (off by default: see the module docstring, "Off unless asked for")
ENABLED = os.environ.get("MEGXLA_TIERED", "0").strip().lower() not in ("0", "false", "no", "off", "")
LOG = os.environ.get("MEGXLA_AUTO_JIT_LOG") == "1"  # (auto-jit's log: a line when an optimized executable takes over)

stats = {"tiered": 0, "upgraded": 0, "failed": 0, "parts": 0, "quick_only": 0, "interrupted": 0}  # (parts: quick
# executables compiled as parts; quick_only: programs given only a quick executable, ``quick``; interrupted:
# foreground compilations a signal made the program stop waiting for, ``interruptible``)
# [tiered executables whose optimized compile has started and that have not switched yet -- one started at its first
# run, only while it compiles]: a step timer (``_autojit.ModeTimer``) waits for none to be left before it times the
# clusters against eager
in_flight = [0]
# Runs of executables whose own timing was under way (``_schedules.ScheduleChoice``: its other schedule compiling or
# being probed), counted for good: a step timer (``ModeTimer``) does not time a step during which this moved -- such
# a step ran a schedule it will not keep, or beside a compile (ResNeXt-IBN under auto-jit: its clusters' steps
# timed amid the probe, 133 -> 226 ms, chose eager for the next 50 steps)
disturbed = [0]
_local = threading.local()  # ``background``: True on a tier-up thread (its compile time is not the step's)
_threads: set = set()
_lock = threading.Lock()
_count_lock = threading.Lock()  # (``in_flight``: taken by compile threads too, which ``_lock``'s holder may join)


def background() -> bool:
    """Whether the calling thread compiles for no step: an optimized tier's thread, or a worker compiling eager
    kernels ahead (``_kernels_ahead``).

    Example:
        >>> background()
        False
    """
    # (a compile given up by the program that waited for it -- ``foreground`` -- belongs to no step either, from then)
    return getattr(_local, "background", False) or (bool(_abandoned) and threading.current_thread() in _abandoned)


def mark_background():
    """The calling thread's compilations belong to no step from now on (:func:`background`); for its own threads.

    Example:
        >>> import threading
        >>> seen = []
        >>> t = threading.Thread(target=lambda: (mark_background(), seen.append(background()))); t.start(); t.join()
        >>> seen, background()
        ([True], False)
    """
    _local.background = True


def fast_options():
    """The quick tier's options for the default backend that its XLA knows (:func:`known_options`), or None.

    Example:
        >>> fast_options() is None or "xla_backend_optimization_level" in fast_options()
        True
    """
    return known_options(FAST_OPTIONS.get(jax.default_backend()))


# ---- a foreground compilation a signal can stop waiting for ---------------------------------------------------
# A cluster's compilation runs inside its flush, where signals are held (``core._interrupt``: a cluster runs and
# its values reach their Tensors, or neither). XLA's compile is one C++ call, and a Ctrl-C was answered only once
# it returned: MobileNetV3's first step under auto-jit, cold, held one for its whole 14 s compilation (70 s on a
# loaded machine), where eager answered within 0.5 s -- a user who pressed Ctrl-C again, or killed the process,
# lost the model. Nothing of a cluster has run while it compiles, so that wait can be given up: where the caller
# says so (:func:`interruptible`), the compile runs on a thread of its own and the caller's thread waits for it,
# looking every ``POLL`` seconds for a held signal; one there raises :class:`Interrupted`, and the caller leaves
# the cluster as it was before it (auto-jit: ``_Cluster._abandon``). The compile goes on to its end on its thread
# (XLA cannot stop one), its executable kept in JAX's persistent cache for the next try; the process's exit waits
# for it, as for a tier-up (``_wait_for_tier_ups``: none outlives XLA's teardown).
POLL = 0.05


class Interrupted(BaseException):
    """A foreground compilation given up because a signal arrived while the program waited for it (a
    ``BaseException``: no ``except Exception`` on the way takes it for a failed compile and compiles again)."""


_interruptible = threading.local()  # ``on``: the calling thread may give its next compiles up


class interruptible:
    """Within this block, a compile of :func:`compile` / :func:`quick` in the main thread raises
    :class:`Interrupted` where a held signal arrives while it runs -- for a caller that can leave everything as it
    was, nothing having run yet.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> with interruptible():
        ...     compile(jax.jit(lambda x: x * 3).lower(jnp.ones(2)), 1)(jnp.ones(2)).tolist()
        [3.0, 3.0]
    """

    __slots__ = ("before",)

    def __enter__(self):
        self.before = getattr(_interruptible, "on", False)
        _interruptible.on = True
        return self

    def __exit__(self, *exc):
        _interruptible.on = self.before


def interrupting():
    """Whether the calling thread is the main thread inside :class:`interruptible`: work it may give up.

    Example:
        >>> interrupting(), interrupting.__name__
        (False, 'interrupting')
    """
    return getattr(_interruptible, "on", False) and threading.current_thread() is threading.main_thread()


def foreground(compile_fn, key=None):
    """``compile_fn()`` (a compilation); inside :class:`interruptible`, in the main thread, on a thread of its own,
    waited for until it returns or a held signal arrives (:class:`Interrupted`). ``key``: what identifies the program
    (``_persist.fingerprint``): a compile of the same program given up before, still running or done, is taken
    instead of a second one (a notebook's cell interrupted, then run again).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> foreground(jax.jit(jnp.sin).lower(jnp.zeros(1)).compile)(jnp.zeros(1)).tolist()
        [0.0]
    """
    earlier = _given_up.pop(key, None) if key is not None and _given_up else None
    if earlier is None and not interrupting():
        return compile_fn()
    if earlier is not None:
        t, box = earlier
    else:
        if _interrupt.pending():  # (arrived while the program was lowered: nothing compiled yet)
            stats["interrupted"] += 1
            raise Interrupted
        box = []

        def work():
            try:
                box.append((True, compile_fn()))
            except BaseException as exc:  # (re-raised on the caller's thread)
                box.append((False, exc))
            finally:
                _threads.discard(threading.current_thread())
                _abandoned.pop(threading.current_thread(), None)

        wait_at_exit()
        t = threading.Thread(target=work, name="megxla-compile", daemon=True)
        _threads.add(t)
        t.start()
    stoppable = interrupting()
    while True:
        t.join(POLL if stoppable else None)
        if not t.is_alive():
            break
        if _interrupt.pending():
            stats["interrupted"] += 1
            _abandoned.setdefault(t, time.perf_counter())
            if key is not None:
                if len(_given_up) >= 8:
                    _given_up.pop(next(iter(_given_up)))
                _given_up[key] = (t, box)
            raise Interrupted
    ok, value = box[0]
    if ok:
        return value
    raise value


_given_up: dict = {}  # program key -> (thread, result box) of its compile given up, for its next try (foreground)


def compile(lowered, n_ops, key=None, family=None):  # noqa: A001  (the one thing this module does)
    """An executable for ``lowered`` (a ``jax.stages.Lowered`` of ``n_ops`` ops): quick first where that pays.
    ``key``: the program's, for :func:`foreground`; ``family``: for ``_schedules.choose``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> exe = compile(jax.jit(lambda x: x + 1).lower(jnp.zeros(2)), 1)
        >>> exe(jnp.zeros(2)).tolist()
        [1.0, 1.0]
    """
    options = fast_options() if ENABLED and n_ops >= MIN_OPS else None
    if options is None or not isinstance(lowered, jax.stages.Lowered):
        from . import _schedules  # (it builds on this module: imported when first needed)
        return _schedules.choose(lowered, lambda: foreground(lowered.compile, key), key, family)
    try:
        fast = foreground(lambda: lowered.compile(compiler_options=options))
    except Exception:  # (an XLA that no longer knows an option: one optimized compile, as before)
        stats["failed"] += 1
        return foreground(lowered.compile)
    return tiered(lowered.compile, fast, n_ops)


def quick(lowered):
    """The quick executable of ``lowered`` and no other: for a program whose optimized compile XLA cannot do in
    bounded time (see ``_autojit.QUICK_SCALARS``). XLA's own compile where the backend has no quick options.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> quick(jax.jit(lambda x: x * 2).lower(jnp.ones(2))).__call__(jnp.ones(2)).tolist()
        [2.0, 2.0]
    """
    options = fast_options()
    if options is None or not isinstance(lowered, jax.stages.Lowered):
        return foreground(lowered.compile)
    stats["quick_only"] += 1
    try:
        return foreground(lambda: lowered.compile(compiler_options=options))
    except Exception:  # (an XLA that no longer knows an option)
        stats["failed"] += 1
        return foreground(lowered.compile)


def parts_for(n_ops):
    """How many parts a cluster of ``n_ops`` ops compiled cold runs its quick tier in (1: one executable; 0: not
    tiered).

    Example:
        >>> want = min(MAX_PARTS, 2000 // PART_OPS) if ENABLED and jax.default_backend() == "cpu" else 0
        >>> parts_for(10), parts_for(2000) == want
        (0, True)
    """
    if not ENABLED or n_ops < MIN_OPS or fast_options() is None:
        return 0
    return max(1, min(MAX_PARTS, n_ops // PART_OPS))


def compile_parts(lowerings):
    """The quick executables of the programs ``lowerings`` yields, each compiled on a thread of its own from the
    moment it is yielded -- while the caller lowers the next one. Raises what a compilation raised.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> exes = compile_parts(jax.jit(f).lower(jnp.zeros(2)) for f in (jnp.sin, jnp.cos))
        >>> [float(e(jnp.zeros(2))[0]) for e in exes]
        [0.0, 1.0]
    """
    options = fast_options() or {}
    results, threads = [], []

    def work(k, lowered):
        try:
            results[k] = lowered.compile(compiler_options=options)
        except BaseException as exc:  # (re-raised on the caller's thread)
            results[k] = exc

    try:
        for lowered in lowerings:
            results.append(None)
            t = threading.Thread(target=work, args=(len(results) - 1, lowered), name="megxla-quick-part", daemon=True)
            threads.append(t)
            t.start()
    finally:
        for t in threads:
            t.join()
    for r in results:
        if isinstance(r, BaseException):
            stats["failed"] += 1
            raise r
    stats["parts"] += len(results)
    return results


def tiered(optimize, fast, n_ops, start_run=None):
    """``fast`` (an executable, or a callable running several) until its ``SWITCH_RUN``-th run, then what
    ``optimize()`` returns: called on a background thread from the ``start_run``-th run (``START_RUN``; 1 where
    ``fast`` runs a churning site's part op by op, see ``_autojit._in_background``).

    Example:
        >>> exe = tiered(lambda: (lambda x: x + 1), lambda x: x + 1.0, 1000)
        >>> [exe(1) for _ in range(SWITCH_RUN)][-2:]
        [2.0, 2]
    """
    stats["tiered"] += 1
    return _Tiered(optimize, fast, n_ops, start_run)


class _Tiered:
    """The quick executable, replaced by the optimized one at its ``SWITCH_RUN``-th run."""

    __slots__ = ("exe", "optimize", "runs", "thread", "result", "on_optimized", "n_ops", "seconds", "started",
                 "waited", "start_run", "counted")

    def __init__(self, optimize, fast, n_ops, start_run=None):
        self.exe, self.optimize, self.runs, self.thread, self.result = fast, optimize, 0, None, None
        self.start_run = START_RUN if start_run is None else start_run  # (read now: tests set START_RUN)
        self.counted = False  # (counted in ``in_flight``)
        self.on_optimized = None  # called (on the compile thread) once the optimized executable exists
        self.n_ops, self.seconds = n_ops, None
        self.started = None  # (perf_counter at the run that started the optimized compile)
        self.waited = 0.0  # (seconds the switch run waited for it)

    def __call__(self, *args):
        if self.optimize is not None:
            with _lock:  # (threads share cached executables; only the first SWITCH_RUN runs take it)
                if self.optimize is not None:
                    self.runs += 1
                    if self.runs == self.start_run:
                        self._start()
                    elif self.runs >= SWITCH_RUN:
                        self._switch()
        return self.exe(*args)

    def _start(self):
        wait_at_exit()
        with _count_lock:
            in_flight[0] += 1
            self.counted = True
        self.started = time.perf_counter()
        t = self.thread = threading.Thread(target=self._compile, name="megxla-tier-up", daemon=True)
        _threads.add(t)
        t.start()

    def _compile(self):
        mark_background()
        t0 = time.perf_counter()
        try:
            self.result = self.optimize()  # (None: none; the quick executable stays)
            self.seconds = time.perf_counter() - t0
            if self.on_optimized is not None and self.result is not None:
                self.on_optimized()
        except Exception:  # (memory, an XLA error: the quick executable stays)
            stats["failed"] += 1
        finally:
            _threads.discard(threading.current_thread())
            if self.start_run == 1:
                # (started at its first run -- a part run op by op meanwhile --, it may never run a third time: its
                # site's clusters changed. Counted until its switch, it would keep every step timer waiting.)
                self._uncount()

    def _uncount(self):
        with _count_lock:
            if self.counted:
                self.counted = False
                in_flight[0] -= 1

    def _switch(self):
        if self.thread is None:
            self._start()
        if self.runs == SWITCH_RUN:
            t0 = time.perf_counter()
            interval = (t0 - self.started) / max(1, self.runs - self.start_run)
            # (no bound where several processes run: there the run that switches would follow each one's load, and
            # data parallel's replicas would run different executables at one step -- and round apart; nor where
            # ``config.deterministic_kernel`` asks every run of a program to compute the same bits)
            fixed = jax.process_count() > 1 or _lazy.DETERMINISTIC[0]
            self.thread.join(None if fixed else max(SWITCH_WAIT, SWITCH_STEPS * interval))
            self.waited = time.perf_counter() - t0
        if self.thread.is_alive():  # (a long compile: the quick executable runs on until it is done)
            return
        waited = self.waited
        self._uncount()
        if self.result is not None:
            self.exe = self.result
            stats["upgraded"] += 1
            if LOG:
                print(f"megxla auto-jit: a cluster of {self.n_ops} ops runs its optimized executable from run "
                      f"{self.runs} on (compiled in {self.seconds:.2f} s beside its earlier runs; run {SWITCH_RUN} "
                      f"waited {waited:.2f} s for it)", file=sys.stderr)
        self.optimize = self.result = self.thread = None

    def memory_analysis(self):
        return self.exe.memory_analysis()


_registered: list = []


def wait_at_exit():
    """Have the process's exit wait for the compiles running on threads of ours (``_threads``) -- registered at the
    first one, after JAX's exit handlers (its backends exist by then), so it runs before them: no compile outlives
    XLA's teardown."""
    if not _registered:
        _registered.append(atexit.register(_wait_for_tier_ups))


_abandoned: dict = {}  # compile threads a signal made the program stop waiting for -> when that was


def _wait_for_tier_ups():
    """(atexit, before JAX's teardown) Wait for the compiles still running on threads of ours. Where one was
    interrupted (:func:`interruptible`), a line says why the process has not ended yet, and a second Ctrl-C ends it
    at once (``os._exit``, standard streams flushed): the first one's ``except KeyboardInterrupt:`` has run."""
    threads = [t for t in list(_threads) if t.is_alive()]
    waiting = [t for t in threads if t in _abandoned]
    if waiting:
        since = time.perf_counter() - min(_abandoned[t] for t in waiting)
        print(f"megxla: waiting for XLA to finish a compilation interrupted {since:.0f} s ago (XLA cannot stop "
              f"one) before the process ends; Ctrl-C again ends it now.", file=sys.stderr, flush=True)
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        if not waiting:
            raise
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # (a closed stream)
                pass
        os._exit(130)  # (128 + SIGINT: a shell's code for a process ended by Ctrl-C)
