"""``trace(profiling=True).get_profile()``: what XLA compiled for a traced function, per executable.

MegEngine's profile is its graph profiler's per-operator timing; XLA fuses operators, so megxla reports per
compiled executable: XLA's cost analysis (flops, bytes accessed, its time estimate), the operators of the
recording that executable computes (MegEngine type names, as in a dumped graph), and compile time.
"""
from __future__ import annotations

__all__ = ["get_profile"]


def _cost(seg):
    cost = seg.executable.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return {k: float(v) for k, v in (cost or {}).items() if isinstance(v, (int, float))}


def get_profile(tracer):
    """``{"profiler": {"executables": [...], "compile_time": seconds, "num_calls": n}}``; see module docstring.

    Raises:
        RuntimeError: the trace was not built with ``profiling=True``, or nothing is compiled yet.
    """
    from ._dump import opr_type
    if not getattr(tracer, "profiling", False):
        raise RuntimeError(f"{tracer._what}.get_profile: build the trace with profiling=True")
    exes = []
    for sig, variants in tracer._cache.items():
        for entry in variants:
            for k, seg in enumerate(entry.segments or ()):
                exes.append({"name": f"{tracer.__name__}[{len(exes)}]", "segment": k,
                             "oprs": [{"type": t, "name": n} for t, n in (opr_type(op) for op, _, _ in seg.ops)],
                             "cost": _cost(seg)})
    if not exes:
        raise RuntimeError(f"{tracer._what}.get_profile: nothing compiled yet; call the traced function twice")
    return {"profiler": {"executables": exes, "compile_time": tracer.compile_time, "num_calls": tracer.num_calls}}
