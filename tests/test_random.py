"""megxla.random: distribution statistics on 10k samples, reproducibility under ``seed``, RNG objects
independent of the global state, MegEngine's shape rules, dropout, bad input, and draws inside a compiled step."""
import numpy as np
import pytest
import scipy.stats as st

import megxla
import megxla.functional as F
import megxla.random as R
from megxla.core._dispatch import OpError

T = megxla.Tensor
N = 10_000


def _moments(x, mean, var, tol=0.05):
    x = np.asarray(x, np.float64).ravel()
    se_mean = np.sqrt(var / x.size)
    assert abs(x.mean() - mean) < 5 * se_mean + 1e-3, (x.mean(), mean)
    assert abs(x.var() - var) < tol * var + 1e-3, (x.var(), var)


@pytest.mark.parametrize("draw, mean, var", [
    (lambda r: r.uniform(-1, 3, size=N), 1.0, 16 / 12),
    (lambda r: r.normal(2, 0.5, size=(100, 100)), 2.0, 0.25),
    (lambda r: r.gamma(2.0, 1.5, size=N), 3.0, 4.5),
    (lambda r: r.beta(2.0, 5.0, size=N), 2 / 7, 10 / (49 * 8)),
    (lambda r: r.poisson(4.0, size=N), 4.0, 4.0),
    (lambda r: r.exponential(0.5, size=N), 2.0, 4.0),  # (rate 0.5: mean 2)
], ids=["uniform", "normal", "gamma", "beta", "poisson", "exponential"])
def test_moments(draw, mean, var):
    x = draw(R.RNG(seed=11)).numpy()
    assert x.dtype == np.float32 and x.size == N
    _moments(x, mean, var)


def test_distributions_ks():
    """Kolmogorov-Smirnov against SciPy's distributions (p > 1e-3 at this seed)."""
    r = R.RNG(seed=5)
    for x, cdf in [(r.uniform(0, 2, size=N), st.uniform(0, 2).cdf), (r.normal(1, 2, size=N), st.norm(1, 2).cdf),
                   (r.gamma(0.7, 2.0, size=N), st.gamma(0.7, scale=2.0).cdf),
                   (r.beta(0.5, 0.5, size=N), st.beta(0.5, 0.5).cdf),
                   (r.exponential(1 / 3, size=N), st.expon(scale=3.0).cdf)]:
        assert st.kstest(x.numpy(), cdf).pvalue > 1e-3
    assert x.numpy().min() >= 0


