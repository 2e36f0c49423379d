"""``megengine.hub.const`` (thin: MegEngine's module path): the hub's constants, as :mod:`megxla.hub` uses them
(``HTTP_READ_TIMEOUT`` is MegEngine's value; megxla's network timeout is ``$MEGXLA_HUB_TIMEOUT``).

Example:
    >>> HUBCONF, ENV_MGE_HOME
    ('hubconf.py', 'MGE_HOME')
"""
from .fetcher import DEFAULT_BRANCH_NAME  # noqa: F401
from .hub import DEFAULT_GIT_HOST, DEFAULT_PROTOCOL, HUBCONF  # noqa: F401

__all__ = ["DEFAULT_BRANCH_NAME", "HUBCONF", "HUBDEPENDENCY", "DEFAULT_GIT_HOST", "ENV_MGE_HOME",
           "ENV_XDG_CACHE_HOME", "DEFAULT_CACHE_DIR", "DEFAULT_PROTOCOL", "HTTP_READ_TIMEOUT"]

HUBDEPENDENCY = "dependencies"  # (the hubconf.py list of modules that must be importable)
ENV_MGE_HOME = "MGE_HOME"
ENV_XDG_CACHE_HOME = "XDG_CACHE_HOME"
DEFAULT_CACHE_DIR = "~/.cache"
HTTP_READ_TIMEOUT = 120
