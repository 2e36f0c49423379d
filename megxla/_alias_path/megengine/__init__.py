"""Found only by child processes of a program that runs under megxla's ``megengine`` alias.

``megxla._alias.install`` puts this directory on ``PYTHONPATH`` and ``sys.path``; a spawned child's first
``import megengine`` lands here, installs the alias in the child and hands back megxla itself (the import
statement binds whatever ``sys.modules["megengine"]`` holds when this module finishes).
"""
import sys

from megxla import _alias

_alias.install()
import megxla  # noqa: E402

sys.modules[__name__] = megxla
