"""The benchmark workloads, three times over: megxla modules, hand-written pure-JAX functions and PyTorch modules.

Every workload is one training step (forward + loss + backward + optimizer update) in float32 on random data.
The three implementations compute the same model with the same initial weights: the pure-JAX parameters and the
PyTorch module are filled from a freshly built megxla model (same names; only bias/affine shapes differ), so
the first losses of all columns agree (``run.py`` records them as a sanity check).

Workloads (``WORKLOADS``):
    mlp            784-512-512-10, batch 128, SGD momentum 0.9
    convnet_b8     2x(Conv-BN-ReLU-AvgPool) + 3 Linear on 1x28x28, batch 8, AdamW
    convnet_b64    the same, batch 64
    resnet18       CIFAR-style ResNet-18 (3x3 stem, no max-pool), 3x32x32, batch 32, SGD momentum 0.9, wd 5e-4
    transformer    2-layer post-LN encoder, d_model 256, 4 heads, FFN 1024, seq 128, batch 16, vocab 1000
                   (token embedding + learned positions, per-token classifier), Adam
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim


# =============================================================================================================
# megxla models
# =============================================================================================================
class MLP(M.Module):
    def __init__(self, sizes=(784, 512, 512, 10)):
        super().__init__()
        self.fc0 = M.Linear(sizes[0], sizes[1])
        self.fc1 = M.Linear(sizes[1], sizes[2])
        self.fc2 = M.Linear(sizes[2], sizes[3])

    def forward(self, x):
        x = F.relu(self.fc0(x))
        x = F.relu(self.fc1(x))
        return self.fc2(x)


class ConvNet(M.Module):
    """The ConvNet of the jit tests: 2 x (Conv3x3-BN-ReLU-AvgPool2) then Linear 1568-128-64-10."""

    def __init__(self):
        super().__init__()
        self.conv0 = M.Conv2d(1, 16, 3, padding=1)
        self.bn0 = M.BatchNorm2d(16)
        self.conv1 = M.Conv2d(16, 32, 3, padding=1)
        self.bn1 = M.BatchNorm2d(32)
        self.pool = M.AvgPool2d(2)
        self.fc0 = M.Linear(32 * 7 * 7, 128)
        self.fc1 = M.Linear(128, 64)
        self.fc2 = M.Linear(64, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn0(self.conv0(x))))
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = F.flatten(x, 1)
        x = F.relu(self.fc0(x))
        x = F.relu(self.fc1(x))
        return self.fc2(x)


class BasicBlock(M.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = M.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = M.BatchNorm2d(cout)
        self.conv2 = M.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(cout)
        self.has_down = stride != 1 or cin != cout
        if self.has_down:
            self.down_conv = M.Conv2d(cin, cout, 1, stride=stride, bias=False)
            self.down_bn = M.BatchNorm2d(cout)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        sc = self.down_bn(self.down_conv(x)) if self.has_down else x
        return F.relu(y + sc)


RESNET_STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))


class ResNet18(M.Module):
    """CIFAR-style ResNet-18: 3x3 stem (stride 1, no max-pool), [2, 2, 2, 2] basic blocks, global average pool."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = M.Conv2d(3, 64, 3, padding=1, bias=False)
        self.bn1 = M.BatchNorm2d(64)
        cin = 64
        for i, (cout, stride) in enumerate(RESNET_STAGES):
            setattr(self, f"layer{i + 1}", M.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.fc = M.Linear(512, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = x.mean(axis=(2, 3))
        return self.fc(x)


class Bottleneck(M.Module):
    """ResNet-50's block: 1x1 reduce, 3x3 (stride), 1x1 expand (x4), projection shortcut where shapes change."""

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = M.Conv2d(cin, width, 1, bias=False), M.BatchNorm2d(width)
        self.conv2 = M.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(width)
        self.conv3, self.bn3 = M.Conv2d(width, cout, 1, bias=False), M.BatchNorm2d(cout)
        self.has_down = stride != 1 or cin != cout
        if self.has_down:
            self.down_conv = M.Conv2d(cin, cout, 1, stride=stride, bias=False)
            self.down_bn = M.BatchNorm2d(cout)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        sc = self.down_bn(self.down_conv(x)) if self.has_down else x
        return F.relu(y + sc)


class ReLU6(M.Module):
    def forward(self, x):
        return F.relu6(x)


class InvertedResidual(M.Module):
    """MobileNetV2's block (the model zoo's ``official/vision/classification/mobilenet``): 1x1 expand, 3x3
    depthwise (stride), 1x1 linear projection, ReLU6, residual where shapes allow."""

    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += [M.Conv2d(cin, hidden, 1, bias=False), M.BatchNorm2d(hidden), ReLU6()]
        layers += [M.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), M.BatchNorm2d(hidden),
                   ReLU6(), M.Conv2d(hidden, cout, 1, bias=False), M.BatchNorm2d(cout)]
        self.conv = M.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(M.Module):
    """The model zoo's MobileNetV2 (width 1.0, 224 px, 1000 classes)."""

    SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
               (6, 320, 1, 1))

    def __init__(self, num_classes=1000):
        super().__init__()
        layers = [M.Conv2d(3, 32, 3, 2, 1, bias=False), M.BatchNorm2d(32), ReLU6()]
        cin = 32
        for t, c, n, s in self.SETTING:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [M.Conv2d(cin, 1280, 1, bias=False), M.BatchNorm2d(1280), ReLU6()]
        self.features = M.Sequential(*layers)
        self.classifier = M.Sequential(M.Dropout(0.2), M.Linear(1280, num_classes))

    def forward(self, x):
        x = self.features(x)
        return self.classifier(F.flatten(F.avg_pool2d(x, 7), 1))


