"""Patterns of four more third-party MegEngine projects, each a few lines of the project's own model code inlined,
with the values MegEngine 1.13.0 gives (CPU wheel, 2026-12-07; printed by the same code with ``import megengine``).
Whole-model runs (3 training steps, same weights in both) agreed with MegEngine within what its own steps move
under relative noise of 1e-7 on the input (docs/differences.md); these keep the pieces.

- MegEngine/GyroFlow (https://github.com/MegEngine/GyroFlow): ``mesh_grid`` + ``astype(tensor)`` + ``remap``
  warping, ``upsample2d_flow_as``'s in-place ``res[:, 0] *= s`` under a GradManager, the PWC cost volume over
  per-channel normalized features.
- MegEngine/RepLKNet (https://github.com/MegEngine/RepLKNet): a ``ConvBn2d`` subclass that drops ``bias``,
  ``LargeKernelReparam``'s ``outp +=`` in training mode, and ``convert_to_deploy``'s BN fusion (``deepcopy``,
  ``_infer_bias_shape``, ``weight[:] = ...``, the small kernel padded into the large one).
- Asthestarsfalll/LightCNN-MegEngine (https://github.com/Asthestarsfalll/LightCNN-MegEngine): ``mfm``
  (``F.split`` + ``F.maximum``) and its ``MaxPool2d`` subclass padding odd sizes with ``-inf``.
- Asthestarsfalll/CLIP-MegEngine (https://github.com/Asthestarsfalll/CLIP-MegEngine): the causal ``-inf`` mask made
  by ``np.triu`` and passed through ``mge.tensor(mask, dtype=x.dtype)``, the EOT gather
  ``x[F.arange(n), F.argmax(text, -1)]``, ``logit_scale = Parameter(F.ones([1]) * F.log(1 / 0.07))`` and the
  symmetric contrastive loss; ``M.Sequential(OrderedDict)`` with a key ``"-1"``.
"""
import copy
from collections import OrderedDict

import numpy as np

import megxla as mge
import megxla.functional as F
import megxla.module as M
from megxla.autodiff import GradManager


def _sig(x):
    # sum, sum of magnitudes and a position-weighted sum: a compact check of a whole array
    x = np.asarray(x, dtype=np.float64).ravel()
    return np.array([x.sum(), np.abs(x).sum(), (x * np.cos(np.arange(x.size))).sum()])


def _check_sig(x, expected, rtol=1e-5):
    got = _sig(x)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * abs(expected[1]))


# ---- MegEngine/GyroFlow: common/utils.py (mesh_grid, flow_warp, upsample2d_flow_as), model/net.py ------------
def _mesh_grid(B, H, W):
    x_base = F.arange(0, W)
    x_base = F.tile(x_base, (B, H, 1))
    y_base = F.arange(0, H)
    y_base = F.tile(y_base, (B, W, 1)).transpose(0, 2, 1)
    return F.stack([x_base, y_base], 1)


def _flow_warp(x, flow12):
    B, _, H, W = x.shape
    base_grid = _mesh_grid(B, H, W).astype(x)  # a Tensor as the dtype: np.dtype reads its .dtype
    grid_warp = F.transpose(base_grid + flow12, (0, 2, 3, 1))
    return F.vision.remap(x, grid_warp)


def _upsample2d_flow_as(inputs, target_as, mode="bilinear", if_rate=False):
    _, _, h, w = target_as.shape
    res = F.vision.interpolate(inputs, [h, w], mode=mode, align_corners=True)
    _, _, h_, w_ = inputs.shape
    if if_rate:
        res[:, 0] *= (w / w_)
        res[:, 1] *= (h / h_)
    return res


