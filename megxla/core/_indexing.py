"""Front end of ``Tensor.__getitem__`` / ``__setitem__``: splits an index into its static structure (an op
parameter) and its integer index tensors (op inputs), with NumPy's semantics for every MegEngine index form:
ints, slices (any step, negative too), ``...``, ``None``, boolean masks, integer tensors/arrays/lists (several
at once broadcast together) and any mix of them.

Every integer index is range-checked as MegEngine does: host-side index data (ints, lists, NumPy arrays) here,
and integer *Tensors* too when running eagerly (their values are read back, one device->host copy). Inside a
recording or compiled step (``trace``/``xla_trace``) index tensors are graph values with no value to check: an
out-of-range entry is clamped into range, as XLA's gather/scatter do. In *checked mode*
(``megxla.config.checked_indexing = True`` or ``MEGXLA_CHECKED_INDEXING=1``) the step also computes whether every
index is in range and reads that flag on the host: a value the compiled step returns and compares before it
writes any state (a jit guard), so a call with an out-of-range index writes nothing and raises (``xla_trace``
records the call again, eagerly, which raises :class:`IndexOutOfRange`; a strict trace raises ``TraceError``).
It costs a device->host sync per call, and the step's buffers are not donated, so it is meant for debugging.

A boolean mask *Tensor* is converted to integer indices on the host when running eagerly (MegEngine's
semantics, one copy). Inside a recording only its number of true values is read on the host (a scalar guard)
and the indices are computed on the device (``mask_indices``): a compiled step whose masks change but whose
counts repeat reuses its executable (detectors' ``pred[mask]``), and a new count records again.
"""
from __future__ import annotations

import dis
import os
import sys

import numpy as np

from . import _lazy
from ._lazy import Lazy, known_range
from .dtypes import host_range, host_value
from ._tensor import Tensor
from ._dispatch import apply, OpError, current_interpreter
from .ops import indexing as P

__all__ = ["IndexOutOfRange", "BadIndex", "check_index_tensor", "check_on_host", "getitem", "incritem", "mask_indices",
           "setitem", "parse"]

_INT = (int, np.integer)
# checked mode for traced steps (see the module docstring); megxla.config.checked_indexing sets it
CHECKED = [os.environ.get("MEGXLA_CHECKED_INDEXING", "0").strip().lower() not in ("0", "false", "no", "off", "")]


class IndexOutOfRange(OpError, IndexError):
    """An integer index (or class label) outside ``[-size, size)`` (labels: ``[0, size)``) of its axis."""


class BadIndex(OpError, IndexError):
    """An index that does not fit the tensor (two ellipses, more indices than axes): an ``IndexError``, as
    NumPy and MegEngine raise, so ``except IndexError`` in MegEngine code catches it."""


def _range_error(op, what, dim, axis):
    return IndexOutOfRange(f"{op}: index {what} is out of range for axis {axis} of size {dim}")


def check_index_tensor(op, idx, dim, axis, allow_negative=True, what="index"):
    """Raise :class:`IndexOutOfRange` if the integer tensor ``idx`` has an entry outside ``[-dim, dim)``
    (``[0, dim)`` without ``allow_negative``). Eagerly the values are read on the host; inside a trace nothing
    is checked (XLA clamps) unless checked mode is on (see the module docstring).

    Args:
        op: the op's name, for the message.
        idx: the integer index tensor.
        dim: the size of the indexed axis.
        axis: the axis number, for the message.
        allow_negative: whether ``-dim <= i < 0`` is valid (NumPy indexing) or not (labels, gather).
        what: what the entries are called in the message ("index", "label").

    Example:
        >>> check_index_tensor("getitem", Tensor([0, 2]), 3, 0)
    """
    d = idx._data
    if type(d) is Lazy and current_interpreter() is None:
        # a known range spares the read: pending (auto-jit), the read would cut the cluster (and, for a padded
        # selection, even its size asks for its count)
        r = known_range(d)
        if r is not None and r[0] >= (-dim if allow_negative else 0) and r[1] < dim:
            return
        # pending and not proven in range: auto-jit reads it, or -- at a line where it always held -- checks it
        # inside the cluster, as MegEngine checks on the device (jit's _device_checks)
        defer = _lazy.DEFER_CHECK[0]
        if defer is not None and d.value is None and defer(op, idx, dim, axis, allow_negative, what):
            return
    if current_interpreter() is not None:
        if CHECKED[0] and idx.size:
            _check_traced(op, idx, dim, axis, allow_negative, what)
        return
    check_on_host(op, idx, dim, axis, allow_negative, what)


