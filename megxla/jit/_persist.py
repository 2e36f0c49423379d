"""Lowered programs kept across processes: a warm start finds a cluster's program without tracing it again.

JAX's persistent compilation cache is keyed by the *lowered* program, so a process that starts warm still traces
and lowers every op of a cluster before it can look the executable up: ~1.1 s of the 2.4 s first eager step of the
zoo's MobileNetV2 (330 ops and their gradients) under auto-jit, more than the cached executable takes to load. Here
the lowered program itself is kept, serialized by ``jax.export`` (JAX's public, versioned format for lowered
programs), under a key made of what defines it: the op sequence with every static parameter, the input types, the
outputs, which inputs are donated -- and megxla's source, JAX's version and the backend, so that nothing else can
change what the ops lower to. A warm start deserializes it (~10 ms), wraps it into the executable's signature
(~0.15 s) and JAX's cache gives the executable (principle 6: executables live only there; this file keeps the step
before it, as torch.compile's FX-graph cache does before Inductor's).

Only where JAX's persistent cache is on (``megxla.config.compilation_cache``), only for programs whose every op has
a key that means the same in another process (a parameter that is an object of the user's -- a function from a
script, a closure -- has none: such clusters lower as before), and only in one-device programs (a cross-process
collective makes the program SPMD: lowered as before). Anything that fails here -- an op ``jax.export`` cannot
serialize, a file another version wrote -- falls back to lowering as before.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import threading

import jax
import jax.numpy as jnp
import numpy as np

from . import _schedules, _tiers

__all__ = ["fingerprint", "compile_cached", "prewarm", "kept", "kept_optimized", "known_shapes", "keep_shapes", "stats"]

MAX_FILES = 4096  # programs kept; the oldest tenth goes when there are more
SUBDIR = "megxla-lowered"
ENABLED = os.environ.get("MEGXLA_LOWERED_CACHE", "1").strip().lower() not in ("0", "false", "no", "off", "")

stats = {"hits": 0, "stored": 0, "skipped": 0, "failed": 0, "shapes_known": 0}
_lock = threading.Lock()
_salt: list = []
_op_texts: dict = {}  # op -> its key text, or None (none: a user's parameter)
OP_TEXTS_KEPT = 8192  # (bounded: it keeps its ops alive, and an op may be bound anew every step)
_shapes: list = []  # [dict key -> output avals (or None)] once read; [] before
MAX_SHAPES_BYTES = 8 << 20  # the shape table starts again past this


class _Unstable(Exception):
    """A parameter whose value means nothing in another process."""


def _stable(v, out):
    """Append a text of ``v`` that is the same in every process with the same source (or raise _Unstable)."""
    from ..core._op import Op
    t = type(v)
    if v is None or t in (bool, int, str, float, complex):
        out.append(repr(v))  # (exact: a float's repr round-trips, and tells -0.0 from 0.0)
    elif t is tuple:
        out.append("(")
        for x in v:
            _stable(x, out)
            out.append(",")
        out.append(")")
    elif t is Op:
        if v.transient:
            raise _Unstable(v.name)
        _prim(v.prim, out)
        out.append(v.name)
        out.append("[")
        for k, x in v.params:
            out.append(k)
            out.append("=")
            _stable(x, out)
            out.append(";")
        out.append("]")
    elif isinstance(v, np.dtype):
        out.append("dtype:" + v.name + (repr(v.metadata) if v.metadata else ""))
    elif isinstance(v, type) or callable(v):
        out.append("fn:" + _function_name(v))
    elif isinstance(v, (np.generic,)):
        out.append(f"{v.dtype.str}:{v!r}")
    elif isinstance(v, frozenset):
        out.append("{" + ",".join(sorted(_text(x) for x in v)) + "}")
    else:
        raise _Unstable(f"{t.__module__}.{t.__qualname__}")


def _text(v):
    out = []
    _stable(v, out)
    return "".join(out)


def _function_name(fn):
    """``module.qualname`` of a function or class of megxla (or of NumPy / JAX) that is not a closure."""
    mod = getattr(fn, "__module__", None) or ""
    qual = getattr(fn, "__qualname__", None) or ""
    if isinstance(fn, type) and mod in ("numpy", "builtins") or mod.startswith(("numpy.", "jax.", "jax._src")):
        return f"{mod}.{qual}"
    if not mod.startswith("megxla.") or "<" in qual or getattr(fn, "__closure__", None):
        raise _Unstable(f"{mod}.{qual}")  # (a user's function: its meaning is not in megxla's source)
    return f"{mod}.{qual}"


def _prim(prim, out):
    """A primitive is its (unique) name where megxla's source registered it (its implementation may be a closure a
    factory of megxla made at import: that source is in the key). An implementation that is JAX's or NumPy's own
    function (``neg`` is ``jnp.negative``, ``detach`` is ``lax.stop_gradient``) is named in the key: their versions
    are in the key too. (Rejected as a user's primitive, they kept every cluster holding one of 22 such ops --
    ``-x``, ``square``, ``detach``, ``isnan``, logical and bitwise ops -- out of the kept programs: a warm start
    traced and lowered the detection loop's clusters again, ~140 ms each.) Any other primitive has no key."""
    for fn in (prim.impl, prim.grad):
        if fn is None:
            continue
        mod = getattr(fn, "__module__", None) or ""
        if mod.startswith("megxla."):
            continue
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
        if not name or "<" in name or not (mod == "numpy" or mod.startswith(("numpy.", "jax.", "jax._src"))):
            raise _Unstable(prim.name)
        out.append(f"impl:{mod}.{name};")


def _source_salt():
    """megxla's source, JAX's and jaxlib's versions, the backend and the configuration JAX lowers with."""
    if not _salt:
        h = hashlib.sha256()
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for dirpath, dirnames, files in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for f in sorted(files):
                if f.endswith(".py"):
                    p = os.path.join(dirpath, f)
                    h.update(os.path.relpath(p, root).encode())
                    with open(p, "rb") as fh:
                        h.update(fh.read())
        import jaxlib
        dev = jax.devices()[0]
        h.update(repr((jax.__version__, jaxlib.__version__, dev.platform, getattr(dev, "device_kind", ""))).encode())
        _salt.append(h.hexdigest())
    return _salt[0]


def _settings():
    """The settings JAX lowers the same ops differently under, read at every key: a program can change them (megxla's
    ``config.matmul_precision`` sets JAX's matmul precision at any time)."""
    c = jax.config
    return repr((c.jax_enable_x64, str(c.jax_default_matmul_precision), str(c.jax_default_prng_impl),
                 getattr(c, "jax_threefry_partitionable", None), os.environ.get("XLA_FLAGS", "")))


def fingerprint(ops, in_ids, in_avals, out_ids, donate, tag=""):
    """A hex key of a program -- ``ops`` ``[(op, input ids, output ids)]`` on inputs ``in_ids`` of types
    ``in_avals`` ``[(shape, dtype, weak_type)]``, returning ``out_ids``, donating input positions ``donate``; ``tag``:
    how it is replayed -- the same in every process with this source, or None where an op's parameters mean nothing
    elsewhere. Ids are numbered again in order of appearance (a trace's value ids depend on the process's history).

    Example:
        >>> from megxla.core.ops import elemwise  # noqa: F401  (registers "add")
        >>> from megxla.core._op import PRIMITIVES
        >>> add, f32 = PRIMITIVES["add"].bind(), ((2,), np.dtype("float32"), False)
        >>> k = fingerprint([(add, (0, 1), (2,))], [0, 1], [f32, f32], (2,), ())
        >>> len(k), k == fingerprint([(add, (7, 9), (12,))], [7, 9], [f32, f32], (12,), ())
        (64, True)
    """
    if jax.process_count() > 1:
        return None  # (programs of several processes lower as SPMD programs, see module doc)
    number = {v: i for i, v in enumerate(in_ids)}
    out = [_source_salt(), "|", _settings(), "|", tag, "|"]
    try:
        for op, ins, outs in ops:
            _stable(op, out)
            for v in outs:
                number.setdefault(v, len(number))
            out.append(repr(([number[v] for v in ins], [number[v] for v in outs])))
    except (_Unstable, KeyError):
        return None
    out.append(repr([(tuple(s), np.dtype(d).name, bool(w)) for s, d, w in in_avals]))
    out.append(repr(([number.get(v, -1 - i) for i, v in enumerate(out_ids)], tuple(donate))))
    return hashlib.sha256("".join(out).encode()).hexdigest()


def _op_text(op):
    t = _op_texts.get(op, _MISSING)
    if t is _MISSING:
        try:
            t = _text(op)
        except _Unstable:
            t = None
        if len(_op_texts) > OP_TEXTS_KEPT:
            _op_texts.clear()
        _op_texts[op] = t
    return t


_MISSING = object()


def _shape_key(op, in_avals):
    t = _op_text(op)
    if t is None:
        return None
    text = t + _settings() + repr([(tuple(s), np.dtype(d).name, bool(w)) for s, d, w in in_avals])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _shapes_path():
    directory = _directory()
    return None if directory is None else os.path.join(directory, f"shapes-{_source_salt()[:16]}.jsonl")


def _shape_table():
    if not _shapes:
        table = {}
        path = _shapes_path()
        if path is not None:
            try:
                with open(path, "rb") as fh:
                    for line in fh:
                        try:
                            k, outs = json.loads(line)
                        except ValueError:
                            continue  # (a line another process was writing when this one read)
                        table[k] = None if outs is None else tuple(
                            (tuple(shape), jnp.dtype(dt), bool(w)) for shape, dt, w in outs)
            except OSError:
                pass
        _shapes.append(table)
    return _shapes[0]


def known_shapes(op, in_avals):
    """``(True, output avals or None)`` where a process with this source inferred ``op``'s outputs for inputs
    ``in_avals`` ``[(shape, dtype, weak_type)]`` before (None: not collectable, its output shape depends on values),
    else ``(False, None)``: auto-jit skips tracing the op to learn its output types on a warm start."""
    if _directory() is None:
        return False, None
    key = _shape_key(op, in_avals)
    if key is None:
        return False, None
    table = _shape_table()
    if key in table:
        stats["shapes_known"] += 1
        return True, table[key]
    return False, None


def keep_shapes(op, in_avals, outs):
    """Keep the inferred output avals ``outs`` (or None) of ``op`` on ``in_avals`` for later processes."""
    path = _shapes_path()
    if path is None:
        return
    key = _shape_key(op, in_avals)
    if key is None:
        return
    table = _shape_table()
    if key in table:
        return
    table[key] = outs
    line = json.dumps([key, None if outs is None else [[list(s), np.dtype(d).name, w] for s, d, w in outs]]) + "\n"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path) and os.path.getsize(path) > MAX_SHAPES_BYTES:
            os.remove(path)
        # one write of one line in append mode: lines of concurrent processes do not interleave
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


