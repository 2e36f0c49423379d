"""MegEngine's documentation examples, round 3: the getting-started tutorials and the ``Examples:`` of MegEngine
1.13's own docstrings (functional, module, random), example by example.

Rounds 1 and 2 (``test_guide_examples.py``, ``test_docs_examples_round2.py``) ran the user guide's model-development
pages. Here each example is restated in our own words (names changed, related calls grouped in one line) and the
expected text is what MegEngine 1.13.0 (CPU) printed for exactly that line, so a doctest failure is a place where
megxla prints something else than MegEngine. The tutorials' datasets (MNIST, California housing) need a network, so
their training loops run here on small deterministic NumPy data, with MegEngine's printed losses. Random draws
(``megengine.random``, parameter initialisation) are compared by shape only.
"""
import doctest

import numpy as np
import pytest

import megxla
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla import Tensor
from megxla.autodiff import GradManager


def run(examples):
    """Run doctest ``examples`` with the pages' names bound; fail listing every example that differs."""
    globs = {"megengine": megxla, "mge": megxla, "np": np, "F": F, "M": M, "optim": optim, "Tensor": Tensor,
             "GradManager": GradManager}
    test = doctest.DocTestParser().get_doctest(examples, globs, "round3", None, 0)
    out = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)


def test_getting_started_megengine_basics():
    # getting-started/beginner/megengine-basics: arithmetic, reshape, GradManager accumulating into .grad, one SGD
    # step, square_loss, and the page's linear fit of noisy points (NumPy's seeded draws, so MegEngine's numbers)
    run("""
>>> m = Tensor([[1, 2, 3], [4, 5, 6]])
>>> m
Tensor([[1 2 3]
 [4 5 6]], dtype=int32, device=xpux:0)
>>> p = Tensor([[2, 4, 2], [2, 4, 2]])
>>> q = Tensor([[2, 4, 2], [1, 2, 1]])
>>> p + q
Tensor([[4 8 4]
 [3 6 3]], dtype=int32, device=xpux:0)
>>> p - q
Tensor([[0 0 0]
 [1 2 1]], dtype=int32, device=xpux:0)
>>> p * q
Tensor([[ 4 16  4]
 [ 2  8  2]], dtype=int32, device=xpux:0)
>>> p / q
Tensor([[1. 1. 1.]
 [2. 2. 2.]], device=xpux:0)
>>> print(m.shape, m.reshape((3, 2)).shape, F.reshape(m, (3, 2)).shape)
(2, 3) (3, 2) (3, 2)
>>> w, x, b = Tensor(3.), Tensor(2.), Tensor(-1.)
>>> gm = GradManager().attach([w, b])
>>> with gm:
...     y = w * x + b
...     gm.backward(y)
>>> w.grad, b.grad
(Tensor(2.0, device=xpux:0), Tensor(1.0, device=xpux:0))
>>> with gm:
...     y = w * x + b
...     gm.backward(y)
>>> w.grad
Tensor(4.0, device=xpux:0)
>>> w, b = megengine.Parameter(3.), megengine.Parameter(-1.)
>>> gm = GradManager().attach([w, b])
>>> sgd = optim.SGD([w, b], lr=0.01)
>>> with gm:
...     gm.backward(w * x + b)
...     sgd.step().clear_grad()
>>> w, b, w.grad
(Parameter(2.98, device=xpux:0), Parameter(-1.01, device=xpux:0), None)
>>> F.nn.square_loss(Tensor([3., 3., 3., 3.]), Tensor([2., 8., 6., 1.]))
Tensor(9.75, device=xpux:0)
>>> np.random.seed(20200325)
>>> xs = np.random.uniform(-10, 10, size=100)
>>> ys = 5.0 * xs + 2.0 + np.random.uniform(-5, 5, size=100)
>>> w, b = megengine.Parameter(0.0), megengine.Parameter(0.0)
>>> gm = GradManager().attach([w, b])
>>> sgd = optim.SGD([w, b], lr=0.01)
>>> for epoch in range(5):
...     with gm:
...         loss = F.nn.square_loss(w * Tensor(xs) + b, Tensor(ys))
...         gm.backward(loss)
...         sgd.step().clear_grad()
...     print(f"{epoch}: w={w.item():.4f} b={b.item():.4f} loss={loss.item():.3f}")
0: w=3.2498 b=0.0463 loss=813.802
1: w=4.3601 b=0.0823 loss=105.126
2: w=4.7394 b=0.1145 loss=22.311
3: w=4.8689 b=0.1449 loss=12.563
4: w=4.9130 b=0.1744 loss=11.347
""")


def test_getting_started_regression_classification_and_mlp_pages():
    # linear-regression: ArrayDataset + SequentialSampler + Normalize feeding a zero-initialised linear model; then
    # linear-classification's one_hot / cross_entropy of probabilities (a certain prediction gives +0.0) / argmax and
    # neural-network's zero-weight MLP
    run("""
>>> from megxla.data import DataLoader
>>> from megxla.data.dataset import ArrayDataset
>>> from megxla.data.sampler import SequentialSampler
>>> import megxla.data.transform as T
>>> rs = np.random.RandomState(37)
>>> X = (rs.rand(200, 8) * np.array([10, 50, 8, 2, 3000, 5, 40, 120])).astype("float32")
>>> y = (X @ np.array([0.4, 0.01, -0.1, 0.6, 0.001, -0.004, -0.04, 0.02]) + rs.randn(200)).astype("float32")
>>> X_train, X_test, y_train, y_test = X[:160], X[160:], y[:160], y[160:]
>>> transform = T.Normalize(mean=X_train.mean(), std=X_train.std())
>>> train_set = ArrayDataset(X_train, y_train)
>>> loader = DataLoader(train_set, SequentialSampler(train_set, batch_size=64), transform)
>>> len(loader)
3
>>> [tuple(d.shape) for d in next(iter(loader))]
[(64, 8), (64,)]
>>> w = megengine.Parameter(F.zeros((8,)))
>>> b = megengine.Parameter(0.0)
>>> gm = GradManager().attach([w, b])
>>> sgd = optim.SGD([w, b], lr=0.01)
>>> for epoch in range(3):
...     total = 0
...     for step, (xb, yb) in enumerate(loader):
...         xb, yb = Tensor(xb), Tensor(yb)
...         with gm:
...             loss = F.nn.square_loss(F.matmul(xb, w) + b, yb)
...             gm.backward(loss)
...             sgd.step().clear_grad()
...         total += loss.item() * len(xb)
...     print(f"epoch {epoch}: {total / len(X_train):.5f}")
epoch 0: 19.07047
epoch 1: 9.89853
epoch 2: 6.80199
>>> test_set = ArrayDataset(X_test, y_test)
>>> test_loss = 0
>>> for xb, yb in DataLoader(test_set, SequentialSampler(test_set, batch_size=16), transform):
...     test_loss += F.nn.l1_loss(Tensor(yb), F.matmul(Tensor(xb), w) + b).item() * len(xb)
>>> round(test_loss / len(X_test), 5)
1.73502
>>> np.round(w.numpy(), 4)
array([-0.1533, -0.1371, -0.1553, -0.158 ,  1.0036, -0.1569, -0.1437,
       -0.1013], dtype=float32)
>>> F.flatten(F.ones((10, 28, 28, 1)), start_axis=1, end_axis=-1).shape
(10, 784)
>>> F.nn.one_hot(Tensor([3, 5]), num_classes=10).numpy()
array([[0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
       [0, 0, 0, 0, 0, 1, 0, 0, 0, 0]], dtype=int32)
>>> label = Tensor(3)
>>> for pred in ([0., 0., 0., 1., 0., 0., 0., 0., 0., 0.], [0., 0., 0.3, 0.7, 0., 0., 0., 0., 0., 0.],
...              [0., 0., 0.7, 0.3, 0., 0., 0., 0., 0., 0.]):
...     print(F.nn.cross_entropy(F.expand_dims(Tensor(pred), 0), F.expand_dims(label, 0), with_logits=False).item())
0.0
0.3566749691963196
1.2039728164672852
>>> F.argmax(Tensor([0., 0., 0., 0.3, 0.7, 0., 0., 0., 0., 0.]))
Tensor(4, dtype=int32, device=xpux:0)
>>> pred, label = Tensor([0, 3, 2, 4, 5]), Tensor([0, 3, 3, 5, 2])
>>> pred == label
Tensor([ True  True False False False], dtype=bool, device=xpux:0)
>>> (pred == label).sum().item()
2
>>> F.softmax(Tensor([1., 2., 3., 4.]))
Tensor([0.0321 0.0871 0.2369 0.6439], device=xpux:0)
>>> W1, b1 = F.zeros((16, 12)), F.zeros((12,))
>>> a1 = F.sigmoid(F.matmul(F.ones((16,)), W1) + b1)
>>> out = F.softmax(F.matmul(a1, F.zeros((12, 10))) + F.zeros((10,)))
>>> out.shape, out
((10,), Tensor([0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1], device=xpux:0))
>>> fc = M.Linear(784, 256)
>>> fc.weight.shape, fc.bias.shape
((256, 784), (256,))
>>> x = F.ones((784,))
>>> a, c = fc(x), F.matmul(x, fc.weight.transpose()) + fc.bias
>>> print(a.shape, c.shape, bool(F.abs(a - c).max() < 1e-5))
(256,) (256,) True
""")


