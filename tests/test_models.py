"""The model zoo (jtmini.models) and the init forms added beside it.

Every builder's parameter names are checked against torchvision's naming, written out here by its
rules (torchvision itself is not needed), and its trainable parameter count against torchvision's
published totals. Forward shapes at small inputs; values and one backward of resnet34 and
vgg11_bn against PyTorch twins built from torch.nn layers with copied weights. Inputs are tiny
and few shapes are used: each new shape compiles kernels.
"""
import math

import numpy as np
import pytest

import jtmini as jt
from jtmini import init, models, nn

TOL = 1e-4
BN = ("weight", "bias", "running_mean", "running_var")
# torchvision's VGG configurations, written out independently of jtmini.models.vgg.cfgs
CFGS = {
    11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    13: [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512,
         512, "M"],
}
# name -> (blocks per stage, Bottleneck?, trainable parameters of torchvision's model at 1000 classes)
RESNETS = {"resnet18": ([2, 2, 2, 2], False, 11_689_512), "resnet34": ([3, 4, 6, 3], False, 21_797_672),
           "resnet50": ([3, 4, 6, 3], True, 25_557_032)}
VGGS = {"vgg11": 132_863_336, "vgg11_bn": 132_868_840, "vgg13": 133_047_848, "vgg13_bn": 133_053_736,
        "vgg16": 138_357_544, "vgg16_bn": 138_365_992, "vgg19": 143_667_240, "vgg19_bn": 143_678_248}


def rel_err(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    return np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-12)


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# --- torchvision's naming ------------------------------------------------------------------------
def resnet_keys(layers, bottleneck):
    """torchvision's ResNet state_dict keys, less num_batches_tracked."""
    keys = ["conv1.weight"] + [f"bn1.{k}" for k in BN]
    for stage, blocks in enumerate(layers, 1):
        for b in range(blocks):
            for c in range(1, 4 if bottleneck else 3):
                keys += [f"layer{stage}.{b}.conv{c}.weight"] + [f"layer{stage}.{b}.bn{c}.{k}" for k in BN]
            if b == 0 and (stage > 1 or bottleneck):     # the first block changes width or stride
                keys += [f"layer{stage}.0.downsample.0.weight"]
                keys += [f"layer{stage}.0.downsample.1.{k}" for k in BN]
    return keys + ["fc.weight", "fc.bias"]


def vgg_keys(cfg, batch_norm):
    """torchvision's VGG state_dict keys: features numbered per layer (conv, [bn], relu; pool)."""
    keys, i = [], 0
    for v in cfg:
        if v != "M":
            keys += [f"features.{i}.weight", f"features.{i}.bias"]
            keys += [f"features.{i + 1}.{k}" for k in BN] if batch_norm else []
        i += 1 if v == "M" else 3 if batch_norm else 2
    return keys + [f"classifier.{i}.{k}" for i in (0, 3, 6) for k in ("weight", "bias")]


def test_naming_rules_agree_with_known_torchvision_keys():
    assert len(resnet_keys([2, 2, 2, 2], False)) == 102 and len(resnet_keys([3, 4, 6, 3], True)) == 267
    assert "layer1.0.downsample.0.weight" in resnet_keys([3, 4, 6, 3], True)
    assert "layer1.0.downsample.0.weight" not in resnet_keys([3, 4, 6, 3], False)
    convs = [k[:-len(".weight")] for k in vgg_keys(CFGS[16], False) if k.startswith("features") and "weight" in k]
    assert convs == [f"features.{i}" for i in (0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28)]
    convs = [k for k in vgg_keys(CFGS[16], True) if k.endswith("running_var")]
    assert convs[0] == "features.1.running_var" and convs[-1] == "features.41.running_var"


def trainable_count(model):
    return sum(p.numel() for p in model.parameters() if not p.is_stop_grad())


def forward_shape(model, x_shape):
    out = model(jt.randn(*x_shape)).numpy()
    assert out.shape == (x_shape[0], 1000) and np.isfinite(out).all()


# trainable parameters of torchvision 0.29's builders of the same names, at 1000 classes
DEEP_RESNETS = {"resnet101": 44_549_160, "resnet152": 60_192_808, "resnext50_32x4d": 25_028_904,
                "resnext101_32x8d": 88_791_336, "wide_resnet50_2": 68_883_240, "wide_resnet101_2": 126_886_696}


