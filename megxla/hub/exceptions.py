"""Errors of :mod:`megxla.hub` (MegEngine's names)."""

__all__ = ["FetcherError", "InvalidRepo", "InvalidGitHost", "GitPullError", "GitCheckoutError", "InvalidProtocol",
           "DownloadError"]


class FetcherError(Exception):
    """Base class of the errors raised while fetching a hub repository or file."""


class InvalidRepo(FetcherError):
    """``repo_info`` is neither a local directory with ``hubconf.py`` nor ``owner/name[:tag]``."""


class InvalidGitHost(FetcherError):
    """The git host is not a valid host name or URL prefix."""


class GitPullError(FetcherError):
    """Cloning or fetching the repository failed (network, permissions, unknown repository or tag)."""


class GitCheckoutError(FetcherError):
    """Checking out the requested commit failed."""


class InvalidProtocol(FetcherError):
    """The protocol is neither ``HTTPS`` nor ``SSH``."""


class DownloadError(FetcherError, OSError):
    """A file could not be downloaded (the message names the URL and the cache path)."""
