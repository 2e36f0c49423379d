"""``trace`` / ``xla_trace``: record a call, then run it as compiled XLA executables.

States of one traced function, per input signature (the structure, shapes and dtypes of its arguments and
of the state reachable from them):

1. *record*: the first call runs eagerly under a :class:`Recorder`, which logs every op as data.
2. *compile*: the next call replays the recording inside ``jax.jit`` (ahead of time: lower + compile).
3. *exec*: that call and later ones run the executable; state tensors reachable from the arguments are
   inputs, the ones the step reassigned are outputs written back into the same Tensor objects.

``without_host=True`` (xla_trace's default) runs no Python on compiled calls. ``without_host=False``
(trace's default) runs the Python body against the recording: each op is checked and gets its value from
the executable, which is split into segments at the points where the recording read values on the host.
"""
from __future__ import annotations

import contextlib
import functools
import time
import warnings
from collections import OrderedDict

import numpy as np
import jax

from ..core import _dispatch
from ..core._dispatch import wrap, push_interpreter, pop_interpreter, current_interpreter
from ..core._elemwise_front import SCALAR_VIDS
from ..core._op import Primitive
from ..core._tensor import Tensor
from ..core import _spmd
from .. import dtr as _dtr
from . import _state, _verbose
from ._external import mark_external
from ._recording import Recorder, Excluded, Pending, TraceError, make_replay

__all__ = ["trace", "xla_trace", "exclude_from_trace", "TraceError", "load"]


class _Graph:
    """A compiled subgraph as an op parameter: hashable by identity, its replay a pure JAX function."""

    def __init__(self, replay, name):
        self.replay = replay
        self.name = name

    def __repr__(self):
        return self.name


# transient: the op (and its executable) lives as long as the cache entry that owns it, not forever
XLA_GRAPH = Primitive("xla_graph", lambda *arrays, graph: graph.replay(*arrays), multiple_results=True,
                      transient=True)


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


