"""Multi-process training (``megengine.distributed``): process groups, a key-value server, a launcher and
data-parallel helpers. The collectives themselves are in :mod:`megxla.functional.distributed`.

All communication goes through a key-value server on 127.0.0.1 (this machine only), with NumPy on the
host: a correctness backend that runs anywhere, CPU-only machines included. Blocking operations give up
after ``MEGXLA_DIST_TIMEOUT`` seconds (default 600) with a ``TimeoutError`` naming what was missing.

Example:
    >>> import megxla as mge
    >>> import megxla.distributed as dist
    >>> import megxla.functional as F
    >>> def worker():   # at module level, so that spawned processes can import it
    ...     x = mge.Tensor([1.0]) * (dist.get_rank() + 1)
    ...     return F.distributed.all_reduce_sum(x).numpy()
    >>> dist.launcher(worker, n_gpus=2)()
    [array([3.], dtype=float32), array([3.], dtype=float32)]
"""
import sys as _sys
import types as _types

from .group import (WORLD, Group, init_process_group, new_group, get_rank, get_world_size, is_distributed,
                    get_backend, get_client, get_mm_server_addr, get_py_server_addr, group_barrier,
                    override_backend, group_start, group_end)
from .server import Server, Client
from .helper import make_allreduce_cb, bcast_list_, synchronized
from .launcher import launcher
from . import group as _group

__all__ = ["Client", "Group", "Server", "WORLD", "bcast_list_", "get_backend", "get_client",
           "get_mm_server_addr", "get_py_server_addr", "get_rank", "get_world_size", "group_barrier",
           "group_end", "group_start", "init_process_group", "is_distributed", "launcher", "make_allreduce_cb",
           "mproperty", "new_group", "override_backend", "synchronized", "backend"]


class mproperty(property):
    r"""A property of a module (MegEngine uses the ``mprop`` package's): ``dist.backend`` reads and sets the
    backend name of the process group through one.

    Args:
        fget, fset, fdel, doc: as :class:`property`; the functions receive the module.

    Example:
        >>> import megxla.distributed as dist
        >>> dist.backend is None or isinstance(dist.backend, str)
        True
    """


def _get_backend(mod):
    return get_backend()


def _set_backend(mod, value):
    sd = _group._require()
    if value not in _group._BACKENDS:
        raise ValueError(f"backend must be one of {_group._BACKENDS}, got {value!r}")
    sd.backend = value


class _DistributedModule(_types.ModuleType):
    # A module-level property needs the module's class to carry it (what mprop.init() does in MegEngine).
    backend = mproperty(_get_backend, _set_backend, doc="The backend name of the process group (None before "
                                                        "init_process_group).")


_sys.modules[__name__].__class__ = _DistributedModule
