"""``GradManager``: records a tape of data records ``(op, input values, output ids)`` while recording, and
replays it backwards with one ``vjp[op]`` op per record -- gradients go through the same dispatch point as
forward ops, so they are traced and compiled like them."""
from __future__ import annotations

import concurrent.futures
import functools
import threading
import weakref

import jax
import numpy as np
import jax.numpy as jnp

from ..core import _dispatch, _interrupt, _lazy, _registry
from ..core._dispatch import apply, wrap
from ..core._elemwise_front import SCALAR_VIDS as _SCALAR_VIDS
from ..core._future import Future
from ..core._op import SEQUENCE, VJP
from ..core._tensor import Tensor
from ..core.dtypes import is_float
from ..core.ops.shape import detach as _DETACH, autodiff_function as _FUNCTION
from ..core.ops.elemwise import BINARY as _BINARY, NON_DIFFERENTIABLE as _NONDIFF, NON_DIFFERENTIABLE_OUTPUTS as _NONDIFF_OUT

__all__ = ["GradManager", "get_backwarding_grad_manager"]

# While > 0 (an autodiff.Function's forward is running), GradManagers tape nothing.
_SUSPENDED = [0]
_ADD = _BINARY["add"].bind()  # (the op of ``a + b`` on two Tensors: a gradient sum)
# The autodiff.Function whose node is being applied (read by _record to link the tape record to it).
_PENDING = [None]
_BACKWARDING = threading.local()  # .gm: the GradManager whose backward runs on this thread (its callbacks read it)


def get_backwarding_grad_manager():
    """The GradManager whose ``backward`` is running on this thread, or None (MegEngine's
    ``megengine.autodiff.grad_manager.get_backwarding_grad_manager``): a gradient callback that defers its work
    registers with it (``gm._register_after_backward_callback``), as ``distributed.make_allreduce_cb`` does.

    Example:
        >>> get_backwarding_grad_manager() is None
        True
    """
    return getattr(_BACKWARDING, "gm", None)


class _Attached:
    """An attached tensor, held weakly as MegEngine does: a temporary attached inside ``with gm:`` (an input
    whose gradient a step reads) is freed with its last reference, not kept alive by the GradManager."""

    __slots__ = ("ref", "callbacks", "vid")

    def __init__(self, tensor, callbacks, owner):
        self.ref = weakref.ref(tensor, functools.partial(_forget, weakref.ref(owner), id(tensor)))
        self.callbacks = callbacks
        # The value differentiated: the tensor's value when this recording started (or when it was attached
        # during it). An in-place update inside the recording (``w *= 2``, ``x[0] = 5``) rebinds the tensor
        # to a new value; MegEngine's gradient is still the one of the value it had, through that update.
        self.vid = tensor._vid

    @property
    def tensor(self):
        return self.ref()


@_interrupt.ignores_exceptions
def _forget(owner, key, ref):
    # (a module-level function: a closure over the entry would make entry -> weakref -> callback -> entry a
    # reference cycle, garbage left for the cyclic collector on every attach: MegEngine's test_release)
    attached = owner()
    if attached is not None:
        entry = attached.get(key)
        if entry is not None and entry.ref is ref:
            del attached[key]  # (its id may be reused by a new tensor: only this entry goes)


class _AttachedDict(dict):
    """``{id(tensor): _Attached}`` (a dict subclass: weakly referable, for the entries' finalizers)."""

    __slots__ = ("__weakref__",)

    def live(self):
        """The entries whose tensor is alive, in attach order."""
        return [a for a in list(self.values()) if a.ref() is not None]


class AttachTypeError(TypeError, AssertionError):
    """``GradManager.attach`` of something that is no Tensor: a TypeError, and the AssertionError MegEngine's
    ``assert isinstance(x, Tensor)`` raises."""


class NotRecordingError(RuntimeError, TypeError):
    """``GradManager.backward`` outside ``with gm:`` / ``record()``: a RuntimeError, and the TypeError MegEngine
    raises there ("py_apply expects tensor as inputs")."""


class BackwardArgumentError(TypeError, RuntimeError):
    """A None among ``GradManager.backward``'s ys or dys: a TypeError, and the RuntimeError MegEngine's grad key
    raises for it ("assertion `tw' failed")."""


