"""Quantized inference layers. Conv2d, Linear and BatchMatMulActivation run in integer arithmetic (int32
accumulation, exact); the other layers dequantize, compute in float32 and quantize their output."""
from __future__ import annotations

import pickle

import numpy as np

from ... import functional as F
from ...core._dispatch import OpError, apply
from ...core._tensor import Parameter, Tensor
from ...core.ops import quant as _q
from ...functional import quantized as Fq
from ...quantization.utils import QuantMode, create_qparams
from .module import QuantizedModule, _OutputQuant, dequantize_tensor, quantize_tensor

__all__ = ["Conv2d", "ConvRelu2d", "ConvTranspose2d", "ConvTransposeRelu2d", "ConvBn2d", "ConvBnRelu2d",
           "ConvTransposeBn2d", "ConvTransposeBnRelu2d", "Linear", "LinearRelu", "LinearBn1d",
           "LinearBnRelu1d", "Elemwise", "Concat", "QuantStub", "DequantStub", "BatchMatMulActivation"]


def _input_scale_zp(inp, who):
    qp = getattr(inp, "qparams", None)
    if qp is None or qp.scale is None or qp.dtype_meta is None:
        raise ValueError(f"{who}: the input is not a quantized tensor (put a QuantStub before the first "
                         f"quantized layer); got dtype {inp.dtype}")
    zp = qp.zero_point if qp.mode == QuantMode.ASYMMERTIC and qp.zero_point is not None else Tensor(0.0)
    return qp.scale, zp


class _WeightLayer(QuantizedModule, _OutputQuant):
    """Holds the quantized weight (symmetric, int storage) and the float bias of a QAT layer."""

    _relu = False
    _bias_shape = (-1,)  # as MegEngine's state_dict: (C,) for Linear, (1, C, 1, 1) for Conv2d

    def _take(self, qat, weight, bias, weight_shape=None):
        qp = qat.get_weight_qparams()
        if qp is None or qp.scale is None:
            raise ValueError(f"quantize: {type(qat).__name__} has no weight quantization parameters")
        if qp.mode != QuantMode.SYMMERTIC:
            raise ValueError("quantize: quantized layers need symmetric weight quantization")
        scale = np.asarray(qp.scale.numpy(), np.float32).reshape(())
        if np.isnan(scale):
            # (MegEngine asserts ``!std::isnan(scale)`` casting the weight: a weight observer that saw a NaN -- a
            # BatchNorm over one value per channel folded into the weight -- fails quantize() there; quant fuzz
            # seed 5 case 13)
            raise OpError(f"quantize: {type(qat).__name__} {qat.name or ''} has a NaN weight scale (its weight "
                          f"observer saw a NaN)")
        self.weight_scale = Tensor(scale)
        w = weight.detach() if weight_shape is None else weight.detach().reshape(weight_shape)
        # Parameters, as MegEngine's from_qat_module makes them (``parameters()`` of a quantized model lists them)
        self.weight = Parameter(quantize_tensor(w, qp.dtype_meta, self.weight_scale))
        self.bias = None if bias is None else Parameter(bias.numpy().reshape(self._bias_shape), dtype="float32")
        # the parameters keep the names the user gave them, as MegEngine's from_qat_module (dumped graphs show them)
        self.weight.name = weight.name
        if bias is not None:
            self.bias.name = bias.name
        self._set_output(qat)

    def _w_scale(self):
        """The weight's scale: its quantized dtype's (MegEngine keeps it there: ``module.weight =
        Parameter(w_int8, dtype=dtype.qint8(s))`` on a module built by hand), else the one taken at conversion."""
        w = self.weight
        qp = getattr(w, "qparams", None) if isinstance(w, Tensor) else None
        if qp is not None and qp.scale is not None and w._data.dtype.kind in "iu":
            return qp.scale
        ws = getattr(self, "weight_scale", None)
        if ws is None or not isinstance(w, Tensor) or w._data.dtype.kind not in "iu":
            raise ValueError(f"{type(self).__name__}: the weight is not quantized (dtype "
                             f"{getattr(w, 'dtype', None)}): set it to a Parameter of a quantized dtype, e.g. "
                             f"Parameter(w, dtype=dtype.qint8(scale)), or convert a QAT module with quantize()")
        return ws

    def _int_bias(self, in_scale, n, w_scale):
        if self.bias is None:
            return Tensor(np.zeros((n,), np.int32))
        bias = self.bias
        qp = getattr(bias, "qparams", None)
        if qp is not None and qp.scale is not None and bias._data.dtype.kind in "iu":
            bias = dequantize_tensor(bias)  # (a qint32 bias: MegEngine's astype to qint32(s_in * s_w) requantizes)
        return quantize_tensor(bias.reshape(-1), "qint32", in_scale * w_scale)

    @staticmethod
    def _relu_of(nonlinear_mode, who):
        """``nonlinear_mode`` of MegEngine's ``calc_*_quantized``: whether it is a ReLU (identity / relu only)."""
        if nonlinear_mode not in ("identity", "relu"):
            raise ValueError(f"{who}: nonlinear_mode must be 'identity' or 'relu', got {nonlinear_mode!r}")
        return nonlinear_mode == "relu"

    _conv_info = ""  # (a convolution's repr: MegEngine's quantized convolutions show the float layer's settings)

    @classmethod
    def _float_layer_class(cls):
        """The float layer whose settings this layer's repr shows (MegEngine's quantized convolutions are
        subclasses of the float ones); None: none."""
        return None

    def _restore_derived(self):
        super()._restore_derived()
        d = self.__dict__
        w = d.get("weight")
        qp = getattr(w, "qparams", None) if isinstance(w, Tensor) else None
        if "weight_scale" not in d and qp is not None and qp.scale is not None and w._data.dtype.kind in "iu":
            # MegEngine keeps the weight's scale in its quantized dtype only (megxla.load gives the weight qparams
            # from it); megxla's layers built by quantize() hold it also as weight_scale
            scale = np.asarray(qp.scale.numpy() if isinstance(qp.scale, Tensor) else qp.scale, np.float32)
            self.weight_scale = Tensor(scale.reshape(()) if scale.size == 1 else scale)
        float_cls = self._float_layer_class()
        if float_cls is not None and "_conv_info" not in d:
            try:  # MegEngine's repr: the float layer's settings, read from the same attributes
                self._conv_info = float_cls._module_info_string(self)
            except (AttributeError, TypeError):  # (only the repr reads it: a state lacking a setting still loads)
                pass

    def _module_info_string(self):
        return self._conv_info if self._conv_info else super()._module_info_string()

    _CONV_ATTRS = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups",
                   "conv_mode", "compute_mode", "padding_mode", "output_padding")

    def _adopt(self, layer, bias=True):
        """Take the configuration and (float, freshly initialized) parameters of the float ``layer`` -- MegEngine's
        quantized convolutions are its float ones (``class Conv2d(Float.Conv2d, QuantizedModule)``): a module built
        by hand holds float parameters until quantized ones are set."""
        for k in self._CONV_ATTRS:
            if hasattr(layer, k):
                setattr(self, k, getattr(layer, k))
        self.weight = layer.weight
        self.bias = layer.bias if bias else None
        self._conv_info = layer._module_info_string()


