"""Ctrl-C (SIGINT) deferred across a compiled call: the executable runs and its state is written back, or neither;
and across an optimizer's rebinding of its parameters and slots (all of them take the step, or none).

A compiled step donates its state buffers to the executable. A ``KeyboardInterrupt`` raised while JAX calls it
(Python runs inside that call: the signal's handler runs at the next bytecode) used to drop the outputs after the
inputs were deleted, leaving parameters and optimizer slots on deleted buffers ("Array has been deleted"). Calls
wrapped by :func:`enter` / :func:`leave` hold a SIGINT that arrives meanwhile and deliver it (to the handler that
was installed: Python's raises ``KeyboardInterrupt``) right after the write-back, so an interrupted step is either
fully applied or not at all. An eager (or auto-jit) ``opt.step()`` rebinds each parameter and slot in turn to the
update op's results: a Ctrl-C between two of those rebindings left some layers stepped and others not, and Adam's
moments of half the parameters a step ahead (a checkpoint saved in ``except KeyboardInterrupt`` kept that); the
optimizer holds it the same way (in core: optimizer and jit both use it).

How: a Python handler for SIGINT is installed once, in the main thread (the only one Python runs signal handlers
in), wrapping whichever Python handler was there; outside a compiled call it passes the signal straight on.
Installing it per call would cost two ``sigaction`` calls (~0.8 µs); this costs a thread check, a handler check
(``_signal.getsignal``, not ``signal.getsignal``, which costs 1.6 µs converting to an enum) and two global writes:
about 0.2 µs per call. A handler installed by the program later is wrapped again on the next compiled call, by a
new wrapper: each wrapper passes signals to the handler it replaced, so a program that puts back the handler it
had saved (ours, from before its own) gets the one that was there before again -- with one wrapper for all, the
program's temporary handler kept receiving every later Ctrl-C, and none raised ``KeyboardInterrupt``.
``SIG_DFL`` / ``SIG_IGN`` (no Python handler) are left alone.

Every other signal with a Python handler is held the same way where a call asks for it (``enter(scan=True)``, the
default: a compiled call's, a cluster's, an optimizer step's write-back): a handler raising ``SystemExit`` on
SIGTERM (save and quit), a ``TimeoutError`` from a SIGALRM watchdog or ``DataLoader(timeout=...)``'s alarm raised
right after an auto-jit cluster's executable had taken its donated inputs lost every parameter and slot of the
model, where eager execution kept them; one raised during a cluster's compilation was taken for an XLA failure and
lost. The scan (one ``getsignal`` for each of the signals whose handlers stop a program, ~0.6 µs) wraps each such
handler once; an op collected into an auto-jit cluster (``scan=False``, once per op) checks only the signals a scan
has seen a handler for.
"""
from __future__ import annotations

import _signal
import _thread
import os
import sys
import threading

_SIGINT = _signal.SIGINT
_MAIN = threading.main_thread().ident
_get_ident = _thread.get_ident
_getsignal = _signal.getsignal
_getframe = sys._getframe
# the signals whose Python handlers stop a program by raising (save and quit on SIGTERM, a watchdog's alarm...):
# looked at on each scan. (SIGCHLD, SIGWINCH, SIGPROF handlers note and go on; all 29 standard ones cost 1.7 us)
_SIGNALS = tuple(getattr(_signal, name) for name in ("SIGINT", "SIGTERM", "SIGALRM", "SIGVTALRM", "SIGHUP",
                                                      "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGXCPU", "SIGABRT")
                 if hasattr(_signal, name))

_deferring = False  # the main thread is inside a compiled call (set and read in the main thread only)
_pending = None  # {signum: frame} of the signals held until the call's write-back is done, or None


def _after_fork():
    # a process forked from another thread runs Python's signal handlers in that thread (its new main thread)
    global _MAIN, _deferring, _pending
    _MAIN, _deferring, _pending = _get_ident(), False, None


os.register_at_fork(after_in_child=_after_fork)


class _Holder:
    """Our SIGINT handler: holds a signal while a call defers them, else passes it to ``wrapped``, the handler it
    replaced."""

    __slots__ = ("wrapped",)

    def __init__(self, wrapped):
        self.wrapped = wrapped

    def __call__(self, signum, frame):
        global _pending
        if _deferring:
            if _pending is None:
                _pending = {}
            _pending.setdefault(signum, frame)
            return
        if _swallowed_at(frame):
            # Python ignores an exception raised in a garbage-collection callback or a ``__del__`` ("Exception
            # ignored in ..."): a KeyboardInterrupt raised there was lost (JAX's ``_xla_gc_callback`` runs at every
            # collection; 1 in ~600 random Ctrl-Cs of a training loop met it). The signal is sent again in a
            # moment, when the main thread is out of it.
            threading.Timer(0.002, _signal.raise_signal, (signum,)).start()
            return
        self.wrapped(signum, frame)


