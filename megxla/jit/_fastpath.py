"""The prepared call of a compiled step (``without_host``): after a compiled call, the tracer keeps a :class:`Plan`
that lets the next call with the same arguments skip re-walking all state.

The full path of a call flattens the arguments (``_state.collect``: every module attribute, every optimizer slot),
looks the signature up, reads each hyper-parameter, wraps and marks every output. A plan replaces that with

1. cheap guards: the structure epoch (``core._registry``: bumped by ``Module.__setattr__``/``__delattr__`` -- so
   also by ``train()`` and a changed number attribute --, new optimizer slots and param groups,
   ``load_state_dict``, ``Tensor.set_value`` to a new shape or dtype), the identity of Module/Optimizer arguments,
   type, shape and dtype of Tensor arguments, the values of Python scalar arguments, the items of lists and dicts
   held by modules and optimizers (mutated in place, they bypass ``__setattr__``), the key/type layout of each
   param group, GradManager attach versions, and ``.grad`` presence where the recording depends on it;
2. one gather of ``._data`` over the flat list of state Tensors the entry reads and writes;
3. one call of the compiled executable (JAX's C++ fast path) with a flat list; hyper-parameters are device arrays
   re-sent only when their Python value changed (and validated then);
4. one write-back loop.

Any guard that fails returns :data:`MISS` and the call takes the full path, which re-checks everything and builds a
new plan: never a stale plan. The executable itself checks the shapes and dtypes of every input, so a state tensor
rebound to a new shape behind the epoch's back (``t._reset(other)``) also misses (before anything runs or is
donated). Python work per call is a small constant, independent of the number of parameters
(``tests/test_jit_fastpath.py`` counts it).
"""
from __future__ import annotations

import itertools
import operator
import sys

import numpy as np
import jax

from ..core import _dispatch, _interrupt, _registry
from ..core._external import mark_external_vids
from ..core._tensor import Tensor
from . import _state

MISS = object()

_getrefcount = sys.getrefcount
_islice = itertools.islice
_NUMBERS = (float, int, bool, tuple)
_IDENT, _TENSOR, _VALUE, _ARRAY = 0, 1, 2, 3


def _refs_base():
    # References of an array held only by its Tensor's ``_data``, as counted by the shared-buffer check of
    # Plan.__call__ (the inputs tuple, the picked tuple, getrefcount's argument): anything above is another holder.
    ts = [_dispatch.wrap(np.zeros(())), _dispatch.wrap(np.zeros(()))]
    data = [t._data for t in ts]
    arrays = operator.itemgetter(0, 1)(data)
    del data
    return max(map(_getrefcount, operator.itemgetter(0, 1)(arrays)))


