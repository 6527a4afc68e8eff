"""Kernel-level behaviour that the op tests do not pin down: threaded scatter is exact and
repeatable, bounds-checked reads survive the compiler, any fill value compiles, the thread count
never changes which kernels exist, loops that walk memory as one are merged, and kernels get
numpy's own buffer addresses."""
import re

import numpy as np
import pytest

import jtmini as jt


def _scatter(x, op):
    return jt.array(x).reindex_reduce(op, [50], ["(i0*7+i1)%50"])


@pytest.mark.parametrize("op, fold, start", [("add", np.add, 0), ("max", np.maximum, -np.inf),
                                            ("min", np.minimum, np.inf)])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threaded_scatter_matches_numpy_and_repeats_bit_for_bit(op, fold, start, threads):
    x = np.random.default_rng(0).standard_normal((300, 200)).astype(np.float32)
    expected = np.full(50, start, np.float32)
    fold.at(expected, ((np.arange(300)[:, None] * 7 + np.arange(200)) % 50).ravel(), x.ravel())
    with jt.flag_scope(num_threads=threads):
        first, second = _scatter(x, op).numpy(), _scatter(x, op).numpy()
    assert np.allclose(first, expected, rtol=1e-5, atol=1e-4)
    assert np.array_equal(first, second)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("rows", [3, 8, 16, 33])
def test_bounds_checked_reads_of_short_rows_give_numpy_values(dtype, rows):
    """GCC 12.2 at -O3 -march=native vectorised a load under a bounds check so that it skipped
    rows (padding rows of 2 gave [0 0 2 4 0 8 ...]); such reads now load first (at a clamped
    index) and select after, so the vectorised code has no conditional load."""
    x = np.arange(rows * 2).reshape(rows, 2).astype(dtype)
    np.testing.assert_array_equal(jt.pad(jt.array(x), (0, 0, 1, 0)).numpy(), np.pad(x, ((1, 0), (0, 0))))
    if dtype.startswith("float"):
        ones = jt.ones((rows, 2), dtype)
        want = np.ones((rows, 2), dtype)
        want[0] = 0
        np.testing.assert_array_equal(jt.grad((ones[1:] * 3).sum(), ones).numpy(), 3 * want)


@pytest.mark.parametrize("value", [float("-inf"), float("inf"), float("nan"), True, 2.5])
def test_fill_values_that_are_not_c_literals_compile(value):
    got = jt.pad(jt.array([1.0, 2.0]), (1, 0), value=value).numpy()
    np.testing.assert_array_equal(got, np.array([float(value), 1.0, 2.0], np.float32))


def test_thread_count_is_a_runtime_argument():
    x = jt.randn(100, 300)
    with jt.flag_scope(num_threads=1):
        one = (x * 2).sum(dims=1).numpy()
    jt.reset_stats()
    with jt.flag_scope(num_threads=2):
        two = (x * 2).sum(dims=1).numpy()
    assert jt.stats()["kernels_compiled"] == 0
    assert np.allclose(one, two, rtol=1e-6)


