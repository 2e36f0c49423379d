"""MegEngine's official model zoo (MegEngine/Models), run unmodified on MegEngine 1.13.0 (CPU) and on megxla with the
same weights and inputs: the pieces the zoo's detectors, segmenter and quantization recipe are built from, each
reduced to a few lines in our own words, with the numbers MegEngine 1.13.0 printed for them.

MegEngine was run with ``megengine.config.async_level = 0``: in its default asynchronous mode MegEngine 1.13's CPU
build loses boolean-mask writes (``a[mask] = inf`` leaves ``a`` unchanged) and crashes in the backward of an
indexing write (an out-of-range garbage index), on exactly these programs.
"""
import numpy as np

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.quantization as Q
from megxla.autodiff import GradManager
from megxla.quantization.quantize import quantize, quantize_qat


def test_class_aware_nms_by_offsetting_boxes_per_class():
    # The detectors' batched NMS shifts each class's boxes by (max coordinate + 1) * class, then one NMS
    # (the zoo docstring's own example and MegEngine's output).
    x = np.zeros((100, 4))
    np.random.seed(42)
    x[:, :2] = np.random.rand(100, 2) * 20
    x[:, 2:] = np.random.rand(100, 2) * 20 + 100
    scores = mge.tensor(np.random.rand(100))
    idxs = mge.tensor(np.random.randint(0, 10, 100))
    boxes = mge.tensor(x)
    offsets = idxs.detach().astype("float32") * (boxes.max() + 1)
    keep = F.nn.nms(boxes + offsets.reshape(-1, 1), scores, 0.6, None)
    assert keep.numpy().tolist() == [75, 41, 99, 98, 69, 64, 11, 27, 35, 18]


def _rng_tensors():
    rng = np.random.RandomState(3)
    logits = rng.randn(6, 4).astype("float32")
    deltas = rng.randn(6, 4).astype("float32")
    return logits, deltas, rng.randn(6, 4).astype("float32")


def test_anchor_matching_focal_and_l1_losses_with_gradients():
    # RetinaNet's training targets and losses: IoU of ground truth vs anchors, best match per anchor with
    # ignore band [0.4, 0.5), class labels written through a mask from the matched rows, one-hot targets written
    # with (mask, label - 1) indices, sigmoid focal loss over the non-ignored anchors and L1 over the foreground,
    # both divided by the foreground count.
    anchors = mge.tensor([[0, 0, 10, 10], [5, 5, 15, 15], [10, 10, 20, 20], [0, 10, 10, 20], [2, 2, 9, 9],
                          [12, 0, 20, 8]], dtype="float32")
    gt = mge.tensor([[1, 1, 9, 10, 3], [11, 9, 19, 21, 1]], dtype="float32")
    b1, b2 = F.expand_dims(gt[:, :4], 1), F.expand_dims(anchors, 0)
    wh = F.maximum(F.minimum(b1[..., 2:], b2[..., 2:]) - F.maximum(b1[..., :2], b2[..., :2]), 0)
    inter = wh[..., 0] * wh[..., 1]

    def area(b):
        return (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])

    iou = inter / (area(b1) + area(b2) - inter)
    np.testing.assert_allclose(iou.numpy(), [[0.72, 0.13157895, 0.0, 0.0, 0.68055558, 0.0],
                                             [0.0, 0.13953489, 0.68965518, 0.0, 0.0, 0.0]], rtol=1e-6)
    match, best = F.argmax(iou, axis=0), F.max(iou, axis=0)
    labels = F.zeros(6, dtype="int32")
    labels[best >= 0.5] = 1
    labels[(best >= 0.4) & (best < 0.5)] = -1
    fg = labels == 1
    labels[fg] = gt[match][fg, 4].astype("int32")
    assert labels.numpy().tolist() == [3, 0, 1, 0, 3, 0]

    lg0, dl0, toff = _rng_tensors()
    logits, deltas = mge.Parameter(lg0), mge.Parameter(dl0)
    gm = GradManager().attach([logits, deltas])
    with gm:
        valid, fgm = labels >= 0, labels > 0
        nfg = fgm.sum()
        tgt = F.zeros_like(logits)
        tgt[fgm, labels[fgm] - 1] = 1
        lg, tg = logits[valid], tgt[valid]
        p = F.sigmoid(lg)
        ce = F.log(1 + F.exp(-F.abs(lg))) + F.relu(lg) - lg * tg
        pt = p * tg + (1 - p) * (1 - tg)
        focal = (ce * (1 - pt) ** 2 * (0.25 * tg + 0.75 * (1 - tg))).sum() / F.maximum(nfg, 1)
        l1 = F.abs(deltas[fgm] - mge.tensor(toff)[fgm]).sum() / F.maximum(nfg, 1)
        gm.backward(focal + l1)
    np.testing.assert_allclose([focal.item(), l1.item()], [1.7042045593261719, 3.244551420211792], rtol=1e-6)
    np.testing.assert_allclose(logits.grad.numpy()[[0, 3, 5]], [
        [0.25938236713409424, 0.12374845147132874, -0.02176247350871563, 0.001731355907395482],
        [0.17829611897468567, 0.25483956933021545, 0.07965312898159027, 0.040572911500930786],
        [0.008809595368802547, 0.0556546226143837, 0.23927272856235504, 0.10003557801246643]], rtol=1e-5, atol=1e-7)
    third = 1 / 3
    np.testing.assert_allclose(deltas.grad.numpy(), [
        [third, -third, -third, -third], [0] * 4, [-third, third, -third, -third], [0] * 4,
        [-third, third, -third, -third], [0] * 4], rtol=1e-6)


