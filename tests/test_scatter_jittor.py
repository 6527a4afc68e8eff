"""Jittor's own scatter, gather and setitem semantics where they go beyond PyTorch's, against
PyTorch CPU and numpy (values, and float64 gradients through ``conftest.check_grad``):

- an index of fewer dims than x moves x's trailing dims whole (Jittor builds the slices
  ``i0, .., index, ..`` for ``setitem``/``getitem``), and a larger src is cut to index's sizes;
- ``reduce``/``op`` is any of Jittor's setitem ops: void, add (sum), subtract, multiply, divide,
  maximum (max), minimum (min), folded into x's entry with every repeat included;
- ``Var.setitem(index, value, op)``, Jittor's functional form with its op;
- float index Vars truncate toward zero, as Jittor's kernels cast them;
- one-argument ``where`` and ``nonzero`` give int32 indices, or the ``dtype`` asked for.
"""
import numpy as np
import pytest
import torch

import jtmini as jt
from conftest import assert_var, check_grad

F = vars(jt)        # the public functions, jt.<name>


def _raises(kind, words, fn):
    with pytest.raises(kind) as err:
        fn()
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def _full_index(index, xshape):
    """A low-dim index spread over x's trailing dims: the index PyTorch needs for the same scatter."""
    index = np.asarray(index)
    shape = index.shape + tuple(xshape[index.ndim:])
    return np.broadcast_to(index.reshape(index.shape + (1,) * (len(xshape) - index.ndim)), shape).copy()


# torch's reference of each Jittor op on float tensors: include_self folds into x's entry
def _torch_fold(op):
    def ref(x, dim, index, src):
        index = torch.tensor(_full_index(index, x.shape))
        if op == "void":
            return x.scatter(dim, index, src)
        if op in ("add", "subtract"):
            placed = torch.zeros_like(x).scatter_add(dim, index, src)
            return x + placed if op == "add" else x - placed
        if op == "divide":
            return x / torch.ones_like(x).scatter_reduce(dim, index, src, "prod", include_self=True)
        how = {"multiply": "prod", "maximum": "amax", "minimum": "amin"}[op]
        return x.scatter_reduce(dim, index, src, how, include_self=True)
    return ref


FOLDS = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]


# --- an index of fewer dims than x --------------------------------------------------------------
def test_low_dim_index_scatters_whole_rows():
    """Jittor's ``scatter(x, 0, index, src, "add")`` with an (E,) index and (E, F) src adds rows
    (JittorGeometric's MessagePassing.aggregate)."""
    src = jt.arange(15).reshape(5, 3).float32()
    index = jt.array([0, 2, 2, 1, 0])
    want = np.float32([[12, 14, 16], [9, 10, 11], [9, 11, 13], [0, 0, 0]])
    assert_var(jt.scatter(jt.zeros((4, 3)), 0, index, src=src, reduce="add"), want)
    assert_var(jt.zeros((4, 3)).scatter(0, index, src, "sum"), want)
    x = jt.zeros((4, 3))
    assert x.scatter_(0, index, src, reduce="add") is x
    assert_var(x, want)
    # a replacing scatter writes the rows of distinct positions
    assert_var(jt.zeros((4, 3)).scatter(0, jt.array([3, 1]), src[:2]), np.float32([[0] * 3, [3, 4, 5], [0] * 3, [0, 1, 2]]))


@pytest.mark.parametrize("op", ["void"] + FOLDS)
@pytest.mark.parametrize("case", ["rows", "dim 1 of 3-D", "dim 0 of 3-D, 2-D index"])
def test_low_dim_index_values_and_gradients(case, op, rng):
    xshape, dim, index = {
        "rows": ((4, 3), 0, np.array([0, 2, 2, 1, 0]) if op != "void" else np.array([2, 0, 3])),
        "dim 1 of 3-D": ((2, 5, 3), 1, np.array([[4, 0, 4, 1], [2, 2, 3, 0]]) if op != "void"
                         else np.array([[4, 0, 1], [2, 3, 0]])),
        "dim 0 of 3-D, 2-D index": ((3, 4, 2), 0, np.array([[1, 1, 0], [2, 1, 1]]) if op != "void"
                                    else np.array([[1, 2, 0], [2, 1, 1]])),
    }[case]
    shape = index.shape + xshape[index.ndim:]
    x, src = rng.standard_normal(xshape), rng.standard_normal(shape)
    if op == "divide":
        src = np.where(np.abs(src) < 0.3, 0.7, src)         # no near-zero divisors
    ref = _torch_fold(op)
    check_grad(lambda a, s: a.scatter(dim, jt.array(index), s, op),
               lambda a, s: ref(a, dim, index, s), [x, src], layouts=["transposed", "sliced"], dtype="float64", rng=rng)


