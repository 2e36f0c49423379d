"""The global RNG state and the random functions. The state is a Tensor holding a raw PRNG key; each draw
splits it with the ``rng_split`` op and rebinds it in place (``_reset``), so jit sees it as ordinary state."""
from __future__ import annotations

import numpy as np
import jax

from ..core._tensor import Tensor
from ..core._dispatch import apply
from ..core.dtypes import canonical
from ..core.ops import random as P

__all__ = ["RNG", "seed", "normal", "uniform", "gamma", "beta", "poisson", "permutation", "shuffle",
           "exponential", "multinomial"]


def _key_tensor(seed_value):
    return Tensor(np.asarray(jax.random.key_data(jax.random.key(int(seed_value) % (2 ** 32)))), dtype="uint32")


class RNG:
    """A random number generator with its own key state.

    Args:
        seed: the seed; default draws one from the global generator.
        device: accepted for MegEngine compatibility.

    Example:
        >>> rng = RNG(seed=1)
        >>> x = rng.uniform(size=(2, 2))
    """

    def __init__(self, seed=None, device=None):
        if seed is None:
            seed = int(np.random.randint(0, 2 ** 31 - 1))
        self._state = _key_tensor(seed)

    def _next_key(self):
        new, sub = apply(P.split_key.bind(), self._state)
        self._state._reset(new)
        return sub

    def uniform(self, low=0, high=1, size=None):
        """Samples from U[low, high) of shape ``size``, float32."""
        return apply(P.uniform.bind(shape=_size(size), low=float(low), high=float(high), dtype="float32"),
                     self._next_key())

    def normal(self, mean=0, std=1, size=None):
        """Samples from N(mean, std**2) of shape ``size``, float32."""
        return apply(P.normal.bind(shape=_size(size), mean=float(mean), std=float(std), dtype="float32"),
                     self._next_key())

    def gamma(self, shape, scale=1, size=None):
        """Samples from Gamma(shape, scale); ``size`` defaults to the broadcast of the parameters' shapes."""
        shape, scale = _param(shape), _param(scale)
        size = _size(size) if size is not None else np.broadcast_shapes(shape.shape, scale.shape)
        return apply(P.gamma.bind(size=tuple(size)), self._next_key(), shape, scale)

    def beta(self, alpha, beta, size=None):
        """Samples from Beta(alpha, beta)."""
        alpha, beta = _param(alpha), _param(beta)
        size = _size(size) if size is not None else np.broadcast_shapes(alpha.shape, beta.shape)
        return apply(P.beta.bind(size=tuple(size)), self._next_key(), alpha, beta)

    def poisson(self, lam, size=None):
        """Samples from Poisson(lam), as float32."""
        lam = _param(lam)
        size = _size(size) if size is not None else lam.shape
        return apply(P.poisson.bind(size=tuple(size)), self._next_key(), lam)

    def exponential(self, scale=1, size=None):
        """Samples from Exponential with mean ``scale``."""
        return apply(P.exponential.bind(shape=_size(size), scale=float(scale), dtype="float32"), self._next_key())

    def permutation(self, n, *, dtype="int32"):
        """A random permutation of ``range(n)``, or of a tensor's first axis."""
        if isinstance(n, Tensor):
            return self.shuffle(n)
        return apply(P.permutation.bind(n=int(n), dtype=canonical(dtype).name), self._next_key())

    def shuffle(self, inp):
        """Shuffle ``inp`` along its first axis, in place."""
        inp._reset(apply(P.shuffle.bind(), self._next_key(), inp))
        return inp

    def multinomial(self, probs, num_samples, replacement=False):
        """Draw ``num_samples`` class indices per row of ``probs`` (int32)."""
        probs = _param(probs)
        return apply(P.multinomial.bind(num_samples=int(num_samples), replacement=bool(replacement)),
                     self._next_key(), probs)


def _size(size):
    if size is None:
        return ()
    return (int(size),) if isinstance(size, (int, np.integer)) else tuple(int(s) for s in size)


def _param(v):
    return v if isinstance(v, Tensor) else Tensor(v, dtype="float32")


_global = RNG(seed=0)


def get_rng_state() -> Tensor:
    """The Tensor holding the global key state (jit treats it as implicit state of a traced step)."""
    return _global._state


def next_key() -> Tensor:
    """Split the global state and return a fresh key for one draw (for random functional ops like dropout)."""
    return _global._next_key()


def seed(seed: int):
    """Reseed the global generator: every later draw (init, dropout, random.*) is reproducible."""
    _global._state._reset(_key_tensor(seed))


def _delegate(name):
    def fn(*args, **kwargs):
        return getattr(_global, name)(*args, **kwargs)

    fn.__name__ = name
    fn.__doc__ = getattr(RNG, name).__doc__ + f"""

    Example:
        >>> import megxla.random as R
        >>> R.seed(0); R.{name}"""
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
