"""Device queries (``megengine.is_cuda_available`` & co.) answered from JAX's view of the machine."""
import os

import jax


def _gpus():
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def gpus_without_a_backend():
    """0 where JAX can see no GPU, known without starting an XLA backend (``JAX_PLATFORMS`` names no GPU platform,
    or no GPU plugin is installed); else None (counting them starts one). A started backend makes ``fork`` unsafe:
    ``dist.launcher``'s default ``n_gpus``, counted at decoration, turned every later launch of the process into a
    spawn, whose workers inherit nothing of the parent's state (MegEngine's launcher always forks).

    Example:
        >>> gpus_without_a_backend() in (0, None)
        True
    """
    platforms = (os.environ.get("JAX_PLATFORMS") or jax.config.jax_platforms or "").lower()
    if platforms and not any(p in platforms for p in ("cuda", "gpu", "rocm")):
        return 0
    import importlib.metadata
    import importlib.util
    try:
        plugins = importlib.util.find_spec("jax_plugins") is not None \
            or bool(list(importlib.metadata.entry_points(group="jax_plugins")))
    except Exception:  # (a broken installation's metadata: count them the usual way)
        return None
    return None if plugins else 0


def is_cuda_available() -> bool:
    """Whether a CUDA GPU can be used (JAX sees one).

    Returns:
        True where JAX's GPU backend has a CUDA device, else False.

    Example:
        >>> device = "gpu0" if mge.is_cuda_available() else "cpu0"
        >>> mge.Tensor([1.0, 2.0], device=device).numpy()
        array([1., 2.], dtype=float32)
    """
    return any(d.platform in ("gpu", "cuda") for d in _gpus())


def is_rocm_available() -> bool:
    """Whether an AMD GPU can be used (JAX sees a ROCm device).

    Returns:
        True where JAX's GPU backend is ROCm's and has a device, else False.

    Example:
        >>> import megxla.device as device
        >>> device.is_rocm_available() == (device.what_is_xpu() == "rocm")
        True
    """
    return any(d.platform == "rocm" for d in _gpus())


def is_atlas_available() -> bool:
    """Whether an Atlas NPU can be used: JAX has no Atlas backend, so always False.

    Example:
        >>> mge.device.is_atlas_available()
        False
    """
    return False


def is_cambricon_available() -> bool:
    """Whether a Cambricon MLU can be used: JAX has no Cambricon backend, so always False.

    Example:
        >>> mge.device.is_cambricon_available()
        False
    """
    return False


def get_device_count(device_type: str = "xpu") -> int:
    """Number of devices of ``device_type``: "gpu" / "cuda" the GPUs, "cpu" the CPU cores (MegEngine's CPU devices
    are its worker threads, one per core: 2 on a 2-core machine, as MegEngine 1.13 gives), "xpu" the GPUs or, without
    any, the CPU cores.

    Example:
        >>> get_device_count("cpu") == os.cpu_count()
        True
    """
    kind = device_type.lower()
    if kind == "rocm":  # (MegEngine's ROCm devices: none on a CPU or CUDA machine, not the CPU cores)
        return sum(1 for d in _gpus() if d.platform == "rocm")
    gpus = len(_gpus()) if kind in ("gpu", "cuda", "xpu") else 0
    if kind in ("gpu", "cuda") or gpus:
        return gpus
    return os.cpu_count() or 1


def get_cuda_compute_capability(device: int, device_type=None) -> int:
    """The compute capability of a GPU as an int (e.g. 90 for sm_90).

    Args:
        device: the GPU's index.
        device_type: accepted for MegEngine compatibility.

    Returns:
        the capability, 0 where there is no such GPU.

    Example:
        >>> cc = mge.device.get_cuda_compute_capability(0)
        >>> cc == 0 if not mge.is_cuda_available() else cc >= 50  # 0 on a machine without a GPU
        True
    """
    gpus = _gpus()
    if device >= len(gpus):
        return 0
    cc = getattr(gpus[device], "compute_capability", "0")
    return int(str(cc).replace(".", ""))


def get_cuda_device_property(device: int, device_type=None):
    """A short description of a GPU (its JAX device kind, e.g. ``"NVIDIA H100 80GB HBM3"``).

    Args:
        device: the GPU's index.
        device_type: accepted for MegEngine compatibility.

    Returns:
        the description, None where there is no such GPU.

    Example:
        >>> prop = mge.device.get_cuda_device_property(0)
        >>> prop is None if not mge.is_cuda_available() else isinstance(prop, str)  # None without a GPU
        True
    """
    gpus = _gpus()
    return gpus[device].device_kind if device < len(gpus) else None


def _stats(device):
    devs = jax.devices()
    try:
        return devs[0].memory_stats() or {}
    except Exception:  # CPU backends may not report memory
        return {}


