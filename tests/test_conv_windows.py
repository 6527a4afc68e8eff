"""The conv_windows op (im2col as a 6-D reindex) and its gathered gradient (col2im): value and
gradient against a loop-by-loop numpy reference, conv2d's input gradient against PyTorch on
geometries where a stride skips pixels, and the properties the design promises (no scatter and
no division in the kernels, bit-identical results at any thread count, batch-size-free source)."""
import numpy as np
import pytest
import torch

import jtmini as jt
from jtmini import codegen, grad_recipe, nn, schedule
from jtmini.ops.window import conv_windows
from conftest import check_grad

# (x shape, out (Ho, Wo), taps, stride, padding, dilation, first live tap)
GEOMETRIES = [
    ((2, 3, 6, 7), (6, 7), (3, 3), (1, 1), (1, 1), (1, 1), (0, 0)),       # same padding
    ((2, 3, 7, 8), (4, 4), (3, 3), (2, 2), (1, 1), (1, 1), (0, 0)),       # stride 2, odd/even
    ((1, 2, 9, 9), (3, 4), (3, 2), (3, 2), (2, 0), (2, 3), (0, 0)),       # stride 3, dilation
    ((2, 4, 5, 5), (3, 3), (1, 1), (2, 2), (0, 0), (1, 1), (0, 0)),       # 1x1 stride 2: gaps
    ((2, 3, 2, 2), (1, 1), (2, 2), (2, 2), (1, 1), (1, 1), (1, 1)),       # live taps 1..2 of 3
    ((1, 2, 1, 3), (1, 3), (1, 3), (1, 1), (1, 1), (1, 1), (1, 0)),       # centre row only
]


def reference_windows(x, out_hw, taps, stride, padding, dilation, first):
    """cols[c, a, b, n, ho, wo] = x[n, c, h, w] by explicit loops, and where each came from."""
    n, c, h, w = x.shape
    cols, reads = np.zeros((c, *taps, n, *out_hw), x.dtype), []
    for a in range(taps[0]):
        for b in range(taps[1]):
            for ho in range(out_hw[0]):
                for wo in range(out_hw[1]):
                    hi = ho * stride[0] - padding[0] + (a + first[0]) * dilation[0]
                    wi = wo * stride[1] - padding[1] + (b + first[1]) * dilation[1]
                    if 0 <= hi < h and 0 <= wi < w:
                        cols[:, a, b, :, ho, wo] = x[:, :, hi, wi].T
                        reads.append((a, b, ho, wo, hi, wi))
    return cols, reads


def reference_grad(dcols, x_shape, reads):
    """The adjoint: each window element's gradient added back to the pixel it read."""
    dx = np.zeros(x_shape, dcols.dtype)
    for a, b, ho, wo, hi, wi in reads:
        dx[:, :, hi, wi] += dcols[:, a, b, :, ho, wo].T
    return dx


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[str(g[0]) + str(g[3]) for g in GEOMETRIES])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_value_and_gradient_match_loops(geometry, dtype, rng):
    shape, *args = geometry
    x = rng.standard_normal(shape).astype(dtype)
    cols, reads = reference_windows(x, *args)
    dcols = rng.standard_normal(cols.shape).astype(dtype)
    jx = jt.array(x)
    got = conv_windows(jx, *args)
    (dx,) = jt.grad((got * jt.array(dcols)).sum(), [jx])
    np.testing.assert_array_equal(got.numpy(), cols)             # a gather: exact
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx.numpy(), reference_grad(dcols, shape, reads), **tol)


