"""XLA:CPU's schedule of a long-running program, chosen by timing both executables (megxla/jit/_schedules.py)."""
import itertools
import os
import threading
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import _schedules, _tiers, xla_trace

pytestmark = pytest.mark.skipif(_schedules.other_options() is None,
                                reason="no other XLA schedule to choose on this backend")


class _Clock:
    """A clock the test moves: a run of the default executable takes ``default`` seconds, the other's ``other``."""

    def __init__(self, default, other):
        self.now, self.default, self.other = 0.0, default, other

    def perf_counter(self):
        return self.now


class _Lowered:
    """A lowered program whose compile with the other schedule's options gives a run taking ``clock.other``."""

    def __init__(self, clock, ran):
        self.clock, self.ran = clock, ran
        self.lowered = jax.jit(lambda x: jnp.tanh(x @ x) + 1.0).lower(jnp.ones((8, 8)))

    def compile(self, compiler_options=None):
        exe = self.lowered.compile(compiler_options=compiler_options)
        kind = "other" if compiler_options else "default"

        def run(*args):
            self.ran.append(kind)
            self.clock.now += getattr(self.clock, kind)
            return exe(*args)
        return run


def _choice(monkeypatch, clock, seconds=0.0):
    monkeypatch.setattr(_schedules, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    ran = []
    lowered = _Lowered(clock, ran)
    return _schedules.ScheduleChoice(lowered, lowered.compile(), seconds), ran


def _drive(choice, ran, clock, calls, between=0.0):
    x = jnp.full((8, 8), 0.1)
    outs = []
    for _ in range(calls):
        outs.append(np.asarray(choice(x)))
        clock.now += between  # (the step's other work)
        if isinstance(choice.thread, threading.Thread):
            choice.thread.join()  # (the other schedule's compile: done before the next run, as on a quiet machine)
    return outs


def test_the_other_schedule_is_kept_where_its_runs_are_faster(monkeypatch):
    before = dict(_schedules.stats)
    clock = _Clock(default=0.10, other=0.07)
    choice, ran = _choice(monkeypatch, clock)
    disturbed = _tiers.disturbed[0]
    outs = _drive(choice, ran, clock, 30)
    assert choice.lowered is None and choice.other is None  # decided
    # (each run while the other compiled or the two took turns was counted: a step timer times no such step)
    assert _tiers.disturbed[0] - disturbed >= 2 * _schedules.PROBE + 1
    after = _tiers.disturbed[0]
    _drive(choice, ran, clock, 3)
    assert _tiers.disturbed[0] == after
    k = ran.index("other")  # (its warm-up, then each in turn)
    assert ran[k:k + 2 * _schedules.PROBE + 1].count("default") == _schedules.PROBE
    _drive(choice, ran, clock, 3)
    assert ran[-3:] == ["other"] * 3
    assert _schedules.stats["other"] == before["other"] + 1
    assert all(np.array_equal(o, outs[0]) for o in outs)  # both schedules: the same bits


def test_the_default_stays_where_the_other_is_not_faster_by_the_margin(monkeypatch):
    clock = _Clock(default=0.10, other=0.099)
    choice, ran = _choice(monkeypatch, clock)
    _drive(choice, ran, clock, 30)
    assert choice.lowered is None and "other" in ran
    _drive(choice, ran, clock, 3)
    assert ran[-3:] == ["default"] * 3


class _NoisyClock(_Clock):
    """The other schedule's runs: faster in the first half of each probe, not in the second (``noisy_probes``
    probes; then faster throughout)."""

    def __init__(self, noisy_probes):
        super().__init__(default=0.10, other=0.07)
        self.noisy_probes, self.other_runs = noisy_probes, 0

    def __getattribute__(self, name):
        if name != "other":
            return object.__getattribute__(self, name)
        k = self.other_runs
        self.other_runs += 1
        probe, run = (k - 1) // _schedules.PROBE, (k - 1) % _schedules.PROBE  # (run 0: the warm-up)
        return 0.07 if probe >= self.noisy_probes or run < _schedules.PROBE // 2 else 0.10


@pytest.mark.parametrize("noisy", [1, _schedules.ROUNDS])
def test_a_probe_whose_halves_disagree_is_run_again(monkeypatch, tmp_path, noisy):
    # (ResNeXt-IBN's other schedule, 14% faster alternating on a quiet machine: 7% in one half of a probe, 1% in the
    # other amid the steps' noise -- the default kept, and the verdict kept for every later process)
    monkeypatch.setattr(_schedules, "_kept", lambda key: None if key is None else str(tmp_path / f"{key}.schedule"))
    before = dict(_schedules.stats)
    clock = _NoisyClock(noisy)
    choice, ran = _choice(monkeypatch, clock)
    choice.key = "k"
    _drive(choice, ran, clock, 30 + 2 * _schedules.PROBE * _schedules.ROUNDS)
    assert choice.lowered is None and choice.other is None  # decided
    assert choice.rounds == min(noisy + 1, _schedules.ROUNDS)  # (probed again while the halves disagreed)
    if noisy < _schedules.ROUNDS:  # (the next probe agreed: the other, kept)
        assert ran[-1] == "other" and (tmp_path / "k.schedule").read_text() == "other"
    else:  # (never agreed: the default, and no verdict kept -- the next process times it again)
        assert ran[-1] == "default" and not (tmp_path / "k.schedule").exists()
        assert _schedules.stats["undecided"] == before["undecided"] + 1


def test_a_short_program_never_compiles_the_other(monkeypatch):
    clock = _Clock(default=_schedules.MIN_RUN / 4, other=0.0)
    choice, ran = _choice(monkeypatch, clock)
    _drive(choice, ran, clock, 10, between=_schedules.MIN_RUN / 4)
    assert choice.lowered is None and choice.thread is None and "other" not in ran


def test_the_other_compiles_only_once_the_runs_took_rent_times_as_long_as_the_compile(monkeypatch):
    clock = _Clock(default=0.10, other=0.05)
    choice, ran = _choice(monkeypatch, clock, seconds=1.0 / _schedules.RENT)
    _drive(choice, ran, clock, 10)  # (the first run untimed; then 0.1 s a run: 0.9 s of the 1 s)
    assert choice.thread is None and choice.lowered is not None
    flying = _tiers.in_flight[0]
    _drive(choice, ran, clock, 3)
    assert choice.thread is not None
    # (the step timers wait while the other compiles, not after: this program may never run again)
    assert _tiers.in_flight[0] == flying


def test_xla_flags_naming_the_scheduler_leave_xla_its_choice(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_concurrency_optimized_scheduler=false")
    assert _schedules.other_options() is None
    lowered = jax.jit(lambda x: x + 1).lower(jnp.ones(2))
    assert not isinstance(_schedules.choose(lowered, lowered.compile), _schedules.ScheduleChoice)


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.body = M.Sequential(M.Conv2d(3, 8, 3, padding=1), M.BatchNorm2d(8), M.ReLU(),
                                 M.Conv2d(8, 8, 3, groups=2), M.AdaptiveAvgPool2d(1))
        self.fc = M.Linear(8, 4)

    def forward(self, x):
        return self.fc(F.flatten(self.body(x), 1))


def _train(steps, monkeypatch, switch, kept_in):
    """``steps`` of a ConvNet step under ``xla_trace``; ``switch``: its executable changes schedule after its first
    runs; ``kept_in``: the directory of the choices kept for the next process."""
    monkeypatch.setattr(_schedules, "_kept", lambda key: None if key is None else str(kept_in / f"{key}.schedule"))
    if switch:
        ticks = itertools.count()  # (a clock of one second per reading: every run "long", the compile "short")
        monkeypatch.setattr(_schedules, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))
        monkeypatch.setattr(_schedules, "MIN_RUN", 0.0)
        monkeypatch.setattr(_schedules, "WATCH", 1)
        # (no rent: the compile's seconds are the real clock's, and where it took over 2 s -- a loaded machine, or
        # this test alone in a process -- the fake clock's runs had not paid 4 times that within the steps)
        monkeypatch.setattr(_schedules, "RENT", 0.0)
        monkeypatch.setattr(_schedules, "PROBE", 1)
        monkeypatch.setattr(_schedules, "MARGIN", -1e9)  # (kept whatever the times)
    else:
        monkeypatch.setattr(_schedules, "ENABLED", False)
    mge.random.seed(3)
    net = _Net()
    gm = GradManager().attach(net.parameters())
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)

    @xla_trace
    def step(net, opt, x, y):
        with gm:
            loss = F.nn.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    rng = np.random.RandomState(0)
    losses = []
    for _ in range(steps):
        losses.append(step(net, opt, mge.Tensor(rng.randn(4, 3, 8, 8).astype("float32")),
                           mge.Tensor(rng.randint(0, 4, 4).astype("int32"))).numpy())
        exe = step._entry().segments[0].executable
        if isinstance(exe, _schedules.ScheduleChoice) and isinstance(exe.thread, threading.Thread):
            exe.thread.join()
    params = [p.numpy() for p in net.parameters()] + [b.numpy() for b in net.buffers()]
    return losses, params, step._entry().segments[0].executable


