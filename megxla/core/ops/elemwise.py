"""Elementwise primitives: one JAX function each, MegEngine's semantics where they differ from NumPy's."""
import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np

from .._op import Primitive
from .._rounding import divide


def _round_half_away(x):
    # NOTE: MegEngine rounds half away from zero (std::round); jnp.round rounds half to even. (Not
    # floor(|x| + 0.5): that sum rounds up -- 0.49999997 gave 1, float32 8388609 gave 8388610.)
    if jnp.issubdtype(x.dtype, jnp.floating):
        return jax.lax.round(x, jax.lax.RoundingMethod.AWAY_FROM_ZERO)
    return x


def _floor_div(x, y):
    if jnp.issubdtype(jnp.result_type(x, y), jnp.integer):
        return jnp.floor_divide(x, y)
    return jnp.floor(x / y)


def _mod(x, y):
    # NOTE: MegEngine's integer MOD is Python's (``(y + x % y) % y``: the sign of the divisor, -7 % 3 == 2);
    # its float MOD is C's ``fmodf`` (the sign of the dividend).
    if jnp.issubdtype(jnp.result_type(x, y), jnp.inexact):
        return jnp.fmod(x, y)
    return jnp.remainder(x, y)


def promote_dtype(a, b):
    """MegEngine's elementwise promotion (``mgb::dtype_promotion``) of two input dtypes.

    Equal dtypes stay; float16 counts as float32 once the dtypes differ; different categories (bool / integer /
    float) give float32 (so bool + int32 and int32 + float16 are float32); otherwise the larger size wins.
    MegEngine raises for signed with unsigned integers; the result there is unambiguous when the signed type
    is wider (uint8 + int32 -> int32), which is what megxla returns (docs/differences.md).
    """
    a, b = jnp.dtype(a), jnp.dtype(b)
    if a == b:
        return a
    a = jnp.dtype(jnp.float32) if a == jnp.float16 else a
    b = jnp.dtype(jnp.float32) if b == jnp.float16 else b
    cat = {"b": "b", "i": "i", "u": "i", "f": "f", "V": "f", "c": "c"}  # bfloat16's kind is "V"
    ca, cb = cat.get(a.kind, a.kind), cat.get(b.kind, b.kind)
    if ca != cb:
        if "c" in (ca, cb):
            return jnp.result_type(a, b)
        return jnp.dtype(jnp.float32)
    if a.kind != b.kind or a.itemsize == b.itemsize:
        return jnp.result_type(a, b)
    return a if a.itemsize > b.itemsize else b


def broadcast_wide(x, shape):
    """``x`` broadcast to ``shape``; a float16/bfloat16 ``x`` through float32 (the same values: the round trip is
    exact), so that its gradient -- the sum over the broadcast axes -- accumulates in float32.

    NOTE: JAX transposes a broadcast into a sum in the broadcast value's type, which XLA:CPU keeps: a float16 bias's
    gradient summed over a batch's pixels in float16 was ~3 ulps off the exact sum, and a compiled step's fused
    sum took another order than eager's kernel (an autocast ConvNet's conv bias gradients 1-2 ulps apart between
    eager and auto-jit, 6 of 8 channels; ``sum`` itself accumulates in float32, see ``reduction.low_precision``).

    Example:
        >>> broadcast_wide(jnp.ones((2, 1), jnp.float16), (2, 3)).dtype
        dtype('float16')
    """
    if x.dtype in (jnp.float16, jnp.bfloat16) and tuple(x.shape) != tuple(shape):
        return jnp.broadcast_to(x.astype(jnp.float32), shape).astype(x.dtype)
    return x


def gather_wide(take, x):
    """``take(x)`` for a ``take`` that only picks elements of ``x`` (a gather: indexing by tensors, an embedding's
    rows); a float16/bfloat16 ``x`` read through float32 (the same values picked: the round trip is exact), so that
    its gradient -- a scatter-add, summing the output's gradients of every repeat of an index -- accumulates in
    float32.

    NOTE: JAX transposes a gather into a scatter-add in the gathered value's type: an embedding's float16 row picked
    1,024 times out of 8 summed its gradient in float16, 6-8 ulps off the exact sum (bfloat16: ~3 ulps); now within
    half an ulp. (XLA fuses the convert into the gather: only the picked elements are widened.)

    Example:
        >>> gather_wide(lambda t: t[jnp.array([0, 0])], jnp.ones((2, 3), jnp.float16)).dtype
        dtype('float16')
    """
    if x.dtype in (jnp.float16, jnp.bfloat16):
        return take(x.astype(jnp.float32)).astype(x.dtype)
    return take(x)