class GradManager:
    """Computes gradients of attached tensors over the ops recorded between ``record()`` and ``backward()``.

    Example:
        >>> model = M.Linear(3, 1); x = mge.Tensor(np.ones((2, 3), "float32"))
        >>> gm = GradManager().attach(model.parameters())
        >>> with gm:
        ...     loss = model(x).sum()
        ...     gm.backward(loss)     # fills p.grad for every attached p
        >>> model.weight.grad.numpy()
        array([[2., 2., 2.]], dtype=float32)
    """

    def __init__(self):
        self._attached = _AttachedDict()
        self._recording = False
        self._tape: list = []
        self._tracked: set = set()
        self._late: dict = {}  # value id -> tape position of a tensor attached while recording
        self._walks: dict = {}  # backward walk signature -> its _Walk (or None: not collected as one sequence)
        self._ahead_walks = 0  # walks in a row that found no kernel to compile ahead (see _compile_ahead)
        self._guess = None  # while recording cold: gradient kernels guessed, not yet handed to the workers
        self._guessed = False
        self._functions: dict = {}  # first output id of an autodiff.Function node -> the Function
        # Bumped when the attached set changes from outside a traced call: a compiled step recorded with this
        # manager computes the gradients of what was attached then, so it records again (megxla.jit reads it).
        self._version = 0
        self._group = ()  # the managers recording beside this one in a GradManagerGroup (``gm | gm2``)
        # Pipeline parallelism (F.distributed.remote_send / remote_recv): tensors this manager tracks that were
        # sent to another rank, whose gradients the backward receives from there, and tensors received from
        # another rank, whose gradients the backward sends back. The distributed layer hands in the transfers.
        self._sent: list = []  # (tensor, receive_grad() -> Tensor or None)
        self._received: list = []  # (value id, send_grad(Tensor or None))
        self._transient: list = []  # attached until this recording ends (see _attach_transient)
        self._remat: dict = {}  # value id -> _Remat: a result the tape does not hold (Primitive.remat)
        # Called once per backward, after the gradient callbacks and before the gradients are delivered: what a
        # callback that returned a Future (a packed all-reduce) registered to set them (MegEngine's private API)
        self._after_backward_callback: list = []
        self._after_done = True  # (whether this backward ran them already)
        self._backwards = 0  # backward passes started (a deferring callback drops what a failed one left pending)

    def _register_after_backward_callback(self, callback):
        """Run ``callback()`` after every backward pass's gradient callbacks, before the gradients are added to
        ``.grad`` (MegEngine's hook for callbacks that return a :class:`~megxla.core._future.Future`)."""
        self._after_backward_callback.append(callback)
        return self

    def _after_backward(self):
        if self._after_done:
            return
        self._after_done = True
        for callback in list(self._after_backward_callback):
            callback()

    # ---- attach ------------------------------------------------------------------------------------------
    def attach(self, tensors, callbacks=None):
        """Attach tensors (a Tensor or an iterable of them) whose gradients ``backward`` computes.

        Args:
            tensors: tensors to attach; may be called again, also while recording.
            callbacks: callables ``cb(tensor, grad) -> grad`` applied in order before accumulating.

        Returns:
            self, so that ``GradManager().attach(params)`` chains.
        """
        if isinstance(tensors, Tensor):
            tensors = [tensors]
        if callbacks is None:
            callbacks = []
        elif callable(callbacks):
            callbacks = [callbacks]
        else:
            callbacks = list(callbacks)
        for cb in callbacks:
            # (accepted, a non-callable failed at the backward: "'int' object is not callable", probe Y)
            if not callable(cb):
                raise TypeError(f"GradManager.attach: callbacks must be callables cb(tensor, grad) -> grad, got "
                                f"{cb!r}")
        tensors = list(tensors)
        for t in tensors:  # all checked before any is attached
            if not isinstance(t, Tensor):
                # (a TypeError, and MegEngine's AssertionError "Object to be attached should be Tensor")
                raise AttachTypeError(f"GradManager.attach: expected Tensors, got {type(t).__name__} {t!r:.60}")
            if not jnp.issubdtype(t._data.dtype, jnp.inexact):
                # MegEngine's AssertionError: integer and bool tensors have no gradient
                raise AssertionError(f"GradManager.attach: only floating-point tensors have gradients; got a "
                                     f"tensor of dtype {t.dtype}, shape {t.shape}")
        for t in tensors:
            entry = self._attached.get(id(t))
            if entry is not None and entry.ref() is not t:
                entry = None  # (a dead tensor's entry under a reused id)
            if entry is None:
                self._attached[id(t)] = _Attached(t, list(callbacks), self._attached)
                self._version += 1
            else:
                entry.callbacks.extend(callbacks)
                if callbacks and _dispatch.current_interpreter() is None:
                    self._version += 1
            if self._recording and t._vid not in self._tracked:
                # MegEngine differentiates only the ops run after the attach: one recorded before it that
                # read ``t`` treats ``t`` as a constant (``_backward_tape`` starts tracking it from here)
                self._tracked.add(t._vid)
                self._late[t._vid] = len(self._tape)
        if not self._recording and _lazy.FLUSH[0] is not None:
            # Auto-jit: ops still pending when parameters are attached are a model's setup -- its initialisation on
            # the device (a ViT's ``trunc_normal_``: erfinv, clip), constants its modules made (a loss's Sobel or
            # Gaussian kernel, ``mge.tensor(k) / 256``, tiled). Left pending, they joined the first step's cluster, a
            # key that never recurs -- the second step compiled the step again (swin-transformer: 7 s on 2 cores;
            # RIFE: 19 s). Attaching ends the setup: it runs as a cluster of its own.
            _lazy.FLUSH[0]("parameters attached", tensors)
        return self

    def _attach_transient(self, t):
        """Attach ``t`` until this recording ends (a collective's stand-in input on a rank whose own tensor needs
        no gradient: its backward must still take part in the collective the root's gradient needs)."""
        self.attach([t])
        self._transient.append(t)

    def attached_tensors(self):
        """The attached tensors, in attach order."""
        return [a.tensor for a in self._attached.live()]

    def _tracks(self, t):
        return t._vid in self._tracked

    # ---- recording ---------------------------------------------------------------------------------------
    def record(self):
        """Start recording ops (the ``with gm:`` block does this)."""
        if self._recording:
            raise RuntimeError("GradManager is already recording")
        if _lazy.FLUSH[0] is not None and not _dispatch.recorders:
            # Auto-jit: a step starts. The ops issued before it (a batch prepared, ``x / 255.``) run as a cluster
            # of their own: at the first step they joined the step's cluster, and at the next ones a read-site
            # timer may run them eagerly (the losses read at the end of each step: a loop of reads) -- the first
            # step's cluster never recurred, and the step compiled twice (RIFE: 19 s on 2 cores).
            _lazy.FLUSH[0]("with gm")
        # A Ctrl-C waits until the manager is fully recording (or fully released, below): one in between left it
        # marked recording but missing from the thread's recorders (every later ``with gm:`` raised "already
        # recording", its backward StopIteration)
        held = False
        try:
            held = _interrupt.enter()
            self._tape = []
            live = self._attached.live()
            for a in live:
                a.vid = a.tensor._vid
            self._tracked = {a.vid for a in live}
            self._late = {}
            self._sent, self._received = [], []
            self._transient = []
            self._remat = {}
            # (cold, eager: the taped ops' gradient kernels are guessed and compiled while the forward runs)
            self._guess = [] if self._ahead_walks < _AHEAD_QUIET and not _lazy.WANTED[0] \
                and _registry.kernel_compiler() is not None else None
            self._guessed = False  # (whether a guess found a kernel not compiled before)
            _dispatch.recorders.append(self)
            self._recording = True
            collecting = _lazy.COLLECTING[0]
            if collecting is not None:
                # (under auto-jit: a loop's iterations run eagerly between host reads end here -- a model's
                # initialisation drawing on the host, parameter by parameter, ran on into a varying number of the
                # first step's ops, whose cluster then never recurred: PMRID compiled its step twice, 9.8 s more)
                collecting()
        finally:
            if held:
                _interrupt.leave()

    def release(self):
        """Stop recording and drop the tape."""
        held = False
        try:
            held = _interrupt.enter()
            self._release()
        finally:
            if held:
                _interrupt.leave()

    def _release(self):
        if self._recording:
            self._recording = False
            _dispatch.recorders.remove(self)
        self._tape = []
        self._tracked = set()
        self._late = {}
        self._functions = {}
        self._remat = {}
        self._guess = None
        self._group = ()
        self._sent, self._received = [], []
        for t in self._transient:
            entry = self._attached.get(id(t))
            if entry is not None and entry.ref() is t:
                del self._attached[id(t)]
        self._transient = []

    def _note_send(self, t, receive_grad):
        """``t`` (tracked here) was sent to another rank: backward first calls ``receive_grad()`` for its
        gradient (None: the receiver has none)."""
        self._sent.append((t, receive_grad))

    def _note_recv(self, t, send_grad):
        """``t`` was received from another rank: it is tracked, and backward hands its gradient (or None) to
        ``send_grad``."""
        self._tracked.add(t._vid)
        self._received.append((t._vid, send_grad))

    def __or__(self, other):
        """``gm | gm2``: a :class:`GradManagerGroup` recording both; each backward is not recorded by the other.

        Example:
            >>> x = mge.Tensor([0.5]); gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
            >>> with gm | gm2:
            ...     y = x * x
            ...     gm.backward(y)
            ...     gm2.backward(y)
            >>> x.grad.numpy()                # 2x from each manager
            array([2.], dtype=float32)
        """
        if isinstance(other, GradManager):
            return GradManagerGroup([self, other])
        return NotImplemented

    __ror__ = __or__

    def __enter__(self):
        try:
            self.record()
        except BaseException:
            # (a Ctrl-C held while recording started is raised at its end: the block never runs, and ``__exit__``
            # is not called for an ``__enter__`` that raised -- stop here, or the manager stays recording)
            if self._recording:
                self.release()
            raise
        return self

    def __exit__(self, *exc):
        self.release()

    def _record(self, op, inputs, outputs):
        tracked = self._tracked
        for t in inputs:
            if t._vid in tracked:
                break
        else:
            return
        if op.prim is _DETACH or _SUSPENDED[0]:  # detach() cuts the gradient: its output is not tracked
            return
        nondiff = _NONDIFF.get(op.name, ())
        if nondiff is None:  # no gradient at all (floor, sign, zeros_like...): as MegEngine, the path is cut
            return
        if nondiff and not any(t._vid in tracked for i, t in enumerate(inputs) if i not in nondiff):
            return  # only reached through inputs without a gradient (the divisor of %)
        if op.prim is _FUNCTION:
            self._functions[outputs[0]._vid] = _PENDING[0]
        remat = self._remat
        ins = [(t._data, t._vid) for t in inputs] if not remat else \
            [(remat.get(t._vid) or t._data, t._vid) for t in inputs]
        self._tape.append((op, ins, [t._vid for t in outputs]))
        if op.prim.remat is not None and op.prim.remat(dict(op.params)):
            # NOTE: records that read this result hold a _Remat instead of its value (e.g. the full parameters
            # gathered by fully_shard: the backward gathers them again instead of keeping them all alive)
            if op.multiple_results:  # (one computation again gives them all: a fully sharded unit's parameters)
                vids = tuple([t._vid for t in outputs])
                for i, out in enumerate(outputs):
                    remat[out._vid] = _Remat(op, ins, out.dtype, i, vids)
            else:
                out = outputs[0]
                remat[out._vid] = _Remat(op, ins, out.dtype)
        if self._guess is not None and not op.multiple_results:
            self._guess_gradient(op, inputs, outputs[0], tracked)
        cut = _NONDIFF_OUT.get(op.name, ())
        for i, t in enumerate(outputs):
            if i not in cut:
                tracked.add(t._vid)

    def _guess_gradient(self, op, inputs, out, tracked):
        """(Recording, cold, eager) Guess the gradient op of the op just taped -- its one output will get a
        gradient, as nearly every taped op's does -- and hand its kernel to the kernel workers, ``_GUESS_BATCH`` at a
        time: compiled while the forward runs, on the core the forward's own compiles leave idle. The walk's
        prediction (:meth:`_compile_ahead`) then finds them compiled or compiling; a wrong guess only compiles a
        kernel nobody calls."""
        if op.transient or op.prim is _FUNCTION or self._remat:
            return
        out_type = _array_type(out._data)
        if out_type is None or not _is_float(out._data):
            return
        types = [_array_type(t._data) for t in inputs]
        if None in types:
            return
        wrt = _gradient_inputs(op, [(t._data, t._vid) for t in inputs], [t._vid in tracked for t in inputs], (True,))
        if not wrt:
            return
        types.append(out_type)
        guess = self._guess
        guess.append((VJP.bind(op=op, nin=len(inputs), wrt=wrt, given=(True,)), types))
        if len(guess) >= _GUESS_BATCH:
            self._guess = []
            compile_kernels = _registry.kernel_compiler()
            if compile_kernels is not None and compile_kernels(guess, guessed=True) is not None:
                self._guessed = True

    # ---- backward ----------------------------------------------------------------------------------------
    def backward(self, y=None, dy=None):
        """Back-propagate from ``y`` and accumulate into the ``.grad`` of attached tensors; ends recording.

        Args:
            y: a tensor or list of tensors (the loss); None skips computation but ends recording, except on a
                pipeline stage (``F.distributed.remote_send``), where ``gm.backward()`` / ``gm.backward([])``
                back-propagates the gradients of the sent tensors that the receiving ranks send back.
            dy: their gradients; default ones. A ``dy`` with ``y``'s number of elements (``(1,)`` for a
                scalar loss) is reshaped to ``y``'s shape, a broadcastable one is broadcast, as in MegEngine.
        """
        if not self._recording:
            raise NotRecordingError("GradManager.backward: no recording (no computation history: did you forget "
                                    "record() or call a method that clears the history?); call it inside `with gm:` "
                                    "or after record()")
        many = isinstance(y, (list, tuple))
        bad = [t for t in (y if many else [y]) if not isinstance(t, Tensor) and (many or t is not None)]
        if bad:  # (MegEngine's TypeError; checked first: the recording and every .grad stay as they were)
            # (None alone is "no loss"; a None among the ys is no tensor: MegEngine's ones_like(None) raised its
            # TypeError, or with dys its grad key's RuntimeError -- megxla raised an AttributeError from the walk)
            if bad[0] is None:
                k = next(k for k, t in enumerate(y) if t is None)
                raise BackwardArgumentError(f"GradManager.backward: y[{k}] is None; y must be a Tensor or a list of "
                                            "Tensors")
            raise TypeError(f"GradManager.backward: y must be a Tensor or a list of Tensors, got "
                            f"{type(bad[0]).__name__}")
        if dy is not None:
            # MegEngine requires one dy per y (its grad key asserts so); zip() would drop the extra ys' gradients,
            # and a dy without y (``gm.backward(dy=g)``) was ignored. Checked before anything happens: the recording
            # and every .grad stay as they were
            ny = (len(y) if many else 1) if y is not None else 0
            ndy = len(dy) if isinstance(dy, (list, tuple)) else 1
            if ny != ndy:
                raise _dispatch.OpError(f"GradManager.backward: {ny} tensors in y but {ndy} in dy; pass one dy "
                                        "per y (or dy=None for ones)")
            # (MegEngine asserts each is a Tensor: a None among them is no "ones", and was taken as the empty
            # array -- an error about a dy of shape (0,))
            gaps = [k for k, d in enumerate(dy if isinstance(dy, (list, tuple)) else [dy]) if d is None]
            if gaps:  # (MegEngine's RuntimeError "assertion `tw' failed"; megxla's TypeError before)
                raise BackwardArgumentError(f"GradManager.backward: dy[{gaps[0]}] is None; pass a gradient for each y "
                                            "(or dy=None for ones of every y)")
            # (a dy of another shape: raised here, the recording kept -- the user's corrected call still has it;
            # bad_call_fuzz seed 5 program 51)
            ys = y if isinstance(y, (list, tuple)) else [y]
            dys = dy if isinstance(dy, (list, tuple)) else [dy]
            if not all(isinstance(d, Tensor) for d in dys):
                # (converted here, not in the walk: a dy of strings ended the recording with its error, so the
                # corrected call had nothing to differentiate)
                dys = [d if isinstance(d, Tensor) else Tensor(d, dtype=t.dtype) for t, d in zip(ys, dys)]
                dy = dys if isinstance(dy, (list, tuple)) else dys[0]
            for t, d in zip(ys, dys):
                _check_dy_shape(tuple(t.shape), tuple(d.shape))
        try:
            if y is not None or self._sent or self._received:
                self._backward([] if y is None else y, dy)
        finally:
            self.release()

    def _backward(self, y, dy):
        end = _lazy.STEP_END[0]
        if end is not None:  # auto-jit: the start of the backward (a cut there is a switch: see _autojit)
            end("gm.backward", now=True)
        self._backwards += 1
        self._after_done = False
        outer = getattr(_BACKWARDING, "gm", None)
        _BACKWARDING.gm = self
        try:
            self._backward_walk(y, dy)
            self._after_backward()  # (once even where no gradient was delivered)
        finally:
            _BACKWARDING.gm = outer

    def _backward_walk(self, y, dy):
        from ..functional import ones_like
        ys = list(y) if isinstance(y, (list, tuple)) else [y]
        if dy is None:
            dys = [ones_like(t) for t in ys]
        else:
            dys = list(dy) if isinstance(dy, (list, tuple)) else [dy]
            dys = [d if isinstance(d, Tensor) else Tensor(d, dtype=t.dtype) for d, t in zip(dys, ys)]
        dys = [_match_dy(t, d) for t, d in zip(ys, dys)]
        for t, receive_grad in self._sent:  # pipeline: the gradients of what this stage sent come back
            g = receive_grad()
            if g is not None:
                ys.append(t)
                dys.append(g)
        # Stop taping: backward ops must not record into our own tape, nor into those of the managers recording
        # beside us in a group (``gm | gm2``: siblings), nor into those entered after us (MegEngine's visibility
        # by order: only a manager entered before this one, an outer one, sees its backward and can take
        # higher-order gradients through it)
        # (a Ctrl-C waits until the recorders are rearranged, and put back: one in between left this manager
        # among the thread's recorders for good -- every later op of the process went through the recording
        # path, an auto-jit step 18x slower -- or its siblings paused)
        paused = ()
        held = False
        try:
            held = _interrupt.enter()
            self._recording = False
            recorders = _dispatch.recorders
            active = list(recorders)  # (this thread's, in the order they started recording)
            mine = 0
            while active[mine] is not self:  # (a loop, no generator: one closed by an interrupt swallows it)
                mine += 1
            later = active[mine + 1:]
            recorders.remove(self)
            paused = [g for g in recorders if any(g is h for h in later) or (g in self._group and g is not self)]
            for g in paused:
                recorders.remove(g)
        finally:
            if held:
                _interrupt.leave()
        try:
            grads = self._backward_tape(ys, dys)
            for v, send_grad in self._received:  # pipeline: what this stage received sends its gradient back
                send_grad(grads.get(v))
        finally:
            held = False
            try:
                held = _interrupt.enter()
                for g in paused:
                    _dispatch.recorders.append(g)
            finally:
                if held:
                    _interrupt.leave()

    def _backward_tape(self, ys, dys):
        grads: dict[int, Tensor] = {}
        for t, d in zip(ys, dys):
            _accumulate(grads, t._vid, d)
        # Gradients that came (only) out of ops whose backward already applied the callbacks (``cooked``: a
        # partial_trace's compiled backward with its GradManager callbacks recorded in) skip them here; a
        # gradient with any other contribution runs them on the sum, as MegEngine does.
        cooked, raw = set(), set(grads)
        attached = self._attached.live()
        late = self._late
        tracked = {a.vid for a in attached if a.vid not in late} | {v for v, _ in self._received}
        starts: dict = {}
        for v, pos in late.items():
            starts.setdefault(pos, []).append(v)
        keep = {a.vid for a in attached}
        value_of = self._rematerializer()
        collecting = _lazy.COLLECTING[0]
        grouping = collecting is not None and value_of is _value and not self._received \
            and not _dispatch.recorders and collecting()
        sig = None
        if grouping:
            # The same program gives the same tape every step: its walk, planned once, is looked up by the tape's
            # signature (the walk was 40% of a small Transformer step's Python under auto-jit)
            sig = _walk_signature(self._tape, ys, dys, attached, late)
            walk = self._walks.get(sig, _MISSING) if sig is not None else _MISSING
            if walk is not _MISSING:
                if walk is not None:
                    return walk.run(self, self._tape, dys, attached)
                grouping = False
        live = []  # per record: which inputs depended on attached tensors when it ran
        for k, (op, ins, outs) in enumerate(self._tape):  # forward pass: which values depend on attached ones
            tracked.update(starts.get(k, ()))
            flags = tuple(v in tracked for _, v in ins)
            live.append(flags)
            if any(flags):
                cut = _NONDIFF_OUT.get(op.name, ())
                tracked.update(v for i, v in enumerate(outs) if i not in cut)
        if grouping:
            done = self._grouped(ys, dys, attached, live, keep, sig)
            if done is not None:
                return done
        ahead = self._compile_ahead(ys, dys, live) if self._ahead_walks < _AHEAD_QUIET else None
        try:
            self._walk(grads, live, keep, value_of, ahead, cooked, raw)
        finally:
            if ahead is not None:
                for f in ahead.values():
                    f.cancel()  # (the walk stopped early -- an op raised, Ctrl-C --: compiles not started are dropped)
        given = []
        for entry in attached:
            t = entry.tensor
            if t is None:
                continue
            g = grads.get(entry.vid)
            if g is None:
                continue
            if entry.callbacks and (t._vid in raw or t._vid not in cooked):
                g = _run_callbacks(t, g, entry.callbacks)
                if g is None:  # (a callback's "no gradient")
                    continue
            given.append((t, g))
        self._deliver_all(given)
        return grads

    def _compile_ahead(self, ys, dys, live):
        """Start compiling the eager kernels of the walk's gradient ops on worker threads (``jit._kernels_ahead``,
        through ``core._registry``): ``{tape position: future}`` of the ones not compiled before, or None.

        The walk is predicted from the tape as :meth:`_walk` makes it (which outputs will have a gradient, so each
        gradient op and its input types); a wrong guess only compiles a kernel the walk does not use. A manager
        whose steps found nothing new to compile (guessed while recording, or predicted here) ``_AHEAD_QUIET``
        times in a row stops guessing and predicting (a training loop's steady state: both are Python over the
        whole tape)."""
        compile_kernels = _registry.kernel_compiler()
        if compile_kernels is None or self._remat:
            self._ahead_walks = _AHEAD_QUIET
            return None
        grad_type = {}  # value id -> its gradient's type (its value's, or dy's)
        value_type = {}
        for t, d in zip(ys, dys):
            grad_type[t._vid] = _array_type(d._data)
        tape = self._tape
        for _, ins, _ in tape:
            for data, v in ins:
                if v not in value_type:
                    value_type[v] = _array_type(data)
        has = set(grad_type)
        jobs, positions = [], []
        for k in reversed(range(len(tape))):
            op, ins, outs = tape[k]
            given = tuple(v in has for v in outs)
            if not any(given):
                continue
            if op.prim is _FUNCTION:
                n_in = dict(op.params)["n_in"]
                has.update(v for (data, v), on in zip(ins[:n_in], live[k]) if on and _is_float(data))
                continue
            wrt = _gradient_inputs(op, ins, live[k], given)
            if not wrt:
                continue
            types = [value_type[v] for _, v in ins]
            types += [grad_type.get(v) or value_type.get(v) for v in outs if v in has]
            has.update(ins[i][1] for i in wrt)
            if op.transient or None in types:
                continue
            jobs.append((VJP.bind(op=op, nin=len(ins), wrt=wrt, given=given), types))
            positions.append(k)
        futures = compile_kernels(jobs)
        # (quiet: nothing new to compile for this step, neither guessed while recording nor found now)
        self._ahead_walks = 0 if futures is not None or self._guessed else self._ahead_walks + 1
        if futures is None:
            return None
        return {k: f for k, f in zip(positions, futures) if f is not None}

    def _walk(self, grads, live, keep, value_of, ahead, cooked, raw):
        """The backward walk of :meth:`_backward_tape`: each taped op's gradient op, eagerly, into ``grads``
        (``ahead``: the futures of kernels compiled ahead, by tape position)."""
        for k in reversed(range(len(self._tape))):
            op, ins, outs = self._tape[k]
            given = tuple(v in grads for v in outs)
            if not any(given):
                continue
            if op.prim is _FUNCTION:  # autodiff.Function: the user's backward, eagerly through apply
                n_in = dict(op.params)["n_in"]
                cts = [(grads.get if v in keep else grads.pop)(v, None) for v in outs]
                fn = self._functions[outs[0]]
                in_grads = fn._input_grads(cts, [value_of(d, v) for d, v in ins[:n_in]])
                for (data, v), g, on in zip(ins[:n_in], in_grads, live[k]):
                    if g is not None and on and _is_float(data):
                        _accumulate(grads, v, g)
                        raw.add(v)
                continue
            wrt = _gradient_inputs(op, ins, live[k], given)
            if not wrt:
                continue
            # (an attached intermediate value keeps its gradient for delivery after the walk)
            cts = [grads[v] if v in keep else grads.pop(v) for v in outs if v in grads]
            primals = [value_of(data, v) for data, v in ins]
            vjp_op = VJP.bind(op=op, nin=len(ins), wrt=wrt, given=given)
            if ahead:
                f = ahead.pop(k, None)
                if f is not None:
                    try:
                        f.result()  # (its kernel, compiled by a worker: the call below finds it in JAX's cache)
                    except concurrent.futures.CancelledError:
                        pass  # (dropped by a walk that raised: compiled at the call, as without)
            in_grads = apply(vjp_op, *primals, *cts)
            applied = op.prim.callbacks_applied
            done = applied(dict(op.params)) if applied is not None else ()
            for i, g in zip(wrt, in_grads):
                _accumulate(grads, ins[i][1], g)
                (cooked if i in done else raw).add(ins[i][1])

    def _grouped(self, ys, dys, attached, live, keep, sig=None):
        """The backward walk of :meth:`_backward_tape` with its gradient ops collected as ONE ``sequence`` op (under
        auto-jit: one collection instead of one per forward op and per gradient sum; the cluster compiles the same
        computation). Returns the gradients by value id, or None -- nothing done -- where the tape holds an op whose
        gradient runs Python (``autodiff.Function``), compiled graphs (transient ops) or callbacks compiled in.
        The planned walk (or None) is kept under the tape's signature ``sig`` (see :func:`_walk_signature`)."""
        planned = self._plan_walk(ys, dys, attached, live, keep)
        if sig is not None:
            if len(self._walks) >= _WALKS_KEPT:  # (a program whose tapes keep changing: start over)
                self._walks.clear()
            self._walks[sig] = None if planned is None else planned[0]
        return None if planned is None else planned[0].deliver(self, planned[1], attached)

    def _plan_walk(self, ys, dys, attached, live, keep):
        """(:meth:`_grouped`) The walk planned as a :class:`_Walk`, and its input Tensors; None where it cannot be
        one ``sequence`` op."""
        inputs, at = [], {}  # the sequence's input Tensors, each value once: value id -> position
        sources = []  # where each input was read: (tape position, input index), or (-1, k) for the k-th dy

        def take(data, vid, src):
            pos = at.get(vid)
            # (a Python number's cached tensor -- ``lp * float(r)``'s r -- is an input per use, as in a cluster: taken
            # once per value, the walk's inputs changed with which numbers of a step were equal, and its cluster's key
            # with them -- a policy gradient's step ran eagerly, its returns repeating at random)
            if pos is None or vid in _SCALAR_VIDS:
                pos = at[vid] = len(inputs)
                inputs.append(_value(data, vid))
                sources.append(src)
            return pos

        steps, results = [], [0]  # results: how many values the steps made so far (coded -1, -2, ...)
        grads = {}  # value id -> its gradient so far (an input position, or a coded result)

        def accumulate(vid, ref):
            prev = grads.get(vid)
            if prev is None:
                grads[vid] = ref
            else:
                steps.append((_ADD, (prev, ref)))
                results[0] += 1
                grads[vid] = -results[0]

        for j, (t, d) in enumerate(zip(ys, dys)):
            pos = take(d._data, d._vid, (-1, j))
            _keep_node(inputs[pos], d)
            accumulate(t._vid, pos)
        tape = self._tape
        for k in reversed(range(len(tape))):
            op, ins, outs = tape[k]
            given = tuple(v in grads for v in outs)
            if not any(given):
                continue
            if _not_groupable(op):
                return None
            wrt = _gradient_inputs(op, ins, live[k], given)
            if not wrt:
                continue
            cts = [grads[v] if v in keep else grads.pop(v) for v in outs if v in grads]
            steps.append((VJP.bind(op=op, nin=len(ins), wrt=wrt, given=given),
                          tuple([take(data, v, (k, i)) for i, (data, v) in enumerate(ins)]) + tuple(cts)))
            first = results[0]
            results[0] += len(wrt)
            for j, i in enumerate(wrt):
                accumulate(ins[i][1], -(first + j + 1))
        targets = [(j, grads[entry.vid]) for j, entry in enumerate(attached)
                   if entry.tensor is not None and entry.vid in grads]
        if any(ref >= 0 for _, ref in targets):  # (a gradient that is a dy itself: y attached, the walk as usual)
            return None
        n = len(inputs)

        def place(ref):  # a coded result -> its position in the environment (the inputs come first)
            return ref if ref >= 0 else n - ref - 1

        steps = tuple([(op, tuple([place(r) for r in refs])) for op, refs in steps])
        seq = SEQUENCE.bind(steps=steps, outs=tuple([place(ref) for _, ref in targets])) if targets else None
        return _Walk(seq, tuple(sources), tuple([j for j, _ in targets])), inputs

    def _rematerializer(self):
        """``value(data, vid)`` for the backward walk: a recorded value, or a _Remat result computed again (once
        while records still read it: each recomputation of a collective is a collective)."""
        if not self._remat:  # (no op recorded a _Remat: every record holds its values -- no pass over the tape)
            return _value
        uses, again = {}, {}
        for _, ins, _ in self._tape:
            for d, v in ins:
                if type(d) is _Remat:
                    uses[v] = uses.get(v, 0) + 1
        if not uses:
            return _value

        def value(data, vid):
            if type(data) is not _Remat:
                return _value(data, vid)
            t = again.get(vid)
            if t is None:
                res = apply(data.op, *[value(d, v) for d, v in data.ins])
                if data.index is None:
                    t = again[vid] = res
                else:  # every result records still read is kept, so that the op runs once again, not per result
                    for v, r in zip(data.vids, res):
                        if uses.get(v):
                            again[v] = r
                    t = res[data.index]
            uses[vid] -= 1
            if not uses[vid]:
                del again[vid]
            return t

        return value

    def _deliver_all(self, given):
        """Hand each gradient ``g`` of attached ``t`` over (``given``: ``[(t, g)]``, callbacks applied),
        accumulated into ``t.grad``: every one or none. The sums are computed first, then each ``.grad`` is set with
        signals held (a Ctrl-C, or a callback raising, between two tensors left some layers with this step's
        gradients and the others without: the next backward added onto stale ones for part of the model).
        A callback's :class:`Future` is taken here, once the after-backward callbacks have set it."""
        self._after_backward()
        if any(isinstance(g, Future) for _, g in given):
            # (each a Future or a gradient: MegEngine gets a Future's value and takes a Tensor as it is -- an
            # all-reduce callback on the biases, a Tensor-returning scale on the weights)
            given = [(t, _resolve(t, g) if isinstance(g, Future) else g) for t, g in given]
            given = [(t, g) for t, g in given if g is not None]
        sums = [(t, g if t._grad is None else t._grad + g) for t, g in given]
        held = False
        try:
            held = _interrupt.enter()
            for t, g in sums:
                if t._grad is None:
                    t._grad = g
                else:  # MegEngine's ``x.grad += grad``: in place, so references to ``x.grad`` see the sum
                    t._grad._reset(g)
        finally:
            if held:
                _interrupt.leave()


