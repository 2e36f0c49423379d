"""``megengine.tensor``: the module defining ``Tensor`` and ``Parameter``.

As in MegEngine, the package attribute ``megxla.tensor`` is the Tensor *class*: ``megxla/__init__.py`` imports
this module first and then rebinds the attribute, so ``import megxla.tensor as tensor; tensor([1, 2])`` builds a
Tensor (``import a.b as c`` binds ``getattr(a, "b")``), while ``from megxla.tensor import Tensor, Parameter``
reaches this module through ``sys.modules``.

Example:
    >>> import megxla.tensor as tensor
    >>> tensor([1, 2]).numpy()
    array([1, 2], dtype=int32)
"""
from .core._tensor import Tensor, Parameter
# names MegEngine's megengine.tensor module also provides (user code imports them from here)
from .core.dtypes import CompNode, get_default_device  # noqa: F401
from .core._imperative_rt.core2 import apply  # noqa: F401
from .core._trace_option import use_symbolic_shape  # noqa: F401

tensor = Tensor

__all__ = ["Tensor", "Parameter", "tensor"]
