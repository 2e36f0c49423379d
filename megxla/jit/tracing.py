"""``trace`` / ``xla_trace``: record a call, then run it as compiled XLA executables.

States of one traced function, per input signature (the structure, shapes and dtypes of its arguments and
of the state reachable from them):

1. *record*: the first call runs eagerly under a :class:`Recorder`, which logs every op as data.
2. *compile*: the next call replays the recording inside ``jax.jit`` (ahead of time: lower + compile).
3. *exec*: that call and later ones run the executable; state tensors reachable from the arguments are
   inputs, the ones the step reassigned are outputs written back into the same Tensor objects.

``without_host=True`` (xla_trace's default) runs no Python on compiled calls. ``without_host=False``
(trace's default) runs the Python body against the recording (``_replay.py``): each op is checked and gets its
value from the executable, which is split into segments at the points where the recording read values on the host.

Guards. Every value the body read on the host while recording (``int(t)``, ``bool(t)``, ``t.numpy()``, a slice
bound taken from a tensor) decided what was recorded. Without the host, the executable also returns those values
and the call compares them with the recorded ones before writing any state (one sync per call, only for steps
that read values); with the host, the replay compares them as the body reads them. On a mismatch nothing is
written: another recording of the same signature whose guard values match runs instead, or the call records
again (``strict=True``: raises a TraceError naming the line). Recordings of one signature are its *variants*.

Calls are transactional: a call that raises leaves every state tensor, ``.grad`` and the RNG key as before; once
an executable has returned (its donated inputs are gone), its writes are completed even if interrupted. Ctrl-C
(SIGINT) is held from just before an executable runs until its writes are done and raised right after
(``_interrupt.py``), so an interrupted step is applied in full or not at all.
"""
from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import threading
import time
import warnings
import weakref
from collections import OrderedDict

import numpy as np
import jax

from ..core import _dispatch, _interrupt, _lazy
from . import _autojit
from ..core._dispatch import wrap, push_interpreter, pop_interpreter, current_interpreter
from ..core._op import Primitive, VJP
from ..core.ops.elemwise import NON_DIFFERENTIABLE as _NONDIFF, NON_DIFFERENTIABLE_OUTPUTS as _NONDIFF_OUT
from ..core.ops.shape import detach as _DETACH, full_like as _FULL_LIKE
from ..core.dtypes import is_float
from ..core._tensor import Tensor
from ..core import _spmd
from .. import dtr as _dtr
from ..core import _registry
from ..core._trace_option import set_symbolic_shape  # noqa: F401  (MegEngine's jit.tracing exports it)
from . import _fastpath, _persist, _schedules, _state, _tiers, _verbose
from ._external import mark_external
from . import _external
from ._recording import (Recorder, AbstractRecorder, NeedsHost, Excluded, TraceError, make_replay, usable_donations,
                         _needs_host, unhandled_need,
                         describe_where, user_where, _TRACER_ERRORS, _user_frame)
from ._simplify import simplify
from ._replay import (_Replayer, _GuardMismatch, _StaleExternals, _same, _flatten, _grad_env, _overflowed,
                      drop_overflowed_grads)

__all__ = ["trace", "xla_trace", "exclude_from_trace", "is_tracing", "TraceError", "load"]


class _Graph:
    """A compiled subgraph as an op parameter: hashable by identity, its replay a pure JAX function.

    ``recorded``: ``(ops, in_vids, out_vids, avals)`` -- the recorded ops the graph computes (as recorded, before
    simplification), its inputs and outputs -- from which :meth:`nondiff` tells a GradManager which inputs get no
    gradient."""

    def __init__(self, replay, name, recorded=None):
        self.replay = replay
        self.name = name
        self._recorded = recorded
        self._nondiff = {}

    def __repr__(self):
        return self.name

    def nondiff(self, given):
        """The input positions no gradient reaches from the outputs ``given`` marks (a bool per output).

        ``jax.vjp`` of the replay gives every float input a gradient, zeros where none flows; the ops taped one by
        one give such an input none (``.grad`` stays None, an optimizer leaves the parameter and its slots as they
        are). So the graph applies the tape's rules to its recording: ``detach`` cuts, an op without a gradient
        (``NON_DIFFERENTIABLE``: ``floor``, comparisons' inputs...) cuts those inputs, outputs in
        ``NON_DIFFERENTIABLE_OUTPUTS`` carry none, nor do integer values -- and only the outputs with a cotangent
        (not a BatchNorm statistic written back) count.

        Example:
            >>> _Graph(None, "g").nondiff((True,))  # (no recording: every input may get a gradient)
            frozenset()
        """
        cut = self._nondiff.get(given)
        if cut is None:
            cut = self._nondiff[given] = frozenset() if self._recorded is None else _unreached(*self._recorded, given)
        return cut


def _resolved(t):
    """Make ``t`` hold a concrete array (auto-jit's pending value computed). A boolean selection kept padded
    (``jit/_padded``) keeps its ``Lazy`` once computed -- a later cluster takes its padded rows --, which a trace
    must not see: JAX refused it as a step's input (``__jax_array__`` during abstractification), every trace of a
    step given ``x[mask]`` failed under auto-jit. It takes the selection's rows themselves."""
    v = _lazy.resolve(t)
    if type(t._data) is _lazy.Lazy and getattr(t._data.cluster, "owner", None) is None:
        t._data = v


def _unreached(ops, in_vids, out_vids, avals, given):
    need = {v for v, g in zip(out_vids, given) if g}
    for op, ins, outs in reversed(ops):
        cut_out = _NONDIFF_OUT.get(op.name, ())
        if op.prim is _DETACH or not any(v in need for i, v in enumerate(outs) if i not in cut_out):
            continue
        cut_in = _NONDIFF.get(op.name, ())
        if cut_in is None:  # (no gradient at all)
            continue
        need.update(v for i, v in enumerate(ins) if i not in cut_in and v in avals and _has_gradient(avals[v].dtype))
    return frozenset(k for k, v in enumerate(in_vids) if v not in need)


def _has_gradient(dtype):
    # (the GradManager's _is_float on a dtype: jit imports only core, tests/test_layers.py)
    return is_float(dtype) or np.dtype(dtype).kind == "c"


def _recorded(entry):
    """What :class:`_Graph` needs of a compiled entry (one segment) to tell which inputs get a gradient."""
    seg = entry.segments[0]
    return entry.rec.ops[seg.start:seg.end], seg.in_vids, seg.out_vids, entry.avals


# transient: the op (and its executable) lives as long as the cache entry that owns it, not forever
XLA_GRAPH = Primitive("xla_graph", lambda *arrays, graph: graph.replay(*arrays), multiple_results=True,
                      transient=True, nondiff_inputs=lambda params, given: params["graph"].nondiff(given))


class _LoweredOnDemand:
    """A segment's ``jax.stages.Lowered``, made when something reads it (``compiler_ir``, ``MGE_VERBOSE_XLA_IR``):
    a segment compiled from a kept lowered program (``_persist``) has none until then."""

    def __init__(self, replay, donate, avals):
        self._args, self._lowered = (replay, donate, avals), None

    def __getattr__(self, name):
        if self._lowered is None:
            replay, donate, avals = self._args
            self._lowered = _spmd.jit(replay, donate_argnums=donate, name=replay.__name__).lower(*avals)
        return getattr(self._lowered, name)


class _Segment:
    __slots__ = ("ops", "in_vids", "out_vids", "start", "end", "executable", "lowered", "run", "plan")

    def __init__(self, ops, in_vids, out_vids, start, end):
        self.ops, self.in_vids, self.out_vids, self.start, self.end = ops, in_vids, out_vids, start, end
        self.executable = self.lowered = self.plan = None


class _Entry:
    """One input signature's recording and (once compiled) its executables."""

    def __init__(self, rec, out_tree, out_leaves, writes, grad_writes, avals):
        self.rec = rec
        self.out_tree = out_tree
        self.out_leaves = out_leaves  # per leaf: ("t", vid) or ("v", python value)
        self.writes = writes  # [(state index, vid)]
        self.grad_writes = grad_writes  # [(state index, vid or None)]: new ``.grad`` of state tensors
        self.avals = avals  # {vid: ShapeDtypeStruct}
        self.segments = None
        self.graph_op = None
        self.donate = ()
        self.guards = []  # [(vid, recorded value, user line)]: values read on the host that depend on data
        self.read_log = []  # [(value, user line, is_guard)] every guarded host read, in order (replay compares)
        self.guard_src = ()  # [(from outputs?, index)] where each guard's value is in a compiled call
        self.gms = ()  # [(weakref to GradManager, its attach version)] at recording
        self.grad_key = None  # which state tensors had a ``.grad`` at recording, if the step computes gradients
        self.grad_inplace = frozenset()  # state indices whose .grad object was updated in place
        self.confirmed = False  # recorded twice with the same guard values: worth compiling
        self.new_state = ()  # [(Tensor, vid)] state an abstract recording created: outputs of its one call
        # [(state index, vid of a 0-d bool)]: a new ``.grad`` that leaves the step with a GradScaler's overflow
        # flag (core._registry grad gate); where the flag is set, the call leaves that ``.grad`` None, as eager
        self.grad_gates = ()
        # [(weakref to a module, attribute, value)]: Python attributes the body set (``net.eval()`` inside the
        # step); a compiled call without the host sets them again after it ran
        self.py_writes = ()
        # (with the host) vids of values the body kept beyond the call other than as results or state (a tensor
        # stored on a module captured from the enclosing scope): outputs of the executables, so the tensors
        # holding them can be read after compiled calls; escape_refs: those of the recording call, which an
        # abstract recording's first run gives their values
        self.escaped = frozenset()
        self.escape_refs = ()
        self.first_externals = None  # (abstract recording) the external tensors it read, for its first run
        # {leaf index: state index}: results that are state Tensor objects themselves (``return net.b`` after
        # ``net.b += x``); every other returned Tensor is a Tensor of its own, even where it holds a state's
        # value (``y = net.b + x; net.b._reset(y); return y``): ``y += 1`` afterwards must not change ``net.b``
        self.out_state = {}
        # per external tensor: (weakref to the module, attribute) that held it when the call started, or None:
        # the body (or code between calls) rebinding that attribute makes this recording stale (_live_externals)
        self.external_homes = ()


def _structure(entry):
    """What a recording computes, without its values: each op (with its parameters) and its inputs' shapes and
    dtypes, in order -- equal for two recordings that differ only in numbers the ops take as inputs."""
    types = {v: (a.shape, a.dtype) for v, a in entry.avals.items()}
    return tuple((op, tuple([types.get(v) for v in ins])) for op, ins, _ in entry.rec.ops)


def _escaped(produced, out_leaves):
    """``[(weakref, vid)]`` of the op outputs of a recording still alive after the body returned, other than its
    results: the body stored them somewhere (a module attribute, a list)."""
    returned = {v for kind, v in out_leaves if kind == "t"}
    # (a tensor rebound since, ``result += c``, holds another value now: not this one)
    return [(ref, v) for ref, v in produced if v not in returned and getattr(ref(), "_vid", None) == v]


_STALE = object()  # a replay found the recording's tensors from the enclosing scope replaced (_StaleExternals)


