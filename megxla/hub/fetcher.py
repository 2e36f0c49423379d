"""Fetching for :mod:`megxla.hub`: git repositories (``git`` on the command line) and files (``urllib``).

Every network operation has a timeout (``MEGXLA_HUB_TIMEOUT`` seconds, default 60) and fails with an error
naming what was fetched and where it was going, never a hang. Downloads land in a temporary file next to the
target and are renamed into place only once complete, so an interrupted download never leaves a truncated file
in the cache.
"""
from __future__ import annotations

import errno
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request

from .exceptions import DownloadError, GitCheckoutError, GitPullError, InvalidGitHost, InvalidProtocol, InvalidRepo

__all__ = ["GitHTTPSFetcher", "GitSSHFetcher", "download_from_url", "get_timeout", "repo_dir_name"]

DEFAULT_BRANCH_NAME = "master"  # (MegEngine's, in the cache's names; a clone without a tag takes the default branch)

_REPO_RE = re.compile(r"^([\w.-]+)/([\w.-]+)(?::([\w./-]+))?$")
_HOST_RE = re.compile(r"^[\w.-]+(:\d+)?$")


def get_timeout() -> float:
    """Seconds a network operation may take (``$MEGXLA_HUB_TIMEOUT``, default 60)."""
    return float(os.environ.get("MEGXLA_HUB_TIMEOUT", "60"))


def parse_repo_info(repo_info: str):
    """``"owner/name[:tag]"`` -> ``(owner, name, tag or None)``."""
    m = _REPO_RE.match(str(repo_info))
    if m is None:
        raise InvalidRepo(f"repo_info {repo_info!r} is neither a local directory with hubconf.py nor 'owner/name[:tag]'")
    return m.group(1), m.group(2), m.group(3)


def _git(args, cwd, what, err_cls):
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_SSH_COMMAND=os.environ.get(
        "GIT_SSH_COMMAND", "ssh -o BatchMode=yes -o ConnectTimeout=20"))
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=get_timeout())
    except FileNotFoundError:
        raise err_cls(f"{what}: the `git` command is not installed") from None
    except subprocess.TimeoutExpired:
        raise err_cls(f"{what}: timed out after {get_timeout():g} s (MEGXLA_HUB_TIMEOUT)") from None
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-3:])
        raise err_cls(f"{what}: git {args[0]} failed: {tail}")
    return proc.stdout


def repo_dir_name(owner: str, name: str, tag: str = None, commit: str = None) -> str:
    """The directory of a repository's clone in the hub cache: MegEngine's name for it (a SHA-1 of owner, name,
    branch or tag -- ``master`` where none is given -- and commit), so a cache MegEngine filled is used as it is.

    Example:
        >>> repo_dir_name("megengine", "models"), repo_dir_name("megengine", "models", "master")
        ('e093aa62cdf8f313', 'e093aa62cdf8f313')
    """
    raw = f"{owner}_{name}_{(tag or DEFAULT_BRANCH_NAME).replace('/', '_')}" + (f"_{commit}" if commit else "")
    return hashlib.sha1(raw.encode()).hexdigest()[:16]


