"""Jittor's shaping and indexing surface added for compatibility (broadcast/broadcast_var,
reindex_var, reindex_reduce's op names, index_var, *_int roundings, diagonal, searchsorted, unique,
functional setitem, nn.unfold/fold) against PyTorch CPU or numpy: values, gradients on
broadcast and non-contiguous inputs, and the error cases."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jtmini as jt

from conftest import LAYOUTS, assert_var, check_grad, make_input


# --- broadcast, broadcast_var ------------------------------------------------------------------
@pytest.mark.parametrize("a, b", [((1,), (3,)), ((3, 1), (3,)), ((3, 1, 3), (1, 3, 1)),
                                  ((2, 3), (2, 3, 1, 1)), ((2, 1, 3, 1, 4), (1, 3, 4))])
def test_broadcast_both_ways(rng, a, b):
    x, y = rng.standard_normal(a).astype("float32"), rng.standard_normal(b).astype("float32")
    expected = np.broadcast_arrays(x, y)[0]
    assert_var(jt.array(x).broadcast(b), expected)
    assert_var(jt.array(x).broadcast_var(jt.array(y)), expected)
    assert_var(jt.ops.broadcast_var(x, y), expected)


def test_broadcast_dims_take_x_sizes():
    x = jt.array(np.array([1, 2], "int32"))
    assert_var(x.broadcast([1, 3], dims=[1]), [[1, 1, 1], [2, 2, 2]], "int32")
    assert_var(x.broadcast(jt.zeros((2, 2)), [-2]), [[1, 2], [1, 2]], "int32")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_broadcast_var_grad(rng, layout):
    y = jt.zeros((4, 3, 5))
    check_grad(lambda a: a.broadcast_var(y), lambda a: a.expand(4, 3, 5),
               [rng.standard_normal((3, 1))], layouts=[layout], rng=rng)


def test_broadcast_errors():
    with pytest.raises(ValueError, match=r"\(2,\) and \(3,\)"):
        jt.ops.broadcast_var([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="has 1 dims"):
        jt.array([1, 2]).broadcast([2, 2, 2], dims=[0])


# --- reindex_reduce op names, multiply gradient -------------------------------------------------
@pytest.mark.parametrize("op, torch_op", [("maximum", "amax"), ("minimum", "amin"),
                                          ("multiply", "prod"), ("add", "sum")])
def test_reindex_reduce_jittor_names(rng, op, torch_op):
    x = rng.standard_normal((6, 4)).astype("float32")
    if op == "multiply":                             # (zeros would tie for max/min, which torch splits)
        x[1, 2] = 0.0                                # one zero in a group: multiply's gradient is exact there
        x[4, 1] = x[5, 1] = 0.0                      # two zeros: every gradient of that group is 0
    pooled = lambda v: v.reindex_reduce(op, [3, 4], ["i0/2", "i1"])
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    expected = getattr(t.reshape(3, 2, 4), torch_op)(1)
    w = rng.standard_normal((3, 4))
    (expected * torch.tensor(w)).sum().backward()
    xv = jt.array(x)
    y = pooled(xv)
    np.testing.assert_allclose(y.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    dx = jt.grad((y * jt.array(w.astype("float32"))).sum(), xv)
    np.testing.assert_allclose(dx.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_reindex_reduce_multiply_gradient_through_an_index_var(rng):
    """The product gradient's own scatter and gather read the index Vars too (``@e0``)."""
    x = rng.standard_normal(8)
    x[2] = 0.0
    groups = np.array([0, 1, 0, 2, 1, 2, 0, 1])
    t = torch.tensor(x, requires_grad=True)
    expected = torch.ones(3, dtype=torch.float64).scatter_reduce(0, torch.tensor(groups), t, "prod")
    expected.sum().backward()
    xv = jt.array(x.astype("float32"))
    y = xv.reindex_reduce("multiply", [3], ["@e0(i0)"], extras=[jt.array(groups.astype("int32"))])
    np.testing.assert_allclose(y.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jt.grad(y.sum(), xv).numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("args, error", [(("add", [3], []), ValueError), (("add", [3], ["i0", "i0"]), ValueError),
                                         (("???", [3], ["i0"]), ValueError), (("add", [-1], ["i0"]), ValueError)])
def test_reindex_reduce_errors(args, error):
    with pytest.raises(error):
        jt.random([3]).reindex_reduce(*args)


# --- reindex_var, index_var, rounding to int ---------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_reindex_var_value_and_grad(rng, layout):
    rows = np.array([[2, 0, 5], [1, 1, -1]])       # 5 and -1 are outside: they read 0
    cols = np.array([[0, 3, 1], [2, 2, 0]])
    def jt_fn(x):
        return x.reindex_var([jt.array(rows), jt.array(cols)])
    def torch_fn(x):
        ok = torch.tensor((rows >= 0) & (rows < 3))
        return torch.where(ok, x[torch.tensor(rows.clip(0, 2)), torch.tensor(cols)], torch.zeros(()).double())
    check_grad(jt_fn, torch_fn, [rng.standard_normal((3, 4))], layouts=[layout], rng=rng)


def test_reindex_var_float_index_and_errors():
    x = jt.array(np.arange(4.0, dtype="float32"))
    assert_var(x.reindex_var([jt.array(np.array([2.0, 0.7, 3.9], "float32"))], overflow_value=-1), [2.0, 0.0, 3.0], "float32")
    with pytest.raises(ValueError, match="needs 2 index Vars"):
        jt.zeros((2, 2)).reindex_var([jt.array([0])])
    with pytest.raises(ValueError, match="one shape"):
        jt.zeros((2, 2)).reindex_var([jt.array([0]), jt.array([0, 1])])


def test_index_var():
    x = jt.zeros((2, 3))
    assert_var(x.index_var(1), np.broadcast_to(np.arange(3, dtype="int32"), (2, 3)))
    a, b = x.index_var()
    assert_var(a, np.repeat(np.arange(2, dtype="int32")[:, None], 3, 1))


def test_int_roundings(rng):
    v = np.concatenate([rng.uniform(-5, 5, 50), [0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -3.0]]).astype("float32")
    x = jt.array(v)
    assert_var(x.floor_int(), np.floor(v).astype("int32"))
    assert_var(x.ceil_int(), np.ceil(v).astype("int32"))
    away = np.trunc(v + np.copysign(np.float32(0.5), v)).astype("int32")     # C's round, checked below
    away[np.abs(v - np.trunc(v)) < 0.5] = np.round(v[np.abs(v - np.trunc(v)) < 0.5]).astype("int32")
    assert_var(x.round_int(), away)
    assert_var(jt.array(np.array([3, -2], "int32")).round_int(), [3, -2], "int32")


def test_jittor_dtype_aliases():
    assert jt.float == "float32" and jt.int == "int32"
    assert_var(jt.float(1), np.array(1.0, "float32"))
    assert_var(jt.int(jt.array([1.7, -1.7])), np.array([1, -1], "int32"))


# --- diagonal ----------------------------------------------------------------------------------
@pytest.mark.parametrize("offset, dim1, dim2", [(0, 1, 2), (-1, 1, 2), (2, 1, 2), (-6, 1, 2), (7, 1, 2),
                                                (1, -1, 2), (1, 2, 1), (1, 0, -2)])
def test_diagonal_values(offset, dim1, dim2):
    x = np.arange(5 * 6 * 7 * 8).reshape(5, 6, 7, 8).astype("int32")
    expected = torch.from_numpy(x).diagonal(offset=offset, dim1=dim1, dim2=dim2).numpy()
    assert_var(jt.misc.diagonal(jt.array(x), offset, dim1=dim1, dim2=dim2), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_diagonal_grad(rng, layout):
    check_grad(lambda a: a.diagonal(1, 0, 1), lambda a: a.diagonal(1, 0, 1),
               [rng.standard_normal((4, 5))], layouts=[layout], rng=rng)


def test_diagonal_errors():
    with pytest.raises(ValueError, match="same dim"):
        jt.zeros((3, 3)).diagonal(0, 1, -1)
    with pytest.raises(IndexError):
        jt.zeros((3, 3)).diagonal(0, 0, 2)


# --- searchsorted, unique ----------------------------------------------------------------------
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted(rng, right):
    seq = np.sort(rng.integers(0, 20, (3, 7)), 1).astype("float32")
    values = rng.integers(-2, 22, (3, 5)).astype("float32")
    expected = torch.searchsorted(torch.tensor(seq), torch.tensor(values), right=right).numpy()
    assert_var(jt.searchsorted(jt.array(seq), jt.array(values), right=right), expected.astype("int32"))
    one = torch.searchsorted(torch.tensor(seq[0]), torch.tensor(values), right=right).numpy()
    assert_var(jt.searchsorted(jt.array(seq[0]), jt.array(values), right=right), one.astype("int32"))


def test_searchsorted_errors():
    with pytest.raises(ValueError):
        jt.searchsorted(jt.array(1.0), jt.array([1.0]))
    with pytest.raises(ValueError):
        jt.searchsorted(jt.zeros((2, 3)), jt.zeros((3, 4)))


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_unique_against_torch(dim):
    x = np.array([[1, 3], [2, 3], [1, 3], [2, 3]], "int32")
    values, inverse, counts = jt.unique(jt.array(x), True, True, dim)
    tv, ti, tc = torch.unique(torch.tensor(x), True, True, True, dim)
    assert_var(values, tv.numpy())
    assert_var(inverse, ti.numpy().astype("int32"))
    assert_var(counts, tc.numpy().astype("int32"))
    assert_var(jt.unique(jt.array(x), dim=dim), tv.numpy())


# --- functional setitem --------------------------------------------------------------------------
def test_setitem_method_is_functional(rng):
    a = jt.array(rng.standard_normal(10).astype("float32"))
    before = a.numpy().copy()
    b = jt.array(rng.standard_normal(2).astype("float32"))
    c = a.setitem(slice(2, 4), b)
    np.testing.assert_array_equal(a.numpy(), before)
    expected = before.copy()
    expected[2:4] = b.numpy()
    assert_var(c, expected)
    w = rng.standard_normal(10).astype("float32")
    da, db = jt.grad((c * jt.array(w)).sum(), [a, b])
    assert_var(da, np.where(np.isin(np.arange(10), [2, 3]), 0, w).astype("float32"))
    assert_var(db, w[2:4])
    a[jt.where(jt.array([0, 1, 0, 0, 0, 0, 0, 0, 0, 1]))] = 0       # x[i] = v still rebinds x
    assert a.numpy()[1] == 0 and a.numpy()[9] == 0


# --- unfold / fold -------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(kernel_size=2, stride=2, dilation=2, padding=2),
                                dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0)),
                                dict(kernel_size=3)])
