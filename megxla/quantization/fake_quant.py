"""Fake-quantization modules: :class:`FakeQuantize` (parameters from an observer), :class:`TQT` and
:class:`LSQ` (learned scales). Each is one primitive (``fake_quant``, ``tqt``, ``lsq``) with MegEngine's
straight-through / learned-scale gradients, so it compiles into an ``xla_trace`` step like any op."""
from __future__ import annotations

import math
from typing import Union

from .. import functional as F
from ..core._tensor import Parameter, Tensor
from ..core.tensor.dtype import QuantDtypeMeta
from ..logger import get_logger
from ..module import Module
from .utils import (LSQParams, QParams, QParamsModuleMixin, QuantMode, _meta, create_qparams, fake_quant_tensor,
                    lsq_forward, tqt_forward)

__all__ = ["FakeQuantize", "TQT", "LSQ"]

logger = get_logger(__name__)


class _FakeQuantize(Module):
    def __init__(self, dtype: Union[str, QuantDtypeMeta], enable: bool = True, **kwargs):
        if kwargs.pop("narrow_range", None) is not None:
            logger.warning("FakeQuantize has no narrow_range parameter (use a *_narrow dtype); it is ignored")
        # other keywords (``name=`` too) are dropped, as MegEngine's ``super().__init__()``: a qconfig's partial with
        # an argument some observers take (``reduce_range=True``) builds every one of them
        super().__init__()
        self.dtype = _meta(dtype)
        self.qmin = self.dtype.qmin
        self.qmax = self.dtype.qmax
        self.enabled = enable

    def enable(self):
        """Fake-quantize again."""
        self.enabled = True

    def disable(self):
        """Pass the input through unchanged."""
        self.enabled = False

    def normal_forward(self, inp, qparams: QParams = None):
        """The disabled path: the input itself."""
        return inp

    def forward(self, inp, qparams: QParams = None):
        """Fake-quantize ``inp`` when enabled, else return it."""
        if self.enabled:
            return self.fake_quant_forward(inp, qparams=qparams)
        return self.normal_forward(inp, qparams=qparams)


class FakeQuantize(_FakeQuantize):
    r"""Fake quantization with the parameters an observer computed.

    Args:
        dtype: the quantized dtype (e.g. ``"qint8"``).
        enable: start enabled.

    Example:
        >>> fq = FakeQuantize("qint8")
        >>> q = create_qparams(QuantMode.SYMMERTIC, "qint8", Tensor(0.5))
        >>> fq(Tensor([0.3, 1.2]), q).numpy()
        array([0.5, 1. ], dtype=float32)
    """

    def fake_quant_forward(self, inp, qparams: QParams = None):
        """``fake_quant_tensor(inp, qparams)``; ``qparams`` must be of this module's dtype."""
        if qparams is None:
            raise ValueError("FakeQuantize needs qparams (from an observer) to fake-quantize")
        if qparams.dtype_meta != self.dtype:
            raise ValueError(f"FakeQuantize: qparams dtype {getattr(qparams.dtype_meta, 'name', None)} is not "
                             f"the module's {self.dtype.name}")
        return fake_quant_tensor(inp, qparams)


class TQT(_FakeQuantize, QParamsModuleMixin):
    r"""Trained quantization thresholds: the step is ``2 ** scale`` with ``scale`` a learned Parameter
    (symmetric only).

    Args:
        dtype: the quantized dtype.
        enable: start enabled.

    Example:
        >>> t = TQT("qint8"); t.scale[...] = Tensor(-1.0)
        >>> t(Tensor([0.3, 1.0])).numpy()
        array([0.5, 1. ], dtype=float32)
    """

    def __init__(self, dtype: Union[str, QuantDtypeMeta], enable: bool = True, **kwargs):
        super().__init__(dtype, enable, **kwargs)
        self.scale = Parameter(0.0, dtype="float32")

    def fake_quant_forward(self, inp, qparams: QParams = None):
        """Fake-quantize with the learned log2 step."""
        return tqt_forward(self.qmin, self.qmax, inp, self.scale)

    def set_qparams(self, qparams: QParams):
        """Initialise the log2 step from ``qparams.scale`` (symmetric mode only)."""
        if qparams.mode != QuantMode.SYMMERTIC:
            raise ValueError("TQT supports symmetric quantization only")
        if qparams.scale is None:
            raise ValueError("TQT.set_qparams: the qparams have no scale")
        self.scale[...] = F.log(qparams.scale) / math.log(2)

    def get_qparams(self):
        """Symmetric parameters with scale ``2 ** self.scale``."""
        return create_qparams(QuantMode.SYMMERTIC, self.dtype, scale=2 ** self.scale)


class LSQ(_FakeQuantize, QParamsModuleMixin):
    r"""Learned step size quantization: the step is ``|step_size| + eps`` with ``step_size`` a learned
    Parameter, its gradient scaled by ``grad_scale``.

    Args:
        dtype: the quantized dtype.
        enable: start enabled.
        eps: the smallest step.

    Example:
        >>> l = LSQ("qint8"); l.step_size[...] = Tensor(0.5)
        >>> l(Tensor([0.3, 1.0])).numpy()
        array([0.50001, 1.00002], dtype=float32)
    """

    def __init__(self, dtype: Union[str, QuantDtypeMeta], enable: bool = True, eps: float = 1e-5, **kwargs):
        super().__init__(dtype=dtype, enable=enable, **kwargs)
        self.eps = Tensor(eps, dtype="float32")
        self.step_size = Parameter(1.0, dtype="float32")
        self.mode = None
        self.zero_point = Tensor(0.0, dtype="float32")
        self.grad_scale = Tensor(1.0, dtype="float32")

    def set_qparams(self, qparams: QParams):
        """Initialise the step (and zero point, asymmetric mode) from ``qparams``."""
        self.mode = qparams.mode
        if qparams.mode == QuantMode.ASYMMERTIC:
            self.zero_point = qparams.zero_point
        else:
            self.zero_point = Tensor(0.0, dtype="float32")
        if qparams.scale is None:
            raise ValueError("LSQ.set_qparams: the qparams have no scale")
        init = float(qparams.scale.reshape(-1)[0].item())
        eps = float(self.eps.item())
        self.step_size = Parameter(0.0 if init < eps else init - eps, dtype="float32")
        if isinstance(qparams, LSQParams):
            self.grad_scale = qparams.grad_scale

    def fake_quant_forward(self, inp, qparams: LSQParams = None):
        """Fake-quantize with the learned step."""
        step = F.abs(self.step_size) + self.eps
        return lsq_forward(self.qmin, self.qmax, inp, step, self.zero_point, self.grad_scale)

    def get_qparams(self):
        """:class:`LSQParams` of the current step."""
        return LSQParams(mode=self.mode, dtype_meta=self.dtype, scale=F.abs(self.step_size.detach()) + self.eps,
                         zero_point=self.zero_point, grad_scale=self.grad_scale)
