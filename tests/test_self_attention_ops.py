"""The fused packed self-attention (``ops/self_attention.py``): values, first and second gradients
against PyTorch on contiguous, transposed, sliced and broadcast projections in both layouts, with
and without a causal mask; the same bits as the composed form at 1 and 2 threads for long
sequences, within rounding of it for small heads (sizes compiled in); the graph it
builds; errors; and ``nn.MultiheadAttention`` choosing it only where it applies."""
import math

import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini import nn
from jtmini.ops import self_attention as sa

from conftest import GRAD_TOL, LAYOUTS, check_grad, graph_nodes

HEADS = 2


def torch_attention(qkv, heads, seq, mask=None):
    """The reference: PyTorch's attention of a packed (N, L, 3E) / (L, N, 3E) projection."""
    if seq == 0:
        qkv = qkv.transpose(0, 1)
    n, length, width = qkv.shape
    e = width // 3
    q, k, v = (qkv[..., j * e:(j + 1) * e].reshape(n, length, heads, e // heads).transpose(1, 2) for j in range(3))
    scores = q @ k.transpose(2, 3) / math.sqrt(e // heads)
    if mask is not None:
        scores = scores.masked_fill(torch.as_tensor(mask), float("-inf"))
    out = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(n, length, e)
    return out if seq == 1 else out.transpose(0, 1)


def additive(mask, dtype):
    """The (L, L) additive form of a bool mask, as nn.MultiheadAttention makes it."""
    return jt.where(jt.array(mask), float("-inf"), 0.0).cast(dtype)


def causal(length):
    return np.triu(np.ones((length, length), bool), 1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seq", [0, 1])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_pytorch_on_every_layout(dtype, seq, masked, layout, rng):
    qkv = rng.standard_normal((3, 5, 3 * 4 * HEADS))
    length = qkv.shape[seq]
    mask = causal(length) if masked else None

    def fused(x):
        out = sa.packed_self_attention(x, HEADS, seq, bias=None if mask is None else additive(mask, dtype))
        assert {"attention_probs", "attention_out"} <= {v.op for v in graph_nodes(out)}
        return out
    check_grad(fused, lambda t: torch_attention(t, HEADS, seq, mask), [qkv], layouts=[layout], dtype=dtype)


def test_broadcast_projection_matches_pytorch(rng):
    """One sequence's projection broadcast over a batch: the gradient sums over the batch."""
    row = rng.standard_normal((1, 6, 3 * 8))
    mask = causal(6)
    check_grad(lambda x: sa.packed_self_attention(x.broadcast_to((4, 6, 24)), HEADS, 1, bias=additive(mask, "float64")),
               lambda t: torch_attention(t.expand(4, 6, 24), HEADS, 1, mask), [row], dtype="float64")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("seq", [0, 1])
def test_same_bits_as_the_composed_form(threads, seq, rng):
    """Sequences longer than SMALL_MAX take the CBLAS kernels: values and gradients equal the
    composed form's exactly (large enough to use 2 threads)."""
    shape = (8, 72) if seq == 1 else (72, 8)
    qkv_np = rng.standard_normal(shape + (3 * 32,)).astype("float32")
    up = rng.standard_normal(shape + (32,)).astype("float32")
    length = qkv_np.shape[seq]
    assert length > sa.SMALL_MAX
    bias = additive(causal(length), "float32")
    with jt.flag_scope(num_threads=threads):
        qkv = jt.array(qkv_np)
        fused = sa.packed_self_attention(qkv, 4, seq, bias=bias)
        composed = sa.composed_self_attention(qkv, 4, seq, 1 / math.sqrt(8), bias)
        grads = [jt.grad((out * jt.array(up)).sum(), qkv).numpy() for out in (fused, composed)]
        np.testing.assert_array_equal(fused.numpy(), composed.numpy())
    # the composed form adds its slices' gradients to +0 pads: only the sign of a zero may differ
    np.testing.assert_array_equal(grads[0], grads[1])


def _small_kernels_used():
    return {key[-1] for key in sa._kernels if key[-1] is not None}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("length, head_dim", [(8, 8), (32, 16), (16, 64)])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("seq", [0, 1])
def test_small_heads_match_pytorch(dtype, length, head_dim, masked, seq, rng):
    """Heads of whole vectors up to SMALL_MAX run the kernels with their sizes compiled in and the
    products as loops: values and gradients against PyTorch, on every layout."""
    heads = 2
    shape = (3, length) if seq == 1 else (length, 3)
    qkv = rng.standard_normal(shape + (3 * heads * head_dim,))
    mask = causal(length) if masked else None
    for layout in LAYOUTS:
        check_grad(lambda x: sa.packed_self_attention(x, heads, seq, bias=None if mask is None else additive(mask, dtype)),
                   lambda t: torch_attention(t, heads, seq, mask), [qkv], layouts=[layout], dtype=dtype)
    assert (length, head_dim) in _small_kernels_used()


@pytest.mark.parametrize("threads", [1, 2])
def test_small_heads_near_the_composed_form(threads, rng):
    """The transformer's heads (L 32, Dh 16) with a causal mask, at 1 and 2 threads: within
    float32 rounding of the composed form (which reads the same CBLAS products as PyTorch's)."""
    qkv_np = rng.standard_normal((16, 32, 3 * 64)).astype("float32")
    up = rng.standard_normal((16, 32, 64)).astype("float32")
    bias = additive(causal(32), "float32")
    with jt.flag_scope(num_threads=threads):
        qkv = jt.array(qkv_np)
        fused = sa.packed_self_attention(qkv, 4, 1, bias=bias)
        composed = sa.composed_self_attention(qkv, 4, 1, 1 / math.sqrt(16), bias)
        grads = [jt.grad((out * jt.array(up)).sum(), qkv).numpy() for out in (fused, composed)]
        np.testing.assert_allclose(fused.numpy(), composed.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-4, atol=1e-5)
    assert (32, 16) in _small_kernels_used()


def test_small_heads_keep_cblas_without_specialize_shapes(rng):
    """With ``specialize_shapes`` off (lengths that change every step) no kernel is compiled per
    length: small heads take the CBLAS kernels and the composed form's bits."""
    qkv = jt.array(rng.standard_normal((2, 8, 3 * 16)).astype("float32"))
    sa._kernels.clear()
    with jt.flag_scope(specialize_shapes=False):
        fused = sa.packed_self_attention(qkv, 2, 1).numpy()
        composed = sa.composed_self_attention(qkv, 2, 1, 1 / math.sqrt(8)).numpy()
    np.testing.assert_array_equal(fused, composed)
    assert not _small_kernels_used()


def test_a_fully_masked_row_is_nan_as_in_pytorch(rng):
    """A row whose every key is masked has no softmax: NaN, as the composed form and PyTorch give."""
    qkv = jt.array(rng.standard_normal((2, 8, 3 * 16)).astype("float32"))
    mask = np.zeros((8, 8), bool)
    mask[3] = True
    out = sa.packed_self_attention(qkv, 2, 1, bias=additive(mask, "float32")).numpy()
    expected = torch_attention(torch.tensor(qkv.numpy()), 2, 1, mask).numpy()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    assert np.isnan(out[:, 3]).all() and not np.isnan(np.delete(out, 3, axis=1)).any()
    np.testing.assert_allclose(np.nan_to_num(out), np.nan_to_num(expected), rtol=1e-5, atol=1e-6)


def test_repeats_bit_for_bit_across_thread_counts(rng):
    qkv_np = rng.standard_normal((16, 32, 3 * 64)).astype("float32")
    results = []
    for threads in (1, 2):
        with jt.flag_scope(num_threads=threads):
            qkv = jt.array(qkv_np)
            out = sa.packed_self_attention(qkv, 4, 1, bias=additive(causal(32), "float32"))
            results.append((out.numpy(), jt.grad((out * out).sum(), qkv).numpy()))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("masked", [False, True])
def test_second_gradient_matches_pytorch(masked, rng):
    qkv_np, up = rng.standard_normal((2, 4, 3 * 6)), rng.standard_normal((2, 4, 6))
    mask = causal(4) if masked else None
    qkv, tq = jt.array(qkv_np), torch.tensor(qkv_np, requires_grad=True)
    out = sa.packed_self_attention(qkv, HEADS, 1, bias=None if mask is None else additive(mask, "float64"))
    t_out = torch_attention(tq, HEADS, 1, mask)
    g = jt.grad((out * jt.array(up)).sum(), qkv)
    (tg,) = torch.autograd.grad((t_out * torch.tensor(up)).sum(), tq, create_graph=True)
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), **GRAD_TOL["float64"])
    gg = jt.grad((g * g).sum(), qkv)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), tq)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), **GRAD_TOL["float64"])


