"""numpy_views (numpy's view rules worked out from shapes) against numpy itself, the strided copy
kernels built on it, and the scheduler gathering a library op's input that numpy would copy."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import codegen, numpy_views, schedule
from jtmini.ops import batch_norm as bn
from jtmini.runtime import cpu


def random_chain(rng, shape, with_broadcast):
    """A random chain of ``(op, attrs, out_shape)`` from ``shape``, and the numpy function doing it."""
    chain, steps = [], []
    for _ in range(rng.integers(1, 5)):
        kind = rng.choice(["transpose", "slice", "reshape"] + (["broadcast_to"] if with_broadcast else []))
        if kind == "transpose":
            perm = tuple(int(p) for p in rng.permutation(len(shape)))
            shape = tuple(shape[p] for p in perm)
            chain.append(("transpose", {"perm": perm}, shape))
            steps.append(lambda a, perm=perm: a.transpose(perm))
        elif kind == "slice":
            starts, stepv, out = [], [], []
            for n in shape:
                step = int(rng.choice([1, 1, 2, 3, -1, -2]))
                start = int(rng.integers(0, n)) if n else 0
                count = len(range(start, n if step > 0 else -1, step)) if n else 0
                count = int(rng.integers(1, count + 1)) if count else 0
                starts.append(start), stepv.append(step), out.append(count)
            shape = tuple(out)
            chain.append(("slice", {"starts": tuple(starts), "steps": tuple(stepv), "shape": shape}, shape))
            steps.append(lambda a, starts=starts, stepv=stepv, out=out: a[tuple(
                slice(s, s + st * n if s + st * n >= 0 else None, st) for s, st, n in zip(starts, stepv, out))])
        elif kind == "reshape":
            size = int(np.prod(shape))
            new = []
            while size > 1 and len(new) < 4:
                d = int(rng.choice([k for k in range(1, size + 1) if size % k == 0]))
                new.append(d)
                size //= d
            new.append(size)
            if rng.random() < 0.3:
                new.insert(int(rng.integers(0, len(new) + 1)), 1)
            shape = tuple(new)
            chain.append(("reshape", {"shape": shape}, shape))
            steps.append(lambda a, shape=shape: a.reshape(shape))
        else:
            lead = tuple(int(n) for n in rng.integers(1, 3, rng.integers(0, 2)))
            out = lead + tuple(int(rng.integers(1, 4)) if n == 1 else n for n in shape)
            stretched = tuple(n == 1 and m != 1 for n, m in zip(shape, out[len(lead):]))
            shape = out
            chain.append(("broadcast_to", {"shape": shape, "stretched": stretched}, shape))
            steps.append(lambda a, shape=shape: np.broadcast_to(a, shape))
    return chain, steps


def random_case(rng, with_broadcast):
    """A random shape, a random chain on it, an arange buffer of that shape and numpy's result."""
    shape = tuple(int(n) for n in rng.integers(1, 6, rng.integers(1, 5)))
    chain, steps = random_chain(rng, shape, with_broadcast)
    base = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    result = base
    for step in steps:
        result = step(result)
    return shape, chain, base, result


