"""``Tensor``: a mutable handle on an immutable ``jax.Array``.

A Tensor is a *variable*; the jax array it holds is a *value*. Every value binding gets a fresh value id
(``_vid``), which is how the autodiff tape and the jit tracer name values: in-place updates (``_reset``,
``+=``, ``x[i] = v``) rebind the same Python object to a new value and a new id, so traces and tapes stay
SSA-shaped data.
"""
from __future__ import annotations

import math
import weakref as _weakref

import numpy as np
import jax
import jax.numpy as jnp

from . import dtypes as _dt
from . import _lazy
from . import _spmd
from ._lazy import Lazy, resolve as _lazy_resolve


def _current_interpreter():
    """(Replaced by ``_dispatch.current_interpreter`` when ``_dispatch``, which imports this module, loads: a host
    read asks it without an import statement's ~2 us.)"""
    from ._dispatch import current_interpreter
    return current_interpreter()

__all__ = ["Tensor", "Parameter"]


# Filled by megxla.quantization: a callable making the default QParams of a tensor (layers only look down).
QPARAMS_FACTORY: list = [None]
# True once any tensor has had quantization parameters (the only ways in are below and quantizing astype): until
# then the elementwise front end skips its quantized-operand check, which costs a slot miss per operand.
QPARAMS_SEEN: list = [False]


def keep_qparams(out, inp):
    """Give ``out`` (a shape op's or an index's result) the quantization parameters of ``inp`` where ``inp`` is a
    quantized tensor (integer storage; in MegEngine they live in the dtype). A float tensor of
    quantization-aware training keeps them only on the tensor object the fake quantizer returned, as in
    MegEngine: a pooled or flattened activation has none, so the next layer's bias is not fake-quantized."""
    if not QPARAMS_SEEN[0]:  # (no tensor has quantization parameters yet: skip the slot miss)
        return out
    q = getattr(inp, "_qparams", None)
    if q is not None and q.scale is not None and inp._data.dtype.kind in "iu":
        out._qparams = q
    return out


_QDTYPES: dict = {}


def _quantized_dtype(q, storage):
    """MegEngine's quantized NumPy dtype of QParams ``q`` (plain ``storage`` where the scale is not a concrete
    value: inside a trace, where reading it would be a host read)."""
    def number(v):
        v = getattr(v, "_data", v)
        if isinstance(v, jax.core.Tracer):
            raise TypeError
        return np.asarray(v).reshape(-1)[0].item()
    try:
        key = (q.dtype_meta.name, number(q.scale), None if q.zero_point is None else int(number(q.zero_point)))
    except (TypeError, AttributeError, IndexError):
        return storage
    dt = _QDTYPES.get(key)
    if dt is None:
        from .tensor.dtype import create_quantized_dtype
        dt = _QDTYPES[key] = create_quantized_dtype(q.dtype_meta, key[1], key[2])
    return dt


def _take_dtype_qparams(t, metadata):
    """Give ``t`` the quantization parameters of its dtype's ``metadata`` (``Tensor(a, dtype=dtype.qint8(0.1))``,
    ``Tensor(dtype.convert_to_qint8(...))``): in MegEngine they live in the dtype, so such a tensor dequantizes
    in ``astype("float32")`` and multiplies as a quantized one."""
    info = metadata.get("mgb_dtype")
    if info is None or QPARAMS_FACTORY[0] is None:
        return
    from .tensor.dtype import _meta_of
    zp = info.get("zero_point")
    t._qparams = QPARAMS_FACTORY[0](_meta_of(info), Tensor(np.float32(info["scale"])),
                                    None if zp is None else Tensor(np.float32(zp)))
    QPARAMS_SEEN[0] = True


def _check_lowbit_values(data, metadata):
    """A tensor made from host values with a 4-bit (or narrower) quantized dtype holds them as they are, in an 8-bit
    storage: values outside the type's range (``Tensor([-1.5, 3.0], dtype=quint4(0.1, 7))``'s -1, stored as 255) are
    an error, as MegEngine's assertion ``val >= min_val && val <= max_val`` makes them -- megxla kept the 255, and
    dequantized it to 42 (megengine_quant_fuzz seed 10)."""
    info = metadata.get("mgb_dtype")
    if info is None or not isinstance(data, jax.Array) or data.dtype.kind not in "iu":
        return
    from .tensor.dtype import _meta_of, saturation_range
    meta = _meta_of(info)
    if meta.qmax - meta.qmin >= 255 or data.size == 0:  # (8 bits and more: as ``is_lowbit``, no check)
        return
    lo, hi = saturation_range(meta)  # (the MegBrain dtype's range, which MegEngine's assertion tests)
    host = np.asarray(data)
    bad = (host < lo) | (host > hi)
    if bad.any():
        from ._dispatch import OpError
        v = host[bad].flat[0]
        raise OpError(f"Tensor of dtype {meta.name}: the stored value {v} (the given value converted to "
                      f"{host.dtype}) is outside [{lo}, {hi}]; to quantize real values use "
                      f"x.astype(dtype) or convert_to_{meta.name}")


