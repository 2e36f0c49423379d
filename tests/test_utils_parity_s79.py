"""megxla.utils (module_stats, hook, tuple_function, http_download), megxla.hub and megxla.logger against
MegEngine 1.13.0 (s79). Expected values are what MegEngine 1.13.0 printed for the same program (CPU), unless a
comment says MegEngine raises there (a MegEngine bug megxla does not copy)."""
import hashlib
import io
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import megxla as mge
import megxla.module as M
from megxla import hub
from megxla.utils import module_stats as ms


def _det_init(net):
    # the probe's deterministic weights: sin(arange + i), parameters in sorted name order
    for i, (_, p) in enumerate(sorted(net.named_parameters())):
        p._reset(mge.tensor(np.sin(np.arange(p.size, dtype="float32") + i).reshape(p.shape)))


@pytest.fixture
def stats_log():
    """The messages module_stats logs (its logger prints through its own handler; this adds a plain one)."""
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    ms.logger.addHandler(handler)
    try:
        yield handler.stream
    finally:
        ms.logger.removeHandler(handler)


def test_module_stats_tables_are_megengines_tabulate_layout(stats_log):
    # MegEngine passes the header as tabulate's first row: no rule under it (megxla drew one)
    seq = M.Sequential(M.Linear(4, 6), M.BatchNorm1d(6), M.ReLU(), M.Linear(6, 2, bias=False))
    _det_init(seq)
    total, _ = ms.module_stats(seq, inputs=[np.ones((3, 4), "float32")])
    assert tuple(total) == (216, 54, 240, 168, 42)
    text = stats_log.getvalue()
    assert """INFO flops stats: 
-----  -----------  ------------  -------------  -----------  -----------  ----------  --------------------
name   class_name   input_shapes  output_shapes  flops        flops_cum    percentage  bar
0      Linear       [(3, 4)]      [(3, 6)]       78.000 OPs   78.000 OPs   32.50%      ############
1      BatchNorm1d  [(3, 6)]      [(3, 6)]       126.000 OPs  204.000 OPs  52.50%      ####################
3      Linear       [(3, 6)]      [(3, 2)]       36.000 OPs   240.000 OPs  15.00%      #####
total                             14             240.000 OPs
-----  -----------  ------------  -------------  -----------  -----------  ----------  --------------------
""" in text
    assert """
-----  -------  ------------  -------  -----  ---------  -----  ---------  ---------  ----------  --------------------
name   dtype    shape         mean     std    param_dim  nbits  size       size_cum   percentage  size_bar
0-w    float32  (6, 4)        0.00309  0.723  24         32     96.000 B   96.000 B   44.44%      ####################
0-b    float32  (6,)          0.0294   0.712  6          32     24.000 B   120.000 B  11.11%      #####
1-w    float32  (1, 6, 1, 1)  -0.0346  0.706  6          32     24.000 B   144.000 B  11.11%      #####
1-b    float32  (1, 6, 1, 1)  -0.048   0.687  6          32     24.000 B   168.000 B  11.11%      #####
3-w    float32  (2, 6)        0.00365  0.725  12         32     48.000 B   216.000 B  22.22%      ##########
total                                         54                216.000 B
-----  -------  ------------  -------  -----  ---------  -----  ---------  ---------  ----------  --------------------
""" in text
    assert """INFO summary
----------------  -----------
item              value
#params           5
total_param_dims  54.000
total_param_size  216.000 B
total_flops       240.000 OPs
total_act_dims    42.000
total_act_size    168.000 B
flops/param_size  1.111
----------------  -----------
""" in text