class GradManagerGroup:
    """Several GradManagers recording the same ops side by side (``with gm | gm2:``, MegEngine's group): each
    one's ``backward`` is recorded by none of the others, so each computes first-order gradients of the same
    forward (nest ``with gm2: with gm:`` instead for higher-order gradients).

    Args:
        gms: the GradManagers.

    Example:
        >>> x = mge.Tensor([0.0]); gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
        >>> with gm | gm2:
        ...     y = F.cos(x)
        ...     gm.backward(y)
        ...     gm2.backward(y)
        >>> x.grad.numpy()
        array([-0.], dtype=float32)
    """

    def __init__(self, gms):
        self._gms = list(gms)

    def merge_with(self, other):
        """A group of this group's managers and ``other`` (a GradManager or a group)."""
        if isinstance(other, GradManager):
            other = GradManagerGroup([other])
        elif not isinstance(other, GradManagerGroup):
            return NotImplemented
        return GradManagerGroup([*self._gms, *other._gms])

    __or__ = merge_with
    __ror__ = merge_with

    def __enter__(self):
        started = []
        try:
            for gm in self._gms:
                was = gm._recording
                try:
                    gm.record()
                finally:
                    if gm._recording and not was:  # (a Ctrl-C held while it started is raised at its end)
                        started.append(gm)
        except BaseException:
            for gm in reversed(started):
                gm.release()
            raise
        for gm in self._gms:
            gm._group = tuple(self._gms)
        return self

    def __exit__(self, *exc):
        for gm in reversed(self._gms):
            gm.release()


