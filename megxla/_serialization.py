"""``save`` / ``load``: MegEngine's checkpoint format, and loading that never runs code from a file by default.

File format. ``save`` writes a pickle in MegEngine 1.13's own layout, so MegEngine's ``megengine.load`` reads it:
a Tensor / Parameter is written as MegEngine writes one, ``megengine.tensor.Tensor(ndarray, dtype, device,
False, False, None, "default")`` (``...Parameter`` likewise), and NumPy arrays name NumPy 1.x's
``numpy.core.multiarray._reconstruct`` (NumPy 2 reads that name too; NumPy 1.x cannot read NumPy 2's
``numpy._core``). MegEngine can read what contains only containers (dict, ``OrderedDict``, list, tuple, set),
numbers, strings, NumPy arrays and Tensors / Parameters: state dicts, optimizer state dicts, checkpoint dicts.
Pickled megxla objects of any other class (a whole ``Module``, a user's class holding megxla modules) name
megxla's classes and functions by MegEngine's public names (``megengine.module`` / ``Linear``), so MegEngine
unpickles a whole megxla model into its own classes (their attributes are MegEngine's), and megxla reads them
back (with ``weights_only=False``).

``load`` reads what ``save`` writes and what MegEngine's ``megengine.save`` writes (``megengine.tensor.Tensor``
/ ``Parameter`` become megxla Tensors / Parameters, with or without the ``megengine`` import alias), and the
files of earlier megxla versions (``megxla.core._tensor._rebuild``). MegEngine objects pickled whole (a
``Module`` passed to ``megengine.save``) hold MegEngine's internal attributes, not megxla's: load their
``state_dict()`` instead. Tensors keep the logical device the file names where this machine has it (``cpu0:0``),
else take the default device; ``map_location`` sees the device names the file gives, stream included (``gpu0:0``,
``xpux:0``...), as in MegEngine.

Safety. A pickle is a program: unpickling can call any importable function. ``load`` therefore rebuilds only
data by default (``weights_only=True``): the classes it resolves are an allow-list (containers, numbers,
strings, NumPy arrays / dtypes / scalars, Tensors / Parameters, MegEngine's pickled tensor classes and a
tensor's quantization parameters: ``QParams``, ``QuantMode``, ``QuantDtypeMeta``); any other
global in the file raises :class:`pickle.UnpicklingError` naming it and the opt-in, ``weights_only=False`` or
the environment variable ``MEGXLA_LOAD_UNSAFE=1`` (for scripts that cannot be edited). Only opt in for files
you trust.
"""
from __future__ import annotations

import collections
import io
import os
import pickle
import sys
import tempfile
import types

import numpy as np

__all__ = ["save", "load", "dmap", "UNSAFE_ENV"]

UNSAFE_ENV = "MEGXLA_LOAD_UNSAFE"


# ---- save ---------------------------------------------------------------------------------------------------------
class _GlobalName:
    """Stand-in for a global that is written to the file by name (``module.name``) without being imported here:
    MegEngine's tensor classes and NumPy 1.x's array reconstructor."""

    def __init__(self, module, name, fn=None):
        self.module, self.name, self._fn = module, name, fn

    def __call__(self, *args):  # pickle requires reduce functions to be callable
        return self._fn(*args)

    def __repr__(self):
        return f"{self.module}.{self.name}"


def _np_reconstruct(*args):
    return np.ndarray.__new__(*args)


_ME_TENSOR = _GlobalName("megengine.tensor", "Tensor")
_ME_PARAMETER = _GlobalName("megengine.tensor", "Parameter")
_NP1_RECONSTRUCT = _GlobalName("numpy.core.multiarray", "_reconstruct", _np_reconstruct)
_NP1_SCALAR = _GlobalName("numpy.core.multiarray", "scalar")


