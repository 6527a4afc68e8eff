"""runtime/blas.py: products split over threads agree with numpy's single call and repeat exactly,
whatever the operands' layout, batch and dtype."""
import numpy as np
import pytest

import jtmini as jt
from jtmini.runtime import blas


@pytest.mark.parametrize("a_shape,b_shape", [
    ((100, 4608), (4608, 512)),        # rows split (m >= n)
    ((64, 576), (576, 4900)),          # columns split
    ((3, 40, 500), (500, 70)),         # a batch, broadcast against a matrix
    ((2, 1, 64, 300), (3, 300, 64)),   # batch dims broadcast on both sides
    ((33, 2000), (2000, 40)),          # blocks of unequal size
    ((5, 64, 300), (5, 300, 64)),      # a batch of at least as many matrices as threads
])
@pytest.mark.parametrize("threads", [2, 3, 4])
def test_split_product_matches_one_call(a_shape, b_shape, threads):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape).astype("float32"), rng.standard_normal(b_shape).astype("float32")
    got = blas.matmul(a, b, threads)
    np.testing.assert_allclose(got, np.matmul(a.astype("float64"), b), rtol=1e-4, atol=1e-3)
    assert np.array_equal(got, blas.matmul(a, b, threads))      # same split, same bits


def test_blocks_are_aligned_balanced_and_cover_everything():
    for length in (1, 15, 100, 4900):
        for parts in (1, 2, 3, 4):
            blocks = blas._blocks(length, parts)
            assert blocks[0][0] == 0 and blocks[-1][1] == length
            assert all(hi == lo for (_, hi), (lo, _) in zip(blocks, blocks[1:]))
            assert all(lo % blas._ALIGN == 0 for lo, _ in blocks)
            sizes = [hi - lo for lo, hi in blocks]
            assert len(sizes) <= parts and max(sizes) - min(sizes) <= blas._ALIGN


def test_matmul_op_at_two_threads_matches_numpy():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((256, 300)).astype("float32"), rng.standard_normal((300, 200)).astype("float32")
    with jt.flag_scope(num_threads=2):
        got = (jt.array(a) @ jt.array(b)).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-4)


def test_products_run_on_the_openmp_team():
    """numpy's BLAS exports a CBLAS gemm we recognise, so split products do not fall back to one
    single-threaded call."""
    assert blas._team_gemm(), "no CBLAS gemm found in numpy's BLAS: products run on one thread"


def _layouts(rng, dtype):
    a, b = rng.standard_normal((300, 500)).astype(dtype), rng.standard_normal((500, 200)).astype(dtype)
    wide = rng.standard_normal((300, 700)).astype(dtype)
    yield "row-major", a, b
    yield "transposed A and B", np.asfortranarray(a), np.asfortranarray(b)
    yield "rows apart by more than a row", wide[:, :500], b
    yield "strided columns (copied)", wide[:, ::2][:, :300], rng.standard_normal((300, 200)).astype(dtype)
    yield "reversed rows (copied)", a[::-1], b
    yield "wide product (column blocks)", b.T, a.T


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_layout_matches_numpy(dtype):
    rng = np.random.default_rng(2)
    for what, a, b in _layouts(rng, dtype):
        got = blas.matmul(a, b, 2)
        assert got.dtype == dtype, what
        np.testing.assert_allclose(got, np.matmul(a.astype("float64"), b), rtol=1e-4, atol=1e-3, err_msg=what)


def test_other_dtypes_are_numpys_product():
    rng = np.random.default_rng(3)
    a, b = rng.integers(-9, 9, (200, 300), dtype="int32"), rng.integers(-9, 9, (300, 200), dtype="int32")
    assert np.array_equal(blas.matmul(a, b, 2), a @ b)
    mixed = blas.matmul(a.astype("float32"), b.astype("float64"), 2)
    assert mixed.dtype == "float64" and np.allclose(mixed, a @ b)


def test_a_remembered_plan_serves_only_operands_laid_out_alike():
    """The task table is built once per shapes, strides and thread count: new values in the same
    layout reuse it, and the same shapes in another layout (transposed, or copied first) do not."""
    rng = np.random.default_rng(4)
    b = rng.standard_normal((500, 200)).astype("float32")
    for _ in range(2):
        a = rng.standard_normal((300, 500)).astype("float32")
        for what, x in [("row-major", a), ("transposed", np.asfortranarray(a)), ("reversed rows (copied)", a[::-1])]:
            np.testing.assert_allclose(blas.matmul(x, b, 2), np.matmul(x.astype("float64"), b),
                                       rtol=1e-4, atol=1e-3, err_msg=what)
    assert blas._team_plan.cache_info().hits >= 3