def check_on_host(op, idx, dim, axis, allow_negative=True, what="index"):
    """:func:`check_index_tensor`'s eager check: ``idx``'s values read on the host (where no range known for them
    proves them valid).

    Example:
        >>> check_on_host("gather", Tensor([0, 3]), 3, 1, allow_negative=False)
        Traceback (most recent call last):
        ...
        megxla.core._indexing.IndexOutOfRange: gather: index 3 is out of range for axis 1 of size 3 (valid: 0 to 2)
    """
    if idx.size == 0:
        return
    lo = -dim if allow_negative else 0
    d = idx._data
    # a known range spares the read: pending (auto-jit), the read would cut the cluster; labels made from host
    # data keep theirs
    r = known_range(d) if type(d) is Lazy else host_range(d)
    if r is not None and r[0] >= lo and r[1] < dim:
        return
    v = host_value(d)
    bad = (v < lo) | (v >= dim)
    if bad.any():
        raise IndexOutOfRange(f"{op}: {what} {int(v[bad].reshape(-1)[0])} is out of range for axis {axis} of "
                              f"size {dim}" + ("" if allow_negative else f" (valid: 0 to {dim - 1})"))


def _check_traced(op, idx, dim, axis, allow_negative, what):
    # The range test as ops of the step, its result read on the host: the recording raises now if it fails,
    # and the compiled step returns the flag and checks it before writing any state (a guard).
    from ._elemwise_front import BINARY
    from .ops import reduction as R
    lo = -dim if allow_negative else 0
    mn = apply(R.min.bind(axis=None, keepdims=False), idx)
    mx = apply(R.max.bind(axis=None, keepdims=False), idx)
    ok = BINARY["and"](BINARY["ge"](mn, lo), BINARY["lt"](mx, dim))
    if not bool(ok):
        raise IndexOutOfRange(f"{op}: {what} out of range for axis {axis} of size {dim} (min {int(mn.item())}, "
                              f"max {int(mx.item())}; checked mode)")


def _int(op, v):
    if v is None:
        return None
    if isinstance(v, Tensor):
        v = v.item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, _INT):
        raise BadIndex(f"{op}: slice bounds must be ints or None, got {v!r}")
    return int(v)


def _classify(op, item):
    """``(kind, payload, n_axes)``: kind in i (int), s (slice), n (None), e (...), t (int array), m (bool mask),
    b (a Python bool: NumPy's new axis of length 1 or 0)."""
    if item is None:
        return "n", None, 0
    if item is Ellipsis:
        return "e", None, 0
    if isinstance(item, slice):
        step = _int(op, item.step)
        if step == 0:
            raise BadIndex(f"{op}: slice step cannot be zero")
        return "s", ("s", _int(op, item.start), _int(op, item.stop), step), 1
    if isinstance(item, bool):  # NumPy's (and MegEngine's) x[True]: a new axis of length 1 (False: 0)
        return "b", item, 0
    if isinstance(item, (_INT, np.bool_)):  # (MegEngine indexes with a NumPy bool as with the int)
        return "i", int(item), 1
    if isinstance(item, Tensor):
        dt = item.dtype
        if dt == np.bool_ and item.ndim == 0:  # MegEngine indexes with a 0-d bool tensor as with the int
            from .ops.elemwise import astype
            return "t", apply(astype.bind(dtype="int32"), item), 1
        if dt == np.bool_:
            # eagerly the mask is read on the host (one copy, NumPy's nonzero); inside a trace it stays a graph
            # value and only its count is read (see mask_indices)
            if current_interpreter() is None:
                return "m", item.numpy(), item.ndim
            return "M", item, item.ndim
        if dt.kind not in "iu":
            raise BadIndex(f"{op}: index tensors must be integer or bool, got {dt}")
        return "t", item, 1
    try:
        arr = np.asarray(item)
    except Exception:
        arr = None
    if arr is None or arr.dtype == object or (arr.dtype.kind not in "iub" and arr.size):
        raise BadIndex(f"{op}: invalid index {item!r} of type {type(item).__name__}: use ints, slices, ..., None, "
                       "or int/bool tensors")
    if arr.dtype == np.bool_:
        return "m", arr, arr.ndim
    return "h", arr.astype(np.int64), 1  # host integer array (also an empty list)