def test_a_step_that_changes_schedule_computes_the_same_bits(monkeypatch, tmp_path):
    before = _schedules.stats["other"]
    losses, params, exe = _train(10, monkeypatch, switch=True, kept_in=tmp_path)
    assert isinstance(exe, _schedules.ScheduleChoice) and exe.lowered is None
    assert _schedules.stats["other"] == before + 1  # the other schedule ran the later steps
    monkeypatch.undo()
    ref_losses, ref_params, ref_exe = _train(10, monkeypatch, switch=False, kept_in=tmp_path)
    assert not isinstance(ref_exe, _schedules.ScheduleChoice)
    assert all(np.array_equal(a, b) for a, b in zip(losses, ref_losses))
    assert all(np.array_equal(a, b) for a, b in zip(params, ref_params))


def _independent_dots():
    """A program whose two schedules differ in order: six independent products."""
    def f(x, ws):
        return sum(jnp.tanh(x @ w).sum() for w in ws)
    return jax.jit(f).lower(jnp.ones((16, 16)), [jnp.ones((16, 16)) * i for i in range(6)])


def test_the_choice_is_kept_for_the_next_process(monkeypatch, tmp_path):
    monkeypatch.setattr(_schedules, "_kept", lambda key: None if key is None else str(tmp_path / f"{key}.schedule"))
    clock = _Clock(default=0.10, other=0.07)
    choice, ran = _choice(monkeypatch, clock)
    choice.key = "k1"
    _drive(choice, ran, clock, 30)
    assert (tmp_path / "k1.schedule").read_text() == "other"
    # (the next process: the program of that key compiled with the schedule kept, and no timing)
    lowered = _independent_dots()
    other_text = lowered.compile(compiler_options=_schedules.OTHER["cpu"]).as_text()
    assert other_text != lowered.compile().as_text()  # (this program shows which schedule it has)
    exe = _schedules.choose(lowered, lowered.compile, key="k1")
    assert not isinstance(exe, _schedules.ScheduleChoice) and exe.as_text() == other_text
    (tmp_path / "k2.schedule").write_text("default")
    exe = _schedules.choose(lowered, lowered.compile, key="k2")
    assert not isinstance(exe, _schedules.ScheduleChoice) and exe.as_text() != other_text
    assert isinstance(_schedules.choose(lowered, lowered.compile, key="k3"), _schedules.ScheduleChoice)