def test_docstring_examples_elemwise():
    # megengine/functional/elemwise.py and math.py (isnan, isinf, sign)
    run("""
>>> import math
>>> F.add(2.0, 3.5), F.sub(1.0, 4.0), F.mul(3.0, 4.0), F.div(1.0, 8.0), F.floor_div(9.0, 4.0)
(Tensor(5.5, device=xpux:0), Tensor(-3.0, device=xpux:0), Tensor(12.0, device=xpux:0), Tensor(0.125, device=xpux:0), Tensor(2.0, device=xpux:0))
>>> a = Tensor([[1, 2, 3], [4, 5, 6]])
>>> c = Tensor([[1, 1, 1], [2, 2, 2]])
>>> F.add(a, c), F.sub(a, 1), F.mul(a, 2)
(Tensor([[2 3 4]
 [6 7 8]], dtype=int32, device=xpux:0), Tensor([[0 1 2]
 [3 4 5]], dtype=int32, device=xpux:0), Tensor([[ 2  4  6]
 [ 8 10 12]], dtype=int32, device=xpux:0))
>>> F.div(a, c)
Tensor([[1.  2.  3. ]
 [2.  2.5 3. ]], device=xpux:0)
>>> F.floor_div(a, c), F.floor_div(a, 2)
(Tensor([[1 2 3]
 [2 2 3]], dtype=int32, device=xpux:0), Tensor([[0 1 1]
 [2 2 3]], dtype=int32, device=xpux:0))
>>> F.neg(Tensor([3, -3])), F.abs(-7), F.square(Tensor([1, -2, -3, 4]))
(Tensor([-3  3], dtype=int32, device=xpux:0), Tensor(7, dtype=int32, device=xpux:0), Tensor([ 1  4  9 16], dtype=int32, device=xpux:0))
>>> F.pow(Tensor([1, 2, 3, 4, 5]), Tensor([1, 2, 1, 2, 1])), F.pow(Tensor([1, 2, 3]), 2), F.pow(2.0, 3.0)
(Tensor([ 1.  4.  3. 16.  5.], device=xpux:0), Tensor([1. 4. 9.], device=xpux:0), Tensor(8.0, device=xpux:0))
>>> F.mod(8, 3), F.mod(Tensor([1, 2, 3, 4, 5]), 3), F.mod(Tensor([7, 8]), Tensor([2, 3]))
(Tensor(2, dtype=int32, device=xpux:0), Tensor([1 2 0 1 2], dtype=int32, device=xpux:0), Tensor([1 2], dtype=int32, device=xpux:0))
>>> F.exp([0, F.log(2)]), F.log([1, F.exp(1)]), F.sqrt(Tensor([1, 4, 9, 16])), F.sqrt(4)
(Tensor([1. 2.], device=xpux:0), Tensor([0. 1.], device=xpux:0), Tensor([1. 2. 3. 4.], device=xpux:0), Tensor(2.0, device=xpux:0))
>>> F.expm1(1e-10), F.log1p(1e-10), F.log(1e-10 + 1)
(Tensor(1e-10, device=xpux:0), Tensor(1e-10, device=xpux:0), Tensor(0.0, device=xpux:0))
>>> F.logaddexp(F.log(1e-10), F.log(2e-10))
Tensor(-21.927238, device=xpux:0)
>>> F.round(Tensor([1.5, 2.5, 3.5, 4.5])), F.ceil(Tensor([1.5, 2.5])), F.floor(Tensor([1.5, 2.5]))
(Tensor([2. 3. 4. 5.], device=xpux:0), Tensor([2. 3.], device=xpux:0), Tensor([1. 2.], device=xpux:0))
>>> F.maximum(Tensor([1, 2, 3, 4]), Tensor([4, 3, 2, 1])), F.minimum(Tensor([1, 2, 3, 4]), 2)
(Tensor([4 3 3 4], dtype=int32, device=xpux:0), Tensor([1 2 2 2], dtype=int32, device=xpux:0))
>>> F.cos(Tensor([0, math.pi / 2, math.pi]))
Tensor([ 1.0000e+00 -4.3711e-08 -1.0000e+00], device=xpux:0)
>>> F.sin(Tensor([0, math.pi / 2, math.pi]))
Tensor([ 0.0000e+00  1.0000e+00 -8.7423e-08], device=xpux:0)
>>> F.tan(Tensor([0, math.pi / 4, math.pi]))
Tensor([0.0000e+00 1.0000e+00 8.7423e-08], device=xpux:0)
>>> F.acos(Tensor([0, 1, -1])), F.asin(Tensor([0, 1, -1])), F.atan(Tensor([0, 1, -1]))
(Tensor([1.5708 0.     3.1416], device=xpux:0), Tensor([ 0.      1.5708 -1.5708], device=xpux:0), Tensor([ 0.      0.7854 -0.7854], device=xpux:0))
>>> F.atan2(Tensor([0, 1, -1]), Tensor([1, 1, 1])), F.atan2(0, 1)
(Tensor([ 0.      0.7854 -0.7854], device=xpux:0), Tensor(0.0, device=xpux:0))
>>> F.cosh(Tensor([0, 1, -1])), F.sinh(Tensor([0, 1, -1])), F.tanh(Tensor([0, 1, -1]))
(Tensor([1.     1.5431 1.5431], device=xpux:0), Tensor([ 0.      1.1752 -1.1752], device=xpux:0), Tensor([ 0.      0.7616 -0.7616], device=xpux:0))
>>> F.asinh(Tensor([0, 1, -1])), F.acosh(Tensor([1, 2, 3])), F.atanh(Tensor([0, 0.5, -0.5]))
(Tensor([ 0.      0.8814 -0.8814], device=xpux:0), Tensor([0.     1.317  1.7627], device=xpux:0), Tensor([ 0.      0.5493 -0.5493], device=xpux:0))
>>> F.left_shift([1, 2, 3], 1), F.left_shift(Tensor([1, 2, 3]), Tensor([1, 2, 3])), F.left_shift(5, [1, 2, 3])
(Tensor([2 4 6], dtype=int32, device=xpux:0), Tensor([ 2  8 24], dtype=int32, device=xpux:0), Tensor([10 20 40], dtype=int32, device=xpux:0))
>>> F.right_shift([2, 4, 8], 1), F.right_shift(Tensor([2, 8, 24]), Tensor([1, 2, 3])), F.right_shift([10, 20, 40], 2)
(Tensor([1 2 4], dtype=int32, device=xpux:0), Tensor([1 2 3], dtype=int32, device=xpux:0), Tensor([ 2  5 10], dtype=int32, device=xpux:0))
>>> t, f = Tensor([True, False, True]), Tensor([False, False, True])
>>> F.logical_and(t, f), t & f, F.logical_or(t, f), t | f
(Tensor([False False  True], dtype=bool, device=xpux:0), Tensor([False False  True], dtype=bool, device=xpux:0), Tensor([ True False  True], dtype=bool, device=xpux:0), Tensor([ True False  True], dtype=bool, device=xpux:0))
>>> F.logical_xor(t, f), t ^ f, F.logical_not(t), ~t, F.logical_not(True)
(Tensor([ True False False], dtype=bool, device=xpux:0), Tensor([ True False False], dtype=bool, device=xpux:0), Tensor([False  True False], dtype=bool, device=xpux:0), Tensor([False  True False], dtype=bool, device=xpux:0), Tensor(False, dtype=bool, device=xpux:0))
>>> p, q = Tensor([1, 2, 3]), Tensor([1, 2, 4])
>>> F.equal(p, q), F.not_equal(p, q), p < q, F.less_equal(p, q), F.greater(p, q), p >= q
(Tensor([ True  True False], dtype=bool, device=xpux:0), Tensor([False False  True], dtype=bool, device=xpux:0), Tensor([False False  True], dtype=bool, device=xpux:0), Tensor([ True  True  True], dtype=bool, device=xpux:0), Tensor([False False False], dtype=bool, device=xpux:0), Tensor([ True  True False], dtype=bool, device=xpux:0))
>>> F.isnan(Tensor([1, float("nan"), 0])), F.isinf(Tensor([1, float("inf"), 0])), F.isnan(Tensor(1))
(Tensor([False  True False], dtype=bool, device=xpux:0), Tensor([False  True False], dtype=bool, device=xpux:0), Tensor(False, dtype=bool, device=xpux:0))
>>> F.sign(Tensor([1, -1, 0])), F.sign(Tensor([2.5, -0.5, 0.0]))
(Tensor([ 1 -1  0], dtype=int32, device=xpux:0), Tensor([ 1. -1.  0.], device=xpux:0))
""")


