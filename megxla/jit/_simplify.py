"""Algebraic simplification of a recording before it is compiled (``trace(opt_level >= 1)``), as MegEngine's graph
optimiser does: the rewritten graph is numerically safer than the ops the body ran.

- ``y / y`` -> ones (floating ``y``; MegEngine folds it too, so ``0 / 0`` gives 1 in a traced step);
- ``log(exp(x))`` -> ``x``;
- ``log(exp(a) + exp(b))`` -> ``logaddexp(a, b)`` (finite where ``exp`` overflows);
- ``log(sum(exp(x), axis))`` -> ``logsumexp(x, axis)``.

A rewrite replaces only the op that produces the result (same output value id), so the recording's other
consumers and the replay with the host are untouched; ops the rewritten one no longer needs are pruned when the
segment is built. ``opt_level=0`` rewrites nothing.
"""
from __future__ import annotations

import numpy as np

from ..core.ops import elemwise as _E, reduction as _R, shape as _S

__all__ = ["simplify"]

_IDENTITY = _E.UNARY["pos"]  # ``+x``: the result of a rewrite that is one of its inputs


def simplify(ops, avals, opt_level):
    """Return ``(ops, aliases)``: the rewritten op list and ``{output vid: input vid}`` for results that became
    one of their inputs (their op is an identity; graph views show the input itself).

    Args:
        ops: ``[(op, in_vids, out_vids)]`` of a recording.
        avals: ``{vid: ShapeDtypeStruct}``.
        opt_level: rewrites happen at 1 and above.
    """
    if opt_level is None or opt_level < 1:
        return ops, {}
    producer = {}
    out, aliases = [], {}
    for rec in ops:
        op, ins, outs = rec
        new = _rewrite(op, ins, outs, producer, avals)
        if new is not None:
            rec = new
            if new[0] is _IDENTITY.bind():
                aliases[outs[0]] = new[1][0]
        for v in outs:
            producer[v] = rec
        out.append(rec)
    return out, aliases


def _made_by(producer, vid, name):
    rec = producer.get(vid)
    return rec if rec is not None and rec[0].name == name else None


def _floating(avals, vid):
    a = avals.get(vid)
    return a is not None and np.issubdtype(a.dtype, np.floating)


def _rewrite(op, ins, outs, producer, avals):
    name = op.name
    if name == "div" and len(ins) == 2 and ins[0] == ins[1] and _floating(avals, ins[0]) \
            and avals[ins[0]].dtype == avals[outs[0]].dtype:
        return (_S.full_like.bind(value=1), (ins[0],), outs)
    if name != "log":
        return None
    (x,) = ins
    e = _made_by(producer, x, "exp")
    if e is not None:  # log(exp(x)) -> x
        return (_IDENTITY.bind(), e[1], outs)
    add = _made_by(producer, x, "add")
    if add is not None:
        ea, eb = (_made_by(producer, v, "exp") for v in add[1])
        if ea is not None and eb is not None and _floating(avals, ea[1][0]) and _floating(avals, eb[1][0]):
            return (_E.BINARY["logaddexp"].bind(), (ea[1][0], eb[1][0]), outs)
    s = _made_by(producer, x, "reduce_sum")
    if s is not None:
        e = _made_by(producer, s[1][0], "exp")
        if e is not None and _floating(avals, e[1][0]):
            p = dict(s[0].params)
            return (_R.logsumexp.bind(axis=p["axis"], keepdims=p["keepdims"]), e[1], outs)
    return None
