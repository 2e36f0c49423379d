"""Image-augmentation layers of ``megengine.module.vision`` (MegEngine 1.13): additive noise (``AdditiveElemwise``
and its Laplace / Poisson / Gaussian subclasses), 3x3 kernel effects (``ActiveBlur``: ``Emboss``, ``Sharpen``) and
``LinearContrast``.

They are built, as MegEngine's, from the functional ops (``conv2d``, ``pad``, ``clip``, ``gather``) and draw
their random values with ``megxla.random.RNG`` (MegEngine's ``megengine.random.RNG``): with a ``seed`` a layer
owns its generator, so a fixed seed gives the same draws on every run; without one it draws from the global
generator, which ``megxla.random.seed`` resets.

``megxla.module.vision`` re-exports these classes (``megengine.module.vision``'s path).
"""
import numbers
from functools import lru_cache

import numpy as np

from ..core._dispatch import AssertedOpError, OpError
from ..core._tensor import Tensor
from ..functional.elemwise import abs, add, clip, log
from ..functional.math import sign
from ..functional.nn import conv2d, pad
from ..functional.tensor import arange, broadcast_to, flatten, full_like, gather, reshape, zeros
from ..random import RNG
from .module import Module

__all__ = ["AdditiveElemwise", "AdditiveLaplaceNoise", "AdditivePoissonNoise", "AdditiveGaussianNoise",
           "ActiveBlur", "Emboss", "Sharpen", "LinearContrast"]


def _tensor_input(inp, layer):
    # (MegEngine's forward asserts a Tensor input)
    if not isinstance(inp, Tensor):
        raise AssertedOpError(f"{layer}: expected input is megengine.Tensor, but got {type(inp)}")


def _check_seed(seed, layer):
    # (MegEngine asserts ``seed is None or isinstance(seed, int)``)
    if not (seed is None or isinstance(seed, (int, np.integer))):
        raise AssertedOpError(f"{layer}: seed must be None or an int, got {seed!r}")
    return None if seed is None else int(seed)


def _check_nchw(inp, layer):
    if inp.ndim != 4:
        raise OpError(f"{layer}: expected an NCHW input (4 dims), got shape {tuple(inp.shape)}")


def _check_parameter(param, layer, name):
    """MegEngine's checks of an augmentation parameter: a number, or a ``(low, high)`` tuple to sample from."""
    if isinstance(param, bool):
        raise TypeError(f"{layer}: {name} cannot be of bool value type, got {param!r}")
    if isinstance(param, (numbers.Integral, numbers.Real)):
        return
    if isinstance(param, tuple):
        if len(param) != 2:
            raise AssertedOpError(f"{layer}: expected {name} with type tuple to have exactly two entries, but got "
                                  f"{len(param)}")
        for v in param:
            if isinstance(v, bool) or not isinstance(v, (numbers.Integral, numbers.Real)):
                raise TypeError(f"{layer}: the entries of {name} must be numbers, got {param!r}")
        if not param[0] < param[1]:
            # (MegEngine's uniform asserts low < high when it samples)
            raise AssertedOpError(f"{layer}: {name} = (low, high) needs low < high, got {param!r}")
        return
    raise TypeError(f"{layer}: {name} must be a number or a (low, high) tuple, got {type(param).__name__}")


