"""MegEngine's dtype and device conventions on top of JAX.

MegEngine computes in 32 bits by default: Python floats and float64 arrays become float32, Python ints and
int64 arrays become int32 (unless a dtype is given explicitly and JAX's x64 mode is on).
"""
from __future__ import annotations

import atexit
import functools
import os
import re
import time
import weakref

import numpy as np
import jax
import jax.numpy as jnp

from . import _interrupt

try:  # whether the calling thread is in no JAX trace: 0.4 us, where entering ensure_compile_time_eval takes 10-15
    from jax._src.core import trace_state_clean as _no_jax_trace
except ImportError:  # (a JAX without it: always enter the context)
    def _no_jax_trace():
        return False

_DEFAULT = {"f": np.float32, "i": np.int32, "u": None, "b": np.bool_, "c": np.complex64}
_default_device = None


def default_dtype(arr: np.ndarray):
    if arr.dtype == np.float64:
        return np.float32
    if arr.dtype == np.int64:
        return np.int32
    if arr.dtype == np.uint64:
        return np.uint32
    if arr.dtype == np.complex128:
        return np.complex64
    return arr.dtype


_BFLOAT16 = np.dtype(jnp.bfloat16)
_BFLOAT16_TYPE = type(_BFLOAT16)


def is_float(dtype):
    """Whether ``dtype`` is a real floating-point type: float16/32/64 or bfloat16 (NumPy files bfloat16, an
    extension type, under kind ``"V"``, so ``dtype.kind == "f"`` alone calls it a non-float).

    Example:
        >>> is_float(np.float16), is_float(jnp.bfloat16), is_float(np.int32)
        (True, True, False)
    """
    if type(dtype) is not _BFLOAT16_TYPE:
        kind = getattr(dtype, "kind", None)  # (a NumPy dtype: no conversion, on hot paths)
        if kind is None:
            dtype = np.dtype(dtype)
            kind = dtype.kind
        if kind != "V":
            return kind == "f"
    return dtype == _BFLOAT16


def c_int(value, dtype) -> int:
    """``value`` (a float) converted to the integer ``dtype`` as MegEngine's x86 kernels convert a fill value
    (``FillLike``, ``Padding``'s ``padding_val``, NumPy 1.23's cast under ``Const``): truncated toward zero by the
    32-bit ``cvttss2si`` (64-bit for 8-byte types and uint32), whose answer for NaN, +-inf and values beyond its
    range is the "integer indefinite" INT_MIN, then wrapped to the dtype's width.

    Example:
        >>> c_int(float("nan"), np.int32), c_int(-2.7, np.int32), c_int(300.0, np.int8), c_int(1e10, np.int16)
        (-2147483648, -2, 44, 0)
    """
    dtype = np.dtype(dtype)
    value = float(value)
    width = 64 if dtype.itemsize == 8 or dtype == np.uint32 else 32
    lo = -(1 << (width - 1))
    i = lo if value != value or value in (float("inf"), float("-inf")) else int(value)
    if not lo <= i < -lo:
        i = lo
    bits = dtype.itemsize * 8
    i &= (1 << bits) - 1
    return i - (1 << bits) if dtype.kind == "i" and i >= 1 << (bits - 1) else i


_NARROW_WARNED: list = []  # non-empty once the lossy-narrowing warning was given (given once per process)


