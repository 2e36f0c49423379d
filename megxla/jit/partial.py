"""``partial_trace``: compile one static piece of an eager program (a model's forward, an optimizer's
``_updates``) into an executable that runs as ONE op of the surrounding program; its backward is the compiled
``jax.vjp`` of the recorded graph, like every op's."""
from __future__ import annotations

import functools

from . import _state
from .tracing import trace

__all__ = ["partial_trace"]


class _PartialTrace(trace):
    _default_without_host = True
    _strict_without_host = False
    _what = "partial_trace"
    _donate = False  # its inputs may be held by an outer GradManager's tape
    _allow_external = False

    def __init__(self, function, backend="default", trace_gmcallback=False, **options):
        super().__init__(function, **options)
        self.backend = backend
        self.trace_gmcallback = trace_gmcallback
        self._sig = None

    def _call(self, *args, **kwargs):
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
                return out
            return self._call_variants(variants, args, kwargs, state, sig)


def partial_trace(func=None, *, backend="default", without_host=True, trace_gmcallback=False, **trace_options):
    """Compile ``func`` into one op of the surrounding eager program, with a compiled backward.

    The first call records ``func`` eagerly; the next compiles it; later calls with the same signature run
    the executable as a single op (``gm.backward`` outside differentiates through it). A call with another
    signature runs ``func`` eagerly. State reachable from the arguments that ``func`` reassigns (BatchNorm
    statistics, an optimizer's parameters and slots) is written back in place.

    Args:
        func: the function (e.g. ``type(model).forward``, ``type(optimizer)._updates``).
        backend: ``"xla"`` (``"default"`` is the same here: XLA is the only backend).
        without_host: must be True.
        trace_gmcallback: GradManager callbacks of parameters used inside run on the gradients that the
            compiled backward returns (eagerly, as part of ``gm.backward``); accepted for compatibility.
        trace_options: ``capture_as_const`` and the other :class:`trace` options.

    Returns:
        the wrapped callable.

    Example:
        >>> model.forward = functools.partial(partial_trace(type(model).forward, backend="xla"), model)
    """
    if func is None:
        return functools.partial(partial_trace, backend=backend, without_host=without_host,
                                 trace_gmcallback=trace_gmcallback, **trace_options)
    if not without_host:
        raise ValueError("partial_trace: without_host=False is not supported; the compiled op runs no Python")
    return _PartialTrace(func, backend=backend, trace_gmcallback=trace_gmcallback, **trace_options)
