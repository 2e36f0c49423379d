"""A trace is data: the ops a call ran, as ``(op, input value ids, output value ids)`` records, plus where
each outside value came from. Compiling it means replaying those records inside one ``jax.jit``.

Value ids (``Tensor._vid``) are SSA names: every op output and every in-place rebinding gets a new one.
"""
from __future__ import annotations

import linecache
import os
import sys
import sysconfig
import weakref

import numpy as np
import jax

from _thread import get_ident as _get_ident

from ..core import _dispatch, _interrupt, _naming
from ..core._rounding import apart as _apart
from ..core._interrupt import KERNEL_HELD as _KERNEL_HELD
from ..core._dispatch import eager_apply
from ..core._spmd import MeshRequired, SpmdFunction
from . import _tiers
from ..core._elemwise_front import SCALAR_VIDS


class TraceError(RuntimeError):
    """A traced function did something its recording cannot represent, or differs from its recording (MegEngine's
    ``megengine.jit.TraceError``, with its messages).

    Example:
        >>> from megxla.jit import TraceError, trace
        >>> use_exp = True  # Python state the trace cannot see: the recording is replayed
        >>> f = trace(lambda x: F.exp(x) if use_exp else F.log(x))
        >>> x = mge.Tensor([1.0]); _ = f(x)
        >>> use_exp = False
        >>> f(x)
        Traceback (most recent call last):
        ...
        megxla.jit._recording.TraceError: trace error because operator mismatch
        trace: the call differs from its recording: operator mismatch at op #0: recorded exp, got log
    """


class Recording:
    """What one call of a traced function did.

    Attributes:
        ops: ``[(op, in_vids, out_vids)]`` in execution order.
        input_vids: value ids of the state tensors at call start (graph inputs, in state order).
        consts: ``{vid: array}`` values baked in (created in the body, or captured with capture_as_const).
        host_inputs: ``{vid: position}`` values made by host code (exclude_from_trace) that feed the graph.
        reads: ``[(position, vid)]`` values the host read (``.numpy()``, ``bool()``…) and after how many ops.
        hyper: ``{vid: getter}`` values re-read from Python state at every call (optimizer hyper-parameters).
        exclude_at: positions (ops run before) of the ``exclude_from_trace`` blocks.
        grad_inputs: ``[(state index, vid)]`` the ``.grad`` values present at call start.
        host_checks: ``[(check, value)]`` host facts the recorded ops depend on (``uses``: is a weight decay
            zero?): a compiled call runs this recording only while every ``check()`` still equals ``value``.
        folded: ``{vid: array}`` values the host read that are computed from constants only (an abstract
            recording evaluated them): the same on every call of the signature, so no graph cut reads them.
    """

    def __init__(self, state_tensors):
        self.ops: list = []
        self.input_vids = [t._vid for t in state_tensors]
        # (state index, vid) of the ``.grad`` tensors present at call start: graph inputs too
        self.grad_inputs = [(i, t._grad._vid) for i, t in enumerate(state_tensors) if t._grad is not None]
        self.consts: dict = {}
        self.host_inputs: dict = {}
        self.reads: list = []
        self.hyper: dict = {}
        self.exclude_ranges: list = []
        self.exclude_at: list = []
        self.externals: list = []  # weak references to tensors from the enclosing scope (trace only)
        self.host_checks: list = []
        self.folded: dict = {}
        # {first output vid: module scope} of the ops recorded inside a module's call (``"simple.linear"``): the
        # operator names of a dump, as MegEngine's AutoNaming
        self.scopes: dict = {}
        self.out_names: dict = {}  # {vid: name} of the returned tensors the body named
        # [(what, where)] Python assignments the body made that a compiled call without the host does not repeat
        # (``param_groups[...]["lr"] = v``): the tracer warns when a call runs compiled, skipping them
        self.sets_inside: list = []


_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def user_line():
    """``(filename, lineno)`` of the innermost frame outside megxla and Python's standard library
    (:func:`user_where` without the source text): a value read through ``copy.deepcopy`` or ``pickle`` is the
    user's line that called them."""
    f = sys._getframe(1)
    while f is not None and _not_users(f.f_code.co_filename):
        f = f.f_back
    return ("<unknown>", 0) if f is None else (f.f_code.co_filename, f.f_lineno)


