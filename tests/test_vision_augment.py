"""megengine.module.vision's augmentation layers (MegEngine 1.13): additive noise, Emboss / Sharpen, LinearContrast.

Deterministic parts against NumPy references (the 3x3 kernels applied by a NumPy convolution, the contrast
formula), the noise layers by shape / dtype / reproducibility / loose statistics, and MegEngine's own test
(test_dataloader.py's augmentation transform) ported.
"""
import numpy as np
import pytest

import megxla
from megxla import Tensor
from megxla.data import DataLoader
from megxla.data.dataset import ArrayDataset
from megxla.data.sampler import RandomSampler
from megxla.data.transform import CudaTransform
from megxla.module._vision_augment import (
    ActiveBlur,
    AdditiveElemwise,
    AdditiveGaussianNoise,
    AdditiveLaplaceNoise,
    AdditivePoissonNoise,
    Emboss,
    LinearContrast,
    Sharpen,
    _check_out_dtype,
    _get_EmbossKernel_op,
    _get_SharpenKernel_op,
    _get_value_range_of_dtype,
)
from megxla.random import RNG

IDENTITY = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], np.float32)


# ---------------------------------------------------------------- NumPy references

def emboss_kernel(alpha, strength):
    s = strength
    effect = np.array([[-1 - s, -s, 0], [-s, 1, s], [0, s, 1 + s]], np.float64)
    return (1 - alpha) * IDENTITY + alpha * effect


def sharpen_kernel(alpha, lightness):
    effect = np.array([[-1, -1, -1], [-1, 8 + lightness, -1], [-1, -1, -1]], np.float64)
    return (1 - alpha) * IDENTITY + alpha * effect


def conv3x3_reflect(x, k):
    """Each channel of NCHW ``x`` reflect-padded by 1 and cross-correlated with the 3x3 ``k`` (float64)."""
    x = np.asarray(x, np.float64)
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect")
    H, W = x.shape[2:]
    out = np.zeros_like(x)
    for i in range(3):
        for j in range(3):
            out += k[i, j] * p[:, :, i:i + H, j:j + W]
    return out


