"""``megxla.traced_module``: trace a Module into an editable graph of module calls, function calls and Tensor
method calls (MegEngine's TracedModule), rewrite it, run it as a Module, save it with ``megxla.save``."""
from .checker import disable_default_checker, enable_expr_checker
from .passes import optimize
from .pytree import register_supported_type
from .traced_module import TracedModule, _register_all_builtin_module, register_as_builtin, trace_module, wrap

_register_all_builtin_module()

__all__ = ["register_as_builtin", "register_supported_type", "trace_module", "wrap", "TracedModule", "optimize",
           "enable_expr_checker", "disable_default_checker"]
