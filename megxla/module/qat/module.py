"""``QATModule``: the base of quantization-aware-training modules. A QAT module is its float module plus an
observer and a fake-quant module for its weight and for its output activation (made from a ``QConfig``)."""
from __future__ import annotations

from abc import abstractmethod

from ...quantization.qconfig import QConfig
from ...quantization.utils import fake_quant_bias
from ..module import Module

__all__ = ["QATModule"]


class QATModule(Module):
    r"""Base class of QAT modules.

    Class attributes ``with_weight`` / ``with_act`` say whether the module quantizes a weight and its output.
    Sub-classes implement ``from_float_module``; :meth:`set_qconfig` gives a module its observers and fake-quant
    modules.

    Example:
        >>> from megxla.module import qat
        >>> from megxla.quantization import min_max_fakequant_qconfig
        >>> m = qat.Linear.from_float_module(M.Linear(4, 2))
        >>> isinstance(m, qat.QATModule), m.with_weight, m.with_act
        (True, True, True)
        >>> m.set_qconfig(min_max_fakequant_qconfig)
        >>> type(m.weight_observer).__name__, type(m.act_fake_quant).__name__
        ('MinMaxObserver', 'FakeQuantize')
    """

    with_weight = True
    with_act = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.weight_observer = None
        self.act_observer = None
        self.weight_fake_quant = None
        self.act_fake_quant = None

    def __repr__(self):
        return "QAT." + super().__repr__()

    def set_qconfig(self, qconfig: QConfig):
        """Create this module's observers and fake-quant modules from ``qconfig``."""
        def make(factory):
            return factory() if factory is not None else None

        if self.with_act:
            self.act_observer = make(qconfig.act_observer)
            self.act_fake_quant = make(qconfig.act_fake_quant)
        if self.with_weight:
            self.weight_observer = make(qconfig.weight_observer)
            self.weight_fake_quant = make(qconfig.weight_fake_quant)

    @staticmethod
    def _switch(enabled_kind, module, enable):
        if enabled_kind and module is not None:
            module.enable() if enable else module.disable()

    def set_fake_quant(self, enable):
        """Enable or disable this module's fake quantization."""
        self._switch(self.with_act, self.act_fake_quant, enable)
        self._switch(self.with_weight, self.weight_fake_quant, enable)

    def set_observer(self, enable):
        """Enable or disable this module's observers."""
        self._switch(self.with_act, self.act_observer, enable)
        self._switch(self.with_weight, self.weight_observer, enable)

    @staticmethod
    def _observe_and_fake_quant(target, fake_quant, observer):
        if observer is None:
            out, qparams = target, None
        else:
            out = observer(target)
            qparams = observer.get_qparams()
        if fake_quant is not None:
            out = fake_quant(out, qparams)
            if hasattr(fake_quant, "get_qparams"):
                qparams = fake_quant.get_qparams()
        if qparams is not None:
            out.qparams.update(qparams)
        return out

    def apply_quant_weight(self, target):
        """Observe and fake-quantize a weight."""
        return self._observe_and_fake_quant(target, self.weight_fake_quant, self.weight_observer)

    def apply_quant_activation(self, target):
        """Observe and fake-quantize an output activation."""
        return self._observe_and_fake_quant(target, self.act_fake_quant, self.act_observer)

    def apply_quant_bias(self, target, inp, w_qat):
        """Fake-quantize a bias to qint32 (scale = input scale * weight scale) when both the activation and
        the weight are fake-quantized."""
        if (self.act_fake_quant is not None and self.act_fake_quant.enabled and self.weight_fake_quant is not None
                and self.weight_fake_quant.enabled):
            return fake_quant_bias(target, inp, w_qat)
        return target

    def _first(self, method, fake_quant, observer):
        for m in (fake_quant, observer):
            if hasattr(m, method):
                return getattr(m, method)()
        return None

    def get_weight_dtype(self):
        """The quantized dtype of the weight (None without observer / learned fake quant)."""
        return self._first("get_quantized_dtype", self.weight_fake_quant, self.weight_observer)

    def get_activation_dtype(self):
        """The quantized dtype of the output."""
        return self._first("get_quantized_dtype", self.act_fake_quant, self.act_observer)

    def get_weight_qparams(self):
        """The weight's quantization parameters."""
        return self._first("get_qparams", self.weight_fake_quant, self.weight_observer)

    def get_activation_qparams(self):
        """The output's quantization parameters."""
        return self._first("get_qparams", self.act_fake_quant, self.act_observer)

    @classmethod
    @abstractmethod
    def from_float_module(cls, float_module: Module):
        """The QAT module sharing ``float_module``'s parameters (abstract, as MegEngine's: a sub-class without it
        cannot be instantiated)."""
