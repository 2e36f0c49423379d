"""Auto-jit's boolean selections at a fixed size: ``x[mask]`` collected as ``len(mask)`` rows and a count.

A detector's step selects its foreground anchors (``box[fg]``, ``labels[fg] = y[fg]``, ``t[fg, k[fg]] = 1``), whose
number changes with every batch. Collected as they are, the selected values take a new shape each step, so does
every cluster holding them -- the losses, the whole backward --, and a detector's step never compiled: its site
kept changing and ran eagerly. Here a selection is collected as ``pad_select`` (``core/ops/padded.py``): all
``len(mask)`` rows, the count an input of the cluster. The Tensor keeps the selection's shape (``count`` rows: shape
checks, errors and reads are eager's); the cluster's value of it (``Lazy.pad``) has the padded rows. The count is
still read on the host (the shape needs it) -- once per mask value, not once per selection --, but the clusters no
longer change with it: one executable serves every count.

Ops on padded values (:func:`collect`):

* row by row (elementwise, casts, slices and reductions of the other axes, and their gradients): collected as
  they are, on the padded rows -- the result padded too;
* ``sum``/``mean`` over the rows: ``pad_reduce``, which drops the rows past the count (and their gradients);
* written back through the mask: ``pad_setitem`` (from ``Tensor.__setitem__``);
* anything else: the first ``count`` rows are sliced out first (a slice whose size is the count: that cluster
  changes with it again, as before) and the op runs on them, as eagerly; its gradient is padded back with zeros.

Why the padded rows cannot reach a result: see ``core/ops/padded.py``. A count of 0 is not padded (there is no
selected row to copy): that selection is indexed as ever.
"""
from __future__ import annotations

import collections
import os

import numpy as np

from ..core import _lazy
from ..core._lazy import Lazy
from ..core._dispatch import apply
from ..core._op import VJP
from ..core._tensor import Tensor
from ..core.ops import elemwise as E, indexing as I, padded as P, reduction as R

__all__ = ["ON", "Pad", "NeedCount", "select", "set_selected", "collect", "give", "PAD_PRIMS"]

# MEGXLA_AUTO_JIT_PAD_SELECTIONS=0: selections are indexed as ever (their count read, their clusters changing with it)
ON = os.environ.get("MEGXLA_AUTO_JIT_PAD_SELECTIONS", "1") != "0"

PAD_PRIMS = frozenset([P.pad_select, P.pad_setitem, P.pad_reduce, P.pad_leak])
_ROWS = frozenset(list(E.UNARY.values()) + list(E.BINARY.values()) + [E.leaky_relu, E.clip, E.where, E.astype])
_MEAN_OF = {R.sum: False, R.mean: True}  # reductions over the rows that drop the padded ones
_KEPT_COUNTS = 64


class Pad:
    """The count of a padded selection's rows: ``tensor``, the mask's count (pending in a cluster until read) and
    ``rows``, the padded length (``len(mask)``). Padded values of one ``Pad`` (one identity: selections by one mask
    value) have the same rows."""

    __slots__ = ("tensor", "rows", "_count")

    def __init__(self, tensor, rows):
        self.tensor, self.rows, self._count = tensor, rows, None

    def count(self):
        """The count, read on the host once (a cut where it is pending: ``x[mask].shape`` needs it)."""
        c = self._count
        if c is None:
            c = self._count = int(self.tensor.item())
        return c

    def known(self):
        """Whether the count is on the host already (or can be read without running a cluster)."""
        if self._count is not None:
            return True
        d = self.tensor._data
        return type(d) is not Lazy or d.value is not None


# mask value id -> its Pad: a mask selecting several values counts once, and its selections share their rows
_PADS: collections.OrderedDict = collections.OrderedDict()
_BY_COUNT: dict = {}  # its count Tensor's value id -> the Pad


class NeedCount(Exception):
    """(``collect``) the op needs a padded input's count on the host (it runs on the first ``count`` rows): read it
    -- outside the collector: the read runs the pending cluster -- then collect the op again."""

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


def _pad(mask):
    """``mask``'s Pad: its count collected (not read), once per mask value."""
    pad = _PADS.get(mask._vid)
    if pad is None:
        pad = _PADS[mask._vid] = Pad(apply(I.mask_count.bind(), mask), mask.shape[0])
        _BY_COUNT[pad.tensor._vid] = pad
        while len(_PADS) > _KEPT_COUNTS:
            _BY_COUNT.pop(_PADS.popitem(last=False)[1].tensor._vid, None)
    return pad


