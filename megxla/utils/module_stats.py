"""``megengine.utils.module_stats``: parameters, FLOPs and activations of each leaf module of a model.

One forward pass with forward hooks finds every leaf module's inputs and outputs. Parameter counts come from
the module's own parameters; FLOPs come from XLA's cost analysis of that module's forward lowered for the
inputs' shapes (so they are the operations XLA will actually run, for any layer type, custom ones included);
activations are the module's output elements and bytes.

FLOPs are XLA's count: a multiply-add is 2 operations (MegEngine's own table counts convolution and linear
multiply-adds once, so its numbers for those layers are about half), and elementwise work (BatchNorm, ReLU) is
included.

Example:
    >>> import numpy as np, megxla.module as M
    >>> net = M.Sequential(M.Linear(4, 3), M.ReLU())
    >>> total, details = module_stats(net, inputs=(np.zeros((2, 4), np.float32),), logging_to_stdout=False)
    >>> total.param_dims, int(total.flops) >= 2 * 2 * 4 * 3
    (15, True)
"""
from __future__ import annotations

from collections import namedtuple
from typing import Iterable

import numpy as np

from ..core._tensor import Tensor
from ..logger import get_logger

__all__ = ["module_stats", "sizeof_fmt"]

total_stats = namedtuple("total_stats", ["param_size", "param_dims", "flops", "act_size", "act_dims"])
stats_details = namedtuple("module_stats", ["params", "flops", "activations"])
logger = get_logger(__name__)


def sizeof_fmt(num, suffix="B"):
    """Human-readable size: ``sizeof_fmt(2048) == '2.00 KiB'``."""
    if suffix == "B":
        scale, units = 1024.0, ["", "Ki", "Mi", "Gi", "Ti", "Pi"]
    else:
        scale, units = 1000.0, ["", "K", "M", "G", "T", "P"]
    for unit in units:
        if abs(num) < scale or unit == units[-1]:
            return f"{num:3.2f} {unit}{suffix}"
        num /= scale


