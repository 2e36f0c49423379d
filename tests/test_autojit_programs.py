"""Random programs, eager against auto-jit: the same values, gradients, parameters, optimizer slots, host reads and
errors (issue 30's "exactly eager's meaning", checked on code nobody wrote by hand).

Each program is a seeded list of statements over a pool of tensors -- elementwise ops, reductions, matmuls, ~35
functional ops (``FUNCS``: losses, norms, pooling, a convolution, interpolation, scatter, ``matinv``...),
indexing (integer, slice, boolean mask, ``cond_take``), in-place writes (``+=``, ``__setitem__``), host reads and
branches on them, random draws, dtype casts, shape ops, ``detach`` and the occasional bad call -- run as the body of
a training step (``GradManager`` recording, ``backward``, ``opt.step()``) for several iterations, so that auto-jit
collects, compiles on recurrence, runs cached executables, splits changing clusters and launches early. Both modes
run the same statements (the generator tracks shapes itself; only a branch reads data), and must agree. Loop
programs (``LoopProgram``) do the same at the level of a training loop's events: checkpoints saved and loaded
mid-run, eval forwards, a layer replaced, learning rates changed, gradients accumulated. And two programs run in
two threads under auto-jit (each thread collects its own clusters) must agree with each run alone, eagerly.

The same statements also run as the step function of ``xla_trace``, ``trace`` and ``trace(symbolic=True)``
(``traced_run``) and as a ``partial_trace`` op (``partial_run``), and the loops' steps through the three traces
(their Dropout left out: a traced function draws from a key of its own, as MegEngine's does), against the same
code called as written.

``python tests/test_autojit_programs.py 0:200 [--loops] [--threads | --xla_trace | --trace | --symbolic |
--partial]`` runs seeds 0-199 and prints the programs that disagree.
"""
from __future__ import annotations

import functools
import random
import sys

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import _autojit
from megxla.quantization import utils as _Q

# The values of a program have the shapes (3, 4), (4,), (1, 4), (3, 1) or (), which all broadcast to (3, 4), and
# selections of a data-dependent length
UNARY = {
    "tanh": F.tanh, "relu": F.relu, "abs": F.abs, "neg": F.neg, "sigmoid": F.sigmoid,
    "exp": lambda x: F.exp(F.clip(x, -5, 5)), "log1abs": lambda x: F.log(F.abs(x) + 1),
    "sqrt1abs": lambda x: F.sqrt(F.abs(x) + 1), "square": lambda x: x * x, "sin": F.sin,
}
BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "max": F.maximum, "min": F.minimum, "div": lambda a, b: a / (F.abs(b) + 1),
}
REDUCE = {"sum": F.sum, "mean": F.mean, "max": F.max, "min": F.min}
def _untied(v):
    """``v`` with its columns 1e-3 apart: an argsort's order must not hang on rounding noise (a BatchNorm of a
    constant column gives values equal up to it, which eager and a fused program round differently)."""
    return v + F.arange(4, dtype="float32") * 1e-3


