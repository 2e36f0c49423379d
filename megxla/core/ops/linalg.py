"""Matrix products and linear algebra."""
import jax.numpy as jnp

from .._op import Primitive
from .elemwise import promote_dtype


def _promoted(a, b):
    # MegEngine's MatrixMul promotes mixed inputs as its elementwise ops do (int32 @ float16 is float32).
    if a.dtype != b.dtype:
        dt = promote_dtype(a.dtype, b.dtype)
        a, b = a.astype(dt), b.astype(dt)
    return a, b


def _matmul(a, b, *, transpose_a, transpose_b):
    a, b = _promoted(a, b)
    if transpose_a:
        a = jnp.swapaxes(a, -1, -2) if a.ndim > 1 else a
    if transpose_b:
        b = jnp.swapaxes(b, -1, -2) if b.ndim > 1 else b
    return jnp.matmul(a, b)


def _linear(x, w, *bias):
    # NOTE: one fused primitive (x @ w.T + b) rather than matmul + add: halves eager dispatches of Linear.
    y = jnp.matmul(x, w.T)
    return y + bias[0] if bias else y


matmul = Primitive("matmul", _matmul)
linear = Primitive("linear", _linear)
dot = Primitive("dot", lambda a, b: jnp.dot(*_promoted(a.reshape(-1), b.reshape(-1))))
# (LAPACK on the CPU: no float16 / bfloat16 LU or SVD, which JAX reports when it lowers them, not when it traces)
matinv = Primitive("matinv", jnp.linalg.inv, lowering_may_reject=True)
svd = Primitive("svd", lambda x, *, full_matrices: tuple(jnp.linalg.svd(x, full_matrices=full_matrices)),
                multiple_results=True, lowering_may_reject=True)
diag = Primitive("diag", lambda x, *, k: jnp.diag(x, k))
cross = Primitive("cross", lambda a, b, *, axisa, axisb, axisc:
                  jnp.cross(*_promoted(a, b), axisa=axisa, axisb=axisb, axisc=axisc))


def _einsum(*xs, equation):
    # (mixed inputs promoted as MegEngine's elementwise ops do)
    dt = xs[0].dtype
    for x in xs[1:]:
        dt = promote_dtype(dt, x.dtype)
    return jnp.einsum(equation, *[x.astype(dt) for x in xs])


einsum = Primitive("einsum", _einsum)
