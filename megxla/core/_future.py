"""A one-shot value handed between threads (``megengine.utils.future.Future``, re-exported there).

In core because autodiff reads it: a GradManager callback may return a Future instead of the gradient
(``distributed.make_allreduce_cb`` packs gradients into buckets and sets each one's value after the backward pass,
as MegEngine's does); the manager takes the values once its after-backward callbacks have run.

Example:
    >>> import threading
    >>> f = Future(ack=False)
    >>> threading.Thread(target=f.set, args=(42,)).start()
    >>> f.get()
    42
"""
import threading

__all__ = ["Future"]


class Future:
    """A value one thread sets and another gets (``get`` blocks until ``set``); with ``ack``, ``set`` also blocks
    until the value was taken.

    Args:
        ack: whether ``set`` waits for ``get``.

    Example:
        >>> f = Future(ack=False); f.set("x"); f.get()
        'x'
    """

    def __init__(self, ack=True):
        self.ready = threading.Event()
        self.ack = threading.Event() if ack else None

    def set(self, value):
        """Store ``value`` and wake the getter (then wait for it to take the value, with ``ack``)."""
        self.value = value
        self.ready.set()
        if self.ack is not None:
            self.ack.wait()

    def get(self):
        """Wait for the value and return it."""
        self.ready.wait()
        if self.ack is not None:
            self.ack.set()
        return self.value