class _Pickler(pickle._Pickler):
    """The pure-Python pickler (only it lets us write a global by name): MegEngine's layout for Tensors and
    NumPy 1.x names for arrays. Array data is still written as one bytes object each, so speed is per object,
    not per byte."""

    def reducer_override(self, obj):
        from .core._tensor import Parameter, Tensor
        if isinstance(obj, _GlobalName):
            return obj.name
        if type(obj) in (Tensor, Parameter):
            cls = _ME_PARAMETER if type(obj) is Parameter else _ME_TENSOR
            arr = obj.numpy()
            # NOTE: MegEngine's Tensor.__getnewargs__ order: data, dtype, device, is_const, no_cache, name, format;
            # then its __getstate__: {} or {"qparams": QParams} once the tensor has quantization parameters.
            return cls, (arr, arr.dtype, _device_name(obj), False, False, None, "default"), obj.__getstate__()
        if type(obj) is np.ndarray:
            func, args, state = obj.__reduce__()
            if getattr(func, "__name__", "") == "_reconstruct":
                return _NP1_RECONSTRUCT, args, state
        elif isinstance(obj, np.generic) and type(obj).__module__ == "numpy":
            func, args = obj.__reduce__()[:2]
            if getattr(func, "__name__", "") == "scalar":
                return _NP1_SCALAR, args
        return NotImplemented

    def save_global(self, obj, name=None):
        if isinstance(obj, _GlobalName):
            module, name = obj.module, obj.name
        else:
            alias = _megengine_name(obj) if name is None else None
            if alias is None:
                return super().save_global(obj, name)
            module, name = alias
        if self.proto >= 4:
            self.save(module)
            self.save(name)
            self.write(pickle.STACK_GLOBAL)
        else:
            self.write(pickle.GLOBAL + module.encode() + b"\n" + name.encode() + b"\n")
        self.memoize(obj)

    # the base class dispatches functions to its own save_global, bypassing the override above
    dispatch = dict(pickle._Pickler.dispatch)
    dispatch[types.FunctionType] = save_global


# megxla internals whose pickles MegEngine reads as one of its own types
_PICKLE_AS = {("megxla.module.module", "_HookDict"): ("collections", "OrderedDict"),
              ("megxla.optimizer.optimizer", "ParamGroup"): ("builtins", "dict")}

# packages whose MegEngine counterparts export every class / function their files define: an object one of them
# exports is written under that package (MegEngine's file layout differs from megxla's in places: its
# ConvTransposeBn2d lives in module/conv_transpose_bn.py, megxla's in module/conv_bn.py)
_COMPLETE_PACKAGES = ("megxla.module", "megxla.module.qat", "megxla.module.quantized", "megxla.optimizer",
                      "megxla.functional")


def _megengine_name(obj):
    """``(module, name)`` under which MegEngine finds the counterpart of a megxla class or function, or None
    for objects that are not megxla's.

    ``megxla.module.linear.Linear`` is written as ``megengine.module`` / ``Linear``,
    ``megxla.module.qat.linear.Linear`` as ``megengine.module.qat`` / ``Linear``, ``megxla.functional.relu``
    (made by a factory, so not picklable by its own qualified name) as ``megengine.functional`` / ``relu``;
    anything else keeps its path under ``megengine``. ``load`` maps ``megengine`` back to ``megxla``.
    """
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if module != "megxla" and not module.startswith("megxla."):
        return None
    special = _PICKLE_AS.get((module, qualname))
    if special is not None:
        return special
    name = getattr(obj, "__name__", qualname)
    for package in _COMPLETE_PACKAGES:
        mod = sys.modules.get(package)
        if mod is not None and getattr(mod, name, None) is obj:
            return "megengine" + package[len("megxla"):], name
    if "<" in qualname:
        return None  # a local object: pickle's own error names it
    return "megengine" + module[len("megxla"):], qualname


def _device_name(t):
    dev = getattr(t, "device", None)
    name = getattr(dev, "logical_name", None) or str(dev or "xpux")
    return name if ":" in name else name + ":0"


