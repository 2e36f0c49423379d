"""XLA:CPU's instruction schedule of a long-running program, chosen by timing both (:class:`ScheduleChoice`).

Why: XLA:CPU orders a program's instructions breadth-first by default ("concurrency-optimized": independent
instructions side by side, for its thunk executor to run at once) and can order them depth-first instead
(``xla_cpu_scheduler_type``: "memory-optimized"). Which runs faster depends on the program, and by a lot. Measured
in one process on a 2-core CPU, each program's two executables alternating (``benchmarks/xla_cpu_scheduler.py``):
IBN-Net's ResNeXt-IBN step (batch 1, 224 px; grouped convolutions, instance and batch normalization side by side)
runs 0.82-0.86x as long depth-first -- 134-136 -> 115 ms under ``xla_trace``, which had been slower than eager's
113-129 --, RegNetX-200MF 0.97-0.98x; the MLP, the ConvNets, ResNet-18, BERT-tiny and DCGAN 1.02-1.16x as long (the
MLP 1.5x in one process); MobileNetV3, EfficientNet-B0 and the Transformer within 1-4% either way. So neither
schedule is the default for all programs here: a program whose runs take at least ``MIN_RUN`` seconds gets the
other schedule compiled beside it on a background thread, both are timed for ``PROBE`` runs each, alternating, and
the faster is kept -- the default unless the other is faster by ``MARGIN`` in each half of those runs. Where one
half says so and the other not, the two are timed again, up to ``ROUNDS`` times; still undecided, the default runs
and nothing is kept (the next process times them again).

A run is timed from its start to the next run's, as the step timers time steps (``_mode_timer``): waiting for
its results would time the program alone, but would also change what those timers and the early launches'
(``_autojit._Guess``) see of the step -- a compute-bound step then looked host-bound and compiled an early launch.
So a program running several times a step is timed no further (its intervals are short), and one running once in a
long step is timed with the step: there the other schedule is kept only if the whole step ran faster with it.

The other compile costs about what the program's own did (seconds, on cores the steps share: every step beside it
runs slower, in every mode), and pays back only over many runs. So it starts once the program's runs have taken
``RENT`` times as long as its compile did -- rent, then buy: a program that has run that long is likely to run as
long again, and the compile then costs at most a quarter of the time run so far. (At once as long, the zoo
benchmark's 48-step MobileNetV3 run, its default executables loaded from JAX's cache, ran its three modes 1.4-1.9x as
long as without the choice, three such compiles beside them.) A short script -- a benchmark's ten steps of a ResNet,
a few blocks of MobileNetV3 -- pays nothing. The choice is kept beside the program's kept lowered form
(``_persist``, by its fingerprint): the next process compiles the schedule chosen -- from JAX's cache -- and times
nothing.

A schedule orders the same instructions: the two executables compute the same bits (every parameter after 40 steps
of ResNeXt-IBN, and after 8 steps of the MLP, the ConvNets, the Transformer and the host-read step), so the run that
switches does not change a result. Only on the CPU (the option is XLA:CPU's), for one-process programs (the ranks of
an SPMD program must run one schedule each: their collectives meet in program order), and where ``XLA_FLAGS`` does
not choose the scheduler itself; ``MEGXLA_SCHEDULE_CHOICE=0`` keeps XLA's default.
"""
from __future__ import annotations

import os
import statistics
import threading
import time

import jax

from ..core._op import known_options
from . import _tiers

__all__ = ["ScheduleChoice", "choose", "stats", "MIN_RUN", "WATCH", "PROBE", "MARGIN", "RENT"]