class Conv2d(_WeightLayer):
    r"""Quantized 2-D convolution: ``requantize(conv(x - zp_x, w_q) + b_q)`` in int32.

    Built by :func:`~megxla.quantization.quantize` from a QAT module, or by hand as MegEngine's: the arguments of
    :class:`~megxla.module.Conv2d` (always with a bias) and ``dtype``, the output's quantized dtype; then set
    ``weight`` to a Parameter of a quantized dtype (its scale is in the dtype) and ``bias`` to a float or qint32 one.

    Example:
        >>> from megxla.core.tensor import dtype
        >>> conv = Conv2d(2, 3, 1, dtype=dtype.qint8(0.1)); conv.eval()
        >>> conv.weight = mge.Parameter(np.ones((3, 2, 1, 1), "int8"), dtype=dtype.qint8(0.5))
        >>> x = mge.Tensor(np.full((1, 2, 2, 2), 4, "int8"), dtype=dtype.qint8(0.05))
        >>> dtype.convert_from_qint8(conv(x).numpy())[0, :, 0, 0]
        array([0.2, 0.2, 0.2], dtype=float32)
    """

    _bias_shape = (1, -1, 1, 1)

    @classmethod
    def _float_layer_class(cls):
        from ..conv import Conv2d as FloatConv2d
        return FloatConv2d

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, conv_mode: str = "cross_correlation", compute_mode: str = "default", dtype=None,
                 padding_mode: str = "zeros", **kwargs):
        super().__init__(**kwargs)
        from ..conv import Conv2d as FloatConv2d
        self._adopt(FloatConv2d(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, True,
                                conv_mode, compute_mode, padding_mode))
        self._conv_info = self._conv_info.replace(", bias=False", "")
        self._set_output_dtype(dtype)

    @classmethod
    def from_qat_module(cls, qat_module, weight=None, bias=None):
        qat = qat_module
        conv = getattr(qat, "conv", qat)
        q = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                conv.groups, getattr(conv, "conv_mode", "cross_correlation"),
                getattr(conv, "compute_mode", "default"), padding_mode=getattr(conv, "padding_mode", "zeros"),
                name=qat.name)
        # MegEngine's repr: "Quantized.Conv2d(3, 3, kernel_size=...)", never "bias=False" (its quantized
        # convolution always holds a bias, zeros when the QAT one has none)
        q._conv_info = conv._module_info_string().replace(", bias=False", "")
        q._take(qat, qat.weight if weight is None else weight, qat.bias if weight is None else bias)
        if q.bias is None:  # (MegEngine's zeros: its state_dict has the key, a strict load of it needs one; a
            # Parameter there, listed by parameters())
            q.bias = Parameter(np.zeros((1, conv.out_channels, 1, 1), np.float32))
        return q

    padding_mode = "zeros"

    def calc_conv_quantized(self, inp, nonlinear_mode="identity"):
        r"""The quantized convolution of ``inp`` followed by ``nonlinear_mode`` ("identity" or "relu", on the int32
        sum), in the output dtype (MegEngine's method, which ``forward`` calls)."""
        relu = self._relu_of(nonlinear_mode, "calc_conv_quantized")
        in_scale, zp = _input_scale_zp(inp, type(self).__name__)
        w_scale = self._w_scale()
        n = self.weight.shape[0] * (self.weight.shape[1] if self.weight.ndim == 5 else 1)
        padding = tuple(self.padding)
        if self.padding_mode != "zeros":  # reflected / replicated quantized values stay on the input's grid
            ph, pw = padding
            inp = F.nn.pad(inp, ((0, 0), (0, 0), (ph, ph), (pw, pw)), mode=self.padding_mode)
            padding = (0, 0)
        op = _q.qconv2d.bind(stride=tuple(self.stride), padding=padding, dilation=tuple(self.dilation),
                             groups=self.groups)
        acc = apply(op, inp, self.weight, Tensor(np.zeros((n,), np.int32)), zp)
        # (MegEngine's ConvBias adds the bias to the requantized sum in real values: _requantize's bias)
        bias = self._int_bias(in_scale, n, w_scale).reshape(1, n, 1, 1)
        return self._requantize(acc, in_scale * w_scale, relu=relu, bias=bias)

    def forward(self, inp):
        return self.calc_conv_quantized(inp, nonlinear_mode="relu" if self._relu else "identity")