def test_uniform_bounds_and_poisson_integral():
    r = R.RNG(seed=2)
    x = r.uniform(5, 6, size=N).numpy()
    assert x.min() >= 5 and x.max() < 6
    p = r.poisson(T([0.5, 20.0]), size=N // 2).numpy()
    assert p.shape == (N // 2, 2) and np.all(p == np.round(p)) and p.min() >= 0
    _moments(p[:, 1], 20.0, 20.0)


def test_tensor_parameters_broadcast():
    r = R.RNG(seed=3)
    shape, scale = T([[1.0], [10.0]]), T([1.0, 5.0])
    assert r.gamma(shape, scale).shape == (2, 2)
    x = r.gamma(shape, scale, size=(N // 4,)).numpy()
    assert x.shape == (N // 4, 2, 2)
    np.testing.assert_allclose(x.mean(0), [[1, 5], [10, 50]], rtol=0.1)
    b = r.beta(T([1.0, 8.0]), 2.0, size=N // 2).numpy()
    np.testing.assert_allclose(b.mean(0), [1 / 3, 0.8], atol=0.02)


def test_default_sizes_follow_megengine():
    assert R.uniform().shape == (1,) and R.normal().shape == (1,)
    # MegEngine 1.13 has no 0-d sample: gamma/beta/poisson of scalar parameters give shape (1,)
    assert R.gamma(2.0).shape == (1,) and R.poisson(T([1.0, 2.0])).shape == (2,)
    assert R.normal(size=3).shape == (3,) and R.uniform(size=(2, 0)).shape == (2, 0)


def test_permutation_and_shuffle():
    r = R.RNG(seed=4)
    p = r.permutation(20)
    assert p.dtype == np.int32 and sorted(p.numpy().tolist()) == list(range(20))
    assert r.permutation(5, dtype="float32").dtype == np.float32
    assert r.permutation(0).shape == (0,)
    x = T(np.arange(12).reshape(6, 2))
    before = x.numpy().copy()
    y = r.permutation(x)  # a shuffled copy; x is untouched
    np.testing.assert_array_equal(x.numpy(), before)
    assert sorted(map(tuple, y.numpy().tolist())) == sorted(map(tuple, before.tolist()))
    assert r.shuffle(x) is None  # in place, rows kept whole
    assert sorted(map(tuple, x.numpy().tolist())) == sorted(map(tuple, before.tolist()))
    # every position sees every value: the permutation is uniform enough
    counts = np.zeros((4, 4))
    for _ in range(200):
        counts[np.arange(4), r.permutation(4).numpy()] += 1
    assert counts.min() > 25


def test_multinomial():
    r = R.RNG(seed=6)
    probs = T([0.1, 0.2, 0.7])
    s = r.multinomial(probs, N, replacement=True).numpy()
    assert s.dtype == np.int32 and s.shape == (N,)
    np.testing.assert_allclose(np.bincount(s, minlength=3) / N, [0.1, 0.2, 0.7], atol=0.02)
    s2 = r.multinomial(T([[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 5.0, 1.0]]), 2).numpy()
    assert s2.shape == (2, 2)
    for row, allowed in zip(s2, ({0, 1, 3}, {2, 3})):
        assert len(set(row)) == 2 and set(row) <= allowed


def test_seed_reproducibility_and_global_rng():
    R.seed(123)
    a = [R.uniform(size=4).numpy(), R.normal(size=3).numpy(), R.permutation(6).numpy(),
         R.gamma(2.0, size=3).numpy(), R.RNG().uniform(size=2).numpy(), F.dropout(F.ones((16,)), 0.5).numpy()]
    R.seed(123)
    b = [R.uniform(size=4).numpy(), R.normal(size=3).numpy(), R.permutation(6).numpy(),
         R.gamma(2.0, size=3).numpy(), R.RNG().uniform(size=2).numpy(), F.dropout(F.ones((16,)), 0.5).numpy()]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    R.seed(124)
    assert not np.array_equal(R.uniform(size=4).numpy(), a[0])
    # consecutive draws differ
    assert not np.array_equal(R.uniform(size=4).numpy(), R.uniform(size=4).numpy())


def test_rng_objects_are_independent_of_global_state():
    r1, r2 = R.RNG(seed=9), R.RNG(seed=9)
    R.seed(0)
    x1 = r1.normal(size=5).numpy()
    R.uniform(size=100)  # advancing or reseeding the global state does not touch seeded RNGs
    R.seed(77)
    x2 = r2.normal(size=5).numpy()
    np.testing.assert_array_equal(x1, x2)
    # and seeded RNGs do not advance the global state
    R.seed(1)
    g1 = R.uniform(size=3).numpy()
    R.seed(1)
    R.RNG(seed=3).uniform(size=10)
    np.testing.assert_array_equal(R.uniform(size=3).numpy(), g1)
    assert not np.array_equal(R.RNG(seed=10).uniform(size=5).numpy(), R.RNG(seed=11).uniform(size=5).numpy())


def test_seeded_rng_draws_on_its_device():
    # MegEngine's test_UniformRNG / test_PoissonRNG / test_PermutationRNG: RNG(seed, device) makes its samples on
    # that device (the device was ignored: every sample showed xpux), the same numbers on any device
    m0, m1 = R.RNG(seed=111, device="cpu0"), R.RNG(seed=111, device="cpu1")
    a, b = m0.uniform(size=(100,)), m1.uniform(size=(100,))
    assert a.device == "cpu0" and b.device == "cpu1"
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    lam = T([[2.0, 3.0], [9.0, 10.0]])
    p0, p1 = m0.poisson(lam.to("cpu0"), size=(10,)), m1.poisson(lam.to("cpu1"), size=(10,))
    assert p0.device == "cpu0" and p1.device == "cpu1"
    np.testing.assert_array_equal(p0.numpy(), p1.numpy())
    assert m1.permutation(10).device == "cpu1"
    # without a seed MegEngine ignores the device: the global state's
    assert R.RNG(device="cpu1").uniform(size=(2,)).device != "cpu1"


def test_permutation_of_a_scalar_tensor_is_a_one_element_shuffle():
    # MegEngine's kernels see a 0-d tensor as shape (1,) (test_PermutationRNG: permutation(Tensor(7)) -> [7])
    out = R.RNG(seed=1).permutation(T(7))
    assert out.shape == (1,) and out.numpy().tolist() == [7]


def test_dropout_statistics_and_modes():
    R.seed(5)
    x = F.ones((N,))
    y = F.dropout(x, 0.3).numpy()
    assert set(np.unique(y).tolist()) <= {0.0, np.float32(1 / 0.7)}
    assert abs((y == 0).mean() - 0.3) < 0.02
    assert abs(y.mean() - 1.0) < 0.03
    assert F.dropout(x, 0.3, training=False) is x
    assert F.dropout(x, 0.0) is x


def test_random_draws_inside_a_compiled_step():
    """Keys are op inputs: a compiled step draws fresh numbers per call, reproducibly when the global seed is
    set before the traced function is built (it takes its own key from the global generator)."""
    from megxla.jit import xla_trace

    def step(x):
        return F.dropout(x, 0.5) + R.normal(size=(4,))

    x = F.ones((4,))

    def run():
        R.seed(42)
        traced = xla_trace(step)
        return [traced(x).numpy() for _ in range(3)]

    outs, outs2 = run(), run()
    assert not np.array_equal(outs[1], outs[2])
    for a, b in zip(outs, outs2):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("call, match", [
    (lambda: R.uniform(1, 1), "uniform"),
    (lambda: R.uniform(size=(-1,)), "uniform"),
    (lambda: R.normal(0, float("inf")), "normal"),  # MegEngine accepts std 0 and negative std
    (lambda: R.gamma(-1.0), "gamma"),
    (lambda: R.gamma(1.0, 0), "gamma"),
    (lambda: R.gamma(T([1, 2])), "gamma"),
    (lambda: R.gamma(T([1.0, 2.0]), T([1.0, 2.0, 3.0])), "gamma"),
    (lambda: R.beta(0, 1), "beta"),
    (lambda: R.poisson(-2.0), "poisson"),
    (lambda: R.poisson("a"), "poisson"),
    (lambda: R.permutation(-1), "permutation"),
    (lambda: R.permutation(2.5), "permutation"),
    (lambda: R.permutation(3, dtype="nope"), "permutation"),
    (lambda: R.shuffle([1, 2]), "shuffle"),
    (lambda: R.exponential(0), "exponential"),
    (lambda: R.exponential(T([1.0, -1.0])), "exponential"),
    (lambda: R.multinomial(T([[1.0, 2.0]]), 0, replacement=True), "num_samples"),
    (lambda: R.multinomial(T(np.zeros((2, 0), "float32")), 1, replacement=True), "num of input"),
    (lambda: R.multinomial(T([0.5, 0.5]), 3), "multinomial"),
    (lambda: R.multinomial(T([[[1.0]]]), 1), "multinomial"),
    (lambda: F.dropout(F.ones((2,)), 1.0), "dropout"),
    (lambda: F.dropout(T([1, 2]), 0.5), "dropout"),
])
def test_bad_input(call, match):
    state = R.get_rng_state().numpy().copy()
    with pytest.raises((OpError, ValueError, TypeError), match=match):
        call()
    np.testing.assert_array_equal(R.get_rng_state().numpy(), state)  # nothing drawn


# ---- issue 18: draws of any shape from one executable per distribution; compiled steps draw the same values ----
from megxla.core.ops import random as P  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

BIG = 2 * P.CHUNK + 123  # three chunks


@pytest.mark.parametrize("draw, mean, var", [
    (lambda r: r.uniform(-1, 3, size=BIG), 1.0, 16 / 12),
    (lambda r: r.normal(2, 0.5, size=(3, BIG // 3)), 2.0, 0.25),
    (lambda r: r.gamma(2.0, 1.5, size=BIG), 3.0, 4.5),
    (lambda r: r.beta(2.0, 5.0, size=BIG), 2 / 7, 10 / (49 * 8)),
    (lambda r: r.poisson(4.0, size=BIG), 4.0, 4.0),
    (lambda r: r.exponential(0.5, size=BIG), 2.0, 4.0),
], ids=["uniform", "normal", "gamma", "beta", "poisson", "exponential"])
def test_moments_of_large_draws_across_chunks(draw, mean, var):
    x = draw(R.RNG(3)).numpy().ravel()
    _moments(x, mean, var, tol=0.02)
    c0, c1 = x[:P.CHUNK], x[P.CHUNK:2 * P.CHUNK]
    assert abs(np.corrcoef(c0, c1)[0, 1]) < 0.02  # chunks are independent streams, not copies
    _moments(c1, mean, var, tol=0.05)


def test_large_permutation_is_uniform_and_complete():
    n = P.CHUNK + 5
    p = R.RNG(4).permutation(n).numpy()
    assert sorted(p.tolist()) == list(range(n))
    # position of element 0 over many small permutations: uniform
    pos = [int(np.argmax(R.RNG(s).permutation(8).numpy() == 0)) for s in range(400)]
    assert st.chisquare(np.bincount(pos, minlength=8)).pvalue > 1e-3


_KEY = jnp.asarray(P.key_data_from_seed(17))
_OPS = [
    (P.normal.bind(shape=(5, 7), mean=0.5, std=2.0, dtype="float32"), ()),
    (P.normal.bind(shape=(2, P.CHUNK + 9), mean=0.0, std=1.0, dtype="float32"), ()),
    (P.normal.bind(shape=(40,), mean=0.1, std=0.3, dtype="float16"), ()),
    (P.uniform.bind(shape=(P.CHUNK,), low=-1.0, high=3.0, dtype="float32"), ()),
    (P.exponential.bind(size=(3, 2)), (np.array([1.5, 0.2], "float32"),)),
    (P.gamma.bind(size=(5, 2)), (np.array([0.5, 3.0], "float32"), np.float32(2.0))),
    (P.beta.bind(size=(6, 2)), (np.array([0.5, 3.0], "float32"), np.array([[1.0], [2.0]] * 3, "float32"))),
    (P.poisson.bind(size=(3, 2)), (np.array([2.0, 30.0], "float32"),)),
    (P.permutation.bind(n=1000, dtype="int32"), ()),
    (P.shuffle.bind(), (np.arange(30.0, dtype="float32").reshape(10, 3),)),
]


@pytest.mark.parametrize("op, args", _OPS, ids=[f"{op.name}{i}" for i, (op, _) in enumerate(_OPS)])
def test_eager_kernel_equals_the_compiled_op(op, args):
    args = [jnp.asarray(a) for a in args]
    compiled = np.asarray(jax.jit(op.fn)(_KEY, *args))
    # (repeated: past SMALL_AFTER draws a small draw takes an executable of its size -- the same values)
    for _ in range(P.SMALL_AFTER + 2):
        np.testing.assert_array_equal(np.asarray(op.kernel(_KEY, *args)), compiled)


def test_a_repeated_small_draw_computes_no_whole_chunk():
    # a 40-value normal draw computed 65536 values each time (1.2-1.6 ms eagerly on 2 cores)
    op = P.normal.bind(shape=(8, 5), mean=0.0, std=1.0, dtype="float32")
    for _ in range(P.SMALL_AFTER + 1):
        op.kernel(_KEY)
    chunks = P._CHUNK_KERNELS[("normal", (("dtype", "float32"),))]
    assert min(chunks.kernels) == P.SMALL_SIZES[0]


def test_host_seed_and_split_match_jax():
    for s in (0, 1, 12345, 2 ** 31 - 1):
        np.testing.assert_array_equal(P.key_data_from_seed(s), jax.random.key_data(jax.random.key(s)))
    k = P.key_data_from_seed(9)
    for _ in range(20):
        new, sub = P.split_on_host(k)
        jnew, jsub = jax.random.split(jax.random.wrap_key_data(jnp.asarray(k)))
        np.testing.assert_array_equal(new, jax.random.key_data(jnew))
        np.testing.assert_array_equal(sub, jax.random.key_data(jsub))
        k = new


def test_large_draw_inside_a_compiled_step_equals_the_eager_draw():
    from megxla.jit import xla_trace

    @xla_trace
    def f():
        return R.normal(0.0, 1.0, size=(P.CHUNK + 11,)), R.permutation(50)

    state = R.get_rng_state()
    for _ in range(3):  # recording, then compiled calls
        key = f.random_seed.numpy().copy()  # the step's own key state before the call
        compiled = [o.numpy() for o in f()]
        state._reset(megxla.Tensor(key, dtype="uint32"))  # replay the same draws eagerly
        eager = [R.normal(0.0, 1.0, size=(P.CHUNK + 11,)).numpy(), R.permutation(50).numpy()]
        for a, b in zip(eager, compiled):
            np.testing.assert_array_equal(a, b)
    R.seed(0)


def test_global_generator_starts_from_the_time_as_megengine():
    # MegEngine seeds the global generator with int(time.time()) at import: unseeded runs differ; seed() fixes it.
    import time
    from megxla.random._rng import _GlobalRNG
    assert abs(_GlobalRNG()._seed - time.time()) < 60


def test_exponential_and_multinomial_as_megengine_1_13_4():
    """1.13.4's ``exponential(rate, size)`` (a rate, float or Tensor, not a scale: mean ``1 / rate``; output
    ``size + rate.shape``) and ``multinomial(input, num_samples, replacement)``, keyword names included."""
    r = R.RNG(seed=7)
    x = r.exponential(rate=4.0, size=(N,)).numpy()
    _moments(x, 0.25, 0.0625)
    rate = T([[1.0, 1.0], [0.1, 0.1]])
    assert r.exponential(rate=rate).shape == (2, 2)
    big = r.exponential(rate=rate, size=(2000,)).numpy()
    assert big.shape == (2000, 2, 2)
    np.testing.assert_allclose(big.mean(0), [[1, 1], [10, 10]], rtol=0.1)
    assert R.exponential(1.5, (3,)).shape == (3,)
    out = R.multinomial(input=T([[1.0, 2.0, 3.0, 4.0], [0.0, 7.0, 2.0, 1.0]]), num_samples=2, replacement=False)
    assert out.shape == (2, 2) and out.dtype == np.int32
    assert 0 not in out.numpy()[1]  # a zero weight is never drawn
    # an empty batch of rows (MegEngine's test_rng_empty_tensor)
    assert R.multinomial(input=R.normal(0, 1, (0, 10)), num_samples=2, replacement=True).shape == (0, 2)


def test_exponential_distribution_as_megengine_1_13_4():
    """``megengine.distributions.Exponential`` (1.13.4): sample shapes, moments, density and its inverse."""
    from megxla.distributions import Distribution, Exponential
    rate = np.abs(np.random.RandomState(0).randn(5, 5)) + 0.1
    assert Exponential(rate).sample().shape == (5, 5) and Exponential(rate).sample((7,)).shape == (7, 5, 5)
    assert Exponential(np.array([0.5])).sample().shape == (1,) and Exponential(0.2).sample((1,)).shape == (1,)
    R.seed(3)
    m = Exponential(2.0)
    x = m.sample((N,)).numpy()
    _moments(x, float(m.mean), float(m.variance))
    v = T([0.1, 1.0, 3.0])
    np.testing.assert_allclose(m.log_prob(v).numpy(), st.expon(scale=0.5).logpdf(v.numpy()), rtol=1e-5)
    np.testing.assert_allclose(m.icdf(m.cdf(v)).numpy(), v.numpy(), rtol=1e-5)
    assert float(m.stddev) == 0.5
    with pytest.raises(NotImplementedError, match="sample"):
        Distribution().sample()


def test_rng_op_descriptors_draw_from_their_handle_or_the_global_generator():
    # MegEngine's low-level RNG: builtin descriptors applied with core2.apply, a handle per generator
    from megxla.core._imperative_rt.core2 import apply
    from megxla.core._imperative_rt.ops import delete_rng_handle, get_rng_handle_compnode, new_rng_handle
    from megxla.core.ops import builtin as B
    mge = megxla
    shape = mge.Tensor([200, 50], dtype="int32")
    h1, h2 = new_rng_handle("xpux", 233), new_rng_handle("xpux", 233)
    (a,) = apply(B.GaussianRNG(seed=233, mean=3.0, std=2.0, dtype="float32", handle=h1), shape)
    (b,) = apply(B.GaussianRNG(seed=233, mean=3.0, std=2.0, dtype="float32", handle=h1), shape)
    (c,) = apply(B.GaussianRNG(seed=233, mean=3.0, std=2.0, dtype="float32", handle=h2), shape)
    assert a.shape == (200, 50) and a.dtype == np.float32
    np.testing.assert_array_equal(a.numpy(), c.numpy())  # same seed, own state: the same draws
    assert not (a.numpy() == b.numpy()).all()  # each application advances its generator
    assert abs(a.numpy().mean() - 3.0) < 0.1 and abs(a.numpy().std() - 2.0) < 0.1
    with pytest.raises(RuntimeError, match="inconsistent rng seed"):
        apply(B.UniformRNG(seed=1, handle=h1), shape)
    assert str(get_rng_handle_compnode(h1)) == str(a.device)
    (p,) = apply(B.PermutationRNG(seed=233, dtype="float32", handle=h1), mge.Tensor([6], dtype="int32"))
    assert p.dtype == np.float32 and sorted(p.numpy().tolist()) == [0, 1, 2, 3, 4, 5]
    x = mge.Tensor(np.arange(8.0).reshape(4, 2))
    y, idx = apply(B.ShuffleRNG(seed=233, handle=h1), x)
    np.testing.assert_array_equal(y.numpy(), x.numpy()[idx.numpy()])
    (g,) = apply(B.GammaRNG(seed=233, handle=h2), mge.Tensor(np.full(4000, 2.0, np.float32)),
                 mge.Tensor(np.full(4000, 0.5, np.float32)))
    assert abs(g.numpy().mean() - 1.0) < 0.1
    (m,) = apply(B.MultinomialRNG(seed=233, num_samples=3, replacement=False, handle=h2),
                 mge.Tensor([[0.0, 1.0, 1.0, 1.0]]))
    assert m.shape == (1, 3) and sorted(m.numpy()[0].tolist()) == [1, 2, 3]
    delete_rng_handle(h1), delete_rng_handle(h2)
    with pytest.raises(ValueError):
        apply(B.UniformRNG(seed=233, handle=h1), shape)
    # handle 0: the global generator, reproducible with megxla.random.seed
    mge.random.seed(5)
    (u1,) = apply(B.UniformRNG(), shape)
    mge.random.seed(5)
    (u2,) = apply(B.UniformRNG(), shape)
    np.testing.assert_array_equal(u1.numpy(), u2.numpy())
    assert 0 <= u1.numpy().min() and u1.numpy().max() < 1
