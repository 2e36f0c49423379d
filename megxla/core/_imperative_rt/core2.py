"""``megengine.core._imperative_rt.core2``: :func:`apply` of a builtin op descriptor, and ``Tensor``.

Example:
    >>> import megxla as mge
    >>> from megxla.core.ops import builtin
    >>> (y,) = apply(builtin.Elemwise(mode="mul"), mge.Tensor([2.0]), mge.Tensor([3.0]))
    >>> float(y.item())
    6.0
"""
from __future__ import annotations

import weakref as _weakref

import numpy as np

from .._tensor import Tensor
from .._dispatch import OpError
from ..ops.builtin import OpDef

__all__ = ["apply", "Tensor", "TensorWeakRef", "full_sync", "push_scope", "pop_scope"]


def apply(op: OpDef, *args):
    """Run the builtin op descriptor ``op`` on tensors; always returns a tuple of Tensors (as MegEngine).

    Args:
        op: an :class:`~megxla.core.ops.builtin.OpDef` (``Elemwise(mode="add")``, ``Reduce(...)``...).
        args: the input tensors (NumPy arrays and Python scalars are converted).

    Returns:
        tuple of output Tensors.
    """
    if not isinstance(op, OpDef):
        raise TypeError(f"apply: expected a builtin op descriptor (megxla.core.ops.builtin), got {op!r}")
    inputs = tuple(a if isinstance(a, Tensor) else Tensor(a) for a in args)
    return tuple(op._apply(inputs))


class TensorWeakRef:
    """A weak reference to a Tensor (MegEngine's ``core2.TensorWeakRef``): calling it gives the Tensor, or None
    once nothing else holds it -- how MegEngine's tests check that autodiff frees what a backward does not need.

    Example:
        >>> import megxla as mge
        >>> x = mge.Tensor([1.0]); r = TensorWeakRef(x)
        >>> r() is x
        True
        >>> del x; r() is None
        True
    """

    __slots__ = ("_ref",)

    def __init__(self, tensor: Tensor):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"TensorWeakRef: expected a Tensor, got {type(tensor).__name__}")
        self._ref = _weakref.ref(tensor)

    def __call__(self):
        return self._ref()


def full_sync():
    """Wait until every computation whose result is alive has finished (MegEngine's ``_full_sync``).

    XLA runs asynchronously; this blocks on all live device arrays, so timings and host reads after it see
    completed work. Under auto-jit the calling thread's pending cluster runs first (a benchmark timing its steps
    with ``_full_sync`` measured only their collection).
    """
    import jax
    from .. import _lazy
    if _lazy.FLUSH[0] is not None:
        _lazy.FLUSH[0]("_full_sync")
    jax.block_until_ready(jax.live_arrays())
    jax.effects_barrier()


def is_external_convert() -> bool:
    """Whether tensors take values produced by XLA executables as they are: always True in megxla.

    MegEngine turns this on when an ``xla_trace`` is built, so that its executables' outputs (XLA arrays)
    become MegEngine tensors; megxla's tensors hold XLA arrays natively, so there is nothing to switch.

    Example:
        >>> is_external_convert()
        True
    """
    return True


def set_external_convert_hook(hook) -> None:
    """MegEngine's registration of the converter from XLA arrays to MegEngine tensors (DLPack). megxla needs
    no converter (tensors hold XLA arrays), so ``hook`` is only checked to be callable, as MegEngine does.

    Raises:
        TypeError: ``hook`` is not callable.
    """
    if not callable(hook):
        raise TypeError(f"set_external_convert_hook: expected a function, got {type(hook).__name__}")


def sync():
    """Wait until all computation issued so far has finished (MegEngine's ``core2.sync``).

    megxla's pending work is XLA's asynchronous dispatch: this is :func:`full_sync`.

    Example:
        >>> import megxla as mge
        >>> y = mge.Tensor([1.0]) * 2
        >>> sync()
        >>> y.numpy()
        array([2.], dtype=float32)
    """
    full_sync()


def close() -> None:
    """Finish all issued computation, as MegEngine's ``core2.close`` does before it shuts its interpreter down
    (MegEngine registers it at exit; programs call it last, e.g. the int4 ResNet example's ``calibrate.py``).

    megxla has no interpreter channel to shut: this is :func:`full_sync`, and tensors stay usable afterwards
    (MegEngine's later ops raise ``RuntimeError: Channel already closed``).

    Example:
        >>> close()
    """
    full_sync()