OTHER = {"cpu": {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}}
MIN_RUN = 0.03  # seconds a run takes (every interval between runs) for the other schedule to be tried
WATCH = 3  # intervals between the default executable's runs timed, at least, before that
PROBE = 6  # runs of each executable compared, alternating (in two halves)
MARGIN = 0.04  # the other schedule is kept only if faster by this fraction (in each half of the probe)
ROUNDS = 3  # probes at most, while their halves disagree (then the default, not kept for the next process)
RENT = 4.0  # the other compiles once the program's runs have taken this many times its own compile time
ENABLED = os.environ.get("MEGXLA_SCHEDULE_CHOICE", "1").strip().lower() not in ("0", "false", "no", "off")
stats = {"watched": 0, "probed": 0, "other": 0, "failed": 0, "undecided": 0}  # (other: programs running the other
# schedule; undecided: probed ROUNDS times, the halves disagreeing each time)

_USER_FLAGS = ("xla_cpu_scheduler_type", "xla_cpu_enable_concurrency_optimized_scheduler")


def other_options():
    """The compiler options of the other schedule for the default backend, or None where there is none to try.

    Example:
        >>> opts = other_options()
        >>> opts is None or opts == {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}
        True
    """
    if not ENABLED or any(f in os.environ.get("XLA_FLAGS", "") for f in _USER_FLAGS):
        return None
    return known_options(OTHER.get(jax.default_backend()))


def choose(lowered, compile_fn, key=None, family=None):
    """The executable ``compile_fn()`` returns (``lowered`` compiled with XLA's defaults), or a
    :class:`ScheduleChoice` of it where the other schedule may be tried. ``key``: the program's fingerprint
    (``_persist``), under which the choice is kept for the next process -- which then compiles the schedule chosen,
    from JAX's cache, and times nothing (a warm start found its default executable in the cache in a fraction of a
    second, and the rent of the other's compile, cold, was taken as paid at once). ``family``: the key of the same
    program with no donations, where this one donates -- an auto-jit cluster launched early runs that one, and the
    two take the choice either of them makes (each timed on its own, the machine's noise during one probe left
    ResNeXt-IBN's cluster on the default in 2 of 6 runs).

    Example:
        >>> import jax.numpy as jnp
        >>> lowered = jax.jit(lambda x: x * 2).lower(jnp.ones(2))
        >>> exe = choose(lowered, lowered.compile)
        >>> exe(jnp.ones(2)).tolist()
        [2.0, 2.0]
    """
    options = None
    if isinstance(lowered, jax.stages.Lowered) and jax.process_count() == 1:
        options = other_options()
    known = None
    if options is not None:
        known = _recall(key) or (_family_choice.get(family) or _recall(family) if family is not None else None)
    if known == "other":
        try:
            executable = _tiers.foreground(lambda: lowered.compile(compiler_options=options))
            stats["other"] += 1
            return executable
        except Exception:  # (an XLA that refuses the option now: the default)
            stats["failed"] += 1
    t0, saved = time.perf_counter(), _SAVED[0]
    executable = compile_fn()
    if options is None or known is not None:
        return executable
    # (the compile's time: loaded from JAX's cache, the time the compile had taken when it was kept -- the other
    # schedule's compile, not kept yet, takes about that: a first process with a warm cache paid it at once, the
    # zoo benchmark's MobileNetV3 steps running 1.4-1.9x as long, every mode, while three such compiled beside them)
    seconds = time.perf_counter() - t0 + (_SAVED[0] - saved)
    return ScheduleChoice(lowered, executable, seconds, key, family)


_SAVED = [0.0]  # seconds of compiles JAX's persistent cache saved, process-wide (its event: the compile's time)


def _count_saved(event, duration, **_):
    if event == "/jax/compilation_cache/compile_time_saved_sec":
        _SAVED[0] += max(0.0, duration)


jax.monitoring.register_event_duration_secs_listener(_count_saved)


_family_choice: dict = {}  # family key -> the choice a program of that family made in this process (``choose``)


def _kept(key):
    """The file keeping the schedule chosen for the program of ``key``, or None (no key, or no kept programs)."""
    if key is None:
        return None
    from . import _persist  # (it builds on this module)
    directory = _persist._directory()
    return None if directory is None else os.path.join(directory, key + ".schedule")


