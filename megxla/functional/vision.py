"""Vision functions (``megengine.functional.vision``): resampling, ROI pooling, NMS, correlation, colour.

Each validates its arguments (raising :class:`OpError` naming the function) and applies one primitive of
``core/ops/vision.py``.
"""
import numpy as np

from ..core import _autocast as _amp  # autocast state (one attribute read when off)
from ..core._tensor import Tensor
from ..core.dtypes import is_float
from ..core._dispatch import apply as _apply, AssertedOpError, OpError, current_interpreter
from ..core._elemwise_front import as_tensor as _t, UNARY as _U
from ..core.ops import vision as _V

__all__ = ["interpolate", "warp_affine", "warp_perspective", "remap", "roi_align", "roi_pooling", "nms",
           "correlation", "cvt_color"]


def _pair(v, name, op):
    if isinstance(v, Tensor):
        v = v.tolist()
    try:
        t = (int(v),) * 2 if isinstance(v, (int, np.integer)) else tuple(int(i) for i in v)
    except TypeError:
        t = ()
    if len(t) != 2 or min(t) < 1:
        raise OpError(f"{op}: {name} must be a positive int or pair of ints, got {v!r}")
    return t


def _border(mode, op):
    m = str(getattr(mode, "name", mode)).lower()
    if m not in _V.BORDER_MODES:
        raise OpError(f"{op}: border_mode must be one of {_V.BORDER_MODES}, got {mode!r}")
    return m


def _interp(mode, op):
    m = str(getattr(mode, "name", mode)).lower()
    if m not in ("linear", "nearest"):
        raise OpError(f"{op}: interp_mode must be 'linear' or 'nearest', got {mode!r}")
    return m


def _eight_bit(inp, fn):
    """``fn`` of an 8-bit image as MegEngine resamples one: in float32, rounded and saturated back to its dtype."""
    from .elemwise import clip
    info = np.iinfo(inp.dtype)
    return clip(_U["round"](fn(inp.astype("float32"))), info.min, info.max).astype(inp.dtype)


def _float(x, op, what="input"):
    if not is_float(x.dtype):
        raise OpError(f"{op}: {what} must be a float tensor, got {x.dtype}")


def interpolate(inp, size=None, scale_factor=None, mode="bilinear", align_corners=None):
    """Down/up-samples the input to ``size`` or by ``scale_factor``.

    ``nearest`` takes ``src = floor(dst * in / out)``; ``bilinear``/``linear`` (and ``bicubic``, A = -0.75) sample
    at ``(dst + 0.5) * in / out - 0.5`` (the pixel-centre rule), or at ``dst * (in - 1) / (out - 1)`` with
    ``align_corners=True``; borders replicate.

    Args:
        inp: ``(N, C, H, W)``; ``(N, C, W)`` for ``mode="linear"``.
        size: output size ``(OH, OW)``, or an int ``OH`` (MegEngine's rule: the output is then ``(OH, 1)``);
            exclusive with ``scale_factor``.
        scale_factor: float or pair; the output size is ``floor(in * scale_factor)``.
        mode: ``"bilinear"``, ``"linear"``, ``"bicubic"``, ``"nearest"`` or ``"trilinear"`` (5-D input
            ``(N, C, D, H, W)``, size a 3-tuple, megdnn Resize3D's rule).
        align_corners: only for the linear modes (default False).

    Returns:
        the resampled tensor.

    Example:
        >>> x = Tensor(np.arange(4, dtype="float32").reshape(1, 1, 2, 2))
        >>> F.vision.interpolate(x, (4, 4), align_corners=True).numpy()[0, 0, 0]
        array([0.        , 0.33333334, 0.6666667 , 1.        ], dtype=float32)
    """
    op = "interpolate"
    inp = _t(inp, op=op)
    from .tensor import _through_float
    q = _through_float(inp, lambda x: interpolate(x, size, scale_factor, mode, align_corners))
    if q is not None:  # a quantized tensor: resampled in its quantized dtype (MegEngine)
        return q
    if _amp.enabled:  # autocast: computed in float32, as MegEngine's amp
        inp, = _amp.up(inp)
    mode = str(mode).lower()
    if mode not in ("bilinear", "linear", "bicubic", "nearest", "trilinear"):
        raise OpError(f"{op}: unsupported mode {mode!r} (bilinear, linear, bicubic, nearest or trilinear)")
    if mode == "trilinear":
        return _trilinear(inp, size, scale_factor, bool(align_corners), op)
    if mode in ("bilinear", "linear"):
        align_corners = bool(align_corners)
    elif align_corners is not None:
        raise OpError(f"{op}: align_corners can only be set in the bilinear/linear modes")
    want = 3 if mode == "linear" else 4
    if inp.ndim != want:
        # (MegEngine asserts the rank: its upstream test_interpolate expects an AssertionError)
        raise AssertedOpError(f"{op}: mode {mode!r} needs a {want}-D input, got shape {inp.shape}")
    if inp.dtype in (np.int8, np.uint8):  # an 8-bit image: resized in float32, its dtype kept (MegEngine)
        return _eight_bit(inp, lambda x: interpolate(x, size, scale_factor, mode, align_corners))
    _float(inp, op)
    if inp.dtype == np.float16:  # as MegEngine: Resize (and warp_perspective) compute float16 in float32 and
        inp = inp.astype("float32")  # return float32
    spatial = inp.shape[2:] + ((1,) if mode == "linear" else ())
    if size is None:
        if scale_factor is None:
            raise OpError(f"{op}: one of size and scale_factor must be given")
        if isinstance(scale_factor, (int, float, np.number)):
            sf = (float(scale_factor), 1.0 if mode == "linear" else float(scale_factor))
        else:
            if mode == "linear":
                raise OpError(f"{op}: under linear mode, scale_factor can only be a single value")
            sf = tuple(float(s) for s in scale_factor)
            if len(sf) != 2:
                raise OpError(f"{op}: scale_factor must be a float or a pair, got {scale_factor!r}")
        out = tuple(int(np.floor(np.float32(i) * np.float32(s))) for i, s in zip(spatial, sf))
    else:
        if scale_factor is not None:
            raise OpError(f"{op}: size and scale_factor are exclusive")
        if mode == "linear":
            if not isinstance(size, (int, np.integer)):
                raise OpError(f"{op}: under linear mode, size can only be a single value")
            out = (int(size), 1)
        elif isinstance(size, (int, np.integer)):
            out = (int(size), 1)  # MegEngine: an int size means (size, 1), as a 3-D one's (size, 1, 1)
        else:
            out = _pair(size, "size", op)
    if min(out) < 1:
        raise OpError(f"{op}: empty output size {out}")
    imode = {"bilinear": "linear", "linear": "linear", "bicubic": "cubic", "nearest": "nearest"}[mode]
    x = inp.reshape(inp.shape + (1,)) if mode == "linear" else inp
    y = _apply(_V.resize.bind(size=out, mode=imode, align_corners=bool(align_corners)), x)
    return y.reshape(y.shape[:3]) if mode == "linear" else y


