"""Recurrent layers with PyTorch's parameters and results: the cells ``RNNCell``, ``LSTMCell``,
``GRUCell`` (one time step) and the sequence layers ``RNN``, ``LSTM``, ``GRU`` (stacked,
optionally bidirectional), as in Jittor's ``nn``.

Parameters have PyTorch's names, shapes and gate order (``weight_ih_l0`` is (gates * hidden,
input) with LSTM gates i, f, g, o and GRU gates r, z, n; ``..._reverse`` for the backward
direction), so a PyTorch ``state_dict`` loads by name. A layer projects the inputs of all time
steps with one matrix product per layer and direction, then runs the whole recurrence in one
hand-written kernel, and its gradient in one more (``ops/rnn_scan.py``; an LSTM with
``proj_size`` steps through generic ops instead); the time steps of a layer's output are rows of
one (seq_len * batch, features) matrix, which the next layer projects in one product again.

    >>> import jtmini as jt
    >>> from jtmini.nn.rnn import GRU
    >>> gru = GRU(10, 20, num_layers=2, bidirectional=True)
    >>> output, h_n = gru(jt.randn(5, 3, 10))          # (seq_len, batch, input_size)
    >>> output.shape, h_n.shape
    ((5, 3, 40), (4, 3, 20))
"""
import math
import numbers
import warnings

import numpy as np

from .. import creation, dtypes, init
from ..ops.reindex import concat
from ..ops.rnn_scan import block_rows, rnn_scan, rows as _rows, step as _step
from ..var import Var
from . import functional as F
from .arguments import count
from .module import Module

_MODES = {"RNN_TANH": 1, "RNN_RELU": 1, "RNN": 1, "LSTM": 4, "GRU": 3}


# --- checks --------------------------------------------------------------------------------------
def _flag(who, name, value):
    """``value`` as a bool: True, False, numpy's bools, or the ints 0 and 1 (as PyTorch takes)."""
    if isinstance(value, (bool, np.bool_)) or (dtypes.is_int(value) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"{who}: {name} must be a bool, got {value!r}")


def _dropout(who, value, num_layers):
    """The inter-layer dropout probability, checked to be a real number in [0, 1)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not 0 <= value < 1:
        raise ValueError(f"{who}: dropout must be a number in [0, 1), got {value!r}")
    if value > 0 and num_layers == 1:
        # PyTorch warns too: dropout only acts between layers, so one layer never drops
        warnings.warn(f"{who}: dropout={value} has no effect with num_layers=1 (dropout acts "
                      f"between layers)", UserWarning, stacklevel=3)
    return float(value)


def _float_var(who, name, value):
    """``value`` itself if it is a float Var; TypeError naming ``name`` otherwise."""
    if not isinstance(value, Var):
        raise TypeError(f"{who}: {name} must be a jtmini Var, got {type(value).__name__}")
    if not dtypes.is_float(value.dtype):
        raise TypeError(f"{who}: {name} must be float32 or float64, got {value.dtype}")
    return value


def _state(who, name, value, shape, meaning):
    """A given initial state, checked to be a float Var of ``shape`` (described by ``meaning``)."""
    _float_var(who, name, value)
    if value.shape != shape:
        raise ValueError(f"{who}: {name} must have shape {shape} ({meaning}), got {value.shape}")
    return value


def _state_pair(who, hx, lstm):
    """``hx`` split into (h, c) for an LSTM (c is None otherwise); TypeError for the wrong kind."""
    if not lstm:
        if isinstance(hx, (tuple, list)):
            raise TypeError(f"{who}: hx must be a Var (the initial hidden state), got a {type(hx).__name__}")
        return hx, None
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        raise TypeError(f"{who}: hx must be a tuple (h0, c0) of two Vars, got {type(hx).__name__}"
                        + (f" of length {len(hx)}" if isinstance(hx, (tuple, list)) else ""))
    return hx[0], hx[1]


def _proj_size(who, mode, value, hidden_size):
    """The LSTM projection size, checked: an int in [0, hidden_size), and 0 for other modes."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{who}: proj_size must be an int >= 0 (0: no projection), got {value!r}")
    if value and mode != "LSTM":
        raise ValueError(f"{who}: proj_size={value} is only supported by LSTM, not {mode}")
    if value >= hidden_size:
        raise ValueError(f"{who}: proj_size={value} must be smaller than hidden_size={hidden_size}")
    return int(value)


