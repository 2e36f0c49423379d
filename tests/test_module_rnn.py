"""Recurrent, attention and other functional-backed layers of megxla.module: RNNCell / LSTMCell / RNN / LSTM,
MultiHeadAttention, BatchMatMulActivation and RegionRestrictedConv against NumPy references, gradient flow,
eager == xla_trace, seeded init, argument errors and docstring examples. Tiny sizes: every distinct shape
costs an XLA compilation."""
import doctest
import math

import numpy as np
import pytest

import megxla as mge
import megxla.functional as F
import megxla.module as M
import megxla.optimizer as optim
from megxla.autodiff import GradManager
from megxla.jit import xla_trace

RNG = np.random.default_rng(0)
T_, N_, IN, H = 4, 2, 3, 4  # sequence length, batch, input features, hidden features


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def T(a):
    return mge.Tensor(a)


def close(a, b, atol=1e-5, rtol=1e-4):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), atol=atol, rtol=rtol)


# ---- NumPy references (float64) ------------------------------------------------------------------------------------
def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_rnn_step(x, h, w_ih, w_hh, b_ih, b_hh, nonlinearity="tanh"):
    pre = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    return np.tanh(pre) if nonlinearity == "tanh" else np.maximum(pre, 0)


def np_lstm_step(x, h, c, w_ih, w_hh, b_ih, b_hh, w_hr=None):
    gates = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    i, f, g, o = np.split(gates, 4, axis=-1)  # gate order i, f, g, o (MegEngine / PyTorch)
    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h = sigmoid(o) * np.tanh(c)
    return (h if w_hr is None else h @ w_hr.T), c


def np_params(m, layer, direction):
    """One cell's weights read from ``_flatten_weights`` as MegEngine's kernels read it: a flat buffer holding, per
    layer and direction, weight_ih, weight_hh, bias_ih, bias_hh contiguously (written independently of megxla)."""
    flat = m._flatten_weights.numpy().astype(np.float64).ravel()
    g = m._flatten_weights.shape[0]
    h_out = m.hidden_size  # proj_size is ignored, as MegEngine 1.13
    d = 2 if m.bidirectional else 1
    pos, zero = 0, np.zeros(g)
    for k in range(m.num_layers):
        in_k = m.input_size if k == 0 else d * h_out
        for dd in range(d):
            w_ih = flat[pos:pos + g * in_k].reshape(g, in_k)
            pos += g * in_k
            w_hh = flat[pos:pos + g * h_out].reshape(g, h_out)
            pos += g * h_out
            b_ih = b_hh = zero
            if m.bias:
                b_ih, b_hh = flat[pos:pos + g], flat[pos + g:pos + 2 * g]
                pos += 2 * g
            if (k, dd) == (layer, direction):
                sfx = f"_l{layer}" + ("_reverse" if direction else "")
                w_hr = getattr(m, "weight_hr" + sfx, None)
                return w_ih, w_hh, b_ih, b_hh, None if w_hr is None else w_hr.numpy().astype(np.float64)
    assert pos == flat.size


def np_sequence(m, x, h0, c0=None):
    """Multi-layer (bi)directional RNN / LSTM on a time-major x (T, N, F); dropout-free."""
    lstm = isinstance(m, M.LSTM)
    d = 2 if m.bidirectional else 1
    inp, hn, cn = x.astype(np.float64), [], []
    for layer in range(m.num_layers):
        outs = []
        for direction in range(d):
            w_ih, w_hh, b_ih, b_hh, w_hr = np_params(m, layer, direction)
            h = h0[layer * d + direction].astype(np.float64)
            c = None if c0 is None else c0[layer * d + direction].astype(np.float64)
            ys = [None] * x.shape[0]
            order = range(x.shape[0] - 1, -1, -1) if direction else range(x.shape[0])
            for t in order:
                if lstm:
                    h, c = np_lstm_step(inp[t], h, c, w_ih, w_hh, b_ih, b_hh, w_hr)
                else:
                    h = np_rnn_step(inp[t], h, w_ih, w_hh, b_ih, b_hh, m.nonlinearity)
                ys[t] = h
            hn.append(h)
            cn.append(c)
            outs.append(np.stack(ys))
        inp = np.concatenate(outs, axis=-1)
    return (inp, np.stack(hn), np.stack(cn)) if lstm else (inp, np.stack(hn))


