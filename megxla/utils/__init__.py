"""``megengine.utils``: naming scopes (:mod:`.naming`), model statistics (:mod:`.module_stats`), the
profiler (:mod:`.profiler`) and dumped-graph tools (:mod:`.comp_graph_tools`, :mod:`.network`). Submodules are imported on use, as in MegEngine."""
import importlib

__all__ = ["naming", "module_stats", "profiler", "comp_graph_tools", "network"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'megxla.utils' has no attribute {name!r}")
