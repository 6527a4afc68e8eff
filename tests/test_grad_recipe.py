"""``jt.grad`` rebuilds the backward graph of a forward graph met before from its recipe
(``jtmini/grad_recipe.py``): the same nodes and values as the gradient rules give, a recipe per
forward graph (shapes, dtypes, wiring, constants, targets, flags), and none where a rule of a
node's own, a computed value or an outside Var could make a recipe wrong."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import autograd, grad_recipe, nn
from jtmini.ops import collective
from jtmini.state import services

rng = np.random.default_rng(3)


@pytest.fixture
def recipes_used(monkeypatch):
    """A list of the recipes ``grad`` built from."""
    used, find = [], grad_recipe.find

    def spied(key):
        recipe = find(key)
        if recipe is not None:
            used.append(recipe)
        return recipe
    monkeypatch.setattr(grad_recipe, "find", spied)
    grad_recipe._recipes.clear()
    return used


def _train(steps=5, seed=2):
    jt.sync_all()
    jt.seed(seed)
    model = nn.Sequential(nn.Linear(6, 12), nn.LeakyReLU(0.2), nn.Linear(12, 12), nn.Tanh(), nn.Linear(12, 3))
    opt = nn.Adam(model.parameters(), lr=1e-2)
    data, losses = np.random.default_rng(seed), []
    for step in range(steps):
        x = jt.array(data.standard_normal((10, 6)).astype("float32"))
        y = jt.array(data.integers(0, 3, 10).astype("int32"))
        loss = nn.cross_entropy_loss(model(x), y) + (model(x) ** 2).mean() * 0.01
        opt.step(loss)
        losses.append(loss.item())
    return losses, [p.numpy() for p in model.parameters()]


def test_training_with_recipes_matches_the_rules_bit_for_bit(recipes_used, monkeypatch):
    losses, params = _train()
    assert len(recipes_used) >= 3
    monkeypatch.setattr(grad_recipe, "find", lambda key: None)
    rule_losses, rule_params = _train()
    assert losses == rule_losses
    for p, q in zip(params, rule_params):
        np.testing.assert_array_equal(p, q)


def _grad_nodes(loss, targets):
    """The gradients' graphs as (op, attrs, shape, dtype, inputs by place) rows."""
    rows, place = [], {}
    for g in targets:
        stack = [g]
        while stack:
            v = stack.pop()
            if id(v) not in place:
                place[id(v)] = len(place)
                rows.append((v.op, tuple(sorted(v.attrs.items())), tuple(v.shape), v.dtype))
                stack.extend(v.inputs)
    return rows


def test_a_recipe_builds_the_nodes_the_rules_build(recipes_used):
    def loss_of(a_np, w_np):
        a, w = jt.array(a_np), jt.array(w_np)
        h = (a @ w).relu()
        return (h * h + (a @ w).exp()).sum(), [a, w]

    a_np, w_np = rng.standard_normal((4, 5)).astype("float32"), rng.standard_normal((5, 3)).astype("float32")
    loss, targets = loss_of(a_np, w_np)
    by_rules = jt.grad(loss, targets)
    loss, targets = loss_of(a_np, w_np)
    by_recipe = jt.grad(loss, targets)
    assert len(recipes_used) == 1
    assert _grad_nodes(None, by_rules) == _grad_nodes(None, by_recipe)
    for g, h in zip(by_rules, by_recipe):
        np.testing.assert_array_equal(g.numpy(), h.numpy())


def test_new_constants_shapes_and_dtypes_get_their_own_recipes(recipes_used):
    for c, shape, dtype in [(2.0, (3, 4), "float32"), (-0.5, (3, 4), "float32"), (2.0, (5, 4), "float32"),
                            (2.0, (3, 4), "float64"), (-0.5, (3, 4), "float32"), (2.0, (3, 4), "float32")]:
        x_np = rng.standard_normal(shape).astype(dtype)
        x = jt.array(x_np)
        g = jt.grad((x * c + x.exp()).sum(), x)
        assert g.dtype == dtype and g.shape == shape
        np.testing.assert_allclose(g.numpy(), c + np.exp(x_np), rtol=1e-6)
    assert len(recipes_used) == 2          # the last two graphs were met before