class AdditiveElemwise(Module):
    r"""Base class of the additive-noise layers: ``forward`` adds ``sample(shape)`` to an NCHW input.

    With ``per_channel=False`` one noise map ``(N, 1, H, W)`` is drawn and shared by every channel of an image;
    with ``per_channel=True`` the noise has the input's shape. Subclasses implement ``sample(size)``.

    The sum takes the usual dtype promotion (``uint8 + float32`` noise gives float32) and is not clipped, as in
    MegEngine.

    NOTE: MegEngine reads the layout from ``inp.format`` and, with ``per_channel=False``, accepts only tensors
    created with ``format="nchw"`` (or ``"nhwc"``), raising RuntimeError for ``"default"``. megxla's tensors have
    no memory format (``Tensor(x, format="nchw").format`` is ``"default"``), so a default-format 4-D input is
    taken as NCHW here: MegEngine code that creates its input with ``format="nchw"`` gives the same result.

    Args:
        per_channel: False (one sample per pixel shared by the channels) or True (one sample per element).
            Other values raise NotImplementedError in ``forward``, as in MegEngine.

    Example:
        >>> class AddOnes(AdditiveElemwise):
        ...     def sample(self, size):
        ...         return F.ones(size)
        >>> AddOnes()(F.zeros((1, 2, 1, 2))).numpy()
        array([[[[1., 1.]],
        <BLANKLINE>
                [[1., 1.]]]], dtype=float32)
    """

    def __init__(self, per_channel=False, **kwargs):
        self._per_channel = per_channel
        super().__init__(**kwargs)

    def forward(self, inp):
        """``inp + noise``, the noise drawn by ``sample`` (shared by the channels unless ``per_channel``)."""
        layer = type(self).__name__
        _tensor_input(inp, layer)
        if self._per_channel is True:
            noise = self.sample(inp.shape).to(inp.device)
        elif self._per_channel is False:
            _check_nchw(inp, layer)
            fmt = inp.format
            if fmt in ("nchw", "default"):  # ("default": see the class NOTE)
                N, C, H, W = inp.shape
                c_noise = self.sample((N, 1, H, W))
            elif fmt == "nhwc":
                N, H, W, C = inp.shape
                c_noise = self.sample((N, H, W, 1))
            else:
                raise RuntimeError(f"{layer}: expect you create Tensor with format specified while per_channel is "
                                   f"False, got format is {fmt}")
            noise = broadcast_to(c_noise, inp.shape).to(inp.device)
        else:
            # (MegEngine's message: a float per_channel -- a probability of sampling per channel -- is imgaug's)
            raise NotImplementedError(f"{layer}: per_channel must be True or False, got {self._per_channel!r} "
                                      f"(float point type per channel haven't impl)")
        return add(inp, noise)

    def sample(self, size):
        """The noise of shape ``size`` (subclasses)."""
        raise NotImplementedError()

    @property
    def per_channel(self):
        return self._per_channel

    @per_channel.setter
    def per_channel(self, per_channel):
        self._per_channel = per_channel


class _SeededNoise(AdditiveElemwise):
    """The noise layers' generator: their own ``RNG(seed)`` (None: the global one), drawn with ``_DRAW``; a new
    ``seed`` restarts it (MegEngine's setter asserts an int)."""

    _DRAW = "uniform"

    def _seed_generator(self, seed):
        self._seed = seed
        self.rng_func = getattr(RNG(seed), self._DRAW)

    @property
    def seed(self):
        return self._seed

    @seed.setter
    def seed(self, seed):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise AssertedOpError(f"{type(self).__name__}: seed must be an int, got {seed!r}")
        self._seed_generator(int(seed))


class AdditiveLaplaceNoise(_SeededNoise):
    r"""Add random Laplace noise to the input data.

    The noise is ``mean - std * sign(u) * log(1 - |u|)`` with ``u`` uniform on ``[eps - 1, 1)`` (float32
    ``eps``): the Laplace distribution with location ``mean`` and scale ``std`` (MegEngine's name; the standard
    deviation of the noise is ``sqrt(2) * std``). See https://en.wikipedia.org/wiki/Laplace_distribution.

    Args:
        mean: location of the noise.
        std: scale of the noise.
        per_channel: whether to use (imagewise) the same sample(s) for all channels (False) or to sample value(s)
            for each channel (True).
        seed: random number seed of the layer's own generator; None draws from the global generator.

    Example:
        >>> aug = AdditiveLaplaceNoise(mean=0.0, std=1.0, seed=1)
        >>> out = aug(Tensor(np.zeros((2, 3, 4, 4), dtype=np.float32)))
        >>> out.shape, out.dtype
        ((2, 3, 4, 4), dtype('float32'))
        >>> bool((out.numpy()[:, 0] == out.numpy()[:, 1]).all())  # one noise map shared by the channels
        True
    """

    def __init__(self, mean=0.0, std=1.0, per_channel=False, seed=None):
        super().__init__(per_channel)
        self._seed_generator(_check_seed(seed, "AdditiveLaplaceNoise"))
        self.mean = Tensor(mean, dtype=np.float32)
        self.std = Tensor(std, dtype=np.float32)
        self.finfo = np.finfo(np.dtype(self.mean.dtype))

    def sample(self, size):
        """Laplace noise of shape ``size`` (float32)."""
        # low = eps - 1 rather than -1 keeps 1 - |u| > 0, so the log stays finite
        u = self.rng_func((self.finfo.eps - 1).item(), 1, size)
        return self.mean - self.std * sign(u) * log(1 - abs(u))


