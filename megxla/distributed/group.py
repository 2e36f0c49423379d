"""Process groups and the process-wide distributed state (``megengine.distributed.group``), on JAX's
multi-process runtime (:mod:`megxla.distributed._runtime`)."""
from __future__ import annotations

import contextlib
import sys
import time
import traceback
from typing import List, Optional

from . import _runtime
from .server import Client

__all__ = ["Group", "WORLD", "init_process_group", "new_group", "get_rank", "get_world_size", "is_distributed",
           "get_backend", "get_client", "get_mm_server_addr", "get_py_server_addr", "group_barrier",
           "override_backend", "group_start", "group_end"]

_BACKENDS = ("auto", "nccl", "rccl", "shm", "ucx")
_DEVICE_TYPES = ("xpu", "gpu", "cuda", "cpu", "rocm")


class StaticData:
    """What ``init_process_group`` learned: this process's rank, the world, its server connection."""

    def __init__(self, master_ip, port, world_size, rank, device, backend, device_type, client, platform):
        self.master_ip = master_ip
        self.py_server_port = port
        self.mm_server_port = port
        self.world_size = world_size
        self.proc_rank = rank
        self.device = device
        self.backend = backend
        self.device_type = device_type
        self.client = client
        self.platform = platform  # "cpu" (gloo between processes) or "gpu" (NCCL)
        self.next_stream = 1
        self.barriers = 0


_sd: Optional[StaticData] = None


class GroupRanksError(ValueError, AssertionError):
    """Ranks that make no group here (not ints in ``[0, world_size)``, repeated, or without this process's rank).
    MegEngine's ``Group.check`` asserts each, so this is an AssertionError too, as well as the ValueError megxla
    raised before."""


class AlreadyInitializedError(RuntimeError, AssertionError):
    """A second ``init_process_group`` in a process that has joined a group. MegEngine asserts there
    ("init_process_group should be called only once"), so this is an AssertionError too."""


class Group:
    r"""A set of global ranks that run collectives together.

    ``WORLD`` (every rank) is the default group of every collective; make others with :func:`new_group`.
    Every process of the group must call the same collectives in the same order.

    Args:
        proc_ranks: the global ranks of the group, in group-rank order; must contain this process's rank.

    Example:
        >>> import megxla.distributed as dist  # doctest: +SKIP
        >>> g = dist.new_group([0])   # after init_process_group  # doctest: +SKIP
        >>> g.size, g.rank, g.key  # doctest: +SKIP
        (1, 0, '0')
    """

    def __init__(self, proc_ranks):
        if len(proc_ranks) == 0:  # WORLD before init_process_group
            self.proc_ranks = None
            self.stream = None
        else:
            self.reset(proc_ranks)

    def reset(self, proc_ranks):
        r"""Make this group the ranks ``proc_ranks`` (``init_process_group`` does it for ``WORLD``).

        Args:
            proc_ranks: list of global ranks.
        """
        self.check(proc_ranks)
        self.proc_ranks = [int(r) for r in proc_ranks]
        self.stream = _sd.next_stream
        _sd.next_stream += 1

    def check(self, proc_ranks):
        r"""Validate ``proc_ranks``: distinct ints in ``[0, world_size)`` including this process's rank.

        Args:
            proc_ranks: list of global ranks.
        """
        if _sd is None:
            raise _runtime.NotInitializedError("process group is not initialized: call init_process_group first")
        ranks = list(proc_ranks)
        for r in ranks:
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < _sd.world_size:
                raise GroupRanksError(f"Group: rank {r!r} is not an int in [0, {_sd.world_size})")
        if len(set(ranks)) != len(ranks):
            raise GroupRanksError(f"Group: repeated rank in {ranks}")
        if _sd.proc_rank not in ranks:
            raise GroupRanksError(f"Group: this process (rank {_sd.proc_rank}) is not in {ranks}")

    def _ranks(self):
        if not self.proc_ranks:
            raise _runtime.NotInitializedError("invalid group: the process group is not initialized (call "
                                              "init_process_group)")
        return self.proc_ranks

    @property
    def size(self):
        """Number of processes in the group."""
        return len(self._ranks())

    @property
    def key(self):
        """The group's name on the server (its ranks, comma separated)."""
        return ",".join(map(str, self._ranks()))

    @property
    def rank(self):
        """This process's rank within the group (0 is the root of broadcast/reduce/gather/scatter)."""
        return self._ranks().index(_sd.proc_rank)

    @property
    def devices(self):
        """The group's devices, one per process, in group-rank order (the mesh of its collectives)."""
        ranks = tuple(self._ranks())
        cached = getattr(self, "_devices", None)
        if cached is None or cached[0] != (ranks, _sd.platform):
            cached = self._devices = ((ranks, _sd.platform), _runtime.group_devices(ranks, _sd.platform))
        return cached[1]

    @property
    def comp_node(self):
        """The device name and stream of the group's collectives, as MegEngine's ``xpuN:stream``."""
        self._ranks()
        return f"{_sd.device_type}{_sd.device}:{self.stream}"

    @property
    def is_single_machine(self):
        """True when the run's coordinator is on this machine (a loopback ``master_ip``)."""
        self._ranks()
        return _sd.master_ip in ("localhost", "127.0.0.1", "::1")

    def __repr__(self):
        return f"Group({self.proc_ranks or []})"


