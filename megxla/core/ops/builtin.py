"""MegEngine's builtin op descriptors (``megengine.core.ops.builtin``) as a table onto megxla's primitives.

MegEngine code (and MegEngine's own tests) build low-level ops as descriptors and run them with
``megengine.core._imperative_rt.core2.apply(op, *tensors)``, e.g. ``apply(Elemwise(mode="add"), x, y)``.
Each descriptor here says which registered primitive(s) it means; :meth:`OpDef._apply` lowers it through the
one dispatch point (:func:`megxla.core._dispatch.apply`), so descriptors are recorded by GradManagers and by
jit traces like any other op. Nothing here computes on raw arrays.

The quantization descriptors (``FakeQuant``, ``TQT``, ``LSQ``) look their primitives (``fake_quant``,
``tqt``, ``lsq``) up in the op registry when first applied: they are defined with the quantization family
and a clear error says so if that family is not part of this installation.

Example:
    >>> import megxla as mge
    >>> from megxla.core._imperative_rt.core2 import apply
    >>> (y,) = apply(Elemwise(mode="add"), mge.Tensor([1.0, 2.0]), mge.Tensor([3.0, 4.0]))
    >>> y.numpy()
    array([4., 6.], dtype=float32)
"""
from __future__ import annotations

import importlib

import jax.numpy as jnp
import numpy as np

from .._tensor import Tensor
from .._dispatch import apply as _apply, OpError
from ..dtypes import is_float
from .._op import PRIMITIVES
from . import elemwise as _E, indexing as _I, linalg as _L, random as _P, reduction as _R, shape as _S

__all__ = ["OpDef", "Elemwise", "ElemwiseMultiType", "Reduce", "TypeCvt", "GetVarShape", "Broadcast", "Reshape",
           "Concat", "Dimshuffle", "AddAxis", "RemoveAxis", "Identity", "CheckNonFinite", "FakeQuant", "TQT", "LSQ",
           "ParamPackConcat", "ParamPackSplit", "CollectiveComm", "MatrixMul", "BatchedMatrixMul", "Linspace",
           "IndexingMultiAxisVec", "LAMBUpdate", "CondTake", "NMSKeep"]  # (+ the indexing ones, at the end)


def _norm_items(name, items):
    """MegEngine's indexing items ``(axis, begin, end, step, idx)`` as a hashable tuple of ``(int, bool x 4)``."""
    norm = []
    for it in items:
        it = tuple(it)
        if len(it) != 5:
            raise ValueError(f"{name}: an item is (axis, begin, end, step, idx), got {it!r}")
        norm.append((int(it[0]),) + tuple(bool(f) for f in it[1:]))
    return tuple(norm)


class OpDef:
    """Base of the builtin op descriptors: parameters as attributes, compared and hashed by value."""

    _params: tuple = ()
    _nin: tuple = (1, 1)  # accepted (min, max) number of inputs

    def __init__(self, **params):
        for k in self._params:
            setattr(self, k, params.pop(k, getattr(type(self), k, None)))
        if params:
            raise TypeError(f"{type(self).__name__}: unexpected parameters {sorted(params)}; "
                            f"accepted: {list(self._params)}")

    def _key(self):
        return (type(self),) + tuple(_frozen(getattr(self, k)) for k in self._params)

    def __eq__(self, other):
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self._params)})"

    def _check(self, inputs):
        lo, hi = self._nin
        if not lo <= len(inputs) <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise OpError(f"{self!r}: expected {want} input tensor(s), got {len(inputs)}")

    def _apply(self, inputs):  # -> tuple of Tensors
        raise TypeError(f"{type(self).__name__} is an abstract descriptor")


def _frozen(v):
    if isinstance(v, list):
        return tuple(v)
    if isinstance(v, np.dtype):
        # a quantized dtype is its storage's NumPy dtype plus the scale / zero point in its metadata:
        # TypeCvt(dtype=qint8(0.1)) is not TypeCvt(dtype=qint8(0.2)) nor TypeCvt(dtype="int8")
        return v.name if not v.metadata else (v.name, repr(v.metadata))
    return v


def _ints(t, what):
    """Host values of a shape/axis operand given as a Tensor, array or sequence (static in XLA)."""
    arr = np.asarray(t.numpy() if isinstance(t, Tensor) else t)
    if arr.dtype.kind not in "iu":
        raise OpError(f"{what}: expected integers, got {arr.dtype}")
    return tuple(int(i) for i in arr.reshape(-1))


# ---- Elemwise ------------------------------------------------------------------------------------------------
class _ModeEnum:
    """MegEngine's ``Op.Mode`` enums: upper-case attributes whose values are the mode names."""

    def __init_subclass__(cls, names=(), **kw):
        super().__init_subclass__(**kw)
        for n in names:
            setattr(cls, n, n)
        cls._names = tuple(names)


def _where0(cond, x):
    return _apply(_E.where.bind(), cond, x, _apply(_S.full_like.bind(value=0), x))


def _b(name, a, b):
    return _apply(_E.BINARY[name].bind(), a, b)


def _u(name, a):
    return _apply(_E.UNARY[name].bind(), a)


def _zero_like(x):
    return _apply(_S.full_like.bind(value=0), x)


_UNARY_MODES = {
    "RELU": "relu", "ABS": "abs", "ACOS": "acos", "ASIN": "asin", "CEIL": "ceil", "COS": "cos", "EXP": "exp",
    "EXPM1": "expm1", "FLOOR": "floor", "LOG": "log", "LOG1P": "log1p", "NEGATE": "neg", "SIGMOID": "sigmoid",
    "SIN": "sin", "TANH": "tanh", "FAST_TANH": "tanh", "ROUND": "round", "ERF": "erf", "ERFINV": "erfinv",
    "ERFC": "erfc", "H_SWISH": "hswish", "NOT": "logical_not", "SILU": "silu", "GELU": "gelu", "ISNAN": "isnan",
    "ISINF": "isinf", "SINH": "sinh", "COSH": "cosh", "ASINH": "asinh", "ACOSH": "acosh", "ATANH": "atanh",
    "TAN": "tan", "SOFTPLUS": "softplus", "RELU6": "relu6", "HSIGMOID": "hsigmoid", "LOGSIGMOID": "logsigmoid",
    "SQRT": "sqrt", "SQUARE": "square", "SIGN": "sign",
}
_BINARY_MODES = {
    "ADD": "add", "SUB": "sub", "MUL": "mul", "TRUE_DIV": "truediv", "FLOOR_DIV": "floordiv", "MAX": "maximum",
    "MIN": "minimum", "MOD": "mod", "POW": "pow", "LT": "lt", "LEQ": "le", "EQ": "eq", "NEQ": "ne",
    "SHL": "lshift", "SHR": "rshift", "ATAN2": "atan2", "AND": "logical_and", "OR": "logical_or",
    "XOR": "logical_xor", "LOG_SUM_EXP": "logaddexp",
}
# NOTE: MegEngine's Elemwise comparison kernels write 1 / 0 in the operands' (promoted) dtype -- ``Elemwise(LT)`` of
# float32 tensors gives float32 ``[1., 0.]``, of int32 ones int32 -- and only ``ElemwiseMultiType(..., dtype=bool)``
# (behind ``x < y`` and ``F.less``) gives bool. Code applying the descriptor (``_elwise(x, y, mode=LT)``: invis's
# ``lt``; ``M.Elemwise("LT")``) gets MegEngine's dtype. (NEQ, which MegEngine's kernel rejects, follows the others.)
_NUMERIC_COMPARISONS = frozenset({"LT", "LEQ", "EQ", "NEQ"})


