"""Jittor compatibility of the Var itself: writes through ``.data``, cascade setitem
(``a[1][2] = v``), ``reindex`` with index Vars, ``fuse_transpose``, empty reshapes, ``jt.clean``
and attributes of the user's own on a Var."""
import numpy as np
import pytest
import torch

import jtmini as jt


def rand(*shape, dtype="float64"):
    return np.random.rand(*shape).astype(dtype)


# --- writes through .data ----------------------------------------------------------------------
def test_data_setitem_and_inplace_change_the_var():
    a = jt.array(np.array([1, 2, 3], "int32"))
    a.data[1] = -2
    assert a.numpy().tolist() == [1, -2, 3]
    a.data += 1
    assert a.numpy().tolist() == [2, -1, 4]
    d = a.data
    d[0] = 7                      # a kept array writes too, and later writes see earlier ones
    d *= 2
    assert a.numpy().tolist() == [14, -2, 8] and a.dtype == "int32"


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "bool"])
def test_data_write_keeps_dtype_and_shape(dtype):
    x = rand(3, 4, 2).astype(dtype)
    a = jt.array(x, dtype)
    a.data[1, ::2] = x[0, ::2]
    x[1, ::2] = x[0, ::2]
    assert a.dtype == dtype and a.shape == (3, 4, 2)
    np.testing.assert_array_equal(a.numpy(), x)


def test_data_ufunc_out_writes_and_plain_results():
    x = rand(4, 3)
    a = jt.array(x)
    d = a.data
    np.add(d, 1.0, out=d)
    np.testing.assert_allclose(a.numpy(), x + 1)
    total = d + 1                  # arithmetic gives a plain array, off the Var
    assert type(total) is np.ndarray


def test_data_of_0d_var():
    s = jt.array(np.float64(2.5))
    s.data[0] = 4.0
    assert s.item() == 4.0 and s.shape == () and float(s.data) == 4.0


def test_scalar_numpy_is_0d_and_takes_jittors_index_0():
    x = jt.array([4.0, 5.0])
    v = x[1].numpy()
    assert v.shape == () and v[0] == 5.0 and v[-1] == 5.0 and float(v) == 5.0 and v.item() == 5.0
    assert int(jt.array([3, 9]).sum().numpy()[0]) == 12
    with pytest.raises(IndexError):
        v[1]
    np.testing.assert_array_equal(np.stack([v, v]), [5.0, 5.0])
    s = x.sum()
    np.testing.assert_array_equal(np.stack([s.data, s.data]), [[9.0], [9.0]])     # lists of them
    np.testing.assert_array_equal(np.concatenate([s.data, x.data]), [9.0, 4.0, 5.0])


def test_data_write_leaves_sharing_vars_alone():
    x = rand(2, 3)
    a = jt.array(x)
    b = a.detach()                 # shares a's buffer
    c = a.reshape(3, 2).sync()     # a zero-copy view of it
    done = (a * 2).sync()          # computed before the write: keeps the value a had then
    lazy = a * 2                   # computed after the write: sees it, as in Jittor
    a.data[0, 0] = 100.0
    np.testing.assert_array_equal(b.numpy(), x)
    np.testing.assert_array_equal(c.numpy(), x.reshape(3, 2))
    np.testing.assert_allclose(done.numpy(), x * 2)
    x[0, 0] = 100.0
    np.testing.assert_allclose(lazy.numpy(), x * 2)
    assert a.numpy()[0, 0] == 100.0


def test_data_write_non_contiguous_source_and_gradient_after():
    x = rand(4, 6)
    a = jt.array(x).transpose()[::2]          # non-contiguous value
    a = a.sync()
    a.data[1] = 0.5
    expect = x.T[::2].copy()
    expect[1] = 0.5
    np.testing.assert_allclose(a.numpy(), expect)
    w = rand(3, 4)
    g = jt.grad((a * jt.array(w)).sum(), a)   # the written Var is a leaf with the new value
    np.testing.assert_allclose(g.numpy(), w)


