"""Tensor creation and manipulation (``megengine.functional.tensor``)."""
import builtins

import numpy as np

from ..core._tensor import Tensor
from ..core._dispatch import apply as _apply
from ..core._elemwise_front import as_tensor as _t
from ..core.dtypes import canonical as _dtype
from ..core.ops import shape as _S, elemwise as _E, indexing as _I

__all__ = ["astype", "reshape", "flatten", "transpose", "broadcast_to", "expand_dims", "squeeze", "concat",
           "stack", "split", "flip", "roll", "tile", "repeat", "copy", "zeros", "ones", "full", "zeros_like",
           "ones_like", "full_like", "arange", "linspace", "eye", "gather", "scatter", "swapaxes", "cond_take",
           "where", "indexing_one_hot"]


def astype(x, dtype):
    """Cast to ``dtype``.

    Example:
        >>> F.astype(Tensor([1.7]), "int32")  # [1]
    """
    x = _t(x)
    dtype = _dtype(dtype)
    if x.dtype == dtype:
        return x
    return _apply(_E.astype.bind(dtype=dtype.name), x)


def _infer_shape(size, shape, op="reshape"):
    shape = [int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,))]
    if shape.count(-1) > 1:
        raise ValueError(f"{op}: at most one -1 in target shape {tuple(shape)}")
    known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
    if -1 in shape:
        if known == 0 or size % known:
            raise ValueError(f"{op}: cannot reshape {size} elements into {tuple(shape)}")
        shape[shape.index(-1)] = size // known
    elif known != size:
        raise ValueError(f"{op}: cannot reshape a tensor of {size} elements into shape {tuple(shape)}")
    return tuple(shape)


def reshape(inp, target_shape):
    """Give ``inp`` a new shape with the same number of elements (one dim may be -1).

    Example:
        >>> F.reshape(Tensor([1, 2, 3, 4]), (2, -1)).shape  # (2, 2)
    """
    inp = _t(inp)
    if isinstance(target_shape, Tensor):
        target_shape = target_shape.tolist()
    shape = _infer_shape(inp.size, target_shape)
    if shape == inp.shape:
        return inp
    return _apply(_S.reshape.bind(shape=shape), inp)


def flatten(inp, start_axis=0, end_axis=-1):
    """Flatten axes ``start_axis..end_axis`` into one.

    Example:
        >>> F.flatten(Tensor(np.ones((2, 3, 4))), 1).shape  # (2, 12)
    """
    inp = _t(inp)
    nd = builtins.max(inp.ndim, 1)
    s, e = start_axis % nd, end_axis % nd
    shape = inp.shape[:s] + (-1,) + inp.shape[e + 1:]
    return reshape(inp, shape)


def transpose(inp, pattern):
    """Permute axes by ``pattern``; ``'x'`` in the pattern inserts a new axis of size 1.

    Example:
        >>> F.transpose(Tensor(np.ones((2, 3))), (1, 0)).shape  # (3, 2)
    """
    inp = _t(inp)
    pattern = tuple(pattern)
    if "x" in pattern:
        real = [p for p in pattern if p != "x"]
        out = transpose(inp, real)
        return reshape(out, tuple(1 if p == "x" else inp.shape[p] for p in pattern))
    if sorted(pattern) != list(range(inp.ndim)):
        raise ValueError(f"transpose: pattern {pattern} is not a permutation of the axes of shape {inp.shape}")
    return _apply(_S.transpose.bind(perm=pattern), inp)


def swapaxes(inp, axis1, axis2):
    """Swap two axes.

    Example:
        >>> F.swapaxes(Tensor(np.ones((2, 3))), 0, 1).shape  # (3, 2)
    """
    inp = _t(inp)
    perm = list(range(inp.ndim))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return transpose(inp, perm)


def broadcast_to(inp, shape):
    """Broadcast to ``shape`` (NumPy rules).

    Example:
        >>> F.broadcast_to(Tensor([1., 2.]), (3, 2)).shape  # (3, 2)
    """
    inp = _t(inp)
    shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    try:
        np.broadcast_shapes(inp.shape, shape)
        if len(shape) < inp.ndim:
            raise ValueError
    except ValueError:
        raise ValueError(f"broadcast_to: cannot broadcast shape {inp.shape} to {shape}") from None
    return _apply(_S.broadcast_to.bind(shape=shape), inp)


def expand_dims(inp, axis):
    """Insert size-1 axes at ``axis`` (int or sequence).

    Example:
        >>> F.expand_dims(Tensor([1., 2.]), 0).shape  # (1, 2)
    """
    inp = _t(inp)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    nd = inp.ndim + len(axes)
    return _apply(_S.expand_dims.bind(axis=tuple(sorted(a % nd for a in axes))), inp)


