"""Eager-written training loops, as MegEngine's zoo writes them (``loss.item()`` logged every step): eager vs
auto-jit (``megxla.config.auto_jit = True``, no decorator) vs the same step under ``xla_trace``.

    python benchmarks/eager_loop.py                     # MLP b128, ConvNet b8/b64, Transformer, the host-read step
    python benchmarks/eager_loop.py --only mlp --steps 30
    python benchmarks/eager_loop.py --cut-backward      # auto-jit cutting at gm.backward too (the GPU experiment)
    python benchmarks/eager_loop.py --no-early          # auto-jit running each cluster only once collected in full
    python benchmarks/eager_loop.py --hostread-bounds   # the host-read step as written, padded, with no host read

Columns are ms/step (median of the timed steps after ``--warmup`` steps, each step ending in ``loss.item()``) and
the ratios. Every (workload, mode) runs in a fresh process, in interleaved rounds (the fastest reported), so no
mode runs on kernels another one compiled: for the data-dependent workloads the numbers are those of steps
31-50 of a training run (by default). ``hostread`` is a ConvNet step that reads a data-dependent count on the
host (the number of positive logits) and then uses ``cond_take`` (output shape depends on values): under
``xla_trace`` each new count misses the guard; under auto-jit the clusters before and after the read are compiled
once each. ``countread`` is the MLP step with its loss normalised by a count of its labels read on the host
(``int((y != 0).sum())``, an ignore label's rows left out): under auto-jit that integer reduction of an input
is computed by itself, no cut. ``detection`` is the model zoo's RetinaNet training step written eagerly (IoU
anchor matching, labels through boolean masks, focal + L1 losses divided by the foreground count read on the host)
on a small detector, ground-truth counts changing every batch;
``detection_zoo`` the same on the zoo's data layout (boxes padded per image, cut to their count); ``fg_head`` a
second stage's cross-entropy and softmax on the proposals a score selects (their number changing every batch).
``loader`` is ConvNet b8's loop fed by a ``DataLoader`` with two worker processes (the same batches, from an
``ArrayDataset``), each step timed from the fetch of its batch: the workers' processes share the cores with the
step, as in a real training run.

Then the same ratios with the three modes taking turns in one process (``--interleaved``, default MLP and the
ConvNets: a noisy machine's drift between processes is larger than the gaps measured), with the CPU time of the same
steps (the process's and the calling thread's: on a CPU the compute and the Python issuing it share the cores).
The last tables are the host time of one op: eager dispatch (``apply`` -> jax) against collecting it into a cluster
(shape inference cached), on a chain of small elementwise ops; and the host CPU time of a whole training step at
tiny shapes (``host_per_step``: what its Python costs eagerly, under auto-jit -- with its backward collected as one
op, and with each gradient op collected on its own -- and as an ``xla_trace`` call).

``--hostread-bounds`` asks what would make the host-read step's goal (auto-jit at half its eager time) reachable:
the step as written against the same step with its selection padded to a bucket (what compiling counts as
symbolic, padded sizes would give) and with no host read at all (the loss as a mask on the device: no cut in the
middle of the step), each eager and under auto-jit, and the latter as an ``xla_trace`` step.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import megxla as mge  # noqa: E402
import megxla.functional as F  # noqa: E402
import megxla.module as M  # noqa: E402
import megxla.optimizer as optim  # noqa: E402
from megxla.autodiff import GradManager  # noqa: E402
from megxla.jit import xla_trace, auto_jit_stats, reset_auto_jit_stats  # noqa: E402

import models  # noqa: E402

MODES = ("eager", "auto_jit", "xla_trace")


def _setup(wl, seed=0):
    mge.random.seed(seed)
    model = wl.build()
    opt = wl.make_optimizer(model.parameters())
    gm = GradManager().attach(model.parameters())
    return model, opt, gm


def _batches(wl, n):
    rng = np.random.RandomState(1)
    return [wl.inputs(rng) for _ in range(n)]


def loop_step(model, opt, gm, x, y):
    with gm:
        loss = F.nn.cross_entropy(model(x), y)
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


def hostread_step(model, opt, gm, x, y):
    """A step whose host read changes every call: the number of positive logits, then cond_take of them."""
    with gm:
        logits = model(x)
        n = int((logits > 0).sum())  # data-dependent host read
        pos, _ = F.cond_take(logits > 0, logits)
        loss = F.nn.cross_entropy(logits, y) + 0.01 * pos.sum() / max(n, 1)
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


def countread_step(model, opt, gm, x, y):
    """The MLP step with its loss normalised by the number of labels that are not class 0 (an ignore label, as a
    segmentation or language model's loss leaves out its padding), read on the host: a count that changes every
    batch but comes from the input alone."""
    with gm:
        logits = model(x)
        valid = y != 0
        n = max(int(valid.sum()), 1)  # a host read of the labels only
        loss = (F.nn.cross_entropy(logits, y, reduction="none") * valid.astype("float32")).sum() / n
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


class _Detector(M.Module):
    """A RetinaNet-style one-stage detector, small: a conv backbone, then per-anchor class logits and box
    deltas on an 8x8 grid with 3 anchors per cell (192 anchors), 4 classes."""

    def __init__(self, classes=4, anchors=3):
        super().__init__()
        self.body = M.Sequential(M.Conv2d(3, 16, 3, 2, 1, bias=False), M.BatchNorm2d(16), M.ReLU(),
                                 M.Conv2d(16, 32, 3, 2, 1, bias=False), M.BatchNorm2d(32), M.ReLU())
        self.cls = M.Conv2d(32, anchors * classes, 3, 1, 1)
        self.box = M.Conv2d(32, anchors * 4, 3, 1, 1)
        self.classes = classes

    def forward(self, x):
        f = self.body(x)
        n = x.shape[0]
        cls = self.cls(f).transpose(0, 2, 3, 1).reshape(n, -1, self.classes)
        box = self.box(f).transpose(0, 2, 3, 1).reshape(n, -1, 4)
        return cls, box


def _anchors():
    ys, xs = np.meshgrid(np.arange(8) * 4.0, np.arange(8) * 4.0, indexing="ij")
    out = []
    for size in (4.0, 8.0, 12.0):
        out.append(np.stack([xs, ys, xs + size, ys + size], -1).reshape(-1, 4))
    return np.stack(out, 1).reshape(-1, 4).astype("float32")


_ANCHORS = _anchors()


class DetectionWorkload:
    """Ground-truth boxes whose count changes every batch (1 to 5 per image), as in a detection data set."""
    name = "detection"
    batch = 2

    @staticmethod
    def build():
        return _Detector()

    @staticmethod
    def make_optimizer(params):
        return optim.SGD(params, lr=0.01, momentum=0.9)

    @staticmethod
    def inputs(rng):
        x = rng.standard_normal((2, 3, 32, 32)).astype("float32")
        gts = []
        for _ in range(2):
            k = rng.randint(1, 6)
            xy = rng.uniform(0, 24, (k, 2))
            wh = rng.uniform(4, 12, (k, 2))
            gts.append(np.concatenate([xy, xy + wh, rng.randint(1, 5, (k, 1))], 1).astype("float32"))
        return x, gts


def detection_step(model, opt, gm, x, gts):
    """RetinaNet's training targets and losses (the zoo's detection train.py, eager): IoU matching with an ignore
    band, labels written through boolean masks, sigmoid focal loss and L1 over the foreground, each divided by the
    foreground count read on the host."""
    anchors = mge.Tensor(_ANCHORS)
    with gm:
        cls, box = model(x)
        total = 0
        for i, gt in enumerate(gts):
            total = total + _image_loss(cls[i], box[i], gt, anchors)
        gm.backward(total)
    opt.step().clear_grad()
    return total


class ZooDetectionWorkload(DetectionWorkload):
    """The zoo's data layout (its detection ``train.py``): each image's boxes padded to a fixed number (8), their
    count (1 to 8, changing every batch) in the image info's last column."""
    name = "detection_zoo"

    @staticmethod
    def inputs(rng):
        x = rng.standard_normal((2, 3, 32, 32)).astype("float32")
        gt, info = np.zeros((2, 8, 5), "float32"), np.zeros((2, 5), "float32")
        for b in range(2):
            k = rng.randint(1, 9)
            xy = rng.uniform(0, 24, (k, 2))
            gt[b, :k] = np.concatenate([xy, xy + rng.uniform(4, 12, (k, 2)), rng.randint(1, 5, (k, 1))], 1)
            info[b] = [32, 32, 32, 32, k]
        return x, [info, gt]