def test_data_write_errors():
    a = jt.array(rand(2, 3))
    with pytest.raises(ValueError, match="broadcast"):
        a.data[0] = np.ones(4)
    c = a.data.copy()              # a copy is the user's own array
    c[0, 0] = 5.0
    assert a.numpy()[0, 0] != 5.0
    stale = a.data
    a.assign(jt.zeros(2, 3))       # a holds another value now: the array handed out is stale
    with pytest.raises(ValueError, match="read-only"):
        stale[0, 0] = 1.0
    a.data[0, 0] = 1.0             # read .data again to write
    assert a.numpy()[0].tolist() == [1.0, 0.0, 0.0]


def test_data_is_a_plain_ndarray_sharing_the_vars_memory():
    x = rand(3, 4)
    a = jt.array(x)
    d = a.data
    assert type(d) is np.ndarray and a.data is d         # one array, as long as a holds it
    d[1:][0, 0] = -1.0             # views of it write through, as numpy's (and Jittor's) do
    d.T[2, 0] = -2.0
    x[1, 0], x[0, 2] = -1.0, -2.0
    np.testing.assert_array_equal(a.numpy(), x)


@pytest.mark.parametrize("make", ["leaf", "computed", "non_contiguous", "bool", "int"])
def test_data_is_exactly_ndarray_for_libraries_that_check_the_type(make):
    x = rand(4, 5)
    a = {"leaf": lambda: jt.array(x), "computed": lambda: jt.array(x) * 2 + 1,
         "non_contiguous": lambda: jt.array(x).transpose()[::2],
         "bool": lambda: jt.array(x) > 0.5, "int": lambda: jt.array(x).int32()}[make]()
    d = a.data
    assert type(d) is np.ndarray and d.flags.c_contiguous
    np.testing.assert_array_equal(d, a.numpy())


def test_data_feeds_autograd_as_jittors_linalg_tests_do():
    autograd = pytest.importorskip("autograd")
    x = rand(3, 3) + 3 * np.eye(3)
    a = jt.array(x)
    jac = autograd.jacobian(autograd.numpy.linalg.inv)(a.data)
    at = torch.tensor(x, requires_grad=True)
    torch.linalg.inv(at).sum().backward()
    np.testing.assert_allclose(jac.sum(axis=(0, 1)), at.grad.numpy(), rtol=1e-6)


def test_data_keeps_its_var_alive_and_a_stale_array_is_read_only():
    import weakref
    a = jt.array(rand(3))
    ref, d = weakref.ref(a), a.data
    del a
    assert ref() is not None       # the array holds its Var, as Jittor's does
    del d
    assert ref() is None
    w = jt.array(rand(4, 3))
    d = w.data
    opt = jt.optim.SGD([w], lr=0.1)
    opt.step((w * w).sum())        # the step gives w another value: d is stale
    assert not d.flags.writeable and w.data is not d
    with pytest.raises(ValueError, match="read-only"):
        d[0, 0] = 1.0


def test_views_computed_after_a_data_read_keep_their_value():
    x = rand(3, 4)
    a = jt.array(x)
    d = a.data
    views = [a.reshape(4, 3).sync(), a.detach().sync(), a[1].sync(), a.transpose().sync()]
    d[1, 2] = 50.0
    expect = [x.reshape(4, 3), x, x[1], x.T]
    for v, e in zip(views, expect):
        np.testing.assert_array_equal(v.numpy(), e)


def test_gradient_through_a_var_whose_data_was_read_and_written():
    x, w = rand(4, 3), rand(4, 3)
    xj = jt.array(x)
    y = xj * 3
    z = (y * jt.array(w)).sum()
    y.data                         # a read hands out the buffer and keeps the graph
    g = jt.grad(z, [xj, y])
    np.testing.assert_allclose(g[0].numpy(), 3 * w)
    np.testing.assert_allclose(g[1].numpy(), w)
    y.data[0, 0] = 7.0             # Jittor: a write changes the value, not the graph
    assert y.numpy()[0, 0] == 7.0
    np.testing.assert_allclose(jt.grad((y * y).sum(), xj).numpy()[0], 6 * y.numpy()[0])