class AdditivePoissonNoise(_SeededNoise):
    r"""Add random Poisson noise to the input data: samples of the Poisson distribution with rate ``lam``
    (non-negative integers, as float32).

    Args:
        lam: rate of the Poisson distribution (> 0).
        per_channel: whether to use (imagewise) the same sample(s) for all channels (False) or to sample value(s)
            for each channel (True).
        seed: random number seed of the layer's own generator; None draws from the global generator.

    Example:
        >>> aug = AdditivePoissonNoise(lam=2.0, per_channel=True, seed=1)
        >>> noise = aug(Tensor(np.zeros((2, 3, 4, 4), dtype=np.float32))).numpy()
        >>> bool((noise >= 0).all() and (noise == np.round(noise)).all())
        True
    """

    _DRAW = "poisson"

    def __init__(self, lam=1.0, per_channel=False, seed=None):
        super().__init__(per_channel)
        self._seed_generator(_check_seed(seed, "AdditivePoissonNoise"))
        self.lam = Tensor(lam, dtype=np.float32)

    def sample(self, size):
        """Poisson noise of shape ``size`` (float32)."""
        return self.rng_func(self.lam, size)


class AdditiveGaussianNoise(_SeededNoise):
    r"""Add random Gaussian noise, drawn from N(mean, std ** 2), to the input data.

    Args:
        mean: gaussian mean used to generate noise.
        std: gaussian standard deviation used to generate noise.
        per_channel: whether to use (imagewise) the same sample(s) for all channels (False) or to sample value(s)
            for each channel (True).
        seed: random number seed of the layer's own generator; None draws from the global generator.

    Example:
        >>> aug = AdditiveGaussianNoise(mean=0.0, std=1.0, per_channel=True, seed=1)
        >>> out = aug(Tensor(np.zeros((2, 3, 4, 4), dtype=np.float32)))
        >>> out.shape
        (2, 3, 4, 4)
        >>> bool((out.numpy() == AdditiveGaussianNoise(per_channel=True, seed=1)(
        ...     Tensor(np.zeros((2, 3, 4, 4), dtype=np.float32))).numpy()).all())  # same seed, same noise
        True
    """

    _DRAW = "normal"

    def __init__(self, mean=0.0, std=1.0, per_channel=False, seed=None):
        super().__init__(per_channel)
        self._seed_generator(_check_seed(seed, "AdditiveGaussianNoise"))
        self.mean = Tensor(mean, dtype=np.float32)
        self.std = Tensor(std, dtype=np.float32)

    def sample(self, size):
        """Gaussian noise of shape ``size`` (float32)."""
        # (MegEngine's Gaussian op takes mean and std as numbers: the tensors are read as floats)
        return self.rng_func(float(self.mean), float(self.std), size)


