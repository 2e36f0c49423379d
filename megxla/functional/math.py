"""Reductions and linear algebra (``megengine.functional.math``)."""
import builtins

from ..core._dispatch import apply as _apply
from ..core._elemwise_front import as_tensor as _t
from ..core.ops import reduction as _R, linalg as _L, nn as _N

__all__ = ["sum", "mean", "prod", "max", "min", "var", "std", "norm", "argmax", "argmin", "cumsum", "logsumexp",
           "matmul", "dot", "matinv", "svd", "normalize", "sort", "argsort", "topk"]


def _axis(x, axis):
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -x.ndim <= a < builtins.max(x.ndim, 1):
            raise ValueError(f"axis {a} is out of range for a tensor of shape {x.shape}")
        out.append(a % builtins.max(x.ndim, 1))
    return tuple(out)


def _reduce(prim, doc):
    def fn(inp, axis=None, keepdims=False):
        inp = _t(inp)
        return _apply(prim.bind(axis=_axis(inp, axis), keepdims=bool(keepdims)), inp)

    fn.__doc__ = f"""{doc}

    Args:
        inp: input tensor.
        axis: an int, a sequence of ints, or None for all axes.
        keepdims: keep reduced axes with size 1.

    Returns:
        the reduced Tensor.

    Example:
        >>> F.{prim.name.replace('reduce_', '')}(Tensor([[1., 2.], [3., 4.]]), axis=1)
    """
    return fn


sum = _reduce(_R.sum, "Sum of elements over ``axis``.")
mean = _reduce(_R.mean, "Mean of elements over ``axis``.")
prod = _reduce(_R.prod, "Product of elements over ``axis``.")
max = _reduce(_R.max, "Maximum over ``axis``.")
min = _reduce(_R.min, "Minimum over ``axis``.")
logsumexp = _reduce(_R.logsumexp, "``log(sum(exp(x)))`` over ``axis``, computed stably.")


def var(inp, axis=None, keepdims=False):
    """Variance (biased, as MegEngine) over ``axis``.

    Example:
        >>> F.var(Tensor([1., 2., 3., 4.]))  # 1.25
    """
    inp = _t(inp)
    return _apply(_R.var.bind(axis=_axis(inp, axis), keepdims=bool(keepdims), ddof=0), inp)


def std(inp, axis=None, keepdims=False):
    """Standard deviation (biased) over ``axis``.

    Example:
        >>> F.std(Tensor([1., 2., 3., 4.]))
    """
    from .elemwise import sqrt
    return sqrt(var(inp, axis, keepdims))


def norm(inp, ord=None, axis=None, keepdims=False):
    """Vector p-norm over ``axis`` (default: all elements, p=2).

    Example:
        >>> F.norm(Tensor([3., 4.]))  # 5.
    """
    inp = _t(inp)
    ord = 2 if ord is None else float(ord)
    return _apply(_R.norm.bind(ord=ord, axis=_axis(inp, axis), keepdims=bool(keepdims)), inp)


def normalize(inp, ord=None, axis=None, eps=1e-12):
    """``inp / max(norm(inp), eps)`` along ``axis``.

    Example:
        >>> F.normalize(Tensor([3., 4.]))  # [0.6, 0.8]
    """
    from .elemwise import maximum
    if axis is None:
        return inp / maximum(norm(inp, ord, None), eps)
    return inp / maximum(norm(inp, ord, axis, keepdims=True), eps)


def _arg(prim, doc):
    def fn(inp, axis=None, keepdims=False):
        inp = _t(inp)
        ax = _axis(inp, axis)
        if ax is not None and len(ax) != 1:
            raise ValueError(f"{prim.name}: axis must be a single int, got {axis}")
        return _apply(prim.bind(axis=None if ax is None else ax[0], keepdims=bool(keepdims)), inp)

    fn.__doc__ = f"""{doc}

    Args:
        inp: input tensor.
        axis: the axis, or None to search the flattened tensor.
        keepdims: keep the axis with size 1.

    Returns:
        int32 indices.

    Example:
        >>> F.{prim.name}(Tensor([1., 3., 2.]))  # 1
    """
    return fn


