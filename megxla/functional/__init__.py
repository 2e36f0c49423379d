"""``megxla.functional``: MegEngine's functional API, each function a thin front end over the op registry."""
from . import elemwise, math, tensor, nn, loss, vision, inplace
from .elemwise import *  # noqa: F401,F403
from .math import *  # noqa: F401,F403
from .tensor import *  # noqa: F401,F403
from .nn import (conv1d, conv2d, conv3d, conv_transpose2d, conv_transpose3d, linear, max_pool2d, avg_pool2d,  # noqa: F401
                 adaptive_avg_pool2d, adaptive_max_pool2d, batch_norm, layer_norm, group_norm, instance_norm,
                 dropout, softmax, logsoftmax, leaky_relu, prelu, one_hot, embedding)
from .nn import (local_conv2d, deformable_conv2d, region_restricted_conv, sync_batch_norm, general_norm,  # noqa: F401
                 local_response_norm, pixel_shuffle, sliding_window, sliding_window_transpose, multi_head_attention,
                 pad, remap, warp_affine, warp_perspective)
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
