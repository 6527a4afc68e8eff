"""The newer zoo of jt.models: AlexNet, GoogLeNet, MNASNet, MobileNetV2, Res2Net, ShuffleNetV2 and
SqueezeNet. Without torchvision in the suite, its facts are written in: each builder's trainable
parameter count at 1000 classes and its state_dict keys (count, first, last and a SHA-1 of the
newline-joined list; num_batches_tracked dropped), read from torchvision 0.29.1 (Res2Net: the
reference implementation's names, counted by a PyTorch port in tools/check_models_torchvision.py,
which also compares every model's values with torchvision's). Here: forward shapes, a training
step's gradients reaching every parameter, eval and no_grad, refused arguments, and the building
blocks' values and gradients against PyTorch twins made of torch.nn layers. Inputs are small and
few shapes are used, since each new shape compiles kernels; heavy variants only build.
"""
import hashlib
import math
from typing import NamedTuple

import numpy as np
import pytest

import jtmini as jt
from jtmini import models, nn
from jtmini.models.googlenet import Inception       # jt.models.googlenet is the builder, as in Jittor

TOL = 1e-4


class Facts(NamedTuple):
    params: int          # trainable parameters at 1000 classes
    keys: int            # state_dict entries less num_batches_tracked
    first: str
    last: str
    sha1: str            # first 16 hex digits of sha1("\n".join(keys))


FACTS = {
    "alexnet": Facts(61_100_840, 16, "features.0.weight", "classifier.6.bias", "2c75bee9d7784ece"),
    "googlenet": Facts(13_004_888, 305, "conv1.conv.weight", "fc.bias", "4eef7efe1dcc49ef"),
    "mnasnet0_5": Facts(2_218_512, 262, "layers.0.weight", "classifier.1.bias", "880094a7cbd05d05"),
    "mnasnet0_75": Facts(3_170_208, 262, "layers.0.weight", "classifier.1.bias", "880094a7cbd05d05"),
    "mnasnet1_0": Facts(4_383_312, 262, "layers.0.weight", "classifier.1.bias", "880094a7cbd05d05"),
    "mnasnet1_3": Facts(6_282_256, 262, "layers.0.weight", "classifier.1.bias", "880094a7cbd05d05"),
    "mobilenet_v2": Facts(3_504_872, 262, "features.0.0.weight", "classifier.1.bias", "eb8f2a555dc559ec"),
    "shufflenet_v2_x0_5": Facts(1_366_792, 282, "conv1.0.weight", "fc.bias", "8c883c5bacb12b38"),
    "shufflenet_v2_x1_0": Facts(2_278_604, 282, "conv1.0.weight", "fc.bias", "8c883c5bacb12b38"),
    "shufflenet_v2_x1_5": Facts(3_503_624, 282, "conv1.0.weight", "fc.bias", "8c883c5bacb12b38"),
    "shufflenet_v2_x2_0": Facts(7_393_996, 282, "conv1.0.weight", "fc.bias", "8c883c5bacb12b38"),
    "squeezenet1_0": Facts(1_248_424, 52, "features.0.weight", "classifier.1.bias", "ab335f179ec59b5e"),
    "squeezenet1_1": Facts(1_235_496, 52, "features.0.weight", "classifier.1.bias", "fc99d68eceaee006"),
    "res2net50": Facts(25_699_120, 427, "conv1.weight", "fc.bias", "cfb2ba209bea252e"),
    "res2net50_26w_4s": Facts(25_699_120, 427, "conv1.weight", "fc.bias", "cfb2ba209bea252e"),
    "res2net50_26w_6s": Facts(37_051_448, 587, "conv1.weight", "fc.bias", "bb704dcfe7aefdc3"),
    "res2net50_26w_8s": Facts(48_403_776, 747, "conv1.weight", "fc.bias", "68cc75baf77641d0"),
    "res2net50_48w_2s": Facts(25_287_304, 267, "conv1.weight", "fc.bias", "0ed82b183947230e"),
    "res2net50_14w_8s": Facts(25_059_816, 747, "conv1.weight", "fc.bias", "68cc75baf77641d0"),
    "res2net101_26w_4s": Facts(45_206_688, 852, "conv1.weight", "fc.bias", "90ac625ef729f049"),
}
# torchvision's googlenet(aux_logits=False): the count its documentation gives
GOOGLENET_NO_AUX = Facts(6_624_904, 287, "conv1.conv.weight", "fc.bias", "e5e3b35a79c0e069")


