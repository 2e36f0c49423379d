"""Recording a Module's forward into an InternalGraph.

While ``trace_module`` (or ``graph.insert_exprs()``) runs, a :class:`_Tracer` is active and these hooks are
installed (all of them are removed again afterwards, also when the traced code raises):

* ``Module.__call__``: a builtin module (megxla's own layers, or ``register_as_builtin``) becomes one
  ``CallMethod(__call__)``; any other module gets its own sub-graph (a nested TracedModule).
* the public functions of ``megxla.functional`` (every module attribute holding them): ``CallFunction``.
* Tensor methods and operators: ``CallMethod``; ``Tensor(t)`` of a traced tensor: ``CallFunction(Tensor)``.
* a gradient-recorder-style observer of the dispatch point records any other op as ``Apply``.

Inside a recorded call the tracer is suppressed, so only the outermost call is recorded; the call itself
runs for real, which gives every node its shape and dtype. Tracing is single-threaded.
"""
from __future__ import annotations

import functools
import inspect
import re
import sys
import threading
import types

import numpy as np

from ..core import _dispatch
from ..core._tensor import Tensor
from ..module.module import Module
from .expr import Apply, CallFunction, CallMethod, Constant, GetAttr, Input
from .graph import InternalGraph
from .node import ModuleNode, Node, TensorNode
from .pytree import tree_flatten, tree_unflatten

_active = None  # the running _Tracer
_ORIG_MODULE_CALL = Module.__call__
_ORIG_TENSOR_INIT = Tensor.__init__
BUILTIN_MODULES: set = set()
WRAPPED: dict = {}  # user function -> its wrap() wrapper
WRAPPED_GLOBALS: list = []  # (module globals, name, function) of each top-level wrap(): patched while tracing

TENSOR_METHODS = (
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__",
    "__neg__", "__pos__", "__abs__", "__invert__", "__and__", "__rand__", "__or__", "__ror__", "__xor__",
    "__rxor__", "__lshift__", "__rshift__", "__lt__", "__le__", "__gt__", "__ge__", "__getitem__",
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__", "__imatmul__",
    "__setitem__", "astype", "reshape", "transpose", "flatten", "sum", "mean", "prod", "max", "min", "var",
    "_broadcast", "detach",
)

_INPLACE = {m for m in TENSOR_METHODS if m.startswith("__i") and m not in ("__invert__",)} | {"__setitem__"}


# ---- which functions are traced -------------------------------------------------------------------------
_FUNC_SITES = None  # [(module, attr name, function)]
_FUNC_WRAPPERS: dict = {}  # function -> wrapper
_FUNC_NAMES: dict = {}  # function -> (module name, attr name) of its public spelling


def _functional_sites():
    global _FUNC_SITES
    if _FUNC_SITES is None:
        import megxla.functional as F
        F.distributed  # noqa: B018  (loaded so its functions are traced too)
        sites = []
        mods = [m for name, m in sorted(sys.modules.copy().items())
                if name.startswith("megxla.functional") and "._" not in name and m is not None]
        for mod in mods:
            for attr, v in list(vars(mod).items()):
                if attr.startswith("_") or not isinstance(v, types.FunctionType):
                    continue
                if not getattr(v, "__module__", "").startswith(("megxla.functional", "megxla.core")):
                    continue
                sites.append((mod, attr, v))
                if v not in _FUNC_NAMES or mod is F:
                    _FUNC_NAMES[v] = (mod.__name__, attr)
        # layers import functional's functions by name (``from ..functional.nn import conv2d``): a subclass of
        # a builtin layer is traced into a graph, where those calls must be CallFunctions as well
        import megxla.module  # noqa: F401
        import megxla.quantization  # noqa: F401
        for name, mod in sorted(sys.modules.copy().items()):
            if mod is None or not name.startswith(("megxla.module", "megxla.quantization")):
                continue
            for attr, v in list(vars(mod).items()):
                if isinstance(v, types.FunctionType) and v in _FUNC_NAMES:
                    sites.append((mod, attr, v))
        _FUNC_SITES = sites
    return _FUNC_SITES


def func_ref(func):
    """``(module name, attribute)`` under which ``func`` can be found again (for printing and pickling)."""
    _functional_sites()
    ref = _FUNC_NAMES.get(func)
    if ref is not None:
        return ref
    return getattr(func, "__module__", None) or "", getattr(func, "__qualname__", getattr(func, "__name__", ""))