def _numeric_comparison(name, x, y):
    out = _b(name, x, y)
    dtype = jnp.promote_types(x._data.dtype, y._data.dtype)  # (storage dtypes: a quantized one has metadata)
    if dtype == np.bool_:
        return out
    return _apply(_E.astype.bind(dtype=np.dtype(dtype).name), out)


# Fused and gradient modes: compositions of primitives, (number of inputs, function of the input tensors).
_FUSED_MODES = {
    "FUSE_ADD_RELU": (2, lambda a, b: _u("relu", _b("add", a, b))),
    "FUSE_ADD_SIGMOID": (2, lambda a, b: _u("sigmoid", _b("add", a, b))),
    "FUSE_ADD_TANH": (2, lambda a, b: _u("tanh", _b("add", a, b))),
    "FUSE_ADD_H_SWISH": (2, lambda a, b: _u("hswish", _b("add", a, b))),
    "FUSE_MUL_ADD3": (3, lambda a, b, c: _b("add", _b("mul", a, b), c)),
    "FUSE_MUL_ADD4": (4, lambda a, b, c, d: _b("add", _b("mul", a, b), _b("mul", c, d))),
    # x > 0 ? y : 0 (ReLU's gradient)
    "SWITCH_GT0": (2, lambda x, y: _where0(_b("gt", x, _zero_like(x)), y)),
    # x <= y ? z : 0 / x < y ? z : 0
    "COND_LEQ_MOV": (3, lambda x, y, z: _where0(_b("le", x, y), z)),
    "COND_LT_MOV": (3, lambda x, y, z: _where0(_b("lt", x, y), z)),
    # gradients given the forward output y (sigmoid, tanh) or input x (abs) and the output gradient dy
    "SIGMOID_GRAD": (2, lambda y, dy: _b("mul", _b("mul", y, _b("sub", _apply(_S.full_like.bind(value=1), y), y)),
                                         dy)),
    "TANH_GRAD": (2, lambda y, dy: _b("mul", _b("sub", _apply(_S.full_like.bind(value=1), y), _b("mul", y, y)),
                                      dy)),
    "FAST_TANH_GRAD": (2, lambda y, dy: _b("mul", _b("sub", _apply(_S.full_like.bind(value=1), y),
                                                      _b("mul", y, y)), dy)),
    # x > 0 ? dy : -dy (megdnn's kernel: -dy at 0, the gradient F.abs has at 0)
    "ABS_GRAD": (2, lambda x, dy: _apply(_E.where.bind(), _b("gt", x, _zero_like(x)), dy, _u("neg", dy))),
}


class Elemwise(OpDef):
    """An elementwise op selected by ``mode`` (a name, case-insensitive, or ``Elemwise.Mode.ADD``).

    Args:
        mode: one of ``Elemwise.Mode``'s names: unary (``RELU``, ``EXP``...), binary (``ADD``, ``LT``...),
            fused (``FUSE_ADD_RELU``, ``FUSE_MUL_ADD3``...) or gradient (``SWITCH_GT0``, ``TANH_GRAD``...).

    Example:
        >>> (y,) = Elemwise(mode="fuse_add_relu")._apply((Tensor([-3.0, 1.0]), Tensor([1.0, 1.0])))
        >>> y.numpy()
        array([0., 2.], dtype=float32)
    """

    class Mode(_ModeEnum, names=tuple(_UNARY_MODES) + tuple(_BINARY_MODES) + tuple(_FUSED_MODES)):
        pass

    _params = ("mode",)

    def __init__(self, mode="ADD", **params):
        name = str(getattr(mode, "name", mode)).upper()
        if name not in Elemwise.Mode._names:
            raise ValueError(f"Elemwise: unknown mode {mode!r}; supported modes: {', '.join(Elemwise.Mode._names)}")
        super().__init__(mode=name, **params)

    def _apply(self, inputs):
        m = self.mode
        if m in _UNARY_MODES:
            n, fn = 1, lambda x: _u(_UNARY_MODES[m], x)
        elif m in _NUMERIC_COMPARISONS:
            n, fn = 2, lambda x, y: _numeric_comparison(_BINARY_MODES[m], x, y)
        elif m in _BINARY_MODES:
            n, fn = 2, lambda x, y: _b(_BINARY_MODES[m], x, y)
        else:
            n, fn = _FUSED_MODES[m]
        if len(inputs) != n:
            raise OpError(f"Elemwise(mode={m}): expected {n} input tensor(s), got {len(inputs)}")
        return (fn(*inputs),)


class ElemwiseMultiType(OpDef):
    """An elementwise op whose output dtype is given (MegEngine's ``ElemwiseMultiType``): a quantized mode
    (``QADD``, ``QFUSE_ADD_RELU``, ``QABS``...: an :class:`Elemwise` mode behind a ``Q``) computes on the inputs'
    real values (their quantized dtypes' scales) and quantizes the result to ``dtype``; another mode
    (``EQ``, ``LT``, ``ISNAN``..., MegEngine's comparisons with ``dtype="bool"``) converts its result to ``dtype``.

    Example:
        >>> (y,) = ElemwiseMultiType(mode="lt", dtype="bool")._apply((Tensor([1.0, 3.0]), Tensor([2.0, 2.0])))
        >>> y.numpy()
        array([ True, False])
    """

    _params = ("mode", "dtype")

    def __init__(self, mode="QADD", dtype=None, **params):
        name = str(getattr(mode, "name", mode)).upper()
        base = name[1:] if name.startswith("Q") and name[1:] in Elemwise.Mode._names else name
        if base not in Elemwise.Mode._names:
            raise ValueError(f"ElemwiseMultiType: unknown mode {mode!r}; supported: an Elemwise mode, or one "
                             f"behind a Q for quantized inputs (QADD, QFUSE_ADD_RELU...)")
        if dtype is None:
            raise ValueError(f"ElemwiseMultiType(mode={name}): dtype (the output's) is required")
        super().__init__(mode=name, dtype=dtype, **params)
        self._base = base

    def _apply(self, inputs):
        if self._base != self.mode:  # a quantized mode: on the real values the int inputs stand for
            reals = []
            for t in inputs:
                if getattr(t, "_qparams", None) is None or is_float(t.dtype):
                    raise OpError(f"{self!r}: the inputs of a quantized mode must be quantized tensors, got "
                                  f"{t.dtype} of shape {t.shape}")
                reals.append(t.astype("float32"))
            inputs = reals
        (out,) = Elemwise(mode=self._base)._apply(tuple(inputs))
        return (out.astype(self.dtype),)


