"""``megengine.quantization.internal_fake_quant``: in MegEngine 1.13 this module only gathers the names the
fake-quantization internals are built from (``from ... import *`` of it gives them); kept so that such imports
work. The fake quantizers themselves are in :mod:`.fake_quant`."""
from functools import partial

from .. import functional as F
from ..autodiff import Function
from .fake_quant import _FakeQuantize
from .observer import MinMaxObserver
from .qconfig import QConfig
from .utils import QParams

__all__ = ["partial", "F", "Function", "MinMaxObserver", "QConfig", "QParams"]
