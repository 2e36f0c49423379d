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


def test_masked_pixels_of_nchw_predictions():
    # Segmentation loss: move classes last, keep the pixels whose label is not the ignore label, then a plain
    # cross entropy over the kept (pixels, classes) rows.
    rng = np.random.RandomState(0)
    pred = rng.randn(2, 3, 4, 4).astype("float32")
    label = rng.randint(0, 3, size=(2, 4, 4)).astype("int32")
    label[0, 0, :] = 255
    p, lab = mge.tensor(pred), mge.tensor(label)
    mask = lab != 255
    kept = p.transpose(0, 2, 3, 1)[mask]
    assert kept.shape == (int(mask.sum()), 3) == (28, 3)
    loss = F.loss.cross_entropy(kept, lab[mask], 1)
    rows = pred.transpose(0, 2, 3, 1)[label != 255]
    logp = rows - np.log(np.exp(rows).sum(1, keepdims=True))
    want = -logp[np.arange(len(rows)), label[label != 255]].mean()
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-5)


def test_slice_bound_cast_from_a_float_info_tensor():
    # Detectors keep each image's ground-truth rows with a bound read from a float "image info" tensor.
    gt = mge.tensor(np.arange(2 * 4 * 5, dtype="float32").reshape(2, 4, 5))
    info = mge.tensor([[8.0, 8.0, 8.0, 8.0, 3.0], [8.0, 8.0, 8.0, 8.0, 1.0]])
    rows = [gt[b, : info[b, 4].astype("int32")] for b in range(2)]
    assert [r.shape for r in rows] == [(3, 5), (1, 5)]
    np.testing.assert_array_equal(rows[1].numpy(), np.arange(20, 25, dtype="float32")[None])


def test_qat_step_then_quantize_matches_fake_quant_inference():
    # The quantization recipe: quantize_qat, a training step, quantize, integer inference. Without pooling in
    # between, the integer model reproduces the fake-quantized model's outputs exactly.
    import megxla.module as M
    import megxla.quantization as Q
    from megxla.autodiff import GradManager
    from megxla.optimizer import SGD
    from megxla.quantization.quantize import quantize, quantize_qat

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.q, self.dq = M.QuantStub(), M.DequantStub()
            self.conv = M.ConvBnRelu2d(3, 4, 3, padding=1)
            self.fc = M.Linear(4 * 4 * 4, 3)

        def forward(self, x):
            return self.dq(self.fc(F.flatten(self.conv(self.q(x)), 1)))

    np.random.seed(0)
    net = Net()
    quantize_qat(net, qconfig=Q.ema_fakequant_qconfig)
    x = mge.tensor(np.random.rand(2, 3, 4, 4).astype("float32"))
    gm = GradManager().attach(net.parameters())
    opt = SGD(net.parameters(), lr=0.1, momentum=0.9)
    net.train()
    with gm:
        gm.backward(F.loss.cross_entropy(net(x), mge.tensor([0, 2]), label_smooth=0.1))
    opt.step().clear_grad()
    net.eval()
    fake = net(x).numpy()
    quantize(net)
    # (MegEngine's own tests allow one output step: the fake-quantized path sums dequantized floats, the quantized
    # one integers rescaled, and a value within rounding of a step's half rounds either way -- 4 of 40 seeds here)
    from megxla.core.tensor.dtype import get_scale
    step = get_scale(net.fc(F.flatten(net.conv(net.q(x)), 1)).dtype)
    got = net(x).numpy()
    np.testing.assert_allclose(got, fake, rtol=0, atol=step * 1.001)


def test_compiled_step_with_per_image_counts_follows_eager():
    # A detection-style step: per image, the rows up to a count cast from a float info tensor enter the loss.
    # Under xla_trace the count is a host read; a batch with another count must not reuse the first one.
    import warnings

    import megxla.module as M
    from megxla.autodiff import GradManager
    from megxla.jit import xla_trace
    from megxla.optimizer import SGD

    rng = np.random.RandomState(1)
    batches = []
    for counts in ((2, 1), (3, 1), (2, 1)):
        gt = rng.rand(2, 3, 4).astype("float32")
        info = np.array([[0, 0, 0, 0, c] for c in counts], "float32")
        batches.append((gt, info))

    def run(compiled):
        mge.random.seed(0)
        net = M.Linear(4, 1)
        gm = GradManager().attach(net.parameters())
        opt = SGD(net.parameters(), lr=0.1)

        def step(net, opt, gt, info):
            with gm:
                loss = 0
                for b in range(2):
                    loss = loss + net(gt[b, : info[b, 4].astype("int32")]).sum()
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

        f = xla_trace(step) if compiled else step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            losses = [float(f(net, opt, mge.tensor(g), mge.tensor(i)).numpy()) for g, i in batches]
        return losses, net.weight.numpy()

    (le, we), (lc, wc) = run(False), run(True)
    np.testing.assert_allclose(lc, le, rtol=1e-5)
    np.testing.assert_allclose(wc, we, rtol=1e-5)


