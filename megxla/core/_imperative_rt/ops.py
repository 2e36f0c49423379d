"""``megengine.core._imperative_rt.ops``: where MegEngine defines its builtin op descriptors (pickled files name
them here, e.g. the ``Apply`` exprs of a TracedModule); megxla's are :mod:`megxla.core.ops.builtin`'s -- and the
global generator's seed functions that ``megengine.random.seed`` calls, and the RNG handles of the RNG descriptors,
which MegEngine's tests and some projects import from here."""
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


def new_rng_handle(comp_node, seed: int) -> int:
    """A generator of its own, seeded with ``seed``, whose draws live on ``comp_node``: an int handle for the RNG
    descriptors' ``handle`` (``GaussianRNG(seed=seed, handle=h)``); it does not move the global generator.

    Example:
        >>> from megxla.core._imperative_rt.core2 import apply
        >>> from megxla.core.ops.builtin import UniformRNG
        >>> import megxla as mge
        >>> h = new_rng_handle("xpux", 7)
        >>> (y,) = apply(UniformRNG(seed=7, handle=h), mge.Tensor([3], dtype="int32")); y.shape
        (3,)
        >>> delete_rng_handle(h)
    """
    from ..ops.builtin import _new_rng_handle
    return _new_rng_handle(comp_node, seed)


def delete_rng_handle(handle: int) -> None:
    """Forget the generator ``handle`` (:func:`new_rng_handle`'s); using it afterwards raises ValueError.

    Example:
        >>> h = new_rng_handle("xpux", 1); delete_rng_handle(h)
    """
    from ..ops.builtin import _RNG_HANDLES, _rng_handle
    _rng_handle(handle, "delete_rng_handle")
    del _RNG_HANDLES[int(handle)]


def get_rng_handle_compnode(handle: int):
    """The device of the generator ``handle``.

    Example:
        >>> h = new_rng_handle("cpu0", 1); str(get_rng_handle_compnode(h)); delete_rng_handle(h)
        'cpu0:0'
    """
    from ..ops.builtin import _rng_handle
    return _rng_handle(handle, "get_rng_handle_compnode")[2]
