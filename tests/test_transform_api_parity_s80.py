"""``megengine.data.transform``'s API (constructor arguments, validation, ``order``, ``Compose``, attributes, dtypes)
against MegEngine 1.13's, by differential probes (session 80). Expected values and exception types are what
MegEngine 1.13.0 (opencv-python 4.8.1, NumPy 1.23) printed for the same calls."""
import numpy as np
import pytest

from megxla.data import transform as T


def _img(h=5, w=5, c=3, dtype=np.uint8):
    return np.zeros((h, w, c), dtype)


@pytest.mark.parametrize("make", [T.ToMode, T.Normalize, T.Compose, T.VisionTransform,
                                  lambda order: T.Resize(3, order=order)])
def test_unsupported_order_name_raises_not_implemented_error(make):
    # MegEngine: NotImplementedError("foo is unsupported data type"); megxla raised a plain ValueError
    for order, name in [(("image", "foo"), "foo"), (("Image",), "Image"), ("image", "i")]:
        with pytest.raises(NotImplementedError, match="^{} is unsupported data type".format(name)):
            make(order=order) if make is not T.VisionTransform else make(order)
        with pytest.raises(ValueError):  # (megxla's own type still catches it)
            make(order=order) if make is not T.VisionTransform else make(order)


def test_base_class_element_methods_raise_not_implemented_error():
    # MegEngine: VisionTransform._apply_image / _apply_coords / _apply_mask raise NotImplementedError (a
    # TorchTransformCompose asked for boxes too); megxla raised TypeError
    with pytest.raises(NotImplementedError):
        T.VisionTransform().apply(_img())
    with pytest.raises(NotImplementedError):
        T.VisionTransform(("image", "boxes")).apply((_img(), np.zeros((1, 4), np.float32)))
    with pytest.raises(NotImplementedError):
        T.TorchTransformCompose([], order=("image", "boxes")).apply((_img(), np.zeros((1, 4), np.float32)))


def test_asserted_arguments_raise_assertion_error():
    # MegEngine asserts these (AssertionError); megxla raised ValueError
    with pytest.raises(AssertionError, match="^unsupported mode: HWC$"):
        T.ToMode("HWC")
    with pytest.raises(AssertionError, match=r"^scale_range should be of kind \(min, max\)$"):
        T.RandomResizedCrop(4, scale_range=(1.0, 0.1))
    with pytest.raises(AssertionError, match=r"^ratio_range should be of kind \(min, max\)$"):
        T.RandomResizedCrop(4, ratio_range=(1.0, 0.1))
    with pytest.raises(AssertionError, match="^output size"):
        T.CenterCrop(100).apply(_img(6, 8))
    # MegEngine: NotImplementedError("foo is unsupported sample style")
    with pytest.raises(NotImplementedError, match="^foo is unsupported sample style$"):
        T.ShortestEdgeResize(4, 10, "foo")


def test_tomode_of_a_2d_image_raises_as_megengine():
    # MegEngine: np.rollaxis(image, 2) -> AxisError "axis 2 is out of bounds for array of dimension 2"; megxla
    # returned the (W, H) transpose, and transposed a 2-D mask beside an HWC image
    with pytest.raises(np.exceptions.AxisError):
        T.ToMode().apply(np.zeros((6, 8), np.uint8))
    with pytest.raises(np.exceptions.AxisError):
        T.ToMode(order=("image", "mask")).apply((_img(6, 8), np.zeros((6, 8), np.uint8)))


def test_shuffle_index_past_the_end_is_an_index_error():
    # MegEngine raises IndexError (list assignment index out of range) when it applies the chain
    with pytest.raises(IndexError):
        T.Compose([T.ToMode(), T.Normalize()], shuffle_indices=[(1, 5)])


def test_compose_and_torch_compose_keep_the_callers_sequence():
    # MegEngine: `Compose(lst).transforms is lst` (a tuple stays a tuple); megxla copied it into a new list
    lst = [T.ToMode(), T.Normalize()]
    assert T.Compose(lst).transforms is lst
    tup = (T.ToMode(),)
    assert T.Compose(tup).transforms is tup
    assert T.TorchTransformCompose(lst).transforms is lst
    # (not MegEngine's shared default list: each default-built Compose has its own)
    a, b = T.Compose(), T.Compose()
    a.transforms.append(T.ToMode())
    assert b.transforms == [] and T.Compose().transforms == []
    # a one-shot iterable is read once
    assert len(T.Compose(t for t in lst).transforms) == 2


