"""Models published with a ``hubconf.py`` (``megengine.hub``): list, document and build them, from a local
directory or a git host, and load pretrained weights from URLs.

A repository (or local directory) exposes its entry points as callables in ``hubconf.py``; an optional
``dependencies = ["numpy", ...]`` list names modules that :func:`load` needs importable. Repositories are cloned once
into ``$MGE_HOME/hub`` (default ``$XDG_CACHE_HOME/megengine`` or ``~/.cache/megengine``, as in MegEngine; each in
the directory MegEngine names it by, so a cache MegEngine filled serves offline), files downloaded by URL into
``$MGE_HOME/serialized``.
"""
from __future__ import annotations

import builtins
import functools
import importlib.util
import os
import sys
import urllib.parse
import urllib.request
from typing import Any, List

from ..logger import get_logger
from .exceptions import InvalidRepo
from .fetcher import cached_filename, download_from_url, fetcher_for

__all__ = ["list", "load", "help", "import_module", "load_serialized_obj_from_url", "pretrained",
           "get_megengine_home", "DEFAULT_GIT_HOST", "DEFAULT_PROTOCOL", "HUBCONF"]

HUBCONF = "hubconf.py"
DEFAULT_GIT_HOST = "github.com"
DEFAULT_PROTOCOL = "HTTPS"
logger = get_logger(__name__)


def get_megengine_home() -> str:
    """The cache root: ``$MGE_HOME``, else ``$XDG_CACHE_HOME/megengine``, else ``~/.cache/megengine``."""
    return os.path.expanduser(os.environ.get(
        "MGE_HOME", os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "megengine")))


def _load_hubconf(repo_dir: str):
    path = os.path.join(repo_dir, HUBCONF)
    if not os.path.isfile(path):
        raise InvalidRepo(f"megxla.hub: {repo_dir} has no {HUBCONF}")
    # (MegEngine's module name: the file name, so classes defined there print as ``hubconf.py.Net``)
    spec = importlib.util.spec_from_file_location(HUBCONF, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, repo_dir)  # hubconf.py may import the repository's own modules
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(repo_dir)
    return module


def _check_dependencies(module) -> None:
    # as MegEngine: only load() checks them, after finding the entry (list() and help() of such a repo work)
    missing = [d for d in getattr(module, "dependencies", None) or [] if importlib.util.find_spec(d) is None]
    if missing:
        raise RuntimeError("Missing dependencies: {}".format(", ".join(missing)))


def _init_hub(repo_info, git_host, use_cache=True, commit=None, protocol=DEFAULT_PROTOCOL):
    if os.path.isdir(str(repo_info)):
        return _load_hubconf(str(repo_info))
    cache_dir = os.path.join(get_megengine_home(), "hub")
    os.makedirs(cache_dir, exist_ok=True)
    repo_dir = fetcher_for(protocol).fetch(git_host, repo_info, use_cache=use_cache, commit=commit,
                                           cache_dir=cache_dir)
    return _load_hubconf(repo_dir)


def import_module(repo_info: str, git_host: str = DEFAULT_GIT_HOST, use_cache: bool = True, commit: str = None,
                  protocol: str = DEFAULT_PROTOCOL):
    r"""The ``hubconf`` module of a repository.

    Args:
        repo_info: a local directory holding ``hubconf.py``, or ``"owner/name[:tag]"`` on ``git_host``.
        git_host: host name (``github.com``) or URL prefix (``file:///srv/git``) of the git server.
        use_cache: reuse an earlier clone of the same repository and tag/commit.
        commit: check out this commit instead of the tag / default branch.
        protocol: ``"HTTPS"`` or ``"SSH"``.

    Returns:
        the executed ``hubconf.py`` module.

    Example:
        >>> import os, tempfile
        >>> from megxla import hub
        >>> HUBCONF = ('import megxla.module as M\n'
        ...            'def tiny(n=2):\n    "A linear layer of n features."\n    return M.Linear(n, n)\n')
        >>> with tempfile.TemporaryDirectory() as repo:  # a local repository: a directory with a hubconf.py
        ...     with open(os.path.join(repo, "hubconf.py"), "w") as f:
        ...         _ = f.write(HUBCONF)
        ...     hubconf = hub.import_module(repo)
        >>> hubconf.tiny(3)
        Linear(in_features=3, out_features=3, bias=True)
    """
    return _init_hub(repo_info, git_host, use_cache, commit, protocol)


