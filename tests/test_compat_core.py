"""Jittor's core surface: trigonometric and hyperbolic ops, jt.binary / jt.unary, Jittor's dtype
of true division, bitwise reductions, tensordot, jt.Function, jt.digamma, Var.name,
the lazy_execution and amp_reg flags; values and gradients against PyTorch and numpy, and errors."""
import numpy as np
import pytest
import torch

import jtmini as jt
from conftest import assert_var, check_grad

UNARY = [  # (jtmini name, torch function, sampler of valid inputs)
    ("tan", torch.tan, lambda r, s: r.uniform(-1.2, 1.2, s)),
    ("arcsin", torch.asin, lambda r, s: r.uniform(-0.9, 0.9, s)),
    ("arccos", torch.acos, lambda r, s: r.uniform(-0.9, 0.9, s)),
    ("arctan", torch.atan, lambda r, s: r.normal(0, 2, s)),
    ("sinh", torch.sinh, lambda r, s: r.normal(0, 1, s)),
    ("cosh", torch.cosh, lambda r, s: r.normal(0, 1, s)),
    ("arcsinh", torch.asinh, lambda r, s: r.normal(0, 3, s)),
    ("arccosh", torch.acosh, lambda r, s: r.uniform(1.2, 5, s)),
    ("arctanh", torch.atanh, lambda r, s: r.uniform(-0.9, 0.9, s)),
    ("negative", torch.neg, lambda r, s: r.normal(0, 1, s)),
]


@pytest.mark.parametrize("name,t_fn,sample", UNARY)
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
def test_unary_values_and_gradients_match_torch(name, t_fn, sample, layout, rng):
    check_grad(lambda x: getattr(jt, name)(x), t_fn, [sample(rng, (3, 4))], [layout], rng=rng)
    check_grad(lambda x: getattr(x, name)(), t_fn, [sample(rng, (5,))], dtype="float64", rng=rng)


def test_numpy_and_jittor_spellings_are_one_op():
    x = jt.array([0.25, -0.5])
    np.testing.assert_allclose(jt.arcsin(x).numpy(), jt.asin(x).numpy())
    np.testing.assert_allclose(jt.arctanh(x).numpy(), np.arctanh([0.25, -0.5]), rtol=1e-6)
    assert jt.abs(-3).item() == 3 and jt.exp([0.0]).numpy().tolist() == [1.0]     # numbers and lists


def test_unary_by_name_and_by_dtype():
    assert_var(jt.unary(jt.array([1.0, 4.0]), "sqrt"), np.array([1.0, 2.0], np.float32))
    assert_var(jt.unary(jt.array([1.0, 4.0]), "negative"), np.array([-1.0, -4.0], np.float32))
    assert_var(jt.unary(jt.array([1.7, -2.2]), "int32"), np.array([1, -2], np.int32))
    with pytest.raises(ValueError, match="unary: unknown op 'sqrtt'"):
        jt.unary(jt.array([1.0]), "sqrtt")


def test_binary_by_name_broadcasts_like_numpy(rng):
    a, b = rng.normal(size=(3, 1)).astype(np.float32), rng.normal(size=(4,)).astype(np.float32)
    for name, ref in [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                      ("divide", np.divide), ("maximum", np.maximum), ("less", np.less)]:
        assert_var(jt.binary(jt.array(a), jt.array(b), name), ref(a, b), rtol=1e-6)
    assert_var(jt.binary([[1, 2]], [[3, 4]], "add"), np.array([[4, 6]]))
    with pytest.raises(ValueError, match="binary: unknown op 'plus'"):
        jt.binary(1, 2, "plus")
    with pytest.raises(ValueError, match="binary: unknown op 'sqrt'"):     # a unary op is no binary op
        jt.binary(1, 2, "sqrt")


def test_logical_ops_take_lists_elementwise():
    assert_var(jt.logical_and([1, 2, 0], [7, 0, 13]), np.array([True, False, False]))
    assert_var(jt.logical_xor([1, 0], [1, 1]), np.array([False, True]))


