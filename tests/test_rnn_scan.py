"""The fused recurrence (``ops/rnn_scan.py``) that nn.RNN/LSTM/GRU run on: layers of several
shapes against PyTorch CPU (values and every gradient), non-contiguous and float64 inputs, the
kernel's own product loops (no CBLAS), second derivatives against the composed recurrence, and
the errors of bad operands."""
import numpy as np
import pytest

import jtmini as jt
from jtmini.nn.rnn import GRU, LSTM, RNN
from jtmini.ops.rnn_scan import GATES, composed_scan, rnn_scan
from jtmini.runtime import cpu

from conftest import graph_nodes
from test_rnn import check_against_torch, flat, twins

torch = pytest.importorskip("torch")
LAYERS = {"GRU": (GRU, "GRU"), "LSTM": (LSTM, "LSTM"), "RNN": (RNN, "RNN")}


@pytest.mark.parametrize("kind, sizes, kwargs", [
    ("GRU", (7, 16, 9, 3), dict(bidirectional=True)),             # (input, hidden, steps, batch)
    ("GRU", (2, 33, 1, 1), dict(num_layers=2)),
    ("LSTM", (5, 12, 6, 4), dict(num_layers=2, bidirectional=True, batch_first=True)),
    ("LSTM", (3, 8, 1, 2), dict()),
    ("RNN", (6, 10, 8, 3), dict(nonlinearity="relu", bidirectional=True)),
    ("RNN", (4, 5, 4, 2), dict(num_layers=3, bias=False)),
])
def test_layers_of_several_shapes_match_torch(kind, sizes, kwargs, rng):
    inputs, hidden, steps, batch = sizes
    cls, name = LAYERS[kind]
    layer, ref = twins(lambda: cls(inputs, hidden, **kwargs), lambda: getattr(torch.nn, name)(inputs, hidden, **kwargs))
    slots = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    x = rng.standard_normal((batch, steps, inputs) if kwargs.get("batch_first") else (steps, batch, inputs))
    states = [rng.standard_normal((slots, batch, hidden)) for _ in range(2 if kind == "LSTM" else 1)]
    check_against_torch(layer, ref, x, states, rng)


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_non_contiguous_input_matches_torch(kind, rng):
    """The input a permuted, strided view of a bigger array, as a model's features often are."""
    cls, name = LAYERS[kind]
    layer, ref = twins(lambda: cls(3, 6, bidirectional=True), lambda: getattr(torch.nn, name)(3, 6, bidirectional=True))
    store = np.float32(rng.standard_normal((2 * 3, 4, 5)))          # (features * 2, batch, steps)
    leaf = jt.array(store)
    x = leaf[::2].permute(2, 1, 0)                                  # (steps, batch, features)
    t_leaf = torch.tensor(store, dtype=torch.float64, requires_grad=True)
    got, expected = flat(layer(x)), flat(ref(t_leaf[::2].permute(2, 1, 0)))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.detach().numpy(), rtol=1e-5, atol=1e-6)
    w = [rng.uniform(0.5, 1.5, tuple(e.shape)) for e in expected]
    loss = sum((g * jt.array(np.float32(v))).sum() for g, v in zip(got, w))
    t_loss = sum((e * torch.tensor(v)).sum() for e, v in zip(expected, w))
    np.testing.assert_allclose(jt.grad(loss, leaf).numpy(), torch.autograd.grad(t_loss, t_leaf)[0].numpy(),
                               rtol=1e-4, atol=1e-5)


def test_float64_input_through_float32_weights_is_float64(rng):
    layer, ref = twins(lambda: GRU(3, 5), lambda: torch.nn.GRU(3, 5))
    x = rng.standard_normal((4, 2, 3))
    out, h_n = layer(jt.array(x))
    assert out.dtype == h_n.dtype == "float64"
    t_out, t_h = ref(torch.tensor(x))
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(h_n.numpy(), t_h.detach().numpy(), rtol=1e-6, atol=1e-7)


def _operands(cell, steps, batch, hidden, rng, dtype="float64"):
    """Random operands of ``rnn_scan`` for ``cell``: (gi, h0, c0, w_hh, b_hh), absent ones None."""
    width = GATES[cell] * hidden
    draw = lambda *shape: jt.array(rng.standard_normal(shape).astype(dtype))      # noqa: E731
    return (draw(steps * batch, width), draw(batch, hidden), draw(batch, hidden) if cell == "LSTM" else None,
            draw(width, hidden) * 0.5, draw(width) if cell == "GRU" else None)


