"""``megengine.functional.debug_param`` (thin: MegEngine's module path): the kernel execution strategy of
convolutions and matmuls, as views of :data:`megxla.config.benchmark_kernel` (``PROFILE``) and
:data:`megxla.config.deterministic_kernel` (``REPRODUCIBLE``). XLA picks its kernels when it compiles; the
settings are kept and read back as MegEngine's.

Example:
    >>> set_execution_strategy("HEURISTIC_REPRODUCIBLE")
    >>> get_execution_strategy() == Strategy.HEURISTIC | Strategy.REPRODUCIBLE
    True
    >>> set_execution_strategy("HEURISTIC")
"""
import enum

from .. import config as _config

__all__ = ["Strategy", "get_execution_strategy", "set_execution_strategy"]


class Strategy(enum.IntFlag):
    """MegEngine's algorithm-selection flags (combinable with ``|``): ``HEURISTIC`` or ``PROFILE`` picks the
    kernels, ``REPRODUCIBLE`` asks for deterministic ones (``OPTIMIZED``: MegEngine's, kept for its code).

    Example:
        >>> from megxla.functional.debug_param import Strategy, get_execution_strategy, set_execution_strategy
        >>> set_execution_strategy(Strategy.PROFILE | Strategy.REPRODUCIBLE)
        >>> s = get_execution_strategy(); Strategy.REPRODUCIBLE in s, Strategy.HEURISTIC in s
        (True, False)
        >>> set_execution_strategy("HEURISTIC")
    """
    HEURISTIC = 1
    PROFILE = 2
    REPRODUCIBLE = 4
    OPTIMIZED = 8


_valid_string_option = {"REPRODUCIBLE": Strategy.REPRODUCIBLE, "HEURISTIC": Strategy.HEURISTIC,
                        "PROFILE": Strategy.PROFILE}


def get_execution_strategy() -> Strategy:
    """The execution strategy: ``PROFILE`` or ``HEURISTIC``, with ``REPRODUCIBLE`` when deterministic kernels
    are asked for.

    Example:
        >>> get_execution_strategy()
        <Strategy.HEURISTIC: 1>
    """
    s = Strategy.PROFILE if _config.benchmark_kernel else Strategy.HEURISTIC
    if _config.deterministic_kernel:
        s |= Strategy.REPRODUCIBLE
    return s


def set_execution_strategy(option):
    """Set the execution strategy from a :class:`Strategy` or a string of ``HEURISTIC`` / ``PROFILE`` /
    ``REPRODUCIBLE`` joined by ``_`` (``"PROFILE_REPRODUCIBLE"``).

    Args:
        option: the strategy.

    Example:
        >>> set_execution_strategy(Strategy.PROFILE); get_execution_strategy()
        <Strategy.PROFILE: 2>
        >>> set_execution_strategy("HEURISTIC")
    """
    if isinstance(option, Strategy):
        flags = option
    elif isinstance(option, str):
        flags = Strategy(0)
        for opt in option.split("_"):
            if opt not in _valid_string_option:
                raise ValueError(f"set_execution_strategy: valid options are {sorted(_valid_string_option)} or "
                                 f"several joined by '_', got {option!r}")
            flags |= _valid_string_option[opt]
    else:
        raise TypeError(f"set_execution_strategy: expected a Strategy or a str, got {type(option).__name__}")
    _config.benchmark_kernel = bool(flags & Strategy.PROFILE)
    _config.deterministic_kernel = bool(flags & Strategy.REPRODUCIBLE)
