"""``megengine.functional.tensor_cache`` (thin: MegEngine's module path): small constant scalars. Each call
makes a fresh 0-d Tensor (a megxla Tensor is cheap to make and, unlike a cached one, cannot be changed in
place by one user under another).

Example:
    >>> float(get_scalar_one()), get_scalar_two("int32").dtype
    (1.0, dtype('int32'))
"""
from ..core._tensor import Tensor

__all__ = ["get_scalar_zero", "get_scalar_zero_point_five", "get_scalar_one", "get_scalar_two"]


def _scalar(value, dtype, device):
    return Tensor(float(value) if dtype is None else value, dtype=dtype, device=device)


def get_scalar_zero(dtype=None, device=None):
    """A 0-d tensor holding 0 (float32 unless ``dtype``).

    Example:
        >>> float(get_scalar_zero())
        0.0
    """
    return _scalar(0, dtype, device)


def get_scalar_zero_point_five(dtype=None, device=None):
    """A 0-d tensor holding 0.5.

    Example:
        >>> float(get_scalar_zero_point_five())
        0.5
    """
    return _scalar(0.5, dtype, device)


def get_scalar_one(dtype=None, device=None):
    """A 0-d tensor holding 1.

    Example:
        >>> float(get_scalar_one())
        1.0
    """
    return _scalar(1, dtype, device)


def get_scalar_two(dtype=None, device=None):
    """A 0-d tensor holding 2.

    Example:
        >>> float(get_scalar_two())
        2.0
    """
    return _scalar(2, dtype, device)