def create_complex(real, imag):
    """A complex tensor ``real + 1j * imag`` from two float tensors (MegEngine's ``core2.create_complex``).

    The same primitive as :func:`megxla.functional.complex`, applied through the dispatch point.

    Args:
        real: real parts (float tensor).
        imag: imaginary parts (float tensor of the same shape).

    Returns:
        a complex64 (complex128 for float64 inputs) tensor.

    Raises:
        OpError: an input is not a floating-point tensor (MegEngine: "unsupported dtype").

    Example:
        >>> import megxla as mge
        >>> create_complex(mge.Tensor([1.0]), mge.Tensor([2.0])).numpy()
        array([1.+2.j], dtype=complex64)
    """
    from .._dispatch import apply as _apply
    from ..ops.elemwise import BINARY
    real, imag = (x if isinstance(x, Tensor) else Tensor(x) for x in (real, imag))
    for x in (real, imag):
        if x.dtype.kind != "f":
            raise OpError(f"create_complex: unsupported dtype {x.dtype} (real and imag must be float tensors; "
                          f"shapes {tuple(real.shape)}, {tuple(imag.shape)})")
    return _apply(BINARY["complex"].bind(), real, imag)


# MegEngine's interpreter options with their defaults (``megengine.core.get_option`` on MegEngine 1.13's CPU).
# They tune MegEngine's runtime (asynchronous dispatch, DTR dropping, host-side shape computation, recording of
# computing paths) whose work XLA does itself: megxla keeps and returns them, and ``async_level`` is
# ``megxla.config.async_level`` (one setting, validated there).
_OPTIONS = {"async_level": 2, "enable_drop": 0, "enable_host_compute": 1, "record_computing_path": 0,
            "enable_dtr_auto_drop": 0, "enable_dtr_sqrt_sampling": 0, "dtr_eviction_threshold": 0,
            "dtr_evictee_minimum_size": 1048576, "disable_memory_forwarding": 0, "max_recompute_time": 1,
            "catch_worker_execption": 1}
_CONFIG_OPTIONS = {"async_level": "async_level", "disable_memory_forwarding": "disable_memory_forwarding"}


def _option_name(fn, name):
    if name not in _OPTIONS:
        raise IndexError(f"{fn}: unknown option {name!r}; MegEngine's options are {sorted(_OPTIONS)}")
    return name


def get_option(name: str) -> int:
    """The value of one of MegEngine's interpreter options (``megengine.core.get_option``).

    Args:
        name: the option, e.g. ``"async_level"``, ``"enable_drop"``.

    Returns:
        the value as an int.

    Raises:
        IndexError: unknown option (as MegEngine).

    Example:
        >>> get_option("async_level")
        2
        >>> get_option("dtr_evictee_minimum_size")
        1048576
    """
    name = _option_name("get_option", name)
    if name in _CONFIG_OPTIONS:
        from ... import config
        return int(getattr(config, _CONFIG_OPTIONS[name]))
    return _OPTIONS[name]


