"""A 0-d Var (a full reduction, ``v[i]`` of a 1-D Var) indexed and sorted as Jittor's shape [1].

Jittor has no 0-d Vars: where jtmini gives shape (), Jittor gives [1], and its programs index
that (``loss[0]``, ``scores[keep]``, ``jt.argsort(-s)[0][:n]``). Values and gradients against
numpy on the (1,)-shaped array; ``()``, ``...`` and ``None`` keep numpy's 0-d reading.
"""
import numpy as np
import pytest

import jtmini as jt

VALUES = np.array([3.0, -1.0, 2.0], np.float32)
ONE = VALUES[:1]                     # what x[0] is in Jittor: shape [1]


def scalar():
    """(x, x[0]): a 1-D Var and its 0-d element."""
    x = jt.array(VALUES)
    return x, x[0]


@pytest.mark.parametrize("index, shape", [
    (0, ()), (-1, ()), (np.int64(0), ()),
    (slice(None), (1,)), (slice(None, 1), (1,)), (slice(1, None), (0,)), (slice(None, None, -1), (1,)),
    ((None, 0), (1,)), ((Ellipsis, 0), ()), ((0, Ellipsis), ()), ((0, None), (1,)),
    ([0, -1, 0], (3,)), (np.array(0), ()),
    (np.array(True), (1,)), (np.array(False), (0,)), (np.array([True]), (1,)), (np.array([False]), (0,)),
])
def test_index_reads_a_0d_var_as_shape_1(index, shape):
    x, s = scalar()
    assert s.shape == ()
    out = s[index]
    if isinstance(index, np.ndarray) and index.dtype == bool:
        index = index.reshape(1)                  # a 0-d mask is Jittor's [1] mask, not numpy's new dim
    np.testing.assert_array_equal(out.numpy(), ONE[index])
    assert tuple(out.shape) == shape == ONE[index].shape
    w = np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape)
    g = jt.grad((out * jt.array(w)).sum(), x).numpy()
    expected = np.zeros(3, np.float32)
    np.add.at(expected[:1], index, w)             # numpy's gradient of ONE[index]
    np.testing.assert_allclose(g, expected)


@pytest.mark.parametrize("index", [(), Ellipsis, None, (None, Ellipsis)])
def test_numpy_0d_indices_keep_numpys_shapes(index):
    _, s = scalar()
    np.testing.assert_array_equal(s[index].numpy(), np.float32(3.0)[index])
    assert tuple(s[index].shape) == np.float32(3.0)[index].shape


def test_a_0d_bool_var_mask():
    x, s = scalar()
    kept, dropped = s[s > 0], s[s < 0]
    assert tuple(kept.shape) == (1,) and tuple(dropped.shape) == (0,)
    np.testing.assert_array_equal(kept.numpy(), [3.0])
    np.testing.assert_allclose(jt.grad(kept.sum() * 2, x).numpy(), [2.0, 0.0, 0.0])
    one = x[:1]                                    # a [1] Var with a 0-d mask: Jittor's [1] mask
    np.testing.assert_array_equal(one[s > 0].numpy(), [3.0])
    with pytest.raises(IndexError, match=r"\(1,\)"):
        x[s > 0]                                   # a [1] mask on a dim of 3


def test_full_reduction_loss_idiom():
    x = jt.array(VALUES)
    loss = (x * x).sum()
    assert loss[0].shape == () and loss[0].item() == pytest.approx(14.0)
    np.testing.assert_allclose(jt.grad(loss[0], x).numpy(), 2 * VALUES)
    np.testing.assert_allclose(jt.grad(loss[:1].sum(), x).numpy(), 2 * VALUES)


@pytest.mark.parametrize("index", [1, -2, 5, (0, 0)])
def test_out_of_range_names_the_index_and_shape_1(index):
    _, s = scalar()
    with pytest.raises(IndexError) as err:
        s[index]
    text = str(err.value)
    assert "(1,)" in text and "0-d" in text
    if isinstance(index, int):
        assert f"index {index}" in text
    with pytest.raises(IndexError):
        s[index] = 1.0


def test_setitem_on_a_0d_var():
    x, s = scalar()
    v = jt.array(np.float32(5.0))
    s[0] = v
    assert s.shape == () and s.item() == 5.0
    np.testing.assert_array_equal(x.numpy(), [5.0, -1.0, 2.0])     # Jittor's cascade: x[0][0] = v
    gx, gv = jt.grad(s * 3, [x, v])
    np.testing.assert_allclose(gx.numpy(), [0.0, 0.0, 0.0])
    assert gv.item() == 3.0

    x, s = scalar()
    s[:] = 4.0
    s[s < 0] = 9.0                                  # mask false: nothing written
    assert s.shape == () and s.item() == 4.0
    s[s > 0] = jt.array([7.0])
    assert s.item() == 7.0
    x, s = scalar()
    added = s.setitem(0, jt.array(2.0), "add")
    assert added.shape == () and added.item() == 5.0
    np.testing.assert_allclose(jt.grad(added * 2, x).numpy(), [2.0, 0.0, 0.0])


@pytest.mark.parametrize("descending", [False, True])
def test_sort_argsort_topk_of_a_0d_var_give_shape_1(descending):
    x, s = scalar()
    index, values = jt.argsort(-s, descending=descending)
    assert tuple(index.shape) == (1,) and tuple(values.shape) == (1,)
    np.testing.assert_array_equal(index.numpy(), [0])
    np.testing.assert_array_equal(values.numpy(), [-3.0])
    np.testing.assert_allclose(jt.grad(values.sum() * 4, x).numpy(), [-4.0, 0.0, 0.0])
    np.testing.assert_array_equal(index[:5].numpy(), [0])          # RT-DETR: argsort(-m)[0][:n]
    values, index = s.sort(descending=descending)
    assert tuple(values.shape) == (1,) and index.dtype == "int32" and index.numpy().tolist() == [0]
    values, index = s.topk(1, largest=not descending)
    assert tuple(values.shape) == (1,) and values.numpy().tolist() == [3.0]
    np.testing.assert_allclose(jt.grad(values.sum(), x).numpy(), [1.0, 0.0, 0.0])
    assert tuple(s.topk(0)[0].shape) == (0,)
