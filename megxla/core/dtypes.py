"""MegEngine's dtype and device conventions on top of JAX.

MegEngine computes in 32 bits by default: Python floats and float64 arrays become float32, Python ints and
int64 arrays become int32 (unless a dtype is given explicitly and JAX's x64 mode is on).
"""
from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp

_DEFAULT = {"f": np.float32, "i": np.int32, "u": None, "b": np.bool_, "c": np.complex64}
_default_device = None


def default_dtype(arr: np.ndarray):
    if arr.dtype == np.float64:
        return np.float32
    if arr.dtype == np.int64:
        return np.int32
    if arr.dtype == np.uint64:
        return np.uint32
    if arr.dtype == np.complex128:
        return np.complex64
    return arr.dtype


def canonical(dtype):
    """A NumPy dtype from a name, NumPy or JAX dtype (``"float32"``, ``np.int32``, ``jnp.bfloat16``…)."""
    return np.dtype(dtype)


def to_array(data, dtype=None, device=None):
    """Convert user data to a jax array following MegEngine's dtype rules."""
    if isinstance(data, (np.ndarray, list, tuple, int, float, bool, np.generic)):
        with jax.ensure_compile_time_eval():  # constants stay concrete inside a symbolic trace
            return _to_array(data, dtype, device)
    return _to_array(data, dtype, device)


def _to_array(data, dtype, device):
    from ._tensor import Tensor
    if isinstance(data, Tensor):
        arr = data._value()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            arr = arr.astype(canonical(dtype))
    elif isinstance(data, jax.Array):
        arr = data if dtype is None else data.astype(canonical(dtype))
    else:
        np_arr = np.asarray(data)
        if np_arr.dtype == object:
            np_arr = np.asarray([np.asarray(x) for x in data])
        target = canonical(dtype) if dtype is not None else default_dtype(np_arr)
        arr = jnp.asarray(np_arr, dtype=target)
    dev = to_device(device) if device is not None else _default_device
    if dev is not None and dev not in arr.devices():
        arr = jax.device_put(arr, dev)
    return arr


def device_name(arr) -> str:
    try:
        dev = next(iter(arr.devices()))
    except Exception:  # tracers have no device
        return "xpux"
    kind = "gpu" if dev.platform in ("gpu", "cuda", "rocm") else dev.platform
    return f"{kind}{dev.id}"


def to_device(device):
    """Map a MegEngine device name (``xpux``, ``cpu0``, ``gpu1``, ``cuda0``) to a jax Device."""
    if device is None or isinstance(device, jax.Device):
        return device
    name = str(device).lower()
    if name.startswith("xpu"):
        kind, rest = None, name[3:]
    elif name.startswith("cpu"):
        kind, rest = "cpu", name[3:]
    elif name.startswith(("gpu", "cuda")):
        kind, rest = "gpu", name[3:] if name.startswith("gpu") else name[4:]
    else:
        raise ValueError(f"unknown device {device!r}: expected xpux, cpuN or gpuN")
    idx = 0 if rest in ("", "x") else int(rest.split(":")[0])
    devices = jax.devices() if kind is None else jax.devices(kind)
    if idx >= len(devices):
        raise ValueError(f"device {device!r} does not exist: {len(devices)} {kind or 'default'} device(s)")
    return devices[idx]


def set_default_device(device="xpux"):
    global _default_device
    _default_device = to_device(device) if device not in (None, "xpux") else None


def get_default_device():
    return device_name(jnp.zeros(())) if _default_device is None else device_name(jax.device_put(jnp.zeros(()), _default_device))