def _flatten(out):
    leaves, tree = jax.tree_util.tree_flatten(out, is_leaf=lambda x: isinstance(x, Tensor) or x is None)
    return leaves, tree


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
        Other MegEngine options (record_only, profiling, opt_level, graph_opt_config, symbolic_shape) are
        accepted; XLA does its own graph optimisation.

    Returns:
        a callable with the function's signature.

    Example:
        >>> @trace(symbolic=True)
        ... def step(x, model):
        ...     return model(x).sum()
    """

    _default_without_host = False
    _what = "trace"
    _donate = True  # donate the buffers of reassigned state to the executable

    def __new__(cls, function=None, **options):
        if function is None:  # used as @trace(**options)
            return functools.partial(cls, **options)
        return super().__new__(cls)

    def __init__(self, function, symbolic=False, capture_as_const=False, record_only=False,
                 sublinear_memory_config=None, dtr_config=None, profiling=False, opt_level=2,
                 graph_opt_config=None, symbolic_shape=True, without_host=None, cache_size=32, **unused):
        functools.update_wrapper(self, function)
        self.__wrapped__ = function
        self.symbolic = symbolic
        self.capture_as_const = capture_as_const
        self._without_host = self._default_without_host if without_host is None else without_host
        # megxla.dtr.enable() before building a trace asks for rematerialisation as dtr_config does
        self.remat = sublinear_memory_config is not None or dtr_config is not None or _dtr.is_enabled()
        self.cache_size = cache_size
        self._cache: OrderedDict = OrderedDict()
        self._last = None
        self.num_compiled = 0
        self.compile_time = 0.0
        from ..random._rng import _key_tensor
        self.random_seed = _key_tensor(_seed_from_global())

    @property
    def without_host(self):
        return self._without_host

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    # ---- calling -------------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if isinstance(current_interpreter(), (Recorder, _Replayer)):
            return self.__wrapped__(*args, **kwargs)  # nested traced functions are part of the outer trace
        tensors, sig = _state.collect(args, kwargs)
        state = tensors + [self.random_seed]
        entry = self._cache.get(sig)
        if entry is not None and entry.rec.externals:
            externals = _live_externals(entry)
            if externals is None:  # an external tensor is gone or changed shape: record again
                del self._cache[sig]
                entry = None
            else:
                state = state + externals
        with self._rng_swapped():
            if entry is None:
                if self.symbolic:
                    entry = self._record_symbolic(args, kwargs, state, sig)
                    if entry is None:
                        return self._record(args, kwargs, state, sig)[1]
                else:
                    entry, out = self._record(args, kwargs, state, sig)
                    return out
            self._cache.move_to_end(sig)
            if entry.segments is None:
                self._compile(entry)
            self._last = entry
            if self._without_host:
                return self._run(entry, state)
            return self._replay(entry, state, args, kwargs)

    @contextlib.contextmanager
    def _rng_swapped(self):
        # Random draws inside the step use the traced object's own key (`random_seed`), an implicit state.
        from ..random import _rng
        saved = _rng._global._state
        _rng._global._state = self.random_seed
        try:
            yield
        finally:
            _rng._global._state = saved

    # ---- record --------------------------------------------------------------------------------------------
    _allow_external = True  # trace: tensors from the enclosing scope are external inputs (MegEngine's trace)

    def _record(self, args, kwargs, state, sig):
        recorder = Recorder(state, self.capture_as_const, self._what, self._allow_external)
        push_interpreter(recorder)
        try:
            out = self.__wrapped__(*args, **kwargs)
        finally:
            pop_interpreter()
        entry = self._finish_recording(recorder, out, state, args, kwargs, sig)
        return entry, out

    def _finish_recording(self, recorder, out, state, args, kwargs, sig):
        rec = recorder.rec
        _, sig_after = _state.collect(args, kwargs)
        if sig_after != sig:
            # The call created state (optimizer slots, grads): record again next call, with it as input.
            return None
        leaves, tree = _flatten(out)
        out_leaves = []
        for leaf in leaves:
            if isinstance(leaf, Tensor):
                if leaf._vid not in recorder.known:
                    recorder._outside(leaf)
                out_leaves.append(("t", leaf._vid))
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
        self._cache[sig] = entry
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return entry

    def _record_symbolic(self, args, kwargs, state, sig):
        snapshot = [(t._data, t._vid) for t in state]
        grads = [getattr(t, "_grad", None) for t in state]
        holder = {}

        def abstract_step(*arrays):
            for t, a in zip(state, arrays):
                t._data = a
            recorder = Recorder(state, self.capture_as_const, self._what, self._allow_external)
            holder["recorder"] = recorder
            push_interpreter(recorder)
            try:
                out = self.__wrapped__(*args, **kwargs)
            finally:
                pop_interpreter()
            holder["entry"] = self._finish_recording(recorder, out, state, args, kwargs, sig)
            return None

        try:
            jax.eval_shape(abstract_step, *[t._data for t in state])
        except jax.errors.ConcretizationTypeError as exc:
            raise TraceError(f"{self._what}(symbolic=True): the function reads a tensor's value on the host, "
                             f"which has no value while tracing symbolically: {exc}") from None
        finally:
            for t, (data, vid), g in zip(state, snapshot, grads):
                t._data, t._vid, t._grad = data, vid, g
            if "recorder" in holder:
                for t, data, vid, g in holder["recorder"].external_snapshots:
                    t._data, t._vid, t._grad = data, vid, g
        return holder.get("entry")

    # ---- compile -------------------------------------------------------------------------------------------
    def _segment_bounds(self, entry):
        n = len(entry.rec.ops)
        if self._without_host:
            return [(0, n)]
        cuts = sorted({p for p, _ in entry.rec.reads if 0 < p < n})
        bounds = [0] + cuts + [n]
        return list(zip(bounds[:-1], bounds[1:]))

    def _compile(self, entry):
        rec = entry.rec
        t0 = time.perf_counter()
        outside = list(rec.input_vids) + [v for _, v in rec.grad_inputs] + [v for v in rec.consts if v not in rec.hyper] + list(rec.hyper)
        final = ([v for kind, v in entry.out_leaves if kind == "t"] + [v for _, v in entry.writes]
                 + [v for _, v in entry.grad_writes if v is not None])
        kept = set(final) | ({v for _, v in rec.reads} if not self._without_host else set())
        segments = []
        bounds = self._segment_bounds(entry)
        produced_later_needed = set(final)
        # walk segments backwards to know which produced values later segments need
        needs = []
        for start, end in reversed(bounds):
            ops = rec.ops[start:end]
            produced = {v for _, _, outs in ops for v in outs}
            out_vids = [v for v in dict.fromkeys(produced_later_needed | kept) if v in produced]
            seg_ops = _prune(ops, out_vids)
            used = {v for _, ins, _ in seg_ops for v in ins}
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
            if self._donate and self._without_host and len(segments) == 1:
                written = {rec.input_vids[i] for i, _ in entry.writes}
                donate = tuple(i for i, v in enumerate(seg.in_vids) if v in written)
                entry.donate = donate
                # NOTE: JAX pairs each donated input with the first unused output of its shape/dtype; putting each
                # state's new value first, in input order, makes the pairing the real one (a weight's buffer
                # holds its new weight, not its Adam slot), which removed ~75 of 86 copies in the ConvNet step.
                new_of = {rec.input_vids[i]: v for i, v in entry.writes}
                first = list(dict.fromkeys(new_of[v] for v in seg.in_vids if new_of.get(v) in seg.out_vids))
                seg.out_vids = first + [v for v in seg.out_vids if v not in set(first)]
                replay = make_replay(seg.ops, seg.in_vids, seg.out_vids, self.remat)
                seg.run = replay
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*donated.*")
                # Named after the traced function: jit_<name> in XLA dumps, compiler_ir, profiles and errors.
                replay.__name__ = replay.__qualname__ = _verbose.exe_name(self.__name__)
                # _spmd.jit is jax.jit, or one SPMD program when the step holds cross-process collectives.
                seg.lowered = _spmd.jit(replay, donate_argnums=donate, name=replay.__name__).lower(*avals)
                seg.executable = seg.lowered.compile()
                _verbose.report(self.__name__, seg, entry)  # MGE_VERBOSE_XLA_IR
            self.num_compiled += 1
        entry.segments = segments
        entry.graph_op = XLA_GRAPH.bind(graph=_Graph(segments[0].run, f"{self.__name__}"))
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
        seg = entry.segments[0]
        arrays = self._inputs(entry, state, seg)
        if _dispatch.recorders or not self._donate:
            # One op of the surrounding eager program, so an outer GradManager differentiates through it.
            by_vid = {v: t for v, t in zip(entry.rec.input_vids, state)}
            ins = [by_vid[v] if v in by_vid else wrap(a) for v, a in zip(seg.in_vids, arrays)]
            outs = _dispatch.apply(entry.graph_op, *ins)
            return self._deliver(entry, state, dict(zip(seg.out_vids, outs)))
        if entry.donate and len({id(a) for a in arrays}) != len(arrays):
            outs = _spmd.jit(seg.run)(*arrays)  # the same buffer passed twice cannot be donated
        else:
            outs = seg.executable(*arrays)
        return self._deliver(entry, state, {v: wrap(a) for v, a in zip(seg.out_vids, outs)})

    def _deliver(self, entry, state, values):
        """Write reassigned state back into its Tensor objects and build the return value from ``values``
        (``{vid: Tensor}``)."""
        for i, vid in entry.writes:
            t = state[i]
            t._reset(values[vid])
            mark_external(t)
        for i, vid in entry.grad_writes:
            state[i]._grad = None if vid is None else values[vid]
            if vid is not None:
                mark_external(values[vid])
        inputs = dict(zip(entry.rec.input_vids, state))
        leaves = []
        for kind, v in entry.out_leaves:
            if kind == "v":
                leaves.append(v)
                continue
            t = values.get(v)
            if t is None:  # returned an input or a constant unchanged
                t = inputs[v] if v in inputs else wrap(entry.rec.consts[v])
            else:
                mark_external(t)
            leaves.append(t)
        return jax.tree_util.tree_unflatten(entry.out_tree, leaves)

    # ---- run compiled with the host (without_host=False) -----------------------------------------------------
    def _replay(self, entry, state, args, kwargs):
        replayer = _Replayer(self, entry, state)
        push_interpreter(replayer)
        try:
            out = self.__wrapped__(*args, **kwargs)
        finally:
            pop_interpreter()
        return replayer.finish(out)

    # ---- inspection ----------------------------------------------------------------------------------------
    def _entry(self):
        if self._last is None or self._last.segments is None:
            raise RuntimeError(f"{self._what}: nothing compiled yet; call the traced function at least twice")
        return self._last

    def compiler_ir(self, stage="stablehlo"):
        """Text of the last compiled executable: ``"stablehlo"`` (as lowered) or ``"hlo"`` (optimised by XLA).

        Example:
            >>> print(step.compiler_ir("hlo")[:200])
        """
        seg = self._entry().segments[0]
        if stage == "stablehlo":
            return seg.lowered.as_text()
        if stage in ("hlo", "optimized_hlo"):
            return seg.executable.as_text()
        raise ValueError(f"compiler_ir: stage must be 'stablehlo' or 'hlo', got {stage!r}")

    def cost_analysis(self):
        """XLA's cost analysis of the last executable (a dict with ``flops``, ``bytes accessed``, …)."""
        cost = self._entry().segments[0].executable.cost_analysis()
        return cost[0] if isinstance(cost, (list, tuple)) else cost

    @property
    def num_executables(self):
        """Number of executables currently cached (over all signatures and segments)."""
        return sum(len(e.segments) for e in self._cache.values() if e.segments)

    @property
    def ops(self):
        """The recorded ops of the last signature as ``(op, in_vids, out_vids)`` data."""
        return list((self._last or next(iter(self._cache.values()))).rec.ops)

    def dump(self, file, *, arg_names=None, output_names=None, **unused):
        """Serialise the last compiled step as a portable StableHLO artifact (``jax.export``).

        Instead of MegEngine's ``.mge`` graph format, megxla writes what XLA consumes: constants and current
        optimizer hyper-parameters are baked in; the inputs are the step's state tensors (arguments, module
        parameters and buffers, optimizer slots, the RNG key) in the order of the signature, and the outputs
        are the returned tensors followed by the reassigned state. Load it with :func:`megxla.jit.load`.

        Args:
            file: a path or a binary file object.
            arg_names, output_names: optional names, stored with the artifact.

        Returns:
            the ``jax.export.Exported`` object.

        Example:
            >>> f(x); f(x); f.dump("f.stablehlo")
            >>> g = megxla.jit.load("f.stablehlo"); y, = g(x)
        """
        import pickle
        entry = self._entry()
        if len(entry.segments) != 1:
            raise TraceError(f"{self._what}.dump: this trace reads values on the host mid-step "
                             f"({len(entry.segments)} executables); dump needs one (trace with without_host=True)")
        seg, rec = entry.segments[0], entry.rec
        fixed = {v: rec.consts[v] for v in seg.in_vids if v in rec.consts and v not in rec.hyper}
        fixed.update((v, np.asarray(rec.hyper[v](), entry.avals[v].dtype)) for v in seg.in_vids if v in rec.hyper)
        in_vids = [v for v in seg.in_vids if v not in fixed]

        def exported_step(*arrays):
            env = dict(zip(in_vids, arrays))
            return seg.run(*[env[v] if v in env else fixed[v] for v in seg.in_vids])

        exp = jax.export.export(jax.jit(exported_step))(*[entry.avals[v] for v in in_vids])
        blob = pickle.dumps({"format": "megxla-stablehlo-1", "exported": bytes(exp.serialize()),
                             "arg_names": arg_names, "output_names": output_names})
        if hasattr(file, "write"):
            file.write(blob)
        else:
            with open(file, "wb") as fh:
                fh.write(blob)
        return exp

    def compile(self):
        """Compile the recorded signatures now (normally done on the second call)."""
        for entry in self._cache.values():
            if entry.segments is None:
                self._compile(entry)