class Plan:
    """A compiled entry prepared for calls with the same arguments (see the module doc)."""

    __slots__ = ("tracer", "entry", "sig", "epoch", "context", "nargs", "kw_names", "checks", "targ_pos", "state_ids",
                 "containers", "groups", "state", "arg_slots", "pick", "consts", "hypers",
                 "donate_pick", "refs", "exe", "check_grads", "writes", "write_leaf", "grad_writes", "leaves",
                 "write_pick", "out_pick", "closure")

    def __call__(self, args, kwargs):
        """Run the prepared call, or return :data:`MISS` (nothing read or written) when a guard fails."""
        if _registry._epoch[0] != self.epoch or _dispatch.recorders or _registry.context_key() != self.context:
            return MISS
        if kwargs:
            if tuple(kwargs) != self.kw_names:
                return MISS
            vals = args + tuple(kwargs.values())
        elif self.kw_names:
            return MISS
        else:
            vals = args
        if len(vals) != self.nargs:
            return MISS
        converted = None
        for kind, pos, a, b in self.checks:
            v = vals[pos]
            if kind == _IDENT:
                if v is not a:
                    return MISS
            elif kind == _TENSOR:
                if type(v) is not a:
                    return MISS
                d = v._data
                if d.shape != b[0] or d.dtype != b[1]:
                    return MISS
            elif kind == _ARRAY:
                # a NumPy argument becomes a new Tensor, as on the full path (_state.convert_numpy)
                if type(v) is not np.ndarray or v.shape != b[0] or v.dtype != a:
                    return MISS
                v = Tensor(v)
                if v._data.dtype != b[1]:
                    return MISS
                if converted is None:
                    converted = list(vals)
                converted[pos] = v
            elif type(v) is not a or _state._scalar_key(v) != b:
                return MISS
        if converted is not None:
            vals = converted
        if self.targ_pos:
            ids = {id(vals[p]) for p in self.targ_pos}
            if len(ids) != len(self.targ_pos) or not ids.isdisjoint(self.state_ids):
                return MISS  # a Tensor argument passed twice, or one that is also module/optimizer state
        for c, is_dict, items in self.containers:
            if tuple(map(id, c.values() if is_dict else c)) != items:
                return MISS
        for g, layout in self.groups:
            if (tuple(g), tuple(map(type, g.values()))) != layout:
                return MISS
        for where, name, obj in self.closure:
            # (a module or GradManager the function names from its globals or closure, rebound since)
            try:
                if (where.get(name) if name is not None else where.cell_contents) is not obj:
                    return MISS
            except ValueError:  # (an emptied cell)
                return MISS
        entry = self.entry
        if entry.gms and not gms_current(entry):
            return MISS
        if entry.rec.host_checks and not host_checks_hold(entry):
            return MISS
        st = self.state[:]
        for p, i in self.arg_slots:
            st[i] = vals[p]
        # ---- inputs: one gather, hyper-parameters re-sent only when changed
        extra = self.consts
        for h in self.hypers:
            # h: [getter, group, key, last value, device array, dtype, is SPMD]
            g = h[1]
            cur = _dict_get(g, h[2]) if g is not None else h[0]()  # (not ParamGroup's recording-aware read)
            last = h[3]
            if cur is not last and not (type(cur) is type(last) and type(cur) in _NUMBERS and cur == last):
                if not _resend(h, cur):
                    return MISS
        if self.hypers:
            extra = extra + [h[4] for h in self.hypers]
        if self.check_grads:
            # (one pass: the gather also checks that no ``.grad`` appeared -- recorded without gradients present,
            # a step that back-propagates accumulates into them: another variant)
            data = [t._data for t in st if t._grad is None]
            if len(data) != len(st):
                return MISS
        else:
            data = [t._data for t in st]
        arrays = self.pick(data + extra if extra else data)
        del data  # (the shared-buffer check counts references)
        if self.donate_pick is not None and max(map(_getrefcount, self.donate_pick(arrays))) > self.refs:
            return MISS  # a buffer to donate is held elsewhere too: the full path runs it without donating
        held = False
        try:
            # Ctrl-C is held from here until the write-back is done (core/_interrupt.py): the executable deletes
            # the donated inputs, so its outputs must reach the state
            held = _interrupt.enter()
            try:
                outs = self.exe.executable(*arrays)  # (read per call: the segment's executable may be replaced)
            except TypeError:
                return MISS  # an input's shape or dtype differs (a state tensor rebound behind the epoch): full path
            # ---- outputs and write-back: completed even if interrupted otherwise (the donated inputs are gone)
            try:
                leaves = _leaves(self, st, outs)
                _write_back(self, st, outs, leaves)
            except BaseException:
                leaves = _leaves(self, st, outs)
                _write_back(self, st, outs, leaves)
                raise
        finally:
            if held:
                _interrupt.leave()  # (raises KeyboardInterrupt for a Ctrl-C that arrived meanwhile)
        tracer = self.tracer
        tracer.num_calls += 1
        tracer._last = entry
        tracer._dump_call = (self.sig, st)
        # (no LRU update here: hashing the signature costs as much as walking the state; the full path moves this
        # signature to the end of the cache before it adds another, see trace.__call__)
        return jax.tree_util.tree_unflatten(entry.out_tree, leaves)


def _leaves(plan, st, outs):
    """The returned values, flattened: Python values, new Tensors of outputs, argument/state Tensors, constants."""
    leaves = []
    wrap = _dispatch.wrap
    for kind, x in plan.leaves:
        if kind == 0:
            leaves.append(x)
        elif kind == 1:
            leaves.append(wrap(outs[x]))
        elif kind == 2:
            leaves.append(st[x])
        elif kind == 3:
            leaves.append(wrap(x))
        else:
            leaves.append(leaves[x])
    return leaves


def _write_back(plan, st, outs, leaves):
    # (itemgetter / islice / zip: the per-tensor work is bytecode only, no call per tensor)
    written = plan.write_pick(st)
    # one block of value ids for every value this call produced: written state, then returned Tensors (consumed
    # in C under the GIL: contiguous even with other threads allocating ids)
    vids = list(_islice(_dispatch._vids, len(written) + len(leaves)))
    for t, data, vid in zip(written, plan.out_pick(outs), vids):
        t._data = data
        t._vid = vid
    k = len(written)
    for j, (kind, _) in enumerate(plan.leaves):
        if kind == 1:
            leaves[j]._vid = vids[k + j]
    for i, j in plan.write_leaf:  # a written tensor also returned: the same value (vid) as the returned Tensor
        st[i]._vid = leaves[j]._vid
    if plan.grad_writes:
        from .tracing import _commit
        _commit([], [(st[i], None if k is None else _dispatch.wrap(outs[k]), inplace)
                     for i, k, inplace in plan.grad_writes])
    if vids:
        mark_external_vids(vids[0], vids[-1] + 1)