# functional ops of (3, 4) values, each giving a value that broadcasts to (3, 4)
FUNCS = {
    "cumsum": lambda x, y: F.cumsum(x, axis=1),
    "logsumexp": lambda x, y: F.logsumexp(x, axis=1, keepdims=True),
    "softplus": lambda x, y: F.softplus(x), "gelu": lambda x, y: F.gelu(x), "silu": lambda x, y: F.silu(x),
    "leaky_relu": lambda x, y: F.leaky_relu(x, 0.1), "hswish": lambda x, y: F.hswish(x),
    "relu6": lambda x, y: F.relu6(x), "hsigmoid": lambda x, y: F.hsigmoid(x),
    "softmax": lambda x, y: F.softmax(x, axis=1), "erf": lambda x, y: F.erf(x),
    "argsort": lambda x, y: F.argsort(_untied(x), descending=True).astype("float32") * 0.1 + x,
    "repeat": lambda x, y: F.repeat(x[:, :2], 2, axis=1), "tile": lambda x, y: F.tile(x[:, :2], (1, 2)),
    "flip": lambda x, y: F.flip(x, 1), "roll": lambda x, y: F.roll(x, 1, 1),
    "sign_floor_ceil": lambda x, y: F.sign(x) + F.floor(x) * 0.5 - F.ceil(y) * 0.25,
    "pow": lambda x, y: F.pow(F.abs(x) + 0.1, 1.5),
    "layer_norm": lambda x, y: F.layer_norm(x, (4,), affine=False),
    "normalize": lambda x, y: F.normalize(x, axis=1), "norm": lambda x, y: F.norm(x, axis=1, keepdims=True),
    "var_std": lambda x, y: F.var(x, axis=0, keepdims=True) + F.std(y, axis=1, keepdims=True),
    "prod": lambda x, y: F.prod(F.clip(x, -1.2, 1.2), axis=1, keepdims=True),
    "logaddexp": lambda x, y: F.logaddexp(x, y), "atan2": lambda x, y: F.atan2(x, y + 0.1),
    "round_trunc": lambda x, y: F.round(x * 3) + F.trunc(y * 2),
    "scatter": lambda x, y: F.scatter(x, 1, F.argsort(_untied(y), descending=False), y),
    "indexing_one_hot": lambda x, y: F.indexing_one_hot(x, F.argmax(y, axis=1), 1, keepdims=True),
    "isnan_where": lambda x, y: F.where(F.isnan(F.log(x)), y, x),
    "logical": lambda x, y: F.logical_and(x > 0, y < 0).astype("float32") * x,
    "square_loss": lambda x, y: F.nn.square_loss(x, y) + F.nn.l1_loss(y, x),
    "bce": lambda x, y: F.nn.binary_cross_entropy(x, (y > 0).astype("float32")),
    "hinge": lambda x, y: F.nn.hinge_loss(x, F.sign(y)),
    "matinv": lambda x, y: F.matinv(F.matmul(x, x, transpose_b=True) + F.eye(3) * 2.0).sum(axis=0, keepdims=True).T,
    "avg_pool": lambda x, y: F.avg_pool2d(x.reshape(1, 1, 3, 4), 2, stride=1, padding=1)[0, 0, :3, :4],
    "max_pool": lambda x, y: F.max_pool2d(y.reshape(1, 1, 3, 4), 2, stride=1, padding=1)[0, 0, 1:, 1:],
    "conv1d": lambda x, y: F.conv1d(x.reshape(1, 3, 4), y[:, :3].reshape(3, 3, 1) * 0.5, padding=0)[0],
    "interpolate": lambda x, y: F.nn.interpolate(x.reshape(1, 1, 3, 4), size=(6, 8), mode="bilinear",
                                                 align_corners=False)[0, 0, ::2, ::2],
    "pad": lambda x, y: F.pad(x, ((1, 0), (0, 1)))[:3, 1:],
    # (added in the 28th session: sorting, gathering, transposed and pooled convolutions, norms, ROI pooling, and
    # ops whose indices are checked on the host -- one_hot, embedding -- or whose output length is data-dependent)
    "one_hot": lambda x, y: (F.one_hot(F.argmax(y, axis=1), 4).astype("float32") * x),
    "one_hot_data": lambda x, y: F.one_hot(F.clip((y * 2).astype("int32"), 0, 3), 4).astype("float32").mean(2) + x,
    "topk": lambda x, y: F.tile(F.topk(x + y * 0.5, 2, descending=True)[0], (1, 2)),
    "sort": lambda x, y: F.sort(x, descending=True)[0] * y,
    "gather": lambda x, y: F.gather(x, 1, F.argsort(_untied(y))),
    "embedding": lambda x, y: F.nn.embedding(F.argmax(y, axis=0), x)[:3],
    "conv_transpose": lambda x, y: F.conv_transpose2d(x.reshape(1, 1, 3, 4), y[:2, :2].reshape(1, 1, 2, 2))[0, 0, :3, 1:],
    "adaptive_pool": lambda x, y: F.tile(F.adaptive_avg_pool2d(x.reshape(1, 1, 3, 4), (3, 2))[0, 0], (1, 2))
    + F.adaptive_max_pool2d(y.reshape(1, 1, 3, 4), (1, 4))[0, 0],
    "logsoftmax": lambda x, y: F.nn.logsoftmax(x, axis=1) + F.nn.logsigmoid(y),
    "prelu": lambda x, y: F.nn.prelu(x.reshape(1, 3, 4), y[:, 0] * 0.1 + 0.2)[0],
    "group_norm": lambda x, y: F.nn.group_norm(x.reshape(1, 4, 3), 2, False).reshape(3, 4) * y,
    "instance_norm": lambda x, y: F.nn.instance_norm(y.reshape(1, 3, 4), False)[0] * x,
    "lrn": lambda x, y: F.nn.local_response_norm(x.reshape(1, 3, 1, 4), kernel_size=3, alpha=0.1)[:, :, 0][0],
    "pixel_shuffle": lambda x, y: F.nn.pixel_shuffle(x.reshape(1, 4, 3, 1), 2).reshape(3, 4) - y,
    "roi_align": lambda x, y: F.vision.roi_align(x.reshape(1, 1, 3, 4), mge.Tensor([[0, 0.5, 0.0, 3.0, 2.0]]),
                                                 (3, 4), sample_points=2)[0, 0],
    "nms": lambda x, y: x * float(F.vision.nms(F.concat([x[:, :2], x[:, :2] + F.abs(x[:, 2:]) + 0.1], 1),
                                               y[:, 0], 0.3).shape[0]) * 0.1,
    "floor_div": lambda x, y: F.floor_div(x, 0.7) * 0.1 + x * (1 + F.isinf(F.exp(y * 60)).astype("float32")),
    "split_concat": lambda x, y: F.concat(F.split(x, 2, axis=1)[::-1], axis=1) + F.dot(x[0], y[0]),
    "ce_smooth": lambda x, y: F.nn.cross_entropy(x, F.argmax(y, axis=1), label_smooth=0.1),
    # quantization-aware training's fake quantization (a scale computed from the data; LSQ's and TQT's learnable
    # scales, their gradients through the rounding)
    "fake_quant": lambda x, y: _Q.fake_quant_tensor(x, _Q.create_qparams(_Q.QuantMode.SYMMERTIC, "qint8",
                                                                         scale=F.abs(y).max() / 127 + 0.01)),
    "lsq": lambda x, y: _Q.lsq_forward(-128, 127, x, F.abs(y).mean() * 0.05 + 0.01),
    "tqt": lambda x, y: _Q.tqt_forward(-128, 127, x * 0.5, y.mean() * 0.1 - 5.0),
    # (tied extrema: MegEngine's gradient goes to every tied element, a rule of the op's own)
    "max_ties": lambda x, y: F.max(F.maximum(x, 0.5), axis=1, keepdims=True) * y,
    "min_ties": lambda x, y: F.min(F.minimum(x, -0.5), axis=0, keepdims=True) + y,
    "copy": lambda x, y: F.copy(x) * y,
}


def _broadcast(a, b):
    return tuple(np.broadcast_shapes(a, b))


