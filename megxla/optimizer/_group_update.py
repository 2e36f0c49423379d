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
"""
from __future__ import annotations

import jax.numpy as jnp

from ..core._dispatch import apply
from ..core._op import Primitive

__all__ = ["GROUP_UPDATE", "group_update"]


def _group_update_impl(*arrays, rule, flags, n, nhyper, nslot, gated):
    hypers = arrays[:nhyper]
    pos = nhyper
    gate = None
    if gated:
        gate = arrays[pos]
        pos += 1
    params = arrays[pos:pos + n]
    grads = arrays[pos + n:pos + 2 * n]
    slots = arrays[pos + 2 * n:]
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
            np_ = jnp.where(gate, p, np_)
            ns = [jnp.where(gate, o, s) for s, o in zip(ns, old)]
        new_params.append(np_)
        new_slots.extend(ns)
    return tuple(new_params) + tuple(new_slots)


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
    outs = apply(op, *inputs)
    for t, new in zip(params, outs[:n]):
        t._reset(new)
    it = iter(outs[n:])
    for slots in slot_lists:
        for t in slots:
            t._reset(next(it))