def facts_of(model):
    keys = list(model.state_dict())
    params = sum(p.numel() for p in model.parameters() if not p.is_stop_grad())
    return Facts(params, len(keys), keys[0], keys[-1], hashlib.sha1("\n".join(keys).encode()).hexdigest()[:16])


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# --- builders: torchvision's counts and names -----------------------------------------------------
@pytest.mark.parametrize("name", sorted(FACTS))
def test_builder_has_torchvision_counts_and_names(name):
    model = getattr(models, name)()
    assert facts_of(model) == FACTS[name]
    stats = [n.endswith(("running_mean", "running_var")) for n, _ in model.named_parameters()]
    assert [p.is_stop_grad() for p in model.parameters()] == stats


def test_googlenet_without_aux_counts_as_torchvision_documents():
    model = models.googlenet(aux_logits=False)
    assert facts_of(model) == GOOGLENET_NO_AUX and model.aux1 is None and model.aux2 is None


def test_aliases_and_exports():
    assert models.res2net101 is models.res2net101_26w_4s
    for name in FACTS:
        assert name in models.__all__ and callable(getattr(models, name))
    for cls in ("AlexNet", "GoogLeNet", "MNASNet", "MobileNetV2", "Res2Net", "ShuffleNetV2", "SqueezeNet"):
        assert cls in models.__all__ and isinstance(getattr(models, cls), type)


@pytest.mark.parametrize("name", sorted(FACTS))
def test_pretrained_is_refused_clearly(name):
    build = getattr(models, name)
    with pytest.raises(ValueError, match=f"{name}\\(pretrained=True\\).*downloads no weights"):
        build(pretrained=True)
    with pytest.raises(TypeError, match="pretrained must be True or False"):
        build(10)          # Jittor's first argument is pretrained, not num_classes


# --- running: shapes, training, eval ------------------------------------------------------------
# the smallest variant of each family, with an input its pools allow
SMALL = {"alexnet": (models.alexnet, 64), "googlenet": (models.googlenet, 32),
         "mnasnet0_5": (models.mnasnet0_5, 32), "mobilenet_v2": (models.mobilenet_v2, 32),
         "shufflenet_v2_x0_5": (models.shufflenet_v2_x0_5, 32), "squeezenet1_0": (models.squeezenet1_0, 32),
         "squeezenet1_1": (models.squeezenet1_1, 32),
         "res2net_tiny": (lambda **kw: models.Res2Net(models.res2net.Bottle2neck, [1, 2, 1, 1], baseWidth=8,
                                                      scale=4, **kw), 32)}


def training_loss(model, x, y):
    """Cross entropy of the logits (plus GoogLeNet's auxiliary classifiers', 0.3 each)."""
    if isinstance(model, models.GoogLeNet):
        out = model.forward_aux(x)
        return nn.cross_entropy_loss(out.logits, y) + 0.3 * (
            nn.cross_entropy_loss(out.aux_logits1, y) + nn.cross_entropy_loss(out.aux_logits2, y))
    return nn.cross_entropy_loss(model(x), y)


def calibrate_batchnorm(model, x):
    """Running statistics := those of batch ``x``, so eval mode normalises as training does (fresh
    statistics, mean 0 and variance 1, let some fresh nets' activations overflow in eval mode)."""
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    saved = [m.momentum for m in norms]
    for m in norms:
        m.momentum = 1.0
    model.train()
    with jt.no_grad():
        jt.sync([model(x)] + list(model.parameters()))      # the updated statistics too
    for m, momentum in zip(norms, saved):
        m.momentum = momentum


@pytest.mark.parametrize("name", sorted(SMALL))
def test_training_step_reaches_every_parameter(name):
    build, size = SMALL[name]
    jt.seed(0)
    model = build(num_classes=10)
    x, y = jt.array(randn(2, 3, size, size)), jt.array(np.array([3, 7], np.int32))
    trainable = [(n, p) for n, p in model.named_parameters() if not p.is_stop_grad()]
    before = {n: p.numpy() for n, p in trainable}
    model.train()
    loss = training_loss(model, x, y)
    assert loss.shape in ((), (1,)) and np.isfinite(loss.numpy()).all()
    nn.SGD(model.parameters(), 0.01).step(loss)
    # a bias ahead of a convolution and a training-mode BatchNorm has an exact zero gradient there,
    # so "every parameter moves" is checked on weights; all parameters, biases too, in eval mode
    moved = [n for n, p in trainable if n.endswith("weight") and not np.array_equal(p.numpy(), before[n])]
    assert moved == [n for n, _ in trainable if n.endswith("weight")]
    calibrate_batchnorm(model, x)
    model.eval()
    grads = jt.grad(training_loss(model, x, y), [p for _, p in trainable])
    jt.sync(grads)
    dead = [n for (n, p), g in zip(trainable, grads)
            if g.shape != p.shape or not np.isfinite(g.numpy()).all() or not np.abs(g.numpy()).max() > 0]
    assert dead == []


