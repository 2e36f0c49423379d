"""How a step runs, chosen by timing it both ways: as auto-jit clusters or eagerly (:class:`ModeTimer`).

Auto-jit gives one to each training step whose clusters keep running op by op (per ``opt.step()``), to each loop
whose host reads cut it (read to read), and ``xla_trace`` to a step whose guards keep missing (per call). The clock
leaves out JAX's one-time compile costs, which it counts process-wide from JAX's monitoring events.

In a run of several processes (``jax.process_count() > 1``: a data-parallel group) a timer whose two modes may round
differently chooses nothing: it runs clusters, in every process. Each process would time its own steps, and where two
chose differently their optimizer updates rounded differently -- data parallel's replicas drifted apart in the last
bits (a ConvNet with ``clip_grad_norm``, 2 ranks: 1 run in 3 with no skew at all, 2 in 2 with one rank's clusters
5 ms slower; see docs/design.md, "Timing choices in a data-parallel group"). Agreeing on each choice across the
ranks would need an exchange at a point every rank reaches, but whether a step gets a timer at all follows the rank's
own data (how many of its ops ran op by op): no exchange point is certain, and a missed one is a hang.

For the same reason ``megxla.config.deterministic_kernel = True`` (``MEGXLA_DETERMINISTIC_KERNEL=1``) makes such a
timer choose nothing: which steps ran eagerly followed the machine's load, so two runs of one seeded program drifted
apart (auto-jit's ConvNet b8, 80 steps on a busy 2-core CPU: 10, 21 and 50 eager steps, losses 2.404729, 2.404729
and 2.398812). With it, every run computes the same bits; a step that eager would run faster runs as clusters.
"""
from __future__ import annotations

import math
import statistics
import time

import jax

from ..core import _lazy
from . import _tiers

_DETERMINISTIC = _lazy.DETERMINISTIC  # (``config.deterministic_kernel``: see the module doc)

__all__ = ["ModeTimer"]

_COMPILE_SECS = [0.0]  # seconds JAX spent tracing, lowering and compiling, process-wide (ModeTimer)
_KERNEL_SECS = [0.0]  # of them, those of eager kernels met running clusters op by op (_run_ops)
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")


def _count_compile(event, duration, **_):
    if event in _COMPILE_EVENTS and not _tiers.background():  # (a tier-up's compile is no step's)
        _COMPILE_SECS[0] += duration


jax.monitoring.register_event_duration_secs_listener(_count_compile)