def _tensors(obj):
    if isinstance(obj, Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _is_leaf(m):
    return not any(True for _ in m.children())


def _flops(module, inputs):
    """FLOPs of ``module.forward`` for inputs of these shapes, from XLA's cost analysis of its lowering."""
    import jax
    from ..core._dispatch import wrap
    from ..random import _rng
    state = [(t, t._data, t._vid) for _, t in module.named_tensors()]
    rng_state = (_rng._global._state._data, _rng._global._state._vid)

    def fn(*arrays):
        outs = module.forward(*[wrap(a) for a in arrays])
        return [t._data for t in _tensors(outs)]

    try:
        # Counted on the CPU backend wherever the model runs: FLOPs are a property of the model, and on a GPU
        # XLA's pre-compilation cost analysis reported 0 for convolutions.
        try:
            cpu = jax.devices("cpu")[0]
        except RuntimeError:
            cpu = None
        with jax.default_device(cpu):
            lowered = jax.jit(fn).lower(*[jax.ShapeDtypeStruct(t.shape, t.dtype) for t in inputs])
            cost = lowered.cost_analysis()
    finally:  # a forward that updates state (BatchNorm statistics, RNG) must leave no tracer behind
        for t, data, vid in state:
            t._data, t._vid = data, vid
        _rng._global._state._data, _rng._global._state._vid = rng_state
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return float((cost or {}).get("flops", 0.0))


def module_stats(model, inputs: Iterable[np.ndarray] = None, input_shapes: list = None, cal_params: bool = True,
                 cal_flops: bool = True, cal_activations: bool = True, logging_to_stdout: bool = True,
                 bar_length_max: int = 20):
    r"""Statistics of every leaf module of ``model``: parameters, FLOPs and activations.

    Args:
        model: the module.
        inputs: the forward inputs (arrays or Tensors; one array is accepted as a single input).
        input_shapes: shapes of float32 zero inputs, used when ``inputs`` is None.
        cal_params: compute parameter statistics.
        cal_flops: compute FLOPs (XLA cost analysis of each leaf module's forward).
        cal_activations: compute activation statistics.
        logging_to_stdout: log the tables.
        bar_length_max: width of the bars drawn in the tables.

    Returns:
        ``(total_stats(param_size, param_dims, flops, act_size, act_dims), module_stats(params, flops,
        activations))`` where the second holds one dict per leaf module and quantity.
    """
    if inputs is None:
        if input_shapes is None:
            raise ValueError("module_stats: give inputs or input_shapes")
        shapes = [input_shapes] if input_shapes and isinstance(input_shapes[0], int) else input_shapes
        inputs = [np.zeros(s, np.float32) for s in shapes]
    elif isinstance(inputs, (np.ndarray, Tensor)):
        inputs = [inputs]
    inputs = [t if isinstance(t, Tensor) else Tensor(t) for t in inputs]

    names = {id(m): (n or type(m).__name__) for n, m in model.named_modules()}
    seen = []
    handles = []

    def hook(m, ins, outs):
        seen.append((m, [t for t in _tensors(ins)], _tensors(outs)))

    for _, m in model.named_modules():
        if _is_leaf(m):
            handles.append(m.register_forward_hook(hook))
    try:
        model(*inputs)
    finally:
        for h in handles:
            h.remove()

    params, flops, acts = [], [], []
    done = set()
    for m, ins, outs in seen:
        name = names.get(id(m), type(m).__name__)
        if cal_params and id(m) not in done:
            for pname, p in m.named_parameters(recursive=False):
                bits = p.dtype.itemsize * 8
                params.append({"name": f"{name}-{pname}", "shape": tuple(p.shape), "param_dim": p.size,
                               "bits": bits, "size": p.size * bits // 8})
        done.add(id(m))
        if cal_flops:
            flops.append({"name": name, "class_name": type(m).__name__,
                          "input_shapes": [tuple(t.shape) for t in ins],
                          "output_shapes": [tuple(t.shape) for t in outs], "flops": _flops(m, ins)})
        if cal_activations:
            dims = sum(t.size for t in outs)
            acts.append({"name": name, "class_name": type(m).__name__, "act_dim": dims,
                         "size": sum(t.size * t.dtype.itemsize for t in outs),
                         "output_shapes": [tuple(t.shape) for t in outs]})
    total = total_stats(param_size=sum(p["size"] for p in params), param_dims=sum(p["param_dim"] for p in params),
                        flops=sum(f["flops"] for f in flops), act_size=sum(a["size"] for a in acts),
                        act_dims=sum(a["act_dim"] for a in acts))
    if logging_to_stdout:
        _log(params, flops, acts, total, bar_length_max)
    return total, stats_details(params=params, flops=flops, activations=acts)


def _table(title, rows, cols, key, total, bar_length_max, fmt):
    if not rows:
        return ""
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    lines = [title, "  ".join(c.ljust(w) for c, w in zip(cols, widths)) + "  " + key + "  percentage"]
    for r in rows:
        share = r[key] / total if total else 0.0
        bar = "#" * int(round(share * bar_length_max))
        lines.append("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths)) + f"  {fmt(r[key])}  "
                     f"{share:6.2%} {bar}")
    return "\n".join(lines)


def _log(params, flops, acts, total, bar_length_max):
    parts = [
        _table("param stats:", params, ["name", "shape"], "param_dim", total.param_dims, bar_length_max,
               lambda v: sizeof_fmt(v, suffix="")),
        _table("flops stats:", flops, ["name", "class_name", "input_shapes", "output_shapes"], "flops", total.flops,
               bar_length_max, lambda v: sizeof_fmt(v, suffix="OPs")),
        _table("activations stats:", acts, ["name", "class_name", "output_shapes"], "act_dim", total.act_dims,
               bar_length_max, lambda v: sizeof_fmt(v, suffix="")),
        f"total param dims: {sizeof_fmt(total.param_dims, suffix='')}, param size: {sizeof_fmt(total.param_size)}, "
        f"flops: {sizeof_fmt(total.flops, suffix='OPs')}, activation dims: {sizeof_fmt(total.act_dims, suffix='')}, "
        f"activation size: {sizeof_fmt(total.act_size)}",
    ]
    logger.info("\n" + "\n\n".join(p for p in parts if p))
