"""megxla.amp against MegEngine 1.13 (probe s79): expected values are what MegEngine 1.13.0 printed for the same
script (/tmp/s79/amp/p1.py, p11.py), not megxla's own output."""
import numpy as np

import megxla as mge
import megxla.functional as F
from megxla import amp


def test_autocast_block_sets_compute_mode_float32_and_restores_it():
    # MegEngine 1.13 printed: 'default' / in 'float32' / in dis 'float32' / out 'default' / in2 'float32' /
    # out2 'float32' / global 'default' (its autocast calls _config._reset_execution_config(compute_mode="float32"))
    assert mge.config._compute_mode == "default"
    with amp.autocast():
        assert mge.config._compute_mode == "float32"
        with amp.autocast(enabled=False):
            assert mge.config._compute_mode == "float32"
    assert mge.config._compute_mode == "default"
    try:
        mge.config._compute_mode = "float32"
        with amp.autocast():
            assert mge.config._compute_mode == "float32"
        assert mge.config._compute_mode == "float32"
    finally:
        mge.config._compute_mode = "default"
    try:
        amp.enabled = True  # the module switch alone leaves the execution config as it is
        assert mge.config._compute_mode == "default"
    finally:
        amp.enabled = False

    @amp.autocast()
    def f():
        return mge.config._compute_mode

    assert f() == "float32" and mge.config._compute_mode == "default"


def test_autocast_block_restores_compute_mode_after_an_exception():
    try:
        with amp.autocast():
            raise KeyError("x")
    except KeyError:
        pass
    assert mge.config._compute_mode == "default" and amp.enabled is False


def test_dir_of_amp_lists_its_module_properties():
    # MegEngine 1.13's dir(megengine.amp) (mprop module properties) holds 'enabled', 'high_prec_dtype',
    # 'low_prec_dtype' beside 'GradScaler', 'autocast', 'convert_module_format', 'convert_tensor_format'
    names = dir(amp)
    for n in ("enabled", "high_prec_dtype", "low_prec_dtype", "GradScaler", "autocast", "convert_module_format",
              "convert_tensor_format"):
        assert n in names, n


def test_autocast_matmul_and_linear_cast_integer_operands_too():
    # MegEngine's cast_tensors casts every operand of matmul / linear (its printout: float16 float16 float16)
    i32 = mge.Tensor(np.arange(6, dtype="int32").reshape(2, 3))
    f32 = mge.Tensor(np.ones((3, 2), "float32"))
    with amp.autocast():
        got = [F.matmul(i32, i32.T).dtype, F.matmul(i32, f32).dtype, F.linear(i32, i32).dtype]
    assert [np.dtype(d).name for d in got] == ["float16"] * 3
