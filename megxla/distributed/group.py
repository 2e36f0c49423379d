"""Process groups and the process-wide distributed state (``megengine.distributed.group``)."""
from __future__ import annotations

import contextlib
import time
from typing import List, Optional

from .server import Client, Server, default_timeout, loopback_host

__all__ = ["Group", "WORLD", "init_process_group", "new_group", "get_rank", "get_world_size", "is_distributed",
           "get_backend", "get_client", "get_mm_server_addr", "get_py_server_addr", "group_barrier",
           "override_backend", "group_start", "group_end"]

_BACKENDS = ("auto", "nccl", "rccl", "shm", "ucx")
_DEVICE_TYPES = ("xpu", "gpu", "cuda", "cpu", "rocm")


class StaticData:
    """What ``init_process_group`` learned: this process's rank, the world, its server connection."""

    def __init__(self, master_ip, port, world_size, rank, device, backend, device_type, client, server):
        self.master_ip = master_ip
        self.py_server_port = port
        self.mm_server_port = port
        self.world_size = world_size
        self.proc_rank = rank
        self.device = device
        self.backend = backend
        self.device_type = device_type
        self.client = client
        self.server = server  # the Server this process started (rank 0 without an external one), or None
        self.next_stream = 1


_sd: Optional[StaticData] = None


class Group:
    r"""A set of global ranks that run collectives together.

    ``WORLD`` (every rank) is the default group of every collective; make others with :func:`new_group`.
    Every process of the group must call the same collectives in the same order.

    Args:
        proc_ranks: the global ranks of the group, in group-rank order; must contain this process's rank.

    Example:
        >>> import megxla.distributed as dist
        >>> g = dist.new_group([0])   # after init_process_group
        >>> g.size, g.rank, g.key
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
            raise RuntimeError("process group is not initialized: call init_process_group first")
        ranks = list(proc_ranks)
        for r in ranks:
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < _sd.world_size:
                raise ValueError(f"Group: rank {r!r} is not an int in [0, {_sd.world_size})")
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"Group: repeated rank in {ranks}")
        if _sd.proc_rank not in ranks:
            raise ValueError(f"Group: this process (rank {_sd.proc_rank}) is not in {ranks}")

    def _ranks(self):
        if not self.proc_ranks:
            raise RuntimeError("invalid group: the process group is not initialized (call init_process_group)")
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
    def comp_node(self):
        """The device name and stream of the group's collectives, as MegEngine's ``xpuN:stream``."""
        self._ranks()
        return f"{_sd.device_type}{_sd.device}:{self.stream}"

    @property
    def is_single_machine(self):
        """Always True: megxla's host store serves one machine."""
        self._ranks()
        return True

    def __repr__(self):
        return f"Group({self.proc_ranks or []})"


WORLD = Group([])


def _select_device(device_type, device):
    from .. import _device
    from ..core.dtypes import set_default_device
    kind = "cpu" if device_type == "cpu" else "gpu"
    count = _device.get_device_count(kind)
    if device < count:
        set_default_device(f"{kind}{device}")
    elif kind == "gpu" and count == 1:
        # The launcher makes only this worker's GPU visible, so device N is this process's gpu0.
        set_default_device("gpu0")