# ---- cells ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nonlinearity,bias", [("tanh", True), ("relu", False)])
def test_rnn_cell_matches_numpy(nonlinearity, bias):
    cell = M.RNNCell(IN, H, bias=bias, nonlinearity=nonlinearity)
    assert cell.weight_ih.shape == (H, IN) and cell.weight_hh.shape == (H, H)
    if not bias:  # MegEngine keeps zero buffers, not parameters
        assert [k for k, _ in cell.named_parameters()] == ["weight_hh", "weight_ih"]
        assert sorted(k for k, _ in cell.named_buffers()) == ["bias_hh", "bias_ih"]
    x, h = randn(N_, IN), randn(N_, H)
    w = [t.numpy().astype(np.float64) for t in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)]
    close(cell(T(x), T(h)).numpy(), np_rnn_step(x, h, *w, nonlinearity))
    close(cell(T(x)).numpy(), np_rnn_step(x, np.zeros((N_, H)), *w, nonlinearity))  # hx=None: zeros


def test_lstm_cell_matches_numpy():
    cell = M.LSTMCell(IN, H)
    assert cell.weight_ih.shape == (4 * H, IN) and cell.bias_hh.shape == (4 * H,)
    cell.bias_ih._reset(T(randn(4 * H)))  # non-zero biases so the gate order matters everywhere
    x, h, c = randn(N_, IN), randn(N_, H), randn(N_, H)
    w = [t.numpy().astype(np.float64) for t in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)]
    h1, c1 = cell(T(x), (T(h), T(c)))
    rh, rc = np_lstm_step(x, h, c, *w)
    close(h1.numpy(), rh)
    close(c1.numpy(), rc)
    h0, c0 = cell(T(x))
    rh, rc = np_lstm_step(x, np.zeros((N_, H)), np.zeros((N_, H)), *w)
    close(h0.numpy(), rh)
    close(c0.numpy(), rc)


# ---- sequence modules -----------------------------------------------------------------------------------------------
SEQ_CASES = [
    dict(kind="rnn", num_layers=1),
    dict(kind="rnn", num_layers=2, bidirectional=True, batch_first=True, nonlinearity="relu"),
    dict(kind="rnn", num_layers=1, bidirectional=True, bias=False),
    dict(kind="lstm", num_layers=1, bidirectional=True),
    dict(kind="lstm", num_layers=2, batch_first=True),
    dict(kind="lstm", num_layers=2, bidirectional=True, batch_first=True),
    dict(kind="lstm", num_layers=2, bidirectional=True, proj_size=2),
]


def _make(case):
    kw = dict(case)
    kind = kw.pop("kind")
    return M.LSTM(IN, H, **kw) if kind == "lstm" else M.RNN(IN, H, **kw)


def _ids(case):
    return "-".join(f"{k}={v}" for k, v in case.items())


@pytest.mark.parametrize("case", SEQ_CASES, ids=_ids)
def test_sequence_modules_match_numpy(case):
    m = _make(case)
    lstm = isinstance(m, M.LSTM)
    d = 2 if m.bidirectional else 1
    h_out = H  # proj_size is ignored, as MegEngine 1.13
    for _, p in m.named_parameters():  # larger-than-default values exercise the nonlinearities
        p._reset(T(randn(*p.shape, scale=0.6)))
    x = randn(T_, N_, IN)
    x_in = np.swapaxes(x, 0, 1).copy() if m.batch_first else x
    h0, c0 = randn(m.num_layers * d, N_, h_out), randn(m.num_layers * d, N_, H)

    for given in (True, False):
        hx0 = h0 if given else np.zeros_like(h0)
        cx0 = c0 if given else np.zeros_like(c0)
        if lstm:
            out, (hn, cn) = m(T(x_in), (T(h0), T(c0)) if given else None)
            ref_out, ref_h, ref_c = np_sequence(m, x, hx0, cx0)
            close(cn.numpy(), ref_c)
        else:
            out, hn = m(T(x_in), T(h0) if given else None)
            ref_out, ref_h = np_sequence(m, x, hx0)
        if m.batch_first:
            ref_out = np.swapaxes(ref_out, 0, 1)
        assert out.shape == ref_out.shape == ((N_, T_, d * h_out) if m.batch_first else (T_, N_, d * h_out))
        assert hn.shape == (m.num_layers * d, N_, h_out)
        close(out.numpy(), ref_out)
        close(hn.numpy(), ref_h)


