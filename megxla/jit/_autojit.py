"""Auto-jit: eager code compiled cluster by cluster, with no decorator (``megxla.config.auto_jit = True``).

While it is on, an op issued eagerly is not dispatched: the collector (``_collect``, installed as core's
``_lazy.COLLECT``) infers its output shapes and dtypes (cached per op and input types, so a bad shape raises at the
user's line, as in eager), appends ``(op, input ids, output ids)`` to the calling thread's pending *cluster* and
returns Tensors holding :class:`~megxla.core._lazy.Lazy` data. The cluster runs where the program needs a value
(a *cut*):

* a host read (``.item()``, ``.numpy()``, ``bool``/``int``/``float``, printing, a NumPy conversion);
* an op that cannot be compiled with static shapes (``cond_take``, ``nonzero``, boolean-mask indexing: any op
  whose output shape depends on values), a cross-process collective or a device transfer -- it runs eagerly
  between clusters, as TF keeps such ops outside its clusters;
* the end of ``opt.step()`` (the natural end of a step; the cut is made at the next op, so that
  ``opt.clear_grad()`` right after it drops the gradients from the cluster's results);
* a ``trace`` / ``xla_trace`` / ``exclude_from_trace`` starting (they run as themselves, on concrete values);
* a size cap (``MAX_OPS`` ops, ``MAX_INPUT_BYTES`` of inputs held).

A cluster is data -- the same ``(op, inputs, outputs)`` records as a trace -- and is compiled the same way
(``_recording.make_replay`` inside ``_spmd.jit``): one compiler. Its cache key is what defines the executable:
the op sequence with parameters, the input shapes/dtypes and which results are still referenced when it runs
(a result nobody holds any more is not computed for the host: XLA fuses it away). Policy (TF's, see
``../shared/notes/auto-jit-anchors.md``): a cluster of fewer than ``MIN_OPS`` ops runs op by op; the first big
cluster of a site compiles at once (one compilation instead of one per op on the way to the first step); any
other new key runs op by op and compiles when it recurs; a site (the user's line of the cut) whose keys do not recur
(``KEY_LIMIT`` new keys with fewer than one hit per 8 keys) or whose executables are not reused (TF's rule: past 10
compiles, fewer than 50 runs per compile) warns once, naming the line, and compiles nothing more there (what it
compiled keeps running, new keys run op by op) -- never a compile storm.
A site whose clusters change every step in only some of their ops (those touching a count read on the host: the
loss over ``cond_take``'s selection and its gradient) runs them in parts: the unchanging ops -- the network's backward,
the optimizer -- compiled once for every count, the changing ones apart (*clusters in parts* below).
Running op by op uses the ops' eager kernels, so a cluster that is not compiled computes exactly what eager does.

Results equal eager's up to XLA's fusion reordering; random draws are the same (the key is an ordinary value);
GradManager semantics are untouched (it tapes the collected ops as eager ones: ``_dispatch.apply`` calls it).
"""
from __future__ import annotations

import bisect
import collections
import contextlib
import functools
import gc
import itertools
import math
import os
import sys
import threading
import time
from time import perf_counter as _perf_counter
import warnings
import weakref

import jax
import numpy as np  # noqa: F401  (the docstring examples use it)

from ..core import _dispatch, _interrupt, _lazy, _op, _spmd
from ..core.ops import elemwise as _E, indexing as _I, reduction as _R, shape as _S
from ..core._elemwise_front import SCALAR_VIDS as _SCALAR_VIDS
from ..core._lazy import Lazy
from ..core._tensor import Parameter, Tensor as _Tensor
from ..core._op import SEQUENCE as _SEQUENCE, VJP as _VJP, check_output_size
from ..core._spmd import MeshRequired
from . import _device_checks, _kept_constants, _kernels_ahead, _padded, _persist, _schedules, _tiers
# (_change: read here by the tests)
from ._cluster_change import _change, _signature, _site_change  # noqa: F401
from ._mode_timer import _COMPILE_SECS, _KERNEL_SECS, ModeTimer
from ._value_ranges import _RANGE_RULES
from ._recording import _TRACER_ERRORS, describe_where, make_replay, usable_donations, user_line, user_where

__all__ = ["enable", "enabled", "clustered", "auto_jit_stats", "reset_auto_jit_stats", "MIN_OPS", "MAX_OPS", "KEY_LIMIT", "MAX_COMPILES"]

MIN_OPS = 4  # a smaller cluster is not worth a launch: it runs op by op (TF's --tf_xla_min_cluster_size)
FIRST_SIGHT_OPS = 16  # a site's first cluster of at least this many ops compiles at once
SETTLED_HITS = 8  # ... and so does a new one where its keys had recurred this often since the last new one
MAX_OPS = 4096  # the size cap: a longer cluster is cut (a loop with no read and no optimizer step)
# the size cap of the clusters after one the cap cut (a loop with no read, e.g. an evaluation keeping its outputs):
# XLA CPU keeps per-op state for each op of an executable (a ResNet-18's 4096-op cluster, ~24 forwards unrolled,
# held 3.4 GB after its first run; 1024 ops: 0.9 GB) and compiles it longer, for no faster steps
LOOP_MAX_OPS = 1024
# ... and the input cap: the arrays a cluster takes in stay alive until it runs (an inference loop that appends
# its outputs and never reads would otherwise keep every batch it was given)
MAX_INPUT_BYTES = 1 << 30
# The first ops (``_op_sig``, and whether a GradManager recorded) of clusters the size cap cut: a loop with no read
# (a diffusion model's sampling over its timesteps, run after each read of its result) starts each call with a
# cluster capped at MAX_OPS, then the ones after it at LOOP_MAX_OPS: the first, 4,325 ops, compiled for 22 s where
# the others' 1,024-op executable would serve it (MegDiffusion's sampling loop). A cluster starting as such a one did
# is capped at LOOP_MAX_OPS from the start. (A training step, begun while its GradManager records, is not taken for
# an evaluation loop without one over the same model.)
_capped_starts: dict = {}
# A cluster with this many scalar (0-d) inputs -- a loop's Python numbers, one input per use -- is compiled with
# XLA's quick options only (_compile): XLA:CPU's optimizing compile of such a program is superlinear in them
QUICK_SCALARS = 512
KEY_LIMIT = 16  # new keys a site may make without recurring before it runs eagerly for good (Dynamo's: 8)
MAX_COMPILES = 64  # executables one site may compile (TF marks a cluster megamorphic past 10 rarely reused ones)
CACHE_SIZE = 128  # executables kept (least recently used dropped)
DONATE = True  # donate inputs only the cluster holds (off: a debugging switch)
# Cut at the start of ``gm.backward`` (the forward runs while the backward is collected): off, as measured on the
# CPU (docs/design.md: XLA CPU runs the two pieces slower than the whole step); a switch for a GPU, where the host
# can run ahead of the device: MEGXLA_AUTO_JIT_CUT_BACKWARD=1 (``benchmarks/eager_loop.py --cut-backward``)
CUT_AT_BACKWARD = os.environ.get("MEGXLA_AUTO_JIT_CUT_BACKWARD") == "1"
# MEGXLA_AUTO_JIT_LOG=1: a line on stderr for every compilation -- where the cluster was cut, its size, the time it
# took and, for a site's later ones, what changed since its previous cluster (PyTorch/XLA's "compilation cause",
# ``TORCH_LOGS=recompiles``): the user learns why a loop keeps compiling before it gives up
LOG = os.environ.get("MEGXLA_AUTO_JIT_LOG") == "1"
# A GradManager's backward collected as one ``sequence`` op (GradManager._grouped, _collect_steps); off: each
# gradient op applied and collected on its own (the same cluster either way: a debugging and measuring switch)
GROUP_BACKWARD = os.environ.get("MEGXLA_AUTO_JIT_GROUP_BACKWARD", "1") != "0"
_PAD_SELECT = _padded.P.pad_select
_CHECK_VJP = False  # (tests) check the untraced output types of gradient ops against their trace

_ON = [False]
_getrefcount = sys.getrefcount
_gc_isenabled, _gc_disable, _gc_enable = gc.isenabled, gc.disable, gc.enable
# No garbage collection while any thread changes a cluster (see _collect). Threads count themselves in and out
# under a lock: with a bare isenabled/disable/enable per thread, the first thread out switched the collector back on
# while another was still inside (a ``__del__`` using tensors then ran there: IndexError, or an op lost).
# (~0.25 us per collected op, bound acquire/release being the cheapest form of the lock)
_gc_lock = threading.Lock()
_gc_acquire, _gc_release = _gc_lock.acquire, _gc_lock.release
_gc_inside = [0, False]  # threads (and nested calls) inside; whether the collector was on when the first came in


def _gc_pause():
    _gc_acquire()
    if not _gc_inside[0]:
        on = _gc_inside[1] = _gc_isenabled()
        if on:
            _gc_disable()
    _gc_inside[0] += 1
    _gc_release()


def _gc_resume():
    _gc_acquire()
    n = _gc_inside[0] = _gc_inside[0] - 1
    if not n and _gc_inside[1]:
        _gc_enable()
    _gc_release()


# A collected op leaves ~7 objects the cyclic collector tracks (its Lazy, Tensor, holder list and weak reference,
# its record's tuples) until its cluster runs, when reference counting frees them. A step of a few hundred ops
# passed the collector's first threshold (700) at every step: a young-generation pass over them each time (~0.12 ms)
# and a full pass every 100 (~60 ms with a model's objects) -- 0.2-0.25 ms of the Transformer's 3.4 ms step of host
# time (6-7%; eagerly no pass at all: its tensors die as they go). While auto-jit is on, that threshold is at least
# GC_YOUNG (the older generations' as they were): a step's placeholders die before a pass. A program's own higher
# threshold stays; the one it had comes back when auto-jit is switched off (unless it was changed meanwhile).
GC_YOUNG = int(os.environ.get("MEGXLA_AUTO_JIT_GC_YOUNG", "10000"))
_gc_saved = [None]  # the program's first threshold while auto-jit raised it


def _gc_young(on):
    """Raise the collector's first threshold to ``GC_YOUNG`` while auto-jit is on; restore it when off.

    Example:
        >>> import gc
        >>> gc.get_threshold()[0] >= GC_YOUNG or not enabled()  # (``enable`` calls it)
        True
    """
    t = gc.get_threshold()
    if on:
        if _gc_saved[0] is None and 0 < t[0] < GC_YOUNG:
            _gc_saved[0] = t[0]
            gc.set_threshold(GC_YOUNG, *t[1:])
    elif _gc_saved[0] is not None:
        if t[0] == GC_YOUNG:
            gc.set_threshold(_gc_saved[0], *t[1:])
        _gc_saved[0] = None

_config = jax.config
_prod = math.prod
_MISSING = object()
_new = object.__new__
_ref = weakref.ref
# The concrete types found to be jax Arrays (a set lookup: ~0.3 us less than ``isinstance(x, jax.Array)``). Not
# ``type(jnp.zeros(()))`` at import: that starts JAX's backend, before ``dist.launcher`` has set the devices up
_ARRAY_TYPES: set = set()
_interrupt_enter = _interrupt.enter
_vids = _dispatch._vids


class _Stats:
    def __init__(self):
        self.clusters = 0  # clusters run
        self.changed = set()  # sites whose clusters changed (what ``changes`` reports: since the last reset)
        self.ops = 0  # ops collected
        self.compiled = 0  # executables compiled
        self.compile_time = 0.0
        self.hits = 0  # clusters run by a cached executable
        self.eager = 0  # clusters run op by op (small, not yet recurred, or at a megamorphic site)
        self.eager_cluster_ops = 0  # the ops of those
        self.small_cluster_ops = 0  # of those, the ops of clusters under MIN_OPS (not worth a launch)
        self.eager_steps = 0  # steps run eagerly (no collection) because that has been faster (see ModeTimer)
        self.peeks = 0  # host reads of a pending value computed by itself, the cluster not cut (_Cluster.peek)
        self.eager_reads = 0  # a loop's iterations run eagerly from one host read to the next (see _read_site)
        self.eager_ops = 0  # ops run outside clusters (data-dependent shapes, collectives, transfers, varying ops)
        self.split = 0  # clusters run in parts (their site's clusters keep changing in a few ops)
        self.chunked = 0  # repetitive clusters run in chunks (see _chunk_size)
        self.launched = 0  # clusters launched early (before their last op was collected)
        self.early = 0  # of those, whose results were taken (the cluster was the guessed one)
        self.early_missed = 0  # launched early and dropped (the cluster was another)
        self.early_compiled = 0  # non-donating executables compiled for early launches
        self.device_checks = 0  # index range checks computed in their clusters instead of read (_device_checks)
        self.cuts = collections.Counter()  # (reason, site) -> count
        self.setup_reads = collections.Counter()  # site -> host-read cuts there before the thread's first step end
        self.megamorphic = []  # sites that gave up compiling


_stats = _Stats()


def _count_cut(reason, site):
    _stats.cuts[(reason, site)] += 1
    if reason == "host read" and not _local.steps:  # (a model's construction, data preparation: no step yet)
        _stats.setup_reads[site] += 1


def auto_jit_stats() -> dict:
    """What auto-jit did so far: clusters run, compilations, cache hits, and the lines that cut clusters.

    Returns:
        a dict: ``clusters``, ``ops`` (collected), ``compiled``, ``compile_time`` (s), ``cache_hits``,
        ``eager_clusters`` (run op by op), ``eager_steps`` (training steps run eagerly, without collecting,
        because their clusters kept running op by op and eager was faster), ``eager_reads`` (iterations of a loop
        with no training step run eagerly from one host read at a line to the next, where that was faster),
        ``peeks`` (host reads of a small value a few exact ops compute from the cluster's inputs -- a count in an
        image's info --, computed by themselves: no cut), ``eager_ops`` (ops kept out of
        clusters, and small groups of changing ops), ``split_clusters`` (clusters run in parts: their site's
        clusters keep changing in some ops, which run apart from the others), ``chunked_clusters`` (long clusters
        repeating a loop's body, run as chunks of whole bodies: one small executable), ``device_checks``
        (index range checks computed inside their clusters rather than read on the host, see ``_device_checks``),
        ``early_launches`` (clusters run by an executable launched before their last op was collected: a
        recurring small step's compute overlaps its Python), ``early_misses`` (launched early, then dropped: the
        cluster was another) and ``early_compiled`` (their executables, not counted in ``compiled``), ``cuts`` (a
        list of ``(count, reason, "file:line (`source`)")``, most frequent first), ``setup_reads`` (of the host
        reads among them, those made before the first ``opt.step()``: ``{"file:line (`source`)": count}``),
        ``tiered`` (large clusters compiled quickly first, while XLA's optimized executable compiles in the
        background) and ``tier_ups`` (of those, replaced by
        their optimized executable), ``quick_only`` (clusters of so many scalar inputs that only XLA's quick
        compile is bounded, run from that executable), ``schedules_timed`` (long-running programs, ``xla_trace``'s
        too, whose executable was timed against the other instruction schedule of XLA:CPU, see ``_schedules``) and
        ``other_schedule`` (of those, now running the other), ``megamorphic`` (the lines that made too many
        different clusters and run eagerly, or mostly op by op) and ``changes`` (``("file:line (`source`)",
        what changed)`` for each line whose clusters changed since the last reset: how its latest new cluster
        differs from the one before -- its first op that differs, in words --, the reason a cluster there compiled
        or ran op by op again). ``MEGXLA_AUTO_JIT_LOG=1`` prints a line for every compilation, with what changed.

    Example:
        >>> from megxla.jit import auto_jit_stats
        >>> sorted(auto_jit_stats())[:3]
        ['cache_hits', 'changes', 'chunked_clusters']
    """
    s = _stats
    return {"clusters": s.clusters, "ops": s.ops, "compiled": s.compiled, "compile_time": s.compile_time,
            "cache_hits": s.hits, "eager_clusters": s.eager, "eager_steps": s.eager_steps,
            "eager_reads": s.eager_reads, "peeks": s.peeks,
            "eager_ops": s.eager_ops, "split_clusters": s.split, "chunked_clusters": s.chunked,
            "early_launches": s.early, "device_checks": s.device_checks,
            "early_misses": s.early_missed, "early_compiled": s.early_compiled,
            "tiered": _tiers.stats["tiered"], "tier_ups": _tiers.stats["upgraded"],
            "quick_only": _tiers.stats["quick_only"],
            "schedules_timed": _schedules.stats["probed"], "other_schedule": _schedules.stats["other"],
            "cuts": [(n, reason, describe_where(site)) for (reason, site), n in s.cuts.most_common()],
            "setup_reads": {describe_where(site): n for site, n in s.setup_reads.items()},
            "megamorphic": [describe_where(site) for site in s.megamorphic],
            "changes": [(describe_where(site), change) for site, st in _sites.items()
                        if site in s.changed and (change := _site_change(st)) is not None]}


def reset_auto_jit_stats():
    """Zero the counters of :func:`auto_jit_stats` (the compiled executables stay cached).

    Example:
        >>> from megxla.jit import reset_auto_jit_stats, auto_jit_stats
        >>> reset_auto_jit_stats(); auto_jit_stats()["clusters"]
        0
    """
    global _stats
    _stats = _Stats()
    _tiers.stats.update(dict.fromkeys(_tiers.stats, 0))
    _schedules.stats.update(dict.fromkeys(_schedules.stats, 0))


@contextlib.contextmanager
def compiling_everything():
    """(For tests and fuzzers) Every cluster compiled at first sight, whatever its size, and no peeks (a read of an
    exact op's value computed by its eager kernel, the cluster left pending): what a check of auto-jit against
    eager then compares is the compiled cluster, not the op-by-op fallback. Call sites start afresh (each check
    its own compile budget). The caller switches ``config.auto_jit``; the sizes come back on exit.

    Example:
        >>> from megxla.jit import _autojit
        >>> with _autojit.compiling_everything():
        ...     _autojit.MIN_OPS
        1
        >>> _autojit.MIN_OPS
        4
    """
    global MIN_OPS, FIRST_SIGHT_OPS, PEEK_OPS
    saved = MIN_OPS, FIRST_SIGHT_OPS, PEEK_OPS
    MIN_OPS = FIRST_SIGHT_OPS = 1
    PEEK_OPS = 0
    _sites.clear()
    _warned_lines.clear()
    try:
        yield
    finally:
        MIN_OPS, FIRST_SIGHT_OPS, PEEK_OPS = saved


# ---- shapes ---------------------------------------------------------------------------------------------------
_SHAPES: dict = {}  # (op, input avals) -> output avals, or None: the op is not collected with such inputs
# NOTE: past SHAPES_KEPT entries the table is retired whole (_RETIRED_SHAPES) rather than grown: a parameter new
# every step (an annealed dropout rate) added entries -- and kept their ops alive -- for good. A retired entry asked
# for again comes back (_infer), so a working set smaller than the table is never inferred twice.
SHAPES_KEPT = 16384
_RETIRED_SHAPES: dict = {}
# Ops found to be cross-process collectives (their shape inference needs an SPMD program): one whose inputs are all
# concrete -- a fully sharded unit's parameter gather, its block read from the module -- runs eagerly where it is
# issued *without* cutting the pending cluster, which reads its result as an input. It depends on no pending value,
# so running it before them changes no value, and every rank still issues its collectives in program order (the
# reason collectives stay out of clusters: docs/design.md). A fully sharded Transformer's forward was cut at every
# gather: 69 clusters a step, most too small to compile, slower than eager.
_CROSS_PROCESS: dict = {}