_STDLIB = tuple({os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib")})
_NOT_USERS: dict = {}  # file name -> whether it is megxla's or the standard library's


def _not_users(fn):
    known = _NOT_USERS.get(fn)
    if known is None:
        known = fn.startswith(_PKG_DIR) or (fn.startswith(_STDLIB) and "-packages" not in fn)
        if len(_NOT_USERS) < 4096:
            _NOT_USERS[fn] = known
    return known


def user_where():
    """``(filename, lineno, source)`` of the innermost frame outside megxla: the user's line that read a value."""
    fn, ln = user_line()
    return (fn, ln, linecache.getline(fn, ln).strip() if ln else "")


def _user_frame(tb):
    """``(filename, lineno, source)`` of the innermost traceback frame in user code (outside megxla and the
    libraries under it): where a traced value was converted on the host."""
    found = ("<unknown>", 0, "")
    jax_dir = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if not fn.startswith(_PKG_DIR) and not fn.startswith(jax_dir) and "site-packages" not in fn \
                and not fn.startswith("<frozen"):
            found = (fn, tb.tb_lineno, linecache.getline(fn, tb.tb_lineno).strip())
        tb = tb.tb_next
    return found


def describe_where(where):
    fn, ln, src = where
    return f"{fn}:{ln}" + (f" (`{src}`)" if src else "")


class Recorder:
    """The interpreter active while a traced function's recording call runs (eagerly).

    Besides the ops it logs every value the body reads on the host (``host_reads``: value id, value, user line),
    which become the recording's guards, and the GradManagers that recorded ops (``gms``): what they have
    attached is part of what the recording assumed."""

    # True while recording a step whose later calls do not run the body (xla_trace, without_host): the body's
    # Python effects happen this once (``set_inside`` notes the hyper-parameters it assigns)
    body_runs_once = False
    # (with the host) [(weakref, vid)] of every op output, to find the values the body keeps beyond the call
    # (``self.weight = w * 2`` on a module captured from the enclosing scope): see tracing._escaped
    produced = None

    def __init__(self, state_tensors, capture_as_const, what="trace", allow_external=False):
        self.state = state_tensors  # grows by the external tensors found while recording
        self.allow_external = allow_external and not capture_as_const
        self.external_snapshots = []
        # (capture_as_const) tensors from outside baked in as constants: (tensor, data, vid, .grad) at capture, so a
        # body that writes one (an optimizer step on captured parameters) is seen and the tensor restored
        self.captured = []
        self.rec = Recording(state_tensors)
        self.known = set(self.rec.input_vids) | {v for _, v in self.rec.grad_inputs}
        self.first_vid = next(_dispatch._vids)
        self.capture_as_const = capture_as_const
        self.what = what
        self.avals = {t._vid: _aval(t._data) for t in state_tensors}
        self.avals.update((t._grad._vid, _aval(t._grad._data)) for t in state_tensors if t._grad is not None)
        self.host_reads: list = []
        self.gms: dict = {}
        self.grad_objs = [t._grad for t in state_tensors]  # .grad objects at call start (in-place accumulation)

    _evaluate = staticmethod(eager_apply)  # how an op's outputs are computed (AbstractRecorder: shapes only)
    unknown_text = None  # str() of the error for a tensor from outside, where MegEngine has its own text

    def apply(self, op, inputs):
        if _dispatch.recorders:
            for r in _dispatch.recorders:
                self.gms[id(r)] = r
        outputs = self._evaluate(op, inputs)
        known = self.known
        for t in inputs:
            if t._vid not in known:
                self._outside(t)
        self.rec.ops.append((op, tuple(t._vid for t in inputs), tuple(t._vid for t in outputs)))
        if _naming.AutoNaming.scopes and outputs:
            self.rec.scopes[outputs[0]._vid] = ".".join(_naming.AutoNaming.scopes)
        avals = self.avals
        for t in outputs:
            known.add(t._vid)
            avals[t._vid] = _aval(t._data)
        if self.produced is not None:
            self.produced.extend((weakref.ref(t), t._vid) for t in outputs)
        return outputs

    def _outside(self, t):
        vid = t._vid
        self.avals[vid] = _aval(t._data)
        if any(lo <= vid < hi for lo, hi in self.rec.exclude_ranges):
            if self.body_runs_once and not self.capture_as_const:
                # A compiled call without the host never runs the block, so the value it made here would be
                # baked in: a counter ``c += 1`` in the block stayed 1 and the step returned the first call's
                # numbers for ever, silently. MegEngine's trace(without_host=True) refuses it too ("unknown input
                # tensors"); capture_as_const=True asks for the baked value.
                self._unknown(t, "was made by an exclude_from_trace block, which a compiled call without the host "
                                 "does not run, and the step uses it (as an operand, a result or a state write); its "
                                 "value would be baked in. Compute it in the step, pass it as an argument, or trace "
                                 "with capture_as_const=True to bake the recording call's value in")
            self.rec.host_inputs[vid] = len(self.rec.ops)
            self.rec.consts[vid] = t._data  # compiled calls without the host bake it in
        elif vid >= self.first_vid or vid in SCALAR_VIDS or self.capture_as_const:
            self.rec.consts[vid] = t._data
            if vid < self.first_vid and vid not in SCALAR_VIDS:
                self.captured.append((t, t._data, vid, t._grad))
        elif self.allow_external:
            self._add_external(t)
        else:
            self._unknown(t, "is not reachable from its arguments. Pass it (or the Module/Optimizer/RNG holding it) "
                             "as an argument, or trace with capture_as_const=True to bake its current value in as a "
                             "constant")
        self.known.add(vid)

    def _unknown(self, t, why):
        """Raise the TraceError of a tensor the step uses but cannot take in on a compiled call."""
        name = f" named {t.name!r}" if t.name else ""
        detail = f"{self.what}: the traced function uses a tensor{name} of shape {t.shape}, dtype {t.dtype} that {why}."
        if self.unknown_text is None:
            raise TraceError(detail)
        exc = TraceError(self.unknown_text)  # MegEngine's text (code matches on it); ours as a note
        exc.add_note(detail)
        raise exc

    def _add_external(self, t):
        # MegEngine's trace feeds tensors from the enclosing scope (a closure's model) as "external" inputs:
        # they become implicit state of the step, read at every call and written back if reassigned.
        rec = self.rec
        self.external_snapshots.append((t, t._data, t._vid, t._grad))
        self.grad_objs.append(t._grad)
        rec.externals.append(weakref.ref(t))
        rec.input_vids.append(t._vid)
        if t._grad is not None:
            rec.grad_inputs.append((len(self.state), t._grad._vid))
            self.known.add(t._grad._vid)
            self.avals[t._grad._vid] = _aval(t._grad._data)
        self.state.append(t)

    def read(self, t, guard=True):
        """The value of ``t`` for host code. ``guard``: the body's own read (``int(t)``, ``bool(t)``, slicing by a
        tensor…), which the compiled step must check; host code in ``exclude_from_trace`` passes False."""
        self.rec.reads.append((len(self.rec.ops), t._vid))
        if guard:
            self.host_reads.append((t._vid, t._data, user_where()))
        return t._data

    def set_inside(self, what):
        """The body assigned ``what`` (a hyper-parameter, by name) from Python: noted where later calls do not run
        the body (``body_runs_once``), with the user's line, for the tracer's warning when a call runs compiled."""
        if self.body_runs_once:
            self.rec.sets_inside.append((what, user_where()))

    def host_check(self, check, value):
        """The ops recorded from here on depend on ``check() == value`` (a Python fact, e.g. a hyper-parameter
        being zero): compiled calls check it on the host and record again when it changed."""
        self.rec.host_checks.append((check, value))

    def host_input(self, t, getter):
        """Mark ``t`` (made in the body from Python state) as re-read via ``getter()`` at every call."""
        self.rec.hyper[t._vid] = getter
        self.known.add(t._vid)
        self.avals[t._vid] = _aval(t._data)


class NeedsHost(Exception):
    """Raised by an abstract recording where the body needs a concrete value on the host (``where``: the
    user's line, as :func:`user_where`)."""

    def __init__(self, where, reason="reads a value on the host", warn=True):
        super().__init__(f"{reason} at {describe_where(where)}")
        self.where, self.reason, self.warn = where, reason, warn


def _needs_host(where, reason="reads a value on the host", warn=True):
    """A :class:`NeedsHost` to raise, noted on the abstract recording it interrupts (``AbstractRecorder.needed``):
    a body that catches it (``try: n = int(mask.sum()) except Exception: n = 0`` -- a fallback, a logging call
    guarded against any error) would otherwise finish its recording without the read, and the compiled step would
    compute the except branch on every call, the first included: eager computes the read."""
    exc = NeedsHost(where, reason, warn)
    for interp in reversed(_dispatch._tls.s.interpreters):
        if isinstance(interp, AbstractRecorder):
            interp.needed = (*interp.needed, exc)
            break
    return exc


def unhandled_need(recorder):
    """The first :class:`NeedsHost` an abstract recording raised that no code of megxla's caught on purpose, or
    None. (``Tensor.__repr__`` shows ``<abstract>`` for a value it cannot read, and marks what it caught
    ``handled``: a ``print(loss)`` in a step compiles from the abstract recording as ever.)"""
    for exc in recorder.needed:
        if not getattr(exc, "handled", False):
            return exc
    return None


_TRACER_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                  jax.errors.TracerIntegerConversionError, jax.errors.TracerBoolConversionError)
_abstract_kernels = weakref.WeakKeyDictionary()


def _abstract_kernel(op):
    """A ``jax.jit`` of the op's function to call on tracers: the eager kernel itself where it is one (its
    traced forms are cached by JAX per input shapes), else (host-assembled random draws, compiled graphs)
    a plain jit of :attr:`Op.fn`, which computes the same values inside a compiled step."""
    k = op.nested_kernel
    if hasattr(k, "lower") and hasattr(k, "trace"):
        return k
    k = _abstract_kernels.get(op)
    if k is None:
        k = _abstract_kernels[op] = jax.jit(op.fn)
    return k


def abstract_apply(op, inputs):
    """Evaluate ``op`` on Tensors whose data are tracers of an enclosing ``jax.eval_shape``: no kernel runs,
    the outputs carry shapes and dtypes. The calling thread's GradManagers tape the op as ``eager_apply``
    does."""
    try:  # (the kernel's first trace holds signals until it returns, the finally below: core/_interrupt.py)
        out = _abstract_kernel(op)(*[t._data for t in inputs])
    except _TRACER_ERRORS:
        raise _needs_host(user_where(), f"computes {op!r} on the host") from None  # its kernel needs a value
    except MeshRequired as exc:
        # NOTE: a cross-process collective's eager kernel is an SPMD program (core._spmd), which tracers cannot
        # run; the recording needs only its results' shapes and dtypes (the compiled step runs the collective in
        # its SPMD program), so they stand in. Recording such a step eagerly instead, after the abstract attempt
        # had run the body up to here, ran the body's Python twice in the first call: a GradManager callback
        # before an all-reduce counted every gradient twice (MegEngine's test_xla_trace_dist_training).
        out = SpmdFunction(op.fn, exc.devices, name=op.name).abstract(*[t._data for t in inputs])
    except (TypeError, ValueError, IndexError) as exc:
        raise _dispatch.op_error(op, inputs, exc) from None
    finally:
        if _KERNEL_HELD[0] and _get_ident() == _interrupt._MAIN:
            _interrupt.release_kernel_trace()
    outputs = tuple(_dispatch.wrap(o) for o in out) if op.multiple_results else (_dispatch.wrap(out),)
    recs = _dispatch.recorders
    if recs:
        for r in tuple(recs):
            r._record(op, inputs, outputs)
    return outputs


_interrupt.KERNEL_CALLERS.add(abstract_apply.__code__)


class AbstractRecorder(Recorder):
    """The interpreter of an *abstract* recording call: it runs inside one ``jax.eval_shape``, so tensors hold
    tracers and ops are evaluated on shapes and dtypes only (no per-op kernel is compiled or run). A host read
    (``.numpy()``, ``int(t)``, ``exclude_from_trace``) has no value here: it raises :class:`NeedsHost` naming
    the user's line, and the tracer records that function eagerly instead."""

    _evaluate = staticmethod(abstract_apply)
    _folded = None  # {vid: concrete value} of the constant values read so far
    needed = ()  # the NeedsHost raised in this recording (see _needs_host), caught by the body or not

    def read(self, t, guard=True):
        value = self._constant_value(t)
        if value is None:
            raise _needs_host(user_where())
        if value is not t._data:  # an op output (a literal Tensor is read as itself on every call)
            self.rec.folded[t._vid] = value
        if guard:  # in the read log (a value computed from constants is no guard: _guard_reads finds it static)
            self.host_reads.append((t._vid, value, user_where()))
        return value

    def _constant_value(self, t):
        """The concrete value of ``t`` where it is computed from constants only (``mge.tensor(x.shape)[0]``:
        literals and shapes, the same on every call of the signature), else None. Such reads are common in
        model code (BERT reshapes by a shape tensor) and need no eager recording: the few ops that make the
        value are evaluated on their constant inputs, outside the enclosing abstract evaluation."""
        import jax
        if not isinstance(t._data, jax.core.Tracer):
            return t._data
        folded = self._folded
        if folded is None:
            folded = self._folded = {}
        vid = t._vid
        if vid not in folded:
            ops = prune(self.rec.ops, [vid])
            made = {v for _, _, outs in ops for v in outs}
            leaves = sorted({v for _, ins, _ in ops for v in ins} - made)
            consts, rec = self.rec.consts, self.rec
            if vid not in made or not all(v in consts and v not in rec.hyper and v not in rec.host_inputs
                                          and not isinstance(consts[v], jax.core.Tracer) for v in leaves):
                folded[vid] = None
            else:
                with jax.ensure_compile_time_eval():
                    folded[vid] = make_replay(ops, leaves, [vid])(*[consts[v] for v in leaves])[0]
        return folded[vid]


class Excluded:
    """Interpreter for ``exclude_from_trace`` blocks: runs eagerly, reading traced values through the parent."""

    eager = True  # ops here run on the host with concrete values (e.g. nms may return a data-dependent shape)

    def __init__(self, parent):
        self.parent = parent

    def apply(self, op, inputs):
        for t in inputs:  # every traced value host code touches must be kept by the graph
            t._data = self.parent.read(t, guard=False)
        return eager_apply(op, inputs)

    def read(self, t, guard=False):
        # host code the user excluded from the trace runs on every call of a trace with the host: its reads
        # are not guards (they do not decide what the graph computes)
        return self.parent.read(t, guard=False)


class Pending:
    """Placeholder data of a tensor whose value a compiled executable has not produced (yet); it knows its
    shape and dtype, so host code may inspect those without forcing the value."""

    __slots__ = ("vid", "shape", "dtype", "ndim", "size")

    def __init__(self, vid, aval):
        self.vid = vid
        self.shape, self.dtype, self.ndim, self.size = aval.shape, aval.dtype, len(aval.shape), aval.size

    def __repr__(self):
        return "<pending>"


def prune(ops, needed):
    """Keep only the ops whose outputs (transitively) reach ``needed`` value ids."""
    live = set(needed)
    kept = []
    for op, ins, outs in reversed(ops):
        if live.intersection(outs):
            kept.append((op, ins, outs))
            live.update(ins)
    kept.reverse()
    return kept


def usable_donations(donate, in_avals, out_avals):
    """The positions of ``donate`` whose buffer an output can take: JAX pairs each donated input, in order, with
    the first unpaired output of its shape and dtype, and warns about each one left unpaired.

    Donating only these keeps JAX from warning, so compiling needs no ``warnings.catch_warnings`` -- which resets
    Python's record of warnings already shown: a user's warning printed once eagerly was printed again after each
    compilation. (An unpaired donated buffer is not reused anyway.)

    Example:
        >>> f, i = ((2,), "float32"), ((), "int32")
        >>> usable_donations((0, 1, 2), [f, f, i], [f, i])
        (0, 2)
    """
    room = {}
    for a in out_avals:
        k = (tuple(a[0]), np.dtype(a[1]))
        room[k] = room.get(k, 0) + 1
    kept = []
    for pos in donate:
        k = (tuple(in_avals[pos][0]), np.dtype(in_avals[pos][1]))
        if room.get(k, 0):
            room[k] -= 1
            kept.append(pos)
    return tuple(kept)


def make_replay(ops, in_vids, out_vids, remat=False, kernels=False, rounded=False, apart=False):
    """A pure JAX function ``f(*input arrays) -> tuple of output arrays`` replaying ``ops``.

    ``kernels``: call each op's jitted eager kernel (where it is one) instead of its plain function: JAX reuses the
    kernel's trace for those input types (auto-jit traced it already to infer shapes) instead of tracing the op
    again, and XLA inlines the call. ``rounded``: every float16/bfloat16 result is rounded to its type, as eager's
    stored results are (XLA fuses ops and keeps their float32 intermediates otherwise; auto-jit promises eager's
    numbers), and a square root is not fused into a division that would make it a reciprocal square root.
    ``apart``: ``f`` takes one more argument, last, a 0-d int32 zero, and every float result an op computes is kept
    apart from its readers' arithmetic by it (:func:`_apart`: no multiply and add of two ops fused into one FMA)."""
    from ..core._op import VJP, vjp_cotangents
    ops = prune(ops, out_vids)
    if remat:  # sublinear memory: every gradient op recomputes its forward instead of keeping residuals
        ops = [(VJP.bind(**dict(op.params), remat=True) if op.prim is VJP else op, ins, outs) for op, ins, outs in ops]
    pairs = {} if remat else _vjp_pairs(ops)
    # (only values a later op reads are kept apart, and not as a dot's or a convolution's factor alone -- see
    # _factor_only: a result nothing in the program reads -- an optimizer update's new parameters -- has no reader to
    # fuse with, and the barrier changed how XLA fused the update's own ops, an ulp from its eager kernel's)
    read = {v for op, ins, _ in ops for k, v in enumerate(ins) if not _factor_only(op, k)} if apart else ()

    def replay(*arrays):
        if apart:
            arrays, zero = arrays[:-1], arrays[-1]
        env = dict(zip(in_vids, arrays))
        pulls = {}
        # Lowered where a signal may give the program up (_tiers.interruptible: nothing of it has run), a held
        # signal stops the trace at the next op: a Ctrl-C while a large step is traced -- Python, with signals held
        # (MobileNetV3's 404-op cluster: ~0.5 s; JAX's MLIR emission after it has no hook between ops) -- is
        # answered at once, as one while XLA compiles it is
        stoppable = _tiers.interrupting()
        for i, (op, ins, outs) in enumerate(ops):
            if stoppable and _interrupt.pending():
                raise _tiers.Interrupted
            pair = pairs.get(i)
            args = [env[v] for v in ins]
            if rounded and op.name in _STORED_OPERANDS:
                # ``sqrt(a * a)`` would become ``|a|`` (eager's stored square overflows: inf; ``1 / sqrt(a * a)``
                # 0), ``a / broadcast_to(b)`` ``a * broadcast_to(1 / b)`` (an ulp from eager's quotient in a quarter
                # of the values): the op reads a stored operand, as eager's kernel does
                args = [_stored(a) if k in _STORED_OPERANDS[op.name] else a for k, a in enumerate(args)]
            if pair is None:
                fn = op.fn
                if kernels:
                    k = op.nested_kernel
                    if hasattr(k, "lower") and hasattr(k, "trace"):
                        fn = k
                res = fn(*args)
            elif pair[0] == "fwd":
                # the forward of an op whose gradient op comes later: computed once, by jax.vjp, whose pullback
                # the gradient op applies (rather than running the forward again inside vjp[op]: ~30% more
                # lowered ops for XLA to deduplicate)
                res, pulls[i] = _forward_with_pullback(op, args, pair[1], kernels)
            else:
                fwd_res, pull = pulls[pair[1]]
                params = dict(op.params)
                cts = [env[v] for v in ins[params["nin"]:]]
                res = tuple(pull(vjp_cotangents(params["op"], fwd_res, cts, params["given"])))
            if rounded and op.name in _STORED:
                # XLA's algebraic simplifier rewrites across these ops' results: ``a / sqrt(b)`` into
                # ``a * rsqrt(b)`` (a different rounding: a QAT layer's BatchNorm folding, ``1 / sqrt(var + eps)``,
                # then fake-quantized its weights to other levels), ``log(exp(a))`` into ``a``, ``exp(a) * exp(b)``
                # into ``exp(a + b)``, ``log(a ** k)`` into ``k * log|a|``, ``(a / b) / c`` into ``a / (b * c)``
                # (an overflow eager's stored result has, gone: inf became finite, and the other way). Eager's
                # ops read each stored result; behind a barrier, so do these. (XLA expands barriers before it
                # fuses: the ops still fuse.)
                res = jax.tree.map(_stored, res)
            elif rounded and ins and _from_truth_values(res, args):
                # a mask made a number (``(x > 0).astype("float32")``): XLA turns ``a * mask`` into a select, whose
                # 0 where eager's ``inf * 0`` is nan would hide a nan eager shows
                res = jax.tree.map(_stored, res)
            if rounded and not _exact(op):
                part = apart and _keeps_apart(op)
                if op.multiple_results:
                    res = [_round(r) for r in res]
                    env.update(zip(outs, [_apart(r, zero) if part and v in read else r for v, r in zip(outs, res)]))
                else:
                    res = _round(res)
                    env[outs[0]] = _apart(res, zero) if part and outs[0] in read else res
            elif op.multiple_results:
                env.update(zip(outs, res))
            else:
                env[outs[0]] = res
        return tuple(env[v] for v in out_vids)

    return replay


# Ops whose results XLA's algebraic simplifier would rewrite their consumers through (see make_replay)
_STORED = frozenset(("sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "pow", "div"))
# ... and ops whose operands (by position) it would rewrite them through: ``sqrt(a * a)`` -> ``|a|``, a division by
# a broadcast value (``broadcast_to``, ``tile``, ``repeat``, ``concat`` of copies) -> a product with its reciprocal
_STORED_OPERANDS = {"sqrt": (0,), "rsqrt": (0,), "div": (1,)}


def _from_truth_values(res, args):
    """Whether ``res`` is a non-boolean result of boolean operands only (a mask converted to numbers)."""
    return (getattr(res, "dtype", None) not in (None, np.bool_)
            and all(getattr(a, "dtype", None) == np.bool_ for a in args))


# (exponent, mantissa) bits of float32 / float64: a reduce_precision to them changes no value
_OWN_BITS = {np.dtype(np.float32): (8, 23), np.dtype(np.float64): (11, 52)}


def _stored(x):
    """``x`` as a stored result XLA does not rewrite its readers through: behind an optimization barrier, which the
    optimizing pipeline keeps through its algebraic simplification, and -- for float32/float64 -- a rounding to its
    own precision (no value changes), which the quick tier's pipeline keeps (with XLA's older loop emitters it
    drops a barrier that has other readers first: ``log(exp(x))`` became ``x`` there). Float16/bfloat16 results
    get their rounding from ``_round``."""
    x = jax.lax.optimization_barrier(x)
    bits = _OWN_BITS.get(getattr(x, "dtype", None))
    return x if bits is None else jax.lax.reduce_precision(x, exponent_bits=bits[0], mantissa_bits=bits[1])


# Ops whose results are entries of their inputs (selections, rearrangements, sign changes): of rounded inputs,
# rounded results -- rounding them again is an elementwise pass for nothing (a float16 ConvNet step: relu,
# max_pool, reshape and their gradients).
_EXACT = frozenset(("relu", "reshape", "transpose", "broadcast_to", "expand_dims", "squeeze", "concat", "stack",
                    "split", "flip", "roll", "tile", "repeat", "copy", "detach", "getitem", "max_pool", "where",
                    "neg", "abs", "maximum", "minimum", "clip", "pad", "relu6"))
# ... and gradient ops whose results are entries of the incoming gradient (or zeros)
_EXACT_GRADIENT = frozenset(("relu", "reshape", "transpose", "expand_dims", "squeeze", "copy", "detach", "neg",
                             "relu6", "flip", "roll"))


def _exact(op):
    if op.prim.name == "vjp":
        fwd = dict(op.params).get("op")
        return getattr(fwd, "name", None) in _EXACT_GRADIENT
    return op.name in _EXACT


_LOW_FLOATS = {np.dtype(jax.numpy.float16): (5, 10), np.dtype(jax.numpy.bfloat16): (8, 7)}


# Ops whose results need no keeping apart (``_apart``): a sum or a difference (and their gradients, the incoming
# gradient summed) ends in no multiply a reader could contract with. And a residual ``x + f(x)`` kept apart from the
# LayerNorm reading it cost a Transformer step 30% (XLA:CPU fused them worse), where every other op's results cost
# 1-2% (benchmarks/results/eager_loop.md, sixty-first session).
_NOT_APART = frozenset(("add", "sub"))


# Ops that read their first two operands only as factors of their own products (a matrix product, a convolution;
# their gradients read the incoming gradient so too where the op has no bias, whose gradient sums it): no reader's
# multiply-add has such an operand as its addend, so a value read only there needs no keeping apart (``_apart``).
# Kept apart, such a value was a pass of its own over memory where a layout copy stood between it and the dot --
# ResNeXt-IBN's auto-jit step: 17 such passes, 7-9 ms of a 135 ms step (benchmarks/results/eager_loop.md,
# sixty-second session).
_FACTOR_OPS = frozenset(("matmul", "linear", "conv", "conv_transpose"))


def _factor_only(op, k):
    """Whether ``op`` reads its operand ``k`` only as a factor of its products (see ``_FACTOR_OPS``)."""
    if op.prim.name == "vjp":
        params = dict(op.params)
        fwd = params["op"]
        if fwd.prim.name == "vjp" or fwd.name not in _FACTOR_OPS:
            return False
        return k < 2 or params["nin"] == 2  # (a cotangent, where the op had no bias to sum it into)
    return k < 2 and op.name in _FACTOR_OPS


def _keeps_apart(op):
    base = op
    while base.prim.name == "vjp":
        base = dict(base.params)["op"]
    return base.name not in _NOT_APART


def _round(x):
    """``x`` rounded to its float16/bfloat16 type where it is one: a rounding XLA keeps (its excess-precision
    rewrites remove the conversions of fused ops, not an explicit ``reduce_precision``)."""
    bits = _LOW_FLOATS.get(getattr(x, "dtype", None))
    if bits is None:
        return x
    return jax.lax.reduce_precision(x, exponent_bits=bits[0], mantissa_bits=bits[1])


def _vjp_pairs(ops):
    """``{index: ("fwd", wrt) | ("vjp", forward index)}``: gradient ops ``vjp[op]`` whose forward ``op`` was
    recorded earlier on the same input values, and that forward (one gradient op per forward; ops with a
    hand-written gradient rule keep their own ``vjp`` implementation)."""
    from ..core._op import VJP
    last = {}
    for i, (op, ins, _) in enumerate(ops):
        if op.prim is not VJP:
            last[(op, ins)] = i
    pairs = {}
    for i, (op, ins, _) in enumerate(ops):
        if op.prim is not VJP:
            continue
        params = dict(op.params)
        fwd = params["op"]
        if fwd.prim.grad is not None or params.get("remat"):
            continue
        j = last.get((fwd, tuple(ins[:params["nin"]])))
        if j is None or j > i or j in pairs:
            continue
        pairs[j] = ("fwd", tuple(params["wrt"]))
        pairs[i] = ("vjp", j)
    return pairs


def _forward_with_pullback(op, primals, wrt, kernels=False):
    """``(outputs, (outputs, pullback))``: ``op`` at ``primals`` and the pullback w.r.t. inputs ``wrt``, as
    ``vjp[op]`` computes it (``core._op._vjp_impl``); ``kernels``: through the jitted eager kernel (its trace is
    reused, see make_replay)."""
    import jax
    fn = op.fn
    if kernels:
        k = op.nested_kernel
        if hasattr(k, "lower") and hasattr(k, "trace"):
            fn = k

    def partial_fn(*diff):
        full = list(primals)
        for k, d in zip(wrt, diff):
            full[k] = d
        return fn(*full)

    outs, pull = jax.vjp(partial_fn, *[primals[k] for k in wrt])
    return outs, (outs, pull)


def _aval(data):
    import jax
    return jax.ShapeDtypeStruct(data.shape, data.dtype)
