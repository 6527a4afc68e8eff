"""Jittor's math and reduction functions (jtmini/ops/mathfns.py): values against numpy / PyTorch,
gradients against PyTorch (float64) on inputs read through non-contiguous views, and errors.

The functions are read from the registry (``F``) and as Var methods, so these tests do not depend
on ``jtmini/ops/__init__.py`` importing the module.
"""
import numpy as np
import pytest
import torch

import jtmini as jt
from conftest import assert_var, check_grad, make_input
from jtmini.ops.registry import METHODS

F = vars(jt)        # the public functions, jt.<name>

SHAPE = (3, 4)
NAMES = ["sqr", "clamp", "safe_clip", "std", "var", "norm", "logsumexp", "softmax", "log_softmax",
         "isnan", "isinf", "isfinite", "reduce_add", "reduce_multiply", "reduce_maximum",
         "reduce_minimum", "reduce_logical_and", "reduce_logical_or", "reduce_logical_xor", "cumsum",
         "cumprod", "sort", "argsort", "topk", "fetch_sync"]


def _normal(rng, shape=SHAPE):
    return rng.standard_normal(shape).astype(np.float32)


def test_every_name_is_a_function_and_a_method_with_an_example():
    for name in NAMES:
        assert name in F and name in METHODS and hasattr(jt.Var, name), name
        assert ">>>" in F[name].__doc__, name


# --- elementwise ---------------------------------------------------------------------------------
def test_sqr(rng):
    value = _normal(rng)
    x, _ = make_input(value, "transposed")
    assert_var(F["sqr"](x), value * value)
    check_grad(lambda x: x.sqr(), lambda x: x * x, [value], ["sliced"], rng=rng)


def test_clamp_values_and_spellings(rng):
    value = _normal(rng) * 2
    x, _ = make_input(value, "sliced")
    assert_var(x.clamp(-1, 0.5), np.clip(value, -1, 0.5))
    assert_var(F["clamp"](x, min=-1, max=0.5), np.clip(value, -1, 0.5))
    assert_var(x.clamp(max_v=0.0), np.minimum(value, 0))
    assert_var(x.clamp(min_v=0.0), np.maximum(value, 0))
    assert_var(x.clamp(), value)                                       # no bound: x, as Jittor
    assert_var(x.clamp(jt.array(np.full((1, 4), -0.5, np.float32)), 1.0), np.clip(value, -0.5, 1))
    ints = jt.array(np.array([-3, 0, 7], np.int32))
    assert_var(ints.clamp(-1, 5), np.array([-1, 0, 5], np.int32))
    assert_var(jt.array([float("nan"), 5.0]).clamp(0, 1), np.array([np.nan, 1], np.float32))


def test_clamp_grad(rng):
    check_grad(lambda x: x.clamp(-0.5, 0.5), lambda x: x.clamp(-0.5, 0.5), [_normal(rng)],
               ["transposed"], rng=rng)
    x = jt.array([-1.0, -0.5, 0.0, 0.5, 1.0])     # at a bound the gradient passes, as in PyTorch
    assert_var(jt.grad(x.clamp(-0.5, 0.5).sum(), x), np.array([0, 1, 1, 1, 0], np.float32))


def test_safe_clip(rng):
    value = _normal(rng) * 2
    x, leaf = make_input(value, "transposed")
    out = F["safe_clip"](x, -1.0, 1.0)
    assert_var(out, np.clip(value, -1, 1))
    assert_var(jt.grad((out * 3).sum(), leaf), np.full(leaf.shape, 3, np.float32))   # straight through
    assert_var(x.safe_clip(-np.inf, 0.0), np.minimum(value, 0))
    assert_var(jt.array(np.array([-5, 2, 9], np.int32)).safe_clip(0, 4), np.array([0, 2, 4], np.int32))


