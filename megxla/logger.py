"""Logging with MegEngine's names (``megengine.logger``).

``get_logger(name)`` returns a standard :mod:`logging` logger with one stderr handler formatted like
MegEngine's (``date level message``, coloured on terminals). Loggers made here are remembered so
``set_log_level`` reaches all of them; ``set_log_file`` reaches every logger this formatter prints, made before or
after it. MegBrain is MegEngine's C++ engine; megxla's engine is JAX/XLA, so ``set_mgb_log_level`` sets the level
of JAX's ``jax`` logger.

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
    r"""MegEngine's log formatter: ``date [level] message`` on the console (the date green, warnings and errors
    tagged and coloured when the stream is a terminal), and, once :func:`set_log_file` named a file, each record
    also written there as ``[date line@file:logger] [level] message``.

    NOTE: the file is written here, in ``format``, not by a handler of its own, as MegEngine does: every logger
    formatted by this class writes to it, also the loggers made after ``set_log_file`` (a script's
    ``set_log_file("log.txt")`` then ``logger = get_logger(__name__)``).

    Args:
        fmt, datefmt, style, validate, defaults: as :class:`logging.Formatter` (so the date defaults to
            logging's ``2026-12-31 12:00:00,000``; :func:`get_logger`'s handlers pass ``%d %H:%M:%S``, as
            MegEngine's).
        color: colour the console lines (default: when stderr is a terminal).

    Example:
        >>> import io, logging
        >>> stream = io.StringIO(); handler = logging.StreamHandler(stream)
        >>> handler.setFormatter(MegEngineLogFormatter(color=False))
        >>> log = logging.getLogger("megxla.doc.formatter"); log.addHandler(handler); log.propagate = False
        >>> log.warning("disk almost full")
        >>> day, time, message = stream.getvalue().split(" ", 2); message  # "31 12:00:00 WRN disk almost full"
        'WRN disk almost full\n'
    """

    log_fout = None
    date_full = "[%(asctime)s %(lineno)d@%(filename)s:%(name)s] "
    date = "%(asctime)s "
    date_color = "32"
    msg = "%(message)s"
    max_lines = 256

    def __init__(self, fmt=None, datefmt=None, style="%", validate=True, *, defaults=None, color=None):
        super().__init__(fmt, datefmt, style, validate, defaults=defaults)
        self._color = sys.stderr.isatty() if color is None else color

    def _tint(self, text, code):
        return f"\x1b[{code}m{text}\x1b[0m" if self._color else text

    def _level_tag(self, record):
        if record.levelno == logging.DEBUG:
            return "DBG ", "36"
        if record.levelno == logging.WARNING:
            return "WRN ", "1;31"
        if record.levelno == logging.ERROR:
            return "ERR ", "1;4;31"
        return "", None

    def _with_fmt(self, fmt, record):
        self._style._fmt = fmt
        return super().format(record)

    def format(self, record):
        """Format one record as MegEngine does (writing it to the log file too, when one is set)."""
        tag, code = self._level_tag(record)
        if self.log_fout is not None:
            formatted = self._with_fmt(self.date_full + tag + self.msg, record)
            nr_line = formatted.count("\n") + 1
            if nr_line >= self.max_lines:
                head, body = formatted.split("\n", 1)
                formatted = "\n".join([head, f"BEGIN_LONG_LOG_{nr_line - 1}_LINES{{", body,
                                       f"}}END_LONG_LOG_{nr_line - 1}_LINES"])
            self.log_fout.write(formatted + "\n")
            self.log_fout.flush()
        message = self.msg if code is None else self._tint(tag + self.msg, code)
        formatted = self._with_fmt(self._tint(self.date, self.date_color) + message, record)
        if record.exc_text or record.exc_info:  # (MegEngine indents a traceback by two spaces, coloured apart)
            b = formatted.find("Traceback ")
            if b != -1:
                formatted = formatted[:b] + self._tint("  " + formatted[b:].replace("\n", "\n  "), "34")
        lines = formatted.split("\n")
        if len(lines) >= self.max_lines:
            remain = self.max_lines // 2
            removed = len(lines) - remain * 2
            if removed > 0:
                omitted = self._tint(f"[{removed} log lines omitted (would be written to output file if "
                                     "set_log_file() has been called;\n the threshold can be set at "
                                     "MegEngineLogFormatter.max_lines)]", "35")
                formatted = "\n".join(lines[:remain] + [omitted] + lines[-remain:])
        return formatted


class MegBrainLogFormatter(MegEngineLogFormatter):
    r"""The formatter MegEngine uses for its C++ engine's messages (here: JAX/XLA's), tagged ``mgb``.

    Args:
        fmt, datefmt, style, validate, defaults, color: as :class:`MegEngineLogFormatter`.

    Example:
        >>> import io, logging
        >>> stream = io.StringIO(); handler = logging.StreamHandler(stream)
        >>> handler.setFormatter(MegBrainLogFormatter(color=False))
        >>> log = logging.getLogger("megxla.doc.mgb"); log.addHandler(handler); log.propagate = False
        >>> log.setLevel(logging.INFO); log.info("compiled")
        >>> stream.getvalue().split(" ", 1)[1]  # "31 12:00:00[mgb] compiled"
        '...[mgb] compiled\n'
    """

    date = "%(asctime)s[mgb] "  # (MegEngine's: the date, tagged, in yellow)
    date_color = "33"


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
    if name is None:
        # The root logger at INFO prints JAX's own INFO lines too, and JAX starts its backends at the first op, after
        # a script's ``get_logger()``: "Unable to initialize backend 'tpu'" on every CPU or GPU machine, a line
        # MegEngine's users never see. Its warnings still pass; a level set on that logger is kept.
        bridge = logging.getLogger("jax._src.xla_bridge")
        if bridge.level == logging.NOTSET:
            bridge.setLevel(logging.WARNING)
    logger.propagate = False
    logger.setLevel(_default_level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(datefmt="%d %H:%M:%S"))  # MegEngine's call: any Formatter class takes it
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
    # (checked before anything changes; the errors are the ones MegEngine's ``logger.setLevel(level)`` raises)
    if isinstance(level, str):
        name, level = level, logging.getLevelName(level.upper())
        if not isinstance(level, int):
            raise ValueError(f"Unknown level: {name!r}")
    elif not isinstance(level, int):
        raise TypeError(f"Level not an integer or a valid string: {level!r}")
    old, _default_level = _default_level, level
    if update_existing:
        for logger in _all_loggers:
            logger.setLevel(level)
    return old


def set_log_file(fout, mode="a"):
    """Also write every record that a logger of :func:`get_logger` prints to ``fout``, in MegEngine's file format
    (``[date line@file:logger] message``); loggers made later write there too.

    Args:
        fout: file path, or a text stream (anything with ``write`` and ``flush``).
        mode: file open mode for a path.

    Example:
        >>> import io
        >>> stream = io.StringIO(); set_log_file(stream)
        >>> get_logger("megxla.doc.later").warning("saved")
        >>> "WRN saved" in stream.getvalue()
        True
        >>> MegEngineLogFormatter.log_fout = None
    """
    if isinstance(fout, (str, os.PathLike)):
        fout = open(fout, mode)
    MegEngineLogFormatter.log_fout = fout


def enable_debug_log():
    """Log everything (DEBUG level), megxla's loggers and JAX's.

    Example:
        >>> import logging
        >>> old, old_mgb = set_log_level("INFO"), set_mgb_log_level("INFO")  # (to restore below)
        >>> enable_debug_log()
        >>> get_logger("megxla.doc.debug").level == logging.DEBUG, logging.getLogger("jax").level == logging.DEBUG
        (True, True)
        >>> _ = set_log_level(old), set_mgb_log_level(old_mgb)
    """
    set_log_level(logging.DEBUG)
    set_mgb_log_level(logging.DEBUG)


def set_mgb_log_level(level):
    """Set the log level of the engine underneath (JAX/XLA's ``jax`` logger); returns the previous level.

    Args:
        level: a :mod:`logging` level or name (MegEngine's ``"DEBUG"``, ``"INFO"``, ``"WARNING"``, ``"ERROR"``).

    Returns:
        the previous level.

    Example:
        >>> import logging
        >>> old = set_mgb_log_level("ERROR")
        >>> logging.getLogger("jax").level == logging.ERROR
        True
        >>> _ = set_mgb_log_level(old)
    """
    if isinstance(level, str):
        name = level.upper()
        name, level = level, logging.getLevelName("WARNING" if name == "WARN" else name)
        if not isinstance(level, int):
            raise ValueError(f"Unknown level: {name!r}")  # (MegEngine's, from logging)
    elif not isinstance(level, int):
        raise TypeError(f"Level not an integer or a valid string: {level!r}")
    jax_logger = logging.getLogger("jax")
    old = jax_logger.level
    jax_logger.setLevel(level)
    return old


@contextlib.contextmanager
def replace_mgb_log_level(level):
    """Context manager: the engine's log level is ``level`` inside, restored on exit.

    Args:
        level: a :mod:`logging` level or name, as :func:`set_mgb_log_level`.

    Example:
        >>> import logging
        >>> before = logging.getLogger("jax").level
        >>> with replace_mgb_log_level("ERROR"):
        ...     logging.getLogger("jax").level == logging.ERROR
        True
        >>> logging.getLogger("jax").level == before
        True
    """
    old = set_mgb_log_level(level)
    try:
        yield
    finally:
        set_mgb_log_level(old)
