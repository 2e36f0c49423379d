"""NumPy names that MegEngine 1.13's users write and NumPy >= 1.24 / 2.0 removed (``np.float``, ``np.int``,
``np.object``, ``np.float_``, ``np.NaN``…). MegEngine pins NumPy < 1.24, so its users' code still says them;
megxla needs a newer NumPy. :func:`restore` (run by ``python -m megxla.run`` and ``import megxla.as_megengine``)
answers them again with what NumPy 1.23 gave, through NumPy's module ``__getattr__`` (no name is added to
``numpy``'s namespace, a program that never uses them sees nothing), warning once per process at the first
use. ``MEGXLA_NUMPY_ALIASES=0`` (or ``python -m megxla.run --no-numpy-aliases``) turns it off.

Example:
    >>> import numpy as np, warnings
    >>> restore()
    True
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     np.float is float, np.int is int, np.dtype(np.object).kind, np.AxisError is np.exceptions.AxisError
    (True, True, 'O', True)
    >>> remove()
"""
from __future__ import annotations

import os
import warnings

import numpy as np

__all__ = ["restore", "remove", "is_restored", "ENV"]

ENV = "MEGXLA_NUMPY_ALIASES"

# name -> NumPy 1.23's value. First the builtin aliases NumPy 1.24 removed, then NumPy 2.0's removals (names of
# NumPy 2.x still present -- ``in1d``, ``trapz`` before 2.4 -- are NumPy's own: only a missing name reaches here).
_ALIASES = {
    "float": float, "int": int, "bool": bool, "object": object, "complex": complex, "str": str, "unicode": str,
    "float_": np.float64, "complex_": np.complex128, "cfloat": np.complex128, "singlecomplex": np.complex64,
    "longfloat": np.longdouble, "longcomplex": np.clongdouble, "clongfloat": np.clongdouble,
    "unicode_": np.str_, "string_": np.bytes_, "bool8": np.bool_, "int0": np.intp, "uint0": np.uintp,
    "Inf": np.inf, "Infinity": np.inf, "PINF": np.inf, "infty": np.inf, "NINF": -np.inf, "NaN": np.nan,
    "product": np.prod, "cumproduct": np.cumprod, "alltrue": np.all, "sometrue": np.any, "round_": np.round,
    "NZERO": -0.0, "PZERO": 0.0, "mat": np.asmatrix, "trapz": getattr(np, "trapezoid", None),
    # NumPy 2.0 moved its exceptions and warnings to ``np.exceptions`` (MegEngine's own tests catch np.AxisError)
    **{name: getattr(np.exceptions, name) for name in ("AxisError", "ComplexWarning", "VisibleDeprecationWarning",
                                                       "RankWarning", "TooHardError", "ModuleDeprecationWarning")},
}


def _asfarray(a, dtype=np.float64):
    # NumPy 1.23's np.asfarray: the array as a floating type (an integer or bool dtype asked for becomes float64)
    if not np.issubdtype(dtype, np.inexact):
        dtype = np.float64
    return np.asarray(a, dtype=dtype)


def _in1d(ar1, ar2, assume_unique=False, invert=False):
    # NumPy 1.23's np.in1d: np.isin of the flattened first array
    return np.isin(np.ravel(ar1), ar2, assume_unique=assume_unique, invert=invert)


def _msort(a):
    # NumPy 1.23's np.msort: sorted along the first axis
    return np.sort(a, axis=0)


def _issubclass_(arg1, arg2):
    # NumPy 1.23's np.issubclass_: issubclass that answers False where issubclass raises TypeError
    try:
        return issubclass(arg1, arg2)
    except TypeError:
        return False


_ALIASES.update(asfarray=_asfarray, in1d=_in1d, msort=_msort, issubclass_=_issubclass_)
_state = {"original": None, "warned": False}


def _getattr(name):
    value = _ALIASES.get(name, _getattr)
    if value is _getattr:
        return _state["original"](name)
    if not _state["warned"]:
        _state["warned"] = True
        warnings.warn(
            f"np.{name}: NumPy {np.__version__} removed this name; megxla answers it as NumPy 1.23 (MegEngine's) did "
            f"({getattr(value, '__name__', value)}), for this and the other removed aliases (one warning per "
            f"process). Set {ENV}=0 or run `python -m megxla.run --no-numpy-aliases` to turn this off.",
            UserWarning, stacklevel=2)
    return value


def restore() -> bool:
    """Answer NumPy's removed aliases again (a no-op when ``MEGXLA_NUMPY_ALIASES=0`` or already done).

    Returns:
        whether the aliases are answered afterwards.

    Example:
        >>> restore() == is_restored()
        True
        >>> remove()
    """
    if os.environ.get(ENV, "1") == "0":
        return is_restored()
    if _state["original"] is None:
        original = np.__dict__.get("__getattr__")
        if original is None:  # (a NumPy without a module __getattr__: every name missing is an AttributeError)
            def original(name):
                raise AttributeError(f"module 'numpy' has no attribute {name!r}")
        _state["original"] = original
        np.__getattr__ = _getattr
    return True


def remove() -> None:
    """Undo :func:`restore`.

    Example:
        >>> _ = restore(); remove(); is_restored()
        False
    """
    original = _state["original"]
    if original is None:
        return
    if np.__dict__.get("__getattr__") is _getattr:
        np.__getattr__ = original
    _state["original"] = None


def is_restored() -> bool:
    """Whether the removed aliases are answered now."""
    return _state["original"] is not None
