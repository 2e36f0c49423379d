"""Multi-head attention layer (MegEngine 1.13's ``MultiHeadAttention``) over ``F.nn.multi_head_attention``."""
from typing import Optional

import numpy as np

from ..core._tensor import Parameter, Tensor
from ..functional.nn import multi_head_attention
from . import init
from ._errors import LayerArgumentError
from .module import Module

__all__ = ["MultiHeadAttention"]


class MultiHeadAttention(Module):
    r"""Multi-head attention (`Attention Is All You Need`)::

        MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_o + b_o,
        head_i = softmax((Q W_q^i + b_q^i)(K W_k^i + b_k^i)^T / sqrt(head_dim)) (V W_v^i + b_v^i)

    All projections live in ONE flat parameter ``io_weight_bias`` of shape ``(1, L)`` (MegEngine's layout for
    its fused kernel), in this order: ``W_q (embed_dim, embed_dim)``, ``W_k (kdim, embed_dim)``,
    ``W_v (vdim, embed_dim)``, ``W_o (embed_dim, embed_dim)`` -- applied as ``x @ W`` -- then, with ``bias``,
    ``b_q, b_k, b_v, b_o`` of ``embed_dim`` each. So ``L = (2 * embed_dim + kdim + vdim) * embed_dim
    (+ 4 * embed_dim)``.

    Args:
        embed_dim: model dimension (query features and output features).
        num_heads: parallel heads; ``embed_dim`` must be divisible by it (``head_dim = embed_dim // num_heads``).
        attn_dropout: dropout probability on the attention weights (training mode only).
        out_dropout: dropout probability on the output (training mode only).
        bias: learn the four projection biases.
        add_bias_kv: learn ``bias_k`` / ``bias_v`` ``(1, 1, embed_dim)``, appended as one extra key / value.
        add_zero_attn: append a zero key / value row (after ``bias_k`` / ``bias_v``).
        kdim: key features (default ``embed_dim``).
        vdim: value features (default ``embed_dim``).

    Attributes:
        io_weight_bias: ``(1, L)``, Xavier-uniform with its bias part zero (as MegEngine).
        bias_k, bias_v: ``(1, 1, embed_dim)`` (Xavier-uniform), or None.

    Example:
        >>> m = M.MultiHeadAttention(8, 2)
        >>> q = mge.Tensor(np.ones((2, 3, 8), "float32"))
        >>> out, weights = m(q, q, q)
        >>> out.shape, weights is None
        ((2, 3, 8), True)
    """

    def __init__(self, embed_dim, num_heads, attn_dropout=0.0, out_dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, **kwargs):
        super().__init__(**kwargs)
        for name, v in (("embed_dim", embed_dim), ("num_heads", num_heads), ("kdim", kdim), ("vdim", vdim)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0):
                raise ValueError(f"MultiHeadAttention: {name} must be a positive int, got {v!r}")
        if embed_dim % num_heads:
            raise LayerArgumentError(f"MultiHeadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                                     f"({num_heads})")
        for name, p in (("attn_dropout", attn_dropout), ("out_dropout", out_dropout)):
            if not 0 <= p < 1:
                raise ValueError(f"MultiHeadAttention: {name} must be in [0, 1), got {p!r}")
        self.embed_dim = int(embed_dim)
        self.kdim = self.embed_dim if kdim is None else int(kdim)
        self.vdim = self.embed_dim if vdim is None else int(vdim)
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        self.num_heads = int(num_heads)
        self.attn_dropout = float(attn_dropout)
        self.out_dropout = float(out_dropout)
        self.head_dim = self.embed_dim // self.num_heads
        self.bias = bool(bias)
        e = self.embed_dim
        self.weight_bias_len = (e + self.kdim + self.vdim + e) * e + (4 * e if self.bias else 0)
        self.io_weight_bias = Parameter(np.zeros((1, self.weight_bias_len), dtype=np.float32))
        self.add_bias_kv = bool(add_bias_kv)  # MegEngine's attribute (code reads it)
        self.bias_k = Parameter(np.zeros((1, 1, e), dtype=np.float32)) if add_bias_kv else None
        self.bias_v = Parameter(np.zeros((1, 1, e), dtype=np.float32)) if add_bias_kv else None
        self.add_zero_attn = bool(add_zero_attn)
        self.reset_parameters()

    def reset_parameters(self):
        """Re-initialise as MegEngine does: ``io_weight_bias`` Xavier-uniform as the ``(1, weight_bias_len)``
        matrix it is (bound ``sqrt(6 / (weight_bias_len + 1))``) with its bias part zero, ``bias_k`` / ``bias_v``
        Xavier-uniform (drawn from ``megxla.random``).

        Example:
            >>> m = M.MultiHeadAttention(8, 2)
            >>> m.reset_parameters()
            >>> float(abs(m.io_weight_bias[0, 4 * 8 * 8:]).sum())
            0.0
        """
        init.xavier_uniform_(self.io_weight_bias)
        if self.bias:
            weight_len = (2 * self.embed_dim + self.kdim + self.vdim) * self.embed_dim
            self.io_weight_bias[0, weight_len:] = 0
        if self.bias_k is not None:
            init.xavier_uniform_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_uniform_(self.bias_v)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Optional[Tensor] = None,
                attn_mask: Optional[Tensor] = None, need_weights: bool = False,
                average_attn_weights: bool = False, is_causal: bool = False,
                maybe_cudnn_style_mask: bool = False):
        """Attend from ``query`` ``(N, L, embed_dim)`` over ``key`` ``(N, S, kdim)`` / ``value``
        ``(N, S, vdim)`` (or unbatched ``(L, E)`` / ``(S, E)``).

        Args:
            query, key, value: the inputs.
            key_padding_mask: ``(N, S)``; True (nonzero) ignores that key, or a float mask added to the scores.
            attn_mask: ``(L, S)`` or ``(N * num_heads, L, S)``; True = masked, or float added to the scores.
            need_weights: also return the attention weights.
            average_attn_weights: return the weights averaged over heads ``(N, L, S')`` rather than
                ``(N * num_heads, L, S')`` (``S'`` counts the ``bias_k`` / zero-attention keys).
            is_causal: mask future keys (``attn_mask`` may then be None).
            maybe_cudnn_style_mask: accepted for compatibility.

        Returns:
            ``(attn_output (N, L, embed_dim), attn_weights or None)``.
        """
        e = self.embed_dim
        # Checked here: with a wrong feature size the functional op could only report a parameter-count
        # mismatch of the packed io_weight_bias.
        for t, what, size in ((query, "query", e), (key, "key", self.kdim), (value, "value", self.vdim)):
            shape = tuple(getattr(t, "shape", np.shape(t)))
            if len(shape) not in (2, 3) or shape[-1] != size:
                raise ValueError(f"MultiHeadAttention: {what} must be (N, seq_len, {size}) or (seq_len, {size}), "
                                 f"got {shape}")
        return multi_head_attention(
            query, key, value, e, self.num_heads, self.attn_dropout, self.out_dropout, self.io_weight_bias,
            qproj_size=e, kproj_size=e, vproj_size=e, oproj_size=e,
            qbias=self.bias, kbias=self.bias, vbias=self.bias, obias=self.bias,
            bias_k=self.bias_k, bias_v=self.bias_v, add_zero_attn=self.add_zero_attn,
            key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=need_weights,
            average_attn_weights=average_attn_weights, is_causal=is_causal,
            maybe_cudnn_style_mask=maybe_cudnn_style_mask, reslink=False, training=self.training)

    def _module_info_string(self) -> str:
        s = f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"
        if not self._qkv_same_embed_dim:
            s += f", kdim={self.kdim}, vdim={self.vdim}"
        if not self.bias:
            s += ", bias=False"
        if self.bias_k is not None:
            s += ", add_bias_kv=True"
        if self.add_zero_attn:
            s += ", add_zero_attn=True"
        return s