def _prune(ops, out_vids):
    from ._recording import prune
    return prune(ops, out_vids)


def _seed_from_global():
    # A traced object's own RNG key is drawn from the global generator, so megxla.random.seed(n) before
    # building it makes whole runs reproducible.
    from ..random import _rng
    key = _rng._global._next_key()
    return int(np.asarray(key._data)[-1])


class _Replayer:
    """Interpreter for compiled calls that still run the Python body (``without_host=False``)."""

    def __init__(self, tracer, entry, state):
        self.tracer, self.entry, self.state = tracer, entry, state
        rec = entry.rec
        self.ops = rec.ops
        self.pos = 0
        self.env = dict(rec.consts)
        self.vmap = {}
        self.start_vids = [t._vid for t in state]
        for t, v in zip(state, rec.input_vids):
            self.env[v] = t._data
            self.vmap[t._vid] = v
        _grad_env(self.env, entry, state)
        for i, v in rec.grad_inputs:
            if state[i]._grad is not None:
                self.vmap[state[i]._grad._vid] = v
        for v, getter in rec.hyper.items():
            self.env[v] = np.asarray(getter(), dtype=entry.avals[v].dtype)
        self.next_segment = 0

    def _fail(self, msg):
        raise TraceError(f"{self.tracer._what}: the call differs from its recording: {msg}")

    def apply(self, op, inputs):
        i = self.pos
        if i >= len(self.ops):
            self._fail(f"too many ops: the recording has {len(self.ops)}, this call runs more (next: {op!r})")
        rop, rins, routs = self.ops[i]
        if rop is not op:
            self._fail(f"operator mismatch at op #{i}: recorded {rop!r}, got {op!r}")
        rec = self.entry.rec
        for j, (t, rv) in enumerate(zip(inputs, rins)):
            mv = self.vmap.get(t._vid)
            if mv == rv:
                continue
            if mv is not None:
                self._fail(f"op #{i} {op!r} input {j} is a different traced value than in the recording")
            if rv in rec.hyper:
                pass  # re-read from Python state at call start (optimizer hyper-parameters)
            elif rv in rec.host_inputs:
                self.env[rv] = self.read(t) if isinstance(t._data, Pending) else t._data
            elif rv in rec.consts:
                if t._vid != rv and not np.array_equal(np.asarray(t._data), np.asarray(rec.consts[rv])):
                    self._fail(f"op #{i} {op!r} input {j} is a different constant than in the recording")
            else:
                self._fail(f"op #{i} {op!r} input {j}: the recording computed it inside the trace (internal), "
                           f"this call passes a tensor from outside (external)")
            self.vmap[t._vid] = rv
        outs = tuple(_pending(v, self.entry) for v in routs)
        for o, v in zip(outs, routs):
            self.vmap[o._vid] = v
        self.pos += 1
        for r in _dispatch.recorders:  # the body's GradManagers tape the replayed ops as they would eager ones
            r._record(op, inputs, outs)
        return outs

    def _run_segments(self, upto):
        segs = self.entry.segments
        while self.next_segment < len(segs) and segs[self.next_segment].end <= upto:
            seg = segs[self.next_segment]
            try:
                arrays = [self.env[v] for v in seg.in_vids]
            except KeyError:
                self._fail("a value made by host code (exclude_from_trace) that the graph needs was not provided")
            self.env.update(zip(seg.out_vids, seg.executable(*arrays)))
            self.next_segment += 1

    def read(self, t):
        rv = self.vmap.get(t._vid)
        if rv is None or not isinstance(t._data, Pending):
            return t._data
        self._run_segments(self.pos)
        if rv not in self.env:
            self._fail(f"reading a value the graph does not keep (op output {rv} read after op #{self.pos}); "
                       f"the recording did not read it here")
        t._data = self.env[rv]
        return t._data

    def finish(self, out):
        if self.pos != len(self.ops):
            self._fail(f"too few ops: the recording has {len(self.ops)}, this call ran {self.pos}")
        self._run_segments(len(self.ops))
        entry = self.entry
        for i, vid in entry.writes:
            t = self.state[i]
            if self.vmap.get(t._vid) != vid:
                self._fail(f"state tensor #{i} was not written as in the recording")
            t._data = self.env[vid]
            t._vid = next(_dispatch._vids)
            mark_external(t)
        for i, vid in entry.grad_writes:
            g = self.state[i]._grad
            if (None if g is None else self.vmap.get(g._vid)) != vid:
                self._fail(f"the .grad of state tensor #{i} was not written as in the recording")
            if g is not None:
                g._data = self.env[vid]
                mark_external(g)
        leaves, _ = _flatten(out)
        for leaf, (kind, v) in zip(leaves, entry.out_leaves):
            if isinstance(leaf, Tensor):
                rv = self.vmap.get(leaf._vid)
                if rv != v and not (rv is None and kind == "t" and v in entry.rec.consts):
                    self._fail("the returned tensors differ from the recording")
                if isinstance(leaf._data, Pending):
                    leaf._data = self.env[v]
                mark_external(leaf)
        return out