# --- one time step -------------------------------------------------------------------------------
def _project(mode, x, w_ih, b_ih, b_hh):
    """``x @ w_ih.T`` and the bias of its rows that does not depend on the step (None without
    biases), which the scan kernel adds: both biases for RNN and LSTM, only ``b_ih`` for GRU,
    whose ``b_hh`` has its new-gate part scaled by the reset gate (see ``ops/rnn_scan.py``)."""
    gi = x @ w_ih.transpose(1, 0)
    if b_ih is None:
        return gi, None
    return gi, (b_ih if mode == "GRU" else b_ih + b_hh)


def _scan(mode, projected, state, w_hh, b_hh, steps, reverse=False, sequence=True):
    """The hidden states of all steps (steps * batch, hidden; None unless ``sequence``) and the
    final state (h, or (h, c) for LSTM) of the recurrence over ``projected`` (``_project``'s
    pair), through the fused kernels."""
    (gi, b_in), (h0, c0) = projected, (state if mode == "LSTM" else (state, None))
    batch, b_hh = h0.shape[0], b_hh if mode == "GRU" else None
    # the kernel takes one dtype: any float64 operand makes it float64, as the products promote
    operands = (gi, h0, c0, w_hh, b_hh, b_in)
    wide = "float64" if any(v is not None and v.dtype == "float64" for v in operands) else gi.dtype
    gi, h0, c0, w_hh, b_hh, b_in = (v if v is None or v.dtype == wide else v.cast(wide) for v in operands)
    out = rnn_scan(mode, gi, h0, c0, w_hh, b_hh, steps, reverse, b_in)
    last = (0 if reverse else steps - 1) * batch
    final = block_rows(out, 0, last, batch)
    hs = block_rows(out, 0, 0, steps * batch) if sequence else None
    return hs, ((final, block_rows(out, 1, last, batch)) if mode == "LSTM" else final)


def _uniform(shape, hidden_size):
    """PyTorch's initialisation of every recurrent parameter: U(-1/sqrt(hidden), 1/sqrt(hidden))."""
    bound = 1.0 / math.sqrt(hidden_size)
    return init.uniform(shape, "float32", -bound, bound)


# --- cells ---------------------------------------------------------------------------------------
class _Cell(Module):
    """One time step of a recurrent layer; the subclasses set ``mode``. Parameters ``weight_ih``
    (gates * hidden, input), ``weight_hh`` (gates * hidden, hidden), ``bias_ih`` and ``bias_hh``
    (gates * hidden), as in PyTorch."""

    def __init__(self, mode, input_size, hidden_size, bias):
        who = type(self).__name__
        self.input_size = count(who, "input_size", input_size)
        self.hidden_size = count(who, "hidden_size", hidden_size)
        self.bias, self.mode = _flag(who, "bias", bias), mode
        rows = _MODES[mode] * self.hidden_size
        self.weight_ih = _uniform((rows, self.input_size), self.hidden_size)
        self.weight_hh = _uniform((rows, self.hidden_size), self.hidden_size)
        self.bias_ih = _uniform((rows,), self.hidden_size) if self.bias else None
        self.bias_hh = _uniform((rows,), self.hidden_size) if self.bias else None

    def execute(self, input, hx=None):
        who, lstm = type(self).__name__, self.mode == "LSTM"
        x = _float_var(who, "input", input)
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(f"{who}: input must have shape (batch, {self.input_size}) or "
                             f"({self.input_size},) (input_size={self.input_size}), got {x.shape}")
        unbatched = x.ndim == 1
        state_shape = (self.hidden_size,) if unbatched else (x.shape[0], self.hidden_size)
        if hx is None:
            zeros = creation.zeros(state_shape, dtype=x.dtype)
            h, c = zeros, zeros if lstm else None
        else:
            meaning = "hidden_size" if unbatched else "batch, hidden_size"
            h, c = _state_pair(who, hx, lstm)
            h = _state(who, "h" if lstm else "hx", h, state_shape, meaning)
            c = _state(who, "c", c, state_shape, meaning) if lstm else None
        return self._run(x, h, c, unbatched)

    def _run(self, x, h, c, unbatched):
        """The step on 2-D operands; unbatched ones are a batch of one, given back as 1-D."""
        rows = (lambda v: v.reshape(1, -1)) if unbatched else (lambda v: v)
        projected = _project(self.mode, rows(x), self.weight_ih, self.bias_ih, self.bias_hh)
        state = (rows(h), rows(c)) if self.mode == "LSTM" else rows(h)
        state = _scan(self.mode, projected, state, self.weight_hh, self.bias_hh, 1, sequence=False)[1]
        back = (lambda v: v.reshape(self.hidden_size)) if unbatched else (lambda v: v)
        return (back(state[0]), back(state[1])) if self.mode == "LSTM" else back(state)