class Program:
    """A seeded program: ``statements`` (tuples), generated against the shapes they will have."""

    def __init__(self, seed, n=18):
        r = self.r = random.Random(seed)
        self.seed = seed
        # pool entries: name -> shape (static: every statement knows its operands' shapes)
        self.shapes = {"x": (3, 4), "h0": (3, 4), "h1": (3, 4), "bvec": (4,)}
        self.dyn = []  # names of values whose length depends on the data (a mask's selection)
        self.ints = []  # names of int32 (3, 4) values
        self.statements = []
        self.optimizer = r.choice(["sgd", "adam"])
        self.read_loss = r.random() < 0.6
        self.iters = r.choice([4, 6, 7])
        self.read_grads = r.random() < 0.3
        self.grad_edit = r.choice([None, None, "scale", "clip"])
        self.lr_schedule = r.random() < 0.3  # (a Python number that changes every step)
        for k in range(n):
            self.statements.append(self._statement(f"v{k}"))
        # the loss: a few static float values (every param reaches it through h0 / h1)
        floats = [v for v in self.shapes if v not in self.ints]
        self.loss_terms = ["h0", "h1"] + r.sample(floats, min(3, len(floats)))
        self.dyn_terms = list(self.dyn[:2])

    def _pick(self, shapes=None):
        names = [v for v, s in self.shapes.items() if v not in self.ints and (shapes is None or s in shapes)]
        return self.r.choice(names)

    def _statement(self, out):
        r = self.r
        kind = r.choices(
            ["un", "bin", "red", "mm", "index", "mask", "cond_take", "setitem", "iadd", "read", "branch", "rng",
             "dropout", "int", "shape", "detach", "dyn_op", "error", "argmax_index", "keep", "iter_scalar", "zred",
             "bn", "make", "param_write", "inplace_error", "select", "softmax_ce", "amp", "fn"],
            [6, 8, 3, 2, 3, 2, 1, 2, 2, 2, 1, 1, 1, 1, 2, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 4])[0]
        if kind in ("dyn_op", "cond_take") and not self.dyn and kind == "dyn_op":
            kind = "mask"
        if kind == "un":
            a = self._pick()
            self.shapes[out] = self.shapes[a]
            return ("un", out, r.choice(sorted(UNARY)), a)
        if kind == "bin":
            a, b = self._pick(), self._pick()
            self.shapes[out] = _broadcast(self.shapes[a], self.shapes[b])
            return ("bin", out, r.choice(sorted(BINARY)), a, b)
        if kind == "red":
            a = self._pick()
            nd = len(self.shapes[a])
            axis = r.choice([None] + list(range(nd)))
            keep = r.random() < 0.5
            if axis is not None and axis == nd - 1 and nd == 2 and self.shapes[a][0] == 3:
                keep = True  # ((3,) would not broadcast with (3, 4))
            if axis is None:
                shape = (1,) * nd if keep else ()
            else:
                shape = tuple(1 if i == axis else s for i, s in enumerate(self.shapes[a]) if keep or i != axis)
            self.shapes[out] = shape
            return ("red", out, r.choice(sorted(REDUCE)), a, axis, keep)
        if kind == "mm":
            a = self._pick([(3, 4)])
            self.shapes[out] = (3, 4)
            return ("mm", out, a)
        if kind == "index":
            a = self._pick([(3, 4)])
            how = r.choice(["row", "rev", "perm", "col"])
            self.shapes[out] = {"row": (4,), "rev": (3, 4), "perm": (3, 4), "col": (3, 1)}[how]
            return ("index", out, a, how)
        if kind == "argmax_index":
            a, b = self._pick([(3, 4)]), self._pick([(3, 4)])
            self.shapes[out] = (3, 4)
            return ("argmax_index", out, a, b)
        if kind == "mask":
            a = self._pick([(3, 4)])
            self.dyn.append(out)
            return ("mask", out, a, round(r.uniform(-0.5, 0.5), 2))
        if kind == "cond_take":
            a = self._pick([(3, 4)])
            self.dyn.append(out)
            return ("cond_take", out, a)
        if kind == "dyn_op":
            a = r.choice(self.dyn)
            self.dyn.append(out)
            return ("dyn_op", out, r.choice(sorted(UNARY)), a, round(r.uniform(-1, 1), 2))
        if kind == "setitem":
            a = self._pick([(3, 4)])
            how = r.choice(["row", "mask", "col", "scalar_row"])
            b = self._pick([(4,), ()]) if how == "row" else None
            return ("setitem", a, how, b)
        if kind == "iadd":
            a = self._pick([(3, 4)])
            b = self._pick()
            return ("iadd", a, b, r.choice(["+=", "-=", "*="]))
        if kind == "read":
            a = self._pick()
            return ("read", a, r.choice(["item_sum", "numpy", "bool", "int_count"]))
        if kind == "branch":
            a = self._pick()
            self.shapes[out] = self.shapes[a]
            return ("branch", out, a)
        if kind == "rng":
            self.shapes[out] = (3, 4)
            return ("rng", out, r.choice(["normal", "uniform"]))
        if kind == "dropout":
            a = self._pick()
            self.shapes[out] = self.shapes[a]
            return ("dropout", out, a)
        if kind == "int":
            a = self._pick([(3, 4)])
            self.shapes[out] = (3, 4)
            self.ints.append(out)
            return ("int", out, a, r.choice(["floor_mod", "floor_div", "bitand"]))
        if kind == "shape":
            a = self._pick([(3, 4)])
            b = self._pick([(3, 4)])
            self.shapes[out] = (3, 4)
            return ("shape", out, a, b, r.choice(["reshape", "concat", "stack", "expand"]))
        if kind == "detach":
            a = self._pick()
            self.shapes[out] = self.shapes[a]
            return ("detach", out, a)
        if kind == "keep":
            return ("keep", self._pick())
        if kind == "iter_scalar":
            a = self._pick()
            self.shapes[out] = self.shapes[a]
            return ("iter_scalar", out, a)
        if kind == "zred":
            a = self._pick([(4,), (1, 4)])
            self.shapes[out] = (4,)
            return ("zred", out, a)
        if kind == "bn":
            a = self._pick([(3, 4)])
            self.shapes[out] = (3, 4)
            return ("bn", out, a)
        if kind == "make":
            self.shapes[out] = (3, 4)
            return ("make", out, r.choice(["zeros", "arange", "numpy"]))
        if kind == "param_write":
            return ("param_write", r.choice(["b", "s"]))
        if kind == "inplace_error":
            return ("inplace_error", self._pick([(3, 4)]), r.choice(["iadd", "setitem", "setitem_shape"]))
        if kind == "select":
            a, b = self._pick([(3, 4)]), self._pick([(3, 4)])
            self.shapes[out] = (3, 4)
            return ("select", out, a, b, r.choice(["where", "topk", "sort", "gather", "one_hot", "clip_round"]))
        if kind == "softmax_ce":
            a = self._pick([(3, 4)])
            self.shapes[out] = ()
            return ("softmax_ce", out, a)
        if kind == "amp":
            a = self._pick([(3, 4)])
            self.shapes[out] = (3, 4)
            return ("amp", out, a)
        if kind == "fn":
            a, b = self._pick([(3, 4)]), self._pick([(3, 4)])
            self.shapes[out] = (3, 4)
            return ("fn", out, r.choice(sorted(FUNCS)), a, b)
        a = self._pick([(3, 4)])
        return ("error", a, r.choice(["add", "matmul", "index", "reshape"]))

    # ---- running ------------------------------------------------------------------------------------------------
    def run(self, auto_jit):
        """Runs the program: ``(log, params, slots)`` -- the host reads and errors of every iteration in order."""
        mge.config.auto_jit = auto_jit
        try:
            return self._run()
        finally:
            mge.config.auto_jit = False

    def setup(self):
        """Seeds the generators; ``(rng, params, gm, opt)``: the batches' NumPy generator, the parameters ``W``
        (4, 4), ``b`` (4,), ``s`` (3, 1), their GradManager and optimizer. A fresh BatchNorm and kept list too."""
        mge.random.seed(self.seed)
        rng = np.random.RandomState(self.seed)
        params = [mge.Parameter(rng.uniform(-1, 1, shape).astype("float32")) for shape in ((4, 4), (4,), (3, 1))]
        gm = GradManager().attach(params)
        opt = optim.SGD(params, lr=0.05, momentum=0.9) if self.optimizer == "sgd" else optim.Adam(params, lr=0.01)
        # (eps 1e-3, not 1e-5: a column constant over the batch normalizes to rounding noise times 1/sqrt(eps),
        # which at 1e-5 reaches the comparison's atol between two correct roundings -- eager's and a fused one's)
        self.kept, self.bn = [], M.BatchNorm1d(4, eps=1e-3)
        return rng, params, gm, opt

    def _run(self):
        rng, params, gm, opt = self.setup()
        W, b, s = params
        log = []
        for it in range(self.iters):
            x = mge.Tensor(rng.uniform(-2, 2, (3, 4)).astype("float32"))
            self.z = mge.Tensor(rng.uniform(-1, 1, (rng.randint(1, 5), 4)).astype("float32"))  # (a changing length)
            self.it = it
            with gm:
                env = {"x": x, "h0": F.matmul(x, W) + b, "h1": x * s, "bvec": b * 1.0}
                for k, st in enumerate(self.statements):
                    try:
                        self._exec(st, env, W, log, params)
                    except Exception as exc:  # noqa: BLE001  (compared between the modes)
                        log.append(("error", it, k, type(exc).__name__, str(exc).split("\n")[0][:200],
                                    _user_line(exc)))
                # (a term a failed statement never made is left out: both modes logged the failure)
                loss = sum(F.mean(env[v].astype("float32")) for v in self.loss_terms if v in env)
                for v in self.dyn_terms:
                    if v in env:
                        loss = loss + F.sum(env[v]) * 0.01
                gm.backward(loss)
            if self.read_grads:
                log.append(("grads", it, [p.grad.numpy() for p in params]))
            if self.grad_edit == "scale":
                for p in params:
                    p.grad *= 0.5
            elif self.grad_edit == "clip":
                optim.clip_grad_norm(params, 1.0)
            if self.lr_schedule:
                for group in opt.param_groups:
                    group["lr"] = 0.01 * (1 + it) ** -0.5
            opt.step()
            opt.clear_grad()
            if self.read_loss:
                log.append(("loss", it, loss.item()))
        log.append(("final", [np.asarray(env[v].numpy()) for v in sorted(env)]))
        log.append(("kept", [t.numpy() for t in self.kept]))
        log.append(("bn", [self.bn.running_mean.numpy(), self.bn.running_var.numpy()]))
        slots = [np.asarray(v.numpy()) for st in opt._state.values() for v in st.values()]
        return log, [p.numpy() for p in params], slots

    def _exec(self, st, env, W, log, params):
        kind = st[0]
        if kind == "un":
            env[st[1]] = UNARY[st[2]](env[st[3]])
        elif kind == "bin":
            env[st[1]] = BINARY[st[2]](env[st[3]], env[st[4]])
        elif kind == "red":
            _, out, op, a, axis, keep = st
            env[out] = REDUCE[op](env[a], axis=axis, keepdims=keep)
        elif kind == "mm":
            env[st[1]] = F.matmul(env[st[2]], W)
        elif kind == "index":
            a = env[st[2]]
            env[st[1]] = {"row": lambda: a[1], "rev": lambda: a[::-1], "perm": lambda: a[[2, 0, 1]],
                          "col": lambda: a[:, 2:3]}[st[3]]()
        elif kind == "argmax_index":
            idx = F.argmax(env[st[2]], axis=0) % 3  # (4,) int32 rows
            env[st[1]] = env[st[3]][idx[:3]]
        elif kind == "mask":
            a = env[st[2]]
            env[st[1]] = a[a > st[3]]
        elif kind == "cond_take":
            a = env[st[2]]
            env[st[1]], _ = F.cond_take(a < 0, a)
        elif kind == "dyn_op":
            env[st[1]] = UNARY[st[2]](env[st[3]]) * st[4]
        elif kind == "setitem":
            _, a, how, b = st
            t = env[a]
            if how == "row":
                t[0] = env[b]
            elif how == "mask":
                t[t > 0.5] = 0.25
            elif how == "col":
                t[:, 1] = 2.0
            else:
                t[2] = t[1] * 0.5
        elif kind == "iadd":
            _, a, b, how = st
            t = env[a]
            if how == "+=":
                t += env[b]
            elif how == "-=":
                t -= env[b]
            else:
                t *= env[b]
        elif kind == "read":
            a, how = env[st[1]], st[2]
            if how == "item_sum":
                log.append(("read", a.sum().item()))
            elif how == "numpy":
                log.append(("read", a.numpy().copy()))
            elif how == "bool":
                log.append(("read", bool((a > 0).sum() > 2)))
            else:
                log.append(("read", int((a > 0).sum())))
        elif kind == "branch":
            a = env[st[2]]
            env[st[1]] = a * 2 if float(a.mean()) > 0 else a - 1
        elif kind == "rng":
            env[st[1]] = mge.random.normal(size=(3, 4)) if st[2] == "normal" else mge.random.uniform(size=(3, 4))
        elif kind == "dropout":
            env[st[1]] = F.dropout(env[st[2]], 0.3, training=True)
        elif kind == "int":
            i = (env[st[2]] * 3).astype("int32")
            env[st[1]] = {"floor_mod": lambda: i % 3, "floor_div": lambda: i // 2,
                          "bitand": lambda: (i + 8) & 5}[st[3]]()
        elif kind == "shape":
            _, out, a, b, how = st
            x, y = env[a], env[b]
            if how == "reshape":
                env[out] = x.reshape(4, 3).transpose(1, 0) + y
            elif how == "concat":
                env[out] = F.concat([x, y], axis=0)[1:4]
            elif how == "stack":
                env[out] = F.stack([x, y], axis=1).sum(axis=1)
            else:
                env[out] = F.broadcast_to(F.expand_dims(x[0], 0), (3, 4)) * y
        elif kind == "detach":
            env[st[1]] = env[st[2]].detach() * 1.5
        elif kind == "keep":
            self.kept.append(env[st[1]])
        elif kind == "iter_scalar":
            env[st[1]] = env[st[2]] * ((self.it + 1) * 0.5)
        elif kind == "zred":
            env[st[1]] = (self.z * env[st[2]]).sum(axis=0) + self.z.mean()
        elif kind == "bn":
            env[st[1]] = self.bn(env[st[2]])
        elif kind == "make":
            how = st[2]
            env[st[1]] = F.zeros((3, 4)) if how == "zeros" else \
                F.arange(12, dtype="float32").reshape(3, 4) * 0.1 if how == "arange" else \
                mge.Tensor(np.full((3, 4), self.it * 0.25, "float32"))
        elif kind == "inplace_error":
            t, how = env[st[1]], st[2]
            if how == "iadd":
                t += F.ones((2, 5))
            elif how == "setitem":
                t[5] = 1.0
            else:
                t[0] = F.ones((3,))
        elif kind == "select":
            _, out, a, b, how = st
            x, y = env[a], env[b]
            if how == "where":
                env[out] = F.where(x > y, x, y * 0.5)
            elif how == "topk":
                v, i = F.topk(x, 2, descending=True)
                env[out] = F.concat([v, i.astype("float32")], axis=1)
            elif how == "sort":
                v, i = F.sort(x, descending=False)
                env[out] = v * 2 - i.astype("float32") * 0.1
            elif how == "gather":
                idx = F.argmax(y, axis=1, keepdims=True)
                env[out] = F.gather(x, 1, F.broadcast_to(idx, (3, 4)))
            elif how == "one_hot":
                env[out] = F.one_hot(F.argmax(x, axis=1), 4) * y
            else:
                env[out] = F.round(F.clip(x, -1.5, 1.5) * 4) / 4 + y
        elif kind == "softmax_ce":
            label = F.argmax(env["x"], axis=1)
            env[st[1]] = F.nn.cross_entropy(env[st[2]], label) + F.softmax(env[st[2]], axis=1).max()
        elif kind == "fn":
            env[st[1]] = F.broadcast_to(FUNCS[st[2]](env[st[3]], env[st[4]]), (3, 4))
        elif kind == "amp":
            with mge.amp.autocast():
                env[st[1]] = F.matmul(env[st[2]], W).astype("float32")
        elif kind == "param_write":
            p = params[1] if st[1] == "b" else params[2]
            p[0] = p[0] * 0.9
        else:
            a, how = env[st[1]], st[2]
            if how == "add":
                a + F.ones((2, 5))
            elif how == "matmul":
                F.matmul(a, F.ones((3, 3)))
            elif how == "index":
                a[7]
            else:
                a.reshape(5, 5)


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(2, 4, 3, padding=1, bias=False)
        self.bn = M.BatchNorm2d(4)
        self.drop = M.Dropout(0.2)
        self.fc = M.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = self.drop(F.relu(self.bn(self.conv(x))))
        return self.fc(F.flatten(x, 1))


