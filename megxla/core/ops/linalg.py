"""Matrix products and linear algebra."""
import jax.numpy as jnp

from .._op import Primitive
from .elemwise import broadcast_wide, promote_dtype


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
    return y + broadcast_wide(bias[0], y.shape) if bias else y  # (float16: the bias's gradient sums in float32)


matmul = Primitive("matmul", _matmul)
linear = Primitive("linear", _linear)
dot = Primitive("dot", lambda a, b: jnp.dot(*_promoted(a.reshape(-1), b.reshape(-1))))
# (LAPACK on the CPU: no float16 / bfloat16 LU or SVD, which JAX reports when it lowers them, not when it traces)
matinv = Primitive("matinv", jnp.linalg.inv, lowering_may_reject=True)
svd = Primitive("svd", lambda x, *, full_matrices: tuple(jnp.linalg.svd(x, full_matrices=full_matrices)),
                multiple_results=True, lowering_may_reject=True)
diag = Primitive("diag", lambda x, *, k: jnp.diag(x, k))


def _cross(a, b, *, axisa, axisb, axisc):
    a, b = _promoted(a, b)
    a, b = jnp.moveaxis(a, axisa, -1), jnp.moveaxis(b, axisb, -1)
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        # two 2-vectors: the z component alone (what jnp.cross and NumPy 1.x's np.cross give)
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    # JAX 0.11 deprecates 2-vectors in jnp.cross (a DeprecationWarning at each trace; JAX 0.12 removes them), so a
    # 2-vector gets its third component of 0 here, the zeros jnp.cross itself put there (the same products)
    a, b = (jnp.concatenate([x, jnp.zeros_like(x[..., :1])], -1) if x.shape[-1] == 2 else x for x in (a, b))
    return jnp.cross(a, b, axisc=axisc)


cross = Primitive("cross", _cross)


def _einsum(*xs, equation):
    # (mixed inputs promoted as MegEngine's elementwise ops do)
    dt = xs[0].dtype
    for x in xs[1:]:
        dt = promote_dtype(dt, x.dtype)
    return jnp.einsum(equation, *[x.astype(dt) for x in xs])


einsum = Primitive("einsum", _einsum)