def test_graph_is_three_nodes_each_way():
    qkv = jt.randn(2, 4, 3 * 8)
    out = sa.packed_self_attention(qkv, HEADS, 1)
    assert sorted(v.op for v in graph_nodes(out) if v is not qkv) == ["attention_out", "attention_probs"]
    g = jt.grad(out.sum(), qkv)
    assert "attention_grad" in {v.op for v in graph_nodes(g)}
    assert not {"matmul", "softmax_rows", "softmax_rows_grad", "pad"} & {v.op for v in graph_nodes(g)}


def test_bad_inputs_are_refused_naming_them():
    qkv = jt.randn(2, 4, 24)
    cases = [
        (lambda: sa.packed_self_attention(jt.randn(2, 4, 25), HEADS, 1),
         "packed_self_attention: qkv must be a 3-D float32 or float64 Var whose last dim is 3 * heads * head_dim "
         "(heads=2), got (2, 4, 25) float32"),
        (lambda: sa.packed_self_attention(jt.randn(8, 24), HEADS, 1), "got (8, 24) float32"),
        (lambda: sa.packed_self_attention(qkv.cast("int32"), HEADS, 1), "got (2, 4, 24) int32"),
        (lambda: sa.packed_self_attention(qkv, HEADS, 2), "seq must be 0 ((L, N, 3E)) or 1 ((N, L, 3E)), got 2"),
        (lambda: sa.packed_self_attention(qkv, HEADS, 1, bias=jt.zeros(2, 2)),
         "attention_probs: bias must be (4, 4) float32 for qkv (2, 4, 24), got (2, 2) float32"),
        (lambda: sa.packed_self_attention(qkv.cast("float16"), HEADS, 1),
         "got (2, 4, 24) float16"),
        (lambda: jt.Var.node("attention_out", [jt.zeros(2, 2, 4, 3), qkv], heads=HEADS, seq=1, scale=1.0),
         "attention_out: P must be (2, 2, 4, 4) float32 for qkv (2, 4, 24), got (2, 2, 4, 3) float32"),
        (lambda: jt.Var.node("attention_grad", [jt.zeros(2, 4, 7), jt.zeros(2, 2, 4, 4), qkv], heads=HEADS, seq=1,
                             scale=1.0),
         "attention_grad: dout must be (2, 4, 8) float32, got (2, 4, 7) float32"),
    ]
    for build, message in cases:
        with pytest.raises(ValueError) as info:
            build()
        assert message in str(info.value)