def test_true_division_of_integers_is_float_of_their_width():
    i64 = jt.array(np.array([5, 7], np.int64))
    i32 = jt.array(np.array([5, 7], np.int32))
    assert_var(i64 / 2, np.array([2.5, 3.5]), dtype="float64")
    assert_var(i32 / jt.array(np.array([2, 2], np.int32)), np.array([2.5, 3.5], np.float32))
    assert_var(jt.divide(5, i32), np.array([1.0, 5 / 7], np.float32), rtol=1e-6)


def test_in_place_true_division_of_an_integer_var_keeps_the_float():
    a = jt.array(np.array([5, 6], np.int32))
    before = a
    a /= jt.array(np.array([2, 4], np.int32))
    assert a is before and a.dtype == "float32"
    assert_var(a, np.array([2.5, 1.5], np.float32))
    b = jt.array(np.array([5.0], np.float32))
    b += 1                                    # other in-place ops keep the Var's dtype
    assert b.dtype == "float32"


@pytest.mark.parametrize("op", ["and", "or", "xor"])
@pytest.mark.parametrize("dims,keepdims", [((), False), ((1,), True), ((0, 2), False), (2, True)])
def test_bitwise_reductions_match_numpy(op, dims, keepdims, rng):
    value = rng.integers(-2**30, 2**30, (3, 4, 5)).astype(np.int32)
    x = jt.array(value).transpose(1, 0, 2).transpose(1, 0, 2)        # a non-contiguous read
    np_dims = tuple(range(3)) if dims == () else dims
    expected = getattr(np, f"bitwise_{op}").reduce(value, np_dims, keepdims=keepdims)
    assert_var(getattr(jt, f"reduce_bitwise_{op}")(x, dims, keepdims=keepdims), expected, dtype="int32")


def test_bitwise_reductions_of_bools_and_errors():
    flags = np.array([[True, False], [True, True]])
    assert_var(jt.reduce_bitwise_and(flags, 1), np.array([False, True]))
    assert_var(jt.reduce_bitwise_or(flags, 0), np.array([True, True]))
    with pytest.raises(TypeError, match="reduce_bitwise_and: defined for bool and integer Vars, got float32"):
        jt.reduce_bitwise_and(jt.array([1.0, 2.0]))
    assert not hasattr(jt, "reduce_mul")       # Jittor's name is reduce_multiply
    assert_var(jt.reduce_multiply(jt.array([[2, 3]]), 1), np.array([6]))


def test_grad_refuses_integer_loss_and_targets():
    x = jt.array([1.0, 2.0])
    with pytest.raises(TypeError, match="the loss must be a float Var, got dtype int32"):
        jt.grad(x.int32().sum().int32(), x)
    with pytest.raises(TypeError, match="target 1 must be a float Var, got dtype int32"):
        jt.grad((x * x).sum(), [x, x.int32()])
    a = jt.array(2.0)
    a.requires_grad = False
    assert jt.grad(a * a, a).item() == 0                 # a stop_grad target: zeros
    assert jt.grad(a.start_grad() * a, a).item() == 4


def test_name_and_uncertain_shape():
    x = jt.array([[1.0, 2.0]])
    assert x.name() == "" and x.name("weights") is x and x.name() == "weights"
    with pytest.raises(TypeError, match="a Var's name must be a str, got int"):
        x.name(3)
    assert x.uncertain_shape == [1, 2]
    index, = jt.where(jt.array([0, 1, 1]))
    assert index.uncertain_shape == [2]


@pytest.mark.parametrize("shapes,dims", [(((2, 3), (3, 4)), 1), (((2, 3, 4), (4, 3, 5)), ([1, 2], [1, 0])),
                                         (((3,), (3,)), 1), (((2, 3), (4,)), 0), (((2, 3), (2, 3)), 2)])
def test_tensordot_matches_torch(shapes, dims, rng):
    values = [rng.normal(size=s) for s in shapes]
    check_grad(lambda a, b: jt.tensordot(a, b, dims), lambda a, b: torch.tensordot(a, b, dims),
               values, ["transposed" if len(shapes[0]) > 1 else "contig", "contig"], rng=rng)


