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

import glob
import gzip
import json
import os
import re
import shutil
import tempfile
import time
import weakref
import atexit
from contextlib import ContextDecorator
from typing import List

from ..logger import get_logger
from ..core import _lazy, _naming

__all__ = ["Profiler", "profile", "scope", "is_profiling", "merge_trace_events"]

_running_profiler = None  # JAX records one trace per process at a time (MegEngine: one profiler at a time)
_living_profilers = weakref.WeakSet()  # stopped profilers whose trace is not written yet (written at exit)


def _run_pending(reason):
    """Run auto-jit's pending cluster of the calling thread now, if any: a profiled window shows its own work."""
    if _lazy.FLUSH[0] is not None:
        _lazy.FLUSH[0](reason)


class Profiler(ContextDecorator):
    r"""Profile the code run inside ``with Profiler():`` (or a function decorated with ``@Profiler()``).

    Args:
        path: directory of the results (created on dump).
        format: the output format; ``"chrome_timeline.json"`` (Chrome trace events, also opened by Perfetto).
        formats: several formats (only ``"chrome_timeline.json"`` is produced by XLA's tracer); empty: ``[format]``.
        with_backtrace: accepted for MegEngine compatibility (XLA's tracer records no Python backtraces).
        with_scopes: annotate the timeline with the naming scopes opened while recording.
        kwargs: MegEngine's profiling options (``sample_rate``, ``profile_device``, ``num_tensor_watch``,
            ``enable_cupti``: integers, kept in ``_options``); XLA's tracer always records host and device
            activity. Other keywords are ignored, as MegEngine ignores them.
    """

    CHROME_TIMELINE = "chrome_timeline.json"
    valid_formats = {CHROME_TIMELINE}
    valid_options = {"sample_rate": 0, "profile_device": 1, "num_tensor_watch": 10, "enable_cupti": 0}

    def __init__(self, path: str = "profile", format: str = "chrome_timeline.json", formats: List[str] = None,
                 with_backtrace: bool = False, with_scopes: bool = False, **kwargs) -> None:
        if not formats:
            formats = [format]
        # MegEngine checks these with assert: an AssertionError, its texts
        assert not isinstance(formats, str), "formats excepts list, got str"
        for f in formats:
            if f == "memory_flow.svg":  # (MegEngine's memory-flow plot of its own allocator: no XLA counterpart)
                raise ValueError(f"Profiler: unsupported format {f!r}; supported: {sorted(self.valid_formats)}")
            assert f in self.valid_formats, "unsupported format {}".format(f)
        self._path = path
        self._formats = list(formats)
        self._options = {opt: int(kwargs.pop(opt, val)) for opt, val in self.valid_options.items()}
        self._pid = "<PID>"  # (the recording process's id once started, as MegEngine's)
        self._with_scopes = with_scopes
        self.with_backtrace = with_backtrace
        self._logdir = None
        self._step = 0
        self._step_ann = None
        self._scopes_before = False
        self._start_ns = 0

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
        """The path of the result file (``<path>/<PID>.<format>`` before :meth:`start`; several formats:
        ``<path>/<pid>.{a,b}``)."""
        fmt = self._formats[0] if len(self._formats) == 1 else "{" + ",".join(self._formats) + "}"
        return self.format_path(self._path, self._pid, fmt)

    def format_path(self, path, pid, format):
        """``<path>/<pid>.<format>``."""
        return os.path.join(path, "{}.{}".format(pid, format))

    def start(self):
        """Start recording; returns the profiler."""
        global _running_profiler
        assert _running_profiler is None, "Profiler.start: another Profiler is already recording in this process"
        import jax
        _run_pending("Profiler.start")  # (auto-jit: work issued before the window runs before it)
        if self._logdir is not None:  # (a trace recorded before and not dumped: MegEngine keeps the last one)
            shutil.rmtree(self._logdir, ignore_errors=True)
            _living_profilers.discard(self)
        self._logdir = tempfile.mkdtemp(prefix="megxla_profile_")
        self._pid = os.getpid()
        self._start_ns = time.time_ns()
        jax.profiler.start_trace(self._logdir, create_perfetto_trace=True)
        _running_profiler = self
        self._scopes_before = (_naming._profiling[0], _naming.module_scopes[0], _naming._recording[0])
        _naming._recording[0] = True
        if self._with_scopes:
            _naming._profiling[0] = True
            _naming.set_module_scopes(True)
        self._step = 0
        self._next_step()
        return self

    def _next_step(self):
        import jax
        if self._step_ann is not None:
            _run_pending("Profiler.step")  # (auto-jit: the step's work runs inside its annotation)
            self._step_ann.__exit__(None, None, None)
        self._step_ann = jax.profiler.TraceAnnotation(f"step {self._step}")
        self._step_ann.__enter__()
        self._step += 1

    def step(self):
        """Mark the start of the next training step on the timeline; returns the profiler."""
        assert _running_profiler is not None, "Profiler.step: no Profiler is recording (call start() first)"
        _running_profiler._next_step()
        return self

    def stop(self):
        """Stop recording (the trace is kept until :meth:`dump`, or written when the process exits)."""
        global _running_profiler
        assert _running_profiler is self, "Profiler.stop: this Profiler is not recording"
        import jax
        _run_pending("Profiler.stop")  # (auto-jit: the window's work runs inside it, as eagerly)
        if self._step_ann is not None:
            self._step_ann.__exit__(None, None, None)
            self._step_ann = None
        _naming._profiling[0], _naming.module_scopes[0], _naming._recording[0] = self._scopes_before
        try:
            jax.profiler.stop_trace()
        finally:
            _running_profiler = None
            _living_profilers.add(self)

    def dump(self):
        """Write the last recorded timeline to :attr:`path` (``<path>/<pid>.chrome_timeline.json``): Chrome
        trace events, ``{"traceEvents": [...], "metadata": {"localTime": <start, ns>}, ...}``. Nothing to write
        (not recorded, or written already) does nothing."""
        if self._logdir is None or _running_profiler is self:
            return
        if not os.path.exists(self._path):
            os.makedirs(self._path)
        if not os.path.isdir(self._path):
            get_logger(__name__).warning("%s is not a directory, cannot write profiling results", self._path)
            return
        found = sorted(glob.glob(os.path.join(self._logdir, "plugins", "profile", "*", "perfetto_trace.json.gz")))
        if not found:
            raise RuntimeError(f"Profiler.dump: JAX's profiler wrote no trace under {self._logdir}")
        with gzip.open(found[-1], "rt", encoding="utf-8") as src:
            content = json.load(src)
        if isinstance(content, list):
            content = {"traceEvents": content}
        # (XLA's writer ends the list with an empty ``{}``; MegEngine's events all have a name and a phase)
        content["traceEvents"] = [e for e in content.get("traceEvents", ()) if e]
        # (MegEngine's top level: the events and the recording's start time; merge_trace_events aligns on it)
        content.setdefault("metadata", {})["localTime"] = str(self._start_ns)
        for fmt in self._formats:
            out = self.format_path(self._path, self._pid, fmt)
            with open(out, "w", encoding="utf-8") as dst:
                json.dump(content, dst, ensure_ascii=False, separators=(",", ":"))
            get_logger(__name__).info("profiling results written to %s", out)
        shutil.rmtree(self._logdir, ignore_errors=True)
        self._logdir = None
        _living_profilers.discard(self)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        self.dump()
        return False

    def __call__(self, func):
        func = super().__call__(func)
        func.__profiler__ = self
        return func

    def __del__(self):
        try:
            self.dump()
        except Exception:  # (at interpreter exit the modules dump needs may be gone)
            pass


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
    if len(args) == 1 and not kwargs and callable(args[0]):
        return Profiler()(args[0])
    return Profiler(*args, **kwargs)


