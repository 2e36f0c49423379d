"""Random primitives: each takes a raw PRNG key (uint32[2]) as its first input, so random draws are ordinary
ops: recorded by traces, and their key is a graph input/output in compiled steps."""
import jax
import jax.numpy as jnp

from .._op import Primitive


def _split(key):
    k = jax.random.wrap_key_data(key)
    a, b = jax.random.split(k)
    return jax.random.key_data(a), jax.random.key_data(b)


def _k(key):
    return jax.random.wrap_key_data(key)


def _dropout(x, key, *, drop_prob):
    keep = jax.random.bernoulli(_k(key), 1.0 - drop_prob, x.shape)
    return jnp.where(keep, x / (1.0 - drop_prob), jnp.zeros((), x.dtype))


def _gamma(key, shape, scale, *, size):
    return jax.random.gamma(_k(key), shape, size) * scale


def _beta(key, a, b, *, size):
    return jax.random.beta(_k(key), a, b, size)


def _poisson(key, lam, *, size):
    return jax.random.poisson(_k(key), lam, size).astype(jnp.float32)


split_key = Primitive("rng_split", _split, multiple_results=True)
uniform = Primitive("rng_uniform", lambda key, *, shape, low, high, dtype: jax.random.uniform(
    _k(key), shape, dtype, low, high))
normal = Primitive("rng_normal", lambda key, *, shape, mean, std, dtype: mean + std * jax.random.normal(
    _k(key), shape, dtype))
dropout = Primitive("dropout", _dropout)
permutation = Primitive("rng_permutation", lambda key, *, n, dtype: jax.random.permutation(_k(key), n).astype(dtype))
shuffle = Primitive("rng_shuffle", lambda key, x: jax.random.permutation(_k(key), x, axis=0))
gamma = Primitive("rng_gamma", _gamma)
beta = Primitive("rng_beta", _beta)
poisson = Primitive("rng_poisson", _poisson)
exponential = Primitive("rng_exponential", lambda key, *, shape, scale, dtype: jax.random.exponential(
    _k(key), shape, dtype) * scale)


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
