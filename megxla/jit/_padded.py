"""Auto-jit's boolean selections in place: ``x[mask]`` collected as all ``len(mask)`` rows of ``x``, its count read
only when the program asks for a shape.

A detector's step selects its foreground anchors (``box[fg]``, ``labels[fg] = y[fg]``, ``t[fg, k[fg]] = 1``), whose
number changes with every batch. Collected as they are, the selected values take a new shape each step, so does
every cluster holding them -- the losses, the whole backward --, and a detector's step never compiled: its site
kept changing and ran eagerly. Here a selection is collected as ``pad_select`` (``core/ops/padded.py``): every row
of ``x``, the selected ones where they are. The Tensor keeps the selection's shape (``count`` rows: shape checks,
errors and reads are eager's), but its count -- ``mask_count``, collected -- is read on the host only when that
shape is asked for (``Lazy.shape``, :meth:`Pad.count`); the cluster's value (``Lazy.raw_shape``, ``Lazy.phys`` once
computed) has every row. So the clusters neither cut at a selection nor change with its count: one executable
serves every count.

Ops on a selection's rows (:func:`rows`, :func:`collect`):

* row by row (elementwise, casts, slices and reductions of the other axes, ops along the other axes -- softmax,
  cross-entropy's parts, ``x[m] @ w`` -- in ``_ALONG``, and their gradients): collected as they are, on every row --
  the result a selection of the same rows;
* ``sum``/``mean`` over the rows: ``pad_reduce``, which drops the unselected rows (and their gradients);
* written back through the mask: ``pad_setitem`` (from ``Tensor.__setitem__``);
* reordered -- a 1-d sort, a gather by positions among the rows, a slice of them, a concatenation along them --:
  in place too, their results selections of other rows (``_in_place``); an op costly per row (``roi_align``) on the
  rows gathered into ``bucket(count)`` rows, its count read (``pad_compact``);
* anything else: on the selection itself (``pad_rows``: its count read, that cluster keyed by it, as before), as
  eagerly; its gradient goes back to the rows with zeros for the unselected ones.

Why the unselected rows cannot reach a result: see ``core/ops/padded.py``. ``MEGXLA_AUTO_JIT_PAD_SELECTIONS=0``:
selections are indexed as ever.
"""
from __future__ import annotations

import collections
import math
import os
import sys
import weakref

import numpy as np

from ..core import _elemwise_front as _front, _indexing, _lazy, dtypes as _dt
from ..core._lazy import Lazy
from ..core import _dispatch
from ..core._dispatch import apply, OpError as _OpError
from ..core._op import VJP
from ..core.ops import elemwise as E, indexing as I, linalg as L, nn as N, padded as P, reduction as R, shape as S, \
    sort as SO, vision as V
from . import _autojit as _A  # (a module importing this one: read at call time)

__all__ = ["ON", "Pad", "NeedCount", "select", "set_selected", "collect", "give", "PAD_PRIMS"]

# MEGXLA_AUTO_JIT_PAD_SELECTIONS=0: selections are indexed as ever (their count read, their clusters changing with it)
ON = os.environ.get("MEGXLA_AUTO_JIT_PAD_SELECTIONS", "1") != "0"

_MISSING = object()
PAD_PRIMS = frozenset([P.pad_select, P.pad_setitem, P.pad_reduce, P.pad_leak, P.pad_rows, P.pad_fill, P.pad_arg,
                       P.pad_position, P.pad_and, P.pad_sort, P.pad_locate, P.pad_head, P.pad_compact])
# (copies too: ``Tensor(t)``, ``F.copy(t)``, ``t.detach()`` -- basedet's ``Boxes(gt_boxes[:, :4])`` of each image's
# boxes, and its IoU subgraph's output)
_ROWS = frozenset(list(E.UNARY.values()) + list(E.BINARY.values()) + [E.leaky_relu, E.clip, E.where, E.astype,
                                                                     S.copy, S.tensor_copy, S.detach])
_MEAN_OF = {R.sum: False, R.mean: True}  # reductions over the rows: dropping the unselected ones
_REDUCTIONS = frozenset([R.sum, R.mean, R.prod, R.max, R.min])
# reshapes that keep the rows as the first axis (of every input: all of them rows of one selection), in ``_kept_rows``
_ROW_SHAPES = frozenset([S.expand_dims, S.squeeze, S.transpose, S.stack, S.concat])
_KEPT_COUNTS = 64


def _spares_rows(axis, n):
    """Whether ``axis`` (an int, a tuple, or None: every axis) leaves out the first of ``n`` axes."""
    if axis is None or not n:
        return False
    return all(a % n != 0 for a in (axis if type(axis) is tuple else (axis,)))


def _only_first(pads):
    return pads[0] is not None and all(p is None for p in pads[1:])


def _along_axis(p, s, pads):
    """(``_ALONG``) an op along ``p["axis"]`` on a selection's rows alone: row by row where the axis is not the rows."""
    return _only_first(pads) and _spares_rows(p["axis"], len(s[0]))


# ops along other axes than the rows, or on each row's own entries (their other inputs not rows, or the same rows):
# row by row on a selection -- a detector's ``cross_entropy(pred[fg], label[fg])`` (logsumexp and indexing_one_hot
# along the classes), ``softmax``, ``pred[fg].argmax(1)``, ``zeros_like(box[fg])``, ``x[fg] @ w``, ``norm(d, axis=1)``
# -- so that its clusters keep their shapes whatever the count. Not ``dropout``: its draws would be another
# number's than eager's. (prim -> whether, from its params, its inputs' cluster shapes and pads.)
_ALONG = dict.fromkeys([N.softmax, N.log_softmax, R.logsumexp, R.norm, R.argmax, R.argmin, R.cumsum, R.var, S.repeat,
                        S.split], _along_axis)
_ALONG.update({
    # (the first axis kept, the others reshaped: ``kept_rows`` binds it on the rows)
    S.reshape: lambda p, s, pads: _only_first(pads) and len(s[0]) >= 1 and len(p["shape"]) >= 1
    and p["shape"][0] == s[0][0] and math.prod(p["shape"][1:]) == math.prod(s[0][1:]) > 0,
    I.gather: lambda p, s, pads: pads[0] is not None and pads[1] is pads[0] and _spares_rows(p["axis"], len(s[0])),
    SO.sort: lambda p, s, pads: _only_first(pads) and len(s[0]) >= 2,  # (along the last axis)
    SO.topk: lambda p, s, pads: _only_first(pads) and len(s[0]) >= 2,
    # (the labels the same rows: ``label[fg]`` with ``pred[fg]``)
    I.indexing_one_hot: lambda p, s, pads: pads[0] is not None and pads[1] is pads[0]
    and _spares_rows(p["axis"], len(s[0])),
    S.full_like: lambda p, s, pads: True,
    S.one_hot: lambda p, s, pads: True,
    N.embedding: lambda p, s, pads: _only_first(pads),
    # (a right operand of more than 2 axes would have its own batch axis along the rows)
    L.matmul: lambda p, s, pads: _only_first(pads) and len(s[0]) >= 2 and len(s[1]) <= 2 and not p["transpose_a"],
    L.linear: lambda p, s, pads: _only_first(pads) and len(s[0]) >= 2,
    N.layer_norm: lambda p, s, pads: _only_first(pads) and len(s[0]) > p["ndim"],
})


