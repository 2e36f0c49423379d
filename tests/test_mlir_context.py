"""JAX's lowerings of small programs reuse a thread's MLIR context (``core/_mlir_context.py``)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.core import _mlir_context

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(not _mlir_context.installed(), reason="MEGXLA_MLIR_CONTEXT_REUSE=0")


def _context(fn, *args):
    return jax.jit(fn).lower(*args).compiler_ir("stablehlo").context


def test_small_programs_share_a_context_large_ones_and_big_constants_get_their_own():
    x = jnp.ones((3, 4))
    # (a fresh context: the thread's may be one lowering short of MAX_USES after the tests before -- then the second
    # lowering below got a new one, as it should; seen once in the auto-jit run of the suite)
    _mlir_context._local.__dict__.pop("ctx", None)
    a = _context(lambda v: v * 2.0, x)
    b = _context(lambda v: jnp.exp(v) + 1.0, x)
    assert a is b  # (the same thread's context, ...)

    def long(v):
        for _ in range(_mlir_context.MAX_EQNS + 1):
            v = v * 1.001
        return v

    assert _context(long, x) is not a  # (... not for a program of more equations ...)
    big = np.random.RandomState(0).rand(200, 200).astype("float32")  # (160 KB, embedded as a constant)
    assert _context(lambda v: v.sum() + jnp.asarray(big), x) is not a  # (... nor one holding a large constant)
    assert _context(lambda v: v - 1.0, x) is a  # (and the small ones after them reuse it again)


def test_a_context_is_reused_a_bounded_number_of_times_and_per_thread():
    x = jnp.ones(5)
    _mlir_context._local.__dict__.pop("ctx", None)  # (a fresh one: the count starts here)
    first = _context(lambda v: v + 1.0, x)
    seen = {id(_context(lambda v, k=k: v + k, x)) for k in range(_mlir_context.MAX_USES + 1)}
    assert len(seen) == 2 and id(first) in seen  # (a new one once MAX_USES lowerings used the first)
    other = []
    t = threading.Thread(target=lambda: other.append(_context(lambda v: v * 5.0, x)))
    t.start()
    t.join()
    assert other[0] is not first and other[0] is not _context(lambda v: v * 5.0, x)


def test_programs_lowered_in_a_reused_context_compute_the_same_while_another_thread_compiles():
    # a Lowered made in the main thread's context, compiled on another thread while the main thread lowers more
    # small programs in that context: every result is right
    x = jnp.arange(6.0).reshape(2, 3)
    lowered = [jax.jit(lambda v, k=k: jnp.tanh(v * k) + k).lower(x) for k in range(40)]
    compiled, errors = {}, []

    def compile_all():
        try:
            for k, low in enumerate(lowered):
                compiled[k] = low.compile()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=compile_all)
    t.start()
    more = [jax.jit(lambda v, k=k: v * k - 1.0).lower(x).compile() for k in range(40)]
    t.join()
    assert not errors
    for k in range(40):
        np.testing.assert_allclose(compiled[k](x), np.tanh(np.arange(6.0).reshape(2, 3) * k) + k, rtol=1e-6)
        np.testing.assert_allclose(more[k](x), np.arange(6.0).reshape(2, 3) * k - 1.0)


def test_eager_ops_on_new_shapes_give_the_same_values_with_and_without_reuse():
    code = ("import sys, json, numpy as np; sys.path.insert(0, %r); import megxla as mge, megxla.functional as F;"
            "from megxla.core import _mlir_context as M;"
            "out = [float((F.exp(mge.Tensor(np.linspace(-2, 2, 7 + i, dtype='float32'))) * 3 - 1).sum().item())"
            " for i in range(12)];"
            "print(json.dumps([M.installed(), out]))" % ROOT)
    runs = []
    for flag in ("1", "0"):
        env = dict(os.environ, MEGXLA_MLIR_CONTEXT_REUSE=flag)
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        runs.append(__import__("json").loads(p.stdout.strip().splitlines()[-1]))
    assert runs[0][0] is True and runs[1][0] is False  # (the switch)
    assert runs[0][1] == runs[1][1]
    here = [float((F.exp(mge.Tensor(np.linspace(-2, 2, 7 + i, dtype="float32"))) * 3 - 1).sum().item())
            for i in range(12)]
    assert here == runs[0][1]
