"""The opt-in ``megengine`` import alias: ``import megengine[.x.y]`` resolves to ``megxla[.x.y]``.

Public entry points are :mod:`megxla.as_megengine` (one import line in an entry script) and
``python -m megxla.run`` (no edit at all); both call :func:`install`.

How it works:

* A meta-path finder, first on ``sys.meta_path``, answers every ``megengine`` / ``megengine.*`` import with
  the megxla module of the same path. The module object is the one ``megxla`` itself uses (``sys.modules``
  holds it under both names), so classes, module globals and registries are shared, nothing is copied.
* A MegEngine path megxla does not have fails with a ``ModuleNotFoundError`` that names it and says that
  megxla answered.
* A real MegEngine installation is never shadowed unless asked (``install(force=True)`` or the environment
  variable ``MEGXLA_SHADOW_MEGENGINE=1``).
* Child processes inherit the alias: ``install`` puts a directory holding a tiny ``megengine`` package
  (``megxla/_alias_path/megengine``) on ``PYTHONPATH`` and on ``sys.path``. A forked DataLoader worker
  inherits the finder itself; a *spawned* process (``dist.launcher`` ranks, ``multiprocessing`` with
  ``spawn``/``forkserver``, ``subprocess.run([sys.executable, ...])``) re-imports the user's main module,
  whose ``import megengine`` finds that package, which installs the finder and hands back megxla.
  (``multiprocessing`` gives a spawned child the parent's ``sys.path``, ``subprocess`` gives it
  ``PYTHONPATH``: the directory is on both.) No ``site`` hook or ``.pth`` file is installed anywhere.

Environment variables: ``MEGXLA_ALIAS=1`` is set while the alias is active (and read by
:func:`install_if_env`); ``MEGXLA_SHADOW_MEGENGINE=1`` forces shadowing a real MegEngine.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

__all__ = ["install", "uninstall", "is_installed", "install_if_env", "ALIAS_ENV", "SHADOW_ENV", "ALIAS_PATH"]

ALIAS_ENV = "MEGXLA_ALIAS"
SHADOW_ENV = "MEGXLA_SHADOW_MEGENGINE"
#: directory holding the ``megengine`` package that child processes import (see module docstring)
ALIAS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_alias_path")

_SRC, _DST = "megengine", "megxla"


def _target(fullname):
    return _DST + fullname[len(_SRC):]


class _AliasLoader(importlib.abc.Loader):
    """Returns megxla's existing module object; executes nothing."""

    def __init__(self, target):
        self.target = target
        self._spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self._spec = getattr(module, "__spec__", None)
        _register_loaded(exclude=spec.name)
        return module

    def exec_module(self, module):
        # NOTE: importlib's module_from_spec overwrites ``__spec__`` with the alias spec (name "megengine..."):
        # put megxla's own back, or multiprocessing/reload/pickle would see the module under the alias name.
        if self._spec is not None:
            module.__spec__ = self._spec


def _register_loaded(exclude=None):
    """Enter every loaded megxla module in ``sys.modules`` under its ``megengine`` name too.

    An import that goes through the finder ends, as every import of a submodule does, by binding the submodule
    on its parent package: ``import megengine.distributed.launcher`` would replace the ``launcher`` class of
    ``megxla.distributed`` by the module of the same name (``megengine.amp.autocast``,
    ``megengine.quantization.quantize`` alike). A name already in ``sys.modules`` is not imported again, so
    modules megxla has loaded are entered directly, as they are in MegEngine itself after its package ran."""
    # (a copy taken in one piece: another thread importing, or a finalizer run by a collection while a list of
    # the items is built, changed the dict during the iteration -- "dictionary changed size during iteration")
    for name, module in sys.modules.copy().items():
        if module is not None and (name == _DST or name.startswith(_DST + ".")):
            alias = _SRC + name[len(_DST):]
            if alias != exclude and alias not in sys.modules:
                sys.modules[alias] = module


