"""megxla.data's API against MegEngine 1.13's (session 80 differential probes, /tmp/s80/data/p_*.py).

Every expected value / exception type below is what MegEngine 1.13.0 printed for the same call.
"""
import collections
import os

import numpy as np
import pytest

from megxla.data import DataLoader, SequentialSampler, StreamSampler
from megxla.data.collator import Collator
from megxla.data.dataset import ArrayDataset, ConcatDataset, Dataset, StreamDataset
from megxla.data.dataset.vision import COCO, Cityscapes, PascalVOC
from megxla.data.sampler import MapSampler, RandomSampler

_UNSUPPORTED = (
    "default_collator: inputs must contain numpy arrays, numbers, Unicode strings, bytes, dicts or lists; found "
)


class _Items(Dataset):
    def __init__(self, fn, n):
        self.fn, self.n = fn, n

    def __getitem__(self, i):
        return self.fn(i)

    def __len__(self):
        return self.n


def test_map_sampler_without_sample_raises_not_implemented_error():
    # MegEngine: `MapSampler(ds, batch_size=2).sample()` and `list(...)` raise NotImplementedError
    s = MapSampler(ArrayDataset(np.arange(10)), batch_size=2)
    with pytest.raises(NotImplementedError):
        s.sample()
    with pytest.raises(NotImplementedError):
        list(s)


def test_sampler_indices_error_message_is_megengines():
    # MegEngine: "indices should be None or a sequence, but got indices=5" / "... indices=[1 2]"
    ds = ArrayDataset(np.arange(10))
    with pytest.raises(ValueError, match=r"^indices should be None or a sequence, but got indices=5$"):
        SequentialSampler(ds, batch_size=2, indices=5)
    with pytest.raises(ValueError, match=r"^indices should be None or a sequence, but got indices=\[1 2\]$"):
        RandomSampler(ds, batch_size=2, indices=np.array([1, 2]))


def test_collator_stacks_datetime64_scalars():
    # MegEngine: ndarray(datetime64[D], (2,)); megxla raised a CollateError comparing sample 0 with itself
    out = Collator().apply([np.datetime64("2020-01-01"), np.datetime64("2020-01-02")])
    assert out.dtype == np.dtype("datetime64[D]") and out.shape == (2,)
    assert out.tolist() == [np.datetime64("2020-01-01").item(), np.datetime64("2020-01-02").item()]


def test_collator_gathers_a_string_field_whatever_follows():
    # MegEngine: ["a", 1] -> the list ['a', 1]; a string field beside None comes back as gathered
    assert Collator().apply(["a", 1]) == ["a", 1]
    names, labels = Collator().apply([("img0.jpg", 0), (None, 1)])
    assert names == ("img0.jpg", None) and labels.tolist() == [0, 1]
    ds = _Items(lambda i: {"path": None if i == 1 else "p%d" % i, "x": np.float32(i)}, 3)
    (batch,) = list(DataLoader(ds, sampler=SequentialSampler(ds, batch_size=3)))
    assert batch["path"] == ["p0", None, "p2"] and batch["x"].dtype == np.float32


def test_collator_stacks_an_array_beside_a_list_of_its_shape():
    # MegEngine: [arange(2), [1, 2]] -> int64 (2, 2) [[0, 1], [1, 2]]; [[1, 2], arange(2)] -> [array([1, 0]),
    # array([2, 1])] (zip walks the array's items)
    out = Collator().apply([np.arange(2), [1, 2]])
    assert out.dtype == np.int64 and out.tolist() == [[0, 1], [1, 2]]
    a, b = Collator().apply([[1, 2], np.arange(2)])
    assert a.dtype == np.int64 and a.tolist() == [1, 0] and b.tolist() == [2, 1]


def test_collator_unsupported_value_message_is_megengines():
    # MegEngine: TypeError "default_collator: inputs must contain ...; found <class 'NoneType'>" (object arrays:
    # "... found object")
    with pytest.raises(TypeError) as info:
        Collator().apply([None, None])
    assert str(info.value) == _UNSUPPORTED + "<class 'NoneType'>"
    with pytest.raises(TypeError) as info:
        Collator().apply([np.array([1, None], dtype=object)] * 2)
    assert str(info.value) == _UNSUPPORTED + "object"
    with pytest.raises(TypeError, match="^" + _UNSUPPORTED + "<class 'set'>"):
        Collator().apply([(1, {1}), (2, {2})])


def test_collator_missing_dict_key_is_a_key_error():
    # MegEngine: KeyError 'y' (its `d[key]`), also through a serial DataLoader
    with pytest.raises(KeyError):
        Collator().apply([{"x": 1, "y": 2}, {"x": 3}])
    ds = _Items(lambda i: {"x": i, "y": i} if i == 0 else {"x": i}, 2)
    with pytest.raises(KeyError, match="dataset index 1"):
        list(DataLoader(ds, sampler=SequentialSampler(ds, batch_size=2)))