def test_isnan_isinf_isfinite():
    value = np.array([[1.0, np.nan, np.inf], [-np.inf, -0.0, 3e38]], np.float32)
    x, _ = make_input(value, "transposed")
    for name, ref in [("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite)]:
        assert_var(getattr(x, name)(), ref(value))
        assert_var(F[name](x.float64()), ref(value))
        ints = jt.array(np.array([0, -2, 7], np.int32))
        assert_var(F[name](ints), ref(np.array([0, -2, 7])))
    x = jt.array(value)
    assert_var(jt.grad((x.isfinite() * x).sum(), x), np.isfinite(value).astype(np.float32))


# --- statistics ----------------------------------------------------------------------------------
STAT_CASES = [(None, False), (1, True), ((0, 1), False), (-2, False)]


@pytest.mark.parametrize("dim,keep", STAT_CASES)
def test_std_matches_pytorch_unbiased(dim, keep, rng):
    layout = "sliced" if dim == 1 else "transposed"
    check_grad(lambda x: x.std(dim, keep), lambda x: torch.std(x, dim, keepdim=keep),
               [_normal(rng)], [layout], rng=rng)


@pytest.mark.parametrize("dim,keep", STAT_CASES)
def test_var_is_biased_by_default_as_jittor(dim, keep, rng):
    layout = "sliced" if dim == 1 else "transposed"
    check_grad(lambda x: x.var(dim, keepdims=keep), lambda x: torch.var(x, dim, unbiased=False, keepdim=keep),
               [_normal(rng)], [layout], rng=rng)


def test_var_std_options(rng):
    value = _normal(rng)
    x = jt.array(value)
    assert_var(F["var"](x, dims=(0, 1), unbiased=True), np.var(value, ddof=1), rtol=1e-5)
    assert_var(x.var(dim=0, keepdim=True), np.var(value, 0, keepdims=True), rtol=1e-5)
    assert_var(x.std(1, unbiased=False), np.std(value, 1), rtol=1e-5)
    assert_var(jt.array(np.array([1, 2, 3, 4], np.int32)).var(), np.float32(1.25))
    assert np.isnan(jt.array([2.0]).std().item())                   # no degrees of freedom, as PyTorch
    assert abs(jt.array([3.0, 3.0]).std().item() - 1e-3) < 1e-9           # Jittor's floor: var >= 1e-6


def test_mean_is_rounded_once_and_the_variance_survives_a_large_offset():
    """The mean of a float32 sum is divided, not multiplied by 1 / n (which put this one an ulp
    off), and the variance's second pass is corrected by the centered sum: with the mean an ulp
    off, the std of values 0.01 apart around 1e4 was 6e-4 too large."""
    value = (1e4 + np.arange(10) * 1e-2).astype("float32")
    exact = value.astype(np.float64)
    assert jt.array(value).mean().item() == np.float32(exact.mean())
    np.testing.assert_allclose(jt.array(value).std().item(), np.std(exact, ddof=1), rtol=1e-6)
    rows = np.stack([value, value[::-1] + 1e3, value * 0.5]).astype("float32")
    np.testing.assert_allclose(jt.array(rows).var(1).numpy(), np.var(rows.astype(np.float64), 1), rtol=1e-5)


NORM_CASES = [(2, -1, False), (1, 0, True), (3, (0, 1), False), (float("inf"), 1, False), (2, None, True)]


@pytest.mark.parametrize("p,dim,keep", NORM_CASES)
def test_norm_matches_pytorch(p, dim, keep, rng):
    check_grad(lambda x: x.norm(p, dim, keep),
               lambda x: torch.linalg.vector_norm(x, p, dim, keepdim=keep),
               [_normal(rng)], ["transposed"], rng=rng)


def test_norm_of_zeros_is_zero_with_zero_gradient():
    x = jt.zeros(2, 3)
    assert_var(F["norm"](x, 2, 1), np.zeros(2, np.float32))
    assert_var(jt.grad(x.norm(2, 1).sum(), x), np.zeros((2, 3), np.float32))
    assert_var(jt.grad(x.norm(3, 1).sum(), x), np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("dim,keep", [(1, False), ((0, 1), True)])
def test_logsumexp(dim, keep, rng):
    check_grad(lambda x: x.logsumexp(dim, keep), lambda x: torch.logsumexp(x, dim, keep),
               [_normal(rng) * 3], ["sliced"], rng=rng)


def test_logsumexp_is_stable():
    value = np.array([[1000.0, 1000.0, -1000.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0]],
                     np.float32)
    expected = torch.logsumexp(torch.tensor(value), 1).numpy()
    assert_var(F["logsumexp"](jt.array(value), 1), expected)
    assert_var(jt.array(value).logsumexp(None, keepdims=True), np.full((1, 1), np.inf, np.float32))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_and_log_softmax(name, rng):
    t_fn = getattr(torch, name)
    check_grad(lambda x: getattr(x, name)(1), lambda x: t_fn(x, 1), [_normal(rng)], ["transposed"], rng=rng)
    value = _normal(rng)
    flat = t_fn(torch.tensor(value).reshape(-1), 0).reshape(SHAPE).numpy()
    assert_var(F[name](jt.array(value)), flat)                         # dim None: every dim, as Jittor
    assert_var(F[name](jt.array(value), 0), t_fn(torch.tensor(value), 0).numpy())
    assert_var(F["softmax"](jt.array(value), 1, log=True),
               torch.log_softmax(torch.tensor(value), 1).numpy())


@pytest.mark.parametrize("shape,dim", [((2, 0), 1), ((0, 3), 0), ((0, 3), 1), ((2, 0, 3), None)])
def test_softmax_and_logsumexp_over_empty_dims_as_pytorch(shape, dim):
    """An empty softmax is the empty result; the log of an empty sum is -inf (PyTorch's answers)."""
    value = np.zeros(shape, np.float32)
    x, t = jt.array(value), torch.tensor(value)
    for name in ("softmax", "log_softmax"):
        want = getattr(torch, name)(t.reshape(-1), 0).reshape(shape) if dim is None else getattr(torch, name)(t, dim)
        assert_var(F[name](x, dim), want.numpy())
        assert jt.grad(F[name](x, dim).sum(), x).shape == shape
    dims = tuple(range(len(shape))) if dim is None else dim
    for keep in (False, True):
        assert_var(x.logsumexp(dim, keep), torch.logsumexp(t, dims, keep).numpy())
    assert jt.grad(x.logsumexp(dim).sum(), x).shape == shape


# --- reduce_* ------------------------------------------------------------------------------------
REDUCE = {
    "reduce_add": np.sum, "reduce_multiply": np.prod, "reduce_maximum": np.max,
    "reduce_minimum": np.min, "reduce_logical_and": np.all, "reduce_logical_or": np.any,
    "reduce_logical_xor": lambda v, axis, keepdims: np.sum(v != 0, axis, keepdims=keepdims) % 2 == 1,
}


@pytest.mark.parametrize("name", REDUCE)
def test_reduce_values(name, rng):
    ref = REDUCE[name]
    value = rng.integers(-1, 2, SHAPE).astype(np.int32)
    x, _ = make_input(value, "transposed")
    for dims, axis in [(None, None), ((), None), (1, 1), ([0, 1], (0, 1))]:
        expected = ref(value, axis=axis, keepdims=False)
        got = F[name](x, dims)
        np.testing.assert_array_equal(got.numpy(), expected)
        assert got.dtype == ("bool" if "logical" in name else "int64" if "add" in name or "mul" in name
                             else "int32")
    np.testing.assert_array_equal(getattr(x, name)(0, keepdims=True).numpy(), ref(value, axis=0, keepdims=True))


@pytest.mark.parametrize("name,t_fn", [("reduce_add", lambda x: x.sum(1)), ("reduce_multiply", lambda x: x.prod(1)),
                                       ("reduce_maximum", lambda x: x.amax(1)),
                                       ("reduce_minimum", lambda x: x.amin(1))])
def test_reduce_grads(name, t_fn, rng):
    check_grad(lambda x: getattr(x, name)(1), t_fn, [_normal(rng)], ["sliced"], rng=rng)


# --- scans ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dim,layout", [(1, "contig"), (0, "transposed"), (-1, "sliced")])
def test_scan_values_and_grads(name, dim, layout, rng):
    value = rng.uniform(0.5, 1.5, SHAPE) * rng.choice([-1, 1], SHAPE)
    check_grad(lambda x: getattr(x, name)(dim), lambda x: getattr(torch, name)(x, dim),
               [value], [layout], rng=rng)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_scan_dtypes_and_defaults(name, rng):
    ref = getattr(np, name)
    ints = rng.integers(-3, 4, SHAPE).astype(np.int32)
    assert_var(F[name](jt.array(ints), 1), ref(ints, 1).astype(np.int64))          # int64, as PyTorch
    flags = ints > 0
    assert_var(getattr(jt.array(flags), name)(0), ref(flags, 0).astype(np.int64))
    assert_var(F[name](jt.array(2.5), 0), np.float32(2.5))                             # 0-d
    if name == "cumsum":
        assert_var(F["cumsum"](jt.array(ints)), np.cumsum(ints, -1).astype(np.int64))   # last dim, as Jittor


def test_cumprod_grad_with_zeros(rng):
    value = np.array([[0.0, 2.0, 3.0, 0.5], [1.5, 0.0, -2.0, 0.0], [2.0, -1.0, 0.0, 4.0]])
    check_grad(lambda x: x.cumprod(1), lambda x: torch.cumprod(x, 1), [value], ["transposed"], rng=rng)
    check_grad(lambda x: x.cumprod(0), lambda x: torch.cumprod(x, 0), [value], ["contig"],
               dtype="float64", rng=rng)


def test_cumsum_second_derivative(rng):
    value = _normal(rng, (2, 3))
    x = jt.array(value)
    g = jt.grad((x.cumsum(1) ** 3).sum(), x)
    gg = jt.grad((g * g).sum(), x)
    t = torch.tensor(value.astype(np.float64), requires_grad=True)
    (tg,) = torch.autograd.grad((t.cumsum(1) ** 3).sum(), t, create_graph=True)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), t)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-4, atol=1e-5)


