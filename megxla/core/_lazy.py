"""``Lazy``: the data of a tensor whose op auto-jit has collected into a cluster but not run yet.

Under ``megxla.config.auto_jit`` the eager compute step of :func:`~megxla.core._dispatch.apply` hands ops to a
collector (``jit/_autojit.py``, registered in :data:`COLLECT`), which returns Tensors holding ``Lazy`` data: the
shape and dtype are known at once (so shape checks, ``x.shape`` and errors happen at the user's line), the value
when the cluster runs. Anything that needs the value -- a host read through ``Tensor._value``, ``np.asarray``,
an attribute of the jax array -- *forces* it: the pending cluster is compiled (or run op by op) and every Tensor
still holding one of its ``Lazy`` values gets the real array back in ``_data``.

Core only defines the placeholder and the hook; the cluster logic lives in ``jit`` (layers only look down).
"""
from __future__ import annotations

import math
import threading
import weakref

import numpy as np

from .dtypes import host_range, host_value

__all__ = ["Lazy", "COLLECT", "FLUSH", "resolve", "known_range", "Shifted", "Columns", "FloorDivided", "limits"]

_get_ident = threading.get_ident

# The auto-jit collector (set by jit): ``collect(op, inputs) -> tuple of output Tensors``, or None when the op runs
# eagerly now (its inputs then hold concrete arrays). None while auto-jit has never been switched on.
COLLECT: list = [None]
# ``flush()``: run the calling thread's pending cluster now (set by jit with COLLECT; called before an interpreter
# -- a trace -- starts: traces read their state tensors' arrays directly).
FLUSH: list = [None]
# ``step_end()``: the natural end of a training step (called by ``Optimizer.step``; set by jit with COLLECT).
STEP_END: list = [None]
# ``grads_cleared([(param, grad)])``: ``Optimizer.clear_grad`` drops these gradients while the calling thread's ops
# may be pending (set by jit with COLLECT): a pending cluster given up later (Ctrl-C), or failing at an op collected
# before the ``clear_grad()``, puts back those it had not made.
GRADS_CLEARED: list = [None]
# ``collecting() -> bool``: the calling thread's ops are collected into a cluster now (set by jit with COLLECT; a
# GradManager's backward then collects its gradient ops as one ``sequence`` op); asked as a manager starts recording
# and as its backward starts, it ends a loop's eager iterations first
COLLECTING: list = [None]
# ``made(tensor)``: a Tensor was made from host data (``Tensor(numpy_array)``: a step's batch); set by jit while
# auto-jit is on (an early launch finds the step's inputs among the latest ones), None otherwise.
MADE: list = [None]
# ``read()``: a host read of a concrete tensor (``Tensor._value``), set by jit only while a loop's iterations run
# eagerly between the host reads at one line (see jit's read-site timers), None otherwise.
READ: list = [None]
# ``select(x, mask) -> Tensor or None``: ``x[mask]`` (a 1-d bool mask over x's first axis) computed at a fixed size
# (``ops/padded.py``), or None: index as ever. ``set_selected(x, mask, rest, value) -> Tensor or None``: the value of
# ``x`` after ``x[(mask,) + rest] = value`` where ``value`` or an index of ``rest`` is such a selection. Set by jit
# while auto-jit collects the calling thread's ops.
SELECT: list = [None]
SET_SELECTED: list = [None]
# ``select_prefix(x, ints, stop, spec) -> Tensor or None``: ``x[ints..., :stop]`` (``stop`` a 0-d integer Tensor: a
# data set's padded boxes cut to their count) kept in place as a selection of the first rows, or None: index as ever
SELECT_PREFIX: list = [None]
# ``host_rows(data, dtype, device) -> Lazy or None``: a host array made a Tensor at a line whose arrays change their
# number of rows from step to step (a data set's boxes, one array per image), kept as the first rows of a padded
# value (a selection of them, its count known), or None: made as ever. Set by jit while auto-jit is on.
HOST_ROWS: list = [None]
# ``cluster_now() -> token``: which cluster the calling thread's next op joins (equal tokens: the same cluster). Set
# by jit with COLLECT; a subscript whose ints change asks it (``_indexing._changing_ints``).
CLUSTER_NOW: list = [None]
# ``step_now() -> int``: the training steps (``opt.step()``) the calling thread has ended. Set by jit with COLLECT.
STEP_NOW: list = [None]
# ``defer_check(op, idx, dim, axis, allow_negative, what) -> bool``: ``idx`` (pending) range-checked inside its
# cluster instead of read on the host (``_indexing.check_index_tensor``); False: read it. Set by jit with COLLECT.
DEFER_CHECK: list = [None]
# ``megxla.config.auto_jit``: WANTED[0] is the setting; SWITCH[0](on) applies it (registered by jit, which may be
# imported after the setting is made: it reads WANTED then).
WANTED: list = [False]
SWITCH: list = [None]
# ``megxla.config.deterministic_kernel``: run-to-run reproducible numbers asked for. Auto-jit's step timers then
# choose nothing by time (a step runs as clusters, never eagerly for being faster: the two round differently).
DETERMINISTIC: list = [False]


