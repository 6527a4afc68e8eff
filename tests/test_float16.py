"""float16 (half) as a storage dtype on the CPU: casts both ways rounded as numpy rounds, values of
elementwise ops (broadcast and non-contiguous inputs too) bit for bit numpy's float16 arithmetic,
reductions summed in float32, matmul through float32, gradients in float16 against PyTorch's
float16 CPU ops, Jittor's dtype rules and ``amp_reg`` bits, and the errors of what has no half path.
"""
import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini import codegen, dtypes, schedule
from conftest import LAYOUTS, make_input, storage, view

HALF_TOL = dict(rtol=2e-3, atol=2e-3)      # a float16 ulp is 2**-10 relative
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")   # numpy's own reference casts


def _halves(rng, shape, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def _bits_equal(got, expected):
    """Equal as float16 bit patterns (so -0.0 is not 0.0), NaNs alike wherever they are."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype == np.float16, (got.dtype, expected.dtype)
    assert got.shape == expected.shape
    same = (got.view(np.uint16) == expected.view(np.uint16)) | (np.isnan(got) & np.isnan(expected))
    assert same.all(), f"differ at {np.argwhere(~same)[:5].tolist()}: {got[~same][:5]} vs {expected[~same][:5]}"


# --- dtype, arrays, casts ------------------------------------------------------------------------
def test_float16_names_arrays_and_numpy_round_trip():
    values = np.array([[0.5, -1.25, 65504.0], [6e-8, -0.0, np.inf]], np.float16)
    x = jt.array(values)
    assert x.dtype == "float16" and x.numpy().dtype == np.float16
    _bits_equal(x.numpy(), values)
    assert jt.float16 == jt.half == "float16" and dtypes.canonical("half") == "float16"
    assert dtypes.canonical(np.float16) == "float16"
    assert jt.half([1.5, 2.0]).dtype == "float16" and jt.float16(np.ones(2)).dtype == "float16"
    assert jt.zeros(2, dtype=jt.half).numpy().dtype == np.float16
    y = jt.array([1.0, 2.0])
    assert y.half().dtype == y.float16().dtype == y.astype("half").dtype == "float16"
    assert jt.array([1.0], dtype="float16").item() == 1.0


@pytest.mark.parametrize("source", ["float32", "float64"])
def test_cast_to_half_rounds_to_nearest_even_as_numpy(rng, source):
    """Random values, ties, subnormals, overflow to inf, the largest finite, NaN and signed zeros;
    a double is rounded once (through float it would round twice)."""
    special = [65504.0, 65519.99, 65520.0, 1e5, -1e5, 2.0 ** -24, 2.0 ** -25, 2.0 ** -26, 3 * 2.0 ** -25,
               1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -11 + 2.0 ** -40, np.nan, -0.0, 0.0, -np.inf]
    values = np.concatenate([rng.standard_normal(500) * 10.0 ** rng.integers(-8, 6, 500), special]).astype(source)
    for layout in LAYOUTS:
        x, _ = make_input(values.reshape(43, 12), layout)
        _bits_equal(x.float16().numpy(), values.reshape(43, 12).astype(np.float16))


def test_cast_from_half_and_between_ints_and_half(rng):
    h = _halves(rng, (5, 7), 50.0)
    x = jt.array(h)
    for target in ("float32", "float64", "int32", "int8", "bool"):
        expected = h.astype(target) if target not in ("int8",) else h.astype(np.float32).astype(np.int64).astype(np.int8)
        got = x.cast(target).numpy()
        assert got.dtype == np.dtype(target)
        np.testing.assert_array_equal(got, expected)
    ints = rng.integers(-70000, 70000, (40,)).astype(np.int32)
    _bits_equal(jt.array(ints).float16().numpy(), ints.astype(np.float16))


# --- elementwise ---------------------------------------------------------------------------------
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
          "minimum": np.minimum, "mod": np.mod, "floordiv": np.floor_divide}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_binary_ops_are_numpys_float16_bit_for_bit(rng, name, layout):
    a, b = _halves(rng, (6, 5)), _halves(rng, (6, 5))
    b[b == 0] = 1
    x, _ = make_input(a, layout)
    y, _ = make_input(b, "contig")
    got = getattr(jt, name)(x, y)
    assert got.dtype == "float16"
    _bits_equal(got.numpy(), BINARY[name](a, b))


def test_broadcast_chain_rounds_every_op_as_numpy(rng):
    """Each float16 op of a fused kernel is rounded to half, as numpy's separate ops are."""
    a, b, c = _halves(rng, (4, 1, 6)), _halves(rng, (5, 1)), _halves(rng, (6,))
    x, y, z = jt.array(a), jt.array(b), jt.array(c)
    got = ((x * y + z) / (y * y + 1.5) - x).numpy()
    _bits_equal(got, (a * b + c) / (b * b + np.float16(1.5)) - a)


@pytest.mark.parametrize("name,ref", [("sqrt", np.sqrt), ("abs", np.abs), ("neg", np.negative), ("floor", np.floor),
                                      ("relu", lambda v: np.maximum(v, np.float16(0)))])
def test_exact_unary_ops_match_numpy(rng, name, ref):
    a = np.abs(_halves(rng, (7, 9))) if name == "sqrt" else _halves(rng, (7, 9))
    for layout in ("contig", "transposed"):
        x, _ = make_input(a, layout)
        _bits_equal(getattr(jt, name)(x).numpy(), ref(a))


@pytest.mark.parametrize("name", ["sin", "tanh", "log", "sigmoid"])
def test_transcendental_unary_ops_within_an_ulp(rng, name):
    a = np.abs(_halves(rng, (50,))) + np.float16(0.01) if name == "log" else _halves(rng, (50,))
    got = getattr(jt, name)(jt.array(a))
    assert got.dtype == "float16"
    expected = getattr(torch, name)(torch.tensor(a.astype(np.float64))).numpy().astype(np.float16)
    np.testing.assert_allclose(got.numpy().astype(np.float64), expected.astype(np.float64), rtol=1e-3, atol=1e-4)


def test_weak_scalars_keep_half_and_round_once(rng):
    a = _halves(rng, (30,))
    x = jt.array(a)
    for scalar in (0.1, 3, 1 / 3, 1e5):
        got = x * scalar
        assert got.dtype == "float16"
        _bits_equal(got.numpy(), a * np.float16(scalar))
    _bits_equal((2.5 - x).numpy(), np.float16(2.5) - a)


@pytest.mark.parametrize("other,result", [("float32", "float32"), ("float64", "float64"), ("int32", "float16"),
                                          ("int8", "float16"), ("uint8", "float16"), ("bool", "float16"),
                                          ("int64", "float16"), ("float16", "float16")])
def test_promotion(rng, other, result):
    a = _halves(rng, (3, 4))
    o = rng.integers(0, 5, (3, 4)).astype(other)
    got = jt.array(a) + jt.array(o)
    assert got.dtype == result
    np.testing.assert_allclose(got.numpy().astype(np.float64), (a.astype(np.float64) + o).astype(result), rtol=1e-3)
    assert dtypes.promote(other, "float16") == result


def test_comparisons_where_and_maximum_with_nan(rng):
    a, b = _halves(rng, (20,)), _halves(rng, (20,))
    a[3], b[5] = np.nan, np.nan
    x, y = jt.array(a), jt.array(b)
    np.testing.assert_array_equal((x < y).numpy(), a < b)
    np.testing.assert_array_equal((x == y).numpy(), a == b)
    _bits_equal(jt.maximum(x, y).numpy(), np.maximum(a, b))
    _bits_equal(jt.where(x > 0, x, y).numpy(), np.where(a > 0, a, b))


# --- movement, scatter, setitem ------------------------------------------------------------------
def test_views_copies_and_setitem(rng):
    a = _halves(rng, (6, 8))
    x = jt.array(a)
    _bits_equal(x[1::2, 2:7].numpy(), a[1::2, 2:7])
    _bits_equal(x.transpose().numpy(), a.T)
    _bits_equal(x[::-1].reshape(48).numpy(), a[::-1].reshape(48))
    _bits_equal(jt.concat([x, x[:2]], 0).numpy(), np.concatenate([a, a[:2]]))
    z = jt.zeros(6, 8, dtype="float16")
    z[1:3, ::2] = x[1:3, ::2]
    expected = np.zeros((6, 8), np.float16)
    expected[1:3, ::2] = a[1:3, ::2]
    _bits_equal(z.numpy(), expected)


@pytest.mark.parametrize("op,ufunc", [("add", np.add), ("maximum", np.maximum), ("minimum", np.minimum)])
def test_reindex_reduce_scatter_rounds_each_update_as_numpys_at(rng, op, ufunc):
    a = _halves(rng, (12,))
    got = jt.array(a).reindex_reduce(op, [4], ["i0 % 4"])
    assert got.dtype == "float16"
    expected = np.zeros(4, np.float16) if op == "add" else np.full(4, {"maximum": -65504, "minimum": 65504}[op], np.float16)
    ufunc.at(expected, np.arange(12) % 4, a)
    _bits_equal(got.numpy(), expected)


# --- reductions ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dims", [None, 0, 1, (0, 2)])
def test_sums_and_means_accumulate_in_float32(rng, dims):
    a = _halves(rng, (30, 40, 5))
    x, _ = make_input(a, "transposed" if dims == 1 else "contig")
    axis = dims
    wide = a.astype(np.float64)
    for got, expected in ((x.sum(dims), wide.sum(axis)), (x.mean(dims), wide.mean(axis))):
        assert got.dtype == "float16"
        np.testing.assert_allclose(got.numpy().astype(np.float64), np.asarray(expected).astype(np.float16).astype(np.float64),
                                   rtol=1e-3, atol=1e-3)


def test_long_sum_is_not_a_half_accumulation_and_is_deterministic():
    """4096 ones summed in half would stop at 2048; threads split the sum in a fixed order."""
    a = np.ones(5000, np.float16)
    assert jt.array(a).sum().item() == 5000
    b = (np.random.default_rng(3).standard_normal(300000)).astype(np.float16)
    results = set()
    for threads in (1, 2, 1, 2):
        with jt.flag_scope(num_threads=threads):
            results.add(jt.array(b).sum().numpy().tobytes())
    assert len(results) == 1
    np.testing.assert_allclose(float(np.frombuffer(results.pop(), np.float16)[0]), b.astype(np.float64).sum(), rtol=2e-3)


def test_max_min_prod_follow_jittors_dtypes_and_amp_keep_reduce(rng):
    a = _halves(rng, (4, 6))
    x = jt.array(a)
    for name, ref in (("max", np.max), ("min", np.min), ("prod", np.prod)):
        got = getattr(x, name)(1)
        assert got.dtype == "float32"                         # Jittor's reduce_dtype_infer
        np.testing.assert_allclose(got.numpy(), ref(a.astype(np.float32), 1), rtol=1e-5)
        with jt.flag_scope(amp_reg=4):
            kept = getattr(x, name)(1)
        assert kept.dtype == "float16"
        _bits_equal(kept.numpy(), ref(a.astype(np.float32), 1).astype(np.float16))
    index, value = x.argmax(1)
    np.testing.assert_array_equal(index.numpy(), a.argmax(1))


# --- matmul --------------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((2, 5, 7), (7, 4)), ((3, 1, 4, 6), (2, 6, 5)), ((7,), (7, 2))])
def test_matmul_in_float32_rounded_once(rng, shapes):
    a, b = _halves(rng, shapes[0], 1.0), _halves(rng, shapes[1], 1.0)
    got = jt.array(a) @ jt.array(b)
    assert got.dtype == "float16"
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float16)
    np.testing.assert_allclose(got.numpy().astype(np.float64), expected.astype(np.float64), rtol=1e-3, atol=1e-3)