class RNNCell(_Cell):
    """An Elman RNN cell: ``h' = tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)`` (or relu with
    ``nonlinearity='relu'``). Input (batch, input_size) or (input_size,); ``hx`` of the matching
    (batch, hidden_size) or (hidden_size,), zeros when omitted. Returns h'.

    >>> cell = RNNCell(10, 20)
    >>> hx = jt.randn(3, 20)
    >>> for x in [jt.randn(3, 10) for _ in range(6)]:
    ...     hx = cell(x, hx)
    >>> hx.shape
    (3, 20)
    """

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh"):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__("RNN_" + nonlinearity.upper(), input_size, hidden_size, bias)
        self.nonlinearity = nonlinearity


class LSTMCell(_Cell):
    """A long short-term memory cell (PyTorch's gates i, f, g, o). ``hx`` is a tuple (h, c) of
    (batch, hidden_size) or (hidden_size,) Vars, zeros when omitted. Returns (h', c').

    >>> cell = LSTMCell(10, 20)
    >>> h, c = cell(jt.randn(3, 10))
    >>> h, c = cell(jt.randn(3, 10), (h, c))
    >>> h.shape, c.shape
    ((3, 20), (3, 20))
    """

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__("LSTM", input_size, hidden_size, bias)


class GRUCell(_Cell):
    """A gated recurrent unit cell (PyTorch's gates r, z, n). ``hx`` (batch, hidden_size) or
    (hidden_size,), zeros when omitted. Returns h'.

    >>> cell = GRUCell(10, 20)
    >>> cell(jt.randn(10), jt.randn(20)).shape     # unbatched
    (20,)
    """

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__("GRU", input_size, hidden_size, bias)


