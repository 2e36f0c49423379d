"""MegEngine's indexing op descriptors (``Subtensor``, ``IndexingSetMultiAxisVec``, ``MeshIndexing``...,
``IndexingOneHot``) as fronts onto ``Tensor`` indexing (:mod:`megxla.core._indexing`): each decodes its ``items``
into a Python index and calls the same getitem / setitem / incritem that ``x[...]`` uses, with its range checks.
Re-exported by :mod:`megxla.core.ops.builtin`.

An item is ``(axis, begin, end, step, idx)``, MegEngine's encoding: ``idx`` True takes the next input as the index
of ``axis``; otherwise the flagged ``begin``, ``end``, ``step`` take the next inputs, in that order, as the slice
bounds of ``axis`` (``Subtensor``'s ``slice_items`` may give them as ints instead). Axes without an item are kept
whole. The families differ in what an index is:

- ``Subtensor``: one integer per indexed axis (the axis is removed), as ``x[1, 0:4:2]``;
- ``IndexingMultiAxisVec``: integer vectors broadcast together, NumPy's advanced indexing, as ``x[[0, 2], :]``;
- ``MeshIndexing``: each vector indexes its own axis (the outer product, NumPy's ``x[np.ix_(a, b)]``);
- ``BatchedMeshIndexing``: as ``MeshIndexing`` with one row of indices per entry of axis 0 (vectors ``(B, n)``).

The ``Set`` variants write a value there, the ``Incr`` variants add it (an index repeated adds each of its values).

Example:
    >>> import megxla as mge
    >>> from megxla.core._imperative_rt.core2 import apply
    >>> x = mge.Tensor(np.arange(6, dtype="int32").reshape(2, 3))
    >>> (y,) = apply(MeshIndexing([(0, False, False, False, True), (1, False, False, False, True)]), x,
    ...              mge.Tensor([1, 0]), mge.Tensor([2, 2]))
    >>> y.numpy()
    array([[5, 5],
           [2, 2]], dtype=int32)
"""
from __future__ import annotations

import numpy as np

from .._tensor import Tensor
from .._dispatch import apply as _apply, OpError
from .. import _indexing
from . import indexing as _I, shape as _S
from .builtin import OpDef, _norm_items

__all__ = ["Subtensor", "SetSubtensor", "IncrSubtensor", "IndexingSetMultiAxisVec", "IndexingIncrMultiAxisVec",
           "MeshIndexing", "SetMeshIndexing", "IncrMeshIndexing", "BatchedMeshIndexing", "BatchedSetMeshIndexing",
           "BatchedIncrMeshIndexing", "IndexingOneHot", "IndexingSetOneHot"]


def _host_int(op, v, what):
    if isinstance(v, Tensor):
        if v.size != 1 or v.dtype.kind not in "iu":
            raise OpError(f"{op!r}: the {what} must be one integer, got a {v.dtype} tensor of shape {v.shape}")
        v = v.item()
    return int(v)


