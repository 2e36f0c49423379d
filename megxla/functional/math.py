"""Reductions, sorting and linear algebra (``megengine.functional.math``)."""
import builtins
import functools
import numpy as np

from ..core._dispatch import apply as _apply, AssertedOpError, OpError
from ..core.dtypes import is_float
from ..core._elemwise_front import as_tensor as _t, BINARY as _B, UNARY as _U
from ..core.ops import reduction as _R, linalg as _L, sort as _S
from ..core import _autocast as _amp  # autocast state: the hook below costs one attribute read
from ..core import _lazy
from .elemwise import isnan, isinf, sign  # noqa: F401  (MegEngine exports these from .math too)
from .tensor import cumsum, keep_qparams, _quantized_source, astype as _astype  # noqa: F401
from ..core._tensor import QPARAMS_SEEN as _QPARAMS_SEEN, Tensor
from ..core._elemwise_front import quantized_params as _quantized_params, reject_quantized as _reject_quantized
from ..core.ops import elemwise as _E

__all__ = ["sum", "mean", "prod", "max", "min", "var", "std", "norm", "argmax", "argmin", "logsumexp", "matmul",
           "dot", "matinv", "svd", "normalize", "sort", "argsort", "topk", "topk_accuracy", "cross", "einsum"]


def _axis(op, x, axis):
    """``axis`` (None, int or sequence) as None or a sorted tuple of non-negative axes."""
    if axis is None:
        return None
    try:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    except TypeError:  # (a float: MegEngine's binding raises RuntimeError, "Unable to cast")
        raise OpError(f"{op}: axis must be an int or a sequence of ints, got {axis!r}") from None
    nd = x.ndim
    out = []
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise OpError(f"{op}: axis must be an int or a sequence of ints, got {axis!r}")
        if not -builtins.max(nd, 1) <= a < builtins.max(nd, 1):
            raise AssertedOpError(f"{op}: axis {a} is out of range for a tensor of shape {x.shape}")
        out.append(int(a) % builtins.max(nd, 1))
    if len(set(out)) != len(out):  # (MegEngine asserts both: its upstream test_sum_neg_axis expects AssertionError)
        raise AssertedOpError(f"{op}: repeated axis in {axis!r}")
    if nd == 0:
        return None
    return tuple(sorted(out))


def _keepdims(op, keepdims):
    """``keepdims`` as a bool. MegEngine's binding takes a bool, an int, a NumPy bool or None (False) and raises
    ``RuntimeError("Unable to cast ...")`` for anything else (a string); called only for a value that is not
    already ``True`` / ``False``."""
    if keepdims is None or isinstance(keepdims, (int, np.integer, np.bool_)):
        return bool(keepdims)
    raise OpError(f"{op}: keepdims must be a bool, got {keepdims!r}")