@pytest.mark.parametrize("name", sorted(SMALL))
def test_eval_and_no_grad_are_deterministic(name):
    build, size = SMALL[name]
    jt.seed(1)
    model = build(num_classes=10)
    model.eval()
    stats = {n: p.numpy() for n, p in model.named_parameters() if n.endswith("running_mean")}
    x = jt.array(randn(2, 3, size, size, seed=1))
    with jt.no_grad():
        first, second = model(x), model(x)
        assert first.is_stop_grad()
    assert first.shape == (2, 10) and np.isfinite(first.numpy()).all()
    np.testing.assert_array_equal(first.numpy(), second.numpy())       # dropout off, BatchNorm fixed
    for n, p in model.named_parameters():
        if n in stats:
            np.testing.assert_array_equal(p.numpy(), stats[n])


@pytest.mark.parametrize("build", [models.mnasnet1_0, models.shufflenet_v2_x1_0, models.res2net50_48w_2s,
                                   models.googlenet])
def test_larger_variants_run(build):
    out = build(num_classes=5)(jt.randn(1, 3, 32, 32))
    assert out.shape == (1, 5) and np.isfinite(out.numpy()).all()


# --- refused arguments and inputs ---------------------------------------------------------------
def test_bad_arguments_are_refused_clearly():
    with pytest.raises(ValueError, match="unsupported version '1_2'"):
        models.SqueezeNet("1_2")
    with pytest.raises(ValueError, match="alpha must be > 0, got 0"):
        models.MNASNet(0)
    with pytest.raises(ValueError, match="3 stages_repeats and 5 stages_out_channels, got \\[4, 8\\]"):
        models.ShuffleNetV2([4, 8], [24, 48, 96, 192, 1024])
    with pytest.raises(ValueError, match="stride 1 needs inp == oup"):
        models.shufflenetv2.InvertedResidual(8, 12, 1)
    with pytest.raises(ValueError, match="non-empty list of \\[t, c, n, s\\] rows"):
        models.MobileNetV2(inverted_residual_setting=[[1, 16, 1]])
    with pytest.raises(ValueError, match="stride must be 1 or 2, got 3"):
        models.mobilenet.InvertedResidual(8, 8, 3, 6)
    with pytest.raises(ValueError, match="stype must be 'normal' or 'stage'"):
        models.res2net.Bottle2neck(64, 16, stype="first")
    with pytest.raises(ValueError, match="4 stages' block counts, got \\[1, 1\\]"):
        models.Res2Net(models.res2net.Bottle2neck, [1, 1])
    with pytest.raises(ValueError, match="do not split into 2 groups"):
        models.shufflenetv2.channel_shuffle(jt.randn(1, 3, 2, 2), 2)


@pytest.mark.parametrize("build, pattern", [
    (models.alexnet, "AlexNet needs \\(N, 3, H, W\\) input with H, W >= 63, got \\(1, 3, 32, 32\\)"),
    (models.squeezenet1_1, "SqueezeNet needs \\(N, 3, H, W\\) input with H, W >= 17, got \\(1, 3, 8, 8\\)"),
    (models.mobilenet_v2, "MobileNetV2 needs \\(N, 3, H, W\\) input, got \\(1, 1, 32, 32\\)"),
    (models.mnasnet0_5, "MNASNet needs \\(N, 3, H, W\\) input, got \\(3, 32, 32\\)"),
    (models.shufflenet_v2_x0_5, "ShuffleNetV2 needs \\(N, 3, H, W\\) input, got ndarray"),
    (models.googlenet, "GoogLeNet needs \\(N, 3, H, W\\) input, got \\(1, 4, 32, 32\\)"),
    (models.res2net50, "Res2Net needs \\(N, 3, H, W\\) input, got \\(1, 1, 32, 32\\)")])
