"""Logging helpers with MegEngine's names."""
import logging

_root = logging.getLogger("megxla")


def get_logger(name=None, formatter=None):
    """A logger under ``megxla``."""
    return _root if name is None else _root.getChild(name)


def set_log_level(level, update_existing=True):
    """Set the level of megxla's loggers."""
    _root.setLevel(level)


def set_log_file(fout, mode="a"):
    """Also log to a file (path or stream)."""
    handler = logging.FileHandler(fout, mode) if isinstance(fout, str) else logging.StreamHandler(fout)
    _root.addHandler(handler)


def enable_debug_log():
    """Log at DEBUG level."""
    _root.setLevel(logging.DEBUG)