def _numbers_of(x, dtype):
    """``x`` cast to ``dtype``; a bool mask cast to floats behind an optimization barrier. (XLA's algebraic simplifier
    turns ``convert(mask) * y`` into ``select(mask, y, 0)``, and ``convert(mask) / y`` likewise: MegEngine's False
    is the number 0, so ``False * inf`` is nan and ``False * -3.0`` is -0.0, where the select gave 0.0.)"""
    if x.dtype == jnp.bool_ and jnp.issubdtype(dtype, jnp.inexact):
        return jax.lax.optimization_barrier(x.astype(dtype))
    return x.astype(dtype)


def _promoting(impl):
    """``impl`` with its two inputs cast to MegEngine's promoted dtype first (decided at trace time: free); float16
    and bfloat16 inputs broadcast through float32 (``broadcast_wide``: their gradients sum in float32)."""

    def fn(x, y):
        dt = promote_dtype(x.dtype, y.dtype)
        if x.dtype != dt:
            x = _numbers_of(x, dt)
        if y.dtype != dt:
            y = _numbers_of(y, dt)
        if dt in (jnp.float16, jnp.bfloat16) and x.shape != y.shape:
            shape = jnp.broadcast_shapes(x.shape, y.shape)
            x, y = broadcast_wide(x, shape), broadcast_wide(y, shape)
        return impl(x, y)

    fn.__name__ = getattr(impl, "__name__", "elemwise")
    return fn


def _pow(x, y):
    # MegEngine computes POW in float32 for integer operands (``F.pow(Tensor([2]), 2)`` is float32).
    if not jnp.issubdtype(jnp.result_type(x, y), jnp.inexact):
        x, y = x.astype(jnp.float32), y.astype(jnp.float32)
    return jnp.power(x, y)


def _complex(re, im):
    re, im = jnp.broadcast_arrays(re, im)
    dt = jnp.result_type(re, im, jnp.float32)
    return jax.lax.complex(re.astype(dt), im.astype(dt))


def _relu(x):
    # MegEngine's RELU is a SIMD max(x, 0), which returns 0 for NaN: relu(nan) == 0 (jnp.maximum gives nan).
    return jnp.where(x > 0, x, jnp.zeros((), x.dtype))


def _sign(x):
    # MegEngine's SIGN is ``(x > 0) - (x < 0)``: sign(nan) == 0, sign(-0.0) == +0.0 (jnp.sign keeps -0.0)
    if jnp.issubdtype(x.dtype, jnp.inexact) and not jnp.issubdtype(x.dtype, jnp.complexfloating):
        return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)
    return jnp.sign(x)


def _maximum(x, y):
    # MegEngine's MAX is ``x < y ? y : x`` and MIN ``x < y ? x : y`` (its kernels' comparisons): with a NaN
    # operand maximum(nan, 1) is nan but maximum(1, nan) is 1 (minimum: the other way round), and
    # minimum(0.0, -0.0) is -0.0. Their gradients are ``x >= y ? g : 0`` for x and ``y > x ? g : 0`` for y (MIN:
    # ``x <= y``, ``y < x``): on a tie the whole gradient goes to ``x`` (clip(x, 0, 1) passes it at 0 and 1), and
    # next to a NaN to neither operand (printed by MegEngine 1.13.0).
    if not jnp.issubdtype(jnp.result_type(x, y), jnp.floating):
        return jnp.where(x < y, y, x)
    return _max_select(x, y)


def _minimum(x, y):
    if not jnp.issubdtype(jnp.result_type(x, y), jnp.floating):
        return jnp.where(x < y, x, y)
    return _min_select(x, y)


@jax.custom_jvp
def _max_select(x, y):
    return jnp.where(x < y, y, x)


