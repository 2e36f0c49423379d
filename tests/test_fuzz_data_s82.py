"""Session 82: differential fuzzers (data seeds 25 / 26, bad calls seed 15, trace seeds 7 / 8) and ``trace.dump``'s
DumpInfo against MegEngine 1.13 (expected values are what MegEngine 1.13.0 printed)."""
import io
import re

import numpy as np

import megxla as mge
import megxla.module as M
from megxla.jit import trace


class _Scaled(M.Module):
    def __init__(self):
        super().__init__()
        self.w = mge.Parameter(np.full((1,), 2.0, "float32"))

    def forward(self, x):
        return x * self.w + 3


def test_dump_info_repr_is_megengines_namedtuple():
    # MegEngine 1.13 printed, for this step: CompGraphDumpResult(nr_opr=4, tot_bytes=976, tensor_value_bytes=8,
    # content_hash=0, inputs=['arg_0'], outputs=['FUSE_MUL_ADD3(w,arg_0,const<3>[4])[14]'], params=[])
    net = _Scaled()
    net.eval()
    f = trace(lambda x: net(x), symbolic=True, capture_as_const=True)
    np.testing.assert_array_equal(f(mge.tensor(np.arange(3, dtype="float32"))).numpy(), [3.0, 5.0, 7.0])
    info = f.dump(io.BytesIO())
    text = repr(info)
    assert text.startswith("CompGraphDumpResult(nr_opr=")
    assert re.findall(r"(\w+)=", text) == ["nr_opr", "tot_bytes", "tensor_value_bytes", "content_hash", "inputs",
                                           "outputs", "params"]
    assert "tensor_value_bytes=8," in text and "inputs=['arg_0']" in text
    assert info.params == [] and text.endswith("params=[])")  # (the captured w is a constant, not a shared param)
