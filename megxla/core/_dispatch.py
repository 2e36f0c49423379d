"""The one dispatch point: :func:`apply` is the only path from Tensors to computation.

Eager execution calls the op's cached ``jax.jit`` kernel. Two kinds of observers hook in here and nowhere
else: gradient recorders (``GradManager``, which append data records to their tape) and an interpreter
(``jit`` tracing / replaying), which may replace the eager computation altogether. A hand-built graph
(``utils.network.Network``, found through ``core._registry.GRAPH_BUILDER``) records the ops applied to its
variables, which are computed as any others.

Both are per thread: a GradManager recording or a trace being recorded in one thread does not see, or
change, the eager ops another thread runs at the same time.

NOTE: this is the eager hot path. The fast case (no interpreter and no recorder in any thread) is one test
of a module global (``_active``), then: unwrap, call kernel, wrap. Only when some thread has an observer
does a call read its thread's state (a ``threading.local`` lookup); keep it that way (see
benchmarks/eager_overhead.py).
"""
from __future__ import annotations

import itertools
import threading

import jax as _jax
import numpy as np

from . import _tensor as _tensor_module
from ._tensor import Tensor
from ._spmd import DeviceGrid, MeshRequired, SpmdFunction, raise_peer_failure as _raise_peer_failure
from .dtypes import LOGICAL as _LOGICAL, logical_node as _logical_node
from ._lazy import COLLECT as _COLLECT, FLUSH as _FLUSH
from ._registry import GRAPH_BUILDER as _GRAPH
from . import _interrupt
from ._interrupt import KERNEL_HELD as _KERNEL_HELD, unstick as _unstick
from _thread import get_ident as _get_ident

_Tracer = _jax.core.Tracer

__all__ = ["apply", "recorders", "OpError", "OutOfMemoryError", "push_interpreter", "pop_interpreter", "current_interpreter"]


class _State:
    __slots__ = ("interpreters", "recorders")

    def __init__(self):
        self.interpreters = [None]  # stack of interpreters (jit tracers); the top one handles every apply
        self.recorders = []  # active GradManagers of this thread, each with ``_record(op, inputs, outputs)``


class _ThreadState(threading.local):
    # NOTE: one threading.local lookup (``_tls.s``) per observed apply, then plain slot reads
    def __init__(self):
        self.s = _State()


_tls = _ThreadState()
# Number of interpreters pushed plus recorders active, over all threads: 0 means every thread is plain eager,
# which the hot path learns from one global read. Changed only under ``_lock``.
_active = 0
_lock = threading.Lock()
_new = object.__new__
_vids = itertools.count(1)


def _bump(n):
    global _active
    with _lock:
        _active += n


class _Recorders:
    """The calling thread's active gradient recorders (``GradManager``), list-like.

    ``append`` registers a recorder in the calling thread; ``remove`` takes it out of the thread that added it
    (a GradManager may be released from another thread than the one that started recording).
    """

    def __init__(self):
        self._owner = {}  # id(recorder) -> the thread list holding it

    def append(self, r):
        lst = _tls.s.recorders
        lst.append(r)
        self._owner[id(r)] = lst
        _bump(1)

    def remove(self, r):
        lst = self._owner.get(id(r), _tls.s.recorders)
        lst.remove(r)  # ValueError if absent, like list.remove
        if not any(x is r for x in lst):
            self._owner.pop(id(r), None)
        _bump(-1)

    def __iter__(self):
        return iter(list(_tls.s.recorders) if _active else ())

    def __len__(self):
        return len(_tls.s.recorders) if _active else 0

    def __bool__(self):
        return bool(_active) and bool(_tls.s.recorders)

    def __contains__(self, r):
        return any(x is r for x in _tls.s.recorders)

    def __repr__(self):
        return f"recorders({_tls.s.recorders!r})"


recorders = _Recorders()


class OpError(ValueError, RuntimeError):
    """Bad input to an op: raised before anything is computed or mutated, naming the op, shapes and dtypes.

    A ValueError (Python's convention) and a RuntimeError (what MegEngine raises for a bad op, so
    ``except RuntimeError`` in MegEngine code catches it)."""