def _long_k_operands(rng, m=32, k=8192, n=144, dtype="float32"):
    """A convolution weight gradient's layout: both operands K-contiguous, K long beside M and N."""
    return (rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype).T)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_product_computed_as_its_transpose_is_the_product(threads, dtype):
    rng = np.random.default_rng(5)
    a, b = _long_k_operands(rng, dtype=dtype)
    gemm = blas._team_gemm()[np.dtype(dtype)]
    swapped = blas._on_team(gemm, a, b, (), threads, swap=True)
    assert swapped.shape == (32, 144) and swapped.flags.c_contiguous
    np.testing.assert_allclose(swapped, np.matmul(a.astype("float64"), b), rtol=1e-4, atol=1e-3)
    # matmul takes the way _swaps chose for this layout, and repeats its bits
    chosen = blas._on_team(gemm, a, b, (), threads, swap=blas.swaps(a, b, threads))
    np.testing.assert_array_equal(blas.matmul(a, b, threads), chosen)


def test_a_product_runs_as_its_transpose_only_with_the_same_bits(monkeypatch):
    """Even when the transpose is the faster way round, the product keeps its bits: a layout
    whose two ways differ in the last bit stays as it is."""
    monkeypatch.setattr(blas, "SWAP_GAIN", 1e9)         # any time counts as faster
    blas._swaps.cache_clear()
    try:
        rng = np.random.default_rng(6)
        for m, k, n in [(32, 8192, 144), (64, 4096, 576), (16, 65536, 27)]:
            a, b = _long_k_operands(rng, m, k, n)
            if blas.library().name != "mkl":
                assert not blas.swaps(a, b, 1)          # the way round only MKL's products take
                continue
            gemm = blas._team_gemm()[a.dtype]
            x = blas.random_layout(np.random.default_rng(0), a.shape, a.strides, a.dtype)
            y = blas.random_layout(np.random.default_rng(0), b.shape, b.strides, b.dtype)
            same = np.array_equal(*(blas._on_team(gemm, x, y, (), 1, swap) for swap in (False, True)))
            assert blas.swaps(a, b, 1) == same, (m, k, n)
    finally:
        blas._swaps.cache_clear()


def test_only_long_k_products_of_k_contiguous_operands_are_tried_the_other_way_round():
    rng = np.random.default_rng(7)
    a, b = _long_k_operands(rng)
    for what, x, y in [("B not transposed", a, np.ascontiguousarray(b)), ("K short", a[:, :256], b[:256]),
                       ("a batch", np.stack([a, a]), b), ("A transposed", np.asfortranarray(a), b)]:
        assert not blas.swaps(x, y, 1), what
        np.testing.assert_allclose(blas.matmul(x, y, 1), np.matmul(x.astype("float64"), y), rtol=1e-4, atol=1e-3)


def _python(code, **env):
    import os
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, **env))


def test_jtmini_blas_chooses_the_library_and_rejects_other_names():
    done = _python("from jtmini.runtime import blas; print(blas.library().name)", JTMINI_BLAS="numpy")
    assert done.stdout.split()[-1] == "numpy", done.stderr
    done = _python("from jtmini.runtime import blas; blas.library()", JTMINI_BLAS="openblas2")
    assert done.returncode != 0 and "JTMINI_BLAS must be 'mkl' or 'numpy'" in done.stderr and "openblas2" in done.stderr


def test_the_other_blas_passes_the_product_tests_too():
    """These tests and the launch tables' run in this process with one BLAS; the other one (where
    it is installed) must pass them as well: each product of a table is that BLAS's own call."""
    import os
    import sys
    other = "numpy" if blas.library().name == "mkl" else "mkl"
    if other == "mkl" and blas._mkl_path() is None:
        pytest.skip("MKL is not installed here (pip install mkl): only numpy's BLAS can be tested")
    here = os.path.dirname(__file__)
    done = _python(f"import sys, pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', "
                   f"'-k', 'not other_blas and not rejects_other', {os.path.join(here, 'test_blas.py')!r}, "
                   f"{os.path.join(here, 'test_cpu_table.py')!r}]))", JTMINI_BLAS=other)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
