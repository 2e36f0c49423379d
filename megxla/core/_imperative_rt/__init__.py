"""MegEngine's runtime module path (``megengine.core._imperative_rt``); :mod:`.core2` holds ``apply``."""
from . import core2  # noqa: F401
from ..dtypes import CompNode  # noqa: F401  (MegEngine code: `from megengine.core._imperative_rt import CompNode`)
from .common import OperatorNodeConfig, TensorAttr  # noqa: F401
