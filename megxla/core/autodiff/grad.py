"""``Grad``: MegEngine's low-level gradient recorder, on megxla's one tape (:class:`megxla.autodiff.GradManager`).

MegEngine code (and MegEngine's own tests) write::

    with Grad() as grad:
        grad.wrt(x, callback=lambda dx: ...)   # dx: the gradient of x, handed to the callback
        y = f(x)
        grad(y, dy)                            # back-propagates dy; x.grad is not touched

Unlike ``GradManager`` it accumulates nothing into ``.grad``: each ``wrt`` tensor's gradient goes to its
callback only. Nested ``Grad`` blocks take higher-order gradients as nested GradManagers do (an outer one
records the inner one's backward).
"""
from __future__ import annotations

import itertools

from ...autodiff.function import Function  # noqa: F401  (MegEngine exports it here too)
from ...autodiff.grad_manager import GradManager

__all__ = ["Grad", "Function"]

_names = itertools.count()


class _CallbackTape(GradManager):
    """A GradManager whose gradients go to per-tensor callbacks instead of ``.grad``."""

    def __init__(self):
        super().__init__()
        self._callbacks: dict = {}  # id(tensor) -> [callback(grad)]

    def _deliver_all(self, given):
        for t, g in given:
            for cb in self._callbacks.get(id(t), ()):
                cb(g)


class Grad:
    """Records the ops run inside ``with Grad() as grad:`` and back-propagates through them on ``grad(ys, dys)``.

    Args:
        name: a name for this recorder (``"grad_<n>"`` by default).

    Example:
        >>> from megxla.core.autodiff.grad import Grad
        >>> x = mge.Tensor([1., 2., 3.])
        >>> seen = []
        >>> with Grad() as grad:
        ...     _ = grad.wrt(x, callback=seen.append)
        ...     y = x * x
        ...     grad(y, mge.Tensor([1., 1., 1.]))
        >>> seen[0].numpy()
        array([2., 4., 6.], dtype=float32)
    """

    def __init__(self, name=None):
        self.name = f"grad_{next(_names)}" if name is None else name
        self._tape = _CallbackTape()

    @property
    def _name(self):
        return self.name

    def _is_attached_to(self, tensor):
        return id(tensor) in self._tape._callbacks

    def wrt(self, *tensors, callback=None):
        """Differentiate with respect to ``tensors``; ``callback(grad)`` receives each one's gradient.

        Args:
            tensors: the tensors (float) to differentiate with respect to; ops recorded before this call do
                not count for them.
            callback: called with the gradient of each tensor (nothing when it has none).

        Returns:
            self.
        """
        self._tape.attach(list(tensors))
        for t in tensors:
            cbs = self._tape._callbacks.setdefault(id(t), [])
            if callback is not None:
                cbs.append(callback)
        return self

    def __call__(self, ys, dys):
        """Back-propagate ``dys`` (tensors shaped like ``ys``) from ``ys`` to the ``wrt`` tensors.

        Args:
            ys: a tensor or a sequence of them.
            dys: their gradients, one per ``ys``.
        """
        ys = list(ys) if isinstance(ys, (list, tuple)) else [ys]
        dys = list(dys) if isinstance(dys, (list, tuple)) else [dys]
        if len(ys) != len(dys):
            raise ValueError(f"Grad: {len(ys)} outputs but {len(dys)} output gradients")
        tape = self._tape
        if not tape._recording:
            raise RuntimeError(f"Grad {self.name!r}: not recording (call it inside its `with` block)")
        try:
            if ys or tape._sent or tape._received:
                tape._backward(ys, dys)
        finally:
            tape.release()

    def __enter__(self):
        self._tape.record()
        return self

    def __exit__(self, *exc):
        self._tape.release()
        self._tape._callbacks.clear()

    def suppress(self):
        """(MegEngine's grouping hook; megxla's visibility by order needs no suppression.)"""

    def resume(self):
        """(MegEngine's grouping hook.)"""
