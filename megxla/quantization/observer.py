"""Observers: modules that watch the values flowing through a point of the network and derive quantization
parameters from them. Their statistics are Tensors updated with in-place setitem, so inside a compiled step
(``xla_trace``) they are ordinary state: inputs of the executable and outputs written back."""
from __future__ import annotations

from copy import deepcopy
from typing import Union

import numpy as np

from .. import functional as F
from ..core._tensor import Tensor
from ..core.tensor.dtype import QuantDtypeMeta
from ..logger import get_logger
from ..module import Module
from .utils import QParams, QParamsModuleMixin, QuantMode, _meta, create_qparams

__all__ = ["Observer", "MinMaxObserver", "SyncMinMaxObserver", "ExponentialMovingAverageObserver",
           "SyncExponentialMovingAverageObserver", "HistogramObserver", "PassiveObserver"]

logger = get_logger(__name__)


class Observer(Module, QParamsModuleMixin):
    r"""Base class of observers.

    Args:
        dtype: the quantized dtype to compute parameters for (a name such as ``"qint8"`` or a QuantDtypeMeta).

    Sub-classes implement ``forward`` (observe a tensor, return it unchanged) and ``get_qparams``.

    Example:
        >>> from megxla.quantization import MinMaxObserver, Observer
        >>> ob = MinMaxObserver(dtype="quint8")
        >>> isinstance(ob, Observer), ob.qmin, ob.qmax, ob.enabled
        (True, 0, 255, True)
        >>> ob.disable(); ob.enabled
        False
    """

    def __init__(self, dtype: Union[str, QuantDtypeMeta], **kwargs):
        if kwargs.pop("narrow_range", None) is not None:
            logger.warning("Observer has no narrow_range parameter (use a *_narrow dtype); it is ignored")
        # other keywords (``name=`` too) are dropped, as MegEngine's ``super().__init__()``: a qconfig's partial with
        # an argument some observers take (``reduce_range=True``) builds every one of them
        super().__init__()
        self.dtype = _meta(dtype)
        self.qmin = self.dtype.qmin
        self.qmax = self.dtype.qmax
        self.enabled = True

    def enable(self):
        """Observe again."""
        self.enabled = True

    def disable(self):
        """Stop updating the statistics (the observer passes its input through)."""
        self.enabled = False

    def train(self, mode: bool = True, recursive: bool = True) -> None:
        """Training mode also switches observation on (evaluation: off), as in MegEngine."""
        super().train(mode, recursive)
        if mode:
            self.enable()
        else:
            self.disable()

    def forward(self, x):
        raise TypeError(f"{type(self).__name__} is abstract: use MinMaxObserver, ExponentialMovingAverageObserver, ...")


class MinMaxObserver(Observer):
    r"""Tracks the running minimum and maximum; the scale maps ``[min, max]`` (widened to include 0) onto the
    dtype's range.

    Args:
        mode: symmetric or asymmetric quantization.
        eps: the smallest scale.
        dtype: the quantized dtype.

    Example:
        >>> ob = MinMaxObserver()
        >>> _ = ob(Tensor([-1.0, 2.54]))
        >>> round(float(ob.get_qparams().scale), 4)
        0.02
    """

    def __init__(self, mode: QuantMode = QuantMode.SYMMERTIC, eps: float = 0.00001,
                 dtype: Union[str, QuantDtypeMeta] = "qint8", **kwargs):
        super().__init__(dtype, **kwargs)
        self.mode = mode
        self.min_val = Tensor(np.finfo(np.float32).max, dtype="float32")
        self.max_val = Tensor(np.finfo(np.float32).min, dtype="float32")
        self.scale_limit = eps

    def _calculate_qparams(self, inp_min_val, inp_max_val):
        min_val = F.minimum(0.0, inp_min_val)
        max_val = F.maximum(0.0, inp_max_val)
        if self.mode == QuantMode.SYMMERTIC:
            sym = F.maximum(-min_val, max_val)
            # the maximum keeps the scale away from 0 before anything was observed
            scale = F.maximum(sym / ((self.qmax - self.qmin) / 2), self.scale_limit)
            zero_point = None
        else:
            scale = F.maximum((max_val - min_val) / (self.qmax - self.qmin), self.scale_limit)
            zero_point = self.qmin - F.round(min_val / scale)
        return create_qparams(self.mode, self.dtype, scale=scale, zero_point=zero_point)

    def get_qparams(self):
        """Scale (and zero point) from the observed range."""
        return self._calculate_qparams(self.min_val, self.max_val)

    def _batch_min_max(self, x):
        return x.min(), x.max()

    def forward(self, x_orig):
        """Update the range with ``x_orig`` (no gradient flows through the statistics); returns the input."""
        if self.enabled:
            x = x_orig.detach()
            lo, hi = self._batch_min_max(x)
            self.min_val[...] = F.minimum(self.min_val, lo)
            self.max_val[...] = F.maximum(self.max_val, hi)
        return x_orig


