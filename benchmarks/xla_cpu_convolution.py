"""XLA:CPU's YNNPACK library fusions, per kind of op: why megxla keeps them for matmuls only (megxla/config.py).

jaxlib 0.10's XLA:CPU hands dots and convolutions to YNNPACK by default. This compiles two training-step kernels
-- two 3x3 convolutions' forward and backward (batch 32, 64 channels, 32x32, NCHW as MegEngine's layout) and an
MLP's (784-512-512, batch 128) -- with each setting of ``xla_cpu_experimental_ynn_fusion_type`` and reports the
compile time, the first run (YNNPACK builds its pipelines then) and the median of later runs. Plain JAX: megxla is
not imported (its import sets the flag for the whole process).

Usage::

    .venv/bin/python benchmarks/xla_cpu_convolution.py [--runs 7]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

SETTINGS = {
    "XLA's default": None,
    "dots and convolutions": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION",
    "dots only (megxla)": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT",
    "none": "",
}


def conv_step(x, w1, w2, wl):
    def loss(x, w1, w2, wl):
        dn = ("NCHW", "OIHW", "NCHW")
        h = jax.nn.relu(jax.lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=dn))
        if h.shape[-1] > 16:  # (the small ConvNet pools between its convolutions)
            h = h.reshape(*h.shape[:2], h.shape[2] // 2, 2, h.shape[3] // 2, 2).mean((3, 5))
        h = jax.nn.relu(jax.lax.conv_general_dilated(h, w2, (1, 1), "SAME", dimension_numbers=dn))
        return (h.mean((2, 3)) @ wl).sum()
    return jax.grad(loss, argnums=(1, 2, 3))(x, w1, w2, wl)


def mlp_step(x, w1, w2):
    return jax.grad(lambda x, a, b: jnp.tanh(jnp.tanh(x @ a) @ b).sum(), argnums=(1, 2))(x, w1, w2)


def measure(fn, args, setting, runs):
    lowered = jax.jit(fn).lower(*args)
    t = time.perf_counter()
    exe = lowered.compile() if setting is None else \
        lowered.compile(compiler_options={"xla_cpu_experimental_ynn_fusion_type": setting})
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    jax.block_until_ready(exe(*args))
    first = time.perf_counter() - t
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        jax.block_until_ready(exe(*args))
        times.append(time.perf_counter() - t)
    return compile_s, first, statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args(argv)
    rng = np.random.RandomState(0)
    def arrays(*shapes):
        return [jnp.asarray(rng.standard_normal(s).astype("float32")) for s in shapes]
    kernels = {  # (a ResNet block's convolutions; the small ConvNet's, batch 64; the MLP)
        "ResNet convs": (conv_step, arrays((32, 64, 32, 32), (64, 64, 3, 3), (64, 64, 3, 3), (64, 10))),
        "ConvNet convs": (conv_step, arrays((64, 1, 28, 28), (16, 1, 3, 3), (32, 16, 3, 3), (32, 10))),
        "MLP": (mlp_step, arrays((128, 784), (784, 512), (512, 512))),
    }
    print(f"jax {jax.__version__}, {os.cpu_count()} CPUs, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; "
          "per kernel: compile s / first run ms / median run ms\n")
    print("| YNNPACK fusions | " + " | ".join(kernels) + " |\n|---|" + "---:|" * len(kernels))
    for name, setting in SETTINGS.items():
        if setting is None and "xla_cpu_experimental_ynn_fusion_type" in os.environ.get("XLA_FLAGS", ""):
            continue  # (XLA_FLAGS sets it: no default to show)
        cells = []
        for fn, a in kernels.values():
            c, first, run = measure(fn, a, setting, args.runs)
            cells.append(f"{c:.2f} / {first * 1e3:.1f} / {run * 1e3:.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