_prewarm_started = [False]


def prewarm():
    """Load, on a background thread, what the first kept program to run needs: ``jax.export`` registers XLA:CPU's
    LAPACK handlers before it lowers an exported program, which imports SciPy -- 0.25-0.3 s of a warm first step
    (the Transformer's under auto-jit: 1.08 s, 0.83 s with it loaded before). Called where a compiled program will
    come (auto-jit switched on, a trace made); once per process, and only where programs are kept.

    Example:
        >>> prewarm(); prewarm()  # (the second call does nothing)
    """
    if _prewarm_started[0] or _directory() is None:
        return
    _prewarm_started[0] = True

    def load():
        try:
            from jax._src.lax import linalg  # (JAX's own call, ahead of time: the names are JAX's, not public)
            linalg.initialize_lapack()
        except Exception:  # (another JAX: its first exported program loads them itself, as before)
            pass
    # Not a daemon: the interpreter waits for it at exit. A daemon thread still importing SciPy when a short program
    # ended (an error at its first step, a sys.exit) aborted the process as it finalized ("Fatal Python error:
    # PyGILState_Release", SIGABRT) instead of printing the traceback and exiting with the program's status
    thread = _prewarm_thread[0] = threading.Thread(target=load, name="megxla-prewarm", daemon=False)
    thread.start()