class _Miss:
    """A compiled call whose guard ``index`` differed: nothing was written; ``values`` are the true values of
    guards ``0..index`` (the same code ran up to there, so every variant that recorded them is a candidate)."""

    __slots__ = ("values", "index", "entry")

    def __init__(self, values, index, entry):
        self.values, self.index, self.entry = values, index, entry


def _fetch_guards(arrays):
    """Copy a compiled call's guard values to the host: the one sync of a guarded step (and the only one a
    compiled step without host reads never makes)."""
    return jax.device_get(list(arrays))


def _compatible(entry, known):
    if known is None:
        return True
    return all(_same(v, g[1]) for v, g in zip(known, entry.guards))


def _grad_key(state):
    # (the dtype too: a ``.grad`` set to a float16 Tensor between calls is another step, not a TypeError of XLA)
    return tuple((i, t._grad._data.shape, t._grad._data.dtype) for i, t in enumerate(state) if t._grad is not None)


def _snapshot(tensors):
    """What a call may change on ``tensors``: value, value id, ``.grad`` object and its value."""
    out = []
    for t in tensors:
        g = t._grad
        out.append((t, t._data, t._vid, g, None if g is None else g._data, None if g is None else g._vid))
    return out


def _restore(snapshot):
    for t, data, vid, g, gdata, gvid in snapshot:
        t._data, t._vid, t._grad = data, vid, g
        if g is not None:
            g._data, g._vid = gdata, gvid


def _shared(arrays, donate):
    """Whether an array to donate is also held elsewhere (passed twice, another Tensor sharing the buffer, a
    user reference): donating it would delete a live value, so such a call keeps its inputs."""
    # NOTE: the references of a state array here: its Tensor's ``_data``, the ``arrays`` list and getrefcount's
    # own argument. Anything more is another holder (also an array passed twice: two Tensors, two list slots).
    # A cheap per-call check (a few tens of ns per donated input).
    getrefcount = sys.getrefcount
    for i in donate:
        if getrefcount(arrays[i]) > 3:
            return True
    return False


class _ArgTypeError(TypeError, AssertionError):
    """A non-Tensor argument of a ``trace(capture_as_const=True)`` call: MegEngine asserts (AssertionError); also
    a TypeError, the type megxla raised before (code written for it keeps catching it)."""


