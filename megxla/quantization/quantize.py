"""Model conversion: float → QAT (:func:`quantize_qat`), QAT → quantized (:func:`quantize`), and switching
observers / fake quantization of a QAT model."""
from __future__ import annotations

import contextlib
import numbers
from copy import copy, deepcopy
from functools import partial
from typing import Callable

import numpy as np

from .. import functional as F
from ..logger import get_logger
from ..module import Module
from .qconfig import QConfig, ema_fakequant_qconfig

__all__ = ["quantize_qat", "quantize", "propagate_qconfig", "reset_qconfig", "enable_observer", "disable_observer",
           "enable_fake_quant", "disable_fake_quant", "apply_easy_quant", "hook_qat_module"]

logger = get_logger(__name__)


class QConfigTypeError(TypeError, AttributeError):
    """A ``qconfig`` that is no :class:`~.QConfig`: MegEngine fails reading its fields (``AttributeError: 'str' object
    has no attribute 'act_observer'``); megxla checks it first, naming the function (a ``TypeError``, as before)."""


class ConversionTypeError(TypeError, AttributeError):
    """A model or ``mapping`` entry a conversion cannot use: MegEngine fails on its missing attribute
    (``AttributeError: 'list' object has no attribute '_flatten'``, ``type object 'int' has no attribute
    'from_float_module'``); megxla checks first and says what is wrong (a ``TypeError``, as before)."""


def _check_qconfig(qconfig, where):
    if not isinstance(qconfig, QConfig):
        raise QConfigTypeError(f"{where}: qconfig must be a QConfig, got {qconfig!r:.80}")


def _get_quantable_module_names():
    """Names of the layers with a quantized version (the float, QAT and quantized packages use the same names)."""
    from ..module import quantized as Quantized
    return [n for n in Quantized.__all__ if isinstance(getattr(Quantized, n), type)
            and issubclass(getattr(Quantized, n), Quantized.QuantizedModule) and n != "QuantizedModule"]


def _tables():
    # float class -> QAT class -> quantized class, paired by name
    from .. import module as Float
    from ..module import qat as QAT
    from ..module import quantized as Quantized
    names = _get_quantable_module_names()
    float2qat = {getattr(Float, n): getattr(QAT, n) for n in names}
    qat2quantized = {getattr(QAT, n): getattr(Quantized, n) for n in names}
    return float2qat, qat2quantized


def _replace(root: Module, key: str, new: Module):
    """Put ``new`` at the dotted attribute path ``key`` (list / dict items included) under ``root``."""
    *parents, last = key.split(".")
    obj = root
    for p in parents:
        obj = obj[int(p)] if isinstance(obj, (list, tuple)) else obj[p] if isinstance(obj, dict) else getattr(obj, p)
    if isinstance(obj, list):
        obj[int(last)] = new
    elif isinstance(obj, dict):
        obj[last] = new
    elif isinstance(obj, tuple):
        raise TypeError(f"cannot replace module {key!r} inside a tuple; use a list")
    else:
        setattr(obj, last, new)


_QUANT_ATTRS = ("act_observer", "act_fake_quant", "weight_observer", "weight_fake_quant")


@contextlib.contextmanager
def _all_or_nothing(module: Module):
    """A conversion of ``module`` that raises part-way is undone: the modules it replaced (``undo``, the list it
    yields: ``(key, old module)`` in the order replaced), the observers and fake-quant modules of its QAT modules
    and every module's training mode are put back. (A failing factory, mapping or container left models half
    converted: some layers quantized, others QAT, observers gone -- probe Z.)"""
    undo = []
    modes = [(m, m.training) for m in module.modules()]
    quant = [(m, {a: getattr(m, a) for a in _QUANT_ATTRS if hasattr(m, a)}) for m in _qat_modules(module)]
    # (their statistics too: quantize() of a model in training mode lets the weight observers of the BatchNorm-fused
    # layers observe the folded weight, as MegEngine's fold_weight_bias does)
    stats = [(ob, ob.state_dict()) for _, attrs in quant for ob in attrs.values() if isinstance(ob, Module)]
    try:
        yield undo
    except BaseException:
        for key, old in reversed(undo):
            _replace(module, key, old)
        for m, attrs in quant:
            for a, v in attrs.items():
                setattr(m, a, v)
        for ob, sd in stats:
            ob.load_state_dict(sd)
        for m, training in modes:
            m.training = training
        raise


