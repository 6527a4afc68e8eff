"""Index expressions (``jtmini.symbolic``): the range of an expression must contain every value
it takes (C's truncating / and %), or codegen would drop a bounds check a read needs; codegen drops
exactly the checks of indices whose range is inside their dim; Jittor's string expressions parse
into index arithmetic and nothing else, and a zero divisor is an error or 0, never a signal."""
import re
import subprocess
import sys

import numpy as np
import pytest

import jtmini as jt
from jtmini import codegen, schedule
from jtmini.symbolic import IndexExprError, indices, num, parse, sym

i = indices("i")
a, b = sym("a"), sym("b")
EXPRESSIONS = [(a + 1) // 3, (a - 2) % 3, a * 2 - b, -a // 2, (a * 3 + b) % 4, (a - b) // 2 % 2,
               a % 5 - b // 3, (a - 7) // 3, a * b, -a % 4, (b - a * 2) // 5 + a % 2]


@pytest.mark.parametrize("expr", EXPRESSIONS, ids=lambda e: e.source())
def test_every_value_lies_in_the_range(expr):
    rng = np.random.default_rng(0)
    for _ in range(200):
        ranges = {}
        for name in "ab":
            low = int(rng.integers(-9, 10))
            ranges[name] = (low, low + int(rng.integers(0, 13)))
        low, high = expr.interval(ranges)
        values = [expr.evaluate({"a": x, "b": y}) for x in range(ranges["a"][0], ranges["a"][1] + 1)
                  for y in range(ranges["b"][0], ranges["b"][1] + 1)]
        assert low <= min(values) and max(values) <= high, (ranges, (low, high), min(values), max(values))


def test_evaluation_follows_c():
    assert ((a - 7) // 3).evaluate({"a": 0}) == -2 and ((a - 7) % 3).evaluate({"a": 0}) == -1
    assert (i[0] // (i[1] - 2)).evaluate({"i0": 5, "i1": 2}) == 0      # a zero divisor gives 0


def test_ranges_are_tight_where_codegen_needs_them():
    assert ((i[2] + 1) // 2).interval({"i2": (0, 6)}) == (0, 3)          # a stride-2 tap: inside 4
    assert (i[1] - 1).interval({"i1": (0, 6)}) == (-1, 5)                # a padded edge: checked
    t1, t2 = sym("t0_1"), sym("t0_2")
    assert ((i[0] * t1 + i[1]) // 3 % t2).interval({"i0": (0, 1), "i1": (0, 2), "t0_1": (3, 3),
                                                     "t0_2": (2, 2)}) == (0, 1)


def test_anything_else_has_no_known_range():
    from jtmini.symbolic import clamp, read
    assert read(0, i[0]).interval({"i0": (0, 3)}) is None
    assert (i[0] // sym("j")).interval({"i0": (0, 3)}) is None
    assert clamp(i[0], 4).interval({}) == (0, 3)


def test_building_simplifies_and_renders_c():
    assert (i[0] + 0).render() == "i0" and (i[0] * 1 - 0).render() == "i0"
    assert (i[0] + 2 - 2).render() == "i0" and (i[0] - i[0]).value == 0
    assert ((i[1] + 1) * 3).render() == "((i1 + 1) * 3)"
    assert (i[0] // sym("n")).render() == "jt_idiv(i0, n)"          # may be zero at run time
    assert (i[0] // 4 % 3).render() == "((i0 / 4) % 3)"
    assert (i[0] * 4 + i[1] * 2 + 3).linear(["i0", "i1"], {}) == ([4, 2], 3)
    assert (i[0] * i[1]).linear(["i0", "i1"], {}) is None
    assert parse("i0 / 2 + xshape1") == i[0] // 2 + sym("xshape1")


@pytest.mark.parametrize("text", ['(system("touch /tmp/jtmini_pwned"), 0)', "i0; system(0)", "lambda: 0",
                                  "i0 << 1", "1.5 * i0", "i0[0]", "__import__('os')", "i0 +", "sizeof(int)",
                                  "i0 /* c */", "x0", "@e0(i0", "99999999999999999999"])
def test_anything_but_index_arithmetic_is_refused(text):
    with pytest.raises(IndexExprError) as error:
        parse(text)
    assert repr(text) in str(error.value)


@pytest.mark.parametrize("text", ["i0/0", "i0 % 0", "i0/(i0-i0)", "i0 % (2 - 2)"])
def test_a_constant_zero_divisor_is_refused(text):
    with pytest.raises(ValueError, match="division by zero"):
        jt.ones(3).reindex([3], [text])


def test_a_divisor_that_becomes_zero_when_replaced_gives_zero_as_at_run_time():
    expr = i[0] // sym("n") + i[0] % sym("n")
    assert expr.replace(lambda e: num(0) if e.args[0] == "n" else None) == num(0)


@pytest.mark.parametrize("specialize", [True, False])
def test_an_empty_window_is_read_with_dims_compiled_in_or_not(specialize):
    """x[None, 3:2, :-1]: its gradient and its setitem divide by the window's 0 dim."""
    a = np.arange(25.0, dtype=np.float32).reshape(5, 5)
    with jt.flag_scope(specialize_shapes=specialize):
        x = jt.array(a)
        y = x[None, 3:2, :-1]
        gx = jt.grad((y * jt.zeros((1, 0, 4))).sum() + x[0, 0], x)
        np.testing.assert_array_equal(gx.numpy(), np.eye(1, 25).reshape(5, 5))
        x[None, 3:2, :-1] = jt.zeros((0, 4))
        np.testing.assert_array_equal(x.numpy(), a)


def test_injected_expressions_never_reach_the_compiler(tmp_path):
    marker = tmp_path / "pwned"
    x = jt.ones(3)
    for text in [f'(system("touch {marker}"), 0)', f'i0; system("touch {marker}")', "[](){return 0;}()"]:
        for build in (lambda: x.reindex([3], [text]), lambda: x.reindex([3], ["i0"], overflow_conditions=[text]),
                      lambda: x.reindex_reduce("add", [3], [text])):
            with pytest.raises(ValueError, match=re.escape(repr(text))):
                build()
    assert not marker.exists()


def test_names_beyond_the_ranks_are_refused():
    x = jt.ones(3, 4)
    with pytest.raises(ValueError, match="i2"):
        x.reindex([3, 4], ["i0", "i2"])
    with pytest.raises(ValueError, match="xshape2"):
        x.reindex([3, 4], ["i0", "xshape2 - 1"])
    with pytest.raises(ValueError, match="@e1"):
        x.reindex([3, 4], ["@e1(i0)", "i1"], extras=[jt.array([0, 1, 2])])
    with pytest.raises(ValueError, match="2 indices"):
        x.reindex([3, 4], ["@e0(i0, i1)", "i1"], extras=[jt.array([0, 1, 2])])


def test_a_divisor_zero_at_run_time_gives_zero_in_a_child_process():
    code = ("import jtmini as jt, numpy as np\n"
            "x = jt.array(np.arange(4, dtype=np.float32))\n"
            "zero = jt.array(np.zeros(4, np.int32))\n"
            "print(x.reindex([4], ['i0 / @e0(i0) + i0 % @e0(i0)'], extras=[zero]).numpy().tolist())\n"
            "print(x.reindex([4], ['i0 / (i0 - 1)']).numpy().tolist())\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == ["[0.0, 0.0, 0.0, 0.0]", "[0.0, 0.0, 2.0, 1.0]"]


def checked_dims(v):
    """How many bounds checks (``j >= 0 && j < dim``) the source of ``v``'s only kernel holds."""
    (kernel,) = schedule.plan([v])
    return len(re.findall(r"\bj\d+ >= 0 && j\d+ < ", codegen.generate(kernel).source))


def test_codegen_checks_only_the_indices_that_can_leave_their_dim():
    x_np = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = jt.array(x_np)
    padded = x.pad([1, 2]) * 2                        # only the last dim reaches outside x
    assert checked_dims(padded) == 1
    np.testing.assert_array_equal(padded.numpy(), np.pad(x_np, ((0, 0), (1, 2))) * 2)
    inside = x.reindex([3, 2], ["i0", "i1 * 2 + 1"]) + 1     # every read inside x: no check
    assert checked_dims(inside) == 0
    np.testing.assert_array_equal(inside.numpy(), x_np[:, 1::2] + 1)
    past = x.reindex([3, 3], ["i0", "i1 * 2"], overflow_value=-1) + 1    # the last column reads past
    assert checked_dims(past) == 1
    np.testing.assert_array_equal(past.numpy(), np.concatenate([x_np[:, 0:4:2], [[-1]] * 3], 1) + 1)


FOLDABLE = [(i[0] * 128 + i[1]) // 512, (i[0] * 128 + i[1]) % 512, (i[0] * 1024 + i[1] + 5) % 512,
            (i[0] * 4 + i[1] * 512) // 512, (i[0] * 128 + i[1] + 200) % 512, (i[0] * 3 + i[1]) // 6,
            (i[0] * 6 + i[1] * 2 + 1) % 12, (i[0] * 8 + i[1] - 3) // 16, (i[0] * 16 + i[1]) // 4 % 8]


@pytest.mark.parametrize("expr", FOLDABLE, ids=lambda e: e.source())
def test_taking_divisions_apart_keeps_every_value(expr):
    """Inside the ranges it was given, the folded expression takes the same value everywhere;
    where the ranges do not allow it (a remainder reaching past the divisor), nothing changes."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        ranges = {"i0": (0, int(rng.integers(0, 40))), "i1": (0, int(rng.integers(0, 140)))}
        folded = expr.fold_divisions(ranges)
        for v0 in range(ranges["i0"][1] + 1):
            for v1 in range(ranges["i1"][1] + 1):
                env = {"i0": v0, "i1": v1}
                assert folded.evaluate(env) == expr.evaluate(env), (expr.source(), folded.source(), ranges, env)


def test_a_division_is_taken_apart_only_where_the_ranges_prove_it():
    row = i[0] * 128 + i[1]
    assert (row // 512).fold_divisions({"i0": (0, 9), "i1": (0, 127)}).render() == "(i0 / 4)"
    assert (row % 512).fold_divisions({"i0": (0, 9), "i1": (0, 127)}).render() == "(((i0 % 4) * 128) + i1)"
    assert (row // 512).fold_divisions({"i0": (0, 9), "i1": (0, 128)}) == row // 512       # i1 may carry
    assert (row // 512).fold_divisions({"i0": (-1, 9), "i1": (0, 127)}) == row // 512      # C truncates
    assert (row // 512).fold_divisions({"i0": (0, 9)}) == row // 512                      # i1 unknown
    nested, ranges = (i[0] * 3 + i[1]) * 4 + i[2], {"i0": (0, 9), "i1": (0, 2), "i2": (0, 3)}
    assert (nested // 12).fold_divisions(ranges).render() == "i0"            # what is left divides again
    assert (nested % 12).fold_divisions(ranges).render() == "((i1 * 4) + i2)"


def test_a_reshaped_view_reads_its_rows_without_dividing_in_the_inner_loop():
    """A sum of reshaped row blocks of one buffer (an RNN's per-step weight gradients): the flat
    index of the reshape is taken apart, so the kernel's loop over a row divides nothing."""
    base_np = np.arange(12 * 512, dtype=np.float32).reshape(12, 512)
    base = jt.array(base_np) * 1
    base.sync()
    blocks = [base[4 * k:4 * k + 4].reshape(16, 128) for k in range(3)]
    total = blocks[0] + blocks[1] + blocks[2]
    (kernel,) = schedule.plan([total])
    source = codegen.generate(kernel).source
    inner = source[source.rindex("for (int64_t i1"):]
    assert not re.search(r"[/%] 512", inner), inner
    expect = sum(base_np[4 * k:4 * k + 4].reshape(16, 128) for k in range(3))
    np.testing.assert_array_equal(total.numpy(), expect)
