"""The compiled replay-signature walk (``native_walk``) gives exactly the Python walk's key, Vars
and order on graphs of every shape of wiring, and the Python walk runs where it is unavailable."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import native_walk, replay
from jtmini.runtime import base
from jtmini.var import Var, untrack

RUNTIME = base.get("cpu")


@pytest.fixture(autouse=True)
def compiled_walks():
    """Walk in C in these tests (a process otherwise starts to once a graph repeats)."""
    native_walk.enable()


def _graphs(rng):
    """Lists of targets: chains, diamonds, shared inputs, realized Vars among pending ones,
    runtime attrs (constants, slices), several targets reading one another."""
    a = jt.array(rng.standard_normal((4, 3)).astype("float32"))
    b = jt.array(rng.standard_normal((3,)).astype("float32"))
    realized = (a * 2).sync()
    h = (a + b).relu()
    diamond = h * h + h.exp()
    sliced = a[1:3, ::2] * 1.5 + realized[0:2, 0:2]
    reduced = (a @ a.transpose(1, 0)).sum(dims=1) + 0.25
    shared = a + 1.0
    return [[diamond], [sliced], [reduced], [diamond, reduced, sliced], [shared, shared * shared],
            [h, diamond], [jt.zeros((2, 2)) + jt.ones((2, 2)) * 3.0], [(a.reshape(12) * b.sum()).mean()]]


def _same(walked, expected):
    key, vars_, n_order = walked
    key_py, vars_py, n_order_py = expected
    return key == key_py and n_order == n_order_py and len(vars_) == len(vars_py) and \
        all(x is y for x, y in zip(vars_, vars_py))


@pytest.mark.skipif(native_walk._library() is None, reason="no compiled walk on this interpreter")
def test_the_compiled_walk_gives_the_python_walks_signature(rng):
    for targets in _graphs(rng):
        assert _same(replay._signature(targets, RUNTIME), replay._signature_py(targets, RUNTIME))


@pytest.mark.skipif(native_walk._library() is None, reason="no compiled walk on this interpreter")
def test_runtime_attrs_are_left_out_and_compiled_ones_kept(rng):
    x = jt.array(rng.standard_normal(5).astype("float32"))
    one, two = replay._signature([x * 0.5 + 1.0], RUNTIME), replay._signature([x * 0.25 + 3.0], RUNTIME)
    assert one[0] == two[0]                         # constants' values are read at launch
    assert replay._signature([x[1:3] + 1.0], RUNTIME)[0] == replay._signature([x[2:4] + 1.0], RUNTIME)[0]
    assert one[0] != replay._signature([x.reshape(1, 5) * 0.5 + 1.0], RUNTIME)[0]


@pytest.mark.skipif(native_walk._library() is None, reason="no compiled walk on this interpreter")
def test_an_unregistered_op_raises_as_in_python():
    bogus = untrack(Var("no_such_op", [jt.ones(2)], {}, (2,), "float32"))     # no later sync meets it
    with pytest.raises(KeyError):
        native_walk.walk([bogus])
    with pytest.raises(KeyError):
        replay._signature_py([bogus], RUNTIME)


def test_without_the_compiled_walk_the_python_walk_runs(rng, monkeypatch):
    targets = _graphs(rng)[3]
    expected = replay._signature_py(targets, RUNTIME)
    monkeypatch.setattr(native_walk, "_library", lambda: None)
    assert native_walk.walk(targets) is None
    assert _same(replay._signature(targets, RUNTIME), expected)


def test_replayed_values_match_a_fresh_plan(rng):
    """A hit found through the compiled walk computes what planning afresh computes."""
    x = rng.standard_normal((6, 4)).astype("float32")
    w = rng.standard_normal((3, 4)).astype("float32")

    def compute(value):
        return ((jt.array(value) @ jt.array(w).transpose(1, 0)).relu().sum(dims=0) * 0.5).numpy()

    compute(x)
    replayed = compute(x + 1)
    replay.clear()
    np.testing.assert_array_equal(replayed, compute(x + 1))


def _losses(rng):
    """(loss, targets) pairs: plain, shared, stop_grad and detach fences, a rule of its own
    (no key), random draws (their order left out of the key), a target the loss does not read."""
    w = jt.array(rng.standard_normal((3, 4)).astype("float32"))
    b = jt.array(rng.standard_normal(3).astype("float32"))
    x = jt.array(rng.standard_normal((5, 4)).astype("float32"))
    h = (x @ w.transpose(1, 0) + b).relu()
    unused = jt.array(np.ones(2, "float32"))
    from jtmini.autograd import custom_grad
    custom = custom_grad(h * 2, [h], lambda d: [d * 2])
    noisy = (h + jt.randn(5, 3)).sum()
    return [((h * h).mean(), [w, b]), ((h + h.detach() * 3).sum(), [w, b, unused]),
            ((h.stop_grad() * w.sum()).sum(), [w]), (custom.sum(), [w, b]), (noisy, [w, b, x]),
            ((h.exp() + h).sum() * 0.5, [x, unused])]


@pytest.mark.skipif(native_walk._library() is None, reason="no compiled walk on this interpreter")
def test_the_compiled_grad_walk_gives_the_python_walks_order_and_key(rng):
    from jtmini import grad_recipe
    for loss, targets in _losses(rng):
        order, key = grad_recipe.graph_and_key(loss, targets)
        order_py, key_py = grad_recipe._graph_and_key_py(loss, targets)
        assert len(order) == len(order_py) and all(a is b for a, b in zip(order, order_py))
        assert all(a is b for a, b in zip(order, grad_recipe.forward_order(loss)))
        assert key == key_py and (key is None) == (key_py is None)
        assert key == grad_recipe.key(order_py, targets)
        with jt.flag_scope(lazy_execution=0):
            assert grad_recipe.graph_and_key(loss, targets)[1] is None


def test_gradients_through_the_compiled_walk_match_the_rules(rng):
    """The second step of a graph (a recipe hit, found through the compiled key) gives the rules'
    gradients bit for bit."""
    from jtmini import grad_recipe
    w = jt.array(rng.standard_normal((3, 4)).astype("float32"))
    x = jt.array(rng.standard_normal((5, 4)).astype("float32"))

    def grads():
        return [g.numpy() for g in jt.grad(((x @ w.transpose(1, 0)).relu() ** 2).mean(), [w, x])]

    grad_recipe.clear()
    first, second = grads(), grads()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def _train(rng, clear_every_step):
    """A small loop whose graph changes every few steps (another branch, a frozen layer, a new
    learning rate, a batch of another size): losses and weights, with the plans and gradient
    recipes kept, or forgotten every step (everything planned and differentiated afresh)."""
    from jtmini import grad_recipe, nn
    jt.seed(3)
    first, second = nn.Linear(4, 8), nn.Linear(8, 1)
    opt = nn.Adam(first.parameters() + second.parameters(), lr=0.01)
    data = rng.standard_normal((10, 4)).astype("float32")
    losses = []
    for step in range(12):
        if clear_every_step:
            replay.clear()
            grad_recipe.clear()
        x = jt.array(data[:8] if step % 5 != 4 else data)          # another batch size now and then
        h = first(x)
        h = h.relu() if step % 3 else nn.leaky_relu(h, 0.2)          # another branch every third step
        if step in (6, 7):
            h = h.detach()                                           # the first layer frozen two steps
        if step == 9:
            opt.lr = 0.003                                           # a new learning rate
        loss = (second(h) ** 2).mean()
        opt.step(loss)
        losses.append(loss.item())
    return losses, [p.numpy() for p in first.parameters() + second.parameters()]


def test_a_loop_whose_graph_changes_gives_the_uncached_values(rng):
    seed = int(rng.integers(1 << 30))
    cached = _train(np.random.default_rng(seed), False)
    fresh = _train(np.random.default_rng(seed), True)
    np.testing.assert_array_equal(cached[0], fresh[0])
    for a, b in zip(cached[1], fresh[1]):
        np.testing.assert_array_equal(a, b)


def test_the_compiled_walks_start_once_a_graph_repeats():
    """A process loads (or builds) the library only after a replay or recipe hit: a cold first
    step does not wait for the compiler."""
    import subprocess
    import sys
    script = (
        "import jtmini as jt\n"
        "from jtmini import native_walk\n"
        "def step():\n"
        "    x = jt.array([1.0, 2.0, 3.0])\n"
        "    return ((x * 2 + 1).exp() * 3).sum().item()\n"
        "first = step()\n"
        "assert native_walk._library.cache_info().misses == 0, 'built before a graph repeated'\n"
        "assert step() == first and step() == first\n"
        "assert native_walk._enabled and native_walk._library.cache_info().misses == 1\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


# every kind of value an attr may hold: the kinds key_code writes, and others it keeps aside
_ODD_VALUES = [0, 255, 256, -1, 2**63 - 1, -2**63, 2**63, -2**70, True, False, None, 0.0, -0.0, 1.5,
               float("nan"), float("inf"), "", "x", "é漢", "\ud800", jt.NanoString("float32"),
               (), (1, (2, "a")), (1.0, None), jt.Var.__mro__[0], frozenset({1}), complex(1, 2)]


def test_key_code_tells_apart_what_it_writes_and_keeps_the_rest_aside():
    from jtmini.key_code import Code

    def written(x):
        code = Code()
        code.value(x)
        return code.done()

    assert written(1) != written(1.0) != written(True) and written(1) != written("1") != written((1,))
    assert written(0.0) != written(-0.0) and written((1, 2)) == written(jt.zeros(1, 2).shape)
    assert written("float32") == written(jt.NanoString("float32"))
    assert written(2**63) == (b"O", (2**63,)) and written("\ud800") == (b"O", ("\ud800",))
    assert written(frozenset({1}))[1] == (frozenset({1}),)
    # prefix-free: a tuple's items cannot run into the next value
    assert written(((1,), 2)) != written(((1, 2),)) and written(("ab", "c")) != written(("a", "bc"))
    plain = [written(v)[0] for v in _ODD_VALUES if not written(v)[1]]
    assert len(plain) == 21 and len(set(plain)) == len(plain)          # each value its own bytes
    for long in (254, 255, 300):                                        # lengths of one byte and more
        assert written("a" * long) != written("a" * (long + 1))


@pytest.mark.skipif(native_walk._library() is None, reason="no compiled walk on this interpreter")
def test_the_compiled_walks_write_the_python_walks_bytes_for_every_kind_of_attr(rng):
    from jtmini import grad_recipe
    a = jt.array(rng.standard_normal(3).astype("float32"))
    for value in _ODD_VALUES:
        odd = untrack(Var("exp", [a * 2.0], {"odd": value, "more": (value, 1)}, (3,), "float32"))
        c, p = replay._signature([odd], RUNTIME)[0], replay._signature_py([odd], RUNTIME)[0]
        assert c[4] == p[4] and (c[5] == p[5] or value != value), value       # NaN != NaN aside
        assert c[:4] == p[:4] and c[6:] == p[6:]
        loss = untrack(Var("sum", [odd], {"dims": (0,), "keepdims": False}, (), "float32"))
        keyed = grad_recipe.graph_and_key(loss, [a])[1]
        keyed_py = grad_recipe._graph_and_key_py(loss, [a])[1]
        assert keyed.key[0] == keyed_py.key[0] and keyed.key[2:] == keyed_py.key[2:], value


def _describe(made, order, shared):
    """Each made node as (op, attrs, shape, dtype, stop_grad, pending-tracked, inputs by source)."""
    from jtmini.var import _pending
    where = {id(v): ("forward", k) for k, v in enumerate(order)}
    where.update({id(v): ("shared", k) for k, v in enumerate(shared)})
    where.update({id(v): ("built", k) for k, v in enumerate(made)})
    return [(v.op, v.attrs, v.shape, v.dtype, v._stop_grad, id(v) in _pending, v._data, v._backward,
             tuple(where[id(i)] for i in v.inputs),
             all(any(r() is v for r in i._consumers) for i in v.inputs)) for v in made]


@pytest.mark.skipif(native_walk._library() is None, reason="no compiled walk on this interpreter")
def test_the_compiled_recipe_build_makes_the_nodes_python_makes(rng, monkeypatch):
    """``make_nodes`` (C) against ``Recipe._made`` (Python): the same nodes, wiring, flags, pending
    table and consumer lists, also where an input's consumer list doubles (its dead references are
    dropped, as var._link does) and where the pending table is swept (var._track)."""
    import sys
    import weakref
    from jtmini import grad_recipe
    var = sys.modules["jtmini.var"]          # jtmini.var is also the name of jt.var, a function
    w = jt.array(rng.standard_normal((3, 4)).astype("float32"))
    x = jt.array(rng.standard_normal((5, 4)).astype("float32"))

    def loss():
        h = (x @ w.transpose(1, 0)).relu()
        return (h * h).mean() + (h.detach() * 2).sum() * 0.0

    grad_recipe.clear()
    jt.grad(loss(), [w, x])
    l2 = loss()
    order, key = grad_recipe.graph_and_key(l2, [w, x])
    recipe = grad_recipe.find(key)
    assert recipe is not None and len(recipe.nodes) >= 5
    monkeypatch.setattr(var, "_sweep_at", 1)          # a sweep at the first tracked node
    sweep_at = var._sweep_at
    gone = [jt.zeros(1) for _ in range(64)]
    w._consumers[:] = [weakref.ref(v) for v in gone]     # 64 (a doubling) dead: the next append prunes
    del gone
    in_c = native_walk.make_nodes(recipe.nodes, order, recipe.shared)
    assert var._sweep_at != sweep_at                     # swept
    assert 0 < len(w._consumers) < 32 and all(r() is not None for r in w._consumers)
    in_py = recipe._made(order)
    assert in_c is not None and [v.id for v in in_c] == sorted(v.id for v in in_c)
    assert in_c[-1].id < in_py[0].id and len({v.id for v in in_c + in_py}) == len(in_c) * 2
    assert _describe(in_c, order, recipe.shared) == _describe(in_py, order, recipe.shared)
    assert all(a.attrs is not b.attrs and a.attrs is not n.attrs for a, b, n in zip(in_c, in_py, recipe.nodes))
    for got, expected in zip(recipe.build(order), jt.grad(loss(), [w, x])):
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.skipif(native_walk._library() is None, reason="no compiled walk on this interpreter")
def test_the_compiled_pending_roots_are_the_python_ones(rng, monkeypatch):
    """Roots (unrealized, read by no live Var) in id order, realized and read Vars left out, dead
    entries dropped, a Var subclass's attributes looked up: as var.pending_roots finds them."""
    import sys
    from jtmini.dataset.dataset import BatchVar
    var = sys.modules["jtmini.var"]
    x = jt.array(rng.standard_normal(4).astype("float32"))
    kept = [x * 2, (x + 1).exp(), jt.ones(3) * 5]
    read = kept[0] + 1                              # kept[0] is read: not a root
    done = (x * 3).sync()
    odd = BatchVar("mul", (x, x), {}, (4,), "float32")   # a subclass, walked through getattr
    gone = [x * k for k in range(5)]
    gone_ids = {id(v) for v in gone}
    del gone
    python_table = dict(var._pending)
    expected = var.pending_roots()
    var._pending.clear()
    var._pending.update(python_table)               # the dead entries again, for the C walk
    got = native_walk.pending_roots()
    assert [v.id for v in got] == [v.id for v in expected] and got == sorted(got, key=lambda v: v.id)
    ids = {id(v) for v in got}                     # (``in`` would compare Vars with ==, a node)
    assert id(read) in ids and id(odd) in ids and id(kept[0]) not in ids and id(done) not in ids
    assert not gone_ids & set(var._pending) and len(var._pending) < len(python_table)
