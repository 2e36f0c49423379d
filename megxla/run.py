"""``python -m megxla.run``: run a MegEngine program on megxla with no edit to its files.

Usage::

    python -m megxla.run [--shadow] [--auto-jit | --auto-jit-report] [--no-numpy-aliases] train.py --its --own args
    python -m megxla.run [--shadow] [--auto-jit | --auto-jit-report] [--no-numpy-aliases] -m package.module --its
        --own args

Installs the ``megengine`` import alias (:mod:`megxla.as_megengine`), then runs the script or module as Python
itself would: as ``__main__``, with ``sys.argv`` = ``[script, *args]`` (``[module file, *args]`` for ``-m``) and the
script's directory (the current directory for ``-m``) first on ``sys.path``. ``--shadow`` answers ``megengine``
imports with megxla even if a real MegEngine is installed (same as ``MEGXLA_SHADOW_MEGENGINE=1``). Child
processes (DataLoader workers, ``dist.launcher`` ranks, ``subprocess`` Pythons) inherit the alias. ``--auto-jit``
switches auto-jit on (``megxla.config.auto_jit``, ``MEGXLA_AUTO_JIT=1`` for child processes): the program's eager
ops are compiled by XLA cluster by cluster, with no decorator; ``--auto-jit-report`` does the same and prints
``megxla.jit.auto_jit_report()`` to stderr when the program ends (``MEGXLA_AUTO_JIT_REPORT=1``): where clusters were
cut and why, what kept changing, what would help. NumPy's names removed since MegEngine's NumPy
1.23 (``np.float``, ``np.int``, ``np.object``, ``np.float_``, ``np.NaN``…) are answered again as 1.23 did, with one
warning; ``--no-numpy-aliases`` (``MEGXLA_NUMPY_ALIASES=0``) turns that off.
"""
from __future__ import annotations

import os
import runpy
import sys

from ._alias import install

_USAGE = ("usage: python -m megxla.run [--shadow] [--auto-jit | --auto-jit-report] [--no-numpy-aliases] "
          "(script.py | -m module) [args ...]")


def main(argv=None) -> None:
    """Install the alias and run a script or module as ``__main__`` (see the module docstring).

    Args:
        argv: the launcher's arguments (default ``sys.argv[1:]``).

    Returns:
        None; the program's ``SystemExit`` and exceptions propagate.

    Example:
        >>> main(["--help"])  # doctest: +SKIP
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    force = None
    while argv and argv[0].startswith("-") and argv[0] != "-m":
        opt = argv.pop(0)
        if opt == "--shadow":
            force = True
        elif opt in ("--auto-jit", "--auto-jit-report"):
            # (the environment too: DataLoader workers and dist.launcher ranks are Pythons of their own)
            os.environ["MEGXLA_AUTO_JIT"] = "1"
            if opt == "--auto-jit-report":
                os.environ["MEGXLA_AUTO_JIT_REPORT"] = "1"  # (read when auto-jit is switched on, below)
            from . import config
            config.auto_jit = True
        elif opt == "--no-numpy-aliases":
            os.environ["MEGXLA_NUMPY_ALIASES"] = "0"  # (read by install(); inherited by child processes)
        elif opt in ("-h", "--help"):
            print(__doc__)
            return
        else:
            raise SystemExit(f"megxla.run: unknown option {opt!r}\n{_USAGE}")
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        raise SystemExit(_USAGE)
    install(force=force)
    if argv[0] == "-m":
        module, args = argv[1], argv[2:]
        # NOTE: `python -m megxla.run` already put the current directory first on sys.path, as `python -m pkg`
        # would; run_module(alter_sys=True) sets sys.argv[0] to the module's file and __main__ like Python.
        sys.argv = [module] + args
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, args = argv[0], argv[1:]
        if not os.path.exists(script):
            raise SystemExit(f"megxla.run: can't open file {os.path.abspath(script)!r}: no such file")
        sys.argv = [script] + args
        # Python puts the directory of the (symlink-resolved) script first, replacing its own entry.
        sys.path[0] = os.path.dirname(os.path.realpath(script))
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