def known_range(data):
    """``(lo, hi)`` bounding every entry of a pending integer value without computing it, or None.

    The collector notes, for results such as ``y[:, t]`` (a slice of a concrete label tensor), ``argmax`` or
    ``topk``'s indices, where their entries come from: ``(lo, hi)``, a concrete array (its minimum and maximum,
    computed on first use), or a list of such (a concatenation). An index check (``cross_entropy``'s labels,
    ``x[idx]``) passes on that bound instead of reading the value: a read is a cut of the cluster, and a sequence
    model checking ``y[:, t]`` at each of its 32 steps made 32 cuts per step (1.5x eager's step time).

    Example:
        >>> import numpy as np
        >>> class _P: pass
        >>> z = _P(); z.value = None; z.bounds = [(1, 3), (0, 2)]
        >>> known_range(z)
        (0, 3)
    """
    if data.value is not None:
        return None
    r = _range_of(data.bounds)
    dtype = getattr(data, "dtype", None)
    if r is not None and dtype is not None and np.dtype(dtype).kind in "iu":
        lo, hi = limits(dtype)
        if r[0] < lo or r[1] > hi:  # (a bound past what the type holds: its values may have wrapped)
            return None
    return r


def limits(dtype):
    """The integers integer ``dtype`` holds, within int32's (what a bound is kept in): ``(lo, hi)``.

    Example:
        >>> limits(np.uint8), limits(np.int64)
        ((0, 255), (-2147483648, 2147483647))
    """
    info = np.iinfo(dtype)
    return max(int(info.min), -2 ** 31), min(int(info.max), 2 ** 31 - 1)


class Among:
    """A bounds entry (see :func:`known_range`): positions among the rows of auto-jit's selection in place ``pad``
    (``argsort`` of a selection), ``0 <= i < count``: a range once the count is on the host; ``x[i]`` on that
    selection needs none (:func:`among`)."""

    __slots__ = ("pad",)

    def __init__(self, pad):
        self.pad = pad


def among(idx, x):
    """Whether the entries of index ``idx`` are positions among the rows of ``x``, a selection in place (auto-jit's):
    ``x[idx]`` is in range, its check reads no count.

    Example:
        >>> among(Tensor([0]), Tensor([1.0]))
        False
    """
    d, e = idx._data, x._data
    return type(d) is Lazy and type(e) is Lazy and e.pad is not None and d.value is None \
        and type(d.bounds) is Among and d.bounds.pad is e.pad


class Shifted:
    """A bounds entry (see :func:`known_range`): another entry's range moved by ``(lo, hi)`` (``labels[fg] - 1``), or
    -- ``cast`` -- truncated to integers (a float value cast to an integer type: kept only within int32's range).
    ``within``: the integers the result's type holds (:func:`limits`); a range moved past them is no bound (the
    values wrapped: ``uint8(5) - 10`` is 251)."""

    __slots__ = ("entry", "by", "cast", "within")

    def __init__(self, entry, by=(0, 0), cast=False, within=(-2 ** 31, 2 ** 31 - 1)):
        self.entry, self.by, self.cast, self.within = entry, by, cast, within


