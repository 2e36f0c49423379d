"""Flattening the arguments of a traced function: which tensors it may read and write (its *state*), and a
hashable signature that keys the executable cache."""
from __future__ import annotations

import functools

import numpy as np

from ..core import _registry
from ..core._tensor import Tensor


_Module = None


def _is_module(obj):
    global _Module
    if _Module is None:
        from ..module import Module as _M
        _Module = _M
    return isinstance(obj, _Module)


def _is_optimizer(obj):
    return hasattr(obj, "param_groups") and hasattr(obj, "_state")


_SCALARS = frozenset({bool, int, float, str, type(None)})


def _scalar_key(v):
    """Key of a Python scalar: its type is part of it (``2`` and ``2.0``, ``1`` and ``True`` compile differently),
    and floats are keyed by their bits so that ``nan`` matches itself and ``-0.0`` differs from ``0.0``."""
    t = type(v)
    if t is float:
        return ("f", v.hex())
    return (t, v)


def without_numbers(sig):
    """``sig`` (:func:`collect`'s signature, :func:`closure_numbers` appended) with the values of its float and int
    items left out, their types kept: two signatures with the same result differ only in Python number values -- a
    module's temperature or drop rate annealed every step, a float argument, a step counter the step advances
    (an EMA's, whose decay follows it), an iteration index argument -- which auto-jit's clusters take as inputs
    (an int that decides the program's structure, a count of repeats, a slice's end, decides their keys, as it does
    the body's Python). Bools (``training``, flags) and strings keep their values.

    Example:
        >>> without_numbers(("c", ("f", (0.5).hex()))) == without_numbers(("c", ("f", (0.25).hex())))
        True
        >>> without_numbers(("c", (int, 2))) == without_numbers(("c", (int, 3)))
        True
        >>> without_numbers(("c", (bool, True))) == without_numbers(("c", (bool, False)))
        False
    """
    if type(sig) is not tuple:
        return sig
    n = len(sig)
    if n == 2 and type(sig[0]) is str and sig[0] == "f" and type(sig[1]) is str:  # (_scalar_key of a float)
        return "f"
    if n == 2 and sig[0] is int and type(sig[1]) is int:  # (_scalar_key of an int)
        return int
    if n == 3 and isinstance(sig[1], type) and (
            (issubclass(sig[1], (float, np.floating)) and (type(sig[2]) in (str, bytes) or isinstance(sig[2], float)))
            or (sig[1] is int and type(sig[2]) is int)
            or (issubclass(sig[1], np.integer) and type(sig[2]) is bytes)):
        # (a closure module's number, _numbers_key: name, type, value or bits; a NumPy number attribute: name,
        # type, bytes; a float subclass argument: "c", type, value)
        return (sig[0], sig[1])
    return tuple(without_numbers(s) for s in sig)


def _has_array(items):
    for o in items:
        t = type(o)
        if t is np.ndarray:
            return True
        if t is list or t is tuple or isinstance(o, (list, tuple)):
            if _has_array(o):
                return True
        elif isinstance(o, dict) and "params" not in o and _has_array(o.values()):
            return True
    return False


def _convert(obj):
    if isinstance(obj, np.ndarray):
        return Tensor(obj)
    if isinstance(obj, (list, tuple)) and _has_array(obj):
        items = [_convert(o) for o in obj]
        if type(obj) is list:
            return items
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, dict) and "params" not in obj and _has_array(obj.values()):
        return {k: _convert(v) for k, v in obj.items()}
    return obj


def convert_numpy(args, kwargs):
    """NumPy arrays among the arguments (also inside lists, tuples and dicts) become Tensors, so that they are
    graph inputs read at every call -- never keyed by ``id`` or baked in as constants (a refilled buffer, or a new
    array reusing a freed one's id, must not run with old values). Returns the arguments unchanged (same objects)
    when there is no array, which is the common case and costs one scan of the arguments."""
    if not (_has_array(args) or (kwargs and _has_array(kwargs.values()))):
        return args, kwargs
    return tuple(_convert(a) for a in args), {k: _convert(v) for k, v in kwargs.items()}


