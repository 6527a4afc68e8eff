"""``x[index]`` and ``x[index] = value`` against numpy: values, gradients, rebinding and errors.

Each index in CASES is run with its arrays as numpy arrays / lists and again as jtmini Vars, on a
contiguous input and on a non-contiguous one (``base.transpose()[1:, ::2]``).
"""
import numpy as np
import pytest

import jtmini as jt

rng = np.random.default_rng(0)
SHAPE = (4, 5, 6)
MASK_4 = np.array([True, False, True, True])
MASK_56 = rng.random((5, 6)) > 0.5

CASES = {
    "int": 1,
    "negative int": -1,
    "ints": (1, 2),
    "negative ints": (-4, -5, -6),
    "full slice": slice(None),
    "time step": np.s_[:, 3],
    "ints and full slices": np.s_[-1, :, 2],
    "int and a full slice": np.s_[2, :],
    "numpy int": np.s_[:, np.int64(3)],
    "slice": np.s_[1:3],
    "reverse": np.s_[::-1],
    "steps and int": np.s_[::2, 1:, -2],
    "clamped stop": np.s_[-10:2],
    "past the end": np.s_[10:],
    "empty slice": np.s_[3:1],
    # an empty window after a new axis: the gradient's and setitem's index maps divide by
    # the window's 0 (compiled in), which raised before dividing as at run time
    "empty after none": np.s_[None, 3:1, :-1],
    "empty after a step": np.s_[::2, 1, 4:4],
    "negative steps": np.s_[:, ::-3, 5:0:-2],
    "none": np.s_[None],
    "ellipsis none": np.s_[..., None],
    "int ellipsis int": np.s_[1, ..., 2],
    "nones between": np.s_[None, 1, None, ::2],
    "ellipsis": np.s_[...],
    "empty tuple": (),
    "list": [0, 3, 3],
    "negative entries": np.s_[[0, -1, -4]],
    "empty list": [],
    "two arrays": ([1, 2], [3, 4]),
    "arrays in place": np.s_[:, [1, 2], [0, 5]],
    "arrays separated": np.s_[[1, 2], :, [0, 5]],
    "arrays broadcast": (np.array([[0], [2]]), [1, 2, 3]),
    "int with array separated": np.s_[1, :, [0, 2]],
    "int with array in place": np.s_[:, 1, [0, 2]],
    "none separates": np.s_[[0, 1], None, [0, 1]],
    "empty ellipsis separates": np.s_[:, [0, 1], ..., [0, 1]],
    "0-d array": np.s_[np.array(2), ::2],
    "2-d array and slices": np.s_[1:3, np.array([[0, 4], [2, 2]]), ::-2],
    "array after none": np.s_[None, [3, 0], ..., None],
    "mask first dim": MASK_4,
    "mask and array": (MASK_4, slice(None), [5, 0, 1]),
    "mask two dims": np.s_[:, MASK_56],
    "full mask": rng.random(SHAPE) > 0.3,
}


def to_jt(index, as_var):
    """The same index with its numpy arrays as Vars (``as_var``), else unchanged."""
    if isinstance(index, tuple):
        return tuple(to_jt(it, as_var) for it in index)
    if as_var and isinstance(index, np.ndarray):
        return jt.array(index)
    return index


def inputs(layout):
    """(numpy value, jtmini Var) of shape SHAPE, contiguous or a strided view of a bigger Var."""
    if layout == "contiguous":
        value = rng.standard_normal(SHAPE).astype(np.float32)
        return value, jt.array(value)
    base = rng.standard_normal((6, 10, 5)).astype(np.float32)
    return base.transpose()[1:, ::2], jt.array(base).transpose()[1:, ::2]


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("as_var", [False, True], ids=["numpy", "var"])
@pytest.mark.parametrize("name", list(CASES))
def test_getitem_matches_numpy(name, as_var, layout):
    ref, x = inputs(layout)
    index = CASES[name]
    out = x[to_jt(index, as_var)]
    expected = ref[index]
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)


