"""``megengine.utils.hook`` (thin: MegEngine's module path): the handle a registered hook returns.

The class is the one :meth:`~.Module.register_forward_hook` returns (as in MegEngine, where the module imports it
from here), so ``isinstance(handle, HookHandler)`` holds for a module's handles.

Example:
    >>> from collections import OrderedDict
    >>> hooks = OrderedDict()
    >>> h = HookHandler(hooks, print)
    >>> len(hooks)
    1
    >>> h.remove(); len(hooks)
    0
"""
from ..module.module import HookHandler

__all__ = ["HookHandler"]
