"""Random primitives: each takes a raw PRNG key (uint32[2]) as its first input, so random draws are ordinary
ops: recorded by traces, and their key is a graph input/output in compiled steps.

Draws are defined chunk by chunk: value ``i`` (row-major) of a draw comes from chunk ``i // CHUNK``, drawn
with the key itself for chunk 0 and with ``fold_in(key, chunk)`` for the others. JAX's counter-based PRNG
makes a draw of ``c <= CHUNK`` values the first ``c`` values of a draw of ``CHUNK`` (and a shaped draw its
flat draw, reshaped), so an eager draw of ANY shape is computed by one executable per distribution and dtype
(a whole chunk at a time, assembled on the host) while a compiled step computes exactly these values in
place. ``jax.jit`` of the implementation would compile a fresh executable per shape instead: 1 to 4 s each
for the normal distribution on a 2-core CPU, paid by every new parameter shape of a model (issue 18).
"""
from __future__ import annotations

import math

import numpy as np
import jax
import jax.numpy as jnp

from .._op import Primitive, check_output_size
from ..dtypes import host_put_like

CHUNK = 1 << 16
# On accelerators host assembly costs two transfers per call: after this many eager draws of one op (shape),
# compile its own kernel instead (same values). On the CPU the host view of a result is free, so never.
_EXACT_AFTER = 2


def _k(key):
    return jax.random.wrap_key_data(key)


# ---- the key: seeding and splitting, on the host (bit-identical to jax.random's threefry) ---------------------
_ROT = ((13, 15, 26, 6), (17, 29, 16, 24))


_M32 = 0xFFFFFFFF


def _threefry2x32(k0, k1, x0, x1):
    """Threefry-2x32 (20 rounds) of one counter pair ``(x0, x1)`` under key ``(k0, k1)``, as ``jax.random``'s
    default implementation computes it; Python ints (a split is two pairs: ~15 us, where NumPy's 2-lane arrays
    took ~150 -- each of its ~130 steps a NumPy call).

    Example:
        >>> _threefry2x32(0, 42, 0, 0) == tuple(int(v) for v in split_on_host(np.array([0, 42], np.uint32))[0])
        True
    """
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = (x0 + k0) & _M32, (x1 + k1) & _M32
    for i in range(5):
        for r in _ROT[i % 2]:
            x0 = (x0 + x1) & _M32
            x1 = ((x1 << r) | (x1 >> (32 - r))) & _M32
            x1 ^= x0
        x0 = (x0 + ks[(i + 1) % 3]) & _M32
        x1 = (x1 + ks[(i + 2) % 3] + i + 1) & _M32
    return x0, x1


def key_data_from_seed(seed: int) -> np.ndarray:
    """The raw key of ``jax.random.key(seed)`` for ``0 <= seed < 2**32``, computed without a kernel."""
    return np.array([0, int(seed) % (2 ** 32)], np.uint32)


def split_on_host(key: np.ndarray):
    """``jax.random.split(key)`` of a raw uint32[2] key, on the host: (new state, subkey)."""
    k0, k1 = int(key[0]), int(key[1])
    return (np.array(_threefry2x32(k0, k1, 0, 0), np.uint32),  # (counters 0 and 1: jax.random.split's two keys)
            np.array(_threefry2x32(k0, k1, 0, 1), np.uint32))


def _split(key):
    k = jax.random.wrap_key_data(key)
    a, b = jax.random.split(k)
    return jax.random.key_data(a), jax.random.key_data(b)


def to_device_like(values: np.ndarray, like):
    """``values`` (a fresh host array, adopted without a copy where the backend can) placed as ``like`` is.

    An uncommitted ``like`` (the default device) gives an uncommitted result: JAX compiles a kernel separately
    for committed and uncommitted arguments, so a committed parameter or key would recompile every kernel it
    meets once it is replaced by a kernel's (uncommitted) output.
    """
    return host_put_like(values, like)


