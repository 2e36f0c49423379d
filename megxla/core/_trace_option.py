"""``megengine.core._trace_option``: whether ``Tensor.shape`` is a tensor (symbolic) or a tuple.

MegEngine can make ``x.shape`` return a Tensor inside traced code (``MEGENGINE_USE_SYMBOLIC_SHAPE=1``), so one
graph serves every input shape. megxla's shapes are always static Python tuples: XLA compiles one executable
per input shape (``jit.trace`` keeps a cache of them), so code never needs a shape it cannot read. MegEngine
code and tests branch on :func:`use_symbolic_shape`; here it is always False, and asking for symbolic shapes
is refused with an error saying why, instead of being silently ignored.

Example:
    >>> use_symbolic_shape()
    False
    >>> set_symbolic_shape(False)
    False
"""
from __future__ import annotations

__all__ = ["use_symbolic_shape", "set_symbolic_shape", "use_xla_backend", "set_use_xla_backend"]


def use_symbolic_shape() -> bool:
    """Whether ``Tensor.shape`` returns a tensor instead of a tuple: always False in megxla (static shapes)."""
    return False


def set_symbolic_shape(option: bool) -> bool:
    """Set whether ``Tensor.shape`` returns a tensor; only False (megxla's static shapes) is accepted.

    Args:
        option: the wanted setting.

    Returns:
        the previous setting (False), as MegEngine returns it so callers can restore it.

    Raises:
        ValueError: ``option`` is true: megxla compiles one executable per input shape instead.
    """
    if option:
        raise ValueError("set_symbolic_shape(True): megxla has no symbolic shapes; Tensor.shape is always a tuple "
                         "and jit.trace compiles one executable per input shape")
    return False


def use_xla_backend() -> bool:
    """Whether computation runs on XLA: always True in megxla (MegEngine turns it on inside ``xla_trace``).

    Example:
        >>> use_xla_backend()
        True
    """
    return True


def set_use_xla_backend(option: bool) -> bool:
    """MegEngine's switch into its XLA backend; megxla always runs on XLA, so only True is accepted.

    Returns:
        the previous setting (True).

    Raises:
        ValueError: ``option`` is false (there is no other backend).
    """
    if not option:
        raise ValueError("set_use_xla_backend(False): megxla always computes with XLA; there is no other backend")
    return True
