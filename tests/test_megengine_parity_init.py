"""``module.init`` fan computation gives MegEngine 1.13's numbers (the values were printed by MegEngine 1.13.0),
so msra / xavier initialisation of grouped convolutions draws MegEngine's scales."""
from megxla.module import Conv2d, Conv3d
from megxla.module.init import calculate_fan_in_and_fan_out


def test_fans_of_grouped_and_3d_convolution_weights_are_megengines():
    assert calculate_fan_in_and_fan_out(Conv2d(2, 3, (5, 7)).weight) == (70, 105)
    # (G, O/G, I/G, kh, kw): the group axis is dropped
    assert calculate_fan_in_and_fan_out(Conv2d(2, 4, (5, 7), groups=2).weight) == (35, 70)
    # MegEngine reads a Conv3d weight the same way (its own FIXME): kept for MegEngine's numbers
    assert calculate_fan_in_and_fan_out(Conv3d(2, 3, (5, 7, 9)).weight) == (315, 126)