def squeeze(inp, axis=None):
    """Remove size-1 axes (all, or those in ``axis``).

    Example:
        >>> F.squeeze(Tensor(np.ones((1, 2, 1))), 2).shape  # (1, 2)
    """
    inp = _t(inp)
    if axis is None:
        axes = tuple(i for i, s in enumerate(inp.shape) if s == 1)
    else:
        axes = tuple(a % inp.ndim for a in ((axis,) if isinstance(axis, int) else axis))
        for a in axes:
            if inp.shape[a] != 1:
                raise ValueError(f"squeeze: axis {a} of shape {inp.shape} has size {inp.shape[a]}, not 1")
    return _apply(_S.squeeze.bind(axis=axes), inp)


def concat(inps, axis=0, device=None):
    """Concatenate tensors along ``axis``.

    Example:
        >>> F.concat([Tensor([1.]), Tensor([2., 3.])]).shape  # (3,)
    """
    inps = [_t(x) for x in inps]
    if not inps:
        raise ValueError("concat: needs at least one tensor")
    if len(inps) == 1:
        return inps[0]
    axis = axis % inps[0].ndim
    return _apply(_S.concat.bind(axis=axis), *inps)


def stack(inps, axis=0, device=None):
    """Stack same-shape tensors along a new axis.

    Example:
        >>> F.stack([Tensor([1., 2.]), Tensor([3., 4.])]).shape  # (2, 2)
    """
    inps = [_t(x) for x in inps]
    shapes = {x.shape for x in inps}
    if len(shapes) != 1:
        raise ValueError(f"stack: all inputs must have the same shape, got {sorted(shapes)}")
    return _apply(_S.stack.bind(axis=axis % (inps[0].ndim + 1)), *inps)


