"""Write the TracedModule fixture files of tests/test_traced_module_files.py with real MegEngine 1.13.

Run with MegEngine's own interpreter (not megxla's): ``python make_files.py`` writes, per model, ``<name>.tm``
(``megengine.save(traced_module, ...)``) and ``<name>.npz`` (the input ``x``, MegEngine's outputs ``y0``,
``y1``..., the gradient ``g`` of ``(out ** 2).sum()`` for the first parameter and the graph as MegEngine prints it,
``graph``). Models: an MLP, a ConvNet (BN, pooling), functional calls / Tensor methods / a Parameter read / a
builtin op Apply / a captured constant (funcs), nested custom modules and a list of modules (nested), QAT models
of both flows (qat: quantize_qat of a traced model; qat_traced: trace of a QAT model), the quantized model of
qat, quantized Elemwise / Concat / ConvTranspose2d, and a model with shapes, indexing, keyword inputs, dict
outputs and user code from tm_user_ops.py (misc). Parameter initialisation is seeded: the files are the same on
every run.
"""
import os
import sys

import numpy as np

import megengine as mge
import megengine.functional as F
import megengine.module as M
from megengine.autodiff import GradManager
from megengine.core._imperative_rt.core2 import apply
from megengine.core.ops.builtin import Elemwise
from megengine.traced_module import TracedModule, trace_module

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tm_user_ops import Act, my_scale  # noqa: E402
rng = np.random.RandomState(0)
mge.random.seed(0)  # (parameter initialisation: the files are the same on every run)


