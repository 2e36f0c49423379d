"""Session 80: ``Module`` base-class API parity with MegEngine 1.13 (differential probes).

Expected messages, exception types and warnings are what MegEngine 1.13.0 printed for the same programs.
"""
import warnings

import numpy as np
import pytest

import megxla as mge
import megxla.module as M


class _Leaf(M.Module):
    def __init__(self):
        super().__init__()
        self.p = mge.Parameter(np.ones((1, 2), "float32"))
        self.bn = M.BatchNorm2d(2)

    def forward(self, x):
        return x


@pytest.mark.parametrize("name", ["", "  ", 3])
def test_bad_module_name_raises_megengines_assertion(name):
    # MegEngine: AssertionError "Module's name must be a non-empty string" (megxla raised a ValueError of its own
    # words; it stays a ValueError too)
    with pytest.raises(AssertionError, match="^Module's name must be a non-empty string$"):
        M.Linear(2, 2, name=name)
    with pytest.raises(ValueError):
        M.ReLU(name=name)


def test_load_state_dict_mismatch_messages_are_megengines():
    net = _Leaf()
    sd = net.state_dict()
    # MegEngine: ValueError "param `p` shape mismatch, should be (1, 2), get (2, 1)"
    with pytest.raises(ValueError) as exc:
        net.load_state_dict(dict(sd, p=np.ones((2, 1), "float32")))
    assert str(exc.value) == "param `p` shape mismatch, should be (1, 2), get (2, 1)"
    # MegEngine: ValueError "param `bn.weight` size mismatch, should be 2, get 3" (normalisation layers take any
    # shape of as many elements); megxla keeps "shape mismatch" there, which tests match
    with pytest.raises(ValueError, match=r"^param `bn.weight` shape mismatch, should be \(1, 2, 1, 1\), get \(3,\)$"):
        net.load_state_dict(dict(sd, **{"bn.weight": np.ones((3,), "float32")}))
    with pytest.raises(ValueError) as exc:
        net._load_state_dict_with_closure(lambda k, v: np.zeros(5, "float32") if k == "p" else None)
    assert str(exc.value) == "param `p` shape mismatch, should be (1, 2), get (5,)"
    # the same number of elements in another shape still loads into a normalisation layer (as in MegEngine)
    net.load_state_dict(dict(sd, **{"bn.weight": np.full((2, 1), 3, "float32")}))
    assert net.bn.weight.shape == (1, 2, 1, 1) and net.bn.weight.numpy().ravel().tolist() == [3.0, 3.0]


def test_zero_grad_warns_megengines_deprecation():
    # MegEngine: Module.zero_grad is @deprecated(version="1.0"): a DeprecationWarning "Call to deprecated method
    # zero_grad. -- Deprecated since version 1.0.", and the gradients zeroed
    lin = M.Linear(2, 2)
    lin.weight.grad = mge.Tensor(np.ones((2, 2), "float32"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert lin.zero_grad() is None
    assert [(w.category, str(w.message)) for w in caught if "zero_grad" in str(w.message)] == [
        (DeprecationWarning, "Call to deprecated method zero_grad. -- Deprecated since version 1.0.")]
    assert caught[0].filename == __file__  # (attributed to the caller)
    assert float(lin.weight.grad.sum()) == 0.0 and lin.bias.grad is None
