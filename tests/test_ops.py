"""Every op: value against numpy, gradient against PyTorch (float64), on random inputs that are
broadcast and read through non-contiguous views (transpose, strided ``reindex`` windows).

Oracles: numpy for values (same dtype), torch CPU for gradients (see conftest.check_grad).
"""
import operator

import numpy as np
import pytest
import torch

import jtmini as jt
from conftest import LAYOUTS, assert_var, check_grad, graph_nodes, make_input, numeric_grad

SHAPE = (3, 4)


def _any(rng, shape):
    return rng.standard_normal(shape) * 2


def _pos(rng, shape):
    return rng.uniform(0.5, 3.0, shape)


def _halves(rng, shape):        # integers and exact halves: round() must go half to even
    return rng.integers(-8, 9, shape) / 2


def _away_from_zero(rng, shape):
    return rng.uniform(0.5, 2.5, shape) * rng.choice([-1, 1], shape)


# --- unary ---------------------------------------------------------------------------------------
# name: (numpy reference, input domain, torch reference or None when the op has no gradient)
UNARY = {
    "neg": (np.negative, _any, torch.neg),
    "abs": (np.abs, _away_from_zero, torch.abs),
    "exp": (np.exp, _any, torch.exp),
    "log": (np.log, _pos, torch.log),
    "expm1": (np.expm1, _any, torch.expm1),
    "log1p": (np.log1p, _pos, torch.log1p),
    "sqrt": (np.sqrt, _pos, torch.sqrt),
    "sin": (np.sin, _any, torch.sin),
    "cos": (np.cos, _any, torch.cos),
    "tanh": (np.tanh, _any, torch.tanh),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), _any, torch.sigmoid),
    "relu": (lambda x: np.maximum(x, 0), _away_from_zero, torch.relu),
    "gelu": (lambda x: torch.nn.functional.gelu(torch.from_numpy(np.asarray(x, np.float64))).numpy()
             .astype(np.asarray(x).dtype), _any, torch.nn.functional.gelu),
    "floor": (np.floor, _any, torch.floor),
    "ceil": (np.ceil, _any, torch.ceil),
    "round": (np.round, _halves, torch.round),
    "sign": (np.sign, _any, torch.sign),
    "logical_not": (np.logical_not, lambda rng, s: rng.integers(-1, 2, s).astype(float), None),
}
FLOAT_ONLY = {"exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "sigmoid", "gelu"}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", UNARY)
def test_unary_value(name, layout, rng):
    ref, domain, _ = UNARY[name]
    value = domain(rng, SHAPE).astype(np.float32)
    x, _ = make_input(value, layout)
    assert_var(getattr(jt, name)(x), ref(value))
    assert_var(getattr(x, name)(), ref(value))


def _unary_dtype_cases():
    for name in UNARY:
        for dtype in ("float64", "int32", "int64", "bool"):
            if dtype == "int64" and name not in ("neg", "abs", "sign", "relu", "exp", "logical_not"):
                continue                 # int64 takes the same paths as int32: a few suffice
            if dtype == "bool" and name not in ("abs", "logical_not", "exp"):
                continue
            yield name, dtype


@pytest.mark.parametrize("name,dtype", list(_unary_dtype_cases()))
def test_unary_dtypes(name, dtype, rng):
    """Float ops keep float64 and turn ints/bools into float32; int ops keep ints; floor/ceil/round
    of an int are the int; logical_not gives bool."""
    ref, domain, _ = UNARY[name]
    value = domain(rng, SHAPE)
    value = (value > 0) if dtype == "bool" else np.round(value).astype(dtype) if "int" in dtype \
        else value.astype(dtype)
    x = jt.array(value)
    if name in FLOAT_ONLY and dtype != "float64":
        expected = ref(value.astype(np.float32))
    elif name == "logical_not":
        expected = np.logical_not(value)
    elif name == "abs" and dtype == "bool":
        expected = value
    else:
        expected = ref(value).astype(dtype)
    assert_var(getattr(jt, name)(x), expected)


@pytest.mark.parametrize("name", ["neg", "sign", "relu", "exp"])
def test_unary_on_bool(name):
    x = jt.array([True, False])
    if name in FLOAT_ONLY:
        assert_var(x.exp(), np.exp(np.array([1.0, 0.0], np.float32)))
    else:
        with pytest.raises(TypeError, match=name):
            getattr(x, name)()


def _grad_cases():
    for name, (_, _, t) in UNARY.items():
        if t is None:
            continue
        for layout in (LAYOUTS if name not in ("floor", "ceil", "round", "sign") else ["contig"]):
            yield name, layout


@pytest.mark.parametrize("name,layout", list(_grad_cases()))
def test_unary_grad(name, layout, rng):
    _, domain, t_fn = UNARY[name]
    check_grad(lambda x: getattr(x, name)(), t_fn, [domain(rng, SHAPE)], [layout], rng=rng)


@pytest.mark.parametrize("name", ["exp", "expm1", "log1p", "tanh", "sigmoid", "sqrt", "gelu"])
def test_unary_grad_float64(name, rng):
    _, domain, t_fn = UNARY[name]
    check_grad(lambda x: getattr(x, name)(), t_fn, [domain(rng, (2, 3, 2))], ["transposed"],
               dtype="float64", rng=rng)


def test_gelu_second_derivative_matches_pytorch(rng):
    x_np = rng.standard_normal(50) * 3
    x, tx = jt.array(x_np), torch.tensor(x_np, requires_grad=True)
    g = jt.grad((jt.grad((x.gelu() ** 2).sum(), x) * x).sum(), x)
    tg, = torch.autograd.grad((torch.nn.functional.gelu(tx) ** 2).sum(), tx, create_graph=True)
    tgg, = torch.autograd.grad((tg * tx).sum(), tx)
    np.testing.assert_allclose(g.numpy(), tgg.numpy(), rtol=1e-10, atol=1e-12)


def test_unary_chain_grad(rng):
    """A fused chain of unary ops, read through a strided window."""
    check_grad(lambda x: (x.sin() * x.exp()).tanh().abs().sqrt(),
               lambda x: (x.sin() * x.exp()).tanh().abs().sqrt(),
               [_away_from_zero(rng, (4, 3))], ["sliced"], rng=rng)


# --- cast ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("src", ["float32", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("dst", ["float32", "float64", "int32", "int64", "bool"])
def test_cast(src, dst, rng):
    value = (rng.standard_normal(SHAPE) * 5).astype(src) if src != "bool" else rng.random(SHAPE) > 0.5
    x, _ = make_input(value, "transposed")
    assert_var(x.cast(dst), value.astype(dst))     # float -> int truncates toward zero


def test_cast_spellings():
    x = jt.array([1.7, -1.7, 0.0])
    assert_var(x.astype("int32"), np.array([1, -1, 0], np.int32))
    assert_var(jt.cast(x, np.float64), np.array([1.7, -1.7, 0.0], np.float32).astype(np.float64))
    assert_var(x.int(), np.array([1, -1, 0], np.int32))
    assert_var(x.bool(), np.array([True, True, False]))
    assert_var(x.int64().float(), np.array([1, -1, 0], np.float32))
    assert x.cast(float).dtype == "float32" and x.cast(int).dtype == "int32" and x.cast(bool).dtype == "bool"


def test_cast_grad(rng):
    check_grad(lambda x: x.float64() * 3, lambda x: x * 3, [_any(rng, SHAPE)], ["sliced"], rng=rng)
    x = jt.array(_any(rng, SHAPE).astype(np.float32))
    assert_var(jt.grad(x.int32().float32().sum(), x), np.zeros(SHAPE, np.float32))   # ints stop it


# --- binary --------------------------------------------------------------------------------------
def _nonzero(rng, shape):
    return rng.uniform(0.5, 2.0, shape) * rng.choice([-1, 1], shape)


# name: (jtmini call, numpy reference, torch reference or None, domain of a, domain of b)
BINARY = {
    "add": (operator.add, np.add, torch.add, _any, _any),
    "sub": (operator.sub, np.subtract, torch.sub, _any, _any),
    "mul": (operator.mul, np.multiply, torch.mul, _any, _any),
    "div": (operator.truediv, np.divide, torch.div, _any, _nonzero),
    "floordiv": (operator.floordiv, np.floor_divide, None, _any, _nonzero),
    "mod": (operator.mod, np.mod, torch.remainder, _any, _nonzero),
    "pow": (operator.pow, np.power, torch.pow, _pos, _any),
    "maximum": (jt.maximum, np.maximum, torch.maximum, _any, _any),
    "minimum": (jt.minimum, np.minimum, torch.minimum, _any, _any),
}
# case: (shape of a, shape of b, layout of a, layout of b); None is a Python scalar
CASES = {
    "same": (SHAPE, SHAPE, "contig", "contig"),
    "noncontig": (SHAPE, SHAPE, "transposed", "sliced"),
    "bcast": ((3, 1, 5), (4, 1), "transposed", "contig"),
    "rank0": (SHAPE, (), "sliced", "contig"),
    "scalar": (SHAPE, None, "contig", None),
    "rscalar": (None, SHAPE, None, "transposed"),
}


