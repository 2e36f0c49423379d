"""Tests for megxla.distributed and megxla.functional.distributed: single-process semantics, the server and
client, and real 2-process runs through the launcher (collective values and gradients, a data-parallel SGD
step equal to the single-process step on the full batch, eager and compiled) and errors (world_size
mismatch, missing peers) reported within the timeout instead of hanging.

Worker functions live at module level: the launcher spawns processes, which import them from here."""
import multiprocessing as mp
import pickle
import socket
import struct
import time

import numpy as np
import pytest

import megxla as mge
import megxla.distributed as dist
import megxla.functional as F
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.distributed import group as _group
from megxla.distributed.server import Client, Server


@pytest.fixture
def world1(monkeypatch):
    """This process as a world of one (rank 0), torn down afterwards."""
    monkeypatch.setenv("MEGXLA_DIST_TIMEOUT", "5")
    server = Server(0)
    dist.init_process_group("localhost", server.py_server_port, 1, 0, 0)
    yield server
    _group._shutdown()
    server.shutdown()


# ---- single process ------------------------------------------------------------------------------------------
def test_not_distributed_defaults():
    assert not dist.is_distributed()
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend(), dist.backend) == (0, 1, None, None)
    with pytest.raises(RuntimeError, match="init_process_group"):
        dist.WORLD.size
    with pytest.raises(RuntimeError, match="init_process_group"):
        dist.get_client()
    dist.group_barrier()  # no-op
    assert dist.synchronized(lambda a: a + 1)(1) == 2


def _all_collectives(x, group=dist.WORLD):
    FD = F.distributed
    return {
        "all_reduce_sum": FD.all_reduce_sum(x, group), "all_reduce_max": FD.all_reduce_max(x, group),
        "all_reduce_min": FD.all_reduce_min(x, group), "all_gather": FD.all_gather(x, group),
        "broadcast": FD.broadcast(x, group), "reduce_sum": FD.reduce_sum(x, group), "gather": FD.gather(x, group),
        "scatter": FD.scatter(x, group), "reduce_scatter_sum": FD.reduce_scatter_sum(x, group),
        "all_to_all": FD.all_to_all(x, group), "collective_comm": FD.collective_comm(x, "ALL_REDUCE_PROD", group, None),
    }


@pytest.mark.parametrize("initialised", [False, True], ids=["no_init", "world_of_one"])
def test_single_process_collectives_return_input(initialised, request):
    if initialised:
        request.getfixturevalue("world1")
    x = mge.Tensor(np.arange(6, dtype="float32").reshape(2, 3))
    for name, y in _all_collectives(x).items():
        assert y is x, name
    # gradients flow straight through
    w = mge.Parameter(np.ones((2, 3), "float32"))
    gm = GradManager().attach([w], callbacks=[dist.make_allreduce_cb("mean")])
    with gm:
        gm.backward((F.distributed.all_reduce_sum(w * x) * 2).sum())
    np.testing.assert_allclose(w.grad.numpy(), 2 * x.numpy())
    p = mge.Parameter([1.0])
    dist.bcast_list_([p])
    assert p.numpy()[0] == 1.0


def test_single_process_argument_errors():
    x = mge.Tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="axis"):
        F.distributed.all_gather(x, axis=1)
    with pytest.raises(ValueError, match="root"):
        F.distributed.broadcast(None)
    with pytest.raises(ValueError, match="mode"):
        F.distributed.collective_comm(x, "ALL_REDUCE_AVG", dist.WORLD, None)
    with pytest.raises(ValueError, match="reduce_method"):
        dist.make_allreduce_cb("max")
    with pytest.raises(RuntimeError, match="init_process_group"):
        F.distributed.remote_send(x, 1)


