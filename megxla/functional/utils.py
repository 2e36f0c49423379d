"""``megengine.functional.utils``: :func:`_assert_equal`, the value check MegEngine's model-verification code uses.

Example:
    >>> import megxla.functional as F
    >>> F.utils._assert_equal(Tensor([1.0, 2.0]), Tensor([1.0, 2.00001])).numpy()
    array([1., 2.], dtype=float32)
"""
from __future__ import annotations

from ..core._dispatch import OpError
from ..core._elemwise_front import as_tensor as _t
from ..core._tensor import Tensor
from .elemwise import abs, maximum, minimum
from .math import topk_accuracy  # noqa: F401  (MegEngine's deprecated alias path)

__all__ = ["topk_accuracy"]


def _assert_equal(expect: Tensor, actual: Tensor, *, maxerr: float = 0.0001, verbose: bool = False) -> Tensor:
    """Check that two tensors are equal within ``maxerr`` and return ``expect``.

    The error is MegEngine's: ``max(|expect - actual| / max(min(|expect|, |actual|), 1))``, the smaller of the
    absolute and the relative error. The check reads the error on the host (under ``jit.trace`` a guarded read,
    checked on every call), so a step dumped or compiled without the host cannot hold it.

    Args:
        expect: expected values.
        actual: values to check (same shape).
        maxerr: largest allowed error.
        verbose: print the error.

    Returns:
        ``expect``.

    Raises:
        OpError: (a RuntimeError, as MegEngine's AssertEqual) the shapes differ or the error exceeds ``maxerr``.
    """
    expect, actual = _t(expect), _t(actual)
    if tuple(expect.shape) != tuple(actual.shape):
        raise OpError(f"_assert_equal: shapes differ: expect {tuple(expect.shape)}, actual {tuple(actual.shape)}")
    one = Tensor(1.0, dtype="float32", device=expect.device)
    err = float((abs(expect - actual) / maximum(minimum(abs(expect), abs(actual)), one)).max().item())
    if verbose:
        print(f"_assert_equal: maxerr={err} (allowed {maxerr})")
    if not err <= maxerr:  # (a NaN error fails too)
        raise OpError(f"_assert_equal: error {err} exceeds maxerr={maxerr} between tensors of shape "
                      f"{tuple(expect.shape)}")
    return expect
