"""MegEngine-style code runs on megxla after aliasing the import: snippets in the style of MegEngine's own
jit / xla unit tests (``import megengine`` resolved to megxla by the public alias, ``megxla.as_megengine``)."""
import numpy as np
import pytest

import megxla


@pytest.fixture(autouse=True)
def megengine_alias(monkeypatch):
    # the public alias; shadowing forced: these tests want megxla even where a real MegEngine is installed
    monkeypatch.setenv("MEGXLA_SHADOW_MEGENGINE", "1")
    import megxla.as_megengine as alias
    alias.install()
    yield
    alias.uninstall()


def test_trace_basic_symbolic_and_not():
    from megengine import tensor
    from megengine.jit import trace

    for symbolic in [False, True]:
        @trace(symbolic=symbolic)
        def f(x):
            return -x

        x = tensor([1])
        y = f(x).numpy()
        for _ in range(3):
            np.testing.assert_equal(f(x).numpy(), y)


def test_xla_elemwise_tester_pattern():
    import megengine as mge
    import megengine.functional as F
    import megengine.jit as jit
    from megengine.autodiff.grad_manager import GradManager

    np.random.seed(123)
    mge.random.seed(123)

    def tester(felemwise, *inp_shapes, atol=1e-5):
        inps = [mge.tensor(0.1 * np.random.randn(*s), dtype=np.float32) for s in inp_shapes]
        doup = mge.tensor(0.1 * np.random.randn(*felemwise(*inps).shape), dtype=np.float32)
        gm = GradManager()

        @jit.xla_trace(without_host=True)
        def func(inps, doup):
            gm.attach(inps)
            with gm:
                oup = felemwise(*inps)
                gm.backward(oup, doup)
                return [oup, *[inp.grad for inp in inps]]

        mge_rsts = func(inps, doup)
        xla_rsts = func(inps, doup)
        for a, b in zip(mge_rsts, xla_rsts):
            np.testing.assert_allclose(a.numpy(), b.numpy(), atol=atol)

    tester(F.add, (4, 16, 12, 12), (4, 16, 12, 12))
    tester(F.mul, (4, 16, 1, 1), (4, 16, 12, 12))
    tester(F.tanh, (4, 16, 12, 12))
    tester(F.nn.relu, (4, 16, 12, 12))