class ConvRelu2d(Conv2d):
    """Quantized :class:`Conv2d` followed by ReLU (applied to the int32 accumulator before requantization).

    Built by :func:`~megxla.quantization.quantize` from the trained QAT module (its weight quantized, its output
    quantized with the scale its activation observer learned).

    Example:
        >>> from megxla.quantization import quantize, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.ConvRelu2d(2, 3, 1), M.DequantStub()))
        >>> x = mge.Tensor(np.random.rand(1, 2, 4, 4).astype("float32")); _ = net(x)  # calibrate the observers
        >>> net = quantize(net); net[1]
        Quantized.ConvRelu2d(2, 3, kernel_size=(1, 1))
        >>> y = net[1](net[0](x)); y.shape, y.dtype
        ((1, 3, 4, 4), dtype('int8'))
    """

    _relu = True


def _folded(qat):
    """The BN-folded weight and bias of a QAT Conv/Linear-BN module: MegEngine's ``fold_weight_bias`` of the running
    statistics (the weight fake-quantized as in training -- a narrow weight range clips here -- through the weight
    observer, which observes it when the module is in training mode)."""
    w, b = qat.fold_weight_bias(qat.bn.running_mean, qat.bn.running_var)
    return w.detach(), b.detach().reshape(-1)


class _FoldsBn:
    """Mixin: built from a QAT layer-BN module with the BatchNorm folded into the weight and bias."""

    @classmethod
    def from_qat_module(cls, qat_module):
        w, b = _folded(qat_module)
        return super().from_qat_module(qat_module, w, b)


class ConvBn2d(_FoldsBn, Conv2d):
    """Quantized :class:`~megxla.module.ConvBn2d`: the BatchNorm folded into the convolution's weight and bias,
    then run as :class:`Conv2d`.

    Built by :func:`~megxla.quantization.quantize` from the trained QAT module (its weight quantized, its output
    quantized with the scale its activation observer learned).

    Example:
        >>> from megxla.quantization import quantize, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.ConvBn2d(2, 3, 3, padding=1), M.DequantStub()))
        >>> x = mge.Tensor(np.random.rand(1, 2, 4, 4).astype("float32")); _ = net(x)  # calibrate the observers
        >>> net = quantize(net); net[1]
        Quantized.ConvBn2d(2, 3, kernel_size=(3, 3), padding=(1, 1))
        >>> y = net[1](net[0](x)); y.shape, y.dtype
        ((1, 3, 4, 4), dtype('int8'))
    """


class ConvBnRelu2d(ConvBn2d):
    """Quantized :class:`~megxla.module.ConvBnRelu2d`: :class:`ConvBn2d` followed by ReLU.

    Built by :func:`~megxla.quantization.quantize` from the trained QAT module (its weight quantized, its output
    quantized with the scale its activation observer learned).

    Example:
        >>> from megxla.quantization import quantize, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.ConvBnRelu2d(2, 3, 3, padding=1), M.DequantStub()))
        >>> x = mge.Tensor(np.random.rand(1, 2, 4, 4).astype("float32")); _ = net(x)  # calibrate the observers
        >>> net = quantize(net); net[1]
        Quantized.ConvBnRelu2d(2, 3, kernel_size=(3, 3), padding=(1, 1))
        >>> y = net[1](net[0](x)); y.shape, y.dtype
        ((1, 3, 4, 4), dtype('int8'))
    """

    _relu = True