def parse(x, index, op="getitem"):
    """Return (spec, index tensors) for indexing ``x`` with ``index``; raise an OpError naming ``op``."""
    if op == "getitem" and isinstance(index, list) and not all(type(i) in (int, bool) for i in index):
        # MegEngine's getitem (as NumPy before 1.23) reads a list holding anything but Python ints as a tuple of
        # indices: x[[[0, 1], [1, 2]]] is x[[0, 1], [1, 2]], x[[Tensor(0), Tensor(2)]] is x[0, 2]. Its setitem
        # reads every list as an array of indices (x[[Tensor(0), Tensor(2)]] = v writes rows 0 and 2): so do we.
        index = tuple(index)
    if not isinstance(index, tuple):
        index = (index,)
    if op == "setitem":  # (MegEngine's setitem indexes with a Python bool as with the int: x[True] = v writes row 1)
        index = tuple(int(i) if type(i) is bool else i for i in index)
    items = [_classify(op, item) for item in index]
    if sum(1 for k, _, _ in items if k == "e") > 1:
        raise BadIndex(f"{op}: an index can only have a single ellipsis ('...')")
    n_real = sum(n for _, _, n in items)
    if n_real > x.ndim:
        raise BadIndex(f"{op}: too many indices ({n_real}) for a tensor of shape {x.shape}")
    spec, tensors, axis = [], [], 0
    for kind, payload, n in items:
        if kind == "n":
            spec.append(("n",))
        elif kind == "b":
            spec.append(("b", payload))
        elif kind == "e":
            spec.append(("e",))
            axis = x.ndim - (n_real - axis)
        elif kind == "s":
            spec.append(payload)
            axis += 1
        elif kind == "i":
            dim = x.shape[axis]
            if not -dim <= payload < dim:
                raise _range_error(op, payload, dim, axis)
            spec.append(("i", payload))
            axis += 1
        elif kind == "t":
            # (positions among a selection's rows -- auto-jit's, in place: ``y[argsort(y)]`` -- are in range; its
            # count, the axis's size, is not read)
            if not (axis == 0 and not spec and _lazy.among(payload, x)):
                check_index_tensor(op, payload, x.shape[axis], axis)
            spec.append(("t",))
            tensors.append(payload)
            axis += 1
        elif kind == "h":
            dim = x.shape[axis]
            if payload.size and (payload.min() < -dim or payload.max() >= dim):
                bad = payload[(payload < -dim) | (payload >= dim)].reshape(-1)[0]
                raise _range_error(op, int(bad), dim, axis)
            spec.append(("t",))
            tensors.append(Tensor(payload.astype(np.int32)))
            axis += 1
        else:  # boolean mask: host array ("m") or, inside a trace, a graph value ("M")
            if payload.ndim == 0:
                raise BadIndex(f"{op}: 0-d boolean indices are not supported")
            dim = x.shape[axis] if axis < x.ndim else 0
            if payload.ndim == 1 and payload.shape[0] != dim and (kind == "m" or payload.shape[0] < dim):
                # MegEngine checks only masks of 2+ dimensions against the shape (its _expand_bool_dim): a 1-d
                # mask is the integer index of its true positions, so a shorter one indexes the axis's first
                # entries (the ASR Transformer's label smoothing writes ``kl[..., ignore] = 0`` with a mask over
                # kl's rows); a true position past the axis is an index out of range
                if kind == "m":
                    idx = np.flatnonzero(payload)
                    if idx.size and idx[-1] >= dim:
                        raise IndexOutOfRange(f"{op}: boolean mask of shape {tuple(payload.shape)} is true at "
                                              f"{int(idx[idx >= dim][0])}, out of range for axis {axis} of size "
                                              f"{dim}")
                    tensors.append(Tensor(idx.astype(np.int32)))
                else:  # (a graph value shorter than the axis: every position it can hold is in range)
                    tensors.extend(mask_indices(payload))
                spec.append(("t",))
                axis += 1
                continue
            if tuple(payload.shape) != x.shape[axis:axis + payload.ndim]:
                raise BadIndex(f"{op}: boolean mask of shape {tuple(payload.shape)} does not match tensor "
                              f"dimensions {x.shape[axis:axis + payload.ndim]} at axis {axis}")
            idxs = mask_indices(payload) if kind == "M" else \
                [Tensor(idx.astype(np.int32)) for idx in np.nonzero(payload)]
            for idx in idxs:
                spec.append(("t",))
                tensors.append(idx)
            axis += payload.ndim
    return tuple(spec), tensors


def mask_indices(mask):
    """The integer indices of ``mask``'s true values, one int32 tensor per dimension (``np.nonzero``).

    The result's shape depends on the number of true values only: that count is read on the host (inside a
    trace, a scalar guard) and the indices are computed on the device. So a traced step whose masks change but
    whose counts repeat reuses its executable; a new count records again (as any host read).

    Args:
        mask: a bool tensor (at least 1-d).

    Returns:
        a list of ``mask.ndim`` 1-d int32 tensors.

    Example:
        >>> [i.numpy().tolist() for i in mask_indices(Tensor([[True, False], [False, True]]))]
        [[0, 1], [0, 1]]
    """
    count = int(apply(P.mask_count.bind(), mask).item())
    out = apply(P.mask_nonzero.bind(count=count), mask)
    return list(out)


