"""The op test table harness: one :class:`OpCase` per (op, shapes, dtypes), three checks each.

* :func:`check_forward` -- megxla's eager result against a NumPy/SciPy reference (values, shapes, dtype kinds),
  and that the inputs are left untouched.
* :func:`check_grad` -- gradients from ``GradManager`` against central differences of the same function, all
  in float64.
* :func:`check_compiled` -- the eager result against ``megxla.jit.xla_trace(fn)`` called twice (the second
  call runs the compiled executable).
* :func:`check_auto_jit` -- eager forward and gradients against the same code under ``config.auto_jit``, run
  until its cluster is compiled (every cluster compiled, however small).

Tables live in ``tests/test_optable_<family>.py`` modules, each exporting a ``CASES`` list (and optionally an
``EXCLUDED = {name: reason}`` dict of its own); the coverage test of ``test_optable_tensor.py`` collects them
all and checks every name of the reference's ``## megengine.functional`` section is tested or excluded.
"""
from __future__ import annotations

import contextlib
import importlib
import pathlib
import re
import zlib
from dataclasses import dataclass
from typing import Callable, Sequence

import jax
import numpy as np
import pytest

import megxla
from megxla.autodiff import GradManager

__all__ = ["OpCase", "check_forward", "check_grad", "check_compiled", "check_auto_jit", "params", "EXCLUDED", "f32", "i32",
           "boolean", "positive", "reference_names", "collect_tables", "REFERENCE"]

REFERENCE = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "megengine-1.13-api.md"

# Names of ``## megengine.functional`` that no table tests, with the reason. Keep it short and justified.
# Tables may add their own ``EXCLUDED`` dicts (merged by the coverage test).
EXCLUDED: dict = {}


@dataclass
class OpCase:
    name: str                 # public name, e.g. "functional.sum" or "Tensor.__getitem__"
    fn: Callable              # megxla callable of Tensors (static args bound with a lambda)
    ref: Callable             # NumPy/SciPy reference of numpy arrays
    inputs: Sequence          # generators: callables rng -> np.ndarray (float inputs float32 by default)
    grad: bool = True         # numerical-gradient check wrt the float inputs
    exact: bool = False       # bit-equal eager vs compiled
    rtol: float = 1e-5
    atol: float = 1e-6
    label: str = ""           # distinguishes several cases of one name in test ids
    grad_rtol: float = 1e-4
    grad_atol: float = 1e-6

    @property
    def id(self):
        return f"{self.name}[{self.label}]" if self.label else self.name


def params(cases):
    """``pytest.mark.parametrize`` arguments: one param per case, id'd by name and label (made unique)."""
    seen, out = {}, []
    for c in cases:
        n = seen[c.id] = seen.get(c.id, 0) + 1
        out.append(pytest.param(c, id=c.id if n == 1 else f"{c.id}#{n}"))
    return out


# ---- input generators ------------------------------------------------------------------------------------------
def f32(*shape, lo=-2.0, hi=2.0, dtype=np.float32):
    """Uniform floats in [lo, hi)."""
    return lambda rng: rng.uniform(lo, hi, shape).astype(dtype)


def positive(*shape, lo=0.5, hi=2.0):
    return f32(*shape, lo=lo, hi=hi)


def i32(*shape, lo=-5, hi=5, dtype=np.int32):
    """Uniform integers in [lo, hi)."""
    return lambda rng: rng.integers(lo, hi, shape).astype(dtype)


def boolean(*shape):
    return lambda rng: rng.random(shape) < 0.5


def _rng(case, salt=0):
    return np.random.default_rng(zlib.crc32(f"{case.id}/{salt}".encode()))


_DEFAULT = {np.dtype(np.float64): np.float32, np.dtype(np.int64): np.int32}


def _arrays(case):
    """The case's inputs (float64/int64 from a generator become float32/int32, MegEngine's defaults)."""
    rng = _rng(case)
    out = []
    for g in case.inputs:
        a = np.asarray(g(rng))
        out.append(a.astype(_DEFAULT.get(a.dtype, a.dtype)))
    return out


def _flat(out):
    if isinstance(out, (list, tuple)):
        return [o for x in out for o in _flat(x)]
    return [out]


def _np(x):
    return x.numpy() if isinstance(x, megxla.Tensor) else np.asarray(x)


def _kind(dt):
    k = np.dtype(dt).kind
    return "i" if k == "u" else k


