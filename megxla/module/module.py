"""The ``Module`` base class: attribute-based discovery of parameters, buffers and sub-modules.

As in MegEngine there is no registration API: every Tensor / Module found in an attribute -- or nested in
lists, tuples and dicts held by an attribute -- belongs to the module. Discovery walks attributes in sorted
name order (MegEngine's order, which optimizers and checkpoints rely on).
"""
from __future__ import annotations

import itertools
import warnings
import weakref
from abc import ABCMeta, abstractmethod
from collections import OrderedDict
from typing import Any, Callable, Iterable, Optional, Set, Tuple

import numpy as np

from ..core._tensor import Tensor, Parameter
from ..core.dtypes import is_float
from ..core import _dispatch, _interrupt, _naming
from ..logger import get_logger

__all__ = ["Module", "HookHandler"]


def _access_structure(obj, key, callback=None):
    """Follow a dotted key of :meth:`Module.named_children` / ``state_dict`` style (``"blocks.0.conv"``: list and
    tuple items by index, dict items by key, anything else by attribute) from ``obj``.

    Returns ``callback(parent, last_key, value)`` where given (``last_key`` an int for a list or tuple item),
    else the value reached. MegEngine's module utilities and tests use it to get or set nested submodules.
    """
    parent, k, cur = None, None, obj
    for k in key.split("."):
        parent = cur
        if isinstance(cur, (list, tuple)):
            k = int(k)
            cur = cur[k]
        elif isinstance(cur, dict):
            cur = cur[k]
        else:
            cur = getattr(cur, k)
    return cur if callback is None else callback(parent, k, cur)

logger = get_logger(__name__)


class HookHandler:
    """Handle returned by ``register_forward_(pre_)hook``; ``remove()`` unregisters the hook.

    Args:
        source_dict: the module's hook dict the hook is stored in.
        hook: the hook callable.

    Example:
        >>> model = M.Linear(2, 2)
        >>> handle = model.register_forward_hook(lambda m, inp, out: None)
        >>> handle.remove()
    """

    _ids = itertools.count()

    def __init__(self, source_dict, hook):
        self.id = next(HookHandler._ids)
        source_dict[self.id] = hook
        _registry.bump_epoch()  # a compiled step recorded without (or with) this hook must record again
        # Weak so that a forgotten handle does not keep a deleted module's hook table alive.
        self.source_ref = weakref.ref(source_dict)

    def remove(self):
        """Unregister the hook (a second call does nothing)."""
        source_dict = self.source_ref()
        if source_dict is not None and self.id in source_dict:
            del source_dict[self.id]
            _registry.bump_epoch()


class _HookDict(OrderedDict):
    # A plain OrderedDict cannot be the target of a weakref; a subclass can.
    pass


class ModuleNameError(ValueError, AssertionError):
    """A module ``name`` that is not a non-empty string: MegEngine asserts it (an ``AssertionError``), megxla raised a
    ``ValueError`` before; both catch it."""


class ReplaceParamShapeError(ValueError, AssertionError):
    """``replace_param`` given a replacement of another shape: MegEngine's ``AssertionError``, and the ``ValueError``
    megxla raised before."""


def _is_module(obj) -> bool:
    return isinstance(obj, Module)


def _is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def _is_parameter(obj) -> bool:
    return isinstance(obj, Parameter)


def _is_buffer(obj) -> bool:
    return isinstance(obj, Tensor) and not isinstance(obj, Parameter)


def _expand_structure(prefix: str, obj):
    """``(dotted key, leaf)`` for every Tensor / Module in ``obj``, descending lists, tuples and dicts."""
    if isinstance(obj, (Tensor, Module)):
        return [(prefix, obj)]
    if isinstance(obj, (list, tuple, dict)):
        ret = []
        if isinstance(obj, dict):
            targets = ((k, obj[k]) for k in sorted(obj, key=str))
        else:
            targets = ((str(k), v) for k, v in enumerate(obj))
        for k, o in targets:
            sub = _expand_structure(str(k), o)
            if sub and not isinstance(k, str):
                raise AssertionError(f"keys for Tensor and Module must be str, error key: {k!r}")
            for kt, vt in sub:
                ret.append((prefix + "." + kt, vt))
        return ret
    return []