LOOP_EVENTS = ["eval_forward", "load_checkpoint", "save_checkpoint", "set_lr", "replace_fc", "attach_param",
               "zero_param", "read_grads", "accumulate", "clear_without_step", "batch_size",
               "opt_load", "keep_output", "module_hook", "no_read",
               # training features inside the step (STEP_FEATURES) and set for the rest of the loop
               "clip_norm", "clip_value", "aux_gm", "amp_scaler", "bn_frozen", "drop_grad",
               "callback", "weight_decay", "qat"]
# the events that change what one training step does (the traced steps take them as an argument)
STEP_FEATURES = ("clip_norm", "clip_value", "aux_gm", "amp_scaler", "bn_frozen", "drop_grad")


class LoopProgram:
    """A training loop (conv, BatchNorm, Dropout, linear; SGD or Adam) with seeded events at random steps: eval
    forwards, checkpoints saved and loaded mid-run (model and optimizer), learning-rate changes, a layer replaced,
    a parameter attached again to the GradManager, written in place, gradients read, accumulated over two
    backward passes or cleared without a step, the batch size changed, outputs kept across steps, a forward hook;
    and training features: gradients clipped by norm or value, a second GradManager with a callback adding a
    penalty's gradient, autocast with a ``GradScaler``, BatchNorm frozen for a step, a gradient dropped before
    the step, a gradient callback attached, weight decay switched on, the network converted for quantization-aware
    training mid-run."""

    def __init__(self, seed, steps=10):
        r = random.Random(seed)
        self.seed, self.steps = seed, steps
        self.optimizer = r.choice(["sgd", "adam"])
        self.events = {k: r.sample(LOOP_EVENTS, r.randint(0, 3)) for k in range(steps)}

    def run(self, auto_jit, trace_kind=None, dropout=True):
        """The loop's log (losses, gradients read, eval outputs, kept outputs, final state), eagerly, under auto-jit,
        or with each training step a function called through ``trace_kind`` (``"xla_trace"``, ``"trace"``,
        ``"symbolic"``; the events happen between its calls). ``dropout=False``: no Dropout layer (a traced function
        draws from a key of its own, as MegEngine's does, not from the global stream eager code uses)."""
        mge.config.auto_jit = auto_jit
        try:
            return self._run(trace_kind, dropout)
        finally:
            mge.config.auto_jit = False

    def _run(self, trace_kind, dropout):
        import io
        from megxla.jit import trace, xla_trace
        mge.random.seed(self.seed)
        rng = np.random.RandomState(self.seed)
        net = _Net()
        if not dropout:
            net.drop = M.Identity()
        gms = [GradManager().attach(net.parameters())]  # (replaced with the layer: the step reads gms[0])
        make = (lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9)) if self.optimizer == "sgd" else \
            (lambda ps: optim.Adam(ps, lr=0.01))
        opt = make(net.parameters())

        scaler = mge.amp.GradScaler(init_scale=64.0, growth_interval=3)

        def train_step(net, opt, scaler, x, y, passes, read, do_step, feats):
            if "bn_frozen" in feats:
                net.bn.eval()
            for _ in range(passes):
                with gms[0]:
                    if "amp_scaler" in feats:
                        with mge.amp.autocast():
                            out = net(x)
                        loss = F.nn.cross_entropy(out.astype("float32"), y)
                        scaler.backward(gms[0], loss)
                    else:
                        out = net(x)
                        loss = F.nn.cross_entropy(out, y)
                        gms[0].backward(loss)
            if "bn_frozen" in feats:
                net.bn.train()
            if "aux_gm" in feats:  # a second manager, its callback scaling the penalty's gradient
                aux = GradManager().attach([net.fc.weight], callbacks=[lambda p, g: g * 0.5])
                with aux:
                    aux.backward((net.fc.weight ** 2).sum() * 0.01)
            if "clip_norm" in feats:
                optim.clip_grad_norm(net.parameters(), max_norm=0.5)
            if "clip_value" in feats:
                optim.clip_grad_value(net.parameters(), lower=-0.02, upper=0.02)
            if "drop_grad" in feats:
                net.conv.weight.grad = None
            grads = [p.grad * 1 for p in net.parameters() if p.grad is not None] if read else []
            if do_step:
                opt.step()
            opt.clear_grad()
            return loss, out, grads

        step_fn = train_step if trace_kind is None else {
            "xla_trace": xla_trace(train_step), "trace": trace(train_step),
            "symbolic": trace(train_step, symbolic=True)}[trace_kind]
        log, saved, kept, batch, quantized = [], None, [], 4, False
        for step in range(self.steps):
            events = self.events[step]
            if "batch_size" in events:
                batch = 6 if batch == 4 else 4
            x = mge.Tensor(rng.standard_normal((batch, 2, 4, 4)).astype("float32"))
            y = mge.Tensor(rng.randint(0, 3, batch).astype("int32"))
            handle = None
            if "module_hook" in events:
                handle = net.fc.register_forward_hook(lambda m, inputs, out: out * 0.5)
            feats = ",".join(e for e in STEP_FEATURES if e in events)
            loss, out, grads = step_fn(net, opt, scaler, x, y, 2 if "accumulate" in events else 1,
                                       "read_grads" in events, "clear_without_step" not in events, feats)
            if handle is not None:
                handle.remove()
            if "keep_output" in events:
                kept.append(out)
            if grads:
                log.append(("grads", step, [g.numpy() for g in grads]))
            if "no_read" not in events:
                log.append(("loss", step, loss.item()))
            if "eval_forward" in events:
                net.eval()
                log.append(("eval", step, net(x).numpy()))
                net.train()
            if "save_checkpoint" in events:
                buf = io.BytesIO()
                mge.save({"net": net.state_dict(), "opt": opt.state_dict()}, buf)
                saved = buf.getvalue()
            if "load_checkpoint" in events and saved is not None:
                state = mge.load(io.BytesIO(saved))
                net.load_state_dict(state["net"], strict=False)  # (saved before or after the QAT conversion)
                if "opt_load" in events:
                    opt.load_state_dict(state["opt"])
            if "set_lr" in events:
                for group in opt.param_groups:
                    group["lr"] *= 0.5
            if "replace_fc" in events:
                net.fc = M.Linear(4 * 4 * 4, 3)
                gms[0] = GradManager().attach(net.parameters())
                opt = make(net.parameters())
            if "attach_param" in events:
                gms[0].attach([net.fc.bias])
            if "zero_param" in events:
                net.fc.weight[0] = 0.0
            if "callback" in events:
                gms[0].attach([net.conv.weight], callbacks=[lambda p, g: g * 0.5])
            if "weight_decay" in events:
                for group in opt.param_groups:
                    group["weight_decay"] = 1e-3
            if "qat" in events and not quantized and step >= self.steps // 2:  # (the first half compared tightly)
                from megxla.quantization import quantize_qat
                quantize_qat(net)  # (the QAT modules share the float ones' parameters: manager and optimizer stay)
                quantized = True
                log.append(("qat", step))
        log.append(("kept", [t.numpy() for t in kept]))
        log.append(("scale", scaler.scale_factor))
        log.append(("state", [np.asarray(v) for _, v in sorted(net.state_dict().items())]))
        return log