@pytest.mark.parametrize("layout", ["contig", "transposed"])
def test_unfold_fold_against_torch(rng, kw, layout):
    check_grad(lambda a: jt.nn.unfold(a, **kw), lambda a: TF.unfold(a, **kw),
               [rng.standard_normal((2, 3, 7, 6))], layouts=[layout], rng=rng)
    cols = TF.unfold(torch.zeros(2, 3, 7, 6), **kw).shape
    check_grad(lambda a: jt.nn.fold(a, (7, 6), **kw), lambda a: TF.fold(a, (7, 6), **kw),
               [rng.standard_normal(tuple(cols))], layouts=[layout], rng=rng)


def test_unfold_fold_errors():
    with pytest.raises(ValueError, match="NCHW"):
        jt.nn.unfold(jt.zeros((3, 4, 4)), 2)
    with pytest.raises(ValueError, match="does not fit"):
        jt.nn.unfold(jt.zeros((1, 1, 2, 2)), 3)
    with pytest.raises(TypeError, match="kernel_size"):
        jt.nn.unfold(jt.zeros((1, 1, 4, 4)), 2.5)
    with pytest.raises(ValueError, match="do not fit"):
        jt.nn.fold(jt.zeros((1, 5, 9)), (4, 4), kernel_size=2)


def test_jittor_probes():
    assert jt.compiler.has_cuda in (True, False)
    jt.dirty_fix_pytorch_runtime_error()          # torch is installed here: imports it
    assert "Reindex Operator" in jt.reindex.__doc__ and "Index Operator" in jt.index.__doc__
