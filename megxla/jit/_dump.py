"""``trace.dump``: write a traced function as a portable artifact, with MegEngine's dump contract.

What is written (one pickled dict, ``megbrain_graph.FORMAT``):

- ``exported``: a serialized ``jax.export`` StableHLO module computing the returned tensors from the tensor
  arguments (positional ones, then keyword ones). As in MegEngine's ``capture_as_const`` dump (MegEngine requires
  that flag; megxla dumps the same graph without it), everything else
  the function read -- module parameters and buffers, optimizer state, captured tensors, the RNG key -- is a
  constant with its current value.
- ``graph``: a *view* of the same computation in MegEngine's vocabulary (operators ``Host2DeviceCopy`` for
  inputs, ``ImmutableTensor`` for constants, ``Elemwise`` with its mode name, ``Reduce``, ``TypeCvt``...; unique
  operator and variable names; shapes and dtypes) that ``megbrain_graph.load_graph``, ``comp_graph_tools`` and
  ``utils.network`` read. It is built from the same (simplified, pruned) op list the module is exported from.
- ``testcases``: inputs and expected outputs when ``input_data`` is given.

``optimize_for_inference`` options with a meaning here: ``enable_io16xc32`` (float32 values between operators are
stored as float16, computed in float32; float32 inputs get a ``TypeCvt``) and ``enable_ioc16`` (float16 storage
and compute). Layout options (``enable_nchw44``...) are for MegEngine's kernels; XLA picks layouts itself.
"""
from __future__ import annotations

import collections
import hashlib
import pickle
import re

import numpy as np

from ..core._op import PRIMITIVES
from ..core._tensor import Tensor
from ..core.tensor.megbrain_graph import FORMAT
from ._recording import TraceError, describe_where, prune
from ._simplify import simplify

__all__ = ["dump", "DumpInfo"]

NO_OUTPUT = ("the traced function without return values cannot be dumped, the traced function should return "
             "List[Tensor] or Dict[str, Tensor]")


_DUMP_FIELDS = ("nr_opr", "tot_bytes", "tensor_value_bytes", "content_hash", "inputs", "outputs", "params")


class DumpInfo(collections.namedtuple("CompGraphDumpResult", _DUMP_FIELDS)):
    """What ``trace.dump`` wrote: MegEngine's ``CompGraphDumpResult`` namedtuple (``info.inputs`` or, as
    MegEngine's own tests read it, ``info[4]``), plus the ``jax.export`` module.

    Attributes:
        nr_opr: number of operators in the graph (inputs and constants included).
        tot_bytes: size of the file content written.
        tensor_value_bytes: bytes of constant values.
        content_hash: SHA-256 of the content.
        inputs: input names; outputs: output names; params: the graph's shared (``SharedDeviceTensor``) parameters,
            empty as MegEngine's: a traced step's captured tensors are written as constants (``ImmutableTensor``).
        exported: the ``jax.export.Exported`` module (not part of the tuple).
    """

    def __new__(cls, exported=None, **fields):
        self = super().__new__(cls, **fields)
        self.exported = exported
        return self

    def __repr__(self):
        # MegEngine's dump returns the namedtuple itself: users print every field, under its class name
        return "CompGraphDumpResult" + super().__repr__()[len(type(self).__name__):]


