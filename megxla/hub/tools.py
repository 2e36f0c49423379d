"""``megengine.hub.tools`` (thin: MegEngine's module path): load a module from a file, test that a module
exists, run a block in another directory.

Example:
    >>> check_module_exists("json"), check_module_exists("no_such_module_here")
    (True, False)
"""
import contextlib
import importlib.util
import os
import types
from typing import Iterator

__all__ = ["load_module", "check_module_exists", "cd"]


def load_module(name: str, path: str) -> types.ModuleType:
    """Execute the Python file ``path`` as a module named ``name`` (not added to ``sys.modules``).

    Args:
        name: the module's name.
        path: the file.

    Returns:
        the module.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "m.py"); _ = open(p, "w").write("X = 3")
        >>> load_module("m", p).X
        3
    """
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"load_module: {path!r} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_module_exists(module: str) -> bool:
    """Whether the module ``module`` can be imported (found on the path; not imported).

    Example:
        >>> check_module_exists("os")
        True
    """
    return importlib.util.find_spec(module) is not None


@contextlib.contextmanager
def cd(target: str) -> Iterator[None]:
    """Change the working directory to ``target`` (``~`` expanded) for the block, then back.

    Example:
        >>> import os, tempfile
        >>> d = os.path.realpath(tempfile.mkdtemp())
        >>> with cd(d):
        ...     os.getcwd() == d
        True
    """
    prev = os.getcwd()
    os.chdir(os.path.expanduser(target))
    try:
        yield
    finally:
        os.chdir(prev)
