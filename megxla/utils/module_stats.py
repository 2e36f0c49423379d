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
import tabulate

from .. import functional as F
from .. import module as M
from ..core._tensor import Tensor
from ..core.tensor.dtype import get_dtype_bit
from ..logger import MegEngineLogFormatter, get_logger

__all__ = ["module_stats", "sizeof_fmt", "register_flops", "register_receptive_field", "register_hook_module",
           "enable_receptive_field", "disable_receptive_field", "get_op_stats", "get_param_stats",
           "get_activation_stats", "sum_op_stats", "sum_param_stats", "sum_activations_stats", "print_op_stats",
           "print_param_stats", "print_activations_stats", "print_summary", "dict2table",
           "preprocess_receptive_field", "hook_modules"]

# as MegEngine's module: importing it lifts the log formatter's line limit (a big model's tables are long) and
# its logger prints at INFO whatever the default level
MegEngineLogFormatter.max_lines = float("inf")
logger = get_logger(__name__)
logger.setLevel("INFO")

total_stats = namedtuple("total_stats", ["param_size", "param_dims", "flops", "act_size", "act_dims"])
stats_details = namedtuple("module_stats", ["params", "flops", "activations"])

_calc_flops_dict = {}
_calc_receptive_field_dict = {}
_receptive_field_enabled = False


def _register_dict(*modules, dict=None):
    def callback(impl):
        for m in modules:
            dict[m] = impl
        return impl
    return callback


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
    return _register_dict(*modules, dict=_calc_flops_dict)


def register_receptive_field(*modules):
    """Decorator: compute ``(receptive_field, stride)`` of these module types with ``impl(module, inputs,
    outputs)`` when :func:`enable_receptive_field` is on (MegEngine registers none).

    Args:
        modules: module classes (subclasses match too).

    Returns:
        the decorator (it returns ``impl`` unchanged).

    Example:
        >>> deco = register_receptive_field(M.Identity)
    """
    return _register_dict(*modules, dict=_calc_receptive_field_dict)


def enable_receptive_field():
    """Let :func:`get_op_stats` record each module's receptive field and stride (``module._rf`` /
    ``module._stride``) and :func:`print_op_stats` print them. :func:`module_stats` turns it off when it starts,
    as MegEngine's does.

    Example:
        >>> enable_receptive_field(); disable_receptive_field()
    """
    global _receptive_field_enabled
    _receptive_field_enabled = True


def disable_receptive_field():
    """Undo :func:`enable_receptive_field`.

    Example:
        >>> disable_receptive_field()
    """
    global _receptive_field_enabled
    _receptive_field_enabled = False


def preprocess_receptive_field(module, inputs, outputs):
    """The largest receptive field and stride recorded on the modules that produced ``inputs`` (``(1, 1)`` for
    an input no module recorded).

    Args:
        module: the module (unused, as in MegEngine).
        inputs: its input tensors.
        outputs: its outputs (unused).

    Returns:
        ``((rf_h, rf_w), (stride_h, stride_w))``.

    Example:
        >>> preprocess_receptive_field(None, [Tensor([1.0])], [])
        ((1, 1), (1, 1))
    """
    # MegEngine reads ``i.owner``, which its eager Tensors lack (an AttributeError with the switch on): a tensor
    # without a producing module counts as the network's input
    def rf(i, attr):
        return getattr(getattr(i, "owner", None), attr, (1, 1))
    pre_rf = (max(rf(i, "_rf")[0] for i in inputs), max(rf(i, "_rf")[1] for i in inputs))
    pre_stride = (max(rf(i, "_stride")[0] for i in inputs), max(rf(i, "_stride")[1] for i in inputs))
    return pre_rf, pre_stride


def _receptive_field_fallback(module, inputs, outputs):
    if not _receptive_field_enabled:
        return None
    if len(inputs) == 0:
        module._rf, module._stride = (1, 1), (1, 1)
    else:
        module._rf, module._stride = preprocess_receptive_field(module, inputs, outputs)
    return module._rf, module._stride