class _Act(M.Module):
    """An activation by name (``relu``, ``hswish``, ``silu``), as the zoo's MobileNetV3 / EfficientNet pick theirs."""

    def __init__(self, name):
        super().__init__()
        self.fn = {"relu": F.relu, "hswish": F.hswish, "silu": F.silu}[name]

    def forward(self, x):
        return self.fn(x)


class SqueezeExcite(M.Module):
    """Squeeze-and-excitation: global average, 1x1 reduce + activation, 1x1 expand + gate, channel scaling."""

    def __init__(self, channels, squeezed, act="relu", gate="sigmoid"):
        super().__init__()
        self.reduce = M.Conv2d(channels, squeezed, 1)
        self.expand = M.Conv2d(squeezed, channels, 1)
        self.act = _Act(act)
        self.gate = F.hsigmoid if gate == "hsigmoid" else F.sigmoid

    def forward(self, x):
        s = F.mean(x, axis=(2, 3), keepdims=True)
        return x * self.gate(self.expand(self.act(self.reduce(s))))


class MBConv(M.Module):
    """The inverted residual of MobileNetV3 / EfficientNet: 1x1 expand, kxk depthwise (stride), optional
    squeeze-excite, 1x1 linear projection; residual where shapes allow."""

    def __init__(self, cin, hidden, cout, kernel, stride, se, act, se_act="relu", se_gate="sigmoid", se_div=4):
        super().__init__()
        layers = []
        if hidden != cin:
            layers += [M.Conv2d(cin, hidden, 1, bias=False), M.BatchNorm2d(hidden), _Act(act)]
        layers += [M.Conv2d(hidden, hidden, kernel, stride, kernel // 2, groups=hidden, bias=False),
                   M.BatchNorm2d(hidden), _Act(act)]
        if se:
            layers.append(SqueezeExcite(hidden, max(8, se), se_act, se_gate))
        layers += [M.Conv2d(hidden, cout, 1, bias=False), M.BatchNorm2d(cout)]
        self.block = M.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class MobileNetV3Large(M.Module):
    """MobileNetV3-Large (224 px, 1000 classes): hard-swish, squeeze-excite with a hard-sigmoid gate."""

    # kernel, expanded channels, out channels, squeeze-excite, activation, stride
    SETTING = ((3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
               (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
               (3, 240, 80, False, "hswish", 2), (3, 200, 80, False, "hswish", 1), (3, 184, 80, False, "hswish", 1),
               (3, 184, 80, False, "hswish", 1), (3, 480, 112, True, "hswish", 1), (3, 672, 112, True, "hswish", 1),
               (5, 672, 160, True, "hswish", 2), (5, 960, 160, True, "hswish", 1), (5, 960, 160, True, "hswish", 1))

    def __init__(self, num_classes=1000):
        super().__init__()
        layers = [M.Conv2d(3, 16, 3, 2, 1, bias=False), M.BatchNorm2d(16), _Act("hswish")]
        cin = 16
        for k, exp, out, se, act, s in self.SETTING:
            layers.append(MBConv(cin, exp, out, k, s, exp // 4 if se else 0, act, "relu", "hsigmoid"))
            cin = out
        layers += [M.Conv2d(cin, 960, 1, bias=False), M.BatchNorm2d(960), _Act("hswish")]
        self.features = M.Sequential(*layers)
        self.classifier = M.Sequential(M.Linear(960, 1280), _Act("hswish"), M.Dropout(0.2),
                                       M.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(F.flatten(F.avg_pool2d(self.features(x), 7), 1))


class EfficientNetB0(M.Module):
    """EfficientNet-B0 (224 px, 1000 classes): MBConv blocks with SiLU and squeeze-excite (ratio 0.25 of the
    block's input channels)."""

    # expansion, out channels, repeats, stride, kernel
    SETTING = ((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3), (6, 112, 3, 1, 5),
               (6, 192, 4, 2, 5), (6, 320, 1, 1, 3))

    def __init__(self, num_classes=1000):
        super().__init__()
        layers = [M.Conv2d(3, 32, 3, 2, 1, bias=False), M.BatchNorm2d(32), _Act("silu")]
        cin = 32
        for t, c, n, s, k in self.SETTING:
            for i in range(n):
                layers.append(MBConv(cin, cin * t, c, k, s if i == 0 else 1, max(1, cin // 4), "silu", "silu"))
                cin = c
        layers += [M.Conv2d(cin, 1280, 1, bias=False), M.BatchNorm2d(1280), _Act("silu")]
        self.features = M.Sequential(*layers)
        self.classifier = M.Sequential(M.Dropout(0.2), M.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(F.flatten(F.avg_pool2d(self.features(x), 7), 1))


RESNET50_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))


class ResNet50(M.Module):
    """ImageNet ResNet-50: 7x7/2 stem, 3x3/2 max-pool, [3, 4, 6, 3] bottlenecks, global average pool, 1000 classes."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = M.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = M.BatchNorm2d(64)
        cin = 64
        for i, (width, blocks, stride) in enumerate(RESNET50_STAGES):
            layers = [Bottleneck(cin, width, stride)] + [Bottleneck(width * 4, width, 1) for _ in range(blocks - 1)]
            setattr(self, f"layer{i + 1}", M.Sequential(*layers))
            cin = width * 4
        self.fc = M.Linear(cin, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = x.mean(axis=(2, 3))
        return self.fc(x)


class SelfAttention(M.Module):
    """Multi-head self-attention written by hand with F.matmul / F.softmax."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.q = M.Linear(d_model, d_model)
        self.k = M.Linear(d_model, d_model)
        self.v = M.Linear(d_model, d_model)
        self.o = M.Linear(d_model, d_model)

    def forward(self, x):
        b, s, d = x.shape
        h = self.heads

        def split(t):  # (B, S, D) -> (B, H, S, Dh)
            return F.transpose(F.reshape(t, (b, s, h, d // h)), (0, 2, 1, 3))

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = F.softmax(F.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(d // h)), axis=-1)
        y = F.reshape(F.transpose(F.matmul(att, v), (0, 2, 1, 3)), (b, s, d))
        return self.o(y)


class EncoderLayer(M.Module):
    """Post-LN encoder layer (as ``nn.TransformerEncoderLayer``'s default, without dropout)."""

    def __init__(self, d_model, heads, ffn):
        super().__init__()
        self.attn = SelfAttention(d_model, heads)
        self.ln1 = M.LayerNorm(d_model)
        self.ff1 = M.Linear(d_model, ffn)
        self.ff2 = M.Linear(ffn, d_model)
        self.ln2 = M.LayerNorm(d_model)

    def forward(self, x):
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ff2(F.relu(self.ff1(x))))


class Transformer(M.Module):
    def __init__(self, vocab=1000, d_model=256, heads=4, ffn=1024, layers=2, seq=128):
        super().__init__()
        self.embed = M.Embedding(vocab, d_model)
        self.pos = mge.Parameter(np.random.RandomState(1).normal(0, 0.02, (seq, d_model)).astype("float32"))
        self.layer0 = EncoderLayer(d_model, heads, ffn)
        self.layer1 = EncoderLayer(d_model, heads, ffn)
        self.head = M.Linear(d_model, vocab)
        self.vocab = vocab

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos
        x = self.layer1(self.layer0(x))
        logits = self.head(x)  # (B, S, V)
        return F.reshape(logits, (-1, self.vocab))


# =============================================================================================================
# pure JAX: the same models as functions of a ``{megxla parameter name: array}`` dict
# =============================================================================================================
def _jax():
    import jax
    import jax.numpy as jnp
    from jax import lax
    return jax, jnp, lax


def j_linear(p, name, x):
    return x @ p[name + ".weight"].T + p[name + ".bias"]


def j_conv(p, name, x, stride=1, padding=0, bias=True):
    _, _, lax = _jax()
    y = lax.conv_general_dilated(x, p[name + ".weight"], (stride, stride), [(padding, padding)] * 2,
                                 dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return y + p[name + ".bias"] if bias else y


def j_bn(p, b, nb, name, x, momentum=0.9, eps=1e-5):
    """Training-mode BatchNorm2d; the new running statistics go into ``nb`` (MegEngine's update rule)."""
    _, jnp, lax = _jax()
    mean = jnp.mean(x, axis=(0, 2, 3), keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=(0, 2, 3), keepdims=True)
    y = (x - mean) * lax.rsqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]
    n = x.size // x.shape[1]
    nb[name + ".running_mean"] = b[name + ".running_mean"] * momentum + mean * (1 - momentum)
    nb[name + ".running_var"] = b[name + ".running_var"] * momentum + var * ((1 - momentum) * n / (n - 1))
    return y


def j_avgpool2(x):
    _, jnp, lax = _jax()
    # NOTE: a Python-scalar init value: JAX then uses reduce_window_sum, which has an autodiff rule (a traced
    # init value falls back to the generic reduce_window, which has none).
    return lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID") * 0.25


def j_layer_norm(p, name, x, eps=1e-5):
    _, jnp, lax = _jax()
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]


def j_cross_entropy(logits, labels):
    jax, jnp, _ = _jax()
    logp = jax.nn.log_softmax(logits, axis=1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def jax_mlp(p, b, x):
    jax, _, _ = _jax()
    x = jax.nn.relu(j_linear(p, "fc0", x))
    x = jax.nn.relu(j_linear(p, "fc1", x))
    return j_linear(p, "fc2", x), {}


def jax_convnet(p, b, x):
    jax, _, _ = _jax()
    nb = {}
    x = j_avgpool2(jax.nn.relu(j_bn(p, b, nb, "bn0", j_conv(p, "conv0", x, padding=1))))
    x = j_avgpool2(jax.nn.relu(j_bn(p, b, nb, "bn1", j_conv(p, "conv1", x, padding=1))))
    x = x.reshape(x.shape[0], -1)
    x = jax.nn.relu(j_linear(p, "fc0", x))
    x = jax.nn.relu(j_linear(p, "fc1", x))
    return j_linear(p, "fc2", x), nb


def jax_resnet18(p, b, x):
    jax, jnp, _ = _jax()
    nb = {}
    x = jax.nn.relu(j_bn(p, b, nb, "bn1", j_conv(p, "conv1", x, padding=1, bias=False)))
    cin = 64
    for i, (cout, stride) in enumerate(RESNET_STAGES):
        for j, s in enumerate((stride, 1)):
            pre = f"layer{i + 1}.{j}."
            y = jax.nn.relu(j_bn(p, b, nb, pre + "bn1", j_conv(p, pre + "conv1", x, s, 1, bias=False)))
            y = j_bn(p, b, nb, pre + "bn2", j_conv(p, pre + "conv2", y, 1, 1, bias=False))
            if s != 1 or cin != cout:
                x = j_bn(p, b, nb, pre + "down_bn", j_conv(p, pre + "down_conv", x, s, 0, bias=False))
            x = jax.nn.relu(y + x)
            cin = cout
    return j_linear(p, "fc", jnp.mean(x, axis=(2, 3))), nb


def j_maxpool3s2(x):
    _, jnp, lax = _jax()
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), [(0, 0), (0, 0), (1, 1), (1, 1)])


def jax_resnet50(p, b, x):
    jax, jnp, _ = _jax()
    nb = {}
    x = j_maxpool3s2(jax.nn.relu(j_bn(p, b, nb, "bn1", j_conv(p, "conv1", x, 2, 3, bias=False))))
    cin = 64
    for i, (width, blocks, stride) in enumerate(RESNET50_STAGES):
        for j in range(blocks):
            s = stride if j == 0 else 1
            pre = f"layer{i + 1}.{j}."
            y = jax.nn.relu(j_bn(p, b, nb, pre + "bn1", j_conv(p, pre + "conv1", x, 1, 0, bias=False)))
            y = jax.nn.relu(j_bn(p, b, nb, pre + "bn2", j_conv(p, pre + "conv2", y, s, 1, bias=False)))
            y = j_bn(p, b, nb, pre + "bn3", j_conv(p, pre + "conv3", y, 1, 0, bias=False))
            if s != 1 or cin != width * 4:
                x = j_bn(p, b, nb, pre + "down_bn", j_conv(p, pre + "down_conv", x, s, 0, bias=False))
            x = jax.nn.relu(y + x)
            cin = width * 4
    return j_linear(p, "fc", jnp.mean(x, axis=(2, 3))), nb


def jax_transformer(p, b, tokens, heads=4):
    jax, jnp, _ = _jax()
    x = jnp.take(p["embed.weight"], tokens, axis=0) + p["pos"]
    bsz, s, d = x.shape
    for layer in ("layer0", "layer1"):
        def split(t):
            return t.reshape(bsz, s, heads, d // heads).transpose(0, 2, 1, 3)
        q, k, v = (split(j_linear(p, f"{layer}.attn.{n}", x)) for n in "qkv")
        att = jax.nn.softmax(jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(d // heads)), axis=-1)
        y = jnp.matmul(att, v).transpose(0, 2, 1, 3).reshape(bsz, s, d)
        x = j_layer_norm(p, f"{layer}.ln1", x + j_linear(p, f"{layer}.attn.o", y))
        h = j_linear(p, f"{layer}.ff2", jax.nn.relu(j_linear(p, f"{layer}.ff1", x)))
        x = j_layer_norm(p, f"{layer}.ln2", x + h)
    logits = j_linear(p, "head", x)
    return logits.reshape(-1, logits.shape[-1]), {}


# ---- optimizers as pure functions (MegEngine 1.13's formulas) ----------------------------------------------
def jax_sgd(lr, momentum, weight_decay=0.0):
    jax, jnp, _ = _jax()

    def init(params):
        return {k: jnp.zeros_like(v) for k, v in params.items()}

    def update(params, grads, bufs):
        new_p, new_b = {}, {}
        for k in params:
            g = grads[k] + params[k] * weight_decay if weight_decay else grads[k]
            v = bufs[k] * momentum + g
            new_b[k] = v
            new_p[k] = params[k] - lr * v
        return new_p, new_b

    return init, update


def jax_adam(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    """Adam (L2 added to the gradient) or, with ``decoupled``, AdamW (``p -= lr * (delta + wd * p)``)."""
    jax, jnp, _ = _jax()
    b0, b1 = betas

    def init(params):
        return {"step": jnp.zeros((), jnp.float32), "m": {k: jnp.zeros_like(v) for k, v in params.items()},
                "v": {k: jnp.zeros_like(v) for k, v in params.items()}}

    def update(params, grads, st):
        step = st["step"] + 1.0
        c0, c1 = 1.0 - b0 ** step, 1.0 - b1 ** step
        new_p, new_m, new_v = {}, {}, {}
        for k, p in params.items():
            g = grads[k]
            if weight_decay and not decoupled:
                g = g + p * weight_decay
            m = st["m"][k] * b0 + g * (1.0 - b0)
            v = st["v"][k] * b1 + (1.0 - b1) * (g * g)
            delta = (m / c0) / (jnp.sqrt(v / c1) + eps)
            if weight_decay and decoupled:
                delta = delta + p * weight_decay
            new_p[k], new_m[k], new_v[k] = p - lr * delta, m, v
        return new_p, {"step": step, "m": new_m, "v": new_v}

    return init, update


# =============================================================================================================
# PyTorch: the same models (same attribute names, so weights load by name)
# =============================================================================================================
def torch_models():
    """Return ``{workload kind: torch module class}``; imported lazily (PyTorch is optional)."""
    import torch
    import torch.nn as tnn
    import torch.nn.functional as tF

    class TMLP(tnn.Module):
        def __init__(self):
            super().__init__()
            self.fc0, self.fc1, self.fc2 = tnn.Linear(784, 512), tnn.Linear(512, 512), tnn.Linear(512, 10)

        def forward(self, x):
            return self.fc2(tF.relu(self.fc1(tF.relu(self.fc0(x)))))

    class TConvNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv0, self.bn0 = tnn.Conv2d(1, 16, 3, padding=1), tnn.BatchNorm2d(16)
            self.conv1, self.bn1 = tnn.Conv2d(16, 32, 3, padding=1), tnn.BatchNorm2d(32)
            self.fc0, self.fc1, self.fc2 = tnn.Linear(32 * 7 * 7, 128), tnn.Linear(128, 64), tnn.Linear(64, 10)

        def forward(self, x):
            x = tF.avg_pool2d(tF.relu(self.bn0(self.conv0(x))), 2)
            x = tF.avg_pool2d(tF.relu(self.bn1(self.conv1(x))), 2)
            x = torch.flatten(x, 1)
            return self.fc2(tF.relu(self.fc1(tF.relu(self.fc0(x)))))

    class TBlock(tnn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = tnn.BatchNorm2d(cout)
            self.conv2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = tnn.BatchNorm2d(cout)
            self.has_down = stride != 1 or cin != cout
            if self.has_down:
                self.down_conv = tnn.Conv2d(cin, cout, 1, stride, bias=False)
                self.down_bn = tnn.BatchNorm2d(cout)

        def forward(self, x):
            y = tF.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            sc = self.down_bn(self.down_conv(x)) if self.has_down else x
            return tF.relu(y + sc)

    class TResNet18(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = tnn.Conv2d(3, 64, 3, 1, 1, bias=False), tnn.BatchNorm2d(64)
            cin = 64
            for i, (cout, stride) in enumerate(RESNET_STAGES):
                setattr(self, f"layer{i + 1}", tnn.Sequential(TBlock(cin, cout, stride), TBlock(cout, cout, 1)))
                cin = cout
            self.fc = tnn.Linear(512, 10)

        def forward(self, x):
            x = tF.relu(self.bn1(self.conv1(x)))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(x.mean(dim=(2, 3)))

    class TBottleneck(tnn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.conv1, self.bn1 = tnn.Conv2d(cin, width, 1, bias=False), tnn.BatchNorm2d(width)
            self.conv2, self.bn2 = tnn.Conv2d(width, width, 3, stride, 1, bias=False), tnn.BatchNorm2d(width)
            self.conv3, self.bn3 = tnn.Conv2d(width, cout, 1, bias=False), tnn.BatchNorm2d(cout)
            self.has_down = stride != 1 or cin != cout
            if self.has_down:
                self.down_conv = tnn.Conv2d(cin, cout, 1, stride, bias=False)
                self.down_bn = tnn.BatchNorm2d(cout)

        def forward(self, x):
            y = tF.relu(self.bn1(self.conv1(x)))
            y = tF.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            sc = self.down_bn(self.down_conv(x)) if self.has_down else x
            return tF.relu(y + sc)

    class TResNet50(tnn.Module):
        def __init__(self, num_classes=1000):
            super().__init__()
            self.conv1, self.bn1 = tnn.Conv2d(3, 64, 7, 2, 3, bias=False), tnn.BatchNorm2d(64)
            cin = 64
            for i, (width, blocks, stride) in enumerate(RESNET50_STAGES):
                layers = [TBottleneck(cin, width, stride)] + [TBottleneck(width * 4, width, 1)
                                                             for _ in range(blocks - 1)]
                setattr(self, f"layer{i + 1}", tnn.Sequential(*layers))
                cin = width * 4
            self.fc = tnn.Linear(cin, num_classes)

        def forward(self, x):
            x = tF.max_pool2d(tF.relu(self.bn1(self.conv1(x))), 3, 2, 1)
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(x.mean(dim=(2, 3)))

    class TAttention(tnn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.q, self.k, self.v, self.o = (tnn.Linear(d, d) for _ in range(4))

        def forward(self, x):
            b, s, d = x.shape
            h = self.heads

            def split(t):
                return t.reshape(b, s, h, d // h).transpose(1, 2)

            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            att = torch.softmax(q @ k.transpose(-1, -2) * (1.0 / math.sqrt(d // h)), dim=-1)
            return self.o((att @ v).transpose(1, 2).reshape(b, s, d))

    class TEncoderLayer(tnn.Module):
        def __init__(self, d, heads, ffn):
            super().__init__()
            self.attn = TAttention(d, heads)
            self.ln1, self.ln2 = tnn.LayerNorm(d), tnn.LayerNorm(d)
            self.ff1, self.ff2 = tnn.Linear(d, ffn), tnn.Linear(ffn, d)

        def forward(self, x):
            x = self.ln1(x + self.attn(x))
            return self.ln2(x + self.ff2(tF.relu(self.ff1(x))))

    class TTransformer(tnn.Module):
        def __init__(self, vocab=1000, d=256, heads=4, ffn=1024, seq=128):
            super().__init__()
            self.embed = tnn.Embedding(vocab, d)
            self.pos = tnn.Parameter(torch.zeros(seq, d))
            self.layer0, self.layer1 = TEncoderLayer(d, heads, ffn), TEncoderLayer(d, heads, ffn)
            self.head = tnn.Linear(d, vocab)
            self.vocab = vocab

        def forward(self, tokens):
            x = self.layer1(self.layer0(self.embed(tokens) + self.pos))
            return self.head(x).reshape(-1, self.vocab)

    return {"mlp": TMLP, "convnet": TConvNet, "resnet18": TResNet18, "resnet50": TResNet50,
            "transformer": TTransformer}


def load_into_torch(tmodel, named_arrays):
    """Copy ``{megxla name: np.ndarray}`` (parameters and BN buffers) into a torch module with the same names."""
    import torch
    sd = tmodel.state_dict()
    new = {}
    for k, v in sd.items():
        if k.endswith("num_batches_tracked"):
            new[k] = v
            continue
        src = named_arrays[k]
        new[k] = torch.from_numpy(np.ascontiguousarray(src).reshape(tuple(v.shape)).copy())
    tmodel.load_state_dict(new)
    return tmodel


# =============================================================================================================
# workload table
# =============================================================================================================
@dataclass
class Workload:
    name: str
    kind: str  # model family: mlp / convnet / resnet18 / transformer
    batch: int
    build: Callable  # () -> megxla Module
    make_optimizer: Callable  # params -> megxla optimizer
    jax_forward: Callable  # (params, buffers, x) -> (logits, new buffers)
    jax_optimizer: Callable  # () -> (init, update)
    torch_optimizer: Callable  # (torch, params) -> torch optimizer
    inputs: Callable  # (rng) -> (x np.ndarray, labels np.ndarray int32)
    small: bool = False  # included in --quick
    max_steps: Optional[int] = None  # cap on the default number of timed steps (slow workloads)
    max_warmup: Optional[int] = None  # cap on the default number of untimed warm-up calls
    notes: str = ""
    extra: dict = field(default_factory=dict)
    gpu: bool = False  # GPU-sized: run by ``run.py --device gpu`` (by default only there)
    amp: bool = False  # forward and loss under ``amp.autocast`` / ``torch.autocast`` (float16)
    skip: tuple = ()  # columns without an implementation for this workload


def _images(shape, classes=10):
    def make(rng):
        return rng.standard_normal(shape).astype("float32"), rng.randint(0, classes, shape[0]).astype("int32")
    return make


def _tokens(batch, seq, vocab):
    def make(rng):
        return (rng.randint(0, vocab, (batch, seq)).astype("int32"),
                rng.randint(0, vocab, batch * seq).astype("int32"))
    return make


def _convnet(batch, small):
    return Workload(
        name=f"convnet_b{batch}", kind="convnet", batch=batch, build=ConvNet,
        make_optimizer=lambda ps: optim.AdamW(ps, lr=1e-3, weight_decay=1e-2),
        jax_forward=jax_convnet, jax_optimizer=lambda: jax_adam(1e-3, weight_decay=1e-2, decoupled=True),
        torch_optimizer=lambda torch, ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=1e-2),
        inputs=_images((batch, 1, 28, 28)), small=small,
        notes=f"Conv-BN-ReLU-AvgPool x2 + MLP head, 1x28x28, batch {batch}, AdamW(lr 1e-3, wd 1e-2)")


def _gpu_workloads(amp):
    """The GPU-sized workloads (issue 13): ResNet-18 b256, Transformer b64, ResNet-50 224px b64; ``_amp`` variants
    run forward and loss under autocast (float16; the hand-written jax.jit step has no amp form)."""
    sfx, skip = ("_amp", ("jax_jit",)) if amp else ("", ())
    note = "; forward + loss under autocast (float16)" if amp else ""
    return [
        Workload(
            name="resnet18_b256" + sfx, kind="resnet18", batch=256, build=ResNet18,
            make_optimizer=lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=5e-4),
            jax_forward=jax_resnet18, jax_optimizer=lambda: jax_sgd(0.05, 0.9, 5e-4),
            torch_optimizer=lambda torch, ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=5e-4),
            inputs=_images((256, 3, 32, 32)), gpu=True, amp=amp, skip=skip,
            notes="CIFAR ResNet-18, 3x32x32, batch 256, SGD(lr 0.05, momentum 0.9, wd 5e-4)" + note),
        Workload(
            name="transformer_b64" + sfx, kind="transformer", batch=64, build=Transformer,
            make_optimizer=lambda ps: optim.Adam(ps, lr=1e-3),
            jax_forward=jax_transformer, jax_optimizer=lambda: jax_adam(1e-3),
            torch_optimizer=lambda torch, ps: torch.optim.Adam(ps, lr=1e-3),
            inputs=_tokens(64, 128, 1000), gpu=True, amp=amp, skip=skip,
            notes="the 2-layer Transformer at batch 64, Adam(lr 1e-3)" + note),
        Workload(
            name="resnet50_b64" + sfx, kind="resnet50", batch=64, build=ResNet50,
            make_optimizer=lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-4),
            jax_forward=jax_resnet50, jax_optimizer=lambda: jax_sgd(0.1, 0.9, 1e-4),
            torch_optimizer=lambda torch, ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-4),
            inputs=_images((64, 3, 224, 224), classes=1000), gpu=True, amp=amp, skip=skip,
            notes="ImageNet ResNet-50, 3x224x224, batch 64, SGD(lr 0.1, momentum 0.9, wd 1e-4)" + note),
    ]


WORKLOADS = {w.name: w for w in [
    Workload(
        name="mlp", kind="mlp", batch=128, build=MLP,
        make_optimizer=lambda ps: optim.SGD(ps, lr=0.01, momentum=0.9),
        jax_forward=jax_mlp, jax_optimizer=lambda: jax_sgd(0.01, 0.9),
        torch_optimizer=lambda torch, ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9),
        inputs=_images((128, 784)), small=True, notes="784-512-512-10, batch 128, SGD(lr 0.01, momentum 0.9)"),
    _convnet(8, True),
    _convnet(64, False),
    Workload(
        name="resnet18", kind="resnet18", batch=32, build=ResNet18,
        make_optimizer=lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=5e-4),
        jax_forward=jax_resnet18, jax_optimizer=lambda: jax_sgd(0.05, 0.9, 5e-4),
        torch_optimizer=lambda torch, ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=5e-4),
        inputs=_images((32, 3, 32, 32)), max_steps=10, max_warmup=1,
        notes="CIFAR ResNet-18 (3x3 stem), 3x32x32, batch 32, SGD(lr 0.05, momentum 0.9, wd 5e-4)"),
    Workload(
        name="transformer", kind="transformer", batch=16, build=Transformer,
        make_optimizer=lambda ps: optim.Adam(ps, lr=1e-3),
        jax_forward=jax_transformer, jax_optimizer=lambda: jax_adam(1e-3),
        torch_optimizer=lambda torch, ps: torch.optim.Adam(ps, lr=1e-3),
        inputs=_tokens(16, 128, 1000), max_warmup=2,
        notes="2-layer post-LN encoder, d 256, 4 heads, FFN 1024, seq 128, batch 16, vocab 1000, Adam(lr 1e-3)"),
] + [w for amp in (False, True) for w in _gpu_workloads(amp)]}
