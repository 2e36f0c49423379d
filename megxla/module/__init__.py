"""Neural-network layers (``megengine.module``): the ``Module`` base class and the standard layers.

Example:
    >>> import megxla as mge
    >>> import megxla.module as M
    >>> net = M.Sequential(M.Conv2d(3, 8, 3, padding=1), M.BatchNorm2d(8), M.ReLU(),
    ...                    M.AdaptiveAvgPool2d(1))
    >>> net(mge.Tensor(np.ones((2, 3, 8, 8), "float32"))).shape
    (2, 8, 1, 1)
"""
from . import init
from .activation import GELU, LeakyReLU, PReLU, ReLU, Sigmoid, SiLU, Softmax
from .batch_matmul_activation import BatchMatMulActivation
from .batchnorm import BatchNorm1d, BatchNorm2d, SyncBatchNorm
from .concat import Concat
from .conv import (Conv1d, Conv2d, Conv3d, ConvRelu2d, ConvTranspose2d, ConvTranspose3d, ConvTransposeRelu2d,
                   DeformableConv2d, LocalConv2d)
from .conv_bn import ConvBn2d, ConvBnRelu2d, ConvTransposeBn2d, ConvTransposeBnRelu2d
from .deformable_psroi_pooling import DeformablePSROIPooling
from .dropout import Dropout
from .elemwise import Elemwise
from .embedding import Embedding
from .identity import Identity
from .linear import Linear, LinearRelu
from .linear_bn import LinearBn1d, LinearBnRelu1d
from .module import Module
from .multiheadattn import MultiHeadAttention
from .normalization import GeneralNorm, GroupNorm, InstanceNorm, LayerNorm, LocalResponseNorm
from .padding import Pad
from .pixel_shuffle import PixelShuffle
from .pooling import AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool2d, MaxPool2d
from .quant_dequant import DequantStub, QuantStub
from .rnn import LSTM, RNN, LSTMCell, RNNCell
from .rrconv import RegionRestrictedConv
from .sequential import Sequential
from .sliding_window import SlidingWindow, SlidingWindowTranspose
from .vision import (ActiveBlur, AdditiveElemwise, AdditiveGaussianNoise, AdditiveLaplaceNoise, AdditivePoissonNoise,
                     Emboss, Flip, LinearContrast, Resize, Rot90, Rotate, Sharpen)

__all__ = [
    "Module", "init",
    "Linear", "LinearRelu", "LinearBn1d", "LinearBnRelu1d",
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "ConvTranspose3d", "ConvRelu2d", "ConvTransposeRelu2d",
    "LocalConv2d", "DeformableConv2d",
    "ConvBn2d", "ConvBnRelu2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d",
    "BatchNorm1d", "BatchNorm2d", "SyncBatchNorm", "LayerNorm", "GroupNorm", "InstanceNorm", "GeneralNorm",
    "LocalResponseNorm",
    "MaxPool2d", "AvgPool2d", "AdaptiveMaxPool2d", "AdaptiveAvgPool2d",
    "ReLU", "GELU", "SiLU", "Sigmoid", "Softmax", "LeakyReLU", "PReLU",
    "Dropout", "Embedding", "Identity", "Sequential", "Concat", "Elemwise", "Pad", "PixelShuffle",
    "SlidingWindow", "SlidingWindowTranspose", "QuantStub", "DequantStub",
    "RNNCell", "LSTMCell", "RNN", "LSTM", "MultiHeadAttention", "RegionRestrictedConv", "BatchMatMulActivation",
]
__all__ += ["DeformablePSROIPooling"]
# (as MegEngine's package: RandomHorizontalFlip / RandomVerticalFlip only from megengine.module.vision)
__all__ += ["Flip", "Resize", "Rot90", "Rotate", "ActiveBlur", "AdditiveElemwise", "AdditiveGaussianNoise",
            "AdditiveLaplaceNoise", "AdditivePoissonNoise", "Emboss", "LinearContrast", "Sharpen"]


def __getattr__(name):
    # MegEngine's package imports these submodules, so after ``import megengine.module as M`` code reads
    # ``M.qat.QuantStub`` / ``M.quantized.Linear`` without importing them; here they load on first use
    if name in ("qat", "quantized", "lrn", "adaptive_pooling", "conv_transpose_bn"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
