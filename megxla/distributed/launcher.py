"""``launcher``: run a function in ``n`` worker processes that form one distributed group on JAX's multi-process
runtime.

How workers start (MegEngine forks; JAX is multithreaded once its backend runs, and a forked copy of a running
XLA backend can deadlock):

* **fork** when that is safe: POSIX, and this process has not started an XLA backend (no array was created
  yet; importing megxla creates none, so the XLA guide's script -- imports, a decorated worker, a call -- forks).
  The children inherit the function as it is, like MegEngine's.
* **fresh interpreters** otherwise: ``python -c <bootstrap>`` receiving the function, its arguments and this
  process's ``sys.path`` *by value* through cloudpickle (a maintained serializer that handles functions defined
  in ``__main__``, nested functions, closures, lambdas, ``functools.partial`` and bound methods). The user's
  script is not re-run, so a module-level ``worker()`` call without a main guard, ``python -c`` and interactive
  sessions work. ``MEGXLA_LAUNCHER_START=spawn`` forces this mode.

The launcher's process hosts the coordination service (JAX's; MegEngine's "server on the master node"); each
worker joins it with :func:`init_process_group`. Results come back in local-rank order. If a worker fails, the
others' collectives with it raise a ``PeerFailure`` (a ``RuntimeError``) naming it, they get 30 s to finish
(e.g. catch it and save a checkpoint; the service is recoverable, so JAX's runtime does not abort them), then
they are stopped and a ``LauncherError`` (a ``RuntimeError``, and an ``AssertionError`` as MegEngine's) carries
the first failing rank's traceback.
"""
from __future__ import annotations

import functools
import io
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback

from . import _runtime

__all__ = ["launcher"]

_SURVIVOR_GRACE = 30.0  # seconds the other ranks may go on after one failed (plus MEGXLA_DIST_HEARTBEAT)

_BOOT = ("import pickle, sys\n"
         "with open(sys.argv[1], 'rb') as f:\n"
         "    paths = pickle.load(f)\n"
         "    sys.path[:] = paths + [p for p in sys.path if p not in paths]\n"
         "    payload = f.read()\n"
         "from megxla.distributed.launcher import _spawned_main\n"
         "_spawned_main(payload, int(sys.argv[2]), sys.argv[3])\n")


class LauncherError(RuntimeError, AssertionError):
    """A worker of the :class:`launcher` failed (raised, exited with an error or died). MegEngine's launcher
    asserts each worker's exit code ("subprocess 1 exit with code 1"), so this is an AssertionError too, as well
    as the RuntimeError megxla raised before."""


def _import(name):
    import importlib
    return importlib.import_module(name)


def _dump(obj) -> bytes:
    import types
    import cloudpickle

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, o):
            # Modules whose class is a ModuleType subclass (megxla's, for module-level properties) go by name,
            # like plain modules; cloudpickle only recognises the exact type.
            if isinstance(o, types.ModuleType) and type(o) is not types.ModuleType and o.__name__ in sys.modules:
                return _import, (o.__name__,)
            return super().reducer_override(o)

    buf = io.BytesIO()
    Pickler(buf).dump(obj)
    return buf.getvalue()


def _write_result(path, record):
    tmp = path + ".tmp"
    try:
        data = _dump(record)
    except Exception as exc:  # an unpicklable return value is this rank's failure, said plainly
        data = _dump((record[0], False, f"launcher: the return value of rank {record[0]} cannot be pickled: "
                                        f"{type(exc).__name__}: {exc}", False, time.time()))
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _worker(func, args, kwargs, cfg, rank, dev, result_path):
    """Body of a worker process: join the group, run ``func``, write its result (or traceback); never returns."""
    from .group import _shutdown, init_process_group
    code = 0
    _runtime._external_service = cfg["rank_start"] != 0 or cfg.get("hosted", True)
    try:
        init_process_group(master_ip=cfg["master_ip"], port=cfg["port"], world_size=cfg["world_size"], rank=rank,
                           device=dev, backend=cfg["backend"], device_type=cfg["device_type"])
        try:
            ret = func(*args, **kwargs)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise
            ret = None  # exit(0) in a worker: MegEngine's launcher gives None for that rank
        _write_result(result_path, (rank, True, ret, False, time.time()))
        _shutdown()
    except BaseException as exc:  # report everything, KeyboardInterrupt included, then exit non-zero
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        others = {r: t for r, t in _runtime.failed_ranks().items() if r != rank}
        secondary = bool(others) or isinstance(exc, _runtime.PeerFailure)
        if not secondary:
            _runtime.record_failure(text)  # the other ranks name this one in their errors
        _write_result(result_path, (rank, False, text, secondary, time.time()))
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's exit handlers: JAX's would wait at the runtime's shutdown barrier for the
    # ranks that failed, which is the hang this launcher exists to avoid.
    os._exit(code)