class _GitFetcher:
    """Shared clone logic; subclasses give the repository ``url`` for their protocol."""

    protocol = ""

    @classmethod
    def fetch(cls, git_host: str, repo_info: str, use_cache: bool = False, commit: str = None,
              silent: bool = True, cache_dir: str = None) -> str:
        """Clone ``repo_info`` (``owner/name[:tag]``) from ``git_host`` into ``cache_dir``; return its path.

        ``git_host`` is a host name (``github.com``) or, for mirrors and tests, a URL prefix (``file:///srv/git``,
        ``https://host/prefix``): the repository URL is then ``<prefix>/<owner>/<name>.git``.
        """
        owner, name, tag = parse_repo_info(repo_info)
        if "://" not in git_host and not _HOST_RE.match(git_host):
            raise InvalidGitHost(f"git host {git_host!r} is not a host name or URL prefix")
        url = cls.url(git_host, owner, name)
        ref = commit or tag
        repo_dir = os.path.join(cache_dir, repo_dir_name(owner, name, tag, commit))
        if use_cache and os.path.isdir(repo_dir):  # (whole or absent: a clone is renamed into place once done)
            return repo_dir
        tmp = tempfile.mkdtemp(prefix=".fetch_", dir=cache_dir)
        try:
            what = f"fetching {url}{'@' + ref if ref else ''} into {repo_dir}"
            if commit is None:
                _git(["clone", "--depth", "1", *(["--branch", tag] if tag else []), url, tmp], None, what,
                     GitPullError)
            else:
                _git(["init", "-q"], tmp, what, GitPullError)
                _git(["fetch", "-q", "--depth", "1", url, commit], tmp, what, GitPullError)
                _git(["checkout", "-q", "FETCH_HEAD"], tmp, what, GitCheckoutError)
            shutil.rmtree(os.path.join(tmp, ".git"))  # (MegEngine keeps the files alone, too)
            shutil.rmtree(repo_dir, ignore_errors=True)
            os.replace(tmp, repo_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return repo_dir


class GitHTTPSFetcher(_GitFetcher):
    """Clones over HTTPS (``https://<host>/<owner>/<name>.git``)."""

    protocol = "HTTPS"

    @classmethod
    def url(cls, git_host, owner, name):
        return f"{git_host}/{owner}/{name}.git" if "://" in git_host else f"https://{git_host}/{owner}/{name}.git"


class GitSSHFetcher(_GitFetcher):
    """Clones over SSH (``git@<host>:<owner>/<name>.git``)."""

    protocol = "SSH"

    @classmethod
    def url(cls, git_host, owner, name):
        return f"{git_host}/{owner}/{name}.git" if "://" in git_host else f"git@{git_host}:{owner}/{name}.git"


def fetcher_for(protocol):
    fetchers = {"HTTPS": GitHTTPSFetcher, "SSH": GitSSHFetcher}
    try:
        return fetchers[str(protocol).upper()]
    except KeyError:
        raise InvalidProtocol("Invalid protocol, the value should be one of HTTPS, SSH.") from None  # (MegEngine's)


def cached_filename(url: str) -> str:
    """The cache file name of ``url``: a hash of the URL (different URLs never collide) + its base name."""
    base = os.path.basename(urllib.parse.urlparse(url).path) or "download"
    return hashlib.sha256(url.encode()).hexdigest()[:6] + "_" + base


def download_from_url(url: str, dst: str, timeout: float = None):
    """Download ``url`` (``http(s)://``, ``file://`` or a local path) to the path ``dst``, atomically.

    Args:
        url: the source.
        dst: the file to write (``~`` expanded; its directory is created); it appears only once the download is
            complete.
        timeout: seconds before giving up (default ``$MEGXLA_HUB_TIMEOUT``).

    Returns:
        the MD5 hex digest of the file written (as MegEngine's).

    Raises:
        FileNotFoundError: for a local path that does not exist (as MegEngine's).
        DownloadError: naming the URL, the destination and the cause (network error, HTTP status, timeout,
            truncated transfer).

    Example:
        >>> import os, pathlib, tempfile
        >>> from megxla.hub import download_from_url
        >>> with tempfile.TemporaryDirectory() as d:
        ...     src = os.path.join(d, "weights.bin")
        ...     with open(src, "wb") as f:
        ...         _ = f.write(b"megxla")
        ...     digest = download_from_url(pathlib.Path(src).as_uri(), os.path.join(d, "copy", "weights.bin"))
        ...     open(os.path.join(d, "copy", "weights.bin"), "rb").read(), digest
        (b'megxla', '...')
        >>> download_from_url("file:///no/such/file", "/tmp/never_written")
        Traceback (most recent call last):
        ...
        megxla.hub.exceptions.DownloadError: megxla.hub: could not download file:///no/such/file to ...
    """
    timeout = get_timeout() if timeout is None else timeout
    dst = os.path.expanduser(dst)
    if urllib.parse.urlparse(url).scheme in ("", "c", "d"):  # a local path (MegEngine's copier takes them too)
        if not os.path.isfile(url):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), url)
        url = pathlib.Path(os.path.abspath(url)).as_uri()
    md5 = hashlib.md5()
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".download_", dir=os.path.dirname(os.path.abspath(dst)))
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                req = urllib.request.Request(url, headers={"User-Agent": "megxla-hub"})
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    expected = resp.headers.get("Content-Length") if hasattr(resp, "headers") else None
                    got = 0
                    while True:
                        chunk = resp.read(1 << 20)
                        if not chunk:
                            break
                        out.write(chunk)
                        md5.update(chunk)
                        got += len(chunk)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(exc, urllib.error.HTTPError):
                    reason = f"HTTP {exc.code} {exc.reason}"
                raise DownloadError(f"megxla.hub: could not download {url} to {dst}: {reason}. Check the network "
                                    f"(timeout {timeout:g} s, MEGXLA_HUB_TIMEOUT), or place the file at {dst} "
                                    f"yourself, or pass a local path / file:// URL") from None
        if expected is not None and int(expected) != got:
            raise DownloadError(f"megxla.hub: download of {url} to {dst} is truncated: got {got} of {expected} bytes")
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return md5.hexdigest()