_HOOKS = ("_forward_pre_hooks", "_forward_hooks")


class _Ident:
    """A signature item that is an object by identity, holding it: keyed by ``id`` alone, a new object (a lambda
    assigned as ``self.act``, a hook) made after the recorded one was freed could reuse its id and run the
    recording of the old one."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return type(other) is _Ident and other.obj is self.obj


def collect(args, kwargs):
    """Return ``(tensors, signature)``: every distinct tensor reachable from the arguments (arguments
    themselves, module parameters and buffers, optimizer slots), and a hashable description of the argument
    structure, shapes and dtypes, and static (non-tensor) values.

    ``.grad`` attributes of these tensors are state too; whether each exists is checked per recording by the
    tracer (only recordings that compute gradients depend on it).
    Python number attributes of modules (``self.scale``, ``BatchNorm.momentum``, ``Dropout.drop_prob``,
    ``training``) key it too: the recording baked them in, so a changed value records again."""
    tensors: list = []
    index: dict = {}

    seen_modules: set = set()

    def add(t):
        i = index.get(id(t))
        if i is None:
            i = index[id(t)] = len(tensors)
            tensors.append(t)
        d = t._data
        return (i, d.shape, d.dtype)

    def walk_module(m):
        # NOTE: walks the attributes directly (not named_tensors()): this runs on every call of a traced
        # step, and it cut the per-call cost of a 5-layer ConvNet's step from ~1.2 ms to ~0.2 ms.
        key = id(m)
        if key in seen_modules:
            return ("shared", key)
        seen_modules.add(key)
        items = []
        for k, v in m.__dict__.items():
            if isinstance(v, Tensor):
                items.append((k, add(v)))
            elif type(v) in _SCALARS:
                # NOTE: number attributes the body may read are baked into the recording, so they key the cache.
                items.append((k, _scalar_key(v)))
            elif isinstance(v, _Module):
                items.append((k, walk_module(v)))
            elif isinstance(v, np.generic):  # a NumPy number attribute is baked in like a Python one
                items.append((k, type(v), v.tobytes()))
            elif k[0] != "_" and isinstance(v, (list, tuple, dict)):
                items.append((k, walk(v)))
            elif k in _HOOKS:
                if v:  # forward (pre-)hooks run inside forward: registering or removing one records again
                    items.append((k, "hooks", tuple((h, _Ident(f)) for h, f in v.items())))
            elif k[0] != "_" and callable(v) and not isinstance(v, type):
                # a function attribute (``self.act = F.relu``) decides what forward records: swapping it
                # records again (by identity; the key holds the function, so a new one cannot reuse its id)
                items.append((k, "fn", _Ident(v)))
            elif _registry.state_walker(v) is not None:
                # an object with state tensors held by the module (``self.rng = RNG(seed)``, a GradScaler): its
                # tensors are state of the step as where it is an argument
                items.append((k, walk(v)))
        return ("module", key, tuple(items))

    def hyper_key(v):
        # a hyper-parameter's Python value is a graph input (re-read at every call), not a key; one held as a
        # Tensor (``SGD(params, lr=mge.Tensor(0.1))``) is state of the step
        if isinstance(v, Tensor):
            return add(v)
        if isinstance(v, (list, tuple)) and any(isinstance(x, Tensor) for x in v):
            return tuple(add(x) if isinstance(x, Tensor) else type(x).__name__ for x in v)
        return type(v).__name__

    def walk(obj):
        if isinstance(obj, Tensor):
            return add(obj)
        if isinstance(obj, (list, tuple)):
            return (type(obj).__name__,) + tuple(walk(o) for o in obj)
        if isinstance(obj, dict):
            if "params" in obj:  # an optimizer param group: hyper-parameter values are graph inputs, not keys
                return ("group",) + tuple((k, walk(v) if k == "params" else type(v).__name__)
                                          for k, v in obj.items())
            return ("dict",) + tuple((k, walk(v)) for k, v in obj.items())
        if _is_module(obj):
            return walk_module(obj)
        if _is_optimizer(obj):
            groups = []
            for g in obj.param_groups:
                params = g["params"]
                # (the group dict itself keys it: a compiled step re-reads hyper-parameters from the dicts it
                # was recorded with, so a group replaced by another dict records again)
                groups.append((id(g), tuple(add(p) for p in params),
                               tuple(sorted((k, hyper_key(v)) for k, v in g.items() if k != "params"))))
            slots = []
            for p, st in obj._state.items():
                slots.append((index.get(id(p)), tuple((k, add(v) if isinstance(v, Tensor) else v)
                                                       for k, v in sorted(st.items()))))
            # Python numbers of the optimizer itself (a custom optimizer's step counter driving a warmup, a flag):
            # baked into the recording like a module's, so they key it too
            numbers = tuple((k, _scalar_key(v)) for k, v in obj.__dict__.items() if type(v) in _SCALARS)
            return ("optimizer", id(obj), tuple(groups), tuple(slots), numbers)
        if type(obj) in _SCALARS:
            return ("c", _scalar_key(obj))
        walker = _registry.state_walker(obj)
        if walker is not None:  # e.g. a GradScaler: its tensors are state of the step (core/_registry)
            # (its public number attributes, e.g. GradScaler.growth_interval, are baked into the recording)
            numbers = tuple((k, _scalar_key(v)) for k, v in getattr(obj, "__dict__", {}).items()
                            if k[0] != "_" and type(v) in _SCALARS)
            return ("walked", type(obj).__name__, id(obj), tuple((name, add(t)) for name, t in walker(obj)),
                    numbers)
        if isinstance(obj, (bool, int, float, str, bytes)):
            return ("c", type(obj), obj)
        if isinstance(obj, np.generic):
            return ("c", type(obj), obj.tobytes())
        try:
            hash(obj)
            return ("h", obj)
        except TypeError:
            return ("o", _Ident(obj))

    _is_module(None)  # resolve the Module class once
    # (global switches that decide what the body records, e.g. amp.autocast, key it too: core._registry)
    sig = (walk(args), walk(kwargs), _registry.context_key())
    return tensors, sig


def module_numbers(args, kwargs):
    """``[(module, attribute, value)]``: the Python number (and str/None) attributes of every module (and
    optimizer) reachable from the arguments, e.g. ``training``. A traced step that changes one (``net.eval()``
    inside the body) has the change re-applied after each compiled call, as running the body would
    (:func:`changed_numbers`)."""
    out, seen = [], set()
    _is_module(None)  # resolve the Module class once

    def visit(obj):
        if isinstance(obj, (list, tuple)):
            for o in obj:
                visit(o)
        elif isinstance(obj, dict):
            for o in obj.values():
                visit(o)
        elif _is_module(obj) and id(obj) not in seen:
            seen.add(id(obj))
            for k, v in obj.__dict__.items():
                if type(v) in _SCALARS:
                    out.append((obj, k, v))
                elif isinstance(v, _Module) or (k[0] != "_" and isinstance(v, (list, tuple, dict))):
                    visit(v)
        elif _is_optimizer(obj) and id(obj) not in seen:
            # (an optimizer's own Python numbers: a counter its step advances is advanced by every call)
            seen.add(id(obj))
            out.extend((obj, k, v) for k, v in obj.__dict__.items() if type(v) in _SCALARS)

    visit(args)
    visit(kwargs)
    return out


def changed_numbers(before):
    """The entries of ``before`` (from :func:`module_numbers`) whose attribute now holds another value:
    ``[(weak reference to the module, attribute, new value)]``."""
    import weakref
    out = []
    for obj, k, old in before:
        new = obj.__dict__.get(k, old)
        if type(new) in _SCALARS and _scalar_key(new) != _scalar_key(old):
            out.append((weakref.ref(obj), k, new))
    return out


def apply_numbers(writes):
    """Set the attributes :func:`changed_numbers` found (directly: no structure-epoch bump, which would make
    the next call take the full path although nothing the step depends on changed since the body ran)."""
    _APPLIED[0] += 1  # (closure_numbers' cache: these writes bypass the structure epoch)
    for ref, k, v in writes:
        obj = ref()
        if obj is not None:
            obj.__dict__[k] = v


_APPLIED = [0]  # calls of apply_numbers so far


def module_tensor_attrs(roots):
    """``[(module, {attribute: Tensor})]``: the Tensor attributes of every module reachable from ``roots`` (the
    arguments, and modules a traced function reaches from its closure or globals). A recording call that fails
    puts them back (:func:`restore_module_tensor_attrs`): a body that rebinds ``self.w = self.w * 2`` and then
    raises (or, recorded abstractly, reads a value on the host) must not leave the module holding the new
    Tensor -- under an abstract recording one holding a JAX tracer, unreadable for ever."""
    out = []
    _is_module(None)  # resolve the Module class once
    _visit_tensor_attrs(roots, out, set())
    return out


def tensor_attrs_changed(snapshot, read):
    """Whether a module of ``snapshot`` (from :func:`module_tensor_attrs`) has gained a Tensor attribute since, or
    rebound or lost one whose old Tensor is in ``read`` (ids of the Tensors a recording read): state a recording
    cannot be replayed on. (Rebinding an attribute the step only writes, ``self.feat = y``, is a value the step
    keeps, not new state.)"""
    for m, attrs in snapshot:
        d = m.__dict__
        for k, v in d.items():
            if isinstance(v, Tensor) and k not in attrs:
                return True
        for k, old in attrs.items():
            if d.get(k) is not old and id(old) in read:
                return True
    return False


def _visit_tensor_attrs(obj, out, seen):
    # (a module-level function, not a closure calling itself: that would be a reference cycle holding ``out``,
    # keeping the old Tensors alive until the garbage collector runs)
    if isinstance(obj, (list, tuple)):
        for o in obj:
            _visit_tensor_attrs(o, out, seen)
    elif isinstance(obj, dict):
        for o in obj.values():
            _visit_tensor_attrs(o, out, seen)
    elif _is_module(obj) and id(obj) not in seen:
        seen.add(id(obj))
        out.append((obj, {k: v for k, v in obj.__dict__.items() if isinstance(v, Tensor)}))
        for k, v in obj.__dict__.items():
            if isinstance(v, _Module) or (k[0] != "_" and isinstance(v, (list, tuple, dict))):
                _visit_tensor_attrs(v, out, seen)


def restore_module_tensor_attrs(snapshot):
    """Undo the Tensor attribute rebinding, adding and removal a failed call did (see
    :func:`module_tensor_attrs`)."""
    for m, attrs in snapshot:
        d = m.__dict__
        for k in [k for k, v in d.items() if isinstance(v, Tensor) and k not in attrs]:
            delattr(m, k)  # (through Module.__delattr__: the structure epoch moves on)
        for k, t in attrs.items():
            if d.get(k) is not t:
                setattr(m, k, t)


def closure_numbers(function, memo=None):
    """A signature item for the Python number (and str/None) attributes, ``training`` among them, of the modules
    a function reaches from its closure or globals (:func:`closure_modules`): ``drop = M.Dropout(0.5)`` used by
    ``step`` and switched with ``drop.eval()`` between calls holds no tensor, so nothing else tells the calls
    apart, and a compiled step without the host kept dropping. () where there is no such module. ``memo(mods)``,
    if given, returns the modules' part (:func:`_numbers_key`), e.g. from a cache."""
    # GradManagers too, by identity: ``gm = GradManager().attach(head.parameters())`` rebinding the global the
    # step names between calls (fine-tuning's second phase) ran the recording of the old manager's attached set
    # Optimizers too (an SGD without slots holds no tensor the step could refuse): by identity and param-group
    # layout, so ``opt = SGD(net.parameters(), lr=0.001)`` rebinding the global, or a group added, records again
    mods, others = _closure_values(function)
    if not mods and not others:
        return ()
    key = _numbers_key(mods) if memo is None else memo(mods)
    for o in others:
        if _is_optimizer(o):
            key += (("opt", _Ident(o), tuple((tuple(map(id, g["params"])), tuple(k for k in g if k != "params"))
                                             for g in o.param_groups)),)
        else:
            key += (("obj", _Ident(o)),)
    return key