def _world_min_max(x):
    # Sync observers: the range over every process of the data-parallel group.
    from .. import distributed as dist
    lo, hi = x.min(), x.max()
    if dist.is_distributed():
        from ..functional.distributed import all_reduce_max, all_reduce_min
        lo, hi = all_reduce_min(lo), all_reduce_max(hi)
    return lo, hi


class SyncMinMaxObserver(MinMaxObserver):
    """:class:`MinMaxObserver` whose range is reduced over all distributed processes (the minimum and maximum
    all-reduced; in a single process it is :class:`MinMaxObserver`).

    Args:
        mode, eps, dtype: as :class:`MinMaxObserver`.

    Example:
        >>> ob = SyncMinMaxObserver()
        >>> _ = ob(Tensor([-1.0, 2.54]))
        >>> round(float(ob.get_qparams().scale), 4)
        0.0199
    """

    def _batch_min_max(self, x):
        return _world_min_max(x)


class ExponentialMovingAverageObserver(MinMaxObserver):
    r"""Exponential moving average of the batch minimum / maximum (the first batch sets them).

    Args:
        momentum: weight of the old statistics.
        mode, eps, dtype: as :class:`MinMaxObserver`.

    Example:
        >>> ob = ExponentialMovingAverageObserver(momentum=0.5)
        >>> _ = ob(Tensor([0.0, 2.0])); _ = ob(Tensor([0.0, 4.0]))
        >>> float(ob.max_val)
        3.0
    """

    def __init__(self, momentum: float = 0.9, mode: QuantMode = QuantMode.SYMMERTIC, eps: float = 0.00001,
                 dtype: Union[str, QuantDtypeMeta] = "qint8", **kwargs):
        super().__init__(mode, eps, dtype, **kwargs)
        self.momentum = Tensor(momentum, dtype="float32")
        # 0 on the first batch, then ``momentum``: no Python branch on the step count, so a compiled step
        # does the same thing on every call.
        self.runtime_momentum = Tensor(0.0, dtype="float32")

    def set_momentum(self, momentum):
        """Change the momentum."""
        self.momentum = Tensor(momentum, dtype="float32")

    def forward(self, x_orig):
        """Update the moving averages with ``x_orig``; returns the input."""
        if self.enabled:
            x = x_orig.detach()
            lo, hi = self._batch_min_max(x)
            m = self.runtime_momentum
            self.min_val[...] = self.min_val * m + (1 - m) * lo
            self.max_val[...] = self.max_val * m + (1 - m) * hi
            self.runtime_momentum[...] = self.momentum
        return x_orig


class SyncExponentialMovingAverageObserver(ExponentialMovingAverageObserver):
    """:class:`ExponentialMovingAverageObserver` over all distributed processes (each batch's minimum and maximum
    all-reduced before the average; in a single process it is :class:`ExponentialMovingAverageObserver`).

    Args:
        momentum, mode, eps, dtype: as :class:`ExponentialMovingAverageObserver`.

    Example:
        >>> ob = SyncExponentialMovingAverageObserver(momentum=0.5)
        >>> _ = ob(Tensor([0.0, 2.0])); _ = ob(Tensor([0.0, 4.0]))
        >>> float(ob.max_val)
        3.0
    """

    def _batch_min_max(self, x):
        return _world_min_max(x)


