"""Differential check against MegEngine itself: the same functional calls, gradients and training steps run by
megxla and by a MegEngine 1.13 interpreter, results compared (float32, rtol 1e-4, atol 1e-5).

MegEngine 1.13 needs Python <= 3.10 and runs on a CPU; its wheel is on PyPI (1.13.0, ~940 MB)::

    python3.10 -m venv /tmp/mge && /tmp/mge/bin/pip install megengine==1.13.0 "numpy<1.24" "opencv-python<4.9"
    python scripts/megengine_diff.py /tmp/mge/bin/python

Prints one line per disagreement (status, dtype, shape or value) and a count; exit status 1 if any (2026-12-01:
none in 167 cases). The deliberate differences are in docs/differences.md and left out here (MegEngine's wrong
correlation data1 gradient; prelu's per-channel 1-D weight, which MegEngine rejects). Run by hand after changing
an op: CI has no MegEngine.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np

# Each case is a Python expression over ``T`` (the framework's tensor), ``F``, ``np`` and the arrays below; a
# gradient case is (expression of the Parameter ``x``, its value): the gradient of sum(out * cotangent).
_RS = np.random.RandomState(0)
A = _RS.randn(2, 3, 4, 5).astype("float32")
B = _RS.randn(2, 3, 4, 5).astype("float32")
V = _RS.randn(12).astype("float32")
MAT = _RS.randn(4, 6).astype("float32")
MAT2 = _RS.randn(6, 3).astype("float32")
IDX = np.array([2, 0, 1, 1], dtype="int32")
LBL = np.array([1, 0, 4, 2], dtype="int32")
POS = (np.abs(_RS.randn(3, 5)) + 0.1).astype("float32")
INT = _RS.randint(-5, 5, size=(3, 4)).astype("int32")
IMG = _RS.randn(2, 3, 8, 8).astype("float32")
W = _RS.randn(4, 3, 3, 3).astype("float32")
ROIS = "T(np.array([[0, 1.0, 1.0, 6.0, 5.0], [1, 0.5, 2.0, 7.0, 7.5]], 'float32'))"
HOMO = "T(np.tile(np.array([[1, 0.1, 0.5], [0.05, 1, -0.5], [0, 0.001, 1]], 'float32'), (2, 1, 1)))"

FORWARD = [
    "F.softmax(T(MAT), axis=1)", "F.nn.logsoftmax(T(MAT), axis=0)", "F.logsumexp(T(MAT), axis=1)", "F.relu(T(A))",
    "F.leaky_relu(T(A), 0.2)", "F.gelu(T(V))", "F.silu(T(V))", "F.hswish(T(V))", "F.hsigmoid(T(V))", "F.relu6(T(V*4))",
    "F.softplus(T(V))", "F.logsigmoid(T(V))", "F.sigmoid(T(V))", "F.sum(T(A), axis=(1, 2))",
    "F.mean(T(A), axis=-1, keepdims=True)", "F.var(T(A), axis=1)", "F.std(T(A), axis=2)", "F.prod(T(MAT), axis=0)",
    "F.max(T(MAT), axis=1)", "F.min(T(MAT))", "F.argmax(T(MAT), axis=1)", "F.argmin(T(MAT), axis=0)",
    "F.norm(T(MAT), ord=2, axis=1)", "F.norm(T(MAT), ord=1, axis=0)", "F.normalize(T(MAT), axis=1)",
    "F.cumsum(T(MAT), axis=1)", "F.sort(T(V))[0]", "F.sort(T(V), descending=True)[1]", "F.topk(T(V), 3)[0]",
    "F.topk(T(V), 3, descending=True)[1]", "F.argsort(T(V))", "F.clip(T(V), -0.5, 0.5)", "F.round(T(V*3))",
    "F.floor_div(T(INT), 3)", "F.mod(T(INT), 3)", "F.mod(T(V), 0.7)", "F.floor_div(T(V), 0.7)", "T(INT) // -3",
    "T(INT) % -3", "F.pow(T(POS), 1.7)", "F.sqrt(T(POS))", "F.log(T(POS))", "F.log1p(T(POS))", "F.expm1(T(V))",
    "F.atan2(T(V), T(V[::-1].copy()))", "F.sign(T(INT))", "F.abs(T(INT))", "F.maximum(T(A), T(B))",
    "F.where(T(A) > 0, T(A), T(B))", "F.matmul(T(MAT), T(MAT2))", "F.matmul(T(MAT), T(MAT), transpose_b=True)",
    "F.dot(T(V), T(V))", "F.linear(T(MAT), T(MAT2.T.copy()))", "F.flatten(T(A), 1)", "F.transpose(T(A), (0, 2, 3, 1))",
    "F.reshape(T(A), (6, -1))", "F.broadcast_to(T(V[:5]), (3, 5))", "F.expand_dims(T(V), (0, 2))",
    "F.squeeze(T(A[:1]), 0)", "F.concat([T(A), T(B)], axis=2)", "F.stack([T(V), T(V)], axis=1)", "F.split(T(V), 3)[1]",
    "F.split(T(V), [2, 7])[2]", "F.gather(T(MAT), 1, T(np.array([[0,1],[2,3],[4,5],[1,1]],'int32')))",
    "F.scatter(T(MAT), 1, T(np.array([[0],[2],[4],[1]],'int32')), T(np.ones((4,1),'float32')))",
    "F.tile(T(MAT[:2]), (2, 1))", "F.repeat(T(V[:3]), 2)", "F.roll(T(V), 3)", "F.diag(T(MAT[:, :4]))", "F.eye(3, 4)",
    "F.arange(1, 10, 2.5)", "F.linspace(0, 1, 7)", "F.one_hot(T(LBL), 5)", "F.indexing_one_hot(T(MAT), T(IDX), 1)",
    "F.cond_take(T(A) > 0.5, T(A))[0]", "F.nn.cross_entropy(T(MAT[:, :5]), T(LBL))",
    "F.nn.cross_entropy(T(MAT[:, :5]), T(LBL), label_smooth=0.1)",
    "F.nn.binary_cross_entropy(T(MAT), T((MAT > 0).astype('float32')))", "F.nn.l1_loss(T(A), T(B))",
    "F.nn.square_loss(T(A), T(B))", "F.nn.hinge_loss(T(MAT), T(np.sign(MAT2[:4, :1]).repeat(6, 1)))",
    "F.nn.ctc_loss(F.nn.logsoftmax(T(rs.randn(6, 2, 5).astype('float32')), axis=-1), T(np.array([6, 5], 'int32')), "
    "T(np.array([1, 2, 3, 1], 'int32')), T(np.array([2, 2], 'int32')))",
    "F.conv2d(T(IMG), T(W), stride=2, padding=1)", "F.conv2d(T(IMG), T(W), dilation=2)",
    "F.conv_transpose2d(T(IMG), T(W.transpose(1, 0, 2, 3).copy()), stride=2)", "F.max_pool2d(T(IMG), 3, 2, 1)",
    "F.avg_pool2d(T(IMG), 3, 2, 1)", "F.avg_pool2d(T(IMG), 3, 2, 1, mode='average')",
    "F.adaptive_avg_pool2d(T(IMG), (3, 5))", "F.adaptive_max_pool2d(T(IMG), (3, 5))",
    "F.nn.layer_norm(T(IMG), (8, 8), affine=False)", "F.nn.instance_norm(T(IMG), affine=False)",
    "F.nn.group_norm(T(IMG), 3, affine=False)",
    "F.nn.interpolate(T(IMG), scale_factor=2, mode='bilinear', align_corners=False)",
    "F.nn.interpolate(T(IMG), size=(5, 7), mode='bilinear', align_corners=True)",
    "F.nn.interpolate(T(IMG), size=(5, 7), mode='nearest')", "F.nn.interpolate(T(IMG), size=(13, 11), mode='bicubic')",
    "F.nn.pad(T(IMG), ((0,0),(0,0),(1,2),(2,1)), mode='reflect')",
    "F.nn.pad(T(IMG), ((0,0),(0,0),(1,2),(2,1)), mode='edge')",
    "F.vision.roi_align(T(IMG), %s, (2, 3), spatial_scale=1.0, sample_points=2, aligned=True)" % ROIS,
    "F.vision.roi_pooling(T(IMG), %s, (2, 3), mode='max', scale=1.0)" % ROIS,
    "F.vision.nms(T(np.array([[0,0,10,10],[1,1,11,11],[20,20,30,30],[0,0,9,9]],'float32')), "
    "T(np.array([0.9,0.8,0.7,0.95],'float32')), 0.5)",
    "F.vision.correlation(T(IMG), T(IMG[::-1].copy()), kernel_size=1, max_displacement=2, stride1=1, stride2=1, "
    "pad_size=2, is_multiply=True)",
    "F.nn.pixel_shuffle(T(rs.randn(1, 8, 3, 3).astype('float32')), 2)", "F.nn.embedding(T(IDX), T(MAT))",
    "F.nn.sliding_window(T(IMG), (3, 3), padding=1, stride=2)", "F.vision.warp_perspective(T(IMG), %s, (6, 6))" % HOMO,
    "F.vision.remap(T(IMG), T((rs.rand(2, 5, 5, 2) * 7).astype('float32')))",
    "T(A)[:, 1:, ::2, -1]", "T(A)[T(np.array([1, 0], 'int32'))]", "T(A)[..., T(np.array([4, 0, 2], 'int32'))]",
    "T(A)[T(A) > 1]", "T(MAT).astype('int32')", "T(V * 300).astype('int8')", "T(V * 300).astype('uint8')",
    "T(INT).astype('float16') / 3", "T(INT) / T(np.array([2, 3, 5, 7], 'int32'))", "T(INT) * 0.5", "T(INT) + True",
    "T(INT) ** 2", "2 ** T(INT)", "T(INT) >> 1", "T(INT).sum()", "T(INT).mean()", "F.mean(T(INT), axis=0)",
    "T(INT).prod()", "F.matinv(T(MAT[:, :4] + 3 * np.eye(4, dtype='float32')))", "F.svd(T(MAT))[1]",
    "F.isnan(T(np.array([1.0, np.nan], 'float32')))", "F.logaddexp(T(V), T(V[::-1].copy()))",
    "F.acosh(T(POS + 1))", "F.atanh(T(V / 4))", "F.left_shift(T(INT), 2)", "F.logical_xor(T(INT) > 0, T(INT) < 2)",
    "F.nn.conv1d(T(rs.randn(2, 3, 9).astype('float32')), T(rs.randn(4, 3, 3).astype('float32')), padding=1)",
    "F.nn.conv3d(T(rs.randn(1, 2, 4, 4, 4).astype('float32')), T(rs.randn(3, 2, 2, 2, 2).astype('float32')))",
]
GRADIENTS = [
    ("F.nn.logsoftmax(x, axis=1)", MAT), ("F.relu(x)", A), ("F.gelu(x)", V), ("F.hswish(x)", V), ("F.abs(x)", V),
    ("F.max(x, axis=1)", MAT), ("F.var(x, axis=1)", MAT), ("F.norm(x, ord=2, axis=1)", MAT),
    ("F.normalize(x, axis=1)", MAT), ("F.prod(x, axis=1)", MAT), ("F.cumsum(x, axis=1)", MAT), ("F.topk(x, 3)[0]", V),
    ("F.clip(x, -0.5, 0.5)", V), ("F.max_pool2d(x, 3, 2, 1)", IMG), ("F.avg_pool2d(x, 3, 2, 1)", IMG),
    ("F.adaptive_max_pool2d(x, (3, 5))", IMG), ("F.conv2d(x, T(W), stride=2, padding=1)", IMG),
    ("F.nn.interpolate(x, scale_factor=2, mode='bilinear', align_corners=False)", IMG),
    ("F.nn.group_norm(x, 3, affine=False)", IMG), ("F.batch_norm(x, None, None, training=True)", IMG),
    ("F.nn.pad(x, ((0,0),(0,0),(1,2),(2,1)), mode='reflect')", IMG),
    ("F.vision.roi_align(x, %s, (2, 3), spatial_scale=1.0, sample_points=2, aligned=True)" % ROIS, IMG),
    ("F.vision.roi_pooling(x, %s, (2, 3), mode='max', scale=1.0)" % ROIS, IMG),
    ("F.vision.warp_perspective(x, %s, (6, 6))" % HOMO, IMG),
    ("F.nn.cross_entropy(x[:, :5], T(LBL), label_smooth=0.1)", MAT), ("x[T(A) > 1]", A),
    ("F.indexing_one_hot(x, T(IDX), 1)", MAT), ("F.matinv(x[:, :4] + T(3 * np.eye(4, dtype='float32')))", MAT),
    ("F.logsumexp(x, axis=1)", MAT), ("F.nn.sliding_window(x, (3, 3), padding=1, stride=2)", IMG),
    ("F.svd(x)[1]", MAT),
]


def _run(framework, out_path):
    """(in the child) Evaluate every case with ``framework`` ("megengine" or "megxla"); pickle the results."""
    import warnings
    warnings.filterwarnings("ignore")
    mge = __import__(framework)
    F = __import__(framework + ".functional", fromlist=["_"])
    GradManager = __import__(framework + ".autodiff", fromlist=["_"]).GradManager
    T = mge.tensor
    out = {}
    for i, case in enumerate(FORWARD):
        ns = dict(globals(), T=T, F=F, mge=mge, rs=np.random.RandomState(i + 100))
        try:
            r = eval(case, ns)
            r = r[0] if isinstance(r, (list, tuple)) else r
            out[case] = ("ok", np.asarray(r.numpy()))
        except Exception as e:  # (an error is a result too: both should raise)
            out[case] = ("error", f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
    for i, (case, value) in enumerate(GRADIENTS):
        try:
            x = mge.Parameter(value.copy())
            gm = GradManager().attach([x])
            with gm:
                y = eval(case, dict(globals(), T=T, F=F, mge=mge, x=x))
                cot = np.random.RandomState(i).randn(*y.shape).astype("float32")
                gm.backward((y * T(cot)).sum())
            out["grad " + case] = ("ok", x.grad.numpy())
        except Exception as e:
            out["grad " + case] = ("error", f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
    with open(out_path, "wb") as f:
        pickle.dump(out, f)


def compare(ours, theirs):
    """Lines describing where ``ours`` (megxla's results) and ``theirs`` (MegEngine's) disagree."""
    lines = []
    for case, (status, value) in theirs.items():
        mine = ours.get(case, ("missing", None))
        if mine[0] != status:
            lines.append(f"STATUS {case[:100]}: MegEngine {status} {value if status == 'error' else ''} | "
                         f"megxla {mine[0]} {mine[1] if mine[0] == 'error' else ''}")
        elif status == "ok":
            a, b = value, mine[1]
            if a.dtype != b.dtype:
                lines.append(f"DTYPE {case[:100]}: MegEngine {a.dtype}, megxla {b.dtype}")
            if a.shape != b.shape:
                lines.append(f"SHAPE {case[:100]}: MegEngine {a.shape}, megxla {b.shape}")
            elif not np.allclose(a.astype("float64"), b.astype("float64"), rtol=1e-4, atol=1e-5, equal_nan=True):
                d = np.nanmax(np.abs(a.astype("float64") - b.astype("float64")))
                lines.append(f"VALUE {case[:100]}: max difference {d:.3g}")
    return lines


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        return _run(sys.argv[2], sys.argv[3])
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    megengine_python = sys.argv[1]
    here = os.path.abspath(__file__)
    root = os.path.dirname(os.path.dirname(here))
    with tempfile.TemporaryDirectory() as d:
        results = {}
        for name, python, env in [("megengine", megengine_python, {}),
                                  ("megxla", sys.executable, {"PYTHONPATH": root})]:
            path = os.path.join(d, name + ".pkl")
            subprocess.run([python, here, "--child", name, path], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=dict(os.environ, **env))
            with open(path, "rb") as f:
                results[name] = pickle.load(f)
    lines = compare(results["megxla"], results["megengine"])
    print("\n".join(lines))
    print(f"{len(lines)} disagreement(s) in {len(results['megengine'])} cases")
    sys.exit(1 if lines else 0)


if __name__ == "__main__":
    main()