def _run_callbacks(t, g, callbacks):
    # (jit.partial_trace(trace_gmcallback=True) registers one: it records the callbacks while its recording
    # call's backward runs them, to compile them into its backward; core._registry)
    runners = _registry.callback_runners()
    if runners:
        # (no deferring inside a runner: what it records becomes a compiled backward's callbacks, a gradient)
        gm, _BACKWARDING.gm = getattr(_BACKWARDING, "gm", None), None
        try:
            for runner in runners:
                out = runner(t, g, callbacks)
                if out is not None:
                    return out
        finally:
            _BACKWARDING.gm = gm
    for k, cb in enumerate(callbacks):
        out = cb(t, g)
        # None is MegEngine's "no gradient": the chain goes on with None and the tensor gets none this time (its
        # own test_attach_temporary attaches a checking callback that returns nothing). Anything else that is not
        # the gradient became ``.grad`` -- an ndarray, a float, a tensor of another shape -- failing at
        # opt.step() or in the accumulation, far from the callback (probe Y)
        # A Future (MegEngine's TensorFuture) is the gradient to come: set by an after-backward callback
        if isinstance(out, Future):
            if k + 1 < len(callbacks):
                return _Then(out, callbacks[k + 1:])  # (the callbacks after it get the gradient it will hold)
        elif out is not None and (not isinstance(out, Tensor) or out.shape != t.shape):
            _bad_gradient(t, out, f"callback {getattr(cb, '__qualname__', cb)!r}")
        g = out
    return g