def _set_module_name(parent, prefix, key: str, module) -> None:
    """Name ``module`` (and its sub-modules) as attribute ``key`` of ``parent``, whose ``_name`` is ``prefix``."""
    short = module.__dict__.get("_short_name")
    if short and short != key:
        # a module assigned again under another name keeps its first one, with MegEngine's warning (graph surgery
        # -- RepLKNet's convert_to_deploy -- logs one per fused layer there)
        logger.warning(f"try setting the submodule `{short}` to `{type(parent)}`'s new attribute `{key}`, its name "
                       f"`{short}` will remain unchanged")
        return
    full = f"{prefix}.{key}" if prefix else key
    module.__dict__["_name"] = full
    module.__dict__["_short_name"] = key
    for sub_key, sub in module._flatten(recursive=False, with_key=True, predicate=_is_module):
        _set_module_name(module, full, sub_key, sub)


def _add_indent(repr_str: str, num_spaces: int) -> str:
    lines = repr_str.split("\n")
    if len(lines) == 1:
        return repr_str
    return lines[0] + "\n" + "\n".join(" " * num_spaces + line for line in lines[1:])


def _xnorm_types():
    # BatchNorm1d / BatchNorm2d / SyncBatchNorm share _BatchNorm.
    from .batchnorm import _BatchNorm
    from .normalization import GroupNorm, InstanceNorm, LayerNorm
    return (_BatchNorm, GroupNorm, InstanceNorm, LayerNorm)


def _readonly(a):
    """``a`` as a read-only NumPy array (MegEngine's state_dict values are read-only views)."""
    a = np.asarray(a)
    a.flags.writeable = False
    return a


_UNSET = object()  # (an attribute not set yet)


def _same_scalar(a, b):
    """Whether ``a`` and ``b`` are Python numbers (or strings) a compiled step cannot tell apart: the same type and
    value, floats by their bits as a traced step's signature keys them (``-0.0`` is not ``0.0``, NaN is NaN)."""
    t = type(a)
    if t is not type(b) or t not in (float, int, bool, str):
        return False
    return a.hex() == b.hex() if t is float else a == b


