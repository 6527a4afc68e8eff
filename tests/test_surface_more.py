"""More of Jittor's surface against PyTorch CPU (values, and gradients in float64 through
``conftest.check_grad``) on random inputs read through non-contiguous views:

- ``scatter`` / ``scatter_`` (replace, add, multiply; Var or number ``src``; the in-place form
  rebinds the handle), including repeated indices for add and multiply, zeros in a product, and
  the range check of a known index (a lazy one is not computed to check it);
- ``erfinv`` in float32 and float64, near and at +-1 and outside, and its gradient;
- ``<<`` / ``>>`` (``left_shift`` / ``right_shift``) on int32 and int64 with broadcasting, the
  reflected and in-place operators, and the counts C leaves undefined (numpy's results);
- the CUDA forms of erfinv and the shifts compiled by nvcc (where nvcc is on PATH).
"""
import shutil
import subprocess

import numpy as np
import pytest
import torch

import jtmini as jt
from conftest import LAYOUTS, assert_var, check_grad, make_input

F = vars(jt)        # the public functions, jt.<name>


def _distinct(rng, shape, dim, size):
    """An index of ``shape`` whose entries along ``dim`` are distinct positions in [0, size): a
    replacing scatter then has one writer per position, as PyTorch needs for a defined result."""
    moved = list(shape)
    lines = moved.pop(dim)
    picks = [rng.permutation(size)[:lines] for _ in range(int(np.prod(moved)))]
    return np.moveaxis(np.array(picks).reshape(moved + [lines]), -1, dim).astype(np.int64)


def _repeated(rng, shape, dim, size):
    """An index with repeats: a scatter-add or multiply must combine every one of them. The first
    entry and the one after it along ``dim`` are sure to go to one position."""
    index = rng.integers(0, size, shape)
    index[_second(len(shape), dim)] = index[(0,) * len(shape)]
    return index.astype(np.int64)


def _second(ndim, dim):
    """The entry after the first along ``dim``: it shares the first's position off ``dim``."""
    return tuple(1 if k == dim % ndim else 0 for k in range(ndim))


# --- scatter: values and gradients against torch --------------------------------------------------
# name: (x shape, dim, index shape, src shape); index fits x off dim and src everywhere
SCATTER_SHAPES = {
    "dim 0": ((4, 5), 0, (3, 4), (3, 5)),
    "dim 1": ((4, 5), 1, (3, 4), (4, 4)),
    "dim -1 3-D": ((2, 3, 4), -1, (2, 3, 2), (2, 3, 3)),
}


def _torch_scatter(reduce):
    """torch's reference: multiply is ``scatter_reduce`` with "prod" (same values; it has a gradient).
    src is cut to index's shape first: torch's backward refuses a larger src."""
    def ref(x, dim, index, src):
        src = src[tuple(slice(0, n) for n in index.shape)]
        if reduce == "multiply":
            return x.scatter_reduce(dim, index, src, "prod", include_self=True)
        return x.scatter_add(dim, index, src) if reduce == "add" else x.scatter(dim, index, src)
    return ref


@pytest.mark.parametrize("layouts", [("contig", "contig"), ("transposed", "sliced"), ("sliced", "transposed")])
@pytest.mark.parametrize("reduce", ["void", "add", "multiply"])
@pytest.mark.parametrize("case", list(SCATTER_SHAPES))
def test_scatter_values_and_gradients(case, reduce, layouts, rng):
    xshape, dim, ishape, sshape = SCATTER_SHAPES[case]
    size = xshape[dim]
    index = _distinct(rng, ishape, dim, size) if reduce == "void" else _repeated(rng, ishape, dim, size)
    x, src = rng.standard_normal(xshape), rng.standard_normal(sshape)
    if reduce == "multiply":        # zeros in a product: two at one position, and one at another
        ndim = len(xshape)
        src[(0,) * ndim] = src[_second(ndim, dim)] = src[_second(ndim, dim % ndim + 1)] = 0.0
    ref = _torch_scatter(reduce)
    for fn in (lambda a, s: a.scatter(dim, jt.array(index), s, reduce=reduce),
               lambda a, s: F["scatter"](a, dim, jt.array(index.astype(np.int32)), s, reduce)):
        check_grad(fn, lambda a, s: ref(a, dim, torch.tensor(index), s), [x, src], layouts=list(layouts), rng=rng)


