"""Recurrent layers: ``RNNCell``, ``LSTMCell`` and the multi-layer, optionally bidirectional ``RNN`` / ``LSTM``.

The recurrence is plain Python over megxla functional ops, one time step at a time: eager execution runs it
op by op, and a trace (``xla_trace``) records every step, i.e. compiles an unrolled graph for the traced
sequence length. Only the input projection of a layer is batched over all time steps (one ``linear``), since
it does not depend on the hidden state.

Equations (gate order i, f, g, o as MegEngine / PyTorch)::

    RNN:   h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)          act = tanh | relu
    LSTM:  i, f, g, o = split(x W_ih^T + b_ih + h W_hh^T + b_hh, 4)
           c' = sigmoid(f) * c + sigmoid(i) * tanh(g)
           h' = sigmoid(o) * tanh(c')

Parameter layout of ``RNN`` / ``LSTM`` (MegEngine 1.13's, so MegEngine checkpoints load with ``strict=True``):
all weights live in ONE Parameter ``_flatten_weights`` of shape ``(G, S)``, ``G = num_chunks * hidden_size``
(1 chunk for RNN, 4 for LSTM). Read as a flat buffer it holds, for each layer and within it each direction
(forward first), ``weight_ih (G, layer_input)``, ``weight_hh (G, hidden_size)`` and, with ``bias``,
``bias_ih (G,)``, ``bias_hh (G,)``, contiguously in that order (MegEngine's kernels read it so);
``S = sum over cells of (layer_input + hidden_size)`` plus ``2 * num_layers * D`` with ``bias``. As in MegEngine the
module also holds ``cells``, a ``num_layers x D`` list of :class:`RNNCell` / :class:`LSTMCell` made by
``create_cell``: their parameters are in ``state_dict`` (``cells.{k}.{d}.weight_ih`` ...) but the forward pass
does not use them. :meth:`RNNBase.cell_weights` gives one cell's slices of ``_flatten_weights``.
``proj_size`` is accepted, range-checked and stored, and otherwise ignored, as MegEngine 1.13 does (its LSTM
kernel has no projection: no ``weight_hr``, ``h`` keeps ``hidden_size``), so MegEngine checkpoints load.
"""
import math
from abc import abstractmethod
import numbers
from typing import Optional, Tuple

import numpy as np

from ..core._tensor import Parameter, Tensor
from .. import functional as F
from . import init
from ._errors import LayerModeError
from .module import Module

__all__ = ["RNNCellBase", "RNNCell", "LSTMCell", "RNNBase", "RNN", "LSTM"]

_NONLINEARITIES = ("tanh", "relu")


# ---- one time step (shared by the cells and the multi-layer modules) ------------------------------------------------
def _rnn_step(x_proj, h, w_hh, b_hh, nonlinearity):
    """One RNN step; ``x_proj`` is the input already projected by ``W_ih`` / ``b_ih``."""
    pre = x_proj + F.linear(h, w_hh, b_hh)
    return F.tanh(pre) if nonlinearity == "tanh" else F.relu(pre)


def _lstm_step(x_proj, h, c, w_hh, b_hh):
    """One LSTM step; returns ``(h', c')``. ``x_proj`` is the input already projected by ``W_ih`` / ``b_ih``."""
    gates = x_proj + F.linear(h, w_hh, b_hh)
    i, f, g, o = F.split(gates, 4, axis=-1)
    c_new = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
    h_new = F.sigmoid(o) * F.tanh(c_new)
    return h_new, c_new


def _as_tensor(x, who, what):
    if isinstance(x, Tensor):
        return x
    try:
        return Tensor(x)
    except Exception:  # noqa: BLE001 -- report any unconvertible object as a bad argument
        raise ValueError(f"{who}: {what} must be a Tensor, got {type(x).__name__}") from None