def test_random_size_given_as_a_count_tensor():
    # Box sampling fills the masked entries with uniform noise whose size is the mask's count, a 0-d tensor.
    from megxla.random import uniform

    labels = mge.tensor([1, 0, 1, 1, 0])
    mask = labels == 1
    noise = F.zeros_like(labels).astype("float32")
    noise[mask] = uniform(size=mask.sum())
    got = noise.numpy()
    assert got.shape == (5,) and (got[[1, 4]] == 0).all() and ((got[[0, 2, 3]] > 0) & (got[[0, 2, 3]] < 1)).all()


def test_topk_with_a_negative_k_flips_the_order():
    # A sampler drops the surplus of candidates with `topk(noise, k=wanted - available)`, a negative k.
    # MegEngine passes k's sign to its kernel (descending negates k, a negative k takes the largest), so a
    # negative k takes -k elements in the opposite order; k=0 is an error.
    import pytest
    from megxla.core._dispatch import OpError

    x = mge.tensor([0.5, 0.0, 0.9, 0.1, 0.3])
    v, i = F.topk(x, -2, descending=False)
    np.testing.assert_allclose(v.numpy(), [0.9, 0.5])
    assert i.numpy().tolist() == [2, 0]
    v, i = F.topk(x, -2)  # descending=True (MegEngine 1.13's default) with a negative k: the smallest
    np.testing.assert_allclose(v.numpy(), [0.0, 0.1])
    assert F.topk(x, -9, descending=False)[0].shape == (5,)  # |k| is clamped like k
    with pytest.raises(OpError, match="topk: k=0"):
        F.topk(x, 0)


def test_compiled_qat_conv_bn_step_follows_eager():
    # The quantization recipe's training step: a QAT conv-BN-ReLU (BN folded into the fake-quantized conv).
    import megxla.module as M
    import megxla.quantization as Q
    from megxla.autodiff import GradManager
    from megxla.jit import xla_trace
    from megxla.optimizer import SGD
    from megxla.quantization.quantize import quantize_qat

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.q, self.dq = M.QuantStub(), M.DequantStub()
            self.conv = M.ConvBnRelu2d(3, 8, 3, padding=1)
            self.fc = M.Linear(8, 4)

        def forward(self, x):
            return self.dq(self.fc(F.flatten(F.adaptive_avg_pool2d(self.conv(self.q(x)), 1), 1)))

    rng = np.random.RandomState(1)
    x, y = rng.rand(2, 3, 8, 8).astype("float32"), rng.randint(0, 4, 2).astype("int32")

    def run(compiled):
        mge.random.seed(0)
        net = Net()
        quantize_qat(net, qconfig=Q.ema_fakequant_qconfig)
        net.train()
        gm = GradManager().attach(net.parameters())
        opt = SGD(net.parameters(), lr=0.1)

        def step(net, opt, x, y):
            with gm:
                gm.backward(F.loss.cross_entropy(net(x), y, label_smooth=0.1))
            opt.step().clear_grad()

        (xla_trace(step) if compiled else step)(net, opt, mge.tensor(x), mge.tensor(y))
        return net.fc.bias.numpy(), net.conv.conv.weight.numpy()

    for got, want in zip(run(True), run(False)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_masked_write_of_one_value_needs_no_host_read():
    # Anchor matchers label anchors with `labels[mask] = value`. Writing one value under a mask keeps every
    # shape, so a compiled step must not depend on the mask's contents (one executable, no re-recording).
    from megxla.jit import xla_trace

    def relabel(scores):
        labels = F.zeros_like(scores)
        labels[scores > 0.5] = 1
        labels[scores < 0.2] = -1.0
        return labels

    x = mge.tensor(np.arange(6, dtype="float32").reshape(3, 2))
    x[mge.tensor([True, False, True])] = 9  # a leading mask covers whole rows; the value takes x's dtype
    assert x.numpy().tolist() == [[9.0, 9.0], [2.0, 3.0], [9.0, 9.0]]
    step = xla_trace(relabel)
    for seed in range(3):
        s = np.random.RandomState(seed).rand(7).astype("float32")
        np.testing.assert_array_equal(step(mge.tensor(s)).numpy(), relabel(mge.tensor(s)).numpy())
    assert step.num_rerecords == 0
