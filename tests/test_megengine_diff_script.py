"""scripts/megengine_diff.py's comparison (the differential run itself needs MegEngine, which CI lacks)."""
import importlib.util
import os

import numpy as np


def _script():
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "megengine_diff.py")
    spec = importlib.util.spec_from_file_location("megengine_diff", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_compare_reports_each_kind_of_disagreement():
    compare = _script().compare
    theirs = {"a": ("ok", np.ones(3, "float32")), "b": ("ok", np.ones(3, "float32")),
              "c": ("ok", np.ones(3, "float32")), "d": ("error", "ValueError: bad"), "e": ("ok", np.ones(2, "int32"))}
    ours = {"a": ("ok", np.ones(3, "float32") + 1e-7), "b": ("ok", np.ones(3, "float32") * 2),
            "c": ("ok", np.ones(4, "float32")), "d": ("ok", np.ones(1)), "e": ("ok", np.ones(2, "float32"))}
    lines = compare(ours, theirs)
    kinds = sorted(line.split()[0] for line in lines)
    assert kinds == ["DTYPE", "SHAPE", "STATUS", "VALUE"], lines
    assert compare(theirs, theirs) == []
