"""JAX's multi-process runtime under megxla.distributed: its coordination service, this process's client,
the devices of a group, and how failures of other ranks are reported.

megxla starts the runtime the way ``jax.distributed.initialize`` does (same service, same client, same global
state, so JAX's backends see a multi-process run and XLA's collectives use gloo between CPU processes and NCCL
between GPUs), with two additions that ``jax.distributed.initialize`` does not expose:

* the coordination service may run in another process: the launcher's process hosts it (MegEngine's "server
  on the master node"); otherwise rank 0 starts it, and a port already in use is a clear error (JAX's client
  would abort the process after failing to register with whatever listens there);
* every rank publishes its host and process id in the key-value store, so that a collective broken by a peer
  that died is reported with that peer's rank at once (on one machine), rather than as a bare transport error.

A rank that raises, returns (leaves the group) or dies while the others wait in a collective with it makes their
collective raise a :class:`PeerFailure` naming it (``describe_failure``: its traceback from the key-value store, the
"left" key it set on leaving, or its process id gone on this host). Whether JAX's runtime then also ends them
depends on where the coordination service runs:

* in the launcher's process (:class:`Server`), the service is *recoverable*: a rank that died or left is not an
  error of the others, who go on (save a checkpoint) and leave when they are done;
* in rank 0 (plain :func:`init_process_group` in every process), it cannot be: the others need the service
  until they leave, which only JAX's shutdown barrier waits for, and that barrier skips recoverable tasks. There
  the runtime stops every rank with its own fatal error (SIGABRT, naming the unhealthy task = rank)
  ``MEGXLA_DIST_HEARTBEAT`` s after a rank died. (jaxlib 0.10's ``missed_heartbeat_callback``, which would let
  megxla raise instead, cannot be used: converting its status argument aborts the process.)

Settings (environment):
    * ``MEGXLA_DIST_TIMEOUT`` (seconds, default 600): joining, key-value waits and barriers give up after it.
    * ``MEGXLA_DIST_HEARTBEAT`` (seconds, default 30): a rank that sends no heartbeat for this long is dead;
      with the service in rank 0, every other rank then stops with JAX's fatal error naming it.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import time

__all__ = ["timeout", "heartbeat", "start", "stop", "client", "is_started", "group_devices", "Server",
           "record_failure", "failed_ranks", "describe_failure", "port_free", "PeerFailure"]

_DEFAULT_TIMEOUT = 600.0
# 30, not JAX's 100 (a dead rank is named sooner) nor 10: on a loaded 2-core machine (the test suite's two processes
# beside a 2-rank launcher) a live rank's heartbeats missed 10 s once, and the runtime aborted every rank
_DEFAULT_HEARTBEAT = 30


def _env_seconds(name, default):
    value = os.environ.get(name)
    if not value:
        return default
    try:
        t = float(value)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {value!r}") from None
    if not t > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return t


def timeout() -> float:
    """Seconds a blocking distributed operation waits for its peers (``MEGXLA_DIST_TIMEOUT``, default 600)."""
    return _env_seconds("MEGXLA_DIST_TIMEOUT", _DEFAULT_TIMEOUT)


def heartbeat() -> int:
    """Seconds without heartbeat after which a rank counts as dead (``MEGXLA_DIST_HEARTBEAT``, default 30)."""
    return max(1, int(round(_env_seconds("MEGXLA_DIST_HEARTBEAT", _DEFAULT_HEARTBEAT))))


def port_free(host, port) -> bool:
    """True if a TCP server could bind ``port`` (on every interface, as the coordination service does)."""
    for family, addr in ((socket.AF_INET, ("", port)),):
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.bind(addr)
        except OSError:
            return False
        finally:
            s.close()
    return True


class Server:
    r"""The coordination service of a distributed run (MegEngine's ``Server`` on the master node): JAX's
    distributed-runtime service, which hosts the key-value store, barriers and heartbeats of ``world_size``
    processes. The :class:`~megxla.distributed.launcher` starts one in its own process for its workers; with
    plain :func:`~megxla.distributed.init_process_group`, rank 0 starts it.

    Args:
        port: the TCP port; 0 picks a free one.
        world_size: how many processes will join. MegEngine's ``Server(port)`` does not say: then the port is
            only chosen here, and rank 0's :func:`~megxla.distributed.init_process_group` starts the service on
            it (JAX's service must know the number of processes). This process starts no thread then, so it can
            still fork its workers (``multiprocessing.Process``), as MegEngine's examples do.

    Example:
        >>> from megxla.distributed import Server
        >>> s = Server(0, world_size=2)
        >>> s.py_server_port > 0
        True
        >>> s.shutdown()
    """

    def __init__(self, port=0, world_size=None):
        from jax._src.lib import _jax
        if port == 0:
            with socket.socket() as s:
                s.bind(("", 0))
                port = s.getsockname()[1]
        elif not port_free("", port):
            raise RuntimeError(f"Server: port {port} is already in use; choose another port (0 picks a free one)")
        self.py_server_port = self.mm_server_port = port
        self.world_size = world_size
        self._service = None
        if world_size is None:
            return
        # recoverable: a rank that dies or leaves early is not turned into a fatal error of every other rank
        # (JAX's runtime aborted them, SIGABRT, MEGXLA_DIST_HEARTBEAT s after a death, or at their shutdown
        # barrier); their collective with it raises a PeerFailure naming it, and they go on (save a
        # checkpoint). This process outlives the ranks, so no rank needs the shutdown barrier to keep the
        # service up for the others.
        self._service = _jax.get_distributed_runtime_service(f"[::]:{port}", world_size,
                                                             heartbeat_timeout=heartbeat(),
                                                             shutdown_timeout=int(timeout()), recoverable=True)

    def get_mm_server_port(self):
        """The service's port (one port for everything)."""
        return self.py_server_port

    def shutdown(self):
        """Stop the service."""
        if self._service is not None:
            self._service.shutdown()
            self._service = None


class _State:
    def __init__(self):
        self.key = None  # (address, world_size, rank)
        self.client = None
        self.service = None
        self.rank = 0
        self.world_size = 1
        self.own_jax_state = False


_st = _State()
_external_service = False  # set in the launcher's workers: the launcher's process hosts the service
_lock = threading.Lock()


class NotInitializedError(RuntimeError, AssertionError):
    """No process group: ``init_process_group`` (or ``dist.launcher``) has not run in this process. MegEngine
    asserts there ("please call init_process_group first"), so this is an AssertionError too, as well as the
    RuntimeError megxla raised before."""


def is_started():
    return _st.client is not None


def client():
    """This process's ``DistributedRuntimeClient`` (key-value store, barriers)."""
    if _st.client is None:
        raise NotInitializedError("process group is not initialized: call init_process_group first")
    return _st.client


class PeerFailure(RuntimeError):
    """A collective or barrier failed because another rank failed; the message names it."""


def start(master_ip, port, world_size, rank, platform, local_device=None):
    """Start (or join) the runtime: ``world_size`` processes, this one ``rank``; ``platform`` "cpu" uses gloo."""
    import jax
    from jax._src import distributed as jd
    from jax._src import xla_bridge as xb
    from jax._src.lib import _jax
    key = (f"{master_ip}:{port}", world_size, rank)
    with _lock:
        if _st.client is not None:
            if _st.key == key:
                return
            raise RuntimeError(f"init_process_group: this process already joined {_st.key[0]} as rank {_st.key[2]} "
                               f"of {_st.key[1]}; JAX's distributed runtime starts once per process")
        addr = f"{master_ip}:{port}"
        hb, to = heartbeat(), timeout()
        service = None
        if world_size == 1:  # nothing to talk to: a private service for the key-value store only
            service = _jax.get_distributed_runtime_service(f"[::]:{port}", 1, heartbeat_timeout=hb,
                                                           shutdown_timeout=5)
        elif rank == 0 and not _external_service:
            # Rank 0 hosts the service (the launcher's workers join the one in the launcher's process). Never
            # connect to whatever else listens there: JAX's client aborts the process when that fails.
            if not port_free(master_ip, port):
                raise RuntimeError(f"init_process_group: port {port} is already in use; choose another port for the "
                                   f"coordination service")
            service = _jax.get_distributed_runtime_service(f"[::]:{port}", world_size, heartbeat_timeout=hb,
                                                           shutdown_timeout=int(to))
        try:
            cl = _jax.get_distributed_runtime_client(addr, rank, init_timeout=int(to), heartbeat_timeout=hb,
                                                     shutdown_timeout=int(to) if world_size > 1 else 5,
                                                     use_compression=True)
            cl.connect()
        except Exception as exc:
            if service is not None:
                service.shutdown()
            raise RuntimeError(f"init_process_group: rank {rank} could not join the {world_size} processes at "
                               f"{addr} within {to:g} s (MEGXLA_DIST_TIMEOUT): {str(exc).splitlines()[0]}") from None
        _st.client, _st.service, _st.key, _st.rank, _st.world_size = cl, service, key, rank, world_size
        from ..core import _spmd
        _spmd.failure_hook[0] = describe_failure
        _spmd.agree_hook[0] = same_program if world_size > 1 else None
        if world_size > 1:
            cl.key_value_set(f"{_PID_DIR}{rank}", f"{socket.gethostname()}:{os.getpid()}", allow_overwrite=True)
        if world_size == 1:
            return
        # From here on JAX sees a multi-process run: its backends must be (re)created against this client.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if platform == "cpu":
            jax.config.update("jax_platforms", "cpu")
        if local_device is not None and platform != "cpu":
            jax.config.update("jax_cuda_visible_devices", str(local_device))
        gs = jd.global_state
        gs.client, gs.service, gs.process_id, gs.num_processes = cl, None, rank, world_size
        gs.coordinator_address = addr
        _st.own_jax_state = True
        if xb._backends:  # megxla (its random key) or the user created arrays already: start JAX's backends anew
            import jax.extend.backend as jeb
            jeb.clear_backends()


def stop():
    """Leave the runtime (the launcher's workers, re-initialisation)."""
    if _st.client is not None and _st.world_size > 1:
        try:  # the ranks still in a collective with this one name it as having left (describe_failure)
            _st.client.key_value_set(f"{_LEFT_DIR}{_st.rank}", "left", allow_overwrite=True)
        except Exception:
            pass
    with _lock:
        cl, service = _st.client, _st.service
        _st.client = _st.service = _st.key = None
        _programs.clear()  # counted per run
        from ..core import _spmd
        _spmd.agree_hook[0] = None
        if _st.own_jax_state:
            from jax._src import distributed as jd
            gs = jd.global_state
            gs.client = gs.service = None
            _st.own_jax_state = False
    if cl is not None:
        try:
            cl.shutdown()
        except Exception:
            pass
    if service is not None:
        service.shutdown()


def group_devices(ranks, platform):
    """The devices of global ``ranks`` (one per process), in that order."""
    import jax
    devs = {}
    for d in jax.devices(platform):
        devs.setdefault(d.process_index, d)
    missing = [r for r in ranks if r not in devs]
    if missing:
        raise RuntimeError(f"no {platform} device of rank(s) {missing}: every process of the group must have joined "
                           f"with device_type {platform!r}")
    return tuple(devs[r] for r in ranks)


_programs = {}  # (process indices, program key) -> how many such programs this process compiled


def same_program(ranks, key, digest):
    """Check through the key-value store that the processes ``ranks`` compile the same ``key``-th program (its
    ``digest``); raise naming the rank whose program differs. Collectives of programs that differ between
    processes may pair up wrongly, so a difference must stop the run rather than give wrong values."""
    with _lock:
        n = _programs.get((ranks, key), 0)
        _programs[(ranks, key)] = n + 1
    base = f"megxla/program/{'-'.join(map(str, ranks))}/{key}/{n}/"
    cl = client()
    cl.key_value_set(base + str(_st.rank), digest, allow_overwrite=True)
    deadline = time.monotonic() + timeout()
    for r in ranks:
        if r == _st.rank:
            continue
        # Waited for in slices, the peers looked at between them: a rank that died or failed before it got here
        # (its first collective) left this one waiting the whole timeout with no error (41 s under the launcher,
        # which then killed it; 600 s without), where a dead peer in a collective is named in 2-3 s (probe X)
        while True:
            left = deadline - time.monotonic()
            try:
                theirs = cl.blocking_key_value_get(base + str(r), max(1, int(min(left, _PROGRAM_WAIT_SLICE) * 1000)))
                break
            except Exception as exc:
                what = f"SPMD program {key} (number {n}) over ranks {list(ranks)}"
                gone = _gone(what, (r,))
                if gone is not None:
                    raise gone from None
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"{what}: rank {r} did not compile it within {timeout():g} s "
                                       f"(MEGXLA_DIST_TIMEOUT): {str(exc).splitlines()[0]}") from None
        if theirs != digest:
            raise RuntimeError(f"SPMD program {key} (number {n}) over ranks {list(ranks)}: rank {_st.rank} and rank "
                               f"{r} compiled different programs; their collectives could pair up wrongly. Every "
                               f"rank must run the same step (same ops in the same order)")


# ---- failures ----------------------------------------------------------------------------------------------------
_FAIL_DIR = "megxla/failed/"
_PID_DIR = "megxla/pid/"
_LEFT_DIR = "megxla/left/"  # ranks that left the group (their function returned, or they shut down)


def _left_ranks():
    try:
        items = _st.client.key_value_dir_get(_LEFT_DIR)
    except Exception:
        return []
    return sorted(r for r in (int(k.rsplit("/", 1)[1]) for k, _ in items) if r != _st.rank)


def record_failure(text):
    """Tell the other ranks (through the key-value store) that this rank fails, with its traceback."""
    if _st.client is None:
        return
    try:
        _st.client.key_value_set(f"{_FAIL_DIR}{_st.rank}", text[-20000:], allow_overwrite=True)
    except Exception:
        pass


def failed_ranks():
    """``{rank: traceback}`` of the ranks that reported a failure."""
    if _st.client is None:
        return {}
    try:
        items = _st.client.key_value_dir_get(_FAIL_DIR)
    except Exception:
        return {}
    return {int(k.rsplit("/", 1)[1]): v for k, v in items}


def _dead_peers():
    """Ranks on this host whose process is gone (from the host/pid each rank published when it joined)."""
    host = socket.gethostname()
    dead = []
    try:
        items = _st.client.key_value_dir_get(_PID_DIR)
    except Exception:
        return dead
    for key, value in items:
        rank = int(key.rsplit("/", 1)[1])
        h, _, pid = value.rpartition(":")
        if rank == _st.rank or h != host:
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            dead.append(rank)
        except OSError:
            pass
    return sorted(dead)


_PROGRAM_WAIT_SLICE = 1.0  # seconds between two looks at the peers while waiting for their program (same_program)


def _gone(what, ranks=None, dead=True, waiting="for it"):
    """A :class:`PeerFailure` naming the first of ``ranks`` (default: every other rank) that reported a failure,
    left the group or (``dead``) died; else None. ``waiting``: what this rank was waiting in."""
    def mine(rs):
        return sorted(r for r in rs if r != _st.rank and (ranks is None or r in ranks))
    got = failed_ranks()
    failed = mine(got)
    if failed:
        return PeerFailure(f"{what}: rank {failed[0]} failed:\n{got[failed[0]]}")
    left = mine(_left_ranks())
    if left:
        return PeerFailure(f"{what}: rank {left[0]} left the group (its function returned, or it shut the group "
                           f"down) while this rank waited {waiting}")
    gone = mine(_dead_peers()) if dead else []
    if gone:
        more = "" if len(gone) == 1 else f"; dead ranks: {gone}"
        return PeerFailure(f"{what}: rank {gone[0]} died (its process is gone) while this rank waited {waiting}{more}")
    return None


def describe_failure(exc, what):
    """A :class:`PeerFailure` for a failed collective naming the rank that failed: one that reported its
    exception (through the key-value store), or one whose process is gone."""
    start = time.monotonic()
    while True:
        # (a dead rank is named after a moment: a failing rank gets it to report its traceback)
        failure = _gone(what, dead=time.monotonic() - start > 0.5, waiting="in a collective with it")
        if failure is not None:
            return failure
        if time.monotonic() - start > 3.0:
            break
        time.sleep(0.05)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return PeerFailure(f"{what} failed on rank {_st.rank}: a peer process left the collective (no rank reported an "
                       f"error; the runtime names a dead rank after MEGXLA_DIST_HEARTBEAT s): {first}")
