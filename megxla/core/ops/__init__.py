"""All primitives, by family. Importing this package registers them in ``megxla.core._op.PRIMITIVES``."""
from . import elemwise, reduction, shape, indexing, linalg, nn, random, sort, vision, quant, psroi, padded  # noqa: F401
