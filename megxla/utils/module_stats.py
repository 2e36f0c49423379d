"""``megengine.utils.module_stats``: parameters, FLOPs and activations of a model, counted as MegEngine counts.

One forward pass in eval mode, with forward hooks on the layer types MegEngine counts (convolutions, linear,
batched matmul, normalisations, pooling; :func:`register_hook_module` adds more). Per hooked module:

* FLOPs from MegEngine's formulas (:func:`register_flops` adds or replaces one): a convolution is
  ``output elements * (in_channels / groups * kernel elements + bias)`` (a multiply-add counts once), linear
  ``output elements * in_features + out_features``, a normalisation ``7 * input elements``, a pooling
  ``output elements * kernel elements``.
* activations: its (first) output's elements and bytes, and with ``inputs`` given its mean and std.
* parameters: every ``weight`` / ``bias`` of a hooked module, in the order the forward reads them, named
  ``<module>-w`` / ``<module>-b``.

The same program gives the same totals and tables on MegEngine and on megxla.

Example:
    >>> import numpy as np, megxla.module as M
    >>> net = M.Sequential(M.Linear(4, 3), M.ReLU())
    >>> total, details = module_stats(net, inputs=(np.zeros((2, 4), np.float32),), logging_to_stdout=False)
    >>> total.param_dims, int(total.flops), total.act_dims
    (15, 27, 6)
"""
from __future__ import annotations

import collections
import contextlib
import functools
from collections import namedtuple
from typing import Iterable

import numpy as np

from .. import functional as F
from .. import module as M
from ..core._tensor import Tensor
from ..logger import get_logger

__all__ = ["module_stats", "sizeof_fmt", "register_flops", "register_hook_module"]

total_stats = namedtuple("total_stats", ["param_size", "param_dims", "flops", "act_size", "act_dims"])
stats_details = namedtuple("module_stats", ["params", "flops", "activations"])
logger = get_logger(__name__)

_calc_flops_dict = {}


def register_flops(*modules):
    """Decorator: count the FLOPs of these module types with ``impl(module, inputs, outputs) -> number``.

    Args:
        modules: module classes (subclasses match too).

    Returns:
        the decorator (it returns ``impl`` unchanged).

    Example:
        >>> class Scale(M.Module):
        ...     def forward(self, x):
        ...         return x * 2
        >>> _ = register_flops(Scale)(lambda m, ins, outs: int(np.prod(outs[0].shape)))
        >>> register_hook_module(Scale)
    """
    def callback(impl):
        for m in modules:
            _calc_flops_dict[m] = impl
        return impl
    return callback