def test_world_of_one(world1):
    assert dist.is_distributed()
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "auto")
    assert dist.get_py_server_addr() == ("localhost", world1.py_server_port) == dist.get_mm_server_addr()
    assert (dist.WORLD.size, dist.WORLD.rank, dist.WORLD.key, dist.WORLD.is_single_machine) == (1, 0, "0", True)
    g = dist.new_group([0])
    assert (g.size, g.rank, g.key) == (1, 0, "0") and g.comp_node.startswith("xpu0:")
    for bad in ([1], [0, 0], ["0"]):
        with pytest.raises(ValueError):
            dist.new_group(bad)
    with dist.override_backend("shm"):
        assert dist.get_backend() == "shm" == dist.backend
    assert dist.backend == "auto"
    dist.backend = "nccl"
    assert dist.get_backend() == "nccl"
    with pytest.raises(ValueError):
        dist.backend = "mpi"
    dist.group_barrier()
    dist.group_start()
    dist.group_end()
    c = dist.get_client()
    c.user_set("k", {"a": np.arange(3)})
    np.testing.assert_array_equal(c.user_get("k")["a"], np.arange(3))
    assert c.user_pop("k")["a"].shape == (3,)
    with pytest.raises(KeyError):
        c.user_get("k")
    assert c.bcast_val([1, 2], "b", 1) == [1, 2]
    assert c.get_mm_server_port() == world1.py_server_port
    c.set_is_grad("g", True)
    assert c.check_is_grad("g") is True
    c.set_remote_tracer("t", {3, 4})
    assert sorted(c.check_remote_tracer("t")) == [3, 4]
    with pytest.raises(ValueError, match="itself"):
        F.distributed.remote_send(mge.Tensor([1.0]), 0)
    with pytest.raises(ValueError, match="rank"):
        F.distributed.remote_recv(5)


def test_init_process_group_validation(monkeypatch):
    monkeypatch.setenv("MEGXLA_DIST_TIMEOUT", "1")
    with pytest.raises(ValueError, match="rank"):
        dist.init_process_group("localhost", 12345, 2, 2, 0)
    with pytest.raises(ValueError, match="backend"):
        dist.init_process_group("localhost", 12345, 1, 0, 0, backend="mpi")
    with pytest.raises(ValueError, match="127.0.0.1"):
        dist.init_process_group("10.1.2.3", 12345, 1, 0, 0)
    with pytest.raises(TypeError):
        dist.init_process_group("localhost", "12345", 1, 0, 0)
    # rank 0 of a world of 2 whose rank 1 never comes: a timeout naming the missing rank, not a hang
    server = Server(0)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"rank\(s\) \[1\]"):
        dist.init_process_group("127.0.0.1", server.py_server_port, 2, 0, 0)
    assert time.monotonic() - t0 < 10 and not dist.is_distributed()
    server.shutdown()


def test_rank0_starts_its_own_server(monkeypatch):
    monkeypatch.setenv("MEGXLA_DIST_TIMEOUT", "5")
    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("localhost", port, 1, 0, 0)
    try:
        assert _group._sd.server is not None and _group._sd.server.py_server_port == port
    finally:
        _group._shutdown()


def test_server_exchange_barrier_and_timeouts():
    server = Server(0)
    c = Client("localhost", server.py_server_port, timeout=1)
    import threading
    out = [None, None]
    ts = [threading.Thread(target=lambda r=r: out.__setitem__(r, c._exchange("k", r, 2, r * 10))) for r in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert out == [[0, 10], [0, 10]]
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"rank\(s\) \[1\]"):
        c._exchange("k2", 0, 2, 0)
    with pytest.raises(RuntimeError, match="timed out"):  # a late rank fails at once
        c._exchange("k2", 1, 2, 0)
    with pytest.raises(TimeoutError, match="1 of 2"):
        c.group_barrier("b", 2)
    assert time.monotonic() - t0 < 5
    c.close()
    server.shutdown()
    with pytest.raises(TimeoutError, match="could not connect"):
        Client("localhost", server.py_server_port, timeout=0.3)


def test_server_refuses_code_in_messages():
    server = Server(0)
    with socket.create_connection(("127.0.0.1", server.py_server_port), timeout=5) as s:
        evil = pickle.dumps(("user_set", ("k", _Evil())))
        s.sendall(struct.pack("!Q", len(evil)) + evil)
        n = struct.unpack("!Q", s.recv(8))[0]
        reply = pickle.loads(s.recv(n))
    assert reply[0] == "err" and "refusing" in reply[2]
    assert not _Evil.ran
    server.shutdown()


class _Evil:
    ran = False

    def __reduce__(self):
        return (print, ("this must not run on the server",))


def test_launcher_argument_errors():
    with pytest.raises(ValueError, match="world_size"):
        dist.launcher(_worker_rank, n_gpus=3, world_size=2)
    with pytest.raises(ValueError, match="127.0.0.1"):
        dist.launcher(_worker_rank, n_gpus=1, master_ip="8.8.8.8")
    with pytest.raises(TypeError):
        dist.launcher(3, n_gpus=1)
    assert isinstance(dist.launcher(n_gpus=2)(_worker_rank), dist.launcher)  # decorator factory form


# ---- two processes -------------------------------------------------------------------------------------------
def _worker_rank():
    return dist.get_rank()


def _np(t):
    return None if t is None else t.numpy()


