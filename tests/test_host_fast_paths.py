"""The front end's short paths for a layer's common calls (2-D ``matmul``, a matrix's
``transpose``, ``x + bias`` of one dtype, ``sum_to`` of an unbroadcast gradient) build the same
nodes, values and gradients as the general paths, and still reject what those reject."""
import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini.ops import matmul as matmul_module
from conftest import check_grad, graph_nodes

LAYOUTS = ["contig", "transposed", "sliced", "getitem"]


@pytest.mark.parametrize("layout_x", LAYOUTS)
@pytest.mark.parametrize("layout_y", ["contig", "transposed", "sliced"])
def test_2d_matmul_values_and_gradients(rng, layout_x, layout_y):
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    check_grad(lambda x, y: x @ y, lambda x, y: x @ y, [a, b], [layout_x, layout_y], rng=rng)


def test_2d_matmul_is_one_node_as_before(rng):
    x, w = jt.array(rng.standard_normal((4, 3)).astype("float32")), jt.array(rng.standard_normal((2, 3)).astype("float32"))
    out = x @ w.transpose(1, 0)
    assert [v.op for v in graph_nodes(out) if v.op] == ["matmul", "transpose"]
    assert out.shape == (4, 2)
    np.testing.assert_allclose(out.numpy(), x.numpy() @ w.numpy().T, rtol=1e-6)


def test_2d_matmul_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4, 5\) do not line up \(3 != 4\)"):
        jt.ones((2, 3)) @ jt.ones((4, 5))
    with pytest.raises(ValueError, match="do not line up"):
        matmul_module._matmul_infer([jt.ones((2, 3)), jt.ones((4, 5))], {})


def test_2d_matmul_of_two_dtypes_promotes_as_before():
    out = jt.ones((2, 3), dtype="float32") @ jt.ones((3, 2), dtype="float64")
    assert out.dtype == "float64" and out.shape == (2, 2)
    np.testing.assert_array_equal(out.numpy(), np.full((2, 2), 3.0))


@pytest.mark.parametrize("dims", [(0, 1), (1, 0), (-1, -2), (-2, -1), (0, -1), (-1, 0), (1, -2), (-2, 1)])
def test_matrix_transpose_by_every_spelling(rng, dims):
    value = rng.standard_normal((3, 5)).astype("float32")
    out = jt.array(value).transpose(*dims)
    np.testing.assert_array_equal(out.numpy(), value.T)
    assert out.op == "transpose" and out.attrs["perm"] == (1, 0)
    assert jt.array(value).transpose(*dims).transpose(*dims).numpy().tolist() == value.tolist()


def test_matrix_transpose_still_checks_its_dims():
    x = jt.ones((2, 3))
    with pytest.raises(TypeError, match="a dim must be an int"):
        x.transpose(0.0, 1.0)
    with pytest.raises(IndexError, match="out of range"):
        x.transpose(0, 2)
    assert x.transpose(1, 1) is x


def test_transpose_of_a_pending_transpose_composes_on_the_short_path(rng):
    w = jt.array(rng.standard_normal((3, 4)).astype("float32"))
    assert w.transpose(1, 0).transpose(-1, -2) is w


@pytest.mark.parametrize("shapes", [((4, 3), (3,)), ((3,), (4, 3)), ((4, 1), (1, 3)), ((2, 4, 3), (4, 1))])
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
def test_add_of_two_broadcast_vars(rng, shapes, layout):
    a, b = (rng.standard_normal(s) for s in shapes)
    check_grad(lambda x, y: x + y, lambda x, y: x + y, [a, b], [layout, "contig"], rng=rng)
    check_grad(lambda x, y: x * y, lambda x, y: x * y, [a, b], ["contig", layout], rng=rng)


def test_add_of_two_vars_that_cannot_broadcast():
    with pytest.raises(ValueError, match=r"shapes \(4, 3\) and \(4,\) cannot be broadcast"):
        jt.ones((4, 3)) + jt.ones(4)


@pytest.mark.parametrize("shape, target", [((4, 3), (4, 3)), ((4, 3), (1, 3)), ((2, 4, 3), (4, 3)), ((4, 3), (3,))])
def test_sum_to(rng, shape, target):
    value = rng.standard_normal(shape).astype("float32")
    x = jt.array(value)
    out = matmul_module.sum_to(x, target)
    assert out.shape == target
    want = torch.from_numpy(value).sum_to_size(target).numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    if tuple(shape) == tuple(target):
        assert out is x


def test_vars_of_one_shape_share_one_shape_object():
    a, b = jt.ones((2, 3)), jt.zeros([2, 3])
    assert a.shape is b.shape is (a * b).shape
    c = jt.array(np.ones((2, np.int64(3)), "float32"))
    assert c.shape is a.shape and all(type(n) is int for n in c.shape)
    assert a.shape == [2, 3] and a.shape == (2, 3) and jt.ones(()).shape == [1]


def test_shared_shapes_are_bounded():
    import sys
    var_module = sys.modules["jtmini.var"]       # jt.var is also a function
    for n in range(var_module._SHAPES_MAX + 10):
        var_module._shape_of((n, 7))
    assert len(var_module._shapes) <= var_module._SHAPES_MAX
    assert var_module._shape_of((3, 7)) == (3, 7)


def test_sum_to_a_list_shape(rng):
    x = jt.array(rng.standard_normal((4, 3)).astype("float32"))
    assert matmul_module.sum_to(x, [4, 3]) is x
    np.testing.assert_allclose(matmul_module.sum_to(x, [1, 3]).numpy(), x.numpy().sum(0, keepdims=True), rtol=1e-6)