def _get_value_range_of_dtype(dtype):
    """``(min, center, max)`` of the values of ``dtype`` (imgaug's convention, as MegEngine's): float ->
    ``(finfo.min, 0.0, finfo.max)``; unsigned -> center ``min + 0.5 * max``; signed -> center ``-0.5``; bool ->
    ``(0, None, 1)``."""
    dtype = np.dtype(dtype)
    if dtype.kind not in ["f", "u", "i", "b"]:
        raise Exception("Cannot estimate value range of dtype '%s' (type: %s)" % (str(dtype), type(dtype)))
    if dtype.kind == "f":
        finfo = np.finfo(dtype)
        value_min, value_mid, value_max = finfo.min, 0.0, finfo.max
    if dtype.kind == "u":
        iinfo = np.iinfo(dtype)
        value_min, value_mid, value_max = iinfo.min, iinfo.min + 0.5 * iinfo.max, iinfo.max
    if dtype.kind == "i":
        iinfo = np.iinfo(dtype)
        value_min, value_mid, value_max = iinfo.min, -0.5, iinfo.max
    if dtype.kind == "b":
        value_min, value_mid, value_max = 0, None, 1
    return value_min, value_mid, value_max


def _check_out_dtype(inp, input_dtype):
    """The float result ``inp`` of an effect back in ``input_dtype``: bool thresholds at 0.5; the small integer
    dtypes and float16 are clipped to their range first (the cast would wrap); others are returned as they are."""
    input_dtype = np.dtype(input_dtype)
    if input_dtype.name == "bool":
        inp = inp > 0.5
    elif input_dtype.name in ["uint8", "uint16", "int8", "int16", "int32", "float16"]:
        min_dtype, _, max_dtype = _get_value_range_of_dtype(input_dtype)
        inp = clip(inp, float(min_dtype), float(max_dtype))
        inp = inp.astype(input_dtype)
    return inp


