"""In-place updates outside an optimizer (Jittor's README loop ``p -= g * lr``): computed at the
next sync, so no step recomputes earlier ones; their history dropped once no held Var could take a
gradient through it, so memory stays flat; and kept while one could, so gradients stay right."""
import gc

import numpy as np
import pytest

import jtmini as jt
from jtmini import counters, nn

torch = pytest.importorskip("torch")


def live_vars():
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is jt.Var)


def readme_loop(steps, lr=0.1, seed=0):
    """Jittor's README training loop, with weights copied to a torch twin updated the same way."""
    rng = np.random.default_rng(seed)
    l1, l2 = nn.Linear(1, 10), nn.Linear(10, 1)
    ps = [l1.weight, l1.bias, l2.weight, l2.bias]
    tps = [torch.tensor(p.numpy(), requires_grad=True) for p in ps]
    losses, kernels, lives = [], [], []
    for _ in range(steps):
        x = rng.random((50, 1), dtype=np.float32)
        y = x * x
        before = counters.stats()["kernels_run"]
        loss = ((l2(l1(jt.array(x)).relu()) - jt.array(y)).sqr()).mean()
        gs = jt.grad(loss, ps)
        for p, g in zip(ps, gs):
            p -= g * lr
        losses.append(loss.item())
        kernels.append(counters.stats()["kernels_run"] - before)
        lives.append(live_vars())
        tx = torch.tensor(x)
        tloss = ((torch.relu(tx @ tps[0].T + tps[1]) @ tps[2].T + tps[3] - torch.tensor(y)) ** 2).mean()
        with torch.no_grad():
            for tp, tg in zip(tps, torch.autograd.grad(tloss, tps)):
                tp -= tg * lr
        assert losses[-1] == pytest.approx(tloss.item(), rel=1e-4)
    return ps, tps, kernels, lives


def test_readme_loop_matches_torch_with_flat_work_and_memory():
    ps, tps, kernels, lives = readme_loop(30)
    for p, tp in zip(ps, tps):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-4, atol=1e-6)
    assert max(kernels[5:]) == min(kernels[5:]), kernels        # no step recomputes earlier ones
    assert max(lives[5:]) == min(lives[5:]), lives              # no history piles up


def test_an_update_is_stored_when_a_value_that_needs_it_is_computed():
    w = jt.array(np.ones(3, np.float32))
    w -= jt.array(np.arange(3, dtype=np.float32))
    jt.array(np.zeros(2, np.float32)).sum().item()              # an unrelated value: w waits
    assert not w.is_realized()
    assert (w * 2).sum().item() == 0.0                          # computed on the way, so stored
    assert w.is_realized()
    np.testing.assert_array_equal(w.numpy(), [1, 0, -1])


def test_history_stays_while_a_held_var_upstream_can_take_a_gradient():
    x = jt.array(np.array([1.0, 2.0], np.float32))
    y = jt.array(np.array([3.0, 5.0], np.float32))
    a = x * 2
    a += y * x
    assert a.numpy().tolist() == [5.0, 14.0]                    # computed, history kept: x and y held
    gx, gy = jt.grad(a.sum(), [x, y])
    np.testing.assert_allclose(gx.numpy(), [5.0, 7.0])
    np.testing.assert_allclose(gy.numpy(), [1.0, 2.0])


def test_setitem_gradient_survives_a_sync_in_between():
    v = jt.array(np.array([4.0], np.float32))
    z = jt.zeros(3)
    z[1:2] = v * 3
    loss = (z * z).sum()
    assert loss.item() == 144.0
    (gv,) = jt.grad(loss, [v])
    np.testing.assert_allclose(gv.numpy(), [72.0])


def test_a_held_learning_rate_keeps_the_update_differentiable():
    lr = jt.array(np.float32(0.5))
    w = jt.array(np.array([1.0, -2.0], np.float32))
    (g,) = jt.grad((w * w).sum(), [w])
    w2 = w.clone()
    w2 -= g * lr
    w2.sync()
    (glr,) = jt.grad((w2 * w2).sum(), [lr])                     # d/dlr sum((w - lr g)^2) = -2 (w - lr g) . g
    expected = -2 * ((w.numpy() - 0.5 * g.numpy()) * g.numpy()).sum()
    np.testing.assert_allclose(glr.numpy(), expected, rtol=1e-6)


def test_a_dead_vars_note_under_a_reused_id_changes_nothing():
    """``var.rebound`` is keyed by id, and a dead Var's entry stays until the next realize: a new
    Var with its id must neither have its snapshot noted as a pending update nor take the dead
    entry's place in the order (the char transformer planned some steps anew: its targets came in
    another order)."""
    import weakref
    import importlib
    var = importlib.import_module("jtmini.var")      # jt.var is the function
    x = jt.array(np.ones(3, np.float32)) * 2          # pending
    y = jt.array(np.ones(3, np.float32)) * 3
    reader = x + 1                                     # keeps the snapshot of x's old node
    dead = jt.array(np.zeros(1, np.float32))
    stale = weakref.ref(dead)
    del dead
    assert stale() is None
    var.rebound[id(x)] = stale                         # as if x reused a dead noted Var's id
    y *= 2                                             # noted after the stale entry
    x *= 5
    old = reader.inputs[0]
    assert id(old) not in var.rebound                  # a snapshot under a dead note: not an update
    assert list(var.rebound)[-2:] == [id(y), id(x)]    # in the order they were rebound
    np.testing.assert_array_equal(x.numpy(), [10, 10, 10])
    np.testing.assert_array_equal(reader.numpy(), [3, 3, 3])
