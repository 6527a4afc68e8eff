"""Jittor's random numbers (ops/random_op.py): the lazy ``random`` op against libstdc++'s
``std::default_random_engine`` itself (a small C++ program compiled here with g++ prints the
numbers), the order of draws across Vars, seeding, replay, and the functions built on it (rand,
randn, randint, init, dropout) with Jittor's formulas.
"""
import subprocess

import numpy as np
import pytest

import jtmini as jt
from jtmini import init, nn

REFERENCE = r"""
#include <cstdio>
#include <cstdlib>
#include <random>
// argv: the seed, then one op each: 'u' (uniform) or 'n' (normal) and a count, as u12 or n10.
// Prints each op's numbers' bits on a line. Each op uses a new distribution on the one engine,
// as Jittor's RandomOp does.
int main(int argc, char** argv) {
  std::default_random_engine engine(atoi(argv[1]));
  for (int k = 2; k < argc; ++k) {
    int n = atoi(argv[k] + 1);
    std::uniform_real_distribution<float> uniform(0.0, 1.0);
    std::normal_distribution<float> normal(0.0, 1.0);
    for (int i = 0; i < n; ++i) {
      float v = argv[k][0] == 'u' ? uniform(engine) : normal(engine);
      unsigned bits;
      __builtin_memcpy(&bits, &v, 4);
      printf("%u ", bits);
    }
    printf("\n");
  }
}
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """``draw(seed, ops)``: the float32 numbers libstdc++ gives, one array per op of ``ops``
    ((type, count) pairs, type "uniform" or "normal")."""
    folder = tmp_path_factory.mktemp("random_reference")
    (folder / "ref.cc").write_text(REFERENCE)
    subprocess.run(["g++", "-O2", "-o", str(folder / "ref"), str(folder / "ref.cc")], check=True)

    def draw(seed, ops):
        args = [type[0] + str(n) for type, n in ops]
        out = subprocess.run([str(folder / "ref"), str(seed), *args], check=True,
                             capture_output=True, text=True).stdout.split("\n")
        return [np.array(line.split(), np.uint32).view(np.float32) for line in out[:len(ops)]]
    return draw


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def assert_multiply_add(got, r, scale, shift):
    """``got`` is float32 ``r * scale + shift`` as a kernel computes it: rounded after each
    operation, or once where the compiler fused them (-march=native: FMA, as in Jittor's kernels)."""
    r, scale, shift = np.float32(r), np.float32(scale), np.float32(shift)
    separate = r * scale + shift
    fused = (r.astype(np.float64) * scale + shift).astype(np.float32)
    assert np.all((got == separate) | (got == fused)), (got, separate)


@pytest.mark.parametrize("seed", [3, 0, 12345, -7, 2**31 - 1])
@pytest.mark.parametrize("type", ["uniform", "normal"])
def test_draws_are_libstdcxx_default_random_engine_bit_for_bit(reference, seed, type):
    sizes = [1, 5, 1000, 7]
    jt.set_seed(seed)
    got = [jt.random((n,), "float32", type).numpy() for n in sizes]
    for mine, theirs in zip(got, reference(seed, [(type, n) for n in sizes])):
        np.testing.assert_array_equal(bits(mine), bits(theirs))


def test_a_uniform_stream_is_the_integer_recurrence():
    """An oracle apart from <random>: x <- 16807 x mod 2^31-1, u = float(x - 1) / 2^31."""
    jt.set_seed(11)
    x, want = 11, []
    for _ in range(500):
        x = 16807 * x % (2**31 - 1)
        want.append(min(np.float32(x - 1) / np.float32(2**31), np.nextafter(np.float32(1), np.float32(0))))
    np.testing.assert_array_equal(bits(jt.rand(500).numpy()), bits(want))


def test_values_follow_the_order_vars_are_computed_in(reference):
    """Jittor's tests build parameters, then force them one at a time in reverse order."""
    jt.set_seed(3)
    a, b, c = jt.random((4, 3)), jt.random((3,), type="normal"), jt.random((2, 5), type="normal")
    c.sync(), b.sync(), a.sync()
    want_c, want_b, want_a = reference(3, [("normal", 10), ("normal", 3), ("uniform", 12)])
    np.testing.assert_array_equal(bits(c.numpy().ravel()), bits(want_c))
    np.testing.assert_array_equal(bits(b.numpy()), bits(want_b))
    np.testing.assert_array_equal(bits(a.numpy().ravel()), bits(want_a))


def test_nothing_is_drawn_before_a_value_is_needed():
    jt.set_seed(5)
    unused = jt.rand(1000)                              # built, never computed: draws nothing
    first = jt.rand(4).numpy()
    jt.set_seed(5)
    np.testing.assert_array_equal(first, jt.rand(4).numpy())
    del unused


def test_set_seed_resets_and_get_seed_reports():
    jt.set_seed(42)
    a = jt.randn(50).numpy()
    assert jt.get_seed() == 42
    b = jt.randn(50).numpy()
    assert not np.array_equal(a, b)
    jt.set_seed(42)
    np.testing.assert_array_equal(jt.randn(50).numpy(), a)
    jt.set_global_seed(42)                 # also seeds Python and numpy; the engine is reset the same
    np.testing.assert_array_equal(jt.randn(50).numpy(), a)
    assert jt.get_seed() == 42


def test_a_drawn_var_keeps_its_numbers_when_it_was_an_intermediate():
    r = jt.rand(100)
    y = r * 2
    y.sync()                               # r was drawn inside y's kernel schedule
    np.testing.assert_array_equal(r.numpy() * 2, y.numpy())
    x = jt.array(np.ones(1000, np.float32))
    out = nn.dropout(x, 0.5)
    out.sync()
    (g,) = jt.grad(out.sum(), [x])         # realized apart: reads the same mask
    np.testing.assert_array_equal(g.numpy(), out.numpy())


def test_replay_draws_anew_every_step():
    def step():
        before = jt.stats()["plans_reused"]
        value = (nn.dropout(jt.ones(64), 0.5) * 3 + jt.rand(64)).numpy()
        return value, jt.stats()["plans_reused"] - before

    jt.set_seed(9)
    values = [step() for _ in range(4)]
    assert [reused for _, reused in values[1:]] == [1, 1, 1]
    masks = [tuple(v > 3) for v, _ in values]
    assert len(set(masks)) == 4            # every step its own mask
    jt.set_seed(9)
    np.testing.assert_array_equal(step()[0], values[0][0])


def test_profile_has_one_random_row_for_all_random_ops():
    with jt.profile_scope(show=False) as rep:
        a = jt.rand((10, 11, 12))
        c = jt.rand((11, 12, 10))
        b = a.fuse_transpose((1, 2, 0)) + c
        np.testing.assert_allclose(a.numpy().transpose((1, 2, 0)) + c.numpy(), b.numpy())
    assert len(rep) == 3
    random_rows = [row for row in rep.rows if row[0] == "random"]
    assert len(random_rows) == 1 and random_rows[0][1:3] == ("library", 2)


def test_dropout_mask_statistics_and_scale():
    jt.set_seed(1)
    p, n = 0.3, 200_000
    out = nn.dropout(jt.ones(n), p).numpy()
    assert set(np.unique(out)) == {0.0, np.float32(1) / np.float32(1 - p)}
    assert abs((out == 0).mean() - p) < 0.005
    jt.set_seed(1)
    np.testing.assert_array_equal(out == 0, ~(jt.rand(n).numpy() > p))     # Jittor's mask: random > p
    assert not nn.dropout(jt.ones(10), 1.0).numpy().any()
    x = jt.ones(10)
    assert nn.dropout(x, 0.0) is x and nn.dropout(x, 0.5, is_train=False) is x
    planes = nn.dropout2d(jt.ones(64, 8, 3, 3), 0.5).numpy().reshape(512, 9)
    assert all(len(set(row)) == 1 for row in planes) and 0.35 < (planes[:, 0] == 0).mean() < 0.65


def test_randint_bounds_dtypes_and_jittor_formula():
    jt.set_seed(2)
    v = jt.randint(-5, 5, (20000,), "int8").numpy()
    assert v.dtype == np.int8 and set(np.unique(v)) == set(range(-5, 5))
    assert jt.randint(3, shape=(1000,)).numpy().max() == 2
    assert jt.randint(10, 20, (4,), "int64").dtype == "int64"
    f = jt.randint_like(jt.zeros((100,), "float32"), 7).numpy()
    assert f.dtype == np.float32 and np.array_equal(f, np.floor(f)) and f.min() >= 0 and f.max() <= 6
    jt.set_seed(2)
    r = jt.rand(50).numpy()
    jt.set_seed(2)
    got = jt.randint(10, 1000, (50,)).numpy()
    separate = np.floor(np.clip(r * np.float32(990) + np.float32(10), 10, np.float32(999.5)))
    fused = np.floor(np.clip((r.astype(np.float64) * 990 + 10).astype(np.float32), 10, np.float32(999.5)))
    assert np.all((got == separate) | (got == fused))


def test_other_dtypes_are_the_float32_draws_cast():
    jt.set_seed(4)
    r32 = jt.rand(100).numpy()
    jt.set_seed(4)
    r64 = jt.rand(100, dtype="float64")
    assert r64.dtype == "float64"
    np.testing.assert_array_equal(r64.numpy(), r32.astype(np.float64))
    jt.set_seed(4)
    n = jt.randn_like(jt.zeros((10, 10), "float64"))
    assert n.dtype == "float64"
    assert jt.rand_like(jt.zeros(3, dtype="int32")).dtype == "float32"
    assert jt.rand(2, 3, requires_grad=False).is_stop_grad()


def test_init_and_layers_use_jittors_formulas():
    jt.set_seed(6)
    r = jt.rand(3, 4).numpy()
    jt.set_seed(6)
    assert_multiply_add(init.uniform((3, 4), "float32", -2.0, 0.5).numpy(), r, -2.5, 0.5)
    jt.set_seed(6)
    g = jt.randn(20).numpy()
    jt.set_seed(6)
    assert_multiply_add(init.gauss(20, "float32", 1.0, 3.0).numpy(), g, 3.0, 1.0)
    jt.set_seed(6)
    layer = nn.Linear(4, 3)
    layer.bias.sync(), layer.weight.sync()              # bias first: it takes the first 3 numbers
    bound = np.float32(1 / np.sqrt(4))
    jt.set_seed(6)
    rb, rw = jt.rand(3).numpy(), jt.rand(3, 4).numpy()
    assert_multiply_add(layer.bias.numpy(), rb, -2 * bound, bound)
    assert_multiply_add(layer.weight.numpy(), rw, -2 * bound, bound)
    w = jt.zeros(5)
    jt.set_seed(6)
    w.random_()
    np.testing.assert_array_equal(w.numpy(), r.ravel()[:5])


def test_a_model_seeded_alike_trains_alike():
    def train():
        jt.set_seed(8)
        model = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.2), nn.ReLU(), nn.Linear(8, 1))
        opt = nn.SGD(model.parameters(), 0.1)
        x = jt.array(np.linspace(-1, 1, 30, dtype=np.float32).reshape(10, 3))
        losses = []
        for _ in range(3):
            loss = (model(x) ** 2).mean()
            opt.step(loss)
            losses.append(loss.item())
        return losses
    assert train() == train()


