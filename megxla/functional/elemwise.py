"""Elementwise functions (``megengine.functional.elemwise``): each is one primitive through ``apply``."""
from ..core._elemwise_front import BINARY as _B, UNARY as _U, as_tensor as _as_tensor
from ..core._elemwise_front import quantized_params as _quantized_params, _scalar
from ..core._dispatch import apply as _apply
from ..core._tensor import Tensor
from ..core.dtypes import is_float
from ..core.ops import elemwise as _P
from ..core.ops.builtin import Elemwise  # noqa: F401  (MegEngine's functional.elemwise exposes the op descriptor)
import numpy as np

__all__ = [
    "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "clip", "cos", "cosh",
    "div", "equal", "exp", "expm1", "floor", "floor_div", "gelu", "greater", "greater_equal", "hsigmoid",
    "hswish", "isinf", "isnan", "left_shift", "less", "less_equal", "log", "log1p", "logaddexp", "logical_and",
    "logical_not", "logical_or", "logical_xor", "logsigmoid", "maximum", "minimum", "mod", "mul", "neg",
    "not_equal", "pow", "relu", "relu6", "right_shift", "round", "rsqrt", "sigmoid", "sign", "silu", "sin",
    "sinh", "softplus", "sqrt", "square", "sub", "tan", "tanh", "erf", "erfc", "erfinv", "trunc",
]


def _doc(fn, summary, example):
    binary = fn in _B.values()
    args = ("x: first operand: a Tensor or a Python scalar (a scalar takes the tensor's dtype where it fits).\n"
            "        y: second operand, broadcastable with ``x``.") if binary else "x: input tensor."
    fn.__doc__ = f"""{summary}

    Args:
        {args}

    Returns:
        a Tensor{" of the broadcast shape" if binary else " of the input's shape"}.

    Example:
        >>> import megxla.functional as F
        >>> {example}
    """
    return fn


add = _doc(_B["add"], "Elementwise ``x + y``.", "F.add(Tensor([1., 2.]), 1.0)")
sub = _doc(_B["sub"], "Elementwise ``x - y``.", "F.sub(Tensor([1., 2.]), 1.0)")
mul = _doc(_B["mul"], "Elementwise ``x * y``.", "F.mul(Tensor([1., 2.]), 2.0)")
div = _doc(_B["truediv"], "Elementwise true division ``x / y`` (integers give float32).", "F.div(Tensor([1, 2]), 2)")
floor_div = _doc(_B["floordiv"], "Elementwise ``floor(x / y)``.", "F.floor_div(Tensor([3, 4]), 2)")
mod = _doc(_B["mod"], "Elementwise remainder of ``x / y`` with the sign of ``x`` (C's ``fmod``, as MegEngine).",
           "F.mod(Tensor([5, -5]), 3)  # [2, -2]")
pow = _doc(_B["pow"], "Elementwise ``x ** y`` (integer operands compute in float32, as MegEngine).",
           "F.pow(Tensor([2., 3.]), 2)")
maximum = _doc(_B["maximum"], "Elementwise maximum.", "F.maximum(Tensor([1., 5.]), 3.0)")
minimum = _doc(_B["minimum"], "Elementwise minimum.", "F.minimum(Tensor([1., 5.]), 3.0)")
less = _doc(_B["lt"], "Elementwise ``x < y`` (bool).", "F.less(Tensor([1., 5.]), 3.0)")
less_equal = _doc(_B["le"], "Elementwise ``x <= y`` (bool).", "F.less_equal(Tensor([1., 5.]), 3.0)")
greater = _doc(_B["gt"], "Elementwise ``x > y`` (bool).", "F.greater(Tensor([1., 5.]), 3.0)")
greater_equal = _doc(_B["ge"], "Elementwise ``x >= y`` (bool).", "F.greater_equal(Tensor([1., 5.]), 3.0)")
equal = _doc(_B["eq"], "Elementwise ``x == y`` (bool).", "F.equal(Tensor([1., 5.]), 5.0)")
not_equal = _doc(_B["ne"], "Elementwise ``x != y`` (bool).", "F.not_equal(Tensor([1., 5.]), 5.0)")
logical_and = _doc(_B["logical_and"], "Elementwise logical and.", "F.logical_and(Tensor([True]), Tensor([False]))")
logical_or = _doc(_B["logical_or"], "Elementwise logical or.", "F.logical_or(Tensor([True]), Tensor([False]))")
logical_xor = _doc(_B["logical_xor"], "Elementwise logical xor.", "F.logical_xor(Tensor([True]), Tensor([True]))")
left_shift = _doc(_B["lshift"], "Elementwise ``x << y``.", "F.left_shift(Tensor([1, 2]), 1)")
right_shift = _doc(_B["rshift"], "Elementwise ``x >> y``.", "F.right_shift(Tensor([4, 8]), 1)")
atan2 = _doc(_B["atan2"], "Elementwise arctangent of ``y / x`` with quadrant.", "F.atan2(Tensor([1.]), Tensor([1.]))")
logaddexp = _doc(_B["logaddexp"], "Elementwise ``log(exp(x) + exp(y))``, computed stably.",
                 "F.logaddexp(Tensor([0.]), Tensor([0.]))")