def _check_mapping(mapping, method):
    """``mapping`` as a dict, checked: MegEngine merges it with ``dict.update``, so (class, class) pairs work too."""
    if mapping is not None and not isinstance(mapping, dict):
        try:
            mapping = dict(mapping)
        except (TypeError, ValueError):
            raise TypeError(f"mapping must be a dict {{class: the module class converting it}}, got "
                            f"{mapping!r:.200}") from None
    for src, dst in (mapping or {}).items():
        if not (isinstance(dst, type) and hasattr(dst, method)):
            raise ConversionTypeError(f"mapping: {getattr(src, '__name__', src)!r} maps to {dst!r}, which has no "
                                      f"{method}(): map each class to the module class converting it")
    return mapping


def quantize_qat(module: Module, inplace: bool = True, qconfig: QConfig = ema_fakequant_qconfig,
                 mapping: dict = None):
    r"""Replace the quantizable float modules of ``module`` by their QAT versions (sharing parameters) and
    give them observers / fake quantization from ``qconfig``.

    Args:
        module: the float model.
        inplace: convert in place (else a deep copy).
        qconfig: the observers and fake-quant modules to create.
        mapping: extra ``{float class: QAT class}`` entries.

    Returns:
        the QAT model.

    Example:
        >>> import megxla.module as M
        >>> net = M.Sequential(M.QuantStub(), M.Linear(4, 2), M.DequantStub())
        >>> type(quantize_qat(net)[1]).__module__
        'megxla.module.qat.layers'
    """
    if isinstance(inplace, QConfig):
        # ``quantize_qat(net, some_qconfig)``: MegEngine reads the QConfig as a true ``inplace`` and converts with
        # the default qconfig; so do we (same numbers), and say so
        logger.warning(
            "quantize_qat: the second argument is `inplace`, got a QConfig; as in MegEngine it counts as "
            "inplace=True and the default qconfig is used. Pass qconfig=... to use it.")
        inplace = True
    if inplace is None or isinstance(inplace, (numbers.Integral, np.bool_)):
        # (MegEngine reads ``inplace`` by its truth: 0, 1, None and NumPy bools were refused here)
        inplace = bool(inplace)
    if not isinstance(inplace, bool):
        raise TypeError(f"quantize_qat: inplace must be a bool, got {inplace!r:.80}")
    _check_qconfig(qconfig, "quantize_qat")
    if not isinstance(module, Module):
        raise ConversionTypeError(f"quantize_qat: expected a Module, got {type(module).__name__}")
    mapping = _check_mapping(mapping, "from_float_module")
    if not inplace:
        module = deepcopy(module)
    table = copy(_tables()[0])
    if mapping is not None:
        table.update(mapping)
    with _all_or_nothing(module) as undo:
        # exact types only: a QAT module is a sub-class of its float module and must not be converted twice
        for key, sub, parent in list(module._flatten(with_key=True, with_parent=True,
                                                     predicate=lambda m: type(m) in table)):
            if type(parent) in table or sub.quantize_disabled:
                continue
            _replace(module, key, table[type(sub)].from_float_module(sub))
            undo.append((key, sub))
        propagate_qconfig(module, qconfig)
    return module


def quantize(module: Module, inplace: bool = True, mapping: dict = None):
    r"""Replace the QAT modules of a trained model by quantized inference modules.

    Args:
        module: the QAT model (its observers have seen data).
        inplace: convert in place (else a deep copy).
        mapping: extra ``{QAT class: quantized class}`` entries.

    Returns:
        the quantized model (in evaluation mode).

    Example:
        >>> from megxla.quantization import quantize, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.Linear(4, 3), M.DequantStub()))
        >>> x = Tensor(np.random.rand(2, 4).astype("float32")); _ = net(x)  # calibrate the observers
        >>> net = quantize(net); net[1]
        Quantized.Linear()
        >>> net[1](net[0](x)).dtype, net(x).dtype
        (dtype('int8'), dtype('float32'))
    """
    if not isinstance(module, Module):
        raise ConversionTypeError(f"quantize: expected a Module, got {type(module).__name__}")
    mapping = _check_mapping(mapping, "from_qat_module")
    if not inplace:
        module = deepcopy(module)
    table = copy(_tables()[1])
    if mapping is not None:
        table.update(mapping)
    with _all_or_nothing(module) as undo:
        # converted in the modes the modules are in, as MegEngine does: a BatchNorm-fused layer in training mode
        # folds its weight through its weight observer, which takes the folded weight's range in (so its scale
        # covers the weight it quantizes); in evaluation mode the observers are off and keep their range
        for key, sub in list(module._flatten(with_key=True, predicate=lambda m: type(m) in table)):
            new = table[type(sub)].from_qat_module(sub)
            new.eval()
            _replace(module, key, new)
            undo.append((key, sub))
        module.eval()
    return module