def _host_array(a):
    """``a`` as NumPy if it is a single-device array this process holds (else None: use the jitted kernel)."""
    try:
        if len(a.devices()) == 1 and a.is_fully_addressable:
            return np.asarray(a)
    except (AttributeError, RuntimeError):
        pass
    return None


class _SplitKernel:
    """Eager ``rng_split`` on the CPU: threefry on the host (a compile-free split per draw; the key is 8 bytes).

    On accelerators the jitted split (one executable for every draw) keeps the key on the device: reading it
    back would make the host wait for whatever step produced it.
    """

    def __init__(self, op):
        self._jit = jax.jit(op.fn)

    def __call__(self, key):
        dev = next(iter(key.devices())) if len(key.devices()) == 1 else None
        host = _host_array(key) if dev is not None and dev.platform == "cpu" else None
        if host is None or host.shape != (2,) or host.dtype != np.uint32:
            return self._jit(key)
        a, b = split_on_host(host)
        return to_device_like(a, key), to_device_like(b, key)


# ---- chunked draws ---------------------------------------------------------------------------------------------
def _chunk_key(key, j):
    """The key of chunk ``j`` of a draw (``j`` may be traced): the key itself for chunk 0."""
    folded = jax.random.key_data(jax.random.fold_in(_k(key), j))
    return jnp.where(j == 0, key, folded)


def _flat_draw(draw, key, n, params=()):
    """``n`` values: chunk ``j`` is ``draw(key_j, count, *param_slices)`` (params: flat arrays of length n)."""
    if n <= CHUNK:
        return draw(key, n, *params)
    m, r = divmod(n, CHUNK)
    keys = jax.vmap(_chunk_key, (None, 0))(key, jnp.arange(m, dtype=jnp.uint32))
    full = [p[:m * CHUNK].reshape(m, CHUNK) for p in params]
    parts = [jax.vmap(lambda k, *ps: draw(k, CHUNK, *ps))(keys, *full).reshape(-1)]
    if r:
        parts.append(draw(_chunk_key(key, jnp.uint32(m)), r, *[p[m * CHUNK:] for p in params]))
    return jnp.concatenate(parts)


def _shaped(draw, key, shape, params=()):
    n = math.prod(shape)
    flat = [jnp.broadcast_to(p, shape).reshape(-1) for p in params]
    return _flat_draw(draw, key, n, flat).reshape(shape)


def _d_uniform(k, c, *, low, high, dtype):
    return jax.random.uniform(_k(k), (c,), dtype, low, high)


def _d_normal(k, c, *, mean, std, dtype):
    return mean + std * jax.random.normal(_k(k), (c,), dtype)


def _d_exponential(k, c, rate):
    return jax.random.exponential(_k(k), (c,), jnp.float32) / rate


def _d_gamma(k, c, a, theta):
    return jax.random.gamma(_k(k), a, (c,)) * theta


def _d_beta(k, c, a, b):
    return jax.random.beta(_k(k), a, b, (c,))


def _d_poisson(k, c, lam):
    # One key and one scalar draw per element: jax.random.poisson over an array runs its rejection loop until
    # every element is accepted and re-draws accepted ones meanwhile, so a value would depend on its
    # neighbours (and on the chunk's padding); a vmapped scalar loop freezes each element when it is done.
    keys = jax.random.split(_k(k), c)
    return jax.vmap(lambda kk, l: jax.random.poisson(kk, l, ()))(keys, lam).astype(jnp.float32)


def _d_bits(k, c):
    return jax.random.bits(_k(k), (c,), jnp.uint32)


def _perm(key, n):
    """A uniformly random permutation of ``range(n)``: a stable sort by 64 random bits per element."""
    bits = _flat_draw(_d_bits, key, 2 * n)
    return jnp.lexsort((bits[n:], bits[:n]))


