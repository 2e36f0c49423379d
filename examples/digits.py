"""Train a small ConvNet on scikit-learn's 8x8 handwritten digits (1,797 real images shipped inside the
scikit-learn package) with megxla: DataLoader, GradManager, AdamW and ONE compiled XLA step (``xla_trace``).

Run: ``python examples/digits.py`` (``--eager`` to run without compiling, ``--auto-jit`` to run the eager step with
auto-jit; ``--epochs``, ``--batch-size``, ``--seed``). Prints test accuracy, eager vs auto-jit vs ``xla_trace``
ms/step and the compile time; writes ``digits_loss.png``.
"""
import argparse
import time

import numpy as np
from tqdm import tqdm

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.data import DataLoader, RandomSampler, SequentialSampler
from megxla.data.dataset import ArrayDataset
from megxla.jit import xla_trace


class ConvNet(M.Module):
    """conv-BN-ReLU-pool x2, then three Linear layers: 8x8x1 -> 10 classes."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = M.Conv2d(1, 16, 3, padding=1), M.BatchNorm2d(16)
        self.conv2, self.bn2 = M.Conv2d(16, 32, 3, padding=1), M.BatchNorm2d(32)
        self.fc1, self.fc2, self.fc3 = M.Linear(32 * 2 * 2, 128), M.Linear(128, 64), M.Linear(64, 10)

    def forward(self, x):
        x = F.avg_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def load_digits(seed):
    from sklearn.datasets import load_digits as sk_digits
    d = sk_digits()
    x = (d.images.astype("float32") / 16.0 - 0.5)[:, None]  # (N, 1, 8, 8), roughly zero-centred
    y = d.target.astype("int32")
    order = np.random.RandomState(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = len(x) // 5
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eager", action="store_true", help="run the step eagerly instead of compiling it")
    p.add_argument("--auto-jit", action="store_true",
                   help="run the eager step with megxla.config.auto_jit on (compiled cluster by cluster, no decorator)")
    p.add_argument("--plot", default="digits_loss.png")
    args = p.parse_args(argv)

    np.random.seed(args.seed)
    mge.random.seed(args.seed)
    (xtr, ytr), (xte, yte) = load_digits(args.seed)
    train = DataLoader(ArrayDataset(xtr, ytr), RandomSampler(ArrayDataset(xtr, ytr), args.batch_size,
                                                             drop_last=True, seed=args.seed))
    test = DataLoader(ArrayDataset(xte, yte), SequentialSampler(ArrayDataset(xte, yte), 256))

    model = ConvNet()
    opt = optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    gm = GradManager().attach(model.parameters())

    def train_step(model, opt, data, label):
        with gm:
            loss = F.nn.cross_entropy(model(data), label)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    mge.config.auto_jit = args.auto_jit
    step = train_step if args.eager or args.auto_jit else xla_trace(train_step)

    def predict(x):
        model.eval()
        out = F.argmax(model(mge.Tensor(x)), axis=1).numpy()
        model.train()
        return out

    losses, times = [], []
    for epoch in range(args.epochs):
        bar = tqdm(train, desc=f"epoch {epoch + 1}/{args.epochs}", leave=False)
        for data, label in bar:
            t0 = time.perf_counter()
            loss = step(model, opt, mge.Tensor(data), mge.Tensor(label))
            loss_value = float(loss.numpy())  # waits for the step: the timing covers the whole computation
            times.append(time.perf_counter() - t0)
            losses.append(loss_value)
            bar.set_postfix(loss=f"{loss_value:.3f}")
        if epoch == args.epochs - 1 or epoch % 5 == 0:
            acc = np.mean(np.concatenate([predict(x) for x, _ in test]) == yte)
            print(f"epoch {epoch + 1}: loss {np.mean(losses[-len(train):]):.4f}  test accuracy {acc:.2%}")

    acc = np.mean(np.concatenate([predict(x) for x, _ in test]) == yte)
    steady = np.median(times[5:]) * 1e3
    print(f"\ntest accuracy: {acc:.2%} on {len(yte)} held-out digits")
    if args.eager or args.auto_jit:
        print(f"{'auto-jit' if args.auto_jit else 'eager'} step: {steady:.2f} ms (median)")
    else:
        print(f"xla_trace step: {steady:.2f} ms (median); first call (eager, recording) {times[0] * 1e3:.1f} ms; "
              f"compile time {step.compile_time * 1e3:.0f} ms")
        batches = list(train)[:25] * 2

        def median_ms(auto_jit):  # the same eager step, for comparison (auto-jit: no decorator, clusters)
            mge.config.auto_jit = auto_jit
            ts = []
            for data, label in batches:
                t0 = time.perf_counter()
                float(train_step(model, opt, mge.Tensor(data), mge.Tensor(label)).numpy())
                ts.append(time.perf_counter() - t0)
            mge.config.auto_jit = False
            # (steady state: auto-jit times a small step both ways over its first ~15 steps and keeps the faster)
            return np.median(ts[20:]) * 1e3

        eager_ms, auto_ms = median_ms(False), median_ms(True)
        print(f"the same step, ms (median): eager {eager_ms:.2f} | auto-jit {auto_ms:.2f} | xla_trace {steady:.2f} "
              f"-> xla_trace {eager_ms / steady:.1f}x and auto-jit {eager_ms / auto_ms:.1f}x faster than eager")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(losses, lw=0.8, label="train loss per step")
        k = max(1, len(train))
        ax.plot(np.arange(k - 1, len(losses)), np.convolve(losses, np.ones(k) / k, "valid"), label="epoch mean")
        ax.set_xlabel("step"), ax.set_ylabel("cross entropy"), ax.legend(), ax.set_title("megxla: digits ConvNet")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"loss curve written to {args.plot}")
    except ImportError:
        print("matplotlib not installed: no plot")
    return acc


if __name__ == "__main__":
    main()
