"""Jittor's math surface added for compatibility (jt.linalg, einsum of 3+ operands, arctan2,
isneginf/isposinf, all_equal, finfo/iinfo, multinomial, histc, arg_reduce, reindex with index
Vars, jt.sparse, flags log_silent/log_vprefix) against PyTorch CPU or numpy: values, gradients on
broadcast and non-contiguous inputs, and the error cases."""
import numpy as np
import pytest
import torch

import jtmini as jt

from conftest import assert_var, check_grad

F64 = dict(dtype="float64", tol=dict(rtol=1e-7, atol=1e-9))


def _T(t):
    return t.transpose(-1, -2)


def _jT(x):
    return x.transpose(*range(x.ndim - 2), x.ndim - 1, x.ndim - 2)


# --- linalg: value and gradient against torch.linalg ------------------------------------------
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
def test_inv_det_slogdet(rng, layout):
    a = rng.standard_normal((2, 3, 3)) + 3 * np.eye(3)
    check_grad(jt.linalg.inv, torch.linalg.inv, [a], [layout], **F64)
    check_grad(jt.linalg.det, torch.linalg.det, [a], [layout], **F64)
    check_grad(lambda x: jt.linalg.slogdet(x)[1], lambda t: torch.linalg.slogdet(t)[1], [a], [layout], **F64)
    sign, _ = jt.linalg.slogdet(jt.array(-a))
    assert_var(sign, np.linalg.slogdet(-a)[0])


@pytest.mark.parametrize("shape", [(2, 4, 3), (3, 5)])
def test_pinv(rng, shape):
    check_grad(jt.linalg.pinv, torch.linalg.pinv, [rng.standard_normal(shape)], ["transposed"], **F64)


def test_cholesky(rng):
    spd = lambda x, mm, eye: mm(x, _T(x) if eye is torch.eye else _jT(x)) + 3 * eye(3)
    check_grad(lambda x: jt.linalg.cholesky(spd(x, jt.matmul, jt.eye)),
               lambda t: torch.linalg.cholesky(spd(t, torch.matmul, torch.eye)),
               [rng.standard_normal((2, 3, 3))], ["sliced"], **F64)


def test_cholesky_gradient_is_symmetric(rng):
    a = rng.standard_normal((2, 3, 3))
    a = a @ _T(torch.tensor(a)).numpy() + 3 * np.eye(3)         # symmetric positive definite
    check_grad(jt.linalg.cholesky, torch.linalg.cholesky, [a], **F64)


def test_solve_vectors_and_matrices(rng):
    a = rng.standard_normal((2, 3, 3)) + 3 * np.eye(3)
    check_grad(jt.linalg.solve, lambda p, q: torch.linalg.solve(p, q), [a, rng.standard_normal((2, 3))],
               ["transposed", "contig"], **F64)
    check_grad(jt.linalg.solve, torch.linalg.solve, [a, rng.standard_normal((2, 3, 4))],
               ["contig", "sliced"], **F64)


@pytest.mark.parametrize("shape", [(2, 4, 3), (3, 3)])
def test_qr(rng, shape):
    a = rng.standard_normal(shape)
    check_grad(lambda x: jt.linalg.qr(x)[0], lambda t: torch.linalg.qr(t)[0], [a], **F64)
    check_grad(lambda x: jt.linalg.qr(x)[1], lambda t: torch.linalg.qr(t)[1], [a], ["transposed"], **F64)


@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 5), (4, 4)])
def test_svd(rng, shape):
    a = rng.standard_normal(shape)
    u, s, v = jt.linalg.svd(jt.array(a))
    assert u.shape == shape[:-1] + (min(shape[-2:]),) and v.shape == shape[:-2] + (min(shape[-2:]), shape[-1])
    np.testing.assert_allclose((jt.matmul(u * s.unsqueeze(-2), v)).numpy(), a, atol=1e-12)
    svd = lambda t: torch.linalg.svd(t, full_matrices=False)
    # squares: a singular vector's sign is arbitrary, its square is not
    check_grad(lambda x: jt.linalg.svd(x)[0] ** 2, lambda t: svd(t)[0] ** 2, [a], ["sliced"], **F64)
    check_grad(lambda x: jt.linalg.svd(x)[1], lambda t: svd(t)[1], [a], **F64)
    check_grad(lambda x: jt.linalg.svd(x)[2] ** 2, lambda t: svd(t)[2] ** 2, [a], ["transposed"], **F64)


