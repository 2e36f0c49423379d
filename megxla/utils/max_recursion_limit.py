"""``megengine.utils.max_recursion_limit`` (thin: MegEngine's module path): a reentrant context that lifts
Python's recursion limit (and, where the OS allows, the stack size) for deep recursions such as pickling
a long chain of modules.

Example:
    >>> import sys
    >>> before = sys.getrecursionlimit()
    >>> with max_recursion_limit():
    ...     sys.getrecursionlimit() > before
    True
    >>> sys.getrecursionlimit() == before
    True
"""
import sys
import threading

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

__all__ = ["AlternativeRecursionLimit", "max_recursion_limit"]


class AlternativeRecursionLimit:
    """Reentrant context manager setting the recursion limit to ``new_py_limit`` while any entry is open.

    Args:
        new_py_limit: the recursion limit inside.

    Example:
        >>> with AlternativeRecursionLimit(5000):
        ...     import sys; sys.getrecursionlimit()
        5000
    """

    def __init__(self, new_py_limit):
        self.new_py_limit = new_py_limit
        self.count = 0
        self.lock = threading.Lock()
        self.orig_py_limit = 0
        self._orig_stack = None

    def __enter__(self):
        with self.lock:
            if self.count == 0:
                self.orig_py_limit = sys.getrecursionlimit()
                if resource is not None:  # deep Python recursion needs the C stack too: raise the soft limit
                    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
                    self._orig_stack = (soft, hard)
                    try:
                        resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))
                    except (ValueError, OSError):
                        self._orig_stack = None
            sys.setrecursionlimit(self.new_py_limit)
            self.count += 1
        return self

    def __exit__(self, *exc):
        with self.lock:
            self.count -= 1
            if self.count == 0:
                sys.setrecursionlimit(self.orig_py_limit)
                if self._orig_stack is not None:
                    try:
                        resource.setrlimit(resource.RLIMIT_STACK, self._orig_stack)
                    except (ValueError, OSError):
                        pass


# (CPython refuses limits above INT_MAX; MegEngine uses 2**31 - 1)
_max_recursion_limit_context_manager = AlternativeRecursionLimit(2 ** 31 - 1)


def max_recursion_limit():
    """The context manager lifting the recursion limit to the maximum.

    Returns:
        an :class:`AlternativeRecursionLimit`.

    Example:
        >>> with max_recursion_limit():
        ...     pass
    """
    return _max_recursion_limit_context_manager
