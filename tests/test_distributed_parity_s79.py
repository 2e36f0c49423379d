"""megengine.distributed as a MegEngine 1.13 user meets it: the helpers against real MegEngine (CPU build), and, where
MegEngine's CPU build cannot run a process group (its ``init_process_group`` raises "cpu is not a valid distributed
device type"), 2-process runs through the launcher against the semantics of MegEngine's own source
(``megengine/distributed/{functional,helper,launcher}.py``)."""
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.distributed as dist
import megxla.functional as F
from megxla.autodiff import GradManager


# ---- one process -------------------------------------------------------------------------------------------------
def test_get_device_count_by_fork_is_megengines_deprecated_alias():
    # MegEngine 1.13: dist.helper.get_device_count_by_fork("cpu") -> 2 on a 2-core machine, ("gpu") -> 0, each
    # with a DeprecationWarning; megxla had no such name (AttributeError)
    from megxla.device import get_device_count
    with pytest.warns(DeprecationWarning, match="use megengine.device.get_device_count instead"):
        n = dist.helper.get_device_count_by_fork("cpu")
    assert n == get_device_count("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert dist.helper.get_device_count_by_fork("gpu") == get_device_count("gpu")


# ---- two processes -----------------------------------------------------------------------------------------------
def _caught(fn):
    try:
        fn()
    except AssertionError as exc:
        return type(exc).__name__
    return None


def _worker():
    r = dist.get_rank()
    FD = F.distributed
    res = {}
    # broadcast / scatter where the root's input needs no gradient but this rank's tensor is attached: MegEngine's
    # non-root input is a fresh dummy, attached only where the root's is, so no backward collective and no
    # gradient here (megxla's rank 1 issued a backward collective the root never joined: PeerFailure)
    for mode in ("broadcast", "scatter"):
        p = mge.Parameter(np.ones((2, 3), "float32"))
        gm = GradManager().attach([p])
        with gm:
            x = p if r == 1 else mge.Tensor(np.ones((2, 3), "float32"))
            y = getattr(FD, mode)(x)
            gm.backward(y.sum())
        res[mode] = (y.numpy().tolist(), None if p.grad is None else p.grad.numpy().tolist())
    # MegEngine asserts divisibility ("can't devided by group size") and gather's axis (< inp.ndim)
    y = mge.Tensor(np.zeros((2, 2, 3), "float32"))
    res["asserts"] = [_caught(lambda: FD.reduce_scatter_sum(y, axis=2)),
                      _caught(lambda: FD.all_to_all(y, split_axis=2)),
                      _caught(lambda: FD.scatter(y, axis=2)),
                      _caught(lambda: FD.gather(y, axis=3))]
    # the all-reduce callback packs a scalar parameter's gradient with the others and hands it back with its own
    # shape (MegEngine's GradManager restores a scalar parameter's gradient to 0-d)
    s, v = mge.Parameter(np.float32(1.0)), mge.Parameter(np.ones(3, "float32"))
    gm = GradManager().attach([s, v], callbacks=[dist.make_allreduce_cb("mean")])
    with gm:
        gm.backward(s * (r + 1.0) + (v * (r + 1.0)).sum())
    res["cb"] = (s.grad.shape, float(s.grad.numpy()), v.grad.numpy().tolist())
    # MegEngine's Group.check asserts each rank (an int in [0, world_size)) and that this process is in the group
    res["groups"] = [_caught(lambda: dist.new_group([1 - r])), _caught(lambda: dist.new_group([0, 1, 2])),
                     _caught(lambda: dist.new_group(["0", "1"]))]
    # MegEngine asserts "init_process_group should be called only once"; megxla left the launcher's group to join
    # one at the new address, and both ranks waited there for MEGXLA_DIST_TIMEOUT (600 s)
    res["init_again"] = _caught(lambda: dist.init_process_group("localhost", 1234, 2, r, r))
    res["still"] = F.distributed.all_reduce_sum(mge.Tensor([1.0 + r])).numpy().tolist()
    return res


def _fails():
    if dist.get_rank() == 1:
        raise ValueError("boom")
    return 0


def test_two_processes():
    results = dist.launcher(_worker, n_gpus=2, device_type="cpu")()
    for r, res in enumerate(results):
        assert res["broadcast"] == ([[1.0] * 3] * 2, None), (r, res["broadcast"])
        assert res["scatter"] == ([[1.0] * 3], None), (r, res["scatter"])
        assert res["asserts"] == ["AssertedOpError"] * 4, (r, res["asserts"])
        assert res["cb"] == ((), 1.5, [1.5] * 3), (r, res["cb"])
        assert res["groups"] == ["GroupRanksError"] * 3, (r, res["groups"])
        assert res["init_again"] == "AlreadyInitializedError" and res["still"] == [3.0], (r, res)


def test_a_failing_rank_is_an_assertion_error_as_megengines():
    # MegEngine's launcher asserts each worker's exit code ("subprocess 1 exit with code 1"): an AssertionError
    with pytest.raises(AssertionError, match="rank 1 failed"):
        dist.launcher(_fails, n_gpus=2, device_type="cpu")()
