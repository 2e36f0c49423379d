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
    """True if JAX sees a CUDA GPU."""
    return any(d.platform in ("gpu", "cuda") for d in _gpus())


def is_rocm_available() -> bool:
    """True if JAX sees a ROCm GPU."""
    return any(d.platform == "rocm" for d in _gpus())


def is_atlas_available() -> bool:
    """Atlas NPUs are not supported by JAX: always False."""
    return False


def is_cambricon_available() -> bool:
    """Cambricon MLUs are not supported by JAX: always False."""
    return False


def get_device_count(device_type: str = "xpu") -> int:
    """Number of devices of ``device_type`` ("gpu"/"cuda", "cpu", or "xpu" for the default backend).

    Example:
        >>> get_device_count("cpu") >= 1
        True
    """
    kind = device_type.lower()
    if kind in ("gpu", "cuda"):
        return len(_gpus())
    if kind == "cpu":
        return len(jax.devices("cpu"))
    return len(jax.devices())


def get_cuda_compute_capability(device: int, device_type=None) -> int:
    """Compute capability as an int (e.g. 90 for sm_90); 0 without a GPU."""
    gpus = _gpus()
    if device >= len(gpus):
        return 0
    cc = getattr(gpus[device], "compute_capability", "0")
    return int(str(cc).replace(".", ""))


def get_cuda_device_property(device: int, device_type=None):
    """A short description of a GPU (its JAX device kind)."""
    gpus = _gpus()
    return gpus[device].device_kind if device < len(gpus) else None


def _stats(device):
    devs = jax.devices()
    try:
        return devs[0].memory_stats() or {}
    except Exception:  # CPU backends may not report memory
        return {}


def get_allocated_memory(device=None):
    """Bytes currently allocated on the device (0 where the backend does not report it)."""
    return _stats(device).get("bytes_in_use", 0)


def get_max_allocated_memory(device=None):
    """Peak bytes allocated on the device."""
    return _stats(device).get("peak_bytes_in_use", 0)


def get_reserved_memory(device=None):
    """Bytes reserved by the allocator."""
    return _stats(device).get("bytes_reserved", _stats(device).get("bytes_in_use", 0))


def get_max_reserved_memory(device=None):
    """Peak bytes reserved by the allocator."""
    return _stats(device).get("peak_bytes_reserved", _stats(device).get("peak_bytes_in_use", 0))


def get_mem_status_bytes(device=None):
    """``(total, free)`` bytes on the device."""
    s = _stats(device)
    total = s.get("bytes_limit", 0)
    return total, total - s.get("bytes_in_use", 0)


def reset_max_memory_stats(device=None):
    """XLA keeps its own peak statistics; nothing to reset."""


def coalesce_free_memory():
    """XLA's allocator manages fragmentation itself; nothing to do."""


def set_prealloc_config(alignment=1, min_req=32 * 1024 * 1024, max_overhead=0, growth_factor=2.0, device_type=None):
    """XLA's allocator is configured by XLA_PYTHON_CLIENT_* variables before start-up; accepted and ignored."""


def get_cuda_version():
    """The CUDA version JAX was built against, or None."""
    return _backend_version() if is_cuda_available() else None


def get_cudnn_version():
    """cuDNN version, or None (not exposed by JAX)."""
    return None


def get_cuda_driver_version():
    """CUDA driver version, or None."""
    return _backend_version() if is_cuda_available() else None


def get_tensorrt_version():
    """TensorRT is not used by megxla: None."""
    return None


def _backend_version():
    try:
        return jax.extend.backend.get_backend().platform_version
    except Exception:
        return None