def test_docstring_examples_reductions_linalg_and_losses():
    # megengine/functional/math.py and loss.py; int8 sums and int32 products wrap as in MegEngine; cross_entropy
    # follows MegEngine's logZ - pred[label] term by term (0.5797641 where a log-softmax gave 0.57976407)
    run("""
>>> import math
>>> F.sum(F.ones(128, dtype="int8"))
Tensor(-128, dtype=int8, device=xpux:0)
>>> F.sum(Tensor([])), F.sum(Tensor([0.5, 1.5])), F.prod(Tensor([])), F.prod(Tensor([0.5, 1.5]))
(Tensor(0.0, device=xpux:0), Tensor(2.0, device=xpux:0), Tensor(1.0, device=xpux:0), Tensor(0.75, device=xpux:0))
>>> F.prod(Tensor([536870910, 536870910, 536870910, 536870910]))
Tensor(16, dtype=int32, device=xpux:0)
>>> m = Tensor([[1, 2, 3], [4, 5, 6]])
>>> F.sum(m, axis=0), F.sum(m, axis=1), F.prod(m, axis=0), F.prod(m, axis=1)
(Tensor([5 7 9], dtype=int32, device=xpux:0), Tensor([ 6 15], dtype=int32, device=xpux:0), Tensor([ 4 10 18], dtype=int32, device=xpux:0), Tensor([  6 120], dtype=int32, device=xpux:0))
>>> F.mean(m, axis=0), F.mean(m, axis=1), F.mean(Tensor([1, 2, 3])), F.mean(Tensor([1, np.nan, 3]))
(Tensor([2.5 3.5 4.5], device=xpux:0), Tensor([2. 5.], device=xpux:0), Tensor(2.0, device=xpux:0), Tensor(nan, device=xpux:0))
>>> F.var(Tensor([[1, 2], [3, 4]])), F.std(Tensor([[1, 2], [3, 4]]))
(Tensor(1.25, device=xpux:0), Tensor(1.118034, device=xpux:0))
>>> k = Tensor([[14, 8, 11, 10], [7, 9, 10, 11], [10, 15, 5, 10]])
>>> F.var(k), F.std(k)
(Tensor(6.8333335, device=xpux:0), Tensor(2.6140645, device=xpux:0))
>>> sq = Tensor([[1, 2], [3, 4]])
>>> F.min(sq), F.min(sq, axis=0), F.max(sq, axis=1), F.max(sq)
(Tensor(1, dtype=int32, device=xpux:0), Tensor([1 2], dtype=int32, device=xpux:0), Tensor([2 4], dtype=int32, device=xpux:0), Tensor(4, dtype=int32, device=xpux:0))
>>> r = Tensor(np.arange(1, 7, dtype=np.int32).reshape(2, 3))
>>> F.argmin(r), F.argmax(r), F.argsort(Tensor([2., 1.]))
(Tensor(0, dtype=int32, device=xpux:0), Tensor(5, dtype=int32, device=xpux:0), Tensor([1 0], dtype=int32, device=xpux:0))
>>> vals, idx = F.sort(Tensor([3., 1., 2.]))
>>> vals.numpy(), idx.numpy()
(array([1., 2., 3.], dtype=float32), array([1, 2, 0], dtype=int32))
>>> top, where = F.topk(Tensor([2., 4., 6., 8., 7., 5., 3., 1.]), 5, descending=False)
>>> print(top.numpy(), where.numpy())
[1. 2. 3. 4. 5.] [7 0 6 1 5]
>>> F.matinv(Tensor([[1.0, 0.0], [1.0, 1.0]])).numpy()
array([[ 1.,  0.],
       [-1.,  1.]], dtype=float32)
>>> F.matmul(Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), Tensor(np.arange(6, dtype=np.float32).reshape(3, 2))).numpy()
array([[10., 13.],
       [28., 40.]], dtype=float32)
>>> F.dot(Tensor(np.arange(6, dtype=np.float32)), Tensor(np.arange(6, dtype=np.float32))).numpy()
array(55., dtype=float32)
>>> U, S, Vh = F.svd(Tensor(np.ones((9, 6), "float32")), full_matrices=False)
>>> U.shape, S.shape, Vh.shape
((9, 6), (6,), (6, 6))
>>> F.norm(Tensor([1, 2, 3]), ord=math.inf), F.norm(Tensor([1, 2, 3]), ord=-math.inf)
(Tensor(3, dtype=int32, device=xpux:0), Tensor(1, dtype=int32, device=xpux:0))
>>> F.norm(m, ord=2, axis=0), F.norm(m, ord=2, axis=1)
(Tensor([4.1231 5.3852 6.7082], device=xpux:0), Tensor([3.7417 8.775 ], device=xpux:0))
>>> F.normalize(m, ord=2, axis=0)
Tensor([[0.2425 0.3714 0.4472]
 [0.9701 0.9285 0.8944]], device=xpux:0)
>>> F.normalize(m, ord=2, axis=1)
Tensor([[0.2673 0.5345 0.8018]
 [0.4558 0.5698 0.6838]], device=xpux:0)
>>> pred, label = Tensor([3, 3, 3, 3]), Tensor([2, 8, 6, 1])
>>> F.nn.l1_loss(pred, label), F.nn.l1_loss(pred, label, reduction="none"), F.nn.l1_loss(pred, label, reduction="sum")
(Tensor(2.75, device=xpux:0), Tensor([1 5 3 2], dtype=int32, device=xpux:0), Tensor(11, dtype=int32, device=xpux:0))
>>> F.nn.square_loss(pred, label), F.nn.square_loss(pred, label, reduction="none"), F.nn.square_loss(pred, label, reduction="sum")
(Tensor(9.75, device=xpux:0), Tensor([ 1. 25.  9.  4.], device=xpux:0), Tensor(39.0, device=xpux:0))
>>> probs = Tensor([[0., 1.], [0.3, 0.7], [0.7, 0.3]])
>>> ones = Tensor([1., 1., 1.])
>>> F.nn.cross_entropy(probs, ones, reduction="none")
Tensor([0.3133 0.513  0.913 ], device=xpux:0)
>>> F.nn.cross_entropy(probs, ones)
Tensor(0.5797641, device=xpux:0)
>>> F.nn.cross_entropy(probs, ones, label_smooth=0.1, reduction="none")
Tensor([0.3633 0.533  0.893 ], device=xpux:0)
>>> F.nn.cross_entropy(Tensor([[2.5, -1.0, 0.25], [0.1, 0.2, 0.3]]), Tensor([2, 0]), reduction="sum")
Tensor(3.579101, device=xpux:0)
>>> F.nn.cross_entropy(probs, ones, with_logits=False, reduction="none")
Tensor([0.     0.3567 1.204 ], device=xpux:0)
>>> F.nn.cross_entropy(probs, ones, with_logits=False)
Tensor(0.5202159, device=xpux:0)
>>> F.nn.cross_entropy(Tensor([[0., 1.]]), Tensor([1]), with_logits=False)
Tensor(0.0, device=xpux:0)
>>> b = Tensor([0.9, 0.7, 0.3])
>>> F.nn.binary_cross_entropy(b, ones), F.nn.binary_cross_entropy(b, ones, reduction="none")
(Tensor(0.4328984, device=xpux:0), Tensor([0.3412 0.4032 0.5544], device=xpux:0))
>>> F.nn.binary_cross_entropy(b, ones, with_logits=False), F.nn.binary_cross_entropy(b, ones, with_logits=False, reduction="none")
(Tensor(0.5553361, device=xpux:0), Tensor([0.1054 0.3567 1.204 ], device=xpux:0))
>>> h = Tensor([[0.5, -0.5, 0.1], [-0.6, 0.7, 0.8]])
>>> hl = Tensor([[1, -1, -1], [-1, 1, 1]])
>>> F.nn.hinge_loss(h, hl), F.nn.hinge_loss(h, hl, reduction="none"), F.nn.hinge_loss(h, hl, reduction="sum")
(Tensor(1.5, device=xpux:0), Tensor([2.1 0.9], device=xpux:0), Tensor(3.0, device=xpux:0))
>>> ctc = Tensor([[[0.0614, 0.9386], [0.8812, 0.1188]], [[0.699, 0.301], [0.2572, 0.7428]]])
>>> round(F.nn.ctc_loss(ctc, Tensor([2, 2]), Tensor([1, 1]), Tensor([1, 1])).item(), 6)
0.150442
""")


