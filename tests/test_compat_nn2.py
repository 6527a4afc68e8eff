"""Jittor-compatible layers, initialisers and models added for Jittor's own tests (area nn2):
3-d pooling, MaxPool2d/3d indices and MaxUnpool2d/3d, Var's in-place initialisers, trunc_normal_,
Var.sync's arguments, Jittor's norm-layer arguments, padding of any rank, DenseNet. Values and
gradients against PyTorch (CPU), on contiguous and non-contiguous inputs, and the error cases.
"""
import collections
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jtmini as jt
from jtmini import init, nn
from jtmini.models import densenet

from conftest import check_grad


# --- 3-d pooling ---------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
@pytest.mark.parametrize("kwargs", [dict(kernel_size=3, stride=1, padding=1),
                                    dict(kernel_size=(2, 3, 2), stride=2, padding=(1, 1, 0), ceil_mode=True),
                                    dict(kernel_size=2, dilation=2)])
def test_max_pool3d_matches_torch(rng, layout, kwargs):
    x = rng.standard_normal((2, 3, 6, 7, 5))
    check_grad(lambda a: nn.MaxPool3d(**kwargs)(a), lambda t: torch.nn.MaxPool3d(**kwargs)(t), [x], [layout])


def test_max_pool3d_ties_and_indices_match_torch(rng):
    x = rng.integers(0, 3, (2, 2, 5, 6, 4)).astype("float32")       # many ties in each window
    out, where = nn.Pool3d(3, 2, 1, return_indices=True, ceil_mode=True)(jt.array(x))
    t = torch.tensor(x, requires_grad=True)
    t_out, t_where = torch.nn.MaxPool3d(3, 2, 1, return_indices=True, ceil_mode=True)(t)
    np.testing.assert_array_equal(out.numpy(), t_out.detach().numpy())
    np.testing.assert_array_equal(where.numpy(), t_where.numpy())
    w = rng.standard_normal(out.shape).astype("float32")
    (t_out * torch.tensor(w)).sum().backward()
    x_var = jt.array(x)
    grad = jt.grad((nn.max_pool3d(x_var, 3, 2, 1, ceil_mode=True) * jt.array(w)).sum(), x_var)
    np.testing.assert_allclose(grad.numpy(), t.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("ceil_mode", [True, False])
def test_avg_pool3d_matches_torch(rng, count_include_pad, ceil_mode):
    x = rng.standard_normal((2, 3, 7, 5, 6))
    check_grad(lambda a: nn.avg_pool3d(a, 3, 2, 1, ceil_mode, count_include_pad),
               lambda t: F.avg_pool3d(t, 3, 2, 1, ceil_mode, count_include_pad), [x], ["sliced"])


def test_min_pool3d_and_unbatched(rng):
    x = rng.standard_normal((3, 4, 6, 5)).astype("float32")
    got = nn.pool3d(jt.array(x), 2, "minimum")
    expected = -F.max_pool3d(-torch.tensor(x)[None], 2)[0]
    np.testing.assert_allclose(got.numpy(), expected.numpy())
    assert nn.Pool3d(2, op="mean")(jt.array(x)).shape == (3, 2, 3, 2)


def test_pool3d_errors():
    x = jt.randn(1, 1, 4, 4, 4)
    with pytest.raises(ValueError, match=r"Pool3d: input must be \(N, C, D, H, W\) or \(C, D, H, W\), got shape \(4, 4\)"):
        nn.Pool3d(2)(jt.randn(4, 4))
    with pytest.raises(ValueError, match="padding .* must be at most half the kernel size"):
        nn.MaxPool3d(2, padding=2)
    with pytest.raises(ValueError, match="kernel_size must be an int or three ints"):
        nn.MaxPool3d((2, 2))
    with pytest.raises(ValueError, match="return_indices needs op 'maximum'"):
        nn.Pool3d(2, return_indices=True, op="mean")
    with pytest.raises(ValueError, match="op must be one of"):
        nn.Pool3d(2, op="median")
    with pytest.raises(ValueError, match="does not fit"):
        nn.MaxPool3d(5)(x)


# --- MaxPool2d indices, MaxUnpool2d --------------------------------------------------------------
@pytest.mark.parametrize("layout", ["contig", "transposed"])
def test_max_pool2d_indices_and_unpool_match_torch(rng, layout):
    x = rng.standard_normal((2, 3, 8, 8))
    out, where = nn.MaxPool2d(2, stride=2, return_indices=True)(jt.array(x))
    t_out, t_where = F.max_pool2d(torch.tensor(x), 2, 2, return_indices=True)
    np.testing.assert_allclose(out.numpy(), t_out.numpy())
    np.testing.assert_array_equal(where.numpy(), t_where.numpy())
    check_grad(lambda a: nn.MaxUnpool2d(2)(a, where), lambda t: F.max_unpool2d(t, t_where, 2),
               [t_out.numpy()], [layout])


def test_unpool_adds_shared_winners_as_jittor():
    x = jt.array([[[[1., 2, 3, 4, 0], [5, 6, 7, 8, 0], [9, 10, 11, 12, 0], [13, 14, 16, 15, 0], [0, 0, 0, 0, 0]]]])
    out, where = nn.MaxPool2d(3, stride=2, return_indices=True)(x)
    back = nn.MaxUnpool2d(3, stride=2)(out, where)        # overlapping windows: 16 wins twice
    assert back.shape == (1, 1, 5, 5)
    assert back.numpy()[0, 0, 3, 2] == 32 and back.numpy().sum() == 11 + 12 + 32
    assert nn.MaxUnpool2d(3, 2)(out[0], where[0], output_size=(5, 5)).shape == (1, 5, 5)


@pytest.mark.parametrize("layout", ["contig", "transposed"])
@pytest.mark.parametrize("kernel, stride, padding", [(2, 2, 0), ((2, 3, 2), (2, 3, 2), (1, 0, 1))])
def test_max_pool3d_indices_and_unpool_match_torch(rng, layout, kernel, stride, padding):
    x = rng.standard_normal((2, 3, 6, 6, 5))
    out, where = nn.MaxPool3d(kernel, stride, padding, return_indices=True)(jt.array(x))
    t_out, t_where = F.max_pool3d(torch.tensor(x), kernel, stride, padding, return_indices=True)
    np.testing.assert_array_equal(where.numpy(), t_where.numpy())
    size = x.shape[2:]
    check_grad(lambda a: nn.MaxUnpool3d(kernel, stride, padding)(a, where, output_size=size),
               lambda t: F.max_unpool3d(t, t_where, kernel, stride, padding, output_size=size),
               [t_out.numpy()], [layout])


def test_unpool3d_adds_shared_winners_and_takes_one_volume(rng):
    x = rng.standard_normal((1, 2, 5, 5, 5))
    out, where = nn.MaxPool3d(3, 1, return_indices=True)(jt.array(x))     # overlapping windows
    want = np.zeros((1, 2, 125))
    for c in range(2):
        np.add.at(want[0, c], where.numpy()[0, c].ravel(), out.numpy()[0, c].ravel())
    back = nn.MaxUnpool3d(3, 1)(out, where)
    np.testing.assert_allclose(back.numpy(), want.reshape(1, 2, 5, 5, 5))
    np.testing.assert_allclose(nn.MaxUnpool3d(3, 1)(out[0], where[0]).numpy(), back.numpy()[0])
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 8\) for an output volume of 2x2x2"):
        nn.MaxUnpool3d(3, 1)(out, where, output_size=(2, 2, 2))
    with pytest.raises(ValueError, match=r"input must be \(N, C, D, H, W\) or \(C, D, H, W\)"):
        nn.MaxUnpool3d(2)(out[0, 0], where[0, 0])
    with pytest.raises(ValueError, match="MaxUnpool3d: stride must be >= 1"):
        nn.MaxUnpool3d(2, stride=(1, 0, 1))