def test_tensordot_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"dim 1 of a \(shape \(2, 3\)\) and dim 0 of b \(shape \(4,\)\) differ"):
        jt.tensordot(jt.ones((2, 3)), jt.ones((4,)), ([1], [0]))
    with pytest.raises(ValueError, match="dims=3 does not fit shapes"):
        jt.tensordot(jt.ones((2, 3)), jt.ones((3,)), 3)


def test_iterating_a_var_and_a_0d_var():
    rows = list(jt.array([[1, 2], [3, 4]]))
    assert [r.numpy().tolist() for r in rows] == [[1, 2], [3, 4]]
    total = jt.array([1.0, 2.0]).sum()          # Jittor's shape [1]: one element, len 1
    assert len(total) == 1 and [v.item() for v in total] == [3.0]


class _Scale(jt.Function):       # forward x * y and x / y; a hand-written, deliberately odd backward
    def execute(self, x, tag, y):
        self.x, self.y = x, y
        return x * y, tag, x / y

    def grad(self, d_prod, d_tag, d_quot):
        assert d_tag is None
        gx = None if d_prod is None else d_prod * self.y * 2
        gy = None if d_quot is None else d_quot * self.x
        return gx, None, gy


def test_function_routes_each_output_gradient_to_the_user_grad(rng):
    x = jt.array(rng.normal(size=(3,)).astype(np.float32))
    y = jt.array(rng.uniform(1, 2, (3,)).astype(np.float32))
    p, tag, q = _Scale()(x, "tag", y)
    assert tag == "tag"
    np.testing.assert_allclose(q.numpy(), x.numpy() / y.numpy(), rtol=1e-6)
    gx, gy = jt.grad((p * 3 + q).sum(), [x, y])
    np.testing.assert_allclose(gx.numpy(), 6 * y.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gy.numpy(), x.numpy(), rtol=1e-6)
    p, _, q = _Scale.apply(x, "tag", y)
    q.stop_grad()                                         # d_quot is None: y gets no gradient
    gx, gy = jt.grad((p + q).sum(), [x, y])
    np.testing.assert_allclose(gx.numpy(), 2 * y.numpy(), rtol=1e-6)
    assert_var(gy, np.zeros(3, np.float32))


def test_function_gradient_errors():
    class Resize(jt.Function):           # as Jittor (JSeg's Resize): trailing non-Var arguments left out
        def execute(self, x, size, mode):
            return x * size

        def grad(self, d):
            return d * 2
    a, b = jt.array(3.0), jt.array(4.0)
    assert jt.grad(Resize()(a, 2, "nearest"), a).item() == 2.0

    class TooFew(jt.Function):           # Jittor's test_grad_not_match_error: a Var left out is an error
        def execute(self, x, y):
            return x * y

        def grad(self, d):
            return d
    with pytest.raises(ValueError, match="TooFew.grad returned 1 gradient.* for the 2 argument"):
        jt.grad(TooFew()(a, b), [a, b])

    class TooMany(jt.Function):
        def execute(self, x):
            return x * 2

        def grad(self, d):
            return d, d
    with pytest.raises(ValueError, match="TooMany.grad returned 2 gradient.* for the 1 argument.*one per argument"):
        jt.grad(TooMany()(a), a)

    class NonVar(jt.Function):
        def execute(self, x, k):
            return x * k

        def grad(self, d):
            return d * 2, 1
    with pytest.raises(TypeError, match="argument 1 of execute is not a Var .*must be None, got 1"):
        jt.grad(NonVar()(a, 2), a)


def test_function_higher_derivatives_go_through_the_user_grad():
    class Cube(jt.Function):
        def execute(self, x):
            self.x = x
            return x * x * x

        def grad(self, d):
            return d * 3 * self.x * self.x
    x = jt.array(2.0)
    dx = jt.grad(Cube.apply(x), x)
    assert dx.item() == 12 and jt.grad(dx, x).item() == 12