class Linear(_WeightLayer):
    r"""Quantized linear layer: ``requantize(x_q @ w_q.T + b_q)`` in int32 arithmetic.

    Args:
        dtype: the output's quantized dtype (MegEngine's argument when built by hand; then set ``weight`` and
            ``bias``). :func:`~megxla.quantization.quantize` builds it from a QAT module instead, with its weight
            and output scales.

    Example:
        >>> from megxla.quantization import quantize, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.Linear(4, 3), M.DequantStub()))
        >>> x = mge.Tensor(np.random.rand(2, 4).astype("float32")); _ = net(x)  # calibrate the observers
        >>> net = quantize(net); net[1]
        Quantized.Linear()
        >>> y = net[1](net[0](x)); y.shape, y.dtype
        ((2, 3), dtype('int8'))
    """

    def __init__(self, dtype=None, **kwargs):
        # (MegEngine's: no parameters until quantize() or the user sets them)
        super().__init__(**kwargs)
        self.weight = None
        self.bias = None
        self._set_output_dtype(dtype)

    @classmethod
    def from_qat_module(cls, qat_module, weight=None, bias=None):
        qat = qat_module
        q = cls(name=qat.name)
        q._take(qat, qat.weight if weight is None else weight, qat.bias if weight is None else bias)
        return q

    def calc_linear_quantized(self, inp, nonlinear_mode="identity"):
        r"""``inp @ weight.T + bias`` followed by ``nonlinear_mode`` ("identity" or "relu"), in the output dtype
        (MegEngine's method, which ``forward`` calls)."""
        if self.training:  # (MegEngine's check and words)
            raise ValueError("quantized module only support inference.")
        relu = self._relu_of(nonlinear_mode, "calc_linear_quantized")
        in_scale, zp = _input_scale_zp(inp, type(self).__name__)
        w_scale = self._w_scale()
        acc = apply(_q.qlinear.bind(), inp, self.weight, self._int_bias(in_scale, self.weight.shape[0], w_scale), zp)
        return self._requantize(acc, in_scale * w_scale, relu=relu)

    def forward(self, inp):
        return self.calc_linear_quantized(inp, nonlinear_mode="relu" if self._relu else "identity")


class LinearRelu(Linear):
    """Quantized :class:`Linear` followed by ReLU (applied to the int32 accumulator before requantization).

    Built by :func:`~megxla.quantization.quantize` from the trained QAT module (its weight quantized, its output
    quantized with the scale its activation observer learned).

    Example:
        >>> from megxla.quantization import quantize, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.LinearRelu(4, 3), M.DequantStub()))
        >>> x = mge.Tensor(np.random.rand(2, 4).astype("float32")); _ = net(x)  # calibrate the observers
        >>> net = quantize(net); net[1]
        Quantized.LinearRelu()
        >>> y = net[1](net[0](x)); y.shape, y.dtype
        ((2, 3), dtype('int8'))
    """

    _relu = True


class LinearBn1d(_FoldsBn, Linear):
    """Quantized :class:`~megxla.module.LinearBn1d`: the BatchNorm folded into the weight and bias, then run as
    :class:`Linear`.

    Built by :func:`~megxla.quantization.quantize` from the trained QAT module (its weight quantized, its output
    quantized with the scale its activation observer learned).

    Example:
        >>> from megxla.quantization import quantize, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.LinearBn1d(4, 3), M.DequantStub()))
        >>> x = mge.Tensor(np.random.rand(2, 4).astype("float32")); _ = net(x)  # calibrate the observers
        >>> net = quantize(net); net[1]
        Quantized.LinearBn1d()
        >>> y = net[1](net[0](x)); y.shape, y.dtype
        ((2, 3), dtype('int8'))
    """


class LinearBnRelu1d(LinearBn1d):
    """Quantized :class:`~megxla.module.LinearBnRelu1d`: :class:`LinearBn1d` followed by ReLU.

    Built by :func:`~megxla.quantization.quantize` from the trained QAT module (its weight quantized, its output
    quantized with the scale its activation observer learned).

    Example:
        >>> from megxla.quantization import quantize, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.LinearBnRelu1d(4, 3), M.DequantStub()))
        >>> x = mge.Tensor(np.random.rand(2, 4).astype("float32")); _ = net(x)  # calibrate the observers
        >>> net = quantize(net); net[1]
        Quantized.LinearBnRelu1d()
        >>> y = net[1](net[0](x)); y.shape, y.dtype
        ((2, 3), dtype('int8'))
    """

    _relu = True