_CHUNK_KERNELS: dict = {}
# A draw of fewer values gets an executable of the smallest of these sizes that holds it, once a distribution has
# made SMALL_AFTER draws of that size -- the same values, a prefix of the same counters: each computed a whole chunk
# (a 128-value normal draw, a GAN's latent batch: 1.2-1.6 ms of a 2-core CPU). A model's build, which draws each
# parameter once, compiles no second executable.
SMALL_SIZES, SMALL_AFTER = (1 << 10, 1 << 12, 1 << 14), 16


class _Chunks:
    """The compiled chunk executables of one distribution and static parameters: ``f(key, j, *extra)``, chunk
    ``j`` of a draw (its first ``size`` values), for ``size`` CHUNK or one of SMALL_SIZES.

    Runtime values (means, bounds, per-element parameters) are arguments, so they do not multiply compiles.
    """

    def __init__(self, name, draw, static):
        self.name, self.draw, self.static = name, draw, static
        self.kernels = {}
        self.draws = {}  # size -> eager draws that fit it (and no smaller one) so far

    def kernel(self, size):
        f = self.kernels.get(size)
        if f is None:
            draw, static = self.draw, self.static

            def chunk(key, j, *args):
                return draw(_chunk_key(key, j), size, *args, **static)
            chunk.__name__ = f"rng_{self.name}_chunk" + ("" if size == CHUNK else f"_{size}")
            f = self.kernels[size] = jax.jit(chunk)
        return f

    def for_draw(self, n):
        """``(executable, size)`` for an eager draw of ``n`` values."""
        for size in SMALL_SIZES:
            if n <= size:
                seen = self.draws[size] = self.draws.get(size, 0) + 1
                if seen > SMALL_AFTER:
                    return self.kernel(size), size
                break
        return self.kernel(CHUNK), CHUNK


def _chunk_kernel(name, draw, **static):
    """The :class:`_Chunks` of one distribution and static parameters (made once)."""
    cache_key = (name, tuple(sorted(static.items())))
    f = _CHUNK_KERNELS.get(cache_key)
    if f is None:
        f = _CHUNK_KERNELS[cache_key] = _Chunks(name, draw, static)
    return f


class _ChunkedKernel:
    """Eager kernel of one random op: its chunks from a shared executable, assembled on the host.

    ``chunks`` (:class:`_Chunks`) computes chunk ``j``; ``runtime(host_inputs, start, count, size)`` gives the
    extra arguments of the chunk holding values ``[start, start + count)`` for an executable of ``size`` values;
    ``post(flat)`` finishes the flat values on the host (the sort of a permutation). On accelerators, after
    ``_EXACT_AFTER`` calls the op's own jitted implementation takes over (same values, no transfers).
    """

    def __init__(self, op, n, out_shape, out_dtype, chunks, runtime=None, post=None):
        self.op, self.n, self.shape, self.dtype = op, n, tuple(out_shape), np.dtype(out_dtype)
        check_output_size(op, jax.ShapeDtypeStruct(self.shape, self.dtype))  # before any host allocation
        self.chunks, self.runtime, self.post = chunks, runtime, post
        self._calls = 0
        self._exact = None

    def __call__(self, key, *arrays):
        if self._exact is not None:
            return self._exact(key, *arrays)
        if _host_array(key) is None:  # not a plain single-device array: let JAX place it
            self._exact = jax.jit(self.op.fn)
            return self._exact(key, *arrays)
        dev = next(iter(key.devices()))
        if dev.platform != "cpu":
            self._calls += 1
            if self._calls > _EXACT_AFTER:
                self._exact = jax.jit(self.op.fn)
                return self._exact(key, *arrays)
        host = [np.asarray(a) for a in arrays]
        flat = np.empty(self.n, self.dtype if self.post is None else np.uint32)
        f, size = self.chunks.for_draw(self.n)
        for j, start in enumerate(range(0, self.n, CHUNK)):  # (values are defined by CHUNK-sized chunks)
            c = min(CHUNK, self.n - start)
            extra = self.runtime(host, start, c, size) if self.runtime is not None else ()
            flat[start:start + c] = np.asarray(f(key, np.uint32(j), *extra))[:c]
        out = flat if self.post is None else self.post(flat)
        return to_device_like(out.reshape(self.shape), key)