def test_other_targets_and_stop_grad_targets_get_their_own_recipes(recipes_used):
    x_np, y_np = rng.standard_normal(5).astype("float32"), rng.standard_normal(5).astype("float32")
    for k in range(2):
        x, y, z = jt.array(x_np), jt.array(y_np), jt.array(y_np)
        loss = (x * y).sum()
        gx, gy, gz = jt.grad(loss, [x, y, z])
        np.testing.assert_array_equal(gx.numpy(), y_np)
        np.testing.assert_array_equal(gy.numpy(), x_np)
        np.testing.assert_array_equal(gz.numpy(), np.zeros(5, "float32"))
        x, y = jt.array(x_np), jt.array(y_np)
        y.stop_grad()
        gx, gy = jt.grad((x * y).sum(), [x, y])
        np.testing.assert_array_equal(gx.numpy(), y_np)
        np.testing.assert_array_equal(gy.numpy(), np.zeros(5, "float32"))
    assert len(recipes_used) == 2


def test_shared_inputs_keep_their_wiring(recipes_used):
    """``x * x`` and ``x * y``: the same ops, wired differently, so different keys."""
    x_np = rng.standard_normal(4).astype("float32")
    for k in range(2):
        x, y = jt.array(x_np), jt.array(x_np)
        np.testing.assert_allclose(jt.grad((x * x).sum(), x).numpy(), 2 * x_np, rtol=1e-6)
        np.testing.assert_allclose(jt.grad((x * y).sum(), x).numpy(), x_np, rtol=1e-6)
    assert len(recipes_used) == 2


def test_flags_that_change_node_building_are_part_of_the_key(recipes_used):
    x_np = rng.standard_normal(4).astype("float32")
    x = jt.array(x_np)
    jt.grad((x * 3).sum(), x)
    with jt.flag_scope(amp_reg=2):
        x = jt.array(x_np)
        assert grad_recipe.find(grad_recipe.key(grad_recipe.forward_order((x * 3).sum()), [x])) is None
    x = jt.array(x_np)
    assert grad_recipe.find(grad_recipe.key(grad_recipe.forward_order((x * 3).sum()), [x])) is not None


def test_rules_of_a_nodes_own_are_never_recorded(recipes_used):
    x_np = rng.standard_normal(4).astype("float32")

    class Cube(jt.Function):
        def execute(self, x):
            self.x = x
            return x * x * x

        def grad(self, dout):
            return dout * 3 * self.x * self.x

    for k in range(3):
        x = jt.array(x_np)
        np.testing.assert_allclose(jt.grad(Cube.apply(x).sum(), x).numpy(), 3 * x_np ** 2, rtol=1e-5)
        x = jt.array(x_np)
        y = autograd.custom_grad(x * 2, [x], lambda d: [d * (k + 1)])
        np.testing.assert_allclose(jt.grad(y.sum(), x).numpy(), np.full(4, k + 1.0), rtol=1e-6)
    assert not recipes_used and not grad_recipe._recipes


def _train_layers(make, shape, steps=4, seed=5):
    """Loss and parameters after ``steps`` SGD steps of the model ``make()`` on (``shape``) inputs."""
    jt.sync_all()
    jt.seed(seed)
    model, data, losses = make(), np.random.default_rng(seed), []
    opt = nn.SGD(model.parameters(), 0.1, momentum=0.9)
    for _ in range(steps):
        x = jt.array(data.standard_normal(shape).astype("float32"))
        loss = (model(x) ** 2).mean()
        opt.step(loss)
        losses.append(loss.item())
    return losses, [p.numpy() for p in model.parameters()]


def _batch_norm_net():
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 3, 1))


def _layer_norm_attention_net():
    class Net(nn.Module):
        def __init__(self):
            self.norm, self.attention = nn.LayerNorm(8), nn.MultiheadAttention(8, 2, batch_first=True)

        def execute(self, x):
            h = self.norm(x)
            return self.attention(h, h, h)[0]
    return Net()


def _elu_softplus_net():
    return nn.Sequential(nn.Linear(6, 8), nn.ELU(0.7), nn.Linear(8, 8), nn.Softplus(2.0, 5.0), nn.Linear(8, 3))


@pytest.mark.parametrize("make,shape", [(_batch_norm_net, (3, 2, 5, 5)), (_layer_norm_attention_net, (2, 6, 8)),
                                        (_elu_softplus_net, (5, 6))],
                         ids=["batch_norm", "layer_norm_attention", "elu_softplus"])
def test_declared_rules_keep_a_recipe_that_matches_them_bit_for_bit(make, shape, recipes_used, monkeypatch):
    """BatchNorm's, LayerNorm's, attention's, ELU's and softplus's closed-form gradients are
    ``custom_grad`` rules declared with a key and the Vars they read: their graphs keep a recipe."""
    losses, params = _train_layers(make, shape)
    assert len(recipes_used) >= 2
    monkeypatch.setattr(grad_recipe, "find", lambda key: None)
    rule_losses, rule_params = _train_layers(make, shape)
    assert losses == rule_losses
    for p, q in zip(params, rule_params):
        np.testing.assert_array_equal(p, q)


