"""Generated training programs (``scripts/autojit_fuzz.py``) run eagerly and under auto-jit must agree: every host
read, caught error (type, text, line), final value, parameter, optimizer state and the random generator's next draw,
at rtol 1e-5 / atol 1e-6. Three small programs, as regression guards for the sweeps the script runs by hand."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest

from megxla.jit import _autojit

_spec = importlib.util.spec_from_file_location(
    "autojit_fuzz", pathlib.Path(__file__).resolve().parent.parent / "scripts" / "autojit_fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)


@pytest.fixture
def fresh_auto_jit(monkeypatch):
    monkeypatch.setattr(_autojit, "STATIC_TIMER", False)  # (the programs' clusters, not a timer's choice of eager)
    fuzz.fresh()
    import megxla as mge
    saved = mge.config.auto_jit
    yield
    mge.config.auto_jit = saved


# 5: a bad call escaping the GradManager's block at one step, caught around it; a boolean mask kept as a value, an
# astype round trip, caught shape errors. 11: values carried across steps, a matmul, a shape made from a value,
# host reads. 12: two optimizers (SGD with momentum and Adam), a convolution, a selection whose length changes
# every step, values carried across steps.
@pytest.mark.parametrize("seed", [5, 11, 12])
def test_generated_program_agrees_with_eager(fresh_auto_jit, seed):
    gen = fuzz.Gen(seed, n_ops=10)
    gen.steps = 6  # (clusters recur from the second step: a key compiles on its second sight)
    src = gen.source()
    diff, _, eager = fuzz.check(src, f"<autojit_fuzz {seed}>")
    assert diff is None, f"{diff}\n{src}"
    assert not any(e[0] == "crash" for e in eager), eager[-1]  # (the program runs to its end)
