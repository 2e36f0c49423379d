"""MegEngine 1.13's random streams on the CPU, reproduced on the host with NumPy (:class:`Streams`): megxla's
parameter initialisers draw from them (``module/init.py``), so a model built after ``seed(n)`` has the parameters
MegEngine gives it.

MegEngine's CPU kernels (``dnn/src/naive/rng``) draw from xoroshiro128+ (rotations 55, 14, 36), seeded with two
outputs of splitmix64 of the seed. Each kind of draw has a generator of its own per handle (the global handle's,
which ``seed()`` restarts): ``uniform`` and ``normal`` advance separate streams. A float32 uniform is ``2 - f``
where ``f`` in [1, 2) has the output's top 23 bits as its mantissa, so it lies in (0, 1]; a normal is Box-Muller
over pairs of uniforms (``r = std * sqrt(-2 log u1)``, ``z0 = r cos(2 pi u2) + mean``, ``z1 = r sin(...) +
mean``, an odd size using a whole pair for its last value), with glibc's float32 roundings of ``logf`` / ``cosf``
/ ``sinf`` (the C library MegEngine's kernels call; ``_libm_rounding.npz``).

The generator is sequential, so a draw of ``n`` values runs it in ``L`` lanes of ``S`` steps each (``L * S >= n``):
lane ``j`` starts at the state ``S * j`` steps on, reached by jumping -- xoroshiro's step is linear over GF(2), so
``k`` steps are one 128 x 128 bit matrix, applied to all lanes at once with byte tables --, then the lanes step
together; draws of 2**18 values or more run in blocks on threads.
"""
from __future__ import annotations

import functools
import math
import os

import numpy as np

__all__ = ["Stream", "Streams"]

_M64 = (1 << 64) - 1
_U64 = np.uint64


def _splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & _M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return state, z ^ (z >> 31)


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & _M64


def _step(s0, s1):
    """One xoroshiro128+ step on Python ints: (output, s0, s1)."""
    out = (s0 + s1) & _M64
    s1 ^= s0
    return out, _rotl(s0, 55) ^ s1 ^ ((s1 << 14) & _M64), _rotl(s1, 36)


# ---- the step as a bit matrix: a state's 128 bits are s0's 64 then s1's, lowest first; ``k`` steps are the matrix
# ``_power(k)`` over GF(2), column ``i`` the image of unit vector ``i``
def _bits(s0, s1):
    return np.unpackbits(np.array([s0, s1], _U64).view(np.uint8), bitorder="little")


def _words(bits):
    return [int(w) for w in np.packbits(bits.astype(np.uint8), bitorder="little").view(_U64)]


def _product(a, b):
    """``a @ b`` over GF(2) (0/1 float32: sums of at most 128 ones are exact)."""
    return (a @ b).astype(np.uint8) & np.uint8(1)