@_max_select.defjvp
def _max_select_jvp(primals, tangents):
    (x, y), (dx, dy) = primals, tangents
    zero = jnp.zeros((), dx.dtype)
    return _max_select(x, y), jnp.where(x >= y, dx, zero) + jnp.where(y > x, dy, zero)


@jax.custom_jvp
def _min_select(x, y):
    return jnp.where(x < y, x, y)


@_min_select.defjvp
def _min_select_jvp(primals, tangents):
    (x, y), (dx, dy) = primals, tangents
    zero = jnp.zeros((), dx.dtype)
    return _min_select(x, y), jnp.where(x <= y, dx, zero) + jnp.where(y < x, dy, zero)


def _abs(x):
    # MegEngine's ABS gradient is -1 at 0 (``x > 0 ? g : -g``); jnp.abs's is +1.
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return jnp.abs(x)
    return jnp.where(x > 0, x, jnp.zeros((), x.dtype) - x)  # 0 - x: abs(0.0) is 0.0 (-x would give -0.0)


def _atan(x):
    # MegEngine's atan is ATAN2(x, float32 one): a float16 input gives float32.
    return jnp.arctan(x.astype(jnp.float32) if x.dtype == jnp.float16 else x)


def _relu6(x):
    # MegEngine: relu6(nan) == 6 and the gradient is 0 at 0 and at 6 (only 0 < x < 6 passes it).
    return jnp.where(x < 6, jnp.where(x > 0, x, jnp.zeros((), x.dtype)), jnp.asarray(6, x.dtype))


def _inexact(x):
    return x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.result_type(x, 1.0))


def _hsigmoid(x):
    # MegEngine: hsigmoid(nan) is nan and the gradient is 0 at -3 and 3. (An integer input in float32 first:
    # uint8's -3 is 253.)
    x = _inexact(x)
    # ((x + 3) / 6 by IEEE division, as MegEngine's kernel: XLA would multiply by 1 / 6)
    third = divide(x + 3, jnp.asarray(6, x.dtype))
    return jnp.where(x <= -3, 0.0, jnp.where(x >= 3, 1.0, third)).astype(jnp.result_type(x, 1.0))


def _hswish(x):
    return _hswish_kernel(_inexact(x))


@jax.custom_jvp
def _hswish_kernel(x):
    """MegEngine's H_SWISH kernel, ``x * min(max(x + 3, 0), 6) * (1 / 6)`` (``x * (x + 3) / 6`` rounded 4.7% of
    float32 values otherwise); -inf gives NaN, NaN gives NaN, as there."""
    clamped = jnp.minimum(jnp.maximum(x + 3, jnp.zeros((), x.dtype)), jnp.asarray(6, x.dtype))
    return x * clamped * jnp.asarray(1 / 6, x.dtype)


@_hswish_kernel.defjvp
def _hswish_kernel_jvp(primals, tangents):
    # MegEngine's H_SWISH_GRAD: 0 below -3, the cotangent itself above 3, ``(2x + 3) / 6 * dy`` (an IEEE division)
    # on [-3, 3] -- the vjp of the kernel above rounded 40% of gradients otherwise, and was NaN at -inf
    # (the slope read only inside [-3, 3], NaN included: at -inf it is -inf, which the transposed where's zero
    # cotangent would make a NaN gradient)
    (x,), (t,) = primals, tangents
    inside = jnp.where((x < -3) | (x > 3), jnp.zeros((), x.dtype), x)
    slope = divide(2 * inside + 3, jnp.asarray(6, x.dtype))
    zero = jnp.zeros((), t.dtype)
    return _hswish_kernel(x), jnp.where(x < -3, zero, jnp.where(x > 3, t, slope * t))


def _gelu(x):
    # MegEngine's GELU: x * 0.5 * (1 + erf(x / sqrt(2))) (jax.nn.gelu's rounding: 53% of values an ulp or more from
    # MegEngine's; 39% so, the rest erf's own last bit -- 35% with an IEEE division by sqrt(2), whose barrier made a
    # rematerialised step's gradient differ from the plain one's by 9e-5 in a cancelling element)
    x = _inexact(x)
    return x * 0.5 * (1 + jsp.erf(x / np.asarray(np.sqrt(2.0), x.dtype)))