def zoo_detection_step(model, opt, gm, x, ys):
    """``detection_step`` on the zoo's layout: each image's boxes cut to their count, ``gt_boxes[i, :info[i, 4]]``
    (a host read of the count, as the zoo's RetinaNet reads it)."""
    info, gt_boxes = ys
    anchors = mge.Tensor(_ANCHORS)
    with gm:
        cls, box = model(x)
        total = 0
        for i in range(x.shape[0]):
            gt = gt_boxes[i, :info[i, 4].astype("int32")]
            total = total + _image_loss(cls[i], box[i], gt, anchors)
        gm.backward(total)
    opt.step().clear_grad()
    return total


class _Head(M.Module):
    """A second stage's head, small: features of 256 proposals, a score, and class logits (5 classes)."""

    def __init__(self):
        super().__init__()
        self.body = M.Sequential(M.Linear(16, 32), M.ReLU(), M.Linear(32, 8))
        self.cls = M.Linear(8, 5)

    def forward(self, x):
        return self.body(x)


class FgHeadWorkload:
    """Proposals whose foreground (a score above 0) changes in number every batch (the detectors' optimizer)."""
    name = "fg_head"
    build = staticmethod(_Head)
    make_optimizer = staticmethod(lambda params: DetectionWorkload.make_optimizer(params))

    @staticmethod
    def inputs(rng):
        return rng.standard_normal((256, 16)).astype("float32"), rng.randint(0, 5, 256).astype("int32")