def test_bad_inputs_name_their_shape(build, pattern):
    bad = {"AlexNet": (1, 3, 32, 32), "SqueezeNet": (1, 3, 8, 8), "MobileNetV2": (1, 1, 32, 32),
           "MNASNet": (3, 32, 32), "GoogLeNet": (1, 4, 32, 32), "Res2Net": (1, 1, 32, 32)}
    model = build()
    shape = bad.get(type(model).__name__)
    with pytest.raises(ValueError, match=pattern):
        model(jt.randn(*shape) if shape else np.zeros((1, 3, 32, 32), np.float32))


# --- building blocks against PyTorch twins --------------------------------------------------------
def rel_err(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    return np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-12)


def compare_with_torch(block, twin, x_shape, x_slice=None):
    """Copy ``twin``'s weights into ``block`` by name, run both in training mode on a random input
    (non-contiguous where ``x_slice`` cuts it), compare outputs and gradients of a weighted sum
    with respect to the input and every trainable parameter."""
    torch = pytest.importorskip("torch")
    block.load_state_dict({k: v.detach().numpy() for k, v in twin.state_dict().items()
                           if not k.endswith("num_batches_tracked")}, strict=True)
    full = randn(*x_shape, seed=2)
    x = full[x_slice] if x_slice is not None else full
    tx = torch.tensor(full, requires_grad=True)
    t_out = twin(tx[x_slice] if x_slice is not None else tx)
    w = randn(*t_out.shape, seed=3)
    (t_out * torch.tensor(w)).sum().backward()
    jx = jt.array(full)
    jin = jx[x_slice] if x_slice is not None else jx
    out = block(jin)
    trainable = [(n, p) for n, p in block.named_parameters() if not p.is_stop_grad()]
    grads = jt.grad((out * jt.array(w)).sum(), [jx] + [p for _, p in trainable])
    jt.sync([out] + grads)
    assert rel_err(out.numpy(), t_out.detach().numpy()) < TOL
    assert rel_err(grads[0].numpy(), tx.grad.numpy()) < TOL
    t_grads = dict((n, p.grad.numpy()) for n, p in twin.named_parameters())
    # against the largest parameter gradient: a BatchNorm weight ahead of another training-mode
    # BatchNorm has a small gradient left from cancelling terms, ill-conditioned on its own
    scale = max(np.abs(g).max() for g in t_grads.values())
    for (name, _), g in zip(trainable, grads[1:]):
        assert np.abs(g.numpy() - t_grads[name]).max() < TOL * scale, name


def test_channel_shuffle_matches_numpy():
    x = randn(2, 6, 3, 2)
    got = models.shufflenetv2.channel_shuffle(jt.array(x), 3).numpy()
    expected = x.reshape(2, 3, 2, 3, 2).transpose(0, 2, 1, 3, 4).reshape(2, 6, 3, 2)
    np.testing.assert_array_equal(got, expected)


def torch_shuffle_unit(inp, oup, stride):
    """torchvision's ShuffleNetV2 unit written with torch.nn (same child names)."""
    import torch
    from torch import nn as tnn
    half = oup // 2
    dw = lambda c: tnn.Conv2d(c, c, 3, stride, 1, bias=False, groups=c)  # noqa: E731
    unit = tnn.Module()
    if stride > 1:
        unit.branch1 = tnn.Sequential(dw(inp), tnn.BatchNorm2d(inp), tnn.Conv2d(inp, half, 1, bias=False),
                                      tnn.BatchNorm2d(half), tnn.ReLU())
    unit.branch2 = tnn.Sequential(tnn.Conv2d(inp if stride > 1 else half, half, 1, bias=False),
                                  tnn.BatchNorm2d(half), tnn.ReLU(), dw(half), tnn.BatchNorm2d(half),
                                  tnn.Conv2d(half, half, 1, bias=False), tnn.BatchNorm2d(half), tnn.ReLU())

    def forward(x):
        if stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat([a, unit.branch2(b)], 1)
        else:
            out = torch.cat([unit.branch1(x), unit.branch2(x)], 1)
        n, c, h, w = out.shape
        return out.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
    unit.forward = forward
    return unit


@pytest.mark.parametrize("inp, oup, stride", [(8, 8, 1), (6, 12, 2)])
def test_shufflenet_unit_matches_pytorch(inp, oup, stride):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    jt.seed(0)
    # the input a channel slice of a wider array: non-contiguous on both sides
    compare_with_torch(models.shufflenetv2.InvertedResidual(inp, oup, stride), torch_shuffle_unit(inp, oup, stride),
                       (2, inp + 2, 7, 7), np.s_[:, 1:inp + 1])