def _rounded(product, operand):
    """``product`` as computed, kept out of a fused multiply-add with the sum that reads it (LLVM contracts
    ``a * b + c`` inside one kernel; MegEngine's kernels round twice): a select on ``operand`` being NaN, which XLA
    cannot fold. ``operand`` is a primal whose NaN makes the product NaN (its negation then, the same NaN); the
    product may be a tangent's (a select between it and its negation on a primal's condition is linear, so it
    transposes). An optimization barrier or a bit cast does not stop the contraction; ``jit/_recording``'s zero
    does between ops, but an op's own kernel has none."""
    return jnp.where(operand != operand, -product, product)


@jax.custom_jvp
def _silu(x):
    """MegEngine's SILU: ``x / (1 + exp(-x))``, an IEEE division (``x * sigmoid(x)`` rounds otherwise: 26% of values
    an ulp or more from MegEngine's, 4% so, from exp's last bit); its derivative ``s * (1 + x * (1 - s))`` of the
    sigmoid ``s``, finite where ``exp(-x)`` overflows."""
    return divide(x, 1 + jnp.exp(-x))


@_silu.defjvp
def _silu_jvp(primals, tangents):
    # MegEngine's SILU_GRAD, ``dy * s * (1 + x * (1 - s))`` with ``s = 1 / (1 + exp(-x))``, written so that its
    # transpose multiplies in that order (a jvp's ``t * a * b`` transposes to ``ct * b * a``): 54% of float32
    # gradients equal MegEngine's before, 97% now (the rest: XLA's exp against glibc's)
    (x,), (t,) = primals, tangents
    s = divide(jnp.ones((), x.dtype), 1 + jnp.exp(-x))
    return _silu(x), (t * (1 + _rounded(x * (1 - s), x))) * s


def _softplus_grad(x, t):
    """MegEngine's SOFTPLUS_GRAD of ``x`` (``-x`` for LOGSIGMOID): ``(-dy * e) / (1 + e)`` with ``e = exp(-|x|)``,
    negated for ``x <= 0``, plus ``dy`` where ``x > 0`` -- linear in ``t`` and written for its transpose to compute
    in that order (JAX's own gradients equalled 30% of MegEngine's float32 values, these 96%)."""
    e = jnp.exp(-jnp.abs(x))
    logg = -_rounded(divide(t, 1 + e) * e, x)
    zero = jnp.zeros((), t.dtype)
    return jnp.where(x > 0, logg, -logg) + jnp.where(x > 0, t, zero)


@jax.custom_jvp
def _softplus(x):
    return jax.nn.softplus(x)


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _softplus(x), _softplus_grad(x, t)


@jax.custom_jvp
def _logsigmoid(x):
    return jax.nn.log_sigmoid(x)


@_logsigmoid.defjvp
def _logsigmoid_jvp(primals, tangents):
    (x,), (t,) = primals, tangents  # (MegEngine: LOGSIGMOID's gradient is SOFTPLUS_GRAD of -x)
    return _logsigmoid(x), _softplus_grad(-x, t)


@jax.custom_jvp
def _expm1(x):
    return jnp.expm1(x)


@_expm1.defjvp
def _expm1_jvp(primals, tangents):
    # MegEngine's EXPM1 gradient ``og * exp(x)`` (JAX's ``g * (expm1(x) + 1)`` rounded 42% of float32 values otherwise)
    (x,), (t,) = primals, tangents
    return _expm1(x), t * jnp.exp(x)


@jax.custom_jvp
def _sqrt(x):
    return jnp.sqrt(x)


@_sqrt.defjvp
def _sqrt_jvp(primals, tangents):
    # MegEngine's SQRT gradient, ``og / sqrt(x) / 2``. JAX's ``g * (0.5 / sqrt(x))`` -- which XLA rewrites into a
    # product with ``rsqrt`` -- rounded 41% of float32 gradients otherwise; the barrier keeps the division a division
    (x,), (t,) = primals, tangents
    y = jnp.sqrt(x)
    return y, t / jax.lax.optimization_barrier(y) / 2