@pytest.mark.parametrize("cin,cout,k,stride,pad,dil,groups,size", [
    (4, 6, 3, 2, 1, 1, 2, (8, 9)),          # groups and stride 2
    (2, 3, 3, 3, 2, 2, 1, (11, 10)),        # stride 3 with dilation 2: most pixels skip taps
    (3, 4, 1, 2, 0, 1, 1, (7, 7)),          # 1x1 stride 2: three quarters of dx are 0
    (2, 2, (2, 4), (3, 2), (1, 2), (2, 1), 2, (9, 8)),
    (4, 6, 3, 2, 1, 1, 2, (2, 2)),          # groups, live taps 1..2 of 3 (weight slice view)
    (4, 4, 3, 1, 1, 1, 2, (1, 1)),          # groups, only the centre tap is live
])
def test_conv2d_gradients_match_pytorch(cin, cout, k, stride, pad, dil, groups, size, rng):
    torch = pytest.importorskip("torch")
    k = (k, k) if isinstance(k, int) else k
    x = rng.standard_normal((3, cin, *size))
    weight = rng.standard_normal((cout, cin // groups, *k))
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(weight, requires_grad=True)
    t_out = torch.nn.functional.conv2d(tx, tw, None, stride, pad, dil, groups)
    dout = rng.standard_normal(tuple(t_out.shape))
    (t_out * torch.tensor(dout)).sum().backward()
    jx, jw = jt.array(x), jt.array(weight)
    out = nn.conv2d(jx, jw, None, stride, pad, dil, groups)
    dx, dw = jt.grad((out * jt.array(dout)).sum(), [jx, jw])
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dx.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dw.numpy(), tw.grad.numpy(), rtol=1e-10, atol=1e-10)


def _conv_step(n=2, stride=2):
    x, w = jt.randn(n, 4, 9, 9), jt.randn(6, 2, 3, 3)
    out = nn.conv2d(x, w, stride=stride, padding=1, groups=2)
    return [out, *jt.grad((out * out).sum(), [x, w])]


def test_backward_has_no_scatter_and_the_gathers_do_not_divide():
    steps = schedule.plan(_conv_step())
    kernels = [s for s in steps if isinstance(s, schedule.Kernel)]
    assert all(k.kind != "scatter" for k in kernels)
    windows = [k for k in kernels if k.root.op == "conv_windows"]
    assert len(windows) == 1
    body = codegen.generate(windows[0]).source.split("jt_kernel", 1)[1]     # rows of 5: the gather
    assert "/" not in body and "%" not in body


def test_im2col_template_only_for_rows_of_8_or_more():
    for width, template in [(7, False), (8, True)]:
        cols = conv_windows(jt.randn(2, 3, 4, width), (4, width), (3, 3), (1, 1), (1, 1), (1, 1))
        (kernel,) = [s for s in schedule.plan([cols]) if isinstance(s, schedule.Kernel)]
        assert isinstance(codegen.generate(kernel), codegen.WindowsCode) == template
        with jt.flag_scope(specialize_shapes=False):         # dims not compiled in: the gather
            assert not isinstance(codegen.generate(kernel), codegen.WindowsCode)


@pytest.mark.parametrize("movement", ["transpose", "pad"])
def test_im2col_of_a_moved_buffer_reads_it_as_a_buffer_for_the_template(movement, rng):
    """A movement of a buffer inlined into im2col made it the generic gather (Conv1d on a
    permuted embedding: ~10x slower per element): it gets a buffer of its own first."""
    if movement == "transpose":
        moved = jt.array(rng.standard_normal((2, 10, 3, 5)).astype("float32")).permute(0, 2, 3, 1)
    else:
        moved = jt.array(rng.standard_normal((2, 9, 3, 8)).astype("float32")).pad((1, 1, 0, 0))
    args = ((moved.shape[2] - 2, moved.shape[3] - 2), (3, 3), (1, 1), (0, 0), (1, 1))
    cols = conv_windows(moved, *args)
    kernels = [s for s in schedule.plan([cols]) if isinstance(s, schedule.Kernel)]
    assert [k.root.op for k in kernels] == [movement, "conv_windows"]
    assert isinstance(codegen.generate(kernels[-1]), codegen.WindowsCode)
    np.testing.assert_array_equal(cols.numpy(), reference_windows(moved.numpy(), *args, (0, 0))[0])
    narrow = conv_windows(moved[..., :9], (args[0][0], 7), *args[1:])     # rows of 7: one gather
    assert [k.root.op for k in schedule.plan([narrow]) if isinstance(k, schedule.Kernel)] == ["conv_windows"]


# (x shape, kernel, stride, padding, dilation): padding wider than some rows and columns, strides
# and dilations that skip, windows hanging past the right edge, a 1x1 map
TEMPLATE_GEOMETRIES = [
    ((3, 2, 9, 11), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 3, 8, 12), (5, 5), (1, 1), (0, 0), (1, 1)),
    ((2, 1, 10, 24), (3, 2), (2, 3), (2, 1), (1, 2)),
    ((1, 2, 6, 30), (2, 4), (3, 2), (1, 3), (2, 2)),
    ((2, 2, 1, 9), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((1, 3, 4, 17), (1, 1), (2, 2), (0, 0), (1, 1)),
    ((2, 2, 7, 10), (7, 3), (1, 1), (3, 1), (1, 1)),
    # rows as wide as x's at stride 1 (the shifted-plane copy): dilated, padding past the taps'
    # reach, taps trimmed to the live ones, a map narrower than the kernel
    ((2, 3, 8, 8), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 2, 9, 10), (3, 3), (1, 1), (2, 2), (2, 2)),
    ((1, 2, 5, 8), (5, 5), (1, 1), (2, 2), (1, 1)),
    ((2, 2, 2, 9), (5, 3), (1, 1), (2, 1), (1, 1)),
    ((1, 1, 3, 8), (1, 9), (1, 1), (0, 4), (1, 1)),
]


