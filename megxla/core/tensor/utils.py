"""Public tensor helpers of ``megengine.core.tensor.utils``: converting shapes and scalars to tensors.

They sit in ``core`` and so use only core primitives through the one dispatch point.
"""
from __future__ import annotations

import collections.abc

import numpy as np

from .._tensor import Tensor
from .. import _registry
from .._dispatch import apply
from ..ops import shape as _S, elemwise as _E
from .dtype import is_quantize

__all__ = ["isscalar", "astensor1d", "convert_single_value", "convert_inputs", "dtype_promotion", "get_device",
           "result_type", "make_shape_tuple"]


def isscalar(x) -> bool:
    """Whether ``x`` is a scalar: a 0-d Tensor, or a NumPy/Python scalar.

    Example:
        >>> isscalar(Tensor(1.0)), isscalar(Tensor([1.0])), isscalar(3)
        (True, False, True)
    """
    if isinstance(x, Tensor):
        return x.ndim == 0
    return bool(np.isscalar(x))


def _const(x, dtype, device, reference=()):
    t = Tensor(x, dtype=dtype, device=device)
    graph = _registry.graph_of("astensor1d", *reference) if reference else None
    # (MegEngine's Const: a constant of the reference's graph where it is a hand-built graph's variable)
    return t if graph is None else graph._constant(t)


def _astype(t, dtype):
    if dtype is None or np.dtype(dtype) == t.dtype:
        return t
    return apply(_E.astype.bind(dtype=np.dtype(dtype).name), t)


def astensor1d(x, *reference, dtype=None, device=None):
    """Convert a shape-like value to a 1-D tensor (MegEngine's rule).

    Accepts a sequence of Python scalars and/or tensors (concatenated), a NumPy array (0-d or 1-d), or a
    Tensor (returned as is, regardless of dtype and device).

    Args:
        x: the value.
        reference: tensors whose device the result follows (accepted for MegEngine compatibility); where one is a
            variable of a hand-built graph (``utils.network``), a value made here is a constant of that graph.
        dtype: dtype of the result when it is built here.
        device: device of the result when it is built here.

    Returns:
        a 1-D (or, for a 0-d Tensor/array input, 0-d) Tensor.

    Example:
        >>> astensor1d([2, Tensor(3)], dtype="int32").numpy()
        array([2, 3], dtype=int32)
    """
    ndim = getattr(x, "ndim", None)
    if ndim is not None:
        if ndim not in (0, 1):
            raise ValueError(f"astensor1d: expected a 0-d or 1-d value, got ndim={ndim} (shape {tuple(x.shape)})")
        return x if isinstance(x, Tensor) else _const(x, dtype, device, reference)
    if not isinstance(x, collections.abc.Sequence) or isinstance(x, str):
        raise TypeError(f"astensor1d: expected a sequence, array or Tensor, got {type(x).__name__}")
    if any(isinstance(i, Tensor) for i in x):
        parts = []
        for i in x:
            t = i if isinstance(i, Tensor) else _const(i, dtype, device)
            if t.ndim != 0 and t.ndim != 1:
                raise ValueError(f"astensor1d: element of shape {t.shape} is not a scalar or 1-d")
            parts.append(apply(_S.reshape.bind(shape=(-1,)), t) if t.ndim == 0 else t)
        if len(parts) > 1:
            dt = np.result_type(*[p.dtype for p in parts])
            parts = [_astype(p, dt) for p in parts]
            out = apply(_S.concat.bind(axis=0), *parts)
        else:
            out = parts[0]
        return _astype(out, dtype)
    return _const(x, dtype, device, reference)


def convert_single_value(v, *, dtype=None, device=None):
    """``v`` as a Tensor of ``dtype``: a Tensor is cast (quantized tensors are kept), anything else becomes a
    constant.

    Example:
        >>> convert_single_value(2, dtype="float32").dtype
        dtype('float32')
    """
    if isinstance(v, Tensor):
        return v if is_quantize(v.dtype) else _astype(v, dtype)
    return _const(v, dtype, device)


# MegEngine's ranks of dtype kinds in ``dtype_promotion``: the inputs of the highest rank decide, the others are dropped
# (a complex dtype, which MegEngine lacks, ranks above float: megxla's complex tensors keep their imaginary part)
_KIND_RANK = {"c": 4, "f": 3, "i": 2, "u": 2, "b": 1}


def _rank(dt) -> int:
    return _KIND_RANK.get(dt.kind, 0)


def _inputs(inputs):
    # (MegEngine's helpers take a list or tuple of inputs, or one input that is neither)
    return inputs if isinstance(inputs, (list, tuple)) else (inputs,)