def test_gyroflow_warp_of_upsampled_flow_matches_megengine():
    rs = np.random.RandomState(0)
    x = mge.Parameter(rs.rand(1, 2, 4, 5).astype("float32"))
    flow = mge.Parameter((rs.randn(1, 2, 2, 3) * 0.7).astype("float32"))
    wts = mge.tensor(rs.randn(1, 2, 4, 5).astype("float32"))
    gm = GradManager().attach([x, flow])
    with gm:
        fl = _upsample2d_flow_as(flow, x, if_rate=True)
        warped = _flow_warp(x, fl)
        gm.backward((warped * wts).sum())
    mesh = _mesh_grid(1, 2, 3)
    # MegEngine 1.13.0: arange is float32; astype(t) takes t's dtype
    assert mesh.dtype == np.float32 and mesh.astype(mge.tensor([1], dtype="int32")).dtype == np.int32
    assert mesh.astype(mge.tensor([1], dtype="float16")).dtype == np.float16
    np.testing.assert_array_equal(mesh.numpy().ravel(), [0, 1, 2, 0, 1, 2, 0, 0, 0, 1, 1, 1])
    _check_sig(fl.numpy(), [-18.121273, 40.43885, -2.9356772])
    _check_sig(warped.numpy(), [26.574176, 26.574176, 1.5156154])
    _check_sig(x.grad.numpy(), [-14.05592, 18.248478, -3.9152396])
    np.testing.assert_allclose(flow.grad.numpy().ravel(), [
        -0.095541589, -0.30318162, 1.1336741, -0.64130354, -1.0477569, 0.014970229, 0.017043345, -0.1371173,
        -0.48525292, -0.51691037, -0.77893734, -0.21916807], rtol=1e-5, atol=1e-6)


def test_gyroflow_cost_volume_of_normalized_features_matches_megengine():
    # GyroFlow.normalize_features(center, normalize, moments_across_channels=False) and CostVolume (d=1 here)
    def normalize(f):
        mean = F.mean(f, axis=[2, 3], keepdims=True)
        var = F.var(f, axis=[2, 3], keepdims=True)
        return (f - mean) / F.sqrt(var + 1e-16)

    def cost_volume(x1, x2, d=1):
        _, _, H, W = x1.shape
        x2 = F.nn.pad(x2, ((0, 0), (0, 0), (d, d), (d, d)))
        cv = []
        for i in range(2 * d + 1):
            for j in range(2 * d + 1):
                cv.append(F.mean(x1 * x2[:, :, i:(i + H), j:(j + W)], 1, keepdims=True))
        return F.concat(cv, 1)

    rs = np.random.RandomState(0)
    rs.rand(1, 2, 4, 5), rs.randn(1, 2, 2, 3), rs.randn(1, 2, 4, 5)  # the draws of the test above
    a = mge.Parameter(rs.randn(1, 3, 3, 4).astype("float32"))
    b = mge.Parameter(rs.randn(1, 3, 3, 4).astype("float32"))
    gm = GradManager().attach([a, b])
    with gm:
        cv = F.nn.leaky_relu(cost_volume(normalize(a), normalize(b)), 0.1)
        gm.backward((cv * F.arange(9).reshape(1, 9, 1, 1)).sum())
    # MegEngine 1.13.0:
    _check_sig(cv.numpy(), [13.622842, 16.915902, 0.65727301])
    _check_sig(a.grad.numpy(), [7.8231096e-08, 54.50331, -0.42347646])
    _check_sig(b.grad.numpy(), [1.6093254e-06, 63.800903, 18.379621])


# ---- MegEngine/RepLKNet: model_replknet.py (ConvBn2d, _fuse_conv_bn, LargeKernelReparam) -----------------------
class _ConvBn2d(M.ConvBn2d):
    def __init__(self, *args, **kwargs):
        bias = kwargs.pop("bias", False) and False
        super().__init__(*args, bias=bias, **kwargs)


def _fuse_conv_bn(conv, bn):
    module_output = copy.deepcopy(conv)
    module_output.bias = mge.Parameter(np.zeros(module_output._infer_bias_shape(), dtype=np.float32))
    kernel = F.flatten(conv.weight, end_axis=conv.weight.ndim - 4)
    std = F.sqrt(bn.running_var + bn.eps)
    t = (bn.weight / std).reshape(-1, 1, 1, 1)
    module_output.weight[:] = (kernel * t).reshape(module_output.weight.shape)
    module_output.bias[:] = bn.bias + ((conv.bias if conv.bias is not None else 0) - bn.running_mean) * bn.weight / std
    return module_output