def is_profiling() -> bool:
    """Whether a :class:`Profiler` is recording.

    Example:
        >>> is_profiling()
        False
    """
    return _running_profiler is not None


def merge_trace_events(directory: str):
    """Merge the ``<pid>.chrome_timeline.json`` files of ``directory`` (one per process of a distributed run)
    into ``directory/merge.chrome_timeline.json``, each process's events shifted by when its recording started.

    Args:
        directory: the profilers' ``path``.
    """
    names = sorted(n for n in os.listdir(directory) if re.match(r"\d+\.chrome_timeline\.json", n))
    contents, starts = [], []
    for name in names:
        with open(os.path.join(directory, name), "r", encoding="utf-8") as f:
            content = json.load(f)
        events = content["traceEvents"] if isinstance(content, dict) else content
        local = (content.get("metadata") or {}).get("localTime") if isinstance(content, dict) else None
        if local is None and events and events[0].get("name") == "Metadata":  # (MegEngine's older layout)
            local = events[0]["args"]["localTime"]
        contents.append(events)
        starts.append(None if local is None else int(local))
    known = [t for t in starts if t is not None]
    first = min(known) if known else 0
    merged = []
    for events, local in zip(contents, starts):
        shift = 0.0 if local is None else (local - first) / 1000.0  # (localTime in ns, ts in us)
        for event in events:
            if event.get("name") == "Metadata":
                continue
            if "ts" in event:
                event["ts"] = event["ts"] + shift
            merged.append(event)
    path = os.path.join(directory, "merge.chrome_timeline.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": merged}, f, ensure_ascii=False, separators=(",", ":"))
    get_logger(__name__).info("profiling results written to %s", path)


def _stop_current_profiler():
    """(atexit) Stop the recording profiler and write every trace not written yet, as MegEngine does."""
    if _running_profiler is not None:
        _running_profiler.stop()
    for prof in list(_living_profilers):
        prof.dump()


atexit.register(_stop_current_profiler)
