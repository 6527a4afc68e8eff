"""Errors are Python exceptions of the right type that name the offending value, raised when the
node is built; integer and indexing corner cases return values instead of crashing the process."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jtmini as jt

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_incompatible_broadcast_names_both_shapes():
    a, b = jt.zeros(3, 4), jt.zeros(5)
    for build in (lambda: a + b, lambda: a * b, lambda: a < b, lambda: jt.maximum(a, b), lambda: a & b):
        with pytest.raises(ValueError, match=r"\(3, 4\).*\(5,\)"):
            build()
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(3, 2\)"):
        jt.where(jt.ones(2, 3, dtype="bool"), jt.zeros(3, 2), 0.0)
    with pytest.raises(ValueError, match=r"\(3,\).*\(4,\)"):
        jt.zeros(3).broadcast_to((4,))
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(3,\)"):
        jt.zeros(2, 3).broadcast_to((3,))


@pytest.mark.parametrize("build,bad", [
    (lambda x: x.sum(dims=2), "2"), (lambda x: x.mean(-3), "-3"), (lambda x: x.max(dim=5), "5"),
    (lambda x: x.argmax(dim=2), "2"), (lambda x: x.argmin(-3), "-3"), (lambda x: x.transpose(0, 2), "2"),
    (lambda x: x.flip(3), "3"), (lambda x: jt.concat([x, x], 2), "2"), (lambda x: x.all(4), "4"),
    (lambda x: jt.stack([x, x], 3), "3"), (lambda x: jt.stack([x, x], -4), "-4"),
])
def test_bad_axis_raises_index_error_naming_it(build, bad):
    with pytest.raises(IndexError, match=rf"(?<![\d-]){bad}(?!\d)"):
        build(jt.zeros(2, 3))


@pytest.mark.parametrize("target,shown", [((5, 5), r"\(5, 5\)"), ((-1, 5), r"\(-1, 5\)"), ((-1, -1), r"\(-1, -1\)"),
                                          ((3, -2), r"\(3, -2\)"), ((0, -1), r"\(0, -1\)")])
def test_bad_reshape_names_the_target(target, shown):
    with pytest.raises(ValueError, match=shown):
        jt.zeros(3, 4).reshape(target)


@pytest.mark.parametrize("build", [
    lambda: jt.array(np.array([1 + 2j])), lambda: jt.array([1 + 2j]), lambda: jt.array(np.zeros(2, np.complex64)),
    lambda: jt.array([1.0], dtype="complex64"), lambda: jt.array([1.0], dtype="bfloat16"),
    lambda: jt.zeros(3, dtype="complex128"), lambda: jt.ones(2).cast("bfloat16"), lambda: jt.ones(2).astype(np.complex128),
    lambda: jt.full((2,), 1, "uint128"), lambda: jt.array(np.zeros(2, np.float128)), lambda: jt.array(["a", "b"]),
    lambda: jt.array([object()]), lambda: jt.randn(2, dtype="bfloat16"), lambda: jt.ones(2).cast("no_such_type"),
])
def test_unsupported_dtype_is_a_type_error(build):
    with pytest.raises(TypeError):
        build()


def test_type_error_message_lists_supported_dtypes():
    with pytest.raises(TypeError, match="float16.*float32"):
        jt.zeros(2).cast("complex64")


@pytest.mark.parametrize("a,b", [((3, 4), (5, 6)), ((3,), (4,)), ((2, 3), (2,)), ((5,), (4, 3)),
                                 ((2, 3, 4), (3, 4, 5)), ((2, 3), (4, 2, 3))])
def test_matmul_mismatch_names_both_shapes(a, b):
    pattern = rf"{_shape_re(a)}.*{_shape_re(b)}"
    with pytest.raises(ValueError, match=pattern):
        jt.zeros(*a) @ jt.zeros(*b)
    with pytest.raises(ValueError, match=pattern):
        jt.matmul(jt.zeros(*a), jt.zeros(*b))


def _shape_re(shape):
    return "\\(" + ", ".join(map(str, shape)) + (",\\)" if len(shape) == 1 else "\\)")


def test_matmul_of_a_scalar():
    with pytest.raises(ValueError, match=r"\(\)"):
        jt.zeros(()) @ jt.zeros(3)


@pytest.mark.parametrize("a,b", [(1, 1), ([1], [1]), ([[1]], [1]), (np.ones(2, "float32"), [1.0, 2.0])])
def test_matmul_refuses_lists_and_numbers(a, b):
    # as Jittor's and PyTorch's: a list is ambiguous about dtype and device; the message says what to write
    with pytest.raises(TypeError, match=r"Var or a numpy array.*jt\.array"):
        jt.matmul(a, b)


def test_matmul_takes_numpy_arrays():
    a, b = np.arange(6, dtype="float32").reshape(2, 3), np.ones((3, 2), "float32")
    np.testing.assert_array_equal(jt.matmul(a, jt.array(b)).numpy(), a @ b)
    np.testing.assert_array_equal(jt.matmul(jt.array(a), b).numpy(), a @ b)


def test_other_value_errors():
    x = jt.zeros(2, 3)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 4\)|\(2, 4\).*\(2, 3\)"):
        jt.concat([x, jt.zeros(2, 4)], 0)
    with pytest.raises(ValueError, match="permutation"):
        x.permute(0, 0)
    with pytest.raises(ValueError, match="one index expression per input dim"):
        x.reindex([2], ["i0"])
    with pytest.raises(ValueError, match="bogus"):
        x.reindex_reduce("bogus", [2], ["i0"])
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        x.item()
    with pytest.raises(ValueError):
        jt.zeros(0).max()
    with pytest.raises(ValueError):
        jt.zeros(0, 2).argmax(0)
    with pytest.raises(ValueError, match="-2"):
        jt.zeros(3, -2)
    with pytest.raises(ValueError):
        jt.randint(5, 5)
    with pytest.raises(ValueError):
        jt.pad(x, (1,))
    assert len(jt.array(1.0)) == 1          # Jittor's shape [1]
    with pytest.raises(TypeError):
        [0, 1][jt.array(1.0)]
    with pytest.raises(AttributeError, match="no_such_flag"):
        jt.flags.no_such_flag


@pytest.mark.parametrize("build,shown", [
    (lambda x: jt.max(x, x), r"max: dims .* got Var; the elementwise maximum .* jt\.maximum"),
    (lambda x: jt.min(x, x), r"jt\.minimum"),
    (lambda x: x.sum(1.0), r"sum: dims .* got float"),
    (lambda x: x.transpose(0, 1.5), r"dim must be an int, got float 1\.5"),
    (lambda x: x.reshape(2.5, 2), r"reshape of \(2, 3\): dims must be ints, got 2\.5"),
    (lambda x: x.reshape((3, 2.0)), r"got 2\.0"),
    (lambda x: jt.grad(3.0, x), r"loss must be a Var, got float"),
    (lambda x: jt.grad(x.sum(), [x, 2.0]), r"target 1 must be a Var, got float"),
])
def test_arguments_of_the_wrong_type_are_named(build, shown):
    with pytest.raises(TypeError, match=shown):
        build(jt.zeros(2, 3))


@pytest.mark.parametrize("build,shown", [
    (lambda: jt.transpose((3, 4)), r"jt\.transpose: the first argument must be a Var .*got tuple \(3, 4\)"),
    (lambda: jt.flip(-1), r"jt\.flip: .*got int -1"),
    (lambda: jt.floor_int(1.5), r"jt\.floor_int: .*got float 1\.5"),
    (lambda: jt.erf_(np.int64(3)), r"jt\.erf_: .*got int64 np\.int64\(3\)"),
    (lambda: jt.permute(None), r"jt\.permute: .*got NoneType None"),
    (lambda: jt.argmax("x" * 100), r"got str 'x{20,}\.\.\.; make one"),
])
def test_a_plain_value_where_a_var_belongs_is_a_type_error_naming_the_function(build, shown):
    # these reached for a Var's attribute deep inside: AttributeError: 'tuple' object has no attribute 'ndim'
    with pytest.raises(TypeError, match=shown):
        build()
    # what worked before still does: arrays and numbers where a function takes them
    assert jt.transpose(np.ones((2, 3))).shape == (3, 2) and jt.sum([1, 2, 3]).item() == 6
    assert jt.maximum(jt.array([1.0, -1.0]), 0).tolist() == [1.0, 0.0]


def test_broadcast_to_takes_an_int_and_refuses_what_is_not_a_shape():
    assert jt.array([1.0]).broadcast_to(3).tolist() == [1.0, 1.0, 1.0]      # numpy's and expand's int
    assert jt.broadcast_to(jt.array([1.0]), [2, 3]).shape == (2, 3)
    with pytest.raises(TypeError, match=r"dims must be ints, got 2\.5 in \(2\.5, 3\)"):
        jt.array([1.0]).broadcast_to((2.5, 3))           # was read as (2, 3)
    with pytest.raises(TypeError, match=r"broadcast_to: shape must be an int or a sequence of ints, got NoneType"):
        jt.array([1.0]).broadcast_to(None)


def test_zero_dim_vars_join_as_jittors_one_element_reductions():
    """Jittor's full reductions have shape [1]: its programs concatenate them, and stack them with
    (1,) Vars (retinanet's focal loss stacks ``x.mean()`` values with a ``zeros((1,))``)."""
    x = jt.array([1.0, 3.0])
    np.testing.assert_array_equal(jt.concat([x.mean(), x.sum()]).numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(jt.stack([x.mean(), jt.zeros((1,))]).numpy(), [[2.0], [0.0]])
    np.testing.assert_array_equal(jt.stack([jt.array(1.0), 2.0]).numpy(), [1.0, 2.0])
    with pytest.raises(ValueError, match=r"0-d Vars cannot be concatenated \(shapes \[\(\), \(1, 2\)\]\).*jt\.stack"):
        jt.concat([jt.array(1.0), jt.zeros((1, 2))])
    with pytest.raises(ValueError, match=r"stack: all Vars must have one shape, got \[\(\), \(2,\)\]"):
        jt.stack([x.mean(), x])


def test_reductions_and_joins_take_arrays_as_numpy_does():
    assert jt.sum([1, 2, 3]).item() == 6 and jt.mean([1.0, 2.0]).item() == 1.5 and jt.max(np.arange(4)).item() == 3
    np.testing.assert_array_equal(jt.concat([np.ones(2, "float32"), jt.zeros(1)]).numpy(), [1, 1, 0])


def test_bad_index_expression_names_it():
    with pytest.raises(ValueError, match="i3"):
        jt.zeros(2, 3).reindex([2, 3], ["i0", "i3"]).sync()


CRASHERS = """
import numpy as np
import jtmini as jt
out = []
for dt in ("int32", "int64"):
    lo = np.iinfo(dt).min
    a = jt.array(np.array([7, -7, 0, lo, lo], dt))
    b = jt.array(np.array([0, 0, 0, 0, -1], dt))
    out += [(a // b).numpy().tolist(), (a % b).numpy().tolist(), (a // 0).numpy().tolist(), (a % 0).numpy().tolist()]
    out.append((a / b).numpy().tolist()[:2])
    out.append((jt.array(np.array([2, 3], dt)) ** (jt.array(np.array([1000, -5], dt)) + 0)).shape)
x = jt.arange(10).float32()
out.append(x.reindex([4], ["i0 + 1000000000000"], overflow_value=-1).numpy().tolist())
out.append(x.reindex([4], ["i0 - 4611686018427387904"], overflow_value=-2).numpy().tolist())
out.append(x.reindex([2, 3], ["i0 * 100000000000 + i1"], overflow_value=-3).numpy().tolist())
out.append(x.reindex_reduce("add", [3], ["i0 * 1000000000000"]).numpy().tolist())
idx = jt.array(np.array([10 ** 9, -(10 ** 9), 3], np.int64))
out.append(x.reindex([3], ["@e0(i0)"], overflow_value=-4, extras=[idx]).numpy().tolist())
out.append(jt.grad(x.reindex([3], ["@e0(i0)"], extras=[idx]).sum(), x).numpy().tolist())
print(repr(out))
"""


def test_nothing_crashes_the_process():
    """Integer division by zero, INT_MIN // -1 and far out-of-bounds reindexes run in a child, so a
    SIGFPE or SIGSEGV shows up as a failed test, not as a dead test run."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(CRASHERS)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=REPO))
    assert done.returncode == 0, f"child died with status {done.returncode}:\n{done.stderr[-2000:]}"
    out = eval(done.stdout.strip().splitlines()[-1], {"inf": float("inf")})
    for k, dt in enumerate(("int32", "int64")):
        lo = int(np.iinfo(dt).min)
        floordiv, mod, by0, mod0, true_div, shape = out[6 * k: 6 * k + 6]
        assert floordiv == [0, 0, 0, 0, lo] and mod == [0, 0, 0, 0, 0]
        assert by0 == [0] * 5 and mod0 == [0] * 5
        assert true_div == [float("inf"), float("-inf")] and shape == (2,)
    far_up, far_down, grid, scattered, gathered, grad = out[12:]
    assert far_up == [-1.0] * 4 and far_down == [-2.0] * 4
    assert grid == [[0.0, 1.0, 2.0], [-3.0, -3.0, -3.0]]
    assert scattered == [0.0, 0.0, 0.0]             # only index 0 lands: x[0] == 0
    assert gathered == [-4.0, -4.0, 3.0]
    assert grad == [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]