def load(file):
    """Load a step written by ``trace.dump``: a callable of Tensors/arrays returning a list of Tensors.

    Example:
        >>> g = load("f.stablehlo"); outputs = g(x)
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
    out = []
    for ref, vid in zip(entry.rec.externals, entry.rec.input_vids[-len(entry.rec.externals):]):
        t = ref()
        aval = entry.avals[vid]
        if t is None or t.shape != aval.shape or t.dtype != aval.dtype:
            return None
        out.append(t)
    return out


def _grad_env(env, entry, state):
    """Feed the ``.grad`` inputs of a recording: the current gradient, or zeros where the tensor has none now
    (accumulating into zeros is computing a fresh gradient)."""
    for i, v in entry.rec.grad_inputs:
        g = state[i]._grad
        aval = entry.avals[v]
        env[v] = g._data if g is not None and g.shape == aval.shape else np.zeros(aval.shape, aval.dtype)


def _pending(vid, entry):
    return wrap(Pending(vid, entry.avals[vid]))


class xla_trace(trace):
    """Compile a whole step -- forward, backward, optimizer update, BN statistics, RNG -- to ONE XLA executable.

    Modules and optimizers are passed as arguments: their tensors are graph inputs, and the ones the step
    reassigns are outputs written back in place (input buffers donated). Compiled calls run no Python.

    Args:
        function: the step function.
        without_host: must stay True for one executable (the default).
        symbolic_shape: accepted for MegEngine compatibility.
        capture_as_const, symbolic, sublinear_memory_config, dtr_config: as :class:`trace`.

    Example:
        >>> @xla_trace
        ... def train_step(model, opt, data, label):
        ...     with gm:
        ...         loss = F.nn.cross_entropy(model(data), label)
        ...         gm.backward(loss)
        ...     opt.step().clear_grad()
        ...     return loss
    """

    _default_without_host = True
    _what = "xla_trace"
    _allow_external = False  # one executable: everything it reads comes from its arguments (or constants)

    def __init__(self, function, *, without_host=True, symbolic_shape=False, **kwargs):
        super().__init__(function, without_host=without_host, **kwargs)


@contextlib.contextmanager
def exclude_from_trace():
    """Code in this block is not recorded: it runs eagerly on every call (of a trace with the host) and may
    read values of traced tensors.

    Example:
        >>> with exclude_from_trace():
        ...     print(loss.item())
    """
    interp = current_interpreter()
    if not isinstance(interp, (Recorder, _Replayer)):
        yield
        return
    lo = next(_dispatch._vids)
    push_interpreter(Excluded(interp))
    try:
        yield
    finally:
        pop_interpreter()
        if isinstance(interp, Recorder):
            interp.rec.exclude_ranges.append((lo, next(_dispatch._vids)))