class AssertedOpError(OpError, AssertionError):
    """A bad argument MegEngine's Python checks with ``assert`` (a reduction's axis out of range or repeated):
    MegEngine code may catch the ``AssertionError``, megxla's code the ``OpError``."""


class ConversionError(OpError, TypeError):
    """Data that is no array of numbers (a string, an arbitrary object, a ragged list; ``None`` as an op's operand)
    given where a tensor is made. MegEngine raises a RuntimeError for ``Tensor(...)`` / ``set_value`` / ``x + "a"``,
    a ValueError for ``F.relu("a")``: this is both, and a TypeError (Python's convention)."""


class OutOfMemoryError(OpError, MemoryError):
    """An op's output would not fit in the device's memory (or its size overflows): raised before XLA runs."""


def _describe(inputs):
    return ", ".join(f"{tuple(t.shape)}:{np.dtype(t.dtype).name}" for t in inputs)


def op_error(op, inputs, exc):
    if isinstance(exc, OpError):  # already names the op (e.g. the output-size check of core/_op.py)
        return exc
    msg = str(exc).strip().split("\n")[0]
    return OpError(f"{op!r}: invalid inputs ({_describe(inputs)}): {type(exc).__name__}: {msg}")


def wrap(data):
    """A new Tensor holding the jax array ``data`` (internal fast constructor)."""
    t = _new(Tensor)
    t._data = data
    t._vid = next(_vids)
    t._grad = None
    t._name = None
    return t


def _compute(op, inputs):
    """The op's eager kernel on ``inputs``: a tuple of new Tensors (bad input raises an OpError naming it).

    Under auto-jit (``_COLLECT``) the op is collected into the pending cluster instead (Tensors with ``Lazy``
    data come back), unless the collector decides it runs now (it then hands back the concrete input arrays)."""
    collect = _COLLECT[0]
    arrays = None
    if collect is not None:
        out = collect(op, inputs)
        if out is not None:
            if type(out) is tuple:
                return out
            arrays = out  # (a list: the concrete input arrays; pending values of another thread's cluster)
    return run_kernel(op, inputs, arrays)


def run_kernel(op, inputs, arrays=None):
    """``op``'s eager kernel on Tensors ``inputs`` (their ``arrays``, where given): a tuple of new Tensors; bad
    input raises an OpError naming the op, an allocation XLA refuses an OutOfMemoryError."""
    try:  # (a first call's trace holds signals until it returns, the finally below: core/_interrupt.py)
        out = op.kernel(*([t._data for t in inputs] if arrays is None else arrays))
    except RecursionError as exc:
        if not _unstick(exc):
            raise
        out = op.kernel(*([t._data for t in inputs] if arrays is None else arrays))  # (JAX's caches cleared)
    except (TypeError, ValueError, IndexError) as exc:
        raise op_error(op, inputs, exc) from None
    except MeshRequired as exc:  # a cross-process collective (or its gradient): compile the SPMD form once
        # (kept on the op too: a kernel worker that made the op's plain kernel meanwhile may have put it back, and a
        # second SpmdFunction would compile its program again on this rank only -- each compile of a cross-process
        # program is numbered, and the ranks then wait for each other's programs, see jit/_kernels_ahead.py)
        spmd = op._spmd
        if spmd is None or not _same_devices(spmd.devices, exc.devices):
            spmd = op._spmd = SpmdFunction(op.fn, exc.devices, name=op.name)
        op._kernel = spmd
        out = spmd(*([t._data for t in inputs] if arrays is None else arrays))
    except RuntimeError as exc:  # XLA's allocator: an output that passed the size check but not the free memory
        if "RESOURCE_EXHAUSTED" not in str(exc):
            _raise_peer_failure(exc)  # (or an input a failed collective computed: name the rank that failed)
            raise
        raise OutOfMemoryError(f"{op!r}: out of device memory for inputs ({_describe(inputs)}): "
                               f"{str(exc).strip().splitlines()[0]}") from None
    finally:
        if _KERNEL_HELD[0] and _get_ident() == _interrupt._MAIN:
            _interrupt.release_kernel_trace()  # (raises KeyboardInterrupt for a Ctrl-C that arrived meanwhile)
    if isinstance((out[0] if out else None) if op.multiple_results else out, _Tracer):
        out = _outside_foreign_trace(op, inputs, arrays, out)
    if op.multiple_results:
        return tuple(wrap(o) for o in out)
    return (wrap(out),)


