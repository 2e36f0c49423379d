"""``megengine.version`` (thin: MegEngine's module path): the version string (MegEngine's API version with
megxla's release as a local label) and, for code that prints it, ``git_version``.

Example:
    >>> __version__.startswith("1.13.0")
    True
"""
from . import __version__  # noqa: F401

__all__ = ["__version__", "git_version"]

git_version = "megxla"  # (no build commit is stamped into a pure-Python package)