def test_matmul_transposed_operand_and_mixed_dtypes(rng):
    a, b = _halves(rng, (4, 6), 1.0), rng.standard_normal((6, 3)).astype(np.float32)
    x, _ = make_input(a, "transposed")                     # read through a transpose
    got = x @ jt.array(b)
    assert got.dtype == "float32"                          # float16 with float32: float32
    np.testing.assert_allclose(got.numpy(), a.astype(np.float32) @ b, rtol=1e-5, atol=1e-5)
    h = x @ jt.array(b.astype(np.float16))
    assert h.dtype == "float16"
    np.testing.assert_allclose(h.numpy().astype(np.float64), a.astype(np.float64) @ b.astype(np.float16).astype(np.float64),
                               rtol=2e-3, atol=2e-3)


# --- gradients -----------------------------------------------------------------------------------
def _torch_half_grads(fn, arrays, w):
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*leaves)
    (out * torch.tensor(w)).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in leaves]


@pytest.mark.parametrize("case", ["arith", "broadcast", "unary", "matmul", "reduce"])
def test_gradients_flow_in_float16_as_torchs(rng, case):
    fns = {"arith": (lambda x, y: x * y + x / (y * y + 1), [(4, 5), (4, 5)]),
           "broadcast": (lambda x, y: (x - y) * x, [(3, 4, 5), (4, 1)]),
           "unary": (lambda x, y: x.tanh() * y.sigmoid(), [(6, 7), (6, 7)]),
           "matmul": (lambda x, y: x @ y, [(5, 6), (6, 3)]),
           "reduce": (lambda x, y: (x * y).sum(1, keepdims=True) * y, [(4, 6), (4, 6)])}
    fn, shapes = fns[case]
    arrays = [_halves(rng, s, 1.0) for s in shapes]
    stores = [storage(a, "sliced" if k == 0 and len(s) == 2 else "contig", rng) for k, (a, s) in enumerate(zip(arrays, shapes))]
    leaves = [jt.array(s) for s in stores]
    xs = [view(leaf, "sliced" if k == 0 and len(s) == 2 else "contig", s) for k, (leaf, s) in enumerate(zip(leaves, shapes))]
    out = fn(*xs)
    assert out.dtype == "float16"
    w = rng.uniform(0.5, 1.5, out.shape).astype(np.float16)
    grads = jt.grad((out * jt.array(w)).sum(), xs)
    t_out, t_grads = _torch_half_grads(fn, arrays, w)
    np.testing.assert_allclose(out.numpy().astype(np.float64), t_out.astype(np.float64), **HALF_TOL)
    for g, tg, x in zip(grads, t_grads, xs):
        assert g.dtype == "float16" and g.shape == x.shape
        np.testing.assert_allclose(g.numpy().astype(np.float64), tg.astype(np.float64), rtol=4e-3, atol=4e-3)
    leaf_grads = jt.grad((out * jt.array(w)).sum(), leaves)
    assert all(g.dtype == "float16" for g in leaf_grads)