def _recall(key):
    """The schedule kept for the program of ``key`` ("default" or "other"), or None."""
    path = _kept(key)
    try:
        with open(path) as fh:
            choice = fh.read().strip()
    except (OSError, TypeError):
        return None
    return choice if choice in ("default", "other") else None


def _remember(key, choice):
    path = _kept(key)
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(choice)
        os.replace(tmp, path)  # (atomic: a concurrent reader sees no file or the whole one)
        _trim(os.path.dirname(path))
    except OSError:  # (a read-only or full disk: the next process times it again)
        pass


KEPT_MAX = 4096  # choices kept (as many as kept programs, ``_persist.MAX_FILES``); the oldest tenth goes beyond


def _trim(directory):
    """Keep at most ``KEPT_MAX`` choices in ``directory``: the least recently written tenth goes beyond that."""
    names = [n for n in os.listdir(directory) if n.endswith(".schedule")]
    if len(names) <= KEPT_MAX:
        return
    names.sort(key=lambda n: os.path.getmtime(os.path.join(directory, n)))
    for n in names[:len(names) // 10 + 1]:
        try:
            os.remove(os.path.join(directory, n))
        except OSError:  # (another process removed it first)
            pass


class ScheduleChoice:
    """An executable that runs XLA's default schedule, or the other one (:data:`OTHER`) once that has been timed
    faster. A run is timed from its start to the next one's (the caller's work between included, as a step timer
    times steps: a run waited for would change what other timers see). One interval shorter than ``MIN_RUN`` ends
    the choice (the default stays). Once at least ``WATCH`` intervals have taken ``RENT`` times ``seconds`` (the
    default's compile time), the other is compiled on a background thread, then ``PROBE`` runs of each are timed,
    alternating (the other's first run, its warm-up, not timed) -- again while the probe's halves disagree, up to
    ``ROUNDS`` probes."""

    __slots__ = ("exe", "lowered", "other", "seconds", "ran", "watch", "last", "times", "order", "thread", "counted",
                 "lock", "key", "family", "rounds", "__weakref__")

    def __init__(self, lowered, executable, seconds=0.0, key=None, family=None):
        self.exe, self.lowered, self.other, self.key, self.family = executable, lowered, None, key, family
        self.seconds, self.ran = seconds, 0.0  # (the default's compile time; the time its runs have taken so far)
        self.watch = 0  # intervals timed before the other's compile
        self.last = None  # (variant or None: not timed, perf_counter) of the latest run
        self.times = {0: [], 1: []}  # variant (1: the other schedule) -> its runs' intervals while probing
        self.order = None  # the variants of the probing runs still to come (-1: the other's warm-up)
        self.rounds = 1  # probes so far (ROUNDS at most)
        self.thread = None
        # (counted in ``_tiers.in_flight`` while the other compiles: the step timers -- eager or clusters, early or
        # late launches -- time no steps meanwhile, whose Python shares the cores with the compile. Not until the
        # choice: a program that stops running before it would hold every timer back for good)
        self.counted = False
        self.lock = threading.Lock()
        stats["watched"] += 1

    def __call__(self, *args):
        if self.lowered is None:
            return self.exe(*args)
        with self.lock:  # (threads share cached executables)
            exe = self._next() if self.lowered is not None else self.exe
        return exe(*args)

    def _next(self):
        if self.family is not None and self.family in _family_choice:
            return self._follow(_family_choice[self.family])
        now = time.perf_counter()
        last, self.last = self.last, None
        interval = None if last is None or last[0] is None else now - last[1]
        if self.order is not None:  # probing
            _tiers.disturbed[0] += 1
            if interval is not None:
                self.times[last[0]].append(interval)
            if not self.order:
                return self._decide()
            variant = self.order.pop(0)
            self.last = (variant if variant >= 0 else None, now)
            return self.exe if variant == 0 else self.other
        if self.thread is None:  # watching the default's runs
            if interval is not None:
                if interval < MIN_RUN:
                    self.lowered = None  # (a short run: the default stays; this wrapper then costs a test a call)
                    return self.exe
                self.watch += 1
                self.ran += interval
            if self.watch >= WATCH and self.ran >= RENT * self.seconds:
                self._start()
            else:
                self.last = (0, now)
            return self.exe
        if self.thread.is_alive():  # (the other compiles: the default runs meanwhile, untimed)
            _tiers.disturbed[0] += 1
            return self.exe
        if self.other is None:  # (its compile failed: the default stays)
            self.lowered = None
            self._uncount()
            return self.exe
        stats["probed"] += 1
        # (each variant twice in turn, so that neither always runs right after the other)
        self.order = [-1] + [(k // 2) % 2 for k in range(1, 2 * PROBE + 1)]
        return self._next()

    def _follow(self, choice):
        """The choice its family made: the default at once; the other once compiled (no timing)."""
        if choice == "default":
            self.other = self.lowered = self.order = self.thread = None
            return self.exe
        if self.thread is None:
            self._start()
        if self.thread is None or self.thread.is_alive():  # (compiling; or no other: ``_start`` ended the choice)
            _tiers.disturbed[0] += self.thread is not None
            return self.exe
        if self.other is not None:
            self.exe = self.other
            stats["other"] += 1
        self.other = self.lowered = self.order = self.thread = None
        return self.exe

    def _decide(self):
        # (the other is kept where it was faster by the margin in each half of the probe: a machine's noise -- one
        # noisy half -- then keeps the default, which a wrong choice would have cost up to 4% a run: EfficientNet-B0)
        t0, t1, h = self.times[0], self.times[1], max(1, len(self.times[0]) // 2)
        halves = [(a, b) for a, b in ((t0[:h], t1[:h]), (t0[h:], t1[h:])) if a and b]
        faster = [statistics.median(b) < statistics.median(a) * (1.0 - MARGIN) for a, b in halves]
        other = bool(faster) and all(faster)
        if any(faster) and not other and self.rounds < ROUNDS:
            # The halves disagree: probed again (the verdict is kept for good, a noisy one too -- ResNeXt-IBN's
            # other schedule 7% faster in one half, 1% in the other, amid 5% noise: the default kept, 0.86x as fast)
            self.rounds += 1
            self.times = {0: [], 1: []}
            self.order = [(k // 2) % 2 for k in range(1, 2 * PROBE + 1)]
            return self._next()
        if other:
            self.exe = self.other
            stats["other"] += 1
        choice = "other" if other else "default"
        if any(faster) and not other:  # (undecided after ROUNDS probes: the default, timed again next process)
            stats["undecided"] += 1
            self.other = self.lowered = self.order = self.thread = None
            self._uncount()
            return self.exe
        _remember(self.key, choice)
        if self.family is not None:
            if len(_family_choice) >= 1024:
                _family_choice.pop(next(iter(_family_choice)))
            _family_choice[self.family] = choice
            if self.family != self.key:
                _remember(self.family, choice)
        self.other = self.lowered = self.order = self.thread = None
        self._uncount()
        return self.exe

    def _start(self):
        options = other_options()
        if options is None:
            self.lowered = None
            return
        with _tiers._count_lock:
            _tiers.in_flight[0] += 1
            self.counted = True
        lowered = self.lowered

        def compile_other():
            _tiers.mark_background()
            try:
                self.other = lowered.compile(compiler_options=options)
            except Exception:  # (memory, an XLA that refuses the option: the default stays)
                stats["failed"] += 1
            finally:
                _tiers._threads.discard(threading.current_thread())
                self._uncount()

        _tiers.wait_at_exit()
        t = self.thread = threading.Thread(target=compile_other, name="megxla-schedule", daemon=True)
        _tiers._threads.add(t)
        t.start()

    def _uncount(self):
        with _tiers._count_lock:
            if self.counted:
                self.counted = False
                _tiers.in_flight[0] -= 1

    def __getattr__(self, name):  # memory_analysis, cost_analysis, as_text, ...: the executable running now
        if name in ScheduleChoice.__slots__:  # (not set yet: no recursion through this method)
            raise AttributeError(name)
        return getattr(self.exe, name)