# --- MegEngine operator names of our primitives (the graph view) ------------------------------------------------
_TYPES = {
    "astype": "TypeCvt", "reshape": "Reshape", "broadcast_to": "Broadcast", "concat": "Concat",
    "transpose": "Dimshuffle", "expand_dims": "AddAxis", "squeeze": "RemoveAxis", "matmul": "MatrixMul",
    "dot": "Dot", "conv": "ConvolutionForward", "conv_transpose": "ConvolutionBackwardData",
    "getitem": "Subtensor", "setitem": "SetSubtensor", "split": "Split", "stack": "Stack", "topk": "TopK",
    "sort": "Argsort", "full": "Fill", "full_like": "Fill", "max_pool": "PoolingForward",
    "avg_pool": "PoolingForward", "adaptive_pool": "AdaptivePoolingForward", "softmax": "Softmax",
    "batch_norm_infer": "BatchNorm", "batch_norm_train": "BatchNorm", "warp_perspective": "WarpPerspective",
    "warp_affine": "WarpAffine", "resize": "Resize", "remap": "Remap", "nms": "NMSKeep", "dropout": "Dropout",
    "rng_uniform": "UniformRNG", "rng_normal": "GaussianRNG", "arange": "Linspace", "linspace": "Linspace",
    "eye": "Eye", "where": "Where", "clip": "Elemwise", "cumsum": "Cumsum", "tile": "Tile", "repeat": "Repeat",
    "flip": "Flip", "roll": "Roll", "pad": "Padding", "one_hot": "OneHot", "gather": "IndexingOneHot",
    "indexing_one_hot": "IndexingOneHot", "layer_norm": "LayerNorm", "group_norm": "GroupNorm",
    "copy": "Copy", "tensor_copy": "Copy", "device_put": "Copy", "detach": "Identity", "vjp": "VJP",
    "xla_graph": "XLAGraph", "fake_quant": "FakeQuant", "tqt": "TQT", "lsq": "LSQ",
    # quantized dtypes are casts in MegEngine's graph
    "quantize": "TypeCvt", "dequantize": "TypeCvt", "requantize": "TypeCvt",
    "requantize_add": "ElemwiseMultiType",
}


def _elemwise_modes():
    from ..core.ops import builtin, elemwise
    modes = {}
    for mode, key in builtin._UNARY_MODES.items():
        modes.setdefault(key, mode)
    for mode, key in builtin._BINARY_MODES.items():
        modes.setdefault(elemwise._PUBLIC.get(key, key), mode)
    names = set(elemwise.UNARY) | {elemwise._PUBLIC.get(k, k) for k in elemwise.BINARY}
    return modes, names


_MODES = None


def opr_type(op):
    """``(MegEngine operator type, operator name)`` of an op: ``("Elemwise", "ADD")``, ``("Reduce", "Reduce")``."""
    global _MODES
    if _MODES is None:
        _MODES = _elemwise_modes()
    modes, elemwise_names = _MODES
    name = op.name
    if name in elemwise_names or name == "clip":
        return "Elemwise", modes.get(name, name.upper())
    if name.startswith("reduce_") or name in ("logsumexp", "argmax", "argmin"):
        return "Reduce", name.upper()
    t = _TYPES.get(name) or "".join(p.capitalize() for p in name.split("_"))
    return t, t


# Elemwise modes whose operands MegEngine's graph may reorder (a constant operand goes last: `2 * x` is MUL(x, 2))
_COMMUTATIVE = {"ADD", "MUL", "MAX", "MIN", "AND", "OR", "XOR", "EQ"}


def _scoped(scope, name):
    return f"{scope}.{name}" if scope else name


class _Names:
    """Unique names: the first ``x``, then ``x_1``, ``x_2``..."""

    def __init__(self):
        self.count = {}

    def __call__(self, base):
        n = self.count.get(base, 0)
        self.count[base] = n + 1
        return base if n == 0 else f"{base}_{n}"


# --- the dump ------------------------------------------------------------------------------------------------------
def _arg_bindings(sig):
    """``[(state index, name or None)]`` of the tensor arguments: positional ones (named later), then keyword
    ones (named by their keyword), read off the call signature ``collect`` built."""
    def tensor_index(item):
        if isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], int):
            return item[0]
        return None

    pos, kw = sig[:2]  # (sig[2]: the context key)
    out = [(tensor_index(it), None) for it in pos[1:]]
    if kw and kw[0] == "dict":
        out += [(tensor_index(it), k) for k, it in kw[1:]]
    return [(i, k) for i, k in out if i is not None]


def _output_names(out_tree, n, given, what):
    import jax
    struct = jax.tree_util.tree_unflatten(out_tree, list(range(n)))
    keys = None
    if isinstance(struct, dict):
        keys = [None] * n
        for k, i in struct.items():
            if isinstance(i, int):
                keys[i] = str(k)
    if given is not None:
        if keys is not None:
            raise TypeError("cannot specify output_names when output is already in dict format")
        given = [given] if isinstance(given, str) else list(given)
        if len(given) != n:
            raise ValueError(f"wrong number of output_names, should be {n} values")
        return given
    return keys


