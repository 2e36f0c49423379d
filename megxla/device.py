"""``megengine.device``: device queries, memory statistics and the default device, answered from JAX's view
of the machine (implementation in :mod:`megxla._device` and :mod:`megxla.core.dtypes`).

Example:
    >>> import megxla.device as device
    >>> device.get_device_count("cpu") >= 1
    True
"""
from ._device import (is_cuda_available, get_device_count, get_cuda_compute_capability, is_atlas_available,
                      is_cambricon_available, is_rocm_available, get_allocated_memory, get_max_allocated_memory,
                      get_reserved_memory, get_max_reserved_memory, reset_max_memory_stats, get_mem_status_bytes,
                      coalesce_free_memory, set_prealloc_config, get_cuda_version, get_cudnn_version,
                      get_cuda_driver_version, get_tensorrt_version, get_cuda_device_property)
from .core.dtypes import set_default_device, get_default_device, CompNode  # noqa: F401  (megengine.device.CompNode)


def what_is_xpu() -> str:
    """The device type ``xpu`` (the default ``xpux``) means on this machine: ``"cuda"`` where JAX sees an
    NVIDIA GPU, ``"rocm"`` for an AMD one, else ``"cpu"`` (MegEngine's names).

    Returns:
        the lower-case device type name.

    Example:
        >>> what_is_xpu() in ("cpu", "cuda", "rocm")
        True
    """
    from ._device import _gpus
    gpus = _gpus()
    if not gpus:
        return "cpu"
    return "rocm" if gpus[0].platform == "rocm" else "cuda"

__all__ = ["is_cuda_available", "get_device_count", "get_cuda_compute_capability", "is_atlas_available",
           "is_cambricon_available", "is_rocm_available", "get_allocated_memory", "get_max_allocated_memory",
           "get_reserved_memory", "get_max_reserved_memory", "reset_max_memory_stats", "get_mem_status_bytes",
           "coalesce_free_memory", "set_prealloc_config", "get_cuda_version", "get_cudnn_version",
           "get_cuda_driver_version", "get_tensorrt_version", "get_cuda_device_property", "set_default_device",
           "get_default_device"]