def _func_wrapper(func):
    w = _FUNC_WRAPPERS.get(func)
    if w is None:
        @functools.wraps(func)
        def w(*args, **kwargs):
            tr = _active
            if tr is None or tr.suppress or not tr.frames or tr.thread is not threading.current_thread():
                return func(*args, **kwargs)
            return tr.call_function(func, args, kwargs)
        w._tm_original = func
        _FUNC_WRAPPERS[func] = w
    return w


def callable_for(func):
    """What a CallFunction expr calls: the recording wrapper while a trace runs (so re-tracing a
    TracedModule records the call again), the function itself otherwise."""
    w = WRAPPED.get(func)
    if w is not None:
        return w
    if _active is not None:
        return _FUNC_WRAPPERS.get(func, func)
    return func


def _method_wrapper(name, orig):
    @functools.wraps(orig)
    def m(self, *args, **kwargs):
        tr = _active
        if tr is None or tr.suppress or not tr.frames or tr.thread is not threading.current_thread():
            return orig(self, *args, **kwargs)
        return tr.call_method(name, orig, self, args, kwargs)
    return m


def _module_call(mod, *args, **kwargs):
    tr = _active
    if tr is None or tr.suppress or not tr.frames or tr.thread is not threading.current_thread():
        return _ORIG_MODULE_CALL(mod, *args, **kwargs)
    return tr.call_module(mod, args, kwargs)


def _module_getattribute(mod, name):
    value = object.__getattribute__(mod, name)
    if isinstance(value, (Module, Tensor)):
        tr = _active
        if tr is not None and not tr.suppress and tr.frames and tr.thread is threading.current_thread():
            tr.attribute_read(mod, value, name)
    return value


def _tensor_init(self, data=None, *args, **kwargs):
    tr = _active
    if tr is None or tr.suppress or not tr.frames or tr.thread is not threading.current_thread() \
            or not tree_flatten(data, lambda x: isinstance(x, (Tensor, Node)))[0]:
        return _ORIG_TENSOR_INIT(self, data, *args, **kwargs)
    # Tensor(<traced tensor>) follows its input: recorded as a call of the class whose result is ``self``
    def run():
        _ORIG_TENSOR_INIT(self, data, *args, **kwargs)
        return self

    tr.call_function(type(self), (data,) + args, kwargs, run=run)


_ORIG_SHAPE = Tensor.__dict__["shape"]


def _traced_shape(self):
    # While trace_module runs, ``x.shape`` of a tensor computed from the graph's inputs is recorded as an Apply
    # of MegEngine's GetVarShape op (its symbolic shape), so the graph takes shapes from its inputs at every
    # call: ``x.reshape(x.shape[0], -1)`` traced with batch 2 reshapes a batch of 4 into 4 rows instead of
    # keeping the traced 2 (which would silently regroup rows, or fail far from the cause).
    shape = _ORIG_SHAPE.fget(self)
    tr = _active
    if tr is None or tr.suppress or not tr.frames or tr.thread is not threading.current_thread():
        return shape
    hit = tr.frames[-1].tmap.get(id(self))
    if hit is None or hit[0] is not self or isinstance(hit[1].expr, (GetAttr, Constant)):
        return shape  # a parameter, buffer or constant: its shape is fixed
    from ..core.ops.builtin import GetVarShape
    return GetVarShape()._apply((self,))[0]  # (the op's hook records it: record_opdef)


def _opdef_kernels():
    """(class, its own ``_apply``) of every builtin op descriptor (``core2.apply(Elemwise(...), x)``)."""
    from ..core.ops.builtin import OpDef
    out, stack = [], [OpDef]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if "_apply" in vars(cls) and cls is not OpDef:
            out.append((cls, vars(cls)["_apply"]))
    return out


def _opdef_wrapper(orig):
    @functools.wraps(orig)
    def _apply(op, inputs):
        tr = _active
        if tr is None or tr.suppress or not tr.frames or tr.thread is not threading.current_thread():
            return orig(op, inputs)
        return tr.record_opdef(op, orig, inputs)
    return _apply


class _ApplyObserver:
    """Sits among the dispatch point's gradient recorders while tracing: sees every op that no traced
    function, method or module call covers and records it as an Apply expr."""

    def _record(self, op, inputs, outputs):
        tr = _active
        if tr is None or tr.suppress or not tr.frames or tr.thread is not threading.current_thread():
            return
        tr.record_apply(op, inputs, outputs)

    def _tracks(self, tensor):
        return False


