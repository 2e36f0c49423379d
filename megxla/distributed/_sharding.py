"""What fully_shard / shard_optimizer / parallelize share: how a parameter is split, the three collectives of
sharded training, the class swap, and the root module's full / per-rank checkpoints (:class:`ShardedModule`).

A sharded parameter is an ordinary ``Parameter`` holding this rank's block; the list of :class:`Split` s applied
to the full tensor to get it (``"tp"`` first, then ``"fsdp"``; ``"zero"`` for an optimizer's blocks) is kept
here, by the parameter's owner module and attribute name, and by the parameter itself (for ``clip_grad_norm``).
"""
from __future__ import annotations

import collections
import weakref

import numpy as np

from ..core._tensor import Parameter, Tensor
from ..module.module import _xnorm_types
from .group import WORLD, Group, is_distributed

__all__ = ["Split", "ShardedModule", "shard_gather", "shard_gather_many", "copy_to", "reduce_from", "splits_of",
           "param_splits"]


class Split(collections.namedtuple("Split", "kind group axis full scalar", defaults=(False,))):
    """One split of a tensor over ``group`` along ``axis``; ``full``: that axis's length before it (an FSDP
    split pads it up to a multiple of the group size; a 0-d tensor, ``scalar``, is split as shape ``(1,)``)."""

    @property
    def n(self):
        return 1 if _trivial(self.group) else self.group.size

    @property
    def rank(self):
        return 0 if _trivial(self.group) else self.group.rank

    @property
    def block(self):
        return -(-self.full // self.n)

    def local(self, value: np.ndarray) -> np.ndarray:
        """This rank's block of the (numpy) ``value``."""
        if value.ndim == 0:
            value = value.reshape(1)
        if self.kind != "tp" and self.block * self.n != self.full:  # (tensor parallel splits must divide)
            pad = [(0, 0)] * value.ndim
            pad[self.axis] = (0, self.block * self.n - self.full)
            value = np.pad(value, pad)
        k = self.block
        return np.take(value, np.arange(self.rank * k, (self.rank + 1) * k), axis=self.axis)


def _trivial(group):
    return group is None or not is_distributed() or group.size == 1


def _group(group, owner):
    group = WORLD if group is None else group
    if not isinstance(group, Group):
        raise TypeError(f"{owner}: group must be a megxla.distributed.Group, got {type(group).__name__}")
    return group


# ---- the collectives of sharded training (modes of the one collective op, see _collective) --------------------
def _coll(mode, x, group, **kw):
    from ..functional.distributed import _coll as coll
    return coll(mode, x, group, **kw)


def shard_gather(x: Tensor, group: Group, length: int = None, axis: int = 0) -> Tensor:
    """``all_gather`` of the ranks' blocks, cut to ``length`` along ``axis`` (the last block's padding dropped),
    whose gradient is the MEAN reduce-scatter over the group (the average of data-parallel training). A GradManager
    does not keep its result for the backward pass, which gathers again (``Primitive.remat``). (A fully sharded
    unit's parameters: :func:`shard_gather_many`.)"""
    if _trivial(group):
        return x if length is None or length == x.shape[axis] else x[(slice(None),) * axis + (slice(0, length),)]
    return _coll("shard_gather", x, group, axis=axis, length=length)


def shard_gather_many(blocks, group: Group, lengths, kept: bool = False) -> list:
    """:func:`shard_gather` of several blocks (of one dtype) along their first axis, each cut to its length in
    ``lengths``, as one ``all_gather`` whose gradient is one MEAN reduce-scatter: a fully sharded unit's parameters
    (a Linear's weight and bias: one collective each way instead of two). Rematerialized as :func:`shard_gather`,
    unless ``kept``: then a GradManager's tape holds the results, as any op's."""
    if _trivial(group):
        return [shard_gather(b, group, length) for b, length in zip(blocks, lengths)]
    from ..core._dispatch import apply
    from ..functional.distributed import _where
    from . import _collective
    params = dict(lengths=tuple(lengths), **_where(group))
    if kept:
        params["kept"] = True
    return list(apply(_collective.shard_gather_packed.bind(**params), *blocks))


def copy_to(x: Tensor, group: Group) -> Tensor:
    """Identity whose gradient is the sum over the group (Megatron's ``f``: a replicated input entering a
    tensor-parallel region, whose ranks each contribute part of its gradient)."""
    return x if _trivial(group) else _coll("copy_to", x, group)


def reduce_from(x: Tensor, group: Group) -> Tensor:
    """Sum over the group whose gradient is the identity (Megatron's ``g``: the partial outputs of a row-split
    layer summed into a replicated output, whose gradient is already the same on every rank)."""
    return x if _trivial(group) else _coll("reduce_from", x, group)


# ---- the splits of parameters ----------------------------------------------------------------------------------
_MODULE_SPLITS = weakref.WeakKeyDictionary()  # module -> {attribute: [Split, ...]}
_PARAM_SPLITS = {}  # id(shard Parameter) -> (weakref, [Split, ...])


def splits_of(module) -> dict:
    """``{attribute name: [Split, ...]}`` of ``module``'s own sharded parameters (empty if none)."""
    return _MODULE_SPLITS.get(module, {})


def param_splits(p) -> list:
    """The splits of a sharded parameter (empty for a replicated one)."""
    entry = _PARAM_SPLITS.get(id(p))
    return entry[1] if entry is not None and entry[0]() is p else []


def own_parameters(module, owner):
    """``[(attribute, Parameter)]`` held directly by ``module`` (sharding rebinds attributes, so parameters held
    inside lists or dicts of one module are refused, naming them)."""
    from ..module.module import _is_parameter
    out = []
    for key, p in module._flatten(recursive=False, with_key=True, predicate=_is_parameter):
        if "." in key:
            raise ValueError(f"{owner}: parameter {key!r} of {type(module).__name__} is held in a container; only "
                             f"parameters that are attributes of their module can be sharded")
        out.append((key, p))
    return out


def split_parameter(module, name, split: Split):
    """Replace ``module.<name>`` by a new Parameter holding this rank's block under ``split``; returns it."""
    old = module.__dict__[name]
    prior = list(splits_of(module).get(name, []))
    block = split.local(np.asarray(old.numpy()))
    new = Parameter(block, dtype=old.dtype)
    module.__dict__[name] = new  # (no epoch bump needed: done before any compiled step reads the module)
    splits = _MODULE_SPLITS.setdefault(module, {})
    splits[name] = prior + [split]
    _PARAM_SPLITS[id(new)] = (weakref.ref(new), splits[name])
    weakref.finalize(new, _PARAM_SPLITS.pop, id(new), None)
    from ..core import _registry
    _registry.bump_epoch()
    return new


def swap_class(module, mixin):
    """Make ``module`` an instance of a class deriving from ``mixin`` and its own class (PyTorch's FSDP2 does
    the same): the mixin's ``__call__`` / ``forward`` / ``state_dict`` run around the class's own."""
    cls = type(module)
    if issubclass(cls, mixin):
        return
    key = (mixin, cls)
    new = _CLASSES.get(key)
    if new is None:
        new = _CLASSES[key] = type(f"{mixin._prefix}{cls.__name__}", (mixin, cls), {"__module__": cls.__module__})
    module.__class__ = new


_CLASSES = {}


def full_value(module, name) -> np.ndarray:
    """The whole tensor of a sharded parameter, gathered from every rank (collective: all ranks call it)."""
    from ..functional.distributed import all_gather
    x = module.__dict__[name].detach()
    splits = splits_of(module)[name]
    for s in reversed(splits):
        if not _trivial(s.group):
            x = all_gather(x, s.group, axis=s.axis)
        if s.kind == "fsdp" and x.shape[s.axis] != s.full:
            x = x[(slice(None),) * s.axis + (slice(0, s.full),)]
    return np.asarray(x.numpy()).reshape(() if splits[0].scalar else x.shape)


class ShardedModule:
    """Mixin of the root of a sharded model: ``state_dict`` / ``load_state_dict`` speak full tensors (an ordinary
    checkpoint), ``sharded_state_dict`` / ``load_sharded_state_dict`` this rank's blocks."""

    _prefix = "Sharded"

    def _sharded_keys(self):
        """``{state_dict key: (module, attribute)}`` of every sharded parameter, in key order."""
        out = {}
        for prefix, m in self.named_modules():
            for name in splits_of(m):
                out[(prefix + "." if prefix else "") + name] = (m, name)
        return dict(sorted(out.items()))

    def state_dict(self, rst=None, prefix: str = "", keep_var: bool = False):
        r"""The model's state with every sharded parameter gathered into its full tensor: the checkpoint an
        unsharded model loads. A collective: every rank of the model's groups must call it (in the same
        order); with ``keep_var=True`` the values are this rank's Tensors (shards), as in ``Module``.

        Example:
            >>> sd = model.state_dict()   # on every rank  # doctest: +SKIP
            >>> if dist.get_rank() == 0: mge.save(sd, "model.pkl")  # doctest: +SKIP
        """
        out = super().state_dict(rst=rst, prefix=prefix, keep_var=keep_var)
        if keep_var:
            return out
        for key, (m, name) in self._sharded_keys().items():
            full = full_value(m, name)
            if np.ndim(out[prefix + key]) != full.ndim:  # normalisation layers' values are saved 1-D
                full = full.reshape(-1)
            full.flags.writeable = False
            out[prefix + key] = full
        return out

    def load_state_dict(self, state_dict, strict: bool = True):
        r"""Load an ordinary (full-tensor) checkpoint: each rank keeps its block of each sharded parameter.
        Every value is checked against the full shape before anything is assigned.

        Example:
            >>> model.load_state_dict(mge.load("model.pkl"))   # doctest: +SKIP
        """
        keys = self._sharded_keys()
        full_shapes = {k: self._full_shape(m, n) for k, (m, n) in keys.items()}

        def blocks(key, value):
            if value is None or key not in keys:
                return value
            value = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
            if value.size == int(np.prod(full_shapes[key])) and isinstance(keys[key][0], _xnorm_types()):
                value = value.reshape(full_shapes[key])  # normalisation layers: saved 1-D, held 4-D
            if tuple(value.shape) != full_shapes[key]:
                raise ValueError(f"load_state_dict: param `{key}` shape mismatch, should be {full_shapes[key]} "
                                 f"(the full tensor of a sharded parameter), got {tuple(value.shape)}")
            for s in splits_of(keys[key][0])[keys[key][1]]:
                value = s.local(value)
            return value

        if isinstance(state_dict, dict):
            mapped = {k: blocks(k, v) for k, v in state_dict.items()}
        elif callable(state_dict):
            closure = state_dict

            def mapped(k, var):
                return blocks(k, closure(k, var))
        else:
            raise ValueError(f"`state_dict` must load a dict or callable, got {type(state_dict)}")
        return super().load_state_dict(mapped, strict=strict)

    def _full_shape(self, m, name):
        splits = splits_of(m)[name]
        shape = list(m.__dict__[name].shape)
        for s in reversed(splits):
            shape[s.axis] = s.full
        return () if splits[0].scalar else tuple(shape)

    def sharded_state_dict(self):
        r"""This rank's blocks of the model's state (no communication), with a ``"__sharding__"`` entry
        describing the layout; :meth:`load_sharded_state_dict` loads it back on the same layout. For models too
        big to gather: each rank saves its own file.

        Example:
            >>> mge.save(model.sharded_state_dict(), f"ckpt.rank{dist.get_rank()}.pkl")  # doctest: +SKIP
            >>> model.load_sharded_state_dict(mge.load(f"ckpt.rank{dist.get_rank()}.pkl"))  # doctest: +SKIP
        """
        out = super().state_dict()
        out["__sharding__"] = self._layout()
        return out

    def load_sharded_state_dict(self, state_dict):
        r"""Load what :meth:`sharded_state_dict` wrote on this rank, on the same layout (else ``ValueError``
        before anything is assigned).

        Example:
            >>> model.load_sharded_state_dict(mge.load(f"ckpt.rank{dist.get_rank()}.pkl"))  # doctest: +SKIP
        """
        state_dict = dict(state_dict)
        layout = state_dict.pop("__sharding__", None)
        if layout != self._layout():
            raise ValueError(f"load_sharded_state_dict: the checkpoint was saved with the sharding {layout}, this "
                             f"model has {self._layout()} (load a full checkpoint with load_state_dict instead)")
        return super().load_state_dict(state_dict)

    def _layout(self):
        return {k: [(s.kind, list(s.group.proc_ranks) if not _trivial(s.group) else [0], s.axis, s.full)
                    for s in splits_of(m)[n]] for k, (m, n) in self._sharded_keys().items()}
