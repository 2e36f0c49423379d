"""``Optimizer``: the base class of megxla's optimizers (``megengine.optimizer.Optimizer``).

Design:
    * ``param_groups`` is a list of plain mutable dicts; ``_updates(param_group)`` re-reads the
      hyper-parameters from its group at every call, so ``group["lr"] = x`` takes effect at the next step.
    * Hyper-parameters enter the math as 0-d Tensors made by :func:`hyper_tensor`, never as Python floats
      folded into op parameters: a jit tracer sees them as values (graph inputs), so changing the learning
      rate does not recompile. For the same reason a traced update does not branch on hyper-parameter
      *values* (see :func:`uses`: ``weight_decay == 0`` still traces ``grad + param * 0``) -- the only
      exception is SGD's ``momentum == 0``, which decides whether the ``momentum_buffer`` slot exists, as in
      MegEngine.
    * Parameters and state slots are updated with ``Tensor._reset`` (see :func:`assign`), so the same Python
      objects hold the new values and a tracer records the writes.
    * Bad input (negative lr, a grad whose shape is not the parameter's...) raises before any parameter or
      slot of any group changes -- in a compiled step too: the getters a tracer re-reads at every call
      validate the value on the host before the executable runs.
    * A group's whole update is ONE op (:mod:`._group_update`): subclasses give a pure per-parameter
      ``_rule`` on arrays and the tensors it reads (``_rule_inputs``); the base class applies it.
    * ``param_groups`` entries are :class:`ParamGroup` dicts: assigning a hyper-parameter notifies the
      optimizer (``_hyper_changed``), so a change that alters the state layout (SGD momentum 0 -> 0.9 creates
      the ``momentum_buffer`` slots) happens at once and a compiled step sees a new state structure.
"""
from __future__ import annotations

import copy
import functools
import math
import numbers
import warnings
from abc import ABCMeta, abstractmethod
from typing import Dict, Iterable, Union

import numpy as np

from ..core import _interrupt, _lazy, _registry, _spmd
from ..core._dispatch import OpError, current_interpreter
from ..core._tensor import Parameter, Tensor
from ..core.dtypes import is_float
from ._group_update import group_update

__all__ = ["Optimizer", "ParamGroup", "hyper_tensor", "host_scalar", "uses", "assign", "required"]