class Pad:
    """What a padded selection's rows are: ``mask`` (row ``i`` is selected where it is true), ``tensor`` its count
    (collected: read on the host only when asked) and ``rows`` (``len(mask)``); ``prefix``: the mask selects the
    first rows (``x[:n]``), each where it is, and ``n`` (a 0-d Tensor) gives the count on the host (a read of fewer
    ops than the mask's). The padded values of one ``Pad`` (one identity: the selections by one mask value) have the
    same rows."""

    __slots__ = ("mask", "tensor", "rows", "prefix", "_count")

    def __init__(self, mask, tensor, rows, prefix=None):
        self.mask, self.tensor, self.rows, self.prefix, self._count = mask, tensor, rows, prefix, None

    def count(self):
        """The count, read on the host once (a cut where it is pending: ``x[mask].shape`` needs it)."""
        c = self._count
        if c is None:
            if self.prefix is None:
                c = int(self.tensor.item())
            else:  # (Python's slice ``:n``)
                n = int(self.prefix.item())
                c = min(max(n + self.rows if n < 0 else n, 0), self.rows)
            self._count = c
        return c

    def known(self):
        """Whether the count is on the host already (or can be read without running a cluster)."""
        if self._count is not None:
            return True
        d = (self.tensor if self.prefix is None else self.prefix)._data
        return type(d) is not Lazy or d.value is not None

    def selected(self, phys):
        """The selection itself from its padded value ``phys`` (a read of it: the mask read on the host)."""
        import jax.numpy as jnp
        return jnp.take(phys, np.flatnonzero(np.asarray(self.mask._value())).astype(np.int32), axis=0)


# mask value id -> its Pad: a mask selecting several values counts once, and its selections share their rows
_PADS: collections.OrderedDict = collections.OrderedDict()


class NeedCount(Exception):
    """(``collect``) the op needs a selection's count on the host (it runs on the selection itself, or raises an
    error naming its shape): read it -- outside the collector: the read runs the pending cluster -- then collect the
    op again. ``pad`` None: the op is not collected (it runs eagerly)."""

    def __init__(self, pad):
        super().__init__("count")
        self.pad = pad


class _Done:
    """The cluster of a padded selection's Lazy once it ran: it keeps ``phys``, its Tensors keep the Lazy (a later
    cluster takes the padded rows; a read, the first ``count``)."""

    owner = None

    @staticmethod
    def flush():
        pass

    @staticmethod
    def pin(data):
        pass

    @staticmethod
    def devices():
        return None


DONE = _Done()


def _pad_of(t):
    d = t._data
    return d.pad if type(d) is Lazy else None


def _raw_shape(t):
    d = t._data
    return d.raw_shape if type(d) is Lazy else d.shape


def _value_of(t):
    """A Tensor of ``t``'s value now, which an in-place update of ``t`` later (``m[0] = True``) does not change."""
    v = _A._new(_A._Tensor)
    v._data, v._vid, v._grad, v._name = t._data, t._vid, None, None
    if type(t._data) is Lazy:
        t._data.hold(v)
    return v


def _pad(mask, prefix=None, vid=None, count=None):
    """``mask``'s Pad: its count collected (not read), once per mask value (``vid``: the value's, where ``mask`` is
    made from it; ``count``: known on the host)."""
    vid = mask._vid if vid is None else vid
    pad = _PADS.get(vid)
    if pad is None:
        pad = _PADS[vid] = Pad(_value_of(mask), apply(I.mask_count.bind(), mask), mask.shape[0], prefix)
        pad._count = count
        while len(_PADS) > _KEPT_COUNTS:
            _PADS.popitem(last=False)
    if mask._vid != vid:
        _PADS[mask._vid] = pad  # (the mask as made: pad_select finds its rows by it)
    return pad


def select(x, mask, spec, prefix=None):
    """(core's ``_lazy.SELECT``) ``x[mask]`` kept in place (then ``spec``: the other axes' ints and slices,
    checked), or None: index as ever (not collecting now, an empty axis, ``mask`` a selection of other rows than
    ``x``'s). ``prefix``: ``mask`` selects the first rows, ``x[:prefix]``. ``mask`` may cover ``x``'s first ``k``
    axes (they are made one, as NumPy's ``x[mask]`` orders them) and be a host array (its count known). Where ``x``
    is a selection and ``mask`` one of its rows (``y[y[:, 0] > 0]``), the rows both select are kept in place."""
    if not _A.collecting():
        return None
    k = mask.ndim
    xp, mp = _pad_of(x), _pad_of(mask) if type(mask) is not np.ndarray else None
    if xp is not None or mp is not None:
        if xp is None or mp is not xp or k != 1:
            return None
        both = apply(P.pad_and.bind(), mask, xp.mask)  # (the rows: the unselected ones' copies dropped)
        _pad(both)
        y = apply(P.pad_select.bind(), x, both)
        return apply(I.getitem.bind(spec=spec), y) if len(spec) > 1 else y
    rows = int(np.prod(mask.shape))
    if not rows:
        return None
    vid = count = None
    if type(mask) is np.ndarray:
        flat = np.ascontiguousarray(mask).reshape(-1)
        mask, count = _A._Tensor(flat), int(np.count_nonzero(flat))
    elif k > 1:
        vid = mask._vid
        mask = apply(S.reshape.bind(shape=(rows,)), mask)
    if k > 1:
        x = apply(S.reshape.bind(shape=(rows,) + tuple(x.shape[k:])), x)
    _pad(mask, prefix, vid, count)  # (the mask's count, collected: read where a shape asks for it)
    y = apply(P.pad_select.bind(), x, mask)
    if len(spec) > 1:
        y = apply(I.getitem.bind(spec=spec), y)
    return y