class _FloatCompute(QuantizedModule, _OutputQuant):
    """Layers without integer kernels here: dequantize the inputs, run the float layer, quantize the output."""

    def __init__(self, float_forward, dtype=None, **kwargs):
        super().__init__(**kwargs)
        self._float_forward = float_forward
        self._set_output_dtype(dtype)

    _info = ""

    def _module_info_string(self):
        return self._info  # the float layer's, as MegEngine's quantized modules (subclasses of the float ones)

    @classmethod
    def _info_of(cls, qat):
        return ""

    def __getstate__(self):
        # the float function follows from the module (Elemwise's method, Concat's concat): left out of pickles --
        # some are lambdas (Concat's, Elemwise's fused modes), which pickle cannot write, and MegEngine's quantized
        # modules hold none -- and derived again when loading
        state = dict(self.__dict__)
        state.pop("_float_forward", None)
        return state

    def _restore_derived(self):
        super()._restore_derived()
        if "_float_forward" not in self.__dict__:
            self._float_forward = self._derived_float_forward()

    def _derived_float_forward(self):
        """The float function this module computes, derived from its other attributes (when unpickling)."""
        raise pickle.UnpicklingError(f"load: the quantized {type(self).__name__} has no float function")

    def forward(self, *inps, **kwargs):
        # (non-tensor arguments, such as Concat's axis given positionally, pass through)
        args = [dequantize_tensor(x) if isinstance(x, Tensor) else
                [dequantize_tensor(t) for t in x] if isinstance(x, (list, tuple)) else x for x in inps]
        return self._quantize_output(self._float_forward(*args, **kwargs))

    @classmethod
    def from_qat_module(cls, qat_module):
        q = cls(cls._float_of(qat_module), name=qat_module.name)
        q._info = cls._info_of(qat_module)
        q._set_output(qat_module)
        return q


class ConvTranspose2d(_WeightLayer):
    r"""Quantized 2-D transposed convolution: the quantized weight and input dequantized, the bias on the int32 grid
    of ``s_in * s_w`` (MegEngine's ``bias.astype(qint32(...))``), the float result quantized to the output dtype.

    Built by :func:`~megxla.quantization.quantize` from a QAT module, or by hand as MegEngine's: the arguments of
    :class:`~megxla.module.ConvTranspose2d` and ``dtype``, the output's quantized dtype; then set ``weight`` to a
    Parameter of a quantized dtype and ``bias`` to a float or qint32 one.

    Example:
        >>> from megxla.core.tensor import dtype
        >>> m = ConvTranspose2d(2, 3, 2, stride=2, bias=False, dtype=dtype.qint8(0.1)); m.eval()
        >>> m.weight = mge.Parameter(np.ones((2, 3, 2, 2), "int8"), dtype=dtype.qint8(0.5))
        >>> x = mge.Tensor(np.full((1, 2, 1, 1), 4, "int8"), dtype=dtype.qint8(0.05))
        >>> y = m(x); y.shape, dtype.convert_from_qint8(y.numpy())[0, 0, 0, 0]
        ((1, 3, 2, 2), np.float32(0.2))
    """

    _bias_shape = (1, -1, 1, 1)
    _relu = False

    @classmethod
    def _float_layer_class(cls):
        from ..conv import ConvTranspose2d as FloatConvTranspose2d
        return FloatConvTranspose2d

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, conv_mode: str = "cross_correlation",
                 compute_mode: str = "default", dtype=None, **kwargs):
        super().__init__(**kwargs)
        from ..conv import ConvTranspose2d as FloatConvTranspose2d
        self._adopt(FloatConvTranspose2d(in_channels, out_channels, kernel_size, stride, padding, output_padding,
                                         dilation, groups, bias, conv_mode, compute_mode), bias)
        self._set_output_dtype(dtype)

    @classmethod
    def from_qat_module(cls, qat_module, weight=None, bias=None):
        conv = getattr(qat_module, "conv_transpose2d", qat_module)
        w, b = (qat_module.weight, qat_module.bias) if weight is None else (weight, bias)
        q = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                conv.output_padding, conv.dilation, conv.groups, b is not None, conv.conv_mode, conv.compute_mode,
                name=qat_module.name)
        q._conv_info = cls._info_of(qat_module)
        q._take(qat_module, w, b)
        return q

    @classmethod
    def _info_of(cls, qat):  # MegEngine: "Quantized.ConvTranspose2d(3, 4, kernel_size=(3, 3))"
        return getattr(qat, "conv_transpose2d", qat)._module_info_string()

    def calc_conv_transpose2d_quantized(self, inp, nonlinear_mode):
        r"""The quantized transposed convolution of ``inp`` followed by ``nonlinear_mode`` ("identity" or "relu"),
        in the output dtype (MegEngine's method, which ``forward`` calls; MegEngine's takes "identity" only)."""
        relu = self._relu_of(nonlinear_mode, "calc_conv_transpose2d_quantized")
        in_scale, _ = _input_scale_zp(inp, type(self).__name__)
        w_scale = self._w_scale()
        w = self.weight
        # (a quantized tensor's astype("float32") dequantizes already, as MegEngine's; a bare integer one, a
        # weight loaded without its dtype, is scaled here)
        qp = w.qparams
        w = dequantize_tensor(w) if qp is not None and qp.scale is not None else w.astype("float32") * w_scale
        b = None
        if self.bias is not None:
            b = dequantize_tensor(self._int_bias(in_scale, self.out_channels, w_scale)).reshape(1, -1, 1, 1)
        y = F.conv_transpose2d(dequantize_tensor(inp), w, b, stride=self.stride, padding=self.padding,
                               output_padding=self.output_padding, dilation=self.dilation, groups=self.groups,
                               conv_mode=self.conv_mode, compute_mode=self.compute_mode)
        return self._quantize_output(F.relu(y) if relu else y)

    def forward(self, inp):
        return self.calc_conv_transpose2d_quantized(inp, nonlinear_mode="relu" if self._relu else "identity")


