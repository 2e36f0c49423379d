"""Global switches (``megengine.config``): module attributes that take effect when set.

MegEngine 1.13's names, mapped onto JAX/XLA's own engines:

- ``deterministic_kernel`` (False): True asks XLA for bit-reproducible kernels (``--xla_gpu_deterministic_ops``,
  which also makes scatter-add and reductions order-stable on GPUs). XLA reads its flags once, when the first
  backend starts (megxla's first op), so set it before that (or export ``MEGXLA_DETERMINISTIC_KERNEL=1``); set
  later it is recorded, a warning says so, and it applies to the next process. CPU kernels are deterministic
  anyway. (On an H100, jax 0.11.2, two seeded eager training runs with it were bit-identical once and, another
  time, apart in the 8th digit of one BatchNorm bias: XLA's flag is not a full guarantee.) Under ``auto_jit`` it
  also takes effect at once, on every device: no step is run eagerly for being faster on the machine's load of the
  moment (eager kernels and a compiled cluster round differently), so two runs of a seeded program compute the same
  bits; without it they agree to the last bits of a step, and over many steps may drift further apart.
- CPU convolutions (no attribute): megxla's import keeps XLA:CPU's YNNPACK library for matmuls only
  (``--xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`` added to ``XLA_FLAGS``):
  jaxlib 0.10's default also gives it convolutions, which ran 8x slower than XLA's own on the 2-core CPU measured
  (a ResNet-18 training step 3.0 -> 1.2 s). ``XLA_FLAGS`` naming the flag wins; ``MEGXLA_XLA_CPU_YNN_CONVOLUTION=1``
  keeps XLA's default.
- Host memory (no attribute): megxla's import tells glibc's malloc to keep the memory a step frees for the next
  step (``mallopt``: buffers up to 32 MB from its heap, up to 64 MB of freed memory kept), where glibc's defaults
  gave it back to the kernel at every free and each step's new buffers cost a page fault per page: an eager MLP step
  8.4-9.2 -> 6.3-7.1 ms on the 2-core CPU measured. The process's resident size then stays at its peak, as with a
  caching allocator. ``MEGXLA_RETAIN_HOST_MEMORY=0``, the environment's own setting of those thresholds
  (``MALLOC_TRIM_THRESHOLD_``... or ``GLIBC_TUNABLES``) or a preloaded allocator leaves glibc as configured.
- ``_compute_mode`` ("default" or "float32"): as in MegEngine, float32 matmul/conv compute in full float32 either
  way ("float32" also names float32 accumulation for float16 inputs, which XLA does by default). megxla sets JAX's
  ``jax_default_matmul_precision`` to "highest" at import, so float32 means float32 on every backend (JAX alone
  would use TF32 on NVIDIA GPUs).
- ``matmul_precision`` (megxla extension, "highest"): the documented switch into faster, lower-precision float32
  matmul/conv: "high" (TF32-class / 3-pass bfloat16) or "default" (the backend's fastest: TF32 on NVIDIA GPUs,
  one-pass bfloat16 on TPUs). ``amp`` remains the route to float16/bfloat16 compute.
- ``compilation_cache`` (True) and ``compilation_cache_dir``: JAX's persistent compilation cache, so a second
  process reuses the executables of the first instead of compiling again. On by default, in
  ``$MEGXLA_COMPILATION_CACHE_DIR``, else ``$XDG_CACHE_HOME/megxla/jax``, else ``~/.cache/megxla/jax``
  (JAX's own ``JAX_COMPILATION_CACHE_DIR``, when only that is set, is kept);
  ``MEGXLA_COMPILATION_CACHE=0`` (or ``compilation_cache = False``) turns it off. JAX writes entries atomically, so
  processes may share the directory. Every executable is cached, however small or quick to compile: eager
  kernels are many and each costs a compile on the way to the first step. Beside it, in ``megxla-lowered``, megxla
  keeps the lowered programs of auto-jit clusters and compiled steps (``jax.export``'s format) and the inferred
  types of ops, so a warm start does not trace and lower them again (``MEGXLA_LOWERED_CACHE=0``: not kept).
- ``compilation_cache_max_size`` (megxla extension, -1 = no limit; ``MEGXLA_COMPILATION_CACHE_MAX_SIZE``): bytes
  the cache directory may hold; JAX deletes the least recently used entries beyond it. Off by default because
  JAX's eviction lists the whole directory on every write (eager first calls write many small entries) and
  needs the access-time files it keeps only while a limit is set: give a limited cache its own directory.
- ``async_level`` (2), ``benchmark_kernel`` (False), ``benchmark_with_subprocess`` (False),
  ``disable_memory_forwarding`` (False), ``_conv_format`` ("default"), ``_auto_format_convert`` (True): accepted
  and validated for MegEngine code. JAX dispatch is always asynchronous (``async_level`` 2), XLA autotunes GPU
  kernels itself when compiling (its choice is part of the cached executable), buffers are never aliased behind
  the user's back, and XLA chooses layouts — so they change nothing.
- ``checked_indexing`` (megxla extension, False; ``MEGXLA_CHECKED_INDEXING=1``): eager integer indexing and
  ``cross_entropy`` labels are always range-checked (MegEngine's errors); inside ``trace``/``xla_trace`` steps an
  out-of-range index is clamped, as XLA's gather does, unless this is True: then the step checks its indices and a
  call with one out of range raises and writes nothing (one device->host sync per call, no buffer donation; a
  debugging mode).

- ``auto_jit`` (megxla extension, False; ``MEGXLA_AUTO_JIT=1``, ``python -m megxla.run --auto-jit``): eager ops
  are collected into clusters that XLA compiles and runs where the program needs a value (a host read, an op whose
  output shape depends on values, the end of ``opt.step()``...): eager code at compiled speed with eager's meaning.
  ``megxla.jit.auto_jit_stats()`` reports what it did (see README, docs/design.md).

Example:
    >>> import megxla
    >>> megxla.config.deterministic_kernel
    False
    >>> megxla.config.matmul_precision
    'highest'
"""
from __future__ import annotations