def select_prefix(x, ints, stop, spec):
    """(core's ``_lazy.SELECT_PREFIX``) ``x[ints..., :stop]`` (``stop`` a 0-d integer Tensor, ``ints`` and ``spec``
    checked) kept in place: the first rows of ``x[ints]`` as a selection by ``arange(rows) < stop`` (Python's
    slice: a negative stop counts from the end), or None: index as ever."""
    if not _A.collecting() or _pad_of(stop) is not None:
        return None
    y = _indexing.getitem(x, ints) if ints else x
    n = y.shape[0]
    iota = apply(S.arange.bind(start=0, step=1, num=n, dtype="int32"))
    if stop.dtype != np.int32:
        stop = apply(E.astype.bind(dtype="int32"), stop)  # (a count in int64/uint8 compares as its value)
    lt, add, mul = _front.BINARY["lt"], _front.BINARY["add"], _front.BINARY["mul"]
    wrapped = add(stop, mul(apply(E.astype.bind(dtype="int32"), lt(stop, 0)), n))
    return select(y, lt(iota, wrapped), spec, prefix=stop)


def set_selected(x, mask, spec, tensors, value):
    """(core's ``_lazy.SET_SELECTED``) the value of ``x`` after ``x[mask, ...] = value``, the unselected rows
    dropped, or None: index as ever. ``spec``/``tensors``: the mask (``("t",)``) and the other items, checked."""
    if not _A.collecting() or _pad_of(mask) is not None or not mask.shape[0]:
        return None
    pad = _pad(mask)
    for t in tensors:
        if _pad_of(t) is not pad:
            return None
    vp = _pad_of(value)
    if vp is not None and vp is not pad:
        return None
    # the written block's shape, padded: the value must broadcast to it, row for row if padded (else indexed as ever,
    # which raises eager's error where it does not fit)
    rows = [np.zeros(pad.rows, np.int32)] * (1 + len(tensors))
    block = np.broadcast_to(np.False_, x.shape)[I.build_index(spec, rows)].shape
    vshape = _raw_shape(value)
    try:
        if np.broadcast_shapes(vshape, block) != block:
            return None
    except ValueError:
        return None
    if vp is None and len(vshape) == len(block) and vshape[0] != 1:
        return None
    return apply(P.pad_setitem.bind(spec=spec), x, value, mask, *tensors)


def give(z, v):
    """A padded Lazy's cluster ran: ``v`` is its padded value."""
    z.phys = v
    z.cluster = DONE


# ---- collecting ops on padded values ----------------------------------------------------------------------------
def _classify(op, shapes, pads):
    """How ``op`` treats the rows of its padded inputs (all of one pad), from the inputs' cluster shapes (a padded
    one's: every row): ``("rows", pad)`` (row by row: its result padded too), ``("reduce", pad, params of
    pad_reduce)`` (sums them), or None (anything else). A padded input's count is not read for it."""
    pad = None
    for p in pads:
        if p is not None:
            if pad is None:
                pad = p
            elif p is not pad:
                return None
    prim = op.prim
    if prim in _ROWS:
        nd = max(len(s) for s in shapes)
        for shape, p in zip(shapes, pads):
            if p is not None:
                if len(shape) != nd:
                    return None  # (broadcast to more axes: the rows would not be the first)
            elif nd and len(shape) == nd and shape[0] != 1:
                return None  # (a value of its own along the rows)
        return "rows", pad
    params = dict(op.params)
    if prim is I.getitem:
        spec = params["spec"]
        if len(shapes) == 1 and spec and spec[0][0] == "s" and spec[0][1:3] == (None, None) \
                and spec[0][3] in (None, 1) and all(s[0] not in "tnb" for s in spec):
            return "rows", pad
        if len(shapes) == 1 and spec and spec[0] == ("e",) and len(spec) - 1 < len(shapes[0]) \
                and all(s[0] in "si" for s in spec[1:]):
            return "rows", pad  # (``b[..., 2:]``: the ellipsis holds the rows)
        k = len(shapes) - 1  # (the index tensors: leading, each a selection of the same rows)
        if k and _takes_along_other_axes(spec, pads):
            return "rows", pad
        if k and pads[0] is None and len(spec) >= k and all(s == ("t",) for s in spec[:k]) \
                and all(s[0] == "s" for s in spec[k:]) and len(shapes[0]) >= k and all(shapes[0][:k]) \
                and all(p is not None for p in pads[1:]) and all(s == shapes[1] for s in shapes[2:]):
            # (``x[i]``, ``i`` a selection -- ``cond_take``'s positions --: each row's own rows; ``x[i // n, i % n]``:
            # each row's own entry)
            return "rows", pad
        return None
    if prim in _ROW_SHAPES:
        return ("rows", pad) if _kept_rows(prim, params, shapes, pads) else None
    along = _ALONG.get(prim)
    if along is not None:
        return ("rows", pad) if along(params, shapes, pads) else None
    if prim in _REDUCTIONS:
        if len(shapes) != 1 or not shapes[0]:
            return None
        axis, n = params["axis"], len(shapes[0])
        axes = None if axis is None else tuple(sorted(a % n for a in (axis if type(axis) is tuple else (axis,))))
        if axes is not None and 0 not in axes:
            return "rows", pad
        if prim in _MEAN_OF:
            return "reduce", pad, (("axis", axes), ("keepdims", params["keepdims"]), ("mean", _MEAN_OF[prim]))
    return None


def _takes_along_other_axes(spec, pads):
    """Whether a getitem's index tensors -- not rows -- index other axes than the rows, all its rows kept first:
    ``b[:, :, t]`` (basedet's IoU subgraph takes a box's columns by ``Subtensor`` with a 0-d index tensor),
    ``b[:, 0, ks]``. Its index tensors and ints next to each other (NumPy's rule: advanced indices apart move their
    axes first)."""
    if pads[0] is None or any(p is not None for p in pads[1:]) or spec[0][0] != "s" \
            or spec[0][1:3] != (None, None) or spec[0][3] not in (None, 1) or any(s[0] not in "sit" for s in spec):
        return False
    at = [j for j, s in enumerate(spec) if s[0] in "it"]
    return at[-1] - at[0] == len(at) - 1


def _kept_rows(prim, params, shapes, pads):
    """Whether a reshape (``_ROW_SHAPES``) keeps its inputs' rows as its result's first axis: every input a selection
    of the same rows (``stack([i, j], 1)`` of ``non_zero``'s indices), the first axis neither moved nor made."""
    if None in pads or not shapes[0]:
        return False
    n = len(shapes[0])
    if prim is S.transpose:
        return params["perm"][0] == 0
    if prim is S.stack:
        return params["axis"] % (n + 1) != 0
    if prim is S.concat:
        return params["axis"] % n != 0
    axes = params["axis"]
    if axes is None:
        return False  # (squeeze(): a selection of one row would lose its axis, a padded one not)
    axes = axes if type(axes) is tuple else (axes,)
    out = n + len(axes) if prim is S.expand_dims else n
    return all(a % out != 0 for a in axes)


