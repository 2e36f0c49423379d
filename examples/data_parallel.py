"""Data-parallel training as in MegEngine's XLA user guide: a ConvNet trained with AdamW by 2 processes, each
step one compiled XLA program (``xla_trace(without_host=True, capture_as_const=True)``) whose gradient
all-reduce is an XLA collective (gloo between CPU processes, NCCL between GPUs).

    python examples/data_parallel.py                # 2 CPU processes
    python examples/data_parallel.py --device gpu   # one GPU per process

Like the guide's script, it calls the decorated worker at module level, without a main guard. Both ranks end
with identical parameters (checked at the end).
"""
import argparse

import numpy as np

import megxla as mge
import megxla.autodiff as ad
import megxla.distributed as dist
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.jit import xla_trace

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("-n", "--nproc", type=int, default=2)
args = parser.parse_args()


class ConvNet(M.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = M.Conv2d(1, 8, 3, padding=1)
        self.bn1 = M.SyncBatchNorm(8)
        self.conv2 = M.Conv2d(8, 16, 3, padding=1)
        self.fc = M.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(F.flatten(x, 1))


@dist.launcher(n_gpus=args.nproc, device_type=args.device)
def worker():
    rank, world = dist.get_rank(), dist.get_world_size()
    model = ConvNet()
    dist.bcast_list_(list(model.parameters()) + list(model.buffers()))  # every rank starts from rank 0's weights
    gm = ad.GradManager().attach(model.parameters(), callbacks=[dist.make_allreduce_cb("mean")])
    opt = optim.AdamW(model.parameters(), lr=1e-3)

    @xla_trace(without_host=True, capture_as_const=True)
    def runner(data, label):
        with gm:
            loss = F.nn.cross_entropy(model(data), label)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    rng = np.random.RandomState(rank)  # each rank its own shard of (synthetic, MNIST-shaped) data
    for step in range(args.steps):
        x = rng.randn(16, 1, 28, 28).astype("float32")
        y = rng.randint(0, 10, 16).astype("int32")
        loss = runner(mge.Tensor(x), mge.Tensor(y))
        if rank == 0 and step % 5 == 0:
            print(f"step {step}: loss {float(loss.numpy()):.4f}", flush=True)
    assert "all-reduce" in runner.compiler_ir("hlo")
    return {k: np.asarray(v) for k, v in model.state_dict().items()}


states = worker()
same = all(np.array_equal(states[0][k], s[k]) for s in states[1:] for k in states[0])
print("ranks end with identical parameters:", same)
assert same
