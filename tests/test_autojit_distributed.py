"""Auto-jit in a data-parallel group: every rank applies the same all-reduced gradient the same way, so replicas stay
bit-identical (MegEngine's data parallel and megxla's eager one do; users save checkpoints from rank 0 only).

Auto-jit times a step both ways (``jit._mode_timer.ModeTimer``: as clusters, eagerly) and runs the faster. Timed per
process, two ranks chose differently -- one rank's clusters slower, or just noise (a ConvNet with ``clip_grad_norm``,
no skew: 1 run in 3) -- and the ``clip_grad_norm`` of the all-reduced gradients, a reduction, rounded differently as a
compiled cluster than as eager kernels: the replicas drifted apart by 3e-8 within 10 steps of the choice."""
import time

import numpy as np

import megxla as mge
import megxla.distributed as dist
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager


class _ConvNet(M.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = M.Conv2d(3, 8, 3, padding=1), M.Conv2d(8, 16, 3, padding=1)
        self.fc = M.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(F.flatten(x, 1))


def _train(auto, steps):
    """Data parallel, each rank its own batches: the ranks' parameters, and how many steps auto-jit ran eagerly."""
    from megxla.jit import auto_jit_stats, reset_auto_jit_stats
    rank = dist.get_rank()
    mge.random.seed(7)
    model = _ConvNet()
    dist.bcast_list_(list(model.parameters()))
    gm = GradManager().attach(model.parameters(), callbacks=[dist.make_allreduce_cb("mean")])
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.RandomState(rank)
    reset_auto_jit_stats()
    mge.config.auto_jit = auto
    try:
        for _ in range(steps):
            x = mge.Tensor(rng.randn(8, 3, 16, 16).astype("float32"))
            y = mge.Tensor(rng.randint(0, 10, 8).astype("int32"))
            with gm:
                loss = F.nn.cross_entropy(model(x), y)
                gm.backward(loss)
            optim.clip_grad_norm(model.parameters(), 1.0)  # (a reduction of the all-reduced gradients)
            opt.step().clear_grad()
            loss.item()
    finally:
        mge.config.auto_jit = False
    return [p.numpy() for p in model.parameters()], auto_jit_stats()["eager_steps"]


def _worker_skewed_timings(steps):
    from megxla.jit._mode_timer import ModeTimer
    # Rank 1's steps as clusters, and rank 0's eager ones, look 20 ms slower to its step timers than they ran: a
    # rank on a slower device, or one sharing its cores, times the two ways otherwise. Each rank left to itself
    # would then choose its own way (rank 1 eager, rank 0 clusters).
    skew, rank = [0.0], dist.get_rank()
    plain = ModeTimer.next_mode

    def next_mode(self):
        if self.last is not None and self.last[0] == (rank == 1):
            skew[0] += 0.02
        return plain(self)

    ModeTimer.next_mode = next_mode
    ModeTimer.clock = staticmethod(lambda: time.perf_counter() + skew[0])
    return {"eager": _train(False, steps), "auto_jit": _train(True, steps)}


def test_replicas_stay_bit_identical_when_the_ranks_step_timings_differ():
    # 32 steps: the step timer starts after 4 steps, runs 10 as clusters, probes 5 eagerly and chooses at ~20
    results = dist.launcher(_worker_skewed_timings, n_gpus=2, device_type="cpu")(32)
    for mode in ("eager", "auto_jit"):  # (eager: the control, identical replicas as in MegEngine)
        (p0, eager0), (p1, eager1) = results[0][mode], results[1][mode]
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(p0, p1))
        assert all(np.array_equal(a, b) for a, b in zip(p0, p1)), \
            f"{mode}: the replicas differ by up to {diff} (steps run eagerly: rank 0 {eager0}, rank 1 {eager1})"
    # every rank ran every step as clusters: a step timer chooses nothing in a group of several processes
    assert results[0]["auto_jit"][1] == results[1]["auto_jit"][1] == 0