UNARY_IMPLS = {
    "neg": jnp.negative, "pos": lambda x: x, "abs": _abs, "exp": jnp.exp, "expm1": _expm1,
    "log": jnp.log, "log1p": jnp.log1p, "sqrt": _sqrt, "square": jnp.square,
    "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan, "asin": jnp.arcsin, "acos": jnp.arccos, "atan": _atan,
    "sinh": jnp.sinh, "cosh": jnp.cosh, "tanh": jnp.tanh, "asinh": jnp.arcsinh, "acosh": jnp.arccosh,
    "atanh": jnp.arctanh, "floor": jnp.floor, "ceil": jnp.ceil, "round": _round_half_away, "trunc": jnp.trunc,
    "sign": _sign, "erf": jsp.erf, "erfc": jsp.erfc, "erfinv": jsp.erfinv,
    "logical_not": jnp.logical_not, "invert": jnp.invert, "isnan": jnp.isnan, "isinf": jnp.isinf,
    # (sigmoid / silu of an integer tensor: the float32 result, as gelu's; JAX's logistic takes floats only)
    "relu": _relu, "sigmoid": lambda x: jax.nn.sigmoid(_inexact(x)),
    "gelu": _gelu, "silu": lambda x: _silu(_inexact(x)), "softplus": _softplus,
    "logsigmoid": lambda x: _logsigmoid(_inexact(x)),
    "relu6": _relu6, "hsigmoid": _hsigmoid, "hswish": _hswish,
    "real": jnp.real, "imag": jnp.imag, "conj": jnp.conj,
}

def _f32_inside(impl):
    """``impl`` computed in float32 for a float16/bfloat16 input and rounded once to it, as MegEngine's elemwise
    kernels compute each mode (float16 ``sigmoid(1.5)`` is 0.81738 there; JAX's float16 steps gave 0.81787)."""

    def fn(x):
        if x.dtype == jnp.float16 or x.dtype == jnp.bfloat16:
            return impl(x.astype(jnp.float32)).astype(x.dtype)
        return impl(x)

    fn.__name__ = getattr(impl, "__name__", "elemwise")
    return fn


# (the formulas and transcendental functions: a select, a sign change or one exact product rounds alike either way)
_F32_INSIDE = ("exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "asin", "acos", "sinh", "cosh", "tanh",
               "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "sigmoid", "gelu", "silu", "softplus",
               "logsigmoid", "hsigmoid", "hswish")
UNARY_IMPLS.update({name: _f32_inside(UNARY_IMPLS[name]) for name in _F32_INSIDE})


def _true_divide(x, y):
    # XLA's CPU float16 division is off by up to 2 ulp (float16 -1.5 / 2.5 gives -0.5996); MegEngine (and NumPy)
    # round the exact quotient (-0.6001): divide in float32, round once
    if x.dtype in (jnp.float16, jnp.bfloat16) and x.dtype == y.dtype:
        return _true_divide(x.astype(jnp.float32), y.astype(jnp.float32)).astype(x.dtype)
    dt = jnp.result_type(x, y)
    if jnp.issubdtype(dt, jnp.floating) and jnp.shape(y) != jnp.broadcast_shapes(jnp.shape(x), jnp.shape(y)):
        # a broadcast divisor (a scalar): XLA would multiply by its reciprocal -- 42% of ``x / 1.4142135``'s float32
        # values an ulp off the quotient, which MegEngine's TRUE_DIV (and NumPy) give
        return divide(jnp.asarray(x, dt), jnp.asarray(y, dt))
    return jnp.true_divide(x, y)


BINARY_IMPLS = {
    "add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "truediv": _true_divide,
    "floordiv": _floor_div, "mod": _mod, "pow": _pow, "maximum": _maximum,
    "minimum": _minimum, "lt": jnp.less, "le": jnp.less_equal, "gt": jnp.greater, "ge": jnp.greater_equal,
    "eq": jnp.equal, "ne": jnp.not_equal, "logical_and": jnp.logical_and, "logical_or": jnp.logical_or,
    "logical_xor": jnp.logical_xor, "and": jnp.bitwise_and, "or": jnp.bitwise_or, "xor": jnp.bitwise_xor,
    "lshift": jnp.left_shift, "rshift": jnp.right_shift, "atan2": jnp.arctan2, "logaddexp": jnp.logaddexp,
    "complex": _complex,
}