class ActiveBlur(Module):
    r"""Base class of the 3x3 kernel effects: ``forward`` convolves each channel of an NCHW input (reflect-padded
    by 1, so the output has the input's shape) with ``get_kernel(inp, C)``, a grouped kernel ``(C, 1, 1, 3, 3)``,
    computing in float32; the result is brought back to the input's dtype by ``_check_out_dtype`` (clipped to
    the range of uint8/uint16/int8/int16/int32/float16, thresholded for bool).

    ``_get_parameter`` reads a parameter: a number as it is, a ``(low, high)`` tuple as one uniform draw from
    ``[low, high)`` of the layer's ``rng_func`` (a new draw each call). Subclasses set ``rng_func`` and implement
    ``get_kernel``.

    Example:
        >>> class Identity3x3(ActiveBlur):
        ...     def get_kernel(self, inp, c):
        ...         k = Tensor(np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=np.float32))
        ...         return F.broadcast_to(k, (c, 1, 1, 3, 3))
        >>> x = Tensor(np.arange(8, dtype=np.uint8).reshape(1, 2, 2, 2))
        >>> y = Identity3x3()(x)
        >>> y.dtype, bool((y.numpy() == x.numpy()).all())
        (dtype('uint8'), True)
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def _setup(self, alpha, name, value, seed, effect):
        """(Emboss, Sharpen) Check and keep ``alpha`` and the second parameter ``name`` = ``value``, the layer's
        generator and its 3x3 ``effect`` matrix beside the identity one."""
        layer = type(self).__name__
        seed = _check_seed(seed, layer)
        _check_parameter(alpha, layer, "alpha")
        _check_parameter(value, layer, name)
        self.alpha = alpha
        setattr(self, name, value)
        self.rng_func = RNG(seed).uniform
        self.seed = seed
        self.matrix_nochange = Tensor(np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=np.float32))
        self.matrix_effect = Tensor(np.array(effect, dtype=np.float32))

    def _kernel(self, c, name, kernel_op):
        """(Emboss, Sharpen) The kernel for ``c`` channels, ``(c, 1, 1, 3, 3)``, from ``kernel_op(alpha, <name>)``
        (parameters drawn now where they are ranges)."""
        alpha = self._get_parameter(self.alpha, "alpha")
        value = self._get_parameter(getattr(self, name), name)
        get_kernel_fn = kernel_op(alpha, value, dtype=self.matrix_effect.dtype, device=self.matrix_effect.device)
        kernel, *_ = get_kernel_fn(self.matrix_effect, self.matrix_nochange)
        return broadcast_to(kernel, (c, 1, 1, kernel.shape[0], kernel.shape[1]))

    def forward(self, inp):
        """The effect applied to every channel of ``inp`` (``(N, C, H, W)``, H and W >= 2)."""
        layer = type(self).__name__
        _tensor_input(inp, layer)
        if inp.format not in ("nchw", "default"):
            raise RuntimeError(f"{layer}: expect you create Tensor with format NCHW, got format is {inp.format}")
        _check_nchw(inp, layer)
        N, C, H, W = inp.shape
        if H < 2 or W < 2:
            # reflect padding by 1 needs 2 pixels on each axis
            raise OpError(f"{layer}: H and W must be at least 2 (reflect padding), got shape {tuple(inp.shape)}")
        kernel = self.get_kernel(inp, C)
        # MegEngine's conv2d promotes the input to the float32 kernel's dtype; promoting first also makes the
        # reflect padding of a bool input well defined
        x = inp if inp.dtype == np.float32 else inp.astype("float32")
        pad_inp = pad(x, pad_width=((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect")
        result = conv2d(pad_inp, kernel, groups=C)
        return _check_out_dtype(result, inp.dtype)

    def _get_parameter(self, param, name="parameter"):
        _check_parameter(param, type(self).__name__, name)
        if isinstance(param, tuple):
            return float(self.rng_func(param[0], param[1]))
        return float(param)

    def get_kernel(self, inp, c):
        """The grouped kernel ``(c, 1, 1, 3, 3)`` (subclasses)."""
        raise NotImplementedError()


def _blend(kernel_effect, kernel_nochange, alpha):
    # alpha-blend the effect with the identity kernel: alpha = 0 leaves the image, 1 gives the effect alone
    return kernel_nochange * (1 - alpha) + kernel_effect * alpha


# MegEngine caches one compiled subgraph per (alpha, strength); these closures are cheap, and a bounded cache
# keeps parameters drawn from a range (a new float every call) from growing it without end
@lru_cache(maxsize=256)
def _get_EmbossKernel_op(alpha, strength, *, dtype=None, device=None):
    """A function of ``(matrix_effect, matrix_nochange)`` (3x3 tensors) returning ``(kernel,)``: the effect
    matrix with ``strength`` subtracted at (0, 0), (0, 1), (1, 0) and added at (1, 2), (2, 1), (2, 2), blended
    with the identity matrix by ``alpha``."""
    direction = Tensor(np.array([[-1, -1, 0], [-1, 0, 1], [0, 1, 1]], dtype=np.float32), device=device)

    def EmbossKernel(inp_e, inp_n):
        kernel_effect = inp_e + direction * strength
        return (_blend(kernel_effect, inp_n, alpha),)

    return EmbossKernel


class Emboss(ActiveBlur):
    r"""Overlay an emboss effect and alpha-blend the result with the original input.

    The embossed version pronounces highlights and shadows: it enhances the high-frequency information of the
    image and keeps its low-frequency information. The kernel is
    ``(1 - alpha) * I + alpha * [[-1 - s, -s, 0], [-s, 1, s], [0, s, 1 + s]]`` (``I`` the identity 3x3 kernel,
    ``s`` the strength), applied to each channel.

    Args:
        alpha: visibility of the embossed image, a number or a tuple of numbers. At ``0.0`` only the original
            image is visible, at ``1.0`` only its embossed version. If a tuple ``(a, b)``, a random value is
            sampled from ``[a, b)`` at each call.
        strength: emboss strength, a number or a tuple of numbers (sane values lie in ``[0.0, 2.0)``). If a tuple
            ``(a, b)``, a random value is sampled from ``[a, b)`` at each call.
        seed: random number seed of the layer's own generator; None draws from the global generator.

    Example:
        >>> inp = mge.tensor(np.random.randint(0, 255, size=(4, 3, 16, 16)).astype("float32"))
        >>> aug = Emboss(alpha=(0.6, 0.8), strength=(0.6, 0.8), seed=1)
        >>> aug(inp).shape
        (4, 3, 16, 16)
        >>> flat = Tensor(np.full((1, 1, 4, 4), 7, dtype=np.uint8))  # the kernel sums to 1: flat stays flat
        >>> Emboss(alpha=1.0, strength=1.0)(flat).numpy()[0, 0, 0]
        array([7, 7, 7, 7], dtype=uint8)
    """

    def __init__(self, alpha, strength, seed=None):
        super().__init__()
        self._setup(alpha, "strength", strength, seed, [[-1, 0, 0], [0, 1, 0], [0, 0, 1]])

    def get_kernel(self, inp, c):
        """The emboss kernel for ``c`` channels, ``(c, 1, 1, 3, 3)`` (parameters drawn now when ranges)."""
        return self._kernel(c, "strength", _get_EmbossKernel_op)


@lru_cache(maxsize=256)  # (bounded: see _get_EmbossKernel_op)
def _get_SharpenKernel_op(alpha, lightness, *, dtype=None, device=None):
    """A function of ``(matrix_effect, matrix_nochange)`` (3x3 tensors) returning ``(kernel,)``: the effect
    matrix with ``lightness`` added at the centre, blended with the identity matrix by ``alpha``."""
    centre = Tensor(np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=np.float32), device=device)

    def SharpenKernel(inp_e, inp_n):
        kernel_effect = inp_e + centre * lightness
        return (_blend(kernel_effect, inp_n, alpha),)

    return SharpenKernel


class Sharpen(ActiveBlur):
    r"""Sharpen images and alpha-blend the result with the original input.

    The kernel is ``(1 - alpha) * I + alpha * [[-1, -1, -1], [-1, 8 + l, -1], [-1, -1, -1]]`` (``I`` the
    identity 3x3 kernel, ``l`` the lightness), applied to each channel.

    Args:
        alpha: visibility of the sharpened image, a number or a tuple of numbers. At ``0.0`` only the original
            image is visible, at ``1.0`` only its sharpened version. If a tuple ``(a, b)``, a random value is
            sampled from ``[a, b)`` at each call.
        lightness: brightness of the sharpened image, a number or a tuple of numbers (sane values lie in
            ``[0.5, 2.0)``). If a tuple ``(a, b)``, a random value is sampled from ``[a, b)`` at each call.
        seed: random number seed of the layer's own generator; None draws from the global generator.

    Example:
        >>> inp = mge.tensor(np.random.randint(0, 255, size=(4, 3, 16, 16)).astype("float32"))
        >>> aug = Sharpen(alpha=(0.6, 0.8), lightness=(0.6, 0.8), seed=1)
        >>> aug(inp).shape
        (4, 3, 16, 16)
        >>> flat = Tensor(np.full((1, 1, 4, 4), 10.0, dtype=np.float32))  # a flat image is scaled by lightness
        >>> Sharpen(alpha=1.0, lightness=1.5)(flat).numpy()[0, 0, 0]
        array([15., 15., 15., 15.], dtype=float32)
    """

    def __init__(self, alpha, lightness, seed=None):
        super().__init__()
        self._setup(alpha, "lightness", lightness, seed, [[-1, -1, -1], [-1, 8, -1], [-1, -1, -1]])

    def get_kernel(self, inp, c):
        """The sharpen kernel for ``c`` channels, ``(c, 1, 1, 3, 3)`` (parameters drawn now when ranges)."""
        return self._kernel(c, "lightness", _get_SharpenKernel_op)


class LinearContrast(Module):
    r"""Adjust contrast by scaling each pixel ``v`` to ``center + alpha * (v - center)``.

    For uint8 inputs ``center`` is 127 and the result is clipped to ``[0, 255]`` (then truncated to uint8), by a
    lookup table per image (or per channel). For other dtypes, as in MegEngine, ``center`` is the dtype's center
    value of ``_get_value_range_of_dtype`` -- 0 for floats (so a float image is just scaled by ``alpha``), 0 for
    signed integers, ``min + max // 2`` for unsigned ones -- the result is computed in float32, cast back to the
    input's dtype and not clipped. bool inputs raise (they have no center).

    NOTE: MegEngine's uint8 table has 255 entries (``arange(255)``), so a pixel of 255 indexes past it (an
    out-of-bound index error); the table here has 256, so 255 maps by the same formula.

    Args:
        alpha: the contrast factor, a number or a tuple of numbers. If a tuple ``(a, b)``, a value is sampled
            from ``[a, b)`` for each image (or each channel) at each call.
        per_channel: whether to use (imagewise) the same sample for all channels (False) or to sample a value for
            each channel (True).
        seed: random number seed of the layer's own generator; None draws from the global generator.

    Example:
        >>> inp = mge.tensor(np.random.randint(0, 255, size=(4, 3, 16, 16)).astype("float32"))
        >>> aug = LinearContrast(alpha=(0.6, 0.8), per_channel=False, seed=1)
        >>> aug(inp).shape
        (4, 3, 16, 16)
        >>> x = Tensor(np.array([0, 100, 127, 200, 255], dtype=np.uint8).reshape(1, 1, 1, 5))
        >>> LinearContrast(alpha=2.0)(x).numpy().ravel()
        array([  0,  73, 127, 255, 255], dtype=uint8)
    """

    def __init__(self, alpha, per_channel=False, seed=None):
        seed = _check_seed(seed, "LinearContrast")
        _check_parameter(alpha, "LinearContrast", "alpha")
        super().__init__()
        self.alpha = alpha
        self.seed = seed
        self.per_channel = per_channel
        self.rng_func = RNG(seed).uniform

    def _get_parameter(self, param, size):
        _check_parameter(param, "LinearContrast", "alpha")
        if isinstance(param, tuple):
            return self.rng_func(param[0], param[1], size)
        return full_like(zeros(size, dtype="float32"), float(param))

    def _get_table(self, size):
        # one row per image (or channel): row[v] = clip(127 + alpha * (v - 127), 0, 255) for v = 0..255
        alpha = self._get_parameter(self.alpha, (size, 1))
        table = broadcast_to(arange(256).astype("float32"), (size, 256))
        table = 127 + (table - 127) * alpha
        return clip(table, 0, 255)

    def forward(self, inp: Tensor) -> Tensor:
        """``inp`` (``(N, C, H, W)``) with its contrast scaled."""
        _tensor_input(inp, "LinearContrast")
        _check_nchw(inp, "LinearContrast")
        if inp.dtype.name == "uint8":
            if self.per_channel is True:
                flatten_inp = reshape(inp, (inp.shape[0] * inp.shape[1], inp.shape[2] * inp.shape[3]))
            else:
                flatten_inp = flatten(inp, 1)
            flatten_inp = flatten_inp.astype("int32")
            table = self._get_table(flatten_inp.shape[0])
            result = gather(table, 1, flatten_inp)
            return reshape(result, inp.shape).astype("uint8")
        input_dtype = np.dtype(inp.dtype)
        _, center_value, _ = _get_value_range_of_dtype(input_dtype)
        if center_value is None:
            # (MegEngine fails here with a TypeError adding None)
            raise TypeError(f"LinearContrast: {input_dtype} inputs have no center value to scale around")
        if self.per_channel is True:
            size = (inp.shape[0], inp.shape[1], 1, 1)
        else:
            size = (inp.shape[0], 1, 1, 1)
        alpha = self._get_parameter(self.alpha, size)
        if input_dtype.kind in ["u", "i"]:
            center_value = int(center_value)
        result = center_value + (inp.astype("float32") - center_value) * alpha
        return result.astype(input_dtype)
