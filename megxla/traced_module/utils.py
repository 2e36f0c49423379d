"""Helpers shared by TracedModule code and its users (MegEngine's ``traced_module.utils``)."""
from .expr import get_subattr
from .tracer import convert_kwargs_to_args as _convert_kwargs_to_args  # noqa: F401  (MegEngine's name)

__all__ = ["get_subattr", "assign_attr"]


def assign_attr(obj, module, target: str):
    """Set ``module.a.b = obj`` for ``target="a.b"``.

    Example:
        >>> import megxla.module as M
        >>> seq = M.Sequential(M.ReLU())
        >>> assign_attr(M.Identity(), seq, "layer0")
    """
    *head, last = target.split(".")
    setattr(get_subattr(module, ".".join(head)), last, obj)
