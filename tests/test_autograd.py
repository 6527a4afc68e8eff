"""jt.grad: list and single targets, broadcasting, stop_grad/detach, unused targets, accumulation
over several uses, intermediate targets, and values rebound by assign after a graph was built."""
import numpy as np
import pytest
import torch

import jtmini as jt
from conftest import assert_var, check_grad, graph_nodes


def test_single_and_list_targets(rng):
    value = rng.standard_normal((3, 4)).astype(np.float32)
    x, y = jt.array(value), jt.array(value * 2)
    loss = (x * x * y).sum()
    g = jt.grad(loss, x)
    assert isinstance(g, jt.Var)
    assert_var(g, 2 * value * (value * 2), rtol=1e-6)
    gs = jt.grad(loss, [x, y])
    assert isinstance(gs, list) and len(gs) == 2
    assert_var(gs[0], 2 * value * (value * 2), rtol=1e-6)
    assert_var(gs[1], value * value, rtol=1e-6)
    gt = jt.grad(loss, (y,))
    assert isinstance(gt, list) and len(gt) == 1
    assert_var(gt[0], value * value, rtol=1e-6)


def test_gradients_are_lazy_and_sync_together(rng):
    x = jt.array(rng.standard_normal(5).astype(np.float32))
    gs = jt.grad((x.exp() * x).sum(), [x, x])
    assert not gs[0].is_realized()
    jt.sync(gs)
    assert gs[0].is_realized() and gs[1].is_realized()
    expected = (np.exp(x.numpy().astype(np.float64)) * (x.numpy() + 1)).astype(np.float32)
    assert_var(gs[0], expected)
    assert_var(gs[1], expected)


def test_broadcast_inputs_get_gradients_of_their_own_shape(rng):
    a, b, c = rng.standard_normal((3, 1)), rng.standard_normal((4,)), rng.standard_normal(())
    grads = check_grad(lambda a, b, c: (a * b + c) * b, lambda a, b, c: (a * b + c) * b, [a, b, c],
                       rng=rng)
    assert [g.shape for g in grads] == [(3, 1), (4,), ()]
    check_grad(lambda a, b: a - b, lambda a, b: a - b, [rng.standard_normal((2, 1, 3)), rng.standard_normal((4, 1))],
               ["transposed", "sliced"], rng=rng)


def test_non_scalar_loss_is_summed(rng):
    value = rng.standard_normal((2, 3)).astype(np.float32)
    x = jt.array(value)
    assert_var(jt.grad(x * x, x), 2 * value)


def test_several_uses_accumulate(rng):
    check_grad(lambda x: x * x + x.exp() * x - x.sin() / (x * x + 1),
               lambda x: x * x + x.exp() * x - x.sin() / (x * x + 1),
               [rng.standard_normal((3, 4))], ["sliced"], rng=rng)


def test_stop_grad_blocks_an_intermediate(rng):
    value = rng.standard_normal(4).astype(np.float32)
    x = jt.array(value)
    y = x * x
    y.stop_grad()
    assert_var(jt.grad((y * x).sum(), x), value * value)      # only the direct path
    z = x * 3
    z.requires_grad = False
    assert_var(jt.grad((z + x).sum(), x), np.ones(4, np.float32))


def test_a_stop_grad_target_gets_zeros(rng):
    value = rng.standard_normal(4).astype(np.float32)
    x, w = jt.array(value), jt.array(value).stop_grad()
    gx, gw = jt.grad((x * w * 3).sum(), [x, w])
    assert_var(gx, value * 3)
    assert_var(gw, np.zeros(4, np.float32))


def test_detach_blocks(rng):
    value = rng.standard_normal(4).astype(np.float32)
    x = jt.array(value)
    assert_var(jt.grad(((x * 2).detach() * x).sum(), x), value * 2)
    assert_var(jt.grad(x.detach().sum() * x.sum(), x), np.full(4, value.sum(), np.float32), rtol=1e-5)


