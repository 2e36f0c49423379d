"""``megengine.core._imperative_rt.ops``: where MegEngine defines its builtin op descriptors (pickled files name
them here, e.g. the ``Apply`` exprs of a TracedModule); megxla's are :mod:`megxla.core.ops.builtin`'s."""
from ..ops.builtin import *  # noqa: F401,F403
from ..ops.builtin import OpDef  # noqa: F401
