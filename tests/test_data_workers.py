"""Issue 31 (B1): DataLoader workers that use megxla work, a stuck worker is reported even with timeout=0, and
no worker outlives the main process."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.data import DataLoader, SequentialSampler
from megxla.data import dataloader as dl
from megxla.data.dataset import Dataset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def hang_guard():
    """Fail (instead of hanging the suite) if a test runs past 60 s."""

    def on_alarm(signum, frame):
        raise TimeoutError("test hung for 60 s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 60)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


def _running(pid):
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open("/proc/{}/stat".format(pid)) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if _running(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if _running(p)]


class MegxlaDataset(Dataset):
    """A dataset whose __getitem__ computes with megxla (fine in MegEngine)."""

    def __init__(self, n=8):
        self.n = n

    def __getitem__(self, i):
        x = F.relu(mge.Tensor(np.full((3,), i - 4.0, dtype="float32"))) * 2
        return x.numpy(), np.int32(i)

    def __len__(self):
        return self.n


def test_workers_compute_with_megxla(hang_guard):
    _ = F.relu(mge.Tensor([1.0])).numpy()  # JAX is running here: forked workers would deadlock in their first op
    ds = MegxlaDataset()
    loader = DataLoader(ds, sampler=SequentialSampler(ds, batch_size=2), num_workers=2, timeout=30)
    for _epoch in range(2):
        batches = list(loader)
        assert [b[1].tolist() for b in batches] == [[0, 1], [2, 3], [4, 5], [6, 7]]
        np.testing.assert_array_equal(np.concatenate([b[0][:, 0] for b in batches]),
                                      [0, 0, 0, 0, 0, 2, 4, 6])


def test_main_script_without_guard_runs_once_with_megxla_workers(tmp_path):
    # a MegEngine-style script: dataset defined in __main__, no `if __name__ == "__main__":` guard
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import megxla as mge
        import megxla.functional as F
        from megxla.data import DataLoader, SequentialSampler
        from megxla.data.dataset import Dataset

        print("top level ran", flush=True)

        class DS(Dataset):
            def __init__(self):
                self.offset = 10.0

            def __getitem__(self, i):
                return F.exp(mge.Tensor(np.zeros(2, "float32"))).numpy() + self.offset + i

            def __len__(self):
                return 6

        ds = DS()
        out = [b.tolist() for b in DataLoader(ds, SequentialSampler(ds, batch_size=3), num_workers=2)]
        print("result", out[1][2], flush=True)
    """))
    proc = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("top level ran") == 1, proc.stdout  # workers did not re-run the script
    assert "result [16.0, 16.0]" in proc.stdout


class SleepyDataset(Dataset):
    def __init__(self, at):
        self.at = at

    def __getitem__(self, i):
        if i == self.at:
            time.sleep(1000)  # stands for a deadlock
        return np.float32(i)

    def __len__(self):
        return 12


