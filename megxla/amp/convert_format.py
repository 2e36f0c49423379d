"""``convert_module_format`` / ``convert_tensor_format``: NCHW -> NHWC conversion in MegEngine.

megxla has no memory formats: every tensor is laid out as XLA chooses and ``Tensor.format`` is always
``"default"`` (XLA already picks the fastest layout of convolutions for the GPU). These functions therefore
behave like MegEngine's with format conversion turned off: they validate their argument and return it
unchanged (or, for ``inplace=False`` modules, an unchanged deep copy).
"""
from __future__ import annotations

import copy

from ..core._tensor import Tensor

__all__ = ["convert_module_format", "convert_tensor_format"]


def convert_tensor_format(x: Tensor, inplace: bool = True):
    r"""Convert a tensor to the NHWC memory format -- a no-op in megxla, which has no memory formats.

    Args:
        x: the tensor.
        inplace: accepted for MegEngine compatibility (nothing is modified either way).

    Returns:
        ``x`` itself.

    Example:
        >>> import megxla as mge
        >>> from megxla.amp import convert_tensor_format
        >>> x = mge.Tensor([[[[1.0]]]])
        >>> convert_tensor_format(x) is x
        True
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"convert_tensor_format: expected a Tensor, got {type(x).__name__}")
    if not inplace and x.ndim in (4, 5):
        # MegEngine returns a new Tensor built from x's values (Tensor(x.numpy(), format="nhwc")): not x, a plain
        # Tensor for a Parameter, outside the gradient graph; returning x let later writes to either show in both
        return Tensor(x.detach())
    return x


def convert_module_format(module, inplace: bool = True):
    r"""Convert a module's parameters and buffers to NHWC -- a no-op in megxla, which has no memory formats.

    Args:
        module: a :class:`~.module.Module`.
        inplace: if False, return a deep copy (as MegEngine does) instead of ``module`` itself.

    Returns:
        the module (or its copy), numerically unchanged.

    Example:
        >>> import megxla.module as M
        >>> from megxla.amp import convert_module_format
        >>> m = M.Conv2d(3, 4, 3)
        >>> convert_module_format(m) is m
        True
    """
    from ..module import Module

    if not isinstance(module, Module):
        raise TypeError(f"convert_module_format: expected a Module, got {type(module).__name__}")
    if not inplace:
        module = copy.deepcopy(module)
    for _, t in module.named_tensors():
        convert_tensor_format(t, inplace=True)
    return module
