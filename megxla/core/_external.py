"""Which tensors hold values produced by a compiled executable ("external values"); jit marks them, and
``Tensor._is_external_value`` reads this (a core registry: core imports nothing above itself).

Keyed by ``id`` with a weak reference (Tensor's ``__eq__`` is elementwise, so it cannot key a WeakKeyDictionary);
the value id recorded at marking time makes a later in-place rebinding count as internal again.
"""
import bisect
import functools
import weakref

from . import _interrupt

_external: dict = {}


def mark_external(t):
    key = id(t)
    entry = _external.get(key)
    if entry is None or entry[0]() is not t:
        _external[key] = (weakref.ref(t, functools.partial(_unmark, key)), t._vid)
    else:
        _external[key] = (entry[0], t._vid)


@_interrupt.ignores_exceptions
def _unmark(key, _ref):
    _external.pop(key, None)


def unmark_external(t):
    """Count ``t``'s current value as internal again (the recording call of a trace: MegEngine's runs eagerly, so
    its results and state writes are not external values, only later calls' are).

    Example:
        >>> import megxla as mge
        >>> t = mge.Tensor([1.0]); mark_external(t); unmark_external(t); is_external(t)
        False
    """
    entry = _external.get(id(t))
    if entry is not None and entry[0]() is t:
        del _external[id(t)]


# Value ids produced by prepared compiled calls (jit/_fastpath.py), as blocks ``[lo, hi)``: a prepared call takes its
# written values' ids from one block of the id counter and records the block, instead of marking each tensor (a per-call
# cost proportional to the number of state tensors). Ids only grow, so the blocks are sorted; the oldest are dropped
# past a bound (a value kept unwritten for that many prepared calls then reads as internal).
_block_lo: list = []
_block_hi: list = []
_MAX_BLOCKS = 8192


def mark_external_vids(lo, hi):
    """Record that the values with ids ``lo <= vid < hi`` were produced by a compiled executable.

    Example:
        >>> import megxla as mge
        >>> t = mge.Tensor([1.0])
        >>> mark_external_vids(t._vid, t._vid + 1); is_external(t)
        True
    """
    if _block_lo and lo < _block_lo[-1]:  # (not in id order: keep the blocks sorted)
        i = bisect.bisect_right(_block_lo, lo)
        _block_lo.insert(i, lo)
        _block_hi.insert(i, hi)
    else:
        _block_lo.append(lo)
        _block_hi.append(hi)
    if len(_block_lo) > 2 * _MAX_BLOCKS:
        del _block_lo[:_MAX_BLOCKS], _block_hi[:_MAX_BLOCKS]


def _in_blocks(vid):
    i = bisect.bisect_right(_block_lo, vid) - 1
    return i >= 0 and vid < _block_hi[i]


def is_external(t) -> bool:
    entry = _external.get(id(t))
    if entry is not None and entry[0]() is t and entry[1] == t._vid:
        return True
    return bool(_block_lo) and _in_blocks(t._vid)