def test_unpool_errors():
    out, where = nn.MaxPool2d(2, return_indices=True)(jt.randn(1, 1, 4, 4))
    with pytest.raises(ValueError, match=r"indices must be an int Var of the input's shape \(1, 1, 2, 2\), got float32"):
        nn.MaxUnpool2d(2)(out, out)
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 4\) for an output plane of 2x2"):
        nn.MaxUnpool2d(2)(out, where, output_size=(2, 2))
    with pytest.raises(ValueError, match="stride must be >= 1"):
        nn.MaxUnpool2d(2, stride=0)


# --- initialisers as Var methods, trunc_normal_ --------------------------------------------------
def test_var_init_methods():
    w = jt.zeros(40, 50)
    assert w.uniform_(-0.5, 0.5) is w and -0.5 <= w.numpy().min() and w.numpy().max() < 0.5
    assert w.zero_().numpy().sum() == 0 and w.one_().numpy().min() == 1
    assert w.random_().numpy().min() >= 0 and 0.4 < w.numpy().mean() < 0.6
    assert abs(w.gauss_(3.0, 0.1).numpy().mean() - 3.0) < 0.05
    assert abs(w.normal_(0.0, 2.0).numpy().std() - 2.0) < 0.1
    w.kaiming_normal_(mode="fan_out", nonlinearity="relu")
    assert abs(w.numpy().std() - np.sqrt(2 / 40)) < 0.03


