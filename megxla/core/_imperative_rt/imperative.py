"""``megengine.core._imperative_rt.imperative``: :func:`make_backward_graph`, what an op descriptor's backward
needs, as megxla's tape computes it (MegEngine's path; core never imports this module)."""
from __future__ import annotations

import numpy as np

from ..autodiff.grad import Grad
from ..ops.builtin import OpDef
from .._tensor import Tensor
from .core2 import apply

__all__ = ["make_backward_graph"]


def make_backward_graph(op: OpDef, input_attrs, input_requires_grad, output_has_grad):
    """The backward of ``op`` applied to inputs described by ``input_attrs``.

    megxla's tape records an op with its inputs and differentiates it at them (``jax.vjp`` of the op, see
    docs/design.md), so its backward keeps every input and the output gradients, never the outputs: MegEngine's
    hand-made backward graphs keep what their formulas read instead (ReLU's keeps its output,
    ``[False, True, True]``, where megxla's is ``[True, False, True]``).

    Args:
        op: a builtin op descriptor (``Elemwise(mode="relu")``...).
        input_attrs: one :class:`~megxla.core._imperative_rt.common.TensorAttr` per input (``shape`` ``()``
            while unknown; ``dtype`` float32 when None).
        input_requires_grad: one bool per input.
        output_has_grad: one bool per output.

    Returns:
        ``(description, save_for_backward_mask, input_has_grad)``: a text naming the backward, one bool per
        input, output and output gradient (in that order: whether the backward keeps it), and one bool per input
        (whether a gradient reaches it).

    Example:
        >>> from megxla.core._imperative_rt.common import TensorAttr
        >>> from megxla.core.ops.builtin import Elemwise
        >>> _, mask, has_grad = make_backward_graph(Elemwise(mode="mul"), [TensorAttr(), TensorAttr()],
        ...                                         [True, False], [True])
        >>> mask, has_grad
        ([True, True, False, True], [True, False])
    """
    if not isinstance(op, OpDef):
        raise TypeError(f"make_backward_graph: expected a builtin op descriptor, got {op!r}")
    if len(input_requires_grad) != len(input_attrs):
        raise ValueError(f"make_backward_graph: {len(input_attrs)} inputs but {len(input_requires_grad)} "
                         f"input_requires_grad flags")
    inputs = [Tensor(np.zeros(tuple(a.shape), np.dtype(a.dtype or "float32")), device=a.comp_node)
              for a in input_attrs]
    reached = [False] * len(inputs)
    with Grad() as grad:
        for i, (x, req) in enumerate(zip(inputs, input_requires_grad)):
            if req and x.dtype.kind == "f":
                grad.wrt(x, callback=lambda g, i=i: reached.__setitem__(i, True))
        outputs = apply(op, *inputs)
        if len(output_has_grad) != len(outputs):
            raise ValueError(f"make_backward_graph: {op!r} has {len(outputs)} outputs but {len(output_has_grad)} "
                             f"output_has_grad flags")
        ys = [y for y, has in zip(outputs, output_has_grad) if has and y.dtype.kind == "f"]
        grad(ys, [Tensor(np.ones(y.shape, y.dtype), device=y.device) for y in ys])
    mask = [True] * len(inputs) + [False] * len(outputs) + [bool(h) for h in output_has_grad]
    text = (f"vjp[{op!r}]: (inputs {list(range(len(inputs)))}, output gradients) -> gradients of inputs "
            f"{[i for i, r in enumerate(reached) if r]}")
    return text, mask, reached
