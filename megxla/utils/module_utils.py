"""``megengine.utils.module_utils``: get/set nested submodules by dotted key, switch train/eval temporarily."""
from __future__ import annotations

import contextlib

from ..core._tensor import Tensor
from ..module import Sequential
from ..module.module import Module, _access_structure

__all__ = ["get_expand_structure", "set_expand_structure", "set_module_mode_safe"]


def get_expand_structure(obj: Module, key: str):
    """The attribute of ``obj`` at a dotted key of :meth:`~.Module.named_children` (list and dict members too).

    Args:
        obj: the root module.
        key: a key such as ``"features.0"`` or ``"heads.cls"``.

    Returns:
        the object reached.

    Example:
        >>> net = M.Sequential(M.Linear(2, 3), M.ReLU())
        >>> type(get_expand_structure(net, "0")).__name__
        'Linear'
    """
    return _access_structure(obj, key)


def set_expand_structure(obj: Module, key: str, value):
    """Replace the attribute of ``obj`` at a dotted key of :meth:`~.Module.named_children` with ``value``.

    Args:
        obj: the root module.
        key: a key such as ``"features.0"``.
        value: the new member.

    Example:
        >>> net = M.Sequential(M.Linear(2, 3), M.ReLU())
        >>> set_expand_structure(net, "1", M.Sigmoid())
        >>> type(net[1]).__name__
        'Sigmoid'
    """
    def put(parent, k, cur):
        if isinstance(parent, (Tensor, Module)):
            if isinstance(parent, Sequential):  # (its members are items: setattr would not replace one)
                parent[int(k)] = value
            else:
                setattr(parent, k, value)
        else:
            parent[k] = value

    _access_structure(obj, key, callback=put)


@contextlib.contextmanager
def set_module_mode_safe(module: Module, training: bool = False):
    """Put every submodule of ``module`` in train (``training=True``) or eval mode for the ``with`` block and
    restore each one's own mode afterwards (also when the block raises).

    Args:
        module: the module.
        training: the temporary mode.

    Example:
        >>> net = M.Sequential(M.BatchNorm1d(3)); net.train()
        >>> with set_module_mode_safe(net, training=False):
        ...     net[0].training
        False
        >>> net[0].training
        True
    """
    saved = {m: m.training for m in module.modules()}
    for m in saved:
        m.train(training, recursive=False)
    try:
        yield module
    finally:
        for m, mode in saved.items():
            m.training = mode
