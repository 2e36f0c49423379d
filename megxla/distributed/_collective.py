"""Collective communication as megxla primitives: XLA collectives over the devices of a process group.

Each collective is the op ``dist_collective[mode, ranks, ...]``. Its implementation is the per-process body of
an SPMD program (``lax.psum``, ``all_gather``, ``psum_scatter``, ``all_to_all``, ``ppermute`` over the mesh axis
of the group's devices, see :mod:`megxla.core._spmd`): eagerly the op's kernel is one small SPMD executable per
collective (cached like any op's kernel), and inside ``xla_trace`` / ``trace`` / ``partial_trace`` the whole
compiled step becomes one SPMD program holding the collectives. Between CPU processes XLA runs them over gloo,
between GPUs over NCCL.

The gradient of each collective is its mirror, as in MegEngine (``Primitive(grad=...)``): ``all_reduce_sum``
<-> ``all_reduce_sum``, ``all_gather`` <-> ``reduce_scatter_sum``, ``broadcast`` -> ``reduce_sum`` to the root,
``scatter`` -> ``gather`` to the root, ``all_to_all`` with the axes swapped, ``all_reduce_max/min`` -> the summed
output gradient to the ranks holding the extreme value.
"""
from __future__ import annotations

import collections
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core._op import Primitive
from ..core._spmd import AXIS, DeviceGrid, MeshRequired, current_devices, grid_layout, issued, ordered
from . import _runtime

__all__ = ["collective", "shard_gather_packed", "p2p", "root_link", "MODES", "out_shape", "reset_counters",
           "next_meta"]

MODES = ("all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_reduce_prod", "all_gather", "broadcast",
         "reduce_sum", "gather", "scatter", "reduce_scatter_sum", "all_to_all",
         # sharded training (megxla.distributed.fsdp / tensor_parallel): differ from the above in their gradient
         "shard_gather",  # all_gather whose gradient is the MEAN reduce-scatter (data-parallel averaging)
         "copy_to",       # identity whose gradient is all_reduce_sum (Megatron's f: enters a tensor-parallel region)
         "reduce_from")   # all_reduce_sum whose gradient is the identity (Megatron's g: leaves it)

_lock = threading.Lock()
_meta = collections.Counter()  # host-side metadata exchanges per key, counted when the front end runs


def reset_counters():
    with _lock:
        _meta.clear()


def next_meta(key):
    """Sequence number of the next metadata exchange on ``key`` (front ends run in program order)."""
    with _lock:
        n = _meta[key]
        _meta[key] += 1
    return n


def out_shape(mode, shape, size, axis=0, split_axis=0, concat_axis=0):
    """The result shape of ``mode`` on this rank for an input of ``shape`` in a group of ``size``."""
    shape = list(shape)
    if mode in ("all_gather", "gather", "shard_gather"):
        shape[axis] *= size
    elif mode in ("scatter", "reduce_scatter_sum"):
        shape[axis] //= size
    elif mode == "all_to_all":
        shape[split_axis] //= size
        shape[concat_axis] *= size
    return tuple(shape)


def _enter(what, ranks, platform, mesh=None, axes=None):
    """Check that we are tracing the body of an SPMD program over the group's devices (else ask for one);
    returns the mesh axis name(s) the collective runs over.

    A plain group's program is the 1-D grid of its devices. A group that is an axis of a ``DeviceMesh``
    (``mesh=(shape, names)``, ``axes``: the names it spans, ``ranks``: the whole mesh's) runs in a program over
    the whole grid, so that the collectives of its rows and of its columns can share one compiled step."""
    devices = _runtime.group_devices(ranks, platform)
    if mesh is not None:
        devices = DeviceGrid(devices, *mesh)
    cur = current_devices()
    if cur is None:
        raise MeshRequired(devices, what)
    if cur == devices:
        return tuple(axes) if mesh is not None else AXIS
    if tuple(cur) == tuple(devices):
        cur_shape, cur_names = grid_layout(cur)
        if mesh is None:  # the whole group inside a program over a grid of the same devices: all of its axes
            return cur_names
        if cur_names == (AXIS,):  # a grid axis inside a program over the whole group: compile for the grid
            raise MeshRequired(devices, what)
    raise RuntimeError(f"{what} over ranks {list(ranks)} inside a compiled program whose collectives run over "
                       f"devices {list(cur)}: one compiled step may hold the collectives of one group (or of the "
                       f"axes of one DeviceMesh) only (split the step, or run this collective eagerly)")


def _size(ranks, mesh, axes):
    """Number of processes a collective runs over (the group's size)."""
    if mesh is None:
        return len(ranks)
    shape, names = mesh
    return int(np.prod([shape[names.index(a)] for a in axes]))


