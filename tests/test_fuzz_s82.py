"""Faults found by megxla's differential fuzzers (scripts/megengine_*fuzz.py) against MegEngine 1.13 on new seeds.

The expected values were printed by MegEngine 1.13.0 (CPU, probes under /tmp/s82/fa); MegEngine is not needed here.
"""
import numpy as np
import pytest

from megxla.core.tensor import dtype as D

_NOT_NDARRAY = "arr parameter should be instance of np.ndarray"


def _dtypes():
    return {"qint8": D.qint8(0.05), "quint8": D.quint8(0.05, 3), "qint4": D.qint4(0.05), "quint4": D.quint4(0.05, 3),
            "qint32": D.qint32(0.05)}


@pytest.mark.parametrize("name", ["qint8", "quint8", "qint4", "quint4", "qint32"])
@pytest.mark.parametrize("arr", [0.3, [0.3, 0.1], np.float32(0.3)], ids=["float", "list", "np.float32"])
def test_convert_to_refuses_what_is_not_an_ndarray(name, arr):
    # megengine_quant_fuzz seed 24 case 3; MegEngine: ValueError "arr parameter should be instance of np.ndarray"
    # for a Python float, a list and a NumPy scalar (megxla quantized them)
    with pytest.raises(ValueError, match=_NOT_NDARRAY):
        getattr(D, "convert_to_" + name)(arr, _dtypes()[name])


@pytest.mark.parametrize("name", ["qint8", "quint8", "qint4", "quint4", "qint32"])
def test_convert_from_a_numpy_scalar_or_list_is_refused_as_not_an_ndarray(name):
    # MegEngine: convert_to_* of a 0-d array gives a NumPy scalar (qint8: 6, quint8 / quint4: 9), and convert_from_*
    # of it -- or of a list -- raises "arr parameter should be instance of np.ndarray" (megxla: "arr's dtype should
    # be a ... dtype", as for an ndarray of another dtype)
    dt = _dtypes()[name]
    scalar = getattr(D, "convert_to_" + name)(np.array(0.3, np.float32), dt)
    assert not isinstance(scalar, np.ndarray) and int(scalar) == (9 if name.startswith("qu") else 6)
    for arr in (scalar, [7]):
        with pytest.raises(ValueError, match=_NOT_NDARRAY):
            getattr(D, "convert_from_" + name)(arr)
    # (an ndarray of a plain dtype keeps MegEngine's other message)
    with pytest.raises(ValueError, match="arr's dtype should be a"):
        getattr(D, "convert_from_" + name)(np.array([7], np.int8))
    # (a 1-d array converts both ways, as in MegEngine: [0.3] -> [6] / [9] -> [0.3])
    q = getattr(D, "convert_to_" + name)(np.array([0.3], np.float32), dt)
    assert q.tolist() == [9 if name.startswith("qu") else 6]
    assert getattr(D, "convert_from_" + name)(q).tolist() == pytest.approx([0.3])


# ---- astype from one quantized dtype to another ----------------------------------------------------------------
_Q8 = [-127, -99, -45, -33, -13, -11, -9, -7, -5, -3, -1, 1, 3, 5, 7, 9, 11, 13, 33, 45, 99, 127]
_U8 = [0, 1, 3, 5, 7, 9, 11, 13, 33, 45, 99, 101, 103, 127, 200, 255]
_Q32 = [-3001, -145, -13, -11, -9, -7, -5, -3, -1, 1, 3, 5, 7, 9, 11, 13, 145, 201, 399, 551, 3001]


def _requant(values, src, dst):
    import megxla as mge
    return mge.tensor(np.array(values, np.float32), dtype=src).astype(dst).numpy().astype(int).tolist()


@pytest.mark.parametrize("values, src, dst, expected", [
    # (megengine_quant_fuzz seed 29 case 4: 0.51 / 0.02 = 25.5 in float32, so odd values are ties; megxla rounded
    # -73.95 * (1 / 0.02) to -3697)
    ([-145, -1, 1, 3, 5, 7, 9, 11, 13, 15, -3, -5], D.qint32(0.51), D.qint32(0.02),
     [-3698, -26, 26, 77, 128, 179, 230, 281, 332, 383, -77, -128]),
    (_Q32, D.qint32(0.07), D.qint32(0.02),
     [-10504, -508, -46, -39, -32, -25, -18, -11, -4, 4, 11, 18, 25, 32, 39, 46, 508, 704, 1397, 1929, 10504]),
    (_Q8, D.qint8(0.45), D.qint8(0.3),
     [-128, -128, -67, -49, -19, -16, -13, -10, -7, -4, -1, 1, 4, 7, 10, 13, 16, 19, 49, 67, 127, 127]),
    (_Q8, D.qint8(0.45), D.quint8(0.3, 5),
     [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 4, 6, 9, 12, 15, 18, 21, 24, 54, 72, 153, 195]),
    (_U8, D.quint8(0.45, 0), D.quint8(0.3, 0), [0, 1, 4, 7, 10, 13, 16, 19, 49, 67, 148, 151, 154, 190, 255, 255]),
    (_U8, D.quint8(0.51, 3), D.qint32(0.02),
     [-77, -51, 0, 51, 102, 153, 204, 255, 765, 1071, 2448, 2499, 2550, 3162, 5024, 6426]),
    # (a 4-bit side: the real value divided by the output scale -- 15 * 0.45 / 0.3 is 22.5 there, 22.49999 by the
    # ratio, 23 in MegEngine)
    ([-7, -5, -3, -1, 1, 3, 5, 7], D.qint4(0.45), D.qint8(0.3), [-10, -7, -4, -1, 1, 4, 7, 10]),
    ([0, 1, 3, 5, 7, 9, 11, 13, 15], D.quint4(0.45, 0), D.qint8(0.3), [0, 1, 4, 7, 10, 13, 16, 19, 23]),
    ([0, 1, 3, 5, 7, 9, 11, 13, 15], D.quint4(0.51, 0), D.qint32(0.02), [0, 26, 77, 128, 179, 230, 281, 332, 383]),
], ids=["qint32-tie", "qint32-3.5", "qint8", "qint8-quint8", "quint8", "quint8-qint32", "qint4-qint8", "quint4-qint8",
        "quint4-qint32"])
def test_astype_between_quantized_dtypes_rounds_as_megengine(values, src, dst, expected):
    # MegEngine 1.13's printed values (probe /tmp/s82/fa/p8.py): between 8- and 32-bit dtypes its TypeCvt multiplies
    # q - zp by the float32 ratio of the scales; with a 4-bit dtype it divides the real value by the output scale
    assert _requant(values, src, dst) == expected