@register_flops(M.Conv1d, M.Conv2d, M.Conv3d, M.LocalConv2d, M.DeformableConv2d)
def _flops_conv(module, inputs, outputs):
    bias = 1 if module.bias is not None else 0
    # N x Cout x H x W x (Cin / groups x Kh x Kw + bias)
    return np.prod(outputs[0].shape) * (float(module.in_channels // module.groups) * np.prod(module.kernel_size)
                                        + bias)


@register_flops(M.ConvTranspose2d)
def _flops_conv_transpose(module, inputs, outputs):
    bias = 1 if module.bias is not None else 0
    return (np.prod(inputs[0].shape) * (module.out_channels // module.groups * np.prod(module.kernel_size))
            + np.prod(outputs[0].shape) * bias)


@register_flops(M.batchnorm._BatchNorm, M.SyncBatchNorm, M.GroupNorm, M.LayerNorm, M.InstanceNorm)
def _flops_norm(module, inputs, outputs):
    return np.prod(inputs[0].shape) * 7


@register_flops(M.AvgPool2d, M.MaxPool2d)
def _flops_pool(module, inputs, outputs):
    k = module.kernel_size
    kernel_sum = np.prod(k) if isinstance(k, tuple) and len(k) == 2 else k ** 2
    return np.prod(outputs[0].shape) * kernel_sum


@register_flops(M.AdaptiveAvgPool2d, M.AdaptiveMaxPool2d)
def _flops_adaptive_pool(module, inputs, outputs):
    # MegEngine's formula (the kernel of a stride-floor(H / (H - 1)) window); numpy's division keeps a 1-pixel
    # input (H - 1 == 0) from raising, as MegEngine's numpy arithmetic does
    h, w = inputs[0].shape[2], inputs[0].shape[3]
    with np.errstate(divide="ignore", invalid="ignore"):
        stride_h = np.floor(np.float64(h) / (h - 1))
        stride_w = np.floor(np.float64(w) / (w - 1))
    return np.prod(outputs[0].shape) * (h - (h - 1) * stride_h) * (w - (w - 1) * stride_w)


@register_flops(M.Linear)
def _flops_linear(module, inputs, outputs):
    bias = module.out_features if module.bias is not None else 0
    return np.prod(outputs[0].shape) * module.in_features + bias


@register_flops(M.BatchMatMulActivation)
def _flops_batch_matmul(module, inputs, outputs):
    bias = 1 if module.bias is not None else 0
    x, w = inputs[0], module.weight
    n, p = x.shape[1:]
    m = w.shape[-1]
    return n * (p + bias) * m * x.shape[0]


# the layer types MegEngine hooks (QAT and quantized layers derive from them)
hook_modules = [M.conv._ConvNd, M.Linear, M.BatchMatMulActivation, M.batchnorm._BatchNorm, M.LayerNorm,
                M.GroupNorm, M.InstanceNorm, M.pooling._PoolNd, M.AdaptiveAvgPool2d.__mro__[1]]


def register_hook_module(module):
    """Also collect statistics for modules of this type (or of each type in a list / tuple).

    Args:
        module: a Module subclass, or a list / tuple of them.

    Returns:
        None.

    Example:
        >>> register_hook_module(M.ReLU)
        >>> _ = hook_modules.pop()  # undo, for the other examples
    """
    if isinstance(module, (tuple, list)):
        for m in module:
            register_hook_module(m)
    elif isinstance(module, type) and issubclass(module, M.Module):
        hook_modules.append(module)
    else:
        raise TypeError("register_hook_module: the param type should be in [list, tuple, M.Module]")


def sizeof_fmt(num, suffix="B"):
    """Human-readable size, as MegEngine prints it.

    Args:
        num: the number.
        suffix: ``"B"`` for bytes (powers of 1024), anything else for counts (powers of 1000).

    Returns:
        a string, e.g. ``sizeof_fmt(2048) == '2.000 KiB'``.

    Example:
        >>> sizeof_fmt(2048), sizeof_fmt(17452, suffix="OPs")
        ('2.000 KiB', '17.452 KOPs')
    """
    if suffix == "B":
        scale, units = 1024.0, ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"]
    else:
        scale, units = 1000.0, ["", "K", "M", "G", "T", "P", "E", "Z", "Y"]
    for unit in units:
        if abs(num) < scale or unit == units[-1]:
            return "{:3.3f} {}{}".format(num, unit, suffix)
        num /= scale


def _nbits(dtype):
    dtype = np.dtype(dtype)
    return 1 if dtype == np.bool_ else dtype.itemsize * 8


def _mean(t):
    return F.mean(Tensor(t).astype("float32")).numpy()


def _std(t):
    return F.std(Tensor(t).astype("float32")).numpy()


def _param_stats(param):
    nbits = _nbits(param.dtype)
    dim = np.prod(param.shape)
    return {"dtype": np.dtype(param.dtype), "shape": param.shape, "mean": "{:.3g}".format(_mean(param)),
            "std": "{:.3g}".format(_std(param)), "param_dim": dim, "nbits": nbits, "size": dim * nbits // 8}


def _activation_stats(output, has_input):
    nbits = _nbits(output.dtype)
    dim = np.prod(output.shape)
    st = {"dtype": np.dtype(output.dtype), "shape": output.shape, "act_dim": dim, "nbits": nbits,
          "size": dim * nbits // 8}
    if has_input:
        st["mean"] = "{:.3g}".format(_mean(output))
        st["std"] = "{:.3g}".format(_std(output))
    return st


def _op_stats(module, inputs, outputs):
    if not isinstance(outputs, (tuple, list)):
        outputs = (outputs,)
    for typ, impl in _calc_flops_dict.items():
        if isinstance(module, typ):
            return {"input_shapes": [i.shape for i in inputs], "output_shapes": [o.shape for o in outputs],
                    "flops_num": impl(module, inputs, outputs)}
    return None


def _sum(rows, key, dim_key, bar_length_max, suffix_total):
    """MegEngine's cumulative / ratio / bar columns, then the ``total`` row; returns (total dims, total)."""
    largest = max([d[key] for d in rows] + [0])
    total_dim = total = 0
    for d in rows:
        total += int(d[key])
        if dim_key:
            total_dim += int(d[dim_key])
        d[suffix_total[0]] = sizeof_fmt(total, suffix=suffix_total[1])
    for d in rows:
        ratio = d["ratio"] = d[key] / total
        d["percentage"] = "{:.2f}%".format(ratio * 100)
        d[suffix_total[2]] = "#" * int(d[key] / largest * bar_length_max)
    return total_dim, total


def _table(rows, header):
    """A plain text table (the layout of tabulate's default format, which MegEngine uses)."""
    data = [header] + [[str(d.get(h, "")) for h in header] for d in rows]
    widths = [max(len(r[i]) for r in data) for i in range(len(header))]
    rule = "  ".join("-" * w for w in widths)
    lines = [rule] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in data] + [rule]
    lines.insert(2, rule)
    return "\n".join(lines)


@contextlib.contextmanager
def _eval_mode(model):
    training = {id(m): m.training for m in model.modules()}
    model.eval()
    try:
        yield model
    finally:
        for m in model.modules():
            m.training = training[id(m)]


def _load_tensor(x):
    if isinstance(x, np.ndarray):
        return Tensor(x)
    if isinstance(x, Tensor):
        return x
    if isinstance(x, collections.abc.Mapping):
        return {k: _load_tensor(v) for k, v in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_load_tensor(v) for v in x))
    if isinstance(x, collections.abc.Sequence):
        return [_load_tensor(v) for v in x]
    return Tensor(x, dtype=np.float32)



def _size_totals(rows, dim_key, bar_length_max, extra, prefix):
    """Cumulative sizes and bars of ``rows`` (parameters or activations), their sizes formatted, a total row
    appended and the totals entered in ``extra`` (``total_<prefix>_dims`` / ``_size``); returns the totals."""
    dims, size = _sum(rows, "size", dim_key, bar_length_max, ("size_cum", "B", "size_bar"))
    for d in rows:
        d["size"] = sizeof_fmt(d["size"])
    rows.append({"name": "total", dim_key: dims, "size": sizeof_fmt(size)})
    extra[f"total_{prefix}_dims"] = sizeof_fmt(dims, suffix="")
    extra[f"total_{prefix}_size"] = sizeof_fmt(size)
    return dims, size


def module_stats(model, inputs: Iterable[np.ndarray] = None, input_shapes: list = None, cal_params: bool = True,
                 cal_flops: bool = True, cal_activations: bool = True, logging_to_stdout: bool = True,
                 bar_length_max: int = 20):
    r"""Calculate (and log) ``model``'s parameters, FLOPs and activations, as MegEngine's ``module_stats``.

    The model runs one forward in eval mode (its training flags are restored afterwards).

    Args:
        model: the module.
        inputs: the forward inputs (arrays, Tensors, or nested lists / dicts of them; one array is one input).
        input_shapes: shapes of float32 zero inputs, used when ``inputs`` is None.
        cal_params: compute parameter statistics.
        cal_flops: compute FLOPs.
        cal_activations: compute activation statistics.
        logging_to_stdout: log the per-module tables (the summary is always logged, as MegEngine does).
        bar_length_max: width of the bars drawn in the tables.

    Returns:
        ``(total_stats(param_size, param_dims, flops, act_size, act_dims), module_stats(params, flops,
        activations))``: the second holds MegEngine's per-row dicts, each list ending with a ``total`` row.

    Example:
        >>> net = M.Sequential(M.Conv2d(3, 4, 3, bias=False), M.BatchNorm2d(4))
        >>> total, _ = module_stats(net, input_shapes=[(1, 3, 6, 6)], logging_to_stdout=False)
        >>> int(total.flops), total.param_dims
        (2176, 116)
    """
    has_inputs = inputs is not None
    if has_inputs:
        if not isinstance(inputs, (tuple, list)):
            inputs = [inputs]
        inputs = _load_tensor(inputs)
    elif input_shapes:
        if not isinstance(input_shapes[0], tuple):
            input_shapes = [input_shapes]
        inputs = [F.zeros(s, dtype=np.float32) for s in input_shapes]
    else:
        raise ValueError("module_stats: inputs or input_shapes is required to run the model")

    params, flops, activations, hooks = [], [], [], []
    recorded = set()  # ids of the parameters already listed
    module_to_name = {}

    def record_param(module, suffix, p):
        if p is not None and id(p) not in recorded:
            st = _param_stats(p)
            st["name"] = module_to_name.get(id(module), "") + suffix
            params.append(st)
            recorded.add(id(p))

    def hook(module, ins, outs, name=""):
        class_name = type(module).__name__
        if cal_flops:
            st = _op_stats(module, ins, outs)
            if st is not None:
                st["name"], st["class_name"] = name, class_name
                flops.append(st)
        if cal_params:
            record_param(module, "-w", getattr(module, "weight", None))
            record_param(module, "-b", getattr(module, "bias", None))
        if cal_activations:
            out = outs[0] if isinstance(outs, (tuple, list)) else outs
            st = _activation_stats(out, has_inputs)
            st["name"], st["class_name"] = name, class_name
            activations.append(st)

    for name, m in model.named_modules():
        if isinstance(m, tuple(hook_modules)):
            hooks.append(m.register_forward_hook(functools.partial(hook, name=name)))
            module_to_name[id(m)] = name

    # MegEngine lists a hooked module's weight / bias when its forward reads them (a module reading another's
    # weight lists it under the reader's name too): the order of the params table is the order of the reads
    def reading(module, item):
        member = object.__getattribute__(module, item)
        if cal_params and item in ("weight", "bias") and id(module) in module_to_name:
            record_param(module, "-w" if item == "weight" else "-b", member)
        return member

    try:
        with _eval_mode(model):
            M.Module.__getattribute__ = reading
            try:
                model(*inputs)
            finally:
                del M.Module.__getattribute__
    finally:
        for h in hooks:
            h.remove()

    extra = {"#params": len(params)}
    total_flops = total_param_dims = total_param_size = total_act_dims = total_act_size = 0
    if cal_params:
        total_param_dims, total_param_size = _size_totals(params, "param_dim", bar_length_max, extra, "param")
        if logging_to_stdout:
            logger.info("param stats: \n" + _table(params, ["name", "dtype", "shape", "mean", "std", "param_dim",
                                                            "nbits", "size", "size_cum", "percentage",
                                                            "size_bar"]))
    if cal_flops:
        _, total_flops = _sum(flops, "flops_num", None, bar_length_max, ("flops_cum", "OPs", "bar"))
        for d in flops:
            d["flops"] = sizeof_fmt(d["flops_num"], suffix="OPs")
        var_size = sum(sum(s[1] if len(s) > 1 else 0 for s in d["output_shapes"]) for d in flops)
        flops.append({"name": "total", "flops": sizeof_fmt(total_flops, suffix="OPs"), "output_shapes": var_size})
        extra["total_flops"] = sizeof_fmt(total_flops, suffix="OPs")
        if logging_to_stdout:
            logger.info("flops stats: \n" + _table(flops, ["name", "class_name", "input_shapes", "output_shapes",
                                                           "flops", "flops_cum", "percentage", "bar"]))
    if cal_activations:
        total_act_dims, total_act_size = _size_totals(activations, "act_dim", bar_length_max, extra, "act")
        if logging_to_stdout:
            header = ["name", "class_name", "dtype", "shape", "nbits", "act_dim", "size", "size_cum", "percentage",
                      "size_bar"]
            if has_inputs:
                header[4:4] = ["mean", "std"]
            logger.info("activations stats: \n" + _table(activations, header))
    if cal_flops and cal_params and total_param_size != 0:
        extra["flops/param_size"] = "{:3.3f}".format(total_flops / total_param_size)
    logger.info("summary\n" + _table([{"item": k, "value": v} for k, v in extra.items()], ["item", "value"]))
    return (total_stats(param_size=total_param_size, param_dims=total_param_dims, flops=total_flops,
                        act_size=total_act_size, act_dims=total_act_dims),
            stats_details(params=params, flops=flops, activations=activations))