@pytest.mark.parametrize("call, error, words", [
    (lambda: jt.random((2, -3)), ValueError, r"negative dimension in shape \(2, -3\)"),
    (lambda: jt.rand(2, -1), ValueError, r"negative dimension in shape \(2, -1\)"),
    (lambda: jt.random((2,), "float32", "gamma"), ValueError, "type must be 'uniform' or 'normal', got 'gamma'"),
    (lambda: jt.random((2.5,)), TypeError, "dims must be ints, got 2.5"),
    (lambda: jt.randint(5, 5), ValueError, r"empty range \[5, 5\)"),
    (lambda: jt.randint(0, 300, (3,), "int8"), OverflowError, r"range \[0, 300\) does not fit int8"),
    (lambda: jt.randint(0.5, 3), TypeError, "low must be an int, got 0.5"),
    (lambda: nn.dropout(jt.ones(3), 1.5), ValueError, r"dropout probability must be in \[0, 1\], got 1.5"),
    (lambda: jt.set_seed(1.5), TypeError, "seed must be an int, got 1.5"),
])
def test_errors_name_what_was_wrong(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_multinomial_is_jittors_algorithm_on_rand():
    w = np.array([[1.0, 0.0, 3.0, 2.0], [0.5, 0.5, 0.0, 1.0]], np.float32)
    jt.set_seed(12)
    got = jt.multinomial(jt.array(w), 300, replacement=True).numpy()
    jt.set_seed(12)
    cum = np.cumsum(w, -1, dtype=np.float32)
    r = jt.rand(2, 300, 1).numpy() * cum[:, None, -1:]
    np.testing.assert_array_equal(got, (cum[:, None, :-1] < r).sum(-1))
    assert got.dtype == np.int32 and not (got == 1)[0].any() and not (got == 2)[1].any()
    jt.set_seed(12)
    picked = jt.multinomial(jt.array(w), 2).numpy()
    jt.set_seed(12)
    with np.errstate(divide="ignore"):          # a zero weight: key 0, as 1 / 0 = inf in the kernel
        keys = np.minimum(jt.rand(2, 4).numpy(), np.float32(0.999999)) ** (1 / w)
    np.testing.assert_array_equal(np.sort(picked, -1), np.sort(np.argsort(-keys, -1)[:, :2], -1))


def test_draws_of_one_schedule_go_in_the_order_the_vars_were_made():
    def model():
        return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))

    x = jt.array(np.ones((5, 3), np.float32))
    jt.set_seed(10)
    together = model()
    out = together(x).numpy()                  # every parameter drawn inside one schedule
    jt.set_seed(10)
    one_by_one = model()
    for p in one_by_one.parameters():          # in the order they were made
        p.sync()
    np.testing.assert_array_equal(one_by_one(x).numpy(), out)
    for a, b in zip(together.parameters(), one_by_one.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("type, scale, shift", [("uniform", -0.37, 0.185), ("normal", 0.02, 0.0),
                                                ("normal", 3.0, 1.0), ("uniform", -2.5, 0.5)])
def test_an_initializer_in_one_op_has_the_formulas_bits(type, scale, shift):
    """init.uniform / init.gauss store r * scale + shift from the random op itself: the same bits
    as the formula computed by a generated kernel from the drawn numbers."""
    from jtmini.ops import random_op
    jt.set_seed(21)
    fused = random_op.initializer((333,), "float32", type, scale, shift)
    assert fused.op == "random"                  # one op, not a formula over it
    fused = fused.numpy()
    jt.set_seed(21)
    r = jt.random((333,), "float32", type)
    formula = (r * scale + shift).numpy()
    np.testing.assert_array_equal(bits(fused), bits(formula))
    assert_multiply_add(fused, r.numpy(), scale, shift)
    low = jt.array(np.float32(-1.0))            # a Var bound: the formula as ops, as Jittor's
    assert init.uniform((4,), "float32", low, 1.0).op != "random"