def back_to_dtype(y, dtype):
    """MegEngine's _check_out_dtype on NumPy: clip small ints / float16 to range, cast (truncating)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return y > 0.5
    if dtype.kind in "ui" or dtype == np.float16:
        info = np.iinfo(dtype) if dtype.kind in "ui" else np.finfo(dtype)
        return np.clip(y, info.min, info.max).astype(dtype)
    return y.astype(dtype)


def image(shape, dtype=np.float32, seed=0, high=255):
    return np.random.RandomState(seed).randint(0, high, size=shape).astype(dtype)


# ---------------------------------------------------------------- helpers

@pytest.mark.parametrize("dtype, expected", [
    ("float32", (np.finfo(np.float32).min, 0.0, np.finfo(np.float32).max)),
    ("float16", (np.finfo(np.float16).min, 0.0, np.finfo(np.float16).max)),
    ("uint8", (0, 127.5, 255)),
    ("uint16", (0, 32767.5, 65535)),
    ("int8", (-128, -0.5, 127)),
    ("int32", (np.iinfo(np.int32).min, -0.5, np.iinfo(np.int32).max)),
    ("bool", (0, None, 1)),
])
def test_value_range_of_dtype(dtype, expected):
    assert _get_value_range_of_dtype(np.dtype(dtype)) == expected


def test_value_range_of_dtype_rejects_other_kinds():
    with pytest.raises(Exception, match="Cannot estimate value range"):
        _get_value_range_of_dtype(np.dtype("complex64"))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "float16", "bool", "float32"])
def test_check_out_dtype(dtype):
    y = np.array([-1000.7, -3.2, 0.2, 0.7, 100.9, 300.5, 70000.0], np.float32)
    out = _check_out_dtype(Tensor(y), np.dtype(dtype))
    ref = back_to_dtype(y, dtype)
    assert out.dtype == ref.dtype
    np.testing.assert_array_equal(out.numpy(), ref)


# ---------------------------------------------------------------- Emboss / Sharpen kernels and outputs

@pytest.mark.parametrize("alpha, strength", [(0.0, 1.0), (1.0, 1.0), (0.7, 0.3), (0.25, 1.75)])
def test_emboss_kernel_op(alpha, strength):
    fn = _get_EmbossKernel_op(alpha, strength, dtype=np.dtype("float32"), device=None)
    effect = Tensor(np.array([[-1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float32))
    kernel, *_ = fn(effect, Tensor(IDENTITY))
    np.testing.assert_allclose(kernel.numpy(), emboss_kernel(alpha, strength), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(kernel.numpy().sum(), 1.0, rtol=1e-6)  # brightness kept


@pytest.mark.parametrize("alpha, lightness", [(0.0, 1.0), (1.0, 1.0), (0.6, 0.8), (0.3, 1.9)])
def test_sharpen_kernel_op(alpha, lightness):
    fn = _get_SharpenKernel_op(alpha, lightness, dtype=np.dtype("float32"), device=None)
    effect = Tensor(np.array([[-1, -1, -1], [-1, 8, -1], [-1, -1, -1]], np.float32))
    kernel, *_ = fn(effect, Tensor(IDENTITY))
    np.testing.assert_allclose(kernel.numpy(), sharpen_kernel(alpha, lightness), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cls, kernel", [(Emboss, emboss_kernel), (Sharpen, sharpen_kernel)])
@pytest.mark.parametrize("a, b", [(0.6, 0.8), (1.0, 1.5), (0.0, 1.0)])
def test_effect_float32_vs_numpy(cls, kernel, a, b):
    x = image((2, 3, 7, 9))
    aug = cls(a, b)
    out = aug(Tensor(x))
    assert out.dtype == np.float32 and out.shape == x.shape
    np.testing.assert_allclose(out.numpy(), conv3x3_reflect(x, kernel(a, b)), rtol=1e-5, atol=1e-3)


def test_effect_kernel_size_get_kernel_shape():
    k = Sharpen(0.5, 1.0).get_kernel(None, 4)
    assert k.shape == (4, 1, 1, 3, 3)


@pytest.mark.parametrize("cls, kernel", [(Emboss, emboss_kernel), (Sharpen, sharpen_kernel)])
@pytest.mark.parametrize("dtype", ["uint8", "int16", "float16"])
def test_effect_integer_dtypes_clip_and_keep_dtype(cls, kernel, dtype):
    # alpha, strength multiples of 1/4: the float32 convolution is exact, so truncation matches NumPy's
    x = image((2, 2, 6, 5), dtype=dtype)
    out = cls(0.75, 1.5)(Tensor(x))
    ref = back_to_dtype(conv3x3_reflect(x, kernel(0.75, 1.5)), dtype)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out.numpy(), ref)
    if dtype == "uint8":  # the sharpened image overshoots [0, 255]: the clip is what keeps it in range
        assert (conv3x3_reflect(x, kernel(0.75, 1.5)) > 255).any()


def test_effect_bool_input_thresholds():
    x = np.random.RandomState(1).rand(1, 2, 5, 5) > 0.5
    out = Sharpen(0.5, 1.0)(Tensor(x))
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out.numpy(), conv3x3_reflect(x, sharpen_kernel(0.5, 1.0)) > 0.5)


@pytest.mark.parametrize("cls", [Emboss, Sharpen])
def test_alpha_zero_is_identity(cls):
    x = image((1, 3, 5, 5), dtype=np.uint8)
    np.testing.assert_array_equal(cls(0.0, 1.3)(Tensor(x)).numpy(), x)


@pytest.mark.parametrize("cls", [Emboss, Sharpen])
def test_ranges_draw_from_the_seeded_generator(cls):
    x = image((2, 3, 8, 8))
    out = cls(alpha=(0.6, 0.8), **{"strength" if cls is Emboss else "lightness": (0.6, 0.8)}, seed=3)(Tensor(x))
    # alpha is drawn first, then strength / lightness, each one uniform draw of the layer's own generator
    rng = RNG(3)
    a, b = float(rng.uniform(0.6, 0.8)), float(rng.uniform(0.6, 0.8))
    assert 0.6 <= a < 0.8 and 0.6 <= b < 0.8
    kernel = emboss_kernel if cls is Emboss else sharpen_kernel
    np.testing.assert_allclose(out.numpy(), conv3x3_reflect(x, kernel(a, b)), rtol=1e-5, atol=1e-3)


def test_ranges_are_redrawn_each_call_and_reproducible():
    x = Tensor(image((1, 1, 6, 6)))
    aug = Emboss(alpha=(0.1, 0.9), strength=(0.0, 2.0), seed=11)
    first, second = aug(x).numpy(), aug(x).numpy()
    assert not np.allclose(first, second)
    again = Emboss(alpha=(0.1, 0.9), strength=(0.0, 2.0), seed=11)
    np.testing.assert_array_equal(again(x).numpy(), first)
    np.testing.assert_array_equal(again(x).numpy(), second)


def test_unseeded_effect_follows_global_seed():
    x = Tensor(image((1, 1, 6, 6)))
    megxla.random.seed(5)
    a = Sharpen((0.1, 0.9), (0.5, 2.0))(x).numpy()
    megxla.random.seed(5)
    b = Sharpen((0.1, 0.9), (0.5, 2.0))(x).numpy()
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cls, arg", [(Emboss, "strength"), (Sharpen, "lightness")])
def test_effect_bad_arguments(cls, arg):
    name = cls.__name__
    with pytest.raises(TypeError, match=f"{name}: alpha cannot be of bool"):
        cls(True, 1.0)
    with pytest.raises(TypeError, match=f"{name}: {arg} must be a number or a"):
        cls(0.5, [0.1, 0.2])
    with pytest.raises(AssertionError, match=f"{name}: expected alpha with type tuple to have exactly two"):
        cls((0.1, 0.2, 0.3), 1.0)
    with pytest.raises(AssertionError, match=f"{name}: {arg} = \\(low, high\\) needs low < high"):
        cls(0.5, (0.8, 0.2))
    with pytest.raises(AssertionError, match=f"{name}: seed must be None or an int"):
        cls(0.5, 1.0, seed=1.5)
    aug = cls(0.5, 1.0)
    with pytest.raises(AssertionError, match=f"{name}: expected input is megengine.Tensor"):
        aug(np.zeros((1, 1, 4, 4), np.float32))
    with pytest.raises(ValueError, match=f"{name}: expected an NCHW input"):
        aug(Tensor(np.zeros((4, 4), np.float32)))
    with pytest.raises(ValueError, match=f"{name}: H and W must be at least 2"):
        aug(Tensor(np.zeros((1, 1, 1, 4), np.float32)))
    # an attribute rebound after construction is checked when it is read (MegEngine checks only then)
    setattr(aug, arg, "big")
    with pytest.raises(TypeError, match=f"{name}: {arg} must be a number"):
        aug(Tensor(np.zeros((1, 1, 4, 4), np.float32)))


def test_active_blur_base_needs_get_kernel():
    with pytest.raises(NotImplementedError):
        ActiveBlur()(Tensor(np.zeros((1, 1, 4, 4), np.float32)))


# ---------------------------------------------------------------- LinearContrast

@pytest.mark.parametrize("alpha", [0.6, 1.0, 2.0])
def test_linear_contrast_uint8_vs_numpy(alpha):
    x = np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16)  # every value, 255 included
    out = LinearContrast(alpha)(Tensor(x))
    ref = np.clip(127 + alpha * (x.astype(np.float32) - 127), 0, 255).astype(np.uint8)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out.numpy(), ref)


@pytest.mark.parametrize("per_channel", [False, True])
def test_linear_contrast_uint8_ranges(per_channel):
    x = image((3, 2, 4, 4), dtype=np.uint8, high=256)
    out = LinearContrast((0.5, 1.5), per_channel=per_channel, seed=7)(Tensor(x))
    rows = 6 if per_channel else 3
    alpha = RNG(7).uniform(0.5, 1.5, (rows, 1)).numpy().reshape((3, 2, 1, 1) if per_channel else (3, 1, 1, 1))
    table_ref = np.clip(127 + (np.arange(256, dtype=np.float32) - 127) * alpha.reshape(-1, 1), 0, 255)
    ref = np.take_along_axis(table_ref, x.reshape(rows, -1).astype(np.int64), 1).reshape(x.shape).astype(np.uint8)
    np.testing.assert_array_equal(out.numpy(), ref)


def test_linear_contrast_float_scales_around_zero():
    # MegEngine's center of a float dtype is 0.0: a float image is scaled, not contrasted around 127
    x = image((2, 3, 4, 4))
    out = LinearContrast(0.6)(Tensor(x))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), 0.6 * x, rtol=1e-6)


@pytest.mark.parametrize("per_channel", [False, True])
def test_linear_contrast_float_ranges(per_channel):
    x = image((3, 2, 4, 4))
    out = LinearContrast((0.5, 1.5), per_channel=per_channel, seed=9)(Tensor(x)).numpy()
    size = (3, 2, 1, 1) if per_channel else (3, 1, 1, 1)
    alpha = RNG(9).uniform(0.5, 1.5, size).numpy()
    assert ((alpha >= 0.5) & (alpha < 1.5)).all()
    np.testing.assert_allclose(out, alpha * x, rtol=1e-6)  # (alpha of shape (N, 1, 1, 1): channels alike)


@pytest.mark.parametrize("dtype, center", [("int16", 0), ("int32", 0), ("uint16", 32767)])
def test_linear_contrast_integer_centers(dtype, center):
    x = image((1, 2, 3, 3), dtype=dtype, high=200) + np.array(center, dtype)
    out = LinearContrast(0.5)(Tensor(x))
    assert out.dtype == np.dtype(dtype)
    ref = (center + (x.astype(np.float32) - center) * np.float32(0.5)).astype(dtype)
    np.testing.assert_array_equal(out.numpy(), ref)


def test_linear_contrast_errors():
    with pytest.raises(TypeError, match="LinearContrast: alpha cannot be of bool"):
        LinearContrast(False)
    with pytest.raises(TypeError, match="LinearContrast: alpha must be a number or a"):
        LinearContrast("1")
    with pytest.raises(AssertionError, match="LinearContrast: expected alpha with type tuple"):
        LinearContrast((1.0,))
    with pytest.raises(AssertionError, match="LinearContrast: seed must be None or an int"):
        LinearContrast(1.0, seed="1")
    with pytest.raises(TypeError, match="LinearContrast: bool inputs have no center"):
        LinearContrast(1.0)(Tensor(np.ones((1, 1, 2, 2), bool)))
    with pytest.raises(AssertionError, match="LinearContrast: expected input is megengine.Tensor"):
        LinearContrast(1.0)(np.ones((1, 1, 2, 2), np.float32))


# ---------------------------------------------------------------- additive noise

NOISE = [
    (AdditiveGaussianNoise, dict(mean=2.0, std=3.0), 2.0, 3.0),
    (AdditiveLaplaceNoise, dict(mean=-1.0, std=2.0), -1.0, 2.0 * np.sqrt(2)),  # Laplace scale b: std sqrt(2) b
    (AdditivePoissonNoise, dict(lam=4.0), 4.0, 2.0),
]


@pytest.mark.parametrize("cls, kw, mean, std", NOISE)
def test_noise_statistics(cls, kw, mean, std):
    x = np.zeros((4, 3, 64, 64), np.float32)
    noise = cls(**kw, per_channel=True, seed=0)(Tensor(x)).numpy()
    assert np.isfinite(noise).all()
    assert abs(noise.mean() - mean) < 0.05 * std + 0.02
    assert abs(noise.std() - std) < 0.05 * std
    if cls is AdditivePoissonNoise:
        assert (noise >= 0).all() and (noise == np.round(noise)).all()
        assert abs(noise.var() - 4.0) < 0.3
    if cls is AdditiveLaplaceNoise:  # median absolute deviation of Laplace(b) is b ln 2
        assert abs(np.median(np.abs(noise - np.median(noise))) - 2.0 * np.log(2)) < 0.1


@pytest.mark.parametrize("cls, kw, mean, std", NOISE)
def test_noise_per_channel_shared_or_not(cls, kw, mean, std):
    x = np.zeros((2, 3, 8, 8), np.float32)  # (zeros: the output is the noise itself, no rounding of x + n - x)
    shared = cls(**kw, seed=1)(Tensor(x)).numpy() - x
    np.testing.assert_array_equal(shared[:, 0], shared[:, 1])
    np.testing.assert_array_equal(shared[:, 0], shared[:, 2])
    assert not np.array_equal(shared[0], shared[1])  # but not across images
    each = cls(**kw, per_channel=True, seed=1)(Tensor(x)).numpy() - x
    assert not np.array_equal(each[:, 0], each[:, 1])
    # per_channel=False draws one (N, 1, H, W) map from the generator
    rng = RNG(1)
    if cls is AdditiveGaussianNoise:
        ref = rng.normal(kw["mean"], kw["std"], (2, 1, 8, 8)).numpy()
    elif cls is AdditivePoissonNoise:
        ref = rng.poisson(Tensor(kw["lam"]), (2, 1, 8, 8)).numpy()
    else:
        u = rng.uniform(np.finfo(np.float32).eps - 1, 1, (2, 1, 8, 8)).numpy()
        ref = kw["mean"] - kw["std"] * np.sign(u) * np.log(1 - np.abs(u))
    np.testing.assert_allclose(shared[:, :1], ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("cls, kw, mean, std", NOISE)
def test_noise_reproducible_with_seed(cls, kw, mean, std):
    x = Tensor(image((2, 3, 8, 8)))
    a, b = cls(**kw, seed=42), cls(**kw, seed=42)
    first = a(x).numpy()
    np.testing.assert_array_equal(first, b(x).numpy())
    assert not np.array_equal(first, a(x).numpy())  # the generator moves on
    assert not np.array_equal(first, cls(**kw, seed=43)(x).numpy())
    # the seed setter restarts the layer's generator
    a.seed = 42
    assert a.seed == 42
    np.testing.assert_array_equal(first, a(x).numpy())
    megxla.random.seed(3)
    g1 = cls(**kw)(x).numpy()
    megxla.random.seed(3)
    np.testing.assert_array_equal(g1, cls(**kw)(x).numpy())


@pytest.mark.parametrize("dtype", ["uint8", "float16", "int32"])
def test_noise_output_dtype_and_no_clipping(dtype):
    # MegEngine adds the float32 noise with the usual promotion and does not clip (only ActiveBlur clips)
    x = np.full((2, 3, 8, 8), 250, dtype)
    out = AdditiveGaussianNoise(mean=0.0, std=50.0, per_channel=True, seed=0)(Tensor(x))
    assert out.dtype == np.float32 and out.shape == x.shape
    out = out.numpy()
    assert out.max() > 255 and out.min() < 250
    ref = x.astype(np.float32) + RNG(0).normal(0.0, 50.0, x.shape).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=0.5)


def test_noise_errors_and_attributes():
    for cls in (AdditiveGaussianNoise, AdditiveLaplaceNoise, AdditivePoissonNoise):
        with pytest.raises(AssertionError, match=f"{cls.__name__}: seed must be None or an int"):
            cls(seed="1")
        aug = cls()
        assert aug.per_channel is False and aug.seed is None
        with pytest.raises(AssertionError, match=f"{cls.__name__}: seed must be an int"):
            aug.seed = None
        with pytest.raises(AssertionError, match=f"{cls.__name__}: expected input is megengine.Tensor"):
            aug(np.zeros((1, 1, 2, 2), np.float32))
        with pytest.raises(ValueError, match=f"{cls.__name__}: expected an NCHW input"):
            aug(Tensor(np.zeros((2, 2), np.float32)))
        aug.per_channel = 0.5
        with pytest.raises(NotImplementedError, match=f"{cls.__name__}: per_channel must be True or False"):
            aug(Tensor(np.zeros((1, 1, 2, 2), np.float32)))
        aug.per_channel = True  # any shape with per_channel=True
        assert aug(Tensor(np.zeros((5,), np.float32))).shape == (5,)
    g = AdditiveGaussianNoise(mean=1, std=2)
    assert g.mean.dtype == np.float32 and float(g.std) == 2.0
    assert AdditivePoissonNoise(lam=3).lam.dtype == np.float32
    with pytest.raises(NotImplementedError):
        AdditiveElemwise()(Tensor(np.zeros((1, 1, 2, 2), np.float32)))


# ---------------------------------------------------------------- MegEngine's test, ported

def test_dataloader_parallel_worker_with_cvaug():
    """test_dataloader.py::test_cuda_dataloader_parallel_worker_with_cvaug, on megxla's default device (the
    original needs a GPU and checks the batch is on gpu0)."""
    from megxla.module.vision import RandomHorizontalFlip

    def test_init_dataset():
        sample_num = 100
        rand_data = np.random.randint(0, 255, size=(sample_num, 3, 160, 160)).astype(np.float32)
        label = np.random.randint(0, 10, size=(sample_num,), dtype=int)
        return ArrayDataset(rand_data, label)

    class MyCudaTransform(CudaTransform):
        def __init__(self):
            self.linear_aug = LinearContrast(0.6)
            self.sharpen_aug = Sharpen(alpha=(0.6, 0.8), lightness=(0.6, 0.8))
            self.flip_aug = RandomHorizontalFlip(prob=1)

        def apply(self, input):
            data, label = input
            label = megxla.tensor(label)
            data_input = megxla.tensor(data)
            linared_inp = self.linear_aug(data_input)
            sharpened_inp = self.sharpen_aug(linared_inp)
            transposed_sharpened_inp = np.transpose(sharpened_inp, (0, 2, 3, 1))
            transposed_fliped_inp = self.flip_aug(transposed_sharpened_inp)
            fliped_inp = np.transpose(transposed_fliped_inp, (0, 3, 1, 2))
            return (fliped_inp, label)

    dataset = test_init_dataset()
    dataloader = DataLoader(dataset, sampler=RandomSampler(dataset, batch_size=6, drop_last=False),
                            transform=MyCudaTransform(), num_workers=2)
    data_iter = iter(dataloader)
    for _ in range(3):
        batch_data, batch_label = next(data_iter)
        assert batch_data.shape == (6, 3, 160, 160)
        assert batch_label.shape == (6,)
