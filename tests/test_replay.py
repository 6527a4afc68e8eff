"""Graphs with a signature seen before run on the stored plan (``jtmini/replay.py``): hits where
only values changed, misses wherever the plan or the code could differ, and right values always."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn, replay

rng = np.random.default_rng(7)


def _reused(build_and_fetch):
    """``(value, reused)``: what ``build_and_fetch()`` returns, and whether its graph ran on a
    stored plan."""
    before = jt.stats()["plans_reused"]
    value = build_and_fetch()
    return value, jt.stats()["plans_reused"] - before


def _chain(a_np, b_np, scale):
    a, b = jt.array(a_np), jt.array(b_np)
    return (jt.relu(a * b + scale).sum(dims=1) + (a.transpose() * 2).max(dims=0)).numpy()


def _chain_ref(a_np, b_np, scale):
    return np.maximum(a_np * b_np + scale, 0).sum(1) + (a_np.T * 2).max(0)


def test_same_graph_new_values_and_constants_reuses_the_plan():
    shapes = [(9, 9)] * 2
    _chain(*(rng.standard_normal(s).astype("float32") for s in shapes), 0.5)
    for scale in (0.25, -1.5):
        a_np, b_np = (rng.standard_normal(s).astype("float32") for s in shapes)
        value, reused = _reused(lambda: _chain(a_np, b_np, scale))
        assert reused == 1
        np.testing.assert_allclose(value, _chain_ref(a_np, b_np, scale), rtol=1e-5)


def test_wiring_is_part_of_the_signature():
    """``u * u`` and ``u * a``: the same ops, shapes and leaves, wired differently."""
    a_np = rng.standard_normal((5, 6)).astype("float32")

    def square_or_not(square):
        a = jt.array(a_np)
        u = jt.exp(a)
        return (u * (u if square else a)).sum(dims=1).numpy()

    square_or_not(True)
    value, reused = _reused(lambda: square_or_not(False))
    assert reused == 0
    np.testing.assert_allclose(value, (np.exp(a_np) * a_np).sum(1), rtol=1e-5)


def test_realized_inputs_of_other_shapes_or_dtypes_miss():
    """A column slice reads rows ``x.shape[1]`` apart: same nodes, other code."""
    def first_columns(x):
        return (x[:, :3] * 2).sum(dims=0).numpy()

    first_columns(jt.array(np.ones((4, 5), "float32")))
    for x_np in (np.arange(24, dtype="float32").reshape(4, 6), np.arange(20, dtype="int32").reshape(4, 5)):
        value, reused = _reused(lambda: first_columns(jt.array(x_np)))
        assert reused == 0
        np.testing.assert_allclose(value, (x_np[:, :3] * 2).sum(0))


def test_other_targets_miss():
    x_np = rng.standard_normal((6, 4)).astype("float32")

    def pair(fetch_both):
        x = jt.array(x_np)
        y = jt.relu(x) * 3
        z = y.sum()
        jt.sync([y, z] if fetch_both else [z])
        return y, z

    pair(False)
    (y, z), reused = _reused(lambda: pair(True))
    assert reused == 0
    np.testing.assert_allclose(y.numpy(), np.maximum(x_np, 0) * 3, rtol=1e-6)
    assert np.isclose(z.item(), (np.maximum(x_np, 0) * 3).sum(), rtol=1e-5)


def test_training_steps_reuse_one_plan_and_match_planning_afresh():
    """Two copies of a small model and optimizer, one trained with the plan store emptied before
    every step: losses and parameters identical."""
    def train(clear):
        jt.sync_all()       # a step also realizes lazy Vars other tests left alive: not in its plan
        jt.seed(3)
        model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                              nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
        opt = nn.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-3)
        data = np.random.default_rng(0)
        losses, reused = [], 0
        for step in range(5):
            if clear:
                replay.clear()
            opt.lr = 0.1 / (step + 1)
            x = jt.array(data.standard_normal((8, 1, 6, 6)).astype("float32"))
            y = jt.array(data.integers(0, 3, 8).astype("int32"))
            loss, n = _reused(lambda: _step(model, opt, x, y))
            losses.append(loss)
            reused += n
        return losses, [p.numpy() for p in model.parameters()], reused

    def _step(model, opt, x, y):
        loss = nn.cross_entropy_loss(model(x), y)
        opt.step(loss)
        return loss.item()

    losses, params, reused = train(clear=False)
    fresh_losses, fresh_params, fresh_reused = train(clear=True)
    assert reused >= 3 and fresh_reused == 0
    assert losses == fresh_losses
    for p, q in zip(params, fresh_params):
        np.testing.assert_array_equal(p, q)


@pytest.mark.parametrize("capacity", [1, 2])
def test_the_store_is_bounded(monkeypatch, capacity):
    monkeypatch.setattr(jt.replay, "CAPACITY", capacity)
    replay.clear()
    for n in range(2, 6):
        (jt.ones((n, 2)) * jt.ones((n, 2)) + 1).sum().sync()
    assert len(replay._cache) == capacity