def test_a_step_timer_of_several_processes_runs_clusters_only(monkeypatch):
    # (one process standing for one of several) the timers whose modes round differently run clusters, untimed;
    # an early launch's (the same program launched early or late) still chooses the faster
    import jax
    from megxla.jit._mode_timer import ModeTimer
    clock, cost = [0.0], {True: 10.0, False: 1.0}  # clusters slower than eager
    monkeypatch.setattr(ModeTimer, "clock", staticmethod(lambda: clock[0]))
    monkeypatch.setattr(ModeTimer, "compile_clock", staticmethod(lambda: 0.0))
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    runs = {}
    for same_numbers in (False, True):
        timer, modes = ModeTimer(same_numbers=same_numbers), []
        for _ in range(100):
            modes.append(timer.next_mode())
            clock[0] += cost[modes[-1]]
        runs[same_numbers] = modes
    assert all(runs[False])
    assert runs[True].count(False) > 50


def test_the_switch_to_the_optimized_tier_waits_for_it_in_a_run_of_several_processes(monkeypatch):
    # (MEGXLA_TIERED=1) one process switches at the first run after its optimized compile is ready, once the switch
    # run's wait ran out: in several, a run that follows each one's load would have the replicas round apart
    import jax
    from megxla.jit import _tiers
    monkeypatch.setattr(_tiers, "SWITCH_WAIT", 0.05)
    monkeypatch.setattr(_tiers, "SWITCH_STEPS", 0)
    monkeypatch.setattr(jax, "process_count", lambda: 2)

    def optimize():  # (the background compile: done well after the bounded wait)
        time.sleep(0.5)
        return lambda x: ("optimized", x)

    exe = _tiers.tiered(optimize, lambda x: ("quick", x), 1000)
    got = [exe(k)[0] for k in range(_tiers.SWITCH_RUN + 1)]
    assert got == ["quick"] * (_tiers.SWITCH_RUN - 1) + ["optimized"] * 2


def test_kernels_compiled_ahead_leave_cross_process_programs_to_their_op(monkeypatch):
    """A worker compiling kernels ahead (a GradManager's predicted gradient ops, an op-by-op cluster's) compiles no
    cross-process program: every rank numbers its compiles of one to check that the ranks agree, so a worker that
    got to a collective's gradient after its op had run compiled it a second time on that rank only, and the ranks
    waited for each other's programs (a fully sharded step with reshard_after_forward=False, 2 runs in 3)."""
    import jax
    from megxla.core import _spmd
    from megxla.core._op import PRIMITIVES, Primitive
    from megxla.jit import _kernels_ahead
    agreed = []
    monkeypatch.setattr(_spmd, "agree_hook", [lambda ranks, key, digest: agreed.append(key)])
    prim = PRIMITIVES.get("test_spmd_ahead") or Primitive("test_spmd_ahead", lambda x: x * 2)
    op = prim.bind()
    op._kernel = _spmd.SpmdFunction(op.fn, [jax.devices()[0]], name=op.name)  # (as run_kernel installs one)
    _kernels_ahead._compile(op, [((3,), np.dtype("float32"), False)])
    assert agreed == []
    np.testing.assert_array_equal(np.asarray(op._kernel(np.ones(3, "float32"))), [2, 2, 2])  # (compiled at its run)
    assert len(agreed) == 1


def test_a_collective_compiles_its_cross_process_program_once_whatever_its_plain_kernel(monkeypatch):
    """A kernel worker may make an op's plain kernel while the op's first run installs its cross-process one, and put
    the plain one back: the op's next run then made a second SpmdFunction, compiling its program again on this rank
    only (numbered, so the ranks waited for each other). The op keeps its SpmdFunction."""
    import jax
    import megxla as mge
    from megxla.core import _spmd
    from megxla.core._dispatch import apply
    from megxla.core._op import PRIMITIVES, Primitive
    agreed = []
    monkeypatch.setattr(_spmd, "agree_hook", [lambda ranks, key, digest: agreed.append(key)])
    devices = [jax.devices()[0]]

    def impl(x):  # (a collective's front: outside a program over its devices, ask for one)
        if _spmd.current_devices() is None:
            raise _spmd.MeshRequired(devices, "test collective")
        return x * 3

    prim = PRIMITIVES.get("test_spmd_once") or Primitive("test_spmd_once", impl)
    op = prim.bind()
    x = mge.Tensor(np.ones(2, "float32"))
    np.testing.assert_array_equal(apply(op, x).numpy(), [3, 3])
    assert len(agreed) == 1
    op._kernel = None  # (as a worker's plain kernel replacing it: made again at the next run)
    np.testing.assert_array_equal(apply(op, x).numpy(), [3, 3])
    assert len(agreed) == 1, agreed