_TRAINING_BN = frozenset({"batch_norm_train", "batch_norm_train_update"})


def dump(tracer, file, *, arg_names=None, output_names=None, optimize_for_inference=True, input_data=None,
         repeat=1, enable_io16xc32=False, enable_ioc16=False, user_info=None, **unused):
    """See :meth:`megxla.jit.trace.dump`."""
    import jax
    what = tracer._what
    call = tracer.__dict__.get("_dump_call")
    variants = tracer._cache.get(call[0]) if call is not None else None
    if not variants and tracer._churning:
        # (the last call ran the body as auto-jit clusters, or eagerly: nothing recorded it)
        raise RuntimeError(
            f"{what}.dump: the step's last calls ran as auto-jit clusters, not as a recording (most calls recorded "
            f"again: new Python float values, or values read on the host, changed), so there is no recording of "
            f"its last call to dump. Pass a changing number as a Tensor, or trace with capture_as_const=True (a "
            f"step traced to be dumped records per value)")
    if not variants:
        raise RuntimeError(f"{what}.dump: call the traced function first (its last call's recording is dumped)")
    sig, state = call
    entry = variants[0]
    if entry.guards:
        raise TraceError(f"{what}.dump: the step read a value on the host while recording (at "
                         f"{describe_where(entry.guards[0][2])}); a dumped step cannot check it, so it would be "
                         f"silently wrong for other values. Move the read out of the step, or pad to a fixed size")
    rec, avals = entry.rec, entry.avals
    out_pos = [i for i, (kind, _) in enumerate(entry.out_leaves) if kind == "t"]
    if not out_pos:
        # (a step with no return statement returns None: MegEngine's message alone, as its
        # test_dump_without_output_error compares it)
        values = [v for kind, v in entry.out_leaves if kind == "v" and v is not None]
        if values:
            # MegEngine's symbolic trace makes x.shape a Tensor, so a step returning a shape entry (upstream
            # test_subtensor_when_shape_invalid) returns a Tensor there; here shapes are Python ints
            raise ValueError(f"{NO_OUTPUT}; it returned only Python values ({', '.join(map(repr, values[:4]))}): "
                             f"shapes are static in megxla, so x.shape[i] and numbers computed from it are Python "
                             f"ints, not Tensors. Return mge.tensor(value) to dump it as a constant output")
        raise ValueError(NO_OUTPUT)
    values = [(i, v) for i, (kind, v) in enumerate(entry.out_leaves) if kind == "v"]
    if values:
        # MegEngine asserts at the call ("Only support return tensors when capture_as_const is enabled"); a dump
        # that dropped them would load with fewer outputs than the function returns, in other positions
        shown = ", ".join(f"output {i}: {v!r}" for i, v in values[:4])
        raise ValueError(f"{what}.dump: the traced function returned Python values beside its Tensors ({shown}); a "
                         f"dumped graph has only Tensor outputs, so they would be dropped and the outputs renumbered. "
                         f"Return mge.tensor(value) to dump a value as a constant output, or leave it out")
    names_by_leaf = _output_names(entry.out_tree, len(entry.out_leaves), output_names, what)
    out_vids = [entry.out_leaves[i][1] for i in out_pos]

    bindings = _arg_bindings(sig)
    if arg_names is not None:
        arg_names = [arg_names] if isinstance(arg_names, str) else list(arg_names)
        npos = sum(1 for _, k in bindings if k is None)
        if len(arg_names) != npos:
            raise ValueError(f"wrong number of arg_names, should be {npos} values")
    pos_names = iter(arg_names or [f"arg_{i}" for i in range(len(bindings))])
    inputs = []  # [(vid, name)]
    for i, k in bindings:
        vid = rec.input_vids[i]
        name = k if k is not None else next(pos_names)
        if k is None and arg_names is None and state[i].name:  # a named argument tensor names its input
            name = state[i].name
        if vid not in {v for v, _ in inputs}:
            inputs.append((vid, name))
    in_vids = [v for v, _ in inputs]

    ops, aliases = simplify(rec.ops, avals, getattr(tracer, "opt_level", 2))
    ops = prune(ops, out_vids)
    if any(op.prim.name in _TRAINING_BN for op, _, _ in ops):
        # MegEngine refuses too: a dumped graph is for inference, and a training-mode BatchNorm normalizes by the
        # batch's statistics (its running statistics would never be used or updated)
        raise RuntimeError(f"{what}.dump: the traced step runs BatchNorm in training mode; call .eval() on the "
                           f"model before tracing a step to dump")
    fixed = _fixed_values(tracer, entry, state, ops, out_vids, set(in_vids))

    low = np.float16 if (enable_io16xc32 or enable_ioc16) else None
    compute_low = bool(enable_ioc16)

    def step(*args):
        env = dict(fixed)
        env.update(zip(in_vids, args))
        if low is not None:
            env = {v: _to(a, low) for v, a in env.items()}
        for op, ins, outs in ops:
            xs = [env[v] for v in ins]
            if low is not None and not compute_low:
                xs = [_to(x, np.float32, src=low) for x in xs]
            res = op.fn(*xs)
            res = res if op.multiple_results else (res,)
            if low is not None:
                res = [_to(r, low) for r in res]
            env.update(zip(outs, res))
        return tuple(env[v] for v in out_vids)

    exported = jax.export.export(jax.jit(step))(*[avals[v] for v in in_vids])
    view, out_names, params = _view(ops, aliases, inputs, fixed, out_vids, dict(avals), names_by_leaf, out_pos, low,
                                    rec.scopes, rec.out_names, _tensor_names(tracer, entry, state))
    testcases = _testcases(input_data, inputs, avals, exported, repeat) if input_data is not None else []
    blob = {"format": FORMAT, "exported": bytes(exported.serialize()), "arg_names": [n for _, n in inputs],
            "output_names": out_names, "graph": view, "testcases": testcases,
            "user_info": pickle.dumps(user_info), "optimize_for_inference": bool(optimize_for_inference)}
    content = _dumps(blob)
    if hasattr(file, "write"):
        file.write(content)
    else:
        with open(file, "wb") as fh:
            fh.write(content)
    nbytes = sum(np.asarray(a).nbytes for v, a in fixed.items() if v in params)
    return DumpInfo(nr_opr=len(view["oprs"]), tot_bytes=len(content), tensor_value_bytes=nbytes,
                    content_hash=hashlib.sha256(content).hexdigest(), inputs=[n for _, n in inputs],
                    outputs=out_names, params=[], exported=exported)