def test_digamma_and_its_gradient_match_torch(rng):
    value = np.concatenate([rng.uniform(1e-3, 1, 20), rng.uniform(1, 40, 20), rng.uniform(-5, 0, 20)])
    value = value[np.abs(value - np.round(value)) > 1e-3]            # off the poles
    check_grad(lambda x: jt.digamma.apply(x), torch.digamma, [value], ["contig"], dtype="float64",
               tol=dict(rtol=1e-9, atol=1e-9), rng=rng)
    check_grad(lambda x: jt.digamma.apply(x), torch.digamma, [value.reshape(-1, 1)], ["sliced"],
               tol=dict(rtol=2e-4, atol=1e-4), rng=rng)


def test_digamma_poles_and_dtypes():
    out = jt.digamma.apply(jt.array([0.0, -2.0, 1.0])).numpy()
    assert out[0] == -np.inf and np.isnan(out[1]) and abs(out[2] + 0.5772156649) < 1e-6
    assert jt.digamma.apply(jt.array(np.array([1, 2], np.int32))).dtype == "float32"
    with pytest.raises(TypeError, match="digamma is not defined for bool Vars"):
        jt.digamma.apply(jt.array([True]))


def test_lazy_execution_off_computes_each_op_as_built():
    with jt.flag_scope(lazy_execution=False):
        y = jt.array([1.0, 2.0]) * 3
        assert y.is_realized()
        assert_var(y.detach(), np.array([3.0, 6.0], np.float32))
    assert not (jt.array([1.0]) * 3).is_realized()


def test_amp_reg_takes_jittors_bits_and_refuses_bit_32():
    assert jt.flags.amp_reg == 0
    with pytest.raises(ValueError, match="flag amp_reg must be in 0..31 .*got 32"):
        jt.flags.amp_reg = 32
    with jt.flag_scope(amp_reg=2):
        assert (jt.ones(2) * jt.ones(2)).dtype == "float16"
    assert jt.flags.amp_reg == 0



def test_like_draws_take_the_shape_and_float_dtype():
    x = jt.zeros((300, 4), "float64")
    u, n = jt.rand_like(x), jt.randn_like(x)
    assert u.shape == n.shape == (300, 4) and u.dtype == n.dtype == "float64"
    assert 0 <= u.numpy().min() and u.numpy().max() < 1 and abs(n.numpy().mean()) < 0.2
    assert jt.rand_like(jt.zeros((2,), "int32")).dtype == "float32"        # an int would truncate
    r = jt.randint_like(jt.zeros((2000,), "int32"), 10, 20)
    assert r.dtype == "int32" and r.numpy().min() == 10 and r.numpy().max() == 19
    with pytest.raises(TypeError, match="randint_like: x is a bool Var"):
        jt.randint_like(jt.array([True]), 3)


def test_normal_with_number_and_var_moments():
    r = jt.normal(1.0, 0.1, (200, 200)).numpy()
    assert r.shape == (200, 200) and abs(r.mean() - 1) < 0.01 and abs(r.std() - 0.1) < 0.01
    mean = jt.array(np.arange(4.0, dtype=np.float32) * 100)
    draw = jt.normal(mean, 0.5)
    assert draw.shape == (4,) and np.all(np.abs(draw.numpy() - mean.numpy()) < 5)
    assert_var(jt.grad(jt.normal(mean, 2.0).sum(), mean), np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"do not broadcast to size \(3,\)"):
        jt.normal(mean, 1.0, (3,))
    with pytest.raises(TypeError, match="normal: std must be a number or a Var, got str"):
        jt.normal(0.0, "1")


def test_a_float_scalar_with_int64_gives_float64_as_jittor():
    assert (jt.array(np.array([2, 3], np.int64)) * 2.0).dtype == "float64"
    assert (jt.array(np.array([2, 3], np.int32)) * 2.0).dtype == "float32"
    assert (jt.array(np.array([2, 3], np.int64)) * 2).dtype == "int64"