class _ItemsOp(OpDef):
    """The indexing descriptors' common part: inputs ``(x, *index tensors)`` (``(x, value, *index tensors)`` for
    the ``Set`` / ``Incr`` variants). Each family gives ``_index(x, by_axis)``: the Python index of ``x`` its decoded
    items make."""

    _params = ("items",)
    _nin = (1, 1 << 30)
    _write = None  # None (read), "set" or "incr"

    def __init__(self, items=(), **params):
        super().__init__(items=_norm_items(type(self).__name__, items), **params)

    def _decode(self, x, rest):
        """``{axis: ("s", slice) or ("i", index)}`` from the items and the index inputs ``rest`` (consumed)."""
        by_axis = {}
        fixed = getattr(self, "slice_items", None) or ()
        if fixed and len(fixed) != len(self.items):
            raise OpError(f"{self!r}: {len(fixed)} slice_items for {len(self.items)} items")
        for n, (axis, *flags) in enumerate(self.items):
            if not -x.ndim <= axis < x.ndim:
                raise OpError(f"{self!r}: axis {axis} is out of range for an input of shape {x.shape}")
            ax = axis % x.ndim
            if ax in by_axis:
                raise OpError(f"{self!r}: axis {axis} is indexed twice")
            vals = []
            for k, flag in enumerate(flags):
                if not flag or (flags[3] and k < 3):  # (an index makes MegEngine ignore the slice flags)
                    vals.append(None)
                elif fixed:
                    vals.append(int(fixed[n][k]))
                elif rest:
                    vals.append(rest.pop(0))
                else:
                    raise OpError(f"{self!r}: too few input tensors for the items")
            if flags[3]:
                by_axis[ax] = ("i", vals[3])
            elif all(v is None for v in vals[:3]):
                raise OpError(f"{self!r}: the item of axis {axis} has no begin, end, step or index")
            else:
                b, e, s = (None if v is None else _host_int(self, v, "slice bound") for v in vals[:3])
                if s == 0:
                    raise OpError(f"{self!r}: the slice step of axis {axis} is 0")
                by_axis[ax] = ("s", slice(b, e, s))
        if rest:
            raise OpError(f"{self!r}: {len(rest)} input tensor(s) more than the items use")
        return by_axis

    def _apply(self, inputs):
        self._check(inputs)
        x = inputs[0]
        nval = 1 if self._write else 0
        if len(inputs) < 1 + nval:
            raise OpError(f"{self!r}: expected the input and the value, got {len(inputs)} tensor(s)")
        value = inputs[1] if nval else None
        index = self._index(x, self._decode(x, list(inputs[1 + nval:])))
        if self._write is None:
            return (_indexing.getitem(x, index) if index else _apply(_S.copy.bind(), x),)
        if self._write == "set":
            return (_indexing.setitem(x, index, value),)
        return (_indexing.incritem(x, index, value),)


def _axes(by_axis, kinds):
    """The index of axes 0 to the last indexed one: ``kinds[kind](axis, payload)`` of each item, a full slice
    for an axis without one."""
    return tuple(kinds[by_axis[a][0]](a, by_axis[a][1]) if a in by_axis else slice(None)
                 for a in range(max(by_axis, default=-1) + 1))


# ---- Subtensor: integers and slices ---------------------------------------------------------------------------
class _SubtensorBase(_ItemsOp):
    _params = ("items", "slice_items")

    def __init__(self, items=(), slice_items=(), **params):
        super().__init__(items=items, slice_items=tuple(tuple(int(v) for v in s) for s in slice_items), **params)

    def _index(self, x, by_axis):
        def one(a, i):
            if isinstance(i, Tensor):
                if i.size != 1 or i.dtype.kind not in "iu":
                    raise OpError(f"{self!r}: the index of axis {a} must be one integer, got a {i.dtype} tensor of "
                                  f"shape {i.shape}")
                # (a 0-d index tensor indexes as the int, its axis removed)
                return _apply(_S.reshape.bind(shape=()), i) if i.ndim else i
            return int(i)
        return _axes(by_axis, {"s": lambda a, s: s, "i": one})


class Subtensor(_SubtensorBase):
    """``x[items]`` with integer indices and slices (MegEngine's basic indexing op).

    Example:
        >>> x = Tensor(np.arange(12, dtype="int32").reshape(3, 4))
        >>> Subtensor([(0, True, False, True, False), (1, False, False, False, True)])._apply(
        ...     (x, Tensor(1), Tensor(-1), Tensor(2)))[0].numpy()
        array([6, 2], dtype=int32)
    """


class SetSubtensor(_SubtensorBase):
    """``x`` with ``value`` written at ``x[items]`` (inputs ``(x, value, *index tensors)``).

    Example:
        >>> SetSubtensor([(0, False, False, False, True)])._apply((Tensor([1, 2, 3]), Tensor(9), Tensor(1)))[0]
        Tensor([1 9 3], dtype=int32, device=xpux:0)
    """

    _write = "set"


class IncrSubtensor(_SubtensorBase):
    """``x`` with ``value`` added at ``x[items]`` (inputs ``(x, value, *index tensors)``).

    Example:
        >>> IncrSubtensor([(0, False, False, False, True)])._apply((Tensor([1, 2, 3]), Tensor(9), Tensor(1)))[0]
        Tensor([ 1 11  3], dtype=int32, device=xpux:0)
    """

    _write = "incr"


# ---- IndexingMultiAxisVec's Set / Incr: NumPy's advanced indexing -----------------------------------------------
class _MultiAxisVecBase(_ItemsOp):
    def _index(self, x, by_axis):
        return _axes(by_axis, {"s": lambda a, s: s, "i": lambda a, t: t})