def test_module_stats_lists_params_read_without_cal_params(stats_log):
    # MegEngine records the weights a hooked module reads also with cal_params=False: "#params 4", raw rows
    seq = M.Sequential(M.Linear(4, 6), M.Linear(6, 2))
    total, details = ms.module_stats(seq, input_shapes=[(3, 4)], cal_params=False, logging_to_stdout=False)
    assert tuple(total) == (0, 0, 116, 96, 24)
    assert [(d["name"], int(d["param_dim"]), int(d["size"]), "size_cum" in d) for d in details.params] == [
        ("0-w", 24, 96, False), ("0-b", 6, 24, False), ("1-w", 12, 48, False), ("1-b", 2, 8, False)]
    assert "#params         4\n" in stats_log.getvalue()


def test_module_stats_without_inputs_logs_an_error_and_returns_none(stats_log):
    # MegEngine: logger.error(..., exc_info=True), returns None (megxla raised ValueError)
    assert ms.module_stats(M.Sequential(M.Linear(2, 2))) is None
    assert stats_log.getvalue() == ("ERROR Inputs or input_shapes is required for running model and calculating "
                                    "stats.\nNoneType: None\n")


def test_module_stats_helpers_are_megengines():
    # MegEngine 1.13 exports these; sum_op_stats of two rows gave (40, rows..., total row) as below
    rows = [{"name": "a", "flops_num": 10, "output_shapes": [(1, 2)]},
            {"name": "b", "flops_num": 30, "output_shapes": [(3,), (2, 5)]}]
    total, rows = ms.sum_op_stats(rows, 8)
    assert total == 40 and [r["bar"] for r in rows[:2]] == ["##", "########"]
    assert rows[-1] == {"name": "total", "flops": "40.000 OPs", "output_shapes": 7}
    assert ms.dict2table([{"a": 1, "b": 2}, {"b": 3}], ["a", "b", "c"]) == [["a", "b", "c"], [1, 2, ""], ["", 3, ""]]
    st = ms.get_param_stats(mge.tensor(np.array([True, False])))
    assert (st["nbits"], int(st["size"]), st["mean"], st["std"]) == (1, 0, "0.5", "0.5")
    assert ms.sum_param_stats([]) == (0, 0, [{"name": "total", "param_dim": 0, "size": "0.000 B"}])
    conv = M.Conv2d(3, 4, 3)
    x = mge.tensor(np.ones((1, 3, 5, 5), "float32"))
    y = conv(x)
    st = ms.get_op_stats(conv, [x], y)
    assert float(st["flops_num"]) == 1008.0 and st["output_shapes"] == [(1, 4, 3, 3)]
    assert ms.get_op_stats(M.ReLU(), [x], [y]) is None
    with pytest.raises(TypeError, match="issubclass"):
        ms.register_hook_module(3)


def test_receptive_field_switch_does_not_crash_get_op_stats():
    # MegEngine bug: with enable_receptive_field() its get_op_stats reads ``tensor.owner`` (AttributeError)
    conv = M.Conv2d(3, 4, 3)
    x = mge.tensor(np.ones((1, 3, 5, 5), "float32"))
    ms.enable_receptive_field()
    try:
        assert float(ms.get_op_stats(conv, [x], [conv(x)])["flops_num"]) == 1008.0
        assert conv._rf == (1, 1) and conv._stride == (1, 1)
    finally:
        ms.disable_receptive_field()


def test_adaptive_pool_of_a_one_pixel_map_counts_one_per_output():
    # MegEngine bug: ZeroDivisionError (H / (H - 1)); its formula's kernel is 1 there
    total, details = ms.module_stats(M.Sequential(M.AdaptiveMaxPool2d(1)), inputs=np.ones((1, 2, 1, 1), "float32"),
                                     logging_to_stdout=False)
    assert float(details.flops[0]["flops_num"]) == 2.0 and total.flops == 2


def test_batch_matmul_flops_use_out_features():
    # MegEngine bug: batch * in * (k + bias) * in; weight (2, 4, 3) @ x (2, 3, 5) is 2 * 4 * 5 * (3 + 1)
    bm = M.BatchMatMulActivation(2, 3, 4, bias=True)
    x = mge.tensor(np.ones((2, 3, 4), "float32"))
    assert ms.flops_batchmatmul(bm, [x], [bm(x)]) == 2 * 4 * 4 * (3 + 1)