def rows(op, inputs):
    """(``_collect``) The pad of ``op``'s padded inputs where it runs row by row on them (its results padded too:
    collected as any op), else None."""
    prim = op.prim
    if prim in _ROWS:  # (the common case, written out: see _classify)
        nd = 0
        for t in inputs:
            n = t._data.ndim
            if n > nd:
                nd = n
        pad = None
        for t in inputs:
            d = t._data
            p = d.pad if type(d) is Lazy else None
            if p is None:
                if nd and d.ndim == nd and (d.raw_shape if type(d) is Lazy else d.shape)[0] != 1:
                    return None
            elif d.ndim != nd or (pad is not None and p is not pad):
                return None
            else:
                pad = p
        return pad
    if prim is not I.getitem and prim not in _REDUCTIONS and prim not in _ROW_SHAPES and prim not in _ALONG:
        return None
    pads = [_pad_of(t) for t in inputs]
    how = _classify(op, [_raw_shape(t) for t in inputs], pads)
    return how[1] if how is not None and how[0] == "rows" else None


def on_rows(inputs):
    """Whether some of ``inputs`` is a selection's full rows (a gradient op on them is collected even while auto-jit
    is paused or off: only collected are they taken as such)."""
    for t in inputs:
        d = t._data
        if type(d) is Lazy and d.pad is not None:
            return True
    return False


def _id(cl, t):
    """The cluster's local id of Tensor ``t`` (a pending value of it, or an input)."""
    d = t._data
    if type(d) is Lazy:
        if d.cluster is cl and d.value is None:
            return d.index
        d = d.phys if d.phys is not None else _lazy.resolve(t)
    i = cl.vmap.get(t._vid)
    if i is None:
        i = cl.add_input(d, t._vid)
        cl.in_refs.append(_A._ref(t))
        cl.in_made.append(None)
        if cl.launched is not None:
            cl.unguess()
    return i


def infer(cl, op, key, ids, inputs):
    """``_infer`` of ``op`` on the cluster's values ``ids`` (``key``: their types), some of them a selection's full
    rows. An op the program got wrong raises eager's error: the one inferred on the inputs as the program sees them
    (their counts read first: NeedCount)."""
    try:
        return _A._infer(op, key, ())  # (not naming the inputs: their shapes would read a count, mid-collection)
    except _OpError:
        pads = [_pad_of(t) for t in inputs]
        _counts_known(pads)
        _logical(cl, op, ids, pads, inputs)  # (raises eager's error)
        raise


def _record(cl, op, ids, inputs=()):
    """Append ``op`` on the cluster's values ``ids``: its output ids (their types inferred on the cluster's; an error
    is eager's, naming ``inputs``)."""
    avals = cl.avals
    key = (op, tuple([avals[i] for i in ids]))
    outs = _A._SHAPES.get(key, _MISSING)
    if outs is _MISSING:
        outs = infer(cl, op, key, ids, inputs) if inputs else _A._infer(op, key, inputs)
    if outs is None:
        raise NeedCount(None)  # (not collected on the padded rows: never for the ops here)
    base = len(avals)
    avals.extend(outs)
    made = tuple(range(base, len(avals)))
    cl.ops.append((op, tuple(ids), made))
    if cl.guess is not None:
        cl.follow()
    return made


def _tensors(cl, out_ids, pads):
    """The pending Tensors of the cluster's values ``out_ids`` (their ``pads``: a padded one's shape has ``count``
    rows, read when asked)."""
    pending = _A._pending
    return tuple([pending(cl, i, pad) for i, pad in zip(out_ids, pads)])


def _counts_known(pads):
    for p in pads:
        if p is not None and not p.known():
            raise NeedCount(p)


def _logical(cl, op, ids, pads, inputs):
    """``op``'s output types on its inputs as the program sees them (a padded one with ``count`` rows, known by
    now): eager's checks and errors, at the user's line. None: the op is not collected."""
    avals = cl.avals
    key = (op, tuple([avals[i] if p is None else ((p.count(),) + avals[i][0][1:],) + avals[i][1:]
                      for i, p in zip(ids, pads)]))
    outs = _A._SHAPES.get(key, _MISSING)
    if outs is _MISSING:
        outs = _A._infer(op, key, inputs)
    return outs


def _unpadded(cl, i, pad):
    """The cluster's value of the selection itself from its padded value ``i`` (``pad_rows``), and that op (once
    each)."""
    memo = cl.unpadded
    got = memo.get(i)
    if got is None:
        op = P.pad_rows.bind(count=pad.count())
        got = memo[i] = (_record(cl, op, (i, _id(cl, pad.mask)))[0], op)
    return got


def _emit(cl, op, ids, pads, inputs=()):
    """Collect ``op`` on the cluster's values ``ids`` (their ``pads``): ``(output ids, their pads)``, or None where the
    op is not collected. Raises NeedCount where it runs on the selection itself and its count is not on the host yet.
    ``inputs``: the op's Tensors, which an error names."""
    prim = op.prim
    if prim is P.pad_select:
        return _record(cl, op, ids, inputs), (_PADS[inputs[1]._vid],)
    if not any(pads):  # (a step of a backward with no padded input: as _collect_steps collects it)
        out = _record(cl, op, ids, inputs)
        return out, (None,) * len(out)
    if prim in PAD_PRIMS:  # (on the padded rows, no padded result)
        out = _record(cl, op, ids, inputs)
        return out, (None,) * len(out)
    if prim is VJP:
        return _emit_vjp(cl, op, ids, pads)
    avals = cl.avals
    how = _classify(op, [avals[i][0] for i in ids], pads)
    if how is not None and how[0] == "rows":  # (inferred on the padded rows: the program's checks but for the rows)
        out = _record(cl, op, ids, inputs)
        return out, (how[1],) * len(out)
    if how is not None:  # (a sum over the rows)
        red = P.pad_reduce.bind(**dict(how[2]))
        return _record(cl, red, (ids[0], _id(cl, how[1].mask)), inputs), (None,)
    got = _in_place(cl, op, ids, pads, inputs) or _gather_from_prefix(cl, op, ids, pads, inputs)
    if got is not None:
        return got
    # anything else: on the selection itself, as eagerly -- but for what runs on every row once the count is known
    _counts_known(pads)
    over = _over_rows(op, [avals[i][0] for i in ids], pads)
    if over is not None:
        return _record_over_rows(cl, op, ids, pads, over, inputs), (None,)
    if _logical(cl, op, ids, pads, inputs) is None:
        return None
    out = _record(cl, op, [i if p is None else _unpadded(cl, i, p)[0] for i, p in zip(ids, pads)], inputs)
    return out, (None,) * len(out)