def _forward_known(key):
    """Whether the op and input types in ``key`` were collected (in the table, or its retired one)."""
    return _SHAPES.get(key, _RETIRED_SHAPES.get(key)) is not None


def _infer(op, key, inputs):
    """Output avals ``((shape, dtype, weak_type), ...)`` of ``op`` for the input avals in ``key``, or None where
    the op cannot be part of a cluster. Bad input raises here, at the user's line, with eager's error."""
    res = None
    retired = _RETIRED_SHAPES.pop(key, _MISSING)
    if retired is not _MISSING:
        _SHAPES[key] = retired
        return retired
    params = dict(op.params)
    fwd = params.get("op") if op.prim is _VJP else None
    if fwd is not None and fwd.prim.grad is None and _forward_known((fwd, key[1][:params["nin"]])):
        # The gradient of an op JAX differentiates, whose forward was collected with these inputs (static shapes, no
        # collective): one cotangent per input in ``wrt``, of that input's type (GradManager asks only for float
        # inputs). Not traced here: tracing it means linearizing the forward, which the cluster's compilation does
        # anyway (the forward and its gradient are paired there) -- twice the cost on the way to a first step.
        res = tuple(key[1][i] for i in params["wrt"])
        if _CHECK_VJP:
            structs = [jax.ShapeDtypeStruct(s, d, weak_type=w) for s, d, w in key[1]]
            out = op.nested_kernel.eval_shape(*structs)
            want = tuple((tuple(o.shape), o.dtype, bool(getattr(o, "weak_type", False))) for o in out)
            assert want == res, (op, want, res)
    # Transfers stay out, and so do compiled graphs (``trace``/``partial_trace`` steps and their gradients: they
    # run as themselves, already compiled; held here, they would also outlive their owner's cache)
    elif op.transient or (op.prim.eager_kernel is not None and params.get("device") is not None):
        pass
    elif (known := _persist.known_shapes(op, key[1]))[0]:
        res = known[1]  # (a process with this source traced it before: a warm start skips tracing the op)
    else:
        mesh = False
        try:
            structs = [jax.ShapeDtypeStruct(s, d, weak_type=w) for s, d, w in key[1]]
            k = op.nested_kernel
            # (the jitted eager kernel's own trace: kept by JAX, the cluster's compilation reuses it)
            out = k.eval_shape(*structs) if hasattr(k, "eval_shape") and hasattr(k, "lower") else \
                jax.eval_shape(op.fn, *structs)
            check_output_size(op, out)
            if op.prim.lowering_may_reject and hasattr(k, "lower"):
                try:
                    k.lower(*structs)
                except Exception:  # (the op runs eagerly: its own error, at its own line)
                    out = None
        except _TRACER_ERRORS:
            out = None  # its output shape depends on values: run it eagerly
        except MeshRequired:
            out, mesh = None, True  # a cross-process collective: run it eagerly
            if not op.transient:
                if len(_CROSS_PROCESS) >= 1024:
                    _CROSS_PROCESS.clear()
                _CROSS_PROCESS[op] = True
        except RecursionError as exc:
            if not _interrupt.unstick(exc):
                raise
            return _infer(op, key, inputs)  # (a JAX cache an interrupt broke earlier, cleared: core/_interrupt.py)
        except (TypeError, ValueError, IndexError) as exc:
            raise _dispatch.op_error(op, inputs, exc) from None
        if out is not None:
            flat = out if op.multiple_results else (out,)
            res = tuple((tuple(o.shape), o.dtype, bool(getattr(o, "weak_type", False))) for o in flat)
        if not mesh:  # (whether a collective spans processes depends on the run, not on the op)
            _persist.keep_shapes(op, key[1], res)
    if op.transient:
        return None  # (not cached: the key would keep the op alive)
    if len(_SHAPES) >= SHAPES_KEPT:
        _RETIRED_SHAPES.clear()
        _RETIRED_SHAPES.update(_SHAPES)
        _SHAPES.clear()
    _SHAPES[key] = res
    return res


class _Uncollectable(Exception):
    """(``_collect_steps``) a step of a ``sequence`` op cannot be part of a cluster: its steps are applied one by
    one (``_expand``)."""


def _expand(op, inputs):
    """A ``sequence`` op that cannot be collected whole (a step's output shape depends on values, or it is a
    collective): its steps applied one by one -- each collected or run eagerly on its own, as the ops it stands for
    would be."""
    params = dict(op.params)
    return _op.run_steps(params["steps"], params["outs"], inputs, _dispatch.apply)


# ---- clusters -------------------------------------------------------------------------------------------------
class _Entry:
    __slots__ = ("executable", "seen", "site", "sig")

    def __init__(self, site, key):
        self.executable = None
        self.seen = 0
        self.site = site  # its site's counters
        self.sig = key[:3]  # (ops, input types, results): one object per key, what a _Guess compares by identity


def _megamorphic(st, site, reason, what=None):
    """Warn once that ``site``'s clusters keep changing. ``what`` happens to them now; by default the site gives up
    compiling (new keys run op by op for good)."""
    if what is None:
        st[0] = -1
        what = "new ones run eagerly from now on"
    if site not in _stats.megamorphic:  # (a site split first -- told once -- may give up compiling later)
        _stats.megamorphic.append(site)
    if site[:2] in _warned_lines:
        return  # (once per line: a line run in parts may have a changing part give up after the split was told)
    _warned_lines.add(site[:2])
    change = _site_change(st)
    change = f" (the last two: {change})" if change else " (shapes or Python numbers that change every step?)"
    # (at the user's line, as its text says: called at several depths, under a cut made at any depth, a stack
    # level named a line of this file -- filters by module or line did not match)
    warnings.warn_explicit(
        f"auto-jit: the clusters cut at {describe_where(site)} ({reason}) keep changing{change}; {what}. "
        f"Pad to fixed shapes, or pass changing numbers as tensors, to have them compiled (megxla.jit."
        f"auto_jit_report() lists every such line)", UserWarning, site[0], site[1])


# ---- early launch ---------------------------------------------------------------------------------------------
# A small step's cluster is collected in full before it runs: the step's Python (the backward's tape walk, the
# optimizer's loop over parameters) and its compute add up, where ``xla_trace`` runs the compute while the host goes
# on (the MLP's step: 0.7 ms of collection, then 1.4 ms of compute). A cluster that recurs -- the same ops from the
# same first op, three times in a row, the same Tensors read after some point (parameters, slots, the cached
# constants) -- is launched early: once its last new input (the step's batch, its labels) has been read, its
# executable runs on the inputs read so far and the current values of the Tensors it read last time, while the rest of
# the step is collected. Each op collected after the launch must be the guessed one and each input read after it the
# very value launched with (the same value id and array); the cut takes the launched run's results only then, any
# difference drops it (the cluster runs as usual). The launched executable donates nothing (a dropped run must leave
# every input as it was): a second, non-donating executable per such cluster. A guess that keeps missing (more
# than 2 + hits/8) is dropped for good. MEGXLA_AUTO_JIT_EARLY=0 turns it off.
EARLY = os.environ.get("MEGXLA_AUTO_JIT_EARLY", "1") != "0"
EARLY_MAX_BYTES = 1 << 28  # nor where their inputs, kept alive through the run (no donation), are large
EARLY_MIN_AHEAD = 2  # ops still to collect after the launch, at least
EARLY_MIN_SHARE = 0.05  # nor where collecting the cluster takes less of its step (MLP 0.8, ConvNet b64 0.07 on 2 cores)
# The launch's executable is a second compile of the cluster's program. Where the first took over EARLY_BUY_NOW
# seconds (cold: from JAX's cache, as long as it took once), the second waits until the cluster's runs have taken
# EARLY_RENT times as long (rent, then buy, as the schedule choice's: _schedules): a small ConvNeXt's 143-op step,
# 20-30 ms a step, stalled 4.5 s at its fifth step -- as long as its own compile -- to gain at most its collection's
# share of each step, a script of a few hundred steps never paying it back. The benchmarks' small steps compile in
# 0.4-1.3 s cold on 2 cores (MLP, ConvNet b8, the host-read and detection steps), and launch early from their fourth
# step as before. Where megxla keeps the launch's program (``_persist``: a process compiled it), JAX's cache likely
# holds its executable: compiled at once too. Until its rent is paid a guess launches early all the same, with no
# compile: the cluster's own donating executable, on copies of the inputs it donates (``_OnCopies``; the guess's
# timer weighs the copies too: ConvNet b8's 47 arrays, 2.6 MB, took 0.2-0.5 ms a step, the MLP's 5.4 MB up to 1 ms).
EARLY_BUY_NOW, EARLY_RENT = 2.0, 4.0


class _Guess:
    """The cluster that started with the same first op the last times (``sig``: ops, input types, results), the
    Tensors it read (``refs``), and once planned its early launch: the op after which it launches (``launch_at``),
    the inputs read by then (``bound``), the non-donating executable."""

    __slots__ = ("sig", "refs", "runs", "off", "executable", "ops", "in_avals", "out_pos", "launch_at", "bound",
                 "hits", "misses", "timer", "eager_steps", "site", "same", "made", "predicted", "late", "precision",
                 "cut_at", "wide", "ran", "kept", "unpaid")

    def __init__(self, sig, refs):
        self.sig, self.refs = sig, refs
        self.runs = self.hits = self.misses = 0
        self.site = _local.last_hit  # (its hits count the runs taken from early launches too: the megamorphic rule)
        self.made = None  # slot -> its Tensor's place among the latest host-made ones at the cluster's start (-1: the
        # latest), last time
        self.predicted = None  # slot -> that place, for the inputs an early launch at the first op takes from there
        self.off = not EARLY
        self.executable = None
        self.precision = None  # (the matmul precision its executable was planned under)
        self.cut_at = _perf_counter()  # when its cluster was last cut (while its early launch is not planned)
        self.wide = 0  # the cuts in a row since which collecting the cluster took EARLY_MIN_SHARE of the interval
        self.ran = 0.0  # seconds from cut to cut of its cluster's runs so far (the rent: EARLY_RENT)
        self.kept = None  # whether JAX's cache holds the launch's program (None: not asked yet)
        self.unpaid = None  # (ops, avals, in_ids, out_ids) of a launch on copies, compiled once its rent is paid

    def plan(self, ops, avals, in_ids, out_ids, same, made):
        """Where to launch: after the op reading the last input that was not the same Tensor both times -- or after
        the first op, where those inputs were the same latest Tensors made from host data both times (``made``:
        slot -> place among them): a step's batch and labels, made just before it."""
        self.off = True  # (unless planned below)
        slot = {lid: k for k, lid in enumerate(in_ids)}
        first_read = [len(ops)] * len(in_ids)
        for k, (_, ids, _) in enumerate(ops):
            for lid in ids:
                s = slot.get(lid)
                if s is not None and first_read[s] > k:
                    first_read[s] = k
        fresh = [first_read[s] for s in range(len(in_ids)) if not same[s]]
        launch_at = max(fresh) + 1 if fresh else 1
        nbytes = sum(_prod(avals[i][0]) * avals[i][1].itemsize for i in in_ids)
        if len(ops) - launch_at < EARLY_MIN_AHEAD or nbytes > EARLY_MAX_BYTES:
            return
        # (kept by the cluster's key, not by this guess: the guess of a thread started later, or one made again after
        # another cluster with the same first op took its place -- a loop's body and the step around it -- finds it)
        key = self.sig + (_config.jax_default_matmul_precision,)
        exe = _early.get(key)
        if exe is None and not self._rent_paid(ops, avals, in_ids, out_ids):
            # (its rent not paid yet: the cluster's own executable, on copies of what it donates -- no compile)
            exe = _on_copies(self.sig, key[-1], avals, in_ids, out_ids)
            if exe is None:
                self.off = False  # (planned at a later run)
                return
            if type(exe) is _OnCopies:
                self.unpaid = (ops, avals, in_ids, out_ids)  # (a cut's lists are its own: kept, not copied)
        elif exe is None:
            try:
                exe = _compile(ops, avals, in_ids, out_ids, (), None, "early launch")
            except Exception:  # (no early launch: the cluster runs as before)
                return
            if len(_early) >= CACHE_SIZE:  # (the oldest; pop: another thread's cluster may be planning too)
                _early.pop(next(iter(_early), None), None)
        if type(exe) is not _OnCopies:
            _early[key] = _early.pop(key, exe)  # (most recently planned last)
        self.executable = exe
        # (inputs are numbered in the order ops first read them: those read before the launch come first)
        self.ops, self.in_avals = self.sig[0], self.sig[1]
        self.out_pos = {lid: k for k, lid in enumerate(out_ids)}
        self.launch_at = launch_at
        self.bound = sum(1 for r in first_read if r < launch_at)
        self.same = same
        self.late = self.predicted = None
        fresh_later = [s for s in range(len(in_ids)) if not same[s] and first_read[s] >= 1]
        if launch_at > 1 and made is not None and all(made.get(s) is not None for s in fresh_later):
            self.late = (launch_at, self.bound)
            self.launch_at, self.bound = 1, sum(1 for r in first_read if r < 1)
            self.predicted = {s: made[s] for s in fresh_later}
        # (a warmup of 10: the first launched runs are slow -- their executable's first runs, a step timer's eager
        # probe between them --, and a comparison with them chose late launches where early ones were faster)
        # (both ways run the same program, so every process may choose for itself: same_numbers)
        self.timer, self.eager_steps = ModeTimer(warmup=2 * ModeTimer.PROBE, same_numbers=True), None
        self.off = False
        self.precision = key[-1]
        if self.site is not None:
            self.site[7] = True  # (its next keys compile once for both kinds of runs: _shared_early_key)

    def pay(self):
        """(Launched on copies) The launch's own executable, once the cluster's runs have paid its rent."""
        now = _perf_counter()
        self.ran += now - self.cut_at
        self.cut_at = now
        if self.ran < EARLY_RENT * (self.site[11] if self.site is not None else 0.0) or \
                _config.jax_default_matmul_precision != self.precision:  # (lowered under the precision planned for)
            return
        (ops, avals, in_ids, out_ids), self.unpaid = self.unpaid, None
        key = self.sig + (self.precision,)
        exe = _early.get(key)
        if exe is None:
            try:
                exe = _compile(ops, avals, in_ids, out_ids, (), None, "early launch")
            except Exception:  # (the copies go on)
                return
            if len(_early) >= CACHE_SIZE:
                _early.pop(next(iter(_early), None), None)
        _early[key] = exe
        self.executable = exe

    def _rent_paid(self, ops, avals, in_ids, out_ids):
        """Whether the launch's executable may be compiled now (see EARLY_RENT)."""
        seconds = self.site[11] if self.site is not None else 0.0  # (the site's latest compile)
        if seconds <= EARLY_BUY_NOW or self.ran >= EARLY_RENT * seconds:
            return True
        if self.kept is None:
            self.kept = _persist.kept(_persist.fingerprint(ops, in_ids, [avals[i] for i in in_ids], out_ids, (),
                                                           _PROGRAM_KIND))
        return self.kept

    def early(self):
        """Whether the cluster starting now (its first op the guess's) is followed and launched early. On a CPU
        the launched run shares the cores with the Python collecting the rest of the step: a step whose compute
        is a few large matmuls XLA spreads over every core ran no faster launched early (the MLP's: 1.83 against
        1.80 ms), one of many small ops 15-20% faster (ConvNet b8: 2.0 against 2.4 ms). A ModeTimer times the
        guess's steps both ways (from one start of its cluster to the next) and keeps the faster."""
        n, t = _stats.eager_steps, self.timer
        if n != self.eager_steps:  # (steps run eagerly since the last start: that interval times no mode)
            self.eager_steps = n
            t.last = None
            if t.calls <= t.warmup + t.PROBE:
                # After an eager stretch (a step timer's probe and its kernels' compilations) steps of either mode
                # run slower for 10-15 steps: before its first choice, the timer starts over past it, so that the
                # early steps compared are those right before the late ones (the MLP's late probe, right after such
                # a stretch, against early steps from before it compared the transient)
                t.warmup = t.calls + 2 * t.PROBE
                t.times = {True: [], False: []}
        mode = t.next_mode()
        if t.interval and not t.best and _shared:
            _donating_again(self.sig + (self.precision,))
        return mode

    def launch(self, cl):
        """Run the executable on the cluster's inputs so far and the guessed Tensors' current values; the
        :class:`_Launched` run, or None where the guess does not hold."""
        inputs, avals, in_avals = cl.inputs, cl.avals, self.in_avals
        if len(inputs) != self.bound or self.executable is None:
            return None
        refs, same, read = self.refs, self.same, cl.in_refs
        for s, lid in enumerate(cl.in_ids):
            if avals[lid] != in_avals[s]:
                return None
            # (an input read so far that was the same Tensor the last times is that one again: a first op like
            # ``x * 3`` -- the same record as the step's ``a * 2`` -- launched the step's run after a host read cut
            # the step there, a run the next op then dropped)
            if same[s] and (refs[s]() is None or refs[s]() is not read[s]()):
                return None
        args, vids, predicted, made = list(inputs), [], self.predicted, cl.made
        for s in range(self.bound, len(in_avals)):
            if predicted is not None and s in predicted:
                k = predicted[s]
                t = made[k]() if made is not None and -len(made) <= k else None
            else:
                t = refs[s]()
            if t is None:
                return None
            d = t._data
            if type(d) is Lazy:
                d = d.value
                if d is None:  # (pending: the guess does not hold)
                    return None
            if not isinstance(d, jax.Array) or _input_type(d)[0] != in_avals[s]:
                return None
            args.append(d)
            vids.append(t._vid)
        try:
            outs = self.executable(*args)
        except Exception:  # (e.g. _WontFit: the cluster runs as usual)
            return None
        _stats.launched += 1
        return _Launched(self, outs, args, vids)

    def missed(self):
        """A launched run was dropped: past 2 + hits/8 of them the guess launches no more. (One launched at the
        first op, on inputs taken from the latest host-made Tensors, launches after their reads from then on.)"""
        _stats.early_missed += 1
        if self.predicted is not None:
            self.predicted = None
            self.launch_at, self.bound = self.late
            return
        self.misses += 1
        if self.misses > 2 + self.hits // 8:
            self.off, self.executable, self.unpaid = True, None, None