def test_view_strides_agree_with_numpy():
    rng = np.random.default_rng(0)
    copies = views = 0
    for _ in range(1500):
        shape, chain, base, arr = random_case(rng, with_broadcast=False)
        got = numpy_views.view_strides(shape, chain)
        if arr.size <= 1:            # numpy may copy or not; no stride can be wrong
            continue
        if not np.shares_memory(arr, base):
            copies += 1
            assert got is None, (shape, chain)
        else:
            views += 1
            assert got is not None, (shape, chain)
            assert [s for s, n in zip(got, arr.shape) if n > 1] == \
                   [s // 4 for s, n in zip(arr.strides, arr.shape) if n > 1], (shape, chain)
    assert copies > 30 and views > 30            # both outcomes were exercised


def test_views_derived_from_index_maps_equal_numpy():
    rng = np.random.default_rng(2)
    for _ in range(600):
        shape, chain, base, want = random_case(rng, with_broadcast=True)
        got = base
        for op, attrs, out_shape in chain:
            got = numpy_views.view(got, op, attrs, out_shape)
        np.testing.assert_array_equal(got, want)
        assert got.shape == want.shape


class _ChainVar:
    """The fields of a view-op Var that ``chain_view`` reads."""

    def __init__(self, op, attrs, shape):
        self.op, self.attrs, self.shape = op, attrs, shape


@pytest.mark.parametrize("readonly", [False, True])
def test_chain_view_remembered_equals_the_ops_one_by_one(readonly):
    rng = np.random.default_rng(3)
    numpy_views._chain_memo.clear()
    for _ in range(400):
        shape, chain, base, want = random_case(rng, with_broadcast=True)
        base = base * 1.5 + rng.standard_normal(base.shape).astype(np.float32)   # new values each time
        base.flags.writeable = not readonly
        chain = [_ChainVar(*c) for c in chain]
        one_by_one = numpy_views._view_along(base, chain)
        for _ in range(2):                           # the first call fills the memo, the second reads it
            got = numpy_views.chain_view(base, chain)
            np.testing.assert_array_equal(got, one_by_one)
            assert (got.shape, got.strides, got.flags.writeable) == \
                (one_by_one.shape, one_by_one.strides, one_by_one.flags.writeable)
            assert np.shares_memory(got, base) == np.shares_memory(one_by_one, base)
    assert any(g is None for g in numpy_views._chain_memo.values())      # copying chains were seen
    assert sum(g is not None for g in numpy_views._chain_memo.values()) > 100


def test_chain_view_of_a_non_contiguous_array_follows_the_ops():
    base = np.arange(24.0).reshape(4, 6)[:, ::2]
    chain = [_ChainVar("transpose", {"perm": (1, 0)}, (3, 4))]
    np.testing.assert_array_equal(numpy_views.chain_view(base, chain), base.T)
    assert numpy_views.chain_view(base, []) is base


def test_copy_walk_reads_the_elements_numpy_gives():
    rng = np.random.default_rng(1)
    for _ in range(600):
        shape, chain, base, want = random_case(rng, with_broadcast=True)
        walk = numpy_views.copy_walk(shape, chain)
        copying_reshapes = [n for n, (op, attrs, out) in enumerate(chain) if op == "reshape"
                            and numpy_views.view_strides(shape, chain[:n + 1]) is None]
        if walk is None:                       # only when a copying reshape is not the last op
            assert copying_reshapes and copying_reshapes[0] < len(chain) - 1, (shape, chain)
            continue
        dims, strides, offset = walk
        index = np.full(dims, offset, dtype=np.int64)
        for k, (n, s) in enumerate(zip(dims, strides)):
            index += (np.arange(n) * s).reshape((n,) + (1,) * (len(dims) - k - 1))
        np.testing.assert_array_equal(base.reshape(-1)[index].reshape(-1), want.reshape(-1), err_msg=str((shape, chain)))


CHAINS = [
    ("transpose then merge", (6, 5, 7), lambda x: x.transpose(1, 0, 2).reshape(5, 42),
     lambda a: a.transpose(1, 0, 2).reshape(5, 42)),
    ("inner slice of 3x3 taps", (8, 4, 3, 3), lambda x: x[:, :, 1:, 1:].reshape(8, 16),
     lambda a: a[:, :, 1:, 1:].reshape(8, 16)),
    ("strided and reversed", (9, 10, 4), lambda x: x[::2, ::-3, 1],
     lambda a: a[::2, ::-3, 1]),
    ("broadcast", (1, 5, 1), lambda x: x.broadcast_to((3, 4, 5, 2)),
     lambda a: np.broadcast_to(a, (3, 4, 5, 2))),
    ("reshape of a slice", (4, 6), lambda x: x[:, 1:5].reshape(2, 8), lambda a: a[:, 1:5].reshape(2, 8)),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("name,shape,jt_chain,np_chain", CHAINS, ids=[c[0] for c in CHAINS])
def test_view_only_kernels_are_strided_copies(name, shape, jt_chain, np_chain, dtype, threads):
    data = np.random.default_rng(2).integers(-100, 100, shape).astype(dtype)
    y = jt_chain(jt.array(data))
    (kernel,) = schedule.plan([y])
    assert isinstance(codegen.generate(kernel), codegen.CopyCode)
    with jt.flag_scope(num_threads=threads):
        np.testing.assert_array_equal(y.numpy(), np_chain(data))


def test_a_contiguous_view_of_a_buffer_is_no_kernel():
    """A Var that numpy can give as a C-contiguous view of a buffer (a reshape, a row of a table,
    a detached value) gets that view as its value: no kernel, no copy."""
    data = np.arange(24.0, dtype="float32").reshape(4, 6)
    table = jt.array(np.arange(14.0, dtype="float32").reshape(7, 2))
    for name, y, want in [("reshape", jt.array(data).reshape(3, 8), data.reshape(3, 8)),
                          ("row of a table", bn.row(table, 5).detach(), np.array([10.0, 11.0], "float32")),
                          ("contiguous slice", jt.array(data)[1:3], data[1:3])]:
        (step,) = schedule.plan([y])
        assert isinstance(step, schedule.View), name
        before = jt.stats()["kernels_run"]
        np.testing.assert_array_equal(y.numpy(), want, err_msg=name)
        assert jt.stats()["kernels_run"] == before, name
        assert not y._data.flags.writeable, name     # a view of a shared buffer: read-only
        y.data[0] = -1.0           # .data copies it first: the buffer viewed keeps its value
        assert y.numpy()[0].max() == -1.0 and table.numpy()[5].tolist() == [10.0, 11.0], name


def test_a_small_view_of_a_large_buffer_is_copied():
    """A view would keep the whole buffer alive: a kernel copies the few values instead."""
    big = jt.array(np.zeros((512, 512), "float32"))
    (step,) = schedule.plan([big[:2]])
    assert isinstance(step, schedule.Kernel)
    np.testing.assert_array_equal(big[:2].numpy(), np.zeros((2, 512), "float32"))


def test_large_copy_splits_over_threads_with_equal_values():
    data = np.random.default_rng(3).standard_normal((64, 100, 49)).astype("float32")
    want = data.transpose(1, 0, 2).reshape(100, 64 * 49)
    for threads in (1, 2):
        with jt.flag_scope(num_threads=threads):
            np.testing.assert_array_equal(jt.array(data).transpose(1, 0, 2).reshape(100, -1).numpy(), want)


def test_matmul_input_that_numpy_would_copy_is_gathered_by_a_kernel():
    rng = np.random.default_rng(4)
    a, w = rng.standard_normal((6, 5, 7)).astype("float32"), rng.standard_normal((42, 3)).astype("float32")
    x = jt.array(a).transpose(1, 0, 2).reshape(5, 42)        # merges dims that are not contiguous
    y = x @ jt.array(w)
    steps = schedule.plan([y])
    gather, call = steps
    assert isinstance(gather, schedule.Kernel) and gather.root is x
    assert isinstance(call, schedule.LibraryCall) and call.sources[0] is x and call.views[0] == []
    np.testing.assert_allclose(y.numpy(), a.transpose(1, 0, 2).reshape(5, 42) @ w, rtol=1e-5)


def test_matmul_input_blas_cannot_read_is_gathered_once_for_forward_and_backward():
    rng = np.random.default_rng(6)
    w, a = rng.standard_normal((8, 6, 3, 3)).astype("float32"), rng.standard_normal((5, 6)).astype("float32")
    x = jt.array(a)
    center = jt.array(w)[:, :, 1, 1].transpose()     # a numpy view, but no axis of unit stride
    y = x @ center
    (dx,) = jt.grad((y * y).sum(), [x])                # reads center again, transposed
    steps = schedule.plan([y, dx])
    assert [s.root for s in steps if isinstance(s, schedule.Kernel) and s.root.shape == center.shape] == [center]
    assert sum(isinstance(s, schedule.LibraryCall) for s in steps) == 2
    want = a @ w[:, :, 1, 1].T
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(dx.numpy(), 2 * want @ w[:, :, 1, 1], rtol=1e-4)


def test_matmul_input_that_is_a_view_stays_a_view():
    rng = np.random.default_rng(5)
    a, b = jt.array(rng.standard_normal((4, 6)).astype("float32")), jt.array(rng.standard_normal((4, 3)).astype("float32"))
    y = a.transpose() @ b                                      # a transposed matrix: BLAS reads it as it is
    (call,) = schedule.plan([y])
    assert isinstance(call, schedule.LibraryCall) and [v.op for v in call.views[0]] == ["transpose"]
    np.testing.assert_allclose(y.numpy(), a.numpy().T @ b.numpy(), rtol=1e-5)


def test_copy_kernel_runs_through_the_runtime_like_any_kernel():
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = jt.array(data).transpose(2, 0, 1).reshape(4, 6)
    (kernel,) = schedule.plan([y])
    built = cpu.build([kernel])[id(kernel)]
    np.testing.assert_array_equal(cpu.run_kernel(kernel, built, lambda v: v._data)[-1], data.transpose(2, 0, 1).reshape(4, 6))
