"""Checks ``trace_module`` runs on what it traced."""
from .traced_module import _CHECKS

__all__ = ["enable_expr_checker", "disable_default_checker"]


def enable_expr_checker():
    r"""Make every following ``trace_module`` run the traced graph on the example inputs and compare its
    outputs with the module's own (AssertionError on a mismatch).

    Example:
        >>> import megxla.traced_module as tm
        >>> tm.enable_expr_checker()
        >>> tm.traced_module._CHECKS["expr"] = False  # (off again for the other examples)
    """
    _CHECKS["expr"] = True


def disable_default_checker():
    r"""Turn off the checks ``trace_module`` does by default: the traced module's run on the example inputs
    compared with the module's outputs (MegEngine's default check), and a warning for each Parameter the graph
    captured as a constant (one that is not an attribute of the traced module, so it would not be trained or
    saved).

    Example:
        >>> import megxla.traced_module as tm
        >>> tm.disable_default_checker()
        >>> tm.traced_module._CHECKS["default"] = True
    """
    _CHECKS["default"] = False