def _truncnorm_moments(mu, sigma, a, b):
    """Mean and standard deviation of a normal truncated to [a, b], in closed form."""
    pdf = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    cdf = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))
    lo, hi = (a - mu) / sigma, (b - mu) / sigma
    mass, shift = cdf(hi) - cdf(lo), pdf(lo) - pdf(hi)
    var = sigma ** 2 * (1 + (lo * pdf(lo) - hi * pdf(hi)) / mass - (shift / mass) ** 2)
    return mu + sigma * shift / mass, math.sqrt(var)


def test_trunc_normal_matches_the_truncated_normal_moments():
    w = jt.zeros(200, 300)
    init.trunc_normal_(w, mean=0.5, std=2.0, a=-1.0, b=3.0)
    values = w.numpy()
    assert w.dtype == "float32" and values.min() >= -1.0 and values.max() <= 3.0
    mean, std = _truncnorm_moments(0.5, 2.0, -1.0, 3.0)
    assert abs(values.mean() - mean) < 0.02 and abs(values.std() - std) < 0.02
    with pytest.raises(ValueError, match="need std > 0 and a < b"):
        w.trunc_normal_(std=0.0)
    with pytest.raises(ValueError, match="too far in the tail"):
        w.trunc_normal_(a=40.0, b=41.0)


# --- Var.sync, norm arguments, padding, SGD ------------------------------------------------------
def test_sync_takes_jittor_arguments():
    x = jt.array([1.0, 2.0]) * 3
    assert x.sync(0, 0) is x and x.sync(device_sync=True).numpy().tolist() == [3.0, 6.0]


@pytest.mark.parametrize("is_train", [True, False])
def test_instance_and_group_norm_take_is_train(rng, is_train):
    x = rng.standard_normal((2, 4, 5, 6)).astype("float32")
    got = nn.InstanceNorm2d(4, is_train=is_train)(jt.array(x))
    np.testing.assert_allclose(got.numpy(), F.instance_norm(torch.tensor(x)).numpy(), rtol=1e-4, atol=1e-5)
    layer = nn.GroupNorm(2, 4, is_train=is_train)
    np.testing.assert_allclose(layer(jt.array(x)).numpy(), F.group_norm(torch.tensor(x), 2).numpy(),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layer, ref", [(lambda: nn.ConstantPad2d((2, 3, 4, 1), 1.5), lambda: torch.nn.ConstantPad2d((2, 3, 4, 1), 1.5)),
                                        (lambda: nn.ZeroPad2d(2), lambda: torch.nn.ZeroPad2d(2))])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 2, 4, 5)])
def test_constant_pad_any_rank(rng, layer, ref, shape):
    check_grad(layer(), ref(), [rng.standard_normal(shape)], ["transposed"])


def test_pad_errors():
    with pytest.raises(ValueError, match=r"ZeroPad2d: input must have at least 2 dims, got shape \(3,\)"):
        nn.ZeroPad2d(1)(jt.ones(3))
    with pytest.raises(ValueError, match="ReflectionPad2d: input must be 3-d or 4-d"):
        nn.ReflectionPad2d(1)(jt.ones(1, 1, 1, 4, 4))


def test_resize_defaults_to_nearest(rng):
    x = rng.standard_normal((1, 2, 3, 3)).astype("float32")
    np.testing.assert_allclose(nn.Resize((6, 6))(jt.array(x)).numpy(),
                               F.interpolate(torch.tensor(x), size=(6, 6)).numpy())


def test_sgd_nesterov_with_dampening_as_jittor():
    w0 = np.array([1.0, -2.0, 3.0])
    w, t = jt.array(w0), torch.tensor(w0, requires_grad=True)
    opt = nn.SGD([w], 0.1, momentum=0.9, dampening=0.3, nesterov=True)
    buf = None
    expected = w0.copy()
    for _ in range(3):
        opt.step((w * w).sum())
        grad = 2 * expected
        buf = grad if buf is None else 0.9 * buf + 0.7 * grad        # PyTorch's first step, as jtmini's SGD
        expected = expected - 0.1 * (grad + 0.9 * buf)
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-10)
    with pytest.raises(ValueError, match="nesterov=True must be used with momentum > 0"):
        nn.SGD([w], 0.1, nesterov=True)


