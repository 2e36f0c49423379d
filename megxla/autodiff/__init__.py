"""``megxla.autodiff``: reverse-mode gradients over the op tape."""
from .grad_manager import GradManager, GradManagerGroup
from .function import Function

__all__ = ["GradManager", "Function", "GradManagerGroup"]
