"""Found only by child processes of a program that runs under megxla's ``megengine`` alias.

``megxla._alias.install`` puts this directory on ``PYTHONPATH`` and ``sys.path``; a spawned child's first
``import megengine`` lands here, installs the alias in the child and hands back megxla itself (the import
statement binds whatever ``sys.modules["megengine"]`` holds when this module finishes). Imported under any
other name (``megxla._alias_path.megengine``, e.g. by a tool walking the package) it does nothing.
"""
import sys

if __name__ == "megengine":
    from megxla import _alias

    _alias.install()
    import megxla

    sys.modules[__name__] = megxla