def torch_bottle2neck(inplanes, planes, stride, downsample, base_width, scale, stype):
    """The reference Res2Net bottleneck written with torch.nn (same child names)."""
    import torch
    from torch import nn as tnn
    width = int(math.floor(planes * base_width / 64.0))
    nums = 1 if scale == 1 else scale - 1
    m = tnn.Module()
    m.conv1, m.bn1 = tnn.Conv2d(inplanes, width * scale, 1, bias=False), tnn.BatchNorm2d(width * scale)
    m.convs = tnn.ModuleList([tnn.Conv2d(width, width, 3, stride, 1, bias=False) for _ in range(nums)])
    m.bns = tnn.ModuleList([tnn.BatchNorm2d(width) for _ in range(nums)])
    m.conv3, m.bn3 = tnn.Conv2d(width * scale, planes * 4, 1, bias=False), tnn.BatchNorm2d(planes * 4)
    m.downsample = tnn.Sequential(tnn.Conv2d(inplanes, planes * 4, 1, stride, bias=False),
                                  tnn.BatchNorm2d(planes * 4)) if downsample else None

    def forward(x):
        spx = torch.split(m.bn1(m.conv1(x)).relu(), width, 1)
        outs, sp = [], None
        for i in range(nums):
            sp = spx[i] if i == 0 or stype == "stage" else sp + spx[i]
            sp = m.bns[i](m.convs[i](sp)).relu()
            outs.append(sp)
        if scale != 1:
            last = spx[nums] if stype == "normal" else tnn.functional.avg_pool2d(spx[nums], 3, stride, 1)
            outs.append(last)
        out = m.bn3(m.conv3(torch.cat(outs, 1)))
        return (out + (x if m.downsample is None else m.downsample(x))).relu()
    m.forward = forward
    return m


@pytest.mark.parametrize("stype, stride, scale", [("stage", 2, 4), ("normal", 1, 3), ("normal", 1, 1)])
def test_bottle2neck_matches_pytorch(stype, stride, scale):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    inplanes, planes = (16, 8) if stype == "stage" else (32, 8)
    down = stype == "stage"
    block = models.res2net.Bottle2neck(
        inplanes, planes, stride, baseWidth=32, scale=scale, stype=stype,
        downsample=nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False),
                                 nn.BatchNorm2d(planes * 4)) if down else None)
    compare_with_torch(block, torch_bottle2neck(inplanes, planes, stride, down, 32, scale, stype),
                       (2, inplanes, 6, 6))


def test_fire_matches_pytorch():
    torch = pytest.importorskip("torch")
    from torch import nn as tnn
    torch.manual_seed(0)
    twin = tnn.Module()
    twin.squeeze, twin.expand1x1 = tnn.Conv2d(6, 3, 1), tnn.Conv2d(3, 4, 1)
    twin.expand3x3 = tnn.Conv2d(3, 5, 3, padding=1)

    def forward(x):
        s = twin.squeeze(x).relu()
        return torch.cat([twin.expand1x1(s).relu(), twin.expand3x3(s).relu()], 1)
    twin.forward = forward
    # every other column of a wider array: a non-contiguous input
    compare_with_torch(models.squeezenet.Fire(6, 3, 4, 5), twin, (2, 6, 6, 9), np.s_[:, :, 1:, ::2])


def test_googlenet_inception_block_matches_pytorch():
    torch = pytest.importorskip("torch")
    import collections
    from torch import nn as tnn
    torch.manual_seed(0)
    conv = lambda i, o, k, p=0: tnn.Sequential(collections.OrderedDict(  # noqa: E731
        conv=tnn.Conv2d(i, o, k, padding=p, bias=False), bn=tnn.BatchNorm2d(o, eps=1e-3), relu=tnn.ReLU()))
    twin = tnn.Module()
    twin.branch1 = conv(8, 2, 1)
    twin.branch2 = tnn.Sequential(conv(8, 3, 1), conv(3, 4, 3, 1))
    twin.branch3 = tnn.Sequential(conv(8, 2, 1), conv(2, 3, 3, 1))
    twin.branch4 = tnn.Sequential(tnn.MaxPool2d(3, 1, 1, ceil_mode=True), conv(8, 2, 1))
    twin.forward = lambda x: torch.cat([twin.branch1(x), twin.branch2(x), twin.branch3(x), twin.branch4(x)], 1)
    compare_with_torch(Inception(8, 2, 3, 4, 2, 3, 2), twin, (2, 8, 5, 5))
