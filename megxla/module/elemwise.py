"""Elementwise operations selected by MegEngine's mode name, as a module (so they can be quantized)."""
from .. import functional as F
from ..core.tensor.array_method import _elwise
from ._errors import LayerModeError
from .module import Module

__all__ = ["Elemwise"]


def _where_zero(mask, x):
    return F.where(mask, x, F.zeros_like(x))


def _cmp(mode):
    # MegEngine's module applies the Elemwise descriptor: a comparison gives 1 / 0 in the operands' dtype, not bool
    return lambda x, y: _elwise(x, y, mode=mode)


# MegEngine's ``Elemwise.Mode`` names (upper case) -> the functional computation.
_MODES = {
    # unary
    "RELU": F.relu, "ABS": F.abs, "ACOS": F.acos, "ASIN": F.asin, "CEIL": F.ceil, "COS": F.cos, "EXP": F.exp,
    "EXPM1": F.expm1, "FLOOR": F.floor, "LOG": F.log, "LOG1P": F.log1p, "NEGATE": F.neg, "SIGMOID": F.sigmoid,
    "SIN": F.sin, "TANH": F.tanh, "FAST_TANH": F.tanh, "ROUND": F.round, "ERF": F.erf, "ERFINV": F.erfinv,
    "ERFC": F.erfc, "H_SWISH": F.hswish, "NOT": F.logical_not, "SILU": F.silu, "GELU": F.gelu,
    "ISNAN": F.isnan, "ISINF": F.isinf, "SINH": F.sinh, "COSH": F.cosh, "ASINH": F.asinh, "ACOSH": F.acosh,
    "ATANH": F.atanh, "TAN": F.tan, "SOFTPLUS": F.softplus, "RELU6": F.relu6, "HSIGMOID": F.hsigmoid,
    "LOGSIGMOID": F.logsigmoid, "SQRT": F.sqrt, "SQUARE": F.square, "SIGN": F.sign,
    # binary
    "ADD": F.add, "SUB": F.sub, "MUL": F.mul, "TRUE_DIV": F.div, "FLOOR_DIV": F.floor_div, "MAX": F.maximum,
    "MIN": F.minimum, "MOD": F.mod, "POW": F.pow, "LT": _cmp("LT"), "LEQ": _cmp("LEQ"), "EQ": _cmp("EQ"),
    "NEQ": _cmp("NEQ"), "SHL": F.left_shift, "SHR": F.right_shift, "ATAN2": F.atan2, "LOG_SUM_EXP": F.logaddexp,
    "AND": F.logical_and, "OR": F.logical_or, "XOR": F.logical_xor,
    "FUSE_ADD_RELU": lambda x, y: F.relu(x + y),
    "FUSE_ADD_SIGMOID": lambda x, y: F.sigmoid(x + y),
    "FUSE_ADD_TANH": lambda x, y: F.tanh(x + y),
    "FUSE_ADD_H_SWISH": lambda x, y: F.hswish(x + y),
    "SWITCH_GT0": lambda x, y: _where_zero(x > 0, y),
    # ternary / quaternary
    "FUSE_MUL_ADD3": lambda x, y, z: x * y + z,
    "FUSE_MUL_ADD4": lambda a, b, c, d: a * b + c * d,
    "COND_LEQ_MOV": lambda x, y, z: _where_zero(x <= y, z),
    "COND_LT_MOV": lambda x, y, z: _where_zero(x < y, z),
}


class Elemwise(Module):
    r"""An elementwise operation chosen by name, e.g. ``"add"``, ``"relu"``, ``"fuse_add_relu"``.

    Mode names are MegEngine's ``Elemwise.Mode`` names, case-insensitive: unary math (``relu``, ``exp``,
    ``sigmoid``, ``h_swish``, ...), binary (``add``, ``sub``, ``mul``, ``true_div``, ``max``, ``min``, ``pow``,
    ``lt``, ``leq``, ``eq``, ...), and fused ones (``fuse_add_relu``, ``fuse_add_sigmoid``, ``fuse_add_tanh``,
    ``fuse_add_h_swish``, ``fuse_mul_add3``, ``fuse_mul_add4``, ``switch_gt0``, ``cond_leq_mov``).

    Args:
        method: the mode name.

    Example:
        >>> M.Elemwise("fuse_add_relu")(mge.Tensor([-3.0, 1.0]), mge.Tensor([1.0, 1.0])).numpy()
        array([0., 2.], dtype=float32)
    """

    def __init__(self, method, **kwargs):
        super().__init__(**kwargs)
        if str(method).upper() not in _MODES:
            raise LayerModeError(f"Elemwise: unknown mode {method!r}; known modes: {sorted(_MODES)}")
        self.method = method

    def forward(self, *inps):
        """Apply the mode to ``inps``."""
        return _MODES[str(self.method).upper()](*inps)