def _trilinear(inp, size, scale_factor, align_corners, op):
    """``interpolate(mode="trilinear")`` of an ``(N, C, D, H, W)`` input (megdnn Resize3D)."""
    if inp.ndim != 5:
        raise AssertedOpError(f"{op}: mode 'trilinear' needs a 5-D (N, C, D, H, W) input, got shape {inp.shape}")
    _float(inp, op)
    if (size is None) == (scale_factor is None):
        raise OpError(f"{op}: exactly one of size and scale_factor must be given")
    if size is None:
        sf = (scale_factor,) * 3 if isinstance(scale_factor, (int, float, np.number)) else tuple(scale_factor)
        if len(sf) != 3:
            raise OpError(f"{op}: trilinear scale_factor must be a float or 3 floats, got {scale_factor!r}")
        out = tuple(int(np.floor(np.float32(i) * np.float32(s))) for i, s in zip(inp.shape[2:], sf))
    else:
        # MegEngine: an int size means (size, 1, 1)
        out = (int(size), 1, 1) if isinstance(size, (int, np.integer)) else tuple(int(v) for v in size)
        if len(out) != 3:
            raise OpError(f"{op}: trilinear size must be an int or 3 ints, got {size!r}")
    if min(out) < 1:
        raise OpError(f"{op}: empty output size {out}")
    if inp.dtype == np.float16:  # as MegEngine: Resize3D computes float16 inputs in float32
        inp = inp.astype("float32")
    return _apply(_V.resize.bind(size=out, mode="trilinear", align_corners=align_corners), inp)


def _out_shape(out_shape, op):
    return _pair(out_shape, "out_shape", op)