class UnreadableTensorError(jax.errors.TracerArrayConversionError):
    """Reading a tensor that only exists inside a traced function (it escaped the body, not as a result)."""

    def __init__(self, message):  # (JAX's class builds its text from a tracer; ours says what happened)
        Exception.__init__(self, message)

    def __str__(self):
        return self.args[0]


_CONCRETE = (np.ndarray, np.generic)


class ScalarConversionError(ValueError, AssertionError):
    """A tensor of other than one element converted to a Python scalar (``item()``, ``bool``, ``float``, ``int``,
    ``__index__``). MegEngine 1.13 raises a bare ``AssertionError`` there, so MegEngine code that catches one
    catches this; it is also the ``ValueError`` NumPy raises."""


class Shape(tuple):
    """A tensor's shape: a tuple of ints that also converts with ``.numpy()``, as MegEngine's shape does inside
    ``trace(symbolic=True)`` (there a shape is a Tensor; code such as ``y.shape.numpy()`` in a traced function
    runs unchanged). Everything else is the tuple's: equality, hashing, indexing, ``len``, arithmetic.

    Example:
        >>> from megxla import Tensor
        >>> s = Tensor([[1.0, 2.0, 3.0]]).shape
        >>> s == (1, 3), s.numpy()
        (True, array([1, 3], dtype=int32))
    """

    __slots__ = ()

    def numpy(self):
        """The shape as a 1-d int32 NumPy array."""
        return np.array(self, dtype=np.int32)

    def __reduce__(self):  # pickles as a plain tuple: a saved shape loads anywhere, MegEngine included
        return (tuple, (tuple(self),))


def _scalar_str(v):
    """``str`` of a NumPy scalar as NumPy 1 (MegEngine's) writes it, which a 0-d tensor's repr shows: positional
    between 1e-4 and 1e16 (``100000000.0``, float16 ``2000.0``), else scientific (``1e-05``). NumPy 2 switches to
    scientific from the type's precision on (``1e+08``, ``2e+03``)."""
    if isinstance(v, np.floating) and np.isfinite(v) and v.dtype.itemsize <= 8:
        a = abs(float(v))
        if a == 0 or 1e-4 <= a < 1e16:
            return np.format_float_positional(v, trim="0")
        return np.format_float_scientific(v, trim="-")
    return str(v)


_FORMATS = ("default", "nchw", "nhwc")  # MegEngine's format names (its Format enum)


def _check_format(value):
    if value not in _FORMATS:
        raise ValueError(f'Tensor: invalid format {value!r}; MegEngine knows only "default", "nchw" and "nhwc" '
                         f'(megxla accepts and ignores them: XLA chooses memory layouts itself)')


# the tensor a subclass's ``__new__`` just gave its value (a weak reference), whose ``__init__`` only names it
_MADE_BY_NEW = [None]


