"""Slice starts, pad widths and setitem's write position are kernel arguments (``OpSpec.runtime_ints``),
not compiled in: windows at many offsets build a few kernels, with numpy's values, also when a
stored plan (``replay.py``) replays them at new offsets; an RNN at a new sequence length builds
far fewer kernels than at its first."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import codegen, schedule
from jtmini.nn.rnn import GRU, LSTM
from jtmini.ops.reindex import slice_var, unslice_var

OFFSETS = 40


def _builds():
    """Kernels compiled or found on disk since the last reset_stats (new sources met)."""
    stats = jt.stats()
    return stats["kernels_compiled"] + stats["cache_hits"]


def _fresh():
    """Forget the in-memory kernels and plans, so each source met counts as a build."""
    jt.clear_caches()
    jt.reset_stats()


def _window(start, width):
    return slice(start, start + width)


@pytest.mark.parametrize("step", [1, 2, -1, -3])
def test_1d_slices_at_many_starts_build_one_forward_and_one_gradient_kernel(step, rng):
    x_np = rng.standard_normal(200)
    n = 7
    _fresh()
    for start in range(OFFSETS):
        first = start if step > 0 else 199 - start
        x = jt.array(x_np)
        y = slice_var(x, [first], [step], [n])
        ref = x_np[first::step][:n]
        np.testing.assert_array_equal(y.numpy(), ref)
        grad = jt.grad((y * y).sum(), x).numpy()
        expected = np.zeros_like(x_np)
        expected[np.arange(first, first + step * n, step)] = 2 * ref
        np.testing.assert_allclose(grad, expected, rtol=1e-12)
    assert _builds() <= 4          # the copy, the gradient's square-and-place, and slack for one more


def test_3d_slices_fused_with_elementwise_ops_at_many_starts(rng):
    x_np, b_np = rng.standard_normal((9, 50, 6)), rng.standard_normal((3, 4, 3))
    _fresh()
    for start in range(OFFSETS):
        x, b = jt.array(x_np), jt.array(b_np)
        k = start % 6
        window = x[k:k + 3, start:start + 8:2, ::-2]
        y = jt.exp(window) * b + 1
        ref = np.exp(x_np[k:k + 3, start:start + 8:2, ::-2]) * b_np + 1
        np.testing.assert_allclose(y.numpy(), ref, rtol=1e-10, atol=1e-12)
        dx = jt.grad((y * y).sum(), x).numpy()
        expected = np.zeros_like(x_np)
        expected[k:k + 3, start:start + 8:2, ::-2] = 2 * ref * np.exp(x_np[k:k + 3, start:start + 8:2, ::-2]) * b_np
        np.testing.assert_allclose(dx, expected, rtol=1e-10, atol=1e-12)
    assert _builds() <= 8


def test_int_indices_slices_split_and_chunk_share_kernels(rng):
    x_np = rng.standard_normal((OFFSETS, 5, 6)).astype("float32")
    _fresh()
    x = jt.array(x_np)
    for k in range(OFFSETS):
        np.testing.assert_array_equal((x[k] * 2).numpy(), x_np[k] * 2)
        np.testing.assert_array_equal(x[k:k + 1, 1:].numpy(), x_np[k:k + 1, 1:])
    first = _builds()
    assert first <= 4
    parts = x.split(4, dim=0)          # ten pieces at ten offsets
    for got, want in zip(list(parts) + list(x.chunk(8, dim=0)), np.split(x_np, 10) + np.split(x_np, 8)):
        np.testing.assert_array_equal((got + 1).numpy(), want + 1)
    assert _builds() - first <= 4


def test_setitem_at_many_positions_builds_few_kernels(rng):
    base = rng.standard_normal((6, 60))
    _fresh()
    for start in range(OFFSETS):
        for index in ((start % 6, _window(start, 5)), (slice(None), _window(start, 20))):
            x = jt.array(base)
            x[index] = 3.5
            expected = base.copy()
            expected[index] = 3.5
            np.testing.assert_array_equal(x.numpy(), expected)
        x = jt.array(base)                           # a strided write, running backwards
        x[1:6:2, start + 19:start - 1 if start else None:-4] = jt.array(np.arange(15.0).reshape(3, 5))
        expected = base.copy()
        expected[1:6:2, start + 19:start - 1 if start else None:-4] = np.arange(15.0).reshape(3, 5)
        np.testing.assert_array_equal(x.numpy(), expected)
    assert _builds() <= 8


def test_setitem_value_gradient_at_many_positions(rng):
    base, value_np = rng.standard_normal((5, 50)), rng.standard_normal((2, 6))
    _fresh()
    for start in range(0, OFFSETS, 3):
        x, value = jt.array(base), jt.array(value_np)
        x[1:5:2, start:start + 6] = value
        loss = (x * x).sum()
        dvalue, dx = (g.numpy() for g in jt.grad(loss, [value, jt.array(base)]))
        np.testing.assert_allclose(dvalue, 2 * value_np, rtol=1e-12)
    assert _builds() <= 6


def test_concat_places_each_part_with_one_kernel(rng):
    parts_np = [rng.standard_normal((3, n)) for n in (4, 4, 4, 4)]
    _fresh()
    for k in range(OFFSETS // 4):
        parts = [jt.array(p) * (k + 1) for p in parts_np]
        np.testing.assert_allclose(jt.concat(parts, 1).numpy(), np.concatenate(parts_np, 1) * (k + 1))
        pieces = jt.concat(parts, 1).split(4, dim=1)
        for got, want in zip(pieces, parts_np):
            np.testing.assert_allclose(got.numpy(), want * (k + 1))
    assert _builds() <= 6


def test_replayed_plan_reads_new_starts():
    """The graphs after the first differ only in starts: they run on the first one's plans (a
    fused slice and reduce, a write into a window), each at its new starts. A lone slice is planned
    afresh (cheaper than a signature) but reuses its copy kernel."""
    x_np = np.arange(400.0).reshape(20, 20)
    _fresh()
    for start in range(10):
        x = jt.array(x_np)
        y = (x[start:start + 5, 19 - start:9 - start:-3] * 2).sum(dims=1) + x[start, 1:8].sum()
        np.testing.assert_allclose(y.numpy(), (x_np[start:start + 5, 19 - start:9 - start:-3] * 2).sum(1)
                                   + x_np[start, 1:8].sum())
        np.testing.assert_array_equal(x[start:start + 5, start:start + 10:2].numpy(),
                                      x_np[start:start + 5, start:start + 10:2])
        x[start + 1, start:start + 3] = -1.0
        expected = x_np.copy()
        expected[start + 1, start:start + 3] = -1.0
        np.testing.assert_array_equal(x.numpy(), expected)
    assert jt.stats()["plans_reused"] >= 2 * 9
    assert _builds() <= 6


def test_unslice_places_a_window_and_its_gradient_is_the_slice(rng):
    d_np = rng.standard_normal((2, 3))
    d = jt.array(d_np)
    y = unslice_var(d, [4, 1], [-3, 2], [6, 7])
    expected = np.zeros((6, 7))
    expected[4::-3, 1::2][:, :3] = d_np
    np.testing.assert_array_equal(y.numpy(), expected)
    w = rng.standard_normal((6, 7))
    np.testing.assert_allclose(jt.grad((y * jt.array(w)).sum(), d).numpy(), w[4::-3, 1:7:2])


def test_a_window_outside_its_tensor_is_an_error():
    x = jt.zeros((4, 5))
    with pytest.raises(ValueError, match=r"does not lie inside shape \(4, 5\)"):
        slice_var(x, [2, 0], [1, 1], [3, 5])
    with pytest.raises(ValueError, match=r"does not lie inside shape \(4, 5\)"):
        slice_var(x, [0, 3], [1, -2], [4, 3])
    with pytest.raises(ValueError, match="one start, step and size per dim"):
        unslice_var(x, [0], [1], [4, 5])


def test_a_runtime_start_keeps_the_bounds_proof():
    """The start's range follows from the dims: the fused read needs no bounds check or clamp,
    and a start that the dims fix (a full-width window) is compiled in."""
    x = jt.array(np.ones((8, 9), "float32"))
    y = jt.exp(x[2:6, ::-1])
    (kernel,) = [s for s in schedule.plan([y]) if isinstance(s, schedule.Kernel)]
    source = codegen.generate(kernel).source.split("jt_kernel(")[1]
    assert "jt_clamp" not in source and ">= 0 &&" not in source
    assert "(t0_a0 + i0)" in source and "((i1 * (-1)) + 8)" in source


def test_a_window_inside_a_shifted_read_is_still_checked():
    """A pad's width is a runtime integer too: the read around it stays checked."""
    x_np = np.arange(12.0).reshape(3, 4)
    for before in range(3):
        y = jt.array(x_np).pad((before, 2 - before)) * 2
        np.testing.assert_array_equal(y.numpy(), np.pad(x_np, ((0, 0), (before, 2 - before))) * 2)