class _Then(Future):
    """A callback's Future with the callbacks after it in the chain, applied once it is set (in MegEngine they got
    the Future itself: ``[make_allreduce_cb("mean"), clip]`` failed there)."""

    def __init__(self, first, rest):
        super().__init__(ack=False)
        self.first, self.rest = first, rest


def _bad_gradient(t, out, what):
    got = f"a Tensor of shape {out.shape}" if isinstance(out, Tensor) else type(out).__name__
    raise TypeError(f"GradManager: {what} returned {got} for a gradient of shape {t.shape}: it must return the "
                    f"gradient, a Tensor of that shape, or None for no gradient")


def _resolve(t, future):
    """The gradient a callback's Future holds, once the after-backward callbacks ran (None: no gradient)."""
    if type(future) is not _Then and not future.ready.is_set():  # (its get() would wait for ever)
        raise RuntimeError(f"GradManager: a gradient callback returned a Future for a tensor of shape {t.shape} "
                           "that no after-backward callback set (register one with "
                           "gm._register_after_backward_callback)")
    if type(future) is _Then:
        g = _resolve(t, future.first)
        out = None if g is None else _run_callbacks(t, g, future.rest)
        if isinstance(out, Future):
            raise RuntimeError(f"GradManager: a gradient callback returned a Future for a tensor of shape {t.shape} "
                               "after the after-backward callbacks ran")
        return out
    out = future.get()
    if out is not None and (not isinstance(out, Tensor) or out.shape != t.shape):
        _bad_gradient(t, out, "a callback's Future")
    return out



