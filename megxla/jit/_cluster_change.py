"""How a new auto-jit cluster differs from the one before it at the same site, in words (:func:`_change`): what
``auto_jit_stats()["changes"]``, ``MEGXLA_AUTO_JIT_LOG=1`` and the warning of a site that keeps changing say.
"""
from __future__ import annotations

import numpy as np


def _signature(ops, avals):
    """Each op with where its inputs come from -- (producer's position, output index, type), or the type of a
    cluster input --, not local ids: those shift with every input added before it."""
    made = {}
    sig = []
    for k, (op, ins, outs) in enumerate(ops):
        sig.append((op, tuple([made.get(i) or avals[i] for i in ins])))
        for j, o in enumerate(outs):
            made[o] = (k, j, avals[o])
    return sig


def _type_text(src, other=None):
    """A signature's input source in words: ``float32[8, 37]``, ``... (result 1 of op 12)``; ``other``: the source it
    is compared with -- where only that one is made in the cluster, this one is said to come from outside it (the same
    type both ways read ``float32[2048], was float32[2048] (result 1 of op 3)``).

    Example:
        >>> t = ((4,), np.dtype("float32"), False)
        >>> _type_text(t, (3, 0, t))
        'float32[4] (an input of the cluster)'
    """
    if type(src[0]) is int:  # (position, output index, type): made by an op of the cluster
        k, j, src = src
        return f"{np.dtype(src[1]).name}{list(src[0])} (result {j + 1} of op {k + 1})"
    text = f"{np.dtype(src[1]).name}{list(src[0])}" + (" (a Python number)" if src[2] else "")
    return text + (" (an input of the cluster)" if other is not None and type(other[0]) is int else "")


def _short(op):
    text = repr(op)
    return text if len(text) <= 160 else text[:157] + "..."


def _change(before, after):
    """In words, how the cluster ``after`` (``(ops, avals)``) differs from ``before``: its first op that differs
    (another op, other parameters -- a Python number baked in --, inputs of other types) and how many do."""
    a, b = _signature(*before), _signature(*after)
    diff = [k for k, (x, y) in enumerate(zip(a, b)) if x != y]
    n = len(diff) + abs(len(a) - len(b))
    if not diff:
        if len(a) == len(b):
            # (what else keys a cluster: which of its values are read after it, and which inputs are one Tensor)
            return ("the same ops on inputs of the same types, with other values kept for later (read after the "
                    "cluster) or one input Tensor given in other places")
        k = min(len(a), len(b))
        if len(b) > len(a):
            return f"{len(b)} ops where the previous cluster had {len(a)}, from op {k + 1} (`{_short(b[k][0])}`) on"
        return f"{len(b)} ops where the previous cluster had {len(a)}, which went on with `{_short(a[k][0])}`"
    k = diff[0]
    (op_a, in_a), (op_b, in_b) = a[k], b[k]
    if op_a != op_b:
        text = f"op {k + 1} of {len(b)} is `{_short(op_b)}` where the previous cluster had `{_short(op_a)}`"
    else:
        inputs = [f"input {j + 1} is {_type_text(y, x)}, was {_type_text(x, y)}"
                  for j, (x, y) in enumerate(zip(in_a, in_b)) if x != y]
        if len(in_a) != len(in_b):
            inputs.append(f"{len(in_b)} inputs, was {len(in_a)}")
        text = f"op {k + 1} of {len(b)} (`{_short(op_b)}`): " + "; ".join(inputs)
    return text + (f" -- {n} ops differ" if n > 1 else "")


def _site_change(st):
    """How a site's latest new cluster differs from the one before it, or None (fewer than two seen)."""
    if st[5] is None or st[6] is None:
        return None
    return _change(st[5], st[6])