_UNARY_DOCS = {
    "neg": "Elementwise ``-x``.", "abs": "Elementwise absolute value.", "exp": "Elementwise ``e**x``.",
    "expm1": "Elementwise ``exp(x) - 1``.", "log": "Elementwise natural logarithm.",
    "log1p": "Elementwise ``log(1 + x)``.", "sqrt": "Elementwise square root.", "square": "Elementwise ``x*x``.",
    "sin": "Elementwise sine.", "cos": "Elementwise cosine.", "tan": "Elementwise tangent.",
    "asin": "Elementwise arcsine.", "acos": "Elementwise arccosine.", "atan": "Elementwise arctangent.",
    "sinh": "Elementwise hyperbolic sine.", "cosh": "Elementwise hyperbolic cosine.",
    "tanh": "Elementwise hyperbolic tangent.", "asinh": "Elementwise inverse hyperbolic sine.",
    "acosh": "Elementwise inverse hyperbolic cosine.", "atanh": "Elementwise inverse hyperbolic tangent.",
    "floor": "Elementwise floor.", "ceil": "Elementwise ceiling.",
    "round": "Elementwise rounding, halves away from zero (as MegEngine).", "trunc": "Elementwise truncation.",
    "sign": "Elementwise sign.", "erf": "Elementwise error function.", "erfc": "Elementwise ``1 - erf(x)``.",
    "erfinv": "Elementwise inverse error function.", "logical_not": "Elementwise logical not.",
    "isnan": "Elementwise NaN test.", "isinf": "Elementwise infinity test.", "relu": "Elementwise ``max(x, 0)``.",
    "sigmoid": "Elementwise ``1 / (1 + exp(-x))``.", "gelu": "Elementwise GELU (exact, erf-based).",
    "silu": "Elementwise ``x * sigmoid(x)``.", "softplus": "Elementwise ``log(1 + exp(x))``, computed stably.",
    "logsigmoid": "Elementwise ``log(sigmoid(x))``, computed stably.", "relu6": "Elementwise ``min(max(x, 0), 6)``.",
    "hsigmoid": "Elementwise ``relu6(x + 3) / 6``.", "hswish": "Elementwise ``x * relu6(x + 3) / 6``.",
}
_UNARY_EXAMPLES = {  # examples that show their output (the others print nothing)
    "isnan": 'F.isnan(Tensor([0.5, float("nan")])).numpy()\n        array([False,  True])',
    "isinf": 'F.isinf(Tensor([0.5, float("inf")])).numpy()\n        array([False,  True])',
    "softplus": "F.softplus(Tensor([0.5, 1.0])).numpy()\n        array([0.974077 , 1.3132617], dtype=float32)",
    "logsigmoid": "F.logsigmoid(Tensor([0.5, 1.0])).numpy()\n        array([-0.474077 , -0.3132617], dtype=float32)",
}
for _name, _summary in _UNARY_DOCS.items():
    globals()[_name] = _doc(_U[_name], _summary, _UNARY_EXAMPLES.get(_name, f"F.{_name}(Tensor([0.5, 1.0]))"))
for _name in ("add", "sub", "mul", "div", "floor_div", "mod", "pow", "maximum", "minimum", "less", "less_equal",
              "greater", "greater_equal", "equal", "not_equal", "logical_and", "logical_or", "logical_xor",
              "left_shift", "right_shift", "atan2", "logaddexp"):
    globals()[_name].__name__ = globals()[_name].__qualname__ = _name


# MegEngine names the parameter of these ``inp`` (it matters for keyword calls).
def _unary_inp(name):
    fn = _U[name]

    def wrapper(inp):
        return fn(inp)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = fn.__doc__.replace("x: input tensor.", "inp: input tensor.")
    return wrapper


isnan, isinf, softplus, logsigmoid = (_unary_inp(n) for n in ("isnan", "isinf", "softplus", "logsigmoid"))


def atan2(y, x):
    """Elementwise arctangent of ``y / x``, in the quadrant of the point ``(x, y)``.

    Args:
        y: the ordinates: a Tensor or a Python scalar.
        x: the abscissae, broadcastable with ``y``.

    Returns:
        a float Tensor of the broadcast shape.

    Example:
        >>> F.atan2(Tensor([1., -1.]), Tensor([1., 1.])).numpy()
        array([ 0.7853982, -0.7853982], dtype=float32)
    """
    return _B["atan2"](y, x)