def init_process_group(master_ip: str, port: int, world_size: int, rank: int, device: int,
                       backend: Optional[str] = "auto", device_type: str = "xpu") -> None:
    r"""Join a distributed run: connect to the server, wait for all ``world_size`` ranks, set up ``WORLD``.

    Every rank calls it with the same ``master_ip``, ``port`` and ``world_size``. Rank 0 starts the
    :class:`Server` itself if none answers at ``port`` (the :class:`launcher` starts one beforehand). The
    call returns once every rank has joined, and fails with a ``ValueError`` if ranks disagree on
    ``world_size`` or a ``TimeoutError`` if some rank does not come (``MEGXLA_DIST_TIMEOUT`` seconds,
    default 600). As in MegEngine, the default device becomes ``device`` and the global random seed is
    reseeded per rank.

    All collectives run over megxla's host store whatever ``backend`` says (the name is recorded and
    returned by :func:`get_backend`).

    Args:
        master_ip: address of the server: ``"localhost"`` / ``"127.0.0.1"`` (single machine).
        port: the server's port.
        world_size: total number of processes.
        rank: this process's rank in ``[0, world_size)``.
        device: index of this process's device.
        backend: ``"auto"``, ``"nccl"``, ``"rccl"``, ``"shm"`` or ``"ucx"``.
        device_type: ``"xpu"`` (the default kind), ``"gpu"``/``"cuda"`` or ``"cpu"``.

    Example:
        >>> import megxla.distributed as dist
        >>> server = dist.Server(0)
        >>> dist.init_process_group("localhost", server.py_server_port, 1, 0, 0)
        >>> dist.get_world_size(), dist.get_rank(), dist.is_distributed()
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
    host = loopback_host(master_ip)
    timeout = default_timeout()
    server = None
    if rank == 0 and not _answers(host, port):
        server = Server(port)
    if _sd is not None:  # re-initialising: drop the previous connection
        _shutdown()
    client = Client(master_ip, port, timeout=timeout)
    try:
        client._register(rank, world_size)
    except BaseException:
        client.close()
        if server is not None:
            server.shutdown()
        raise
    _sd = StaticData(master_ip, port, world_size, rank, device, backend, device_type, client, server)
    WORLD.reset(list(range(world_size)))
    _select_device(device_type, device)
    from ..random import seed
    seed(int(time.time()) + rank)


def _answers(host, port):
    import socket
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _shutdown():
    """Leave the process group (used when re-initialising and by the launcher's workers)."""
    global _sd
    sd, _sd = _sd, None
    WORLD.proc_ranks = None
    WORLD.stream = None
    from . import _comm
    _comm.reset_counters()
    if sd is not None:
        sd.client.close()
        if sd.server is not None:
            sd.server.shutdown()


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

    megxla runs every collective over its host store, whatever the name.

    Example:
        >>> import megxla.distributed as dist
        >>> dist.get_backend() in (None, "auto", "nccl", "rccl", "shm", "ucx")
        True
    """
    return _sd.backend if _sd is not None else None


def _require():
    if _sd is None:
        raise RuntimeError("process group is not initialized: call init_process_group first")
    return _sd


def get_client() -> Client:
    r"""This process's :class:`Client` of the distributed server.

    Example:
        >>> dist.get_client().user_set("k", 1)   # after init_process_group
    """
    return _require().client


def get_mm_server_addr():
    r"""``(master_ip, port)`` of the collective-communication server (the one server in megxla).

    Example:
        >>> ip, port = dist.get_mm_server_addr()   # after init_process_group
    """
    sd = _require()
    return sd.master_ip, sd.mm_server_port


def get_py_server_addr():
    r"""``(master_ip, port)`` of the key-value server.

    Example:
        >>> ip, port = dist.get_py_server_addr()   # after init_process_group
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
        >>> g = dist.new_group([0, 1])   # on ranks 0 and 1
    """
    return Group(proc_ranks)


def group_barrier(group: Group = WORLD) -> None:
    r"""Block until every process of ``group`` reaches the barrier (no-op when not distributed).

    Args:
        group: the group, ``WORLD`` by default.

    Example:
        >>> dist.group_barrier()
    """
    if not isinstance(group, Group):
        raise TypeError(f"group_barrier: expected a Group, got {type(group).__name__}")
    if _sd is None:
        return
    _sd.client.group_barrier("barrier:" + group.key, group.size)


@contextlib.contextmanager
def override_backend(new_backend: str):
    r"""Temporarily change the recorded backend name (a context manager).

    Args:
        new_backend: one of ``"auto"``, ``"nccl"``, ``"rccl"``, ``"shm"``, ``"ucx"``.

    Example:
        >>> with dist.override_backend("shm"):
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

    With megxla's host store every send or receive completes on its own, so batching changes nothing:
    the call only checks that the process group exists.

    Example:
        >>> dist.group_start(); F.distributed.remote_send(x, 1); dist.group_end()
    """
    _require()


def group_end():
    r"""End a batch started by :func:`group_start` (nothing is pending with the host store).

    Example:
        >>> dist.group_start(); y = F.distributed.remote_recv(0); dist.group_end()
    """
    _require()