@pytest.mark.parametrize("name", sorted(DEEP_RESNETS))
def test_deeper_resnets_count_as_torchvision(name):
    model = getattr(models, name)()
    assert getattr(models, name[0].upper() + name[1:]) is getattr(models, name)
    assert trainable_count(model) == DEEP_RESNETS[name]


def test_resnext_runs_with_grouped_middle_convs():
    model = models.resnext50_32x4d(num_classes=10)
    conv = model.layer1[0].conv2
    assert conv.weight.shape == (128, 4, 3, 3) and conv.groups == 32     # width 4 x 32 groups
    out = model(jt.randn(1, 3, 32, 32)).numpy()
    assert out.shape == (1, 10) and np.isfinite(out).all()
    assert len(models.resnet26().layer3) == 4 and len(models.resnet38().layer3) == 5


def test_basic_block_refuses_groups():
    with pytest.raises(ValueError, match="groups=1 and width_per_group=64"):
        models.ResNet(models.resnet.BasicBlock, [1, 1, 1, 1], groups=2)


@pytest.mark.parametrize("name", sorted(RESNETS))
def test_resnet_builds_with_torchvision_names_and_runs(name):
    layers, bottleneck, total = RESNETS[name]
    jt.seed(0)
    model = getattr(models, name)()
    assert getattr(models, "R" + name[1:]) is getattr(models, name)      # Jittor's two spellings
    assert sorted(n for n, _ in model.named_parameters()) == sorted(resnet_keys(layers, bottleneck))
    assert trainable_count(model) == total
    stats = [n.endswith(("running_mean", "running_var")) for n, _ in model.named_parameters()]
    assert [p.is_stop_grad() for p in model.parameters()] == stats
    # 64x64 is the resnet34 comparison's shape (its kernels are shared); resnet50 the smallest input
    forward_shape(model, (1, 3, 32, 32) if bottleneck else (2, 3, 64, 64))


@pytest.mark.parametrize("name", sorted(VGGS))
def test_vgg_builds_with_torchvision_names_and_runs(name):
    jt.seed(0)
    model = getattr(models, name)(init_weights=False)      # skip drawing 100M normals: names and shapes only
    depth = int(name[3:5])
    assert sorted(n for n, _ in model.named_parameters()) == sorted(vgg_keys(CFGS[depth], name.endswith("_bn")))
    assert trainable_count(model) == VGGS[name]
    assert isinstance(model, models.VGG) and model.classifier[0].weight.shape == (4096, 512 * 7 * 7)
    forward_shape(model, (2, 3, 32, 32))


# --- builders' arguments -------------------------------------------------------------------------
@pytest.mark.parametrize("build", [models.resnet18, models.Resnet50, models.vgg11, models.vgg16_bn])
def test_pretrained_is_refused_clearly(build):
    with pytest.raises(ValueError, match="pretrained=True.*downloads no weights"):
        build(pretrained=True)
    with pytest.raises(TypeError, match="pretrained must be True or False.*num_classes=10"):
        build(10)          # Jittor's first argument is pretrained, not num_classes


def test_vgg_arguments_are_checked():
    with pytest.raises(ValueError, match="cfg item.*'N'"):
        models.vgg.make_layers([64, "N"])
    with pytest.raises(TypeError, match="cfg must be a list"):
        models.vgg.make_layers("A")
    with pytest.raises(TypeError, match="features must be a Module"):
        models.VGG([nn.Conv2d(3, 64, 3)])
    model = models.vgg11(num_classes=3, in_channels=1, init_weights=False)
    assert model.features[0].weight.shape == (64, 1, 3, 3) and model.classifier[6].weight.shape == (3, 4096)
    with pytest.raises(ValueError, match="H and W >= 32.*got shape \\(1, 1, 16, 40\\)"):
        model(jt.randn(1, 1, 16, 40))


