"""``megengine.utils.hook`` (thin: MegEngine's module path): the handle a registered hook returns.

Example:
    >>> hooks = {}
    >>> h = HookHandler(hooks, print)
    >>> len(hooks)
    1
    >>> h.remove(); len(hooks)
    0
"""
import itertools
import weakref

__all__ = ["HookHandler"]

_ids = itertools.count()


class HookHandler:
    """Registers ``hook`` in ``source_dict`` under a fresh id; :meth:`remove` takes it out again (the dict is held
    weakly: removing after the owner is gone does nothing).

    Args:
        source_dict: the owner's ``{id: hook}`` dict.
        hook: the callable.

    Example:
        >>> d = {}; h = HookHandler(d, len); list(d.values()) == [len]
        True
    """

    def __init__(self, source_dict, hook):
        self.id = next(_ids)
        source_dict[self.id] = hook
        try:  # (weakly where the dict type allows it: OrderedDict, a Module's hook dicts)
            self.source_ref = weakref.ref(source_dict)
        except TypeError:  # a plain dict cannot be weakly referenced
            self.source_ref = lambda: source_dict

    def remove(self):
        """Unregister the hook (idempotent)."""
        source_dict = self.source_ref()
        if source_dict is not None:
            source_dict.pop(self.id, None)