def test_getitem_chained_and_lazy():
    ref = rng.standard_normal((6, 7, 8)).astype(np.float32)
    x = jt.array(ref) * 2
    jt.reset_stats()
    y = x[1:][:, [0, 2, -1]][..., ::-3][0, None]
    assert jt.stats()["kernels_run"] == 0 and not x.is_realized()
    np.testing.assert_array_equal(y.numpy(), (ref * 2)[1:][:, [0, 2, -1]][..., ::-3][0, None])


def test_getitem_lazy_index_var_and_int_dtypes():
    ref = rng.standard_normal((5, 3)).astype(np.float32)
    idx = jt.array(np.array([4, 0, 2], dtype=np.int32)) - 1          # lazy until checked
    np.testing.assert_array_equal(jt.array(ref)[idx].numpy(), ref[[3, -1, 1]])
    ints = jt.array(np.arange(15).reshape(5, 3))
    np.testing.assert_array_equal(ints[[1, 1], 2].numpy(), [5, 5])
    np.testing.assert_array_equal(jt.getitem(ints, np.s_[::-1, 1]).numpy(), [13, 10, 7, 4, 1])


def test_getitem_zero_dim():
    x = jt.array(np.float32(3.5))
    assert x[()].shape == () and x[()].item() == 3.5
    np.testing.assert_array_equal(x[None, ...].numpy(), [3.5])


@pytest.mark.parametrize("name", ["int", "time step", "ints and full slices", "negative steps", "int ellipsis int", "list", "negative entries",
                                  "arrays separated", "arrays broadcast", "int with array in place",
                                  "empty ellipsis separates", "2-d array and slices", "mask and array",
                                  "full mask", "none separates", "empty after none", "empty after a step"])