def _warn_if_lossy(np_arr, target):
    """Warn (once) when MegEngine's 64 -> 32-bit narrowing of default dtypes changes values: integers outside
    the 32-bit range wrap, floats beyond float32's range become inf. Rounding float64 to float32 precision is
    the documented behaviour and is not warned about."""
    if np_arr.size == 0:
        return
    if np_arr.ndim == 0:  # (a Python number: compared as one, ~1 us against a NumPy reduction's ~10)
        v = np_arr.item()
        if target.kind in "iu":
            info = np.iinfo(target)
            lossy = not info.min <= v <= info.max
        else:
            lossy = abs(v) > float(np.finfo(target).max) and abs(v) != float("inf")
    elif target.kind in "iu":
        info = np.iinfo(target)
        lossy = np_arr.min() < info.min or np_arr.max() > info.max
    else:
        finite = np.abs(np_arr[np.isfinite(np_arr)])
        lossy = finite.size > 0 and finite.max() > np.finfo(target).max
    if lossy:
        import warnings
        _NARROW_WARNED.append(True)
        warnings.warn(f"Tensor: {np_arr.dtype} data narrowed to {target} (MegEngine has no 64-bit tensors) "
                      f"changed values outside {target}'s range (integers wrap, floats become inf); pass an "
                      f"explicit dtype or convert the data first. This warning is shown once.", RuntimeWarning,
                      stacklevel=5)


def canonical(dtype):
    """A NumPy dtype from a name, NumPy or JAX dtype (``"float32"``, ``np.int32``, ``jnp.bfloat16``…)."""
    return np.dtype(dtype)


def held(dtype):
    """The dtype a tensor asked to be ``dtype`` holds: :func:`canonical`, 64-bit types narrowed to 32 bits where
    JAX's x64 mode is off, as JAX narrows them -- but without JAX's warning at every cast: MegEngine has no 64-bit
    tensors, and ``x.astype("int64")`` in code written for it (or ported from PyTorch) asks for integers.

    Example:
        >>> held("int64"), held(np.float64), held("int8")
        (dtype('int32'), dtype('float32'), dtype('int8'))
    """
    dt = np.dtype(dtype)
    if dt.itemsize >= 8 and dt.kind in "iufc":
        return np.dtype(jax.dtypes.canonicalize_dtype(dt))
    return dt


_NAMES: dict = {}  # id(dtype) -> (dtype, its name)


def name_of(dtype: np.dtype) -> str:
    """``dtype.name`` of a NumPy dtype, kept per dtype object: NumPy computes it in Python on every read (~1.5 us,
    a quarter of an eager ``astype``), and a dtype hashes slowly, so it is looked up by identity.

    Example:
        >>> name_of(np.dtype("int32"))
        'int32'
    """
    entry = _NAMES.get(id(dtype))
    if entry is not None and entry[0] is dtype:
        return entry[1]
    name = dtype.name
    if len(_NAMES) < 1024:
        _NAMES[id(dtype)] = (dtype, name)
    return name


def to_array(data, dtype=None, device=None):
    """Convert user data to a jax array following MegEngine's dtype rules."""
    if isinstance(data, (np.ndarray, list, tuple, int, float, bool, np.generic)) and not _no_jax_trace():
        with jax.ensure_compile_time_eval():  # constants stay concrete inside a symbolic trace
            return _to_array(data, dtype, device)
    return _to_array(data, dtype, device)


# A host array reaches the device through JAX's own transfer, the call ``jnp.asarray`` ends in (placed where
# ``jnp.asarray`` places it: JAX's default device, not committed): 7-10 us, where ``jnp.asarray``'s Python path
# takes 80-250 and a jitted identity (this path until 2026-11-29: compiled once per shape, ~25 ms) 20 alone and
# 70-130 inside a training loop, its run queued behind the step's work (2-core CPU, jax 0.10: the MLP b128 step's
# batch 130 -> 44 us). The result may alias the private host copy made above (JAX's CPU zero-copy), never the
# caller's array. A JAX without these internals takes ``jnp.asarray``.
try:
    from jax._src.core import ShapedArray as _ShapedArray
    from jax._src.interpreters.pxla import get_default_device as _jax_default_device
    from jax._src.lib import xla_client as _xc
    _batched_put = _xc.batched_device_put
except (ImportError, AttributeError):
    _batched_put = None
_PUT_TYPES: dict = {}  # (shape, dtype, device) -> (aval, sharding)