def _to(x, dtype, src=np.float32):
    # the float32 <-> float16 storage conversion of enable_io16xc32 / enable_ioc16 (other dtypes untouched)
    return x.astype(dtype) if getattr(x, "dtype", None) == np.dtype(src) else x


def _fixed_values(tracer, entry, state, ops, out_vids, in_vids):
    """The current value of every value the dumped ops read that is not an input (capture_as_const)."""
    rec = entry.rec
    needed = {v for _, ins, _ in ops for v in ins} | set(out_vids)
    produced = {v for _, _, outs in ops for v in outs}
    state_of = {v: i for i, v in enumerate(rec.input_vids)}
    grad_of = {v: i for i, v in rec.grad_inputs}
    fixed = {}
    for v in needed - produced - in_vids:
        if v in rec.hyper:
            fixed[v] = np.asarray(rec.hyper[v](), entry.avals[v].dtype)
        elif v in rec.consts:
            fixed[v] = rec.consts[v]
        elif v in state_of:
            fixed[v] = state[state_of[v]]._data
        elif v in grad_of:
            g, aval = state[grad_of[v]]._grad, entry.avals[v]
            fixed[v] = g._data if g is not None and g.shape == aval.shape else np.zeros(aval.shape, aval.dtype)
        else:
            raise RuntimeError(f"{tracer._what}.dump: internal: value {v} of the recording has no source")
    return fixed