class ConvTransposeRelu2d(ConvTranspose2d):
    """Quantized :class:`~megxla.module.ConvTransposeRelu2d`: :class:`ConvTranspose2d` followed by ReLU.

    Built by :func:`~megxla.quantization.quantize` from the trained QAT module (its weight quantized, its output
    quantized with the scale its activation observer learned).

    Example:
        >>> from megxla.quantization import quantize, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.ConvTransposeRelu2d(2, 3, 2, stride=2), M.DequantStub()))
        >>> x = mge.Tensor(np.random.rand(1, 2, 4, 4).astype("float32")); _ = net(x)  # calibrate the observers
        >>> net = quantize(net); net[1]
        Quantized.ConvTransposeRelu2d(2, 3, kernel_size=(2, 2), stride=(2, 2))
        >>> y = net[1](net[0](x)); y.shape, y.dtype
        ((1, 3, 8, 8), dtype('int8'))
    """

    _relu = True


class ConvTransposeBn2d(_FoldsBn, ConvTranspose2d):
    """Quantized :class:`~megxla.module.ConvTransposeBn2d`: the BatchNorm folded into the transposed
    convolution's weight and bias, then run as :class:`ConvTranspose2d`.

    Built by :func:`~megxla.quantization.quantize` from the trained QAT module (its weight quantized, its output
    quantized with the scale its activation observer learned).

    Example:
        >>> from megxla.quantization import quantize, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.ConvTransposeBn2d(2, 3, 2, stride=2), M.DequantStub()))
        >>> x = mge.Tensor(np.random.rand(1, 2, 4, 4).astype("float32")); _ = net(x)  # calibrate the observers
        >>> net = quantize(net); net[1]
        Quantized.ConvTransposeBn2d(2, 3, kernel_size=(2, 2), stride=(2, 2))
        >>> y = net[1](net[0](x)); y.shape, y.dtype
        ((1, 3, 8, 8), dtype('int8'))
    """

    @classmethod
    def _info_of(cls, qat):  # the folded BatchNorm gives MegEngine's quantized layer a bias: no "bias=False"
        return ConvTranspose2d._info_of(qat).replace(", bias=False", "")


class ConvTransposeBnRelu2d(ConvTransposeBn2d):
    """Quantized :class:`~megxla.module.ConvTransposeBnRelu2d`: :class:`ConvTransposeBn2d` followed by ReLU.

    Built by :func:`~megxla.quantization.quantize` from the trained QAT module (its weight quantized, its output
    quantized with the scale its activation observer learned).

    Example:
        >>> from megxla.quantization import quantize, quantize_qat
        >>> net = quantize_qat(M.Sequential(M.QuantStub(), M.ConvTransposeBnRelu2d(2, 3, 2, stride=2), M.DequantStub()))
        >>> x = mge.Tensor(np.random.rand(1, 2, 4, 4).astype("float32")); _ = net(x)  # calibrate the observers
        >>> net = quantize(net); net[1]
        Quantized.ConvTransposeBnRelu2d(2, 3, kernel_size=(2, 2), stride=(2, 2))
        >>> y = net[1](net[0](x)); y.shape, y.dtype
        ((1, 3, 8, 8), dtype('int8'))
    """

    _relu = True