def _reduce(prim, name, summary, example):
    high = name == "logsumexp"  # computed in float32 under autocast, as MegEngine's amp
    keep = name in ("sum", "max", "min")

    def fn(inp, axis=None, keepdims=False):
        inp = _t(inp, op=name)
        if keepdims is not False and keepdims is not True:
            keepdims = _keepdims(name, keepdims)
        if high and _amp.enabled:
            inp, = _amp.up(inp)
        if name == "mean" and _QPARAMS_SEEN[0] and _quantized_source(inp) is not None:
            # MegEngine's mean of a quantized tensor: its quantized sum (which wraps), dequantized, / count
            total = keep_qparams(_apply(_R.sum.bind(axis=_axis(name, inp, axis), keepdims=bool(keepdims)), inp), inp)
            count = float(np.prod(inp.shape, dtype=np.int64) // np.prod(total.shape, dtype=np.int64))
            return _B["truediv"](_astype(total, "float32"), count)
        out = _apply(prim.bind(axis=_axis(name, inp, axis), keepdims=bool(keepdims)), inp)
        # a quantized tensor's sum / max / min are in its quantized dtype (MegEngine; the sum wraps)
        return keep_qparams(out, inp) if keep else out

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"""{summary}

    Args:
        inp: input tensor.
        axis: an int, a sequence of ints, or None to reduce all axes.
        keepdims: keep the reduced axes, with size 1.

    Returns:
        the reduced tensor.

    Example:
        >>> x = Tensor([[1., 2.], [3., 4.]])
        >>> {example}
    """
    return fn


sum = _reduce(_R.sum, "sum", "Sum of the elements over ``axis`` (bool counts as int32).", "F.sum(x, axis=1).numpy()\n        array([3., 7.], dtype=float32)")
mean = _reduce(_R.mean, "mean", "Mean of the elements over ``axis`` (float32 for integer inputs).",
               "F.mean(x).numpy()\n        array(2.5, dtype=float32)")
prod = _reduce(_R.prod, "prod", "Product of the elements over ``axis``.", "F.prod(x, axis=0).numpy()\n        array([3., 8.], dtype=float32)")
max = _reduce(_R.max, "max", "Maximum over ``axis``.", "F.max(x, axis=0).numpy()\n        array([3., 4.], dtype=float32)")
min = _reduce(_R.min, "min", "Minimum over ``axis``.", "F.min(x, keepdims=True).numpy()\n        array([[1.]], dtype=float32)")
logsumexp = _reduce(_R.logsumexp, "logsumexp", "``log(sum(exp(inp)))`` over ``axis``, computed stably.",
                    "F.logsumexp(x, axis=1).numpy()\n        array([2.3132615, 4.3132615], dtype=float32)")


def var(inp, axis=None, keepdims=False):
    """Variance over ``axis`` (biased: divides by the count, as MegEngine).

    Args:
        inp: input tensor.
        axis: an int, a sequence of ints, or None for all axes.
        keepdims: keep the reduced axes, with size 1.

    Returns:
        the variance.

    Example:
        >>> F.var(Tensor([1., 2., 3., 4.])).numpy()
        array(1.25, dtype=float32)
    """
    inp = _t(inp, op="var")
    if keepdims is not False and keepdims is not True:
        keepdims = _keepdims("var", keepdims)
    return _apply(_R.var.bind(axis=_axis("var", inp, axis), keepdims=keepdims, ddof=0), inp)


def std(inp, axis=None, keepdims=False):
    """Standard deviation over ``axis`` (biased): ``sqrt(var(inp))``.

    Args:
        inp: input tensor.
        axis: an int, a sequence of ints, or None for all axes.
        keepdims: keep the reduced axes, with size 1.

    Returns:
        the standard deviation.

    Example:
        >>> F.std(Tensor([1., 2., 3., 4.])).numpy()
        array(1.118034, dtype=float32)
    """
    return _U["sqrt"](var(inp, axis, keepdims))


def norm(inp, ord=None, axis=None, keepdims=False):
    """Vector p-norm over ``axis``: ``sum(abs(inp) ** ord) ** (1 / ord)``.

    ``ord`` may be any non-zero number, ``inf`` (max of abs), ``-inf`` (min of abs) or 0 (the int32 count of
    non-zeros). MegEngine requires ``axis`` for inputs that are not vectors; here ``axis=None`` takes the norm
    of all elements.

    Args:
        inp: input tensor.
        ord: the order; default 2.
        axis: the axis (or axes), or None for all elements.
        keepdims: keep the reduced axes, with size 1.

    Returns:
        the norm.

    Example:
        >>> F.norm(Tensor([3., -4.])).numpy()
        array(5., dtype=float32)
    """
    inp = _t(inp, op="norm")
    if keepdims is not False and keepdims is not True:
        keepdims = _keepdims("norm", keepdims)
    ord = 2.0 if ord is None else ord
    if isinstance(ord, bool) or not isinstance(ord, (int, float, np.integer, np.floating)):
        raise OpError(f"norm: ord must be a number, got {ord!r}")
    if inp.dtype.kind in "iu" and ord in (float("inf"), float("-inf")):
        pass  # MegEngine's max / min of |x| keep the integer dtype: norm(Tensor([1, 2, 3]), inf) is int32 3
    elif inp.dtype.kind in "iub":  # MegEngine converts integer inputs: the norm of Tensor([3, 4]) is 5.0
        from .tensor import astype
        inp = astype(inp, "float32")
    if not (is_float(inp.dtype) or inp.dtype.kind in "ciu"):
        raise OpError(f"norm: input must be a float tensor, got {inp.dtype}")
    if _amp.enabled and ord not in (0, float("inf"), float("-inf")):
        # autocast: float32, as MegEngine's ``sum(abs(x) ** ord) ** (1 / ord)`` (its pow computes in float32);
        # its inf / -inf norms (max / min of abs) and the 0 "norm" (a count) keep their dtypes
        inp, = _amp.up(inp)
    return _apply(_R.norm.bind(ord=float(ord), axis=_axis("norm", inp, axis), keepdims=bool(keepdims)), inp)


def normalize(inp, ord=None, axis=None, eps=1e-12):
    """``inp / max(norm(inp, ord, axis), eps)``: scale to unit norm along ``axis`` (all elements if None).

    Args:
        inp: input tensor.
        ord: the norm's order; default 2.
        axis: the axis, or None for all elements.
        eps: lower bound of the divisor.

    Returns:
        a tensor like ``inp``.

    Example:
        >>> F.normalize(Tensor([3., 4.])).numpy()
        array([0.6, 0.8], dtype=float32)
    """
    inp = _t(inp, op="normalize")
    n = norm(inp, ord, axis, keepdims=axis is not None)
    return _B["truediv"](inp, _B["maximum"](n, float(eps)))


def _arg(prim, name, doc):
    def fn(inp, axis=None, keepdims=False):
        inp = _t(inp, op=name)
        if axis is None:
            if keepdims:
                raise OpError(f"{name}: keepdims=True needs an axis")
            return _apply(prim.bind(axis=None, keepdims=False), inp)
        axes = _axis(name, inp, axis)
        if axes is None:  # (a 0-d input has no axis to search: MegEngine asserts, where its reductions take axis 0)
            first = axis if isinstance(axis, (int, np.integer)) else tuple(axis)[0]
            raise AssertedOpError(f"{name}: axis {first} is out of bounds for tensor of dimension 0")
        # MegEngine applies a sequence of axes one after another, from the last one.
        for a in reversed(axes):
            inp = _apply(prim.bind(axis=a, keepdims=bool(keepdims)), inp)
        return inp

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"""{doc}

    Args:
        inp: input tensor.
        axis: an int, a sequence of ints (searched one after another, from the last), or None to search the
            flattened tensor.
        keepdims: keep the searched axes, with size 1.

    Returns:
        int32 indices.

    Example:
        >>> F.{name}(Tensor([[1., 5.], [3., 2.]]), axis=1).numpy()
        array({'[1, 0]' if name == 'argmax' else '[0, 1]'}, dtype=int32)
    """
    return fn


argmax = _arg(_R.argmax, "argmax", "Indices of the maximum values along ``axis`` (the first one on ties).")
argmin = _arg(_R.argmin, "argmin", "Indices of the minimum values along ``axis`` (the first one on ties).")


# ---- linear algebra ----------------------------------------------------------------------------------------------
def matmul(inp1, inp2, transpose_a=False, transpose_b=False, compute_mode="default", format="default"):
    """Matrix product, batched over leading dimensions with NumPy's broadcasting.

    1-D operands are vectors (a 1-D @ 1-D product is a scalar); N-D operands are stacks of matrices in their
    last two dimensions.

    Args:
        inp1: left operand (1-D or more).
        inp2: right operand (1-D or more).
        transpose_a: use the transpose of the last two dims of ``inp1``.
        transpose_b: use the transpose of the last two dims of ``inp2``.
        compute_mode: ``"default"`` or ``"float32"`` (accepted; XLA picks the accumulation).
        format: accepted for MegEngine compatibility.

    Returns:
        the product.

    Example:
        >>> F.matmul(F.ones((5, 2, 3)), F.ones((3, 4))).shape
        (5, 2, 4)
    """
    if compute_mode != "default" and not isinstance(getattr(compute_mode, "name", compute_mode), str):
        # (MegEngine takes any string here, and raises "Unable to cast Python instance to C++ type" for others)
        raise OpError(f"matmul: compute_mode must be 'default' or 'float32', got {compute_mode!r}")
    inp1, inp2 = _t(inp1, op="matmul"), _t(inp2, op="matmul")
    if _amp.enabled:  # autocast: compute in low precision, as MegEngine's amp
        inp1, inp2 = _amp.low(inp1, inp2)
    if _QPARAMS_SEEN[0] and (_quantized_params(inp1) or _quantized_params(inp2)):
        return _quantized_matmul(inp1, inp2, transpose_a, transpose_b)
    if inp1.ndim == 0 or inp2.ndim == 0:
        raise OpError(f"matmul: operands must be at least 1-D, got shapes {inp1.shape} and {inp2.shape}")
    # (``dim``: a selection's ``x[fg] @ w`` checks its last axis, not its count)
    k1 = _lazy.dim(inp1, -2) if transpose_a and inp1.ndim > 1 else _lazy.dim(inp1, -1)
    k2 = _lazy.dim(inp2, -1) if transpose_b and inp2.ndim > 1 else _lazy.dim(inp2, 0) if inp2.ndim == 1 else \
        _lazy.dim(inp2, -2)
    if k1 != k2:
        raise OpError(f"matmul: contracted dimensions differ ({k1} vs {k2}) for shapes {inp1.shape} and "
                      f"{inp2.shape} (transpose_a={transpose_a}, transpose_b={transpose_b})")
    return _apply(_L.matmul.bind(transpose_a=bool(transpose_a), transpose_b=bool(transpose_b)), inp1, inp2)


def _quantized_matmul(inp1, inp2, transpose_a, transpose_b):
    # MegEngine multiplies two symmetric quantized operands on their integers, accumulating in int32: the result
    # is qint32 with scale = product of the scales (the dtype its quantized Linear feeds its requantize)
    from ..core._tensor import QPARAMS_FACTORY
    from ..core.tensor.dtype import _builtin_quant_dtypes
    q1, q2 = _quantized_params(inp1), _quantized_params(inp2)
    if q1 is None or q2 is None:
        raise OpError(f"matmul: one operand is quantized and the other is not ({inp1.dtype} {inp1.shape} and "
                      f"{inp2.dtype} {inp2.shape}); quantize both (astype) or dequantize both")
    a, b = (_apply(_E.astype.bind(dtype="int32"), x) for x in (inp1, inp2))
    out = matmul(a, b, transpose_a, transpose_b)
    s1, s2 = (q.scale if isinstance(q.scale, Tensor) else Tensor(q.scale, dtype="float32") for q in (q1, q2))
    out._qparams = QPARAMS_FACTORY[0](_builtin_quant_dtypes["qint32"], s1 * s2, None)
    return out


def dot(inp1, inp2):
    """Inner product of two vectors (0-d tensors count as length-1 vectors).

    Args:
        inp1: first vector.
        inp2: second vector, of the same length.

    Returns:
        a 0-d tensor.

    Example:
        >>> F.dot(Tensor([1., 2.]), Tensor([3., 4.])).numpy()
        array(11., dtype=float32)
    """
    inp1, inp2 = _t(inp1, op="dot"), _t(inp2, op="dot")
    if _QPARAMS_SEEN[0]:
        _reject_quantized("dot", inp1, inp2)
    if inp1.ndim > 1 or inp2.ndim > 1 or inp1.size != inp2.size:
        raise OpError(f"dot: inputs must be vectors of one length, got shapes {inp1.shape} and {inp2.shape}")
    return _apply(_L.dot.bind(), inp1, inp2)


def matinv(inp):
    """Inverse of a square matrix, or of each matrix in a batch (last two dims).

    Args:
        inp: tensor of shape ``(..., n, n)``.

    Returns:
        the inverse(s).

    Example:
        >>> F.matinv(Tensor([[2., 0.], [0., 4.]])).numpy()
        array([[0.5 , 0.  ],
               [0.  , 0.25]], dtype=float32)
    """
    inp = _t(inp, op="matinv")
    if inp.ndim < 2 or inp.shape[-1] != inp.shape[-2]:
        raise OpError(f"matinv: input must be (a batch of) square matrices, got shape {inp.shape}")
    if inp.dtype.kind != "f":  # (bfloat16 too: no LU of it in XLA's linear algebra)
        raise OpError(f"matinv: input must be a float16, float32 or float64 tensor, got {inp.dtype}")
    return _apply(_L.matinv.bind(), inp)


def svd(inp, full_matrices=False, compute_uv=True):
    """Singular value decomposition ``inp = U @ diag(S) @ Vh`` of (a batch of) matrices.

    As MegEngine, the result is always the triple ``(U, S, Vh)``; ``compute_uv=False`` only says the caller
    will not use ``U`` and ``Vh`` (a compiled step drops their computation).

    Args:
        inp: tensor of shape ``(..., m, n)``.
        full_matrices: square ``U`` (m x m) and ``Vh`` (n x n) instead of the reduced ones.
        compute_uv: accepted for MegEngine compatibility.

    Returns:
        ``(U, S, Vh)``, singular values in descending order.

    Example:
        >>> _, s, _ = F.svd(Tensor(np.arange(6, dtype="float32").reshape(2, 3)))  # s = [7.348, 1.]
    """
    inp = _t(inp, op="svd")
    if inp.ndim < 2:
        raise OpError(f"svd: input must be at least 2-D, got shape {inp.shape}")
    if inp.dtype.kind != "f":  # (bfloat16 too: no SVD of it in XLA's linear algebra)
        raise OpError(f"svd: input must be a float16, float32 or float64 tensor, got {inp.dtype}")
    return _apply(_L.svd.bind(full_matrices=bool(full_matrices)), inp)


# ---- sorting ----------------------------------------------------------------------------------------------------
def _sortable(op, inp):
    inp = _t(inp, op=op)
    if inp.ndim not in (1, 2):
        raise OpError(f"{op}: input must be 1-D or 2-D (sorted by row), got shape {inp.shape}")
    if inp.dtype.kind == "c":
        raise OpError(f"{op}: cannot sort complex values")
    return inp


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """The cross product of two (arrays of) vectors, as ``np.cross``.

    Args:
        a: the first vector(s), along ``axisa`` (length 2 or 3; a third component of 0 where it is 2).
        b: the second vector(s), along ``axisb``; the other axes broadcast against ``a``'s.
        axisa: the axis of ``a`` holding the vectors (default: the last).
        axisb: the axis of ``b`` holding the vectors (default: the last).
        axisc: the axis of the result holding the products (default: the last).
        axis: if given, the vector axis of ``a``, ``b`` and the result alike (overrides the three above).

    Returns:
        the cross product(s).

    Example:
        >>> F.cross(Tensor([1.0, 2.0, 3.0]), Tensor([4.0, 5.0, 6.0])).numpy()
        array([-3.,  6., -3.], dtype=float32)
    """
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _t(a, op="cross"), _t(b, op="cross")
    # (MegEngine gives a 1-d pair a third component of 0 first: the product is a 3-vector, not NumPy's z alone)
    if a.ndim == 1 and a.shape[0] == 2:
        a = _pad3(a)
    if b.ndim == 1 and b.shape[0] == 2:
        b = _pad3(b)
    for name, t, ax in (("a", a, axisa), ("b", b, axisb)):
        if t.ndim == 0 or not -t.ndim <= ax < t.ndim or t.shape[ax] not in (2, 3):
            raise OpError(f"cross: {name} of shape {t.shape} has no vectors of length 2 or 3 along axis {ax}")
    return _apply(_L.cross.bind(axisa=int(axisa), axisb=int(axisb), axisc=int(axisc)), a, b)


def einsum(equation: str, *args) -> Tensor:
    """Einstein summation over the operands, as ``np.einsum`` (MegEngine 1.13.4's ``F.einsum``): repeated indices
    within an operand take its diagonal, ``...`` broadcasts, no ``->`` gives the indices seen once, sorted.

    Args:
        equation: the subscripts, e.g. ``"ik, kj->ij"`` (spaces ignored).
        args: the operands, one per comma-separated term.

    Returns:
        the summed product.

    Example:
        >>> F.einsum("ik, kj->ij", Tensor([[1.0, 2.0]]), Tensor([[3.0], [4.0]])).numpy()
        array([[11.]], dtype=float32)
        >>> F.einsum("ii", Tensor([[1.0, 2.0], [3.0, 4.0]])).numpy()
        array(5., dtype=float32)
    """
    if not isinstance(equation, str):
        raise OpError(f"einsum: the equation must be a str, got {equation!r}")
    xs = [_t(a, op="einsum") for a in args]
    _einsum_check(equation, tuple((x.shape, str(x.dtype)) for x in xs))
    return _apply(_L.einsum.bind(equation=equation), *xs)


@functools.lru_cache(maxsize=256)
def _einsum_check(equation, types):
    """A clear error, with the shapes, where ``equation`` does not fit the operands (JAX's own text appended)."""
    import jax
    import jax.numpy as jnp
    try:
        jax.eval_shape(lambda *xs: jnp.einsum(equation, *xs),
                       *[jax.ShapeDtypeStruct(tuple(s), np.dtype(d)) for s, d in types])
    except Exception as exc:  # (JAX's ValueError / TypeError / IndexError for a bad equation)
        raise OpError(f"einsum: {equation!r} does not fit operands of shapes {[tuple(s) for s, _ in types]} "
                      f"({exc})") from None


def _pad3(v):
    from .tensor import concat, zeros
    return concat([v, zeros((1,), dtype=v.dtype)])


def sort(inp, descending=False, dim=-1):
    """Sort a tensor along ``dim`` (by default its last axis); ties keep their order.

    Args:
        inp: a tensor of at least one dimension.
        descending: largest first.
        dim: the axis to sort along (MegEngine 1.13.2 and later; earlier 1.13 sorted 1-D or 2-D tensors by row).

    Returns:
        ``(sorted values, int32 indices into inp along dim)``.

    Example:
        >>> v, i = F.sort(Tensor([3., 1., 2.]))
        >>> v.numpy(), i.numpy()
        (array([1., 2., 3.], dtype=float32), array([1, 2, 0], dtype=int32))
        >>> F.sort(Tensor([[3., 1.], [2., 4.]]), dim=0)[1].numpy()
        array([[1, 0],
               [0, 1]], dtype=int32)
    """
    inp = _t(inp, op="sort")
    if inp.ndim == 0:
        raise OpError(f"sort: input must have at least one dimension, got shape {inp.shape}")
    if inp.dtype.kind == "c":
        raise OpError("sort: cannot sort complex values")
    if isinstance(dim, Tensor) and dim.ndim == 0 and dim.dtype.kind in "iu":
        dim = int(dim)  # (MegEngine's swapaxes takes a 0-d integer Tensor: its upstream test_sort passes one)
    if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)) \
            or not -inp.ndim <= dim < inp.ndim:
        raise OpError(f"sort: dim {dim!r} out of range for an input of shape {inp.shape}")
    dim = int(dim) % inp.ndim
    op = _S.sort.bind(descending=bool(descending))
    if dim == inp.ndim - 1:
        return _apply(op, inp)
    # (the primitive sorts the last axis: the axis is swapped there and back, as MegEngine's own sort does)
    perm = list(range(inp.ndim))
    perm[dim], perm[-1] = perm[-1], perm[dim]
    values, idx = _apply(op, inp.transpose(perm))
    return values.transpose(perm), idx.transpose(perm)


