"""A dumped graph has only Tensor outputs: a traced step returning Python values beside them is refused, not renumbered.

MegEngine 1.13 asserts at the call of such a step under ``capture_as_const`` ("Only support return tensors when
capture_as_const is enabled"); megxla runs the call (its shapes are Python ints, so steps return them) but its dump
said nothing and dropped the values, so the loaded graph's outputs no longer lined up with the function's.
"""
import io

import numpy as np
import pytest

import megxla as mge
from megxla.jit import trace


def _x():
    return mge.tensor(np.ones(3, "float32"))


@pytest.mark.parametrize("ret", ["tuple", "dict", "shape"])
def test_dump_refuses_python_values_beside_tensors(ret):
    @trace(symbolic=True, capture_as_const=True)
    def step(x):
        if ret == "tuple":
            return x * 2, 3
        if ret == "dict":
            return {"a": x * 2, "n": 3}
        return x * 2, x.shape[0]

    out = step(_x())  # the call itself runs, as before
    assert isinstance(out, (tuple, dict))
    with pytest.raises(ValueError, match=r"returned Python values beside its Tensors \(output 1: 3\)"):
        step.dump(io.BytesIO())


def test_dump_of_tensors_only_still_works():
    @trace(symbolic=True, capture_as_const=True)
    def step(x):
        return x * 2, mge.tensor(3)

    step(_x())
    buf = io.BytesIO()
    step.dump(buf)
    assert len(buf.getvalue()) > 0