def _grad_of(fn, x):
    """Gradient of sum(fn(x)) w.r.t. x (None if x gets none)."""
    x = mge.Parameter(x)
    gm = GradManager().attach([x])
    with gm:
        y = fn(x)
        gm.backward(y)
    return _np(x.grad)


def _worker_collectives():
    FD = F.distributed
    r = dist.get_rank()
    out = {"rank": r, "world": dist.get_world_size(), "backend": dist.get_backend()}
    x = mge.Tensor(np.array([[1.0, 2.0], [3.0, 4.0]], "float32") * (r + 1))  # rank0: x0; rank1: 2*x0
    out["all_reduce_sum"] = _np(FD.all_reduce_sum(x))
    out["all_reduce_max"] = _np(FD.all_reduce_max(x - 3 * r))
    out["all_reduce_min"] = _np(FD.all_reduce_min(x - 3 * r))
    out["all_gather0"] = _np(FD.all_gather(x))
    out["all_gather1"] = _np(FD.all_gather(x, axis=1))
    out["broadcast"] = _np(FD.broadcast(x if r == 0 else None))
    out["reduce_sum"] = _np(FD.reduce_sum(x))
    out["gather"] = _np(FD.gather(x, axis=1))
    out["scatter"] = _np(FD.scatter(x if r == 0 else None, axis=1))
    out["reduce_scatter_sum"] = _np(FD.reduce_scatter_sum(x))
    out["all_to_all"] = _np(FD.all_to_all(x, split_axis=0, concat_axis=1))
    out["prod"] = _np(FD.collective_comm(x, "ALL_REDUCE_PROD", dist.WORLD, None))
    out["int_sum"] = _np(FD.all_reduce_sum(mge.Tensor([r, 10], dtype="int32")))
    g = dist.new_group([1, 0])  # group rank order differs from global rank order
    out["group_rank"] = g.rank
    out["group_gather"] = _np(FD.all_gather(mge.Tensor([float(r)]), g))
    # point to point, both directions
    if r == 0:
        FD.remote_send(mge.Tensor([7.0, 8.0]), 1)
        out["recv"] = _np(FD.remote_recv(1))
    else:
        out["recv"] = _np(FD.remote_recv(0))
        FD.remote_send(mge.Tensor(np.arange(3, dtype="int32")), 0)
    # gradients: the mirrored collectives
    c = mge.Tensor(np.array([[1.0, 10.0], [100.0, 1000.0]], "float32") * (r + 1))
    x0 = np.array([[1.0, 2.0], [3.0, 4.0]], "float32") * (r + 1)
    out["g_all_reduce_sum"] = _grad_of(lambda v: (FD.all_reduce_sum(v) * c).sum(), x0)
    out["g_all_gather"] = _grad_of(lambda v: (FD.all_gather(v) * F.concat([c, c * 2])).sum(), x0)
    out["g_reduce_scatter"] = _grad_of(lambda v: (FD.reduce_scatter_sum(v) * c[r]).sum(), x0)
    out["g_broadcast"] = _grad_of(lambda v: (FD.broadcast(v) * c).sum(), x0)
    out["g_max"] = _grad_of(lambda v: (FD.all_reduce_max(v - 3 * r) * c).sum(), x0)
    out["g_scatter"] = _grad_of(lambda v: (FD.scatter(v, axis=1) * c[:, r:r + 1]).sum(), x0)
    out["g_all_to_all"] = _grad_of(lambda v: (FD.all_to_all(v, split_axis=0, concat_axis=1)
                                              * F.concat([c, c], axis=1)[r:r + 1]).sum(), x0)
    # helpers
    p = mge.Parameter(np.full(3, float(r + 5), "float32"))
    dist.bcast_list_([p])
    out["bcast_list"] = p.numpy()
    client = dist.get_client()
    out["bcast_val"] = client.bcast_val({"from": 0} if r == 0 else None, "bv", 2)
    dist.group_barrier()
    out["synchronized"] = dist.synchronized(lambda: r * 2)()
    return out


def _dp_data():
    rs = np.random.RandomState(0)
    return (rs.randn(8, 3).astype("float32"), rs.randn(8, 2).astype("float32"),
            rs.randn(3, 2).astype("float32"), rs.randn(2).astype("float32"))