class trace:
    """Trace a function once and run it as compiled XLA executables afterwards.

    Args:
        function: the function to trace; its Tensor / Module / Optimizer arguments are graph inputs.
        symbolic: the first call traces abstractly (no eager computation) and compiles at once.
        capture_as_const: tensors used but not reachable from the arguments are baked in as constants.
            Otherwise ``trace`` feeds such tensors (e.g. a closure's model) as external inputs read at every
            call and written back if reassigned, as MegEngine's trace does; ``xla_trace`` and
            ``partial_trace`` raise an error naming the tensor.
        without_host: compiled calls do not run the Python body at all.
        sublinear_memory_config / dtr_config: rematerialise in the compiled graph (gradient ops recompute
            their forward under ``jax.checkpoint`` instead of keeping residuals).
        cache_size: compiled signatures kept (least recently used are dropped).
        strict: when a value the body read on the host while recording (``int(t)``, ``bool(t)``, a slice bound)
            differs on a later call, raise a :class:`TraceError` naming the line instead of recording again.
            Default: True for ``trace(without_host=True)`` (MegEngine's semantics), False otherwise.
        record_only: as in MegEngine, implies ``capture_as_const``; the calls still compute their results.
        Other MegEngine options (profiling, opt_level, graph_opt_config, symbolic_shape) are accepted, positional
        ones too, and the configuration objects read as MegEngine reads them; XLA does its own graph optimisation.
        An unknown keyword raises a TypeError, as in MegEngine.

    Returns:
        a callable with the function's signature.

    Example:
        >>> import numpy as np, megxla as mge, megxla.module as M
        >>> model = M.Linear(3, 1)
        >>> @trace(symbolic=True)
        ... def step(x, model):
        ...     return model(x).sum()
        >>> x = mge.Tensor(np.ones((2, 3), "float32"))
        >>> [float(step(x, model)) == float(model(x).sum()) for _ in range(3)]  # records, compiles, runs
        [True, True, True]
    """

    _default_without_host = False
    _strict_without_host = True
    _what = "trace"
    _dump_needs_capture = True  # MegEngine's trace.dump requires capture_as_const=True
    _donate = True  # donate the buffers of reassigned state to the executable
    _abstract_first = False  # record the first call abstractly (shapes only) even without symbolic=True
    _eager_recording = False  # set once an abstract recording met a host read: record this function eagerly

    def __new__(cls, function=None, *options, **kw_options):
        if function is None and not options:  # used as @trace(**options)
            return functools.partial(cls, **kw_options)
        return super().__new__(cls)  # (the options, positional ones too as in MegEngine, go to __init__)

    def __init__(self, function, symbolic=False, capture_as_const=False, record_only=False,
                 sublinear_memory_config=None, dtr_config=None, profiling=False, opt_level=2,
                 graph_opt_config=None, symbolic_shape=True, without_host=None, *, cache_size=32, strict=None):
        # (no **kwargs: an unknown or misspelt option is MegEngine's TypeError, not silently ignored)
        _check_memory_configs(sublinear_memory_config, dtr_config, graph_opt_config)
        functools.update_wrapper(self, function)
        self.__wrapped__ = function
        _persist.prewarm()  # (its first compiled program: see there)
        if not hasattr(self, "__name__"):  # a Module or callable object: name the executable after its class
            self.__name__ = self.__qualname__ = type(function).__name__
        self.symbolic = symbolic
        self.opt_level = opt_level  # >= 1: the recording is simplified before it is compiled (_simplify.py)
        self.profiling = profiling  # get_profile() reports the compiled executables (_profile.py)
        self.capture_as_const = capture_as_const or record_only  # (MegEngine's record_only captures too)
        self._symbolic_shape = symbolic_shape
        self._without_host = self._default_without_host if without_host is None else without_host
        self._unknown_text = None
        if type(self)._allow_external and self._without_host:
            # MegEngine's trace(without_host=True) has no host to feed tensors from the enclosing scope
            self._allow_external = False
            self._unknown_text = ("have some unknown input tensors in trace result, maybe you can set "
                                  "`capture_as_const=True` when trace")
        # strict: a host read whose value changes raises instead of recording again (MegEngine's trace with
        # without_host=True has no host to run the body again)
        self.strict = (self._without_host and self._strict_without_host) if strict is None else bool(strict)
        self.max_variants = 8  # recordings kept per signature (told apart by guard values)
        self.num_rerecords = 0  # calls that recorded again because a value read on the host changed
        # Recordings for a new signature of a step that reads values on the host, and those of them whose values
        # read differ from the previous recording's (a detector's ground-truth boxes: their count is both an input
        # shape and, through the matching, a value read): with re-recordings, evidence that most calls will record.
        # (A multi-scale step whose reads give the same values at every scale records once per scale, as before.)
        self._new_sig_calls = 0
        self._new_sig_reads = 0
        self._read_values = None  # the values read on the host by the latest recording
        self._churning = False  # most calls recorded again: the body runs as auto-jit clusters (xla_trace)
        # (churning) calls run the body (_run_churning): without the host; with it, where Python numbers churned (a
        # trace with the host whose host reads churn records them eagerly, as before)
        self._run_body = False
        self.num_clustered_calls = 0
        self.num_eager_calls = 0  # (churning) calls run eagerly because that has been faster than clusters
        self._churn = None  # (churning) _autojit.ModeTimer: which of clusters / eager runs this step faster
        # New signatures that differ from an earlier one only in Python numbers (``_state.without_numbers``: a
        # module's temperature annealed every step, an iteration counter, a float argument); the signatures without
        # their numbers -> the structure of their latest recording (``_structure``)
        self._number_sigs = 0
        self._number_free: dict = {}
        self._new_sig_records = 0  # new signatures' eager recording calls (not in num_calls)
        # (churning on numbers) calls since, the signature a probe saw last (_numbers_settled), the probe's
        # interval; the new signatures that churn the step (doubled, to 16, each time it leaves churning), the
        # calls before those _numbers_changed counts, and the call of the last new value it counted
        self._numbers_churned = False
        self._churned_calls = 0
        self._probe_sig = None
        self._probe_every = 16
        self._churn_after = 4
        self._calls_before = 0
        self._last_number_sig = 0
        self.num_calls = 0
        self.num_undonated = 0  # compiled calls that kept their inputs because a buffer was shared
        self._num_state_created = 0  # recordings that bound new Tensors to state (not reusable; _state_created)
        self.num_fast_calls = 0  # compiled calls that took the prepared plan (_fastpath.py)
        self._plan = None  # the prepared call of the last compiled entry, or None
        self._ran = None  # (entry, state) of a compiled call that a plan can prepare (set by _run)
        # warn once when this many distinct input signatures have been recorded (each is a recording + compilation)
        self.warn_signatures = 8
        self._signatures = set()
        self._warned = set()
        # a recording's body assigned hyper-parameters (rec.sets_inside) and no compiled call has skipped them yet
        self._sets_unwarned = False
        # megxla.dtr.enable() before building a trace asks for rematerialisation as dtr_config does
        self.remat = sublinear_memory_config is not None or dtr_config is not None or _dtr.is_enabled()
        self.cache_size = cache_size
        self._cache: OrderedDict = OrderedDict()
        self._last = None
        # One call at a time per traced object: a call swaps the global RNG key and updates the cache.
        self._lock = threading.RLock()
        self.num_compiled = 0
        self.compile_time = 0.0
        from ..random._rng import SEED_COUNT
        self._rng_key = _key_from_global()
        self._seeded_at = SEED_COUNT[0]  # the seed() count the key was derived at (see _rng_swapped)

    @property
    def random_seed(self):
        """A snapshot (a new Tensor) of this traced function's RNG key: random draws inside the step use it
        and advance it on every call, so two reads taken around a call differ (MegEngine's ``xla_trace``).
        Assigning a key Tensor (e.g. a saved snapshot) replays the same random numbers."""
        # (a NumPy copy: a zero-copy view would keep the key's buffer alive, and a compiled call donates it)
        return Tensor(np.array(self._rng_key.numpy(), copy=True))

    @random_seed.setter
    def random_seed(self, key):
        from ..random._rng import _key_tensor
        key = key if isinstance(key, Tensor) else _key_tensor(int(key))
        if key.shape != self._rng_key.shape:
            raise ValueError(f"{self._what}.random_seed: expected a key of shape {self._rng_key.shape}, got {key.shape}")
        self._rng_key._reset(Tensor(np.array(key.numpy(), dtype=self._rng_key.dtype, copy=True)))
        from ..random._rng import SEED_COUNT
        self._seeded_at = SEED_COUNT[0]  # a key set by hand stands until the next megxla.random.seed()

    @property
    def without_host(self):
        return self._without_host

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    _closure_cache = None  # ((structure epoch, apply_numbers count), modules, key) of _closure_memo

    def _closure_memo(self, mods):
        """The number attributes of the modules this function names from its closure and globals
        (``_state._numbers_key``), recomputed only when one may have changed: a module number attribute set
        bumps the structure epoch (or goes through ``_state.apply_numbers``). A trace with the host walks a
        closure model on every call: a 160-module model cost 1.2 ms a call without this."""
        stamp = (_registry.epoch(), _state._APPLIED[0])
        c = self._closure_cache
        if c is not None and c[0] == stamp and len(c[1]) == len(mods) and all(a is b for a, b in zip(c[1], mods)):
            return c[2]
        key = _state._numbers_key(mods)
        self._closure_cache = (stamp, mods, key)
        return key

    # ---- calling -------------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if isinstance(current_interpreter(), (Recorder, _Replayer)):
            return self.__wrapped__(*args, **kwargs)  # nested traced functions are part of the outer trace
        if _lazy.FLUSH[0] is not None:  # auto-jit: a traced call runs as itself, on concrete values
            _lazy.FLUSH[0]("trace called")
        with self._lock:
            plan = self._plan
            if plan is not None:
                out = plan(args, kwargs)  # cheap guards, one gather, one executable call, one write-back
                if out is not _fastpath.MISS:
                    self.num_fast_calls += 1
                    if self._sets_unwarned:
                        self._warn_sets_inside(plan.entry)
                    return out
            # the full path: flatten every argument, look the signature up, then prepare the next call
            if plan is not None and plan.sig in self._cache:
                self._cache.move_to_end(plan.sig)  # (the prepared calls were its most recent uses)
            self._plan = self._ran = None
            epoch = _registry.epoch()
            try:
                out = self._call(*args, **kwargs)
            except RecursionError as exc:
                if not _interrupt.unstick(exc):
                    raise
                # a JAX cache an interrupt broke earlier (core/_interrupt.py), now cleared: the call again
                out = self._call(*args, **kwargs)
            if self._ran is not None:
                entry, state = self._ran
                self._ran = None
                if self._without_host:  # (trace with the host runs the body on every call)
                    self._plan = _fastpath.build(self, entry, args, kwargs, state, self._dump_call[0], epoch,
                                                 self._converted)
            return out

    def _call(self, *args, **kwargs):
        args, kwargs = _state.convert_numpy(args, kwargs)
        if self._run_body and not _dispatch.recorders and not self._numbers_settled(args, kwargs):
            # every call runs the body, whatever its signature: the signature is not computed (flattening the
            # modules and the optimizer's state: ~190 us per call of the host-read ConvNet step, 5% of it)
            self.num_calls += 1
            self._dump_call = None  # (no recording of this call: dump says so, rather than write an older one)
            with self._rng_swapped():
                return self._run_churning(args, kwargs)
        self._converted = (args, kwargs)  # (a prepared call maps NumPy arguments to the Tensors made here)
        tensors, sig = self._signature(args, kwargs)
        if _lazy.FLUSH[0] is not None:  # (a Tensor the cluster did not know held its value: the array itself)
            for t in tensors:
                _resolved(t)
                if t._grad is not None:
                    _resolved(t._grad)
        state = tensors + [self._rng_key]
        if self.capture_as_const and not self._without_host and any(
                not isinstance(a, Tensor) and not _state._is_module(a) for a in args):
            # MegEngine's check and text (its trace with the host; xla_trace / without_host take modules and
            # optimizers as arguments)
            raise _ArgTypeError("Only support tensor type args when capture_as_const is enabled")
        self._dump_call = (sig, state)  # trace.dump writes the recording of the last call (_dump.py)
        with self._rng_swapped():
            variants = self._cache.get(sig)
            if variants is None:
                self._new_signature(sig)
                entry = None
                if (self.symbolic or self._abstract_first) and not self._eager_recording:
                    entry = self._record_abstract(args, kwargs, state, sig)
                if entry is None:
                    self._new_sig_records += 1
                    entry, out = self._record(args, kwargs, state, sig)
                    self._numbers_changed(sig, entry, counted=True)
                    if entry is not None and entry.guards:
                        self._new_sig_calls += 1
                        if self._reads_changed(entry):
                            self._new_sig_reads += 1
                        if self.num_rerecords:
                            self._check_churn(None, stacklevel=4)
                    return out
                self._numbers_changed(sig, entry, counted=False)
                return self._first_run(entry, state, sig)
            self._cache.move_to_end(sig)
            return self._call_variants(variants, args, kwargs, state, sig)

    def _signature(self, args, kwargs):
        """``(state tensors, signature)`` of a call: the arguments' (``_state.collect``), and the number attributes
        of the modules the function names from its closure and globals."""
        tensors, sig = _state.collect(args, kwargs)
        closure = _state.closure_numbers(self.__wrapped__, self._closure_memo)
        if closure:  # (modules from the enclosing scope: their numbers and modes decide what the body records)
            sig = sig + (closure,)  # (sig[:2] stay the arguments' items: trace.dump reads them)
        return tensors, sig

    def _first_run(self, entry, state, sig):
        """The recording call of an abstract recording: compile the whole step and run it (results and state
        writes come from the executable, as on every later call; the body already ran, once, abstractly)."""
        self.num_calls += 1
        st = state
        if entry.rec.externals:
            st = state + entry.first_externals
            entry.first_externals = None
        held = False
        try:
            try:
                self._compile(entry)
                self._last = entry
                held = _interrupt.enter()  # Ctrl-C waits until the new state below is written too
                out = self._run(entry, st)  # no guards (a host read records eagerly): never a miss
            except BaseException:
                self._forget(sig, entry)  # nothing was written; the next call records again
                raise
            if entry.new_state:
                out, made = out
                for (t, _), value in zip(entry.new_state, made):
                    t._grad = None if isinstance(getattr(t._grad, "_data", None), jax.core.Tracer) else t._grad
                    t._reset(value)
                    mark_external(t)
        finally:
            if held:
                _interrupt.leave()
        # MegEngine's recording call runs eagerly: its results and state writes are not external values, later
        # calls' are (its test_xla_inp_shape_mismatch); ours ran the executable, so it unmarks them
        for t in [*jax.tree_util.tree_leaves(out), *state, *(t for t, _ in entry.new_state or ())]:
            if isinstance(t, Tensor):
                _external.unmark_external(t)
                if t._grad is not None:
                    _external.unmark_external(t._grad)
        return out

    def _run_churning(self, args, kwargs):
        """Values read on the host keep missing the guards: the body runs as auto-jit clusters, compiled once each
        before and after its reads, instead of a stale executable run plus an eager recording -- or eagerly, where
        that has been faster (clusters whose shapes follow the reads may keep missing too)."""
        if self._churn is None:
            # (no margin, unlike auto-jit's troubled steps: its eager calls are timed by their median, which one slow
            # call does not swing, and the host-read step's clusters are ~6% faster than its eager calls -- with
            # clusters required to be 10% faster, medians of 3.65-4.64 ms in four processes against 3.43-4.32)
            # Eager calls' compilations count, as the clusters' do: the reads' values change every call (that is
            # why it churns), and the shapes that follow them compile eager kernels as often -- subtracted, eager's
            # probe looked as fast as clusters that compiled nothing (a count then ``cond_take``: eager chosen at
            # 11-13 ms a call without its compilations, 40-50 with them, against 7-9 ms as clusters; its next
            # probe 50 calls later)
            self._churn = _autojit.ModeTimer(warmup=_autojit.ModeTimer.PROBE, eager_compiles=True)
        if self._churn.next_mode():
            self.num_clustered_calls += 1
            with _autojit.clustered():
                return self.__wrapped__(*args, **kwargs)
        self.num_eager_calls += 1
        return self.__wrapped__(*args, **kwargs)

    def _call_variants(self, variants, args, kwargs, state, sig):
        """Run the most recently used recording of this signature; if a guard differs, the one whose guard
        values match; else record again (or raise, strict)."""
        self.num_calls += 1
        if self._run_body and not _dispatch.recorders:
            return self._run_churning(args, kwargs)
        known, miss, tried = None, None, []
        while True:
            cands = [e for e in variants if not any(e is x for x in tried) and _compatible(e, known)]
            entry = next((e for e in cands if e.segments is not None), None)
            if entry is None:
                # NOTE: compile a recording only once its path is known to recur: the signature's only one (the
                # usual second call), one recorded twice with the same guard values, or one whose every guard
                # value this call has already been seen to have. A step whose values rarely repeat then costs an
                # eager recording per call, not a compilation per call.
                entry = next((e for e in cands if e.confirmed or len(variants) == 1
                              or (known is not None and len(known) >= len(e.guards))), None)
            if entry is None:
                break
            tried.append(entry)
            st = state
            if entry.rec.externals:
                externals = _live_externals(entry)
                if externals is None:  # an external tensor is gone or changed shape: record again
                    variants.remove(entry)
                    continue
                st = state + externals
            if entry.gms and not _fastpath.gms_current(entry):  # a GradManager attached more since: record again
                variants.remove(entry)
                continue
            if entry.rec.host_checks and not _fastpath.host_checks_hold(entry):
                continue  # recorded for another value of a Python fact the ops depend on (a zero weight decay)
            if entry.grad_key is not None and entry.grad_key != _grad_key(st):
                # recorded with other ``.grad`` tensors present: accumulating into an existing gradient and
                # computing a fresh one are different steps (a variant of the same signature)
                continue
            if not self._without_host and _dispatch.recorders:
                # A GradManager outside this call records: the with-host replay gives its ops placeholder
                # values that only the segments' kept outputs ever fill, so the outer tape could not be
                # differentiated. The body runs eagerly instead (the outer tape gets real values, as from
                # MegEngine's trace); without the host the compiled step is one differentiable op (_run).
                return self.__wrapped__(*args, **kwargs)
            if entry.segments is None:
                self._compile(entry)
            self._last = entry
            out = self._run(entry, st) if self._without_host else self._replay(entry, st, args, kwargs)
            if out is _STALE:  # the body used other tensors from the enclosing scope: record again
                variants.remove(entry)
                continue
            if not isinstance(out, _Miss):
                if self._sets_unwarned and self._without_host:
                    self._warn_sets_inside(entry)
                if variants[0] is not entry:
                    variants.remove(entry)
                    variants.insert(0, entry)
                return out
            miss = out
            known = miss.values
        if miss is not None:
            self._guard_missed(miss)
        if miss is not None or any(e.guards for e in variants):
            self._count_rerecord(miss)
        entry, out = self._record(args, kwargs, list(state), sig)
        if entry is not None and entry.guards:
            self._reads_changed(entry)
        return out

    def _warn_sets_inside(self, entry):
        """A compiled call of ``entry`` ran without its body: warn (once) if the body assigned hyper-parameters,
        which this call did not. (Not at the recording: a step whose calls record again, or run the body as
        auto-jit clusters once Python numbers churn, repeats the assignment on every call, as eager code does.)"""
        if not entry.rec.sets_inside:
            return
        self._warned.add("sets")
        self._sets_unwarned = False
        what, where = entry.rec.sets_inside[0]
        warnings.warn_explicit(
            f"{what} is assigned inside a compiled step that does not run its body again ({self._what}, "
            f"without_host): the assignment happened when the step was recorded, and this call and later ones "
            f"use the group's value at the time of the call. Set it outside the step (an LR scheduler between "
            f"calls), or hold it as a Tensor and change that inside.", UserWarning, where[0], where[1])

    def _reads_changed(self, entry):
        """Whether the values ``entry``'s recording read on the host differ from the previous recording's."""
        values = [g[1] for g in entry.guards]
        previous, self._read_values = self._read_values, values
        return previous is not None and (len(previous) != len(values)
                                         or not all(_same(a, b) for a, b in zip(previous, values)))

    def _new_signature(self, sig):
        """Count distinct input signatures; warn once when there are ``warn_signatures`` of them (each costs a
        recording and a compilation: usually a shape or a Python number argument that changes every call)."""
        if len(self._signatures) < self.warn_signatures:
            self._signatures.add(hash(sig))
            if len(self._signatures) == self.warn_signatures and "signatures" not in self._warned:
                self._warned.add("signatures")
                warnings.warn(
                    f"{self._what}({self.__name__}) has been recorded and compiled for {self.warn_signatures} distinct "
                    f"input signatures (argument shapes, dtypes, structure, Python values, module attributes); each "
                    f"new one records and compiles again. Pad inputs to a few fixed shapes, and pass changing numbers "
                    f"as Tensors.", UserWarning, 4)

    def _numbers_changed(self, sig, entry, counted):
        """After the recording ``entry`` of a new signature (this call already in the call count where ``counted``):
        whether the step runs churning from its next call. Most calls bring a new signature that differs from an
        earlier one only in Python numbers (floats, ints) and records the same ops on the same shapes
        (``_structure``) -- each would record and compile the whole step, while auto-jit's clusters take those
        numbers as inputs and compile once. A number that changes what is recorded (an image size for a resize, a
        count of repeats, an op's parameter) keys its recordings as before, and so does a value changed now and then
        (a rate per epoch). A step traced with ``capture_as_const`` is one to dump (an inference function): it keeps
        recording per value, as ``dump`` writes the last call's recording, which a churning call has not made."""
        if _dispatch.recorders or self._churning or self.capture_as_const or entry is None:
            return
        free, structure = _state.without_numbers(sig), _structure(entry)
        seen = self._number_free.pop(free, None)
        if len(self._number_free) >= 64:  # (bounded: a step whose shapes change every call too)
            self._number_free.pop(next(iter(self._number_free)))
        self._number_free[free] = structure
        if seen is None or seen != structure:
            return
        # (num_calls counts compiled calls, prepared ones too, and abstract recordings -- this one's once it has
        # run; a new signature's eager recording call is not in it)
        calls = self.num_calls + self._new_sig_records + (0 if counted else 1)
        if calls - self._last_number_sig > 2 * self._churn_after:
            # a quiet while since the last new value (the numbers were fixed, or the step just left churning): the
            # count starts again, so that values new every call from here on churn after a few calls, not once they
            # outnumber all the quiet calls too
            self._number_sigs, self._calls_before = 0, calls - 1
        self._last_number_sig = calls
        self._number_sigs += 1
        calls -= self._calls_before
        if self._number_sigs < self._churn_after or 2 * self._number_sigs <= calls:
            return
        self._churning = self._run_body = self._numbers_churned = True
        self._churned_calls = 0
        if "numbers" not in self._warned:
            self._warned.add("numbers")
            warnings.warn(
                f"{self._what}({self.__name__}) got new Python numbers on {self._number_sigs} of {calls} calls "
                f"(arguments, or number attributes of its modules: a temperature or rate changed every step, an "
                f"iteration counter), each of which records and compiles the step again; later calls run the body as "
                f"auto-jit clusters, which take such numbers as inputs. Pass a changing number as a Tensor to keep "
                f"one compiled step.",
                UserWarning, 4)

    def _numbers_settled(self, args, kwargs):
        """(churning on numbers) Whether the numbers have stopped changing -- a warm-up ramp ended, a temperature
        reached its floor: then this call and later ones take the compiled path again, a value recorded and
        compiled once more, instead of running the body for the rest of training. Every ``_probe_every``-th
        churning call computes the signature (the churning calls skip it); the same one as the previous probe's
        says so. (A few values in turn whose period divides the interval leave too, and then run compiled, one
        executable per value.) Each time the step leaves, the interval doubles, and so do the new signatures
        that churn it again (to 16): numbers that start changing again churn again after a few calls, values in
        turn get their executables, and a step that keeps coming back costs fewer and fewer recordings."""
        if not self._numbers_churned:
            return False
        self._churned_calls += 1
        if self._churned_calls % self._probe_every:
            return False
        _, sig = self._signature(args, kwargs)
        previous, self._probe_sig = self._probe_sig, sig
        if previous is None or previous != sig:
            return False
        self._churning = self._run_body = self._numbers_churned = False
        self._probe_sig = None
        self._probe_every *= 2
        self._churn_after = min(16, 2 * self._churn_after)
        return True

    def _count_rerecord(self, miss):
        self.num_rerecords += 1
        self._check_churn(miss, stacklevel=6)

    def _check_churn(self, miss, stacklevel):
        """Once most calls record -- re-recordings because a value read on the host changed, and recordings of new
        signatures whose reads gave other values, at least one of the former --, later calls run churning (warned,
        at the user's call: ``stacklevel``)."""
        recorded = self.num_rerecords + self._new_sig_reads
        calls = self.num_calls + self._new_sig_calls  # (a new signature's recording call is not in num_calls)
        if recorded >= 4 and 2 * recorded > calls and "most" not in self._warned:
            self._warned.add("most")
            self._churning = True
            self._run_body = self._without_host
            where = f" (at {describe_where(miss.entry.guards[miss.index][2])})" if miss is not None else ""
            later = ("later calls run the body as auto-jit clusters (compiled between the reads)"
                     if self._without_host else "such calls run eagerly")
            shapes = f" or its input shapes ({self._new_sig_calls} signatures)" if self._new_sig_reads else ""
            warnings.warn(
                f"{self._what}({self.__name__}) recorded again on {recorded} of {calls} calls because "
                f"values read on the host change{where}{shapes}; {later}. Pad to a fixed count (as "
                f"MegEngine's guide asks for traced steps), or move the read out of the step.", UserWarning,
                stacklevel)

    def _guard_missed(self, miss):
        _, recorded, where = miss.entry.guards[miss.index]
        actual = miss.values[miss.index]
        line = describe_where(where)
        if self.strict:
            raise TraceError(
                f"{self._what}({self.__name__}): the value read on the host at {line} was {_show(recorded)} when "
                f"the step was recorded and is {_show(actual)} now; the compiled step depends on it (strict mode "
                f"does not record again). Nothing was written. Pad to a fixed size, or move the read out of the step.")
        if where not in self._warned:
            self._warned.add(where)
            warnings.warn_explicit(
                f"{self._what}({self.__name__}) is data-dependent: the value read on the host at {line} was "
                f"{_show(recorded)} when recorded and is {_show(actual)} now, so this call records again (eagerly) "
                f"and later calls choose among the recordings by that value (each such step syncs once per call). "
                f"strict=True raises instead.", UserWarning, where[0], where[1])

    @contextlib.contextmanager
    def _rng_swapped(self):
        # Random draws inside the step use the traced object's own key (`random_seed`), an implicit state.
        # Per thread (random._rng.swapped): another thread's eager draws meanwhile use the global key.
        from ..random import _rng
        if self._seeded_at != _rng.SEED_COUNT[0]:
            # megxla.random.seed(n) since the key was derived (a step decorated at import, seeded in main(); a
            # run re-seeded between calls): derive it again from the new global key, so the step's draws follow
            # the seed as eager draws do. (In place: the key Tensor is state of the compiled entries.)
            self._seeded_at = _rng.SEED_COUNT[0]
            self._rng_key._reset(_key_from_global())
        with _rng.swapped(self._rng_key):
            yield

    # ---- record --------------------------------------------------------------------------------------------
    _allow_external = True  # trace: tensors from the enclosing scope are external inputs (MegEngine's trace)

    def _recorder(self, cls, state):
        """A recording interpreter (``Recorder`` or ``AbstractRecorder``) set up for this traced function."""
        recorder = cls(state, self.capture_as_const, self._what, self._allow_external)
        recorder.unknown_text = self._unknown_text
        recorder.body_runs_once = self._without_host
        recorder.produced = None if self._without_host else []  # (with the host: kept values, see _escaped)
        return recorder

    def _attr_snapshot(self, args, kwargs):
        """The Tensor attributes of the modules a call may rebind (``self.w = self.w * 2``): those reachable from
        the arguments and from the function's closure and globals (a failed call puts them back), and
        the part of them from the closure and globals only (``_state.collect`` does not see those: a recording
        that changed them created or replaced state behind the signature's back)."""
        attrs = _state.module_tensor_attrs([args, kwargs])
        seen = {id(m) for m, _ in attrs}
        closure = [e for e in _state.module_tensor_attrs(_state.closure_modules(self.__wrapped__))
                   if id(e[0]) not in seen]
        return attrs + closure, closure

    def _record(self, args, kwargs, state, sig):
        snapshot = _snapshot(state)
        attrs, closure_attrs = self._attr_snapshot(args, kwargs)
        recorder = self._recorder(Recorder, state)
        numbers = _state.module_numbers([args, _state.closure_modules(self.__wrapped__)], kwargs)
        push_interpreter(recorder)
        try:
            try:
                out = self.__wrapped__(*args, **kwargs)
            finally:
                pop_interpreter()
            entry = self._finish_recording(recorder, out, state, args, kwargs, sig, numbers)
            if entry is not None and _state.tensor_attrs_changed(
                    closure_attrs, {id(t) for t, _, _, _ in recorder.external_snapshots}):
                # the body made Tensor attributes of a module from the enclosing scope (a buffer created on first
                # use) or rebound one it read (``net.w = net.w * 2``): like state an argument's module gained, the
                # next call records again, reading the new state (the recording would replay stale ops)
                self._forget(sig, entry)
                entry = None
            if entry is not None and entry.rec.externals:
                entry.external_homes = _homes(recorder.external_snapshots, attrs)
            drop_overflowed_grads(state)
        except BaseException:
            # transactional: the state tensors (and external ones found so far) are as before the call
            _restore(snapshot)
            _restore([(t, d, v, g, None if g is None else g._data, None if g is None else g._vid)
                      for t, d, v, g in recorder.external_snapshots + recorder.captured])
            _state.restore_module_tensor_attrs(attrs)
            raise
        return entry, out

    def _finish_recording(self, recorder, out, state, args, kwargs, sig, numbers, abstract=False):
        """The cache entry of a recording call (None where an eager one created state); ``numbers``: the
        module number attributes before the body ran (``_state.module_numbers``)."""
        rec = recorder.rec
        if rec.sets_inside and "sets" not in self._warned:
            self._sets_unwarned = True
        written = [t for t, _, v, _ in recorder.captured if t._vid != v]
        if written and (abstract or self._without_host):
            if abstract and not self._without_host:
                # with the host the body runs on every call: record eagerly, and a later call whose captured
                # constant changed raises MegEngine's TraceError ("tensors not equals") as MegEngine's trace does
                raise NeedsHost(("<unknown>", 0, ""), "writes a tensor captured as a constant", warn=False)
            t = written[0]
            raise TraceError(
                f"{self._what}: the traced function writes a tensor of shape {t.shape}, dtype {t.dtype} that it captured "
                f"as a constant (capture_as_const=True), e.g. an optimizer step on parameters from the enclosing scope; "
                f"a compiled call cannot write it back, so its later calls would compute from the old value. Pass it "
                f"(or the Module/Optimizer holding it) as an argument, or trace without capture_as_const.")
        after, _ = _state.collect(args, kwargs)
        nstate = len(state) - 1 - len(rec.externals)
        new_state = []
        changed = len(after) != nstate or any(a is not b for a, b in zip(after, state))
        if changed:
            # The call created state (optimizer slots): record again next call, with it as input. An abstract
            # recording's new tensors hold tracers: their values become outputs of this call's executable.
            known = {id(t) for t in state}
            new_state = [t for t in after if id(t) not in known]
            self._state_created(args, kwargs, new_state)
            if not abstract:
                return None
            for t in new_state:
                if t._vid not in recorder.known:
                    recorder._outside(t)
        leaves, tree = _flatten(out)
        out_leaves = []
        position = {id(t): i for i, t in enumerate(state)}
        out_state = {}  # returned leaves that ARE state Tensors (not only hold their value)
        for j, leaf in enumerate(leaves):
            if isinstance(leaf, Tensor):
                if leaf._vid not in recorder.known:
                    recorder._outside(leaf)
                out_leaves.append(("t", leaf._vid))
                if leaf._name:  # a name the body gave a result (`y.name = "prob"`) names that output in a dump
                    recorder.rec.out_names[leaf._vid] = leaf._name
                if id(leaf) in position:
                    out_state[j] = position[id(leaf)]
            else:
                out_leaves.append(("v", leaf))
        writes = []
        for i, t in enumerate(state):
            if t._vid != rec.input_vids[i]:
                if t._vid not in recorder.known:
                    recorder._outside(t)
                writes.append((i, t._vid))
        grads_before = dict(rec.grad_inputs)
        grad_writes = []
        for i, t in enumerate(state):
            g = t._grad
            vid = g._vid if isinstance(g, Tensor) else None
            if vid != grads_before.get(i):
                if vid is not None and vid not in recorder.known:
                    recorder._outside(g)
                grad_writes.append((i, vid))
        entry = _Entry(rec, tree, out_leaves, writes, grad_writes, recorder.avals)
        entry.out_state = out_state
        gates = []
        for i, vid in grad_writes:
            gate = None if vid is None else _registry.grad_gate(state[i]._grad)
            if gate is not None:
                if gate._vid not in recorder.known:
                    recorder._outside(gate)
                gates.append((i, gate._vid))
        entry.grad_gates = tuple(gates)
        entry.py_writes = tuple(_state.changed_numbers(numbers))
        if recorder.produced:
            refs = _escaped(recorder.produced, out_leaves)
            entry.escaped = frozenset(v for _, v in refs)
            entry.escape_refs = refs if abstract else ()  # (an eager recording's values are concrete already)
        entry.read_log, entry.guards = _guard_reads(rec, recorder.host_reads)
        entry.grad_inplace = frozenset(i for i, vid in grad_writes if vid is not None and state[i]._grad is not None
                                       and state[i]._grad is recorder.grad_objs[i])
        entry.gms = tuple((weakref.ref(g), g._version) for g in recorder.gms.values() if hasattr(g, "_version"))
        grad_vids = {v for _, v in rec.grad_inputs}
        # a step that back-propagates (vjp ops) accumulates into whatever ``.grad`` exists when it runs
        if grad_writes or any(op.prim is VJP or not grad_vids.isdisjoint(ins) for op, ins, _ in rec.ops):
            entry.grad_key = tuple((i, recorder.avals[v].shape, recorder.avals[v].dtype) for i, v in rec.grad_inputs)
        if changed:
            # one call's executable, not cached (the next call's signature holds the new state). Also where the
            # body only dropped state (``self.buf = None``, ``del self.tmp``): a compiled call does not run that
            # Python, so a cached recording left the module holding the tensor on later calls
            if new_state:
                entry.new_state = [(t, t._vid) for t in new_state]
                entry.out_leaves = entry.out_leaves + [("t", t._vid) for t in new_state]
                entry.out_tree = jax.tree_util.treedef_tuple([tree, jax.tree_util.tree_structure([0] * len(new_state))])
            return entry
        variants = self._cache.get(sig)
        if variants is None:
            variants = self._cache[sig] = []
        for old in variants:  # the same path recorded again: it recurs, so it replaces the old one, confirmed
            if len(old.guards) == len(entry.guards) and all(
                    _same(a[1], b[1]) for a, b in zip(old.guards, entry.guards)) and old.segments is None:
                variants.remove(old)
                entry.confirmed = True
                break
        variants.insert(0, entry)
        while len(variants) > self.max_variants:
            # drop the least recently used recording that is not compiled (compiled ones are the proven paths)
            victim = next((e for e in reversed(variants[1:]) if e.segments is None), variants[-1])
            variants.remove(victim)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return entry

    def _state_created(self, args, kwargs, new_state):
        """Count recordings that created state (they are not reused); warn once when it keeps happening: a body
        that binds a new Tensor to a module attribute on every call (``self.feat = y``, ``self.w = self.w * 2``)
        records (and, abstractly, compiles) every call."""
        self._num_state_created += 1
        if self._num_state_created < 3 or "state" in self._warned:
            return
        self._warned.add("state")
        ids = {id(t) for t in new_state}
        names = [f"{type(m).__name__}.{k}" for m, attrs in _state.module_tensor_attrs([args, kwargs])
                 for k, v in attrs.items() if id(v) in ids]
        what = ", ".join(names[:4]) if names else "new tensors reachable from the arguments"
        warnings.warn_explicit(
            f"{self._what}({self.__name__}) has recorded {self._num_state_created} calls that bound new Tensors to "
            f"state ({what}): such a call cannot reuse a recording, so each records again (and compiles, when "
            f"recorded abstractly). Update the tensor in place (``self.feat[...] = y``, ``self.w._reset(...)``), or "
            f"return the value instead of storing it.", UserWarning, *_code_where(self.__wrapped__))

    def _record_abstract(self, args, kwargs, state, sig):
        """The recording call without per-op kernels: the body runs once inside ``jax.eval_shape`` (tensors hold
        tracers, ops give shapes and dtypes), the recording is cached like an eager one and the caller compiles
        and runs it, so the first call's results and state come from the whole-step executable.

        Returns the entry (cached under ``sig``), or None where the body needs a concrete value on the host
        (``.numpy()``, ``int(t)``, an op computed on the host): the caller records this call eagerly (a warning
        names the line once; later signatures of this function record eagerly at once). State created by the
        body (an optimizer slot) becomes an output of this call's executable (``entry.new_state``); that entry is
        not cached, since the next call's signature includes the new state."""
        snapshot = _snapshot(state)
        attrs, closure_attrs = self._attr_snapshot(args, kwargs)
        nstate = len(state)
        holder = {}
        numbers = _state.module_numbers([args, _state.closure_modules(self.__wrapped__)], kwargs)

        def abstract_step(*arrays):
            for t, a in zip(state, arrays):
                t._data = a
            recorder = holder["recorder"] = self._recorder(AbstractRecorder, state)
            push_interpreter(recorder)
            try:
                out = self.__wrapped__(*args, **kwargs)
            finally:
                pop_interpreter()
            holder["entry"] = self._finish_recording(recorder, out, state, args, kwargs, sig, numbers, abstract=True)

        needs = None
        try:
            try:
                jax.eval_shape(abstract_step, *[t._data for t in state])
            except BaseException:
                # a Tensor attribute the body rebound (``self.w = self.w * 2``) holds a tracer: put the old one
                # back (also before the eager recording a host read asks for)
                _state.restore_module_tensor_attrs(attrs)
                raise
        except NeedsHost as exc:
            needs = exc
        except _TRACER_ERRORS as exc:  # megxla or user code converted a traced value outside ``read``
            needs = NeedsHost(_user_frame(exc.__traceback__))
        except _dispatch.OpError as exc:
            if "Tracer" not in str(exc) and "Concretization" not in str(exc):
                raise
            needs = NeedsHost(_user_frame(exc.__traceback__), "computes an op on the host")
        finally:
            # the body ran on tracers: every state tensor (and external one) gets its value, id and .grad back
            _restore(snapshot)
            if "recorder" in holder:
                _restore([(t, d, v, g, None if g is None else g._data, None if g is None else g._vid)
                          for t, d, v, g in holder["recorder"].external_snapshots + holder["recorder"].captured])
            del state[nstate:]  # externals are appended again by the eager recording, if any
        if needs is None and "recorder" in holder:
            # (the body caught a NeedsHost and went on: its recording lacks that read)
            needs = unhandled_need(holder["recorder"])
        entry = holder.get("entry")
        if entry is not None and entry.rec.externals:
            # the tensors the recording read from the enclosing scope, held for the first run: one the body
            # rebound on its module (``net.w = net.w * 2``) is referenced by nothing else any more
            entry.first_externals = [t for t, _, _, _ in holder["recorder"].external_snapshots]
            entry.external_homes = _homes(holder["recorder"].external_snapshots, attrs)
        if needs is None and entry is not None and any(isinstance(c, jax.core.Tracer) for c in entry.rec.consts.values()):
            needs = NeedsHost(("<unknown>", 0, ""), "keeps a traced value outside the ops (a constant)")
        if needs is None and "recorder" in holder and _state.tensor_attrs_changed(
                closure_attrs, {id(t) for t, _, _, _ in holder["recorder"].external_snapshots}):
            # Tensor attributes of a module from the enclosing scope made or rebound: they hold tracers, and
            # the recording is not reusable (see _record): put them back and record this call eagerly
            needs = NeedsHost(("<unknown>", 0, ""), "changes a module it does not take as an argument", warn=False)
        if needs is not None:
            self._eager_recording = True
            _state.restore_module_tensor_attrs(attrs)
            if entry is not None:
                self._forget(sig, entry)
            if needs.warn and "abstract" not in self._warned:
                self._warned.add("abstract")
                fn, ln, _ = needs.where
                warnings.warn_explicit(
                    f"{self._what}({self.__name__}) {needs.reason} at {describe_where(needs.where)} while recording, "
                    f"which an abstract recording (shapes only) cannot do: its calls record eagerly (one kernel "
                    f"per op) and the next call of a signature compiles the step. Move the read out of the step, "
                    f"or into exclude_from_trace of a trace with the host.", UserWarning, fn, ln)
            return None
        return entry

    def _forget(self, sig, entry):
        variants = self._cache.get(sig)
        if variants is not None and any(e is entry for e in variants):
            variants.remove(entry)
            if not variants:
                del self._cache[sig]

    # ---- compile -------------------------------------------------------------------------------------------
    def _segment_bounds(self, entry):
        n = len(entry.rec.ops)
        if self._without_host:
            return [(0, n)]
        # the graph is cut where the host reads and where exclude_from_trace blocks run (which may read values
        # or make tensors on a later call that the recording call did not)
        cuts = sorted({p for p, _ in entry.rec.reads if 0 < p < n} | {p for p in entry.rec.exclude_at if 0 < p < n})
        bounds = [0] + cuts + [n]
        return list(zip(bounds[:-1], bounds[1:]))

    def _compile(self, entry):
        # No user code runs here (the recorded ops are lowered and compiled): signals wait until it is done, as
        # JAX's caches keep a key half-computed when an exception leaves them (core/_interrupt.py) -- but for XLA's
        # compile itself, which nothing depends on until the entry has its segments: a signal there stops the wait
        # at once (``_tiers.interruptible``; the compile ends on its own thread), the entry stays uncompiled, and
        # ``leave`` raises the signal's error (a Ctrl-C in a large step's first compile was answered only at its end)
        held = False
        try:
            held = _interrupt.enter()
            with _tiers.interruptible():
                self._compile_held(entry)
        finally:
            if held:
                _interrupt.leave()

    def _compile_held(self, entry):
        rec = entry.rec
        t0 = time.perf_counter()
        outside = list(rec.input_vids) + [v for _, v in rec.grad_inputs] + [v for v in rec.consts if v not in rec.hyper] + list(rec.hyper)
        final = ([v for kind, v in entry.out_leaves if kind == "t"] + [v for _, v in entry.writes]
                 + [v for _, v in entry.grad_writes if v is not None] + [v for _, v in entry.grad_gates])
        kept = set(final) | ({v for _, v in rec.reads} if not self._without_host else set())
        if not self._without_host:
            kept |= _live_across(rec.ops, rec.exclude_at, final)
            kept |= entry.escaped
        guard_vids = {v for v, _, _ in entry.guards} if self._without_host else set()
        kept |= guard_vids
        segments = []
        bounds = self._segment_bounds(entry)
        produced_later_needed = set(final)
        # State rebound to a value no op makes (an input: ``teacher.w._reset(student.w)``; a constant:
        # ``flag._reset(Tensor(False))``) is an output of the last segment too: the executable returns a buffer of
        # its own, since the input's may be donated (deleted) by the call.
        made = {v for _, _, outs in rec.ops for v in outs}
        passthrough = {v for _, v in entry.writes if v not in made}
        # walk segments backwards to know which produced values later segments need
        needs = []
        for start, end in reversed(bounds):
            ops = simplify(rec.ops[start:end], entry.avals, self.opt_level)[0]
            produced = {v for _, _, outs in ops for v in outs}
            # In recording order (vids count up as ops run), never a set's order: a set of ints iterates in an
            # order that depends on their values, which differ between processes with different histories, and
            # the processes of an SPMD step must compile the same program (XLA combines its independent
            # collectives into one, with operands in output order: a different order pairs them crosswise).
            out_vids = sorted(v for v in produced_later_needed | kept if v in produced)
            seg_ops = _prune(ops, out_vids)
            tail = passthrough if end == bounds[-1][1] else set()
            out_vids = sorted(set(out_vids) | tail)
            used = {v for _, ins, _ in seg_ops for v in ins} | guard_vids | tail  # a guard may read an input
            in_vids = [v for v in dict.fromkeys(outside + [v for _, ins, _ in seg_ops for v in ins])
                       if v in used and v not in produced]
            produced_later_needed |= set(in_vids)
            needs.append(_Segment(seg_ops, in_vids, out_vids, start, end))
        segments = list(reversed(needs))
        for seg in segments:
            replay = make_replay(seg.ops, seg.in_vids, seg.out_vids, self.remat)
            seg.run = replay
            avals = [entry.avals[v] for v in seg.in_vids]
            donate = ()
            if self._donate and self._without_host and len(segments) == 1 and not entry.guards:
                # (a guarded call must be able to drop its results, so it keeps its inputs)
                written = {rec.input_vids[i] for i, _ in entry.writes}
                donate = tuple(i for i, v in enumerate(seg.in_vids) if v in written)
                # (only buffers an output can take: JAX would warn about the others)
                donate = entry.donate = usable_donations(
                    donate, [(entry.avals[v].shape, entry.avals[v].dtype) for v in seg.in_vids],
                    [(entry.avals[v].shape, entry.avals[v].dtype) for v in seg.out_vids])
                # NOTE: JAX pairs each donated input with the first unused output of its shape/dtype; putting each
                # state's new value first, in input order, makes the pairing the real one (a weight's buffer
                # holds its new weight, not its Adam slot), which removed ~75 of 86 copies in the ConvNet step.
                new_of = {rec.input_vids[i]: v for i, v in entry.writes}
                first = list(dict.fromkeys(new_of[v] for v in seg.in_vids if new_of.get(v) in seg.out_vids))
                seg.out_vids = first + [v for v in seg.out_vids if v not in set(first)]
                replay = make_replay(seg.ops, seg.in_vids, seg.out_vids, self.remat)
                seg.run = replay
            # Named after the traced function: jit_<name> in XLA dumps, compiler_ir, profiles and errors.
            replay.__name__ = replay.__qualname__ = _verbose.exe_name(self.__name__)
            # A warm start finds the lowered step kept by an earlier process (jit/_persist.py) and skips
            # tracing and lowering it; ``lowered`` (HLO inspection) is then made when it is first read.
            kept = _persist.compile_cached(
                replay, avals, donate, replay.__name__,
                _persist.fingerprint(seg.ops, seg.in_vids,
                                     [(a.shape, a.dtype, bool(getattr(a, "weak_type", False))) for a in avals],
                                     seg.out_vids, donate, f"trace {replay.__name__} remat={bool(self.remat)}"))
            if kept is not None:
                seg.executable, seg.lowered = kept, _LoweredOnDemand(replay, donate, avals)
            else:
                # _spmd.jit is jax.jit, or one SPMD program when the step holds cross-process collectives.
                jitted = _spmd.jit(replay, donate_argnums=donate, name=replay.__name__)
                seg.lowered = jitted.lower(*avals)
                spmd = getattr(jitted, "spmd", None)  # (set once lowering met a cross-process collective)
                if donate and spmd is not None and spmd.n > 1 and os.environ.get("MEGXLA_DIST_DONATE") != "1":
                    # NOTE: a step with cross-process collectives keeps its inputs. A peer that fails while
                    # this rank waits in a collective makes the executable raise after it consumed the donated
                    # buffers, which left this rank's parameters and slots deleted; kept, they are the state
                    # before the step, and the rank can still save a checkpoint. It costs a second copy of the
                    # state written by the step (MEGXLA_DIST_DONATE=1 donates, as a one-process step does).
                    donate = entry.donate = ()
                    seg.lowered = _spmd.jit(replay, name=replay.__name__).lower(*avals)
                # (XLA's schedule of a long-running step, chosen by timing: _schedules)
                seg.executable = _schedules.choose(seg.lowered, lambda: _tiers.foreground(seg.lowered.compile))
                if not donate and isinstance(seg.executable, _spmd.SpmdExecutable):
                    # NOTE: the executable runs asynchronously, and a peer failing in one of its collectives
                    # made its outputs -- the new parameters and slots -- fail only when read: the step wrote
                    # them, and the survivor's state was unreadable. Waited for, the failure is the call's, and
                    # the state stays as before the step (its inputs are kept). The call returns when the step
                    # is done: the host prepares the next step after, not during, this one.
                    seg.executable.settle = True
            _verbose.report(self.__name__, seg, entry)  # MGE_VERBOSE_XLA_IR
            self.num_compiled += 1
        entry.segments = segments
        if guard_vids:
            seg = segments[0]
            entry.guard_src = [(True, seg.out_vids.index(v)) if v in seg.out_vids else (False, seg.in_vids.index(v))
                               for v, _, _ in entry.guards]
        entry.graph_op = XLA_GRAPH.bind(graph=_Graph(segments[0].run, f"{self.__name__}", _recorded(entry)))
        if not entry.donate:
            entry.graph_op._kernel = segments[0].executable  # the op's eager kernel IS the compiled graph
        self.compile_time += time.perf_counter() - t0

    # ---- run compiled, no host -------------------------------------------------------------------------------
    def _inputs(self, entry, state, seg):
        plan = seg.plan
        if plan is None:
            plan = seg.plan = _input_plan(entry, seg)
        # NOTE: a precomputed plan instead of a vid->array dict per call: this is per-step host overhead.
        out = []
        for kind, a, b in plan:
            if kind == 0:
                out.append(state[a]._data)
            elif kind == 1:
                out.append(a)
            else:
                out.append(np.asarray(a(), dtype=b))
        if entry.rec.grad_inputs:
            env = {}
            _grad_env(env, entry, state)
            out = [env.get(v, x) for v, x in zip(seg.in_vids, out)]
        return out

    def _run(self, entry, state):
        held = False
        try:
            # Ctrl-C is held from before the executable runs until its outputs are written back
            # (core/_interrupt.py): it deletes the donated inputs, so the outputs must reach the state
            held = _interrupt.enter()
            return self._run_held(entry, state)
        finally:
            if held:
                _interrupt.leave()  # (raises KeyboardInterrupt for a Ctrl-C that arrived meanwhile)

    def _run_held(self, entry, state):
        seg = entry.segments[0]
        arrays = self._inputs(entry, state, seg)
        if _dispatch.recorders or not self._donate:
            # One op of the surrounding eager program, so an outer GradManager differentiates through it.
            by_vid = {v: t for v, t in zip(entry.rec.input_vids, state)}
            ins = [by_vid[v] if v in by_vid else wrap(a) for v, a in zip(seg.in_vids, arrays)]
            outs = _dispatch.apply(entry.graph_op, *ins)
            if entry.guards:
                miss = self._check_guards(entry, arrays, [o._data for o in outs])
                if miss is not None:
                    return miss
            return self._deliver(entry, state, dict(zip(seg.out_vids, outs)))
        if entry.donate and _shared(arrays, entry.donate):
            outs = _spmd.jit(seg.run)(*arrays)  # a buffer held elsewhere too must not be donated (deleted)
            self.num_undonated += 1
        else:
            outs = seg.executable(*arrays)
        if entry.guards:
            miss = self._check_guards(entry, arrays, outs)
            if miss is not None:
                return miss
        out = self._deliver(entry, state, {v: wrap(a) for v, a in zip(seg.out_vids, outs)})
        self._ran = (entry, state)  # __call__ prepares the next call (_fastpath.py)
        return out

    def _check_guards(self, entry, arrays, outs):
        got = _fetch_guards([outs[i] if from_out else arrays[i] for from_out, i in entry.guard_src])
        for j, ((_, value, _), actual) in enumerate(zip(entry.guards, got)):
            if not _same(actual, value):
                return _Miss(got[:j + 1], j, entry)
        return None

    def _deliver(self, entry, state, values):
        """Write reassigned state back into its Tensor objects and build the return value from ``values``
        (``{vid: Tensor}``). The writes are all-or-nothing: interrupted half-way (KeyboardInterrupt), they are
        completed before the exception goes on, since donated input buffers are gone once the executable ran."""
        writes = [(state[i], values[vid]) for i, vid in entry.writes]
        dropped = _overflowed(entry, values)
        grads = [(state[i], None if vid is None or i in dropped else values[vid], i in entry.grad_inplace)
                 for i, vid in entry.grad_writes]
        try:
            _commit(writes, grads)
        except BaseException:
            _commit(writes, grads)
            raise
        inputs = dict(zip(entry.rec.input_vids, state))
        # a returned state tensor (e.g. ``rmean`` after an in-place batch_norm, an argument returned as is) is
        # that same Tensor object, as when the body runs eagerly; any other result is a Tensor of its own
        out_state = entry.out_state
        leaves = []
        for j, (kind, v) in enumerate(entry.out_leaves):
            if kind == "v":
                leaves.append(v)
                continue
            i = out_state.get(j)
            if i is not None:
                t = state[i]
            else:
                t = values.get(v)
                if t is None:  # another Tensor holding an input's value unchanged, or a constant
                    t = values[v] = wrap(inputs[v]._data if v in inputs else entry.rec.consts[v])
            if t is not inputs.get(v):
                mark_external(t)
            leaves.append(t)
        if entry.py_writes:
            _state.apply_numbers(entry.py_writes)
        if entry.escape_refs:  # the first run of an abstract recording: kept tensors get their values
            for ref, v in entry.escape_refs:
                t = ref()
                if t is not None and t._vid == v and v in values:
                    t._data, t._vid = values[v]._data, next(_dispatch._vids)
                    mark_external(t)
            entry.escape_refs = ()
        return jax.tree_util.tree_unflatten(entry.out_tree, leaves)

    # ---- run compiled with the host (without_host=False) -----------------------------------------------------
    def _replay(self, entry, state, args, kwargs):
        snapshot = _snapshot(state)
        # a body that keeps values beyond the call (``self.feat = y``) binds placeholder (Pending) Tensors to
        # module attributes while it runs: a failed call puts the attributes back (the walk is paid only then)
        attrs = self._attr_snapshot(args, kwargs)[0] if entry.escaped else ()
        replayer = _Replayer(self, entry, state)
        try:
            push_interpreter(replayer)
            try:
                out = self.__wrapped__(*args, **kwargs)
            finally:
                pop_interpreter()
            return replayer.finish(out)
        except _GuardMismatch as exc:
            _restore(snapshot)  # nothing of this call stays: no Pending values in the state
            _state.restore_module_tensor_attrs(attrs)
            return _Miss(exc.values, exc.index, entry)
        except _StaleExternals:
            _restore(snapshot)
            _state.restore_module_tensor_attrs(attrs)
            return _STALE
        except BaseException:
            _restore(snapshot)
            _state.restore_module_tensor_attrs(attrs)
            raise

    # ---- inspection ----------------------------------------------------------------------------------------
    def _entry(self):
        if self._last is None or self._last.segments is None:
            raise RuntimeError(f"{self._what}: nothing compiled yet; call the traced function at least twice")
        return self._last

    def compiler_ir(self, stage="stablehlo"):
        """Text of the last compiled executable: ``"stablehlo"`` (as lowered) or ``"hlo"`` (optimised by XLA).

        Example:
            >>> import megxla as mge
            >>> f = trace(lambda x: x * 2, symbolic=True); _ = f(mge.Tensor([1.0])); _ = f(mge.Tensor([1.0]))
            >>> "multiply" in f.compiler_ir("stablehlo")
            True
        """
        seg = self._entry().segments[0]
        if stage == "stablehlo":
            return seg.lowered.as_text()
        if stage in ("hlo", "optimized_hlo"):
            return seg.executable.as_text()
        raise ValueError(f"compiler_ir: stage must be 'stablehlo' or 'hlo', got {stage!r}")

    def get_profile(self):
        """With ``profiling=True``: ``{"profiler": {...}}`` describing each compiled executable (XLA's cost
        analysis, the recorded operators it computes, compile time); see :mod:`megxla.jit._profile`.

        Example:
            >>> import megxla as mge
            >>> x = mge.Tensor([1.0])
            >>> f = trace(lambda x: -x, profiling=True); _ = f(x); _ = f(x)
            >>> f.get_profile()["profiler"]["executables"][0]["oprs"]
            [{'type': 'Elemwise', 'name': 'NEGATE'}]
        """
        from ._profile import get_profile
        return get_profile(self)

    def cost_analysis(self):
        """XLA's cost analysis of the last executable (a dict with ``flops``, ``bytes accessed``, …).

        Example:
            >>> import megxla as mge
            >>> f = xla_trace(lambda x: x * 2); _ = f(mge.Tensor([1.0, 2.0]))
            >>> "flops" in f.cost_analysis()
            True
        """
        cost = self._entry().segments[0].executable.cost_analysis()
        return cost[0] if isinstance(cost, (list, tuple)) else cost

    @property
    def num_executables(self):
        """Number of executables currently cached (over all signatures, their variants and segments)."""
        return sum(len(e.segments) for v in self._cache.values() for e in v if e.segments)

    @property
    def ops(self):
        """The recorded ops of the last signature as ``(op, in_vids, out_vids)`` data."""
        return list((self._last or next(iter(self._cache.values()))[0]).rec.ops)

    @property
    def vars(self):
        """The variables of the last signature's recording, as MegEngine's ``trace.vars`` lists them: the ids
        ``ops`` reads and writes, each once, in the order the recording first meets them.

        Example:
            >>> import megxla as mge
            >>> from megxla.jit import trace
            >>> t = trace(lambda x: x * 2 + 1)
            >>> _ = t(mge.Tensor([1.0])); len(t.ops), len(t.vars)  # x, 2, x * 2, 1, x * 2 + 1
            (2, 5)
        """
        seen = {}
        for _, ins, outs in self.ops:
            for v in (*ins, *outs):
                seen.setdefault(v, None)
        return list(seen)

    @property
    def check_external(self):
        """MegEngine's switch for checking, at each compiled call, that the tensors the function captured from
        outside (not its arguments) still hold the values it was traced with (default True). megxla's guards
        always check a captured tensor's identity and value where they key the executable, so the flag is kept
        for MegEngine code and changes nothing."""
        return self.__dict__.get("_check_external", True)

    @check_external.setter
    def check_external(self, flag):
        self._check_external = bool(flag)

    def dump(self, file, *, arg_names=None, output_names=None, **kwargs):
        """Serialise the traced function as MegEngine's ``dump`` does, for XLA: the recording of the last call,
        from its tensor arguments to its returned tensors, everything else (parameters, captured tensors) a
        constant. The file holds a portable StableHLO module (``jax.export``) and a MegEngine-style graph view;
        read it with :func:`megxla.jit.load`, ``megengine.core.tensor.megbrain_graph.load_graph``,
        ``megengine.utils.comp_graph_tools.GraphInference`` or ``megengine.utils.network.Network.load``.

        Args:
            file: a path or a binary file object.
            arg_names: names of the positional tensor arguments (default ``arg_0``, ``arg_1``...); keyword
                tensor arguments are named by their keyword.
            output_names: names of the outputs (default: the producing operator's name, e.g. ``"ADD"``, or the
                keys of a returned dict).
            input_data: MegEngine's test-case specs (``"#rand(0, 255)"``, ``"data:#rand(0,1,1,3,8,8)"``,
                ``"data:file.npy"``); inputs and expected outputs are stored with the graph.
            enable_io16xc32 / enable_ioc16: float16 storage between operators (compute in float32 / float16).
            append: with a path, add the dump after what the file holds.
            Other MegEngine options (``optimize_for_inference``, ``keep_var_name``, layout options...) are
            accepted; XLA chooses layouts and fusions itself. An option MegEngine does not know raises its
            ``ValueError("unknown options: [...]")`` (unless ``optimize_for_inference=False``, as there).

        Raises:
            ValueError: a ``trace`` built without ``capture_as_const=True`` (MegEngine's rule), or one not
                called yet.

        Returns:
            a ``DumpInfo`` (``nr_opr``, ``inputs``, ``outputs``, ``params``, ``tot_bytes``, ``exported``).

        Example:
            >>> import io, megxla as mge
            >>> f = trace(lambda a, b: a + b, capture_as_const=True)
            >>> _ = f(mge.Tensor([1.0]), mge.Tensor([2.0]))
            >>> info = f.dump(io.BytesIO())
            >>> info.inputs, info.outputs
            (['arg_0', 'arg_1'], ['ADD'])
        """
        from ._dump import dump, NO_OUTPUT
        if self._dump_needs_capture and not self.capture_as_const:
            raise ValueError("you must specify capture_as_const=True at __init__ to use dump")  # (MegEngine's text)
        if "_dump_call" not in self.__dict__:  # never called: MegEngine's error (it has no outputs to dump yet)
            raise ValueError(f"{NO_OUTPUT}; call the traced function first (its last call's recording is dumped)")
        if kwargs.get("optimize_for_inference", True):
            # MegEngine passes the options it does not know to optimize_for_inference, which refuses them
            unknown = [k for k in kwargs if k not in _DUMP_OPTIONS]
            if unknown:
                raise ValueError("unknown options: %s" % unknown)
        if arg_names is not None and not isinstance(arg_names, str):
            # MegEngine leaves an input named None unnamed (its default name)
            arg_names = [f"arg_{i}" if n is None else n for i, n in enumerate(arg_names)]
        if not isinstance(file, (str, os.PathLike)) and not hasattr(file, "write"):
            # MegEngine's error; open() would take an int as a file descriptor, write there and close it
            raise AttributeError(f"{type(file).__name__!r} object has no attribute 'write'")
        # appending to a path (MegEngine's append=True): written whole once the dump succeeded, as dump writes one
        buf = io.BytesIO() if isinstance(file, (str, os.PathLike)) and kwargs.get("append") else None
        info = dump(self, file if buf is None else buf, arg_names=arg_names, output_names=output_names, **kwargs)
        if buf is not None:
            with open(file, "ab") as fh:
                fh.write(buf.getvalue())
        # MegEngine's result lists the input names sorted (the file keeps the order the loaded graph takes them in)
        return type(info)(exported=info.exported, **dict(info._asdict(), inputs=sorted(info.inputs)))

    def compile(self):
        """Compile the recorded signatures now (normally done on the second call)."""
        for variants in self._cache.values():
            for entry in variants:
                if entry.segments is None:
                    self._compile(entry)


