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
