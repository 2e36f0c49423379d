"""Quantization-aware training of the digits ConvNet with megxla: float training, ``quantize_qat``, a few QAT
epochs (fake quantization compiled into ONE ``xla_trace`` step with the observers' statistics), then
``quantize`` to an int8 inference model. Prints the accuracies and the compiled QAT vs float step times.

Run: ``python examples/qat_digits.py`` (``--epochs``, ``--qat-epochs``, ``--batch-size``, ``--seed``).
"""
import argparse
import time

import numpy as np

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla import quantization as Q
from megxla.autodiff import GradManager
from megxla.data import DataLoader, RandomSampler, SequentialSampler
from megxla.data.dataset import ArrayDataset
from megxla.jit import xla_trace

from digits import load_digits


class QuantizableConvNet(M.Module):
    """The digits ConvNet written with the fusable modules quantization converts (ConvBnRelu2d, LinearRelu)
    and QuantStub / DequantStub marking the quantized region."""

    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.conv1 = M.ConvBnRelu2d(1, 16, 3, padding=1)
        self.conv2 = M.ConvBnRelu2d(16, 32, 3, padding=1)
        self.fc1 = M.LinearRelu(32 * 2 * 2, 128)
        self.fc2 = M.Linear(128, 10)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.quant(x)
        x = F.max_pool2d(self.conv1(x), 2)
        x = F.max_pool2d(self.conv2(x), 2)
        return self.dequant(self.fc2(self.fc1(F.flatten(x, 1))))


def accuracy(model, test, labels):
    model.eval()
    pred = np.concatenate([F.argmax(model(mge.Tensor(x)), axis=1).numpy() for x, _ in test])
    model.train()
    return float(np.mean(pred == labels))


def train(model, loader, epochs, lr):
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    gm = GradManager().attach(model.parameters())

    @xla_trace
    def step(model, opt, data, label):
        with gm:
            loss = F.nn.cross_entropy(model(data), label)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    times = []
    for _ in range(epochs):
        for data, label in loader:
            t0 = time.perf_counter()
            float(step(model, opt, mge.Tensor(data), mge.Tensor(label)).numpy())
            times.append(time.perf_counter() - t0)
    return float(np.median(times[5:]) * 1e3) if len(times) > 5 else float("nan")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--qat-epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    np.random.seed(args.seed)
    mge.random.seed(args.seed)
    (xtr, ytr), (xte, yte) = load_digits(args.seed)
    ds = ArrayDataset(xtr, ytr)
    loader = DataLoader(ds, RandomSampler(ds, args.batch_size, drop_last=True, seed=args.seed))
    test = DataLoader(ArrayDataset(xte, yte), SequentialSampler(ArrayDataset(xte, yte), 256))

    model = QuantizableConvNet()
    float_ms = train(model, loader, args.epochs, lr=0.05)
    float_acc = accuracy(model, test, yte)
    print(f"float:     test accuracy {float_acc:.2%}   compiled step {float_ms:.2f} ms")

    Q.quantize_qat(model, qconfig=Q.ema_fakequant_qconfig)
    qat_ms = train(model, loader, args.qat_epochs, lr=0.005)
    qat_acc = accuracy(model, test, yte)
    print(f"QAT:       test accuracy {qat_acc:.2%}   compiled step {qat_ms:.2f} ms ({qat_ms / float_ms:.2f}x float)")

    qmodel = Q.quantize(model, inplace=False)
    int8_acc = accuracy_quantized(qmodel, test, yte)
    print(f"quantized: test accuracy {int8_acc:.2%}   (int8 weights and activations, int32 accumulation)")
    return float_acc, qat_acc, int8_acc


def accuracy_quantized(qmodel, test, labels):
    pred = np.concatenate([F.argmax(qmodel(mge.Tensor(x)), axis=1).numpy() for x, _ in test])
    return float(np.mean(pred == labels))


if __name__ == "__main__":
    main()