def _first(ax):
    return lax.axis_index(ax) == 0


def _body(mode, x, n, axis, split_axis, concat_axis, names=AXIS):
    if mode == "all_reduce_sum":
        return lax.psum(x, names)
    if mode == "all_reduce_max":
        return lax.pmax(x, names)
    if mode == "all_reduce_min":
        return lax.pmin(x, names)
    if mode == "all_reduce_prod":
        return jnp.prod(lax.all_gather(x, names), axis=0).astype(x.dtype)
    if mode in ("all_gather", "gather", "shard_gather"):
        return lax.all_gather(x, names, axis=axis, tiled=True)
    if mode == "reduce_from":
        return lax.psum(x, names)
    if mode == "reduce_scatter_sum":
        return lax.psum_scatter(x, names, scatter_dimension=axis, tiled=True)
    if mode == "broadcast":  # only the root's value survives the masked sum (XLA has no one-to-all primitive)
        return lax.psum(jnp.where(_first(names), x, jnp.zeros_like(x)), names)
    if mode == "reduce_sum":
        return lax.psum(x, names)
    if mode == "scatter":
        # all_to_all gives rank i the i-th part of every rank's tensor; keep the one that came from the root.
        parts = lax.all_to_all(x, names, axis, axis, tiled=True)
        return lax.slice_in_dim(parts, 0, x.shape[axis] // n, axis=axis)
    if mode == "all_to_all":
        return lax.all_to_all(x, names, split_axis, concat_axis, tiled=True)
    raise ValueError(f"unknown collective mode {mode!r}")


def _impl(x, *, mode, ranks, platform, axis=0, split_axis=0, concat_axis=0, mesh=None, axes=None, length=None):
    if mode == "copy_to":  # no communication forward (its gradient is the collective)
        return x
    ax = _enter(f"collective {mode}", ranks, platform, mesh, axes)
    y = issued(_body(mode, ordered(x), _size(ranks, mesh, axes), axis, split_axis, concat_axis, ax))
    if length is not None and length != y.shape[axis]:  # shard_gather: the padding of the last block dropped
        y = lax.slice_in_dim(y, 0, length, axis=axis)
    return y


def _grad(params, primals, ct):
    """The mirrored collective (MegEngine's backward of each collective), run in the same SPMD program."""
    p = dict(params)
    mode, ranks, platform = p["mode"], p["ranks"], p["platform"]
    mesh, axes = p.get("mesh"), p.get("axes")
    n = _size(ranks, mesh, axes)
    if mode == "reduce_from":  # Megatron's g: the output gradient, unchanged (it is the same on every rank)
        return (ct,)
    names = _enter(f"gradient of collective {mode}", ranks, platform, mesh, axes)
    x = primals[0]
    ct = ordered(ct)
    ax, sa, ca = p.get("axis", 0), p.get("split_axis", 0), p.get("concat_axis", 0)
    if mode in ("all_reduce_sum", "copy_to"):
        g = lax.psum(ct, names)
    elif mode == "shard_gather":  # the mean over the ranks of the gradients of the gathered tensor
        pad = x.shape[ax] * n - ct.shape[ax]
        if pad:
            ct = lax.pad(ct, jnp.zeros((), ct.dtype), [(0, pad if i == ax else 0, 0) for i in range(ct.ndim)])
        g = lax.psum_scatter(ct, names, scatter_dimension=ax, tiled=True) / n
    elif mode in ("all_reduce_max", "all_reduce_min"):
        s = lax.psum(ct, names)
        ext = (lax.pmax if mode == "all_reduce_max" else lax.pmin)(x, names)
        g = jnp.where(x == ext, s, jnp.zeros_like(s))  # ties: every holder of the extreme receives it
    elif mode == "all_reduce_prod":
        s = lax.psum(ct, names)
        allx = lax.all_gather(x, names)
        me = lax.axis_index(names)  # (a grid's axes: the row-major index over them)
        mask = (jnp.arange(n) == me).reshape((n,) + (1,) * x.ndim)
        g = s * jnp.prod(jnp.where(mask, jnp.ones_like(allx), allx), axis=0)
    elif mode == "all_gather":
        g = lax.psum_scatter(ct, names, scatter_dimension=ax, tiled=True)
    elif mode == "reduce_scatter_sum":
        g = lax.all_gather(ct, names, axis=ax, tiled=True)
    elif mode == "broadcast":  # reduce_sum to the root; the other ranks' inputs were not read
        s = lax.psum(ct, names)
        g = jnp.where(_first(names), s, jnp.zeros_like(s))
    elif mode == "scatter":  # gather to the root: its input's gradient is every rank's part, in place
        full = lax.all_gather(ct, names, axis=ax, tiled=True)
        g = jnp.where(_first(names), full, jnp.zeros_like(full))
    elif mode == "all_to_all":
        g = lax.all_to_all(ct, names, ca, sa, tiled=True)
    else:  # reduce_sum, gather: differentiated through root_link (their front ends detach the collective)
        raise ValueError(f"collective mode {mode!r} has no gradient")
    return (issued(g.astype(x.dtype)),)


# A sharded parameter's gather is gathered again in the backward pass rather than kept from the forward one (ZeRO-3:
# only one unit's full parameters are alive at a time, forward or backward; fully_shard's units: shard_gather_packed)
collective = Primitive("dist_collective", _impl, grad=_grad, remat=lambda params: params["mode"] == "shard_gather")


# ---- a fully sharded unit's parameters: one all-gather of all of its blocks, one reduce-scatter of their gradients -----
def _packed(blocks):
    """The blocks flattened into one vector: one collective for all of them."""
    return jnp.concatenate([b.reshape(-1) for b in blocks]) if len(blocks) > 1 else blocks[0].reshape(-1)


def _packed_gather_impl(*blocks, ranks, platform, lengths, mesh=None, axes=None, kept=False):
    ax = _enter("collective shard_gather_packed", ranks, platform, mesh, axes)
    n = _size(ranks, mesh, axes)
    rows = issued(lax.all_gather(ordered(_packed(blocks)), ax, axis=0, tiled=False))  # (n, the blocks' sizes)
    outs, at = [], 0
    for b, length in zip(blocks, lengths):
        full = rows[:, at:at + b.size].reshape((n * b.shape[0],) + b.shape[1:])  # rank-major: rank i's block i-th
        at += b.size
        outs.append(full if length == full.shape[0] else full[:length])  # (the last block's padding dropped)
    return outs


def _packed_gather_grad(params, primals, cts):
    """The mean over the ranks of each gathered tensor's gradient, reduce-scattered in one collective."""
    p = dict(params)
    names = _enter("gradient of collective shard_gather_packed", p["ranks"], p["platform"], p.get("mesh"),
                   p.get("axes"))
    n = _size(p["ranks"], p.get("mesh"), p.get("axes"))
    parts = []
    for x, ct in zip(primals, cts):
        ct = ct.astype(x.dtype)
        pad = x.shape[0] * n - ct.shape[0]
        if pad:
            ct = lax.pad(ct, jnp.zeros((), ct.dtype), [(0, pad if i == 0 else 0, 0) for i in range(ct.ndim)])
        parts.append(ct.reshape(n, -1))  # row i: what rank i's block receives
    rows = jnp.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    mine = issued(lax.psum_scatter(ordered(rows), names, scatter_dimension=0, tiled=True)).reshape(-1) / n
    grads, at = [], 0
    for x in primals:
        grads.append(mine[at:at + x.size].reshape(x.shape).astype(x.dtype))
        at += x.size
    return tuple(grads)


# ``fully_shard``'s gather of a unit's blocks (of one dtype), rematerialized as ``shard_gather``: its results are not
# kept by a GradManager's tape, the backward pass gathers the unit again -- unless ``kept``
shard_gather_packed = Primitive("dist_shard_gather_packed", _packed_gather_impl, multiple_results=True,
                                grad=_packed_gather_grad, remat=lambda params: not params.get("kept"))


def _link_grad(params, primals, ct):
    y, x = primals
    axis = dict(params)["axis"]
    g = ct if axis is None else lax.slice_in_dim(ct, 0, x.shape[axis], axis=axis)
    return jnp.zeros_like(y), g.astype(x.dtype)


# reduce_sum / gather: the result exists on the root only, so only the root could run their backward; as a
# backward collective that the other ranks never join would pair wrongly with their next collectives, the root's
# own input gets its gradient locally: ``root_link(result, input)`` is the result, with the output gradient
# (for gather: the root's own first part of it) passed to ``input``.
root_link = Primitive("dist_root_link", lambda y, x, *, axis: y, grad=_link_grad)


# ---- point to point: a two-process SPMD program with one ppermute ---------------------------------------------------
def _p2p_impl(x, *, src, dst, platform):
    lo, hi = sorted((src, dst))
    _enter(f"remote transfer {src}->{dst}", (lo, hi), platform)
    perm = [(0, 1)] if src == lo else [(1, 0)]
    return issued(lax.ppermute(ordered(x), AXIS, perm))


def _p2p_grad(params, primals, ct):
    # The sender's remote_send returns None (MegEngine), so no gradient can travel back to it through megxla's
    # tape; the receiver's placeholder input gets zeros.
    return (jnp.zeros_like(primals[0]),)


p2p = Primitive("dist_p2p", _p2p_impl, grad=_p2p_grad)