@pytest.mark.parametrize("method", ["forkserver", "fork"])
def test_stuck_worker_is_reported_with_timeout_zero(hang_guard, monkeypatch, method):
    assert dl._stall_timeout() == 600.0  # the default budget
    monkeypatch.setenv("MEGXLA_DATALOADER_STALL_TIMEOUT", "1.5")
    monkeypatch.setenv("MEGXLA_DATALOADER_START_METHOD", method)
    ds = SleepyDataset(at=6)
    it = iter(DataLoader(ds, SequentialSampler(ds, batch_size=2), num_workers=2))  # timeout=0
    assert it.start_method == method
    pids = [w.pid for w in it.workers]
    assert next(it).tolist() == [0, 1]
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"DataLoader worker 1 \(pid \d+\) made no progress for 1.5 seconds "
                                           r"while loading batch 3"):
        list(it)
    assert time.monotonic() - start < 1.5 + 4
    assert _wait_gone(pids, 5) == []
    monkeypatch.setenv("MEGXLA_DATALOADER_STALL_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="MEGXLA_DATALOADER_STALL_TIMEOUT"):
        iter(DataLoader(ds, SequentialSampler(ds, batch_size=2), num_workers=2))


@pytest.mark.parametrize("method", ["", "fork"])
def test_killed_main_process_leaves_no_worker(tmp_path, method):
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        import numpy as np
        import megxla as mge
        from megxla.data import DataLoader, SequentialSampler
        from megxla.data.dataset import Dataset

        class Stuck(Dataset):
            def __init__(self):
                pass

            def __getitem__(self, i):
                time.sleep(1000)

            def __len__(self):
                return 8

        mge.Tensor([1.0]).numpy()
        ds = Stuck()
        it = iter(DataLoader(ds, SequentialSampler(ds, batch_size=2), num_workers=2))
        print(it.start_method, *[w.pid for w in it.workers], flush=True)
        next(it)
    """))
    env = dict(os.environ, PYTHONPATH=REPO, MEGXLA_DATALOADER_START_METHOD=method)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline().split()
        assert line and line[0] == (method or "forkserver"), line
        pids = [int(p) for p in line[1:]]
        assert len(pids) == 2 and all(_running(p) for p in pids)
        time.sleep(0.5)  # the workers are inside __getitem__
    finally:
        proc.kill()
        proc.wait()
    assert _wait_gone(pids, 10) == []


def test_cuda_transform_runs_on_each_batch_in_the_main_process_with_workers():
    """``CudaTransform`` (MegEngine 1.13.2+; its upstream test_dataloader imports it): with workers, they skip it
    and the main process applies it to each collated batch (where device ops run); without workers it is applied to
    each sample, as MegEngine's loader does."""
    from megxla.data.dataset import ArrayDataset
    from megxla.data.transform import CudaTransform
    seen = []

    class Scale(CudaTransform):
        def apply(self, input):
            seen.append((os.getpid(), type(input).__name__))
            if isinstance(input, tuple):  # (a sample)
                return (input[0] * 10,) + tuple(input[1:])
            return [mge.Tensor(input[0]) * 10] + list(input[1:])  # (a collated batch: converted here)

    data = np.arange(12, dtype="float32").reshape(6, 2)
    ds = ArrayDataset(data, np.arange(6, dtype="int32"))
    want = data * 10
    for workers in (2, 0):
        seen.clear()
        loader = DataLoader(ds, SequentialSampler(ds, batch_size=3), transform=Scale(), num_workers=workers)
        got = np.concatenate([np.asarray(b[0].numpy() if isinstance(b[0], mge.Tensor) else b[0]) for b in loader])
        np.testing.assert_array_equal(got, want)
        if workers:  # once per batch, here
            assert seen == [(os.getpid(), "list")] * 2 or seen == [(os.getpid(), "tuple")] * 2, seen
        else:  # once per sample
            assert len(seen) == 6 and all(pid == os.getpid() and kind == "tuple" for pid, kind in seen), seen


def test_loaders_with_workers_in_forked_children_of_a_process_whose_loaders_had_workers(tmp_path):
    # MegEngine's test_dataloader_parallel_multi_instances_multiprocessing: the children inherited the parent's
    # forkserver state and their loaders failed at start ("ChildProcessError: No child processes")
    script = tmp_path / "multi.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp
        import numpy as np
        from megxla.data import DataLoader, SequentialSampler
        from megxla.data.dataset import ArrayDataset

        def load():
            ds = ArrayDataset(np.arange(12, dtype="float32"))
            return sum(float(b[0].sum()) for b in DataLoader(ds, SequentialSampler(ds, batch_size=4), num_workers=2))

        if __name__ == "__main__":
            import megxla
            megxla.Tensor([1.0]).numpy()  # (JAX's runtime running: workers start from a forkserver)
            print("parent", load(), flush=True)  # (the forkserver starts)
            procs = [mp.get_context("fork").Process(target=load) for _ in range(2)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            print("children", [p.exitcode for p in procs], flush=True)
            print("parent again", load(), flush=True)
    """))
    proc = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=180, env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 0, proc.stderr
    assert "parent 66.0" in proc.stdout and "children [0, 0]" in proc.stdout, proc.stdout + proc.stderr
    assert "parent again 66.0" in proc.stdout


def test_loaders_with_workers_in_a_child_forked_while_another_thread_held_the_resource_tracker_lock(tmp_path):
    # The flake of the test above (1 run in ~20 under CPU load): the parent's first loader's index queues are freed
    # by their QueueFeederThreads as these exit, and each freed semaphore unregisters itself from multiprocessing's
    # resource tracker under the tracker's lock (SemLock._cleanup in that thread). A fork meanwhile copied the lock
    # held, with no thread left to release it: the child's first loader waited forever for it (creating its first
    # queue's semaphore, ResourceTracker.ensure_running). Here another thread holds the lock across the fork.
    script = tmp_path / "held.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp
        import threading
        from multiprocessing import resource_tracker
        import numpy as np
        from megxla.data import DataLoader, SequentialSampler
        from megxla.data.dataset import ArrayDataset

        def load():
            ds = ArrayDataset(np.arange(12, dtype="float32"))
            return sum(float(b[0].sum()) for b in DataLoader(ds, SequentialSampler(ds, batch_size=4), num_workers=2))

        if __name__ == "__main__":
            held, done = threading.Event(), threading.Event()

            def hold():
                with resource_tracker._resource_tracker._lock:
                    held.set()
                    done.wait()

            holder = threading.Thread(target=hold)
            holder.start()
            held.wait()
            child = mp.get_context("fork").Process(target=load)
            child.start()
            done.set()
            holder.join()
            child.join(60)
            hung = child.is_alive()
            if hung:
                child.kill()
                child.join()
            print("child", "hung" if hung else child.exitcode, flush=True)
            print("parent", load(), flush=True)
    """))
    # (the workers start from a forkserver, as once JAX runs: their queues' semaphores are the tracker's)
    env = dict(os.environ, PYTHONPATH=REPO, MEGXLA_DATALOADER_START_METHOD="forkserver")
    proc = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "child 0" in proc.stdout and "parent 66.0" in proc.stdout, proc.stdout + proc.stderr