import os
import sys
import types
import warnings

import jax

_PRECISIONS = ("highest", "float32", "high", "tensorfloat32", "bfloat16_3x", "default", "bfloat16")
_FALSE = ("0", "false", "no", "off", "")


def _env_flag(name, default):
    v = os.environ.get(name)
    return default if v is None else v.strip().lower() not in _FALSE


def default_cache_dir() -> str:
    """The per-user directory of the persistent compilation cache when none is configured.

    Returns:
        ``$MEGXLA_COMPILATION_CACHE_DIR``, else ``$XDG_CACHE_HOME/megxla/jax``, else ``~/.cache/megxla/jax``.

    Example:
        >>> default_cache_dir().endswith("jax") or "MEGXLA_COMPILATION_CACHE_DIR" in os.environ
        True
    """
    explicit = os.environ.get("MEGXLA_COMPILATION_CACHE_DIR")
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "megxla", "jax")


def _backend_started() -> bool:
    try:
        from jax._src import xla_bridge
        return bool(xla_bridge._backends)
    except Exception:  # private API moved: assume started, so we warn rather than claim an effect
        return True


def _set_xla_flag(flag: str, on: bool):
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(flag + "=")]
    if on:
        flags.append(flag + "=true")
    os.environ["XLA_FLAGS"] = " ".join(flags)


YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type"
YNN_DOTS_ONLY = YNN_FLAG + "=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"