# --- orderings -----------------------------------------------------------------------------------
def _ties(rng, shape=SHAPE):
    return rng.integers(0, 3, shape).astype(np.float32)


@pytest.mark.parametrize("dim,descending,layout", [(-1, False, "transposed"), (0, True, "sliced")])
def test_sort_and_argsort_match_pytorch_stable(dim, descending, layout, rng):
    value = _ties(rng)
    x, _ = make_input(value, layout)
    t_values, t_index = torch.sort(torch.tensor(value), stable=True, dim=dim, descending=descending)
    values, index = x.sort(dim, descending)                               # Jittor: (values, indices)
    assert_var(values, t_values.numpy())
    assert_var(index, t_index.numpy().astype(np.int32))
    index2, values2 = F["argsort"](x, dim, descending)                    # Jittor: (indices, values)
    assert_var(index2, t_index.numpy().astype(np.int32))
    assert_var(values2, t_values.numpy())
    check_grad(lambda x: x.sort(dim, descending)[0], lambda x: torch.sort(x, stable=True, dim=dim, descending=descending)[0],
               [_normal(rng)], [layout], rng=rng)


def test_sort_nan_is_largest_and_0d():
    x = jt.array([1.0, float("nan"), -1.0])
    np.testing.assert_array_equal(x.sort()[1].numpy(), [2, 0, 1])
    np.testing.assert_array_equal(x.sort(descending=True)[1].numpy(), [1, 0, 2])
    values, index = F["sort"](jt.array(4.0))
    assert F["cumsum"](jt.array(2.0)).item() == 2
    assert values.shape == (1,) and values.item() == 4 and index.item() == 0      # Jittor's [1]


