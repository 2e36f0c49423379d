"""``megengine.distributed.functional``: the collectives, under the path MegEngine's distributed guide and model
zoo use (``dist.functional.all_reduce_sum``). They are defined once, in :mod:`megxla.functional.distributed`.

Example:
    >>> import megxla.distributed as dist
    >>> import megxla.functional.distributed as collectives
    >>> dist.functional.all_reduce_sum is collectives.all_reduce_sum
    True
"""
from ..functional.distributed import *  # noqa: F401,F403
from ..functional.distributed import __all__  # noqa: F401
