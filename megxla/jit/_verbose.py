"""What a compiled step is called, and ``MGE_VERBOSE_XLA_IR``: print it when it is compiled.

``MGE_VERBOSE_XLA_IR`` (MegEngine's XLA backend setting), read at each compilation, once per executable, to
stderr:

* ``1``: the recorded op graph: each op with its parameters, input and output values with shapes and dtypes,
  and which values are the step's inputs (arguments or state), constants, and outputs;
* ``2``: the StableHLO module handed to XLA;
* ``3``: the HLO module as optimised by XLA.
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np

__all__ = ["exe_name", "level", "report", "format_graph"]


def exe_name(name) -> str:
    """A function name as a valid executable name (XLA modules are ``jit_<name>``): ``<lambda>`` -> ``lambda``."""
    name = re.sub(r"[^0-9A-Za-z_]+", "_", str(name or "step")).strip("_")
    return name or "step"


def level() -> int:
    """``MGE_VERBOSE_XLA_IR`` as 0..3 (0 when unset); a bad value is an error naming the variable."""
    value = os.environ.get("MGE_VERBOSE_XLA_IR", "").strip()
    if not value:
        return 0
    if value not in ("0", "1", "2", "3"):
        raise ValueError(f"MGE_VERBOSE_XLA_IR must be 0, 1, 2 or 3, got {value!r}")
    return int(value)


def _aval(avals, v):
    a = avals.get(v)
    if a is None:
        return "?"
    return f"{np.dtype(a.dtype).name}{list(a.shape)}"


def format_graph(name, seg, entry) -> str:
    """The recorded ops of one executable, readable: ``%out = op[params](%in, ...)`` lines with shapes."""
    rec = entry.rec
    avals = entry.avals
    state = set(rec.input_vids)
    consts = set(getattr(rec, "consts", ()) or ())
    outs = set(seg.out_vids)
    lines = [f"megxla: XLA graph jit_{exe_name(name)} ({len(seg.ops)} ops)"]
    for v in seg.in_vids:
        kind = "state/argument" if v in state else ("constant" if v in consts else "input")
        lines.append(f"  input  %{v}: {_aval(avals, v)}  ({kind})")
    for op, ins, res in seg.ops:
        args = ", ".join(f"%{v}" for v in ins)
        shapes = ", ".join(f"%{v}: {_aval(avals, v)}" for v in res)
        lines.append(f"  {shapes} = {op!r}({args})")
    for v in seg.out_vids:
        lines.append(f"  output %{v}: {_aval(avals, v)}")
    return "\n".join(lines)


def report(name, seg, entry):
    """Print what ``MGE_VERBOSE_XLA_IR`` asks for about a freshly compiled executable (nothing when unset)."""
    lv = level()
    if not lv:
        return
    if lv == 1:
        text = format_graph(name, seg, entry)
    elif lv == 2:
        text = f"megxla: StableHLO of jit_{exe_name(name)}\n{seg.lowered.as_text()}"
    else:
        text = f"megxla: optimized HLO of jit_{exe_name(name)}\n{seg.executable.as_text()}"
    sys.stderr.write(text.rstrip("\n") + "\n")
    sys.stderr.flush()