def _numbers_key(mods):
    """The number attributes of ``mods`` and their submodules, as a hashable key (per module: the module, by
    identity, then ``(name, type, value)`` of each; floats by their bits). A closure model is walked on every
    call of a trace with the host, so this is one flat loop (a 160-module model: 4 ms with module_numbers)."""
    out, seen = [], set()
    stack = list(mods)
    scalars, is_module = _SCALARS, _Module
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        out.append(_Ident(m))
        for k, v in m.__dict__.items():
            t = type(v)
            if t in scalars:
                out.append((k, t, v.hex() if t is float else v))
            elif isinstance(v, is_module):
                stack.append(v)
            elif k[0] != "_" and (t is list or t is tuple or t is dict):
                for o in (v.values() if t is dict else v):
                    if isinstance(o, is_module):
                        stack.append(o)
    return tuple(out)


def _is_grad_manager(v):
    return hasattr(v, "_attached") and hasattr(v, "_version") and hasattr(v, "backward")


def _keyed_object(v):
    """A GradManager or optimizer (whose identity decides what a step records)."""
    return v is not None and not isinstance(v, type) and (_is_grad_manager(v) or _is_optimizer(v))


def _unwrap(function):
    """``(bound objects, plain function or None)``: the objects bound by functools.partial and bound methods
    (``trace(net.forward)``), and by ``trace(net)`` itself, are no arguments either."""
    values, fn = [], function
    while True:
        if isinstance(fn, functools.partial):
            values.extend(fn.args)
            values.extend(fn.keywords.values())
            fn = fn.func
        elif getattr(fn, "__self__", None) is not None and hasattr(fn, "__func__"):
            values.append(fn.__self__)
            fn = fn.__func__
        else:
            break
    _is_module(None)
    if isinstance(fn, _Module):
        values.append(fn)
        fn = None
    return values, fn


def _closure_values(function):
    """``(modules, GradManagers and optimizers)`` a function is bound to or names from its closure cells and
    globals."""
    values, _ = _unwrap(function)
    values += [v for _, _, v in closure_slots(function)]
    return [v for v in values if isinstance(v, _Module)], [v for v in values if _keyed_object(v)]


def closure_slots(function):
    """``[(cell or globals dict, name or None, object)]``: where a function finds the modules and GradManagers
    of :func:`closure_numbers` (a prepared compiled call checks that each still holds the same object: rebinding
    the global ``gm`` bumps no structure epoch)."""
    _, fn = _unwrap(function)
    out = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if isinstance(v, _Module) or _keyed_object(v):
            out.append((cell, None, v))
    code, glb = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if code is not None and glb is not None:
        for name in code.co_names:
            v = glb.get(name)
            if isinstance(v, _Module) or _keyed_object(v):
                out.append((glb, name, v))
    return out


def closure_modules(function):
    """Modules a function reaches without their being arguments: its closure cells and the globals it names
    (``net`` in ``@trace def step(x): return net(x)``), to put their Tensor attributes back after a failed
    recording call."""
    return _closure_values(function)[0]
