"""``config.deterministic_kernel`` under auto-jit: no choice by time between modes that round differently.

Without it a step timer runs a step eagerly where that was faster on the machine's load of the moment, so two runs of
one seeded program could compute different bits (auto-jit's ConvNet b8 on a busy CPU: 10, 21 and 50 eager steps in
three runs, losses 2.404729 / 2.404729 / 2.398812 at step 80).
"""
import os
import time
import warnings

import pytest

from megxla.core import _lazy
from megxla.jit import auto_jit_stats
from megxla.jit import _tiers
from megxla.jit._mode_timer import ModeTimer

from test_autojit import _timed_small_steps, auto_jit  # noqa: F401  (auto_jit: the fixture)


@pytest.fixture
def deterministic():
    was, _lazy.DETERMINISTIC[0] = _lazy.DETERMINISTIC[0], True
    yield
    _lazy.DETERMINISTIC[0] = was


def _modes(monkeypatch, same_numbers, steps=100):
    clock, cost = [0.0], {True: 10.0, False: 1.0}  # clusters slower than eager
    monkeypatch.setattr(ModeTimer, "clock", staticmethod(lambda: clock[0]))
    monkeypatch.setattr(ModeTimer, "compile_clock", staticmethod(lambda: 0.0))
    timer, modes = ModeTimer(same_numbers=same_numbers), []
    for _ in range(steps):
        modes.append(timer.next_mode())
        clock[0] += cost[modes[-1]]
    return modes


def test_without_it_a_timer_runs_a_faster_eager_step_eagerly(monkeypatch):
    assert _modes(monkeypatch, same_numbers=False).count(False) > 50


def test_with_it_a_timer_whose_modes_round_apart_runs_clusters_only(monkeypatch, deterministic):
    assert all(_modes(monkeypatch, same_numbers=False))


def test_with_it_an_early_launchs_timer_still_chooses(monkeypatch, deterministic):
    # (launched early or late: the same program, the same bits -- its choice may follow the clock)
    assert _modes(monkeypatch, same_numbers=True).count(False) > 50


def test_the_config_switch_sets_it_and_back(monkeypatch):
    import megxla.config as config
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # (the setter edits it: restored after)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the backend has started: XLA's flag applies to the next process)
        monkeypatch.setattr(config, "deterministic_kernel", True)
        assert _lazy.DETERMINISTIC[0] is True
        config.deterministic_kernel = False
        assert _lazy.DETERMINISTIC[0] is False
        monkeypatch.setattr(config, "deterministic_kernel", True)
        monkeypatch.undo()
    assert _lazy.DETERMINISTIC[0] is False


def test_with_it_the_switch_to_a_background_compile_waits_for_it(monkeypatch, deterministic):
    # a churning part compiled in the background takes over at a fixed run, not at the first after a bounded wait
    monkeypatch.setattr(_tiers, "SWITCH_WAIT", 0.05)
    monkeypatch.setattr(_tiers, "SWITCH_STEPS", 0)

    def optimize():
        time.sleep(0.5)
        return lambda x: ("optimized", x)

    exe = _tiers.tiered(optimize, lambda x: ("quick", x), 1000)
    got = [exe(k)[0] for k in range(_tiers.SWITCH_RUN + 1)]
    assert got == ["quick"] * (_tiers.SWITCH_RUN - 1) + ["optimized"] * 2


def test_with_it_a_small_step_eager_runs_faster_still_runs_as_clusters(auto_jit, monkeypatch, deterministic):
    # test_autojit's small static step, cluster steps 2 ms and eager steps 1 ms: without the switch it runs eagerly
    # after its probe (test_a_small_static_step_runs_eagerly_where_that_is_clearly_faster)
    run = _timed_small_steps(monkeypatch)
    first, modes = run(30, 2.0, 1.0)
    assert all(modes) and auto_jit_stats()["eager_steps"] == 0
    assert run(30, 2.0, 1.0)[0] == first  # (the same program twice: the same bits)