def _gather_from_prefix(cl, op, ids, pads, inputs):
    """``x[i]`` (``x[i, j]``, ...) where ``x`` holds a prefix's rows -- a host array kept padded (its line's arrays
    change their count of rows: a data set's boxes), ``x[:n]`` -- and the index tensors are a selection's: each
    selected entry's row of ``x``, where it is (negative positions made so), the result padded as the selection; the
    count of neither is read. OTA's ``gt_cls[matched[fg]]`` (1-6 boxes an image, padded to 8 rows) read the foreground
    count at every step -- a cut, then a cluster whose key had the count in it. (Its range is checked on the program's
    side as ever, against the prefix's count.) Not where a GradManager tracks ``x``: the gradient of such a gather is
    not collected on padded rows. None: not such an op."""
    if op.prim is not I.getitem or len(ids) < 2:
        return None
    xp, ip = pads[0], pads[1]
    if xp is None or xp.prefix is None or ip is None or ip is xp or any(p is not ip for p in pads[2:]):
        return None
    spec, k = dict(op.params)["spec"], len(ids) - 1
    shapes = [cl.avals[i][0] for i in ids]
    if not (len(spec) >= k and all(s == ("t",) for s in spec[:k]) and all(s[0] == "s" for s in spec[k:])
            and shapes[1] and all(s == shapes[1] for s in shapes[2:])):
        return None
    for g in _dispatch.recorders:  # (a recorder that cannot say what it tracks: as if it tracked ``x``)
        tracked = getattr(g, "_tracked", None)
        if tracked is None or inputs[0]._vid in tracked:
            return None
    at = _record(cl, P.pad_position.bind(), (ids[1], _id(cl, xp.tensor)))[0]
    out = _record(cl, op, (ids[0], at) + tuple(ids[2:]), inputs)
    return out, (ip,) * len(out)


def _over_rows(op, shapes, pads):
    """How ``op`` -- on a selection itself, its count known -- runs on every row instead: ``("max", low)`` for
    ``max``/``min`` (``low``: max) over axes holding the rows, ``("arg", low)`` for ``argmax``/``argmin`` along them
    (the selection not empty: else eager's error), ``("gather",)`` for the rows of a prefix (``x[:n]``, each row where it
    is) gathered by positions (``x[:n][i]``); None: on the selection itself."""
    pad = pads[0]
    if pad is None or any(p is not None for p in pads[1:]):
        return None
    prim = op.prim
    if prim is R.max or prim is R.min:
        axis, n = dict(op.params)["axis"], len(shapes[0])
        if n and pad.count() and (axis is None or 0 in [a % n for a in (axis if type(axis) is tuple else (axis,))]):
            return "max", prim is R.max
        return None
    if prim is R.argmax or prim is R.argmin:
        axis = dict(op.params)["axis"]
        if axis is not None and len(shapes[0]) and axis % len(shapes[0]) == 0 and pad.count():
            return "arg", prim is R.argmax
        return None
    if prim is I.getitem and pad.prefix is not None and len(shapes) > 1:
        spec = dict(op.params)["spec"]
        if spec and spec[0] == ("t",):
            return ("gather",)
    return None


def _record_over_rows(cl, op, ids, pads, over, inputs=(), vjp=None):
    """Collect ``op`` (``over``: see _over_rows) on every row: its output ids. ``vjp``: ``op`` is the gradient
    ``vjp[fwd]`` (``(fwd, its number of inputs)``), its inputs ``ids``: ``fwd``'s, then the cotangents."""
    pad = pads[0]
    mask = _id(cl, pad.mask)
    if over[0] == "arg":
        keep = dict(op.params)["keepdims"]
        return _record(cl, P.pad_arg.bind(low=over[1], keepdims=keep), (ids[0], mask), inputs)
    if over[0] == "max":
        fill = P.pad_fill.bind(low=over[1])
        filled = _record(cl, fill, (ids[0], mask))[0]
        if vjp is None:
            return _record(cl, op, (filled,), inputs)
        g = _record(cl, op, (filled,) + tuple(ids[vjp[1]:]))[0]
        return _record(cl, VJP.bind(op=fill, nin=2, wrt=(0,), given=(True,)), (ids[0], mask, g))
    # a gather of a prefix's rows: its positions are the rows' (negative ones made so)
    at = _record(cl, P.pad_position.bind(), (ids[1], _id(cl, pad.tensor)))[0]
    return _record(cl, op, (ids[0], at) + tuple(ids[2:]), inputs)


# ---- ops that make other rows of selections, in place: an FPN pooler's ``concat(pooled)[argsort(concat(inds))][:-4]``
# (kind, the pads' identities, params) -> (the pads, the Pad of the rows made from them): the selections made from the
# same rows share one (``concat(pooled)`` and ``concat(inds)``), and a gradient finds its forward's
_DERIVED: collections.OrderedDict = collections.OrderedDict()


def _derived(key, pads, make):
    got = _DERIVED.get(key)
    if got is not None and all(a is b for a, b in zip(got[0], pads)):
        return got[1]
    pad = make()
    _DERIVED[key] = (pads, pad)
    while len(_DERIVED) > _KEPT_COUNTS:
        _DERIVED.popitem(last=False)
    return pad


def _pad_from_mask(cl, mask, rows, count=None):
    """A Pad of the cluster's mask value ``mask``: its count collected too."""
    n = _record(cl, I.mask_count.bind(), (mask,))[0]
    pad = Pad(_A._pending(cl, mask), _A._pending(cl, n), rows)
    pad._count = count
    return pad


def _concat_pad(cl, pads):
    """The rows of a concatenation of selections along their rows: their masks concatenated (the count their sum)."""
    mask = _record(cl, S.concat.bind(axis=0), [_id(cl, p.mask) for p in pads])[0]
    known = all(p._count is not None for p in pads)
    return _pad_from_mask(cl, mask, sum(p.rows for p in pads), sum(p._count for p in pads) if known else None)


def _head_pad(cl, pad, start, stop):
    """The rows of ``y[start:stop]``, ``y`` a selection of ``pad``'s rows."""
    mask = _record(cl, P.pad_head.bind(start=start, stop=stop), (_id(cl, pad.mask),))[0]
    count = None
    if pad._count is not None:
        count = len(range(pad._count)[start:stop])
    return _pad_from_mask(cl, mask, pad.rows, count)