_prewarm_thread = [None]


def _finish_prewarm():
    """(before a fork) Wait for the prewarm thread: a process forked while it imported SciPy inherited the locks it
    held, and hung for ever at its first kept program (``dist.launcher``'s ranks under auto-jit: rank 0 stuck in
    ``initialize_lapack``). It takes ~0.3 s once per process; the bound is for a thread stuck for another reason."""
    thread = _prewarm_thread[0]
    if thread is not None and thread.is_alive() and thread is not threading.current_thread():
        thread.join(timeout=60)


os.register_at_fork(before=_finish_prewarm, after_in_child=lambda: _prewarm_thread.__setitem__(0, None))


def _directory():
    if not ENABLED:
        return None
    base = jax.config.jax_compilation_cache_dir
    if not base or "://" in str(base):
        return None
    return os.path.join(base, SUBDIR)


def _wrap(exported, weak_out, donate, name):
    """``jax.jit`` of the exported program with the signature the cluster's executable has: donation, and the
    weak types of its outputs (which ``jax.export``'s format does not keep: an output's weak type decides how a
    later op promotes it, so eager's dtypes depend on it)."""
    from jax._src.lax.lax import _convert_element_type

    def run(*arrays):
        outs = exported.call(*arrays)
        return tuple(_convert_element_type(o, o.dtype, weak_type=True) if w else o for o, w in zip(outs, weak_out))

    run.__name__ = run.__qualname__ = name
    return jax.jit(run, donate_argnums=donate)


