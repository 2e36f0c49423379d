"""The with-host replay of a compiled call (``trace(without_host=False)``, MegEngine's default): the Python body runs
on every call under :class:`_Replayer`, which checks each op against the recording and gives it its value from the
compiled segments; the body's host reads are compared with the recorded ones as they happen."""
from __future__ import annotations

import weakref

import jax
import numpy as np

from ..core import _dispatch
from ..core._dispatch import wrap
from ..core import _registry
from ..core._tensor import Tensor
from ._external import mark_external
from ._recording import Pending, TraceError


class _GuardMismatch(Exception):
    """Raised inside a replay (trace with the host) whose ops left the recording after a read value differed."""

    def __init__(self, values, index):
        super().__init__(index)
        self.values, self.index = values, index


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


class _KeyOrdered(dict):
    """A dict of a traced function's results, flattened in insertion order: JAX's own dict node sorts the keys,
    so a compiled call returned ``{"loss": l, "acc": a}`` as ``{"acc": a, "loss": l}`` and
    ``loss, acc = step(x).values()`` swapped them (the recording call, eager, kept the body's order)."""


# (unflattened as a plain dict with the body's key order)
jax.tree_util.register_pytree_node(_KeyOrdered, lambda d: (list(d.values()), tuple(d.keys())),
                                   lambda keys, values: dict(zip(keys, values)))


