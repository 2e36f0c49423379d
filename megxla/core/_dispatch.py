"""The one dispatch point: :func:`apply` is the only path from Tensors to computation.

Eager execution calls the op's cached ``jax.jit`` kernel. Two kinds of observers hook in here and nowhere
else: gradient recorders (``GradManager``, which append data records to their tape) and an interpreter
(``jit`` tracing / replaying), which may replace the eager computation altogether.

NOTE: this is the eager hot path. The fast case (no interpreter) is: unwrap, call kernel, wrap, and one
truthiness test of the recorder list; keep it that way (see benchmarks/eager_overhead.py).
"""
from __future__ import annotations

import itertools

import numpy as np

from ._tensor import Tensor

__all__ = ["apply", "recorders", "OpError", "push_interpreter", "pop_interpreter", "current_interpreter"]

# Active GradManagers, each with a ``_record(op, inputs, outputs)`` method.
recorders: list = []
# Stack of interpreters (jit tracers); the top one, if any, handles every apply.
_interpreters: list = [None]
_new = object.__new__
_vids = itertools.count(1)


class OpError(ValueError):
    """Bad input to an op: raised before anything is computed or mutated, naming the op, shapes and dtypes."""


def _describe(inputs):
    return ", ".join(f"{tuple(t.shape)}:{np.dtype(t.dtype).name}" for t in inputs)


def op_error(op, inputs, exc):
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


def eager_apply(op, inputs):
    """Compute ``op`` on ``inputs`` now and notify gradient recorders."""
    try:
        out = op.kernel(*[t._data for t in inputs])
    except (TypeError, ValueError, IndexError) as exc:
        raise op_error(op, inputs, exc) from None
    if op.multiple_results:
        outputs = tuple(wrap(o) for o in out)
    else:
        outputs = (wrap(out),)
    if recorders:
        for r in recorders:
            r._record(op, inputs, outputs)
    return outputs


def apply(op, *inputs):
    """Apply ``op`` to Tensors; returns a Tensor, or a tuple of Tensors for multi-result ops."""
    interp = _interpreters[-1]
    outputs = eager_apply(op, inputs) if interp is None else interp.apply(op, inputs)
    return outputs if op.multiple_results else outputs[0]


def push_interpreter(interp):
    _interpreters.append(interp)


def pop_interpreter():
    return _interpreters.pop()


def current_interpreter():
    return _interpreters[-1]