def _qat_modules(module):
    from ..module.qat import QATModule
    return [m for m in module.modules() if isinstance(m, QATModule)]


def propagate_qconfig(module: Module, qconfig: QConfig):
    """Give every QAT module under ``module`` new observers / fake-quant modules from ``qconfig``.

    Args:
        module: a model holding QAT modules.
        qconfig: the :class:`~megxla.quantization.QConfig` whose factories make them.

    Example:
        >>> from megxla.quantization import min_max_fakequant_qconfig, propagate_qconfig, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.Linear(4, 3), M.DequantStub()))
        >>> type(net[1].act_observer).__name__
        'ExponentialMovingAverageObserver'
        >>> propagate_qconfig(net, min_max_fakequant_qconfig); type(net[1].act_observer).__name__
        'MinMaxObserver'
    """
    _check_qconfig(qconfig, "propagate_qconfig")
    with _all_or_nothing(module):
        for m in _qat_modules(module):
            m.set_qconfig(qconfig)


def reset_qconfig(module: Module, qconfig: QConfig, inplace: bool = True):
    r"""Swap the observers / fake-quant modules of a QAT model for ``qconfig``'s, carrying over the current
    quantization parameters (``set_qparams``) where the new modules accept them.

    Args:
        module: a QAT model.
        qconfig: the :class:`~megxla.quantization.QConfig` whose factories make the new modules.
        inplace: change ``module`` itself (else a deep copy).

    Returns:
        the model.

    Example:
        >>> from megxla.quantization import passive_qconfig, quantize_qat, reset_qconfig
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.Linear(4, 3), M.DequantStub()))
        >>> _ = net(Tensor(np.ones((2, 4), "float32")))  # the EMA observer learns the input's range
        >>> net = reset_qconfig(net, passive_qconfig); type(net[0].act_observer).__name__
        'PassiveObserver'
        >>> round(float(net[0].act_observer.scale), 5)  # 1 / 127.5, carried over
        0.00784
    """
    _check_qconfig(qconfig, "reset_qconfig")
    if not inplace:
        module = deepcopy(module)

    def make(factory, qparams):
        inst = factory() if factory is not None else None
        if inst is not None and qparams is not None and hasattr(inst, "set_qparams"):
            inst.set_qparams(qparams)
        return inst

    with _all_or_nothing(module):
        for m in _qat_modules(module):
            if m.with_weight:
                wq = m.get_weight_qparams()
                m.weight_observer = make(qconfig.weight_observer, wq)
                m.weight_fake_quant = make(qconfig.weight_fake_quant, wq)
            if m.with_act:
                aq = m.get_activation_qparams()
                m.act_observer = make(qconfig.act_observer, aq)
                m.act_fake_quant = make(qconfig.act_fake_quant, aq)
    return module


def enable_observer(module: Module):
    """Switch on every observer of a QAT model.

    Args:
        module: a model holding QAT modules.

    Example:
        >>> from megxla.quantization import disable_observer, enable_observer, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.Linear(4, 3), M.DequantStub()))
        >>> disable_observer(net); net[1].weight_observer.enabled
        False
        >>> enable_observer(net); net[1].weight_observer.enabled
        True
    """
    for m in _qat_modules(module):
        m.set_observer(True)