def _live_across(ops, points, final):
    """Values made by ops before each position in ``points`` that later ops or the results use: what the
    Python code around an ``exclude_from_trace`` block still holds, so the block may read them on any call
    (also one where the recording call's block read nothing), and the graph takes them in after the block."""
    live = set()
    for p in set(points):
        made = {v for _, _, outs in ops[:p] for v in outs}
        used = {v for _, ins, _ in ops[p:] for v in ins} | set(final)
        live |= made & used
    return live


def _prune(ops, out_vids):
    from ._recording import prune
    return prune(ops, out_vids)


def _commit(writes, grads):
    for t, new in writes:
        t._reset(new)
        mark_external(t)
    for t, g, inplace in grads:
        if inplace and g is not None and t._grad is not None:
            t._grad._reset(g)  # the step accumulated into the existing .grad object (``x.grad += g``)
            mark_external(t._grad)
            continue
        t._grad = g
        if g is not None:
            mark_external(g)


def _guard_reads(rec, host_reads):
    """``(read_log, guards)`` of a recording: every guarded host read ``(value, line, is_guard)`` in order, and
    the ones whose value depends on data ``(vid, value, line)``. A read of a value computed from constants and
    shapes only (literals, ``zeros_like``) is no guard: it is the same on every call of the signature."""
    dynamic = set(rec.input_vids)
    dynamic.update(v for _, v in rec.grad_inputs)
    dynamic.update(rec.hyper)
    dynamic.update(rec.host_inputs)
    for op, ins, outs in rec.ops:
        if op.prim is _FULL_LIKE:  # reads only its first input's shape (its value, where an input, is a number's)
            ins = ins[1:]
        for v in ins:
            if v in dynamic:
                dynamic.update(outs)
                break
    log, guards = [], []
    for vid, data, where in host_reads:
        value = np.asarray(data)
        is_guard = vid in dynamic
        log.append((value, where, is_guard))
        if is_guard:
            guards.append((vid, value, where))
    return log, guards