def _quiesce_at_exit(timeout=None):
    """(atexit, run before JAX's own clean-up, which megxla's import registered first) Let the process end with no
    kernel running: drop the placements kept here, then wait for every live array. JAX's clean-up then frees its
    client, whose destruction waits for the work still queued; a client something still holds is never freed, and
    C++'s static destructors ran while XLA's worker threads executed a kernel -- a segfault in 8-9 of 10 runs,
    under load, of a script whose last line is an eager convolution (MegEngine's test_imperative_exit), in 2-4 of 8
    of a training script ending in ``opt.step()``, eager, auto-jit or ``xla_trace``. MegEngine waits for its queued
    work at exit too. The wait is bounded (``timeout`` seconds; 30, or 3 in a multi-process run, where a collective
    whose peer died may never complete): past it the process ends as it would have."""
    _PUT_TYPES.clear()
    try:
        from jax._src import xla_bridge
        if not xla_bridge._backends:  # (none started: nothing ran, and asking for live arrays would start one)
            return
        arrays = jax.live_arrays()
        if timeout is None:
            timeout = 3.0 if jax.process_count() > 1 else 30.0
    except Exception:  # (no backend was ever started, or it is gone)
        return

    # Polled here, not waited for on a thread of its own: Python 3.12 starts no thread once its exit has begun
    # ("can't create new thread at interpreter shutdown" from this handler, and no wait at all). ``is_ready`` of a
    # deleted (donated) array crashes the process (jax 0.10): ``is_deleted`` is asked first.
    deadline = time.monotonic() + timeout
    for a in arrays:
        try:
            while not a.is_deleted() and not a.is_ready():
                if time.monotonic() > deadline:
                    return
                time.sleep(0.0005)
        except Exception:  # (an error of the computation is the program's)
            pass


atexit.register(_quiesce_at_exit)


def _host_put(arr):
    """``arr`` (a host array of a canonical dtype, the caller's own copy) on JAX's default device, as ``jnp.asarray``
    puts it there.

    Example:
        >>> _host_put(np.arange(3, dtype="int32")).tolist()
        [0, 1, 2]
    """
    dt = arr.dtype
    if _batched_put is None or dt.itemsize > 4 or dt.kind not in "biuf":
        # (64-bit types: JAX's x64 setting decides what they become; others -- bfloat16, strings -- as JAX has them)
        return jnp.asarray(arr, dtype=dt)  # (dtype given: no lax.stage kernel)
    return _put(arr, _jax_default_device(), False)


def _put(arr, dev, committed):
    # JAX's transfer of one host array onto ``dev``, its type and placement objects kept per shape and dtype
    key = (arr.shape, arr.dtype, dev)
    t = _PUT_TYPES.get(key)
    if t is None:
        if len(_PUT_TYPES) >= 1024:
            _PUT_TYPES.clear()
        t = _PUT_TYPES[key] = (_ShapedArray(arr.shape, arr.dtype), jax.sharding.SingleDeviceSharding(dev))
    return _batched_put(t[0], t[1], [arr], [dev], committed)


def host_put_like(arr, like):
    """``arr`` (a fresh host array, the caller's own) placed as the single-device array ``like`` is: on its device,
    committed as it is -- ``jax.device_put(arr, like.sharding or None)`` without its Python path (~150 us of host
    time per call on a 2-core CPU against ~10: an eager random draw makes two or three such transfers).

    Example:
        >>> host_put_like(np.arange(2, dtype="uint32"), jnp.zeros(2, jnp.uint32)).tolist()
        [0, 1]
    """
    dt = arr.dtype
    committed = getattr(like, "committed", True)
    sharding = getattr(like, "sharding", None)
    dev = getattr(sharding, "_device", None)  # (a SingleDeviceSharding's device; None for any other placement)
    if _batched_put is None or dt.itemsize > 4 or dt.kind not in "biuf" or dev is None \
            or (not committed and dev != _jax_default_device()):
        return jax.device_put(arr, sharding if committed else None, may_alias=True)
    return _put(arr, dev, bool(committed))