_LEAF_BASES = None


def is_builtin(mod) -> bool:
    """Whether calls of ``mod`` stay single exprs: megxla's layers, ``register_as_builtin`` classes, and
    quantization observers / fake-quantizers (subclasses included: their state is what QAT reads)."""
    global _LEAF_BASES
    if type(mod) in BUILTIN_MODULES:
        return True
    if _LEAF_BASES is None:
        from ..quantization.fake_quant import _FakeQuantize
        from ..quantization.observer import Observer
        _LEAF_BASES = (Observer, _FakeQuantize)
    return isinstance(mod, _LEAF_BASES)


def argspec_of(mod):
    from .traced_module import TracedModule
    if isinstance(mod, TracedModule):
        return mod.argspec
    fwd = inspect.unwrap(type(mod).forward)
    try:
        return inspect.getfullargspec(fwd)
    except TypeError:
        return None


def convert_kwargs_to_args(argspec, args, kwargs, is_bounded=False):
    """Normalize a call: every argument that can be positional becomes positional (defaults filled in),
    keyword-only ones (with their defaults) and ``**kwargs`` stay keywords. Raises TypeError as Python
    would for a missing, repeated or unexpected argument."""
    if callable(argspec):
        argspec = inspect.getfullargspec(inspect.unwrap(argspec))
    names = list(argspec.args[1:] if is_bounded else argspec.args)
    defaults = list(argspec.defaults or ())
    new_args = list(args)
    dup = set(names[:len(new_args)]) & set(kwargs)
    if dup:
        raise TypeError(f"forward() got multiple values for argument {', '.join(sorted(dup))}")
    for i in range(len(new_args), len(names)):
        name = names[i]
        if name in kwargs:
            new_args.append(kwargs[name])
        else:
            j = i - (len(names) - len(defaults))
            if j < 0:
                raise TypeError(f"forward() missing required positional argument: {name!r}")
            new_args.append(defaults[j])
    new_kwargs = {}
    for name in argspec.kwonlyargs:
        if name in kwargs:
            new_kwargs[name] = kwargs[name]
        elif argspec.kwonlydefaults and name in argspec.kwonlydefaults:
            new_kwargs[name] = argspec.kwonlydefaults[name]
        else:
            raise TypeError(f"forward() missing required keyword-only argument: {name!r}")
    for k, v in kwargs.items():
        if k not in names and k not in argspec.kwonlyargs:
            if argspec.varkw is None:
                raise TypeError(f"forward() got an unexpected keyword argument {k!r}")
            new_kwargs[k] = v
    return tuple(new_args), new_kwargs


def _input_names(argspec, args, kwargs):
    """One name per tensor leaf of (args, kwargs), as MegEngine names a graph's inputs: a parameter given a tensor
    is named by the parameter; the tensors inside a structure are ``name_0``, ``name_1``...; all the extra
    positional arguments form one structure (``args_0``, ``args_1``...), and so do the extra keyword arguments
    (``kwargs_0``... by the ``**`` parameter's name, in sorted key order). (MegEngine counts the constants of a
    structure too and then shifts later names: ``x_1`` names ``y``; the count here is the tensors'.)"""
    names = []
    params = list(argspec.args[1:]) if argspec is not None else []
    varargs = argspec.varargs if argspec is not None and argspec.varargs else "args"
    varkw = argspec.varkw if argspec is not None and argspec.varkw else "kwargs"
    kwonly = set(argspec.kwonlyargs) if argspec is not None else set()
    counts = {}

    def add(base, value, structure=False):
        if isinstance(value, Tensor) and not structure:
            names.append(base)
            return
        for _ in tree_flatten(value)[0]:
            i = counts.get(base, 0)
            counts[base] = i + 1
            names.append(f"{base}_{i}")

    for i, a in enumerate(args):
        if i < len(params):
            add(params[i], a)
        else:
            add(varargs, a, structure=True)
    for k in tree_flatten(dict.fromkeys(kwargs, 0), lambda x: False)[1].aux:  # tree_flatten's dict order
        if k in kwonly or k in params:
            add(str(k), kwargs[k])
        else:
            add(varkw, kwargs[k], structure=True)
    return names