def test_unrelated_targets_get_zeros(rng):
    x = jt.array(rng.standard_normal((2, 3)).astype(np.float32))
    unused = jt.array(rng.standard_normal((4,)))                      # float64
    blocked = jt.array(rng.standard_normal((2, 3)).astype(np.float32))
    ints = jt.array(np.arange(6, dtype=np.int32).reshape(2, 3))
    loss = (x * blocked.detach() + ints).sum()
    g_x, g_unused, g_blocked = jt.grad(loss, [x, unused, blocked])
    assert_var(g_x, blocked.numpy())
    assert_var(g_unused, np.zeros(4))
    assert_var(g_blocked, np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="target 1 must be a float Var, got dtype int32"):
        jt.grad(loss, [x, ints])          # as Jittor: integers cannot be differentiated
    assert_var(jt.grad(loss, jt.zeros(2)), np.zeros(2, np.float32))


def test_grad_of_an_intermediate_and_of_the_loss(rng):
    value = rng.standard_normal(3).astype(np.float32)
    x = jt.array(value)
    y = x * 2
    loss = (y * y).sum()
    assert_var(jt.grad(loss, y), 4 * value)
    assert_var(jt.grad(loss, loss), np.array(1, np.float32))
    g1, g2 = jt.grad(loss, x), jt.grad(loss, x)                  # the graph is kept: grad again
    assert_var(g1, 8 * value)
    assert_var(g2, 8 * value)


def test_mlp_against_torch(rng):
    x = rng.standard_normal((8, 5))
    w1, b1 = rng.standard_normal((5, 6)) * 0.5, rng.standard_normal(6) * 0.1
    w2 = rng.standard_normal((6, 3)) * 0.5
    labels = np.eye(3)[rng.integers(0, 3, 8)]

    def jt_net(x, w1, b1, w2):
        h = (x @ w1 + b1).relu()
        logits = h @ w2
        m = logits.max(1, keepdims=True)
        logp = logits - m - (logits - m).exp().sum(1, keepdims=True).log()
        return -(logp * jt.array(labels.astype(np.float32))).sum(1).mean()

    def torch_net(x, w1, b1, w2):
        logp = torch.log_softmax((x @ w1 + b1).relu() @ w2, 1)
        return -(logp * torch.tensor(labels)).sum(1).mean()
    check_grad(jt_net, torch_net, [x, w1, b1, w2], ["contig", "transposed", "contig", "sliced"], rng=rng)


def test_assign_keeps_old_value_for_old_consumers(rng):
    value = rng.standard_normal(3).astype(np.float32)
    w = jt.array(value)
    b = w * 2
    w.assign(w + 1)
    assert_var(b, value * 2)
    assert_var(w, value + 1)
    c = w * 2                                               # built after: sees the new value
    assert_var(c, (value + 1) * 2)
    assert_var(jt.grad((w * w).sum(), w), 2 * (value + 1))


def test_assign_of_realized_and_lazy_values(rng):
    value = rng.standard_normal(3).astype(np.float32)
    w = jt.array(value)
    lazy_before = w.exp()
    w.update(w * 3)                                         # lazy new value
    realized_before = (w + 0).sync()
    w.assign(jt.array(np.ones(3, np.float32)))              # realized new value
    assert_var(lazy_before, np.exp(value))
    assert_var(realized_before, value * 3)
    assert_var(w, np.ones(3, np.float32))
    assert w.dtype == "float32" and w.shape == (3,)


