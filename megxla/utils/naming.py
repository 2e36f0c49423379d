"""``megengine.utils.naming``: naming scopes (``AutoNaming``, ``push_scope``, ``pop_scope``, ``record_scope``).

The implementation is :mod:`megxla.core._naming` (in ``core`` so that modules can open scopes).

Example:
    >>> from megxla.utils.naming import AutoNaming, record_scope
    >>> with record_scope("net"):
    ...     AutoNaming.gen_name("out")
    'net.out'
"""
from ..core._naming import AutoNaming, pop_scope, push_scope, record_scope, set_module_scopes

__all__ = ["AutoNaming", "push_scope", "pop_scope", "record_scope", "set_module_scopes"]