class _Frame:
    """One graph being recorded: the module whose forward runs and the tensor -> node map of its values."""

    def __init__(self, graph, module, self_node):
        self.graph = graph
        self.module = module
        self.self_node = self_node
        self.tmap = {}  # id(tensor) -> (tensor, node): keeps the tensor alive so ids stay unique
        self.mnodes = {}  # id(module) -> (module, node)
        self._tpaths = None
        self._mpaths = None

    def tensor_paths(self):
        """id(tensor) -> (tensor, its first path, the set of its direct attribute names)."""
        if self._tpaths is None:
            self._tpaths = self._paths(self.module.named_tensors())
        return self._tpaths

    def module_paths(self):
        if self._mpaths is None:
            self._mpaths = self._paths((p, m) for p, m in self.module.named_modules() if p)
        return self._mpaths

    def _paths(self, named):
        found = {}
        for path, v in named:
            found.setdefault(id(v), (v, path, set()))
        for attr, v in vars(self.module).items():  # (named_* give a shared object once, under its first path)
            hit = found.get(id(v))
            if hit is not None and hit[0] is v:
                hit[2].add(attr)
        return found


def _check_return_values(result):
    """A traced forward returns Tensors in supported containers: anything else (a Python number, None, a NumPy
    value) would be frozen into the traced module as a constant. MegEngine's assertion and text."""
    from .pytree import is_value
    for leaf in tree_flatten(result, is_leaf=is_value)[0]:
        assert isinstance(leaf, Tensor), (
            f"doesn't support {type(leaf)} in return values, MUST use Tensor or use \"register_supported_type\" "
            "method to register self-defined type")


def _tensor_meta(t):
    q = getattr(t, "_qparams", None)
    return dict(shape=tuple(t._data.shape), dtype=t.dtype, qparams=q, device=t.device)


