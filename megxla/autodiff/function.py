"""``megengine.autodiff.Function``: a block of operations with a user-defined gradient.

``forward`` runs with gradient taping suspended; its outputs then pass through one ``autodiff_function`` op
(identity on the outputs, with the inputs as extra operands) that the GradManager tapes. At ``backward`` the
GradManager calls the Function's ``backward`` for that record instead of a vjp; the user's backward is ordinary
Tensor code, so its ops go through the dispatch point like any others (eager, or recorded by a trace).
"""
from __future__ import annotations

from ..core._dispatch import apply, recorders, OpError
from ..core._tensor import Tensor
from ..core.ops.shape import autodiff_function as _FUNCTION_OP
from . import grad_manager as _gm

__all__ = ["Function"]


class Function:
    """Defines a block of operations with a customised gradient.

    Subclasses implement ``forward(*inputs)`` (Tensors in, a Tensor or a tuple of Tensors out: recorded, several
    outputs are returned as a list, as in MegEngine) and
    ``backward(*output_grads)`` (one gradient per output, None for outputs the loss does not depend on; returns
    one gradient per input, a single Tensor for one input, None to stop propagation; inputs past the end of
    the returned gradients get none). Use each instance once.

    Example:
        >>> import megxla as mge
        >>> import megxla.functional as F
        >>> from megxla.autodiff import Function, GradManager
        >>> class Sigmoid(Function):
        ...     def forward(self, x):
        ...         self.y = 1 / (1 + F.exp(-x))
        ...         return self.y
        ...     def backward(self, dy):
        ...         return dy * self.y * (1 - self.y)
        >>> x = mge.Parameter([0.0])
        >>> gm = GradManager().attach(x)
        >>> with gm:
        ...     gm.backward(Sigmoid()(x))
        >>> x.grad.numpy()
        array([0.25], dtype=float32)
    """

    def forward(self, *args):
        """Compute the outputs from the input Tensors: override in subclasses."""
        # (MegEngine's NotImplementedError: code that probes for an abstract Function catches it; a TypeError before)
        raise NotImplementedError(f"{type(self).__name__} must override Function.forward")

    def backward(self, *output_grads):
        """Gradients of the inputs from those of the outputs: override in subclasses."""
        raise NotImplementedError(f"{type(self).__name__} must override Function.backward")

    def __call__(self, *args):
        for a in args:
            if not isinstance(a, Tensor):
                raise TypeError(f"op Function expect type Tensor as inputs, got {type(a)}")
        if not any(r._tracks(a) for r in recorders for a in args):
            return self.forward(*args)
        _gm._SUSPENDED[0] += 1  # the forward's own ops are not taped: backward() stands for them
        try:
            out = self.forward(*args)
        finally:
            _gm._SUSPENDED[0] -= 1
        single = isinstance(out, Tensor)
        outs = (out,) if single else tuple(out) if isinstance(out, (list, tuple)) else ()
        if not outs or not all(isinstance(o, Tensor) for o in outs):
            raise TypeError(f"{type(self).__name__}.forward must return a Tensor or a tuple of Tensors")
        _gm._PENDING[0] = self
        try:
            linked = apply(_FUNCTION_OP.bind(n_in=len(args)), *args, *outs)
        finally:
            _gm._PENDING[0] = None
        # (several outputs come back as a list, as MegEngine's set_grad returns them -- whether forward returned a
        # tuple or a list; only a call no GradManager records returns forward's own result)
        return linked[0] if single else list(linked)

    def _input_grads(self, output_grads, inputs):
        """Call ``backward`` and normalise its result to one gradient (or None) per input."""
        grads = self.backward(*output_grads)
        if isinstance(grads, Tensor) or grads is None:
            grads = (grads,)
        # MegEngine pairs the gradients with the inputs in order: missing trailing ones are None (no gradient),
        # extra ones are dropped
        grads = tuple(grads)[:len(inputs)]
        grads += (None,) * (len(inputs) - len(grads))
        for g, x in zip(grads, inputs):
            if g is not None and (not isinstance(g, Tensor) or tuple(g.shape) != tuple(x.shape)):
                shape = tuple(g.shape) if isinstance(g, Tensor) else type(g).__name__
                raise OpError(f"{type(self).__name__}.backward: gradient {shape} does not match its input "
                              f"{tuple(x.shape)}")
        return grads

    def __getstate__(self):
        return self.__dict__

    def __setstate__(self, state):
        self.__dict__.update(state)
