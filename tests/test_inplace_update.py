"""An optimizer step writes new parameter and state values over the old buffers when nothing can
read the old values any more (``runtime/cpu_inplace.py``): the same numbers as new buffers give,
no array or Var the user holds changed, and a graph that still names an old value raises when
computed, instead of reading the new one."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn
from jtmini.runtime import cpu_inplace, cpu_table

rng = np.random.default_rng(5)
BATCHES = [(rng.standard_normal((16, 8)).astype("float32"), rng.integers(0, 4, 16).astype("int32"))
           for _ in range(4)]


@pytest.fixture
def grants(monkeypatch):
    """How many buffers each hit's ``grant`` let a new value take."""
    counts, grant = [], cpu_inplace.grant

    def spied(donations, vars_, stored):
        granted = grant(donations, vars_, stored)
        counts.append(len(granted.pairs))
        return granted
    monkeypatch.setattr(cpu_inplace, "grant", spied)
    return counts


def _model(momentum=0.9, nesterov=False, decay=0.0):
    jt.sync_all()           # a lazy random Var an earlier test left would draw after the seed
    jt.seed(4)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, nn.SGD(model.parameters(), 0.05, momentum=momentum, nesterov=nesterov, weight_decay=decay)


def _train(steps=8, **kw):
    model, opt = _model(**kw)
    losses = []
    for n in range(steps):
        x, y = BATCHES[n % len(BATCHES)]
        loss = nn.cross_entropy_loss(model(jt.array(x)), jt.array(y))
        opt.step(loss)
        losses.append(loss.item())
    return losses, [p.numpy() for p in model.parameters()]


@pytest.mark.parametrize("table", [True, False], ids=["launch table", "step by step"])
@pytest.mark.parametrize("kw", [{}, {"nesterov": True, "decay": 1e-3}, {"momentum": 0.0}])
def test_same_numbers_as_new_buffers(grants, monkeypatch, kw, table):
    monkeypatch.setattr(cpu_table, "enabled", table)
    losses, params = _train(**kw)
    assert sum(grants) > 0, "no step updated in place"
    with jt.flag_scope(inplace_update=False):
        grants.clear()
        want_losses, want_params = _train(**kw)
    assert sum(grants) == 0
    assert losses == want_losses
    for got, want in zip(params, want_params):
        np.testing.assert_array_equal(got, want)


def test_batch_norm_statistics_and_weights_same_as_new_buffers(grants):
    """A conv net with BatchNorm: its running statistics (rebound before the step computes them)
    and weights end equal, and its eval forward after training too."""
    def train():
        jt.seed(1)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                              nn.Linear(8 * 6 * 6, 4))
        opt = nn.SGD(model.parameters(), 0.05, momentum=0.9, weight_decay=1e-4)
        data = np.random.default_rng(2)
        for _ in range(6):
            x = jt.array(data.standard_normal((4, 3, 6, 6)).astype("float32"))
            opt.step(nn.cross_entropy_loss(model(x), jt.array(data.integers(0, 4, 4).astype("int32"))))
        model.eval()
        out = model(jt.array(np.ones((2, 3, 6, 6), "float32"))).numpy()
        return out, [np.array(v) for v in model.state_dict().values()]
    out, state = train()
    assert sum(grants) > 0
    with jt.flag_scope(inplace_update=False):
        want_out, want_state = train()
    np.testing.assert_array_equal(out, want_out)
    for got, want in zip(state, want_state):
        np.testing.assert_array_equal(got, want)


def _warm(model, opt, steps=4):
    for n in range(steps):
        x, y = BATCHES[n % len(BATCHES)]
        opt.step(nn.cross_entropy_loss(model(jt.array(x)), jt.array(y)))