def dtype_promotion(inputs):
    """MegEngine's common dtype of op inputs (``megengine.core.tensor.utils.dtype_promotion``).

    Tensors, NumPy arrays and NumPy scalars count with their dtypes; Python ``bool`` / ``int`` / ``float`` as
    bool / int32 / float32; ``None`` and other values (lists) are skipped. Of the ranks float > integer > bool, the
    highest one present decides: where the Python scalars rank higher than every tensor, their type (``[bool
    tensor, 1]`` gives int32, ``[int8 tensor, 1.5]`` float32); otherwise NumPy's promotion of the tensors of that
    rank alone (``[int32 tensor, float16 tensor]`` gives float16, ``[int8 tensor, 300]`` int8). 64-bit types are
    narrowed to 32 bits (MegEngine raises for them). Without any such input, a ``ValueError`` as MegEngine's
    (megxla takes the dtype of a lone list or bfloat16 tensor there).

    Note that the elementwise operators promote otherwise (``int32_tensor + float16_tensor`` is float32 in both).

    Example:
        >>> dtype_promotion([Tensor([1], dtype="int8"), 1]), dtype_promotion([Tensor([1]), 1.5])
        (dtype('int8'), dtype('float32'))
        >>> dtype_promotion([Tensor([True]), 1]), dtype_promotion([Tensor([1]), Tensor([1.0], dtype="float16")])
        (dtype('int32'), dtype('float16'))
    """
    from ..dtypes import default_dtype
    tensors, scalars, others = [], [], []
    for x in _inputs(inputs):
        if isinstance(x, Tensor):
            tensors.append(x.dtype)
        elif isinstance(x, (np.ndarray, np.generic)):
            tensors.append(np.dtype(default_dtype(np.asarray(x))))
        elif type(x) is bool:  # (exactly these types, as MegEngine: an IntEnum member is skipped)
            scalars.append(np.dtype(np.bool_))
        elif type(x) is int:
            scalars.append(np.dtype(np.int32))
        elif type(x) is float:
            scalars.append(np.dtype(np.float32))
        elif x is not None:
            others.append(x)
    rank_t = max(map(_rank, tensors), default=0)
    rank_s = max(map(_rank, scalars), default=0)
    if rank_s > rank_t:
        return next(d for d in scalars if _rank(d) == rank_s)  # (one dtype per rank among the scalars)
    if rank_t > 0:
        out = None
        for d in tensors:
            if _rank(d) == rank_t:
                out = d if out is None else np.promote_types(out, d)
        return out
    if tensors:  # (bfloat16 alone: MegEngine ranks it nowhere and raises)
        return tensors[0]
    for x in others:  # (a list alone: MegEngine skips it and raises)
        if isinstance(x, (list, tuple)):
            return np.dtype(default_dtype(np.asarray(x)))
    raise ValueError("invalid input, no dtype avaliable")


def get_device(inputs):
    """The device (a CompNode) of the tensors among ``inputs``; the default device without one. Tensors on two
    devices raise ``ValueError``, as MegEngine's (``ambiguous device``).

    Example:
        >>> str(get_device([1, Tensor([1.0], device="cpu0")]))
        'cpu0:0'
    """
    device = None
    for x in _inputs(inputs):
        if isinstance(x, Tensor):
            d = x.device
            if device is None:
                device = d
            elif d != device:
                raise ValueError(f"ambiguous device: {device!r} (from {device}) vs {d!r} (from {d})")
    if device is not None:
        return device
    from ..dtypes import CompNode, get_default_device
    return CompNode(get_default_device())


def convert_inputs(*args, device=None):
    """Every argument as a Tensor of the inputs' common dtype (:func:`dtype_promotion`) on ``device`` (default:
    the tensors' one, :func:`get_device`), as MegEngine converts an op's inputs; ``None`` stays ``None``.

    Example:
        >>> [t.dtype.name for t in convert_inputs(Tensor([1, 2]), 1.5)]
        ['float32', 'float32']
    """
    if not args:
        return ()
    dtype = dtype_promotion(args)
    device = get_device(args) if device is None else device
    return tuple(None if a is None else convert_single_value(a, dtype=dtype, device=device) for a in args)


def result_type(*args):
    """NumPy's result type of the arguments' dtypes (tensors, dtypes and dtype names; others are skipped), as
    MegEngine's ``result_type``.

    Example:
        >>> result_type(Tensor([1], dtype="int8"), Tensor([1], dtype="int16"))
        dtype('int16')
    """
    dtypes = []
    for a in args:
        if isinstance(a, Tensor):
            dtypes.append(a.dtype)
            continue
        try:
            dtypes.append(np.dtype(a))
        except TypeError:
            pass
    return np.result_type(*dtypes)