# ---- Reduce / TypeCvt ---------------------------------------------------------------------------------------
class Reduce(OpDef):
    """Reduction along ``axis`` (kept as a size-1 axis when ``keepdim``; all axes when ``axis`` is None).

    Args:
        mode: ``SUM``, ``SUM_SQR``, ``PRODUCT``, ``MIN``, ``MAX`` or ``MEAN``.
        axis: the reduced axis, or None for all.
        keepdim: keep the reduced axis (MegEngine's Reduce does by default).

    Example:
        >>> (y,) = Reduce(mode="sum", axis=1)._apply((Tensor([[1.0, 2.0], [3.0, 4.0]]),))
        >>> y.numpy()
        array([[3.],
               [7.]], dtype=float32)
    """

    class Mode(_ModeEnum, names=("SUM", "SUM_SQR", "PRODUCT", "MIN", "MAX", "MEAN")):
        pass

    _params = ("mode", "axis", "keepdim", "data_type")
    _nin = (1, 2)
    _PRIMS = {"SUM": _R.sum, "SUM_SQR": _R.sum, "PRODUCT": _R.prod, "MIN": _R.min, "MAX": _R.max, "MEAN": _R.mean}

    def __init__(self, mode="SUM", axis=None, keepdim=True, data_type=None, **params):
        name = str(getattr(mode, "name", mode)).upper()
        if name not in self._PRIMS:
            raise ValueError(f"Reduce: unknown mode {mode!r}; supported: {', '.join(self._PRIMS)}")
        super().__init__(mode=name, axis=axis, keepdim=bool(keepdim), data_type=data_type, **params)

    def _apply(self, inputs):
        self._check(inputs)
        x = inputs[0]
        if self.mode == "SUM_SQR":
            x = _b("mul", x, x)
        if len(inputs) == 2:  # MegEngine's second operand: the target shape (reduce to it)
            target = _ints(inputs[1], "Reduce target shape")
            if len(target) != x.ndim:
                raise OpError(f"{self!r}: target shape {target} does not match input shape {x.shape}")
            axes = tuple(i for i, (s, t) in enumerate(zip(x.shape, target)) if t == 1 and s != 1)
            return (_apply(self._PRIMS[self.mode].bind(axis=axes, keepdims=True), x),)
        if self.axis is None:
            return (_apply(self._PRIMS[self.mode].bind(axis=None, keepdims=False), x),)
        axis = int(self.axis)
        if not -x.ndim <= axis < x.ndim:
            raise OpError(f"{self!r}: axis {axis} is out of range for an input of shape {x.shape}")
        return (_apply(self._PRIMS[self.mode].bind(axis=(axis % x.ndim,), keepdims=self.keepdim), x),)


class TypeCvt(OpDef):
    """Convert to ``dtype`` (MegEngine's type conversion op).

    Example:
        >>> (y,) = TypeCvt(dtype="int32")._apply((Tensor([1.7, -1.2]),))
        >>> y.numpy()
        array([ 1, -1], dtype=int32)
    """

    _params = ("dtype",)

    def __init__(self, dtype=None, **params):
        if dtype is None:
            raise ValueError("TypeCvt: dtype is required")
        super().__init__(dtype=np.dtype(dtype), **params)

    def _apply(self, inputs):
        self._check(inputs)
        x = inputs[0]
        md = self.dtype.metadata
        if (md is not None and "mgb_dtype" in md) or getattr(x, "_qparams", None) is not None:
            # to or from a quantized dtype: through the real values, as Tensor.astype (functional's, installed
            # on Tensor) converts -- the storage cast alone would drop the scale (and give the raw integers)
            return (x.astype(self.dtype),)
        return (_apply(_E.astype.bind(dtype=self.dtype.name), x),)


# ---- shapes ------------------------------------------------------------------------------------------------
class GetVarShape(OpDef):
    """The shape of the input as an int32 1-D tensor (one dimension when ``axis`` is given).

    Shapes are static under XLA, so the result is a constant of the traced program.

    Example:
        >>> (s,) = GetVarShape()._apply((Tensor([[1, 2, 3]]),))
        >>> s.numpy()
        array([1, 3], dtype=int32)
    """

    _params = ("axis",)

    def _apply(self, inputs):
        self._check(inputs)
        shape = inputs[0].shape
        if self.axis is not None:
            if not -len(shape) <= self.axis < len(shape):
                raise OpError(f"{self!r}: axis {self.axis} is out of range for shape {shape}")
            shape = (shape[self.axis],)
        return (Tensor(np.asarray(shape, np.int32)),)


def _target_shape(op, inputs, shape_param):
    if len(inputs) == 2:
        return _ints(inputs[1], f"{type(op).__name__} shape")
    if shape_param is None:
        raise OpError(f"{op!r}: the target shape is neither a parameter nor a second input")
    return tuple(int(s) for s in shape_param)


class Broadcast(OpDef):
    """Broadcast the input to a shape given as a second input tensor (or the ``shape`` parameter).

    Example:
        >>> (y,) = Broadcast()._apply((Tensor([1, 2]), Tensor([2, 2])))
        >>> y.numpy()
        array([[1, 2],
               [1, 2]], dtype=int32)
    """

    _params = ("shape",)
    _nin = (1, 2)

    def _apply(self, inputs):
        self._check(inputs)
        shape = _target_shape(self, inputs, self.shape)
        return (_apply(_S.broadcast_to.bind(shape=shape), inputs[0]),)


class Reshape(OpDef):
    """Reshape to a shape given as a second input tensor (or the ``shape`` parameter); one ``-1`` is inferred.

    Example:
        >>> (y,) = Reshape()._apply((Tensor([1, 2, 3, 4]), Tensor([2, -1])))
        >>> y.shape
        (2, 2)
    """

    _params = ("axis", "shape")
    _nin = (1, 2)

    def _apply(self, inputs):
        self._check(inputs)
        x = inputs[0]
        shape = list(_target_shape(self, inputs, self.shape))
        if self.axis is not None and 0 <= self.axis < len(shape):
            shape[self.axis] = -1  # MegEngine: the unspecified axis is inferred
        if shape.count(-1) > 1:
            raise OpError(f"{self!r}: more than one -1 in target shape {tuple(shape)}")
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
            if known == 0 or x.size % known:
                raise OpError(f"{self!r}: cannot reshape {x.shape} to {tuple(shape)}")
            shape[shape.index(-1)] = x.size // known
        if int(np.prod(shape, dtype=np.int64)) != x.size:
            raise OpError(f"{self!r}: cannot reshape {x.shape} ({x.size} elements) to {tuple(shape)}")
        return (_apply(_S.reshape.bind(shape=tuple(shape)), x),)


class Concat(OpDef):
    """Concatenate the inputs along ``axis``.

    Example:
        >>> (y,) = Concat(axis=0)._apply((Tensor([1]), Tensor([2, 3])))
        >>> y.numpy()
        array([1, 2, 3], dtype=int32)
    """

    _params = ("axis", "comp_node")
    _nin = (1, 1 << 30)
    axis = 0

    def _apply(self, inputs):
        self._check(inputs)
        nd = inputs[0].ndim
        if not -nd <= self.axis < nd:
            raise OpError(f"{self!r}: axis {self.axis} is out of range for inputs of rank {nd}")
        return (_apply(_S.concat.bind(axis=self.axis % nd), *inputs),)


class Dimshuffle(OpDef):
    """Permute axes and insert new size-1 axes: ``pattern`` lists input axes, ``"x"`` (or -1) for a new one.

    Example:
        >>> (y,) = Dimshuffle(pattern=[1, "x", 0])._apply((Tensor([[1, 2, 3]]),))
        >>> y.shape
        (3, 1, 1)
    """

    _params = ("pattern", "format")

    def __init__(self, pattern=(), **params):
        super().__init__(pattern=tuple(pattern), **params)

    def _apply(self, inputs):
        self._check(inputs)
        x = inputs[0]
        axes = [p for p in self.pattern if p not in ("x", -1)]
        if sorted(axes) != list(range(x.ndim)):
            raise OpError(f"{self!r}: pattern must name each of the {x.ndim} input axes once (input {x.shape})")
        y = _apply(_S.transpose.bind(perm=tuple(axes)), x) if axes != list(range(x.ndim)) else x
        if len(axes) != len(self.pattern):
            shape, it = [], iter(y.shape)
            for p in self.pattern:
                shape.append(1 if p in ("x", -1) else next(it))
            y = _apply(_S.reshape.bind(shape=tuple(shape)), y)
        return (y,)


class AddAxis(OpDef):
    """Insert size-1 axes at the positions ``axis`` (a list, in increasing order of the result)."""

    _params = ("axis",)

    def _apply(self, inputs):
        self._check(inputs)
        return (_apply(_S.expand_dims.bind(axis=tuple(sorted(self.axis))), inputs[0]),)