def _mask_axis(x, index):
    """``(the axis where it starts, the mask)`` where ``index`` is one bool mask Tensor among full slices (``:``)
    and at most one ``...``, the mask's shape that of the axes it covers (or, 1-d, shorter); else None.

    Example:
        >>> _mask_axis(Tensor(np.zeros((2, 3, 4))), (Ellipsis, Tensor(np.ones((3, 4), bool))))[0]
        1
    """
    items = index if isinstance(index, tuple) else (index,)
    at = ellipsis = None
    full = 0
    for j, i in enumerate(items):
        if at is None and isinstance(i, Tensor) and i.dtype == np.bool_ and i.ndim > 0:
            at = j
        elif i is Ellipsis and ellipsis is None:
            ellipsis = j
        elif type(i) is slice and i.start is None and i.stop is None and i.step is None:
            full += 1
        else:
            return None
    if at is None:
        return None
    mask = items[at]
    rest = x.ndim - full - mask.ndim  # the axes the ellipsis stands for (without one: trailing full slices)
    if rest < 0:
        return None
    start = at - 1 + rest if ellipsis is not None and ellipsis < at else at  # (the items before it are 1 axis each)
    if mask.shape == x.shape[start:start + mask.ndim]:
        return start, mask
    if mask.ndim == 1 and start < x.ndim and mask.shape[0] < x.shape[start]:
        return start, mask  # (a shorter 1-d mask: its true positions, the first entries of the axis -- see parse)
    return None


# A static index -- ints, slices of ints, None, ... -- means the same op on every tensor of a shape: its parsed and
# bound ``getitem`` / ``setitem`` is kept by (index, shape). Parsing it again cost ~3 of an indexing op's ~11 us eagerly (a
# detector's step writes dozens: ``gt[:, :4]``, ``box[i]``, ``x[..., 2:]``).
_STATIC_OPS: dict = {}
_STATIC_OPS_KEPT = 4096


def _static_key(index):
    """A hashable key for ``index`` where it holds only Python ints (not bools), ``None``, ``...`` and slices of
    ints or None; else None."""
    items = index if type(index) is tuple else (index,)
    key = []
    for i in items:
        t = type(i)
        if t is int or i is None or i is Ellipsis:
            key.append(i)
        elif t is slice:
            a, b, c = i.start, i.stop, i.step
            if (a is not None and type(a) is not int) or (b is not None and type(b) is not int) \
                    or (c is not None and type(c) is not int):
                return None
            key.append((a, b, c))
        else:
            return None
    return type(index) is tuple, tuple(key)


def _static_op(x, index, op, prim):
    """``prim`` (``getitem`` / ``setitem``, named ``op``) bound to the parsed static ``index`` on ``x``'s shape,
    kept; None where ``index`` is not static. A bad index raises as ``parse`` raises it, every time: it is not
    kept."""
    key = _static_key(index)
    if key is None:
        return None
    key = (key, x.shape, op)
    bound = _STATIC_OPS.get(key)
    if bound is None:
        spec, _ = parse(x, index, op)
        if len(_STATIC_OPS) >= _STATIC_OPS_KEPT:
            _STATIC_OPS.clear()
        bound = _STATIC_OPS[key] = prim.bind(spec=spec)
    return bound


def _leading_mask(x, index, any_rank=False):
    """``(mask, the other items)`` where ``index`` starts with a 1-d bool mask Tensor over ``x``'s first axis and
    holds no other bool index; else None. ``any_rank``: the mask may also cover ``x``'s first ``k`` axes (its shape
    theirs) and be a host array (``np.ndarray``)."""
    items = index if type(index) is tuple else (index,)
    if not items:
        return None
    m = items[0]
    if any_rank and type(m) is np.ndarray and m.dtype == np.bool_ and 1 <= m.ndim <= x.ndim \
            and m.shape == x.shape[:m.ndim]:
        pass
    elif not isinstance(m, Tensor) or m.dtype != np.bool_ or not x.ndim or m.ndim > (x.ndim if any_rank else 1) \
            or not m.ndim or tuple(m.shape) != x.shape[:m.ndim]:
        return None
    for i in items[1:]:
        if type(i) is bool or i is Ellipsis or (isinstance(i, Tensor) and i.dtype == np.bool_):
            return None
    return m, items[1:]


def _selected_rest(shape, items, op="setitem", first=1):
    """``(spec, index tensors)`` of the items after a leading mask (ints, slices; for ``setitem`` selections of
    integers too) -- from axis ``first`` of ``shape`` on --, checked as ``parse`` checks them; None where another
    item (or too many) is there: index as ever."""
    if first + len(items) > len(shape):
        return None
    spec, tensors = [], []
    for axis, i in enumerate(items, first):
        dim = shape[axis]
        if type(i) is int:
            if not -dim <= i < dim:
                raise _range_error(op, i, dim, axis)
            spec.append(("i", i))
        elif type(i) is slice:
            step = _int(op, i.step)
            if step == 0:
                raise BadIndex(f"{op}: slice step cannot be zero")
            spec.append(("s", _int(op, i.start), _int(op, i.stop), step))
        elif op == "setitem" and _padded(i) and i.dtype.kind in "iu" and i.ndim == 1:
            check_index_tensor(op, i, dim, axis)
            spec.append(("t",))
            tensors.append(i)
        else:
            return None
    return tuple(spec), tuple(tensors)