def check_loop(seed, trace_kind=None):
    """Runs loop program ``seed`` eagerly and under auto-jit (or with its steps through ``trace_kind``); raises
    AssertionError naming what differs."""
    import warnings
    prog = LoopProgram(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a traced step warns where it records again: that is its design)
        other = prog.run(trace_kind is None, trace_kind, dropout=trace_kind is None)
    where = f"loop program {seed}" + (f" ({trace_kind})" if trace_kind else "")
    eager = prog.run(False, dropout=trace_kind is None)
    # After the conversion to quantization-aware training only gross differences count: a weight 1e-7 from eager's
    # (fusion's rounding) lands on the other side of a rounding boundary of its fake quantization now and then, a
    # discontinuity of QAT (tests/test_autojit_networks.py::check says more)
    qat = next((k for k, e in enumerate(eager) if e[0] == "qat"), len(eager))
    _same(eager[:qat], other[:qat], where)
    _same(eager[qat:], other[qat:], where + ", after the QAT conversion", rtol=5e-2, atol=5e-2)


def _user_line(exc):
    """The line of this file an error was raised at (the user's line: auto-jit raises there, as eager does)."""
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == __file__:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _same(x, y, where, rtol=1e-4, atol=1e-5):
    """Asserts logs ``x`` and ``y`` (nested lists and tuples of arrays, numbers, strings) agree: floats to ``rtol``
    / ``atol``, NaN equal to NaN, everything else exactly; the message names where they differ."""
    if isinstance(x, (list, tuple)):
        assert isinstance(y, (list, tuple)) and len(x) == len(y), f"{where}: {x!r} vs {y!r}"
        for k, (a, b) in enumerate(zip(x, y)):
            _same(a, b, f"{where}[{k}]", rtol, atol)
        return
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype, f"{where}: {x.shape} {x.dtype} vs {y.shape} {y.dtype}"
        if x.dtype.kind == "f":
            np.testing.assert_allclose(y, x, rtol=rtol, atol=atol, err_msg=where)
        else:
            np.testing.assert_array_equal(y, x, err_msg=where)
        return
    if isinstance(x, float) and isinstance(y, float):
        # (equal infinities: their difference is NaN; NaN: both)
        assert x == y or abs(x - y) <= atol + rtol * abs(x) or (x != x and y != y), f"{where}: {x} vs {y}"
        return
    assert x == y, f"{where}: {x!r} vs {y!r}"


