"""Known ranges of a cluster's pending integer values (``Lazy.bounds``), set as the ops are collected.

An index check (``x[idx]`` must raise eagerly for an index out of range) reads where the index's entries lie; for a
result not computed yet that would mean running its cluster. The rules below carry what is known without
computing: a selection or rearrangement of a value keeps its entries (a weak reference to the concrete array,
or that value's own bounds), ``argmax`` / ``sort``'s positions lie in ``[0, n - 1]``. ``_RANGE_RULES`` maps an
op's name to its rule ``rule(op, inputs, result)``; see ``core._lazy.known_range``.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from ..core import _indexing
from ..core.ops.indexing import build_index
from ..core._lazy import Among, Columns, FloorDivided, Lazy, Shifted, _range_of, limits

_prod = math.prod
_ref = weakref.ref
_can_cast = np.can_cast
_BOOL = np.dtype(bool)


def _entry(t):
    # (a float value's entries too: its range, truncated, is an integer cast's -- the only way the rules below
    # give a float's entries to an integer value, see _int_cast and _written)
    d = t._data
    if type(d) is Lazy:
        if d.value is None:
            return d.bounds
        d = d.value
    if d.dtype.kind not in "iuf":
        return None
    try:
        return _ref(d)
    except TypeError:  # (an array type without weak references: unknown)
        return None


def _same_values(op, inputs, result):  # a selection or rearrangement of its first input's entries
    b = _entry(inputs[0])
    if type(b) is Columns:
        b = [b]  # (its entries, not its rows: a rearrangement is no longer rows of that array)
    if b is not None:
        result[0]._data.bounds = b


def _columns(t):
    """``(weak reference to A, chain, head, aligned, concrete)`` where ``t``'s rows are rows of ``A`` indexed by
    ``chain`` (see ``Columns``): ``t`` itself concrete (``A``, row for row), or a pending value whose bounds say so;
    else None."""
    d = t._data
    if type(d) is Lazy:
        if d.value is None:
            b = d.bounds
            return (b.ref, b.chain, b.head, b.aligned, False) if type(b) is Columns else None
        d = d.value
    if d.dtype.kind not in "iuf":
        return None
    try:
        return _ref(d), (), None, True, True
    except TypeError:  # (an array type without weak references: unknown)
        return None


def _build(spec):
    """The static index ``spec`` (``ops.indexing``'s items) stands for, or None where it holds anything else."""
    return build_index(spec, ()) if all(item[0] in "is" for item in spec) else None


_ALL = ("s", None, None, None)


def _picked(op, inputs, result):
    """getitem: rows of a concrete array stay rows of it (``Columns``) where the index picks rows along the first axis
    -- a slice, an int, a 1-d index tensor -- and ints and slices along the others: ``gt[match][:, 4]``'s entries
    are the label column's, not every column's."""
    src = _columns(inputs[0])
    spec = dict(op.params)["spec"]
    if len(inputs) > 1 and src is not None:  # (ints that changed at their line, taken as index tensors there)
        static = _indexing.static_spec(spec, inputs[1:])
        if static is not None:
            spec, inputs = static, inputs[:1]
    rest = _build(spec[1:]) if src is not None and spec else None
    if rest is None:
        _same_values(op, inputs, result)
        return
    ref, chain, head, aligned, concrete = src
    first = spec[0]
    if concrete and first[0] in "is":  # (a static part of a concrete array: exactly it, row for row)
        result[0]._data.bounds = Columns(ref, (_build(spec),), None, True)
    elif first[0] == "s" or (first[0] == "t" and inputs[1]._data.ndim == 1):
        # (rows of the value: rows of the array, among its first ``head`` still; row for row only through ``:``)
        result[0]._data.bounds = Columns(ref, chain + ((slice(None),) + rest,), head, aligned and first == _ALL)
    elif first[0] == "i":  # (one row: its entries are the column's, its axes not rows)
        result[0]._data.bounds = [Columns(ref, chain + ((slice(None),) + rest,), head)]
    else:
        _same_values(op, inputs, result)


def _rows_kept(op, inputs, result):  # pad_select: every row one of x's (a selected one, or a copy of one)
    src = _columns(inputs[0])
    if src is None:
        _same_values(op, inputs, result)
        return
    ref, chain, head, aligned, _ = src
    pad = result[0]._data.pad
    if aligned and pad is not None and pad.prefix is not None:
        # (``x[:n]`` of rows in order: among the first n -- a copy of a selected one in place of each other)
        result[0]._data.bounds = Columns(ref, chain, pad, True)
    else:  # (a mask's rows, in place: among x's rows, not row for row -- a prefix of them is not the first rows)
        result[0]._data.bounds = Columns(ref, chain, head)


def _union(op, inputs, result):  # concat / stack
    bs = [_entry(t) for t in inputs]
    if bs and all(b is not None for b in bs):
        result[0]._data.bounds = bs


def _int_cast(op, inputs, result):  # astype to an integer type holding every value of the input's: entries stay
    src, dst = inputs[0]._data.dtype, result[0]._data.dtype
    if src.kind in "iu" and dst.kind in "iu" and _can_cast(src, dst, "safe"):
        b = _entry(inputs[0])
        if b is not None:
            result[0]._data.bounds = b
    elif src.kind == "b" and dst.kind in "iu":
        result[0]._data.bounds = (0, 1)
    elif src.kind == "f" and dst in (np.int32, np.int64):  # (truncated: C's conversion, MegEngine's)
        b = _entry(inputs[0])
        if b is not None:
            result[0]._data.bounds = Shifted(b, cast=True)


def _either(op, inputs, result):  # where(c, a, b): a's entries or b's
    if result[0]._data.dtype.kind in "iu":
        a, b = _entry(inputs[1]), _entry(inputs[2])
        if a is not None and b is not None:
            result[0]._data.bounds = [a, b]


def _written(op, inputs, result):  # setitem / pad_setitem: the value's entries written among x's
    dst, src = result[0]._data.dtype, inputs[1]._data.dtype
    if dst.kind not in "iu":
        return
    if src.kind == "f":  # (truncated, as astype: only where int32 holds them)
        b = _entry(inputs[1]) if dst in (np.int32, np.int64) else None
        b = None if b is None else Shifted(b, cast=True)
    else:
        b = _entry(inputs[1]) if _can_cast(src, dst, "safe") else None
    a = _entry(inputs[0])
    if a is not None and b is not None:
        result[0]._data.bounds = [a, b]


def _filled(op, inputs, result):  # full / full_like: one value
    if len(inputs) > 1:  # (full_like's value an input: the cached 0-d tensor of a number, in the result's dtype)
        b = _entry(inputs[1])
        if b is not None:
            result[0]._data.bounds = b
        return
    v = dict(op.params)["value"]
    dtype = result[0]._data.dtype
    if dtype.kind in "iuf" and isinstance(v, (int, float, np.integer, np.floating)) and math.isfinite(v):
        # (a float's: the value truncated, as its cast to integers -- see _entry)
        lo, hi = limits(dtype) if dtype.kind in "iu" else (-2 ** 31, 2 ** 31 - 1)
        if lo <= int(v) <= hi:  # (else it wrapped: ``full(-1, dtype=uint8)`` is 255)
            result[0]._data.bounds = (int(v), int(v))


def _masked(op, inputs, result):  # mul by a bool mask: the other operand's entries, or 0
    # (class ids made as ``F.ones(shape) * mask``, OMNet's labels, then cast and indexed with: no count read. A
    # float operand's entries have a range only where they are finite, so ``x * False`` is 0, not NaN.)
    # (every collected product comes here: the mask is looked for among pending values only -- a concrete array's
    # dtype costs ~0.2 us to ask, a pending one's is a field)
    if len(inputs) != 2:
        return
    a, m = inputs
    d = m._data
    if type(d) is not Lazy or d.dtype is not _BOOL:
        d = a._data
        if type(d) is not Lazy or d.dtype is not _BOOL:
            return
        a, m = m, a
    if a._data.dtype is _BOOL or result[0]._data.dtype.kind not in "iuf":
        return
    e = _entry(a)
    if e is not None:
        result[0]._data.bounds = [e, (0, 0)]


def _moved(op, inputs, result):  # add / sub of a scalar: the entries moved by its value
    if result[0]._data.dtype.kind not in "iu" or len(inputs) != 2:
        return
    a, b = inputs
    if b._data.ndim:
        if op.name == "sub":
            return
        a, b = b, a
    if b._data.ndim or b._data.dtype.kind not in "iu":
        return
    ea, r = _entry(a), _range_of(_entry(b))
    if ea is None or r is None:
        return
    result[0]._data.bounds = Shifted(ea, (-r[1], -r[0]) if op.name == "sub" else r,
                                     within=limits(result[0]._data.dtype))


def _scalar_range(t):
    """(lo, hi) of a 0-d integer operand's value, known without computing it, or None."""
    d = t._data
    if d.ndim or d.dtype.kind not in "iu":
        return None
    return _range_of(_entry(t))


def _divided(op, inputs, result):  # floordiv / mod of integers by a positive scalar
    if result[0]._data.dtype.kind not in "iu" or len(inputs) != 2:
        return
    by = _scalar_range(inputs[1])
    if by is None or by[0] <= 0:
        return
    if op.name == "mod":  # (an integer mod has the divisor's sign: Python's, MegEngine's)
        if by[1] - 1 <= limits(result[0]._data.dtype)[1]:
            result[0]._data.bounds = (0, by[1] - 1)
        return
    a = _entry(inputs[0])
    if a is not None:
        result[0]._data.bounds = FloorDivided(a, by)


def _shape(d):
    """``d``'s shape -- a selection's rows as its cluster holds them while its count is not on the host (the rules
    read only its other axes then: an op over the rows reads the count first) -- without a read."""
    if type(d) is Lazy and d.pad is not None and not d.pad.known():
        return d.raw_shape
    return d.shape


def _positions(op, inputs, result):  # argmax / argmin: positions along an axis (of the flattened input)
    params = dict(op.params)
    shape = _shape(inputs[0]._data)
    n = _prod(shape) if params.get("axis") is None else shape[params["axis"]]
    if n:
        result[0]._data.bounds = (0, n - 1)


def _sorted_positions(op, inputs, result):  # sort / topk: the values (a selection), the positions on the last axis
    n = _shape(inputs[0]._data)[-1] if inputs[0]._data.ndim else 1
    b = _entry(inputs[0])
    if type(b) is Columns:
        b = [b]  # (each row's entries reordered: no longer the array's rows)
    if b is not None:
        result[0]._data.bounds = b
    d = inputs[0]._data
    if op.name == "sort" and d.ndim == 1 and type(d) is Lazy and d.pad is not None:
        result[1]._data.bounds = Among(d.pad)  # (a selection's rows sorted among themselves: positions among them)
        return
    if n:
        result[1]._data.bounds = (0, n - 1)


def _counted(op, inputs, result):  # arange: integers from start by step (cond_take's positions)
    p = dict(op.params)
    start, step, num = p["start"], p["step"], p["num"]
    if result[0]._data.dtype.kind in "iu" and num and all(isinstance(v, (int, np.integer)) for v in (start, step)):
        last = start + step * (num - 1)
        lo, hi = limits(result[0]._data.dtype)
        if lo <= min(start, last) and max(start, last) <= hi:  # (else it wrapped)
            result[0]._data.bounds = (int(min(start, last)), int(max(start, last)))


_RANGE_RULES = dict.fromkeys(("getitem", "reshape", "transpose", "broadcast_to", "expand_dims", "squeeze", "flip",
                              "roll", "tile", "repeat", "copy", "detach", "gather"), _same_values)
_RANGE_RULES.update({"getitem": _picked, "floor_div": _divided, "mod": _divided})
_RANGE_RULES.update({"where": _either, "setitem": _written, "pad_setitem": _written, "pad_select": _rows_kept,
                     "full": _filled, "full_like": _filled, "add": _moved, "sub": _moved, "mul": _masked,
                     "arange": _counted})
_RANGE_RULES.update({"concat": _union, "stack": _union, "astype": _int_cast, "argmax": _positions,
                     "argmin": _positions, "sort": _sorted_positions, "topk": _sorted_positions})