def save(obj, f, pickle_module=pickle, pickle_protocol=4):
    """Save an object (a state dict, an optimizer state dict, a checkpoint dict, a Tensor…) to a file.

    Tensors and Parameters are written in MegEngine 1.13's layout, so ``megengine.load`` reads files holding
    containers, numbers, strings, NumPy arrays and Tensors (see the module docstring for what it cannot read).

    Args:
        obj: the object to save.
        f: a path, or a binary file object with ``write``.
        pickle_module: the module to pickle with; anything but the standard :mod:`pickle` is used as given
            (``pickle_module.dump(obj, f, protocol)``), without MegEngine's layout.
        pickle_protocol: the pickle protocol (4, MegEngine's default on Python 3.8–3.13).

    Returns:
        None.

    Example:
        >>> import io, megxla as mge, megxla.module as M
        >>> buf = io.BytesIO()
        >>> mge.save(M.Linear(2, 1).state_dict(), buf)
        >>> sorted(mge.load(io.BytesIO(buf.getvalue())))
        ['bias', 'weight']
    """
    if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
        return _save_to_path(obj, os.fsdecode(os.fspath(f)), pickle_module, pickle_protocol)
    if not hasattr(f, "write"):
        raise TypeError(f"save: f must be a path or a binary file object with write(), got {type(f).__name__}")
    if pickle_module is not pickle:
        pickle_module.dump(obj, f, pickle_protocol)
        return None
    # NOTE: pickle into memory first, so a failure (an unpicklable object deep inside) leaves the file unwritten
    # rather than truncated mid-object.
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle_protocol).dump(obj)
    f.write(buf.getbuffer())
    return None


def _save_to_path(obj, path, pickle_module, pickle_protocol):
    """Write a new file beside ``path`` and move it there: a save that fails -- an unpicklable object, Ctrl-C, a
    full disk -- leaves the checkpoint that was there whole (``open(path, "wb")`` truncated it first: a 42 MB
    checkpoint became 0 bytes, probe U). Where no file can be made beside it (a device like ``/dev/null``, a
    directory not writable), the path is written in place."""
    target = os.path.realpath(path)  # (a link keeps pointing at the checkpoint, which is replaced)
    if os.path.exists(target) and not os.path.isfile(target):
        with open(path, "wb") as fh:
            return save(obj, fh, pickle_module=pickle_module, pickle_protocol=pickle_protocol)
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(target) + ".", suffix=".tmp",
                                   dir=os.path.dirname(target))
    except OSError:
        with open(path, "wb") as fh:
            return save(obj, fh, pickle_module=pickle_module, pickle_protocol=pickle_protocol)
    try:
        with os.fdopen(fd, "wb") as fh:
            save(obj, fh, pickle_module=pickle_module, pickle_protocol=pickle_protocol)
        # the mode ``open(path, "wb")`` gives: the old file's, else the umask's (mkstemp makes it private)
        try:
            mode = os.stat(target).st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return None


# ---- load ---------------------------------------------------------------------------------------------------------
def _megengine_tensor_class(parameter, devices=None):
    """What ``megengine.tensor.Tensor`` / ``Parameter`` resolve to when loading: a class whose construction
    (MegEngine writes ``NEWOBJ``: ``cls.__new__(cls, *args)``; megxla writes ``REDUCE``: ``cls(*args)``) returns a
    megxla Tensor / Parameter built from MegEngine's ``__getnewargs__`` tuple. ``devices`` (a dict) records the
    device name the file gives each tensor, for ``map_location``."""
    from .core._tensor import Parameter, Tensor
    target = Parameter if parameter else Tensor

    class _MegEngineTensor:
        def __new__(cls, data=None, dtype=None, device=None, is_const=False, no_cache=False, name=None,
                    format="default"):
            if data is None and dtype is None:
                # MegEngine 1.1-1.2 files: NEWOBJ without arguments, then BUILD with {"data", "dtype", "device",
                # "qdict"} (Tensor.__setstate__ reads it)
                return target.__new__(target)
            t = _build(target, data, dtype, name, device)
            if devices is not None and isinstance(device, str):
                devices[id(t)] = (t, device)
            return t

    _MegEngineTensor.__qualname__ = _MegEngineTensor.__name__ = target.__name__
    return _MegEngineTensor


def _build(cls, data, dtype, name=None, device=None):
    arr = np.asarray(data)
    dtype = np.dtype(dtype) if dtype is not None else arr.dtype
    # NOTE: the file's device name (gpu0:0, xpux:0) need not exist on this machine: a name that does keeps its
    # logical name (MegEngine's loaded tensor shows cpu0:0), any other gives the default device, and
    # map_location (which sees the file's names) moves tensors afterwards.
    from .core.dtypes import to_device
    try:
        to_device(device) if isinstance(device, str) else None
    except ValueError:
        device = None
    return cls(arr, dtype=dtype, name=name, device=device if isinstance(device, str) else None)


