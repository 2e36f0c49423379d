"""Quantized inference modules (``megengine.module.quantized``), made by
:func:`megxla.quantization.quantize` from trained QAT modules."""
from .module import QuantizedModule, dequantize_tensor, quantize_tensor
from .layers import (BatchMatMulActivation, Concat, Conv2d, ConvBn2d, ConvBnRelu2d, ConvRelu2d, ConvTranspose2d,
                     ConvTransposeBn2d, ConvTransposeBnRelu2d, ConvTransposeRelu2d, DequantStub, Elemwise, Linear,
                     LinearBn1d, LinearBnRelu1d, LinearRelu, QuantStub)

__all__ = ["QuantizedModule", "quantize_tensor", "dequantize_tensor", "BatchMatMulActivation", "Concat", "Conv2d",
           "ConvBn2d", "ConvBnRelu2d", "ConvRelu2d", "ConvTranspose2d", "ConvTransposeBn2d",
           "ConvTransposeBnRelu2d", "ConvTransposeRelu2d", "DequantStub", "Elemwise", "Linear", "LinearBn1d",
           "LinearBnRelu1d", "LinearRelu", "QuantStub"]

# MegEngine's submodules, attributes of the package once it is imported, as there (``qat.conv.Conv2d``)
from . import (batch_matmul_activation, concat, conv, conv_bn, conv_transpose_bn, elemwise,  # noqa: E402
               linear, linear_bn, quant_dequant)
