"""LayerNorm's hand-written kernels (``ops/layer_norm.py``): values, first and second gradients
against PyTorch, on contiguous and transposed inputs, and each op's own gradient."""
import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini import nn
from jtmini.ops import layer_norm as ln

TOL = {"float32": dict(rtol=2e-5, atol=2e-5), "float64": dict(rtol=1e-10, atol=1e-11)}


def _layouts(x_np):
    """The same values as a contiguous Var and as a transposed view of another buffer."""
    return [jt.array(x_np), jt.array(np.ascontiguousarray(x_np.swapaxes(0, 1))).transpose(1, 0, 2)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", [0, 1])
def test_layer_norm_matches_pytorch_values_and_gradients(dtype, layout, rng):
    x_np = (rng.standard_normal((4, 6, 24)) * 3 + 5).astype(dtype)
    w_np, b_np, up = (rng.standard_normal(s).astype(dtype) for s in (24, 24, (4, 6, 24)))
    x = _layouts(x_np)[layout]
    w, b = jt.array(w_np), jt.array(b_np)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x_np, w_np, b_np))
    y, ty = nn.layer_norm(x, (24,), w, b), torch.nn.functional.layer_norm(tx, (24,), tw, tb)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **TOL[dtype])
    grads = jt.grad((y * jt.array(up)).sum(), [x, w, b])
    tgrads = torch.autograd.grad((ty * torch.tensor(up)).sum(), [tx, tw, tb], create_graph=True)
    for g, tg in zip(grads, tgrads):
        np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), **TOL[dtype])
    second = jt.grad((grads[0] * grads[0]).sum(), x)
    tsecond, = torch.autograd.grad((tgrads[0] * tgrads[0]).sum(), tx)
    np.testing.assert_allclose(second.numpy(), tsecond.numpy(), **TOL[dtype])


def test_each_op_gradient_is_numerically_right(rng):
    x_np, g_np = rng.standard_normal((3, 7)), rng.standard_normal((3, 7))
    weights = rng.standard_normal((2, 3))

    def stats(x):
        return (ln.layer_norm_stats(x, 1e-3) * jt.array(weights)).sum()

    def sums(g, x):
        return (ln.layer_norm_grad_sums(g, x, ln.layer_norm_stats(x, 1e-3)) * jt.array(weights)).sum()
    for fn, args in ((stats, [x_np]), (sums, [g_np, x_np])):
        vars_ = [jt.array(a) for a in args]
        analytic = jt.grad(fn(*vars_), vars_)
        for k, a in enumerate(args):
            numeric = np.zeros_like(a)
            for idx in np.ndindex(a.shape):
                bumped = [arr.copy() for arr in args]
                bumped[k][idx] += 1e-6
                lowered = [arr.copy() for arr in args]
                lowered[k][idx] -= 1e-6
                numeric[idx] = (fn(*map(jt.array, bumped)).item() - fn(*map(jt.array, lowered)).item()) / 2e-6
            np.testing.assert_allclose(analytic[k].numpy(), numeric, rtol=1e-6, atol=1e-7)


def test_group_norm_uses_the_same_kernels(rng):
    x_np = rng.standard_normal((2, 6, 3, 3))
    y = nn.group_norm(jt.array(x_np), 3)
    np.testing.assert_allclose(y.numpy(), torch.nn.functional.group_norm(torch.tensor(x_np), 3).numpy(),
                               rtol=1e-12, atol=1e-12)


def test_a_layer_is_two_library_calls_and_few_nodes(rng):
    x = jt.array(rng.standard_normal((8, 32)).astype(np.float32))
    layer = nn.LayerNorm(32)
    jt.reset_stats()
    jt.grad(layer(x).sum(), [x, layer.weight])[0].sync()
    assert jt.stats()["library_calls"] == 2


def test_bad_input_names_the_shapes():
    with pytest.raises(ValueError, match=r"layer_norm_stats: x must be a 2-D float.*\(3,\)"):
        ln.layer_norm_stats(jt.ones(3), 1e-5)
    with pytest.raises(ValueError, match="per_row"):
        ln.per_row(jt.ones(2, 3), 2, (3, 4))