# --- nn.linear of a matrix: the nodes of x @ weight.T + bias, made directly -----------------------
def _same_graph(a, b):
    """Whether two lazy results were built as the same graph (op, attrs, shape, dtype, wiring)."""
    from jtmini import replay
    from jtmini.runtime import base
    runtime = base.get("cpu")
    return replay._signature([a], runtime)[0] == replay._signature([b], runtime)[0]


@pytest.mark.parametrize("case", ["bias", "no bias", "one output", "one row", "bias float64",
                                  "x float64", "bias 2-D", "bias pending const", "weight pending transpose"])
def test_linear_builds_the_general_paths_nodes(rng, case):
    from jtmini import nn
    rows, cols, outs = (1 if case == "one row" else 6), 4, (1 if case == "one output" else 3)
    x = jt.array(rng.standard_normal((rows, cols)).astype("float64" if case == "x float64" else "float32"))
    w = jt.array(rng.standard_normal((outs, cols)).astype("float32"))
    if case == "weight pending transpose":
        w = jt.array(rng.standard_normal((cols, outs)).astype("float32")).transpose(1, 0)
    b = {"no bias": None, "bias float64": jt.array(rng.standard_normal(outs)),
         "bias 2-D": jt.array(rng.standard_normal((1, outs)).astype("float32")),
         "bias pending const": jt.zeros(outs)}.get(case, jt.array(rng.standard_normal(outs).astype("float32")))
    fast = nn.linear(x, w, b)
    general = x @ w.transpose(1, 0)
    general = general + b if b is not None else general
    assert _same_graph(fast, general)
    expected = x.numpy() @ w.numpy().T + (0 if b is None else b.numpy())
    np.testing.assert_allclose(fast.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert fast.dtype == general.dtype and fast.shape == general.shape


@pytest.mark.parametrize("layout_x", ["contig", "transposed", "sliced"])
@pytest.mark.parametrize("layout_w", ["contig", "transposed", "sliced"])
def test_linear_values_and_gradients(rng, layout_x, layout_w):
    from jtmini import nn
    x, w, b = rng.standard_normal((5, 7)), rng.standard_normal((3, 7)), rng.standard_normal(3)
    check_grad(nn.linear, torch.nn.functional.linear, [x, w, b], [layout_x, layout_w, "contig"], rng=rng)
    check_grad(nn.linear, torch.nn.functional.linear, [x, w], [layout_x, layout_w], rng=rng)


def test_linear_errors_name_the_shapes():
    from jtmini import nn
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4, 5\) do not line up \(3 != 4\)"):
        nn.linear(jt.ones((2, 3)), jt.ones((5, 4)))
    with pytest.raises(ValueError, match=r"shapes \(2, 5\) and \(4,\) cannot be broadcast"):
        nn.linear(jt.ones((2, 3)), jt.ones((5, 3)), jt.ones(4))


# --- Var._rebind of a computed handle that no live node reads: no copy of the old node ----------
def test_rebind_without_readers_takes_the_value_in_place():
    x = jt.array(np.arange(3, dtype="float32"))
    version = x._version
    assert x._rebind(None, np.full(3, 7, "float32")) is None
    assert x.is_realized() and x.op is None and x._version == version + 1
    np.testing.assert_array_equal(x.numpy(), [7, 7, 7])
    from jtmini.var import pending_roots
    assert not any(v is x for v in pending_roots())


def test_rebind_with_a_live_reader_keeps_the_old_value_for_it():
    x = jt.array(np.arange(3, dtype="float32"))
    y = x * 2
    old = x._rebind(None, np.full(3, 7, "float32"))
    assert old is not None and y.inputs[0] is old
    np.testing.assert_array_equal(y.numpy(), [0, 2, 4])
    np.testing.assert_array_equal(x.numpy(), [7, 7, 7])
    z = x * 2                       # a reader that died does not keep the copy
    del z
    assert x._rebind(None, np.zeros(3, "float32")) is None


def test_adam_state_rebinds_keep_values_identical_to_the_general_update(rng):
    """The packed Adam (its states rebound without copies) against the per-parameter update."""
    from jtmini import nn, optim
    values = [rng.standard_normal((4, 3)).astype("float32"), rng.standard_normal(4).astype("float32")]
    data = rng.standard_normal((8, 3)).astype("float32")
    results = []
    for packed in (True, False):
        params = [jt.array(v) for v in values]
        opt = nn.Adam(params, lr=0.01)
        if not packed:
            opt._packed_update = lambda grads, coef: None
        for _ in range(4):
            opt.step(((jt.array(data) @ params[0].transpose(1, 0) + params[1]) ** 2).mean())
        results.append([p.numpy() for p in params] + [m.numpy() for m in opt.param_groups[0]["m"]])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_made_sets_what_var_init_sets():
    """``var.made`` (Var.node's and grad recipes' constructor) leaves a node as ``Var(...)`` does."""
    import importlib
    var_module = importlib.import_module("jtmini.var")      # jt.var is a function
    x = jt.ones((2, 3))
    one = var_module.Var("exp", [x], {}, (2, 3), "float32")
    two = var_module.made("exp", (x,), {}, var_module._shape_of((2, 3)), var_module._NAMED["float32"])
    for name in var_module.Var.__slots__:
        if name in ("id", "__weakref__", "__dict__", "_consumers"):
            continue
        assert getattr(one, name) == getattr(two, name) if name != "inputs" else one.inputs == (x,) == two.inputs
    assert type(two.dtype) is type(one.dtype) and two.shape is one.shape and two.id == one.id + 1
    assert two._consumers == [] and sum(r() is two for r in x._consumers) == 1
    assert any(v is two for v in var_module.pending_roots())
    np.testing.assert_allclose(two.numpy(), np.exp(np.ones((2, 3))), rtol=1e-6)