@pytest.mark.parametrize("reduce", ["void", "add", "multiply"])
def test_scatter_float32_and_int_values(reduce, rng):
    index = _distinct(rng, (3, 4), 0, 4) if reduce == "void" else _repeated(rng, (3, 4), 0, 4)
    for dtype in ("float32", "int32", "int64"):
        x = (rng.standard_normal((4, 5)) * 4).astype(dtype)
        src = (rng.standard_normal((3, 5)) * 4).astype(dtype)
        want = _torch_scatter(reduce)(torch.tensor(x), 0, torch.tensor(index), torch.tensor(src)[:, :4])
        got_x, _ = make_input(x, "transposed")
        assert_var(got_x.scatter(0, jt.array(index), jt.array(src), reduce), want.numpy())


@pytest.mark.parametrize("reduce", ["void", "add", "multiply"])
def test_scatter_number_src(reduce, rng):
    """A number src is every entry's value, cast to x's dtype, as torch's ``scatter(dim, index, value)``."""
    index = _distinct(rng, (2, 3), 1, 4) if reduce == "void" else _repeated(rng, (2, 3), 1, 4)
    x = rng.standard_normal((2, 4))
    want = torch.tensor(x).scatter(1, torch.tensor(index), 2.5, **({} if reduce == "void" else {"reduce": reduce}))
    assert_var(jt.array(x).scatter(1, jt.array(index), 2.5, reduce), want.numpy())
    ints = jt.array(np.arange(8, dtype=np.int32).reshape(2, 4))
    assert_var(ints.scatter(1, jt.array(index), 2.7, reduce),                       # cast: 2
               torch.tensor(ints.numpy()).scatter(1, torch.tensor(index), 2, **({} if reduce == "void" else
                                                                                  {"reduce": reduce})).numpy())
    value = jt.array(2.5, "float64")                   # a 0-d Var: spread like a number, with a gradient
    got = jt.grad((jt.array(x).scatter(1, jt.array(index), value, reduce) ** 2).sum(), value)
    src = torch.tensor(2.5, dtype=torch.float64, requires_grad=True)
    ref = _torch_scatter(reduce)(torch.tensor(x), 1, torch.tensor(index), src.expand(2, 3))
    (ref ** 2).sum().backward()
    assert_var(got, src.grad.numpy(), rtol=1e-12)


def test_scatter_add_accumulates_repeats():
    x = jt.zeros(3, 2)
    index = jt.array(np.array([[1, 0], [1, 0], [1, 2]]))
    got = x.scatter(0, index, jt.array([[1.0, 10.0], [2.0, 20.0], [4.0, 40.0]]), reduce="add")
    assert_var(got, np.float32([[0, 30], [7, 0], [0, 40]]))
    src = jt.array(np.arange(1, 7, dtype=np.float64).reshape(3, 2))
    assert_var(jt.ones(3, 2, dtype="float64").scatter(0, index, src, "multiply"), np.float64([[1, 8], [15, 1], [1, 6]]))


def test_scatter_negative_entries_count_from_the_end(rng):
    index = np.array([[-1, 0, -4], [1, -2, 2]])
    x, src = rng.standard_normal((4, 3)), rng.standard_normal((2, 3))
    want = torch.tensor(x).scatter(0, torch.tensor(index % 4), torch.tensor(src))
    assert_var(jt.array(x).scatter(0, jt.array(index), jt.array(src)), want.numpy())


def test_scatter_non_contiguous_and_lazy_index(rng):
    index = _distinct(rng, (4, 3), 0, 5)
    x, src = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    want = torch.tensor(x).scatter(0, torch.tensor(index), torch.tensor(src)).numpy()
    stored = jt.array(np.ascontiguousarray(index.T))
    assert_var(jt.array(x).scatter(0, stored.transpose(), jt.array(src)), want)      # a view of the index
    lazy = jt.array(index + 1) - 1
    assert_var(jt.array(x).scatter(0, lazy, jt.array(src)), want)


def test_scatter_does_not_compute_a_lazy_index_to_check_it():
    """A lazy index is not computed by building the scatter; its out-of-range entries are dropped."""
    index = jt.array(np.array([[0, 7]])) + 0
    out = jt.zeros(2, 2).scatter(0, index, jt.array([[1.0, 2.0]]))
    assert not index.is_realized()
    assert_var(out, np.float32([[1, 0], [0, 0]]))