def _head_slice(spec, shapes, pads):
    """``(start, stop)`` where ``spec`` slices a selection's rows (alone, by a step of 1) other than all of them."""
    if len(spec) == 1 and len(shapes) == 1 and pads[0] is not None and spec[0][0] == "s" and spec[0][3] in (None, 1) \
            and spec[0][1:3] != (None, None) and all(type(v) is int or v is None for v in spec[0][1:3]):
        # (bounds past the rows clamped to them -- the same slice of at most that many rows -- so that int32 holds
        # them: ``y[:2**31]`` overflowed)
        rows = shapes[0][0]
        return tuple(None if v is None else min(max(v, -rows), rows) for v in spec[0][1:3])
    return None


def _gathers_among(spec, pads):
    """Whether ``getitem`` ``spec`` on a selection and an index of the same rows, or of as many (their counts on the
    host) -- ``y[argsort(y)]``, ``concat(pooled)[argsort(concat(inds))]``: its entries positions among them -- gathers
    along the rows."""
    if len(pads) != 2 or pads[0] is None or pads[1] is None or not spec or spec[0] != ("t",) \
            or not all(s[0] == "s" for s in spec[1:]):
        return False
    return pads[1] is pads[0] or (pads[0].known() and pads[1].known() and pads[0].count() == pads[1].count())


# ops costly per row: on a selection whose count is on the host, run on its rows gathered first (``pad_compact``,
# into ``bucket(count)`` rows), not on every row of its mask -- an FPN level's rois, a quarter of them
_COSTLY = frozenset([V.roi_align, V.roi_pooling])


def _compacted(cl, pad, i):
    """The cluster's value ``i`` (a selection of ``pad``'s rows, its count known) as a selection of the first rows of
    ``bucket(count)``: its value id and pad -- as it is where it is that already."""
    count = pad.count()
    rows = bucket(count)
    if pad.prefix is not None and pad.rows == rows:
        return i, pad
    op = P.pad_compact.bind(rows=rows)
    return _record(cl, op, (i, _id(cl, pad.mask)))[0], _row_pad(rows, count)


def _concats_rows(op, shapes, pads):
    """Whether ``op`` concatenates selections (every input one) along their rows."""
    return op.prim is S.concat and len(pads) > 1 and None not in pads and len(shapes[0]) >= 1 \
        and dict(op.params)["axis"] % len(shapes[0]) == 0


def _in_place(cl, op, ids, pads, inputs):
    """(``_emit``) ``op`` making other rows of its selections, collected in place -- a concatenation along the rows,
    a 1-d sort, a gather by positions among the rows, a slice of them -- or None. Eager's errors: the concatenation's
    are its shape checks, the others raise none."""
    prim, avals = op.prim, cl.avals
    shapes = [avals[i][0] for i in ids]
    if _concats_rows(op, shapes, pads):
        cat = _record(cl, op, ids, inputs)[0]  # (first: its shape checks)
        pad = _derived(("concat",) + tuple(map(id, pads)), pads, lambda: _concat_pad(cl, pads))
        return _record(cl, P.pad_select.bind(), (cat, _id(cl, pad.mask))), (pad,)
    if prim is SO.sort and len(shapes[0]) == 1 and pads[0] is not None:
        out = _record(cl, P.pad_sort.bind(**dict(op.params)), (ids[0], _id(cl, pads[0].mask)), inputs)
        return out, (pads[0], pads[0])
    if prim in _COSTLY and pads[0] is None and pads[1] is not None:
        _counts_known(pads[1:])
        rois, pad = _compacted(cl, pads[1], ids[1])
        return _record(cl, op, (ids[0], rois), inputs), (pad,)
    if prim is I.getitem:
        spec = dict(op.params)["spec"]
        if _gathers_among(spec, pads):
            at = _record(cl, P.pad_locate.bind(), (ids[1], _id(cl, pads[0].mask)))[0]
            return _record(cl, op, (ids[0], at), inputs), (pads[1],)  # (the index's rows)
        head = _head_slice(spec, shapes, pads)
        if head is not None:
            pad = _derived(("head", id(pads[0])) + head, pads[:1], lambda: _head_pad(cl, pads[0], *head))
            return _record(cl, P.pad_select.bind(), (ids[0], _id(cl, pad.mask))), (pad,)
    return None


def _in_place_vjp(cl, op, ids, pads, out_pads):
    """(``_emit_vjp``) The gradient ``op`` of an op :func:`_in_place` collects, as it collected it, or None."""
    params = dict(op.params)
    fwd, nin = params["op"], params["nin"]
    prim, avals = fwd.prim, cl.avals
    shapes = [avals[i][0] for i in ids[:nin]]
    if _concats_rows(fwd, shapes, pads[:nin]):  # (the cotangent split along the raw rows: each selection's own)
        return _record(cl, op, ids), out_pads
    if prim is SO.sort and len(shapes[0]) == 1 and pads[0] is not None:
        g = VJP.bind(op=P.pad_sort.bind(**dict(fwd.params)), nin=2, wrt=(0,), given=params["given"])
        return _record(cl, g, (ids[0], _id(cl, pads[0].mask)) + tuple(ids[nin:])), out_pads
    if prim in _COSTLY and pads[0] is None and pads[1] is not None:
        _counts_known(pads[1:2])
        rois, pad = _compacted(cl, pads[1], ids[1])
        outs = list(_record(cl, op, (ids[0], rois) + tuple(ids[nin:])))
        for j, k in enumerate(params["wrt"]):
            if k == 0:  # (the feature map's: a sum over the rows -- none with no row selected)
                outs[j] = _record(cl, P.pad_leak.bind(), (outs[j], _id(cl, pad.mask)))[0]
            elif rois != ids[1]:  # (the rois' own, back where they were)
                back = VJP.bind(op=P.pad_compact.bind(rows=pad.rows), nin=2, wrt=(0,), given=(True,))
                outs[j] = _record(cl, back, (ids[1], _id(cl, pads[1].mask), outs[j]))[0]
        return outs, out_pads
    if prim is I.getitem:
        spec = dict(fwd.params)["spec"]
        if _gathers_among(spec, pads[:nin]) and params["wrt"] == (0,):
            at = _record(cl, P.pad_locate.bind(), (ids[1], _id(cl, pads[0].mask)))[0]
            return _record(cl, op, (ids[0], at) + tuple(ids[nin:])), out_pads
        head = _head_slice(spec, shapes, pads[:nin])
        if head is not None:
            pad = _derived(("head", id(pads[0])) + head, pads[:1], lambda: _head_pad(cl, pads[0], *head))
            g = VJP.bind(op=P.pad_select.bind(), nin=2, wrt=(0,), given=params["given"])
            return _record(cl, g, (ids[0], _id(cl, pad.mask)) + tuple(ids[nin:])), out_pads
    return None