def test_getitem_gradient_is_add_at(name):
    ref, x = inputs("contiguous")
    index = CASES[name]
    w = rng.standard_normal(ref[index].shape).astype(np.float32)
    gx = jt.grad((x[to_jt(index, True)] * jt.array(w)).sum(), x)
    expected = np.zeros_like(ref)
    np.add.at(expected, index, w)
    np.testing.assert_allclose(gx.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_getitem_gradient_duplicates_accumulate_through_a_view():
    base = rng.standard_normal((6, 10, 5)).astype(np.float32)
    b = jt.array(base)
    index = np.s_[[0, 0, 2, 0], 1:, -1]
    y = b.transpose()[1:, ::2][index]
    w = rng.standard_normal(y.shape).astype(np.float32)
    gb = jt.grad((y * jt.array(w)).sum(), b)
    expected = np.zeros((5, 10, 6), np.float32)
    np.add.at(expected[1:, ::2], index, w)
    np.testing.assert_allclose(gb.numpy(), expected.transpose(), rtol=1e-6, atol=1e-6)


SET_CASES = [
    (np.s_[1], 7.0),
    (np.s_[-1, ::2], rng.standard_normal((3, 1))),
    (np.s_[:, ::-2, 4:0:-3], rng.standard_normal((4, 1, 2))),
    (np.s_[..., 2], rng.standard_normal((1, 4, 5))),               # leading 1s drop, as numpy
    (np.s_[None, 2, 1:4], rng.standard_normal((1, 3, 6))),
    (np.s_[[0, 3], 1], rng.standard_normal(6)),
    (np.s_[[2, -1], :, [0, 5]], rng.standard_normal((2, 1))),
    (np.s_[:, [[1], [3]], [0, 2, -1]], -2.5),
    (np.s_[1:3, [4, 0], ::-1], rng.standard_normal((2, 2, 6))),
    (MASK_4, rng.standard_normal((3, 1, 6))),
    (np.s_[:, MASK_56], 0.0),
    ((rng.random(SHAPE) > 0.5), 1.0),
    (np.s_[None, 3:1, :-1], rng.standard_normal((0, 4, 6))),        # nothing written
    (np.s_[2, 4:4], 3.0),
]


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("as_var", [False, True], ids=["numpy", "var"])
@pytest.mark.parametrize("case", range(len(SET_CASES)))
def test_setitem_matches_numpy(case, as_var, layout):
    index, value = SET_CASES[case]
    ref, x = inputs(layout)
    ref = ref.copy()
    ref[index] = value
    x[to_jt(index, as_var)] = jt.array(value) if as_var and isinstance(value, np.ndarray) else value
    np.testing.assert_allclose(x.numpy(), ref, rtol=1e-6)


def test_setitem_casts_value_to_the_dtype():
    ref = np.arange(12, dtype=np.int32).reshape(3, 4)
    x = jt.array(ref)
    x[:, [1, 2]] = jt.array([[2.7], [-1.5], [9.0]])
    ref[:, [1, 2]] = np.array([[2.7], [-1.5], [9.0]])
    assert x.dtype == "int32"
    np.testing.assert_array_equal(x.numpy(), ref)


def test_setitem_rebinds_and_old_consumers_keep_the_old_value():
    a = jt.array(np.arange(6.0).reshape(2, 3))
    b, whole = a + 1, a[...]
    a[0] = 5
    row = a[1]
    a[1, ::2] = a[0, :2] * 10                    # reads the value a had after a[0] = 5
    a[a > 40] = -1
    np.testing.assert_array_equal(b.numpy(), np.arange(6.0).reshape(2, 3) + 1)
    np.testing.assert_array_equal(whole.numpy(), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(row.numpy(), [3, 4, 5])
    np.testing.assert_array_equal(a.numpy(), [[5, 5, 5], [-1, 4, -1]])


def test_setitem_shift_reads_the_old_value():
    ref = np.arange(5.0)
    x = jt.array(ref)
    x[1:] = x[:-1]
    ref[1:] = ref[:-1].copy()
    np.testing.assert_array_equal(x.numpy(), ref)


def test_assign_still_rebinds():
    w = jt.array(np.ones(3, np.float32))
    before = w * 1
    w.assign(w - 0.5)
    w.assign(jt.array(np.zeros(3)) + w)
    np.testing.assert_array_equal(w.numpy(), [0.5] * 3)
    np.testing.assert_array_equal(before.numpy(), [1.0] * 3)
    w.update(w * 2)                       # update: a value with no history (assign keeps it, as Jittor's)
    np.testing.assert_array_equal(w.numpy(), [1.0] * 3)
    assert w.op in (None, "detach")


@pytest.mark.parametrize("index, value_shape", [
    (np.s_[1:, ::-2], (1, 3, 6)),
    (np.s_[2, :, 1], ()),
    (np.s_[[0, 2, 3], 1:3], (3, 1, 6)),
    (np.s_[:, [[0], [4]], [1, 5]], (2, 1)),
    (MASK_4, (6,)),
    (np.s_[None, 3:1, :-1], (0, 4, 6)),
])
def test_setitem_gradients(index, value_shape):
    ref, x = inputs("contiguous")
    v_ref = rng.standard_normal(value_shape).astype(np.float32)
    w = rng.standard_normal(SHAPE).astype(np.float32)
    v = jt.array(v_ref)
    y = x * 1
    y[to_jt(index, True)] = v
    gx, gv = jt.grad((y * jt.array(w)).sum(), [x, v])
    written = np.zeros(SHAPE, bool)
    written[index] = True
    np.testing.assert_allclose(gx.numpy(), np.where(written, 0, w), rtol=1e-6)
    dv = w[index]
    lead = dv.ndim - len(value_shape)
    dv = dv.sum(axis=tuple(range(lead)) + tuple(lead + k for k, n in enumerate(value_shape) if n == 1),
                keepdims=False)
    np.testing.assert_allclose(gv.numpy(), dv.reshape(value_shape), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("index, words", [
    (np.s_[7], ["index 7", "dim 0", "size 4"]),
    (np.s_[:, -6], ["index -6", "dim 1", "size 5"]),
    (np.s_[..., [0, 6, 2]], ["index 6", "dim 2", "size 6"]),
    (np.s_[jt.array([1, -5])], ["index -5", "dim 0", "size 4"]),
    (np.s_[0, 0, 0, 0], ["too many indices", "4", "(4, 5, 6)"]),
    (np.s_[:, 5], ["index 5", "dim 1", "size 5"]),
    (np.s_[-5, :], ["index -5", "dim 0", "size 4"]),
    (np.s_[0, MASK_56, 0], ["too many indices", "4"]),
    (np.s_[:, MASK_4], ["mask of shape (4,)", "(5,)"]),
    (np.s_[[0, 1], [0, 1, 2]], ["(2,)", "(3,)"]),
    (np.s_[..., ...], ["ellipsis"]),
    (np.s_[1.5], ["1.5"]),
    (np.s_[jt.array([0.5])], ["float32", "whole numbers"]),
])
def test_index_errors_name_the_offender(index, words):
    x = jt.array(np.zeros(SHAPE, np.float32))
    for action in (lambda: x[index], lambda: x.__setitem__(index, 0.0)):
        with pytest.raises(IndexError) as err:
            action()
        for word in words:
            assert word in str(err.value)


@pytest.mark.parametrize("index, value_shape", [(np.s_[0], (4, 6)), (np.s_[[0, 1]], (3, 5, 6)),
                                                (np.s_[1:, 2], (2, 3, 6))])
def test_setitem_bad_value_shape(index, value_shape):
    x = jt.array(np.zeros(SHAPE, np.float32))
    with pytest.raises(ValueError) as err:
        x[index] = np.ones(value_shape)
    assert str(value_shape) in str(err.value) and str(np.zeros(SHAPE)[index].shape) in str(err.value)


def test_a_window_of_a_pending_window_is_one_slice_with_the_same_values_and_gradients():
    """x[1:8][1:7:2] (and an RNN gradient's rows, then columns) is one slice node of x: one node
    fewer to build, walk and sign every step, with numpy's values and gradients."""
    data = np.random.default_rng(5).standard_normal((9, 8)).astype("float32")
    x = jt.array(data)
    y = jt.ops.reindex.slice_var(x[1:8, :], (1, 6), (2, -1), (3, 4))      # rows 2, 4, 6; cols 6..3
    assert y.op == "slice" and y.inputs[0] is x
    assert y.attrs["starts"] == (2, 6) and y.attrs["steps"] == (2, -1)
    np.testing.assert_array_equal(y.numpy(), data[1:8][1:7:2, 6:2:-1])
    w = np.random.default_rng(6).standard_normal((3, 4)).astype("float32")
    (g,) = jt.grad((y * jt.array(w)).sum(), [x])
    expected = np.zeros_like(data)
    expected[1:8][1:7:2, 6:2:-1] = w                # numpy's views write through to expected
    np.testing.assert_array_equal(g.numpy(), expected)
    held = x[1:8].stop_grad()                      # a stop_grad window stays its own node
    assert held[::2].inputs[0] is held


def test_the_gradient_of_a_full_reduction_broadcasts_without_a_reshape():
    x = jt.array(np.arange(6, dtype="float32").reshape(2, 3))
    (g,) = jt.grad(x.mean() * 2, [x])
    np.testing.assert_allclose(g.numpy(), np.full((2, 3), 2 / 6, "float32"))
    nodes, stack = [], [g]
    while stack:
        v = stack.pop()
        nodes.append(v.op)
        stack.extend(i for i in v.inputs if i._data is None)
    assert "broadcast_to" in nodes and "reshape" not in nodes
    (g,) = jt.grad(x.sum(dims=1).sum(), [x])          # a trailing dim still reshapes, to (2, 1)
    np.testing.assert_array_equal(g.numpy(), np.ones((2, 3), "float32"))
