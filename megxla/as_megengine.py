"""Run code written for MegEngine on megxla, unmodified: ``import megxla.as_megengine`` once, in the entry script.

After this import, every ``import megengine``, ``import megengine.functional as F``,
``from megengine.module import Conv2d``, ``from megengine.jit import xla_trace``… anywhere in the program (all
its modules and packages, DataLoader workers, ``dist.launcher`` ranks and other child processes) resolves to
megxla's module of the same path: the very same module objects, so classes and module state are shared.

* ``megengine.__version__`` is megxla's ``__version__``, ``"1.13.0+megxla.<megxla version>"``: the MegEngine API
  version megxla implements, plus a local label saying that megxla is what runs.
* A MegEngine module megxla does not have fails with ``ModuleNotFoundError`` naming it and saying megxla answered.
* A real MegEngine installation is never shadowed unless asked: the import raises ``ImportError`` unless
  ``MEGXLA_SHADOW_MEGENGINE=1`` is set (or :func:`install` is called with ``force=True``).

Without editing any file, ``python -m megxla.run train.py --args`` (or ``-m package.module``) does the same.

Example:
    >>> import megxla.as_megengine
    >>> megxla.as_megengine.install()  # a no-op after the import above; needed again only after uninstall()
    >>> import megengine, megengine.module as M, megxla
    >>> megengine is megxla and M.Linear is megxla.module.Linear
    True
    >>> megxla.as_megengine.uninstall()
"""
from ._alias import install, install_if_env, is_installed, uninstall

__all__ = ["install", "uninstall", "is_installed", "install_if_env"]

install()
