"""Quantization (``megengine.quantization``): observers, fake quantization (FakeQuantize, TQT, LSQ), QConfigs,
and model conversion float → QAT (:func:`quantize_qat`) → quantized inference (:func:`quantize`).

Fake quantization, LSQ and TQT are primitives of the op registry, so a QAT training step compiles into one
``xla_trace`` executable with the observers' statistics as state."""
from ..core.tensor.dtype import QuantDtypeMeta
from .fake_quant import LSQ, TQT, FakeQuantize
from .observer import (ExponentialMovingAverageObserver, HistogramObserver, MinMaxObserver, Observer,
                       PassiveObserver, SyncExponentialMovingAverageObserver, SyncMinMaxObserver)
from .qconfig import (QConfig, calibration_qconfig, easyquant_qconfig, ema_fakequant_qconfig,
                      ema_lowbit_fakequant_qconfig, lsq_qconfig, min_max_fakequant_qconfig, passive_qconfig,
                      sync_ema_fakequant_qconfig, tqt_qconfig)
from .quantize import (apply_easy_quant, disable_fake_quant, disable_observer, enable_fake_quant, enable_observer,
                       propagate_qconfig, quantize, quantize_qat, reset_qconfig)
from .utils import LSQParams, QParams, QParamsModuleMixin, QuantMode, create_qparams, fake_quant_bias, fake_quant_tensor

__all__ = ["QuantDtypeMeta", "LSQ", "TQT", "FakeQuantize", "ExponentialMovingAverageObserver", "HistogramObserver",
           "MinMaxObserver", "Observer", "PassiveObserver", "SyncExponentialMovingAverageObserver",
           "SyncMinMaxObserver", "QConfig", "calibration_qconfig", "easyquant_qconfig", "ema_fakequant_qconfig",
           "ema_lowbit_fakequant_qconfig", "lsq_qconfig", "min_max_fakequant_qconfig", "passive_qconfig",
           "sync_ema_fakequant_qconfig", "tqt_qconfig", "apply_easy_quant", "disable_fake_quant",
           "disable_observer", "enable_fake_quant", "enable_observer", "propagate_qconfig", "quantize",
           "quantize_qat", "reset_qconfig", "LSQParams", "QParams", "QParamsModuleMixin", "QuantMode",
           "create_qparams", "fake_quant_bias", "fake_quant_tensor"]