def test_a_finished_layer_norm_leaves_no_pending_root_behind(rng):
    """The gradient rule must not hold its output (a reference cycle): an unconsumed live xhat is
    a pending root, and the next optimizer step computed the old forward again to get it."""
    import gc
    from jtmini.var import pending_roots

    def step():
        x = jt.array(rng.standard_normal((4, 8)))
        y = nn.layer_norm(x, (8,)) * 2.0
        jt.grad((y * y).sum(), x).sync()
    gc_was_on = gc.isenabled()
    gc.disable()                    # the cycle would survive until a collection
    try:
        before = {id(v) for v in pending_roots()}
        step()
        left = [v for v in pending_roots() if id(v) not in before]
    finally:
        if gc_was_on:
            gc.enable()
    assert left == [], [(v.op, v.shape) for v in left]


@pytest.mark.parametrize("shape,normalized", [((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), (4, 5)), ((3, 2, 1, 6), (6,))])
def test_rows_over_several_leading_dims_match_pytorch(shape, normalized, rng):
    """Rows numbered by 2 or 3 leading dims (``per_row``'s ``lead``), read through a transposed
    view: values, the three gradients and the second derivative against PyTorch."""
    x_np = (rng.standard_normal(shape) * 2 + 1).astype(np.float64)
    w_np, b_np = rng.standard_normal(normalized), rng.standard_normal(normalized)
    up = rng.standard_normal(shape)
    x = jt.array(np.ascontiguousarray(x_np.swapaxes(0, 1))).transpose(1, 0, 2, 3)
    w, b = jt.array(w_np), jt.array(b_np)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x_np, w_np, b_np))
    y, ty = nn.layer_norm(x, normalized, w, b), torch.nn.functional.layer_norm(tx, normalized, tw, tb)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **TOL["float64"])
    grads = jt.grad((y * jt.array(up)).sum(), [x, w, b])
    tgrads = torch.autograd.grad((ty * torch.tensor(up)).sum(), [tx, tw, tb], create_graph=True)
    for g, tg in zip(grads, tgrads):
        np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), **TOL["float64"])
    second = jt.grad((grads[0] * grads[0]).sum(), x)
    tsecond, = torch.autograd.grad((tgrads[0] * tgrads[0]).sum(), tx)
    np.testing.assert_allclose(second.numpy(), tsecond.numpy(), **TOL["float64"])


def test_broadcast_input_rows(rng):
    """A row broadcast over the leading dims: its gradient sums over the copies."""
    row_np, w_np = rng.standard_normal((1, 1, 8)), rng.standard_normal(8)
    row, w = jt.array(row_np), jt.array(w_np)
    trow, tw = torch.tensor(row_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
    up = rng.standard_normal((3, 4, 8))
    y = nn.layer_norm(row.broadcast_to((3, 4, 8)) * jt.array(up), (8,), w)
    ty = torch.nn.functional.layer_norm(trow.expand(3, 4, 8) * torch.tensor(up), (8,), tw)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **TOL["float64"])
    g = jt.grad((y * y).sum(), [row, w])
    tg = torch.autograd.grad((ty * ty).sum(), [trow, tw])
    for a, b in zip(g, tg):
        np.testing.assert_allclose(a.numpy(), b.numpy(), **TOL["float64"])


def test_scale_and_shift_merge_into_the_standardization(rng):
    """A (N, T, D) LayerNorm before a product, as in a transformer: xhat and y = xhat * w + b
    are one kernel (the scale-and-shift map reads xhat at its own index, no reshape between), so
    forward and backward take 5 generated kernels (6 when the rows were reshaped to 2-D)."""
    x = jt.array(rng.standard_normal((4, 6, 32)).astype(np.float32))
    layer, w = nn.LayerNorm(32), jt.array(rng.standard_normal((32, 8)).astype(np.float32))
    jt.reset_stats()
    jt.sync(jt.grad((layer(x) @ w).sum(), [x, layer.weight, layer.bias]))
    assert jt.stats()["kernels_run"] <= 5, jt.stats()


def test_per_row_refuses_a_table_that_does_not_match_the_leading_dims():
    with pytest.raises(ValueError, match=r"per_row: cannot spread row 0 of a \(2, 6\) table over \(2, 4, 5\) "
                                         r"\(2 leading dims as its rows\)"):
        ln.per_row(jt.ones(2, 6), 0, (2, 4, 5), lead=2)