@pytest.mark.parametrize("geometry", TEMPLATE_GEOMETRIES, ids=[str(g[0]) for g in TEMPLATE_GEOMETRIES])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_im2col_template_equals_the_generic_gather(geometry, dtype, rng):
    from jtmini.nn.conv import _axis
    shape, kernel, stride, padding, dilation = geometry
    axes = [_axis(shape[2 + k], kernel[k], stride[k], padding[k], dilation[k]) for k in range(2)]
    args = ((axes[0].out, axes[1].out), (axes[0].taps, axes[1].taps), stride, padding, dilation,
            (axes[0].first, axes[1].first))
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    plan = schedule.plan([conv_windows(jt.array(x), *args)])
    assert isinstance(codegen.generate(plan[-1]), codegen.WindowsCode)
    got = conv_windows(jt.array(x), *args).numpy()
    with jt.flag_scope(specialize_shapes=False):
        generic = conv_windows(jt.array(x), *args).numpy()
    np.testing.assert_array_equal(got, generic)
    np.testing.assert_array_equal(got, reference_windows(x, *args)[0])
    assert got.dtype == np.dtype(dtype)


def test_spread_weight_gradient_is_a_gather():
    x, w = jt.randn(3, 8, 2, 2), jt.randn(16, 8, 3, 3)
    out = nn.conv2d(x, w, padding=1)             # 4 pixels under 9 taps: the dense path
    steps = schedule.plan([out, *jt.grad((out * out).sum(), [x, w])])
    kernels = [s for s in steps if isinstance(s, schedule.Kernel)]
    assert any(k.root.op == "conv_spread" for k in kernels)
    assert all(k.kind != "scatter" for k in kernels)
    # the spread's gradient is the product d^T x, laid out (O*Ho*Wo, C*H*W) as the spread is, so
    # the gathers read it nearly in order and no permute stands between them and the weight
    products = [s.root for s in steps if s.root.op == "matmul"]
    assert any(tuple(p.shape) == (16 * 2 * 2, 8 * 2 * 2) for p in products), [p.shape for p in products]
    assert not [k for k in kernels if any(v.op == "transpose" and v.inputs[0].op == "add_n" for v in k.nodes)]


