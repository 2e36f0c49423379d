"""Layer constructor arguments and their validation, compared with MegEngine 1.13 (session 80 probes).

Every expected value, attribute and exception type below is what MegEngine 1.13.0 printed for the same call
(probe scripts under /tmp/s80/layers, run with MegEngine and with megxla and diffed).
"""
import numpy as np
import pytest

import megxla as mge
import megxla.module as M


def _x(*shape):
    return mge.Tensor(np.random.RandomState(0).randn(*shape).astype("float32"))


# --- tuple arguments of the convolutions: MegEngine's get_ndtuple ---------------------------------------------

def test_conv_float_arguments_truncated_like_megengine():
    # MegEngine: int() of a number, so `padding=(k - 1) / 2` (a float in Python 3) builds the layer
    m = M.Conv2d(4, 6, 2.5)
    assert m.kernel_size == (2, 2) and m.weight.shape == (6, 4, 2, 2)
    assert m(_x(2, 4, 7, 7)).shape == (2, 6, 6, 6)
    m = M.Conv2d(4, 6, 3.0, padding=1.5, dilation=2.7)
    assert (m.kernel_size, m.padding, m.dilation) == ((3, 3), (1, 1), (2, 2))
    assert all(type(v) is int for v in m.kernel_size + m.padding + m.dilation)
    assert repr(m) == "Conv2d(4, 6, kernel_size=(3, 3), padding=(1, 1), dilation=(2, 2))"
    assert M.Conv3d(4, 6, 3, padding=1.5).padding == (1, 1, 1)
    assert M.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1.5).output_padding == (1, 1)
    assert M.DeformableConv2d(4, 6, 2.0).kernel_size == (2, 2)


@pytest.mark.parametrize("make, text", [
    (lambda: M.Conv2d(4, 6, 3, stride=-1), "invalid value: (-1, -1)"),
    (lambda: M.Conv2d(4, 6, 3, padding=-1), "invalid value: (-1, -1)"),
    (lambda: M.Conv2d(4, 6, 3, padding=(0, -1)), "invalid value: (0, -1)"),
    (lambda: M.Conv2d(4, 6, -1), "invalid value: (-1, -1)"),
    (lambda: M.Conv2d(4, 6, 0), "invalid value: (0, 0)"),
    (lambda: M.Conv2d(4, 6, 3, dilation=0), "invalid value: (0, 0)"),
    (lambda: M.Conv3d(4, 6, 3, stride=-1), "invalid value: (-1, -1, -1)"),
    (lambda: M.Conv3d(4, 6, 0), "invalid value: (0, 0, 0)"),
    (lambda: M.ConvTranspose2d(4, 6, 3, stride=2, output_padding=-1), "invalid value: (-1, -1)"),
    (lambda: M.DeformableConv2d(4, 6, 0), "invalid value: (0, 0)"),
    (lambda: M.LocalConv2d(4, 6, 5, 5, 0), "invalid value: (0, 0)"),
    (lambda: M.RegionRestrictedConv(4, 4, 0, groups=4), "invalid value: (0, 0)"),
    (lambda: M.Conv2d(4, 6, (3, 3, 3)), "tuple len is not equal to n: (3, 3, 3)"),
    (lambda: M.Conv2d(4, 6, 3, stride=(1, 2, 3)), "tuple len is not equal to n: (1, 2, 3)"),
    (lambda: M.Conv2d(4, 6, 3, padding=(1,)), "tuple len is not equal to n: (1,)"),
    (lambda: M.Conv3d(4, 6, (3, 3)), "tuple len is not equal to n: (3, 3)"),
    (lambda: M.ConvTranspose2d(4, 6, 3, output_padding=(1, 1, 1)), "tuple len is not equal to n: (1, 1, 1)"),
])
def test_conv_bad_tuple_arguments_assert_when_built(make, text):
    # MegEngine: AssertionError when the layer is built (negative values were stored and failed at the forward)
    with pytest.raises(AssertionError) as info:
        make()
    assert str(info.value).startswith(text)
    assert isinstance(info.value, ValueError)  # megxla's former type still catches it