def _match_dy(y, dy):
    """``dy`` shaped like ``y``, as MegEngine accepts it: the same number of elements (``dy`` of shape ``(1,)``
    for a scalar loss) is reshaped, a broadcastable ``dy`` is broadcast; anything else is an error."""
    if dy.shape == y.shape:
        return dy
    from ..functional import broadcast_to, reshape
    if dy.size == y.size:
        return reshape(dy, y.shape)
    _check_dy_shape(tuple(y.shape), tuple(dy.shape))
    return broadcast_to(dy, y.shape)


def _check_dy_shape(y_shape, dy_shape):
    """Raise unless a ``dy`` of ``dy_shape`` can stand for ``y``'s gradient (:func:`_match_dy`)."""
    if dy_shape == y_shape or int(np.prod(dy_shape)) == int(np.prod(y_shape)):
        return
    try:
        ok = np.broadcast_shapes(dy_shape, y_shape) == y_shape
    except ValueError:
        ok = False
    if not ok:
        # (an OpError: a ValueError, and a RuntimeError as MegEngine's AsyncError is)
        raise _dispatch.OpError(f"GradManager.backward: dy of shape {dy_shape} cannot be broadcast to y's shape "
                                f"{y_shape}")


def _is_float(data):
    return is_float(data.dtype) or np.dtype(data.dtype).kind == "c"