class Module(metaclass=ABCMeta):
    """Base class for all neural-network layers and models.

    Sub-classes create their parameters (``megxla.Parameter``), buffers (plain ``megxla.Tensor``) and
    sub-modules as attributes in ``__init__`` and implement ``forward``; calling the module runs the forward
    pre-hooks, ``forward`` and the forward hooks.

    Args:
        name: an optional name for the module (used in repr-like outputs and naming).

    Raises:
        AssertionError: ``name`` is not a non-empty string (MegEngine's assertion; also a ``ValueError``).

    Example:
        >>> import megxla.module as M
        >>> import megxla.functional as F
        >>> class Net(M.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = M.Linear(4, 2)
        ...     def forward(self, x):
        ...         return F.relu(self.fc(x))
        >>> net = Net()
        >>> [k for k, _ in net.named_parameters()]
        ['fc.bias', 'fc.weight']
    """

    def __init__(self, name: Optional[str] = None):
        self._modules = []
        if name is not None:
            if not isinstance(name, str) or not name.strip():
                raise ModuleNameError("Module's name must be a non-empty string")  # (MegEngine's words)
        self.name = name
        self.training = True
        self.quantize_disabled = False
        self._forward_pre_hooks = _HookDict()
        self._forward_hooks = _HookDict()
        # MegEngine's auto-naming fields: `_name` is kept (None) so a pickled megxla module unpickles into
        # MegEngine's class with every attribute MegEngine's Module methods read (its __setattr__ reads _name)
        self._name = None
        self._short_name = None

    @abstractmethod
    def forward(self, inputs):
        """Compute the module's output; every sub-class defines it."""

    # ---- hooks / call -----------------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable) -> HookHandler:
        """Register ``hook(module, inputs) -> None | new_inputs`` to run before ``forward``.

        Args:
            hook: called with the module and the tuple of positional inputs; a non-None result replaces the
                inputs (a non-tuple result becomes a 1-tuple).

        Returns:
            a :class:`HookHandler` whose ``remove()`` unregisters the hook.

        Example:
            >>> model = M.Linear(2, 2)
            >>> h = model.register_forward_pre_hook(lambda m, inputs: None)
            >>> h.remove()
        """
        return HookHandler(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook: Callable) -> HookHandler:
        """Register ``hook(module, inputs, outputs) -> None | new_outputs`` to run after ``forward``.

        Args:
            hook: called with the module, the inputs tuple and the outputs; a non-None result replaces the
                outputs.

        Returns:
            a :class:`HookHandler` whose ``remove()`` unregisters the hook.

        Example:
            >>> model = M.Linear(2, 2)
            >>> h = model.register_forward_hook(lambda m, inputs, out: out * 2)
            >>> h.remove()
        """
        return HookHandler(self._forward_hooks, hook)

    def __call__(self, *inputs, **kwargs):
        # Truthiness tests first: calling a module is on the eager hot path and hooks are rare.
        if self._forward_pre_hooks:
            for hook in list(self._forward_pre_hooks.values()):
                modified = hook(self, inputs)
                if modified is not None:
                    inputs = modified if isinstance(modified, tuple) else (modified,)
        if _naming.module_scopes[0]:  # naming scopes on (e.g. Profiler(with_scopes=True)): rare
            outputs = _naming.module_call(self, self.forward, inputs, kwargs)
        elif _dispatch._active:  # a trace (or a GradManager) is recording: ops take the module's scope (dump names)
            outputs = _naming.scoped_call(self, self.forward, inputs, kwargs)
        else:
            outputs = self.forward(*inputs, **kwargs)
        if self._forward_hooks:
            for hook in list(self._forward_hooks.values()):
                modified = hook(self, inputs, outputs)
                if modified is not None:
                    outputs = modified
        return outputs

    # ---- discovery --------------------------------------------------------------------------------------
    def _flatten(self, *, recursive: bool = True, with_key: bool = False, with_parent: bool = False,
                 prefix: Optional[str] = None, predicate: Callable[[Any], bool] = lambda _: True,
                 seen: Optional[Set[int]] = None):
        """Walk the attributes (sorted by name) and yield the leaves that satisfy ``predicate``.

        Each object is yielded once (shared parameters / modules are de-duplicated by identity) and the
        module itself is never revisited, so cycles terminate.
        """
        if seen is None:
            seen = {id(self)}
        module_dict = vars(self)
        _prefix = "" if prefix is None else prefix + "."
        for key in sorted(module_dict):
            for expanded_key, leaf in _expand_structure(key, module_dict[key]):
                leaf_id = id(leaf)
                if leaf_id in seen:
                    continue
                seen.add(leaf_id)
                if predicate(leaf):
                    if with_key and with_parent:
                        yield _prefix + expanded_key, leaf, self
                    elif with_key:
                        yield _prefix + expanded_key, leaf
                    elif with_parent:
                        yield leaf, self
                    else:
                        yield leaf
                if recursive and isinstance(leaf, Module):
                    yield from leaf._flatten(recursive=recursive, with_key=with_key, with_parent=with_parent,
                                             prefix=_prefix + expanded_key if with_key else None,
                                             predicate=predicate, seen=seen)

    @staticmethod
    def _drop_requires_grad(kwargs):
        if "requires_grad" in kwargs:
            del kwargs["requires_grad"]
            # (MegEngine 1.13's words, as its ``Module.parameters`` logs them)
            logger.warning("Tensor currently has no requires_grad attribute so requires_grad argument is ignored "
                           "here")

    def parameters(self, recursive: bool = True, **kwargs) -> Iterable[Parameter]:
        """Iterate over the module's :class:`~megxla.Parameter` s.

        Args:
            recursive: also visit sub-modules.

        Returns:
            a generator of parameters, each once, in sorted attribute-path order.

        Example:
            >>> len(list(M.Linear(3, 2).parameters()))
            2
        """
        self._drop_requires_grad(kwargs)
        yield from self._flatten(with_key=False, predicate=_is_parameter, recursive=recursive, **kwargs)

    def named_parameters(self, prefix: Optional[str] = None, recursive: bool = True,
                         **kwargs) -> Iterable[Tuple[str, Parameter]]:
        """Iterate over ``(dotted name, parameter)`` pairs, e.g. ``("conv1.weight", p)``.

        Args:
            prefix: prepended (with a dot) to every name.
            recursive: also visit sub-modules.

        Returns:
            a generator of ``(name, Parameter)``.

        Example:
            >>> [k for k, _ in M.Linear(3, 2).named_parameters(prefix="fc")]
            ['fc.bias', 'fc.weight']
        """
        self._drop_requires_grad(kwargs)
        yield from self._flatten(with_key=True, prefix=prefix, predicate=_is_parameter, recursive=recursive,
                                 **kwargs)

    def buffers(self, recursive: bool = True, **kwargs) -> Iterable[Tensor]:
        """Iterate over the module's buffers: Tensors that are not Parameters (e.g. BN running stats).

        Args:
            recursive: also visit sub-modules.

        Returns:
            a generator of Tensors.

        Example:
            >>> len(list(M.BatchNorm2d(4).buffers()))
            2
        """
        yield from self._flatten(with_key=False, predicate=_is_buffer, recursive=recursive, **kwargs)

    def named_buffers(self, prefix: Optional[str] = None, recursive: bool = True,
                      **kwargs) -> Iterable[Tuple[str, Tensor]]:
        """Iterate over ``(dotted name, buffer)`` pairs.

        Args:
            prefix: prepended (with a dot) to every name.
            recursive: also visit sub-modules.

        Returns:
            a generator of ``(name, Tensor)``.

        Example:
            >>> [k for k, _ in M.BatchNorm2d(4).named_buffers()]
            ['running_mean', 'running_var']
        """
        yield from self._flatten(with_key=True, prefix=prefix, predicate=_is_buffer, recursive=recursive,
                                 **kwargs)

    def tensors(self, recursive: bool = True, **kwargs) -> Iterable[Tensor]:
        """Iterate over all Tensors of the module: parameters and buffers.

        Args:
            recursive: also visit sub-modules.

        Returns:
            a generator of Tensors.

        Example:
            >>> len(list(M.BatchNorm2d(4).tensors()))
            4
        """
        yield from self._flatten(with_key=False, predicate=_is_tensor, recursive=recursive, **kwargs)

    def named_tensors(self, prefix: Optional[str] = None, recursive: bool = True,
                      **kwargs) -> Iterable[Tuple[str, Tensor]]:
        """Iterate over ``(dotted name, tensor)`` pairs for parameters and buffers.

        Args:
            prefix: prepended (with a dot) to every name.
            recursive: also visit sub-modules.

        Returns:
            a generator of ``(name, Tensor)``.

        Example:
            >>> [k for k, _ in M.BatchNorm2d(4).named_tensors()]
            ['bias', 'running_mean', 'running_var', 'weight']
        """
        yield from self._flatten(with_key=True, prefix=prefix, predicate=_is_tensor, recursive=recursive,
                                 **kwargs)

    def children(self, **kwargs) -> Iterable["Module"]:
        """Iterate over the direct sub-modules.

        Returns:
            a generator of Modules.

        Example:
            >>> len(list(M.Sequential(M.ReLU(), M.ReLU()).children()))
            2
        """
        yield from self._flatten(with_key=False, predicate=_is_module, recursive=False, **kwargs)

    def named_children(self, **kwargs) -> Iterable[Tuple[str, "Module"]]:
        """Iterate over ``(attribute name, sub-module)`` for the direct sub-modules.

        Returns:
            a generator of ``(name, Module)``.

        Example:
            >>> [k for k, _ in M.Sequential(M.ReLU(), M.ReLU()).named_children()]
            ['0', '1']
        """
        yield from self._flatten(with_key=True, predicate=_is_module, recursive=False, **kwargs)

    def modules(self, **kwargs) -> Iterable["Module"]:
        """Iterate over this module and all its descendants (pre-order).

        Returns:
            a generator of Modules, starting with ``self``.

        Example:
            >>> len(list(M.Sequential(M.ReLU(), M.ReLU()).modules()))
            3
        """
        if kwargs.get("with_parent"):
            yield self, None
        else:
            yield self
        yield from self._flatten(with_key=False, predicate=_is_module, **kwargs)

    def named_modules(self, prefix: Optional[str] = None, **kwargs) -> Iterable[Tuple[str, "Module"]]:
        """Iterate over ``(dotted path, module)`` for this module (path ``prefix`` or ``""``) and descendants.

        Args:
            prefix: prepended to every path.

        Returns:
            a generator of ``(name, Module)``.

        Example:
            >>> [k for k, _ in M.Sequential(M.ReLU()).named_modules()]
            ['', '0']
        """
        root = "" if prefix is None else prefix
        if kwargs.get("with_parent"):
            yield root, self, None
        else:
            yield root, self
        yield from self._flatten(with_key=True, prefix=prefix, predicate=_is_module, **kwargs)

    # ---- modes / utilities ------------------------------------------------------------------------------
    def apply(self, fn: Callable[["Module"], Any]) -> None:
        """Call ``fn`` on this module and every descendant.

        Args:
            fn: a function taking a Module.

        Example:
            >>> model = M.Sequential(M.Linear(2, 2), M.ReLU())
            >>> model.apply(lambda m: print(type(m).__name__))
            Sequential
            Linear
            ReLU
        """
        for m in self.modules():
            fn(m)

    def train(self, mode: bool = True, recursive: bool = True) -> None:
        """Set training mode (``training = mode``), for all descendants too unless ``recursive=False``.

        Args:
            mode: True for training, False for evaluation.
            recursive: also switch the sub-modules.

        Example:
            >>> model = M.Sequential(M.Linear(2, 2))
            >>> model.train()
            >>> model.training
            True
        """
        if not recursive:
            self.training = mode
            return

        def fn(module):
            module.train(mode, recursive=False)

        self.apply(fn)

    def eval(self) -> None:
        """Switch this module and its descendants to evaluation mode (``train(False)``).

        Example:
            >>> model = M.Sequential(M.Linear(2, 2))
            >>> model.eval()
            >>> model.training
            False
        """
        self.train(False)

    def disable_quantize(self, value=True):
        """Mark this module and its descendants as excluded (``value=True``) from quantization.

        Args:
            value: the ``quantize_disabled`` flag to set.

        Returns:
            None, as MegEngine's.

        Example:
            >>> model = M.Sequential(M.Linear(2, 2))
            >>> model.disable_quantize()
            >>> model.quantize_disabled
            True
        """

        def fn(module):
            module.quantize_disabled = value

        self.apply(fn)

    def zero_grad(self) -> None:
        """Set the ``.grad`` of every parameter that has one to zeros (deprecated in MegEngine).

        Example:
            >>> model = M.Linear(2, 2); model.weight.grad = mge.Tensor(np.ones((2, 2), "float32"))
            >>> model.zero_grad(); float(model.weight.grad.sum())
            0.0
        """
        warnings.warn("Call to deprecated method zero_grad. -- Deprecated since version 1.0.", DeprecationWarning,
                      stacklevel=2)  # (MegEngine's ``@deprecated(version="1.0")``)
        for param in self.parameters():
            if param.grad is not None:
                param.grad.reset_zero()

    def replace_param(self, params: dict, start_pos: int, seen: Optional[Set[int]] = None):
        """Replace parameters, numbered in discovery order from ``start_pos``, by the ones in ``params``.

        Every replacement is checked before any is made: a wrong shape raises and leaves the module as it was.

        Args:
            params: ``{index: Parameter}``; each replacement must have the replaced parameter's shape.
            start_pos: the index of this module's first parameter.
            seen: ids already visited (internal, for recursion).

        Returns:
            the number of parameters this module (recursively) holds.

        Raises:
            AssertionError: a replacement's shape differs (MegEngine asserts it; also a ``ValueError``).

        Example:
            >>> lin = M.Linear(2, 2)
            >>> lin.replace_param({0: Parameter(np.zeros(2, "float32"))}, 0)
            2
        """
        warnings.warn("Call to deprecated method replace_param. -- Deprecated since version 1.0.", DeprecationWarning,
                      stacklevel=2)  # (MegEngine's ``@deprecated(version="1.0")``)
        plan = []
        offset = self._replace_param_plan(params, start_pos, {id(self)} if seen is None else seen, plan)
        for module_dict, key, new in plan:
            module_dict[key] = new  # (MegEngine writes the attribute dict directly: no renaming, no hooks)
        if plan:
            # a compiled step prepared with the old parameters must look again (``__setattr__`` does this)
            _registry.bump_epoch()
        return offset

    def _replace_param_plan(self, params, start_pos, seen, plan):
        # (replace_param's walk: the (attribute dict, key, replacement) triples into ``plan``, each checked; the
        # number of parameters met)
        offset = 0
        module_dict = vars(self)
        for key in sorted(module_dict):
            value = module_dict[key]
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, Parameter):
                if start_pos + offset in params:
                    new = params[start_pos + offset]
                    if tuple(value.shape) != tuple(new.shape):
                        raise ReplaceParamShapeError(f"replace_param: parameter {start_pos + offset} ({key}) has "
                                                     f"shape {tuple(value.shape)}, replacement has "
                                                     f"{tuple(new.shape)}")
                    plan.append((module_dict, key, new))
                offset += 1
            elif isinstance(value, Module):
                offset += value._replace_param_plan(params, start_pos + offset, seen, plan)
        return offset

    # ---- state dict -------------------------------------------------------------------------------------
    def state_dict(self, rst=None, prefix: str = "", keep_var: bool = False):
        """The module's parameters and buffers as an ordered ``{dotted name: value}`` dict.

        Values are read-only NumPy arrays, as in MegEngine (writing one raises ``ValueError: assignment
        destination is read-only`` instead of silently diverging from the module). As in MegEngine, the
        affine parameters and running statistics of normalisation layers are returned flattened to 1-D
        (they are stored 4-D for speed); ``load_state_dict`` accepts both forms. With ``keep_var=True`` the
        values are the module's Tensors themselves, but for those of normalisation layers, which are 1-D Tensors
        of their values, as MegEngine's (so both dicts of an EMA ``ema.state_dict(keep_var=True)`` and
        ``model.state_dict()`` have the same shapes).

        Args:
            rst: an existing dict to fill (MegEngine compatibility).
            prefix: prepended to every key.
            keep_var: return the Tensors themselves instead of NumPy copies.

        Returns:
            an ``OrderedDict``.

        Example:
            >>> list(M.BatchNorm2d(4).state_dict())
            ['bias', 'running_mean', 'running_var', 'weight']
        """
        typed = self._state_dict(prefix=prefix, keep_var=keep_var)
        xnorm = _xnorm_types()
        out = OrderedDict() if rst is None else rst
        for (module_type, k), v in typed.items():
            if issubclass(module_type, xnorm):
                v = v.reshape(-1)
            out[k] = v
        return out

    def _state_dict(self, rst=None, prefix: str = "", keep_var: bool = False):
        # Keys are (owning module type, name) so state_dict can apply per-type rules.
        if rst is None:
            rst = OrderedDict()
        for k, v in self._flatten(recursive=False, with_key=True, predicate=_is_tensor):
            if (type(self), prefix + k) in rst:
                raise AssertionError(f"duplicated state: {prefix + k}")
            rst[(type(self), prefix + k)] = v if keep_var else _readonly(v.numpy())
        for k, submodule in self._flatten(recursive=False, with_key=True, predicate=_is_module):
            submodule._state_dict(rst, prefix + k + ".", keep_var)
        return rst

    def load_state_dict(self, state_dict, strict: bool = True):
        """Assign values from ``state_dict`` to the parameters and buffers, in place.

        All entries are checked and converted before anything is assigned, so a failing call (bad shape, a value
        that is not numbers, missing or unexpected keys) leaves every parameter and buffer unchanged.

        Args:
            state_dict: a dict ``{name: ndarray or Tensor}`` as returned by :meth:`state_dict`, or a callable
                ``closure(name, tensor) -> ndarray | None`` (None skips that tensor).
            strict: raise ``KeyError`` on missing or unexpected keys (otherwise log a warning).

        Raises:
            ValueError: a value's shape does not match (normalisation layers also accept any shape with the
                same number of elements, for checkpoints holding 1-D stats).
            KeyError: with ``strict=True``, keys are missing or unused.
            TypeError: a value is not numbers (or cannot be converted to the tensor's dtype).

        Example:
            >>> b = M.Linear(3, 2)
            >>> b.load_state_dict(M.Linear(3, 2).state_dict())
        """
        unused = []
        if isinstance(state_dict, dict):
            unused = list(state_dict.keys())

            def closure(k, _):
                return state_dict[k] if k in state_dict else None
        elif callable(state_dict):
            closure = state_dict
        else:
            raise ValueError(f"`state_dict` must load a dict or callable, got {type(state_dict)}")

        plan, loaded, skipped = self._load_plan(closure)
        unused = set(unused) - loaded
        for what, keys in (("Unused", unused), ("Missing", skipped)):
            if keys:
                msg = f"{what} params {'violate `strict=True`' if strict else 'in `strict=False` mode'}, " \
                      f"{what.lower()}={{{', '.join(map(repr, sorted(keys)))}}}"  # (a set, as MegEngine prints)
                if strict:
                    raise KeyError(msg)
                logger.warning(msg)

        _interrupt.rebind(plan, scan=True)

    def _load_state_dict_with_closure(self, closure):
        """Load through ``closure(key, var) -> ndarray | None`` (None skips that key), as MegEngine's method of this
        name (code overriding ``load_state_dict``, invis's modules, calls it with a callable): every value is
        checked and converted before any is assigned.

        Returns:
            ``(loaded, skipped)``: the sets of keys assigned and of keys the closure skipped.
        """
        if not callable(closure):
            raise TypeError(f"_load_state_dict_with_closure: closure must be callable, got {type(closure)}")
        plan, loaded, skipped = self._load_plan(closure)
        _interrupt.rebind(plan, scan=True)
        return loaded, skipped

    def _load_plan(self, closure):
        # (every (tensor, new value) pair ``closure`` gives, checked and converted, and the keys loaded / skipped;
        # nothing is assigned here)
        xnorm = _xnorm_types()
        plan, loaded, skipped = [], set(), set()
        for (module_type, k), var in self._state_dict(keep_var=True).items():
            value = closure(k, var)
            if value is None:
                skipped.add(k)
                continue
            value = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
            var_shape, new_shape = tuple(var.shape), tuple(value.shape)
            if var_shape != new_shape:
                # Normalisation layers store stats 4-D but (old and current) checkpoints hold them 1-D.
                if issubclass(module_type, xnorm) and int(np.prod(var_shape)) == int(np.prod(new_shape)):
                    value = value.reshape(var_shape)
                else:
                    # (MegEngine's words; for a normalisation layer it says "size mismatch, should be 2, get 3")
                    raise ValueError(f"param `{k}` shape mismatch, should be {var_shape}, get {new_shape}")
            # NOTE: converted here, before any assignment: a value that cannot become this dtype raises
            # while every tensor still holds its old value.
            if value.dtype == object or not (value.dtype.kind in "biufc" or is_float(value.dtype)):
                raise TypeError(f"load_state_dict: param `{k}` has values of dtype {value.dtype}, expected "
                                f"numbers for {np.dtype(var.dtype).name}")
            dtype = var.dtype
            if (value.dtype.kind in "biuf" or is_float(value.dtype)) and value.dtype.itemsize <= 4 \
                    and (np.dtype(var.dtype).kind in "biuf" or is_float(var.dtype)):
                # MegEngine replaces the tensor by the loaded array, dtype included: a float16 (int32, uint8,
                # bool) checkpoint gives float16 (...) parameters. (64-bit arrays, which MegEngine rejects, are
                # converted to the tensor's dtype.)
                dtype = value.dtype.name
                if isinstance(var, Parameter) and is_float(var.dtype) and value.dtype.kind in "biu" \
                        and not value.dtype.metadata:
                    # (MegEngine's behaviour, kept; but such a parameter gets no gradient: a training loop went on
                    # with its weights frozen at the loaded integers and no error -- probe X)
                    warnings.warn(f"load_state_dict: parameter `{k}` is {np.dtype(var.dtype).name} and the value "
                                  f"loaded is {value.dtype.name}: it becomes {value.dtype.name}, as MegEngine loads "
                                  f"it, and gets no gradient (convert the value, `.astype('float32')`, to train it)",
                                  stacklevel=3)
            try:
                new = Tensor(value, dtype=dtype, device=var.device)
            except (TypeError, ValueError, OverflowError) as exc:
                raise TypeError(f"load_state_dict: param `{k}` cannot be converted to {np.dtype(var.dtype).name}"
                                f": {exc}") from None
            plan.append((var, new))
            loaded.add(k)
            # a quantized weight as MegEngine writes it carries its scale in the dtype metadata (see
            # QuantizedModule): the scale Tensor the weight's qparams (and its module) read takes it too
            scale = (value.dtype.metadata or {}).get("mgb_dtype", {}).get("scale")
            qscale = getattr(getattr(var, "qparams", None), "scale", None)
            if scale is not None and isinstance(qscale, Tensor):
                plan.append((qscale, Tensor(np.full(qscale.shape, scale, np.float32), dtype=qscale.dtype,
                                            device=qscale.device)))

        return plan, loaded, skipped

    # ---- attribute bookkeeping --------------------------------------------------------------------------
    def __setattr__(self, name: str, value):
        old = self.__dict__.get(name, _UNSET)
        if (value is old and not isinstance(value, (list, tuple, dict))) or _same_scalar(value, old):
            # the same object again (``model.train()`` every step sets ``training`` on every module to what it
            # was), or an equal Python number (``net.tau = max(0.5, 1 - k * step)`` every step, at its floor: a new
            # float object each time): nothing to rename, and nothing a compiled step read changed -- the epoch bump
            # below sent the next xla_trace call down its slow path, 5-7x the prepared call. (A list or dict -- or a
            # tuple of them -- may have been changed in place before it is set again.)
            if _is_module(value) and value.__dict__.get("_short_name") not in (None, name):
                _set_module_name(self, None, name, value)  # (only MegEngine's warning: the name stays)
            return
        # `_modules` keeps the insertion order of module-like attributes, which `__repr__` shows.
        is_module_like = _is_module(value) or isinstance(value, (list, tuple, dict))
        if name != "_modules":
            modules = self.__dict__.get("_modules")
            if modules is None and is_module_like:
                raise AttributeError("cannot assign module before Module.__init__() call")
            if is_module_like:
                if name not in modules:
                    modules.append(name)
            elif modules is not None and name in modules:
                modules.remove(name)
            if is_module_like:
                # MegEngine's names: `_short_name` the attribute key ("blocks.1" inside a list; the scope name of
                # its calls), `_name` the dotted path from the parent's `_name` (graph-surgery code reads it:
                # `setattr(parent, conv._name, fused)`), given on first assignment and kept if shared
                prefix = self.__dict__.get("_name") or self.__dict__.get("name")
                for key, obj in _expand_structure(name, value):
                    if isinstance(obj, Module):
                        _set_module_name(self, prefix, key, obj)
        super().__setattr__(name, value)
        # a rebound Tensor / sub-module / number attribute (also ``training``) changes what a compiled step
        # reads or baked in: prepared compiled calls check this one counter instead of re-walking every module
        _registry.bump_epoch()

    def __delattr__(self, name: str):
        modules = self.__dict__.get("_modules")
        if modules is not None and name in modules:
            modules.remove(name)
        super().__delattr__(name)
        _registry.bump_epoch()  # (see __setattr__)

    def __setstate__(self, state):
        # Unpickling (a whole module saved by megxla or by MegEngine, copy.deepcopy). Files hold the hook tables
        # as plain OrderedDicts (MegEngine's type: megxla.save writes them so); a HookHandler needs a _HookDict.
        # Files of MegEngine versions without `_short_name` hold the short name in `_name` (MegEngine's own
        # __setstate__ moves it the same way); megxla names scopes by `_short_name`.
        state = dict(state)
        for key in ("_forward_pre_hooks", "_forward_hooks"):
            hooks = state.get(key)
            if not isinstance(hooks, _HookDict):
                state[key] = _HookDict(hooks or ())
        if "_short_name" not in state:
            state["_short_name"] = state.get("_name")
            state["_name"] = None
        state.setdefault("_name", None)
        self.__dict__.update(state)

    def _module_info_string(self) -> str:
        """One-line summary of the module's configuration used by ``__repr__`` (empty by default)."""
        return ""

    def __repr__(self):
        extra = self._module_info_string()
        extra_lines = extra.split("\n") if extra else []
        child_lines = []
        for name in self._modules:
            value = self.__dict__.get(name)
            if _is_module(value):
                child_lines.append(f"({name}): " + _add_indent(repr(value), 2))
            else:
                for k, v in _expand_structure(name, value):
                    if _is_module(v):
                        child_lines.append(f"({k}): " + _add_indent(repr(v), 2))
        lines = extra_lines + child_lines
        main = type(self).__name__ + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


# A tracer finds a module's state (parameters and buffers) through core's registry, without importing module.
from ..core import _registry as _registry  # noqa: E402

_registry.register_state_walker(Module, lambda m: list(m.named_tensors()))