def get_allocated_memory(device=None):
    """Bytes currently allocated on the device (0 where the backend does not report it, as the CPU's).

    Args:
        device: accepted for MegEngine compatibility (the default device is queried).

    Returns:
        the number of bytes.

    Example:
        >>> x = mge.Tensor(np.ones((256, 256), "float32"))
        >>> used = mge.device.get_allocated_memory()
        >>> used == 0 if mge.device.what_is_xpu() == "cpu" else used >= 256 * 256 * 4  # x's bytes at least
        True
    """
    return _stats(device).get("bytes_in_use", 0)


def get_max_allocated_memory(device=None):
    """Peak bytes allocated on the device (0 where the backend does not report it, as the CPU's).

    Args:
        device: accepted for MegEngine compatibility (the default device is queried).

    Returns:
        the number of bytes.

    Example:
        >>> import megxla.device as device
        >>> device.get_max_allocated_memory() >= device.get_allocated_memory()
        True
    """
    return _stats(device).get("peak_bytes_in_use", 0)


def get_reserved_memory(device=None):
    """Bytes reserved by the allocator (those in use where it does not say; 0 where the backend does not
    report memory, as the CPU's).

    Args:
        device: accepted for MegEngine compatibility (the default device is queried).

    Returns:
        the number of bytes.

    Example:
        >>> reserved = mge.device.get_reserved_memory()
        >>> isinstance(reserved, int) and reserved >= 0  # 0 on a CPU, which does not report memory
        True
    """
    return _stats(device).get("bytes_reserved", _stats(device).get("bytes_in_use", 0))


def get_max_reserved_memory(device=None):
    """Peak bytes reserved by the allocator (0 where the backend does not report memory, as the CPU's).

    Args:
        device: accepted for MegEngine compatibility (the default device is queried).

    Returns:
        the number of bytes.

    Example:
        >>> peak = mge.device.get_max_reserved_memory()
        >>> isinstance(peak, int) and peak >= 0  # 0 on a CPU, which does not report memory
        True
    """
    return _stats(device).get("peak_bytes_reserved", _stats(device).get("peak_bytes_in_use", 0))


def get_mem_status_bytes(device=None):
    """``(total, free)`` bytes of the device's memory, ``(0, 0)`` where the backend does not report it (the CPU's).

    Args:
        device: accepted for MegEngine compatibility (the default device is queried).

    Returns:
        a tuple ``(total, free)``.

    Example:
        >>> total, free = mge.device.get_mem_status_bytes()
        >>> 0 <= free <= total
        True
    """
    s = _stats(device)
    total = s.get("bytes_limit", 0)
    return total, total - s.get("bytes_in_use", 0)


def reset_max_memory_stats(device=None):
    """Reset the peak memory statistics: XLA keeps its own and offers no reset, so this does nothing.

    Args:
        device: accepted for MegEngine compatibility.

    Example:
        >>> import megxla.device as device
        >>> device.reset_max_memory_stats()
        >>> device.get_max_allocated_memory() >= device.get_allocated_memory()
        True
    """


def coalesce_free_memory():
    """Defragment the device's free memory: XLA's allocator manages fragmentation itself, so this does nothing.

    Example:
        >>> mge.device.coalesce_free_memory()
    """


def set_prealloc_config(alignment=1, min_req=32 * 1024 * 1024, max_overhead=0, growth_factor=2.0, device_type=None):
    """Configure the allocator's pre-allocation: XLA's allocator is configured by the ``XLA_PYTHON_CLIENT_*``
    environment variables before start-up, so the arguments are accepted and ignored.

    Args:
        alignment, min_req, max_overhead, growth_factor, device_type: MegEngine's settings (ignored).

    Example:
        >>> mge.device.set_prealloc_config(alignment=1, min_req=32 * 1024 * 1024, growth_factor=2.0)
    """


def get_cuda_version():
    """The CUDA version of JAX's GPU backend.

    Returns:
        its version string where a CUDA GPU is used, else None.

    Example:
        >>> v = mge.device.get_cuda_version()
        >>> v is None if not mge.is_cuda_available() else isinstance(v, str)  # None without a CUDA GPU
        True
    """
    return _backend_version() if is_cuda_available() else None


def get_cudnn_version():
    """The cuDNN version: JAX does not expose it, so None.

    Example:
        >>> print(mge.device.get_cudnn_version())
        None
    """
    return None


def get_cuda_driver_version():
    """The CUDA driver version, as JAX's GPU backend reports it.

    Returns:
        its version string where a CUDA GPU is used, else None.

    Example:
        >>> v = mge.device.get_cuda_driver_version()
        >>> v is None if not mge.is_cuda_available() else isinstance(v, str)  # None without a CUDA GPU
        True
    """
    return _backend_version() if is_cuda_available() else None


def get_tensorrt_version():
    """The TensorRT version: megxla does not use TensorRT, so None.

    Example:
        >>> print(mge.device.get_tensorrt_version())
        None
    """
    return None


def _backend_version():
    try:
        return jax.extend.backend.get_backend().platform_version
    except Exception:
        return None
