"""``auto_jit_report()``: what auto-jit did, in words -- how much ran compiled, where clusters were cut and why, which
lines kept changing and which gave up -- and what in the program would change it.

Why: issue 30 asks that a user "can see why code is slow". ``auto_jit_stats()`` holds the numbers as a dict of some
twenty keys; what a user needs first is the few lines that cost the most, as ``torch._dynamo.explain`` lists graph
breaks with their frames and PyTorch/XLA's metrics report names what compiled (the anchors' lesson 7). The report
is made from ``auto_jit_stats()`` alone, so it says nothing the stats do not hold. ``python -m megxla.run
--auto-jit-report train.py`` (``MEGXLA_AUTO_JIT_REPORT=1``) prints it to stderr when the program ends.
"""
from __future__ import annotations

import atexit
import multiprocessing
import os
import sys

from ._autojit import auto_jit_stats

__all__ = ["auto_jit_report", "print_at_exit"]


def _hints(s, read_lines, eager_lines, steps):
    """What the program could change, from the stats: one line per kind of cost found."""
    out = []
    if s["megamorphic"]:
        out.append("shapes that change at every step (a sequence length, a count) made the lines above give up "
                   "compiling: pad them to a few sizes (buckets) so that each size compiles once")
    # (a read right after ``opt.step()`` counts as the step's cut: a line cut by reads about as often as steps end
    # reads in the middle of the step)
    if steps and any(2 * n >= steps for n, _ in read_lines):
        out.append("a host read in the middle of a training step (`.item()`, `.numpy()`, `int()`, `print`; the "
                   "`host read` lines above) runs the ops before it as a cluster of their own and the rest of the "
                   "step as another; where the value is only logged, read it after `opt.step()` or every n-th step")
    if eager_lines:
        out.append("an op cut as `... runs eagerly` has an output shape that depends on values, or stays between "
                   "clusters by design (a cross-process collective); where it is a selection, a mask kept on the "
                   "device (`F.where(mask, x, 0)`, `(x * mask).sum()`) keeps the cluster whole")
    if s["eager_steps"]:
        out.append(f"{s['eager_steps']} steps ran eagerly because they were faster that way (their clusters kept "
                   f"changing, or the step's compute is as short as its Python): auto-jit brings these nothing")
    if s["clusters"] and s["eager_clusters"] > s["clusters"] // 2 and not s["eager_steps"]:
        out.append("most clusters ran op by op: their keys had not recurred yet (a short program), or they are "
                   "too small to pay for a launch")
    return out


def auto_jit_report(top: int = 8) -> str:
    """What auto-jit did so far, in words: clusters and how they ran, compilations, the lines that cut clusters
    most often and why, the lines whose clusters changed or gave up compiling, and hints on what to change.

    Args:
        top: how many lines of each list to show (the most frequent first).

    Returns:
        the report, a multi-line string (``auto_jit_stats()`` holds the same numbers as a dict).

    Example:
        >>> from megxla.jit import auto_jit_report, reset_auto_jit_stats
        >>> reset_auto_jit_stats()
        >>> print(auto_jit_report().splitlines()[0])
        megxla auto-jit report: no cluster ran (is auto-jit on? megxla.config.auto_jit = True)
    """
    s = auto_jit_stats()
    if not s["clusters"] and not s["eager_steps"] and not s["eager_ops"]:
        return "megxla auto-jit report: no cluster ran (is auto-jit on? megxla.config.auto_jit = True)"
    n = s["clusters"]
    lines = ["megxla auto-jit report" + (f" (process {os.getpid()})" if multiprocessing.parent_process() else "")]
    lines.append(f"  clusters run         {n:,} ({s['ops']:,} ops collected, {s['ops'] / n if n else 0:.1f} a "
                 f"cluster)")
    # (counted per executable run and per op-by-op run: a cluster run in parts counts once per part)
    lines.append(f"    from the cache     {s['cache_hits']:,} executable runs, {s['early_launches']:,} of them "
                 f"launched early")
    lines.append(f"    op by op           {s['eager_clusters']:,} runs: new keys before they recur, clusters too small "
                 f"to launch, lines that gave up")
    if s["split_clusters"] or s["chunked_clusters"]:
        lines.append(f"    in parts           {s['split_clusters']:,} clusters (their changing ops run apart); in "
                     f"chunks of a loop's body {s['chunked_clusters']:,}")
    lines.append(f"  compilations         {s['compiled']:,} in {s['compile_time']:.2f} s"
                 + (f" (and {s['early_compiled']:,} for early launches)" if s["early_compiled"] else "")
                 + (f"; {s['tiered']:,} large ones compiled quickly first, {s['tier_ups']:,} optimized since"
                    if s["tiered"] else ""))
    if s["eager_steps"]:
        lines.append(f"  steps run eagerly    {s['eager_steps']:,} (faster than as clusters)")
    if s["eager_reads"]:
        lines.append(f"  loop iterations run eagerly {s['eager_reads']:,} (a read every few ops)")
    lines.append(f"  ops outside clusters {s['eager_ops']:,}; host reads computed without a cut "
                 f"(peeks) {s['peeks']:,}")
    cuts = s["cuts"]
    steps = sum(c for c, reason, _ in cuts if reason == "opt.step")
    # (reads made before the first step -- a model's initialisation drawing on the host -- cut no step)
    setup = s.get("setup_reads", {})
    read_lines = [(c - setup.get(where, 0), where) for c, reason, where in cuts if reason == "host read"]
    eager_lines = [(c, reason, where) for c, reason, where in cuts if reason.endswith(" runs eagerly")]
    if cuts:
        lines.append("where clusters were cut (most often first):")
        width = len(f"{cuts[0][0]:,}")
        for c, reason, where in cuts[:top]:
            lines.append(f"  {c:>{width},}  {reason:<14s} {where}")
        if len(cuts) > top:
            lines.append(f"  ... and {len(cuts) - top} more lines (auto_jit_stats()['cuts'])")
    if s["changes"]:
        lines.append("lines whose clusters changed (each change a new key: compiled, or run op by op until it "
                     "recurs):")
        for where, change in s["changes"][:top]:
            lines.append(f"  {where}: {change}")
    if s["megamorphic"]:
        lines.append("lines that gave up compiling (too many different clusters; run eagerly):")
        for where in s["megamorphic"][:top]:
            lines.append(f"  {where}")
    hints = _hints(s, read_lines, eager_lines, steps)
    if hints:
        lines.append("what would help:")
        lines.extend(f"  - {h}" for h in hints)
    return "\n".join(lines)


_registered = [False]


def print_at_exit():
    """Print :func:`auto_jit_report` to stderr when the program ends (``MEGXLA_AUTO_JIT_REPORT=1``; once per
    process, and only where a cluster ran: a DataLoader worker that collected nothing prints nothing).

    Example:
        >>> print_at_exit()  # doctest: +SKIP
    """
    if _registered[0]:
        return
    _registered[0] = True

    def _print():
        s = auto_jit_stats()
        if s["clusters"] or s["eager_steps"]:
            print(auto_jit_report(), file=sys.stderr, flush=True)
    atexit.register(_print)