@pytest.mark.parametrize("k,dim,largest", [(2, None, True), (1, 0, False), (3, 0, True)])
def test_topk(k, dim, largest, rng):
    value = _normal(rng)
    x, _ = make_input(value, "transposed")
    t_values, t_index = torch.topk(torch.tensor(value), k, -1 if dim is None else dim, largest)
    values, index = x.topk(k, dim, largest)
    assert_var(values, t_values.numpy())
    assert_var(index, t_index.numpy().astype(np.int32))
    check_grad(lambda x: F["topk"](x, k, dim, largest)[0],
               lambda x: torch.topk(x, k, -1 if dim is None else dim, largest)[0], [value], ["sliced"], rng=rng)


def test_topk_ties_keep_their_order():
    values, index = jt.array([1.0, 3.0, 3.0, 2.0, 3.0]).topk(3)
    np.testing.assert_array_equal(index.numpy(), [1, 2, 4])
    assert_var(values, np.array([3, 3, 3], np.float32))


def test_fetch_sync():
    a = jt.array(np.array([1, 2], np.int32))
    got = a.fetch_sync()
    assert isinstance(got, np.ndarray) and got.tolist() == [1, 2]
    first, second = F["fetch_sync"]([a * 2, a + 1])
    assert first.tolist() == [2, 4] and second.tolist() == [2, 3]