def fg_head_step(model, opt, gm, x, labels):
    """A second stage's losses on its foreground rows, as third-party MegEngine code writes them: class logits of the
    selected proposals, softmax cross-entropy against their labels, and a penalty on their softmax."""
    with gm:
        f = model(x)
        fg = f[:, 0] > 0
        p = model.cls(f[fg])
        loss = F.nn.cross_entropy(p, labels[fg]) + (F.softmax(p, axis=1)[:, 1:] ** 2).mean()
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


class _Pooler(M.Module):
    """A two-stage detector's second stage, small: an FPN of 4 levels (a conv each), RoI Align at the level each RoI's
    size selects, a linear classifier (5 classes)."""

    def __init__(self):
        super().__init__()
        self.levels = [M.Conv2d(3, 4, 3, padding=1) for _ in range(4)]
        self.cls = M.Linear(4 * 7 * 7, 5)

    def forward(self, images):
        return [conv(im) for conv, im in zip(self.levels, images)]


class FpnPoolerWorkload:
    """64 RoIs a batch, of sizes spanning the 4 levels: each level's count changes every batch."""
    name = "fpn_pooler"
    build = staticmethod(_Pooler)
    make_optimizer = staticmethod(lambda params: DetectionWorkload.make_optimizer(params))

    @staticmethod
    def inputs(rng, n=64):
        xy, wh = rng.uniform(0, 100, (n, 2)), np.exp(rng.uniform(np.log(8), np.log(700), (n, 2)))
        rois = np.concatenate([np.zeros((n, 1)), xy, xy + wh], 1).astype("float32")
        return rois, rng.randint(0, 5, n).astype("int32")