def _emit_vjp(cl, op, ids, pads):
    """The gradient op ``vjp[fwd]`` on padded values, as ``fwd`` was collected: row by row as it is (a gradient
    summed over the rows for an operand broadcast along them through ``pad_leak``), a sum over the rows as
    ``vjp[pad_reduce]``, anything else on the selection itself, its gradient padded back with zeros."""
    params = dict(op.params)
    fwd, nin, wrt = params["op"], params["nin"], params["wrt"]
    out_pads = tuple([pads[k] for k in wrt])
    if fwd.prim in PAD_PRIMS:
        return _record(cl, op, ids), out_pads
    avals = cl.avals
    how = _classify(fwd, [avals[i][0] for i in ids[:nin]], pads[:nin])
    if how is not None and how[0] == "rows":
        outs = list(_record(cl, op, ids))
        for j, p in enumerate(out_pads):
            if p is None and how[1] is not None:
                outs[j] = _record(cl, P.pad_leak.bind(), (outs[j], _id(cl, how[1].mask)))[0]
        return outs, out_pads
    if how is not None:
        red = P.pad_reduce.bind(**dict(how[2]))
        g = VJP.bind(op=red, nin=2, wrt=(0,), given=params["given"])
        return _record(cl, g, (ids[0], _id(cl, how[1].mask)) + tuple(ids[nin:])), out_pads
    got = _in_place_vjp(cl, op, ids, pads, out_pads)
    if got is not None:
        return got
    _counts_known(pads[:nin])
    over = _over_rows(fwd, [avals[i][0] for i in ids[:nin]], pads[:nin])
    if over is not None and over[0] != "arg":  # (argmax has no gradient to take)
        return _record_over_rows(cl, op, ids, pads, over, vjp=(fwd, nin)), out_pads
    slices = [None if p is None else _unpadded(cl, i, p) for i, p in zip(ids[:nin], pads[:nin])]
    inner = [i if sl is None else sl[0] for i, sl in zip(ids[:nin], slices)]
    outs = list(_record(cl, op, inner + list(ids[nin:])))
    for j, k in enumerate(wrt):
        if slices[k] is not None:  # (the selection's gradient: the unselected rows get zeros)
            back = VJP.bind(op=slices[k][1], nin=2, wrt=(0,), given=(True,))
            outs[j] = _record(cl, back, (ids[k], _id(cl, pads[k].mask), outs[j]))[0]
    return outs, out_pads


def collect(cl, op, inputs, ids):
    """(``_collect``, lock held) Collect ``op`` whose inputs include padded values, or a padded op: its output
    Tensors, or None where it is not collected (it then runs eagerly, as any such op). Raises NeedCount where the op
    runs on the selection itself and that count is not on the host yet."""
    got = _emit(cl, op, ids, [_pad_of(t) for t in inputs], inputs)
    if got is None:
        return None
    result = _tensors(cl, *got)
    rule = _A._RANGE_RULES.get(op.name)
    if rule is not None:
        rule(op, inputs, result)
    return result


# (sequence op, its inputs' types, which inputs share a pad) -> how its steps were collected: a backward over the same
# tape collects the same records every step (see collect_steps)
_STEP_PLANS: dict = {}


def collect_steps(cl, op, ids, inputs):
    """(``_collect``, lock held) A ``sequence`` op (a GradManager's backward) with padded inputs: its steps collected
    as ``collect`` collects each, only the sequence's results made Tensors (as ``_collect_steps``). The records it
    made are kept (by the sequence, its inputs' types and which of them share a pad): the next step's backward
    appends them again, as ``_collect_steps`` reuses its plan. Raises NeedCount where a step needs a count not on
    the host yet (it is read, and the sequence collected again) and _Uncollectable where a step is not collected (the
    steps are then applied one by one)."""
    env_pads = [_pad_of(t) for t in inputs]
    groups, pattern = [], []
    for p in env_pads:
        if p is None:
            pattern.append(-1)
            continue
        for g, q in enumerate(groups):
            if q is p:
                break
        else:
            g = len(groups)
            groups.append(p)
        pattern.append(g)
    avals = cl.avals
    # (and which pads are prefixes: a prefix's gathers run on every row, another's on the selection)
    key = (op, tuple([avals[i] for i in ids]), tuple(pattern), tuple([p.prefix is not None for p in groups]))
    masks = [_id(cl, p.mask) for p in groups]  # (first: no input is taken while the steps are collected)
    plan = _STEP_PLANS.get(key)
    if plan is not None:
        return _replay(cl, plan, ids, masks, groups)
    params = dict(op.params)
    env = list(ids)
    n_ops, n_vals, n_in = len(cl.ops), len(avals), len(cl.inputs)
    try:
        for step, positions in params["steps"]:
            got = _emit(cl, step, [env[k] for k in positions], [env_pads[k] for k in positions])
            if got is None:
                raise _A._Uncollectable
            env.extend(got[0])
            env_pads.extend(got[1])
    except (NeedCount, _A._Uncollectable) as exc:
        # (as if no step was collected: the values made stay unused -- the inputs taken too, as _collect_steps's)
        del cl.ops[n_ops:]
        cl.unpadded = {i: got for i, got in cl.unpadded.items() if got[0] < n_vals}
        if type(exc) is NeedCount and exc.pad is None:
            raise _A._Uncollectable from None
        raise
    wanted = params["outs"]
    if len(cl.inputs) == n_in:
        plan = _plan(cl.ops[n_ops:], avals[n_vals:], n_vals, ids, masks, [env[k] for k in wanted],
                     [env_pads[k] for k in wanted], groups)
        if plan is not None:
            if len(_STEP_PLANS) >= 256:
                _STEP_PLANS.clear()
            _STEP_PLANS[key] = plan
    return _tensors(cl, [env[k] for k in wanted], [env_pads[k] for k in wanted])


def _plan(records, made, n_vals, ids, masks, out_ids, out_pads, groups):
    """The records a sequence's steps made, with their values numbered as ``_replay`` finds them: ``("i", k)`` the
    sequence's k-th input, ``("m", g)`` the mask of its g-th pad, ``("n", j)`` the j-th value made; None where
    another value was read or an op depends on a count (``pad_rows``)."""
    where = {}
    for g, i in enumerate(masks):
        where.setdefault(i, ("m", g))
    for k, i in enumerate(ids):
        where.setdefault(i, ("i", k))

    def ref(i):
        return ("n", i - n_vals) if i >= n_vals else where.get(i)

    steps = []
    for op, ins, outs in records:
        if op.prim is P.pad_rows:
            return None
        refs = tuple([ref(i) for i in ins])
        if None in refs:
            return None
        steps.append((op, refs, len(outs)))
    pads = tuple([None if p is None else next(g for g, q in enumerate(groups) if q is p) for p in out_pads])
    return tuple(steps), tuple(made), tuple([ref(i) for i in out_ids]), pads


