"""Per-op eager dispatch overhead: megxla vs a raw cached ``jax.jit`` call vs NumPy (and PyTorch if installed).

Run: ``python benchmarks/eager_overhead.py``. Prints µs/op for an elementwise add on 32x32 float32.
"""
import os
import time

import numpy as np


def _time(fn, n=3000, repeats=5):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            out = fn()
        if hasattr(out, "block_until_ready"):
            out.block_until_ready()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def measure():
    """Return ``{name: µs per op}`` for an add on 32x32 float32."""
    import jax
    import jax.numpy as jnp
    import megxla as mge

    a_np = np.random.rand(32, 32).astype("float32")
    b_np = np.random.rand(32, 32).astype("float32")
    results = {}
    x, y = mge.Tensor(a_np), mge.Tensor(b_np)
    results["megxla eager (x + y)"] = _time(lambda: x + y)
    from megxla.autodiff import GradManager
    gm = GradManager().attach([x])
    with gm:
        results["megxla eager, GradManager recording"] = _time(lambda: x + y, n=1000)
    ja, jb = jnp.asarray(a_np), jnp.asarray(b_np)
    add = jax.jit(jnp.add)
    results["raw cached jax.jit call"] = _time(lambda: add(ja, jb))
    results["jax.numpy (jnp.add, eager)"] = _time(lambda: jnp.add(ja, jb))
    results["NumPy"] = _time(lambda: a_np + b_np)
    try:
        import torch
        ta, tb = torch.from_numpy(a_np), torch.from_numpy(b_np)
        results["PyTorch eager"] = _time(lambda: ta + tb)
    except ImportError:
        pass
    return results


def main():
    print(f"threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, cpus={os.cpu_count()}")
    results = measure()
    raw = results["raw cached jax.jit call"]
    print(f"{'what':42s} {'µs/op':>8s} {'x raw jit':>10s}")
    for name, us in results.items():
        print(f"{name:42s} {us:8.2f} {us / raw:10.2f}")


if __name__ == "__main__":
    main()