class RemoveAxis(OpDef):
    """Remove the size-1 axes ``axis`` (a list)."""

    _params = ("axis",)

    def _apply(self, inputs):
        self._check(inputs)
        x = inputs[0]
        for a in self.axis:
            if x.shape[a] != 1:
                raise OpError(f"{self!r}: axis {a} of shape {x.shape} is not of size 1")
        return (_apply(_S.squeeze.bind(axis=tuple(a % x.ndim for a in self.axis)), x),)


class Identity(OpDef):
    """A copy of the input (an op, so traces and tapes see it)."""

    def _apply(self, inputs):
        self._check(inputs)
        return (_apply(_S.copy.bind(), inputs[0]),)


class CheckNonFinite(OpDef):
    """Scale every input by ``scale`` and flag non-finite values (the loss-scaling check of mixed precision).

    Outputs: each input times ``scale``, then an int32 ``(1,)`` flag: 1 if any input holds a NaN or an inf.

    Example:
        >>> *ys, flag = CheckNonFinite(scale=0.5)._apply((Tensor([2.0, 4.0]), Tensor([float("inf")])))
        >>> ys[0].numpy(), flag.numpy()
        (array([1., 2.], dtype=float32), array([1], dtype=int32))
    """

    _params = ("scale",)
    _nin = (1, 1 << 30)

    def __init__(self, scale=1.0, **params):
        super().__init__(scale=float(scale), **params)

    def _apply(self, inputs):
        self._check(inputs)
        outs, flag = [], None
        for x in inputs:
            if not is_float(x.dtype):
                raise OpError(f"{self!r}: inputs must be floating point, got {x.dtype}")
            outs.append(_apply(_E.BINARY["mul"].bind(), x, _apply(_S.full_like.bind(value=self.scale), x)))
            bad = _apply(_E.BINARY["logical_or"].bind(), _u("isnan", x), _u("isinf", x))
            bad = _apply(_R.max.bind(axis=None, keepdims=False), _apply(_E.astype.bind(dtype="int32"), bad))
            flag = bad if flag is None else _b("maximum", flag, bad)
        return (*outs, _apply(_S.reshape.bind(shape=(1,)), flag))


class CondTake(OpDef):
    """The elements of ``data`` where ``mask`` equals ``val`` (``mode="EQ"``, MegEngine's default and only mode
    here) and their indices in the flattened ``data``: inputs ``(data, mask)``, outputs ``(values, indices)``
    (int32) -- ``F.cond_take`` as an op descriptor; the mask is read on the host, as MegEngine's eager op.

    Example:
        >>> v, i = CondTake()._apply((Tensor([1.0, 2.0, 3.0]), Tensor([True, False, True])))
        >>> v.numpy().tolist(), i.numpy().tolist()
        ([1.0, 3.0], [0, 2])
    """

    _params = ("mode", "val", "eps")
    _nin = (2, 2)

    def __init__(self, mode="EQ", val=1.0, eps=1e-6, **params):
        mode = str(getattr(mode, "name", mode)).upper()
        if mode != "EQ":
            raise ValueError(f"CondTake: mode {mode!r} is not supported (EQ)")
        super().__init__(mode=mode, val=float(val), eps=float(eps), **params)

    def _apply(self, inputs):
        self._check(inputs)
        data, mask = inputs
        if data.shape != mask.shape:
            raise OpError(f"{self!r}: mask shape {mask.shape} must equal data shape {data.shape}")
        m = np.asarray(mask.numpy()).reshape(-1)
        keep = m if m.dtype == np.bool_ else m == self.val
        idx = Tensor(np.flatnonzero(keep).astype(np.int32))
        flat = _apply(_S.reshape.bind(shape=(-1,)), data)
        return flat[idx], idx


class NMSKeep(OpDef):
    """MegEngine's ``NMSKeep``: greedy non-maximum suppression of boxes already sorted by descending score.
    Input ``boxes`` ``(batch, N, 4)``; outputs the kept indices ``(batch, max_output)`` int32, padded with -1,
    and their counts ``(batch,)`` int32.

    Example:
        >>> boxes = Tensor([[[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]]])
        >>> keep, count = NMSKeep(0.5, 3)._apply((boxes,))
        >>> keep.numpy().tolist(), count.numpy().tolist()
        ([[0, 2, -1]], [2])
    """

    _params = ("iou_thresh", "max_output")
    _nin = (1, 1)

    def __init__(self, iou_thresh=0.5, max_output=100, **params):
        super().__init__(iou_thresh=float(iou_thresh), max_output=int(max_output), **params)

    def _apply(self, inputs):
        from . import vision as _V
        self._check(inputs)
        (boxes,) = inputs
        if boxes.ndim != 3 or boxes.shape[2] != 4:
            raise OpError(f"{self!r}: boxes must be (batch, N, 4), got {boxes.shape}")
        n = boxes.shape[1]
        # (sorted by score already: descending scores in box order; a tie would visit the later box first)
        scores = Tensor(np.arange(n, 0, -1, dtype=np.float32))
        keeps, counts = [], []
        for b in range(boxes.shape[0]):
            row = boxes[b]
            keep, count = _apply(_V.nms.bind(iou_thresh=self.iou_thresh, max_output=n), row, scores)
            k = np.full(self.max_output, -1, np.int32)
            got = np.asarray(keep.numpy())[:min(int(count.item()), self.max_output)]
            k[:got.size] = got
            keeps.append(k)
            counts.append(got.size)
        return Tensor(np.stack(keeps)), Tensor(np.asarray(counts, np.int32))


class LAMBUpdate(OpDef):
    """One LAMB step of a parameter (MegEngine's fused ``LAMBUpdate``): inputs ``(exp_avg, exp_avg_sq, param,
    grad)``, outputs the new ``(exp_avg, exp_avg_sq, param)``. The step as ``optimizer.LAMB`` takes it, trust ratio
    ``|param| / |delta|`` included (where ``always_adapt`` or a weight decay asks for it and both norms are
    positive): MegEngine's CPU kernel leaves the ratio out, see docs/differences.md.

    Example:
        >>> op = LAMBUpdate(0.9, 0.999, 1, 0.1, 0.0, 1e-8, True, False)
        >>> m, v, p = op._apply((Tensor([0.0]), Tensor([0.0]), Tensor([1.0]), Tensor([2.0])))
        >>> [round(float(t.item()), 4) for t in (m, v, p)]
        [0.2, 0.004, 0.9]
    """

    _params = ("beta_1", "beta_2", "step", "lr", "weight_decay", "eps", "bias_correction", "always_adapt")
    _nin = (4, 4)

    def __init__(self, beta_1=0.9, beta_2=0.999, step=1, lr=1e-3, weight_decay=0.0, eps=1e-8,
                 bias_correction=True, always_adapt=False, **params):
        super().__init__(beta_1=float(beta_1), beta_2=float(beta_2), step=float(step), lr=float(lr),
                         weight_decay=float(weight_decay), eps=float(eps), bias_correction=bool(bias_correction),
                         always_adapt=bool(always_adapt), **params)

    def _apply(self, inputs):
        self._check(inputs)
        m, v, p, g = inputs
        for x in inputs:
            if not is_float(x.dtype):
                raise OpError(f"{self!r}: inputs must be floating point, got {x.dtype}")
        f32 = "float32"
        m, v, p, g = (x if x.dtype == np.float32 else _apply(_E.astype.bind(dtype=f32), x) for x in (m, v, p, g))

        def c(value):
            return Tensor(np.float32(value))

        def norm(x):
            return _u("sqrt", _apply(_R.sum.bind(axis=None, keepdims=False), _b("mul", x, x)))

        b1, b2 = self.beta_1, self.beta_2
        m = _b("add", _b("mul", m, c(b1)), _b("mul", g, c(1.0 - b1)))
        v = _b("add", _b("mul", v, c(b2)), _b("mul", _b("mul", g, g), c(1.0 - b2)))
        bc1 = 1.0 - b1 ** self.step if self.bias_correction else 1.0
        bc2 = 1.0 - b2 ** self.step if self.bias_correction else 1.0
        delta = _b("truediv", _b("truediv", m, c(bc1)), _b("add", _u("sqrt", _b("truediv", v, c(bc2))), c(self.eps)))
        if self.weight_decay != 0.0:
            delta = _b("add", delta, _b("mul", p, c(self.weight_decay)))
        step = delta
        if self.always_adapt or self.weight_decay > 0:
            p_norm, d_norm = norm(p), norm(delta)
            both = _b("logical_and", _b("gt", p_norm, c(0.0)), _b("gt", d_norm, c(0.0)))
            ratio = _apply(_E.where.bind(), both, _b("truediv", p_norm, d_norm), c(1.0))
            step = _b("mul", delta, ratio)
        return m, v, _b("sub", p, _b("mul", step, c(self.lr)))


