"""Which tensors hold values produced by a compiled executable: the bookkeeping lives in ``core._external``
(``Tensor._is_external_value`` reads it, and core imports nothing above itself); jit marks through it."""
from ..core._external import mark_external, is_external, unmark_external  # noqa: F401
