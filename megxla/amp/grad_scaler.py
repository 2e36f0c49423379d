"""``GradScaler``: dynamic loss scaling for mixed precision training (MegEngine semantics)."""
from __future__ import annotations

import math
import numbers
from typing import Iterable

import jax.numpy as jnp

from ..core import _interrupt, _registry
from ..core._dispatch import apply, current_interpreter
from ..core._op import Primitive
from ..core._tensor import Tensor
from ..optimizer.optimizer import host_scalar

__all__ = ["GradScaler"]


def _check_non_finite_impl(*args):
    # One fused op for all gradients: a single dispatch and a single host read of the flag per step, however
    # many parameters the model has (MegEngine's CheckNonFinite does the same). ``1 / scale`` is computed here,
    # in float32, so a compiled step divides by the scale it holds now.
    # The unscaled values are checked, not the scaled ones: a scale backed off below 1 turned a finite scaled
    # gradient into inf (4e38 at scale 0.25), which the optimizer then took -- NaN weights (probe Y)
    *grads, scale = args
    inv = 1.0 / scale
    outs = tuple(g * inv.astype(g.dtype) for g in grads)
    bad = jnp.zeros((), jnp.bool_)
    for g in outs:
        bad = bad | ~jnp.all(jnp.isfinite(g))
    return outs + (bad,)


_check_non_finite = Primitive("amp_check_non_finite", _check_non_finite_impl, multiple_results=True)


def _update_scale_impl(scale, tracker, found, growth_factor, backoff_factor, growth_interval):
    # MegEngine's rule as a select, so a compiled step adapts the scale without reading the flag on the host:
    # non-finite -> scale * backoff, tracker 0; else tracker + 1, and at growth_interval: scale * growth, 0.
    grown = tracker + 1
    grow = grown >= growth_interval
    new_scale = jnp.where(found, scale * backoff_factor, jnp.where(grow, scale * growth_factor, scale))
    # never 0 (~150 overflowing steps of a float32 scale): 0 stays 0 whatever grows it, and every step after it
    # divided by 0 (probe Y); the smallest normal float32 keeps 1 / scale finite
    new_scale = jnp.maximum(new_scale, jnp.finfo(jnp.float32).tiny)
    new_tracker = jnp.where(found | grow, jnp.zeros_like(tracker), grown)
    return new_scale.astype(scale.dtype), new_tracker.astype(tracker.dtype)


_update_scale = Primitive("amp_update_scale", _update_scale_impl, multiple_results=True)
_fill_scale = Primitive("amp_fill_scale", lambda y, scale: jnp.full(y.shape, scale, y.dtype))
_mul_scale = Primitive("amp_mul_scale", lambda dy, scale: dy * scale.astype(dy.dtype))


class ScalerNumberError(TypeError, ValueError):
    """A GradScaler setting that is no number: MegEngine's ``float(value)`` raises ``ValueError`` (``could not
    convert string to float``); megxla raised a ``TypeError``, kept."""


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ScalerNumberError(f"GradScaler: {name} must be a number, got {value!r:.80}")
    return float(value)


def _scale_value(value, name="the scale factor"):
    """``value`` as a scale: a positive, finite number (an inf scale skipped every step silently, a 0 or negative
    one divided the gradients by it)."""
    if isinstance(value, Tensor):
        value = value.item()
    v = _number(name, value)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"GradScaler: {name} must be positive and finite, got {value!r}")
    return v


def _check_settings(init_scale, growth_factor, backoff_factor, growth_interval):
    _scale_value(init_scale, "init_scale")
    growth_factor = _number("growth_factor", growth_factor)
    if not (growth_factor >= 1 or growth_factor == 0) or math.isinf(growth_factor):
        raise ValueError(f"GradScaler: growth_factor must be >= 1 (or 0: never grow), got {growth_factor}")
    if not 0 < _number("backoff_factor", backoff_factor) <= 1:
        raise ValueError(f"GradScaler: backoff_factor must be in (0, 1], got {backoff_factor}")
    interval = _number("growth_interval", growth_interval)
    if interval < 0 or interval != int(interval):
        raise ValueError(f"GradScaler: growth_interval must be an int >= 0 (0: static scale), "
                         f"got {growth_interval!r}")