def test_docstring_examples_tensor_creation_and_manipulation():
    # megengine/functional/tensor.py and utils.py
    run("""
>>> F.arange(5)
Tensor([0. 1. 2. 3. 4.], device=xpux:0)
>>> F.arange(1, 4)
Tensor([1. 2. 3.], device=xpux:0)
>>> F.linspace(2., 3., 5)
Tensor([2.   2.25 2.5  2.75 3.  ], device=xpux:0)
>>> F.linspace(1, 10, 10)
Tensor([ 1.  2.  3.  4.  5.  6.  7.  8.  9. 10.], device=xpux:0)
>>> F.eye(3), F.eye(2, 4)
(Tensor([[1. 0. 0.]
 [0. 1. 0.]
 [0. 0. 1.]], device=xpux:0), Tensor([[1. 0. 0. 0.]
 [0. 1. 0. 0.]], device=xpux:0))
>>> F.diag(Tensor([1, 2, 3]), k=1)
Tensor([[0 1 0 0]
 [0 0 2 0]
 [0 0 0 3]
 [0 0 0 0]], dtype=int32, device=xpux:0)
>>> g = F.arange(9).reshape(3, 3)
>>> F.diag(g), F.diag(g, k=1), F.diag(g, k=-1)
(Tensor([0. 4. 8.], device=xpux:0), Tensor([1. 5.], device=xpux:0), Tensor([3. 7.], device=xpux:0))
>>> F.full((2, 3), 6), F.ones((5,), dtype="int32"), F.zeros((1, 2))
(Tensor([[6 6 6]
 [6 6 6]], dtype=int32, device=xpux:0), Tensor([1 1 1 1 1], dtype=int32, device=xpux:0), Tensor([[0. 0.]], device=xpux:0))
>>> i6 = F.arange(6, dtype="int32").reshape(2, 3)
>>> F.zeros_like(i6), F.ones_like(i6), F.full_like(i6, 2)
(Tensor([[0 0 0]
 [0 0 0]], dtype=int32, device=xpux:0), Tensor([[1 1 1]
 [1 1 1]], dtype=int32, device=xpux:0), Tensor([[2 2 2]
 [2 2 2]], dtype=int32, device=xpux:0))
>>> F.broadcast_to(Tensor(np.arange(3, dtype=np.float32)), (2, 3)).numpy()
array([[0., 1., 2.],
       [0., 1., 2.]], dtype=float32)
>>> left = Tensor(np.arange(0, 6, dtype=np.float32).reshape((2, 3)))
>>> right = Tensor(np.arange(6, 12, dtype=np.float32).reshape((2, 3)))
>>> F.concat([left, right]).numpy()
array([[ 0.,  1.,  2.],
       [ 3.,  4.,  5.],
       [ 6.,  7.,  8.],
       [ 9., 10., 11.]], dtype=float32)
>>> F.stack([left[0], right[0]], axis=0).numpy()
array([[0., 1., 2.],
       [6., 7., 8.]], dtype=float32)
>>> x = Tensor(np.zeros((10, 20)), dtype=np.float32)
>>> [p.shape for p in F.split(x, 3)], [p.shape for p in F.split(x, [6, 17], axis=1)]
([(4, 20), (3, 20), (3, 20)], [(10, 6), (10, 11), (10, 3)])
>>> F.gather(Tensor([[1, 2], [3, 4], [5, 6]]), 0, Tensor([[0, 2], [1, 0]]))
Tensor([[1 6]
 [3 2]], dtype=int32, device=xpux:0)
>>> src = Tensor([[0.9935, 0.9465, 0.2256, 0.8926, 0.4396], [0.7723, 0.0718, 0.5939, 0.357, 0.4576]])
>>> F.scatter(Tensor(np.zeros((3, 5), np.float32)), 0, Tensor([[0, 2, 0, 2, 1], [2, 0, 1, 1, 2]]), src).numpy()
array([[0.9935, 0.0718, 0.2256, 0.    , 0.    ],
       [0.    , 0.    , 0.5939, 0.357 , 0.4396],
       [0.7723, 0.9465, 0.    , 0.8926, 0.4576]], dtype=float32)
>>> mask = Tensor(np.array([[True, False], [False, True]]))
>>> vals = Tensor(np.array([[1, np.inf], [np.nan, 4]], dtype=np.float32))
>>> F.where(mask, vals, Tensor(np.array([[5, 6], [7, 8]], dtype=np.float32))).numpy()
array([[1., 6.],
       [7., 4.]], dtype=float32)
>>> v, pos = F.cond_take(mask, vals)
>>> print(v.numpy(), pos.numpy())
[1. 4.] [0 3]
>>> F.transpose(Tensor(np.array([[1, 1], [0, 0]], dtype=np.int32)), (1, 0))
Tensor([[1 0]
 [1 0]], dtype=int32, device=xpux:0)
>>> F.swapaxes(Tensor(np.arange(8, dtype=np.int32).reshape(2, 2, 2)), 0, 2)
Tensor([[[0 4]
  [2 6]]
<BLANKLINE>
 [[1 5]
  [3 7]]], dtype=int32, device=xpux:0)
>>> twelve = F.arange(12)
>>> F.reshape(twelve, (3, 4)), F.reshape(twelve, (2, -1)).shape
(Tensor([[ 0.  1.  2.  3.]
 [ 4.  5.  6.  7.]
 [ 8.  9. 10. 11.]], device=xpux:0), (2, 6))
>>> F.flatten(Tensor(np.arange(36, dtype=np.int32).reshape(2, 2, 3, 3)), 2).shape
(2, 2, 9)
>>> F.expand_dims(Tensor([1, 2]), 0).shape, F.squeeze(Tensor(np.array([1, 2], dtype=np.int32).reshape(1, 1, 2, 1)), 3).shape
((1, 2), (1, 1, 2))
>>> blk = Tensor([[1, 2], [3, 4]], np.int32)
>>> F.repeat(blk, 2, axis=0), F.tile(blk, (2, 1))
(Tensor([[1 2]
 [1 2]
 [3 4]
 [3 4]], dtype=int32, device=xpux:0), Tensor([[1 2]
 [3 4]
 [1 2]
 [3 4]], dtype=int32, device=xpux:0))
>>> F.roll(Tensor([[1, 2], [3, 4], [5, 6]], np.int32), 1, 0)
Tensor([[5 6]
 [1 2]
 [3 4]], dtype=int32, device=xpux:0)
>>> F.cumsum(m6 := Tensor([[1, 2, 3], [4, 5, 6]]), axis=0), F.cumsum(m6, axis=1)
(Tensor([[1 2 3]
 [5 7 9]], dtype=int32, device=xpux:0), Tensor([[ 1  3  6]
 [ 4  9 15]], dtype=int32, device=xpux:0))
>>> xv, yv = F.meshgrid(F.linspace(0, 1, 3), F.linspace(0, 1, 2))
>>> xv, yv
(Tensor([[0.  0.5 1. ]
 [0.  0.5 1. ]], device=xpux:0), Tensor([[0. 0. 0.]
 [1. 1. 1.]], device=xpux:0))
>>> F.utils._assert_equal(Tensor([1, 2, 3], dtype="float32"), Tensor([1, 2, 3], dtype="float32"), maxerr=0)
Tensor([1. 2. 3.], device=xpux:0)
""")


