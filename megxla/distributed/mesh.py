"""``DeviceMesh``: the ranks of a run laid out as a named grid, whose rows and columns are process groups.

Sharded training composes parallelisms on the axes of such a grid: with ``DeviceMesh((2, 2), ("dp", "tp"))``
the ranks ``[[0, 1], [2, 3]]`` form tensor-parallel groups along ``"tp"`` (``{0, 1}``, ``{2, 3}``) and sharded
data-parallel groups along ``"dp"`` (``{0, 2}``, ``{1, 3}``). A group taken from a mesh is an ordinary
:class:`~megxla.distributed.Group` (``rank``, ``size``, every collective) whose collectives run in an SPMD
program over the WHOLE grid, on the mesh axis it names (``jax.shard_map`` over a 2-D ``jax.sharding.Mesh``:
``lax.psum(x, "tp")``). Every rank of the mesh therefore runs the same program: the collectives of the rows and
of the columns can share one compiled step, which plain groups of different ranks cannot (each rank would compile
a different program). The price: every rank of the mesh must issue the same collectives in the same order.
"""
from __future__ import annotations

from typing import Sequence, Tuple, Union

import numpy as np

from .group import Group, _require, get_rank

__all__ = ["DeviceMesh", "MeshGroup"]


class MeshGroup(Group):
    r"""The process group along one or more axes of a :class:`DeviceMesh` that holds this process.

    ``proc_ranks`` are the ranks that share this process's coordinates on the other axes, in mesh order.
    Make one with :meth:`DeviceMesh.get_group`.

    Example:
        >>> mesh = DeviceMesh((2, 2), ("dp", "tp"))   # on 4 ranks  # doctest: +SKIP
        >>> mesh.get_group("tp").proc_ranks   # on rank 2  # doctest: +SKIP
        [2, 3]
    """

    def __init__(self, mesh: "DeviceMesh", axes: Tuple[str, ...]):
        self.mesh = mesh
        self.axes = tuple(axes)
        grid = mesh.ranks
        coord = mesh.coordinate()
        index = tuple(slice(None) if name in self.axes else coord[i] for i, name in enumerate(mesh.names))
        # keep the mesh's axis order: ranks along the named axes, row-major
        super().__init__([int(r) for r in np.asarray(grid[index]).reshape(-1)])

    def _op_params(self):
        """The collective op's parameters: the whole mesh and the axes this group spans (same on every rank)."""
        return {"ranks": tuple(int(r) for r in self.mesh.ranks.reshape(-1)),
                "mesh": (tuple(self.mesh.shape), tuple(self.mesh.names)), "axes": self.axes}

    def __repr__(self):
        return f"MeshGroup({self.proc_ranks}, axes={self.axes})"


class DeviceMesh:
    r"""The ranks of the run (or ``ranks``) arranged as a grid of ``shape`` with named axes.

    Args:
        shape: the grid's shape, e.g. ``(2, 2)``; its product is the number of ranks.
        names: one name per axis, e.g. ``("dp", "tp")``.
        ranks: the global ranks in row-major order; default ``range(world_size)``.

    Returns:
        the mesh; :meth:`get_group` gives the process group along an axis.

    Example:
        >>> import megxla.distributed as dist
        >>> @dist.launcher(n_gpus=4, device_type="cpu")   # doctest: +SKIP
        ... def worker():
        ...     mesh = dist.DeviceMesh((2, 2), ("dp", "tp"))
        ...     return mesh.get_group("dp").proc_ranks, mesh.get_group("tp").proc_ranks
        >>> worker()   # doctest: +SKIP
        [([0, 2], [0, 1]), ([1, 3], [0, 1]), ([0, 2], [2, 3]), ([1, 3], [2, 3])]
    """

    def __init__(self, shape: Sequence[int], names: Sequence[str], ranks: Sequence[int] = None):
        sd = _require()
        shape = tuple(int(s) for s in shape)
        names = tuple(str(n) for n in names)
        if len(shape) != len(names) or len(set(names)) != len(names) or not shape or min(shape) < 1:
            raise ValueError(f"DeviceMesh: shape {shape} and names {names} must have the same length, positive "
                             f"sizes and distinct names")
        ranks = list(range(sd.world_size)) if ranks is None else [int(r) for r in ranks]
        if len(ranks) != int(np.prod(shape)):
            raise ValueError(f"DeviceMesh: {len(ranks)} ranks do not fill a grid of shape {shape}")
        Group([]).check(ranks)  # distinct ranks of the run, this process among them
        self.shape, self.names = shape, names
        self.ranks = np.array(ranks, dtype=np.int64).reshape(shape)
        self._groups = {}

    def coordinate(self) -> Tuple[int, ...]:
        r"""This process's coordinates in the grid.

        Example:
            >>> DeviceMesh((2, 2), ("dp", "tp")).coordinate()   # on rank 1  # doctest: +SKIP
            (0, 1)
        """
        where = np.argwhere(self.ranks == get_rank())
        return tuple(int(i) for i in where[0])

    def get_group(self, axes: Union[str, Sequence[str]]) -> MeshGroup:
        r"""The process group along ``axes`` (a name or several) through this process.

        Args:
            axes: axis name(s) of the mesh.

        Returns:
            a :class:`MeshGroup`; the same object for the same axes.

        Example:
            >>> mesh.get_group("tp").size   # doctest: +SKIP
            2
        """
        axes = (axes,) if isinstance(axes, str) else tuple(axes)
        unknown = [a for a in axes if a not in self.names]
        if unknown or not axes or len(set(axes)) != len(axes):
            raise ValueError(f"DeviceMesh.get_group: axes {axes} must be distinct names among {self.names}")
        axes = tuple(n for n in self.names if n in axes)  # the mesh's order
        if axes not in self._groups:
            self._groups[axes] = MeshGroup(self, axes)
        return self._groups[axes]

    def size(self, axis: str = None) -> int:
        r"""Number of ranks along ``axis`` (all ranks when None).

        Example:
            >>> mesh.size("dp"), mesh.size()   # doctest: +SKIP
            (2, 4)
        """
        if axis is None:
            return int(self.ranks.size)
        return self.shape[self.names.index(axis)]

    def __repr__(self):
        return f"DeviceMesh({self.ranks.tolist()}, names={self.names})"
