"""Tensor creation and manipulation (``megengine.functional.tensor``).

Every function validates its arguments on the host (shapes, axes and dtypes are static), raising an
:class:`~megxla.core.OpError` that names the function, then applies one primitive -- or, for composites
(``meshgrid``, ``polar``, ``swapaxes``…), a few.
"""
import builtins
import math as _math

import numpy as np

from ..core._tensor import Tensor, keep_qparams, QPARAMS_SEEN as _QPARAMS_SEEN
from ..core._dispatch import apply as _apply, OpError, current_interpreter
from ..core import _lazy, _registry
from ..core._indexing import check_index_tensor, mask_indices
from ..core._elemwise_front import as_tensor as _t, BINARY as _B, UNARY as _U, _scalar
from ..core import dtypes as _dtypes
from ..core.dtypes import is_float
from ..core.dtypes import held as _dtype
from ..core.ops import shape as _S, elemwise as _E, indexing as _I, linalg as _L, reduction as _R

__all__ = ["arange", "broadcast_to", "complex", "concat", "cond_take", "copy", "cumsum", "diag", "expand_dims",
           "eye", "flatten", "full", "full_like", "gather", "imag", "linspace", "meshgrid", "ones", "ones_like",
           "polar", "real", "repeat", "reshape", "roll", "scatter", "split", "squeeze", "stack", "swapaxes",
           "tile", "transpose", "where", "zeros", "zeros_like", "astype", "flip", "indexing_one_hot", "non_zero"]


# ---- argument helpers ------------------------------------------------------------------------------------------
def _axis(op, ndim, axis, extra=0):
    """``axis`` normalised into ``[0, ndim + extra)``, or an OpError naming ``op``."""
    n = ndim + extra
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise OpError(f"{op}: axis must be an int, got {axis!r}")
    if not -n <= axis < builtins.max(n, 1) or n == 0:
        raise OpError(f"{op}: axis {axis} is out of range for {n} dimensions")
    return int(axis) % n


def _axes(op, ndim, axis, extra=0):
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = tuple(_axis(op, ndim, a, extra) for a in axes)
    if len(set(out)) != len(out):
        raise OpError(f"{op}: repeated axis in {axis!r}")
    return out


def _ints(op, what, values):
    if type(values) is tuple and all(type(v) is int for v in values):  # (the common case: ~4x faster)
        return values
    if isinstance(values, Tensor):
        values = values.tolist()
    if isinstance(values, (int, np.integer)):
        values = (values,)
    try:
        out = tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise OpError(f"{op}: {what} must be a sequence of ints, got {values!r}") from None
    for v, o in zip(values, out):
        if isinstance(v, (float, np.floating)) and v != o:
            raise OpError(f"{op}: {what} must be a sequence of ints, got {values!r}")
    return out


def _one_device(op, inps, device):
    """MegEngine's rule for joining tensors (``concat``, ``stack``) with no ``device`` given: they must be on one
    device (logical devices: ``Tensor(x, device="cpu1")``); ``device=`` names where the result goes."""
    if device is not None or not _dtypes.LOGICAL[0]:  # (no tensor has a logical device of its own: all alike)
        return
    # (a tensor on the default device, ``xpux``, joins any: only two devices named apart conflict)
    named = [str(t.device) for t in inps]
    named = [d for d in named if not d.startswith("xpu")]
    for d in named[1:]:
        if d != named[0]:
            raise OpError(f"{op}: inputs on different devices ({named[0]} and {d}); give device= to say "
                          f"where the result goes")


def _place(x, device):
    """``x``, a new op result nothing else holds, on ``device``: moved where it is elsewhere; where it is there
    already, only named as ``Tensor.to`` names it (no copy: under auto-jit a transfer runs eagerly and cuts the
    cluster, and ``F.zeros(shape, device=x.device)`` is common in anchor and head code)."""
    if device is None:
        return x
    try:
        here = x._data.devices()
    except Exception:  # (a traced value has no device: the transfer is recorded as ever)
        here = None
    if here is not None and len(here) == 1 and _dtypes.to_device(device) in here:
        node = _dtypes.logical_node(device)
        if node is not None or _dtypes.LOGICAL[0]:
            x._lnode = node
        return x
    return x.to(device)


# ---- casting and shapes ----------------------------------------------------------------------------------------
def astype(x, dtype):
    """Cast to ``dtype``.

    Args:
        x: input tensor.
        dtype: target dtype (name, NumPy dtype or type).

    Returns:
        ``x`` itself if it already has ``dtype``, else a converted copy.

    Example:
        >>> F.astype(Tensor([1.7]), "int32").numpy()
        array([1], dtype=int32)
    """
    x = _t(x, op="astype")
    quantized = _is_quantized_dtype(dtype)
    source = _quantized_source(x)
    if quantized or source is not None:
        return _astype_quantized(x, dtype, quantized, source)
    try:
        dtype = _dtypes.held(dtype)
    except TypeError:
        raise OpError(f"astype: unknown dtype {dtype!r}") from None
    if x.dtype == dtype:
        return x
    return _apply(_E.astype.bind(dtype=_dtypes.name_of(dtype)), x)


def _is_quantized_dtype(dtype):
    md = getattr(dtype, "metadata", None)
    return md is not None and "mgb_dtype" in md


def _quantized_source(x):
    """``(scale, zero_point)`` Tensors of a quantized tensor (integer storage with quantization parameters),
    else None."""
    q = getattr(x, "_qparams", None)
    if q is None or q.scale is None or q.dtype_meta is None or not np.issubdtype(x._data.dtype, np.integer):
        return None
    scale = q.scale if isinstance(q.scale, Tensor) else Tensor(q.scale, dtype="float32")
    zp = q.zero_point if q.zero_point is not None else 0.0
    return scale, (zp if isinstance(zp, Tensor) else Tensor(zp, dtype="float32"))