# ---- matrix products -----------------------------------------------------------------------------------------
def _enum(v, enum, what):
    """An enum parameter as its upper-case name (given as a name, an ``Op.Enum.NAME`` or an object with ``.name``)."""
    name = str(getattr(v, "name", v)).upper()
    if name not in enum._names:
        raise ValueError(f"{what}: unknown value {v!r}; supported: {', '.join(enum._names)}")
    return name


class _MatMulBase(OpDef):
    """The parameters of MegEngine's ``MatrixMul`` and ``BatchedMatrixMul`` (``MatrixMulParam`` version 2 and
    ``ExecutionPolicy``, then ``dimA``/``dimB``: ``src/core/include/megbrain/ir/ops.td``)."""

    class ComputeMode(_ModeEnum, names=("DEFAULT", "FLOAT32")):
        pass

    class Format(_ModeEnum, names=("DEFAULT", "MK4", "MK8", "MK4_DOT", "N32K4_DOT")):
        pass

    class Strategy(_ModeEnum, names=("HEURISTIC", "PROFILE", "REPRODUCIBLE", "OPTIMIZED", "HEURISTIC_REPRODUCIBLE",
                                     "PROFILE_REPRODUCIBLE", "PROFILE_HEURISTIC", "OPTMIZED")):
        pass

    _params = ("transposeA", "transposeB", "compute_mode", "format", "strategy", "workspace_limit", "dimA", "dimB")
    _nin = (2, 2)

    def __init__(self, transposeA=False, transposeB=False, compute_mode="DEFAULT", format="DEFAULT",
                 strategy="HEURISTIC", workspace_limit=2 ** 64 - 1, dimA=0, dimB=0, **params):
        what = type(self).__name__
        # (the strategy picks a kernel, not a result: kept as given, an int being MegEngine's bit combination)
        strategy = strategy if isinstance(strategy, (int, np.integer)) else _enum(strategy, self.Strategy, what)
        super().__init__(transposeA=bool(transposeA), transposeB=bool(transposeB),
                         compute_mode=_enum(compute_mode, self.ComputeMode, what),
                         format=_enum(format, self.Format, what), strategy=strategy,
                         workspace_limit=int(workspace_limit), dimA=int(dimA), dimB=int(dimB), **params)

    def _operands(self, inputs):
        self._check(inputs)
        a, b = inputs
        if self.format != "DEFAULT":
            raise OpError(f"{self!r}: format={self.format} (MegEngine's packed ARM layouts) is not supported; "
                          f"use format='DEFAULT'")
        if a.ndim < 2 or b.ndim < 2:
            raise OpError(f"{self!r}: operands must be at least 2-D, got shapes {a.shape} and {b.shape} "
                          f"(F.matmul adds the axis of a vector)")
        return a, b

    def _product(self, a, b):
        """``op(a) @ op(b)`` over the last two axes (the batch axes already equal or broadcastable)."""
        k1 = a.shape[-2] if self.transposeA else a.shape[-1]
        k2 = b.shape[-1] if self.transposeB else b.shape[-2]
        if k1 != k2:
            raise OpError(f"{self!r}: contracted dimensions differ ({k1} vs {k2}) for shapes {a.shape} and {b.shape}")
        low = ("float16", "bfloat16")
        # FLOAT32: half-precision operands accumulate in float32 (megdnn's compute mode), the result in their dtype
        wide = self.compute_mode == "FLOAT32" and a.dtype.name in low and b.dtype.name in low
        if wide:
            dt = a.dtype.name
            a, b = (_apply(_E.astype.bind(dtype="float32"), t) for t in (a, b))
        y = _apply(_L.matmul.bind(transpose_a=self.transposeA, transpose_b=self.transposeB), a, b)
        return _apply(_E.astype.bind(dtype=dt), y) if wide else y


class MatrixMul(_MatMulBase):
    """Matrix product of two operands (MegEngine's ``MatrixMul``, what ``F.matmul`` uses for an unbatched right
    operand): ``a`` of shape ``(..., M, K)`` (``(K, M)`` with ``transposeA``, which needs a 2-D ``a``) times a 2-D
    ``b`` ``(K, N)`` (``(N, K)`` with ``transposeB``) is ``(..., M, N)``.

    With ``dimA == dimB >= 3`` (the form MegEngine's matmul gradient uses) both operands are first flattened to
    2-D over their leading axes, ``(prod(shape[:-1]), shape[-1])``, so that ``MatrixMul(transposeA=True, dimA=3,
    dimB=3)`` of ``x (n, c, o)`` and ``dy (n, c, h)`` is the ``(o, h)`` weight gradient.

    Args:
        transposeA, transposeB: transpose an operand's last two axes before the product.
        compute_mode: ``DEFAULT``, or ``FLOAT32`` (float16 operands accumulate in float32).
        format: ``DEFAULT`` (MegEngine's packed ARM formats ``MK4``... are not supported).
        strategy, workspace_limit: MegEngine's algorithm choice; no effect on the result.
        dimA, dimB: the operands' ranks as MegEngine's ``F.matmul`` records them (see above).

    Example:
        >>> (c,) = MatrixMul(transposeB=True)._apply((Tensor([[1.0, 2.0]]), Tensor([[3.0, 4.0], [5.0, 6.0]])))
        >>> c.numpy()
        array([[11., 17.]], dtype=float32)
    """

    def _apply(self, inputs):
        a, b = self._operands(inputs)
        if self.dimA == self.dimB >= 3:
            a, b = (_apply(_S.reshape.bind(shape=(int(np.prod(t.shape[:-1], dtype=np.int64)), t.shape[-1])), t)
                    for t in (a, b))
        elif b.ndim != 2:
            raise OpError(f"{self!r}: the second operand must be 2-D, got shape {b.shape} (MegEngine multiplies a "
                          f"batched right operand with BatchedMatrixMul)")
        elif a.ndim > 2 and self.transposeA:
            raise OpError(f"{self!r}: transposeA needs a 2-D first operand, got shape {a.shape} (MegEngine "
                          f"multiplies a transposed batch with BatchedMatrixMul)")
        return (self._product(a, b),)


