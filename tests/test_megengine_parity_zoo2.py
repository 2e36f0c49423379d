"""MegEngine's model zoo (MegEngine/Models) trained for a few steps on MegEngine 1.13.0 (CPU) and on megxla from
the same weights and batches: its classifier (ResNet blocks with the ShuffleNet recipe), detector (RetinaNet's
per-image matching with a host-read box count), segmenter (DeepLab v3+'s pooled branch and poly schedule), keypoint
(SimpleBaseline with Adam) and GAN (two GradManagers, alternating Adam steps) training paths, each reduced to a few
lines in our own words, with the losses, parameters, BatchNorm statistics and optimizer slots MegEngine 1.13.0
printed after 3 steps. megxla gives them eagerly, under ``trace(symbolic=True)`` and under ``xla_trace``. Also a
checkpoint written by MegEngine's ``megengine.save`` (a state_dict, an optimizer state_dict, Tensors), loaded and
trained on.

MegEngine was run eagerly with ``megengine.config.async_level = 0`` (docs/differences.md). Its own
``trace(symbolic=True)`` gives the same numbers for the classifier, the keypoint model and the GAN; for the detector
and the segmenter it raises (its symbolic shapes: ``unkown ndim``), as it does on the zoo's RetinaNet and DeepLab
v3+.
"""
import base64
import io
import pickletools
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
from megxla.autodiff import GradManager
from megxla.jit import trace, xla_trace

def _init(net, seed):
    # deterministic weights in state_dict key order: He-scaled conv/linear weights, BN scale near 1
    rng = np.random.RandomState(seed)
    sd = {}
    for k, v in sorted(net.state_dict().items()):
        shape = np.asarray(v).shape
        if k.endswith("running_mean"):
            sd[k] = np.zeros(shape, "float32")
        elif k.endswith("running_var"):
            sd[k] = np.ones(shape, "float32")
        elif ".bn" in "." + k and k.endswith("weight"):
            sd[k] = (1 + 0.1 * rng.randn(*shape)).astype("float32")
        elif k.endswith("weight"):
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            sd[k] = (rng.randn(*shape) * np.sqrt(2.0 / fan_in)).astype("float32")
        else:
            sd[k] = (0.1 * rng.randn(*shape)).astype("float32")
    net.load_state_dict(sd)
    net.train()
    return net


def _run(net, opt, params, loss_fn, batches, mode, before_step=None):
    """A zoo training step (GradManager, backward, opt.step().clear_grad()) run eagerly or compiled."""
    gm = GradManager().attach(params)

    def body(net, opt, *args):
        with gm:
            loss = loss_fn(net, *args)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    if mode == "eager":
        step = body
    elif mode == "trace":
        traced = trace(symbolic=True)(lambda *a: body(net, opt, *a))
        step = lambda n, o, *a: traced(*a)  # noqa: E731
    else:
        step = xla_trace(without_host=True, capture_as_const=True)(body)
    losses = []
    for i, b in enumerate(batches):
        if before_step is not None:
            before_step(opt, i)
        losses.append(step(net, opt, *[mge.tensor(a) for a in b]).item())
    return losses


