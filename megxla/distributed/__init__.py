"""Multi-process training (``megengine.distributed``) on JAX's multi-process runtime: process groups, the
run's key-value store, a launcher and data-parallel helpers. The collectives themselves are in
:mod:`megxla.functional.distributed`; they are XLA collectives (gloo between CPU processes, NCCL between GPUs).

One process drives one device. :func:`init_process_group` starts JAX's distributed runtime in the process
(coordination service on rank 0's machine, or in the :class:`launcher`'s process); the processes may span
several machines (``world_size`` with ``rank_start``). Settings: ``MEGXLA_DIST_TIMEOUT`` (seconds a join,
key-value wait or barrier waits, default 600) and ``MEGXLA_DIST_HEARTBEAT`` (seconds without heartbeat after
which a rank is dead and the others stop with an error naming it, default 30).

Not carried over from MegEngine, for want of a counterpart in JAX's runtime: a separate "mm server" (JAX's
runtime bootstraps gloo/NCCL itself: ``get_mm_server_addr`` is the coordination service's address), and the
choice of transport by ``backend`` (XLA chooses: gloo on CPU, NCCL on GPU).

Known limitations (XLA:CPU with gloo, jax 0.10.2; found by tests/test_distributed.py):
    * The processes of a group must issue the same collectives in the same order, forward and backward. So
      ``reduce_sum`` / ``gather`` (whose result exists on the root only) give the root's input its gradient
      through a local op, never a backward collective that the other ranks would not join; and they are
      refused inside traced steps, where a non-root's unused result would be dropped with its collective.
    * One compiled step holds the collectives of one group (the group's devices are the step's SPMD mesh).
    * Every process of a group must compile the same SPMD program: XLA combines a step's independent
      collectives (a forward all-reduce and the gradient all-reduce that does not read its result) into one,
      whose operands follow the program's output order, so programs that differ between ranks pair values
      crosswise. (This was a real bug: a step's outputs came in the order of a set of value ids, which differ
      between processes with different histories -- after a ``remote_send`` one rank did not take part in.)
      Each compiled SPMD program is therefore compared between the ranks through the key-value store (its
      StableHLO, constants aside) and a difference raises an error naming both ranks before anything runs.
      The optimization-barrier chain of ``core._spmd.ordered`` does not keep them apart on XLA:CPU (observed:
      the optimized HLO holds one all-reduce of both operands); identical programs are what keeps them paired.
    * Two disjoint groups running collectives at the same time were not tested beyond the above.
    * Under auto-jit in a group of several processes, no step is timed to choose between clusters and eager
      (``jit._mode_timer``): every rank runs its steps as clusters, as where one process finds eager faster for a
      step it would run it eagerly. Timed per process, two ranks chose differently (1 run in 3 of a ConvNet with
      ``clip_grad_norm``, no skew) and their updates rounded differently: the replicas drifted 3e-8 apart within
      10 steps. A step eager would run faster (a detector's, whose clusters keep changing) runs slower in a group.
    * Sharded training (``fully_shard``, ``shard_optimizer``, ``parallelize``): the backward pass gathers a
      unit's parameters again (eagerly one unit's full parameters are alive at a time; not with
      ``reshard_after_forward=False``), but inside a compiled
      step XLA may merge that gather with the forward one (XLA:CPU does), keeping the full parameters from the
      forward to the backward pass. The model is built whole on every rank before it is sharded
      (no meta-device construction). ``shard_optimizer`` reduce-scatters the gradients in ``step()`` (the
      local gradients are whole until then; ~10 MB of them a collective) and keeps its blocks as a second copy of
      1/N of the parameters. ``fully_shard``'s units are the modules holding parameters (a Linear's weight and
      bias are gathered by one collective): no coarser units, as FSDP2's nested ``fully_shard`` calls make (a
      second call on a sharded module raises).
      A parameter shared by two modules, or held in a list or dict of its module, cannot be sharded. A
      ``DeviceMesh`` group's collectives are programs over the WHOLE mesh: every rank of the mesh must issue
      them, in the same order. The full optimizer state is not gathered (``opt.state_dict()`` holds this rank's
      blocks: save it per rank). Tensor parallel splits ``Linear`` layers only (no vocabulary-parallel
      embedding, no sequence parallel); ``clip_grad_norm`` of ``megxla.distributed`` is the one that sees
      shards (``shard_optimizer``'s gradients are reduced inside ``step()`` and are not clipped by it).
      ``amp.GradScaler`` checks this rank's gradients for overflow: with sharded gradients the ranks may decide
      differently whether to skip a step (a non-finite value reaches only the rank holding its block).

Example:
    >>> import megxla as mge
    >>> import megxla.distributed as dist
    >>> import megxla.functional as F
    >>> @dist.launcher(n_gpus=2, device_type="cpu")
    ... def worker():
    ...     x = mge.Tensor([1.0]) * (dist.get_rank() + 1)
    ...     return F.distributed.all_reduce_sum(x).numpy()
    >>> worker()   # doctest: +SKIP
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
from .mesh import DeviceMesh, MeshGroup
from .fsdp import fully_shard, clip_grad_norm
from .zero import shard_optimizer
from .tensor_parallel import ColwiseParallel, RowwiseParallel, parallelize
from . import group as _group

__all__ = ["Client", "Group", "Server", "WORLD", "bcast_list_", "get_backend", "get_client",
           "get_mm_server_addr", "get_py_server_addr", "get_rank", "get_world_size", "group_barrier",
           "group_end", "group_start", "init_process_group", "is_distributed", "launcher", "make_allreduce_cb",
           "mproperty", "new_group", "override_backend", "synchronized", "backend",
           # sharded training (megxla's own: MegEngine has data parallel only)
           "ColwiseParallel", "DeviceMesh", "MeshGroup", "RowwiseParallel", "clip_grad_norm", "fully_shard",
           "parallelize", "shard_optimizer"]


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

    def __reduce__(self):  # pickled by name, as plain modules are (cloudpickle sends functions using dist by value)
        import importlib
        return importlib.import_module, (self.__name__,)


_sys.modules[__name__].__class__ = _DistributedModule

from . import functional  # noqa: E402  (MegEngine: dist.functional; last, it imports the collectives above)