def _loss(cell, hs, cs, weights):
    """A weighted sum of the hidden states and the squares of LSTM's cell states."""
    total = (hs * weights).sum()
    return total + (cs * cs).sum() if cs is not None else total


def _fused(cell, ops, steps, reverse, b_in=None):
    """``rnn_scan``'s hidden states and LSTM's cell states, as ``composed_scan`` returns them."""
    out = rnn_scan(cell, *ops, steps, reverse, b_in)
    return out[0], (out[1] if cell == "LSTM" else None)


def _composed(cell, ops, steps, reverse, b_in=None):
    """``composed_scan`` of the same operands, ``b_in`` added to ``gi`` first."""
    gi, *rest = ops
    return composed_scan(cell, gi if b_in is None else gi + b_in, *rest, steps, reverse)


@pytest.mark.parametrize("in_bias", [False, True])
@pytest.mark.parametrize("cell", sorted(GATES))
def test_kernel_loops_without_cblas_match_the_composed_recurrence(cell, in_bias, rng, monkeypatch):
    """With no CBLAS found the kernels multiply with their own loops: same values and gradients,
    with and without gi's bias added in the kernel."""
    monkeypatch.setattr(type(cpu.BACKEND), "cblas_gemm", staticmethod(lambda dtype: None))
    steps, batch, hidden = 5, 3, 7
    ops = _operands(cell, steps, batch, hidden, rng)
    b_in = jt.array(rng.standard_normal(GATES[cell] * hidden)) if in_bias else None
    weights = jt.array(rng.standard_normal((steps * batch, hidden)))
    present = [v for v in ops + (b_in,) if v is not None]
    for reverse in (False, True):
        fused = _loss(cell, *_fused(cell, ops, steps, reverse, b_in), weights)
        composed = _loss(cell, *_composed(cell, ops, steps, reverse, b_in), weights)
        np.testing.assert_allclose(fused.numpy(), composed.numpy(), rtol=1e-12)
        for g, e in zip(jt.grad(fused, present), jt.grad(composed, present)):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cell", ["GRU", "LSTM", "RNN_TANH"])
def test_second_derivative_matches_the_composed_recurrence(cell, rng):
    """d/dops of (a weighted sum of the first gradient): through rnn_scan_grad's own rule."""
    steps, batch, hidden = 4, 2, 3
    ops = _operands(cell, steps, batch, hidden, rng)
    b_in = jt.array(rng.standard_normal(GATES[cell] * hidden))
    weights = jt.array(rng.standard_normal((steps * batch, hidden)))
    present = [v for v in ops + (b_in,) if v is not None]
    probes = [jt.array(rng.standard_normal(v.shape)) for v in present]
    results = []
    for build in (lambda: _fused(cell, ops, steps, True, b_in), lambda: _composed(cell, ops, steps, True, b_in)):
        firsts = jt.grad(_loss(cell, *build(), weights), present)
        second = sum((f * p).sum() for f, p in zip(firsts, probes))
        results.append([g.numpy() for g in jt.grad(second, present)])
    for g, e in zip(*results):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-11)


def test_gru_second_derivative_matches_torch(rng):
    """Through the layer: the gradient's norm, differentiated again, against PyTorch's."""
    layer, ref = twins(lambda: GRU(2, 4), lambda: torch.nn.GRU(2, 4))
    x = np.float32(rng.standard_normal((3, 2, 2)))
    jx, tx = jt.array(x), torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (g,) = [jt.grad(layer(jx)[0].sum(), jx)]
    (tg,) = torch.autograd.grad(ref(tx)[0].sum(), tx, create_graph=True)
    got = jt.grad((g * g).sum(), layer.weight_hh_l0)
    expected = torch.autograd.grad((tg * tg).sum(), ref.weight_hh_l0)[0]
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=1e-6)


def test_repeats_bit_for_bit(rng):
    ops = _operands("GRU", 6, 4, 8, rng, "float32")
    first = rnn_scan("GRU", *ops, 6).numpy()
    np.testing.assert_array_equal(rnn_scan("GRU", *ops, 6).numpy(), first)