def test_smallest_area_assignment_written_into_a_broadcast_tensor():
    # FCOS: each point takes the ground truth of smallest area among those whose level and box contain it;
    # the areas are a broadcast_to of the per-box areas, masked to inf twice, then argmin / indexing_one_hot.
    gt_area = mge.tensor([30.0, 12.0, 50.0])
    in_level = mge.tensor(np.array([[1, 1, 0, 1, 0], [1, 0, 1, 1, 0], [0, 1, 1, 1, 1]], bool))
    in_box = mge.tensor(np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 1, 0]], bool))
    areas = F.broadcast_to(F.expand_dims(gt_area, 1), (3, 5))
    areas[~in_level] = float("inf")
    areas[~in_box] = float("inf")
    match = F.argmin(areas, axis=0)
    assert match.numpy().tolist() == [1, 0, 1, 1, 0]
    assert F.indexing_one_hot(areas, match, axis=0).numpy().tolist() == [12.0, 30.0, 12.0, 12.0, float("inf")]
    np.testing.assert_array_equal(gt_area.numpy(), [30.0, 12.0, 50.0])  # the broadcast source is untouched


class _QatNet(M.Module):
    # the quantization zoo's layout: QuantStub -> fused conv-BN-ReLU -> quantized add -> DequantStub -> float fc
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.cbr = M.ConvBnRelu2d(2, 3, 3, padding=1)
        self.add = M.Elemwise("add")
        self.dequant = M.DequantStub()
        self.fc = M.Linear(3, 2)

    def forward(self, x):
        y = self.cbr(self.quant(x))
        return self.fc(self.dequant(self.add(y, y)).mean(axis=(2, 3)))


def test_qat_training_then_int8_conversion():
    # quantize_qat(ema_fakequant_qconfig), two SGD steps in training mode (observers update), QAT inference,
    # quantize, int8 inference: MegEngine's losses, gradients and outputs.
    rng = np.random.RandomState(0)
    net = _QatNet()
    shapes = dict((k, v.shape) for k, v in net.state_dict().items())
    sd = {}
    for k in sorted(shapes):  # MegEngine's state_dict order
        sd[k] = rng.randn(*shapes[k]).astype("float32") * 0.5 if ("weight" in k or "bias" in k) else None
    sd["cbr.bn.running_mean"] = np.zeros(shapes["cbr.bn.running_mean"], "float32")
    sd["cbr.bn.running_var"] = np.ones(shapes["cbr.bn.running_var"], "float32")
    sd["cbr.bn.weight"] = np.abs(sd["cbr.bn.weight"]) + 0.5
    net.load_state_dict(sd)
    net.fc.disable_quantize()
    quantize_qat(net, qconfig=Q.ema_fakequant_qconfig)
    x = mge.tensor(rng.randn(2, 2, 4, 4).astype("float32"))
    label = mge.tensor([0, 1], dtype="int32")
    gm = GradManager().attach(net.parameters())
    opt = mge.optimizer.SGD(net.parameters(), lr=0.1)
    net.train()
    losses = []
    for step in range(2):
        with gm:
            out = net(x)
            loss = F.nn.cross_entropy(out, label)
            gm.backward(loss)
        if step == 0:
            np.testing.assert_allclose(out.numpy(), [[-1.805387258529663, 0.13001111149787903],
                                                     [-2.4548823833465576, -0.9427913427352905]], rtol=1e-5)
            np.testing.assert_allclose(net.cbr.conv.weight.grad.numpy().ravel()[:6], [
                0.05641131103038788, 0.023747507482767105, 0.004744540899991989, 0.02626417577266693,
                -0.0019014999270439148, 0.0032863900996744633], rtol=1e-4, atol=1e-7)
        opt.step().clear_grad()
        losses.append(loss.item())
    np.testing.assert_allclose(losses, [1.1347341537475586, 0.9675651788711548], rtol=1e-6)
    net.eval()
    want = [[-2.236842155456543, -1.2376962900161743], [-3.0822105407714844, -2.5841000080108643]]
    np.testing.assert_allclose(net(x).numpy(), want, rtol=1e-5)
    quantize(net)
    net.eval()
    np.testing.assert_allclose(net(x).numpy(), want, rtol=1e-5)


