"""Programs that talk across processes: one SPMD executable over the devices of several processes.

JAX's multi-process runtime runs a collective only inside an executable compiled for *all* the devices that
take part (XLA's ``all-reduce`` & co. over gloo between CPU processes, NCCL between GPUs). megxla's values are
process-local arrays, so a program containing a cross-process collective is compiled as a ``shard_map`` over a
mesh of the participating devices: each process's local array is its block of a global array (concatenated
along axis 0; a 0-d value becomes a block of shape ``(1,)``), the body is the ordinary program on blocks, and
each process reads back its own block of every output. Nothing else changes: the body is the same pure JAX
function that a single-process ``jax.jit`` would compile.

How a program learns that it needs this: a collective's implementation, traced outside such a body, raises
:class:`MeshRequired` naming its devices. :func:`jit` (used by ``jit`` tracing) and the eager dispatch catch it
and compile the SPMD form instead; programs without collectives never see any of this.
"""
from __future__ import annotations

import math
import threading
import weakref

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["AXIS", "DeviceGrid", "MeshRequired", "current_devices", "SpmdFunction", "jit", "ordered", "issued"]

AXIS = "procs"  # the mesh axis the collectives of a group run over
_tls = threading.local()
# Set by megxla.distributed: turns the failure of an SPMD executable into an error naming the rank that failed.
failure_hook = [None]
# Set by megxla.distributed: ``hook(ranks, key, digest)`` checks that the other processes compiled the same program.
agree_hook = [None]
_last = []  # weak references to the outputs of the last SPMD program this process launched


class DeviceGrid(tuple):
    """The devices of an SPMD program laid out as a named grid (``shape``, ``names``; row-major): a
    ``DeviceMesh`` of megxla.distributed. Collectives of the program may then run over some of its axes (the
    rows or columns of a 2-D grid: tensor-parallel and sharded-data-parallel groups in ONE compiled step).
    A plain tuple of devices is the 1-D grid ``(n,)`` named ``(AXIS,)``."""

    def __new__(cls, devices, shape, names):
        self = super().__new__(cls, devices)
        self.shape, self.names = tuple(shape), tuple(names)
        if int(np.prod(self.shape)) != len(self) or len(self.names) != len(self.shape):
            raise ValueError(f"DeviceGrid: {len(self)} devices do not fill a grid of shape {self.shape} named "
                             f"{self.names}")
        return self

    def __eq__(self, other):
        return tuple.__eq__(self, other) and grid_layout(self) == grid_layout(other)

    def __ne__(self, other):
        return not self == other

    __hash__ = tuple.__hash__

    def __reduce__(self):
        return DeviceGrid, (tuple(self), self.shape, self.names)


def grid_layout(devices):
    """``(shape, names)`` of a program's devices: a :class:`DeviceGrid`'s, else the 1-D ``((n,), (AXIS,))``."""
    if isinstance(devices, DeviceGrid):
        return devices.shape, devices.names
    return (len(devices),), (AXIS,)


class MeshRequired(Exception):
    """Raised while tracing a cross-process collective outside an SPMD program; carries its devices."""

    def __init__(self, devices, what):
        super().__init__(f"{what} needs an SPMD program over devices {list(devices)}")
        self.devices = devices if isinstance(devices, DeviceGrid) else tuple(devices)


def current_devices():
    """The devices of the SPMD program being traced on this thread (None outside one)."""
    return getattr(_tls, "devices", None)


def ordered(x):
    """``x`` made to depend on the previous collective of the SPMD body being traced (call :func:`issued` with
    each collective's result). XLA may run independent collectives of one program in any order (a collective and
    the gradient collective that does not read its result), and every process must issue them in the same order."""
    from jax._src import core
    from jax import lax
    chain = getattr(_tls, "chain", None)
    if chain is None:
        return x
    prev = chain.get(id(core.trace_ctx.trace))
    if prev is None:
        return x
    x, _ = lax.optimization_barrier((x, prev))
    return x


def issued(y):
    """Record ``y`` as the last collective result of the body being traced (see :func:`ordered`)."""
    from jax._src import core
    chain = getattr(_tls, "chain", None)
    if chain is not None:
        chain[id(core.trace_ctx.trace)] = y
    return y


def _global_shape(shape, n):
    return (n * shape[0],) + tuple(shape[1:]) if shape else (n,)