def test_docstring_examples_nn_and_vision():
    # megengine/functional/nn.py and vision.py; cvt_color adds R, G, B in megdnn's order (MegEngine's 0.86555195)
    run("""
>>> img = Tensor(np.arange(12).astype(np.float32).reshape(1, 1, 3, 4))
>>> F.nn.max_pool2d(img, 2, 1, 0)
Tensor([[[[ 5.  6.  7.]
   [ 9. 10. 11.]]]], device=xpux:0)
>>> F.avg_pool2d(img, kernel_size=2, stride=2, padding=[1, 0], mode="average")
Tensor([[[[0.25 1.25]
   [6.5  8.5 ]]]], device=xpux:0)
>>> F.hswish(Tensor(np.arange(5).astype(np.float32))).numpy().round(4)
array([0.    , 0.6667, 1.6667, 3.    , 4.    ], dtype=float32)
>>> F.softplus(Tensor(np.arange(-3, 3, dtype=np.float32))).numpy().round(4)
array([0.0486, 0.1269, 0.3133, 0.6931, 1.3133, 2.1269], dtype=float32)
>>> ten = Tensor(np.arange(-5, 5, dtype=np.float32)).reshape(2, 5)
>>> F.logsoftmax(ten, axis=1).numpy().round(4)
array([[-4.4519, -3.4519, -2.4519, -1.4519, -0.4519],
       [-4.4519, -3.4519, -2.4519, -1.4519, -0.4519]], dtype=float32)
>>> F.logsigmoid(Tensor(np.arange(-5, 5, dtype=np.float32))).numpy().round(4)
array([-5.0067, -4.0182, -3.0486, -2.1269, -1.3133, -0.6931, -0.3133,
       -0.1269, -0.0486, -0.0181], dtype=float32)
>>> F.logsumexp(ten, axis=1, keepdims=False).numpy().round(4)
array([-0.5481,  4.4519], dtype=float32)
>>> F.softmax(ten).numpy().round(4)
array([[0.0117, 0.0317, 0.0861, 0.2341, 0.6364],
       [0.0117, 0.0317, 0.0861, 0.2341, 0.6364]], dtype=float32)
>>> F.nn.dropout(F.ones((4,)), 0.5, training=False)
Tensor([1. 1. 1. 1.], device=xpux:0)
>>> F.one_hot(Tensor(np.arange(1, 4, dtype=np.int32)), num_classes=4)
Tensor([[0 1 0 0]
 [0 0 1 0]
 [0 0 0 1]], dtype=int32, device=xpux:0)
>>> F.indexing_one_hot(Tensor([[1.0, 2.0]]), Tensor([0])).numpy()
array([1.], dtype=float32)
>>> plane = Tensor([[1., 2., 3.], [4., 5., 6.]])
>>> F.nn.pad(plane, pad_width=((1, 1),), mode="constant", constant_value=9)
Tensor([[9. 9. 9.]
 [1. 2. 3.]
 [4. 5. 6.]
 [9. 9. 9.]], device=xpux:0)
>>> F.nn.pad(plane, pad_width=((1, 1), (1, 2)), mode="reflect")
Tensor([[5. 4. 5. 6. 5. 4.]
 [2. 1. 2. 3. 2. 1.]
 [5. 4. 5. 6. 5. 4.]
 [2. 1. 2. 3. 2. 1.]], device=xpux:0)
>>> F.nn.pad(plane, pad_width=((1, 1), (1, 2)), mode="replicate")
Tensor([[1. 1. 2. 3. 3. 3.]
 [1. 1. 2. 3. 3. 3.]
 [4. 4. 5. 6. 6. 6.]
 [4. 4. 5. 6. 6. 6.]], device=xpux:0)
>>> F.local_response_norm(Tensor(np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)), kernel_size=3, k=1.0, alpha=1e-4, beta=0.75).numpy()[0, 0, 1]
array([4.9906454, 5.983851 , 6.974385 , 7.961814 , 8.945709 ],
      dtype=float32)
>>> F.vision.cvt_color(Tensor(np.array([[[[-0.58675045, 1.7526233, 0.10702174]]]], np.float32)), mode="RGB2GRAY").numpy()
array([[[[0.86555195]]]], dtype=float32)
>>> np.random.seed(42)
>>> feat = Tensor(np.random.randn(1, 1, 128, 128))
>>> boxes = Tensor(np.random.random((4, 5)))
>>> F.vision.roi_pooling(feat, boxes, (2, 2)).numpy()[0].round(4)
array([[[-0.1383, -0.1383],
        [-0.5035, -0.5035]]], dtype=float32)
>>> F.vision.roi_align(feat, boxes, (2, 2)).numpy()[0].round(4)
array([[[0.175 , 0.175 ],
        [0.1359, 0.1359]]], dtype=float32)
>>> corners = np.zeros((100, 4))
>>> np.random.seed(42)
>>> corners[:, :2] = np.random.rand(100, 2) * 20
>>> corners[:, 2:] = np.random.rand(100, 2) * 20 + 100
>>> F.vision.nms(Tensor(corners), Tensor(np.random.rand(100)), iou_thresh=0.7)
Tensor([75 69], dtype=int32, device=xpux:0)
>>> grid = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
>>> F.vision.remap(grid, Tensor(np.array([[[1., 0.], [0., 1.]], [[0., 1.], [0., 1.]]], dtype=np.float32).reshape(1, 2, 2, 2))).numpy()
array([[[[1., 4.],
         [4., 4.]]]], dtype=float32)
>>> F.vision.warp_perspective(grid, Tensor(np.array([[[1., 0., 1.], [0., 1., 1.], [0., 0., 1.]]], dtype=np.float32)), (2, 2)).numpy()
array([[[[ 5.,  6.],
         [ 9., 10.]]]], dtype=float32)
>>> quad = Tensor(np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2))
>>> F.vision.interpolate(quad, [4, 4], align_corners=False).numpy()
array([[[[1.  , 1.25, 1.75, 2.  ],
         [1.5 , 1.75, 2.25, 2.5 ],
         [2.5 , 2.75, 3.25, 3.5 ],
         [3.  , 3.25, 3.75, 4.  ]]]], dtype=float32)
>>> np.array_equal(F.vision.interpolate(quad, scale_factor=2.).numpy(), F.vision.interpolate(quad, [4, 4]).numpy())
True
""")