@pytest.mark.parametrize("case", ["conv2d", "conv_transpose2d", "depthwise"])
def test_convolutions_on_wide_maps_run_and_differentiate_in_float16(rng, case):
    """col2im's kernel has no half path: on rows of 7 and more (where conv2d's input gradient and
    conv_transpose2d's output take it in float32) half takes the gathers. Against PyTorch's
    float32 convolution of the same half values."""
    F = torch.nn.functional
    fns = {"conv2d": (lambda x, w: F.conv2d(x, w, padding=1), (6, 4, 3, 3)),
           "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1), (4, 3, 3, 3)),
           "depthwise": (lambda x, w: F.conv2d(x, w, padding=1, groups=4), (4, 1, 3, 3))}
    fn, w_shape = fns[case]
    arrays = [_halves(rng, (2, 4, 9, 9), 1.0), _halves(rng, w_shape, 0.5)]
    ours = {"conv2d": lambda x, w: jt.nn.conv2d(x, w, padding=1),
            "conv_transpose2d": lambda x, w: jt.nn.conv_transpose2d(x, w, stride=2, padding=1),
            "depthwise": lambda x, w: jt.nn.conv2d(x, w, padding=1, groups=4)}[case]
    xs = [jt.array(a) for a in arrays]
    out = ours(*xs)
    assert out.dtype == "float16"
    w = rng.uniform(0.5, 1.5, out.shape).astype(np.float16)
    grads = jt.grad((out.float32() * jt.array(w.astype(np.float32))).sum(), xs)
    t_out, t_grads = _torch_half_grads(fn, [a.astype(np.float32) for a in arrays], w.astype(np.float32))
    np.testing.assert_allclose(out.numpy().astype(np.float64), t_out, rtol=1e-2, atol=1e-2)
    for g, tg in zip(grads, t_grads):
        assert g.dtype == "float16"
        np.testing.assert_allclose(g.numpy().astype(np.float64), tg, rtol=1e-2, atol=2e-2)