def _astype_quantized(x, dtype, quantized, source):
    # MegEngine converts through the real value: from a quantized dtype it dequantizes ((q - zp) * scale,
    # then casts: astype("int32") truncates the real value), to one it quantizes (round, saturate to the
    # MegBrain dtype's range: QuantizedS4 to [-8, 7], Quantized4Asymm to [0, 15], QuantizedS1 to [0, 1] -- not
    # their int8 / uint8 storage's, which gave quint4 values up to 255 until 2026-12-05); quantized to quantized
    # requantizes
    from ..core._tensor import QPARAMS_FACTORY, QPARAMS_SEEN
    from ..core.ops import quant as _q
    from ..core.tensor.dtype import get_quant_meta, saturation_range
    if not quantized:
        value = x if source is None else _apply(_q.dequantize.bind(), x, *source)
        target = _dtype(dtype)
        return value if value.dtype == target else _apply(_E.astype.bind(dtype=target.name), value)
    info = dtype.metadata["mgb_dtype"]
    meta = get_quant_meta(dtype)
    if np.isnan(info["scale"]):
        # (MegEngine asserts ``!std::isnan(scale)`` making the dtype's parameters: a QAT module whose observer saw a
        # NaN -- a BatchNorm over one value per channel folded into its weight -- fails in quantize() there)
        raise OpError(f"astype: the quantized dtype {meta.name} has a NaN scale")
    qmin, qmax = saturation_range(meta)
    scale = Tensor(np.float32(info["scale"]))
    zp = None if info.get("zero_point") is None else Tensor(np.float32(info["zero_point"]))
    zp_out = zp if zp is not None else Tensor(np.float32(0))
    if source is not None:
        # MegEngine's TypeCvt between quantized dtypes (megdnn's fallback kernels) computes, between 8- and 32-bit
        # ones, round((q - zp) * (s_in / s_out)) + zp_out with the ratio in float32, and with a 4-bit one on either
        # side (its naive kernel) the real value (q - zp) * s_in divided by s_out: at ties both round apart from
        # the real value times 1 / s_out (qint32(0.51) -145 to qint32(0.02): -3698, not -3697; megengine_quant_fuzz
        # seed 29 case 4)
        lo, hi = saturation_range(x._qparams.dtype_meta)
        op = _q.requantize.bind(qmin=qmin, qmax=qmax, dtype=meta.np_dtype_str, relu=False,
                                via_real=hi - lo <= 15 or qmax - qmin <= 15)
        out = _apply(op, _apply(_q.dequantize.bind(), x, Tensor(np.float32(1)), source[1]), source[0], scale, zp_out)
    else:
        value = x if x.dtype == np.float32 else _apply(_E.astype.bind(dtype="float32"), x)
        out = _apply(_q.quantize.bind(qmin=qmin, qmax=qmax, dtype=meta.np_dtype_str), value, scale, zp_out)
    out._qparams = QPARAMS_FACTORY[0](meta, scale, zp)
    QPARAMS_SEEN[0] = True
    return out


def _infer_shape(size, shape, op="reshape", src=None):
    # (``src``: the input's shape, named in the message)
    of = f"a tensor of {size} elements" if src is None else f"a tensor of shape {tuple(src)} ({size} elements)"
    shape = _ints(op, "target_shape", shape)
    if -1 not in shape and min(shape, default=0) >= 0:  # (no size to infer, none negative)
        if _math.prod(shape) != size:
            raise OpError(f"{op}: cannot reshape {of} into shape {shape}")
        return shape
    shape = list(shape)
    if shape.count(-1) > 1:
        raise OpError(f"{op}: at most one -1 in target shape {tuple(shape)}")
    if any(s < -1 for s in shape):
        raise OpError(f"{op}: negative size in target shape {tuple(shape)}")
    known = _math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if known == 0 or size % known:
            raise OpError(f"{op}: cannot reshape {of} into shape {tuple(shape)}")
        shape[shape.index(-1)] = size // known
    elif known != size:
        raise OpError(f"{op}: cannot reshape {of} into shape {tuple(shape)}")
    return tuple(shape)


def _through_float(inp, fn):
    """``fn(inp)`` for a quantized tensor stored as integers (``inp.qparams`` set), for an ``fn`` that commutes
    with the scale (averages, interpolation): computed on the integers less the zero point and rounded back
    (half away from zero) with the same parameters, as MegEngine's integer kernels compute (a window of
    sum 38 averages to 9.5 and rounds to 10; through the real values ``38 * s / 4 / s`` may land on 9.4999);
    None for any other input."""
    q = getattr(inp, "_qparams", None)
    if q is None or q.scale is None or q.dtype_meta is None or not np.issubdtype(inp.dtype, np.integer):
        return None
    from ..core.ops import quant as _q
    from ..core._tensor import Tensor as _T
    one = _T(np.float32(1.0))
    zp = q.zero_point if q.zero_point is not None else _T(0.0)
    out = fn(_apply(_q.dequantize.bind(), inp, one, zp))
    meta = q.dtype_meta
    out = _apply(_q.quantize.bind(qmin=meta.qmin, qmax=meta.qmax, dtype=meta.np_dtype_str), out, one, zp)
    out._qparams = q
    return out


def reshape(inp, target_shape):
    """Give ``inp`` a new shape with the same number of elements; one dimension may be ``-1`` (inferred).

    Args:
        inp: input tensor.
        target_shape: the new shape (ints, a list, or a 1-D int Tensor).

    Returns:
        the reshaped tensor.

    Example:
        >>> F.reshape(F.arange(12), (3, -1)).shape
        (3, 4)
    """
    inp = _t(inp, op="reshape")
    kept = _lazy.kept_rows(inp, target_shape)
    if kept is not None:  # (auto-jit's selection in place, its rows kept: ``y.reshape(n, -1)``, no count read)
        return keep_qparams(_apply(_S.reshape.bind(shape=kept), inp), inp)
    shape = _infer_shape(_math.prod(inp.shape), target_shape, src=inp.shape)  # Tensor.size of 0-d is 1.0
    # NOTE: always a new tensor, never ``inp`` itself, even for an unchanged shape: an in-place update of the
    # result (``y += 1``, ``y[0] = 5``) must not rebind the input (MegEngine has no views).
    return keep_qparams(_apply(_S.reshape.bind(shape=shape), inp), inp)


def flatten(inp, start_axis=0, end_axis=-1):
    """Flatten the axes ``start_axis..end_axis`` (inclusive) into one.

    Args:
        inp: input tensor.
        start_axis: first axis to flatten.
        end_axis: last axis to flatten.

    Returns:
        the flattened tensor.

    Example:
        >>> F.flatten(F.ones((2, 3, 4)), 1).shape
        (2, 12)
    """
    inp = _t(inp, op="flatten")
    if inp.ndim == 0:
        return reshape(inp, (1,))
    s, e = _axis("flatten", inp.ndim, start_axis), _axis("flatten", inp.ndim, end_axis)
    if s > e:
        raise OpError(f"flatten: start_axis {start_axis} comes after end_axis {end_axis} for shape {inp.shape}")
    # (a selection in place: its count read -- eager's error for none: a -1 among zeros --, its rows kept by reshape)
    return reshape(inp, inp.shape[:s] + (-1,) + inp.shape[e + 1:])


