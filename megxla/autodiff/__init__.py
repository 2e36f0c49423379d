"""``megxla.autodiff``: reverse-mode gradients over the op tape."""
from .grad_manager import GradManager, GradManagerGroup
from .function import Function
from ..core.tensor import utils as _tensor_utils

# core.tensor.utils.subgraph_fn(custom_grad=True) builds on Function (core imports nothing above itself)
_tensor_utils.CUSTOM_GRAD_FUNCTION[0] = Function

__all__ = ["GradManager", "Function", "GradManagerGroup"]