_SWALLOWING = frozenset(("_xla_gc_callback", "__del__"))
# Code Python runs ignoring its exceptions, known by its code object: weak references' callbacks and finalizers
# (megxla's register with :func:`ignores_exceptions`; the standard library's weak containers' and ``finalize``'s
# below). A Ctrl-C raised in one was lost -- 194 of 3,000 in a loop making and dropping small label tensors (probe X),
# their host-copy entry's callback -- and the callback's work left undone (the entry leaked).
_SWALLOWING_CODES = set()


def ignores_exceptions(fn):
    """Register ``fn`` -- a weak reference's callback, a finalizer: code Python runs ignoring its exceptions -- so
    that a signal arriving while it runs is sent again once it has returned instead of raising inside it; ``fn``.

    Example:
        >>> @ignores_exceptions
        ... def _forget(key, ref):
        ...     pass
        >>> _forget.__code__ in _SWALLOWING_CODES
        True
    """
    _SWALLOWING_CODES.add(fn.__code__)
    return fn


def _register_weak_containers():
    import types
    import weakref
    _SWALLOWING_CODES.add(weakref.finalize.__call__.__code__)
    for cls in (weakref.WeakValueDictionary, weakref.WeakKeyDictionary, weakref.WeakSet):
        for const in cls.__init__.__code__.co_consts:
            if isinstance(const, types.CodeType):  # (their ``remove`` / ``_remove`` callbacks, closures of __init__)
                _SWALLOWING_CODES.add(const)


_register_weak_containers()


def _swallowed_at(frame, depth=8):
    """Whether ``frame`` (or one of its callers close by) runs where Python ignores exceptions."""
    while frame is not None and depth:
        code = frame.f_code
        if code in _SWALLOWING_CODES or code.co_name in _SWALLOWING:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


def _unraisable(hook):
    """``sys.unraisablehook`` wrapping ``hook``: a ``KeyboardInterrupt`` Python ignored (raised in a callback or
    finalizer not registered above -- a library's) is not lost but delivered again in a moment; anything else goes
    to ``hook``."""
    def unraisable(u):
        if u.exc_type is KeyboardInterrupt and _get_ident() == _MAIN:
            threading.Timer(0.002, _signal.raise_signal, (_SIGINT,)).start()
            return
        hook(u)
    unraisable.wrapped = hook
    # (a signal sent again lands where it may: in another such callback, or in this hook -- sent again from there too)
    _SWALLOWING_CODES.add(unraisable.__code__)
    return unraisable


_watched = (_SIGINT,)  # the signals a scan has found a Python handler for, at some time


_UNWRAPPABLE = {int, _Holder, type(None)}  # (SIG_DFL / SIG_IGN, ours, not installed from Python)


def _wrap(signals):
    """Wrap the Python handlers of ``signals`` not wrapped yet (a program's SIGTERM or SIGALRM handler)."""
    global _watched
    if _UNWRAPPABLE.issuperset(map(type, map(_getsignal, signals))):
        return  # (the common case, looked at in C: ~0.6 us)
    for signum in signals:
        handler = _getsignal(signum)
        if type(handler) is not _Holder and callable(handler):
            _signal.signal(signum, _Holder(handler))
            if signum not in _watched:
                _watched += (signum,)


def _install():
    """Wrap SIGINT's Python handler; whether it has one (SIG_DFL / SIG_IGN: nothing runs between bytecodes)."""
    _wrap((_SIGINT,))
    return type(_getsignal(_SIGINT)) is _Holder


def enter(scan=True):
    """Start holding SIGINT and every other signal with a Python handler (``scan=False``: only those signals a scan
    has found a handler for before -- a handler installed there again since, as ``DataLoader(timeout=...)``
    installs its alarm's on every batch, is wrapped --, one or two ``getsignal`` calls, not ten); returns whether this
    call must :func:`leave` (False: not the main thread, or already inside a deferred call).

    Call it inside the ``try`` whose ``finally`` calls :func:`leave` when it returned True: once it has set the
    flag no signal handler runs (nothing raises ``KeyboardInterrupt``) until :func:`leave`, and before that nothing
    has been deferred."""
    global _deferring
    if _deferring or _get_ident() != _MAIN:
        return False
    if scan:
        _wrap(_SIGNALS)
    elif type(_getsignal(_SIGINT)) is not _Holder or len(_watched) > 1:
        _wrap(_watched)
    _deferring = True
    return True


def leave():
    """Stop holding signals and deliver those that arrived meanwhile: the first to its handler here (raising
    ``KeyboardInterrupt`` here with Python's handler for SIGINT), any other sent again, for its handler to run at
    the next bytecode."""
    global _deferring, _pending
    _deferring = False
    pending = _pending
    if pending is not None:
        _pending = None
        (signum, frame), *others = pending.items()
        for other, _ in others:
            _signal.raise_signal(other)
        handler = _getsignal(signum)
        if type(handler) is _Holder:
            handler = handler.wrapped
        if callable(handler):
            handler(signum, frame)