def test_parameter_layout_and_megengine_hooks():
    m = M.LSTM(IN, H, num_layers=2, bidirectional=True)
    sd = {k: v.shape for k, v in m.state_dict().items()}
    # MegEngine 1.13's keys and shapes: one flat weight (4H, sum(in + H) + 2 * layers * D) plus the unused cells
    assert sd["_flatten_weights"] == (4 * H, (IN + H) * 2 + (2 * H + H) * 2 + 2 * 2 * 2)
    assert sd["cells.0.1.weight_ih"] == (4 * H, IN) and sd["cells.1.0.weight_ih"] == (4 * H, 2 * H)
    assert sd["cells.1.1.weight_hh"] == (4 * H, H) and sd["cells.0.0.bias_ih"] == (4 * H,)
    assert len(sd) == 1 + 4 * 4
    w = m.cell_weights(1, 1)
    assert w["weight_ih"].shape == (4 * H, 2 * H) and w["bias_hh"].shape == (4 * H,)
    for name, ref in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"), np_params(m, 1, 1)):
        np.testing.assert_array_equal(w[name].numpy(), ref.astype(np.float32))
    # MegEngine 1.13 ignores proj_size: no weight_hr_l0, the layout of proj_size=0
    proj = {k: v.shape for k, v in M.LSTM(IN, H, proj_size=2).named_parameters()}
    assert proj == {k: v.shape for k, v in M.LSTM(IN, H).named_parameters()}
    assert proj["_flatten_weights"] == (4 * H, IN + H + 2)
    nobias = M.RNN(IN, H, bias=False)
    assert nobias._flatten_weights.shape == (H, IN + H)
    assert sorted(k for k, _ in nobias.named_buffers()) == ["cells.0.0.bias_hh", "cells.0.0.bias_ih"]
    with pytest.raises(ValueError, match="no cell"):
        m.cell_weights(2, 0)
    # MegEngine's method surface
    h, c = m.init_hidden(5)
    assert h.shape == c.shape == (4, 5, H) and not h.numpy().any()
    assert m.get_output_from_hidden((h, c)) is h
    cell = m.create_cell(1)
    assert isinstance(cell, M.LSTMCell) and cell.input_size == 2 * H and cell.hidden_size == H
    r = M.RNN(IN, H, nonlinearity="relu")
    assert r.get_output_from_hidden(r.init_hidden(2)).shape == (1, 2, H)
    assert r.create_cell(0).nonlinearity == "relu"
    out, hn = r.apply_op(T(randn(T_, N_, IN)), r.init_hidden(N_))
    assert out.shape == (T_, N_, H) and hn.shape == (1, N_, H)
    sd = m.state_dict()
    m2 = M.LSTM(IN, H, num_layers=2, bidirectional=True)
    m2.load_state_dict(sd)
    x = T(randn(T_, N_, IN))
    close(m2(x)[0].numpy(), m(x)[0].numpy(), atol=0, rtol=0)