class Tensor:
    """A multi-dimensional array on a device, with MegEngine's semantics.

    Args:
        data: a Tensor, NumPy array, list, or Python scalar.
        dtype: target dtype; default follows MegEngine: floats -> float32, ints -> int32.
        device: device name such as ``"cpu0"``, ``"gpu0"`` or ``"xpux"`` (the default device).
        is_const: accepted for MegEngine compatibility.
        no_cache: accepted for MegEngine compatibility.
        name: the tensor's name (shown in trace errors and dumps).
        format: MegEngine's memory format tag (``"default"``, ``"nchw"``, ``"nhwc"``): accepted and ignored,
            XLA chooses layouts (see :attr:`format`).

    Example:
        >>> import megxla as mge
        >>> x = mge.Tensor([1, 2, 3])
        >>> (x * 2).numpy()
        array([2, 4, 6], dtype=int32)
    """

    # ``_lnode``: the logical device (a CompNode) the tensor was made on or moved to, when not ``xpux`` (unset
    # otherwise; op results take their inputs', see ``_dispatch.pass_node``)
    # ``__dict__``: MegEngine's Tensor takes any attribute (real code sets ``x.stop_gradient = False``, tags
    # activations); created only when one is set, so a tensor without one costs a pointer
    __slots__ = ("_data", "_vid", "_grad", "_name", "_qparams", "_lnode", "__weakref__", "__dict__")
    __array_priority__ = 1000  # numpy defers `ndarray op Tensor` to our reflected operators

    def __new__(cls, *args, **kwargs):
        # MegEngine's Tensor takes its value in its C++ ``__new__``; ``__init__`` only names it. A subclass that
        # overrides ``__new__`` and calls ``Tensor.__new__(cls, *args)`` (invis's Tensor, which rewrites
        # ``device="cuda"`` there) gets its value from the arguments it passes, and the ``__init__`` that follows
        # (given the caller's original arguments) only names it. A plain ``Tensor(...)`` takes its value in
        # ``__init__`` as before: ``__new__`` adds one call, and op results are made without either.
        self = object.__new__(cls)
        if (args or kwargs) and cls.__new__ is not Tensor.__new__:
            Tensor.__init__(self, *args, **kwargs)
            _MADE_BY_NEW[0] = _weakref.ref(self)
        elif len(args) in (3, 7) and not kwargs and type(args[0]) is np.ndarray:
            # a MegEngine pickle read by pickle.load: NEWOBJ ``cls.__new__(cls, value, dtype, device[, is_const,
            # no_cache, name, format])`` (its __getnewargs__), then __setstate__, and no __init__. The file's device
            # (gpu0:0) may not exist here: the default one then. (A plain ``Tensor(array, dtype, device)`` comes
            # here too; its __init__ then only names it.)
            device = args[2] if isinstance(args[2], str) else None
            try:
                _dt.to_device(device)
            except ValueError:
                device = None
            Tensor.__init__(self, args[0], dtype=args[1], device=device)
            _MADE_BY_NEW[0] = _weakref.ref(self)
            if len(args) == 7 and args[5] is not None:
                self._name = args[5]
        return self

    def __init__(self, data, dtype=None, device=None, is_const=False, no_cache=False, name=None,
                 format="default"):
        # (``data`` has no default, as MegEngine's ``Tensor.__init__``: ``Tensor()`` is a TypeError there)
        made = _MADE_BY_NEW[0]
        if made is not None and made() is self:  # (valued by a subclass's ``__new__``, see there: name it only)
            _MADE_BY_NEW[0] = None
            if name is not None:
                self._name = name
            return
        if format != "default":  # (op results are made without __init__: this costs the dispatch nothing)
            _check_format(format)
        if data is None:
            data = []
        if isinstance(data, Tensor):
            # NOTE: an op (``tensor_copy``), never a host-side copy: a trace sees that the new tensor is made from
            # ``data`` (it follows data's value at every call instead of baking it in), and the copy is real (a
            # compiled step may donate data's buffer). Like MegEngine's, the copy is differentiable.
            from ._dispatch import apply
            from .ops.shape import tensor_copy
            op = tensor_copy.bind(dtype=None if dtype is None else _dt.canonical(dtype).name,
                                  device=None if device is None else _dt.to_device(device))
            src = apply(op, data)
            self._data, self._vid = src._data, src._vid
            if type(self._data) is Lazy:  # (an auto-jit cluster's pending value: this tensor gets it too)
                self._data.hold(self)
            # a quantized tensor's copy keeps its quantized dtype (MegEngine's is in the dtype), as
            # ``Parameter(qweight)`` does there; a quantized dtype given is taken as for host data
            md = getattr(dtype, "metadata", None)
            if md:
                _take_dtype_qparams(self, md)
            elif dtype is None:
                keep_qparams(self, data)
            if device is not None or _dt.LOGICAL[0]:  # the copy stays on data's logical device unless one is given
                node = _dt.logical_node(device) if device is not None else getattr(src, "_lnode", None)
                if node is not None:
                    self._lnode = node
        else:
            from ._dispatch import _vids
            rows = _lazy.HOST_ROWS[0]
            # (auto-jit: a line's host arrays of changing row counts kept at a few padded sizes, so the clusters
            # using them keep their shapes -- see jit's ``_padded.host_rows``)
            z = rows(data, dtype, device) if rows is not None and type(data) is np.ndarray and data.ndim \
                and type(self) is Tensor else None
            if z is not None:
                self._data = z
                self._vid = next(_vids)
                z.hold(self)
            else:
                self._data = _dt.to_array(data, dtype, device)
                self._vid = next(_vids)
                if _lazy.MADE[0] is not None:
                    _lazy.MADE[0](self)
            # MegEngine's quantized dtype, given or the NumPy array's (read from the source: JAX's arrays may
            # drop a dtype's metadata)
            md = getattr(dtype if dtype is not None else getattr(data, "dtype", None), "metadata", None)
            if md:
                _check_lowbit_values(self._data, md)
                _take_dtype_qparams(self, md)
            if device is not None or _dt.LOGICAL[0]:
                node = _dt.logical_node(device)
                if node is not None:
                    self._lnode = node
        self._grad = None
        self._name = name

    def __init_subclass__(cls, **kw):
        # MegEngine's Tensor takes its value in its C++ ``__new__``, from the constructor's arguments; its Python
        # ``__init__`` only names it. So a subclass whose ``__init__`` never calls ``Tensor.__init__`` still holds
        # its value (basedet's ``Boxes(boxes)``: ``self.__dict__ = boxes.__dict__``, then used as a tensor). Here a
        # subclass's own ``__init__`` is given the value first, from the same arguments; one that calls
        # ``super().__init__`` sets it again (megxla's value is the one that call gives).
        super().__init_subclass__(**kw)
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_value_first", False):
            return

        def __init__(self, *args, **kwargs):
            try:
                self._data
            except AttributeError:
                try:
                    Tensor.__init__(self, *args, **kwargs)
                except Exception:  # (arguments that are not a tensor's: the subclass's own __init__ makes it, as
                    pass  # before -- one that overrides __new__ in MegEngine gets no value from them there either)
            init(self, *args, **kwargs)

        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(__init__, attr, getattr(init, attr, None))
        __init__.__wrapped__ = init
        __init__._value_first = True
        cls.__init__ = __init__

    # ---- properties ---------------------------------------------------------------------------------------
    @property
    def shape(self):
        """The shape as a tuple of ints (a :class:`Shape`, which also has ``.numpy()``)."""
        return Shape(self._data.shape)

    @property
    def _tuple_shape(self):
        # MegEngine's shape as a plain tuple (its ``shape`` may be symbolic); MegEngine's own tests read it
        return tuple(self._data.shape)

    @property
    def dtype(self):
        """The NumPy dtype; for a quantized tensor (integer storage with quantization parameters) MegEngine's
        quantized dtype, which carries the scale and zero point (``dtype.get_scale(x.dtype)``)."""
        dt = np.dtype(self._data.dtype)
        if dt.kind in "iu" and QPARAMS_SEEN[0]:  # (until then no tensor is quantized: skip the slot miss)
            try:
                q = self._qparams
            except AttributeError:
                return dt
            if q is not None and q.dtype_meta is not None and q.scale is not None:
                return _quantized_dtype(q, dt)
        return dt

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def size(self):
        """Number of elements. As MegEngine (``np.prod(shape).item()``), a 0-d tensor's size is the float 1.0."""
        if not self._data.shape:
            return 1.0
        return math.prod(self._data.shape)  # (Python ints: exact, and ~15x cheaper than np.prod)

    @property
    def device(self):
        """The :class:`~megxla.core.dtypes.CompNode` holding the tensor. As in MegEngine it prints the logical
        name the tensor was made on or moved to (``xpux:0`` by default, ``cpu0:0`` after ``.to("cpu0")``; the
        results of ops keep their inputs' name) and compares equal to device names (``x.device == "cpu0"``).

        Example:
            >>> x = mge.Tensor([1.0])
            >>> str(x.device), str(x.to("cpu0").device), str((x.to("cpu0") * 2).device)
            ('xpux:0', 'cpu0:0', 'cpu0:0')
        """
        if _dt.LOGICAL[0]:
            return _dt.tensor_node(self._data, getattr(self, "_lnode", None))
        return _dt.comp_node(self._data)

    @property
    def format(self):
        """MegEngine's memory format tag: always ``"default"`` -- XLA chooses layouts itself, so a format given
        (``Tensor(x, format="nhwc")``, ``x.format = "nhwc"``, ``amp.convert_tensor_format``) is accepted and
        ignored (docs/differences.md); a name MegEngine does not know is an error.

        Example:
            >>> x = Tensor([[[[1.0]]]]); x.format = "nhwc"; x.format
            'default'
        """
        return "default"

    @format.setter
    def format(self, value):
        _check_format(value)

    @property
    def qparams(self):
        """Quantization parameters (scale, zero point, quantized dtype) of this tensor; made on first use by
        the factory ``megxla.quantization`` registers in ``QPARAMS_FACTORY`` (core does not import it)."""
        try:
            return self._qparams
        except AttributeError:
            factory = QPARAMS_FACTORY[0]
            q = self._qparams = factory() if factory is not None else None
            QPARAMS_SEEN[0] = True
            return q

    @property
    def name(self):
        """The tensor's name; ``""`` when it has none, as MegEngine's."""
        name = self._name
        return "" if name is None else name

    @name.setter
    def name(self, value):
        self._name = value

    @property
    def value_id(self):
        return self._vid

    @property
    def grad(self):
        """The gradient filled in by ``GradManager.backward`` (``None`` until then)."""
        return self._grad

    @grad.setter
    def grad(self, value):
        self._grad = value

    @grad.deleter
    def grad(self):  # (``del p.grad``, as MegEngine allows: None afterwards)
        self._grad = None

    @property
    def requires_grad(self):
        """Reserved, as in MegEngine 1.13: reading, setting or deleting it raises ``AttributeError``. What is
        differentiated is what a :class:`~.GradManager` has attached. (Code written for MegEngine 0.x or PyTorch
        that filters parameters on it fails at once, as on MegEngine, rather than get an empty list.)

        Example:
            >>> hasattr(Tensor([1.0]), "requires_grad")
            False
        """
        raise AttributeError("requires_grad is reserved for future use")

    @requires_grad.setter
    def requires_grad(self, value):
        raise AttributeError("requires_grad is reserved for future use")

    @requires_grad.deleter
    def requires_grad(self):
        raise AttributeError("requires_grad is reserved for future use")

    def _recorded(self):
        """Whether a recording GradManager tracks this tensor."""
        from ._dispatch import recorders
        return any(r._tracks(self) for r in recorders)

    # ---- host access ---------------------------------------------------------------------------------------
    def _value(self):
        """The concrete jax array (an interpreter may need to materialise it first)."""
        interp = _current_interpreter()
        if interp is not None:
            return interp.read(self)
        data = self._data
        if type(data) is Lazy:  # collected by auto-jit: run the pending cluster (a cut, as a host read is)
            data = _lazy_resolve(self)
        elif _lazy.READ[0] is not None:  # (auto-jit runs a loop's iterations eagerly: it times them read to read)
            _lazy.READ[0]()
        if not isinstance(data, _CONCRETE) and (isinstance(data, jax.core.Tracer) or not hasattr(data, "__array__")):
            raise UnreadableTensorError(
                f"a {tuple(data.shape)} {np.dtype(data.dtype).name} tensor computed inside a traced function "
                f"(xla_trace / trace) is read outside it, but it left the function other than as its return "
                f"value or as state of its arguments (e.g. appended to a list or set as an attribute of another "
                f"object), so no compiled call produces its value. Return it from the traced function.")
        return data

    def numpy(self) -> np.ndarray:
        """Copy the value to a NumPy array. A quantized tensor's array has MegEngine's quantized dtype (its integer
        storage type with the scale and zero point in the dtype's metadata: ``dtype.convert_from_qint8(q.numpy())``)."""
        try:
            a = np.asarray(self._value())
        except RuntimeError as exc:  # (a failed collective's result: its error names the rank that failed)
            _spmd.raise_peer_failure(exc)
            raise
        if QPARAMS_SEEN[0] and a.dtype.kind in "iu":  # (until a tensor is quantized: no slot read)
            dt = self.dtype
            if dt.metadata:
                a = a.view(dt)
        return a

    def item(self, *args):
        """The value of a one-element tensor as a Python scalar; ``item(*index)`` is ``self[index].item()``, as
        MegEngine's. Another size raises :class:`ScalarConversionError` (an ``AssertionError``, as MegEngine)."""
        if args:
            return self[args].item()
        self._check_one_element("item()")
        return self.numpy().item()

    def _check_one_element(self, what):
        # (the concrete shape: while trace_module records symbolic shapes, ``self.shape`` is a Tensor whose own
        # length and truth value came back here -- endlessly)
        shape = self._data.shape
        n = math.prod(shape)  # (every .item(): Python ints, ~15x cheaper than np.prod)
        if n != 1:
            raise ScalarConversionError(f"{what} needs a tensor of exactly one element to give a Python scalar, "
                                        f"got shape {tuple(shape)} ({n} elements); use .numpy() or "
                                        f".tolist() for its values, or reduce it first (.sum(), .max(), .min()) "
                                        f"for one value")

    def tolist(self):
        return self.numpy().tolist()

    def __array__(self, dtype=None, copy=None):
        # ``np.array(t)`` (copy=True) is a writable copy, as MegEngine's; ``np.asarray(t)`` the read-only view
        a = self.numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __dlpack__(self, stream=None):
        """A DLPack capsule sharing this tensor's device buffer (``torch.from_dlpack(t)``, ``np.from_dlpack(t)``)."""
        if stream is not None and not isinstance(stream, int):
            raise TypeError(f"__dlpack__: stream must be an int or None, got {type(stream).__name__}")
        return self._data.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __array_wrap__(self, array, context=None, return_scalar=False):
        # A NumPy ufunc of a Tensor gives a Tensor (np.exp(t), np.add(t, 1)), as MegEngine's __array_wrap__.
        return type(self)(array, dtype=array.dtype, device=self.device)

    def __bool__(self):
        self._check_one_element("bool()")
        return bool(self.numpy())

    def __float__(self):
        self._check_one_element("float()")
        return float(self.numpy().item())

    def __int__(self):
        self._check_one_element("int()")
        return int(self.numpy().item())

    def __index__(self):
        self._check_one_element("index()")
        value = self.numpy().item()
        if isinstance(value, float):  # (MegEngine: AttributeError from the float; a float is no index, as in Python)
            raise TypeError(f"a {self.dtype} tensor cannot be used as an index (an integer or bool tensor can)")
        return int(value)

    def __complex__(self):
        return complex(self.item())

    def __len__(self):
        shape = self._data.shape  # (concrete, see _check_one_element)
        if not shape:
            raise TypeError("ndim is 0 (len() of a 0-d tensor)")  # (MegEngine's text first)
        return shape[0]

    def __iter__(self):
        from ._indexing import rows
        for r in rows(self, len(self)):
            yield keep_qparams(r, self)  # (as __getitem__: elements of a quantized tensor keep its dtype)

    def __repr__(self):
        # MegEngine's format: class name, str() of the array at 4 digits, dtype unless float32, logical device.
        try:
            a = self.numpy()
            if a.ndim == 0:
                body = _scalar_str(a[()])
            else:
                with np.printoptions(precision=4, suppress=False):
                    body = str(a)
        except Exception as exc:  # abstract values during symbolic tracing have no numbers
            try:
                exc.handled = True  # (the abstract recording of a traced step goes on: see jit's unhandled_need)
            except AttributeError:
                pass
            body = "<abstract>"
        dtype = "" if self.dtype == np.float32 else f", dtype={self.dtype.name}"
        return f"{type(self).__name__}({body}{dtype}, device={self.device})"

    __str__ = __repr__

    def __hash__(self):
        return id(self)

    def __format__(self, spec):
        if not spec:  # f"{x}" is str(x), as MegEngine's: Tensor(1.5, device=xpux:0)
            return str(self)
        if self.ndim == 0:  # (MegEngine raises for a format spec; the number's format is the useful answer)
            return format(self.item(), spec)
        # (as MegEngine and NumPy arrays: a spec given to many numbers is an error, not silently dropped)
        raise TypeError(f"unsupported format string {spec!r} passed to Tensor.__format__ (a tensor of shape "
                        f"{self.shape}: format its elements, or a 0-d tensor)")

    def __reduce__(self):
        # the value, name and logical device (None: the default), then MegEngine's state (quantization parameters)
        node = getattr(self, "_lnode", None)
        args = (type(self), self.numpy(), self._name)
        return (_rebuild, args if node is None else args + (node.logical_name,), self.__getstate__())

    def __getnewargs__(self):
        """MegEngine 1.13.4's constructor arguments of a pickled tensor: ``(numpy value, dtype, logical device name,
        is_const, no_cache, name, format)`` (1.13.0 gave the first three; megxla pickles through ``__reduce__``
        and reads both forms).

        Example:
            >>> mge.Tensor([1], device="cpu0").__getnewargs__()
            (array([1], dtype=int32), dtype('int32'), 'cpu0:0', False, False, None, 'default')
        """
        return (self.numpy(), self.dtype, self.device.logical_name, False, False, None, self.format)

    def __getstate__(self):
        """MegEngine's pickled state: ``{"qparams": ...}`` once the tensor has quantization parameters, else
        ``{}``."""
        q = getattr(self, "_qparams", None)
        return {} if q is None else {"qparams": q}

    def __setstate__(self, state):
        # MegEngine's pickles end a Tensor with its __getstate__ dict: {} or {"qparams": ...} (see megxla.load);
        # MegEngine 1.1-1.2 wrote the whole tensor there: {"data", "dtype", "device", "qdict"}
        if state and "data" in state and not hasattr(self, "_data"):
            device = state.get("device")
            device = None if device is None else str(device)
            try:  # (a device this machine lacks: the default one)
                _dt.to_device(device)
            except ValueError:
                device = None
            Tensor.__init__(self, np.asarray(state["data"]), dtype=state.get("dtype"), device=device)
            qdict = state.get("qdict") or {}
            if qdict.get("scale") is not None and QPARAMS_FACTORY[0] is not None:
                q = self.qparams
                for key in ("mode", "scale", "zero_point"):
                    if qdict.get(key) is not None:
                        setattr(q, key, qdict[key])
            return
        if state and state.get("qparams") is not None:
            self._qparams = state["qparams"]
            QPARAMS_SEEN[0] = True

    def _copied(self):
        """A new tensor (same class, name, dtype) holding a copy of this value: a device buffer copy (no host
        round trip, no kernel to compile per shape: deep-copying a model stays cheap); inside a trace the
        ``tensor_copy`` op, which the recording sees."""
        import jax
        from ._dispatch import _vids
        data, vid = self._data, None
        if type(data) is Lazy:
            if data.value is None and data.pad is None:
                # (an auto-jit cluster's pending value: the copy is an op of the cluster -- a forced read cut the step
                # every time a project deep-copies a tensor it computed, OTA's shift generator)
                from ._dispatch import apply
                from .ops.shape import copy as copy_op
                made = apply(copy_op.bind(), self.detach())
                data, vid = made._data, made._vid
            else:
                data = data.force()
        if isinstance(data, jax.core.Tracer):  # (detached: MegEngine's copy.copy / deepcopy cut the gradient)
            return type(self)(self.detach(), name=self._name)
        t = type(self).__new__(type(self))
        if vid is None:
            t._data = jax.device_put(data, may_alias=False)  # (a real copy: the original may be donated later)
            t._vid = next(_vids)
        else:
            t._data, t._vid = data, vid
            if type(data) is Lazy:
                data.hold(t)
        t._grad = None
        t._name = self._name
        node = getattr(self, "_lnode", None)
        if node is not None:
            t._lnode = node
        return t

    def __copy__(self):
        # MegEngine's shallow copy: a new tensor of the same value sharing the quantization parameters
        t = self._copied()
        q = getattr(self, "_qparams", None)
        if q is not None:
            t._qparams = q
        return t

    def __deepcopy__(self, memo):
        t = self._copied()
        memo[id(self)] = t
        q = getattr(self, "_qparams", None)
        if q is not None:  # (a quantized tensor keeps its dtype: the scale lives there)
            import copy
            t._qparams = copy.deepcopy(q, memo)
        return t

    # ---- mutation ------------------------------------------------------------------------------------------
    def _reset(self, other):
        """Rebind this tensor, in place, to ``other``'s value (used by optimizers, ``+=`` and jit write-back)."""
        if not isinstance(other, Tensor):
            other = Tensor(other, dtype=self.dtype, device=getattr(self, "_lnode", None))
        data = other._data
        if type(data) is Lazy:  # (an auto-jit cluster's pending value: this tensor gets it when it runs)
            data.hold(self, (self._data, self._vid))
        self._data = data
        self._vid = other._vid
        if _dt.LOGICAL[0]:  # (MegEngine's _reset takes the other tensor's device too)
            self._lnode = getattr(other, "_lnode", None)
        return self

    def set_value(self, value):
        """Replace the value (shape may change); the Tensor object stays the same."""
        new = value if isinstance(value, Tensor) else Tensor(value, dtype=self.dtype)
        if new._data.shape != self._data.shape or new._data.dtype != self._data.dtype:
            from . import _registry
            _registry.bump_epoch()  # a new shape or dtype: prepared compiled calls that read it must miss
        return self._reset(new)

    def _rebind(self, value):
        # ``x[...] = v``: as MegEngine, x *becomes* v whatever its shape and dtype (an ASR Transformer's positional
        # encoding grows ``pe = Tensor(0.0); pe[...] = table`` so); a non-Tensor value takes x's dtype and device.
        # Sharing v's value id keeps autodiff and traces following v.
        old = self._data
        self._reset(value)
        if self._data.shape != old.shape or self._data.dtype != old.dtype:
            from . import _registry
            _registry.bump_epoch()  # (as set_value: prepared compiled calls that read x must miss)

    def reset_zero(self):
        """Fill with zeros in place."""
        from ._dispatch import apply
        from .ops.shape import full_like
        self._reset(apply(full_like.bind(value=0), self))

    def detach(self):
        """A tensor with the same value that gradients do not flow through.

        It is an op (``detach``, JAX's ``stop_gradient``) so that a trace sees the dependency on ``self``;
        GradManagers do not tape it, which is what cuts the gradient.

        Example:
            >>> x = mge.Parameter([1.0, 2.0]); y = x.detach()
            >>> y.numpy(), y is x
            (array([1., 2.], dtype=float32), False)
        """
        from ._dispatch import apply
        from .ops.shape import detach
        return keep_qparams(apply(detach.bind(), self), self)

    def to(self, device, *, _borrow=False):
        """A copy of this tensor on ``device``.

        It is an op (``device_put``; ``copy`` where the value is on ``device`` already) so that a trace sees the
        dependency on ``self`` (a compiled step moves the value it gets at each call, instead of baking in the one
        it saw while recording), and a real copy even on the same device (a compiled step may donate ``self``'s
        buffer).

        Example:
            >>> import megxla as mge
            >>> mge.Tensor([1.0]).to("cpu0").numpy()
            array([1.], dtype=float32)
        """
        from ._dispatch import apply
        from .ops.shape import copy, device_put
        target = _dt.to_device(device)
        try:
            here = self._data.devices()
        except Exception:  # (a traced value has no device: the transfer is recorded as ever)
            here = None
        # (where the value is there already, the copy is a plain one: under auto-jit a transfer runs eagerly and
        # cuts the cluster, and OMNet's ``F.copy(x, device=x.device)`` cut its step twice per refinement)
        op = copy.bind() if here is not None and len(here) == 1 and target in here else device_put.bind(device=target)
        out = apply(op, self)
        if type(out) is not type(self):  # Parameter.to gives a Parameter, holding the same value
            t = type(self).__new__(type(self))
            t._data, t._vid, t._grad, t._name = out._data, out._vid, None, None
            out = t
        node = _dt.logical_node(device)  # the result shows the name it was moved to (``cpu0:0``), as MegEngine
        if node is not None or _dt.LOGICAL[0]:
            out._lnode = node
        return out

    def _is_external_value(self):
        """True if this value was produced by a compiled executable (jit) rather than eagerly."""
        from ._external import is_external
        return is_external(self)

    # NOTE: astype, reshape, transpose, T, flatten, sum, mean, prod, max, min, var and the matmul operators
    # are installed by megxla.functional (``_install_tensor_methods``): they are functional's front ends, and
    # core imports nothing above itself.

    # ---- indexing ------------------------------------------------------------------------------------------
    def __getitem__(self, index):
        from ._indexing import getitem
        return keep_qparams(getitem(self, index), self)  # elements of a quantized tensor keep its dtype

    def __setitem__(self, index, value):
        from ._indexing import setitem
        if index is Ellipsis:  # (exactly ``...``: MegEngine's rule, ``x[(...,)] = v`` writes into x's shape)
            return self._rebind(value)
        if QPARAMS_SEEN[0]:
            from ._elemwise_front import quantized_params, to_quantized
            q = quantized_params(self)
            if q is not None:  # values written into a quantized tensor are quantized to its dtype (MegEngine)
                value = to_quantized(value, q, "setitem")
        self._reset(setitem(self, index, value))


