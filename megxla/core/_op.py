"""The op registry: every primitive of megxla is declared here once, as a JAX implementation.

A :class:`Primitive` is a named JAX function ``impl(*arrays, **params)``. Binding it to concrete static
parameters gives an :class:`Op` -- hashable, interned, and the key of every cache: its eager kernel
(``jax.jit`` of the implementation), its gradient op and its place in a trace.

The gradient of every op is the ``jax.vjp`` of the same implementation, itself an :class:`Op`
(``vjp[<op>]``) so that backward passes go through the same dispatch point and can be traced and compiled
like any forward op. XLA removes the forward work a gradient does not need.
"""
from __future__ import annotations

import functools
import math
import os
import threading
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from ._interrupt import hold_kernel_trace as _hold_kernel_trace

__all__ = ["Primitive", "Op", "primitive", "PRIMITIVES", "freeze"]

PRIMITIVES: dict[str, "Primitive"] = {}

# XLA's older loop emitters compile the code around a convolution -- padding, layouts, the bias -- 2-7x sooner than
# its fusion emitters (a 3x3 convolution's eager kernel 33-53 against 86-320 ms with its gradient; the eager
# kernels of MobileNetV2's 60 convolutions and their gradients 2.7 against 8.6 s), and its time is the library's
# call either way (the same kernels' runs: 408 against 399 ms, EfficientNet-B0's 845 against 856). Used for the
# eager kernels of primitives marked ``library_kernel``; ``MEGXLA_LIBRARY_KERNEL_OPTIONS=0``: XLA's defaults.
LIBRARY_KERNEL_OPTIONS = None if os.environ.get("MEGXLA_LIBRARY_KERNEL_OPTIONS", "1").strip().lower() in (
    "0", "false", "no", "off", "") else {"xla_cpu_use_fusion_emitters": False}
_UNKNOWN = object()
_KNOWN_OPTIONS: dict = {}  # (backend, option name, value) -> whether this XLA compiles with it


def _option_probe(x):
    return x + 1


def known_options(options):
    """``options`` (XLA compiler options) less those the default backend's XLA does not know, or None where none is
    left. A newer XLA drops an old code path's switch -- jax 0.11's XLA:CPU has no ``xla_cpu_use_fusion_emitters``
    (its older emitters are gone) and refuses to compile with it: every convolution failed on Python 3.12+, where
    pip installs jax 0.11 -- so each option is tried once, on a program of one addition, before it is used.

    Example:
        >>> known_options({"xla_no_such_option_anywhere": True}) is None
        True
        >>> known_options({"xla_backend_optimization_level": 1})
        {'xla_backend_optimization_level': 1}
    """
    if not options:
        return None
    backend = jax.default_backend()
    kept = {}
    for name, value in options.items():
        known = _KNOWN_OPTIONS.get((backend, name, value))
        if known is None:
            try:
                jax.jit(_option_probe, compiler_options={name: value}).lower(
                    jax.ShapeDtypeStruct((), np.float32)).compile()
                known = True
            except Exception:  # ("No such compile option", or a value it refuses: XLA's default instead)
                known = False
            _KNOWN_OPTIONS[(backend, name, value)] = known
        if known:
            kept[name] = value
    return kept or None