# --- nn.MultiheadAttention -----------------------------------------------------------------------
def _attention_ops(layer, x, **kwargs):
    return {v.op for v in graph_nodes(layer(x, x, x, **kwargs)[0])}


def test_multihead_attention_fuses_self_attention_only():
    layer, x = nn.MultiheadAttention(8, 2, batch_first=True), jt.randn(2, 4, 8)
    mask = jt.array(causal(4))
    assert "attention_probs" in _attention_ops(layer, x, need_weights=False, attn_mask=mask)
    assert "attention_probs" in _attention_ops(layer, x.transpose(0, 1), need_weights=False)
    assert "attention_probs" not in _attention_ops(layer, x, need_weights=True)          # weights wanted
    float_mask = jt.where(mask, float("-inf"), 0.0)                                   # may need a gradient
    assert "attention_probs" not in _attention_ops(layer, x, need_weights=False, attn_mask=float_mask)
    padding = jt.array(np.array([[False] * 3 + [True]] * 2))
    assert "attention_probs" not in _attention_ops(layer, x, need_weights=False, key_padding_mask=padding)
    dropping = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)
    assert "attention_probs" not in _attention_ops(dropping, x, need_weights=False)
    dropping.eval()
    assert "attention_probs" in _attention_ops(dropping, x, need_weights=False)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_fused_matches_pytorch(batch_first, rng):
    layer = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first).double()
    bias = rng.standard_normal(24)
    layer.in_proj_bias.assign(jt.array(bias.astype("float32")))
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.copy_(torch.tensor(dict(layer.named_parameters())[name].numpy().astype(np.float64)))
    x_np, mask = rng.standard_normal((3, 5, 8)).astype("float32"), causal(5 if batch_first else 3)
    x, tx = jt.array(x_np), torch.tensor(x_np.astype(np.float64), requires_grad=True)
    out = layer(x, x, x, attn_mask=jt.array(mask), need_weights=False)[0]
    t_out = ref(tx, tx, tx, attn_mask=torch.tensor(mask), need_weights=False)[0]
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), **GRAD_TOL["float32"])
    names = [n for n, _ in layer.named_parameters()]
    grads = jt.grad(out.sum(), [x] + [p for _, p in layer.named_parameters()])
    t_grads = torch.autograd.grad(t_out.sum(), [tx] + [dict(ref.named_parameters())[n] for n in names])
    for g, tg in zip(grads, t_grads):
        np.testing.assert_allclose(g.numpy(), tg.numpy(), **GRAD_TOL["float32"])


@pytest.mark.parametrize("kind", ["prefix", "scattered", "window"])
def test_small_heads_with_masks_that_end_rows_early(kind, rng):
    """The small-head kernels skip the vectors of a row past its last unmasked score (and, in the
    backward pass, the zero probabilities' products): masks whose rows end at random columns,
    masks with holes and a sliding window (rows start late), against PyTorch."""
    length, heads, head_dim = 32, 2, 16
    cols = np.arange(length)
    if kind == "prefix":
        ends = rng.integers(1, length + 1, length)                 # row l keeps columns < ends[l]
        mask = cols[None, :] >= ends[:, None]
    elif kind == "scattered":
        mask = rng.random((length, length)) < 0.6
        mask[np.arange(length), rng.integers(0, length, length)] = False   # no row fully masked
    else:
        mask = (cols[None, :] > cols[:, None]) | (cols[None, :] < cols[:, None] - 5)
    qkv = rng.standard_normal((3, length, 3 * heads * head_dim))
    check_grad(lambda x: sa.packed_self_attention(x, heads, 1, bias=additive(mask, "float32")),
               lambda t: torch_attention(t, heads, 1, mask), [qkv], layouts=["transposed"])
    assert (length, head_dim) in _small_kernels_used()