@pytest.mark.parametrize("cls", [GRU, LSTM])
def test_rnn_at_a_new_sequence_length_builds_few_kernels(cls, rng):
    net = cls(4, 8, num_layers=2)

    def step(length):
        x = jt.array(rng.standard_normal((length, 2, 4)).astype("float32"))
        y, _ = net(x)
        for g in jt.grad((y * y).sum(), net.parameters()):
            g.sync()

    _fresh()
    step(5)
    first = _builds()
    jt.reset_stats()
    step(7)
    assert _builds() <= max(12, first // 4), (first, _builds())


def test_without_shape_specialisation_offsets_are_arguments_too(rng):
    """Dims and starts both from ``ip``: one kernel for windows of one rank at any place."""
    x_np = rng.standard_normal((12, 30))
    with jt.flag_scope(specialize_shapes=False):
        _fresh()
        for start in range(0, 20, 2):
            x = jt.array(x_np)
            y = x[start % 5:start % 5 + 4, start:start + 9:3] * 2 - 1
            np.testing.assert_allclose(y.numpy(), x_np[start % 5:start % 5 + 4, start:start + 9:3] * 2 - 1)
            placed = jt.array(x_np)
            placed[2, start:start + 5] = 0.0
            expected = x_np.copy()
            expected[2, start:start + 5] = 0.0
            np.testing.assert_array_equal(placed.numpy(), expected)
        assert _builds() <= 4