# Small integer arrays made from host data (labels, indices) keep their host copy beside the device array, for the
# index checks that read them (``cross_entropy``'s label range): read from the device, the labels waited for their
# transfer -- while it was a jitted identity (until 2026-11-29), queued behind the work issued before it, in an eager
# loop the previous step's backward and update (the MLP b128 step's label check: 6 ms median eagerly). JAX
# arrays are immutable, so the copy stays the array's value; it goes with the array.
_HOST_COPY_MAX = 1 << 16  # entries
_host_copies: dict = {}  # id(device array) -> [weak reference to it, its host copy, its (min, max) or None]


def _keep_host_copy(arr, host):
    key = id(arr)
    _host_copies[key] = [weakref.ref(arr, functools.partial(_drop_host_copy, key)), host, None]


@_interrupt.ignores_exceptions
def _drop_host_copy(key, _ref):
    _host_copies.pop(key, None)


def host_copy(arr):
    """The host copy (a read-only NumPy array) of a small integer device array made from host data, or None.

    Example:
        >>> from megxla import Tensor
        >>> host_copy(Tensor(np.array([3, 1], "int32"))._data)
        array([3, 1], dtype=int32)
        >>> host_copy(Tensor(np.array([0.5], "float32"))._data) is None
        True
    """
    entry = _host_copies.get(id(arr))
    if entry is not None and entry[0]() is arr:
        return entry[1]
    return None


def host_range(arr):
    """``(min, max)`` of a non-empty small integer device array made from host data (from its host copy, computed
    once and kept with it), or None.

    A label tensor is range-checked by every loss that takes it (``cross_entropy``), each step: the kept bounds
    make that check two comparisons instead of four NumPy passes over the labels.

    Example:
        >>> from megxla import Tensor
        >>> host_range(Tensor(np.array([3, 1, 7], "int32"))._data)
        (1, 7)
    """
    entry = _host_copies.get(id(arr))
    if entry is None or entry[0]() is not arr or entry[1].size == 0:
        return None
    r = entry[2]
    if r is None:
        host = entry[1]
        if host.size <= _SMALL_RANGE:
            # NOTE: a batch's labels are new every step; NumPy's two reductions cost 19 us (median, 33 mean) of a
            # training step's host time on 8 labels -- its reduction machinery run cold between the step's other
            # work, 3 us in a tight loop --, min and max of a Python list ~2 us
            values = host.ravel().tolist()
            r = entry[2] = (int(min(values)), int(max(values)))
        else:
            r = entry[2] = (int(host.min()), int(host.max()))
    return r


_SMALL_RANGE = 512  # host_range: up to this many entries, a Python list's min and max are faster than NumPy's


def host_value(arr):
    """``arr`` on the host: its host copy where it has one (no wait for the device), else ``np.asarray(arr)``.

    Example:
        >>> host_value(jnp.arange(3)).tolist()
        [0, 1, 2]
    """
    v = host_copy(arr)
    return np.asarray(arr) if v is None else v


def _host_numbers(data):
    """``data`` (not a Tensor) as a NumPy array of numbers; :class:`ConversionError` naming what it is otherwise
    (NumPy's and JAX's own errors say neither that a tensor was being made nor from what)."""
    reason = None
    try:
        a = np.asarray(data)
        if a.dtype == object:
            a = np.asarray([np.asarray(x) for x in data])
    except (TypeError, ValueError) as exc:  # (a ragged list, an object that is no sequence)
        reason = str(exc).split("\n")[0]
    else:
        if a.dtype.kind not in "OUSMmV" or (a.dtype.kind == "V" and a.dtype.fields is None):
            return a  # (numbers: NumPy's, and ml_dtypes' bfloat16 / float8, whose kind is "V" with no fields)
        reason = f"its elements are {a.dtype.type.__name__}, not numbers"
    from ._dispatch import ConversionError
    text = repr(data)
    text = text if len(text) <= 60 else text[:57] + "..."
    raise ConversionError(f"Tensor: {type(data).__name__} {text} cannot be made a tensor: {reason}")