def test_sizes_are_kept_as_given():
    # MegEngine: Pad(size=[1, 2, 3, 4]).size is the list; output_size=[4, 5] stays a list
    assert T.Pad([1, 2, 3, 4]).size == [1, 2, 3, 4] and isinstance(T.Pad([1, 2, 3, 4]).size, list)
    for cls in (T.RandomCrop, T.CenterCrop, T.RandomResizedCrop):
        t = cls([4, 5])
        assert isinstance(t.output_size, list) and t.output_size == [4, 5]
    rc = T.RandomCrop([4, 5])
    assert rc.apply(_img(6, 8)).shape == (4, 5, 3)


def test_argument_messages_are_megengines():
    with pytest.raises(ValueError, match=r"^size should be a list/tuple which contains \(top, down, left, right\) "
                                         r"four pad sizes\.$"):
        T.Pad((1, 2, 3))
    with pytest.raises(ValueError, match="^lighting scale should be non-negative$"):
        T.Lighting(-0.1)


def test_bad_output_size_fails_where_megengine_does_in_the_random_stream():
    # RandomCrop([4]): MegEngine unpacks output_size before its draws -> ValueError, np.random untouched
    np.random.seed(0)
    with pytest.raises(ValueError, match="not enough values to unpack"):
        T.RandomCrop([4]).apply(_img())
    assert np.random.randint(1 << 30) == 209652396  # (MegEngine's next draw)
    # RandomResizedCrop(ratio_range=(0, 1)): MegEngine takes the log after its first draw
    np.random.seed(0)
    with pytest.raises(ValueError, match="math domain error"):
        T.RandomResizedCrop(2, ratio_range=(0, 1)).apply(_img())
    assert np.random.randint(1 << 30) == 924231285
    # an output_size of three: MegEngine's resize refuses it (megxla resized to the first two)
    np.random.seed(0)
    with pytest.raises(ValueError, match=r"^resize needs \(h, w\), but got \(2, 3, 4\)$"):
        T.RandomResizedCrop((2, 3, 4)).apply(_img())
    assert np.random.randint(1 << 30) == 192771779


def test_float64_images_resize_and_pad_as_megengine():
    # megxla refused a float64 image's cubic / area / Lanczos resize ("interpolation=2 is not supported"), picked
    # other pixels in a nearest one and filled a scalar pad in every channel; MegEngine (OpenCV) printed these
    x = (np.arange(4 * 5 * 3) * 7 % 256).reshape(4, 5, 3).astype(np.float64)
    r = T.Resize((3, 2), interpolation=2).apply(x)
    assert r.dtype == np.float64
    np.testing.assert_array_equal(r, [
        [[27.273877322673798, 33.80512750148773, 40.80512750148773],
         [88.1323823928833, 94.66363257169724, 101.66363257169724]],
        [[195.52734375, 218.55859375, 225.55859375], [83.44140625, 106.47265625, 113.47265625]],
        [[96.5215516090393, 107.86530113220215, 114.86530113220215],
         [106.93793392181396, 118.2816834449768, 125.2816834449768]]])
    r = T.Resize((3, 7), interpolation=0).apply(x)
    assert r[..., 0].tolist() == [[0.0, 0.0, 21.0, 42.0, 42.0, 63.0, 84.0],
                                  [105.0, 105.0, 126.0, 147.0, 147.0, 168.0, 189.0],
                                  [210.0, 210.0, 231.0, 252.0, 252.0, 17.0, 38.0]]
    p = T.Pad(1, 3).apply(x)
    assert p.dtype == np.float64 and p[0, :2].tolist() == [[3.0, 0.0, 0.0], [3.0, 0.0, 0.0]]


def test_normalize_of_a_float16_image_keeps_numpy1_types():
    # MegEngine (NumPy 1 value-based casting): a 0-d mean / std that fits float16 keeps a float16 image float16
    h = np.array([[[0.5, 100.25, 7.0]]], np.float16)
    r = T.Normalize(0.25, 3.0).apply(h)
    assert r.dtype == np.float16 and r.tolist() == [[[0.08331298828125, 33.34375, 2.25]]]
    r = T.Normalize([0.25, 1, 2], 3.0).apply(h)
    assert r.dtype == np.float32
    np.testing.assert_array_equal(r, np.array([[[0.0833333358168602, 33.08333206176758, 1.6666666269302368]]],
                                              np.float32))
    r = T.Normalize(1e5, 3.0).apply(h)
    assert r.dtype == np.float32 and r.tolist() == [[[-33333.16796875, -33299.91796875, -33331.0]]]
