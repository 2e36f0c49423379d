"""One op per parameter group: the whole update of an optimizer step as a single cached primitive.

An eager Adam step used to issue ~21 op calls per parameter (each a JAX dispatch, ~10-50 us); here a group's
update is ONE op, ``optimizer_update[rule=..., ...]``, whose implementation runs the optimizer's per-parameter
*rule* (a pure function of arrays) over flat lists of parameters, gradients and slots. Its eager kernel is
``jax.jit`` of that loop, compiled once per model (shapes), and XLA fuses the elementwise math.

Static parameters (part of the interned :class:`~megxla.core.Op`): the rule, its structural ``flags`` (which
terms exist: weight decay on/off eagerly, whether the SGD momentum slot exists...), the number of parameters,
hyper-parameters and slots, and whether a skip ``gate`` is given. Hyper-parameter *values* are array inputs
(0-d tensors made by :func:`~megxla.optimizer.optimizer.hyper_tensor`), so under ``trace`` / ``xla_trace``
they are graph inputs re-read at every call and a new learning rate never recompiles.

The gate is a 0-d bool tensor (``GradScaler`` inside a compiled step found an inf/NaN gradient): when it is
True every output equals its input -- the step is skipped inside the graph, without a host read.

A rule may carry ``rule.prepare(flags, hypers) -> hypers``: the scalar work that is the same for every parameter
of the group (``1 - beta``, ``momentum != 0``...) runs there ONCE per group, and the rule reads its results. The
per-parameter loop is unrolled into the lowered step, so scalar work left in the rule is repeated once per
parameter (a ResNet-18 step had ~1.2x the StableHLO ops of the hand-written ``jax.jit`` step; issue 13).
"""
from __future__ import annotations

import threading

import jax.numpy as jnp
from jax import lax

from ..core import _interrupt
from ..core._dispatch import apply
from ..core._op import Primitive
from ..core._rounding import apart

__all__ = ["GROUP_UPDATE", "group_update", "select", "kept"]

# The zero the rule being lowered keeps its products apart with (``kept``): the update's last input
_lowering = threading.local()


def kept(x):
    """``x``, a product the rule computed, as a separate op's stored result: its readers' sums do not fuse with it
    into one multiply-add. MegEngine's optimizers update by one op after another, each result rounded; within one
    compiled update LLVM contracts ``g + p * wd`` into one FMA (one rounding): after three SGD steps (momentum 0.9,
    weight decay 0.1) 34% of the parameters' float32 values were an ulp or more from MegEngine's, 0 with the
    products kept apart (``core/_rounding.py``). Outside a group update, ``x`` itself.

    Example:
        >>> import jax.numpy as jnp
        >>> kept(jnp.float32(0.5) * 3).tolist()
        1.5
    """
    zero = getattr(_lowering, "zero", None)
    if zero is None:
        return x
    shape = jnp.shape(x)
    if shape not in _lowering.zeros:  # (the zero broadcast once per shape, not once per product)
        _lowering.zeros[shape] = jnp.broadcast_to(zero, shape)
    return apart(x, _lowering.zeros[shape])


def _group_update_impl(*arrays, rule, flags, n, nhyper, nslot, gated):
    hypers = arrays[:nhyper]
    pos = nhyper
    gate = None
    if gated:
        gate = arrays[pos]
        pos += 1
    saved = getattr(_lowering, "zero", None), getattr(_lowering, "zeros", None)
    _lowering.zero, _lowering.zeros = arrays[-1], {}
    try:
        return _update(arrays[pos:-1], rule, flags, hypers, gate, n, nslot)
    finally:
        _lowering.zero, _lowering.zeros = saved