def _compare(got, want, rtol, atol, what, exact=False):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for n, (g, w) in enumerate(zip(got, want)):
        g, w = _np(g), np.asarray(w)
        assert g.shape == w.shape, f"{what}: output {n} has shape {g.shape}, expected {w.shape}"
        assert _kind(g.dtype) == _kind(w.dtype), f"{what}: output {n} has dtype {g.dtype}, expected kind of {w.dtype}"
        if exact or g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{what}: output {n}")
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what}: output {n}")


# ---- the three checks --------------------------------------------------------------------------------------------
def check_forward(case: OpCase):
    """Eager megxla vs the NumPy reference; inputs must be left untouched."""
    arrays = _arrays(case)
    xs = [megxla.Tensor(a, dtype=a.dtype) for a in arrays]
    before = [(x._vid, x.numpy().copy()) for x in xs]
    got = case.fn(*xs)
    want = case.ref(*[a.copy() for a in arrays])
    _compare(got, want, case.rtol, case.atol, f"{case.id} forward")
    for x, (vid, val) in zip(xs, before):
        assert x._vid == vid, f"{case.id}: an input tensor was rebound"
        np.testing.assert_array_equal(x.numpy(), val, err_msg=f"{case.id}: an input tensor was modified")


@contextlib.contextmanager
def x64():
    """JAX's 64-bit mode for the duration (``jax.experimental.enable_x64`` in older JAX)."""
    ctx = getattr(getattr(jax, "experimental", None), "enable_x64", None)
    if ctx is None:
        with jax.enable_x64(True):
            yield
    else:
        with ctx():
            yield


def _loss(outs, cots):
    """``sum(out * cot)`` over the float outputs (real part for complex ones), as a megxla scalar."""
    import megxla.functional as F
    total = None
    for o, c in zip(outs, cots):
        if c is None:
            continue
        term = F.sum(o * c)
        if o.dtype.kind == "c":
            term = F.real(term)
        total = term if total is None else total + term
    return total


def check_grad(case: OpCase, eps=1e-6):
    """``GradManager`` gradients of ``sum(fn(*xs) * cotangent)`` vs central differences, in float64."""
    if not case.grad:
        pytest.skip("not differentiable")
    arrays = _arrays(case)
    wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    if not wrt:
        pytest.skip("no float inputs")
    with x64():
        arrays = [a.astype(np.float64) if a.dtype.kind == "f" else
                  a.astype(np.complex128) if a.dtype.kind == "c" else a for a in arrays]

        def tensors(arrs):
            return [megxla.Tensor(a, dtype=a.dtype) for a in arrs]

        xs = tensors(arrays)
        outs = _flat(case.fn(*xs))
        rng = _rng(case, 1)
        cots = []
        for o in outs:
            k = o.dtype.kind
            if k == "f":
                cots.append(megxla.Tensor(rng.standard_normal(o.shape), dtype="float64"))
            elif k == "c":
                c = rng.standard_normal(o.shape) + 1j * rng.standard_normal(o.shape)
                cots.append(megxla.Tensor(c, dtype="complex128"))
            else:
                cots.append(None)
        if all(c is None for c in cots):
            pytest.skip("no float outputs")
        gm = GradManager().attach([xs[i] for i in wrt])
        with gm:
            outs = _flat(case.fn(*xs))
            gm.backward(_loss(outs, cots))
        for i in wrt:
            g = xs[i].grad
            got = np.zeros_like(arrays[i]) if g is None else g.numpy()
            assert got.shape == arrays[i].shape, f"{case.id}: grad of input {i} has shape {got.shape}"

            def f(a):
                args = list(arrays)
                args[i] = a
                return float(_loss(_flat(case.fn(*tensors(args))), cots).numpy())

            want = np.zeros_like(arrays[i])
            flat_in, flat_want = arrays[i].reshape(-1), want.reshape(-1)
            for j in range(flat_in.size):
                plus, minus = flat_in.copy(), flat_in.copy()
                plus[j] += eps
                minus[j] -= eps
                flat_want[j] = (f(plus.reshape(arrays[i].shape)) - f(minus.reshape(arrays[i].shape))) / (2 * eps)
            np.testing.assert_allclose(got, want, rtol=case.grad_rtol, atol=case.grad_atol,
                                       err_msg=f"{case.id}: gradient of input {i}")


