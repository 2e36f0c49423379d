"""Session 83's differential fuzz runs: what they guard.

Data fuzzer seeds 32-35 (300 cases each, and cases 300-499), trace fuzzer seeds 10-12 (100 cases each) and auto-jit
fuzzer programs 1445-1524 found no megxla fault. These tests pin the behaviours those runs leaned on, so a later
change cannot turn a documented difference into a fault unnoticed:

* trace fuzzer seed 10 case 8: ``trace(capture_as_const=True)`` returning its argument, with an
  ``exclude_from_trace`` block logging ``float(a.mean())``. MegEngine 1.13's trace raises
  ``TraceError("... tensors not equals")`` at the second call and leaves its trace installed (the next eager
  ``mge.tensor`` raises "too many instructions"; the fuzzer's MegEngine child died). megxla runs the block at every
  call (docs/differences.md) and returns the eager function's values, which MegEngine's eager run gives.
* the data fuzzer's "both raise; the exception types differ" rule: megxla's own transform errors are subclasses of
  MegEngine's (``AssertionError`` for "output size is bigger than image size", ``NotImplementedError`` for a
  ``TorchTransformCompose``'s missing ``apply``), so ``except`` clauses written for MegEngine catch them.
"""
import numpy as np
import pytest

import megxla as mge
from megxla.data import transform as T
from megxla.jit import exclude_from_trace, trace


@pytest.mark.parametrize("symbolic", [False, True])
def test_capture_as_const_exclude_block_logging_host_value(symbolic):
    log = []

    @trace(symbolic=symbolic, capture_as_const=True)
    def f(a):
        with exclude_from_trace():
            log.append(float(a.mean()))
        return a

    got = []
    for i in range(3):
        x = mge.tensor(np.arange(12, dtype="float32").reshape(3, 4) * (i + 1))
        got.append(f(x).numpy().tolist())
    # MegEngine 1.13's eager function (its trace raises at the second call): each call's input, each call's mean
    assert got == [[[float(v * (i + 1)) for v in range(r * 4, r * 4 + 4)] for r in range(3)] for i in range(3)]
    assert log == [5.5, 11.0, 16.5]
    # and eager work goes on after the traced calls (MegEngine's next mge.tensor raised there)
    assert (mge.tensor([1.0, 2.0]) + 1).numpy().tolist() == [2.0, 3.0]


def test_transform_errors_are_megengines_types():
    img = np.zeros((3, 17, 3), "uint8")
    # MegEngine 1.13: AssertionError('output size is bigger than image size') (data fuzzer seed 33)
    with pytest.raises(AssertionError):
        T.CenterCrop((5, 14)).apply(img)
    # MegEngine 1.13: NotImplementedError (its _apply_coords) for keypoints through a TorchTransformCompose
    with pytest.raises(NotImplementedError):
        T.TorchTransformCompose([lambda im: im], order=("image", "keypoints")).apply((img, np.zeros((2, 2), "float32")))