class _Block(M.Module):
    # the zoo's ResNet BasicBlock: conv-BN-ReLU-conv-BN, a strided 1x1 conv-BN shortcut, `x += identity`
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = M.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = M.BatchNorm2d(cout)
        self.conv2 = M.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = M.BatchNorm2d(cout)
        self.down = M.Identity() if stride == 1 and cin == cout else M.Sequential(
            M.Conv2d(cin, cout, 1, stride, bias=False), M.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.bn2(self.conv2(x))
        x += self.down(identity)
        return F.relu(x)


class _Classifier(M.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = M.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = M.BatchNorm2d(8)
        self.pool = M.MaxPool2d(3, 2, 1)
        self.layer1 = _Block(8, 16, 2)
        self.layer2 = _Block(16, 16, 1)
        self.fc = M.Linear(16, 5)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(F.flatten(F.avg_pool2d(x, 2), 1))


def classifier(mode):
    net = _init(_Classifier(), 0)
    rng = np.random.RandomState(10)
    batches = [(rng.randn(4, 3, 8, 8).astype("float32"), rng.randint(0, 5, 4).astype("int32")) for _ in range(3)]
    # shufflenet's recipe: weight decay only on conv/linear weights, label smoothing
    wd = [p for n, p in net.named_parameters() if n.endswith("weight") and p.ndim > 1]
    nwd = [p for n, p in net.named_parameters() if not (n.endswith("weight") and p.ndim > 1)]
    opt = mge.optimizer.SGD([{"params": wd}, {"params": nwd, "weight_decay": 0}], lr=0.1, momentum=0.9,
                            weight_decay=1e-3)
    losses = _run(net, opt, net.parameters(), lambda n, x, y: F.nn.cross_entropy(n(x), y, label_smooth=0.1),
                  batches, mode)
    return losses, net, opt


class _Det(M.Module):
    # RetinaNet's training path on one feature level: 2 anchors per cell, 3 classes
    def __init__(self):
        super().__init__()
        self.stem = M.Conv2d(3, 8, 4, 4)
        self.cls = M.Conv2d(8, 6, 3, 1, 1)
        self.box = M.Conv2d(8, 8, 3, 1, 1)
        g = (np.arange(4, dtype="float32") + 0.5) * 4
        cx, cy = np.meshgrid(g, g)
        c = np.stack([cx, cy, cx, cy], -1).reshape(-1, 1, 4)
        half = np.array([[-3, -3, 3, 3], [-5, -4, 5, 4]], "float32")
        self.anchors = (c + half).reshape(-1, 4)  # (4*4*2, 4), the order of cls/box channels

    def forward(self, img, info, gt_boxes):
        f = F.relu(self.stem(img))
        logits = self.cls(f).transpose(0, 2, 3, 1).reshape(-1, 3)
        deltas = self.box(f).transpose(0, 2, 3, 1).reshape(-1, 4)
        anchors = mge.tensor(self.anchors)
        labels, targets = [], []
        for bid in range(img.shape[0]):
            gt = gt_boxes[bid, :info[bid, 4].astype("int32")]  # this image's boxes: a count read on the host
            b1, b2 = F.expand_dims(gt, 1), F.expand_dims(anchors, 0)  # the zoo's get_iou, coordinate by coordinate
            iw = F.minimum(b1[:, :, 2], b2[:, :, 2]) - F.maximum(b1[:, :, 0], b2[:, :, 0])
            ih = F.minimum(b1[:, :, 3], b2[:, :, 3]) - F.maximum(b1[:, :, 1], b2[:, :, 1])
            inter = F.maximum(iw, 0) * F.maximum(ih, 0)
            a1 = (gt[:, 2] - gt[:, 0]) * (gt[:, 3] - gt[:, 1])
            a2 = (anchors[:, 2] - anchors[:, 0]) * (anchors[:, 3] - anchors[:, 1])
            iou = inter / (F.expand_dims(a1, 1) + F.expand_dims(a2, 0) - inter)
            match, best = F.argmax(iou, axis=0), F.max(iou, axis=0)
            lab = F.zeros(anchors.shape[0], dtype="int32")
            lab[best >= 0.3] = 1
            lab[(best >= 0.2) & (best < 0.3)] = -1
            fg = lab == 1
            matched = gt[match]
            lab[fg] = matched[fg, 4].astype("int32")
            wa, ha = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
            wg, hg = matched[:, 2] - matched[:, 0], matched[:, 3] - matched[:, 1]
            t = F.stack([(matched[:, 0] + 0.5 * wg - anchors[:, 0] - 0.5 * wa) / wa,
                         (matched[:, 1] + 0.5 * hg - anchors[:, 1] - 0.5 * ha) / ha,
                         F.log(wg / wa), F.log(hg / ha)], axis=1)
            labels.append(lab)
            targets.append(t)
        labels, targets = F.concat(labels), F.concat(targets)
        valid, fg = labels >= 0, labels > 0
        nfg = F.maximum(fg.sum(), 1)
        onehot = F.zeros_like(logits)
        onehot[fg, labels[fg] - 1] = 1
        lg, tg = logits[valid], onehot[valid]
        p = F.sigmoid(lg)
        ce = F.log(1 + F.exp(-F.abs(lg))) + F.relu(lg) - lg * tg
        pt = p * tg + (1 - p) * (1 - tg)
        focal = (ce * (1 - pt) ** 2 * (0.25 * tg + 0.75 * (1 - tg))).sum() / nfg
        x = F.abs(deltas[fg] - targets[fg])
        l1 = F.where(x < 0.1, 0.5 * x ** 2 / 0.1, x - 0.05).sum() / nfg
        return focal + l1


def detector(mode):
    net = _init(_Det(), 1)
    rng = np.random.RandomState(11)
    batches = []
    for counts in [(3, 1), (1, 3), (2, 2)]:  # one padded shape, different numbers of boxes
        gt = np.zeros((2, 3, 5), "float32")
        info = np.zeros((2, 5), "float32")
        for b, c in enumerate(counts):
            xy = rng.uniform(0, 9, size=(c, 2))
            gt[b, :c, :2], gt[b, :c, 2:4] = xy, xy + rng.uniform(4, 8, size=(c, 2))
            gt[b, :c, 4] = rng.randint(1, 4, size=c)
            info[b] = [16, 16, 16, 16, c]
        batches.append((rng.rand(2, 3, 16, 16).astype("float32"), info, gt))
    opt = mge.optimizer.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    losses = _run(net, opt, net.parameters(), lambda n, *a: n(*a), batches, mode)
    return losses, net, opt


class _Seg(M.Module):
    # DeepLab v3+'s layout: strided features, a global-pool branch broadcast back, decoder concat, upsampling
    def __init__(self):
        super().__init__()
        self.conv1 = M.Conv2d(3, 6, 3, 2, 1, bias=False)
        self.bn1 = M.BatchNorm2d(6)
        self.gp = M.Conv2d(6, 6, 1)
        self.fuse = M.Conv2d(12, 6, 1, bias=False)
        self.bn2 = M.BatchNorm2d(6)
        self.low = M.Conv2d(3, 2, 1)
        self.out = M.Conv2d(8, 4, 3, 1, 1)

    def forward(self, x):
        f = F.relu(self.bn1(self.conv1(x)))
        gp = F.relu(self.gp(F.mean(f, [2, 3], True)))
        gp = F.nn.interpolate(gp, f.shape[2:])
        f = F.relu(self.bn2(self.fuse(F.concat([f, gp], 1))))
        f = F.nn.interpolate(f, x.shape[2:])
        return self.out(F.concat([f, self.low(x)], 1))


def segmenter(mode):
    net = _init(_Seg(), 2)
    rng = np.random.RandomState(12)
    batches = []
    for _ in range(3):
        label = rng.randint(0, 4, size=(2, 8, 8)).astype("int32")
        label[rng.rand(2, 8, 8) < 0.25] = 255
        batches.append((rng.randn(2, 3, 8, 8).astype("float32"), label))
    head = [p for n, p in net.named_parameters() if n.startswith("out")]
    body_ = [p for n, p in net.named_parameters() if not n.startswith("out")]
    opt = mge.optimizer.SGD([{"params": body_, "lr": 0.01}, {"params": head}], lr=0.1, momentum=0.9,
                            weight_decay=1e-4)

    def loss_fn(n, x, label):  # the zoo's cross_entropy with ignore_label 255
        pred = n(x).transpose(0, 2, 3, 1)
        mask = label != 255
        return F.loss.cross_entropy(pred[mask], label[mask], 1)

    def poly(opt, i):  # the zoo's poly learning-rate schedule, set between steps
        lr = 0.1 * (1 - i / 4) ** 0.9
        opt.param_groups[0]["lr"] = lr * 0.1
        opt.param_groups[1]["lr"] = lr

    losses = _run(net, opt, net.parameters(), loss_fn, batches, mode, poly)
    return losses, net, opt


class _Kp(M.Module):
    # SimpleBaseline: strided backbone, deconv-BN-ReLU upsampling, 3x3 heatmap head
    def __init__(self):
        super().__init__()
        self.conv1 = M.Conv2d(3, 8, 3, 2, 1, bias=False)
        self.bn1 = M.BatchNorm2d(8)
        self.deconv = M.ConvTranspose2d(8, 8, 4, 2, 1, bias=False)
        self.bn2 = M.BatchNorm2d(8)
        self.last = M.Conv2d(8, 3, 3, 1, 1)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        return self.last(F.relu(self.bn2(self.deconv(x))))


def keypoints(mode):
    net = _init(_Kp(), 3)
    rng = np.random.RandomState(13)
    batches = [(rng.randn(2, 3, 8, 8).astype("float32"), rng.rand(2, 2, 3, 8, 8).astype("float32"),
                np.array([[1, 0, 1], [1, 1, 0]], "float32")) for _ in range(3)]
    opt = mge.optimizer.Adam(net.parameters(), lr=1e-2, weight_decay=1e-4)

    def loss_fn(n, images, heatmaps, heat_valid):  # SimpleBaseline.calc_loss
        out = n(images)
        valid = F.expand_dims(heat_valid > 0.1, [2, 3])
        label = heatmaps[:, -1]
        return F.nn.square_loss(out * valid, label * valid)

    losses = _run(net, opt, net.parameters(), loss_fn, batches, mode)
    return losses, net, opt


class _G(M.Module):
    # the zoo's DCGAN generator layout: linear to a 2x2 map, deconv-BN-ReLU upsampling, conv, tanh
    def __init__(self):
        super().__init__()
        self.l1 = M.Linear(4, 32)
        self.deconv = M.ConvTranspose2d(8, 4, 4, 2, 1, bias=False)
        self.bn1 = M.BatchNorm2d(4)
        self.conv = M.Conv2d(4, 3, 3, 1, 1)

    def forward(self, z):
        x = self.l1(z).reshape(-1, 8, 2, 2)
        return F.tanh(self.conv(F.relu(self.bn1(self.deconv(x)))))


class _D(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(3, 8, 3, 2, 1)
        self.fc = M.Linear(32, 1)

    def forward(self, x):
        return self.fc(F.flatten(F.leaky_relu(self.conv(x), 0.1), 1))


def gan(mode):
    # two GradManagers and two Adams (betas (0, 0.9)), a discriminator step on real and detached fake images,
    # then a generator step, as the zoo's GAN trainer
    G, D = _init(_G(), 4), _init(_D(), 5)
    optG = mge.optimizer.Adam(G.parameters(), lr=1e-2, betas=(0.0, 0.9))
    optD = mge.optimizer.Adam(D.parameters(), lr=1e-2, betas=(0.0, 0.9))
    gmG, gmD = GradManager().attach(G.parameters()), GradManager().attach(D.parameters())
    bce = F.nn.binary_cross_entropy

    def d_step(real, z):
        with gmD:
            out_real, out_fake = D(real), D(G(z).detach())
            err = bce(out_real, F.ones_like(out_real)) + bce(out_fake, F.zeros_like(out_fake))
            gmD.backward(err)
        optD.step().clear_grad()
        return err

    def g_step(z):
        with gmG:
            out = D(G(z))
            err = bce(out, F.ones_like(out))
            gmG.backward(err)
        optG.step().clear_grad()
        return err

    if mode == "trace":
        d_step, g_step = trace(symbolic=True)(d_step), trace(symbolic=True)(g_step)
    rng = np.random.RandomState(14)
    losses = []
    for _ in range(3):
        real = mge.tensor(rng.rand(4, 3, 4, 4).astype("float32") * 2 - 1)
        losses.append(d_step(real, mge.tensor(rng.randn(4, 4).astype("float32"))).item())
        losses.append(g_step(mge.tensor(rng.randn(4, 4).astype("float32"))).item())
    return losses, (G, D), (optG, optD)

def _summary(net, opt, keys):
    sd = net.state_dict()
    out = {k: np.asarray(sd[k]).ravel()[:3] for k in keys}
    st = opt.state_dict()["state"]
    for i in sorted(st)[:2]:
        for k, v in sorted(st[i].items()):
            out["opt%d.%s" % (i, k)] = np.asarray(v).ravel()[:3]
    return out


_MGE = {
    'classifier': {
        'losses': [2.807978630065918, 1.4897836446762085, 1.9955885410308838],
        'bn1.running_var': [1.3688188791275024, 1.065812349319458, 1.1086232662200928],
        'conv1.weight': [0.40420907735824585, -0.013782130554318428, 0.10248792916536331],
        'fc.bias': [-0.021471571177244186, 0.16016508638858795, -0.14058637619018555],
        'layer1.down.1.running_mean': [0.19047287106513977, 0.9905027747154236, -0.09958045929670334],
        'layer2.bn2.weight': [1.0101337432861328, 1.0775541067123413, 1.1478462219238281],
        'opt0.momentum_buffer': [-0.2927929759025574, 0.1654571294784546, 0.13847151398658752],
        'opt1.momentum_buffer': [-0.00013305246829986572, -0.21669639647006989, -0.013516336679458618],
    },
    'detector': {
        'losses': [5.841024398803711, 2.5778520107269287, 2.622343063354492],
        'box.bias': [0.09703484177589417, -0.09875070303678513, -0.0593535453081131],
        'cls.bias': [-0.016860853880643845, -0.09385408461093903, 0.0597088523209095],
        'stem.weight': [0.023098163306713104, -0.1475672572851181, 0.17873942852020264],
        'opt0.momentum_buffer': [0.6103402376174927, 0.12178032845258713, -0.4538184404373169],
        'opt1.momentum_buffer': [0.1972733438014984, 0.12376608699560165, 0.16989918053150177],
    },
    'segmenter': {
        'losses': [1.8451670408248901, 1.5593607425689697, 1.5961869955062866],
        'bn2.running_mean': [-0.020488658919930458, 0.06203357130289078, -0.13465756177902222],
        'gp.bias': [0.033590707927942276, 0.19043682515621185, 0.008536409586668015],
        'out.bias': [0.012421898543834686, -0.06705211848020554, 0.11533140391111374],
        'low.weight': [-0.8932045102119446, -0.5520915389060974, 0.14407914876937866],
        'opt0.momentum_buffer': [-0.0526430569589138, -0.009739566594362259, 0.0263492614030838],
        'opt1.momentum_buffer': [-0.023434750735759735, -0.002413905458524823, 0.011614428833127022],
    },
    'keypoints': {
        'losses': [0.9780712723731995, 0.6523570418357849, 0.4897787570953369],
        'bn2.running_var': [0.7862529158592224, 0.7954684495925903, 0.8176111578941345],
        'deconv.weight': [0.160718634724617, 0.02389061078429222, 0.1964576095342636],
        'last.bias': [-0.06551524996757507, 0.10696347802877426, -0.14242851734161377],
        'opt0.exp_avg': [0.0038796288426965475, -0.0003612045547924936, -0.0007505358662456274],
        'opt0.exp_avg_sq': [4.4813887143391185e-06, 3.349679502662184e-07, 3.479501060610346e-07],
        'opt0.step': [3.0],
        'opt1.exp_avg': [0.00627854373306036, -0.0028629491571336985, 0.0016753787640482187],
        'opt1.exp_avg_sq': [4.0330810406885576e-06, 5.524075277207885e-07, 9.11509346224193e-07],
        'opt1.step': [3.0],
    },
}


# (each model was checked in all three modes; the suite keeps the pairs that cover each once, to stay fast)
@pytest.mark.parametrize("model, mode", [("classifier", "eager"), ("classifier", "trace"), ("classifier", "xla"),
                                         ("detector", "xla"), ("segmenter", "eager"),
                                         ("segmenter", "xla"), ("keypoints", "trace")])
def test_zoo_training_steps_match_megengine(model, mode):
    want = _MGE[model]
    with warnings.catch_warnings():
        # the detector reads each image's box count on the host: compiled steps say so and record per count
        warnings.simplefilter("ignore", UserWarning)
        losses, net, opt = globals()[model](mode)
    np.testing.assert_allclose(losses, want["losses"], rtol=2e-6)
    got = _summary(net, opt, [k for k in want if k != "losses" and not k.startswith("opt")])
    assert sorted(got) == sorted(k for k in want if k != "losses")
    for k, v in got.items():
        # (atol at the vector's scale: an element near 0 is a difference of larger ones)
        np.testing.assert_allclose(v, want[k], rtol=2e-5, atol=2e-5 * np.abs(want[k]).max(), err_msg=k)


# `megengine.save({"t": tensor([1.5, 2.5]), "i": int32 tensor, "p": Parameter(eye(2)), "h": float16 tensor,
# "opt": Adam(Linear(3, 2)).state_dict() after one step with all-ones gradients, "net": its state_dict,
# "n": np.arange(3)})` written by MegEngine 1.13.0
_MGE_FILE = (
    "gASViQQAAAAAAAB9lCiMAXSUjBBtZWdlbmdpbmUudGVuc29ylIwGVGVuc29ylJOUjBVudW1weS5jb3JlLm11bHRpYXJyYXmU"
    "jAxfcmVjb25zdHJ1Y3SUk5SMBW51bXB5lIwHbmRhcnJheZSTlEsAhZRDAWKUh5RSlChLAUsChZRoCIwFZHR5cGWUk5SMAmY0"
    "lImIh5RSlChLA4wBPJROTk5K/////0r/////SwB0lGKJQwgAAMA/AAAgQJR0lGJoFIwGeHB1eDowlIeUgZR9lGKMAWmUaARo"
    "B2gKSwCFlGgMh5RSlChLAUsChZRoEYwCaTSUiYiHlFKUKEsDaBVOTk5K/////0r/////SwB0lGKJQwgBAAAAAgAAAJR0lGJo"
    "JIwGeHB1eDowlIeUgZR9lGKMAXCUaAKMCVBhcmFtZXRlcpSTlGgHaApLAIWUaAyHlFKUKEsBSwJLAoaUaBSJQxAAAIA/AAAA"
    "AAAAAAAAAIA/lHSUYmgUjAZ4cHV4OjCUh5SBlH2UYowBaJRoBGgHaApLAIWUaAyHlFKUKEsBSwSFlGgRjAJmMpSJiIeUUpQo"
    "SwNoFU5OTkr/////Sv////9LAHSUYolDCAAAADwAQABClHSUYmhAjAZ4cHV4OjCUh5SBlH2UYowDb3B0lH2UKIwMcGFyYW1f"
    "Z3JvdXBzlF2UfZQojAJscpRHP7mZmZmZmZqMDHdlaWdodF9kZWNheZRHAAAAAAAAAACMBWJldGFzlEc/7MzMzMzMzUc/7/fO"
    "2RaHK4aUjANlcHOURz5FeY7iMIw6jAZwYXJhbXOUXZQoSwBLAWV1YYwFc3RhdGWUfZQoSwB9lCiMB2V4cF9hdmeUaAdoCksA"
    "hZRoDIeUUpQoSwFLAoWUaBSJQwjQzMw90MzMPZR0lGKMCmV4cF9hdmdfc3GUaAdoCksAhZRoDIeUUpQoSwFLAoWUaBSJQwgA"
    "EoM6ABKDOpR0lGKMBHN0ZXCUaAdoCksAhZRoDIeUUpQoSwEpaBSJQwQAAIA/lHSUYnVLAX2UKGhXaAdoCksAhZRoDIeUUpQo"
    "SwFLAksDhpRoFIlDGNDMzD3QzMw90MzMPdDMzD3QzMw90MzMPZR0lGJoXmgHaApLAIWUaAyHlFKUKEsBSwJLA4aUaBSJQxgA"
    "EoM6ABKDOgASgzoAEoM6ABKDOgASgzqUdJRiaGVoB2gKSwCFlGgMh5RSlChLASloFIlDBAAAgD+UdJRidXV1jANuZXSUjAtj"
    "b2xsZWN0aW9uc5SMC09yZGVyZWREaWN0lJOUKVKUKIwEYmlhc5RoB2gKSwCFlGgMh5RSlChLAUsChZRoFIlDCM3MzL3NzMy9"
    "lHSUYowGd2VpZ2h0lGgHaApLAIWUaAyHlFKUKEsBSwJLA4aUaBSJQxg789g+q2QDv0bLWT2Kxzg+NlxZv+bygD6UdJRidYwB"
    "bpRoB2gKSwCFlGgMh5RSlChLAUsDhZRoEYwCaTiUiYiHlFKUKEsDaBVOTk5K/////0r/////SwB0lGKJQxgAAAAAAAAAAAEA"
    "AAAAAAAAAgAAAAAAAACUdJRidS4="
)


def test_checkpoint_written_by_megengine_loads_and_resumes():
    obj = mge.load(io.BytesIO(base64.b64decode(_MGE_FILE)))  # weights_only (the default) accepts it
    assert type(obj["t"]) is mge.Tensor and obj["t"].numpy().tolist() == [1.5, 2.5]
    assert obj["i"].dtype == np.int32 and obj["h"].dtype == np.float16 and obj["h"].numpy().tolist() == [0, 1, 2, 3]
    assert type(obj["p"]) is mge.Parameter and obj["p"].numpy().tolist() == [[1, 0], [0, 1]]
    assert obj["n"].dtype == np.int64 and obj["n"].tolist() == [0, 1, 2]
    st = obj["opt"]["state"][0]
    assert sorted(st) == ["exp_avg", "exp_avg_sq", "step"] and all(type(v) is np.ndarray for v in st.values())
    assert obj["opt"]["param_groups"] == [{"lr": 0.1, "weight_decay": 0.0, "betas": (0.9, 0.999), "eps": 1e-08,
                                           "params": [0, 1]}]
    net = M.Linear(3, 2)
    opt = mge.optimizer.Adam(net.parameters(), lr=0.1)
    net.load_state_dict(obj["net"])
    opt.load_state_dict(obj["opt"])
    net.weight.grad = mge.tensor(np.arange(6, dtype="float32").reshape(2, 3) - 2)
    net.bias.grad = mge.tensor([0.5, -1.0])
    opt.step()
    # MegEngine's numbers for the same resumed step
    np.testing.assert_allclose(net.weight.numpy(), [[0.4603409171104431, -0.5079916715621948, -0.013833224773406982],
                                                    [0.08044902235269547, -0.9455811381340027, 0.1600753515958786]],
                               rtol=1e-6)
    np.testing.assert_allclose(net.bias.numpy(), [-0.19321765005588531, -0.09473685920238495], rtol=1e-6)
    slots = opt.state_dict()["state"][1]
    np.testing.assert_allclose(slots["exp_avg_sq"], [[0.0049989353865385056, 0.0019989742431789637,
                                                      0.0009989871177822351],
                                                     [0.0019989742431789637, 0.0049989353865385056,
                                                      0.009998871013522148]], rtol=1e-6)
    assert float(np.asarray(slots["step"])) == 2.0


def _globals(data):
    ops = list(pickletools.genops(data))
    return {(ops[i - 2][1], ops[i - 1][1]) for i, (op, _, _) in enumerate(ops) if op.name == "STACK_GLOBAL"}


def test_megxla_checkpoint_names_only_what_megengine_can_unpickle():
    # MegEngine 1.13 reads megxla's files when they name only its own classes and NumPy's (checked by loading one
    # there): the same globals as MegEngine's file above, and the values come back
    want = _globals(base64.b64decode(_MGE_FILE))
    obj = mge.load(io.BytesIO(base64.b64decode(_MGE_FILE)))
    buf = io.BytesIO()
    mge.save(obj, buf)
    assert _globals(buf.getvalue()) == want
    back = mge.load(io.BytesIO(buf.getvalue()))
    assert back["p"].numpy().tolist() == [[1, 0], [0, 1]] and back["opt"]["state"][0]["step"].tolist() == 1.0


_MGE_GAN = {
    'losses': [1.6448650360107422, 0.9422844648361206, 1.2628600597381592, 0.930528998374939, 1.457993507385254,
               0.738185465335846],
    'bn1.running_mean': [0.025396693497896194, -0.027568239718675613, 0.0026591650675982237],
    'conv.bias': [0.06627262383699417, -0.14410732686519623, 0.04933632165193558],
    'l1.weight': [-0.23860549926757812, 0.6991777420043945, 0.01783689111471176],
    'opt0.exp_avg': [-0.14072877168655396, 0.13570448756217957, 0.1716635674238205],
    'opt0.exp_avg_sq': [0.0022931594867259264, 0.004063342697918415, 0.013289312832057476],
    'opt0.step': [3.0],
    'opt1.exp_avg': [-0.06525976210832596, 0.0637749657034874, 0.19527922570705414],
    'opt1.exp_avg_sq': [0.0019941008649766445, 0.0021608485840260983, 0.012984372675418854],
    'opt1.step': [3.0],
    'D.conv.bias': [0.010245959274470806, -0.04953193664550781, 0.20884336531162262],
    'D.fc.weight': [-0.005071558989584446, -0.05630292370915413, -0.05701256915926933],
    'D.opt0.exp_avg': [0.0734652578830719, 0.03195929527282715, 0.10558963567018509],
    'D.opt0.exp_avg_sq': [0.0008528853650204837, 0.00022032129345461726, 0.002320921514183283],
    'D.opt0.step': [3.0],
    'D.opt1.exp_avg': [0.02476702257990837, 0.0034743808209896088, -0.011514004319906235],
    'D.opt1.exp_avg_sq': [0.0001789363450370729, 0.0001098817665479146, 2.0117635358474217e-05],
    'D.opt1.step': [3.0],
}


@pytest.mark.parametrize("mode", ["eager", "trace"])
def test_gan_alternating_steps_match_megengine(mode):
    losses, (G, D), (optG, optD) = gan(mode)
    np.testing.assert_allclose(losses, _MGE_GAN["losses"], rtol=2e-6)
    got = _summary(G, optG, ["bn1.running_mean", "conv.bias", "l1.weight"])
    got.update({"D." + k: v for k, v in _summary(D, optD, ["conv.bias", "fc.weight"]).items()})
    assert sorted(got) == sorted(k for k in _MGE_GAN if k != "losses")
    for k, v in got.items():
        want = _MGE_GAN[k]
        np.testing.assert_allclose(v, want, rtol=2e-5, atol=2e-5 * np.abs(want).max(), err_msg=k)
