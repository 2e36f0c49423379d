"""``QConfig``: which observer and fake-quant module a QAT module creates for its weight and activation,
and MegEngine's predefined configurations."""
from collections import namedtuple
from functools import partial

from ..module import Module
from .fake_quant import LSQ, TQT, FakeQuantize
from .observer import (ExponentialMovingAverageObserver, HistogramObserver, MinMaxObserver, PassiveObserver,
                       SyncExponentialMovingAverageObserver, SyncMinMaxObserver)

__all__ = ["QConfig", "min_max_fakequant_qconfig", "ema_fakequant_qconfig", "sync_ema_fakequant_qconfig",
           "ema_lowbit_fakequant_qconfig", "calibration_qconfig", "tqt_qconfig", "lsq_qconfig",
           "passive_qconfig", "easyquant_qconfig"]


class QConfig(namedtuple("QConfig", ["weight_observer", "act_observer", "weight_fake_quant", "act_fake_quant"])):
    r"""Factories (classes or ``functools.partial``; not instances) of the observers and fake-quant modules
    of weights and activations; each may be None.

    Example:
        >>> qc = QConfig(weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
        ...              act_observer=partial(ExponentialMovingAverageObserver, dtype="qint8"),
        ...              weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
        ...              act_fake_quant=partial(FakeQuantize, dtype="qint8"))
    """

    def __new__(cls, weight_observer, act_observer, weight_fake_quant, act_fake_quant):
        if any(isinstance(f, Module) for f in (weight_observer, act_observer, weight_fake_quant, act_fake_quant)):
            raise ValueError("QConfig must not receive observer / fake-quant instances: pass a class or "
                             "partial(Observer, ...) so that every module gets its own")
        for name, f in (("weight_observer", weight_observer), ("act_observer", act_observer),
                        ("weight_fake_quant", weight_fake_quant), ("act_fake_quant", act_fake_quant)):
            # (a string was accepted here and failed in quantize_qat, after every module was converted -- probe Z)
            if f is not None and not callable(f):
                raise TypeError(f"QConfig: {name} must be None or a class / partial(Observer, ...) making one, "
                                f"got {f!r}")
        return super().__new__(cls, weight_observer, act_observer, weight_fake_quant, act_fake_quant)


min_max_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(MinMaxObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"))

ema_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(ExponentialMovingAverageObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"))

sync_ema_fakequant_qconfig = QConfig(
    weight_observer=partial(SyncMinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(SyncExponentialMovingAverageObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"))

ema_lowbit_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint4"),
    act_observer=partial(ExponentialMovingAverageObserver, dtype="qint4"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint4"),
    act_fake_quant=partial(FakeQuantize, dtype="qint4"))

calibration_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(HistogramObserver, dtype="qint8"),
    weight_fake_quant=None, act_fake_quant=None)

tqt_qconfig = QConfig(
    weight_observer=None, act_observer=None,
    weight_fake_quant=partial(TQT, dtype="qint8_narrow"),
    act_fake_quant=partial(TQT, dtype="qint8"))

lsq_qconfig = QConfig(
    weight_observer=None, act_observer=None,
    weight_fake_quant=partial(LSQ, dtype="qint8_narrow"),
    act_fake_quant=partial(LSQ, dtype="qint8"))

passive_qconfig = QConfig(
    weight_observer=partial(PassiveObserver, dtype="qint8_narrow"),
    act_observer=partial(PassiveObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"))

easyquant_qconfig = passive_qconfig
