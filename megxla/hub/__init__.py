"""``megengine.hub``: build models from a ``hubconf.py`` (local directory or git host) and load pretrained
weights from URLs. See :mod:`megxla.hub.hub`."""
from . import exceptions, fetcher  # noqa: F401
from . import const, tools  # noqa: F401  (attributes of the package, as MegEngine's hub.py imports them)
from .hub import help, import_module, list, load, load_serialized_obj_from_url, pretrained  # noqa: A004
from .fetcher import download_from_url

__all__ = ["help", "import_module", "list", "load", "load_serialized_obj_from_url", "pretrained",
           "download_from_url"]