def _dp_train(x, y, w0, b0, steps, reduce_cb=None, compiled=False):
    """`steps` SGD-with-momentum steps of a linear model on (x, y); returns params."""
    w, b = mge.Parameter(w0), mge.Parameter(b0)
    gm = GradManager().attach([w, b], callbacks=[reduce_cb] if reduce_cb else None)
    opt = optim.SGD([w, b], lr=0.1, momentum=0.9)

    def step(xb, yb, w, b, opt):  # state passed as arguments, as a traced step needs
        with gm:
            loss = ((F.matmul(xb, w) + b - yb) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    if compiled:
        step = mge.jit.xla_trace(step)
    for _ in range(steps):
        step(mge.Tensor(x), mge.Tensor(y), w, b, opt)
    return w.numpy(), b.numpy()


def _worker_data_parallel():
    r, n = dist.get_rank(), dist.get_world_size()
    x, y, w0, b0 = _dp_data()
    part = slice(r * 8 // n, (r + 1) * 8 // n)  # this rank's half of the batch
    cb = dist.make_allreduce_cb("mean")
    eager = _dp_train(x[part], y[part], w0, b0, 3, cb)
    compiled = _dp_train(x[part], y[part], w0, b0, 3, cb, compiled=True)
    # "sum" of the two halves' mean-losses' gradients equals twice the full-batch gradient
    summed = _dp_train(x[part], y[part], w0, b0, 1, dist.make_allreduce_cb("sum"))
    return {"eager": eager, "compiled": compiled, "sum": summed}


def _worker_main():
    return {"collectives": _worker_collectives(), "dp": _worker_data_parallel()}


def test_two_process_launcher(monkeypatch):
    monkeypatch.setenv("MEGXLA_DIST_TIMEOUT", "60")
    t0 = time.monotonic()
    res = dist.launcher(_worker_main, n_gpus=2)()
    elapsed = time.monotonic() - t0
    assert elapsed < 30, elapsed
    c0, c1 = res[0]["collectives"], res[1]["collectives"]
    assert (c0["rank"], c1["rank"], c0["world"], c0["backend"]) == (0, 1, 2, "nccl")
    x0 = np.array([[1.0, 2.0], [3.0, 4.0]], "float32")
    x1 = 2 * x0
    eq = np.testing.assert_array_equal
    for c in (c0, c1):
        eq(c["all_reduce_sum"], x0 + x1)
        eq(c["all_reduce_max"], np.maximum(x0, x1 - 3))
        eq(c["all_reduce_min"], np.minimum(x0, x1 - 3))
        eq(c["all_gather0"], np.concatenate([x0, x1], 0))
        eq(c["all_gather1"], np.concatenate([x0, x1], 1))
        eq(c["broadcast"], x0)
        eq(c["prod"], x0 * x1)
        eq(c["int_sum"], [1, 20])
        assert c["int_sum"].dtype == np.int32
        eq(c["group_gather"], [1.0, 0.0])  # group [1, 0]: global rank 1 is group rank 0
        eq(c["bcast_list"], [5.0, 5.0, 5.0])
        assert c["bcast_val"] == {"from": 0}
    assert (c0["group_rank"], c1["group_rank"]) == (1, 0)
    eq(c0["reduce_sum"], x0 + x1)
    assert c1["reduce_sum"] is None
    eq(c0["gather"], np.concatenate([x0, x1], 1))
    assert c1["gather"] is None
    eq(c0["scatter"], x0[:, :1])
    eq(c1["scatter"], x0[:, 1:])
    eq(c0["reduce_scatter_sum"], (x0 + x1)[:1])
    eq(c1["reduce_scatter_sum"], (x0 + x1)[1:])
    eq(c0["all_to_all"], np.concatenate([x0[:1], x1[:1]], 1))
    eq(c1["all_to_all"], np.concatenate([x0[1:], x1[1:]], 1))
    eq(c0["recv"], [0, 1, 2])
    assert c0["recv"].dtype == np.int32
    eq(c1["recv"], [7.0, 8.0])
    assert (c0["synchronized"], c1["synchronized"]) == (0, 2)
    # gradients
    cc = np.array([[1.0, 10.0], [100.0, 1000.0]], "float32")
    c_r = [cc, 2 * cc]
    for r, c in enumerate((c0, c1)):
        eq(c["g_all_reduce_sum"], c_r[0] + c_r[1])
        # all_gather: rank r's slice of sum over ranks of concat([c_k, 2 c_k])
        eq(c["g_all_gather"], (c_r[0] + c_r[1]) * (r + 1))
        # reduce_scatter_sum: rank k receives part k; gradient is all_gather of the parts' cotangents
        eq(c["g_reduce_scatter"], np.stack([c_r[0][0], c_r[1][1]]))
        # all_reduce_max of (x_r - 3r): rank 1 holds the max where 2*x0 - 3 > x0, i.e. x0 > 3
        # (ties, where x0 == 3, give the gradient to both ranks)
        holds = (x1 - 3 >= x0) if r == 1 else (x0 >= x1 - 3)
        eq(c["g_max"], np.where(holds, c_r[0] + c_r[1], 0))
        # all_to_all (split 0, concat 1): rank k's output row is [x0[k], x1[k]] with cotangent [c_k[k], c_k[k]],
        # so row k of every rank's input gradient is c_k[k]
        eq(c["g_all_to_all"], np.stack([c_r[k][k] for k in range(2)]))
    eq(c0["g_broadcast"], c_r[0] + c_r[1])  # root gets the reduce_sum of every rank's gradient
    eq(c1["g_broadcast"], np.zeros_like(x0))  # a non-root's value is not used
    eq(c0["g_scatter"], np.concatenate([c_r[0][:, :1], c_r[1][:, 1:]], 1))
    eq(c1["g_scatter"], np.zeros_like(x0))
    # data parallel: identical on both ranks and equal to single-process training on the full batch
    d0, d1 = res[0]["dp"], res[1]["dp"]
    x, y, w0, b0 = _dp_data()
    ref = _dp_train(x, y, w0, b0, 3)
    for key in ("eager", "compiled", "sum"):
        for a, b in zip(d0[key], d1[key]):
            eq(a, b)  # bitwise: the reduction adds in rank order on every rank
    for a, b in zip(d0["eager"], ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(d0["compiled"], d0["eager"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # one step with "sum": the gradient is the sum of the halves' mean gradients = 2 x full-batch gradient
    w, b = mge.Parameter(w0), mge.Parameter(b0)
    gm = GradManager().attach([w, b])
    with gm:
        gm.backward(((F.matmul(mge.Tensor(x), w) + b - mge.Tensor(y)) ** 2).mean())
    np.testing.assert_allclose(d0["sum"][0], w0 - 0.1 * 2 * w.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d0["sum"][1], b0 - 0.1 * 2 * b.grad.numpy(), rtol=1e-5, atol=1e-6)


def _worker_skips_collective():
    if dist.get_rank() == 0:  # rank 1 never joins this all_reduce
        return F.distributed.all_reduce_sum(mge.Tensor([1.0])).numpy()
    return None


def _worker_raises():
    if dist.get_rank() == 1:
        raise ValueError("boom from rank 1")
    time.sleep(30)  # terminated by the launcher when rank 1 fails


def test_launcher_reports_errors_not_hangs(monkeypatch):
    monkeypatch.setenv("MEGXLA_DIST_TIMEOUT", "2")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"(?s)rank 0 failed.*timed out.*group rank\(s\) \[1\]"):
        dist.launcher(_worker_skips_collective, n_gpus=2)()
    with pytest.raises(RuntimeError, match=r"(?s)rank 1 failed.*boom from rank 1"):
        dist.launcher(_worker_raises, n_gpus=2)()
    # world_size 2 but only one process here: rank 1 never joins init_process_group
    with pytest.raises(RuntimeError, match=r"(?s)rank 0 failed.*init_process_group: timed out"):
        dist.launcher(_worker_rank, n_gpus=1, world_size=2)()
    assert time.monotonic() - t0 < 45


def _join_with_world_size(port, world_size, rank, results):
    try:
        dist.init_process_group("localhost", port, world_size, rank, 0)
        results.put((rank, "ok"))
    except Exception as exc:
        results.put((rank, f"{type(exc).__name__}: {exc}"))


def test_world_size_mismatch_is_reported(monkeypatch):
    monkeypatch.setenv("MEGXLA_DIST_TIMEOUT", "10")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    server = Server(0)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_join_with_world_size, args=(server.py_server_port, ws, rank, results))
             for rank, ws in ((0, 2), (1, 3))]
    t0 = time.monotonic()
    try:
        for p in procs:
            p.start()
        got = dict(results.get(timeout=60) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=20)
            if p.is_alive():
                p.kill()
        server.shutdown()
    assert set(got) == {0, 1}
    for msg in got.values():
        assert msg.startswith("ValueError") and "world_size mismatch" in msg, msg
    assert time.monotonic() - t0 < 30


def test_docstring_examples():
    import doctest
    from megxla.distributed import helper
    objs = [Server, Client, Server.shutdown, dist.is_distributed, dist.get_rank, dist.get_world_size,
            dist.get_backend, helper.synchronized, type(dist).backend.__class__]
    globs = {"dist": dist, "mge": mge, "F": F, "np": np, "Server": Server, "Client": Client}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for obj in objs:
        for test in doctest.DocTestFinder(recurse=False).find(obj, globs=dict(globs)):
            runner.run(test)
    assert runner.failures == 0 and runner.tries >= 10, (runner.failures, runner.tries)
