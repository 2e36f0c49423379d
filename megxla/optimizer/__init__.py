"""``megxla.optimizer``: MegEngine's optimizers, gradient clipping and learning-rate schedulers.

Example:
    >>> import megxla as mge, megxla.optimizer as optim
    >>> from megxla.autodiff import GradManager
    >>> w = mge.Parameter([1.0, 2.0])
    >>> gm, opt = GradManager().attach([w]), optim.SGD([w], lr=0.1)
    >>> with gm:
    ...     gm.backward((w * w).sum())
    >>> opt.step().clear_grad()
    >>> w.numpy()
    array([0.8, 1.6], dtype=float32)
"""
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam
from .adamw import AdamW
from .clip_grad import clip_grad_norm, clip_grad_value
from .lamb import LAMB, LAMBFp16
from .lr_scheduler import LRScheduler, MultiStepLR
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Adadelta", "Adagrad", "Adam", "AdamW", "LAMB", "LAMBFp16", "LRScheduler", "MultiStepLR", "Optimizer",
           "SGD", "clip_grad_norm", "clip_grad_value"]


def __getattr__(name):
    # MegEngine's ``optimizer.multi_step_lr`` submodule is an attribute of the package (it imports it)
    if name == "multi_step_lr":
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