class GradScaler:
    r"""Scales the loss so that low precision gradients do not underflow, and adapts the scale.

    :meth:`backward` multiplies the output gradient by :attr:`scale_factor` before back-propagating, then
    (by default) :meth:`unscale`\ s the gradients of the GradManager's attached tensors and :meth:`update`\ s
    the scale. If any gradient holds inf or NaN, every attached tensor's ``.grad`` is set to None (so the
    optimizer skips this step) and the scale is multiplied by ``backoff_factor``; after ``growth_interval``
    consecutive finite steps it is multiplied by ``growth_factor``.

    Args:
        init_scale: the initial scale factor.
        growth_factor: factor applied after ``growth_interval`` finite steps (0: the scale never grows).
        backoff_factor: factor applied after a step with non-finite gradients.
        growth_interval: number of consecutive finite steps before growing the scale. 0 makes the scale
            static, as in MegEngine: :meth:`unscale` only divides the gradients by the scale (no inf/NaN
            check, the gradients are kept) and :meth:`update` does nothing.

    Example:
        >>> import numpy as np, megxla as mge
        >>> from megxla.autodiff import GradManager
        >>> from megxla.amp import GradScaler, autocast
        >>> w = mge.Parameter(np.ones((3, 3), "float32"))
        >>> gm, scaler = GradManager().attach([w]), GradScaler()
        >>> with gm:
        ...     with autocast():
        ...         loss = mge.functional.matmul(mge.Tensor(np.ones((2, 3), "float32")), w).sum()
        ...     scaler.backward(gm, loss)
        >>> float(w.grad.numpy()[0, 0])
        2.0
    """

    def __init__(self, init_scale: float = 2.0 ** 4, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000):
        _check_settings(init_scale, growth_factor, backoff_factor, growth_interval)
        # NOTE: the scale and the growth counter are Tensors (state): a compiled step that contains backward,
        # unscale and update reads and rebinds them like any other state, and never reads the overflow flag on
        # the host. ``scale_factor`` reads the value when asked.
        self._scale = Tensor(float(init_scale), dtype="float32")
        self._tracker = Tensor(0, dtype="int32")
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        # overflow flag of the unscales since the last update(), which consumes it; a Tensor that is always
        # there (state, like the scale): a compiled step that unscales without updating hands it to the next
        self._found = Tensor(False)

    @property
    def scale_factor(self) -> float:
        """The current loss scale (a host read of the scale tensor)."""
        return float(self._scale.numpy())

    @scale_factor.setter
    def scale_factor(self, value):
        self._scale._reset(Tensor(_scale_value(value), dtype="float32"))

    @property
    def _growth_tracker(self) -> int:
        return int(self._tracker.numpy())

    @_growth_tracker.setter
    def _growth_tracker(self, value):
        self._tracker._reset(Tensor(int(value), dtype="int32"))

    def backward(self, gm, y=None, dy=None, *, unscale_grad: bool = True, update_scale="if_unscale_grad"):
        r"""Back-propagate ``y`` scaled by :attr:`scale_factor` through ``gm``.

        Args:
            gm: the recording :class:`~.autodiff.GradManager`.
            y: the loss tensor, or a list of them (None ends recording without computing, as GradManager).
            dy: gradients of ``y``; default ones. They are multiplied by the scale factor.
            unscale_grad: divide the gradients by the scale factor afterwards (and drop them if any is
                non-finite). Pass False to unscale later yourself, e.g. after accumulating several steps.
            update_scale: with ``unscale_grad``, also call :meth:`update` (any truthy value, the default
                ``"if_unscale_grad"`` included).

        Returns:
            None. The gradients are in the ``.grad`` of ``gm``'s attached tensors.

        Example:
            >>> from megxla.amp import GradScaler
            >>> from megxla.autodiff import GradManager
            >>> model = M.Linear(3, 1); opt = optim.SGD(model.parameters(), lr=0.1)
            >>> gm = GradManager().attach(model.parameters()); scaler = GradScaler()
            >>> x = mge.Tensor(np.ones((2, 3), "float32"))
            >>> with gm:
            ...     loss = model(x).mean()
            ...     scaler.backward(gm, loss)
            >>> opt.step().clear_grad()
        """
        if y is None:
            ys = []
        elif isinstance(y, (tuple, list)):
            ys = list(y)
        else:
            ys = [y]
        if dy is None:
            dys = [apply(_fill_scale.bind(), t, self._scale) for t in ys]
        else:
            dys = [apply(_mul_scale.bind(), d if isinstance(d, Tensor) else Tensor(d), self._scale)
                   for d in (dy if isinstance(dy, (tuple, list)) else [dy])]
        gm.backward(y=ys if ys else None, dy=dys if ys else None)
        if unscale_grad:
            self.unscale(gm.attached_tensors())
            if update_scale:
                self.update()

    def unscale(self, grad_tensors: Iterable[Tensor]):
        r"""Divide the ``.grad`` of ``grad_tensors`` by the scale factor; on inf/NaN set them all to None.

        Inside a compiled step (``trace`` / ``xla_trace``) the flag is not read on the host: the gradients
        keep their (non-finite) values and carry the flag to the optimizer, whose update then leaves every
        parameter and slot unchanged -- the same result as eager, decided in the graph.

        Args:
            grad_tensors: tensors whose ``.grad`` was produced by a scaled backward pass.

        Returns:
            self.

        Example:
            >>> from megxla.amp import GradScaler
            >>> from megxla.autodiff import GradManager
            >>> w = mge.Parameter([1.0]); scaler = GradScaler()
            >>> with GradManager().attach([w]) as gm:
            ...     scaler.backward(gm, (w * 3).sum(), unscale_grad=False)   # w.grad = 3 * scale
            >>> scaler.unscale([w]).update(); w.grad.numpy()
            array([3.], dtype=float32)
        """
        if isinstance(grad_tensors, Tensor):
            # (iterated, a Tensor gave its rows, none with a gradient: nothing was unscaled, and the next step
            # took a gradient scale times too large -- probe Y)
            grad_tensors = [grad_tensors]
        tensors = [t for t in grad_tensors if t is not None and getattr(t, "grad", None) is not None]
        if not tensors:
            return self
        *grads, bad = apply(_check_non_finite.bind(), *[t.grad for t in tensors], self._scale)
        if self.growth_interval == 0:
            # static scale (MegEngine): divide only; a non-finite gradient is kept and nothing is flagged
            for t, g in zip(tensors, grads):
                t.grad = g
            return self
        self._found._reset(self._found | bad)
        if current_interpreter() is not None:
            for t, g in zip(tensors, grads):
                t.grad = g
                _registry.set_grad_gate(g, bad)
        elif bool(bad.numpy()):
            for t in tensors:
                t.grad = None
        else:
            for t, g in zip(tensors, grads):
                t.grad = g
        return self

    def update(self, new_scale: float = None):
        r"""Adapt the scale factor after a step (or set it to ``new_scale``).

        Args:
            new_scale: if given, the new scale factor; the growth counter is left as is. A static scaler
                (``growth_interval=0``) ignores the call, as MegEngine's.

        Returns:
            None.

        Example:
            >>> from megxla.amp import GradScaler
            >>> scaler = GradScaler()
            >>> scaler.update(1024.0); scaler.scale_factor
            1024.0
        """
        if self.growth_interval == 0:
            return
        if new_scale is not None:
            self.scale_factor = new_scale
        else:
            found = self._found
            # growth/backoff factors are re-read at every call of a compiled step, like optimizer hyper-parameters
            # growth_factor 0 means "never grow" (MegEngine's documented meaning), not "scale to 0"
            factors = (host_scalar(lambda: self.growth_factor or 1.0, "float32", (id(self), "growth")),
                       host_scalar(lambda: self.backoff_factor, "float32", (id(self), "backoff")),
                       host_scalar(lambda: self.growth_interval, "int32", (id(self), "interval")))
            scale, tracker = apply(_update_scale.bind(), self._scale, self._tracker, found, *factors)
            _interrupt.rebind(((self._scale, scale), (self._tracker, tracker), (self._found, Tensor(False))))
            return
        self._found._reset(Tensor(False))

    def state_dict(self):
        r"""The scaler's state as a dict (to save with the model and optimizer).

        Returns:
            ``{"scale_factor", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}``.

        Example:
            >>> GradScaler().state_dict()["scale_factor"]
            16.0
        """
        return {
            "scale_factor": self.scale_factor,
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state):
        r"""Restore a state produced by :meth:`state_dict`.

        Args:
            state: the dict.

        Example:
            >>> s = GradScaler(); s.load_state_dict({**s.state_dict(), "scale_factor": 4.0}); s.scale_factor
            4.0
        """
        # (all read and checked before any is set: a state missing a key set the scale, then raised -- probe Y)
        missing = [k for k in ("scale_factor", "growth_factor", "backoff_factor", "growth_interval",
                               "_growth_tracker") if k not in state]
        if missing:
            raise KeyError(f"GradScaler.load_state_dict: the state has no {missing}")
        values = [state[k] for k in ("scale_factor", "growth_factor", "backoff_factor", "growth_interval")]
        _check_settings(*values)
        tracker = state["_growth_tracker"]
        if isinstance(tracker, bool) or not isinstance(tracker, numbers.Integral) or tracker < 0:
            raise ValueError(f"GradScaler.load_state_dict: _growth_tracker must be an int >= 0, got {tracker!r}")
        self.scale_factor = values[0]
        self.growth_factor = float(values[1])
        self.backoff_factor = float(values[2])
        self.growth_interval = int(values[3])
        self._growth_tracker = int(tracker)