def test_scatter_0d_empty_and_method_forms():
    assert_var(jt.array(3.0).scatter(0, jt.array(0), jt.array(5.0)), np.float32(5.0))
    x = jt.array([1.0, 2.0])
    empty = x.scatter(0, jt.array(np.zeros(0, np.int64)), jt.zeros(0))
    assert empty is not x
    assert_var(empty, np.float32([1, 2]))
    assert_var(F["scatter"](np.float32([1, 2]), 0, jt.array([1]), 0.0), np.float32([1, 0]))
    assert {"scatter", "scatter_"} <= set(F) and hasattr(jt.Var, "scatter") and hasattr(jt.Var, "scatter_")


@pytest.mark.parametrize("reduce", ["void", "add", "multiply"])
def test_scatter_in_place_rebinds(reduce, rng):
    """``scatter_`` rebinds the handle: Vars built before keep the old value, gradients reach the old x."""
    index = _distinct(rng, (2, 3), 0, 3)
    w_value, src_value = rng.standard_normal((3, 3)), rng.standard_normal((2, 3))
    w, src = jt.array(w_value), jt.array(src_value)
    x = w * 2
    before = x + 0
    returned = x.scatter_(0, jt.array(index), src, reduce=reduce)
    assert returned is x and x.shape == (3, 3) and x.dtype == "float64"
    assert_var(before, w_value * 2)
    t_w, t_src = (torch.tensor(v, requires_grad=True) for v in (w_value, src_value))
    t_x = _torch_scatter(reduce)(t_w * 2, 0, torch.tensor(index), t_src)
    assert_var(x, t_x.detach().numpy())
    grads = jt.grad((x * x).sum() + before.sum(), [w, src])
    (t_x * t_x).sum().add((t_w * 2).sum()).backward()
    np.testing.assert_allclose(grads[0].numpy(), t_w.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(grads[1].numpy(), t_src.grad.numpy(), rtol=1e-10)


def test_scatter_multiply_gradient_ignores_later_rebinding(rng):
    """The multiply rule holds its own nodes: ``x += 1`` after the scatter does not change its gradient."""
    index = _repeated(rng, (2, 3), 0, 3)
    x_value, src_value = rng.standard_normal((3, 3)), rng.standard_normal((2, 3))
    x, src = jt.array(x_value), jt.array(src_value)
    out = x.scatter(0, jt.array(index), src, "multiply")
    old_x = x
    x += 1
    t_x, t_src = (torch.tensor(v, requires_grad=True) for v in (x_value, src_value))
    _torch_scatter("multiply")(t_x, 0, torch.tensor(index), t_src).sum().backward()
    assert x is old_x
    np.testing.assert_allclose(jt.grad(out.sum(), src).numpy(), t_src.grad.numpy(), rtol=1e-10)


def _raises(kind, words, fn):
    with pytest.raises(kind) as err:
        fn()
    for word in words:
        assert word in str(err.value), (word, str(err.value))


SCATTER_ERRORS = [
    (IndexError, ["scatter", "index 3", "dim 0", "size 3"],
     lambda x: x.scatter(0, jt.array([[0, 3]]), jt.zeros(1, 2))),
    (IndexError, ["index -5", "dim 1", "size 4"], lambda x: x.scatter(1, jt.array([[-5]]), 1.0)),
    (ValueError, ["(2, 5)", "(3, 4)", "dim 0"], lambda x: x.scatter(0, jt.zeros(2, 5, dtype="int32"), 0.0)),
    (ValueError, ["(4,)", "(3, 4)"], lambda x: x.scatter(1, jt.zeros(4, dtype="int32"), 0.0)),
    (ValueError, ["(2, 3)", "src", "(2, 2)"], lambda x: x.scatter(1, jt.zeros(2, 3, dtype="int32"), jt.zeros(2, 2))),
    (ValueError, ["src", "(4,)"], lambda x: x.scatter(1, jt.zeros(2, 3, dtype="int32"), jt.zeros(4))),
    (TypeError, ["an integer Var", "bool"], lambda x: x.scatter(0, jt.zeros(1, 1, dtype="bool"), 1.0)),
    (ValueError, ["reduce", "'mean'"], lambda x: x.scatter(0, jt.zeros(1, 1, dtype="int32"), 1.0, "mean")),
    (IndexError, ["dim 2"], lambda x: x.scatter(2, jt.zeros(1, 1, dtype="int32"), 1.0)),
]


@pytest.mark.parametrize("case", range(len(SCATTER_ERRORS)))
def test_scatter_errors_name_the_offender(case):
    kind, words, fn = SCATTER_ERRORS[case]
    _raises(kind, words, lambda: fn(jt.zeros(3, 4)))


# --- erfinv -------------------------------------------------------------------------------------
def _erfinv_points(rng, dtype):
    """Random points of (-1, 1), points close to +-1 (as close as the dtype goes), tiny ones, the
    ends and values outside."""
    eps = np.finfo(dtype).eps / 2                 # 1 - eps / 2... the largest value below 1 is 1 - eps/2
    near = 1 - np.logspace(np.log10(eps), -1, 40)
    values = np.concatenate([rng.uniform(-1, 1, 200), near, -near, [1 - eps, -(1 - eps)],
                             np.logspace(-30, -2, 10), [0.0, -0.0, 1.0, -1.0, 1.5, -2.0, np.inf, np.nan]])
    return values.astype(dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_erfinv_values_match_torch(dtype, layout, rng):
    values = _erfinv_points(rng, dtype).reshape(20, -1)
    want = torch.erfinv(torch.from_numpy(values)).numpy()
    x, _ = make_input(values, layout)
    # float64 to ~1e-12 relative up to the last double below 1; float32 computed in double, rounded
    tol = dict(rtol=1e-12, atol=0) if dtype == "float64" else dict(rtol=3e-7, atol=0)
    for got in (x.erfinv(), F["erfinv"](x)):
        assert got.dtype == dtype and got.shape == values.shape
        np.testing.assert_allclose(got.numpy(), want, equal_nan=True, **tol)
    exact = jt.array(np.array([1.0, -1.0, 0.0, -0.0, 1.0000001, np.nan], dtype)).erfinv().numpy()
    assert exact[0] == np.inf and exact[1] == -np.inf and np.isnan(exact[4:]).all()
    assert exact[2] == 0 and not np.signbit(exact[2]) and np.signbit(exact[3])      # -0 stays -0


def test_erfinv_casts_integers_to_float32():
    assert_var(jt.array([0, 1, -1], "int32").erfinv(), np.float32([0, np.inf, -np.inf]))


@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_erfinv_gradient_matches_torch(dtype, layout, rng):
    values = rng.uniform(-0.97, 0.97, (3, 4))
    check_grad(lambda x: x.erfinv(), torch.erfinv, [values], layouts=[layout], dtype=dtype, rng=rng)
    check_grad(lambda x: (x * 0.5).erfinv() * x, lambda x: torch.erfinv(x * 0.5) * x, [values],
               layouts=[layout], dtype=dtype, rng=rng)


# --- shifts -------------------------------------------------------------------------------------
def _ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    values.reshape(-1)[:3] = [info.min, info.max, -1]
    return values


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_shifts_match_torch_and_numpy(dtype, layout, rng):
    bits = np.iinfo(dtype).bits
    a = _ints(rng, (3, 4), dtype)
    for counts in (rng.integers(0, bits, (3, 4)), rng.integers(0, bits, (4,)), rng.integers(0, bits, (3, 1))):
        counts = counts.astype(dtype)
        x, _ = make_input(a, layout)
        y, _ = make_input(counts, layout if counts.ndim == 2 else "contig")
        left = torch.bitwise_left_shift(torch.tensor(a), torch.tensor(counts)).numpy()
        right = torch.bitwise_right_shift(torch.tensor(a), torch.tensor(counts)).numpy()
        assert_var(x << y, left)
        assert_var(x >> y, right)
        assert_var(F["left_shift"](x, y), np.left_shift(a, counts))
        assert_var(F["right_shift"](x, y), np.right_shift(a, counts))
        assert_var(x.left_shift(y), left)
        assert_var(x.right_shift(y), right)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_shift_counts_c_leaves_undefined_follow_numpy(dtype, rng):
    """Counts that are negative or at least the bit width: every bit shifts out, as numpy gives."""
    bits = np.iinfo(dtype).bits
    a = _ints(rng, (6,), dtype)
    a[3:] = [5, -5, 0]
    for count in (-1, -bits, bits, bits + 1, 2 * bits, 1000, bits - 1, 0):
        counts = np.full(a.shape, count, dtype)
        assert_var(jt.array(a) << jt.array(counts), np.left_shift(a, counts))
        assert_var(jt.array(a) >> jt.array(counts), np.right_shift(a, counts))
        assert_var(jt.array(a) << count, np.left_shift(a, counts))       # a weak scalar count
        assert_var(jt.array(a) >> count, np.right_shift(a, counts))
    # the values numpy gives, spelled out: 0 for <<, the sign for >>
    assert (jt.array(a) << bits).numpy().tolist() == [0] * 6
    assert (jt.array(a) >> -1).numpy().tolist() == [-1 if v < 0 else 0 for v in a]


def test_shift_scalars_reflected_promotion_and_in_place():
    a = jt.array(np.array([1, -3, 7], np.int32))
    assert_var(a << 2, np.int32([4, -12, 28]))
    assert_var(3 << a.abs(), np.int32([6, 24, 384]))                                  # __rlshift__
    assert_var(-64 >> jt.array(np.array([1, 2, 3], np.int32)), np.int32([-32, -16, -8]))   # __rrshift__
    assert_var(a << jt.array(np.array([1], np.int64)), np.int64([2, -6, 14]))        # promoted, as numpy
    b = jt.array(np.array([[1, 2], [3, 4]], np.int64))
    before = b + 0
    handle = b
    b <<= jt.array(np.array([1, 2], np.int32))
    assert b is handle and b.dtype == "int64"
    assert_var(b, np.int64([[2, 8], [6, 16]]))
    b >>= 1
    assert_var(b, np.int64([[1, 4], [3, 8]]))
    assert_var(before, np.int64([[1, 2], [3, 4]]))                # built before: the old value


def test_shifts_have_no_gradient():
    a = jt.array(np.array([1, 2, 3], np.int32))
    loss = (a << 1).cast("float32").sum() + (a >> 1).cast("float32").sum()
    with pytest.raises(TypeError, match="float Var"):       # as Jittor: no gradient for an int Var
        jt.grad(loss, a)


SHIFT_ERRORS = [
    (lambda: jt.array([1.0, 2.0]) << 1, ["left_shift", "float32"]),
    (lambda: jt.array(np.array([1, 2], np.int32)) >> jt.array([1.0, 2.0], "float64"), ["right_shift", "float64"]),
    (lambda: jt.array([True, False]) << 1, ["left_shift", "bool"]),
    (lambda: 1 >> jt.array([True]), ["right_shift", "bool"]),
    (lambda: jt.array([1, 2]) << 1.5, ["left_shift", "float"]),
    (lambda: F["right_shift"](jt.array([1]), jt.array([True])), ["right_shift", "bool"]),
]


@pytest.mark.parametrize("case", range(len(SHIFT_ERRORS)))
def test_shifts_refuse_bool_and_float(case):
    fn, words = SHIFT_ERRORS[case]
    _raises(TypeError, words, fn)


def test_in_place_shift_refuses_a_float_count():
    a = jt.array([1, 2])
    with pytest.raises(TypeError, match="float32"):
        a <<= jt.array([1.0, 1.0])


# --- the CUDA forms compile -----------------------------------------------------------------------
def _cuda_sources():
    from jtmini import codegen, schedule
    graphs = []
    for dtype in ("float32", "float64"):
        x = jt.array(np.linspace(-0.9, 0.9, 12).reshape(3, 4).astype(dtype))
        graphs.append([x.erfinv() * 2, jt.grad(x.erfinv().sum(), x)])
    for dtype in ("int32", "int64"):
        a, b = (jt.array(np.arange(12).reshape(3, 4).astype(dtype)) for _ in range(2))
        graphs.append([(a << b) + (a >> 3), (-7 << b.transpose().transpose())])
    kernels = [s for targets in graphs for s in schedule.plan(targets) if isinstance(s, schedule.Kernel)]
    return [codegen.generate(k, "cuda").source for k in kernels]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found on PATH")
def test_cuda_forms_compile_with_nvcc(tmp_path):
    sources = _cuda_sources()
    assert any("jt_erfinv" in s for s in sources) and any("jt_shl" in s for s in sources)
    files = []
    for k, source in enumerate(sources):
        files.append(tmp_path / f"k{k}.cu")
        files[-1].write_text(source)
    argv = ["nvcc", "-cubin", "-arch=sm_90", "-std=c++17", "--expt-relaxed-constexpr",
            "--output-directory", str(tmp_path), *map(str, files)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