def _prefix_slice(x, index):
    """``(ints, stop, the items after)`` where ``index`` is ints (in range), then ``:stop`` -- ``stop`` a 0-d integer
    Tensor, no start but 0, no step but 1 -- over an axis of ``x`` that is not empty; else None."""
    items = index if type(index) is tuple else (index,)
    k = 0
    while k < len(items) and k < x.ndim and type(items[k]) is int:  # (too many: parse's error)
        if not -x.shape[k] <= items[k] < x.shape[k]:
            return None
        k += 1
    if k >= len(items) or k >= x.ndim or type(items[k]) is not slice or not x.shape[k]:
        return None
    s = items[k]
    stop = s.stop
    # (an unsigned count of 4 bytes or more could exceed int32, which the mask compares in)
    # (``is`` and ``type`` tests only: ``==`` on a Tensor bound -- ``a[t0:t1]`` -- is an elementwise op, not a bool)
    if not isinstance(stop, Tensor) or stop.ndim or not (stop.dtype.kind == "i" or stop.dtype.kind == "u"
                                                         and stop.dtype.itemsize < 4) \
            or not (s.start is None or type(s.start) is int and s.start == 0) \
            or not (s.step is None or type(s.step) is int and s.step == 1):
        return None
    return items[:k], stop, items[k + 1:]


def _full_slice(item):
    """Whether ``item`` is ``:`` (no Tensor compared: ``slice == slice`` compares their bounds with ``==``)."""
    return type(item) is slice and item.start is None and item.stop is None and item.step is None


def _padded(t):
    return isinstance(t, Tensor) and type(t._data) is Lazy and t._data.pad is not None


def getitem(x, index):
    """``x[index]`` as one ``getitem`` op."""
    if _lazy.SELECT[0] is not None and not _padded(x):
        # auto-jit: ``x[mask]`` (then ints and slices of the other axes) kept in place, the mask's rows, so that
        # the clusters using it keep their shapes whatever the count (``ops/padded.py``)
        # (a mask over the first k axes selects the rows of x's first k axes made one -- as NumPy orders them --;
        # a host array's count is known)
        found = _leading_mask(x, index, any_rank=True)
        rest = None if found is None else _selected_rest(x.shape, found[1], "getitem", found[0].ndim)
        if rest is not None:
            y = _lazy.SELECT[0](x, found[0], (("s", None, None, None),) + rest[0])
            if y is not None:
                return y
        found = _prefix_slice(x, index) if _lazy.SELECT_PREFIX[0] is not None else None
        rest = None if found is None else _selected_rest(x.shape, found[2], "getitem", len(found[0]) + 1)
        if rest is not None:
            # ``gt_boxes[i, :count]`` (a count read from a Tensor): the first rows kept in place, so that the
            # clusters using them keep their shapes whatever the count
            y = _lazy.SELECT_PREFIX[0](x, found[0], found[1], (("s", None, None, None),) + rest[0])
            if y is not None:
                return y
    elif _lazy.SELECT[0] is not None:
        # a selection's ``y[:, k]``, ``y[:, :4]``: its other axes indexed, its rows as they are (their count not
        # read: ``parse`` reads the shape)
        items = index if type(index) is tuple else (index,)
        s0 = items[0] if items else None
        if len(items) == 1 and type(s0) is slice and all(v is None or type(v) is int for v in (s0.start, s0.stop)) \
                and (s0.step is None or type(s0.step) is int and s0.step == 1) and not _full_slice(s0):
            # a slice of a selection's rows (``pooled[order][:-4]``): the rows it keeps, in place too
            return apply(P.getitem.bind(spec=(("s", items[0].start, items[0].stop, None),)), x)
        if items and _full_slice(items[0]):
            rest = _selected_rest(x._data.raw_shape, items[1:], "getitem")
            if rest is not None:
                return apply(P.getitem.bind(spec=(("s", None, None, None),) + rest[0]), x)
        elif items and items[0] is Ellipsis and 1 < len(items) < x.ndim + 1 and Ellipsis not in items[1:]:
            # ``b[..., 2:]`` of a selection's rows (an IoU's corners): the ellipsis holds the rows
            rest = _selected_rest(x._data.raw_shape, items[1:], "getitem", x.ndim - len(items) + 1)
            if rest is not None:
                return apply(P.getitem.bind(spec=(("e",),) + rest[0]), x)
        elif items and _padded(items[0]) and items[0].dtype == np.bool_ and items[0].ndim == 1:
            # a selection of a selection (``y[y[:, 0] > 0]``, the mask of its rows): the rows both select, in place
            rest = _selected_rest(x._data.raw_shape, items[1:], "getitem")
            if rest is not None:
                y = _lazy.SELECT[0](x, items[0], (("s", None, None, None),) + rest[0])
                if y is not None:
                    return y
    if current_interpreter() is None and not _padded(x):
        lifted = _changing_ints(x, index)
        if lifted is not None:
            return apply(lifted[0], x, *lifted[1])
    bound = _static_op(x, index, "getitem", P.getitem)
    if bound is not None:
        return apply(bound, x)
    spec, tensors = parse(x, index, "getitem")
    return apply(P.getitem.bind(spec=spec), x, *tensors)