class IndexingSetMultiAxisVec(_MultiAxisVecBase):
    """``x`` with ``value`` written at ``x[items]``, integer vectors indexing as NumPy's advanced indexing
    (inputs ``(x, value, *index tensors)``; an index repeated: the last write wins).

    Example:
        >>> IndexingSetMultiAxisVec([(0, False, False, False, True)])._apply(
        ...     (Tensor([1, 2, 3]), Tensor([8, 9]), Tensor([2, 0])))[0]
        Tensor([9 2 8], dtype=int32, device=xpux:0)
    """

    _write = "set"


class IndexingIncrMultiAxisVec(_MultiAxisVecBase):
    """``x`` with ``value`` added at ``x[items]``, integer vectors indexing as NumPy's advanced indexing
    (inputs ``(x, value, *index tensors)``; an index repeated adds each of its values).

    Example:
        >>> IndexingIncrMultiAxisVec([(0, False, False, False, True)])._apply(
        ...     (Tensor([1, 2, 3]), Tensor([8, 9]), Tensor([1, 1])))[0]
        Tensor([ 1 19  3], dtype=int32, device=xpux:0)
    """

    _write = "incr"


# ---- MeshIndexing: one vector per axis, their outer product ------------------------------------------------------
class _MeshBase(_ItemsOp):
    _batched = False

    def _index(self, x, by_axis):
        # Every axis up to the last indexed one gets an index array shaped to its own place among them (NumPy's
        # ``np.ix_``; a slice becomes the host array of its positions), so the arrays broadcast to the mesh and the
        # result keeps the axes' order; BatchedMeshIndexing adds axis 0's positions, each vector's rows following it.
        last = max(by_axis, default=-1)
        if last < 0:
            return ()
        if self._batched and 0 in by_axis:
            raise OpError(f"{self!r}: axis 0 is the batch axis; its items must index axes 1 and up")
        nd = last + 1

        def placed(a, n):  # the shape putting n entries at axis a
            return tuple(n if d == a else 1 for d in range(nd))

        def positions(a, s):
            return np.arange(x.shape[a], dtype=np.int32)[s].reshape(placed(a, -1))

        def vector(a, t):
            if not isinstance(t, Tensor) or t.dtype.kind not in "iu":
                raise OpError(f"{self!r}: the index of axis {a} must be an integer tensor, got {t!r}")
            want = 2 if self._batched else 1
            if t.ndim != want or (self._batched and t.shape[0] != x.shape[0]):
                raise OpError(f"{self!r}: the index of axis {a} must be "
                              + (f"of shape ({x.shape[0]}, n) (one row per batch entry)" if self._batched
                                 else "a vector") + f", got shape {t.shape}")
            shape = placed(a, t.shape[-1])
            if self._batched:
                shape = (x.shape[0],) + shape[1:]
            return _apply(_S.reshape.bind(shape=shape), t)

        index = list(_axes(by_axis, {"s": positions, "i": vector}))
        for a in range(nd):
            if a not in by_axis:
                index[a] = positions(a, slice(None))
        return tuple(index)


class MeshIndexing(_MeshBase):
    """``x`` indexed by one integer vector (or slice) per axis, their outer product: NumPy's
    ``x[np.ix_(a, b)]``.

    Example:
        >>> x = Tensor(np.arange(12, dtype="int32").reshape(3, 4))
        >>> MeshIndexing([(0, False, False, False, True), (1, False, False, False, True)])._apply(
        ...     (x, Tensor([0, 2]), Tensor([1, 3])))[0].numpy()
        array([[ 1,  3],
               [ 9, 11]], dtype=int32)
    """


class SetMeshIndexing(_MeshBase):
    """``x`` with ``value`` written at :class:`MeshIndexing`'s positions (inputs ``(x, value, *index tensors)``).

    Example:
        >>> SetMeshIndexing([(0, False, False, False, True)])._apply(
        ...     (Tensor([1, 2, 3]), Tensor([8, 9]), Tensor([2, 0])))[0]
        Tensor([9 2 8], dtype=int32, device=xpux:0)
    """

    _write = "set"


class IncrMeshIndexing(_MeshBase):
    """``x`` with ``value`` added at :class:`MeshIndexing`'s positions (an index repeated adds each value).

    Example:
        >>> IncrMeshIndexing([(0, False, False, False, True)])._apply(
        ...     (Tensor([1, 2, 3]), Tensor([8, 9]), Tensor([1, 1])))[0]
        Tensor([ 1 19  3], dtype=int32, device=xpux:0)
    """

    _write = "incr"