class _Launched:
    """A guessed cluster's run, launched before its last op was collected."""

    __slots__ = ("guess", "outs", "args", "vids")

    def __init__(self, guess, outs, args, vids):
        self.guess, self.outs, self.args, self.vids = guess, outs, args, vids

    def same(self, slot, d, vid):
        """Input ``slot``, read after the launch, is the value launched with."""
        k = slot - self.guess.bound
        return k < len(self.vids) and self.vids[k] == vid and self.args[slot] is d

    def results(self, ops, inputs, out_ids):
        """The run's values of ``out_ids`` where the cluster cut is the guessed one in full, else None."""
        g = self.guess
        if len(ops) != len(g.ops) or len(inputs) != len(g.in_avals):
            return None
        pos, outs = g.out_pos, self.outs
        if not all(i in pos for i in out_ids):
            return None
        g.hits += 1
        _stats.hits += 1
        _stats.early += 1
        if g.unpaid is not None:
            g.pay()
        if g.site is not None:
            g.site[1] += 1
        return [outs[pos[i]] for i in out_ids]


# JAX gives the arrays one executable returns the same aval objects run after run (its output types), and a Python
# property read costs ~0.3 us: a cluster's input type, (shape, dtype, weak_type) and size, is looked up by the
# array's aval (its identity, the object kept with the entry) -- 1-2 us per input less, a step reads 20-60 of them
_TYPES: dict = {}  # id(aval) -> (aval, (shape, dtype, weak_type), bytes)
_TYPES_KEPT = 4096


def _input_type(data):
    """``((shape, dtype, weak_type), bytes)`` of a concrete array (a cluster's input).

    Example:
        >>> _input_type(jax.numpy.zeros((2, 3), "float32"))[1]
        24
    """
    aval = getattr(data, "aval", None)
    entry = _TYPES.get(id(aval))
    if entry is not None and entry[0] is aval:
        return entry[1], entry[2]
    shape, dtype = data.shape, data.dtype
    t = (shape if type(shape) is tuple else tuple(shape), dtype, bool(getattr(data, "weak_type", False)))
    nbytes = _prod(shape) * dtype.itemsize
    if aval is not None:
        if len(_TYPES) >= _TYPES_KEPT:
            _TYPES.clear()
        _TYPES[id(aval)] = (aval, t, nbytes)
    return t, nbytes


_early: dict = {}  # (ops, input types, results, matmul precision) -> the non-donating executable of early launches


class _OnCopies:
    """A cluster's donating executable, called on copies of the inputs it donates: an early launch's run before its
    rent is paid (``EARLY_RENT``). A dropped run leaves the originals as they were, as the non-donating executable's
    does, for a copy of the cluster's state a run -- where that second executable cost a compile as long as the
    first: ConvNet b8's took 2.05 s on a slow day, over ``EARLY_BUY_NOW``, and its steps launched nothing early for
    ~1,600 steps (1.17-1.41x ``xla_trace``'s step)."""

    __slots__ = ("executable", "donated")

    def __init__(self, executable, donated):
        self.executable, self.donated = executable, donated

    def __call__(self, *inputs):
        inputs, donated = list(inputs), self.donated
        for p, c in zip(donated, _copies(*[inputs[p] for p in donated])):
            inputs[p] = c
        return self.executable(*inputs)


# (one XLA program per list of types: a barrier's results are buffers of their own -- a copy --, where a bare
# ``x`` would be forwarded by JAX and ``jnp.copy`` folded away; 20 arrays in one call, ~0.1 ms on 2 cores)
_copies = jax.jit(lambda *xs: jax.lax.optimization_barrier(xs))


def _on_copies(sig, precision, avals, in_ids, out_ids):
    """The cluster ``sig``'s cached donating executable as an early launch's (:class:`_OnCopies`), or None."""
    for k, e in reversed(_cache.items()):  # (at a plan only)
        if k[4] == precision and (e.sig is sig or k[:3] == sig) and type(e.executable) is _with_zero:
            donated = usable_donations(k[3], [avals[i] for i in in_ids], [avals[i] for i in out_ids])
            return _OnCopies(e.executable, donated) if donated else e.executable  # (nothing donated: as it is)
    return None
EARLY_SHARED_BYTES = 1 << 26  # a key compiled once for its runs and its early launches: inputs up to 64 MB
_shared: dict = {}  # _early key -> (its cache entry, what compiles it donating) where one executable serves both


def _donating_again(key):
    """(A guess's timer chose to collect the whole cluster first) Its key's runs, served by the non-donating
    executable of its launches (``_shared_early_key``), get a donating one again: launched late for good, they
    would keep paying for fresh buffers (the MLP's step, 1.69 -> 1.80 ms). One compile, where sharing saved one."""
    rec = _shared.pop(key, None)
    if rec is None:
        return
    entry, ops, avals, in_ids, out_ids, donate, out_avals, reason = rec
    try:
        entry.executable = _compile(ops, avals, in_ids, out_ids, donate, out_avals, reason)
    except Exception:  # (the non-donating one keeps serving)
        pass


def _shared_early_key(st, key, ops, avals, in_ids, donate, whole, reason):
    """The ``_early`` key under which the cluster compiled now (``key``: its ``_run_keyed`` key) is compiled once,
    not donating, for its own runs and its early launches -- where its site launches clusters early already and
    it may launch early too (small enough) -- or None: compiled as it asks, donating. Its runs then keep the old
    values of its inputs until their Tensors let go of them (no in-place update): a bound on the inputs' size
    keeps that cheap."""
    if not (EARLY and whole and donate and st[7] and len(ops) < _tiers.MIN_OPS and reason != "size cap"):
        return None
    if len(_early) >= CACHE_SIZE or \
            sum(_prod(avals[i][0]) * avals[i][1].itemsize for i in in_ids) > EARLY_SHARED_BYTES:
        return None
    return key[:3] + (key[4],)


_warned_lines: set = set()  # (file, line) of the sites warned about
_cache: "collections.OrderedDict" = collections.OrderedDict()
# site -> [keys seen (-1: megamorphic, runs eagerly), hits, keys compiled, {cluster length: _Churn}, the first
# key's input types, (ops, avals) of the site's new cluster before the latest, and of the latest: what changed,
# for the user; whether one of its clusters launches early (_shared_early_key)]
_sites: dict = {}


def _is_array(x):
    """Whether ``x`` is a jax Array (its type remembered once it was)."""
    t = type(x)
    if t in _ARRAY_TYPES:
        return True
    if isinstance(x, jax.Array):
        _ARRAY_TYPES.add(t)
        return True
    return False


PEEK_SIZE, PEEK_OPS = 256, 16  # (see _Cluster.peek)


def _first_out(record):
    """The first result id of an op record (the key ``peek`` finds a value's op by)."""
    outs = record[2]
    return outs[0] if outs else -1
_PEEK_EXACT = frozenset([_I.getitem, _I.mask_count, _E.astype, _E.where, _S.reshape, _S.expand_dims, _S.squeeze,
                         _S.broadcast_to, _S.transpose, _S.full, _S.full_like, _S.concat, _S.stack,
                         _S.copy, _S.detach] + [_E.BINARY[k] for k in ("lt", "le", "gt", "ge", "eq", "ne",
                                                                        "logical_and", "logical_or", "logical_xor")]
                        + [_E.UNARY[k] for k in ("logical_not",) if k in _E.UNARY])
# (exact in integers only: a float arange is ``start + step * i``, which a fusion may contract. Integer reductions
# are exact in any order -- two's-complement addition and multiplication wrap the same whatever the grouping --, so
# the count a step normalises its loss by, ``int((labels != ignore).sum())`` on its input labels, is computed by
# itself: it cut the step between its forward and its loss, the forward's values the backward reads becoming
# outputs of a cluster of their own)
_PEEK_INTEGER = frozenset([_S.arange, _R.sum, _R.prod, _R.max, _R.min, _R.argmax, _R.argmin, _R.cumsum]
                          + [_E.BINARY[k] for k in ("add", "sub", "mul", "floordiv", "mod", "maximum", "minimum")]
                          + [_E.UNARY[k] for k in ("neg", "abs") if k in _E.UNARY])


# Rounded float arithmetic: a fused cluster may round it otherwise than its eager kernels (XLA makes ``a / b`` a
# multiplication by ``1 / b``, contracts ``a * b + c``), so the values a peek computes through one of these are
# *pinned*: each such op of the cluster becomes a copy of its peeked result, an input of the cluster -- the host,
# the value's Tensors and the ops on it see one number, eager's. PSPNet's adaptive pooling slices its input at
# ``ceil(arange(o, dtype="float32") * (n / o)).astype("int32")[i]``: constants, read on the host -- it cut the
# forward four times a step.
_PEEK_FLOAT = frozenset([_S.arange] + [_E.BINARY[k] for k in ("add", "sub", "mul", "truediv", "maximum", "minimum")]
                        + [_E.UNARY[k] for k in ("neg", "abs", "floor", "ceil", "round", "trunc") if k in _E.UNARY])
_PINNED = _S.copy.bind()  # (the record a pinned op becomes: its result, copied from the input holding it)
_NO_TENSOR = type(None)  # (``in_refs`` entry of a pinned value's input: no Tensor -- calling it gives None)


def _peekable(op, out_avals):
    """True where ``op``'s results, computed by its eager kernel, are the cluster's to the bit; "pin" where they may
    round otherwise (``_PEEK_FLOAT``); else False."""
    prim = op.prim
    if prim in _PEEK_EXACT:
        return True
    if prim in _PEEK_INTEGER and all(np.dtype(a[1]).kind in "iub" for a in out_avals):
        return True
    return "pin" if prim in _PEEK_FLOAT else False


_ONE_DEVICE: list = []  # [the process's one device], or [None]: it has several (the answer is cached)


def _default_devices():
    """The devices of what a cluster without inputs computes, where the process has one device (a CPU's): no
    committed input joining later can move the computation elsewhere (with a GPU, a CPU input would). Else None.

    Example:
        >>> _default_devices() is None or len(_default_devices()) == 1
        True
    """
    if not _ONE_DEVICE:
        local = jax.local_devices()
        _ONE_DEVICE.append(local[0] if jax.default_backend() == "cpu" and len(local) == 1 else None)
    return None if _ONE_DEVICE[0] is None else {_ONE_DEVICE[0]}