def test_init_is_uniform_and_reproducible_under_seed():
    mge.random.seed(7)
    a = M.LSTM(IN, H, num_layers=2, bidirectional=True)
    ca = M.RNNCell(IN, H)
    mge.random.seed(7)
    b = M.LSTM(IN, H, num_layers=2, bidirectional=True)
    cb = M.RNNCell(IN, H)
    bound = 1 / math.sqrt(H)
    for (ka, pa), (kb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert ka == kb
        np.testing.assert_array_equal(pa.numpy(), pb.numpy())
        assert np.abs(pa.numpy()).max() <= bound and pa.numpy().std() > bound / 4
    np.testing.assert_array_equal(ca.weight_hh.numpy(), cb.weight_hh.numpy())
    assert not np.array_equal(a.cell_weights(0, 0)["weight_ih"].numpy(), a.cell_weights(0, 1)["weight_ih"].numpy())


def test_dropout_between_layers_only_in_training():
    m = M.RNN(IN, H, num_layers=2, dropout=0.5)
    x = T(randn(T_, N_, IN))
    m.eval()
    ref_out, ref_h = np_sequence(m, x.numpy(), np.zeros((2, N_, H)))
    out, hn = m(x)
    close(out.numpy(), ref_out)
    m.train()
    mge.random.seed(1)
    t1 = m(x)[0].numpy()
    mge.random.seed(1)
    t2 = m(x)[0].numpy()
    np.testing.assert_array_equal(t1, t2)  # seeded
    assert not np.allclose(t1, ref_out)  # dropped units change the top layer
    # the last layer's output itself is not dropped: a 1-layer module ignores dropout
    one = M.RNN(IN, H, dropout=0.5)
    close(one(x)[0].numpy(), np_sequence(one, x.numpy(), np.zeros((1, N_, H)))[0])


# ---- gradients --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda: M.RNN(IN, H, num_layers=2, bidirectional=True, batch_first=True),
                                  lambda: M.LSTM(IN, H, num_layers=2, bidirectional=True, proj_size=2),
                                  lambda: M.RNNCell(IN, H), lambda: M.LSTMCell(IN, H)],
                         ids=["RNN", "LSTM-proj", "RNNCell", "LSTMCell"])
def test_gradient_reaches_every_parameter(make):
    m = make()
    cell = isinstance(m, (M.RNNCell, M.LSTMCell))
    x = T(randn(N_, IN) if cell else randn(T_, N_, IN))
    gm = GradManager().attach(m.parameters())
    with gm:
        # cells get a non-zero state: with the default zeros weight_hh would rightly get a zero gradient
        h = T(randn(N_, H))
        out = m(x, (h, h) if isinstance(m, M.LSTMCell) else h) if cell else m(x)
        if isinstance(m, M.LSTM):
            y, (h, c) = out
            loss = (y ** 2).sum() + h.sum() + c.sum()
        elif isinstance(m, M.LSTMCell):
            loss = (out[0] ** 2).sum() + out[1].sum()
        elif isinstance(m, M.RNN):
            loss = (out[0] ** 2).sum() + out[1].sum()
        else:
            loss = (out ** 2).sum()
        gm.backward(loss)
    for name, p in m.named_parameters():
        if name.startswith("cells."):
            continue  # MegEngine's unused per-cell copies: the forward pass reads _flatten_weights
        assert p.grad is not None, name
        assert p.grad.shape == p.shape, name
        assert np.isfinite(p.grad.numpy()).all() and np.abs(p.grad.numpy()).sum() > 0, name
    if isinstance(m, M.rnn.RNNBase):  # every cell's slice of the flat weight gets a gradient
        g = m._flatten_weights.grad.numpy().ravel()
        for k in range(m.num_layers):
            for d in range(m.num_directions):
                for name, (start, shape) in m._cell_offsets(k, d).items():
                    assert np.abs(g[start:start + int(np.prod(shape))]).sum() > 0, (k, d, name)


def test_lstm_cell_gradient_matches_finite_differences():
    cell = M.LSTMCell(2, 2)
    x, h, c = T(randn(N_, 2)), T(randn(N_, 2)), T(randn(N_, 2))
    r = randn(N_, 2)

    def loss():
        h1, c1 = cell(x, (h, c))
        return (h1 * T(r)).sum() + (c1 ** 2).sum()

    gm = GradManager().attach(cell.parameters())
    with gm:
        gm.backward(loss())
    eps = 1e-2
    for name, p in cell.named_parameters():
        base = p.numpy().astype(np.float64)
        num = np.zeros_like(base)
        for i in np.ndindex(base.shape):
            vals = []
            for sign in (1, -1):
                v = base.copy()
                v[i] += sign * eps
                p._reset(T(v.astype("float32")))
                vals.append(float(loss().numpy()))
            num[i] = (vals[0] - vals[1]) / (2 * eps)
        p._reset(T(base.astype("float32")))
        close(p.grad.numpy(), num, atol=2e-3, rtol=2e-2)