# Auto-jit: a line indexing with Python ints that change -- ``logp[0, action]`` with an action read on the host, an
# RNN's ``x[t]`` over its time steps -- gave each value a getitem record of its own, the int a parameter: a new
# cluster key every step (the policy-gradient step ran eagerly, its clusters never recurring), and a loop whose
# iterations differ, which auto-jit does not take for a loop (no chunks). Once a line's ints have changed, they are
# 0-d index tensors there: the cached tensor of a Python number, one cluster input per use, as ``x * 0.5``'s 0.5. A
# 0-d integer array indexes as the int does (NumPy's rule: the advanced indices' broadcast shape is empty, so no
# axis moves), and its gradient is the same scatter of the output's gradient into zeros. A site is the subscript
# itself (its code and instruction), not its line: ``bounds[..., 0], bounds[..., 1]`` on one line are two sites whose
# ints never change -- as one, they changed within the first step, whose cluster then never recurred (NeRF compiled
# its step again at the second: 5.9 s).
# A site whose ints change within one cluster -- a loop in the step, ``for i in range(n): x[i]`` (NeRF's cumprod, a
# time loop, a loop over a batch's images) -- keeps its first ints static and lifts the others: lifting from the
# second use, the first step's cluster had a static ``x[0]`` that the next steps' did not, so it never recurred and
# the step was compiled twice. The next steps' loops start at the same int, so their clusters are the first's. A
# site whose ints change between the clusters of one step -- a loop over a batch's images that reads each one's
# count, ``int(nlabel[b])`` (YOLOX) -- keeps its first ints static at each step's first use alike: its first use ends
# the forward's cluster, which was compiled with a static ``nlabel[0]`` at the first step and with an index tensor
# at the second. A site whose ints change from step to step (an action read on the host each step) lifts them all:
# which value equals the first one would decide the key.
# Eagerly (auto-jit off) the same rule spares a kernel per int: a row loop, ``out[i] = x[i] * 2 + 1`` over 64 rows,
# compiled a getitem and a setitem per row -- 5.3 s on 2 cores, 5.1 with a warm compilation cache -- and takes 0.3 s
# with its ints lifted from the second on (no clusters there: a site's first ints stay static, the others are tensors).
_INT_SITES: dict = {}  # (code, instruction) of a get/setitem of ints beside slices, None, ...: its last ints, None
# (lifted) or a _Loop
# such a site seen once -> the cluster its first use joined (``_lazy.CLUSTER_NOW``) and its step (``_lazy.STEP_NOW``)
_FIRST_CLUSTER: dict = {}
_NEW, _OWN = object(), object()


class _Loop:
    """A site whose ints changed within one cluster (``per_step``: within one step): its first ``ints`` stay static
    (see above) while each cluster's (step's) first use has them and no later use does; ``token``: the cluster (the
    step) of its latest use."""

    __slots__ = ("ints", "token", "per_step")

    def __init__(self, ints, token, per_step=False):
        self.ints, self.token, self.per_step = ints, token, per_step


_LIFTED_INTS: dict = {}  # value id of an index tensor made of a Python int by _changing_ints -> the int
_LIFTED: dict = {}  # a static get/setitem -> (the one whose ints are index tensors, the ints)


_CACHE_OP = dis.opmap.get("CACHE")  # (Python 3.11+: an instruction's inline cache entries follow it in the bytecode)
_BYTECODE: dict = {}  # code object -> its bytecode (``co_code`` builds a new bytes object at every access)


def _subscript_site(f):
    """``(code, offset)`` of the instruction frame ``f`` runs: its subscript. A specialized ``BINARY_SUBSCR`` reports
    the offset of its last inline cache entry rather than its own, so the offset is taken back over cache entries:
    one site whether or not the interpreter specialized it."""
    code, i = f.f_code, f.f_lasti
    if _CACHE_OP is not None:
        b = _BYTECODE.get(code)
        if b is None:
            if len(_BYTECODE) >= _STATIC_OPS_KEPT:
                _BYTECODE.clear()
            b = _BYTECODE[code] = code.co_code
        while i > 0 and i < len(b) and b[i] == _CACHE_OP:
            i -= 2
    return code, i