def warp_perspective(inp, mat, out_shape, mat_idx=None, border_mode="replicate", border_val=0.0, format="NCHW",
                     interp_mode="linear"):
    """Applies perspective transformations: ``dst(y, x) = src(Y / Z, X / Z)`` with ``(X, Y, Z) = mat @ (x, y, 1)``.

    ``mat`` maps output coordinates to input coordinates (as MegEngine / OpenCV's inverse map). An NHWC image of 1
    or 3 channels (float32 or uint8, no ``mat_idx``) is sampled as MegEngine's CPU kernel samples it (OpenCV's
    ``warpPerspective``): each source coordinate rounded to 1/32 of a pixel (whole pixels for ``"nearest"``).

    Args:
        inp: images ``(N, C, H, W)`` (or NHWC with ``format="NHWC"``): float, or int8/uint8 with
            ``interp_mode="linear"`` (sampled in float32, rounded and saturated back, as MegEngine).
        mat: ``(M, 3, 3)`` matrices; M = N unless ``mat_idx`` is given.
        out_shape: ``(OH, OW)``.
        mat_idx: optional ``(M,)`` image index of each matrix (one output per matrix).
        border_mode: ``replicate``, ``reflect``, ``reflect_101``, ``wrap`` or ``constant``.
        border_val: the value outside the image for ``constant``.
        format: ``"NCHW"`` or ``"NHWC"``.
        interp_mode: ``"linear"`` or ``"nearest"``.

    Returns:
        ``(M, C, OH, OW)`` (or NHWC).

    Example:
        >>> x = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
        >>> M = Tensor([[[1., 0., 1.], [0., 1., 1.], [0., 0., 1.]]])  # dst(h, w) = src(h + 1, w + 1)
        >>> F.vision.warp_perspective(x, M, (2, 2)).numpy()
        array([[[[ 5.,  6.],
                 [ 9., 10.]]]], dtype=float32)
    """
    op = "warp_perspective"
    inp, mat = _t(inp, op=op), _t(mat, op=op)
    fmt = str(format).upper()
    if fmt not in ("NCHW", "NHWC"):
        raise OpError(f"{op}: format must be 'NCHW' or 'NHWC', got {format!r}")
    if inp.ndim != 4:
        raise OpError(f"{op}: input must be 4-D {fmt}, got shape {inp.shape}")
    # (megdnn's OpenCV kernel takes float32 and uint8 images; an int8 one goes through its float kernel)
    opencv = inp.dtype in (np.float32, np.float16, np.uint8)
    if inp.dtype in (np.int8, np.uint8) and _interp(interp_mode, op) in ("linear", "nearest"):
        return _eight_bit(inp, lambda x: _warp_perspective(x, mat, out_shape, mat_idx, border_mode, border_val, fmt,
                                                           interp_mode, opencv))
    return _warp_perspective(inp, mat, out_shape, mat_idx, border_mode, border_val, fmt, interp_mode, opencv)


def _warp_perspective(inp, mat, out_shape, mat_idx, border_mode, border_val, fmt, interp_mode, opencv):
    op = "warp_perspective"
    if inp.dtype == np.float16:  # as MegEngine: a float16 image is warped in float32, the result is float32
        inp = inp.astype("float32")
    _float(inp, op)
    _float(mat, op, "mat")
    if mat.ndim != 3 or mat.shape[1:] != (3, 3):
        raise OpError(f"{op}: mat must be (M, 3, 3), got shape {mat.shape}")
    idx = ()
    if mat_idx is not None:
        if isinstance(mat_idx, Tensor):
            mi = mat_idx
        else:
            a = np.asarray(mat_idx, np.int32)
            # (a Python index list is checked here, as MegEngine's kernel asserts ``idx < N_SRC``; a Tensor's
            # values would need a read from the device, and XLA clamps them)
            if a.size and (a.min() < 0 or a.max() >= inp.shape[0]):
                raise OpError(f"{op}: mat_idx {mat_idx!r} indexes past the {inp.shape[0]} images")
            mi = Tensor(a)
        if mi.shape != (mat.shape[0],) or mi.dtype.kind not in "iu":
            raise OpError(f"{op}: mat_idx must be ({mat.shape[0]},) integers, got {mi.shape}:{mi.dtype}")
        idx = (mi,)
    elif mat.shape[0] != inp.shape[0]:
        raise OpError(f"{op}: {mat.shape[0]} matrices for {inp.shape[0]} images (give mat_idx)")
    interp = _interp(interp_mode, op)
    cv = opencv and fmt == "NHWC" and inp.shape[3] in (1, 2, 3) and not idx and interp in ("linear", "nearest")
    return _apply(_V.warp_perspective.bind(out_hw=_out_shape(out_shape, op), border_mode=_border(border_mode, op),
                                           border_val=float(border_val), interp=interp, nhwc=fmt == "NHWC", cv=cv),
                  inp, mat, *idx)


def warp_affine(inp, mat, out_shape, border_mode="replicate", border_val=0.0, format="NHWC", interp_mode="linear"):
    """Applies affine transformations: ``dst(y, x) = src(m10 x + m11 y + m12, m00 x + m01 y + m02)``.

    ``mat`` maps output coordinates ``(x, y, 1)`` to input coordinates (OpenCV's inverse map). An NHWC image of
    1-3 channels (float32 or uint8) is sampled as MegEngine's CPU kernel samples it (OpenCV's ``warpAffine``): the
    source coordinates in fixed point, rounded to 1/32 of a pixel (whole pixels for ``"nearest"``); other layouts
    at the exact coordinates.

    Args:
        inp: images ``(N, H, W, C)`` (MegEngine's default ``format="NHWC"``) or ``(N, C, H, W)``.
        mat: ``(N, 2, 3)`` matrices.
        out_shape: ``(OH, OW)``.
        border_mode: ``replicate``, ``reflect``, ``reflect_101``, ``wrap`` or ``constant``.
        border_val: the value outside the image for ``constant``.
        format: ``"NHWC"`` or ``"NCHW"``.
        interp_mode: ``"linear"`` or ``"nearest"``.

    Returns:
        ``(N, OH, OW, C)`` (or NCHW).

    Example:
        >>> x = Tensor(np.arange(27, dtype=np.float32).reshape(1, 3, 3, 3))
        >>> M = Tensor([[[1., 0., 1.], [0., 1., 0.]]])  # shift left by one column
        >>> F.vision.warp_affine(x, M, (3, 3)).numpy()[0, 0, :, 0]
        array([3., 6., 6.], dtype=float32)
    """
    op = "warp_affine"
    inp, mat = _t(inp, op=op), _t(mat, op=op)
    fmt = str(format).upper()
    if fmt not in ("NCHW", "NHWC"):
        raise OpError(f"{op}: format must be 'NHWC' or 'NCHW', got {format!r}")
    if inp.ndim != 4:
        raise OpError(f"{op}: input must be 4-D {fmt}, got shape {inp.shape}")
    opencv = inp.dtype in (np.float32, np.uint8)  # (megdnn's OpenCV kernel's dtypes, see warp_perspective)
    if inp.dtype in (np.int8, np.uint8):  # an 8-bit image: warped in float32, its dtype kept (MegEngine)
        return _eight_bit(inp, lambda x: _warp_affine(x, mat, out_shape, border_mode, border_val, fmt, interp_mode,
                                                      opencv))
    return _warp_affine(inp, mat, out_shape, border_mode, border_val, fmt, interp_mode, opencv)


