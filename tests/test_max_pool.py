"""Max pooling's hand-written kernels (ops/pooling.py) against PyTorch CPU: values, gradients and
second gradients over many geometries, ties and NaNs, at 1 and 2 threads, and against numpy for
integers."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import grad_recipe, nn

torch = pytest.importorskip("torch")

GEOMETRIES = [      # kernel, stride, padding, dilation, ceil_mode
    (3, 2, 1, 1, False),            # ResNet's stem
    (2, None, 0, 1, False),
    (3, 1, 1, 1, False),
    ((2, 3), (1, 2), (1, 0), 1, False),
    (3, 2, 1, 2, False),            # dilated
    (3, 2, 0, 1, True),             # ceil_mode: the last windows hang past the input
    ((3, 2), 3, (1, 1), (1, 2), True),
]


def torch_pool(t, kernel, stride, padding, dilation, ceil_mode):
    return torch.nn.functional.max_pool2d(t, kernel, stride, padding, dilation, ceil_mode)


def jt_pool(x, kernel, stride, padding, dilation, ceil_mode):
    # by keyword: Jittor's sixth argument is return_indices (PyTorch's is ceil_mode)
    return nn.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode)


def run_both(x_np, geometry, threads=1):
    """Output, gradient of sum(out * w) and the gradient of that gradient (weighted by v), from
    jtmini and from PyTorch."""
    rng = np.random.default_rng(3)
    tx = torch.tensor(x_np, requires_grad=True)
    t_out = torch_pool(tx, *geometry)
    w = rng.standard_normal(t_out.shape).astype(x_np.dtype)
    v = rng.standard_normal(x_np.shape).astype(x_np.dtype)
    tw = torch.tensor(w, requires_grad=True)
    (t_dx,) = torch.autograd.grad((t_out * tw).sum(), tx, create_graph=True)
    (t_dw,) = torch.autograd.grad((t_dx * torch.tensor(v)).sum(), tw)
    with jt.flag_scope(num_threads=threads):
        x, jw = jt.array(x_np), jt.array(w)
        out = jt_pool(x, *geometry)
        dx = jt.grad((out * jw).sum(), x)
        dw = jt.grad((dx * jt.array(v)).sum(), jw)
        got = [out.numpy(), dx.numpy(), dw.numpy()]
    return got, [t.detach().numpy() for t in (t_out, t_dx, t_dw)]


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("threads", [1, 2])
def test_values_and_gradients_match_pytorch(geometry, threads):
    x = np.random.default_rng(0).standard_normal((3, 5, 11, 9)).astype(np.float32)
    got, expected = run_both(x, geometry, threads)
    for name, g, e in zip(("out", "dx", "d(dx)/dw"), got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("geometry", GEOMETRIES[:3])
def test_ties_send_the_gradient_to_the_first_largest_as_pytorch(geometry):
    # relu'd small integers: most windows hold several equal maxima (zeros or the same integer)
    x = np.maximum(np.random.default_rng(1).integers(-2, 3, (2, 3, 8, 10)), 0).astype(np.float64)
    got, expected = run_both(x, geometry)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


def test_nan_wins_its_window_as_in_pytorch():
    x = np.random.default_rng(2).standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 0, 1, 1] = x[0, 1, 4, 3] = x[0, 1, 4, 4] = np.nan
    got, expected = run_both(x, (3, 2, 1, 1, False))
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)       # NaNs equal NaNs here


def test_integers_against_numpy():
    x = np.random.default_rng(4).integers(-1000, 1000, (2, 3, 7, 6)).astype(np.int32)
    from numpy.lib.stride_tricks import sliding_window_view
    expected = sliding_window_view(x, (2, 2), axis=(2, 3))[:, :, ::2, ::2].max(axis=(4, 5))
    np.testing.assert_array_equal(nn.max_pool2d(jt.array(x), 2).numpy(), expected)


def test_padding_beyond_half_the_kernel_is_refused():
    with pytest.raises(ValueError, match="padding"):
        nn.max_pool2d(jt.randn(1, 1, 8, 8), 3, 1, 2)


def test_wrong_src_shape_names_both_shapes():
    from jtmini.ops.pooling import max_pool
    x = jt.randn(1, 2, 6, 6)
    pooled = max_pool(x, (3, 3), (2, 2), (2, 2), (0, 0), (1, 1))
    with pytest.raises(ValueError, match=r"\(1, 2, 3, 3\).*\(1, 2, 6, 6\)"):
        jt.Var.node("max_pool_route", [x, x], **pooled.attrs)


def test_the_op_itself_refuses_windows_of_padding_alone():
    from jtmini.ops.pooling import max_pool
    with pytest.raises(ValueError, match=r"padding \(2, 1\)"):
        max_pool(jt.randn(1, 1, 8, 8), (4, 8), (3, 3), (1, 1), (2, 1), (1, 1))


# --- conv (here: a product), ReLU, max pool: the route applies ReLU's mask itself -------------------
def _relu_pool(x, w, geometry, masked):
    """ReLU then max pool of ``x * w``, the gradient of sum(out * v) wrt x and w, and the op names of
    its plan; ``masked``: whether the route may take ReLU's mask (else relu_grad is a node)."""
    from jtmini import schedule
    from jtmini.ops import elementwise, pooling
    kernel, stride, padding, dilation, ceil_mode = geometry
    jx, jw = jt.array(x), jt.array(w)
    h = (jx * jw).relu()
    out = jt_pool(h, kernel, stride, padding, dilation, ceil_mode)
    v = np.random.default_rng(5).standard_normal(out.shape)
    original = pooling.relu_masked_route
    if not masked:
        pooling.relu_masked_route = lambda route: None
    grad_recipe.clear()            # the same forward graph each call: its stored backward would not ask
    try:
        grads = jt.grad((out * jt.array(v)).sum(), [jx, jw])
    finally:
        pooling.relu_masked_route = original
    ops = [s.root.op for s in schedule.plan(grads)] + [n.op for s in schedule.plan(grads)
                                                       for n in getattr(s, "nodes", [])]
    del elementwise
    return [g.numpy() for g in grads], ops, v