def _rebuild(cls, array, name, device=None):
    # the array has the tensor's own dtype: keep it (64-bit tensors are not narrowed on load). A logical device
    # this machine lacks (a GPU tensor unpickled on a CPU host) gives the default one.
    if device is not None:
        try:
            _dt.to_device(device)
        except ValueError:
            device = None
    return cls(array, dtype=array.dtype, name=name, device=device)


class Parameter(Tensor):
    """A Tensor that is a trainable parameter of a Module (found by ``Module.parameters()``).

    Args:
        data, dtype, device, name: as :class:`Tensor`.

    Example:
        >>> class Scale(M.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.k = mge.Parameter([2.0])   # found by parameters(), updated by optimizers
        ...         self.offset = mge.Tensor([1.0])  # a plain Tensor: a buffer, not trained
        ...     def forward(self, x):
        ...         return x * self.k + self.offset
        >>> m = Scale(); [type(p).__name__ for p in m.parameters()], m(mge.Tensor([3.0])).numpy()
        (['Parameter'], array([7.], dtype=float32))
        >>> mge.Parameter([1.0, 2.0])
        Parameter([1. 2.], device=xpux:0)
    """

    __slots__ = ()


# ---- operators: every one goes through the op registry via the elementwise front-end -----------------------
def _install_operators():
    from . import _elemwise_front as E

    def binary(name, rname=None):
        fn = E.BINARY[name]

        # (the operand is named ``value``, as MegEngine's: traced_module's named_args and signatures show it)
        def op(self, value):
            return fn(self, value)

        def rop(self, value):
            return fn(value, self)

        def iop(self, value):
            return self._reset(fn(self, value))

        setattr(Tensor, f"__{name}__", op)
        setattr(Tensor, f"__r{name}__", rop)
        setattr(Tensor, f"__i{name}__", iop)

    for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift",
                 "rshift"):
        binary(name)
    for name in ("lt", "le", "gt", "ge", "eq", "ne"):
        fn = E.BINARY[name]
        setattr(Tensor, f"__{name}__", (lambda f: lambda self, value: f(self, value))(fn))
    def unary(name):
        fn = E.UNARY[name]

        def method(self):  # (no ``ndigits``: MegEngine's ``round(x, 2)`` is a TypeError, not a silent ``round(x)``)
            return fn(self)

        method.__name__, method.__qualname__ = f"__{name}__", f"Tensor.__{name}__"
        setattr(Tensor, method.__name__, method)

    for name in ("neg", "abs", "invert", "round", "floor", "ceil", "trunc"):
        unary(name)
    # ``+x is x``, as in MegEngine (a Parameter stays itself: ``y = +p; y += 1`` changes ``p`` there too)
    Tensor.__pos__ = lambda self: self
