"""Quantization-aware-training modules (``megengine.module.qat``): float layers whose weights and outputs pass
through observers and fake quantization. Build them with :func:`megxla.quantization.quantize_qat`."""
from .module import QATModule
from .layers import (BatchMatMulActivation, Concat, Conv2d, ConvRelu2d, ConvTranspose2d, ConvTransposeRelu2d,
                     DequantStub, Elemwise, Linear, LinearRelu, QuantStub)
from .fused_bn import (ConvBn2d, ConvBnRelu2d, ConvTransposeBn2d, ConvTransposeBnRelu2d, LinearBn1d,
                       LinearBnRelu1d)

__all__ = ["QATModule", "BatchMatMulActivation", "Concat", "Conv2d", "ConvRelu2d", "ConvTranspose2d",
           "ConvTransposeRelu2d", "DequantStub", "Elemwise", "Linear", "LinearRelu", "QuantStub", "ConvBn2d",
           "ConvBnRelu2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d", "LinearBn1d", "LinearBnRelu1d"]

# MegEngine's submodules, attributes of the package once it is imported, as there (``qat.conv.Conv2d``)
from . import (batch_matmul_activation, concat, conv, conv_bn, conv_transpose_bn, elemwise,  # noqa: E402
               linear, linear_bn, quant_dequant)