def list(repo_info: str, git_host: str = DEFAULT_GIT_HOST, use_cache: bool = True, commit: str = None,
         protocol: str = DEFAULT_PROTOCOL) -> List[str]:
    r"""Names of the entry points of a repository's ``hubconf.py``: its callables (defined or imported there)
    whose names do not start with ``__``.

    Args:
        repo_info, git_host, use_cache, commit, protocol: as :func:`import_module`.

    Returns:
        sorted list of entry names.

    Example:
        >>> import os, tempfile
        >>> from megxla import hub
        >>> HUBCONF = ('import megxla.module as M\n'
        ...            'def tiny(n=2):\n    "A linear layer of n features."\n    return M.Linear(n, n)\n')
        >>> with tempfile.TemporaryDirectory() as repo:  # a local repository: a directory with a hubconf.py
        ...     with open(os.path.join(repo, "hubconf.py"), "w") as f:
        ...         _ = f.write(HUBCONF)
        ...     hub.list(repo)
        ['tiny']
    """
    hubmodule = _init_hub(repo_info, git_host, use_cache, commit, protocol)
    # MegEngine's rule: every callable attribute not starting with "__", so the classes and functions a
    # hubconf.py imports from the repository's model files are entries too.
    return sorted(n for n in dir(hubmodule) if not n.startswith("__") and callable(getattr(hubmodule, n)))


def _entry(hubmodule, entry):
    fn = getattr(hubmodule, entry, None)
    if fn is None or not callable(fn):
        raise RuntimeError(f"megxla.hub: cannot find callable {entry!r} in {HUBCONF} "
                           f"({getattr(hubmodule, '__file__', '')})")
    return fn


def help(repo_info: str, entry: str, git_host: str = DEFAULT_GIT_HOST, use_cache: bool = True, commit: str = None,
         protocol: str = DEFAULT_PROTOCOL) -> str:
    r"""The docstring of the entry point ``entry``.

    Args:
        repo_info, git_host, use_cache, commit, protocol: as :func:`import_module`.
        entry: the entry point's name.

    Returns:
        its docstring.

    Example:
        >>> import os, tempfile
        >>> from megxla import hub
        >>> HUBCONF = ('import megxla.module as M\n'
        ...            'def tiny(n=2):\n    "A linear layer of n features."\n    return M.Linear(n, n)\n')
        >>> with tempfile.TemporaryDirectory() as repo:  # a local repository: a directory with a hubconf.py
        ...     with open(os.path.join(repo, "hubconf.py"), "w") as f:
        ...         _ = f.write(HUBCONF)
        ...     hub.help(repo, "tiny")
        'A linear layer of n features.'
    """
    return _entry(_init_hub(repo_info, git_host, use_cache, commit, protocol), entry).__doc__


def load(repo_info: str, entry: str, *args, git_host: str = DEFAULT_GIT_HOST, use_cache: bool = True,
         commit: str = None, protocol: str = DEFAULT_PROTOCOL, **kwargs) -> Any:
    r"""Call the entry point ``entry`` of a repository's ``hubconf.py`` with ``args`` / ``kwargs``.

    Args:
        repo_info: local directory or ``"owner/name[:tag]"`` (see :func:`import_module`).
        entry: the entry point.
        args, kwargs: its arguments (e.g. ``pretrained=True``).

    Returns:
        what the entry returns (usually a module).

    Example:
        >>> import os, tempfile
        >>> from megxla import hub
        >>> HUBCONF = ('import megxla.module as M\n'
        ...            'def tiny(n=2):\n    "A linear layer of n features."\n    return M.Linear(n, n)\n')
        >>> with tempfile.TemporaryDirectory() as repo:  # a local repository: a directory with a hubconf.py
        ...     with open(os.path.join(repo, "hubconf.py"), "w") as f:
        ...         _ = f.write(HUBCONF)
        ...     model = hub.load(repo, "tiny", n=4)
        >>> model(mge.Tensor(np.ones((1, 4), "float32"))).shape
        (1, 4)
    """
    hubmodule = _init_hub(repo_info, git_host, use_cache, commit, protocol)
    fn = _entry(hubmodule, entry)
    _check_dependencies(hubmodule)
    return fn(*args, **kwargs)