def argsort(inp, descending=False):
    """The indices that sort a vector, or each row of a matrix.

    Args:
        inp: 1-D or 2-D tensor.
        descending: largest first.

    Returns:
        int32 indices.

    Example:
        >>> F.argsort(Tensor([3., 1., 2.])).numpy()
        array([1, 2, 0], dtype=int32)
    """
    inp = _sortable("argsort", inp)
    return _apply(_S.sort.bind(descending=bool(descending)), inp)[1]


def topk(inp, k, descending=True, kth_only=False, no_sort=False):
    """The ``k`` largest (``descending``, the default) or smallest elements of a vector or of each row.

    Args:
        inp: 1-D or 2-D tensor.
        k: how many (not 0); clamped to ``inp.shape[-1]`` as MegEngine does. A negative ``k`` takes ``-k``
            elements in the opposite order, as MegEngine's kernel reads k's sign.
        descending: take the largest; False takes the smallest.
        kth_only: return only the k-th element (and its index) per row.
        no_sort: the results need not be ordered (they are, here).

    Returns:
        ``(values, int32 indices)``.

    Example:
        >>> v, i = F.topk(Tensor([2., 5., 1., 4.]), 2)
        >>> v.numpy(), i.numpy()
        (array([5., 4.], dtype=float32), array([1, 3], dtype=int32))
    """
    inp = _sortable("topk", inp)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        k = int(_t(k, op="topk").item())
    if k < 0:
        # MegEngine hands k's sign to its kernel (`descending` negates k; a negative k takes the largest), so a
        # negative k flips the order: the zoo's box sampler asks for `k=num_samples - num_valid` (< 0)
        k, descending = -k, not descending
    if k < 1:
        raise OpError(f"topk: k={k} must be at least 1, or negative for the opposite order "
                      f"(last axis of size {inp.shape[-1]})")
    if inp.ndim == 1 and not kth_only and _lazy.same_rows(inp, inp):
        # a selection in place (auto-jit's): its first k rows sorted, in place too -- no read of its count to clamp
        # k, which the slice does (OHEM's ``topk(loss[neg], k)``); the same values and order as topk's
        values, indices = _apply(_S.sort.bind(descending=bool(descending)), inp)
        return values[:int(k)], indices[:int(k)]
    # MegEngine clamps k to the axis length (detection heads ask for k=2000 of fewer anchors and rely on it).
    k = builtins.min(int(k), _lazy.dim(inp, -1))  # (a selection's rows ranked along their last axis: no count read)
    return _apply(_S.topk.bind(k=int(k), descending=bool(descending), kth_only=bool(kth_only)), inp)


