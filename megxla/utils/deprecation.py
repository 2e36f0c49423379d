"""``megengine.utils.deprecation`` (thin: MegEngine's module path): wrappers that warn when a deprecated
function or a deprecated keyword default is used.

Example:
    >>> import warnings
    >>> old_abs = deprecated_func("1.0", "megxla.functional", "abs", False)
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     _ = old_abs(mge.Tensor([-1.0]))
    >>> w[0].category.__name__
    'DeprecationWarning'
"""
import functools
import importlib
import warnings

__all__ = ["deprecated_func", "deprecated_kwargs_default"]


def deprecated_func(version, origin, name, tbd):
    """``origin.name``, wrapped to warn (``DeprecationWarning``) at each call that it moved there.

    Args:
        version: the version that deprecated the old name.
        origin: the module path where the function lives now.
        name: the function's name there.
        tbd: "to be discussed": when true, no warning.

    Returns:
        the wrapped function.

    Example:
        >>> f = deprecated_func("1.0", "megxla.functional", "abs", True)
        >>> float(f(mge.Tensor(-2.0)))
        2.0
    """
    func = getattr(importlib.import_module(origin), name)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not tbd:
            warnings.warn(f"Call to deprecated function {name}. (use {origin}.{name} instead) -- Deprecated since "
                          f"version {version}.", category=DeprecationWarning, stacklevel=2)
        return func(*args, **kwargs)

    return wrapper


def deprecated_kwargs_default(version, kwargs_name, kwargs_pos):
    """Decorator: warn (``PendingDeprecationWarning``) when the keyword argument ``kwargs_name`` (positional
    index ``kwargs_pos`` counting from 1) is left to its default, whose meaning changes in ``version``.

    Args:
        version: the version where the default changes.
        kwargs_name: the argument's name.
        kwargs_pos: how many positional arguments pass it positionally.

    Returns:
        the decorator.

    Example:
        >>> @deprecated_kwargs_default("2.0", "axis", 2)
        ... def f(x, axis=None):
        ...     return axis
        >>> f(1, axis=0)
        0
    """
    def deprecated(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if len(args) < kwargs_pos and kwargs_name not in kwargs:
                warnings.warn(f"the default behavior for {kwargs_name} will be changed in version {version}, "
                              f"please use it in keyword parameter way", category=PendingDeprecationWarning,
                              stacklevel=2)
            return func(*args, **kwargs)

        return wrapper

    return deprecated