def _tensor_names(tracer, entry, state):
    """``{vid: MegEngine name}`` of the traced module's tensors read as constants: its name, the attribute path,
    the tensor's own name for the last part (``"simple.linear.weight"``, ``"simple.k"``), as MegEngine names
    a module's tensors on assignment."""
    fn = tracer.__wrapped__
    # The modules the step reads: itself, a bound method's, its closure's and its globals' (MegEngine names a
    # module's tensors when they are assigned, whatever traces them: ``def fwd(data): return net(data)`` dumps
    # ``conv1.weight``, upstream utils/test_network.py::test_query)
    found = [fn, getattr(fn, "__self__", None)]
    code = getattr(fn, "__code__", None)
    if code is not None:
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                found.append(cell.cell_contents)
            except ValueError:  # (a cell not yet bound)
                pass
        found += [fn.__globals__.get(k) for k in code.co_names]
    names = {}
    for m in found:
        # (a Module by what it does: jit imports only core)
        named_tensors = getattr(m, "named_tensors", None)
        if isinstance(m, type) or not callable(named_tensors):
            continue
        top = getattr(m, "name", None)
        for key, t in named_tensors():
            parts = key.split(".")
            parts[-1] = t.name or parts[-1]
            # a tensor captured as a constant is recorded under the value id it still has (an inference step
            # changes no parameter); one that is state, under its value id at the call's start
            names.setdefault(t._vid, ".".join(([top] if top else []) + parts))
    for i, v in enumerate(entry.rec.input_vids):
        if state[i]._vid in names:
            names.setdefault(v, names[state[i]._vid])
    return names


