"""Naming scopes (public as ``megengine.utils.naming``): the dotted module path under which ops and tensors
are made. The state lives in ``core`` so that ``Module.__call__`` (which opens a scope per module) can use it
without importing upward.

``AutoNaming`` keeps a stack of scope names (``push_scope("backbone")``, ``push_scope("conv1")`` ->
``"backbone.conv1"``). Names generated while a scope is open are prefixed with it. While module scopes are
on (:func:`set_module_scopes`; a ``Profiler(with_scopes=True)`` turns them on), every module call opens a
scope named after the module (its ``name``, else the attribute it is stored under, else its class) and
unnamed tensors it returns are named after the scope (``"backbone.conv1"``). While a
:class:`megxla.utils.profiler.Profiler` is recording, every scope is also a trace annotation, so the
Chrome/Perfetto timeline groups the work of each scope.

Example:
    >>> push_scope("net")
    >>> with record_scope("fc"):
    ...     AutoNaming.get_scope()
    'net.fc'
    >>> pop_scope("net")
    >>> AutoNaming.get_scope()
    ''
"""
from __future__ import annotations

import contextlib

__all__ = ["AutoNaming", "push_scope", "pop_scope", "record_scope", "set_module_scopes", "scoped_call"]

# Trace annotations opened by push_scope while a profiler runs (closed by the matching pop_scope).
_annotations: list = []
_profiling = [False]
# Whether a Profiler records: the scopes code opens itself (core2.push_scope, utils.profiler.scope) are annotated
# then, with or without ``with_scopes`` (which adds naming and module scopes).
_recording = [False]
# Whether Module.__call__ opens a scope per module (read on the eager hot path: one list index).
module_scopes = [False]


def set_module_scopes(on: bool) -> bool:
    """Turn per-module scopes (and output names) on or off; returns the previous setting.

    Example:
        >>> old = set_module_scopes(True); _ = set_module_scopes(old)
    """
    old = module_scopes[0]
    module_scopes[0] = bool(on)
    return old


def module_call(module, forward, inputs, kwargs):
    """Run ``forward`` inside the module's scope and name its unnamed output tensors after the scope."""
    from ._tensor import Tensor
    push_scope(getattr(module, "name", None) or getattr(module, "_short_name", None) or type(module).__name__)
    try:
        outputs = forward(*inputs, **kwargs)
        scope = AutoNaming.get_scope()
        outs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        for i, t in enumerate(outs):
            if isinstance(t, Tensor) and not t.name:
                t.name = scope if len(outs) == 1 else f"{scope}.{i}"
        return outputs
    finally:
        pop_scope()


def scoped_call(module, forward, inputs, kwargs):
    """Run ``forward`` inside MegEngine's scope of the module (its ``name``, else the attribute it is stored
    under; none for an unnamed top-level module), without naming outputs: while a trace records, the scope of
    each op becomes its operator name in a dump (``"simple.linear.MatrixMul"``), as MegEngine's AutoNaming."""
    scope = module.name if module.name is not None else module.__dict__.get("_short_name")
    if scope is None:
        return forward(*inputs, **kwargs)
    AutoNaming.scopes.append(str(scope))
    try:
        return forward(*inputs, **kwargs)
    finally:
        AutoNaming.scopes.pop()


class AutoNaming:
    """The scope stack and the names recorded under it (class-level state, as in MegEngine)."""

    scopes: list = []
    name2ops: dict = {}
    handle2names: dict = {}

    @classmethod
    def clear(cls):
        """Forget every scope and recorded name."""
        cls.scopes.clear()
        _annotations.clear()
        cls.name2ops.clear()
        cls.handle2names.clear()

    @classmethod
    def push_scope(cls, scope):
        """Open ``scope`` (None is ignored, as MegEngine does for unnamed modules)."""
        if scope is not None:
            cls.scopes.append(str(scope))

    @classmethod
    def pop_scope(cls):
        """Close the innermost scope and return its name."""
        if not cls.scopes:
            raise RuntimeError("AutoNaming.pop_scope: no scope is open")
        return cls.scopes.pop()

    @classmethod
    def get_scope(cls) -> str:
        """The dotted path of the open scopes (``""`` outside any)."""
        return ".".join(cls.scopes)

    @classmethod
    def gen_name(cls, x) -> str:
        """The scoped name for ``x`` (a tensor, op or string): ``scope.name``.

        Example:
            >>> AutoNaming.push_scope("m"); AutoNaming.gen_name("out"); AutoNaming.pop_scope()
            'm.out'
            'm'
        """
        name = x if isinstance(x, str) else (getattr(x, "name", None) or type(x).__name__)
        scope = cls.get_scope()
        return f"{scope}.{name}" if scope else name

    @classmethod
    def record_var_name(cls, handle, name):
        """Remember ``name`` for the tensor/value ``handle`` (a value id)."""
        cls.handle2names[handle] = name

    @classmethod
    def get_var_name(cls, handle):
        """The name recorded for ``handle`` (consumed), or None."""
        return cls.handle2names.pop(handle, None)

    @classmethod
    def record_opnode(cls, op, name=None):
        """Record an op under its scoped name; repeated names get ``_1``, ``_2``... suffixes."""
        base = cls.gen_name(name or op)
        ops = cls.name2ops.setdefault(base, [])
        ops.append(op)
        return base if len(ops) == 1 else f"{base}_{len(ops) - 1}"

    @classmethod
    def remove_duplicate_names(cls):
        """Final names of all recorded ops, made unique (``name``, ``name_1``, ...)."""
        out = {}
        for base, ops in cls.name2ops.items():
            for i, op in enumerate(ops):
                out[id(op)] = base if i == 0 else f"{base}_{i}"
        return out


def push_scope(name):
    """Open the scope ``name`` (also a profiler annotation while a Profiler is recording)."""
    if name is None:
        return
    AutoNaming.push_scope(name)
    ann = None
    if _profiling[0]:
        import jax
        ann = jax.profiler.TraceAnnotation(AutoNaming.get_scope())
        ann.__enter__()
    _annotations.append(ann)  # one entry per open scope, so pops pair with pushes


def pop_scope(name=None):
    """Close the innermost scope; ``name``, when given, must be that scope's name."""
    if name is not None and AutoNaming.scopes and AutoNaming.scopes[-1] != str(name):
        raise RuntimeError(f"pop_scope({name!r}): the innermost open scope is {AutoNaming.scopes[-1]!r}")
    AutoNaming.pop_scope()
    ann = _annotations.pop() if _annotations else None
    if ann is not None:
        ann.__exit__(None, None, None)


@contextlib.contextmanager
def record_scope(name):
    """Context manager: ``push_scope(name)`` on entry, ``pop_scope`` on exit."""
    push_scope(name)
    try:
        yield name
    finally:
        pop_scope(name)