def test_docstring_examples_modules_and_random():
    # megengine/module/*.py and megengine/random (shapes and dtypes only: the streams differ by design)
    run("""
>>> five = Tensor(np.array([-2, -1, 0, 1, 2]).astype(np.float32))
>>> with np.printoptions(precision=6):
...     for layer in (M.Softmax(), M.Sigmoid(), M.SiLU(), M.ReLU()):
...         print(layer(five).numpy())
[0.011656 0.031685 0.086129 0.234122 0.636409]
[0.119203 0.268941 0.5      0.731059 0.880797]
[-0.238406 -0.268941  0.        0.731059  1.761594]
[0. 0. 0. 1. 2.]
>>> with np.printoptions(precision=4):
...     print(M.GELU()(five).numpy())
[-0.0455 -0.1587  0.      0.8413  1.9545]
>>> M.PReLU()(Tensor(np.array([-1.2, -3.7, 2.7], np.float32))).numpy()
array([-0.3  , -0.925,  2.7  ], dtype=float32)
>>> M.LeakyReLU(0.01)(Tensor(np.array([-8, -12, 6, 10], np.float32))).numpy()
array([-0.08, -0.12,  6.  , 10.  ], dtype=float32)
>>> sixteen = Tensor(np.arange(16).astype("float32").reshape(1, 1, 4, 4))
>>> M.AdaptiveMaxPool2d((2, 2))(sixteen).numpy(), M.AdaptiveAvgPool2d((2, 2))(sixteen).numpy()
(array([[[[ 5.,  7.],
         [13., 15.]]]], dtype=float32), array([[[[ 2.5,  4.5],
         [10.5, 12.5]]]], dtype=float32))
>>> M.MaxPool2d(kernel_size=3, stride=1, padding=0)(sixteen).numpy()
array([[[[10., 11.],
         [14., 15.]]]], dtype=float32)
>>> M.AvgPool2d(kernel_size=2, stride=2, padding=[1, 0], mode="average")(Tensor(np.arange(12).astype(np.float32).reshape(1, 1, 3, 4)))
Tensor([[[[0.25 1.25]
   [6.5  8.5 ]]]], device=xpux:0)
>>> bn = M.BatchNorm2d(4)
>>> print(bn.weight.numpy().flatten(), bn.bias.numpy().flatten(), M.BatchNorm2d(4, affine=False).weight)
[1. 1. 1. 1.] [0. 0. 0. 0.] None
>>> M.Conv1d(3, 1, 3)(Tensor(np.arange(24).astype("float32").reshape(2, 3, 4))).shape
(2, 1, 2)
>>> M.Conv2d(3, 1, 3)(Tensor(np.arange(96).astype("float32").reshape(2, 3, 4, 4))).shape
(2, 1, 2, 2)
>>> M.Conv3d(3, 1, 3)(Tensor(np.arange(384).astype("float32").reshape(2, 3, 4, 4, 4))).shape
(2, 1, 2, 2, 2)
>>> rr = M.RegionRestrictedConv(in_channels=2, out_channels=2, kernel_size=2, groups=2)
>>> rr(Tensor(np.ones((1, 2, 2, 2), np.float32)), Tensor(np.zeros((1, 2, 2), np.int32)), Tensor(np.zeros((1, 1, 1), np.int32))).shape
(1, 2, 1, 1)
>>> table = Tensor(np.array([(1.2, 2.3, 3.4, 4.5, 5.6)], dtype=np.float32))
>>> M.Embedding(1, 5, initial_weight=table)(Tensor(np.array([(0, 0)], dtype=np.int32))).numpy()
array([[[1.2, 2.3, 3.4, 4.5, 5.6],
        [1.2, 2.3, 3.4, 4.5, 5.6]]], dtype=float32)
>>> M.Embedding.from_pretrained(table, freeze=False)(Tensor(np.array([(0, 0)], dtype=np.int32))).numpy()
array([[[1.2, 2.3, 3.4, 4.5, 5.6],
        [1.2, 2.3, 3.4, 4.5, 5.6]]], dtype=float32)
>>> M.Linear(in_features=3, out_features=1)(Tensor(np.arange(6).astype("float32").reshape(2, 3))).shape
(2, 1)
>>> M.LocalResponseNorm(kernel_size=3, k=1.0, alpha=1e-4, beta=0.75)(Tensor(np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5))).numpy()[0, 0, 4]
array([19.420258, 20.331186, 21.233786, 22.127764, 23.012836],
      dtype=float32)
>>> cube = Tensor(np.arange(2 * 3 * 4 * 4).astype(np.float32).reshape(2, 3, 4, 4))
>>> M.GroupNorm(3, 3)(cube).numpy()[0, 0, 0].round(5), M.InstanceNorm(3)(cube).shape, M.LayerNorm((4, 4))(cube).shape
(array([-1.62698, -1.41005, -1.19312, -0.97619], dtype=float32), (2, 3, 4, 4), (2, 3, 4, 4))
>>> M.GeneralNorm((2, 3), (0, 1))(cube).numpy()[1, 2, 3].round(5), M.GeneralNorm((3, 4), (1, -2))(cube).shape
(array([1.46385, 1.46385, 1.46385, 1.46385], dtype=float32), (2, 3, 4, 4))
>>> plane = Tensor([[1., 2., 3.], [4., 5., 6.]])
>>> M.Pad(pad_width=((1, 1),), mode="constant")(plane)
Tensor([[0. 0. 0.]
 [1. 2. 3.]
 [4. 5. 6.]
 [0. 0. 0.]], device=xpux:0)
>>> M.Pad(pad_width=((1, 1),), mode="constant", constant_val=9)(plane)
Tensor([[9. 9. 9.]
 [1. 2. 3.]
 [4. 5. 6.]
 [9. 9. 9.]], device=xpux:0)
>>> M.Pad(pad_width=((1, 1), (1, 2)), mode="reflect")(plane)
Tensor([[5. 4. 5. 6. 5. 4.]
 [2. 1. 2. 3. 2. 1.]
 [5. 4. 5. 6. 5. 4.]
 [2. 1. 2. 3. 2. 1.]], device=xpux:0)
>>> print(M.SlidingWindow(kernel_size=3, padding=1, stride=2, dilation=2)(Tensor(np.arange(30).reshape(1, 1, 5, 6))).numpy())
[[[[[[ 0  0  0]
     [ 0  7  9]
     [ 0 19 21]]
<BLANKLINE>
    [[ 0  0  0]
     [ 7  9 11]
     [19 21 23]]]
<BLANKLINE>
<BLANKLINE>
   [[[ 0  7  9]
     [ 0 19 21]
     [ 0  0  0]]
<BLANKLINE>
    [[ 7  9 11]
     [19 21 23]
     [ 0  0  0]]]]]]
>>> import megxla.random as rand
>>> rand.RNG(seed=100).uniform(size=(2, 2)).shape, rand.normal(mean=0, std=1, size=(2, 2)).shape
((2, 2), (2, 2))
>>> rand.gamma(shape=Tensor([[1], [10]], dtype="float32"), scale=Tensor([1, 5], dtype="float32"), size=2).shape
(2, 2, 2)
>>> rand.beta(alpha=Tensor([[0.5], [3]], dtype="float32"), beta=Tensor([0.5, 5], dtype="float32")).shape
(2, 2)
>>> rand.poisson(lam=Tensor([[1., 1.], [10, 10]], dtype="float32"), size=(1, 3)).shape
(1, 3, 2, 2)
>>> perm = rand.permutation(10, dtype="int32")
>>> perm.dtype, sorted(perm.numpy().tolist()) == list(range(10)), rand.permutation(10, dtype="float32").dtype
(dtype('int32'), True, dtype('float32'))
>>> rows = Tensor(np.arange(18)).reshape(6, 3)
>>> rand.shuffle(rows)
>>> sorted(rows.numpy()[:, 0].tolist())
[0, 3, 6, 9, 12, 15]
""")