@pytest.mark.parametrize("hw", [(4, 4), (2, 8), (7, 7), (4, 3), (1, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_short_inner_loops_vectorised_as_one_give_numpy_values(hw, threads):
    """Reductions and maps over (n, c, h, w) views of a (c, n*h*w) buffer, as batch norm sees a
    convolution's output: power-of-two inner loops run as one SIMD loop (``codegen._vector_loops``)."""
    n, c = 9, 5
    g_np = np.random.default_rng(hash(hw) % 1000).standard_normal((c, n * hw[0] * hw[1])).astype(np.float32)
    x_np = g_np.reshape(c, n, *hw).transpose(1, 0, 2, 3)
    x = jt.array(g_np).reshape(c, n, *hw).transpose(1, 0, 2, 3)
    with jt.flag_scope(num_threads=threads):
        sums = (x * x).sum(dims=(0, 2, 3)).numpy()
        peaks = x.max(dims=(0, 2, 3)).numpy()
        shifted = (x - x.mean(dims=(0, 2, 3), keepdims=True) * 2).numpy()
    np.testing.assert_allclose(sums, (x_np.astype(np.float64) ** 2).sum((0, 2, 3)), rtol=1e-5)
    np.testing.assert_array_equal(peaks, x_np.max((0, 2, 3)))
    np.testing.assert_allclose(shifted, x_np - x_np.mean((0, 2, 3), keepdims=True) * 2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_dims_of_extent_one_give_numpy_values(threads):
    """Loops over dims of extent 1 are left out of the kernels (their index is 0): reduced alone,
    beside longer dims, under an argmax, kept in the output, and in elementwise maps."""
    x_np = np.random.default_rng(3).standard_normal((300, 1, 64, 1)).astype(np.float32)
    x = jt.array(x_np)
    with jt.flag_scope(num_threads=threads):
        np.testing.assert_array_equal(x.sum(dims=(1, 3)).numpy(), x_np.sum((1, 3)))
        np.testing.assert_allclose(x.sum(dims=(0, 1)).numpy(), x_np.astype(np.float64).sum((0, 1)), rtol=1e-5)
        np.testing.assert_allclose(x.max(dims=(0, 2), keepdims=True).numpy(), x_np.max((0, 2), keepdims=True))
        np.testing.assert_array_equal(x.argmax(1)[0].numpy(), np.zeros((300, 64, 1)))
        np.testing.assert_array_equal(x.argmax(2)[0].numpy(), x_np.argmax(2))
        np.testing.assert_allclose((x * x_np[:1, :, :1] + 1).exp().numpy(), np.exp(x_np * x_np[:1, :, :1] + 1),
                                   rtol=1e-5)


@pytest.mark.parametrize("op", ["sum", "max", "min", "prod", "mean"])
@pytest.mark.parametrize("rows, columns", [(300, 700), (7, 3), (2, 33000)])
@pytest.mark.parametrize("threads", [1, 3])
def test_reductions_over_leading_dims_give_numpy_values(op, rows, columns, threads):
    """Reducing the leading dims of row-major data (a bias gradient, BatchNorm1d's statistics)
    adds whole rows into tiles of outputs; tiles split unevenly, and few outputs with long columns
    go to the thread-split path instead."""
    x_np = np.random.default_rng(rows).uniform(0.5, 1.5, (rows, 1, columns)).astype(np.float32)
    with jt.flag_scope(num_threads=threads):
        got = getattr(jt.array(x_np), op)(dims=(0, 1)).numpy()
        again = getattr(jt.array(x_np), op)(dims=(0, 1)).numpy()
    np.testing.assert_allclose(got, getattr(np, op)(x_np.astype(np.float64), axis=(0, 1)), rtol=1e-5)
    np.testing.assert_array_equal(got, again)


def _loop_bounds(v):
    """The set of loop trip counts in the source of the kernel computing ``v`` (its only kernel)."""
    from jtmini import codegen, schedule
    (kernel,) = schedule.plan([v])
    source = codegen.generate(kernel).source
    dims = dict(re.findall(r"const int64_t (\w+) = (\d+);", source))
    return {int(dims.get(b, b)) for b in re.findall(r"for \(int64_t i\d+ = 0; i\d+ < (\w+);", source)}


@pytest.mark.parametrize("threads", [1, 3])
def test_loops_that_walk_memory_as_one_are_merged(threads):
    """Loops whose strides chain in every access (the outer stride is the inner one times the inner
    extent) run as one loop: a batch-norm statistic of a conv output stored channel-major sums
    N*H*W contiguous values; a map over a permuted view with a broadcast keeps H*W as one loop.
    Where a stride breaks the chain (a transpose), or an index is checked (padding), loops stay."""
    rng = np.random.default_rng(11)
    stored_np = rng.standard_normal((6, 5 * 7 * 3)).astype(np.float32)       # (C, N*H*W)
    shift_np = rng.standard_normal((1, 6, 1, 1)).astype(np.float32)
    stored, shift = jt.array(stored_np), jt.array(shift_np)
    nchw = stored.reshape(6, 5, 7, 3).permute(1, 0, 2, 3)
    nchw_np = stored_np.reshape(6, 5, 7, 3).transpose(1, 0, 2, 3)
    stat = ((nchw - shift) * (nchw - shift)).sum(dims=(0, 2, 3), keepdims=True)
    mapped = (nchw * 2 - shift).exp()
    swapped = nchw.permute(0, 1, 3, 2) * 1.5
    padded = nchw.pad([1, 1, 1, 1]) * 1.5
    assert _loop_bounds(stat) == {6, 105}
    assert _loop_bounds(mapped) == {5, 6, 21}
    assert {3, 7} <= _loop_bounds(swapped) and {5, 9} <= _loop_bounds(padded)
    with jt.flag_scope(num_threads=threads):
        centred = nchw_np.astype(np.float64) - shift_np
        np.testing.assert_allclose(stat.numpy(), (centred * centred).sum((0, 2, 3), keepdims=True), rtol=1e-5)
        np.testing.assert_allclose(mapped.numpy(), np.exp(nchw_np * 2 - shift_np), rtol=1e-5)
        np.testing.assert_array_equal(swapped.numpy(), nchw_np.transpose(0, 1, 3, 2) * np.float32(1.5))
        np.testing.assert_array_equal(padded.numpy(),
                                      np.pad(nchw_np, ((0, 0), (0, 0), (1, 1), (1, 1))) * np.float32(1.5))


def test_each_launch_site_settles_on_a_thread_count_without_changing_values():
    """``runtime/cpu.py`` times map and per-output-reduce launches on 1 and on ``num_threads``
    threads, then keeps the faster: the values are the same bit for bit, during trials and after."""
    from jtmini.runtime import cpu
    x = jt.array(np.random.default_rng(5).standard_normal((300, 1000)).astype(np.float32))
    with jt.flag_scope(num_threads=2):
        runs = [((x * 3 + 1).exp().numpy(), (x * x).sum(dims=1).numpy()) for _ in range(2 * cpu.TRIALS + 1)]
    for mapped, summed in runs[1:]:
        np.testing.assert_array_equal(mapped, runs[0][0])
        np.testing.assert_array_equal(summed, runs[0][1])
    settled = [v for (_, size, threads), v in cpu._thread_trials.items() if size == 300 * 1000 and threads == 2]
    assert settled and all(v in (1, 2) for v in settled)


def test_buffer_addresses_are_numpy_data_pointers():
    """Kernels get buffer addresses from runtime.pointers (read from numpy's object, not through
    ``ctypes.data``): views, read-only, empty and every dtype must give numpy's own pointer."""
    from jtmini.runtime import pointers
    base = np.arange(64, dtype=np.float64).reshape(8, 8)
    frozen = np.ones(5, np.int32)
    frozen.flags.writeable = False
    arrays = [base, base[3:, 2:], base.T, base[::2], frozen, np.empty(0, np.float32), np.zeros((), np.bool_),
              np.ascontiguousarray(base[1:])]
    assert pointers.address is pointers._fast        # the fast path holds on this build
    for array in arrays:
        assert pointers.address(array) == array.ctypes.data


def test_a_spread_that_reads_in_bounds_fuses_and_one_with_conditions_is_buffered(rng):
    """A table's column spread over a batch of images (Jittor's crop-and-resize) reads in bounds
    whatever the index: no check pins the consumer's loop, so it is inlined into it (it was
    buffered: four 48 MB copies of a (100, 4) table). A spread that pads keeps its own buffer."""
    from jtmini import schedule
    table = rng.standard_normal((10, 4)).astype("float32")
    shape = [10, 180, 224, 3]
    spread = [jt.array(table).reindex(shape, ["i0", str(c)]) for c in range(4)]
    out = spread[0] * 2 + spread[2] * spread[0] - spread[1] * spread[3]
    steps = schedule.plan([out])
    assert len(steps) == 1 and sum(v.op == "reindex" for v in steps[0].nodes) == 4
    expected = (table[:, 0] * 2 + table[:, 2] * table[:, 0] - table[:, 1] * table[:, 3])[:, None, None, None]
    np.testing.assert_allclose(out.numpy(), np.broadcast_to(expected, shape), rtol=1e-6)
    padded = jt.array(rng.standard_normal((512, 512, 1, 1)).astype("float32")).pad((1, 1, 1, 1))
    used = padded * 2 + padded
    assert [s.root.op for s in schedule.plan([used])] == ["pad", "add"]