def _resend(h, cur):
    """A hyper-parameter's Python value changed: validate it (the getter) and put the new value on the device."""
    value = h[0]()  # validates; raises before anything ran
    if isinstance(value, Tensor):
        return False  # a Tensor-valued hyper-parameter: the full path reads it
    arr = np.asarray(value, dtype=h[5])
    h[3] = cur
    h[4] = arr if h[6] else jax.device_put(arr)
    return True


def gms_current(entry):
    """Every GradManager the recording taped through still has the attach version it had then."""
    for ref, version in entry.gms:
        g = ref()
        if g is not None and g._version != version:
            return False
    return True


_dict_get = dict.__getitem__


def host_checks_hold(entry):
    """Every Python fact the recording depends on (``Recorder.host_check``) still has its recorded value."""
    for check, value in entry.rec.host_checks:
        if check() != value:
            return False
    return True


def build(tracer, entry, args, kwargs, state, sig, epoch, converted=None):
    """A :class:`Plan` for calling ``entry`` again with arguments like ``args``/``kwargs`` (whose flattened state
    was ``state``), or None when such calls need the full path (guards that sync, external tensors, gradients fed
    in, arguments the plan cannot check cheaply)."""
    if entry.guards or entry.rec.externals or entry.rec.grad_inputs or entry.segments is None \
            or getattr(entry, "new_state", None) or entry.grad_gates or entry.py_writes \
            or len(entry.segments) != 1 or not tracer._donate:
        return None
    seg = entry.segments[0]
    if seg.plan is None:
        return None
    exe = seg.executable
    if type(exe).__name__ == "ScheduleChoice":  # (one executable of two schedules: _schedules; a single-device one)
        exe = exe.exe
    if not isinstance(exe, jax.stages.Compiled) and type(exe).__name__ != "SpmdExecutable":
        return None
    spmd = not isinstance(exe, jax.stages.Compiled)
    vals = tuple(args) + tuple(kwargs.values())
    cvals = vals if converted is None else tuple(converted[0]) + tuple(converted[1].values())
    if len(cvals) != len(vals):
        return None
    plan = Plan()
    plan.tracer, plan.entry, plan.sig, plan.epoch = tracer, entry, sig, epoch
    plan.context = _registry.context_key()
    plan.nargs, plan.kw_names = len(vals), tuple(kwargs)
    index = {id(t): i for i, t in enumerate(state)}
    checks, targ, slots = [], [], []
    for pos, (v, cv) in enumerate(zip(vals, cvals)):
        if type(v) is np.ndarray and isinstance(cv, Tensor):
            d = cv._data
            checks.append((_ARRAY, pos, v.dtype, (v.shape, d.dtype)))
            targ.append(pos)
            slots.append((pos, index.get(id(cv))))
        elif isinstance(v, Tensor):
            d = v._data
            checks.append((_TENSOR, pos, type(v), (d.shape, d.dtype)))
            targ.append(pos)
            slots.append((pos, index.get(id(v))))
        elif _state._is_module(v) or _state._is_optimizer(v):
            checks.append((_IDENT, pos, v, None))
        elif type(v) in _state._SCALARS:
            checks.append((_VALUE, pos, type(v), _state._scalar_key(v)))
        else:
            return None  # containers, arrays, other objects: the full path flattens them
    if len({i for _, i in slots}) != len(slots) or any(i is None for _, i in slots):
        return None  # one Tensor passed twice (or, defensively, an argument that is not in the state)
    plan.checks, plan.targ_pos, plan.arg_slots = tuple(checks), tuple(targ), tuple(slots)
    arg_objs = {id(cvals[p]) for p in targ}
    plan.state_ids = frozenset(id(t) for t in state if id(t) not in arg_objs)
    containers, groups = [], []
    _containers(vals, containers, groups, set())
    plan.containers, plan.groups = tuple(containers), tuple(groups)
    plan.closure = tuple(_state.closure_slots(tracer.__wrapped__))
    plan.state = list(state)
    plan.check_grads = entry.grad_key is not None
    # inputs: state first, then constants, then hyper-parameters; ``pick`` orders them as the executable wants
    n = len(state)
    consts, hypers, order = [], [], []
    for kind, a, b in seg.plan:
        if kind == 0:
            order.append(a)
        elif kind == 1:
            if a is None:
                return None  # a ``.grad`` input
            order.append(("c", len(consts)))
            consts.append(a)
        else:
            src = getattr(a, "source", None)
            cur = _dict_get(src[0], src[1]) if src is not None else a()
            value = a()
            if isinstance(value, Tensor):
                return None
            arr = np.asarray(value, dtype=b)
            order.append(("h", len(hypers)))
            hypers.append([a, src[0] if src else None, src[1] if src else None, cur,
                           arr if spmd else jax.device_put(arr), b, spmd])
    nconst = len(consts)
    flat = [o if isinstance(o, int) else (n + o[1] if o[0] == "c" else n + nconst + o[1]) for o in order]
    plan.pick = _picker(flat)
    plan.consts, plan.hypers = consts, hypers
    if entry.donate:
        plan.donate_pick = _picker(list(entry.donate))
        plan.refs = _REFS
    else:
        plan.donate_pick, plan.refs = None, 0
    plan.exe = seg
    out_pos = {v: k for k, v in enumerate(seg.out_vids)}
    writes = tuple((i, out_pos[v]) for i, v in entry.writes)
    if len({i for i, _ in writes}) != len(writes):
        return None
    plan.writes = writes
    plan.write_pick = _picker([i for i, _ in writes])
    plan.out_pick = _picker([k for _, k in writes])
    gw = []
    for i, v in entry.grad_writes:
        if v is not None and v not in out_pos:
            return None
        gw.append((i, None if v is None else out_pos[v], i in entry.grad_inplace))
    plan.grad_writes = tuple(gw)
    inputs = {v: i for i, v in enumerate(entry.rec.input_vids)}
    leaves, leaf_of, first = [], {}, {}
    for j, (kind, v) in enumerate(entry.out_leaves):
        if kind == "v":
            leaves.append((0, v))
        elif v in first and j not in entry.out_state:
            leaves.append((4, first[v]))  # the same result twice (``return c, c``): the same Tensor, as eager
        elif j in entry.out_state:  # a returned state Tensor (written or not): that same object, as eager
            leaves.append((2, entry.out_state[j]))
        elif v in out_pos:
            leaf_of.setdefault(out_pos[v], len(leaves))
            leaves.append((1, out_pos[v]))
        elif v in inputs:
            return None  # another Tensor holding an input's value (rare): the full path wraps it
        else:
            leaves.append((3, entry.rec.consts[v]))
        if kind != "v" and j not in entry.out_state:
            first.setdefault(v, j)
    plan.leaves = tuple(leaves)
    plan.write_leaf = tuple((i, leaf_of[k]) for i, k in writes if k in leaf_of)
    return plan