def split(inp, nsplits_or_sections, axis=0):
    """Split into ``n`` equal parts (int) or at the given section indices (list).

    Example:
        >>> a, b = F.split(Tensor([1., 2., 3., 4.]), 2)
    """
    inp = _t(inp)
    axis = axis % inp.ndim
    if isinstance(nsplits_or_sections, int):
        n = nsplits_or_sections
        size = inp.shape[axis]
        if n <= 0 or size % n:
            raise ValueError(f"split: axis {axis} of size {size} cannot be split into {n} equal parts")
        indices = tuple(range(size // n, size, size // n))
    else:
        indices = tuple(int(i) for i in nsplits_or_sections)
    return list(_apply(_S.split.bind(indices=indices, axis=axis), inp))


def flip(inp, axis):
    """Reverse the order of elements along ``axis``.

    Example:
        >>> F.flip(Tensor([1., 2.]), 0)  # [2., 1.]
    """
    inp = _t(inp)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return _apply(_S.flip.bind(axis=tuple(a % inp.ndim for a in axes)), inp)


def roll(inp, shift, axis=None):
    """Roll elements along ``axis`` (flattened if None).

    Example:
        >>> F.roll(Tensor([1., 2., 3.]), 1)  # [3., 1., 2.]
    """
    inp = _t(inp)
    return _apply(_S.roll.bind(shift=shift if isinstance(shift, int) else tuple(shift),
                               axis=axis if axis is None or isinstance(axis, int) else tuple(axis)), inp)


def tile(inp, reps):
    """Repeat the whole tensor ``reps`` times along each axis.

    Example:
        >>> F.tile(Tensor([1., 2.]), (2,))  # [1., 2., 1., 2.]
    """
    return _apply(_S.tile.bind(reps=tuple(reps)), _t(inp))


def repeat(inp, repeats, axis=None):
    """Repeat each element ``repeats`` times along ``axis`` (flattened if None).

    Example:
        >>> F.repeat(Tensor([1., 2.]), 2)  # [1., 1., 2., 2.]
    """
    return _apply(_S.repeat.bind(repeats=int(repeats), axis=axis), _t(inp))


def copy(inp, device=None):
    """A copy of ``inp`` (on ``device`` if given).

    Example:
        >>> F.copy(Tensor([1.]))
    """
    inp = _t(inp)
    return inp.to(device) if device is not None else _apply(_S.copy.bind(), inp)


def _shape(shape):
    if isinstance(shape, Tensor):
        shape = shape.tolist()
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def full(shape, value, dtype="float32", device=None):
    """A tensor of ``shape`` filled with ``value``.

    Example:
        >>> F.full((2,), 7)  # [7., 7.]
    """
    dtype = _dtype(dtype) if dtype is not None else np.asarray(value).dtype
    out = _apply(_S.full.bind(shape=_shape(shape), value=float(value) if dtype.kind == "f" else value,
                              dtype=dtype.name))
    return out.to(device) if device is not None else out


def zeros(shape, dtype="float32", device=None):
    """A tensor of zeros.

    Example:
        >>> F.zeros((2, 3)).shape  # (2, 3)
    """
    return full(shape, 0, dtype, device)


def ones(shape, dtype="float32", device=None):
    """A tensor of ones.

    Example:
        >>> F.ones(3)  # [1., 1., 1.]
    """
    return full(shape, 1, dtype, device)


def full_like(inp, value):
    """A tensor like ``inp`` filled with ``value``.

    Example:
        >>> F.full_like(Tensor([1, 2]), 5)  # [5, 5]
    """
    inp = _t(inp)
    value = float(value) if inp.dtype.kind == "f" else value
    return _apply(_S.full_like.bind(value=value), inp)


def zeros_like(inp):
    """Zeros shaped and typed like ``inp``.

    Example:
        >>> F.zeros_like(Tensor([1., 2.]))  # [0., 0.]
    """
    return full_like(inp, 0)


def ones_like(inp):
    """Ones shaped and typed like ``inp``.

    Example:
        >>> F.ones_like(Tensor([1., 2.]))  # [1., 1.]
    """
    return full_like(inp, 1)


def arange(start=0, stop=None, step=1, *, dtype="float32", device=None):
    """Evenly spaced values in ``[start, stop)``.

    Example:
        >>> F.arange(3)  # [0., 1., 2.]
    """
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    out = _apply(_S.arange.bind(start=start, stop=stop, step=step, dtype=_dtype(dtype).name))
    return out.to(device) if device is not None else out


def linspace(start, stop, num, *, dtype="float32", device=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` inclusive.

    Example:
        >>> F.linspace(0, 1, 3)  # [0., 0.5, 1.]
    """
    out = _apply(_S.linspace.bind(start=float(start), stop=float(stop), num=int(num), dtype=_dtype(dtype).name))
    return out.to(device) if device is not None else out


def eye(N, M=None, *, dtype="float32", device=None):
    """The identity matrix (``N x M``).

    Example:
        >>> F.eye(2)  # [[1., 0.], [0., 1.]]
    """
    if isinstance(N, (tuple, list)):
        N, M = N
    out = _apply(_S.eye.bind(n=int(N), m=None if M is None else int(M), k=0, dtype=_dtype(dtype).name))
    return out.to(device) if device is not None else out


def gather(inp, axis, index):
    """Gather values along ``axis`` at ``index`` (same rank as ``inp``).

    Example:
        >>> F.gather(Tensor([[1., 2.], [3., 4.]]), 1, Tensor([[1], [0]]))  # [[2.], [3.]]
    """
    inp, index = _t(inp), _t(index)
    if index.ndim != inp.ndim:
        raise ValueError(f"gather: index rank {index.ndim} must equal input rank {inp.ndim}")
    return _apply(_I.gather.bind(axis=axis % inp.ndim), inp, index)


def scatter(inp, axis, index, source):
    """Write ``source`` into a copy of ``inp`` along ``axis`` at ``index``.

    Example:
        >>> F.scatter(F.zeros((2, 2)), 1, Tensor([[1], [0]]), Tensor([[5.], [6.]]))
    """
    inp, index, source = _t(inp), _t(index), _t(source)
    if index.shape != source.shape:
        raise ValueError(f"scatter: index shape {index.shape} must equal source shape {source.shape}")
    return _apply(_I.scatter.bind(axis=axis % inp.ndim), inp, index, source)


def indexing_one_hot(src, index, axis=1, keepdims=False):
    """Pick ``src[..., index, ...]`` along ``axis`` for each position of ``index``.

    Example:
        >>> F.indexing_one_hot(Tensor([[1., 2.], [3., 4.]]), Tensor([1, 0]))  # [2., 3.]
    """
    src, index = _t(src), _t(index)
    return _apply(_I.indexing_one_hot.bind(axis=axis % src.ndim, keepdims=bool(keepdims)), src, index)


def cond_take(mask, x):
    """Elements of ``x`` where ``mask`` is true, and their flat indices: ``(values, indices)``.

    Example:
        >>> v, i = F.cond_take(Tensor([True, False]), Tensor([1., 2.]))
    """
    mask, x = _t(mask), _t(x)
    if mask.shape != x.shape:
        raise ValueError(f"cond_take: mask shape {mask.shape} must equal x shape {x.shape}")
    idx = Tensor(np.flatnonzero(mask.numpy()).astype(np.int32))
    return flatten(x)[idx], idx


from .elemwise import where  # noqa: E402,F401