def _changing_ints(x, index, op="getitem", prim=P.getitem):
    """``(op bound, index tensors)`` for ``x[index]`` (``op``: getitem or setitem, ``prim`` its primitive) at a line
    whose ints changed before (see above), or None: index as ever."""
    items = index if type(index) is tuple else (index,)
    ints = []
    for i in items:
        t = type(i)
        if t is int or isinstance(i, np.integer):
            ints.append(int(i))
        elif not (t is slice or i is None or i is Ellipsis):
            return None
    if not ints:
        return None
    try:
        f = sys._getframe(3)  # (the caller of ``Tensor.__getitem__``)
    except ValueError:  # (called from a shallower stack than a user's line: no site)
        return None
    site = _subscript_site(f)
    ints = tuple(ints)
    seen = _INT_SITES.get(site, _NEW)
    if seen is not None:
        if seen is _NEW:
            if len(_INT_SITES) >= _STATIC_OPS_KEPT:
                _INT_SITES.clear()
            # (megxla's own lines index with the ints they mean: auto-jit's selections index an image's rows by
            # its number, its rules reading the static spec)
            if f.f_globals.get("__name__", "").startswith("megxla."):
                _INT_SITES[site] = _OWN
            else:
                _INT_SITES[site] = ints
                now = _lazy.CLUSTER_NOW[0]
                if now is not None:
                    if len(_FIRST_CLUSTER) >= _STATIC_OPS_KEPT:
                        _FIRST_CLUSTER.clear()
                    _FIRST_CLUSTER[site] = (now(), _lazy.STEP_NOW[0]())
            return None
        if seen is _OWN or seen == ints:
            return None
        if type(seen) is _Loop:
            now = _lazy.CLUSTER_NOW[0]()
            if now is not None and seen.per_step:
                now = _lazy.STEP_NOW[0]()
            if now is None:  # (not collected: as the loop's clusters have it -- its gradient may be collected)
                if seen.ints == ints:
                    return None
            elif (now != seen.token) == (seen.ints == ints):  # (a cluster's first use, and only it, at the first ints)
                seen.token = now
                if seen.ints == ints:
                    return None
            else:  # (no loop from its first ints -- actions drawn at random, where which equals the first would
                _INT_SITES[site] = None  # decide the key: tensors from now on)
        else:  # (changed: from now on, tensors -- but a loop's first ints)
            first = _FIRST_CLUSTER.pop(site, None)
            now = _lazy.CLUSTER_NOW[0]
            now = now() if first is not None and now is not None else None
            if now is None:
                _INT_SITES[site] = None
            elif first[0] == now:
                _INT_SITES[site] = _Loop(seen, now)
            else:
                step = _lazy.STEP_NOW[0]()
                _INT_SITES[site] = _Loop(seen, step, True) if first[1] == step else None
    bound = _static_op(x, index, op, prim)  # (checks the index as eager does: its error, its text)
    if bound is None:
        return None
    entry = _LIFTED.get(bound)
    if entry is None:
        if len(_LIFTED) >= _STATIC_OPS_KEPT:
            _LIFTED.clear()
        spec = dict(bound.params)["spec"]
        entry = _LIFTED[bound] = (prim.bind(spec=tuple(("t",) if k[0] == "i" else k for k in spec)),
                                  [k[1] for k in spec if k[0] == "i"])
    tensors = [_scalar(k, _INT32) for k in entry[1]]
    if len(_LIFTED_INTS) >= _STATIC_OPS_KEPT:
        _LIFTED_INTS.clear()
    for t, k in zip(tensors, entry[1]):
        _LIFTED_INTS[t._vid] = k
    return entry[0], tensors


def static_spec(spec, index_tensors):
    """The static ``spec`` of a getitem whose index tensors all stand for Python ints (:func:`_changing_ints`: their
    ints back in place), or None where one is another tensor -- for the rules that read a getitem's ints (the rows
    of a concrete array it picks: ``info[b, 4]``, an image's box count).

    Example:
        >>> static_spec((("t",), ("s", None, None, None)), [Tensor(1)]) is None   # (a tensor of the user's)
        True
    """
    out, k = [], 0
    for item in spec:
        if item[0] == "t":
            if k >= len(index_tensors):
                return None
            v = _LIFTED_INTS.get(index_tensors[k]._vid)
            if v is None:
                return None
            item, k = ("i", v), k + 1
        out.append(item)
    return tuple(out) if k == len(index_tensors) else None


_INT32 = np.dtype(np.int32)
from ._elemwise_front import _scalar  # noqa: E402  (it imports this module's neighbours: after them)