def _operands(rng, case, dom_a, dom_b, dtype=np.float32):
    shape_a, shape_b, lay_a, lay_b = CASES[case]
    out = []
    for shape, lay, dom in ((shape_a, lay_a, dom_a), (shape_b, lay_b, dom_b)):
        if shape is None:
            out.append((float(np.float32(dom(rng, ()))),) * 2)
        else:
            value = dom(rng, shape).astype(dtype)
            out.append((make_input(value, lay)[0], value))
    return out


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", BINARY)
def test_binary_value(name, case, rng):
    fn, ref, _, dom_a, dom_b = BINARY[name]
    (a, a_np), (b, b_np) = _operands(rng, case, dom_a, dom_b)
    # numpy's float32 result: Python scalars are weak, as in jtmini
    expected = ref(np.asarray(a_np, np.float32), np.asarray(b_np, np.float32))
    tol = dict(rtol=1e-4) if name == "pow" else {}
    assert_var(fn(a, b), expected, **tol)


COMPARISONS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
               "gt": operator.gt, "ge": operator.ge}


@pytest.mark.parametrize("case", ["bcast", "noncontig", "scalar"])
@pytest.mark.parametrize("name", COMPARISONS)
def test_comparison(name, case, rng):
    ints = lambda rng, shape: rng.integers(-2, 3, shape).astype(float)   # noqa: E731 (ties happen)
    (a, a_np), (b, b_np) = _operands(rng, case, ints, ints)
    op = COMPARISONS[name]
    assert_var(op(a, b), op(np.asarray(a_np, np.float32), np.asarray(b_np, np.float32)))


def test_reflected_comparison():
    x = jt.array([1.0, 2.0, 3.0])
    assert_var(2 < x, np.array([False, False, True]))
    assert_var(2 == x, np.array([False, True, False]))
    assert_var(x.equal(2.0), np.array([False, True, False]))


LOGICAL = {"and": (operator.and_, np.logical_and), "or": (operator.or_, np.logical_or),
           "xor": (operator.xor, np.logical_xor)}


@pytest.mark.parametrize("name", LOGICAL)
def test_logical(name, rng):
    op, ref = LOGICAL[name]
    a_np, b_np = rng.random((3, 1, 5)) > 0.5, rng.random((4, 1)) > 0.5
    a, _ = make_input(a_np, "transposed")
    assert_var(op(a, jt.array(b_np)), ref(a_np, b_np))
    assert_var(op(a, True), ref(a_np, True))
    assert_var(op(False, a), ref(False, a_np))
    # the function forms take any dtype: nonzero is true
    i_np, f_np = rng.integers(-1, 2, (3, 4)).astype(np.int32), rng.integers(-1, 2, (3, 4)).astype(np.float32)
    assert_var(getattr(jt, f"logical_{name}")(jt.array(i_np), jt.array(f_np)), ref(i_np, f_np))


def _binary_grad_cases():
    for name in BINARY:
        for case in ("noncontig", "bcast", "scalar", "rscalar"):
            yield name, case


@pytest.mark.parametrize("name,case", list(_binary_grad_cases()))
def test_binary_grad(name, case, rng):
    fn, _, t_fn, dom_a, dom_b = BINARY[name]
    t_fn = t_fn or (lambda a, b: torch.div(a, b, rounding_mode="floor"))     # no gradient: zeros
    shape_a, shape_b, lay_a, lay_b = CASES[case]
    if shape_a is not None and shape_b is not None:
        check_grad(fn, t_fn, [dom_a(rng, shape_a), dom_b(rng, shape_b)], [lay_a, lay_b], rng=rng)
    elif shape_b is None:                                           # var op python scalar
        s = float(np.float32(dom_b(rng, ())))
        check_grad(lambda x: fn(x, s), lambda t: t_fn(t, torch.tensor(s, dtype=t.dtype)),
                   [dom_a(rng, shape_a)], [lay_a], rng=rng)
    else:                                                           # python scalar op var
        s = float(np.float32(dom_a(rng, ())))
        check_grad(lambda x: fn(s, x), lambda t: t_fn(torch.tensor(s, dtype=t.dtype), t),
                   [dom_b(rng, shape_b)], [lay_b], rng=rng)


def test_maximum_minimum_ties_split_gradient():
    check_grad(jt.maximum, torch.maximum, [[1.0, 2.0, 3.0], [1.0, 0.0, 3.0]])
    check_grad(jt.minimum, torch.minimum, [[1.0, 2.0, 3.0], [1.0, 0.0, 3.0]])


def test_float64_binary(rng):
    a_np, b_np = rng.standard_normal((3, 1)), rng.standard_normal((1, 4))
    a, b = jt.array(a_np), jt.array(b_np)
    assert_var(a * b + a / (b * b + 1), a_np * b_np + a_np / (b_np * b_np + 1))
    assert (jt.array([1.0], "float64") + 1e-12).numpy()[0] != 1.0      # really double precision
    check_grad(lambda a, b: a ** b, torch.pow, [_pos(rng, (3, 1)), _any(rng, (4,))], ["transposed", "contig"],
               dtype="float64", rng=rng)


