"""Collective communication as megxla primitives: a JAX ``io_callback`` to the host store, with the
mirrored collective as the gradient (``Primitive(grad=...)``).

Why ``io_callback(ordered=True)`` rather than ``pure_callback``: a collective must run exactly once per
call and in program order on every rank, or ranks pair up the wrong messages. ``pure_callback`` may be
dropped when its result is unused, duplicated or reordered by XLA; an ordered ``io_callback`` is executed
once, in the order the ops were issued (also inside one compiled trace), which is what makes the per-group
sequence numbers below agree across ranks.

Each collective is one *exchange* on the server: every rank deposits its array (or None where it has
nothing to send) and receives every rank's contribution, then computes its own result with NumPy. The
reductions add in rank order, so every rank gets bitwise the same result. This is a correctness backend
(CPU, host memory): simple and exact, not fast.
"""
from __future__ import annotations

import collections
import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from ..core._op import Primitive

__all__ = ["collective", "remote_send_op", "remote_recv_op", "out_shape", "reset_counters", "next_meta", "take_error",
           "run", "MODES"]

MODES = ("all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_reduce_prod", "all_gather", "broadcast",
         "reduce_sum", "gather", "scatter", "reduce_scatter_sum", "all_to_all")
# Gradient-only modes: they take (x, cotangent) and return the input gradient in one exchange.
_GRAD_MODES = ("all_reduce_max_grad", "all_reduce_min_grad", "all_reduce_prod_grad")

_lock = threading.Lock()
_seq = collections.Counter()  # collectives issued per group key, counted when they run (program order)
_p2p = collections.Counter()  # point-to-point messages per (direction, src, dst), counted the same way


_meta = collections.Counter()  # host-side metadata exchanges (shapes), counted when the front end runs


def reset_counters():
    with _lock:
        _seq.clear()
        _p2p.clear()
        _meta.clear()


def next_meta(key):
    """Sequence number of the next metadata exchange on ``key`` (front ends run in program order)."""
    with _lock:
        n = _meta[key]
        _meta[key] += 1
    return n


def _next(key):
    with _lock:
        n = _seq[key]
        _seq[key] += 1
    return n


def _client():
    from . import group
    if group._sd is None:
        raise RuntimeError("process group is not initialized: call init_process_group first")
    return group._sd.client


def out_shape(mode, shape, size, axis=0, split_axis=0, concat_axis=0):
    """The result shape of ``mode`` on this rank for an input of ``shape`` in a group of ``size``."""
    shape = list(shape)
    if mode in ("all_gather", "gather"):
        shape[axis] *= size
    elif mode in ("scatter", "reduce_scatter_sum"):
        shape[axis] //= size
    elif mode == "all_to_all":
        shape[split_axis] //= size
        shape[concat_axis] *= size
    return tuple(shape)


# The last failure of a host function (raised on XLA's callback thread, where JAX wraps it in a runtime
# error); the front ends re-raise it as itself: a TimeoutError stays a TimeoutError.
_errors = {}


def _record_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        try:
            return fn(*args)
        except Exception as exc:
            with _lock:
                _errors["last"] = exc
            raise
    return wrapper


def take_error():
    """The last exception raised by a host collective (cleared), or None."""
    with _lock:
        return _errors.pop("last", None)


@_record_errors
def _host(mode, key, rank, size, axis, split_axis, concat_axis, *arrays):
    """Runs on the host (XLA's callback thread): one exchange, then this rank's result in NumPy."""
    x = np.asarray(arrays[0])
    sends_nothing = mode in ("broadcast", "scatter") and rank != 0  # non-roots only receive
    data = None if sends_nothing else (x if len(arrays) == 1 else tuple(np.asarray(a) for a in arrays))
    # Every rank states what it is doing: if ranks issue different collectives (one skipped a forward or
    # backward collective), the pairing by sequence number is wrong -- say so instead of mixing data.
    sig = (mode, axis, split_axis, concat_axis, tuple(x.shape), x.dtype.name)
    seq = _next(key)
    got = _client()._exchange(f"coll/{key}/{seq}", rank, size, (sig, data))
    sigs = [g[0] for g in got]
    if any(sg != sig for sg in sigs):
        desc = "; ".join(f"group rank {r}: {sg[0]} of {sg[4]}:{sg[5]}" for r, sg in enumerate(sigs))
        raise ValueError(f"collective #{seq} of group {key}: ranks disagree ({desc}); every rank must issue "
                         f"the same collectives in the same order, forward and backward")
    vals = [g[1] for g in got]
    if mode in ("all_reduce_sum", "reduce_sum", "reduce_scatter_sum", "all_reduce_max", "all_reduce_min",
                "all_reduce_prod"):
        reduce = {"max": np.maximum, "min": np.minimum, "prod": np.multiply}.get(mode.rsplit("_", 1)[1], np.add)
        out = vals[0]
        for v in vals[1:]:  # rank order: bitwise identical on every rank
            out = reduce(out, v)
        if mode == "reduce_sum" and rank != 0:
            return np.zeros_like(x)  # only the root receives the sum
        if mode == "reduce_scatter_sum":
            out = np.split(out, size, axis=axis)[rank]
        return out.astype(x.dtype, copy=False)
    if mode in ("all_gather", "gather"):
        out = np.concatenate(vals, axis=axis)
        return out if mode == "all_gather" or rank == 0 else np.zeros_like(out)
    if mode == "broadcast":
        root = vals[0]
        if root.shape != x.shape or root.dtype != x.dtype:
            raise ValueError(f"broadcast (group {key}): root sent {root.shape}:{root.dtype}, rank {rank} expects "
                             f"{x.shape}:{x.dtype}")
        return root
    if mode == "scatter":
        return np.split(vals[0], size, axis=axis)[rank]
    if mode == "all_to_all":
        return np.concatenate([np.split(v, size, axis=split_axis)[rank] for v in vals], axis=concat_axis)
    if mode in _GRAD_MODES:
        xs = [v[0] for v in vals]
        cts = [v[1] for v in vals]
        ct_sum = functools.reduce(np.add, cts)
        if mode == "all_reduce_prod_grad":  # d(prod_j x_j)/dx_rank = prod of the other ranks' inputs
            others = [xs[j] for j in range(size) if j != rank]
            return (ct_sum * functools.reduce(np.multiply, others, np.ones_like(x))).astype(x.dtype)
        extreme = functools.reduce(np.maximum if mode == "all_reduce_max_grad" else np.minimum, xs)
        # Every rank holding the extreme value receives the summed output gradient (ties all receive it).
        return np.where(x == extreme, ct_sum, 0).astype(x.dtype)
    raise ValueError(f"unknown collective mode {mode!r}")