def _spawned_main(payload, dev, result_path):
    rank = dev
    try:
        func, args, kwargs, cfg = pickle.loads(payload)
        rank = cfg["rank_start"] + dev
    except BaseException as exc:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        _write_result(result_path, (rank, False, f"launcher: could not load the function in the worker:\n{text}",
                                    False, time.time()))
        os._exit(1)
    _worker(func, args, kwargs, cfg, rank, dev, result_path)


def _fork_safe():
    if os.environ.get("MEGXLA_LAUNCHER_START") == "spawn" or not hasattr(os, "fork"):
        return False
    from jax._src import xla_bridge
    return not xla_bridge._backends


class launcher:
    r"""Run ``func`` in ``n_gpus`` new processes (ranks ``rank_start ... rank_start + n_gpus - 1``).

    Each process calls :func:`init_process_group` and then ``func(*args, **kwargs)``; calling the launcher
    returns the list of the processes' return values, in local rank order. Each process drives one device:
    one GPU each when the machine has enough GPUs (NCCL between them), else one CPU device each (gloo), so
    ``n_gpus=2`` works on a CPU-only machine. ``func`` may be any callable: a decorated module-level function
    (with or without an ``if __name__ == "__main__"`` guard), a nested function, a closure, a lambda, a
    ``functools.partial`` or a bound method, in a script, ``python -c`` or an interactive session (see the
    module documentation for fork vs. fresh interpreters). If a process fails, the others are stopped and a
    ``RuntimeError`` carries the first failing rank's traceback.

    Args:
        func: the function to run in every process.
        n_gpus: number of processes on this machine; default ``get_device_count("gpu")``, or 1 without GPUs.
        world_size: total number of processes over all machines; default ``n_gpus``.
        rank_start: global rank of the first process here; a launcher with ``rank_start > 0`` (another
            machine) joins the coordination service of the one with ``rank_start=0`` at ``master_ip:port``.
        master_ip: address of the machine with ``rank_start=0``.
        port: the coordination service's port; 0 picks a free one (``rank_start=0`` only).
        device_type: ``"xpu"``, ``"gpu"``/``"cuda"`` or ``"cpu"``.
        backend: the backend name recorded by :func:`init_process_group`.

    Example:
        >>> import megxla.distributed as dist
        >>> @dist.launcher(n_gpus=2, device_type="cpu")
        ... def worker(k):
        ...     return dist.get_rank() * k
        >>> worker(10)   # doctest: +SKIP
        [0, 10]
    """

    def __new__(cls, *args, **kwargs):
        if not args:  # @launcher(n_gpus=2) as a decorator factory
            return functools.partial(cls, **kwargs)
        return super().__new__(cls)

    def __init__(self, func, n_gpus=None, world_size=None, rank_start=0, master_ip="localhost", port=0,
                 device_type="xpu", backend="nccl"):
        if not callable(func):
            raise TypeError(f"launcher: func must be callable, got {type(func).__name__}")
        if device_type not in ("xpu", "gpu", "cuda", "cpu", "rocm"):
            raise ValueError(f"launcher: device_type must be 'xpu', 'gpu', 'cuda', 'rocm' or 'cpu', got {device_type!r}")
        self._gpu_count = None
        if n_gpus is None:
            n_gpus = self._gpus(device_type) or 1
        if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
            raise ValueError(f"launcher: n_gpus must be a positive int, got {n_gpus!r}")
        world_size = n_gpus if world_size is None else world_size
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"launcher: world_size must be a positive int, got {world_size!r}")
        if isinstance(rank_start, bool) or not isinstance(rank_start, int) or rank_start < 0:
            raise ValueError(f"launcher: rank_start must be a non-negative int, got {rank_start!r}")
        if rank_start + n_gpus > world_size:
            raise ValueError(f"launcher: ranks {rank_start}..{rank_start + n_gpus - 1} do not fit in "
                             f"world_size={world_size}")
        if not isinstance(master_ip, str):
            raise TypeError(f"launcher: master_ip must be a str, got {type(master_ip).__name__}")
        if rank_start != 0 and port == 0:
            raise ValueError("launcher: rank_start > 0 needs the master's port")
        self.func = func
        self.n_gpus = n_gpus
        self.world_size = world_size
        self.rank_start = rank_start
        self.master_ip = master_ip
        self.port = port
        self.device_type = device_type
        self.backend = backend
        self.server = None
        try:
            functools.update_wrapper(self, func)
        except AttributeError:  # a partial or a callable object has no __name__ to copy
            pass

    def _gpus(self, device_type):
        if device_type == "cpu":
            return 0
        if self._gpu_count is None:
            # Counting GPUs starts an XLA backend (and forking is unsafe after that): ask only when the answer
            # matters, and not at all where no GPU can be there
            from jax._src import xla_bridge
            from .._device import get_device_count, gpus_without_a_backend
            n = None if xla_bridge._backends else gpus_without_a_backend()
            self._gpu_count = get_device_count("gpu") if n is None else n
        return self._gpu_count

    def _device_type(self):
        return self.device_type if self.n_gpus <= self._gpus(self.device_type) else "cpu"

    def _env(self):
        env = dict(os.environ)
        if self._device_type() == "cpu":
            env["JAX_PLATFORMS"] = "cpu"
        else:
            env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # several processes share the machine's GPUs
        return env

    def __call__(self, *args, **kwargs):
        fork = _fork_safe()
        device_type = self._device_type() if not fork or self.device_type == "cpu" else self.device_type
        port = self.port
        if self.rank_start == 0 and port == 0:
            import socket
            with socket.socket() as s:
                s.bind(("", 0))
                port = s.getsockname()[1]
        elif self.rank_start == 0 and not _runtime.port_free(self.master_ip, port):
            raise RuntimeError(f"launcher: port {port} is already in use; choose another port (0 picks a free one)")
        cfg = dict(master_ip=self.master_ip, port=port, world_size=self.world_size, backend=self.backend,
                   device_type=device_type, rank_start=self.rank_start)
        tmp = tempfile.mkdtemp(prefix="megxla-launch-")
        results = [os.path.join(tmp, f"rank{d}.pkl") for d in range(self.n_gpus)]
        procs = []
        try:
            if fork:
                for dev in range(self.n_gpus):
                    pid = os.fork()
                    if pid == 0:  # the child: never returns
                        try:
                            if device_type == "cpu":
                                import jax
                                jax.config.update("jax_platforms", "cpu")
                            _worker(self.func, args, kwargs, cfg, self.rank_start + dev, dev, results[dev])
                        finally:
                            os._exit(1)
                    procs.append(_Forked(pid))
            else:
                try:
                    payload = _dump((self.func, args, kwargs, cfg))
                except Exception as exc:
                    raise TypeError(f"launcher: cannot send {self.func!r} and its arguments to the workers: "
                                    f"{type(exc).__name__}: {exc}") from exc
                path = os.path.join(tmp, "payload.pkl")
                with open(path, "wb") as f:
                    pickle.dump([p for p in sys.path if isinstance(p, str)], f)
                    f.write(payload)
                env = self._env()
                for dev in range(self.n_gpus):
                    procs.append(_Spawned(subprocess.Popen([sys.executable, "-c", _BOOT, path, str(dev),
                                                            results[dev]], env=env)))
            if self.rank_start == 0:  # after forking: the service's threads must not be copied into children
                self.server = _runtime.Server(port, self.world_size)
            return self._collect(procs, results)
        finally:
            for p in procs:
                p.stop()
            if self.server is not None:
                self.server.shutdown()
                self.server = None
            for name in os.listdir(tmp):
                os.unlink(os.path.join(tmp, name))
            os.rmdir(tmp)

    def _collect(self, procs, results):
        out = [None] * self.n_gpus
        done = [False] * self.n_gpus
        failures = []  # (primary first, time, rank, text)
        first_fail = None
        while not all(done):
            for dev, p in enumerate(procs):
                if done[dev]:
                    continue
                code = p.poll()
                if code is None:
                    continue
                done[dev] = True
                rank = self.rank_start + dev
                if os.path.exists(results[dev]):
                    with open(results[dev], "rb") as f:
                        _, ok, value, secondary, when = pickle.load(f)
                    if ok:
                        out[dev] = value
                        continue
                    failures.append((secondary, when, rank, value))
                else:
                    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                    failures.append((False, time.time(), rank, f"rank {rank} {how} without reporting a result"))
                if first_fail is None:
                    first_fail = time.monotonic()
            if first_fail is not None:
                # Give the others time to finish (their collectives with the failed rank raise a PeerFailure
                # naming it at once; a rank that catches it may save a checkpoint), then stop them.
                if all(done) or time.monotonic() - first_fail > _SURVIVOR_GRACE + _runtime.heartbeat():
                    break
            time.sleep(0.02)
        if failures:
            failures.sort()
            _, _, rank, text = failures[0]
            others = "".join(f"\n  rank {r}: {_last_line(t)}" for _, _, r, t in failures[1:])
            raise LauncherError(f"launcher: rank {rank} failed:\n{text}" +
                                (f"\nthe other ranks then stopped with:{others}" if others else ""))
        return out


def _last_line(text):
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    named = [ln for ln in lines if "PeerFailure:" in ln]  # "... rank N failed:" comes before N's own traceback
    return named[0] if named else (lines[-1] if lines else "")


class _Forked:
    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def terminate(self):
        os.kill(self.pid, signal.SIGTERM)

    def kill(self):
        os.kill(self.pid, signal.SIGKILL)

    def stop(self):
        _stop(self)


def _stop(p):
    if p.poll() is not None:
        return
    p.terminate()
    deadline = time.monotonic() + 5
    while p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if p.poll() is None:
        p.kill()
        while p.poll() is None:
            time.sleep(0.02)


class _Spawned:
    def __init__(self, popen):
        self.popen = popen

    def poll(self):
        return self.popen.poll()

    def terminate(self):
        self.popen.terminate()

    def kill(self):
        self.popen.kill()

    def stop(self):
        _stop(self)
