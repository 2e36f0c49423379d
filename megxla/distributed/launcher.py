"""``launcher``: run a function in ``n`` worker processes that form one distributed group."""
from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import os
import queue as _queue
import threading
import traceback

from .group import _shutdown, init_process_group
from .server import Server, loopback_host

__all__ = ["launcher"]

_env_lock = threading.Lock()


@contextlib.contextmanager
def _child_env(env):
    # Spawned children copy this process's environment when they start, and megxla initialises JAX when it
    # is imported (before a child could change anything), so per-worker settings go in here, briefly.
    with _env_lock:
        saved = {k: os.environ.get(k) for k in env}
        try:
            for k, v in env.items():
                os.environ[k] = v
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _run_wrapped(func, master_ip, port, world_size, rank, dev, device_type, backend, args, kwargs, results):
    """Body of a worker process: join the group, run ``func``, report its result (or traceback)."""
    try:
        init_process_group(master_ip=master_ip, port=port, world_size=world_size, rank=rank, device=dev,
                           backend=backend, device_type=device_type)
        ret = func(*args, **kwargs)
        results.put((dev, True, ret))
    except BaseException as exc:  # report everything, KeyboardInterrupt included, then exit non-zero
        results.put((dev, False, "".join(traceback.format_exception(exc))))
        raise SystemExit(1)
    finally:
        _shutdown()


class launcher:
    r"""Run ``func`` in ``n_gpus`` new processes (ranks ``rank_start ... rank_start + n_gpus - 1``).

    Each process calls :func:`init_process_group` and then ``func(*args, **kwargs)``; calling the launcher
    returns the list of the processes' return values, in local rank order. When the machine has GPUs, each
    process sees only its own GPU; with more processes than GPUs (or ``device_type="cpu"``) the processes
    run on the CPU, so ``n_gpus=2`` works on a CPU-only machine. If a process fails, the others are
    terminated and a ``RuntimeError`` carries the failing rank's traceback. Processes are started with
    ``spawn``, so ``func`` and its arguments must be picklable (a module-level function).

    Args:
        func: the function to run in every process.
        n_gpus: number of processes on this machine; default ``get_device_count("gpu")``, or 1 without GPUs.
        world_size: total number of processes; default ``n_gpus``.
        rank_start: global rank of the first process here; a launcher with ``rank_start > 0`` joins the
            server of the one started with ``rank_start=0`` on this machine (pass its ``port``).
        master_ip: the server address, ``"localhost"`` or ``"127.0.0.1"``.
        port: the server port; 0 picks a free one.
        device_type: ``"xpu"``, ``"gpu"``/``"cuda"`` or ``"cpu"``.
        backend: the backend name recorded by :func:`init_process_group`.

    Example:
        >>> import megxla.distributed as dist
        >>> def worker():
        ...     return dist.get_rank()
        >>> dist.launcher(worker, n_gpus=2)()   # worker defined at module level
        [0, 1]
        >>> @dist.launcher(n_gpus=2)
        ... def main():
        ...     ...
    """

    def __new__(cls, *args, **kwargs):
        if not args:  # @launcher(n_gpus=2) as a decorator factory
            return functools.partial(cls, **kwargs)
        return super().__new__(cls)

    def __init__(self, func, n_gpus=None, world_size=None, rank_start=0, master_ip="localhost", port=0,
                 device_type="xpu", backend="nccl"):
        from .._device import get_device_count
        if not callable(func):
            raise TypeError(f"launcher: func must be callable, got {type(func).__name__}")
        self._gpu_count = get_device_count("gpu") if device_type != "cpu" else 0
        if n_gpus is None:
            n_gpus = self._gpu_count or 1
        if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
            raise ValueError(f"launcher: n_gpus must be a positive int, got {n_gpus!r}")
        world_size = n_gpus if world_size is None else world_size
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"launcher: world_size must be a positive int, got {world_size!r}")
        if rank_start + n_gpus > world_size:
            raise ValueError(f"launcher: ranks {rank_start}..{rank_start + n_gpus - 1} do not fit in "
                             f"world_size={world_size}")
        loopback_host(master_ip)
        self.func = func
        self.n_gpus = n_gpus
        self.world_size = world_size
        self.rank_start = rank_start
        self.master_ip = master_ip
        self.port = port
        self.device_type = device_type
        self.backend = backend
        self.server = None
        if rank_start != 0 and port == 0:
            raise ValueError("launcher: rank_start > 0 needs the master's port")
        functools.update_wrapper(self, func)

    def _env(self, dev):
        if 0 < self.n_gpus <= self._gpu_count:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            ids = visible.split(",") if visible else [str(i) for i in range(self._gpu_count)]
            # One GPU per process, and no 75% preallocation per process on a shared machine.
            return {"CUDA_VISIBLE_DEVICES": ids[dev], "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        return {"JAX_PLATFORMS": "cpu"}

    def __call__(self, *args, **kwargs):
        ctx = mp.get_context("spawn")  # JAX is multithreaded: forking it is unsafe
        port = self.port
        if self.rank_start == 0:
            self.server = Server(port)
            port = self.server.py_server_port
        results = ctx.Queue()
        procs = []
        out = [None] * self.n_gpus
        try:
            for dev in range(self.n_gpus):
                p = ctx.Process(target=_run_wrapped, name=f"megxla-rank{dev + self.rank_start}",
                                args=(self.func, self.master_ip, port, self.world_size, dev + self.rank_start, dev,
                                      self.device_type, self.backend, args, kwargs, results))
                with _child_env(self._env(dev)):
                    p.start()
                procs.append(p)
            reported = set()
            # Each worker ends by itself: its collectives give up after MEGXLA_DIST_TIMEOUT, so this loop is
            # bounded by the workers' own work.
            while True:
                try:
                    dev, ok, value = results.get(timeout=0.1)
                except _queue.Empty:
                    failed = [p for p in procs if p.exitcode not in (None, 0)]
                    if failed:  # died without reporting (killed, segfault): give others a moment to report
                        self._drain(results, out, reported, grace=1.0)
                        raise RuntimeError(f"launcher: process {failed[0].name} exited with code "
                                           f"{failed[0].exitcode}")
                    if all(p.exitcode == 0 for p in procs):
                        self._drain(results, out, reported, grace=0.0)
                        break
                    continue
                if not ok:
                    raise RuntimeError(f"launcher: rank {dev + self.rank_start} failed:\n{value}")
                out[dev] = value
                reported.add(dev)
            missing = sorted(set(range(self.n_gpus)) - reported)
            if missing:
                raise RuntimeError(f"launcher: rank(s) {[d + self.rank_start for d in missing]} exited without "
                                   f"reporting a result")
            return out
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
            for p in procs:
                p.join(timeout=5)
                if p.is_alive():
                    p.kill()
                    p.join(timeout=5)
            results.close()
            if self.server is not None:
                self.server.shutdown()
                self.server = None

    def _drain(self, results, out, reported, grace):
        while True:
            try:
                dev, ok, value = results.get(timeout=grace) if grace else results.get_nowait()
            except _queue.Empty:
                return
            if not ok:
                raise RuntimeError(f"launcher: rank {dev + self.rank_start} failed:\n{value}")
            out[dev] = value
            reported.add(dev)
