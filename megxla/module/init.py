"""Parameter initialisers (``megengine.module.init``).

Every initialiser rebinds the given tensor in place (``_reset``), so a Parameter keeps its identity (and its
place in optimizers and GradManagers). Random ones draw from the global ``megxla.random`` generator, so
``megxla.random.seed(n)`` makes model construction reproducible, in one process and across processes.

Eagerly (the usual case: building a model) the values are MegEngine 1.13's own: its CPU generator's streams
(``megxla.random._xoroshiro``), made on the host with NumPy and handed to the device once, so
``megengine.random.seed(n)`` then a model's construction gives the parameters MegEngine gives. No kernel is
compiled, whatever the number of parameter shapes (a compiled generator would cost 1-4 s per executable on a
2-core CPU, and one per shape made building a ResNet-18 take 12 s; see issue 18). Inside a trace the
initialisers are the ``random`` ops, recorded like any other.
"""
from __future__ import annotations

import math
from functools import reduce
from typing import Optional, Tuple, Union

import numpy as np

from ..core._tensor import Tensor
from ..core._dispatch import current_interpreter, wrap
from ..core.ops.random import to_device_like
from .. import random as _random

__all__ = ["fill_", "zeros_", "ones_", "uniform_", "normal_", "calculate_gain", "calculate_fan_in_and_fan_out",
           "calculate_correct_fan", "xavier_uniform_", "xavier_normal_", "msra_uniform_", "msra_normal_"]


def _assign(tensor: Tensor, value: Tensor) -> None:
    if value.dtype != tensor.dtype:
        value = value.astype(tensor.dtype)
    tensor._reset(value)


def _eager_stream(kind):
    """The global generator's stream of MegEngine's CPU draws of ``kind`` when drawing eagerly, or None inside a
    trace (then the ``random`` op is recorded). (The key is left as it is: a split would be an op, collected by
    auto-jit into the first step's cluster, a key that never recurs.)"""
    return None if current_interpreter() is not None else _random._rng._global.streams()[kind]


def _assign_host(tensor: Tensor, values: np.ndarray) -> None:
    # onto the tensor's own placement (committed or not), no kernel; ``values`` is ours alone, so the CPU
    # backend may adopt the buffer instead of copying it
    values = np.ascontiguousarray(values.astype(tensor.dtype, copy=False))
    tensor._reset(wrap(to_device_like(values, tensor._data)))


def fill_(tensor: Tensor, val: Union[float, int]) -> None:
    """Fill ``tensor`` with the constant ``val``, in place.

    Args:
        tensor: the tensor to fill.
        val: the value.

    Example:
        >>> w = Parameter(np.zeros((2, 2), "float32")); fill_(w, 3.0)
    """
    if current_interpreter() is not None:
        from ..functional import full
        tensor._reset(full(tensor.shape, val, dtype=tensor.dtype))
    else:
        _assign_host(tensor, np.full(tensor.shape, val, dtype=tensor.dtype))


def zeros_(tensor: Tensor) -> None:
    """Fill ``tensor`` with zeros, in place.

    Example:
        >>> linear = M.Linear(4, 3); zeros_(linear.bias); linear.bias.numpy()
        array([0., 0., 0.], dtype=float32)
    """
    fill_(tensor, 0)


def ones_(tensor: Tensor) -> None:
    """Fill ``tensor`` with ones, in place.

    Example:
        >>> bn = M.BatchNorm2d(3); ones_(bn.weight); bn.weight.numpy().ravel()
        array([1., 1., 1.], dtype=float32)
    """
    fill_(tensor, 1)


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> None:
    """Fill ``tensor`` with samples of the uniform distribution U[a, b), in place.

    Args:
        tensor: the tensor to fill.
        a: lower bound.
        b: upper bound.

    Example:
        >>> linear = M.Linear(4, 3); uniform_(linear.weight, -0.1, 0.1); bool(abs(linear.weight).max() <= 0.1)
        True
    """
    if current_interpreter() is None and not a < b:
        raise ValueError(f"uniform_: not defined when a >= b (got a={a}, b={b})")
    stream = _eager_stream("uniform")
    if stream is None:
        return _assign(tensor, _random.uniform(low=a, high=b, size=tensor.shape))
    u = stream.uniform(math.prod(tensor.shape)).reshape(tensor.shape)
    if not (a == 0 and b == 1):  # (MegEngine's ``uniform(low=a, high=b)``: ``a + (b - a) * u`` in float32)
        u *= np.float32(b - a)  # in place: parameters can be large
        u += np.float32(a)
    _assign_host(tensor, u)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> None:
    """Fill ``tensor`` with samples of the normal distribution N(mean, std**2), in place.

    Args:
        tensor: the tensor to fill.
        mean: the mean.
        std: the standard deviation.

    Example:
        >>> linear = M.Linear(4, 3); normal_(linear.weight, 0.0, 0.01); linear.weight.shape
        (3, 4)
    """
    if current_interpreter() is None and not std > 0:
        raise ValueError(f"normal_: std must be positive, got {std}")
    stream = _eager_stream("normal")
    if stream is None:
        return _assign(tensor, _random.normal(mean=mean, std=std, size=tensor.shape))
    _assign_host(tensor, stream.normal(math.prod(tensor.shape), float(mean), float(std)).reshape(tensor.shape))


