"""Faults found running MegEngine's int4 ResNet-50 example (``examples/int4_resnet50_test``) and its Cambricon
training example (``examples/cambircon_train``) unmodified under megxla, against MegEngine 1.13.

The expected values were printed by MegEngine 1.13.0 (CPU, probes under /tmp/s82/fc); MegEngine is not needed here.
"""
import numpy as np

import megxla as mge
from megxla.quantization import fake_quant
from megxla.quantization.utils import tqt_forward


def test_core2_close_exists_and_finishes_pending_work():
    # calibrate.py ends with ``from megengine.core._imperative_rt.core2 import close as mge_close; mge_close()``
    # (MegEngine: returns None; megxla raised ImportError)
    from megxla.core._imperative_rt.core2 import close
    y = mge.tensor([1.0, 2.0]) * 3
    assert close() is None
    np.testing.assert_array_equal(y.numpy(), [3.0, 6.0])


def test_tree_flatten_with_megengine_keywords_gives_every_leaf_and_unflattens():
    # cambircon_train/utils.py's tree_map: ``tree_flatten(items, is_const_leaf=...)`` then ``treedef.unflatten``
    # (megxla: TypeError, unexpected keyword 'is_const_leaf'). MegEngine printed:
    # 7 ['Tensor', 'int', 'str', 'Tensor', 'float', 'NoneType', 'Parameter'] 7
    # tuple 2 (3, 'a') ['a', 'b', 'k'] None 2.5 / [2. 4.] [6.] Tensor [2. 4.]
    from megxla.tensor import Parameter, Tensor
    from megxla.traced_module.pytree import tree_flatten
    x = mge.tensor([1.0, 2.0])
    p = Parameter([3.0])
    items = ((x, 3, "a"), {"k": p, "b": None, "a": [x, 2.5]})
    nodes, td = tree_flatten(items, is_const_leaf=lambda n: not isinstance(n, (Parameter, Tensor)))
    assert [type(n).__name__ for n in nodes] == ["Tensor", "int", "str", "Tensor", "float", "NoneType", "Parameter"]
    assert td.num_leaves == 7
    out = td.unflatten([n * 2 if isinstance(n, Tensor) else n for n in nodes])
    assert type(out) is tuple and len(out) == 2 and out[0][1:] == (3, "a")
    assert sorted(out[1]) == ["a", "b", "k"] and out[1]["b"] is None and out[1]["a"][1] == 2.5
    np.testing.assert_array_equal(out[0][0].numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(out[1]["k"].numpy(), [6.0])


# (log2 scale, MegEngine's step 2 ** scale) -- scales the int4 example's calibration learned; XLA's exp2 gave the
# step an ulp or two off for each, so values at a level's edge were rounded to another level
_SCALES = [(-10.442584037780762, "0x1.78bcce0000000p-11"), (2.890129804611206, "0x1.da74ae0000000p+2"),
           (-3.948922634124756, "0x1.0939ce0000000p-4"), (3.288015842437744, "0x1.3890d40000000p+3")]


def test_tqt_step_is_two_to_the_scale_correctly_rounded():
    # MegEngine printed, for inputs [t, 2.5 t, -7.5 t]: outputs (hex) below, levels [1, 3, -8] ([1, 3, -7] for the last)
    expected = [["0x1.78bcce0000000p-11", "0x1.1a8d9a0000000p-9", "-0x1.78bcce0000000p-8"],
                ["0x1.da74ae0000000p+2", "0x1.63d7820000000p+4", "-0x1.da74ae0000000p+5"],
                ["0x1.0939ce0000000p-4", "0x1.8dd6b40000000p-3", "-0x1.0939ce0000000p-1"],
                ["0x1.3890d40000000p+3", "0x1.d4d93e0000000p+4", "-0x1.117eba0000000p+6"]]
    for (s, t_hex), want in zip(_SCALES, expected):
        t = float.fromhex(t_hex)
        out = tqt_forward(-128, 127, mge.tensor([t, 2.5 * t, -7.5 * t], dtype="float32"),
                          mge.tensor(s, dtype="float32")).numpy()
        assert [float(v).hex() for v in out] == want, s


def test_tqt_qint4_module_rounds_a_tie_as_megengine():
    # MegEngine printed levels [3.0, -3.0, 2.0, 7.0, 1.0] (megxla before: 2.5 t -> 2, -2.5 t -> -2)
    t = np.float32(float.fromhex(_SCALES[2][1]))
    q = fake_quant.TQT(dtype="qint4")
    q.scale[...] = mge.tensor(_SCALES[2][0])
    x = mge.tensor(np.array([2.5, -2.5, 1.5, 7.5, 0.5], dtype="float32") * t)
    assert (q(x).numpy() / t).tolist() == [3.0, -3.0, 2.0, 7.0, 1.0]


def test_a_scripts_root_logger_prints_no_jax_backend_lines(tmp_path):
    # MegEngine's int4 example sets ``logger = mge.get_logger()`` (the root logger at INFO) before its first op; JAX
    # starts its backends at that op and logs "Unable to initialize backend 'tpu'" at INFO, which MegEngine's users
    # never see (MegEngine 1.13 printed only the script's own line)
    import subprocess
    import sys
    script = tmp_path / "log_first.py"
    script.write_text("import megengine as mge\nlogger = mge.get_logger()\nlogger.info('hello')\n"
                      "print(float((mge.tensor([1.0, 2.0]) * 2).sum()))\n")
    out = subprocess.run([sys.executable, "-m", "megxla.run", str(script)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "6.0"
    assert "hello" in out.stderr and "backend" not in out.stderr, out.stderr
