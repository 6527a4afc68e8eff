"""ops/assemble.py: concat of three or more Vars copies each once into place, and the gradient of a
Var read through disjoint slices is one such copy; values and gradients against numpy and PyTorch."""
import numpy as np
import pytest
import torch

import jtmini as jt
from conftest import assert_var, check_grad, graph_nodes, make_input
from jtmini.ops import assemble as assemble_module
from jtmini.ops.assemble import assemble


def _ops(var):
    return [v.op for v in graph_nodes(var)]


@pytest.mark.parametrize("n", [2, 3, 7])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_concat_of_many_matches_numpy_and_torch(n, dim, rng):
    sizes = rng.integers(1, 4, n)
    shapes = [tuple(int(sizes[k]) if d == dim % 3 else (2, 3, 4)[d] for d in range(3)) for k in range(n)]
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    layouts = [("contig", "transposed", "sliced")[k % 3] for k in range(n)]
    xs = [make_input(v, lay)[0] for v, lay in zip(values, layouts)]
    out = jt.concat(xs, dim)
    assert ("assemble" in _ops(out)) == (n >= 3)      # two stay a sum of pads, fused with their makers
    assert_var(out, np.concatenate(values, dim))
    check_grad(lambda *xs: jt.concat(xs, dim), lambda *xs: torch.cat(xs, dim), values, layouts, rng=rng)


@pytest.mark.parametrize("dtype", ["float16", "float64", "int32", "int64", "bool", "uint8"])
def test_concat_copies_every_dtype(dtype, rng):
    values = [(rng.standard_normal((3, k, 2)) * 4).astype(dtype) for k in (2, 1, 3, 2)]
    out = jt.concat([jt.array(v, dtype=dtype) for v in values], 1)
    assert out.op == "assemble"
    assert_var(out, np.concatenate(values, 1), dtype=dtype)


def test_concat_of_large_pieces_on_two_threads_and_of_empty_ones(rng):
    values = [rng.standard_normal((300, k)).astype(np.float32) for k in (200, 1, 0, 311)]
    with jt.flag_scope(num_threads=2):
        assert_var(jt.concat([jt.array(v) for v in values], 1), np.concatenate(values, 1))
        assert_var(jt.concat([jt.array(v).transpose() for v in values], 0), np.concatenate(values, 1).T)
    empty = [np.zeros((0, 2), np.float32)] * 3
    assert_var(jt.concat([jt.array(v) for v in empty], 1), np.zeros((0, 6), np.float32))


def test_assemble_places_pieces_at_offsets_in_any_order_and_zeroes_the_gaps(rng):
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 1, 4))
    ja, jb = jt.array(a, dtype="float64"), jt.array(b, dtype="float64")
    out = assemble([ja, jb], 1, (4, 1), 8)
    want = np.zeros((2, 8, 4))
    want[:, 4:7], want[:, 1:2] = a, b
    assert_var(out, want)
    w = rng.standard_normal((2, 8, 4))
    ga, gb = jt.grad((out * jt.array(w, dtype="float64")).sum(), [ja, jb])
    np.testing.assert_array_equal(ga.numpy(), w[:, 4:7])
    np.testing.assert_array_equal(gb.numpy(), w[:, 1:2])


@pytest.mark.parametrize("pieces, offsets, total, words", [
    ([(2, 3), (2, 2)], (0, 2), 5, "overlap"),                 # 0..3 and 2..4
    ([(2, 3), (2, 2)], (0, 3), 4, "leave 0..4"),              # past the end
    ([(2, 3), (2, 2)], (-1, 3), 5, "leave 0..5"),
    ([(2, 3), (3, 2)], (0, 3), 5, "do not match"),             # another size along dim 0
    ([(2, 3)], (0, 1), 5, "an offset each"),
])
def test_assemble_refuses_bad_pieces_naming_them(pieces, offsets, total, words):
    with pytest.raises(ValueError, match=words) as info:
        assemble([jt.zeros(s) for s in pieces], 1, offsets, total)
    assert str(pieces[0]) in str(info.value) or "offset" in str(info.value)
    with pytest.raises(ValueError, match="one dtype"):
        assemble([jt.zeros((2, 3)), jt.zeros((2, 2), dtype="int32")], 1, (0, 3), 5)
    with pytest.raises(ValueError, match="dim 2"):
        assemble([jt.zeros((2, 3))], 2, (0,), 3)


def _slices_loss(x, w, overlap):
    """Every step of dim 1 read on its own (as an RNN reads its inputs), and a range over them."""
    loss = sum((x[:, t] * float(w[t])).tanh().sum() for t in range(x.shape[1]))
    return loss + (x[:, 2:5] ** 2).sum() if overlap else loss


@pytest.mark.parametrize("steps, overlap", [(2, False), (3, False), (9, False), (9, True)])
def test_gradient_through_disjoint_slices_is_one_copy_and_the_same_numbers(steps, overlap, rng, monkeypatch):
    """Three or more disjoint slices' parts are copied into place; an overlapping range is added."""
    value, w = rng.standard_normal((4, steps, 3)).astype(np.float32), rng.standard_normal(steps)
    x = jt.array(value)
    g = jt.grad(_slices_loss(x, w, overlap), x)
    assert ("assemble" in _ops(g)) == (steps >= 3)
    tx = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    _slices_loss(tx, w, overlap).backward()
    np.testing.assert_allclose(g.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    again = jt.grad(_slices_loss(x, w, overlap), x)     # the same forward graph: the gradient's recipe
    np.testing.assert_array_equal(again.numpy(), g.numpy())
    monkeypatch.setattr(assemble_module, "JOIN_BY_COPY", 10 ** 9)
    jt.clear_caches()
    summed = jt.grad(_slices_loss(x, w, overlap), x)   # the sum of pads it replaces, added in order
    assert "assemble" not in _ops(summed)
    np.testing.assert_array_equal(summed.numpy(), g.numpy())


def test_gradient_of_a_training_step_reading_slices_matches_torch(rng):
    """An embedding read a step at a time, as a seq2seq encoder does, trained for 3 SGD steps."""
    emb_np, w_np, u_np = rng.standard_normal((10, 6)), rng.standard_normal((6, 6)), rng.standard_normal((6, 6))
    ids = rng.integers(0, 10, (5, 4))
    emb, w = jt.array(emb_np, dtype="float64"), jt.array(w_np, dtype="float64")
    u, tu = jt.array(u_np, dtype="float64"), torch.tensor(u_np)
    temb, tw = torch.tensor(emb_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
    for _ in range(3):
        seq, tseq = emb[jt.array(ids)], temb[torch.tensor(ids)]
        h, th = jt.zeros((5, 6), dtype="float64"), torch.zeros(5, 6, dtype=torch.float64)
        for t in range(4):
            h, th = (seq[:, t] @ u + h @ w).tanh(), (tseq[:, t] @ tu + th @ tw).tanh()
        ge, gw = jt.grad((h * h).sum(), [emb, w])
        (th * th).sum().backward()
        assert "assemble" in _ops(ge)
        np.testing.assert_allclose(ge.numpy(), temb.grad.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gw.numpy(), tw.grad.numpy(), rtol=1e-10, atol=1e-12)
        emb, w = emb - 0.1 * ge, w - 0.1 * gw
        with torch.no_grad():
            temb -= 0.1 * temb.grad
            tw -= 0.1 * tw.grad
            temb.grad = tw.grad = None