# ---- eager == xla_trace ---------------------------------------------------------------------------------------------
def test_xla_trace_forward_matches_eager():
    lstm = M.LSTM(IN, H, num_layers=2, bidirectional=True, batch_first=True)
    rnn = M.RNN(IN, H, nonlinearity="relu")
    cell = M.LSTMCell(IN, H)
    calls = []

    @xla_trace
    def f(lstm, rnn, cell, x, h0, c0):
        calls.append(1)
        out, (hn, cn) = lstm(x, (h0, c0))
        r_out, r_h = rnn(F.transpose(x, (1, 0, 2)))
        ch, cc = cell(x[:, 0])
        return out, hn, cn, r_out, r_h, ch, cc

    for i in range(3):
        x, h0, c0 = T(randn(N_, T_, IN)), T(randn(4, N_, H)), T(randn(4, N_, H))
        got = f(lstm, rnn, cell, x, h0, c0)
        out, (hn, cn) = lstm(x, (h0, c0))
        r_out, r_h = rnn(F.transpose(x, (1, 0, 2)))
        ch, cc = cell(x[:, 0])
        for g, e in zip(got, (out, hn, cn, r_out, r_h, ch, cc)):
            assert g.shape == e.shape
            close(g.numpy(), e.numpy(), atol=1e-5, rtol=1e-5)
    assert len(calls) == 1  # recorded once, then compiled calls run no Python


def test_xla_trace_training_step_matches_eager():
    mge.random.seed(3)
    traced_m = M.LSTM(IN, H, num_layers=2)
    eager_m = M.LSTM(IN, H, num_layers=2)
    eager_m.load_state_dict(traced_m.state_dict())

    opt_t, gm_t = optim.SGD(traced_m.parameters(), lr=0.1), GradManager().attach(traced_m.parameters())
    opt_e, gm_e = optim.SGD(eager_m.parameters(), lr=0.1), GradManager().attach(eager_m.parameters())

    def step(model, opt, gm, x):
        with gm:
            out, (h, c) = model(x)
            loss = (out ** 2).mean() + h.mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    traced = xla_trace(lambda model, opt, x: step(model, opt, gm_t, x))
    for _ in range(3):
        x = T(randn(T_, N_, IN))
        close(traced(traced_m, opt_t, x).numpy(), step(eager_m, opt_e, gm_e, x).numpy(), atol=1e-5, rtol=1e-5)
    for (k, a), (_, b) in zip(traced_m.named_parameters(), eager_m.named_parameters()):
        close(a.numpy(), b.numpy(), atol=1e-5, rtol=1e-5)


