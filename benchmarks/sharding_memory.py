"""Per-rank memory of sharded training: bytes of parameters + gradients + optimizer slots that each process
holds (read from the arrays themselves), for data parallel, ZeRO-1/2 (``shard_optimizer``) and ZeRO-3
(``fully_shard``), on 1 / 2 / 4 / 8 CPU processes; a Transformer trained with Adam (16 bytes per parameter
unsharded: parameter, gradient, two moments).

    .venv/bin/python benchmarks/sharding_memory.py [--ranks 1,2,4,8] [--dim 256] [--blocks 4] [--budget-mib 40]

Columns: ``params`` / ``grads`` / ``slots`` (after ``gm.backward``, before ``opt.step``: the gradients are then
as large as they get), their sum, ``live`` (every JAX array the process holds at that point, from
``jax.live_arrays()``, less what the process held before building the model: the state above plus the batch,
the loss and constants) and ``peak unit`` (the largest unit's
gathered parameters, the transient extra of ``fully_shard`` while a unit runs), ``forward -> backward`` (what the
eager forward pass leaves alive for the backward one: activations; ``fully_shard``'s gathered parameters are
not among them, the backward pass gathers them again). ``--budget-mib`` is an explicit
per-process cap on params + grads + slots: the table says which configurations fit it (with the defaults the
unsharded state, ~50 MiB, does not fit 40 MiB; sharded over 4 processes it does, and it trains: one step is
taken and its loss printed).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import megxla as mge  # noqa: E402
import megxla.distributed as dist  # noqa: E402
import megxla.functional as F  # noqa: E402
import megxla.module as M  # noqa: E402
import megxla.optimizer as optim  # noqa: E402
from megxla.autodiff import GradManager  # noqa: E402


class Block(M.Module):
    def __init__(self, d):
        super().__init__()
        self.ln1, self.ln2 = M.LayerNorm(d), M.LayerNorm(d)
        self.qkv, self.o = M.Linear(d, 3 * d), M.Linear(d, d)
        self.fc1, self.fc2 = M.Linear(d, 4 * d), M.Linear(4 * d, d)
        self.heads = 4

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = F.split(self.qkv(self.ln1(x)), 3, axis=-1)
        q, k, v = (y.reshape(b, t, self.heads, -1).transpose(0, 2, 1, 3) for y in (q, k, v))
        a = F.softmax(F.matmul(q, k.transpose(0, 1, 3, 2)) / float(np.sqrt(d // self.heads)), axis=-1)
        x = x + self.o(F.matmul(a, v).transpose(0, 2, 1, 3).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Transformer(M.Module):
    def __init__(self, d, blocks, classes=10):
        super().__init__()
        self.blocks = [Block(d) for _ in range(blocks)]
        self.ln, self.head = M.LayerNorm(d), M.Linear(d, classes)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def _bytes(ts):
    return sum(int(np.prod(t.shape)) * t.dtype.itemsize for t in ts if t is not None)


def measure(mode, dim, blocks, batch=8, seq=16):
    import gc
    import jax
    gc.collect()  # what earlier configurations of this process left is not this one's
    base = sum(a.nbytes for a in jax.live_arrays())
    mge.random.seed(0)
    model = Transformer(dim, blocks)
    if mode == "fsdp":
        dist.fully_shard(model)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    if mode == "zero":
        opt = dist.shard_optimizer(opt)
    cbs = [dist.make_allreduce_cb("mean")] if mode == "dp" and dist.get_world_size() > 1 else []
    gm = GradManager().attach(model.parameters(), callbacks=cbs)
    rng = np.random.RandomState(dist.get_rank())
    x = mge.Tensor(rng.randn(batch, seq, dim).astype("float32"))
    y = mge.Tensor(rng.randint(0, 10, (batch * seq,)).astype("int32"))
    gc.collect()
    before = sum(a.nbytes for a in jax.live_arrays())
    with gm:
        loss = F.nn.cross_entropy(model(x).reshape(-1, 10), y)
        gc.collect()
        # what the forward pass left for the backward one: activations (and, unless fully_shard gathers them
        # again in backward, the gathered parameters)
        held = sum(a.nbytes for a in jax.live_arrays()) - before
        gm.backward(loss)
    params = list(model.parameters())
    if mode == "zero":  # the optimizer's blocks too (its _get_params ends with the whole parameters)
        params += [p for g in opt.param_groups for p in g["params"]]
    grads = [p.grad for p in params]
    slots = [v for s in opt._state.values() for v in s.values()]
    gc.collect()
    live = sum(a.nbytes for a in jax.live_arrays()) - base
    unit = 0
    if mode == "fsdp":
        from megxla.distributed._sharding import splits_of
        for m in model.modules():
            sp = splits_of(m)
            unit = max(unit, sum(int(np.prod(m.__dict__[k].shape)) * s[-1].n * 4 for k, s in sp.items()))
    row = dict(params=_bytes(params), grads=_bytes(grads), slots=_bytes(slots), live=live, unit=unit, held=held)
    opt.step().clear_grad()
    row["loss"] = float(loss)
    return row


def _worker(modes, dim, blocks):
    return {m: measure(m, dim, blocks) for m in modes}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--budget-mib", type=float, default=40.0)
    args = ap.parse_args()
    modes = ("dp", "zero", "fsdp")
    mib = 1 << 20
    print(f"Transformer d={args.dim}, {args.blocks} blocks, Adam; per-rank MiB (rank 0), budget "
          f"{args.budget_mib:g} MiB for params+grads+slots")
    print("| ranks | mode | params | grads | slots | sum | live arrays | peak unit | forward -> backward | fits budget "
          "| loss |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in [int(r) for r in args.ranks.split(",")]:
        res = dist.launcher(_worker, n_gpus=n, device_type="cpu")(modes, args.dim, args.blocks)[0]
        for m in modes:
            r = res[m]
            total = r["params"] + r["grads"] + r["slots"]
            print(f"| {n} | {m} | {r['params'] / mib:.2f} | {r['grads'] / mib:.2f} | {r['slots'] / mib:.2f} | "
                  f"{total / mib:.2f} | {r['live'] / mib:.2f} | {r['unit'] / mib:.2f} | {r['held'] / mib:.2f} | "
                  f"{'yes' if total <= args.budget_mib * mib else 'no'} | {r['loss']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