@functools.lru_cache(maxsize=None)
def _power(k):
    """The (128, 128) float32 0/1 matrix of ``k`` steps (k >= 1): powers of two by squaring, others by their binary
    digits (one matrix product each; a composition of Python-int maps took 4 ms)."""
    if k == 1:
        cols = []
        for bit in range(128):
            v = 1 << bit
            _, s0, s1 = _step(v & _M64, v >> 64)
            cols.append(_bits(s0, s1))
        return np.stack(cols, 1).astype(np.float32)
    if k & (k - 1):  # (not a power of two)
        low = k & -k
        return _product(_power(k - low), _power(low)).astype(np.float32)
    half = _power(k // 2)
    return _product(half, half).astype(np.float32)


@functools.lru_cache(maxsize=64)
def _power_tables(k):
    """``_power(k)`` as 16 byte tables, (16, 256, 2) uint64: entry [b, v] is the image of the state whose byte
    ``b`` (s0's 8 bytes, then s1's, little-endian) is ``v`` and whose other bytes are 0; a state's image is the XOR of
    its 16 bytes' entries."""
    # (128, 2): the unit vectors' images, as (s0, s1) words
    cols = np.ascontiguousarray(np.packbits(_power(k).T.astype(np.uint8), axis=1, bitorder="little")).view(_U64)
    tables = np.zeros((16, 256, 2), _U64)
    for bit in range(8):  # (entries [2**bit, 2**(bit + 1)): those below with this bit set)
        tables[:, 1 << bit:2 << bit] = tables[:, :1 << bit] ^ cols[bit::8][:, None]
    return tables


def _jump_lanes(s0, s1, stride, lanes):
    """(lanes, 2) uint64: the states 0, stride, 2 * stride, ... steps after (s0, s1) -- lanes [0, m) jumped by
    ``m * stride`` steps give lanes [m, 2m), 16 table lookups per doubling. (A float matrix product mod 2 did
    the same, but BLAS's threads made it 10x slower on a busy machine.)"""
    states = np.empty((lanes, 2), _U64)
    states[0] = s0, s1
    have = 1
    while have < lanes:
        take = min(have, lanes - have)
        tables = _power_tables(stride * have)
        data = states[:take].view(np.uint8)  # (take, 16)
        jumped = tables[0][data[:, 0]]
        for b in range(1, 16):
            jumped ^= tables[b][data[:, b]]
        states[have:have + take] = jumped
        have += take
    return states

@functools.lru_cache(maxsize=None)
def _rounding_table(name):
    """(``_libm``) Whether glibc's ``name`` (``logf`` / ``cosf`` / ``sinf``) rounds to the other neighbour of the
    true value, per uniform's 23 mantissa bits (scripts/megengine_libm_table.py): 8 MiB of bools, unpacked from
    the file's bitmap on first use (a lookup in the packed bits took 5x as long)."""
    with np.load(os.path.join(os.path.dirname(__file__), "_libm_rounding.npz")) as data:
        return np.unpackbits(data[name]).view(bool)


def _libm(name, true, mantissa):
    """float32 values of glibc's ``name`` (the C library MegEngine's kernels call) for the float64 values ``true``
    of its arguments, which are indexed by the ``mantissa`` bits of the uniforms they came from: the correctly
    rounded values, but where glibc rounds to the float on the other side of the true value."""
    nearest = true.astype(np.float32)
    other = _rounding_table(name)[mantissa]
    at = np.flatnonzero(other)
    if at.size:
        up = true[at] > nearest[at].astype(np.float64)
        nearest[at] = np.nextafter(nearest[at], np.where(up, np.float32(np.inf), np.float32(-np.inf)))
    return nearest

_PARALLEL_MIN = 1 << 18  # outputs from which a draw runs in blocks on threads (Stream._in_blocks)
_pool = []


def _executor():
    if not _pool:
        from concurrent.futures import ThreadPoolExecutor
        _pool.append(ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1), thread_name_prefix="megxla-rng"))
    return _pool[0]


def _at(s0, s1):
    """A :class:`Stream` at the state (s0, s1)."""
    stream = Stream.__new__(Stream)
    stream.s0, stream.s1 = int(s0), int(s1)
    return stream


