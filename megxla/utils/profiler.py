"""``megengine.utils.profiler``: record what megxla runs as a Chrome trace / Perfetto timeline.

:class:`Profiler` drives JAX's profiler (XLA's own tracer: host dispatch, compilation and every executed
kernel) and, on :meth:`Profiler.dump`, writes the timeline as ``<path>/<pid>.chrome_timeline.json`` — the
Chrome trace-event format that ``chrome://tracing``, https://ui.perfetto.dev and MegEngine's own viewer open.
``with_scopes=True`` makes every naming scope (:mod:`megxla.utils.naming`), including one per module call, an
annotated slice of the timeline;
each :meth:`Profiler.step` starts an annotated ``step N`` slice.

Example:
    >>> import megxla as mge, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> with Profiler(path=d) as prof:
    ...     _ = (mge.Tensor([1.0, 2.0]) * 2).numpy()
    >>> os.path.exists(prof.path)
    True
"""
from __future__ import annotations

import functools
import glob
import gzip
import os
import shutil
import tempfile
from contextlib import ContextDecorator
from typing import List

from ..logger import get_logger
from ..core import _lazy, _naming

__all__ = ["Profiler", "profile", "scope"]

_active: list = []  # JAX records one trace per process at a time


def _run_pending(reason):
    """Run auto-jit's pending cluster of the calling thread now, if any: a profiled window shows its own work."""
    if _lazy.FLUSH[0] is not None:
        _lazy.FLUSH[0](reason)


class Profiler(ContextDecorator):
    r"""Profile the code run inside ``with Profiler():`` (or a function decorated with ``@Profiler()``).

    Args:
        path: directory of the results (created on dump).
        format: the output format; ``"chrome_timeline.json"`` (Chrome trace events, also opened by Perfetto).
        formats: several formats (only ``"chrome_timeline.json"`` is produced by XLA's tracer).
        with_backtrace: accepted for MegEngine compatibility (XLA's tracer records no Python backtraces).
        with_scopes: annotate the timeline with the naming scopes opened while recording.
        kwargs: MegEngine's profiling options (``sample_rate``, ``profile_device``...): accepted; XLA's tracer
            always records host and device activity.
    """

    CHROME_TIMELINE = "chrome_timeline.json"
    valid_formats = {CHROME_TIMELINE}
    valid_options = {"sample_rate": 0, "profile_device": 1, "num_tensor_watch": 10, "enable_cupti": 0}

    def __init__(self, path: str = "profile", format: str = "chrome_timeline.json", formats: List[str] = None,
                 with_backtrace: bool = False, with_scopes: bool = False, **kwargs) -> None:
        formats = [format] if formats is None else list(formats)
        for f in formats:
            if f not in self.valid_formats:
                raise ValueError(f"Profiler: unsupported format {f!r}; supported: {sorted(self.valid_formats)}")
        unknown = set(kwargs) - set(self.valid_options)
        if unknown:
            raise TypeError(f"Profiler: unknown options {sorted(unknown)}; valid: {sorted(self.valid_options)}")
        self._path = str(path)
        self._formats = formats
        self._with_scopes = bool(with_scopes)
        self._options = {**self.valid_options, **kwargs}
        self._pid = os.getpid()
        self._logdir = None
        self._step = 0
        self._step_ann = None
        self._scopes_before = False

    @property
    def directory(self) -> str:
        """The directory results are written to."""
        return self._path

    @property
    def formats(self) -> List[str]:
        """The formats :meth:`dump` writes."""
        return list(self._formats)

    @property
    def path(self) -> str:
        """The path of the (first) result file."""
        return self.format_path(self._path, self._pid, self._formats[0])

    def format_path(self, path, pid, format):
        """``<path>/<pid>.<format>``."""
        return os.path.join(path, f"{pid}.{format}")

    def start(self):
        """Start recording."""
        if _active:
            raise RuntimeError("Profiler.start: another Profiler is already recording in this process")
        import jax
        _run_pending("Profiler.start")  # (auto-jit: work issued before the window runs before it)
        self._logdir = tempfile.mkdtemp(prefix="megxla_profile_")
        jax.profiler.start_trace(self._logdir, create_perfetto_trace=True)
        _active.append(self)
        self._scopes_before = (_naming._profiling[0], _naming.module_scopes[0], _naming._recording[0])
        _naming._recording[0] = True
        if self._with_scopes:
            _naming._profiling[0] = True
            _naming.set_module_scopes(True)
        self._step = 0
        self.step()

    def step(self):
        """Mark the start of the next training step on the timeline."""
        if not _active or _active[-1] is not self:
            raise RuntimeError("Profiler.step: this Profiler is not recording (call start() first)")
        import jax
        if self._step_ann is not None:
            _run_pending("Profiler.step")  # (auto-jit: the step's work runs inside its annotation)
            self._step_ann.__exit__(None, None, None)
        self._step_ann = jax.profiler.TraceAnnotation(f"step {self._step}")
        self._step_ann.__enter__()
        self._step += 1

    def stop(self):
        """Stop recording (the trace is kept until :meth:`dump`)."""
        if not _active or _active[-1] is not self:
            raise RuntimeError("Profiler.stop: this Profiler is not recording")
        import jax
        _run_pending("Profiler.stop")  # (auto-jit: the window's work runs inside it, as eagerly)
        if self._step_ann is not None:
            self._step_ann.__exit__(None, None, None)
            self._step_ann = None
        _naming._profiling[0], _naming.module_scopes[0], _naming._recording[0] = self._scopes_before
        try:
            jax.profiler.stop_trace()
        finally:
            _active.pop()

    def dump(self):
        """Write the recorded timeline to :attr:`path` (``<path>/<pid>.chrome_timeline.json``)."""
        if self._logdir is None:
            raise RuntimeError("Profiler.dump: nothing was recorded (use `with Profiler(): ...` or start/stop)")
        found = sorted(glob.glob(os.path.join(self._logdir, "plugins", "profile", "*", "perfetto_trace.json.gz")))
        if not found:
            raise RuntimeError(f"Profiler.dump: JAX's profiler wrote no trace under {self._logdir}")
        os.makedirs(self._path, exist_ok=True)
        out = self.format_path(self._path, self._pid, self.CHROME_TIMELINE)
        with gzip.open(found[-1], "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
        shutil.rmtree(self._logdir, ignore_errors=True)
        self._logdir = None
        get_logger(__name__).info("profiling results saved to %s", out)
        return out

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        self.dump()
        return False


class scope(ContextDecorator):
    """Mark a region of code as one named slice of a :class:`Profiler`'s timeline (MegEngine's
    ``utils.profiler.scope``; also a decorator). Outside a recording it costs a list append.

    Args:
        name: the slice's name.

    Example:
        >>> with scope("my_scope"):
        ...     y = mge.Tensor([1.0]) * 2
    """

    def __init__(self, name: str):
        self.name = str(name)

    def __enter__(self):
        from ..core._imperative_rt.core2 import push_scope
        push_scope(self.name)
        return self

    def __exit__(self, *exc):
        from ..core._imperative_rt.core2 import pop_scope
        pop_scope(self.name)
        return False


def profile(*args, **kwargs):
    """A :class:`Profiler` used as a decorator: ``@profile`` or ``@profile(path=...)``.

    Example:
        >>> @profile(path=tempfile.mkdtemp())
        ... def f():
        ...     return 1
    """
    if len(args) == 1 and callable(args[0]) and not kwargs:
        func = args[0]

        @functools.wraps(func)
        def wrapper(*a, **k):
            with Profiler():
                return func(*a, **k)
        return wrapper
    return Profiler(*args, **kwargs)
