"""Batch normalisation layers."""
from typing import Optional

import numpy as np

from ..core import _interrupt
from ..core import _autocast as _amp  # autocast state (one attribute read when off)
from ..core._dispatch import apply
from ..core._tensor import Parameter, Tensor
from ..core.dtypes import is_float
from ..core.ops import nn as _N
from ..functional.nn import batch_norm
from . import init
from ._errors import LayerArgumentError
from .module import Module

__all__ = ["BatchNorm1d", "BatchNorm2d", "SyncBatchNorm"]


class _BatchNorm(Module):
    """Shared implementation: parameters and buffers are stored ``(1, C, 1, 1)`` (MegEngine's layout)."""

    _ndims = (4,)

    def __init__(self, num_features, eps=1e-5, momentum=0.9, affine=True, track_running_stats=True, freeze=False,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        self._track_running_stats_saved = track_running_stats
        self.freeze = freeze
        if freeze and not track_running_stats:
            raise LayerArgumentError("track_running_stats must be initialized to True if freeze is True")
        tshape = (1, num_features, 1, 1)
        if affine:
            self.weight = Parameter(np.ones(tshape, dtype=np.float32))
            self.bias = Parameter(np.zeros(tshape, dtype=np.float32))
        else:
            self.weight = None
            self.bias = None
        if track_running_stats:
            self.running_mean = Tensor(np.zeros(tshape, dtype=np.float32))
            self.running_var = Tensor(np.ones(tshape, dtype=np.float32))
        else:
            self.running_mean = None
            self.running_var = None

    def reset_running_stats(self) -> None:
        """Reset the running mean to zeros and the running variance to ones.

        Example:
            >>> bn = M.BatchNorm2d(3); bn.reset_running_stats(); bn.running_var.numpy().ravel()
            array([1., 1., 1.], dtype=float32)
        """
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)

    def reset_parameters(self) -> None:
        """Reset running statistics and the affine parameters (weight ones, bias zeros).

        Example:
            >>> bn = M.BatchNorm2d(3); bn.reset_parameters(); bn.weight.numpy().ravel()
            array([1., 1., 1.], dtype=float32)
        """
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _check_input_ndim(self, inp):
        if inp.ndim not in self._ndims:
            want = " or ".join(f"{d}D" for d in self._ndims)
            raise ValueError(f"{type(self).__name__}: expected {want} input (got {inp.ndim}D input)")

    def forward(self, inp):
        """Normalise ``inp`` with batch statistics (training) or running statistics (evaluation / freeze).

        In training with ``track_running_stats`` the running buffers are updated in place:
        ``running = momentum * running + (1 - momentum) * batch_stat`` (variance unbiased).
        """
        self._check_input_ndim(inp)
        if not self._track_running_stats_saved and self.track_running_stats:
            raise LayerArgumentError("track_running_stats can not be initialized to False and changed to True later")
        weight, bias = self.weight, self.bias
        if self.freeze:
            # Frozen BN is an affine map of fixed statistics: nothing learns, nothing updates.
            if weight is not None:
                weight, bias = weight.detach(), bias.detach()
            return batch_norm(inp, self.running_mean, self.running_var, weight, bias, training=False,
                              eps=self.eps)
        track = self.track_running_stats
        if _amp.enabled and isinstance(inp, Tensor) and is_float(inp.dtype):
            inp, = _amp.low(inp)  # autocast: MegEngine's BatchNorm takes the input in low precision
        if self.training and track and self._fusable(inp):
            # NOTE: one op for the normalisation and the running-statistics update (was ~9 op calls per layer
            # in an eager step); the functional path below validates and reports anything unusual.
            rm, rv = self.running_mean, self.running_var
            affine = () if weight is None else (weight, bias)
            axes = (0,) + tuple(range(2, inp.ndim))
            op = _N.batch_norm_train_update.bind(axes=axes, eps=float(self.eps), eps_mode="additive",
                                                 momentum=float(self.momentum))
            out, new_mean, new_var = apply(op, inp, rm, rv, *affine)
            _interrupt.rebind(((rm, new_mean), (rv, new_var)))
            return out
        return batch_norm(inp, self.running_mean if track else None, self.running_var if track else None,
                          weight, bias, training=self.training or not track,
                          momentum=self.momentum if self.training and track else 0.0, eps=self.eps)

    def _fusable(self, inp):
        """Whether the one-op training path applies: Tensors everywhere, float input, C channels everywhere."""
        rm, rv, w, b = self.running_mean, self.running_var, self.weight, self.bias
        if not (isinstance(inp, Tensor) and inp.ndim >= 2 and is_float(inp.dtype)
                and isinstance(rm, Tensor) and isinstance(rv, Tensor)):
            return False
        c = inp.shape[1]
        if (w is None) != (b is None) or rm.size != c or rv.size != c:
            return False
        if w is not None and not (isinstance(w, Tensor) and isinstance(b, Tensor) and w.size == c and b.size == c
                                  and is_float(w.dtype) and b.dtype == w.dtype):
            return False
        return isinstance(self.momentum, (int, float)) and isinstance(self.eps, (int, float))

    def _module_info_string(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    r"""Batch normalisation over a 2-D ``(N, C)`` or 3-D ``(N, C, L)`` input.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias`` per channel, with batch statistics in training
    (updating ``running_mean`` / ``running_var``) and the running ones in evaluation.

    Args:
        num_features: the number of channels C.
        eps: added to the variance.
        momentum: weight of the old running value in the update
            ``running = momentum * running + (1 - momentum) * batch_stat``.
        affine: learn ``weight`` (ones) and ``bias`` (zeros), stored ``(1, C, 1, 1)``.
        track_running_stats: keep running statistics (else batch statistics are used in evaluation too).
        freeze: always use the running statistics and never update them (for fine-tuning).

    Example:
        >>> bn = M.BatchNorm1d(3)
        >>> bn(mge.Tensor(np.random.randn(4, 3).astype("float32"))).shape
        (4, 3)
    """

    _ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    r"""Batch normalisation over a 4-D NCHW input.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias`` per channel, with batch statistics in training
    (updating ``running_mean`` / ``running_var``, both ``(1, C, 1, 1)``) and the running ones in evaluation.

    Args:
        num_features: the number of channels C.
        eps: added to the variance.
        momentum: weight of the old running value in the update
            ``running = momentum * running + (1 - momentum) * batch_stat`` (variance unbiased).
        affine: learn ``weight`` (ones) and ``bias`` (zeros), stored ``(1, C, 1, 1)``.
        track_running_stats: keep running statistics (else batch statistics are used in evaluation too).
        freeze: always use the running statistics and never update them (for fine-tuning).

    Example:
        >>> bn = M.BatchNorm2d(3)
        >>> bn(mge.Tensor(np.random.randn(2, 3, 4, 4).astype("float32"))).shape
        (2, 3, 4, 4)
    """


class SyncBatchNorm(_BatchNorm):
    r"""Batch normalisation with statistics synchronised across the processes of ``group``.

    In training, when distributed, the batch statistics are those of all processes' batches; otherwise it
    is exactly :class:`BatchNorm2d`, also accepting 2-D and 3-D inputs.

    Args:
        num_features, eps, momentum, affine, track_running_stats, freeze: as :class:`BatchNorm2d`.
        group: the distributed group whose statistics are synchronised (None: ``WORLD``).

    Example:
        >>> bn = M.SyncBatchNorm(3)
        >>> bn(mge.Tensor(np.random.randn(2, 3, 4, 4).astype("float32"))).shape
        (2, 3, 4, 4)
    """

    _ndims = (2, 3, 4)

    def __init__(self, num_features, eps=1e-5, momentum=0.9, affine=True, track_running_stats=True, freeze=False,
                 group: Optional[object] = None, **kwargs) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, freeze, **kwargs)
        self.group = group

    def forward(self, inp):
        """As :class:`BatchNorm2d`, with the statistics of all processes of ``group`` in training when
        distributed (see :func:`~megxla.functional.nn.sync_batch_norm`)."""
        from ..functional.distributed import _sync_needed
        if self.training and not self.freeze and _sync_needed(self.group):
            self._check_input_ndim(inp)
            from ..functional.nn import sync_batch_norm
            track = self.track_running_stats
            return sync_batch_norm(inp, self.running_mean if track else None, self.running_var if track else None,
                                   self.weight, self.bias, training=True, momentum=self.momentum, eps=self.eps,
                                   group=self.group)
        return super().forward(inp)
