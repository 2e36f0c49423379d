"""Data-layer differences from MegEngine 1.13 found by scripts/megengine_data_fuzz.py, fixed; the expected values
were observed running MegEngine 1.13.0 (opencv-python 4.8.1, Pillow 11) on the same inputs."""
import numpy as np
import pytest

from megxla.data import RandomSampler, ReplacementSampler, SequentialSampler
from megxla.data import transform as T
from megxla.data.transform.vision import functional as VF


def _polygons():
    return [[np.array([[1.0, 0.0], [4.0, 1.5]], np.float32)],
            [np.array([[0.5, 1.0]], np.float32), np.array([[2.0, 2.0]], np.float32)]]


def test_polygons_move_with_the_image():
    # fuzz seed 0 case 2: megxla refused order=("image", "polygons") ("polygons is unsupported data type")
    img = np.arange(10, dtype=np.uint8).reshape(2, 5, 1)
    polys = _polygons()
    out = T.RandomHorizontalFlip(prob=1.0, order=("image", "polygons")).apply((img, polys))
    assert [[p.tolist() for p in inst] for inst in out[1]] == [[[[4.0, 0.0], [1.0, 1.5]]], [[[4.5, 1.0]], [[3.0, 2.0]]]]
    assert all(p.dtype == np.float32 for inst in out[1] for p in inst)
    assert polys[0][0].tolist() == [[1.0, 0.0], [4.0, 1.5]]  # (the caller's polygons are left alone)
    out = T.Compose([T.Pad((1, 0, 2, 0)), T.Resize((4, 8))], order=("image", "polygons")).apply((img, _polygons()))
    assert out[0].shape == (4, 8, 1)
    np.testing.assert_array_equal(
        np.concatenate([p for inst in out[1] for p in inst]),
        np.array([[3.4285717010498047, 1.3333333730697632], [6.857143402099609, 3.3333334922790527],
                  [2.857142925262451, 2.6666667461395264], [4.5714287757873535, 4.0]], np.float32))


def test_batch_size_over_the_samples_raises_as_megengine():
    # fuzz seed 0 case 6: megxla gave no batch (drop_last) or one short one where MegEngine raises
    msg = "num_samples should be greater than batch_size , but got num_samples=2 and batch_size=3"
    for make in (lambda: SequentialSampler(list(range(2)), batch_size=3, drop_last=True),
                 lambda: RandomSampler(list(range(2)), batch_size=3, seed=1),
                 lambda: ReplacementSampler(list(range(9)), batch_size=3, num_samples=2, seed=1),
                 lambda: RandomSampler(list(range(5)), batch_size=3, world_size=3, rank=0)):
        with pytest.raises(ValueError, match="^" + msg.replace("(", r"\(") + "$"):
            make()
    # MegEngine checks the dataset's size, not the indices'
    assert list(SequentialSampler(list(range(5)), batch_size=3, indices=[4])) == [[4]]
    assert len(RandomSampler(list(range(5)), batch_size=2, world_size=3, rank=0, seed=0)) == 1


def test_unseeded_sampler_leaves_the_global_stream_alone():
    # fuzz seed 0 case 14: an unseeded sampler drew from np.random, so every later draw (augmentations) was one
    # further along than MegEngine's (which seeds the sampler from the OS)
    for make in (lambda: RandomSampler(list(range(7)), batch_size=2),
                 lambda: ReplacementSampler(list(range(7)), batch_size=2)):
        np.random.seed(0)
        s = make()
        assert np.random.randint(1000) == 684  # MegEngine: np.random.seed(0); np.random.randint(1000)
        np.random.seed(0)
        first = list(s)
        np.random.seed(0)
        assert list(make()) == first  # (still reproducible under np.random.seed)


def test_torch_transform_compose_casts_a_float_image_to_uint8():
    # fuzz seed 0 case 384: megxla handed PIL a float32 array ("Cannot handle this data type")
    from PIL import ImageOps
    img = np.arange(24, dtype=np.float32).reshape(2, 4, 3) * 10.7
    out = T.TorchTransformCompose([ImageOps.mirror]).apply(img)
    assert out.dtype == np.uint8
    assert out[..., 0].tolist() == [[96, 64, 32, 0], [224, 192, 160, 128]]
    assert out[0, 0].tolist() == [96, 107, 117]


@pytest.mark.parametrize("channels, expected", [(4, [0, 2, 3, 4]), (3, [1, 2, 0]), (2, [0, 2])])
def test_torch_transform_compose_swaps_only_three_channels(channels, expected):
    # fuzz seed 5 case 330 led here: MegEngine turns only a 3-channel BGR image into RGB for PIL (and back); megxla
    # reversed 2- and 4-channel images too, so a transform of PIL's first band changed the last channel
    from PIL import Image
    def zero_first_band(im):
        return Image.merge(im.mode, [b.point(lambda v: 0) if i == 0 else b for i, b in enumerate(im.split())])
    img = (np.arange(2 * 3 * channels).reshape(2, 3, channels) + 1).astype(np.uint8)
    assert T.TorchTransformCompose([zero_first_band]).apply(img)[0, 0].tolist() == expected


def test_to_gray_keeps_the_dtype_and_refuses_one_channel():
    img = np.random.RandomState(0).randint(0, 256, (3, 4, 3)).astype(np.uint8)
    g = VF.to_gray(img)
    assert g.dtype == np.uint8 and g.shape == (3, 4, 1)  # (megxla gave float32)
    assert g[..., 0].tolist() == [[82, 136, 85, 109], [76, 118, 189, 108], [107, 70, 122, 225]]
    # a one-channel image: a clear error (megxla's Contrast / Saturation gave an IndexError, MegEngine cv2's)
    with pytest.raises(ValueError, match=r"needs an \(H, W, 3\) BGR image"):
        T.SaturationTransform(0.5).apply(img[..., :1])


def test_a_failing_resize_draws_its_interpolation_first():
    # fuzz seed 9 case 169: MegEngine's resize picks one of several interpolations with ``random.choice`` before
    # cv2 looks at the size; megxla checked the size first, so after a resize to an empty size failed (an
    # exception the program catches) the program's ``random`` draws were one behind MegEngine's
    import random
    img = np.zeros((1, 20, 3), np.uint8)
    random.seed(5)
    with pytest.raises(ValueError, match="output size should be positive"):
        VF.resize(img, (0, 11), interpolation=[2, 1])
    after_failure = random.random()
    random.seed(5)
    assert VF.resize(img, (2, 11), interpolation=[2, 1]).shape == (2, 11, 3)
    assert random.random() == after_failure