def _update(arrays, rule, flags, hypers, gate, n, nslot):
    params, grads, slots = arrays[:n], arrays[n:2 * n], arrays[2 * n:]
    prepare = getattr(rule, "prepare", None)
    if prepare is not None:
        hypers = prepare(flags, hypers)
    new_params, new_slots = [], []
    for k in range(n):
        p, g = params[k], grads[k]
        old = slots[k * nslot:(k + 1) * nslot]
        np_, ns = rule(flags, hypers, p, g, old)
        # NOTE: results keep the dtype of what they replace (a float16 parameter stays float16 although the
        # float32 hyper-parameters promote the math), as ``assign`` does.
        np_ = np_.astype(p.dtype)
        ns = [s.astype(o.dtype) for s, o in zip(ns, old)]
        if gate is not None:
            np_ = select(gate, p, np_)
            ns = [select(gate, o, s) for s, o in zip(ns, old)]
        new_params.append(np_)
        new_slots.extend(ns)
    return tuple(new_params) + tuple(new_slots)


def select(pred, on_true, on_false):
    """``jnp.where(pred, on_true, on_false)`` for a 0-d ``pred``, without broadcasting it.

    Same values as ``jnp.where`` (operands promoted alike); StableHLO's select takes a scalar predicate, so
    this saves one ``broadcast_in_dim`` per use, per parameter, in the lowered step.

    Args:
        pred: 0-d bool array.
        on_true: array taken where ``pred`` is True.
        on_false: array of the same shape, taken where ``pred`` is False.

    Returns:
        ``on_true`` or ``on_false``, in their common dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> select(jnp.array(False), jnp.ones(2), jnp.zeros(2, jnp.int32))
        Array([0., 0.], dtype=float32)
    """
    dtype = jnp.result_type(on_true, on_false)
    on_true, on_false = jnp.broadcast_arrays(jnp.asarray(on_true, dtype), jnp.asarray(on_false, dtype))
    return lax.select(pred, on_true, on_false)


GROUP_UPDATE = Primitive("optimizer_update", _group_update_impl, multiple_results=True)


def group_update(rule, flags, hypers, params, slot_lists, gate=None):
    """Run ``rule`` over a group as one op and rebind every parameter and slot in place.

    Args:
        rule: ``rule(flags, hypers, param, grad, slots) -> (new_param, new_slots)`` on JAX arrays; a
            module-level function (it is a static op parameter and must pickle by name).
        flags: hashable static switches of the rule.
        hypers: 0-d hyper-parameter Tensors, in the order the rule reads them.
        params: Parameters that have a ``.grad``.
        slot_lists: per parameter, its slot Tensors in the order the rule reads them (same count for all).
        gate: optional 0-d bool Tensor; where True the update is skipped (outputs equal inputs).

    Returns:
        None. ``params`` and the slot Tensors are rebound to their new values.

    Example:
        >>> import megxla as mge
        >>> def rule(flags, hypers, p, g, slots):
        ...     return p - hypers[0] * g, ()
        >>> w = mge.Parameter([1.0]); w.grad = mge.Tensor([2.0])
        >>> group_update(rule, (), [mge.Tensor(0.5)], [w], [()]); w.numpy()
        array([0.], dtype=float32)
    """
    n = len(params)
    if not n:
        return
    nslot = len(slot_lists[0])
    op = GROUP_UPDATE.bind(rule=rule, flags=flags, n=n, nhyper=len(hypers), nslot=nslot, gated=gate is not None)
    inputs = list(hypers)
    if gate is not None:
        inputs.append(gate)
    inputs.extend(params)
    inputs.extend(p.grad for p in params)
    for slots in slot_lists:
        inputs.extend(slots)
    inputs.append(_zero())  # (an input, not a constant: XLA would fold a constant zero and ``kept`` with it)
    outs = apply(op, *inputs)
    held = False
    try:
        # a Ctrl-C now is raised once every parameter and slot is rebound: the step is taken by all or none
        held = _interrupt.enter()
        for t, new in zip(params, outs[:n]):
            t._reset(new)
        it = iter(outs[n:])
        for slots in slot_lists:
            for t in slots:
                t._reset(next(it))
    finally:
        if held:
            _interrupt.leave()


def _zero():
    """A 0-d int32 zero a compiled step re-reads at every call, as it does the hyper-parameters (``kept``)."""
    from .optimizer import host_scalar  # (optimizer imports this module)
    return host_scalar(_zero_value, "int32", ("megxla.optimizer", "kept"))


def _zero_value():
    return 0
