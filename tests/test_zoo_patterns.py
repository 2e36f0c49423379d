"""Code patterns of MegEngine's official model zoo (MegEngine/Models: classification, detection, segmentation,
quantization) that megxla once got wrong, each reduced to a few lines in our own words and asserting what
MegEngine 1.13 does. Found by running the zoo unmodified through ``megxla.as_megengine``."""
import numpy as np

import megxla as mge
import megxla.functional as F


def test_concat_of_scalars_read_from_a_tensor():
    # Detectors rescale boxes by per-image factors read out of `im_info` as 0-d tensors and concatenated:
    # MegEngine stores a 0-d tensor as one element, so the result is 1-d with one entry per scalar.
    info = mge.tensor([[8.0, 6.0, 4.0, 3.0]])
    sw, sh = info[0, 1] / info[0, 3], info[0, 0] / info[0, 2]
    scale = F.concat([sw, sh, sw, sh], axis=0)
    assert scale.shape == (4,)
    np.testing.assert_allclose(scale.numpy(), [2.0, 2.0, 2.0, 2.0])
    # scalars beside 1-d tensors join the same way
    assert F.concat([sw, F.zeros((2,))]).shape == (3,)


def test_tabulate_is_importable_beside_megengine():
    # MegEngine's wheel installs tabulate; the zoo's detection and segmentation tools import it at module level.
    from tabulate import tabulate

    assert "a" in tabulate([[1]], headers=["a"])