# --- sequence layers -----------------------------------------------------------------------------
class RNNBase(Module):
    """A stack of recurrent layers over a sequence; ``mode`` is ``'RNN_TANH'``, ``'RNN_RELU'``,
    ``'LSTM'`` or ``'GRU'`` (PyTorch's; Jittor's ``'RNN'`` is ``'RNN_TANH'``). ``RNN``, ``LSTM`` and
    ``GRU`` are this with their mode; see them for the call.

    >>> RNNBase("GRU", 10, 20, num_layers=2)(jt.randn(5, 3, 10))[1].shape
    (2, 3, 20)
    """

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0, bidirectional=False, proj_size=0):
        who = type(self).__name__
        if mode not in _MODES:
            raise ValueError(f"{who}: mode must be 'RNN_TANH', 'RNN_RELU', 'LSTM' or 'GRU' (or Jittor's "
                             f"'RNN'), got {mode!r}")
        self.mode = "RNN_TANH" if mode == "RNN" else mode
        self.input_size = count(who, "input_size", input_size)
        self.hidden_size = count(who, "hidden_size", hidden_size)
        self.num_layers = count(who, "num_layers", num_layers)
        self.bias, self.batch_first = _flag(who, "bias", bias), _flag(who, "batch_first", batch_first)
        self.bidirectional = _flag(who, "bidirectional", bidirectional)
        self.dropout = _dropout(who, dropout, self.num_layers)
        self.proj_size = _proj_size(who, self.mode, proj_size, self.hidden_size)
        self._add_parameters()

    def _add_parameters(self):
        """PyTorch's parameters in PyTorch's order: per layer, per direction, weight_ih,
        weight_hh, bias_ih, bias_hh, weight_hr with ``proj_size`` (suffix ``_l{layer}``, then
        ``_reverse`` backward)."""
        hidden, directions = self.hidden_size, 2 if self.bidirectional else 1
        rows, out = _MODES[self.mode] * hidden, self.proj_size or hidden
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else directions * out
            for suffix in ("", "_reverse")[:directions]:
                setattr(self, f"weight_ih_l{layer}{suffix}", _uniform((rows, width), hidden))
                setattr(self, f"weight_hh_l{layer}{suffix}", _uniform((rows, out), hidden))
                if self.bias:
                    setattr(self, f"bias_ih_l{layer}{suffix}", _uniform((rows,), hidden))
                    setattr(self, f"bias_hh_l{layer}{suffix}", _uniform((rows,), hidden))
                if self.proj_size:
                    setattr(self, f"weight_hr_l{layer}{suffix}", _uniform((out, hidden), hidden))

    def execute(self, input, hx=None):
        x, states, (steps, batch, unbatched) = self._prepare(input, hx)
        directions, finals = 2 if self.bidirectional else 1, []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(directions):
                out, final = self._direction(x, states[layer * directions + direction], layer,
                                             direction, steps, batch)
                outs.append(out)
                finals.append(final)
            x = outs[0] if directions == 1 else concat(outs, 1)
            if layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, self.is_train)
        return self._results(x, finals, steps, batch, unbatched)

    def _direction(self, x, state, layer, direction, steps, batch):
        """One layer in one direction over the (steps * batch, features) time-major rows ``x``:
        the (steps * batch, hidden) outputs and the final state."""
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        b_ih, b_hh = getattr(self, "bias_ih" + suffix, None), getattr(self, "bias_hh" + suffix, None)
        projected = _project(self.mode, x, getattr(self, "weight_ih" + suffix), b_ih, b_hh)
        w_hh = getattr(self, "weight_hh" + suffix)
        if not self.proj_size:
            return _scan(self.mode, projected, state, w_hh, b_hh, steps, reverse=bool(direction))
        gi = projected[0] if projected[1] is None else projected[0] + projected[1]
        # an LSTM projecting h (proj_size): step by step from generic ops
        w_hh_t, w_hr_t = w_hh.transpose(1, 0), getattr(self, "weight_hr" + suffix).transpose(1, 0)
        outs = [None] * steps
        for t in (reversed(range(steps)) if direction else range(steps)):
            state = _step(self.mode, _rows(gi, t * batch, batch), state, w_hh_t, b_hh, w_hr_t)
            outs[t] = state[0] if self.mode == "LSTM" else state
        return (outs[0] if steps == 1 else concat(outs, 0)), state

    def _prepare(self, input, hx):
        """The input as time-major (steps * batch, input_size) rows, the initial state of each
        layer and direction (h, or (h, c) for LSTM, each (batch, hidden)), and the sizes."""
        who = type(self).__name__
        x = _float_var(who, "input", input)
        order = "batch, seq_len" if self.batch_first else "seq_len, batch"
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size or 0 in x.shape:
            raise ValueError(f"{who}: input must have shape ({order}, {self.input_size}) or (seq_len, "
                             f"{self.input_size}) unbatched (input_size={self.input_size}), got {x.shape}")
        unbatched = x.ndim == 2
        if unbatched:
            x = x.reshape(x.shape[0], 1, self.input_size)
        elif self.batch_first:
            x = x.permute(1, 0, 2)
        steps, batch = x.shape[0], x.shape[1]
        states = self._initial_states(hx, batch, unbatched, x.dtype)
        return x.reshape(steps * batch, self.input_size), states, (steps, batch, unbatched)

    def _initial_states(self, hx, batch, unbatched, dtype):
        """Per layer and direction, the rows of ``h0`` (and ``c0``) for it, or zeros."""
        who, lstm = type(self).__name__, self.mode == "LSTM"
        slots = self.num_layers * (2 if self.bidirectional else 1)
        out = self.proj_size or self.hidden_size      # h's width; c keeps hidden_size
        if hx is None:
            h, c = (creation.zeros((batch, n), dtype=dtype) for n in (out, self.hidden_size))
            return [(h, c) if lstm else h] * slots
        h, c = _state_pair(who, hx, lstm)
        lead = "num_layers * num_directions, " + ("" if unbatched else "batch, ")
        flat = [_state(who, name, v, (slots,) + (() if unbatched else (batch,)) + (n,), lead + what)
                .reshape(slots * batch, n)
                for name, v, n, what in (("h0", h, out, "proj_size" if self.proj_size else "hidden_size"),
                                         ("c0", c, self.hidden_size, "hidden_size"))[:2 if lstm else 1]]
        per = [[_rows(v, k * batch, batch) for v in flat] for k in range(slots)]
        return [tuple(rows) if lstm else rows[0] for rows in per]

    def _results(self, x, finals, steps, batch, unbatched):
        """PyTorch's results from the last layer's rows and every final state."""
        output = x.reshape(steps, batch, x.shape[1])
        if unbatched:
            output = output.reshape(steps, x.shape[1])
        elif self.batch_first:
            output = output.permute(1, 0, 2)
        lead = (len(finals),) + (() if unbatched else (batch,))
        stacked = [concat(list(part), 0).reshape(lead + (part[0].shape[-1],))
                   for part in (zip(*finals) if self.mode == "LSTM" else [finals])]
        return output, (tuple(stacked) if self.mode == "LSTM" else stacked[0])


