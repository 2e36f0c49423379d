"""Session 72's probes of auto-jit against eager in the style of user code (hooks, GradManager callbacks and
explicit output gradients, optimizers on parameter groups stepped at different rates, checkpoints and deep copies
taken while a cluster is pending, tensors kept across steps, in-place writes to parameters, errors raised by the
user inside ``with gm:``, interrupts from a forward hook, ``record()`` / ``release()`` without ``with``, gradients
edited between backward and step), each run eagerly and under auto-jit for several steps (a cluster compiles when
its key recurs), comparing every value, gradient, parameter, optimizer slot, random draw and error; and the
differences from MegEngine 1.13 they led to, each test failing without its fix."""
from __future__ import annotations

import copy
import io

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import _autojit

NAN, INF = float("nan"), float("inf")


@pytest.fixture(params=["eager", "auto_jit"])
def mode(request, fresh_auto_jit_state):
    mge.config.auto_jit = request.param == "auto_jit"
    yield request.param


@pytest.fixture
def auto_jit(fresh_auto_jit_state):
    return fresh_auto_jit_state


def _thrice(fn):
    """``fn()``'s value (an array) in each of three calls, which must agree (NaN equal to NaN, zeros by sign)."""
    got = [np.asarray(fn()) for _ in range(3)]
    for g in got[1:]:
        np.testing.assert_array_equal(g, got[0])
        np.testing.assert_array_equal(np.signbit(g), np.signbit(got[0]))
    return got[0]


def _same_sign_and_value(got, want):
    got, want = np.asarray(got), np.asarray(want, got.dtype)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


# --- a bool mask times (or over) floats: MegEngine's False is the number 0 (``False * inf`` is nan, ``False * -3.0``
# -0.0); XLA's algebraic simplifier turned the kernel's ``convert(mask) * y`` into ``select(mask, y, 0)``: 0.0
# (values printed by MegEngine 1.13.0) ---

_MASK = np.array([True, False] * 5)
_Y = np.array([-3.0, -3.0, -0.0, -0.0, INF, INF, -INF, -INF, NAN, NAN], "float32")


@pytest.mark.parametrize("case", ["mask * y", "y * mask", "mask * -3.0", "mask * inf", "mask * nan", "mask / -3.0",
                                  "mask / -0.0", "mask / nan", "-0.0 * mask"])
def test_a_bool_mask_times_floats_is_zero_times_them_for_false(mode, case):
    y = mge.Tensor(_Y)
    fn = {"mask * y": lambda m: m * y, "y * mask": lambda m: y * m, "mask * -3.0": lambda m: m * -3.0,
          "mask * inf": lambda m: m * INF, "mask * nan": lambda m: m * NAN, "mask / -3.0": lambda m: m / -3.0,
          "mask / -0.0": lambda m: m / -0.0, "mask / nan": lambda m: m / NAN, "-0.0 * mask": lambda m: -0.0 * m}[case]
    with np.errstate(all="ignore"):
        want = {"mask * y": _MASK * _Y, "y * mask": _Y * _MASK}.get(case)
        if want is None:
            s = float(case.split()[-1] if case[0] == "m" else case.split()[0])
            want = _MASK / np.float32(s) if "/" in case else _MASK * np.float32(s)
    got = _thrice(lambda: fn(mge.Tensor(_MASK) & True).numpy())  # (``& True``: the mask made on the device)
    assert got.dtype == np.float32
    _same_sign_and_value(got, want)


def test_a_loss_masked_by_a_bool_keeps_eagers_nan_and_gradient(mode):
    # a masked loss whose unmasked entries overflow: nan, as in MegEngine (the select gave a finite loss)
    w = mge.Parameter(np.array([1.0, 2.0, 3.0], "float32"))
    gm = GradManager().attach([w])
    for _ in range(3):
        with gm:
            keep = w < 2.5
            loss = (keep * F.exp(w * 30.0)).sum()  # (exp(90) is inf: MegEngine's loss nan, its gradient too)
            gm.backward(loss)
        assert np.isnan(loss.item())
        np.testing.assert_allclose(w.grad.numpy()[:2], [3.2059421e14, 3.4260223e27], rtol=1e-5)
        assert np.isnan(w.grad.numpy()[2])
        w.grad = None
    if mode == "auto_jit":
        assert _autojit._stats.compiled >= 1  # (the step ran compiled)


# --- maximum / minimum / clip at signed zeros and next to a NaN (printed by MegEngine 1.13.0): MIN is
# ``x < y ? x : y`` (megxla's ``x <= y`` gave minimum(0.0, -0.0) == 0.0), CLIP ``x <= lo ? lo : (x <= hi ? x : hi)``
# (megxla kept x on a bound: clip(-0.0, 0.0, 1.0) was -0.0), and the gradients of MAX / MIN go to neither operand
# next to a NaN (megxla gave the one the select picked: 1 to x for maximum(1, nan)) ---

_A = np.array([1.0, 0.0, -0.0, 2.0, NAN, 1.0], "float32")
_B = np.array([1.0, -0.0, 0.0, 1.0, 1.0, NAN], "float32")
MIN_MAX = {  # fn: (value, its sign bits, x's gradient, y's gradient)
    "minimum": ([1.0, -0.0, 0.0, 1.0, 1.0, NAN], [0, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 0, 0]),
    "maximum": ([1.0, 0.0, -0.0, 2.0, NAN, 1.0], [0, 0, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]),
}


@pytest.mark.parametrize("fn", sorted(MIN_MAX))
def test_maximum_and_minimum_values_and_gradients_at_signed_zeros_and_nans_are_megengines(mode, fn):
    value, sign, gx, gy = MIN_MAX[fn]
    x, y = mge.Parameter(_A), mge.Parameter(_B)
    gm = GradManager().attach([x, y])
    for _ in range(3):
        with gm:
            out = getattr(F, fn)(x * 1, y * 1)  # (a step of several ops: compiled under auto-jit)
            gm.backward((out * 2).sum())
        np.testing.assert_array_equal(out.numpy(), np.float32(value))
        np.testing.assert_array_equal(np.signbit(out.numpy()), np.array(sign, bool))
        np.testing.assert_array_equal(x.grad.numpy(), np.float32(gx) * 2)
        np.testing.assert_array_equal(y.grad.numpy(), np.float32(gy) * 2)
        x.grad = y.grad = None


@pytest.mark.parametrize("lo, hi, value, grad", [
    (0.0, 1.0, [0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 1.0], [0, 2, 3, 4, 5, 0, 0, 0]),
    (-0.0, 0.0, [-0.0, -0.0, -0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0, 2, 3, 0, 0, 0, 0, 0]),
    (1.0, 0.0, [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0], [0] * 8),
])
def test_clip_on_a_bound_is_the_bound_and_its_gradient_passes_there(mode, lo, hi, value, grad):
    x = mge.Parameter(np.array([-1.0, -0.0, 0.0, 0.5, 1.0, 2.0, NAN, INF], "float32"))
    gm = GradManager().attach([x])
    for _ in range(3):
        with gm:
            out = F.clip(x * 1, lo, hi)
            gm.backward((out * mge.Tensor(np.arange(1, 9, dtype="float32"))).sum())
        _same_sign_and_value(out.numpy(), value)
        np.testing.assert_array_equal(x.grad.numpy(), np.float32(grad))
        x.grad = None
    _same_sign_and_value(F.clip(mge.Tensor(np.array([-0.0, 7.0], "float16")), 0.0, 6.0).numpy(), [0.0, 6.0])