class MLP(M.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = M.Linear(4, 8)
        self.act = M.ReLU()
        self.fc2 = M.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class ConvNet(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = M.BatchNorm2d(4)
        self.relu = M.ReLU()
        self.pool = M.MaxPool2d(2)
        self.avg = M.AdaptiveAvgPool2d(1)
        self.fc = M.Linear(4, 2)

    def forward(self, x):
        x = self.pool(self.relu(self.bn(self.conv(x))))
        x = self.avg(x)
        x = F.flatten(x, 1)
        return self.fc(x)


CONST = mge.Tensor(np.array([0.5, -1.0, 2.0], dtype="float32"))


class Funcs(M.Module):
    """Functional calls, Tensor methods, getattr of a Parameter, a builtin op Apply and a captured constant."""

    def __init__(self):
        super().__init__()
        self.w = mge.Parameter(rng.randn(3, 3).astype("float32"))
        self.b = mge.Parameter(np.zeros(3, "float32"))

    def forward(self, x):
        y = F.matmul(x, self.w) + self.b
        y = F.relu(y) * 2.0
        y = apply(Elemwise(mode="add"), y, x)[0]
        z = y.reshape(-1, 3).transpose(1, 0)
        z = F.concat([z, z * CONST.reshape(3, 1)], axis=1)
        s = z.sum(axis=0, keepdims=True)
        return F.sigmoid(s).flatten() + x.mean(), y.astype("float32")


class Block(M.Module):
    def __init__(self, c):
        super().__init__()
        self.fc = M.Linear(c, c)
        self.scale = mge.Parameter(np.full((c,), 0.5, "float32"))

    def forward(self, x):
        return F.relu(self.fc(x)) * self.scale + x


class Nested(M.Module):
    """Custom sub-modules (nested TracedModules), a list of modules, a shared block called twice."""

    def __init__(self):
        super().__init__()
        self.stem = M.Linear(4, 6)
        self.blocks = [Block(6), Block(6)]
        self.head = M.Sequential(M.Linear(6, 6), M.ReLU(), M.Linear(6, 2))

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        x = self.blocks[0](x)
        return self.head(x)


class Misc(M.Module):
    """Shapes read while tracing, indexing and in-place writes, keyword inputs, dict outputs, a wrap()ped user
    function, a user module registered as builtin, layers with extra state (Dropout, LayerNorm, Embedding)."""

    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(2, 3, 3, padding=1)
        self.act = Act()
        self.drop = M.Dropout(0.3)
        self.ln = M.LayerNorm(3 * 4 * 4)
        self.emb = M.Embedding(10, 4)

    def forward(self, x, idx, *, scale=1.0):
        y = self.conv(x)
        y = y.reshape(y.shape[0], -1)
        y = self.ln(self.drop(y))
        z = y[:, 1:5] * scale
        z[:, 0] = 0.0
        w = F.nn.softmax(z, axis=1) + y.T.sum(0, keepdims=True).T[:, :1]
        e = self.emb(idx).sum(axis=-1)
        u = F.vision.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
        v = my_scale(u.mean(axis=(2, 3)), k=3.0)
        w = self.act(w)
        return {"w": w, "e": e, "v": v, "stack": F.stack([w[:, 0], e[:, 0]], axis=0), "max": F.max(w, axis=1)}


def save_misc():
    net = Misc()
    net.eval()
    x = rng.randn(2, 2, 4, 4).astype("float32")
    idx = np.array([[1, 2], [3, 9]], "int32")
    tm = trace_module(net, mge.Tensor(x), mge.Tensor(idx), scale=2.0)
    y = tm(mge.Tensor(x), mge.Tensor(idx), scale=2.0)
    mge.save(tm, os.path.join(HERE, "misc.tm"))
    np.savez(os.path.join(HERE, "misc.npz"), x=x, idx=idx, graph=np.array(str(tm.graph)),
             **{k: v.numpy() for k, v in y.items()})
    print(tm.graph)


def save(name, net, x, loss_index=0):
    tm = net if isinstance(net, TracedModule) else trace_module(net, mge.Tensor(x))
    y = tm(mge.Tensor(x))
    ys = [t.numpy() for t in (y if isinstance(y, (tuple, list)) else [y])]
    params = list(tm.parameters())
    g = np.zeros(())
    if params and not name.startswith("quantized"):
        gm = GradManager().attach(params)
        with gm:
            out = tm(mge.Tensor(x))
            out = out[loss_index] if isinstance(out, (tuple, list)) else out
            gm.backward((out ** 2).sum())
        g = params[0].grad.numpy()
    mge.save(tm, os.path.join(HERE, name + ".tm"))
    np.savez(os.path.join(HERE, name + ".npz"), x=x, g=g, graph=np.array(str(tm.graph)),
             **{f"y{i}": v for i, v in enumerate(ys)})
    print(name, os.path.getsize(os.path.join(HERE, name + ".tm")), "bytes")
    print(tm.graph)


class QNet(M.Module):
    def __init__(self):
        super().__init__()
        self.q = M.QuantStub()
        self.body = M.ConvBnRelu2d(3, 4, 3, padding=1)
        self.pool = M.AvgPool2d(2)
        self.fc = M.Linear(16, 2)
        self.dq = M.DequantStub()

    def forward(self, x):
        x = self.pool(self.body(self.q(x)))
        return self.dq(self.fc(F.flatten(x, 1)))


class QOps(M.Module):
    """Quantized Elemwise and Concat (megxla computes them in float between dequantize and quantize)."""

    def __init__(self, transpose=False):
        super().__init__()
        self.q = M.QuantStub()
        self.conv = M.ConvTranspose2d(3, 3, 1, bias=False) if transpose else M.Conv2d(3, 3, 1)
        self.add = M.Elemwise("add")
        self.cat = M.Concat()
        self.dq = M.DequantStub()

    def forward(self, x):
        x = self.q(x)
        y = self.conv(x)
        return self.dq(self.cat([self.add(x, y), y], axis=1))


class QBmm(M.Module):
    def __init__(self):
        super().__init__()
        self.q = M.QuantStub()
        self.bmm = M.BatchMatMulActivation(2, 3, 4, bias=True, nonlinear_mode="relu")
        self.dq = M.DequantStub()

    def forward(self, x):
        return self.dq(self.bmm(self.q(x)))


def quantized_ops(x):
    import megengine.quantization as Q
    for name, transpose in (("quantized_ops", False), ("quantized_transpose", True)):
        qat = Q.quantize_qat(trace_module(QOps(transpose), mge.Tensor(x)), qconfig=Q.ema_fakequant_qconfig)
        qat(mge.Tensor(x))
        qat.eval()
        q = Q.quantize(qat)
        q.eval()
        save(name, q, x)
    import megengine.quantization as Q
    xb = rng.randn(2, 3, 4).astype("float32")
    qat = Q.quantize_qat(trace_module(QBmm(), mge.Tensor(xb)), qconfig=Q.ema_fakequant_qconfig)
    qat(mge.Tensor(xb))
    qat.eval()
    q = Q.quantize(qat)
    q.eval()
    save("quantized_bmm", q, xb)


def quantized_models(x):
    """MegEngine's two QAT flows (quantize_qat of a traced float model; trace of a QAT model), and the
    quantized model of the first; observers updated by one training-mode call, then evaluation mode."""
    import megengine.quantization as Q
    tm = trace_module(QNet(), mge.Tensor(x))
    qat = Q.quantize_qat(tm, qconfig=Q.ema_fakequant_qconfig)
    qat(mge.Tensor(x))
    qat.eval()
    net = Q.quantize_qat(QNet(), qconfig=Q.ema_fakequant_qconfig)
    net(mge.Tensor(x))
    net.eval()
    traced_qat = trace_module(net, mge.Tensor(x))
    save("qat", qat, x)
    save("qat_traced", traced_qat, x)
    q = Q.quantize(qat)
    q.eval()
    save("quantized", q, x)


if __name__ == "__main__":
    save("mlp", MLP(), rng.randn(2, 4).astype("float32"))
    conv = ConvNet()
    sd = conv.state_dict()
    sd["bn.running_mean"] = rng.randn(1, 4, 1, 1).astype("float32")
    sd["bn.running_var"] = rng.rand(1, 4, 1, 1).astype("float32") + 0.5
    conv.load_state_dict(sd)
    conv.eval()
    save("convnet", conv, rng.randn(2, 3, 8, 8).astype("float32"))
    save("funcs", Funcs(), rng.randn(2, 3).astype("float32"))
    save("nested", Nested(), rng.randn(2, 4).astype("float32"))
    quantized_models(rng.randn(2, 3, 4, 4).astype("float32"))
    save_misc()
    quantized_ops(rng.randn(2, 3, 2, 2).astype("float32"))
