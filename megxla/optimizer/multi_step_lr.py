"""``megengine.optimizer.multi_step_lr``: MegEngine's module path for :class:`MultiStepLR`."""
from .lr_scheduler import MultiStepLR

__all__ = ["MultiStepLR"]
