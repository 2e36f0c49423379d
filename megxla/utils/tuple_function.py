"""``megengine.utils.tuple_function`` (thin: MegEngine's module path): turn an int or a sequence into an
n-tuple of ints, as convolution and pooling arguments are given (basecls models and Swin Transformer import
``_pair`` / ``_single`` / ``_triple`` / ``_quadruple`` from here).

Example:
    >>> _pair(3), _pair((1, 2)), _triple(2.0)
    ((3, 3), (1, 2), (2, 2, 2))
"""
import collections.abc
import functools

from ..core._dispatch import AssertedOpError

__all__ = ["get_ndtuple"]


def get_ndtuple(value, *, n, allow_zero=True):
    """``value`` as a tuple of ``n`` ints: a number is repeated ``n`` times, an iterable must have ``n`` items.

    Args:
        value: an int (or a number ``int()`` accepts) or an iterable of ``n`` of them.
        n: the tuple's length.
        allow_zero: whether 0 is allowed (else every item must be >= 1); negative items are always refused.

    Raises:
        AssertionError: (an ``OpError``, a ValueError too) for a wrong length or a refused value.

    Returns:
        a tuple of ``n`` ints.

    Example:
        >>> get_ndtuple(2, n=3), get_ndtuple([1, 0], n=2)
        ((2, 2, 2), (1, 0))
    """
    # MegEngine asserts (AssertionError, its texts); AssertedOpError is also the ValueError megxla raised before
    if isinstance(value, collections.abc.Iterable):
        if len(value) != n:
            raise AssertedOpError("tuple len is not equal to n: {}".format(value))
        value = tuple(int(v) for v in value)
    else:
        value = (int(value),) * n
    if n and min(value) < (0 if allow_zero else 1):
        raise AssertedOpError("invalid value: {}".format(value))
    return value


_single = functools.partial(get_ndtuple, n=1, allow_zero=True)
_pair = functools.partial(get_ndtuple, n=2, allow_zero=True)
_pair_nonzero = functools.partial(get_ndtuple, n=2, allow_zero=False)
_triple = functools.partial(get_ndtuple, n=3, allow_zero=True)
_triple_nonzero = functools.partial(get_ndtuple, n=3, allow_zero=False)
_quadruple = functools.partial(get_ndtuple, n=4, allow_zero=True)