def test_low_dim_index_cuts_a_larger_src(rng):
    """Jittor cuts src to index's sizes (``src[:E]``); its trailing dims must then fit x's."""
    x, src = rng.standard_normal((4, 3)), rng.standard_normal((7, 3))
    index = np.array([1, 3, 1])
    want = _torch_fold("add")(torch.tensor(x), 0, index, torch.tensor(src[:3])).numpy()
    assert_var(jt.array(x).scatter(0, jt.array(index), jt.array(src), "add"), want)
    s = jt.array(src)
    got = jt.grad((jt.array(x).scatter(0, jt.array(index), s, "add") ** 2).sum(), s)
    want_grad = np.zeros_like(src)
    want_grad[:3] = 2 * want[index]
    assert_var(got, want_grad)
    # a src row of one entry broadcasts over x's trailing dim, as setitem broadcasts a value
    assert_var(jt.zeros(2, 3).scatter(0, jt.array([1]), jt.array([[5.0]])), np.float32([[0, 0, 0], [5, 5, 5]]))


def test_low_dim_index_gather_reads_whole_rows(rng):
    x = rng.standard_normal((4, 3))
    index = np.array([3, 0, 3, 1, 2])
    check_grad(lambda a: a.gather(0, jt.array(index)), lambda a: a.index_select(0, torch.tensor(index)), [x],
               layouts=["transposed"], dtype="float64", rng=rng)
    y = rng.standard_normal((2, 5, 3))
    index2 = np.array([[4, 0, 4], [1, 2, 3]])
    want = torch.tensor(y).gather(1, torch.tensor(_full_index(index2, y.shape))).numpy()
    assert_var(jt.array(y).gather(1, jt.array(index2)), want)


LOW_DIM_ERRORS = [
    (ValueError, ["(4,)", "(3, 4)", "dim 1"], lambda x: x.scatter(1, jt.zeros(4, dtype="int32"), 0.0)),
    (ValueError, ["(4,)", "(3, 4)", "dim 1"], lambda x: x.gather(1, jt.zeros(4, dtype="int32"))),
    (ValueError, ["(2, 3, 4)", "(3, 4)"], lambda x: x.scatter(0, jt.zeros((2, 3, 4), dtype="int32"), 0.0)),
    (ValueError, ["()", "(3, 4)", "more than 0 dims"], lambda x: x.scatter(0, jt.array(1), 0.0)),
    (ValueError, ["(2,)", "src", "(2, 5)", "(2, 4)"], lambda x: x.scatter(0, jt.zeros(2, dtype="int32"), jt.zeros(2, 5))),
    (ValueError, ["(2, 3)", "src", "(4,)"], lambda x: x.scatter(1, jt.zeros(2, 3, dtype="int32"), jt.zeros(4))),
    (IndexError, ["index 3", "dim 0", "size 3"], lambda x: x.scatter(0, jt.array([0, 3]), 1.0, "add")),
]


@pytest.mark.parametrize("case", range(len(LOW_DIM_ERRORS)))
def test_low_dim_index_errors_name_the_shapes(case):
    kind, words, fn = LOW_DIM_ERRORS[case]
    _raises(kind, words, lambda: fn(jt.zeros(3, 4)))