def _view(ops, aliases, inputs, fixed, out_vids, avals, names_by_leaf, out_pos, low, scopes=None, out_named=None,
          const_names=None):
    """The graph view (plain data, see megbrain_graph.Graph), output names and ``{const vid: name}``."""
    names = _Names()
    scopes, out_named = scopes or {}, out_named or {}
    oprs, vars_ = [], {}
    real = {}  # our vid -> the view variable that holds it

    def dtype_of(v):
        dt = np.dtype(avals[v].dtype)
        return np.dtype(low) if low is not None and dt == np.float32 else dt

    def add_var(vid, name, dtype=None):
        vars_[vid] = (vid, name, tuple(avals[vid].shape) if vid in avals else (), str(dtype or dtype_of(vid)))
        return vid

    next_id = [max([v for v in avals] + [0]) + 1]

    def fresh():
        next_id[0] += 1
        return next_id[0]

    for vid, name in inputs:
        nm = names(name)
        src = np.dtype(avals[vid].dtype)
        add_var(vid, nm, src)
        oprs.append((len(oprs), "Host2DeviceCopy", nm, {}, [], [vid]))
        real[vid] = vid
        if low is not None and src == np.float32:  # io16: the input is converted once, right after the copy
            cv = fresh()
            vars_[cv] = (cv, names(f"{nm}_f16"), tuple(avals[vid].shape), str(np.dtype(low)))
            oprs.append((len(oprs), "TypeCvt", vars_[cv][1], {"dtype": str(np.dtype(low))}, [vid], [cv]))
            real[vid] = cv
    params = {}
    const_names = const_names or {}
    for vid in fixed:
        nm = names(const_names.get(vid, "const"))
        params[vid] = nm
        add_var(vid, nm)
        oprs.append((len(oprs), "ImmutableTensor", nm, {"value": np.asarray(fixed[vid])}, [], [vid]))
        real[vid] = vid
    # An op whose inputs are all constants is a constant of the graph too, as MegEngine's trace computes such ops
    # while recording (a quantized layer's bias cast is no operator of its dumped graph); random draws stay ops
    known, folded = dict(fixed), set()
    for op, ins, outs in ops:
        if (ins and outs and outs[0] not in aliases and all(v in known for v in ins)
                and not (op.name.startswith("rng_") or op.name == "dropout")):
            res = op.fn(*[known[v] for v in ins])
            for v, r in zip(outs, res if op.multiple_results else (res,)):
                known[v] = np.asarray(r)
                folded.add(v)
                add_var(v, names("const"))
                oprs.append((len(oprs), "ImmutableTensor", vars_[v][1], {"value": known[v]}, [], [v]))
                real[v] = v
    # MegEngine's operators, named as its AutoNaming does: the module scope the op ran in, then the operator
    # ("simple.linear.ADD"); a name several operators share gets "[i]" on each ("simple.RELU[0]", ...[1])
    planned = []  # (type, name, attributes, input vids, output vids, scope); type None: an alias of an input
    for op, ins, outs in ops:
        if outs and outs[0] in folded:
            continue
        if outs and outs[0] in aliases:  # a rewrite made this result one of its inputs
            planned.append((None, None, None, ins, outs, None, None))
            continue
        scope = scopes.get(outs[0]) if outs else None
        type_, base = opr_type(op)
        attrs = {k: _plain(v) for k, v in op.params} if op.params else {}
        if op.name in ("linear", "qlinear"):  # one fused primitive here; MegEngine's is MatrixMul (+ ADD of the bias)
            mm = fresh() if len(ins) >= 3 else outs[0]
            avals.setdefault(mm, avals.get(outs[0]))
            # (replayed as linear without its bias, then add: x @ w.T + b, the fused op's own terms)
            split = op.name == "linear" and low is None
            planned.append(("MatrixMul", "MatrixMul", {"transposeB": True}, ins[:2], (mm,), scope,
                            PRIMITIVES["linear"].bind() if split else None))
            if len(ins) >= 3:
                planned.append(("Elemwise", "ADD", {}, (mm, ins[2]), outs, scope,
                                PRIMITIVES["add"].bind() if split else None))
            continue
        if type_ == "Elemwise" and base in _COMMUTATIVE and len(ins) == 2 and ins[0] in fixed and ins[1] not in fixed:
            ins = (ins[1], ins[0])  # MegEngine's graph puts the constant operand of a commutative op last
        planned.append((type_, base, attrs, ins, outs, scope, _replayable(op) if low is None else None))
    counts = collections.Counter(_scoped(p[5], p[1]) for p in planned if p[0] is not None)
    seen = collections.Counter()
    replay = {}  # operator id -> the op that computes it (``utils.network`` replays a loaded graph with them)
    for type_, base, attrs, ins, outs, scope, op in planned:
        if type_ is None:
            real[outs[0]] = real[aliases[outs[0]]]
            continue
        full = _scoped(scope, base)
        if counts[full] > 1:
            seen[full] += 1
            full = f"{full}[{seen[full] - 1}]"
        nm = names(full)
        for i, v in enumerate(outs):
            add_var(v, nm if len(outs) == 1 else names(f"{nm}:{i}"))
            real[v] = v
        if op is not None:
            replay[len(oprs)] = op
        oprs.append((len(oprs), type_, nm, attrs, [real[v] for v in ins], list(outs)))
    out_view = [real[v] for v in out_vids]
    out_names = []
    for leaf_i, v, ov in zip(out_pos, out_view, out_vids):
        given = names_by_leaf[leaf_i] if names_by_leaf is not None else out_named.get(ov)
        produced_here = not any(o[1] in ("Host2DeviceCopy", "ImmutableTensor") and o[5] == [v] for o in oprs)
        if given is not None and produced_here:
            vars_[v] = (v, given, *vars_[v][2:])  # the output variable takes the output's name
        out_names.append(given if given is not None else vars_[v][1])
    # only what the outputs depend on (an unused input stays: it is part of the signature)
    live, kept = set(out_view), []
    for o in reversed(oprs):
        if live.intersection(o[5]) or o[1] == "Host2DeviceCopy":
            live.update(o[4])
            kept.append(o)
    kept.reverse()
    kept_vars = {v for o in kept for v in o[4] + o[5]}
    view = {"oprs": kept, "vars": [vars_[v] for v in vars_ if v in kept_vars], "inputs": [v for v, _ in inputs],
            "outputs": out_view, "output_names": out_names,
            "ops": {o[0]: replay[o[0]] for o in kept if o[0] in replay}}
    return view, out_names, {v: n for v, n in params.items() if v in kept_vars}