class BatchedMeshIndexing(_MeshBase):
    """:class:`MeshIndexing` with its own indices for each entry of axis 0: each index is ``(B, n)``, row ``i``
    indexing ``x[i]``.

    Example:
        >>> x = Tensor(np.arange(8, dtype="int32").reshape(2, 4))
        >>> BatchedMeshIndexing([(1, False, False, False, True)])._apply((x, Tensor([[0, 3], [1, 1]])))[0].numpy()
        array([[0, 3],
               [5, 5]], dtype=int32)
    """

    _batched = True


class BatchedSetMeshIndexing(_MeshBase):
    """``x`` with ``value`` written at :class:`BatchedMeshIndexing`'s positions.

    Example:
        >>> BatchedSetMeshIndexing([(1, False, False, False, True)])._apply(
        ...     (Tensor([[0, 0], [0, 0]]), Tensor([[7], [8]]), Tensor([[1], [0]])))[0].numpy()
        array([[0, 7],
               [8, 0]], dtype=int32)
    """

    _batched = True
    _write = "set"


class BatchedIncrMeshIndexing(_MeshBase):
    """``x`` with ``value`` added at :class:`BatchedMeshIndexing`'s positions.

    Example:
        >>> BatchedIncrMeshIndexing([(1, False, False, False, True)])._apply(
        ...     (Tensor([[1, 1], [1, 1]]), Tensor([[7, 7], [8, 8]]), Tensor([[1, 1], [0, 0]])))[0].numpy()
        array([[ 1, 15],
               [17,  1]], dtype=int32)
    """

    _batched = True
    _write = "incr"


# ---- one-hot: one index per row of an axis ----------------------------------------------------------------------
class _OneHotBase(OpDef):
    _params = ("axis", "ndim")
    axis = 0

    def _checked(self, x, index):
        if not -x.ndim <= self.axis < x.ndim:
            raise OpError(f"{self!r}: axis {self.axis} is out of range for an input of shape {x.shape}")
        axis = self.axis % x.ndim
        want = x.shape[:axis] + x.shape[axis + 1:]
        if not isinstance(index, Tensor) or index.dtype.kind not in "iu" or index.shape != want:
            raise OpError(f"{self!r}: the index must be an integer tensor of shape {want} (the input's {x.shape} "
                          f"less axis {axis}), got {getattr(index, 'dtype', type(index).__name__)} "
                          f"{getattr(index, 'shape', '')}")
        _indexing.check_index_tensor(type(self).__name__, index, x.shape[axis], axis, allow_negative=False)
        return axis


class IndexingOneHot(_OneHotBase):
    """``x``'s entry at ``index`` along ``axis`` for each position of the other axes (inputs ``(x, index)``); the
    result keeps ``axis`` with size 1.

    Example:
        >>> IndexingOneHot(axis=1)._apply((Tensor([[1, 2], [3, 4]]), Tensor([1, 0])))[0].numpy()
        array([[2],
               [3]], dtype=int32)
    """

    _nin = (2, 2)

    def _apply(self, inputs):
        self._check(inputs)
        x, index = inputs
        axis = self._checked(x, index)
        return (_apply(_I.indexing_one_hot.bind(axis=axis, keepdims=True), x, index),)


class IndexingSetOneHot(_OneHotBase):
    """``x`` with ``value`` (``x``'s shape with size 1 at ``axis``) written at ``index`` along ``axis`` (inputs
    ``(x, index, value)``).

    Example:
        >>> IndexingSetOneHot(axis=1)._apply((Tensor([[1, 2], [3, 4]]), Tensor([1, 0]), Tensor([[0], [0]])))[0]
        Tensor([[1 0]
         [0 4]], dtype=int32, device=xpux:0)
    """

    _nin = (3, 3)

    def _apply(self, inputs):
        self._check(inputs)
        x, index, value = inputs
        axis = self._checked(x, index)
        want = x.shape[:axis] + (1,) + x.shape[axis + 1:]
        if value.shape != want:
            raise OpError(f"{self!r}: the value must have shape {want} (the input's {x.shape} with size 1 at axis "
                          f"{axis}), got {value.shape}")
        index = _apply(_S.expand_dims.bind(axis=(axis,)), index)
        return (_apply(_I.scatter.bind(axis=axis), x, index, value),)