class RNN(RNNBase):
    """A multi-layer Elman RNN: ``h_t = tanh(x_t @ W_ih.T + b_ih + h_{t-1} @ W_hh.T + b_hh)``
    (relu with ``nonlinearity='relu'``). Input (seq_len, batch, input_size), (batch, seq_len,
    input_size) with ``batch_first``, or unbatched (seq_len, input_size); ``hx`` is h0 of
    (num_layers * num_directions, batch, hidden_size) (no batch dim unbatched), zeros when omitted.
    Returns (output, h_n), output with num_directions * hidden_size features per step. With
    ``dropout``, the outputs of every layer but the last are dropped out in training.

    >>> rnn = RNN(10, 20, 2)
    >>> output, h_n = rnn(jt.randn(5, 3, 10), jt.randn(2, 3, 20))
    >>> output.shape, h_n.shape
    ((5, 3, 20), (2, 3, 20))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0, bidirectional=False):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__("RNN_" + nonlinearity.upper(), input_size, hidden_size, num_layers, bias,
                         batch_first, dropout, bidirectional)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """A multi-layer long short-term memory RNN (PyTorch's gates i, f, g, o). Input as for ``RNN``;
    ``hx`` is a tuple (h0, c0), each (num_layers * num_directions, batch, hidden_size), zeros
    when omitted. Returns (output, (h_n, c_n)). With ``proj_size`` > 0 each step's h is projected
    to ``proj_size`` features by ``weight_hr_l{k}`` (proj_size, hidden_size), as in PyTorch: h0,
    h_n and the output have proj_size features per direction, c0 and c_n keep hidden_size.

    >>> lstm = LSTM(10, 20, num_layers=2, batch_first=True)
    >>> output, (h_n, c_n) = lstm(jt.randn(3, 5, 10))
    >>> output.shape, h_n.shape, c_n.shape
    ((3, 5, 20), (2, 3, 20), (2, 3, 20))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0, bidirectional=False, proj_size=0):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size)


class GRU(RNNBase):
    """A multi-layer gated recurrent unit RNN (PyTorch's gates r, z, n). Input and ``hx`` as for
    ``RNN``. Returns (output, h_n).

    >>> gru = GRU(10, 20, bidirectional=True)
    >>> output, h_n = gru(jt.randn(7, 10))          # unbatched
    >>> output.shape, h_n.shape
    ((7, 40), (2, 20))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0, bidirectional=False):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional)