def _picker(indices):
    """``f(xs) -> tuple of xs[i] for i in indices`` in C (operator.itemgetter; also for 0 and 1 index)."""
    if len(indices) > 1:
        return operator.itemgetter(*indices)
    if len(indices) == 1:
        i = indices[0]
        return lambda xs: (xs[i],)
    return lambda xs: ()


def _containers(objs, out, groups, seen):
    """The lists and dicts (with their items' ids) held by the modules and optimizers among ``objs``."""
    for v in objs:
        if id(v) in seen:
            continue
        seen.add(id(v))
        if _state._is_module(v):
            for k, a in v.__dict__.items():
                if isinstance(a, (list, dict, tuple)) and k[0] != "_":
                    _container(a, out, groups, seen)
                elif _state._is_module(a):
                    _containers((a,), out, groups, seen)
        elif _state._is_optimizer(v):
            _container(v.param_groups, out, groups, seen)


def _container(c, out, groups, seen):
    if id(c) in seen:
        return
    seen.add(id(c))
    items = list(c.values()) if isinstance(c, dict) else list(c)
    if isinstance(c, dict) and "params" in c:
        # a param group: its hyper-parameter values change (schedules) and are inputs; its key/type layout is not
        groups.append((c, (tuple(c), tuple(map(type, c.values())))))
    elif not isinstance(c, tuple):
        out.append((c, isinstance(c, dict), tuple(map(id, items))))
    for a in items:
        if isinstance(a, (list, dict, tuple)):
            _container(a, out, groups, seen)
        elif _state._is_module(a):
            _containers((a,), out, groups, seen)


_REFS = _refs_base()
