"""Eager ``x[i]`` / ``x[i] = v`` at a line whose ints change: one kernel for every int, not one each.

A loop over rows (``for i in range(n): out[i] = f(x[i])``) compiled a getitem and a setitem kernel per int: 64 rows
took 5.3 s eagerly on a 2-core CPU (a warm compilation cache 5.1 s), MegEngine milliseconds. From a site's second
int on, its ints are 0-d index tensors -- auto-jit's rule (``_indexing._changing_ints``), now eager's too: 0.31 s.
"""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.autodiff import GradManager
from megxla.core._indexing import IndexOutOfRange

from test_upstream_triage_s81 import _Lowerings


def _rows_loop(x, out, n):
    for i in range(n):
        out[i] = x[i] * 2 + 1


def test_a_loop_over_rows_compiles_a_bounded_number_of_kernels():
    n = 23  # (an odd shape: kernels no other test compiled)
    a = np.arange(n * 7, dtype="float32").reshape(n, 7) / 3
    x, out = mge.Tensor(a), mge.Tensor(np.zeros((n, 7), "float32"))
    _Lowerings.n, _Lowerings.on = 0, True
    try:
        _rows_loop(x, out, n)
        out.numpy()
    finally:
        _Lowerings.on = False
    # (the first int's static getitem and setitem, the lifted ones, the arithmetic: each row its own before)
    assert _Lowerings.n <= 8, _Lowerings.n
    np.testing.assert_array_equal(out.numpy(), a * np.float32(2) + np.float32(1))


def test_lifted_ints_index_as_the_ints_do():
    x = mge.Tensor(np.arange(12, dtype="float32").reshape(4, 3))

    def get(i):
        return x[i, 1:]

    assert [get(i).numpy().tolist() for i in (0, 2, -1, np.int64(1))] == [[1, 2], [7, 8], [10, 11], [4, 5]]
    with pytest.raises(IndexOutOfRange, match="index 9 is out of range for axis 0 of size 4"):
        get(9)  # (checked on the host, as a static index is)
    y = mge.Tensor(np.zeros((4, 3), "int32"))

    def put(i, v):
        y[i] = v

    for i, v in ((0, 5), (-1, 7), (2, 1)):
        put(i, v)
    assert y.numpy().tolist() == [[5, 5, 5], [0, 0, 0], [1, 1, 1], [7, 7, 7]]
    with pytest.raises(IndexOutOfRange, match="setitem: index 7 is out of range"):
        put(7, 1)
    assert y.numpy().tolist() == [[5, 5, 5], [0, 0, 0], [1, 1, 1], [7, 7, 7]]


def test_gradients_through_lifted_ints():
    w = mge.Parameter(np.arange(8, dtype="float32").reshape(4, 2))
    gm = GradManager().attach([w])
    with gm:
        out = F.zeros((4, 2))
        for i in range(4):
            out[i] = w[i] * (i + 1)
        gm.backward((out * out).sum())
    # d/dw[i] of sum(((i + 1) w[i])^2) = 2 (i + 1)^2 w[i]
    want = 2 * (np.arange(1, 5, dtype="float32") ** 2)[:, None] * np.arange(8, dtype="float32").reshape(4, 2)
    np.testing.assert_allclose(w.grad.numpy(), want)