def test_cast_gradient_returns_to_half(rng):
    a = _halves(rng, (8,))
    x = jt.array(a)
    g = jt.grad((x.float32() * 3.0).sum(), x)
    assert g.dtype == "float16"
    np.testing.assert_array_equal(g.numpy(), np.full(8, 3, np.float16))


# --- Jittor's rules and amp_reg ------------------------------------------------------------------
def test_white_list_ops_compute_in_float32_unless_kept(rng):
    a = _halves(rng, (9,), 1.0)
    x = jt.array(a)
    assert x.exp().dtype == "float32" and (x ** 2).dtype == "float32"
    np.testing.assert_allclose(x.exp().numpy(), np.exp(a.astype(np.float32)), rtol=1e-6)
    with jt.flag_scope(amp_reg=8):
        e, p = x.exp(), x ** 2
    assert e.dtype == p.dtype == "float16"
    _bits_equal(p.numpy(), a * a)
    np.testing.assert_allclose(e.numpy().astype(np.float64), np.exp(a.astype(np.float64)), rtol=1e-3)


def test_amp_prefer_bits_cast_float_results_but_not_with_scalars():
    x32 = jt.array(np.array([1.5, 2.25], np.float32))
    with jt.flag_scope(amp_reg=2):
        assert (x32 * x32).dtype == "float16"           # Vars only: the preferred dtype
        assert (x32 * 2.0).dtype == "float32"           # a Python scalar took part: by size
        assert x32.sqrt().dtype == "float16"
        assert x32.abs().dtype == "float32"             # not a float op in Jittor's sense
        assert x32.exp().dtype == "float32"             # white list, not kept
        assert (jt.array([1, 2]) + jt.array([3, 4])).dtype == "int64"     # integers: untouched
        np.testing.assert_array_equal((x32 * x32).numpy(), np.array([2.25, 5.0625], np.float16))
    with jt.flag_scope(amp_reg=1):
        h = jt.array(np.array([1.0, 2.0], np.float16))
        assert (h + h).dtype == "float32"