def check(seed):
    """Runs program ``seed`` eagerly and under auto-jit; raises AssertionError naming what differs."""
    prog = Program(seed)
    eager = prog.run(False)
    auto = prog.run(True)
    _same(list(eager), list(auto), f"program {seed}")


def check_threads(seed):
    """Programs ``seed`` and ``seed + 1`` run together in two threads under auto-jit, against each run alone
    eagerly. (Random draws share the global generator, and amp's autocast is process-wide as in MegEngine: in
    threads, those statements are replaced by deterministic ones.)"""
    import threading
    progs = [Program(seed), Program(seed + 1)]
    for p in progs:
        p.statements = [("make", st[1], "arange") if st[0] == "rng" else
                        ("un", st[1], "relu", st[2]) if st[0] in ("dropout", "amp") else st for st in p.statements]
    eager = [p.run(False) for p in progs]
    results = [None, None]

    def run(k):
        try:
            results[k] = progs[k]._run()  # noqa: SLF001  (auto-jit is switched on for both threads below)
        except BaseException as exc:  # noqa: BLE001
            results[k] = exc

    mge.config.auto_jit = True
    try:
        threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        mge.config.auto_jit = False
    for k in range(2):
        if isinstance(results[k], BaseException):
            raise results[k]
        _same(list(eager[k]), list(results[k]), f"program {seed + k} in a thread")