def _check_shape(t, shape, who, what):
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{who}: {what} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def _check_sizes(who, input_size, hidden_size):
    for name, v in (("input_size", input_size), ("hidden_size", hidden_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
            raise ValueError(f"{who}: {name} must be a positive int, got {v!r}")


# ---- cells ----------------------------------------------------------------------------------------------------------
class RNNCellBase(Module):
    """Shared parameters of :class:`RNNCell` and :class:`LSTMCell`.

    Args:
        input_size: features of the input ``x``.
        hidden_size: features of the hidden state ``h``.
        bias: learn ``bias_ih`` / ``bias_hh``; without bias they are constant zero buffers (as in MegEngine).
        num_chunks: gates stacked in the weights (1 for RNN, 4 for LSTM).

    Example:
        >>> M.LSTMCell(3, 5).gate_hidden_size
        20
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int) -> None:
        super().__init__()
        _check_sizes(type(self).__name__, input_size, hidden_size)
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.bias = bool(bias)
        self.gate_hidden_size = num_chunks * self.hidden_size
        g = self.gate_hidden_size
        self.weight_ih = Parameter(np.zeros((g, self.input_size), dtype=np.float32))
        self.weight_hh = Parameter(np.zeros((g, self.hidden_size), dtype=np.float32))
        if self.bias:
            self.bias_ih = Parameter(np.zeros((g,), dtype=np.float32))
            self.bias_hh = Parameter(np.zeros((g,), dtype=np.float32))
        else:
            # MegEngine keeps zero (non-trainable) tensors here, so state_dict keys do not depend on `bias`.
            self.bias_ih = Tensor(np.zeros((g,), dtype=np.float32))
            self.bias_hh = Tensor(np.zeros((g,), dtype=np.float32))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-initialise every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) (MegEngine's default;
        drawn from ``megxla.random``, so ``megxla.random.seed`` makes it reproducible).

        Example:
            >>> cell = M.RNNCell(3, 4); cell.reset_parameters()
        """
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _check_input(self, input):
        who = type(self).__name__
        input = _as_tensor(input, who, "input")
        if input.ndim != 2 or input.shape[1] != self.input_size:
            raise ValueError(f"{who}: input must be (batch, input_size={self.input_size}), got "
                             f"{tuple(input.shape)}")
        return input

    def _check_hidden(self, h, batch, what):
        h = _as_tensor(h, type(self).__name__, what)
        _check_shape(h, (batch, self.hidden_size), type(self).__name__, what)
        return h


class RNNCell(RNNCellBase):
    r"""An Elman RNN cell: ``h' = act(x @ weight_ih.T + bias_ih + h @ weight_hh.T + bias_hh)``.

    Args:
        input_size: features of the input ``x``.
        hidden_size: features of the hidden state ``h``.
        bias: learn ``bias_ih`` and ``bias_hh``.
        nonlinearity: ``"tanh"`` or ``"relu"``.

    Shapes:
        input ``(N, input_size)``; ``hx`` ``(N, hidden_size)`` (zeros when omitted); output ``(N, hidden_size)``.

    Attributes:
        weight_ih: ``(hidden_size, input_size)``; weight_hh: ``(hidden_size, hidden_size)``;
        bias_ih, bias_hh: ``(hidden_size,)``; all from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).

    Example:
        >>> cell = M.RNNCell(3, 4)
        >>> h = cell(mge.Tensor(np.ones((2, 3), "float32")))
        >>> h.shape
        (2, 4)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh") -> None:
        if nonlinearity not in _NONLINEARITIES:
            raise LayerModeError(f"RNNCell: nonlinearity must be one of {_NONLINEARITIES}, got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, num_chunks=1)

    def forward(self, input: Tensor, hx: Optional[Tensor] = None) -> Tensor:
        """The next hidden state ``(N, hidden_size)`` from ``input`` ``(N, input_size)`` and ``hx``."""
        input = self._check_input(input)
        n = input.shape[0]
        h = F.zeros((n, self.hidden_size), dtype=input.dtype) if hx is None else self._check_hidden(hx, n, "hx")
        return _rnn_step(F.linear(input, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh,
                         self.nonlinearity)


class LSTMCell(RNNCellBase):
    r"""A long short-term memory cell (gate order i, f, g, o).

    .. code-block:: text

        i, f, g, o = split(x @ weight_ih.T + bias_ih + h @ weight_hh.T + bias_hh, 4)
        c' = sigmoid(f) * c + sigmoid(i) * tanh(g)
        h' = sigmoid(o) * tanh(c')

    Args:
        input_size: features of the input ``x``.
        hidden_size: features of ``h`` and ``c``.
        bias: learn ``bias_ih`` and ``bias_hh``.

    Shapes:
        input ``(N, input_size)``; ``hx`` a pair ``(h, c)`` of ``(N, hidden_size)`` (zeros when omitted).

    Returns:
        ``(h', c')``, each ``(N, hidden_size)``.

    Attributes:
        weight_ih: ``(4 * hidden_size, input_size)``; weight_hh: ``(4 * hidden_size, hidden_size)``;
        bias_ih, bias_hh: ``(4 * hidden_size,)``.

    Example:
        >>> cell = M.LSTMCell(3, 4)
        >>> h, c = cell(mge.Tensor(np.ones((2, 3), "float32")))
        >>> h.shape, c.shape
        ((2, 4), (2, 4))
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=4)

    def forward(self, input: Tensor,
                hx: Optional[Tuple[Tensor, Tensor]] = None) -> Tuple[Tensor, Tensor]:
        """``(h', c')`` from ``input`` ``(N, input_size)`` and ``hx = (h, c)``."""
        input = self._check_input(input)
        n = input.shape[0]
        if hx is None:
            h = F.zeros((n, self.hidden_size), dtype=input.dtype)
            c = F.zeros((n, self.hidden_size), dtype=input.dtype)
        else:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise ValueError(f"LSTMCell: hx must be a pair (h, c), got {type(hx).__name__}")
            h, c = self._check_hidden(hx[0], n, "h"), self._check_hidden(hx[1], n, "c")
        return _lstm_step(F.linear(input, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh)


# ---- multi-layer sequence modules -----------------------------------------------------------------------------------
class RNNBase(Module):
    """Shared construction and sequence loop of :class:`RNN` and :class:`LSTM`.

    Args:
        input_size: features of the input sequence.
        hidden_size: features of the hidden state.
        num_layers: stacked layers; layer ``k > 0`` reads the (direction-concatenated) output of layer ``k-1``.
        bias: learn biases (the ``bias_ih`` / ``bias_hh`` parts of ``_flatten_weights``).
        batch_first: input and output are ``(N, T, F)`` instead of ``(T, N, F)``.
        dropout: probability of dropout on the output of every layer but the last (training mode only).
        bidirectional: add a backward-in-time direction per layer; outputs are concatenated on the last axis.
        proj_size: accepted and ignored, as MegEngine 1.13 (must be ``0 <= proj_size < hidden_size``).

    Example:
        >>> isinstance(M.LSTM(3, 4), M.rnn.RNNBase)
        True
    """

    _num_chunks = 1

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0, bidirectional: bool = False,
                 proj_size: int = 0) -> None:
        super().__init__()
        who = type(self).__name__
        _check_sizes(who, input_size, hidden_size)
        if isinstance(num_layers, bool) or not isinstance(num_layers, (int, np.integer)) or num_layers < 1:
            raise ValueError(f"{who}: num_layers must be a positive int, got {num_layers!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1:
            raise ValueError(f"{who}: dropout must be a float in [0, 1] (the probability of an element to be "
                             f"zeroed), got {dropout!r}")
        if isinstance(proj_size, bool) or not isinstance(proj_size, (int, np.integer)) or proj_size < 0:
            raise ValueError(f"{who}: proj_size must be a non-negative int (0 disables projections), got "
                             f"{proj_size!r}")
        if proj_size >= hidden_size:
            raise ValueError(f"{who}: proj_size ({proj_size}) has to be smaller than hidden_size ({hidden_size})")
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.num_layers = int(num_layers)
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)
        self.num_directions = 2 if self.bidirectional else 1
        self.proj_size = int(proj_size)

        # MegEngine's construction: the cells (kept and saved in state_dict, unused by forward), then the one flat
        # weight Parameter the forward pass reads, then every parameter re-drawn.
        self.cells = [[self._make_cell(layer) for _ in range(self.num_directions)]
                      for layer in range(self.num_layers)]
        g = self._num_chunks * self.hidden_size
        self._flatten_weights = Parameter(np.zeros((g, self._flat_columns()), np.float32))
        self.reset_parameters()

    @abstractmethod
    def _make_cell(self, layer):
        """The cell stored in ``cells`` for ``layer`` (as ``create_cell``)."""

    def _flat_columns(self):
        cols = sum(self._layer_input_size(k) + self.hidden_size for k in range(self.num_layers)) * self.num_directions
        return cols + (2 * self.num_layers * self.num_directions if self.bias else 0)

    def _cell_offsets(self, layer, direction):
        """``{name: (start, shape)}`` of one cell's weights in the flattened ``_flatten_weights``."""
        g = self._num_chunks * self.hidden_size
        pos = 0
        for k in range(self.num_layers):
            for d in range(self.num_directions):
                shapes = [("weight_ih", (g, self._layer_input_size(k))), ("weight_hh", (g, self.hidden_size))]
                if self.bias:
                    shapes += [("bias_ih", (g,)), ("bias_hh", (g,))]
                parts = {}
                for name, shape in shapes:
                    parts[name] = (pos, shape)
                    pos += int(np.prod(shape))
                if (k, d) == (layer, direction):
                    return parts
        raise ValueError(f"{type(self).__name__}.cell_weights: no cell (layer={layer}, direction={direction}) in a "
                         f"module with num_layers={self.num_layers}, bidirectional={self.bidirectional}")

    def cell_weights(self, layer: int, direction: int = 0) -> dict:
        """One cell's weights: differentiable slices of ``_flatten_weights`` (MegEngine's layout).

        Args:
            layer: the layer index.
            direction: 0 forward in time, 1 backward (bidirectional modules only).

        Returns:
            ``{"weight_ih", "weight_hh"[, "bias_ih", "bias_hh"]: Tensor}``.

        Example:
            >>> {k: v.shape for k, v in M.LSTM(3, 4).cell_weights(0).items()}
            {'weight_ih': (16, 3), 'weight_hh': (16, 4), 'bias_ih': (16,), 'bias_hh': (16,)}
        """
        parts = self._cell_offsets(layer, direction)
        flat = F.reshape(self._flatten_weights, (-1,))
        return {name: F.reshape(flat[start:start + int(np.prod(shape))], shape)
                for name, (start, shape) in parts.items()}

    @abstractmethod
    def _step(self, x_proj, state, w_hh, b_hh):
        """One time step of one cell: the new state tuple from the projected input and the old state."""

    @staticmethod
    def _suffix(layer, direction):
        return f"_l{layer}" + ("_reverse" if direction == 1 else "")

    def _layer_params(self, layer, direction):
        w = self.cell_weights(layer, direction)
        return (w["weight_ih"], w["weight_hh"], w.get("bias_ih"), w.get("bias_hh"))

    def reset_parameters(self) -> None:
        """Re-initialise every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) (MegEngine's default;
        drawn from ``megxla.random``, so ``megxla.random.seed`` makes it reproducible).

        Example:
            >>> M.LSTM(3, 4).reset_parameters()
        """
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _layer_input_size(self, layer):
        return self.input_size if layer == 0 else self.hidden_size * self.num_directions

    # -- hooks implemented by RNN / LSTM (MegEngine's method names) --
    @abstractmethod
    def create_cell(self, layer):
        """A fresh, independently initialised cell with layer ``layer``'s sizes (MegEngine's construction
        hook: ``cells`` holds one per layer and direction; the forward pass reads ``_flatten_weights``).

        Example:
            >>> M.RNN(3, 4, num_layers=2, bidirectional=True).create_cell(1).input_size
            8
        """

    @abstractmethod
    def init_hidden(self, batch_size):
        """The zero initial state for ``batch_size`` sequences (see :class:`RNN` / :class:`LSTM` for shapes).

        Example:
            >>> M.RNN(3, 4, num_layers=2).init_hidden(5).shape
            (2, 5, 4)
        """

    @abstractmethod
    def get_output_from_hidden(self, hx):
        """The hidden state ``h`` part of a state ``hx`` (``hx`` itself for RNN, ``hx[0]`` for LSTM).

        Example:
            >>> m = M.LSTM(3, 4); m.get_output_from_hidden(m.init_hidden(2)).shape
            (1, 2, 4)
        """

    @abstractmethod
    def apply_op(self, input, hx):
        """Run all layers over a time-major ``input`` ``(T, N, input_size)`` from state ``hx``.

        Returns:
            ``(output (T, N, D * hidden_size), final state)``.

        Example:
            >>> m = M.RNN(3, 4)
            >>> out, h = m.apply_op(F.ones((5, 2, 3)), m.init_hidden(2))
            >>> out.shape, h.shape
            ((5, 2, 4), (1, 2, 4))
        """

    # -- the shared sequence loop --
    def _run(self, input, states):
        """Layers x directions x time steps. ``states``: a list over ``(layer, direction)`` of per-cell state
        tuples (``(h,)`` or ``(h, c)``); returns the top layer's output and the final per-cell states."""
        seq_len = input.shape[0]
        finals = []
        layer_input = input
        for layer in range(self.num_layers):
            outs = []
            for direction in range(self.num_directions):
                w_ih, w_hh, b_ih, b_hh = self._layer_params(layer, direction)
                # The input projection does not depend on the state: one matmul for all time steps.
                x_proj = F.linear(layer_input, w_ih, b_ih)
                # Its time steps taken apart by one op, not one ``x_proj[t]`` each: every step's ops are then the
                # same records (``x_proj[t]`` made each a getitem of its own), which auto-jit recognises as a loop
                # -- run in chunks compiled once, not one cluster of thousands of distinct ops compiled whole (a
                # 100-step LSTM language model's training step: 132 s of compilation, twice)
                xs = F.split(x_proj, seq_len, axis=0) if seq_len > 1 else [x_proj]
                state = states[layer * self.num_directions + direction]
                steps = range(seq_len - 1, -1, -1) if direction == 1 else range(seq_len)
                hs = [None] * seq_len
                for t in steps:
                    state = self._step(F.squeeze(xs[t], 0), state, w_hh, b_hh)
                    hs[t] = state[0]  # stored at its time index, so the reverse direction lines up with t
                finals.append(state)
                outs.append(F.stack(hs, axis=0))
            layer_input = outs[0] if len(outs) == 1 else F.concat(outs, axis=-1)
            if layer < self.num_layers - 1 and self.training and self.dropout > 0:
                # dropout=1 zeroes everything; F.dropout only takes probabilities below 1.
                layer_input = (layer_input * 0 if self.dropout >= 1
                               else F.dropout(layer_input, self.dropout, training=True))
        return layer_input, finals

    def _check_state(self, t, batch, size, what):
        who = type(self).__name__
        t = _as_tensor(t, who, what)
        _check_shape(t, (self.num_layers * self.num_directions, batch, size), who, what)
        return t

    def forward(self, input: Tensor, hx=None):
        """Run the sequence ``input`` (``(T, N, input_size)``, or ``(N, T, input_size)`` with ``batch_first``)
        from the initial state ``hx`` (zeros when omitted).

        Returns:
            ``(output, final state)``; see :class:`RNN` / :class:`LSTM`.
        """
        who = type(self).__name__
        input = _as_tensor(input, who, "input")
        layout = "(batch, seq_len, input_size)" if self.batch_first else "(seq_len, batch, input_size)"
        if input.ndim != 3 or input.shape[2] != self.input_size:
            raise ValueError(f"{who}: input must be 3-D {layout} with input_size={self.input_size}, got "
                             f"{tuple(input.shape)}")
        if self.batch_first:
            input = F.transpose(input, (1, 0, 2))  # the loop is time-major
        if input.shape[0] == 0:
            raise ValueError(f"{who}: the sequence length must be positive, got input {tuple(input.shape)}")
        batch = input.shape[1]
        if hx is None:
            hx = self.init_hidden(batch)
            hx = tuple(h.astype(input.dtype) for h in hx) if isinstance(hx, tuple) else hx.astype(input.dtype)
        output, h = self.apply_op(input, hx)
        if self.batch_first:
            output = F.transpose(output, (1, 0, 2))
        return output, h