WORLD = Group([])


def _platform(device_type):
    from .. import _device
    if device_type == "cpu":
        return "cpu"
    return "gpu" if _device.get_device_count("gpu") else "cpu"


def _select_device(platform, device_type, device):
    import jax
    from ..core import dtypes
    # One device per process: this process's own device becomes the default, named as MegEngine's
    # set_default_device(f"{device_type}{device}") names it ("xpu2" in rank 2 of a launcher), which is also
    # what Group.comp_node shows
    dev = jax.local_devices(backend=platform)[0]
    dtypes._default_device = dev
    dtypes._default_logical = name = f"{device_type}{device}"
    # the name's CompNode is this process's one device: resolving "xpu1" among the local devices (rank 1 of a
    # CPU launch has one) raised, so printing a tensor failed there (the distributed guide's pipeline example)
    node = dtypes.CompNode(dev)
    node._logical = dtypes._logical(name)
    dtypes._NODES[name] = node


def _excepthook(kind, value, tb):
    # An uncaught exception in a worker: tell the other ranks who failed and why (their collectives report it
    # instead of waiting), then leave at once -- JAX's exit-time shutdown barrier would otherwise keep this
    # process, and with it its peers, waiting for MEGXLA_DIST_TIMEOUT.
    text = "".join(traceback.format_exception(kind, value, tb))
    _runtime.record_failure(text)
    _prev_hook[0](kind, value, tb)
    if _sd is not None and _sd.world_size > 1:
        sys.stderr.flush()
        sys.stdout.flush()
        import os
        os._exit(1)


_prev_hook = [None]


