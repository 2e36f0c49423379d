"""``partial_trace``: compile one static piece of an eager program (a model's forward, an optimizer's
``_updates``) into an executable that runs as ONE op of the surrounding program; its backward is the compiled
``jax.vjp`` of the recorded graph, like every op's."""
from __future__ import annotations

import functools
import weakref

import jax
import numpy as np

from ..core import _dispatch, _registry
from ..core._dispatch import push_interpreter, pop_interpreter, current_interpreter
from ..core._elemwise_front import SCALAR_VIDS
from ..core._op import Primitive
from ..core._tensor import Tensor
from ..core.dtypes import is_float
from . import _state
from ._recording import Recorder, make_replay
from .tracing import trace, _Graph, _recorded

__all__ = ["partial_trace"]


class _CallbackGraph(_Graph):
    """A compiled forward whose backward also runs the GradManager callbacks recorded for some inputs
    (``callbacks``: ``{input index: chain(param, grad) -> grad}``, pure JAX functions)."""

    def __init__(self, replay, name, callbacks, recorded=None):
        super().__init__(replay, name, recorded)
        self.callbacks = callbacks


def _graph_grad(params, primals, cts):
    # jax.vjp of the same replay as xla_graph's, then each recorded callback chain on its input's gradient:
    # the callbacks' ops are part of the compiled backward, their Python ran once, while recording.
    graph = params["graph"]
    _, pull = jax.vjp(graph.replay, *primals)
    grads = list(pull(tuple(cts)))
    for i, chain in graph.callbacks.items():
        grads[i] = chain(primals[i], grads[i])
    return grads


XLA_GRAPH_GMCALLBACK = Primitive("xla_graph_gmcallback", lambda *arrays, graph: graph.replay(*arrays),
                                 multiple_results=True, grad=_graph_grad, transient=True,
                                 callbacks_applied=lambda params: frozenset(params["graph"].callbacks),
                                 nondiff_inputs=lambda params, given: params["graph"].nondiff(given))

# id(tensor) -> [(weakref to the tensor, weakref to the recording _Entry, state index)]: inputs of recorded
# partial traces (trace_gmcallback=True) whose GradManager callbacks have not been recorded yet.
_WAITING: dict = {}


def _record_callbacks(t, g, callbacks):
    """``GradManager`` callback runner: for an input of a partial trace that waits for its callbacks, run them
    (their side effects happen, as on any eager backward) under a recorder, and keep the recording as a pure
    function ``chain(param, grad)`` for the partial trace's compiled backward."""
    waiting = _WAITING.pop(id(t), None)
    if not waiting or current_interpreter() is not None:
        return None
    entries = [(e, i) for tref, eref, i in waiting for e in (eref(),) if tref() is t and e is not None]
    if not entries:
        return None
    recorder = Recorder([t, g], capture_as_const=True, what="partial_trace (GradManager callback)")
    push_interpreter(recorder)
    try:
        out = g
        for cb in callbacks:
            out = cb(t, out)
    finally:
        pop_interpreter()
    chain = None
    rec = recorder.rec
    if isinstance(out, Tensor) and not rec.reads and not rec.hyper and out.shape == g.shape \
            and _self_contained(recorder, out._vid):
        chain = _chain(rec, out._vid)
    for entry, i in entries:
        entry.gm_callbacks[i] = chain  # None: not compilable (it read values on the host): stays eager
        # (which callbacks they were: a later backward through a GradManager with other callbacks for this input,
        # or none, must not get these compiled in -- _callbacks_current)
        entry.gm_callback_fns[i] = tuple(callbacks)
    return out


def _callbacks_current(fns, state):
    """Whether every recording GradManager of this thread that has one of the inputs attached has the very
    callbacks (by identity, in order) that were compiled into the backward for it: ``fns`` is
    ``{state index: callbacks}``. A step recorded under ``GradManager().attach(ps, callbacks=[cb])`` and called
    later under a manager without them must not apply ``cb`` (its backward then runs the eager callbacks)."""
    for r in _dispatch.recorders:
        attached = getattr(r, "_attached", None)
        if not attached:
            continue
        for i, recorded in fns.items():
            t = state[i]
            a = attached.get(id(t))
            if a is None or a.ref() is not t:
                continue
            now = a.callbacks
            if len(now) != len(recorded) or any(x is not y for x, y in zip(now, recorded)):
                return False
    return True


def _self_contained(recorder, out_vid):
    # Every value the callbacks computed from is the parameter, the gradient, a number or a tensor they made, or
    # their own result: a tensor that existed before (the parameter's current ``.grad``, a scale kept on an
    # object) changes between calls, and baked into the compiled backward it would be silently stale.
    rec = recorder.rec
    made = {v for v in rec.consts if v >= recorder.first_vid or v in SCALAR_VIDS}
    known = set(rec.input_vids[:2]) | made | {v for _, _, outs in rec.ops for v in outs}
    return out_vid in known and all(v in known for _, ins, _ in rec.ops for v in ins)


def _chain(rec, out_vid):
    consts = list(rec.consts.items())
    replay = make_replay(rec.ops, rec.input_vids[:2] + [v for v, _ in consts], [out_vid])
    arrays = [a for _, a in consts]

    def chain(param, grad):
        return replay(param, grad, *arrays)[0]

    return chain


_registry.register_callback_runner(_record_callbacks)


