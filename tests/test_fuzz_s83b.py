"""Session 83's fuzz runs against MegEngine 1.13 (scripts/megengine_module_fuzz.py seeds 36 to 39, 200 cases each;
scripts/megengine_quant_fuzz.py seeds 36 to 41, 60 cases each; probes under /tmp/s83/fb).

No megxla fault was found. The one disagreement (quant seed 41 case 30) was a straight-through tie at a 4-bit EMA
observer's own maximum after its first batch: x / scale = 7.5 for MegEngine's maximum, 7.4999995 for megxla's (an
ulp apart, from the BatchNorm before it), so MegEngine's fake quant stopped that element's gradient and megxla's
passed it; MegEngine itself gives megxla's gradients once that BatchNorm's bias moves by 1e-7. This guards what
made it a rounding flip and not a fault: given the same maximum, megxla's qint4 observers and fake quant compute
MegEngine's scale, output and gradient mask bit for bit. The expected values are what MegEngine 1.13.0 printed for
the same code; MegEngine is not needed here.
"""
import numpy as np
import pytest

import megxla as mge
import megxla.quantization as Q
from megxla.autodiff import GradManager
from megxla.quantization.fake_quant import FakeQuantize

# (maximum, MegEngine's scale, its fake-quantized [0, 0.5, maximum], its gradient of their sum)
_TIES = [
    ("1.4788424", "0.19717899", ["0", "0.591537", "1.380253"], [1.0, 1.0, 0.0]),  # x / scale = 7.5: stopped
    ("1.4788423", "0.19717897", ["0", "0.59153694", "1.3802528"], [1.0, 1.0, 1.0]),  # 7.4999995: passed
]


@pytest.mark.parametrize("observer", [Q.ExponentialMovingAverageObserver, Q.MinMaxObserver])
@pytest.mark.parametrize("top, scale, out, grad", _TIES)
def test_qint4_fake_quant_at_the_first_batchs_maximum_as_megengine(observer, top, scale, out, grad):
    # quant fuzz seed 41 case 30 (ema_lowbit_fakequant_qconfig): an EMA observer's first batch sets its range to the
    # batch's, so its maximum sits on the straight-through mask's tie as a min-max observer's does
    x = mge.tensor(np.array([0.0, 0.5, np.float32(top)], "float32"))
    obs = observer(dtype="qint4")
    obs.train()
    obs(x)
    fq = FakeQuantize(dtype="qint4")
    fq.train()
    gm = GradManager().attach([x])
    with gm:
        y = fq(x, obs.get_qparams())
        gm.backward(y.sum())
    assert obs.get_qparams().scale.numpy().tolist() == np.float32(scale).tolist()
    np.testing.assert_array_equal(y.numpy(), np.array(out, "float32"))
    assert x.grad.numpy().tolist() == grad
