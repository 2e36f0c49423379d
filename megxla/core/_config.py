"""``megengine.core._config``: MegEngine's internal execution settings, as views of :mod:`megxla.config`.

MegEngine code (the official model zoo among it) sets them directly, e.g. ``_config.__compute_mode = "float32"``
around a float16 block; here every such attribute reads and writes the public setting of :mod:`megxla.config`
(validated and applied there), and ``_override`` / ``_reset_execution_config`` change several at once for a
``with`` block.

Example:
    >>> from megxla.core import _config
    >>> with _config._override(compute_mode="float32"):
    ...     _config.__compute_mode
    'float32'
    >>> _config.__compute_mode
    'default'
"""
import contextlib
import sys
import types

from .. import config as _public
# MegEngine's _config imports these from core2 (its optimizer and GradManager call them)
from ._imperative_rt.core2 import get_auto_format_convert, set_auto_format_convert, get_option, set_option  # noqa

__all__ = ["_override", "_reset_execution_config", "_get_actual_op_param"]

# MegEngine's private names -> megxla.config's public ones
_ALIASES = {
    "__compute_mode": "_compute_mode", "__conv_format": "_conv_format",
    "__auto_format_convert": "_auto_format_convert", "_benchmark_kernel": "benchmark_kernel",
    "_deterministic_kernel": "deterministic_kernel", "_async_level": "async_level",
    # (MegEngine's module-level properties of the same names: its test suite's conftest reads them here)
    "benchmark_kernel": "benchmark_kernel", "deterministic_kernel": "deterministic_kernel",
    "benchmark_with_subprocess": "benchmark_with_subprocess", "async_level": "async_level",
    "disable_memory_forwarding": "disable_memory_forwarding", "_compute_mode": "_compute_mode",
    "_conv_format": "_conv_format", "_auto_format_convert": "_auto_format_convert",
}
# keyword names of _override / _reset_execution_config
_KEYWORDS = {"benchmark_kernel": "benchmark_kernel", "deterministic_kernel": "deterministic_kernel",
             "async_level": "async_level", "compute_mode": "_compute_mode", "conv_format": "_conv_format",
             "auto_format_convert": "_auto_format_convert"}


def _get_actual_op_param(function_param, config_param):
    """The parameter an op uses: the function's unless the global setting is not ``"default"``."""
    return function_param if config_param == "default" else config_param


@contextlib.contextmanager
def _override(benchmark_kernel=None, deterministic_kernel=None, async_level=None, compute_mode=None,
              conv_format=None, auto_format_convert=None):
    """Set the given execution settings inside a ``with`` block and restore them after (MegEngine's helper)."""
    given = {k: v for k, v in dict(benchmark_kernel=benchmark_kernel, deterministic_kernel=deterministic_kernel,
                                   async_level=async_level, compute_mode=compute_mode, conv_format=conv_format,
                                   auto_format_convert=auto_format_convert).items() if v is not None}
    old = {k: getattr(_public, _KEYWORDS[k]) for k in given}
    try:
        for k, v in given.items():
            setattr(_public, _KEYWORDS[k], v)
        yield
    finally:
        for k, v in old.items():
            setattr(_public, _KEYWORDS[k], v)


_reset_execution_config = _override


class _ConfigView(types.ModuleType):
    """Module type of ``megxla.core._config``: MegEngine's private setting names forward to megxla.config."""

    def __getattr__(self, name):
        if name in _ALIASES:
            return getattr(_public, _ALIASES[name])
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name in _ALIASES:
            setattr(_public, _ALIASES[name], value)
        else:
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _ConfigView