class Stream:
    """One xoroshiro128+ generator seeded as MegEngine's (splitmix64 of ``seed``).

    Example:
        >>> Stream(0).uniform(3).tolist()
        [0.6851612329483032, 0.9979196786880493, 0.9360051155090332]
    """

    def __init__(self, seed: int):
        state, self.s0 = _splitmix64(int(seed) & _M64)
        _, self.s1 = _splitmix64(state)

    def jump(self, n: int) -> None:
        """Skip the next ``n`` outputs (one bit-matrix product: ``_power(n)``)."""
        if n > 0:
            self.s0, self.s1 = _words(_product(_power(n), _bits(self.s0, self.s1).astype(np.float32)))

    def raw(self, n: int) -> np.ndarray:
        """The next ``n`` outputs, uint64."""
        if n <= 64:
            out = np.empty(n, _U64)
            s0, s1 = self.s0, self.s1
            for i in range(n):
                out[i], s0, s1 = _step(s0, s1)
            self.s0, self.s1 = s0, s1
            return out
        # lanes of ``steps`` steps, ``steps`` a power of two (few jump maps to cache) near sqrt(n) / 4: the steps
        # cost a dozen NumPy calls each, the jumps' rounds grow with log2(lanes)
        steps = 1 << max(3, min(12, round(math.log2(max(1.0, math.sqrt(n) / 4)))))
        lanes = -(-n // steps)
        states = _jump_lanes(self.s0, self.s1, steps, lanes)
        s0, s1 = states[:, 0].copy(), states[:, 1].copy()
        out = np.empty((steps, lanes), _U64)
        t, u = np.empty_like(s0), np.empty_like(s0)
        c14, c55, c9, c36, c28 = _U64(14), _U64(55), _U64(9), _U64(36), _U64(28)
        last_lane, last_step = divmod(n, steps)  # (the state after n outputs: lane n // steps after n % steps steps)
        end = None
        for k in range(steps):
            if k == last_step and last_lane < lanes:
                end = int(s0[last_lane]), int(s1[last_lane])
            np.add(s0, s1, out=out[k])
            np.bitwise_xor(s1, s0, out=s1)  # s1 ^= s0
            np.left_shift(s0, c55, out=t)
            np.right_shift(s0, c9, out=u)
            np.bitwise_or(t, u, out=s0)  # rotl(s0, 55)
            np.bitwise_xor(s0, s1, out=s0)
            np.left_shift(s1, c14, out=t)
            np.bitwise_xor(s0, t, out=s0)  # rotl(s0, 55) ^ s1 ^ (s1 << 14)
            np.left_shift(s1, c36, out=t)
            np.right_shift(s1, c28, out=u)
            np.bitwise_or(t, u, out=s1)  # rotl(s1, 36)
        if end is None:  # (n == lanes * steps: the last lane's end)
            end = int(s0[-1]), int(s1[-1])
        self.s0, self.s1 = end
        return out.T.reshape(-1)[:n]

    def uniform(self, n: int) -> np.ndarray:
        """``n`` float32 values in (0, 1], MegEngine's ``uniform_int2float``."""
        return self._in_blocks(n, 1, lambda stream, count: stream._uniform(count))

    def normal(self, n: int, mean: float = 0.0, std: float = 1.0) -> np.ndarray:
        """``n`` float32 values of N(mean, std**2): MegEngine's Box-Muller in float32 (``fill_gaussian``)."""
        pairs = -(-n // 2)
        return self._in_blocks(2 * pairs, 2, lambda stream, count: stream._normal(count, mean, std))[:n]

    def _in_blocks(self, n, per, draw):
        """``draw(stream, count)`` of ``n`` outputs (``count`` a multiple of ``per``): a large draw in blocks on
        worker threads, each block's stream jumped to its place (NumPy releases the GIL in its loops), the result
        the same as one stream's."""
        threads = min(8, os.cpu_count() or 1)
        if n < _PARALLEL_MIN or threads < 2:
            return draw(self, n)
        block = -(-n // (threads * per)) * per
        sizes = [min(block, n - i * block) for i in range(threads)]
        streams = [_at(*start) for start in _jump_lanes(self.s0, self.s1, block, threads)]
        parts = list(_executor().map(draw, streams, sizes))
        self.s0, self.s1 = streams[-1].s0, streams[-1].s1  # (the last block's stream ends where the draw does)
        return np.concatenate(parts)

    def _uniform(self, n: int) -> np.ndarray:
        mantissa = (self.raw(n) >> _U64(41)).astype(np.uint32) | np.uint32(0x3F800000)
        return np.float32(2) - mantissa.view(np.float32)

    def _normal(self, n: int, mean: float, std: float) -> np.ndarray:
        pairs = -(-n // 2)
        mantissa = (self.raw(2 * pairs) >> _U64(41)).astype(np.uint32)
        u = np.float32(2) - (mantissa | np.uint32(0x3F800000)).view(np.float32)
        m1, m2 = mantissa[0::2], mantissa[1::2]
        f32 = np.float32
        log_u1 = _libm("logf", np.log(u[0::2].astype(np.float64)), m1)
        r = f32(std) * np.sqrt(f32(-2) * log_u1)
        theta = (2 * math.pi * u[1::2].astype(np.float64)).astype(f32).astype(np.float64)  # (2 * M_PI * u2, double)
        z = np.empty((pairs, 2), f32)
        z[:, 0] = r * _libm("cosf", np.cos(theta), m2) + f32(mean)
        z[:, 1] = r * _libm("sinf", np.sin(theta), m2) + f32(mean)
        return z.reshape(-1)[:n]


class Streams:
    """A handle's generators, one per kind of draw (``"uniform"``, ``"normal"``), each seeded with ``seed`` when
    first used -- MegEngine's per-operator generators. ``skip(kind, n)`` counts ``n`` outputs drawn elsewhere
    (megxla's own eager draws, which are JAX's numbers: see :mod:`megxla.random`), applied as one jump when the
    stream is next used, so a model built after them gets MegEngine's parameters still.

    Example:
        >>> s = Streams(0); s.skip("uniform", 2); a = s["uniform"].uniform(1)
        >>> bool(Streams(0)["uniform"].uniform(3)[2] == a[0])
        True
    """

    def __init__(self, seed: int):
        self.seed = int(seed)
        self._by_kind = {}
        self._skipped = {}

    def skip(self, kind: str, n: int) -> None:
        self._skipped[kind] = self._skipped.get(kind, 0) + int(n)

    def __getitem__(self, kind: str) -> Stream:
        stream = self._by_kind.get(kind)
        if stream is None:
            stream = self._by_kind[kind] = Stream(self.seed)
        skipped = self._skipped.pop(kind, 0)
        if skipped:
            stream.jump(skipped)
        return stream
