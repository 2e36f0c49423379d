"""``megxla.functional``: MegEngine's functional API, each function a thin front end over the op registry."""
from . import elemwise, math, tensor, nn, loss, vision, inplace, utils, quantized
from .elemwise import *  # noqa: F401,F403
from .math import *  # noqa: F401,F403
from .tensor import *  # noqa: F401,F403
from .nn import (conv1d, conv2d, conv3d, conv_transpose2d, conv_transpose3d, linear, max_pool2d, avg_pool2d,  # noqa: F401
                 adaptive_avg_pool2d, adaptive_max_pool2d, batch_norm, layer_norm, group_norm, instance_norm,
                 dropout, softmax, logsoftmax, leaky_relu, prelu, one_hot, embedding)
from .nn import (local_conv2d, deformable_conv2d, region_restricted_conv, sync_batch_norm, general_norm,  # noqa: F401
                 local_response_norm, pixel_shuffle, sliding_window, sliding_window_transpose, multi_head_attention,
                 pad, remap, warp_affine, warp_perspective)
from .nn import deformable_psroi_pooling  # noqa: F401
from ._tensor_methods import install as _install_tensor_methods
from .elemwise import __all__ as _e
from .math import __all__ as _m
from .tensor import __all__ as _t

__all__ = _e + _m + _t + ["conv1d", "conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d", "linear",
                          "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "batch_norm",
                          "layer_norm", "group_norm", "instance_norm", "dropout", "softmax", "logsoftmax",
                          "leaky_relu", "prelu", "one_hot", "embedding", "nn", "loss"]
__all__ += ["local_conv2d", "deformable_conv2d", "region_restricted_conv", "sync_batch_norm", "general_norm",
            "local_response_norm", "pixel_shuffle", "sliding_window", "sliding_window_transpose", "multi_head_attention", "pad", "remap",
            "warp_affine", "warp_perspective", "vision"]
__all__ += ["deformable_psroi_pooling"]

_install_tensor_methods()  # Tensor.astype / reshape / sum / @ ...: functional's front ends (core imports nothing above)
# NOTE: MegEngine's ``functional`` namespace holds no private names, and code wrapping it relies on that: invis
# re-exports every non-dunder *function* in ``dir(F)`` through ``from megengine.functional import *``, which
# skips private names, so a leftover ``_install_tensor_methods`` breaks ``import invis``.
del _install_tensor_methods, _e, _m, _t, _tensor_methods


def __getattr__(name):
    # ``F.distributed`` is the distributed layer's functional API at MegEngine's path: it builds on
    # megxla.distributed, so functional does not import it; the attribute loads it on first use (and
    # ``import megxla.functional.distributed`` works as usual), which keeps functional and distributed acyclic.
    # (``debug_param`` / ``metric`` / ``tensor_cache``: MegEngine's package imports them, so they are attributes of
    # ``F`` after ``import megengine.functional as F``; here they load on first use)
    if name in ("distributed", "debug_param", "metric", "tensor_cache"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