_topk = topk


def topk_accuracy(logits, target, topk=1):
    """Fraction of samples whose ``target`` is among the ``topk`` highest ``logits``
    (``megengine.functional.metric.topk_accuracy``).

    Args:
        logits: ``(batch, classes)`` scores.
        target: ``(batch,)`` integer labels.
        topk: an int, or a sequence of ints to get one accuracy per k.

    Returns:
        a 0-d float32 tensor, or a list of them for a sequence ``topk``.

    Example:
        >>> top1, top2 = F.topk_accuracy(Tensor([[0.1, 0.9], [0.8, 0.2]]), Tensor([1, 1]), topk=(1, 2))
        >>> top1.numpy(), top2.numpy()
        (array(0.5, dtype=float32), array(1., dtype=float32))
    """
    from .tensor import broadcast_to, reshape, astype
    logits, target = _t(logits, op="topk_accuracy"), _t(target, op="topk_accuracy")
    if logits.ndim != 2 or target.shape != logits.shape[:1]:
        raise OpError(f"topk_accuracy: expected logits (batch, classes) and target (batch,), got {logits.shape} "
                      f"and {target.shape}")
    ks = (topk,) if isinstance(topk, (int, np.integer)) else tuple(topk)
    _, pred = _topk(logits, builtins.max(ks), descending=True)
    n = logits.shape[0]
    tgt = reshape(astype(target, pred.dtype), (-1, 1))
    accs = []
    for k in ks:
        correct = _B["eq"](pred[:, :k], broadcast_to(tgt, (n, k)))
        accs.append(_B["truediv"](sum(astype(correct, "float32")), float(n)))
    return accs[0] if isinstance(topk, (int, np.integer)) else accs


def _check_non_finite(inps, scale=1.0):
    """Scale tensors in place by ``scale`` and say whether any of them holds a NaN or an inf (MegEngine's
    ``functional.math._check_non_finite``, the loss-scaling check of mixed precision).

    Args:
        inps: a Tensor or a list of float Tensors; each is replaced (``_reset``) by itself times ``scale``.
        scale: the factor.

    Returns:
        an int32 ``(1,)`` tensor: 1 if any input holds a non-finite value, else 0.

    Example:
        >>> xs = [Tensor([2.0, 4.0]), Tensor([1.0])]
        >>> flag = F.math._check_non_finite(xs, 0.5)
        >>> flag.numpy(), xs[0].numpy()
        (array([0], dtype=int32), array([1., 2.], dtype=float32))
    """
    from ..core.ops.builtin import CheckNonFinite
    if isinstance(inps, Tensor):
        inps = [inps]
    *outs, flag = CheckNonFinite(scale=scale)._apply(tuple(_t(x) for x in inps))
    for x, y in zip(inps, outs):
        x._reset(y)
    return flag
