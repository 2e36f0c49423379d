"""``megxla.autodiff``: reverse-mode gradients over the op tape."""
from .grad_manager import GradManager

__all__ = ["GradManager"]