def test_a_kernel_covering_the_whole_map_is_the_dense_product(rng):
    # a DCGAN discriminator's last layer (7x7 -> 1x1): the spread is the weight itself, no windows
    x, w = rng.standard_normal((4, 6, 7, 7)), rng.standard_normal((3, 6, 7, 7))
    out = nn.conv2d(jt.array(x), jt.array(w))
    steps = schedule.plan([out, *jt.grad((out * out).sum(), [out.inputs[0]])])
    assert not any(s.root.op.startswith("conv_windows") for s in steps)
    check_grad(lambda a, b: nn.conv2d(a, b), lambda a, b: torch.nn.functional.conv2d(a, b), [x, w])


def test_without_specialisation_source_does_not_depend_on_batch_size():
    sources = []
    with jt.flag_scope(specialize_shapes=False):
        for n in (2, 5):
            kernels = [s for s in schedule.plan(_conv_step(n)) if isinstance(s, schedule.Kernel)]
            sources.append(sorted(codegen.generate(k).source for k in kernels))
    assert sources[0] == sources[1]


def test_gradient_is_bit_identical_at_any_thread_count(rng):
    x = jt.array(rng.standard_normal((8, 16, 12, 12)).astype(np.float32))
    dcols = jt.array(rng.standard_normal((16, 3, 3, 8, 6, 6)).astype(np.float32))
    results = []
    for threads in (1, 2, 3):
        with jt.flag_scope(num_threads=threads):
            cols = conv_windows(x, (6, 6), (3, 3), (2, 2), (1, 1), (1, 1))
            results.append(jt.grad((cols * dcols).sum(), [x])[0].numpy())
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)


GRAD_GEOMETRIES = [
    ((4, 6, 14, 14), (5, 5), (1, 1), (0, 0), (1, 1)),       # LeNet's conv2
    ((3, 4, 8, 9), (3, 3), (1, 1), (1, 1), (1, 1)),         # VGG's 3x3, same padding
    ((2, 3, 9, 8), (3, 3), (2, 2), (1, 1), (1, 1)),         # ResNet's downsampling
    ((2, 2, 10, 9), (3, 2), (2, 3), (2, 1), (1, 2)),        # strides and dilation that skip
    ((2, 3, 7, 7), (1, 1), (2, 2), (0, 0), (1, 1)),         # 1x1 stride 2: one tap, gaps
    ((2, 2, 2, 2), (3, 3), (1, 1), (1, 1), (1, 1)),         # live taps 1..2 of 3
    ((1, 2, 5, 4), (5, 3), (1, 1), (2, 3), (1, 1)),         # padding wider than some taps reach
    ((2, 3, 9, 8), (3, 3), (1, 1), (2, 2), (2, 2)),         # stride 1, rows as wide as x's, dilated
    ((2, 3, 5, 4), (3, 3), (1, 1), (1, 1), (1, 1)),         # the same on rows of 4
    ((1, 2, 3, 8), (5, 9), (1, 1), (2, 4), (1, 1)),         # taps wider than the map, all rows
    ((2, 2, 6, 8), (1, 3), (1, 1), (0, 1), (1, 1)),         # one tap row
]


def _windows_args(shape, kernel, stride, padding, dilation):
    from jtmini.nn.conv import _axis
    axes = [_axis(shape[2 + k], kernel[k], stride[k], padding[k], dilation[k]) for k in range(2)]
    return ((axes[0].out, axes[1].out), (axes[0].taps, axes[1].taps), stride, padding, dilation,
            (axes[0].first, axes[1].first))