class _AliasFinder(importlib.abc.MetaPathFinder):
    """``megengine[.x.y]`` -> megxla's ``megxla[.x.y]`` (the same module object)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _SRC and not fullname.startswith(_SRC + "."):
            return None
        dst = _target(fullname)
        if dst not in sys.modules:
            try:
                found = importlib.util.find_spec(dst)
            except ModuleNotFoundError:
                found = None
            if found is None:
                raise ModuleNotFoundError(
                    f"No module named {fullname!r}: megxla answers 'megengine' imports here (megxla.as_megengine "
                    f"alias) and has no module {dst!r} (this part of MegEngine is not implemented by megxla)",
                    name=fullname)
        module = sys.modules.get(dst)
        is_pkg = module is not None and hasattr(module, "__path__")
        spec = importlib.util.spec_from_loader(fullname, _AliasLoader(dst), is_package=is_pkg)
        return spec

    def invalidate_caches(self):
        pass


_FINDER = _AliasFinder()
_state = {"installed": False, "env": None, "sys_path": None, "forced": False}


def is_installed() -> bool:
    """Whether the ``megengine`` alias is active in this process."""
    return _state["installed"]


def _real_megengine():
    """Origin of a real ``megengine`` package reachable from ``sys.path`` (ignoring our alias directory)."""
    here = os.path.normcase(os.path.abspath(ALIAS_PATH))
    path = [p for p in sys.path if os.path.normcase(os.path.abspath(p or os.curdir)) != here]
    for finder in sys.meta_path:
        if finder is _FINDER:
            continue
        try:
            if isinstance(finder, type) and issubclass(finder, importlib.machinery.PathFinder):
                spec = finder.find_spec(_SRC, path)
            elif hasattr(finder, "find_spec"):
                spec = finder.find_spec(_SRC, None)
            else:
                spec = None
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            origin = spec.origin or (list(spec.submodule_search_locations or []) or ["?"])[0]
            if os.path.normcase(os.path.abspath(os.path.dirname(str(origin)))) == here or \
                    os.path.normcase(str(origin)).startswith(here):
                continue
            return origin
    return None


def install(force: bool | None = None) -> None:
    """Make ``import megengine[.x.y]`` resolve to megxla's module of the same path, here and in child processes.

    Args:
        force: shadow a real MegEngine installation. ``None`` reads the environment variable
            ``MEGXLA_SHADOW_MEGENGINE`` (``1`` forces). Without it, a reachable real ``megengine`` package makes
            ``install`` raise ``ImportError`` and change nothing.

    Returns:
        None. Calling it again is a no-op.

    Example:
        >>> import megxla._alias as alias
        >>> alias.install()
        >>> import megengine.functional as F, megxla.functional
        >>> F is megxla.functional
        True
        >>> alias.uninstall()
    """
    if _state["installed"]:
        return
    if force is None:
        force = os.environ.get(SHADOW_ENV, "") == "1"
    inherited = os.environ.get(ALIAS_ENV, "") == "1" and _imported_from_alias_path()
    if not force and not inherited:
        origin = _real_megengine()
        if origin is not None:
            raise ImportError(
                f"megxla.as_megengine: a real MegEngine is installed ({origin}); megxla does not shadow it. Run "
                f"without the alias to use MegEngine, or set {SHADOW_ENV}=1 (or call "
                f"megxla.as_megengine.install(force=True)) to answer 'megengine' imports with megxla anyway.")
    existing = sys.modules.get(_SRC)
    if existing is not None and not _is_ours(existing):
        raise ImportError(
            f"megxla.as_megengine: 'megengine' was already imported from {getattr(existing, '__file__', existing)!r};"
            f" import megxla.as_megengine (or use python -m megxla.run) before any 'import megengine'")
    sys.meta_path.insert(0, _FINDER)
    _register_loaded()
    # MegEngine's users write np.float / np.int / np.object (MegEngine pins NumPy < 1.24): answered again, warned
    # once ($MEGXLA_NUMPY_ALIASES=0 turns it off; children inherit that with the environment)
    from . import _numpy_aliases
    _numpy_aliases.restore()
    _state.update(installed=True, forced=bool(force), env={k: os.environ.get(k) for k in
                                                           (ALIAS_ENV, SHADOW_ENV, "PYTHONPATH")},
                  sys_path=ALIAS_PATH not in sys.path)
    if ALIAS_PATH not in sys.path:
        # NOTE: first when forced, so a spawned child (which gets this sys.path) finds our package before a real
        # MegEngine in site-packages; last otherwise, where it can only ever answer a name nothing else has.
        if force:
            sys.path.insert(0, ALIAS_PATH)
        else:
            sys.path.append(ALIAS_PATH)
    os.environ[ALIAS_ENV] = "1"
    if force:
        os.environ[SHADOW_ENV] = "1"
    pp = os.environ.get("PYTHONPATH", "")
    parts = [p for p in pp.split(os.pathsep) if p]
    if ALIAS_PATH not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([ALIAS_PATH] + parts)


def _is_ours(module):
    return (module is sys.modules.get(_DST) or getattr(module, "__name__", "") == _DST
            or os.path.dirname(os.path.dirname(getattr(module, "__file__", "") or "")) == ALIAS_PATH)


def _imported_from_alias_path():
    """True while the alias package in ``ALIAS_PATH`` is being imported (a child inheriting the parent's alias)."""
    mod = sys.modules.get(_SRC)
    return mod is not None and mod is not sys.modules.get(_DST) and _is_ours(mod)


def uninstall() -> None:
    """Undo :func:`install`: remove the finder, the ``megengine*`` entries of ``sys.modules`` that point at megxla,
    the ``sys.path`` entry and the environment variables it set.

    Example:
        >>> import megxla._alias as alias
        >>> alias.install(); alias.uninstall(); alias.is_installed()
        False
    """
    if not _state["installed"]:
        return
    while _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    from . import _numpy_aliases
    _numpy_aliases.remove()
    for name in [n for n in sys.modules if n == _SRC or n.startswith(_SRC + ".")]:
        mod = sys.modules[name]
        if sys.modules.get(_target(name)) is mod or mod is None or \
                os.path.dirname(getattr(mod, "__file__", "") or "").startswith(ALIAS_PATH):
            del sys.modules[name]
    if _state["sys_path"]:
        while ALIAS_PATH in sys.path:
            sys.path.remove(ALIAS_PATH)
    for k, v in (_state["env"] or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _state.update(installed=False, env=None, sys_path=None, forced=False)


def install_if_env() -> bool:
    """Install the alias when the environment says a parent process had it (``MEGXLA_ALIAS=1``).

    Returns:
        whether the alias is active afterwards.

    Example:
        >>> import megxla._alias as alias
        >>> alias.install_if_env() == (alias.is_installed())
        True
    """
    if os.environ.get(ALIAS_ENV, "") == "1":
        install()
    return is_installed()