class BatchedMatrixMul(_MatMulBase):
    """Batched matrix product (MegEngine's ``BatchedMatrixMul``): the last two axes of each operand are matrices
    (``transposeA``/``transposeB`` transpose them), the axes before are the batch.

    As in MegEngine 1.13 (``imperative/src/impl/ops/matmul.cpp``), the operand of lower rank is broadcast to the
    batch axes of the other (the result has those), and operands of equal rank must have equal batch axes: the
    higher-rank operand's batch is never broadcast. Two 2-D operands are one matrix product.

    Args:
        transposeA, transposeB: transpose an operand's last two axes before the product.
        compute_mode: ``DEFAULT``, or ``FLOAT32`` (float16 operands accumulate in float32).
        format: ``DEFAULT`` (MegEngine's packed ARM formats ``MK4``... are not supported).
        strategy, workspace_limit: MegEngine's algorithm choice; no effect on the result.
        dimA, dimB: the operands' ranks as MegEngine's ``F.matmul`` records them (the shapes decide here).

    Example:
        >>> a, b = Tensor(np.ones((2, 3, 4), "float32")), Tensor(np.ones((4, 5), "float32"))
        >>> (c,) = BatchedMatrixMul()._apply((a, b))
        >>> c.shape, float(c.numpy()[0, 0, 0])
        ((2, 3, 5), 4.0)
    """

    def _apply(self, inputs):
        a, b = self._operands(inputs)
        ba, bb = a.shape[:-2], b.shape[:-2]
        if a.ndim == b.ndim:
            if ba != bb:
                raise OpError(f"{self!r}: operands of equal rank need equal batch axes, got shapes {a.shape} and "
                              f"{b.shape} (MegEngine broadcasts only the lower-rank operand)")
        else:
            lo, batch = (b, ba) if a.ndim > b.ndim else (a, bb)
            target = tuple(batch) + tuple(lo.shape[-2:])
            try:
                fits = np.broadcast_shapes(tuple(lo.shape), target) == target
            except ValueError:
                fits = False
            if not fits:
                raise OpError(f"{self!r}: cannot broadcast the batch axes of shape {lo.shape} to {tuple(batch)} "
                              f"(shapes {a.shape} and {b.shape}; MegEngine broadcasts only the lower-rank operand)")
            lo = _apply(_S.broadcast_to.bind(shape=target), lo)
            a, b = (a, lo) if a.ndim > b.ndim else (lo, b)
        return (self._product(a, b),)


# ---- Linspace / IndexingMultiAxisVec ---------------------------------------------------------------------------
class Linspace(OpDef):
    """``num`` evenly spaced float32 values from ``start`` to ``stop`` (MegEngine's ``Linspace``): inputs
    ``(start, stop, num)``, each one value; ``endpoint`` includes ``stop``.

    Value ``i`` is ``start + i * step`` with ``step = (stop - start) / max(num - 1 if endpoint else num, 1)``
    (megdnn's kernel), differentiable in ``start`` and ``stop``; ``num`` is a size (read on the host).

    Args:
        endpoint: include ``stop`` as the last value.
        comp_node: MegEngine's output device; accepted (the result is on the inputs' device).

    Example:
        >>> (y,) = Linspace()._apply((Tensor(0.0), Tensor(1.0), Tensor(5)))
        >>> y.numpy()
        array([0.  , 0.25, 0.5 , 0.75, 1.  ], dtype=float32)
    """

    _params = ("endpoint", "comp_node")
    _nin = (3, 3)

    def __init__(self, endpoint=True, comp_node=None, **params):
        super().__init__(endpoint=bool(endpoint), comp_node=comp_node, **params)

    def _apply(self, inputs):
        self._check(inputs)
        start, stop, num = inputs
        nums = _ints(num, "Linspace num")
        if len(nums) != 1 or nums[0] < 0:
            raise OpError(f"{self!r}: num must be one non-negative integer, got {list(nums)}")
        n = nums[0]
        ends = []
        for t, what in ((start, "start"), (stop, "stop")):
            if t.size != 1:
                raise OpError(f"{self!r}: {what} must be one value, got shape {t.shape}")
            ends.append(_apply(_E.astype.bind(dtype="float32"), _apply(_S.reshape.bind(shape=()), t)))
        start, stop = ends
        denom = _apply(_S.full.bind(shape=(), value=float(max(n - 1 if self.endpoint else n, 1)), dtype="float32"))
        step = _b("truediv", _b("sub", stop, start), denom)
        i = _apply(_S.arange.bind(start=0, step=1, num=n, dtype="float32"))
        return (_b("add", start, _b("mul", i, step)),)


class IndexingMultiAxisVec(OpDef):
    """Index several axes with integer vectors and slices at once (MegEngine's ``IndexingMultiAxisVec``, NumPy's
    advanced indexing): inputs ``(x, *index_tensors)``.

    ``items`` lists ``(axis, begin, end, step, idx)``, MegEngine's encoding: ``idx`` True takes the next input as
    an integer index vector of ``axis`` (the vectors broadcast together); otherwise the flagged ``begin``, ``end``,
    ``step`` (at least one) take the next inputs, in that order, as the slice bounds of ``axis``. Axes without an
    item are kept whole. The result is laid out as NumPy's: the indexed dimensions replace the indexed axes where
    those are consecutive, and come first otherwise.

    Example:
        >>> x = Tensor(np.arange(12, dtype="float32").reshape(3, 4))
        >>> (y,) = IndexingMultiAxisVec(items=[(0, False, False, False, True), (1, True, False, False, False)])._apply(
        ...     (x, Tensor([2, 0]), Tensor([2])))
        >>> y.numpy()
        array([[10., 11.],
               [ 2.,  3.]], dtype=float32)
    """

    _params = ("items",)
    _nin = (1, 1 << 30)

    def __init__(self, items=(), **params):
        super().__init__(items=_norm_items(type(self).__name__, items), **params)

    def _apply(self, inputs):
        self._check(inputs)
        x, rest = inputs[0], list(inputs[1:])
        by_axis = {}
        for axis, begin, end, step, idx in self.items:
            if not -x.ndim <= axis < x.ndim:
                raise OpError(f"{self!r}: axis {axis} is out of range for an input of shape {x.shape}")
            ax = axis % x.ndim
            if ax in by_axis:
                raise OpError(f"{self!r}: axis {axis} is indexed twice")
            if idx:  # (MegEngine then ignores the slice flags of the item)
                if not rest:
                    raise OpError(f"{self!r}: too few input tensors for the items")
                t = rest.pop(0)
                if t.dtype.kind not in "iu":
                    raise OpError(f"{self!r}: the index of axis {axis} must be integers, got {t.dtype}")
                by_axis[ax] = (("t",), t)
                continue
            if not (begin or end or step):
                raise OpError(f"{self!r}: the item of axis {axis} has no begin, end, step or index")
            bounds = []
            for flag, what in ((begin, "begin"), (end, "end"), (step, "step")):
                if not flag:
                    bounds.append(None)
                    continue
                if not rest:
                    raise OpError(f"{self!r}: too few input tensors for the items")
                v = _ints(rest.pop(0), f"IndexingMultiAxisVec {what}")
                if len(v) != 1:
                    raise OpError(f"{self!r}: the slice {what} of axis {axis} must be one value, got {list(v)}")
                bounds.append(v[0])
            if bounds[2] == 0:
                raise OpError(f"{self!r}: the slice step of axis {axis} is 0")
            by_axis[ax] = (("s", *bounds), None)
        if rest:
            raise OpError(f"{self!r}: {len(rest)} input tensor(s) more than the items use")
        if not by_axis:
            return (_apply(_S.copy.bind(), x),)
        # (index tensors are the getitem primitive's inputs in axis order, whatever the order of the items)
        spec, tensors = [], []
        for ax in range(max(by_axis) + 1):
            item, t = by_axis.get(ax, (("s", None, None, None), None))
            spec.append(item)
            if t is not None:
                tensors.append(t)
        return (_apply(_I.getitem.bind(spec=tuple(spec)), x, *tensors),)


