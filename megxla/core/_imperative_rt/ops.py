"""``megengine.core._imperative_rt.ops``: where MegEngine defines its builtin op descriptors (pickled files name
them here, e.g. the ``Apply`` exprs of a TracedModule); megxla's are :mod:`megxla.core.ops.builtin`'s -- and the
global generator's seed functions that ``megengine.random.seed`` calls, which MegEngine's tests and some projects
import from here."""
from ..ops.builtin import *  # noqa: F401,F403
from ..ops.builtin import OpDef  # noqa: F401


def set_global_rng_seed(seed):
    """Seed the global generator: :func:`megxla.random.seed`, at MegEngine's path.

    Example:
        >>> set_global_rng_seed(111); get_global_rng_seed()
        111
    """
    from ...random import seed as _seed  # (MegEngine's path for a function of the random layer: layer 2, see
    # tests/test_layers.py; core itself never imports this module)
    _seed(seed)


def get_global_rng_seed():
    """The seed of the global generator: the latest one given to ``seed`` (at start, the import time's seconds,
    as MegEngine's).

    Example:
        >>> set_global_rng_seed(7); get_global_rng_seed()
        7
    """
    from ...random import _rng
    return _rng._global._seed