# --- every Jittor op as reduce ------------------------------------------------------------------
@pytest.mark.parametrize("op", FOLDS)
def test_reduce_ops_fold_repeats_into_x(op, rng):
    """Same-dim index with repeats along dim: each op folds every src entry into x's entry."""
    index = np.array([[0, 1, 2, 0], [0, 3, 2, 2], [1, 1, 0, 0]])
    x, src = rng.standard_normal((4, 4)), rng.standard_normal((3, 4))
    if op == "divide":
        src = np.where(np.abs(src) < 0.3, 0.7, src)
    ref = _torch_fold(op)
    for fn in (lambda a, s: a.scatter(0, jt.array(index), s, reduce=op),
               lambda a, s: F["scatter"](a, 0, jt.array(index.astype(np.int32)), s, op)):
        check_grad(fn, lambda a, s: ref(a, 0, index, s), [x, src], layouts=["contig", "transposed"],
                   dtype="float64", rng=rng)


@pytest.mark.parametrize("alias, op", [("sum", "add"), ("max", "maximum"), ("min", "minimum"), (None, "void")])
def test_reduce_aliases(alias, op, rng):
    index = jt.array([[2, 0, 2], [2, 1, 0]])
    x, src = jt.array(rng.standard_normal((3, 3))), jt.array(rng.standard_normal((2, 3)))
    assert_var(x.scatter(0, index, src, alias), x.scatter(0, index, src, op).numpy())


def test_max_min_keep_untouched_infinities_and_ints(rng):
    x = jt.array([-np.inf, 1.0, np.inf])
    assert_var(x.scatter(0, jt.array([1]), jt.array([5.0]), "max"), np.float32([-np.inf, 5, np.inf]))
    assert_var(x.scatter(0, jt.array([1]), jt.array([-5.0]), "min"), np.float32([-np.inf, -5, np.inf]))
    xi = (rng.standard_normal((3, 4)) * 10).astype(np.int32)
    si = (rng.standard_normal((5, 4)) * 10).astype(np.int32)
    index = np.array([0, 2, 2, 0, 1])
    for op, ufunc in (("maximum", np.maximum), ("minimum", np.minimum), ("add", np.add), ("subtract", np.subtract),
                      ("multiply", np.multiply)):
        want = xi.copy()
        ufunc.at(want, index, si)
        assert_var(jt.array(xi).scatter(0, jt.array(index), jt.array(si), op), want)


def test_integer_divide_truncates_toward_zero():
    """Jittor's setitem divides ints as C does, one src entry after another: toward zero."""
    x = jt.array(np.array([-7, 7, 9, -9], np.int32))
    got = x.scatter(0, jt.array([0, 1, 2, 2, 3]), jt.array(np.array([2, -2, 2, 2, 4], np.int32)), "divide")
    assert_var(got, np.int32([-3, -3, 2, -2]))


def test_max_gradient_shares_ties_as_torch():
    """Where x and src entries tie for the maximum they share its gradient evenly (PyTorch's
    scatter_reduce amax with include_self); elsewhere the winner takes all."""
    x_value = np.array([[1.0, 2.0, 0.0], [3.0, -1.0, 4.0]])
    src_value = np.array([[3.0, 2.0, 5.0], [3.0, 2.0, 1.0], [0.5, 7.0, 5.0]])
    index = np.array([[1, 0, 1], [1, 0, 0], [0, 1, 1]])
    for op, how in (("max", "amax"), ("min", "amin")):
        x, src = jt.array(x_value), jt.array(src_value)
        out = x.scatter(0, jt.array(index), src, op)
        t_x, t_src = (torch.tensor(v, requires_grad=True) for v in (x_value, src_value))
        t_out = t_x.scatter_reduce(0, torch.tensor(index), t_src, how, include_self=True)
        w = np.arange(1.0, 7.0).reshape(2, 3)
        grads = jt.grad((out * jt.array(w)).sum(), [x, src])
        t_grads = torch.autograd.grad((t_out * torch.tensor(w)).sum(), [t_x, t_src])
        assert_var(out, t_out.detach().numpy())
        for got, want in zip(grads, t_grads):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_unknown_reduce_is_refused():
    x = jt.zeros(3, 4)
    for call in (lambda: x.scatter(0, jt.array([[0]]), 1.0, "mean"),
                 lambda: x.scatter_(0, jt.array([[0]]), 1.0, "pow"),
                 lambda: x.setitem(0, 1.0, "bitwise_and")):
        _raises(ValueError, ["reduce op", "'maximum' ('max')"], call)
    _raises(ValueError, ["scatter", "'mul'"], lambda: x.scatter(0, jt.array([[0]]), 1.0, "mul"))