def make_shape_tuple(shape) -> tuple:
    """A shape (tuple, list, NumPy array or Tensor; elements may be Tensors) as a tuple of Python ints.

    Example:
        >>> make_shape_tuple(Tensor([2, 3]))
        (2, 3)
    """
    if isinstance(shape, Tensor) or isinstance(shape, np.ndarray):
        return tuple(int(i) for i in np.asarray(shape.numpy() if isinstance(shape, Tensor) else shape).reshape(-1))
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    out = []
    for i in shape:
        if isinstance(i, Tensor):
            out.append(int(i.item()))
        else:
            out.append(int(i))
    return tuple(out)


# ---- subgraph_fn -------------------------------------------------------------------------------------------------
# MegEngine's operator names in a subgraph body -> builtin Elemwise modes ((name, number of inputs) as MegEngine)
_OPR_MAP = {("-", 1): "NEGATE", ("abs", 1): "ABS", ("exp", 1): "EXP", ("log1p", 1): "LOG1P", ("relu", 1): "RELU",
            ("cond_leq_mov", 3): "COND_LEQ_MOV", ("fma3", 3): "FUSE_MUL_ADD3", ("fma4", 4): "FUSE_MUL_ADD4"}
_OPR_MAP.update({(name, 2): mode for name, mode in [
    ("+", "ADD"), ("-", "SUB"), ("*", "MUL"), ("/", "TRUE_DIV"), ("//", "FLOOR_DIV"), ("**", "POW"), ("max", "MAX"),
    ("min", "MIN"), ("additive", "ADD"), ("switch_gt0", "SWITCH_GT0"), ("abs_grad", "ABS_GRAD")]})
# The class subgraph_fn(custom_grad=True) builds on: megxla.autodiff.Function, registered by the autodiff layer
# (core imports nothing above itself).
CUSTOM_GRAD_FUNCTION = [None]


def _subgraph_ops(name, dtype, device):
    """The ``f`` (apply an operator) and ``c`` (a constant) a subgraph body is called with."""
    from ..ops.builtin import Elemwise, OpDef

    def apply_expr(op, *args, nr_out=None):
        if isinstance(op, str):
            mode = _OPR_MAP.get((op, len(args)))
            if mode is None:
                raise ValueError(f"subgraph {name!r}: unknown operator {op!r} with {len(args)} input(s); known: "
                                 f"{sorted(set(k for k in _OPR_MAP))}, or a builtin op descriptor")
            op = Elemwise(mode=mode)
        if not isinstance(op, OpDef):
            raise TypeError(f"subgraph {name!r}: expected an operator name or a builtin op descriptor, got {op!r}")
        results = op._apply(tuple(a if isinstance(a, Tensor) else Tensor(a) for a in args))
        if nr_out is None:
            if len(results) != 1:
                raise ValueError(f"subgraph {name!r}: {op!r} gives {len(results)} outputs; pass nr_out")
            return results[0]
        if len(results) != nr_out:
            raise ValueError(f"subgraph {name!r}: {op!r} gives {len(results)} outputs, not nr_out={nr_out}")
        return tuple(results)

    def apply_const(value, dtype=dtype, device=device):
        return Tensor(value, dtype=dtype, device=device)

    return apply_expr, apply_const


def _custom_grad_class(name, func, f, c, nr_inputs):
    """The Function class of a ``custom_grad`` body: forward runs it to its first yield, backward resumes it."""
    function_cls = CUSTOM_GRAD_FUNCTION[0]
    if function_cls is None:
        raise RuntimeError(f"subgraph {name!r}: custom_grad needs megxla.autodiff (import megxla)")

    class SubgraphOp(function_cls):
        def forward(self, *inputs):
            self.body = func(list(inputs), f, c)
            outputs = tuple(self.body.send(None))
            self.outputs = outputs
            return outputs

        def backward(self, *output_grads):
            if all(g is None for g in output_grads):
                return (None,) * nr_inputs
            from ..ops import shape as _S2
            grads = [apply(_S2.full_like.bind(value=0), o) if g is None else g
                     for o, g in zip(self.outputs, output_grads)]
            input_grads = tuple(self.body.send(grads))
            self.body.close()
            return input_grads

    SubgraphOp.__name__ = SubgraphOp.__qualname__ = str(name)
    return SubgraphOp