def set_option(name: str, value: int) -> None:
    """Set one of MegEngine's interpreter options (``megengine.core.set_option``): ``async_level`` is
    :data:`megxla.config.async_level`; the others are kept for :func:`get_option` (XLA schedules, fuses and
    rematerialises itself, so they change no computation).

    Args:
        name: the option.
        value: an int (or bool), as MegEngine's binding takes.

    Raises:
        IndexError: unknown option; TypeError: ``value`` is not an int; ValueError: an invalid ``async_level``.

    Example:
        >>> set_option("enable_drop", True)
        >>> get_option("enable_drop")
        1
        >>> set_option("enable_drop", 0)
    """
    name = _option_name("set_option", name)
    if not isinstance(value, (bool, int, np.integer)):
        raise TypeError(f"set_option({name!r}, ...): expected an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if name in _CONFIG_OPTIONS:
        from ... import config
        setattr(config, _CONFIG_OPTIONS[name], value if name == "async_level" else bool(value))
    else:
        _OPTIONS[name] = value


def get_auto_format_convert() -> bool:
    """MegEngine's automatic NCHW/NHWC conversion switch: :data:`megxla.config._auto_format_convert` (accepted
    and kept; XLA picks memory layouts itself, so tensors carry no format).

    Example:
        >>> get_auto_format_convert()  # (True on import, as MegEngine 1.13's)
        True
    """
    from ... import config
    return bool(config._auto_format_convert)


def set_auto_format_convert(flag: bool) -> None:
    """Set :data:`megxla.config._auto_format_convert` (MegEngine's ``core2.set_auto_format_convert``).

    Example:
        >>> set_auto_format_convert(False); get_auto_format_convert()
        False
        >>> set_auto_format_convert(True)
    """
    from ... import config
    config._auto_format_convert = flag


__all__ += ["OpError", "is_external_convert", "set_external_convert_hook", "sync", "close", "create_complex",
            "get_option", "set_option", "get_auto_format_convert", "set_auto_format_convert"]


# MegEngine defines these here (its core.tensor.utils imports them from core2)
from ..tensor.utils import dtype_promotion, get_device  # noqa: E402

__all__ += ["dtype_promotion", "get_device"]


# MegEngine's interpreter scopes: a profiler-only stack (they name no tensor, unlike utils.naming's scopes), one
# JAX trace annotation per open scope while a Profiler records. Process-wide, as MegEngine's.
_scopes: list = []


def push_scope(name: str) -> None:
    """Open the profiler scope ``name`` (MegEngine's ``core2.push_scope``: ``clip_grad_norm`` and user code
    bracket a region so a :class:`~megxla.utils.profiler.Profiler` timeline shows it as one slice).

    Args:
        name: the scope's name; :func:`pop_scope` must close it with the same name.

    Example:
        >>> push_scope("clip"); pop_scope("clip")
    """
    from .. import _naming
    ann = None
    if _naming._profiling[0] or _naming._recording[0]:
        import jax
        ann = jax.profiler.TraceAnnotation(str(name))
        ann.__enter__()
    _scopes.append((str(name), ann))


def pop_scope(name: str) -> None:
    """Close the innermost profiler scope, which must be ``name`` (a mismatch raises, as MegEngine asserts).

    Args:
        name: the scope's name.

    Example:
        >>> push_scope("outer"); push_scope("inner"); pop_scope("inner"); pop_scope("outer")
    """
    if not _scopes or _scopes[-1][0] != str(name):
        top = repr(_scopes[-1][0]) if _scopes else "none"
        raise RuntimeError(f"pop_scope({name!r}): scope name mismatch, the innermost open scope is {top}")
    _, ann = _scopes.pop()
    if ann is not None:
        ann.__exit__(None, None, None)


# ---- MegEngine's autocast and input-conversion switches (its test suite's conftest saves and compares them) -------
def _get_amp_dtype_autocast() -> bool:
    """Whether autocast is on (``megxla.amp``'s state).

    Example:
        >>> _get_amp_dtype_autocast()
        False
    """
    from .. import _autocast
    return _autocast.enabled


def _set_amp_dtype_autocast(flag: bool) -> None:
    """Turn autocast on or off, as ``megxla.amp.enabled = flag``.

    Example:
        >>> _set_amp_dtype_autocast(False); _get_amp_dtype_autocast()
        False
    """
    from .. import _autocast
    _autocast.enabled = bool(flag)


def _get_amp_high_prec_dtype() -> str:
    """Autocast's high precision dtype name (``"float32"``).

    Example:
        >>> _get_amp_high_prec_dtype()
        'float32'
    """
    from .. import _autocast
    return _autocast.high_prec_dtype


def _set_amp_high_prec_dtype(dtype: str) -> None:
    """Set autocast's high precision dtype, as ``megxla.amp.high_prec_dtype = dtype``.

    Example:
        >>> _set_amp_high_prec_dtype("float32")
    """
    from .. import _autocast
    _autocast.high_prec_dtype = np.dtype(dtype).name


def _get_amp_low_prec_dtype() -> str:
    """Autocast's low precision dtype name (``"float16"``).

    Example:
        >>> _get_amp_low_prec_dtype()
        'float16'
    """
    from .. import _autocast
    return _autocast.low_prec_dtype


def _set_amp_low_prec_dtype(dtype: str) -> None:
    """Set autocast's low precision dtype, as ``megxla.amp.low_prec_dtype = dtype``.

    Example:
        >>> _set_amp_low_prec_dtype("float16")
    """
    from .. import _autocast
    _autocast.low_prec_dtype = np.dtype(dtype).name


_convert_inputs = [True]


def _get_convert_inputs() -> bool:
    """MegEngine's switch for converting an op's non-Tensor inputs (numbers, arrays) to Tensors: megxla always
    converts them; the switch is kept for code that saves and restores it.

    Example:
        >>> _get_convert_inputs()
        True
    """
    return _convert_inputs[0]


def _set_convert_inputs(flag: bool) -> bool:
    """Record MegEngine's input-conversion switch; returns its previous value, as MegEngine's.

    Example:
        >>> _set_convert_inputs(True)
        True
    """
    old, _convert_inputs[0] = _convert_inputs[0], bool(flag)
    return old


__all__ += ["_get_amp_dtype_autocast", "_set_amp_dtype_autocast", "_get_amp_high_prec_dtype",
            "_set_amp_high_prec_dtype", "_get_amp_low_prec_dtype", "_set_amp_low_prec_dtype", "_get_convert_inputs",
            "_set_convert_inputs"]