def _show(value):
    a = np.asarray(value)
    return repr(a.item()) if a.size == 1 else f"an array {a.shape} {a.dtype}"


def _key_from_global():
    # A traced object's own RNG key derives from the global generator's current key without advancing it
    # (MegEngine's xla_trace): megxla.random.seed(n) before building it makes whole runs reproducible, and
    # building a traced function does not change the random numbers of the eager code around it. Functions
    # built at the same global state therefore start from the same key, as in MegEngine (its upstream
    # test_xla_trace_random_seed_update builds one step twice after one seed() and expects equal draws); a
    # user who wants two streams draws or seeds between the builds, or sets ``random_seed``.
    from ..random import _rng
    word = int(np.asarray(_rng._global._state.numpy())[-1])
    return Tensor(np.array([0, word], np.uint32), dtype="uint32")


def load(file):
    """Load a step written by ``trace.dump``: a callable of Tensors/arrays returning a list of Tensors.

    Example:
        >>> import io, megxla as mge
        >>> f = trace(lambda a: a * 3, capture_as_const=True); _ = f(mge.Tensor([1.0]))
        >>> buf = io.BytesIO(); _ = f.dump(buf); _ = buf.seek(0)
        >>> load(buf)(mge.Tensor([2.0]))[0].numpy()
        array([6.], dtype=float32)
    """
    import pickle
    if hasattr(file, "read"):
        blob = file.read()
    else:
        with open(file, "rb") as fh:
            blob = fh.read()
    meta = pickle.loads(blob)
    if not isinstance(meta, dict) or meta.get("format") != "megxla-stablehlo-1":
        raise ValueError("load: not a file written by megxla's trace.dump")
    exp = jax.export.deserialize(bytearray(meta["exported"]))

    def run(*inputs):
        arrays = [t._value() if isinstance(t, Tensor) else np.asarray(t) for t in inputs]
        if len(arrays) != len(exp.in_avals):
            raise TypeError(f"load: the dumped step takes {len(exp.in_avals)} inputs, got {len(arrays)}")
        return [wrap(o) for o in exp.call(*arrays)]

    run.exported = exp
    run.arg_names, run.output_names = meta["arg_names"], meta["output_names"]
    return run