def _xla_trace():
    try:
        from megxla.jit import xla_trace
    except ImportError:
        pytest.skip("megxla.jit not available yet")
    return xla_trace


def check_compiled(case: OpCase):
    """Eager result == ``xla_trace(fn)`` result (1st call traces, 2nd runs the compiled executable)."""
    xla_trace = _xla_trace()
    arrays = _arrays(case)
    xs = [megxla.Tensor(a, dtype=a.dtype) for a in arrays]
    eager = case.fn(*xs)
    traced = xla_trace(case.fn)
    first = traced(*xs)
    second = traced(*xs)
    rtol = 0 if case.exact else max(case.rtol, 1e-5)
    _compare(first, eager, rtol, 0 if case.exact else case.atol, f"{case.id} traced call", case.exact)
    _compare(second, eager, rtol, 0 if case.exact else case.atol, f"{case.id} compiled call", case.exact)


@contextlib.contextmanager
def auto_jit_compiling_everything():
    """``config.auto_jit`` on, with every cluster compiled at first sight (no minimum size): what the op table
    checks is the compiled cluster, not the op-by-op fallback (nor a peek: a read of an exact op's value computed
    by its eager kernel, the cluster left pending)."""
    from megxla.jit import _autojit
    saved = megxla.config.auto_jit
    with _autojit.compiling_everything():
        megxla.config.auto_jit = True
        try:
            yield _autojit
        finally:
            megxla.config.auto_jit = saved


def check_auto_jit(case: OpCase):
    """Forward results and ``GradManager`` gradients of eager execution == the same under auto-jit (the op and
    its backward collected into clusters, compiled by XLA), three times (the cache's hit path included)."""
    arrays = _arrays(case)
    wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if case.grad else []

    def run():
        xs = [megxla.Tensor(a, dtype=a.dtype) for a in arrays]
        gm = GradManager().attach([xs[i] for i in wrt])
        with gm:
            outs = _flat(case.fn(*xs))
            floats = [o for o in outs if o.dtype.kind == "f"]
            if wrt and floats:
                gm.backward(sum((o * o).sum() for o in floats))
        grads = [None if xs[i].grad is None else xs[i].grad.numpy() for i in wrt]
        return [_np(o) for o in outs], grads

    want, want_g = run()
    rtol = 0 if case.exact else max(case.rtol, 1e-5)
    with auto_jit_compiling_everything() as aj:
        before = aj.auto_jit_stats()["compiled"] + aj.auto_jit_stats()["cache_hits"]
        for k in range(3):
            got, got_g = run()
            _compare(got, want, rtol, 0 if case.exact else case.atol, f"{case.id} auto-jit call {k}", case.exact)
            for i, g, w in zip(wrt, got_g, want_g):
                if w is None:
                    assert g is None, f"{case.id}: auto-jit gave input {i} a gradient, eager none"
                else:
                    np.testing.assert_allclose(g, w, rtol=max(rtol, 1e-5), atol=max(case.atol, 1e-6),
                                               err_msg=f"{case.id}: auto-jit gradient of input {i} (call {k})")
        stats = aj.auto_jit_stats()
    assert stats["compiled"] + stats["cache_hits"] > before or stats["eager_ops"], \
        f"{case.id}: auto-jit compiled nothing"


# ---- coverage --------------------------------------------------------------------------------------------------
def reference_names(section="megengine.functional"):
    """Public names listed in ``## <section>`` of the MegEngine reference (None if the file is absent)."""
    if not REFERENCE.exists():
        return None
    names, cur = set(), None
    for line in REFERENCE.read_text().splitlines():
        if line.startswith("## "):
            cur = line[3:].strip()
        elif cur == section:
            m = re.match(r"- (?:class )?`(\w+)", line)
            if m:
                names.add(m.group(1))
    return names


def collect_tables():
    """``(covered names, excluded {name: reason}, table module names)`` over all ``test_optable_*`` modules."""
    here = pathlib.Path(__file__).parent
    covered, excluded, mods = set(), dict(EXCLUDED), []
    for path in sorted(here.glob("test_optable_*.py")):
        mod = importlib.import_module(path.stem)
        mods.append(path.stem)
        for c in getattr(mod, "CASES", []):
            parts = c.name.split(".")
            if parts[0] == "functional":
                covered.add(parts[-1])
        excluded.update(getattr(mod, "EXCLUDED", {}))
    return covered, excluded, mods