def test_a_declared_rule_key_tells_graphs_apart(recipes_used):
    """Two graphs alike but for a value the rule reads (its key) get their own recipes."""
    x_np = rng.standard_normal(4).astype("float32")
    for k in (1.0, 2.0, 1.0, 2.0):
        x = jt.array(x_np)
        y = autograd.custom_grad(x * 2, [x], lambda d, k=k: [d * k], key=("scaled", k))
        np.testing.assert_allclose(jt.grad(y.sum(), x).numpy(), np.full(4, k), rtol=1e-6)
    assert len(recipes_used) == 2 and len(grad_recipe._recipes) == 2


def test_a_declared_rule_reading_an_undeclared_var_is_not_recorded(recipes_used):
    x_np = rng.standard_normal(4).astype("float32")
    for _ in range(3):
        x = jt.array(x_np)
        s = x * 3                                   # read by the rule, not declared as saved
        y = autograd.custom_grad(s + 1, [x], lambda d: [d * s], key=("undeclared",))
        np.testing.assert_allclose(jt.grad(y.sum(), x).numpy(), 3 * x_np, rtol=1e-6)
    assert not recipes_used and not grad_recipe._recipes


def test_a_graph_whose_value_a_rule_computed_is_not_recorded():
    """A rule that reads a forward value shapes the graph by data: ``record`` refuses it."""
    grad_recipe._recipes.clear()
    x = jt.array(rng.standard_normal(3).astype("float32"))
    y = x.exp()
    loss = y.sum()
    order = grad_recipe.forward_order(loss)
    key = grad_recipe.key(order, [x])
    start = grad_recipe.mark(order)
    y.sync()                                    # as a rule calling .item() would
    grad_recipe.record(key, order, start, [loss.ones_like() * y])
    assert not grad_recipe._recipes


def test_a_built_node_reading_an_outside_var_is_not_recorded():
    grad_recipe._recipes.clear()
    outside = jt.array(np.ones(3, "float32")) * 2       # neither forward, nor built, nor a constant
    x = jt.array(rng.standard_normal(3).astype("float32"))
    loss = x.exp().sum()
    order = grad_recipe.forward_order(loss)
    key = grad_recipe.key(order, [x])
    start = grad_recipe.mark(order)
    grad_recipe.record(key, order, start, [x.exp() * outside])
    assert not grad_recipe._recipes
    grad_recipe.record(key, order, start, [x.exp() * 2])    # a constant made now: recorded
    assert len(grad_recipe._recipes) == 1


def test_clear_caches_forgets_recipes():
    x = jt.array(np.ones(3, "float32"))
    jt.grad((x * 5).sum(), x)
    assert grad_recipe._recipes
    jt.clear_caches()
    assert not grad_recipe._recipes


def test_a_constant_behind_a_stop_grad_node_is_not_taken_as_shared():
    """The inputs of a stop_grad forward node are not in the key, so a built node may not read
    one of them as a shared constant: next time it may be another value."""
    grad_recipe._recipes.clear()
    x = jt.array(rng.standard_normal(3).astype("float32"))
    scale = jt.full((3,), 0.5, "float32")
    held = (scale * 1).stop_grad()
    loss = (x * held).sum()
    order = grad_recipe.forward_order(loss)
    key = grad_recipe.key(order, [x])
    grad_recipe.record(key, order, grad_recipe.mark(order), [loss.ones_like() * scale])
    assert not grad_recipe._recipes


def test_the_backend_is_part_of_the_key():
    """Some rules build host-only kernels (``ops.softmax.runs_fused``): another backend, another recipe."""
    x = jt.array(np.ones(3, "float32"))
    order = grad_recipe.forward_order((x * 3).sum())
    with jt.flag_scope(backend="cuda"):
        other = grad_recipe.key(order, [x])
    assert grad_recipe.key(order, [x]) != other


def test_second_derivatives_from_recipes(recipes_used):
    x_np = rng.standard_normal(5).astype("float32")
    for k in range(3):
        x = jt.array(x_np)
        (dx,) = jt.grad((x * x * x).sum(), [x])
        (ddx,) = jt.grad(dx.sum(), [x])
        np.testing.assert_allclose(dx.numpy(), 3 * x_np ** 2, rtol=1e-5)
        np.testing.assert_allclose(ddx.numpy(), 6 * x_np, rtol=1e-5)
    assert len(recipes_used) == 4


def test_memory_profiling_and_eager_mode_run_the_rules():
    x = jt.array(np.ones(3, "float32"))
    order = grad_recipe.forward_order((x * 3).sum())
    assert grad_recipe.key(order, [x]) is not None
    for flag in ({"profile_memory_enable": True}, {"lazy_execution": False}):
        with jt.flag_scope(**flag):
            assert grad_recipe.key(order, [x]) is None


