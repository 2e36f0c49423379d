"""Index range checks computed inside auto-jit's clusters, where reading the index on the host would cut them.

Eagerly an integer index tensor is range-checked by reading its values (``core/_indexing.check_index_tensor``).
Under auto-jit an index still pending in the cluster -- labels a detector assigned on the device, masked by its
foreground (``t[fg, labels[fg] - 1] = 1``, ``indexing_one_hot(logp, label)``), whose range no known bound proves --
cut every step there: the read ran the cluster before it. MegEngine does not read: its kernels check on the device,
and its default asynchronous execution reports a failure at the next sync.

The first check at a line (``HELD_BEFORE``) is read on the host as eagerly: a program whose labels are wrong from
the start (a wrong number of classes) raises at that line. The clusters that read cuts are the first step's only:
they are not compiled at first sight (``reading_held``), as their keys never come again. Once it held there, the
check becomes ops of the cluster -- the number of entries out of range, a 0-d integer --, read as the cluster runs,
before any of its results reach a Tensor (guards, as a trace speculates on what it saw). A count that is not zero
fails the cluster as a failing op would: the ops before the check take effect (run op by op, as eagerly), the values after it never
exist, Tensors updated in place after it go back to their value before, and the index is checked on the host,
which raises eager's :class:`~megxla.core._indexing.IndexOutOfRange` with eager's text. Its traceback ends where
the cluster ran (the next read, as MegEngine's); a note names the line that issued the index, which is read on the
host from then on. A cluster holding such a check donates no input (the op-by-op run needs them) and its run waits
for the counts.

Example:
    >>> import numpy as np, megxla as mge, megxla.functional as F
    >>> from megxla.jit._autojit import clustered
    >>> x = mge.Tensor(np.arange(6, dtype="float32").reshape(2, 3))
    >>> def pick(shift):
    ...     k = F.abs(F.argmax(x, axis=1)) + shift  # (pending, no range known for it: checked)
    ...     return x[:, k]
    >>> with clustered():
    ...     for _ in range(HELD_BEFORE):
    ...         _ = pick(0).numpy()  # (read on the host: in range)
    ...     y = pick(1)  # (checked in the cluster)
    ...     try:
    ...         y.numpy()
    ...     except IndexError as e:
    ...         print(str(e))
    getitem: index 3 is out of range for axis 1 of size 3
"""
from __future__ import annotations

import linecache
import threading

import numpy as np

from ..core import _indexing
from ..core._dispatch import apply
from ..core._elemwise_front import BINARY
from ..core._lazy import Lazy
from ..core.ops import reduction as _R
from ._recording import describe_where, user_line

__all__ = ["HELD_BEFORE", "Check", "defer", "reading_held", "first_failed", "error_of"]

_SUM = _R.sum.bind(axis=None, keepdims=False)


# Checks a line makes on the host, held each time, before that line's are made in its clusters. One: each such read
# cuts the step, and the first steps' clusters it cut are compiled for nothing -- their keys end when the checks move
# inside (GFLv2's ATSS labels, 4 held steps on a cold cache: 73 s compiling the split forward and backward, then the
# whole step again)
HELD_BEFORE = 1
_reading = threading.local()  # .held: this thread reads a held check's index on the host now (reading_held)
# (file, line) -> how many checks held there on the host (-1: one failed -- read on the host from then on)
_held: dict = {}


def reading_held():
    """Whether the calling thread reads the index of a check still held at its line (the cut that read makes is
    not compiled at first sight, nor is the cluster after it: see ``_autojit._run_keyed``).

    Example:
        >>> reading_held()
        False
    """
    return getattr(_reading, "held", False)


class Check:
    """An index check collected into a cluster: ``at``, the number of the cluster's ops before it; ``bad``, the
    Tensor of the count of entries out of range; ``idx`` and the arguments of ``check_index_tensor``; ``site``,
    the user's line that issued it."""

    __slots__ = ("at", "bad", "idx", "args", "site")

    def __init__(self, at, bad, idx, args, site):
        self.at, self.bad, self.idx, self.args, self.site = at, bad, idx, args, site


def defer(cl, op, idx, dim, axis, allow_negative, what):
    """(Core's ``_lazy.DEFER_CHECK``, through the collector) Check pending ``idx`` -- on the host at a line whose
    checks have not held ``HELD_BEFORE`` times (raising eager's error), else inside cluster ``cl`` (a
    :class:`Check` appended to ``cl.checks``) -- and return True, or False where the caller is to read it."""
    site = user_line()
    held = _held.get(site, 0)
    if held < HELD_BEFORE:
        _reading.held = held >= 0  # (a line that failed is read for good: its cuts are the program's)
        try:
            _indexing.check_on_host(op, idx, dim, axis, allow_negative, what)
        except _indexing.IndexOutOfRange:
            _held[site] = -1
            raise
        finally:
            _reading.held = False
        if held >= 0:
            if len(_held) >= 4096:
                _held.clear()
            _held[site] = held + 1
        return True
    dtype = np.dtype(idx._data.dtype)
    if dtype.kind not in "iu":
        return False
    info = np.iinfo(dtype)
    lo = -dim if allow_negative else 0
    at, gen = len(cl.ops), cl.gen
    tests = []
    if lo > info.min:  # (an entry below the type's least value cannot be out of range: no test, no wrap-around)
        tests.append(BINARY["lt"](idx, lo))
    if dim <= info.max:
        tests.append(BINARY["ge"](idx, dim))
    if not tests:
        return True
    out = tests[0] if len(tests) == 1 else BINARY["or"](tests[0], tests[1])
    bad = apply(_SUM, out)
    d = bad._data
    if cl.gen != gen or type(d) is not Lazy or d.cluster is not cl or d.value is not None:
        return False  # (the cluster was cut meanwhile -- its size cap --: the index is concrete now, read it)
    cl.checks.append(Check(at, bad, idx, (op, dim, axis, allow_negative, what), site))
    return True


def first_failed(checks, count_of):
    """The first of ``checks`` (a cluster's) whose count of entries out of range is not zero, else None.
    ``count_of(lazy)``: the computed count (None: not computed)."""
    for c in checks:
        n = count_of(c.bad._data)
        if n is not None and int(n):
            return c
    return None


def error_of(check):
    """The error eager raises for ``check``'s index (now computed), with a note naming the line that issued it;
    that line's checks are read on the host from now on."""
    _held[check.site] = -1
    op, dim, axis, allow_negative, what = check.args
    try:
        _indexing.check_on_host(op, check.idx, dim, axis, allow_negative, what)
        err = _indexing.IndexOutOfRange(f"{op}: {what} out of range for axis {axis} of size {dim}")
    except _indexing.IndexOutOfRange as e:
        err = e
    fn, ln = check.site
    err.add_note(f"(auto-jit checked this index inside its cluster, not on the host, as its values had always been "
                 f"in range there: it was issued at {describe_where((fn, ln, linecache.getline(fn, ln).strip()))}, "
                 f"and its cluster ran here. That line's indices are read on the host from now on.)")
    return err