# ---- quantization --------------------------------------------------------------------------------------------
def _quant_primitive(name, desc):
    prim = PRIMITIVES.get(name)
    if prim is None:
        try:  # the quantization family registers itself on import
            importlib.import_module("megxla.core.ops.quant")
        except ImportError:
            pass
        prim = PRIMITIVES.get(name)
    if prim is None:
        raise OpError(f"{desc}: the quantization primitive {name!r} is not registered in this installation "
                      f"(megxla.core.ops.quant is missing)")
    return prim


class _QuantOp(OpDef):
    _params = ("qmin", "qmax")
    _prim = ""

    def __init__(self, qmin=-128, qmax=127, **params):
        if int(qmin) > int(qmax):
            raise ValueError(f"{type(self).__name__}: qmin={qmin} > qmax={qmax}")
        super().__init__(qmin=int(qmin), qmax=int(qmax), **params)

    def _apply(self, inputs):
        self._check(inputs)
        prim = _quant_primitive(self._prim, repr(self))
        return (_apply(prim.bind(qmin=self.qmin, qmax=self.qmax), *inputs),)


class FakeQuant(_QuantOp):
    """Fake quantization with a straight-through gradient: inputs ``(x, scale, zero_point)``."""

    _prim = "fake_quant"
    _nin = (3, 3)


class TQT(_QuantOp):
    """Trained quantization thresholds: inputs ``(x, log2_scale)``."""

    _prim = "tqt"
    _nin = (2, 2)


class LSQ(_QuantOp):
    """Learned step size quantization: inputs ``(x, scale, zero_point, grad_scale)``."""

    _prim = "lsq"
    _nin = (4, 4)


# ---- parameter packing and collectives (distributed training) ------------------------------------------------
def _int_list(v, what):
    return _ints(v, what) if len(np.asarray(v.numpy() if isinstance(v, Tensor) else v).reshape(-1)) else ()


class ParamPackConcat(OpDef):
    """Pack tensors into one flat tensor: inputs ``(*tensors, offsets)``; tensor ``i`` fills
    ``[offsets[2i], offsets[2i + 1])`` (gaps are zero).

    Example:
        >>> (y,) = ParamPackConcat(offsets=[0, 2, 2, 3])._apply((Tensor([1., 2.]), Tensor([3.]), Tensor([0, 2, 2, 3])))
        >>> y.numpy()
        array([1., 2., 3.], dtype=float32)
    """

    _params = ("offsets",)
    _nin = (2, 1 << 30)

    def __init__(self, offsets=(), **params):
        super().__init__(offsets=_int_list(offsets, "ParamPackConcat offsets"), **params)

    def _apply(self, inputs):
        self._check(inputs)
        tensors, off = inputs[:-1], self.offsets
        if len(off) != 2 * len(tensors):
            raise OpError(f"{self!r}: {len(tensors)} tensors need {2 * len(tensors)} offsets, got {len(off)}")
        pieces, pos = [], 0
        for i, t in enumerate(tensors):
            start, end, size = off[2 * i], off[2 * i + 1], int(t.size)  # (a 0-d tensor's size is MegEngine's 1.0)
            if end - start != size or start < pos:
                raise OpError(f"{self!r}: tensor {i} of shape {t.shape} does not fit offsets [{start}, {end})")
            if start > pos:
                pieces.append(_apply(_S.full.bind(shape=(start - pos,), value=0, dtype=t.dtype.name)))
            pieces.append(_apply(_S.reshape.bind(shape=(size,)), t))
            pos = end
        return (_apply(_S.concat.bind(axis=0), *pieces),)


class ParamPackSplit(OpDef):
    """Split a flat tensor into tensors of ``shapes`` at ``offsets`` (the inverse of :class:`ParamPackConcat`).

    Example:
        >>> a, b = ParamPackSplit(offsets=[0, 2, 2, 3], shapes=[(2,), ()])._apply((Tensor([1., 2., 3.]),))
        >>> a.numpy(), b.numpy()
        (array([1., 2.], dtype=float32), array(3., dtype=float32))
    """

    _params = ("offsets", "shapes")

    def __init__(self, offsets=(), shapes=(), **params):
        super().__init__(offsets=_int_list(offsets, "ParamPackSplit offsets"),
                         shapes=tuple(_int_list(s, "ParamPackSplit shape") for s in shapes), **params)

    def _apply(self, inputs):
        self._check(inputs)
        x, off = inputs[0], self.offsets
        if len(off) != 2 * len(self.shapes) or x.ndim != 1 or (off and x.shape[0] < max(off)):
            raise OpError(f"{self!r}: cannot split a tensor of shape {x.shape} at offsets {list(off)}")
        if not self.shapes:
            return ()
        pieces = _apply(_S.split.bind(indices=tuple(off), axis=0), x)  # piece 2i + 1 is [off[2i], off[2i + 1])
        return tuple(_apply(_S.reshape.bind(shape=tuple(shape)), pieces[2 * i + 1])
                     for i, shape in enumerate(self.shapes))


#: the collective of a mode name, ``fn(op, tensor) -> tensor``, registered by ``megxla.functional.distributed``
#: (core sits below the distributed layer)
COLLECTIVES: dict = {}


class CollectiveComm(OpDef):
    """A collective communication (MegEngine's ``CollectiveComm``): ``mode`` (``ALL_REDUCE_SUM``, ``BROADCAST``,
    ``ALL_GATHER``, ...) among the ``nr_devices`` processes of the group; one input.

    Example:
        >>> CollectiveComm() == CollectiveComm(), CollectiveComm().mode
        (True, 'REDUCE_SUM')
    """

    class Mode(_ModeEnum, names=("REDUCE_SUM", "BROADCAST", "ALL_GATHER", "REDUCE_SCATTER_SUM", "ALL_REDUCE_SUM",
                                 "ALL_REDUCE_MAX", "ALL_REDUCE_MIN", "ALL_REDUCE_PROD", "GATHER", "SCATTER",
                                 "ALL_TO_ALL")):
        pass

    _params = ("mode", "key", "nr_devices", "rank", "is_root", "local_grad", "addr", "port", "dtype", "backend",
               "comp_node")
    mode, key, nr_devices, rank, is_root, local_grad = "REDUCE_SUM", "", 0, 0, False, False
    addr, port, dtype, backend, comp_node = "", 0, None, "", ""

    def _apply(self, inputs):
        self._check(inputs)
        mode = str(getattr(self.mode, "name", self.mode)).upper()
        fn = COLLECTIVES.get(mode)
        if fn is None:
            raise OpError(f"{self!r}: unknown mode {self.mode!r}" if COLLECTIVES else
                          f"{self!r}: the distributed layer (megxla.distributed) is not loaded")
        return (fn(self, inputs[0]),)


# ---- random number generators ----------------------------------------------------------------------------------
#: MegEngine's RNG handles (``megengine.core._imperative_rt.ops.new_rng_handle``): handle -> (key Tensor, seed,
#: device). Handle 0 is the global generator (``megxla.random``'s key, registered in core as implicit state).
_RNG_HANDLES: dict = {}
_NEXT_RNG_HANDLE = [1]