class SpmdFunction:
    """``fn`` (process-local arrays -> tuple of local arrays, or one array) compiled as one SPMD program over
    ``devices`` (one per process, in group order); called with and returning process-local arrays.

    Args:
        fn: the pure JAX function of one process's values.
        devices: the participating devices; this process's device must be among them.
        donate_argnums: inputs whose buffers the executable may reuse.
        name: the executable's name (``jit_<name>`` in XLA dumps and profiles).
    """

    def __init__(self, fn, devices, donate_argnums=(), name=None):
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        self.fn = fn
        self.devices = devices if isinstance(devices, DeviceGrid) else tuple(devices)
        self.n = len(self.devices)
        shape, names = grid_layout(self.devices)
        self.mesh = Mesh(np.array(self.devices, dtype=object).reshape(shape), names)
        # a local array is the block of a global one along axis 0, in the grid's row-major order
        self.spec = P(AXIS) if names == (AXIS,) else P(names)
        self.sharding = NamedSharding(self.mesh, self.spec)
        mine = [d for d in self.devices if d.process_index == jax.process_index()]
        if len(mine) != 1:
            raise RuntimeError(f"SPMD program over {list(self.devices)}: this process (index "
                               f"{jax.process_index()}) must own exactly one of the devices")
        self.local_device = mine[0]
        self.donate = tuple(donate_argnums)
        self.name = name or getattr(fn, "__name__", "spmd")
        self._cache = {}

    def _wrapped(self, scalars_in, info):
        fn, devices = self.fn, self.devices

        def body(*blocks):
            args = [b.reshape(()) if s else b for b, s in zip(blocks, scalars_in)]
            prev, prev_chain = getattr(_tls, "devices", None), getattr(_tls, "chain", None)
            _tls.devices, _tls.chain = devices, {}
            try:
                out = fn(*args)
            finally:
                _tls.devices, _tls.chain = prev, prev_chain
            info["multi"] = isinstance(out, (tuple, list))
            outs = tuple(out) if info["multi"] else (out,)
            info["scalars"] = tuple(o.ndim == 0 for o in outs)
            return tuple(o.reshape((1,)) if o.ndim == 0 else o for o in outs)

        body.__name__ = body.__qualname__ = self.name
        return body

    def _program(self, avals):
        """``(the shard_map of the body, its inputs' global types, its info, which inputs are 0-d)``."""
        scalars = tuple(len(a.shape) == 0 for a in avals)
        info = {}
        body = self._wrapped(scalars, info)
        smap = jax.shard_map(body, mesh=self.mesh, in_specs=self.spec, out_specs=self.spec, check_vma=False)
        smap.__name__ = smap.__qualname__ = self.name
        gavals = [jax.ShapeDtypeStruct(_global_shape(a.shape, self.n), a.dtype, sharding=self.sharding)
                  for a in avals]
        return smap, gavals, info, scalars

    def lower(self, *avals):
        """Lower for inputs of these (process-local) shapes/dtypes; returns a :class:`SpmdLowered`."""
        smap, gavals, info, scalars = self._program(avals)
        lowered = jax.jit(smap, donate_argnums=self.donate).lower(*gavals)
        return SpmdLowered(self, lowered, scalars, info["scalars"], info["multi"])

    def _empty(self, avals):
        """Where every result is empty (an input of no elements: nothing to communicate), a function of the inputs
        giving this process's empty blocks; else None. XLA refuses to lower a gather of empty blocks, and the blocks
        of an empty global array are not its shards (an all-reduce of a ``(2, 0)`` block gave ``(4, 0)``); every
        process takes the same path."""
        smap, gavals, info, _ = self._program(avals)
        outs = jax.eval_shape(smap, *gavals)
        if not all(math.prod(o.shape) == 0 for o in outs):
            return None
        blocks = [((o.shape[0] // self.n,) + tuple(o.shape[1:]), o.dtype) for o in outs]

        def empty(*arrays):
            local = [jnp.zeros(shape, dtype, device=self.local_device) for shape, dtype in blocks]
            return tuple(local) if info["multi"] else local[0]
        return empty

    def abstract(self, *arrays):
        """Stand-ins for the results on ``arrays`` inside an enclosing JAX trace (an abstract recording): tracers of
        the process-local results' shapes and dtypes, holding zeros. Nothing is compiled or communicated; the
        compiled step that runs the recording computes the real values."""
        avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
        smap, gavals, info, _ = self._program(avals)
        outs = jax.eval_shape(smap, *gavals)
        local = [jnp.zeros(() if s else (o.shape[0] // self.n,) + tuple(o.shape[1:]), o.dtype)
                 for o, s in zip(outs, info["scalars"])]
        return tuple(local) if info["multi"] else local[0]

    def __call__(self, *arrays):
        key = tuple((a.shape, a.dtype) for a in arrays)
        exe = self._cache.get(key)
        if exe is None:
            avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
            exe = self._empty(avals) if any(math.prod(a.shape) == 0 for a in avals) else None
            if exe is None:
                exe = self.lower(*avals).compile()
            self._cache[key] = exe
        return exe(*arrays)


class SpmdLowered:
    """The lowered SPMD program (``as_text()`` is its StableHLO); ``compile()`` gives the executable."""

    def __init__(self, fn, lowered, scalars, out_scalars, multi):
        self.fn, self.lowered, self.scalars = fn, lowered, scalars
        self.out_scalars, self.multi = out_scalars, multi

    def as_text(self, *args, **kwargs):
        return self.lowered.as_text(*args, **kwargs)

    def compiler_ir(self, *args, **kwargs):
        return self.lowered.compiler_ir(*args, **kwargs)

    def compile(self):
        hook = agree_hook[0]
        if hook is not None:
            # Every process must compile the same program: one that differs (e.g. in the order of its outputs)
            # may pair its collectives crosswise and give silently wrong values. Constants may differ (a rank's
            # own number baked in), so they are left out of the comparison.
            import hashlib
            import re
            text = re.sub(r"dense<[^>]*>", "dense<>", self.lowered.as_text())
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            ins = ",".join(f"{a.dtype}{list(a.shape)}" for a in self.lowered.in_avals[0]) \
                if hasattr(self.lowered, "in_avals") else ""
            key = f"{self.fn.name}({ins})"
            hook(tuple(d.process_index for d in self.fn.devices), key, digest)
        return SpmdExecutable(self.fn, self.lowered.compile(), self.scalars, self.out_scalars, self.multi)


# What a computation's error says when one of its inputs is the result of a cross-process collective that failed
# (the runtime's text, gloo's on CPUs, NCCL's on GPUs): every computation reading that result fails with it
_COLLECTIVE_FAILED = ("Gloo", "gloo", "NCCL", "nccl", "collective", "Connection closed by peer")


def peer_failure(exc):
    """The error ``exc`` stands for: where it is a collective's failure reaching a later computation or a host read
    (a peer process died during an all-reduce whose result the step went on with, asynchronously: auto-jit's next
    cluster, then ``loss.item()``, met it as "Error dispatching computation: Gloo all-reduce failed"), the error
    naming the rank that failed -- what the collective itself raises when its failure is seen at its own call
    (``failure_hook``); else ``exc`` itself."""
    hook = failure_hook[0]
    if hook is None or not isinstance(exc, RuntimeError) or type(exc).__module__.startswith("megxla"):
        return exc
    text = str(exc)
    if not any(marker in text for marker in _COLLECTIVE_FAILED):
        return exc
    return hook(exc, "a computation reading the result of a collective")


def settle(what, arrays=()):
    """Wait for the last SPMD program this process launched (its collectives) and for ``arrays`` (values that may
    be computed from an earlier one's results: the gradients an all-reduce's bucket was unpacked into, the bucket
    itself long gone), and raise the error naming the rank that failed if one failed. ``Optimizer.step`` calls it
    before it updates anything: a step's last collective -- the gradient all-reduce -- runs asynchronously, and a
    peer that left during it made the update compute from its failed result, so every parameter and slot of the
    survivor became unreadable (the failure came at the next read, with nothing as before the failed step to
    save). Values that are ready cost one check each."""
    prev = [o for o in (r() for r in _last) if o is not None]
    prev += [a for a in arrays if isinstance(a, jax.Array)]  # (an auto-jit cluster's pending value: its own run)
    if not prev:
        return
    try:
        jax.block_until_ready(prev)
    except Exception as exc:
        hook = failure_hook[0]
        if hook is None or not isinstance(exc, RuntimeError):
            raise
        raise hook(exc, what) from exc


def raise_peer_failure(exc):
    """(In an ``except`` block) raise :func:`peer_failure`'s error where ``exc`` stands for one; else return."""
    named = peer_failure(exc)
    if named is not exc:
        raise named from exc


class SpmdExecutable:
    """A compiled SPMD program called with this process's local arrays; returns its local outputs."""

    def __init__(self, fn, compiled, scalars, out_scalars, multi):
        self.fn, self.compiled, self.scalars = fn, compiled, scalars
        self.out_scalars, self.multi = out_scalars, multi
        # a compiled training step that keeps its inputs (jit/tracing.py): a call returns once its collectives are
        # done, so a peer's failure is raised by the call, before the step's new state is written
        self.settle = False

    def as_text(self, *args, **kwargs):
        return self.compiled.as_text(*args, **kwargs)

    def cost_analysis(self):
        return self.compiled.cost_analysis()

    def __getattr__(self, name):  # memory_analysis, runtime_executable, ...
        return getattr(self.compiled, name)

    def __call__(self, *arrays):
        fn = self.fn
        dev, sharding, n = fn.local_device, fn.sharding, fn.n
        if fn.donate and len({id(a) for a in arrays}) != len(arrays):
            arrays = [a.copy() if i in fn.donate else a for i, a in enumerate(arrays)]  # one buffer, donated once
        glob = []
        for a, s in zip(arrays, self.scalars):
            if s:
                a = np.reshape(a, (1,)) if isinstance(a, (np.ndarray, np.generic, int, float)) else a.reshape((1,))
            if not isinstance(a, jax.Array) or a.devices() != {dev}:  # host values (hyper-parameters), other devices
                a = jax.device_put(a, dev)
            glob.append(jax.make_array_from_single_device_arrays((n,) if s else _global_shape(a.shape, n),
                                                                 sharding, [a]))
        try:
            # Collectives pair up in the order each process issues them, but the runtime may run independent
            # executables concurrently (a collective and the gradient collective that does not read its result):
            # each SPMD program starts after the previous one of this process has finished.
            prev = [o for o in (r() for r in _last) if o is not None]
            if prev:
                jax.block_until_ready(prev)
            outs = self.compiled(*glob)
            if self.settle:
                jax.block_until_ready(outs)
            local = [o.addressable_data(0) for o in outs]
            # Weak references: holding the outputs would make a traced step see its state buffers as shared and
            # stop donating them.
            _last[:] = [weakref.ref(o) for o in local]
        except Exception as exc:  # a peer process failed mid-collective: say which (megxla.distributed knows)
            hook = failure_hook[0]
            if hook is None:
                raise
            raise hook(exc, f"executable jit_{fn.name}") from exc
        local = [o.reshape(()) if s else o for o, s in zip(local, self.out_scalars)]
        return tuple(local) if self.multi else local[0]


class Jit:
    """``jax.jit(fn)`` that turns into :class:`SpmdFunction` when tracing meets a cross-process collective."""

    def __init__(self, fn, donate_argnums=(), name=None):
        self.fn, self.donate, self.name = fn, tuple(donate_argnums), name
        self._impl = jax.jit(fn, donate_argnums=self.donate)
        self.spmd = None

    def _switch(self, exc):
        self.spmd = SpmdFunction(self.fn, exc.devices, self.donate, self.name)
        self._impl = self.spmd

    def lower(self, *avals):
        return self._retry(lambda: self._impl.lower(*avals))

    def __call__(self, *arrays):
        return self._retry(lambda: self._impl(*arrays))

    def _retry(self, call):
        # A step whose first collective runs over a whole 1-D group and a later one over an axis of a grid of
        # the same devices asks again, for the grid (collectives over the whole group then span all its axes).
        for _ in range(3):
            try:
                return call()
            except MeshRequired as exc:
                self._switch(exc)
        return call()


def jit(fn, donate_argnums=(), name=None):
    """``jax.jit``, or its SPMD form for a program with cross-process collectives (see the module doc). One
    :class:`Jit` per function and donation (kept on the function), so its SPMD executables are compiled once."""
    key = (tuple(donate_argnums), name)
    cache = getattr(fn, "_megxla_spmd_jit", None)
    if cache is None:
        cache = {}
        try:
            fn._megxla_spmd_jit = cache
        except AttributeError:  # not a plain function: no cache
            return Jit(fn, donate_argnums, name)
    j = cache.get(key)
    if j is None:
        j = cache[key] = Jit(fn, donate_argnums, name)
    return j