def test_a_terminals_ctrl_c_while_the_forkserver_starts_kills_neither_it_nor_a_starting_worker(tmp_path):
    """A terminal's Ctrl-C is a SIGINT to the whole process group. The forkserver imports numpy and jax first
    (~0.4 s) and each worker megxla before ``_worker_loop`` ignores SIGINT: one Ctrl-C there killed the server
    (a DataLoader started within the next second failed with ``ConnectionRefusedError``) and printed the server's
    and the workers' tracebacks. Now only the main process gets ``KeyboardInterrupt``; the server lives on."""
    script = tmp_path / "ctrl_c.py"
    script.write_text(textwrap.dedent("""
        import os, signal, threading
        os.setpgrp()  # (the group of this script and its children only)
        import numpy as np
        import megxla as mge
        from multiprocessing import forkserver
        from megxla.data import DataLoader, SequentialSampler
        from megxla.data.dataset import ArrayDataset

        mge.Tensor([1.0]).numpy()  # (JAX runs: the workers come from the forkserver)
        ds = ArrayDataset(np.zeros((16, 3), "float32"))
        timer = threading.Timer(0.05, os.killpg, (os.getpgid(0), signal.SIGINT))
        try:
            timer.start()
            for _ in DataLoader(ds, SequentialSampler(ds, batch_size=4), num_workers=2):
                pass
        except KeyboardInterrupt:
            print("interrupted")
        timer.join()
        pid = forkserver._forkserver._forkserver_pid
        print("server alive" if os.waitpid(pid, os.WNOHANG)[0] == 0 else "server gone")
        print(sum(1 for _ in DataLoader(ds, SequentialSampler(ds, batch_size=4), num_workers=2)))
    """))
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split("\n")[:3] == ["interrupted", "server alive", "4"], (out.stdout, out.stderr[-3000:])
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
