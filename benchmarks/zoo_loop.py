"""The model zoo's small-op models trained by eager loops (``loss.item()`` every step): eager vs auto-jit vs the same
step under ``xla_trace``.

    python benchmarks/zoo_loop.py                          # all five, ~6 min on 2 cores
    python benchmarks/zoo_loop.py --only bert_tiny,dcgan --blocks 10

Issue 30 measured these models losing eagerly on a CPU -- eager against ``xla_trace``: BERT-tiny 4x, EfficientNet-B0
2.7x, DCGAN 2x, RegNetX-200MF and MobileNetV3 1.6x -- because each of their many small ops is dispatched on its own.
``eager_loop.py`` holds the benchmark suite's own loops; these are the zoo's model families at shapes a 2-core
machine trains in milliseconds to a second a step:

* ``bert_tiny``: the zoo's BERT layout -- token, position and segment embeddings, post-LN encoder layers with one
  QKV projection, GELU, dropout, an attention mask built from the padding -- 2 layers, d 128, 2 heads, FFN 512, seq
  32, batch 8, vocab 1000; masked-LM + next-sentence losses; AdamW.
* ``dcgan``: the zoo's DCGAN step -- the discriminator on real and (detached) fake images, then the generator
  through it; two GradManagers, two Adam optimizers, BatchNorm in both; 32 px, batch 16.
* ``mobilenetv3``, ``efficientnet_b0``: ``models.py``'s MobileNetV3-Large / EfficientNet-B0 (hard-swish / SiLU,
  squeeze-excite, depthwise convolutions) on 64 px images, batch 8, 100 classes (global average pooling in place of
  the 224 px models' 7x7 one); SGD with momentum and weight decay.
* ``regnetx_200mf``: RegNetX-200MF (group convolutions of width 8, widths 24-56-152-368, depths 1-1-4-7) on 64 px,
  batch 8.

The three modes take turns in one process, in blocks of ``--steps`` steps (their order rotating from block to
block; the first two blocks and each block's first step left out): on a machine whose speed drifts between
processes, the ratios then compare the same minutes. Each mode trains its own copy of the model. Then each mode's
first ``--check`` steps run again in fresh processes from the same seed: eager and auto-jit must give the same
losses (their relative difference at the first step and the largest over the ``--check`` steps are printed;
``xla_trace`` draws its dropout masks from its own seed, as MegEngine's traced steps do, so only eager and auto-jit
are compared). A network whose training amplifies rounding -- the RegNet here: 1e-6 on its initial weights moves
its second loss by 2.4%, eagerly -- shows XLA's fusion rounding (1e-6) at the first step and percents a few steps
later, as two eager runs on two machines would.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import megxla as mge  # noqa: E402
import megxla.functional as F  # noqa: E402
import megxla.module as M  # noqa: E402
import megxla.optimizer as optim  # noqa: E402
from megxla.autodiff import GradManager  # noqa: E402
from megxla.jit import xla_trace  # noqa: E402

import models  # noqa: E402
from eager_loop import child_record, loop_step as image_step  # noqa: E402  (the suite's step and runner)

MODES = ("eager", "auto_jit", "xla_trace")
WORKLOADS = ("bert_tiny", "dcgan", "mobilenetv3", "efficientnet_b0", "regnetx_200mf")


# ---- models -----------------------------------------------------------------------------------------------------
class BertLayer(M.Module):
    """A post-LN encoder layer as the zoo's BERT writes it: one QKV projection split in three, the additive mask."""

    def __init__(self, d, heads, ffn, drop=0.1):
        super().__init__()
        self.heads = heads
        self.qkv = M.Linear(d, 3 * d)
        self.o = M.Linear(d, d)
        self.ln1 = M.LayerNorm(d)
        self.ff1 = M.Linear(d, ffn)
        self.ff2 = M.Linear(ffn, d)
        self.ln2 = M.LayerNorm(d)
        self.drop = M.Dropout(drop)

    def forward(self, x, mask):
        b, s, d = x.shape
        h = self.heads

        def heads(t):  # (B, S, D) -> (B, H, S, D/H)
            return t.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)

        q, k, v = F.split(self.qkv(x), 3, axis=-1)
        att = F.matmul(heads(q), heads(k), transpose_b=True) / math.sqrt(d // h) + mask
        y = F.matmul(self.drop(F.softmax(att, -1)), heads(v)).transpose(0, 2, 1, 3).reshape(b, s, d)
        x = self.ln1(x + self.drop(self.o(y)))
        return self.ln2(x + self.drop(self.ff2(F.gelu(self.ff1(x)))))


class BertTiny(M.Module):
    """BERT-tiny: embeddings (token, position, segment) + LayerNorm, encoder layers, a masked-LM head and the
    next-sentence classifier on the first token."""

    def __init__(self, vocab=1000, d=128, heads=2, ffn=512, layers=2, seq=32):
        super().__init__()
        self.tok = M.Embedding(vocab, d)
        self.pos = M.Embedding(seq, d)
        self.typ = M.Embedding(2, d)
        self.ln = M.LayerNorm(d)
        self.layers = [BertLayer(d, heads, ffn) for _ in range(layers)]
        self.mlm = M.Linear(d, vocab)
        self.nsp = M.Linear(d, 2)

    def forward(self, ids, types, attn):
        x = self.ln(self.tok(ids) + self.pos(F.arange(ids.shape[1], dtype="int32")) + self.typ(types))
        mask = (1.0 - F.expand_dims(attn.astype("float32"), (1, 2))) * -10000.0  # (the zoo's additive padding mask)
        for layer in self.layers:
            x = layer(x, mask)
        return self.mlm(x), self.nsp(x[:, 0])


def bert_step(model, opt, gm, ids, types, attn, labels, nsp):
    with gm:
        mlm, cls = model(ids, types, attn)
        loss = F.nn.cross_entropy(mlm.reshape(-1, mlm.shape[-1]), labels.reshape(-1)) + F.nn.cross_entropy(cls, nsp)
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


class Generator(M.Module):
    """DCGAN's generator: a linear map to 4x4, then transposed convolutions with BatchNorm + ReLU up to 32x32, tanh."""

    def __init__(self, z=64, c=16):
        super().__init__()
        self.c = c
        self.fc = M.Linear(z, c * 2 * 4 * 4)
        self.net = M.Sequential(M.BatchNorm2d(c * 2), M.ReLU(),
                                M.ConvTranspose2d(c * 2, c, 4, 2, 1), M.BatchNorm2d(c), M.ReLU(),
                                M.ConvTranspose2d(c, c // 2, 4, 2, 1), M.BatchNorm2d(c // 2), M.ReLU(),
                                M.ConvTranspose2d(c // 2, 3, 4, 2, 1))

    def forward(self, z):
        return F.tanh(self.net(self.fc(z).reshape(z.shape[0], self.c * 2, 4, 4)))


class Discriminator(M.Module):
    """DCGAN's discriminator: strided convolutions with BatchNorm + LeakyReLU, a linear logit."""

    def __init__(self, c=16):
        super().__init__()
        self.net = M.Sequential(M.Conv2d(3, c // 2, 4, 2, 1), M.LeakyReLU(0.2),
                                M.Conv2d(c // 2, c, 4, 2, 1), M.BatchNorm2d(c), M.LeakyReLU(0.2),
                                M.Conv2d(c, c * 2, 4, 2, 1), M.BatchNorm2d(c * 2), M.LeakyReLU(0.2))
        self.fc = M.Linear(c * 2 * 4 * 4, 1)

    def forward(self, x):
        return self.fc(F.flatten(self.net(x), 1))


def dcgan_step(nets, opts, gms, real, z):
    """The discriminator's update on real and detached fake images, then the generator's through it."""
    g, d = nets
    opt_g, opt_d = opts
    gm_g, gm_d = gms
    ones, zeros = F.ones((real.shape[0], 1)), F.zeros((real.shape[0], 1))
    with gm_d:
        fake = g(z).detach()
        loss_d = F.nn.binary_cross_entropy(d(real), ones, with_logits=True) + \
            F.nn.binary_cross_entropy(d(fake), zeros, with_logits=True)
        gm_d.backward(loss_d)
    opt_d.step().clear_grad()
    with gm_g:
        loss_g = F.nn.binary_cross_entropy(d(g(z)), ones, with_logits=True)
        gm_g.backward(loss_g)
    opt_g.step().clear_grad()
    return loss_d + loss_g


class XBlock(M.Module):
    """RegNetX's block: 1x1, 3x3 group convolution (groups of ``group_width`` channels, the stride), 1x1; BatchNorm
    after each, ReLU after the first two and the sum; a projected shortcut where the shape changes."""

    def __init__(self, cin, cout, stride, group_width=8):
        super().__init__()
        self.body = M.Sequential(M.Conv2d(cin, cout, 1, bias=False), M.BatchNorm2d(cout), M.ReLU(),
                                 M.Conv2d(cout, cout, 3, stride, 1, groups=cout // group_width, bias=False),
                                 M.BatchNorm2d(cout), M.ReLU(),
                                 M.Conv2d(cout, cout, 1, bias=False), M.BatchNorm2d(cout))
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = M.Sequential(M.Conv2d(cin, cout, 1, stride, bias=False), M.BatchNorm2d(cout))

    def forward(self, x):
        return F.relu(self.body(x) + (x if self.proj is None else self.proj(x)))


class RegNetX200MF(M.Module):
    """RegNetX-200MF: a 32-channel stem, four stages (widths 24, 56, 152, 368; depths 1, 1, 4, 7), each starting
    with stride 2; global average pooling and a linear classifier."""

    STAGES = ((24, 1), (56, 1), (152, 4), (368, 7))

    def __init__(self, num_classes=100):
        super().__init__()
        layers = [M.Conv2d(3, 32, 3, 2, 1, bias=False), M.BatchNorm2d(32), M.ReLU()]
        cin = 32
        for width, depth in self.STAGES:
            for i in range(depth):
                layers.append(XBlock(cin, width, 2 if i == 0 else 1))
                cin = width
        self.features = M.Sequential(*layers)
        self.fc = M.Linear(cin, num_classes)

    def forward(self, x):
        return self.fc(F.mean(self.features(x), axis=(2, 3)))


class PooledClassifier(M.Module):
    """``models.py``'s 224 px MobileNetV3 / EfficientNet on smaller images: global average pooling for the 7x7 one."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net.classifier(F.mean(self.net.features(x), axis=(2, 3)))


# ---- workloads ----------------------------------------------------------------------------------------------------
def setup(name, seed=0, batches=8):
    """``(state, step, data)``: the step's first three arguments (models, optimizers, GradManagers), the step
    function, and ``batches`` host batches (tuples of arrays: the step's other arguments)."""
    mge.random.seed(seed)
    rng = np.random.RandomState(1)
    if name == "bert_tiny":
        net = BertTiny()
        opt = optim.AdamW(net.parameters(), lr=1e-4, weight_decay=0.01)
        data = []
        for _ in range(batches):
            attn = np.ones((8, 32), "int32")
            attn[:, 24:] = rng.randint(0, 2, (8, 1))  # (some sequences padded to the length)
            data.append((rng.randint(0, 1000, (8, 32)).astype("int32"), rng.randint(0, 2, (8, 32)).astype("int32"),
                         attn, rng.randint(0, 1000, (8, 32)).astype("int32"), rng.randint(0, 2, 8).astype("int32")))
        return (net, opt, GradManager().attach(net.parameters())), bert_step, data
    if name == "dcgan":
        g, d = Generator(), Discriminator()
        opts = (optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999)),
                optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999)))
        gms = (GradManager().attach(g.parameters()), GradManager().attach(d.parameters()))
        data = [(rng.uniform(-1, 1, (16, 3, 32, 32)).astype("float32"), rng.randn(16, 64).astype("float32"))
                for _ in range(batches)]
        return ((g, d), opts, gms), dcgan_step, data
    if name in ("mobilenetv3", "efficientnet_b0", "regnetx_200mf"):
        net = RegNetX200MF() if name == "regnetx_200mf" else PooledClassifier(
            models.MobileNetV3Large(100) if name == "mobilenetv3" else models.EfficientNetB0(100))
        opt = optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        data = [(rng.randn(8, 3, 64, 64).astype("float32"), rng.randint(0, 100, 8).astype("int32"))
                for _ in range(batches)]
        return (net, opt, GradManager().attach(net.parameters())), image_step, data
    raise ValueError(f"unknown workload {name!r} (one of {', '.join(WORKLOADS)})")


def stepper(mode, step, state):
    """``run(*host arrays) -> loss`` in ``mode``: the step on Tensors made from the batch, under ``xla_trace`` (the
    models and optimizers its arguments, the GradManagers closed over) or as written."""
    if mode == "xla_trace":
        models_, opts, gms = state
        traced = xla_trace(lambda m, o, *xs: step(m, o, gms, *xs))
        return lambda *arrays: traced(models_, opts, *[mge.Tensor(a) for a in arrays])
    return lambda *arrays: step(*state, *[mge.Tensor(a) for a in arrays])


def interleaved(name, blocks, steps):
    """Median ms/step of each mode, the three taking turns in this process (auto-jit switched on for its blocks
    only, as a program switching it would)."""
    runs, data = {}, {}
    for m in MODES:
        state, step, data[m] = setup(name)
        runs[m] = stepper(m, step, state)
    times = {m: [] for m in MODES}
    for b in range(blocks):
        for m in MODES[b % 3:] + MODES[:b % 3]:
            mge.config.auto_jit = m == "auto_jit"
            try:
                for i in range(steps):
                    t0 = time.perf_counter()
                    runs[m](*data[m][i % len(data[m])]).item()
                    if b >= 2 and i >= 1:
                        times[m].append(time.perf_counter() - t0)
            finally:
                mge.config.auto_jit = False
    return {m: statistics.median(v) * 1e3 for m, v in times.items()}


def _losses(name, mode, steps):
    """(A fresh process) the first ``steps`` losses of ``mode`` from the seed."""
    state, step, data = setup(name)
    mge.config.auto_jit = mode == "auto_jit"
    run = stepper(mode, step, state)
    print("LOSSES " + json.dumps([run(*data[i % len(data)]).item() for i in range(steps)]), flush=True)


def losses(name, mode, steps):
    return child_record(__file__, ["--losses", name, mode, steps], "LOSSES")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--blocks", type=int, default=8, help="blocks per mode (the first two left out)")
    ap.add_argument("--steps", type=int, default=8, help="steps per block")
    ap.add_argument("--check", type=int, default=10, help="steps whose losses eager and auto-jit must share")
    ap.add_argument("--losses", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.losses:
        name, mode, steps = args.losses
        return _losses(name, mode, int(steps))
    rows = []
    for name in args.only.split(","):
        ms = interleaved(name, args.blocks, args.steps)
        eager, auto = (losses(name, m, args.check) for m in ("eager", "auto_jit"))
        rel = [abs(a - b) / max(abs(a), 1e-6) for a, b in zip(eager, auto)]
        agree = (rel[0], max(rel))
        rows.append((name, ms, agree))
        print(f"{name:16s} eager {ms['eager']:8.2f}  auto_jit {ms['auto_jit']:8.2f}  xla_trace {ms['xla_trace']:8.2f}"
              f" ms/step | auto/xla {ms['auto_jit'] / ms['xla_trace']:.2f}  auto/eager {ms['auto_jit'] / ms['eager']:.2f}"
              f"  eager/xla {ms['eager'] / ms['xla_trace']:.2f} | loss rel. diff eager vs auto-jit: step 1 {agree[0]:.1e}, "
              f"steps 1-{args.check} {agree[1]:.1e}", flush=True)
    print("\n| workload | eager ms | auto-jit ms | xla_trace ms | auto/xla | auto/eager | eager/xla | "
          "loss rel. diff eager vs auto-jit: step 1, steps 1-%d |" % args.check)
    print("|---|---|---|---|---|---|---|---|")
    for name, ms, agree in rows:
        print(f"| {name} | {ms['eager']:.2f} | {ms['auto_jit']:.2f} | {ms['xla_trace']:.2f} | "
              f"{ms['auto_jit'] / ms['xla_trace']:.2f} | {ms['auto_jit'] / ms['eager']:.2f} | "
              f"{ms['eager'] / ms['xla_trace']:.2f} | {agree[0]:.1e}, {agree[1]:.1e} |")


if __name__ == "__main__":
    main()