def _to_array(data, dtype, device):
    from ._tensor import Tensor
    if isinstance(data, Tensor):
        arr = data._value()
        if dtype is not None and held(dtype) != arr.dtype:
            arr = arr.astype(held(dtype))
        elif isinstance(arr, jax.Array):
            # NOTE: a real copy, not a second handle on the same buffer: a compiled step donates (deletes) the
            # buffers of the state it rewrites, which must not take ``Tensor(w)`` / ``Parameter(w)`` with them.
            arr = jnp.array(arr, copy=True)
    elif isinstance(data, jax.Array):
        arr = data if dtype is None else data.astype(held(dtype))
    else:
        np_arr = _host_numbers(data)
        target = held(dtype) if dtype is not None else default_dtype(np_arr)
        if dtype is None and target != np_arr.dtype and not _NARROW_WARNED:
            _warn_if_lossy(np_arr, np.dtype(target))
        if isinstance(data, np.ndarray) and np_arr.dtype == target:
            # a real copy: on the CPU jnp.asarray may alias the array's memory (when suitably aligned), and the
            # tensor would change with it (a reused loader buffer); MegEngine's Tensor copies its data. The copy
            # is made on the host (jnp.array(copy=True) runs a compiled copy kernel per shape: model builds
            # compiled one per parameter shape)
            host = arr = np.array(np_arr, copy=True)
            if device is None and _default_device is None:
                arr = _host_put(arr)
            else:
                arr = jnp.asarray(arr, dtype=target)  # (dtype given: no lax.stage kernel)
            if host.dtype.kind in "iu" and host.size <= _HOST_COPY_MAX and isinstance(arr, jax.Array):
                host.flags.writeable = False
                _keep_host_copy(arr, host)
        elif device is None and _default_device is None:
            # (lists, Python numbers, other dtypes: converted into an array of our own -- an object with
            # ``__array__`` may hand out its own memory)
            if np_arr.dtype == target:
                arr = _host_put(np.array(np_arr, copy=True))
            else:
                with np.errstate(over="ignore"):  # (narrowing beyond the range: warned above, once, as ours)
                    arr = _host_put(np.array(np_arr, dtype=target, copy=True))
        else:
            arr = jnp.asarray(np_arr, dtype=target)
    dev = to_device(device) if device is not None else _default_device
    if dev is not None and dev not in arr.devices():
        arr = jax.device_put(arr, dev)
    return arr


# ---- devices: MegEngine's CompNode naming on top of jax Devices ------------------------------------------------
# MegEngine names a device "<type><index|x>[:<stream>]": xpux (any device, GPU first), cpux, cpu0, gpu1:2, cuda0,
# rocm0, multithread4:0, and the special "cpu:default". The *logical* name is what the user asked for, the
# *physical* one the device it resolved to. XLA has no streams: the stream number is kept in the name only.
_DEVICE_RE = re.compile(r"^(xpu|cpu|gpu|cuda|rocm|multithread|cambricon|atlas)(x|\d+)?(?::(\d+))?$")
_default_logical = os.environ.get("MGE_DEFAULT_DEVICE", "xpux")


def _parse(name):
    """``(type, index or None, stream)`` of a MegEngine device name; ValueError naming the accepted forms."""
    name = str(name).strip().lower()
    if name == "cpu:default":
        return "cpu", 0, 0
    m = _DEVICE_RE.match(name)
    if m is None:
        raise ValueError(f"invalid device name {name!r}: expected xpux, cpux, cpuN, gpuN, cudaN, rocmN or "
                         f"multithreadN, optionally with ':stream' (e.g. 'gpu0:1')")
    kind, idx, stream = m.groups()
    kind = {"cuda": "gpu", "multithread": "cpu"}.get(kind, kind)
    if kind in ("cambricon", "atlas"):
        raise ValueError(f"device {name!r}: {kind} devices are not supported by XLA")
    index = None if idx in (None, "x") or m.group(1) == "multithread" else int(idx)
    return kind, index, int(stream or 0)