def test_bad_operands_are_clear_errors(rng):
    gi, h0, c0, w, b = _operands("GRU", 3, 2, 4, rng)
    with pytest.raises(ValueError, match=r"rnn_scan \(GRU, 3 steps\): w_hh must be \(12, 4\).*got \(12, 5\)"):
        rnn_scan("GRU", gi, h0, None, jt.zeros((12, 5), dtype="float64"), b, 3).sync()
    with pytest.raises(ValueError, match=r"h0 must be \(2, 4\) of gi.s float dtype \(float32\), got \(2, 4\) float64"):
        rnn_scan("GRU", gi.cast("float32"), h0, None, w, b, 3).sync()
    with pytest.raises(ValueError, match="c0 is only for LSTM"):
        rnn_scan("GRU", gi, h0, h0, w, b, 3)
    with pytest.raises(ValueError, match="c0 is required"):
        rnn_scan("LSTM", gi, h0, None, w, None, 3)
    with pytest.raises(ValueError, match="b_hh is GRU's only"):
        rnn_scan("RNN_TANH", gi, h0, None, w, b, 3)
    with pytest.raises(ValueError, match="cell must be one of"):
        rnn_scan("GRUX", gi, h0, None, w, b, 3)


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
def test_threads_split_the_batch_with_the_same_results(cell, rng):
    """Big enough to split (1M+ multiply-adds a step): 2 threads, each its own batch rows through
    every step and a block of the weight gradient's columns, match the composed recurrence and
    repeat bit for bit."""
    steps, batch, hidden = 3, 64, 128 if cell == "GRU" else 64
    ops = _operands(cell, steps, batch, hidden, rng)
    weights = jt.array(rng.standard_normal((steps * batch, hidden)))
    present = [v for v in ops if v is not None]
    composed = _loss(cell, *composed_scan(cell, *ops, steps, False), weights)
    expected = [composed.numpy()] + [g.numpy() for g in jt.grad(composed, present)]
    with jt.flag_scope(num_threads=2):
        runs = []
        for _ in range(2):
            fused = _loss(cell, *_fused(cell, ops, steps, False), weights)
            runs.append([fused.numpy()] + [g.numpy() for g in jt.grad(fused, present)])
    for g, again, e in zip(runs[0], runs[1], expected):
        np.testing.assert_array_equal(g, again)
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-11)


def test_cblas_gemm_is_found_for_floats_only():
    """The kernels' product: numpy's BLAS, checked by a direct call; no entry for other dtypes."""
    from jtmini.runtime import blas
    for dtype in ("float32", "float64"):
        entry = cpu.BACKEND.cblas_gemm(dtype)
        assert entry is not None and entry.address and entry.int_type in ("int", "int64_t")
    assert blas.cblas_gemm("int32") is None


@pytest.mark.parametrize("cell, read", [("LSTM", 2), ("GRU", 1), ("RNN_TANH", 1)])
def test_the_backward_computes_the_gradient_of_the_read_blocks_only(cell, read):
    """Its gradient is a pad of the states' gradients: whole, it wrote zeros over the gate
    blocks too (an LSTM's 6 blocks a step, 2 of them read)."""
    gates, steps, batch, hidden = GATES[cell], 5, 3, 4
    gi, h0, w = jt.randn(steps * batch, gates * hidden), jt.randn(batch, hidden), jt.randn(gates * hidden, hidden)
    out = rnn_scan(cell, gi, h0, jt.randn(batch, hidden) if cell == "LSTM" else None, w, None, steps)
    (d_gi,) = jt.grad(out[0][-batch:].sum() + (out[1].sum() if cell == "LSTM" else 0), [gi])
    backward = [v for v in graph_nodes(d_gi) if v.op == "rnn_scan_grad"]
    assert len(backward) == 1 and backward[0].inputs[0].shape == (read, steps * batch, hidden)



@pytest.mark.parametrize("cell", sorted(GATES))
def test_gi_bias_in_the_kernel_gives_the_numbers_of_adding_it_first(cell, rng):
    """gi's bias added in the kernel (as nn layers now pass it) rounds as ``gi + b`` did: the same
    float32 states and d_gi bit for bit; its own gradient, the column sums of d_gi, to rounding."""
    steps, batch, hidden = 6, 4, 5
    ops = _operands(cell, steps, batch, hidden, rng, dtype="float32")
    b = jt.array(np.float32(rng.standard_normal(GATES[cell] * hidden)))
    weights = jt.array(np.float32(rng.standard_normal((steps * batch, hidden))))
    gi, *rest = ops
    inside, added = (_fused(cell, ops, steps, False, b), _fused(cell, (gi + b, *rest), steps, False))
    for got, want in zip(inside, added):
        if want is not None:
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    g_inside = jt.grad(_loss(cell, *inside, weights), [gi, b])
    g_added = jt.grad(_loss(cell, *added, weights), [gi, b])
    np.testing.assert_array_equal(g_inside[0].numpy(), g_added[0].numpy())
    np.testing.assert_allclose(g_inside[1].numpy(), g_added[1].numpy(), rtol=1e-5, atol=1e-6)