def _rebuild_v0(cls, array, name=None, dtype=None):
    """Files of earlier megxla versions: ``megxla.core._tensor._rebuild(cls, array, name)``."""
    return _build(cls, array, dtype if dtype is not None else np.asarray(array).dtype, name)


def _allowed():
    from .core import _tensor
    allowed = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("collections", "defaultdict"): collections.defaultdict,
        ("collections", "deque"): collections.deque,
        ("_codecs", "encode"): __import__("codecs").encode,  # bytes in protocol 0-2 files
        ("codecs", "encode"): __import__("codecs").encode,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("numpy._core.multiarray", "_reconstruct"): _np_reconstruct,
        ("numpy._core.multiarray", "scalar"): np._core.multiarray.scalar if hasattr(np, "_core") else
        np.core.multiarray.scalar,
        ("numpy._core.numeric", "_frombuffer"): _frombuffer,
        ("megxla.core._tensor", "Tensor"): _tensor.Tensor,
        ("megxla.core._tensor", "Parameter"): _tensor.Parameter,
        ("megxla.core._tensor", "_rebuild"): _rebuild_v0,
        ("megxla._serialization", "_rebuild_v0"): _rebuild_v0,
        ("megengine.tensor", "Tensor"): _megengine_tensor_class(False),
        ("megengine.tensor", "Parameter"): _megengine_tensor_class(True),
    }
    for name in ("set", "frozenset", "complex", "slice", "range", "bytearray", "list", "dict", "tuple", "int",
                 "float", "bool", "str", "bytes"):
        allowed[("builtins", name)] = getattr(__import__("builtins"), name)
    # numpy dtype classes (numpy >= 1.25 pickles some dtypes by class, e.g. numpy.dtypes.StringDType)
    dtypes_mod = getattr(np, "dtypes", None)
    if dtypes_mod is not None:
        for name in dir(dtypes_mod):
            if name.endswith("DType"):
                allowed[("numpy.dtypes", name)] = getattr(dtypes_mod, name)
    # NumPy scalar types (np.float32 etc. appear as dtype arguments and in scalar reconstruction), and the
    # extension types JAX's bfloat16 / float8 / int4 dtypes are (ml_dtypes): constructors of numbers only
    for name in dir(np):
        obj = getattr(np, name, None)
        if isinstance(obj, type) and issubclass(obj, np.generic):
            allowed[("numpy", name)] = obj
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover -- a jaxlib dependency
        ml_dtypes = None
    for name in dir(ml_dtypes) if ml_dtypes is not None else ():
        obj = getattr(ml_dtypes, name, None)
        if isinstance(obj, type) and issubclass(obj, np.generic):
            allowed[("ml_dtypes", name)] = obj
    # MegEngine writes its Tensor classes under megengine.tensor; its top-level re-exports may appear too
    allowed[("megengine", "Tensor")] = allowed[("megengine.tensor", "Tensor")]
    allowed[("megengine", "tensor")] = allowed[("megengine.tensor", "Tensor")]
    allowed[("megengine", "Parameter")] = allowed[("megengine.tensor", "Parameter")]
    allowed[("megxla", "Tensor")] = _tensor.Tensor
    allowed[("megxla", "Parameter")] = _tensor.Parameter
    # a tensor's quantization parameters (its pickled state, MegEngine's and ours): plain data classes whose
    # rebuilding only sets fields
    from .core.tensor.dtype import QuantDtypeMeta
    from .quantization.utils import QParams, QuantMode
    for module in ("megengine.quantization.utils", "megxla.quantization.utils"):
        allowed[(module, "QParams")] = QParams
        allowed[(module, "QuantMode")] = QuantMode
    for module in ("megengine.core.tensor.dtype", "megxla.core.tensor.dtype"):
        allowed[(module, "QuantDtypeMeta")] = QuantDtypeMeta
    return allowed


def _frombuffer(buf, dtype, shape, order):
    return np.frombuffer(buf, dtype=dtype).reshape(shape, order=order).copy()


_ALLOWED = None