# Arithmetic and comparisons promote their inputs as MegEngine's Elemwise does; bitwise/logical ops keep JAX's.
_PROMOTING = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "maximum", "minimum", "lt", "le", "gt",
              "ge", "eq", "ne", "atan2", "logaddexp")
BINARY_IMPLS.update({name: _promoting(BINARY_IMPLS[name]) for name in _PROMOTING})
UNARY = {name: Primitive(name, impl) for name, impl in UNARY_IMPLS.items()}
# Keys are the Tensor operator names (``__lt__`` -> "lt"); primitives carry the functional names, which is
# what errors and traces show.
_PUBLIC = {"truediv": "div", "floordiv": "floor_div", "lt": "less", "le": "less_equal", "gt": "greater",
           "ge": "greater_equal", "eq": "equal", "ne": "not_equal", "lshift": "left_shift", "rshift": "right_shift",
           "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor"}
BINARY = {name: Primitive(_PUBLIC.get(name, name), impl) for name, impl in BINARY_IMPLS.items()}


@jax.custom_jvp
def _prelu_select(x, w):
    # NOTE: MegEngine's PRELU is ``x > 0 ? x : x * w`` -- at x == 0 the value is ``0 * w``: nan for a nan slope,
    # -0.0 for a negative one -- and its gradient ``x >= 0 ? 1 : w`` for x (1 at 0), ``x > 0 ? 0 : x`` for w. Left
    # to ``jnp.where``'s own gradient, x's would be the slope at 0 and nan everywhere for a nan slope (the branch
    # not taken, 0 * nan, still multiplied in): hence the rule written out.
    return jnp.where(x > 0, x, x * w)


@_prelu_select.defjvp
def _prelu_select_jvp(primals, tangents):
    x, w = primals
    dx, dw = tangents
    # (the masks multiply the tangents, not select them: a select's transpose multiplies w into its zero branch)
    return _prelu_select(x, w), dx * jnp.where(x >= 0, 1, w) + dw * jnp.where(x > 0, 0, x)


def _prelu_rule(x, w):
    if x.dtype == jnp.bool_:  # (XLA folds ``convert(x) * w`` into a select with +0.0: MegEngine's False is ``0 * w``)
        return jnp.where(x, jnp.ones((), w.dtype), w * jnp.zeros((), w.dtype))
    if not jnp.issubdtype(x.dtype, jnp.floating):  # (an integer x, a float slope: nothing to differentiate)
        return jnp.where(x > 0, x, x * w)
    return _prelu_select(x, w)


def _leaky_relu(x, *slope, negative_slope=None):
    # The slope is an input (the 0-d tensor of that Python number, as ``x * 0.5``'s 0.5): one kernel for every slope
    # (``negative_slope``: the parameter form of earlier recordings).
    w = slope[0] if slope else negative_slope
    if jnp.issubdtype(x.dtype, jnp.floating):
        w = jnp.asarray(w, x.dtype)
    return _prelu_rule(x, w)


def _prelu(x, w):
    return _prelu_rule(x, broadcast_wide(w, x.shape))  # (float16: w's gradient sums in float32)


def _clip(x, *bounds, given=None, lower=None, upper=None):
    # MegEngine's CLIP with both bounds is ``x <= lower ? lower : (x <= upper ? x : upper)`` (with lower > upper:
    # clip([0, 3, 10], 5, 2) == [5, 5, 2], nan gives upper) and its gradient passes where lower <= x <= upper (a
    # value on a bound keeps it: jnp.clip's vjp halves it there, which clip(relu(x), 0, 1) hits at every exact
    # zero). One bound: its MAX or MIN select.
    # The bounds are inputs, 0-d in ``x``'s dtype (``given``: "lu", "l" or "u", which are), as MegEngine's CLIP
    # takes them: one kernel for every value. As parameters (``lower``, ``upper``: earlier recordings' form), a
    # bound that changes every step (PPO's annealed clip range) compiled a kernel and its gradient's a step.
    if given is not None:
        lower = bounds[0] if "l" in given else None
        upper = bounds[-1] if "u" in given else None
    if lower is not None and upper is not None:
        lo, hi = jnp.asarray(lower, x.dtype), jnp.asarray(upper, x.dtype)
        if jnp.issubdtype(x.dtype, jnp.floating):
            return _clip_select(x, lo, hi)
        return jnp.where((x >= lo) & (x <= hi), x, jnp.where(x <= lo, lo, hi))
    if lower is not None:
        x = _maximum(x, jnp.asarray(lower, x.dtype))
    return x if upper is None else _minimum(x, jnp.asarray(upper, x.dtype))