class _LargeKernelReparam(M.Module):
    def __init__(self, channels, kernel, small_kernels=(3,)):
        super().__init__()
        self.dw_large = _ConvBn2d(channels, channels, kernel, padding=kernel // 2, groups=channels)
        self.small_kernels = small_kernels
        for k in small_kernels:
            setattr(self, f"dw_small_{k}", _ConvBn2d(channels, channels, k, padding=k // 2, groups=channels))

    def forward(self, inp):
        outp = self.dw_large(inp)
        for k in self.small_kernels:
            outp += getattr(self, f"dw_small_{k}")(inp)
        return outp


def test_replknet_large_kernel_training_step_and_deploy_fusion_match_megengine():
    lk = _LargeKernelReparam(2, 7)
    r2 = np.random.RandomState(3)
    for name, p in lk.named_parameters():
        p[:] = r2.uniform(0.5, 1.5, p.shape).astype("float32") if "bn.weight" in name else \
            (r2.randn(*p.shape) * 0.3).astype("float32")
    assert lk.dw_large.conv.bias is None
    x = mge.tensor(r2.randn(2, 2, 6, 6).astype("float32"))
    gm = GradManager().attach(lk.parameters())
    lk.train()
    with gm:
        y = lk(x)
        gm.backward((y * y).mean())
    # MegEngine 1.13.0:
    _check_sig(y.numpy(), [58.53347, 136.06789, 0.64017848])
    _check_sig(lk.dw_large.conv.weight.grad.numpy(), [0.65879517, 3.2456185, -0.41264498])
    np.testing.assert_allclose(lk.dw_large.bn.running_var.numpy().ravel(), [1.0536547, 1.1368873], rtol=1e-6)
    lk.eval()
    ev = lk(x)
    big = _fuse_conv_bn(lk.dw_large.conv, lk.dw_large.bn)
    small = _fuse_conv_bn(lk.dw_small_3.conv, lk.dw_small_3.bn)
    big.weight += F.pad(small.weight, [[0, 0]] * 3 + [[2, 2]] * 2)
    big.bias += small.bias
    assert big.bias.shape == (1, 2, 1, 1)
    _check_sig(ev.numpy(), [60.753858, 152.77882, 3.0625357])
    _check_sig(big(x).numpy(), [60.753855, 152.77882, 3.0625364])


# ---- Asthestarsfalll/LightCNN-MegEngine: models/light_cnn.py (mfm), models/pooling.py (MaxPool2d) --------------
class _MaxPool2d(M.MaxPool2d):
    def __init__(self, ceil_mode=False, **kwargs):
        super().__init__(**kwargs)
        self.ceil_mode = ceil_mode

    def forward(self, inp):
        if self.ceil_mode and inp.shape[2] % 2 != 0:
            inp = F.nn.pad(inp, ((0, 0), (0, 0), (0, 1), (0, 1)), constant_value=-float("inf"))
        return super().forward(inp)


class _mfm(M.Module):
    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, padding=1):
        super().__init__()
        self.filter = M.Conv2d(in_channels, 2 * out_channels, kernel_size=kernel_size, stride=stride,
                               padding=padding)

    def forward(self, x):
        out = F.split(self.filter(x), 2, 1)
        return F.maximum(out[0], out[1])


def test_lightcnn_mfm_and_ceil_mode_pool_match_megengine():
    r3 = np.random.RandomState(4)
    net = M.Sequential(_mfm(1, 2), _MaxPool2d(kernel_size=2, stride=2, ceil_mode=True))
    net[0].filter.weight[:] = r3.randn(4, 1, 3, 3).astype("float32")
    net[0].filter.bias[:] = r3.randn(1, 4, 1, 1).astype("float32")
    x = mge.Parameter(r3.randn(1, 1, 5, 5).astype("float32"))
    gm = GradManager().attach(list(net.parameters()) + [x])
    with gm:
        y = net(x)
        gm.backward((y * mge.tensor(r3.randn(*y.shape).astype("float32"))).sum())
    assert y.shape == (1, 2, 3, 3)
    # MegEngine 1.13.0:
    _check_sig(y.numpy(), [63.50992, 63.50992, -3.8533182])
    _check_sig(x.grad.numpy(), [-10.807172, 28.592915, 3.2063233])
    _check_sig(net[0].filter.weight.grad.numpy(), [-6.3462949, 42.035513, -8.6239111])


def test_lightcnn_mfm_tie_sends_the_gradient_to_the_first_half():
    a = mge.Parameter(np.array([1.0, 2.0, 3.0], "float32"))
    b = mge.Parameter(np.array([1.0, 5.0, 3.0], "float32"))
    gm = GradManager().attach([a, b])
    with gm:
        gm.backward((F.maximum(a, b) * mge.tensor([1.0, 2.0, 3.0])).sum())
    # MegEngine 1.13.0: ties go to the first operand
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 0.0, 3.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.0, 2.0, 0.0])