# ---- MultiHeadAttention ---------------------------------------------------------------------------------------------
def np_mha(m, q, k, v, attn_mask=None, key_padding_mask=None):
    """Reference over the packed io_weight_bias: [Wq, Wk, Wv, Wo] (x @ W), then [bq, bk, bv, bo]."""
    e, h = m.embed_dim, m.num_heads
    flat = m.io_weight_bias.numpy().astype(np.float64).ravel()
    shapes = [(e, e), (m.kdim, e), (m.vdim, e), (e, e)] + ([(e,)] * 4 if m.bias else [])
    parts, pos = [], 0
    for s in shapes:
        size = int(np.prod(s))
        parts.append(flat[pos:pos + size].reshape(s))
        pos += size
    assert pos == flat.size
    wq, wk, wv, wo = parts[:4]
    bq, bk, bv, bo = parts[4:] if m.bias else [0.0] * 4
    qp, kp, vp = q @ wq + bq, k @ wk + bk, v @ wv + bv
    n, lq, sk = q.shape[0], q.shape[1], k.shape[1]
    if m.bias_k is not None:
        kp = np.concatenate([kp, np.broadcast_to(m.bias_k.numpy().reshape(1, 1, e), (n, 1, e))], axis=1)
        vp = np.concatenate([vp, np.broadcast_to(m.bias_v.numpy().reshape(1, 1, e), (n, 1, e))], axis=1)
    if m.add_zero_attn:
        kp = np.concatenate([kp, np.zeros((n, 1, e))], axis=1)
        vp = np.concatenate([vp, np.zeros((n, 1, e))], axis=1)
    extra = kp.shape[1] - sk
    d = e // h
    split = lambda t: t.reshape(n, t.shape[1], h, d).transpose(0, 2, 1, 3)  # noqa: E731
    scores = split(qp) @ split(kp).transpose(0, 1, 3, 2) / math.sqrt(d)  # (N, H, L, S')
    if attn_mask is not None:
        scores = scores + np.pad(np.where(attn_mask, -1e30, 0.0), [(0, 0), (0, extra)])
    if key_padding_mask is not None:
        scores = scores + np.pad(np.where(key_padding_mask, -1e30, 0.0), [(0, 0), (0, extra)])[:, None, None]
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    out = (w @ split(vp)).transpose(0, 2, 1, 3).reshape(n, lq, e)
    return out @ wo + bo, w


@pytest.mark.parametrize("kw", [dict(), dict(bias=False, kdim=3, vdim=5), dict(add_bias_kv=True, add_zero_attn=True)],
                         ids=["default", "nobias-kdim-vdim", "bias_kv-zero_attn"])
def test_multi_head_attention_matches_numpy(kw):
    e, h, lq, s = 4, 2, 3, 5
    m = M.MultiHeadAttention(e, h, **kw)
    L = (2 * e + m.kdim + m.vdim) * e + (4 * e if m.bias else 0)
    assert m.io_weight_bias.shape == (1, L)
    bound = 1 / math.sqrt(e)
    assert np.abs(m.io_weight_bias.numpy()).max() <= bound
    q, k, v = randn(N_, lq, e), randn(N_, s, m.kdim), randn(N_, s, m.vdim)
    out, weights = m(T(q), T(k), T(v))
    assert weights is None
    ref, ref_w = np_mha(m, q, k, v)
    close(out.numpy(), ref)
    # masks and returned weights
    attn_mask = np.triu(np.ones((lq, s), bool), k=1)
    kpm = np.zeros((N_, s), bool)
    kpm[0, -1] = True
    out, weights = m(T(q), T(k), T(v), attn_mask=T(attn_mask), key_padding_mask=T(kpm), need_weights=True,
                     average_attn_weights=True)
    ref, ref_w = np_mha(m, q, k, v, attn_mask, kpm)
    close(out.numpy(), ref)
    close(weights.numpy(), ref_w.mean(axis=1))


def test_multi_head_attention_gradient_dropout_and_trace():
    m = M.MultiHeadAttention(4, 2, attn_dropout=0.5, add_bias_kv=True)
    q = T(randn(N_, 3, 4))
    gm = GradManager().attach(m.parameters())
    with gm:
        gm.backward((m(q, q, q)[0] ** 2).sum())
    assert [k for k, _ in m.named_parameters()] == ["bias_k", "bias_v", "io_weight_bias"]
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name
    m.eval()  # no dropout in eval: deterministic and equal to the reference
    close(m(q, q, q)[0].numpy(), np_mha(m, q.numpy(), q.numpy(), q.numpy())[0])
    traced = xla_trace(lambda m, q: m(q, q, q, need_weights=True))
    for _ in range(2):
        q = T(randn(N_, 3, 4))
        (o1, w1), (o2, w2) = traced(m, q), m(q, q, q, need_weights=True)
        close(o1.numpy(), o2.numpy())
        close(w1.numpy(), w2.numpy())