def test_amp_array_bit_converts_arrays_and_random_draws():
    with jt.flag_scope(amp_reg=2 | 16):
        assert jt.array([1.0, 2.0]).dtype == "float16"
        assert jt.array([1.0]).dtype == "float32"        # one element: as Jittor, left alone
        assert jt.array([1, 2]).dtype == "int64"        # (the op tests keep 64 bits: conftest)
        assert jt.random((3,)).dtype == "float16"
        assert jt.array([1.0, 2.0]).float_auto().dtype == "float16"
    with jt.flag_scope(amp_reg=16):                      # no prefer bit: nothing to convert to
        assert jt.array([1.0, 2.0]).dtype == "float32"
    assert jt.array([1, 2]).float_auto().dtype == "float32"


def test_amp_reg_refuses_bit_32_and_non_ints():
    with pytest.raises(ValueError, match="amp_reg must be in 0..31.*bit 32.*got 32"):
        jt.flags.amp_reg = 32
    with pytest.raises(TypeError, match="amp_reg must be an int"):
        jt.flags.amp_reg = 2.0
    assert jt.flags.amp_reg == 0


# --- what has no half path -----------------------------------------------------------------------
@pytest.mark.parametrize("build,op", [
    (lambda x: jt.nn.softmax(x, 1), "softmax_rows"),
    (lambda x: jt.nn.cross_entropy_loss(x, jt.array([0, 1, 2])), "cross_entropy_rows"),
])
def test_library_ops_without_half_kernels_name_op_and_dtype(build, op):
    x = jt.array(np.ones((3, 4), np.float16))
    with pytest.raises(TypeError, match=rf"{op}: float16 inputs are not supported \(input of shape \(3, 4\)\)"):
        build(x).sync()


@pytest.mark.parametrize("make", [lambda: jt.nn.LayerNorm(6), lambda: jt.nn.BatchNorm1d(4),
                                  lambda: jt.nn.GroupNorm(2, 4), lambda: jt.nn.InstanceNorm1d(4, affine=True)])