def _warp_affine(inp, mat, out_shape, border_mode, border_val, fmt, interp_mode, opencv):
    op = "warp_affine"
    _float(inp, op)
    _float(mat, op, "mat")
    if mat.shape != (inp.shape[0], 2, 3):
        raise OpError(f"{op}: mat must be (N, 2, 3) = ({inp.shape[0]}, 2, 3), got shape {mat.shape}")
    interp = _interp(interp_mode, op)
    cv = opencv and fmt == "NHWC" and inp.shape[3] in (1, 2, 3) and interp in ("linear", "nearest")
    return _apply(_V.warp_affine.bind(out_hw=_out_shape(out_shape, op), border_mode=_border(border_mode, op),
                                      border_val=float(border_val), interp=interp, nhwc=fmt == "NHWC", cv=cv),
                  inp, mat)


def remap(inp, map_xy, border_mode="replicate", scalar=0.0, interp_mode="linear"):
    """Samples ``inp`` at the coordinates ``map_xy``: ``dst(y, x) = src(map_xy[y, x, 1], map_xy[y, x, 0])``.

    Args:
        inp: images ``(N, C, H, W)``.
        map_xy: ``(N, OH, OW, 2)`` source ``(x, y)`` of each output pixel.
        border_mode: ``replicate``, ``reflect``, ``reflect_101``, ``wrap`` or ``constant``.
        scalar: the value outside the image for ``constant``.
        interp_mode: ``"linear"`` or ``"nearest"``.

    Returns:
        ``(N, C, OH, OW)``.

    Example:
        >>> x = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
        >>> map_xy = Tensor([[[[1., 0.], [0., 1.]], [[0., 1.], [0., 1.]]]])
        >>> F.vision.remap(x, map_xy).numpy()
        array([[[[1., 4.],
                 [4., 4.]]]], dtype=float32)
    """
    op = "remap"
    inp, map_xy = _t(inp, op=op), _t(map_xy, op=op)
    if inp.ndim != 4:
        raise OpError(f"{op}: input must be 4-D NCHW, got shape {inp.shape}")
    if inp.dtype in (np.int8, np.uint8):  # an 8-bit image: sampled in float32, its dtype kept (MegEngine)
        return _eight_bit(inp, lambda x: remap(x, map_xy, border_mode, scalar, interp_mode))
    _float(inp, op)
    _float(map_xy, op, "map_xy")
    if map_xy.ndim != 4 or map_xy.shape[0] != inp.shape[0] or map_xy.shape[3] != 2:
        raise OpError(f"{op}: map_xy must be (N, OH, OW, 2) with N = {inp.shape[0]}, got {map_xy.shape}")
    return _apply(_V.remap.bind(border_mode=_border(border_mode, op), border_val=float(scalar),
                                interp=_interp(interp_mode, op)), inp, map_xy)


def _rois(rois, op):
    rois = _t(rois, op=op)
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise OpError(f"{op}: rois must be (K, 5) rows of (batch_index, x0, y0, x1, y1), got shape {rois.shape}")
    _float(rois, op, "rois")
    return rois