# (key, implementations, fallback), as MegEngine's table
_iter_list = [("flops_num", _calc_flops_dict, None),
              (("receptive_field", "stride"), _calc_receptive_field_dict, _receptive_field_fallback)]


@register_flops(M.Conv1d, M.Conv2d, M.Conv3d, M.LocalConv2d, M.DeformableConv2d)
def flops_convNd(module, inputs, outputs):
    """FLOPs of a convolution: ``output elements * (in_channels / groups * kernel elements + bias)``.

    Example:
        >>> conv = M.Conv2d(3, 4, 3); y = conv(F.zeros((1, 3, 5, 5)))
        >>> float(flops_convNd(conv, [None], [y]))
        1008.0
    """
    bias = 1 if module.bias is not None else 0
    # N x Cout x H x W x (Cin / groups x Kh x Kw + bias)
    return np.prod(outputs[0].shape) * (float(module.in_channels // module.groups) * np.prod(module.kernel_size)
                                        + bias)


@register_flops(M.ConvTranspose2d)
def flops_convNdTranspose(module, inputs, outputs):
    """FLOPs of a transposed convolution: ``input elements * out_channels / groups * kernel elements`` (+ one per
    output element with a bias).

    Example:
        >>> ct = M.ConvTranspose2d(2, 3, 2); x = F.zeros((1, 2, 3, 3))
        >>> int(flops_convNdTranspose(ct, [x], [ct(x)]))
        264
    """
    bias = 1 if module.bias is not None else 0
    return (np.prod(inputs[0].shape) * (module.out_channels // module.groups * np.prod(module.kernel_size))
            + np.prod(outputs[0].shape) * bias)


@register_flops(M.batchnorm._BatchNorm, M.SyncBatchNorm, M.GroupNorm, M.LayerNorm, M.InstanceNorm)
def flops_norm(module, inputs, outputs):
    """FLOPs of a normalisation: ``7 * input elements``.

    Example:
        >>> int(flops_norm(M.BatchNorm2d(2), [F.zeros((1, 2, 2, 2))], []))
        56
    """
    return np.prod(inputs[0].shape) * 7


@register_flops(M.AvgPool2d, M.MaxPool2d)
def flops_pool(module, inputs, outputs):
    """FLOPs of a pooling: ``output elements * kernel elements``.

    Example:
        >>> int(flops_pool(M.MaxPool2d(2), [], [F.zeros((1, 2, 2, 2))]))
        32
    """
    k = module.kernel_size
    kernel_sum = np.prod(k) if isinstance(k, tuple) and len(k) == 2 else k ** 2
    return np.prod(outputs[0].shape) * kernel_sum


@register_flops(M.AdaptiveAvgPool2d, M.AdaptiveMaxPool2d)
def flops_adaptivePool(module, inputs, outputs):
    """FLOPs of an adaptive pooling, by MegEngine's formula (the kernel of a stride ``floor(H / (H - 1))``
    window).

    Example:
        >>> float(flops_adaptivePool(M.AdaptiveAvgPool2d(1), [F.zeros((1, 2, 4, 4))], [F.zeros((1, 2, 1, 1))]))
        2.0
    """
    def kernel(n):
        # MegEngine divides by n - 1 and raises ZeroDivisionError for a 1-pixel side (a global pooling of a 1x1
        # map); its formula's kernel, n - (n - 1) * stride, is 1 there whatever the stride
        return 1.0 if n == 1 else n - (n - 1) * np.floor(n / (n - 1))
    return np.prod(outputs[0].shape) * kernel(inputs[0].shape[2]) * kernel(inputs[0].shape[3])


@register_flops(M.Linear)
def flops_linear(module, inputs, outputs):
    """FLOPs of a linear layer: ``output elements * in_features + out_features`` (the bias once).

    Example:
        >>> int(flops_linear(M.Linear(3, 4), [], [F.zeros((2, 4))]))
        28
    """
    bias = module.out_features if module.bias is not None else 0
    return np.prod(outputs[0].shape) * module.in_features + bias


@register_flops(M.BatchMatMulActivation)
def flops_batchmatmul(module, inputs, outputs):
    """FLOPs of a :class:`~.BatchMatMulActivation` (``weight @ x``, weight ``(batch, out, in)``, x ``(batch, in,
    k)``): ``batch * out * k * (in + bias)``.

    NOTE: MegEngine 1.13 counts ``batch * in * (k + bias) * in`` (the weight's last axis taken for the output
    features), which is wrong when ``in != out``.

    Example:
        >>> bm = M.BatchMatMulActivation(2, 4, 5, bias=False)
        >>> int(flops_batchmatmul(bm, [F.zeros((2, 4, 3))], []))
        120
    """
    bias = 1 if module.bias is not None else 0
    batch, n_in, k = inputs[0].shape
    return batch * module.weight.shape[1] * k * (n_in + bias)


# the layer types MegEngine hooks (QAT and quantized layers derive from them)
hook_modules = [M.conv._ConvNd, M.Linear, M.BatchMatMulActivation, M.batchnorm._BatchNorm, M.LayerNorm,
                M.GroupNorm, M.InstanceNorm, M.pooling._PoolNd, M.pooling._AdaptivePoolNd]


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
        # MegEngine's issubclass() raises this TypeError for a non-class; a class that is no Module gets its text
        raise TypeError("issubclass() arg 1 must be a class" if not isinstance(module, type)
                        else "the param type should in [list,tuple,M.Module]")


def _mean(inp):
    return F.mean(Tensor(inp).astype(np.float32)).numpy()


def _std(inp):
    return F.std(Tensor(inp).astype(np.float32)).numpy()


def dict2table(list_of_dict, header):
    """Rows for ``tabulate``: the header, then each dict's values under it (``""`` where a key is missing).

    Args:
        list_of_dict: the rows.
        header: the column keys.

    Returns:
        a list of lists.

    Example:
        >>> dict2table([{"a": 1}, {"b": 2}], ["a", "b"])
        [['a', 'b'], [1, ''], ['', 2]]
    """
    return [header] + [[d[h] if h in d else "" for h in header] for d in list_of_dict]


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


def get_op_stats(module, inputs, outputs):
    """FLOPs of one module call: ``{"input_shapes", "output_shapes", "flops_num"}``, or None for a type without
    a FLOPs formula (with :func:`enable_receptive_field`, the module's receptive field is recorded too).

    Args:
        module: the module.
        inputs: its input tensors.
        outputs: its output (one tensor, or a tuple / list).

    Returns:
        a dict, or None.

    Example:
        >>> fc = M.Linear(3, 4); x = F.zeros((2, 3))
        >>> st = get_op_stats(fc, [x], fc(x)); st["output_shapes"], int(st["flops_num"])
        ([(2, 4)], 28)
    """
    if not isinstance(outputs, (tuple, list)):
        outputs = (outputs,)
    rst = {"input_shapes": [i.shape for i in inputs], "output_shapes": [o.shape for o in outputs]}
    valid = False
    for key, impls, fallback in _iter_list:
        for typ in impls:
            if isinstance(module, typ):
                value = impls[typ](module, inputs, outputs)
                valid = True
                break
        else:
            # (as MegEngine: the fallback's value is recorded on the module, not in the row)
            if fallback is not None:
                fallback(module, inputs, outputs)
            continue
        if isinstance(key, tuple):
            for k, v in zip(key, value):
                rst[k] = v
        else:
            rst[key] = value
    return rst if valid else None


def sum_op_stats(flops, bar_length_max=20):
    """Add the cumulative, percentage, bar and formatted columns to the rows of :func:`get_op_stats` (named) and
    append the ``total`` row.

    Args:
        flops: the rows (changed in place).
        bar_length_max: the width of the largest row's bar.

    Returns:
        ``(total_flops, flops)``.

    Example:
        >>> sum_op_stats([{"name": "a", "flops_num": 10, "output_shapes": [(1, 2)]}])[1][-1]
        {'name': 'total', 'flops': '10.000 OPs', 'output_shapes': 2}
    """
    max_flops = max([d["flops_num"] for d in flops] + [0])
    total = 0
    for d in flops:
        total += int(d["flops_num"])
        d["flops_cum"] = sizeof_fmt(total, suffix="OPs")
    for d in flops:
        ratio = d["ratio"] = d["flops_num"] / total
        d["percentage"] = "{:.2f}%".format(ratio * 100)
        d["bar"] = "#" * int(d["flops_num"] / max_flops * bar_length_max)
        d["flops"] = sizeof_fmt(d["flops_num"], suffix="OPs")
    total_var_size = sum(sum(s[1] if len(s) > 1 else 0 for s in d["output_shapes"]) for d in flops)
    flops.append(dict(name="total", flops=sizeof_fmt(total, suffix="OPs"), output_shapes=total_var_size))
    return total, flops


def _log_table(title, rows, header):
    # MegEngine passes the header as the first row (no ``headers=``): no rule under it, every column as text
    logger.info(title + tabulate.tabulate(dict2table(rows, header=header)))


def print_op_stats(flops):
    """Log the FLOPs table (the rows of :func:`sum_op_stats`).

    Args:
        flops: the rows.

    Example:
        >>> print_op_stats([])
    """
    header = ["name", "class_name", "input_shapes", "output_shapes", "flops", "flops_cum", "percentage", "bar"]
    if _receptive_field_enabled:
        header[4:4] = ["receptive_field", "stride"]
    _log_table("flops stats: \n", flops, header)


def get_param_stats(param):
    """Statistics of one parameter: dtype, shape, mean and std (3 significant digits), elements, bits, bytes.

    Args:
        param: the tensor.

    Returns:
        a dict.

    Example:
        >>> st = get_param_stats(Tensor(np.ones((2, 3), "float32"))); int(st["param_dim"]), int(st["size"]), st["mean"]
        (6, 24, '1')
    """
    nbits = get_dtype_bit(np.dtype(param.dtype).name)
    dim = np.prod(param.shape)
    return {"dtype": np.dtype(param.dtype), "shape": param.shape, "mean": "{:.3g}".format(_mean(param)),
            "std": "{:.3g}".format(_std(param)), "param_dim": dim, "nbits": nbits, "size": dim * nbits // 8}


def _sum_sizes(rows, dim_key, bar_length_max):
    max_size = max([d["size"] for d in rows] + [0])
    total_dims = total_size = 0
    for d in rows:
        total_dims += int(d[dim_key])
        total_size += int(d["size"])
        d["size_cum"] = sizeof_fmt(total_size)
    for d in rows:
        ratio = d["ratio"] = d["size"] / total_size
        d["percentage"] = "{:.2f}%".format(ratio * 100)
        d["size_bar"] = "#" * int(d["size"] / max_size * bar_length_max)
        d["size"] = sizeof_fmt(d["size"])
    rows.append({"name": "total", dim_key: total_dims, "size": sizeof_fmt(total_size)})
    return total_dims, total_size, rows


def sum_param_stats(params, bar_length_max=20):
    """Add the cumulative, percentage and bar columns to the rows of :func:`get_param_stats` (named), format
    their sizes and append the ``total`` row.

    Args:
        params: the rows (changed in place).
        bar_length_max: the width of the largest row's bar.

    Returns:
        ``(total_param_dims, total_param_size, params)``.

    Example:
        >>> sum_param_stats([dict(get_param_stats(Tensor(np.ones(4, "float32"))), name="w")])[:2]
        (4, 16)
    """
    return _sum_sizes(params, "param_dim", bar_length_max)


def print_param_stats(params):
    """Log the parameter table (the rows of :func:`sum_param_stats`).

    Args:
        params: the rows.

    Example:
        >>> print_param_stats([])
    """
    _log_table("param stats: \n", params, ["name", "dtype", "shape", "mean", "std", "param_dim", "nbits", "size",
                                           "size_cum", "percentage", "size_bar"])


def get_activation_stats(output, has_input=False):
    """Statistics of one activation: dtype, shape, elements, bits, bytes (and with ``has_input`` its mean and std).

    Args:
        output: the tensor.
        has_input: also compute mean and std (the inputs were real data).

    Returns:
        a dict.

    Example:
        >>> st = get_activation_stats(Tensor(np.ones((2, 3), "float32"))); int(st["act_dim"]), int(st["size"])
        (6, 24)
    """
    nbits = get_dtype_bit(np.dtype(output.dtype).name)
    dim = np.prod(output.shape)
    st = {"dtype": np.dtype(output.dtype), "shape": output.shape, "act_dim": dim, "nbits": nbits,
          "size": dim * nbits // 8}
    if has_input:
        st["mean"] = "{:.3g}".format(_mean(output))
        st["std"] = "{:.3g}".format(_std(output))
    return st


def sum_activations_stats(activations, bar_length_max=20):
    """Add the cumulative, percentage and bar columns to the rows of :func:`get_activation_stats` (named),
    format their sizes and append the ``total`` row.

    Args:
        activations: the rows (changed in place).
        bar_length_max: the width of the largest row's bar.

    Returns:
        ``(total_act_dims, total_act_size, activations)``.

    Example:
        >>> sum_activations_stats([dict(get_activation_stats(Tensor(np.ones(4, "float32"))), name="y")])[:2]
        (4, 16)
    """
    return _sum_sizes(activations, "act_dim", bar_length_max)


def print_activations_stats(activations, has_input=False):
    """Log the activation table (the rows of :func:`sum_activations_stats`).

    Args:
        activations: the rows.
        has_input: add the mean and std columns.

    Example:
        >>> print_activations_stats([])
    """
    header = ["name", "class_name", "dtype", "shape", "nbits", "act_dim", "size", "size_cum", "percentage",
              "size_bar"]
    if has_input:
        header[4:4] = ["mean", "std"]
    _log_table("activations stats: \n", activations, header)


def print_summary(**kwargs):
    """Log the ``item / value`` summary table of the keyword arguments.

    Example:
        >>> print_summary(total_flops="1.000 KOPs")
    """
    logger.info("summary\n" + tabulate.tabulate([["item", "value"]] + list(kwargs.items())))


def _load_tensor(x):
    if isinstance(x, np.ndarray):
        return Tensor(x)
    if isinstance(x, Tensor):
        return x
    if isinstance(x, collections.abc.Mapping):
        return {k: _load_tensor(v) for k, v in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # a namedtuple
        return type(x)(*(_load_tensor(v) for v in x))
    if isinstance(x, collections.abc.Sequence):
        return [_load_tensor(v) for v in x]
    return Tensor(x, dtype=np.float32)


def module_stats(model, inputs: Iterable[np.ndarray] = None, input_shapes: list = None, cal_params: bool = True,
                 cal_flops: bool = True, cal_activations: bool = True, logging_to_stdout: bool = True,
                 bar_length_max: int = 20):
    r"""Calculate (and log) ``model``'s parameters, FLOPs and activations, as MegEngine's ``module_stats``.

    The model runs one forward in eval mode (its training flags are restored afterwards). Without ``inputs`` and
    ``input_shapes`` it logs an error and returns None, as MegEngine's.

    Args:
        model: the module.
        inputs: the forward inputs (arrays, Tensors, numbers, or nested lists / dicts of them; one array is one
            input; non-array leaves become float32 Tensors).
        input_shapes: shapes of float32 zero inputs, used when ``inputs`` is None.
        cal_params: compute parameter statistics.
        cal_flops: compute FLOPs.
        cal_activations: compute activation statistics.
        logging_to_stdout: log the per-module tables (the summary is always logged, as MegEngine does).
        bar_length_max: width of the bars drawn in the tables.

    Returns:
        ``(total_stats(param_size, param_dims, flops, act_size, act_dims), module_stats(params, flops,
        activations))``: the second holds MegEngine's per-row dicts, each list ending with a ``total`` row. As
        in MegEngine, the parameters a hooked module reads are listed also with ``cal_params=False`` (the
        summary's ``#params``; the rows are then not totalled).

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
        logger.error("Inputs or input_shapes is required for running model and calculating stats.", exc_info=True)
        return None

    disable_receptive_field()
    params, flops, activations, hooks = [], [], [], []
    recorded = set()  # ids of the parameters already listed
    module_to_name = {}

    def record_param(name, p):
        if p is not None and id(p) not in recorded:
            st = get_param_stats(p)
            st["name"] = name
            params.append(st)
            recorded.add(id(p))

    def hook(module, ins, outs, name=""):
        class_name = type(module).__name__
        if cal_flops:
            st = get_op_stats(module, ins, outs)
            if st is not None:
                st["name"], st["class_name"] = name, class_name
                flops.append(st)
        if cal_params:
            record_param(name + "-w", getattr(module, "weight", None))
            record_param(name + "-b", getattr(module, "bias", None))
        if cal_activations:
            out = outs[0] if isinstance(outs, (tuple, list)) else outs
            st = get_activation_stats(out, has_inputs)
            st["name"], st["class_name"] = name, class_name
            activations.append(st)

    for name, m in model.named_modules():
        if isinstance(m, tuple(hook_modules)):
            hooks.append(m.register_forward_hook(functools.partial(hook, name=name)))
            module_to_name[id(m)] = name

    # MegEngine lists a hooked module's weight / bias when its forward reads them (a module reading another's
    # weight lists it under the reader's name too; also with cal_params=False): the params table is in the
    # order of the reads. (MegEngine raises a KeyError when a module it does not hook reads its own ``weight``;
    # such a read is not listed here.)
    def reading(module, item):
        member = object.__getattribute__(module, item)
        if item in ("weight", "bias") and id(module) in module_to_name:
            record_param(module_to_name[id(module)] + ("-w" if item == "weight" else "-b"), member)
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
        total_param_dims, total_param_size, params = sum_param_stats(params, bar_length_max)
        extra["total_param_dims"] = sizeof_fmt(total_param_dims, suffix="")
        extra["total_param_size"] = sizeof_fmt(total_param_size)
        if logging_to_stdout:
            print_param_stats(params)
    if cal_flops:
        total_flops, flops = sum_op_stats(flops, bar_length_max)
        extra["total_flops"] = sizeof_fmt(total_flops, suffix="OPs")
        if logging_to_stdout:
            print_op_stats(flops)
    if cal_activations:
        total_act_dims, total_act_size, activations = sum_activations_stats(activations, bar_length_max)
        extra["total_act_dims"] = sizeof_fmt(total_act_dims, suffix="")
        extra["total_act_size"] = sizeof_fmt(total_act_size)
        if logging_to_stdout:
            print_activations_stats(activations, has_inputs)
    if cal_flops and cal_params and total_param_size != 0:
        extra["flops/param_size"] = "{:3.3f}".format(total_flops / total_param_size)
    print_summary(**extra)
    return (total_stats(param_size=total_param_size, param_dims=total_param_dims, flops=total_flops,
                        act_size=total_act_size, act_dims=total_act_dims),
            stats_details(params=params, flops=flops, activations=activations))


@contextlib.contextmanager
def _eval_mode(model):
    training = {id(m): m.training for m in model.modules()}
    model.eval()
    try:
        yield model
    finally:
        for m in model.modules():
            m.training = training[id(m)]
