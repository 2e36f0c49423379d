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
      slot of any group changes.
"""
from __future__ import annotations

import copy
import numbers
import warnings
from abc import ABCMeta, abstractmethod
from typing import Dict, Iterable, Union

import numpy as np

from ..core._dispatch import current_interpreter
from ..core._tensor import Parameter, Tensor

__all__ = ["Optimizer", "hyper_tensor", "uses", "assign"]


# Eager-mode cache of hyper-parameter tensors, keyed by (group, name, index, value, dtype).
_HYPER_CACHE: dict = {}


def hyper_tensor(param_group: dict, key: str, index: int = None, dtype="float32") -> Tensor:
    """``param_group[key]`` (or ``param_group[key][index]``) as a 0-d Tensor, for use in ``_updates``.

    Under a tracing interpreter that offers ``host_input(tensor, getter)`` (megxla's jit recorder) the tensor
    is new and the tracer is told where its value comes from, so a compiled step re-reads the current value
    from the group at every call instead of baking it in as a constant.

    Args:
        param_group: the parameter group dict.
        key: hyper-parameter name, e.g. ``"lr"``.
        index: for tuple-valued hyper-parameters such as ``"betas"``, which element.
        dtype: dtype of the tensor.

    Returns:
        a 0-d Tensor holding the current value.

    Example:
        >>> hyper_tensor({"lr": 0.1}, "lr").numpy()
        array(0.1, dtype=float32)
    """
    def getter():
        value = param_group[key]
        return value if index is None else value[index]

    value = getter()
    interp = current_interpreter()
    if interp is not None or not isinstance(value, (int, float)):  # a Tensor value may change in place
        t = Tensor(value, dtype=dtype)
        if interp is not None and hasattr(interp, "host_input"):
            interp.host_input(t, getter)
        return t
    # NOTE: eagerly, making a 0-d tensor costs ~95 us on CPU (a host->device copy); reusing the tensor of an
    # unchanged value took a 10-parameter SGD step with weight decay from 1.45 to 1.01 ms. The key holds the
    # value itself: a hit is always right, whatever group later reuses a dead group's id.
    cache_key = (id(param_group), key, index, value, dtype)
    t = _HYPER_CACHE.get(cache_key)
    if t is None:
        if len(_HYPER_CACHE) > 4096:
            _HYPER_CACHE.clear()
        t = _HYPER_CACHE[cache_key] = Tensor(value, dtype=dtype)
    return t


def uses(param_group: dict, key: str) -> bool:
    """Whether an update must compute the term scaled by ``param_group[key]`` (e.g. ``param * weight_decay``).

    Eagerly only when the value is non-zero (MegEngine's ``if weight_decay != 0.0`` shortcut: it saves two ops,
    ~36 us per parameter on CPU; a 10-parameter SGD step takes 0.65 ms without weight decay, 1.01 ms with);
    under a tracing interpreter always, so that the traced graph does not depend on the value and a later
    change of it needs no new trace. Adding ``x * 0`` changes no finite result.

    Args:
        param_group: the parameter group dict.
        key: hyper-parameter name, e.g. ``"weight_decay"``.

    Returns:
        True if the term must be computed.

    Example:
        >>> uses({"weight_decay": 0.0}, "weight_decay")
        False
    """
    return param_group[key] != 0 or current_interpreter() is not None


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
    dst._reset(value)


def _number(x):
    return isinstance(x, numbers.Real) and not isinstance(x, bool) or (isinstance(x, Tensor) and x.ndim == 0)


def _check_hyper(owner, name, value):
    """Raise ValueError if a known hyper-parameter has an invalid value (unknown names are not checked)."""
    if name in ("lr", "weight_decay", "momentum", "eps", "lr_decay"):
        if not _number(value) or not float(value) >= 0.0:
            raise ValueError(f"{owner}: invalid {name} {value!r}: must be a number >= 0")
    elif name == "betas":
        ok = isinstance(value, (tuple, list)) and len(value) == 2 and all(_number(b) for b in value)
        if not ok or not all(0.0 <= float(b) < 1.0 for b in value):
            raise ValueError(f"{owner}: invalid betas {value!r}: must be two numbers in [0, 1)")
    elif name == "rho":
        if not _number(value) or not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"{owner}: invalid rho {value!r}: must be a number in [0, 1]")


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
        for name, value in defaults.items():
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
            raise TypeError(f"param group must be a dict, got {type(param_group).__name__}")
        if "params" not in param_group:
            raise ValueError("param group must have a 'params' entry")
        params = param_group["params"]
        if isinstance(params, set):
            raise TypeError("optimized parameters must be an ordered collection (the order of a set changes "
                            "between runs); use a list")
        params = [params] if isinstance(params, Parameter) else list(params)
        for p in params:
            if not isinstance(p, Parameter):
                raise TypeError(f"optimizer can only optimize Parameters, but one of the params is {type(p)}")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if len({id(p) for p in params}) != len(params) or seen.intersection(map(id, params)):
            raise ValueError("some parameters appear more than once in the optimizer's parameter groups")
        for name, value in param_group.items():
            if name != "params":
                _check_hyper(type(self).__name__, name, value)
        param_group["params"] = params
        for name, default in self._defaults.items():
            param_group.setdefault(name, default)
        self.param_groups.append(param_group)
        self._create_state(param_group)

    def _add_state(self, param, state_name, initializer=None, dtype="float32"):
        """Create the slot ``self._state[param][state_name]``: zeros shaped like ``param``, or ``initializer``."""
        state = self._state.setdefault(param, {})
        if state_name in state:
            raise KeyError(f"state slot {state_name!r} already exists for this parameter")
        value = np.zeros(param.shape, dtype) if initializer is None else np.asarray(initializer, dtype)
        state[state_name] = Tensor(value, dtype=dtype, device=param.device)

    @abstractmethod
    def _create_state(self, param_group):
        """Create the state slots of every parameter of ``param_group``."""

    @abstractmethod
    def _updates(self, param_group):
        """Update the parameters of ``param_group`` that have a gradient, and their slots."""

    def _get_params(self):
        return [p for g in self.param_groups for p in g["params"]]

    # ---- stepping ------------------------------------------------------------------------------------------
    def _check_group(self, param_group):
        """Validate hyper-parameters and gradients of a group; raises before anything is modified."""
        owner = type(self).__name__
        for name, value in param_group.items():
            if name != "params":
                _check_hyper(owner, name, value)
        for i, p in enumerate(param_group["params"]):
            g = p.grad
            if g is None:
                continue
            if not isinstance(g, Tensor):
                raise TypeError(f"{owner}: grad of parameter {i} must be a Tensor, got {type(g).__name__}")
            if g.shape != p.shape:
                raise ValueError(f"{owner}: grad of parameter {i} has shape {g.shape}, parameter has {p.shape}")
            if g.dtype.kind != "f":
                raise TypeError(f"{owner}: grad of parameter {i} has dtype {g.dtype}, expected a float dtype")

    def _params_with_grad(self, param_group):
        """The group's parameters whose ``.grad`` is set, after validating the group (start of ``_updates``)."""
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
        for group in self.param_groups:
            self._updates(group)
        return self

    def clear_grad(self):
        """Set the ``grad`` attribute of every parameter to None.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> w = mge.Parameter([1.0]); w.grad = mge.Tensor([1.0])
            >>> optim.SGD([w], lr=0.1).clear_grad(); w.grad is None
            True
        """
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def zero_grad(self):
        """Deprecated (as in MegEngine): fill existing gradients with zeros in place; use :meth:`clear_grad`.

        Example:
            >>> import megxla as mge, megxla.optimizer as optim
            >>> w = mge.Parameter([1.0]); w.grad = mge.Tensor([3.0])
            >>> optim.SGD([w], lr=0.1).zero_grad(); w.grad.numpy()
            array([0.], dtype=float32)
        """
        warnings.warn("Optimizer.zero_grad is deprecated, use clear_grad instead", DeprecationWarning,
                      stacklevel=2)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.reset_zero()

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
                raise ValueError(f"loaded state dict contains a parameter group whose keys {sorted(saved)} don't "
                                 f"match the optimizer's {sorted(group)}")
            for k, v in saved.items():
                if k != "params":
                    _check_hyper(owner, k, v)
            for p, i in zip(group["params"], saved["params"]):
                slots = saved_state.get(i)
                if slots is not None:
                    current = self._state.get(p, {})
                    for k, v in slots.items():
                        if k in current and tuple(np.shape(v)) != current[k].shape:
                            raise ValueError(f"loaded slot {k!r} of parameter {i} has shape {tuple(np.shape(v))}, "
                                             f"expected {current[k].shape}")
                plan.append((p, slots))
        known = {i for saved in saved_groups for i in saved["params"]}
        if not set(saved_state) <= known:
            raise ValueError(f"loaded state dict has state for unknown parameter indices "
                             f"{sorted(set(saved_state) - known)}")

        for group, saved in zip(self.param_groups, saved_groups):
            for k, v in saved.items():
                if k != "params":
                    group[k] = copy.copy(v)
        for p, slots in plan:
            if slots is None:
                self._state.pop(p, None)
                continue
            current = self._state.get(p, {})
            new = {}
            for k, v in slots.items():
                if k in current:
                    new[k] = current[k]._reset(Tensor(v, dtype=current[k].dtype))
                else:
                    new[k] = Tensor(v, device=p.device)
            self._state[p] = new
