"""The time loop of one recurrent layer direction as one hand-written kernel each way
(``templates/cpu/rnn_scan.cc.j2``): ``nn.RNN``, ``nn.LSTM`` and ``nn.GRU`` (and their cells) run
their recurrence through it.

``rnn_scan(cell, gi, h0, c0, w_hh, b_hh, steps, reverse, b_in)`` takes the input projection of
every step at once, ``gi`` (steps * batch, gates * hidden) time-major rows, ``b_in`` (gates *
hidden, or None) the biases that do not depend on the step, which the kernel adds to each row of
``gi`` (both biases for RNN and LSTM, ``b_ih`` only for GRU, whose new gate scales its ``b_hh`` by
the reset gate; in the kernel rather than by a kernel of their own, which wrote gi again and whose
gradient was one more reduction), the initial state ``h0`` (and ``c0`` for LSTM) (batch, hidden),
the recurrent weight ``w_hh`` (gates * hidden, hidden) and, for GRU, ``b_hh``. It returns ``out`` (K,
steps * batch, hidden): block 0 holds the hidden state of every step, block 1 LSTM's cell state,
the other blocks the activated gates that the backward kernel reads (``scan_blocks``). Its gradient
is one more kernel, ``rnn_scan_grad``, giving ``d_gi``, ``d_w_hh``, GRU's ``d_b_hh``, ``d_h0``,
``d_c0`` and ``d_b_in`` at once; the weight's gradient is two matrix products over all steps, not
one a step.

Composed from generic ops, every step was a dozen graph nodes forward and more backward, each
costing Python in every training step (building, ``grad``, the graph signature) and a kernel or
a product to launch: examples/gru_sequence.py's loss and gradients (24 steps) were 1342 nodes,
and its first step compiled ~35 s of kernels. Here they are 83 nodes, a layer direction two
library calls. The gate loops are vector loops (glibc's SIMD exp and tanh). From ~1M
multiply-adds a step the kernels split the batch over the threads: each thread takes every step
of its own rows, so the steps need no barrier; the thread count is fixed per call (not chosen by
timing), so results repeat exactly at a given ``num_threads``.

The second derivative goes through ``composed_scan``, the same recurrence built from generic ops
(``rnn_scan_grad``'s gradient differentiates its vector-Jacobian product), so nothing is lost to
the fusion but speed there.

    >>> out = rnn_scan("GRU", jt.randn(5 * 2, 12), jt.zeros(2, 4), None, jt.randn(12, 4), None, 5)
    >>> out.shape          # blocks h, r, z, n, hn, each (steps * batch, hidden)
    (5, 10, 4)
"""
from typing import NamedTuple

import numpy as np

from .. import dtypes
from ..autograd import grad
from ..var import Var
from .registry import OpSpec, TableKernel, launched_run, register, table_kernel_from
from .reindex import concat, slice_var

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}
_BLOCKS = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 6, "GRU": 5}


def scan_blocks(cell):
    """How many (steps * batch, hidden) blocks ``rnn_scan``'s output has for ``cell``."""
    return _BLOCKS[cell]


# --- the recurrence from generic ops (second derivatives; layers the kernel does not cover) ------
def rows(x, start, n):
    """Rows ``start .. start + n`` of the 2-D ``x``: a view, and one graph node."""
    return slice_var(x, (start, 0), (1, 1), (n, x.shape[1]))


def block_rows(out, k, start, n):
    """Rows ``start .. start + n`` of block ``k`` of ``rnn_scan``'s 3-D ``out``, as a 2-D view:
    two graph nodes, where ``out[k]`` and then ``rows`` made three (a cell's step is one)."""
    return slice_var(out, (k, start, 0), (1, 1, 1), (1, n, out.shape[2])).reshape(n, out.shape[2])


def cols(x, start, stop):
    """Columns ``start .. stop`` of the 2-D ``x``: a view, and one graph node."""
    return slice_var(x, (0, start), (1, 1), (x.shape[0], stop - start))