class _Tracer:
    def __init__(self, insert=False):
        self.frames = []
        self.suppress = 0
        self.insert = insert
        self.thread = threading.current_thread()
        self.shells = {}  # id(original module) -> (original, TracedModule being built)
        self.proxies = {}  # node -> the tensor standing for it inside insert_exprs()
        self._undo = []

    # ---- installing the hooks -----------------------------------------------------------------------------
    def install(self):
        global _active, _ORIG_MODULE_CALL, _ORIG_TENSOR_INIT
        if _active is not None:
            raise RuntimeError("trace_module / insert_exprs cannot be nested inside another trace")
        undo = self._undo
        try:
            # what is there now is what runs (and comes back): another tool may have wrapped these too
            _ORIG_MODULE_CALL = Module.__dict__["__call__"]
            _ORIG_TENSOR_INIT = Tensor.__dict__["__init__"]
            Module.__call__ = _module_call
            undo.append(functools.partial(setattr, Module, "__call__", _ORIG_MODULE_CALL))
            if "__getattribute__" not in Module.__dict__:  # (a tool's own hook there stays untouched)
                Module.__getattribute__ = _module_getattribute
                undo.append(functools.partial(delattr, Module, "__getattribute__"))
            Tensor.__init__ = _tensor_init
            undo.append(functools.partial(setattr, Tensor, "__init__", _ORIG_TENSOR_INIT))
            shape_prop = Tensor.__dict__["shape"]
            Tensor.shape = property(_traced_shape, doc=shape_prop.__doc__)
            undo.append(functools.partial(setattr, Tensor, "shape", shape_prop))
            for name in TENSOR_METHODS:
                orig = Tensor.__dict__.get(name)
                if orig is None:
                    continue
                setattr(Tensor, name, _method_wrapper(name, orig))
                undo.append(functools.partial(setattr, Tensor, name, orig))
            for mod, attr, func in _functional_sites():
                if vars(mod).get(attr) is not func:  # replaced by the user since: theirs stays (and is restored)
                    continue
                setattr(mod, attr, _func_wrapper(func))
                undo.append(functools.partial(setattr, mod, attr, func))
            for scope, attr, func in WRAPPED_GLOBALS:
                if scope.get(attr) is func:  # (rebound by the user since: theirs stays)
                    scope[attr] = WRAPPED[func]
                    undo.append(functools.partial(scope.__setitem__, attr, func))
            for cls, orig in _opdef_kernels():
                setattr(cls, "_apply", _opdef_wrapper(orig))
                undo.append(functools.partial(setattr, cls, "_apply", orig))
            obs = _ApplyObserver()
            _dispatch.recorders.append(obs)
            undo.append(functools.partial(_dispatch.recorders.remove, obs))
        except BaseException:
            self.uninstall()
            raise
        _active = self

    def uninstall(self):
        global _active
        if _active is self:
            _active = None
        while self._undo:
            self._undo.pop()()

    # ---- nodes for values ---------------------------------------------------------------------------------
    def node_for_tensor(self, frame, t, path=None):
        hit = frame.tmap.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        g = frame.graph
        found = frame.tensor_paths().get(id(t))
        if found is not None and found[0] is t:
            path = path or found[1]
            expr = GetAttr(frame.self_node, path)
            name, qual = path.replace(".", "_"), f"{g._qualname}.{path}"
        else:
            expr = Constant(t)
            name, qual = "const_tensor", f"{g._qualname}.[const_tensor]"
        g._add_expr(expr)
        node = g._new_node(TensorNode, expr, name, qual, **_tensor_meta(t))
        frame.tmap[id(t)] = (t, node)
        return node

    def attribute_read(self, mod, value, name):
        """``self.<name>`` read inside the forward being recorded: its GetAttr expr is recorded now, where the
        code reads it (MegEngine's order: ``self.linear(x + self.param)`` gets ``linear`` before ``param``), under
        the name read (a module shared as ``self.lin`` and ``self.seq[0]`` is ``lin`` where the code says so)."""
        frame = self.frames[-1]
        if mod is not frame.module or self.insert:
            return
        self.suppress += 1  # the path lookups below read attributes themselves
        try:
            if isinstance(value, Module):
                found = frame.module_paths().get(id(value))
                if found is not None and found[0] is value:
                    # each read its own GetAttr, as MegEngine's (compile() merges them later): a module called
                    # twice gives ``l_out`` and ``l_1_out``
                    self.node_for_module(frame, value, name if name in found[2] else None, fresh=True)
            else:
                found = frame.tensor_paths().get(id(value))
                if found is not None and found[0] is value:
                    self.node_for_tensor(frame, value, name if name in found[2] else None)
        finally:
            self.suppress -= 1

    def node_for_module(self, frame, m, path=None, fresh=False):
        if m is frame.module:
            return frame.self_node
        hit = frame.mnodes.get(id(m))
        if hit is not None and hit[0] is m and not (fresh and isinstance(hit[1].expr, GetAttr)):
            return hit[1]
        g = frame.graph
        found = frame.module_paths().get(id(m))
        if found is not None and found[0] is m:
            path = path or found[1]
            expr = GetAttr(frame.self_node, path)
            name, qual = path.replace(".", "_"), f"{g._qualname}.{path}"
        else:
            expr = Constant(m)
            name, qual = type(m).__name__.lower(), f"{g._qualname}.[{type(m).__name__}]"
        g._add_expr(expr)
        node = g._new_node(ModuleNode, expr, name, qual, module_type=type(m))
        node.owner = m
        frame.mnodes[id(m)] = (m, node)
        return node

    def bind_outputs(self, frame, expr, result, name, qual):
        leaves, outdef = tree_flatten(result)
        expr.out_def = outdef
        g = frame.graph
        for t in leaves:
            node = g._new_node(TensorNode, expr, name, qual, **_tensor_meta(t))
            frame.tmap[id(t)] = (t, node)

    # ---- insert_exprs(): nodes in, nodes out --------------------------------------------------------------
    def value_for(self, node):
        v = self.proxies.get(node)
        if v is not None:
            return v
        frame = self.frames[0]
        if isinstance(node, ModuleNode):
            v = node.owner
            if v is None:
                raise RuntimeError(f"module node {node} has no module attached (was the graph detached?)")
            frame.mnodes[id(v)] = (v, node)
        else:
            if node.shape is None:
                raise ValueError(f"node {node} has no known shape; pass shape= to add_input_node")
            self.suppress += 1
            try:
                v = Tensor(np.zeros(node.shape, np.dtype(node.dtype or "float32")))
            finally:
                self.suppress -= 1
            frame.tmap[id(v)] = (v, node)
        self.proxies[node] = v
        return v

    def _unnode(self, obj):
        leaves, td = tree_flatten(obj, lambda x: isinstance(x, (Tensor, Node)))
        if not any(isinstance(x, Node) for x in leaves):
            return obj, False
        return tree_unflatten(td, [self.value_for(x) if isinstance(x, Node) else x for x in leaves]), True

    def _renode(self, result):
        leaves, td = tree_flatten(result)
        frame = self.frames[-1]
        return tree_unflatten(td, [frame.tmap[id(t)][1] for t in leaves])

    # ---- recording ----------------------------------------------------------------------------------------
    def _record(self, make_expr, args, kwargs, run, name, qual):
        frame = self.frames[-1]
        leaves, argdef = tree_flatten((args, kwargs))
        in_nodes = [self.node_for_tensor(frame, t) for t in leaves]
        expr = make_expr()  # after its inputs' GetAttr / Constant exprs: ids follow the graph order
        expr.arg_def = argdef
        expr.add_inputs(in_nodes)
        frame.graph._add_expr(expr)
        self.suppress += 1
        try:
            result = run()
        finally:
            self.suppress -= 1
        self.bind_outputs(frame, expr, result, name, qual)
        return result

    def call_function(self, func, args, kwargs, run=None):
        (args, kwargs), as_nodes = self._unnode((args, kwargs))
        if inspect.isfunction(inspect.unwrap(func)):
            # MegEngine records a call normalized: defaults filled in, keyword-only arguments as keywords
            # (``nn.avg_pool2d(x, 7, None, 0, average_count_exclude_padding, )``)
            try:
                args, kwargs = convert_kwargs_to_args(func, args, kwargs)
            except TypeError:  # a call Python rejects: running it below raises the real error
                pass
        fname = getattr(func, "__name__", "func")
        q = self.frames[-1].graph._qualname
        result = self._record(lambda: CallFunction(func), args, kwargs, run or (lambda: func(*args, **kwargs)),
                              f"{fname.lower() if isinstance(func, type) else fname}_out", f"{q}.[func_{fname}]")
        return self._renode(result) if as_nodes else result

    def call_method(self, name, orig, obj, args, kwargs):
        (obj, args, kwargs), as_nodes = self._unnode((obj, args, kwargs))
        if inspect.isfunction(inspect.unwrap(orig)):
            # normalized as MegEngine records it: ``x.mean(axis=1, keepdims=True)`` is ``x.mean(1, True, )``,
            # ``x.sum()`` is ``x.sum(None, False, )``
            try:
                args, kwargs = convert_kwargs_to_args(orig, args, kwargs, is_bounded=True)
            except TypeError:  # a call Python rejects: running it below raises the real error
                pass
        frame = self.frames[-1]
        obj_node = self.node_for_tensor(frame, obj)

        def run():
            r = orig(obj, *args, **kwargs)
            return obj if r is None else r  # in-place (__setitem__): the output is the updated tensor

        def make():
            e = CallMethod(obj_node, name)
            # an in-place update of module state (``self.count += 1``): kept by compile() though unused
            e._disable_remove = name in _INPLACE and isinstance(obj_node.expr, GetAttr)
            return e

        short = name.strip("_")
        result = self._record(make, args, kwargs, run, f"{short}_out", f"{frame.graph._qualname}.[method_{short}]")
        return self._renode(result) if as_nodes else result

    def record_opdef(self, op, orig, inputs):
        """A builtin op descriptor applied directly: one Apply expr holding the descriptor."""
        self.suppress += 1
        try:
            outputs = tuple(orig(op, inputs))
        finally:
            self.suppress -= 1
        from .expr import _opdef_name
        self._add_apply(op, inputs, outputs, _opdef_name(op).lower())
        return outputs

    def record_apply(self, op, inputs, outputs):
        """An op of megxla's registry reached without a traced call: one Apply expr holding it."""
        self._add_apply(op, inputs, outputs, getattr(op, "name", "op").split("[")[0].lower())

    def _add_apply(self, op, inputs, outputs, name):
        frame = self.frames[-1]
        in_nodes = [self.node_for_tensor(frame, t) for t in inputs]
        expr = Apply(op)
        expr.add_inputs(in_nodes)
        frame.graph._add_expr(expr)
        self.bind_outputs(frame, expr, list(outputs), f"{name}_out", f"{frame.graph._qualname}.[def_{name}]")

    def call_module(self, mod, args, kwargs):
        (args, kwargs), as_nodes = self._unnode((args, kwargs))
        frame = self.frames[-1]
        mnode = self.node_for_module(frame, mod)
        builtin = is_builtin(mod)
        if not builtin:
            spec = argspec_of(mod)
            if spec is not None:
                args, kwargs = convert_kwargs_to_args(spec, args, kwargs, is_bounded=True)
        leaves, argdef = tree_flatten((args, kwargs))
        shell = self.shells.get(id(mod))
        name, qual = f"{mnode._name}_out", f"{mnode._qualname}.[out]"
        if builtin or (shell is not None and argdef in shell[1].argdef_graph_map):
            # a leaf (or a module already traced for this structure): one expr, nothing inside is recorded
            result = self._record(lambda: CallMethod(mnode, "__call__"), args, kwargs,
                                  lambda: _ORIG_MODULE_CALL(mod, *args, **kwargs), name, qual)
        else:
            # the call expr comes first, then the module's own graph records what its forward does
            in_nodes = [self.node_for_tensor(frame, t) for t in leaves]
            expr = CallMethod(mnode, "__call__")
            expr.arg_def = argdef
            expr.add_inputs(in_nodes)
            frame.graph._add_expr(expr)
            result = self.trace_forward(mod, mnode, args, kwargs, frame.graph)
            self.bind_outputs(frame, expr, result, name, qual)
        return self._renode(result) if as_nodes else result

    def trace_forward(self, mod, mnode, args, kwargs, parent_graph):
        """Record ``mod``'s forward on (args, kwargs) into a new graph of its TracedModule; returns the result."""
        from .traced_module import TracedModule
        if parent_graph is None:
            gname = qual = (mod.graph._name if isinstance(mod, TracedModule) and mod.argdef_graph_map
                            else type(mod).__name__)
        else:
            # MegEngine's name: the module path with "." and other non-identifier characters as "_"
            qual = mnode._qualname
            gname = re.sub("[^0-9a-zA-Z_]+", "_", qual)
        g = InternalGraph(gname, qual)
        if parent_graph is not None:
            g.top_graph = parent_graph
        self_expr = Input("self")
        self_expr.top_graph = g
        self_node = g._new_node(ModuleNode, self_expr, "self", qual, module_type=type(mod))
        self_node.owner = mod
        g._inputs.append(self_node)
        frame = _Frame(g, mod, self_node)
        leaves, argdef = tree_flatten((args, kwargs))
        for t, name in zip(leaves, _input_names(argspec_of(mod), args, kwargs)):
            e = Input(name)
            e.top_graph = g
            n = g._new_node(TensorNode, e, name, f"{qual}.[{name}]", **_tensor_meta(t))
            g._inputs.append(n)
            frame.tmap[id(t)] = (t, n)
        # functions stored as attributes (``self.add = F.add`` in __init__) are the unpatched objects: the
        # forward reads the recording wrappers instead while it is traced
        swapped = {k: v for k, v in vars(mod).items() if isinstance(v, types.FunctionType) and v in _FUNC_NAMES}
        for k, v in swapped.items():
            mod.__dict__[k] = _func_wrapper(v)
        self.frames.append(frame)
        try:
            result = _ORIG_MODULE_CALL(mod, *args, **kwargs)
        finally:
            self.frames.pop()
            mod.__dict__.update(swapped)
        _check_return_values(result)
        out_leaves, outdef = tree_flatten(result)
        g._outputs = [self.node_for_tensor(frame, t) for t in out_leaves]
        self._apply_tensor_names(frame)
        shell = self.shell_for(mod)
        shell.argdef_graph_map[argdef] = g
        shell.argdef_outdef_map[argdef] = outdef
        return result

    @staticmethod
    def _apply_tensor_names(frame):
        # ``y.name = "result"`` inside the forward names y's node
        for t, node in list(frame.tmap.values()):
            tname = getattr(t, "_name", None)
            if tname and isinstance(node, TensorNode) and not isinstance(node.expr, (Input, GetAttr, Constant)) \
                    and node._name != tname and node.top_graph is frame.graph:
                node.name = tname

    def shell_for(self, mod):
        hit = self.shells.get(id(mod))
        if hit is None:
            from .traced_module import TracedModule
            shell = TracedModule(False, {}, {})
            hit = self.shells[id(mod)] = (mod, shell)
        return hit[1]

    def finish(self):
        """Give every TracedModule built its attributes (traced sub-modules replaced by theirs)."""
        from .traced_module import _fill_attributes
        for mod, shell in list(self.shells.values()):
            _fill_attributes(shell, mod, self)
