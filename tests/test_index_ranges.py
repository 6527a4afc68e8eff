"""index_ranges: the range of a C index expression must contain every value it takes (C's
truncating / and %), or codegen would drop a bounds check a read needs; and codegen drops exactly
the checks of indices whose range is inside their dim."""
import ast
import re

import numpy as np
import pytest

import jtmini as jt
from jtmini import codegen, schedule
from jtmini.index_ranges import interval


def c_div(x, d):
    q = abs(x) // abs(d)
    return q if (x >= 0) == (d > 0) else -q


def c_eval(node, names):
    """The value of a parsed expression with C's integer semantics."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.UnaryOp):
        value = c_eval(node.operand, names)
        return -value if isinstance(node.op, ast.USub) else value
    a, b = c_eval(node.left, names), c_eval(node.right, names)
    return {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
            ast.Div: lambda: c_div(a, b), ast.Mod: lambda: a - c_div(a, b) * b}[type(node.op)]()


EXPRESSIONS = ["(a + 1) / 3", "(a - 2) % 3", "a * 2 - b", "-(a) / 2", "(a * 3 + b) % 4", "((a) - (b)) / 2 % 2",
               "a % 5 - b / 3", "(a - 7) / 3", "a * b", "-a % 4", "(b - a * 2) / 5 + a % 2"]


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_every_value_lies_in_the_range(expr):
    rng = np.random.default_rng(0)
    tree = ast.parse(expr, mode="eval").body
    for _ in range(200):
        ranges = {}
        for name in "ab":
            low = int(rng.integers(-9, 10))
            ranges[name] = (low, low + int(rng.integers(0, 13)))
        low, high = interval(expr, ranges)
        values = [c_eval(tree, {"a": a, "b": b}) for a in range(ranges["a"][0], ranges["a"][1] + 1)
                  for b in range(ranges["b"][0], ranges["b"][1] + 1)]
        assert low <= min(values) and max(values) <= high, (ranges, (low, high), min(values), max(values))


def test_ranges_are_tight_where_codegen_needs_them():
    assert interval("((i2)+1)/2", {"i2": (0, 6)}) == (0, 3)             # a stride-2 tap: inside 4
    assert interval("((i1)-(1))", {"i1": (0, 6)}) == (-1, 5)            # a padded edge: checked
    assert interval("(((i0)*(t0_1)+i1)/(3))%(t0_2)", {"i0": (0, 1), "i1": (0, 2), "t0_1": (3, 3),
                                                     "t0_2": (2, 2)}) == (0, 1)


@pytest.mark.parametrize("expr", ["jt_clamp<int64_t>(i0, 4)", "in0[i0]", "i0 / j", "i0 / 0", "i0 << 1", "x ? 1 : 2"])
def test_anything_else_has_no_known_range(expr):
    assert interval(expr, {"i0": (0, 3)}) is None


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