def _keep_order(obj):
    """``obj`` with each plain dict (in lists, tuples, namedtuples and dicts) as a :class:`_KeyOrdered`."""
    t = type(obj)
    if t is dict:
        return _KeyOrdered((k, _keep_order(v)) for k, v in obj.items())
    if t is list:
        return [_keep_order(o) for o in obj]
    if t is tuple:
        return tuple(_keep_order(o) for o in obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return t(*[_keep_order(o) for o in obj])
    return obj


def _has_dict(obj):
    t = type(obj)
    if t is dict:
        return True
    if t is list or isinstance(obj, tuple):
        return any(_has_dict(o) for o in obj)
    return False


def _flatten(out):
    if _has_dict(out):
        out = _keep_order(out)
    leaves, tree = jax.tree_util.tree_flatten(out, is_leaf=lambda x: isinstance(x, Tensor) or x is None)
    return leaves, tree


class _StaleExternals(Exception):
    """Raised inside a replay (trace with the host) where the body uses another tensor from the enclosing scope
    than its recording did (``net = new_model`` between calls): the recording is for the old one; record again."""


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
        # State tensors holding one value in this call, recorded as several (``x[...] = y`` makes x share y's value,
        # as MegEngine's rebinding does: an EMA observer's ``runtime_momentum[...] = momentum`` after its first
        # batch): vid -> the recorded inputs it stands for. Each is fed the same array (equal values); a call
        # through the replayer donates nothing, and the prepared one checks for shared buffers (tracing._shared).
        self.aliases = {}
        for t, v in zip(state, rec.input_vids):
            self.env[v] = t._data
            was = self.vmap.setdefault(t._vid, v)
            if was != v:
                self.aliases.setdefault(t._vid, {was}).add(v)
        _grad_env(self.env, entry, state)
        for i, v in rec.grad_inputs:
            if state[i]._grad is not None:
                self.vmap[state[i]._grad._vid] = v
        for v, getter in rec.hyper.items():
            self.env[v] = np.asarray(getter(), dtype=entry.avals[v].dtype)
        self.next_segment = 0
        self.nread = 0
        self.known = []  # values of this call's guarded reads so far
        self.differs = None  # index (into entry.guards) of the first read whose value differs from the recording
        self.host_made = []  # vid ranges of this call's exclude_from_trace blocks
        self.fed = {}  # {vid: array}: graph inputs replaced by tensors made in those blocks
        self.escape_refs = []  # [(weakref, vid, placeholder)]: values the body keeps beyond the call (finish)
        n = len(rec.externals)
        self.external_vids = frozenset(rec.input_vids[-n:]) if n else frozenset()
        self.first_vid = next(_dispatch._vids)  # tensors with smaller value ids existed before this call

    def _fail(self, msg, reason):
        if self.differs is not None:
            # the op sequence left the recording after a value read on the host changed: a guard miss
            raise _GuardMismatch(self.known, self.differs)
        # str() is MegEngine's text (code matches on it); megxla's detail shows in the traceback as a note
        exc = TraceError(f"trace error because {reason}")
        exc.add_note(f"{self.tracer._what}: the call differs from its recording: {msg}")
        raise exc

    def _id_mismatch(self, got, want):
        """MegEngine's reason for an op input that is another value than recorded: which side is internal
        (computed by a recorded op) and which external (an input or constant of the trace)."""
        produced = {v for _, _, outs in self.ops for v in outs}
        if want in produced and got not in produced:
            return "expect internal node, got external"
        if want not in produced and got in produced:
            return "expect external node, got internal"
        return "input id mismatch"

    def apply(self, op, inputs):
        i = self.pos
        if i >= len(self.ops):
            self._fail(f"too many ops: the recording has {len(self.ops)}, this call runs more (next: {op!r})",
                       "too many instructions")
        rop, rins, routs = self.ops[i]
        if rop is not op:
            self._fail(f"operator mismatch at op #{i}: recorded {rop!r}, got {op!r}", "operator mismatch")
        rec = self.entry.rec
        for j, (t, rv) in enumerate(zip(inputs, rins)):
            mv = self.vmap.get(t._vid)
            if mv == rv:
                continue
            if mv is not None and rv in self.aliases.get(t._vid, ()):
                continue  # (another recorded input this call's state tensor also stands for, see __init__)
            if mv is not None:
                self._fail(f"op #{i} {op!r} input {j} is a different traced value than in the recording",
                           self._id_mismatch(mv, rv))
            if rv in rec.hyper:
                # the value the body's optimizer read just now (``group["lr"] = x`` earlier in the body counts),
                # not the one read at call start
                value = self._materialize(t) if isinstance(t._data, Pending) else t._data
                self.env[rv] = np.asarray(value, dtype=self.entry.avals[rv].dtype)
            elif rv in rec.host_inputs:
                self.env[rv] = self._materialize(t) if isinstance(t._data, Pending) else t._data
            elif rv in rec.consts:
                if t._vid != rv and not np.array_equal(np.asarray(t._data), np.asarray(rec.consts[rv])):
                    self._fail(f"op #{i} {op!r} input {j} is a different constant than in the recording",
                               "tensors not equals")
            elif self._feedable(i, rv, t):
                self.fed[rv] = t._data  # host code replaced this value: the graph takes the new one in
            elif rv in self.external_vids and t._vid < self.first_vid and not isinstance(t._data, Pending):
                raise _StaleExternals()  # another tensor from the enclosing scope than recorded (a new model)
            else:
                self._fail(f"op #{i} {op!r} input {j}: the recording computed it inside the trace (internal), "
                           f"this call passes a tensor from outside (external)", "expect internal node, got external")
            self.vmap[t._vid] = rv
        outs = tuple(_pending(v, self.entry) for v in routs)
        escaped = self.entry.escaped
        for o, v in zip(outs, routs):
            self.vmap[o._vid] = v
            if v in escaped:
                self.escape_refs.append((weakref.ref(o), v, o._data))
        self.pos += 1
        for r in _dispatch.recorders:  # the body's GradManagers tape the replayed ops as they would eager ones
            r._record(op, inputs, outs)
        return outs

    def _feedable(self, i, rv, t):
        """Whether ``t``, made in this call's ``exclude_from_trace`` block, may stand for the traced value
        ``rv`` at op ``i``: the graph part that runs op ``i`` takes ``rv`` in (the recording cut it at the
        block) and has not run yet, and ``t`` has ``rv``'s shape and dtype."""
        if not any(lo <= t._vid < hi for lo, hi in self.host_made) or isinstance(t._data, Pending):
            return False
        segs = self.entry.segments
        for k in range(self.next_segment, len(segs)):
            if segs[k].start <= i < segs[k].end:
                aval = self.entry.avals[rv]
                return rv in segs[k].in_vids and tuple(t.shape) == tuple(aval.shape) and t.dtype == aval.dtype
        return False

    def _run_segments(self, upto):
        segs = self.entry.segments
        while self.next_segment < len(segs) and segs[self.next_segment].end <= upto:
            seg = segs[self.next_segment]
            try:
                arrays = [self.fed[v] if v in self.fed else self.env[v] for v in seg.in_vids]
            except KeyError:
                self._fail("a value made by host code (exclude_from_trace) that the graph needs was not provided",
                           "data unreadable")
            self.env.update(zip(seg.out_vids, seg.executable(*arrays)))
            self.next_segment += 1

    def host_check(self, check, value):
        pass  # the call chose this recording because its host checks hold (_call_variants)

    def read(self, t, guard=True):
        value = self._materialize(t)
        if guard:
            # the body's own read: compare with the recording (a changed value is a guard miss once the ops
            # leave the recording; host-only uses of it, e.g. logging, keep the recording valid)
            k = self.nread
            self.nread += 1
            log = self.entry.read_log
            if k < len(log) and log[k][2]:
                self.known.append(np.asarray(value))
                if self.differs is None and not _same(self.known[-1], log[k][0]):
                    self.differs = len(self.known) - 1
        return value

    def _materialize(self, t):
        rv = self.vmap.get(t._vid)
        if rv is None or not isinstance(t._data, Pending):
            return t._data
        folded = self.entry.rec.folded.get(rv)
        if folded is not None:  # computed from constants: no graph cut was made to read it
            t._data = folded
            return folded
        self._run_segments(self.pos)
        if rv not in self.env:
            self._fail(f"reading a value the graph does not keep (op output {rv} read after op #{self.pos}); "
                       f"the recording did not read it here", "data unreadable")
        t._data = self.env[rv]
        return t._data

    def finish(self, out):
        if self.pos != len(self.ops):
            self._fail(f"too few ops: the recording has {len(self.ops)}, this call ran {self.pos}", "mismature end")
        self._run_segments(len(self.ops))
        entry = self.entry
        # every check first (a failed call restores the state), then the writes
        write_values = []
        for i, vid in entry.writes:
            value = self._final_value(self.state[i], vid)
            if value is None:
                self._fail(f"state tensor #{i} was not written as in the recording", "mismature end")
            write_values.append(value)
        for i, vid in entry.grad_writes:
            g = self.state[i]._grad
            if (None if g is None else self.vmap.get(g._vid)) != vid:
                self._fail(f"the .grad of state tensor #{i} was not written as in the recording", "mismature end")
        leaves, _ = _flatten(out)
        returned = []
        for leaf, (kind, v) in zip(leaves, entry.out_leaves):
            if isinstance(leaf, Tensor):
                value = self._final_value(leaf, v)  # (before the state writes below renumber written tensors)
                if value is None:
                    # MegEngine: the value returned was not marked as an output of the graph
                    self._fail("the returned tensors differ from the recording", "data unreadable")
                returned.append((leaf, value))
        dropped = _overflowed(entry, self.env)
        for (i, _), value in zip(entry.writes, write_values):
            t = self.state[i]
            t._data = value
            t._vid = next(_dispatch._vids)
            mark_external(t)
        for i, vid in entry.grad_writes:
            g = self.state[i]._grad
            if i in dropped:
                self.state[i]._grad = None
            elif g is not None:
                g._data = self.env[vid]
                g._vid = next(_dispatch._vids)  # a new value: no overflow flag of the replay stays attached
                mark_external(g)
        for ref, v, pending in self.escape_refs:  # kept beyond the call (a module attribute): readable afterwards
            t = ref()
            # (only a tensor that still holds that value: ``result += c`` rebinds the tensor to another one)
            if t is not None and t._data is pending and v in self.env:
                t._data = self.env[v]
                mark_external(t)
        for leaf, value in returned:
            if isinstance(leaf._data, Pending):
                leaf._data = value
            mark_external(leaf)
        return out

    def _final_value(self, t, recorded):
        """The value of ``t`` (written back or returned) at the end of this call, or None where the graph did not
        keep it. Usually the recorded value; host code (``exclude_from_trace``) may make the body end with
        another one, which is this call's result as long as it is known: a graph value the step keeps, or a
        tensor host code made (MegEngine's trace returns it too)."""
        rv = self.vmap.get(t._vid)
        if rv is not None:
            return self.env.get(rv)
        if isinstance(t._data, Pending):
            return None
        return t._data


def _overflowed(entry, values):
    """State indices whose new ``.grad`` must be None after this call: the GradScaler that unscaled it found
    an inf/NaN (read on the host: one sync, only for steps whose gradients leave with such a flag). In the
    graph the flag only gates the optimizer; a gradient handed back to eager code would be non-finite."""
    if not entry.grad_gates:
        return ()
    flags = {}
    for i, v in entry.grad_gates:
        if v not in flags:
            flags[v] = bool(np.asarray(getattr(values[v], "_data", values[v])))
    return {i for i, v in entry.grad_gates if flags[v]}


def drop_overflowed_grads(state):
    """Eagerly recorded call: every state tensor whose ``.grad`` carries a set overflow flag gets None."""
    flags = {}
    for t in state:
        gate = _registry.grad_gate(t._grad)
        if gate is not None:
            bad = flags.get(id(gate))
            if bad is None:
                bad = flags[id(gate)] = bool(np.asarray(gate._data))
            if bad:
                t._grad = None


def _grad_env(env, entry, state):
    """Feed the ``.grad`` inputs of a recording: the current gradient, or zeros where the tensor has none now
    (accumulating into zeros is computing a fresh gradient)."""
    for i, v in entry.rec.grad_inputs:
        g = state[i]._grad
        aval = entry.avals[v]
        env[v] = g._data if g is not None and g.shape == aval.shape else np.zeros(aval.shape, aval.dtype)


def _pending(vid, entry):
    return wrap(Pending(vid, entry.avals[vid]))