class _Cluster:
    """The calling thread's pending ops. Local ids number every value of the cluster: its inputs (concrete arrays
    of values made before it) and the outputs of its ops, in order."""

    def __init__(self):
        self.lock = threading.RLock()
        self.owner = threading.get_ident()  # the thread collecting into it (each thread has its own cluster)
        self.deferred = []  # Lazy values another thread's read computed: the owner swaps them in
        self.guesses = {}  # first op signature -> _Guess: the cluster that started that way the last times
        self.gen = -1  # how many times it was cut (``_cluster_now``): 0 once _clear has run
        self._pins, self._checks = None, ()  # (of the cluster running now: _take_and_run)
        self._clear()

    def _clear(self):
        self.gen += 1
        self.ops = []  # [(op, input ids, output ids)]
        self.avals = []  # local id -> (shape, dtype, weak_type)
        self.lazies = []  # the Lazy of every op output (a list: liveness is read from reference counts)
        self.inputs = []  # concrete arrays, in input order
        self.in_ids = []  # their local ids
        self.vmap = {}  # value id of an input Tensor -> local id
        self.in_bytes = 0  # bytes of the inputs
        self.pins = {}  # id(array) -> how many ``Lazy.previous`` lists hold it (not a reason to keep it)
        self.cut = None  # (reason, site) of a cut requested at the end of opt.step (made at the next op)
        self.first = None  # the first op and its input types (_op_sig): where a capped cluster ends
        self.start_key = None  # ... and whether a GradManager recorded then (_capped_starts)
        self.started = 0.0  # when its first op was collected (perf_counter)
        self.capped = False  # past a size cap: cut before the next op like the first
        self.after_cap = False  # the cluster before was cut by a size cap: capped at LOOP_MAX_OPS
        self.in_refs = []  # weak references to the Tensors the inputs were read from (what an early launch guesses)
        self.guess = None  # the _Guess this cluster has followed so far, op for op
        self.launched = None  # its _Launched run, while every op and input since the launch has matched
        self.made = None  # weak references to the latest Tensors made from host data when the cluster started
        self.made_at = None  # id of such a Tensor -> its place among them (-1: the latest)
        self.in_made = []  # each input's place among them (None: not one of them)
        self.placed = [0, 0, None]  # (devices) ops and inputs looked at so far, their one device set (False: not one)
        self.unpadded = {}  # local id of a selection's rows -> (the selection itself: its id, the pad_rows op)
        self.checks = []  # index range checks computed in the cluster, read as it runs (_device_checks.Check)
        self.cleared = []  # (weak ref to a parameter, its gradient's value from before the cluster): see grads_cleared

    def devices(self):
        """The set of the one device every value of the cluster will be on, known before it runs -- its inputs are
        all on that device and no op places a value (``device_put``, a ``device=`` parameter) -- else None (the run
        decides). ``Tensor.device`` reads it: ``F.zeros(shape, device=x.device)``, common in anchor and head code,
        cut the cluster at every step when it ran the cluster to ask its result's device."""
        with self.lock:
            seen = self.placed
            ops, inputs = self.ops, self.inputs
            for k in range(seen[0], len(ops)):
                # (``device=None`` places nothing: ``Tensor(t)``'s copy -- RIFE's step starts with
                # ``imgs = mge.Tensor(imgs)``, and its warp's ``str(flow.device)`` then cut the step every time)
                if any(name == "device" and value is not None for name, value in ops[k][0].params):
                    seen[2] = False
            seen[0] = len(ops)
            for k in range(seen[1], len(inputs)):
                if seen[2] is False:
                    break
                devs = getattr(inputs[k], "devices", None)
                devs = devs() if devs is not None else None
                if not devs or len(devs) != 1 or (seen[2] is not None and devs != seen[2]):
                    seen[2] = False
                elif seen[2] is None:
                    seen[2] = devs
            seen[1] = len(inputs)
            if seen[2] is None and ops:
                # (no input yet, nothing placed: values made from Python numbers alone -- ``F.arange``, a grid -- are
                # on the process's one device, where it has one: asked, ``F.stack``'s device check ran the cluster)
                return _default_devices()
            return seen[2] or None

    def follow(self):
        """(After each op while a guess is followed) the op just collected is the guess's next one, and where the
        guess's last new input has been read, its executable is launched."""
        g, ops = self.guess, self.ops
        n = len(ops)
        if n > len(g.ops) or ops[-1] != g.ops[n - 1]:
            self.unguess()
        elif n == g.launch_at:
            self.launched = g.launch(self)
            if self.launched is None:
                self.unguess()

    def unguess(self):
        """The cluster is not the guessed one (or its early launch failed): a launched run is dropped."""
        g = self.guess
        if self.launched is not None:
            self.launched = None
            g.missed()
        self.guess = None

    def swap_deferred(self):
        """(Owner thread) swap in the values another thread's read computed."""
        _swap_in(self.deferred)
        self.deferred = []

    def pin(self, data):
        """``data`` (an array a Tensor held before an in-place update) is kept to restore it if the cluster fails:
        that reference must not stop the array from being donated."""
        pins = self.pins
        pins[id(data)] = pins.get(id(data), 0) + 1

    def add_input(self, data, vid):
        i = len(self.avals)
        aval, nbytes = _input_type(data)
        self.in_bytes += nbytes
        self.avals.append(aval)
        self.inputs.append(data)
        self.in_ids.append(i)
        self.vmap[vid] = i
        return i

    def peek(self, z):
        """(``Lazy.force``) The value of pending ``z`` computed by itself, without running the cluster, where a few
        exact ops (``_PEEK_EXACT``: no rounding for XLA's fusion to change) compute it from the cluster's inputs --
        a box count in a data set's image info, a flag, a shape -- and it is small, and the cluster holds other ops;
        else None (a cut). Reading such a value cut the cluster there: a detector's step was cut at each image's
        ``gt[:info[i, 4]]``."""
        with self.lock:
            if z.cluster is not self or z.value is not None or math.prod(z.raw_shape) > PEEK_SIZE:
                return None
            ops, avals = self.ops, self.avals
            if self.checks and z.index >= ops[self.checks[0].at][2][0]:
                return None  # (made after an index check: it reaches the host once the cluster ran its checks)
            # (each value's op found by its id -- ids grow with the ops, each op's results a run of them --, not by
            # a walk back over the ops: an image's box count made 300 ops before its shape is asked for -- a head's
            # levels in between -- is found as soon as one made 3 ops before)
            need, seen, cone, leaves, pin = [z.index], set(), {}, [], []
            while need:
                i = need.pop()
                if i in seen:
                    continue
                seen.add(i)
                k = bisect.bisect_right(ops, i, key=_first_out) - 1
                if k < 0 or i not in ops[k][2]:
                    leaves.append(i)  # (an input of the cluster)
                    continue
                op, ins, outs = ops[k]
                exact = _peekable(op, [avals[j] for j in outs]) if len(cone) < PEEK_OPS else False
                # (a pinned result is kept as an input: small ones only -- a large one is the cluster's to compute)
                if not exact or (exact == "pin" and (len(outs) != 1 or math.prod(avals[outs[0]][0]) > PEEK_SIZE)):
                    return None
                if exact == "pin":
                    pin.append(k)
                cone[k] = ops[k]
                seen.update(outs)
                need.extend(ins)
            if len(cone) == len(ops):
                return None  # (the cluster is the value's ops: running it cuts nothing else)
            env = {}
            try:
                for i in leaves:
                    env[i] = self.inputs[self.in_ids.index(i)]
            except ValueError:  # (not an input either: no such value)
                return None
            cone = [cone[k] for k in sorted(cone)]
            gen = self.gen
            try:
                _run_ops_timed(cone, env, (z.index, *[ops[k][2][0] for k in pin]), None)
            except Exception:  # (its error, if any, is the cluster's, raised where it runs)
                return None
            if self.gen != gen:  # (a ``__del__`` the kernels' allocations ran read a value: the cluster ran meanwhile)
                return None
            if pin and not self._pin(pin, env):
                return None
            v = z.value = env[z.index]
            _stats.peeks += 1
            return v

    def _pin(self, positions, env):
        """(``peek``, lock held) The ops at ``positions`` -- rounded float arithmetic, one result each, computed
        by their eager kernels into ``env`` -- become copies of those results, inputs of the cluster (``_PEEK_FLOAT``).
        False where a result's type is not the op's (nothing pinned: the peek gives up, a cut)."""
        ops, avals = self.ops, self.avals
        values = [env[ops[k][2][0]] for k in positions]
        # (nor a weak type: a copy's result is not weak, and the ops collected on it were typed with one)
        if any(_input_type(v)[0] != avals[ops[k][2][0]] or avals[ops[k][2][0]][2] for k, v in zip(positions, values)):
            return False
        for k, v in zip(positions, values):
            out = ops[k][2]
            j = self.add_input(v, next(_vids))
            self.in_refs.append(_NO_TENSOR)
            self.in_made.append(None)
            ops[k] = (_PINNED, (j,), out)
            _SHAPES.setdefault((_PINNED, (avals[j],)), (avals[j],))
        if self.guess is not None:  # (inputs the guessed cluster did not read at this point)
            self.unguess()
        return True

    def flush(self, reason="host read", site=None):
        """Run the pending ops now (compiled or op by op) and give every Lazy still referenced its value."""
        held = False
        try:
            # Ctrl-C waits from the moment the cluster's lists are taken until its values are in their Tensors
            # (inputs are donated; a KeyboardInterrupt between taking the lists and running them lost the
            # cluster: parameters and slots left on values never computed), and while the collector's lock is held
            held = _interrupt_enter()
            _gc_pause()  # (no garbage collection meanwhile: see _collect)
            try:
                with self.lock:
                    try:
                        self._take_and_run(reason, site)
                    finally:
                        self._checks = ()  # (its Tensors go with the run)
            finally:
                _gc_resume()
        finally:
            if held:
                _interrupt.leave()

    def _take_and_run(self, reason, site):
        if self.cut is not None and site is None:
            reason, site = self.cut
        ops, lazies, avals, inputs, in_ids = self.ops, self.lazies, self.avals, self.inputs, self.in_ids
        first, in_refs, launched, in_made = self.first, self.in_refs, self.launched, self.in_made
        started, cleared = self.started, self.cleared
        self._pins = self.pins
        self._checks = checks = self.checks
        start_key = self.start_key
        self._clear()
        self.after_cap = reason == "size cap"
        if self.after_cap and start_key is not None:
            _capped_starts[start_key] = True
            if len(_capped_starts) > CACHE_SIZE:
                del _capped_starts[next(iter(_capped_starts))]
        if not ops:
            return
        plan = _local.kernel_plan
        if plan is not None and len(plan) < KERNEL_PLAN_CLUSTERS:
            plan.append((ops, avals, in_ids))
        # A Lazy is referenced by the list, the loop variable and getrefcount's argument: more means a Tensor
        # (or a GradManager's tape) still holds it, so the host may read it: a result of the cluster.
        # (references from ``previous`` lists -- kept to restore Tensors if the cluster fails -- do not count)
        live = [z for z in lazies if _getrefcount(z) > 3 + z.pins]
        out_ids = [z.index for z in live]
        _stats.clusters += 1
        _stats.ops += len(ops)
        values = None
        if launched is not None:
            values = launched.results(ops, inputs, out_ids)
            if values is None:
                launched.guess.missed()
            else:
                _count_cut(reason, site if site is not None else user_where())
            launched = None  # (its references to the inputs would keep them from being donated)
        loc = _local
        # (a held index check's read, too: the rest of a step cut there changes once the line's checks move inside)
        loc.after_mid_read, loc.mid_read = loc.mid_read, reason == "host read" and (
            bool(_dispatch.recorders) or _device_checks.reading_held())
        try:
            if values is None:
                hits, split = _stats.hits, _stats.split
                values = self._run(ops, avals, inputs, in_ids, out_ids, reason, site, in_refs)
                # (learnt from clusters run whole by a cached executable -- not from a churning site's parts --
                # below the tiered size: larger ones are compute-bound, no second executable for them)
                if _stats.hits > hits and _stats.split == split and len(ops) < _tiers.MIN_OPS and first is not None:
                    self.learn(first, ops, avals, in_ids, out_ids, in_refs, in_made, started)
        except _tiers.Interrupted:
            # (a signal -- Ctrl-C -- arrived while the cluster compiled: nothing of it has run, so it is given up
            # whole, and the flush's end delivers the signal -- at once, not when XLA's compile ends)
            self._abandon(live, inputs, in_ids, cleared)
            return
        except Exception as exc:
            # Run op by op, as eager did: what the ops before the failing one computed takes effect, the
            # values after it never exist, and the Tensors an in-place update bound to those go back to
            # their value before it. Then the error goes on (an error of the executable alone -- none
            # op by op -- is no error: the op-by-op values are the results).
            if type(exc) is _PartsFailed:  # (run in parts: continued op by op where it failed)
                env, error, exc = exc.env, exc.error, exc.__cause__
            else:
                # (and the values Tensors held before an in-place update: a failed cluster may give them back)
                env, error = self._eager_until_error(ops, inputs, in_ids, out_ids + [z.index for z in lazies if z.pins],
                                                     exc)
            if error is None:
                values = [env[i] for i in out_ids]
            else:
                # (an index check before the failing op found an entry out of range: eagerly that raised first)
                failed = _device_checks.first_failed(checks, lambda z: env.get(z.index)) if checks else None
                if failed is not None:
                    self._fail_at_check(failed, ops, inputs, in_ids, out_ids, live, lazies, cleared)
                self._fail(live, env)
                self._put_back_grads(cleared, env.get(_FAILED_AT, math.inf))
                # (one reading a failed collective's result: the error names the rank that failed, as eager's)
                named = _spmd.peer_failure(error)
                raise named from (None if error is exc and named is error else exc)
        if checks:
            place = {id(z): k for k, z in enumerate(live)}
            failed = _device_checks.first_failed(checks, lambda z: values[place[id(z)]])
            if failed is not None:
                self._fail_at_check(failed, ops, inputs, in_ids, out_ids, live, lazies, cleared)
        owner = threading.get_ident() == self.owner
        for z, v in zip(live, values):
            if z.pad is not None:  # (a padded selection: its Tensors keep the Lazy, see _padded)
                _padded.give(z, v)
                continue
            z.value = v
            z.previous = None  # (ran: nothing to restore; the old arrays may go)
            if owner:  # (_swap_in, written out: one pass over the values)
                for ref in z.holders:
                    t = ref()
                    if t is not None and t._data is z:
                        t._data = v
        if reason == "host read" and STATIC_TIMER and _ON[0] and owner:
            loc = _local
            if not loc.forced:
                _read_site(loc, len(ops))
        if not owner:
            # forced from another thread: only the owner rebinds its tensors (it may be rebinding one right
            # now, ``x._reset(y)``, and a write from here could put an older value back); it swaps these
            # in at its next op or cut, and until then reading one gives its value
            self.deferred.extend(live)

    def learn(self, first, ops, avals, in_ids, out_ids, in_refs, in_made, started):
        """A cluster ran by a cached executable: the same cluster a third time in a row at the start of the same
        first op, with the same Tensors read after some point, gets an early launch (:class:`_Guess`) -- where
        collecting it (from ``started``, its first op) took ``EARLY_MIN_SHARE`` of the time from its last cut."""
        # (the cached key's own tuple, where the cluster ran by one: a guess that holds compares it by identity)
        sig = _local.last_sig
        if sig is None or len(sig[0]) != len(ops) or sig[2] != tuple(out_ids):
            sig = (tuple(ops), tuple([avals[i] for i in in_ids]), tuple(out_ids))
        guesses = self.guesses
        g = guesses.get(first)
        if g is None or g.sig != sig:
            if len(guesses) >= 16:
                del guesses[next(iter(guesses))]
            guesses[first] = _Guess(sig, in_refs)
            return
        if g.off or g.executable is not None:
            g.refs = in_refs  # (the Tensors read this time: the next launch reads those not read yet)
            if g.unpaid is not None:
                g.pay()
            return
        # An early launch overlaps the cluster's run with the collection of its ops after the launch: no more can it
        # gain. A compute-bound step's collection is a sliver of it (a Transformer b64 step on 2 cores: 0.1% of
        # 3 s), where the launch's executable, compiled again without donations, cost as much as the first
        # (6.9 s; ~1.1 s for ConvNet b64 on an H200, a step 150 times longer than the others). Two intervals in a
        # row decide: one alone can be a pause (a compute-bound MLP's 2% of its step became 13% once in 8 steps).
        now = _perf_counter()
        if not _tiers.in_flight[0]:
            # (while a compile runs on a background thread -- a tier-up, another schedule (_schedules) -- the
            # collection shares the cores with it: such an interval says nothing of the step)
            g.wide = g.wide + 1 if now - started >= EARLY_MIN_SHARE * (now - g.cut_at) else 0
        g.ran += now - g.cut_at
        g.cut_at = now
        same = [a() is not None and a() is b() for a, b in zip(g.refs, in_refs)]
        # where each input's Tensor was among the latest host-made ones when the cluster started (the same places
        # both times: an early launch at the first op takes them from there)
        places = {s: k for s, k in enumerate(in_made) if k is not None} if in_made else None
        before, g.made = g.made, places
        g.refs = in_refs
        g.runs += 1
        if g.runs >= 2 and g.wide >= 2:
            agreed = None if before is None or places is None else \
                {s: k for s, k in places.items() if k is not None and before.get(s) == k}
            g.plan(ops, avals, in_ids, out_ids, same, agreed)

    def _fail(self, live, env):
        """A cluster that failed op by op: values computed before the failure are given, the others are marked
        failed and the Tensors rebound to them in place go back to what they held before."""
        failed = []
        for z in live:
            v = env.get(z.index)
            if v is None:
                z.cluster = _FAILED
                failed.append(z)
            elif z.pad is not None:
                _padded.give(z, v)
            else:
                z.value = v
        _swap_in([z for z in live if z.value is not None])
        for z in reversed(failed):  # (latest first: a chain of in-place updates unwinds to its start)
            for ref, old_data, old_vid in z.previous or ():
                t = ref()
                if t is None or t._data is not z:
                    continue
                # The value before may be one of the cluster's own, held only by this list (``w += 1`` twice,
                # the second after the failing op): computed before the failure, it is in ``env``; computed after
                # it, the tensor goes back further, to what that value replaced.
                while type(old_data) is Lazy and old_data.value is None and old_data.cluster is self:
                    v = env.get(old_data.index)
                    if v is not None:
                        old_data.value = v
                        break
                    if old_data.index < env.get(_FAILED_AT, -1):
                        break  # (computed, but not kept: the tensor stays failed rather than take an older value)
                    back = [(d, vid) for r, d, vid in old_data.previous or () if r is ref]
                    if not back:
                        break
                    old_data, old_vid = back[0]
                if type(old_data) is Lazy:
                    if old_data.value is not None:
                        old_data = old_data.value
                elif _deleted(old_data):
                    continue  # (donated to the executable that failed: nothing to go back to)
                t._data, t._vid = old_data, old_vid

    def _abandon(self, live, inputs, in_ids, cleared=()):
        """A cluster given up before anything of it ran (a signal while it compiled): the program's state is what it
        was before the cluster's first op -- the Tensors it updated in place (parameters, optimizer slots, BatchNorm
        statistics) hold their values from before it, and the gradients ``opt.clear_grad()`` dropped meanwhile are
        back (``cleared``) --, as if the signal had come there; its results are never computed, and reading one says
        why."""
        self._fail(live, dict(zip(in_ids, inputs)))
        for z in live:
            if z.cluster is _FAILED:
                z.cluster = _INTERRUPTED
        self._put_back_grads(cleared, -1)

    @staticmethod
    def _put_back_grads(cleared, failed_at):
        """Give back the gradients ``opt.clear_grad()`` dropped after the cluster's op that failed (the first output
        id ``failed_at``; -1: before its first op): eagerly that error came first and the gradients stayed -- a
        gradient accumulation's, where the failing step holds the update and its ``clear_grad()``. Unless the
        program set another one since that holds a value (one of the failed cluster's holds none)."""
        for ref, data, at in cleared:
            p = ref()
            if p is None or at <= failed_at:  # (cleared before the failing op: eagerly too)
                continue
            g = p._grad
            if g is None or (type(g._data) is Lazy and g._data.cluster in (_FAILED, _INTERRUPTED)):
                p._grad = _Tensor(data, dtype=data.dtype)

    def grads_cleared(self, pairs):
        """(core's ``_lazy.GRADS_CLEARED``, from ``opt.clear_grad()``) Keep the value each dropped gradient had before
        this pending cluster, to put it back if the cluster is given up: a gradient accumulated over earlier steps
        (or left by a step interrupted after its backward) was lost with a cluster given up while it compiled, the
        parameters staying a step behind it. A gradient the cluster made (None before it) needs nothing."""
        if not self.ops:
            return
        for p, g in pairs:
            data, vid = g._data, g._vid
            while type(data) is Lazy and data.cluster is self and data.value is None:
                back = [d for r, d, _ in data.previous or () if r() is g]
                if not back:
                    break
                data = back[0]
            if type(data) is Lazy:
                if data.value is None:
                    continue  # (made by this cluster, or failed before it: nothing to put back)
                data = data.value
            self.pin(data)  # (the reference kept here must not stop it from being donated)
            self.cleared.append((weakref.ref(p), data, len(self.avals)))  # (ids grow in program order: _FAILED_AT)

    def _fail_at_check(self, check, ops, inputs, in_ids, out_ids, live, lazies, cleared=()):
        """An index check of the cluster found an entry out of range: fail as if its op had raised -- the ops
        before it run op by op (their values given, the rest failed, see _fail) -- and raise eager's error."""
        # (its inputs are whole: a cluster with checks donates none, see _run)
        env, error = self._eager_until_error(ops[:check.at], inputs, in_ids, out_ids + [z.index for z in lazies
                                                                                         if z.pins])
        if error is None:
            env[_FAILED_AT] = ops[check.at][2][0]
        self._fail(live, env)
        self._put_back_grads(cleared, env.get(_FAILED_AT, math.inf))
        raise _device_checks.error_of(check) if error is None else error

    def _run(self, ops, avals, inputs, in_ids, out_ids, reason, site, in_refs=None):
        stats = _stats
        if len(ops) < MIN_OPS:
            stats.small_cluster_ops += len(ops)
            return self._eager(ops, inputs, in_ids, out_ids)
        if site is None:
            site = user_where()
        # (a pending value an op run eagerly takes -- the step or loop paused, an op auto-jit does not collect --
        # runs its cluster as a read would: counted apart, its line read nothing)
        _count_cut("eager op's input" if reason == "host read" and _local.eager_input else reason, site)
        # Inputs nobody else holds any more (a parameter's or slot's old value after its in-place update: only the
        # list holds it) are donated: XLA writes the new value into the old buffer, as in xla_trace. Referenced by
        # the list and getrefcount's argument: 2.
        # (the reference count first: most inputs are held elsewhere -- data, hyper-parameters --, and a step's
        # 50 inputs cost ~25 us less that way than with every test on each)
        donate = ()
        if DONATE and not self._checks:  # (a failed index check runs the cluster again op by op: see _device_checks)
            pins = self._pins
            held = [k for k in range(len(inputs))
                    if _getrefcount(inputs[k]) <= 2 + (pins.get(id(inputs[k]), 0) if pins else 0)]
            if held:
                # (shape and the dtype's identity: a NumPy dtype hashes slowly, and one of the same type is one
                # object -- where it is not, the input is merely not donated)
                out_avals = {(a[0], id(a[1])) for a in [avals[i] for i in out_ids]}
                donate = tuple([k for k in held if _is_array(inputs[k])
                                and (avals[in_ids[k]][0], id(avals[in_ids[k]][1])) in out_avals])
        return _run_keyed(ops, avals, inputs, in_ids, out_ids, donate, reason, site, True, in_refs=in_refs)

    @staticmethod
    def _eager_until_error(ops, inputs, in_ids, out_ids, failed_run=None):
        """``(values by local id, None)``, or the values up to the op that raised and its error (of the values
        not in ``out_ids``, only those still to be read). ``failed_run``: the error of the cluster's executable, which
        may have consumed its donated inputs (:func:`_rerun_after`)."""
        env = dict(zip(in_ids, inputs))
        if failed_run is not None:
            return env, _rerun_after(failed_run, ops, env, out_ids)
        try:
            _run_ops(ops, env, out_ids)
        except Exception as exc:
            return env, exc
        return env, None

    @staticmethod
    def _eager(ops, inputs, in_ids, out_ids):
        """Each op by its eager kernel, as eager execution would have run it."""
        _stats.eager += 1
        _stats.eager_cluster_ops += len(ops)
        env, error = _Cluster._eager_until_error(ops, inputs, in_ids, out_ids)
        if error is not None:
            raise error
        return [env[i] for i in out_ids]