def _impl(*arrays, mode, key, rank, size, axis=0, split_axis=0, concat_axis=0):
    x = arrays[0]
    shape = x.shape if mode in _GRAD_MODES else out_shape(mode, x.shape, size, axis, split_axis, concat_axis)
    cb = functools.partial(_host, mode, key, rank, size, axis, split_axis, concat_axis)
    return io_callback(cb, jax.ShapeDtypeStruct(shape, x.dtype), *arrays, ordered=True)


def _grad(params, primals, ct):
    """The mirrored collective (MegEngine's backward of each collective)."""
    p = dict(params)
    mode, rank = p["mode"], p["rank"]
    x = primals[0]

    def run(m, *arrays, **kw):
        return _impl(*arrays, **{**p, "mode": m, **kw})

    if mode == "all_reduce_sum":
        g = run("all_reduce_sum", ct)
    elif mode in ("all_reduce_max", "all_reduce_min", "all_reduce_prod"):
        g = run(mode + "_grad", x, ct)
    elif mode == "all_gather":
        g = run("reduce_scatter_sum", ct)
    elif mode == "reduce_scatter_sum":
        g = run("all_gather", ct)
    elif mode == "broadcast":
        g = run("reduce_sum", ct)  # the root gets the sum of every rank's gradient, the others zeros
    elif mode == "scatter":
        g = run("gather", ct)  # the root gets every rank's slice gradient back in place
    elif mode == "all_to_all":
        g = run("all_to_all", ct, split_axis=p["concat_axis"], concat_axis=p["split_axis"])
    elif mode == "reduce_sum":
        # Only the root holds the result (the other ranks get None and drop out of autodiff), so the root's
        # own input receives the output gradient; see functional.distributed.reduce_sum.
        g = ct if rank == 0 else jnp.zeros_like(x)
    elif mode == "gather":
        n = x.shape[p["axis"]]
        g = jax.lax.slice_in_dim(ct, 0, n, axis=p["axis"]) if rank == 0 else jnp.zeros_like(x)
    else:
        raise ValueError(f"collective mode {mode!r} has no gradient")
    return (g.astype(x.dtype),) + tuple(jnp.zeros_like(a) for a in primals[1:])


collective = Primitive("dist_collective", _impl, grad=_grad)


# ---- point to point ----------------------------------------------------------------------------------------------


@_record_errors
def _send_host(src, dst, x):
    with _lock:
        n = _p2p[("send", src, dst)]
        _p2p[("send", src, dst)] += 1
    _client().user_set(f"p2p/{src}->{dst}/{n}", np.asarray(x))
    return np.zeros((), np.int32)


@_record_errors
def _recv_host(src, dst, shape, dtype, _dummy):
    with _lock:
        n = _p2p[("recv", src, dst)]
        _p2p[("recv", src, dst)] += 1
    val = _client()._wait_pop(f"p2p/{src}->{dst}/{n}")
    if tuple(val.shape) != tuple(shape) or val.dtype != np.dtype(dtype):
        raise ValueError(f"remote_recv: rank {src} sent {val.shape}:{val.dtype}, expected {shape}:{dtype}")
    return val


def _send_impl(x, *, src, dst):
    return io_callback(functools.partial(_send_host, src, dst), jax.ShapeDtypeStruct((), jnp.int32), x,
                       ordered=True)


def _recv_impl(dummy, *, src, dst, shape, dtype):
    return io_callback(functools.partial(_recv_host, src, dst, shape, dtype),
                       jax.ShapeDtypeStruct(shape, np.dtype(dtype)), dummy, ordered=True)


def _no_grad(params, primals, ct):
    # The sender's remote_send returns None (MegEngine), so no gradient can travel back to it through
    # megxla's tape; the receiver's dummy input gets zeros.
    return tuple(jnp.zeros_like(a) for a in primals)


remote_send_op = Primitive("dist_remote_send", _send_impl, grad=_no_grad)
remote_recv_op = Primitive("dist_remote_recv", _recv_impl, grad=_no_grad)


def run(op, *inputs):
    """``apply(op, *inputs)``, re-raising a host failure (timeout, disagreeing ranks) as its own exception."""
    from ..core._dispatch import apply
    take_error()
    try:
        return apply(op, *inputs)
    except Exception as exc:
        err = take_error()
        if err is None:
            raise
        raise type(err)(*err.args) from exc