_FPN_IMAGES = [np.random.RandomState(7).standard_normal((1, 3, 128 // s, 128 // s)).astype("float32")
               for s in (4, 8, 16, 32)]


def fpn_pooler_step(model, opt, gm, rois, labels):
    """The zoo's Faster R-CNN pooler (``layers/det/pooler.py``), eager: each RoI's level from its size, one placeholder
    RoI per level, ``cond_take`` of each level's RoIs, ``roi_align`` on that level, the pooled rows put back in RoI
    order and the placeholders' dropped; cross-entropy of a linear head on them."""
    with gm:
        fms = model([mge.Tensor(im) for im in _FPN_IMAGES])
        area = (rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2])
        level = F.floor(4 + F.log(F.sqrt(area) / 224) / np.log(2)).astype("int32")
        level = F.maximum(F.minimum(level, 5), 2) - 2
        level = F.concat([level, F.arange(4, dtype="int32")])
        all_rois = F.concat([rois, F.zeros((4, 5))])
        pooled, order = [], []
        for i, s in enumerate((4, 8, 16, 32)):
            _, inds = F.cond_take(level == i, level)
            pooled.append(F.nn.roi_align(fms[i], all_rois[inds], (7, 7), mode="average", spatial_scale=1.0 / s,
                                         sample_points=2, aligned=True))
            order.append(inds)
        feat = F.concat(pooled)[F.argsort(F.concat(order))][:-4]
        loss = F.nn.cross_entropy(model.cls(F.flatten(feat, 1)), labels)
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


def _image_loss(cls, box, gt, anchors):
    """One image's focal and L1 losses (``detection_step``'s)."""
    match, best = _best_iou(gt, anchors)
    labels = F.zeros(best.shape[0], dtype="int32")
    labels[best >= 0.5] = 1
    labels[(best >= 0.4) & (best < 0.5)] = -1
    fg = labels == 1
    labels[fg] = gt[match][fg, 4].astype("int32")
    valid, fgm = labels >= 0, labels > 0
    nfg = max(int(fgm.sum()), 1)  # the foreground count, read on the host (changes every batch)
    tgt = F.zeros_like(cls)
    tgt[fgm, labels[fgm] - 1] = 1
    lg, tg = cls[valid], tgt[valid]
    p = F.sigmoid(lg)
    ce = F.log(1 + F.exp(-F.abs(lg))) + F.relu(lg) - lg * tg
    pt = p * tg + (1 - p) * (1 - tg)
    focal = (ce * (1 - pt) ** 2 * (0.25 * tg + 0.75 * (1 - tg))).sum() / nfg
    l1 = F.abs(box[fgm] - (gt[match][fgm, :4] - anchors[fgm]) / 8).sum() / nfg
    return focal + l1


def _best_iou(gt, anchors):
    """Per anchor: the index of the ground-truth box it overlaps most, and that IoU."""
    b1, b2 = F.expand_dims(gt[:, :4], 1), F.expand_dims(anchors, 0)
    wh = F.maximum(F.minimum(b1[..., 2:], b2[..., 2:]) - F.maximum(b1[..., :2], b2[..., :2]), 0)
    inter = wh[..., 0] * wh[..., 1]
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
    iou = inter / (area(b1) + area(b2) - inter)
    return F.argmax(iou, axis=0), F.max(iou, axis=0)


def _match(gt, anchors):
    """``detection_step``'s matching without boolean selections: per anchor, the matched box index and the label
    (its class for a foreground anchor, -1 ignored, 0 background)."""
    match, best = _best_iou(gt, anchors)
    fg = best >= 0.5
    ignore = (best >= 0.4) & (best < 0.5)
    labels = F.where(fg, gt[match][:, 4].astype("int32"), F.where(ignore, F.full_like(match, -1), F.zeros_like(match)))
    return match, labels


def _masked_losses(model, x, gts, host_count):
    """``detection_step``'s losses with masks in place of its boolean selections (every shape fixed: what counts
    padded inside the compiled program would give at best), the foreground count still read on the host
    (``host_count``) or kept on the device (no cut at all)."""
    anchors = mge.Tensor(_ANCHORS)
    cls, box = model(x)
    total = 0
    for i, gt in enumerate(gts):
        match, labels = _match(gt, anchors)
        valid, fgm = (labels >= 0).astype("float32"), (labels > 0).astype("float32")
        nfg = max(int(fgm.sum()), 1) if host_count else F.maximum(fgm.sum(), 1)
        # (a comparison, not one_hot: one_hot checks its indices' range on the host, as MegEngine raises for one
        # out of range -- a read that would cut the step)
        tgt = (F.expand_dims(labels, 1) - 1 == F.arange(cls.shape[-1], dtype="int32")).astype("float32")
        lg = cls[i]
        p = F.sigmoid(lg)
        ce = F.log(1 + F.exp(-F.abs(lg))) + F.relu(lg) - lg * tgt
        pt = p * tgt + (1 - p) * (1 - tgt)
        focal = (ce * (1 - pt) ** 2 * (0.25 * tgt + 0.75 * (1 - tgt)) * F.expand_dims(valid, 1)).sum() / nfg
        l1 = (F.abs(box[i] - (gt[match][:, :4] - anchors) / 8) * F.expand_dims(fgm, 1)).sum() / nfg
        total = total + focal + l1
    return total


def masked_detection_step(model, opt, gm, x, gts):
    """``detection_step`` with masks in place of its selections, the foreground count read on the host."""
    with gm:
        total = _masked_losses(model, x, gts, host_count=True)
        gm.backward(total)
    opt.step().clear_grad()
    return total


def on_device_detection_step(model, opt, gm, x, gts):
    """``masked_detection_step`` with the foreground count kept on the device: no host read in the step. (A step
    function of its own: run beside ``masked_detection_step`` in one process, a shared ``opt.step()`` line would
    be one auto-jit site for both, its clusters alternating between the two steps' -- "keep changing".)"""
    with gm:
        total = _masked_losses(model, x, gts, host_count=False)
        gm.backward(total)
    opt.step().clear_grad()
    return total


def _stepper(mode, step_fn, gm):
    """``run(model, opt, gm, xs, ys) -> loss`` for ``mode``: the step on Tensors made from the host batch (labels, or
    a list of per-image arrays), under ``xla_trace`` (with ``gm``) or as written."""
    fn = step_fn
    if mode == "xla_trace":
        traced = xla_trace(lambda model, opt, x, y: step_fn(model, opt, gm, x, y))
        fn = lambda model, opt, gm, x, y: traced(model, opt, x, y)  # noqa: E731

    def run(model, opt, gm, xs, ys):
        ys = [mge.Tensor(g) for g in ys] if isinstance(ys, list) else mge.Tensor(ys)
        return fn(model, opt, gm, mge.Tensor(xs), ys)
    return run


def run_mode(mode, wl, step_fn, batches, warmup):
    model, opt, gm = _setup(wl)
    mge.config.auto_jit = mode == "auto_jit"
    run = _stepper(mode, step_fn, gm)
    times, losses = [], []
    batches = iter(batches)
    try:
        while True:
            t0 = time.perf_counter()  # (from the fetch of the batch: a DataLoader's, ``loader``, takes part)
            try:
                xs, ys = next(batches)
            except StopIteration:
                break
            losses.append(run(model, opt, gm, xs, ys).item())
            times.append(time.perf_counter() - t0)
    finally:
        mge.config.auto_jit = False
    timed = times[warmup:]
    return statistics.median(timed) * 1e3, times[0] * 1e3, losses


def interleaved(name, blocks=10, steps=20):
    """ms/step of each mode measured in ONE process, the modes taking turns in blocks of ``steps`` steps (their order
    rotating from block to block; the first 3 steps of each block and the first 2 blocks left out), each mode on its
    own model instance. On a machine whose speed drifts between processes (the 2-core VM of 2026-11-29: the same
    ``xla_trace`` step 10-40% apart in two processes) these ratios compare the same minutes; the fresh-process table
    compares runs minutes apart. Auto-jit is switched on for its blocks only, as a program switching it would."""
    wl, step_fn = _workload(name)
    batches = _batches(wl, 8)
    setups = {m: _setup(wl) for m in MODES}
    runs = {m: _stepper(m, step_fn, setups[m][2]) for m in MODES}
    times = {m: [] for m in MODES}
    cpu = {m: ([], []) for m in MODES}
    for b in range(blocks):
        for m in MODES[b % 3:] + MODES[:b % 3]:
            mge.config.auto_jit = m == "auto_jit"
            try:
                for i in range(steps):
                    xs, ys = batches[i % len(batches)]
                    t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
                    runs[m](*setups[m], xs, ys).item()
                    if b >= 2 and i >= 3:
                        times[m].append(time.perf_counter() - t0)
                        cpu[m][0].append(time.process_time() - c0)
                        cpu[m][1].append(time.thread_time() - h0)
            finally:
                mge.config.auto_jit = False
    out = {m: statistics.median(v) * 1e3 for m, v in times.items()}
    out["cpu"] = {m: (statistics.median(c) * 1e3, statistics.median(h) * 1e3) for m, (c, h) in cpu.items()}
    return out


def per_op_us(n=200, reps=20):
    """Host µs per op: eager dispatch vs auto-jit collection (a chain of ``n`` small elementwise ops)."""
    x = mge.Tensor(np.ones((8, 8), "float32"))
    res = {}
    for mode in ("eager", "auto_jit"):
        mge.config.auto_jit = mode == "auto_jit"
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            y = x
            for _ in range(n):
                y = y * 1.0001 + 0.5
            t1 = time.perf_counter()
            y.numpy()
            best = min(best, (t1 - t0) / (2 * n))
        res[mode] = best * 1e6
    mge.config.auto_jit = False
    return res


def padded_hostread_step(model, opt, gm, x, y):
    """The host-read step as a padded-count compiler would run it: ``cond_take``'s selection computed from the mask
    read on the host and padded to a power-of-two bucket (a zero weight on the padding), so the ops after the read
    have one shape per bucket instead of one per count."""
    with gm:
        logits = model(x)
        m = logits > 0
        n = int(m.sum())
        idx = np.flatnonzero(m.numpy()).astype(np.int32)
        bucket = max(8, 1 << max(n - 1, 0).bit_length())
        padded, weight = np.zeros(bucket, np.int32), np.zeros(bucket, np.float32)
        padded[:n], weight[:n] = idx, 1
        pos = F.reshape(logits, (-1,))[mge.Tensor(padded)] * mge.Tensor(weight)
        loss = F.nn.cross_entropy(logits, y) + 0.01 * pos.sum() / max(n, 1)
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


def on_device_step(model, opt, gm, x, y):
    """The host-read step's loss with no host read at all (the count and the selection as a mask on the device):
    what no cut in the middle of the step would give."""
    with gm:
        logits = model(x)
        m = (logits > 0).astype("float32")
        loss = F.nn.cross_entropy(logits, y) + 0.01 * (logits * m).sum() / F.maximum(m.sum(), 1)
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


def _bounds(wl, variants, rounds, skip, batches):
    """ms/step medians of ``variants`` ``[(name, step_fn, mode)]`` in ONE process, each on its own model, taking turns
    over the same ``batches`` batches (their counts recur: the steady state); the first ``skip`` rounds left out."""
    data = _batches(wl, batches)
    runs = []
    for name, fn, mode in variants:
        model, opt, gm = _setup(wl)
        runs.append((name, mode, model, opt, gm, _stepper(mode, fn, gm)))
    times = {name: [] for name, *_ in variants}
    try:
        for r in range(rounds):
            for name, mode, model, opt, gm, run in runs:
                mge.config.auto_jit = mode == "auto_jit"
                for xs, ys in data:
                    t0 = time.perf_counter()
                    run(model, opt, gm, xs, ys).item()
                    if r >= skip:
                        times[name].append(time.perf_counter() - t0)
                mge.config.auto_jit = False
    finally:
        mge.config.auto_jit = False
    return {name: statistics.median(v) * 1e3 for name, v in times.items()}


def hostread_bounds(rounds=14, skip=5, batches=12):
    """What would bring the host-read step (``hostread``) under auto-jit to half its eager time: ms/step (see
    ``_bounds``) of the step as written (eager, auto-jit), with the selection padded to a bucket
    (``padded_hostread_step``: the most padded counts could give), and with no host read at all
    (``on_device_step``: eager, auto-jit, ``xla_trace``), against the eager step as written."""
    return _bounds(models.WORKLOADS["convnet_b8"], [
        ("as written, eager", hostread_step, "eager"), ("as written, auto-jit", hostread_step, "auto_jit"),
        ("padded, eager", padded_hostread_step, "eager"), ("padded, auto-jit", padded_hostread_step, "auto_jit"),
        ("no host read, eager", on_device_step, "eager"), ("no host read, auto-jit", on_device_step, "auto_jit"),
        ("no host read, xla_trace", on_device_step, "xla_trace")], rounds, skip, batches)


def detection_bounds(rounds=14, skip=5, batches=12):
    """What would make the detection step faster under auto-jit than eagerly: ms/step (see ``_bounds``) of the step
    as written (eager, auto-jit, ``xla_trace``), with masks in place of its boolean selections and the foreground
    count still read on the host (``masked_detection_step``: fixed shapes, what counts padded inside the compiled
    program would give at best), and with the count kept on the device too (``on_device_detection_step``)."""
    variants = [(f"{what}, {mode.replace('_', '-') if mode != 'xla_trace' else mode}", fn, mode)
                for what, fn in (("as written", detection_step), ("masks", masked_detection_step),
                                 ("masks, no host read", on_device_detection_step))
                for mode in MODES]
    return _bounds(DetectionWorkload, variants, rounds, skip, batches)


def host_per_step(blocks=12, steps=25, modes=("eager", "auto_jit", "auto_jit_op_by_op", "xla_trace")):
    """Host CPU time per training step (ms; the calling thread's ``time.thread_time``, median over interleaved blocks,
    the first 3 steps of each block left out) of the tiny-shape workloads of ``host_overhead.py`` -- the Python a step
    costs when its compute is negligible: eager, auto-jit (its backward collected as one ``sequence`` op, and each
    gradient op collected on its own), the ``xla_trace`` step. Early launch, small steps' mode timer and the garbage
    collector are off: the numbers are the collection's cost, not what the timers choose."""
    import gc
    import host_overhead
    from megxla.core import _lazy
    from megxla.jit import _autojit
    saved = (_autojit.STATIC_TIMER, _autojit.EARLY, gc.isenabled())
    _autojit.STATIC_TIMER = _autojit.EARLY = False
    gc.disable()
    out = {}
    try:
        for name, wl in host_overhead.workloads().items():
            rng = np.random.RandomState(0)
            data = [wl.inputs(rng) for _ in range(4)]
            setups = {m: _setup(wl) for m in modes}
            gm = setups["xla_trace"][2] if "xla_trace" in setups else None
            traced = xla_trace(lambda model, opt, x, y: loop_step(model, opt, gm, x, y))
            times = {m: [] for m in modes}
            for b in range(blocks):
                for m in modes:
                    mge.config.auto_jit = m.startswith("auto_jit")
                    _lazy.COLLECTING[0] = _autojit.collecting if m == "auto_jit" else None
                    for i in range(steps):
                        x, y = data[i % 4]
                        t0 = time.thread_time()
                        xt, yt = mge.Tensor(x), mge.Tensor(y)
                        if m == "xla_trace":
                            loss = traced(setups[m][0], setups[m][1], xt, yt)
                        else:
                            loss = loop_step(*setups[m], xt, yt)
                        loss.item()
                        if b >= 2 and i >= 3:
                            times[m].append(time.thread_time() - t0)
                    mge.config.auto_jit = False
            out[name] = {m: statistics.median(v) * 1e3 for m, v in times.items()}
    finally:
        mge.config.auto_jit = False
        _autojit.STATIC_TIMER, _autojit.EARLY = saved[0], saved[1]
        _lazy.COLLECTING[0] = _autojit.collecting if _autojit.GROUP_BACKWARD else None
        if saved[2]:
            gc.enable()
    return out


def _workload(name):
    if name == "detection":
        return DetectionWorkload, detection_step
    if name == "detection_zoo":
        return ZooDetectionWorkload, zoo_detection_step
    if name == "fg_head":
        return FgHeadWorkload, fg_head_step
    if name == "fpn_pooler":
        return FpnPoolerWorkload, fpn_pooler_step
    if name == "countread":
        return models.WORKLOADS["mlp"], countread_step
    if name == "loader":
        return models.WORKLOADS["convnet_b8"], loop_step
    wl = models.WORKLOADS["convnet_b8" if name == "hostread" else name]
    return wl, hostread_step if name == "hostread" else loop_step


def _loader(batches, workers=2):
    """The same ``batches``, one after another, from a ``DataLoader`` with ``workers`` worker processes."""
    from megxla.data import DataLoader, SequentialSampler
    from megxla.data.dataset import ArrayDataset
    data = ArrayDataset(np.concatenate([x for x, _ in batches]), np.concatenate([y for _, y in batches]))
    return DataLoader(data, sampler=SequentialSampler(data, batch_size=len(batches[0][0]), drop_last=True),
                      num_workers=workers)


def _child(name, mode, steps, warmup):
    wl, step_fn = _workload(name)
    reset_auto_jit_stats()
    batches = _batches(wl, steps + warmup)
    ms, first, losses = run_mode(mode, wl, step_fn, _loader(batches) if name == "loader" else batches, warmup)
    print("RESULT " + json.dumps({"ms": ms, "first": first, "losses": losses,
                                  "compiled": auto_jit_stats()["compiled"]}), flush=True)


def child_record(script, args, tag):
    """Run ``script`` with ``args`` in a fresh process and return the JSON it printed after ``tag`` (a line
    ``TAG {...}``); its stderr's end in the error where it printed none."""
    proc = subprocess.run([sys.executable, os.path.abspath(script), *map(str, args)],
                          capture_output=True, text=True, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1:])
    raise RuntimeError(f"{' '.join(map(str, args))}: {proc.stderr[-2000:]}")