def pending():
    """Whether a signal arrived while signals were held (inside :func:`enter` ... :func:`leave`) and waits for
    :func:`leave` to deliver it: a wait that can be given up -- a compilation nothing depends on yet -- asks, so
    that a Ctrl-C is answered at once rather than when the wait ends.

    Example:
        >>> pending()
        False
    """
    return _pending is not None


def rebind(pairs, scan=False):
    """Rebind each tensor of ``pairs`` (``(tensor, new_value)``) with signals held: a state made of several tensors
    (BatchNorm's running mean and variance, a loss scaler's scale and tracker, a loaded state dict) takes its new
    values all together, or -- a Ctrl-C before the first -- none of them; a ``KeyboardInterrupt`` between two of
    them left a layer with a new mean and an old variance. ``scan``: as :func:`enter`'s."""
    held = False
    try:
        held = enter(scan)
        for tensor, new in pairs:
            tensor._reset(new)
    finally:
        if held:
            leave()


# ---- an eager kernel's compilation ------------------------------------------------------------------------------
# JAX traces, lowers and compiles an eager kernel the first time it meets its input shapes, through caches keyed by
# weak references (jaxlib's ``weakref_lru_cache``) that mark a key as being computed while they call into Python.
# An exception raised there by a signal handler (Ctrl-C caught by a notebook or by ``except KeyboardInterrupt:``,
# a watchdog's alarm) left a key marked for good: every later call of that op at those shapes raised
# ``RecursionError: Recursively calling <weakref ...>`` (a probe: 1-3 ops of ~390 interrupted first calls) -- the
# model could be saved, but not trained on. So the trace of an eager kernel, once begun in the main thread,
# holds signals until the kernel's call returns: the compile finishes, then the signal is delivered. Only a
# first call per shape pays for it (a walk up its stack); a cached call pays one list read.
KERNEL_CALLERS = set()  # code of the functions calling eager kernels that release a hold when the call returns
KERNEL_HELD = [False]  # the main thread's kernel call holds signals since its trace began


def hold_kernel_trace():
    """(an eager kernel's trace begins) Hold signals until the kernel call returns, where that call is made by one
    of ``KERNEL_CALLERS`` (:func:`~megxla.core._dispatch.run_kernel`, a recording's ``abstract_apply``) in the main
    thread: a trace begun anywhere else (a compiled step's lowering, a cluster compiling) is not followed by that
    caller's :func:`release_kernel_trace`."""
    if KERNEL_HELD[0] or _get_ident() != _MAIN:
        return
    frame = _getframe(2)
    while frame is not None and frame.f_code not in KERNEL_CALLERS:
        frame = frame.f_back
    if frame is not None and enter():
        KERNEL_HELD[0] = True


def release_kernel_trace():
    """(the main thread's kernel call returned or failed, its trace held signals) Deliver what was held."""
    KERNEL_HELD[0] = False
    leave()


def _import_dialects():
    """Import the MLIR dialects JAX loads lazily at its first lowering. Their import registers them with MLIR (in
    C++) before the Python module is complete: a Ctrl-C landing there (~0.1 s of a process's first compilation,
    wherever it happens -- a Python number's first conversion, the user's own JAX code) made Python drop the module,
    and every later import of it failed with "Dialect namespace 'mhlo' is already registered": nothing new could
    be compiled in that process again (probe U). Imported with megxla instead, before any signal handler of ours."""
    import jaxlib.mlir.dialects.builtin  # noqa: F401
    import jaxlib.mlir.dialects.mhlo  # noqa: F401


_import_dialects()
if _get_ident() == _MAIN:
    # SIGINT's handler is wrapped from the start: Python's own raised a Ctrl-C arriving during a process's first op
    # inside JAX's garbage-collection callback, which Python ignores (10 of 14 Ctrl-Cs 20-110 ms into a first
    # ``x * 2`` were lost, probe U); the wrapper sends such a one again (``_swallowed_at``)
    _install()
    sys.unraisablehook = _unraisable(sys.unraisablehook)


def unstick(exc):
    """Whether ``exc`` is a JAX cache entry left marked as being computed (see above: its call was interrupted
    outside such a hold -- a compiled step's first trace, a user's own JAX code); JAX's caches are then cleared,
    so that the call can be made again. (Compiled executables held elsewhere stay; JAX's persistent compilation
    cache makes the eager kernels' recompilation cheap.)"""
    if type(exc) is RecursionError and str(exc).startswith("Recursively calling"):
        import jax
        jax.clear_caches()
        return True
    return False