def freeze(value):
    """Make a parameter value hashable (lists -> tuples, dicts -> sorted tuples, numpy dtypes -> names)."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if hasattr(value, "dtype") and hasattr(value, "tolist") and getattr(value, "ndim", 1) == 0:
        return value.item()  # numpy scalar
    try:
        hash(value)
    except TypeError as exc:
        raise TypeError(f"op parameter {value!r} is not hashable") from exc
    return value


def _zero_signs(value, out):
    """Append to ``out`` the sign of every float zero in a frozen parameter value (nested tuples), in order."""
    t = type(value)
    if t is float:
        if value == 0.0:
            out.append(math.copysign(1.0, value))
    elif t is tuple:
        for v in value:
            _zero_signs(v, out)
    elif t is complex and (value.real == 0.0 or value.imag == 0.0):
        out.append((math.copysign(1.0, value.real), math.copysign(1.0, value.imag)))
    return out


class Primitive:
    """A named JAX implementation; ``prim.bind(**params)`` gives the :class:`Op` that dispatch applies.

    Args:
        name: unique name, shown in errors, traces and HLO.
        impl: ``impl(*arrays, **params) -> array | tuple of arrays``; params are static and hashable.
        multiple_results: the implementation returns a tuple of arrays.
        grad: optional ``grad(params, primals, cotangents) -> tuple of input gradients`` overriding
            ``jax.vjp`` of ``impl`` where that is faster; its test must show both agree.
        transient: its ops are interned only while something uses them (weakly), not forever: for ops whose
            parameters hold large objects that have an owner, e.g. a compiled graph and its executable
            (``jit``'s ``xla_graph``): when the owner drops it, the op, its kernel and the ops derived from it
            (its gradient ``vjp[...]``, interned in the op itself) are freed.
        callbacks_applied: optional ``callbacks_applied(params) -> set of input indices`` whose gradients, as
            ``grad`` computes them, already went through the GradManager's callbacks of those inputs (a
            ``partial_trace`` with ``trace_gmcallback``: the callbacks were recorded into its compiled backward),
            so ``GradManager.backward`` does not run them again in Python.
        nondiff_inputs: optional ``nondiff_inputs(params, given) -> set of input indices`` that no gradient reaches
            from the outputs with a cotangent (``given``, a bool per output): a compiled graph's inputs that its
            recorded ops detached, used only in integer values or only for outputs without a gradient. A
            GradManager gives them no gradient (``.grad`` stays None), as the recorded ops taped one by one
            would, where ``jax.vjp`` of the graph would give zeros.
        eager_kernel: optional ``eager_kernel(**params) -> callable or None``: the op's eager kernel where
            ``jax.jit`` of ``impl`` cannot be it (a transfer to another device: inside a jit, ``device_put`` to a
            device other than the computation's is not a transfer); None: the jitted ``impl``.
        remat: optional ``remat(params) -> bool``: True where the op's results are cheaper to compute again
            than to keep (the parameter gather of sharded data parallel): a GradManager's tape does not hold
            them for the backward pass, which runs the op again on its (held) inputs where it needs them.
        lowering_may_reject: True where a backend's lowering rejects inputs that tracing accepts (LAPACK's
            routines on the CPU have no float16): auto-jit lowers such an op's eager kernel at a new input type's
            first sight, so that the op runs eagerly -- and fails at its own line, as eagerly -- instead of
            failing later inside its cluster's compilation.
        library_kernel: True where the op's time is a library call (a convolution): on the CPU its eager kernel,
            and its gradient's, compile with XLA's older loop emitters (:data:`LIBRARY_KERNEL_OPTIONS`), 2-7x
            sooner at the same speed.
    """

    __slots__ = ("name", "impl", "multiple_results", "grad", "transient", "callbacks_applied", "nondiff_inputs",
                 "eager_kernel", "remat", "lowering_may_reject", "library_kernel", "_ops", "_op0", "_fast", "_weak")

    def __init__(self, name, impl, multiple_results=False, grad=None, transient=False, callbacks_applied=None,
                 eager_kernel=None, remat=None, lowering_may_reject=False, nondiff_inputs=None, library_kernel=False):
        if name in PRIMITIVES:
            raise ValueError(f"primitive {name!r} is already registered")
        self.name = name
        self.impl = impl
        self.multiple_results = multiple_results
        self.grad = grad
        self._ops = {}
        self._fast = {}
        self._op0 = None
        self.transient = transient
        self.callbacks_applied = callbacks_applied
        self.nondiff_inputs = nondiff_inputs
        self.eager_kernel = eager_kernel
        self.remat = remat
        self.lowering_may_reject = lowering_may_reject
        self.library_kernel = library_kernel
        self._weak = weakref.WeakValueDictionary()  # transient ops, and retired ones (_retire_ops)
        PRIMITIVES[name] = self

    def bind(self, **params) -> "Op":
        """Return the interned :class:`Op` of this primitive with these static parameters."""
        if not params:
            op = self._op0
            if op is None:
                op = self._op0 = Op(self, ())
            return op
        # NOTE: the fast path looks the keyword items up as given (one tuple hash): sorting and freezing them
        # cost ~2 us per call, paid by every front end on every op. Unhashable values (lists) take the slow path.
        items = tuple(params.items())
        given_signs = []  # the signs of the float zeros given as keyword values (F.zeros' value): in the fast key
        for _, v in items:
            if type(v) is float and v == 0.0:
                given_signs.append(math.copysign(1.0, v))
        if given_signs:
            items = (items, tuple(given_signs))
        try:
            op = self._fast.get(items)
        except TypeError:
            op = items = None
        if op is None:
            key = tuple(sorted((k, freeze(v)) for k, v in params.items()))
            # NOTE: 0.0 == -0.0 and both hash alike, so params alone interned F.full(s, -0.0) as the op of +0.0
            # (or the other way round, whichever came first). A float zero's sign joins the interning key, and the
            # fast key too where the zero is a keyword's value itself (F.zeros: ~30 us a call on the slow path);
            # ops with a zero inside a value stay out of the fast table, whose keys cannot tell the two apart.
            signs = _zero_signs(key, [])
            ikey = (key, tuple(signs)) if signs else key
            op = self._ops.get(ikey)
            if op is None:
                bases = [v for _, v in key if type(v) is Op and v.transient]
                if bases:
                    # NOTE: an op derived from a transient op (its vjp) is interned in that op, not here: it is
                    # compiled once per base op and freed with it (a global table would keep the base alive).
                    op = bases[0]._derived.get((self.name, ikey))
                    if op is None:
                        op = bases[0]._derived[(self.name, ikey)] = Op(self, key)
                        op.transient = True
                    return op
                if self.transient:  # interned weakly: alive while its owner (e.g. a jit cache entry) holds it
                    op = self._weak.get(ikey)
                    if op is None:
                        op = self._weak[ikey] = Op(self, key)
                        op.transient = True
                    return op
                op = self._weak.pop(ikey, None)  # (retired: still the one op of its key while anything holds it)
                if op is None:
                    op = Op(self, key)
                if len(self._ops) >= MAX_OPS:
                    self._retire_ops()
                self._ops[ikey] = op
            # (zeros' signs are in the fast key where each zero is a keyword's value itself, none inside one)
            if items is not None and signs == given_signs:
                if len(self._fast) > 4096:  # bounded: keyword orders x values seen
                    self._fast.clear()
                self._fast[items] = op
        return op

    def _retire_ops(self):
        """Move the interned ops to the weak table: each stays the one op of its parameters while anything holds
        it (a cache, a recorded trace, a module constant) and comes back when bound again; the rest are freed.

        Example:
            >>> prim = PRIMITIVES["add"]
            >>> op = prim.bind(probe_param=1.5)
            >>> prim._retire_ops()
            >>> prim.bind(probe_param=1.5) is op  # held here, so the same op
            True
        """
        self._weak.update(self._ops)
        self._ops = {}
        self._fast.clear()

    def __repr__(self):
        return f"Primitive({self.name})"


class Op:
    """A primitive bound to static parameters: hashable, compared by identity (ops are interned)."""

    __slots__ = ("prim", "params", "name", "multiple_results", "transient", "_kernel", "_fn", "_derived",
                 "_options", "_nested", "_used", "_spmd", "__weakref__")

    def __init__(self, prim, params):
        self.prim = prim
        self.params = params
        self.name = prim.name
        self.multiple_results = prim.multiple_results
        self.transient = False
        self._kernel = None
        self._fn = None
        self._derived = {}  # ops of other primitives parameterised by this transient op (its vjp)
        self._options = _UNKNOWN  # the eager kernel's compiler options (see kernel_options)
        self._nested = None  # the kernel without them, where it has some (see nested_kernel)
        self._used = False  # its kernel was asked for since the last sweep of the kept kernels (_sweep_kernels)
        self._spmd = None  # its cross-process kernel, once made (core._dispatch.run_kernel)

    @property
    def fn(self):
        """The op as a plain JAX function of arrays (used when replaying a trace inside one ``jax.jit``)."""
        fn = self._fn
        if fn is None:
            fn = functools.partial(self.prim.impl, **dict(self.params)) if self.params else self.prim.impl
            if self.prim.grad is not None:
                fn = _with_grad_rule(self.prim, dict(self.params), fn)
            self._fn = fn
        return fn

    @property
    def kernel(self):
        """The eager kernel: ``jax.jit`` of :attr:`fn`, compiled once per input shapes/dtypes by JAX.

        The jitted function checks the size of its outputs while JAX traces it, i.e. once per new input
        signature and never on a cached call: an output larger than the device's memory raises
        :class:`~megxla.core._dispatch.OutOfMemoryError` instead of reaching XLA (which aborts the process
        when a size overflows int64).
        """
        self._used = True
        k = self._kernel
        if k is None and self.prim.eager_kernel is not None:
            k = self._kernel = self.prim.eager_kernel(**dict(self.params))
            _keep_kernel(self, k)
        if k is None:
            fn = self.fn
            ref = weakref.ref(self)  # no op <-> kernel cycle: a transient op is freed when its owner drops it

            def checked(*arrays):
                _hold_kernel_trace()  # (JAX's caches stay whole if Ctrl-C arrives now: core/_interrupt.py)
                out = fn(*arrays)
                check_output_size(ref(), out)
                return out

            checked.__name__ = self.name  # names the XLA module as the op
            options = self.kernel_options
            k = self._kernel = jax.jit(checked, compiler_options=options) if options else jax.jit(checked)
            if options:
                self._nested = jax.jit(checked)
            _keep_kernel(self, k)
        return k

    @property
    def nested_kernel(self):
        """The eager kernel to call inside another trace (a cluster's, a recorded step's): :attr:`kernel` itself,
        or where that has compiler options, the same function jitted without them (JAX refuses options on a
        nested ``jax.jit``). Its traces are cached by JAX per input types, so a program holding the op reuses the
        trace its shape was inferred from."""
        k = self.kernel
        return k if self._nested is None else self._nested

    @property
    def kernel_options(self):
        """The XLA compiler options the eager kernel compiles with, or None (XLA's defaults). Where they are set,
        the kernel is only ever called as a program of its own: JAX refuses a nested ``jax.jit`` with options, so
        a compiled program holding this op calls :attr:`nested_kernel` instead.

        Example:
            >>> from megxla.core.ops import nn  # noqa: F401  (registers "conv")
            >>> conv = PRIMITIVES["conv"].bind(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, nd=2)
            >>> cpu = jax.default_backend() == "cpu"
            >>> conv.kernel_options == (known_options(LIBRARY_KERNEL_OPTIONS) if cpu else None)
            True
        """
        options = self._options
        if options is _UNKNOWN:
            base = self
            while base.prim is VJP:  # (a gradient's time is its forward's library calls, transposed)
                base = dict(base.params)["op"]
            options = None
            if base.prim.library_kernel and LIBRARY_KERNEL_OPTIONS and jax.default_backend() == "cpu":
                options = known_options(LIBRARY_KERNEL_OPTIONS)
            self._options = options
        return options

    def abstract_eval(self, *avals):
        """Output shapes/dtypes for inputs of these shapes/dtypes (the op's shape rule, derived from ``impl``)."""
        out = jax.eval_shape(self.fn, *avals)
        check_output_size(self, out)
        return out

    def __repr__(self):
        if not self.params:
            return self.name
        return f"{self.name}[{', '.join(f'{k}={v!r}' for k, v in self.params)}]"

    def __reduce__(self):  # ops pickle as (primitive name, params) so traces can be saved
        return (_op_from_name, (self.name, self.params))


# Ops are interned per parameter values, and each compiles its own eager kernel (XLA executables per input type): a
# program binding a new value every step -- a dropout rate or a clip bound annealed each step, a leaky slope drawn at
# random, before those became inputs (docs/design.md) -- compiled a kernel per step and kept them all (dropout: ~1.2 MB each, 300 steps 350 MB, eager and
# auto-jit alike). The kernels are kept on a clock: past MAX_KERNELS, a sweep drops those not asked for since the
# sweep before (compiled again if ever called); a program's working set -- asked for between two sweeps -- stays.
MAX_KERNELS = 256
# The interning tables are bounded the same way: a primitive holds at most MAX_OPS ops strongly; past that, all of
# them move to its weak table (Primitive._retire_ops), where those something else holds stay findable -- so an op
# stays unique per parameters while it lives -- and the rest are freed. A parameter new every step (an annealed
# dropout rate) interned an op, its gradient's op and, under auto-jit, a cluster's op per step, ~20 KB, for good.
MAX_OPS = 1024
_kernels: list = []  # [(weak reference to an op, the kernel it made)], in the order they were made
# the length past which the next sweep runs: half MAX_KERNELS more than the last one kept (a program binding a new op
# every step then holds between MAX_KERNELS / 2 and MAX_KERNELS kernels)
_kernels_limit = [MAX_KERNELS]
_kernels_lock = threading.Lock()


def _keep_kernel(op, kernel):
    """(``Op.kernel``) Note ``op``'s new eager kernel; past the limit, sweep. Transient ops' kernels go with them."""
    if op.transient:
        return
    with _kernels_lock:
        _kernels.append((weakref.ref(op), kernel))
        if len(_kernels) > _kernels_limit[0]:
            _sweep_kernels()


def _sweep_kernels():
    """Drop the eager kernels not asked for since the last sweep (their ops make them again when called).

    Example:
        >>> op = PRIMITIVES["add"].bind()
        >>> _ = op.kernel
        >>> with _kernels_lock:
        ...     _sweep_kernels()  # (asked for since the last sweep: kept)
        ...     _sweep_kernels()  # (not since: dropped)
        >>> op._kernel is None
        True
    """
    kept = []
    for ref, kernel in _kernels:
        op = ref()
        if op is None or op._kernel is not kernel:  # (freed, or its kernel replaced: a trace's graph op)
            continue
        if op._used:
            op._used = False
            kept.append((ref, kernel))
        else:
            op._kernel = op._nested = None
    _kernels[:] = kept
    _kernels_limit[0] = len(kept) + MAX_KERNELS // 2


_MEMORY_LIMIT = {}


def device_memory_bytes(platform=None):
    """Bytes of memory of a platform's first device (GPU/TPU: XLA's allocator limit; CPU: the machine's RAM).

    Args:
        platform: ``"cpu"``, ``"gpu"``, ``"tpu"``; default: JAX's default backend.

    Returns:
        the limit in bytes (measured once per platform).

    Example:
        >>> device_memory_bytes() > 0
        True
    """
    platform = platform or jax.default_backend()
    limit = _MEMORY_LIMIT.get(platform)
    if limit is None:
        limit = _MEMORY_LIMIT[platform] = measured_memory_bytes(platform)
    return limit


def allocator_stats(platform=None):
    """The first device's allocator statistics (``bytes_limit``, ``bytes_in_use``...), or None where the backend
    keeps none (XLA:CPU).

    Example:
        >>> s = allocator_stats(); s is None or "bytes_in_use" in s
        True
    """
    try:
        return jax.devices(platform or jax.default_backend())[0].memory_stats() or None
    except Exception:  # memory_stats is not implemented by every backend
        return None


def measured_memory_bytes(platform=None):
    """:func:`device_memory_bytes` measured now (not the size check's limit, which a program may set).

    Example:
        >>> measured_memory_bytes() > 0
        True
    """
    limit = (allocator_stats(platform) or {}).get("bytes_limit")
    if not limit:
        import os
        try:
            limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            limit = 1 << 62
    return int(limit)


def check_output_size(op, out):
    """Raise ``OutOfMemoryError`` if the outputs ``out`` (arrays or abstract values) of ``op`` need more bytes
    than the device has. Python ints: a size that would overflow int64 in XLA is just a big number here.

    Args:
        op: the op (named in the error).
        out: an array / ``jax.ShapeDtypeStruct``, or a tuple or list of them.

    Example:
        >>> check_output_size("zeros", jax.ShapeDtypeStruct((2, 3), jnp.float32))  # fits: no error
    """
    outs = out if isinstance(out, (tuple, list)) else (out,)
    total = 0
    for o in outs:
        shape = getattr(o, "shape", None)
        if shape is None:
            continue
        n = 1
        for d in shape:
            n *= int(d)
        total += n * jnp.dtype(o.dtype).itemsize
    limit = device_memory_bytes()
    if total > limit:
        from ._dispatch import OutOfMemoryError
        desc = ", ".join(f"{tuple(int(d) for d in o.shape)}:{jnp.dtype(o.dtype).name}" for o in outs
                         if hasattr(o, "shape"))
        raise OutOfMemoryError(f"{op!r}: output ({desc}) needs {total} bytes, more than the {limit} bytes of "
                               f"memory of the {jax.default_backend()} device")


def _op_from_name(name, params):
    return PRIMITIVES[name].bind(**dict(params))


def primitive(name, multiple_results=False, grad=None):
    """Decorator registering a JAX function as the primitive ``name``.

    Example:
        >>> @primitive("my_square")
        ... def my_square(x):
        ...     return x * x
    """

    def deco(impl):
        return Primitive(name, impl, multiple_results, grad)

    return deco


def _with_grad_rule(prim, params, fn):
    """``fn`` whose ``jax.vjp`` is ``prim.grad`` (a ``jax.custom_vjp``): the rule then holds wherever JAX
    differentiates a composition of ops -- a ``partial_trace`` piece's compiled backward is ``jax.vjp`` of its
    whole replay -- not only where megxla's own ``vjp`` op applies it. (The rule can differ from the derivative
    of ``impl``: fake quantization's straight-through gradient where ``round``'s derivative is zero, the
    gradient of ``max`` given to every tied maximum.) The forward is ``fn`` itself: the same lowering.

    Example:
        >>> from megxla.core.ops import quant
        >>> op = quant.fake_quant.bind(qmin=-128, qmax=127)
        >>> jax.grad(lambda x: op.fn(x, jnp.float32(0.5), jnp.float32(0.0)).sum())(jnp.array([0.3, 100.0]))
        Array([1., 0.], dtype=float32)
    """
    @jax.custom_vjp
    def with_rule(*primals):
        return fn(*primals)

    def forward(*primals):
        return fn(*primals), primals

    def backward(primals, ct):
        grads = prim.grad(params, primals, ct)
        out = []
        for p, g in zip(primals, grads):
            p = jnp.asarray(p)
            if not jnp.issubdtype(p.dtype, jnp.inexact):  # (an integer input's cotangent is JAX's float0)
                out.append(np.zeros(p.shape, jax.dtypes.float0))
            elif g is None:
                out.append(jnp.zeros(p.shape, p.dtype))
            else:
                out.append(jnp.broadcast_to(jnp.asarray(g).astype(p.dtype), p.shape))
        return tuple(out)

    with_rule.defvjp(forward, backward)
    functools.update_wrapper(with_rule, prim.impl)  # (the op's name in lowered modules)
    return with_rule


# ---- the gradient of every op, as an op ------------------------------------------------------------------------
def _is_float(x):
    return jnp.issubdtype(x.dtype, jnp.inexact)


def _vjp_impl(*args, op, nin, wrt, given, remat=False):
    """Gradients of ``op`` w.r.t. inputs ``wrt`` given cotangents for the outputs flagged in ``given``.

    With ``remat`` the op's forward is recomputed inside the gradient under ``jax.checkpoint`` with CSE
    prevented, so a compiled step does not keep the op's internal residuals alive from forward to backward.
    """
    primals, cts_in = args[:nin], args[nin:]
    fn = jax.checkpoint(op.fn, prevent_cse=True) if remat else op.fn

    def partial_fn(*diff):
        full = list(primals)
        for i, d in zip(wrt, diff):
            full[i] = d
        return fn(*full)

    if op.prim.grad is not None:
        out_avals = None
    else:
        outs, pull = jax.vjp(partial_fn, *[primals[i] for i in wrt])
        out_avals = outs
    if out_avals is None:
        out_avals = jax.eval_shape(fn, *primals)
    ct = vjp_cotangents(op, out_avals, cts_in, given)
    if op.prim.grad is not None:
        grads = op.prim.grad(dict(op.params), primals, ct)
        return tuple(grads[i] for i in wrt)
    return tuple(pull(ct))


VJP = Primitive("vjp", _vjp_impl, multiple_results=True)


def vjp_cotangents(op, out_avals, cts_in, given):
    """The cotangent of ``op``'s outputs (``out_avals``) for ``vjp[op]``: the given ones (``cts_in``, for the
    outputs flagged in ``given``) cast to the output dtype, zeros for the others (float0 for integer outputs)."""
    flat_avals = out_avals if op.multiple_results else (out_avals,)
    it = iter(cts_in)
    cts = []
    for aval, g in zip(flat_avals, given):
        if g:
            cts.append(next(it).astype(aval.dtype))
        elif jnp.issubdtype(aval.dtype, jnp.inexact):
            cts.append(jnp.zeros(aval.shape, aval.dtype))
        else:  # integer outputs carry float0 cotangents in JAX
            cts.append(jnp.zeros(aval.shape, jax.dtypes.float0))
    return tuple(cts) if op.multiple_results else cts[0]


# ---- a sequence of ops as one op -------------------------------------------------------------------------------
def run_steps(steps, outs, values, run):
    """Apply ``steps`` -- ``(op, positions)`` pairs -- in order to an environment that starts as ``values``: each
    ``run(op, *args)`` reads the environment at ``positions`` and appends its results. Returns the environment at
    ``outs``. (A ``sequence`` op's function, its eager kernel, and auto-jit applying its steps one by one.)

    Example:
        >>> import types
        >>> neg = types.SimpleNamespace(multiple_results=False)  # (any op: ``run`` decides what it does)
        >>> run_steps(((neg, (0,)), (neg, (1,))), (1, 2), [3], lambda op, x: -x)
        (-3, 3)
    """
    env = list(values)
    for op, positions in steps:
        out = run(op, *[env[i] for i in positions])
        if op.multiple_results:
            env.extend(out)
        else:
            env.append(out)
    return tuple([env[i] for i in outs])


def _by_fn(op, *args):
    return op.fn(*args)


def _by_kernel(op, *args):
    return op.kernel(*args)


def _sequence_impl(*arrays, steps, outs):
    return run_steps(steps, outs, arrays, _by_fn)


def _sequence_eager_kernel(steps, outs):
    # Eagerly, each op runs as its own kernel: no compilation of the whole sequence, kernels shared with the ops
    # run on their own (a sequence changing shape with the data would otherwise compile once per shape)
    return lambda *arrays: run_steps(steps, outs, arrays, _by_kernel)


# ``sequence[steps, outs]``: a GradManager's backward pass under auto-jit (every ``vjp`` op and gradient sum of
# the walk) as ONE op: collected once instead of once per forward op (autodiff/grad_manager.py). Its gradient is
# jax.vjp of it, as for any op (higher-order gradients through it work; the manager groups only where no other
# manager records).
SEQUENCE = Primitive("sequence", _sequence_impl, multiple_results=True, eager_kernel=_sequence_eager_kernel)