def _run_keyed(ops, avals, inputs, in_ids, out_ids, donate, reason, site, whole, out_avals=None, in_refs=None):
    """Run a cluster by its cached executable, compile it (the policy above) or run it op by op. ``whole``: a
    cluster as cut, which may be run in parts (not one of its parts); ``out_avals``: where ``avals`` holds only
    the inputs' (a part), a function giving the outputs'; ``in_refs``: weak references to the Tensors the
    inputs were read from (a cluster's: see _setup_inputs)."""
    stats = _stats
    # (a whole cluster: nothing of it has run yet -- so a signal while it compiles, or between two of its ops run op
    # by op, gives it up: _Cluster._abandon; a part's compile or op comes after other parts ran, and waits)
    whole_only = _tiers.interruptible if whole else contextlib.nullcontext
    # (JAX's float32 matmul precision, ``megxla.config.matmul_precision``, is read when a cluster is lowered)
    key = (tuple(ops), tuple([avals[i] for i in in_ids]), tuple(out_ids), donate, _config.jax_default_matmul_precision)
    entry = _cache.get(key)
    if entry is not None and entry.executable is not None:
        _cache.move_to_end(key)
        stats.hits += 1
        entry.site[1] += 1
        _local.last_hit = entry.site
        _local.last_sig = entry.sig
        return entry.executable(*inputs)
    st = _sites.get(site)
    if st is None:
        # keys seen, hits (cache hits and recurrences), keys compiled, how its clusters' ops change (per length),
        # the types of its first key's values, its last two new clusters, whether one of its clusters launches early,
        # its hits when its last new key came, its first executable's program with constants kept taken out, the
        # latest whole cluster it compiled (MEGXLA_AUTO_JIT_LOG: what it compares the next one with), the seconds its
        # latest compile took (or took once, where JAX's cache held it: an early launch's rent, EARLY_RENT)
        st = _sites[site] = [0, 0, 0, None, None, None, None, False, 0, None, None, 0.0]
    if whole and st[0] >= 0:
        # The same ops as a compiled cluster, other results (a step function that reads its loss every 10th step:
        # the loss is a result only then): that executable serves it, or one of both results compiles now -- the
        # ops are known to recur -- instead of a key of its own run op by op first (~1.5 s of cold eager kernels).
        fkey = (key[0], key[1], donate, key[4])
        fam = _families.get(fkey)
        if fam is not None:
            f_out, f_exe = fam
            if not set(out_ids) <= set(f_out):
                f_out = tuple(sorted(set(f_out) | set(out_ids)))
                with _tiers.interruptible():  # (nothing of the cluster has run: see _Cluster._abandon)
                    f_exe = _compile(ops, avals, in_ids, f_out, donate, None, reason)
                st[2] += 1
                _families[fkey] = (f_out, f_exe)
            entry = _Entry(st, key)
            entry.executable = _select(f_exe, [f_out.index(i) for i in out_ids])
            _cache[key] = entry
            if len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
            stats.hits += 1
            st[1] += 1
            _local.last_hit = st
            _local.last_sig = entry.sig
            return entry.executable(*inputs)
    if whole and entry is None:
        st[5], st[6] = st[6], (ops, avals)  # (references: a cut gives the cluster new lists)
        if st[5] is not None:
            _local.changed = site
            _stats.changed.add(site)
        if st[9] is not None:  # (the site's first executable had kept constants taken out: is this the same program?)
            first, st[9] = st[9], None
            hoisted = _kept_constants.constant_ops(ops, avals, in_ids, out_ids, [
                *_setup_inputs(in_ids, in_refs), *_kept_constants.kept_inputs(first[2], in_ids, inputs)])
            canon = _kept_constants.Canonical(ops, avals, in_ids, out_ids, donate, hoisted, key[4])
            if canon.key == first[0]:
                entry = _Entry(st, key)
                entry.executable = canon.wrap(first[1], in_ids, out_ids, _run_ops)
                _cache[key] = entry
                if len(_cache) > CACHE_SIZE:
                    _cache.popitem(last=False)
                st[0] += 1
                st[1] += 1
                stats.hits += 1
                return entry.executable(*inputs)
    if whole:
        # A site whose clusters keep changing in a few ops (those touching a count read on the host) runs its
        # clusters in parts: the ops that change run eagerly, the others as parts compiled once for all steps
        varying = _churning(st, ops, avals, key, site, reason)
        if varying:
            return _run_parts(ops, avals, inputs, in_ids, out_ids, donate, varying, site, key[0])
    if st[0] < 0:  # megamorphic: eager for good
        with whole_only():  # (op by op: given up between two ops, a signal pending -- see _abandon)
            return _Cluster._eager(ops, inputs, in_ids, out_ids)
    settled = False
    if entry is None:  # a new key at this site
        # A site keeps compiling new keys while they recur (one hit per 8 keys seen: a step whose shapes take a
        # dozen values compiles each once and reuses it) and while its executables pay for their compilation
        # (TF's megamorphic rule: past 10 compiles, 50 runs per compile), never past MAX_COMPILES. Shapes that
        # change on every step never recur: the site gives up after KEY_LIMIT. Executables already compiled
        # there keep running.
        if (st[0] >= KEY_LIMIT and 8 * st[1] < st[0]) or (st[2] >= 10 and st[1] < 50 * st[2]) \
                or st[2] >= MAX_COMPILES:
            _megamorphic(st, site, reason)
            with whole_only():  # (op by op: given up between two ops, a signal pending -- see _abandon)
                return _Cluster._eager(ops, inputs, in_ids, out_ids)
        st[0] += 1
        if st[0] == 1:
            st[4] = set(avals)
        settled, st[8] = st[1] - st[8] >= SETTLED_HITS, st[1]
        entry = _Entry(st, key)
        _cache[key] = entry
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    else:
        st[1] += 1
    entry.seen += 1
    # A key compiles when it recurs; at a site that has compiled many already, when it recurs more often (2
    # sightings for its first 4 keys, 4 for the next 4, 8...): the common shapes of a data-dependent step get
    # compiled, the rare ones keep running op by op instead of each costing a compilation. (A cluster cut by
    # the size cap is no natural unit: it too compiles only if it recurs.)
    # A site's first large cluster compiles at first sight, and so does its second where the first has not
    # recurred: a program's first step often differs from the others (an EMA of the weights after `opt.step()`
    # joins the next step's cluster; step 0 has none before it), and the op-by-op run of the second, whose eager
    # kernels are all cold, cost more than compiling it (1.8 s against 0.7 s for a small ConvNet) -- unless it
    # takes an array of a shape no value of the first had: shapes that change (a sequence model's lengths) would
    # make that compilation one of many, each barely used (a varying-length LSTM's second step: an 8 s
    # compilation). A value the first computed is no such sign: a grid or anchors made at the first step and kept in
    # a dict by the project are the next steps' inputs (RIFE's warp: its second step, 1,725 ops, ran op by op on
    # cold kernels in 16.7 s, then compiled at the third in 18.4 s). Nor is a new scalar (a metric accumulated in
    # a tensor from the second step on). Nor does a cluster that
    # repeats a few ops many times (an unrolled recurrent cell) compile at first sight: run op by op, its eager
    # kernels are few (1.8 s for a 60-step LSTMCell loop's 3,500 ops, 105 of them different), while XLA's compile
    # time follows the number of ops (6 s for the quick tier). So does a new key where the site had settled: its
    # keys had recurred ``SETTLED_HITS`` times since its last new one (a second model trained through the same step
    # function, a new image size every few hundred steps). Its first step ran op by op on cold kernels, then compiled
    # at the second: 3.0 + 2.9 s for a ConvNet b64 step on 2 cores, 20 ms + 7.4 s on an H200 where the kernels were
    # warm. Keys that change every step never settle, so each regime costs at most one compilation more. Nor does a
    # cluster that follows a host read made while a GradManager recorded (``_local.after_mid_read``): the rest of a
    # step whose middle read a count may be shaped by it -- YOLOX's SimOTA reads its number of matched anchors and
    # reshapes its losses' rows by it, and its backward and update (2,781 ops) compiled at first sight in 22 s for a
    # key that never recurred; it waits for its key to recur, at the cost of one run op by op where it does. Nor does
    # a cluster cut by the host read of an index check held at its line (``_device_checks``), or the rest of its step:
    # once the line's checks are made inside the cluster, the step is one cluster of another key. A part
    # (of a churning site's or a repetitive cluster's) compiles when it recurs: its first sight is often its
    # cluster's (and ``avals`` holds only its inputs' types: the check below read past them, and the cluster's
    # remaining ops ran op by op).
    if not (entry.seen >= 2 << (st[2] // 4)
            or (whole and (st[0] == 1 or settled or (st[0] == 2 and st[1] == 0 and st[4] is not None
                                                     and _no_new_arrays(st[4], key[1])))
                and len(ops) >= FIRST_SIGHT_OPS and reason != "size cap" and not _local.after_mid_read
                and not _device_checks.reading_held() and not _repetitive(ops, avals))):
        with whole_only():  # (op by op: given up between two ops, a signal pending -- see _abandon)
            return _Cluster._eager(ops, inputs, in_ids, out_ids)
    if whole:
        plan = _chunk_plan(ops, avals, in_ids, out_ids, site)
        if plan is not None:  # (a loop's body repeated: in chunks, one small executable -- see _chunk_size)
            entry.executable = functools.partial(_run_chunked, plan, ops, avals, in_ids, out_ids)
            return entry.executable(*inputs)
    st[2] += 1
    t0, saved = time.perf_counter(), _schedules._SAVED[0]
    early_key = _shared_early_key(st, key, ops, avals, in_ids, donate, whole, reason)
    if early_key is not None:
        # A site whose clusters launch early gets a new key -- a bucketed sequence length, another image size --
        # whose cluster will launch early too: one executable, not donating, serves both its runs (a second,
        # donating one doubled what such a program compiles: 8 lengths of a small language model, 8 x 0.8 s cold)
        with whole_only():
            entry.executable = _early[early_key] = _compile(ops, avals, in_ids, out_ids, (), out_avals, reason)
        if len(_shared) >= CACHE_SIZE:
            _shared.pop(next(iter(_shared), None), None)
        _shared[early_key] = (entry, ops, avals, in_ids, out_ids, donate, out_avals, reason)
    elif not whole and len(ops) >= BACKGROUND_OPS \
            and (background := _in_background(ops, avals, in_ids, out_ids, donate, out_avals, reason)) is not None:
        entry.executable = background
        if LOG:
            print(f"megxla auto-jit: compiling a part of {len(ops)} ops cut at {describe_where(site)} in the background "
                  f"(run op by op meanwhile, by its executable from run {_tiers.SWITCH_RUN} on)", file=sys.stderr)
        return entry.executable(*inputs)
    elif whole and st[0] == 1 and entry.seen == 1 and reason != "size cap" \
            and (hoisted := _kept_constants.constant_ops(ops, avals, in_ids, out_ids, _setup_inputs(in_ids, in_refs))):
        # (a site's first cluster compiled at first sight, computing constants that outlive it: see _kept_constants)
        canon = _kept_constants.Canonical(ops, avals, in_ids, out_ids, donate, hoisted, key[4])
        with whole_only():
            executable = _compile(canon.ops, canon.avals, canon.in_ids, canon.out_ids, canon.donate, None, reason)
        st[9] = (canon.key, executable, [])
        entry.executable = canon.wrap(executable, in_ids, out_ids, _run_ops, st[9][2])
    else:
        with whole_only():
            entry.executable = _compile(ops, avals, in_ids, out_ids, donate, out_avals, reason)
    # (loaded from JAX's cache: the time the compile once took -- the launch's program, cold, takes about as long)
    st[11] = time.perf_counter() - t0 + (_schedules._SAVED[0] - saved)
    if LOG:
        _log_compile(st, site, reason, len(ops), whole, time.perf_counter() - t0, ops, avals)
    if whole:
        _families[(key[0], key[1], donate, key[4])] = (tuple(out_ids), entry.executable)
        if len(_families) > CACHE_SIZE:
            del _families[next(iter(_families))]
    return entry.executable(*inputs)


# A churning site's part of at least this many ops compiles on a background thread while it runs op by op (its eager
# kernels ran at its first sight: warm), from its third run on from its executable (_in_background)
BACKGROUND_OPS = 512


def _in_background(ops, avals, in_ids, out_ids, donate, out_avals, reason):
    """A part's executable compiled on a background thread from now, run op by op until its ``SWITCH_RUN``-th run --
    which waits for it (``_tiers.tiered``: a fixed run, so its numbers do not depend on the machine's load) -- or
    None where its program is kept compiled (a warm start loads it at once). YOLOX's backward and update, the
    unchanging part of its churning step (2,211 ops), compiled for 17-45 s inside its third step, 3-7x an eager
    step."""
    key = _persist.fingerprint(ops, in_ids, [avals[i] for i in in_ids], out_ids, donate, _PROGRAM_KIND)
    if _persist.kept_optimized(key):
        return None
    precision, settings = jax.config.jax_default_matmul_precision, _lowering_settings()

    def optimize():
        if _lowering_settings() != settings:
            return None  # (x64 or the PRNG changed since: the program would lower differently; op by op it stays)
        with jax.default_matmul_precision(precision):
            return _compile(ops, avals, in_ids, out_ids, donate, out_avals, reason)

    def by_ops(*inputs):
        return _Cluster._eager(ops, inputs, in_ids, out_ids)

    return _tiers.tiered(optimize, by_ops, len(ops), start_run=1)


def _setup_inputs(in_ids, in_refs):
    """The inputs (local ids) read from a Tensor made in the setup and not changed since (see ``_Local.setup_vid``):
    a module's buffers, its device-made constants -- what a constant kept from the first step may be made from
    (RoPE's table from the module's ``inv_freq``). Not parameters: what is made from them changes with them. None
    while a GradManager records: its tape holds what the backward needs (a table made at every step, then a loss
    read inside ``with gm:``), and such results, taken out, would run op by op at every step."""
    mark = _local.setup_vid
    if not mark or in_refs is None or _dispatch.recorders:
        return ()
    found = []
    for i, ref in zip(in_ids, in_refs):
        t = ref()
        if t is not None and t._vid < mark and not isinstance(t, Parameter):
            found.append(i)
    return found


def _log_compile(st, site, reason, n, whole, secs, ops=None, avals=None):
    """``MEGXLA_AUTO_JIT_LOG=1``: one line on stderr per compilation (``ops``, ``avals``: the cluster compiled)."""
    what = f"a cluster of {n} ops" if whole else f"a part of {n} ops"
    change = None
    if whole and ops is not None:
        # (against the site's cluster compiled before it: a key that recurred -- a bucketed length come back -- was
        # described by the site's latest two new clusters, the same two for every later compilation)
        before, st[10] = st[10], (ops, avals)
        if before is not None:
            change = _change(before, (ops, avals))
    print(f"megxla auto-jit: compiled {what} cut at {describe_where(site)} ({reason}) in {secs:.2f} s"
          + (f"; changed since the site's cluster compiled before: {change}" if change else ""), file=sys.stderr)


_families: dict = {}  # a compiled whole cluster's key without its results -> (results' ids, executable)


REPEAT_SHARE = 16  # a cluster with fewer than 1/REPEAT_SHARE different op records is repetitive


def _repetitive(ops, avals):
    """Whether fewer than one op record in ``REPEAT_SHARE`` of the cluster is different (op and input types): its
    op-by-op run compiles few eager kernels (zoo convolutional steps: 40-60% different; an unrolled LSTM cell: 3%).

    Example:
        >>> a = ((2,), np.dtype("float32"), False)  # (any hashable op will do here)
        >>> _repetitive([("add", (0, 0), (1,))] * 32, [a, a])
        True
        >>> _repetitive([(name, (0, 0), (1,)) for name in "abcdefghijklmnopqrst"], [a, a])
        False
    """
    if len(ops) < REPEAT_SHARE:
        return False
    return REPEAT_SHARE * len({(op, tuple([avals[i] for i in ids])) for op, ids, _ in ops}) < len(ops)


def _no_new_arrays(first, types):
    """Whether every input type in ``types`` that is not among ``first`` (the types of a first cluster's values) is a
    scalar's."""
    return all(t in first or not t[0] for t in types)


def _deleted(a):
    """Whether ``a`` is an array whose buffer was donated to an executable (a Lazy: not known, so no)."""
    f = None if type(a) is Lazy else getattr(a, "is_deleted", None)
    return f is not None and f()


def _rerun_after(failed, ops, env, keep):
    """Run ``ops`` op by op on ``env`` after an executable raised ``failed``: the error to raise, or None. That
    executable may have consumed its donated inputs before failing (XLA deletes them once a run is launched, an
    allocation it then refuses included): the ops needing them are skipped, and where a value in ``keep`` is lost
    so, the executable's error stands for it."""
    lost = {i for i, a in env.items() if _deleted(a)}
    for i in lost:
        del env[i]
    try:
        _run_ops(ops, env, keep, lost)
    except Exception as exc:
        return exc
    return None if lost.isdisjoint(keep) else _run_error(failed, len(ops))


def _run_error(exc, n):
    """The error a cluster's failed executable stands for, where its op-by-op rerun could not reach the values
    computed from the inputs it consumed: an allocation XLA refused is eager's OutOfMemoryError."""
    text = str(exc).strip()
    if "RESOURCE_EXHAUSTED" not in text:
        return exc
    return _dispatch.OutOfMemoryError(
        f"an auto-jit cluster of {n} ops: out of device memory: {text.splitlines()[0]} (the values computed from "
        f"the inputs whose buffers it was given, donated, are lost)")


class _WontFit(Exception):
    """A compiled cluster needs more memory than the device has free now: run it op by op instead."""


# A compiled cluster needing at least this fraction of the device's memory checks the free memory before each run:
# XLA deletes the donated inputs (a parameter's old value) once a run is launched, also when it then fails to
# allocate, so an executable that does not fit would lose them; op by op, the op that does not fit raises (eager's
# OutOfMemoryError, at the op eager would raise at) and everything before it stands.
BIG_FRACTION = 1 / 16


def _free_bytes():
    """The device's free memory now (GPU/TPU: its allocator's; CPU: the machine's available RAM)."""
    stats = _op.allocator_stats()
    if stats and stats.get("bytes_limit"):
        return stats["bytes_limit"] - stats.get("bytes_in_use", 0)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return _total_bytes()


_total_bytes = functools.lru_cache(maxsize=None)(_op.measured_memory_bytes)


def _fit_checked(executable):
    """``executable``, checking before each run that what it allocates (outputs and temporaries, less the donated
    buffers it reuses) fits in the free memory -- where that is a big part of the device's memory."""
    try:
        m = executable.memory_analysis()
        need = m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
    except Exception:  # (not every backend analyses its executables)
        return executable
    if need < BIG_FRACTION * _total_bytes():
        return executable

    def run(*inputs):
        if need > _free_bytes():
            raise _WontFit(f"an auto-jit cluster needs {need} bytes, more than the device has free")
        return executable(*inputs)
    return run


def _lowering_settings():
    return jax.config.jax_enable_x64, str(jax.config.jax_default_prng_impl)


def _quick_in_parts(ops, avals, in_ids, out_ids, n_parts):
    """A cluster's quick tier as ``n_parts`` executables of consecutive slices of its ops, run one after another.

    Why: XLA:CPU compiles one program on one core (MobileNetV3-Large's step, 4.1 s at -O0: 4.7 s of CPU), and
    lowering it is Python on another (2.3 s): in parts, each compiles on a thread of its own while the next is
    lowered. A forward op and its gradient op in different parts no longer share the forward's residuals (the
    gradient op computes its forward again: ``make_replay``'s pairs are per program), and nothing is donated, so a
    part's failure leaves the cluster's inputs for its op-by-op run; both only for the quick tier's few runs."""
    bounds = [len(ops) * k // n_parts for k in range(n_parts + 1)]
    made_in = {}  # value id -> the part making it
    for p in range(n_parts):
        for _, _, outs in ops[bounds[p]:bounds[p + 1]]:
            made_in.update(dict.fromkeys(outs, p))
    last_read = dict.fromkeys(out_ids, n_parts)  # value id -> the last part reading it (n_parts: a result)
    plan = []
    for p in range(n_parts):
        part_in = []
        for _, ins, _ in ops[bounds[p]:bounds[p + 1]]:
            for i in ins:
                if made_in.get(i, -1) != p:
                    part_in.append(i)
                    last_read[i] = max(last_read.get(i, p), p)
        plan.append(list(dict.fromkeys(part_in)))
    parts = []
    for p in range(n_parts):
        part_out = [i for _, _, outs in ops[bounds[p]:bounds[p + 1]] for i in outs if last_read.get(i, p) > p]
        gone = [i for i in plan[p] if last_read[i] == p]  # (dropped after this part: eager frees what is read)
        parts.append((plan[p], part_out, gone))

    def lowerings():
        for (part_in, part_out, _), lo, hi in zip(parts, bounds, bounds[1:]):
            replay = make_replay(ops[lo:hi], part_in, part_out, kernels=True, rounded=True)
            replay.__name__ = replay.__qualname__ = "auto_jit_cluster_part"
            structs = [jax.ShapeDtypeStruct(*avals[i][:2], weak_type=avals[i][2]) for i in part_in]
            yield _spmd.jit(replay, name="auto_jit_cluster_part").lower(*structs)
    exes = _tiers.compile_parts(lowerings())

    def run(*inputs):
        env = dict(zip(in_ids, inputs))
        for exe, (part_in, part_out, gone) in zip(exes, parts):
            env.update(zip(part_out, exe(*[env[i] for i in part_in])))
            for i in gone:
                env.pop(i, None)
        return [env[i] for i in out_ids]
    return run


def _select(executable, positions):
    """``executable`` giving only its results at ``positions``."""
    def run(*inputs):
        res = executable(*inputs)
        return [res[p] for p in positions]
    return run


# What a cluster's program is, in the kept programs' fingerprints (_persist): a change to how make_replay builds it
# names it anew, or a warm start would load the program of before (2: no barrier on a dot's or convolution's operand)
_PROGRAM_KIND = "auto_jit apart 2"


def _compile(ops, avals, in_ids, out_ids, donate, out_avals, reason=None):
    """The executable of a cluster (``out_avals``: as for :func:`_run_keyed`; ``reason``: what cut it)."""
    t0 = time.perf_counter()
    # (``apart``: the program takes a zero last, which keeps each op's float results apart from its readers'
    # arithmetic -- no FMA of two ops, eager's roundings: _recording._apart; _with_zero passes it)
    replay = make_replay(ops, in_ids, out_ids, kernels=True, rounded=True, apart=True)
    replay.__name__ = replay.__qualname__ = "auto_jit_cluster"
    structs = [jax.ShapeDtypeStruct(*avals[i][:2], weak_type=avals[i][2]) for i in in_ids] + [_ZERO_STRUCT]
    # (only buffers an output can take: JAX would warn about the others)
    donate = usable_donations(donate, [avals[i] for i in in_ids],
                              out_avals() if out_avals is not None else [avals[i] for i in out_ids])
    # (kept across processes where JAX's persistent cache is on: a warm start skips tracing and lowering)
    # A large cluster runs from a quickly compiled executable until XLA's optimized one is ready (_tiers) -- unless
    # the size cap cut it: a loop that never reads waits for none of its clusters (an evaluation loop keeping its
    # outputs ran 6-12% slower tiered: its quick executables' runs, and the compile beside them on 2 cores) -- or
    # it is a part of a churning site's cluster: its step's ModeTimer compares the first steps' times of both modes,
    # which the quick executables' runs would charge to the clusters
    n_tier = 0 if reason in ("size cap", "part", "early launch") else len(ops)
    key = _persist.fingerprint(ops, in_ids, [avals[i] for i in in_ids], out_ids, donate, _PROGRAM_KIND)
    # (the same program donating nothing -- the executable of its early launches --: one schedule for both, _schedules)
    # (a second fingerprint only where a schedule may be chosen: a CPU, the choice on)
    family = key if not donate or _schedules.other_options() is None else \
        _persist.fingerprint(ops, in_ids, [avals[i] for i in in_ids], out_ids, (), _PROGRAM_KIND)
    tiered = functools.partial(_tiers.compile, n_ops=n_tier, key=key, family=family)
    if sum(1 for i in in_ids if not avals[i][0]) >= QUICK_SCALARS:
        # XLA:CPU's optimizing compile grows steeply with a fused chain's scalar operands -- each Python number
        # of the loop body is an input of its own (see _collect) --: a read-free loop of `sin(x) * 1.01 + 0.001`
        # cut at the size cap (4096 ops, 2048 scalars) compiled for minutes ("Very slow compile?"; 2,800 ops
        # with 1,400 scalars: 77 s, 2,000 / 1,000: 8.7 s), where its quick options take 0.9 s. Such a program
        # runs from its quick executable only: no optimized compile, in the foreground or on a tier-up thread.
        n_tier, tiered = 0, _tiers.quick
    executable, n_parts = None, _tiers.parts_for(n_tier)
    if n_parts > 1 and not _persist.kept_optimized(key):
        # Compiled cold: the quick tier in parts, compiled in parallel; the whole program is lowered, kept and
        # compiled optimized on the tier-up thread -- as the key says: under the matmul precision of now (a
        # program may change ``config.matmul_precision`` meanwhile; JAX's setting of a thread overrides the global)
        precision, settings = jax.config.jax_default_matmul_precision, _lowering_settings()

        def optimize():
            if _lowering_settings() != settings:
                return None  # (x64 or the PRNG changed since: the program would lower differently; quick it stays)
            with jax.default_matmul_precision(precision):
                exe = _persist.compile_cached(replay, structs, donate, "auto_jit_cluster", key)
                return _with_zero(exe if exe is not None else
                                  _spmd.jit(replay, donate_argnums=donate, name="auto_jit_cluster").lower(*structs)
                                  .compile())
        try:
            executable = _tiers.tiered(optimize, _quick_in_parts(ops, avals, in_ids, out_ids, n_parts), n_tier)
        except Exception:  # (a part XLA would not compile: the whole program, as before)
            executable = None
    one_program = executable is None  # (not the quick tier in parts, whose optimized program gets _with_zero itself)
    if executable is None:
        executable = _persist.compile_cached(replay, structs, donate, "auto_jit_cluster", key, tiered)
    if executable is None:
        executable = tiered(_spmd.jit(replay, donate_argnums=donate, name="auto_jit_cluster").lower(*structs))
    if reason == "early launch":  # (a second executable of a compiled cluster: not another cluster compiled)
        _stats.early_compiled += 1
    else:
        _stats.compiled += 1
    _stats.compile_time += time.perf_counter() - t0
    return _with_zero(_fit_checked(executable)) if one_program else _fit_checked(executable)


_ZERO_STRUCT = jax.ShapeDtypeStruct((), np.int32)
# The zeros the clusters' programs take last, in turn (made at the first one: the backend has started). One zero
# array passed to every call made XLA:CPU run each call synchronously: a call with an input buffer the previous
# call also read ran on the calling thread until its results were ready (the tiny ConvNet step's cluster: 1.9 ms
# in the call against 0.24 ms with another zero, its results ready as late) -- an early launch then overlapped
# none of its compute with the Python collecting the rest of the step. Taken in turn, no call reads the buffer
# the one before it read, and the calls return at once, as ``xla_trace``'s do. (On the 2-core VM the steps took as
# long either way -- XLA's compute keeps both cores busy, there is no idle core to overlap with --, blocks of 20 steps
# alternating in one process, ms: ConvNet b8 4.91 / 3.74 against 4.68 / 3.92, MLP 5.16 / 5.83 against 5.03 / 5.84,
# the same with a read every 10th step; a machine with cores to spare, or a program doing host work between its
# clusters' runs, is where it counts.)
ZEROS = 8
_ZERO: list = []


class _with_zero:
    """``executable`` (of a cluster's program, which takes a zero last: ``make_replay(apart=True)``) called with the
    cluster's inputs alone; its other attributes (``memory_analysis``, ``as_text``) are the executable's."""

    __slots__ = ("executable", "zeros")

    def __init__(self, executable):
        if not _ZERO:
            _ZERO.append(itertools.cycle([jax.numpy.zeros((), np.int32) for _ in range(ZEROS)]))
        self.executable, self.zeros = executable, _ZERO[0]

    def __call__(self, *inputs):
        return self.executable(*inputs, next(self.zeros))

    def __getattr__(self, name):
        if name in _with_zero.__slots__:  # (not set yet: no recursion through this method)
            raise AttributeError(name)
        return getattr(self.executable, name)


# ---- clusters in parts ----------------------------------------------------------------------------------------
# A step that reads a count on the host and then works on that many elements (a detector's matched anchors,
# ``cond_take`` of the positives) makes a new cluster every step, though only the few ops touching the count
# change: the forward's end, the loss over the selected elements and their gradients. Compiled whole, each count is
# its own executable (a compile storm, then the site gives up and runs op by op). Instead a site watches which
# positions of its clusters change from one new key to the next; positions that changed twice are *varying*. The
# cluster then runs as alternating parts: the unchanging ops, compiled once for all steps (the backward of the
# network and the optimizer are the same every step), and the varying ones apart: op by op, as eager runs them, or
# -- a group of at least ``FIRST_SIGHT_OPS`` ops -- as a part of its own, compiled per key where its keys recur (a
# count taking a few values). (A small changing group compiled per count cost ~50 ms per count to save ~25 us per
# run: 13 compilations in a 20-step probe, 8 of them for 4-5 ops.) torch.compile's answer is to recompile with
# a symbolic size (``automatic_dynamic_shapes``); XLA needs static shapes, so the changing ops are kept apart, as TF
# keeps the ops it cannot compile out of its clusters.
# A cluster most of whose ops change is split only if its site's clusters do not recur (the megamorphic rule:
# ``KEY_LIMIT`` clusters without an executable, fewer than 1 in 8 seen before)
SPLIT_MAX_FRACTION = 0.5
CHURN_LENGTHS = 8  # cluster lengths a site keeps a history of changes for


class _Churn:
    """How a site's clusters change: the previous new cluster's ops (op, where its inputs come from, their types);
    per position, how many times the op there changed; how often the clusters recur."""

    __slots__ = ("sig", "changes", "keys", "misses", "repeats", "varying", "warned")

    def __init__(self, sig):
        self.sig = sig
        self.changes = [0] * len(sig)
        self.keys = set()  # hashes of the clusters seen (bounded)
        self.misses = self.repeats = 0  # clusters run without a compiled executable; of them, seen before
        self.varying = None  # the positions of the changing ops, while the site runs its clusters in parts
        self.warned = False


def _churning(st, ops, avals, key, site, reason):
    """(At a cluster of the site ``st`` that has no compiled executable) the positions of its varying ops, or None:
    run it whole. A site runs in parts once some positions changed twice (a program alternating between two
    shapes, train and eval, compiles each whole) and either few of its ops change or its clusters do not recur (a
    program with a few recurring shapes throughout -- multi-scale training -- compiles one executable per shape).
    Split because most of it changes, the site warns once (as a megamorphic one): most of its ops now run op by
    op."""
    # One history per cluster length: a count that takes a special value now and then (no ignored pixel at all:
    # two more ops) made a cluster of another length, and a single history started again from it -- the zoo's
    # segmentation step then ran three whole backwards op by op (~300 ms each) until its positions changed twice
    # again. The lengths are few (a program's own branches); a site making many is reset.
    churns = st[3]
    if churns is None:
        churns = st[3] = {}
    n = len(ops)
    ch = churns.get(n)
    h = hash(key)
    if ch is not None and h in ch.keys:
        ch.misses += 1
        ch.repeats += 1
        return ch.varying
    sig = _signature(ops, avals)
    if ch is None:
        if len(churns) >= CHURN_LENGTHS:
            churns.clear()
        ch = churns[n] = _Churn(sig)
    else:
        changes = ch.changes
        for k, (a, b) in enumerate(zip(sig, ch.sig)):
            if a != b:
                changes[k] += 1
        ch.sig = sig
    if len(ch.keys) > 4096:
        ch.keys.clear()
    ch.keys.add(h)
    ch.misses += 1
    varying = tuple(k for k, c in enumerate(ch.changes) if c >= 2)
    few = len(varying) <= SPLIT_MAX_FRACTION * len(sig)
    rare = ch.misses >= KEY_LIMIT and 8 * ch.repeats < ch.misses
    ch.varying = varying if varying and (few or rare) else None
    if ch.varying and not few and not ch.warned:
        ch.warned = True
        _megamorphic(st, site, reason, f"all {len(sig)} of their ops run op by op" if len(varying) == len(sig) else
                     f"{len(varying)} of their {len(sig)} ops run op by op, the others compiled")
    return ch.varying


def _run_parts(ops, avals, inputs, in_ids, out_ids, donate, varying, site, ops_key, plan=None):
    """Run a cluster as alternating groups (``_plan_parts``), or as the groups of ``plan`` (a repetitive cluster's
    chunks, ``_chunk_plan``): each through ``_run_keyed`` (its own key, cache and compile policy), or op by op where
    it has fewer than ``MIN_OPS`` ops."""
    if plan is None:
        pkey = (ops_key, tuple(in_ids), tuple(out_ids), donate, varying, site)
        plan = _PLANS.get(pkey)
        if plan is None:
            if len(_PLANS) > CACHE_SIZE:
                _PLANS.clear()
            plan = _PLANS[pkey] = _plan_parts(ops, in_ids, out_ids, donate, varying, site)
        _stats.split += 1
    else:
        _stats.chunked += 1
    groups, members = plan
    env = dict(zip(in_ids, inputs))
    for g, group in enumerate(groups):
        try:
            if type(group) is list:  # op by op
                _run_ops(group, env, ahead_min=2)  # (a changing group: new shapes, cold kernels)
                _stats.eager_ops += len(group)
                continue
            part_ops, part_inputs, part_in, results, part_out, part_donate, part_site = group
            values = _run_keyed(part_ops, [avals[i] for i in part_inputs], [env[i] for i in part_inputs],
                                part_in, part_out, part_donate, "part", part_site, False,
                                lambda results=results: [avals[i] for i in results])
            env.update(zip(results, values))
        except Exception as exc:
            # The groups before this one took effect, and their parts may have consumed donated inputs: the cluster
            # cannot start again from its inputs. The ops not run yet run op by op, in program order, from here.
            done = {k for m in members[:g] for k in m}
            error = _rerun_after(exc, [rec for k, rec in enumerate(ops) if k not in done], env, out_ids)
            if error is not None:
                raise _PartsFailed(env, error) from exc
            break  # (an error of a part's executable alone -- none op by op -- is no error)
    return [env[i] for i in out_ids]


def _run_chunked(plan, ops, avals, in_ids, out_ids, *inputs):
    """A repetitive cluster's "executable": its chunks run one after another (``_run_parts``)."""
    return _run_parts(ops, avals, inputs, in_ids, out_ids, (), (), None, None, plan)


def _run_ops(ops, env, keep=None, lost=None, ahead_min=None):
    """Each op by its eager kernel, as eager execution runs it, reading and writing ``env`` (local id -> array).
    ``keep``: the ids to keep in ``env``; the others go once the ops have read them, as eager frees a value nothing
    holds (an evaluation loop's 4096-op cluster run op by op held every activation of its ~24 forwards: 3.4 GB).
    ``lost``: ids whose values are gone (inputs a failed executable consumed): the ops reading one are skipped,
    their outputs added to it. ``ahead_min``: the fewest ops whose kernels not met before compile ahead, on worker
    threads (:mod:`._kernels_ahead`); by default ``MIN_OPS``: a smaller cluster runs op by op every time, its kernels
    warm after the first."""
    compiled = _COMPILE_SECS[0]
    n_min = MIN_OPS if ahead_min is None else ahead_min
    ahead = _kernels_ahead.compile_ahead(ops, env, _SHAPES, _input_type) if len(ops) >= n_min and not lost else None
    try:
        _run_ops_timed(ops, env, keep, lost, ahead)
    finally:
        if ahead is not None:
            _kernels_ahead.cancel(ahead)
        _KERNEL_SECS[0] += _COMPILE_SECS[0] - compiled


def _run_ops_timed(ops, env, keep, lost, ahead=None):
    run_kernel, wrap = _dispatch.run_kernel, _dispatch.wrap
    stoppable = _tiers.interrupting()  # (a whole cluster's run: a held signal gives it up between two ops)
    last = None
    if keep is not None:
        last = {}
        for k, (_, ins, _) in enumerate(ops):
            for i in ins:
                last[i] = k
        for i in keep:
            last[i] = len(ops)
    for k, (op, ins, outs) in enumerate(ops):
        if lost and not lost.isdisjoint(ins):
            lost.update(outs)
            continue
        if stoppable and _interrupt.pending():
            raise _tiers.Interrupted
        args = [env[i] for i in ins]
        if ahead is not None and ahead[k] is not None:
            _COMPILE_SECS[0] += _kernels_ahead.wait(ahead[k])  # (a worker's compile: this thread's wait counts)
        try:
            res = run_kernel(op, [wrap(a) for a in args], args)
        except BaseException:
            env[_FAILED_AT] = outs[0] if outs else math.inf  # (ids grow in program order: later values are >=)
            raise
        env.update(zip(outs, [t._data for t in res]))
        if last is not None:
            del args, res
            for i in ins:
                if last[i] == k:
                    env.pop(i, None)
            for o in outs:
                if o not in last:
                    del env[o]


_FAILED_AT = "failed at"  # the key of ``env`` where _run_ops notes the first output id of the op that raised


class _PartsFailed(Exception):
    """A cluster run in parts failed op by op: ``env`` holds the values computed before the failing op."""

    def __init__(self, env, error):
        super().__init__(str(error))
        self.env, self.error = env, error


_PLANS: dict = {}  # (ops, in ids, out ids, donated, varying positions, site) -> groups (_plan_parts)


def _plan_parts(ops, in_ids, out_ids, donate, varying, site):
    """``(groups, their ops' positions)``: the groups a cluster runs in are lists of ops (run op by op: fewer than
    ``MIN_OPS``, or than ``FIRST_SIGHT_OPS`` changing ones), and parts ``(ops
    renumbered, their inputs' ids in the cluster, their local ids, results' ids in the cluster, their local ids,
    donated, site)``. Each op goes in the earliest group its inputs allow (levels: even for
    unchanging ops, odd for varying ones), so a backward whose first ops change still compiles as one part after
    them. The ops are pure (an in-place update rebound a Tensor when it was collected): any topological order
    computes what the program order does. An input is donated to the part that reads it last."""
    vary = bytearray(len(ops))
    for k in varying:
        vary[k] = 1
    level = {}  # local id -> level of the group computing it (inputs: none)
    groups = {}
    for k, (op, ins, outs) in enumerate(ops):
        m = 0
        if vary[k]:
            for i in ins:
                m = max(m, level.get(i, 0))
            m |= 1
        else:
            for i in ins:
                lv = level.get(i, 0)
                m = max(m, lv + (lv & 1))
        for o in outs:
            level[o] = m
        groups.setdefault(m, []).append(k)
    levels = sorted(groups)
    return _parts_of(ops, [groups[lv] for lv in levels], in_ids, out_ids, donate,
                     [FIRST_SIGHT_OPS if lv & 1 else MIN_OPS for lv in levels],
                     [(site[0], site[1], f"{site[2]} [{'changing ' if lv & 1 else ''}part {lv + 1}]") for lv in levels])


def _chunk_plan(ops, avals, in_ids, out_ids, site):
    """The plan of a repetitive cluster run in chunks (``_plan_chunks``), or None where it had better compile whole:
    not repetitive, or fewer than a third of its chunks are one part (two thirds until 2026-12-04). A recurrent
    network's training step repeats its cell forward, then its gradient, then updates its parameters: its chunks are
    of several kinds (the forward's each in another phase of the cell). When the quick tier compiled the whole step
    (10 s) that cost less than the chunks' executables (9 of 14 chunks: 15 s); compiled optimized, as now, whole it
    costs more: a 40-step LSTM language model's 1,251-op step 13.8 s against 4.0 s in chunks (7 kinds of 10), a
    100-step one's 3,051 ops 136 s against 4.8 s, and its chunks run as fast (0.08 against 0.16 s a step)."""
    size = _chunk_size(ops, avals)
    if not size:
        return None
    plan, members = _plan_chunks(ops, in_ids, out_ids, size, site)
    kinds = collections.Counter((tuple(g[0]), tuple([avals[i] for i in g[1]]), tuple(g[4])) for g in plan
                                if type(g) is not list)
    if not kinds or 3 * kinds.most_common(1)[0][1] < len(plan):
        return None
    return plan, members


def _plan_chunks(ops, in_ids, out_ids, size, site):
    """``_plan_parts``'s plan for a repetitive cluster: consecutive chunks of ``size`` ops (a whole number of its
    period, see ``_chunk_size``), sharing one site: chunks in the same phase of the loop are the same part -- one
    key, one executable."""
    n = len(ops)
    chunks = [list(range(k, min(k + size, n))) for k in range(0, n, size)]
    part_site = (site[0], site[1], f"{site[2]} [repeated part]")
    # (nothing donated: the first chunk, donating the loop's initial accumulator, would be a key of its own -- a
    # second compilation for one run; the inputs go when the cluster is done, as eager frees an updated value)
    return _parts_of(ops, chunks, in_ids, out_ids, (), [MIN_OPS] * len(chunks), [part_site] * len(chunks))


def _parts_of(ops, member_lists, in_ids, out_ids, donate, min_ops, sites):
    """The plan of a cluster run as the groups ``member_lists`` (lists of op positions, in an order their inputs
    allow): a group of fewer than its ``min_ops`` ops is run op by op (a list of op records), the others are parts
    ``(ops renumbered, their inputs' ids in the cluster, their local ids, results' ids in the cluster, their local
    ids, donated, site)`` -- numbered locally (inputs first, in the order read), so parts of the same ops on the
    same kind of values share a key. An input is donated to the part that reads it last."""
    group_of = {}  # local id -> the group computing it (inputs: none)
    for g, members in enumerate(member_lists):
        for k in members:
            for o in ops[k][2]:
                group_of[o] = g
    last_use = {}  # local id -> the last group reading it
    for g, members in enumerate(member_lists):
        for k in members:
            for i in ops[k][1]:
                if last_use.get(i, -1) < g:
                    last_use[i] = g
    wanted = set(out_ids)
    donated = {in_ids[k] for k in donate}
    plan = []
    for g, members in enumerate(member_lists):
        if len(members) < min_ops[g]:
            plan.append([ops[k] for k in members])
            continue
        # the part: its inputs (values from before it) numbered first, then its ops' outputs
        local, part_inputs = {}, []
        for k in members:
            for i in ops[k][1]:
                if i not in local and group_of.get(i, -1) != g:
                    local[i] = len(part_inputs)
                    part_inputs.append(i)
        n = len(part_inputs)
        part_ops = []
        for k in members:
            op, ins, outs = ops[k]
            for o in outs:
                local[o] = n
                n += 1
            part_ops.append((op, tuple(local[i] for i in ins), tuple(local[o] for o in outs)))
        results = [o for k in members for o in ops[k][2] if o in wanted or last_use.get(o, -1) > g]
        part_donate = tuple(j for j, i in enumerate(part_inputs) if i in donated and last_use[i] == g)
        plan.append((part_ops, part_inputs, list(range(len(part_inputs))), results, [local[o] for o in results],
                     part_donate, sites[g]))
    return plan, member_lists


# ---- repetitive clusters in chunks --------------------------------------------------------------------------
# An evaluation loop that reads its metric once an epoch (``correct += (pred == y).sum()``, ``.item()`` at the end)
# makes one cluster of the whole epoch: 400 batches of a 9-op forward, 3,600 ops. Compiled whole when it recurred
# (its second epoch), XLA:CPU took 20-30 s over its 400 convolutions -- the epoch ran 0.3 s eagerly, and 0.3 s
# compiled (its cost is collecting the ops, not running them). A 60-step LSTMCell loop's 3,500-op step: 8-10 s
# quick, 47 s optimized. Such a cluster repeats a short body: it runs as consecutive chunks of a whole number of
# bodies, which are the same part -- one small executable, run chunk after chunk.
CHUNK_MIN_OPS = 512  # a repetitive cluster at least this long runs in chunks
CHUNK_OPS = 128  # ... of about this many ops (whole periods)


def _chunk_size(ops, avals):
    """The chunk size for a cluster (0: run it whole): a multiple of the period of its op records (op and input
    types), found from its middle (a prelude before the loop does not count), near ``CHUNK_OPS``; 0 where the
    cluster is short, not repetitive, or has no period of at least 8 repetitions.

    Example:
        >>> a = ((2,), np.dtype("float32"), False)
        >>> body = [("mul", (0, 0), (1,)), ("add", (1, 0), (2,)), ("tanh", (2,), (3,))]
        >>> _chunk_size(body * 400, [a] * 4)
        129
        >>> _chunk_size(body * 100, [a] * 4)  # (short: whole)
        0
    """
    n = len(ops)
    if n < CHUNK_MIN_OPS or not _repetitive(ops, avals):
        return 0
    sigs = [(op, tuple([avals[i] for i in ins])) for op, ins, _ in ops]
    mid = n // 2
    first = sigs[mid]
    tried = 0
    for j in range(mid + 1, min(n, mid + n // 8 + 1)):
        if sigs[j] != first:
            continue
        p = j - mid
        if all(sigs[mid + t] == sigs[j + t] for t in range(min(2 * p, n - j))):
            return p * max(1, -(-CHUNK_OPS // p))
        tried += 1
        if tried >= 64:
            break
    return 0


class _Failed:
    """The cluster of the Lazy values whose cluster raised (or was given up: ``why``): reading one says so."""

    owner = None

    def __init__(self, why="failed when it ran (the error was raised there)"):
        self.why = why

    @staticmethod
    def flush():
        pass


_FAILED = _Failed()
_INTERRUPTED = _Failed("was given up before it took effect: a signal (Ctrl-C) arrived while it compiled or ran op by "
                       "op, and the tensors it updated in place kept their values from before it")


class _Local(threading.local):
    # Class-level defaults: a finalizer (a weakref callback, ``__del__``) run by a garbage collection inside this
    # thread's first ``__init__`` -- while ``_Cluster()`` allocates -- reads a fresh thread's state before __init__
    # has set it ("'_Local' object has no attribute 'paused'", printed as an ignored exception, seen once in the
    # suite); the defaults make every field readable from the first access on.
    forced = 0  # > 0 inside ``clustered()``: this thread collects while auto-jit is off
    paused = False  # this step runs eagerly (``ModeTimer`` found eager faster for it)
    last_hit = None  # the site state of this thread's latest cluster run by a cached executable
    last_sig = None  # and its key's (ops, input types, results) (_Entry.sig)
    issued = None  # the input Tensors of the latest op run eagerly in a paused step
    steps = 0  # step boundaries (``opt.step()``) this thread has passed
    # Values older than this (value ids below it) were made in the setup (a module's buffers, its device-made
    # constants): a ``GradManager.attach`` of a Parameter never attached before ends it. See _kept_constants.
    setup_vid = 0
    read_pause = None  # [site, its ModeTimer, ops left, ops per iteration]: iterations run eagerly
    changed = None  # the latest site whose new cluster differed from one before, since this thread's last step end
    # The latest cut was a host read while a GradManager recorded (a step's middle: a detector's count of matched
    # anchors), and whether the cluster running now came after such a read: it may hold shapes made from the value
    # read, so it does not compile at first sight (see _run_keyed)
    mid_read = False
    after_mid_read = False
    eager_input = False  # a pending value is computed for an op run eagerly (_arrays)
    # [(ops, avals, input ids)] of the clusters run since the last step end, while a step timer has not yet run
    # its step eagerly (see _warm_eager_kernels); None otherwise
    kernel_plan = None

    def __init__(self):
        self.cluster = _Cluster()


def _drain_issued():
    """Waits for the eager ops this thread issued in its paused step (the inputs of the latest: the ops before it
    that it does not depend on ran alongside) -- a ModeTimer's drain."""
    inputs, _local.issued = _local.issued, None
    if inputs:
        jax.block_until_ready([t._data for t in inputs if isinstance(t._data, jax.Array)])


@contextlib.contextmanager
def clustered():
    """Within the block the calling thread's eager ops are collected into clusters, auto-jit on or off
    (``xla_trace`` runs a step whose host reads keep missing its guards this way); its end is a cut.

    Example:
        >>> import megxla as mge
        >>> with clustered():
        ...     y = mge.Tensor([1.0, 2.0]) * 3 + 1
        >>> y.numpy()
        array([4., 7.], dtype=float32)
    """
    _install()
    _local.forced += 1
    try:
        yield
    finally:
        _local.forced -= 1
        flush("end of a clustered call")


_local = _Local()
# Parameters a GradManager has attached, by id (see flush; a WeakSet would compare Tensors with ``==``, elementwise)
_ATTACHED: dict = {}


def _swap_in(lazies):
    """Give the Tensors holding these (computed) Lazy values the arrays themselves (the owner thread only)."""
    for z in lazies:
        v = z.value
        if v is None:  # (a padded selection: its Tensors keep the Lazy)
            continue
        for ref in z.holders:
            t = ref()
            if t is not None and t._data is z:
                t._data = v


def _arrays(inputs):
    """The concrete arrays of ``inputs`` for an eager kernel (pending values computed first), or None where all
    already are (the kernel reads ``_data`` itself)."""
    for t in inputs:
        if type(t._data) is Lazy:
            loc = _local
            loc.eager_input = True  # (a cut this forces is no read of the user's: the report says so)
            try:
                return [_lazy.resolve(x) for x in inputs]
            finally:
                loc.eager_input = False
    return None


def _collect(op, inputs):
    """Core's compute hook: collect ``op`` into the calling thread's cluster (Tensors with Lazy data), or return
    None to have it run eagerly now (inputs made concrete first)."""
    # NOTE: the hot path of auto-jit, once per op (~2 us): one thread-local read, dict lookups, no Python calls but
    # the Lazy and Tensor constructors.
    loc = _local
    if not (_ON[0] or loc.forced) or (loc.paused and not loc.forced) \
            or (_dispatch._active and _dispatch._tls.s.interpreters[-1] is not None):
        if loc.paused:
            loc.issued = inputs  # (the inputs of this step's latest eager op: what its ModeTimer drains)
            rp = loc.read_pause
            if rp is not None:
                rp[2] -= 1
                if rp[2] < 0:  # (no read at the site for 4 iterations' ops: the loop has ended)
                    _end_read_pause(loc)
        # (an interpreter on top -- an exclude_from_trace block --, auto-jit off or paused) -- but an op on a
        # selection's full rows is collected still: a gradient op of one collected on them, or the sum of two such
        # gradients, is defined on the full rows (_padded)
        if (_dispatch._active and _dispatch._tls.s.interpreters[-1] is not None) or not _padded.on_rows(inputs):
            return _arrays(inputs)
    if op.prim is _SEQUENCE and len(dict(op.params)["steps"]) + len(loc.cluster.ops) > MAX_OPS:
        # (a GradManager's backward, see _collect_steps, that would take the cluster past its size cap: applied one
        # by one, the cap cutting it as ever)
        return _expand(op, inputs)
    cl = loc.cluster
    # No collection of garbage while the cluster changes: a ``__del__`` (or a weak reference's callback)
    # run by it could collect or read a pending value of this cluster from inside this function, or from
    # inside a flush, and find its lists half-built or emptied.
    # Ctrl-C waits until the op is in the cluster (one between two of its lists' appends misaligned them; one
    # while the collector's lock below was held left it held: the next op hung)
    held = _interrupt_enter(False)  # (the signals wrapped by now: a scan per op would cost ~0.7 us)
    try:
        _gc_pause()
        lock = cl.lock
        lock.acquire()
        try:
            if cl.deferred:
                cl.swap_deferred()
            if cl.cut is not None:
                cl.flush()
            if cl.capped or not cl.ops:
                # A loop that never reads is cut by the size caps. Cut where a cap falls, its clusters would each
                # start at another point of the loop's body, a new key every time (an inference loop keeping its
                # outputs: a dozen 4096-op executables compiled, half its clusters run op by op). Past a cap, the
                # cluster is cut before the next op like its first: the next one starts where it did, and they recur.
                sig = _op_sig(op, inputs)
                if cl.capped and (sig == cl.first or len(cl.ops) >= MAX_OPS + MAX_OPS // 2
                                  or cl.in_bytes > MAX_INPUT_BYTES + MAX_INPUT_BYTES // 2):
                    cl.flush("size cap", user_where())
                if not cl.ops:
                    cl.first, cl.started = sig, _perf_counter()
                    cl.start_key = (sig, bool(_dispatch.recorders))
                    if cl.start_key in _capped_starts:  # (see _capped_starts)
                        cl.after_cap = True
                    if _made:
                        made = cl.made = list(_made)
                        n = len(made)
                        cl.made_at = {id(m): k - n for k, r in enumerate(made) if (m := r()) is not None}
                    g = cl.guesses.get(sig)
                    if g is not None and g.executable is not None and g.early():
                        cl.guess = g
            if _CROSS_PROCESS and op in _CROSS_PROCESS and cl.ops and not any(type(t._data) is Lazy for t in inputs):
                _stats.eager_ops += 1  # (a collective on concrete values: run now, the cluster going on around it)
                return [t._data for t in inputs]
            avals = cl.avals
            vmap = cl.vmap
            ids = []
            padded = op.prim is _PAD_SELECT
            for t in inputs:
                d = t._data
                if type(d) is Lazy:
                    if d.cluster is cl and d.value is None:
                        ids.append(d.index)
                        if d.pad is not None:
                            padded = True
                        continue
                    if d.phys is not None:  # (a selection an earlier cluster computed: all its rows)
                        d = d.phys
                        padded = True
                    else:
                        d = _lazy.resolve(t)
                vid = t._vid
                i = vmap.get(vid)
                # A Python number's cached tensor (``x * 0.5``) is one input per use: shared, the key would change with
                # the values (a loss weight ramp reaching 0.5, another constant of the step: one input fewer, a new key
                # run op by op once).
                if i is None or vid in _SCALAR_VIDS:
                    i = cl.add_input(d, vid)
                    cl.in_refs.append(_ref(t))
                    cl.in_made.append(cl.made_at.get(id(t)) if cl.made_at else None)
                    if cl.launched is not None and not cl.launched.same(len(cl.inputs) - 1, d, vid):
                        cl.unguess()
                ids.append(i)
            pad = None
            if padded:  # (boolean selections kept in place: _padded)
                # (an op row by row -- most ops on a selection -- is collected below, its results padded too)
                pad = None if op.prim is _SEQUENCE else _padded.rows(op, inputs)
            if padded and pad is None:
                out = _padded.collect_steps(cl, op, ids, inputs) if op.prim is _SEQUENCE else \
                    _padded.collect(cl, op, inputs, ids)
                if out is not None:
                    if len(cl.ops) >= MAX_OPS or cl.in_bytes > MAX_INPUT_BYTES:
                        cl.capped = True
                    return out
                cl.flush(f"{op.name} runs eagerly", user_where())
                _stats.eager_ops += 1
                return [_lazy.resolve(t) for t in inputs]
            if op.prim is _SEQUENCE:
                return _collect_steps(cl, op, ids, inputs)
            key = (op, tuple([avals[i] for i in ids]))
            outs = _SHAPES.get(key, _MISSING)
            if outs is _MISSING:
                if pad is not None:  # (on a selection's full rows: an error says what eager says, on its rows)
                    outs = _padded.infer(cl, op, key, ids, inputs)
                else:
                    outs = _infer(op, key, inputs)
            if outs is None:  # not collected: the cluster runs first, then this op, eagerly
                cl.flush(f"{op.name} runs eagerly", user_where())
                _stats.eager_ops += 1
                return [_lazy.resolve(t) for t in inputs]
            base = len(avals)
            lazies = cl.lazies
            result = []
            for aval in outs:
                z = Lazy(aval[0], aval[1], aval[2], cl, len(avals))
                avals.append(aval)
                lazies.append(z)
                t = _new(_Tensor)
                t._data = z
                t._vid = next(_vids)
                t._grad = None
                t._name = None
                z.holders = [_ref(t)]
                result.append(t)
                if pad is not None:
                    z.pad = pad
            rule = _RANGE_RULES.get(op.name)
            if rule is not None:
                rule(op, inputs, result)
            ops = cl.ops
            ops.append((op, tuple(ids), tuple(range(base, len(avals)))))
            if cl.guess is not None:
                cl.follow()
            if len(ops) >= MAX_OPS or cl.in_bytes > MAX_INPUT_BYTES or (cl.after_cap and len(ops) >= LOOP_MAX_OPS):
                cl.capped = True
            return tuple(result)
        finally:
            lock.release()
            _gc_resume()
    except _Uncollectable:
        pass  # (the sequence's steps are applied one by one, below, outside the lock)
    except _padded.NeedCount as need:
        # (the op runs on a selection itself, or raises an error naming its shape: its count is read -- a cut,
        # outside the lock -- and the op collected again; or it is not collected on the rows: it runs eagerly)
        if need.pad is not None:
            need.pad.count()
            return _collect(op, inputs)
        cl.flush(f"{op.name} runs eagerly", user_where())
        _stats.eager_ops += 1
        return [_lazy.resolve(t) for t in inputs]
    finally:
        if held:
            _interrupt.leave()
    return _expand(op, inputs)


def _pending(cl, i, pad=None):
    """A Tensor of the cluster's value ``i``, pending (its Lazy's ``pad``: a selection's, see _padded). (The same
    as _collect makes its results -- written out there: its hot path calls no helper.)"""
    aval = cl.avals[i]
    z = Lazy(aval[0], aval[1], aval[2], cl, i)
    z.pad = pad
    cl.lazies.append(z)
    t = _new(_Tensor)
    t._data = z
    t._vid = next(_vids)
    t._grad = None
    t._name = None
    z.holders = [_ref(t)]
    return t


_SEQUENCE_TYPES: dict = {}  # (sequence op, input types) -> its steps' output types (see _collect_steps)
SEQUENCE_TYPES_KEPT = 256  # (it keeps its sequence ops, and their steps' ops, alive)


def _collect_steps(cl, op, ids, inputs):
    """(``_collect``, lock held) Collect the steps of a ``sequence`` op on the cluster values ``ids``: the cluster
    gets exactly the ops it would get had each step been applied on its own -- same key, same executable --, but
    only the sequence's results get a Lazy and a Tensor (its gradient walk's intermediate sums and per-op gradients
    are values of the cluster alone). Raises _Uncollectable, the cluster unchanged but for inputs, where a step
    cannot be part of a cluster."""
    params = dict(op.params)
    avals, ops = cl.avals, cl.ops
    types = [avals[i] for i in ids]
    # each step's output types (first, all of them: a step that cannot be collected changes nothing), the same
    # for the same sequence on the same input types (a GradManager's walk every step: one lookup, not one a step)
    seq_key = (op, tuple(types))
    plan = _SEQUENCE_TYPES.get(seq_key)
    if plan is None:
        plan = []
        for step, positions in params["steps"]:
            key = (step, tuple([types[i] for i in positions]))
            outs = _SHAPES.get(key, _MISSING)
            if outs is _MISSING:
                outs = _infer(step, key, inputs)
            if outs is None:
                raise _Uncollectable
            types.extend(outs)
            plan.append(outs)
        if len(_SEQUENCE_TYPES) >= SEQUENCE_TYPES_KEPT:
            _SEQUENCE_TYPES.clear()
        _SEQUENCE_TYPES[seq_key] = plan
    env = list(ids)
    for (step, positions), outs in zip(params["steps"], plan):
        base = len(avals)
        avals.extend(outs)
        made = tuple(range(base, len(avals)))
        ops.append((step, tuple([env[i] for i in positions]), made))
        env.extend(made)
        if cl.guess is not None:
            cl.follow()
    wanted = [env[o] for o in params["outs"]]
    # (in the order of the values: the order applying the steps one by one made them)
    made = {i: _pending(cl, i) for i in sorted(set(wanted))}
    if len(ops) >= MAX_OPS or cl.in_bytes > MAX_INPUT_BYTES or (cl.after_cap and len(ops) >= LOOP_MAX_OPS):
        cl.capped = True
    return tuple([made[i] for i in wanted])


# Where an integer result's entries lie, noted at collection (``Lazy.bounds``, read by ``_lazy.known_range`` when
# an index check needs it): the check passes without reading the value, which would cut the cluster. An entry is
# ``(lo, hi)``, a weak reference to a concrete array (its min and max computed only if a check asks; a strong one
# would keep an input from being donated), or a list of entries; never a Lazy (a reference to it would make it a
# result of the cluster).
def _op_sig(op, inputs):
    """``op`` with the shapes and dtypes of its inputs: what a loop's body repeats at the same point."""
    # (a Lazy's ``raw_shape``: a padded selection's count is not read for it)
    return op, tuple([(d.raw_shape if type(d) is Lazy else d.shape, d.dtype) for d in [t._data for t in inputs]])


def flush(reason="trace starts", attached=()):
    """Run the calling thread's pending cluster now (core's ``_lazy.FLUSH``: before an interpreter starts).
    ``attached``: the tensors a ``GradManager.attach`` (the reason "parameters attached") attaches."""
    loc = _local
    cl = loc.cluster
    if cl.ops:  # (a cut requested at the end of ``opt.step()`` keeps its reason and line)
        cl.flush(reason, user_where() if cl.cut is None else None)
    if cl.deferred:
        cl.swap_deferred()
    if attached:
        # (the setup ends where a model's parameters are first attached -- a second model's, a discriminator's, a
        # model built later in a notebook; parameters attached again at every step are no new setup, nor is an
        # input attached for its gradient)
        new = False
        for t in attached:
            if isinstance(t, Parameter):
                k = id(t)
                r = _ATTACHED.get(k)
                if r is None or r() is not t:
                    _ATTACHED[k] = weakref.ref(t, lambda _, k=k: _ATTACHED.pop(k, None))
                    new = True
        if new:
            loc.setup_vid = next(_vids)


def step_boundary(reason="opt.step", now=False):
    """The natural end of a training step (``Optimizer.step``): the pending cluster is cut at the next op or read,
    so what the program drops right after (``opt.clear_grad()``) is not a result of the cluster. ``now``: the start
    of ``gm.backward``, a cut only with ``CUT_AT_BACKWARD``."""
    loc = _local
    if now:
        if CUT_AT_BACKWARD and ((_ON[0] and not loc.paused) or loc.forced) and loc.cluster.ops:
            loc.cluster.flush(reason, user_where())
        return
    loc.steps += 1
    if loc.read_pause is not None:
        _end_read_pause(loc)
    if _ON[0] or loc.forced:
        cl = loc.cluster
        site = user_where()
        if cl.ops and cl.cut is None:
            cl.cut = (reason, site)
        if _ON[0] and not loc.forced:
            _choose_mode(loc, site)


# Steps whose clusters keep running op by op (shapes that follow a count read on the host: a detector's losses)
# pay collection on top of eager execution. Once a step site has had TROUBLED_STEPS such steps, a ModeTimer times
# its steps as clusters and eagerly (no collection) and runs the faster.
# (Counted after WARMUP_STEPS: the first steps of any program run their clusters op by op until they recur. 4 and
# 4: static programs have no such step after their second or third; a detector's step times itself from step ~8
# and has chosen by step ~18.)
TROUBLED_STEPS = 4
WARMUP_STEPS = 4
# Steps of at most STATIC_MAX_OPS ops whose clusters run compiled are timed too (see _choose_mode): eager is chosen
# only if faster by STATIC_MARGIN, and the other mode probed again 50, 100, 200... steps after a choice
# (ModeTimer.FIRST_EVERY), up to every STATIC_EVERY steps
STATIC_TIMER = os.environ.get("MEGXLA_AUTO_JIT_STATIC_TIMER", "1") != "0"
STATIC_MAX_OPS = 256
STATIC_MARGIN = 0.2
TROUBLED_MARGIN = 0.1  # (a troubled step runs as clusters only where they take at most 0.9x eager's time)
STATIC_EVERY = 1000
_steps: dict = {}  # step site -> [ops collected, of them run op by op (at the last step end), troubled steps, timer,
#                                  steps, warned that they run eagerly, of the ops run op by op those of small
#                                  clusters (at the last step end), troubled steps troubled by changing clusters,
#                                  the site of the latest changing cluster in those, its eager kernels compiled
#                                  ahead (_warm_eager_kernels)]


def _choose_mode(loc, site):
    st = _steps.get(site)
    s = _stats
    if st is None:
        st = _steps[site] = [0, 0, 0, None, 0, False, 0, 0, None, False]
    # (the changes seen since this thread's last step end: this step's clusters and its predecessor's last one --
    # named in the warning, not another loop's: a detector's training and a validation loop taking turns)
    changed, loc.changed = loc.changed, None
    timer = st[3]
    if timer is None:
        # (the ops of this step: those run, and those pending until the step's cut)
        ops, fallback, small = s.ops + len(loc.cluster.ops), s.eager_cluster_ops, s.small_cluster_ops
        st[4] += 1
        n, by_op = ops - st[0], fallback - st[1]
        if st[4] > WARMUP_STEPS and 4 * by_op >= n > 0:
            st[2] += 1  # a quarter or more of this step's ops ran op by op
            if 4 * (by_op - (small - st[6])) >= n:
                st[7] += 1  # ... in clusters worth a launch: clusters that had not recurred (changing ones)
                st[8] = changed or st[8]
        st[0], st[1], st[6] = ops, fallback, small
        if st[2] >= TROUBLED_STEPS:
            # (5 steps as clusters first; then clusters only where 10% faster: such steps' keys keep changing, so
            # their times are noisy -- compilations, new kernels -- and eager is the mode never slower than eager.
            # The detector's step, at margin 0: clusters chosen at 9.1 ms against 9.4 for eager in one process,
            # then run 50 steps at 8-13 ms where eager ran 6.5)
            timer = st[3] = ModeTimer(warmup=ModeTimer.PROBE, margin=-TROUBLED_MARGIN, drain=_drain_issued)
        elif STATIC_TIMER and st[4] > WARMUP_STEPS and st[2] == 0 and by_op == 0 and 0 < n <= STATIC_MAX_OPS:
            # A small step whose clusters are compiled: it may still run faster eagerly, where its compute takes
            # about as long as its Python -- eager computes each op while Python issues the next, a cluster runs
            # once the whole step is collected (the digits demo's ConvNet: 0.95 ms eager, 1.5 ms as a cluster). It
            # runs eagerly only if that is clearly faster (STATIC_MARGIN: no flip-flopping between two close modes,
            # whose numbers differ in the last bits), and probes again rarely. (Large steps are not timed: their
            # eager probe would compile every eager kernel of the step, seconds in a cold process.)
            # (a warmup of 10 steps: an early launch's executable, compiled at about the 4th step, runs its first
            # steps slower -- timed from the 5th, clusters lost to eager on the ConvNet b8 step they run faster)
            timer = st[3] = ModeTimer(warmup=2 * ModeTimer.PROBE, margin=STATIC_MARGIN, every=STATIC_EVERY,
                                      drain=_drain_issued)
            st[5] = True  # (no warning: the step is not troubled, eager is just faster for it)
        else:
            return
    paused = not timer.next_mode()
    if paused and not st[9]:
        st[9] = True
        _warm_eager_kernels(loc)
    loc.paused = paused
    loc.kernel_plan = None if st[9] or timer.fixed else []  # (fixed: no eager step to compile ahead for)
    if loc.paused:
        s.eager_steps += 1
        if not timer.best and not st[5]:
            st[5] = True
            # (only where changing clusters made the steps run op by op: host reads that cut a fixed step into
            # clusters too small to launch -- a grad norm logged per parameter -- are no shape to pad)
            if 2 * st[7] >= st[2]:
                _warn_eager_steps(site, st[8])


KERNEL_PLAN_CLUSTERS = 64  # clusters of one step whose ops a step timer's first eager step compiles ahead


def _warm_eager_kernels(loc):
    """(A step timer's first eager step starts) Compile the eager kernels of the step just run -- its clusters, and
    the one its end cut, still pending -- on the worker threads (:mod:`._kernels_ahead`), and wait for them.

    Why: a step whose clusters run compiled has never run its ops' eager kernels; the timer's first eager step then
    compiled them one after another on the calling thread -- a one-time 0.35-1.3 s step among 20-130 ms ones
    (Hand-Signs, LearnMegEngine, ResNeXt-IBN; a DANN's ~1 s). The kernels are the step's, as eager runs them, and
    the workers compile them side by side -- XLA's compile releases the GIL, the tracing before it does not: on 2
    cores a cold ResNeXt-IBN's stall 7.8-10.2 -> 6.8-7.7 s, a warm cache's loads unchanged. That step is not timed
    (the timer leaves an eager run's first step out)."""
    plans = loc.kernel_plan or []
    cl = loc.cluster
    if cl.ops:
        plans = plans + [(cl.ops, cl.avals, cl.in_ids)]
    futures = []
    for ops, avals, in_ids in plans:
        env = {i: jax.ShapeDtypeStruct(avals[i][0], avals[i][1], weak_type=avals[i][2]) for i in in_ids}
        ahead = _kernels_ahead.compile_ahead(ops, env, _SHAPES, _input_type)
        if ahead is not None:
            futures.extend(f for f in ahead if f is not None)
    for f in futures:
        _kernels_ahead.wait(f)


# A loop that reads a value on the host every few ops (a solver checking its residual, a decoder reading its token)
# and has no ``opt.step()`` in its body gets no step timer: each iteration is a cluster cut by the read, and a
# cluster's fixed cost (its executable call, the cut, the read: ~60-80 us on the 2-core CPU) can outweigh what
# collecting saves on a few cheap ops -- an 8x8 solver iteration of 6 ops took 168 us as a cluster, 109 eagerly. So
# a host-read line whose clusters (of at most STATIC_MAX_OPS ops) ran READ_WARMUP times in a row with no step
# boundary between them gets a ModeTimer of its own, timing its iterations (read to read) both ways, as a small
# step's is. Eager iterations are not collected at all; the pause ends at a step boundary, when auto-jit is
# switched off, or once 4 iterations' worth of ops ran with no read at that line (the loop has ended).
READ_WARMUP, READ_PROBE = 8, 20
_reads: dict = {}  # (file, line) of a host read -> [clusters cut there in a row, ModeTimer or None, steps then]
_read_paused = [0]  # threads whose iterations run eagerly now (the read hook is set while there are any)
# (counted without a lock: a miscount only leaves the hook set for nothing -- it returns at once in a thread not
# paused -- or clears it early, and that thread's pause then ends by its op budget: back to clusters)


def _read_site(loc, n_ops):
    """(The owner thread, after a cluster cut by a host read ran) time that line's iterations once they recur."""
    if loc.paused:  # (a value pending from before a pause, read now: the pause's timer is the one timing)
        return
    site = user_line()
    st = _reads.get(site)
    if st is None:
        if len(_reads) >= CACHE_SIZE:
            _reads.clear()
        st = _reads[site] = [0, None, loc.steps]
    if n_ops > STATIC_MAX_OPS or st[2] != loc.steps and st[1] is None:
        # (a step boundary between its first reads: the step timer's, where a step reads there fewer times)
        st[0], st[1], st[2] = 0, None, loc.steps
        return
    if st[2] != loc.steps:
        # A line read READ_WARMUP times within one step keeps its timer over the step boundaries: a policy's rollout
        # reading 16 actions an episode, then its update, was timed for no more than 16 reads at a time -- never
        # to a choice. The iteration across the boundary (the update in it) is not timed.
        st[1].restart()
        st[2] = loc.steps
    st[0] += 1
    if st[1] is None:
        if st[0] < READ_WARMUP:
            return
        # (no drain: an iteration ends with a read, which waits for its work; READ_PROBE iterations a probe -- an
        # iteration takes ~0.1 ms, and 5 of them were too few to tell 115 from 170 us)
        st[1] = ModeTimer(warmup=READ_PROBE, margin=STATIC_MARGIN, every=STATIC_EVERY)
        st[1].PROBE = READ_PROBE
    if not st[1].next_mode():
        budget = 4 * n_ops + 16
        loc.paused = True
        loc.read_pause = [site, st[1], budget, budget]
        _read_paused[0] += 1
        _lazy.READ[0] = _on_read
        _stats.eager_reads += 1


def _on_read():
    """(core's ``_lazy.READ``) A host read of a concrete tensor while some thread runs a loop's iterations eagerly:
    at that loop's read line, one iteration has ended -- its timer chooses how the next one runs."""
    loc = _local
    rp = loc.read_pause
    if rp is None or user_line() != rp[0]:
        return
    if rp[1].next_mode():
        _end_read_pause(loc)  # (clusters again: the next iteration is collected, its read timed at the cut)
    else:
        rp[2] = rp[3]
        _stats.eager_reads += 1


def _end_read_pause(loc):
    loc.read_pause = None
    loc.paused = False
    _read_paused[0] -= 1
    if _read_paused[0] <= 0:
        _read_paused[0] = 0
        _lazy.READ[0] = None


def _warn_eager_steps(site, changed):
    """Once per step line: its steps now run eagerly, their clusters having kept changing (the give-up made
    visible, as for a megamorphic line: these steps never reach one's limit, being mostly eager); ``changed``: the
    site of the latest such cluster seen in those steps -- or the step's own line, where the clusters it cuts
    changed (another loop's cluster, cut after this step's end, may be the latest seen)."""
    if site in _sites and _sites[site][5] is not None:
        changed = site
    change = _site_change(_sites[changed]) if changed in _sites else None
    why = (f"the clusters cut at {describe_where(changed)} keep changing (the last two: {change})" if change
           else "their clusters keep changing")
    warnings.warn_explicit(
        f"auto-jit: the steps ending at {describe_where(site)} run eagerly: {why}, and eager steps took less "
        f"time. Pad to fixed shapes, or pass changing numbers as tensors, to have them compiled (megxla.jit."
        f"auto_jit_report() says what else cut them)", UserWarning, site[0], site[1])


_made = collections.deque(maxlen=8)  # weak references to the latest Tensors made from host data (any thread)


def _note_made(t):
    """(core's ``_lazy.MADE`` while auto-jit is on) ``t`` was made from host data."""
    _made.append(_ref(t))


def enable(on=True):
    """Switch auto-jit on or off for the whole process (``megxla.config.auto_jit`` calls this). Switched off, the
    pending clusters of the calling thread run first.

    Example:
        >>> from megxla.jit._autojit import enable, enabled
        >>> enable(False); enabled()
        False
    """
    on = bool(on)
    if not on and _ON[0]:
        flush("auto-jit switched off")
    if _local.read_pause is not None:
        _end_read_pause(_local)
    _local.paused = False  # (a step's eager mode ends with the setting that chose it)
    _ON[0] = on
    _padded.install(on)
    _lazy.WANTED[0] = on
    _lazy.MADE[0] = _note_made if on and EARLY else None
    _gc_young(on)
    if on:
        _install()
        _persist.prewarm()
        if os.environ.get("MEGXLA_AUTO_JIT_REPORT", "0").strip() == "1":
            from . import _report  # (imports this module: at call time)
            _report.print_at_exit()


def _install():
    _padded.install(True)
    _lazy.COLLECT[0] = _collect
    _lazy.FLUSH[0] = flush
    _lazy.STEP_END[0] = step_boundary
    _lazy.GRADS_CLEARED[0] = _grads_cleared
    _lazy.COLLECTING[0] = _collecting_at_backward if GROUP_BACKWARD else None
    _lazy.CLUSTER_NOW[0] = _cluster_now
    _lazy.STEP_NOW[0] = _step_now
    _lazy.DEFER_CHECK[0] = _defer_check


def _grads_cleared(pairs):
    """(core's ``_lazy.GRADS_CLEARED``) :meth:`_Cluster.grads_cleared` of the calling thread's cluster."""
    if pairs:
        _local.cluster.grads_cleared(pairs)


def collecting() -> bool:
    """Whether the calling thread's ops are collected into a cluster now (not run op by op: auto-jit on and this
    step not paused, or a ``clustered()`` block; no interpreter -- a trace -- on top).

    Example:
        >>> from megxla.jit._autojit import clustered, collecting
        >>> with clustered():
        ...     collecting()
        True
    """
    loc = _local
    return bool((_ON[0] and not loc.paused) or loc.forced) \
        and not (_dispatch._active and _dispatch._tls.s.interpreters[-1] is not None)


def _collecting_at_backward():
    """(core's ``_lazy.COLLECTING``, asked as ``gm.backward`` starts and as a GradManager starts recording)
    :func:`collecting`. A loop's iterations run eagerly between its host reads (a read-site timer's choice) end
    there: the loop is over, and the step is one cluster again -- run eagerly until the pause ran out of ops, a
    policy gradient's backward took 1.4 ms where its cluster takes 0.9, and a model's initialisation reading host
    draws made its first step's cluster start at a varying op (a key that never recurs). A loop inside the
    recording goes on as its timer chooses at its next read."""
    loc = _local
    if loc.read_pause is not None:
        _end_read_pause(loc)
    return collecting()


def _defer_check(op, idx, dim, axis, allow_negative, what):
    """(core's ``_lazy.DEFER_CHECK``) Range-check pending ``idx`` (see _device_checks: on the host until its line's
    checks have held there, then inside the calling thread's cluster): True, else False -- not collecting now, the
    value another cluster's or the cluster about to be cut (the caller reads it)."""
    cl, d = _local.cluster, idx._data
    if d.cluster is not cl or d.phys is not None or cl.cut is not None or not collecting():
        return False
    n = len(cl.checks)
    if not _device_checks.defer(cl, op, idx, dim, axis, allow_negative, what):
        return False
    _stats.device_checks += len(cl.checks) - n
    return True


def _step_now():
    """(core's ``_lazy.STEP_NOW``) The training steps the calling thread has ended."""
    return _local.steps


def _cluster_now():
    """(core's ``_lazy.CLUSTER_NOW``) The calling thread's cluster (its id) and the generation its next op joins (a
    cut requested at the end of ``opt.step()`` is made at that op, so it joins the next one), or None where its ops
    are not collected now (a paused stretch makes no cluster: no two ops in one)."""
    cl = _local.cluster
    return (id(cl), cl.gen + (cl.cut is not None)) if collecting() else None


def enabled() -> bool:
    """Whether auto-jit collects eager ops now."""
    return _ON[0]


_lazy.SWITCH[0] = enable
if _lazy.WANTED[0]:  # (``config.auto_jit`` was set, or MEGXLA_AUTO_JIT=1, before jit was imported)
    enable(True)