class Columns:
    """A bounds entry (see :func:`known_range`): the value's rows are rows of ``A[chain[0]][chain[1]]...`` -- ``A``
    the concrete array ``ref()``, each ``chain`` item a static index -- and its other axes that array's: a detector's
    ``gt[match]`` (rows of the boxes) and then ``gt[match][:, 4]`` (rows of the boxes' label column). An index check
    of ``labels - 1`` then bounds it by the label column's range, not by the coordinates' too. ``head``: the rows are
    among the first ``head.count()`` -- a selection ``x[:n]``'s (jit's ``Pad``), once its count is on the host
    (``head.known()``): a data set's boxes cut to their count, not the zero rows padding them. ``aligned``: row ``i``
    is that array's row ``i`` (a selection of the first rows keeps them so: only then may a prefix add a head)."""

    __slots__ = ("ref", "chain", "head", "aligned", "range")

    def __init__(self, ref, chain, head=None, aligned=False):
        self.ref, self.chain, self.head, self.aligned, self.range = ref, chain, head, aligned, None


class FloorDivided:
    """A bounds entry (see :func:`known_range`): another entry's range floor-divided by integers in ``by`` (``lo, hi``,
    both positive): ``positions // n``."""

    __slots__ = ("entry", "by")

    def __init__(self, entry, by):
        self.entry, self.by = entry, by


def _array_range(a):
    """(lo, hi) of a host array's entries -- a float's truncated, as its cast to integers -- or None."""
    if a.size == 0:
        return None
    if a.dtype.kind == "f":  # (a float's range is asked for its cast to integers only: truncated, as the cast)
        lo, hi = float(a.min()), float(a.max())
        return (int(lo), int(hi)) if math.isfinite(lo) and math.isfinite(hi) else None
    if a.dtype.kind not in "iu":
        return None
    return int(a.min()), int(a.max())


