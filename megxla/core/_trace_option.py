"""``megengine.core._trace_option``: whether ``Tensor.shape`` is a tensor (symbolic) or a tuple.

MegEngine can make ``x.shape`` return a Tensor inside traced code (``MEGENGINE_USE_SYMBOLIC_SHAPE=1``), so one
graph serves every input shape. megxla's shapes are always static Python tuples: XLA compiles one executable
per input shape (``jit.trace`` keeps a cache of them), so code never needs a shape it cannot read. MegEngine
code and tests branch on :func:`use_symbolic_shape`; here it is always False, and asking for symbolic shapes
changes nothing (the setting is only handed back to the caller that restores it).

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


_requested = [False]  # what set_symbolic_shape was last given (handed back, so save/restore round-trips)


def set_symbolic_shape(option: bool) -> bool:
    """Ask for symbolic shapes; megxla's shapes stay static tuples whatever is asked.

    MegEngine's symbolic shapes change only traced code (one graph for every input shape); eager code computes
    the same either way. megxla compiles one executable per input shape instead, so the option changes nothing:
    MegEngine code that turns it on around eager or traced code runs unchanged, and :func:`use_symbolic_shape`
    stays False.

    Args:
        option: the wanted setting.

    Returns:
        the setting asked for before this call, so that callers can restore it.
    """
    previous, _requested[0] = _requested[0], bool(option)
    return previous


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