def _logical(name):
    """The logical name MegEngine prints for a device name: ``xpux`` -> ``xpux:0``, ``gpu1`` -> ``gpu1:0``."""
    name = str(name).strip().lower()
    if name == "cpu:default":
        return name
    _parse(name)
    if ":" in name:
        return name
    if not name[-1].isdigit() and not name.endswith("x"):
        name += "x"
    return name + ":0"


def _physical_name(dev, stream=0):
    kind = "gpu" if dev.platform in ("gpu", "cuda", "rocm") else dev.platform
    return f"{kind}{dev.id}:{stream}"


class CompNode:
    """A computing node, as MegEngine's ``CompNode``: what ``Tensor.device`` returns.

    It prints its logical name (``str(x.device) == "xpux:0"``), shows both names in its repr, and, as
    MegEngine's, compares equal to another CompNode or a device name of the same logical name (``x.device ==
    "xpux"`` for a tensor made on the default device, ``"cpu0"`` and ``"cpu0:0"`` alike), so code that treated the
    device as a string keeps working.

    Args:
        name: a MegEngine device name (``"xpux"``, ``"cpu0"``, ``"gpu1:2"`` ...) or a ``jax.Device``.

    Example:
        >>> import megxla as mge
        >>> x = mge.Tensor([1.0])
        >>> str(x.device)
        'xpux:0'
        >>> x.device.physical_name
        'cpu0:0'
        >>> x.device == "xpux", x.to("cpu0").device == "cpu0:0"
        (True, True)
    """

    __slots__ = ("_logical", "_device", "_stream")

    def __init__(self, name="xpux"):
        if isinstance(name, CompNode):
            self._logical, self._device, self._stream = name._logical, name._device, name._stream
        elif isinstance(name, jax.Device):
            self._device, self._stream = name, 0
            self._logical = _physical_name(name)
        else:
            self._logical = _logical(name)
            self._device = to_device(name)
            self._stream = _parse(name)[2]

    @property
    def logical_name(self) -> str:
        """The name the device was asked by, e.g. ``"xpux:0"``."""
        return self._logical

    @property
    def physical_name(self) -> str:
        """The device it resolved to, e.g. ``"cpu0:0"``."""
        return _physical_name(self._device, self._stream)

    @property
    def physical_locator(self):
        """``[type, index, stream]`` of the physical device, as MegEngine."""
        name = self.physical_name
        kind = name.rstrip("0123456789:")
        return [kind, self._device.id, self._stream]

    @property
    def jax_device(self):
        """The ``jax.Device`` this node resolves to."""
        return self._device

    # ---- memory queries (properties, as MegEngine's) ------------------------------------------------------------
    def _stats(self):
        try:
            return self._device.memory_stats() or {}
        except Exception:  # a backend without allocator statistics (XLA's CPU client)
            return {}

    @property
    def get_mem_status_bytes(self):
        """``(total, free)`` bytes of the device's memory: the accelerator allocator's limit and what is left of
        it, or the host's physical memory (total, free) for a CPU device, as MegEngine reports.

        Example:
            >>> total, free = CompNode("cpu0").get_mem_status_bytes
            >>> total >= free > 0
            True
        """
        s = self._stats()
        if "bytes_limit" in s:
            return s["bytes_limit"], s["bytes_limit"] - s.get("bytes_in_use", 0)
        page = os.sysconf("SC_PAGE_SIZE")
        return page * os.sysconf("SC_PHYS_PAGES"), page * os.sysconf("SC_AVPHYS_PAGES")

    @property
    def get_used_memory(self):
        """Bytes the allocator has handed out on this device (0 where the backend keeps no statistics, as
        MegEngine's CPU)."""
        return self._stats().get("bytes_in_use", 0)

    @property
    def get_max_used_memory(self):
        """Peak of :attr:`get_used_memory`."""
        return self._stats().get("peak_bytes_in_use", 0)

    @property
    def get_reserved_memory(self):
        """Bytes the allocator holds on this device."""
        s = self._stats()
        return s.get("bytes_reserved", s.get("bytes_in_use", 0))

    @property
    def get_max_reserved_memory(self):
        """Peak of :attr:`get_reserved_memory`."""
        s = self._stats()
        return s.get("peak_bytes_reserved", s.get("peak_bytes_in_use", 0))

    @staticmethod
    def _sync_all():
        """Wait for every computation queued on every device (MegEngine's ``CompNode._sync_all``)."""
        jax.effects_barrier()
        for a in jax.live_arrays():
            a.block_until_ready()

    @staticmethod
    def _get_default_device():
        """The default device's name (``"xpux"`` until ``set_default_device``)."""
        return get_default_device()

    @staticmethod
    def _set_default_device(name):
        set_default_device(name)

    def __str__(self):
        return self._logical

    def __repr__(self):
        return f'CompNode("{self.physical_name}" from "{self._logical}")'

    def __format__(self, spec):
        return format(str(self), spec)

    def __eq__(self, other):
        # MegEngine compares logical names: a tensor moved to "cpu0" is not on "xpux" even where xpux is the
        # CPU ("cpu0" and "cpu0:0" name the same node)
        if isinstance(other, str):
            try:
                return self._logical == _logical(other)
            except ValueError:
                return False
        if not isinstance(other, CompNode):
            return NotImplemented
        return self._logical == other._logical

    def __hash__(self):
        return hash(self._logical)

    def __reduce__(self):
        return (CompNode, (self._logical,))