# --- against PyTorch twins -----------------------------------------------------------------------
def copy_weights(jt_model, torch_model):
    state = {k: v.detach().numpy() for k, v in torch_model.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    jt_model.load_state_dict(state, strict=True)     # every torchvision name has a jtmini twin


def torch_resnet34(num_classes):
    """torchvision's ResNet-34 from torch.nn layers (BasicBlock, downsample on width or stride)."""
    from torch import nn as tnn

    class Block(tnn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1, self.bn1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False), tnn.BatchNorm2d(cout)
            self.conv2, self.bn2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False), tnn.BatchNorm2d(cout)
            self.downsample = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False),
                                             tnn.BatchNorm2d(cout)) if stride != 1 or cin != cout else None

        def forward(self, x):
            out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
            return (out + (x if self.downsample is None else self.downsample(x))).relu()

    net = tnn.Module()
    net.conv1, net.bn1 = tnn.Conv2d(3, 64, 7, 2, 3, bias=False), tnn.BatchNorm2d(64)
    cin = 64
    for stage, (width, depth) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3)), 1):
        first = Block(cin, width, 1 if stage == 1 else 2)
        setattr(net, f"layer{stage}", tnn.Sequential(first, *[Block(width, width, 1) for _ in range(depth - 1)]))
        cin = width
    net.fc = tnn.Linear(512, num_classes)

    def forward(x):
        x = tnn.functional.max_pool2d(net.bn1(net.conv1(x)).relu(), 3, 2, 1)
        x = net.layer4(net.layer3(net.layer2(net.layer1(x))))
        return net.fc(x.mean((2, 3)))
    return net, forward


def test_resnet34_forward_and_backward_match_pytorch():
    """In float64: 33 ReLUs see inputs as close as 1e-5 to 0 (in layer4 too, whose BatchNorm
    averages 8 values a channel), so float32 rounding that differs from PyTorch's (Winograd's
    convolutions) flips a ReLU and moves whole gradients by 1e-2. The float32 kernels are
    checked layer by layer (test_nn, test_winograd_conv); this checks the model's structure."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    ref, ref_forward = torch_resnet34(num_classes=1000)
    ref.double()
    model = models.resnet34(num_classes=1000)
    copy_weights(model, ref)
    model.float64()
    x = randn(2, 3, 64, 64).astype(np.float64)  # layer4's BatchNorm then sees 8 values a channel, not an ill-conditioned 2
    w = np.random.default_rng(1).uniform(0.5, 1.5, (2, 1000))
    tx = torch.tensor(x, requires_grad=True)
    t_out = ref_forward(tx)
    (t_out * torch.tensor(w)).sum().backward()
    jx = jt.array(x)
    out = model(jx)
    trainable = [(n, p) for n, p in model.named_parameters() if not p.is_stop_grad()]
    grads = jt.grad((out * jt.array(w)).sum(), [jx] + [p for _, p in trainable])
    jt.sync([out] + grads)      # one schedule: read one by one, each gradient would rerun the shared backward
    assert out.dtype == "float64" and grads[0].dtype == "float64"
    assert rel_err(out.numpy(), t_out.detach().numpy()) <= TOL
    assert rel_err(grads[0].numpy(), tx.grad.numpy()) <= TOL, "input gradient"
    t_params = dict(ref.named_parameters())
    for (name, _), g in zip(trainable, grads[1:]):
        assert rel_err(g.numpy(), t_params[name].grad.numpy()) <= TOL, f"gradient of {name}"


def torch_vgg11_bn(num_classes):
    """torchvision's VGG-11-BN from torch.nn layers (same indices in features and classifier)."""
    from torch import nn as tnn
    layers, cin = [], 3
    for v in CFGS[11]:
        if v == "M":
            layers.append(tnn.MaxPool2d(2, 2))
        else:
            layers += [tnn.Conv2d(cin, v, 3, padding=1), tnn.BatchNorm2d(v), tnn.ReLU()]
            cin = v
    net = tnn.Module()
    net.features, net.avgpool = tnn.Sequential(*layers), tnn.AdaptiveAvgPool2d(7)
    net.classifier = tnn.Sequential(tnn.Linear(25088, 4096), tnn.ReLU(), tnn.Dropout(), tnn.Linear(4096, 4096),
                                    tnn.ReLU(), tnn.Dropout(), tnn.Linear(4096, num_classes))
    return net, lambda x: net.classifier(net.avgpool(net.features(x)).flatten(1))


