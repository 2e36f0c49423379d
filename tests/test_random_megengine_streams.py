"""Parameter initialisation gives MegEngine 1.13's numbers (its CPU generator: xoroshiro128+ per kind of draw,
megxla/random/_xoroshiro.py), also after megxla's own eager draws, which stay JAX's (the same as a traced step's).
Every expected value below is what MegEngine 1.13.0 (CPU) printed for the same program (/tmp/s79/rng probes,
session 79)."""
import hashlib
import math

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.random as R
from megxla.random import _xoroshiro


def _md5(a):
    return hashlib.md5(np.ascontiguousarray(a).tobytes()).hexdigest()


@pytest.fixture(autouse=True)
def _reseed():
    yield
    R.seed(0)


U0 = [0.6851612329483032, 0.9979196786880493, 0.9360051155090332]  # MegEngine: seed(0); uniform(size=(3,))


def test_the_streams_are_megengines():
    uniform = _xoroshiro.Streams(0)["uniform"]
    assert uniform.uniform(3).tolist() == U0
    assert uniform.uniform(4).tolist() == [0.7517716884613037, 0.6216673851013184, 0.16129791736602783,
                                           0.8514292240142822]  # (MegEngine: the stream goes on)
    # MegEngine: the normal stream is its own (seed(0); two uniform draws; normal(size=(4,)))
    assert _xoroshiro.Streams(0)["normal"].normal(4).tolist() == [
        0.8695245981216431, -0.011366103775799274, 0.004048405215144157, -0.36366507411003113]
    assert _xoroshiro.Streams(0)["normal"].normal(5, 1.5, 0.3).tolist() == [
        1.760857343673706, 1.4965901374816895, 1.5012145042419434, 1.3909004926681519, 1.6547162532806396]


def test_large_draws_bit_for_bit():
    streams = _xoroshiro.Streams(7)  # MegEngine: seed(7); uniform(size=(100003,)); normal(0.25, 1.7, (200001,)) ...
    assert _md5(streams["uniform"].uniform(100003)) == "e468fa67f4b9713f12757fd7d3f90140"
    # (Box-Muller with glibc's float32 logf / cosf / sinf, whose roundings _libm_rounding.npz holds)
    normal = streams["normal"]
    assert _md5(normal.normal(200001, 0.25, 1.7)) == "0e44c5149c486363ff9fb22124028c73"
    assert normal.normal(1).tolist() == [1.384429693222046]  # (an odd size: a whole pair for one value)
    assert normal.normal(3).tolist() == [-1.3988627195358276, 3.096022844314575, -0.6751168966293335]
    assert (np.float32(-1) + np.float32(2) * streams["uniform"].uniform(6)).tolist() == [
        0.6670105457305908, -0.02890801429748535, 0.9392459392547607, 0.0066699981689453125, 0.9986560344696045,
        -0.7141976356506348]  # (MegEngine's uniform(low=-1, high=1): low + (high - low) * u in float32)


def test_initialisers_after_eager_draws_are_megengines():
    # megxla's own eager draws are JAX's numbers (a traced step draws the same), but they take their count from
    # MegEngine's streams, so what is built after them is initialised as MegEngine initialises it
    R.seed(0)
    R.normal(size=(5,))
    R.uniform(size=(7,))
    R.normal(size=(2, 3))
    R.permutation(4)
    lin = M.Linear(3, 2)
    assert lin.weight.numpy().tolist() == [[0.26455533504486084, -0.08464748412370682, 0.4046793282032013],
                                           [0.4814020097255707, 0.9267260432243347, 0.3433578312397003]]
    M.init.uniform_(lin.bias, -1, 1)
    assert lin.bias.numpy().tolist() == [-0.45296573638916016, -0.5123343467712402]
    R.uniform(size=(3,))
    M.init.uniform_(lin.bias, -1, 1)
    assert lin.bias.numpy().tolist() == [0.7814276218414307, 0.9014296531677246]
    R.RNG(seed=5).normal(size=(9,))  # (a seeded generator's draws are its own)
    assert M.Linear(2, 2).weight.numpy().tolist() == [[0.06425999104976654, -0.5765888094902039],
                                                      [0.7005224227905273, 0.13370291888713837]]


