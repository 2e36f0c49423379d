"""``megengine.data.transform.vision``: the vision transforms (:mod:`.transform`) and the image functions they
are built on (:mod:`.functional`), at MegEngine's module paths."""
from . import functional  # noqa: F401
from .transform import *  # noqa: F401,F403
from .transform import __all__  # noqa: F401