def transpose(inp, pattern):
    """Permute the axes of ``inp`` by ``pattern``; an ``'x'`` in the pattern inserts a new axis of size 1.

    Args:
        inp: input tensor.
        pattern: a permutation of ``range(inp.ndim)``, possibly with ``'x'`` entries.

    Returns:
        the permuted tensor.

    Example:
        >>> F.transpose(F.ones((2, 3)), (1, 'x', 0)).shape
        (3, 1, 2)
    """
    inp = _t(inp, op="transpose")
    pattern = tuple(pattern)
    real = tuple(p for p in pattern if not (isinstance(p, str) and p == "x"))
    if any(isinstance(p, str) for p in real) or sorted(real) != list(range(inp.ndim)):
        raise OpError(f"transpose: pattern {pattern} is not a permutation of the axes of shape {inp.shape}")
    out = _apply(_S.transpose.bind(perm=real), inp)
    if len(real) != len(pattern):
        out = reshape(out, tuple(1 if isinstance(p, str) else inp.shape[p] for p in pattern))
    return keep_qparams(out, inp)


def swapaxes(inp, axis1, axis2):
    """Swap two axes.

    Args:
        inp: input tensor.
        axis1: first axis.
        axis2: second axis.

    Returns:
        the tensor with ``axis1`` and ``axis2`` exchanged.

    Example:
        >>> F.swapaxes(F.ones((2, 3)), 0, 1).shape
        (3, 2)
    """
    inp = _t(inp, op="swapaxes")
    a, b = _axis("swapaxes", inp.ndim, axis1), _axis("swapaxes", inp.ndim, axis2)
    perm = list(range(inp.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(inp, perm)


def broadcast_to(inp, shape):
    """Broadcast ``inp`` to ``shape`` (NumPy's rules: trailing dimensions match or are 1).

    Args:
        inp: input tensor.
        shape: the target shape; a None entry keeps the input's size on that axis (axes align from the right).

    Returns:
        the broadcast tensor.

    Example:
        >>> F.broadcast_to(Tensor([1., 2.]), (3, 2)).shape
        (3, 2)
    """
    inp = _t(inp, op="broadcast_to")
    if isinstance(shape, (tuple, list)) and any(d is None for d in shape):
        # MegEngine: None keeps the input's size on that (right-aligned) axis: broadcast_to(x, (2, None, 4))
        lead = len(shape) - inp.ndim
        if lead < 0 or any(d is None and i < lead for i, d in enumerate(shape)):
            raise OpError(f"broadcast_to: None in {tuple(shape)} has no matching axis of the input shape {inp.shape}")
        shape = tuple(inp.shape[i - lead] if d is None else d for i, d in enumerate(shape))
    shape = _ints("broadcast_to", "shape", shape)
    if shape == () and inp.shape == (1,):
        # (MegEngine takes a 0-d shape as (1,): its one element, as a 0-d tensor -- megengine_fuzz seed 17)
        return reshape(inp, ())
    try:
        if len(shape) < inp.ndim or np.broadcast_shapes(inp.shape, shape) != shape:
            raise ValueError
    except ValueError:
        raise OpError(f"broadcast_to: cannot broadcast shape {inp.shape} to {shape}") from None
    return keep_qparams(_apply(_S.broadcast_to.bind(shape=shape), inp), inp)


def expand_dims(inp, axis):
    """Insert size-1 axes at the positions ``axis`` (of the result).

    Args:
        inp: input tensor.
        axis: an int or a sequence of ints.

    Returns:
        the expanded tensor.

    Example:
        >>> F.expand_dims(Tensor([1., 2.]), (0, 2)).shape
        (1, 2, 1)
    """
    inp = _t(inp, op="expand_dims")
    if isinstance(axis, Tensor):  # MegEngine reads a tensor's value (a 0-d one is one axis)
        axis = axis.numpy().tolist()
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    n = len(axes)
    axes = sorted(_axis("expand_dims", inp.ndim, a, extra=n) for a in axes)
    # NOTE: MegEngine's AddAxis inserts the sorted axes one after another into the growing shape, so a repeated
    # axis adds another axis there (``expand_dims(x, [0, 0])`` is ``(1, 1, *x.shape)``); these are the result
    # positions of that sequence
    placed = []
    for i, p in enumerate(axes):
        if p > inp.ndim + i:
            raise OpError(f"expand_dims: axis {p} is out of range when inserting axes {axes} into a tensor of shape "
                          f"{tuple(inp.shape)}")
        placed = [q + 1 if q >= p else q for q in placed] + [p]
    return keep_qparams(_apply(_S.expand_dims.bind(axis=tuple(sorted(placed))), inp), inp)


def squeeze(inp, axis=None):
    """Remove size-1 axes: all of them, or those in ``axis``.

    Args:
        inp: input tensor.
        axis: None, an int or a sequence of ints.

    Returns:
        the squeezed tensor.

    Example:
        >>> F.squeeze(F.ones((1, 2, 1)), 2).shape
        (1, 2)
    """
    inp = _t(inp, op="squeeze")
    if axis is None:
        axes = tuple(i for i, s in enumerate(inp.shape) if s == 1)
    else:
        axes = _axes("squeeze", inp.ndim, axis)
        for a in axes:
            if inp.shape[a] != 1:
                raise OpError(f"squeeze: axis {a} of shape {inp.shape} has size {inp.shape[a]}, not 1")
    return keep_qparams(_apply(_S.squeeze.bind(axis=axes), inp), inp)


def concat(inps, axis=0, device=None):
    """Concatenate tensors along an existing axis.

    Args:
        inps: a sequence of tensors, equal in shape except along ``axis``.
        axis: the axis to join along.
        device: where to put the result (default: the inputs' device).

    Returns:
        the concatenated tensor.

    Example:
        >>> F.concat([F.ones((1, 2)), F.zeros((2, 2))]).shape
        (3, 2)
    """
    inps = [_t(x, op="concat") for x in inps]
    if not inps:
        raise OpError("concat: needs at least one tensor")
    # MegEngine stores a 0-d tensor as one element: concatenating scalars (or scalars with 1-d tensors) gives
    # a 1-d tensor (detectors build `F.concat([scale_w, scale_h, ...])` from `im_info[0, 1]`-style scalars).
    if any(x.ndim == 0 for x in inps) and all(x.ndim <= 1 for x in inps):
        inps = [reshape(x, (1,)) if x.ndim == 0 else x for x in inps]
    nd = inps[0].ndim
    axis = _axis("concat", nd, axis)
    for x in inps[1:]:
        # (``shape_key``: two selections of the same rows joined along another axis read no count)
        if x.ndim != nd or _lazy.shape_key(x, axis) != _lazy.shape_key(inps[0], axis) \
                and x.shape[:axis] + x.shape[axis + 1:] != inps[0].shape[:axis] + inps[0].shape[axis + 1:]:
            raise OpError(f"concat: shapes {[t.shape for t in inps]} differ outside axis {axis}")
    if len(inps) == 1:  # a copy, not the input itself (see reshape)
        return copy(inps[0], device)
    _one_device("concat", inps, device)
    inps, q = _same_quantized("concat", inps)
    return _with_qparams(_place(_apply(_S.concat.bind(axis=axis), *inps), device), q)


def _same_quantized(op, inps):
    """Where one of ``inps`` is a quantized tensor, MegEngine joins them in its quantized dtype: the others are
    converted to it (quantized from their values; another scale raises). Returns the inputs and the QParams
    (None: no quantized input)."""
    from ..core._elemwise_front import quantized_params, to_quantized
    q = next((p for p in map(quantized_params, inps) if p is not None), None)
    if q is None:
        return inps, None
    return [to_quantized(x, q, op) for x in inps], q


def _with_qparams(out, q):
    if q is not None:
        out._qparams = q
    return out


def stack(inps, axis=0, device=None):
    """Stack same-shape tensors along a new axis.

    Args:
        inps: a sequence of tensors of one shape.
        axis: position of the new axis in the result.
        device: where to put the result.

    Returns:
        the stacked tensor.

    Example:
        >>> F.stack([Tensor([1., 2.]), Tensor([3., 4.])], axis=1).shape
        (2, 2)
    """
    inps = [_t(x, op="stack") for x in inps]
    if not inps:
        raise OpError("stack: needs at least one tensor")
    # (the shapes compared as known: stacking a selection's indices reads no count)
    if len({_lazy.shape_key(x) for x in inps}) != 1 and len({x.shape for x in inps}) != 1:
        raise OpError(f"stack: all inputs must have the same shape, got {[x.shape for x in inps]}")
    axis = _axis("stack", inps[0].ndim, axis, extra=1)
    _one_device("stack", inps, device)
    inps, q = _same_quantized("stack", inps)
    return _with_qparams(_place(_apply(_S.stack.bind(axis=axis), *inps), device), q)


def split(inp, nsplits_or_sections, axis=0):
    """Split ``inp`` along ``axis`` into ``n`` near-equal parts (an int; the first parts are one larger when
    the size does not divide) or at the given increasing section indices (a list).

    Args:
        inp: input tensor.
        nsplits_or_sections: an int number of parts, or a sequence of split points.
        axis: the axis to split.

    Returns:
        a tuple of tensors.

    Example:
        >>> [t.shape for t in F.split(F.ones((5, 2)), 2)]
        [(3, 2), (2, 2)]
    """
    inp = _t(inp, op="split")
    axis = _axis("split", inp.ndim, axis)
    size = _lazy.dim(inp, axis)  # (a selection split along another axis: no count read)
    if isinstance(nsplits_or_sections, Tensor):  # MegEngine reads a tensor's value: a 0-d one is a count
        nsplits_or_sections = nsplits_or_sections.numpy().tolist()
    if isinstance(nsplits_or_sections, (int, np.integer)):
        n = int(nsplits_or_sections)
        # (MegEngine's messages, word for word)
        if n <= 0:
            raise OpError("Number sections must be larger than 0")
        if n > size:
            raise OpError(f"The size {size} at dim {axis} cannot be split into {n} sections")
        sizes = [(size + n - i - 1) // n for i in range(n)]
        indices = tuple(int(v) for v in np.cumsum(sizes)[:-1])
    else:
        indices = _ints("split", "sections", nsplits_or_sections)
        bounds = (0,) + indices + (size,)
        if any(b < a for a, b in zip(bounds, bounds[1:])):  # (non-decreasing within [0, size]: empty parts allowed)
            raise OpError(f"Invalid nsplits_or_secions: {nsplits_or_sections!r}")
    return tuple(keep_qparams(t, inp) for t in _apply(_S.split.bind(indices=indices, axis=axis), inp))  # a tuple


def flip(inp, axis):
    """Reverse the order of elements along ``axis``.

    Args:
        inp: input tensor.
        axis: an int or a sequence of ints.

    Returns:
        the flipped tensor.

    Example:
        >>> F.flip(Tensor([1., 2., 3.]), 0).numpy()
        array([3., 2., 1.], dtype=float32)
    """
    inp = _t(inp, op="flip")
    return keep_qparams(_apply(_S.flip.bind(axis=_axes("flip", inp.ndim, axis)), inp), inp)


def roll(inp, shift, axis=None):
    """Roll elements along ``axis`` by ``shift`` (elements leaving one end re-enter at the other).

    Args:
        inp: input tensor.
        shift: an int, or a sequence of ints matching ``axis``.
        axis: an int, a sequence of ints, or None to roll the flattened tensor (shape is kept).

    Returns:
        the rolled tensor.

    Example:
        >>> F.roll(Tensor([1., 2., 3., 4.]), 1).numpy()
        array([4., 1., 2., 3.], dtype=float32)
    """
    inp = _t(inp, op="roll")
    if axis is None:
        shifts = _ints("roll", "shift", shift)
        if len(shifts) != 1:
            raise OpError(f"roll: one shift expected when axis is None, got {shift!r}")
        return keep_qparams(_apply(_S.roll.bind(shift=shifts[0], axis=None), inp), inp)
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    axes = tuple(_axis("roll", inp.ndim, a) for a in axis)
    shifts = _ints("roll", "shift", shift)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise OpError(f"roll: {len(shifts)} shifts for {len(axes)} axes")
    return keep_qparams(_apply(_S.roll.bind(shift=shifts, axis=axes), inp), inp)


def tile(inp, reps):
    """Repeat the whole tensor ``reps[i]`` times along axis ``i`` (``reps`` is aligned to the trailing axes).

    Args:
        inp: input tensor.
        reps: repetitions per axis.

    Returns:
        the tiled tensor.

    Example:
        >>> F.tile(Tensor([[1., 2.]]), (2, 2)).shape
        (2, 4)
    """
    reps = _ints("tile", "reps", reps)
    if any(r < 0 for r in reps):
        raise OpError(f"tile: reps must be non-negative, got {reps}")
    return keep_qparams(_apply(_S.tile.bind(reps=reps), _t(inp, op="tile")), inp)


def repeat(inp, repeats, axis=None):
    """Repeat each element ``repeats`` times along ``axis`` (of the flattened tensor if None).

    Args:
        inp: input tensor.
        repeats: number of repetitions (int, or a one-element integer Tensor).
        axis: the axis, or None.

    Returns:
        the repeated tensor.

    Example:
        >>> F.repeat(Tensor([[1., 2.]]), 2, axis=1).numpy()
        array([[1., 1., 2., 2.]], dtype=float32)
    """
    inp = _t(inp, op="repeat")
    if isinstance(repeats, Tensor) and repeats.size == 1 and np.issubdtype(repeats.dtype, np.integer):
        # MegEngine accepts a one-element Tensor; the output shape depends on it, so it is read on the host
        # (inside a trace the read is a guard: another value records again)
        repeats = int(repeats.item())
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or repeats < 0:
        raise OpError(f"repeat: repeats must be a non-negative int, got {repeats!r}")
    ax = None if axis is None else _axis("repeat", inp.ndim, axis)
    return keep_qparams(_apply(_S.repeat.bind(repeats=int(repeats), axis=ax), inp), inp)


def copy(inp, device=None):
    """A copy of ``inp``, on ``device`` if given.

    Args:
        inp: input tensor.
        device: target device name, e.g. ``"cpu0"``.

    Returns:
        the copy.

    Example:
        >>> F.copy(Tensor([1.])).numpy()
        array([1.], dtype=float32)
    """
    inp = _t(inp, op="copy")
    return keep_qparams(inp.to(device) if device is not None else _apply(_S.copy.bind(), inp), inp)


def cumsum(inp, axis):
    """Cumulative sum along ``axis``.

    Args:
        inp: input tensor.
        axis: the axis.

    Returns:
        a tensor like ``inp``; of a 0-d one, its value as shape ``(1,)`` (MegEngine's and NumPy's ``cumsum``).

    Example:
        >>> F.cumsum(Tensor([[1, 2, 3], [4, 5, 6]]), axis=1).numpy()
        array([[ 1,  3,  6],
               [ 4,  9, 15]], dtype=int32)
    """
    inp = _t(inp, op="cumsum")
    if inp.ndim == 0:
        _axis("cumsum", 1, axis)  # (0 or -1, as of a vector)
        inp = reshape(inp, (1,))
    return _apply(_R.cumsum.bind(axis=_axis("cumsum", inp.ndim, axis)), inp)


# ---- creation ----------------------------------------------------------------------------------------------------
def _shape(op, shape):
    shape = _ints(op, "shape", shape)
    if any(s < 0 for s in shape):
        raise OpError(f"{op}: negative dimension in shape {shape}")
    return shape


def _fill_value(value, dtype):
    kind = dtype.kind
    if is_float(dtype):
        value = float(value)
        return _math.nan if value != value else value  # one NaN object: ops are interned by their params
    if kind == "c":
        return builtins.complex(value)
    if kind == "b":
        return bool(value)
    if isinstance(value, (float, np.floating)):  # (NaN, inf, beyond the range: MegEngine's INT_MIN, not an error)
        return _dtypes.c_int(value, dtype)
    return int(value)


def full(shape, value, *, dtype=None, device=None):
    """A tensor of ``shape`` filled with ``value``.

    Args:
        shape: an int or a sequence of ints.
        value: the fill value (bool, int or float).
        dtype: the dtype; default from ``value`` (bool, int32 or float32).
        device: where to put the result.

    Returns:
        the filled tensor.

    Example:
        >>> F.full((2, 3), 7).numpy()
        array([[7, 7, 7],
               [7, 7, 7]], dtype=int32)
    """
    return _full("full", shape, value, dtype, device, broadcast=True)


def _full(op, shape, value, dtype, device, broadcast=False):
    if isinstance(value, Tensor):
        value = value.item()
    if dtype is None:
        dtype = np.dtype(np.bool_ if isinstance(value, (bool, np.bool_)) else np.int32 if isinstance(
            value, (int, np.integer)) else np.complex64 if isinstance(value, builtins.complex) else np.float32)
    else:
        try:
            dtype = _dtype(dtype)
        except TypeError:
            raise OpError(f"{op}: unknown dtype {dtype!r}") from None
    shape, value = _shape(op, shape), _fill_value(value, dtype)
    if broadcast:
        # The value broadcast from its 0-d tensor (the cached one of that Python number, as ``x * 0.5``'s 0.5), as
        # MegEngine's ``full`` broadcasts a ``Const``: an input, not a parameter of the op. A loop's
        # ``F.full((B,), t)`` (a diffusion model's sampling over its timesteps) compiled an eager kernel for every
        # value, and under auto-jit made every cluster of the loop a new key (MegDiffusion's sampling: 12 compiles,
        # 3-15x slower than eager in its first calls).
        out = _apply(_S.broadcast_to.bind(shape=shape), _scalar(value, dtype))
    else:  # (zeros, ones: one value a line)
        out = _apply(_S.full.bind(shape=shape, value=value, dtype=_dtypes.name_of(dtype)))
    return _place(out, device)


def zeros(shape, *, dtype="float32", device=None):
    """A tensor of zeros.

    Args:
        shape: an int or a sequence of ints.
        dtype: the dtype.
        device: where to put the result.

    Returns:
        the tensor.

    Example:
        >>> F.zeros((2, 3)).shape
        (2, 3)
    """
    return _full("zeros", shape, 0, dtype, device)


def ones(shape, *, dtype="float32", device=None):
    """A tensor of ones.

    Args:
        shape: an int or a sequence of ints.
        dtype: the dtype.
        device: where to put the result.

    Returns:
        the tensor.

    Example:
        >>> F.ones(3).numpy()
        array([1., 1., 1.], dtype=float32)
    """
    return _full("ones", shape, 1, dtype, device)


def full_like(inp, value):
    """A tensor of ``inp``'s shape and dtype filled with ``value``.

    Args:
        inp: the tensor to take shape and dtype from.
        value: the fill value (cast to ``inp``'s dtype).

    Returns:
        the filled tensor.

    Example:
        >>> F.full_like(Tensor([1, 2]), 5).numpy()
        array([5, 5], dtype=int32)
    """
    return _full_like(inp, value, as_input=True)


def _full_like(inp, value, as_input):
    inp = _t(inp, op="full_like")
    if _QPARAMS_SEEN[0] and _quantized_source(inp) is not None:
        # a quantized tensor: the fill value quantized in its dtype (MegEngine 1.13 fills 0 whatever the value)
        filled = _apply(_S.full_like.bind(value=float(value)), _apply(_E.astype.bind(dtype="float32"), inp))
        return astype(filled, inp.dtype)
    value = _fill_value(value, inp.dtype)
    if not as_input:  # (zeros_like, ones_like: one value a line, a constant XLA folds -- gm.backward's ones)
        return _apply(_S.full_like.bind(value=value), inp)
    # (the value an input, the cached 0-d tensor of that number: one kernel for every value -- core/ops/shape.py)
    return _apply(_S.full_like.bind(), inp, _scalar(value, inp.dtype))


def zeros_like(inp):
    """Zeros shaped and typed like ``inp``.

    Args:
        inp: the tensor to take shape and dtype from.

    Returns:
        the tensor.

    Example:
        >>> F.zeros_like(Tensor([1., 2.])).numpy()
        array([0., 0.], dtype=float32)
    """
    return _full_like(inp, 0, as_input=False)


def ones_like(inp):
    """Ones shaped and typed like ``inp``.

    Args:
        inp: the tensor to take shape and dtype from.

    Returns:
        the tensor.

    Example:
        >>> F.ones_like(Tensor([1., 2.])).numpy()
        array([1., 1.], dtype=float32)
    """
    return _full_like(inp, 1, as_input=False)


def _number(op, what, v):
    if isinstance(v, Tensor):
        v = v.item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise OpError(f"{op}: {what} must be a number, got {v!r}")
    return int(v) if isinstance(v, (int, np.integer)) else float(v)


def arange(start=0, stop=None, step=1, *, dtype="float32", device=None):
    """Evenly spaced values ``start, start + step, ...`` up to (excluding) ``stop``.

    Args:
        start: first value (or the stop, if ``stop`` is None).
        stop: end of the interval, excluded.
        step: spacing, non-zero.
        dtype: result dtype (computed in float32, as MegEngine, then cast).
        device: where to put the result.

    Returns:
        a 1-D tensor of ``ceil((stop - start) / step)`` values.

    Example:
        >>> F.arange(1, 4).numpy()
        array([1., 2., 3.], dtype=float32)
    """
    if stop is None:
        start, stop = 0, start
    start, stop, step = (_number("arange", n, v) for n, v in (("start", start), ("stop", stop), ("step", step)))
    if step == 0:
        raise OpError("arange: step must not be zero")
    dt = _dtypes.canonical(dtype)
    if dt == np.float64:
        # MegEngine has no float64 tensors: its arange (float32, then astype) raises for dtype="float"/float64.
        raise OpError("arange: dtype float64 is not supported (MegEngine computes in float32; use 'float32')")
    dt = _dtype(dt)
    # MegEngine computes the length in float32: ceil(f32(stop - start) / f32(step)); F.arange(7.8, 8.4, 0.05)
    # has 12 elements there (13 in float64).
    f32 = np.float32
    with np.errstate(all="ignore"):
        span = (f32(stop) - f32(start)) / f32(step)
    if not np.isfinite(span):
        raise OpError(f"arange: the length of [{start}, {stop}) with step {step} is not finite")
    num = builtins.max(int(np.ceil(span)), 0)
    out = _apply(_S.arange.bind(start=start, step=step, num=num, dtype=dt.name))
    return _place(out, device)


def linspace(start, stop, num, *, dtype="float32", device=None):
    """``num`` evenly spaced values from ``start`` to ``stop``, both included.

    Args:
        start: first value.
        stop: last value.
        num: number of values (non-negative int).
        dtype: result dtype.
        device: where to put the result.

    Returns:
        a 1-D tensor.

    Example:
        >>> F.linspace(0, 1, 5).numpy()
        array([0.  , 0.25, 0.5 , 0.75, 1.  ], dtype=float32)
    """
    start, stop = _number("linspace", "start", start), _number("linspace", "stop", stop)
    num = _number("linspace", "num", num)
    if not isinstance(num, int) or num < 0:
        raise OpError(f"linspace: num must be a non-negative int, got {num!r}")
    # (MegEngine makes Tensors of ``start`` and ``stop`` first: a Python float is rounded to float32 there)
    start, stop = (float(v) if isinstance(v, int) else float(np.float32(v)) for v in (start, stop))
    out = _apply(_S.linspace.bind(start=start, stop=stop, num=num, dtype=_dtype(dtype).name))
    return _place(out, device)


def eye(N, M=None, *, dtype="float32", device=None):
    """A 2-D tensor with ones on the diagonal and zeros elsewhere.

    Args:
        N: number of rows, or the shape as a ``(rows, cols)`` or ``(n,)`` sequence, NumPy array or 1-D
            Tensor (``(n,)`` is square, as in MegEngine).
        M: number of columns; default ``N``.
        dtype: result dtype.
        device: where to put the result.

    Returns:
        the ``N x M`` tensor.

    Example:
        >>> F.eye(2, 3).numpy()
        array([[1., 0., 0.],
               [0., 1., 0.]], dtype=float32)
        >>> F.eye(Tensor([2])).numpy()
        array([[1., 0.],
               [0., 1.]], dtype=float32)
    """
    if isinstance(N, (tuple, list)) or getattr(N, "ndim", 0) == 1:
        # a shape: MegEngine takes (n, m) or (n,) (square); a Tensor shape is read (megxla's shapes are static)
        dims = N.numpy().tolist() if isinstance(N, Tensor) else list(np.asarray(N).tolist()) \
            if not isinstance(N, (tuple, list)) else list(N)
        if len(dims) not in (1, 2) or M is not None:
            raise OpError(f"eye: shape must be (N, M) or (N,), got {N!r}" + ("" if M is None else f" and M={M!r}"))
        N, M = (dims[0], dims[0]) if len(dims) == 1 else dims
    n, m = _shape("eye", (N, N if M is None else M))
    return _place(_apply(_S.eye.bind(n=n, m=m, k=0, dtype=_dtype(dtype).name)), device)


def diag(inp, k=0):
    """The ``k``-th diagonal of a matrix, or a square matrix with a vector on its ``k``-th diagonal.

    Args:
        inp: a 1-D or 2-D tensor.
        k: diagonal offset: 0 the main one, > 0 above it, < 0 below it.

    Returns:
        a 2-D tensor for a 1-D input, a 1-D tensor for a 2-D input.

    Example:
        >>> F.diag(Tensor([1., 2.])).numpy()
        array([[1., 0.],
               [0., 2.]], dtype=float32)
    """
    inp = _t(inp, op="diag")
    if inp.ndim not in (1, 2):
        raise OpError(f"diag: input must be 1-D or 2-D, got shape {inp.shape}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise OpError(f"diag: k must be an int, got {k!r}")
    return _apply(_L.diag.bind(k=int(k)), inp)


def meshgrid(*inputs, indexing="xy"):
    """Coordinate grids from 1-D coordinate vectors, as ``numpy.meshgrid``.

    Args:
        inputs: 1-D tensors (or one list of them).
        indexing: ``"xy"`` (Cartesian: the first two output axes swapped) or ``"ij"`` (matrix).

    Returns:
        a tuple of tensors, all of shape ``(len(x1), len(x2), ...)`` (first two swapped for ``"xy"``).

    Example:
        >>> xs, ys = F.meshgrid(F.arange(3), F.arange(2))
        >>> xs.shape
        (2, 3)
    """
    if indexing not in ("xy", "ij"):
        raise OpError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        inputs = inputs[0]
    inputs = [_t(x, op="meshgrid") for x in inputs]
    for x in inputs:
        if x.ndim != 1:
            raise OpError(f"meshgrid: inputs must be 1-D, got shape {x.shape}")
    if not inputs:
        return ()
    # one op with n outputs, as MegEngine's MeshGrid: a loss reached by any output gives every input a gradient
    # (zeros for an input whose own output does not reach it), as MegEngine
    return tuple(_apply(_S.meshgrid.bind(indexing=indexing), *inputs))  # a tuple, as MegEngine


# ---- complex numbers -------------------------------------------------------------------------------------------
def complex(real, imag):
    """A complex tensor ``real + 1j * imag``.

    Args:
        real: real parts (float tensor).
        imag: imaginary parts (float tensor, broadcastable with ``real``).

    Returns:
        a complex64 (complex128 for float64 inputs) tensor.

    Example:
        >>> F.complex(Tensor([1.]), Tensor([2.])).numpy()
        array([1.+2.j], dtype=complex64)
    """
    real, imag = _t(real, op="complex"), _t(imag, op="complex")
    for x in (real, imag):
        if x.dtype.kind == "c":
            raise OpError(f"complex: real and imag must be real tensors, got {x.dtype}")
    return _B["complex"](real, imag)


def real(complex):
    """The real part of a complex tensor (real tensors are returned as they are).

    Args:
        complex: input tensor.

    Returns:
        a float tensor.

    Example:
        >>> F.real(F.complex(Tensor([1.]), Tensor([2.]))).numpy()
        array([1.], dtype=float32)
    """
    return _U["real"](_t(complex, op="real"))


def imag(complex):
    """The imaginary part of a complex tensor (zeros for real tensors).

    Args:
        complex: input tensor.

    Returns:
        a float tensor.

    Example:
        >>> F.imag(F.complex(Tensor([1.]), Tensor([2.]))).numpy()
        array([2.], dtype=float32)
    """
    return _U["imag"](_t(complex, op="imag"))


def polar(abs, angle):
    """A complex tensor from magnitudes and angles: ``abs * (cos(angle) + 1j * sin(angle))``.

    Args:
        abs: magnitudes (float tensor).
        angle: angles in radians (float tensor).

    Returns:
        a complex tensor.

    Example:
        >>> F.polar(Tensor([2.]), Tensor([0.])).numpy()
        array([2.+0.j], dtype=complex64)
    """
    abs, angle = _t(abs, op="polar"), _t(angle, op="polar")
    return complex(_B["mul"](abs, _U["cos"](angle)), _B["mul"](abs, _U["sin"](angle)))


# ---- selection -------------------------------------------------------------------------------------------------
def _index_tensor(op, index):
    index = _t(index, op=op)
    if index.dtype.kind not in "iu":
        raise OpError(f"{op}: index must be an integer tensor, got {index.dtype}")
    return index


def gather(inp, axis, index):
    """``out[i][j][k] = inp[index[i][j][k]][j][k]`` for ``axis = 0`` (and likewise for other axes).

    Args:
        inp: input tensor.
        axis: the axis to gather along.
        index: integer tensor of ``inp``'s rank, no larger than ``inp`` except along ``axis`` (as MegEngine,
            a smaller index gathers from the leading part of the other dimensions).

    Returns:
        a tensor of ``index``'s shape.

    Example:
        >>> F.gather(Tensor([[1., 2.], [3., 4.]]), 1, Tensor([[1], [0]])).numpy()
        array([[2.],
               [3.]], dtype=float32)
    """
    inp, index = _t(inp, op="gather"), _index_tensor("gather", index)
    if index.ndim != inp.ndim:
        raise OpError(f"gather: index rank {index.ndim} must equal input rank {inp.ndim}")
    axis = _axis("gather", inp.ndim, axis)
    for d in range(inp.ndim):
        # (the rows of one selection, ``gather(p[fg], 1, k[fg])``: the same count, not read)
        if d != axis and not (d == 0 and _lazy.same_rows(index, inp)) and _lazy.dim(index, d) > _lazy.dim(inp, d):
            raise OpError(f"gather: index {index.shape} is larger than input {inp.shape} in dimension {d} "
                          f"(only axis {axis} may be larger)")
    check_index_tensor("gather", index, _lazy.dim(inp, axis), axis)  # eager: MegEngine raises, XLA would clamp
    return keep_qparams(_apply(_I.gather.bind(axis=axis), inp, index), inp)


def scatter(inp, axis, index, source):
    """Write ``source`` into ``inp``: ``inp[index[i][j]][j] = source[i][j]`` for ``axis = 0``.

    As MegEngine (whose scatter is ``inp[idx] = source; return inp``), ``inp`` itself is modified and returned:
    ``F.scatter(x, ...) is x``. Where ``index`` repeats a position the last write wins.

    Args:
        inp: input tensor.
        axis: the axis to scatter along.
        index: integer tensor of ``source``'s shape.
        source: values, of ``inp``'s rank, no larger than ``inp`` in any axis.

    Returns:
        the updated tensor.

    Example:
        >>> F.scatter(F.zeros((2, 2)), 1, Tensor([[1], [0]]), Tensor([[5.], [6.]])).numpy()
        array([[0., 5.],
               [6., 0.]], dtype=float32)
    """
    inp, index, source = _t(inp, op="scatter"), _index_tensor("scatter", index), _t(source, op="scatter")
    if not inp.ndim == index.ndim == source.ndim:
        raise OpError(f"scatter: input {inp.shape}, index {index.shape} and source {source.shape} must have the "
                      f"same rank")
    axis = _axis("scatter", inp.ndim, axis)
    if index.shape != source.shape:
        raise OpError(f"scatter: index shape {index.shape} must equal source shape {source.shape}")
    for d in range(inp.ndim):
        if d != axis and source.shape[d] > inp.shape[d]:
            raise OpError(f"scatter: source {source.shape} is larger than input {inp.shape} in axis {d}")
    check_index_tensor("scatter", index, inp.shape[axis], axis)  # eager: MegEngine raises, XLA would drop
    # rebound in place, as __setitem__ does (MegEngine: a tensor scattered into holds the new values after)
    return inp._reset(_apply(_I.scatter.bind(axis=axis), inp, index, source))


def indexing_one_hot(src, index, axis=1, keepdims=False):
    """Pick one element along ``axis`` per position: ``out[i, j] = src[i, index[i, j], j]`` for ``axis = 1``.

    Args:
        src: input tensor.
        index: tensor of ``src``'s shape without ``axis``; as MegEngine, a float or bool one is converted to
            int32 (class ids kept as floats: ``F.ones(shape) * mask``).
        axis: the axis to pick along.
        keepdims: keep ``axis`` (with size 1) in the result.

    Returns:
        the picked elements.

    Example:
        >>> F.indexing_one_hot(Tensor([[1., 2.], [3., 4.]]), Tensor([1, 0])).numpy()
        array([2., 3.], dtype=float32)
        >>> F.indexing_one_hot(Tensor([[1., 2.], [3., 4.]]), Tensor([1., 0.])).numpy()
        array([2., 3.], dtype=float32)
    """
    src, index = _t(src, op="indexing_one_hot"), _t(index, op="indexing_one_hot")
    if index.dtype.kind not in "iu":  # (MegEngine: ``convert_single_value(index, dtype="int32")``)
        index = index.astype("int32")
    axis = _axis("indexing_one_hot", src.ndim, axis)
    if not _lazy.same_shape(index, src, drop=axis):  # (``label[fg]`` against ``pred[fg]``: no count read)
        raise OpError(f"indexing_one_hot: index shape {index.shape} must be {src.shape[:axis] + src.shape[axis + 1:]} "
                      f"(src {src.shape} without axis {axis})")
    # MegEngine's IndexingOneHot raises for an index outside [0, size); XLA's gather would give NaN (eager,
    # host-checked; inside a trace as config.checked_indexing says, see core/_indexing.py)
    check_index_tensor("indexing_one_hot", index, _lazy.dim(src, axis), axis, allow_negative=False)
    return _pick(src, index, axis, keepdims)


def _pick(src, index, axis, keepdims=False):
    """indexing_one_hot on checked arguments (cross_entropy checks its labels itself)."""
    return _apply(_I.indexing_one_hot.bind(axis=axis, keepdims=bool(keepdims)), src, index)


def cond_take(mask, x):
    """The elements of ``x`` where ``mask`` is true, and their indices in the flattened ``x``.

    NOTE: the result's size depends on the number of true values in ``mask``. Eagerly the mask is read on the
    host (as MegEngine does); inside a trace only that count is read (a guard: a new count records again) and
    the indices are computed on the device, so new masks with a recorded count reuse the compiled step.

    Args:
        mask: bool tensor (non-bool: where it equals 1) of ``x``'s shape.
        x: input tensor.

    Returns:
        ``(values, indices)``: 1-D tensors, indices int32.

    Example:
        >>> v, i = F.cond_take(Tensor([True, False, True]), Tensor([1., 2., 3.]))  # [1., 3.], [0, 2]
    """
    mask, x = _t(mask, op="cond_take"), _t(x, op="cond_take")
    if {mask.shape, x.shape} == {(), (1,)}:
        # (MegEngine takes a 0-d shape as (1,): a 0-d mask selects from one element, and the other way round --
        # megengine_fuzz seed 17)
        mask, x = reshape(mask, (1,)), reshape(x, (1,))
    if mask.shape != x.shape:
        raise OpError(f"cond_take: mask shape {mask.shape} must equal x shape {x.shape}")
    # (a hand-built graph's variables take the ops at the end, so that the graph records how idx came from mask)
    if current_interpreter() is None and _registry.graph_of("cond_take", mask, x) is None:
        if _lazy.SELECT[0] is not None:
            # auto-jit: the elements kept in place (``jit/_padded.py``), their count read only where a shape asks
            # for it, so that the clusters around a cond_take keep their shapes whatever the mask holds; not
            # collecting now, the indexing below reads the mask, as eagerly
            m = reshape(mask if mask.dtype == np.bool_ else _B["eq"](mask, 1), (-1,))
            return reshape(x, (-1,))[m], _iota(m.shape[0])[m]
        m = mask.numpy()
        m = m if m.dtype == np.bool_ else m == 1
        idx = Tensor(np.flatnonzero(m).astype(np.int32))
    else:
        m = mask if mask.dtype == np.bool_ else _B["eq"](mask, 1)
        (idx,) = mask_indices(reshape(m, (-1,)))
    return reshape(x, (-1,))[idx], idx


def _iota(n):
    return _apply(_S.arange.bind(start=0, step=1, num=n, dtype="int32"))


def _selected_indices(mask):
    """auto-jit: ``mask``'s indices (as ``mask_indices``) kept in place -- the flat index selected by the flattened
    mask (not collecting now: selected as ever), unravelled row by row --, or None for an empty mask."""
    if not mask.size:
        return None
    flat = _iota(mask.size)[reshape(mask, (-1,))]
    out, stride = [], mask.size
    for dim in mask.shape:
        stride //= dim
        i = flat if stride == 1 else _B["floordiv"](flat, stride)
        out.append(i if len(out) == 0 else _B["mod"](i, dim))
    return out


def non_zero(condition, as_tuple=False):
    """The indices of the non-zero elements of ``condition`` (MegEngine 1.13.2 and later), in C order.

    NOTE: the result's size depends on the number of non-zero elements, read on the host as for
    :func:`cond_take` (inside a trace only that count is: a new count records again).

    Args:
        condition: a tensor of at least one dimension.
        as_tuple: False (the default): one int32 tensor of shape ``(count, condition.ndim)``, a row per element;
            True: a tuple of ``condition.ndim`` 1-D int32 tensors, one per dimension (``np.nonzero``).

    Returns:
        one tensor, or a tuple of tensors.

    Example:
        >>> F.non_zero(Tensor([1, 1, 0, 1]), as_tuple=True)[0].numpy()
        array([0, 1, 3], dtype=int32)
        >>> F.non_zero(Tensor([[0, 2], [3, 0]])).numpy()
        array([[0, 1],
               [1, 0]], dtype=int32)
    """
    if not isinstance(condition, Tensor):
        raise TypeError(f"non_zero: input must be a tensor, got {type(condition).__name__}")
    if condition.ndim == 0:
        raise OpError(f"non_zero: input must have at least one dimension, got shape {condition.shape}")
    mask = condition if condition.dtype == np.bool_ else _B["ne"](condition, 0)
    idx = None
    if current_interpreter() is None and _lazy.SELECT[0] is not None and _registry.graph_of("non_zero", mask) is None:
        idx = _selected_indices(mask)  # (auto-jit: kept in place; a hand-built graph's variables: by ops it records)
    if idx is None:
        idx = mask_indices(mask)
    return tuple(idx) if as_tuple else stack(idx, axis=1)


def where(mask, x, y):
    """Select ``x`` where ``mask`` is true, else ``y`` (broadcasting all three).

    Args:
        mask: bool tensor.
        x: values where true (tensor or scalar).
        y: values where false (tensor or scalar).

    Returns:
        a tensor of the broadcast shape; of dtypes of two kinds, the float operand's dtype (float16 with int32 is
        float16), else the integer one's (int8 with bool is int8), as MegEngine's ``where`` -- not its
        arithmetic's promotion.

    Example:
        >>> F.where(Tensor([True, False]), Tensor([1., 2.]), Tensor([3., 4.])).numpy()
        array([1., 4.], dtype=float32)
    """
    mask = _t(mask, op="where")
    if mask.dtype != np.bool_:
        raise OpError(f"where: mask must be bool, got {mask.dtype}")
    if not isinstance(x, Tensor) and isinstance(y, Tensor):
        x = _t(x, y, op="where")
    x = _t(x, op="where")
    y = _t(y, x, op="where")
    return _apply(_E.where.bind(), mask, x, y)