def _scalars(*values, dtype):
    scalars = tuple(np.asarray(v, dtype) for v in values)
    return lambda host, start, c, size: scalars


def _given(host, start, c, size):
    """Runtime arguments of every chunk: the op's (0-d) inputs after the key, as given (a draw's bounds, moments)."""
    return tuple(host)


def _per_element(out_shape):
    """Runtime arguments of chunk ``[start, start+c)`` for an executable of ``size`` values: each parameter
    broadcast to the output, padded with 1s."""
    def runtime(host, start, c, size):
        out = []
        for p in host:
            flat = np.broadcast_to(p, out_shape).reshape(-1)[start:start + c]
            if c < size:
                flat = np.concatenate([flat, np.ones(size - c, flat.dtype)])
            out.append(flat)
        return tuple(out)
    return runtime


class _RandomPrimitive(Primitive):
    """A random primitive whose ops get a chunked eager kernel (``eager(op) -> callable``) when bound."""

    __slots__ = ("eager",)

    def __init__(self, name, impl, eager, multiple_results=False):
        super().__init__(name, impl, multiple_results)
        self.eager = eager

    def bind(self, **params):
        op = super().bind(**params)
        if op._kernel is None and jax.config.jax_threefry_partitionable:  # chunk prefixes need it
            op._kernel = self.eager(op)
        return op


def _eager_uniform(op):
    p = dict(op.params)
    dt = np.dtype(p["dtype"])
    f = _chunk_kernel("uniform", lambda k, c, lo, hi, *, dtype: jax.random.uniform(_k(k), (c,), dtype, lo, hi),
                      dtype=dt.name)
    return _ChunkedKernel(op, math.prod(p["shape"]), p["shape"], dt, f,
                          _scalars(p["low"], p["high"], dtype=dt) if "low" in p else _given)


def _eager_normal(op):
    p = dict(op.params)
    dt = np.dtype(p["dtype"])
    f = _chunk_kernel("normal", lambda k, c, mean, std, *, dtype: _d_normal(k, c, mean=mean, std=std, dtype=dtype),
                      dtype=dt.name)
    return _ChunkedKernel(op, math.prod(p["shape"]), p["shape"], dt, f,
                          _scalars(p["mean"], p["std"], dtype=dt) if "mean" in p else _given)


def _eager_param(name, draw):
    def eager(op):
        size = dict(op.params)["size"]
        f = _chunk_kernel(name, draw)
        return _ChunkedKernel(op, math.prod(size), size, np.float32, f, _per_element(size))
    return eager


def _eager_permutation(op):
    p = dict(op.params)
    n = p["n"]
    f = _chunk_kernel("bits", _d_bits)
    return _ChunkedKernel(op, 2 * n, (n,), p["dtype"], f,
                          post=lambda bits: np.lexsort((bits[n:], bits[:n])).astype(p["dtype"]))


class _ShuffleKernel:
    """Eager ``rng_shuffle``: the permutation of the first axis as ``rng_permutation``'s, the gather on the host."""

    def __init__(self, op):
        self._jit = jax.jit(op.fn)
        self._calls = {}

    def __call__(self, key, x):
        host_key = _host_array(key)
        dev = next(iter(x.devices())) if host_key is not None else None
        sig = (x.shape, x.dtype)
        if dev is None or (dev.platform != "cpu" and self._calls.setdefault(sig, 0) >= _EXACT_AFTER):
            return self._jit(key, x)
        if dev.platform != "cpu":
            self._calls[sig] += 1
        perm = np.asarray(permutation.bind(n=int(x.shape[0]), dtype="int32").kernel(key))
        return to_device_like(np.asarray(x)[perm], x)


split_key = Primitive("rng_split", _split, multiple_results=True)
# NOTE: set directly (not through a subclass) so the op's trace/compile behaviour stays the plain Primitive's.
split_key.bind()._kernel = _SplitKernel(split_key.bind())