def roi_align(inp, rois, output_shape, mode="average", spatial_scale=1.0, sample_points=2, aligned=True):
    """Applies ROI Align: each roi bin averages (or maxes) bilinear samples on a regular grid.

    Args:
        inp: feature map ``(N, C, H, W)``.
        rois: ``(K, 5)`` rows ``(batch_index, x0, y0, x1, y1)`` in input-image coordinates.
        output_shape: ``(PH, PW)`` bins.
        mode: ``"average"`` or ``"max"`` over a bin's samples.
        spatial_scale: scale from roi coordinates to feature-map coordinates.
        sample_points: samples per bin along each axis (int or pair).
        aligned: shift roi coordinates by -0.5 (pixel centres) before sampling.

    Returns:
        ``(K, C, PH, PW)``.

    Example:
        >>> x = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
        >>> F.vision.roi_align(x, Tensor([[0., 0., 0., 4., 4.]]), 2).numpy()
        array([[[[ 2.5,  4.5],
                 [10.5, 12.5]]]], dtype=float32)
    """
    op = "roi_align"
    inp = _t(inp, op=op)
    if inp.ndim != 4:
        raise OpError(f"{op}: input must be 4-D NCHW, got shape {inp.shape}")
    if inp.dtype.kind in "iu" or inp.dtype == np.float16:
        # MegEngine's roi_align converts any other input dtype to float32 first: float16 in, float32 out
        inp = inp.astype("float32")
    _float(inp, op)
    rois = _rois(rois, op)
    mode = str(mode).lower()
    if mode not in ("average", "max"):  # (MegEngine asserts it: "only max/average mode is supported")
        raise AssertedOpError(f"{op}: mode must be 'average' or 'max', got {mode!r}")
    if rois.shape[0] == 0:  # no rois (a detector that found nothing): an empty result, as MegEngine
        from .tensor import zeros
        return zeros((0, inp.shape[1]) + _pair(output_shape, "output_shape", op), dtype=inp.dtype)
    return _apply(_V.roi_align.bind(out_hw=_pair(output_shape, "output_shape", op), mode=mode,
                                    scale=float(spatial_scale), samples=_pair(sample_points, "sample_points", op),
                                    aligned=bool(aligned)), inp, rois)


def roi_pooling(inp, rois, output_shape, mode="max", scale=1.0):
    """Applies ROI pooling (Fast R-CNN): each roi, rounded to integer pixels, is split into bins pooled by max
    (or average); an empty bin gives 0.

    Args:
        inp: feature map ``(N, C, H, W)``.
        rois: ``(K, 5)`` rows ``(batch_index, x0, y0, x1, y1)``.
        output_shape: ``(PH, PW)`` bins.
        mode: ``"max"`` or ``"average"``.
        scale: scale from roi coordinates to feature-map coordinates.

    Returns:
        ``(K, C, PH, PW)``.

    Example:
        >>> x = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
        >>> F.vision.roi_pooling(x, Tensor([[0., 0., 0., 3., 3.]]), 2).numpy()
        array([[[[ 5.,  7.],
                 [13., 15.]]]], dtype=float32)
    """
    op = "roi_pooling"
    inp = _t(inp, op=op)
    if inp.ndim != 4:
        raise OpError(f"{op}: input must be 4-D NCHW, got shape {inp.shape}")
    _float(inp, op)
    rois = _rois(rois, op)
    mode = str(mode).lower()
    if mode not in ("max", "average"):  # (MegEngine asserts it: "only max/average mode is supported")
        raise AssertedOpError(f"{op}: mode must be 'max' or 'average', got {mode!r}")
    return _apply(_V.roi_pooling.bind(out_hw=_pair(output_shape, "output_shape", op), mode=mode, scale=float(scale)),
                  inp, rois)


def nms(boxes, scores, iou_thresh, max_output=None):
    """Performs non-maximum suppression on boxes by their intersection-over-union.

    Boxes are visited in descending score order; a box is kept unless its IoU with an already kept box exceeds
    ``iou_thresh``.

    Args:
        boxes: ``(N, 4)`` boxes ``(x1, y1, x2, y2)``.
        scores: ``(N,)`` scores.
        iou_thresh: IoU above which the lower-scored box is suppressed.
        max_output: keep at most this many (default all); required under tracing.

    Returns:
        int32 indices of the kept boxes, by descending score. Their number depends on the data: under tracing
        (``jit``) it is read on the host, as MegEngine's trace reads it, so a compiled step checks it on every
        call and records again when it differs (``xla_trace`` records such a step eagerly and warns).

    Example:
        >>> boxes = Tensor([[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]])
        >>> F.vision.nms(boxes, Tensor([0.9, 0.8, 0.7]), iou_thresh=0.5).numpy()
        array([0, 2], dtype=int32)
    """
    op = "nms"
    boxes, scores = _t(boxes, op=op), _t(scores, op=op)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise OpError(f"{op}: boxes must be (N, 4), got shape {boxes.shape}")
    if scores.shape != (boxes.shape[0],):
        raise OpError(f"{op}: scores must be ({boxes.shape[0]},) to match boxes, got shape {scores.shape}")
    _float(boxes, op, "boxes")
    _float(scores, op, "scores")
    n = boxes.shape[0]
    interp = current_interpreter()
    traced = interp is not None and not getattr(interp, "eager", False)  # exclude_from_trace runs eagerly
    if traced and max_output is None:
        raise OpError(f"{op}: max_output is required under tracing (the output has a static shape there)")
    if max_output is not None and int(max_output) < 1:
        raise OpError(f"{op}: max_output must be positive, got {max_output}")
    if n == 0:  # no boxes: no indices, as MegEngine (XLA's sort/scan kernels need at least one box)
        from .tensor import zeros
        return zeros((0,), dtype="int32")
    max_output = n if max_output is None else int(max_output)
    # (no .detach(): the indices are integers, so no gradient flows anyway)
    keep, count = _apply(_V.nms.bind(iou_thresh=float(iou_thresh), max_output=max_output), boxes, scores)
    # NOTE: cut to the kept count everywhere, also under tracing, where reading it is a guarded host read:
    # returning the max_output padded indices there (they were padded with -1) gave a compiled step other
    # boxes than eager (`rois[keep]` took the last box again for every pad: Faster R-CNN's RPN).
    return keep[:int(count.item())]


