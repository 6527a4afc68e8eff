"""Depthwise convolution's own kernels (``jtmini/ops/conv_kernels.py``) against PyTorch CPU (a
test-only oracle): ``nn.conv2d`` with groups = in = out channels takes them on the CPU; values,
first and second gradients, strided, padded, dilated and non-square geometries, non-contiguous
inputs, float64, a fixed reduction order at any thread count, and errors that name shapes."""
import numpy as np
import pytest

import jtmini as jt
from jtmini import nn
from jtmini.ops.conv_kernels import depthwise_conv
from conftest import check_grad

torch = pytest.importorskip("torch")
TF = torch.nn.functional

# (x shape, kernel, stride, padding, dilation): padding past the taps' reach, windows hanging
# past the edge, rows narrower than the kernel, dilation with stride
GEOMETRIES = [
    ((2, 3, 9, 9), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 4, 10, 7), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((1, 2, 8, 11), (2, 5), (3, 2), (0, 3), (1, 2)),
    ((3, 2, 6, 6), (5, 5), (2, 1), (4, 2), (1, 1)),
    ((2, 3, 3, 2), (3, 3), (1, 1), (1, 1), (2, 1)),
]


def _torch(geometry):
    _, kernel, stride, padding, dilation = geometry
    return lambda x, w: TF.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=x.shape[1])


def _jt(geometry):
    _, kernel, stride, padding, dilation = geometry
    return lambda x, w: nn.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=x.shape[1])


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[str(g[1:]) for g in GEOMETRIES])
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
def test_values_and_gradients_match_torch(geometry, layout, rng):
    shape, kernel = geometry[:2]
    x, w = rng.standard_normal(shape), rng.standard_normal((shape[1], 1) + kernel)
    check_grad(_jt(geometry), _torch(geometry), [x, w], layouts=[layout, "contig"])


def test_float64_and_the_layer_use_the_kernels(rng):
    geometry = GEOMETRIES[1]
    shape, kernel = geometry[:2]
    x, w = rng.standard_normal(shape), rng.standard_normal((shape[1], 1) + kernel)
    check_grad(_jt(geometry), _torch(geometry), [x, w], dtype="float64")
    layer = nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4)
    out = layer(jt.array(x.astype("float32")))
    assert out.op == "add" and out.inputs[0].op == "depthwise_conv"      # the bias after the kernel
    assert nn.conv2d(jt.array(x), jt.array(np.ones((8, 1, 3, 3))), groups=4).inputs[0].op != "depthwise_conv"


@pytest.mark.parametrize("geometry", GEOMETRIES[1:3], ids=[str(g[1:]) for g in GEOMETRIES[1:3]])
def test_second_order_gradients_match_torch(geometry, rng):
    shape, kernel = geometry[:2]
    x, w = rng.standard_normal(shape), rng.standard_normal((shape[1], 1) + kernel)
    jx, jw = jt.array(x), jt.array(w)
    tx, tw = (torch.tensor(v, requires_grad=True) for v in (x, w))
    out, t_out = _jt(geometry)(jx, jw), _torch(geometry)(tx, tw)
    weights = rng.uniform(0.5, 1.5, size=out.shape)
    gx, gw = jt.grad((out * out * jt.array(weights)).sum(), [jx, jw])
    t_gx, t_gw = torch.autograd.grad((t_out * t_out * torch.tensor(weights)).sum(), [tx, tw], create_graph=True)
    probe = [rng.standard_normal(g.shape) for g in (gx, gw)]
    second = jt.grad((gx * jt.array(probe[0])).sum() + (gw * jt.array(probe[1])).sum(), [jx, jw])
    t_second = torch.autograd.grad((t_gx * torch.tensor(probe[0])).sum() + (t_gw * torch.tensor(probe[1])).sum(), [tx, tw])
    for got, want in zip(second, t_second):
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-7, atol=1e-9)


def test_the_weight_gradient_has_the_same_bits_at_any_thread_count(rng):
    x = jt.array(rng.standard_normal((8, 6, 32, 32)).astype("float32"))
    w = jt.array(rng.standard_normal((6, 1, 3, 3)).astype("float32"))
    d = jt.array(rng.standard_normal((8, 6, 32, 32)).astype("float32"))
    grads = []
    for threads in (1, 2, 3):
        with jt.flag_scope(num_threads=threads):
            grads.append([g.numpy() for g in jt.grad((nn.conv2d(x, w, padding=1, groups=6) * d).sum(), [x, w])])
    for other in grads[1:]:
        for got, want in zip(other, grads[0]):
            np.testing.assert_array_equal(got, want)


def test_bad_inputs_name_the_shapes():
    a = dict(kernel=(3, 3), stride=(1, 1), padding=(0, 0), dilation=(1, 1))
    with pytest.raises(ValueError, match=r"\(4, 1, 3, 3\)"):
        depthwise_conv(jt.randn(2, 3, 8, 8), jt.randn(4, 1, 3, 3), a)
    with pytest.raises(ValueError, match="float"):
        depthwise_conv(jt.ones((2, 3, 8, 8), "int32"), jt.ones((3, 1, 3, 3), "int32"), a)
    with pytest.raises(ValueError, match="geometry"):
        depthwise_conv(jt.randn(2, 3, 2, 2), jt.randn(3, 1, 3, 3), a)