def test_collator_apply_keeps_a_sequence_input_as_given():
    # MegEngine: Collator().apply("abc") -> 'abc' (a batch of one-character strings, returned as given)
    assert Collator().apply("abc") == "abc"
    assert Collator().apply(np.arange(3)).tolist() == [0, 1, 2]


def test_dataloader_sampler_and_dataset_mismatch_is_an_assertion_error():
    # MegEngine asserts: AssertionError "types of dataset and sampler do not match" /
    # "Can not recognize this kind of dataset: <class 'NoneType'>"
    ds = ArrayDataset(np.arange(5))
    with pytest.raises(AssertionError, match="types of dataset and sampler do not match"):
        DataLoader(ds, sampler=StreamSampler(2))

    class Stream(StreamDataset):
        def __init__(self):
            pass

        def __iter__(self):
            return iter(range(3))

    with pytest.raises(AssertionError, match="types of dataset and sampler do not match"):
        DataLoader(Stream(), sampler=SequentialSampler(ds))
    with pytest.raises(AssertionError, match=r"Can not recognize this kind of dataset: <class 'NoneType'>"):
        DataLoader(None)


def test_dataloader_num_workers_errors():
    # MegEngine: -1 -> ValueError "num_workers should not be negative"; "2" / None -> TypeError (its comparison)
    ds = ArrayDataset(np.arange(5))
    with pytest.raises(ValueError, match="^num_workers should not be negative"):
        DataLoader(ds, num_workers=-1)
    for bad in ("2", None):
        with pytest.raises(TypeError):
            DataLoader(ds, num_workers=bad)


def test_concat_dataset_argument_errors_are_assertion_errors():
    # MegEngine: AssertionError "datasets should not be an empty iterable" / "ConcatDataset does not support
    # StreamDataset"
    class Stream(StreamDataset):
        def __init__(self):
            pass

        def __iter__(self):
            return iter(())

    with pytest.raises(AssertionError, match="datasets should not be an empty iterable"):
        ConcatDataset([])
    with pytest.raises(AssertionError, match="ConcatDataset does not support StreamDataset"):
        ConcatDataset([Stream()])


def test_vision_dataset_unsupported_order_is_not_implemented_error(tmp_path):
    # MegEngine: NotImplementedError "foo is unsupported data type" (PascalVOC, COCO)
    with pytest.raises(NotImplementedError, match="foo is unsupported data type"):
        PascalVOC(str(tmp_path), "train", order=("image", "foo"))
    with pytest.raises(NotImplementedError, match="foo is unsupported data type"):
        COCO(str(tmp_path), os.path.join(str(tmp_path), "x.json"), order=("image", "foo"))


def test_voc_and_cityscapes_missing_root_is_runtime_error(tmp_path):
    # MegEngine: RuntimeError "Dataset not found or corrupted." for a root that does not exist
    missing = str(tmp_path / "nope")
    with pytest.raises(RuntimeError):
        PascalVOC(missing, "train", order=("image", "boxes"))
    with pytest.raises(RuntimeError):
        Cityscapes(missing, "train", mode="gtFine", order=("image", "mask"))
    with pytest.raises(FileNotFoundError):  # (megxla's own type, kept)
        PascalVOC(missing, "train", order=("image", "boxes"))


def test_namedtuple_and_nested_batches_unchanged():
    # MegEngine: namedtuple samples collate field by field, nested lists transpose (guard for the changes above)
    NT = collections.namedtuple("NT", "img label")
    out = Collator().apply([NT(np.zeros(2, np.uint8), 0), NT(np.ones(2, np.uint8), 1)])
    assert isinstance(out, NT) and out.img.dtype == np.uint8 and out.label.tolist() == [0, 1]
    out = Collator().apply([[[0, 1], [0]], [[1, 2], [2]]])
    assert [[a.tolist() for a in inner] for inner in out] == [[[0, 1], [1, 2]], [[0, 2]]]


def test_worker_info_is_read_only():
    # MegEngine, in a stream worker: `get_worker_info().idx = 5` raises
    # RuntimeError "Cannot assign attributes to WorkerInfo objects"
    from megxla.data.dataloader import WorkerInfo

    info = WorkerInfo(0, 1, 7, None)
    with pytest.raises(RuntimeError, match="^Cannot assign attributes to WorkerInfo objects$"):
        info.idx = 5
    assert (info.idx, info.worker, info.seed) == (0, 1, 7)


def test_coco_classes_origin_id():
    # MegEngine: COCO.classes_originID maps each of class_names (in order) to its official COCO category id
    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33,
           34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61,
           62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90]
    assert list(COCO.classes_originID) == list(COCO.class_names)
    assert list(COCO.classes_originID.values()) == ids
    assert COCO.classes_originID["stop sign"] == 13 and COCO.classes_originID["toothbrush"] == 90