def test_vgg11_bn_init_and_eval_forward_match_pytorch():
    torch = pytest.importorskip("torch")
    jt.seed(0)
    model = models.vgg11_bn(num_classes=1000)           # torchvision's initialisation (init_weights=True)
    conv, fc = model.features[4].weight.numpy(), model.classifier[3].weight.numpy()
    assert abs(conv.std() / math.sqrt(2 / (128 * 9)) - 1) < 0.02 and abs(fc.std() / 0.01 - 1) < 0.01
    assert not model.features[4].bias.numpy().any() and not model.classifier[6].bias.numpy().any()
    torch.manual_seed(0)
    ref, ref_forward = torch_vgg11_bn(num_classes=1000)
    with torch.no_grad():                           # running statistics away from (0, 1)
        for m in ref.features:
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2), m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.2, 0.2)
    copy_weights(model, ref)
    ref.eval(), model.eval()
    x = randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = ref_forward(torch.tensor(x)).numpy()
    assert rel_err(model(jt.array(x)).numpy(), expected) <= TOL


# --- init ----------------------------------------------------------------------------------------
def test_int_shapes_and_eye():
    assert init.constant(3, "float32", 1.0).numpy().tolist() == [1.0, 1.0, 1.0]
    assert init.zero(4).shape == (4,) and init.one((2, 3)).numpy().sum() == 6
    assert init.one(2, "int32").dtype == "int32" and init.zero([2, 2]).shape == (2, 2)
    assert init.uniform(5).shape == (5,) and init.gauss(5, "float64").dtype == "float64"
    assert np.array_equal(init.eye(3).numpy(), np.eye(3, dtype=np.float32))
    assert np.array_equal(init.eye((2, 4), "int32").numpy(), np.eye(2, 4, dtype=np.int32))
    w = jt.randn(3, 3)
    assert init.eye_(w) is w and np.array_equal(w.numpy(), np.eye(3))
    for bad, error in [((2, 2, 2), ValueError), ("3", TypeError), (2.0, TypeError), ((2, -1), ValueError)]:
        with pytest.raises(error, match="shape"):
            init.eye(bad)
    with pytest.raises(ValueError, match="at least 2 dims"):
        init.xavier_uniform(8)


def test_random_initialisers_statistics():
    jt.seed(0)
    u = init.uniform(100_000, "float32", -2.0, 4.0).numpy()
    assert u.min() >= -2 and u.max() < 4 and abs(u.mean() - 1) < 0.03 and abs(u.std() - math.sqrt(3)) < 0.02
    g = init.gauss(100_000, "float32", 1.0, 0.5).numpy()
    assert abs(g.mean() - 1) < 0.01 and abs(g.std() - 0.5) < 0.01
    fan_in, fan_out = 64 * 9, 128 * 9
    ku = init.kaiming_uniform((128, 64, 3, 3), nonlinearity="relu").numpy()
    assert ku.shape == (128, 64, 3, 3) and np.abs(ku).max() <= math.sqrt(6 / fan_in)
    assert abs(ku.std() / math.sqrt(2 / fan_in) - 1) < 0.02
    kn = init.kaiming_normal((128, 64, 3, 3), "float64", mode="fan_out", nonlinearity="relu").numpy()
    assert kn.dtype == np.float64 and abs(kn.std() / math.sqrt(2 / fan_out) - 1) < 0.02
    xg = init.xavier_gauss((300, 200), gain=2.0).numpy()
    assert abs(xg.std() / (2 * math.sqrt(2 / 500)) - 1) < 0.02
    v = jt.zeros(256, 64)
    assert init.kaiming_uniform_(v, a=0.2) is v        # fan_in 64: bound sqrt(3) * gain / 8
    bound = math.sqrt(3) * init.calculate_gain("leaky_relu", 0.2) / 8
    assert np.abs(v.numpy()).max() <= bound and abs(v.numpy().std() / (bound / math.sqrt(3)) - 1) < 0.02
    r = init.relu_invariant_gauss_(jt.zeros(512, 32), mode="fan_out").numpy()
    assert abs(r.std() / math.sqrt(2 / 512) - 1) < 0.02
    assert np.abs(init.invariant_uniform_(jt.zeros(16, 400)).numpy()).max() <= 0.05
    assert init.calculate_gain("conv3d") == 1 and init.calculate_gain("selu") == 0.75
    with pytest.raises(ValueError, match="negative slope"):
        init.calculate_gain("leaky_relu", "steep")
