"""The global RNG state and the random functions. The state is a Tensor holding a raw PRNG key; each draw
splits it with the ``rng_split`` op and rebinds it in place (``_reset``), so jit sees it as ordinary state.

As in MegEngine: ``RNG(seed)`` has a state of its own, independent of the global one; ``RNG()`` (no seed)
draws from the global state, which ``seed`` resets. Default ``size`` is ``(1,)`` for uniform/normal; for
gamma/beta/poisson/exponential the output shape is ``size + broadcast(parameter shapes)`` (``(1,)`` when
that is empty, as MegEngine's kernels).
"""
from __future__ import annotations

import inspect
import math

import time

import contextlib
import threading

import numpy as np
import jax

from ..core import _registry
from ..core._tensor import Tensor
from ..core._dispatch import apply, OpError, current_interpreter
from ..core.dtypes import canonical, is_float
from ..core.ops import random as P
from ..core._elemwise_front import _scalar
from ._xoroshiro import Streams

_F32 = np.dtype(np.float32)

__all__ = ["RNG", "seed", "normal", "uniform", "gamma", "beta", "poisson", "permutation", "shuffle",
           "exponential", "multinomial"]


def _key_tensor(seed_value, device=None):
    # the raw key of jax.random.key(seed), made on the host: seeding compiles nothing
    return Tensor(P.key_data_from_seed(seed_value), dtype="uint32", device=device)


def _size(size, op, default=None):
    if size is None:
        return default
    if isinstance(size, Tensor) and size.ndim == 0 and size.dtype.kind in "iu":
        # MegEngine takes a count held in a tensor (`uniform(size=mask.sum())`, the zoo's box sampling);
        # under a trace reading it is a host read, guarded like any other
        size = int(size)
    try:
        s = (int(size),) if isinstance(size, (int, np.integer)) else tuple(int(v) for v in size)
    except TypeError:
        raise OpError(f"{op}: size must be an int or a sequence of ints, got {size!r}") from None
    if any(v < 0 for v in s):
        raise OpError(f"{op}: size must be non-negative, got {s}")
    return s


class DistributionError(OpError, AssertionError):
    """A distribution parameter outside its domain, or another argument MegEngine asserts on (``assert low <
    high``, ``assert shape > 0``, parameter shapes that do not broadcast, ``permutation(-1)``, an empty tensor to
    shuffle), so it is an ``AssertionError`` for MegEngine code that catches one, and an ``OpError``
    (``ValueError``) like megxla's other argument errors."""


def _param(v, name, op):
    """A float32 parameter that must be positive: Python numbers as MegEngine asserts; a Tensor's values are
    checked on the host when running eagerly (one device->host read; MegEngine's kernels gave NaN, 0 or
    negative samples), not inside a trace, where they are graph values."""
    if isinstance(v, Tensor):
        if not is_float(v.dtype):
            raise OpError(f"{op}: {name} must be a float tensor, got {v.dtype}")
        if v.size and current_interpreter() is None:
            bad = ~(np.asarray(v._data) > 0)
            if bad.any():
                raise DistributionError(f"{op}: {op} is not defined when {name} <= 0 (got "
                                        f"{np.asarray(v._data)[bad].reshape(-1)[0]} in {name} of shape {v.shape})")
        return v
    if not isinstance(v, (int, float, np.number)) or isinstance(v, bool):
        raise OpError(f"{op}: {name} must be a positive number or a float Tensor, got {v!r}")
    if not v > 0:
        raise DistributionError(f"{op}: {op} is not defined when {name} <= 0 (got {v})")
    return Tensor(v, dtype="float32")


def _in_dtype_of(out, *params):
    """MegEngine's gamma / beta / poisson kernels sample in their parameters' dtype: float16 Tensors (all of them;
    mixed with float32 its kernels raise) give float16 samples. megxla draws in float32 and rounds once."""
    if all(p.dtype == np.float16 for p in params):
        return out.astype("float16")
    return out