def device_name(arr) -> str:
    """Physical name (``cpu0``, ``gpu1``) of the device holding ``arr`` (``xpux`` for abstract values)."""
    try:
        dev = next(iter(arr.devices()))
    except Exception:  # tracers have no device
        return "xpux"
    kind = "gpu" if dev.platform in ("gpu", "cuda", "rocm") else dev.platform
    return f"{kind}{dev.id}"


def comp_node(arr) -> CompNode:
    """The CompNode of a jax array: the default device's logical name when it lives there (as MegEngine, whose
    tensors created on ``xpux`` print ``device=xpux:0``), else its physical name."""
    try:
        dev = next(iter(arr.devices()))
    except Exception:  # tracers have no device: the default one is where the value will be
        return _default_node()
    node = _default_node()
    if node._device == dev:
        return node
    return CompNode(dev)


_NODES: dict = {}

# True once a tensor may carry a logical device name of its own (a tensor made or moved with ``device=`` other
# than ``xpux``, or a default device other than ``xpux``): until then no tensor has one, and the dispatch point
# skips passing names on to op results.
LOGICAL = [False]


def _node(name):
    node = _NODES.get(name)
    if node is None:
        node = _NODES[name] = CompNode(name)
    return node


def _default_node():
    return _node(_default_logical)


def _is_xpux(name):
    return str(name).strip().lower() in ("xpux", "xpux:0")


def logical_node(device=None):
    """The logical CompNode a tensor made with ``device`` keeps (MegEngine prints it: ``Tensor(x,
    device="cpu0")`` shows ``device=cpu0:0`` and so do the results of ops on it); None for ``xpux`` (which
    tensors without a name of their own show). ``device=None`` means the default device at this moment.

    Example:
        >>> logical_node("cpu0").logical_name, logical_node("xpux")
        ('cpu0:0', None)
    """
    if device is None:
        if _is_xpux(_default_logical):
            return None
        node = _default_node()
    elif isinstance(device, CompNode):
        node = device
    elif isinstance(device, jax.Device):
        node = CompNode(device)
    else:
        if _is_xpux(device):
            return None
        node = _node(str(device).strip().lower())
    if _is_xpux(node._logical):
        return None
    LOGICAL[0] = True
    return node


