"""The lowered optimizer update is lean (issue 13): scalar work that is the same for every parameter of a group
(``momentum != 0``, ``1 - beta``...) is done once per group, not once per parameter, and 0-d predicates select
without being broadcast. Counted on the StableHLO of the group-update op alone (lowering only, no compile)."""
import collections
import re

import jax
import jax.numpy as jnp
import pytest

from megxla.optimizer._group_update import _group_update_impl
from megxla.optimizer.adam import _adam_rule
from megxla.optimizer.sgd import _sgd_rule


def _op_counts(rule, flags, nhyper, nslot, n, gated=False):
    shapes = [(4, 3), (3,), (2, 2, 3), (5,)][:n]
    hypers = [jnp.float32(0.5)] * nhyper
    gate = [jnp.bool_(False)] if gated else []
    arrays = [jnp.ones(s, jnp.float32) for s in shapes]
    slots = [jnp.ones(s, jnp.float32) if j < 2 or nslot == 1 else jnp.float32(1.0)
             for s in shapes for j in range(nslot)]

    def f(*xs):
        return _group_update_impl(*xs, rule=rule, flags=flags, n=n, nhyper=nhyper, nslot=nslot, gated=gated)

    text = jax.jit(f).lower(*hypers, *gate, *arrays, *arrays, *slots, jnp.int32(0)).as_text()
    return collections.Counter(re.findall(r"= (stablehlo\.[a-z_]+|call)", text))


def _per_param(*args, **kw):
    """Ops added by one more parameter (4 vs 3 parameters), by op name."""
    big, small = _op_counts(*args, n=4, **kw), _op_counts(*args, n=3, **kw)
    return {k: big[k] - small[k] for k in big | small if big[k] != small[k]}


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("gated", [False, True])
def test_sgd_momentum_is_plain_arithmetic(gated, nesterov):
    # flags (weight decay, momentum, nesterov) are host facts of the recording; hypers lr, wd, momentum
    per = _per_param(_sgd_rule, (True, True, nesterov), 3, 1, gated=gated)
    assert "stablehlo.compare" not in per, per
    assert "call" not in per, per  # no jnp.where helper functions
    assert per.get("stablehlo.select", 0) == 2 * gated, per  # only the gate's (param and buffer)
    # lr, wd, momentum (once for both uses) and the zero keeping products apart (``kept``: once for all of them)
    # broadcast to the parameter's shape; no predicate broadcast
    assert per["stablehlo.broadcast_in_dim"] == 4, per
    assert per["stablehlo.xor"] == 3 + nesterov, per  # p * wd, v * m, lr * d (and nesterov's d * m) kept apart


def test_adam_one_minus_beta_once_per_group():
    # flags (weight decay, decoupled); hypers lr, beta0, beta1, eps, wd; slots exp_avg, exp_avg_sq, step
    per = _per_param(_adam_rule, (True, False), 5, 3)
    # per parameter: 1 - beta0**step, 1 - beta1**step and p - lr * delta; 1 - beta0 and 1 - beta1 once per group
    assert per["stablehlo.subtract"] == 3, per
    assert per["stablehlo.power"] == 2, per  # the step is a per-parameter slot (MegEngine's state layout)