class _RequiredParameter:
    """The default of a hyper-parameter every group must give (``def __init__(self, params, lr=required)`` in a
    user's Optimizer subclass, as MegEngine's ``megengine.optimizer.optimizer.required``)."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


# Eager-mode cache of hyper-parameter tensors, keyed by (group, name, index, value, dtype).
_HYPER_CACHE: dict = {}


def hyper_tensor(param_group: dict, key: str, index: int = None, dtype="float32", owner: str = "optimizer") -> Tensor:
    """``param_group[key]`` (or ``param_group[key][index]``) as a 0-d Tensor, for use in ``_updates``.

    Under a tracing interpreter that offers ``host_input(tensor, getter)`` (megxla's jit recorder) the tensor
    is new and the tracer is told where its value comes from, so a compiled step re-reads the current value
    from the group at every call instead of baking it in as a constant. The getter validates the value
    (``lr >= 0`` and finite...), so a bad value raises on the host before the executable runs.

    Args:
        param_group: the parameter group dict.
        key: hyper-parameter name, e.g. ``"lr"``.
        index: for tuple-valued hyper-parameters such as ``"betas"``, which element.
        dtype: dtype of the tensor.
        owner: name shown in validation errors (the optimizer class).

    Returns:
        a 0-d Tensor holding the current value.

    Example:
        >>> hyper_tensor({"lr": 0.1}, "lr").numpy()
        array(0.1, dtype=float32)
    """
    raw = dict.__getitem__(param_group, key)  # (not a body's read: the value is a graph input, see ParamGroup)
    item = raw if index is None else raw[index]
    if isinstance(item, Tensor):  # (MegEngine allows Tensor hyper-parameters): state of the optimizer, used as is
        _check_hyper(owner, key, raw)
        return item if item.dtype == np.dtype(dtype) else item.astype(dtype)

    def getter():
        value = dict.__getitem__(param_group, key)
        _check_hyper_once(owner, key, value)  # (each step, eagerly: a value found valid before is not checked again)
        return value if index is None else value[index]
    # a compiled step's prepared call reads param_group[key] itself and calls the getter (validation, a new device
    # value) only when the Python value changed (jit/_fastpath.py)
    getter.source = (param_group, key)
    return host_scalar(getter, dtype, (id(param_group), key, index))


# Eager-mode cache of host scalars as tensors, keyed by (where, value, dtype).
_HYPER_CACHE: dict = {}


def host_scalar(getter, dtype="float32", where=None) -> Tensor:
    """``getter()`` (a Python number, or a 0-d Tensor) as a 0-d Tensor that a compiled step re-reads.

    Eagerly the tensor of an unchanged value is reused; under a tracer with ``host_input`` the getter is
    registered, so compiled calls call it (and any validation in it) on the host before the executable.

    Args:
        getter: a function of no arguments returning the current value.
        dtype: dtype of the tensor.
        where: hashable identity of the value's home for the eager cache (None: no caching).

    Returns:
        a 0-d Tensor.

    Example:
        >>> host_scalar(lambda: 3.0).numpy()
        array(3., dtype=float32)
    """
    value = getter()
    interp = current_interpreter()
    if interp is not None or where is None or not isinstance(value, (int, float)):  # a Tensor may change in place
        t = Tensor(value, dtype=dtype)
        if interp is not None and hasattr(interp, "host_input"):
            interp.host_input(t, getter)
        return t
    # NOTE: eagerly, making a 0-d tensor costs ~95 us on CPU (a host->device copy); reusing the tensor of an
    # unchanged value took a 10-parameter SGD step with weight decay from 1.45 to 1.01 ms. The key holds the
    # value itself (and its type: 1 and 1.0 and True hash alike): a hit is always right, whatever group later
    # reuses a dead group's id.
    cache_key = (where, value, type(value), dtype)
    t = _HYPER_CACHE.get(cache_key)
    if t is None:
        if len(_HYPER_CACHE) > 4096:
            _HYPER_CACHE.clear()
        t = _HYPER_CACHE[cache_key] = Tensor(value, dtype=dtype)
    return t


def uses(param_group: dict, key: str) -> bool:
    """Whether an update must compute the term scaled by ``param_group[key]`` (e.g. ``param * weight_decay``).

    Only when the value is non-zero (MegEngine's ``if weight_decay != 0.0``): eagerly it saves two ops (~36 us
    per parameter on CPU), in a compiled step a memory pass over every gradient. Under a tracer that offers
    ``host_check`` (megxla's jit) the zero-ness is a fact the recording depends on: compiled calls check it on
    the host and record again when it changed (the value itself stays a graph input: a schedule that changes a
    non-zero weight decay does not record again).

    Args:
        param_group: the parameter group dict.
        key: hyper-parameter name, e.g. ``"weight_decay"``.

    Returns:
        True if the term must be computed.

    Example:
        >>> uses({"weight_decay": 0.0}, "weight_decay")
        False
    """
    value = dict.__getitem__(param_group, key)
    interp = current_interpreter()
    if interp is None:
        return value != 0
    if hasattr(interp, "host_check") and (type(value) in (int, float, bool) or isinstance(value, np.floating)):
        return host_fact(lambda: bool(dict.__getitem__(param_group, key) != 0))
    return True  # a Tensor value, or a tracer that cannot check: the term is computed (x * 0 changes nothing)


def host_fact(check):
    """``check()``, a Python fact an update's ops depend on (a flag, a value being zero); under a tracer that
    offers ``host_check`` (megxla's jit) the recording depends on it: compiled calls re-evaluate it on the host
    and record again when it changed.

    Args:
        check: a function of no arguments returning a hashable value.

    Returns:
        ``check()``.

    Example:
        >>> host_fact(lambda: True)
        True
    """
    value = check()
    register = getattr(current_interpreter(), "host_check", None)
    if register is not None:
        register(check, value)
    return value


def assign(dst: Tensor, value: Tensor) -> None:
    """Rebind ``dst`` in place to ``value``, keeping ``dst``'s dtype (e.g. a float16 parameter stays float16
    although float32 hyper-parameters promote the update to float32).

    Args:
        dst: the parameter or state slot to update.
        value: its new value, same shape.

    Example:
        >>> p = Parameter([1.0]); assign(p, p - 0.5); p.numpy()
        array([0.5], dtype=float32)
    """
    if value.dtype != dst.dtype:
        value = value.astype(dst.dtype)
    gate = _registry.grad_gate(dst)
    dst._reset(value)
    if gate is not None:  # a gradient clipped in place keeps GradScaler's skip flag (see _step_gate)
        _registry.set_grad_gate(dst, gate)


def _number(x):
    # (a 0-d NumPy array too -- ``np.cos`` / ``np.interp`` of a schedule's arrays -- which MegEngine takes as a Tensor)
    return isinstance(x, numbers.Real) and not isinstance(x, bool) or (isinstance(x, Tensor) and x.ndim == 0) \
        or isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "fiu"


class HyperParameterError(ValueError, AssertionError):
    """An optimizer's hyper-parameter out of its range, or a parameter given twice. A ValueError, and an
    AssertionError: MegEngine's SGD, Adagrad and Adadelta check their hyper-parameters with ``assert``, and the
    optimizer its groups' disjointness (Adam, AdamW and LAMB raise ValueError)."""


class HyperParameterTypeError(HyperParameterError, TypeError):
    """A hyper-parameter that is no number (``lr="a"``): MegEngine's ``assert lr >= 0.0`` raises TypeError."""


class ParamGroupTypeError(TypeError, AssertionError):
    """``add_param_group`` of something that is no dict: a TypeError, and the AssertionError MegEngine's
    ``assert isinstance(param_group, dict)`` raises."""


class MissingParamsError(ValueError, KeyError):
    """A parameter group without a ``"params"`` entry: a ValueError, and the KeyError MegEngine's lookup raises."""

    def __str__(self):  # (KeyError's str() is the repr of its message)
        return str(self.args[0]) if self.args else ""


class GradDtypeError(OpError, TypeError):
    """A parameter's ``.grad`` of an integer or bool dtype at ``step()``: a TypeError, and the RuntimeError
    MegEngine's update kernel raises (its elemwise asserts the dtypes)."""


def _check_hyper(owner, name, value):
    """Raise :class:`HyperParameterError` if a known hyper-parameter has an invalid value (unknown names are not
    checked), :class:`HyperParameterTypeError` if it is no number."""
    if _holds_tensor(value) and current_interpreter() is not None:
        # A Tensor hyper-parameter's value is not on the host while a step is traced (reading it would cost a
        # host sync per call); its shape is checked, its value where the optimizer runs eagerly.
        items = value if isinstance(value, (tuple, list)) else (value,)
        if not all(_number(v) for v in items):
            raise ValueError(f"{owner}: invalid {name} {value!r}: must be a number or a 0-d Tensor")
        return
    if name in ("lr", "weight_decay", "momentum", "eps", "lr_decay"):
        if not _number(value) or not math.isfinite(float(value)) or not float(value) >= 0.0:
            error = HyperParameterError if _number(value) else HyperParameterTypeError
            raise error(f"{owner}: invalid {name} {value!r}: must be a finite number >= 0")
    elif name == "betas":
        # (a NumPy pair too: MegEngine unpacks any pair, ``betas=np.array([0.9, 0.999])`` trains there)
        pair = isinstance(value, (tuple, list)) or isinstance(value, np.ndarray) and value.ndim == 1
        ok = pair and len(value) == 2 and all(_number(b) for b in value)
        if not ok or not all(0.0 <= float(b) < 1.0 for b in value):
            error = HyperParameterError if ok else HyperParameterTypeError
            raise error(f"{owner}: invalid betas {value!r}: must be two numbers in [0, 1)")
    elif name == "rho":
        if not _number(value) or not 0.0 <= float(value) <= 1.0:
            error = HyperParameterError if _number(value) else HyperParameterTypeError
            raise error(f"{owner}: invalid rho {value!r}: must be a number in [0, 1]")


_NOT_A_FACT = object()


def _fact(value):
    """A comparable snapshot of a plain Python value (a number, a flag, a tuple or list of them), else
    ``_NOT_A_FACT`` (a Tensor hyper-parameter is state, not a fact)."""
    if value is None or isinstance(value, (bool, numbers.Number, str)):
        return value
    if isinstance(value, (tuple, list)):
        items = tuple(_fact(v) for v in value)
        return _NOT_A_FACT if any(v is _NOT_A_FACT for v in items) else (type(value), items)
    return _NOT_A_FACT


# (name, type, value) of plain hyper-parameter values that passed _check_hyper: the check runs once per value, not
# once per step (its ~2.5% of a tiny MLP step's host time). Only valid values are kept, so a NaN is checked each time.
_HYPERS_VALID: set = set()


def _check_hyper_once(owner, name, value):
    """:func:`_check_hyper`, skipped for a plain number (or tuple of them) found valid before."""
    t = type(value)
    if t is float or t is int or t is tuple and all(type(v) in (float, int) for v in value):
        key = (name, t, value)  # (a value found valid before is valid: checked once)
        if key in _HYPERS_VALID:
            return
        _check_hyper(owner, name, value)
        if len(_HYPERS_VALID) >= 4096:  # (a schedule setting a new lr each step)
            _HYPERS_VALID.clear()
        _HYPERS_VALID.add(key)
    else:
        _check_hyper(owner, name, value)


def _holds_tensor(value):
    return isinstance(value, Tensor) or isinstance(value, (tuple, list)) and any(isinstance(v, Tensor) for v in value)


def _group_fact(group, key):
    return _fact(dict.get(group, key, _NOT_A_FACT))


class ParamGroup(dict):
    """A parameter group: a plain dict that tells its optimizer when a hyper-parameter is assigned.

    ``group["momentum"] = 0.9`` on an SGD group created with momentum 0 creates the ``momentum_buffer``
    slots right away (MegEngine's state layout), so a compiled step sees a new state structure and records
    again instead of running an executable that never read momentum.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> w = mge.Parameter([1.0]); opt = optim.SGD([w], lr=0.1)
        >>> opt.param_groups[0]["momentum"] = 0.9; list(opt._state[w])
        ['momentum_buffer']
    """

    __slots__ = ("_owner",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._owner = None

    def __getitem__(self, key):
        value = dict.__getitem__(self, key)
        if key != "params":
            # A compiled step's body that reads a hyper-parameter itself (logs ``group["lr"]``, scales a manual
            # update by it) depends on its Python value: the recording is valid while the value is unchanged,
            # and a step recorded with another value runs after a scheduler changed it (never the stale one).
            # (The optimizers' own reads go through ``dict.__getitem__``: their values are graph inputs.)
            register = getattr(current_interpreter(), "host_check", None)
            if register is not None:
                fact = _fact(value)
                if fact is not _NOT_A_FACT:
                    register(functools.partial(_group_fact, self, key), fact)
        return value

    def __setitem__(self, key, value):
        old = dict.get(self, key)
        note = getattr(current_interpreter(), "set_inside", None)
        if note is not None:  # (a recording: a compiled step that skips the body warns that this is skipped too)
            note(f"param_groups[...][{key!r}]")
        super().__setitem__(key, value)
        if _holds_tensor(value) or _holds_tensor(old):
            _registry.bump_epoch()  # a Tensor hyper-parameter is state a compiled step reads: new structure
        if self._owner is not None:
            self._owner._hyper_changed(self, key)

    def __reduce__(self):
        # Pickled (a whole optimizer saved, copy.deepcopy) as its items only: unpickling fills a dict before it
        # sets attributes, so a pickled owner would be notified before it exists. The optimizer's
        # __setstate__ links its groups again (megxla.save writes them as the plain dicts MegEngine's are).
        return (ParamGroup, (dict(self),))

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]


# ids of the optimizers inside ``step()``, which validated all their groups before updating any (not an attribute:
# compiled steps key on an optimizer's attributes and re-apply the writes a body makes to them)
_VALIDATED: set = set()


class Optimizer(metaclass=ABCMeta):
    """Base class for all optimizers.

    Subclasses implement ``_create_state(param_group)`` (make the state slots with :meth:`_add_state`) and
    ``_updates(param_group)`` (one update of the group's parameters that have a gradient).

    Args:
        params: an iterable of Parameters, or of dicts defining parameter groups (each with a ``"params"``
            entry and optional per-group hyper-parameters), or a single Parameter or dict.
        defaults: default hyper-parameters, used for keys a group does not give.

    Example:
        >>> import megxla as mge, megxla.optimizer as optim
        >>> w, b = mge.Parameter([1.0]), mge.Parameter([0.0])
        >>> opt = optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1)
        >>> [g["lr"] for g in opt.param_groups]
        [0.1, 0.5]
    """

    def __init__(self, params: Union[Iterable[Parameter], dict], defaults: dict):
        self._state: dict = {}
        self._defaults = defaults
        # MegEngine's built-in optimizers set this flag (their updates make Tensors of hyper-parameters
        # themselves) and its step() reads it; megxla never converts, and keeps the flag so that a whole
        # optimizer pickled by megxla.save steps in MegEngine
        self._disable_type_convert = True
        if type(self)._updates is Optimizer._updates and type(self)._rule is None:
            # (MegEngine's _updates is abstract: a subclass without it cannot be created; megxla's own
            # optimizers inherit the base _updates and set _rule)
            raise TypeError(f"Can't instantiate abstract class {type(self).__name__} with abstract method _updates")
        for name, value in defaults.items():
            if value is not required:
                _check_hyper(type(self).__name__, name, value)
        if isinstance(params, (Parameter, dict)):
            params = [params]
        elif not isinstance(params, Iterable):
            raise TypeError("params argument given to the optimizer should be Parameter or dict, or Iterable of them")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if any(isinstance(g, dict) != isinstance(groups[0], dict) for g in groups):
            raise TypeError("params given to the optimizer must be all Parameters or all dicts")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.param_groups: list = []
        for group in groups:
            self.add_param_group(group)

    def __setattr__(self, name, value):
        # A new ``param_groups`` list is new structure: a compiled step's prepared call must not keep reading
        # the hyper-parameters of the groups it replaced (core._registry's structure epoch).
        object.__setattr__(self, name, value)
        if name == "param_groups" or type(value) in (bool, int, float, str, type(None)):
            # (a Python number attribute keys a compiled step as a module's does: jit/_state.collect)
            _registry.bump_epoch()

    def __getstate__(self):
        # A slot Tensor several parameters share (Adam's group-wide step count) is pickled once per parameter,
        # as MegEngine holds it: MegEngine's step() (a whole optimizer unpickled there) advances each
        # parameter's own count, and megxla steps separate counts as well.
        state = dict(self.__dict__)
        seen = set()
        slots = {}
        for param, slot in self._state.items():
            slots[param] = {}
            for name, value in slot.items():
                if id(value) in seen:
                    value = Tensor(value.numpy(), dtype=value.dtype, device=value.device)
                seen.add(id(value))
                slots[param][name] = value
        state["_state"] = slots
        return state

    def __setstate__(self, state):
        # Unpickling a whole optimizer (saved by megxla or by MegEngine, whose groups are plain dicts) or
        # copy.deepcopy: the groups become ParamGroups that notify this optimizer again.
        self.__dict__.update(state)
        groups = []
        for group in state.get("param_groups", ()):
            group = group if isinstance(group, ParamGroup) else ParamGroup(group)
            group._owner = self
            groups.append(group)
        self.param_groups = groups

    # ---- groups and state ----------------------------------------------------------------------------------
    def add_param_group(self, param_group: dict):
        """Add a parameter group, filling in missing hyper-parameters from the defaults, and create its state.

        Args:
            param_group: a dict with a ``"params"`` entry (a Parameter or an iterable of them) and optional
                hyper-parameters.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> opt = optim.SGD([mge.Parameter([1.0])], lr=0.1)
            >>> opt.add_param_group({"params": [mge.Parameter([2.0])], "lr": 0.01})
            >>> [g["lr"] for g in opt.param_groups]
            [0.1, 0.01]
        """
        if not isinstance(param_group, dict):
            raise ParamGroupTypeError(f"param group must be a dict, got {type(param_group).__name__}")
        if "params" not in param_group:
            raise MissingParamsError("param group must have a 'params' entry")
        params = param_group["params"]
        if isinstance(params, set):
            raise TypeError("optimized parameters must be an ordered collection (the order of a set changes "
                            "between runs); use a list")
        params = [params] if isinstance(params, Parameter) else list(params)
        for p in params:
            if not isinstance(p, Parameter):
                raise TypeError(f"optimizer can only optimize Parameters, but one of the params is {type(p)}")
        # (read past ParamGroup.__getitem__'s bookkeeping: adding N groups one by one scanned ~N^2 / 2 entries
        # through it, 0.7 ms a group at N = 5120)
        seen = {id(p) for g in self.param_groups for p in dict.__getitem__(g, "params")}
        if len({id(p) for p in params}) != len(params) or seen.intersection(map(id, params)):
            raise HyperParameterError("some parameters appear more than once in the optimizer's parameter groups")
        for name, value in param_group.items():
            if name != "params":
                _check_hyper(type(self).__name__, name, value)
        for name, default in self._defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
        param_group = ParamGroup(param_group)
        param_group["params"] = params
        for name, default in self._defaults.items():
            param_group.setdefault(name, default)
        self.param_groups.append(param_group)
        self._create_state(param_group)
        param_group._owner = self
        _registry.bump_epoch()

    def _add_state(self, param, state_name, initializer=None, dtype=None):
        """Create the slot ``self._state[param][state_name]``: float32 zeros shaped like ``param``, or
        ``initializer`` (of ``dtype``; without one, the dtype a Tensor of it has, as MegEngine's
        ``Tensor(initializer)``: ``initializer=0`` gives an int32 slot)."""
        state = self._state.setdefault(param, {})
        if state_name in state:
            raise KeyError(f"state slot {state_name!r} already exists for this parameter")
        if initializer is None:
            value = Tensor(np.zeros(param.shape, dtype or "float32"), device=param.device)
        else:
            value = Tensor(initializer, dtype=dtype, device=param.device)
        state[state_name] = value
        _registry.bump_epoch()  # the state structure changed

    def _add_shared_state(self, params, state_name, initializer=0.0, dtype="float32"):
        """Create the 0-d slot ``state_name`` of ``params`` as ONE Tensor that they all hold (Adam's step
        counts: equal while the parameters are updated together). A compiled step then reads and writes one
        buffer instead of one per parameter (every buffer costs host time per call on a GPU) and XLA computes
        the bias corrections once. The layout MegEngine saves (a slot per parameter) is unchanged; a parameter
        whose count must diverge gets its own Tensor first (:meth:`_unshare`)."""
        if not params:
            return
        shared = Tensor(np.asarray(initializer, dtype), dtype=dtype, device=params[0].device)
        for param in params:
            state = self._state.setdefault(param, {})
            if state_name in state:
                raise KeyError(f"state slot {state_name!r} already exists for this parameter")
            state[state_name] = shared
        _registry.bump_epoch()

    def _unshare(self, param_group, updated, state_name):
        """Before an update of only ``updated`` of the group's parameters: parameters outside it that share
        their ``state_name`` slot Tensor with one inside it get their own copy (their count must not move)."""
        inside = {id(p) for p in updated}
        holders = {}
        for p in param_group["params"]:
            t = self._state.get(p, {}).get(state_name)
            if t is not None:
                holders.setdefault(id(t), []).append(p)
        for ps in holders.values():
            outside = [p for p in ps if id(p) not in inside]
            if outside and len(outside) < len(ps):
                src = self._state[outside[0]][state_name]
                d = src._data
                if current_interpreter() is None and type(d) is not _lazy.Lazy:
                    # (a count already computed -- an unused parameter's, at the first update --: copied as an
                    # array, no op. Under auto-jit an op here is one only the first step's cluster has, and that
                    # cluster, compiled at its first sight, never recurred: a Transformer with an unused Linear
                    # compiled its 1,166-op step for nothing, 12-27 s on 2 cores)
                    own = Tensor(d.copy(), device=src.device)  # (on the count's logical device, as the op's copy)
                else:
                    own = Tensor(src)  # a real copy (a trace follows it)
                for p in outside:
                    self._state[p][state_name] = own
                _registry.bump_epoch()

    @abstractmethod
    def _create_state(self, param_group):
        """Create the state slots of every parameter of ``param_group``."""

    def _hyper_changed(self, param_group, key):
        """Called after ``param_group[key]`` was assigned; subclasses whose state layout depends on a value
        override it (SGD's momentum)."""

    # Slots a parameter may have without having them now, shaped like it (SGD's momentum buffer, created when
    # momentum is turned on): what load_state_dict accepts for a parameter with no slot
    _OPTIONAL_SLOTS = ()

    # The per-parameter update, a pure function of JAX arrays: ``_rule(flags, hypers, param, grad, slots)``
    # returns ``(new_param, new_slots)``; see ._group_update. Subclasses set it (a module-level function).
    _rule = None

    def _rule_inputs(self, param_group, params):
        """``(flags, hyper tensors, per-parameter slot lists)`` of the rule for ``params`` of the group."""
        raise TypeError(f"{type(self).__name__}: an optimizer must override _updates(param_group), or set _rule "
                        f"and override _rule_inputs(param_group, params)")

    def _updates(self, param_group):
        """Update the parameters of ``param_group`` that have a gradient, and their slots: ONE op for the
        whole group (the subclass's ``_rule`` over flat lists of arrays)."""
        params = self._params_with_grad(param_group)
        if not params:
            return
        flags, hypers, slot_lists = self._rule_inputs(param_group, params)
        group_update(type(self)._rule, flags, hypers, params, slot_lists, _step_gate(params))

    def _get_params(self):
        return [p for g in self.param_groups for p in g["params"]]

    # ---- stepping ------------------------------------------------------------------------------------------
    def _check_group(self, param_group):
        """Validate hyper-parameters and gradients of a group; raises before anything is modified."""
        owner = type(self).__name__
        for name, value in param_group.items():
            if name != "params":
                _check_hyper_once(owner, name, value)
        if isinstance(dict.__getitem__(param_group, "params"), set):  # (assigned after the group was added)
            raise TypeError("optimized parameters need to be organized in ordered collections, but the ordering of "
                            "parameters in sets will change between runs. Please use a list instead.")
        for i, p in enumerate(param_group["params"]):
            g = p.grad
            if g is None:
                continue
            if not isinstance(g, Tensor):
                raise TypeError(f"{owner}: grad of parameter {i} must be a Tensor, got {type(g).__name__}")
            if g.shape != p.shape:
                # (OpError: a ValueError, and the RuntimeError MegEngine's update kernel raises)
                raise OpError(f"{owner}: grad of parameter {i} has shape {g.shape}, parameter has {p.shape}")
            if not is_float(g.dtype):
                raise GradDtypeError(f"{owner}: grad of parameter {i} has dtype {g.dtype}, expected a float dtype")

    def _params_with_grad(self, param_group):
        """The group's parameters whose ``.grad`` is set, after validating the group (start of ``_updates``; within
        ``step()``, which validated every group before updating any, it is not validated twice)."""
        if id(self) not in _VALIDATED:
            self._check_group(param_group)
        return [p for p in param_group["params"] if p.grad is not None]

    def step(self):
        """Perform one optimization step: update every parameter that has a gradient.

        Returns:
            the optimizer itself, so that ``opt.step().clear_grad()`` chains.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> w = mge.Parameter([1.0]); opt = optim.SGD([w], lr=0.1)
            >>> w.grad = mge.Tensor([2.0]); opt.step().clear_grad(); w.numpy()
            array([0.8], dtype=float32)
        """
        # NOTE: every group is validated before any is updated (``_updates`` validates its own group again,
        # for callers that wrap it alone): an error in group 2 must not leave group 1 stepped.
        for group in self.param_groups:
            self._check_group(group)
        if _spmd._last and current_interpreter() is None:  # (a multi-process run, eager or auto-jit)
            # (a peer that failed in it: raise before updating anything)
            _spmd.settle("the collective before opt.step()",
                         [p.grad._data for group in self.param_groups for p in group["params"] if p.grad is not None])
        _VALIDATED.add(id(self))
        try:
            for group in self.param_groups:
                self._updates(group)
        finally:
            _VALIDATED.discard(id(self))
        end = _lazy.STEP_END[0]
        if end is not None:  # auto-jit: the natural end of a step cuts the pending cluster
            end()
        return self

    def clear_grad(self):
        """Set the ``grad`` attribute of every parameter to None.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> w = mge.Parameter([1.0]); w.grad = mge.Tensor([1.0])
            >>> optim.SGD([w], lr=0.1).clear_grad(); w.grad is None
            True
        """
        # (every gradient or none: a Ctrl-C between two parameters left some layers' gradients to be added onto)
        held = False
        try:
            held = _interrupt.enter()
            cleared = _lazy.GRADS_CLEARED[0]
            if cleared is not None:  # (auto-jit: a cluster given up, or failing before this, puts back the rest)
                cleared([(p, p.grad) for group in self.param_groups for p in group["params"] if p.grad is not None])
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad = None
        finally:
            if held:
                _interrupt.leave()

    def zero_grad(self):
        """Deprecated (as in MegEngine): fill existing gradients with zeros in place; use :meth:`clear_grad`.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> w = mge.Parameter([1.0]); w.grad = mge.Tensor([3.0])
            >>> optim.SGD([w], lr=0.1).zero_grad(); w.grad.numpy()
            array([0.], dtype=float32)
        """
        warnings.warn("Call to deprecated method zero_grad. (use clear_grad instead) -- Deprecated since version 1.0.",
                      DeprecationWarning, stacklevel=2)  # (MegEngine's message)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.reset_zero()

    def backward(self, loss):
        """Removed in MegEngine 1.0 (0.x computed gradients here); raises, as MegEngine 1.13's does.

        Record the step with :class:`~.autodiff.GradManager` and call its ``backward`` instead.

        Raises:
            NotImplementedError: always (MegEngine's message, ``use autodiff.GradManager instead``).

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> from megxla.autodiff import GradManager
            >>> w = mge.Parameter([1.0]); gm = GradManager().attach([w]); opt = optim.SGD([w], lr=0.1)
            >>> with gm:
            ...     gm.backward((w * 3).sum())  # not opt.backward(loss)
            >>> _ = opt.step(); w.numpy()
            array([0.7], dtype=float32)
        """
        raise NotImplementedError(
            "use autodiff.GradManager instead: Optimizer.backward(loss) is MegEngine 0.x's; record the forward "
            "in `with gm:` (gm = GradManager().attach(model.parameters())) and call gm.backward(loss)")

    def bcast_param(self):
        """Removed in MegEngine 1.0; raises, as MegEngine 1.13's does.

        Raises:
            NotImplementedError: always; use :func:`megxla.distributed.bcast_list_` on the parameters.
        """
        raise NotImplementedError("use distributed.bcast_list_ instead")

    # ---- (de)serialization ---------------------------------------------------------------------------------
    def state_dict(self, keep_var=False) -> Dict:
        """Export the optimizer state: hyper-parameters per group and state slots, keyed by parameter index.

        Args:
            keep_var: keep slots as Tensors instead of converting them to NumPy arrays.

        Returns:
            ``{"param_groups": [{..., "params": [indices]}], "state": {index: {slot: value}}}``, which
            :meth:`load_state_dict` accepts.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> opt = optim.SGD([mge.Parameter([1.0])], lr=0.1, momentum=0.9)
            >>> sd = opt.state_dict(); sd["param_groups"][0]["lr"], list(sd["state"][0])
            (0.1, ['momentum_buffer'])
        """
        index = {}
        for p in self._get_params():
            index.setdefault(id(p), len(index))
        state = {}
        for p, slots in self._state.items():
            state[index[id(p)]] = {k: (v if keep_var or not isinstance(v, Tensor) else v.numpy())
                                   for k, v in slots.items()}
        groups = []
        for group in self.param_groups:
            saved = {k: copy.copy(v) for k, v in group.items() if k != "params"}
            saved["params"] = [index[id(p)] for p in group["params"]]
            groups.append(saved)
        return {"param_groups": groups, "state": state}

    def load_state_dict(self, state: dict):
        """Load hyper-parameters and state slots saved by :meth:`state_dict`.

        Slots that exist already are rebound in place (the same Tensor objects keep serving), new ones are
        created. Everything is validated before anything changes.

        Args:
            state: an object returned by :meth:`state_dict` of an optimizer with the same parameter layout.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> w = mge.Parameter([1.0]); opt = optim.SGD([w], lr=0.1)
            >>> opt2 = optim.SGD([w], lr=0.5); opt2.load_state_dict(opt.state_dict()); opt2.param_groups[0]["lr"]
            0.1
        """
        saved_groups, saved_state = state["param_groups"], state["state"]
        if len(self.param_groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        owner = type(self).__name__
        plan = []  # (param, {slot: value} or None)
        for group, saved in zip(self.param_groups, saved_groups):
            if len(group["params"]) != len(saved["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                                 "optimizer's group")
            if set(group) != set(saved):
                raise ValueError(f"loaded state dict contains a parameter group that doesn't match the keys of "
                                 f"optimizer's group: {sorted(saved)}, the optimizer's {sorted(group)}")
            for k, v in saved.items():
                if k != "params":
                    _check_hyper(owner, k, v)
            for p, i in zip(group["params"], saved["params"]):
                slots = saved_state.get(i)
                if slots is None and not set(self._state.get(p, ())) <= set(self._OPTIONAL_SLOTS):
                    # (MegEngine raises KeyError(i); megxla took it and dropped the parameter's slots, and every
                    # later step of Adam / Adagrad / Adadelta / LAMB raised KeyError: training could not go on)
                    raise KeyError(f"loaded state dict has no state for parameter {i}, {owner} keeps "
                                   f"{sorted(self._state[p])} for it")
                if slots is not None:
                    current = self._state.get(p, {})
                    if current and set(slots) != set(current):
                        # (accepted, a slot missing made every later step raise KeyError: training could not go on)
                        missing, extra = sorted(set(current) - set(slots)), sorted(set(slots) - set(current))
                        raise ValueError(f"loaded state of parameter {i} has slots {sorted(slots)}, {owner} keeps "
                                         f"{sorted(current)}" + (f" (missing {missing})" if missing else "")
                                         + (f" (unknown {extra})" if extra else ""))
                    if not current and not set(slots) <= set(self._OPTIONAL_SLOTS):
                        # (a parameter with no slot yet -- SGD without momentum -- took any: the step after
                        # momentum was turned on failed deep in the update, probe Y)
                        extra = sorted(set(slots) - set(self._OPTIONAL_SLOTS))
                        raise ValueError(f"loaded state of parameter {i} has slots {sorted(slots)}, {owner} keeps "
                                         f"{sorted(self._OPTIONAL_SLOTS) or 'none'} for it (unknown {extra})")
                    converted = {}
                    for k, v in slots.items():
                        want = current[k].shape if k in current else tuple(p.shape)
                        if tuple(np.shape(v)) != want:
                            raise ValueError(f"loaded slot {k!r} of parameter {i} has shape {tuple(np.shape(v))}, "
                                             f"expected {want}")
                        # converted now, before anything is assigned: a bad value leaves the optimizer unchanged
                        a = v.numpy() if isinstance(v, Tensor) else np.asarray(v)
                        if a.dtype == object or not (a.dtype.kind in "biufc" or is_float(a.dtype)):
                            raise TypeError(f"loaded slot {k!r} of parameter {i} is not numbers (dtype {a.dtype})")
                        converted[k] = (Tensor(a, dtype=current[k].dtype) if k in current
                                        else Tensor(a, device=p.device))
                    slots = converted
                plan.append((p, slots))
        known = {i for saved in saved_groups for i in saved["params"]}
        if not set(saved_state) <= known:
            raise ValueError(f"loaded state dict contains a state that doesn't match the size of optimizer's state: "
                             f"state for unknown parameter indices {sorted(set(saved_state) - known)}")

        for group, saved in zip(self.param_groups, saved_groups):
            for k, v in saved.items():
                if k != "params":
                    dict.__setitem__(group, k, copy.copy(v))  # slots come from the saved state below
        loaded = {}  # id(slot Tensor) -> the value loaded into it: a Tensor several parameters share (Adam's step)
        for p, slots in plan:
            if slots is None:
                self._state.pop(p, None)
                continue
            current = self._state.get(p, {})
            new = {}
            for k, v in slots.items():
                t = current.get(k)
                if t is None:
                    new[k] = v
                    continue
                first = loaded.get(id(t))
                if first is None:
                    loaded[id(t)] = v
                    new[k] = t._reset(v)
                elif np.array_equal(first.numpy(), v.numpy()):
                    new[k] = t  # shared, and the saved values agree: stays shared
                else:
                    new[k] = v  # shared here, different in the file: this parameter gets its own slot
            self._state[p] = new
        _registry.bump_epoch()


def _step_gate(params):
    """The skip flag of a compiled mixed-precision step: the 0-d bool Tensor that ``GradScaler`` registered
    for these gradients (True: a gradient was not finite, leave everything unchanged), or None."""
    gates = []
    for p in params:
        g = _registry.grad_gate(p.grad)
        if g is not None and all(g is not x for x in gates):
            gates.append(g)
    if not gates:
        return None
    gate = gates[0]
    for g in gates[1:]:
        gate = gate | g
    return gate


def _walk_optimizer(opt):
    """State of an optimizer for tracers: every parameter, then every slot, then the hyper-parameters held as
    Tensors (``SGD(params, lr=mge.Tensor(0.1))``, as MegEngine allows) (see core._registry)."""
    out = [(f"param{i}", p) for i, p in enumerate(opt._get_params())]
    for i, p in enumerate(opt._get_params()):
        for k, v in sorted(opt._state.get(p, {}).items()):
            if isinstance(v, Tensor):
                out.append((f"param{i}.{k}", v))
    for gi, group in enumerate(opt.param_groups):
        for k in sorted(group):
            v = dict.__getitem__(group, k)
            if k == "params" or not _holds_tensor(v):
                continue
            if isinstance(v, Tensor):
                out.append((f"group{gi}.{k}", v))
            else:
                out.extend((f"group{gi}.{k}{j}", x) for j, x in enumerate(v) if isinstance(x, Tensor))
    return out


_registry.register_state_walker(Optimizer, _walk_optimizer)