def _static_fn(st):
    """``st`` for a traced step: ``nms`` without ``max_output`` (an output length read on the host) raises under
    tracing, as MegEngine's does -- ``norm`` in its place."""
    return ("fn", st[1], "norm", *st[3:]) if st[0] == "fn" and st[2] == "nms" else st


def traced_run(prog, kind):
    """Program ``prog`` with each iteration's step (its statements, ``backward``, ``opt.step()``) a function of
    the batch called as written (``kind="eager"``) or through ``xla_trace`` / ``trace`` / ``trace(symbolic=True)``:
    the step's results, the parameters and BatchNorm's statistics after each call. Statements a compiled call
    cannot repeat by design are left out (host reads logged in the body, Python numbers that change from call to
    call, tensors kept in a Python list, bad calls); the body still catches every error around each statement, as
    code guarding a fallback does -- a host read it catches must not change what the step computes."""
    from megxla.jit import trace, xla_trace
    prog.statements = [("un", st[1], "relu", st[2]) if st[0] == "iter_scalar" else
                       ("make", st[1], "arange") if st[0] == "make" else _static_fn(st)
                       for st in prog.statements if st[0] not in ("keep", "error", "inplace_error", "read")]
    rng, params, gm, opt = prog.setup()

    def step(params, opt, bn, x, z):
        W, b, s = params
        prog.z = z
        with gm:
            env = {"x": x, "h0": F.matmul(x, W) + b, "h1": x * s, "bvec": b * 1.0}
            for st in prog.statements:
                try:
                    prog._exec(st, env, W, [], params)  # noqa: SLF001
                except Exception:  # noqa: BLE001,S110  (a guarded statement: see the docstring)
                    pass
            loss = sum(F.mean(env[v].astype("float32")) for v in prog.loss_terms if v in env)
            for v in prog.dyn_terms:
                if v in env:
                    loss = loss + F.sum(env[v]) * 0.01
            gm.backward(loss)
        if prog.grad_edit == "scale":
            for p in params:
                p.grad *= 0.5
        elif prog.grad_edit == "clip":
            optim.clip_grad_norm(params, 1.0)
        opt.step()
        opt.clear_grad()
        return [loss] + [env[v] for v in sorted(env)]

    fn = {"eager": step, "xla_trace": xla_trace(step), "trace": trace(step),
          "symbolic": trace(step, symbolic=True)}[kind]
    log = []
    for it in range(prog.iters):
        x = mge.Tensor(rng.uniform(-2, 2, (3, 4)).astype("float32"))
        z = mge.Tensor(rng.uniform(-1, 1, (rng.randint(1, 5), 4)).astype("float32"))
        prog.it = it
        log.append(("step", it, [o.numpy() for o in fn(params, opt, prog.bn, x, z)],
                    [p.numpy() for p in params], prog.bn.running_mean.numpy(), prog.bn.running_var.numpy()))
    return log