class BatchMatMulActivation(_WeightLayer):
    r"""Quantized :class:`~megxla.module.BatchMatMulActivation`: ``requantize(act(w_q @ (x - zp_x) + b_q))`` in
    int32, as MegEngine's batched convolution of ``x`` ``(batch, in_features, K)`` by one 1x1 filter per batch.

    It holds MegEngine's parameters: ``weight``, the quantized weight ``(batch, out_features, in_features, 1, 1)``
    (its scale in its dtype), and ``bias``, float ``(1, out_features, 1, 1)`` (zeros when the QAT layer has none),
    added per output feature on the int32 grid of ``s_in * s_w`` as MegEngine's quantized layer adds it (the float
    and QAT layers add their ``(out_features,)`` bias on the last axis). The output is ``(batch, out_features, K)``.

    Built by :func:`~megxla.quantization.quantize` from a QAT module, or by hand as MegEngine's: the arguments of
    :class:`~megxla.module.BatchMatMulActivation` and ``dtype``, the output's quantized dtype; then set ``weight``
    to a Parameter of a quantized dtype and ``bias`` to a float one.

    Example:
        >>> from megxla.core.tensor import dtype
        >>> bmm = BatchMatMulActivation(1, 2, 3, dtype=dtype.qint8(0.1)); bmm.eval()
        >>> bmm.weight = mge.Parameter(np.ones((1, 3, 2, 1, 1), "int8"), dtype=dtype.qint8(0.5))
        >>> bmm.bias = mge.Parameter(np.array([0.0, 0.1, -0.1], "float32").reshape(1, 3, 1, 1))
        >>> x = mge.Tensor(np.full((1, 2, 1), 4, "int8"), dtype=dtype.qint8(0.05))
        >>> dtype.convert_from_qint8(bmm(x).numpy()).ravel()
        array([0.2, 0.3, 0.1], dtype=float32)
    """

    _bias_shape = (1, -1, 1, 1)

    def __init__(self, batch: int, in_features: int, out_features: int, bias: bool = True,
                 nonlinear_mode="identity", dtype=None, **kwargs):
        super().__init__(**kwargs)
        from ..batch_matmul_activation import BatchMatMulActivation as FloatBmm
        # (MegEngine's quantized layer is its float one: built by hand it holds the float, freshly initialized
        # (batch, out, in) weight and (out,) bias until quantized ones are set)
        layer = FloatBmm(batch, in_features, out_features, bias, nonlinear_mode)
        self.batch, self.in_features, self.out_features = layer.batch, layer.in_features, layer.out_features
        self.nonlinear_mode = layer.nonlinear_mode
        self.weight = layer.weight
        self.bias = layer.bias
        self._set_output_dtype(dtype)

    @classmethod
    def from_qat_module(cls, qat_module):
        qat = qat_module
        # NOTE: MegEngine's drops the QAT layer's nonlinear_mode (identity); megxla keeps its ReLU
        # (docs/differences.md)
        q = cls(qat.batch, qat.in_features, qat.out_features, qat.bias is not None, qat.nonlinear_mode,
                name=qat.name)
        q._take(qat, qat.weight, qat.bias, (qat.batch, qat.out_features, qat.in_features, 1, 1))
        if q.bias is None:  # (MegEngine's zeros: its state_dict has the key, a strict load of it needs one; a
            # Parameter there, listed by parameters())
            q.bias = Parameter(np.zeros((1, qat.out_features, 1, 1), np.float32))
        return q

    def _module_info_string(self):  # MegEngine: "Quantized.BatchMatMulActivation(batch=2, ..., bias=True)"
        return (f"batch={self.batch}, in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")

    def forward(self, inp):
        return self.calc_bmm_quantized(inp)

    def calc_bmm_quantized(self, inp):
        r"""The quantized batched product of ``inp`` ``(batch, in_features, K)``, its bias and activation, in the
        output dtype (MegEngine's method, which ``forward`` calls)."""
        b, i = self.batch, self.in_features
        shape = tuple(inp.shape)
        if len(shape) != 3 or shape[:2] != (b, i):
            raise ValueError(f"BatchMatMulActivation: input must be (batch={b}, in_features={i}, K), got {shape}")
        _input_scale_zp(inp, type(self).__name__)  # (a clear error for a float input)
        self._output_check()
        # MegEngine's: the (batch, in, K, 1) input convolved with each sample's 1x1 filters, its bias per output
        # feature, requantized as its batched convolution kernel does
        out = Fq.batch_conv_bias_activation(F.expand_dims(inp, -1), self._quantized_weight(), self.bias,
                                            dtype=self.output_dtype,
                                            nonlinear_mode="relu" if self.nonlinear_mode == "relu" else "identity")
        return F.squeeze(out, -1)

    def _quantized_weight(self):
        w = self.weight
        qp = getattr(w, "qparams", None) if isinstance(w, Tensor) else None
        scale = self._w_scale()  # (raises unless the weight is quantized)
        if qp is not None and qp.scale is not None and qp.dtype_meta is not None:
            return w
        # a bare integer weight (set or loaded without its dtype): the scale taken at conversion
        q = Tensor(w.numpy())
        q.qparams.update(create_qparams(QuantMode.SYMMERTIC, "qint8", scale))
        return q