argmax = _arg(_R.argmax, "Indices of the maximum values along ``axis``.")
argmin = _arg(_R.argmin, "Indices of the minimum values along ``axis``.")


def cumsum(inp, axis):
    """Cumulative sum along ``axis``.

    Example:
        >>> F.cumsum(Tensor([1, 2, 3]), axis=0)  # [1, 3, 6]
    """
    inp = _t(inp)
    return _apply(_R.cumsum.bind(axis=_axis(inp, axis)[0]), inp)


def matmul(inp1, inp2, transpose_a=False, transpose_b=False, compute_mode="default", format="default"):
    """Matrix product with NumPy's broadcasting of batch dimensions.

    Args:
        inp1: left operand (1-D or more).
        inp2: right operand (1-D or more).
        transpose_a: transpose the last two dims of ``inp1`` first.
        transpose_b: transpose the last two dims of ``inp2`` first.
        compute_mode: accepted for MegEngine compatibility.

    Returns:
        the product.

    Example:
        >>> F.matmul(Tensor([[1., 2.]]), Tensor([[3.], [4.]]))  # [[11.]]
    """
    inp1, inp2 = _t(inp1), _t(inp2)
    return _apply(_L.matmul.bind(transpose_a=bool(transpose_a), transpose_b=bool(transpose_b)), inp1, inp2)


def dot(inp1, inp2):
    """Inner product of two vectors (flattened).

    Example:
        >>> F.dot(Tensor([1., 2.]), Tensor([3., 4.]))  # 11.
    """
    return _apply(_L.dot.bind(), _t(inp1), _t(inp2))


def matinv(inp):
    """Inverse of (a batch of) square matrices.

    Example:
        >>> F.matinv(Tensor([[2., 0.], [0., 4.]]))
    """
    return _apply(_L.matinv.bind(), _t(inp))


def svd(inp, full_matrices=False, compute_uv=True):
    """Singular value decomposition: ``(U, S, Vh)``, or ``S`` when ``compute_uv`` is False.

    Example:
        >>> u, s, vh = F.svd(Tensor([[1., 0.], [0., 2.]]))
    """
    u, s, vh = _apply(_L.svd.bind(full_matrices=bool(full_matrices)), _t(inp))
    return (u, s, vh) if compute_uv else s


from ..core.ops import sort as _S  # noqa: E402


def sort(inp, descending=False):
    """Sort along the last axis; returns ``(sorted, indices)``.

    Example:
        >>> v, i = F.sort(Tensor([3., 1., 2.]))
    """
    return _apply(_S.sort.bind(descending=bool(descending)), _t(inp))


def argsort(inp, descending=False):
    """Indices that sort ``inp`` along its last axis.

    Example:
        >>> F.argsort(Tensor([3., 1., 2.]))  # [1, 2, 0]
    """
    return sort(inp, descending)[1]


def topk(inp, k, descending=False, kth_only=False, no_sort=False):
    """The ``k`` smallest (or largest with ``descending``) elements along the last axis: ``(values, indices)``.

    Args:
        inp: 1-D or 2-D tensor.
        k: number of elements.
        descending: take the largest.
        kth_only: return only the k-th element (and its index).
        no_sort: results need not be sorted (they are, here).

    Example:
        >>> v, i = F.topk(Tensor([2., 5., 1.]), 2)  # [1., 2.], [2, 0]
    """
    inp = _t(inp)
    if not 1 <= k <= inp.shape[-1]:
        raise ValueError(f"topk: k={k} out of range for last axis of size {inp.shape[-1]}")
    v, i = sort(inp, descending)
    if kth_only:
        return v[..., k - 1], i[..., k - 1]
    return v[..., :k], i[..., :k]