def _range_of(b):
    if b is None or type(b) is tuple:
        return b
    if type(b) is Columns:
        if b.range is None:
            a = b.ref()
            if a is None:
                return None
            a = host_value(a)
            for index in b.chain:
                a = a[index]  # (every index after a head's keeps the rows: it applies to them last)
            head = b.head
            if head is not None and not head.known():
                return _array_range(np.asarray(a))  # (kept once the head's count is known)
            b.range = _array_range(np.asarray(a if head is None else a[:head.count()])) or ()
        return b.range or None
    if type(b) is FloorDivided:
        r = _range_of(b.entry)
        if r is None:
            return None
        lo, hi = b.by
        return min(r[0] // lo, r[0] // hi), max(r[1] // lo, r[1] // hi)
    if type(b) is Among:  # (bounded by the selection's count, where it is on the host)
        n = b.pad._count
        return (0, n - 1) if n else None
    if type(b) is Shifted:
        r = _range_of(b.entry)
        if r is None or (b.cast and not (-2 ** 31 <= r[0] and r[1] < 2 ** 31)):
            return None
        r = r[0] + b.by[0], r[1] + b.by[1]
        return r if b.within[0] <= r[0] and r[1] <= b.within[1] else None  # (past its type: it may have wrapped)
    if type(b) is list:
        parts = [_range_of(x) for x in b]
        if any(x is None for x in parts):
            return None
        return min(x[0] for x in parts), max(x[1] for x in parts)
    if type(b) is weakref.ref:  # a concrete array: the source of a selection (its values are a superset)
        b = b()
        if b is None:
            return None
    if b.dtype.kind in "iu":
        r = host_range(b)  # (labels made from host data: their copy's bounds, no wait for the device)
        if r is not None:
            return r
    return _array_range(host_value(b))


class ClusterFailed(RuntimeError):
    """Reading a value whose cluster raised when it ran (the error was raised at that run)."""


class Lazy:
    """Placeholder data of a collected op's output: ``shape``, ``dtype``, ``ndim`` and ``weak_type`` now, the
    value once its cluster ran (:meth:`force`). Other attributes of a jax array force it and are read from it.

    Example:
        >>> import jax.numpy as jnp
        >>> class _Done:                   # a cluster that has already run
        ...     def flush(self): pass
        >>> z = Lazy((2,), jnp.float32, False, _Done(), 0); z.value = jnp.zeros(2)
        >>> z.shape, np.asarray(z).tolist()
        ((2,), [0.0, 0.0])
    """

    # ``bounds`` (set by the collector for some integer results): where the value's entries are known
    # to lie without computing it -- see :func:`known_range`
    # ``pad`` (a boolean selection auto-jit computes at a fixed size, see ``ops/padded.py``): the selection's
    # count (jit's ``Pad``: a count Tensor, its value read on the host only when asked) -- ``shape`` is the
    # selection's, ``count`` rows, read when asked; the cluster computes ``raw_shape``: ``len(mask)`` rows, kept in
    # ``phys`` once it ran (a later cluster takes them as they are; a read takes the first ``count``)
    __slots__ = ("raw_shape", "dtype", "ndim", "weak_type", "cluster", "index", "value", "holders", "previous",
                 "pins", "bounds", "pad", "phys", "__weakref__")

    def __init__(self, shape, dtype, weak_type, cluster, index):
        self.raw_shape = shape
        self.dtype = dtype
        self.ndim = len(shape)
        self.weak_type = weak_type
        self.cluster = cluster
        self.index = index
        self.value = None
        self.holders = None  # weak references to the Tensors whose ``_data`` is this placeholder
        self.previous = None  # [(weak ref, data, value id)] of Tensors rebound to it in place, before that
        self.pins = 0  # how many ``previous`` lists hold this placeholder (references that do not make it a result)
        self.bounds = None
        self.pad = None
        self.phys = None

    @property
    def shape(self):
        p = self.pad
        if p is None:
            return self.raw_shape
        return (p.count(),) + self.raw_shape[1:]  # (a padded selection: its count read on the host once)

    @property
    def size(self):
        return math.prod(self.shape)  # (Python ints: exact, ~15x cheaper than np.prod)

    def hold(self, tensor, previous=None):
        """``tensor._data`` is now this placeholder: give it the value when the cluster runs. ``previous``:
        ``(data, value id)`` the tensor held before an in-place rebinding (restored if the cluster fails)."""
        ref = weakref.ref(tensor)
        h = self.holders
        if h is None:
            self.holders = [ref]
        else:
            h.append(ref)
        if previous is not None:
            if self.previous is None:
                self.previous = []
            self.previous.append((ref,) + previous)
            old = previous[0]
            if type(old) is Lazy:
                old.pins += 1
            else:
                self.cluster.pin(old)

    def force(self):
        """The concrete jax array (runs the pending cluster first where needed)."""
        v = self.value
        if v is None and self.phys is not None:  # (a padded selection, computed: its first ``count`` rows)
            v = self.value = self.pad.selected(self.phys)
        if v is None:
            # (a small value a few exact ops compute from values already there -- a count in a data set's image
            # info -- is computed by itself: the pending cluster is not cut for it, see jit's ``_Cluster.peek``)
            peek = getattr(self.cluster, "peek", None)
            if peek is not None and self.pad is None:
                v = peek(self)
                if v is not None:
                    return v
            self.cluster.flush()
            v = self.value
            if v is None and self.phys is not None:
                v = self.value = self.pad.selected(self.phys)
            if v is None:
                why = getattr(self.cluster, "why", "failed when it ran (the error was raised there)")
                raise ClusterFailed(f"a {self.shape} {np.dtype(self.dtype).name} value of an auto-jit cluster that "
                                    f"{why}")
        return v

    def devices(self):
        """The devices of the value: where its cluster can tell without running (see the collector's
        ``devices``), else those of the computed value."""
        if self.value is None:
            devs = self.cluster.devices()
            if devs is not None:
                return set(devs)
        return self.force().devices()

    def __getattr__(self, name):  # (slots are all set in __init__, so this runs for jax.Array's other attributes)
        return getattr(self.force(), name)

    def __array__(self, dtype=None, copy=None):
        a = np.asarray(self.force())
        return a if dtype is None else a.astype(dtype)

    def __jax_array__(self):
        return self.force()

    def __repr__(self):
        return f"<lazy {self.shape} {np.dtype(self.dtype).name}>" if self.value is None else repr(self.value)


def _forwarding(name):
    def method(self, *args, **kwargs):
        return getattr(self.force(), name)(*args, **kwargs)
    method.__name__ = name
    return method


for _name in ("__len__", "__iter__", "__getitem__", "__bool__", "__float__", "__int__", "__index__",
              "__dlpack__", "__dlpack_device__", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__neg__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
              "__format__"):
    setattr(Lazy, _name, _forwarding(_name))
Lazy.__hash__ = object.__hash__


def shape_key(t, drop=None):
    """What ``t``'s shape (without axis ``drop``, normalized) is known to equal without reading a selection's count:
    for auto-jit's selection in place (``pad``), its rows' identity and cluster shape -- two such Tensors of the same
    rows have one count --, else its shape.

    Example:
        >>> shape_key(Tensor(np.zeros((2, 3))), drop=1)
        (2,)
    """
    d = t._data
    if type(d) is Lazy and d.pad is not None:
        raw = d.raw_shape
        if drop is None:
            return d.pad, raw
        return raw[1:] if drop == 0 else (d.pad, raw[:drop] + raw[drop + 1:])
    s = t.shape
    return s if drop is None else s[:drop] + s[drop + 1:]


def dim(t, axis):
    """``t.shape[axis]``, without reading a selection's count (auto-jit's selection in place, ``pad``) where ``axis``
    is not its rows: a head's ``linear(f[fg], w)`` checks its last axis only.

    Example:
        >>> dim(Tensor(np.zeros((2, 3))), -1)
        3
    """
    d = t._data
    if type(d) is Lazy and d.pad is not None and axis % len(d.raw_shape) != 0:
        return d.raw_shape[axis]
    return t.shape[axis]


def kept_rows(t, target):
    """The cluster shape of ``reshape(t, target)`` where ``t`` is a selection in place (auto-jit's, ``pad``) and the
    reshape keeps its rows -- ``target`` a tuple of ints, its first ``-1`` or the count (known), the others those
    of ``t``'s other axes --: ``(rows,) + the others`` (no count read, the cluster's key free of it); else None.

    Example:
        >>> kept_rows(Tensor(np.zeros((2, 3))), (-1, 3)) is None  # (not a selection in place)
        True
    """
    d = t._data
    if type(d) is not Lazy or d.pad is None or type(target) not in (tuple, list) or not target:
        return None
    raw = d.raw_shape
    first, tail = target[0], tuple(target[1:])
    if type(first) is not int or any(type(n) is not int or n < -1 for n in tail):
        return None
    # (a count of 0 given: eager's checks, which refuse a -1 among zeros)
    if first != -1 and not (first > 0 and d.pad.known() and first == d.pad.count()):
        return None
    inner = math.prod(raw[1:])
    if tail.count(-1) > (0 if first == -1 else 1) or not inner:
        return None
    if -1 in tail:
        rest = -math.prod(tail)
        if not rest or inner % rest:
            return None
        tail = tuple(inner // rest if n == -1 else n for n in tail)
    return (raw[0],) + tail if math.prod(tail) == inner else None


def same_shape(a, b, drop=None):
    """Whether ``a``'s shape is ``b``'s (without ``b``'s axis ``drop``, normalized) -- for two selections of the same
    rows (``label[fg]``, ``pred[fg]``) without reading their count.

    Example:
        >>> same_shape(Tensor(np.zeros(2)), Tensor(np.zeros((2, 3))), drop=1)
        True
    """
    if shape_key(a) == shape_key(b, drop):
        return True
    sb = b.shape
    return a.shape == (sb if drop is None else sb[:drop] + sb[drop + 1:])


def same_rows(a, b):
    """Whether ``a`` and ``b`` are selections of the same rows (auto-jit's, in place): their counts are equal, unread.

    Example:
        >>> same_rows(Tensor(np.zeros(2)), Tensor(np.zeros(2)))  # (plain tensors: their shapes say)
        False
    """
    da, db = a._data, b._data
    return type(da) is Lazy and da.pad is not None and type(db) is Lazy and db.pad is da.pad


def resolve(t):
    """The concrete array of Tensor ``t`` (forcing a pending value), written back into ``t`` by the thread whose
    cluster made it. Another thread only reads it: the owner may be rebinding ``t`` at this moment (``x._reset``),
    and a write from here could put an older value back over its newer one."""
    d = t._data
    if type(d) is Lazy:
        v = d.force()
        if d.cluster.owner == _get_ident() and t._data is d:
            t._data = v
        return v
    return d