def _input_plan(entry, seg):
    """Where each executable input comes from: ``(0, state index, _)``, ``(1, constant array, _)`` or
    ``(2, getter, dtype)`` for re-read hyper-parameters; ``.grad`` inputs are patched in by ``_grad_env``."""
    rec = entry.rec
    state_index = {v: i for i, v in enumerate(rec.input_vids)}
    grad_vids = {v for _, v in rec.grad_inputs}
    plan = []
    for v in seg.in_vids:
        if v in state_index:
            plan.append((0, state_index[v], None))
        elif v in rec.hyper:
            plan.append((2, rec.hyper[v], entry.avals[v].dtype))
        elif v in rec.consts:
            plan.append((1, rec.consts[v], None))
        elif v in grad_vids:
            plan.append((1, None, None))  # replaced by the current .grad below
        else:
            raise TraceError(f"internal: input value {v} of the compiled step has no source")
    return plan


def _live_externals(entry):
    """The external tensors of a recording (trace with the host), or None where one is gone, changed shape or
    dtype, or is no longer the module attribute it was (``net.w = net.w * 2`` in the body): record again."""
    out = []
    homes = entry.external_homes
    for k, (ref, vid) in enumerate(zip(entry.rec.externals, entry.rec.input_vids[-len(entry.rec.externals):])):
        t = ref()
        aval = entry.avals[vid]
        if t is None or t.shape != aval.shape or t.dtype != aval.dtype:
            return None
        home = homes[k] if k < len(homes) else None
        if home is not None:
            m = home[0]()
            if m is None or m.__dict__.get(home[1]) is not t:
                return None
        out.append(t)
    return out


