"""Logging with MegEngine's names (``megengine.logger``).

``get_logger(name)`` returns a standard :mod:`logging` logger with one stderr handler formatted like
MegEngine's (``[date level file:line] message``, coloured on terminals). Loggers made here are remembered so
``set_log_level`` / ``set_log_file`` reach all of them. MegBrain is MegEngine's C++ engine; megxla's engine is
JAX/XLA, so ``set_mgb_log_level`` sets the level of JAX's ``jax`` logger.

The default level comes from ``$MEGENGINE_LOGGING_LEVEL`` (as in MegEngine), default ``INFO``.

Example:
    >>> log = get_logger("megxla.example")
    >>> old = set_mgb_log_level("ERROR")
    >>> with replace_mgb_log_level(old):
    ...     pass
"""
import contextlib
import logging
import os
import sys

__all__ = ["MegEngineLogFormatter", "MegBrainLogFormatter", "get_logger", "set_log_level", "set_log_file",
           "enable_debug_log", "set_mgb_log_level", "replace_mgb_log_level"]

_default_level = logging.getLevelName(os.environ.get("MEGENGINE_LOGGING_LEVEL", "INFO").upper())
if not isinstance(_default_level, int):
    _default_level = logging.INFO
_all_loggers = []


class MegEngineLogFormatter(logging.Formatter):
    """MegEngine's log line: ``[date level file:line] message``; warnings and errors are tagged (and
    coloured when the stream is a terminal)."""

    log_fout = None
    date_full = "[%(asctime)s %(lineno)d@%(filename)s:%(name)s] "
    date = "%(asctime)s "
    msg = "%(message)s"
    max_lines = 256

    def __init__(self, fmt=None, datefmt=None, style="%", validate=True, *, defaults=None, color=None):
        super().__init__(fmt, datefmt or "%d %H:%M:%S", style, validate, defaults=defaults)
        self._color = sys.stderr.isatty() if color is None else color

    def _tint(self, text, code):
        return f"\x1b[{code}m{text}\x1b[0m" if self._color else text

    def _level_tag(self, record):
        if record.levelno == logging.DEBUG:
            return self._tint("DBG", "36"), ""
        if record.levelno == logging.WARNING:
            return self._tint("WRN", "1;31"), ""
        if record.levelno >= logging.ERROR:
            return self._tint("ERR", "1;4;31"), ""
        return "", ""

    def format(self, record):
        """Format one record as MegEngine does (long messages are cut to ``max_lines`` lines)."""
        tag, _ = self._level_tag(record)
        head = self._tint(f"[{self.formatTime(record, self.datefmt)} {record.filename}:{record.lineno}]", "32")
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            message = f"{message}\n{record.exc_text}"
        lines = message.split("\n")
        if len(lines) > self.max_lines:
            lines = lines[: self.max_lines] + [f"... ({len(lines) - self.max_lines} more lines)"]
        prefix = f"{head} {tag} " if tag else f"{head} "
        return prefix + "\n".join(lines)


class MegBrainLogFormatter(MegEngineLogFormatter):
    """The formatter MegEngine uses for its C++ engine's messages (here: JAX/XLA's), tagged ``mgb``."""

    def format(self, record):
        return "(mgb) " + super().format(record)


def get_logger(name=None, formatter=MegEngineLogFormatter):
    """A :mod:`logging` logger with MegEngine's stderr formatting (set up once per name).

    Args:
        name: logger name; None gives Python's root logger, as MegEngine's ``logging.getLogger(name)`` does (a
            script's ``logging = get_logger()`` then prints every library's INFO lines in MegEngine's format).
        formatter: the :class:`logging.Formatter` subclass used for its handler.

    Returns:
        the logger.

    Example:
        >>> get_logger("megxla.doc").name
        'megxla.doc'
    """
    logger = logging.getLogger(name)
    if getattr(logger, "_megxla_init_done", False):
        return logger
    logger._megxla_init_done = True
    logger.propagate = False
    logger.setLevel(_default_level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter())
    handler.setLevel(0)
    del logger.handlers[:]
    logger.addHandler(handler)
    _all_loggers.append(logger)
    return logger


def set_log_level(level, update_existing=True):
    """Set the default level of loggers made by :func:`get_logger` (and of the existing ones).

    Args:
        level: a :mod:`logging` level (``logging.INFO``) or its name (``"INFO"``).
        update_existing: also change the loggers already made.

    Returns:
        the default level before (as MegEngine's).

    Example:
        >>> old = set_log_level("ERROR"); _ = set_log_level(old)
    """
    global _default_level
    if isinstance(level, str):
        level = logging.getLevelName(level.upper())
    if not isinstance(level, int):
        raise ValueError(f"set_log_level: unknown level {level!r}")
    old, _default_level = _default_level, level
    if update_existing:
        for logger in _all_loggers:
            logger.setLevel(level)
    return old


def set_log_file(fout, mode="a"):
    """Also write every megxla log record to ``fout`` (a path or an open stream).

    Args:
        fout: file path or text stream.
        mode: file open mode for a path.
    """
    handler = logging.FileHandler(fout, mode) if isinstance(fout, (str, os.PathLike)) else logging.StreamHandler(fout)
    handler.setFormatter(MegEngineLogFormatter(color=False))
    MegEngineLogFormatter.log_fout = handler
    for logger in set(_all_loggers) | {get_logger("megxla")}:
        logger.addHandler(handler)


def enable_debug_log():
    """Log everything (DEBUG level), megxla's loggers and JAX's."""
    set_log_level(logging.DEBUG)
    set_mgb_log_level(logging.DEBUG)


def set_mgb_log_level(level):
    """Set the log level of the engine underneath (JAX/XLA's ``jax`` logger); returns the previous level.

    Args:
        level: a :mod:`logging` level or name (MegEngine's ``"DEBUG"``, ``"INFO"``, ``"WARNING"``, ``"ERROR"``).
    """
    if isinstance(level, str):
        name = level.upper()
        level = logging.getLevelName("WARNING" if name == "WARN" else name)
    if not isinstance(level, int):
        raise ValueError(f"set_mgb_log_level: unknown level {level!r}")
    jax_logger = logging.getLogger("jax")
    old = jax_logger.level
    jax_logger.setLevel(level)
    return old


@contextlib.contextmanager
def replace_mgb_log_level(level):
    """Context manager: the engine's log level is ``level`` inside, restored on exit."""
    old = set_mgb_log_level(level)
    try:
        yield
    finally:
        set_mgb_log_level(old)