class HistogramObserver(MinMaxObserver):
    r"""Calibration observer: keeps a histogram of the values and picks the range that minimises the L2
    quantization error (the search runs on the host, in NumPy, as MegEngine's does; use it for
    calibration, not inside a compiled training step).

    Args:
        bins: histogram bins.
        upsample_rate: resolution factor when merging histograms of different ranges.
        mode, eps, dtype: as :class:`MinMaxObserver`.

    Example:
        >>> ob = HistogramObserver()
        >>> _ = ob(Tensor(np.linspace(-1, 1, 1000, dtype="float32")))
        >>> float(ob.min_val), float(ob.max_val)
        (-1.0, 1.0)
        >>> round(float(ob.get_qparams().scale), 5)
        0.00784
    """

    def __init__(self, bins: int = 2048, upsample_rate: int = 128, mode: QuantMode = QuantMode.SYMMERTIC,
                 eps: float = 0.00001, dtype: Union[str, QuantDtypeMeta] = "qint8", **kwargs):
        super().__init__(mode, eps, dtype, **kwargs)
        self.bins = bins
        self.upsample_rate = upsample_rate
        self.dst_nbins = self.dtype.qmax - self.dtype.qmin + 1
        self.histogram = Tensor([-1] + [0.0] * (bins - 1), dtype="float32")

    def _quantization_error(self, hist, bin_width, start, end):
        # L2 error of mapping source bins [start, end] onto dst_nbins equal bins, with the mass of each source
        # bin spread uniformly over it (vectorised form of the per-bin loop).
        dst_w = bin_width * (end - start + 1) / self.dst_nbins
        if dst_w == 0.0:
            return 0.0
        src = np.arange(self.bins)
        begin = (src - start) * bin_width
        stop = begin + bin_width
        db = np.clip(np.floor(begin / dst_w), 0, self.dst_nbins - 1)
        de = np.clip(np.floor(stop / dst_w), 0, self.dst_nbins - 1)
        density = hist / bin_width

        def norm(a, b):
            return (b ** 3 - a ** 3) / 3

        cb = db * dst_w + dst_w / 2
        same = db == de
        err = np.where(same, norm(begin - cb, stop - cb), 0.0)
        ce = de * dst_w + dst_w / 2
        split = (norm(begin - cb, dst_w / 2) + (de - db - 1) * norm(-dst_w / 2, dst_w / 2)
                 + norm(-dst_w / 2, stop - ce))
        err = np.where(same, err, split)
        return float((density * err).sum())

    def _non_linear_param_search(self):
        lo, hi = float(self.min_val.numpy()), float(self.max_val.numpy())
        hist = self.histogram.numpy().astype(np.float64)
        bin_width = (hi - lo) / self.bins
        total, csum = hist.sum(), np.cumsum(hist)
        alpha, beta, step = 0.0, 1.0, 1e-5
        start, end = 0, self.bins - 1
        best = float("inf")
        while alpha < beta:
            next_alpha, next_beta = alpha + step, beta - step
            l, r = start, end
            while l < end and csum[l] < next_alpha * total:
                l += 1
            while r > start and csum[r] > next_beta * total:
                r -= 1
            ns, ne = start, end
            if (l - start) > (end - r):
                ns, alpha = l, next_alpha
            else:
                ne, beta = r, next_beta
            if ns == start and ne == end:
                continue
            err = self._quantization_error(hist, bin_width, ns, ne)
            if err > best:
                break
            best, start, end = err, ns, ne
        return (Tensor(lo + bin_width * start, dtype="float32"),
                Tensor(lo + bin_width * (end + 1), dtype="float32"))

    def get_qparams(self):
        """Parameters from the error-minimising sub-range of the histogram; ValueError before any data (MegEngine's
        too: its search over an empty histogram fails converting a NaN)."""
        if float(self.histogram.numpy()[0]) == -1:
            raise ValueError("HistogramObserver.get_qparams: the observer has seen no data (run the model on "
                             "calibration data first)")
        return self._calculate_qparams(*self._non_linear_param_search())

    def sideeffect_forward(self, x_orig):
        """Merge ``x_orig`` into the histogram (host computation)."""
        x = np.asarray(x_orig.numpy(), dtype=np.float64)
        old = self.histogram.numpy().astype(np.float64)
        new_min, new_max = float(x.min()), float(x.max())
        if old[0] == -1:
            hist, _ = np.histogram(x, self.bins, (new_min, new_max))
            hist = hist.astype(np.float64)
        else:
            lo, hi = float(self.min_val.numpy()), float(self.max_val.numpy())
            new_min, new_max = min(new_min, lo), max(new_max, hi)
            if new_min == lo and new_max == hi:
                hist = np.histogram(x, self.bins, (lo, hi))[0] + old
            elif lo == hi:
                # every value so far was ``lo`` (a ReLU's zeros): no grid to re-grid (MegEngine divides by its zero
                # width and raises), so they are counted in the new grid's bin of ``lo``, as if seen with ``x``
                hist = np.histogram(x, self.bins, (new_min, new_max))[0].astype(np.float64)
                hist = hist + np.histogram([lo], self.bins, (new_min, new_max))[0] * old.sum()
            else:
                # re-grid: the old histogram is upsampled onto a common fine grid and summed into new bins
                fine_w = (hi - lo) / (self.bins * self.upsample_rate)
                down = int(np.ceil((new_max - new_min) / (self.bins * fine_w)))
                e = down * self.bins * fine_w - (new_max - new_min)
                new_min, new_max = new_min - e / 2, new_max + e / 2
                start = int(np.round((lo - new_min) / fine_w))
                hist = np.histogram(x, self.bins, (new_min, new_max))[0].astype(np.float64)
                fine = np.zeros(self.bins * down)
                fine[start:start + self.bins * self.upsample_rate] = np.repeat(old, self.upsample_rate)
                integral = np.cumsum(fine)[down - 1::down]
                shifted = np.concatenate([[0.0], integral[:-1]])
                hist = hist + (integral - shifted) / self.upsample_rate
        self.histogram = Tensor(hist, dtype="float32")
        self.min_val = Tensor(new_min, dtype="float32")
        self.max_val = Tensor(new_max, dtype="float32")

    def forward(self, x_orig):
        """Merge ``x_orig`` into the histogram; returns the input.

        MegEngine's HistogramObserver observes whatever ``enabled`` says (evaluation mode and
        :func:`disable_observer` included): it is the calibration observer, and calibration runs a network in
        evaluation mode."""
        self.sideeffect_forward(x_orig)
        return x_orig