_MISSING = object()
_WALKS_KEPT = 32  # walk signatures a GradManager keeps (a program cycling through more plans its walks anew)
_AHEAD_QUIET = 2  # walks in a row with nothing new to compile ahead, after which a manager stops predicting them
_GUESS_BATCH = 4  # gradient kernels guessed while recording, handed to the workers together
_FLOAT_DTYPES: dict = {}  # dtype -> whether it has gradients (_is_float), for the signatures


def _not_groupable(op):
    """Whether ``op``'s gradient cannot be a step of a grouped walk: it runs Python (``autodiff.Function``), is a
    compiled graph's (a transient op: a kept walk would keep it alive) or applies the callbacks itself."""
    return op.prim is _FUNCTION or op.transient or op.prim.callbacks_applied is not None


def _walk_signature(tape, ys, dys, attached, late):
    """What the grouped backward walk over ``tape`` depends on, as one hashable value: each record's op, which
    values it reads and makes (value ids numbered in order of first sight: the same program's tape has the same
    numbers every step, whatever its ids) and whether each input is a float; where the walk starts (``ys``,
    ``dys``) and what it delivers to (the attached tensors, those attached late and where). Shapes do not enter:
    the walk's ops are the same for every shape. None where the tape holds an op whose walk is not kept (a
    compiled graph's transient op, which a kept walk would keep alive; Python gradients; callbacks compiled in)."""
    number = {}
    head = [number.setdefault(t._vid, len(number)) for t in ys]
    head.append(-1)
    head += [number.setdefault(d._vid, len(number)) for d in dys]
    head.append(-1)
    head += [number.setdefault(a.vid, len(number)) if a.tensor is not None else -2 for a in attached]
    head.append(-1)
    head += [(number.setdefault(v, len(number)), pos) for v, pos in late.items()]
    body = [tuple(head)]
    floats = _FLOAT_DTYPES
    for op, ins, outs in tape:
        if _not_groupable(op):
            return None
        codes = []
        for d, v in ins:
            f = floats.get(d.dtype)
            if f is None:
                f = floats[d.dtype] = _is_float(d)
            if v in _SCALAR_VIDS:  # (a Python number's cached tensor: one input per use, see _plan_walk)
                codes.append("p" if f else "q")
                continue
            c = number.setdefault(v, len(number))
            codes.append(c if f else -c - 1)
        body.append((op, tuple(codes), tuple([number.setdefault(v, len(number)) for v in outs])))
    return tuple(body)


