"""Jittor's narrow and unsigned integer dtypes (int8, int16, uint8, uint16, uint32, uint64) against
numpy and PyTorch CPU: storage, casts, arithmetic and Jittor's promotion, comparisons, reductions,
indexing, gradients through mixed expressions, uint8 images in ``jt.transform``; and the smaller
Jittor habits fixed with them: a 0-d shape equals ``[1]``, ``OneHotCategorical.log_prob`` reads
the argmax, torch tensors as indices."""
import numpy as np
import pytest
import torch

import jtmini as jt
import jtmini.distributions as jd
from jtmini import transform as T
from conftest import assert_var, make_input

NARROW = ["int8", "int16", "uint8", "uint16", "uint32", "uint64"]
ALL_INTS = NARROW + ["int32", "int64"]


def _ints(rng, dtype, shape, low=0, high=100):
    """Random integers of ``dtype`` in [low, high): small enough that no sum of two wraps."""
    return rng.integers(low, high, shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["bool"] + ALL_INTS + ["float32", "float64"])
def test_every_dtype_is_stored_as_given(rng, dtype):
    data = (rng.random(50) * 100).astype(dtype)
    v = jt.array(data)
    assert str(v.dtype) == dtype and v.numpy().dtype == np.dtype(dtype)
    np.testing.assert_array_equal(v.numpy(), data)
    assert jt.ones([3], dtype).dtype == dtype and jt.ones_like(jt.ones([3], dtype)).dtype == dtype
    assert getattr(jt, dtype)(data).dtype == dtype


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
def test_arithmetic_and_comparisons_match_numpy(rng, dtype, layout):
    a, b = _ints(rng, dtype, (3, 4)), _ints(rng, dtype, (4,), 1)      # b broadcast, never 0
    x, _ = make_input(a, layout)
    y = jt.array(b)
    assert_var(x + y, a + b)
    assert_var(x * y, a * b)                                # int8 and uint8 products wrap as numpy's
    assert_var(x // y, a // b)
    assert_var(x % y, a % b)
    assert_var(x.maximum(y), np.maximum(a, b))
    assert_var(x < y, a < b)
    assert_var(x == y, a == b)
    assert_var(x / y, (a / b).astype("float64" if dtype == "uint64" else "float32"), rtol=1e-6)
    assert_var(x + 3, a + np.array(3, dtype))                           # a weak scalar keeps the dtype
    assert_var(abs(x), np.abs(a))
    assert_var(x << y % 3, a << (b % np.array(3, dtype)))
    assert_var(x >> y, a >> b)
    assert_var(x & y | (x ^ y), a & b | (a ^ b))
    assert_var(~x, ~a)
    assert_var(jt.where(x > 3, x, y), np.where(a > 3, a, b))
    assert_var(x.clamp(2, 50), np.clip(a, 2, 50).astype(dtype))
    assert_var(x.cumsum(1), a.cumsum(1))                    # 64 bits, as numpy
    assert_var(x * 0.5, (a * 0.5).astype("float64" if dtype == "uint64" else "float32"))


def test_unsigned_values_wrap_as_in_numpy(rng):
    a = np.array([250, 3, 0], np.uint8)
    assert_var(jt.array(a) + jt.array(np.array([10, 10, 0], np.uint8)), a + np.uint8(10) * np.array([1, 1, 0], np.uint8))
    assert_var(jt.array(a) - jt.array(np.array([251, 4, 1], np.uint8)), a - np.array([251, 4, 1], np.uint8))
    big = np.array([2**64 - 1, 2**63], np.uint64)
    np.testing.assert_array_equal(jt.array(big).numpy(), big)


@pytest.mark.parametrize("a, b, expected", [
    ("uint8", "int8", "int8"), ("uint8", "int16", "int16"), ("int8", "int16", "int16"),
    ("uint8", "uint16", "uint16"), ("uint32", "int32", "int32"), ("uint64", "int64", "int64"),
    ("uint32", "int64", "int64"), ("bool", "uint8", "uint8"), ("int8", "float32", "float32"),
    ("uint64", "float64", "float64"), ("int16", "int32", "int32"), ("uint8", "uint8", "uint8"),
])
def test_promotion_follows_jittor(rng, a, b, expected):
    """Jittor's binary_dtype_infer: the wider integer, signed when either operand is; floats win.
    (Two unsigned operands stay unsigned, as in numpy and PyTorch.)"""
    x, y = _ints(rng, a, (5,), 0, 2 if a == "bool" else 100), _ints(rng, b, (5,), 0, 2 if b == "bool" else 100)
    out = jt.array(x) + jt.array(y)
    assert out.dtype == expected
    np.testing.assert_array_equal(out.numpy(), x.astype(expected) + y.astype(expected))


@pytest.mark.parametrize("a, b", [("int8", "uint8"), ("uint16", "int16"), ("int32", "uint32"),
                                  ("int8", "uint16"), ("uint64", "int64")])
def test_comparisons_and_division_of_mixed_signs_see_the_values(a, b):
    """int8 and uint8 promote to int8 (Jittor's rule, where 250 wraps), but compared or divided
    the operands keep their values, as in Jittor's kernels and numpy."""
    def values(dtype, top):           # near the unsigned top, where a signed cast wraps
        if dtype[0] == "u":
            big = int(np.iinfo(dtype).max)
            return np.array([big - 5, 7, 0, big, 3] if top else [big - 6, 7, 3, big, 1], dtype)
        return np.array([-5, 7, 0, -1, 3] if top else [-6, 7, 3, -1, 1], dtype)
    x, y = values(a, True), values(b, False)
    for op in ("<", "<=", ">", ">=", "==", "!="):
        got = eval(f"jt.array(x) {op} jt.array(y)").numpy()
        np.testing.assert_array_equal(got, eval(f"x {op} y"), err_msg=f"{a} {op} {b}")
    np.testing.assert_allclose((jt.array(x) / jt.array(y)).numpy(), x / y, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int32", "uint64"])
def test_comparisons_with_an_int_outside_the_dtype_as_numpy(dtype):
    x = np.array([0, 5, np.iinfo(dtype).max], dtype)
    top = [] if dtype == "uint64" else [np.iinfo(dtype).max + 1]     # past int64: float64, inexact
    for number in [-100, -1, 2**40] + top:
        for op in ("<", "==", "!=", ">="):
            got = eval(f"jt.array(x) {op} number").numpy()
            np.testing.assert_array_equal(got, eval(f"x.astype(object) {op} number").astype(bool),
                                          err_msg=f"{dtype} {op} {number}")
        np.testing.assert_array_equal((number < jt.array(x)).numpy(), x.astype(object) > number)


@pytest.mark.parametrize("dtype", NARROW)
def test_casts_match_numpy(rng, dtype):
    floats = rng.uniform(0, 100, (4, 5)).astype(np.float32)          # in every dtype's range
    assert_var(jt.array(floats).cast(dtype), floats.astype(dtype))
    ints = _ints(rng, dtype, (4, 5))
    for target in ["float32", "float64", "int32", "int64", "bool"] + NARROW:
        assert_var(jt.array(ints).cast(target), ints.astype(target))
    assert_var(getattr(jt.array(floats), dtype)(), floats.astype(dtype))


@pytest.mark.parametrize("dtype", NARROW)
def test_reductions_match_numpy(rng, dtype):
    a = _ints(rng, dtype, (6, 7), 0, 120)
    x, _ = make_input(a, "transposed")
    assert_var(x.sum(), np.sum(a))                          # 64 bits, unsigned kept, as numpy
    assert_var(x.sum(1), np.sum(a, 1))
    assert_var(x.max(0), a.max(0))
    assert_var(x.min(), np.array(a.min()))
    assert_var(x.argmax(1)[0], a.argmax(1).astype("int32"))
    t = torch.from_numpy(a.astype(np.int64))
    np.testing.assert_array_equal(x.sum(0).numpy(), t.sum(0).numpy())


@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_integers_index(rng, dtype):
    data = rng.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([5, 0, 2, 2], dtype)
    assert_var(jt.array(data)[jt.array(idx)], data[idx])
    assert_var(jt.index_select(jt.array(data), 0, jt.array(idx)), data[idx])
    assert_var(jt.array(data).gather(0, jt.array(np.array([[1, 2, 0]], dtype))),
               np.take_along_axis(data, np.array([[1, 2, 0]]), 0))


@pytest.mark.parametrize("dtype", NARROW)
def test_scatters_match_numpy(rng, dtype):
    """reindex_reduce (a scatter) with repeated targets, as numpy's ufunc.at."""
    a, idx = _ints(rng, dtype, (5, 3), 1, 9), np.array([2, 0, 2, 1, 2])
    for op, ufunc in (("add", np.add), ("max", np.maximum), ("min", np.minimum), ("mul", np.multiply)):
        start = {"add": 0, "max": np.iinfo(dtype).min, "min": np.iinfo(dtype).max, "mul": 1}[op]
        expected = np.full((3, 3), start, dtype)
        ufunc.at(expected, idx, a)
        got = jt.reindex_reduce(jt.array(a), op, (3, 3), ["@e0(i0)", "i1"], extras=[jt.array(idx)])
        assert_var(got, expected)


def test_gradient_through_mixed_dtypes(rng):
    """A float Var times a uint8 Var is float32; the gradient reaches the float Var only."""
    w = rng.standard_normal((3, 4)).astype(np.float32)
    pixels = rng.integers(0, 256, (2, 3, 4)).astype(np.uint8)
    x = jt.array(w)
    loss = ((x * jt.array(pixels)) / 255.0 + x.sqr()).sum()
    (grad,) = jt.grad(loss, [x])
    tw = torch.tensor(w, requires_grad=True)
    ((tw * torch.from_numpy(pixels)) / 255.0 + tw * tw).sum().backward()
    np.testing.assert_allclose(grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert jt.grad((jt.array(pixels).float32() * x).sum(), [x])[0].dtype == "float32"


def test_python_integers_past_int64_are_uint64():
    assert_var(jt.array([2**64 - 1, 3]), np.array([2**64 - 1, 3], np.uint64))
    assert_var(jt.array([[2**63], [0]], "uint64"), np.array([[2**63], [0]], np.uint64))
    with pytest.raises(OverflowError, match="does not fit int64 .* or, with no negative numbers beside it, uint64"):
        jt.array([2**63, -1])
    with pytest.raises(OverflowError, match="does not fit int64"):
        jt.array([2**63], "int64")


def test_narrow_dtype_errors():
    with pytest.raises(OverflowError, match=r"300 does not fit uint8 \(0..255\)"):
        jt.array([1, 300], "uint8")
    with pytest.raises(OverflowError, match="does not fit int8"):
        jt.array(np.array([200], np.int64), "int8")
    with pytest.raises(OverflowError, match=r"value -1 does not fit uint8"):
        jt.array(np.array([3], np.uint8)) + (-1)
    with pytest.raises(TypeError, match="index must be an integer Var, got float32"):
        jt.index_select(jt.zeros(3), 0, jt.array([1.0]))
    with pytest.raises(TypeError, match="unsupported dtype 'uint128'"):
        jt.zeros(2, "uint128")


@pytest.mark.parametrize("dtype, mode", [("uint8", "L"), ("int16", "I;16"), ("int32", "I"), ("float32", "F")])
def test_one_channel_images_keep_their_mode(rng, dtype, mode):
    """As Jittor's test_transform: a uint8 Var is an 8-bit image ("L"), not a 32-bit one ("I")."""
    pixels = rng.integers(0, 255, (1, 4, 5)).astype(dtype)
    for pic in (jt.array(pixels), pixels.transpose(1, 2, 0), jt.array(pixels[0])):
        img = T.to_pil_image(pic)
        assert img.mode == mode
        np.testing.assert_array_equal(np.asarray(img).astype(dtype), pixels[0])
    assert T.to_tensor(T.to_pil_image(jt.array(pixels))).dtype == np.float32 if dtype == "uint8" else True


def test_uint8_batches_become_float_tensors(rng):
    pixels = rng.integers(0, 256, (4, 5, 3)).astype(np.uint8)
    out = T.ToTensor()(T.to_pil_image(jt.array(pixels)))
    np.testing.assert_allclose(out, pixels.transpose(2, 0, 1) / 255.0, rtol=1e-6)


# --- 0-d shapes, OneHotCategorical, torch indices -------------------------------------------------
def test_zero_dim_shape_equals_jittor_list():
    """Jittor has no 0-d Vars: a vector dot product and a full sum are shaped [1]."""
    c = jt.matmul(jt.random([3]), jt.random([3]))
    assert c.shape == [1] and c.shape == [] and c.shape == () and c.shape != (1,)
    assert jt.zeros(4).sum().shape == [1] and not (jt.zeros(4).sum().shape != [1])
    assert jt.zeros(2).shape != [1] and jt.zeros(1).shape == [1] and jt.zeros(1, 1).shape != [1]
    assert jt.matmul(jt.random([3, 4]), jt.random([4])).shape == [3]


@pytest.mark.parametrize("prob_shape, sample_shape", [((10,), (4,)), ((2, 3), (4,)), ((3, 4, 5, 6), (2,))])
def test_one_hot_categorical_log_prob_matches_torch(rng, prob_shape, sample_shape):
    """log_prob of any vector reads its argmax, as PyTorch's (with validation off, since Jittor's
    test passes integer vectors) and Jittor's."""
    probs = rng.uniform(0.1, 1, prob_shape)
    jc = jd.OneHotCategorical(jt.array(probs))
    tc = torch.distributions.OneHotCategorical(torch.tensor(probs), validate_args=False)
    sample = jc.sample(sample_shape)
    assert tuple(sample.shape) == tuple(tc.sample(sample_shape).shape)
    x = rng.integers(0, prob_shape[-1], tuple(sample.shape))
    np.testing.assert_allclose(jc.log_prob(x).numpy(), tc.log_prob(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jc.log_prob(sample).numpy(), tc.log_prob(torch.from_numpy(sample.numpy())).numpy(),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="one-hot over"):
        jc.log_prob(np.zeros(prob_shape[-1] + 1))


def test_torch_tensors_index(rng):
    """Jittor's test_index_select indexes with torch tensors."""
    data = rng.standard_normal((3, 4)).astype(np.float32)
    x, t = jt.array(data), torch.from_numpy(data)
    for index in (torch.tensor([2, 1]), torch.tensor([0, 0, 2], dtype=torch.uint8)):
        assert_var(jt.index_select(x, 0, index), t.index_select(0, index.long()).numpy())
        assert_var(jt.index_select(x, 1, index), t.index_select(1, index.long()).numpy())
        assert_var(x[index], t[index.long()].numpy())
        assert_var(x[:, index], t[:, index.long()].numpy())


# --- float32 results that Jittor's tests compare with PyTorch's to the last bit -------------------
def test_norm_p1_of_float32_rows_is_correctly_rounded(rng):
    """Jittor's test_norm wants torch's float32 ``norm(1, 1)`` within 1e-6 on values near 800;
    torch adds the 1000 terms one by one in float32 (off by ~20 ulp), jtmini in double (rounded
    once), so the float64 sum is the reference here."""
    data = rng.standard_normal((100, 1000)).astype(np.float32)
    x, t = jt.array(data), torch.from_numpy(data.astype(np.float64))
    for p, dim in [(1, 1), (1, 0), (2, 1), (2, 0)]:
        np.testing.assert_allclose(x.norm(p, dim).numpy(), t.norm(p, dim).numpy().astype(np.float32), rtol=1.2e-7)
    x64 = jt.array(data.astype(np.float64))
    (grad,) = jt.grad(x64.norm(1, 1).sum(), [x64])
    np.testing.assert_array_equal(grad.numpy(), np.sign(data))


def test_cross_entropy_weight_and_ignore_index_in_float32(rng):
    """Jittor's test_cross_entropy_weight_ignore: (3, 4, 2, 2) logits, weight and ignore_index=1.
    The mean agrees with PyTorch's float32 to 1 ulp, and with its float64 value as closely."""
    weight = rng.random(4).astype(np.float32)
    logits = rng.random((3, 4, 2, 2)).astype(np.float32)
    target = np.array([[[0, 1], [2, 3]], [[1, 1], [3, 0]], [[2, 2], [1, 0]]])
    x = jt.array(logits)
    loss = jt.nn.CrossEntropyLoss(weight=jt.array(weight), ignore_index=1)(x, jt.array(target))
    t = torch.tensor(logits.astype(np.float64), requires_grad=True)
    expected = torch.nn.CrossEntropyLoss(weight=torch.from_numpy(weight.astype(np.float64)), ignore_index=1)(
        t, torch.from_numpy(target))
    t32 = torch.nn.CrossEntropyLoss(weight=torch.from_numpy(weight), ignore_index=1)(
        torch.from_numpy(logits), torch.from_numpy(target))
    np.testing.assert_allclose(loss.numpy(), expected.detach().numpy(), rtol=1.2e-7)
    np.testing.assert_allclose(loss.numpy(), t32.numpy(), rtol=2.4e-7)
    expected.backward()
    np.testing.assert_allclose(jt.grad(loss, [x])[0].numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)