def _param_shape(op, size, *params):
    try:
        shape = np.broadcast_shapes(*[p.shape for p in params])
    except ValueError:
        # (MegEngine asserts it: "The size of inps[1] (3) must match the size (2) at dim 0")
        raise DistributionError(f"{op}: parameter shapes {[p.shape for p in params]} do not broadcast") from None
    # MegEngine's kernels have no 0-d output: scalar parameters with no size give one sample of shape (1,)
    return _size(size, op, ()) + tuple(shape) or (1,)


class RNG:
    """A random number generator.

    With a ``seed`` it owns its key state, independent of the global generator (``megxla.random.seed`` does not
    affect it); without one it draws from the global state, as MegEngine's ``RNG()`` does.

    Args:
        seed: the seed of this generator's own state; None to use the global state.
        device: where a seeded generator's state lives and its samples are made (``"xpu1"``); default: the
            default device. Two generators with the same seed draw the same numbers on any devices. Without a seed
            the global state's device is used, as MegEngine ignores ``device`` then.

    Example:
        >>> rng = RNG(seed=1)
        >>> rng.uniform(size=(2, 2)).shape
        (2, 2)
        >>> RNG(seed=1, device="cpu0").uniform(size=(2,)).device
        CompNode("cpu0:0" from "cpu0:0")
    """

    def __init__(self, seed: int = None, device: str = None):
        # (MegEngine's handle takes a uint64: a float, a negative number, 2**64 or more raise TypeError there;
        # a bool is an int, as there)
        if seed is not None and (not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2 ** 64):
            raise TypeError(f"RNG: seed must be an int in [0, 2**64), got {type(seed).__name__} {seed!r}")
        self._seed = seed
        # (MegEngine's RNG keeps its device only with a seed: the global state's handle has its own)
        self._state = None if seed is None else _key_tensor(seed, device)

    def _next_key(self):
        rng = self if self._state is not None else _global
        new, sub = apply(P.split_key.bind(), rng._state)
        rng._state._reset(new)
        return sub

    def _count(self, kind, n):
        """An eager draw of the global generator takes ``n`` outputs of MegEngine's ``kind`` stream there: the
        initialisers' streams skip them, so a model built after it still gets MegEngine's parameters."""
        if (self is _global or self._state is None) and _swap.key is None and current_interpreter() is None:
            _global.streams().skip(kind, n)

    def uniform(self, low: float = 0, high: float = 1, size=None):
        """Samples from the uniform distribution on ``[low, high)``.

        Args:
            low: lower bound.
            high: upper bound (> low).
            size: output shape; default ``(1,)``.

        Returns:
            float32 samples.

        Example:
            >>> RNG(0).uniform(-1, 1, size=(3,)).shape
            (3,)
        """
        if not low < high:
            raise DistributionError(f"uniform: not defined when low >= high (got low={low}, high={high})")
        shape = _size(size, "uniform", (1,))
        self._count("uniform", math.prod(shape))
        # (the bounds inputs, the cached 0-d tensors of these numbers: a new range every step compiles nothing and
        # keeps auto-jit's clusters -- core/ops/random.py)
        return apply(P.uniform.bind(shape=shape, dtype="float32"), self._next_key(),
                     _scalar(float(low), _F32), _scalar(float(high), _F32))

    def normal(self, mean: float = 0, std: float = 1, size=None):
        """Samples from the normal distribution N(mean, std ** 2).

        Args:
            mean: the mean.
            std: the standard deviation (>= 0; 0 gives ``mean`` everywhere). A negative ``std`` raises
                (MegEngine accepts it and draws ``mean + std * z``; NumPy raises).
            size: output shape; default ``(1,)``.

        Returns:
            float32 samples.

        Example:
            >>> RNG(0).normal(0, 2, size=(2, 3)).shape
            (2, 3)
        """
        if not np.isfinite(float(std)):
            raise OpError(f"normal: std must be finite, got {std}")
        if std < 0:
            raise DistributionError(f"normal: std must be >= 0, got {std}")
        shape = _size(size, "normal", (1,))
        self._count("normal", 2 * -(-math.prod(shape) // 2))  # (MegEngine's Box-Muller: a pair per two values)
        return apply(P.normal.bind(shape=shape, dtype="float32"), self._next_key(),
                     _scalar(float(mean), _F32), _scalar(float(std), _F32))

    def gamma(self, shape, scale=1, size=None):
        """Samples from the gamma distribution with shape ``k`` and scale ``theta`` (mean ``k * theta``).

        Args:
            shape: positive number or float Tensor ``k``.
            scale: positive number or float Tensor ``theta``.
            size: prepended to the broadcast shape of the parameters; default ``()`` (a 0-d result is ``(1,)``).

        Returns:
            float32 samples of shape ``size + broadcast(shape.shape, scale.shape)``.

        Example:
            >>> RNG(0).gamma(Tensor([[1.], [10.]]), Tensor([1., 5.]), size=2).shape
            (2, 2, 2)
        """
        k, theta = _param(shape, "shape", "gamma"), _param(scale, "scale", "gamma")
        out = _param_shape("gamma", size, k, theta)
        return _in_dtype_of(apply(P.gamma.bind(size=out), self._next_key(), k, theta), k, theta)

    def beta(self, alpha, beta, size=None):
        """Samples from the beta distribution Beta(alpha, beta).

        Args:
            alpha: positive number or float Tensor.
            beta: positive number or float Tensor.
            size: prepended to the broadcast shape of the parameters; default ``()`` (a 0-d result is ``(1,)``).

        Returns:
            float32 samples in ``(0, 1)``.

        Example:
            >>> RNG(0).beta(2, 3, size=(4,)).shape
            (4,)
        """
        a, b = _param(alpha, "alpha", "beta"), _param(beta, "beta", "beta")
        out = _param_shape("beta", size, a, b)
        return _in_dtype_of(apply(P.beta.bind(size=out), self._next_key(), a, b), a, b)

    def poisson(self, lam, size=None):
        """Samples from the Poisson distribution with rate ``lam``.

        Args:
            lam: positive number or float Tensor.
            size: prepended to the shape of ``lam``; default ``()`` (a 0-d result is ``(1,)``).

        Returns:
            float32 (integral-valued) samples.

        Example:
            >>> RNG(0).poisson(Tensor([1., 5.]), size=3).shape
            (3, 2)
        """
        lam = _param(lam, "lam", "poisson")
        return _in_dtype_of(apply(P.poisson.bind(size=_param_shape("poisson", size, lam)), self._next_key(), lam), lam)

    def exponential(self, rate=1.0, size=None):
        """Samples from the exponential distribution with rate ``lambda`` (mean ``1 / rate``), as MegEngine 1.13.4.

        Args:
            rate: positive number or float Tensor, ``1 / scale``.
            size: prepended to the shape of ``rate``; default ``()`` (a 0-d result is ``(1,)``).

        Returns:
            float32 samples of shape ``size + rate.shape``.

        Example:
            >>> RNG(0).exponential(rate=0.5, size=(1, 3)).shape
            (1, 3)
            >>> RNG(0).exponential(Tensor([[1., 1.], [0.1, 0.1]]), size=(1, 3)).shape
            (1, 3, 2, 2)
        """
        rate = _param(rate, "rate", "exponential")
        return apply(P.exponential.bind(size=_param_shape("exponential", size, rate)), self._next_key(), rate)

    def permutation(self, n, *, dtype: str = "int32"):
        """A random permutation of ``range(n)``, or a copy of a Tensor shuffled along its first axis.

        Args:
            n: a non-negative int, or a Tensor (left unchanged; a 0-d one is taken as shape ``(1,)``).
            dtype: dtype of the permutation of ``range(n)``.

        Returns:
            the permutation.

        Example:
            >>> sorted(RNG(0).permutation(5).numpy().tolist())
            [0, 1, 2, 3, 4]
        """
        if isinstance(n, Tensor):
            if n.ndim == 0:  # (MegEngine's kernels see a scalar as shape (1,): ``permutation(Tensor(7))`` is [7])
                n = n.reshape(1)
            if n.size == 0:  # (MegEngine asserts "size needs to be greater than 0")
                raise DistributionError(f"permutation: size needs to be greater than 0, got shape {n.shape}")
            return apply(P.shuffle.bind(), self._next_key(), n)
        # (MegEngine asserts ``isinstance(n, int)`` and "Permutation is not defined when n < 0")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise DistributionError(f"permutation: n must be a non-negative int or a Tensor, got {n!r}")
        if n < 0:
            raise DistributionError(f"permutation: Permutation is not defined when n < 0 (got {n})")
        try:
            dt = canonical(dtype).name
        except TypeError:
            raise OpError(f"permutation: unknown dtype {dtype!r}") from None
        return apply(P.permutation.bind(n=int(n), dtype=dt), self._next_key())

    def shuffle(self, inp: Tensor):
        """Shuffles ``inp`` in place along its first axis.

        Args:
            inp: a non-empty Tensor (a 0-d one becomes shape ``(1,)``, as in MegEngine, whose kernels see a scalar
                as shape ``(1,)``).

        Returns:
            None (``inp`` is modified).

        Example:
            >>> x = Tensor([1, 2, 3]); RNG(0).shuffle(x); sorted(x.numpy().tolist())
            [1, 2, 3]
        """
        if not isinstance(inp, Tensor):
            raise OpError(f"shuffle: expects a Tensor, got {inp!r}")
        if inp.size == 0:  # (MegEngine asserts "size needs to be greater than 0")
            raise DistributionError(f"shuffle: size needs to be greater than 0, got shape {inp.shape}")
        src = inp.reshape(1) if inp.ndim == 0 else inp
        inp._reset(apply(P.shuffle.bind(), self._next_key(), src))

    def multinomial(self, input, num_samples, replacement=False):
        """Draws class indices with probabilities proportional to the rows of ``input`` (MegEngine 1.13.4).

        Args:
            input: non-negative weights ``(C,)`` or ``(B, C)``, each row with a non-zero sum.
            num_samples: draws per row, positive (at most C without replacement).
            replacement: draw with replacement.

        Returns:
            int32 indices ``(num_samples,)`` or ``(B, num_samples)``.

        Example:
            >>> RNG(0).multinomial(Tensor([0., 1., 0.]), 2, replacement=True).numpy()
            array([1, 1], dtype=int32)
        """
        input = input if isinstance(input, Tensor) else Tensor(input, dtype="float32")
        if not is_float(input.dtype) or input.ndim not in (1, 2):
            raise DistributionError(f"multinomial: Multinomial is not defined when input is not a 1-D or 2-D float "
                                    f"tensor, got {input.shape}:{input.dtype}")
        if input.shape[-1] == 0:
            raise DistributionError(f"multinomial: Multinomial is not defined when num of input == 0 (shape "
                                    f"{input.shape})")
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
            raise DistributionError(f"multinomial: Multinomial is not defined when num_samples <= 0, got "
                                    f"{num_samples!r}")
        num_samples = int(num_samples)
        if not replacement and num_samples > input.shape[-1]:
            raise DistributionError(f"multinomial: Multinomial is not defined when num_samples > input.shape[-1] "
                                    f"in case of no replacement ({num_samples} > {input.shape[-1]})")
        return apply(P.multinomial.bind(num_samples=num_samples, replacement=bool(replacement)),
                     self._next_key(), input)


class _GlobalRNG(RNG):
    """The global generator. Its key Tensor is made on first use, so that importing megxla starts no XLA backend:
    ``dist.launcher`` can then fork its workers (MegEngine's way) instead of starting fresh interpreters."""

    def __init__(self):
        # as MegEngine (``seed(int(time.time()))`` at import): each run starts from another state unless seeded;
        # a forked worker (``dist.launcher``) inherits its parent's
        self._seed = int(time.time())
        self._key = None
        self._streams = None  # MegEngine's CPU streams of the initialisers, made on first use; seed() restarts them

    def streams(self):
        """The global handle's MegEngine CPU streams (:mod:`._xoroshiro`): the parameter initialisers draw from
        them."""
        if self._streams is None:
            self._streams = Streams(self._seed)
        return self._streams

    @property
    def _state(self):
        key = _swap.key
        if key is not None:  # this thread runs a traced call: its draws use the trace's own key
            return key
        if self._key is None:
            self._key = _key_tensor(self._seed)
        return self._key

    @_state.setter
    def _state(self, t):
        if _swap.key is not None:
            _swap.key = t
        else:
            self._key = t


class _Swap(threading.local):
    key = None  # per thread: the key Tensor that replaces the global state inside ``swapped``


_swap = _Swap()
_global = _GlobalRNG()


@contextlib.contextmanager
def swapped(key):
    """Within the block, the calling thread's global draws use (and advance) ``key`` instead of the global state;
    other threads keep drawing from the global state (jit runs a traced call's random ops on its own key).

    Args:
        key: a key Tensor (as ``get_rng_state()`` returns).

    Example:
        >>> k = get_rng_state(); other = Tensor(k.numpy())
        >>> with swapped(other): _ = uniform(size=(2,))
        >>> bool((get_rng_state().numpy() == k.numpy()).all())
        True
    """
    prev = _swap.key
    _swap.key = key
    try:
        yield
    finally:
        _swap.key = prev


def get_rng_state() -> Tensor:
    """The Tensor holding the global key state (jit treats it as implicit state of a traced step)."""
    return _global._state


def next_key() -> Tensor:
    """Split the global state and return a fresh key for one draw (for random functional ops like dropout)."""
    return _global._next_key()


SEED_COUNT = [0]  # calls of seed() so far


def seed(seed: int):
    """Resets the global generator: every later draw (init, dropout, ``random.*``, ``RNG()``) is reproducible.

    Args:
        seed: the seed.

    Returns:
        None.

    Example:
        >>> seed(3); a = uniform(size=2); seed(3); b = uniform(size=2)  # a == b
    """
    # (MegEngine seeds NumPy's MT19937 and its C++ uint64 generator with it: a float, a negative number or one
    # of 2**64 or more raise there; accepted, seed(1.5) was seed(1) and seed(-1) seed(2**32 - 1))
    if not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__} {seed!r}")
    if not 0 <= int(seed) < 2 ** 64:
        raise ValueError(f"seed: expected 0 <= seed < 2**64, got {seed}")
    _global._state._reset(_key_tensor(seed))
    _global._seed = int(seed)  # (what ``get_global_rng_seed()`` reports)
    _global._streams = None  # (the initialisers' MegEngine streams restart, even for the same seed)
    # traced steps derive their own keys from the global one: a new seed re-derives them at their next call
    # (jit reads the count; the epoch makes a prepared compiled call take the full path once)
    SEED_COUNT[0] += 1
    _registry.bump_epoch()


def _delegate(name):
    method = getattr(RNG, name)

    def fn(*args, **kwargs):
        return method(_global, *args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = method.__doc__.replace("RNG(0).", "megxla.random.")  # draws from the global generator
    # help() and IDEs show MegEngine's parameters: ``normal(mean=0, std=1, size=None)``
    sig = inspect.signature(method)
    fn.__signature__ = sig.replace(parameters=list(sig.parameters.values())[1:])
    return fn


normal = _delegate("normal")
uniform = _delegate("uniform")
gamma = _delegate("gamma")
beta = _delegate("beta")
poisson = _delegate("poisson")
permutation = _delegate("permutation")
shuffle = _delegate("shuffle")
exponential = _delegate("exponential")
multinomial = _delegate("multinomial")


# The global key is implicit state of any step that draws random numbers: registered in core, so a tracer can
# swap it without importing this module (core/_registry.py).
from ..core import _registry as _registry  # noqa: E402

_registry.register_implicit_state("rng_key", lambda: _global._state, lambda t: setattr(_global, "_state", t))
# An ``RNG(seed)`` owns its key: a traced step that draws from one passed as an argument (or held by a module
# argument, ``self.rng = RNG(seed)``) reads and advances that key as state. ``RNG()`` draws from the global key
# (the implicit state above) and has none of its own.
_registry.register_state_walker(
    RNG, lambda r: [] if isinstance(r, _GlobalRNG) or r._state is None else [("state", r._state)])