# --- integer semantics ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_int_floordiv_mod_python_semantics(dtype):
    a_list = [a for a in range(-7, 8) for b in range(-3, 4)]
    b_list = [b for a in range(-7, 8) for b in range(-3, 4)]
    a, b = jt.array(np.array(a_list, dtype)), jt.array(np.array(b_list, dtype))
    assert_var(a // b, np.array([x // y if y else 0 for x, y in zip(a_list, b_list)], dtype))
    assert_var(a % b, np.array([x % y if y else 0 for x, y in zip(a_list, b_list)], dtype))
    assert_var(a // 0, np.zeros(len(a_list), dtype))        # no SIGFPE: integer x // 0 is 0
    assert_var(a % 0, np.zeros(len(a_list), dtype))
    assert_var(-7 // jt.array(np.array([2, -2, 0], dtype)), np.array([-4, 3, 0], dtype))


def test_int_true_division_is_float():
    a, b = jt.array(np.array([7, -7, 1], np.int32)), jt.array(np.array([2, 2, 0], np.int32))
    assert_var(a / b, np.array([3.5, -3.5, np.inf], np.float32))


def test_float_floordiv_mod_negatives():
    a = jt.array([7.5, -7.5, 7.5, -7.5])
    b = jt.array([2.0, 2.0, -2.0, -2.0])
    assert_var(a // b, np.floor_divide(a.numpy(), b.numpy()))
    assert_var(a % b, np.mod(a.numpy(), b.numpy()))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_int_pow(dtype):
    base, exp = np.meshgrid(np.arange(-3, 4), np.arange(0, 6))
    base, exp = base.astype(dtype), exp.astype(dtype)
    assert_var(jt.array(base) ** jt.array(exp), base ** exp)
    assert_var(jt.array(base) ** 2, base ** 2)
    assert_var(2 ** jt.array(exp), 2 ** exp)
    # a known negative integer exponent is refused, as numpy does; a lazy one is not computed to
    # check it, and the kernel truncates as C does: only +-1 survive
    negative = np.array([-3, -3, -2, -1, 0], dtype)
    with pytest.raises(ValueError, match="integers to negative integer powers"):
        jt.array(np.array([1, -1, -1, 2, 0], dtype)) ** jt.array(negative)
    assert_var(jt.array(np.array([1, -1, -1, 2, 0], dtype)) ** (jt.array(negative) + 0),
               np.array([1, -1, 1, 0, 1], dtype))


def test_int_ops_have_no_gradient():
    x = jt.array(np.array([1, 2, 3], np.int32))
    with pytest.raises(TypeError, match="the loss must be a float Var, got dtype int64"):   # as Jittor
        jt.grad((x * x).sum(), x.float32())
    with pytest.raises(TypeError, match="target 0 must be a float Var, got dtype int32"):
        jt.grad((x * x).sum().float32(), x)


# --- dtype promotion -----------------------------------------------------------------------------
PROMOTION = [
    ("float32", 2.5, "float32"), ("float64", 2.5, "float64"), ("int32", 0.5, "float32"),
    ("int64", 0.5, "float64"), ("int32", 3, "int32"), ("int64", 3, "int64"), ("bool", 3, "int32"),
    ("bool", True, "bool"), ("float32", 3, "float32"),
    ("int32", "int64", "int64"), ("int32", "float32", "float32"), ("float32", "float64", "float64"),
    ("int64", "float32", "float32"), ("bool", "int32", "int32"), ("bool", "float64", "float64"),
]


@pytest.mark.parametrize("a_dtype,b,result", PROMOTION)
def test_promotion(a_dtype, b, result):
    a_np = np.array([1, 0, 3]).astype(a_dtype)
    a = jt.array(a_np)
    if isinstance(b, str):
        b_np = np.array([2, 1, 1]).astype(b)
        other, expected = jt.array(b_np), a_np.astype(result) * b_np.astype(result)
    else:
        other, expected = b, (a_np.astype(result) * np.array(b, result)).astype(result)
    assert_var(a * other, expected)
    assert_var(other * a, expected)
    assert (a + other).dtype == result and (a < other).dtype == "bool" and (a == other).dtype == "bool"


def test_division_promotion():
    assert (jt.array(np.array([1], np.int64)) / 2).dtype == "float64"        # as Jittor: by width
    assert (jt.array(np.array([1], np.int32)) / 2).dtype == "float32"
    assert (jt.array(np.array([1.0], np.float64)) / 2).dtype == "float64"
    assert jt.array([1.0]).exp().dtype == "float32"


def test_weak_scalars_share_one_constant_node_safely():
    from jtmini.var import pending_roots
    a_np = np.array([1.5, -2.0, 3.0], np.float32)
    a = jt.array(a_np)
    y, z = a * 0.5, a * 0.5
    assert y.inputs[1] is z.inputs[1]                      # one node for (shape, dtype, 0.5)
    assert (a * 0.5).inputs[1] is not (a * 0.25).inputs[1] is not (jt.array([1, 2, 3]) * 2).inputs[1]
    assert (a * -0.0).inputs[1] is not (a * 0.0).inputs[1]
    np.testing.assert_array_equal(np.signbit((a * -0.0).numpy()), np.signbit(a_np * -0.0))
    assert not any(v.op == "const" for v in pending_roots())   # nothing to compute, never realized
    y += 1                                                 # rebinding a Var built from it
    np.testing.assert_array_equal(y.numpy(), a_np * 0.5 + 1)
    np.testing.assert_array_equal(z.numpy(), a_np * 0.5)
    np.testing.assert_array_equal((a * 0.5).numpy(), a_np * 0.5)


def test_numpy_scalars_and_arrays_in_operators_give_vars_on_the_graph():
    """``np.float32(0.5) * x`` used to be computed by numpy into an array, off the graph: a loss
    scaled so had no gradient."""
    x_np = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = jt.array(x_np)
    for got, expected in [(np.float32(0.5) * x, 0.5 * x_np), (np.float64(1.5) + x, x_np + 1.5),
                          (np.int64(2) - x, 2 - x_np), (np.ones(3, np.float32) * x, x_np)]:
        assert_var(got, expected.astype(np.float32))
    np.testing.assert_array_equal(jt.grad((np.float32(0.5) * x * x).sum(), x).numpy(), x_np)
    assert isinstance(np.exp(x), np.ndarray)         # a ufunc still converts the Var


# --- where ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["same", "bcast", "scalars"])
def test_where(case, rng):
    if case == "same":
        c_shape, x_shape, y_shape = SHAPE, SHAPE, SHAPE
    else:
        c_shape, x_shape, y_shape = (3, 1), (1, 4), (2, 1, 1)
    cond_np = rng.random(c_shape) > 0.5
    x_np = rng.standard_normal(x_shape).astype(np.float32)
    y_np = rng.standard_normal(y_shape).astype(np.float32)
    cond, x = jt.array(cond_np), make_input(x_np, "transposed")[0]
    if case == "scalars":
        assert_var(jt.where(cond, x, 0.5), np.where(cond_np, x_np, np.float32(0.5)))
        assert_var(jt.where(cond, -1.0, 2.0), np.where(cond_np, np.float32(-1), np.float32(2)))
        assert_var(jt.where(cond.int32(), x, 0.5), np.where(cond_np, x_np, np.float32(0.5)))
    else:
        assert_var(jt.where(cond, x, jt.array(y_np)), np.where(cond_np, x_np, y_np))
    check_grad(lambda x, y: jt.where(jt.array(cond_np), x, y), lambda x, y: torch.where(torch.tensor(cond_np), x, y),
               [x_np, y_np], ["transposed", "sliced"], rng=rng)


def test_where_int_and_mixed():
    cond = jt.array([True, False, True])
    assert_var(jt.where(cond, jt.array(np.array([1, 2, 3], np.int32)), 0), np.array([1, 0, 3], np.int32))
    assert_var(jt.where(cond, jt.array(np.array([1, 2, 3], np.int32)), 0.5), np.array([1, 0.5, 3], np.float32))


# --- axpby (the optimizers' fused multiply-add) -------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_axpby(dtype, rng):
    from jtmini.ops.elementwise import axpby
    x_np, y_np = (rng.standard_normal(SHAPE).astype(dtype) for _ in range(2))
    x, y = make_input(x_np, "transposed")[0], make_input(y_np, "sliced")[0]
    got = axpby(0.9, x, -0.25, y)
    assert got.op == "axpby" and got.dtype == dtype
    assert_var(got, 0.9 * x_np.astype(np.float64) - 0.25 * y_np, dtype=dtype)
    check_grad(lambda x, y: axpby(0.9, x, -0.25, y), lambda x, y: 0.9 * x - 0.25 * y, [x_np, y_np],
               ["transposed", "sliced"], dtype=dtype, rng=rng)


def test_axpby_takes_other_operands_through_the_operators():
    from jtmini.ops.elementwise import axpby
    x, i = jt.array(np.ones((2, 3), np.float32)), jt.array(np.ones((3,), np.int32))
    assert_var(axpby(2, x, 3, i), np.full((2, 3), 5, np.float32))                 # broadcast, promotion
    assert_var(axpby(np.float32(2), x, 1, x), np.full((2, 3), 3, np.float32))     # a numpy scalar


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_axpby_square(dtype, rng):
    from jtmini.ops.elementwise import axpby_square
    x_np, y_np = (rng.standard_normal(SHAPE).astype(dtype) for _ in range(2))
    x, y = make_input(x_np, "transposed")[0], make_input(y_np, "sliced")[0]
    got = axpby_square(0.999, x, 0.001, y)
    assert got.op == "axpby_square" and got.dtype == dtype
    assert_var(got, 0.999 * x_np.astype(np.float64) + 0.001 * y_np.astype(np.float64) ** 2, dtype=dtype)
    # Adam's second moment as axpby of y * y built it: the same bits
    np.testing.assert_array_equal(got.numpy(), (0.999 * x + 0.001 * (y * y)).numpy())
    check_grad(lambda x, y: axpby_square(0.9, x, -0.25, y), lambda x, y: 0.9 * x - 0.25 * y * y, [x_np, y_np],
               ["transposed", "sliced"], dtype=dtype, rng=rng)


def test_axpby_square_takes_other_operands_through_the_operators(rng):
    from jtmini.ops.elementwise import axpby_square
    x, i = jt.array(np.ones((2, 3), np.float32)), jt.array(np.full((3,), 2, np.int32))
    assert_var(axpby_square(2, x, 3, i), np.full((2, 3), 14, np.float32))          # broadcast, promotion
    row = rng.standard_normal((1, 3))
    check_grad(lambda x, y: axpby_square(0.5, x, 2.0, y.broadcast_to((4, 3))),
               lambda x, y: 0.5 * x + 2.0 * y.expand(4, 3) ** 2, [rng.standard_normal((4, 3)), row],
               dtype="float64", rng=rng)


# --- relu's gradient ------------------------------------------------------------------------------
def test_relu_gradient_is_a_mask_as_in_pytorch():
    """0 where x <= 0 whatever d is (inf included), d elsewhere (a NaN x passes d on, as PyTorch's
    threshold_backward); its own gradient wrt d is the same mask."""
    x_np = np.array([-1.0, 0.0, 2.0, np.nan, 3.0], np.float32)
    d_np = np.array([np.inf, 5.0, 3.0, 7.0, np.nan], np.float32)
    x, d = jt.array(x_np), jt.array(d_np)
    (got,) = jt.grad((x.relu() * d).sum(), [x])
    assert got.op == "relu_grad"
    np.testing.assert_array_equal(got.numpy(), [0.0, 0.0, 3.0, 7.0, np.nan])
    xt = torch.tensor(x_np, requires_grad=True)
    torch.relu(xt).backward(torch.tensor(d_np))
    np.testing.assert_array_equal(got.numpy(), xt.grad.numpy())
    w = jt.array(np.ones(5, np.float32))
    (mask,) = jt.grad((jt.grad((x.relu() * w).sum(), [x])[0] * 2).sum(), [w])
    np.testing.assert_array_equal(mask.numpy(), [0.0, 0.0, 2.0, 2.0, 2.0])


# --- add_n (a convolution's input gradient: one gather per tap) ----------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_add_n(dtype, rng):
    from jtmini.ops.elementwise import add_n
    values = [rng.standard_normal(SHAPE).astype(dtype) for _ in range(4)]
    layouts = ["contig", "transposed", "sliced", "contig"]
    xs = [make_input(v, layout)[0] for v, layout in zip(values, layouts)]
    got = add_n(xs)
    assert got.op == "add_n" and got.dtype == dtype
    assert np.array_equal(got.numpy(), ((values[0] + values[1]) + values[2]) + values[3])   # left to right
    check_grad(lambda *xs: add_n(xs) * 3, lambda *xs: sum(xs) * 3, values, layouts, dtype=dtype, rng=rng)
    assert add_n(xs[:1]) is xs[0]


def test_add_n_refuses_mixed_shapes_and_dtypes():
    from jtmini.ops.elementwise import add_n
    a, b = jt.ones((2, 3)), jt.ones((3, 2))
    for bad in ([a, b], [a, a.float64()], []):
        with pytest.raises(ValueError, match="add_n needs Vars of one shape and dtype"):
            add_n(bad)


# --- movement: reshape, broadcast, transpose, concat, stack, flip, pad ---------------------------
RESHAPES = [((2, 3, 4), (6, -1), "transposed"), ((2, 3, 4), (-1,), "sliced"), ((2, 3, 4), (4, 3, 2), "contig"),
            ((2, 3, 4), (4, 3, 2), "transposed"), ((3, 4), (2, 1, -1, 3), "sliced"), ((6,), (1, 6, 1), "contig"),
            ((3, 4), (-1,), "transposed")]


@pytest.mark.parametrize("shape,target,layout", RESHAPES)
def test_reshape(shape, target, layout, rng):
    value = rng.standard_normal(shape).astype(np.float32)
    x, _ = make_input(value, layout)
    assert_var(x.reshape(target), value.reshape(target))
    assert_var(x.view(*target), value.reshape(target))
    assert_var(jt.reshape(x, list(target)), value.reshape(target))
    check_grad(lambda x: x.reshape(target) * 2, lambda x: x.reshape(target) * 2, [value], [layout], rng=rng)


BROADCASTS = [((3, 1), (2, 3, 4)), ((4,), (3, 4)), ((1, 1), (2, 5)), ((2, 1, 3), (2, 4, 3)), ((), (2, 2))]


@pytest.mark.parametrize("shape,target", BROADCASTS)
def test_broadcast_to(shape, target, rng):
    value = rng.standard_normal(shape).astype(np.float32)
    layout = "transposed" if len(shape) > 1 else "contig"
    x, _ = make_input(value, layout)
    assert_var(x.broadcast_to(target), np.broadcast_to(value, target))
    assert_var(jt.broadcast(x, target), np.broadcast_to(value, target))
    check_grad(lambda x: x.broadcast_to(target), lambda x: x.broadcast_to(target), [value], [layout], rng=rng)


def test_jittor_broadcast_dims(rng):
    """``x.broadcast(shape_or_var, dims)``: ``dims`` are the output dims ``x`` lacks."""
    v3 = rng.standard_normal(3).astype(np.float32)
    assert_var(jt.array(v3).broadcast((2, 3, 4), [0, 2]), np.broadcast_to(v3[None, :, None], (2, 3, 4)))
    assert_var(jt.array(v3).broadcast([2, 3, 4], dims=[0, -1]), np.broadcast_to(v3[None, :, None], (2, 3, 4)))
    v24 = rng.standard_normal((2, 4)).astype(np.float32)
    like = jt.zeros(2, 3, 4)
    x, _ = make_input(v24, "transposed")
    assert_var(x.broadcast(like, [1]), np.broadcast_to(v24[:, None, :], (2, 3, 4)))
    assert_var(jt.broadcast(jt.array(v3), like, [0, 2]), np.broadcast_to(v3[None, :, None], (2, 3, 4)))
    check_grad(lambda x: x.broadcast((2, 5, 3, 4), [1]), lambda x: x[:, None].expand(2, 5, 3, 4),
               [rng.standard_normal((2, 3, 4))], ["sliced"], rng=rng)


PERMS = [((), (2, 1, 0), "contig"), ((0, 2), (2, 1, 0), "sliced"), ((1, 2, 0), (1, 2, 0), "contig"),
         ((1, 2, 0), (1, 2, 0), "sliced"), (((2, 0, 1),), (2, 0, 1), "sliced"), ((-1, -2), (0, 2, 1), "contig"),
         ((0, 1, 2), (0, 1, 2), "sliced")]


@pytest.mark.parametrize("args,perm,layout", PERMS)
def test_transpose_permute(args, perm, layout, rng):
    value = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x, _ = make_input(value, layout)
    assert_var(x.transpose(*args), value.transpose(perm))
    assert_var(jt.permute(x, *args) if args else x.permute(), value.transpose(perm))
    check_grad(lambda x: x.transpose(*args) * x.transpose(*args), lambda x: x.permute(perm) ** 2,
               [value], [layout], rng=rng)


def test_transpose_2d_and_of_transpose(rng):
    value = rng.standard_normal((3, 5)).astype(np.float32)
    x = jt.array(value)
    assert_var(x.transpose(), value.T)
    assert_var(x.transpose(0, 1), value.T)
    assert_var(x.transpose(1, 0), value.T)
    assert_var(x.transpose().transpose(), value)
    assert_var(x.transpose() + 1, value.T + 1)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_concat(dim, rng):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [tuple(s if k != dim % 3 else n for k, s in enumerate(shape)) for shape, n in zip(shapes, (1, 2, 3))]
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    layouts = ["contig", "transposed", "sliced"]
    xs = [make_input(v, lay)[0] for v, lay in zip(values, layouts)]
    assert_var(jt.concat(xs, dim), np.concatenate(values, dim))
    assert_var(jt.cat(xs, dim=dim), np.concatenate(values, dim))
    check_grad(lambda *xs: jt.concat(xs, dim), lambda *xs: torch.cat(xs, dim), values, layouts, rng=rng)


def test_concat_dtypes_and_single(rng):
    a, b = np.arange(3, dtype=np.int32), np.array([0.5, 1.5], np.float32)
    assert_var(jt.concat([jt.array(a), jt.array(b)]), np.concatenate([a, b]).astype(np.float32))
    assert_var(jt.concat([jt.array(a), jt.array(a)]), np.concatenate([a, a]))
    assert_var(jt.concat([jt.array(b)]), b)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_stack(dim, rng):
    values = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(3)]
    layouts = ["contig", "transposed", "sliced"]
    xs = [make_input(v, lay)[0] for v, lay in zip(values, layouts)]
    assert_var(jt.stack(xs, dim), np.stack(values, dim))
    check_grad(lambda *xs: jt.stack(xs, dim), lambda *xs: torch.stack(xs, dim), values, layouts, rng=rng)


@pytest.mark.parametrize("dims", [None, 0, -1, (0, 2), [1]])
def test_flip(dims, rng):
    value = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x, _ = make_input(value, "transposed")
    np_dims = 0 if dims is None else dims          # Jittor's default: dim 0
    assert_var(x.flip(dims) if dims is not None else x.flip(), np.flip(value, np_dims))
    assert_var(jt.flip(x, dim=np_dims), np.flip(value, np_dims))
    assert_var(jt.flip(x, dims=np_dims), np.flip(value, np_dims))     # PyTorch's keyword
    t_dims = list(np_dims) if isinstance(np_dims, (tuple, list)) else [np_dims]
    check_grad(lambda x: jt.flip(x, np_dims), lambda x: torch.flip(x, t_dims), [value], ["transposed"], rng=rng)


PADS = [((1, 1), 0.0), ((1, 2, 0, 3), -1.0), ((0, 0, 2, 1, 1, 0), 0.5), ((3, 0), 2.0)]


@pytest.mark.parametrize("padding,value", PADS)
def test_pad(padding, value, rng):
    x_np = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x, _ = make_input(x_np, "sliced")
    widths = [(0, 0)] * 3
    for k in range(len(padding) // 2):
        widths[2 - k] = (padding[2 * k], padding[2 * k + 1])
    assert_var(jt.pad(x, padding, value=value), np.pad(x_np, widths, constant_values=value))
    check_grad(lambda x: x.pad(padding, value=value), lambda x: torch.nn.functional.pad(x, padding, value=value),
               [x_np], ["sliced"], rng=rng)


def test_int_movement(rng):
    value = rng.integers(-9, 9, (2, 3, 4)).astype(np.int32)
    x = jt.array(value)
    assert_var(x.transpose(2, 0, 1).reshape(4, 6).flip(0), np.flip(value.transpose(2, 0, 1).reshape(4, 6), 0))
    assert_var(jt.concat([x, x], 1).pad((1, 1), value=7), np.pad(np.concatenate([value, value], 1),
                                                                    [(0, 0), (0, 0), (1, 1)], constant_values=7))
    b = jt.array(value > 0)
    assert_var(jt.stack([b, ~b]).transpose(), np.stack([value > 0, value <= 0]).transpose())


# --- reductions ----------------------------------------------------------------------------------
REDUCE = {"sum": (np.sum, torch.sum), "mean": (np.mean, torch.mean), "max": (np.max, torch.amax),
          "min": (np.min, torch.amin), "prod": (np.prod, None)}
DIMS = [(None, False), (None, True), (1, False), (-1, True), ((0, 2), False), ((0, 2), True)]


def _torch_prod(x, dims, keepdims):
    if dims is None:
        return x.prod().reshape((1,) * x.ndim if keepdims else ())
    for d in sorted((d % x.ndim for d in ([dims] if isinstance(dims, int) else dims)), reverse=True):
        x = x.prod(d, keepdim=keepdims)
    return x


@pytest.mark.parametrize("dims,keepdims", DIMS)
@pytest.mark.parametrize("name", REDUCE)
def test_reduce(name, dims, keepdims, rng):
    ref, t_ref = REDUCE[name]
    value = (rng.uniform(0.5, 1.5, (2, 3, 4)) * rng.choice([-1, 1], (2, 3, 4))).astype(np.float32)
    layout = "transposed" if keepdims else "sliced"
    x, _ = make_input(value, layout)
    expected = ref(value.astype(np.float64), axis=dims, keepdims=keepdims).astype(np.float32)
    assert_var(getattr(x, name)(dims, keepdims), expected)
    assert_var(getattr(jt, name)(x, dims=dims, keepdims=keepdims), expected)
    if name == "prod":
        t_fn = lambda t: _torch_prod(t, dims, keepdims)      # noqa: E731
    elif dims is None:
        t_fn = (lambda t: t_ref(t, dim=tuple(range(3)), keepdim=True)) if keepdims else t_ref
    else:
        t_fn = lambda t: t_ref(t, dim=dims, keepdim=keepdims)   # noqa: E731
    check_grad(lambda x: getattr(x, name)(dims=dims, keepdims=keepdims), t_fn, [value], [layout], rng=rng)


def test_reduce_spellings(rng):
    value = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x = jt.array(value)
    assert_var(x.sum(dim=1), value.sum(1), rtol=1e-5, atol=1e-5)
    assert_var(x.sum(axis=(0, 1), keepdim=True), value.sum((0, 1), keepdims=True), atol=1e-5)
    assert_var(x.mean([0, 2]), value.mean((0, 2)), atol=1e-6)
    assert_var(x.max(dim=2), value.max(2))
    assert_var(jt.min(x, 0), value.min(0))


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_reduce_int(dtype, rng):
    value = rng.integers(-3, 4, (3, 5)).astype(dtype)
    x = jt.array(value)
    wide = "int64" if dtype in ("int32", "bool") else dtype
    assert_var(x.sum(), np.array(value.astype(wide).sum(), wide))
    assert_var(x.sum(1), value.astype(wide).sum(1))
    assert_var(x.prod(0), value.astype(wide).prod(0))
    assert_var(x.max(1), value.max(1))
    assert_var(x.min(0, keepdims=True), value.min(0, keepdims=True))
    assert_var(x.mean(1), value.astype(np.float64).mean(1).astype(np.float32))


def test_sum_large_int32_widens():
    x = jt.full((1000,), 2 ** 30, "int32")
    assert x.sum().item() == 1000 * 2 ** 30


def test_full_reductions(rng):
    value = rng.standard_normal((4, 5)).astype(np.float32)
    x, _ = make_input(value, "transposed")
    s = x.sum()
    assert s.shape == () and s.ndim == 0 and s.dtype == "float32"
    assert s.item() == pytest.approx(float(value.astype(np.float64).sum()), rel=1e-5, abs=1e-5)
    assert isinstance(s.item(), float)
    assert s.data.shape == (1,) and s.data[0] == pytest.approx(s.item())
    assert x.mean().item() == pytest.approx(float(value.astype(np.float64).mean()), rel=1e-5, abs=1e-6)
    assert x.max().item() == value.max() and x.min().item() == value.min()
    assert x.prod().item() == pytest.approx(float(value.astype(np.float64).prod()), rel=1e-5)
    assert (x > 0).sum().item() == int((value > 0).sum())
    assert isinstance((x > 0).sum().item(), int)
    big = jt.ones(100000)
    assert big.sum().item() == 100000.0 and big.mean().item() == 1.0


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dim,keepdims", [(0, False), (1, False), (-1, True), (None, False)])
def test_argmax_argmin(name, dim, keepdims, rng):
    value = rng.integers(-3, 4, (4, 5)).astype(np.float32)      # ties: the first index wins
    x, _ = make_input(value, "transposed")
    index, extreme = getattr(x, name)(dim, keepdims) if dim is not None else getattr(x, name)()
    np_fn, np_val = (np.argmax, np.max) if name == "argmax" else (np.argmin, np.min)
    if dim is None:
        exp_index, exp_value = np_fn(value), np_val(value)
    else:
        exp_index = np_fn(value, axis=dim, keepdims=keepdims)
        exp_value = np_val(value, axis=dim, keepdims=keepdims)
    assert_var(index, np.asarray(exp_index, np.int32))
    assert_var(extreme, np.asarray(exp_value, np.float32))
    index2, _ = getattr(jt, name)(x, dim=dim, keepdims=keepdims) if dim is not None else getattr(jt, name)(x)
    assert_var(index2, np.asarray(exp_index, np.int32))


def test_argmax_int_and_grad(rng):
    value = rng.integers(-50, 50, (3, 6)).astype(np.int64)
    index, top = jt.array(value).argmax(dim=1)
    assert_var(index, np.argmax(value, 1).astype(np.int32))
    assert_var(top, value.max(1))
    f = rng.standard_normal((3, 6)).astype(np.float32)
    x = jt.array(f)
    _, top = x.argmax(dim=1)
    expected = (f == f.max(1, keepdims=True)).astype(np.float32)
    assert_var(jt.grad(top.sum(), x), expected)


@pytest.mark.parametrize("dtype", ["bool", "int32", "float32"])
def test_all_any(dtype, rng):
    value = (rng.random((3, 4)) > 0.3).astype(dtype) * (rng.integers(1, 3, (3, 4)) if dtype != "bool" else True)
    value = value.astype(dtype)
    value[0] = 1
    value[2] = 0
    x, _ = make_input(value, "transposed")
    assert_var(x.all(), np.array(value.all()))
    assert_var(x.any(), np.array(value.any()))
    assert_var(x.all(1), value.all(1))
    assert_var(x.any(dims=1), value.any(1))
    assert_var(jt.all(x, 0, keepdims=True), value.all(0, keepdims=True))
    assert_var(jt.any(x, -1, keepdims=True), value.any(-1, keepdims=True))
    assert x.all().item() is False and x.any().item() is True


# --- reindex / reindex_reduce --------------------------------------------------------------------
def _windows(x_np, k):
    from numpy.lib.stride_tricks import sliding_window_view
    return sliding_window_view(x_np, (k, k), axis=(2, 3))


def test_reindex_pooling_windows(rng):
    n, c, h, w = 2, 3, 6, 5
    x_np = rng.standard_normal((n, c, h, w)).astype(np.float32)
    x, _ = make_input(x_np, "transposed")
    win = x.reindex([n, c, h - 2, w - 2, 3, 3], ["i0", "i1", "i2+i4", "i3+i5"])
    assert_var(win, _windows(x_np, 3))
    assert_var(win.max(dims=(4, 5)), _windows(x_np, 3).max((4, 5)))
    assert_var(jt.reindex(x, [n, c, h - 2, w - 2, 3, 3], ["i0", "i1", "i2+i4", "i3+i5"]).mean(dims=[4, 5]),
               _windows(x_np, 3).mean((4, 5)), atol=1e-6)

    def pool(x):
        return x.reindex([n, c, h // 2, w // 2, 2, 2], ["i0", "i1", "i2*2+i4", "i3*2+i5"]).max(dims=(4, 5))
    check_grad(pool, lambda t: torch.nn.functional.max_pool2d(t, 2), [x_np], ["transposed"], rng=rng)


def _conv(x, w, padding):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = h + 2 * padding - kh + 1, wd + 2 * padding - kw + 1
    xx = x.reindex([n, o, c, oh, ow, kh, kw], ["i0", "i2", f"i3+i5-{padding}", f"i4+i6-{padding}"])
    ww = w.broadcast(xx, [0, 3, 4])
    return (xx * ww).sum(dims=[2, 5, 6])


@pytest.mark.parametrize("padding", [0, 1])
def test_reindex_conv(padding, rng):
    x_np = rng.standard_normal((2, 3, 5, 6))
    w_np = rng.standard_normal((4, 3, 3, 3))
    check_grad(lambda x, w: _conv(x, w, padding), lambda x, w: torch.nn.functional.conv2d(x, w, padding=padding),
               [x_np, w_np], ["sliced", "transposed"], rng=rng)


def test_reindex_overflow_value_and_conditions():
    x_np = np.arange(1, 7, dtype=np.float32)
    x = jt.array(x_np)
    assert_var(x.reindex([8], ["i0-1"], overflow_value=-1), np.array([-1, 1, 2, 3, 4, 5, 6, -1], np.float32))
    assert_var(x.reindex([6], ["i0"], overflow_value=9, overflow_conditions=["i0%2==1"]),
               np.array([1, 9, 3, 9, 5, 9], np.float32))
    assert_var(x.reindex([3], ["xshape0-1-i0"]), np.array([6, 5, 4], np.float32))
    assert_var(x.reindex([2, 3], ["i0*yshape1+i1"]), x_np.reshape(2, 3))
    assert_var(jt.array(np.arange(6, dtype=np.int32)).reindex([7], ["i0"], overflow_value=-5),
               np.array([0, 1, 2, 3, 4, 5, -5], np.int32))


def test_reindex_extras_gather(rng):
    x_np = rng.standard_normal((5, 3)).astype(np.float32)
    idx_np = np.array([4, 0, 0, 2, 7], np.int32)       # 7 is out of range: overflow_value
    x, idx = jt.array(x_np), jt.array(idx_np)
    got = x.reindex([5, 3], ["@e0(i0)", "i1"], overflow_value=0, extras=[idx])
    expected = np.where((idx_np < 5)[:, None], x_np[np.minimum(idx_np, 4)], 0)
    assert_var(got, expected)
    g = jt.grad((got * jt.array(np.arange(15, dtype=np.float32).reshape(5, 3))).sum(), x)
    expected_g = np.zeros((5, 3), np.float32)
    for k, i in enumerate(idx_np):
        if i < 5:
            expected_g[i] += np.arange(15, dtype=np.float32).reshape(5, 3)[k]
    assert_var(g, expected_g)


def test_reindex_extras_take_expressions_with_parentheses_and_nested_reads(rng):
    x_np = rng.standard_normal((6, 4)).astype(np.float32)
    rows_np = np.array([5, 3, 1], np.int32)
    order_np = np.array([2, 0, 1], np.int32)
    x, rows, order = jt.array(x_np), jt.array(rows_np), jt.array(order_np)
    # y[i, j] = x[rows[(i + 1) % 3] - 1, j];  z[i, j] = x[rows[order[i]], j]
    y = x.reindex([3, 4], ["@e0((i0+1)%3) - 1", "i1"], extras=[rows])
    assert_var(y, x_np[rows_np[(np.arange(3) + 1) % 3] - 1])
    z = x.reindex([3, 4], ["@e0(@e1(i0))", "i1"], extras=[rows, order])
    assert_var(z, x_np[rows_np[order_np]])
    with pytest.raises(ValueError, match=r"'@e0\(\(i0': expected \)"):
        x.reindex([3, 4], ["@e0((i0", "i1"], extras=[rows])


def test_reindex_grad_numeric(rng):
    x_np = rng.standard_normal((3, 4))

    def f(x):
        y = x.reindex([4, 3, 2], ["i1+i2-1", "i0"], overflow_value=0.5, overflow_conditions=["i0==i1"])
        return (y * y * jt.array(np.arange(24.0).reshape(4, 3, 2))).sum()
    x = jt.array(x_np)
    np.testing.assert_allclose(jt.grad(f(x), x).numpy(), numeric_grad(f, [x_np])[0], rtol=1e-6, atol=1e-6)

    def g(x):                   # xshape / yshape in the expressions: the gradient sees them swapped
        y = x.reindex([2, 5], ["xshape0-1-i0", "yshape1-1-i1"], overflow_value=1.0)
        return (y * y * jt.array(np.arange(10.0).reshape(2, 5))).sum()
    np.testing.assert_allclose(jt.grad(g(x), x).numpy(), numeric_grad(g, [x_np])[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["add", "sum", "mul", "max", "min"])
def test_reindex_reduce(op, rng):
    x_np = rng.uniform(0.5, 2, (6, 4)).astype(np.float32)
    x, _ = make_input(x_np, "transposed")
    got = x.reindex_reduce(op, [3, 4], ["i0/2", "i1"])
    pairs = x_np.reshape(3, 2, 4)
    ref = {"add": pairs.sum(1), "sum": pairs.sum(1), "mul": pairs.prod(1), "max": pairs.max(1), "min": pairs.min(1)}[op]
    assert_var(got, ref)
    assert_var(jt.reindex_reduce(x, op, [3, 4], ["i0/2", "i1"]), ref)
    # indexes outside the result are dropped
    dropped = x.reindex_reduce(op, [2, 4], ["i0-2", "i1"]).numpy()
    expected_dropped = np.stack([
        {"add": np.sum, "sum": np.sum, "mul": np.prod, "max": np.max, "min": np.min}[op](x_np[[2 + r]], 0)
        for r in range(2)])
    np.testing.assert_allclose(dropped, expected_dropped, rtol=1e-6)


def test_reindex_reduce_col2im(rng):
    """Summing 3x3 windows back onto the image (the adjoint of the windows reindex)."""
    h, w = 5, 6
    win_np = rng.standard_normal((h - 2, w - 2, 3, 3)).astype(np.float32)
    img = jt.array(win_np).reindex_reduce("add", [h, w], ["i0+i2", "i1+i3"])
    expected = np.zeros((h, w), np.float32)
    for i, j, a, b in np.ndindex(win_np.shape):
        expected[i + a, j + b] += win_np[i, j, a, b]
    assert_var(img, expected, atol=1e-5)


@pytest.mark.parametrize("op", ["add", "max", "min"])
def test_reindex_reduce_grad(op, rng):
    x_np = rng.standard_normal((6, 3))
    w = jt.array(rng.standard_normal((2, 3)))

    def f(x):
        return (x.reindex_reduce(op, [2, 3], ["xshape0-1-i0%2", "yshape1-1-i1"]) * w).sum()
    x = jt.array(x_np)
    np.testing.assert_allclose(jt.grad(f(x), x).numpy(), numeric_grad(f, [x_np])[0], rtol=1e-6, atol=1e-6)


def test_reindex_reduce_names_the_shapes_as_jittor(rng):
    """In reindex_reduce ``xshape`` is the result's and ``yshape`` the input's (Jittor's names,
    reindex's seen from its inverse), so a reindex's expressions scatter its output back."""
    ones = jt.ones([2, 3])
    np.testing.assert_array_equal(ones.reindex_reduce("add", [2, 7], ["i0", "yshape1"]).numpy()[:, 3], [3, 3])
    assert not ones.reindex_reduce("add", [2, 7], ["i0", "xshape1"]).numpy().any()     # 7: past the end
    x = jt.array(rng.standard_normal((2, 3)))
    exprs = ["i1", "xshape1 - 1 - i0"]
    y = x.reindex([3, 2], exprs)
    assert_var(y, x.numpy()[:, ::-1].T)
    assert_var(y.reindex_reduce("add", [2, 3], exprs), x.numpy())
    with pytest.raises(ValueError, match="names yshape2, but there are 2 of yshape0"):
        y.reindex_reduce("add", [2, 3, 1], ["i0", "i1", "yshape2"])


def test_reindex_takes_none_for_no_conditions_and_no_extras():
    x = jt.array(np.arange(6.0).reshape(2, 3))
    assert_var(x.reindex([3, 2], ["i1", "i0"], 0, None, None), np.arange(6.0).reshape(2, 3).T)
    assert_var(x.reindex_reduce("add", [2], ["i0"], None, None), [3.0, 12.0])


def test_reindex_int_and_bool(rng):
    v = rng.integers(-5, 5, (4, 4)).astype(np.int64)
    assert_var(jt.array(v).reindex([4, 4], ["i1", "i0"]), v.T)
    assert_var(jt.array(v).reindex_reduce("add", [2, 4], ["i0/2", "i1"]), v.reshape(2, 2, 4).sum(1))
    b = v > 0
    assert_var(jt.array(b).reindex([4], ["i0", "i0"]), np.diag(b))


# --- matmul --------------------------------------------------------------------------------------
MATMUL = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 6)), ((4,), (4, 5)), ((3, 4), (4,)),
          ((4,), (4,)), ((2, 3, 4), (4,)), ((5,), (2, 5, 3)), ((1, 3, 4), (2, 4, 2))]


@pytest.mark.parametrize("a_shape,b_shape", MATMUL)
@pytest.mark.parametrize("layouts", [("contig", "contig"), ("transposed", "sliced")])
def test_matmul(a_shape, b_shape, layouts, rng):
    a_np = rng.standard_normal(a_shape).astype(np.float32)
    b_np = rng.standard_normal(b_shape).astype(np.float32)
    a, b = make_input(a_np, layouts[0])[0], make_input(b_np, layouts[1])[0]
    assert_var(a @ b, a_np @ b_np, rtol=1e-5, atol=1e-5)
    assert_var(jt.matmul(a, b), a_np @ b_np, rtol=1e-5, atol=1e-5)
    check_grad(operator.matmul, torch.matmul, [a_np, b_np], list(layouts), rng=rng)


def test_matmul_dtypes(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    assert_var(jt.array(a) @ jt.array(b), a @ b)                        # float64 stays float64
    assert_var(jt.array(a.astype(np.float32)) @ jt.array(b), a.astype(np.float32).astype(np.float64) @ b)
    ia, ib = rng.integers(-3, 4, (3, 4)).astype(np.int32), rng.integers(-3, 4, (4, 2)).astype(np.int32)
    assert_var(jt.array(ia) @ jt.array(ib), ia @ ib)
    check_grad(operator.matmul, torch.matmul, [a, b], ["transposed", "contig"], dtype="float64", rng=rng)


def test_matmul_of_computed_operands(rng):
    """Operands that are fused expressions, not buffers, and a result consumed by more ops."""
    a_np, b_np = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    check_grad(lambda a, b: (a.relu() @ (b * 2).transpose() + 1).tanh(),
               lambda a, b: (a.relu() @ (b * 2).T + 1).tanh(), [a_np, b_np], ["sliced", "contig"], rng=rng)



def test_matmul_of_a_batch_by_one_matrix_is_one_product(rng):
    """(..., m, k) @ (k, n) is one (rows, k) x (k, n) product, forward and for y's gradient: not a
    batch of small products, nor a batch summed afterwards."""
    a_np, b_np = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((4, 6))
    grads = check_grad(operator.matmul, torch.matmul, [a_np, b_np], ["transposed", "contig"], dtype="float64", rng=rng)
    a, b = jt.array(a_np), jt.array(b_np)
    products = [v for v in graph_nodes(jt.grad((a @ b).sum(), b)) if v.op == "matmul"]
    assert products and all(len(v.shape) == 2 and all(len(i.shape) == 2 for i in v.inputs) for v in products)
    assert all(g.shape == s for g, s in zip(grads, [a_np.shape[::-1], b_np.shape]))

# --- creation --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_array_from_numpy_keeps_dtype(dtype, rng):
    value = (rng.standard_normal((2, 3)) * 3).astype(dtype)
    x = jt.array(value)
    assert_var(x, value)
    assert x.dtype == dtype and x.numpy().dtype == np.dtype(dtype)
    first = value[0, 0].copy()
    value[0, 0] = 1 - first                            # a copy: later writes do not leak in
    assert x.numpy()[0, 0] == first
    assert_var(jt.array(value, dtype="float64"), value.astype(np.float64))
    assert_var(jt.array(jt.array(value)), value)


def test_array_from_lists_and_scalars():
    assert_var(jt.array([[1.5, 2.0], [3.0, 4.0]]), np.array([[1.5, 2.0], [3.0, 4.0]], np.float32))
    ints = jt.array([1, 2, 3])
    assert ints.dtype in ("int32", "int64") and ints.numpy().tolist() == [1, 2, 3]
    assert_var(jt.array([True, False]), np.array([True, False]))
    s = jt.array(2.5)
    assert s.shape == () and s.dtype == "float32" and s.item() == 2.5
    assert jt.array(3).item() == 3 and jt.array(3).ndim == 0
    assert_var(jt.array(np.array([1, 2], np.uint8)), np.array([1, 2], np.uint8))
    assert_var(jt.array([1, 2], dtype="float64"), np.array([1, 2], np.float64))
    assert_var(jt.array(np.array(2.5)), np.array(2.5, np.float64))            # a numpy 0-d array keeps float64


def test_constant_creation():
    assert_var(jt.zeros(2, 3), np.zeros((2, 3), np.float32))
    assert_var(jt.zeros((2, 3), dtype="int32"), np.zeros((2, 3), np.int32))
    assert_var(jt.ones([4]), np.ones(4, np.float32))
    assert_var(jt.ones(2, 2, dtype="bool"), np.ones((2, 2), bool))
    assert_var(jt.full((2, 2), 7, "int64"), np.full((2, 2), 7, np.int64))
    assert_var(jt.full((3,), 0.25), np.full(3, 0.25, np.float32))
    assert_var(jt.full((), -1.5, "float64"), np.array(-1.5))
    x = jt.array(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert_var(jt.zeros_like(x), np.zeros((2, 3), np.int32))
    assert_var(x.ones_like(), np.ones((2, 3), np.int32))
    assert_var(jt.ones_like(x, dtype="float64"), np.ones((2, 3)))
    assert_var(jt.full_like(x, 3), np.full((2, 3), 3, np.int32))
    assert_var(jt.zeros(0, 3), np.zeros((0, 3), np.float32))
    assert_var(jt.full((2,), 1.5) + jt.full((2,), 2.5), np.full(2, 4.0, np.float32))   # same kernel, new values


def test_random_creation():
    def draws():        # numbers are drawn when computed, as in Jittor: computed here in order
        return [v.sync() for v in (jt.rand(200, 3), jt.randn(200, 3), jt.randint(-2, 5, shape=(300,)))]

    jt.seed(3)
    a, b, c = draws()
    jt.seed(3)
    for again, first in zip(draws(), (a, b, c)):
        assert_var(again, first.numpy())
    assert a.dtype == "float32" and b.dtype == "float32" and c.dtype == "int32"
    assert 0 <= a.numpy().min() and a.numpy().max() < 1 and 0.3 < a.numpy().mean() < 0.7
    assert abs(b.numpy().mean()) < 0.2 and 0.8 < b.numpy().std() < 1.2
    assert set(c.numpy().tolist()) == set(range(-2, 5))
    assert jt.rand(2, 2, dtype="float64").dtype == "float64"
    assert jt.randint(4).shape == (1,) and 0 <= jt.randint(4).item() < 4
    jt.seed(4)
    assert not np.array_equal(jt.rand(200, 3).numpy(), a.numpy())


def test_arange():
    assert_var(jt.arange(5), np.arange(5, dtype=np.int32))
    assert_var(jt.arange(2, 11, 3), np.arange(2, 11, 3, dtype=np.int32))
    assert_var(jt.arange(0, 1, 0.25), np.arange(0, 1, 0.25, dtype=np.float32))
    assert_var(jt.arange(5, dtype="float64"), np.arange(5, dtype=np.float64))
    assert_var(jt.arange(5, 0, -2), np.arange(5, 0, -2, dtype=np.int32))


# --- Var facts and values --------------------------------------------------------------------------
def test_var_facts(rng):
    value = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x = jt.array(value)
    y = x * 2
    assert y.shape == (2, 3, 4) and y.dtype == "float32" and y.ndim == 3 and y.numel() == 24
    assert not y.is_realized()
    assert y.sync() is y and y.is_realized()
    out = y.numpy()
    out[0, 0, 0] = 123.0                                   # numpy() is a writable copy
    assert y.numpy()[0, 0, 0] == value[0, 0, 0] * 2
    assert y.data.flags.writeable and type(y.data) is np.ndarray    # Jittor's: shares y's memory
    np.testing.assert_array_equal(y.data, value * 2)
    np.testing.assert_array_equal(np.asarray(y), value * 2)
    assert len(y) == 2 and jt.zeros(()).numel() == 1
    assert (x.sum() * 0 + 1.5).item() == 1.5 and float(jt.array([2.0])) == 2.0 and int(jt.array([3])) == 3
    assert bool(jt.array(True)) and "shape=(2, 3, 4)" in repr(x)


def test_repr_shows_the_value_as_jittor_prints_it(monkeypatch):
    """print(loss) in a training loop shows the number (Jittor computes on print), not a placeholder;
    a Var whose computation fails names the error instead of raising from repr."""
    y = jt.array([1.5, -2.0]) * 2
    assert not y.is_realized()
    assert repr(y) == "jt.Var([ 3. -4.], shape=(2,), dtype=float32)" and y.is_realized()
    assert str(jt.array(7) + 1).startswith("jt.Var(8, shape=(), dtype=int")
    z = jt.array([1.0]) + 1

    def fail(self, *args, **kwargs):
        raise RuntimeError("compile failed")
    monkeypatch.setattr(jt.Var, "sync", fail)
    assert repr(z) == "jt.Var(<not computed: RuntimeError>, shape=(1,), dtype=float32)"


def test_sync_all_and_sync(rng):
    a = jt.array(rng.standard_normal(5).astype(np.float32))
    b, c = a + 1, a * 3
    jt.sync_all()
    assert b.is_realized() and c.is_realized()
    d, e = a - 1, (a - 1).exp()
    jt.sync([d, e])
    assert d.is_realized() and e.is_realized()
    np.testing.assert_allclose(e.numpy(), np.exp(a.numpy() - 1), rtol=1e-6)


def test_sync_all_leaves_fused_inputs_of_computed_vars_alone(rng):
    """``y`` was fused into ``z``'s kernel: once ``z`` has its value nothing waits for ``y``, so
    ``sync_all`` (and every optimizer step, which realizes pending roots) must not compute it, nor,
    a call later, the layer under it. It is still computed when asked for."""
    jt.sync_all()                            # whatever other tests left pending
    value = rng.standard_normal(5).astype(np.float32)
    x = jt.array(value)
    w = x * 2
    y = w + 1
    z = (y * 3).sum()
    z.sync()
    runs = jt.stats()["kernels_run"]
    jt.sync_all()
    jt.sync_all()
    assert jt.stats()["kernels_run"] == runs and not (y.is_realized() or w.is_realized())
    np.testing.assert_allclose(y.numpy(), value * 2 + 1, rtol=1e-6)


def test_stop_grad_detach(rng):
    value = rng.standard_normal(4).astype(np.float32)
    x = jt.array(value)
    y = (x * 2)
    z = y.detach()
    assert_var(z, value * 2)
    assert not z.is_stop_grad() and y.stop_grad() is y and y.is_stop_grad() and not y.requires_grad
    assert_var(jt.grad((y * x).sum(), x), value * 2)       # only the direct path
    w = jt.array(value)
    assert_var(jt.grad((w.detach() * w).sum(), w), value)


def test_assign_update(rng):
    value = rng.standard_normal(3).astype(np.float32)
    w = jt.array(value)
    b = w * 2
    assert w.assign(w + 1) is w
    assert_var(b, value * 2)                               # built before the assign: old value
    assert_var(w, value + 1)
    w.update(jt.array([5.0, 6.0, 7.0]))
    assert_var(w, np.array([5, 6, 7], np.float32))
    w.assign(0)                                            # scalars broadcast, dtype kept
    assert_var(w, np.zeros(3, np.float32))
    w.assign(jt.array(np.array([1, 2, 3], np.int64)))
    assert_var(w, np.array([1, 2, 3], np.float32))


# --- gradients at awkward points -------------------------------------------------------------------
@pytest.mark.parametrize("value,dims", [
    ([[2.0, 0.0, 3.0], [1.0, 2.0, 4.0]], None), ([[2.0, 0.0, 3.0], [1.0, 2.0, 0.0]], 1),
    ([[0.0, 0.0, 3.0], [1.0, 0.0, 4.0]], 0), ([[0.0, 0.0, 3.0], [1.0, 5.0, 4.0]], 1)])
def test_prod_grad_with_zeros(value, dims):
    """prod / x is 0 / 0 at a zero: the gradient there is the product of the other elements."""
    t_fn = (lambda t: t.prod()) if dims is None else (lambda t: t.prod(dims))
    check_grad(lambda x: x.prod(dims), t_fn, [value], ["transposed"])


def test_pow_grad_at_zero_base():
    check_grad(operator.pow, torch.pow, [[0.0, 0.0, 2.0, 0.0, -1.5], [2.0, 0.0, 3.0, 1.0, 2.0]])
    check_grad(lambda x: x ** 2, lambda x: x ** 2, [[0.0, -1.5, 2.0]])
    check_grad(lambda x: x ** 0, lambda x: x ** 0, [[0.0, -1.5, 2.0]])


@pytest.mark.parametrize("name", ["max", "min"])
def test_reduce_max_min_ties_share_gradient(name):
    value = [[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]]
    t_fn = torch.amax if name == "max" else torch.amin
    check_grad(lambda x: getattr(x, name)(1), lambda t: t_fn(t, 1), [value], ["sliced"])
    check_grad(lambda x: getattr(x, name)(), lambda t: t_fn(t, (0, 1)), [value])


def test_nan_propagates():
    x = jt.array([1.0, np.nan, 3.0])
    assert np.isnan(x.max().item()) and np.isnan(x.min().item()) and np.isnan(x.sum().item())
    assert x.argmax(0)[0].item() == 1 and x.argmin(0)[0].item() == 1       # numpy: first NaN
    assert_var(jt.maximum(x, 2.0), np.maximum(x.numpy(), np.float32(2)))
    assert_var(jt.minimum(2.0, x), np.minimum(np.float32(2), x.numpy()))
    # elementwise ops keep a NaN too (relu as torch.relu; sign as np.sign), ints are untouched
    assert_var(x.relu(), np.array([1.0, np.nan, 3.0], np.float32))
    assert_var((x - 2).sign(), np.sign(x.numpy() - 2))
    assert_var(jt.array(np.array([-3, 0, 5], np.int32)).sign(), np.array([-1, 0, 1], np.int32))


def test_large_reductions_take_the_parallel_paths(rng):
    """Few outputs over many elements: threads split each reduction and merge in order."""
    value = rng.standard_normal((3, 50000)).astype(np.float32)
    x = jt.array(value)
    for name in ("sum", "mean", "max", "min"):
        expected = getattr(value.astype(np.float64), name)(1).astype(np.float32)
        assert_var(getattr(x, name)(1), expected, atol=1e-4)
    assert_var(x.argmax(1)[0], value.argmax(1).astype(np.int32))
    assert_var(x.transpose().sum(0), value.astype(np.float64).sum(1).astype(np.float32), atol=1e-4)
    cube = rng.standard_normal((2, 150, 160)).astype(np.float32)     # split over two inner loops
    for name in ("sum", "max"):
        expected = getattr(cube.astype(np.float64), name)((1, 2)).astype(np.float32)
        assert_var(getattr(jt.array(cube).transpose(0, 2, 1), name)((1, 2)), expected, atol=1e-4)
    ints = rng.integers(-100, 100, (2, 40000)).astype(np.int32)
    assert_var(jt.array(ints).sum(1), ints.astype(np.int64).sum(1))
    big = rng.standard_normal((300, 400)).astype(np.float32)
    assert_var(jt.array(big).transpose() * 2 + 1, big.T * 2 + 1)


@pytest.mark.parametrize("threads", [2, 3])
def test_split_reductions_add_each_output_alone(threads, rng):
    """Few outputs over many elements (a conv bias gradient's (N, C, H, W) -> C): the outputs run
    interleaved in one parallel region, each thread's share and order that of the output
    reduced alone, so every output has the bits of its own one-output reduction."""
    x = jt.array(rng.standard_normal((64, 6, 28, 28)).astype(np.float32))
    with jt.flag_scope(num_threads=threads):
        for name in ("sum", "max", "min"):
            together = getattr(x, name)((0, 2, 3)).numpy()
            alone = np.concatenate([getattr(x[:, c:c + 1], name)((0, 2, 3)).numpy() for c in range(6)])
            np.testing.assert_array_equal(together, alone)
        expected = x.numpy().astype(np.float64).sum((0, 2, 3)).astype(np.float32)
        np.testing.assert_allclose(x.sum((0, 2, 3)).numpy(), expected, rtol=1e-5)
        near_one = jt.array((1 + 1e-5 * rng.standard_normal((3, 20000))).astype(np.float32))
        np.testing.assert_allclose(near_one.prod(1).numpy(), near_one.numpy().astype(np.float64).prod(1), rtol=1e-5)
        argmax = jt.array(rng.standard_normal((2, 3, 40000)).astype(np.float32)).argmax(2)[0]
        assert argmax.shape == (2, 3)


def test_column_sums_are_the_same_bits_at_any_thread_count(rng):
    """Column sums (a bias gradient) give each thread whole tiles of columns, rows added in order."""
    x = jt.array(rng.standard_normal((1024, 256)).astype(np.float32))
    results = []
    for threads in (1, 2, 3):
        with jt.flag_scope(num_threads=threads):
            results.append(x.sum(0).numpy())
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])
    np.testing.assert_allclose(results[0], x.numpy().astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)


def test_shared_subexpressions(rng):
    """A node used by several consumers and several targets is computed once and stays right."""
    value = rng.standard_normal((4, 5)).astype(np.float32)
    a = jt.array(value)
    b = a.exp()
    c = b.sum(1, keepdims=True)
    d = b / c
    e = (d * b).reindex([4, 5, 3], ["i0", "i1"])        # an expanding reindex of a computed value
    jt.sync([b, c, d, e])
    eb = np.exp(value.astype(np.float64))
    assert_var(d, (eb / eb.sum(1, keepdims=True)).astype(np.float32))
    assert_var(e, np.repeat((eb * eb / eb.sum(1, keepdims=True))[:, :, None], 3, 2).astype(np.float32))
    check_grad(lambda a: (a.exp() / a.exp().sum(1, keepdims=True)) * a,
               lambda t: torch.softmax(t, 1) * t, [value], ["transposed"])


def test_empty_vars():
    e = jt.zeros(0, 3)
    assert_var(e + 1, np.ones((0, 3), np.float32))
    assert_var(e.sum(0), np.zeros(3, np.float32))
    assert e.sum().item() == 0.0
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):      # numpy warns; NaN either way
        assert_var(e.mean(0), e.numpy().mean(0))
        assert np.isnan(e.mean().item())
    assert_var(e.mean(1), np.zeros(0, np.float32))


# --- inputs that are numpy-style slices (x[1::2, 1:-1]) ---------------------------------------------
needs_getitem = pytest.mark.skipif("getitem" not in jt.ops.METHODS, reason="Var.__getitem__ not available")
GETITEM_OPS = {
    "exp": (lambda x, y: x.exp(), lambda x, y: x.exp()),
    "mul_bcast": (lambda x, y: x * y.sum(0), lambda x, y: x * y.sum(0)),
    "div": (lambda x, y: x / (y * y + 1), lambda x, y: x / (y * y + 1)),
    "max": (lambda x, y: jt.maximum(x, y).max(1), lambda x, y: torch.maximum(x, y).amax(1)),
    "matmul": (lambda x, y: x @ y.transpose(), lambda x, y: x @ y.T),
    "concat": (lambda x, y: jt.concat([x, y], 1).tanh(), lambda x, y: torch.cat([x, y], 1).tanh()),
}


@needs_getitem
@pytest.mark.parametrize("name", GETITEM_OPS)
def test_ops_on_getitem_views(name, rng):
    jt_fn, t_fn = GETITEM_OPS[name]
    check_grad(jt_fn, t_fn, [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))], ["getitem", "sliced"], rng=rng)


# --- found by a bug hunt ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_bitwise_operators_follow_numpy(dtype, rng):
    a = rng.integers(-8, 9, (5, 4)).astype(dtype)
    b = rng.integers(-8, 9, (4,)).astype(dtype)
    for jt_op, np_op in [(lambda x, y: x & y, np.bitwise_and), (lambda x, y: x | y, np.bitwise_or),
                         (lambda x, y: x ^ y, np.bitwise_xor)]:
        got = jt_op(jt.array(a), jt.array(b)).numpy()
        assert got.dtype == np_op(a, b).dtype and np.array_equal(got, np_op(a, b))
    assert np.array_equal((~jt.array(a)).numpy(), ~a)
    assert np.array_equal((jt.array(a) & 1).numpy(), a & 1)
    with pytest.raises(TypeError, match="bitwise_and is defined for bool and integer Vars, got float32"):
        jt.ones(2) & 1


@pytest.mark.parametrize("shape", [(0, 3), (2, 0), (2, 3)])
def test_all_and_any_over_dims_follow_numpy(shape):
    x = (np.arange(np.prod(shape)).reshape(shape) % 3).astype(np.float32)
    for dims in (None, 0, 1):
        for keepdims in (False, True):
            for op in ("all", "any"):
                got = getattr(jt.array(x), op)(dims, keepdims=keepdims).numpy()
                want = getattr(np, op)(x, axis=dims, keepdims=keepdims)
                assert got.shape == want.shape and np.array_equal(got, want), (op, dims, keepdims)


def test_a_stop_grad_reshape_is_not_skipped_by_a_later_reshape():
    c = jt.array([[1.0, 2.0, 3.0]])
    grad = jt.grad((c * c.reshape(3).stop_grad().reshape(1, 3)).sum(), c)
    np.testing.assert_array_equal(grad.numpy(), [[1.0, 2.0, 3.0]])


@pytest.mark.parametrize("index", [slice(-10, None, -1), slice(4, None, -2), slice(None, None, -3),
                                   slice(-1, -10, -2)])
def test_setitem_with_a_backward_slice_follows_numpy(index):
    x, want = jt.zeros(6), np.zeros(6, np.float32)
    x[index] = 1.0
    want[index] = 1.0
    np.testing.assert_array_equal(x.numpy(), want)


def test_integers_beyond_int32_are_int64_or_an_error():
    assert jt.arange(2**31, 2**31 + 2).dtype == "int64"
    np.testing.assert_array_equal(jt.arange(2**31, 2**31 + 2).numpy(), [2**31, 2**31 + 1])
    with pytest.raises(OverflowError, match=r"value 1099511627776 does not fit int32"):
        jt.array([2**40], "int32")
    with pytest.raises(OverflowError, match=r"randint: range \[0, 1099511627776\) does not fit int32"):
        jt.randint(0, 2**40, (3,))
    assert (jt.randint(0, 2**40, (3,), dtype="int64").numpy() >= 0).all()