class Elemwise(_FloatCompute):
    """Quantized :class:`~megxla.module.Elemwise`: the inputs dequantized, the float operation, the output
    quantized.

    Args:
        method: the element-wise mode, as :class:`~megxla.module.Elemwise` (``"add"``, ``"fuse_add_relu"``...).
        dtype: the output's quantized dtype (MegEngine's argument; :func:`~megxla.quantization.quantize` sets the
            one its QAT module learned).

    Example:
        >>> from megxla.core.tensor import dtype
        >>> from megxla.module import quantized
        >>> stub, add = quantized.QuantStub(dtype.qint8(0.1)), quantized.Elemwise("add", dtype.qint8(0.1))
        >>> stub.eval(); add.eval()
        >>> x = stub(mge.Tensor([0.5, -1.0]))
        >>> y = add(x, x); y.numpy(), quantized.dequantize_tensor(y).numpy()
        (array([ 10, -20], dtype=int8), array([ 1., -2.], dtype=float32))
    """

    def __init__(self, method, dtype=None, **kwargs):
        from ..elemwise import _MODES
        mode = str(method).upper()
        if mode not in _MODES:
            raise ValueError(f"Elemwise: unknown mode {method!r}; known modes: {sorted(_MODES)}")
        super().__init__(_MODES[mode], dtype, **kwargs)
        self.method = "q" + str(method)  # (MegEngine's attribute: the quantized mode's name)

    def _derived_float_forward(self):
        from ..elemwise import _MODES
        # ("qadd": MegEngine's and megxla's quantized modules name their mode "q" + the float mode)
        mode = str(self.__dict__.get("method")).upper()
        if mode.startswith("Q") and mode[1:] in _MODES:
            mode = mode[1:]
        if mode not in _MODES:
            raise pickle.UnpicklingError(f"load: quantized Elemwise {self._short_name or ''}: unknown method "
                                         f"{self.__dict__.get('method')!r}; known modes: {sorted(_MODES)}")
        return _MODES[mode]

    @classmethod
    def from_qat_module(cls, qat_module):
        q = cls(qat_module.method, name=qat_module.name)
        q._info = cls._info_of(qat_module)
        q._set_output(qat_module)
        return q


def _concat(inps, axis=0):
    return F.concat(inps, axis)


class Concat(_FloatCompute):
    """Quantized :class:`~megxla.module.Concat`: the inputs (which may have different scales) dequantized,
    concatenated and quantized to the output dtype.

    Args:
        dtype: the output's quantized dtype (MegEngine's argument; :func:`~megxla.quantization.quantize` sets the
            one its QAT module learned).

    Example:
        >>> from megxla.core.tensor import dtype
        >>> from megxla.module import quantized
        >>> a = quantized.quantize_tensor(mge.Tensor([1.0]), "qint8", 0.5)
        >>> b = quantized.quantize_tensor(mge.Tensor([0.3]), "qint8", 0.1)
        >>> cat = quantized.Concat(dtype.qint8(0.1)); cat.eval()
        >>> cat([a, b]).numpy()
        array([10,  3], dtype=int8)
    """

    def __init__(self, dtype=None, **kwargs):
        super().__init__(_concat, dtype, **kwargs)

    def _derived_float_forward(self):
        return _concat

    def forward(self, inps, axis: int = 0):  # (MegEngine's signature: ``cat(inps=[a, b], axis=1)``)
        return super().forward(list(inps), axis)

    @classmethod
    def from_qat_module(cls, qat_module):
        q = cls(name=qat_module.name)
        q._info = cls._info_of(qat_module)
        q._set_output(qat_module)
        return q


class QuantStub(QuantizedModule, _OutputQuant):
    """Quantizes a float input with the parameters its QAT module learned, or to ``dtype`` (MegEngine's
    ``QuantStub(dtype)``).

    Args:
        dtype: the quantized dtype of the output (None: set by :func:`~megxla.quantization.quantize`).

    Example:
        >>> from megxla.core.tensor import dtype
        >>> from megxla.module import quantized
        >>> stub = quantized.QuantStub(dtype.qint8(0.1)); stub.eval()
        >>> q = stub(mge.Tensor([0.26, -1.0])); q.numpy()
        array([  3, -10], dtype=int8)
        >>> q.qparams.scale.item()
        0.1...
    """

    def __init__(self, dtype=None, **kwargs):
        super().__init__(**kwargs)
        self._set_output_dtype(dtype)

    def forward(self, inp):
        return self._quantize_output(inp)

    @classmethod
    def from_qat_module(cls, qat_module):
        q = cls(name=qat_module.name)
        q._set_output(qat_module)
        return q


class DequantStub(QuantizedModule):
    """Converts a quantized tensor back to float32: ``(q - zero_point) * scale``.

    Example:
        >>> from megxla.module import quantized
        >>> q = quantized.quantize_tensor(mge.Tensor([0.26, -1.0]), "qint8", 0.1)
        >>> stub = quantized.DequantStub(); stub.eval()
        >>> stub(q).numpy()
        array([ 0.3, -1. ], dtype=float32)
    """

    def forward(self, inp):
        return dequantize_tensor(inp)

    @classmethod
    def from_qat_module(cls, qat_module):
        return cls(name=qat_module.name)