def correlation(data1, data2, kernel_size=1, max_displacement=1, stride1=1, stride2=1, pad_size=0,
                is_multiply=True):
    """Applies the correlation layer of FlowNet: compares patches of ``data1`` with displaced patches of ``data2``.

    Output channel ``p * (2r + 1) + o`` (``r = max_displacement // stride2``) holds, at each position, the mean
    over a ``kernel_size`` patch and all channels of ``data1 * data2`` (or ``|data1 - data2|``) with ``data2``
    displaced by ``((p - r) * stride2, (o - r) * stride2)``; inputs are zero-padded by ``pad_size``.

    Args:
        data1, data2: ``(N, C, H, W)``.
        kernel_size: odd patch size.
        max_displacement: largest displacement.
        stride1: stride over ``data1`` positions.
        stride2: stride of displacements.
        pad_size: zero padding.
        is_multiply: multiply (else absolute difference).

    Returns:
        ``(N, (2r + 1) ** 2, OH, OW)``.

    Example:
        >>> x = F.ones((1, 2, 3, 3))
        >>> F.vision.correlation(x, x, max_displacement=1, pad_size=1).shape
        (1, 9, 3, 3)
    """
    op = "correlation"
    d1, d2 = _t(data1, op=op), _t(data2, op=op)
    if d1.ndim != 4 or d1.shape != d2.shape:
        raise OpError(f"{op}: data1 {d1.shape} and data2 {d2.shape} must be NCHW of one shape")
    _float(d1, op, "data1")
    _float(d2, op, "data2")
    k, md, s1, s2, p = int(kernel_size), int(max_displacement), int(stride1), int(stride2), int(pad_size)
    if k < 1 or k % 2 == 0 or md < 0 or s1 < 1 or s2 < 1 or p < 0:
        raise OpError(f"{op}: need an odd kernel_size, max_displacement >= 0, strides >= 1 and pad_size >= 0; "
                      f"got {k}, {md}, {s1}, {s2}, {p}")
    border = md + (k - 1) // 2
    if min(d1.shape[2:]) + 2 * p - 2 * border <= 0:
        raise OpError(f"{op}: input {d1.shape[2:]} padded by {p} is too small for displacement {md} and kernel {k}")
    return _apply(_V.correlation.bind(kernel_size=k, max_displacement=md, stride1=s1, stride2=s2, pad_size=p,
                                      is_multiply=bool(is_multiply)), d1, d2)