def _numpy_name(module):
    # NumPy 1.x files name numpy.core.*; NumPy 2 moved it to numpy._core (numpy.core still works, with a warning)
    if module == "numpy.core" or module.startswith("numpy.core."):
        return "numpy._core" + module[len("numpy.core"):]
    return module


class _Unpickler(pickle.Unpickler):
    def __init__(self, f, weights_only):
        super().__init__(f)
        self.weights_only = weights_only
        self.devices = {}  # id(tensor) -> (tensor, device name in the file)
        self._tensor_classes = {}

    def find_class(self, module, name):
        global _ALLOWED
        if _ALLOWED is None:
            _ALLOWED = _allowed()
        module = _numpy_name(module)
        hit = _ALLOWED.get((module, name))
        if hit is not None and getattr(hit, "__module__", None) == __name__ and hit.__name__ in ("Tensor",
                                                                                                   "Parameter"):
            # this load's own MegEngine tensor class, recording the file's device names
            key = hit.__name__
            if key not in self._tensor_classes:
                self._tensor_classes[key] = _megengine_tensor_class(key == "Parameter", self.devices)
            return self._tensor_classes[key]
        if hit is not None:
            return hit
        if self.weights_only:
            raise pickle.UnpicklingError(
                f"load: refusing to load {module}.{name}: with weights_only=True (the default) a file may only hold "
                f"data (containers, numbers, strings, NumPy arrays, Tensors/Parameters), since unpickling other "
                f"objects can run arbitrary code. If you trust this file, load it with "
                f"megxla.load(f, weights_only=False) or set the environment variable {UNSAFE_ENV}=1.")
        if module == "megengine" or module.startswith("megengine."):
            # a MegEngine class pickled whole (or a megxla one, which save writes under MegEngine's names):
            # megxla's class of the same path, else of the nearest package exporting that name (MegEngine's
            # megengine.module.conv_transpose_bn.ConvTransposeBn2d is megxla.module.ConvTransposeBn2d)
            return _megxla_global("megxla" + module[len("megengine"):], name)
        return super().find_class(module, name)


def _megxla_global(module, name):
    """megxla's global for a MegEngine ``module.name``: the nearest importable package on the path decides (a
    MegEngine-only file such as ``conv_transpose_bn`` falls back to its package, ``megxla.module``, never
    further, so a name cannot resolve to a same-named class of another package)."""
    import importlib
    parts = module.split(".")
    for i in range(len(parts), 1, -1):
        try:
            package = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        obj = package
        for attr in name.split("."):
            obj = getattr(obj, attr, None)
        if obj is not None:
            return obj
        break
    raise pickle.UnpicklingError(f"load: the file names {module.replace('megxla', 'megengine', 1)}.{name}, "
                                 f"which megxla does not have")


def load(f, map_location=None, pickle_module=pickle, weights_only=None):
    """Load an object saved with :func:`save` or with MegEngine's ``megengine.save``.

    Warning:
        Unpickling can run arbitrary code. By default (``weights_only=True``) only data is rebuilt: containers,
        numbers, strings, NumPy arrays, Tensors / Parameters (MegEngine's included); any other class in the file
        raises :class:`pickle.UnpicklingError` naming it. ``weights_only=False`` (or the environment variable
        ``MEGXLA_LOAD_UNSAFE=1``) loads anything — only for files you trust.

    Args:
        f: a path, or a binary file object with ``read`` / ``readline``.
        map_location: where to put the loaded Tensors: a device name (``"cpu0"``), a dict mapping device names
            of the file (``"gpu0"`` or ``"gpu0:0"``) to device names, or a callable given the file's device name
            with its stream (``"xpux:0"``, ``"cpu1:1"``, as MegEngine passes it) and returning a device name.
        pickle_module: the unpickling module; anything but the standard :mod:`pickle` is used as given
            (``pickle_module.load(f)``, no allow-list: only with ``weights_only=False``).
        weights_only: rebuild only data (default ``True``, unless ``MEGXLA_LOAD_UNSAFE=1``).

    Returns:
        the loaded object.

    Example:
        >>> import io, pickle, megxla as mge
        >>> buf = io.BytesIO(); mge.save({"w": mge.Tensor([1.0, 2.0])}, buf)
        >>> mge.load(io.BytesIO(buf.getvalue()))["w"].numpy()
        array([1., 2.], dtype=float32)
        >>> class Evil:
        ...     def __reduce__(self):
        ...         import os
        ...         return os.system, ("echo pwned",)
        >>> mge.load(io.BytesIO(pickle.dumps(Evil())))
        Traceback (most recent call last):
        ...
        _pickle.UnpicklingError: load: refusing to load posix.system: ...
    """
    if weights_only is None:
        weights_only = os.environ.get(UNSAFE_ENV, "") != "1"
    if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
        with open(f, "rb") as fh:
            return load(fh, map_location=map_location, pickle_module=pickle_module, weights_only=weights_only)
    devices = {}
    if pickle_module is not pickle:
        if weights_only:
            raise ValueError("load: a custom pickle_module cannot be restricted to data; pass weights_only=False "
                             "to use it (only for files you trust)")
        obj = pickle_module.load(f)
    else:
        unpickler = _Unpickler(f, weights_only)
        obj = unpickler.load()
        devices = unpickler.devices
    if map_location is None and dmap._active:
        map_location = dmap._active[-1]
    if map_location is not None:
        obj = _map(obj, _mover(map_location, devices))
    return obj


