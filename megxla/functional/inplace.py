"""``megengine.functional.inplace``: in-place updates of a Tensor variable (YOLOX's EMA imports it).

The update is ordinary elementwise ops through the dispatch point, then ``dest._reset``: the Tensor object is
rebound to the new value (a new value id), so eager code, the autodiff tape and jit traces all see it.
"""
from ..core._elemwise_front import BINARY as _B

__all__ = ["_inplace_add_"]


def _inplace_add_(dest, delta, alpha, beta):
    """``dest = alpha * dest + beta * delta``, in place; returns ``dest`` (MegEngine's ``InplaceAdd``).

    Args:
        dest: the Tensor updated in place.
        delta: the Tensor added.
        alpha: scale of ``dest`` (a Tensor or a number).
        beta: scale of ``delta`` (a Tensor or a number).

    Returns:
        ``dest``, now holding the new value.

    Example:
        >>> import megxla as mge
        >>> from megxla.functional.inplace import _inplace_add_
        >>> d = mge.Tensor([1.0, 2.0])
        >>> _ = _inplace_add_(d, mge.Tensor([10.0, 10.0]), alpha=mge.Tensor(0.5), beta=mge.Tensor(1.0))
        >>> d.numpy()
        array([10.5, 11. ], dtype=float32)
    """
    mul, add = _B["mul"], _B["add"]
    new = add(mul(dest, alpha), mul(delta, beta))
    if new.shape != dest.shape:
        from ..core._dispatch import OpError
        raise OpError(f"_inplace_add_: delta of shape {tuple(delta.shape)} would change dest's shape "
                      f"{tuple(dest.shape)} to {tuple(new.shape)}")
    return dest._reset(new.astype(dest.dtype) if new.dtype != dest.dtype else new)