def _set_cpu_library_fusions():
    """XLA:CPU (jaxlib 0.10/0.11) hands each convolution to its YNNPACK library by default; measured on a 2-core AMD
    EPYC (AVX2), a 3x3 convolution's forward and backward at batch 32, 64 channels, 32x32, runs 1.16 s that way and
    0.13 s through XLA's own convolution (``benchmarks/xla_cpu_convolution.py``): a ResNet-18 training step 3.0 ->
    1.2 s, MobileNetV3's 1.3 -> 0.9 s, the first run of an executable ~0.9 s shorter (YNNPACK builds its pipelines
    then). Matmuls stay YNNPACK's (XLA's default for them, and ~20% faster on an MLP step than without). Set at
    import, before any backend starts, unless ``XLA_FLAGS`` names the flag itself or
    ``MEGXLA_XLA_CPU_YNN_CONVOLUTION=1`` asks for XLA's default; only for the jaxlib versions whose flag is known
    (XLA aborts on a flag value it does not know)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if YNN_FLAG in flags or _env_flag("MEGXLA_XLA_CPU_YNN_CONVOLUTION", False) or _backend_started():
        return
    try:
        import jaxlib
        version = tuple(int(v) for v in jaxlib.__version__.split(".")[:2])
    except (ImportError, AttributeError, ValueError):
        return
    if (0, 10) <= version < (0, 12):
        os.environ["XLA_FLAGS"] = (flags + " " + YNN_DOTS_ONLY).strip()


# glibc's malloc: arrays up to this size come from its heap, not from a fresh mmap each (its largest value)
HOST_MMAP_THRESHOLD = 32 << 20
# and up to this much freed memory stays with the process, not given back to the kernel at every free
HOST_TRIM_THRESHOLD = 64 << 20


# glibc's names of the knobs set here and of those that change what they do (environment: MALLOC_<NAME>_)
_MALLOC_KNOBS = ("trim_threshold", "mmap_threshold", "top_pad", "mmap_max")


def _retain_freed_host_memory() -> bool:
    """Tell glibc's malloc to keep the memory a step frees for the next step (``mallopt``): whether it was set.

    Every eager op's result is a new host buffer on a CPU backend, and a step frees as many. glibc's defaults hand
    freed memory back to the kernel once more than 128 kB (or twice the largest buffer freed so far) lies free at
    the top of its heap, so each step's buffers came as fresh pages, each zero-filled by a page fault on first
    touch. On a 2-core AMD EPYC, eager steps, median of 4 fresh processes each way: the MLP b128's 1190 faults a
    step -> 6, 14.8 -> 10.6 ms of CPU, 9.3 -> 6.5 ms a step; ConvNet b8's 296 -> 5 faults, 6.9 -> 6.3 ms; a
    ResNet-18 b32 step 1.44 -> 1.33 s. Steps compiled by auto-jit or ``xla_trace`` (donated buffers, few outputs)
    did not change beyond the noise. The cost is a caching allocator's: memory freed stays with the process, up to
    HOST_TRIM_THRESHOLD per malloc arena (the 2-layer Transformer's resident size 440-520 -> 550-650 MB in two runs,
    its step unchanged). PyTorch's and JAX's CPU users get the same by preloading jemalloc or tcmalloc; this tunes
    the allocator the process already has. Not done where the environment sets these knobs of glibc's malloc itself
    (``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_MAX_`` or their
    ``GLIBC_TUNABLES`` names; ``MALLOC_ARENA_MAX``, common in containers, is another knob), where another allocator
    is preloaded, or with ``MEGXLA_RETAIN_HOST_MEMORY=0``; only on Linux with glibc.

    Example:
        >>> isinstance(_retain_freed_host_memory(), bool)
        True
    """
    if not _env_flag("MEGXLA_RETAIN_HOST_MEMORY", True) or not sys.platform.startswith("linux"):
        return False
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if any(f"MALLOC_{k.upper()}_" in os.environ or f"malloc.{k}" in tunables for k in _MALLOC_KNOBS) \
            or "malloc" in os.environ.get("LD_PRELOAD", ""):
        return False  # (the user's own setting of these knobs, or another allocator, stays as it is)
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
            return False
        import ctypes
        mallopt = ctypes.CDLL(None).mallopt  # (the process's own C library)
    except (AttributeError, OSError, ValueError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3  # (glibc's malloc.h)
    return bool(mallopt(m_mmap_threshold, HOST_MMAP_THRESHOLD)) and \
        bool(mallopt(m_trim_threshold, HOST_TRIM_THRESHOLD))


def _apply_cache(enabled: bool, path: str | None, max_size: int | None = None):
    from jax._src import compilation_cache as cc
    if max_size is not None:
        jax.config.update("jax_compilation_cache_max_size", int(max_size))
    if enabled and path:
        jax.config.update("jax_compilation_cache_dir", path)
        # cache every executable: eager first calls compile many small kernels, each worth keeping
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    else:
        jax.config.update("jax_compilation_cache_dir", None)
    try:  # JAX opens its cache once; make a change of directory take effect now
        cc.reset_cache()
    except Exception:
        pass


class _Config(types.ModuleType):
    """The module type of ``megxla.config``: setting an attribute validates it and applies it."""

    def __setattr__(self, name, value):
        setter = _SETTERS.get(name)
        if setter is not None:
            value = setter(self, value)
        super().__setattr__(name, value)

    def __dir__(self):
        # the settings (and MegEngine's private ones users set), not this module's helpers and imports
        return sorted(set(_SETTERS) | {"_override", "default_cache_dir"} | {"__doc__", "__name__"})


def _bool(name):
    def check(mod, value):
        if not isinstance(value, (bool, int)):
            raise TypeError(f"megxla.config.{name} must be a bool, got {value!r}")
        return bool(value)
    return check


class _AsyncLevelError(ValueError, AssertionError):
    """A bad ``async_level``: MegEngine asserts (its own test expects ``AssertionError``), megxla's settings raise
    ``ValueError``; this is both."""


def _set_async_level(mod, value):
    if value not in (0, 1, 2):
        raise _AsyncLevelError(f"megxla.config.async_level must be 0, 1 or 2, got {value!r}")
    return int(value)


def _set_compute_mode(mod, value):
    if value not in ("default", "float32"):
        raise ValueError(f"megxla.config._compute_mode must be 'default' or 'float32', got {value!r}")
    return value


def _set_conv_format(mod, value):
    if not isinstance(value, str):
        raise TypeError(f"megxla.config._conv_format must be a str, got {value!r}")
    return value


def _set_matmul_precision(mod, value):
    if value not in _PRECISIONS:
        raise ValueError(f"megxla.config.matmul_precision must be one of {_PRECISIONS}, got {value!r}")
    from .core import _lazy
    if _lazy.FLUSH[0] is not None and value != jax.config.jax_default_matmul_precision:
        # ops auto-jit collected under the old precision run now: a cluster is lowered at the precision in
        # force when it runs, and eager computed each op at the one in force at its line
        _lazy.FLUSH[0]("config.matmul_precision changes")
    jax.config.update("jax_default_matmul_precision", value)
    return value


def _set_deterministic(mod, value):
    value = _bool("deterministic_kernel")(mod, value)
    if value != mod.__dict__.get("deterministic_kernel", False) and _backend_started():
        warnings.warn("megxla.config.deterministic_kernel: XLA reads its flags when the backend starts, which has "
                      "happened in this process; the change applies to processes started after it (set it before "
                      "the first op, or export MEGXLA_DETERMINISTIC_KERNEL=1)", stacklevel=3)
    _set_xla_flag("--xla_gpu_deterministic_ops", value)
    from .core import _lazy
    _lazy.DETERMINISTIC[0] = value
    return value


def _set_cache(mod, value):
    value = _bool("compilation_cache")(mod, value)
    _apply_cache(value, mod.__dict__.get("compilation_cache_dir"))
    return value


def _set_cache_dir(mod, value):
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"megxla.config.compilation_cache_dir must be a path or None, got {value!r}")
    value = None if value is None else os.path.expanduser(os.fspath(value))
    _apply_cache(mod.__dict__.get("compilation_cache", False), value)
    return value


def _set_cache_max_size(mod, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ValueError(f"megxla.config.compilation_cache_max_size must be a number of bytes >= 0, or -1 (no "
                         f"limit), got {value!r}")
    if value != -1:
        try:
            import filelock  # noqa: F401  (JAX's bounded cache locks its directory; without it JAX disables it)
        except ImportError:
            raise ImportError("megxla.config.compilation_cache_max_size needs the filelock package "
                              "(pip install filelock)") from None
    _apply_cache(mod.__dict__.get("compilation_cache", False), mod.__dict__.get("compilation_cache_dir"), value)
    return value


def _set_auto_jit(mod, value):
    value = _bool("auto_jit")(mod, value)
    from .core import _lazy
    _lazy.WANTED[0] = value
    if _lazy.SWITCH[0] is not None:  # (jit registers the switch; imported later, it reads WANTED)
        _lazy.SWITCH[0](value)
    return value


def _set_checked_indexing(mod, value):
    value = _bool("checked_indexing")(mod, value)
    from .core import _indexing
    _indexing.CHECKED[0] = value
    return value


def _override(benchmark_kernel=None, deterministic_kernel=None, async_level=None, compute_mode=None,
              conv_format=None, auto_format_convert=None):
    """Set the given execution settings inside a ``with`` block (or a decorated function) and restore them
    after: MegEngine's ``megengine.config._override``, which model code uses as ``mge.config._override(...)``.

    Args:
        benchmark_kernel: see :data:`benchmark_kernel` (None leaves it).
        deterministic_kernel: see :data:`deterministic_kernel`.
        async_level: see :data:`async_level`.
        compute_mode: ``"default"`` or ``"float32"``.
        conv_format: ``"default"`` or a layout name.
        auto_format_convert: bool.

    Returns:
        a context manager (usable as a decorator).

    Example:
        >>> import megxla
        >>> with megxla.config._override(deterministic_kernel=True):
        ...     megxla.config.deterministic_kernel
        True
    """
    # core._config holds the implementation (it imports this module, so it is imported on use)
    from .core import _config
    return _config._override(benchmark_kernel=benchmark_kernel, deterministic_kernel=deterministic_kernel,
                             async_level=async_level, compute_mode=compute_mode, conv_format=conv_format,
                             auto_format_convert=auto_format_convert)


_SETTERS = {
    "checked_indexing": _set_checked_indexing,
    "auto_jit": _set_auto_jit,
    "async_level": _set_async_level,
    "benchmark_kernel": _bool("benchmark_kernel"),
    "benchmark_with_subprocess": _bool("benchmark_with_subprocess"),
    "deterministic_kernel": _set_deterministic,
    "disable_memory_forwarding": _bool("disable_memory_forwarding"),
    "_compute_mode": _set_compute_mode,
    "_conv_format": _set_conv_format,
    "_auto_format_convert": _bool("_auto_format_convert"),
    "matmul_precision": _set_matmul_precision,
    "compilation_cache": _set_cache,
    "compilation_cache_dir": _set_cache_dir,
    "compilation_cache_max_size": _set_cache_max_size,
}

async_level = 2
benchmark_kernel = False
benchmark_with_subprocess = False
disable_memory_forwarding = False
_compute_mode = "default"
_conv_format = "default"
_auto_format_convert = True  # (MegEngine 1.13 reads True on import)

sys.modules[__name__].__class__ = _Config
_mod = sys.modules[__name__]
# Defaults applied at import (megxla's import runs this module before any op starts a backend).
_mod.matmul_precision = "highest"
# A compiled step lowers its matmuls/convolutions at one precision: its recordings are keyed by it.
from .core import _registry as _reg  # noqa: E402  (core imports nothing above it)
_reg.register_context("matmul_precision", lambda m=_mod: m.__dict__.get("matmul_precision"))
_mod.__dict__["deterministic_kernel"] = False
_mod.deterministic_kernel = _env_flag("MEGXLA_DETERMINISTIC_KERNEL", False) or \
    "--xla_gpu_deterministic_ops=true" in os.environ.get("XLA_FLAGS", "")
_set_cpu_library_fusions()
_retain_freed_host_memory()
_mod.__dict__["compilation_cache"] = False
# a directory given to JAX itself (JAX_COMPILATION_CACHE_DIR) wins over our per-user default
_jax_dir = jax.config.jax_compilation_cache_dir
_mod.compilation_cache_dir = _jax_dir if _jax_dir and "MEGXLA_COMPILATION_CACHE_DIR" not in os.environ \
    else default_cache_dir()
del _jax_dir
_mod.compilation_cache_max_size = int(os.environ.get("MEGXLA_COMPILATION_CACHE_MAX_SIZE", -1))
_mod.compilation_cache = _env_flag("MEGXLA_COMPILATION_CACHE", True)
_mod.checked_indexing = _env_flag("MEGXLA_CHECKED_INDEXING", False)
_mod.auto_jit = _env_flag("MEGXLA_AUTO_JIT", False)
del _mod