def _compile(jitted, structs, compile=None, key=None):
    """``jitted.lower(*structs).compile()``, its results not *committed* to the device.

    JAX marks the results of any program holding a ``call_exported`` committed (its check for memory-space
    transfers lists every exported result's memory space), unlike those of the same program lowered from Python.
    A committed array keys JAX's eager dispatch apart from an uncommitted one of the same type, so each eager
    kernel met both compiled and lowered twice (the detection loop: 1,285 lowerings in 30 steps instead of 760,
    +5 s over its first 100 steps). The program is one device's, as the lowered-from-Python one: its results are
    marked uncommitted as that one's are (a flag of the lowering JAX reads when it builds the result handler; where
    a JAX version has no such flag, they stay committed, which is only slower)."""
    lowered = jitted.lower(*structs)
    args = getattr(getattr(lowered, "_lowering", None), "compile_args", None)
    if isinstance(args, dict) and args.get("committed") and args.get("num_devices", 1) == 1:
        args["committed"] = False
    # (a compile a signal may stop waiting for, where the caller can give it up: _tiers.interruptible; ``key``: the
    # program's fingerprint, so that its next try takes that compile)
    if compile is not None:
        return compile(lowered)
    # (XLA's schedule of a long-running program, chosen by timing: _schedules)
    return _schedules.choose(lowered, lambda: _tiers.foreground(lowered.compile, key), key)


def _read_head(fh):
    """The JSON head of a kept program's file (``fh`` at its start), leaving ``fh`` at the serialized program."""
    (n,) = struct.unpack("<I", fh.read(4))
    return json.loads(fh.read(n))


def _read_raw(path):
    with open(path, "rb") as fh:
        return _read_head(fh), fh.read()


def _read(path):
    from jax import export
    head, blob = _read_raw(path)
    return head, export.deserialize(bytearray(blob))