def calculate_gain(nonlinearity: str, param: Optional[Union[int, float]] = None) -> float:
    """The recommended gain for a nonlinearity (as PyTorch / MegEngine).

    ============ ==============================
    nonlinearity gain
    ============ ==============================
    linear/conv  1
    sigmoid      1
    tanh         5/3
    relu         sqrt(2)
    leaky_relu   sqrt(2 / (1 + slope**2))
    ============ ==============================

    Args:
        nonlinearity: the function name, e.g. ``"relu"``.
        param: the negative slope for ``"leaky_relu"`` (default 0.01).

    Returns:
        the gain.

    Example:
        >>> calculate_gain("tanh")
        1.6666666666666667
    """
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif (not isinstance(param, bool) and isinstance(param, int)) or isinstance(param, float):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def calculate_fan_in_and_fan_out(tensor: Tensor, groups: int = 1) -> Tuple[float, float]:
    """``(fan_in, fan_out)`` of a weight tensor.

    A 2-D weight is a Linear weight ``(out, in)``; otherwise the layout is a convolution's
    ``(out, in, *kernel)``, or MegEngine's grouped ``(groups, out/groups, in/groups, *kernel)`` when
    ``groups > 1``.

    Args:
        tensor: the weight, at least 2-D.
        groups: the number of convolution groups of a grouped weight.

    Returns:
        ``(fan_in, fan_out)``.

    Example:
        >>> calculate_fan_in_and_fan_out(Tensor(np.zeros((4, 3, 3, 3))))
        (27, 36)
    """
    shape = tuple(tensor.shape)
    ndim = len(shape)
    if ndim < 2:
        raise ValueError("fan_in and fan_out can not be computed for tensor with fewer than 2 dimensions")
    if ndim == 2:
        return shape[1], shape[0]
    if groups != 1:
        if ndim < 3 or shape[0] != groups:
            raise ValueError(f"grouped weight must be (groups={groups}, out/groups, in/groups, ...), got {shape}")
        receptive = reduce(lambda x, y: x * y, shape[3:], 1)
        # fan_out counts every output channel, as for the equivalent ungrouped (out, in/groups, *k) weight.
        return shape[2] * receptive, shape[0] * shape[1] * receptive
    if ndim >= 5:
        # MegEngine's rule: a 5-D weight is a grouped convolution's (G, O/G, I/G, *k), whose group axis is
        # dropped (fan_in = I/G * k, fan_out = O/G * k). A Conv3d weight (O, I, kd, kh, kw) is read the same
        # way by MegEngine 1.13 (a limitation its source notes); kept, so msra/xavier inits draw MegEngine's scales.
        shape = shape[1:]
    receptive = reduce(lambda x, y: x * y, shape[2:], 1)
    return shape[1] * receptive, shape[0] * receptive


def calculate_correct_fan(tensor: Tensor, mode: str, groups: int = 1) -> float:
    """``fan_in`` or ``fan_out`` of a weight, selected by ``mode``.

    Args:
        tensor: the weight.
        mode: ``"fan_in"`` (preserves the forward variance) or ``"fan_out"`` (the backward one).
        groups: see :func:`calculate_fan_in_and_fan_out`.

    Returns:
        the fan.

    Example:
        >>> calculate_correct_fan(Tensor(np.zeros((4, 3))), "fan_out")
        4
    """
    mode = mode.lower()
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor, groups)
    return fan_in if mode == "fan_in" else fan_out


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> None:
    """Xavier (Glorot) uniform init: U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))``, in place.

    Args:
        tensor: the weight.
        gain: scaling factor (see :func:`calculate_gain`).

    Example:
        >>> linear = M.Linear(4, 3); xavier_uniform_(linear.weight); bool(abs(linear.weight).max() <= (6 / 7) ** 0.5)
        True
    """
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    uniform_(tensor, -a, a)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> None:
    """Xavier (Glorot) normal init: N(0, std**2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``, in place.

    Args:
        tensor: the weight.
        gain: scaling factor (see :func:`calculate_gain`).

    Example:
        >>> linear = M.Linear(4, 3); xavier_normal_(linear.weight); linear.weight.shape
        (3, 4)
    """
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    normal_(tensor, 0.0, std)


def msra_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                  groups: int = 1) -> None:
    """MSRA (He / Kaiming) uniform init: U(-b, b) with ``b = sqrt(3) * gain / sqrt(fan)``, in place.

    Args:
        tensor: the weight.
        a: negative slope of the following leaky_relu (used by the gain).
        mode: ``"fan_in"`` or ``"fan_out"``.
        nonlinearity: the following nonlinearity, ``"relu"`` or ``"leaky_relu"`` recommended.
        groups: see :func:`calculate_fan_in_and_fan_out`.

    Example:
        >>> import math; conv = M.Conv2d(3, 4, 3); msra_uniform_(conv.weight, a=math.sqrt(5)); conv.weight.shape
        (4, 3, 3, 3)
    """
    fan = calculate_correct_fan(tensor, mode, groups)
    gain = calculate_gain(nonlinearity, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(fan)
    uniform_(tensor, -bound, bound)


def msra_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                 groups: int = 1) -> None:
    """MSRA (He / Kaiming) normal init: N(0, std**2) with ``std = gain / sqrt(fan)``, in place.

    Args:
        tensor: the weight.
        a: negative slope of the following leaky_relu (used by the gain).
        mode: ``"fan_in"`` or ``"fan_out"``.
        nonlinearity: the following nonlinearity, ``"relu"`` or ``"leaky_relu"`` recommended.
        groups: see :func:`calculate_fan_in_and_fan_out`.

    Example:
        >>> conv = M.Conv2d(3, 4, 3); msra_normal_(conv.weight, mode="fan_out", nonlinearity="relu"); conv.weight.shape
        (4, 3, 3, 3)
    """
    fan = calculate_correct_fan(tensor, mode, groups)
    gain = calculate_gain(nonlinearity, a)
    std = gain / math.sqrt(fan)
    normal_(tensor, 0, std)