def test_concat_of_a_shape_tensor_with_python_ints():
    # The zoo's BERT builds reshape targets as F.concat([mge.tensor(x.shape)[:-1], (heads, head_size)]).
    # MegEngine 1.13 raises TypeError ("py_apply expects tensor as inputs") there, so the zoo's BERT does not run
    # on it; megxla converts the Python pieces (docs/differences.md) and the zoo's BERT runs.
    shape = mge.tensor((2, 16, 64))
    new = F.concat([shape[:-1], (4, 16)])
    assert new.numpy().tolist() == [2, 16, 4, 16] and new.dtype == np.int32
    x = F.zeros((2, 16, 64))
    assert x.reshape(new).shape == (2, 16, 4, 16)
    assert F.concat([shape[:-2], 64]).numpy().tolist() == [2, 64]


def fpn_pool(fms, rois, strides, pool_shape):
    """The zoo's Faster R-CNN pooler (``layers/det/pooler.py``): each RoI pooled at the FPN level its size selects,
    one all-zero placeholder RoI per level, the pooled rows put back in RoI order and the placeholders' dropped."""
    area = (rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2])
    level = F.floor(4 + F.log(F.sqrt(area) / 224) / np.log(2)).astype("int32")
    level = F.maximum(F.minimum(level, 5), 2) - 2
    level = F.concat([level, F.arange(4, dtype="int32")])
    all_rois = F.concat([rois, F.zeros((4, 5))])
    pooled, order = [], []
    for i, s in enumerate(strides):
        _, inds = F.cond_take(level == i, level)
        pooled.append(F.nn.roi_align(fms[i], all_rois[inds], pool_shape, mode="average", spatial_scale=1.0 / s,
                                     sample_points=2, aligned=True))
        order.append(inds)
    return F.concat(pooled)[F.argsort(F.concat(order))][:-4]


def test_multi_level_roi_align_with_placeholder_rois():
    # Faster R-CNN's pooler: each RoI goes to the FPN level its size selects; one all-zero placeholder RoI per level
    # keeps every level non-empty; the pooled rows are put back in RoI order and the placeholders' rows dropped.
    # MegEngine's level-0 gradient (the only level real RoIs reach here); the placeholders' levels get none (there
    # MegEngine 1.13's CPU roi_align backward returns uninitialised memory, docs/differences.md).
    rng = np.random.RandomState(0)
    strides = [4, 8, 16, 32]
    fms = [mge.Parameter(rng.randn(1, 4, 128 // s, 128 // s).astype("float32")) for s in strides]
    xy, wh = rng.uniform(0, 100, size=(20, 2)), rng.uniform(4, 120, size=(20, 2))
    rois = mge.tensor(np.concatenate([np.zeros((20, 1)), xy, np.minimum(xy + wh, 127)], 1).astype("float32"))
    gm = GradManager().attach(fms)
    with gm:
        out = fpn_pool(fms, rois, strides, (7, 7))
        gm.backward((out * mge.tensor(np.arange(out.size, dtype="float32").reshape(out.shape) / out.size)).sum())
    assert out.shape == (20, 4, 7, 7)
    np.testing.assert_allclose(out.sum().item(), -184.81399536132812, rtol=1e-5)
    g0 = fms[0].grad.numpy()
    np.testing.assert_allclose([np.abs(g0).max(), g0.sum()], [3.367934, 1959.5], rtol=1e-5)
    for f in fms[1:]:
        assert not np.any(f.grad.numpy())