class RNN(RNNBase):
    r"""A multi-layer Elman RNN over a sequence: per layer, direction and step
    ``h_t = act(x_t @ weight_ih.T + bias_ih + h_{t-1} @ weight_hh.T + bias_hh)``.

    Args:
        input_size: features of the input sequence.
        hidden_size: features of the hidden state.
        num_layers: stacked layers (default 1).
        bias: learn biases (part of ``_flatten_weights``; default True).
        batch_first: input / output are ``(N, T, F)`` instead of ``(T, N, F)`` (default False).
        dropout: dropout probability on the output of every layer but the last, in training mode (default 0).
        bidirectional: also run each layer backwards in time (default False).
        proj_size: accepted and ignored, as MegEngine 1.13 (must be ``0 <= proj_size < hidden_size``).
        nonlinearity: keyword-only, ``"tanh"`` (default) or ``"relu"``.

    Shapes:
        input ``(T, N, input_size)``; ``hx`` ``(num_layers * D, N, hidden_size)`` (zeros when omitted), where
        ``D = 2`` if bidirectional else 1; index ``k * D + d`` holds layer ``k``, direction ``d``.

    Returns:
        ``(output, h_n)``: output ``(T, N, D * hidden_size)`` (the top layer's hidden states, directions
        concatenated), ``h_n`` ``(num_layers * D, N, hidden_size)`` (the final hidden states).

    Attributes:
        _flatten_weights: ``(hidden_size, S)``, every layer's ``weight_ih`` ``(hidden_size, layer_input)``,
        ``weight_hh`` ``(hidden_size, hidden_size)``, ``bias_ih`` / ``bias_hh`` ``(hidden_size,)`` in MegEngine's
        layout (module docstring; :meth:`cell_weights` slices it). All from U(-1/sqrt(hidden_size),
        1/sqrt(hidden_size)). cells: MegEngine's unused per-cell copies (in ``state_dict``).

    Example:
        >>> m = M.RNN(3, 4, num_layers=2, bidirectional=True)
        >>> out, h_n = m(mge.Tensor(np.ones((5, 2, 3), "float32")))
        >>> out.shape, h_n.shape
        ((5, 2, 8), (4, 2, 4))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0, bidirectional: bool = False, proj_size: int = 0,
                 *, nonlinearity: str = "tanh") -> None:
        if nonlinearity not in _NONLINEARITIES:
            raise LayerModeError(f"RNN: nonlinearity must be one of {_NONLINEARITIES}, got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, proj_size)

    def _step(self, x_proj, state, w_hh, b_hh):
        return (_rnn_step(x_proj, state[0], w_hh, b_hh, self.nonlinearity),)

    def _make_cell(self, layer):
        return RNNCell(self._layer_input_size(layer), self.hidden_size, self.bias, self.nonlinearity)

    def create_cell(self, layer):
        """A fresh :class:`RNNCell` with layer ``layer``'s sizes and this module's ``bias`` / ``nonlinearity``.

        Example:
            >>> M.RNN(3, 4, num_layers=2).create_cell(1).input_size
            4
        """
        return RNNCell(self._layer_input_size(layer), self.hidden_size, self.bias, self.nonlinearity)

    def init_hidden(self, batch_size):
        """Zeros ``(num_layers * D, batch_size, hidden_size)``.

        Example:
            >>> M.RNN(3, 4, num_layers=2).init_hidden(5).shape
            (2, 5, 4)
        """
        return F.zeros((self.num_directions * self.num_layers, batch_size, self.hidden_size))

    def get_output_from_hidden(self, hx):
        """``hx`` itself (an RNN's state is its hidden state).

        Example:
            >>> m = M.RNN(3, 4); m.get_output_from_hidden(m.init_hidden(2)).shape
            (1, 2, 4)
        """
        return hx

    def apply_op(self, input, hx):
        """Run all layers over a time-major ``input`` ``(T, N, input_size)`` from ``hx``.

        Returns:
            ``(output (T, N, D * hidden_size), h_n (num_layers * D, N, hidden_size))``.

        Example:
            >>> m = M.RNN(3, 4)
            >>> out, h = m.apply_op(F.ones((5, 2, 3)), m.init_hidden(2))
            >>> out.shape, h.shape
            ((5, 2, 4), (1, 2, 4))
        """
        hx = self._check_state(hx, input.shape[1], self.hidden_size, "hx")
        states = [(hx[i],) for i in range(hx.shape[0])]
        output, finals = self._run(input, states)
        return output, F.stack([s[0] for s in finals], axis=0)


class LSTM(RNNBase):
    r"""A multi-layer long short-term memory network over a sequence (gate order i, f, g, o per step, as
    :class:`LSTMCell`).

    Args:
        input_size: features of the input sequence.
        hidden_size: features of the hidden state ``h`` and the cell state ``c``.
        num_layers: stacked layers (default 1).
        bias: learn biases (part of ``_flatten_weights``; default True).
        batch_first: input / output are ``(N, T, F)`` instead of ``(T, N, F)`` (default False).
        dropout: dropout probability on the output of every layer but the last, in training mode (default 0).
        bidirectional: also run each layer backwards in time (default False).
        proj_size: accepted, range-checked (``0 <= proj_size < hidden_size``), stored and otherwise ignored, as
            MegEngine 1.13 (whose LSTM kernel has no projection): no ``weight_hr``, ``h`` keeps ``hidden_size``.

    Shapes:
        input ``(T, N, input_size)``; ``hx`` a pair ``(h_0, c_0)``, each ``(num_layers * D, N, hidden_size)``
        (zeros when omitted), ``D = 2`` if bidirectional else 1.

    Returns:
        ``(output, (h_n, c_n))``: output ``(T, N, D * hidden_size)``; ``h_n`` and ``c_n``
        ``(num_layers * D, N, hidden_size)``.

    Attributes:
        _flatten_weights: ``(4 * hidden_size, S)``, every layer's ``weight_ih`` ``(4 * hidden_size, layer_input)``,
        ``weight_hh`` ``(4 * hidden_size, hidden_size)``, ``bias_ih`` / ``bias_hh`` ``(4 * hidden_size,)`` in MegEngine's
        layout (module docstring; :meth:`cell_weights` slices it).
        cells: MegEngine's unused per-cell copies (in ``state_dict``).

    Example:
        >>> m = M.LSTM(3, 4, batch_first=True)
        >>> out, (h_n, c_n) = m(mge.Tensor(np.ones((2, 5, 3), "float32")))
        >>> out.shape, h_n.shape, c_n.shape
        ((2, 5, 4), (1, 2, 4), (1, 2, 4))
    """

    _num_chunks = 4

    def _step(self, x_proj, state, w_hh, b_hh):
        return _lstm_step(x_proj, state[0], state[1], w_hh, b_hh)

    def _make_cell(self, layer):
        # as in MegEngine the stored cells only hold state_dict entries, the forward pass reads _flatten_weights
        return LSTMCell(self._layer_input_size(layer), self.hidden_size, self.bias)

    def create_cell(self, layer):
        """A fresh :class:`LSTMCell` with layer ``layer``'s sizes and this module's ``bias``.

        Example:
            >>> M.LSTM(3, 4, num_layers=2, bidirectional=True).create_cell(1).input_size
            8
        """
        return LSTMCell(self._layer_input_size(layer), self.hidden_size, self.bias)

    def init_hidden(self, batch_size):
        """Zeros ``(h_0, c_0)``, each ``(num_layers * D, batch_size, hidden_size)``.

        Example:
            >>> [t.shape for t in M.LSTM(3, 4, num_layers=2).init_hidden(5)]
            [(2, 5, 4), (2, 5, 4)]
        """
        n = self.num_directions * self.num_layers
        return F.zeros((n, batch_size, self.hidden_size)), F.zeros((n, batch_size, self.hidden_size))

    def get_output_from_hidden(self, hx):
        """The ``h`` of a state ``hx = (h, c)``.

        Example:
            >>> m = M.LSTM(3, 4); m.get_output_from_hidden(m.init_hidden(2)).shape
            (1, 2, 4)
        """
        return hx[0]

    def apply_op(self, input, hx):
        """Run all layers over a time-major ``input`` ``(T, N, input_size)`` from ``hx = (h_0, c_0)``.

        Returns:
            ``(output (T, N, D * hidden_size), (h_n, c_n))``.

        Example:
            >>> m = M.LSTM(3, 4)
            >>> out, (h, c) = m.apply_op(F.ones((5, 2, 3)), m.init_hidden(2))
            >>> out.shape, h.shape, c.shape
            ((5, 2, 4), (1, 2, 4), (1, 2, 4))
        """
        if not isinstance(hx, (tuple, list)) or len(hx) != 2:
            raise ValueError(f"LSTM: hx must be a pair (h_0, c_0), got {type(hx).__name__}")
        batch = input.shape[1]
        # MegEngine does not check h_0 (a proj_size-sized h_0 runs, reading past it, and corrupts the heap)
        h0 = self._check_state(hx[0], batch, self.hidden_size, "h_0")
        c0 = self._check_state(hx[1], batch, self.hidden_size, "c_0")
        states = [(h0[i], c0[i]) for i in range(h0.shape[0])]
        output, finals = self._run(input, states)
        return output, (F.stack([s[0] for s in finals], axis=0), F.stack([s[1] for s in finals], axis=0))