class _Walk:
    """A planned grouped backward walk (:meth:`GradManager._grouped`): the ``sequence`` op of its gradient steps,
    where each of its inputs is read (``sources``: (tape position, input index), or (-1, k) for the k-th dy) and
    the attached tensors its results go to (``targets``: positions in the attached list)."""

    __slots__ = ("seq", "sources", "targets")

    def __init__(self, seq, sources, targets):
        self.seq, self.sources, self.targets = seq, sources, targets

    def run(self, gm, tape, dys, attached):
        """The walk on this step's tape (the same signature): its values read from the same places."""
        inputs = [_keep_node(_value(dys[i]._data, dys[i]._vid), dys[i]) if k < 0 else _value(*tape[k][1][i])
                  for k, i in self.sources]
        return self.deliver(gm, inputs, attached)

    def deliver(self, gm, inputs, attached):
        if self.seq is None:
            return {}
        out = apply(self.seq, *inputs)
        delivered, given = {}, []
        for j, g in zip(self.targets, out):
            entry = attached[j]
            t = entry.tensor
            if entry.callbacks:  # (every gradient here is "raw": no op applied the callbacks)
                g = _run_callbacks(t, g, entry.callbacks)
                if g is None:  # (a callback's "no gradient")
                    continue
            given.append((t, g))
            delivered[entry.vid] = g
        gm._deliver_all(given)
        return delivered


class _Remat:
    """Stands in a tape record for a value computed again in the backward pass: ``op`` of the recorded ``ins``
    (its result ``index`` of those with value ids ``vids`` where the op has several)."""
    __slots__ = ("op", "ins", "dtype", "index", "vids")

    def __init__(self, op, ins, dtype, index=None, vids=None):
        self.op, self.ins, self.dtype, self.index, self.vids = op, ins, dtype, index, vids


def _value(data, vid):
    # Re-wrap a recorded input value under its original id so a tracer recognises it.
    t = wrap(data)
    t._vid = vid
    return t


def _keep_node(t, like):
    """``t`` (a dy re-wrapped) with the logical device of the dy ``like``: the gradients the grouped walk computes
    from it show the device the op-by-op walk's do (their first input with one is a dy, as there)."""
    node = getattr(like, "_lnode", None)
    if node is not None:
        t._lnode = node
    return t


def _gradient_inputs(op, ins, flags, given):
    """The positions of the inputs ``ins`` (``(data, value id)``) of a taped ``op`` that get a gradient, given which
    depend on attached tensors (``flags``) and which outputs have one (``given``): float inputs the op does not
    cut (the divisor of ``%``; a compiled graph's inputs its recorded ops give no gradient). One rule for the walk,
    its prediction, the guesses made while recording and the grouped walk's plan."""
    nondiff = _NONDIFF.get(op.name) or ()
    cut = op.prim.nondiff_inputs
    if cut is not None:
        nondiff = cut(dict(op.params), given)
    return tuple(i for i, (data, _) in enumerate(ins) if flags[i] and i not in nondiff and _is_float(data))


def _array_type(data):
    """``(shape, dtype, weak_type)`` of a concrete array, as JAX keys a kernel by it; None for anything else (a
    pending or rematerialized value)."""
    if not isinstance(data, jax.Array) or isinstance(data, jax.core.Tracer):
        return None
    return data.shape, data.dtype, data.weak_type


def _accumulate(grads, vid, g):
    prev = grads.get(vid)
    grads[vid] = g if prev is None else prev + g