# --- DenseNet ------------------------------------------------------------------------------------
class _TorchDenseLayer(torch.nn.Module):
    """torchvision's DenseNet layer, written out (torchvision is not installed here)."""

    def __init__(self, c_in, growth, bn_size):
        super().__init__()
        self.norm1, self.relu1 = torch.nn.BatchNorm2d(c_in), torch.nn.ReLU()
        self.conv1 = torch.nn.Conv2d(c_in, bn_size * growth, 1, bias=False)
        self.norm2, self.relu2 = torch.nn.BatchNorm2d(bn_size * growth), torch.nn.ReLU()
        self.conv2 = torch.nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, xs):
        x = torch.cat(xs, 1)
        return self.conv2(self.relu2(self.norm2(self.conv1(self.relu1(self.norm1(x))))))


class _TorchDenseBlock(torch.nn.ModuleDict):
    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


def _torch_densenet(growth, blocks, c0, bn_size, classes):
    layers = collections.OrderedDict(conv0=torch.nn.Conv2d(3, c0, 7, 2, 3, bias=False),
                                     norm0=torch.nn.BatchNorm2d(c0), relu0=torch.nn.ReLU(),
                                     pool0=torch.nn.MaxPool2d(3, 2, 1))
    c = c0
    for i, n in enumerate(blocks):
        layers[f"denseblock{i + 1}"] = _TorchDenseBlock(
            {f"denselayer{k + 1}": _TorchDenseLayer(c + k * growth, growth, bn_size) for k in range(n)})
        c += n * growth
        if i != len(blocks) - 1:
            layers[f"transition{i + 1}"] = torch.nn.Sequential(collections.OrderedDict(
                norm=torch.nn.BatchNorm2d(c), relu=torch.nn.ReLU(), conv=torch.nn.Conv2d(c, c // 2, 1, bias=False),
                pool=torch.nn.AvgPool2d(2, 2)))
            c //= 2
    layers["norm5"] = torch.nn.BatchNorm2d(c)
    net = torch.nn.Module()
    net.features, net.classifier = torch.nn.Sequential(layers), torch.nn.Linear(c, classes)
    return net


def test_densenet_matches_torchvision_layout(rng):
    net = densenet.DenseNet(growth_rate=8, block_config=(2, 3), num_init_features=16, bn_size=2, num_classes=5)
    ref = _torch_densenet(8, (2, 3), 16, 2, 5).double().eval()
    state = {k: v for k, v in ref.state_dict().items() if not k.endswith("num_batches_tracked")}
    for k, v in state.items():      # random BatchNorm statistics, so eval mode is really tested
        if "running" in k:
            v.copy_(torch.rand_like(v) + 0.5 if k.endswith("var") else torch.randn_like(v))
    assert sorted(net.state_dict()) == sorted(state)
    net.load_state_dict({k: v.numpy() for k, v in state.items()}, strict=True)
    net.eval()
    x = rng.standard_normal((2, 3, 40, 36))
    with torch.no_grad():
        t = ref.features(torch.tensor(x))
        expected = ref.classifier(F.relu(t).mean((2, 3)))
    # the loaded weights are float32 (the parameters' dtype), so float32 accuracy
    np.testing.assert_allclose(net(jt.array(x)).numpy(), expected.numpy(), rtol=1e-4, atol=1e-6)


def test_densenet_builders_and_errors():
    assert densenet.densenet121(num_classes=3).classifier.weight.shape == (3, 1024)
    assert densenet.densenet161().classifier.weight.shape == (1000, 2208)
    with pytest.raises(ValueError, match=r"downloads no weights"):
        densenet.densenet169(pretrained=True)
    with pytest.raises(ValueError, match=r"DenseNet needs \(N, 3, H, W\) input with H, W >= 32, got \(1, 3, 16, 16\)"):
        densenet.DenseNet(8, (1,), 8)(jt.randn(1, 3, 16, 16))


def test_nn_holds_matmul_and_bmm_as_jittor():
    a = np.random.default_rng(3).standard_normal((2, 3, 4))
    b = np.random.default_rng(4).standard_normal((2, 4, 5))
    np.testing.assert_allclose(jt.nn.matmul(jt.array(a), jt.array(b[0])).numpy(), a @ b[0], rtol=1e-10)
    np.testing.assert_allclose(jt.nn.bmm(jt.array(a), jt.array(b)).numpy(), a @ b, rtol=1e-10)