def disable_observer(module: Module):
    """Freeze the statistics of every observer of a QAT model.

    Args:
        module: a model holding QAT modules.

    Example:
        >>> from megxla.quantization import disable_observer, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.Linear(4, 3), M.DequantStub()))
        >>> disable_observer(net)
        >>> _ = net(Tensor(np.ones((2, 4), "float32")))  # the observers do not move
        >>> net[0].act_observer.enabled, float(net[0].act_observer.max_val) < 0
        (False, True)
    """
    for m in _qat_modules(module):
        m.set_observer(False)


def enable_fake_quant(module: Module):
    """Switch on fake quantization in every QAT module.

    Args:
        module: a model holding QAT modules.

    Example:
        >>> from megxla.quantization import disable_fake_quant, enable_fake_quant, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.Linear(4, 3), M.DequantStub()))
        >>> disable_fake_quant(net); net[1].act_fake_quant.enabled
        False
        >>> enable_fake_quant(net); net[1].act_fake_quant.enabled
        True
    """
    for m in _qat_modules(module):
        m.set_fake_quant(True)


def disable_fake_quant(module: Module):
    """Switch off fake quantization (QAT modules compute in float; observers still observe).

    Args:
        module: a model holding QAT modules.

    Example:
        >>> from megxla.quantization import disable_fake_quant, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub()))
        >>> x = Tensor([0.26, -1.0])
        >>> net(x).numpy()
        array([ 0.25882354, -0.9960785 ], dtype=float32)
        >>> disable_fake_quant(net); net(x).numpy()
        array([ 0.26, -1.  ], dtype=float32)
    """
    for m in _qat_modules(module):
        m.set_fake_quant(False)


def hook_qat_module(module: Module, func: Callable):
    """Register ``func`` as a forward hook of every QAT module; returns the hook handles."""
    return [m.register_forward_hook(func) for m in _qat_modules(module)]


def apply_easy_quant(module: Module, data, start: float = 0.8, stop: float = 1.2, num: int = 40):
    r"""EasyQuant: for each QAT module with a :class:`PassiveObserver`, search the weight and activation scale
    in ``[start, stop] * scale`` that maximises the cosine similarity of fake-quantized and float outputs.

    Args:
        module: a QAT model configured with ``passive_qconfig`` (scales set).
        data: a calibration batch.
        start, stop, num: the search grid, relative to the current scale.

    Returns:
        the model.

    Example:
        >>> from megxla.quantization import apply_easy_quant, passive_qconfig, quantize_qat, reset_qconfig
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.Linear(4, 3), M.DequantStub()))
        >>> x = Tensor(np.random.rand(8, 4).astype("float32")); _ = net(x)  # calibrate
        >>> net = reset_qconfig(net, passive_qconfig)  # the scales found so far, held by PassiveObservers
        >>> ob = net[1].act_observer; orig = float(ob.scale)
        >>> net = apply_easy_quant(net, x, start=0.9, stop=1.1, num=11)
        >>> ratio = float(ob.scale) / orig  # the best of 0.9, 0.92, ..., 1.1
        >>> bool(np.isclose(ratio, np.linspace(0.9, 1.1, 11)).any())
        True
    """
    batch = data.shape[0]

    def cosine(x, y):
        axis = tuple(range(1, x.ndim))
        return ((x * y).sum(axis=axis) / (F.norm(x, axis=axis) * F.norm(y, axis=axis))).mean(axis=0)

    def search(mod, inputs, outputs, where):
        mod._forward_hooks.clear()
        normal_in = [x[:batch] for x in inputs]
        fq_in = [x[batch:] for x in inputs]
        mod.set_fake_quant(False)
        normal_out = mod(*normal_in)
        mod.set_fake_quant(True)
        ob = getattr(mod, where)
        if ob is None or getattr(ob, "orig_scale", None) is None:
            return None
        best, best_scale = 0.0, None
        for scale in np.linspace(start * ob.orig_scale, stop * ob.orig_scale, num):
            ob.scale = scale
            sim = float(cosine(normal_out, mod(*fq_in)))
            if sim > best:
                best, best_scale = sim, scale
        if best_scale is None:
            logger.warning("EasyQuant finds no better scale")  # (MegEngine's words)
        else:
            ob.scale = best_scale
        return F.concat([normal_out, outputs[batch:]])

    data = F.concat([data, data])
    hook_qat_module(module, partial(search, where="weight_observer"))
    module(data)
    hook_qat_module(module, partial(search, where="act_observer"))
    module(data)
    return module