# ---- Asthestarsfalll/CLIP-MegEngine: model/model.py (build_attention_mask, encode_text, forward) ---------------
def test_clip_causal_mask_eot_gather_and_contrastive_loss_match_megengine():
    L, N, E, H = 4, 2, 4, 2
    r4 = np.random.RandomState(5)
    mask = np.triu(np.full([L, L], fill_value=float("-inf")), k=1)
    wqkv = mge.Parameter((r4.randn(3 * E, E) * 0.5).astype("float32"))
    wo = mge.Parameter((r4.randn(E, E) * 0.5).astype("float32"))
    tok = mge.Parameter(r4.randn(6, E).astype("float32"))
    text = mge.tensor(np.array([[1, 5, 0, 0], [2, 3, 5, 1]], "int32"))
    logit_scale = mge.Parameter(F.ones([1]) * F.log(1 / 0.07))
    gm = GradManager().attach([wqkv, wo, tok, logit_scale])
    with gm:
        xt = mge.tensor(F.embedding(text, tok), dtype="float32").transpose(1, 0, 2)
        q, k, v = F.split(F.linear(xt, wqkv), 3, axis=-1)
        q = q.reshape(-1, N * H, E // H).transpose(1, 0, 2)
        k = k.reshape(-1, N * H, E // H).transpose(1, 0, 2)
        v = v.reshape(-1, N * H, E // H).transpose(1, 0, 2)
        am = mge.tensor(mask, dtype=xt.dtype, device=xt.device)
        w = F.softmax(F.matmul(q, k.transpose(0, 2, 1)) / (E // H) ** 0.5 + am, axis=-1)
        o = F.linear(F.matmul(w, v).transpose(1, 0, 2).reshape(L, N, E), wo).transpose(1, 0, 2)
        feat = o[F.arange(o.shape[0], dtype=np.int32), F.argmax(text, axis=-1)]
        feat = feat / F.norm(feat, axis=1, keepdims=True)
        img = mge.tensor(r4.randn(N, E).astype("float32"))
        img = img / F.norm(img, axis=1, keepdims=True)
        logits = F.exp(logit_scale) * img @ feat.transpose(1, 0)
        lab = mge.tensor(np.arange(N, dtype="int32"))
        loss = (F.nn.cross_entropy(logits, lab) + F.nn.cross_entropy(logits.transpose(1, 0), lab)) / 2
        gm.backward(loss)
    # MegEngine 1.13.0:
    assert np.all(np.triu(w.numpy(), k=1) == 0)
    _check_sig(w.numpy(), [16.0, 16.0, -1.5300962])
    np.testing.assert_allclose(logits.numpy().ravel(), [9.9420309, -7.4113512, -0.51770347, 5.7485805], rtol=1e-5)
    np.testing.assert_allclose(loss.numpy(), 0.00048196316, rtol=1e-4)
    _check_sig(tok.grad.numpy(), [0.00072217745, 0.0088836109, 0.00055752773], rtol=2e-5)
    _check_sig(wqkv.grad.numpy(), [-0.0016397635, 0.055516362, 0.012493398])
    np.testing.assert_allclose(logit_scale.grad.numpy(), [-0.0030508817], rtol=1e-5)


def test_clip_sequential_of_ordered_dict_keys_are_megengines():
    # ModifiedResNet's Bottleneck.downsample: the avg pool keyed "-1" holds no state
    seq = M.Sequential(OrderedDict([("-1", M.AvgPool2d(2)), ("0", M.Conv2d(1, 1, 1, bias=False)),
                                    ("1", M.BatchNorm2d(1))]))
    # MegEngine 1.13.0:
    assert sorted(seq.state_dict()) == ['0.weight', '1.bias', '1.running_mean', '1.running_var', '1.weight']