def step(cell, gi, state, w_hh_t, b_hh, w_hr_t=None):
    """The state after one step from generic ops, from the step's input projection ``gi`` (see
    the module doc), the previous state (h, or (h, c) for LSTM), the transposed recurrent weight
    ``w_hh_t``, for GRU the recurrent bias ``b_hh``, and for an LSTM with ``proj_size`` its
    projection ``w_hr_t``."""
    if cell == "LSTM":
        return _lstm_step(gi, state, w_hh_t, w_hr_t)
    if cell == "GRU":
        return _gru_step(gi, state, w_hh_t, b_hh)
    pre = gi + state @ w_hh_t
    return pre.relu() if cell == "RNN_RELU" else pre.tanh()


def _lstm_step(gi, state, w_hh_t, w_hr_t=None):
    """i, f, o = sigmoid, g = tanh of the gate columns; c' = f * c + i * g, h' = o * tanh(c'),
    then h' @ w_hr.T when the LSTM projects its hidden state (PyTorch's ``proj_size``)."""
    h, c = state
    hidden = c.shape[1]
    gates = gi + h @ w_hh_t
    # one sigmoid over all four gates and three views of it: fewer nodes than one sigmoid per gate
    act = gates.sigmoid()
    i, f, o = cols(act, 0, hidden), cols(act, hidden, 2 * hidden), cols(act, 3 * hidden, 4 * hidden)
    c = f * c + i * cols(gates, 2 * hidden, 3 * hidden).tanh()
    h = o * c.tanh()
    return (h if w_hr_t is None else h @ w_hr_t), c


def _gru_step(gi, h, w_hh_t, b_hh):
    """r, z = sigmoid(gi + gh) of their columns, n = tanh(gi_n + r * gh_n), h' = n + z * (h - n),
    with gh = h @ w_hh.T + b_hh (PyTorch's GRU: the new gate's recurrent bias is inside the reset
    product, so it cannot join ``gi``)."""
    hidden = h.shape[1]
    gh = h @ w_hh_t
    if b_hh is not None:
        gh = gh + b_hh
    rz = (cols(gi, 0, 2 * hidden) + cols(gh, 0, 2 * hidden)).sigmoid()
    r, z = cols(rz, 0, hidden), cols(rz, hidden, 2 * hidden)
    n = (cols(gi, 2 * hidden, 3 * hidden) + r * cols(gh, 2 * hidden, 3 * hidden)).tanh()
    return n + z * (h - n)


def composed_scan(cell, gi, h0, c0, w_hh, b_hh, steps, reverse=False):
    """The hidden states (steps * batch, hidden) of every step and, for LSTM, the cell states
    (None otherwise), built step by step from generic ops: blocks 0 and 1 of ``rnn_scan``."""
    batch, w_hh_t = h0.shape[0], w_hh.transpose(1, 0)
    state = (h0, c0) if cell == "LSTM" else h0
    hs, cs = [None] * steps, [None] * steps
    for t in (reversed(range(steps)) if reverse else range(steps)):
        state = step(cell, rows(gi, t * batch, batch), state, w_hh_t, b_hh)
        hs[t], cs[t] = state if cell == "LSTM" else (state, None)
    return concat(hs, 0), (concat(cs, 0) if cell == "LSTM" else None)


# --- the ops -------------------------------------------------------------------------------------
class _Args(NamedTuple):
    """The inputs of ``rnn_scan`` by name (c0, b_hh and b_in None where the op has none)."""
    gi: Var
    h0: Var
    w_hh: Var
    c0: Var
    b_hh: Var
    b_in: Var


def _args(inputs, a):
    gi, h0, w_hh, *rest = inputs
    c0 = rest.pop(0) if a["cell"] == "LSTM" else None
    b_hh = rest.pop(0) if a["has_bias"] else None
    return _Args(gi, h0, w_hh, c0, b_hh, rest.pop(0) if a["has_in_bias"] else None)