@pytest.mark.parametrize("geometry", GRAD_GEOMETRIES, ids=[str(g[0]) + str(g[2]) for g in GRAD_GEOMETRIES])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_col2im_kernel_gives_the_composed_gathers_bits(geometry, dtype, rng, monkeypatch):
    from jtmini.ops import window
    shape, *rest = geometry
    args = _windows_args(shape, *rest)
    x = rng.standard_normal(shape).astype(dtype)
    dcols = rng.standard_normal((shape[1], *args[1], shape[0], *args[0])).astype(dtype)
    dcols[:, :, :, 0] = -0.0                       # sample 0: every tap -0, whose sum keeps its sign
    dcols[:, :, :, -1, ::2] *= 1e30                # large and small terms: the order of the adds shows
    results = []
    for fused in (True, False):
        monkeypatch.setattr(window, "uses_col2im_kernel", lambda x, dcols, fused=fused: fused)
        grad_recipe.clear()         # the same forward graph: its stored backward would not ask again
        jx = jt.array(x)
        (dx,) = jt.grad((conv_windows(jx, *args) * jt.array(dcols)).sum(), [jx])
        ops = [s.root.op for s in schedule.plan([dx])]
        assert ("conv_windows_grad" in ops) == fused
        results.append(dx.numpy())
    np.testing.assert_array_equal(results[0], results[1])
    assert (np.signbit(results[0]) == np.signbit(results[1])).all()
    _, reads = reference_windows(x, *args)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    head = (shape[0] - 1,) + shape[1:]               # the samples without the large terms
    np.testing.assert_allclose(results[0][:-1], reference_grad(dcols[:, :, :, :-1], head, reads), **tol)


def test_col2im_kernel_is_bit_identical_at_any_thread_count_and_has_a_gradient(rng):
    from jtmini.ops.window import conv_windows_grad
    a = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), first=(0, 0))
    dcols = jt.array(rng.standard_normal((16, 3, 3, 8, 12, 12)))
    results = []
    for threads in (1, 2, 3):
        with jt.flag_scope(num_threads=threads):
            results.append(conv_windows_grad(dcols, (8, 16, 12, 12), a).numpy())
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)
    # its gradient is conv_windows, the adjoint: <col2im(d), y> = <d, im2col(y)>
    y = rng.standard_normal((8, 16, 12, 12))
    (g,) = jt.grad((conv_windows_grad(dcols, (8, 16, 12, 12), a) * jt.array(y)).sum(), [dcols])
    cols, _ = reference_windows(y, (12, 12), (3, 3), (1, 1), (1, 1), (1, 1), (0, 0))
    np.testing.assert_allclose(g.numpy(), cols, rtol=1e-12, atol=1e-12)


def test_col2im_kernel_refuses_windows_that_do_not_fit():
    from jtmini.ops.window import conv_windows_grad
    a = dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), first=(0, 0))
    with pytest.raises(ValueError, match=r"conv_windows_grad: dcols must be float .* x \(2, 3, 8, 8\), got \(4, 3, 3, 2, 6, 6\)"):
        conv_windows_grad(jt.randn(4, 3, 3, 2, 6, 6), (2, 3, 8, 8), a)
    with pytest.raises(ValueError, match="int32"):
        conv_windows_grad(jt.zeros((3, 3, 3, 2, 6, 6), "int32"), (2, 3, 8, 8), a)


def test_col2im_kernel_on_pooled_inputs_and_wide_maps(monkeypatch):
    # 10x10: under nn.conv.MIN_TILED_MAP output pixels, so the convolution is im2col and a product
    # (with Winograd's kernels, which 3x3 layers at stride 1 take, out of the way)
    monkeypatch.setattr(nn.conv, "_winograd_is_cheaper", lambda *args: False)
    x, w = jt.randn(2, 3, 10, 10), jt.randn(4, 3, 3, 3)
    pooled = nn.max_pool2d(x, 2)                 # 5x5: narrow, but nothing would fuse with the gathers
    for source, kernel in [(pooled, True), (pooled.relu(), False), (x.relu(), True), (x, True)]:
        out = nn.conv2d(source, w, padding=1)
        ops = [s.root.op for s in schedule.plan(jt.grad((out * out).sum(), [x]))]
        assert ("conv_windows_grad" in ops) == kernel