_interrupt.KERNEL_CALLERS.add(run_kernel.__code__)


def _same_devices(have, devices):
    """Whether an SpmdFunction's ``have`` are ``devices`` (a list, a tuple or a DeviceGrid: the same grid too)."""
    if isinstance(devices, DeviceGrid) or isinstance(have, DeviceGrid):
        return type(have) is type(devices) and have == devices
    return have == tuple(devices)


def _outside_foreign_trace(op, inputs, arrays, out):
    """The kernel's results computed now where a JAX trace not ours staged them: ``out`` holds tracers although
    every input is concrete. That happens when Python runs user code in the middle of JAX tracing one of our
    kernels -- a ``__del__`` or weak-reference callback of the garbage collector, which may run at any
    allocation -- so its ops landed in the kernel's jaxpr and its tensors could never be read
    (``UnreadableTensorError`` in the ``__del__``). Tracer inputs (a trace of ours) keep ``out``."""
    arrays = [t._data for t in inputs] if arrays is None else arrays
    if any(isinstance(a, _Tracer) for a in arrays):
        return out
    with _jax.ensure_compile_time_eval():  # (eager evaluation whatever trace the thread is in)
        return op.kernel(*arrays)


def pass_node(inputs, outputs):
    """Give op results the logical device of their inputs (the first that has one; an op without inputs, a
    creation op, the default device's), as MegEngine's results keep their inputs' comp node: ``x.to("cpu0") + 1``
    shows ``device=cpu0:0``. Only called once some tensor may have a logical device (``dtypes.LOGICAL``)."""
    node = None
    for t in inputs:
        node = getattr(t, "_lnode", None)
        if node is not None:
            break
    if not inputs:
        node = _logical_node(None)
    if node is not None:
        for o in outputs:
            o._lnode = node


def eager_apply(op, inputs):
    """Compute ``op`` on ``inputs`` now and notify the calling thread's gradient recorders."""
    outputs = _compute(op, inputs)  # (logical device names are passed on by apply, which calls this)
    if _active:
        for r in _tls.s.recorders:
            r._record(op, inputs, outputs)
    return outputs


def apply(op, *inputs):
    """Apply ``op`` to Tensors; returns a Tensor, or a tuple of Tensors for multi-result ops.

    Where some inputs are variables of a hand-built graph (``utils.network.Network``), the op is computed as ever
    and the graph records it: its outputs become variables of that graph (``core._registry.GRAPH_BUILDER``)."""
    graph = _GRAPH[0](op, inputs) if _GRAPH[0] is not None else None  # (first: two graphs' inputs raise here)
    if _active:  # some thread has an observer: look at this thread's
        st = _tls.s
        interp = st.interpreters[-1]
        if interp is not None:
            outputs = interp.apply(op, inputs)
        else:
            outputs = _compute(op, inputs)
            for r in st.recorders:
                r._record(op, inputs, outputs)
    else:
        outputs = _compute(op, inputs)
    if _LOGICAL[0]:  # (a list cell read: free until some tensor has a logical device of its own)
        pass_node(inputs, outputs)
    if graph is not None:
        graph._applied(op, inputs, outputs)
    return outputs if op.multiple_results else outputs[0]


def push_interpreter(interp):
    """Make ``interp`` handle every ``apply`` of the calling thread until :func:`pop_interpreter`."""
    if _FLUSH[0] is not None:  # an auto-jit cluster pending: interpreters see concrete values only
        _FLUSH[0]()
    _tls.s.interpreters.append(interp)
    _bump(1)


def pop_interpreter():
    """Remove and return the calling thread's innermost interpreter."""
    interp = _tls.s.interpreters.pop()
    _bump(-1)
    return interp


def current_interpreter():
    """The calling thread's innermost interpreter, or None when it runs eagerly."""
    return _tls.s.interpreters[-1] if _active else None


_tensor_module._current_interpreter = current_interpreter  # (Tensor._value's, see there)