def _scan_infer(inputs, a):
    gi, h0, w_hh, c0, b_hh, b_in = _args(inputs, a)
    batch, hidden = h0.shape if h0.ndim == 2 else (0, 0)
    width, steps = GATES[a["cell"]] * hidden, a["steps"]
    wanted = [("gi", gi, (steps * batch, width)), ("h0", h0, (batch, hidden)), ("w_hh", w_hh, (width, hidden))]
    wanted += [("c0", c0, (batch, hidden))] * (c0 is not None) + [("b_hh", b_hh, (width,))] * (b_hh is not None)
    wanted += [("b_in", b_in, (width,))] * (b_in is not None)
    for name, v, shape in wanted:
        if v.shape != shape or v.dtype != gi.dtype or not dtypes.is_float(v.dtype):
            raise ValueError(f"rnn_scan ({a['cell']}, {steps} steps): {name} must be {shape} of gi's float dtype "
                             f"({gi.dtype}), got {v.shape} {v.dtype} (h0 is {h0.shape})")
    return (scan_blocks(a["cell"]), steps * batch, hidden), gi.dtype


def _kernel(backend, cell, mode, dtype):
    """This cell's forward or backward kernel; both are built on the first call, in parallel."""
    blas = backend.cblas_gemm(dtype)
    built = backend.kernels("rnn_scan", [context for _, context in _planned(backend, cell, dtype)])
    return built[mode == "backward"], (blas.address if blas else 0)


def _planned(backend, cell, dtype):
    """``[(template, context)]`` of a cell's two kernels, built together (``OpSpec.kernels``)."""
    blas = backend.cblas_gemm(dtype)
    common = dict(cell=cell, ctype=dtypes.C_TYPES[dtypes.numpy_name(dtype)], gates=GATES[cell],
                  blas_int=blas.int_type if blas else "int64_t")
    return [("rnn_scan", dict(common, mode=m)) for m in ("forward", "backward")]


def _launch(mode):
    """``launch(arrays, attrs, backend) -> (call, arrays it reads)`` of the forward or backward
    kernel. An absent c0, b_hh or b_in is stood in for by an input the kernel does not read then
    (the ints say which are there), so a launch table can make the call on the inputs alone."""
    def launch(arrays, a, backend):
        laid = [np.ascontiguousarray(x) for x in arrays]
        first = 2 if mode == "backward" else 0        # d and out come before the forward's inputs
        gi, h0, w_hh, c0, b_hh, b_in = _args(range(first, len(laid)), a)     # places in laid
        kernel, gemm = _kernel(backend, a["cell"], mode, laid[0].dtype)
        batch, hidden = laid[h0].shape
        ints = [a["steps"], batch, hidden, gemm, int(a["reverse"]), int(b_hh is not None), int(b_in is not None)]
        c0 = h0 if c0 is None else c0
        order = ((gi, h0, c0, w_hh, w_hh if b_hh is None else b_hh, w_hh if b_in is None else b_in)
                 if mode == "forward" else (0, 1, h0, c0, w_hh))
        return TableKernel(kernel, ints, [], threads=backend.thread_count(), order=order), laid
    return launch


def _result_rows(a, batch, hidden):
    return a["steps"] * batch + hidden + 2 + 2 * batch


def _scan_output(laid, a):
    h0 = laid[1]
    return (scan_blocks(a["cell"]), a["steps"] * h0.shape[0], h0.shape[1]), h0.dtype


def _grad_output(laid, a):
    h0 = laid[3]
    return (_result_rows(a, *h0.shape), GATES[a["cell"]] * h0.shape[1]), h0.dtype


def _unpack(res, inputs, a):
    """The gradient of each input of ``rnn_scan`` (in their order) as views of ``res``, the
    (steps * batch + hidden + 2 + 2 * batch, gates * hidden) rows of ``rnn_scan_grad``."""
    args = _args(inputs, a)
    batch, hidden = args.h0.shape
    tb, width = a["steps"] * batch, GATES[a["cell"]] * hidden
    state_rows = tb + hidden + 1
    grads = [rows(res, 0, tb), cols(rows(res, state_rows, batch), 0, hidden),
             rows(res, tb, hidden).reshape(width, hidden)]
    if args.c0 is not None:
        grads.append(cols(rows(res, state_rows + batch, batch), 0, hidden))
    if args.b_hh is not None:
        grads.append(rows(res, tb + hidden, 1).reshape(width))
    if args.b_in is not None:
        grads.append(rows(res, state_rows + 2 * batch, 1).reshape(width))
    return grads