def rsqrt(x):
    """Elementwise ``1 / sqrt(x)``.

    Args:
        x: input tensor.

    Returns:
        a float Tensor of the input's shape.

    Example:
        >>> F.rsqrt(Tensor([4.0])).numpy()
        array([0.5], dtype=float32)
    """
    return _B["truediv"](1.0, _U["sqrt"](x))


def clip(x, lower=None, upper=None):
    """Clamp every element into ``[lower, upper]`` (either bound may be None, not both).

    Args:
        x: input tensor.
        lower: lower bound: a scalar, a broadcastable tensor, or None.
        upper: upper bound: a scalar, a broadcastable tensor, or None.

    Returns:
        a Tensor like ``x``.

    Example:
        >>> F.clip(Tensor([-1., 0.5, 2.]), 0, 1).numpy()
        array([0. , 0.5, 1. ], dtype=float32)
    """
    from ..core._dispatch import ConversionError, AssertedOpError
    if lower is None and upper is None:  # (MegEngine asserts it)
        raise AssertedOpError("clip: at least one of lower and upper must be given")
    x = _as_tensor(x, op="clip")
    if isinstance(lower, Tensor) or isinstance(upper, Tensor) or _quantized_params(x) is not None:
        # (a quantized x: MegEngine's maximum / minimum keep its quantized dtype; its CLIP kernel has no
        # quantized version and raises, but max-then-min is the same clamp)
        if lower is not None:
            x = _B["maximum"](x, lower)
        return x if upper is None else _B["minimum"](x, upper)
    for b in (lower, upper):
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float, np.integer, np.floating))):
            # (MegEngine raises a TypeError: "py_apply expects tensor as inputs"; bad_call_fuzz seed 5)
            raise ConversionError(f"clip: bounds must be numbers or tensors, got {b!r}")
    if x.dtype.kind == "b" or (x.dtype.kind in "iu" and any(isinstance(b, (float, np.floating)) for b in (lower, upper))):
        # MegEngine: a float bound promotes an integer tensor to float32 (clip(int, 0.5, 2.5) is float), and a
        # bool tensor is float32 with any bound (bool and int are different categories).
        x = _apply(_P.astype.bind(dtype="float32"), x)
    cast = float if is_float(x.dtype) else int
    lower = None if lower is None else cast(lower)
    upper = None if upper is None else cast(upper)
    if x.dtype.kind in "iu":  # a bound past the dtype's range clips as the range's end (clip(uint8, -1, 2) is
        # clip(uint8, 0, 2)), where the kernel's conversion of -1 into uint8 raised NumPy's OverflowError
        info = np.iinfo(x.dtype)
        lower = None if lower is None else min(max(lower, int(info.min)), int(info.max))
        upper = None if upper is None else min(max(upper, int(info.min)), int(info.max))
    # (the bounds as inputs, the cached 0-d tensors of these numbers: one kernel for every value -- core/ops)
    given = ("l" if lower is not None else "") + ("u" if upper is not None else "")
    bounds = [_scalar(b, x.dtype) for b in (lower, upper) if b is not None]
    return _apply(_P.clip.bind(given=given), x, *bounds)


def _elwise(*args, mode):
    """The elementwise op ``mode`` (an ``Elemwise.Mode`` name) on ``args`` -- MegEngine's internal helper, which
    code beside its functional API imports (its quantization tests do).

    Example:
        >>> _elwise(Tensor([-1.0, 2.0]), Tensor([1.0, 1.0]), mode="fuse_add_relu").numpy()
        array([0., 3.], dtype=float32)
    """
    (out,) = Elemwise(mode=mode)._apply(tuple(_as_tensor(a) for a in args))
    return out


def _elemwise_multi_type(*args, mode, **kwargs):
    """The elementwise op ``mode`` with its output's ``dtype`` given -- MegEngine's internal helper: a quantized
    mode (``"qadd"``, ``"qabs"``...) computes on the real values of quantized inputs and quantizes to ``dtype``.

    Example:
        >>> from megxla.core.tensor import dtype
        >>> q = Tensor([1.0, -2.0]).astype(dtype.qint8(0.5))
        >>> _elemwise_multi_type(q, q, mode="qadd", dtype=dtype.qint8(1.0)).astype("float32").numpy()
        array([ 2., -4.], dtype=float32)
    """
    from ..core.ops.builtin import ElemwiseMultiType
    (out,) = ElemwiseMultiType(mode=mode, **kwargs)._apply(tuple(_as_tensor(a) for a in args))
    return out
