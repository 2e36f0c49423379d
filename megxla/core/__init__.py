"""megxla's core: the op registry (``_op``), the one dispatch point (``_dispatch``) and ``Tensor``."""
from ._tensor import Tensor, Parameter, _install_operators
from . import _dispatch
from ._dispatch import apply, OpError
from . import ops
from ._op import PRIMITIVES, Primitive, Op, primitive
from ._imperative_rt.core2 import get_option, set_option  # MegEngine: megengine.core.set_option

_install_operators()

from . import _mlir_context  # noqa: E402

_mlir_context.install()  # (JAX lowers small programs -- op kernels, small clusters -- in a reused MLIR context)
