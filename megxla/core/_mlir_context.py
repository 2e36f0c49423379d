"""One MLIR context per thread for JAX's lowerings of small programs: megxla's op kernels and small clusters.

JAX makes a new MLIR context for every program it lowers (``jax._src.interpreters.mlir.make_ir_context``). Making
one loads every dialect JAX uses, which costs ~3.5 ms. On a warm compilation cache that is ~40% of an eager kernel's
first call on a new shape (8.5-11.7 ms, the executable read from JAX's cache). A detector's batches bring new shapes
for hundreds of kernels, so its first 8 steps took 7 s eagerly on a warm cache.

MLIR's authors name bloat as the only reason not to reuse a context (llvm/llvm-project#217320): a context keeps
every type and attribute it has uniqued until it dies, and a program's embedded constants are attributes. So a
thread's context is reused only for a lowering whose jaxpr is small (:data:`MAX_EQNS` equations, no constant over
:data:`MAX_CONST_BYTES`), and for :data:`MAX_USES` lowerings at most. Any other lowering gets a context of its
own, as JAX makes it. That covers a program compiled on another thread while this one lowers the next (a large
cluster's optimized tier, its quick parts): it is large, so its context is its own.

``MEGXLA_MLIR_CONTEXT_REUSE=0`` turns this off (read at import). So does a JAX that reuses a thread's context itself
(jax 0.11, what pip installs on Python 3.12+: ten lowerings per context, any size): there the patch stands aside --
wrapped around JAX's reusing function it could not give a large program a context of its own, and a second reuse
scheme is what JAX's own makes redundant.

Example:
    >>> import jax, jax.numpy as jnp
    >>> def context(f):
    ...     return jax.jit(f).lower(jnp.ones(2)).compiler_ir("stablehlo").context
    >>> (context(lambda x: x * 3) is context(lambda x: x + 1)) == (installed() or jax_reuses())  # one context
    True
"""
from __future__ import annotations

import os
import threading

MAX_EQNS = 64  # a program of more equations gets a context of its own
MAX_CONST_BYTES = 1 << 16  # ... and so does one with a constant larger than this (it would stay in the context)
MAX_USES = 128  # lowerings per reused context: what it uniqued (names, locations, small constants) then goes

_local = threading.local()  # .small: the lowering in progress may reuse; .ctx, .uses: the thread's context
_installed: list = []  # [(mlir module, its make_ir_context, its lower_jaxpr_to_module)] once installed


def _small(jaxpr):
    """Whether a ClosedJaxpr is small enough to be lowered in a reused context."""
    inner = getattr(jaxpr, "jaxpr", None)
    if inner is None or len(inner.eqns) > MAX_EQNS:
        return False
    for c in getattr(jaxpr, "consts", ()):
        if getattr(c, "nbytes", 0) > MAX_CONST_BYTES:
            return False
    return True


def installed():
    """Whether JAX's lowerings of small programs reuse a thread's MLIR context (this module's patch is in)."""
    return bool(_installed)


def jax_reuses():
    """Whether JAX's ``make_ir_context`` reuses a thread's MLIR context by itself (jax 0.11 on).

    Example:
        >>> isinstance(jax_reuses(), bool)
        True
    """
    try:
        from jax._src.interpreters import mlir
    except ImportError:
        return False
    make = _installed[0][1] if _installed else mlir.make_ir_context
    return hasattr(mlir, "_thread_local_context") and "_thread_local_context" in getattr(
        getattr(make, "__code__", None), "co_names", ())


def install():
    """Make JAX's lowering reuse a thread's MLIR context for small programs; a no-op where JAX's functions are not
    the ones this was written against (their names or arguments changed) or where it is switched off."""
    if _installed or os.environ.get("MEGXLA_MLIR_CONTEXT_REUSE", "1") == "0":
        return
    try:
        from jax._src.interpreters import mlir
        make, lower = mlir.make_ir_context, mlir.lower_jaxpr_to_module
    except (ImportError, AttributeError):
        return
    if jax_reuses():
        return
    if getattr(make, "__code__", None) is None or make.__code__.co_argcount != 0 or \
            getattr(lower, "__code__", None) is None or lower.__code__.co_varnames[:2] != ("module_name", "jaxpr"):
        return

    def make_ir_context():
        if not getattr(_local, "small", False):
            return make()
        ctx = getattr(_local, "ctx", None)
        if ctx is None or _local.uses >= MAX_USES:
            ctx = _local.ctx = make()
            _local.uses = 0
        _local.uses += 1
        return ctx

    def lower_jaxpr_to_module(module_name, jaxpr, *args, **kwargs):
        before = getattr(_local, "small", False)
        _local.small = _small(jaxpr)
        try:
            return lower(module_name, jaxpr, *args, **kwargs)
        finally:
            _local.small = before

    make_ir_context.__wrapped__ = make
    lower_jaxpr_to_module.__wrapped__ = lower
    mlir.make_ir_context = make_ir_context
    mlir.lower_jaxpr_to_module = lower_jaxpr_to_module
    _installed.append((mlir, make, lower))


def uninstall():
    """Undo :func:`install` (JAX's own functions back)."""
    if _installed:
        mlir, make, lower = _installed.pop()
        mlir.make_ir_context, mlir.lower_jaxpr_to_module = make, lower
    _local.__dict__.clear()
