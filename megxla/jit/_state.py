"""Flattening the arguments of a traced function: which tensors it may read and write (its *state*), and a
hashable signature that keys the executable cache."""
from __future__ import annotations

import numpy as np

from ..core._tensor import Tensor


def _is_module(obj):
    return hasattr(obj, "named_tensors") and hasattr(obj, "parameters")


def _is_optimizer(obj):
    return hasattr(obj, "param_groups") and hasattr(obj, "_state")


def collect(args, kwargs):
    """Return ``(tensors, signature)``: every distinct tensor reachable from the arguments (arguments
    themselves, module parameters and buffers, optimizer slots), and a hashable description of the argument
    structure, shapes and dtypes, and static (non-tensor) values.

    ``.grad`` attributes of these tensors are state too, but do not key the cache: as in MegEngine, a compiled
    step computes the gradients its recording computed, whether or not a stale ``.grad`` is present."""
    tensors: list = []
    index: dict = {}

    def add(t):
        i = index.get(id(t))
        if i is None:
            i = index[id(t)] = len(tensors)
            tensors.append(t)
        return ("T", i, t.shape, t.dtype.str)

    def walk(obj):
        if isinstance(obj, Tensor):
            return add(obj)
        if isinstance(obj, (list, tuple)):
            return (type(obj).__name__,) + tuple(walk(o) for o in obj)
        if isinstance(obj, dict):
            if "params" in obj:  # an optimizer param group: hyper-parameter values are graph inputs, not keys
                return ("group",) + tuple((k, walk(v) if k == "params" else type(v).__name__)
                                          for k, v in obj.items())
            return ("dict",) + tuple((k, walk(v)) for k, v in obj.items())
        if _is_module(obj):
            named = list(obj.named_tensors())
            return ("module", id(obj), getattr(obj, "training", None), tuple((n, add(t)) for n, t in named))
        if _is_optimizer(obj):
            groups = []
            for g in obj.param_groups:
                params = g["params"]
                groups.append((tuple(add(p) for p in params),
                               tuple(sorted((k, type(v).__name__) for k, v in g.items() if k != "params"))))
            slots = []
            for p, st in obj._state.items():
                slots.append((index.get(id(p)), tuple((k, add(v) if isinstance(v, Tensor) else v)
                                                       for k, v in sorted(st.items()))))
            return ("optimizer", id(obj), tuple(groups), tuple(slots))
        if obj is None or isinstance(obj, (bool, int, float, str, bytes, np.generic)):
            return ("c", obj)
        try:
            hash(obj)
            return ("h", obj)
        except TypeError:
            return ("o", id(obj))

    sig = (walk(args), walk(kwargs))
    return tensors, sig