# A uniform draw's bounds and a normal draw's mean and std are inputs where the front end gives them (the cached 0-d
# tensors of those numbers, in the draw's dtype): as parameters, a noise scale annealed every step (an RL policy's
# exploration noise, a GAN's instance noise) made every auto-jit cluster holding the draw a new key -- split around
# it, slower than eager. Eagerly the values were already arguments of the chunk executables (_scalars). The parameter
# form stays for MegEngine's RNG descriptors (core/ops/builtin.py) and earlier recordings.
def _uniform(key, *bounds, shape, dtype, low=None, high=None):
    if bounds:
        low, high = bounds
    return _shaped(lambda k, c: _d_uniform(k, c, low=low, high=high, dtype=dtype), key, shape)


def _normal(key, *moments, shape, dtype, mean=None, std=None):
    if moments:
        mean, std = moments
    return _shaped(lambda k, c: _d_normal(k, c, mean=mean, std=std, dtype=dtype), key, shape)


uniform = _RandomPrimitive("rng_uniform", _uniform, _eager_uniform)
normal = _RandomPrimitive("rng_normal", _normal, _eager_normal)
gamma = _RandomPrimitive("rng_gamma", lambda key, k, theta, *, size: _shaped(_d_gamma, key, size, (k, theta)),
                         _eager_param("gamma", _d_gamma))
beta = _RandomPrimitive("rng_beta", lambda key, a, b, *, size: _shaped(_d_beta, key, size, (a, b)),
                        _eager_param("beta", _d_beta))
poisson = _RandomPrimitive("rng_poisson", lambda key, lam, *, size: _shaped(_d_poisson, key, size, (lam,)),
                           _eager_param("poisson", _d_poisson))
# (MegEngine 1.13.4's ExponentialRNG: a rate per element, as PoissonRNG's lam)
exponential = _RandomPrimitive("rng_exponential", lambda key, rate, *, size: _shaped(_d_exponential, key, size,
                                                                                     (rate,)),
                               _eager_param("exponential", _d_exponential))
permutation = _RandomPrimitive("rng_permutation", lambda key, *, n, dtype: _perm(key, n).astype(dtype),
                               _eager_permutation)
shuffle = _RandomPrimitive("rng_shuffle", lambda key, x: jnp.take(x, _perm(key, x.shape[0]), axis=0),
                           _ShuffleKernel)


def _dropout(x, key, *keep, drop_prob=None):
    # The keep probability ``1 - drop_prob`` is an input: float32 for the draw and in ``x``'s dtype for the scale (the
    # cached 0-d tensors of that Python number, as ``x * 0.5``'s 0.5), so that one kernel serves every rate. As a
    # parameter, a rate annealed every step compiled a kernel (and its gradient's) a step: ~300 ms eagerly, and under
    # auto-jit a new cluster key a step. (``drop_prob``: the parameter form of earlier recordings.)
    if drop_prob is not None:
        keep = (1.0 - drop_prob, 1.0 - drop_prob)
    draw, scale = keep
    mask = jax.random.bernoulli(_k(key), draw, x.shape)
    return jnp.where(mask, x / scale, jnp.zeros((), x.dtype))


dropout = Primitive("dropout", _dropout)


def _multinomial(key, probs, *, num_samples, replacement):
    # probs (C,) or (B, C) non-negative weights -> int32 (num_samples,) or (B, num_samples).
    logits = jnp.log(probs)
    if replacement:
        draws = jax.random.categorical(_k(key), logits, axis=-1, shape=(num_samples,) + probs.shape[:-1])
        return jnp.moveaxis(draws, 0, -1).astype(jnp.int32)
    # Without replacement: Gumbel top-k (zero-weight classes come last).
    g = jax.random.gumbel(_k(key), probs.shape)
    return jnp.argsort(-(logits + g), axis=-1)[..., :num_samples].astype(jnp.int32)


multinomial = Primitive("rng_multinomial", _multinomial)