def test_optimizer_style_loop_converges():
    """w <- w - lr * grad, several times: each step's graph uses the previous value."""
    target = np.array([1.0, -2.0, 0.5], np.float32)
    w = jt.zeros(3)
    for _ in range(50):
        loss = ((w - jt.array(target)) ** 2).sum()
        w.assign(w - 0.1 * jt.grad(loss, w))
    assert_var(w, target, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradient_dtype_follows_the_target(dtype, rng):
    x = jt.array(rng.standard_normal(3).astype(dtype))
    g = jt.grad((x.float32() * 2).sum(), x)
    assert_var(g, np.full(3, 2, dtype))


def test_non_differentiable_ops_pass_no_gradient(rng):
    value = rng.standard_normal((3, 4)).astype(np.float32)
    x = jt.array(value)
    idx, top = x.argmax(1)
    pieces = [(x > 0).float32(), (x <= x * 2).float32(), ((x > 0) & (x < 1)).float32(), (~(x > 0)).float32(),
              x.sign(), x.floor(), x.ceil(), x.round(), x // 0.7, idx.float32(), jt.where(x > 0, 1.0, 2.0),
              x.int32().float32()]
    loss = sum((p * float(k + 1)).sum() for k, p in enumerate(pieces))
    assert_var(jt.grad(loss, x), np.zeros((3, 4), np.float32))
    assert_var(jt.grad(loss + top.sum(), x), (value == value.max(1, keepdims=True)).astype(np.float32))


@pytest.mark.parametrize("op", ["+=", "-=", "*=", "/="])
def test_in_place_operators_rebind_the_handle(op, rng):
    a_np, b_np = rng.standard_normal(4).astype("float32"), rng.uniform(1, 2, 4).astype("float32")
    w = jt.array(a_np)
    v = w * 3
    alias, before = v, v + 0            # an alias follows the handle; a consumer built earlier does not
    exec(f"v {op} jt.array(b_np) * v")
    want = {"+=": 3 * a_np + b_np * 3 * a_np, "-=": 3 * a_np - b_np * 3 * a_np,
            "*=": 3 * a_np * b_np * 3 * a_np, "/=": 3 * a_np / (b_np * 3 * a_np)}[op]
    assert alias is v
    np.testing.assert_allclose(v.numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(before.numpy(), 3 * a_np, rtol=1e-6)
    # the gradient flows through the rebound handle, as through the out-of-place expression
    ref_w = torch.tensor(a_np, requires_grad=True)
    ref_v, ref_b = ref_w * 3, torch.tensor(b_np)
    ref = {"+=": ref_v + ref_b * ref_v, "-=": ref_v - ref_b * ref_v, "*=": ref_v * (ref_b * ref_v),
           "/=": ref_v / (ref_b * ref_v)}[op]
    ref.sum().backward()
    np.testing.assert_allclose(jt.grad(v.sum(), [w])[0].numpy(), ref_w.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_in_place_takes_the_results_dtype_and_shape_as_jittor():
    """Jittor's ``a += b`` rebinds ``a`` to the result (APF-GAN sums float32 losses into a
    ``jt.float16(0)``, which becomes float32)."""
    counts = jt.array(np.array([1, 2], "int32"))
    counts += 1
    assert counts.dtype == "int32" and counts.numpy().tolist() == [2, 3]
    total = jt.float16(0)
    total += jt.float32(1.0001)
    assert total.dtype == "float32" and abs(total.item() - 1.0001) < 1e-6
    small = jt.int8(1)
    small += jt.int32(300)
    assert small.dtype == "int32" and small.item() == 301
    zeros = jt.zeros(2)
    zeros += jt.ones((3, 2))
    assert zeros.shape == (3, 2) and zeros.numpy().sum() == 6
    w = jt.array([2.0])
    x = jt.zeros(1)
    x += w * 3                          # not stop_grad: the gradient reaches w
    assert jt.grad(x.sum(), w).item() == 3.0


def test_stop_grad_state_updated_in_place_keeps_no_history():
    """Jittor's guide updates BatchNorm statistics with ``self.running_mean += ...`` every step:
    the stop_grad handle stays the same Var and forgets each step's graph once computed."""
    from jtmini import nn

    class DocBatchNorm(jt.Module):
        def __init__(self):
            self.running_mean = jt.zeros(4).stop_grad()

        def execute(self, x):
            mean = jt.mean(x, dims=[0, 2, 3], keepdims=1)
            self.running_mean += (mean.sum([0, 2, 3]) - self.running_mean) * 0.1
            return x - mean

    net = nn.Sequential(nn.Conv2d(1, 4, 3), DocBatchNorm())
    stat = net[1].running_mean
    opt = nn.SGD(net.parameters(), 0.1)
    for _ in range(5):
        opt.step((net(jt.randn(2, 1, 5, 5)) ** 2).mean())
    assert net[1].running_mean is stat and stat.is_stop_grad()
    assert len(graph_nodes(stat)) == 1
    assert np.abs(stat.numpy()).sum() > 0


def test_custom_grad_replaces_the_gradient_of_the_ops_that_built_a_var(rng):
    from jtmini.autograd import custom_grad
    value = rng.standard_normal(5).astype(np.float32)
    x, w = jt.array(value), jt.array(value + 1)
    # a rule that is not the ops' derivative shows which one backward used
    y = custom_grad((x * w).exp(), [x, w], lambda d: [d * 5, None])
    gx, gw = jt.grad((y * 2).sum(), [x, w])
    assert_var(gx, np.full(5, 10, np.float32))
    assert_var(gw, np.zeros(5, np.float32))           # None: no gradient, as for any op
    assert_var(y, np.exp(value * (value + 1)), rtol=1e-6)


def test_custom_grad_rules_are_differentiable_and_survive_rebinding(rng):
    from jtmini.autograd import custom_grad
    value = rng.standard_normal(4).astype(np.float32)
    x = jt.array(value)
    cube = custom_grad(x * x * x, [x], lambda d: [d * 3 * x * x])
    g = jt.grad(cube.sum(), x)
    assert_var(jt.grad(g.sum(), x), 6 * value, rtol=1e-6)     # second derivative through the rule
    doubled = cube * 2
    cube.assign(jt.zeros(4))            # the handle moves on; `doubled` keeps the old node and its rule
    assert_var(jt.grad(doubled.sum(), x), 6 * value * value, rtol=1e-6)
    assert_var(jt.grad(cube.sum(), x), np.zeros(4, np.float32))


@pytest.mark.parametrize("fn", ["exp", "tanh", "sigmoid", "erf"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_max_of_a_recomputed_value_routes_its_gradient_after_the_value_was_fetched(fn, dtype, rng):
    # y computed first, by its own kernel; the backward then recomputed f(x) in another kernel,
    # where libmvec's vector form and libm's scalar one differ in a last bit: no element matched
    # y's winners, and 0 / 0 made 84 of 148 gradients NaN
    value = rng.standard_normal((4, 37)).astype(dtype)
    weights = rng.standard_normal(37).astype(dtype)
    x = jt.array(value)
    y = getattr(x * 0.7, fn)().max(0)
    z = getattr(x * 0.7, fn)().min(1)
    gx = jt.grad((y * jt.array(weights)).sum() + z.sum(), x)
    y.numpy(), z.numpy()
    tx = torch.tensor(value, requires_grad=True)
    ((getattr(torch, fn)(tx * 0.7).amax(0) * torch.tensor(weights)).sum()
     + getattr(torch, fn)(tx * 0.7).amin(1).sum()).backward()
    assert_var(gx, tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_a_scatter_max_of_a_recomputed_value_routes_its_gradient(rng):
    value = rng.standard_normal((6, 33)).astype(np.float32)
    x = jt.array(value)
    e = (x * 0.7).exp()
    y = e.reindex_reduce("maximum", [3, 33], ["i0 / 2", "i1"])      # rows 2k and 2k+1 into row k
    gx = jt.grad(y.sum(), x)
    y.numpy()
    e_np = np.exp(value * np.float32(0.7))
    winners = e_np == np.repeat(e_np.reshape(3, 2, 33).max(1), 2, axis=0)
    assert_var(gx, winners * e_np * np.float32(0.7), rtol=1e-5)
