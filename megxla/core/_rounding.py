"""Keeping a float result apart from the arithmetic that reads it: eager's roundings inside one compiled program.

Inside a fused loop LLVM contracts a product and the sum reading it into one fused multiply-add -- one rounding
where separate kernels round twice (XLA:CPU always allows it; no option turns it off). Auto-jit's clusters keep each
op's results apart from the next op's arithmetic (``jit/_recording.py``), and an optimizer's update, one op of many
MegEngine steps, keeps its products apart from its sums (``optimizer/_group_update.py``).
"""
import functools

import jax
import numpy as np

__all__ = ["apart", "divide", "mean_of_sum", "BITS_OF"]

# a float type -> the integer type of its width
BITS_OF = {np.dtype(np.float64): np.int64, np.dtype(np.float32): np.int32, np.dtype(jax.numpy.float16): np.int16,
           np.dtype(jax.numpy.bfloat16): np.int16}


def apart(x, zero):
    """``x`` (a float array an op computed) unchanged, its bits ``xor``-ed with ``zero`` -- an argument of the
    program, 0 at every run, which XLA and LLVM cannot fold: no reader's float instruction fuses with the one that
    made ``x``. Inside a fused loop LLVM contracts a product and the sum reading it into one FMA (one rounding where
    eager's two kernels round twice: 23% of ``a * b + c``'s float32 values an ulp off); an IoU's ``a1 + a2 - inter``
    then broke ties eager keeps, and a detector's matcher (``iou == iou.max(1)``) chose other anchors (ICD's RetinaNet:
    its box loss 3.5% off eager's in half its steps). An optimization barrier does not stop it (XLA expands barriers
    before it fuses); an integer ``xor`` in the loop costs one instruction an element, no memory pass.

    Example:
        >>> import jax.numpy as jnp
        >>> apart(jnp.array([1.5, -0.0]), jnp.int32(0)).tolist()
        [1.5, -0.0]
    """
    t = BITS_OF.get(getattr(x, "dtype", None))
    if t is None:
        return x
    lax = jax.lax
    return lax.bitcast_convert_type(lax.bitcast_convert_type(x, t) ^ zero.astype(t), x.dtype)


def divide(x, y):
    """``x / y`` by IEEE division where ``y`` is broadcast (a scalar): XLA rewrites ``x / broadcast(s)`` into
    ``x * broadcast(1 / s)``, 1 ulp off in some elements, and inside a fused program ``x / (a / c)`` into
    ``(x * c) / a``. The barrier on the broadcast divisor keeps the division MegEngine's kernels compute.

    Example:
        >>> import jax.numpy as jnp
        >>> divide(jnp.array([1.0, 3.0]), jnp.float32(3.0)).tolist()
        [0.3333333432674408, 1.0]
    """
    shape = jax.numpy.broadcast_shapes(jax.numpy.shape(x), jax.numpy.shape(y))
    return x / jax.lax.optimization_barrier(jax.numpy.broadcast_to(y, shape))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def mean_of_sum(total, n):
    """``total / n`` (``n`` a count, a Python number) as MegEngine's mean computes it: an IEEE division (XLA would
    multiply by ``1 / n``: the mean of 7 integers 1 ulp off in 62% of rows); its gradient ``ct * (1 / n)``, as
    MegEngine's mean gradient multiplies.

    Example:
        >>> import jax.numpy as jnp
        >>> mean_of_sum(jnp.float32(-44.0), 7).tolist()
        -6.285714149475098
    """
    return divide(total, np.asarray(n, total.dtype))


def _mean_of_sum_fwd(total, n):
    return mean_of_sum(total, n), None


def _mean_of_sum_bwd(n, _, ct):
    return (ct * (np.asarray(1, ct.dtype) / np.asarray(n, ct.dtype)),)


mean_of_sum.defvjp(_mean_of_sum_fwd, _mean_of_sum_bwd)