def _replayable(op):
    """``op`` if it pickles (a primitive's name and plain parameters), else None: a loaded graph's operator that
    ``Network.dump`` can compute again. An op holding a function or a nested graph (``xla_graph``) does not."""
    try:
        _dumps(op)
    except Exception:
        return None
    return op


def _device_by_id(platform, index):
    """The device a dumped op named (``device_put[device=...]``): the same platform's device ``index`` here, else
    JAX's default device (a file written on another machine)."""
    import jax
    try:
        return jax.devices(platform)[index]
    except (RuntimeError, IndexError):
        return jax.devices()[0]


def _dumps(obj):
    # NOTE: a JAX device (a copy op's parameter) does not pickle; the dump names it by platform and index, so a
    # loaded graph's copy ops can be computed again (``Network.dump``) -- this pickler only, pickling elsewhere is
    # unchanged
    import copyreg
    import io
    import jax
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = copyreg.dispatch_table.copy()
    for dev in jax.devices():
        pickler.dispatch_table[type(dev)] = lambda d: (_device_by_id, (d.platform, d.id))
    pickler.dump(obj)
    return buf.getvalue()


def _plain(value):
    # op parameters as plain data (the view is pickled; a nested graph's replay function is not)
    if value is None or isinstance(value, (bool, int, float, str, np.ndarray, np.generic)):
        return value
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return repr(value)


_RAND = re.compile(r"^#rand\(([^)]*)\)$")


def _testcases(input_data, inputs, avals, exported, repeat):
    """MegEngine's ``input_data`` specs (``"#rand(min, max[, shape...])"``, ``"name:#rand(...)"``,
    ``"name:file.npy"`` or a pickled array, ``;`` between inputs) -> ``[{"inputs", "outputs"}]``."""
    specs = [input_data] if isinstance(input_data, str) else list(input_data)
    cases = []
    for spec in specs:
        parts = [p.strip() for p in spec.split(";") if p.strip()]
        feed = {}
        for part in parts:
            name, _, body = part.rpartition(":") if not part.startswith("#") else ("", "", part)
            if not name:
                if len(inputs) != 1:
                    raise ValueError(f"dump: input_data {part!r} names no input; the graph has inputs "
                                     f"{[n for _, n in inputs]}")
                name = inputs[0][1]
            match = [v for v, n in inputs if n == name]
            if not match:
                raise ValueError(f"dump: input_data names {name!r}, not an input ({[n for _, n in inputs]})")
            aval = avals[match[0]]
            feed[name] = _make_input(body, aval, repeat)
        missing = [n for _, n in inputs if n not in feed]
        if missing:
            raise ValueError(f"dump: input_data {spec!r} gives no value for inputs {missing}")
        arrays = [feed[n] for _, n in inputs]
        cases.append({"inputs": feed, "outputs": [np.asarray(o) for o in exported.call(*arrays)]})
    return cases


def _make_input(body, aval, repeat):
    shape = tuple(aval.shape)
    m = _RAND.match(body.replace(" ", ""))
    if m:
        args = [a for a in m.group(1).split(",") if a]
        lo, hi = float(args[0]), float(args[1])
        dims = args[2:]
        if dims and dims[-1] == "...":
            dims = [int(d) for d in dims[:-1]] + list(shape[len(dims) - 1:])
        target = tuple(int(d) for d in dims) if dims else shape
        data = np.random.uniform(lo, hi, size=target)
    else:
        try:
            data = np.load(body, allow_pickle=False)
        except ValueError:
            with open(body, "rb") as fh:
                data = pickle.load(fh)
        data = np.concatenate([np.asarray(data)] * int(repeat)) if repeat > 1 else np.asarray(data)
    if data.shape != shape:
        if data.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"dump: input_data {body!r} has shape {data.shape}, the input has shape {shape}")
        data = data.reshape(shape)  # MegEngine feeds a scalar input as shape (1,)
    return data.astype(aval.dtype)