class dmap:
    """Context manager giving every :func:`load` inside it a default ``map_location`` (MegEngine's helper).

    Args:
        map_location: as in :func:`load`.

    Example:
        >>> import io, megxla as mge
        >>> buf = io.BytesIO(); mge.save(mge.Tensor([1.0]), buf)
        >>> with dmap("cpu0"):
        ...     t = mge.load(io.BytesIO(buf.getvalue()))
        >>> "cpu0" in repr(t.device)
        True
    """

    _active = []

    def __init__(self, map_location):
        self.map_location = map_location

    def __enter__(self):
        dmap._active.append(self.map_location)
        return self

    def __exit__(self, *exc):
        dmap._active.pop()


class _LocatorError(ValueError, AssertionError):
    """A ``map_location`` dict naming something that is not a device: MegEngine asserts (``Invalid locator_map key
    value``), so this is an ``AssertionError`` too."""


def _full_name(dev):
    # MegEngine's device names as its files and map_location callables see them: "xpux:0", "cpu1:1"
    return dev if ":" in dev else dev + ":0"


def _mover(map_location, devices):
    from .core._tensor import Tensor
    from .core.dtypes import _parse

    if isinstance(map_location, str):
        def dest(dev):
            return map_location
    elif isinstance(map_location, dict):
        for key, value in map_location.items():
            for v in (key, value):
                try:
                    if not isinstance(v, str):
                        raise ValueError(v)
                    _parse(v)
                except ValueError:
                    raise _LocatorError(f"load: invalid map_location key value {v!r} (a device name such as "
                                        f"'cpu0', 'gpu1', 'xpux')") from None

        def dest(dev):
            # a key names a device with or without its stream ("gpu0" maps "gpu0:0"; MegEngine compares the first
            # four characters only, so its "cpu1" also caught "cpu10")
            return map_location.get(dev, map_location.get(dev.split(":")[0], dev))
    elif callable(map_location):
        dest = map_location
    else:
        raise TypeError(f"load: map_location must be a device name, a dict or a callable, got "
                        f"{type(map_location).__name__}")

    def move(t):
        if not isinstance(t, Tensor):
            return t
        # the file's name with its stream, as MegEngine passes it to a callable ("xpux:0", "cpu1:1")
        src = _full_name(devices[id(t)][1] if id(t) in devices else _device_name(t))
        to = dest(src)
        if to is None or _full_name(str(to)) == src:
            return t
        moved = t.to(to)
        if type(t) is not type(moved):
            moved = type(t)(moved)
        return moved
    return move


def _map(obj, fn):
    if isinstance(obj, dict):
        out = type(obj)() if type(obj) in (dict, collections.OrderedDict) else dict()
        for k, v in obj.items():
            out[k] = _map(v, fn)
        return out
    if isinstance(obj, list):
        return [_map(v, fn) for v in obj]
    if isinstance(obj, tuple) and type(obj) is tuple:
        return tuple(_map(v, fn) for v in obj)
    return fn(obj)