def rows(x, n):
    """``x[0]``, ``x[1]``, ... ``x[n - 1]`` (``Tensor.__iter__``).

    Eagerly the row's number is a 0-d index tensor, as a line's changing ints under auto-jit (above): one kernel
    for every row of a shape. As an int parameter each row compiled a kernel of its own -- ``sum(v * v)`` over a
    65,536-element ``v`` (MegEngine's upstream ``test_lamb``) compiled 65,536 getitems, an hour where MegEngine
    takes seconds. Traced, under auto-jit or on a selection's rows: ``x[i]`` as ever.

    Args:
        x: the Tensor iterated (at least 1-d).
        n: ``len(x)``.

    Returns:
        a generator of the rows (Tensors of ``x.shape[1:]``).

    Example:
        >>> [float(r) for r in rows(Tensor([1.0, 2.0]), 2)]
        [1.0, 2.0]
    """
    if n > 1 and not _lazy.WANTED[0] and not _padded(x) and current_interpreter() is None:
        op = P.getitem.bind(spec=(("t",),))
        for i in range(n):
            yield apply(op, x, _scalar(i, _INT32))
    else:
        for i in range(n):
            yield x[i]


def _one_element(x, index):
    """Whether ``x[index]`` is one element by Python ints alone (``y[0, 0]`` of a 2-D ``y``)."""
    items = index if type(index) is tuple else (index,)
    return len(items) == x.ndim > 0 and all(isinstance(i, (int, np.integer)) and not isinstance(i, bool)
                                            for i in items)


def setitem(x, index, value):
    """The value of ``x`` after ``x[index] = value`` (``value`` broadcast to the indexed shape, cast to
    ``x``'s dtype), as one ``setitem`` op; ``Tensor.__setitem__`` rebinds ``x`` to it."""
    from ._elemwise_front import as_tensor
    if _one_element(x, index) and getattr(value, "shape", None) == (1,):
        # (one element, ``y[0, 0] = t``, written from a one-element vector: MegEngine 1.13 takes it, NumPy too)
        value = as_tensor(value, x).reshape(())
    if _lazy.SET_SELECTED[0] is not None and not _padded(x):
        lead = _leading_mask(x, index)
        if lead is not None and (_padded(value) or any(_padded(i) for i in lead[1])):
            # auto-jit: a selection written back through its mask (``labels[fg] = y[fg]``, ``t[fg, k[fg]] = 1``),
            # the unselected rows dropped (``ops/padded.py``)
            rest = _selected_rest(x.shape, lead[1])
            if rest is not None:
                y = _lazy.SET_SELECTED[0](x, lead[0], (("t",),) + rest[0], rest[1], as_tensor(value, x))
                if y is not None:
                    return y
    found = _mask_axis(x, index)
    if found is not None:
        start, mask = found
        v = as_tensor(value, x)
        if v.ndim == 0:
            # one value written under a mask among full slices keeps every shape: a select, with no host read of
            # the mask, so a traced step (and an auto-jit cluster) stays one executable whatever the mask holds
            # (detectors' ``labels[mask] = -1``; attention's ``scores[..., mask] = min_value`` over (batch, time))
            from .ops import elemwise as E, shape as S
            if mask.ndim == 1 and mask.shape[0] < x.shape[start]:  # (the same positions as a mask of the axis)
                pad = apply(S.full.bind(shape=(x.shape[start] - mask.shape[0],), value=False, dtype="bool"))
                mask = apply(S.concat.bind(axis=0), mask, pad)
            if v.dtype != x.dtype:
                v = apply(E.astype.bind(dtype=x.dtype), v)
            m = apply(S.reshape.bind(shape=(1,) * start + mask.shape + (1,) * (x.ndim - start - mask.ndim)), mask)
            return apply(E.where.bind(), apply(S.broadcast_to.bind(shape=x.shape), m), v, x)
    if current_interpreter() is None and not _padded(x):
        lifted = _changing_ints(x, index, "setitem", P.setitem)
        if lifted is not None:  # (``out[t] = h`` over a loop's steps: see _changing_ints)
            return apply(lifted[0], x, as_tensor(value, x), *lifted[1])
    bound = _static_op(x, index, "setitem", P.setitem)
    if bound is not None:
        return apply(bound, x, as_tensor(value, x))
    spec, tensors = parse(x, index, "setitem")
    return apply(P.setitem.bind(spec=spec), x, as_tensor(value, x), *tensors)


def incritem(x, index, value):
    """The value of ``x`` after adding ``value`` at ``index`` (``value`` broadcast to the indexed shape, cast to
    ``x``'s dtype), as one ``incritem`` op: unlike ``x[index] += value`` (a getitem, an add, a setitem), an index
    repeated adds each of its values (MegEngine's ``IncrSubtensor`` / ``IndexingIncrMultiAxisVec``).

    Example:
        >>> incritem(Tensor([0, 0, 0]), Tensor([1, 1]), Tensor([5, 7])).numpy()
        array([ 0, 12,  0], dtype=int32)
    """
    from ._elemwise_front import as_tensor
    spec, tensors = parse(x, index, "setitem")
    return apply(P.incritem.bind(spec=spec), x, as_tensor(value, x), *tensors)