# --- Var.setitem(index, value, op) --------------------------------------------------------------
def test_setitem_op_folds_repeated_rows():
    x = jt.zeros((4, 3))
    got = x.setitem((jt.array([0, 0, 1]),), jt.ones((3, 3)), "add")
    assert_var(got, np.float32([[2, 2, 2], [1, 1, 1], [0, 0, 0], [0, 0, 0]]))
    assert_var(x, np.zeros((4, 3), np.float32))                 # functional: x is left as it was
    assert_var(x.setitem(jt.array([0, 0, 1]), 1.0, op="add"), got.numpy())


@pytest.mark.parametrize("index", [(np.array([0, 2, 0, 3]),), (slice(None), np.array([[1, 1], [0, 1]])),
                                   (slice(1, None, 2), 1), (None, slice(0, 3), np.array([2, 2]))])
@pytest.mark.parametrize("op, ufunc", [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                                       ("divide", np.divide), ("maximum", np.maximum), ("minimum", np.minimum)])
def test_setitem_op_matches_numpy_ufunc_at(index, op, ufunc, rng):
    x = rng.standard_normal((4, 3))
    region = x[index]
    value = rng.standard_normal(region.shape)
    value = np.where(np.abs(value) < 0.3, 0.7, value)          # no near-zero divisors
    want = x.copy()
    ufunc.at(want, index, value)
    assert_var(jt.array(x).setitem(index, jt.array(value), op), want)


def test_setitem_op_gradients(rng):
    """add and multiply against torch's index_put with accumulate and a product; max through a
    basic index (no repeats) against torch.maximum."""
    idx = np.array([0, 2, 0, 3])
    x, v = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))

    def t_add(a, s):
        return a.index_put((torch.tensor(idx),), s, accumulate=True)

    def t_mul(a, s):
        return a.scatter_reduce(0, torch.tensor(_full_index(idx, a.shape)), s, "prod", include_self=True)
    check_grad(lambda a, s: a.setitem((jt.array(idx),), s, "add"), t_add, [x, v], dtype="float64", rng=rng)
    check_grad(lambda a, s: a.setitem(jt.array(idx), s, "multiply"), t_mul, [x, v], dtype="float64", rng=rng)

    def t_max(a, s):
        return torch.cat([a[:1], torch.maximum(a[1:3], s), a[3:]])
    check_grad(lambda a, s: a.setitem(slice(1, 3), s, "max"), t_max, [x, v[:2]], dtype="float64", rng=rng)


def test_contrib_setitem_and_the_plain_form_still_replace():
    x = jt.zeros(2, 3)
    assert jt.contrib.setitem(x, x == 0, 2.0) is x
    assert_var(x, np.full((2, 3), 2, np.float32))
    assert jt.contrib.setitem(x, (1, jt.array([0, 2])), jt.array([5.0])) is x
    assert_var(x, np.float32([[2, 2, 2], [5, 2, 5]]))
    assert_var(x.setitem(0, jt.array([1.0, 2.0, 3.0])), np.float32([[1, 2, 3], [5, 2, 5]]))


# --- float index Vars -----------------------------------------------------------------------------
def test_float_index_truncates_toward_zero(rng):
    """A float index acts as its values cast to int by C: [1.7, 0.2] is [1, 0], -0.5 is 0."""
    x = rng.standard_normal((3, 4))
    got = jt.array(x).gather(0, jt.array([[1.7, 0.2, -0.5, 2.9]]))
    assert_var(got, x[[1, 0, 0, 2], [0, 1, 2, 3]][None])
    out = jt.zeros(3, 2).scatter(0, jt.array([[1.7, 0.2]]), jt.array([[4.0, 5.0]]))
    assert_var(out, np.float32([[0, 5], [4, 0], [0, 0]]))
    lazy = jt.array([[1.7, 0.2]]) * 1                             # truncated by a cast kernel
    assert_var(jt.zeros(3, 2).scatter(0, lazy, jt.array([[4.0, 5.0]]), "add"), out.numpy())
    check_grad(lambda a: a.gather(1, jt.array([[3.9, 0.1], [1.5, 1.2], [0.0, 2.99]])),
               lambda a: a.gather(1, torch.tensor([[3, 0], [1, 1], [0, 2]])), [x], dtype="float64", rng=rng)