def tensor_node(arr, node):
    """What ``Tensor.device`` shows for the array ``arr`` of a tensor whose logical node is ``node`` (None:
    none of its own): that node where the array lives on its device, else the array's own device."""
    if node is not None:
        try:
            dev = next(iter(arr.devices()))
        except Exception:  # a tracer has no device: the value will be where the tensor says
            return node
        if node._device == dev:
            return node
        return comp_node(arr)
    if not LOGICAL[0]:
        return comp_node(arr)
    # names are in use: a tensor without one of its own was made on ``xpux`` (a tensor made while the default
    # was another device records that device), so it keeps showing ``xpux:0`` after set_default_device
    try:
        dev = next(iter(arr.devices()))
    except Exception:
        return _node("xpux")
    xpux = _node("xpux")
    return xpux if xpux._device == dev else CompNode(dev)


def to_device(device):
    """Map a MegEngine device name (``xpux``, ``cpux``, ``cpu0``, ``gpu1:2``, ``cuda0``, ``multithread4``) or a
    CompNode to a jax Device."""
    if device is None or isinstance(device, jax.Device):
        return device
    if isinstance(device, CompNode):
        return device._device
    kind, idx, _ = _parse(device)
    if kind == "xpu":
        kind = None
    elif kind == "rocm":
        kind = "gpu"
    try:
        # This process's devices: under JAX's multi-process runtime jax.devices() lists every process's.
        devices = jax.local_devices() if kind is None else jax.local_devices(backend=kind)
    except RuntimeError:
        devices = []
    if not devices:
        raise ValueError(f"device {device!r} does not exist: no {kind} device on this machine")
    idx = idx or 0
    if idx >= len(devices) and (kind == "cpu" or kind is None and devices[0].platform == "cpu"):
        # MegEngine's cpuN are logical devices (worker queues) on the one host CPU: any N exists. They share
        # the host's XLA devices; an N beyond them is the host device N mod their number. With no accelerator
        # an xpuN is a cpuN (MegEngine: ``CompNode("cpu1:0" from "xpu1:0")``; its upstream test_rng uses xpu1).
        return devices[idx % len(devices)]
    if idx >= len(devices):
        raise ValueError(f"device {device!r} does not exist: {len(devices)} {kind or 'default'} device(s)")
    return devices[idx]


def set_default_device(device: str = "xpux"):
    """Set the default computing node of new tensors.

    Args:
        device: ``"xpux"`` (the default: any device, GPU first), ``"cpux"``/``"gpux"``, ``"cpu0"``, ``"gpu1"``,
            ``"gpu0:1"``... It can also be set by the environment variable ``MGE_DEFAULT_DEVICE``.

    Example:
        >>> import megxla as mge
        >>> mge.set_default_device("cpux")
        >>> mge.get_default_device()
        'cpux'
        >>> mge.set_default_device()
    """
    global _default_device, _default_logical
    if isinstance(device, CompNode):
        device = device.logical_name
    if not isinstance(device, str):
        raise ValueError(f"set_default_device: invalid device name {device!r}")
    dev = to_device(device)  # validates before changing anything
    _default_logical = device
    _default_device = None if _parse(device)[0] == "xpu" else dev
    if not _is_xpux(device):
        LOGICAL[0] = True  # tensors made from now on keep this device's name (see logical_node)


def get_default_device() -> str:
    """The default computing node's name, as given to :func:`set_default_device` (``"xpux"`` until then).

    Example:
        >>> import megxla as mge
        >>> mge.get_default_device()
        'xpux'
    """
    return _default_logical


if _default_logical != "xpux":  # MGE_DEFAULT_DEVICE was set: resolve it now so a bad name fails at import
    set_default_device(_default_logical)