def test_xla_train_step_pattern():
    import megengine as mge
    import megengine.functional as F
    import megengine.module as M
    import megengine.optimizer as optim
    from megengine import jit
    from megengine.autodiff import GradManager

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.conv = M.Conv2d(3, 4, 3, padding=1)
            self.bn = M.BatchNorm2d(4)
            self.fc = M.Linear(4 * 8 * 8, 5)

        def forward(self, x):
            return self.fc(F.flatten(F.relu(self.bn(self.conv(x))), 1))

    def build():
        mge.random.seed(1)
        model = Net()
        return model, optim.SGD(model.parameters(), lr=0.1, momentum=0.9), GradManager().attach(model.parameters())

    def step(model, optimizer, timage, tlabel, gm):
        with gm:
            loss = F.loss.cross_entropy(model(timage), tlabel)
            gm.backward(loss)
        optimizer.step().clear_grad()
        return loss

    image = mge.tensor(np.random.RandomState(0).randn(4, 3, 8, 8), dtype="float32")
    label = mge.tensor(np.random.RandomState(1).randint(0, 5, (4,)), dtype="int32")
    m1, o1, g1 = build()
    m2, o2, g2 = build()
    xla_step = jit.xla_trace(step, without_host=True)
    for _ in range(4):
        l1 = step(m1, o1, image, label, g1)
        l2 = xla_step(m2, o2, image, label, g2)
        np.testing.assert_allclose(l1.numpy(), l2.numpy(), rtol=1e-5)
    np.testing.assert_allclose(m1.fc.weight.numpy(), m2.fc.weight.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(m1.bn.running_var.numpy(), m2.bn.running_var.numpy(), rtol=1e-4)


def test_exclude_from_trace_and_raise_inside_trace():
    from megengine import tensor
    from megengine.jit import trace, exclude_from_trace

    seen = []

    @trace(symbolic=False)
    def f(x):
        y = x * 2
        with exclude_from_trace():
            seen.append(int(y.numpy()[0]))
        return y

    for i in range(3):
        f(tensor([i]))
    assert seen == [0, 2, 4]

    class CatchMe(Exception):
        pass

    step_count, catch_count = 0, 0
    a, b, c = tensor([1, 2, 3, 4]), tensor([5, 6, 7, 8]), tensor([9, 0, 1, 2])

    @trace
    def add_abc(a, b, c):
        result = a + b + c
        if step_count == 5:
            raise CatchMe("catch me")
        return result

    for _ in range(10):
        try:
            d = add_abc(a, b, c)
        except CatchMe:
            catch_count += 1
        else:
            np.testing.assert_equal(d.numpy(), (a + b + c).numpy())
        step_count += 1
    assert catch_count == 1


# ---- official-model-zoo style programs (issue 10): a hub-decorated model file and a training script ----------
_ZOO_MODEL = '''
import megengine.functional as F
import megengine.hub as hub
import megengine.module as M


class TinyNet(M.Module):
    def __init__(self, num_classes=2):
        super().__init__()
        self.conv = M.Conv2d(3, 4, 3, padding=1)
        self.bn = M.BatchNorm2d(4)
        self.fc = M.Linear(4, num_classes)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = F.avg_pool2d(x, x.shape[2:]) if False else F.mean(x, axis=(2, 3))
        return self.fc(x)


@hub.pretrained("{url}")
def tinynet(**kwargs):
    """TinyNet (MegEngine/Models style entry)."""
    return TinyNet(**kwargs)
'''

_ZOO_HUBCONF = '''
from model import tinynet  # noqa: F401  (hubconf.py re-exports entries of the repository's model files)
'''

_ZOO_TRAIN = '''
import argparse

import numpy as np

import megengine as mge
import megengine.autodiff as autodiff
import megengine.data as data
import megengine.data.transform as T
import megengine.functional as F
import megengine.jit as jit
import megengine.optimizer as optim

from model import TinyNet


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("-d", "--data", required=True)
    parser.add_argument("--save", required=True)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args(argv)
    mge.random.seed(0)

    train_dataset = data.dataset.ImageFolder(args.data)
    train_sampler = data.RandomSampler(train_dataset, batch_size=4, drop_last=True, seed=0)
    train_queue = data.DataLoader(
        train_dataset, sampler=train_sampler,
        transform=T.Compose([T.RandomHorizontalFlip(), T.Normalize(mean=[128.0] * 3, std=[64.0] * 3),
                             T.ToMode("CHW")]),
        num_workers=0)

    model = TinyNet(num_classes=2)
    opt = optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    gm = autodiff.GradManager().attach(model.parameters())

    @jit.trace(symbolic=True)
    def train_step(image, label):
        with gm:
            logits = model(image)
            loss = F.nn.cross_entropy(logits, label)
            acc1, = F.topk_accuracy(logits, label, topk=(1,))
            gm.backward(loss)
            opt.step().clear_grad()
        return loss, acc1

    @jit.trace(symbolic=True)
    def valid_step(image, label):
        logits = model(image)
        return F.topk_accuracy(logits, label, topk=1)

    losses = []
    for epoch in range(args.epochs):
        model.train()
        for image, label in train_queue:
            image = mge.tensor(image, dtype="float32")
            label = mge.tensor(label, dtype="int32")
            loss, acc1 = train_step(image, label)
            losses.append(float(loss.item()))
    model.eval()
    accs = [float(valid_step(mge.tensor(i, dtype="float32"), mge.tensor(l, dtype="int32")).item())
            for i, l in train_queue]
    mge.save({"epoch": args.epochs, "state_dict": model.state_dict()}, args.save)
    return losses, float(np.mean(accs))
'''


def _write_zoo(tmp_path, url):
    repo = tmp_path / "zoo"
    repo.mkdir()
    (repo / "model.py").write_text(_ZOO_MODEL.format(url=url))
    (repo / "hubconf.py").write_text(_ZOO_HUBCONF)
    (repo / "train.py").write_text(_ZOO_TRAIN)
    return repo


def _write_images(root):
    pil = pytest.importorskip("PIL.Image")
    rng = np.random.RandomState(0)
    for cls, base in (("bright", 200), ("dark", 40)):
        (root / cls).mkdir(parents=True)
        for i in range(6):
            img = np.clip(base + rng.randint(-30, 30, (8, 8, 3)), 0, 255).astype(np.uint8)
            pil.fromarray(img).save(root / cls / f"{i}.png")


def test_zoo_training_script_then_hub_pretrained(tmp_path, monkeypatch):
    import runpy
    import sys

    monkeypatch.setenv("MGE_HOME", str(tmp_path / "mge_home"))
    ckpt = tmp_path / "tinynet.pkl"
    repo = _write_zoo(tmp_path, ckpt.as_uri())
    _write_images(tmp_path / "images")
    monkeypatch.syspath_prepend(str(repo))
    for name in ("model", "train", "hubconf"):
        sys.modules.pop(name, None)
    try:
        train = runpy.run_path(str(repo / "train.py"))
        losses, acc = train["main"](["-d", str(tmp_path / "images"), "--save", str(ckpt)])
    finally:
        for name in ("model", "hubconf"):
            sys.modules.pop(name, None)
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) and acc == 1.0

    import megengine as mge
    import megengine.hub as hub
    assert hub.list(str(repo)) == ["tinynet"]
    net = hub.load(str(repo), "tinynet", pretrained=True)  # the zoo's checkpoint layout {"state_dict": ...}
    trained = mge.load(str(ckpt))["state_dict"]
    np.testing.assert_array_equal(net.fc.weight.numpy(), np.asarray(trained["fc.weight"]))
    fresh = hub.load(str(repo), "tinynet")
    assert not np.array_equal(fresh.fc.weight.numpy(), net.fc.weight.numpy())
    import megengine.tensor as tensor  # MegEngine's test idiom: the package attribute is the Tensor class
    net.eval()
    out = net(tensor(np.zeros((1, 3, 8, 8), np.float32)))
    assert out.shape == (1, 2)