def test_float_label_map_one_hot_as_apf_gan():
    """APF-GAN: ``label_map.float_auto()`` then ``scatter_(1, label_map, 1.0)`` one-hot encodes."""
    labels = np.array([[[[0, 2], [1, 2]]], [[[2, 2], [0, 1]]]])
    label_map = jt.array(labels).float_auto()
    one_hot = jt.zeros((2, 3, 2, 2))
    one_hot.scatter_(1, label_map, 1.0)
    want = np.moveaxis(np.eye(3, dtype=np.float32)[labels[:, 0]], -1, 1)
    assert_var(one_hot, want)


FLOAT_INDEX_ERRORS = [
    (IndexError, ["scatter", "index 3", "dim 0", "size 3"], lambda x: x.scatter(0, jt.array([[3.2]]), 1.0)),
    (IndexError, ["gather", "index 3", "dim 0", "size 3"], lambda x: x.gather(0, jt.array([[3.5]]))),
    (ValueError, ["scatter", "NaN or infinite", "(1, 2)"], lambda x: x.scatter(0, jt.array([[0.0, np.nan]]), 1.0)),
    (ValueError, ["gather", "NaN or infinite"], lambda x: x.gather(1, jt.array([[np.inf]]))),
    (TypeError, ["index_select", "an integer Var", "float32"], lambda x: x.index_select(0, jt.array([0.5]))),
]


@pytest.mark.parametrize("case", range(len(FLOAT_INDEX_ERRORS)))
def test_float_index_errors(case):
    kind, words, fn = FLOAT_INDEX_ERRORS[case]
    _raises(kind, words, lambda: fn(jt.zeros(3, 4)))


# --- one-argument where and nonzero ----------------------------------------------------------------
def test_where_and_nonzero_give_int32_or_the_dtype_asked(rng):
    ref = (rng.standard_normal((3, 4)) > 0.3) * rng.standard_normal((3, 4))
    x = jt.array(ref.astype(np.float32)) * 1
    want_rows, want_cols = np.nonzero(ref)
    for got in (jt.where(x != 0), (x != 0).where()):
        assert_var(got[0], want_rows.astype(np.int32))
        assert_var(got[1], want_cols.astype(np.int32))
    assert_var(jt.where(x != 0, dtype="int64")[1], want_cols.astype(np.int64))
    assert_var(jt.where(x != 0, "int64")[0], want_rows.astype(np.int64))      # Jittor's positional dtype
    assert_var(jt.nonzero(x), np.argwhere(ref).astype(np.int32))
    assert_var(x.nonzero(dtype="int64"), np.argwhere(ref))
    assert_var(jt.nonzero(jt.array([0, 3, 0, 1])), np.int32([[1], [3]]))     # Jittor's (n, 1) for 1-D
    assert jt.nonzero(jt.zeros(2, 3)).shape == (0, 2) and jt.nonzero(jt.zeros(2, 3)).dtype == "int32"
    _raises(TypeError, ["where", "integer", "float32"], lambda: jt.where(x != 0, dtype="float32"))
    _raises(TypeError, ["nonzero", "integer", "float64"], lambda: jt.nonzero(x, dtype="float64"))
    # int32 indices read back into x as int64 ones do
    assert_var(x[jt.where(x != 0)], ref[ref != 0].astype(np.float32))


def test_jt_setitem_function_is_jittors_functional_form():
    """``jt.setitem(x, slices, y, op)`` returns the new value and leaves ``x`` as it was."""
    x = jt.zeros(4, 3)
    out = jt.setitem(x, (jt.array([0, 0, 1]),), jt.ones(3, 3), "add")
    np.testing.assert_array_equal(out.numpy()[:, 0], [2, 1, 0, 0])
    np.testing.assert_array_equal(x.numpy(), np.zeros((4, 3)))
    np.testing.assert_array_equal(jt.setitem(x, slices=(1,), y=jt.ones(3)).numpy()[:, 0], [0, 1, 0, 0])