def _local_path(url: str):
    """The file a path or ``file://`` URL names, or None for network URLs."""
    parts = urllib.parse.urlparse(url)
    if parts.scheme == "file":
        return urllib.request.url2pathname(parts.path)
    if parts.scheme in ("", "c", "d") or os.path.exists(url):  # plain path (also Windows drive letters)
        return url
    return None


def load_serialized_obj_from_url(url: str, model_dir=None) -> Any:
    """Load an object saved by ``megxla.save`` from a URL, downloading it once into ``model_dir``.

    Plain paths are read in place. ``file://`` and network URLs are copied to
    ``model_dir/<hash of url>_<file name>`` (default ``$MGE_HOME/serialized``) on first use; later calls read
    the cached copy, offline. A failed download raises :class:`~megxla.hub.exceptions.DownloadError` naming the
    URL and the cache path, after at most ``$MEGXLA_HUB_TIMEOUT`` seconds.

    Args:
        url: path, ``file://`` URL or ``http(s)://`` URL.
        model_dir: cache directory.

    Returns:
        the deserialized object (e.g. a state dict).

    Example:
        >>> import os, pathlib, tempfile
        >>> from megxla import hub
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "tiny.pkl"); mge.save({"w": np.ones(2, "float32")}, path)
        ...     url = pathlib.Path(path).as_uri()  # file:///...: copied into the cache as a download would be
        ...     state = hub.load_serialized_obj_from_url(url, model_dir=os.path.join(d, "cache"))
        ...     sorted(os.listdir(os.path.join(d, "cache")))
        ['..._tiny.pkl']
        >>> state
        {'w': array([1., 1.], dtype=float32)}
    """
    from .._serialization import load as _load
    local = _local_path(url)
    if local is not None and urllib.parse.urlparse(url).scheme != "file":
        if not os.path.isfile(local):
            raise FileNotFoundError(f"megxla.hub: no such file {local!r}")
        return _load(local)
    if model_dir is None:
        model_dir = os.path.join(get_megengine_home(), "serialized")
    os.makedirs(model_dir, exist_ok=True)
    cached = os.path.join(model_dir, cached_filename(url))
    logger.info("load_serialized_obj_from_url: download to or using cached %s", cached)  # (MegEngine's line)
    if not os.path.exists(cached):
        download_from_url(url, cached)
    try:
        return _load(cached)
    except Exception as exc:
        # A corrupt cache entry would fail forever: remove it so the next call downloads again.
        os.remove(cached)
        raise RuntimeError(f"megxla.hub: {cached} (downloaded from {url}) is not a file saved by megxla.save / "
                           f"megengine.save: {type(exc).__name__}: {exc}; the cached copy was removed") from None


class pretrained:
    r"""Decorator for a ``hubconf.py`` entry point: adds the keyword ``pretrained=False``; with ``True`` the
    weights at ``url`` are downloaded once (see :func:`load_serialized_obj_from_url`) and loaded into the model
    with ``load_state_dict``.

    Args:
        url: where the state dict is (``http(s)://``, ``file://`` or a path).

    Example:
        >>> import megxla.module as M
        >>> @pretrained("https://example.com/weights/tiny.pkl")
        ... def tiny(**kwargs):
        ...     return M.Linear(2, 2, **kwargs)
        >>> tiny().weight.shape  # pretrained=False: no download
        (2, 2)
    """

    def __init__(self, url):
        self.url = url

    def __call__(self, func):
        url = self.url

        # (MegEngine's signature: a first positional argument is ``pretrained`` -- ``resnet50_ibn_a(True)`` loads
        # the weights --, and ``func`` gets keywords only)
        @functools.wraps(func)
        def pretrained_model_func(pretrained=False, **kwargs):
            model = func(**kwargs)
            if pretrained:
                weights = load_serialized_obj_from_url(url)
                if isinstance(weights, dict) and "state_dict" in weights and not any(
                        hasattr(v, "shape") for v in weights.values()):
                    weights = weights["state_dict"]  # checkpoints saved as {"state_dict": ..., "epoch": ...}
                model.load_state_dict(weights)
            return model

        pretrained_model_func.url = url
        return pretrained_model_func


_builtin_list = builtins.list