def test_in_place_matmul_rebinds_the_handle():
    a = jt.array(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    before, b = a, np.array([[0.0, 1.0], [1.0, 0.0]], np.float32)
    a @= jt.array(b)
    assert a is before
    assert_var(a, np.array([[2.0, 1.0], [4.0, 3.0]], np.float32))
    c = jt.ones((2, 3))
    c @= jt.ones((3, 4))                # as Jittor: the handle takes the result's shape
    assert_var(c, np.full((2, 4), 3.0, np.float32))


def test_module_direct_children_and_vars_in_order():
    m = jt.nn.Module()
    m.x, m.y = jt.nn.Module(), jt.nn.Linear(2, 3)
    m.a, m.b, m.n = jt.array([1, 2, 3]), jt.array([4.0]), 5
    assert list(m._modules) == ["x", "y"] and m._modules["y"] is m.y
    assert list(m._parameters) == ["a", "b"] and m._parameters["b"] is m.b
    m.__setattr__("k", 1)
    assert m.__getattr__("k") == 1
    with pytest.raises(AttributeError, match="missing"):
        m.__getattr__("missing")
    d = jt.nn.ModuleDict({"p": jt.nn.Linear(1, 1)})
    assert list(d._modules) == ["p"]                  # a container's own dict of modules


def test_cache_path_is_jittors_name_of_cache_dir(tmp_path):
    assert jt.flags.cache_path == jt.flags.cache_dir
    with jt.flag_scope(cache_path=str(tmp_path)):
        assert jt.flags.cache_dir == str(tmp_path)
    assert jt.flags.cache_path == jt.flags.cache_dir != str(tmp_path)
    with pytest.raises(TypeError, match="flag cache_dir must be a path"):
        jt.flags.cache_path = 3


def test_array64_keeps_64_bit_numpy_data():
    assert_var(jt.array64(np.array([1.5, 2.5])), np.array([1.5, 2.5]), dtype="float64")
    assert_var(jt.array64(np.array([2**40], np.int64)), np.array([2**40]), dtype="int64")
    assert jt.array64(np.float64(3.0)).dtype == "float64"
    assert jt.array64(np.array([1, 2], np.int32)).dtype == "int32"
    assert jt.array64([1.0, 2.0]).dtype == jt.array([1.0, 2.0]).dtype     # Python data: as jt.array
    with pytest.raises(TypeError):
        jt.array64("text")


@pytest.mark.parametrize("dim", [1, -4, -1, 4])
def test_cross_matches_torch(dim, rng):
    a, b = rng.normal(size=(2, 3, 4, 3, 3)), rng.normal(size=(2, 3, 4, 3, 3))
    check_grad(lambda x, y: jt.cross(x, y, dim), lambda x, y: torch.cross(x, y, dim=dim), [a, b],
               ["transposed", "sliced"], rng=rng)


def test_cross_broadcasts_and_checks_the_dim(rng):
    a, b = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(3,)).astype(np.float32)
    assert_var(jt.cross(jt.array(a), jt.array(b)), np.cross(a, b), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"cross: dim 1 must have size 3, got shape \(2, 4\)"):
        jt.cross(jt.ones((2, 4)), jt.ones((2, 4)))


@pytest.mark.parametrize("p,dim", [(2, 1), (2, -1), (1, 0), (3, 2)])
def test_normalize_matches_torch(p, dim, rng):
    value = rng.normal(size=(3, 4, 5))
    check_grad(lambda x: jt.normalize(x, p=p, dim=dim), lambda x: torch.nn.functional.normalize(x, p=p, dim=dim),
               [value], ["sliced"], rng=rng)
    assert_var(jt.normalize(jt.zeros((2, 3))), np.zeros((2, 3), np.float32))    # zeros stay zeros


def test_unbind_gives_the_slices_along_a_dim(rng):
    value = rng.normal(size=(2, 3, 4)).astype(np.float32)
    for dim in range(-3, 3):
        parts = jt.unbind(jt.array(value), dim)
        expected = torch.unbind(torch.tensor(value), dim)
        assert len(parts) == len(expected)
        for got, want in zip(parts, expected):
            assert_var(got, want.numpy())
    x = jt.array(value)
    g = jt.grad((jt.unbind(x, 1)[2] * 2).sum(), x).numpy()
    assert g[:, 2].min() == 2 and g.sum() == 2 * 8
    with pytest.raises(ValueError, match="unbind: a 0-d Var has no dim"):
        jt.unbind(jt.array(1.0))