class PassiveObserver(Observer):
    r"""Holds quantization parameters given to it (:meth:`set_qparams`) instead of observing; its ``scale``
    may be tuned by hand (EasyQuant).

    Args:
        dtype: the quantized dtype.

    Example:
        >>> from megxla.quantization import QuantMode, create_qparams
        >>> ob = PassiveObserver("qint8")
        >>> ob.set_qparams(create_qparams(QuantMode.SYMMERTIC, "qint8", Tensor(0.5)))
        >>> ob(Tensor([1.0, 2.0])).numpy(), float(ob.scale)
        (array([1., 2.], dtype=float32), 0.5)
        >>> ob.scale = 0.25; float(ob.get_qparams().scale)
        0.25
    """

    def __init__(self, dtype: Union[str, QuantDtypeMeta], **kwargs):
        super().__init__(dtype, **kwargs)
        self.qparams = None
        self.orig_scale = None

    @property
    def scale(self):
        """The scale of the held parameters."""
        return self.qparams.scale

    @scale.setter
    def scale(self, value):
        value = np.asarray(value, dtype=np.float32)
        if not np.all(value > 0):
            raise ValueError(f"PassiveObserver.scale must be positive, got {value}")
        self.qparams.scale[...] = Tensor(value)

    def get_qparams(self):
        """The held parameters."""
        return self.qparams

    def set_qparams(self, qparams: QParams):
        """Hold a copy of ``qparams`` (its scale must be set; its dtype must be this observer's)."""
        if qparams.scale is None:
            raise ValueError("PassiveObserver.set_qparams: the qparams have no scale")
        if qparams.dtype_meta is not None and qparams.dtype_meta != self.dtype:
            raise ValueError(f"PassiveObserver.set_qparams: qparams dtype {qparams.dtype_meta.name} is not the "
                             f"observer's {self.dtype.name}")
        self.qparams = deepcopy(qparams)
        if self.qparams.dtype_meta is None:
            self.qparams.dtype_meta = self.dtype
        self.orig_scale = qparams.scale.numpy()

    def forward(self, x):
        """Identity."""
        return x