@jax.custom_jvp
def _clip_select(x, lo, hi):
    # (the value MegEngine's: at x == lo the bound, so clip(-0.0, 0.0, 1.0) is 0.0 and clip(0.0, -0.0, 0.0) -0.0)
    return jnp.where(x <= lo, lo, jnp.where(x <= hi, x, hi))


@_clip_select.defjvp
def _clip_select_jvp(primals, tangents):
    (x, lo, hi), (dx, dlo, dhi) = primals, tangents
    inside, zero = (x >= lo) & (x <= hi), jnp.zeros((), dx.dtype)
    below = ~inside & (x <= lo)
    return _clip_select(x, lo, hi), (jnp.where(inside, dx, zero) + jnp.where(below, dlo, zero)
                                     + jnp.where(~inside & ~below, dhi, zero))


def _where_dtype(a, b):
    """The dtype of MegEngine 1.13's ``where`` of ``a`` and ``b`` values: not its elementwise promotion -- a float
    operand's type wins over an integer or bool one (float16 with int32 is float16, where ``+`` gives float32), an
    integer's over bool (int8 with bool is int8); two of a kind promote as ever."""
    a, b = jnp.dtype(a), jnp.dtype(b)
    ka, kb = a.kind, b.kind
    if ka != kb and "c" not in (ka, kb):
        if ka == "f" or kb == "f":
            return a if ka == "f" else b
        if ka == "b" or kb == "b":
            return b if ka == "b" else a
    return promote_dtype(a, b)


def _where(mask, x, y):
    dt = _where_dtype(x.dtype, y.dtype)
    shape = jnp.broadcast_shapes(mask.shape, x.shape, y.shape)  # (float16: a broadcast value's grad sums in float32)
    return jnp.where(mask, broadcast_wide(x.astype(dt), shape), broadcast_wide(y.astype(dt), shape))


def cast(x, dtype):
    """``x`` converted to ``dtype`` as MegEngine's (C's) conversion: a float to an integer type narrower than 32
    bits goes through int32 and wraps (``300.7 -> int8 44``, ``-1.5 -> uint8 255``) where XLA would saturate."""
    dtype = jnp.dtype(dtype)
    if dtype.kind in "iu" and dtype.itemsize < 4 and jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.int32)
    return x.astype(dtype)


def _astype(x, *, dtype):
    return cast(x, dtype)


def _prelu_of(x, w, _promoted=_promoting(_prelu)):
    if x.dtype == jnp.bool_ and jnp.issubdtype(w.dtype, jnp.floating):  # (not cast: ``_prelu_rule``'s bool branch)
        return _prelu_rule(x, w)
    return _promoted(x, w)


leaky_relu = Primitive("leaky_relu", _leaky_relu)
prelu = Primitive("prelu", _prelu_of)  # MegEngine's PRELU is an Elemwise mode: it promotes as one
clip = Primitive("clip", _clip)
where = Primitive("where", _where)
astype = Primitive("astype", _astype)

# Ops MegEngine gives no gradient (not a zero one): a parameter whose only path to the loss goes through them
# keeps ``.grad`` None, and optimizers skip it. name -> the input positions without a gradient (None: all).
NON_DIFFERENTIABLE = {"floor": None, "ceil": None, "round": None, "trunc": None, "sign": None,
                      "floor_div": None, "mod": (1,), "full_like": None}
# Outputs without a gradient: a value computed from them is not connected to the inputs (MegEngine's BatchNorm
# returns its updated running statistics detached). name -> output positions.
NON_DIFFERENTIABLE_OUTPUTS = {"batch_norm_train_update": (1, 2)}
