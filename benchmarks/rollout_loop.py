"""Loops that index with Python ints that change: a policy-gradient rollout and a hand-written RNN, eager against
auto-jit.

``policy``: REINFORCE as written for MegEngine -- each of an episode's 16 actions read on the host
(``int(argmax)``), its log-probability picked with it (``logp[0, a]``), the returns as Python floats -- then one
backward and an Adam step. Both modes take turns in one process (blocks of 10 episodes), so the machine's load
hits both alike; the ratio is of the medians of the second half.

``rnn``: a 2-layer cell written by hand over ``T`` time steps (``x[t]``, ``outs[t] = ...``), 20 training steps in a
fresh process per mode: seconds to the end of the first step and in all, and the last steps' time.

Usage::

    python benchmarks/rollout_loop.py                 # both
    python benchmarks/rollout_loop.py --only policy --episodes 400
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def policy(episodes=400, block=10, steps=16):
    """Median ms per episode, eager and auto-jit, taking turns in this process."""
    import megxla as mge
    import megxla.functional as F
    import megxla.module as M
    import megxla.optimizer as optim
    from megxla.autodiff import GradManager

    rs = np.random.RandomState(0)
    mge.random.seed(0)
    net = M.Sequential(M.Linear(8, 64), M.ReLU(), M.Linear(64, 4))
    opt = optim.Adam(net.parameters(), lr=1e-3)
    gm = GradManager().attach(net.parameters())

    def episode():
        obs = rs.randn(8).astype("float32")
        with gm:
            logps, rewards = [], []
            for t in range(steps):
                logp = F.logsoftmax(net(mge.Tensor(obs[None])), axis=1)
                a = int(F.argmax(logp, axis=1))
                logps.append(logp[0, a])
                rewards.append(float(a == t % 4))
                obs = np.roll(obs, 1) + 0.1 * a
            ret = np.cumsum(rewards[::-1])[::-1].copy()
            loss = -sum(lp * float(r) for lp, r in zip(logps, ret)) / steps
            gm.backward(loss)
        opt.step().clear_grad()
        return loss.item()

    times = {False: [], True: []}
    for k in range(episodes // block):
        mge.config.auto_jit = k % 2 == 1
        for _ in range(block):
            t0 = time.perf_counter()
            episode()
            times[k % 2 == 1].append(time.perf_counter() - t0)
    mge.config.auto_jit = False
    from megxla.jit import auto_jit_stats
    s = auto_jit_stats()
    eager, auto = (1e3 * float(np.median(times[m][len(times[m]) // 2:])) for m in (False, True))
    print(f"policy ({steps} host-read actions an episode): eager {eager:.2f} ms, auto-jit {auto:.2f} ms, "
          f"auto/eager {auto / eager:.2f}; auto-jit eager steps {s['eager_steps']}, iterations run eagerly "
          f"{s['eager_reads']}, compiled {s['compiled']}")


_RNN = r'''
import sys, time
import numpy as np
import megxla as mge, megxla.functional as F, megxla.module as M, megxla.optimizer as optim
from megxla.autodiff import GradManager
mge.config.auto_jit = sys.argv[1] == "auto"
T = int(sys.argv[2])
mge.random.seed(0)
ih, hh, out = M.Linear(16, 32), M.Linear(32, 32), M.Linear(32, 10)
params = list(ih.parameters()) + list(hh.parameters()) + list(out.parameters())
gm, opt = GradManager().attach(params), optim.Adam(params, 1e-3)
rs = np.random.RandomState(0)
x = mge.Tensor(rs.randn(T, 8, 16).astype("float32"))
y = mge.Tensor(rs.randint(0, 10, (T * 8,)).astype("int32"))
t0 = time.perf_counter(); ts = []
for step in range(20):
    s0 = time.perf_counter()
    with gm:
        h, outs = F.zeros((8, 32)), F.zeros((T, 8, 10))
        for t in range(T):
            h = F.tanh(ih(x[t]) + hh(h))
            outs[t] = out(h)
        loss = F.nn.cross_entropy(outs.reshape(-1, 10), y)
        gm.backward(loss)
    opt.step().clear_grad()
    loss.item()
    ts.append(time.perf_counter() - s0)
print(f"{time.perf_counter() - t0:.1f} {ts[0]:.1f} {1e3 * float(np.median(ts[-5:])):.1f} {loss.item():.6f}")
'''


def rnn(lengths=(60, 150)):
    """Fresh processes: the hand-written RNN's 12 steps, eager and auto-jit."""
    for T in lengths:
        row = {}
        for mode in ("eager", "auto"):
            out = subprocess.run([sys.executable, "-c", _RNN, mode, str(T)], capture_output=True, text=True,
                                 env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
                                     os.path.abspath(__file__)))))
            row[mode] = out.stdout.split() or [out.stderr[-300:]]
        e, a = row["eager"], row["auto"]
        print(f"rnn T={T} (20 steps; s in all, s to the end of step 1, ms a step over the last 5, loss): "
              f"eager {' / '.join(e)}; auto-jit {' / '.join(a)}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="policy,rnn")
    ap.add_argument("--episodes", type=int, default=400)
    args = ap.parse_args()
    only = args.only.split(",")
    if "policy" in only:
        policy(args.episodes)
    if "rnn" in only:
        rnn()