def _two_layer_net():
    # GradScaler / GradManager docstrings' `model`: weights from a seeded NumPy stream (MegEngine's numbers below
    # were printed for the same weights), named_parameters order
    net = M.Sequential(M.Linear(4, 3), M.ReLU(), M.Linear(3, 2))
    rs = np.random.RandomState(0)
    net.load_state_dict({k: rs.randn(*p.shape).astype("float32") * 0.5 for k, p in net.named_parameters()})
    return net


def test_grad_scaler_and_autocast_docstring_steps():
    # amp.GradScaler's two documented ways: scaler.backward(gm, loss) inside @autocast(), and the manual
    # backward(dy=scale_factor) / unscale / update. float16 matmuls: MegEngine's values to float16 noise.
    from megxla.amp import GradScaler, autocast
    image = Tensor(np.arange(8, dtype="float32").reshape(2, 4) / 7)
    label = Tensor([0, 1], dtype="int32")
    net = _two_layer_net()
    gm, opt, scaler = GradManager().attach(net.parameters()), optim.SGD(net.parameters(), lr=0.1), GradScaler()

    @autocast()
    def train_step(image, label):
        with gm:
            logits = net(image)
            loss = F.nn.cross_entropy(logits, label)
            scaler.backward(gm, loss)
        opt.step().clear_grad()
        return logits, loss

    losses = []
    for _ in range(3):
        logits, loss = train_step(image, label)
        assert logits.dtype == np.float16 and loss.dtype == np.float32
        losses.append(loss.item())
    np.testing.assert_allclose(losses, [0.89543, 0.79789, 0.75179], rtol=1e-3)
    np.testing.assert_allclose(net[0].weight.numpy()[0], [1.06674, 0.87892, -0.5446, 0.41796], atol=2e-4)
    assert scaler.scale_factor == 16.0  # init_scale 2**4; growth_interval 2000 steps not reached

    net = _two_layer_net()
    gm, opt = GradManager().attach(net.parameters()), optim.SGD(net.parameters(), lr=0.1)
    scaler = GradScaler(init_scale=1024., growth_interval=2)
    scales, unscaled = [], []
    for _ in range(3):
        with autocast():
            with gm:
                loss = F.nn.cross_entropy(net(image), label)
                gm.backward(loss, dy=megxla.tensor(scaler.scale_factor))
        scaler.unscale(gm.attached_tensors())
        unscaled.append(net[2].bias.grad.numpy().copy())
        scaler.update()
        opt.step().clear_grad()
        scales.append(scaler.scale_factor)
    assert scales == [1024.0, 2048.0, 2048.0]
    np.testing.assert_allclose(unscaled, [[0.09839, -0.09875], [0.00952, -0.00952], [-0.047, 0.04712]], atol=3e-4)


def test_grad_manager_docstring_patterns():
    # GradManager's record()/backward() loop accumulates into .grad, release() drops a recording; attach()'s
    # callbacks run in attach order per tensor (x: f; y: f then g); a custom autodiff.Function
    from megxla.autodiff import Function
    net = _two_layer_net()
    gm = GradManager().attach(net.parameters())
    image = Tensor(np.arange(8, dtype="float32").reshape(2, 4) / 7)
    for data in (image, image * 2):
        gm.record()
        gm.backward(net(data).sum())
    want = [[8.21059, 1.55042, 5.34219], [8.21059, 1.55042, 5.34219]]
    np.testing.assert_allclose(net[2].weight.grad.numpy(), want, rtol=1e-5)
    gm.record()
    net(image).sum()
    gm.release()
    np.testing.assert_allclose(net[2].weight.grad.numpy(), want, rtol=1e-5)

    x, y = Tensor([1., 2.]), Tensor([3., 4.])
    calls = []
    def f(p, g):
        calls.append(("f", p is x))
        return g * 2
    def g(p, grad):
        calls.append(("g", p is x))
        return grad + 1
    gm = GradManager()
    gm.attach([x, y], callbacks=[f])
    gm.attach([y], callbacks=[g])
    with gm:
        gm.backward((x * y).sum())
    assert x.grad.numpy().tolist() == [6.0, 8.0] and y.grad.numpy().tolist() == [3.0, 5.0]
    assert calls == [("f", True), ("f", False), ("g", False)]

    class Sigmoid(Function):
        def forward(self, x):
            self.y = 1 / (1 + F.exp(-x))
            return self.y

        def backward(self, dy):
            return dy * self.y * (1 - self.y)

    z = Tensor([-1., 0., 2.])
    with GradManager().attach(z) as gm:
        out = Sigmoid()(z)
        gm.backward(out.sum())
    np.testing.assert_allclose(out.numpy(), [0.26894, 0.5, 0.8808], atol=1e-5)
    np.testing.assert_allclose(z.grad.numpy(), [0.19661, 0.25, 0.10499], atol=1e-5)


def test_dataset_docstrings_with_worker_processes():
    # ArrayDataset / ConcatDataset docstrings: SequentialSampler batches through DataLoader(num_workers=3)
    from megxla.data import DataLoader
    from megxla.data.dataset import ArrayDataset, ConcatDataset
    from megxla.data.sampler import SequentialSampler
    images = np.arange(20, dtype=np.uint8).reshape(5, 1, 2, 2)
    labels = np.arange(5, dtype=int)
    full = ArrayDataset(images, labels)
    got = [(b.dtype, b.shape, b.ravel().tolist(), c.dtype, c.tolist())
           for b, c in DataLoader(full, sampler=SequentialSampler(full, batch_size=2), num_workers=3)]
    assert got == [(np.uint8, (2, 1, 2, 2), list(range(8)), np.int64, [0, 1]),
                   (np.uint8, (2, 1, 2, 2), list(range(8, 16)), np.int64, [2, 3]),
                   (np.uint8, (1, 1, 2, 2), list(range(16, 20)), np.int64, [4])]
    both = ConcatDataset([ArrayDataset(images[:2], labels[:2]), ArrayDataset(images[2:], labels[2:])])
    assert len(both) == 5 and both[3][1] == 3 and both[3][0].ravel().tolist() == [12, 13, 14, 15]


