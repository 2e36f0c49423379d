"""Where MegEngine 1.13's transforms fail inside OpenCV, megxla's checks raise an error that is OpenCV's ``cv2.error``
too (and a ``ValueError``): code catching ``cv2.error`` around a transform catches it (data fuzz seeds 23-24; the
probe printed ``cv2.error`` for each of these under MegEngine 1.13.0)."""
import numpy as np
import pytest

import megxla.data.transform as T
from megxla.data.transform.vision import functional as VF

cv2 = pytest.importorskip("cv2")


@pytest.mark.parametrize("call", [
    lambda: T.Resize((0, 3)).apply(np.zeros((4, 4, 3), np.uint8)),  # a resize to an empty size
    lambda: VF.to_gray(np.zeros((4, 4, 1), np.uint8)),  # a grey level of a one-channel image
    lambda: T.SaturationTransform(0.5).apply(np.zeros((4, 4, 1), np.uint8)),
], ids=["resize to 0", "to_gray of 1 channel", "saturation of 1 channel"])
def test_errors_opencv_raises_in_megengine_are_cv2_errors(call):
    with pytest.raises(cv2.error):
        call()
    with pytest.raises(ValueError):
        call()