@pytest.mark.parametrize("table", [True, False], ids=["launch table", "step by step"])
@pytest.mark.parametrize("fused", [False, True], ids=["buffered", "fused"])
def test_held_outputs_keep_the_values_the_step_computed(grants, monkeypatch, table, fused):
    """The user's ``outputs``, held through the step, keeps the value the step computed (as in
    Jittor; it is not computed again), so the weights still go in place. A held Var the step
    fuses into a kernel (``scaled``) has no buffer to keep: the weights it reads keep theirs, the
    momentum buffers still go in place, and it is computed later from the old weights."""
    monkeypatch.setattr(cpu_table, "enabled", table)
    model, opt = _model()
    for n in range(6):                  # the first steps plan the graph: no program runs them
        x, y = BATCHES[n % len(BATCHES)]
        before = [p.numpy() for p in model.parameters()]
        grants.clear()
        outputs = model(jt.array(x))
        scaled = outputs * 3
        opt.step(nn.cross_entropy_loss(outputs, jt.array(y)) + (scaled.mean() * 0 if fused else 0))
        want = np.maximum(x @ before[0].T + before[1], 0) @ before[2].T + before[3]
        if n >= 3:
            assert grants == [4 if fused else 8] and outputs.is_realized() != fused
        np.testing.assert_allclose(outputs.numpy(), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(scaled.numpy(), want * 3, rtol=1e-5, atol=1e-5)


def test_arrays_handed_out_keep_their_values(grants):
    model, opt = _model()
    _warm(model, opt)
    weight = model[0].weight
    handed, copy = weight.data, weight.numpy()
    x, y = BATCHES[1]
    opt.step(nn.cross_entropy_loss(model(jt.array(x)), jt.array(y)))
    np.testing.assert_array_equal(handed, copy)
    assert not np.array_equal(weight.numpy(), copy)


def test_a_var_read_outside_the_step_keeps_the_old_value(grants):
    model, opt = _model()
    _warm(model, opt)
    weight = model[0].weight
    twice = weight * 2                  # built before the step, fetched after it
    want = weight.numpy() * 2
    x, y = BATCHES[2]
    opt.step(nn.cross_entropy_loss(model(jt.array(x)), jt.array(y)))
    np.testing.assert_array_equal(twice.numpy(), want)


def test_a_graph_naming_an_old_value_raises():
    """As PyTorch refuses a backward through a tensor an optimizer changed in place: the kept
    ``loss``'s gradient after the step needs the weights before it."""
    model, opt = _model()
    _warm(model, opt)
    x, y = BATCHES[3]
    images = jt.array(x)
    loss = nn.cross_entropy_loss(model(images), jt.array(y))
    opt.step(loss)
    with pytest.raises(RuntimeError, match=r"old value of a parameter \(shape \((4, 32|32, 8)\), float32\)"):
        jt.grad(loss, images).numpy()


def test_the_flag_off_keeps_old_values():
    model, opt = _model()
    _warm(model, opt)
    x, y = BATCHES[3]
    images = jt.array(x)
    with jt.flag_scope(inplace_update=False):
        loss = nn.cross_entropy_loss(model(images), jt.array(y))
        want = jt.grad(loss, images).numpy()
        opt.step(loss)
        np.testing.assert_array_equal(jt.grad(loss, images).numpy(), want)


class _LoopSGD(jt.optim.Optimizer):
    """Jittor's custom optimizer idiom: its loop variable still holds the last gradient, an
    unrealized Var computed from every parameter, while ``post_step`` computes the step."""
    def step(self, loss=None):
        self.pre_step(loss)
        for pg in self.param_groups:
            for p, g in zip(pg["params"], pg["grads"]):
                p.update(p - g * pg.get("lr", self.lr))
        self.post_step()


class _ComprehensionSGD(jt.optim.Optimizer):
    """The same update, with no name left holding a gradient."""
    def step(self, loss=None):
        self.pre_step(loss)
        for pg in self.param_groups:
            [p.update(p - g * pg.get("lr", self.lr)) for p, g in zip(pg["params"], pg["grads"])]
        self.post_step()


@pytest.mark.parametrize("kind, in_place", [(_LoopSGD, False), (_ComprehensionSGD, True)])
def test_custom_optimizers_updating_with_update(grants, kind, in_place):
    """``p.update(p - lr * g)`` then ``post_step``: the old values, held by the graph only, are
    written over unless a Var computed from them is held; the numbers are those of new buffers."""
    def train():
        jt.seed(4)
        model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
        _warm(model, kind(model.parameters(), 0.1), steps=6)
        return [p.numpy() for p in model.parameters()]
    got = train()
    assert (sum(grants) > 0) == in_place
    with jt.flag_scope(inplace_update=False):
        want = train()
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_leaf_the_user_keeps_is_never_written_over(grants):
    """A gradient of the same shape as a leaf it reads elementwise keeps its own buffer."""
    value = rng.standard_normal((6, 5)).astype("float32")
    x = jt.array(value)
    for _ in range(5):
        g = jt.grad((x * x).sum(), x)
        np.testing.assert_array_equal(g.numpy(), 2 * value)
        np.testing.assert_array_equal(x.numpy(), value)