def _replay(cl, plan, ids, masks, groups):
    """Append a sequence's kept records (``_plan``) on the cluster's values: its result Tensors."""
    steps, made, outs, pads = plan
    avals, ops = cl.avals, cl.ops
    base = len(avals)
    avals.extend(made)
    n = base
    for op, refs, k in steps:
        ins = tuple([ids[j] if w == "i" else base + j if w == "n" else masks[j] for w, j in refs])
        ops.append((op, ins, tuple(range(n, n + k))))
        n += k
        if cl.guess is not None:
            cl.follow()
    return _tensors(cl, [ids[j] if w == "i" else base + j if w == "n" else masks[j] for w, j in outs],
                    [None if g is None else groups[g] for g in pads])


# ---- a line's host arrays of changing row counts -------------------------------------------------------------------
# A detection data set gives each image's boxes as an array of their own count (``[Tensor(b) for b in boxes]``).
# Each count is a new shape, so is every cluster holding them: a cluster per count (per pair of counts, for two
# images in one cluster), compiled when it recurs, or, with COCO's 1-50 boxes an image, a megamorphic line run
# eagerly. Such an array -- made at a line (outside megxla) whose arrays of one trailing shape and dtype have had
# another count than the last step's in the same place in ``_VARYING`` steps out of ``_WITHIN`` (a model's buffers,
# made once, an FPN level's anchors, made every step with the same counts, or an epoch's smaller last batch never
# are) -- is made a selection of the first ``count`` rows of a padded value: the ``bucket`` (8, 16, 32, ...) of the
# most rows the line has made since, the rows past the count copies of the first (as ``pad_select``'s). Its count is
# known (no read), and the clusters using it settle on one shape (a few on the way), not one per count. Arrays of one count share their pad: an image's boxes and labels,
# made at two lines, stay row by row together.
# (code, call's offset, trailing type) -> [trailing type, step, last step's counts, this step's, changes], or the rows
# its arrays are padded to
_ROW_SITES: collections.OrderedDict = collections.OrderedDict()
_VARYING, _WITHIN = 3, 8
_ROW_PADS: collections.OrderedDict = collections.OrderedDict()  # (bucket, count) -> Pad
_MEGXLA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bucket(count):
    """The padded number of rows of ``count`` rows: 8, or the power of two at least ``count``.

    Example:
        >>> [bucket(n) for n in (1, 8, 9, 50)]
        [8, 8, 16, 64]
    """
    return max(8, 1 << (count - 1).bit_length())


def _row_pad(rows, count):
    pad = _ROW_PADS.get((rows, count))
    if pad is None:
        mask = _A._Tensor(np.arange(rows) < count)
        n = _A._Tensor(np.int32(count))
        pad = _ROW_PADS[(rows, count)] = Pad(mask, n, rows, n)
        pad._count = count
        while len(_ROW_PADS) > _KEPT_COUNTS:
            _ROW_PADS.popitem(last=False)
    return pad


def host_rows(data, dtype, device):
    """(core's ``_lazy.HOST_ROWS``) The Lazy of host array ``data`` (a NumPy array of at least one axis, made a
    ``Tensor`` by the caller's caller) kept padded -- where its line's arrays change their count of rows --, or None:
    made as ever."""
    if device is not None or data.dtype.metadata or getattr(dtype, "metadata", None) or not _A.collecting():
        return None
    f = sys._getframe(2)
    code = f.f_code
    if code.co_filename.startswith(_MEGXLA_DIR):
        return None
    count, kind = data.shape[0], (data.shape[1:], data.dtype)
    # (by the call's place in its line and by the arrays' trailing type: ``x, y = Tensor(a), Tensor(b)`` and a helper
    # making every array of a batch are followed array by array, not one resetting the other's counts)
    site = (code, f.f_lasti, kind)
    seen = _ROW_SITES.get(site)
    if type(seen) is not int:
        # (the counts the line made this step, in order, against the last step's: an FPN level's anchors, made at one
        # line every step, repeat theirs)
        step = _A._local.steps
        if seen is None:
            seen = _ROW_SITES[site] = [kind, step, [], [], []]
            while len(_ROW_SITES) > 256:
                _ROW_SITES.popitem(last=False)
        changed = seen[4]
        if seen[1] != step:
            # (a change counts where the two steps made as many arrays at the line: an evaluation between steps
            # through the same line -- 25, 25, 5 rows before the next training batch's 8 -- makes a list of another
            # length, a phase of the program and not a data set's counts; its change is taken back once it is whole)
            if len(seen[3]) != len(seen[2]) and changed and changed[-1] == seen[1]:
                changed.pop()
            seen[1], seen[2], seen[3] = step, seen[3], []
        at = len(seen[3])
        if at < 64:
            seen[3].append(count)
            if at < len(seen[2]) and seen[2][at] != count and (not changed or changed[-1] != step):
                changed.append(step)
                del changed[:-_VARYING]
        # (changes in _VARYING steps out of _WITHIN: a data set's counts -- not the smaller last batch of an epoch)
        if len(seen[4]) < _VARYING or seen[4][-1] - seen[4][0] >= _WITHIN:
            return None
        seen = 0
    if not count:
        return None
    # (the most rows the line has needed: its clusters settle on one shape, as a data loader's padding to a maximum)
    rows = _ROW_SITES[site] = max(bucket(count), seen)
    padded = np.concatenate([data, np.broadcast_to(data[:1], (rows - count,) + data.shape[1:])])
    arr = _dt.to_array(padded, dtype, None)
    z = Lazy(tuple(arr.shape), arr.dtype, False, DONE, 0)
    z.pad, z.phys = _row_pad(rows, count), arr
    if arr.dtype.kind in "iuf":
        # (where its entries lie: the padded array's, whose extra rows repeat its first -- an index check on it,
        # ``F.gather(logits, -1, actions)``, then reads no value: as on the array made as ever, see _value_ranges)
        z.bounds = weakref.ref(arr)
    return z


def install(on):
    """Register the hooks in core while auto-jit is on (and selections are padded)."""
    _lazy.SELECT[0] = select if on and ON else None
    _lazy.HOST_ROWS[0] = host_rows if on and ON else None
    _lazy.SELECT_PREFIX[0] = select_prefix if on and ON else None
    _lazy.SET_SELECTED[0] = set_selected if on and ON else None