class _PartialTrace(trace):
    _default_without_host = True
    _strict_without_host = False
    _what = "partial_trace"
    _donate = False  # its inputs may be held by an outer GradManager's tape
    _allow_external = False

    def __init__(self, function, backend="default", trace_gmcallback=True, **options):
        super().__init__(function, **options)
        self.backend = backend
        self.trace_gmcallback = trace_gmcallback
        self._sig = None

    def _call(self, *args, **kwargs):
        # NumPy arguments become Tensors (graph inputs read at every call), as in trace: keyed by ``id`` and baked
        # in, a new array reusing a freed one's id ran with the old values
        args, kwargs = _state.convert_numpy(args, kwargs)
        tensors, sig = _state.collect(args, kwargs)
        if self._sig is not None and sig != self._sig:
            # Compiled for another signature: run this call eagerly (correct, just not compiled).
            return self.__wrapped__(*args, **kwargs)
        state = tensors + [self._rng_key]
        with self._rng_swapped():
            variants = self._cache.get(sig)
            if variants is None:
                entry, out = self._record(args, kwargs, state, sig)
                if entry is not None:
                    self._sig = sig
                    if self.trace_gmcallback:
                        self._wait_for_callbacks(entry, state[:-1])
                return out
            return self._call_variants(variants, args, kwargs, state, sig)

    def _wait_for_callbacks(self, entry, tensors):
        # The gradients of these inputs meet their GradManager callbacks in the backward that follows this
        # recording call: record the callbacks there (_record_callbacks), compile them in at the next call.
        entry.gm_callbacks = {}
        entry.gm_callback_fns = {}
        ref = weakref.ref(entry)
        for i, t in enumerate(tensors):
            if is_float(t.dtype):
                _WAITING.setdefault(id(t), []).append((weakref.ref(t), ref, i))

    def _compile(self, entry):
        super()._compile(entry)
        chains = getattr(entry, "gm_callbacks", None)
        for key in [k for k, w in _WAITING.items() if any(eref() is entry for _, eref, _ in w)]:
            _WAITING[key] = [w for w in _WAITING[key] if w[1]() is not entry]
            if not _WAITING[key]:
                del _WAITING[key]
        if not chains:
            return
        seg = entry.segments[0]
        position = {v: k for k, v in enumerate(seg.in_vids)}
        callbacks = {}
        for i, chain in chains.items():
            k = position.get(entry.rec.input_vids[i])
            if chain is not None and k is not None:
                callbacks[k] = chain
        if not callbacks:
            return
        kernel = entry.graph_op._kernel
        entry.plain_graph_op = entry.graph_op
        entry.graph_op = XLA_GRAPH_GMCALLBACK.bind(graph=_CallbackGraph(seg.run, self.__name__, callbacks,
                                                                        _recorded(entry)))
        entry.graph_op._kernel = kernel
        entry.callback_graph_op = entry.graph_op
        entry.callback_fns = {i: entry.gm_callback_fns[i] for i, chain in chains.items()
                              if chain is not None and position.get(entry.rec.input_vids[i]) is not None}

    def _run(self, entry, state):
        fns = getattr(entry, "callback_fns", None)
        if fns:
            # the backward with the recorded callbacks compiled in only where the managers recording now have
            # those callbacks; else the plain graph, whose backward leaves the callbacks to GradManager.backward
            entry.graph_op = entry.callback_graph_op if _callbacks_current(fns, state) else entry.plain_graph_op
        return super()._run(entry, state)


def partial_trace(func=None, *, backend="default", without_host=True, trace_gmcallback=True, **trace_options):
    """Compile ``func`` into one op of the surrounding eager program, with a compiled backward.

    The first call records ``func`` eagerly; the next compiles it; later calls with the same signature run
    the executable as a single op (``gm.backward`` outside differentiates through it). A call with another
    signature runs ``func`` eagerly. State reachable from the arguments that ``func`` reassigns (BatchNorm
    statistics, an optimizer's parameters and slots) is written back in place.

    Args:
        func: the function (e.g. ``type(model).forward``, ``type(optimizer)._updates``).
        backend: ``"xla"`` (``"default"`` is the same here: XLA is the only backend).
        without_host: must be True.
        trace_gmcallback: the GradManager callbacks of the inputs (parameters) are part of the compiled
            backward: they run in Python during the recording call's ``gm.backward`` (which records them),
            later calls apply their recorded ops inside the executable and ``gm.backward`` does not call them
            again (MegEngine: "side effects only while tracing"). Like any traced code, a Python decision in a
            callback is taken once, while recording. A callback that reads values on the host, or a tensor
            that existed before it ran, stays eager. False: the callbacks run in Python on every backward.
        trace_options: ``capture_as_const`` and the other :class:`trace` options.

    Returns:
        the wrapped callable.

    Example:
        >>> import functools, numpy as np, megxla as mge, megxla.module as M
        >>> from megxla.autodiff import GradManager
        >>> model = M.Linear(3, 2)
        >>> model.forward = functools.partial(partial_trace(type(model).forward, backend="xla"), model)
        >>> gm = GradManager().attach(model.parameters())
        >>> for _ in range(3):  # records, compiles, runs the executable (forward and backward)
        ...     with gm:
        ...         gm.backward(model(mge.Tensor(np.ones((4, 3), "float32"))).sum())
        >>> model.weight.grad.shape, model.forward.func.num_compiled
        ((2, 3), 1)
    """
    if func is None:
        return functools.partial(partial_trace, backend=backend, without_host=without_host,
                                 trace_gmcallback=trace_gmcallback, **trace_options)
    if not without_host:
        raise ValueError("partial_trace: without_host=False is not supported; the compiled op runs no Python")
    return _PartialTrace(func, backend=backend, trace_gmcallback=trace_gmcallback, **trace_options)