def test_module_hook_handles_are_utils_hook_handlers():
    # MegEngine: module.py imports HookHandler from utils.hook (one class); a plain dict cannot be weakly referenced
    from collections import OrderedDict

    from megxla.utils.hook import HookHandler
    h = M.Linear(2, 2).register_forward_hook(lambda *a: None)
    assert isinstance(h, HookHandler)
    d = OrderedDict()
    HookHandler(d, len).remove()
    assert len(d) == 0
    with pytest.raises(TypeError, match="weak reference"):
        HookHandler({}, len)


def test_tuple_function_asserts_with_megengines_texts():
    from megxla.utils.tuple_function import _pair, _pair_nonzero
    with pytest.raises(AssertionError, match=r"^tuple len is not equal to n: \[1, 2, 3\]$"):
        _pair([1, 2, 3])
    with pytest.raises(AssertionError, match=r"^invalid value: \(-1, -1\)$"):
        _pair(-1)
    with pytest.raises(AssertionError, match=r"^invalid value: \(1, 0\)$"):
        _pair_nonzero((1, 0))


HUBCONF = '''import megxla.module as M
dependencies = ["numpy", "no_such_mod_abc", "other_missing_xyz"]
class Net(M.Module):
    def forward(self, x):
        return x
def entry():
    """doc2"""
    return Net()
'''


def test_hub_dependencies_are_checked_by_load_only(tmp_path):
    # MegEngine: list / help / import_module of such a repository work; load finds the entry first, then raises
    # RuntimeError("Missing dependencies: ..."); hubconf's module is named "hubconf.py"
    (tmp_path / "hubconf.py").write_text(HUBCONF)
    repo = str(tmp_path)
    assert hub.list(repo) == ["Net", "entry"]
    assert hub.help(repo, "entry") == "doc2"
    assert hub.import_module(repo).__name__ == "hubconf.py"
    with pytest.raises(RuntimeError, match="^Missing dependencies: no_such_mod_abc, other_missing_xyz$"):
        hub.load(repo, "entry")
    with pytest.raises(RuntimeError, match="cannot find callable"):
        hub.load(repo, "nope")


def test_hub_package_has_const_and_tools_and_protocol_text():
    from megxla.hub.exceptions import InvalidProtocol
    with pytest.raises(InvalidProtocol, match=r"^Invalid protocol, the value should be one of HTTPS, SSH\.$"):
        hub.list("owner/name", protocol="FTP")
    code = "import megxla.hub as h\nprint(h.const.HUBDEPENDENCY, h.tools.check_module_exists('json'))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.stdout.strip() == "dependencies True", out.stderr


def test_download_from_url_copies_paths_and_returns_md5(tmp_path):
    # MegEngine (megfile): a local path is copied, the MD5 hex digest returned; a missing one: FileNotFoundError
    from megxla.utils.http_download import download_from_url
    src = tmp_path / "src.bin"
    src.write_bytes(b"abc")
    assert download_from_url(str(src), str(tmp_path / "a.bin")) == "900150983cd24fb0d6963f7d28e17f72"
    assert download_from_url(src.as_uri(), str(tmp_path / "b.bin")) == hashlib.md5(b"abc").hexdigest()
    assert (tmp_path / "a.bin").read_bytes() == b"abc"
    with pytest.raises(FileNotFoundError):
        download_from_url(str(tmp_path / "none.bin"), str(tmp_path / "c.bin"))


def test_set_log_level_errors_are_loggings():
    from megxla.logger import set_log_level
    with pytest.raises(ValueError, match=r"^Unknown level: 'nope'$"):
        set_log_level("nope")
    with pytest.raises(TypeError, match="^Level not an integer or a valid string: None$"):
        set_log_level(None)