def init_process_group(master_ip: str, port: int, world_size: int, rank: int, device: int,
                       backend: Optional[str] = "auto", device_type: str = "xpu") -> None:
    r"""Join a distributed run: start JAX's distributed runtime in this process as ``rank`` of ``world_size``.

    Every rank calls it with the same ``master_ip``, ``port`` and ``world_size`` (the processes may be on
    several machines; ``master_ip`` is the machine of the coordination service). Rank 0 starts the service
    (JAX's coordination service: key-value store, barriers, heartbeats); under the :class:`launcher` its
    process hosts it. A ``port`` already in use on rank 0 is a ``RuntimeError`` saying so. The call returns
    once every rank has joined; a rank that cannot join within ``MEGXLA_DIST_TIMEOUT`` seconds (default 600)
    is stopped by JAX's runtime with a fatal error naming the registration that timed out.

    One process drives one device, as in MegEngine. Collectives are XLA collectives: gloo between CPU
    processes, NCCL between GPUs. ``device_type="cpu"`` (or a machine without GPUs) uses the CPU. If this
    process created arrays before (importing megxla does), JAX's backends are restarted so that they know
    the other processes; tensors made before keep working. As in MegEngine, the global random seed is
    reseeded per rank. ``backend`` is recorded (:func:`get_backend`): XLA picks the transport.

    A rank that raises, returns or dies while the others wait in a collective with it makes theirs raise a
    ``RuntimeError`` (``PeerFailure``) naming it, with their parameters as before that step. Here rank 0 hosts
    the coordination service, and JAX's runtime also stops every rank with a fatal error
    ``MEGXLA_DIST_HEARTBEAT`` seconds (default 30) after a rank died; under the :class:`launcher` (its process
    hosts the service) the others go on.

    Args:
        master_ip: address of the coordination service (rank 0's machine).
        port: its port.
        world_size: total number of processes.
        rank: this process's rank in ``[0, world_size)``.
        device: index of this process's device on its machine.
        backend: ``"auto"``, ``"nccl"``, ``"rccl"``, ``"shm"`` or ``"ucx"``.
        device_type: ``"xpu"`` (GPU if present, else CPU), ``"gpu"``/``"cuda"`` or ``"cpu"``.

    Example:
        >>> import megxla.distributed as dist
        >>> dist.init_process_group("localhost", 23456, 1, 0, 0)   # doctest: +SKIP
        >>> dist.get_world_size(), dist.get_rank(), dist.is_distributed()   # doctest: +SKIP
        (1, 0, True)
    """
    global _sd
    if not isinstance(master_ip, str):
        raise TypeError(f"init_process_group: master_ip must be a str, got {type(master_ip).__name__}")
    for name, value in (("port", port), ("world_size", world_size), ("rank", rank), ("device", device)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"init_process_group: {name} must be an int, got {value!r}")
    if world_size < 1:
        raise ValueError(f"init_process_group: world_size must be positive, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"init_process_group: rank {rank} is not in [0, world_size={world_size})")
    if not 0 < port < 65536:
        raise ValueError(f"init_process_group: port must be in [1, 65535], got {port}")
    if device < 0:
        raise ValueError(f"init_process_group: device must be >= 0, got {device}")
    if backend is None:
        backend = "auto"
    if backend not in _BACKENDS:
        raise ValueError(f"init_process_group: backend must be one of {_BACKENDS}, got {backend!r}")
    if device_type not in _DEVICE_TYPES:
        raise ValueError(f"init_process_group: device_type must be one of {_DEVICE_TYPES}, got {device_type!r}")
    if _sd is not None:
        # MegEngine asserts it. Leaving the group to join another hung: under the launcher both ranks then waited
        # MEGXLA_DIST_TIMEOUT for a service nobody started at the new address.
        raise AlreadyInitializedError(f"init_process_group should be called only once: this process is rank "
                                      f"{_sd.proc_rank} of {_sd.world_size} at {_sd.master_ip}:{_sd.py_server_port}")
    platform = _platform(device_type)
    _runtime.start(master_ip, port, world_size, rank, platform, local_device=device)
    _sd = StaticData(master_ip, port, world_size, rank, device, backend, device_type,
                     Client(master_ip, port), platform)
    WORLD.reset(list(range(world_size)))
    _select_device(platform, device_type, device)
    from . import _collective
    _collective.reset_counters()
    if world_size > 1 and _prev_hook[0] is None:
        _prev_hook[0] = sys.excepthook
        sys.excepthook = _excepthook
    if world_size > 1 and not _runtime._external_service and not _exit_hook[0]:
        # Leave the group when this process ends, after the others (the runtime's shutdown barrier): rank 0
        # hosts the service, and a multiprocessing worker ends with os._exit, without the interpreter's exit
        # handlers -- its service would vanish under the ranks still finishing. multiprocessing runs its
        # finalizers there (and at the main interpreter's exit).
        from multiprocessing import util
        util.Finalize(None, _leave_at_exit, exitpriority=10)
        _exit_hook[0] = True
    from ..random import seed
    seed(int(time.time()) + rank)


_exit_hook = [False]


def _leave_at_exit():
    if _sd is not None:
        _shutdown()


def _shutdown():
    """Leave the process group (used when re-initialising and by the launcher's workers)."""
    global _sd
    _sd = None
    WORLD.proc_ranks = None
    WORLD.stream = None
    if _prev_hook[0] is not None:
        sys.excepthook, _prev_hook[0] = _prev_hook[0], None
    _runtime.stop()


def is_distributed() -> bool:
    r"""True after :func:`init_process_group` in this process.

    Example:
        >>> import megxla.distributed as dist
        >>> isinstance(dist.is_distributed(), bool)
        True
    """
    return _sd is not None


def get_rank() -> int:
    r"""This process's global rank (0 when not distributed).

    Example:
        >>> import megxla.distributed as dist
        >>> dist.get_rank()   # in a single process
        0
    """
    return _sd.proc_rank if _sd is not None else 0


def get_world_size() -> int:
    r"""Number of processes in the run (1 when not distributed).

    Example:
        >>> import megxla.distributed as dist
        >>> dist.get_world_size()   # in a single process
        1
    """
    return _sd.world_size if _sd is not None else 1


def get_backend() -> str:
    r"""The backend name given to :func:`init_process_group` (None when not distributed).

    XLA chooses the transport whatever the name: gloo between CPU processes, NCCL between GPUs.

    Example:
        >>> import megxla.distributed as dist
        >>> dist.get_backend() in (None, "auto", "nccl", "rccl", "shm", "ucx")
        True
    """
    return _sd.backend if _sd is not None else None


def _require():
    if _sd is None:
        raise _runtime.NotInitializedError("process group is not initialized: call init_process_group first")
    return _sd


def get_client() -> Client:
    r"""This process's :class:`Client` of the run's key-value store (JAX's coordination service).

    Example:
        >>> dist.get_client().user_set("k", 1)   # after init_process_group  # doctest: +SKIP
    """
    return _require().client


def get_mm_server_addr():
    r"""``(master_ip, port)`` of the coordination service (JAX's runtime also bootstraps gloo/NCCL, MegEngine's
    "mm server").

    Example:
        >>> ip, port = dist.get_mm_server_addr()   # after init_process_group  # doctest: +SKIP
    """
    sd = _require()
    return sd.master_ip, sd.mm_server_port


def get_py_server_addr():
    r"""``(master_ip, port)`` of the coordination service (key-value store).

    Example:
        >>> ip, port = dist.get_py_server_addr()   # after init_process_group  # doctest: +SKIP
    """
    sd = _require()
    return sd.master_ip, sd.py_server_port


def new_group(proc_ranks: List[int]) -> Group:
    r"""A :class:`Group` of the given global ranks; every member calls it with the same list.

    Args:
        proc_ranks: global ranks, in group-rank order; must contain this process's rank.

    Returns:
        the group.

    Example:
        >>> g = dist.new_group([0, 1])   # on ranks 0 and 1  # doctest: +SKIP
    """
    return Group(proc_ranks)


def group_barrier(group: Group = WORLD) -> None:
    r"""Block until every process of ``group`` reaches the barrier (no-op when not distributed).

    Args:
        group: the group, ``WORLD`` by default.

    Example:
        >>> dist.group_barrier()  # doctest: +SKIP
    """
    if not isinstance(group, Group):
        raise TypeError(f"group_barrier: expected a Group, got {type(group).__name__}")
    if _sd is None or group.size == 1:
        return
    # Barrier ids must be unique per use; every member counts its barriers on this group in program order.
    n = _sd.barriers = _sd.barriers + 1
    try:
        _runtime.client().wait_at_barrier(f"megxla/barrier/{group.key}/{n}", int(_runtime.timeout() * 1000),
                                          process_ids=list(group.proc_ranks))
    except Exception as exc:
        raise _runtime.describe_failure(exc, f"group_barrier of ranks {group.proc_ranks}") from None


@contextlib.contextmanager
def override_backend(new_backend: str):
    r"""Temporarily change the recorded backend name (a context manager).

    Args:
        new_backend: one of ``"auto"``, ``"nccl"``, ``"rccl"``, ``"shm"``, ``"ucx"``.

    Example:
        >>> with dist.override_backend("shm"):  # doctest: +SKIP
        ...     dist.get_backend()
        'shm'
    """
    sd = _require()
    if new_backend not in _BACKENDS:
        raise ValueError(f"override_backend: backend must be one of {_BACKENDS}, got {new_backend!r}")
    prev = sd.backend
    sd.backend = new_backend
    try:
        yield
    finally:
        sd.backend = prev


def group_start():
    r"""Start a batch of point-to-point operations (NCCL's ``groupStart``).

    Each megxla send or receive is its own XLA collective and completes on its own, so batching changes
    nothing: the call only checks that the process group exists.

    Example:
        >>> dist.group_start(); F.distributed.remote_send(x, 1); dist.group_end()  # doctest: +SKIP
    """
    _require()


def group_end():
    r"""End a batch started by :func:`group_start` (nothing is pending: each transfer completed).

    Example:
        >>> dist.group_start(); y = F.distributed.remote_recv(0); dist.group_end()  # doctest: +SKIP
    """
    _require()