def test_a_clusters_donating_and_early_launched_executables_take_one_choice(monkeypatch, tmp_path):
    # (auto-jit runs a cluster by a donating executable or, launched early, by one donating nothing: the same
    # program, one schedule -- the choice either makes, the other takes without timing)
    monkeypatch.setattr(_schedules, "_kept", lambda key: None if key is None else str(tmp_path / f"{key}.schedule"))
    clock = _Clock(default=0.10, other=0.07)
    early, ran_early = _choice(monkeypatch, clock)
    early.key = early.family = "fam"
    late, ran_late = _choice(monkeypatch, clock)
    late.key, late.family = "donating", "fam"
    _drive(late, ran_late, clock, 2)  # (a run or two of its own, timed)
    _drive(early, ran_early, clock, 30)  # (the early launches' executable decides)
    assert early.lowered is None and ran_early[-1] == "other"
    n = len(ran_late)
    _drive(late, ran_late, clock, 3)
    # (compiled, then taken: no probe. The compile runs on a thread, and its first run takes the default while that
    # is alive -- unless it is done before the run looks: a busy CI's thread switch, or a compile JAX had cached)
    assert late.lowered is None and ran_late[n + 1:] == ["other", "other"] and ran_late[n] in ("default", "other")
    assert (tmp_path / "fam.schedule").read_text() == "other"
    # (a later process: the donating program, whose own choice was never made, takes its family's)
    lowered = _independent_dots()
    exe = _schedules.choose(lowered, lowered.compile, key="donating2", family="fam")
    assert exe.as_text() == lowered.compile(compiler_options=_schedules.OTHER["cpu"]).as_text()


def test_a_program_loaded_from_jaxs_cache_pays_the_rent_of_its_compile_then(monkeypatch):
    # (loaded from the cache in a fraction of a second, the other schedule's compile -- cold -- would still take as
    # long as the program's own compile once took: JAX's cache says how long that was)
    lowered = _independent_dots()

    def loaded():
        jax.monitoring.record_event_duration_secs("/jax/compilation_cache/compile_time_saved_sec", 5.0)
        return lowered.compile()
    exe = _schedules.choose(lowered, loaded)
    assert isinstance(exe, _schedules.ScheduleChoice) and exe.seconds >= 5.0
    assert _schedules.choose(lowered, lowered.compile).seconds < 5.0


def test_the_kept_choices_are_trimmed_like_the_kept_programs(monkeypatch, tmp_path):
    monkeypatch.setattr(_schedules, "_kept", lambda key: None if key is None else str(tmp_path / f"{key}.schedule"))
    monkeypatch.setattr(_schedules, "KEPT_MAX", 5)
    for k in range(6):  # (kept by earlier processes, p0 the longest ago)
        (tmp_path / f"p{k}.schedule").write_text("default")
        os.utime(tmp_path / f"p{k}.schedule", (1000.0 + k, 1000.0 + k))
    _schedules._remember("new", "other")
    left = sorted(p.name for p in tmp_path.iterdir())
    # (7 > 5: the oldest tenth, and one, goes -- as ``_persist`` trims the kept programs)
    assert left == ["new.schedule", "p1.schedule", "p2.schedule", "p3.schedule", "p4.schedule", "p5.schedule"], left
    assert _schedules._recall("new") == "other" and _schedules._recall("p0") is None
