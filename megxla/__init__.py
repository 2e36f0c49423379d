"""megxla: MegEngine's programming model on JAX arrays, compiled by XLA.

Example:
    >>> import megxla as mge
    >>> import megxla.functional as F
    >>> x = mge.Tensor([1.0, 2.0])
    >>> F.relu(x - 1.5).numpy()
    array([0. , 0.5], dtype=float32)
"""
import sys as _sys
import types as _types

from . import config  # first: XLA flags and JAX settings must be in place before any op starts a backend
from .core import Tensor, Parameter
from .core.dtypes import set_default_device, get_default_device
from ._device import (is_cuda_available, get_device_count, get_cuda_compute_capability, is_atlas_available,
                      is_cambricon_available, is_rocm_available, get_allocated_memory, get_max_allocated_memory,
                      get_reserved_memory, get_max_reserved_memory, reset_max_memory_stats, get_mem_status_bytes,
                      coalesce_free_memory, set_prealloc_config, get_cuda_version, get_cudnn_version,
                      get_cuda_driver_version, get_tensorrt_version, get_cuda_device_property)
from ._serialization import save, load
from .logger import get_logger, set_log_level, set_log_file, enable_debug_log
from ._check import check_misc
from .core._imperative_rt.core2 import full_sync as _full_sync  # noqa: F401  (MegEngine: mge._full_sync())
from .core._imperative_rt.core2 import sync as _sync  # noqa: F401  (MegEngine: mge._sync())
from . import functional, random, autodiff, jit, module, optimizer
from . import amp
from . import dtr
from . import distributed
from . import quantization
from . import device, logger, serialization, core
# NOTE: as in MegEngine, `megxla.tensor` is the Tensor class, shadowing the submodule megxla/tensor.py:
# importing the submodule sets the package attribute to the module, so the class is bound after it.
from . import tensor as _tensor_module  # noqa: F401

tensor = Tensor


class _Package(_types.ModuleType):
    """The class of the ``megxla`` module object: keeps ``megxla.tensor`` the Tensor class when the submodule
    is imported again under another name (``import megengine.tensor`` through the alias makes the import
    system set the parent's attribute to the module, which MegEngine's package never sees)."""

    def __setattr__(self, name, value):
        if name == "tensor" and value is _tensor_module:
            return
        super().__setattr__(name, value)

    def __getattr__(self, name):
        # ``megxla.data`` (datasets, transforms, OpenCV) loads on first use: a training script's first step
        # should not wait for a data pipeline it may not use (~50 ms of a ~0.6 s import); nothing below it
        # imports it. (As _LAZY's other entries.)
        if name in _LAZY:
            import importlib
            return importlib.import_module(f"{__name__}.{_LAZY[name]}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# attribute -> submodule: MegEngine's ``import megengine`` makes these attributes too (``megengine.hub.load``,
# ``megengine.cgtools``); here they load when first used
_LAZY = {"data": "data", "hub": "hub", "utils": "utils", "cgtools": "utils.comp_graph_tools",
         "traced_module": "traced_module", "version": "version"}


_sys.modules[__name__].__class__ = _Package
__version__ = "1.13.0+megxla.0.1.0"  # MegEngine API version implemented + megxla release (PEP 440 local label)

__all__ = ["Tensor", "tensor", "Parameter", "config", "functional", "random", "autodiff", "jit", "module",
           "optimizer", "data", "save", "load",
           "is_cuda_available", "get_device_count", "get_default_device", "set_default_device", "get_logger",
           "set_log_level", "set_log_file", "enable_debug_log",
           # the rest of what ``from megengine import *`` gives (MegEngine has no __all__): its sub-packages and
           # device / memory functions
           "amp", "core", "device", "distributed", "dtr", "hub", "logger", "quantization", "serialization",
           "traced_module", "utils", "version", "check_misc", "coalesce_free_memory", "get_allocated_memory",
           "get_cuda_compute_capability", "get_cuda_device_property", "get_cuda_driver_version", "get_cuda_version",
           "get_cudnn_version", "get_max_allocated_memory", "get_max_reserved_memory", "get_mem_status_bytes",
           "get_reserved_memory", "get_tensorrt_version", "is_atlas_available", "is_cambricon_available",
           "is_rocm_available", "reset_max_memory_stats", "set_prealloc_config"]