@pytest.mark.parametrize("name", ["MNIST", "CIFAR10"])
def test_dataset_without_files_raises_megengine_s_value_error(tmp_path, name):
    # the data/dataset page: MNIST(root=..., download=False) on a directory without the files raises ValueError in
    # MegEngine ("dir path/to/data/ does not exist"); megxla's error is also a FileNotFoundError
    from megxla.data import dataset
    for root in (str(tmp_path / "absent"), str(tmp_path)):
        with pytest.raises(ValueError) as info:
            getattr(dataset, name)(root=root, train=False, download=False)
        assert isinstance(info.value, FileNotFoundError) and name in str(info.value)


def test_submodule_names_follow_megengine():
    # traced_module/graphsurgeon-example: the surgery reads `conv_module._name` to set the fused module back onto
    # its parent. MegEngine names a module when it is assigned: `_short_name` its key (a list item's "blocks.1"),
    # `_name` the dotted path from the parent's `_name` (or its user-given `name`); the first name stays.
    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.conv = M.Conv2d(3, 4, 1, bias=False)
            self.seq = M.Sequential(M.Conv2d(4, 4, 1), M.ReLU())
            self.blocks = [M.Linear(2, 2), M.Linear(2, 2)]

        def forward(self, x):
            return self.seq(self.conv(x))

    net = Net()
    assert (net.conv._name, net.seq._name, net.seq[0]._name, net.blocks[1]._name, net.blocks[1]._short_name) == \
        ("conv", "seq", "seq.0", "blocks.1", "blocks.1")
    assert net._name is None
    outer = M.Sequential(net)
    assert (net._name, net._short_name, net.conv._name) == ("0", "0", "0.conv")  # paths follow the new parent

    head = M.Linear(2, 3, name="head")
    holder = M.Sequential()
    holder.h = head
    assert (head.name, head._name, head._short_name) == ("head", "h", "h")
    assert outer[0] is net


_PIPELINE = """
import megxla, megxla.distributed as dist
from megxla import Tensor

@dist.launcher(n_gpus=2)
def main():
    # the distributed guide's pipeline example, cut to what the bug needed: rank 1 prints a tensor it received
    if dist.get_rank() == 0:
        dist.functional.remote_send(Tensor([[1.5]]), dest_rank=1)
        return repr(Tensor([0.0]))
    return repr(dist.functional.remote_recv(src_rank=0) * 2), megxla.get_default_device()

print(main())
"""


def test_distributed_guide_launch_default_device_type():
    # @dist.launcher(n_gpus=2) with the default device_type ("xpu") from a fresh program, as the guide runs it:
    # rank 1's default device is named "xpu1" as in MegEngine; on a one-device host printing a tensor there
    # raised "device 'xpu1' does not exist"
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", _PIPELINE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == \
        "['Tensor([0.], device=xpu0:0)', ('Tensor([[3.]], device=xpu1:0)', 'xpu1')]"


def test_dataset_default_root_is_megengine_s(tmp_path, monkeypatch):
    # the distributed guide calls MNIST() with no root: MegEngine reads $XDG_CACHE_HOME/megengine/MNIST
    # (~/.cache/megengine/MNIST), so files MegEngine downloaded there are used without a download
    import gzip
    import struct
    from megxla.data.dataset import MNIST
    folder = tmp_path / "megengine" / "MNIST"
    folder.mkdir(parents=True)
    images = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    for kind in ("train", "t10k"):
        with gzip.open(folder / f"{kind}-images-idx3-ubyte.gz", "wb") as f:
            f.write(struct.pack(">iiii", 2051, 2, 28, 28) + images.tobytes())
        with gzip.open(folder / f"{kind}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(struct.pack(">ii", 2049, 2) + bytes([7, 3]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    data = MNIST(train=False)
    assert data.root == str(folder) and len(data) == 2
    image, label = data[1]
    assert image.shape == (28, 28, 1) and image.dtype == np.uint8 and label == 3


def test_quantization_guide_basic_block_qat_then_quantize(tmp_path):
    # quantization guide: its quantizable BasicBlock (ConvBnRelu2d, ConvBn2d, Elemwise("FUSE_ADD_RELU")) with
    # QuantStub / DequantStub, quantize_qat(model, ema_fakequant_qconfig) as the page writes it (the QConfig lands
    # in `inplace`, so MegEngine uses its default qconfig: megxla warns and does the same), three QAT steps,
    # quantize, and the page's traced infer_func with dump. Weights from a seeded NumPy stream; MegEngine's numbers.
    import warnings
    from megxla import jit
    from megxla.quantization import ema_fakequant_qconfig, quantize, quantize_qat

    class BasicBlock(M.Module):
        def __init__(self, in_channels, channels):
            super().__init__()
            self.conv_bn_relu1 = M.ConvBnRelu2d(in_channels, channels, 3, 1, padding=1, bias=False)
            self.conv_bn2 = M.ConvBn2d(channels, channels, 3, 1, padding=1, bias=False)
            self.downsample = M.ConvBn2d(in_channels, channels, 1, 1, bias=False)
            self.add_relu = M.Elemwise("FUSE_ADD_RELU")

        def forward(self, x):
            return self.add_relu(self.conv_bn2(self.conv_bn_relu1(x)), self.downsample(x))

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = M.QuantStub(), M.DequantStub()
            self.block, self.pool, self.fc = BasicBlock(3, 4), M.AdaptiveAvgPool2d(1), M.Linear(4, 3)

        def forward(self, x):
            return self.dequant(self.fc(F.flatten(self.pool(self.block(self.quant(x))), 1)))

    model = Net()
    rs = np.random.RandomState(0)
    model.load_state_dict({k: (rs.randn(*v.shape) * 0.3).astype("float32") if "weight" in k or "bias" in k
                           else np.asarray(v) for k, v in model.state_dict().items()})
    img = Tensor(rs.rand(4, 3, 6, 6).astype("float32"))
    lab = Tensor([0, 1, 2, 1], dtype="int32")
    np.testing.assert_allclose(model(img).numpy()[0], [0.1424, 0.6139, -0.0087], atol=1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_qat(model, ema_fakequant_qconfig)
    gm = GradManager().attach(model.parameters())
    opt = optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(3):
        with gm:
            loss = F.nn.cross_entropy(model(img), lab)
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(round(loss.item(), 4))
    assert losses == [1.0272, 1.023, 1.0219]
    model.eval()
    np.testing.assert_allclose(model(img).numpy()[2], [0.1567, 0.627, -0.0181], atol=1e-4)
    quantize(model)

    @jit.trace(capture_as_const=True)
    def infer_func(processed_img):
        model.eval()
        return F.softmax(model(processed_img))

    np.testing.assert_allclose(infer_func(img).numpy(),
                               [[0.3028, 0.4563, 0.2408], [0.2995, 0.4595, 0.2411], [0.2907, 0.4652, 0.2441],
                                [0.2995, 0.4595, 0.2411]], atol=1e-4)
    infer_func.dump(str(tmp_path / "model.mge"), arg_names=["data"])
    assert (tmp_path / "model.mge").stat().st_size > 0