def subgraph_fn(name, dtype, device, nr_inputs, gopt_level=None, jit_fusion=False, custom_grad=False, *,
                interpret=False):
    """Build a function from a body of elementwise operators (MegEngine's ``core.tensor.utils.subgraph_fn``).

    The decorated body is called as ``body(inputs, f, c)``: ``f(op, *args)`` applies an operator (a name such
    as ``"+"``, ``"exp"``, ``"switch_gt0"``, ``"abs_grad"``, or a builtin op descriptor), ``c(value)`` makes a
    constant of ``dtype`` on ``device``. Without ``custom_grad`` it returns ``(outputs, outputs_has_grad)``;
    with ``custom_grad`` it is a generator that yields the outputs, receives their gradients and yields the
    inputs' gradients (None for none). MegEngine compiles the body into one fused operator; megxla runs its ops
    through the dispatch point like any others, and XLA fuses them where they are compiled (``jit.trace``), so
    ``gopt_level``, ``jit_fusion`` and ``interpret`` do not change the result.

    Args:
        name: the operator's name (in error messages).
        dtype: dtype of the body's constants.
        device: device of the body's constants.
        nr_inputs: number of inputs.
        gopt_level: MegEngine's graph-optimisation level of the fused operator.
        jit_fusion: MegEngine's JIT fusion of the operator.
        custom_grad: the body gives the gradient (a generator, see above).
        interpret: MegEngine's eager interpretation of the body.

    Returns:
        a decorator; the decorated function takes ``nr_inputs`` tensors and returns a tuple of outputs.

    Example:
        >>> @subgraph_fn("Fma", dtype="float32", device=None, nr_inputs=2)
        ... def fma(inputs, f, c):
        ...     x, y = inputs
        ...     return (f("+", f("*", x, y), c(1.0)),), (True,)
        >>> fma(Tensor([2.0]), Tensor([3.0]))[0].numpy()
        array([7.], dtype=float32)
    """
    f, c = _subgraph_ops(name, dtype, device)

    def check(args):
        if len(args) != nr_inputs:
            raise TypeError(f"subgraph {name!r} takes {nr_inputs} inputs, got {len(args)}")
        return [a if isinstance(a, Tensor) else Tensor(a) for a in args]

    def decorator(func):
        if not custom_grad:
            def wrapped(*args):
                outputs, has_grad = func(check(args), f, c)
                return tuple(o if g else o.detach() for o, g in zip(outputs, has_grad))
            return wrapped

        op_cls = _custom_grad_class(name, func, f, c, nr_inputs)

        def wrapped(*args):
            return op_cls()(*check(args))
        return wrapped

    return decorator


def subgraph(name, dtype, device, nr_inputs, gopt_level=None, jit_fusion=False, custom_grad=False):
    """Build an operator from a body of builtin operators (MegEngine's ``core.tensor.utils.subgraph``).

    The body is the one :func:`subgraph_fn` takes (``body(inputs, f, c)``). Without ``custom_grad`` the decorated
    body becomes a factory of an op descriptor, applied as MegEngine's is: ``apply(op(), *inputs)`` gives the tuple
    of outputs (an output whose ``outputs_has_grad`` entry is False has no gradient). With ``custom_grad`` it
    becomes the :class:`~.Function` class of the body, called as ``op()(*inputs)``. MegEngine compiles the body
    into one fused operator; megxla runs the body's ops through the dispatch point when the op is applied, so
    ``gopt_level`` and ``jit_fusion`` do not change the result.

    Args:
        name: the operator's name (in error messages).
        dtype: dtype of the body's constants.
        device: device of the body's constants.
        nr_inputs: number of inputs.
        gopt_level: MegEngine's graph-optimisation level of the fused operator.
        jit_fusion: MegEngine's JIT fusion of the operator.
        custom_grad: the body gives the gradient (a generator, see :func:`subgraph_fn`).

    Returns:
        a decorator: the body -> a zero-argument factory of the op descriptor (or the Function class).

    Example:
        >>> from megxla.core._imperative_rt.core2 import apply
        >>> @subgraph("Fma", dtype="float32", device=None, nr_inputs=2)
        ... def fma(inputs, f, c):
        ...     x, y = inputs
        ...     return [f("+", f("*", x, y), c(1.0))], [True]
        >>> apply(fma(), Tensor([2.0]), Tensor([3.0]))[0].numpy()
        array([7.], dtype=float32)
    """
    from ..ops.builtin import OpDef
    f, c = _subgraph_ops(name, dtype, device)

    def decorator(func):
        if custom_grad:
            return _custom_grad_class(name, func, f, c, nr_inputs)

        class SubgraphOp(OpDef):
            _nin = (nr_inputs, nr_inputs)

            def __repr__(self):
                return f"SubgraphOp({name!r})"

            def _apply(self, inputs):
                self._check(inputs)
                outputs, has_grad = func(list(inputs), f, c)
                if len(outputs) != len(has_grad):
                    raise ValueError(f"subgraph {name!r}: {len(outputs)} outputs but {len(has_grad)} "
                                     "outputs_has_grad entries")
                return tuple(o if g else o.detach() for o, g in zip(outputs, has_grad))

        SubgraphOp.__name__ = SubgraphOp.__qualname__ = str(name)
        op = SubgraphOp()
        return lambda: op

    return decorator


__all__ += ["subgraph_fn", "subgraph"]