def select(x, mask, spec):
    """(core's ``_lazy.SELECT``) ``x[mask]`` as a padded selection (then ``spec``: the other axes' ints and slices,
    checked), or None: index as ever (not collecting now, ``x`` or ``mask`` itself a padded selection, an empty
    axis)."""
    from ._autojit import collecting
    if not collecting() or _pad_of(mask) is not None or not mask.shape[0]:
        return None
    pad = _pad(mask)
    y = apply(P.pad_select.bind(), x, mask, pad.tensor)
    if len(spec) > 1:
        y = apply(I.getitem.bind(spec=spec), y)
    return y


def set_selected(x, mask, spec, tensors, value):
    """(core's ``_lazy.SET_SELECTED``) the value of ``x`` after ``x[mask, ...] = value``, the rows past the count
    dropped, or None: index as ever. ``spec``/``tensors``: the mask (``("t",)``) and the other items, checked."""
    from ._autojit import collecting
    if not collecting() or _pad_of(mask) is not None or not mask.shape[0]:
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
    block = np.empty(x.shape, bool)[I.build_index(spec, [np.zeros(pad.rows, np.int32)] * (1 + len(tensors)))].shape
    vshape = _raw_shape(value)
    try:
        if np.broadcast_shapes(vshape, block) != block:
            return None
    except ValueError:
        return None
    if vp is None and len(vshape) == len(block) and vshape[0] != 1:
        return None
    return apply(P.pad_setitem.bind(spec=spec), x, value, mask, pad.tensor, *tensors)


def give(z, v):
    """A padded Lazy's cluster ran: ``v`` is its padded value."""
    z.phys = v
    z.cluster = DONE


# ---- collecting ops on padded values ----------------------------------------------------------------------------
def _classify(op, inputs, pads):
    """How ``op`` treats the rows of its padded inputs (all of one pad): ``("rows", pad)`` (row by row: its result
    padded too), ``("reduce", pad, params of pad_reduce)`` (sums them), or None (anything else). From the inputs'
    ranks and their other axes only: a padded input's count is not read for it."""
    pad = None
    for p in pads:
        if p is not None:
            if pad is None:
                pad = p
            elif p is not pad:
                return None
    prim = op.prim
    if prim in _ROWS:
        nd = max(t.ndim for t in inputs)
        for t, p in zip(inputs, pads):
            if p is not None:
                if t.ndim != nd:
                    return None  # (broadcast to more axes: the rows would not be the first)
            elif t.ndim == nd and t.shape[0] != 1:
                return None  # (a value of its own along the rows)
        return "rows", pad
    params = dict(op.params)
    if prim is I.getitem:
        spec = params["spec"]
        if len(inputs) == 1 and spec and spec[0][0] == "s" and spec[0][1:3] == (None, None) \
                and spec[0][3] in (None, 1) and all(s[0] not in "tnb" for s in spec):
            return "rows", pad
        return None
    if prim in _MEAN_OF or prim in (R.prod, R.max, R.min):
        if len(inputs) != 1 or not inputs[0].ndim:
            return None
        axis, n = params["axis"], inputs[0].ndim
        axes = None if axis is None else tuple(sorted(a % n for a in (axis if type(axis) is tuple else (axis,))))
        if axes is not None and 0 not in axes:
            return "rows", pad
        if prim in _MEAN_OF:
            return "reduce", pad, (("axis", axes), ("keepdims", params["keepdims"]), ("mean", _MEAN_OF[prim]))
    return None


def _id(cl, t):
    """The cluster's local id of Tensor ``t`` (a pending value of it, or an input)."""
    from ._autojit import _ref
    d = t._data
    if type(d) is Lazy:
        if d.cluster is cl and d.value is None:
            return d.index
        d = d.phys if d.phys is not None else _lazy.resolve(t)
    i = cl.vmap.get(t._vid)
    if i is None:
        i = cl.add_input(d, t._vid)
        cl.in_refs.append(_ref(t))
        cl.in_made.append(None)
        if cl.launched is not None:
            cl.unguess()
    return i


def _record(cl, op, ids, inputs=()):
    """Append ``op`` on the cluster's values ``ids``: its output ids (their types inferred on the cluster's; an error
    names ``inputs``)."""
    from ._autojit import _infer, _SHAPES, _MISSING
    avals = cl.avals
    key = (op, tuple([avals[i] for i in ids]))
    outs = _SHAPES.get(key, _MISSING)
    if outs is _MISSING:
        outs = _infer(op, key, inputs)
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
    from ._autojit import _new, _vids, _ref, _Tensor
    result = []
    for i, pad in zip(out_ids, pads):
        aval = cl.avals[i]
        z = Lazy(aval[0], aval[1], aval[2], cl, i)
        z.pad = pad
        cl.lazies.append(z)
        t = _new(_Tensor)
        t._data = z
        t._vid = next(_vids)
        t._grad = None
        t._name = None
        z.holders = [_ref(t)]
        result.append(t)
    return tuple(result)