def test_data_of_a_basic_index_result_shares_the_sources_memory_where_contiguous():
    x = rand(4, 3, 5)
    a = (jt.array(x) + 1).sync()
    expect = x + 1
    for index in [2, (1, 2), (slice(1, 3),), (None, 1), Ellipsis, (3, Ellipsis)]:
        r = a[index]
        r.data[...] = -7.0
        expect[index] = -7.0
        np.testing.assert_allclose(a.numpy(), expect, err_msg=str(index))
    s = a[1, 2, 4]
    s.data[0] = 5.0                # a 0-d result: its 1-element .data is a view too
    expect[1, 2, 4] = 5.0
    np.testing.assert_allclose(a.numpy(), expect)
    for index in [(slice(None), slice(0, 2)), (Ellipsis, 1), (slice(None, None, 2),)]:
        r = a[index]               # not contiguous in a: a value of its own, as in Jittor
        r.data[...] = 99.0
        assert (r.numpy() == 99.0).all() and not (a.numpy() == 99.0).any(), index


def test_data_view_whose_source_is_rebound_later_turns_read_only():
    x = rand(3, 4)
    a = jt.array(x)
    r = a[1]
    d = r.data                     # a view into a.data
    a.assign(jt.zeros(3, 4))       # a holds another value: r's array is stale
    d2 = r.data                    # r keeps its own value, now in a buffer of its own
    assert not d.flags.writeable and d2.flags.writeable
    d2[0] = 3.0
    expect = x[1].copy()
    expect[0] = 3.0
    np.testing.assert_allclose(r.numpy(), expect)
    assert (a.numpy() == 0).all()


def test_data_view_of_a_source_rebound_since_is_a_copy():
    x = rand(3, 4)
    a = jt.array(x)
    r = a[1]
    a[0] = 0.0                     # a holds another value now: r is no view of it
    r.data[0] = 8.0
    x[0] = 0.0
    np.testing.assert_allclose(a.numpy(), x)
    assert r.numpy()[0] == 8.0


def test_arrays_derived_from_data_are_plain_ndarrays():
    x = rand(3, 4)
    d = jt.array(x).data
    for derived in (d.astype("float32"), d.copy(), d[1:], d.T, d.reshape(4, 3), d.flatten(),
                    d + 1, np.concatenate([d, d]), d.sum(0), d.argmax(1), np.float64(d).copy(),
                    np.transpose(d), np.where(d > 0.5, d, 0)):
        assert type(derived) is np.ndarray, type(derived)
    assert float(jt.array(2.0).data) == 2.0 and jt.array(2.0).data[0] == 2.0


def test_data_setter_and_pickle_as_plain_array():
    import pickle
    a = jt.array([1.0, 2.0])
    a.data = [4.0, 5.0]
    back = pickle.loads(pickle.dumps(a.data))
    assert type(back) is np.ndarray and back.tolist() == [4.0, 5.0]


# --- cascade setitem ---------------------------------------------------------------------------
def test_cascade_setitem_matches_numpy():
    x = rand(3, 4, 5, 2)
    a = jt.array(x)
    a[1][2][0][1] = 7.0
    a[2][3] = 1.5
    a[0][1][2][0] += 1.0
    a[1][-1][::2] = 0.0
    x[1][2][0][1] = 7.0
    x[2][3] = 1.5
    x[0][1][2][0] += 1.0
    x[1][-1][::2] = 0.0
    np.testing.assert_allclose(a.numpy(), x)


def test_setitem_on_int_view_writes_back_other_indexes_do_not():
    x = rand(3, 4)
    a = jt.array(x)
    row = a[1]
    row[2] = 9.0                   # x[k] for an int k: writes back, as Jittor's cascade
    part = a[0:2]
    part[0] = -1.0                 # a slice is a value of its own in Jittor: a unchanged
    fancy = a[[0, 2]]
    fancy[0] = -1.0
    x[1, 2] = 9.0
    np.testing.assert_allclose(a.numpy(), x)
    assert part.numpy()[0].tolist() == [-1.0] * 4


def test_stale_view_does_not_write_back():
    x = rand(3, 4)
    a = jt.array(x)
    row = a[1]
    a[1] = 7.0                     # a holds another value now: row is no view of it
    row[0] = -5.0
    x[1] = 7.0
    np.testing.assert_allclose(a.numpy(), x)
    assert row.numpy()[0] == -5.0