def test_conv_transpose3d_keeps_output_padding_as_given():
    # MegEngine stores ConvTranspose3d's output_padding unconverted (an int stays an int)
    assert M.ConvTranspose3d(4, 6, 3).output_padding == 0
    m = M.ConvTranspose3d(4, 6, 3, stride=2, padding=1, output_padding=1, bias=False)
    assert m.output_padding == 1 and type(m.output_padding) is int
    assert m(_x(1, 4, 4, 4, 4)).shape == (1, 6, 8, 8, 8)
    m = M.ConvTranspose3d(2, 3, 2, stride=2, output_padding=(1, 0, 1))
    assert m.output_padding == (1, 0, 1)
    assert m(_x(1, 2, 3, 3, 3)).shape == (1, 3, 7, 6, 7)


def test_conv1d_kernel_tuple_of_two_is_a_type_error():
    # MegEngine: TypeError building the weight ('tuple' object cannot be interpreted as an integer)
    with pytest.raises(TypeError):
        M.Conv1d(4, 6, (3, 3))


@pytest.mark.parametrize("mode", ["foo", "circular", "REFLECT"])
def test_conv_padding_mode_not_known_is_an_assertion(mode):
    # MegEngine asserts the mode (at the first call); megxla refuses it when built, with the same type
    with pytest.raises(AssertionError):
        M.Conv2d(4, 6, 3, padding=1, padding_mode=mode)
    with pytest.raises(AssertionError):
        M.Conv1d(4, 6, 3, padding_mode=mode)
    with pytest.raises(AssertionError):
        M.RegionRestrictedConv(4, 4, 3, groups=4, padding_mode=mode)


# --- asserted arguments of other layers ---------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: M.BatchNorm2d(3, track_running_stats=False, freeze=True),
    lambda: M.GroupNorm(3, 4),
    lambda: M.GeneralNorm((3, 4), (1,)),
    lambda: M.GeneralNorm((3, 3), (1, 1)),
    lambda: M.MultiHeadAttention(8, 3),
])
def test_asserted_constructor_arguments(make):
    # MegEngine: AssertionError for each
    with pytest.raises(AssertionError):
        make()


def test_general_norm_unsorted_axes_assert_at_forward():
    m = M.GeneralNorm((3, 4), (3, 1))
    with pytest.raises(AssertionError):  # MegEngine: "The order of normalized_axis is incorrect ..."
        m(_x(2, 4, 3, 4))


def test_batchnorm_track_running_stats_turned_on_later_asserts():
    m = M.BatchNorm2d(3, track_running_stats=False)
    m.track_running_stats = True
    with pytest.raises(AssertionError):  # MegEngine asserts in its forward
        m(_x(2, 3, 4, 4))


@pytest.mark.parametrize("make", [
    lambda: M.Elemwise("foo"),
    lambda: M.Elemwise(3),
    lambda: M.RNNCell(3, 4, nonlinearity="foo"),
    lambda: M.RNN(3, 4, nonlinearity="foo"),
])
def test_unknown_mode_names_are_runtime_errors(make):
    # MegEngine: RuntimeError ("Unable to cast Python instance to C++ type") at the first call
    with pytest.raises(RuntimeError):
        make()


def test_pooling_and_sliding_window_sizes_given_as_floats_are_truncated():
    # MegEngine 1.13: MaxPool2d(2.0) / AvgPool2d(2.0) / SlidingWindow(2.0) run as 2 (its get_ndtuple int()s a number);
    # megxla raised OpError at the forward pass
    import megxla as mge
    import megxla.module as M
    x = mge.Tensor(np.arange(32, dtype="float32").reshape(1, 2, 4, 4))
    assert M.MaxPool2d(2.0)(x).shape == (1, 2, 2, 2)
    assert M.AvgPool2d(2.0)(x).shape == (1, 2, 2, 2)
    assert M.SlidingWindow(2.0)(x).shape == M.SlidingWindow(2)(x).shape