def _new_rng_handle(device, seed) -> int:
    """A generator of its own seeded with ``seed`` on ``device``; its draws do not move the global generator."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2 ** 64:
        raise TypeError(f"new_rng_handle: seed must be an int in [0, 2**64), got {seed!r}")
    key = Tensor(_P.key_data_from_seed(int(seed)), dtype="uint32", device=device)
    handle, _NEXT_RNG_HANDLE[0] = _NEXT_RNG_HANDLE[0], _NEXT_RNG_HANDLE[0] + 1
    _RNG_HANDLES[handle] = (key, int(seed), key.device)
    return handle


def _rng_handle(handle, what):
    entry = _RNG_HANDLES.get(int(handle))
    if entry is None:
        raise ValueError(f"{what}: no RNG handle {handle!r} (never made by new_rng_handle, or deleted)")
    return entry


def _rng_next_key(op):
    """A fresh key for one draw of ``op``'s generator (its handle's; handle 0: the global one), which advances:
    the split of :class:`megxla.random.RNG`, so descriptors are recorded by GradManagers and traces alike."""
    if op.handle:
        key, seed, _ = _rng_handle(op.handle, repr(op))
        if op.seed != seed:  # (MegEngine asserts "inconsistent rng seed" too)
            raise OpError(f"{op!r}: inconsistent rng seed: the op's is {op.seed}, handle {op.handle}'s {seed}")
    else:
        from .. import _registry
        state = _registry.implicit_state().get("rng_key")
        if state is None:
            raise OpError(f"{op!r}: the global generator (megxla.random) is not loaded")
        key = state[0]()
    new, sub = _apply(_P.split_key.bind(), key)
    key._reset(new)
    return sub


def _shape_operand(op, inputs):
    op._check(inputs)
    shape = _ints(inputs[0], f"{op!r} shape")
    if any(s < 0 for s in shape):
        raise OpError(f"{op!r}: negative size in shape {shape}")
    return shape


def _same_shape_params(op, inputs):
    op._check(inputs)
    shapes = {tuple(t.shape) for t in inputs}
    if len(shapes) != 1 or not all(is_float(t.dtype) for t in inputs):
        raise OpError(f"{op!r}: expected float parameter tensors of one shape, got "
                      f"{[f'{t.shape}:{t.dtype}' for t in inputs]}")
    return tuple(inputs[0].shape)


class _RNGOp(OpDef):
    """Base of the RNG descriptors: ``seed`` and ``handle`` (0: the global generator, seeded by
    ``megxla.random.seed``; another: a :func:`new_rng_handle` generator, whose seed ``seed`` must be, as MegEngine
    asserts -- for handle 0 megxla does not compare it with the global seed, which MegEngine does).
    Each application draws new values and advances that generator. Inside ``xla_trace`` a handle's generator is
    not state of the step (a clear error names it): pass an ``megxla.random.RNG`` instead."""

    _params = ("seed", "handle")
    seed, handle = 0, 0


class UniformRNG(_RNGOp):
    """Uniform samples on ``[0, 1)``; input: the output shape (an int tensor).

    Example:
        >>> (y,) = UniformRNG()._apply((Tensor([2, 3], dtype="int32"),))
        >>> y.shape, y.dtype
        ((2, 3), dtype('float32'))
    """

    _params = ("seed", "dtype", "handle")
    dtype = "float32"

    def _apply(self, inputs):
        shape = _shape_operand(self, inputs)
        return (_apply(_P.uniform.bind(shape=shape, low=0.0, high=1.0, dtype=np.dtype(self.dtype).name),
                       _rng_next_key(self)),)


class GaussianRNG(_RNGOp):
    """Normal samples N(``mean``, ``std`` ** 2); input: the output shape (an int tensor).

    Example:
        >>> (y,) = GaussianRNG(mean=1.0, std=0.0)._apply((Tensor([2], dtype="int32"),))
        >>> y.numpy()
        array([1., 1.], dtype=float32)
    """

    _params = ("seed", "mean", "std", "dtype", "handle")
    mean, std, dtype = 0.0, 1.0, "float32"

    def _apply(self, inputs):
        shape = _shape_operand(self, inputs)
        return (_apply(_P.normal.bind(shape=shape, mean=float(self.mean), std=float(self.std),
                                      dtype=np.dtype(self.dtype).name), _rng_next_key(self)),)


class _ParamRNG(_RNGOp):
    _prim = ""

    def _apply(self, inputs):
        shape = _same_shape_params(self, inputs)
        return (_apply(getattr(_P, self._prim).bind(size=shape), _rng_next_key(self), *inputs),)


class GammaRNG(_ParamRNG):
    """Gamma samples; inputs: ``shape`` (k) and ``scale`` (theta) tensors of one shape, the output's."""

    _prim, _nin = "gamma", (2, 2)


class BetaRNG(_ParamRNG):
    """Beta samples; inputs: ``alpha`` and ``beta`` tensors of one shape, the output's."""

    _prim, _nin = "beta", (2, 2)


class PoissonRNG(_ParamRNG):
    """Poisson samples; input: the rates ``lam``, whose shape the output has.

    Example:
        >>> (y,) = PoissonRNG()._apply((Tensor([2.0, 3.0]),))
        >>> y.shape
        (2,)
    """

    _prim = "poisson"


class ExponentialRNG(_ParamRNG):
    """Exponential samples (MegEngine 1.13.4); input: the rates, whose shape the output has."""

    _prim = "exponential"


class PermutationRNG(_RNGOp):
    """A random permutation of ``range(n)`` in ``dtype``; input: the shape ``(n,)`` (an int tensor).

    Example:
        >>> (y,) = PermutationRNG()._apply((Tensor([4], dtype="int32"),))
        >>> sorted(y.numpy().tolist())
        [0, 1, 2, 3]
    """

    _params = ("seed", "dtype", "handle")
    dtype = "int32"

    def _apply(self, inputs):
        shape = _shape_operand(self, inputs)
        if len(shape) != 1:
            raise OpError(f"{self!r}: expected the shape (n,) of a permutation, got {shape}")
        return (_apply(_P.permutation.bind(n=shape[0], dtype=np.dtype(self.dtype).name), _rng_next_key(self)),)


class ShuffleRNG(_RNGOp):
    """Shuffle along the first axis; returns ``(shuffled, indices)`` (int32), ``shuffled == x[indices]``.

    Example:
        >>> y, idx = ShuffleRNG()._apply((Tensor([10.0, 20.0, 30.0]),))
        >>> bool((y.numpy() == np.array([10.0, 20.0, 30.0])[idx.numpy()]).all())
        True
    """

    def _apply(self, inputs):
        self._check(inputs)
        x = inputs[0]
        if x.ndim == 0 or x.shape[0] == 0:
            raise OpError(f"{self!r}: expected a tensor with a non-empty first axis, got shape {x.shape}")
        key = _rng_next_key(self)  # (one key: the shuffle and its indices are the same permutation)
        return (_apply(_P.shuffle.bind(), key, x),
                _apply(_P.permutation.bind(n=int(x.shape[0]), dtype="int32"), key))


class MultinomialRNG(_RNGOp):
    """``num_samples`` class indices (int32) per row of the weights ``(C,)`` or ``(B, C)`` (MegEngine 1.13.4)."""

    _params = ("seed", "num_samples", "replacement", "handle")
    num_samples, replacement = 1, False

    def _apply(self, inputs):
        self._check(inputs)
        probs, n = inputs[0], int(self.num_samples)
        if not is_float(probs.dtype) or probs.ndim not in (1, 2) or n < 1 or (
                not self.replacement and n > probs.shape[-1]):
            raise OpError(f"{self!r}: expected 1-D or 2-D float weights with at least num_samples classes (without "
                          f"replacement), got {probs.shape}:{probs.dtype}")
        return (_apply(_P.multinomial.bind(num_samples=n, replacement=bool(self.replacement)), _rng_next_key(self),
                       probs),)


__all__ += ["UniformRNG", "GaussianRNG", "GammaRNG", "BetaRNG", "PoissonRNG", "ExponentialRNG", "PermutationRNG",
            "ShuffleRNG", "MultinomialRNG"]


# The indexing descriptors (Subtensor, MeshIndexing...: fronts onto Tensor indexing) live in their own module, which
# builds on OpDef above: imported last.
from ._builtin_indexing import *  # noqa: E402,F401,F403
from ._builtin_indexing import __all__ as _indexing_all  # noqa: E402
__all__ += _indexing_all