def read_blocks(cell):
    """How many leading blocks of ``out`` ``rnn_scan_grad`` reads the gradient of: the hidden
    states, and LSTM's cell states (the gates' blocks are for the backward's own use)."""
    return 2 if cell == "LSTM" else 1


def _scan_grad(d, out, inputs, a):
    # only the blocks read: their gradient is a pad of the states' gradients, and computing it
    # whole wrote zeros over every gate block (6 blocks a step for LSTM, 2 of them read)
    blocks = read_blocks(a["cell"])
    d = slice_var(d, (0, 0, 0), (1, 1, 1), (blocks,) + d.shape[1:])
    return _unpack(Var.node("rnn_scan_grad", [d, out] + list(inputs), **a), inputs, a)


register(OpSpec("rnn_scan", "library", infer=_scan_infer, run=launched_run(_launch("forward"), _scan_output),
                grad=_scan_grad, kernels=lambda inputs, a, backend: _planned(backend, a["cell"], inputs[0].dtype),
                table_kernel=table_kernel_from(_launch("forward"))))


def _grad_infer(inputs, a):
    d, out, *args = inputs
    shape, dtype = _scan_infer(args, a)
    d_shape = (read_blocks(a["cell"]),) + shape[1:]
    if d.shape != d_shape or out.shape != shape or d.dtype != dtype or out.dtype != dtype:
        raise ValueError(f"rnn_scan_grad: d must be {d_shape} and out {shape}, both {dtype}, got d {d.shape} "
                         f"{d.dtype}, out {out.shape} {out.dtype}")
    batch, hidden = args[1].shape
    return (_result_rows(a, batch, hidden), GATES[a["cell"]] * hidden), dtype


def _stand_in(v):
    """``v``'s value with a gradient that reaches ``v``, but a node of its own: ``grad`` with
    respect to it is the partial derivative, not counting the paths through ``v``'s ancestors
    (``d`` is built from ``out``, so from every other input)."""
    frozen = v.detach()
    return frozen + (v - frozen)


def _grad_grad(c, res, inputs, a):
    """``rnn_scan_grad`` is the vector-Jacobian product of ``rnn_scan``; its own derivative is
    that of the same product through ``composed_scan`` (``out`` only caches the forward: None)."""
    d, out, *rest = inputs
    d, *rest = [_stand_in(v) for v in [d] + rest]
    args = _args(rest, a)
    gi = args.gi if args.b_in is None else args.gi + args.b_in
    hs, cs = composed_scan(a["cell"], gi, args.h0, args.c0, args.w_hh, args.b_hh, a["steps"], a["reverse"])
    total = (hs * d[0]).sum()
    if a["cell"] == "LSTM":
        total = total + (cs * d[1]).sum()
    wrt = [v for v in args if v is not None]
    second = sum((f * p).sum() for f, p in zip(grad(total, wrt), _unpack(c, rest, a)))
    d_d, *d_args = grad(second, [d] + wrt)
    return [d_d, None] + d_args


register(OpSpec("rnn_scan_grad", "library", infer=_grad_infer, run=launched_run(_launch("backward"), _grad_output),
                grad=_grad_grad, kernels=lambda inputs, a, backend: _planned(backend, a["cell"], inputs[0].dtype),
                table_kernel=table_kernel_from(_launch("backward"))))


def rnn_scan(cell, gi, h0, c0, w_hh, b_hh, steps, reverse=False, b_in=None):
    """The (K, steps * batch, hidden) ``out`` of one layer direction's recurrence (module doc)."""
    if cell not in GATES:
        raise ValueError(f"rnn_scan: cell must be one of {sorted(GATES)}, got {cell!r}")
    if (c0 is not None) != (cell == "LSTM"):
        raise ValueError(f"rnn_scan: c0 is {'required' if cell == 'LSTM' else 'only for LSTM'} ({cell})")
    if b_hh is not None and cell != "GRU":
        raise ValueError(f"rnn_scan: b_hh is GRU's only; for {cell} add it to gi")
    inputs = [gi, h0, w_hh] + [v for v in (c0, b_hh, b_in) if v is not None]
    return Var.node("rnn_scan", inputs, cell=cell, steps=int(steps), reverse=bool(reverse),
                    has_bias=b_hh is not None, has_in_bias=b_in is not None)