@pytest.mark.parametrize("geometry", GEOMETRIES[:5], ids=[str(g) for g in GEOMETRIES[:5]])
def test_route_with_relus_mask_gives_relu_grads_bits(geometry, rng):
    x = rng.standard_normal((2, 3, 9, 10))
    x[0, 0, :3] = 0.0                    # ReLU outputs of exactly 0 (and -0) win some windows
    x[0, 1, :2] = -0.0
    x[1, 2, 4, 4] = np.nan               # a NaN output wins and passes its gradient on
    w = rng.standard_normal((1, 3, 1, 1))
    (gx, gw), ops, _ = _relu_pool(x, w, geometry, masked=True)
    (hx, hw), plain_ops, _ = _relu_pool(x, w, geometry, masked=False)
    assert "relu_grad" not in ops and "relu_grad" in plain_ops
    np.testing.assert_array_equal(gx, hx)
    assert (np.signbit(gx) == np.signbit(hx)).all()
    # w's gradient sums gx * x in a kernel fused differently (the mask is not in it): same terms,
    # its SIMD partial sums may group them differently
    np.testing.assert_allclose(gw, hw, rtol=1e-13, atol=0)


def test_route_with_relus_mask_against_pytorch_with_second_gradient(rng):
    geometry = GEOMETRIES[0]
    x, w = rng.standard_normal((2, 3, 9, 9)), rng.standard_normal((1, 3, 1, 1))
    jx, jw = jt.array(x), jt.array(w)
    out = nn.max_pool2d((jx * jw).relu(), 3, 2, 1)
    v, u = rng.standard_normal(out.shape), rng.standard_normal(x.shape)
    (gx,) = jt.grad((out * jt.array(v)).sum(), [jx])
    (ggw,) = jt.grad((gx * jt.array(u)).sum(), [jw])        # through the masked route's own gradient
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    t_out = torch_pool((tx * tw).relu(), 3, 2, 1, 1, False)
    (t_gx,) = torch.autograd.grad((t_out * torch.tensor(v)).sum(), [tx], create_graph=True)
    (t_ggw,) = torch.autograd.grad((t_gx * torch.tensor(u)).sum(), [tw])
    np.testing.assert_allclose(gx.numpy(), t_gx.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ggw.numpy(), t_ggw.numpy(), rtol=1e-10, atol=1e-10)