def partial_run(prog, kind):
    """Program ``prog``'s statements as a function of the parameters, BatchNorm and the batch, called as written
    (``kind="eager"``) or as one compiled op through ``partial_trace(backend="xla")``; the loss, ``backward``
    and ``opt.step()`` eager around it. Statements that read the host (a compiled op runs no Python) become
    elementwise ones on the same values."""
    from megxla.jit import partial_trace

    def without_host(st):
        k = st[0]
        if k in ("mask", "cond_take"):
            return ("un", st[1], "relu", st[2])
        if k == "dyn_op":
            return ("un", st[1], st[2], st[3])
        if k in ("branch", "iter_scalar", "dropout"):
            return ("un", st[1], "abs", st[2])
        if k in ("rng", "make"):
            return ("make", st[1], "arange")
        return _static_fn(st)

    prog.statements = [without_host(st) for st in prog.statements
                       if st[0] not in ("keep", "error", "inplace_error", "read")]
    names = sorted({"x", "h0", "h1", "bvec"} | {st[1] for st in prog.statements
                                                 if isinstance(st[1], str) and st[1].startswith("v")})
    terms = [v for v in prog.loss_terms if v in names]
    rng, params, gm, opt = prog.setup()

    def piece(W, b, s, bn, x, z):
        prog.z = z
        env = {"x": x, "h0": F.matmul(x, W) + b, "h1": x * s, "bvec": b * 1.0}
        for st in prog.statements:
            prog._exec(st, env, W, [], [W, b, s])  # noqa: SLF001
        return [env[v] for v in names]

    fn = piece if kind == "eager" else partial_trace(piece, backend="xla")
    log = []
    for it in range(prog.iters):
        x = mge.Tensor(rng.uniform(-2, 2, (3, 4)).astype("float32"))
        z = mge.Tensor(rng.uniform(-1, 1, (rng.randint(1, 3), 4)).astype("float32"))
        with gm:
            outs = fn(*params, prog.bn, x, z)
            env = dict(zip(names, outs))
            gm.backward(sum(F.mean(env[v].astype("float32")) for v in terms))
        opt.step()
        opt.clear_grad()
        log.append(("step", it, [o.numpy() for o in outs], [p.numpy() for p in params],
                    prog.bn.running_mean.numpy(), prog.bn.running_var.numpy()))
    return log


def check_traced(seed, kind):
    """Program ``seed``'s steps called eagerly and through ``kind`` (``traced_run``; ``"partial"``:
    ``partial_run``) must agree."""
    import warnings
    run = partial_run if kind == "partial" else traced_run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (host reads in a traced step warn once each: that is their design)
        _same(run(Program(seed), "eager"), run(Program(seed), kind), f"program {seed} ({kind})")


@pytest.fixture
def fresh_auto_jit(monkeypatch):
    monkeypatch.setattr(_autojit, "STATIC_TIMER", False)  # (the programs' clusters, not a timer's choice of eager)
    _autojit._sites.clear()
    _autojit._steps.clear()
    _autojit._reads.clear()
    _autojit._padded._ROW_SITES.clear()  # (which lines' host arrays are kept padded)
    _autojit._device_checks._held.clear()  # (lines whose index checks held: an earlier test's are made in clusters)
    saved = mge.config.auto_jit
    yield
    mge.config.auto_jit = saved


@pytest.mark.parametrize("seed", range(16))
def test_random_program_agrees_with_eager(fresh_auto_jit, seed):
    check(seed)


@pytest.mark.parametrize("seed", range(8))
def test_random_training_loop_agrees_with_eager(fresh_auto_jit, seed):
    check_loop(seed)


@pytest.mark.parametrize("seed", [0, 2])
def test_random_programs_in_two_threads_agree_with_eager(fresh_auto_jit, seed):
    check_threads(seed)


@pytest.mark.parametrize("kind", ["xla_trace", "trace", "symbolic", "partial"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_program_steps_traced_agree_with_eager(seed, kind):
    check_traced(seed, kind)


@pytest.mark.parametrize("kind", ["xla_trace", "trace", "symbolic"])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_training_loop_traced_agrees_with_eager(seed, kind):
    check_loop(seed, kind)


def sweep(check_one, what="programs"):
    """The command line's sweep: ``check_one(seed)`` for the seeds ``lo:hi`` of ``sys.argv[1]`` (default 0:50), with
    no timer choosing eager over the clusters; prints each seed that disagrees and the count."""
    lo, hi = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "0:50").split(":"))
    _autojit.STATIC_TIMER = False
    bad = 0
    for seed in range(lo, hi):
        try:
            check_one(seed)
        except AssertionError as exc:
            bad += 1
            print(f"--- seed {seed}: {str(exc)[:800]}")
        except Exception as exc:  # noqa: BLE001
            bad += 1
            print(f"--- seed {seed} raised {type(exc).__name__}: {str(exc)[:800]}")
    print(f"{bad} of {hi - lo} {what} disagree")


if __name__ == "__main__":
    which = check_loop if "--loops" in sys.argv else check_threads if "--threads" in sys.argv else check
    for kind in ("xla_trace", "trace", "symbolic", "partial"):
        if f"--{kind}" in sys.argv:
            which = functools.partial(check_loop, trace_kind=kind) if "--loops" in sys.argv else \
                functools.partial(check_traced, kind=kind)
    sweep(which)