def test_norm_layers_take_float16_normalising_in_float32(make, rng):
    x = rng.standard_normal((3, 4, 6)).astype(np.float32)
    layer = make()
    want = layer(jt.array(x)).numpy()
    got = layer(jt.array(x.astype(np.float16)))
    assert got.dtype == "float16"
    np.testing.assert_allclose(got.numpy(), want, atol=4e-3)         # float16 input and result roundings
    half = make().float16()
    assert half(jt.array(x.astype(np.float16))).dtype == "float16"
    (g,) = jt.grad(layer(jt.array(x.astype(np.float16))).float32().sum(), [next(iter(layer.parameters()))])
    assert np.all(np.isfinite(g.numpy()))


def test_cuda_kernels_refuse_half_with_a_type_error():
    """Generating the CUDA source of a float16 kernel names the op (no GPU needed to render)."""
    x = jt.array(np.ones((3, 4), np.float16))
    y = (x * 2 + 1).sum(1)
    kernels = [s for s in schedule.plan([y]) if isinstance(s, schedule.Kernel)]
    assert kernels
    with pytest.raises(TypeError, match="float16 is supported on the CPU only"):
        codegen.generate(kernels[0], "cuda")
    f = (jt.array(np.ones((3, 4), np.float32)) * 2).sum(1)       # the same kernel in float32 renders
    kernels = [s for s in schedule.plan([f]) if isinstance(s, schedule.Kernel)]
    assert "float" in codegen.generate(kernels[0], "cuda").source


def test_module_half_converts_parameters_in_place_and_trains(rng):
    model = jt.nn.Sequential(jt.nn.Linear(4, 3), jt.nn.ReLU(), jt.nn.Linear(3, 2))
    weight = model[0].weight
    before = weight.numpy()
    assert model.half() is model
    assert weight is model[0].weight and weight.dtype == "float16"
    assert all(p.dtype == "float16" for p in model.parameters())
    _bits_equal(weight.numpy(), before.astype(np.float16))
    x = _halves(rng, (5, 4), 1.0)
    out = model(jt.array(x))
    assert out.dtype == "float16"
    t = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2)).half()
    with torch.no_grad():
        for tp, p in zip(t.parameters(), model.parameters()):
            tp.copy_(torch.tensor(p.numpy()))
    np.testing.assert_allclose(out.numpy().astype(np.float64), t(torch.tensor(x)).detach().numpy().astype(np.float64),
                               **HALF_TOL)
    jt.optim.SGD(model.parameters(), 0.5).step(out.sum())
    assert all(p.dtype == "float16" for p in model.parameters())
    assert not np.array_equal(weight.numpy(), before.astype(np.float16))
    model.float32()
    assert all(p.dtype == "float32" for p in model.parameters())


def test_safe_clip_narrows_to_the_dtypes_finite_range_as_jittor():
    h = jt.array(np.array([np.inf, -np.inf, 1.5], np.float16))
    _bits_equal(jt.safe_clip(h).numpy(), np.array([65504, -65504, 1.5], np.float16))
    assert bool(jt.safe_clip(h).isfinite().all().item())
    f = jt.array(np.array([np.inf, 2.0], np.float32))
    np.testing.assert_array_equal(f.safe_clip().numpy(), np.array([np.finfo(np.float32).max, 2.0], np.float32))
    np.testing.assert_array_equal(jt.array(np.array([-5, 7], np.int8)).safe_clip(-1e9, 3).numpy(), np.array([-5, 3], np.int8))
    g = jt.grad(jt.safe_clip(h * 1).sum(), h)
    assert g.dtype == "float16"
    np.testing.assert_array_equal(g.numpy(), np.ones(3, np.float16))


def test_mod_gradient_is_jittors_minus_floor_of_the_rounded_quotient(rng):
    """546 / 0.3428 is 1592.8, 1593 in float16: Jittor's rule (and its test) floors the rounded
    quotient; a floor division of the exact values would give 1592."""
    a = np.concatenate([[546.0], np.abs(_halves(rng, (30,))) * 100]).astype(np.float16)
    b = np.concatenate([[0.3428], np.abs(_halves(rng, (30,))) + 0.1]).astype(np.float16)
    x, y = jt.array(a), jt.array(b)
    da, db = jt.grad((x % y).sum(), [x, y])
    assert da.dtype == db.dtype == "float16"
    np.testing.assert_array_equal(da.numpy(), np.ones(31, np.float16))
    _bits_equal(db.numpy(), -np.floor(a / b))
    assert db.numpy()[0] == -1593 and np.floor_divide(a[0], b[0]) == 1592