@pytest.fixture
def queued(monkeypatch):
    """The collective nodes queued for MPI, in order (outside mpirun nothing issues them)."""
    nodes = []
    monkeypatch.setattr(services, "enqueue_collective", nodes.append)
    grad_recipe._recipes.clear()
    return nodes


def _rules_with_collectives(x, read_both=True):
    """A backward as synchronised BatchNorm's builds it under mpirun: collectives queued as the
    rules make them (``ops/collective.queue``); the second is read by no gradient unless ``read_both``."""
    first = collective.queue(jt.Var.node("mpi_all_reduce", [x.exp()], op="add"))
    second = collective.queue(jt.Var.node("mpi_all_reduce", [x * 2], op="max"))
    return [first * second if read_both else first * 3]


def test_a_backward_with_collectives_is_rebuilt_and_queues_them_in_the_rules_order(queued):
    x = jt.array(rng.standard_normal(3).astype("float32"))
    order = grad_recipe.forward_order(x.exp().sum())
    key = grad_recipe.key(order, [x])
    start = grad_recipe.mark(order)
    results = _rules_with_collectives(x)
    grad_recipe.record(key, order, start, results)
    made_by_rules = list(queued)
    recipe = grad_recipe.find(key)
    assert recipe is not None
    rebuilt = recipe.build(order)
    again = queued[len(made_by_rules):]
    # the recipe's DFS builds the second (a multiplication's right input) first, but they are
    # queued in the rules' order: another order would cross the ranks' sequences
    assert [v.id for v in again] != sorted(v.id for v in again)
    assert [(v.op, v.attrs["op"]) for v in again] == [(v.op, v.attrs["op"]) for v in made_by_rules]
    assert rebuilt[0].inputs == tuple(again)


def test_a_collective_no_gradient_reads_keeps_the_rules(queued):
    """The rules queued it, so every rank issues it; a recipe would not rebuild it."""
    x = jt.array(rng.standard_normal(3).astype("float32"))
    order = grad_recipe.forward_order(x.exp().sum())
    key = grad_recipe.key(order, [x])
    start = grad_recipe.mark(order)
    grad_recipe.record(key, order, start, _rules_with_collectives(x, read_both=False))
    assert not grad_recipe._recipes


def test_a_collective_made_without_its_queue_keeps_the_rules(queued):
    x = jt.array(rng.standard_normal(3).astype("float32"))
    order = grad_recipe.forward_order(x.exp().sum())
    key = grad_recipe.key(order, [x])
    start = grad_recipe.mark(order)
    grad_recipe.record(key, order, start, [jt.Var.node("mpi_all_reduce", [x.exp()], op="add")])
    assert not grad_recipe._recipes


def test_dropout_masks_drawn_each_step_still_hit_and_match_the_rules(recipes_used, monkeypatch):
    # a random node's seq (its draw order) is new every step: left out of the key, as no rule reads it
    def train():
        jt.sync_all()
        jt.seed(5)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))
        opt = nn.SGD(model.parameters(), 0.1)
        data, losses = np.random.default_rng(1), []
        for _ in range(4):
            x = jt.array(data.standard_normal((6, 8)).astype("float32"))
            loss = (model(x) ** 2).mean()
            opt.step(loss)
            losses.append(loss.item())
        return losses
    losses = train()
    assert len(recipes_used) >= 2
    monkeypatch.setattr(grad_recipe, "find", lambda key: None)
    assert train() == losses


def test_a_repeated_graph_keeps_the_stored_keys_rows_and_drops_its_own():
    """The plan and recipe caches keep the rows they stored first: a step's new key, equal to a
    stored one, gives its own rows up (they are freed with it) instead of the store adopting them
    and holding each step's thousands of new tuples for the cyclic collector to scan."""
    from jtmini import replay
    from jtmini.state import HashedKey
    stored, probe = HashedKey((1, ("row", (2, 3)))), HashedKey((1, ("row", (2, 3))))
    rows = stored.key
    assert {stored: "plan"}[probe] == "plan" and stored.key is rows and probe.key is rows
    assert probe == HashedKey((1, ("row", (2, 3)))) and probe.key is rows     # either side calling
    assert not probe == HashedKey((1, ("row", (2, 4)))) and probe.key is rows

    grad_recipe._recipes.clear()
    replay.clear()
    _train(steps=2)
    kept = {id(k): k.key for k in [*grad_recipe._recipes, *replay._cache]}
    _train(steps=3)
    assert kept and all(k.key is kept[id(k)] for k in [*grad_recipe._recipes, *replay._cache] if id(k) in kept)
