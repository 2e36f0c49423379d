"""What MegEngine/MegEngine-Benchmark (the ResNet / ShuffleNet / ViT / Swin / detection benchmark scripts: a
train step with GradManager + SGD, optionally under ``jit.trace``, ``amp.autocast`` or ``quantize_qat``) relies
on, with the values MegEngine 1.13.0 gives (CPU wheel)."""
import numpy as np

import megxla as mge
import megxla.module as M
import megxla.quantization as Q


class _Cat(M.Module):
    # the benchmark's quantizable ShuffleNetV2 block: a QuantStub'd input, then M.Concat of two branches
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.cat = M.Concat()
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.quant(x)
        return self.dequant(self.cat([x, x * 2], axis=1))


def test_qat_concat_keeps_a_weight_observer_and_fake_quant_as_megengine():
    # MegEngine's qat.Concat does not turn QATModule's with_weight off (only Elemwise and the stubs do), so its
    # checkpoints hold cat.weight_observer.* (and TQT's cat.weight_fake_quant.scale, a parameter): a strict
    # load_state_dict of MegEngine's QAT ShuffleNet raised "Unused params" here
    net = Q.quantize_qat(_Cat(), qconfig=Q.min_max_fakequant_qconfig)
    assert net.cat.with_weight is True
    sd = net.state_dict()
    # MegEngine 1.13.0: the four cat entries, the unfed weight observer at its initial +-float32 max
    assert sorted(k for k in sd if k.startswith("cat.")) == [
        "cat.act_observer.max_val", "cat.act_observer.min_val",
        "cat.weight_observer.max_val", "cat.weight_observer.min_val"]
    big = np.finfo(np.float32).max
    assert float(np.asarray(sd["cat.weight_observer.min_val"])) == big
    assert float(np.asarray(sd["cat.weight_observer.max_val"])) == -big
    y = net(mge.tensor(np.arange(6, dtype="float32").reshape(1, 2, 3)))
    assert y.shape == (1, 4, 3)
    net.load_state_dict(sd, strict=True)

    tqt = Q.quantize_qat(_Cat(), qconfig=Q.tqt_qconfig)
    names = [n for n, _ in tqt.named_parameters()]
    # MegEngine 1.13.0: ['quant.act_fake_quant.scale', 'cat.act_fake_quant.scale', 'cat.weight_fake_quant.scale']
    assert sorted(names) == ["cat.act_fake_quant.scale", "cat.weight_fake_quant.scale", "quant.act_fake_quant.scale"]
    # the switches reach it with the rest (MegEngine 1.13.0: False True, then False False)
    Q.disable_fake_quant(net)
    assert (net.cat.weight_fake_quant.enabled, net.cat.weight_observer.enabled) == (False, True)
    Q.disable_observer(net)
    assert (net.cat.weight_fake_quant.enabled, net.cat.weight_observer.enabled) == (False, False)