# ---- BatchMatMulActivation ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode,bias", [("identity", True), ("relu", True), ("RELU", False)])
def test_batch_matmul_activation_matches_numpy(mode, bias):
    b, fin, fout = 3, 4, 2
    m = M.BatchMatMulActivation(b, fin, fout, bias=bias, nonlinear_mode=mode)
    assert m.weight.shape == (b, fout, fin)
    if bias:
        m.bias._reset(T(randn(fout)))
    x = randn(b, fin, fout)
    ref = np.matmul(m.weight.numpy().astype(np.float64), x)
    if bias:
        ref = ref + m.bias.numpy()  # along the last axis, as MegEngine's float module
    if mode.lower() == "relu":
        ref = np.maximum(ref, 0)
    close(m(T(x)).numpy(), ref)
    gm = GradManager().attach(m.parameters())
    with gm:
        gm.backward((m(T(x)) ** 2).sum())
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name


# ---- RegionRestrictedConv -------------------------------------------------------------------------------------------
def np_rrconv(x, w, rin, rout, b, stride, padding, groups):
    n, c, hh, ww = x.shape
    if w.ndim == 5:
        w = w.reshape((-1,) + w.shape[2:])
    o, cg, kh, kw = w.shape
    og = o // groups
    xp = np.pad(x, [(0, 0), (0, 0), (padding, padding), (padding, padding)])
    rp = np.pad(rin, [(0, 0), (padding, padding), (padding, padding)], constant_values=-1)
    oh, ow = (hh + 2 * padding - kh) // stride + 1, (ww + 2 * padding - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for bi in range(n):
        for oc in range(o):
            g = oc // og
            for i in range(oh):
                for j in range(ow):
                    patch = xp[bi, g * cg:(g + 1) * cg, i * stride:i * stride + kh, j * stride:j * stride + kw]
                    region = rp[bi, i * stride:i * stride + kh, j * stride:j * stride + kw] == rout[bi, i, j]
                    out[bi, oc, i, j] = (patch * region * w[oc]).sum()
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