def test_eigh_gradient_lands_on_the_lower_triangle(rng):
    a = rng.standard_normal((2, 3, 3))
    sym = lambda t: torch.tril(t) + _T(torch.tril(t, -1))     # what eigh(UPLO="L") reads
    check_grad(lambda x: jt.linalg.eigh(x)[0], lambda t: torch.linalg.eigh(sym(t))[0], [a], **F64)
    check_grad(lambda x: jt.linalg.eigh(x)[1] ** 2, lambda t: torch.linalg.eigh(sym(t))[1] ** 2, [a],
               ["sliced"], **F64)


def test_eigh_reads_the_lower_triangle(rng):
    a = rng.standard_normal((2, 3, 3))
    w, v = jt.linalg.eigh(jt.array(a))
    tw, tv = np.linalg.eigh(np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2))
    assert_var(w, tw)
    assert_var(v ** 2, tv ** 2)


def test_linalg_keeps_float32():
    assert jt.linalg.inv(jt.eye(2)).dtype == "float32"


def test_linalg_errors():
    with pytest.raises(ValueError, match=r"square matrices, got shape \(2, 3\)"):
        jt.linalg.inv(jt.ones(2, 3))
    with pytest.raises(TypeError, match="float Var, got dtype int32"):
        jt.linalg.det(jt.array(np.eye(2, dtype="int32")))
    with pytest.raises(ValueError, match="at least 2 dims"):
        jt.linalg.svd(jt.ones(3))
    with pytest.raises(ValueError, match="linalg.inv: Singular matrix"):
        jt.linalg.inv(jt.zeros(2, 2))
    with pytest.raises(ValueError, match="cholesky: .*positive definite"):
        jt.linalg.cholesky(-jt.eye(2))
    with pytest.raises(ValueError, match=r"b of shape \(4,\) does not fit a of shape \(3, 3\)"):
        jt.linalg.solve(jt.eye(3), jt.ones(4))
    x = jt.ones(2, 3) + jt.eye(2, 3)
    with pytest.raises(ValueError, match="rows >= columns"):
        jt.grad(jt.linalg.qr(x)[0].sum(), x)