# --- errors --------------------------------------------------------------------------------------
def test_errors_name_what_was_wrong():
    x = jt.array(np.ones(SHAPE, np.float32))
    cases = [
        (ValueError, r"clamp: min_v \(2\) is greater than max_v \(1\)", lambda: x.clamp(2, 1)),
        (TypeError, r"clamp: min_v must be a number.*str", lambda: x.clamp("0")),
        (TypeError, r"clamp: got both min_v=0 and min=1", lambda: F["clamp"](x, 0, min=1)),
        (ValueError, r"safe_clip: left \(1\) is greater than right \(0\)", lambda: x.safe_clip(1, 0)),
        (TypeError, r"safe_clip: left must be a number, got NoneType", lambda: x.safe_clip(None, 1)),
        (ValueError, r"var: pass dim \(0\) or dims \(\(1,\)\), not both", lambda: x.var(0, (1,))),
        (ValueError, r"norm: p must be a number >= 1 or inf, got 0.5", lambda: x.norm(0.5)),
        (ValueError, r"norm: p must be .* got 'fro'", lambda: x.norm("fro")),
        (TypeError, r"std: dims must be an int or a tuple of ints, got str", lambda: x.std("1")),
        (IndexError, r"dim 2 is out of range for a Var with 2 dims", lambda: x.logsumexp(2)),
        (IndexError, r"dim 5 is out of range", lambda: F["reduce_add"](x, 5)),
        (TypeError, r"cumsum: dim must be an int, got float 1.0", lambda: x.cumsum(1.0)),
        (IndexError, r"dim -3 is out of range", lambda: x.cumprod(-3)),
        (IndexError, r"dim 2 is out of range", lambda: x.sort(2)),
        (TypeError, r"argsort: dim must be an int, got NoneType", lambda: x.argsort(None)),
        (ValueError, r"topk: k must be an int >= 0 \(dim -1 of shape \(3, 4\) has 4\), got -1",
         lambda: x.topk(-1)),
        (ValueError, r"topk: k must be an int >= 0 .*got 1.5", lambda: x.topk(1.5, 0)),
        (TypeError, r"fetch_sync needs a Var or a list of Vars, got int", lambda: F["fetch_sync"](3)),
    ]
    for error, pattern, call in cases:
        with pytest.raises(error, match=pattern):
            call()


def test_erf_is_a_function_and_a_method_and_promotes_integers():
    import math
    values = [-2, 0, 1]
    expected = np.array([math.erf(v) for v in values], "float32")
    np.testing.assert_allclose(jt.erf(jt.array(values)).numpy(), expected, atol=2e-7)
    np.testing.assert_allclose(jt.array(values).float32().erf().numpy(), expected, atol=2e-7)