def _write(directory, path, head, blob):
    os.makedirs(directory, exist_ok=True)
    h = json.dumps(head).encode()
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<I", len(h)) + h + bytes(blob))
    os.replace(tmp, path)  # (atomic: a concurrent reader sees the old file or the whole new one)
    names = [n for n in os.listdir(directory) if n.endswith(".exported")]
    if len(names) > MAX_FILES:
        names.sort(key=lambda n: os.path.getmtime(os.path.join(directory, n)))
        for n in names[:len(names) // 10 + 1]:
            try:
                os.remove(os.path.join(directory, n))
            except OSError:
                pass


def compile_cached(replay, structs, donate, name, key, compile=None):
    """The compiled executable of ``replay`` on ``structs`` (``jax.ShapeDtypeStruct``, donated positions ``donate``)
    through the kept lowered program of ``key`` (:func:`fingerprint`), stored first if there is none; None where
    this does not apply (no persistent cache, no key, an op ``jax.export`` refuses, a program needing SPMD): the
    caller lowers as before. ``compile``: how the lowered program becomes the executable (default: its
    ``compile()``; auto-jit's tiers, ``_tiers.compile``)."""
    directory = _directory()
    if directory is None or key is None:
        stats["skipped"] += 1
        return None
    path = os.path.join(directory, key + ".exported")
    try:
        if os.path.exists(path):
            try:
                head, exported = _read(path)
                if head.get("format") == 1:
                    # (an earlier process compiled its optimized executable: JAX's cache holds it, no quick tier)
                    compiled = _compile(_wrap(exported, head["weak_out"], donate, name), structs,
                                        None if head.get("optimized") else compile, key)
                    if compile is None and not head.get("optimized"):
                        # (compiled optimized now -- a tier-up of quick parts -- where an earlier process stopped
                        # before: the next start loads it at once)
                        _mark(directory, path, head)
                    _note_optimized(compiled, directory, path, head)
                    stats["hits"] += 1
                    try:
                        os.utime(path)  # (recently used: kept when the directory is trimmed)
                    except OSError:
                        pass
                    return compiled
            except Exception:  # another version's file, a partial one: lowered again, and replaced
                pass
        from jax import export
        exp = export.export(jax.jit(replay))(*structs)
        weak_out = [bool(getattr(a, "weak_type", False)) for a in exp.out_avals]
        blob = exp.serialize()
        # The executable is compiled from the deserialized program, as a warm start will: the same lowered text,
        # so the warm start finds this executable in JAX's cache.
        exported = export.deserialize(blob)
        compiled = _compile(_wrap(exported, weak_out, donate, name), structs, compile, key)
    except Exception:
        stats["failed"] += 1
        return None
    try:
        # ("optimized": JAX's cache holds this program's optimized executable, not only a quick tier's)
        head = {"format": 1, "weak_out": weak_out, "optimized": compile is None}
        with _lock:
            _write(directory, path, head, blob)
        stats["stored"] += 1
        _note_optimized(compiled, directory, path, head)
    except OSError:  # (a full disk, a read-only directory: the program is compiled all the same)
        stats["failed"] += 1
    return compiled


def _note_optimized(compiled, directory, path, head):
    """Where ``compiled`` runs a quick tier first (``_tiers``), mark the kept program once its optimized executable
    is compiled (and so in JAX's cache): a warm start then loads that one at once."""
    if not hasattr(compiled, "on_optimized") or head.get("optimized"):
        return

    compiled.on_optimized = lambda: _mark(directory, path, head)


def _mark(directory, path, head):
    """Note in the kept program's file that its optimized executable is in JAX's cache."""
    try:
        with _lock:
            _, blob = _read_raw(path)
            _write(directory, path, dict(head, optimized=True), blob)
    except (OSError, ValueError):
        pass


def kept(key):
    """Whether the program of ``key`` is kept: a process compiled it, so JAX's cache likely holds its executable
    (auto-jit's early launches compile theirs at once then, see ``_autojit.EARLY_RENT``).

    Example:
        >>> kept(None)
        False
    """
    directory = _directory()
    return directory is not None and key is not None and os.path.exists(os.path.join(directory, key + ".exported"))


def kept_optimized(key):
    """Whether the program of ``key`` is kept and its optimized executable is in JAX's cache (so a compile of it
    loads that executable: no quick tier is needed).

    Example:
        >>> kept_optimized(None)
        False
    """
    directory = _directory()
    if directory is None or key is None:
        return False
    try:
        with open(os.path.join(directory, key + ".exported"), "rb") as fh:
            head = _read_head(fh)
    except (OSError, ValueError, struct.error):
        return False
    return isinstance(head, dict) and head.get("format") == 1 and bool(head.get("optimized"))