def cvt_color(inp, mode=""):
    """Converts the colour space of NHWC images.

    Args:
        inp: images ``(N, H, W, C)``: C = 3 for RGB/BGR sources, 1 for GRAY.
        mode: ``RGB2GRAY``, ``BGR2GRAY`` (``0.299 R + 0.587 G + 0.114 B``), ``RGB2BGR``, ``BGR2RGB``,
            ``GRAY2RGB``, ``GRAY2BGR``, ``RGB2YUV``/``YUV2RGB`` (uint8 or float32, megdnn's formulas), or
            ``YUV2{RGB,BGR,GRAY}_{NV21,NV12,YV12,YU12}`` / ``BT601_YUV2{RGB,BGR}_...`` (uint8 YUV 4:2:0
            ``(N, H*3/2, W, 1)`` to ``(N, H, W, 3)``, or ``(N, H, W, 1)`` for GRAY: megdnn's JPEG fixed point,
            or libyuv's BT.601 one).

    Returns:
        the converted images.

    Example:
        >>> x = Tensor(np.array([[[[-0.58675045, 1.7526233, 0.10702174]]]], dtype=np.float32))
        >>> F.vision.cvt_color(x, mode="RGB2GRAY").numpy()
        array([[[[0.865552]]]], dtype=float32)
    """
    op = "cvt_color"
    inp = _t(inp, op=op)
    m = str(getattr(mode, "name", mode)).upper()
    if m not in _V.CVT_COLOR_MODES:
        raise AssertedOpError(f"{op}: unsupported mode {mode!r}; one of {_V.CVT_COLOR_MODES}")  # (MegEngine asserts)
    if m.startswith("BT601_") or (m.startswith("YUV2") and m != "YUV2RGB"):
        if inp.ndim != 4 or inp.shape[3] != 1 or inp.shape[1] % 3 or (inp.shape[1] * 2 // 3) % 2 or inp.shape[2] % 2:
            raise OpError(f"{op}: mode {m} needs YUV 4:2:0 input (N, H*3/2, W, 1) with even H and W, got shape "
                          f"{inp.shape}")
        if inp.dtype != np.uint8:
            raise OpError(f"{op}: mode {m} needs uint8 input, got {inp.dtype}")
        return _apply(_V.cvt_color.bind(mode=m), inp)
    want = 1 if m.startswith("GRAY") else 3
    if inp.ndim != 4 or inp.shape[3] != want:
        raise OpError(f"{op}: mode {m} needs NHWC input with {want} channels, got shape {inp.shape}")
    if m in ("RGB2YUV", "YUV2RGB") and inp.dtype not in (np.uint8, np.float32):
        raise OpError(f"{op}: mode {m} needs uint8 or float32 input, got {inp.dtype}")
    return _apply(_V.cvt_color.bind(mode=m), inp)


def resize(inp, size, format="NCHW", imode="bilinear", max_size=None):
    """Resize a batch of images to ``size`` (MegEngine 1.13's ``F.vision.resize``, its ``Resize`` op).

    Args:
        inp: ``(N, C, H, W)`` (``format="NCHW"``) or ``(N, H, W, C)`` (``format="NHWC"``) images.
        size: ``(OH, OW)`` (a sequence or a 2-element Tensor), or an int for a square output.
        format: ``"NCHW"`` or ``"NHWC"``.
        imode: ``"bilinear"`` (or ``"linear"``: half-pixel centres), ``"nearest"`` or ``"bicubic"`` (``"cubic"``).
        max_size: if given, each output side larger than it becomes ``max_size`` (as MegEngine clamps them).

    Returns:
        the resized images, in ``format``.

    Example:
        >>> x = Tensor(np.arange(0, 16, dtype=np.float32).reshape(1, 1, 4, 4))
        >>> F.vision.resize(x, Tensor([2, 2])).numpy()
        array([[[[ 2.5,  4.5],
                 [10.5, 12.5]]]], dtype=float32)
        >>> F.vision.resize(x, (6, 8), max_size=5).shape
        (1, 1, 5, 5)
    """
    op = "resize"
    modes = {"linear": "bilinear", "nearest": "nearest", "cubic": "bicubic"}
    mode = str(imode).lower()
    if mode in ("bilinear", "bicubic"):  # (MegEngine's names; its Resize op's are "linear" and "cubic")
        mode = mode[2:]
    if mode not in modes:
        raise OpError(f"{op}: unsupported imode {imode!r} (bilinear, nearest or bicubic)")
    fmt = str(format).upper()
    if fmt not in ("NCHW", "NHWC"):
        raise OpError(f"{op}: unsupported format {format!r} (NCHW or NHWC)")
    inp = _t(inp, op=op)
    if inp.ndim != 4:
        raise OpError(f"{op}: expected a 4-D {fmt} input, got shape {inp.shape}")
    size = _pair(size, "size", op)  # (a Tensor is read on the host, as MegEngine's op reads it)
    if max_size is not None:
        size = tuple(int(max_size) if v > max_size else v for v in size)
    if fmt == "NHWC":
        inp = inp.transpose(0, 3, 1, 2)
    out = interpolate(inp, size=size, mode=modes[mode], align_corners=False if mode == "linear" else None)
    return out.transpose(0, 2, 3, 1) if fmt == "NHWC" else out


__all__ += ["resize"]


def _nhwc_image(inp, op):
    """``inp`` as a Tensor, checked as megdnn's Flip/Rotate check it: 4-D NHWC with 1 or 3 channels."""
    inp = _t(inp, op=op)
    if inp.ndim != 4 or inp.shape[3] not in (1, 3):
        raise OpError(f"{op}: input must be NHWC images (N, H, W, C) with C = 1 or 3 (megdnn's {op} rule), got "
                      f"shape {inp.shape} ({inp.dtype})")
    if inp.dtype == np.bool_:  # megdnn's kernels cover its computing (numeric) dtypes only
        raise OpError(f"{op}: input must be a numeric tensor, got shape {inp.shape} ({inp.dtype})")
    return inp


def flip(inp, vertical=True, horizontal=True):
    """Flips NHWC images vertically (along H) and/or horizontally (along W) (MegEngine's ``Flip`` op).

    With both flags False the result is an unflipped copy.

    Args:
        inp: images ``(N, H, W, C)`` with C = 1 or 3 (megdnn's rule).
        vertical: flip along H (default True).
        horizontal: flip along W (default True).

    Returns:
        the flipped images, shape and dtype of ``inp``.

    Example:
        >>> x = Tensor(np.arange(0, 4, dtype=np.float32).reshape(1, 2, 2, 1))
        >>> F.vision.flip(x).numpy()[0, :, :, 0]
        array([[3., 2.],
               [1., 0.]], dtype=float32)
        >>> F.vision.flip(x, vertical=False).numpy()[0, :, :, 0]
        array([[1., 0.],
               [3., 2.]], dtype=float32)
    """
    from .tensor import flip as _flip
    inp = _nhwc_image(inp, "flip")
    # (an empty axis tuple still applies the primitive: a new tensor, as MegEngine's op returns)
    return _flip(inp, ((1,) if vertical else ()) + ((2,) if horizontal else ()))


def rot90(inp, clockwise=True):
    """Rotates NHWC images by 90 degrees (MegEngine's ``Rotate`` op): ``(N, H, W, C)`` becomes ``(N, W, H, C)``.

    Clockwise is ``np.rot90(x, 3, (1, 2))``, counterclockwise ``np.rot90(x, 1, (1, 2))``.

    Args:
        inp: images ``(N, H, W, C)`` with C = 1 or 3 (megdnn's rule).
        clockwise: rotate clockwise (default) or counterclockwise.

    Returns:
        the rotated images ``(N, W, H, C)``, dtype of ``inp``.

    Example:
        >>> x = Tensor(np.arange(0, 4, dtype=np.float32).reshape(1, 2, 2, 1))
        >>> F.vision.rot90(x).numpy()[0, :, :, 0]
        array([[2., 0.],
               [3., 1.]], dtype=float32)
        >>> F.vision.rot90(x, clockwise=False).numpy()[0, :, :, 0]
        array([[1., 3.],
               [0., 2.]], dtype=float32)
    """
    from .tensor import flip as _flip, transpose
    inp = _nhwc_image(inp, "rot90")
    # megdnn: clockwise, dst[n, w, H - 1 - h] = src[n, h, w]; counterclockwise, dst[n, W - 1 - w, h] = src[n, h, w]:
    # the H/W transpose, then the new W (clockwise) or new H (counterclockwise) axis reversed
    return _flip(transpose(inp, (0, 2, 1, 3)), (2,) if clockwise else (1,))


def rotate(inp, angle=0.0, format="NCHW", interp_mode="bilinear"):
    """Rotates images by ``angle`` degrees about their centre (counterclockwise on screen for a positive angle),
    keeping their size: MegEngine's ``warp_affine`` with a constant (zero) border.

    The output pixel ``(x, y)`` samples the input at ``(cos a (x - cx) - sin a (y - cy) + cx,
    sin a (x - cx) + cos a (y - cy) + cy)``, ``(cx, cy) = ((W - 1) / 2, (H - 1) / 2)``; the matrix is computed in
    float32, as MegEngine's. As in MegEngine, the matrix has batch 1, so ``N`` must be 1.

    Args:
        inp: one image ``(1, C, H, W)`` (or ``(1, H, W, C)`` with ``format="NHWC"``): float, int8 or uint8.
        angle: the rotation angle in degrees (a number or a scalar Tensor).
        format: ``"NCHW"`` or ``"NHWC"``.
        interp_mode: must be ``"bilinear"`` for NCHW; NHWC requires ``"area"``, which MegEngine 1.13's
            ``warp_affine`` rejects for NHWC, so an NHWC rotation raises an error there as here.

    Returns:
        the rotated image, shape and dtype of ``inp``.

    Example:
        >>> x = Tensor(np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3))
        >>> F.vision.rotate(x, 90.0).numpy()[0, 0].round(4)
        array([[2., 5., 8.],
               [1., 4., 7.],
               [0., 3., 6.]], dtype=float32)
    """
    from .elemwise import cos, sin
    from .tensor import stack
    op = "rotate"
    inp = _t(inp, op=op)
    fmt = str(format)
    if fmt == "NCHW":
        if interp_mode != "bilinear":  # (MegEngine asserts it)
            raise AssertedOpError(f"{op}: the NCHW format only supports interp_mode 'bilinear', got {interp_mode!r}")
    elif fmt == "NHWC":
        if interp_mode != "area":  # (MegEngine asserts it)
            raise AssertedOpError(f"{op}: the NHWC format only supports interp_mode 'area', got {interp_mode!r}")
        # MegEngine 1.13 passes imode AREA to WarpAffine, whose layout check rejects AREA for NHWC
        raise OpError(f"{op}: MegEngine's warp_affine does not support interp_mode 'area' in NHWC format (input "
                      f"shape {inp.shape}, {inp.dtype}); rotate NCHW images with interp_mode 'bilinear'")
    else:
        raise OpError(f"{op}: format must be 'NCHW' or 'NHWC', got {format!r}")
    if inp.ndim != 4 or inp.shape[0] != 1:
        # megdnn's WarpAffine: one matrix per image, and MegEngine builds one matrix
        raise OpError(f"{op}: input must be one NCHW image (1, C, H, W), got shape {inp.shape} ({inp.dtype})")
    if not (is_float(inp.dtype) or inp.dtype in (np.int8, np.uint8)):
        raise OpError(f"{op}: input must be float, int8 or uint8 (megdnn's WarpAffine NCHW rule), got shape "
                      f"{inp.shape} ({inp.dtype})")
    height, width = inp.shape[2:]
    angle = angle / 180.0 * np.pi
    c, s = cos(angle), sin(angle)  # float32 tensors, as MegEngine's F.cos/F.sin of a Python float
    cx, cy = (width - 1) / 2, (height - 1) / 2
    mat = stack([c, -s, (1 - c) * cx + s * cy, s, c, -s * cx + (1 - c) * cy]).reshape(1, 2, 3)
    return warp_affine(inp, mat, (height, width), border_mode="constant", format="NCHW", interp_mode="linear")


__all__ += ["flip", "rot90", "rotate"]