@pytest.mark.parametrize("groups,stride,padding", [(2, 1, 1), (1, 2, 0)])
def test_region_restricted_conv_matches_numpy(groups, stride, padding):
    c, o, k, hw = 2, 2, 3, 5
    m = M.RegionRestrictedConv(c, o, k, groups=groups, stride=stride, padding=padding)
    # (MegEngine's layout, the group axis for groups == 1 too: megengine_module_fuzz seed 18, its checkpoints)
    assert m.weight.shape == (groups, o // groups, c // groups, k, k)
    assert m.bias.shape == (1, o, 1, 1)
    m.bias._reset(T(randn(1, o, 1, 1)))
    assert m.get_pad_width() == ((0, 0), (0, 0), (padding, padding), (padding, padding))
    x = randn(N_, c, hw, hw)
    oh = (hw + 2 * padding - k) // stride + 1
    rin = RNG.integers(0, 2, (N_, hw, hw)).astype("int32")
    rout = RNG.integers(0, 2, (N_, oh, oh)).astype("int32")
    out = m(T(x), T(rin), T(rout))
    close(out.numpy(), np_rrconv(x, m.weight.numpy(), rin, rout, m.bias.numpy(), stride, padding, groups))
    gm = GradManager().attach(m.parameters())
    with gm:
        gm.backward((m(T(x), T(rin), T(rout)) ** 2).sum())
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name


# ---- argument errors ------------------------------------------------------------------------------------------------
def test_bad_inputs_raise_value_errors_naming_the_module():
    x3 = T(randn(T_, N_, IN))
    cases = [
        (lambda: M.RNNCell(IN, H)(T(randn(N_, IN + 1))), "RNNCell"),
        (lambda: M.RNNCell(IN, H)(x3), "RNNCell"),
        (lambda: M.RNNCell(IN, H)(T(randn(N_, IN)), T(randn(N_, H + 1))), "RNNCell.*hx"),
        (lambda: M.LSTMCell(IN, H)(T(randn(N_, IN)), T(randn(N_, H))), "LSTMCell.*pair"),
        (lambda: M.LSTMCell(IN, H)(T(randn(N_, IN)), (T(randn(N_, H)), T(randn(1, H)))), "LSTMCell.*c"),
        (lambda: M.RNN(IN, H)(T(randn(N_, IN))), "RNN: input"),
        (lambda: M.RNN(IN, H)(T(randn(T_, N_, IN + 1))), "RNN: input"),
        (lambda: M.RNN(IN, H)(T(randn(0, N_, IN))), "RNN: the sequence length"),
        (lambda: M.RNN(IN, H, num_layers=2)(x3, T(randn(1, N_, H))), r"RNN: hx must have shape \(2, 2, 4\)"),
        (lambda: M.LSTM(IN, H)(x3, T(randn(1, N_, H))), "LSTM: hx must be a pair"),
        (lambda: M.LSTM(IN, H, proj_size=2)(x3, (T(randn(1, N_, 2)), T(randn(1, N_, H)))), "LSTM: h_0"),
        (lambda: M.LSTM(IN, H, bidirectional=True)(x3, (T(randn(2, N_, H)), T(randn(1, N_, H)))), "LSTM: c_0"),
        (lambda: M.RNN(IN, H, nonlinearity="gelu"), "RNN: nonlinearity"),
        (lambda: M.RNNCell(IN, H, nonlinearity="sigmoid"), "RNNCell: nonlinearity"),
        (lambda: M.RNN(IN, H, proj_size=H), "RNN: proj_size"),
        (lambda: M.RNN(IN, H, proj_size=-1), "RNN: proj_size"),
        (lambda: M.LSTM(IN, H, proj_size=H), "LSTM: proj_size"),
        (lambda: M.LSTM(IN, H, dropout=1.5), "LSTM: dropout"),
        (lambda: M.LSTM(IN, H, num_layers=0), "LSTM: num_layers"),
        (lambda: M.LSTMCell(0, H), "LSTMCell: input_size"),
        (lambda: M.MultiHeadAttention(6, 4), "MultiHeadAttention: embed_dim"),
        (lambda: M.MultiHeadAttention(4, 2)(T(randn(N_, 3, 5)), T(randn(N_, 3, 4)), T(randn(N_, 3, 4))),
         "MultiHeadAttention: query"),
        (lambda: M.BatchMatMulActivation(2, 3, 4, nonlinear_mode="tanh"), "BatchMatMulActivation: nonlinear_mode"),
        (lambda: M.BatchMatMulActivation(2, 3, 4)(T(randn(3, 3, 4))), "BatchMatMulActivation: input"),
        (lambda: M.BatchMatMulActivation(2, 3, 4)(T(randn(2, 3, 5))), "BatchMatMulActivation: the"),
        (lambda: M.RegionRestrictedConv(2, 2, 3, padding_mode="reflect"), "RegionRestrictedConv: padding_mode"),
        (lambda: M.RegionRestrictedConv(2, 2, 3)(T(randn(1, 3, 4, 4)), T(np.zeros((1, 4, 4), "int32")),
                                                 T(np.zeros((1, 2, 2), "int32"))), "RegionRestrictedConv: input"),
        (lambda: M.RegionRestrictedConv(2, 2, 3)(T(randn(1, 2, 4, 4)), T(np.zeros((1, 4, 4), "int32")),
                                                 T(np.zeros((1, 3, 3), "int32"))), "region_restricted_conv: rout"),
    ]
    for fn, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            fn()


# ---- documentation --------------------------------------------------------------------------------------------------
def test_docstrings_and_examples():
    import megxla.module.batch_matmul_activation as bma
    import megxla.module.multiheadattn as mha
    import megxla.module.rnn as rnn
    import megxla.module.rrconv as rr
    for name in ("RNNCell", "LSTMCell", "RNN", "LSTM", "MultiHeadAttention", "BatchMatMulActivation",
                 "RegionRestrictedConv"):
        doc = getattr(M, name).__doc__
        assert "Args:" in doc and "Example:" in doc and ">>>" in doc, name
    for mod in (rnn, mha, bma, rr):
        res = doctest.testmod(mod, extraglobs={"mge": mge, "M": M, "F": F, "np": np},
                              optionflags=doctest.NORMALIZE_WHITESPACE, report=True)
        assert res.failed == 0 and res.attempted > 0, mod.__name__