def _logical(op, inputs):
    """``op``'s output types on the inputs as the program sees them (a padded one with ``count`` rows: known by
    now): eager's shape checks and errors, at the user's line."""
    from ._autojit import _infer, _SHAPES, _MISSING
    key = (op, tuple([(t._data.shape, t._data.dtype, bool(getattr(t._data, "weak_type", False))) for t in inputs]))
    outs = _SHAPES.get(key, _MISSING)
    if outs is _MISSING:
        outs = _infer(op, key, inputs)
    return outs


def _counts_known(pads):
    for p in pads:
        if p is not None and not p.known():
            raise NeedCount(p)


def _unpadded(cl, i, pad):
    """The cluster's value of the first ``count`` rows of its padded value ``i``, and the slice op (once each)."""
    memo = cl.unpadded
    got = memo.get(i)
    if got is None:
        op = I.getitem.bind(spec=(("s", None, pad.count(), None),))
        got = memo[i] = (_record(cl, op, (i,))[0], op)
    return got


def collect(cl, op, inputs, ids):
    """(``_collect``, lock held) Collect ``op`` whose inputs include padded values, or a padded op: its output
    Tensors, or None where it is not collected (it then runs eagerly, as any such op). Raises NeedCount where the op
    runs on the first ``count`` rows and that count is not on the host yet."""
    pads = [_pad_of(t) for t in inputs]
    prim = op.prim
    if prim is P.pad_select:
        return _tensors(cl, _record(cl, op, ids), [_BY_COUNT[inputs[2]._vid]])
    if prim in PAD_PRIMS:  # (pad_setitem, pad_reduce, pad_leak: on the padded rows, no padded result)
        out = _record(cl, op, ids)
        return _tensors(cl, out, [None] * len(out))
    if prim is VJP:
        return _collect_vjp(cl, op, inputs, ids, pads)
    how = _classify(op, inputs, pads)
    if how is not None and how[0] == "rows":  # (inferred on the padded rows: the program's checks but for the rows)
        return _tensors(cl, _record(cl, op, ids, inputs), [how[1]])
    if how is not None:  # (a sum over the rows)
        red = P.pad_reduce.bind(**dict(how[2]))
        return _tensors(cl, _record(cl, red, (ids[0], _id(cl, how[1].tensor)), inputs), [None])
    # anything else: on the first ``count`` rows, as eagerly
    _counts_known(pads)
    if _logical(op, inputs) is None:
        return None
    ids = [i if p is None else _unpadded(cl, i, p)[0] for i, p in zip(ids, pads)]
    out = _record(cl, op, ids)
    return _tensors(cl, out, [None] * len(out))


def _collect_vjp(cl, op, inputs, ids, pads):
    """The gradient op ``vjp[fwd]`` on padded values, as ``fwd`` was collected: row by row as it is (a gradient
    summed over the rows for an operand broadcast along them through ``pad_leak``), a sum over the rows as
    ``vjp[pad_reduce]``, anything else on the first ``count`` rows, its gradient padded back with zeros."""
    params = dict(op.params)
    fwd, nin, wrt = params["op"], params["nin"], params["wrt"]
    primals = inputs[:nin]
    out_pads = [pads[k] for k in wrt]
    if fwd.prim in PAD_PRIMS:
        return _tensors(cl, _record(cl, op, ids), out_pads)
    how = _classify(fwd, primals, pads[:nin])
    if how is not None and how[0] == "rows":
        outs = list(_record(cl, op, ids))
        for j, p in enumerate(out_pads):
            if p is None and how[1] is not None:
                outs[j] = _record(cl, P.pad_leak.bind(), (outs[j], _id(cl, how[1].tensor)))[0]
        return _tensors(cl, outs, out_pads)
    if how is not None:
        red = P.pad_reduce.bind(**dict(how[2]))
        g = VJP.bind(op=red, nin=2, wrt=(0,), given=params["given"])
        return _tensors(cl, _record(cl, g, (ids[0], _id(cl, how[1].tensor)) + tuple(ids[nin:])), out_pads)
    _counts_known(pads[:nin])
    slices = [None if p is None else _unpadded(cl, i, p) for i, p in zip(ids[:nin], pads[:nin])]
    inner = [i if sl is None else sl[0] for i, sl in zip(ids[:nin], slices)]
    outs = list(_record(cl, op, inner + list(ids[nin:])))
    for j, k in enumerate(wrt):
        if slices[k] is not None:  # (the slice's gradient: the rows past the count get zeros)
            back = VJP.bind(op=slices[k][1], nin=1, wrt=(0,), given=(True,))
            outs[j] = _record(cl, back, (ids[k], outs[j]))[0]
    return _tensors(cl, outs, out_pads)


def install(on):
    """Register the hooks in core while auto-jit is on (and selections are padded)."""
    _lazy.SELECT[0] = select if on and ON else None
    _lazy.SET_SELECTED[0] = set_selected if on and ON else None