def test_relu_output_read_elsewhere_keeps_relu_grad():
    from jtmini import schedule
    x = jt.randn(2, 3, 8, 8)
    h = x.relu()
    loss = nn.max_pool2d(h, 2).sum() + (h * h).sum()       # the ReLU's gradient sums two parts
    ops = [s.root.op for s in schedule.plan(jt.grad(loss, [x]))]
    assert "max_pool_route" in ops


# --- windows that tile the plane: the frame-free kernel ------------------------------------------
TILED = [(2, None, 0, 1, False), ((2, 3), (2, 3), 0, 1, False), (3, 3, 0, 1, False), (1, 1, 0, 1, False)]


def _tiled_input(rng, dtype=np.float64):
    """(2, 3, 12, 12) with ties (zeros and -0 from a ReLU, repeated integers), -inf windows and NaNs."""
    x = np.maximum(rng.integers(-3, 4, (2, 3, 12, 12)), 0).astype(dtype)
    x[0, 0, :6] = rng.standard_normal((6, 12))
    x[0, 1, :3] = -0.0
    x[1, 0, :6, :6] = -np.inf
    x[1, 1, 4, 5] = x[1, 2, 7, 7] = x[1, 2, 7, 8] = np.nan
    return x


@pytest.mark.parametrize("geometry", TILED, ids=[str(g) for g in TILED])
@pytest.mark.parametrize("threads", [1, 2])
def test_tiling_windows_match_pytorch_exactly(geometry, threads, rng):
    from jtmini.ops.pooling import tiles
    kernel = (geometry[0],) * 2 if isinstance(geometry[0], int) else geometry[0]
    assert tiles((kernel, kernel, (0, 0), (1, 1)), (12, 12), (12 // kernel[0], 12 // kernel[1]))
    got, expected = run_both(_tiled_input(rng), geometry, threads)
    for name, g, e in zip(("out", "dx", "d(dx)/dw"), got, expected):
        np.testing.assert_array_equal(g, e, err_msg=name)
        assert (np.signbit(g) == np.signbit(e)).all(), name


@pytest.mark.parametrize("geometry", TILED[:2], ids=[str(g) for g in TILED[:2]])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_tiling_kernel_gives_the_frame_kernels_bits(geometry, dtype, rng, monkeypatch):
    """Pick, route and route with ReLU's mask, tiled against the general (frame) kernel."""
    from jtmini.ops import pooling
    x = _tiled_input(rng, np.float64)
    if np.dtype(dtype).kind == "i":
        x = np.nan_to_num(x, posinf=7, neginf=-7)
    x, results = x.astype(dtype), []
    shape = jt_pool(jt.array(x), *geometry).shape
    g = rng.standard_normal(shape).astype(dtype) if np.dtype(dtype).kind == "f" else rng.integers(-9, 9, shape).astype(dtype)
    if np.dtype(dtype).kind == "f":
        g[0, 0, 0] = -0.0                   # a -0 gradient routed: the frame kernel's 0 + -0 is +0
    for tiled in (True, False):
        monkeypatch.setattr(pooling, "tiles", lambda *args, tiled=tiled: tiled)
        jt.clear_caches()
        jx = jt.array(x)
        out = jt_pool(jx, *geometry)
        a = dict(out.attrs)
        route = jt.Var.node("max_pool_route", [jx, jt.array(g)], **a)
        masked = jt.Var.node("max_pool_route", [jx, jt.array(g)], relu_mask=True, **a)
        results.append([v.numpy() for v in (out, route, masked)])
    for name, g, e in zip(("pick", "route", "masked route"), *results):
        np.testing.assert_array_equal(g, e, err_msg=name)
        assert (np.signbit(g) == np.signbit(e)).all(), name

