"""Guards for megxla's side of differences the session-84 fuzzer runs told apart (scripts/megengine_trace_fuzz.py).

MegEngine is not needed here; its values were printed by MegEngine 1.13.0 (CPU, probes under /tmp/s84/f2).
"""
import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
from megxla.core._dispatch import OpError
from megxla.jit import exclude_from_trace, trace


@pytest.mark.parametrize("capture_as_const", [False, True])
def test_trace_without_host_with_a_logging_excluded_block_follows_new_inputs(capture_as_const):
    # megengine_trace_fuzz seed 14 case 182 (and seed 13 case 184, seed 14 case 91): MegEngine 1.13's
    # trace(without_host=True, capture_as_const=True) returns the recording call's result [1.462] at every later
    # call once the body has an exclude_from_trace block (without capture_as_const it raises "unknown input
    # tensors"); megxla's compiled calls give the eager values, as MegEngine's do without the block
    log = []

    def body(a):
        with exclude_from_trace():
            log.append(float(a.mean()))
        return F.sigmoid(a) * 2

    f = trace(body, symbolic=False, capture_as_const=capture_as_const, without_host=True)
    got = [float(f(mge.tensor(np.full((2,), v, "float32"))).numpy()[0]) for v in (1.0, 1.0, 2.0, 3.0)]
    np.testing.assert_allclose(got, [1.4621172, 1.4621172, 1.7615941, 1.9051483], rtol=1e-6)
    assert log == [1.0]  # (the block runs while recording only, as documented for a step without the host)


def test_softmax_of_an_axis_out_of_range_raises_naming_the_axis():
    # bad_call_fuzz seed 24 program 10: MegEngine 1.13's F.softmax(x, axis=4) of a (4, 3) tensor raises an
    # AsyncError or kills the process (segmentation fault, x = F.ones((4, 3))); megxla raises an OpError
    with pytest.raises(OpError, match=r"softmax: axis 4 is out of range for a tensor of shape \(4, 3\)"):
        F.softmax(F.ones((4, 3)), axis=4)