class _Zoo(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = M.BatchNorm2d(8)
        self.dw = M.Conv2d(8, 8, 3, groups=8)
        self.fc = M.Linear(8, 10)
        self.emb = M.Embedding(11, 4)
        self.ct = M.ConvTranspose2d(8, 4, 2)
        self.c3 = M.Conv3d(2, 3, (1, 2, 3))
        for m in self.modules():
            if isinstance(m, M.Conv2d):
                M.init.msra_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    fan_in, _ = M.init.calculate_fan_in_and_fan_out(m.weight)
                    bound = 1 / math.sqrt(fan_in)
                    M.init.uniform_(m.bias, -bound, bound)
            elif isinstance(m, M.Linear):
                M.init.xavier_uniform_(m.weight)
                M.init.xavier_normal_(m.weight, gain=0.5)
                M.init.msra_uniform_(m.weight, a=1)
                M.init.normal_(m.bias, 0.1, 0.01)

    def forward(self, x):
        return x


def _digests(net):
    return {name: _md5(p.numpy())[:10] for name, p in net.named_parameters()}


def test_models_initialise_to_megengines_parameters():
    R.seed(3)
    lin = M.Linear(3, 2)
    assert lin.weight.numpy().tolist() == [[0.9957067370414734, -0.35915127396583557, -0.4244121015071869],
                                           [-0.9526742100715637, -0.9261643290519714, -0.06119143217802048]]
    conv = M.Conv2d(2, 2, 3)
    assert conv.weight.numpy().ravel()[:6].tolist() == [
        -0.4275278151035309, 0.07569513469934464, -0.11548897624015808, -0.11718544363975525, -0.50960773229599,
        0.37240877747535706]
    R.seed(0)
    got = _digests(_Zoo())
    assert got == {"conv.weight": "8a5717bd0b", "bn.weight": "efff9682c2", "bn.bias": "70bc8f4b72",
                   "dw.weight": "c4db8d1386", "dw.bias": "c659a67113", "fc.weight": "2a3f84a3e2",
                   "fc.bias": "e99af6704e", "emb.weight": "df0c93c0bf", "ct.weight": "d811503aa5",
                   "ct.bias": "4ae71336e4", "c3.weight": "ea67e996aa", "c3.bias": "8dd6bb7329"}
    R.seed(0)
    lstm = _digests(M.LSTM(4, 5))
    assert lstm["_flatten_weights"] == "4cf2f4c515" and lstm["cells.0.0.bias_hh"] == "a050902520"
    assert _digests(M.RNN(3, 4))["_flatten_weights"] == "d518c86560"
    assert _digests(M.RNN(3, 4, 2))["_flatten_weights"] == "48d4b0d5ba"
    assert _digests(M.MultiHeadAttention(8, 2)) == {"io_weight_bias": "7abfa81384"}


def test_draws_under_auto_jit_are_eagers():
    def program():
        R.seed(11)
        net = M.Linear(6, 3)
        x = R.normal(size=(4, 6))
        y = F.relu(net(x)) + R.uniform(size=(4, 3))
        z = R.permutation(y)
        after = M.Linear(3, 3)  # (its streams skipped the draws' counts, under auto-jit too)
        return [v.numpy() for v in (net.weight, x, y, z, R.permutation(7), after.weight)]

    saved = mge.config.auto_jit
    try:
        mge.config.auto_jit = False
        want = program()
        mge.config.auto_jit = True
        got = program()
    finally:
        mge.config.auto_jit = saved
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("sizes", [[1, 64, 65, 100, 1000, 4096, 7, 33333], [5000, 3], [129] * 5])
def test_a_stream_drawn_in_pieces_equals_one_draw(sizes):
    a, b = _xoroshiro.Stream(5), _xoroshiro.Stream(5)
    pieces = np.concatenate([a.raw(n) for n in sizes])
    np.testing.assert_array_equal(pieces, b.raw(len(pieces)))
    assert (a.s0, a.s1) == (b.s0, b.s1)


@pytest.mark.parametrize("n", [64, 101, 1000, 4097])
def test_a_draw_in_blocks_on_threads_equals_one_stream(monkeypatch, n):
    monkeypatch.setattr(_xoroshiro, "_PARALLEL_MIN", 64)  # (blocks from 2**18 values on)
    a, b = _xoroshiro.Stream(3), _xoroshiro.Stream(3)
    np.testing.assert_array_equal(a.normal(n, 0.5, 2.0), b._normal(n, 0.5, 2.0))
    np.testing.assert_array_equal(a.uniform(n), b._uniform(n))
    assert (a.s0, a.s1) == (b.s0, b.s1)