# --- einsum of three operands -----------------------------------------------------------------
@pytest.mark.parametrize("eq, shapes", [("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
                                        ("ij,ijk,jk->ik", [(2, 3), (2, 3, 4), (3, 4)]),
                                        ("bi,bj,bk->ijk", [(4, 2), (4, 3), (4, 2)])])
def test_einsum_three_operands(rng, eq, shapes):
    values = [rng.standard_normal(s) for s in shapes]
    check_grad(lambda *xs: jt.linalg.einsum(eq, *xs), lambda *ts: torch.einsum(eq, *ts), values,
               ["contig", "transposed", "sliced"], **F64)


# --- arctan2 ---------------------------------------------------------------------------------------
def test_arctan2_value_and_gradient(rng):
    y, x = rng.standard_normal((3, 1, 4)), rng.standard_normal((2, 4))
    check_grad(jt.arctan2, torch.atan2, [y, x], ["sliced", "transposed"], **F64)
    grid = [1.0, -1.0, 0.0]
    ys, xs = np.meshgrid(grid, grid)
    assert_var(jt.atan2(jt.array(ys, "float32"), jt.array(xs, "float32")), np.arctan2(ys, xs).astype("float32"))
    ints = jt.array([1, -1], "int32").arctan2(jt.array([0, 0], "int32"))      # int32: a float32 result
    assert_var(ints, np.arctan2([1, -1], [0, 0]).astype("float32"))


# --- predicates, all_equal, finfo, iinfo -------------------------------------------------------------
def test_isneginf_isposinf():
    a = np.array([1.0, -np.inf, np.inf, np.nan, 0.0])
    assert_var(jt.isneginf(jt.array(a)), np.isneginf(a))
    assert_var(jt.array(a).isposinf(), np.isposinf(a))
    assert_var(jt.isposinf(jt.array([1, 2])), np.array([False, False]))


def test_all_equal():
    assert jt.all_equal(jt.ones(2, 2), [[1, 1], [1, 1]]) is True
    assert jt.all_equal(jt.array([1, 2]), jt.array([1, 3])) is False
    assert jt.all_equal(jt.ones(2, 3), jt.ones(3))      # broadcast
    with pytest.raises(ValueError, match="cannot be broadcast"):
        jt.all_equal(jt.ones(2), jt.ones(3))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_finfo(dtype):
    for given in (dtype, getattr(jt, dtype), np.dtype(dtype), jt.zeros(1, dtype=dtype)):
        info = jt.finfo(given)
        assert (info.eps, info.max, info.tiny, info.bits) == (np.finfo(dtype).eps, np.finfo(dtype).max,
                                                             np.finfo(dtype).tiny, np.finfo(dtype).bits)


def test_iinfo_and_errors():
    for dtype in ("int8", "int16", "int32", "int64", "uint8"):
        assert jt.iinfo(getattr(jt, dtype)).max == np.iinfo(dtype).max
        assert jt.iinfo(dtype).min == np.iinfo(dtype).min
    with pytest.raises(TypeError, match="finfo: expected a float dtype, got int32"):
        jt.finfo(jt.int32)
    with pytest.raises(TypeError, match="iinfo: expected an integer dtype, got float32"):
        jt.iinfo("float32")
    with pytest.raises(TypeError, match="unknown dtype 'nope'"):
        jt.finfo("nope")


# --- multinomial -------------------------------------------------------------------------------
def test_multinomial_frequencies_follow_the_weights():
    jt.seed(3)
    x = jt.multinomial(jt.array([[1.0, 0.0, 3.0]] * 2), 4000, replacement=True)
    assert x.shape == (2, 4000) and x.dtype == "int32"
    counts = np.bincount(x.numpy().ravel(), minlength=3) / 8000
    np.testing.assert_allclose(counts, [0.25, 0.0, 0.75], atol=0.03)


def test_multinomial_without_replacement():
    jt.seed(0)
    for _ in range(20):
        x = jt.multinomial(jt.array([0.0, 10.0, 3.0, 0.0]), 2).numpy()
        assert sorted(x.tolist()) == [1, 2]
    x = jt.multinomial(jt.array([[0, 0, 2], [0, 1, 0], [0.5, 0, 0]], "float32"), 1)
    assert_var(x, np.array([[2], [1], [0]], "int32"))


def test_multinomial_errors():
    with pytest.raises(ValueError, match="cannot draw 3 distinct indices .* 2 nonzero"):
        jt.multinomial(jt.array([1.0, 1.0, 0.0]), 3)
    with pytest.raises(ValueError, match=">= 0"):
        jt.multinomial(jt.array([1.0, -1.0]), 1)
    with pytest.raises(ValueError, match=r"1-D or 2-D, got shape \(1, 1, 2\)"):
        jt.multinomial(jt.ones(1, 1, 2), 1)
    with pytest.raises(TypeError, match="float Var, got dtype int32"):
        jt.multinomial(jt.array([1, 2], "int32"), 1)
    with pytest.raises(ValueError, match="num_samples must be a positive int"):
        jt.multinomial(jt.ones(3), 0)


# --- histc -------------------------------------------------------------------------------------
@pytest.mark.parametrize("bins, lo, hi", [(1, 0, 0), (7, 0, 0), (5, 2.0, 6.0), (3, 4.0, 4.0), (4, -20, 20)])
def test_histc_matches_torch(rng, bins, lo, hi):
    a = rng.uniform(0, 10, (12, 9))
    expected = torch.histc(torch.tensor(a), bins=bins, min=lo, max=hi).numpy()
    assert_var(jt.histc(jt.array(a)[::2, 1:], bins, lo, hi),
               torch.histc(torch.tensor(a)[::2, 1:], bins=bins, min=lo, max=hi).numpy())
    assert_var(jt.histc(jt.array(a), bins=bins, min=lo, max=hi), expected)


def test_histc_edges_and_errors():
    assert_var(jt.histc(jt.array([0.0, 1.0, 3.0, 3.0, 5.0]), bins=3, min=0, max=3), np.array([1.0, 1.0, 2.0], "float32"))
    assert_var(jt.histc(jt.array([2, 2]), bins=2), np.array([0.0, 2.0], "float32"))   # one value: range +-1
    with pytest.raises(ValueError, match="bins must be a positive int"):
        jt.histc(jt.ones(3), bins=0)
    with pytest.raises(ValueError, match="min must not exceed max"):
        jt.histc(jt.ones(3), bins=2, min=3, max=1)
    with pytest.raises(ValueError, match="not finite"):
        jt.histc(jt.array([1.0, float("inf")]), bins=2)


# --- arg_reduce, reindex with index Vars -----------------------------------------------------------
def test_arg_reduce(rng):
    a = rng.standard_normal((3, 4, 5))
    index, value = jt.arg_reduce(jt.array(a), "min", 1, True)
    assert_var(index, np.argmin(a, 1)[:, None].astype("int32"))
    assert_var(value, a.min(1, keepdims=True))
    index, _ = jt.arg_reduce(jt.array(a), "max", -1, False)
    assert_var(index, np.argmax(a, -1).astype("int32"))
    with pytest.raises(ValueError, match="op must be 'max' or 'min', got 'sum'"):
        jt.arg_reduce(jt.array(a), "sum", 0, False)


def test_reindex_with_index_vars():
    x = jt.array(np.arange(6.0).reshape(2, 3))
    rows, cols = jt.array([[1, 0]]), jt.array([[2, 2]])
    assert_var(jt.reindex(x, [rows, cols]), np.array([[5.0, 2.0]]))
    assert_var(jt.grad(x.reindex([rows, cols]).sum(), x), np.array([[0, 0, 1.0], [0, 0, 1.0]]))
    with pytest.raises(TypeError, match="one index Var per dim"):
        jt.reindex(x, [2, 3])


# --- sparse --------------------------------------------------------------------------------------
def test_sparse_to_dense_t_spmm(rng):
    indices = np.array([[0, 1, 1, 1], [2, 0, 2, 2]])
    values = rng.standard_normal(4)
    t = torch.sparse_coo_tensor(torch.tensor(indices), torch.tensor(values), (2, 3))
    s = jt.sparse.sparse_array(jt.array(indices), jt.array(values), jt.NanoVector([2, 3]))
    assert_var(s.to_dense(), t.to_dense().numpy())            # repeated indices add up
    assert_var(s.t().to_dense(), t.to_dense().numpy().T)
    y = rng.standard_normal((3, 2))
    assert_var(jt.sparse.spmm(s, jt.array(y)), t.to_dense().numpy() @ y)
    w = rng.standard_normal((2, 3))
    g = jt.grad((s.to_dense() * jt.array(w)).sum(), s.values)
    assert_var(g, w[indices[0], indices[1]])


def test_sparse_errors():
    idx = jt.array([[0, 1]])
    with pytest.raises(ValueError, match=r"outside the shape \[1\]"):
        jt.sparse.sparse_array(idx, jt.ones(2), [1])
    with pytest.raises(ValueError, match=r"values must have shape \(2,\)"):
        jt.sparse.sparse_array(idx, jt.ones(3), [2])
    with pytest.raises(ValueError, match=r"shape \(ndim=2, nnz\)"):
        jt.sparse.sparse_array(idx, jt.ones(2), [2, 2])
    with pytest.raises(ValueError, match="do not multiply"):
        jt.sparse.spmm(jt.sparse.sparse_array(idx, jt.ones(2), [2]), jt.ones(2, 2))


# --- log flags -------------------------------------------------------------------------------------
def test_log_silent_and_vprefix():
    import logging
    from jtmini.log import logger
    handler = logger().handlers[0]
    record = lambda level: logging.LogRecord("jtmini", level, __file__, 1, "m", (), None)
    with jt.flag_scope(log_silent=1):      # info and warnings are not printed, errors are
        assert [bool(handler.filter(record(lv))) for lv in (logging.INFO, logging.WARNING, logging.ERROR)] \
            == [False, False, True]
    assert handler.filter(record(logging.INFO))
    this = __file__.rsplit("/", 1)[-1]
    with jt.log_capture_scope(log_v=0, log_vprefix=f"{this}=10,nothing.py=100") as logs:
        jt.LOG.vv("shown")
        jt.LOG.vvv("hidden")
    assert [r["msg"] for r in logs] == ["shown"]
    with pytest.raises(ValueError, match="got 'abc' \\('abc' is not one\\)"):
        jt.flags.log_vprefix = "abc"
