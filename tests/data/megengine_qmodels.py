"""Small models for tests/test_quantized_megengine_pickles.py: MegEngine 1.13 pickles them whole after
``quantize`` (tests/data/megengine_quantized_models*.pkl), so loading needs this module importable. It runs under
MegEngine (writing the files) and under megxla (reading them)."""
try:
    import megengine.functional as F
    import megengine.module as M
except ImportError:  # megxla's tests, without the ``megengine`` alias
    import megxla.functional as F
    import megxla.module as M

# the Elemwise methods of ElemwiseNet, with their arity
UNARY = ("relu", "abs", "negate", "sigmoid", "tanh", "h_swish", "exp", "floor", "ceil", "round")
BINARY = ("add", "sub", "mul", "max", "min", "true_div", "fuse_add_relu", "fuse_add_sigmoid", "fuse_add_tanh",
          "fuse_add_h_swish", "switch_gt0")
TERNARY = ("fuse_mul_add3", "cond_leq_mov", "cond_lt_mov")


class ConvNet(M.Module):
    """Every quantized convolution: each output is kept quantized (the test compares the int8 values)."""

    def __init__(self):
        super().__init__()
        self.q = M.QuantStub()
        self.conv = M.Conv2d(2, 4, 3, padding=1)
        self.conv_relu = M.ConvRelu2d(4, 4, 3, stride=2, padding=1, bias=False)
        self.conv_bn = M.ConvBn2d(4, 4, 1, groups=2)
        self.conv_bn_relu = M.ConvBnRelu2d(4, 3, 3, padding=2, dilation=2)
        self.deconv = M.ConvTranspose2d(3, 2, 2, stride=2)
        self.deconv_bn = M.ConvTransposeBn2d(2, 2, 3, padding=1, bias=False)
        self.deconv_relu = M.ConvTransposeRelu2d(2, 2, 1)
        self.deconv_bn_relu = M.ConvTransposeBnRelu2d(2, 2, 1)
        self.dq = M.DequantStub()

    def forward(self, x, deconv=True):
        a = self.q(x)
        b = self.conv(a)
        c = self.conv_relu(b)
        d = self.conv_bn(c)
        e = self.conv_bn_relu(d)
        out = {"q": a, "conv": b, "conv_relu": c, "conv_bn": d, "conv_bn_relu": e}
        if not deconv:
            # (MegEngine 1.13's quantized transposed convolutions run neither a bias nor ReLU: the files' writer
            # computes them from MegEngine's quantized primitives)
            return out
        out["deconv"] = self.deconv(e)
        out["deconv_bn"] = self.deconv_bn(out["deconv"])
        out["deconv_relu"] = self.deconv_relu(out["deconv_bn"])
        out["deconv_bn_relu"] = self.deconv_bn_relu(out["deconv_bn"])
        out["y"] = self.dq(out["deconv_bn"])
        return out


class LinearNet(M.Module):
    """Every quantized linear layer."""

    def __init__(self):
        super().__init__()
        self.q = M.QuantStub()
        self.fc = M.Linear(6, 5)
        self.fc_relu = M.LinearRelu(5, 5, bias=False)
        self.fc_bn = M.LinearBn1d(5, 4)
        self.fc_bn_relu = M.LinearBnRelu1d(4, 3)
        self.dq = M.DequantStub()

    def forward(self, x):
        a = self.q(x)
        b = self.fc(a)
        c = self.fc_relu(b)
        d = self.fc_bn(c)
        e = self.fc_bn_relu(d)
        return {"q": a, "fc": b, "fc_relu": c, "fc_bn": d, "fc_bn_relu": e, "y": self.dq(e)}


class OpsNet(M.Module):
    """Quantized Elemwise (each method of UNARY, BINARY, TERNARY), Concat and BatchMatMulActivation."""

    def __init__(self):
        super().__init__()
        self.qa = M.QuantStub()
        self.qb = M.QuantStub()
        for m in UNARY + BINARY + TERNARY:
            setattr(self, "e_" + m, M.Elemwise(m))
        self.cat = M.Concat()
        self.bmm = M.BatchMatMulActivation(2, 3, 4)
        self.dq = M.DequantStub()

    def forward(self, x, y):
        a, b = self.qa(x), self.qb(y)
        out = {"qa": a, "qb": b}
        for m in UNARY:
            out[m] = getattr(self, "e_" + m)(a)
        for m in BINARY:
            out[m] = getattr(self, "e_" + m)(a, b)
        for m in TERNARY:
            out[m] = getattr(self, "e_" + m)(a, b, a)
        out["cat"] = self.cat([a, b], axis=1)
        out["bmm"] = self.bmm(F.reshape(a, (2, 3, -1)))
        out["y"] = self.dq(out["add"])
        return out