# A compiled step that uses a GradScaler reads and rebinds its scale and growth counter: they are its state.
_registry.register_state_walker(GradScaler, lambda s: [("scale", s._scale), ("growth_tracker", s._tracker),
                                                       ("found", s._found)])


def _all_finite(tensors) -> bool:
    tensors = [t for t in tensors if t is not None]
    if not tensors:
        return True
    *_, bad = apply(_check_non_finite.bind(), *tensors, Tensor(1.0, dtype="float32"))
    return not bool(bad.numpy())


class Xla_GradScaler(GradScaler):
    r"""Loss scaling for a compiled step (MegEngine's XLA-backend scaler): the scale factor is a Tensor the
    step takes as an argument, the step never reads a value on the host, and :meth:`update` -- called after
    the step, outside it -- rolls the parameters back to their last good values when the step overflowed.

    Args:
        model: the model being trained (its parameters are copied as the last good values).
        init_scale: the initial scale factor.
        growth_factor: factor applied after ``growth_interval`` finite steps (0 or ``growth_interval=0``
            freezes the scale).
        backoff_factor: factor applied after an overflow.
        growth_interval: finite steps before growing the scale.

    Example:
        >>> import numpy as np, megxla as mge, megxla.module as M, megxla.functional as F
        >>> from megxla.autodiff import GradManager
        >>> from megxla.jit import xla_trace
        >>> model = M.Linear(3, 1); gm = GradManager().attach(model.parameters())
        >>> opt = mge.optimizer.SGD(model.parameters(), lr=0.1)
        >>> scaler = Xla_GradScaler(model, init_scale=8.0)
        >>> @xla_trace
        ... def step(model, opt, x, scale_factor):
        ...     with gm:
        ...         scaler.backward(gm, scale_factor, model(x).sum())
        ...     opt.step().clear_grad()
        >>> for _ in range(2):
        ...     _ = step(model, opt, mge.Tensor(np.ones((2, 3), "float32")), scaler.scale_factor)
        ...     scaler.update(model)
        >>> float(scaler.scale_factor)
        8.0
    """

    def __init__(self, model, init_scale: float = 2.0 ** 4, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        super().__init__(init_scale, growth_factor if growth_factor else 1.0, backoff_factor,
                         max(int(growth_interval), 1))
        self.growth_factor = float(growth_factor)
        self.growth_interval = int(growth_interval)
        # last good parameter values, restored by update() after an overflow (real copies: a compiled step
        # donates the parameters' buffers)
        self.origin_params = [Tensor(p) for p in model.parameters()]
        self.ifinfinite = None
        self._eager_flag = False

    @property
    def scale_factor(self) -> Tensor:
        """The current scale, a 0-d float32 Tensor (pass it to the compiled step)."""
        return self._scale

    @scale_factor.setter
    def scale_factor(self, value):
        self._scale._reset(value if isinstance(value, Tensor) and value is not self._scale
                           else Tensor(float(value), dtype="float32") if not isinstance(value, Tensor) else value)

    def backward(self, gm, scale_factor: Tensor, y=None, dy=None):
        r"""Back-propagate ``y`` with its gradient scaled by ``scale_factor`` (a Tensor, e.g. the step's
        argument), then unscale the attached tensors' gradients and compute the overflow flag -- all as ops,
        so the compiled step has no host read.

        Args:
            gm: the recording GradManager.
            scale_factor: the scale, a Tensor.
            y: the loss tensor(s).
            dy: their gradients (default ones), multiplied by the scale.
        """
        scale = scale_factor if isinstance(scale_factor, Tensor) else Tensor(float(scale_factor), dtype="float32")
        ys = [] if y is None else list(y) if isinstance(y, (tuple, list)) else [y]
        if dy is None:
            dys = [apply(_fill_scale.bind(), t, scale) for t in ys]
        else:
            dys = [apply(_mul_scale.bind(), d if isinstance(d, Tensor) else Tensor(d), scale)
                   for d in (dy if isinstance(dy, (tuple, list)) else [dy])]
        gm.backward(y=ys if ys else None, dy=dys if ys else None)
        tensors = [t for t in gm.attached_tensors() if t.grad is not None]
        if not tensors:
            return
        *grads, bad = apply(_check_non_finite.bind(), *[t.grad for t in tensors], scale)
        for t, g in zip(tensors, grads):
            t.grad = g
        self.ifinfinite = bad
        self._eager_flag = current_interpreter() is None

    def update(self, model, new_scale: float = None):
        r"""After a step: on overflow restore the last good parameters and back off the scale, else keep the
        parameters as the new good values and grow the scale every ``growth_interval`` steps.

        The overflow is the flag of an eager :meth:`backward`, or -- after a compiled step, whose flag stays
        inside the executable -- non-finite parameters (what an overflowed update leaves).

        Args:
            model: the model (the same parameters as at construction).
            new_scale: if given, set the scale to it (the growth logic is skipped).
        """
        if self.growth_interval == 0:
            return
        if new_scale is not None:
            self.scale_factor = float(new_scale)
        params = list(model.parameters())
        if self._eager_flag and self.ifinfinite is not None:
            overflow = bool(self.ifinfinite.numpy())
        else:
            overflow = not _all_finite(params)
        self._eager_flag = False
        if overflow:
            for origin, p in zip(self.origin_params, params):
                p._reset(Tensor(origin))
            if new_scale is None:
                self.scale_factor = self.scale_factor * self.backoff_factor
            self._growth_tracker = 0
        else:
            for origin, p in zip(self.origin_params, params):
                origin._reset(Tensor(p))
            tracker = self._growth_tracker + 1
            if new_scale is None and tracker >= self.growth_interval:
                self.scale_factor = self.scale_factor * self.growth_factor
                tracker = 0
            self._growth_tracker = tracker


__all__.append("Xla_GradScaler")