def test_data_write_through_int_view():
    x = rand(4, 3)
    a = jt.array(x)
    r = a[2]
    r.data[1] = 1.0
    x[2, 1] = 1.0
    np.testing.assert_allclose(a.numpy(), x)


def test_cascade_setitem_gradient_matches_torch():
    x, v, w = rand(3, 4, 5), rand(5), rand(3, 4, 5)
    xj, vj = jt.array(x), jt.array(v)
    y = xj * 2
    y[1][2] = vj * 3
    gx, gv = jt.grad((y * jt.array(w)).sum(), [xj, vj])
    xt = torch.tensor(x, requires_grad=True)
    vt = torch.tensor(v, requires_grad=True)
    yt = xt * 2
    yt[1][2] = vt * 3
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy())
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy())
    np.testing.assert_allclose(gv.numpy(), vt.grad.numpy())


# --- reindex with index Vars, fuse_transpose, reshape ------------------------------------------
def test_reindex_var_gathers_with_overflow():
    x = rand(5, 4)
    i = np.array([[0, 4], [5, 1]])
    j = np.array([[1, 3], [0, -1]])
    xj = jt.array(x)
    y = xj.reindex_var([jt.array(i), jt.array(j)], overflow_value=-2.0)
    expect = np.where((i < 5) & (j >= 0), x[np.clip(i, 0, 4), np.clip(j, 0, 3)], -2.0)
    np.testing.assert_allclose(y.numpy(), expect)
    g = jt.grad(y.sum(), xj).numpy()
    want = np.zeros_like(x)
    for a, b in zip(i.ravel(), j.ravel()):
        if a < 5 and b >= 0:
            want[a, b] += 1
    np.testing.assert_allclose(g, want)


def test_fuse_transpose_matches_torch_permute():
    x = rand(3, 4, 5)
    xj = jt.array(x)
    y = xj.fuse_transpose((1, 2, 0))
    np.testing.assert_allclose(y.numpy(), x.transpose(1, 2, 0))
    np.testing.assert_allclose(jt.fuse_transpose(xj[:, ::2], (2, 0, 1)).numpy(), x[:, ::2].transpose(2, 0, 1))
    w = rand(4, 5, 3)
    xt = torch.tensor(x, requires_grad=True)
    (xt.permute(1, 2, 0) * torch.tensor(w)).sum().backward()
    g = jt.grad((y * jt.array(w)).sum(), xj)
    np.testing.assert_allclose(g.numpy(), xt.grad.numpy())
    with pytest.raises(IndexError, match="out of range"):
        xj.fuse_transpose((0, 1, 5))


def test_reshape_empty_with_minus_one():
    a = jt.array(np.zeros(0, "float32"))
    assert a.reshape(0, -1).shape == (0, 0)
    assert a.reshape(0, 1, 2).shape == (0, 1, 2)
    assert jt.zeros(3, 4).reshape(-1, 6).shape == (2, 6)
    with pytest.raises(ValueError, match="cannot reshape"):
        jt.zeros(3, 4).reshape(0, -1)
    with pytest.raises(ValueError, match="cannot reshape"):
        jt.zeros(3, 4).reshape(5, -1)


# --- the Var object ----------------------------------------------------------------------------
def test_user_attributes_and_clean():
    a = jt.array([1, 2, 3])
    a.hahaha = 1
    assert a.hahaha == 1
    with pytest.raises(AttributeError):
        a.not_set_anywhere
    jt.clean()                     # frees what nothing uses; live Vars keep their values
    assert a.numpy().tolist() == [1, 2, 3]


def test_numpy_functions_writing_into_data():
    x = rand(3, 3)
    a = jt.array(x)
    np.copyto(a.data, np.eye(3))
    np.fill_diagonal(a.data, 5.0)
    np.put(a.data, [1], [7.0])
    expect = np.eye(3) * 5
    expect.flat[1] = 7.0
    np.testing.assert_allclose(a.numpy(), expect)
    a.data.fill(2.0)
    assert (a.numpy() == 2.0).all()
    b = jt.array(np.array([3.0, 1.0, 2.0]))
    b.data.sort()
    assert b.numpy().tolist() == [1.0, 2.0, 3.0]
    assert np.sum(a.data) == 18.0 and np.concatenate([a.data, a.data]).shape == (6, 3)