class ModeTimer:
    """Chooses, step by step, how a step runs: as clusters or eagerly, whichever has taken less time from one step's
    start to the next (the wait for its results and the program around it included). Clusters first while their
    compilations settle (``warmup`` steps), then ``PROBE`` eager steps, then the faster mode, trying the other again
    for ``PROBE`` steps ``FIRST_EVERY`` steps after the first choice (or after a change of choice), then twice as
    long each time it stands, up to every ``EVERY`` steps (later where a probe cost more than ``PROBE_BUDGET`` of the
    steps between: its new kernels or compilations): such a step is never slower than eager for long, and a
    choice that one noisy probe got wrong is undone within ``FIRST_EVERY`` steps (the MLP b128 step, one process in
    ~13: eager chosen at 7 ms against 4.9 ms as clusters, and kept for the next 1000 steps; a loop reading every
    ~0.2 ms, 4 cold runs in 5: clusters kept at 1.3-1.6x eager's time). Used by a churning
    ``xla_trace`` step (per call) and by auto-jit (per ``opt.step()``, once its clusters keep running op by op).
    ``same_numbers``: both modes compute the same bits (an early launch against a late one); unless they do, a timer
    in a run of several processes runs clusters only (module doc).

    Example:
        >>> t = ModeTimer(); t.next_mode()      # True: run as clusters
        True
    """

    PROBE, EVERY = 5, 200
    FIRST_EVERY = 50  # (steps from an eager choice to its first re-probe; doubled while the choice stands)
    clock = staticmethod(time.perf_counter)
    # Seconds JAX has spent tracing, lowering and compiling (or loading from its cache) so far: an eager step's
    # time is counted without them -- they are one-time costs of its kernels (one per op and shape), and a step
    # whose clusters came warm from the kept programs (``_persist``) meets them first in its eager probe, which
    # then looked slower than it runs (detection: 150 ms probe steps against 6.3 ms eager, clusters chosen at
    # 9-10 ms). A cluster's compilations stay counted: its keys keep changing where shapes follow the data. What
    # a step as clusters compiled for the eager kernels of the ops it ran op by op is not (``kernel_clock``): the
    # same one-time costs eager would meet (the zoo detector's cluster steps while its counts were new: 370-710 ms
    # of 460-890 in kernels, which eager's probe steps had subtracted -- eager chosen at 66 against 464 ms).
    compile_clock = staticmethod(lambda: _COMPILE_SECS[0])
    kernel_clock = staticmethod(lambda: _KERNEL_SECS[0])

    MAX_DELAY = 16  # steps the warmup may be extended while tiered clusters run their quick executables
    # A probe's cost -- its steps' wall time, compilations included, beyond what the chosen mode would have taken --
    # is held to PROBE_BUDGET of the steps between probes: past the first re-check, a probe that cost more comes
    # later (up to MAX_EVERY steps). The zoo detector's eager probes met new kernels for every new count (200-600 ms
    # steps against 5 ms clusters, ~1-2 s a probe): probed every 50-200 steps, they cost more than the steps did.
    PROBE_BUDGET, MAX_EVERY = 0.05, 4000

    def __init__(self, warmup=8, margin=0.0, every=None, drain=None, same_numbers=False, eager_compiles=False):
        # eager is chosen only if faster by this fraction (0: whichever is faster; negative: clusters only if faster by
        # -margin)
        self.margin = margin
        # Waits for the eager ops issued so far (see next_mode), or None: eager steps are timed by their median.
        self.drain = drain
        if every is not None:
            self.EVERY = every
        self.warmup = warmup
        self.delayed = 0  # steps added to the warmup (tiered clusters: see next_mode)
        self.settled = warmup  # calls in a row with no tiered cluster waiting for its optimized executable
        self.calls = 0
        self.times = {True: [], False: []}  # mode (clusters?) -> seconds of its latest steps
        self.walls = {True: [], False: []}  # ... and their wall seconds, compilations included (a probe's cost)
        self.last = None  # (mode, start, compile and kernel seconds, _tiers.disturbed at its start) of the previous step
        self.best = True
        self.streak = 0  # steps in a row run in the latest mode
        self.next_probe = None  # the call that starts the next probe of the other mode (None: the end of the warmup)
        self.interval = 0  # steps from the latest probe's start to the next one's (0: no choice made yet)
        # Clusters only, untimed: the modes may compute different bits (``same_numbers`` False: eager kernels against
        # a compiled cluster), and other processes may hold replicas of what they compute (see the module doc).
        # (Read once: a timer is made after ops ran, so JAX's runtime, which fixes the process count, has started.)
        self.fixed = not same_numbers and jax.process_count() > 1
        self.same_numbers = same_numbers
        # Eager steps' compilations counted in their time, as the clusters' are: where the values that shape a step
        # change every step (a churning ``xla_trace``'s host reads), its eager kernels compile for every new shape
        # as its clusters would -- not a one-time cost (see next_mode). And the clusters' warmup lasts while they
        # compile (up to MAX_DELAY steps more): the steps compared are then those of the executables they run from
        # then on, not their compilations (the host-read step's first five: 121, 128, 16, 11, 40 ms, against 8-10
        # ms once compiled).
        self.eager_compiles = eager_compiles

    def next_mode(self):
        """Whether the step starting now runs as clusters (True) or eagerly (False)."""
        if self.fixed or _DETERMINISTIC[0] and not self.same_numbers:
            return True
        k, w, p = self.calls, self.warmup, self.PROBE
        if self.drain is not None and self.last is not None and not self.last[0] \
                and (self.streak == 1 or self._mode(k, w, p)):
            # An eager step ends when its ops are issued; their compute goes on into the next step (the MLP's eager
            # steps on 2 cores: intervals of 3 and 13 ms alternating, the first cluster step after them 20 ms). After
            # an eager run's first step (not timed: one-time costs) and at the switch back to clusters, the eager
            # ops issued are waited for: the steps timed in between start and end with nothing pending.
            self.drain()
        now, compiled, kernels = self.clock(), self.compile_clock(), self.kernel_clock()
        disturbed = _tiers.disturbed[0]
        if self.last is not None:
            mode, start, compiled_before, kernels_before, disturbed_before = self.last
            if disturbed == disturbed_before:  # (else the step ran a schedule being timed: see _tiers.disturbed)
                t = self.times[mode]
                t.append(now - start - (kernels - kernels_before if mode else
                                        0.0 if self.eager_compiles else compiled - compiled_before))
                del t[:-self.PROBE]
            wall = self.walls[mode]
            wall.append(now - start)
            del wall[:-self.PROBE]
        self.calls += 1
        compiling = self.eager_compiles and self.last is not None and self.last[0] and compiled > self.last[2]
        self.settled = 0 if _tiers.in_flight[0] or compiling else self.settled + 1
        if k == w and self.settled <= p and self.delayed < self.MAX_DELAY:
            # (tiered clusters running their quick executables lately: the clusters' latest steps would time them,
            # not what the clusters run from now on -- the warmup goes on until PROBE steps ran without any)
            self.warmup += 1
            self.delayed += 1
            mode = True
        else:
            start = w if self.next_probe is None else self.next_probe
            if k >= w + p and k == start + p:  # a probe just ended: compare the latest steps of each mode
                if self.times[True] and self.times[False]:
                    best = statistics.median(self.times[True]) <= self._eager_time() * (1.0 + self.margin)
                    soon = False
                    if best:  # clusters: eager is probed again twice as late each time, up to every EVERY steps
                        # (each probe costs eager steps); the first choice is checked again soon -- its eager probe
                        # may have met one-time costs (a loop reading every ~0.2 ms: 4 cold runs in 5 kept clusters
                        # at 1.3-1.6x eager's time for 1000 iterations)
                        soon = not (self.interval and self.best)
                        self.interval = min(self.FIRST_EVERY if soon else 2 * self.interval, self.EVERY)
                    elif self.interval and not self.best:  # eager again: checked again twice as late
                        self.interval = min(2 * self.interval, self.EVERY)
                    else:  # eager, against the clusters expected to be faster: checked again soon
                        soon = True
                        self.interval = min(self.FIRST_EVERY, self.EVERY)
                    self.best = best
                    if not soon:
                        self.interval = max(self.interval, self._budgeted())
                self.next_probe = start + (self.interval or self.EVERY)
            mode = self._mode(k, w, p)
        self.streak = self.streak + 1 if self.last is not None and self.last[0] == mode else 1
        self.last = (mode, now, compiled, kernels, disturbed)
        return mode

    def restart(self):
        """Take no time for the step under way: the next call starts a step (a loop's iterations timed from one
        host read to the next, across a training step's end: that one holds the step's backward and update).

        Example:
            >>> t = ModeTimer(); t.next_mode(); t.restart(); t.next_mode(); t.times[True]
            True
            True
            []
        """
        self.last = None

    def _budgeted(self):
        """Steps until the next probe that keep the probe just ended within ``PROBE_BUDGET`` of the steps between
        (0 where it cost nothing beyond the chosen mode's time), at most ``MAX_EVERY``."""
        best = statistics.median(self.times[self.best])
        extra = sum(self.walls[not self.best]) - len(self.walls[not self.best]) * best
        if extra <= 0 or best <= 0:
            return 0
        return min(math.ceil(extra / (self.PROBE_BUDGET * best)), self.MAX_EVERY)

    def _mode(self, k, w, p):
        if k < w:
            return True
        start = w if self.next_probe is None else self.next_probe
        return not self.best if start <= k < start + p else self.best

    def _eager_time(self):
        t = self.times[False]
        if self.drain is None or len(t) < 3:
            return statistics.median(t)  # (each mode's first step after a switch carries the other's pending work)
        # Drained: the eager run's steps pass work on to the next one, the last one waited for -- their mean, less
        # the first (it carries the switch's one-time costs besides compilation, 40-60 ms on the MLP's step:
        # kernels loaded from the persistent cache). Steps between the first and the last that took over twice the
        # median are left out: such a spike is a one-time cost -- a new shape's kernels, outside JAX's compile
        # events (20-40 ms among the detector's 5 ms steps) --, and one in four steps swung the mean to 13 ms,
        # choosing its 9 ms clusters for 50 steps (capped at twice the median, it still swung it past them).
        # Alternating steps (a, b) stay within it (a + b), and the last step, carrying the drained work, counts.
        limit = 2.0 * statistics.median(t[1:])
        return statistics.fmean([s for s in t[1:-1] if s <= limit] + [t[-1]])
