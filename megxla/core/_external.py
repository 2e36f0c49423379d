"""Which tensors hold values produced by a compiled executable ("external values"); jit marks them, and
``Tensor._is_external_value`` reads this (a core registry: core imports nothing above itself).

Keyed by ``id`` with a weak reference (Tensor's ``__eq__`` is elementwise, so it cannot key a WeakKeyDictionary);
the value id recorded at marking time makes a later in-place rebinding count as internal again.
"""
import weakref

_external: dict = {}


def mark_external(t):
    key = id(t)
    entry = _external.get(key)
    if entry is None or entry[0]() is not t:
        _external[key] = (weakref.ref(t, lambda _, k=key: _external.pop(k, None)), t._vid)
    else:
        _external[key] = (entry[0], t._vid)


def mark_external_all(tensors):
    """:func:`mark_external` for each of ``tensors``, in one call (a compiled step's write-back marks every tensor it
    wrote; one call keeps that per-call Python work constant)."""
    keys = list(map(id, tensors))
    # (looked up with map: no builtin call per tensor, so the per-call work of a compiled step stays constant)
    for t, key, entry in zip(tensors, keys, list(map(_external.get, keys))):
        if entry is None or entry[0]() is not t:
            _external[key] = (weakref.ref(t, lambda _, k=key: _external.pop(k, None)), t._vid)
        else:
            _external[key] = (entry[0], t._vid)


def is_external(t) -> bool:
    entry = _external.get(id(t))
    return entry is not None and entry[0]() is t and entry[1] == t._vid