def _measure(name, mode, steps, warmup):
    """One (workload, mode) in a fresh process: nothing compiled in memory before it (the persistent
    compilation cache is what the environment says), so no mode runs on kernels another mode compiled."""
    return child_record(__file__, ["--child", name, mode, steps, warmup], "RESULT")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="mlp,convnet_b8,convnet_b64,transformer,hostread,countread,detection,"
                                      "detection_zoo,fg_head,fpn_pooler,loader")
    ap.add_argument("--steps", type=int, default=20, help="timed steps (after the warm-up ones)")
    # (30: after the timers' first probes -- a small step's eager probe at steps 15-19, an early launch's late one
    # at ~20-24 --, which steps 16-30, the window until 2026-11-29, half included)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2, help="fresh processes per cell (the fastest is reported)")
    ap.add_argument("--cut-backward", action="store_true",
                    help="auto-jit also cuts at the start of gm.backward (MEGXLA_AUTO_JIT_CUT_BACKWARD=1: the forward "
                         "runs while the backward is collected; off by default, for GPUs)")
    ap.add_argument("--no-early", action="store_true",
                    help="auto-jit launches no cluster early (MEGXLA_AUTO_JIT_EARLY=0: each cluster runs once "
                         "collected in full; by default a recurring small one may start while its step's end is "
                         "collected, where its timer finds that faster)")
    ap.add_argument("--interleaved", default="mlp,convnet_b8,convnet_b64", metavar="WORKLOADS",
                    help="also measure these workloads with the three modes taking turns in one process (see "
                         "interleaved(); '' for none)")
    ap.add_argument("--hostread-bounds", action="store_true",
                    help="only the host-read step's bounds (hostread_bounds): as written, padded, with no host read")
    ap.add_argument("--detection-bounds", action="store_true",
                    help="only the detection step's bounds (detection_bounds): as written, with masks in place of its "
                         "selections, and with no host read")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cut_backward:
        os.environ["MEGXLA_AUTO_JIT_CUT_BACKWARD"] = "1"  # (the children inherit it)
    if args.no_early:
        os.environ["MEGXLA_AUTO_JIT_EARLY"] = "0"
    if args.child:
        name, mode, steps, warmup = args.child
        return _child(name, mode, int(steps), int(warmup))
    if args.hostread_bounds or args.detection_bounds:
        b = hostread_bounds() if args.hostread_bounds else detection_bounds()
        eager = b["as written, eager"]
        print(f"{'host-read' if args.hostread_bounds else 'detection'} step, steady state, one process (ms/step, / "
              f"the eager step as written):")
        for name, ms in b.items():
            print(f"  {name:26s} {ms:6.2f}  {ms / eager:.2f}")
        return
    rows = []
    for name in args.only.split(","):
        best = {m: [] for m in MODES}
        firsts, losses = {}, {}
        for _ in range(args.rounds):
            for mode in MODES:
                r = _measure(name, mode, args.steps, args.warmup)
                best[mode].append(r["ms"])
                firsts[mode], losses[mode] = r["first"], r["losses"]
        med = {m: min(v) for m, v in best.items()}
        agree = max(abs(a - b) / max(abs(a), 1e-6) for a, b in zip(losses["eager"], losses["auto_jit"]))
        rows.append((name, med, firsts, agree))
        print(f"{name:12s} eager {med['eager']:8.2f}  auto_jit {med['auto_jit']:8.2f}  xla_trace {med['xla_trace']:8.2f}"
              f"  ms/step | auto/xla {med['auto_jit'] / med['xla_trace']:.2f}  auto/eager "
              f"{med['auto_jit'] / med['eager']:.2f}  xla/eager {med['xla_trace'] / med['eager']:.2f} | "
              f"loss rel.diff eager vs auto {agree:.1e}", flush=True)
    us = per_op_us()
    print(f"host time per op: eager dispatch {us['eager']:.1f} us, auto-jit collection {us['auto_jit']:.1f} us")
    inter = [(name, interleaved(name)) for name in args.interleaved.split(",") if name]
    if inter:
        print("\ninterleaved in one process (10 blocks of 20 steps, modes taking turns), ms/step eager / auto-jit / "
              "xla_trace | auto/xla | auto/eager:")
        for name, r in inter:
            print(f"  {name:12s} {r['eager']:.2f} / {r['auto_jit']:.2f} / {r['xla_trace']:.2f} | "
                  f"{r['auto_jit'] / r['xla_trace']:.2f} | {r['auto_jit'] / r['eager']:.2f}", flush=True)
        # Where the time goes on a CPU: the step's compute and the Python issuing it share the cores, so what auto-jit's
        # Python adds to the process's CPU time (the host read, collection, launch, write-back) cannot all hide
        # behind the executable's compute where that keeps the cores busy (wall / process CPU / calling thread's CPU)
        print(f"\nCPU ms per step, the same steps ({os.cpu_count()} cores; wall / process CPU / calling thread CPU):")
        for name, r in inter:
            print(f"  {name:12s} " + "  ".join(f"{m} {r[m]:.2f} / {r['cpu'][m][0]:.2f} / {r['cpu'][m][1]:.2f}"
                                               for m in MODES), flush=True)
    print("\nhost CPU ms per step, tiny shapes (eager / auto-jit / auto-jit, gradient ops one by one / xla_trace):")
    for name, h in host_per_step().items():
        print(f"  {name:12s} " + " / ".join(f"{v:.2f}" for v in h.values()))
    print("\n| workload | eager ms | auto-jit ms | xla_trace ms | auto/xla | auto/eager | xla/eager | first step eager / auto / xla ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name, med, firsts, agree in rows:
        print(f"| {name} | {med['eager']:.2f} | {med['auto_jit']:.2f} | {med['xla_trace']:.2f} | "
              f"{med['auto_jit'] / med['xla_trace']:.2f} | {med['auto_jit'] / med['eager']:.2f} | "
              f"{med['xla_trace'] / med['eager']:.2f} | {firsts['eager']:.0f} / {firsts['auto_jit']:.0f} / "
              f"{firsts['xla_trace']:.0f} |")


if __name__ == "__main__":
    main()