def _code_where(function):
    """``(filename, line)`` of a traced function's definition, where a warning about the function points (its calls
    may run inside JAX's abstract evaluation, whose frames are no place to point at)."""
    code = getattr(getattr(function, "__func__", function), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else ("<unknown>", 0)


def _homes(external_snapshots, attrs):
    """``[(weakref to module, attribute) or None]`` per external tensor: where each was found in the module
    attributes a recording call started with (``_state.module_tensor_attrs``). Checking the binding, not only
    that the old tensor is alive, also sees a rebinding while something else (a user's list, a reference cycle
    awaiting the garbage collector) still holds the old tensor."""
    where = {}
    for m, named in attrs:
        for k, v in named.items():
            where.setdefault(id(v), (weakref.ref(m), k))
    return [where.get(id(t)) for t, _, _, _ in external_snapshots]


class xla_trace(trace):
    """Compile a whole step -- forward, backward, optimizer update, BN statistics, RNG -- to ONE XLA executable.

    Modules and optimizers are passed as arguments: their tensors are graph inputs, and the ones the step
    reassigns are outputs written back in place (input buffers donated). Compiled calls run no Python.

    Args:
        function: the step function.
        without_host: must stay True for one executable (the default).
        symbolic_shape: accepted for MegEngine compatibility.
        strict: raise a :class:`TraceError` naming the line when a value the step read on the host while recording
            (``int(t)``, ``if loss > x``, ``boxes[:num[i]]``) differs on a later call; by default such a call is
            rolled back and recorded again for the new value (a warning names the line once).
        symbolic: by default the recording call is abstract: it evaluates shapes and dtypes only (no kernel
            per op), compiles the whole step and runs it, so even the first call's results come from the
            executable. A step that reads a value on the host while recording is recorded eagerly instead
            (a warning names the line). ``symbolic=False`` asks for the eager recording call.
        capture_as_const, sublinear_memory_config, dtr_config: as :class:`trace`.

    Example:
        >>> import numpy as np, megxla as mge, megxla.functional as F, megxla.module as M
        >>> import megxla.optimizer as optim
        >>> from megxla.autodiff import GradManager
        >>> model = M.Linear(4, 3); opt = optim.SGD(model.parameters(), lr=0.1)
        >>> gm = GradManager().attach(model.parameters())
        >>> @xla_trace
        ... def train_step(model, opt, data, label):
        ...     with gm:
        ...         loss = F.nn.cross_entropy(model(data), label)
        ...         gm.backward(loss)
        ...     opt.step().clear_grad()
        ...     return loss
        >>> data, label = mge.Tensor(np.ones((2, 4), "float32")), mge.Tensor([0, 2])
        >>> losses = [float(train_step(model, opt, data, label)) for _ in range(3)]
        >>> losses[2] < losses[0], train_step.num_compiled
        (True, 1)
    """

    _default_without_host = True
    _strict_without_host = False  # data-dependent steps record again per value unless strict=True
    _what = "xla_trace"
    _dump_needs_capture = False  # megxla's own: a step whose modules are arguments dumps their current values
    _allow_external = False  # one executable: everything it reads comes from its arguments (or constants)
    _abstract_first = True  # the recording call evaluates shapes only, compiles the step once and runs it

    def __init__(self, function, *, without_host=True, symbolic_shape=False, symbolic=None, **kwargs):
        super().__init__(function, without_host=without_host, symbolic=bool(symbolic), **kwargs)
        # symbolic=False, given explicitly: the recording call runs eagerly (MegEngine's non-symbolic trace)
        self._abstract_first = symbolic is None or bool(symbolic)


_DUMP_OPTIONS = frozenset([
    # MegEngine's trace.dump keywords and the layout / fusion options of its optimize_for_inference
    "append", "keep_var_name", "keep_opr_name", "keep_param_name", "keep_opr_priority", "no_change_graph",
    "strip_info_file", "append_json", "optimize_for_inference", "user_info", "enable_metadata", "input_data",
    "repeat", "silent", "no_assert", "maxerr", "resize_input", "input_transform", "dump_format", "model_version",
    "enable_hwcd4", "enable_nchw4", "enable_nchw88", "enable_nchw32", "enable_nchw44", "enable_nchw44_dot",
    "enable_chwn4", "enable_nchw64", "enable_io16xc32", "enable_ioc16", "enable_fuse_conv_bias_nonlinearity",
    "enable_fuse_conv_bias_with_z", "enable_fuse_preprocess", "enable_fuse_grain"])


def _check_memory_configs(sublinear, dtr, graph_opt):
    """Read the configuration objects' fields as MegEngine's ``trace.__init__`` does, so a wrong object
    (``sublinear_memory_config=True``) raises its AttributeError and an invalid fusion switch its KeyError."""
    if dtr is not None:
        dtr.eviction_threshold, dtr.evictee_minimum_size, dtr.recomp_memory_factor, dtr.recomp_time_factor
    if graph_opt is not None:
        mapping = {None: 0, False: 1, True: 2}
        mapping[graph_opt.jit_fuse_dimshuffle], mapping[graph_opt.jit_fuse_reduce]
    if sublinear is not None:
        (sublinear.lb_memory_mb, sublinear.genetic_nr_iter, sublinear.genetic_pool_size, sublinear.thresh_nr_try,
         sublinear.num_worker)


def is_tracing():
    """Whether the calling code runs inside a traced function's body (recording it, or a call that runs the
    body with the host), outside an :func:`exclude_from_trace` block.

    Example:
        >>> import megxla as mge
        >>> seen = []
        >>> f = trace(lambda x: seen.append(is_tracing()) or x * 2)
        >>> _ = f(mge.Tensor([1.0])); seen, is_tracing()
        ([True], False)
    """
    return isinstance(current_interpreter(), (Recorder, _Replayer))


@contextlib.contextmanager
def exclude_from_trace():
    """Code in this block is not recorded: it runs eagerly on every call (of a trace with the host) and may
    read values of traced tensors.

    Example:
        >>> import megxla as mge
        >>> seen = []
        >>> @trace
        ... def f(x):
        ...     y = x * 2
        ...     with exclude_from_trace():
        ...         seen.append(float(y))  # host code, on every call
        ...     return y + 1
        >>> [float(f(mge.Tensor(v))) for v in (1.0, 2.0, 3.0)], seen
        ([3.0, 5.0, 7.0], [2.0, 4.0, 6.0])
    """
    interp = current_interpreter()
    if not isinstance(interp, (Recorder, _Replayer)):
        yield
        return
    if isinstance(interp, AbstractRecorder):
        # the block is host code that runs on every call, so the step is cut there and runs with the host:
        # recorded eagerly (nothing for the user to change, hence no warning)
        raise _needs_host(user_where(), "runs an exclude_from_trace block", warn=False)
    lo = next(_dispatch._vids)
    if isinstance(interp, Recorder):
        interp.rec.exclude_at.append(len(interp.rec.ops))
    push_interpreter(Excluded(interp))
    try:
        yield
    finally:
        pop_interpreter()
        if isinstance(interp, Recorder):
            interp.rec.exclude_ranges.append((lo, next(_dispatch._vids)))
        else:  # a compiled call: tensors made here may replace traced values the graph takes in (_Replayer.apply)
            interp.host_made.append((lo, next(_dispatch._vids)))
